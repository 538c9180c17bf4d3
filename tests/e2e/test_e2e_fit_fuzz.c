/*
 * End to end on the checked-in cases of the randomized differential tester
 * for training (tests/reference/fit_fuzz.js; tests/e2e/fit_fuzz_cases/<seed>/
 * holds what `node fit_fuzz.js gen SEED DIR` wrote: a random trainable Keras
 * model (one input, or two: the fit with one --x per input) whose
 * model.json carries the compile_config (loss, optimizer), its initial
 * weights, x.npy (x0.npy, x1.npy) / y.npy, a random layout for mesh 2x4, and the
 * Keras 3 reference training -- 3 epochs, shuffle off, a partial last batch
 * -- with a validation split in some -- as history.json and
 * final.safetensors).  Each case trains through the
 * kdc binary (`kdc compile` + `kdc run --fit --history --save-weights`) on
 * mesh 1 (with the case's --loss/--optimizer/--learning-rate flags when
 * case.json has them, else its compile_config), DataParallel on 8, and its
 * layout.json on 2x4.  Tolerances (tests/reference/README.md, "Training
 * fuzz"): every history entry (loss, per-output <name>_loss, batch_loss
 * and their val_ forms, the same keys as the reference) within 1e-6 +
 * 1e-4 |ref|, every final weight and moving statistic within 1e-4 + 1e-3
 * |ref|.  Several outputs: one --y per output (y0.npy, y1.npy ...).
 * A `noisy` case (random regularisation layers, whose draws are kdc's own)
 * has no reference fit: its plan's prediction from the initial weights
 * must equal expected*.npy (the random layers are identities at
 * inference; 1e-5 + 1e-4 |ref|), and the mesh-1 fit is the reference of
 * the other meshes (history and every F32 tensor of --save-weights,
 * optimizer slots too, same tolerances).  The sanitizer build trains two
 * cases, 41 and 111 (tests/test_sampling.h).
 */
#include <json-c/json.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/io.h"
#include "e2e_fit_util.h"
#include "e2e_util.h"
#include "test_sampling.h"

enum { MAX_CASES = 32, MAX_ARGS = 56, MAX_LOSSES = 512, MAX_INPUTS = 4, MAX_OUTPUTS = 4 };

static const double LOSS_ATOL = 1e-6, LOSS_RTOL = 1e-4, W_ATOL = 1e-4, W_RTOL = 1e-3;

typedef struct ff_run {
  const char *mesh;
  bool cli;    /* the case's kdc compile flags instead of its compile_config */
  bool layout; /* the case's layout.json */
} ff_run;

static const ff_run runs[] = {{"1", true, false}, {"8", false, false}, {"2x4", false, true}};

/* Every history entry of the reference |want| against |got| (history
 * JSON texts, the same keys in both): the worst error in tolerances
 * (LOSS_ATOL + LOSS_RTOL |ref|; the absolute part for a loss near 0, a
 * few ulps of the logits). */
static double loss_error(const char *got, const char *want, int epochs) {
  json_object *jg = json_tokener_parse(got), *jw = json_tokener_parse(want);
  assert_non_null(jg);
  assert_non_null(jw);
  assert_int_equal(json_object_object_length(jg), json_object_object_length(jw));
  double g[MAX_LOSSES], w[MAX_LOSSES], worst = 0;
  json_object_object_foreach(jw, key, val) {
    (void)val;
    int ng = e2e_json_numbers(got, key, g, MAX_LOSSES), nw = e2e_json_numbers(want, key, w, MAX_LOSSES);
    if (ng != nw) fprintf(stderr, "history key %s: %d values, the reference %d\n", key, ng, nw);
    assert_int_equal(ng, nw);
    assert_true(nw >= epochs);
    for (int i = 0; i < nw; i++) worst = fmax(worst, fabs(g[i] - w[i]) / (LOSS_ATOL + LOSS_RTOL * fabs(w[i])));
  }
  json_object_put(jg), json_object_put(jw);
  return worst;
}

/* Every tensor of the reference |want| against the same name in |got|:
 * the worst error in tolerances (W_ATOL + W_RTOL |ref|). */
static double weight_error(const char *got, const char *want, const char *tag) {
  kdc_safetensors *sg = NULL, *sw = NULL;
  assert_null(kdc_safetensors_open(got, &sg));
  assert_null(kdc_safetensors_open(want, &sw));
  double worst = 0;
  for (size_t k = 0; k < kdc_safetensors_count(sw); k++) {
    const kdc_st_tensor *tw = kdc_safetensors_get(sw, k);
    if (tw->dtype != KDC_IO_DTYPE_F32) continue; /* a noisy case's own <opt>/iteration */
    const kdc_st_tensor *tg = kdc_safetensors_find(sg, tw->name);
    if (!tg) fprintf(stderr, "%s: no %s in --save-weights\n", tag, tw->name);
    assert_non_null(tg);
    assert_int_equal(tg->nbytes, tw->nbytes);
    float *fg = malloc(tg->nbytes), *fw = malloc(tw->nbytes);
    assert_true(fg && fw);
    memcpy(fg, tg->data, tg->nbytes);
    memcpy(fw, tw->data, tw->nbytes);
    double e = e2e_f32_compare(fg, fw, tw->nbytes / 4, W_ATOL, W_RTOL);
    if (e > 1) fprintf(stderr, "%s: %s: %.3g x tolerance vs the reference\n", tag, tw->name, e);
    worst = fmax(worst, e);
    free(fg), free(fw);
  }
  kdc_safetensors_close(sg), kdc_safetensors_close(sw);
  return worst;
}

/* |dir|/x.npy, or x0.npy, x1.npy ... (|n| > 1), malloc'd into |out|. */
static void case_files(const char *dir, const char *base, int n, char **out) {
  for (int i = 0; i < n; i++) {
    char f[48];
    if (n == 1) snprintf(f, sizeof f, "%s.npy", base);
    else snprintf(f, sizeof f, "%s%d.npy", base, i);
    out[i] = e2e_join(dir, f);
  }
}

static int desc_int(json_object *desc, const char *key, int dflt) {
  json_object *v;
  return json_object_object_get_ex(desc, key, &v) ? json_object_get_int(v) : dflt;
}

/* A noisy case's plan (compiled from the initial weights) predicts
 * expected*.npy: the random layers are identities at inference. */
static void check_predict(const char *tag, const char *plan, const char *dir, char **x, int n_in, int n_out) {
  char *want[MAX_OUTPUTS], *got[MAX_OUTPUTS];
  case_files(dir, "expected", n_out, want);
  const char *argv[MAX_ARGS];
  int n = 0;
  argv[n++] = "run", argv[n++] = plan;
  for (int i = 0; i < n_in; i++) argv[n++] = "--input", argv[n++] = x[i];
  for (int i = 0; i < n_out; i++) {
    char name[32];
    snprintf(name, sizeof name, "ff-pred%d.npy", i);
    got[i] = e2e_path(name);
    argv[n++] = "--output", argv[n++] = got[i];
  }
  argv[n++] = "--threads", argv[n++] = "1", argv[n] = NULL;
  e2e_result r;
  e2e_kdcv(&r, argv);
  if (r.status != 0) fprintf(stderr, "%s: predict: %s", tag, r.err);
  assert_int_equal(r.status, 0);
  for (int i = 0; i < n_out; i++) {
    kdc_npy_array a, b;
    assert_null(kdc_npy_read(got[i], &a));
    assert_null(kdc_npy_read(want[i], &b));
    double e = e2e_npy_compare(&a, &b, 1e-5, 1e-4);
    if (e > 1) fprintf(stderr, "%s: output %d: %.3g x tolerance vs expected\n", tag, i, e);
    assert_true(e <= 1);
    kdc_npy_free(&a), kdc_npy_free(&b);
    free(want[i]), free(got[i]);
  }
}

/* One run of a case: compile, fit, compare with |ref_hist| / |ref_final|.
 * A noisy case's first run has no reference: its history and weights are
 * kept as the next runs' (|ref_hist|, |ref_final| then name the copies). */
static void check_run(const char *name, const char *dir, json_object *desc, const ff_run *run,
                      const char *ref_hist, const char *ref_final, bool first_noisy, double *worst_loss,
                      double *worst_w) {
  json_object *v;
  char batch[16], epochs[16], split[32];
  snprintf(batch, sizeof batch, "%d", desc_int(desc, "batch", 0));
  int n_epochs = desc_int(desc, "epochs", 0);
  snprintf(epochs, sizeof epochs, "%d", n_epochs);
  assert_true(json_object_object_get_ex(desc, "validation_split", &v));
  snprintf(split, sizeof split, "%.17g", json_object_get_double(v));
  json_object *cli = NULL;
  if (run->cli && json_object_object_get_ex(desc, "cli", &cli) && !json_object_is_type(cli, json_type_array))
    cli = NULL;
  char tag[128], plan_name[96];
  snprintf(tag, sizeof tag, "%s: mesh %s%s%s", name, run->mesh, run->layout ? " layout.json" : "",
           cli ? " (flags)" : "");
  snprintf(plan_name, sizeof plan_name, "ff-%s-%s.plan", name, run->mesh);
  char *plan = e2e_path(plan_name);
  char *hist = first_noisy ? strdup(ref_hist) : e2e_path("ff-history.json");
  char *final = first_noisy ? strdup(ref_final) : e2e_path("ff-final.safetensors");
  char *model = e2e_join(dir, "model.json"), *weights = e2e_join(dir, "weights.safetensors");
  char *layout = e2e_join(dir, "layout.json");
  /* one --x per model input, one --y per trained output */
  int n_in = desc_int(desc, "n_in", 1), n_out = desc_int(desc, "n_out", 1);
  assert_true(n_in >= 1 && n_in <= MAX_INPUTS && n_out >= 1 && n_out <= MAX_OUTPUTS);
  char *x[MAX_INPUTS], *y[MAX_OUTPUTS];
  case_files(dir, "x", n_in, x);
  case_files(dir, "y", n_out, y);
  const char *argv[MAX_ARGS];
  int n = 0;
  argv[n++] = "compile", argv[n++] = model, argv[n++] = "--weights", argv[n++] = weights;
  argv[n++] = "--batch", argv[n++] = batch, argv[n++] = "--mesh", argv[n++] = run->mesh;
  if (run->layout) argv[n++] = "--layout", argv[n++] = layout;
  for (size_t i = 0; cli && i < json_object_array_length(cli); i++) {
    assert_true(n < MAX_ARGS - 4);
    argv[n++] = json_object_get_string(json_object_array_get_idx(cli, i));
  }
  argv[n++] = "-o", argv[n++] = plan, argv[n] = NULL;
  e2e_result r;
  e2e_kdcv(&r, argv);
  if (r.status != 0) fprintf(stderr, "%s: compile: %s", tag, r.err);
  assert_int_equal(r.status, 0);
  if (first_noisy) check_predict(tag, plan, dir, x, n_in, n_out);
  n = 0;
  argv[n++] = "run", argv[n++] = plan, argv[n++] = "--fit";
  for (int i = 0; i < n_in; i++) argv[n++] = "--x", argv[n++] = x[i];
  for (int i = 0; i < n_out; i++) argv[n++] = "--y", argv[n++] = y[i];
  argv[n++] = "--epochs", argv[n++] = epochs;
  argv[n++] = "--batch-size", argv[n++] = batch, argv[n++] = "--validation-split", argv[n++] = split;
  argv[n++] = "--history", argv[n++] = hist, argv[n++] = "--save-weights", argv[n++] = final;
  argv[n++] = "--quiet", argv[n++] = "--threads", argv[n++] = "1", argv[n] = NULL;
  assert_true(n < MAX_ARGS);
  e2e_kdcv(&r, argv);
  if (r.status != 0) fprintf(stderr, "%s: fit: %s", tag, r.err);
  assert_int_equal(r.status, 0);

  if (!first_noisy) {
    void *a = NULL, *b = NULL;
    size_t na, nb;
    assert_null(kdc_file_read_all(hist, &a, &na));
    assert_null(kdc_file_read_all(ref_hist, &b, &nb));
    double le = loss_error(a, b, n_epochs), we = weight_error(final, ref_final, tag);
    if (le > 1) fprintf(stderr, "%s: losses %.3g x tolerance from the reference\n", tag, le);
    assert_true(le <= 1);
    assert_true(we <= 1);
    *worst_loss = fmax(*worst_loss, le), *worst_w = fmax(*worst_w, we);
    free(a), free(b);
  }
  remove(plan);
  free(plan), free(hist), free(final), free(model), free(weights), free(layout);
  for (int i = 0; i < n_in; i++) free(x[i]);
  for (int i = 0; i < n_out; i++) free(y[i]);
}

static void test_fit_fuzz_cases(void **state) {
  (void)state;
  char *root = e2e_src("tests/e2e/fit_fuzz_cases");
  char *names[MAX_CASES];
  /* the sanitizer build checks memory, not numerics: two cases that take
   * every path, 41 (two outputs, random layers: the prediction check and
   * the mesh-1 reference) and 111 (a Sequential) */
  static const char *const sampled[] = {"41", "111"};
  int n = 2;
  if (kdc_test_sampled()) {
    for (int i = 0; i < n; i++) names[i] = strdup(sampled[i]);
  } else {
    n = e2e_case_names("tests/e2e/fit_fuzz_cases", names, MAX_CASES, 0);
  }
  double worst_loss = 0, worst_w = 0;
  for (int c = 0; c < n; c++) {
    char *dir = e2e_join(root, names[c]), *cj = e2e_join(dir, "case.json");
    json_object *desc = json_object_from_file(cj), *v;
    assert_non_null(desc);
    bool noisy = json_object_object_get_ex(desc, "noisy", &v) && json_object_get_boolean(v);
    char *ref_hist = noisy ? e2e_path("ff-self-history.json") : e2e_join(dir, "history.json");
    char *ref_final = noisy ? e2e_path("ff-self-final.safetensors") : e2e_join(dir, "final.safetensors");
    for (size_t k = 0; k < sizeof runs / sizeof runs[0]; k++)
      check_run(names[c], dir, desc, &runs[k], ref_hist, ref_final, noisy && k == 0, &worst_loss, &worst_w);
    json_object_put(desc);
    free(cj), free(dir), free(names[c]), free(ref_hist), free(ref_final);
  }
  fprintf(stderr, "fit fuzz: %d cases x %zu runs: losses within %.3g x (%g + %g |ref|), weights within %.3g x "
          "(%g + %g |ref|)\n", n, sizeof runs / sizeof runs[0], worst_loss, LOSS_ATOL, LOSS_RTOL, worst_w, W_ATOL,
          W_RTOL);
  free(root);
}

/* A two-input case fit with one --x: exit 2, one line naming the plan and
 * the counts, no history written. */
static void test_x_count(void **state) {
  (void)state;
  char *dir = e2e_src("tests/e2e/fit_fuzz_cases/3"), *model = e2e_join(dir, "model.json");
  char *w = e2e_join(dir, "weights.safetensors"), *x0 = e2e_join(dir, "x0.npy"), *y = e2e_join(dir, "y.npy");
  char *plan = e2e_path("ff-xcount.plan"), *hist = e2e_path("ff-xcount.json");
  e2e_result r;
  e2e_kdc(&r, "compile", model, "--weights", w, "--batch", "8", "-o", plan, NULL);
  assert_int_equal(r.status, 0);
  e2e_kdc(&r, "run", plan, "--fit", "--x", x0, "--y", y, "--history", hist, NULL);
  assert_int_equal(r.status, 2);
  assert_int_equal(e2e_lines(r.err), 1);
  assert_non_null(strstr(r.err, plan));
  assert_non_null(strstr(r.err, "the model has 2 inputs but 1 --x were given"));
  assert_false(e2e_exists(hist));
  free(dir), free(model), free(w), free(x0), free(y), free(plan), free(hist);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_fit_fuzz_cases),
      cmocka_unit_test(test_x_count),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
