/*
 * passes/plan_memory.c: buffer reuse, in-place updates, aliases and the
 * cases where in-place would be wrong; each plan is also run end to end
 * against the interpreter (a wrong overlap shows up as wrong numbers).
 */
#include "cg_test.h"

static kdc_value_id param(kdc_func *f, int rank, const int64_t *dims) {
  kdc_type t = kdc_type_make(KDC_DTYPE_F32, rank, dims);
  char name[16];
  snprintf(name, sizeof name, "x%zu", f->n_params);
  return kdc_ir_parameter(f, KDC_PARAM_INPUT, name, &t);
}

static void check_aligned(const kdc_func *f) {
  for (size_t v = 0; v < f->n_nodes; v++) assert_true(f->nodes[v].mem_offset % 64 == 0 ||
                                                      f->nodes[v].mem_offset == -1);
}

/* exp -> neg -> tanh -> abs, unfused: every kernel overwrites its input. */
static void test_inplace_chain(void **state) {
  (void)state;
  int64_t d[2] = {7, 33};
  kdc_module *m = kdc_ir_module_create("t");
  kdc_func *f = kdc_ir_func_create(m, "predict");
  kdc_value_id x = param(f, 2, d);
  kdc_value_id a = kdc_ir_unary(f, KDC_OP_EXP, x);
  kdc_value_id b = kdc_ir_unary(f, KDC_OP_NEG, a);
  kdc_value_id c = kdc_ir_unary(f, KDC_OP_TANH, b);
  kdc_ir_add_result(f, kdc_ir_unary(f, KDC_OP_ABS, c), "y");
  int64_t arena;
  assert_null(kdc_pass_plan_memory_func(f, &arena));
  assert_int_equal(arena, (7 * 33 * 4 + 63) / 64 * 64);
  assert_int_equal(f->nodes[a].mem_offset, f->nodes[b].mem_offset);
  assert_int_equal(f->nodes[b].mem_offset, f->nodes[c].mem_offset);
  assert_int_equal(kdc_pass_plan_memory_arena_bytes(f), arena);
  check_aligned(f);
  cgt_opts o = {.no_fuse = true};
  cgt_check(m, f, &o);
  kdc_ir_module_destroy(m);
}

/* Transposes cannot be in place, but at most two are live at once. */
static void test_reuse(void **state) {
  (void)state;
  int64_t d[2] = {5, 9}, perm[2] = {1, 0};
  kdc_module *m = kdc_ir_module_create("t");
  kdc_func *f = kdc_ir_func_create(m, "predict");
  kdc_value_id v = param(f, 2, d);
  for (int i = 0; i < 8; i++) v = kdc_ir_transpose(f, v, perm);
  kdc_ir_add_result(f, kdc_ir_unary(f, KDC_OP_NEG, v), "y");
  int64_t arena;
  assert_null(kdc_pass_plan_memory_func(f, &arena));
  assert_int_equal(arena, 2 * 192);
  cgt_opts o = {.no_fuse = true};
  cgt_check(m, f, &o);
  kdc_ir_module_destroy(m);
}

/* a is read again after b: b must not overwrite a. */
static void test_no_inplace_when_live(void **state) {
  (void)state;
  int64_t d[1] = {33};
  kdc_module *m = kdc_ir_module_create("t");
  kdc_func *f = kdc_ir_func_create(m, "predict");
  kdc_value_id x = param(f, 1, d);
  kdc_value_id a = kdc_ir_unary(f, KDC_OP_EXP, x);
  kdc_value_id b = kdc_ir_unary(f, KDC_OP_NEG, a);
  kdc_value_id c = kdc_ir_binary(f, KDC_OP_ADD, a, b);
  kdc_ir_add_result(f, kdc_ir_unary(f, KDC_OP_ABS, c), "y");
  assert_null(kdc_pass_plan_memory_func(f, NULL));
  assert_int_not_equal(f->nodes[a].mem_offset, f->nodes[b].mem_offset);
  cgt_opts o = {.no_fuse = true};
  cgt_check(m, f, &o);
  kdc_ir_module_destroy(m);
}

/* y = s + transpose(s) in one kernel reads s at two indices: never in place
 * over s, although s dies there and has y's size.  y feeds two reductions
 * and fusion is told not to duplicate it, so y is an arena value. */
static void test_no_inplace_through_transpose(void **state) {
  (void)state;
  int64_t d[3] = {7, 7, 3}, two = 2, perm[2] = {1, 0}, zero = 0, one = 1;
  kdc_module *m = kdc_ir_module_create("t");
  kdc_func *f = kdc_ir_func_create(m, "predict");
  kdc_value_id x = param(f, 3, d);
  kdc_value_id s = kdc_ir_reduce(f, KDC_RED_SUM, x, 1, &two);
  kdc_value_id y = kdc_ir_binary(f, KDC_OP_ADD, s, kdc_ir_transpose(f, s, perm));
  kdc_ir_add_result(f, kdc_ir_reduce(f, KDC_RED_SUM, y, 1, &zero), "a");
  kdc_ir_add_result(f, kdc_ir_reduce(f, KDC_RED_MAX, y, 1, &one), "b");
  kdc_pass_options po = {.fuse_max_recompute = -1};
  assert_null(kdc_pass_fuse(m, &po));
  assert_null(kdc_pass_plan_memory_func(f, NULL));
  assert_true(f->nodes[s].mem_offset >= 0 && f->nodes[y].mem_offset >= 0);
  assert_int_not_equal(f->nodes[s].mem_offset, f->nodes[y].mem_offset);
  cgt_opts o = {.no_fuse = true};  /* keep these groups */
  cgt_check(m, f, &o);
  kdc_ir_module_destroy(m);
}

static void test_inplace_fused(void **state) {
  (void)state;
  int64_t d[3] = {7, 7, 3}, two = 2, zero = 0, one = 1;
  kdc_module *m = kdc_ir_module_create("t");
  kdc_func *f = kdc_ir_func_create(m, "predict");
  kdc_value_id x = param(f, 3, d);
  kdc_value_id s = kdc_ir_reduce(f, KDC_RED_SUM, x, 1, &two);
  kdc_value_id y = kdc_ir_binary(f, KDC_OP_MUL, s, kdc_ir_unary(f, KDC_OP_EXP, s));
  kdc_ir_add_result(f, kdc_ir_reduce(f, KDC_RED_SUM, y, 1, &zero), "a");
  kdc_ir_add_result(f, kdc_ir_reduce(f, KDC_RED_MAX, y, 1, &one), "b");
  kdc_pass_options po = {.fuse_max_recompute = -1};
  assert_null(kdc_pass_fuse(m, &po));
  assert_null(kdc_pass_plan_memory_func(f, NULL));
  assert_int_equal(f->nodes[s].mem_offset, f->nodes[y].mem_offset);
  cgt_opts o = {.no_fuse = true};
  cgt_check(m, f, &o);
  kdc_ir_module_destroy(m);
}

/* An alias keeps its base alive until the alias's last use. */
static void test_alias_lifetime(void **state) {
  (void)state;
  int64_t d[2] = {4, 6}, r[1] = {24}, perm[2] = {1, 0}, d2[2] = {6, 4};
  kdc_module *m = kdc_ir_module_create("t");
  kdc_func *f = kdc_ir_func_create(m, "predict");
  kdc_value_id x = param(f, 2, d);
  kdc_value_id a = kdc_ir_unary(f, KDC_OP_EXP, x);
  kdc_value_id ra = kdc_ir_reshape(f, a, 1, r);                       /* alias of a */
  kdc_value_id t = kdc_ir_unary(f, KDC_OP_TANH, kdc_ir_transpose(f, x, perm));
  kdc_value_id u = kdc_ir_unary(f, KDC_OP_NEG, kdc_ir_reshape(f, t, 1, r));
  kdc_value_id y = kdc_ir_binary(f, KDC_OP_ADD, ra, u);
  kdc_ir_add_result(f, kdc_ir_reshape(f, y, 2, d2), "y");
  cgt_opts o = {.no_fuse = true};
  cgt_check(m, f, &o);
  kdc_ir_module_destroy(m);
}

/* A contract violation is an internal error, not a crash. */
static void test_bad_groups(void **state) {
  (void)state;
  int64_t d[1] = {7};
  kdc_module *m = kdc_ir_module_create("t");
  kdc_func *f = kdc_ir_func_create(m, "predict");
  kdc_value_id x = param(f, 1, d);
  kdc_value_id a = kdc_ir_unary(f, KDC_OP_EXP, x);
  kdc_value_id b = kdc_ir_unary(f, KDC_OP_NEG, a);
  kdc_value_id c = kdc_ir_unary(f, KDC_OP_ABS, a);
  kdc_ir_add_result(f, kdc_ir_binary(f, KDC_OP_ADD, b, c), "y");
  f->nodes[a].group = 0, f->nodes[b].group = 0;  /* a used by c outside group 0 */
  kdc_status st = kdc_pass_plan_memory_func(f, NULL);
  assert_non_null(st);
  assert_int_equal(kdc_status_code(st), KDC_INTERNAL);
  kdc_status_free(st);
  kdc_ir_module_destroy(m);
}

/* A chain of 100,000 transposes beside a value live throughout: planning
 * is O(n log n) (passes/plan_memory.c, placed_tree; the former all-pairs
 * scan took minutes here).  Three slots suffice and the chain alternates
 * between the two above the long-lived one. */
static void test_long_chain(void **state) {
  (void)state;
  enum { N = 100000 };
  int64_t d[2] = {5, 9}, perm[2] = {1, 0};
  kdc_module *m = kdc_ir_module_create("t");
  kdc_func *f = kdc_ir_func_create(m, "predict");
  kdc_value_id s = kdc_ir_unary(f, KDC_OP_EXP, param(f, 2, d));
  kdc_value_id v = s, first = 0;
  for (int i = 0; i < N; i++) {
    v = kdc_ir_transpose(f, v, perm);
    if (i == 0) first = v;
  }
  kdc_value_id y = kdc_ir_binary(f, KDC_OP_ADD, s, v);
  kdc_ir_add_result(f, y, "y");
  int64_t arena;
  assert_null(kdc_pass_plan_memory_func(f, &arena));
  assert_int_equal(arena, 3 * 192);
  assert_int_equal(f->nodes[s].mem_offset, 0);
  assert_int_equal(f->nodes[y].mem_offset, -1);
  for (kdc_value_id t = first; t < first + N; t++)
    assert_int_equal(f->nodes[t].mem_offset, (t - first) % 2 ? 384 : 192);
  assert_int_equal(kdc_pass_plan_memory_arena_bytes(f), arena);
  kdc_ir_module_destroy(m);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_inplace_chain),
      cmocka_unit_test(test_reuse),
      cmocka_unit_test(test_no_inplace_when_live),
      cmocka_unit_test(test_no_inplace_through_transpose),
      cmocka_unit_test(test_inplace_fused),
      cmocka_unit_test(test_alias_lifetime),
      cmocka_unit_test(test_bad_groups),
      cmocka_unit_test(test_long_chain),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
