/*
 * bench_predict: the MNIST MLP example (examples/mnist_mlp).  Prints JSON:
 * compile time, and for batch 16, 128 and 1024 the predict time per batch of
 * the kdc plan against the time OpenBLAS alone needs for the same two GEMMs
 * ([B,784]x[784,200] and [B,200]x[200,10]) measured in the same run.  The
 * figure of merit is kdc_over_gemm = kdc time / GEMM-only time (1.0 = every
 * non-GEMM op free).  Single-threaded by default (KDC_BENCH_THREADS).
 */
#include <cblas.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "bench_compile.h"
#include "bench_util.h"
#include "codegen/codegen.h"
#include "frontend/frontend.h"
#include "passes/passes.h"
#include "runtime/runtime.h"

#ifndef KDC_SOURCE_DIR
#define KDC_SOURCE_DIR "."
#endif

static void die(kdc_status st) {
  if (!st) return;
  fprintf(stderr, "bench_predict: %s\n", kdc_status_message(st));
  exit(1);
}

static double compile_plan(int64_t batch, const char *out) {
  bench_compile_opts o = {KDC_SOURCE_DIR "/examples/mnist_mlp/model.json",
                          KDC_SOURCE_DIR "/examples/mnist_mlp/weights.safetensors", 0, batch, NULL,
                          NULL, NULL};
  return bench_compile("bench_predict", &o, out);
}

typedef struct run_ctx {
  kdc_rt_plan *plan;
  const void *in[1];
  void *out[1];
} run_ctx;

static void run_plan(void *p) {
  run_ctx *c = p;
  die(kdc_rt_plan_run(c->plan, c->in, c->out));
}

typedef struct gemm_ctx {
  int m;
  float *x, *w1, *h, *w2, *y;
} gemm_ctx;

static void run_gemms(void *p) {
  gemm_ctx *g = p;
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, g->m, 200, 784, 1.f, g->x, 784, g->w1, 200,
              0.f, g->h, 200);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, g->m, 10, 200, 1.f, g->h, 200, g->w2, 10,
              0.f, g->y, 10);
}

static float *filled(size_t n) {
  float *p = malloc(n * sizeof(float));
  for (size_t i = 0; i < n; i++) p[i] = (float)((i * 2654435761u) % 1000) / 1000.f - 0.5f;
  return p;
}

int main(int argc, char **argv) {
  (void)argc;
  kdc_rt_blas_select_core(argv);
  const char *env = getenv("KDC_BENCH_THREADS");
  int threads = env ? atoi(env) : 1;
  openblas_set_num_threads(threads);
  char plan[256];
  snprintf(plan, sizeof plan, "%s/kdc-bench-%d.plan", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp",
           (int)getpid());
  double compile_s = compile_plan(32, plan);
  printf("{\n  \"benchmark\": \"predict_mnist_mlp\",\n  \"threads\": %d,\n", threads);
  printf("  \"compile_seconds\": %.4f,\n  \"batches\": [\n", compile_s);
  const int64_t batches[] = {16, 128, 1024};
  for (int bi = 0; bi < 3; bi++) {
    int64_t b = batches[bi];
    compile_plan(b, plan);
    kdc_rt_options ro = {.n_threads = threads};
    run_ctx c;
    die(kdc_rt_plan_load_with(plan, &ro, &c.plan));
    float *x = filled((size_t)b * 784), *y = filled((size_t)b * 10);
    c.in[0] = x;
    c.out[0] = y;
    gemm_ctx g = {(int)b, x, filled(784 * 200), filled((size_t)b * 200), filled(200 * 10), y};
    int inner = b >= 1024 ? 5 : b >= 128 ? 40 : 200;
    /* interleave the two measurements so drift hits both alike */
    double tk = 0, tg = 0;
    for (int round = 0; round < 3; round++) {
      double a = bench_median(run_plan, &c, 9, inner), bb = bench_median(run_gemms, &g, 9, inner);
      if (round == 0 || a < tk) tk = a;
      if (round == 0 || bb < tg) tg = bb;
    }
    printf("    {\"batch\": %lld, \"kdc_seconds\": %.3e, \"openblas_gemm_seconds\": %.3e, "
           "\"kdc_over_gemm\": %.3f}%s\n",
           (long long)b, tk, tg, tk / tg, bi < 2 ? "," : "");
    kdc_rt_plan_release(c.plan);
    free(x);
    free(y);
    free(g.w1);
    free(g.h);
    free(g.w2);
  }
  printf("  ]\n}\n");
  remove(plan);
  return 0;
}
