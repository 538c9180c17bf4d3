/*
 * bench/bench_math.c: kdc's own transcendentals (ir/math.c for the
 * interpreter, codegen/math_ir.c for kernels): the JIT's cost per element
 * and the accuracy over every float.
 *
 * usage: bench_math [--n N] [--reps R] [--ulp] [--stride S]
 *   Without --ulp: one plan per function (y = f(x), x of N floats in
 *   [-3, 3] as in a recurrent layer's gates, default N = 65536 so the data
 *   stay in L2), loaded with one thread; prints per function the median
 *   process CPU nanoseconds per element of R runs of 64 calls, and the same
 *   for y = -x (the loads, stores and call overhead every kernel has).
 *   With --ulp: the scalar functions against libm's double precision over
 *   every S-th float (default 1: all 2^32), the largest error in f32 ulps
 *   of the exact value and where (results under FLT_MIN count as 0, as kdc
 *   flushes them).  Kernels give the scalar functions' bits
 *   (test_codegen_math), so the figures hold for both.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_util.h"
#include "codegen/codegen.h"
#include "ir/ir.h"
#include "passes/passes.h"
#include "runtime/runtime.h"

typedef struct fn_case {
  const char *name;
  kdc_op op;
  float (*scalar)(float);
  double (*ref)(double);
} fn_case;

static double logistic(double x) { return 1 / (1 + exp(-x)); }

static const fn_case cases[] = {
    {"exp", KDC_OP_EXP, kdc_math_expf, exp},
    {"expm1", KDC_OP_EXPM1, kdc_math_expm1f, expm1},
    {"tanh", KDC_OP_TANH, kdc_math_tanhf, tanh},
    {"logistic", KDC_OP_LOGISTIC, kdc_math_logisticf, logistic},
};

typedef struct run_ctx {
  kdc_rt_plan *plan;
  const void *in[1];
  void *out[1];
} run_ctx;

static void run_once(void *p) {
  run_ctx *c = p;
  for (int i = 0; i < 64; i++)
    if (kdc_rt_plan_run(c->plan, c->in, c->out)) abort();
}

/* Median CPU ns per element of y = op(x). */
static double time_op(kdc_op op, int64_t n, int reps, float *x, float *y) {
  kdc_module *m = kdc_ir_module_create("bench_math");
  kdc_func *f = kdc_ir_func_create(m, "predict");
  kdc_type t = kdc_type_make(KDC_DTYPE_F32, 1, &n);
  kdc_value_id p = kdc_ir_parameter(f, KDC_PARAM_INPUT, "x", &t);
  kdc_ir_add_result(f, kdc_ir_unary(f, op, p), "y");
  char path[] = "/tmp/kdc_bench_math_XXXXXX";
  int fd = mkstemp(path);
  if (fd < 0) abort();
  close(fd);
  kdc_status st = kdc_ir_take_error(f);
  if (!st) st = kdc_pass_plan_memory(m, NULL);
  if (!st) st = kdc_codegen_cpu_plan(m, NULL, path);
  kdc_rt_plan *plan = NULL;
  kdc_rt_options ro = {.n_threads = 1, .cache_dir = ""};
  if (!st) st = kdc_rt_plan_load_with(path, &ro, &plan);
  unlink(path);
  kdc_ir_module_destroy(m);
  if (st) {
    fprintf(stderr, "bench_math: %s\n", kdc_status_message(st));
    exit(1);
  }
  run_ctx c = {plan, {x}, {y}};
  double s = bench_median(run_once, &c, reps, 1);
  kdc_rt_plan_release(plan);
  return s / 64 / (double)n * 1e9;
}

/* |got| - |want| in ulps of |want| rounded to f32 (as tests/ir/test_ir_math.c). */
static double ulps(float got, double want) {
  if (fabs(want) > 0x1.fffffep127) return isinf(got) && (got > 0) == (want > 0) ? 0 : 1e9;
  if (fabs(want) < 0x1p-126) return fabsf(got) <= 0x1p-126f ? 0 : 1e9;
  float w = fabsf((float)want);
  return fabs((double)got - want) / (double)(nextafterf(w, INFINITY) - w);
}

int main(int argc, char **argv) {
  int64_t n = 65536;
  int reps = 15, ulp = 0;
  uint64_t stride = 1;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--n") == 0 && i + 1 < argc) n = atoll(argv[++i]);
    else if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc) reps = atoi(argv[++i]);
    else if (strcmp(argv[i], "--stride") == 0 && i + 1 < argc) stride = strtoull(argv[++i], NULL, 0);
    else if (strcmp(argv[i], "--ulp") == 0) ulp = 1;
    else {
      fprintf(stderr, "usage: bench_math [--n N] [--reps R] [--ulp] [--stride S]\n");
      return 2;
    }
  }
  if (n < 1 || reps < 1 || stride < 1) return 2;
  if (ulp) {
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
      double worst = 0;
      float at = 0;
      for (uint64_t b = 0; b < 0x100000000ull; b += stride) {
        uint32_t u = (uint32_t)b;
        float x;
        memcpy(&x, &u, sizeof x);
        if (isnan(x)) continue;
        double e = ulps(cases[k].scalar(x), cases[k].ref((double)x));
        if (e > worst) worst = e, at = x;
      }
      printf("{\"fn\": \"%s\", \"max_ulp\": %.4f, \"at\": %.9g, \"stride\": %llu}\n", cases[k].name,
             worst, (double)at, (unsigned long long)stride);
      fflush(stdout);
    }
    return 0;
  }
  bench_clock = CLOCK_PROCESS_CPUTIME_ID;
  float *x = malloc((size_t)n * sizeof *x), *y = malloc((size_t)n * sizeof *y);
  uint64_t s = 12345;
  for (int64_t i = 0; i < n; i++) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    x[i] = (float)(-3 + 6 * (double)(s >> 40) / (double)(1ull << 24));
  }
  printf("{\"n\": %lld, \"neg_ns\": %.3f", (long long)n, time_op(KDC_OP_NEG, n, reps, x, y));
  for (size_t k = 0; k < sizeof cases / sizeof *cases; k++)
    printf(", \"%s_ns\": %.3f", cases[k].name, time_op(cases[k].op, n, reps, x, y));
  printf("}\n");
  free(x), free(y);
  return 0;
}
