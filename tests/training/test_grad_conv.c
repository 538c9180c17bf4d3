/*
 * Gradient checks of the windowed and indexed ops (passes/grad_window.c)
 * against central finite differences through the reference interpreter,
 * with test_grad.c's method and tolerance: y = sum(op(x..) * w) for a fixed
 * random cotangent w, fd = (Y(x+h) - Y(x-h)) / (2h), h = 1e-3 max(1, |x|),
 * |grad - fd| <= 1e-2 |fd| + 1e-3 max(1, max |fd|).
 * Convolutions cover padding (same, asymmetric, negative), strides whose
 * last input rows are unused, kernel and input dilation, groups (generic and
 * depthwise with a multiplier), 1-D and 2-D.  Max pooling inputs are
 * distinct values 0.05 apart (no tie within 2h); the tie rule (first max of
 * the window gets it all) and the dropped out-of-range ids are checked
 * exactly.
 */
#include "tr_test.h"

typedef kdc_value_id (*build_fn)(kdc_func *f, const kdc_value_id *x);

typedef struct gcase {
  const char *name;
  build_fn build;
  int n_in;
  kdc_type in[2];
  bool distinct; /* inputs: a shuffled grid 0.05 apart */
} gcase;

typedef struct cconf {
  int n;
  int64_t s[2], lo[2], hi[2], ld[2], rd[2], g;
} cconf;

static cconf cur; /* the conv case being built */

static kdc_value_id b_conv(kdc_func *f, const kdc_value_id *x) {
  kdc_attr_conv a;
  kdc_attr_conv_init(&a, cur.n);
  for (int d = 0; d < cur.n; d++) {
    a.stride.v[d] = cur.s[d], a.pad_low.v[d] = cur.lo[d], a.pad_high.v[d] = cur.hi[d];
    a.lhs_dilation.v[d] = cur.ld[d], a.rhs_dilation.v[d] = cur.rd[d];
  }
  a.groups = cur.g;
  return kdc_ir_convolution(f, x[0], x[1], &a);
}

static kdc_attr_window win(kdc_reduce_kind k, const int64_t *w, const int64_t *s,
                           const int64_t *lo, const int64_t *hi, const int64_t *dil) {
  kdc_attr_window a;
  kdc_attr_window_init(&a, k, 4);
  for (int d = 0; d < 4; d++)
    a.window.v[d] = w[d], a.stride.v[d] = s[d], a.pad_low.v[d] = lo[d], a.pad_high.v[d] = hi[d],
    a.dilation.v[d] = dil[d];
  return a;
}

static kdc_value_id b_avg_same(kdc_func *f, const kdc_value_id *x) { /* 2x2/2, pad high 1 */
  kdc_attr_window a = win(KDC_RED_SUM, (int64_t[]){1, 2, 2, 1}, (int64_t[]){1, 2, 2, 1},
                          (int64_t[]){0, 0, 0, 0}, (int64_t[]){0, 1, 1, 0},
                          (int64_t[]){1, 1, 1, 1});
  return kdc_ir_reduce_window(f, x[0], &a);
}

static kdc_value_id b_sum_dilated(kdc_func *f, const kdc_value_id *x) {
  kdc_attr_window a = win(KDC_RED_SUM, (int64_t[]){1, 3, 2, 1}, (int64_t[]){1, 1, 2, 1},
                          (int64_t[]){0, 1, 0, 0}, (int64_t[]){0, 2, 1, 0},
                          (int64_t[]){1, 1, 2, 1});
  return kdc_ir_reduce_window(f, x[0], &a);
}

static kdc_value_id b_max_pool(kdc_func *f, const kdc_value_id *x) {
  kdc_attr_window a = win(KDC_RED_MAX, (int64_t[]){1, 2, 2, 1}, (int64_t[]){1, 2, 2, 1},
                          (int64_t[]){0, 0, 0, 0}, (int64_t[]){0, 0, 0, 0},
                          (int64_t[]){1, 1, 1, 1});
  return kdc_ir_reduce_window(f, x[0], &a);
}

static kdc_value_id b_max_overlap(kdc_func *f, const kdc_value_id *x) { /* 3x3/2 same */
  kdc_attr_window a = win(KDC_RED_MAX, (int64_t[]){1, 3, 3, 1}, (int64_t[]){1, 2, 2, 1},
                          (int64_t[]){0, 1, 1, 0}, (int64_t[]){0, 1, 1, 0},
                          (int64_t[]){1, 1, 1, 1});
  return kdc_ir_reduce_window(f, x[0], &a);
}

static kdc_value_id b_min_pool(kdc_func *f, const kdc_value_id *x) {
  kdc_attr_window a = win(KDC_RED_MIN, (int64_t[]){1, 2, 3, 1}, (int64_t[]){1, 1, 2, 1},
                          (int64_t[]){0, 0, 1, 0}, (int64_t[]){0, 1, 0, 0},
                          (int64_t[]){1, 1, 1, 1});
  return kdc_ir_reduce_window(f, x[0], &a);
}

static const int32_t gather_ids[6] = {1, -2, 3, 0, 1, 6};   /* a duplicate, a wrapped id */
static const int32_t scatter_ids[6] = {1, -2, 9, 0, 1, -8}; /* + two dropped (9, -8) */

static kdc_value_id ids(kdc_func *f, const int32_t *v) {
  kdc_type t = kdc_type_make(KDC_DTYPE_I32, 2, (int64_t[]){2, 3});
  return kdc_ir_constant(f, &t, v);
}

static kdc_value_id b_gather(kdc_func *f, const kdc_value_id *x) {
  return kdc_ir_gather(f, x[0], ids(f, gather_ids));
}

static kdc_value_id b_scatter(kdc_func *f, const kdc_value_id *x) {
  kdc_type t = kdc_type_make(KDC_DTYPE_F32, 2, (int64_t[]){7, 4});
  return kdc_ir_scatter_add(f, ids(f, scatter_ids), x[0], &t);
}

static kdc_value_id b_reverse(kdc_func *f, const kdc_value_id *x) {
  return kdc_ir_reverse(f, x[0], 2, (int64_t[]){2, 0});
}

/* conv -> max pool -> conv: the rules composed */
static kdc_value_id b_chain(kdc_func *f, const kdc_value_id *x) {
  cur = (cconf){2, {1, 1}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, 1};
  kdc_value_id h = b_conv(f, x);
  h = b_max_pool(f, &h);
  kdc_value_id in[2] = {h, x[1]};
  return b_conv(f, in);
}

/* ---- the check (test_grad.c's) --------------------------------------------------- */

static void fill(const gcase *c, int k, float *x, int64_t n) {
  if (!c->distinct) {
    for (int64_t i = 0; i < n; i++) x[i] = (float)tr_rand(-1, 1);
    return;
  }
  for (int64_t i = 0; i < n; i++) x[i] = (float)(0.05 * (double)(i - n / 2)) + 0.01f * (float)k;
  for (int64_t i = n - 1; i > 0; i--) { /* shuffle */
    int64_t j = (int64_t)tr_rand(0, (double)i + 1);
    if (j > i) j = i;
    float t = x[i];
    x[i] = x[j], x[j] = t;
  }
}

static void check_case(const gcase *c) {
  kdc_module *m = kdc_ir_module_create("g");
  kdc_func *f = kdc_ir_func_create(m, "g");
  kdc_value_id x[2], grads[2];
  for (int k = 0; k < c->n_in; k++) {
    char nm[16];
    snprintf(nm, sizeof nm, "x%d", k);
    x[k] = kdc_ir_parameter(f, KDC_PARAM_INPUT, nm, &c->in[k]);
  }
  kdc_value_id r = c->build(f, x);
  tr_expect_ok(kdc_ir_take_error(f));
  kdc_type rt = *kdc_ir_type(f, r);
  int64_t rn = kdc_type_numel(&rt), all[KDC_MAX_RANK];
  float *w = malloc(sizeof(float) * (size_t)rn);
  for (int64_t i = 0; i < rn; i++) w[i] = (float)tr_rand(-1, 1);
  for (int i = 0; i < rt.rank; i++) all[i] = i;
  kdc_value_id wc = kdc_ir_constant(f, &rt, w);
  kdc_value_id y = kdc_ir_reduce(f, KDC_RED_SUM, kdc_ir_binary(f, KDC_OP_MUL, r, wc), rt.rank, all);
  kdc_ir_add_result(f, r, "r");
  tr_expect_ok(kdc_autodiff(f, y, x, (size_t)c->n_in, grads));
  for (int k = 0; k < c->n_in; k++) {
    if (grads[k] == KDC_NO_VALUE) fail_msg("%s: no gradient for x%d", c->name, k);
    kdc_ir_add_result(f, grads[k], "grad");
  }
  tr_expect_ok(kdc_ir_take_error(f));
  tr_expect_ok(kdc_ir_verify(f));
  kdc_tensor args[2], base[3];
  for (int k = 0; k < c->n_in; k++) {
    int64_t n = kdc_type_numel(&c->in[k]);
    args[k].type = c->in[k];
    args[k].data = malloc(sizeof(float) * (size_t)(n ? n : 1));
    fill(c, k, args[k].data, n);
  }
  tr_run(f, args, (size_t)c->n_in, base);
  tr_check_fd(f, args, c->n_in, base, w, c->name);
  tr_free(base, f->n_results);
  for (int k = 0; k < c->n_in; k++) free(args[k].data);
  free(w);
  kdc_ir_module_destroy(m);
}

static kdc_type F(int r, int64_t a, int64_t b, int64_t c, int64_t d) {
  int64_t dims[4] = {a, b, c, d};
  return kdc_type_make(KDC_DTYPE_F32, r, dims);
}

static void test_conv_grads(void **state) {
  (void)state;
  static const struct { const char *name; cconf c; int64_t x[4], w[4]; } cs[] = {
      {"same", {2, {1, 1}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, 1}, {2, 5, 4, 3}, {3, 3, 3, 4}},
      {"strided dilated", {2, {2, 2}, {0, 1}, {1, 0}, {1, 1}, {1, 2}, 1}, {1, 7, 6, 2},
       {2, 3, 2, 3}},
      {"stride drops rows", {2, {2, 2}, {0, 0}, {0, 0}, {1, 1}, {1, 1}, 1}, {1, 6, 6, 2},
       {3, 3, 2, 2}},
      {"depthwise x2", {2, {1, 1}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, 3}, {2, 4, 4, 3}, {3, 3, 1, 6}},
      {"groups 2", {2, {1, 2}, {1, 0}, {1, 1}, {1, 1}, {1, 1}, 2}, {1, 4, 5, 4}, {3, 3, 2, 6}},
      {"lhs dilation", {2, {1, 1}, {2, 1}, {2, 2}, {2, 2}, {1, 1}, 1}, {1, 3, 3, 2}, {3, 3, 2, 2}},
      {"crop", {2, {1, 1}, {-1, 0}, {0, 1}, {1, 1}, {1, 1}, 1}, {1, 6, 6, 2}, {3, 3, 2, 3}},
  };
  for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
    cur = cs[i].c;
    gcase g = {cs[i].name, b_conv, 2,
               {F(4, cs[i].x[0], cs[i].x[1], cs[i].x[2], cs[i].x[3]),
                F(4, cs[i].w[0], cs[i].w[1], cs[i].w[2], cs[i].w[3])}, false};
    check_case(&g);
  }
  cur = (cconf){1, {2}, {3}, {1}, {1}, {2}, 1};
  check_case(&(gcase){"conv1d", b_conv, 2, {F(3, 2, 9, 3, 0), F(3, 4, 3, 2, 0)}, false});
}

static void test_window_grads(void **state) {
  (void)state;
  const gcase cs[] = {
      {"avg same", b_avg_same, 1, {F(4, 2, 5, 5, 3)}, false},
      {"sum dilated", b_sum_dilated, 1, {F(4, 1, 5, 6, 2)}, false},
      {"max pool", b_max_pool, 1, {F(4, 2, 4, 6, 2)}, true},
      {"max overlap", b_max_overlap, 1, {F(4, 1, 5, 5, 2)}, true},
      {"min pool", b_min_pool, 1, {F(4, 1, 4, 5, 2)}, true},
      {"gather", b_gather, 1, {F(2, 7, 4, 0, 0)}, false},
      {"scatter_add", b_scatter, 1, {F(3, 2, 3, 4, 0)}, false},
      {"reverse", b_reverse, 1, {F(3, 3, 2, 4, 0)}, false},
      {"conv pool conv", b_chain, 2, {F(4, 1, 4, 4, 2), F(4, 3, 3, 2, 2)}, true},
  };
  for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) check_case(&cs[i]);
}

/* Exact conventions: a max-pool tie sends the whole cotangent to the first
 * maximum of the window (row-major), as XLA's select(ge) / TF MaxPoolGrad;
 * scatter_add drops out-of-range ids, and its gradient is 0 there. */
static void test_exact_conventions(void **state) {
  (void)state;
  kdc_module *m = kdc_ir_module_create("g");
  kdc_func *f = kdc_ir_func_create(m, "g");
  kdc_type xt = F(4, 1, 2, 2, 1);
  kdc_value_id x = kdc_ir_parameter(f, KDC_PARAM_INPUT, "x", &xt);
  kdc_value_id r = b_max_pool(f, &x);
  int64_t all[4] = {0, 1, 2, 3};
  kdc_value_id y = kdc_ir_reduce(f, KDC_RED_SUM, r, 4, all), g;
  tr_expect_ok(kdc_autodiff(f, y, &x, 1, &g));
  kdc_ir_add_result(f, g, "g");
  float xv[4] = {1, 3, 3, 2};
  kdc_tensor arg = {xt, xv}, out[1];
  tr_run(f, &arg, 1, out);
  const float *gv = out[0].data;
  assert_true(gv[0] == 0 && gv[1] == 1 && gv[2] == 0 && gv[3] == 0);
  tr_free(out, 1);
  kdc_ir_module_destroy(m);

  m = kdc_ir_module_create("g");
  f = kdc_ir_func_create(m, "g");
  kdc_type ut = F(3, 2, 3, 4, 0);
  kdc_value_id u = kdc_ir_parameter(f, KDC_PARAM_INPUT, "u", &ut);
  r = b_scatter(f, &u);
  y = kdc_ir_reduce(f, KDC_RED_SUM, r, 2, all);
  tr_expect_ok(kdc_autodiff(f, y, &u, 1, &g));
  kdc_ir_add_result(f, g, "g");
  kdc_ir_add_result(f, r, "r");
  float uv[24];
  for (int i = 0; i < 24; i++) uv[i] = (float)i;
  kdc_tensor ua = {ut, uv}, o2[2];
  tr_run(f, &ua, 1, o2);
  const float *gu = o2[0].data, *rv = o2[1].data;
  for (int i = 0; i < 24; i++) assert_true(gu[i] == (i / 4 == 2 || i / 4 == 5 ? 0.0f : 1.0f));
  assert_true(rv[1 * 4 + 0] == uv[0] + uv[16]); /* row 1: ids 0 and 4, in order */
  assert_true(rv[5 * 4 + 0] == uv[4]);          /* -2 wraps to 5 */
  tr_free(o2, 2);
  kdc_ir_module_destroy(m);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_conv_grads),
      cmocka_unit_test(test_window_grads),
      cmocka_unit_test(test_exact_conventions),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
