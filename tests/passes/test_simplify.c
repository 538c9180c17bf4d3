/*
 * Simplification passes (algebra, fold, cse, dce, simplify) preserve
 * semantics: on random graphs, the reference interpreter gives bit-identical
 * results before and after (folding evaluates with that same interpreter, so
 * not even folded values may differ).  Plus the fold size cap.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "passes/passes.h"
#include "randgraph.h"

static void check_pass_preserves(const char *passes, const kdc_pass_options *opt) {
  for (uint64_t seed = 0; seed < 250; seed++) {
    kdc_module *m = kdc_ir_module_create("t");
    kdc_func *f = randgraph_build(m, seed, 4 + (int)(seed % 12));
    assert_null(f->error);
    size_t n_before = f->n_nodes;
    kdc_tensor before[3], after[3];
    kdc_status st = randgraph_run(f, seed, before);
    if (st) fail_msg("seed %llu: %s", (unsigned long long)seed, kdc_status_message(st));
    st = kdc_pass_run_list(m, passes, opt);
    if (st) fail_msg("seed %llu: %s: %s", (unsigned long long)seed, passes, kdc_status_message(st));
    assert_true(f->n_nodes <= n_before);
    st = randgraph_run(f, seed, after);
    assert_null(st);
    if (!randgraph_same(before, after, f->n_results))
      fail_msg("seed %llu: %s changed the results", (unsigned long long)seed, passes);
    randgraph_free_results(before, f->n_results);
    randgraph_free_results(after, f->n_results);
    kdc_ir_module_destroy(m);
  }
}

static void test_algebra_preserves(void **state) {
  (void)state;
  check_pass_preserves("algebra", NULL);
}
static void test_fold_preserves(void **state) {
  (void)state;
  check_pass_preserves("fold", NULL);
}
static void test_cse_preserves(void **state) {
  (void)state;
  check_pass_preserves("cse", NULL);
}
static void test_dce_preserves(void **state) {
  (void)state;
  check_pass_preserves("dce", NULL);
}
static void test_simplify_preserves(void **state) {
  (void)state;
  check_pass_preserves("verify,infer_shapes,simplify", NULL);
}

/* simplify reaches a fixpoint: running it again changes nothing. */
static void test_simplify_idempotent(void **state) {
  (void)state;
  for (uint64_t seed = 0; seed < 100; seed++) {
    kdc_module *m = kdc_ir_module_create("t");
    randgraph_build(m, seed, 12);
    assert_null(kdc_pass_run_one(m, "simplify", NULL));
    char *once = kdc_ir_module_to_string(m);
    assert_null(kdc_pass_run_one(m, "simplify", NULL));
    char *twice = kdc_ir_module_to_string(m);
    assert_string_equal(once, twice);
    free(once);
    free(twice);
    kdc_ir_module_destroy(m);
  }
}

/* exp of a dense [4,4] constant folds by default, not above the cap. */
static void test_fold_cap(void **state) {
  (void)state;
  for (int capped = 0; capped < 2; capped++) {
    kdc_module *m = kdc_ir_module_create("t");
    kdc_func *f = kdc_ir_func_create(m, "f");
    int64_t d[2] = {4, 4};
    float data[16];
    for (int i = 0; i < 16; i++) data[i] = (float)i / 8;
    kdc_type t = kdc_type_make(KDC_DTYPE_F32, 2, d);
    kdc_value_id e = kdc_ir_unary(f, KDC_OP_EXP, kdc_ir_constant(f, &t, data));
    kdc_ir_add_result(f, e, "e");
    kdc_pass_options opt = {0};
    opt.fold_max_elements = capped ? 8 : 0;
    assert_null(kdc_pass_run_one(m, "fold", &opt));
    const kdc_node *r = kdc_ir_node(f, f->results[0]);
    assert_int_equal(r->op, capped ? KDC_OP_EXP : KDC_OP_CONSTANT);
    assert_int_equal(f->n_nodes, capped ? 2 : 1);
    kdc_ir_module_destroy(m);
  }
}

/* Integer division by zero is left for the runtime, not a compile error. */
static void test_fold_refusal_is_not_an_error(void **state) {
  (void)state;
  kdc_module *m = kdc_ir_module_create("t");
  kdc_func *f = kdc_ir_func_create(m, "f");
  kdc_value_id q = kdc_ir_binary(f, KDC_OP_DIV, kdc_ir_scalar(f, KDC_DTYPE_I32, 7),
                                 kdc_ir_scalar(f, KDC_DTYPE_I32, 0));
  kdc_ir_add_result(f, q, "q");
  assert_null(kdc_pass_run_one(m, "fold", NULL));
  kdc_ir_module_destroy(m);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_algebra_preserves),  cmocka_unit_test(test_fold_preserves),
      cmocka_unit_test(test_cse_preserves),      cmocka_unit_test(test_dce_preserves),
      cmocka_unit_test(test_simplify_preserves), cmocka_unit_test(test_simplify_idempotent),
      cmocka_unit_test(test_fold_cap),
      cmocka_unit_test(test_fold_refusal_is_not_an_error),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
