/*
 * End to end on the checked-in cases of the randomized differential tester
 * (tests/reference/fuzz.js; tests/e2e/fuzz_cases/<seed>/ holds what
 * `node fuzz.js gen SEED DIR` wrote: random Keras models with random
 * weights, their TF.js predictions and a random layout). Each case runs
 * the fixed matrix of fuzz.js' RUNS through the kdc binary: the Keras 3, TF.js
 * and tf.keras 2 JSON on mesh 1, DataParallel on mesh 8, and the case's
 * layout.json on mesh 2x4 (Keras 3 and TF.js JSON), each compared with the
 * TF.js output: |d| <= 1e-5 + 1e-4 |ref|.  The big sweep is documented in
 * tests/reference/README.md.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "e2e_util.h"
#include "test_sampling.h"

enum { MAX_CASES = 64, MAX_IO = 4 };

typedef struct fz_run {
  const char *model; /* model.json, model_tfjs.json (own weights) or model_tk2.json */
  const char *mesh;
  bool layout;
} fz_run;

static const fz_run runs[] = {
    {"model.json", "1", false},      {"model_tfjs.json", "1", false}, {"model_tk2.json", "1", false},
    {"model.json", "8", false},      {"model_tfjs.json", "2x4", true}, {"model.json", "2x4", true},
};

/* dir/base.npy when there is one such file (n == 1), else dir/base<i>.npy. */
static char *io_file(const char *dir, const char *base, int n, int i) {
  char name[64];
  if (n == 1) snprintf(name, sizeof name, "%s.npy", base);
  else snprintf(name, sizeof name, "%s%d.npy", base, i);
  return e2e_join(dir, name);
}

/* Counts x0.npy, x1.npy ... (or 1 for a lone x.npy). */
static int count_files(const char *dir, const char *base) {
  char *p = io_file(dir, base, 1, 0);
  bool single = e2e_exists(p);
  free(p);
  if (single) return 1;
  int n = 0;
  for (;; n++) {
    p = io_file(dir, base, 2, n);
    bool ok = e2e_exists(p);
    free(p);
    if (!ok) break;
  }
  return n;
}

static void check_run(const char *name, const char *dir, const fz_run *run) {
  int n_in = count_files(dir, "input"), n_out = count_files(dir, "expected");
  assert_true(n_in >= 1 && n_in <= MAX_IO && n_out >= 1 && n_out <= MAX_IO);
  char tag[160];
  bool tfjs = strcmp(run->model, "model_tfjs.json") == 0;
  snprintf(tag, sizeof tag, "%s: %s mesh %s%s", name, run->model, run->mesh, run->layout ? " layout.json" : "");
  char plan_name[128];
  snprintf(plan_name, sizeof plan_name, "%s-%.6s-%s-%d.plan", name, run->model + 6, run->mesh, run->layout);
  char *plan = e2e_path(plan_name);
  char *model = e2e_join(dir, run->model);
  char *weights = e2e_join(dir, "weights.safetensors"), *layout = e2e_join(dir, "layout.json");
  const char *argv[32];
  int n = 0;
  argv[n++] = "compile";
  argv[n++] = model;
  if (!tfjs) {
    argv[n++] = "--weights";
    argv[n++] = weights;
  }
  argv[n++] = "--batch";
  argv[n++] = "8";
  argv[n++] = "--mesh";
  argv[n++] = run->mesh;
  if (run->layout) {
    argv[n++] = "--layout";
    argv[n++] = layout;
  }
  argv[n++] = "-o";
  argv[n++] = plan;
  argv[n] = NULL;
  e2e_result r;
  e2e_kdcv(&r, argv);
  if (r.status != 0) fprintf(stderr, "%s: compile: %s", tag, r.err);
  assert_int_equal(r.status, 0);

  char *ins[MAX_IO], *outs[MAX_IO];
  n = 0;
  argv[n++] = "run";
  argv[n++] = plan;
  argv[n++] = "--threads";
  argv[n++] = "1";
  for (int i = 0; i < n_in; i++) {
    ins[i] = io_file(dir, "input", n_in, i);
    argv[n++] = "--input";
    argv[n++] = ins[i];
  }
  for (int i = 0; i < n_out; i++) {
    char out_name[160];
    snprintf(out_name, sizeof out_name, "%s-out%d.npy", plan_name, i);
    outs[i] = e2e_path(out_name);
    argv[n++] = "--output";
    argv[n++] = outs[i];
  }
  argv[n] = NULL;
  e2e_kdcv(&r, argv);
  if (r.status != 0) fprintf(stderr, "%s: run: %s", tag, r.err);
  assert_int_equal(r.status, 0);

  /* tf.keras 2 / TF.js semantics differ from Keras 3 only for hard_sigmoid;
   * such cases carry expected_tfjs*.npy for the TF.js and tf.keras 2 JSON */
  bool own_tfjs = strcmp(run->model, "model.json") != 0 && count_files(dir, "expected_tfjs") == n_out;
  for (int i = 0; i < n_out; i++) {
    char *ef = io_file(dir, own_tfjs ? "expected_tfjs" : "expected", n_out, i);
    kdc_npy_array got, want;
    assert_null(kdc_npy_read(outs[i], &got));
    assert_null(kdc_npy_read(ef, &want));
    double err = e2e_npy_compare(&got, &want, 1e-5, 1e-4);
    if (err > 1) fprintf(stderr, "%s: output %d: error %.3g x tolerance vs TF.js\n", tag, i, err);
    assert_true(err <= 1);
    kdc_npy_free(&got);
    kdc_npy_free(&want);
    free(ef);
    free(outs[i]);
  }
  for (int i = 0; i < n_in; i++) free(ins[i]);
  free(plan);
  free(model);
  free(weights);
  free(layout);
}

static void test_fuzz_cases(void **state) {
  (void)state;
  char *root = e2e_src("tests/e2e/fuzz_cases");
  char *names[MAX_CASES];
  /* the sanitizer build checks memory, not numerics: two cases */
  int n = e2e_case_names("tests/e2e/fuzz_cases", names, MAX_CASES, kdc_test_sampled() ? 2 : 0);
  for (int c = 0; c < n; c++) {
    char *dir = e2e_join(root, names[c]);
    for (size_t k = 0; k < sizeof runs / sizeof runs[0]; k++) check_run(names[c], dir, &runs[k]);
    free(dir);
    free(names[c]);
  }
  free(root);
}

/* ModelParallel layouts as users write them (keras-io distribution guide,
 * keras-hub get_layout_map rules, regex keys), on the meshes the Keras guide
 * lists: each compiles and gives the one-device (TF.js) numbers, or, where a
 * dim does not divide, exit 2 naming the layout key. */
typedef struct user_layout {
  const char *example, *text;
} user_layout;

static const user_layout user_layouts[] = {
    {"mnist_mlp", "{\"batch_dim_name\": \"data\", \"layout_map\": {\".*d1.*kernel\": [null, \"model\"], "
                  "\".*d2.*kernel\": [\"model\", null], \".*bias\": []}}"},
    {"transformer_block",
     "{\"batch_dim_name\": \"data\", \"layout_map\": {"
     "\"mha.*(query|key|value).kernel\": [null, \"model\", null], "
     "\"mha.*(query|key|value).bias\": [\"model\", null], "
     "\"mha.*attention_output.kernel\": [\"model\", null, null], "
     "\".*ffn1.*kernel\": [\"data\", \"model\"], \".*ffn1.*bias\": [\"model\"], "
     "\".*ffn2.*kernel\": [\"model\", \"data\"]}}"},
};

static void test_user_layouts(void **state) {
  (void)state;
  static const char *const all[] = {"2x4", "4x2", "1x8", "8x1", "2x2x2"};
  static const char *const sampled[] = {"2x4", "2x2x2"};
  const char *const *meshes = kdc_test_sampled() ? sampled : all;
  size_t n_meshes = kdc_test_sampled() ? 2 : sizeof all / sizeof *all;
  for (size_t l = 0; l < sizeof user_layouts / sizeof user_layouts[0]; l++) {
    char rel[128];
    snprintf(rel, sizeof rel, "examples/%s", user_layouts[l].example);
    char *dir = e2e_src(rel), *lp = e2e_path("user_layout.json");
    FILE *f = fopen(lp, "wb");
    assert_non_null(f);
    fputs(user_layouts[l].text, f);
    fclose(f);
    char *model = e2e_join(dir, "model.json"), *w = e2e_join(dir, "weights.safetensors");
    char *in = e2e_join(dir, "input.npy"), *want_p = e2e_join(dir, "expected.npy");
    for (size_t m = 0; m < n_meshes; m++) {
      char *plan = e2e_path("user.plan"), *out = e2e_path("user.npy");
      e2e_result r;
      const char *axes = strcmp(meshes[m], "2x2x2") == 0 ? "data,model,extra" : NULL;
      if (axes)
        e2e_kdc(&r, "compile", model, "--weights", w, "--batch", "16", "--mesh", meshes[m], "--axes", axes,
                "--layout", lp, "-o", plan, NULL);
      else
        e2e_kdc(&r, "compile", model, "--weights", w, "--batch", "16", "--mesh", meshes[m], "--layout", lp,
                "-o", plan, NULL);
      if (l == 1 && strcmp(meshes[m], "1x8") == 0) {
        /* 4 heads over model=8 */
        if (r.status != 2) fprintf(stderr, "1x8: %s", r.err);
        assert_int_equal(r.status, 2);
        assert_non_null(strstr(r.err, "layout_map[\"mha.*(query|key|value).kernel\"]"));
        assert_non_null(strstr(r.err, "(size 4) is not divisible by mesh axis \"model\" (size 8)"));
        assert_false(e2e_exists(plan));
      } else {
        if (r.status != 0) fprintf(stderr, "%s on %s: %s", user_layouts[l].example, meshes[m], r.err);
        assert_int_equal(r.status, 0);
        e2e_kdc(&r, "run", plan, "--threads", "1", "--input", in, "--output", out, NULL);
        assert_int_equal(r.status, 0);
        kdc_npy_array got, want;
        assert_null(kdc_npy_read(out, &got));
        assert_null(kdc_npy_read(want_p, &want));
        double err = e2e_npy_compare(&got, &want, 1e-5, 1e-4);
        if (err > 1) fprintf(stderr, "%s on %s: %.3g x tolerance\n", user_layouts[l].example, meshes[m], err);
        assert_true(err <= 1);
        kdc_npy_free(&got);
        kdc_npy_free(&want);
        remove(plan);
      }
      free(plan);
      free(out);
    }
    free(dir), free(lp), free(model), free(w), free(in), free(want_p);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_fuzz_cases),
      cmocka_unit_test(test_user_layouts),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
