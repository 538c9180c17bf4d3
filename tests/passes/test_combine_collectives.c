/*
 * combine_collectives (passes/combine_collectives.c) on real training
 * programs.  The golden test tests/golden/combine_collectives.kir shows the
 * rewrite on a hand-written function; here:
 *   - a two-output MLP (Dense trunk, MSE head, softmax CCE head, SGD or
 *     Adam) with the batch split over `data` of a 2x4 mesh is built, given
 *     its training functions and partitioned twice; one copy is then
 *     combined.  The combined train_step and evaluate have fewer all_reduces
 *     (evaluate: the row count and the two outputs' numerators become one),
 *     and the SPMD interpreter (the oracle of the runtime's collectives)
 *     gives every device bitwise the same results for both programs on the
 *     same random inputs: combining never changes a summation order.
 *   - options: combine_max_bytes < 0 leaves the program alone; a threshold
 *     of 8 bytes combines scalars two by two.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "../sharding/sh_test.h"

static const char *const MODEL =
    "module @two_heads {\n"
    "  mesh [data=2, model=4]\n"
    "  weight \"trunk/kernel\" : f32[6,8]\n"
    "  weight \"trunk/bias\" : f32[8]\n"
    "  weight \"reg/kernel\" : f32[8,2]\n"
    "  weight \"cls/kernel\" : f32[8,3]\n"
    "  func @predict {\n"
    "    %x = parameter 0 input \"x\" : f32[16,6] {data,-}\n"
    "    %w = parameter 1 weight \"trunk/kernel\" : f32[6,8]\n"
    "    %b = parameter 2 weight \"trunk/bias\" : f32[8]\n"
    "    %wr = parameter 3 weight \"reg/kernel\" : f32[8,2]\n"
    "    %wc = parameter 4 weight \"cls/kernel\" : f32[8,3]\n"
    "    %h0 = dot_general %x, %w lhs_contract=[1] rhs_contract=[0] : f32[16,8]\n"
    "    %bb = broadcast_in_dim %b dims=[1] : f32[16,8]\n"
    "    %h1 = add %h0, %bb : f32[16,8]\n"
    "    %z = constant 0 : f32[16,8]\n"
    "    %h = max %h1, %z : f32[16,8]\n"
    "    %r = dot_general %h, %wr lhs_contract=[1] rhs_contract=[0] : f32[16,2]\n"
    "    %c = dot_general %h, %wc lhs_contract=[1] rhs_contract=[0] : f32[16,3]\n"
    "    return %r \"reg\", %c \"cls\"\n"
    "  }\n"
    "}\n";

/* The module above (weights random) with train_step and evaluate, through
 * partition, and combined when |combine|; |max_bytes| as the option. */
static kdc_module *build(kdc_optimizer_kind opt, bool combine, int64_t max_bytes) {
  kdc_module *m = NULL;
  kdc_status st = kdc_ir_parse_module(MODEL, "two_heads", &m);
  if (st) fail_msg("%s", kdc_status_message(st));
  for (size_t i = 0; i < m->n_weights; i++) {
    int64_t n = kdc_type_numel(&m->weights[i].type);
    float *w = kdc_arena_alloc(m->arena, (size_t)n * sizeof *w);
    sh_fill(w, n, 100 + (uint32_t)i);
    for (int64_t k = 0; k < n; k++) w[k] *= 0.5f;
    m->weights[i].data = w;
  }
  kdc_train_options t;
  kdc_train_options_init(&t, KDC_LOSS_MSE, opt);
  t.n_losses = 2;
  memset(t.losses, 0, sizeof t.losses);
  t.losses[0].loss = KDC_LOSS_MSE;
  t.losses[1].loss = KDC_LOSS_CCE;
  t.losses[1].from_logits = true;
  t.sample_mask = true;
  kdc_pass_options po;
  memset(&po, 0, sizeof po);
  po.train = &t;
  po.combine_max_bytes = max_bytes;
  st = kdc_pass_run_list(m, "verify,infer_shapes,build_training,simplify,seed_shardings,"
                            "propagate_shardings,partition", &po);
  if (!st && combine) st = kdc_pass_run_list(m, "combine_collectives", &po);
  if (st) fail_msg("%s", kdc_status_message(st));
  return m;
}

static int count_all_reduce(const kdc_module *m, const char *func) {
  const kdc_func *f = kdc_ir_module_find_func(m, func);
  assert_non_null(f);
  return sh_count(f, KDC_OP_ALL_REDUCE);
}

/* Runs |func| of |a| and |b| (same parameters) on every device with the
 * same random local arguments (integers 0) and asserts bitwise equal results. */
static void same_results(kdc_module *a, kdc_module *b, const char *func) {
  const kdc_func *fa = kdc_ir_module_find_func(a, func), *fb = kdc_ir_module_find_func(b, func);
  assert_int_equal(fa->n_params, fb->n_params);
  assert_int_equal(fa->n_results, fb->n_results);
  int64_t nd = kdc_mesh_devices(&a->mesh);
  size_t np = fa->n_params, nr = fa->n_results;
  kdc_tensor **args = calloc((size_t)nd, sizeof *args), **oa = calloc((size_t)nd, sizeof *oa),
             **ob = calloc((size_t)nd, sizeof *ob);
  for (int64_t d = 0; d < nd; d++) {
    args[d] = calloc(np, sizeof **args);
    oa[d] = calloc(nr, sizeof **oa);
    ob[d] = calloc(nr, sizeof **ob);
    for (size_t i = 0; i < np; i++) {
      const kdc_type *t = &fa->nodes[fa->params[i]].type;
      assert_true(kdc_type_equal(t, &fb->nodes[fb->params[i]].type));
      int64_t n = kdc_type_numel(t);
      args[d][i].type = *t;
      args[d][i].data = calloc((size_t)n + 1, 4);
      if (t->dtype == KDC_DTYPE_F32) sh_fill(args[d][i].data, n, (uint32_t)(d * 64 + (int64_t)i));
      if (!strcmp(fa->nodes[fa->params[i]].attr.param.name, "sample_mask"))
        for (int64_t k = 0; k < n; k++) ((float *)args[d][i].data)[k] = k % 3 ? 1.0f : 0.0f;
    }
  }
  assert_null(kdc_ir_interpret_spmd(fa, &a->mesh, (const kdc_tensor *const *)args, oa));
  assert_null(kdc_ir_interpret_spmd(fb, &b->mesh, (const kdc_tensor *const *)args, ob));
  for (int64_t d = 0; d < nd; d++) {
    for (size_t r = 0; r < nr; r++) {
      size_t bytes = (size_t)kdc_type_numel(&oa[d][r].type) * kdc_dtype_size(oa[d][r].type.dtype);
      assert_true(kdc_type_equal(&oa[d][r].type, &ob[d][r].type));
      if (memcmp(oa[d][r].data, ob[d][r].data, bytes))
        fail_msg("%s: device %lld result %zu (%s) differs after combining", func, (long long)d, r,
                 fa->result_names[r] ? fa->result_names[r] : "?");
      free(oa[d][r].data), free(ob[d][r].data);
    }
    for (size_t i = 0; i < np; i++) free(args[d][i].data);
    free(args[d]), free(oa[d]), free(ob[d]);
  }
  free(args), free(oa), free(ob);
}

static void check_optimizer(kdc_optimizer_kind opt) {
  kdc_module *plain = build(opt, false, 0), *comb = build(opt, true, 0);
  int ev0 = count_all_reduce(plain, "evaluate"), ev1 = count_all_reduce(comb, "evaluate");
  int ts0 = count_all_reduce(plain, "train_step"), ts1 = count_all_reduce(comb, "train_step");
  fprintf(stderr, "%s: evaluate all_reduces %d -> %d, train_step %d -> %d\n",
          kdc_optimizer_name(opt), ev0, ev1, ts0, ts1);
  /* evaluate: the row count and the two numerators, independent: one */
  assert_true(ev0 >= 3);
  assert_int_equal(ev1, 1);
  assert_true(ts1 < ts0);
  same_results(plain, comb, "evaluate");
  same_results(plain, comb, "train_step");
  kdc_ir_module_destroy(plain), kdc_ir_module_destroy(comb);
}

static void test_sgd(void **s) {
  (void)s;
  check_optimizer(KDC_OPT_SGD);
}

static void test_adam(void **s) {
  (void)s;
  check_optimizer(KDC_OPT_ADAM);
}

static void test_options(void **s) {
  (void)s;
  kdc_module *plain = build(KDC_OPT_SGD, false, 0), *off = build(KDC_OPT_SGD, true, -1),
             *scalars = build(KDC_OPT_SGD, true, 8);
  assert_int_equal(count_all_reduce(off, "train_step"), count_all_reduce(plain, "train_step"));
  assert_int_equal(count_all_reduce(off, "evaluate"), count_all_reduce(plain, "evaluate"));
  /* 8 bytes: evaluate's three scalar all_reduces combine two by two: the
   * first two, then the third alone */
  assert_int_equal(count_all_reduce(plain, "evaluate"), 3);
  assert_int_equal(count_all_reduce(scalars, "evaluate"), 2);
  kdc_ir_module_destroy(plain), kdc_ir_module_destroy(off), kdc_ir_module_destroy(scalars);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_sgd),
      cmocka_unit_test(test_adam),
      cmocka_unit_test(test_options),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
