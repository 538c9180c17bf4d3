/*
 * bench/bench_gemm_panels.c: how much speed a weight-gradient GEMM loses
 * when it is computed as separate cblas_sgemm calls on tiles of its result
 * (what a GEMM step with an epilogue kernel per tile does, docs/codegen.md,
 * "GEMM epilogues") against one call on the whole result, without and with
 * an Adam update as the epilogue (whole: the GEMM, then one pass over dW,
 * m, v, w; tiled: each tile's update right after the tile, while it is in
 * cache; AVX-512 with streaming stores like kdc's generated kernel, a
 * stand-in for it).  Shapes: the mlp_4096 step's dW = x^T g (TN, k = 256)
 * with M = 784 and 4096, N = 4096; tiles of Mt x Nt (Nt = N: row panels,
 * Mt = M: column panels).  One thread (each tile is one single-threaded
 * call on a pool task in the runtime), samples of the whole GEMM and of the
 * tiled one taken alternately (same load).  Prints one JSON object: per
 * shape and tile, the medians and tiled / whole.
 * usage: bench_gemm_panels
 */
#include <cblas.h>
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>

#include "bench_util.h"
#include "runtime/runtime.h"

typedef struct gemm {
  int m, n, k, mt, nt, adam;
  const float *a, *b;
  float *c, *mom, *vel, *w;
} gemm;

/* Keras 3's Adam on rows [m0, m1) x columns [n0, n1) of g (n a multiple
 * of 16, rows 64-byte aligned): m += (g - m)(1 - b1), v += (g^2 - v)(1 - b2),
 * w -= alpha m / (sqrt(v) + eps), streaming stores. */
__attribute__((target("avx512f"))) static void adam(const gemm *G, int m0, int m1, int n0,
                                                     int n1) {
  const __m512 c1 = _mm512_set1_ps(0.1f), c2 = _mm512_set1_ps(0.001f);
  const __m512 al = _mm512_set1_ps(1e-3f), eps = _mm512_set1_ps(1e-7f);
  for (int i = m0; i < m1; i++)
    for (int j = n0; j < n1; j += 16) {
      size_t o = (size_t)i * (size_t)G->n + (size_t)j;
      __m512 g = _mm512_load_ps(G->c + o), m = _mm512_load_ps(G->mom + o);
      __m512 v = _mm512_load_ps(G->vel + o), w = _mm512_load_ps(G->w + o);
      m = _mm512_add_ps(m, _mm512_mul_ps(_mm512_sub_ps(g, m), c1));
      v = _mm512_add_ps(v, _mm512_mul_ps(_mm512_sub_ps(_mm512_mul_ps(g, g), v), c2));
      w = _mm512_sub_ps(w, _mm512_div_ps(_mm512_mul_ps(al, m),
                                         _mm512_add_ps(_mm512_sqrt_ps(v), eps)));
      _mm512_stream_ps(G->mom + o, m), _mm512_stream_ps(G->vel + o, v);
      _mm512_stream_ps(G->w + o, w);
    }
  _mm_sfence();
}

/* C[m0:m1, n0:n1] = A^T B for A [k, m], B [k, n] (row-major). */
static void tile(const gemm *g, int m0, int m1, int n0, int n1) {
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, m1 - m0, n1 - n0, g->k, 1.f, g->a + m0,
              g->m, g->b + n0, g->n, 0.f, g->c + (size_t)m0 * (size_t)g->n + n0, g->n);
}

static void whole(void *p) {
  const gemm *g = p;
  tile(g, 0, g->m, 0, g->n);
  if (g->adam) adam(g, 0, g->m, 0, g->n);
}

static void tiled(void *p) {
  const gemm *g = p;
  for (int m0 = 0; m0 < g->m; m0 += g->mt)
    for (int n0 = 0; n0 < g->n; n0 += g->nt) {
      int m1 = m0 + g->mt < g->m ? m0 + g->mt : g->m, n1 = n0 + g->nt < g->n ? n0 + g->nt : g->n;
      tile(g, m0, m1, n0, n1);
      if (g->adam) adam(g, m0, m1, n0, n1);
    }
}

static float *filled(size_t n, unsigned salt) {
  float *p = aligned_alloc(64, n * sizeof(float));
  for (size_t i = 0; i < n; i++) p[i] = (float)(((i + salt) * 2654435761u) % 1000) / 1000.f;
  return p;
}

int main(int argc, char **argv) {
  (void)argc;
  kdc_rt_blas_select_core(argv);
  openblas_set_num_threads(1);
  static const int ms[] = {784, 4096};
  static const int shapes[][2] = {{0, 256}, {0, 512}, {0, 1024}, {64, 0}, {128, 0}, {256, 0},
                                  {512, 0}, {512, 512}, {256, 1024}};
  const int n = 4096, k = 256, reps = 7;
  printf("{\n  \"bench\": \"gemm_panels\", \"threads\": 1, \"blas_core\": \"%s\", \"k\": %d, "
         "\"n\": %d,\n  \"tiles\": [\n", kdc_rt_blas_core(), k, n);
  int first = 1;
  for (size_t i = 0; i < sizeof ms / sizeof *ms; i++) {
    int m = ms[i];
    float *a = filled((size_t)k * (size_t)m, 1), *b = filled((size_t)k * (size_t)n, 2);
    float *c = filled((size_t)m * (size_t)n, 3), *mom = filled((size_t)m * (size_t)n, 4);
    float *vel = filled((size_t)m * (size_t)n, 5), *w = filled((size_t)m * (size_t)n, 6);
    for (size_t j = 0; j < sizeof shapes / sizeof *shapes; j++) {
      int mt = shapes[j][0] ? shapes[j][0] : m, nt = shapes[j][1] ? shapes[j][1] : n;
      if (mt > m) continue;
      for (int ad = 0; ad < (__builtin_cpu_supports("avx512f") ? 2 : 1); ad++) {
        gemm g = {m, n, k, mt, nt, ad, a, b, c, mom, vel, w};
        double *tw = malloc(sizeof(double) * reps), *tt = malloc(sizeof(double) * reps);
        whole(&g), tiled(&g);
        for (int r = 0; r < reps; r++) {
          double t0 = bench_now();
          whole(&g);
          double t1 = bench_now();
          tiled(&g);
          tw[r] = t1 - t0, tt[r] = bench_now() - t1;
        }
        qsort(tw, reps, sizeof(double), bench_cmp);
        qsort(tt, reps, sizeof(double), bench_cmp);
        double gf = 2.0 * m * n * k * 1e-9;
        printf("%s    {\"m\": %d, \"tile_m\": %d, \"tile_n\": %d, \"adam\": %s, "
               "\"whole_ms\": %.3f, \"tiled_ms\": %.3f, \"whole_gflops\": %.1f, "
               "\"tiled_over_whole\": %.3f}",
               first ? "" : ",\n", m, mt, nt, ad ? "true" : "false", 1e3 * tw[reps / 2],
               1e3 * tt[reps / 2],
               gf / tw[reps / 2], tt[reps / 2] / tw[reps / 2]);
        first = 0;
        fflush(stdout);
        free(tw), free(tt);
      }
    }
    free(a), free(b), free(c), free(mom), free(vel), free(w);
  }
  printf("\n  ]\n}\n");
  return 0;
}
