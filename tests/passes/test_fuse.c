/*
 * Fusion on random graphs: the grouping satisfies the contract of ir.h
 * (checked here independently of passes/fuse.c), the duplication of cheap
 * values does not change results, and the pass is deterministic and
 * idempotent.  A kernel reads at most KDC_KERNEL_MAX_INPUTS outside values
 * (test_fuse_input_cap).  Values beyond a core's L2 recompute up to 16
 * distinct ops (test_fuse_big_values).
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
#include "randgraph.h"

/* The contract, restated: returns NULL or what is wrong. */
static const char *contract_violation(const kdc_func *f) {
  size_t n = f->n_nodes;
  int32_t *root = malloc((n + 1) * sizeof *root); /* group ids are < n */
  for (size_t i = 0; i <= n; i++) root[i] = -1;
  for (size_t i = 0; i < n; i++) {
    int32_t g = f->nodes[i].group;
    if (g >= (int32_t)n) return "group id out of range";
    if (g >= 0) root[g] = (int32_t)i;
  }
  const char *bad = NULL;
  for (size_t i = 0; i < n && !bad; i++) {
    const kdc_node *nd = &f->nodes[i];
    int32_t g = nd->group;
    unsigned fl = kdc_op_flags(nd->op);
    if (nd->op == KDC_OP_PARAMETER || nd->op == KDC_OP_CONSTANT || nd->op == KDC_OP_DOT) {
      if (g != -1) bad = "materialized op in a group";
      continue;
    }
    if (nd->op == KDC_OP_RESHAPE && g == -1) {
      int32_t og = f->nodes[nd->in[0]].group;
      if (og >= 0 && root[og] != (int32_t)nd->in[0]) bad = "alias of a fused interior";
      continue;
    }
    if (g < 0 && (fl & (OPF_EW | OPF_SHAPE | OPF_RED) || nd->op == KDC_OP_IOTA))
      bad = "computation outside any kernel";
    if (g < 0 || root[g] == (int32_t)i) continue;
    if (nd->op == KDC_OP_REDUCE) bad = "reduce not a root";
    /* a returned member is a second output: written at the root's index */
    const kdc_type *ti = &nd->type, *tr = &f->nodes[root[g]].type;
    bool same = ti->rank == tr->rank;
    for (int d = 0; same && d < ti->rank; d++) same = ti->dims[d] == tr->dims[d];
    for (size_t r = 0; r < f->n_results; r++)
      if (f->results[r] == i && !same) bad = "member of other dims returned";
    for (size_t u = i + 1; u < n; u++)
      for (int j = 0; j < f->nodes[u].n_in; j++)
        if (f->nodes[u].in[j] == i && f->nodes[u].group != g) bad = "interior used outside";
  }
  free(root);
  return bad;
}

static void fuse_random(const char *pre, int recompute) {
  for (uint64_t seed = 0; seed < 300; seed++) {
    kdc_module *m = kdc_ir_module_create("t");
    kdc_func *f = randgraph_build(m, seed, 3 + (int)(seed % 16));
    if (pre) assert_null(kdc_pass_run_list(m, pre, NULL));
    size_t n_before = f->n_nodes;
    kdc_tensor before[3], after[3];
    assert_null(randgraph_run(f, seed, before));
    kdc_pass_options opt = {0};
    opt.fuse_max_recompute = recompute;
    kdc_status st = kdc_pass_run_one(m, "fuse", &opt);
    if (st) fail_msg("seed %llu: %s", (unsigned long long)seed, kdc_status_message(st));
    const char *bad = contract_violation(f);
    if (bad) {
      kdc_ir_print_func(stderr, f);
      fail_msg("seed %llu: %s", (unsigned long long)seed, bad);
    }
    if (recompute < 0) assert_int_equal(f->n_nodes, n_before);
    assert_null(randgraph_run(f, seed, after));
    if (!randgraph_same(before, after, f->n_results))
      fail_msg("seed %llu: fuse changed the results", (unsigned long long)seed);
    randgraph_free_results(before, f->n_results);
    randgraph_free_results(after, f->n_results);
    /* Idempotent: a second run finds nothing more to copy or regroup. */
    char *once = kdc_ir_module_to_string(m);
    assert_null(kdc_pass_run_one(m, "fuse", &opt));
    char *twice = kdc_ir_module_to_string(m);
    assert_string_equal(once, twice);
    free(once);
    free(twice);
    kdc_ir_module_destroy(m);
  }
}

static void test_fuse_raw_graphs(void **state) { (void)state; fuse_random(NULL, 0); }
static void test_fuse_simplified_graphs(void **state) { (void)state; fuse_random("simplify", 0); }
static void test_fuse_without_copies(void **state) { (void)state; fuse_random(NULL, -1); }
static void test_fuse_generous_copies(void **state) { (void)state; fuse_random(NULL, 12); }

/* The same input always gives the same text. */
static void test_fuse_deterministic(void **state) {
  (void)state;
  for (uint64_t seed = 0; seed < 50; seed++) {
    char *text[2];
    for (int k = 0; k < 2; k++) {
      kdc_module *m = kdc_ir_module_create("t");
      randgraph_build(m, seed, 14);
      assert_null(kdc_pass_run_one(m, "fuse", NULL));
      text[k] = kdc_ir_module_to_string(m);
      kdc_ir_module_destroy(m);
    }
    assert_string_equal(text[0], text[1]);
    free(text[0]);
    free(text[1]);
  }
}

/* The checker rejects a broken grouping with KDC_INTERNAL. */
static void test_fuse_check_rejects(void **state) {
  (void)state;
  kdc_module *m = kdc_ir_module_create("t");
  kdc_func *f = kdc_ir_func_create(m, "f");
  int64_t d[1] = {4};
  kdc_type t = kdc_type_make(KDC_DTYPE_F32, 1, d);
  kdc_value_id x = kdc_ir_parameter(f, KDC_PARAM_INPUT, "x", &t);
  kdc_value_id e = kdc_ir_unary(f, KDC_OP_EXP, x);
  kdc_value_id n = kdc_ir_unary(f, KDC_OP_NEG, e);
  int64_t d2[2] = {4, 3}, bd[1] = {0};
  kdc_value_id b = kdc_ir_broadcast(f, n, 2, d2, bd);
  kdc_ir_add_result(f, b, "b");
  kdc_ir_add_result(f, e, "e");
  f->nodes[e].group = 0; /* e is returned but has other dims than the root b */
  f->nodes[n].group = 0;
  f->nodes[b].group = 0;
  kdc_status st = kdc_pass_fuse_check(f);
  assert_int_equal(kdc_status_code(st), KDC_INTERNAL);
  assert_non_null(strstr(kdc_status_message(st), "%1 (exp)"));
  kdc_status_free(st);
  kdc_ir_module_destroy(m);
}

/* The most distinct outside values one group's members read. */
static int max_group_reads(const kdc_func *f) {
  int best = 0;
  for (size_t r = 0; r < f->n_nodes; r++) {
    int32_t g = f->nodes[r].group;
    bool is_root = g >= 0;
    for (size_t u = r + 1; u < f->n_nodes && is_root; u++) is_root = f->nodes[u].group != g;
    if (!is_root) continue;
    int n = 0;
    for (size_t x = 0; x < f->n_nodes; x++) {
      if (f->nodes[x].group == g && g >= 0) continue;
      bool read = false;
      for (size_t u = x + 1; u <= r && !read; u++)
        for (int j = 0; j < f->nodes[u].n_in && f->nodes[u].group == g; j++)
          read |= f->nodes[u].in[j] == (kdc_value_id)x;
      n += read;
    }
    if (n > best) best = n;
  }
  return best;
}

/* A sum of 150 inputs, ((x0 + x1) + x2) + ..., is one elementwise chain
 * fuse would put in one kernel; codegen's argument array holds
 * KDC_KERNEL_MAX_INPUTS: fuse starts new kernels so each reads at most
 * that many (exactly that many for the last: the cap is not hit early). */
static void test_fuse_input_cap(void **state) {
  (void)state;
  enum { N = 150 };
  kdc_module *m = kdc_ir_module_create("t");
  kdc_func *f = kdc_ir_func_create(m, "f");
  int64_t d[1] = {4};
  kdc_type t = kdc_type_make(KDC_DTYPE_F32, 1, d);
  kdc_value_id acc = 0;
  for (int i = 0; i < N; i++) {
    char name[16];
    snprintf(name, sizeof name, "x%d", i);
    kdc_value_id x = kdc_ir_parameter(f, KDC_PARAM_INPUT, name, &t);
    acc = i ? kdc_ir_binary(f, KDC_OP_ADD, acc, x) : x;
  }
  kdc_ir_add_result(f, acc, "y");
  assert_null(kdc_pass_run_one(m, "fuse", NULL));
  assert_null(contract_violation(f));
  assert_int_equal(max_group_reads(f), KDC_KERNEL_MAX_INPUTS);
  int32_t groups = 0;
  for (size_t i = 0; i < f->n_nodes; i++)
    if (f->nodes[i].group + 1 > groups) groups = f->nodes[i].group + 1;
  /* each kernel but the first reads the previous one's sum and 62 inputs */
  assert_int_equal(groups, 3);
  kdc_ir_module_destroy(m);
}

/* Batch norm's centred value c = max(x + b, 0) - mean (5 ops) feeding two
 * reductions: over the default cap of 4, so a [64, 32] c is one kernel's
 * result the two reductions read; a [2048, 1024] c (8 MiB, beyond a core's
 * L2) is recomputed in both (up to 16 distinct ops: c * c counts c's ops
 * once), so no kernel writes a value of its size. */
static void test_fuse_big_values(void **state) {
  (void)state;
  for (int big = 0; big < 2; big++) {
    kdc_module *m = kdc_ir_module_create("t");
    kdc_func *f = kdc_ir_func_create(m, "f");
    int64_t d[2] = {big ? 2048 : 64, big ? 1024 : 32}, cd[1] = {d[1]}, map[1] = {1}, lead[1] = {0};
    kdc_type t = kdc_type_make(KDC_DTYPE_F32, 2, d), ct = kdc_type_make(KDC_DTYPE_F32, 1, cd);
    kdc_value_id x = kdc_ir_parameter(f, KDC_PARAM_INPUT, "x", &t);
    kdc_value_id y = kdc_ir_parameter(f, KDC_PARAM_INPUT, "y", &t);
    kdc_value_id b = kdc_ir_parameter(f, KDC_PARAM_INPUT, "b", &ct);
    kdc_value_id mean = kdc_ir_parameter(f, KDC_PARAM_INPUT, "mean", &ct);
    kdc_value_id r = kdc_ir_binary_scalar(
        f, KDC_OP_MAX, kdc_ir_binary(f, KDC_OP_ADD, x, kdc_ir_broadcast(f, b, 2, d, map)), 0.0);
    kdc_value_id c = kdc_ir_binary(f, KDC_OP_SUB, r, kdc_ir_broadcast(f, mean, 2, d, map));
    kdc_ir_add_result(f, kdc_ir_reduce(f, KDC_RED_SUM, kdc_ir_binary(f, KDC_OP_MUL, c, c), 1, lead),
                      "var");
    kdc_ir_add_result(f, kdc_ir_reduce(f, KDC_RED_SUM, kdc_ir_binary(f, KDC_OP_MUL, c, y), 1, lead),
                      "dot");
    assert_null(kdc_ir_take_error(f));
    assert_null(kdc_pass_run_one(m, "fuse", NULL));
    assert_null(contract_violation(f));
    int big_roots = 0, groups = 0;
    for (size_t i = 0; i < f->n_nodes; i++) {
      const kdc_node *nd = &f->nodes[i];
      bool root = nd->group >= 0;
      for (size_t u = i + 1; u < f->n_nodes && root; u++)
        root = f->nodes[u].group != nd->group;
      groups += root;
      big_roots += root && nd->type.rank == 2;
    }
    assert_int_equal(big_roots, big ? 0 : 1);
    assert_int_equal(groups, big ? 2 : 3);
    kdc_ir_module_destroy(m);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_fuse_raw_graphs),      cmocka_unit_test(test_fuse_simplified_graphs),
      cmocka_unit_test(test_fuse_without_copies),  cmocka_unit_test(test_fuse_generous_copies),
      cmocka_unit_test(test_fuse_deterministic),   cmocka_unit_test(test_fuse_check_rejects),
      cmocka_unit_test(test_fuse_input_cap),       cmocka_unit_test(test_fuse_big_values),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
