/*
 * Identical kernels compile once (runtime/jit.c: MergeFunctions before O3):
 * two kernels computing the same expression of different inputs of one
 * shape have one body after the JIT's merge (the second kernel's wrapper a
 * tail call to the first), a kernel that differs in a constant or in its
 * shape keeps its own, and every output still equals the reference
 * interpreter bit for bit.
 */
#include "cg_test.h"

/* x * exp(x) + c, one fusion group */
static kdc_value_id expr(kdc_func *f, kdc_value_id x, double c) {
  kdc_value_id e = kdc_ir_binary(f, KDC_OP_MUL, x, kdc_ir_unary(f, KDC_OP_EXP, x));
  return kdc_ir_binary_scalar(f, KDC_OP_ADD, e, c);
}

static void count_merged(const kdc_rt_plan *plan, void *ctx) {
  *(size_t *)ctx = rt_jit_merged_functions(plan->jit);
}

/* r0 = expr(x, 1), r1 = expr(y, 1), r2 = expr(x, 2) with x f32[64,64] and
 * y f32[64,|ycols|]: |merged| bodies merged, outputs bitwise. */
static void merge_case(int64_t ycols, size_t merged) {
  kdc_module *m = kdc_ir_module_create("merge");
  kdc_func *f = kdc_ir_func_create(m, "predict");
  int64_t dx[2] = {64, 64}, dy[2] = {64, ycols};
  kdc_type tx = kdc_type_make(KDC_DTYPE_F32, 2, dx), ty = kdc_type_make(KDC_DTYPE_F32, 2, dy);
  kdc_value_id x = kdc_ir_parameter(f, KDC_PARAM_INPUT, "x", &tx);
  kdc_value_id y = kdc_ir_parameter(f, KDC_PARAM_INPUT, "y", &ty);
  kdc_ir_add_result(f, expr(f, x, 1.0), "r0");
  kdc_ir_add_result(f, expr(f, y, 1.0), "r1");
  kdc_ir_add_result(f, expr(f, x, 2.0), "r2");
  size_t got = 99;
  cgt_opts o = {.inspect = count_merged, .ctx = &got};
  cgt_check(m, f, &o);
  fprintf(stderr, "y f32[64,%lld]: %zu bodies merged\n", (long long)ycols, got);
  assert_int_equal(got, merged);
  kdc_ir_module_destroy(m);
}

static void test_identical_kernels_merge(void **state) {
  (void)state;
  merge_case(64, 1);
}

static void test_different_shapes_do_not(void **state) {
  (void)state;
  merge_case(32, 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_identical_kernels_merge),
      cmocka_unit_test(test_different_shapes_do_not),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
