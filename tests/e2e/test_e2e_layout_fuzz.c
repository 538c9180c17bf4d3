/*
 * The random-layout differential tester (tests/e2e/layout_fuzz.h;
 * docs/testing.md, "The layout fuzzer"): random Keras layouts over meshes of
 * rank 1-4 on every example, predict and three train_steps (SGD or Adam, MSE,
 * a partial batch) of the partitioned program on every device (SPMD
 * interpreter) against the one-device module (reference interpreter):
 * predict |d| <= 1e-5 + 1e-4 |ref|, losses and final state (weights,
 * slots, iterations bitwise) |d| <= 1e-5 + 1e-4 |ref|.
 *
 *   test_regressions: every checked-in case of tests/e2e/layout_fuzz_cases/
 *     (the reproducers and every failure the fuzzer found) must pass,
 *     and so must its compiled CPU plans (runtime, JIT: predict, and three
 *     train_steps through the runtime's training API) unless the file says
 *     "plan": false (JIT costs seconds a plan; fuzzer finds of a cause
 *     that a reproducer already runs as plans);
 *   test_fixed_seeds: seeds 1..N (N below; the sanitizer build samples
 *     fewer) must have no internal error and no mismatch; every 125th seed
 *     also runs as compiled plans (predict, and three train_steps through
 *     the runtime's training API) against the same references.
 *
 * On demand: KDC_LAYOUT_FUZZ=FIRST:COUNT runs seeds FIRST..FIRST+COUNT-1
 * instead of the fixed ones (figures per mesh rank on stderr, every 500
 * seeds and at the end); KDC_LAYOUT_FUZZ_PLAN_EVERY=N compiles every N-th
 * seed's plans (0: none);
 * KDC_LAYOUT_FUZZ_SAVE=DIR writes every failing case there as NAME.json,
 * ready to be checked in as a regression case; KDC_LAYOUT_FUZZ_VERBOSE=1
 * prints every case with its JSON (a case file).  A refused case (a
 * located user error such as an indivisible RNN unit split) is counted,
 * not failed.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "e2e_util.h"
#include "layout_fuzz.h"
#include "test_sampling.h"

/* Release: seeds 1..FIXED_SEEDS (about 0.07 s of CPU each: compiling and
 * interpreting, no JIT), every PLAN_EVERY-th also as compiled plans (JIT,
 * seconds each); the sanitizer build (0.9 s of CPU a case): SAMPLED_SEEDS
 * seeds 1, 16, 31, ... (a stride of 15 gives every example twice and
 * every mesh rank), no plans. */
enum { FIXED_SEEDS = 1000, SAMPLED_SEEDS = 28, SAMPLED_STRIDE = 15, PLAN_EVERY = 125,
       MAX_CASES = 64 };

static void save_failure(const lf_case *c) {
  const char *dir = getenv("KDC_LAYOUT_FUZZ_SAVE");
  if (!dir || !*dir) return;
  char name[64];
  snprintf(name, sizeof name, "seed%llu.json", (unsigned long long)c->seed);
  char *path = e2e_join(dir, name), *json = lf_case_json(c);
  FILE *f = fopen(path, "w");
  if (f) fputs(json, f), fclose(f);
  free(path), free(json);
}

static void test_regressions(void **state) {
  (void)state;
  char *names[MAX_CASES];
  int n = e2e_case_names("tests/e2e/layout_fuzz_cases", names, MAX_CASES, 0);
  int fails = 0;
  for (int i = 0; i < n; i++) {
    char rel[256];
    snprintf(rel, sizeof rel, "tests/e2e/layout_fuzz_cases/%s", names[i]);
    char *path = e2e_src(rel);
    lf_case c;
    lf_case_read(path, &c);
    lf_outcome o;
    lf_check(&c, &o);
    double plan = o.result == LF_OK && !c.no_plan ? lf_check_plan(&c) : 0;
    char pt[32] = "not run";
    if (o.result == LF_OK && !c.no_plan) snprintf(pt, sizeof pt, "%.3g", plan);
    fprintf(stderr, "%s: %s on %s (%s): %s, predict %.3g, fit %.3g, plans %s x tol%s%s\n",
            names[i], c.example, c.mesh, c.axes, o.result == LF_OK ? "ok" : "FAIL", o.err_predict,
            o.err_fit, pt, o.msg[0] ? ": " : "", o.msg);
    fails += o.result != LF_OK || plan > 1; /* all of them are run, then the verdict */
    lf_case_free(&c);
    free(path), free(names[i]);
  }
  lf_cleanup();
  assert_int_equal(fails, 0);
}

/* The figures per mesh rank of |count| seeds from |first| by |stride|. */
static void report(uint64_t first, uint64_t count, uint64_t stride, const int *tried,
                   const int *ok, const int *refused, const int *bad, int layouts) {
  for (int r = 1; r <= 4; r++)
    fprintf(stderr, "layout fuzz: mesh rank %d: %d tried, %d equal one device, %d refused, "
                    "%d failed\n", r, tried[r], ok[r], refused[r], bad[r]);
  fprintf(stderr, "layout fuzz: %llu seeds from %llu by %llu, %d with a layout.json\n",
          (unsigned long long)count, (unsigned long long)first, (unsigned long long)stride,
          layouts);
}

static void test_fixed_seeds(void **state) {
  (void)state;
  uint64_t first = 1, count = kdc_test_sampled() ? SAMPLED_SEEDS : FIXED_SEEDS;
  uint64_t stride = kdc_test_sampled() ? SAMPLED_STRIDE : 1;
  const char *env = getenv("KDC_LAYOUT_FUZZ");
  if (env && *env) {
    unsigned long long a = 0, b = 0;
    assert_int_equal(sscanf(env, "%llu:%llu", &a, &b), 2);
    first = a, count = b, stride = 1;
  }
  bool verbose = getenv("KDC_LAYOUT_FUZZ_VERBOSE") != NULL;
  uint64_t plan_every = kdc_test_sampled() ? 0 : PLAN_EVERY;
  const char *pe = getenv("KDC_LAYOUT_FUZZ_PLAN_EVERY");
  if (pe && *pe) plan_every = strtoull(pe, NULL, 10);
  int tried[5] = {0}, ok[5] = {0}, refused[5] = {0}, bad[5] = {0}, layouts = 0;
  for (uint64_t k = 0; k < count; k++) {
    uint64_t s = first + k * stride;
    lf_case c;
    lf_case_make(s, &c);
    lf_outcome o;
    lf_check(&c, &o);
    if (o.result == LF_OK && plan_every && s % plan_every == 0) { /* the compiled plans too */
      double e = lf_check_plan(&c);
      if (e > 1) {
        o.result = LF_MISMATCH;
        snprintf(o.msg, sizeof o.msg, "compiled plan differs from one device: %.3g x tol", e);
      }
    }
    tried[c.rank]++;
    layouts += c.layout != NULL;
    if (o.result == LF_OK) ok[c.rank]++;
    else if (o.result == LF_REFUSED) refused[c.rank]++;
    else bad[c.rank]++;
    if (verbose || o.result != LF_OK) {
      char *json = lf_case_json(&c);
      fprintf(stderr, "seed %llu: %s on %s (%s) %s: %s%s%s\n%s", (unsigned long long)s, c.example,
              c.mesh, c.axes, c.optimizer,
              o.result == LF_OK        ? "ok"
              : o.result == LF_REFUSED ? "refused"
              : o.result == LF_INTERNAL ? "INTERNAL ERROR"
                                        : "MISMATCH",
              o.msg[0] ? ": " : "", o.msg, json); /* the case, to replay or check in */
      free(json);
    }
    if (o.result == LF_INTERNAL || o.result == LF_MISMATCH) save_failure(&c);
    lf_case_free(&c);
    if ((k + 1) % 500 == 0 && k + 1 < count) /* progress of long runs */
      report(first, k + 1, stride, tried, ok, refused, bad, layouts);
  }
  report(first, count, stride, tried, ok, refused, bad, layouts);
  int all_bad = 0;
  for (int r = 1; r <= 4; r++) all_bad += bad[r];
  lf_cleanup();
  assert_int_equal(all_bad, 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_regressions),
      cmocka_unit_test(test_fixed_seeds),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
