/*
 * The verifier: each invariant of ir/verify.c rejected with a message that
 * names the function, the value, the op and the origin.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ir/ir.h"

static kdc_module *parse_ok(const char *text) {
  kdc_module *m = NULL;
  kdc_status st = kdc_ir_parse_module(text, "v.kir", &m);
  if (st) fail_msg("unexpected parse error: %s", kdc_status_message(st));
  return m;
}

/* Verifies |m| (destroying it) and expects a message containing |want|. */
static void expect_reject(kdc_module *m, const char *want) {
  kdc_status st = kdc_ir_verify_module(m);
  kdc_ir_module_destroy(m);
  if (!st) fail_msg("expected \"%s\", verification passed", want);
  assert_int_equal(kdc_status_code(st), KDC_INVALID_INPUT);
  if (!strstr(kdc_status_message(st), want))
    fail_msg("message \"%s\" lacks \"%s\"", kdc_status_message(st), want);
  kdc_status_free(st);
}

static void reject_text(const char *body, const char *want) {
  char text[2048];
  snprintf(text, sizeof text, "module @m {\n  mesh [data=2, model=4]\n  func @f {\n%s  }\n}\n",
           body);
  expect_reject(parse_ok(text), want);
}

static void test_accepts_valid(void **state) {
  (void)state;
  kdc_module *m = parse_ok(
      "module @m {\n  mesh [data=2]\n  weight \"w\" : f32[3,3]\n  func @f {\n"
      "    %0 = parameter 1 weight \"w\" : f32[3,3] {-,-} replicated(data)\n"
      "    %1 = parameter 0 input \"x\" : f32[4,3] {data,?}\n"
      "    %2 = dot_general %1, %0 lhs_contract=[1] rhs_contract=[0] : f32[4,3]\n"
      "    %3 = neg %2 : f32[4,3] group=5\n"
      "    %4 = exp %3 : f32[4,3] group=5\n"
      "    %5 = reduce sum %4 dims=[1] : f32[4] group=2\n"
      "    return %5, %2\n  }\n}\n");
  assert_null(kdc_ir_verify_module(m));
  assert_int_equal(m->funcs[0]->params[0], 1);
  kdc_ir_module_destroy(m);
}

static void test_rejects_types_and_attributes(void **state) {
  (void)state;
  reject_text(
      "    %0 = constant 1 : f32[2]\n    %1 = neg %0 : f32[3] loc \"layer d1\"\n    return\n",
      "func @f: %1 = neg (loc \"layer d1\"): result type f32[3] does not match the inferred "
      "f32[2]");
  reject_text(
      "    %0 = constant 1 : f32[2,3]\n    %1 = transpose %0 perm=[0,0] : f32[2,2]\n    return\n",
      "func @f: %1 = transpose: transpose: dim 0 repeated");
  reject_text(
      "    %0 = constant 1 : f32[2,3]\n    %1 = transpose %0 perm=[1,2] : f32[3,2]\n    return\n",
      "transpose: dim 2 out of range for rank 2");
  reject_text(
      "    %0 = constant 1 : f32[5]\n    %1 = slice %0 start=[2] limit=[6] stride=[1] : f32[4]\n"
      "    return\n",
      "func @f: %1 = slice: slice: dim 0: [2:6:1] out of range for size 5");
  reject_text(
      "    %0 = constant 1 : f32[5]\n    %1 = slice %0 start=[0] limit=[5] stride=[0] : f32[4]\n"
      "    return\n",
      "out of range for size 5");
  reject_text("    %0 = constant 1 : f32[3]\n    %1 = broadcast_in_dim %0 dims=[2] : f32[3,3]\n    "
              "return\n",
              "broadcast_in_dim: dim 2 out of range for rank 2");
  reject_text("    %0 = constant 1 : f32[3]\n    %1 = broadcast_in_dim %0 dims=[0] : f32[2,3]\n    "
              "return\n",
              "cannot broadcast f32[3] to f32[2,3]");
  reject_text(
      "    %0 = constant 1 : f32[2,3]\n    %1 = constant 1 : f32[4,2]\n"
      "    %2 = dot_general %0, %1 lhs_contract=[1] rhs_contract=[0] : f32[2,2]\n    return\n",
      "func @f: %2 = dot_general: dot_general: contracting dim sizes differ");
  reject_text(
      "    %0 = constant 1 : f32[2,3]\n    %1 = reduce sum %0 dims=[2] : f32[2]\n    return\n",
      "reduce: dim 2 out of range for rank 2");
  reject_text(
      "    %0 = constant 1 : f32[2]\n    %1 = pad %0, %0 low=[0] high=[0] interior=[0] : f32[2]\n"
      "    return\n",
      "pad: padding value must be a f32 scalar");
  reject_text(
      "    %0 = constant 1 : f32[2]\n    %1 = concatenate %0, %0 dim=1 : f32[4]\n    return\n",
      "concatenate: dim 1 out of range");
  reject_text("    %0 = iota dim=1 : f32[2]\n    return\n", "iota: dim 1 out of range");
  reject_text(
      "    %0 = constant 1 : f32[2]\n    %1 = constant 1 : i32[2]\n    %2 = add %0, %1 : f32[2]\n"
      "    return\n",
      "add: operand types differ: f32[2] vs i32[2]");
  reject_text("    %0 = constant 1 : f32[2]\n    %1 = select %0, %0, %0 : f32[2]\n    return\n",
              "select: predicate must be bool");
}

static void test_rejects_shardings(void **state) {
  (void)state;
  reject_text("    %0 = constant 1 : f32[2,3] {data}\n    return\n",
              "func @f: %0 = constant: sharding has 1 dims, the type has rank 2");
  reject_text("    %0 = constant 1 : f32[2,3] {data,data}\n    return\n",
              "mesh axis 'data' used twice");
  reject_text("    %0 = constant 1 : f32[2,3] {data,-} partial(sum: data)\n    return\n",
              "both splits a dim and is partial");
  reject_text(
      "    %0 = constant 1 : f32[2,3] {-,-} replicated(model) partial(sum: model)\n    return\n",
      "explicitly replicated axis is also split or partial");
}

static void test_rejects_groups(void **state) {
  (void)state;
  reject_text("    %0 = constant 1 : f32[2]\n    %1 = neg %0 : f32[2] group=0\n    %2 = exp %1 : "
              "f32[2] group=0\n"
              "    %3 = add %1, %2 : f32[2]\n    return %3\n",
              "func @f: %1 = neg: member of group 0 (root %2) is used by %3 outside the group");
  /* a result inside a group is a second output of the kernel: root's dims */
  reject_text("    %0 = constant 1 : f32[2]\n    %1 = neg %0 : f32[2] group=0\n"
              "    %2 = broadcast_in_dim %1 dims=[0] : f32[2,3] group=0\n"
              "    return %2, %1\n",
              "%1 = neg: member of group 0 (root %2) is a function result of other dims");
  kdc_module *ok = parse_ok("module @m {\n  func @f {\n    %0 = constant 1 : f32[2]\n"
                            "    %1 = neg %0 : f32[2] group=0\n    %2 = exp %1 : f32[2] group=0\n"
                            "    return %2, %1\n  }\n}\n");
  kdc_status st = kdc_ir_verify_module(ok);
  if (st) fail_msg("a same-dims result in a group (multi-output kernel): %s", kdc_status_message(st));
  assert_true(kdc_ir_group_output(ok->funcs[0], 1, 2));
  assert_false(kdc_ir_group_output(ok->funcs[0], 2, 2));
  kdc_ir_module_destroy(ok);
  reject_text("    %0 = constant 1 : f32[2,2]\n"
              "    %1 = dot_general %0, %0 lhs_contract=[1] rhs_contract=[0] : f32[2,2] group=1\n  "
              "  return\n",
              "a dot_general cannot be in a fusion group (group=1)");
}

static void test_rejects_module_level(void **state) {
  (void)state;
  expect_reject(parse_ok("module @m {\n  func @f {\n    %0 = parameter 0 weight \"w\" : f32[2]\n   "
                         " return\n  }\n}\n"),
                "func @f: %0 = parameter: weight \"w\" is not in the module");
  expect_reject(parse_ok("module @m {\n  weight \"w\" : f32[3]\n  func @f {\n"
                         "    %0 = parameter 0 weight \"w\" : f32[2]\n    return\n  }\n}\n"),
                "weight \"w\" is f32[3] in the module but f32[2] here");
}

/* Invariants the parser cannot break, broken through the API. */
static void test_rejects_broken_structure(void **state) {
  (void)state;
  int64_t d2[] = {2};
  kdc_type t = kdc_type_make(KDC_DTYPE_F32, 1, d2);
  kdc_value_id self = 0;

  kdc_module *m = kdc_ir_module_create("m");
  kdc_func *f = kdc_ir_func_create(m, "f");
  kdc_ir_append(f, KDC_OP_NEG, &t, 1, &self, NULL);
  expect_reject(m, "func @f: %0 = neg: operand 0 is %0, which is not defined before it");

  m = kdc_ir_module_create("m");
  f = kdc_ir_func_create(m, "f");
  kdc_value_id x = kdc_ir_parameter(f, KDC_PARAM_INPUT, "x", &t);
  kdc_ir_add_result(f, x, NULL);
  f->results[0] = 7;
  expect_reject(m, "func @f: result 0 is %7, which is not defined");

  m = kdc_ir_module_create("m");
  f = kdc_ir_func_create(m, "f");
  kdc_ir_parameter(f, KDC_PARAM_INPUT, "x", &t);
  kdc_ir_parameter(f, KDC_PARAM_INPUT, "y", &t);
  f->nodes[1].attr.param.index = 0;
  expect_reject(m, "func @f: %1 = parameter: parameter index 0 is listed at position 1");

  m = kdc_ir_module_create("m");
  f = kdc_ir_func_create(m, "f");
  kdc_ir_parameter(f, KDC_PARAM_INPUT, "x", &t);
  f->n_params = 0;
  expect_reject(m, "func @f: 1 parameter nodes but 0 entries in the parameter list");

  m = kdc_ir_module_create("m");
  f = kdc_ir_func_create(m, "f");
  x = kdc_ir_parameter(f, KDC_PARAM_INPUT, "x", &t);
  kdc_value_id in[2] = {x, x};
  kdc_ir_append(f, KDC_OP_NEG, &t, 2, in, NULL);
  expect_reject(m, "func @f: %1 = neg: has 2 operands, the op takes 1");

  m = kdc_ir_module_create("m");
  f = kdc_ir_func_create(m, "f");
  kdc_ir_splat(f, KDC_DTYPE_F32, 1, d2, 1.0);
  f->nodes[0].attr.constant.data = NULL;
  expect_reject(m, "constant without data");

  m = kdc_ir_module_create("m");
  f = kdc_ir_func_create(m, "f");
  kdc_ir_splat(f, KDC_DTYPE_F32, 1, d2, 1.0);
  f->nodes[0].mem_offset = -5;
  expect_reject(m, "mem offset -5 (must be >= -1)");

  m = kdc_ir_module_create("m");
  m->mesh.naxes = 1;
  strcpy(m->mesh.names[0], "data");
  m->mesh.sizes[0] = 0;
  expect_reject(m, "module @m: mesh: axis \"data\" has size 0 (must be >= 1)");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_accepts_valid),
      cmocka_unit_test(test_rejects_types_and_attributes),
      cmocka_unit_test(test_rejects_shardings),
      cmocka_unit_test(test_rejects_groups),
      cmocka_unit_test(test_rejects_module_level),
      cmocka_unit_test(test_rejects_broken_structure),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
