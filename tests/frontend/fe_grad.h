/*
 * fe_grad.h: lowered examples and gradient checks shared by the frontend
 * tests that link passes/ (header-only; each test executable includes it
 * once, after fe_test.h).
 *
 *   lower_example(model, weights, inputs, b, L)  loads, lowers predict at
 *                        batch |b|, binds |weights|, and fills L->args with
 *                        the .npy inputs' first |b| rows and the weights
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

static FE_UNUSED void lower_example(const char *model, const char *weights, const char *const *inputs,
                          int64_t b, lowered *L) {
  L->km = fe_load_ok(model);
  kdc_lower_options opt = {.batch = b};
  kdc_status st = kdc_frontend_lower(L->km, &opt, &L->mod);
  if (st) fail_msg("lowering %s: %s", model, kdc_status_message(st));
  st = kdc_frontend_bind_weights(L->km, L->mod, weights, 0);
  if (st) fail_msg("binding %s: %s", weights, kdc_status_message(st));
  L->f = kdc_ir_module_find_func(L->mod, "predict");
  L->args = calloc(L->f->n_params, sizeof *L->args);
  int ni = 0;
  for (size_t i = 0; i < L->f->n_params; i++) {
    const kdc_node *nd = kdc_ir_node(L->f, L->f->params[i]);
    kdc_tensor *a = &L->args[i];
    a->type = nd->type;
    size_t bytes = kdc_type_bytes(&a->type);
    a->data = malloc(bytes + 1);
    if (nd->attr.param.kind == KDC_PARAM_INPUT) {
      kdc_npy_array x;
      assert_null(kdc_npy_read(inputs[ni++], &x));
      assert_true(x.nbytes >= bytes);
      memcpy(a->data, x.data, bytes);
      kdc_npy_free(&x);
    } else {
      const kdc_weight *w = kdc_ir_module_find_weight(L->mod, nd->attr.param.name);
      assert_non_null(w);
      memcpy(a->data, w->data, bytes);
    }
  }
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

/* Central differences of sum(predict * w) for every parameter whose name
 * does not start with |skip| (NULL: none), every |stride|-th element. */
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
    const char *name = kdc_ir_node(f, f->params[i])->attr.param.name;
    if (skip && !strncmp(name, skip, strlen(skip))) continue;
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
