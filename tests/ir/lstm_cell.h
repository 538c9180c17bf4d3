/*
 * tests/ir/lstm_cell.h: the LSTM cell body of frontend/lower_rnn.c (gates
 * i, f, c, o; sigmoid and tanh) as a module function, for the scan tests
 * (tests/codegen/test_codegen_scan.c, tests/training/test_grad_scan.c):
 *
 *   cell(h [B,U], c [B,U], x_t [B,4U], w [U,4U]) -> (h', c', y = h')
 */
#ifndef KDC_TESTS_IR_LSTM_CELL_H
#define KDC_TESTS_IR_LSTM_CELL_H

#include "ir/ir.h"

static inline kdc_func *kdc_test_lstm_cell(kdc_module *m, int64_t B, int64_t U) {
  kdc_func *b = kdc_ir_func_create(m, "cell");
  kdc_type ht = kdc_type_make(KDC_DTYPE_F32, 2, (int64_t[]){B, U});
  kdc_type xt = kdc_type_make(KDC_DTYPE_F32, 2, (int64_t[]){B, 4 * U});
  kdc_type wt = kdc_type_make(KDC_DTYPE_F32, 2, (int64_t[]){U, 4 * U});
  kdc_value_id h = kdc_ir_parameter(b, KDC_PARAM_INPUT, "h", &ht);
  kdc_value_id c = kdc_ir_parameter(b, KDC_PARAM_INPUT, "c", &ht);
  kdc_value_id x = kdc_ir_parameter(b, KDC_PARAM_INPUT, "x_t", &xt);
  kdc_value_id w = kdc_ir_parameter(b, KDC_PARAM_INPUT, "w", &wt);
  kdc_value_id z = kdc_ir_binary(b, KDC_OP_ADD, x, kdc_ir_matmul(b, h, w));
  kdc_value_id g[4];
  for (int k = 0; k < 4; k++) {
    int64_t s[2] = {0, k * U}, l[2] = {B, (k + 1) * U}, st[2] = {1, 1};
    g[k] = kdc_ir_unary(b, k == 2 ? KDC_OP_TANH : KDC_OP_LOGISTIC, kdc_ir_slice(b, z, s, l, st));
  }
  kdc_value_id cn = kdc_ir_binary(b, KDC_OP_ADD, kdc_ir_binary(b, KDC_OP_MUL, g[1], c),
                                  kdc_ir_binary(b, KDC_OP_MUL, g[0], g[2]));
  kdc_value_id hn = kdc_ir_binary(b, KDC_OP_MUL, g[3], kdc_ir_unary(b, KDC_OP_TANH, cn));
  kdc_ir_add_result(b, hn, "h");
  kdc_ir_add_result(b, cn, "c");
  kdc_ir_add_result(b, hn, "y");
  return b;
}

#endif
