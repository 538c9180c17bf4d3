/*
 * runtime/gemm_stack.c: GEMMs run once over the stacked rows of every
 * local device (exec.c runs them; docs/runtime.md, "Threads").
 *
 * With 8 virtual devices and 1/8 of the batch each, a GEMM whose B every
 * device reads from one buffer (a replicated weight, a shared replica, a
 * shared collective result) would pack and stream the whole of B once per
 * device, each time for 1/8 of the rows.  Stacked, the devices' A are
 * copied into one (devices x m) x k matrix and one GEMM computes every
 * device's rows.
 *
 * The plan's numbers must not change: 8 processes (each its own m-row
 * GEMM) and 8 virtual devices compute the same bytes.  A row of C does not
 * depend on how many other rows the GEMM has only while OpenBLAS takes the
 * same path for both calls: its small-matrix kernels (M*N*K <= 1e6 on
 * SkylakeX) sum all of K in one pass, its blocked path in slices of K, so
 * m=2 per device and m=16 stacked differ in the last bit.  Stacking is
 * therefore decided at load per step on made-up values of the step's
 * shape, in the stacking buffers themselves: the whole stack as ONE call
 * when that is bitwise the devices' GEMMs, else the stack in chunks of
 * |chunk| rows per call (64, 32, ... 2 rows, each more than the device's
 * m), the first chunk that is bitwise, else not stacked.  With chunks each
 * call stays in the same small-matrix kernel as a device's own call, and
 * a chunk of 4 rows fills its register tile: m=2 per device runs at half
 * the per-row rate of 4-row chunks (measured in docs/runtime.md).
 */
#include <stdlib.h>
#include <string.h>

#include <cblas.h>

#include "runtime/gemm_bf16.h"
#include "runtime/runtime.h"

/* Candidates: op(A) = A with its rows contiguous, C likewise, B at least
 * STACK_MIN_B bytes (larger than a core's L2: each device would stream it)
 * and at least STACK_MIN_FLOPS per device.  Whether every device reads B
 * from one buffer is checked per run (exec.c). */
enum { STACK_MIN_B = 512 << 10, STACK_MIN_FLOPS = 1 << 19 };

bool rt_stack_candidate(const kdc_prog_step *st) {
  const kdc_prog_gemm_step *g = &st->gemm;
  return st->kind == KDC_STEP_GEMM && g->batch == 1 && !g->trans_a && g->lda == g->k &&
         g->ldc == g->n && (uint64_t)g->k * (uint64_t)g->n * 4 >= STACK_MIN_B &&
         2 * g->m * g->n * g->k >= STACK_MIN_FLOPS;
}

uint64_t rt_stack_bytes(const kdc_prog_gemm_step *g, int64_t nd) {
  uint64_t a = (uint64_t)(nd * g->m * g->k) * sizeof(float);
  uint64_t c = (uint64_t)(nd * g->m * g->n) * sizeof(float);
  return (a + 63) / 64 * 64 + (c + 63) / 64 * 64;
}

static void call(const kdc_prog_gemm_step *g, int64_t rows, int64_t n0, int64_t n1, const float *A,
                 const float *B, float *C) {
  rt_sgemm(g->bf16_inputs, false, g->trans_b, rows, n1 - n0, g->k, A, g->k,
           B + (g->trans_b ? n0 * g->ldb : n0), g->ldb, C + n0, g->n);
}

void rt_stack_gemm_block(const kdc_prog_gemm_step *g, int64_t chunk, int64_t nl, int threads,
                         int64_t t, const float *A, const float *B, float *C) {
  int64_t rows = g->m * nl;
  if (chunk < rows) { /* chunks t, t + threads, ...: every call the whole of N */
    for (int64_t r = t * chunk; r < rows; r += threads * chunk) {
      int64_t nr = rows - r < chunk ? rows - r : chunk;
      call(g, nr, 0, g->n, A + r * g->k, B, C + r * g->n);
    }
    return;
  }
  int64_t units = (g->n + RT_GEMM_ALIGN - 1) / RT_GEMM_ALIGN; /* one column block per thread */
  int64_t n0 = units * t / threads * RT_GEMM_ALIGN, n1 = units * (t + 1) / threads * RT_GEMM_ALIGN;
  if (n1 > g->n) n1 = g->n;
  if (n0 < n1) call(g, rows, n0, n1, A, B, C);
}

/* The rows per call at which the stacked GEMM |g| gives, on this OpenBLAS
 * and its kernels, bitwise the rows of the devices' own GEMMs (file
 * comment), or 0.  |sa|, |sc|: the stacking buffers. */
static int64_t exact_chunk(const kdc_rt_plan *p, const kdc_prog_gemm_step *g, float *sa,
                           float *sc) {
  int64_t nl = p->nd, mk = g->m * g->k, mn = g->m * g->n, rows = nl * g->m, chunk = 0;
  size_t nb = (size_t)((g->trans_b ? g->n : g->k) * g->ldb); /* B as the step reads it */
  float *B = malloc(nb * sizeof *B + 4), *ref = malloc((size_t)(nl * mn) * sizeof *ref + 4);
  if (!B || !ref) goto out;
  for (size_t i = 0; i < nb; i++) B[i] = (float)((i * 2654435761u) % 1999) / 999.f - 1;
  for (int64_t i = 0; i < nl * mk; i++) sa[i] = (float)(((uint64_t)i * 40503u) % 2003) / 1001.f - 1;
  int threads = openblas_get_num_threads();
  openblas_set_num_threads(1); /* as the executor runs both */
  for (int64_t d = 0; d < nl; d++) call(g, g->m, 0, g->n, sa + d * mk, B, ref + d * mn);
  const int64_t tries[] = {rows, 64, 32, 16, 8, 4, 2}; /* the whole stack, then chunks */
  for (size_t i = 0; i < sizeof tries / sizeof *tries && !chunk; i++) {
    int64_t c = tries[i];
    if (i && (c >= rows || c <= g->m)) continue;
    for (int64_t t = 0; t < p->n_threads; t++)
      rt_stack_gemm_block(g, c, nl, p->n_threads, t, sa, B, sc);
    if (!memcmp(ref, sc, (size_t)(nl * mn) * sizeof *ref)) chunk = c;
  }
  openblas_set_num_threads(threads);
out:
  free(B), free(ref);
  return chunk;
}

void rt_stack_create(const kdc_rt_plan *p, const kdc_prog_func *f, rt_func *rf) {
  if (p->nd < 2 || p->describe_only || f->is_body || p->cuda) return; /* it runs GEMMs */
  for (uint32_t s = 0; s < f->n_steps; s++) {
    if (!rt_stack_candidate(&f->steps[s])) continue;
    const kdc_prog_gemm_step *g = &f->steps[s].gemm;
    if (!rf->stack) rf->stack = kdc_xcalloc(f->n_steps, sizeof *rf->stack);
    rt_gemm_stack *st = &rf->stack[s];
    size_t a = (size_t)(p->nd * g->m * g->k) * sizeof(float);
    size_t c = (size_t)(p->nd * g->m * g->n) * sizeof(float);
    st->a = aligned_alloc(64, (a + 63) / 64 * 64);
    st->c = aligned_alloc(64, (c + 63) / 64 * 64);
    /* no room, or not bitwise the devices' GEMMs: the GEMM runs per device */
    if (!st->a || !st->c || !(st->chunk = exact_chunk(p, g, st->a, st->c))) {
      free(st->a), free(st->c);
      *st = (rt_gemm_stack){0};
    }
  }
}

void rt_stack_destroy(rt_func *rf, uint32_t n_steps) {
  for (uint32_t s = 0; rf->stack && s < n_steps; s++) free(rf->stack[s].a), free(rf->stack[s].c);
  free(rf->stack);
  rf->stack = NULL;
}
