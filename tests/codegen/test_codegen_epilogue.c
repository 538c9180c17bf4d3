/*
 * GEMM epilogues (codegen/epilogue.c, runtime/exec.c): a kernel reading a
 * GEMM's result elementwise is moved right after the GEMM step and flagged,
 * and the runtime runs it on each row panel of the result.  Checks that the
 * flag is set exactly when the kernel reads the result row for row, that
 * the results equal the interpreter (GEMM tolerance) and are bitwise those
 * of the same module compiled without epilogues, on 1, 2 and 3 threads
 * (uneven row parts, a partial last 64-row unit), and that a GEMM whose k
 * exceeds the rows of a part runs the flagged kernel as a step of its own
 * with the same results.
 */
#include "cg_test.h"

static kdc_value_id input(kdc_func *f, const char *name, int rank, const int64_t *dims) {
  kdc_type t = kdc_type_make(KDC_DTYPE_F32, rank, dims);
  return kdc_ir_parameter(f, KDC_PARAM_INPUT, name, &t);
}

/* dW = x^T g ([k, M]^T x [k, N]) and Keras' Adam on it: results w', m', v'
 * (one multi-output kernel reading dW, m, v, w and the step size). */
static kdc_module *adam_module(int64_t k, int64_t M, int64_t N) {
  kdc_module *m = kdc_ir_module_create("epilogue");
  kdc_func *f = kdc_ir_func_create(m, "train_step");
  int64_t xd[2] = {k, M}, gd[2] = {k, N}, wd[2] = {M, N};
  kdc_value_id x = input(f, "x", 2, xd), g = input(f, "g", 2, gd);
  kdc_value_id w = input(f, "w", 2, wd), mo = input(f, "m", 2, wd), v = input(f, "v", 2, wd);
  kdc_value_id alpha = input(f, "alpha", 0, NULL);
  kdc_attr_dot d = {{0, {0}}, {0, {0}}, {1, {0}}, {1, {0}}};
  kdc_value_id dw = kdc_ir_dot(f, x, g, &d);
  kdc_value_id c1 = kdc_ir_splat(f, KDC_DTYPE_F32, 2, wd, 0.1);
  kdc_value_id c2 = kdc_ir_splat(f, KDC_DTYPE_F32, 2, wd, 0.001);
  kdc_value_id m2 = kdc_ir_binary(f, KDC_OP_ADD, mo,
                                  kdc_ir_binary(f, KDC_OP_MUL, kdc_ir_binary(f, KDC_OP_SUB, dw, mo), c1));
  kdc_value_id g2 = kdc_ir_binary(f, KDC_OP_MUL, dw, dw);
  kdc_value_id v2 = kdc_ir_binary(f, KDC_OP_ADD, v,
                                  kdc_ir_binary(f, KDC_OP_MUL, kdc_ir_binary(f, KDC_OP_SUB, g2, v), c2));
  kdc_value_id num = kdc_ir_binary_bcast(f, KDC_OP_MUL, m2, alpha);
  kdc_value_id den = kdc_ir_binary(f, KDC_OP_ADD, kdc_ir_unary(f, KDC_OP_SQRT, v2),
                                   kdc_ir_splat(f, KDC_DTYPE_F32, 2, wd, 1e-7));
  kdc_value_id w2 = kdc_ir_binary(f, KDC_OP_SUB, w, kdc_ir_binary(f, KDC_OP_DIV, num, den));
  kdc_ir_add_result(f, w2, "w");
  kdc_ir_add_result(f, m2, "m");
  kdc_ir_add_result(f, v2, "v");
  return m;
}

/* The step index of the kernel flagged as an epilogue, -1 when none. */
static int epilogue_step(const kdc_rt_plan *plan) {
  const kdc_prog_func *f = &plan->prog.funcs[0];
  int at = -1;
  for (uint32_t i = 0; i < f->n_steps; i++)
    if (f->steps[i].kind == KDC_STEP_KERNEL && f->steps[i].kernel.epilogue) {
      assert_true(i > 0 && f->steps[i - 1].kind == KDC_STEP_GEMM);
      assert_int_equal(at, -1);
      at = (int)i;
    }
  return at;
}

typedef struct run {
  kdc_tensor *want;     /* the interpreter's results */
  void **in;
  size_t n_in, n_out;
  void *out[2][8];      /* [with, without epilogues][result] */
} run;

/* Fuses and plans |m|, compiles it with and without epilogues, checks
 * whether the epilogue flag is set (|expect|), runs both on |threads| and
 * compares them with the interpreter and with each other (bitwise). */
static void check_both(kdc_module *m, bool expect, int threads) {
  kdc_func *f = m->funcs[0];
  cgt_fail(kdc_ir_take_error(f), "builder");
  cgt_fail(kdc_ir_verify_module(m), "verify");
  run R = {.n_in = f->n_params, .n_out = f->n_results};
  kdc_tensor *args = calloc(R.n_in + 1, sizeof *args);
  R.in = calloc(R.n_in + 1, sizeof *R.in);
  for (size_t i = 0; i < R.n_in; i++) {
    const kdc_type *t = &f->nodes[f->params[i]].type;
    args[i].type = *t;
    args[i].data = malloc(kdc_type_bytes(t) + 1);
    cgt_fill(t, args[i].data, i + 7, true);
    R.in[i] = args[i].data;
  }
  R.want = calloc(R.n_out + 1, sizeof *R.want);
  cgt_fail(kdc_ir_interpret(f, args, R.n_in, R.want), "interpret");
  cgt_fail(kdc_pass_fuse(m, NULL), "fuse");
  cgt_fail(kdc_pass_plan_memory(m, NULL), "plan_memory");
  double k = (double)f->nodes[f->params[0]].type.dims[0]; /* x / a: [k, M] */
  for (int v = 0; v < 2; v++) {
    kdc_codegen_options co = {.no_gemm_epilogues = v == 1};
    const char *path = cgt_path(v ? "plain.plan" : "epilogue.plan");
    cgt_fail(kdc_codegen_cpu_plan(m, &co, path), "codegen");
    kdc_rt_options ro = {.n_threads = threads};
    kdc_rt_plan *plan;
    cgt_fail(kdc_rt_plan_load_with(path, &ro, &plan), "load");
    assert_int_equal(epilogue_step(plan) >= 0, v == 0 && expect);
    for (size_t o = 0; o < R.n_out; o++) {
      size_t b = kdc_type_bytes(&R.want[o].type);
      R.out[v][o] = malloc(b + 1);
      memset(R.out[v][o], 0xa5, b);
    }
    for (int rep = 0; rep < 2; rep++) {
      cgt_fail(kdc_rt_plan_run(plan, (const void *const *)R.in, R.out[v]), "run");
      cgt_opts to = {.tol = CGT_GEMM, .gemm_k = k};
      int64_t bad = 0;
      for (size_t o = 0; o < R.n_out; o++)
        bad += cgt_compare(&R.want[o].type, R.out[v][o], R.want[o].data, &to, o);
      if (bad) fail_msg("%lld elements differ from the interpreter", (long long)bad);
    }
    kdc_rt_plan_release(plan);
  }
  for (size_t o = 0; o < R.n_out; o++) {
    assert_memory_equal(R.out[0][o], R.out[1][o], kdc_type_bytes(&R.want[o].type));
    free(R.out[0][o]), free(R.out[1][o]), free(R.want[o].data);
  }
  for (size_t i = 0; i < R.n_in; i++) free(args[i].data);
  free(args), free(R.in), free(R.want);
}

/* An optimizer update after its weight-gradient GEMM: flagged; row parts
 * of 64-row multiples with a partial last unit (M = 300: 1 part, 2 parts,
 * 64/128/108 rows), k = 64 <= the rows of a part, so the runtime runs the
 * update on each part right after it. */
static void test_adam_epilogue(void **state) {
  (void)state;
  for (int threads = 1; threads <= 3; threads++) {
    kdc_module *m = adam_module(64, 300, 70);
    check_both(m, true, threads);
    kdc_ir_module_destroy(m);
  }
}

/* k = 300 > the rows of a part (M = 130 on 2 and 3 threads): flagged, but
 * run as two steps; same results. */
static void test_long_k(void **state) {
  (void)state;
  for (int threads = 2; threads <= 3; threads++) {
    kdc_module *m = adam_module(300, 130, 40);
    check_both(m, true, threads);
    kdc_ir_module_destroy(m);
  }
}

/* Kernels that read the GEMM's result at other indices are not epilogues:
 * its transpose plus a matrix, and a row sum broadcast back. */
static void test_not_elementwise(void **state) {
  (void)state;
  for (int c = 0; c < 2; c++) {
    kdc_module *m = kdc_ir_module_create("not_ew");
    kdc_func *f = kdc_ir_func_create(m, "predict");
    int64_t ad[2] = {64, 96}, bd[2] = {64, 96}, yd[2] = {96, 96};
    kdc_value_id a = input(f, "a", 2, ad), b = input(f, "b", 2, bd), z = input(f, "z", 2, yd);
    kdc_attr_dot d = {{0, {0}}, {0, {0}}, {1, {0}}, {1, {0}}};
    kdc_value_id y = kdc_ir_dot(f, a, b, &d), r;
    if (c == 0) {
      r = kdc_ir_binary(f, KDC_OP_ADD, kdc_ir_transpose(f, y, (int64_t[]){1, 0}), z);
    } else {
      kdc_value_id s = kdc_ir_reduce(f, KDC_RED_SUM, y, 1, (int64_t[]){0});
      r = kdc_ir_binary(f, KDC_OP_MUL, kdc_ir_broadcast(f, s, 2, yd, (int64_t[]){1}), z);
    }
    kdc_ir_add_result(f, r, "r");
    check_both(m, false, 2);
    kdc_ir_module_destroy(m);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_adam_epilogue),
      cmocka_unit_test(test_long_k),
      cmocka_unit_test(test_not_elementwise),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
