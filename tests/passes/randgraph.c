/* tests/passes/randgraph.c: see randgraph.h. */
#include "randgraph.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

uint32_t rng_next(rng *r) {
  r->s = r->s * 6364136223846793005ull + 1442695040888963407ull;
  return (uint32_t)(r->s >> 33);
}

int rng_int(rng *r, int n) { return (int)(rng_next(r) % (uint32_t)n); }

static float rng_float(rng *r) { return (float)rng_int(r, 4001) / 1000.0f - 2.0f; }

/* One step: a new [R,C] value built from the pool. */
static kdc_value_id step(kdc_func *f, rng *r, const kdc_value_id *pool, size_t n, int64_t R,
                         int64_t C) {
  int64_t rc[2] = {R, C}, flat[1] = {R * C}, cc[2] = {C, C};
  kdc_value_id a = pool[rng_int(r, (int)n)], b = pool[rng_int(r, (int)n)];
  static const kdc_op un[] = {KDC_OP_EXP, KDC_OP_TANH, KDC_OP_NEG, KDC_OP_ABS, KDC_OP_LOGISTIC};
  static const kdc_op bin[] = {KDC_OP_ADD, KDC_OP_MUL, KDC_OP_SUB, KDC_OP_MAX, KDC_OP_DIV};
  static const double splats[] = {1.0, -0.0, 0.0, 2.0, 0.5};
  switch (rng_int(r, 12)) {
  case 0: return kdc_ir_unary(f, un[rng_int(r, 5)], a);
  case 1:
  case 2: return kdc_ir_binary(f, bin[rng_int(r, 5)], a, b);
  case 3: return kdc_ir_splat(f, KDC_DTYPE_F32, 2, rc, splats[rng_int(r, 5)]);
  case 4: {
    float d[16];
    for (int i = 0; i < R * C; i++) d[i] = rng_float(r);
    kdc_type t = kdc_type_make(KDC_DTYPE_F32, 2, rc);
    return kdc_ir_constant(f, &t, d);
  }
  case 5: {
    kdc_type t = kdc_type_make(KDC_DTYPE_F32, 2, rc);
    return kdc_ir_iota(f, &t, rng_int(r, 2));
  }
  case 6: { /* reduce a row, broadcast it back */
    int64_t dim = rng_int(r, 2), map[1] = {1 - dim};
    kdc_value_id s = kdc_ir_reduce(f, rng_int(r, 2) ? KDC_RED_SUM : KDC_RED_MAX, a, 1, &dim);
    return kdc_ir_broadcast(f, s, 2, rc, map);
  }
  case 7: {
    int64_t perm[2] = {1, 0};
    kdc_value_id t = kdc_ir_transpose(f, a, perm);
    if (rng_int(r, 2)) t = kdc_ir_unary(f, KDC_OP_NEG, t);
    return kdc_ir_transpose(f, t, perm);
  }
  case 8: {
    kdc_value_id t = kdc_ir_reshape(f, a, 1, flat);
    if (rng_int(r, 2)) t = kdc_ir_unary(f, KDC_OP_EXP, t);
    return kdc_ir_reshape(f, t, 2, rc);
  }
  case 9: { /* rows [0,1) and [1,R) concatenated back */
    int64_t s0[2] = {0, 0}, l0[2] = {1, C}, s1[2] = {1, 0}, l1[2] = {R, C}, st[2] = {1, 1};
    kdc_value_id parts[2] = {kdc_ir_slice(f, a, s0, l0, st), kdc_ir_slice(f, b, s1, l1, st)};
    return kdc_ir_concat(f, 2, parts, 0);
  }
  case 10: { /* a GEMM with a [C,C] constant */
    float d[16];
    for (int i = 0; i < C * C; i++) d[i] = rng_float(r) / 4;
    kdc_type t = kdc_type_make(KDC_DTYPE_F32, 2, cc);
    return kdc_ir_matmul(f, a, kdc_ir_constant(f, &t, d));
  }
  default: { /* a scalar constant broadcast */
    kdc_value_id s = kdc_ir_scalar(f, KDC_DTYPE_F32, splats[rng_int(r, 5)]);
    return kdc_ir_binary(f, bin[rng_int(r, 5)], a, kdc_ir_broadcast(f, s, 2, rc, NULL));
  }
  }
}

kdc_func *randgraph_build(kdc_module *m, uint64_t seed, int n_ops) {
  rng r = {seed * 2654435761u + 1};
  char name[32];
  snprintf(name, sizeof name, "f%llu", (unsigned long long)seed);
  kdc_func *f = kdc_ir_func_create(m, name);
  int64_t R = 2 + rng_int(&r, 3), C = 2 + rng_int(&r, 3), rc[2] = {R, C};
  kdc_type t = kdc_type_make(KDC_DTYPE_F32, 2, rc);
  kdc_value_id pool[128];
  size_t n = 0;
  int n_params = 1 + rng_int(&r, 3);
  for (int i = 0; i < n_params; i++) {
    snprintf(name, sizeof name, "in%d", i);
    pool[n++] = kdc_ir_parameter(f, KDC_PARAM_INPUT, name, &t);
  }
  for (int i = 0; i < n_ops && n < 128; i++) {
    kdc_value_id v = step(f, &r, pool, n, R, C);
    if (v == KDC_NO_VALUE) break;
    pool[n++] = v;
  }
  int n_res = 1 + rng_int(&r, 3);
  for (int i = 0; i < n_res; i++) /* mostly late values, sometimes anything */
    kdc_ir_add_result(f, pool[i == 0 ? n - 1 : (size_t)rng_int(&r, (int)n)], NULL);
  return f;
}

kdc_status randgraph_run(const kdc_func *f, uint64_t seed, kdc_tensor *out) {
  rng r = {seed ^ 0x9e3779b97f4a7c15ull};
  kdc_tensor *args = calloc(f->n_params ? f->n_params : 1, sizeof *args);
  for (size_t i = 0; i < f->n_params; i++) {
    const kdc_type *t = kdc_ir_type(f, f->params[i]);
    int64_t k = kdc_type_numel(t);
    float *d = malloc((size_t)k * sizeof *d);
    for (int64_t j = 0; j < k; j++) d[j] = rng_float(&r);
    args[i].type = *t;
    args[i].data = d;
  }
  kdc_status st = kdc_ir_interpret(f, args, f->n_params, out);
  for (size_t i = 0; i < f->n_params; i++) free(args[i].data);
  free(args);
  return st;
}

void randgraph_free_results(kdc_tensor *out, size_t n) {
  for (size_t i = 0; i < n; i++) free(out[i].data);
}

bool randgraph_same(const kdc_tensor *a, const kdc_tensor *b, size_t n) {
  for (size_t i = 0; i < n; i++) {
    if (!kdc_type_equal(&a[i].type, &b[i].type)) return false;
    const float *x = a[i].data, *y = b[i].data;
    for (int64_t j = 0; j < kdc_type_numel(&a[i].type); j++)
      if (memcmp(&x[j], &y[j], sizeof(float)) != 0 && !(isnan(x[j]) && isnan(y[j]))) return false;
  }
  return true;
}
