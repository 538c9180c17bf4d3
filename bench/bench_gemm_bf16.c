/*
 * bench/bench_gemm_bf16.c: the bf16 GEMM of runtime/gemm_bf16.c (AMX-BF16
 * tiles, or with KDC_CPU_BF16=avx512 the vdpbf16ps kernel) against OpenBLAS' cblas_sgemm on the same f32 operands, one
 * thread each (a plan's GEMM step runs single-threaded blocks on the pool),
 * at transformer_512's shapes (batch 8 x seq 128 = 1024 rows, d 512, ffn
 * 2048; forward NN, input gradient NT, weight gradient TN).  Best of 7 runs
 * after a warm-up, alternated.  One JSON line per shape, then a summary.
 * usage: [KDC_CPU_BF16=avx512] bench_gemm_bf16
 */
#include <cblas.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "common/io.h"
#include "runtime/gemm_bf16.h"

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int main(void) {
  openblas_set_num_threads(1);
  const struct { const char *what; int64_t m, n, k; bool ta, tb; } c[] = {
      {"qkv/out proj fwd", 1024, 512, 512, false, false},
      {"ffn up fwd", 1024, 2048, 512, false, false},
      {"ffn down fwd", 1024, 512, 2048, false, false},
      {"ffn up dX", 1024, 512, 2048, false, true},
      {"ffn up dW", 512, 2048, 1024, true, false},
      {"attention scores (one head)", 128, 128, 64, false, true},
  };
  const char *kernel = kdc_cpu_bf16_name(kdc_cpu_bf16_kernel());
  double geo = 0;
  int n_c = (int)(sizeof c / sizeof *c);
  for (int i = 0; i < n_c; i++) {
    int64_t ar = c[i].ta ? c[i].k : c[i].m, ac = c[i].ta ? c[i].m : c[i].k;
    int64_t br = c[i].tb ? c[i].n : c[i].k, bc = c[i].tb ? c[i].k : c[i].n;
    float *A = malloc(sizeof(float) * (size_t)(ar * ac)), *B = malloc(sizeof(float) * (size_t)(br * bc));
    float *C = malloc(sizeof(float) * (size_t)(c[i].m * c[i].n));
    for (int64_t j = 0; j < ar * ac; j++) A[j] = (float)(j % 17) * 0.0625f;
    for (int64_t j = 0; j < br * bc; j++) B[j] = (float)(j % 13) * 0.125f;
    double best[2] = {1e30, 1e30};
    for (int r = 0; r < 8; r++)
      for (int bf = 0; bf < 2; bf++) {
        double t = now();
        rt_sgemm(bf, c[i].ta, c[i].tb, c[i].m, c[i].n, c[i].k, A, ac, B, bc, C, c[i].n);
        t = now() - t;
        if (r && t < best[bf]) best[bf] = t;
      }
    double fl = 2.0 * (double)(c[i].m * c[i].n * c[i].k);
    printf("{\"gemm\": \"%s\", \"m\": %lld, \"n\": %lld, \"k\": %lld, \"op\": \"%c%c\", "
           "\"sgemm_gflops\": %.1f, \"bf16_gflops\": %.1f, \"speedup\": %.2f}\n", c[i].what,
           (long long)c[i].m, (long long)c[i].n, (long long)c[i].k, c[i].ta ? 'T' : 'N',
           c[i].tb ? 'T' : 'N', fl / best[0] / 1e9, fl / best[1] / 1e9, best[0] / best[1]);
    geo += __builtin_log(best[0] / best[1]);
    free(A), free(B), free(C);
  }
  printf("{\"bench\": \"gemm_bf16\", \"kernel\": \"%s\", \"threads\": 1, "
         "\"geomean_speedup_over_sgemm\": %.2f}\n", kernel,
         __builtin_exp(geo / n_c));
  return 0;
}
