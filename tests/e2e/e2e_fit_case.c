/*
 * tests/e2e/e2e_fit_case.c: a reference training case through the kdc
 * binary (e2e_fit_case.h).
 */
#include "e2e_fit_case.h"

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/io.h"
#include "e2e_fit_util.h"
#include "e2e_util.h"

enum { MAX_ARGS = 64, MAX_LOSSES = 512, MAX_INPUTS = 4, MAX_OUTPUTS = 4 };

/* Every history entry of the reference |want| against |got| (history
 * JSON texts, the same keys in both): the worst error in tolerances
 * (E2E_FIT_LOSS_ATOL + E2E_FIT_LOSS_RTOL |ref|; the absolute part for a
 * loss near 0, a few ulps of the logits). */
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
    for (int i = 0; i < nw; i++)
      worst = fmax(worst, fabs(g[i] - w[i]) / (E2E_FIT_LOSS_ATOL + E2E_FIT_LOSS_RTOL * fabs(w[i])));
  }
  json_object_put(jg), json_object_put(jw);
  return worst;
}

bool e2e_tfjs_name_matches(const char *tfjs, const char *path) {
  /* the last components are equal */
  const char *tl = strrchr(tfjs, '/'), *pl = strrchr(path, '/');
  tl = tl ? tl + 1 : tfjs, pl = pl ? pl + 1 : path;
  if (strcmp(tl, pl) != 0) return false;
  /* the others, in order, each a whole component of path before its last */
  const char *p = path;
  for (const char *t = tfjs; t < tl;) {
    size_t n = strcspn(t, "/");
    for (;;) {
      if (p >= pl) return false;
      size_t m = strcspn(p, "/");
      bool same = m == n && strncmp(p, t, n) == 0;
      p += m + 1;
      if (same) break;
    }
    t += n + 1;
  }
  return true;
}

/* |name| in |st|, or else the one tensor whose path a tfjs |name| stands
 * for (NULL when none or several: the caller reports it). */
static const kdc_st_tensor *find_tensor(const kdc_safetensors *st, const char *name) {
  const kdc_st_tensor *t = kdc_safetensors_find(st, name), *found = NULL;
  if (t) return t;
  for (size_t k = 0; k < kdc_safetensors_count(st); k++) {
    t = kdc_safetensors_get(st, k);
    if (!e2e_tfjs_name_matches(name, t->name)) continue;
    if (found) return NULL;
    found = t;
  }
  return found;
}

/* Every tensor of the reference |want| against the same name in |got|:
 * the worst error in tolerances (E2E_FIT_W_ATOL + E2E_FIT_W_RTOL |ref|). */
static double weight_error(const char *got, const char *want, const char *tag) {
  kdc_safetensors *sg = NULL, *sw = NULL;
  assert_null(kdc_safetensors_open(got, &sg));
  assert_null(kdc_safetensors_open(want, &sw));
  double worst = 0;
  for (size_t k = 0; k < kdc_safetensors_count(sw); k++) {
    const kdc_st_tensor *tw = kdc_safetensors_get(sw, k);
    if (tw->dtype != KDC_IO_DTYPE_F32) continue; /* a noisy case's own <opt>/iteration */
    const kdc_st_tensor *tg = find_tensor(sg, tw->name);
    if (!tg) fprintf(stderr, "%s: no %s in --save-weights\n", tag, tw->name);
    assert_non_null(tg);
    assert_int_equal(tg->nbytes, tw->nbytes);
    float *fg = malloc(tg->nbytes), *fw = malloc(tw->nbytes);
    assert_true(fg && fw);
    memcpy(fg, tg->data, tg->nbytes);
    memcpy(fw, tw->data, tw->nbytes);
    double e = e2e_f32_compare(fg, fw, tw->nbytes / 4, E2E_FIT_W_ATOL, E2E_FIT_W_RTOL);
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
void e2e_fit_case_run(const char *name, const char *dir, json_object *desc, const e2e_case_run *run,
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
  char tag[256], plan_name[256];
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
  if (run->axes) argv[n++] = "--axes", argv[n++] = run->axes;
  json_object *extra = NULL;
  if (json_object_object_get_ex(desc, "compile_args", &extra) &&
      json_object_is_type(extra, json_type_array)) {
    for (size_t i = 0; i < json_object_array_length(extra); i++) {
      assert_true(n < MAX_ARGS - 8);
      argv[n++] = json_object_get_string(json_object_array_get_idx(extra, i));
    }
  }
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

