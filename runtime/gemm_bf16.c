/*
 * runtime/gemm_bf16.c: the GEMMs of bf16 dots on CPUs with AMX-BF16
 * (docs/codegen.md, "bf16 and f16").
 *
 * A CPU plan keeps a mixed-precision layer's dot as an f32 GEMM step whose
 * operands hold bf16 values exactly (passes/widen_dots.c, the step's
 * bf16_inputs flag): its f32 partial sums stay what the collectives and the
 * fallback expect.  Where the processor has AMX-BF16 tiles and the kernel
 * grants them to the process (common/cpu.c), rt_sgemm runs such a step
 * here: the operands are packed as bf16 pairs (round to nearest even with
 * vcvtne2ps2bf16: exact for the bf16 values the plan put there) and
 * multiplied 16 x 16 x 32 at a time by tdpbf16ps, accumulating in f32.
 * Elsewhere, or with KDC_CPU_BF16=off, it is cblas_sgemm on the same f32
 * operands: the same products, summed in another order.
 *
 * Why AMX and not AVX-512 BF16's vdpbf16ps: on this project's CPUs (Xeon
 * with AMX; docs/codegen.md has the figures) vdpbf16ps peaks at 106 GFLOP/s
 * on one core against 222 for f32 FMAs, so a vdpbf16ps GEMM (measured: 80
 * GFLOP/s) loses to OpenBLAS' sgemm (140-155); the tiles reach 620-770.
 *
 * Blocking: C in NC-column slices; K in KC-element blocks whose B block is
 * packed once as TN-column panels of k pairs (the tiles' VNNI layout: a row
 * per pair, each element (k even, k odd)); M in MC-row blocks whose A block
 * is packed as TM-row panels of TKP-pair chunks; a TM x TN (32 x 32) block
 * of C in four accumulator tiles per panel pair.  Edges are zero-padded in
 * the panels and written with masked stores.  One call is single-threaded
 * (exec.c splits a step over the pool); each call loads its tile
 * configuration and releases the tiles.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>

#include "common/io.h"
#include "runtime/gemm_bf16.h"

/* Round-to-nearest-even f32 -> bf16 bits (NaN stays a quiet NaN), as
 * vcvtneps2bf16 does. */
static inline uint32_t bf16_bits(float x) {
  uint32_t u;
  memcpy(&u, &x, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (u >> 16) | 0x40;
  return (u + 0x7fffu + ((u >> 16) & 1)) >> 16;
}

static inline uint32_t pair(float lo, float hi) { return bf16_bits(lo) | bf16_bits(hi) << 16; }

#if defined(__x86_64__) && defined(__GNUC__) && (__GNUC__ >= 11 || defined(__clang__))
#include <immintrin.h>
#define KDC_HAVE_BF16_KERNEL 1

#define TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,amx-tile,amx-bf16")))

/* Tiles: C 32 x 32 as four 16 x 16 f32 tiles (0-3); A rows 0-15 and 16-31
 * of 32 bf16 of k (4, 5); B k pairs 0-15 x columns 0-15 and 16-31, each
 * element a (k even, k odd) pair (6, 7). */
enum { T = 16, TM = 32, TN = 32, TKP = 16 /* k pairs per tile */, KC = 1024, MC = 128, NC = 512 };

typedef struct {
  uint8_t palette, start_row, reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
} tile_config;

/* Packed A block: for each TM-row panel and each chunk of TKP pairs, TM rows
 * of TKP u32 pairs (rows past mc and pairs past k are zero). */
TARGET static void pack_a(const float *A, int64_t lda, bool ta, int64_t i0, int64_t mc,
                          int64_t p0, int64_t kc, int64_t chunks, uint32_t *out) {
  for (int64_t q = 0; q * TM < mc; q++)
    for (int64_t c = 0; c < chunks; c++) {
      uint32_t *dst = out + (q * chunks + c) * TM * TKP;
      int64_t k0 = p0 + c * 2 * TKP, kn = kc - c * 2 * TKP; /* k of this chunk: [k0, k0+kn) */
      if (kn > 2 * TKP) kn = 2 * TKP;
      for (int64_t r = 0; r < TM; r++) {
        int64_t i = q * TM + r;
        uint32_t *row = dst + r * TKP;
        if (i >= mc || kn <= 0) {
          _mm512_storeu_si512(row, _mm512_setzero_si512());
          continue;
        }
        if (!ta) { /* 32 contiguous k of row i */
          const float *a = A + (i0 + i) * lda + k0;
          __mmask16 m0 = kn >= 16 ? 0xffff : (__mmask16)((1u << kn) - 1);
          __mmask16 m1 = kn >= 32 ? 0xffff : kn <= 16 ? 0 : (__mmask16)((1u << (kn - 16)) - 1);
          __m512 lo = _mm512_maskz_loadu_ps(m0, a), hi = _mm512_maskz_loadu_ps(m1, a + 16);
          _mm512_storeu_si512(row, (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
        } else { /* op(A)(i, k) = A[k][i] */
          for (int64_t p = 0; p < TKP; p++) {
            int64_t k = k0 + 2 * p;
            float lo = 2 * p < kn ? A[k * lda + i0 + i] : 0.0f;
            float hi = 2 * p + 1 < kn ? A[(k + 1) * lda + i0 + i] : 0.0f;
            row[p] = pair(lo, hi);
          }
        }
      }
    }
}

/* Packed B block: for each TN-column panel, chunks * TKP pairs of TN u32
 * (columns past nc and pairs past k are zero). */
TARGET static void pack_b(const float *B, int64_t ldb, bool tb, int64_t p0, int64_t kc,
                          int64_t j0, int64_t nc, int64_t chunks, uint32_t *out) {
  int64_t kp = chunks * TKP;
  for (int64_t q = 0; q * TN < nc; q++) {
    uint32_t *pan = out + q * kp * TN;
    int64_t cols = nc - q * TN < TN ? nc - q * TN : TN, jb = j0 + q * TN;
    for (int64_t p = 0; p < kp; p++) {
      uint32_t *dst = pan + p * TN;
      int64_t k = p0 + 2 * p;
      bool has_lo = 2 * p < kc, has_hi = 2 * p + 1 < kc;
      if (!has_lo) {
        _mm512_storeu_si512(dst, _mm512_setzero_si512());
        _mm512_storeu_si512(dst + 16, _mm512_setzero_si512());
        continue;
      }
      if (!tb) { /* rows k and k+1, columns contiguous */
        for (int h = 0; h < 2; h++) {
          int64_t c0 = 16 * h, n = cols - c0;
          __mmask16 m = n >= 16 ? 0xffff : n <= 0 ? 0 : (__mmask16)((1u << n) - 1);
          __m512 lo = _mm512_maskz_loadu_ps(m, B + k * ldb + jb + c0);
          __m512 hi = has_hi ? _mm512_maskz_loadu_ps(m, B + (k + 1) * ldb + jb + c0)
                             : _mm512_setzero_ps();
          __m512i l = _mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(lo));
          __m512i u = _mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(hi));
          _mm512_storeu_si512(dst + c0, _mm512_or_si512(l, _mm512_slli_epi32(u, 16)));
        }
      } else { /* op(B)(k, j) = B[j][k]: the pair is contiguous */
        for (int64_t c = 0; c < TN; c++) {
          const float *b = B + (jb + c) * ldb + k;
          dst[c] = c < cols ? pair(b[0], has_hi ? b[1] : 0.0f) : 0;
        }
      }
    }
  }
}

/* C[rows x cols] (+)= the TM x TN tile of A panel |Ap| x B panel |Bp| over
 * |chunks| chunks of TKP pairs. */
TARGET static void tile_product(int64_t chunks, const uint32_t *Ap, const uint32_t *Bp, float *C,
                                int64_t ldc, int64_t rows, int64_t cols, bool add) {
  float acc[TM * TN] __attribute__((aligned(64)));
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  for (int64_t c = 0; c < chunks; c++) {
    const uint32_t *a = Ap + c * TM * TKP, *b = Bp + c * TKP * TN;
    _tile_loadd(4, a, TKP * 4);
    _tile_loadd(5, a + T * TKP, TKP * 4);
    _tile_loadd(6, b, TN * 4);
    _tile_loadd(7, b + T, TN * 4);
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  _tile_stored(0, acc, TN * 4);
  _tile_stored(1, acc + T, TN * 4);
  _tile_stored(2, acc + T * TN, TN * 4);
  _tile_stored(3, acc + T * TN + T, TN * 4);
  __mmask16 m0 = cols >= 16 ? 0xffff : (__mmask16)((1u << cols) - 1);
  __mmask16 m1 = cols >= 32 ? 0xffff : cols <= 16 ? 0 : (__mmask16)((1u << (cols - 16)) - 1);
  for (int64_t r = 0; r < rows; r++) {
    float *c = C + r * ldc;
    __m512 v0 = _mm512_load_ps(acc + r * TN), v1 = _mm512_load_ps(acc + r * TN + 16);
    if (add) {
      v0 = _mm512_add_ps(v0, _mm512_maskz_loadu_ps(m0, c));
      v1 = _mm512_add_ps(v1, _mm512_maskz_loadu_ps(m1, c + 16));
    }
    _mm512_mask_storeu_ps(c, m0, v0);
    _mm512_mask_storeu_ps(c + 16, m1, v1);
  }
}

TARGET static void gemm_amx(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float *A,
                            int64_t lda, const float *B, int64_t ldb, float *C, int64_t ldc,
                            uint32_t *Ap, uint32_t *Bp) {
  tile_config cfg;
  memset(&cfg, 0, sizeof cfg);
  cfg.palette = 1;
  for (int t = 0; t < 8; t++) cfg.rows[t] = T, cfg.colsb[t] = 64;
  _tile_loadconfig(&cfg);
  for (int64_t jc = 0; jc < n; jc += NC) {
    int64_t nc = n - jc < NC ? n - jc : NC;
    for (int64_t pc = 0; pc < k; pc += KC) {
      int64_t kc = k - pc < KC ? k - pc : KC, chunks = (kc + 2 * TKP - 1) / (2 * TKP);
      pack_b(B, ldb, tb, pc, kc, jc, nc, chunks, Bp);
      for (int64_t ic = 0; ic < m; ic += MC) {
        int64_t mc = m - ic < MC ? m - ic : MC;
        pack_a(A, lda, ta, ic, mc, pc, kc, chunks, Ap);
        for (int64_t jr = 0; jr < nc; jr += TN)
          for (int64_t ir = 0; ir < mc; ir += TM)
            tile_product(chunks, Ap + ir / TM * chunks * TM * TKP, Bp + jr / TN * chunks * TKP * TN,
                         C + (ic + ir) * ldc + jc + jr, ldc, mc - ir < TM ? mc - ir : TM,
                         nc - jr < TN ? nc - jr : TN, pc > 0);
      }
    }
  }
  _tile_release();
}

static void gemm_bf16(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float *A,
                      int64_t lda, const float *B, int64_t ldb, float *C, int64_t ldc) {
  int64_t kcap = k < KC ? k : KC, chunks = (kcap + 2 * TKP - 1) / (2 * TKP);
  int64_t ncap = n < NC ? n : NC, mcap = m < MC ? m : MC;
  size_t nb = (size_t)(chunks * TKP * ((ncap + TN - 1) / TN * TN));
  size_t na = (size_t)(chunks * TKP * ((mcap + TM - 1) / TM * TM));
  uint32_t *Bp = aligned_alloc(64, (nb * 4 + 63) / 64 * 64);
  uint32_t *Ap = aligned_alloc(64, (na * 4 + 63) / 64 * 64);
  if (Bp && Ap && k > 0) {
    gemm_amx(ta, tb, m, n, k, A, lda, B, ldb, C, ldc, Ap, Bp);
  } else { /* k == 0, or no memory for the panels: the f32 GEMM needs none */
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                (blasint)m, (blasint)n, (blasint)k, 1.0f, A, (blasint)lda, B, (blasint)ldb, 0.0f,
                C, (blasint)ldc);
  }
  free(Bp);
  free(Ap);
}
#endif

void rt_sgemm(bool bf16_inputs, bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float *A,
              int64_t lda, const float *B, int64_t ldb, float *C, int64_t ldc) {
#ifdef KDC_HAVE_BF16_KERNEL
  if (bf16_inputs && m > 0 && n > 0 && kdc_cpu_bf16()) {
    gemm_bf16(ta, tb, m, n, k, A, lda, B, ldb, C, ldc);
    return;
  }
#endif
  (void)bf16_inputs;
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
              (blasint)m, (blasint)n, (blasint)k, 1.0f, A, (blasint)lda, B, (blasint)ldb, 0.0f, C,
              (blasint)ldc);
}
