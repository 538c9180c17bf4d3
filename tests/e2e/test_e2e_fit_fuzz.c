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
 * fuzz"): every epoch, batch and validation loss within 1e-4 relative, every final
 * weight and moving statistic within 1e-4 + 1e-3 |ref|.  The sanitizer
 * build trains two cases (tests/test_sampling.h).
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

enum { MAX_CASES = 32, MAX_ARGS = 48, MAX_LOSSES = 512, MAX_INPUTS = 4 };

static const double LOSS_RTOL = 1e-4, W_ATOL = 1e-4, W_RTOL = 1e-3;

typedef struct ff_run {
  const char *mesh;
  bool cli;    /* the case's kdc compile flags instead of its compile_config */
  bool layout; /* the case's layout.json */
} ff_run;

static const ff_run runs[] = {{"1", true, false}, {"8", false, false}, {"2x4", false, true}};

/* Epoch, batch and validation losses of |got| against the reference
 * |want| (history JSON texts): the worst relative difference.  val_loss is
 * in both or in neither. */
static double loss_error(const char *got, const char *want, int epochs) {
  static const char *const keys[] = {"loss", "batch_loss", "val_loss"};
  double g[MAX_LOSSES], w[MAX_LOSSES], worst = 0;
  for (int k = 0; k < 3; k++) {
    int ng = e2e_json_numbers(got, keys[k], g, MAX_LOSSES);
    int nw = e2e_json_numbers(want, keys[k], w, MAX_LOSSES);
    assert_int_equal(ng, nw);
    if (k == 2 && nw < 0) continue;
    assert_true(nw >= epochs);
    for (int i = 0; i < nw; i++) worst = fmax(worst, fabs(g[i] - w[i]) / fabs(w[i]));
  }
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

static void check_run(const char *name, const char *dir, json_object *desc, const ff_run *run,
                      double *worst_loss, double *worst_w) {
  json_object *v;
  assert_true(json_object_object_get_ex(desc, "batch", &v));
  char batch[16], epochs[16];
  snprintf(batch, sizeof batch, "%d", json_object_get_int(v));
  assert_true(json_object_object_get_ex(desc, "epochs", &v));
  int n_epochs = json_object_get_int(v);
  snprintf(epochs, sizeof epochs, "%d", n_epochs);
  char split[32];
  assert_true(json_object_object_get_ex(desc, "validation_split", &v));
  snprintf(split, sizeof split, "%.17g", json_object_get_double(v));
  json_object *cli = NULL;
  if (run->cli && json_object_object_get_ex(desc, "cli", &cli) && !json_object_is_type(cli, json_type_array))
    cli = NULL;
  char tag[128], plan_name[96];
  snprintf(tag, sizeof tag, "%s: mesh %s%s%s", name, run->mesh, run->layout ? " layout.json" : "",
           cli ? " (flags)" : "");
  snprintf(plan_name, sizeof plan_name, "ff-%s-%s.plan", name, run->mesh);
  char *plan = e2e_path(plan_name), *hist = e2e_path("ff-history.json"), *final = e2e_path("ff-final.safetensors");
  char *model = e2e_join(dir, "model.json"), *weights = e2e_join(dir, "weights.safetensors");
  char *layout = e2e_join(dir, "layout.json"), *y = e2e_join(dir, "y.npy");
  /* x.npy, or x0.npy, x1.npy ... (one --x per model input) */
  assert_true(json_object_object_get_ex(desc, "n_in", &v));
  int n_in = json_object_get_int(v);
  assert_true(n_in >= 1 && n_in <= MAX_INPUTS);
  char *x[MAX_INPUTS];
  for (int i = 0; i < n_in; i++) {
    char xn[32];
    if (n_in == 1) snprintf(xn, sizeof xn, "x.npy");
    else snprintf(xn, sizeof xn, "x%d.npy", i);
    x[i] = e2e_join(dir, xn);
  }
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
  n = 0;
  argv[n++] = "run", argv[n++] = plan, argv[n++] = "--fit";
  for (int i = 0; i < n_in; i++) argv[n++] = "--x", argv[n++] = x[i];
  argv[n++] = "--y", argv[n++] = y, argv[n++] = "--epochs", argv[n++] = epochs;
  argv[n++] = "--batch-size", argv[n++] = batch, argv[n++] = "--validation-split", argv[n++] = split;
  argv[n++] = "--history", argv[n++] = hist, argv[n++] = "--save-weights", argv[n++] = final;
  argv[n++] = "--quiet", argv[n++] = "--threads", argv[n++] = "1", argv[n] = NULL;
  e2e_kdcv(&r, argv);
  if (r.status != 0) fprintf(stderr, "%s: fit: %s", tag, r.err);
  assert_int_equal(r.status, 0);

  char *ref_hist = e2e_join(dir, "history.json"), *ref_final = e2e_join(dir, "final.safetensors");
  void *a = NULL, *b = NULL;
  size_t na, nb;
  assert_null(kdc_file_read_all(hist, &a, &na));
  assert_null(kdc_file_read_all(ref_hist, &b, &nb));
  double le = loss_error(a, b, n_epochs), we = weight_error(final, ref_final, tag);
  if (le > LOSS_RTOL) fprintf(stderr, "%s: losses %.3g relative from the reference\n", tag, le);
  assert_true(le <= LOSS_RTOL);
  assert_true(we <= 1);
  *worst_loss = fmax(*worst_loss, le), *worst_w = fmax(*worst_w, we);
  remove(plan);
  free(a), free(b), free(ref_hist), free(ref_final);
  free(plan), free(hist), free(final), free(model), free(weights), free(layout), free(y);
  for (int i = 0; i < n_in; i++) free(x[i]);
}

static void test_fit_fuzz_cases(void **state) {
  (void)state;
  char *root = e2e_src("tests/e2e/fit_fuzz_cases");
  char *names[MAX_CASES];
  /* the sanitizer build checks memory, not numerics: two cases */
  int n = e2e_case_names("tests/e2e/fit_fuzz_cases", names, MAX_CASES, kdc_test_sampled() ? 2 : 0);
  double worst_loss = 0, worst_w = 0;
  for (int c = 0; c < n; c++) {
    char *dir = e2e_join(root, names[c]), *cj = e2e_join(dir, "case.json");
    json_object *desc = json_object_from_file(cj);
    assert_non_null(desc);
    for (size_t k = 0; k < sizeof runs / sizeof runs[0]; k++)
      check_run(names[c], dir, desc, &runs[k], &worst_loss, &worst_w);
    json_object_put(desc);
    free(cj), free(dir), free(names[c]);
  }
  fprintf(stderr, "fit fuzz: %d cases x %zu runs: losses within %.3g relative, weights within %.3g x "
          "(%g + %g |ref|)\n", n, sizeof runs / sizeof runs[0], worst_loss, worst_w, W_ATOL, W_RTOL);
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
