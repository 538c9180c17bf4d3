/*
 * passes/widen_dots.c on bf16 dots: each becomes an f32 dot that rounds its
 * operands to bf16 (bf16_operands = 1), an operand that is an f32 value
 * rounded to bf16 (directly, or through a transpose and a reshape) is
 * replaced by that f32 value with the moving ops rebuilt in f32, the
 * roundings nothing else reads are deleted, and an operand computed in
 * bf16 (not a conversion) is widened as before.  The interpreter's results
 * before and after the pass are the same bits (the products of the same
 * bf16 values, accumulated in f32 in the same order and rounded once), on
 * inputs that are not bf16 values; and the IR text prints and parses the
 * attribute, and the verifier refuses it on bf16 operands.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "passes/passes.h"

static int count(const kdc_func *f, kdc_op op, kdc_dtype d) {
  int k = 0;
  for (size_t i = 0; i < f->n_nodes; i++) k += f->nodes[i].op == op && f->nodes[i].type.dtype == d;
  return k;
}

/* y1 = dot(bf16(x), transpose(reshape(bf16(w)))), y2 = dot(bf16(x) * bf16(x), same) */
static kdc_module *build(void) {
  kdc_module *m = kdc_ir_module_create("mixed");
  kdc_func *f = kdc_ir_func_create(m, "predict");
  int64_t xd[2] = {4, 6}, wd[1] = {30}, w2[2] = {5, 6}, perm[2] = {1, 0};
  kdc_type xt = kdc_type_make(KDC_DTYPE_F32, 2, xd), wt = kdc_type_make(KDC_DTYPE_F32, 1, wd);
  kdc_value_id x = kdc_ir_parameter(f, KDC_PARAM_INPUT, "x", &xt);
  kdc_value_id w = kdc_ir_parameter(f, KDC_PARAM_INPUT, "w", &wt);
  kdc_value_id xb = kdc_ir_convert(f, x, KDC_DTYPE_BF16);
  kdc_value_id wb = kdc_ir_transpose(f, kdc_ir_reshape(f, kdc_ir_convert(f, w, KDC_DTYPE_BF16), 2, w2),
                                     perm);
  kdc_attr_dot d;
  memset(&d, 0, sizeof d);
  d.lhs_contract.n = d.rhs_contract.n = 1;
  d.lhs_contract.v[0] = 1;
  d.rhs_contract.v[0] = 0;
  kdc_value_id y1 = kdc_ir_dot(f, xb, wb, &d);
  kdc_value_id y2 = kdc_ir_dot(f, kdc_ir_binary(f, KDC_OP_MUL, xb, xb), wb, &d);
  kdc_ir_add_result(f, kdc_ir_convert(f, y1, KDC_DTYPE_F32), "y1");
  kdc_ir_add_result(f, kdc_ir_convert(f, y2, KDC_DTYPE_F32), "y2");
  kdc_status st = kdc_ir_take_error(f);
  if (st) fail_msg("%s", kdc_status_message(st));
  assert_null(kdc_ir_verify_module(m));
  return m;
}

static void run(const kdc_func *f, const kdc_tensor *args, kdc_tensor *out) {
  kdc_status st = kdc_ir_interpret(f, args, 2, out);
  if (st) fail_msg("%s", kdc_status_message(st));
}

static void test_folds_roundings(void **state) {
  (void)state;
  kdc_module *m = build();
  kdc_func *f = m->funcs[0];
  float xv[24], wv[30];  /* not bf16 values: the low mantissa bits are set */
  for (int i = 0; i < 24; i++) xv[i] = (float)(i - 11) * 0.1234567f + 0.0001f;
  for (int i = 0; i < 30; i++) wv[i] = (float)(17 - i) * 0.0712345f - 0.0003f;
  int64_t xd[2] = {4, 6}, wd[1] = {30};
  kdc_tensor args[2] = {{kdc_type_make(KDC_DTYPE_F32, 2, xd), xv},
                        {kdc_type_make(KDC_DTYPE_F32, 1, wd), wv}};
  kdc_tensor before[2], after[2];
  run(f, args, before);
  assert_null(kdc_pass_widen_dots(m, NULL));
  assert_null(kdc_ir_verify_module(m));
  /* every dot is f32 and rounds its operands; the first reads x itself and
   * w through an f32 reshape + transpose; w's rounding is gone, x's stays
   * (the multiply reads it) */
  assert_int_equal(count(f, KDC_OP_DOT, KDC_DTYPE_BF16), 0);
  assert_int_equal(count(f, KDC_OP_DOT, KDC_DTYPE_F32), 2);
  const kdc_node *d1 = NULL;
  for (size_t i = 0; i < f->n_nodes; i++) {
    const kdc_node *nd = &f->nodes[i];
    if (nd->op != KDC_OP_DOT) continue;
    assert_int_equal(nd->attr.dot.bf16_operands, 1);
    if (f->nodes[nd->in[0]].op == KDC_OP_PARAMETER) d1 = nd;
  }
  assert_non_null(d1);
  const kdc_node *t = &f->nodes[d1->in[1]];
  assert_int_equal(t->op, KDC_OP_TRANSPOSE);
  assert_int_equal(t->type.dtype, KDC_DTYPE_F32);
  assert_int_equal(f->nodes[t->in[0]].op, KDC_OP_RESHAPE);
  assert_int_equal(f->nodes[f->nodes[t->in[0]].in[0]].op, KDC_OP_PARAMETER);
  assert_int_equal(count(f, KDC_OP_CONVERT, KDC_DTYPE_BF16), 3); /* x, the two results */
  assert_int_equal(count(f, KDC_OP_RESHAPE, KDC_DTYPE_BF16), 0);
  run(f, args, after);
  for (int r = 0; r < 2; r++) {
    assert_int_equal(kdc_type_numel(&after[r].type), 20);
    assert_memory_equal(before[r].data, after[r].data, 20 * sizeof(float));
    free(before[r].data), free(after[r].data);
  }
  kdc_ir_module_destroy(m);
}

/* The attribute in the IR text, and the verifier's rule. */
static void test_text_and_verify(void **state) {
  (void)state;
  const char *ok = "module @t {\n func @predict {\n"
                   "  %a = parameter 0 input \"a\" : f32[2,3]\n"
                   "  %b = parameter 1 input \"b\" : f32[3,4]\n"
                   "  %d = dot_general %a, %b lhs_contract=[1] rhs_contract=[0] bf16_operands=1"
                   " : f32[2,4]\n  return %d \"y\"\n }\n}\n";
  kdc_module *m = NULL;
  kdc_status st = kdc_ir_parse_module(ok, "t.kir", &m);
  if (st) fail_msg("%s", kdc_status_message(st));
  assert_null(kdc_ir_verify_module(m));
  assert_int_equal(m->funcs[0]->nodes[2].attr.dot.bf16_operands, 1);
  char *text = NULL;
  size_t len = 0;
  FILE *out = open_memstream(&text, &len);
  kdc_ir_print_module(out, m);
  fclose(out);
  assert_non_null(strstr(text, "rhs_contract=[0] bf16_operands=1 :"));
  free(text);
  kdc_ir_module_destroy(m);
  const char *bad = "module @t {\n func @predict {\n"
                    "  %a = parameter 0 input \"a\" : bf16[2,3]\n"
                    "  %b = parameter 1 input \"b\" : bf16[3,4]\n"
                    "  %d = dot_general %a, %b lhs_contract=[1] rhs_contract=[0] bf16_operands=1"
                    " : bf16[2,4]\n  return %d \"y\"\n }\n}\n";
  st = kdc_ir_parse_module(bad, "t.kir", &m);
  if (!st) st = kdc_ir_verify_module(m);
  assert_non_null(st);
  assert_non_null(strstr(kdc_status_message(st), "bf16_operands=1: must be 0, or 1 with f32"));
  kdc_status_free(st);
  kdc_ir_module_destroy(m);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_folds_roundings),
      cmocka_unit_test(test_text_and_verify),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
