/*
 * ir/math.c: kdc's own f32 exp, expm1, tanh and logistic.
 *
 * Why not libm: a call to glibc's expf/tanhf per element cannot be
 * vectorised, and in a recurrent layer's gates or a softmax it was most of
 * the time (an LSTM of 128 units: 55% of the forward in libm's tanhf and
 * expm1f, docs/codegen.md).  These functions are written with the basic
 * IEEE operations only (+ - * /, comparisons, roundeven, bit casts), in a
 * fixed order, so codegen/math_ir.c emits exactly the same sequence as
 * LLVM IR, the loop vectoriser turns it into SIMD code, and every backend
 * gives the reference interpreter's bits.  (XLA:CPU likewise uses its own
 * polynomial exp and rational tanh instead of libm.)
 *
 * Accuracy against the exact function (tests/ir/test_ir_math.c measures
 * it over every float in range steps): exp, expm1 and logistic within 2
 * ulp; tanh within 3 ulp.  Results below FLT_MIN are 0 (kdc flushes
 * subnormals, docs/runtime.md); NaN in gives NaN out; overflow gives inf.
 *
 * Method (Cody and Waite's argument reduction, Taylor polynomials):
 *   exp(x) = 2^n * e^r, n = roundeven(x / ln 2), r = x - n ln 2 with ln 2 split
 *   in a part exact in few bits (C1 * n is exact for |n| <= 256) and the rest,
 *   so |r| <= ln2/2 and e^r = 1 + r + r^2 (1/2 + r/6 + ... + r^6/40320),
 *   whose truncation error is below 0.1 ulp; 2^n is built from its bits in
 *   two halves (2^n1 * 2^n2) so n = 128 and n = -126 never overflow the
 *   exponent field.
 *   expm1(x) = 2^n (expm1(r) + 1) - 1 = 2^n expm1(r) + (2^n - 1), exact in
 *   its last addition up to n = 24, with expm1(r) a polynomial that keeps
 *   the relative accuracy near 0.
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

/* 2^n for n in [-126, 127] from its exponent bits. */
static float pow2i(int32_t n) { return from_bits((uint32_t)(n + 127) << 23); }

/* e^r - 1 for |r| <= ln2/2: r + r^2 p(r), p(r) = 1/2 + r/6 + ... + r^6/40320
 * evaluated by Estrin's scheme (pairs, then r^2 and r^4 weights): four
 * dependent multiply-adds instead of Horner's seven, which is what a
 * kernel that stays scalar waits for. */
static float expm1_poly(float r) {
  float r2 = r * r, r4 = r2 * r2;
  float a = KDC_MATH_C3 * r + KDC_MATH_C2;
  float b = KDC_MATH_C5 * r + KDC_MATH_C4;
  float c = KDC_MATH_C7 * r + KDC_MATH_C6;
  float p = (b * r2 + a) + (KDC_MATH_C8 * r2 + c) * r4;
  return r2 * p + r;
}

/* n and r of the reduction; x within the finite range. */
static float reduce(float x, float *r) {
  float n = rintf(x * KDC_MATH_LOG2E);
  *r = (x - n * KDC_MATH_LN2_HI) - n * KDC_MATH_LN2_LO;
  return n;
}

float kdc_math_expf(float x) {
  if (x != x) return x;
  if (x > KDC_MATH_EXP_HI) return INFINITY;
  if (x < KDC_MATH_EXP_LO) return 0.0f;
  float r, n = reduce(x, &r);
  int32_t ni = (int32_t)n, n1 = ni / 2; /* truncation: n1, ni - n1 in [-63, 64] */
  float e = expm1_poly(r) + 1.0f;
  return (e * pow2i(n1)) * pow2i(ni - n1);
}

float kdc_math_expm1f(float x) {
  if (x != x || x == 0) return x; /* expm1(-0) = -0 (r would be +0) */
  if (x > KDC_MATH_EXPM1_BIG) return kdc_math_expf(x); /* e^x - 1 rounds to e^x */
  if (x < KDC_MATH_EXPM1_LO) return -1.0f;
  float r, n = reduce(x, &r);
  int32_t ni = (int32_t)n;
  float s = pow2i(ni); /* ni in [-25, 64] here */
  return s * expm1_poly(r) + (s - 1.0f);
}

float kdc_math_tanhf(float x) {
  if (x != x) return x;
  float a = fabsf(x);
  float t;
  if (a > KDC_MATH_TANH_ONE) {
    t = 1.0f;
  } else {
    float e = kdc_math_expm1f(a + a);
    t = e / (e + 2.0f);
  }
  return copysignf(t, x);
}

float kdc_math_logisticf(float x) { return 1.0f / (1.0f + kdc_math_expf(-x)); }
