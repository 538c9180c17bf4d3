/* Helpers of the training end-to-end tests (e2e_fit_util.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <math.h>

#include "e2e/e2e_fit_util.h"
#include "e2e_util.h"

enum { PLAN_CACHE = 64 };
static struct {
  char *path;
  uint64_t checksum;
  kdc_rt_plan *p;
} plans[PLAN_CACHE];
static size_t n_plans;

static void plan_cache_free(void) {
  for (size_t i = 0; i < n_plans; i++) kdc_rt_plan_release(plans[i].p), free(plans[i].path);
  n_plans = 0;
}

kdc_rt_plan *e2e_plan_load(const char *plan) {
  kdc_plan_file *pf = NULL;
  assert_null(kdc_plan_file_open(plan, &pf));
  uint64_t sum = kdc_plan_file_checksum(pf);
  kdc_plan_file_close(pf);
  for (size_t i = 0; i < n_plans; i++)
    if (!strcmp(plans[i].path, plan) && plans[i].checksum == sum) {
      kdc_rt_plan_retain(plans[i].p);
      return plans[i].p;
    }
  kdc_rt_plan *p = NULL;
  kdc_rt_options ro = {.check_replicas = 1};
  assert_null(kdc_rt_plan_load_with(plan, &ro, &p));
  if (n_plans == 0) atexit(plan_cache_free);
  if (n_plans == PLAN_CACHE) return p; /* full: this one is not kept */
  plans[n_plans].path = strdup(plan);
  plans[n_plans].checksum = sum;
  plans[n_plans++].p = p;
  kdc_rt_plan_retain(p);
  return p;
}

void e2e_run_collect(kdc_rt_train *t, e2e_run *r) {
  r->n_state = kdc_rt_train_state_count(t);
  assert_true(r->n_state <= E2E_MAX_STATE);
  for (size_t k = 0; k < r->n_state; k++) {
    const kdc_rt_tensor_info *i = kdc_rt_train_state(t, k);
    r->bytes[k] = i->bytes;
    r->names[k] = strdup(i->name);
    r->state[k] = malloc(i->bytes + 4);
    kdc_rt_train_state_get(t, k, r->state[k]);
  }
}

void e2e_run_free(e2e_run *r) {
  kdc_rt_history_free(&r->h);
  for (size_t k = 0; k < r->n_state; k++) free(r->state[k]), free(r->names[k]);
}

void e2e_fit(const char *plan, const void *const *arrays, int64_t rows, double val_split,
             int64_t batch_size, int epochs, const char *init, const char *save, e2e_run *r) {
  kdc_rt_train *t = NULL;
  kdc_rt_plan *p = e2e_plan_load(plan);
  assert_null(kdc_rt_train_create(p, &t));
  if (init) assert_null(kdc_rt_train_load(t, init));
  kdc_rt_fit_options o = {.epochs = epochs, .validation_split = val_split,
                          .batch_size = batch_size};
  memset(r, 0, sizeof *r);
  assert_null(kdc_rt_fit(t, arrays, rows, &o, &r->h));
  e2e_run_collect(t, r);
  if (save) assert_null(kdc_rt_train_save(t, save));
  kdc_rt_train_destroy(t);
  kdc_rt_plan_release(p);
}

char *e2e_compile_cce(const char *name, const char *model, const char *weights, const char *batch,
                      const char *opt, const char *lr, const char *mesh, const char *axes,
                      const char *layout) {
  return e2e_compile_cce_flag(name, model, weights, batch, opt, lr, mesh, axes, layout, NULL);
}

char *e2e_compile_cce_flag(const char *name, const char *model, const char *weights,
                           const char *batch, const char *opt, const char *lr, const char *mesh,
                           const char *axes, const char *layout, const char *flag) {
  char *plan = e2e_path(name);
  const char *argv[32];
  int n = 0;
  const char *head[] = {"compile", model, "--weights", weights, "--batch", batch, "--loss",
                        "categorical_crossentropy", "--optimizer", opt, "-o", plan};
  for (size_t i = 0; i < sizeof head / sizeof *head; i++) argv[n++] = head[i];
  if (lr) argv[n++] = "--learning-rate", argv[n++] = lr;
  if (mesh) argv[n++] = "--mesh", argv[n++] = mesh;
  if (axes) argv[n++] = "--axes", argv[n++] = axes;
  if (layout) argv[n++] = "--layout", argv[n++] = layout;
  if (flag) argv[n++] = flag;
  argv[n] = NULL;
  e2e_result r;
  e2e_kdcv(&r, argv);
  if (r.status) fprintf(stderr, "compile %s: %s", name, r.err);
  assert_int_equal(r.status, 0);
  return plan;
}

double e2e_rel(double a, double b) { return fabs(a - b) / (1.0 + fabs(b)); }

void e2e_same_run(const e2e_run *got, const e2e_run *want, int epoch0, double tol,
                  const char *what) {
  double worst = 0;
  int64_t steps = want->h.steps;
  assert_int_equal(got->h.steps, steps);
  for (int64_t e = 0; e < got->h.epochs; e++) {
    worst = fmax(worst, e2e_rel(got->h.loss[e], want->h.loss[e + epoch0]));
    if (want->h.val_loss)
      worst = fmax(worst, e2e_rel(got->h.val_loss[e], want->h.val_loss[e + epoch0]));
    for (int64_t s = 0; s < steps; s++)
      worst = fmax(worst, e2e_rel(got->h.batch_loss[e * steps + s],
                                  want->h.batch_loss[(e + epoch0) * steps + s]));
    size_t nm = want->h.n_metrics;  /* per-output losses */
    assert_int_equal(got->h.n_metrics, nm);
    for (size_t j = 0; j < nm; j++) {
      worst = fmax(worst, e2e_rel(got->h.metrics[e * (int64_t)nm + j],
                                  want->h.metrics[(e + epoch0) * (int64_t)nm + j]));
      if (want->h.val_metrics)
        worst = fmax(worst, e2e_rel(got->h.val_metrics[e * (int64_t)nm + j],
                                    want->h.val_metrics[(e + epoch0) * (int64_t)nm + j]));
    }
  }
  assert_int_equal(got->n_state, want->n_state);
  bool final = got->h.epochs + epoch0 == want->h.epochs; /* both ended at the same step */
  for (size_t k = 0; k < want->n_state && final; k++) {
    assert_string_equal(got->names[k], want->names[k]);
    if (strstr(want->names[k], "iteration")) {
      assert_memory_equal(got->state[k], want->state[k], 4);
      continue;
    }
    double wk = 0;
    for (uint64_t i = 0; i < want->bytes[k] / 4; i++)
      wk = fmax(wk, e2e_rel(got->state[k][i], want->state[k][i]));
    if (wk > tol) fprintf(stderr, "%s: state %s differs by %.3g\n", what, want->names[k], wk);
    worst = fmax(worst, wk);
  }
  if (worst > tol) fprintf(stderr, "%s: worst relative difference %.3g\n", what, worst);
  assert_true(worst <= tol);
}

int e2e_count_colls(const char *plan, const char *func, int kind, const char *axis, bool scalar) {
  kdc_rt_plan *p = NULL;
  kdc_rt_options ro = {.describe_only = 1}; /* counting steps needs no code */
  assert_null(kdc_rt_plan_load_with(plan, &ro, &p));
  int fi = kdc_rt_plan_find_func(p, func);
  assert_true(fi >= 0);
  const kdc_prog_func *f = &p->prog.funcs[fi];
  int n = 0;
  for (uint32_t s = 0; s < f->n_steps; s++) {
    const kdc_prog_step *st = &f->steps[s];
    if (st->kind != KDC_STEP_COLLECTIVE) continue;
    if (kind >= 0 && (int)st->coll.kind != kind) continue;
    bool on_axis = !axis;
    for (uint32_t a = 0; a < st->coll.naxes && axis; a++)
      on_axis = on_axis || !strcmp(p->prog.mesh.names[st->coll.axes[a]], axis);
    if (!on_axis) continue;
    if ((st->coll.dst.bytes <= 4) != scalar) continue;
    n++;
  }
  kdc_rt_plan_release(p);
  return n;
}

void e2e_step_vs_interpreter(const char *plan, const void *x, const void *y, const void *mask,
                             const kdc_func *f, kdc_tensor *out, const char *what) {
  kdc_rt_train *t = NULL;
  kdc_rt_plan *p = e2e_plan_load(plan);
  assert_null(kdc_rt_train_create(p, &t));
  const void *data[3];
  assert_int_equal(kdc_rt_train_data_count(t), 3);
  for (size_t i = 0; i < 3; i++)
    data[i] = i == 0 ? x : !strcmp(kdc_rt_train_data(t, i)->name, "sample_mask") ? mask : y;
  float loss;
  assert_null(kdc_rt_train_step(t, data, &loss));
  double worst = e2e_rel(loss, *(float *)out[f->n_results - 1].data);
  assert_int_equal(kdc_rt_train_state_count(t), f->n_results - 1);
  for (size_t k = 0; k < kdc_rt_train_state_count(t); k++) {
    const kdc_rt_tensor_info *i = kdc_rt_train_state(t, k);
    assert_string_equal(i->name, f->result_names[k]);
    float *got = malloc(i->bytes + 4);
    kdc_rt_train_state_get(t, k, got);
    if (i->dtype == KDC_IO_DTYPE_F32)
      for (uint64_t e = 0; e < i->bytes / 4; e++)
        worst = fmax(worst, e2e_rel(got[e], ((float *)out[k].data)[e]));
    else
      assert_memory_equal(got, out[k].data, 4);
    free(got);
  }
  fprintf(stderr, "%s: step vs interpreter %.3g relative\n", what, worst);
  assert_true(worst <= 1e-5);
  for (size_t k = 0; k < f->n_results; k++) free(out[k].data);
  kdc_rt_train_destroy(t);
  kdc_rt_plan_release(p);
}

char *e2e_with_compile_config(const char *src, const char *name, const char *cc) {
  void *raw = NULL;
  size_t n = 0;
  assert_null(kdc_file_read_all(src, &raw, &n));
  assert_true(n > 1 && ((char *)raw)[0] == '{');
  char *path = e2e_path(name);
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fprintf(f, "{\"compile_config\": {%s}, ", cc);
  fwrite((char *)raw + 1, 1, n - 1, f);
  fclose(f);
  free(raw);
  return path;
}

int e2e_json_numbers(const char *text, const char *key, double *out, int cap) {
  char pat[64];
  snprintf(pat, sizeof pat, "\"%s\":", key);
  const char *p = strstr(text, pat);
  if (!p) return -1;
  p = strchr(p, '[');
  int n = 0;
  while (p && *p != ']' && n < cap) {
    char *end;
    double v = strtod(p + 1, &end);
    if (end == p + 1) break;
    out[n++] = v;
    p = end;
    while (*p == ' ') p++;
  }
  return n;
}

void e2e_check_reference(const char *hist, const char *ref_hist, const char *final,
                         const char *ref_final, const char *const *names, int n, int epochs,
                         int steps, const char *what) {
  void *a = NULL, *b = NULL;
  size_t na, nb;
  assert_null(kdc_file_read_all(hist, &a, &na));
  assert_null(kdc_file_read_all(ref_hist, &b, &nb));
  double got[256], want[256], worst = 0;
  static const char *const keys[] = {"loss", "batch_loss"};
  for (int k = 0; k < 2; k++) {
    int ng = e2e_json_numbers(a, keys[k], got, 256), nw = e2e_json_numbers(b, keys[k], want, 256);
    assert_int_equal(ng, nw);
    assert_int_equal(nw, k ? epochs * steps : epochs);
    for (int i = 0; i < nw; i++) worst = fmax(worst, fabs(got[i] - want[i]) / fabs(want[i]));
  }
  fprintf(stderr, "%s: losses vs reference: %.3g relative\n", what, worst);
  assert_true(worst <= 1e-4);
  kdc_safetensors *sg = NULL, *sw = NULL;
  assert_null(kdc_safetensors_open(final, &sg));
  assert_null(kdc_safetensors_open(ref_final, &sw));
  worst = 0;
  for (int k = 0; k < n; k++) {
    const kdc_st_tensor *tg = kdc_safetensors_find(sg, names[k]), *tw = kdc_safetensors_find(sw, names[k]);
    assert_non_null(tg);
    assert_non_null(tw);
    assert_int_equal(tg->nbytes, tw->nbytes);
    float *fg = malloc(tg->nbytes), *fw = malloc(tw->nbytes);
    memcpy(fg, tg->data, tg->nbytes);
    memcpy(fw, tw->data, tw->nbytes);
    double wk = e2e_f32_compare(fg, fw, tw->nbytes / 4, 1e-5, 1e-4);
    if (wk > 1) fprintf(stderr, "%s: %s vs reference: %.3g x tolerance\n", what, names[k], wk);
    worst = fmax(worst, wk);
    free(fg), free(fw);
  }
  fprintf(stderr, "%s: weights vs reference: %.3g x tolerance\n", what, worst);
  assert_true(worst <= 1);
  kdc_safetensors_close(sg), kdc_safetensors_close(sw);
  free(a), free(b);
}
