/*
 * The reference interpreter: every op of ops.def on small tensors against
 * hand-computed values (exact unless a tolerance is stated), the
 * documented corner cases (NaN, rounding, integer division, conversion),
 * and data-movement ops and dot_general against naive loops written here.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>

#include <cmocka.h>

#include "ir/ir.h"

typedef struct results {
  kdc_tensor t[8];
  size_t n;
} results;

/* Parses |body| as the body of one function without parameters and runs it. */
static results run(const char *body) {
  char text[4096];
  snprintf(text, sizeof text, "module @m {\n  func @f {\n%s  }\n}\n", body);
  kdc_module *m = NULL;
  kdc_status st = kdc_ir_parse_module(text, "i.kir", &m);
  if (st) fail_msg("parse: %s", kdc_status_message(st));
  if ((st = kdc_ir_verify_module(m))) fail_msg("verify: %s", kdc_status_message(st));
  results r = {.n = m->funcs[0]->n_results};
  assert_true(r.n <= 8);
  if ((st = kdc_ir_interpret(m->funcs[0], NULL, 0, r.t)))
    fail_msg("interpret: %s", kdc_status_message(st));
  kdc_ir_module_destroy(m);
  return r;
}

static void release(results *r) {
  for (size_t i = 0; i < r->n; i++) free(r->t[i].data);
}

/* |tol| 0: bit-exact up to NaN payloads (so -0 != +0). */
static void check_f32(const kdc_tensor *t, const float *want, int64_t n, float tol) {
  assert_int_equal(t->type.dtype, KDC_DTYPE_F32);
  assert_int_equal(kdc_type_numel(&t->type), n);
  const float *got = t->data;
  for (int64_t i = 0; i < n; i++) {
    bool ok = isnan(want[i]) ? isnan(got[i])
              : tol == 0 ? got[i] == want[i] && signbit(got[i]) == signbit(want[i])
                         : fabsf(got[i] - want[i]) <= tol * fmaxf(1.0f, fabsf(want[i]));
    if (!ok)
      fail_msg("element %lld: got %.9g, want %.9g", (long long)i, (double)got[i], (double)want[i]);
  }
}

static void check_int(const kdc_tensor *t, kdc_dtype d, const int64_t *want, int64_t n) {
  assert_int_equal(t->type.dtype, d);
  assert_int_equal(kdc_type_numel(&t->type), n);
  for (int64_t i = 0; i < n; i++) {
    int64_t g = d == KDC_DTYPE_I32 ? ((int32_t *)t->data)[i]
                : d == KDC_DTYPE_I64 ? ((int64_t *)t->data)[i] : ((uint8_t *)t->data)[i];
    if (g != want[i])
      fail_msg("element %lld: got %lld, want %lld", (long long)i, (long long)g, (long long)want[i]);
  }
}

#define F(...) ((const float[]){__VA_ARGS__})
#define I(...) ((const int64_t[]){__VA_ARGS__})
#define N(...) (int64_t)(sizeof((const double[]){__VA_ARGS__}) / sizeof(double))
#define CHECK_F32(t, tol, ...) check_f32((t), F(__VA_ARGS__), N(__VA_ARGS__), (tol))
#define CHECK_INT(t, d, ...) check_int((t), (d), I(__VA_ARGS__), N(__VA_ARGS__))

static void test_unary_f32(void **state) {
  (void)state;
  results r = run(
      "    %0 = constant [-1.5, 0, 0.5, 2] : f32[4]\n"
      "    %1 = constant [0.25, 1, 2, 4] : f32[4]\n"
      "    %2 = neg %0 : f32[4]\n    %3 = abs %0 : f32[4]\n    %4 = exp %0 : f32[4]\n"
      "    %5 = log %1 : f32[4]\n    %6 = log1p %1 : f32[4]\n    %7 = expm1 %0 : f32[4]\n"
      "    %8 = tanh %0 : f32[4]\n    %9 = logistic %0 : f32[4]\n    %10 = sqrt %1 : f32[4]\n"
      "    %11 = rsqrt %1 : f32[4]\n    %12 = erf %0 : f32[4]\n"
      "    return %2, %3, %4, %5, %6, %7, %8, %9\n");
  CHECK_F32(&r.t[0], 0, 1.5f, -0.0f, -0.5f, -2.0f);
  CHECK_F32(&r.t[1], 0, 1.5f, 0.0f, 0.5f, 2.0f);
  CHECK_F32(&r.t[2], 1e-6f, 0.22313016f, 1.0f, 1.64872127f, 7.38905610f);
  CHECK_F32(&r.t[3], 1e-6f, -1.38629436f, 0.0f, 0.69314718f, 1.38629436f);
  CHECK_F32(&r.t[4], 1e-6f, 0.22314355f, 0.69314718f, 1.09861229f, 1.60943791f);
  CHECK_F32(&r.t[5], 1e-6f, -0.77686984f, 0.0f, 0.64872127f, 6.38905610f);
  CHECK_F32(&r.t[6], 1e-6f, -0.90514825f, 0.0f, 0.46211716f, 0.96402758f);
  CHECK_F32(&r.t[7], 1e-6f, 0.18242552f, 0.5f, 0.62245933f, 0.88079708f);
  release(&r);
  r = run(
      "    %0 = constant [-1.5, 0, 0.5, 2] : f32[4]\n    %1 = constant [0.25, 1, 2, 4] : f32[4]\n"
      "    %2 = sqrt %1 : f32[4]\n    %3 = rsqrt %1 : f32[4]\n    %4 = erf %0 : f32[4]\n"
      "    return %2, %3, %4\n");
  CHECK_F32(&r.t[0], 0, 0.5f, 1.0f, 1.41421354f, 2.0f);
  CHECK_F32(&r.t[1], 1e-6f, 2.0f, 1.0f, 0.70710678f, 0.5f);
  CHECK_F32(&r.t[2], 1e-6f, -0.96610515f, 0.0f, 0.52049988f, 0.99532227f);
  release(&r);
}

static void test_rounding_and_sign(void **state) {
  (void)state;
  results r =
      run("    %0 = constant [0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 2.4, 2.6, -2.6, 8388609, -0, nan] : "
          "f32[12]\n"
          "    %1 = round %0 : f32[12]\n    %2 = floor %0 : f32[12]\n    %3 = ceil %0 : f32[12]\n"
          "    %4 = sign %0 : f32[12]\n    return %1, %2, %3, %4\n");
  float nan = NAN;
  CHECK_F32(&r.t[0], 0, 0, 2, 2, -0.0f, -2, -2, 2, 3, -3, 8388609, -0.0f, nan);
  CHECK_F32(&r.t[1], 0, 0, 1, 2, -1, -2, -3, 2, 2, -3, 8388609, -0.0f, nan);
  CHECK_F32(&r.t[2], 0, 1, 2, 3, -0.0f, -1, -2, 3, 3, -2, 8388609, -0.0f, nan);
  CHECK_F32(&r.t[3], 0, 1, 1, 1, -1, -1, -1, 1, 1, -1, 1, -0.0f, nan);
  release(&r);
}

static void test_binary_f32(void **state) {
  (void)state;
  results r = run(
      "    %0 = constant [1, -2, nan, 3, -0, 2] : f32[6]\n"
      "    %1 = constant [4, 0.5, 1, nan, 0, 10] : f32[6]\n"
      "    %2 = add %0, %1 : f32[6]\n    %3 = sub %0, %1 : f32[6]\n    %4 = mul %0, %1 : f32[6]\n"
      "    %5 = div %0, %1 : f32[6]\n    %6 = max %0, %1 : f32[6]\n    %7 = min %0, %1 : f32[6]\n"
      "    %8 = pow %1, %0 : f32[6]\n    return %2, %3, %4, %5, %6, %7, %8\n");
  float nan = NAN, inf = INFINITY;
  CHECK_F32(&r.t[0], 0, 5, -1.5f, nan, nan, 0, 12);
  CHECK_F32(&r.t[1], 0, -3, -2.5f, nan, nan, -0.0f, -8);
  CHECK_F32(&r.t[2], 0, 4, -1, nan, nan, -0.0f, 20);
  CHECK_F32(&r.t[3], 0, 0.25f, -4, nan, nan, nan, 0.2f);
  CHECK_F32(&r.t[4], 0, 4, 0.5f, nan, nan, 0, 10);  /* max(-0, +0) = +0 */
  CHECK_F32(&r.t[5], 0, 1, -2, nan, nan, -0.0f, 2); /* min(-0, +0) = -0 */
  CHECK_F32(&r.t[6], 1e-6f, 4, 4, 1, nan, 1, 100);
  (void)inf;
  release(&r);
}

static void test_integer_ops(void **state) {
  (void)state;
  results r = run(
      "    %0 = constant [7, -7, 7, -7, 5, -2147483648, 2147483647] : i32[7]\n"
      "    %1 = constant [2, 2, -2, -2, 0, -1, 1] : i32[7]\n"
      "    %2 = div %0, %1 : i32[7]\n    %3 = add %0, %1 : i32[7]\n    %4 = mul %0, %1 : i32[7]\n"
      "    %5 = neg %0 : i32[7]\n    %6 = abs %0 : i32[7]\n    %7 = sign %0 : i32[7]\n"
      "    %8 = max %0, %1 : i32[7]\n    %9 = min %0, %1 : i32[7]\n    %10 = not %1 : i32[7]\n"
      "    %11 = and %0, %1 : i32[7]\n    %12 = or %0, %1 : i32[7]\n    %13 = sub %0, %1 : i32[7]\n"
      "    return %2, %3, %4, %5, %6, %7, %8, %9\n");
  kdc_dtype d = KDC_DTYPE_I32;
  CHECK_INT(&r.t[0], d, 3, -3, -3, 3, -1, INT32_MIN, INT32_MAX);
  CHECK_INT(&r.t[1], d, 9, -5, 5, -9, 5, INT32_MAX, INT32_MIN);
  CHECK_INT(&r.t[2], d, 14, -14, -14, 14, 0, INT32_MIN, INT32_MAX);
  CHECK_INT(&r.t[3], d, -7, 7, -7, 7, -5, INT32_MIN, -INT32_MAX);
  CHECK_INT(&r.t[4], d, 7, 7, 7, 7, 5, INT32_MIN, INT32_MAX);
  CHECK_INT(&r.t[5], d, 1, -1, 1, -1, 1, -1, 1);
  CHECK_INT(&r.t[6], d, 7, 2, 7, -2, 5, -1, INT32_MAX);
  CHECK_INT(&r.t[7], d, 2, -7, -2, -7, 0, INT32_MIN, 1);
  release(&r);
  r = run(
      "    %0 = constant [12, -9223372036854775808] : i64[2]\n    %1 = constant [10, -1] : i64[2]\n"
      "    %2 = not %1 : i64[2]\n    %3 = and %0, %1 : i64[2]\n    %4 = or %0, %1 : i64[2]\n"
      "    %5 = div %0, %1 : i64[2]\n    %6 = sub %0, %1 : i64[2]\n    return %2, %3, %4, %5, "
      "%6\n");
  d = KDC_DTYPE_I64;
  CHECK_INT(&r.t[0], d, -11, 0);
  CHECK_INT(&r.t[1], d, 8, INT64_MIN);
  CHECK_INT(&r.t[2], d, 14, -1);
  CHECK_INT(&r.t[3], d, 1, INT64_MIN);
  CHECK_INT(&r.t[4], d, 2, INT64_MIN + 1);
  release(&r);
}

static void test_convert_compare_select_bool(void **state) {
  (void)state;
  results r = run(
      "    %0 = constant [1.9, -1.9, 0.5, -0.5, nan, 3e9, -3e9, 0] : f32[8]\n"
      "    %1 = convert %0 : i32[8]\n    %2 = convert %0 : bool[8]\n    %3 = convert %1 : f32[8]\n"
      "    %4 = convert %2 : i64[8]\n    %5 = constant [4294967297, -1] : i64[2]\n"
      "    %6 = convert %5 : i32[2]\n    return %1, %2, %3, %4, %6\n");
  CHECK_INT(&r.t[0], KDC_DTYPE_I32, 1, -1, 0, 0, 0, INT32_MAX, INT32_MIN, 0);
  CHECK_INT(&r.t[1], KDC_DTYPE_BOOL, 1, 1, 1, 1, 1, 1, 1, 0);
  CHECK_F32(&r.t[2], 0, 1, -1, 0, 0, 0, 2147483648.0f, -2147483648.0f, 0);
  CHECK_INT(&r.t[3], KDC_DTYPE_I64, 1, 1, 1, 1, 1, 1, 1, 0);
  CHECK_INT(&r.t[4], KDC_DTYPE_I32, 1, -1);
  release(&r);
  r = run("    %0 = constant [1, 2, nan, 3] : f32[4]\n    %1 = constant [2, 2, nan, 1] : f32[4]\n"
          "    %2 = compare eq %0, %1 : bool[4]\n    %3 = compare ne %0, %1 : bool[4]\n"
          "    %4 = compare lt %0, %1 : bool[4]\n    %5 = compare le %0, %1 : bool[4]\n"
          "    %6 = compare gt %0, %1 : bool[4]\n    %7 = compare ge %0, %1 : bool[4]\n"
          "    %8 = select %4, %0, %1 : f32[4]\n    %9 = not %4 : bool[4]\n"
          "    %10 = and %4, %5 : bool[4]\n    %11 = or %4, %6 : bool[4]\n"
          "    return %2, %3, %4, %5, %6, %7, %8, %9\n");
  kdc_dtype b = KDC_DTYPE_BOOL;
  CHECK_INT(&r.t[0], b, 0, 1, 0, 0);
  CHECK_INT(&r.t[1], b, 1, 0, 1, 1);
  CHECK_INT(&r.t[2], b, 1, 0, 0, 0);
  CHECK_INT(&r.t[3], b, 1, 1, 0, 0);
  CHECK_INT(&r.t[4], b, 0, 0, 0, 1);
  CHECK_INT(&r.t[5], b, 0, 1, 0, 1);
  CHECK_F32(&r.t[6], 0, 1, 2, NAN, 1);
  CHECK_INT(&r.t[7], b, 0, 1, 1, 1);
  release(&r);
  r = run("    %0 = constant [1, 0, 1] : bool[3]\n    %1 = constant [1, 1, 0] : bool[3]\n"
          "    %2 = and %0, %1 : bool[3]\n    %3 = or %0, %1 : bool[3]\n"
          "    %4 = compare lt %0, %1 : bool[3]\n    %5 = constant [3, -1, 7] : i32[3]\n"
          "    %6 = compare ge %5, %5 : bool[3]\n    return %2, %3, %4, %6\n");
  CHECK_INT(&r.t[0], b, 1, 0, 0);
  CHECK_INT(&r.t[1], b, 1, 1, 1);
  CHECK_INT(&r.t[2], b, 0, 1, 0);
  CHECK_INT(&r.t[3], b, 1, 1, 1);
  release(&r);
}

static void test_iota_broadcast_reshape(void **state) {
  (void)state;
  results r = run(
      "    %0 = iota dim=0 : i32[2,3]\n    %1 = iota dim=1 : f32[2,3]\n"
      "    %2 = constant [10, 20, 30] : f32[3]\n    %3 = broadcast_in_dim %2 dims=[1] : f32[2,3]\n"
      "    %4 = constant [1, 2] : f32[2,1]\n    %5 = broadcast_in_dim %4 dims=[0,1] : f32[2,3]\n"
      "    %6 = constant 7 : i64[]\n    %7 = broadcast_in_dim %6 dims=[] : i64[2,2]\n"
      "    %8 = broadcast_in_dim %4 dims=[1,2] : f32[2,2,2]\n    %9 = reshape %3 : f32[3,2]\n"
      "    return %0, %1, %3, %5, %7, %8, %9\n");
  CHECK_INT(&r.t[0], KDC_DTYPE_I32, 0, 0, 0, 1, 1, 1);
  CHECK_F32(&r.t[1], 0, 0, 1, 2, 0, 1, 2);
  CHECK_F32(&r.t[2], 0, 10, 20, 30, 10, 20, 30);
  CHECK_F32(&r.t[3], 0, 1, 1, 1, 2, 2, 2);
  CHECK_INT(&r.t[4], KDC_DTYPE_I64, 7, 7, 7, 7);
  CHECK_F32(&r.t[5], 0, 1, 1, 2, 2, 1, 1, 2, 2);
  CHECK_F32(&r.t[6], 0, 10, 20, 30, 10, 20, 30);
  assert_int_equal(r.t[6].type.dims[0], 3);
  release(&r);
}

/* x[i] = i over a 2x3x4 iota; transposed with perm [2,0,1] -> 4x2x3. */
static void test_transpose_3d(void **state) {
  (void)state;
  results r = run("    %0 = iota dim=0 : f32[24]\n    %1 = reshape %0 : f32[2,3,4]\n"
                  "    %2 = transpose %1 perm=[2,0,1] : f32[4,2,3]\n    return %2\n");
  const float *y = r.t[0].data;
  for (int a = 0; a < 4; a++)
    for (int b = 0; b < 2; b++)
      for (int c = 0; c < 3; c++) /* y[a,b,c] = x[b,c,a] */
        assert_true(y[(a * 2 + b) * 3 + c] == (float)((b * 3 + c) * 4 + a));
  release(&r);
}

static void test_slice_concat_pad(void **state) {
  (void)state;
  results r = run("    %0 = iota dim=0 : f32[20]\n    %1 = reshape %0 : f32[4,5]\n"
                  "    %2 = slice %1 start=[1,0] limit=[4,5] stride=[2,2] : f32[2,3]\n"
                  "    %3 = slice %1 start=[0,1] limit=[4,3] stride=[3,1] : f32[2,2]\n"
                  "    %4 = constant [1, 2, 3, 4] : f32[2,2]\n    %5 = constant [5, 6] : f32[2,1]\n"
                  "    %6 = concatenate %4, %5, %4 dim=1 : f32[2,5]\n    %7 = concatenate %4, %4 "
                  "dim=0 : f32[4,2]\n"
                  "    %8 = constant [1, 2, 3] : f32[3]\n    %9 = constant 0 : f32[]\n"
                  "    %10 = pad %8, %9 low=[1] high=[-1] interior=[1] : f32[5]\n"
                  "    %11 = pad %4, %9 low=[0,2] high=[1,0] interior=[1,0] : f32[4,4]\n"
                  "    %12 = pad %8, %9 low=[-2] high=[0] interior=[0] : f32[1]\n"
                  "    return %2, %3, %6, %7, %10, %11, %12\n");
  CHECK_F32(&r.t[0], 0, 5, 7, 9, 15, 17, 19);
  CHECK_F32(&r.t[1], 0, 1, 2, 16, 17);
  CHECK_F32(&r.t[2], 0, 1, 2, 5, 1, 2, 3, 4, 6, 3, 4);
  CHECK_F32(&r.t[3], 0, 1, 2, 3, 4, 1, 2, 3, 4);
  CHECK_F32(&r.t[4], 0, 0, 1, 0, 2, 0);
  CHECK_F32(&r.t[5], 0, 0, 0, 1, 2, 0, 0, 0, 0, 0, 0, 3, 4, 0, 0, 0, 0);
  CHECK_F32(&r.t[6], 0, 3);
  release(&r);
}

static void test_reduce(void **state) {
  (void)state;
  results r = run(
      "    %0 = iota dim=0 : f32[24]\n    %1 = reshape %0 : f32[2,3,4]\n"
      "    %2 = reduce sum %1 dims=[0,2] : f32[3]\n    %3 = reduce max %1 dims=[1] : f32[2,4]\n"
      "    %4 = reduce min %1 dims=[0,1,2] : f32[]\n    %5 = constant [1, 2, 3, 4] : f32[2,2]\n"
      "    %6 = reduce prod %5 dims=[1] : f32[2]\n"
      "    %7 = constant [100000000, 1, -100000000, 1] : f32[4]\n"
      "    %8 = reduce sum %7 dims=[0] : f32[]\n    %9 = constant [1, nan, 3] : f32[3]\n"
      "    %10 = reduce max %9 dims=[0] : f32[]\n    %11 = reduce sum %5 dims=[] : f32[2,2]\n"
      "    return %2, %3, %4, %6, %8, %10, %11\n");
  /* sum over dims 0,2 of x[a,b,c] = 12a+4b+c: 2*(6+4b*... ) computed by hand */
  CHECK_F32(&r.t[0], 0, 60, 92, 124);
  CHECK_F32(&r.t[1], 0, 8, 9, 10, 11, 20, 21, 22, 23);
  CHECK_F32(&r.t[2], 0, 0);
  CHECK_F32(&r.t[3], 0, 2, 12);
  CHECK_F32(&r.t[4], 0, 1); /* ((1e8 + 1) - 1e8) + 1 in f32, in index order */
  CHECK_F32(&r.t[5], 0, NAN);
  CHECK_F32(&r.t[6], 0, 1, 2, 3, 4);
  release(&r);
  r = run("    %0 = constant 1 : f32[0,3]\n    %1 = reduce sum %0 dims=[0] : f32[3]\n"
          "    %2 = reduce max %0 dims=[0] : f32[3]\n    %3 = reduce min %0 dims=[0] : f32[3]\n"
          "    %4 = reduce prod %0 dims=[0] : f32[3]\n    %5 = constant 1 : i32[0]\n"
          "    %6 = reduce max %5 dims=[0] : i32[]\n    %7 = constant [3, -4, 5] : i32[3]\n"
          "    %8 = reduce sum %7 dims=[0] : i32[]\n    %9 = reduce prod %7 dims=[0] : i32[]\n"
          "    return %1, %2, %3, %4, %6, %8, %9\n");
  CHECK_F32(&r.t[0], 0, 0, 0, 0);
  CHECK_F32(&r.t[1], 0, -INFINITY, -INFINITY, -INFINITY);
  CHECK_F32(&r.t[2], 0, INFINITY, INFINITY, INFINITY);
  CHECK_F32(&r.t[3], 0, 1, 1, 1);
  CHECK_INT(&r.t[4], KDC_DTYPE_I32, INT32_MIN);
  CHECK_INT(&r.t[5], KDC_DTYPE_I32, 4);
  CHECK_INT(&r.t[6], KDC_DTYPE_I32, -60);
  release(&r);
}

/* lhs[b,m,k] = (b*12+m*4+k) % 7 - 3, rhs[b,k,n] = n - 2, against naive loops. */
static void test_dot_general_batch(void **state) {
  (void)state;
  results r = run(
      "    %0 = iota dim=0 : i32[24]\n    %1 = constant 7 : i32[24]\n    %2 = constant 3 : "
      "i32[24]\n"
      "    %3 = div %0, %1 : i32[24]\n    %4 = mul %3, %1 : i32[24]\n    %5 = sub %0, %4 : "
      "i32[24]\n"
      "    %6 = sub %5, %2 : i32[24]\n    %7 = convert %6 : f32[24]\n    %8 = reshape %7 : "
      "f32[2,3,4]\n"
      "    %9 = iota dim=2 : f32[2,4,5]\n    %10 = constant 2 : f32[2,4,5]\n    %11 = sub %9, %10 "
      ": f32[2,4,5]\n"
      "    %12 = dot_general %8, %11 lhs_batch=[0] rhs_batch=[0] lhs_contract=[2] rhs_contract=[1]"
      " : f32[2,3,5]\n"
      "    %13 = transpose %8 perm=[2,1,0] : f32[4,3,2]\n"
      "    %14 = dot_general %13, %11 lhs_batch=[2] rhs_batch=[0] lhs_contract=[0] rhs_contract=[1]"
      " : f32[2,3,5]\n"
      "    %15 = dot_general %8, %8 lhs_contract=[0,2] rhs_contract=[0,2] : f32[3,3]\n"
      "    %16 = convert %12 : i32[2,3,5]\n"
      "    %17 = reshape %6 : i32[2,3,4]\n    %18 = convert %11 : i32[2,4,5]\n"
      "    %19 = dot_general %17, %18 lhs_batch=[0] rhs_batch=[0] lhs_contract=[2] rhs_contract=[1]"
      " : i32[2,3,5]\n"
      "    return %12, %14, %15, %19\n");
  float lhs[2][3][4], rhs[2][4][5], want[2][3][5], gram[3][3] = {{0}};
  for (int b = 0; b < 2; b++)
    for (int m = 0; m < 3; m++)
      for (int k = 0; k < 4; k++) lhs[b][m][k] = (float)((b * 12 + m * 4 + k) % 7 - 3);
  for (int b = 0; b < 2; b++)
    for (int k = 0; k < 4; k++)
      for (int n = 0; n < 5; n++) rhs[b][k][n] = (float)(n - 2);
  for (int b = 0; b < 2; b++)
    for (int m = 0; m < 3; m++)
      for (int n = 0; n < 5; n++) {
        float acc = 0;
        for (int k = 0; k < 4; k++) acc += lhs[b][m][k] * rhs[b][k][n];
        want[b][m][n] = acc;
      }
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < 3; j++)
      for (int b = 0; b < 2; b++)
        for (int k = 0; k < 4; k++) gram[i][j] += lhs[b][i][k] * lhs[b][j][k];
  check_f32(&r.t[0], &want[0][0][0], 30, 0);
  check_f32(&r.t[1], &want[0][0][0], 30, 0);
  check_f32(&r.t[2], &gram[0][0], 9, 0);
  int64_t iwant[30];
  for (int i = 0; i < 30; i++) iwant[i] = (int64_t)(&want[0][0][0])[i];
  check_int(&r.t[3], KDC_DTYPE_I32, iwant, 30);
  release(&r);
  /* Accumulation is sequential in f32, in increasing contract index. */
  r = run("    %0 = constant [100000000, 1, -100000000, 1] : f32[4]\n    %1 = constant 1 : f32[4]\n"
          "    %2 = dot_general %0, %1 lhs_contract=[0] rhs_contract=[0] : f32[]\n    return %2\n");
  CHECK_F32(&r.t[0], 0, 1);
  release(&r);
}

static void test_parameters_and_weights(void **state) {
  (void)state;
  kdc_module *m = NULL;
  assert_null(kdc_ir_parse_module(
      "module @m {\n  weight \"w\" : f32[2]\n  func @f {\n"
      "    %0 = parameter 0 input \"x\" : f32[2]\n    %1 = parameter 1 weight \"w\" : f32[2]\n"
      "    %2 = mul %0, %1 : f32[2]\n    return %2 \"y\", %0\n  }\n}\n", "p.kir", &m));
  float w[2] = {3, 4}, x[2] = {0.5f, -1};
  kdc_ir_module_find_weight(m, "w")->data = kdc_arena_memdup(m->arena, w, sizeof w);
  kdc_func *f = m->funcs[0];
  int64_t d2[] = {2}, d3[] = {3};
  kdc_tensor args[2] = {{kdc_type_make(KDC_DTYPE_F32, 1, d2), x},
                        {kdc_type_make(KDC_DTYPE_F32, 1, d2), NULL}};
  kdc_tensor out[2];
  assert_null(kdc_ir_interpret(f, args, 2, out));
  CHECK_F32(&out[0], 0, 1.5f, -4);
  CHECK_F32(&out[1], 0, 0.5f, -1);
  assert_ptr_not_equal(out[1].data, x); /* results are copies */
  free(out[0].data);
  free(out[1].data);
  /* wrong argument type, wrong count, missing input */
  args[0].type = kdc_type_make(KDC_DTYPE_F32, 1, d3);
  kdc_status st = kdc_ir_interpret(f, args, 2, out);
  assert_non_null(st);
  assert_string_equal(kdc_status_message(st),
                      "interpreter: parameter 0 \"x\" is f32[2], got f32[3]");
  assert_null(out[0].data);
  kdc_status_free(st);
  assert_non_null(st = kdc_ir_interpret(f, args, 1, out));
  kdc_status_free(st);
  args[0].data = NULL;
  assert_non_null(st = kdc_ir_interpret(f, args, 2, out));
  assert_string_equal(kdc_status_message(st), "interpreter: no argument for parameter 0 \"x\"");
  kdc_status_free(st);
  kdc_ir_module_destroy(m);
}

static void test_rejects_ill_typed(void **state) {
  (void)state;
  kdc_module *m = NULL;
  assert_null(
      kdc_ir_parse_module("module @m {\n  func @f {\n    %0 = constant [1, 2] : f32[2]\n"
                          "    %1 = transpose %0 perm=[1] : f32[2]\n    return %1\n  }\n}\n",
                          "p.kir", &m));
  kdc_tensor out[1];
  kdc_status st = kdc_ir_interpret(m->funcs[0], NULL, 0, out);
  assert_non_null(st);
  assert_non_null(strstr(kdc_status_message(st), "%1 = transpose"));
  kdc_status_free(st);
  kdc_ir_module_destroy(m);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_unary_f32),
      cmocka_unit_test(test_rounding_and_sign),
      cmocka_unit_test(test_binary_f32),
      cmocka_unit_test(test_integer_ops),
      cmocka_unit_test(test_convert_compare_select_bool),
      cmocka_unit_test(test_iota_broadcast_reshape),
      cmocka_unit_test(test_transpose_3d),
      cmocka_unit_test(test_slice_concat_pad),
      cmocka_unit_test(test_reduce),
      cmocka_unit_test(test_dot_general_batch),
      cmocka_unit_test(test_parameters_and_weights),
      cmocka_unit_test(test_rejects_ill_typed),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
