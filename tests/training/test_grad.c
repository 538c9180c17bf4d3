/*
 * Gradient checks of every differentiable op (passes/grad_rules.c) against
 * central finite differences, all through the reference interpreter.
 *
 * For an op r = op(x0, x1, ...) the test differentiates y = sum(r * w) with
 * a fixed random cotangent w (so every element of the rule is exercised, not
 * only the all-ones cotangent) and compares each gradient element with
 *   fd = (Y(x + h e) - Y(x - h e)) / (x+h - (x-h)),  h = 1e-3 max(1, |x|),
 * where Y sums r * w in double in the test (only the op itself runs in f32,
 * so rounding noise is about 6e-8 |r| / h ~ 1e-4 relative).  Tolerance:
 *   |grad - fd| <= 1e-2 |fd| + 1e-3 max(1, max |fd|).
 * Inputs are smooth and away from kinks (|x| >= 0.2 for abs, operands of
 * max/min at least 0.1 apart, positive arguments for log/sqrt/rsqrt/pow).
 * The conventions at kinks (ties) are tested exactly, separately.
 */
#include "tr_test.h"

typedef kdc_value_id (*build_fn)(kdc_func *f, const kdc_value_id *x);
typedef void (*gen_fn)(int operand, float *x, int64_t n);

typedef struct gcase {
  const char *name;
  build_fn build;
  int n_in;
  kdc_type in[3];
  double lo, hi; /* inputs uniform in [lo, hi) unless |gen| */
  gen_fn gen;
} gcase;

/* ---- builders ------------------------------------------------------------------ */

#define UNARY(name, OP)                                    \
  static kdc_value_id name(kdc_func *f, const kdc_value_id *x) { \
    return kdc_ir_unary(f, OP, x[0]);                            \
  }
#define BINARY(name, OP)                                   \
  static kdc_value_id name(kdc_func *f, const kdc_value_id *x) { \
    return kdc_ir_binary(f, OP, x[0], x[1]);                     \
  }
UNARY(b_neg, KDC_OP_NEG)
UNARY(b_abs, KDC_OP_ABS)
UNARY(b_exp, KDC_OP_EXP)
UNARY(b_log, KDC_OP_LOG)
UNARY(b_log1p, KDC_OP_LOG1P)
UNARY(b_expm1, KDC_OP_EXPM1)
UNARY(b_tanh, KDC_OP_TANH)
UNARY(b_logistic, KDC_OP_LOGISTIC)
UNARY(b_sqrt, KDC_OP_SQRT)
UNARY(b_rsqrt, KDC_OP_RSQRT)
UNARY(b_erf, KDC_OP_ERF)
BINARY(b_add, KDC_OP_ADD)
BINARY(b_sub, KDC_OP_SUB)
BINARY(b_mul, KDC_OP_MUL)
BINARY(b_div, KDC_OP_DIV)
BINARY(b_max, KDC_OP_MAX)
BINARY(b_min, KDC_OP_MIN)
BINARY(b_pow, KDC_OP_POW)

static kdc_value_id b_convert(kdc_func *f, const kdc_value_id *x) {
  return kdc_ir_convert(f, x[0], KDC_DTYPE_F32);
}

static kdc_value_id b_relu(kdc_func *f, const kdc_value_id *x) {
  return kdc_ir_binary_scalar(f, KDC_OP_MAX, x[0], 0.0);
}

/* select(iota_1 < 2, x0, x1) over [3,4] */
static kdc_value_id b_select(kdc_func *f, const kdc_value_id *x) {
  kdc_type it = *kdc_ir_type(f, x[0]);
  it.dtype = KDC_DTYPE_I32;
  kdc_value_id io = kdc_ir_iota(f, &it, 1);
  kdc_value_id p = kdc_ir_compare(f, KDC_CMP_LT, io, kdc_ir_splat(f, KDC_DTYPE_I32, 2, it.dims, 2));
  return kdc_ir_select(f, p, x[0], x[1]);
}

static kdc_value_id b_bcast_row(kdc_func *f, const kdc_value_id *x) { /* [4] -> [3,4] */
  int64_t d[2] = {3, 4}, map[1] = {1};
  return kdc_ir_broadcast(f, x[0], 2, d, map);
}

static kdc_value_id b_bcast_stretch(kdc_func *f, const kdc_value_id *x) { /* [3,1] -> [2,3,4] */
  int64_t d[3] = {2, 3, 4}, map[2] = {1, 2};
  return kdc_ir_broadcast(f, x[0], 3, d, map);
}

static kdc_value_id b_bcast_scalar(kdc_func *f, const kdc_value_id *x) {
  int64_t d[2] = {2, 3};
  return kdc_ir_broadcast(f, x[0], 2, d, NULL);
}

static kdc_value_id b_reshape(kdc_func *f, const kdc_value_id *x) {
  int64_t d[2] = {2, 6};
  return kdc_ir_reshape(f, x[0], 2, d);
}

static kdc_value_id b_transpose(kdc_func *f, const kdc_value_id *x) {
  int64_t p[3] = {2, 0, 1};
  return kdc_ir_transpose(f, x[0], p);
}

static kdc_value_id b_slice(kdc_func *f, const kdc_value_id *x) { /* [5,7] */
  int64_t s[2] = {1, 0}, l[2] = {5, 7}, st[2] = {2, 3};
  return kdc_ir_slice(f, x[0], s, l, st);
}

/* An LSTM's gates: x [3, 4, 5] split along dim 1, one op per slice */
static kdc_value_id gate(kdc_func *f, kdc_value_id x, int k) {
  int64_t s[3] = {0, k, 0}, l[3] = {3, k + 1, 5}, st[3] = {1, 1, 1}, d[2] = {3, 5};
  return kdc_ir_reshape(f, kdc_ir_slice(f, x, s, l, st), 2, d);
}

static kdc_value_id b_gates(kdc_func *f, const kdc_value_id *x) {
  kdc_value_id i = kdc_ir_unary(f, KDC_OP_LOGISTIC, gate(f, x[0], 0));
  kdc_value_id g = kdc_ir_unary(f, KDC_OP_TANH, gate(f, x[0], 2));
  kdc_value_id fo = kdc_ir_binary(f, KDC_OP_MUL, kdc_ir_unary(f, KDC_OP_EXP, gate(f, x[0], 1)),
                                  gate(f, x[0], 3));
  return kdc_ir_binary(f, KDC_OP_ADD, kdc_ir_binary(f, KDC_OP_MUL, i, g), fo);
}

static kdc_value_id b_concat(kdc_func *f, const kdc_value_id *x) {
  kdc_value_id in[3] = {x[0], x[1], x[0]};
  return kdc_ir_concat(f, 3, in, 1);
}

static kdc_value_id b_pad(kdc_func *f, const kdc_value_id *x) { /* [3,4], scalar */
  int64_t lo[2] = {1, -1}, hi[2] = {-1, 2}, in[2] = {1, 0};
  return kdc_ir_pad(f, x[0], x[1], lo, hi, in);
}

static kdc_value_id reduce(kdc_func *f, kdc_reduce_kind k, kdc_value_id x, int n, int64_t d0,
                           int64_t d1) {
  int64_t d[2] = {d0, d1};
  return kdc_ir_reduce(f, k, x, n, d);
}

static kdc_value_id b_rsum(kdc_func *f, const kdc_value_id *x) {
  return reduce(f, KDC_RED_SUM, x[0], 2, 0, 2);
}
static kdc_value_id b_rmax(kdc_func *f, const kdc_value_id *x) {
  return reduce(f, KDC_RED_MAX, x[0], 1, 1, 0);
}
static kdc_value_id b_rmin(kdc_func *f, const kdc_value_id *x) {
  return reduce(f, KDC_RED_MIN, x[0], 1, 0, 0);
}
static kdc_value_id b_rprod(kdc_func *f, const kdc_value_id *x) {
  return reduce(f, KDC_RED_PROD, x[0], 1, 1, 0);
}

static kdc_attr_dot dot_attr(int nb, const int64_t *lb, const int64_t *rb, int nc,
                             const int64_t *lc, const int64_t *rc) {
  kdc_attr_dot d;
  memset(&d, 0, sizeof d);
  d.lhs_batch.n = d.rhs_batch.n = nb;
  d.lhs_contract.n = d.rhs_contract.n = nc;
  for (int i = 0; i < nb; i++) d.lhs_batch.v[i] = lb[i], d.rhs_batch.v[i] = rb[i];
  for (int i = 0; i < nc; i++) d.lhs_contract.v[i] = lc[i], d.rhs_contract.v[i] = rc[i];
  return d;
}

static kdc_value_id b_matmul(kdc_func *f, const kdc_value_id *x) {
  return kdc_ir_matmul(f, x[0], x[1]);
}

static kdc_value_id b_bmm(kdc_func *f, const kdc_value_id *x) { /* [2,3,4] x [2,4,5] */
  int64_t lb[1] = {0}, rb[1] = {0}, lc[1] = {2}, rc[1] = {1};
  kdc_attr_dot d = dot_attr(1, lb, rb, 1, lc, rc);
  return kdc_ir_dot(f, x[0], x[1], &d);
}

static kdc_value_id b_dot2c(kdc_func *f, const kdc_value_id *x) { /* [4,2,3] x [3,5,4] -> [2,5] */
  int64_t lc[2] = {0, 2}, rc[2] = {2, 0};
  kdc_attr_dot d = dot_attr(0, NULL, NULL, 2, lc, rc);
  return kdc_ir_dot(f, x[0], x[1], &d);
}

/* [3,2,4] x [4,5,2] -> [2,3,5] */
static kdc_value_id b_dotodd(kdc_func *f, const kdc_value_id *x) {
  int64_t lb[1] = {1}, rb[1] = {2}, lc[1] = {2}, rc[1] = {0};
  kdc_attr_dot d = dot_attr(1, lb, rb, 1, lc, rc);
  return kdc_ir_dot(f, x[0], x[1], &d);
}

/* softmax over the last dim of [3,5], as the frontend lowers it */
static kdc_value_id b_softmax(kdc_func *f, const kdc_value_id *x) {
  int64_t last = 1, d[2] = {3, 5}, map[1] = {0};
  kdc_value_id m = kdc_ir_broadcast(f, kdc_ir_reduce(f, KDC_RED_MAX, x[0], 1, &last), 2, d, map);
  kdc_value_id e = kdc_ir_unary(f, KDC_OP_EXP, kdc_ir_binary(f, KDC_OP_SUB, x[0], m));
  kdc_value_id s = kdc_ir_broadcast(f, kdc_ir_reduce(f, KDC_RED_SUM, e, 1, &last), 2, d, map);
  return kdc_ir_binary(f, KDC_OP_DIV, e, s);
}

/* ---- input generators ------------------------------------------------------------ */

static void gen_away0(int k, float *x, int64_t n) { /* +-[0.2, 1.5] */
  for (int64_t i = 0; i < n; i++)
    x[i] = (float)(tr_rand(0.2, 1.5) * (tr_rand(0, 1) < 0.5 ? -1 : 1));
}

static float pair_base[64];

/* operand 0 random, operand 1 = operand 0 +- [0.1, 0.6] */
static void gen_apart(int k, float *x, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    if (k == 0) x[i] = pair_base[i] = (float)tr_rand(-1, 1);
    else x[i] = pair_base[i] + (float)(tr_rand(0.1, 0.6) * (tr_rand(0, 1) < 0.5 ? -1 : 1));
  }
}

static void gen_div(int k, float *x, int64_t n) {
  if (k == 0) {
    for (int64_t i = 0; i < n; i++) x[i] = (float)tr_rand(-2, 2);
    return;
  }
  for (int64_t i = 0; i < n; i++) x[i] = (float)(tr_rand(0.5, 2) * (tr_rand(0, 1) < 0.5 ? -1 : 1));
}

static void gen_pow(int k, float *x, int64_t n) {
  for (int64_t i = 0; i < n; i++) x[i] = (float)(k == 0 ? tr_rand(0.5, 2) : tr_rand(-1.5, 1.5));
}

/* ---- the check ---------------------------------------------------------------------- */

static void check_case(const gcase *c) {
  kdc_module *m = kdc_ir_module_create("g");
  kdc_func *f = kdc_ir_func_create(m, "g");
  kdc_value_id x[3], grads[3];
  for (int k = 0; k < c->n_in; k++) {
    char nm[16];
    snprintf(nm, sizeof nm, "x%d", k);
    x[k] = kdc_ir_parameter(f, KDC_PARAM_INPUT, nm, &c->in[k]);
  }
  kdc_value_id r = c->build(f, x);
  tr_expect_ok(kdc_ir_take_error(f));
  kdc_type rt = *kdc_ir_type(f, r);
  int64_t rn = kdc_type_numel(&rt);
  float *w = malloc(sizeof(float) * (size_t)rn);
  for (int64_t i = 0; i < rn; i++) w[i] = (float)tr_rand(-1, 1);
  kdc_value_id wc = kdc_ir_constant(f, &rt, w);
  int64_t all[KDC_MAX_RANK];
  for (int i = 0; i < rt.rank; i++) all[i] = i;
  kdc_value_id y = kdc_ir_reduce(f, KDC_RED_SUM, kdc_ir_binary(f, KDC_OP_MUL, r, wc), rt.rank, all);
  tr_expect_ok(kdc_ir_take_error(f));
  kdc_ir_add_result(f, r, "r");
  tr_expect_ok(kdc_autodiff(f, y, x, (size_t)c->n_in, grads));
  for (int k = 0; k < c->n_in; k++) {
    if (grads[k] == KDC_NO_VALUE) fail_msg("%s: no gradient for x%d", c->name, k);
    kdc_ir_add_result(f, grads[k], "grad");
  }
  tr_expect_ok(kdc_ir_verify(f));
  kdc_tensor args[3];
  for (int k = 0; k < c->n_in; k++) {
    int64_t n = kdc_type_numel(&c->in[k]);
    args[k].type = c->in[k];
    args[k].data = malloc(sizeof(float) * (size_t)(n ? n : 1));
    if (c->gen) c->gen(k, args[k].data, n);
    else
      for (int64_t i = 0; i < n; i++) ((float *)args[k].data)[i] = (float)tr_rand(c->lo, c->hi);
  }
  kdc_tensor base[4];
  tr_run(f, args, (size_t)c->n_in, base);
  tr_check_fd(f, args, c->n_in, base, w, c->name);
  tr_free(base, f->n_results);
  for (int k = 0; k < c->n_in; k++) free(args[k].data);
  free(w);
  kdc_ir_module_destroy(m);
}

#define T1(r, ...) 1, {tr_type(r, __VA_ARGS__)}
#define T2(r, ...) 2, {tr_type(r, __VA_ARGS__), tr_type(r, __VA_ARGS__)}

static void test_fd_all_ops(void **state) {
  (void)state;
  const gcase cases[] = {
      {"neg", b_neg, T1(2, 3, 4), -2, 2, NULL},
      {"abs", b_abs, T1(2, 3, 4), 0, 0, gen_away0},
      {"exp", b_exp, T1(2, 3, 4), -2, 2, NULL},
      {"log", b_log, T1(2, 3, 4), 0.3, 3, NULL},
      {"log1p", b_log1p, T1(2, 3, 4), -0.5, 2, NULL},
      {"expm1", b_expm1, T1(2, 3, 4), -2, 2, NULL},
      {"tanh", b_tanh, T1(2, 3, 4), -2, 2, NULL},
      {"logistic", b_logistic, T1(2, 3, 4), -3, 3, NULL},
      {"sqrt", b_sqrt, T1(2, 3, 4), 0.3, 3, NULL},
      {"rsqrt", b_rsqrt, T1(2, 3, 4), 0.3, 3, NULL},
      {"erf", b_erf, T1(2, 3, 4), -2, 2, NULL},
      {"convert", b_convert, T1(2, 3, 4), -2, 2, NULL},
      {"relu", b_relu, T1(2, 3, 4), 0, 0, gen_away0},
      {"add", b_add, T2(2, 3, 4), -2, 2, NULL},
      {"sub", b_sub, T2(2, 3, 4), -2, 2, NULL},
      {"mul", b_mul, T2(2, 3, 4), -2, 2, NULL},
      {"div", b_div, T2(2, 3, 4), 0, 0, gen_div},
      {"max", b_max, T2(2, 3, 4), 0, 0, gen_apart},
      {"min", b_min, T2(2, 3, 4), 0, 0, gen_apart},
      {"pow", b_pow, T2(2, 3, 4), 0, 0, gen_pow},
      {"select", b_select, T2(2, 3, 4), -2, 2, NULL},
      {"broadcast_row", b_bcast_row, T1(1, 4), -2, 2, NULL},
      {"broadcast_stretch", b_bcast_stretch, T1(2, 3, 1), -2, 2, NULL},
      {"broadcast_scalar", b_bcast_scalar, T1(0, 0), -2, 2, NULL},
      {"reshape", b_reshape, T1(2, 3, 4), -2, 2, NULL},
      {"transpose", b_transpose, T1(3, 2, 3, 4), -2, 2, NULL},
      {"slice", b_slice, T1(2, 5, 7), -2, 2, NULL},
      {"slices_tiling", b_gates, T1(3, 3, 4, 5), -2, 2, NULL},
      {"concatenate", b_concat, 2, {tr_type(2, 2, 3), tr_type(2, 2, 2)}, -2, 2, NULL},
      {"pad", b_pad, 2, {tr_type(2, 3, 4), tr_type(0, 0)}, -2, 2, NULL},
      {"reduce_sum", b_rsum, T1(3, 2, 3, 4), -2, 2, NULL},
      {"reduce_max", b_rmax, T1(2, 3, 4), -2, 2, NULL},
      {"reduce_min", b_rmin, T1(2, 3, 4), -2, 2, NULL},
      {"reduce_prod", b_rprod, T1(2, 3, 4), 0.5, 1.5, NULL},
      {"matmul", b_matmul, 2, {tr_type(2, 3, 4), tr_type(2, 4, 5)}, -1, 1, NULL},
      {"batch_matmul", b_bmm, 2, {tr_type(3, 2, 3, 4), tr_type(3, 2, 4, 5)}, -1, 1, NULL},
      {"dot_two_contract", b_dot2c, 2, {tr_type(3, 4, 2, 3), tr_type(3, 3, 5, 4)}, -1, 1, NULL},
      {"dot_odd_batch", b_dotodd, 2, {tr_type(3, 3, 2, 4), tr_type(3, 4, 5, 2)}, -1, 1, NULL},
      {"softmax", b_softmax, T1(2, 3, 5), -2, 2, NULL},
  };
  tr_seed(1);
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) check_case(&cases[i]);
}

/* ---- exact conventions ------------------------------------------------------------------ */

/* Runs |f| on float args and returns result |k| (caller frees all). */
static float *run1(kdc_func *f, kdc_tensor *args, size_t n, size_t k, kdc_tensor *out) {
  tr_run(f, args, n, out);
  return out[k].data;
}

static void test_ties(void **state) {
  (void)state;
  kdc_module *m = kdc_ir_module_create("t");
  kdc_func *f = kdc_ir_func_create(m, "t");
  kdc_type t = tr_type(1, 4);
  kdc_value_id a = kdc_ir_parameter(f, KDC_PARAM_INPUT, "a", &t);
  kdc_value_id b = kdc_ir_parameter(f, KDC_PARAM_INPUT, "b", &t);
  int64_t d0 = 0;
  /* y = sum(relu(a)) + sum(max(a, b)) + reduce_max(b) */
  kdc_value_id relu = kdc_ir_binary_scalar(f, KDC_OP_MAX, a, 0.0);
  kdc_value_id y = kdc_ir_reduce(f, KDC_RED_SUM, relu, 1, &d0);
  kdc_value_id mab = kdc_ir_binary(f, KDC_OP_MAX, a, b);
  y = kdc_ir_binary(f, KDC_OP_ADD, y, kdc_ir_reduce(f, KDC_RED_SUM, mab, 1, &d0));
  y = kdc_ir_binary(f, KDC_OP_ADD, y, kdc_ir_reduce(f, KDC_RED_MAX, b, 1, &d0));
  kdc_value_id wrt[2] = {a, b}, g[2];
  tr_expect_ok(kdc_ir_take_error(f));
  tr_expect_ok(kdc_autodiff(f, y, wrt, 2, g));
  kdc_ir_add_result(f, g[0], "ga");
  kdc_ir_add_result(f, g[1], "gb");
  float av[4] = {0.0f, 2.0f, -1.0f, 3.0f}, bv[4] = {1.0f, 2.0f, 3.0f, 3.0f};
  kdc_tensor args[2] = {{t, av}, {t, bv}}, out[2];
  tr_run(f, args, 2, out);
  const float *ga = out[0].data, *gb = out[1].data;
  /* relu'(0) = 0 (the constant wins the tie); max(a,b) tie at [1],[3]: 1/2 each;
   * reduce_max(b) ties at [2],[3]: 1/2 each. */
  const float want_a[4] = {0.0f, 1.0f + 0.5f, 0.0f, 1.0f + 0.5f};
  const float want_b[4] = {1.0f, 0.5f, 1.0f + 0.5f, 0.5f + 0.5f};
  for (int i = 0; i < 4; i++) {
    TR_CLOSE(ga[i], want_a[i], 0, 0, "d/da[%d]", i);
    TR_CLOSE(gb[i], want_b[i], 0, 0, "d/db[%d]", i);
  }
  tr_free(out, 2);
  kdc_ir_module_destroy(m);
}

/* x used three times: y = sum(x*x + x) -> 2x + 1; a floor/int path gives none. */
static void test_accumulate_and_none(void **state) {
  (void)state;
  kdc_module *m = kdc_ir_module_create("t");
  kdc_func *f = kdc_ir_func_create(m, "t");
  kdc_type t = tr_type(1, 3);
  kdc_value_id x = kdc_ir_parameter(f, KDC_PARAM_INPUT, "x", &t);
  kdc_value_id z = kdc_ir_parameter(f, KDC_PARAM_INPUT, "z", &t);
  kdc_value_id u = kdc_ir_parameter(f, KDC_PARAM_INPUT, "u", &t);
  kdc_value_id q = kdc_ir_parameter(f, KDC_PARAM_INPUT, "unused", &t);
  int64_t d0 = 0;
  kdc_value_id s = kdc_ir_binary(f, KDC_OP_ADD, kdc_ir_binary(f, KDC_OP_MUL, x, x), x);
  s = kdc_ir_binary(f, KDC_OP_ADD, s, kdc_ir_unary(f, KDC_OP_FLOOR, z));
  kdc_value_id ui = kdc_ir_convert(f, kdc_ir_convert(f, u, KDC_DTYPE_I32), KDC_DTYPE_F32);
  s = kdc_ir_binary(f, KDC_OP_ADD, s, ui);
  kdc_value_id y = kdc_ir_reduce(f, KDC_RED_SUM, s, 1, &d0);
  kdc_value_id wrt[4] = {x, z, u, q}, g[4];
  tr_expect_ok(kdc_ir_take_error(f));
  tr_expect_ok(kdc_autodiff(f, y, wrt, 4, g));
  assert_true(g[0] != KDC_NO_VALUE);
  assert_true(g[1] == KDC_NO_VALUE && g[2] == KDC_NO_VALUE && g[3] == KDC_NO_VALUE);
  kdc_ir_add_result(f, g[0], "gx");
  float xv[3] = {1.5f, -2.0f, 0.25f}, zero[3] = {0};
  kdc_tensor args[4] = {{t, xv}, {t, zero}, {t, zero}, {t, zero}}, out[1];
  const float *gx = run1(f, args, 4, 0, out);
  for (int i = 0; i < 3; i++) TR_CLOSE(gx[i], 2 * xv[i] + 1, 0, 0, "d/dx[%d]", i);
  tr_free(out, 1);
  kdc_ir_module_destroy(m);
}

/* The cotangents of slices that tile a value (an LSTM's gates) are pads by
 * -0.0 and sum into ONE pad of their concatenate (kdc_grad_accum): the
 * gradient is a pad by nothing of a concatenate of the four pieces in
 * slice order, no add (values: test_fd_all_ops "slices_tiling"). */
static void test_slices_concat(void **state) {
  (void)state;
  kdc_module *m = kdc_ir_module_create("t");
  kdc_func *f = kdc_ir_func_create(m, "t");
  kdc_type t = tr_type(3, 3, 4, 5);
  kdc_value_id x = kdc_ir_parameter(f, KDC_PARAM_INPUT, "x", &t);
  kdc_value_id r = b_gates(f, &x), g;
  int64_t all[2] = {0, 1};
  kdc_value_id y = kdc_ir_reduce(f, KDC_RED_SUM, r, 2, all);
  tr_expect_ok(kdc_ir_take_error(f));
  tr_expect_ok(kdc_autodiff(f, y, &x, 1, &g));
  const kdc_node *p = kdc_ir_node(f, g);
  assert_int_equal(p->op, KDC_OP_PAD);
  for (int d = 0; d < 3; d++)
    assert_true(!p->attr.pad.low.v[d] && !p->attr.pad.high.v[d] && !p->attr.pad.interior.v[d]);
  const kdc_node *c = kdc_ir_node(f, p->in[0]);
  assert_int_equal(c->op, KDC_OP_CONCAT);
  assert_int_equal(c->n_in, 4);
  assert_int_equal(c->attr.dim, 1);
  kdc_ir_module_destroy(m);
}

/* Through bf16 (a mixed-precision layer, frontend/policy.c): y = sum(x *
 * dot(convert(w, bf16), convert(v, bf16)) -> f32); the gradient of the f32
 * weight w is f32, the cotangent having passed through bf16 values: dW =
 * convert(bf16(x) . bf16(v)^T) exactly as the rule composes it (x rounded
 * to bf16 on its way into the bf16 dot, one rounding of the f32 sum). */
static void test_through_bf16(void **state) {
  (void)state;
  kdc_module *m = kdc_ir_module_create("t");
  kdc_func *f = kdc_ir_func_create(m, "t");
  int64_t wd[2] = {2, 3}, vd[2] = {3, 2}, xd[2] = {2, 2};
  kdc_type wt = kdc_type_make(KDC_DTYPE_F32, 2, wd), vt = kdc_type_make(KDC_DTYPE_F32, 2, vd);
  kdc_type xt = kdc_type_make(KDC_DTYPE_F32, 2, xd);
  kdc_value_id w = kdc_ir_parameter(f, KDC_PARAM_INPUT, "w", &wt);
  kdc_value_id v = kdc_ir_parameter(f, KDC_PARAM_INPUT, "v", &vt);
  kdc_value_id x = kdc_ir_parameter(f, KDC_PARAM_INPUT, "x", &xt);
  f->lowp = KDC_DTYPE_BF16; /* as the frontend sets it for a mixed layer */
  kdc_value_id d = kdc_ir_matmul(f, w, v);
  f->lowp = KDC_DTYPE_F32;
  assert_int_equal(kdc_ir_type(f, d)->dtype, KDC_DTYPE_F32);
  assert_int_equal(f->nodes[f->nodes[d].in[0]].type.dtype, KDC_DTYPE_BF16); /* the bf16 dot */
  int64_t dims[2] = {0, 1};
  kdc_value_id y = kdc_ir_reduce(f, KDC_RED_SUM, kdc_ir_binary(f, KDC_OP_MUL, x, d), 2, dims);
  kdc_value_id wrt[1] = {w}, g[1];
  tr_expect_ok(kdc_ir_take_error(f));
  tr_expect_ok(kdc_autodiff(f, y, wrt, 1, g));
  assert_int_equal(kdc_ir_type(f, g[0])->dtype, KDC_DTYPE_F32);
  kdc_ir_add_result(f, g[0], "gw");
  float wv[6] = {1, 2, 3, 4, 5, 6}, vv[6] = {1.00390625f, 0.5f, -2.0f, 3.0f, 0.25f, 1.0f};
  float xv[4] = {1.0f + 1.0f / 256 + 1.0f / 512, 0.3f, -0.7f, 2.0f}; /* [0]: rounds up in bf16 */
  kdc_tensor args[3] = {{wt, wv}, {vt, vv}, {xt, xv}}, out[1];
  const float *gw = run1(f, args, 3, 0, out);
  for (int i = 0; i < 2; i++)
    for (int j = 0; j < 3; j++) { /* dW[i][j] = sum_k bf16(x[i][k]) bf16(v[j][k]), rounded */
      float acc = 0;
      for (int k = 0; k < 2; k++)
        acc += kdc_float_round(KDC_DTYPE_BF16, xv[i * 2 + k]) *
               kdc_float_round(KDC_DTYPE_BF16, vv[j * 2 + k]);
      TR_CLOSE(gw[i * 3 + j], kdc_float_round(KDC_DTYPE_BF16, acc), 0, 0, "dW[%d][%d]", i, j);
    }
  tr_free(out, 1);
  kdc_ir_module_destroy(m);
}

/* Dense gradients: dot_generals whose results are already in the weight's
 * layout (no transpose anywhere), dx = g . W (contract N), dW = x . g. */
static void test_matmul_layout(void **state) {
  (void)state;
  kdc_module *m = kdc_ir_module_create("t");
  kdc_func *f = kdc_ir_func_create(m, "t");
  kdc_type xt = tr_type(2, 8, 4), wt = tr_type(2, 4, 3);
  kdc_value_id x = kdc_ir_parameter(f, KDC_PARAM_INPUT, "x", &xt);
  kdc_value_id w = kdc_ir_parameter(f, KDC_PARAM_WEIGHT, "d/kernel", &wt);
  kdc_value_id h = kdc_ir_matmul(f, x, w);
  int64_t all[2] = {0, 1};
  kdc_value_id y = kdc_ir_reduce(f, KDC_RED_SUM, kdc_ir_unary(f, KDC_OP_TANH, h), 2, all);
  size_t n_fwd = f->n_nodes;
  kdc_value_id wrt[2] = {x, w}, g[2];
  tr_expect_ok(kdc_autodiff(f, y, wrt, 2, g));
  for (size_t v = n_fwd; v < f->n_nodes; v++)
    assert_int_not_equal(f->nodes[v].op, KDC_OP_TRANSPOSE);
  const kdc_node *dx = &f->nodes[g[0]], *dw = &f->nodes[g[1]];
  assert_int_equal(dx->op, KDC_OP_DOT);
  assert_int_equal(dw->op, KDC_OP_DOT);
  assert_int_equal(dx->in[1], w);
  assert_int_equal(dw->in[0], x);
  assert_int_equal(dw->attr.dot.lhs_contract.v[0], 0);
  assert_int_equal(dw->attr.dot.rhs_contract.v[0], 0);
  assert_true(kdc_type_equal(&dw->type, &wt));
  kdc_ir_module_destroy(m);
}

static void test_errors(void **state) {
  (void)state;
  kdc_module *m = kdc_ir_module_create("t");
  kdc_func *f = kdc_ir_func_create(m, "t");
  kdc_type t = tr_type(1, 3);
  kdc_value_id x = kdc_ir_parameter(f, KDC_PARAM_INPUT, "x", &t);
  kdc_value_id g;
  kdc_status st = kdc_autodiff(f, x, &x, 1, &g); /* not a scalar */
  assert_int_equal(kdc_status_code(st), KDC_INVALID_INPUT);
  kdc_status_free(st);
  kdc_value_id i = kdc_ir_convert(f, x, KDC_DTYPE_I32);
  int64_t d0 = 0;
  kdc_value_id y = kdc_ir_reduce(f, KDC_RED_SUM, x, 1, &d0);
  st = kdc_autodiff(f, y, &i, 1, &g); /* integer wrt */
  assert_int_equal(kdc_status_code(st), KDC_INVALID_INPUT);
  kdc_status_free(st);
  kdc_attrs a;
  memset(&a, 0, sizeof a);
  kdc_value_id ar = kdc_ir_append(f, KDC_OP_ALL_REDUCE, &t, 1, &x, &a);
  y = kdc_ir_reduce(f, KDC_RED_SUM, ar, 1, &d0);
  st = kdc_autodiff(f, y, &x, 1, &g);
  assert_int_equal(kdc_status_code(st), KDC_UNSUPPORTED);
  assert_non_null(strstr(kdc_status_message(st), "all_reduce"));
  kdc_status_free(st);
  kdc_ir_module_destroy(m);
}

/* Every op has a rule row, and ops with an f32 result that are not leaves,
 * integer-only or piecewise constant have a real rule. */
static void test_table(void **state) {
  (void)state;
  for (int op = 0; op < KDC_OP_COUNT; op++) {
    const kdc_grad_rule *r = kdc_grad_rule_of((kdc_op)op);
    assert_non_null(r->why);
    assert_true((r->kind == KDC_GRAD_RULE) == (r->fn != NULL));
    if (kdc_op_flags((kdc_op)op) & OPF_LEAF) assert_int_equal(r->kind, KDC_GRAD_LEAF);
  }
  assert_int_equal(kdc_grad_rule_of(KDC_OP_DOT)->kind, KDC_GRAD_RULE);
  assert_int_equal(kdc_grad_rule_of(KDC_OP_FLOOR)->kind, KDC_GRAD_ZERO);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_fd_all_ops),   cmocka_unit_test(test_ties),
      cmocka_unit_test(test_accumulate_and_none), cmocka_unit_test(test_matmul_layout),
      cmocka_unit_test(test_slices_concat),
      cmocka_unit_test(test_through_bf16),
      cmocka_unit_test(test_errors),       cmocka_unit_test(test_table),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
