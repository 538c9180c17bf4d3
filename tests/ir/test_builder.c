/* Builder and shape inference: types of built nodes, sticky errors. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "ir/ir.h"

static kdc_type f32(int rank, const int64_t *dims) { return kdc_type_make(KDC_DTYPE_F32, rank, dims); }

static void test_dense_layer_types(void **state) {
  (void)state;
  kdc_module *m = kdc_ir_module_create("t");
  kdc_func *f = kdc_ir_func_create(m, "predict");
  int64_t xd[] = {32, 28, 28, 1}, wd[] = {784, 200}, fd[] = {32, 784};
  kdc_type xt = f32(4, xd), wt = f32(2, wd);
  kdc_value_id x = kdc_ir_parameter(f, KDC_PARAM_INPUT, "input_layer", &xt);
  kdc_value_id w = kdc_ir_parameter(f, KDC_PARAM_WEIGHT, "d1/kernel", &wt);
  kdc_value_id flat = kdc_ir_reshape(f, x, 2, fd);
  kdc_value_id y = kdc_ir_matmul(f, flat, w);
  kdc_value_id r = kdc_ir_binary_bcast(f, KDC_OP_MAX, y, kdc_ir_scalar(f, KDC_DTYPE_F32, 0));
  assert_null(f->error);
  const kdc_type *t = kdc_ir_type(f, r);
  assert_int_equal(t->rank, 2);
  assert_int_equal(t->dims[0], 32);
  assert_int_equal(t->dims[1], 200);
  assert_int_equal(f->n_params, 2);
  assert_int_equal(kdc_ir_node(f, f->params[1])->attr.param.kind, KDC_PARAM_WEIGHT);
  kdc_ir_module_destroy(m);
}

static void test_shape_mismatch_is_sticky(void **state) {
  (void)state;
  kdc_module *m = kdc_ir_module_create("t");
  kdc_func *f = kdc_ir_func_create(m, "predict");
  int64_t ad[] = {4, 10}, bd[] = {4, 12};
  kdc_type at = f32(2, ad), bt = f32(2, bd);
  kdc_value_id a = kdc_ir_parameter(f, KDC_PARAM_INPUT, "a", &at);
  kdc_value_id b = kdc_ir_parameter(f, KDC_PARAM_INPUT, "b", &bt);
  kdc_ir_set_origin(f, "add (config.layers[2])");
  kdc_value_id s = kdc_ir_binary_bcast(f, KDC_OP_ADD, a, b);
  assert_int_equal(s, KDC_NO_VALUE);
  kdc_value_id s2 = kdc_ir_unary(f, KDC_OP_EXP, s); /* no-op on a failed value */
  assert_int_equal(s2, KDC_NO_VALUE);
  kdc_status st = kdc_ir_take_error(f);
  assert_non_null(st);
  assert_non_null(strstr(kdc_status_message(st), "f32[4,10]"));
  assert_non_null(strstr(kdc_status_message(st), "f32[4,12]"));
  kdc_status_free(st);
  assert_null(kdc_ir_take_error(f));
  kdc_ir_module_destroy(m);
}

static void test_dot_general_batch(void **state) {
  (void)state;
  kdc_type l, r, out;
  int64_t ld[] = {3, 5, 7}, rd[] = {3, 7, 2};
  l = f32(3, ld);
  r = f32(3, rd);
  kdc_type in[2] = {l, r};
  kdc_attrs a;
  memset(&a, 0, sizeof a);
  a.dot.lhs_batch = (kdc_dimlist){1, {0}};
  a.dot.rhs_batch = (kdc_dimlist){1, {0}};
  a.dot.lhs_contract = (kdc_dimlist){1, {2}};
  a.dot.rhs_contract = (kdc_dimlist){1, {1}};
  memset(&out, 0, sizeof out);
  assert_null(kdc_ir_infer_type(KDC_OP_DOT, 2, in, &a, &out));
  assert_int_equal(out.rank, 3);
  assert_int_equal(out.dims[0], 3);
  assert_int_equal(out.dims[1], 5);
  assert_int_equal(out.dims[2], 2);
  a.dot.rhs_contract.v[0] = 2; /* size 2 vs 7 */
  kdc_status st = kdc_ir_infer_type(KDC_OP_DOT, 2, in, &a, &out);
  assert_non_null(st);
  kdc_status_free(st);
}

static void test_slice_pad_concat_reduce(void **state) {
  (void)state;
  int64_t d[] = {4, 6};
  kdc_type t = f32(2, d), out;
  kdc_attrs a;
  memset(&a, 0, sizeof a);
  a.slice.start = (kdc_dimlist){2, {1, 0}};
  a.slice.limit = (kdc_dimlist){2, {4, 6}};
  a.slice.stride = (kdc_dimlist){2, {1, 4}};
  assert_null(kdc_ir_infer_type(KDC_OP_SLICE, 1, &t, &a, &out));
  assert_int_equal(out.dims[0], 3);
  assert_int_equal(out.dims[1], 2);
  kdc_type pin[2] = {t, f32(0, NULL)};
  memset(&a, 0, sizeof a);
  a.pad.low = (kdc_dimlist){2, {1, -1}};
  a.pad.high = (kdc_dimlist){2, {2, 0}};
  a.pad.interior = (kdc_dimlist){2, {1, 0}};
  assert_null(kdc_ir_infer_type(KDC_OP_PAD, 2, pin, &a, &out));
  assert_int_equal(out.dims[0], 1 + 2 + 4 + 3);
  assert_int_equal(out.dims[1], 5);
  kdc_type cin[2] = {t, t};
  memset(&a, 0, sizeof a);
  a.dim = 1;
  assert_null(kdc_ir_infer_type(KDC_OP_CONCAT, 2, cin, &a, &out));
  assert_int_equal(out.dims[1], 12);
  memset(&a, 0, sizeof a);
  a.reduce.kind = KDC_RED_SUM;
  a.reduce.dims = (kdc_dimlist){1, {0}};
  assert_null(kdc_ir_infer_type(KDC_OP_REDUCE, 1, &t, &a, &out));
  assert_int_equal(out.rank, 1);
  assert_int_equal(out.dims[0], 6);
  a.reduce.dims = (kdc_dimlist){2, {1, 1}};
  kdc_status st = kdc_ir_infer_type(KDC_OP_REDUCE, 1, &t, &a, &out);
  assert_non_null(st);
  kdc_status_free(st);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_dense_layer_types),
      cmocka_unit_test(test_shape_mismatch_is_sticky),
      cmocka_unit_test(test_dot_general_batch),
      cmocka_unit_test(test_slice_pad_concat_reduce),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
