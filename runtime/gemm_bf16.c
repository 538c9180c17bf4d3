/*
 * runtime/gemm_bf16.c: the GEMMs of bf16 dots on CPUs with AMX-BF16, or
 * AVX-512 BF16 where asked for (docs/codegen.md, "bf16 and f16").
 *
 * A CPU plan keeps a mixed-precision layer's dot as an f32 GEMM step that
 * rounds its f32 operands to bf16 (passes/widen_dots.c, the dot's
 * bf16_operands, the step's bf16_inputs flag): the conversions to bf16
 * before it are folded into it, and its f32 partial sums stay what the
 * collectives expect.  Where the processor has AMX-BF16 tiles and the
 * kernel grants them to the process (common/cpu.c), rt_sgemm runs such a
 * step here: the operands are rounded as they are packed as bf16 pairs
 * (to nearest even, vcvtne2ps2bf16) and multiplied 16 x 16 x 32 at a time
 * by tdpbf16ps, accumulating in f32.  Elsewhere, or with KDC_CPU_BF16=off,
 * the operands are rounded into copies and multiplied by cblas_sgemm: the
 * same products, summed in another order.
 *
 * Why AMX and not AVX-512 BF16's vdpbf16ps: on this project's CPUs (Xeon
 * with AMX; docs/codegen.md has the figures) vdpbf16ps peaks at 106 GFLOP/s
 * on one core against 222 for f32 FMAs, so a vdpbf16ps GEMM loses to
 * OpenBLAS' sgemm; the tiles reach 500-800.  The vdpbf16ps microkernel
 * (vector_product, on the same packed panels) runs only where asked for
 * (KDC_CPU_BF16=avx512, common/cpu.c): for CPUs without AMX where it may
 * pay, and to test it.
 *
 * Blocking: C in NC-column slices; K in KC-element blocks whose B block is
 * packed once as TN-column panels of k pairs (the tiles' VNNI layout: a row
 * per pair, each element (k even, k odd)); M in MC-row blocks whose A block
 * is packed as TM-row panels of TKP-pair chunks; a TM x TN (32 x 32) block
 * of C in four accumulator tiles per panel pair.  Edges are zero-padded in
 * the panels and written with masked stores.  A transposed operand (op(A)
 * = A^T: rows of A are k; op(B) = B^T: rows of B are columns) is packed
 * sixteen rows or columns at a time, converted to pairs in vectors and
 * transposed 16 x 16 in registers (transpose16).  One call is single-threaded
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

/* Sixteen f32 pairs (lo[l], hi[l]) rounded to bf16, lane l one u32 pair. */
TARGET static inline __m512i pairs16(__m512 lo, __m512 hi) {
  __m512i l = _mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(lo));
  __m512i u = _mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(hi));
  return _mm512_or_si512(l, _mm512_slli_epi32(u, 16));
}

/* v[a][b] becomes v[b][a] (16 x 16 u32): at each block size s, an element
 * whose row and lane differ in bit s moves to row ^ s, lane ^ s. */
TARGET static inline void transpose16(__m512i v[16]) {
  for (int s = 8; s >= 1; s /= 2) {
    uint32_t lo_idx[16], hi_idx[16];
    for (int l = 0; l < 16; l++) {
      lo_idx[l] = (uint32_t)((l & s) ? 16 + l - s : l); /* row i: its own low lanes, row j's */
      hi_idx[l] = (uint32_t)((l & s) ? 16 + l : l + s); /* row j: row i's high lanes, its own */
    }
    __m512i il = _mm512_loadu_si512(lo_idx), ih = _mm512_loadu_si512(hi_idx);
    for (int i = 0; i < 16; i++)
      if (!(i & s)) {
        __m512i a = v[i], b = v[i + s];
        v[i] = _mm512_permutex2var_epi32(a, il, b);
        v[i + s] = _mm512_permutex2var_epi32(a, ih, b);
      }
  }
}

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
        } else if (r % T == 0) { /* op(A)(i, k) = A[k][i]: rows r..r+15 at once */
          int64_t left = mc - i;
          __mmask16 mi = left >= 16 ? 0xffff : (__mmask16)((1u << left) - 1);
          __m512i v[T];
          for (int64_t p = 0; p < TKP; p++) { /* lane: row i + lane, the pair p */
            const float *a = A + (k0 + 2 * p) * lda + i0 + i;
            __m512 lo = 2 * p < kn ? _mm512_maskz_loadu_ps(mi, a) : _mm512_setzero_ps();
            __m512 hi = 2 * p + 1 < kn ? _mm512_maskz_loadu_ps(mi, a + lda) : _mm512_setzero_ps();
            v[p] = pairs16(lo, hi);
          }
          transpose16(v); /* v[lane]: row i + lane, the pairs */
          for (int t = 0; t < T; t++) _mm512_storeu_si512(row + t * TKP, v[t]);
          r += T - 1; /* rows past mc were loaded as zeros */
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
          _mm512_storeu_si512(dst + c0, pairs16(lo, hi));
        }
      } else if (p % TKP == 0) { /* op(B)(k, j) = B[j][k]: TKP pairs of 16 columns at once */
        int64_t kn = kc - 2 * p; /* k left from k */
        __mmask16 m0 = kn >= 16 ? 0xffff : (__mmask16)((1u << kn) - 1);
        __mmask16 m1 = kn >= 32 ? 0xffff : kn <= 16 ? 0 : (__mmask16)((1u << (kn - 16)) - 1);
        for (int h = 0; h < TN / T; h++) {
          __m512i v[T];
          for (int c = 0; c < T; c++) { /* lane: the pair p + lane of column h T + c */
            const float *b = B + (jb + h * T + c) * ldb + k;
            v[c] = h * T + c < cols ? (__m512i)_mm512_cvtne2ps_pbh(_mm512_maskz_loadu_ps(m1, b + 16),
                                                                   _mm512_maskz_loadu_ps(m0, b))
                                    : _mm512_setzero_si512();
          }
          transpose16(v); /* v[lane]: the pair p + lane of columns h T .. h T + 15 */
          for (int t = 0; t < T; t++) _mm512_storeu_si512(dst + t * TN + h * T, v[t]);
        }
        p += TKP - 1; /* pairs past kc were loaded as zeros */
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

/* The same block of C as tile_product, by AVX-512 BF16's vdpbf16ps: eight
 * rows x TN columns (sixteen accumulators) at a time, each packed A pair
 * broadcast against the B panel's two vectors of pairs. */
TARGET static void vector_product(int64_t chunks, const uint32_t *Ap, const uint32_t *Bp, float *C,
                                  int64_t ldc, int64_t rows, int64_t cols, bool add) {
  enum { R = 8 };
  __mmask16 m0 = cols >= 16 ? 0xffff : (__mmask16)((1u << cols) - 1);
  __mmask16 m1 = cols >= 32 ? 0xffff : cols <= 16 ? 0 : (__mmask16)((1u << (cols - 16)) - 1);
  for (int64_t g = 0; g < rows; g += R) {
    __m512 acc[R][2];
    for (int r = 0; r < R; r++) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
    for (int64_t c = 0; c < chunks; c++) {
      const uint32_t *a = Ap + c * TM * TKP + g * TKP, *b = Bp + c * TKP * TN;
      for (int p = 0; p < TKP; p++) {
        __m512bh b0 = (__m512bh)_mm512_loadu_si512(b + p * TN);
        __m512bh b1 = (__m512bh)_mm512_loadu_si512(b + p * TN + T);
        for (int r = 0; r < R; r++) {
          __m512bh x = (__m512bh)_mm512_set1_epi32((int)a[r * TKP + p]);
          acc[r][0] = _mm512_dpbf16_ps(acc[r][0], x, b0);
          acc[r][1] = _mm512_dpbf16_ps(acc[r][1], x, b1);
        }
      }
    }
    for (int64_t r = 0; r < R && g + r < rows; r++) { /* rows past |rows| are padding */
      float *o = C + (g + r) * ldc;
      __m512 v0 = acc[r][0], v1 = acc[r][1];
      if (add) {
        v0 = _mm512_add_ps(v0, _mm512_maskz_loadu_ps(m0, o));
        v1 = _mm512_add_ps(v1, _mm512_maskz_loadu_ps(m1, o + 16));
      }
      _mm512_mask_storeu_ps(o, m0, v0);
      _mm512_mask_storeu_ps(o + 16, m1, v1);
    }
  }
}

TARGET static void gemm_blocked(bool amx, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                                const float *A, int64_t lda, const float *B, int64_t ldb, float *C,
                                int64_t ldc, uint32_t *Ap, uint32_t *Bp) {
  if (amx) {
    tile_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < 8; t++) cfg.rows[t] = T, cfg.colsb[t] = 64;
    _tile_loadconfig(&cfg);
  }
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
            (amx ? tile_product : vector_product)(
                chunks, Ap + ir / TM * chunks * TM * TKP, Bp + jr / TN * chunks * TKP * TN,
                C + (ic + ir) * ldc + jc + jr, ldc, mc - ir < TM ? mc - ir : TM,
                nc - jr < TN ? nc - jr : TN, pc > 0);
      }
    }
  }
  if (amx) _tile_release();
}

static void sgemm_rounded(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float *A,
                          int64_t lda, const float *B, int64_t ldb, float *C, int64_t ldc);

static void gemm_bf16(bool amx, bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float *A,
                      int64_t lda, const float *B, int64_t ldb, float *C, int64_t ldc) {
  int64_t kcap = k < KC ? k : KC, chunks = (kcap + 2 * TKP - 1) / (2 * TKP);
  int64_t ncap = n < NC ? n : NC, mcap = m < MC ? m : MC;
  size_t nb = (size_t)(chunks * TKP * ((ncap + TN - 1) / TN * TN));
  size_t na = (size_t)(chunks * TKP * ((mcap + TM - 1) / TM * TM));
  uint32_t *Bp = aligned_alloc(64, (nb * 4 + 63) / 64 * 64);
  uint32_t *Ap = aligned_alloc(64, (na * 4 + 63) / 64 * 64);
  if (Bp && Ap && k > 0) gemm_blocked(amx, ta, tb, m, n, k, A, lda, B, ldb, C, ldc, Ap, Bp);
  else sgemm_rounded(ta, tb, m, n, k, A, lda, B, ldb, C, ldc); /* k == 0, or no memory */
  free(Bp);
  free(Ap);
}
#endif

static void sgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float *A, int64_t lda,
                  const float *B, int64_t ldb, float *C, int64_t ldc) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
              (blasint)m, (blasint)n, (blasint)k, 1.0f, A, (blasint)lda, B, (blasint)ldb, 0.0f, C,
              (blasint)ldc);
}

static float bf16_round(float x) { return kdc_bf16_to_f32(kdc_f32_to_bf16(x)); }

/* |rows| x |cols| of |x| (leading dimension |ld|) rounded to bf16 (nearest
 * even, as the interpreter's kdc_float_round), packed; NULL without memory. */
static float *rounded_copy(const float *x, int64_t rows, int64_t cols, int64_t ld) {
  float *y = malloc((size_t)(rows * cols > 0 ? rows * cols : 1) * sizeof *y);
  if (!y) return NULL;
  for (int64_t r = 0; r < rows; r++)
    for (int64_t c = 0; c < cols; c++)
      y[r * cols + c] = bf16_round(x[r * ld + c]);
  return y;
}

/* The bf16 step without a bf16 kernel: the rounded operands in copies, then
 * cblas_sgemm; without memory for the copies, a plain loop (slow, same
 * products).  Each block of a split step rounds the whole operand it
 * shares with the other blocks (B of a row split): one extra pass over it
 * per thread, on CPUs that compute bf16 GEMMs in f32 anyway. */
static void sgemm_rounded(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float *A,
                          int64_t lda, const float *B, int64_t ldb, float *C, int64_t ldc) {
  float *a = rounded_copy(A, ta ? k : m, ta ? m : k, lda);
  float *b = rounded_copy(B, tb ? n : k, tb ? k : n, ldb);
  if (a && b) {
    sgemm(ta, tb, m, n, k, a, ta ? m : k, b, tb ? k : n, C, ldc);
  } else {
    for (int64_t i = 0; i < m; i++)
      for (int64_t j = 0; j < n; j++) {
        float acc = 0.0f;
        for (int64_t p = 0; p < k; p++)
          acc += bf16_round(ta ? A[p * lda + i] : A[i * lda + p]) *
                 bf16_round(tb ? B[j * ldb + p] : B[p * ldb + j]);
        C[i * ldc + j] = acc;
      }
  }
  free(a);
  free(b);
}

void rt_sgemm(bool bf16_inputs, bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float *A,
              int64_t lda, const float *B, int64_t ldb, float *C, int64_t ldc) {
  if (!bf16_inputs || m <= 0 || n <= 0) {
    sgemm(ta, tb, m, n, k, A, lda, B, ldb, C, ldc);
    return;
  }
#ifdef KDC_HAVE_BF16_KERNEL
  kdc_cpu_bf16_kind kind = kdc_cpu_bf16_kernel();
  if (kind != KDC_CPU_BF16_NONE) {
    gemm_bf16(kind == KDC_CPU_BF16_AMX, ta, tb, m, n, k, A, lda, B, ldb, C, ldc);
    return;
  }
#endif
  sgemm_rounded(ta, tb, m, n, k, A, lda, B, ldb, C, ldc);
}

