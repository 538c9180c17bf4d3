/*
 * Identical kernels compile once (runtime/jit.c: MergeFunctions before O3):
 * two kernels computing the same expression of different inputs of one
 * shape have one body after the JIT's merge (the second kernel's wrapper a
 * tail call to the first), a kernel that differs in a constant keeps its
 * own, and every output still equals the reference interpreter bit for
 * bit.  Flat kernels (codegen.h) see only their linear index, so the same
 * expression over another shape is the same code and merges too; a kernel
 * that broadcasts a row (its body needs the column index, so the shape is
 * in its code) does not.
 */
#include "cg_test.h"

/* x * exp(x) + c (+ |row| broadcast along the rows), one fusion group */
static kdc_value_id expr(kdc_func *f, kdc_value_id x, double c, kdc_value_id row) {
  kdc_value_id e = kdc_ir_binary(f, KDC_OP_MUL, x, kdc_ir_unary(f, KDC_OP_EXP, x));
  e = kdc_ir_binary_scalar(f, KDC_OP_ADD, e, c);
  if (row == KDC_NO_VALUE) return e;
  const kdc_type *t = &f->nodes[x].type;
  int64_t map[1] = {1};
  return kdc_ir_binary(f, KDC_OP_ADD, e, kdc_ir_broadcast(f, row, 2, t->dims, map));
}

static void count_merged(const kdc_rt_plan *plan, void *ctx) {
  *(size_t *)ctx = rt_jit_merged_functions(plan->jit);
}

/* A kernel merged into an identical one loses two functions: its element
 * body and its loop nest (kdc_kernel_<k>_nest, codegen/cpu_wrap.c); its
 * wrapper stays, a tail call. */
enum { FUNCS_PER_KERNEL = 2 };

/* r0 = expr(x, 1), r1 = expr(y, 1), r2 = expr(x, 2) with x f32[64,64] and
 * y f32[64,|ycols|] (with |rows|: plus a row of x's / y's width):
 * |merged| kernels merged, outputs bitwise. */
static void merge_case(int64_t ycols, bool rows, size_t merged) {
  kdc_module *m = kdc_ir_module_create("merge");
  kdc_func *f = kdc_ir_func_create(m, "predict");
  int64_t dx[2] = {64, 64}, dy[2] = {64, ycols};
  kdc_type tx = kdc_type_make(KDC_DTYPE_F32, 2, dx), ty = kdc_type_make(KDC_DTYPE_F32, 2, dy);
  kdc_type rx = kdc_type_make(KDC_DTYPE_F32, 1, &dx[1]), ry = kdc_type_make(KDC_DTYPE_F32, 1, &dy[1]);
  kdc_value_id x = kdc_ir_parameter(f, KDC_PARAM_INPUT, "x", &tx);
  kdc_value_id y = kdc_ir_parameter(f, KDC_PARAM_INPUT, "y", &ty);
  kdc_value_id bx = rows ? kdc_ir_parameter(f, KDC_PARAM_INPUT, "bx", &rx) : KDC_NO_VALUE;
  kdc_value_id by = rows ? kdc_ir_parameter(f, KDC_PARAM_INPUT, "by", &ry) : KDC_NO_VALUE;
  kdc_ir_add_result(f, expr(f, x, 1.0, bx), "r0");
  kdc_ir_add_result(f, expr(f, y, 1.0, by), "r1");
  kdc_ir_add_result(f, expr(f, x, 2.0, bx), "r2");
  size_t got = 99;
  cgt_opts o = {.inspect = count_merged, .ctx = &got};
  cgt_check(m, f, &o);
  fprintf(stderr, "y f32[64,%lld]%s: %zu functions merged\n", (long long)ycols,
          rows ? " + row" : "", got);
  assert_int_equal(got, merged * FUNCS_PER_KERNEL);
  kdc_ir_module_destroy(m);
}

static void test_identical_kernels_merge(void **state) {
  (void)state;
  merge_case(64, false, 1);
  merge_case(64, true, 1);
}

static void test_flat_kernels_of_other_shapes_merge(void **state) {
  (void)state;
  merge_case(32, false, 1);
}

static void test_different_shapes_do_not(void **state) {
  (void)state;
  merge_case(32, true, 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_identical_kernels_merge),
      cmocka_unit_test(test_flat_kernels_of_other_shapes_merge),
      cmocka_unit_test(test_different_shapes_do_not),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
