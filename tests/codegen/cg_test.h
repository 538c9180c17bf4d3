/*
 * tests/codegen/cg_test.h: the end-to-end checker of the codegen tests
 * (header-only; each test executable includes it once).
 *
 *   cgt_check(m, f, opts)  runs |f| through the pieces of the pipeline the
 *       case asks for (fuse, plan_memory), compiles the module to a plan in
 *       a temp dir, loads it, runs it on deterministic random inputs and
 *       compares every output with the reference interpreter.
 *
 * Tolerances (stated once, used everywhere):
 *   - exact (bitwise, NaN == NaN) by default: data movement, integer and
 *     bool ops, f32 arithmetic, reductions (same order as the interpreter)
 *     and libm calls (the JIT calls the same libm);
 *   - CGT_ULP(n): at most n units in the last place, for f32 functions where
 *     LLVM may constant-fold or reassociate differently from libm;
 *   - CGT_GEMM: |got - want| <= 1e-5 * (1 + sum_k |a_k b_k|) bound scaled by
 *     K, since OpenBLAS blocks the dot products in another order.
 */
#ifndef KDC_TESTS_CODEGEN_CG_TEST_H
#define KDC_TESTS_CODEGEN_CG_TEST_H

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "codegen/codegen.h"
#include "ir/ir.h"
#include "passes/passes.h"
#include "runtime/runtime.h"

#define CGT_UNUSED __attribute__((unused))

typedef enum cgt_tol { CGT_EXACT, CGT_ULP, CGT_GEMM } cgt_tol;

typedef struct cgt_opts {
  bool no_fuse;     /* skip passes/fuse.c: every node its own kernel */
  cgt_tol tol;
  int ulps;         /* for CGT_ULP */
  double gemm_k;    /* for CGT_GEMM: contraction length */
  int positive;     /* f32 inputs in (0.05, 4] instead of [-3, 3] */
  int threads;      /* runtime threads, 0 = default */
  int64_t *out_arena; /* receives the plan's arena bytes (optional) */
  void (*inspect)(const kdc_rt_plan *plan, void *ctx);  /* called after load (optional) */
  void *ctx;
} cgt_opts;

static char cgt_dir[256];

static void cgt_cleanup(void) {
  char cmd[300];
  if (!cgt_dir[0]) return;
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", cgt_dir);
  if (system(cmd)) {}
}

static CGT_UNUSED const char *cgt_path(const char *name) {
  static char buf[4][512];
  static int k;
  if (!cgt_dir[0]) {
    const char *base = getenv("TMPDIR");
    snprintf(cgt_dir, sizeof cgt_dir, "%s/kdc_cg_XXXXXX", base && *base ? base : "/tmp");
    if (!mkdtemp(cgt_dir)) abort();
    atexit(cgt_cleanup);
  }
  k = (k + 1) % 4;
  snprintf(buf[k], sizeof buf[k], "%s/%s", cgt_dir, name);
  return buf[k];
}

static uint64_t cgt_rng(uint64_t *s) {
  *s = *s * 6364136223846793005ull + 1442695040888963407ull;
  return *s >> 33;
}

static CGT_UNUSED void cgt_fill(const kdc_type *t, void *data, uint64_t seed, bool positive) {
  int64_t n = kdc_type_numel(t);
  uint64_t s = seed * 2654435761u + 12345;
  for (int64_t i = 0; i < n; i++) {
    uint64_t r = cgt_rng(&s);
    switch (t->dtype) {
    case KDC_DTYPE_F32: {
      double u = (double)(r % 1000003) / 1000003.0;
      ((float *)data)[i] = positive ? (float)(0.05 + 3.95 * u) : (float)(-3 + 6 * u);
      break;
    }
    case KDC_DTYPE_I32: ((int32_t *)data)[i] = (int32_t)(r % 41) - 20; break;
    case KDC_DTYPE_I64: ((int64_t *)data)[i] = (int64_t)(r % 2001) - 1000; break;
    case KDC_DTYPE_BOOL: ((uint8_t *)data)[i] = (uint8_t)(r & 1); break;
    case KDC_DTYPE_BF16:
    case KDC_DTYPE_F16: {
      double u = (double)(r % 1000003) / 1000003.0;
      kdc_float_store(data, t->dtype, i, positive ? (float)(0.05 + 3.95 * u) : (float)(-3 + 6 * u));
      break;
    }
    default: abort();
    }
  }
}

static int64_t cgt_ulp_diff(float a, float b) {
  int32_t ia, ib;
  memcpy(&ia, &a, 4);
  memcpy(&ib, &b, 4);
  if (ia < 0) ia = INT32_MIN - ia;
  if (ib < 0) ib = INT32_MIN - ib;
  return ia > ib ? (int64_t)ia - ib : (int64_t)ib - ia;
}

/* Compares output |i|; returns the number of mismatching elements. */
static int64_t cgt_compare(const kdc_type *t, const void *got, const void *want,
                           const cgt_opts *o, size_t out_i) {
  int64_t n = kdc_type_numel(t), bad = 0;
  if (t->dtype != KDC_DTYPE_F32) {
    size_t es = kdc_dtype_size(t->dtype);
    for (int64_t i = 0; i < n; i++)
      if (memcmp((const char *)got + i * (int64_t)es, (const char *)want + i * (int64_t)es, es)) {
        if (bad++ < 5) print_message("output %zu [%lld] differs\n", out_i, (long long)i);
      }
    return bad;
  }
  const float *g = got, *w = want;
  for (int64_t i = 0; i < n; i++) {
    bool ok;
    if (isnan(g[i]) || isnan(w[i])) ok = isnan(g[i]) && isnan(w[i]);
    else if (o->tol == CGT_EXACT) ok = memcmp(&g[i], &w[i], 4) == 0;
    else if (o->tol == CGT_ULP) ok = cgt_ulp_diff(g[i], w[i]) <= o->ulps;
    else {
      double k = o->gemm_k > 0 ? o->gemm_k : 1;
      ok = g[i] == w[i] || fabs((double)g[i] - w[i]) <= 1e-5 * k * (1 + fabs(w[i]));
    }
    if (!ok && bad++ < 5)
      print_message("output %zu [%lld]: got %.9g want %.9g\n", out_i, (long long)i, g[i], w[i]);
  }
  return bad;
}

static CGT_UNUSED void cgt_fail(kdc_status st, const char *what) {
  if (st) fail_msg("%s: %s", what, kdc_status_message(st));
}

/* Compiles and runs function |f| of |m| (which must be m's only function
 * or the first) and checks it against the interpreter. */
static CGT_UNUSED void cgt_check(kdc_module *m, kdc_func *f, const cgt_opts *o) {
  cgt_opts defaults = {0};
  if (!o) o = &defaults;
  cgt_fail(kdc_ir_take_error(f), "builder");
  cgt_fail(kdc_ir_verify_module(m), "verify");
  /* inputs (and the interpreter's args) */
  size_t np = f->n_params;
  kdc_tensor *args = calloc(np + 1, sizeof *args);
  for (size_t i = 0; i < np; i++) {
    const kdc_node *p = &f->nodes[f->params[i]];
    const kdc_weight *w = p->attr.param.kind == KDC_PARAM_WEIGHT
                              ? kdc_ir_module_find_weight(m, p->attr.param.name) : NULL;
    args[i].type = p->type;
    if (w && w->data) continue;
    args[i].data = malloc(kdc_type_bytes(&p->type) + 1);
    cgt_fill(&p->type, args[i].data, i + 1, o->positive);
  }
  kdc_tensor *want = calloc(f->n_results + 1, sizeof *want);
  cgt_fail(kdc_ir_interpret(f, args, np, want), "interpret");
  if (!o->no_fuse) cgt_fail(kdc_pass_fuse(m, NULL), "fuse");
  cgt_fail(kdc_pass_plan_memory(m, NULL), "plan_memory");
  const char *path = cgt_path("case.plan");
  cgt_fail(kdc_codegen_cpu_plan(m, NULL, path), "codegen");
  kdc_rt_plan *plan;
  kdc_rt_options ro = {.n_threads = o->threads};
  cgt_fail(kdc_rt_plan_load_with(path, &ro, &plan), "load");
  if (o->out_arena) *o->out_arena = (int64_t)plan->prog.arena_bytes;
  if (o->inspect) o->inspect(plan, o->ctx);
  const void **in = calloc(np + 1, sizeof *in);
  size_t ni = 0;
  for (size_t i = 0; i < np; i++)
    if (args[i].data) in[ni++] = args[i].data;
  assert_int_equal(ni, kdc_rt_plan_input_count(plan, 0));
  assert_int_equal(f->n_results, kdc_rt_plan_output_count(plan, 0));
  void **out = calloc(f->n_results + 1, sizeof *out);
  for (size_t i = 0; i < f->n_results; i++) {
    size_t b = kdc_type_bytes(&want[i].type);
    assert_int_equal(b, kdc_rt_plan_output(plan, 0, i)->bytes);
    out[i] = malloc(b + 1);
    memset(out[i], 0xa5, b);
  }
  for (int rep = 0; rep < 2; rep++) {  /* twice: the arena is reused */
    cgt_fail(kdc_rt_plan_run(plan, in, out), "run");
    int64_t bad = 0;
    for (size_t i = 0; i < f->n_results; i++)
      bad += cgt_compare(&want[i].type, out[i], want[i].data, o, i);
    if (bad) {
      kdc_rt_plan_describe(plan, stderr);
      fail_msg("%lld elements differ from the interpreter", (long long)bad);
    }
  }
  kdc_rt_plan_release(plan);
  for (size_t i = 0; i < f->n_results; i++) free(out[i]), free(want[i].data);
  for (size_t i = 0; i < np; i++) free(args[i].data);
  free(out), free(want), free(in), free(args);
}

/* Counts steps of |kind| in function 0 of |plan|. */
static CGT_UNUSED int cgt_count_steps(const kdc_rt_plan *plan, kdc_prog_step_kind kind) {
  int n = 0;
  const kdc_prog_func *f = &plan->prog.funcs[0];
  for (uint32_t i = 0; i < f->n_steps; i++) n += f->steps[i].kind == kind;
  return n;
}

#endif
