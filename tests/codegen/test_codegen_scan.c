/*
 * scan through codegen and the runtime (LOOP steps): an LSTM-like cell (a
 * GEMM, a fused gate kernel, two carries, a loop-invariant weight and a
 * sequence) and a carry the body passes through unchanged, each compiled
 * and run against the reference interpreter (GEMM tolerance), on one and
 * on several runtime threads (the step-by-step schedule splits the body's
 * kernels), plus the plan's shape: one LOOP step over a flagged body.
 */
#include "cg_test.h"
#include "../ir/lstm_cell.h"

static void inspect_loop(const kdc_rt_plan *plan, void *ctx) {
  (void)ctx;
  assert_int_equal(cgt_count_steps(plan, KDC_STEP_LOOP), 1);
  const kdc_prog_func *f = &plan->prog.funcs[0];
  for (uint32_t s = 0; s < f->n_steps; s++)
    if (f->steps[s].kind == KDC_STEP_LOOP) {
      const kdc_prog_loop_step *l = &f->steps[s].loop;
      assert_int_equal(l->length, 7);
      assert_int_equal(l->n_carry, 2);
      assert_true(plan->prog.funcs[l->body].is_body);
      assert_false(f->is_body);
    }
}

static void lstm_case(int threads) {
  const int64_t B = 5, U = 6, T = 7;
  kdc_module *m = kdc_ir_module_create("scan");
  kdc_func *f = kdc_ir_func_create(m, "predict");
  kdc_func *b = kdc_test_lstm_cell(m, B, U);
  kdc_type xs = kdc_type_make(KDC_DTYPE_F32, 3, (int64_t[]){T, B, 4 * U});
  kdc_type wt = kdc_type_make(KDC_DTYPE_F32, 2, (int64_t[]){U, 4 * U});
  kdc_type ht = kdc_type_make(KDC_DTYPE_F32, 2, (int64_t[]){B, U});
  kdc_value_id x = kdc_ir_parameter(f, KDC_PARAM_INPUT, "xs", &xs);
  kdc_value_id w = kdc_ir_parameter(f, KDC_PARAM_INPUT, "w", &wt);
  kdc_value_id h0 = kdc_ir_parameter(f, KDC_PARAM_INPUT, "h0", &ht);
  kdc_value_id c0 = kdc_ir_splat(f, KDC_DTYPE_F32, 2, ht.dims, 0.25);
  kdc_value_id y = kdc_ir_scan(f, b, T, 2, 1, 4, (kdc_value_id[]){h0, c0, x, w});
  kdc_ir_add_result(f, kdc_ir_unary(f, KDC_OP_NEG, y), "ys");  /* a consumer of the loop */
  kdc_ir_add_result(f, y, "ys_raw");                             /* and the loop as a result */
  cgt_opts o = {.tol = CGT_GEMM, .gemm_k = (double)U, .threads = threads,
                .inspect = inspect_loop};
  cgt_check(m, f, &o);
  kdc_ir_module_destroy(m);
}

static void test_lstm_one_thread(void **state) {
  (void)state;
  lstm_case(1);
}

static void test_lstm_threads(void **state) {
  (void)state;
  lstm_case(4);
}

/* A carry returned as is (a body result that is its parameter: a COPY in
 * the body) next to a running sum; y is the sum. */
static void test_passthrough_carry(void **state) {
  (void)state;
  kdc_module *m = kdc_ir_module_create("scan2");
  kdc_func *f = kdc_ir_func_create(m, "predict");
  kdc_func *b = kdc_ir_func_create(m, "body");
  kdc_type st = kdc_type_make(KDC_DTYPE_F32, 1, (int64_t[]){3});
  kdc_value_id k = kdc_ir_parameter(b, KDC_PARAM_INPUT, "k", &st);
  kdc_value_id s = kdc_ir_parameter(b, KDC_PARAM_INPUT, "s", &st);
  kdc_value_id x = kdc_ir_parameter(b, KDC_PARAM_INPUT, "x", &st);
  kdc_value_id sn = kdc_ir_binary(b, KDC_OP_ADD, kdc_ir_binary(b, KDC_OP_MUL, s, k), x);
  kdc_ir_add_result(b, k, "k");
  kdc_ir_add_result(b, sn, "s");
  kdc_ir_add_result(b, sn, "y");
  kdc_type xs = kdc_type_make(KDC_DTYPE_F32, 2, (int64_t[]){4, 3});
  kdc_value_id kk = kdc_ir_parameter(f, KDC_PARAM_INPUT, "k", &st);
  kdc_value_id ss = kdc_ir_parameter(f, KDC_PARAM_INPUT, "s", &st);
  kdc_value_id xx = kdc_ir_parameter(f, KDC_PARAM_INPUT, "xs", &xs);
  kdc_value_id y = kdc_ir_scan(f, b, 4, 2, 1, 3, (kdc_value_id[]){kk, ss, xx});
  kdc_ir_add_result(f, y, "ys");
  cgt_opts o = {.tol = CGT_ULP, .ulps = 4};
  cgt_check(m, f, &o);
  kdc_ir_module_destroy(m);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_lstm_one_thread),
      cmocka_unit_test(test_lstm_threads),
      cmocka_unit_test(test_passthrough_carry),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
