/*
 * The scan op (ir/scan.c): text round trip with the body printed as a
 * module function, the reference interpreter against a recurrence computed
 * by hand, the builder, and every verifier complaint about a scan and its
 * body.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>

#include <cmocka.h>

#include "ir/ir.h"

/* s' = s * w + x_t, y_t = concat(s', s' * 2): carry s [2], xs [3,2], w [2].
 * The body is defined after its caller on purpose. */
static const char *const k_module =
    "module @m {\n"
    "  func @f {\n"
    "    %0 = constant [1, 2] : f32[2]\n"
    "    %1 = constant [1, 1, 2, 0, 0, 3] : f32[3,2]\n"
    "    %2 = constant [0.5, 2] : f32[2]\n"
    "    %3 = scan @step %0, %1, %2 length=3 carries=1 xs=1 : f32[3,4]\n"
    "    return %3\n"
    "  }\n"
    "  func @step {\n"
    "    %0 = parameter 0 input \"s\" : f32[2]\n"
    "    %1 = parameter 1 input \"x_t\" : f32[2]\n"
    "    %2 = parameter 2 input \"w\" : f32[2]\n"
    "    %3 = mul %0, %2 : f32[2]\n"
    "    %4 = add %3, %1 : f32[2]\n"
    "    %5 = add %4, %4 : f32[2]\n"
    "    %6 = concatenate %4, %5 dim=0 : f32[4]\n"
    "    return %4, %6\n"
    "  }\n"
    "}\n";

static kdc_module *parse_ok(const char *text) {
  kdc_module *m = NULL;
  kdc_status st = kdc_ir_parse_module(text, "scan.kir", &m);
  if (st) fail_msg("parse: %s", kdc_status_message(st));
  if ((st = kdc_ir_verify_module(m))) fail_msg("verify: %s", kdc_status_message(st));
  return m;
}

static void test_round_trip(void **state) {
  (void)state;
  kdc_module *m = parse_ok(k_module);
  char *a = kdc_ir_module_to_string(m);
  assert_non_null(strstr(a, "scan @step %0, %1, %2 length=3 carries=1 xs=1 : f32[3,4]"));
  kdc_module *m2 = parse_ok(a);
  char *b = kdc_ir_module_to_string(m2);
  assert_string_equal(a, b);
  assert_true(kdc_ir_func_is_body(m, kdc_ir_module_find_func(m, "step")));
  assert_false(kdc_ir_func_is_body(m, kdc_ir_module_find_func(m, "f")));
  free(a), free(b);
  kdc_ir_module_destroy(m);
  kdc_ir_module_destroy(m2);
}

static void test_interpret(void **state) {
  (void)state;
  kdc_module *m = parse_ok(k_module);
  kdc_tensor out[1];
  kdc_status st = kdc_ir_interpret(kdc_ir_module_find_func(m, "f"), NULL, 0, out);
  if (st) fail_msg("interpret: %s", kdc_status_message(st));
  /* by hand: s1 = [1*.5+1, 2*2+1] = [1.5, 5]; s2 = [.75+2, 10+0] = [2.75, 10];
   * s3 = [1.375+0, 20+3] = [1.375, 23]; each row is s, 2s */
  const float want[12] = {1.5f, 5, 3, 10, 2.75f, 10, 5.5f, 20, 1.375f, 23, 2.75f, 46};
  assert_int_equal(out[0].type.rank, 2);
  assert_int_equal(out[0].type.dims[0], 3);
  assert_int_equal(out[0].type.dims[1], 4);
  for (int i = 0; i < 12; i++) assert_true(((float *)out[0].data)[i] == want[i]);
  free(out[0].data);
  kdc_ir_module_destroy(m);
}

static void test_builder(void **state) {
  (void)state;
  kdc_module *m = kdc_ir_module_create("b");
  kdc_func *f = kdc_ir_func_create(m, "f");
  kdc_func *b = kdc_ir_func_create(m, "b");
  kdc_type c = kdc_type_make(KDC_DTYPE_F32, 1, (int64_t[]){2});
  kdc_value_id s = kdc_ir_parameter(b, KDC_PARAM_INPUT, "s", &c);
  kdc_value_id x = kdc_ir_parameter(b, KDC_PARAM_INPUT, "x", &c);
  kdc_value_id n = kdc_ir_binary(b, KDC_OP_ADD, s, x);
  kdc_ir_add_result(b, n, "s");
  kdc_ir_add_result(b, n, "y");
  kdc_value_id s0 = kdc_ir_splat(f, KDC_DTYPE_F32, 1, (int64_t[]){2}, 1.0);
  kdc_value_id xs = kdc_ir_iota(f, &(kdc_type){KDC_DTYPE_F32, 2, {4, 2}}, 0);
  kdc_value_id y = kdc_ir_scan(f, b, 4, 1, 1, 2, (kdc_value_id[]){s0, xs});
  assert_int_not_equal(y, KDC_NO_VALUE);
  assert_int_equal(kdc_ir_type(f, y)->dims[0], 4);
  assert_int_equal(kdc_ir_type(f, y)->dims[1], 2);
  kdc_ir_add_result(f, y, "y");
  assert_null(kdc_ir_verify_module(m));
  kdc_tensor out[1];
  assert_null(kdc_ir_interpret(f, NULL, 0, out));
  const float want[8] = {1, 1, 2, 2, 4, 4, 7, 7}; /* 1 + 0, + 1, + 2, + 3 */
  for (int i = 0; i < 8; i++) assert_true(((float *)out[0].data)[i] == want[i]);
  free(out[0].data);
  /* a sequence of the wrong length is a sticky builder error */
  assert_int_equal(kdc_ir_scan(f, b, 5, 1, 1, 2, (kdc_value_id[]){s0, xs}), KDC_NO_VALUE);
  kdc_status st = kdc_ir_take_error(f);
  assert_non_null(st);
  kdc_status_free(st);
  kdc_ir_module_destroy(m);
}

/* |from| replaced by |to| in k_module must fail to verify (or parse) with a
 * message containing |want|. */
static void expect_bad(const char *from, const char *to, const char *want) {
  char text[4096];
  const char *at = strstr(k_module, from);
  assert_non_null(at);
  snprintf(text, sizeof text, "%.*s%s%s", (int)(at - k_module), k_module, to, at + strlen(from));
  kdc_module *m = NULL;
  kdc_status st = kdc_ir_parse_module(text, "bad.kir", &m);
  if (!st) st = kdc_ir_verify_module(m);
  if (!st) fail_msg("accepted: %s -> %s", from, to);
  if (!strstr(kdc_status_message(st), want))
    fail_msg("message \"%s\" lacks \"%s\"", kdc_status_message(st), want);
  kdc_status_free(st);
  kdc_ir_module_destroy(m);
}

static void test_verify_errors(void **state) {
  (void)state;
  expect_bad("scan @step", "scan @nope", "body @nope is not a function");
  expect_bad("length=3 carries=1 xs=1 : f32[3,4]", "length=2 carries=1 xs=1 : f32[2,4]",
             "sequence operand 1");
  expect_bad("carries=1 xs=1 : f32[3,4]", "carries=1 xs=1 : f32[3,5]", "result row/body y");
  expect_bad("carries=1 xs=1", "carries=2 xs=1", "sequence operand 2");
  expect_bad("carries=1 xs=1", "carries=1 xs=3", "do not fit");
  expect_bad("carries=1 xs=1", "carries=1 xs=0", "operand/body parameter 1");
  expect_bad("return %4, %6", "return %6, %6", "carry/body result");
  expect_bad("return %4, %6", "return %4, %4, %6", "the carries and y_t");
  expect_bad("scan @step %0, %1, %2", "scan @f %0, %1, %2", "own function");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_round_trip),
      cmocka_unit_test(test_interpret),
      cmocka_unit_test(test_builder),
      cmocka_unit_test(test_verify_errors),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
