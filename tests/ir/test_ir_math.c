/*
 * ir/math.c's exp, expm1, tanh and logistic against the exact functions
 * (libm's double precision, correctly rounded to well below an f32 ulp):
 * the largest error in f32 ulps over a sweep of every 193rd float, and the
 * special values.  Bounds: exp 1, expm1 2, tanh 3, logistic 3 ulp (what
 * the file comment of ir/math.c promises; measured over every float,
 * bench_math --ulp: 0.914, 1.542, 2.566, 2.481).  Whether codegen's
 * IR gives these same bits is test_codegen_math's and test_codegen_ops'
 * (bitwise against the interpreter).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <math.h>

#include <cmocka.h>

#include "ir/ir.h"

/* |got| - |want| in ulps of |want| rounded to f32; results under FLT_MIN
 * must be 0 (kdc flushes subnormals), overflow must be inf. */
static double ulps(float got, double want) {
  if (fabs(want) > 0x1.fffffep127) return isinf(got) && (got > 0) == (want > 0) ? 0 : 1e9;
  if (fabs(want) < 0x1p-126) return fabsf(got) <= 0x1p-126f ? 0 : 1e9;
  float w = fabsf((float)want);
  return fabs((double)got - want) / (double)(nextafterf(w, INFINITY) - w);
}

static void sweep(float (*fn)(float), double (*ref)(double), double lo, double hi, double bound) {
  double worst = 0;
  float at = 0;
  for (uint64_t b = 0; b < 0x100000000ull; b += 193) {
    uint32_t u = (uint32_t)b;
    float x;
    memcpy(&x, &u, sizeof x);
    if (isnan(x) || x < lo || x > hi) continue;
    double e = ulps(fn(x), ref((double)x));
    if (e > worst) worst = e, at = x;
  }
  if (worst > bound) fail_msg("%.3f ulp at x = %.9g (bound %.1f)", worst, (double)at, bound);
}

static double logistic(double x) { return 1 / (1 + exp(-x)); }

static void test_accuracy(void **state) {
  (void)state;
  sweep(kdc_math_expf, exp, -200, 200, 1.0);
  sweep(kdc_math_expm1f, expm1, -200, 200, 2.0);
  sweep(kdc_math_tanhf, tanh, -INFINITY, INFINITY, 3.0);
  sweep(kdc_math_logisticf, logistic, -87, INFINITY, 3.0);
}

static void test_special_values(void **state) {
  (void)state;
  assert_true(isnan(kdc_math_expf(NAN)) && isnan(kdc_math_expm1f(NAN)));
  assert_true(isnan(kdc_math_tanhf(NAN)) && isnan(kdc_math_logisticf(NAN)));
  assert_true(kdc_math_expf(INFINITY) == INFINITY && kdc_math_expf(-INFINITY) == 0);
  assert_true(kdc_math_expf(88.8f) == INFINITY && kdc_math_expf(89) == INFINITY);
  assert_true(kdc_math_expf(88.72f) < INFINITY && kdc_math_expf(-87.4f) == 0);
  assert_true(kdc_math_expf(0) == 1 && kdc_math_expf(-0.0f) == 1);
  assert_true(kdc_math_expm1f(-INFINITY) == -1 && kdc_math_expm1f(INFINITY) == INFINITY);
  assert_true(kdc_math_expm1f(-0.0f) == 0 && signbit(kdc_math_expm1f(-0.0f)));
  assert_true(kdc_math_expm1f(1e-30f) == 1e-30f);
  assert_true(kdc_math_tanhf(INFINITY) == 1 && kdc_math_tanhf(-INFINITY) == -1);
  assert_true(kdc_math_tanhf(9.2f) == 1 && kdc_math_tanhf(-20) == -1);
  assert_true(kdc_math_tanhf(-0.0f) == 0 && signbit(kdc_math_tanhf(-0.0f)));
  assert_true(kdc_math_tanhf(1e-30f) == 1e-30f);
  assert_true(kdc_math_logisticf(0) == 0.5f && kdc_math_logisticf(-INFINITY) == 0);
  assert_true(kdc_math_logisticf(INFINITY) == 1);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_accuracy),
      cmocka_unit_test(test_special_values),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
