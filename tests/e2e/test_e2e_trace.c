/*
 * The start-up trace (common/trace.c, docs/runtime.md "Start-up trace"),
 * through the kdc binary:
 *   - cpu_run: `kdc run` of a CPU plan with KDC_TRACE_STARTUP=1 prints its
 *     phases in order, one located line each ("kdc: startup: <ms> ms <+ms>
 *     ms  <phase>"), the times since the process started never decreasing
 *     and each delta what the times say; without the variable (or with 0)
 *     stderr stays empty;
 *   - cuda_plan: a CUDA plan's run reaches the driver without LLVM or a CPU
 *     JIT (no "CPU JIT" line; on a machine without a GPU it stops at the
 *     driver with the usual error, the trace ending with "exit (status 3)").
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "e2e/e2e_util.h"

/* Checks every "kdc: startup:" line of |err|: times not decreasing, deltas
 * consistent; the phases in |want| appear in that order.  Returns the
 * number of trace lines. */
static int check_trace(const char *err, const char *const *want) {
  int n = 0, w = 0;
  double prev = -1;
  for (const char *l = err; *l;) {
    size_t len = strcspn(l, "\n");
    char line[600];
    snprintf(line, sizeof line, "%.*s", (int)(len < 590 ? len : 590), l);
    double t, d;
    int at = 0;
    if (sscanf(line, "kdc: startup: %lf ms %lf ms %n", &t, &d, &at) == 2 && at > 0) {
      if (t < prev - 1e-9) fail_msg("time went back: %s", line);
      if (prev >= 0 && (d < -1e-9 || d > t - prev + 0.15))  /* printed to 0.1 ms */
        fail_msg("delta %.1f but %.1f ms since the line before: %s", d, t - prev, line);
      prev = t;
      n++;
      if (want[w] && strstr(line + at, want[w])) w++;
    } else if (strncmp(line, "kdc: error: ", 12)) {
      fail_msg("not a trace line: %s", line);
    }
    l += len + (l[len] == '\n');
  }
  if (want[w]) fail_msg("phase \"%s\" missing or out of order in\n%s", want[w], err);
  return n;
}

static char *mnist_plan(const char *name, const char *target) {
  char *model = e2e_src("examples/mnist_mlp/model.json"), *plan = e2e_path(name);
  e2e_result r;
  setenv("KDC_PTXAS", "none", 1);  /* the cubin is test_cubin's; PTX only is faster */
  if (target) e2e_kdc(&r, "compile", model, "-o", plan, "--batch", "8", "--target", target, NULL);
  else e2e_kdc(&r, "compile", model, "-o", plan, "--batch", "8", NULL);
  unsetenv("KDC_PTXAS");
  if (r.status != 0) fail_msg("compile: %s", r.err);
  free(model);
  return plan;
}

static void test_cpu_run(void **state) {
  (void)state;
  char *plan = mnist_plan("cpu.plan", NULL), *x = e2e_src("examples/mnist_mlp/input.npy");
  char *y = e2e_path("y.npy");
  e2e_result r;
  static const char *const want[] = {
      "libraries loaded", "main entered (run)", "plan checked for placement", "plan load:",
      "plan mapped + checksum", "program + weights decoded", "CPU JIT", "thread pool",
      "inputs read (1 .npy)", "predict done", "outputs written", "plan freed", "exit (status 0)",
      NULL};
  setenv("KDC_TRACE_STARTUP", "1", 1);
  e2e_kdc(&r, "run", plan, "--input", x, "--output", y, NULL);
  unsetenv("KDC_TRACE_STARTUP");
  if (r.status != 0) fail_msg("%s", r.err);
  assert_int_equal(check_trace(r.err, want), 13);
  setenv("KDC_TRACE_STARTUP", "0", 1);
  e2e_kdc(&r, "run", plan, "--input", x, "--output", y, NULL);
  unsetenv("KDC_TRACE_STARTUP");
  assert_int_equal(r.status, 0);
  assert_string_equal(r.err, "");
  e2e_kdc(&r, "run", plan, "--input", x, "--output", y, NULL);
  assert_int_equal(r.status, 0);
  assert_string_equal(r.err, "");
  free(plan), free(x), free(y);
}

static void test_cuda_plan(void **state) {
  (void)state;
  char *plan = mnist_plan("cuda.plan", "cuda"), *x = e2e_src("examples/mnist_mlp/input.npy");
  char *y = e2e_path("yc.npy");
  e2e_result r;
  setenv("KDC_TRACE_STARTUP", "1", 1);
  e2e_kdc(&r, "run", plan, "--input", x, "--output", y, NULL);
  unsetenv("KDC_TRACE_STARTUP");
  assert_null(strstr(r.err, "CPU JIT"));
  if (r.status == 0) {  /* a GPU: the module and the first run */
    static const char *const want[] = {"plan checked for placement (mapped, checksum, program "
                                       "decoded; a CUDA plan)", "cuInit (ok)",
                                       "no LLVM, no CPU JIT (a CUDA plan)", "module loaded: PTX",
                                       "first run: outputs downloaded", "exit (status 0)", NULL};
    check_trace(r.err, want);
  } else {
    static const char *const want[] = {"plan checked for placement (mapped, checksum, program "
                                       "decoded; a CUDA plan)", "exit (status", NULL};
    check_trace(r.err, want);
    assert_non_null(strstr(r.err, "kdc: error: "));
  }
  free(plan), free(x), free(y);
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_cpu_run), cmocka_unit_test(test_cuda_plan)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
