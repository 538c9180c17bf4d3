/*
 * ir/math.c: kdc's own f32 exp, expm1, tanh and logistic.
 *
 * Why not libm: a call to glibc's expf/tanhf per element cannot be
 * vectorised, and in a recurrent layer's gates or a softmax it was most of
 * the time (an LSTM of 128 units: 55% of the forward in libm's tanhf and
 * expm1f, docs/codegen.md).  These functions are written with the basic
 * IEEE operations only (+ - * /, fused multiply-add, comparisons,
 * roundeven, bit casts), in a fixed order, so codegen/math_ir.c emits exactly the same sequence as
 * LLVM IR, the loop vectoriser turns it into SIMD code, and every backend
 * gives the reference interpreter's bits.  (XLA:CPU likewise uses its own
 * polynomial exp and rational tanh instead of libm.)
 *
 * Accuracy against the exact function over every float (bench/bench_math
 * --ulp; tests/ir/test_ir_math.c checks a dense sweep): exp 1, expm1 2,
 * tanh and logistic 3 ulp at most.  Results below FLT_MIN are 0 (kdc
 * flushes subnormals, docs/runtime.md); NaN in gives NaN out; overflow
 * gives inf.
 *
 * Multiply-adds are fused: fmaf (C99: one rounding; an instruction where
 * the CPU has FMA, else a correctly rounded libm routine), llvm.fma in the
 * kernels, so both give the same bits on every CPU.  Nothing else is
 * contracted (the pragma below), so the compiler cannot fuse differently.
 *
 * Method (Cody and Waite's argument reduction, a minimax polynomial):
 *   exp(x) = 2^n * e^r, n = roundeven(x / ln 2), r = x - n ln 2 by two fused
 *   multiply-adds with ln 2 = LN2_HI + LN2_LO (the first is exact: |r| <
 *   1/2 needs no more bits than ulp(LN2_HI)), so |r| <= ln2/2 and
 *   e^r = 1 + r (1 + r p(r)), p(r) = C2 + C3 r + C4 r^2 + C5 r^3 + C6 r^4
 *   by Estrin's scheme: (C2 + C3 r) + r^2 ((C4 + C5 r) + C6 r^2), the
 *   coefficients fitted for the least largest relative error of e^r (0.07
 *   of 2^-24; the last two multiply-adds keep exp within 0.92 ulp, where
 *   (r + r^2 p) + 1 reached 1.02); 2^n is added to
 *   e^r's exponent bits (x in [EXP_LO, EXP_HI] keeps the result normal and
 *   finite: n = -126 only with r > 0, n = 128 only with r < 0).
 *   expm1(x) = 2^n (expm1(r) + 1) - 1 = fma(2^n, expm1(r), 2^n - 1), exact
 *   in 2^n - 1 up to n = 24, with expm1(r) = r + r^2 p(r), which keeps the
 *   relative accuracy near 0.
 *   tanh(|x|) = expm1(2|x|) / (expm1(2|x|) + 2) (no cancellation near 0),
 *   with tanh's sign; 1 for |x| > 9.1 (where tanh rounds to 1).
 *   logistic(x) = 1 / (1 + exp(-x)).
 */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("fp-contract=off")
#elif defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "ir/ir.h"

static float from_bits(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

static uint32_t to_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

/* p(r) = C2 + C3 r + ... + C6 r^4 for |r| <= ln2/2 by Estrin's scheme
 * (three dependent multiply-adds; a kernel that stays scalar waits for
 * them), so that e^r - 1 = r + r^2 p(r). */
static float poly(float r, float r2) {
  float a = fmaf(KDC_MATH_C3, r, KDC_MATH_C2);
  float b = fmaf(KDC_MATH_C5, r, KDC_MATH_C4);
  return fmaf(fmaf(KDC_MATH_C6, r2, b), r2, a);
}

/* n and r of the reduction; x within the finite range. */
static int32_t reduce(float x, float *r) {
  float n = rintf(x * KDC_MATH_LOG2E);
  *r = fmaf(n, -KDC_MATH_LN2_LO, fmaf(n, -KDC_MATH_LN2_HI, x));
  return (int32_t)n;
}

float kdc_math_expf(float x) {
  if (x != x) return x;
  if (x > KDC_MATH_EXP_HI) return INFINITY;
  if (x < KDC_MATH_EXP_LO) return 0.0f;
  float r;
  int32_t n = reduce(x, &r);
  float e = fmaf(fmaf(r, poly(r, r * r), 1.0f), r, 1.0f); /* 1 + r (1 + r p) */
  return from_bits(to_bits(e) + ((uint32_t)n << 23)); /* e * 2^n, n in [-126, 128] */
}

/* expm1 for x in [EXPM1_LO, EXPM1_BIG]: n in [-25, 58]. */
static float expm1_mid(float x) {
  float r;
  int32_t n = reduce(x, &r);
  float s = from_bits((uint32_t)(n + 127) << 23);
  float r2 = r * r;
  return fmaf(s, fmaf(r2, poly(r, r2), r), s - 1.0f);
}

float kdc_math_expm1f(float x) {
  if (x != x || x == 0) return x; /* expm1(-0) = -0 (r would be +0) */
  if (x > KDC_MATH_EXPM1_BIG) return kdc_math_expf(x); /* e^x - 1 rounds to e^x */
  if (x < KDC_MATH_EXPM1_LO) return -1.0f;
  return expm1_mid(x);
}

float kdc_math_tanhf(float x) {
  if (x != x) return x;
  float a = fabsf(x);
  float t;
  if (a > KDC_MATH_TANH_ONE) {
    t = 1.0f;
  } else {
    float e = expm1_mid(a + a); /* +0 at 0 */
    t = e / (e + 2.0f);
  }
  return copysignf(t, x);
}

float kdc_math_logisticf(float x) { return 1.0f / (1.0f + kdc_math_expf(-x)); }
