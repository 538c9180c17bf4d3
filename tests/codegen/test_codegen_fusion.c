/*
 * Fused kernels end to end: a dense layer's bias-add + GELU + softmax
 * pieces, layer-norm-like reductions, big kernels split over threads, and
 * random graphs from tests/passes/randgraph.c, all against the reference
 * interpreter (cg_test.h tolerances: exact without GEMMs, CGT_GEMM with).
 */
#include "cg_test.h"
#include "randgraph.h"

static kdc_value_id param(kdc_func *f, const char *name, int rank, const int64_t *dims) {
  kdc_type t = kdc_type_make(KDC_DTYPE_F32, rank, dims);
  return kdc_ir_parameter(f, KDC_PARAM_INPUT, name, &t);
}

/* softmax over the last dim of [R,C], max-subtracted, as Keras lowers it */
static kdc_value_id softmax(kdc_func *f, kdc_value_id x) {
  const kdc_type *t = kdc_ir_type(f, x);
  int64_t last = t->rank - 1, dims[KDC_MAX_RANK], map[KDC_MAX_RANK];
  for (int i = 0; i < t->rank; i++) dims[i] = t->dims[i], map[i] = i;
  int r = t->rank;
  kdc_value_id mx = kdc_ir_reduce(f, KDC_RED_MAX, x, 1, &last);
  kdc_value_id c = kdc_ir_binary(f, KDC_OP_SUB, x, kdc_ir_broadcast(f, mx, r, dims, map));
  kdc_value_id e = kdc_ir_unary(f, KDC_OP_EXP, c);
  kdc_value_id s = kdc_ir_reduce(f, KDC_RED_SUM, e, 1, &last);
  return kdc_ir_binary(f, KDC_OP_DIV, e, kdc_ir_broadcast(f, s, r, dims, map));
}

/* gelu(x) = 0.5 x (1 + erf(x / sqrt 2)) */
static kdc_value_id gelu(kdc_func *f, kdc_value_id x) {
  kdc_value_id s = kdc_ir_binary_scalar(f, KDC_OP_MUL, x, 0.7071067811865476);
  kdc_value_id e = kdc_ir_unary(f, KDC_OP_ERF, s);
  kdc_value_id one = kdc_ir_binary_scalar(f, KDC_OP_ADD, e, 1.0);
  return kdc_ir_binary(f, KDC_OP_MUL, kdc_ir_binary_scalar(f, KDC_OP_MUL, x, 0.5), one);
}

static void test_bias_gelu_softmax(void **state) {
  (void)state;
  static const int64_t shapes[][2] = {{7, 33}, {1, 7}, {128, 10}, {33, 1}};
  for (int s = 0; s < 4; s++)
    for (int fuse = 0; fuse < 2; fuse++) {
      kdc_module *m = kdc_ir_module_create("chain");
      kdc_func *f = kdc_ir_func_create(m, "predict");
      kdc_value_id x = param(f, "x", 2, shapes[s]);
      kdc_value_id b = param(f, "b", 1, &shapes[s][1]);
      kdc_value_id y = softmax(f, gelu(f, kdc_ir_binary_bcast(f, KDC_OP_ADD, x, b)));
      kdc_ir_add_result(f, y, "probs");
      cgt_opts o = {.no_fuse = !fuse};
      cgt_check(m, f, &o);
      kdc_ir_module_destroy(m);
    }
}

/* mean/variance normalisation over the last dim (two reductions). */
static void test_layer_norm(void **state) {
  (void)state;
  int64_t d[3] = {3, 5, 33}, last = 2, map[3] = {0, 1, 2};
  kdc_module *m = kdc_ir_module_create("ln");
  kdc_func *f = kdc_ir_func_create(m, "predict");
  kdc_value_id x = param(f, "x", 3, d);
  kdc_value_id sum = kdc_ir_reduce(f, KDC_RED_SUM, x, 1, &last);
  kdc_value_id mean = kdc_ir_binary_scalar(f, KDC_OP_DIV, sum, 33);
  kdc_value_id c = kdc_ir_binary(f, KDC_OP_SUB, x, kdc_ir_broadcast(f, mean, 3, d, map));
  kdc_value_id sq = kdc_ir_reduce(f, KDC_RED_SUM, kdc_ir_binary(f, KDC_OP_MUL, c, c), 1, &last);
  kdc_value_id var = kdc_ir_binary_scalar(f, KDC_OP_DIV, sq, 33);
  kdc_value_id inv = kdc_ir_unary(f, KDC_OP_RSQRT, kdc_ir_binary_scalar(f, KDC_OP_ADD, var, 1e-5));
  kdc_ir_add_result(f, kdc_ir_binary(f, KDC_OP_MUL, c, kdc_ir_broadcast(f, inv, 3, d, map)), "y");
  cgt_check(m, f, NULL);
  kdc_ir_module_destroy(m);
}

/* Kernels big enough to be split over the pool, with 1, 2 and 3 threads. */
static void test_threads(void **state) {
  (void)state;
  int64_t d[2] = {333, 517}, last = 1, map[2] = {0, 1};
  for (int th = 1; th <= 3; th++) {
    kdc_module *m = kdc_ir_module_create("big");
    kdc_func *f = kdc_ir_func_create(m, "predict");
    kdc_value_id x = param(f, "x", 2, d), y = param(f, "y", 2, d);
    kdc_value_id t = kdc_ir_unary(f, KDC_OP_TANH, kdc_ir_binary(f, KDC_OP_MUL, x, y));
    kdc_value_id s = kdc_ir_reduce(f, KDC_RED_SUM, t, 1, &last);
    kdc_ir_add_result(f, kdc_ir_binary(f, KDC_OP_SUB, t, kdc_ir_broadcast(f, s, 2, d, map)), "z");
    kdc_ir_add_result(f, s, "s");
    cgt_opts o = {.threads = th};
    for (int rep = 0; rep < 3; rep++) cgt_check(m, f, &o);
    kdc_ir_module_destroy(m);
  }
}

/* Several results: the same value twice, a parameter, an alias, a constant. */
static void test_results(void **state) {
  (void)state;
  int64_t d[2] = {7, 5}, r[1] = {35};
  kdc_module *m = kdc_ir_module_create("res");
  kdc_func *f = kdc_ir_func_create(m, "predict");
  kdc_value_id x = param(f, "x", 2, d);
  kdc_value_id e = kdc_ir_unary(f, KDC_OP_EXP, x);
  kdc_ir_add_result(f, e, "e");
  kdc_ir_add_result(f, e, "e_again");
  kdc_ir_add_result(f, x, "x_passthrough");
  kdc_ir_add_result(f, kdc_ir_reshape(f, e, 1, r), "e_flat");
  kdc_ir_add_result(f, kdc_ir_splat(f, KDC_DTYPE_F32, 2, d, 2.5), "const");
  kdc_ir_add_result(f, kdc_ir_reshape(f, x, 1, r), "x_flat");
  cgt_check(m, f, NULL);
  kdc_ir_module_destroy(m);
}

static void test_random_graphs(void **state) {
  (void)state;
  for (uint64_t seed = 0; seed < 60; seed++)
    for (int fuse = 0; fuse < 2; fuse++) {
      kdc_module *m = kdc_ir_module_create("rand");
      kdc_func *f = randgraph_build(m, seed, 3 + (int)(seed % 14));
      cgt_opts o = {.no_fuse = !fuse, .tol = CGT_GEMM, .gemm_k = 16};
      cgt_check(m, f, &o);
      kdc_ir_module_destroy(m);
    }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_bias_gelu_softmax), cmocka_unit_test(test_layer_norm),
      cmocka_unit_test(test_threads),           cmocka_unit_test(test_results),
      cmocka_unit_test(test_random_graphs),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
