/*
 * Streaming stores (docs/codegen.md, "Streaming stores"): a kernel that
 * writes only function results, CG_STREAM_MIN_BYTES or more, in whole
 * 64-byte rows, gets a wrapper that checks its output pointers' alignment
 * and runs a variant whose vector stores the JIT made non-temporal.  Both
 * variants must equal the reference interpreter bit for bit: outputs
 * 64-byte aligned (the streaming variant), and outputs 4 bytes off (the
 * plain one); kernels that do not qualify (rows of 4100 floats, an arena
 * value) get no variant.
 */
#include "cg_test.h"

/* |f|: x, y f32[R,C] -> r0 = x*y + 1, r1 = (x - y) / 3, or with |multi|
 * r1 = (r0 - y) / 3 (one multi-output kernel writing both results). */
static kdc_func *build(kdc_module *m, int64_t rows, int64_t cols, bool multi) {
  kdc_func *f = kdc_ir_func_create(m, "predict");
  int64_t d[2] = {rows, cols};
  kdc_type t = kdc_type_make(KDC_DTYPE_F32, 2, d);
  kdc_value_id x = kdc_ir_parameter(f, KDC_PARAM_INPUT, "x", &t);
  kdc_value_id y = kdc_ir_parameter(f, KDC_PARAM_INPUT, "y", &t);
  kdc_value_id p = kdc_ir_binary(f, KDC_OP_MUL, x, y);
  kdc_value_id r0 = kdc_ir_binary_scalar(f, KDC_OP_ADD, p, 1.0);
  kdc_value_id dd = kdc_ir_binary(f, KDC_OP_SUB, multi ? r0 : x, y);
  kdc_value_id r1 = kdc_ir_binary_scalar(f, KDC_OP_DIV, dd, 3.0);
  kdc_ir_add_result(f, r0, "r0");
  kdc_ir_add_result(f, r1, "r1");
  return f;
}

/* |m| fused, memory-planned, compiled and loaded with |threads| threads. */
static kdc_rt_plan *compile_load(kdc_module *m, int threads) {
  cgt_fail(kdc_pass_fuse(m, NULL), "fuse");
  cgt_fail(kdc_pass_plan_memory(m, NULL), "plan_memory");
  const char *path = cgt_path("stream.plan");
  cgt_fail(kdc_codegen_cpu_plan(m, NULL, path), "codegen");
  kdc_rt_plan *plan = NULL;
  kdc_rt_options ro = {.n_threads = threads};
  cgt_fail(kdc_rt_plan_load_with(path, &ro, &plan), "load");
  return plan;
}

/* Runs |f| (fused, planned, compiled) with output pointers |misalign|
 * bytes past a 64-byte boundary on |threads| threads; checks every output
 * bitwise against the interpreter and whether kernel 0 has a streaming
 * variant and the JIT made stores non-temporal (|streams|). */
static void run_case(kdc_module *m, kdc_func *f, size_t misalign, int threads, bool streams) {
  size_t np = f->n_params;
  kdc_tensor args[2], want[2];
  const void *in[2];
  for (size_t i = 0; i < np; i++) {
    args[i].type = f->nodes[f->params[i]].type;
    args[i].data = malloc(kdc_type_bytes(&args[i].type) + 1);
    cgt_fill(&args[i].type, args[i].data, i + 1, false);
    in[i] = args[i].data;
  }
  cgt_fail(kdc_ir_interpret(f, args, np, want), "interpret");
  kdc_rt_plan *plan = compile_load(m, threads);
  assert_int_equal(rt_jit_lookup(plan->jit, "kdc_kernel_0_a") != NULL, streams);
  assert_int_equal(rt_jit_nontemporal_stores(plan->jit) > 0, streams);
  void *raw[2], *out[2];
  for (size_t i = 0; i < f->n_results; i++) {
    size_t b = kdc_type_bytes(&want[i].type);
    raw[i] = aligned_alloc(64, (b + 64 + 63) / 64 * 64);
    out[i] = (char *)raw[i] + misalign;
    memset(out[i], 0xa5, b);
  }
  for (int rep = 0; rep < 2; rep++) {
    cgt_fail(kdc_rt_plan_run(plan, in, out), "run");
    cgt_opts o = {0};
    for (size_t i = 0; i < f->n_results; i++)
      assert_int_equal(cgt_compare(&want[i].type, out[i], want[i].data, &o, i), 0);
  }
  kdc_rt_plan_release(plan);
  for (size_t i = 0; i < f->n_results; i++) free(raw[i]), free(want[i].data);
  for (size_t i = 0; i < np; i++) free(args[i].data);
}

/* 1024 x 4096 f32 = 16 MiB per result: each result's kernel streams. */
static void test_stream_aligned_and_not(void **state) {
  (void)state;
  static const struct { bool multi; size_t misalign; int threads; } cases[] = {
      {false, 0, 2}, {false, 4, 2}, {true, 0, 2}, {true, 4, 1}, {true, 0, 1}};
  for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
    kdc_module *m = kdc_ir_module_create("stream");
    kdc_func *f = build(m, 1024, 4096, cases[c].multi);
    run_case(m, f, cases[c].misalign, cases[c].threads, true);
    kdc_ir_module_destroy(m);
  }
}

/* Rows of 4100 floats are not whole lines; 64 x 4096 is below the size
 * threshold: plain wrappers only. */
static void test_no_stream(void **state) {
  (void)state;
  static const int64_t shapes[][2] = {{1024, 4100}, {64, 4096}};
  for (int s = 0; s < 2; s++) {
    kdc_module *m = kdc_ir_module_create("plain");
    kdc_func *f = build(m, shapes[s][0], shapes[s][1], false);
    run_case(m, f, 0, 2, false);
    kdc_ir_module_destroy(m);
  }
}

/* A big kernel whose output is an arena value (read again by the step)
 * stays plain even when the result kernel after it streams. */
static void test_arena_value_not_streamed(void **state) {
  (void)state;
  kdc_module *m = kdc_ir_module_create("arena");
  kdc_func *f = kdc_ir_func_create(m, "predict");
  int64_t d[2] = {1024, 4096}, last = 1, map[2] = {0, 1};
  kdc_type t = kdc_type_make(KDC_DTYPE_F32, 2, d);
  kdc_value_id x = kdc_ir_parameter(f, KDC_PARAM_INPUT, "x", &t);
  /* e: too costly to recompute in both users (5 ops), so an arena value */
  kdc_value_id e = kdc_ir_binary_scalar(f, KDC_OP_ADD, kdc_ir_binary(f, KDC_OP_MUL, x, x), 1.0);
  e = kdc_ir_binary_scalar(f, KDC_OP_SUB, kdc_ir_unary(f, KDC_OP_TANH, e), 1.0);
  e = kdc_ir_unary(f, KDC_OP_EXP, e);
  kdc_value_id s = kdc_ir_reduce(f, KDC_RED_SUM, e, 1, &last);
  kdc_value_id y = kdc_ir_binary(f, KDC_OP_DIV, e, kdc_ir_broadcast(f, s, 2, d, map));
  kdc_ir_add_result(f, y, "softmax");
  size_t np = 1;
  kdc_tensor args[1] = {{.type = t, .data = malloc(kdc_type_bytes(&t))}}, want[1];
  cgt_fill(&t, args[0].data, 1, false);
  cgt_fail(kdc_ir_interpret(f, args, np, want), "interpret");
  kdc_rt_plan *plan = compile_load(m, 0);
  const kdc_prog_func *pf = &plan->prog.funcs[0];
  int streamed = 0;
  for (uint32_t i = 0; i < pf->n_steps; i++) {
    if (pf->steps[i].kind != KDC_STEP_KERNEL) continue;
    char name[64];
    snprintf(name, sizeof name, "%s_a", plan->prog.kernels[pf->steps[i].kernel.kernel].name);
    bool has = rt_jit_lookup(plan->jit, name) != NULL;
    /* only the kernel writing the result streams */
    assert_int_equal(has, pf->steps[i].kernel.args[0].buf == KDC_PROG_BUF_OUTPUT);
    streamed += has;
  }
  assert_int_equal(streamed, 1);
  void *out = aligned_alloc(64, kdc_type_bytes(&t));
  const void *in[1] = {args[0].data};
  cgt_fail(kdc_rt_plan_run(plan, in, &out), "run");
  cgt_opts o = {0};
  assert_int_equal(cgt_compare(&t, out, want[0].data, &o, 0), 0);
  kdc_rt_plan_release(plan);
  free(out), free(want[0].data), free(args[0].data);
  kdc_ir_module_destroy(m);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_stream_aligned_and_not),
      cmocka_unit_test(test_no_stream),
      cmocka_unit_test(test_arena_value_not_streamed),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
