/*
 * The scan VJP (passes/grad_scan.c) against central finite differences on
 * the reference interpreter (tr_check_fd): an LSTM-like cell (two carries,
 * a GEMM, sigmoid/tanh gates, a sequence and a loop-invariant weight, every
 * operand differentiated), and a body with a carry that reaches no output
 * (its gradient is zeros) and two sequences.
 */
#include "tr_test.h"
#include "../ir/lstm_cell.h"

/* y = scan(...) weighted into a scalar; grads of every input appended. */
static void check(kdc_module *m, kdc_func *f, kdc_value_id *x, int n_in, kdc_value_id r,
                  const char *name) {
  tr_expect_ok(kdc_ir_take_error(f));
  kdc_type rt = *kdc_ir_type(f, r);
  int64_t rn = kdc_type_numel(&rt), all[KDC_MAX_RANK];
  float *w = malloc(sizeof(float) * (size_t)rn);
  for (int64_t i = 0; i < rn; i++) w[i] = (float)tr_rand(-1, 1);
  for (int i = 0; i < rt.rank; i++) all[i] = i;
  kdc_value_id wc = kdc_ir_constant(f, &rt, w);
  kdc_value_id y = kdc_ir_reduce(f, KDC_RED_SUM, kdc_ir_binary(f, KDC_OP_MUL, r, wc), rt.rank, all);
  kdc_ir_add_result(f, r, "r");
  kdc_value_id grads[8];
  tr_expect_ok(kdc_autodiff(f, y, x, (size_t)n_in, grads));
  for (int k = 0; k < n_in; k++) {
    if (grads[k] == KDC_NO_VALUE) fail_msg("%s: no gradient for input %d", name, k);
    kdc_ir_add_result(f, grads[k], "grad");
  }
  tr_expect_ok(kdc_ir_take_error(f));
  tr_expect_ok(kdc_ir_verify_module(m));
  kdc_tensor args[8], base[9];
  for (int k = 0; k < n_in; k++) {
    args[k].type = *kdc_ir_type(f, x[k]);
    int64_t n = kdc_type_numel(&args[k].type);
    float *d = malloc(sizeof(float) * (size_t)(n ? n : 1));
    for (int64_t i = 0; i < n; i++) d[i] = (float)tr_rand(-0.9, 0.9);
    args[k].data = d;
  }
  tr_run(f, args, (size_t)n_in, base);
  tr_check_fd(f, args, n_in, base, w, name);
  tr_free(base, f->n_results);
  for (int k = 0; k < n_in; k++) free(args[k].data);
  free(w);
}

static void test_lstm_scan_grad(void **state) {
  (void)state;
  tr_seed(11);
  const int B = 2, U = 3, T = 4;
  kdc_module *m = kdc_ir_module_create("g");
  kdc_func *f = kdc_ir_func_create(m, "f");
  kdc_func *b = kdc_test_lstm_cell(m, B, U);
  kdc_type ht = tr_type(2, B, U), xs = tr_type(3, T, B, 4 * U), wt = tr_type(2, U, 4 * U);
  kdc_value_id x[4] = {kdc_ir_parameter(f, KDC_PARAM_INPUT, "h0", &ht),
                       kdc_ir_parameter(f, KDC_PARAM_INPUT, "c0", &ht),
                       kdc_ir_parameter(f, KDC_PARAM_INPUT, "xs", &xs),
                       kdc_ir_parameter(f, KDC_PARAM_INPUT, "w", &wt)};
  kdc_value_id r = kdc_ir_scan(f, b, T, 2, 1, 4, x);
  check(m, f, x, 4, r, "lstm scan");
  kdc_ir_module_destroy(m);
}

/* s' = s * a_t + k, y_t = s' * b_t (carry u unused: zero gradient path). */
static void test_two_sequences(void **state) {
  (void)state;
  tr_seed(12);
  kdc_module *m = kdc_ir_module_create("g2");
  kdc_func *f = kdc_ir_func_create(m, "f");
  kdc_func *b = kdc_ir_func_create(m, "body");
  kdc_type st = tr_type(1, 3);
  kdc_value_id s = kdc_ir_parameter(b, KDC_PARAM_INPUT, "s", &st);
  kdc_value_id u = kdc_ir_parameter(b, KDC_PARAM_INPUT, "u", &st);
  kdc_value_id a = kdc_ir_parameter(b, KDC_PARAM_INPUT, "a", &st);
  kdc_value_id bb = kdc_ir_parameter(b, KDC_PARAM_INPUT, "b", &st);
  kdc_value_id k = kdc_ir_parameter(b, KDC_PARAM_INPUT, "k", &st);
  kdc_value_id sn = kdc_ir_binary(b, KDC_OP_ADD, kdc_ir_binary(b, KDC_OP_MUL, s, a), k);
  kdc_ir_add_result(b, sn, "s");
  kdc_ir_add_result(b, u, "u");
  kdc_ir_add_result(b, kdc_ir_binary(b, KDC_OP_MUL, sn, bb), "y");
  kdc_type seq = tr_type(2, 5, 3);
  kdc_value_id x[5] = {kdc_ir_parameter(f, KDC_PARAM_INPUT, "s0", &st),
                       kdc_ir_parameter(f, KDC_PARAM_INPUT, "u0", &st),
                       kdc_ir_parameter(f, KDC_PARAM_INPUT, "as", &seq),
                       kdc_ir_parameter(f, KDC_PARAM_INPUT, "bs", &seq),
                       kdc_ir_parameter(f, KDC_PARAM_INPUT, "k", &st)};
  kdc_value_id r = kdc_ir_scan(f, b, 5, 2, 2, 5, x);
  check(m, f, x, 5, r, "two sequences"); /* u0's gradient: zeros through the carry */
  kdc_ir_module_destroy(m);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_lstm_scan_grad),
      cmocka_unit_test(test_two_sequences),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
