/*
 * End to end, the regression corpus of the bad-input fuzzer
 * (tests/fuzz/badin.py, docs/testing.md): every case in
 * tests/e2e/bad_inputs/ ends with exit status 2, exactly one line on
 * stderr ("kdc: error: ...") containing each of the case's #expect texts
 * (the file and the place), and no output file: none created, and a
 * previous one (every other case starts with one) left byte-identical.
 *
 * A case is NAME.args: directives, then the kdc arguments, one per line
 * (an empty line is an empty argument).  Substituted in the arguments:
 *   @DIR    tests/e2e/bad_inputs (the case's own input files)
 *   @SRC    the source tree
 *   @OUT    the output path, in the test's temporary directory
 *   @PLAN   examples/mnist_mlp compiled for batch 37 (run, inspect)
 *   @TRAIN  the same with --loss categorical_crossentropy, batch 32
 *   @MUT    a copy of @PLAN (or @TRAIN after "#from TRAIN") with the
 *           case's "#patch OFFSET HEXBYTES" applied and, after
 *           "#checksum", the checksum recomputed (a crafted plan rather
 *           than a corrupted one: docs/plan-format.md)
 * Directives: "#expect TEXT" (repeatable), "#from PLAN|TRAIN",
 * "#patch OFFSET HEX", "#checksum", "# ..." (a comment).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/io.h"
#include "e2e_util.h"

#define CORPUS "tests/e2e/bad_inputs"
#define MAX_CASES 256
#define MAX_ARGS 48

static char *plan_path[2]; /* @PLAN, @TRAIN: compiled on first use */

static const char *seed_plan(int train) {
  if (plan_path[train]) return plan_path[train];
  char *m = e2e_src("examples/mnist_mlp/model.json"), *w = e2e_src("examples/mnist_mlp/weights.safetensors");
  char *p = e2e_path(train ? "seed_train.plan" : "seed.plan");
  e2e_result r;
  if (train)
    e2e_kdc(&r, "compile", m, "--weights", w, "--batch", "32", "--loss", "categorical_crossentropy", "-o", p,
            NULL);
  else
    e2e_kdc(&r, "compile", m, "--weights", w, "--batch", "37", "-o", p, NULL);
  if (r.status != 0) fprintf(stderr, "seed plan: %s", r.err);
  assert_int_equal(r.status, 0);
  free(m);
  free(w);
  plan_path[train] = p;
  return p;
}

/* |s| with every @KEY replaced; malloc'd. */
static char *substitute(const char *s, const char *const *keys, const char *const *vals, int n) {
  size_t cap = strlen(s) + 1;
  for (int k = 0; k < n; k++) cap += vals[k] ? strlen(vals[k]) * 4 : 0;
  char *out = malloc(cap), *o = out;
  assert_non_null(out);
  while (*s) {
    int k = 0;
    while (k < n && (!vals[k] || strncmp(s, keys[k], strlen(keys[k])) != 0)) k++;
    if (k < n) {
      o += sprintf(o, "%s", vals[k]);
      s += strlen(keys[k]);
    } else {
      *o++ = *s++;
    }
  }
  *o = 0;
  return out;
}

/* Writes @PLAN / @TRAIN with the case's patches to |dst|. */
static void write_mutant(const char *dst, int train, char **patches, int n_patches, bool checksum) {
  size_t n;
  void *d = NULL;
  assert_null(kdc_file_read_all(seed_plan(train), &d, &n));
  uint8_t *b = d;
  for (int i = 0; i < n_patches; i++) {
    char *end;
    unsigned long long off = strtoull(patches[i], &end, 0);
    for (const char *h = end + strspn(end, " "); h[0] && h[1]; h += 2, off++) {
      unsigned v;
      assert_int_equal(sscanf(h, "%2x", &v), 1);
      assert_true(off < n);
      b[off] = (uint8_t)v;
    }
  }
  if (checksum && n >= 56) {
    kdc_hash64_state s;
    kdc_hash64_init(&s, 0);
    kdc_hash64_update(&s, b, 48);
    kdc_hash64_update(&s, b + 56, n - 56);
    uint64_t h = kdc_hash64_digest(&s);
    for (int i = 0; i < 8; i++) b[48 + i] = (uint8_t)(h >> (8 * i));
  }
  FILE *f = fopen(dst, "wb");
  assert_non_null(f);
  assert_int_equal(fwrite(b, 1, n, f), n);
  fclose(f);
  free(d);
}

static bool same_content(const char *path, const char *text) {
  size_t n;
  void *d = NULL;
  kdc_status st = kdc_file_read_all(path, &d, &n);
  if (st) {
    kdc_status_free(st);
    return false;
  }
  bool same = n == strlen(text) && memcmp(d, text, n) == 0;
  free(d);
  return same;
}

static int run_case(const char *name, int index) {
  char *dir = e2e_src(CORPUS), *path = e2e_join(dir, name);
  size_t n;
  void *d = NULL;
  assert_null(kdc_file_read_all(path, &d, &n));
  char *text = realloc(d, n + 1);
  assert_non_null(text);
  text[n] = 0;
  char stem[256];
  snprintf(stem, sizeof stem, "%.*s", (int)(strlen(name) - 5), name);
  char out_name[300], mut_name[300];
  snprintf(out_name, sizeof out_name, "%s.out", stem);
  snprintf(mut_name, sizeof mut_name, "%s.mut.plan", stem);
  char *out = e2e_path(out_name), *mut = e2e_path(mut_name), *src = e2e_src("");
  const char *keys[] = {"@DIR", "@SRC/", "@OUT", "@PLAN", "@TRAIN", "@MUT"};
  const char *vals[6] = {dir, src, out, NULL, NULL, mut};

  char *expect[8], *patches[16], *args[MAX_ARGS + 1];
  int n_expect = 0, n_patches = 0, n_args = 0, train = 0;
  bool checksum = false, uses_mut = false;
  for (char *line = text, *next; line && *line; line = next) {
    next = strchr(line, '\n');
    if (next) *next++ = 0;
    if (!strncmp(line, "#expect ", 8)) {
      assert_true(n_expect < 8);
      expect[n_expect++] = line + 8;
    } else if (!strncmp(line, "#patch ", 7)) {
      assert_true(n_patches < 16);
      patches[n_patches++] = line + 7;
    } else if (!strcmp(line, "#checksum")) {
      checksum = true;
    } else if (!strcmp(line, "#from TRAIN")) {
      train = 1;
    } else if (line[0] == '#') {
      assert_true(line[1] == ' ' || !strcmp(line, "#from PLAN"));
    } else {
      assert_true(n_args < MAX_ARGS);
      if (strstr(line, "@PLAN")) vals[3] = seed_plan(0);
      if (strstr(line, "@TRAIN")) vals[4] = seed_plan(1);
      if (strstr(line, "@MUT")) uses_mut = true;
      args[n_args++] = substitute(line, keys, vals, 6);
    }
  }
  args[n_args] = NULL;
  assert_true(n_args > 0 && n_expect > 0);
  if (uses_mut) write_mutant(mut, train, patches, n_patches, checksum);
  bool pre = index % 2 == 1;
  if (pre) {
    FILE *f = fopen(out, "wb");
    assert_non_null(f);
    fputs("SENTINEL", f);
    fclose(f);
  }
  e2e_result r;
  e2e_kdcv(&r, (const char *const *)args);
  bool ok = r.status == 2 && e2e_lines(r.err) == 1 && !strncmp(r.err, "kdc: error: ", 12);
  for (int i = 0; i < n_expect; i++) ok = ok && strstr(r.err, expect[i]);
  bool out_ok = pre ? same_content(out, "SENTINEL") : !e2e_exists(out);
  if (!ok || !out_ok)
    fprintf(stderr, "%s: status %d, output %s, stderr: %s\n", name, r.status,
            out_ok ? "ok" : (pre ? "clobbered" : "created"), r.err);
  remove(out);
  remove(mut);
  for (int i = 0; i < n_args; i++) free(args[i]);
  free(text);
  free(path);
  free(dir);
  free(src);
  free(out);
  free(mut);
  return ok && out_ok ? 0 : 1;
}

static void test_corpus(void **state) {
  (void)state;
  char *all[MAX_CASES * 2];
  int n = e2e_case_names(CORPUS, all, MAX_CASES * 2, 0), cases = 0, failed = 0;
  for (int i = 0; i < n; i++) {
    size_t len = strlen(all[i]);
    if (len > 5 && !strcmp(all[i] + len - 5, ".args")) failed += run_case(all[i], cases++);
    free(all[i]);
  }
  printf("bad_inputs: %d cases, %d failed\n", cases, failed);
  assert_true(cases > 0);
  assert_int_equal(failed, 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_corpus)};
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  free(plan_path[0]);
  free(plan_path[1]);
  return rc;
}
