/*
 * fe_grad.h: lowered examples and gradient checks shared by the frontend
 * tests that link passes/ (header-only; each test executable includes it
 * once, after fe_test.h).
 *
 *   lower_example(model, weights, inputs, b, L)  loads, lowers predict at
 *                        batch |b|, binds |weights|, and fills L->args with
 *                        the .npy inputs' first |b| rows and the weights
 *   lower_model(path, train, b, x, seed, L)  predict or train_forward with
 *                        initialiser weights and the given f32 inputs
 *   lowered_free(L)
 *   urand(s, lo, hi)     xorshift64* uniform doubles
 *   grad_check(L, skip, stride, min_checked)  autodiff of sum(L->f's result 0 * w)
 *                        (w a fixed random cotangent) against central
 *                        differences (h = 1e-3 max(1, |x|), tolerance
 *                        1e-2 |fd| + 1e-3 max(1, max |fd|), as tests/training)
 */
#ifndef KDC_TESTS_FRONTEND_FE_GRAD_H
#define KDC_TESTS_FRONTEND_FE_GRAD_H

#include "common/io.h"
#include "passes/passes.h"

/* A lowered example: module, predict and its arguments (inputs from the
 * .npy files' first |b| rows, weights copied from the bound module). */
typedef struct lowered {
  kdc_keras_model *km;
  kdc_module *mod;
  kdc_func *f;
  kdc_tensor *args;
} lowered;

/* L->args for L->f: inputs copied from |x| (one array per input, at least
 * the parameter's size), sample_mask ones, the step 0, weights from L->mod. */
static FE_UNUSED void fill_args(lowered *L, const float *const *x) {
  L->args = calloc(L->f->n_params, sizeof *L->args);
  int ni = 0;
  for (size_t i = 0; i < L->f->n_params; i++) {
    const kdc_node *nd = kdc_ir_node(L->f, L->f->params[i]);
    kdc_tensor *a = &L->args[i];
    a->type = nd->type;
    size_t bytes = kdc_type_bytes(&a->type);
    a->data = calloc(1, bytes + 1);
    if (nd->attr.param.kind == KDC_PARAM_INPUT) {
      memcpy(a->data, x[ni++], bytes);
    } else if (nd->attr.param.kind == KDC_PARAM_LABEL) {
      for (size_t k = 0; k < bytes / 4; k++) ((float *)a->data)[k] = 1; /* sample_mask */
    } else if (nd->attr.param.kind != KDC_PARAM_STATE) {
      const kdc_weight *w = kdc_ir_module_find_weight(L->mod, nd->attr.param.name);
      assert_non_null(w);
      memcpy(a->data, w->data, bytes);
    }
  }
}

static FE_UNUSED void lower_example(const char *model, const char *weights, const char *const *inputs,
                          int64_t b, lowered *L) {
  L->km = fe_load_ok(model);
  kdc_lower_options opt = {.batch = b};
  kdc_status st = kdc_frontend_lower(L->km, &opt, &L->mod);
  if (st) fail_msg("lowering %s: %s", model, kdc_status_message(st));
  st = kdc_frontend_bind_weights(L->km, L->mod, weights, 0);
  if (st) fail_msg("binding %s: %s", weights, kdc_status_message(st));
  L->f = kdc_ir_module_find_func(L->mod, "predict");
  kdc_npy_array x[8];
  const float *xs[8] = {NULL};
  int n = 0;
  for (size_t i = 0; i < L->f->n_params; i++) {
    const kdc_node *nd = kdc_ir_node(L->f, L->f->params[i]);
    if (nd->attr.param.kind != KDC_PARAM_INPUT) continue;
    assert_true(n < 8);
    assert_null(kdc_npy_read(inputs[n], &x[n]));
    assert_true(x[n].nbytes >= kdc_type_bytes(&nd->type));
    xs[n] = x[n].data;
    n++;
  }
  fill_args(L, xs);
  for (int i = 0; i < n; i++) kdc_npy_free(&x[i]);
}

/* |path| lowered at batch |b| -- predict, or train_forward (step 0, a
 * sample_mask of ones) when |train| -- with the initialisers' weights
 * (seed |seed|) and the f32 inputs |x| (one array per input, copied). */
static FE_UNUSED void lower_model(const char *path, bool train, int64_t b, const float *const *x,
                                  uint64_t seed, lowered *L) {
  L->km = fe_load_ok(path);
  kdc_lower_options opt = {.batch = b, .train_forward = train, .dropout_seed = 5};
  kdc_status st = kdc_frontend_lower(L->km, &opt, &L->mod);
  if (st) fail_msg("lowering %s: %s", path, kdc_status_message(st));
  st = kdc_frontend_init_weights(L->km, L->mod, seed);
  if (st) fail_msg("initialising %s: %s", path, kdc_status_message(st));
  L->f = kdc_ir_module_find_func(L->mod, train ? "train_forward" : "predict");
  fill_args(L, x);
}

static FE_UNUSED void lowered_free(lowered *L) {
  for (size_t i = 0; i < L->f->n_params; i++) free(L->args[i].data);
  free(L->args);
  kdc_ir_module_destroy(L->mod);
  kdc_frontend_free(L->km);
}

/* xorshift64* uniform in [lo, hi) */
static FE_UNUSED double urand(uint64_t *s, double lo, double hi) {
  *s ^= *s >> 12, *s ^= *s << 25, *s ^= *s >> 27;
  return lo + (hi - lo) * ((double)((*s * 2685821657736338717ull) >> 11) / 9007199254740992.0);
}

static FE_UNUSED double weighted(const kdc_tensor *r, const float *w) {
  double s = 0;
  for (int64_t i = 0; i < kdc_type_numel(&r->type); i++) s += (double)((float *)r->data)[i] * w[i];
  return s;
}

/* Whether |name| starts with one of the '|'-separated prefixes |skip|. */
static FE_UNUSED bool skipped(const char *name, const char *skip) {
  for (const char *p = skip; p && *p;) {
    const char *e = strchr(p, '|');
    size_t n = e ? (size_t)(e - p) : strlen(p);
    if (n && !strncmp(name, p, n)) return true;
    p = e ? e + 1 : NULL;
  }
  return false;
}

/* Central differences of sum(result 0 * w) for every parameter whose name
 * does not start with one of the prefixes |skip| ("a|b", NULL: none), every
 * |stride|-th element. */
static FE_UNUSED void grad_check(lowered *L, const char *skip, int stride, int min_checked) {
  kdc_func *f = L->f;
  kdc_type rt = *kdc_ir_type(f, f->results[0]);
  int64_t rn = kdc_type_numel(&rt);
  float *w = malloc(sizeof(float) * (size_t)rn);
  uint64_t seed = 0x5EEDull;
  for (int64_t i = 0; i < rn; i++) w[i] = (float)urand(&seed, -1, 1);
  kdc_value_id wc = kdc_ir_constant(f, &rt, w);
  int64_t all[KDC_MAX_RANK];
  for (int i = 0; i < rt.rank; i++) all[i] = i;
  kdc_value_id y = kdc_ir_reduce(f, KDC_RED_SUM, kdc_ir_binary(f, KDC_OP_MUL, f->results[0], wc),
                                 rt.rank, all);
  assert_null(kdc_ir_take_error(f));
  size_t np = f->n_params, nw = 0;
  /* the checked parameters (those not named |skip|...) and their gradients */
  kdc_value_id *wrt = calloc(np, sizeof *wrt), *g = calloc(np, sizeof *g);
  size_t *at = calloc(np, sizeof *at);
  for (size_t i = 0; i < np; i++) {
    if (skipped(kdc_ir_node(f, f->params[i])->attr.param.name, skip)) continue;
    at[nw] = i;
    wrt[nw++] = f->params[i];
  }
  kdc_status st = kdc_autodiff(f, y, wrt, nw, g);
  if (st) fail_msg("autodiff: %s", kdc_status_message(st));
  size_t n0 = f->n_results;
  for (size_t i = 0; i < nw; i++) {
    if (g[i] == KDC_NO_VALUE)
      fail_msg("no gradient for %s", kdc_ir_node(f, wrt[i])->attr.param.name);
    kdc_ir_add_result(f, g[i], "grad");
  }
  assert_null(kdc_ir_verify(f));
  kdc_tensor *base = calloc(f->n_results, sizeof *base), *out = calloc(f->n_results, sizeof *out);
  assert_null(kdc_ir_interpret(f, L->args, np, base));
  int checked = 0;
  for (size_t m = 0; m < nw; m++) {
    size_t k = at[m];
    const char *name = kdc_ir_node(f, f->params[k])->attr.param.name;
    const float *gk = base[n0 + m].data;
    float *x = L->args[k].data;
    int64_t n = kdc_type_numel(&L->args[k].type);
    double scale = 1;
    double *fd = calloc((size_t)n + 1, sizeof *fd);
    for (int64_t i = 0; i < n; i += stride) {
      float x0 = x[i];
      double h = 1e-3 * fmax(1.0, fabs(x0));
      x[i] = (float)(x0 + h);
      double xp = x[i];
      assert_null(kdc_ir_interpret(f, L->args, np, out));
      double yp = weighted(&out[0], w);
      for (size_t r = 0; r < f->n_results; r++) free(out[r].data);
      x[i] = (float)(x0 - h);
      double xm = x[i];
      assert_null(kdc_ir_interpret(f, L->args, np, out));
      double ym = weighted(&out[0], w);
      for (size_t r = 0; r < f->n_results; r++) free(out[r].data);
      x[i] = x0;
      fd[i] = (yp - ym) / (xp - xm);
      scale = fmax(scale, fabs(fd[i]));
    }
    for (int64_t i = 0; i < n; i += stride, checked++)
      if (!(fabs(gk[i] - fd[i]) <= 1e-2 * fabs(fd[i]) + 1e-3 * scale))
        fail_msg("d/d %s[%lld]: autodiff %.7g, central difference %.7g", name, (long long)i,
                 gk[i], fd[i]);
    free(fd);
  }
  assert_true(checked >= min_checked);
  for (size_t r = 0; r < f->n_results; r++) free(base[r].data);
  free(base), free(out), free(wrt), free(g), free(w), free(at);
}

#endif
