/*
 * Identical kernels are emitted once (codegen/dedup.c): two kernels
 * computing the same expression of different inputs of one shape are one
 * kernel of the plan, called by two steps with different buffers; a kernel
 * that differs in a constant keeps its own, and every output still equals
 * the reference interpreter bit for bit.  Flat kernels (codegen.h) see
 * only their linear index, so the same expression over another shape is
 * the same code and is shared too; a kernel that broadcasts a row (its
 * body needs the column index, so the shape is in its code) is not.  A
 * chain of identical dense layers has as many kernels as one layer.
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

typedef struct counts {
  uint32_t kernels, kernel_steps;
} counts;

static void count_kernels(const kdc_rt_plan *plan, void *ctx) {
  counts *c = ctx;
  c->kernels = plan->prog.n_kernels;
  c->kernel_steps = 0;
  for (uint32_t f = 0; f < plan->prog.n_funcs; f++)
    for (uint32_t s = 0; s < plan->prog.funcs[f].n_steps; s++)
      c->kernel_steps += plan->prog.funcs[f].steps[s].kind == KDC_STEP_KERNEL;
}

/* r0 = expr(x, 1), r1 = expr(y, 1), r2 = expr(x, 2) with x f32[64,64] and
 * y f32[64,|ycols|] (with |rows|: plus a row of x's / y's width): three
 * kernel steps, 3 - |merged| kernels, outputs bitwise. */
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
  counts got = {99, 99};
  cgt_opts o = {.inspect = count_kernels, .ctx = &got};
  cgt_check(m, f, &o);
  fprintf(stderr, "y f32[64,%lld]%s: %u kernels for %u kernel steps\n", (long long)ycols,
          rows ? " + row" : "", got.kernels, got.kernel_steps);
  assert_int_equal(got.kernel_steps, 3);
  assert_int_equal(got.kernels, 3 - merged);
  kdc_ir_module_destroy(m);
}

/* h = tanh(h @ W_l / 256 + b_l) for |layers| layers of width 48 (inputs W_l,
 * b_l): one GEMM and one bias + tanh kernel per layer.  The kernels of all
 * layers but the last are the same code (in place over their GEMM's
 * result); the last writes the output (another code: it reads another
 * slot): 2 kernels whatever the depth (1 for one layer); outputs within
 * the GEMM tolerance of the interpreter. */
static void dense_chain(int layers) {
  kdc_module *m = kdc_ir_module_create("chain");
  kdc_func *f = kdc_ir_func_create(m, "predict");
  int64_t xd[2] = {16, 48}, wd[2] = {48, 48}, bd[1] = {48};
  kdc_type xt = kdc_type_make(KDC_DTYPE_F32, 2, xd), wt = kdc_type_make(KDC_DTYPE_F32, 2, wd);
  kdc_type bt = kdc_type_make(KDC_DTYPE_F32, 1, bd);
  kdc_value_id h = kdc_ir_parameter(f, KDC_PARAM_INPUT, "x", &xt);
  for (int l = 0; l < layers; l++) {
    char wn[32], bn[32];
    snprintf(wn, sizeof wn, "w%d", l);
    snprintf(bn, sizeof bn, "b%d", l);
    kdc_value_id w = kdc_ir_parameter(f, KDC_PARAM_INPUT, wn, &wt);
    kdc_value_id b = kdc_ir_parameter(f, KDC_PARAM_INPUT, bn, &bt);
    int64_t map[1] = {1};
    /* scaled so that the chain contracts: GEMM rounding is not amplified */
    kdc_value_id hw = kdc_ir_binary_scalar(f, KDC_OP_MUL, kdc_ir_matmul(f, h, w), 1.0 / 256);
    kdc_value_id y = kdc_ir_binary(f, KDC_OP_ADD, hw, kdc_ir_broadcast(f, b, 2, xd, map));
    h = kdc_ir_unary(f, KDC_OP_TANH, y);
  }
  kdc_ir_add_result(f, h, "y");
  counts got = {99, 99};
  cgt_opts o = {.inspect = count_kernels, .ctx = &got, .tol = CGT_GEMM, .gemm_k = 48};
  cgt_check(m, f, &o);
  fprintf(stderr, "%d dense layers: %u kernels for %u kernel steps\n", layers, got.kernels,
          got.kernel_steps);
  assert_int_equal(got.kernel_steps, layers);
  assert_int_equal(got.kernels, layers == 1 ? 1 : 2);
  kdc_ir_module_destroy(m);
}

static void test_dense_chain(void **state) {
  (void)state;
  dense_chain(1);
  dense_chain(24);
}

static void test_identical_kernels_once(void **state) {
  (void)state;
  merge_case(64, false, 1);
  merge_case(64, true, 1);
}

static void test_flat_kernels_of_other_shapes_once(void **state) {
  (void)state;
  merge_case(32, false, 1);
}

/* In a CUDA plan (PTX for sm_80, compiled here without a GPU) the same
 * flat expression over two sizes is two kernels: the GPU launch and index
 * mapping are per kernel; over one size it is one. */
static void cuda_kernels(int64_t ycols, uint32_t want) {
  kdc_module *m = kdc_ir_module_create("merge_cuda");
  kdc_func *f = kdc_ir_func_create(m, "predict");
  int64_t dx[2] = {64, 64}, dy[2] = {64, ycols};
  kdc_type tx = kdc_type_make(KDC_DTYPE_F32, 2, dx), ty = kdc_type_make(KDC_DTYPE_F32, 2, dy);
  kdc_value_id x = kdc_ir_parameter(f, KDC_PARAM_INPUT, "x", &tx);
  kdc_value_id y = kdc_ir_parameter(f, KDC_PARAM_INPUT, "y", &ty);
  kdc_ir_add_result(f, expr(f, x, 1.0, KDC_NO_VALUE), "r0");
  kdc_ir_add_result(f, expr(f, y, 1.0, KDC_NO_VALUE), "r1");
  assert_null(kdc_pass_fuse(m, NULL));
  assert_null(kdc_pass_plan_memory(m, NULL));
  const char *path = cgt_path("cuda.plan");
  kdc_codegen_options opt = {.cuda_sm = 80};
  assert_null(kdc_codegen_cpu_plan(m, &opt, path));
  kdc_rt_options ro = {.target = KDC_RT_TARGET_CPU, .describe_only = 1};
  kdc_rt_plan *p;
  assert_null(kdc_rt_plan_load_with(path, &ro, &p));
  fprintf(stderr, "CUDA plan, y f32[64,%lld]: %u kernels\n", (long long)ycols, p->prog.n_kernels);
  assert_int_equal(p->prog.n_kernels, want);
  kdc_rt_plan_release(p);
  kdc_ir_module_destroy(m);
}

static void test_cuda_kernels_by_size(void **state) {
  (void)state;
  cuda_kernels(64, 1);
  cuda_kernels(32, 2);
}

static void test_different_shapes_do_not(void **state) {
  (void)state;
  merge_case(32, true, 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_identical_kernels_once),
      cmocka_unit_test(test_flat_kernels_of_other_shapes_once),
      cmocka_unit_test(test_different_shapes_do_not),
      cmocka_unit_test(test_dense_chain),
      cmocka_unit_test(test_cuda_kernels_by_size),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
