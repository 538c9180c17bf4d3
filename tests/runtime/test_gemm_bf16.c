/*
 * The bf16 GEMMs of runtime/gemm_bf16.c (rt_sgemm with bf16 inputs): the
 * AMX-BF16 tiles, (test_gemm_bf16_avx512: KDC_CPU_BF16=avx512) the
 * AVX-512 BF16 vdpbf16ps microkernel, on the same packed panels, and
 * (test_gemm_bf16_fallback: KDC_CPU_BF16=off) the path of every other CPU,
 * operands rounded into copies for cblas_sgemm.
 *
 * For shapes at and around the kernel's tiles and blocks (m, n, k of 1, odd,
 * not multiples of the 32 x 32 tile block, KC = 1024, MC = 128, NC = 512; a second K block and
 * a second row block), the four transpose combinations and leading
 * dimensions larger than the matrix, every element of C is compared with a
 * double-precision sum of the products of the operands rounded to bf16
 * (round to nearest even, computed here independently of the kernel):
 *   |c - ref| <= (k + 2) 2^-24 sum_k |a_bf16 b_bf16| + 1e-30
 * (the products of bf16 values are exact in f32; any order of k f32 additions
 * stays within k unit roundoffs of the magnitude sum).  Elements of C
 * outside the m x n block (the ld padding) must stay untouched.
 * The operands are NOT bf16 values, so the check also proves that the
 * operands were rounded to bf16 (an f32 GEMM misses the reference by far
 * more than the bound: asserted on one case).  Skipped, with the reason
 * printed, on a CPU without the kernel asked for.
 */
#include "rt_test.h"

#include <math.h>
#include <string.h>

#include "common/io.h"
#include "runtime/gemm_bf16.h"

static float round_bf16(float x) {
  uint32_t u;
  memcpy(&u, &x, 4);
  u = (u + 0x7fffu + ((u >> 16) & 1)) & 0xffff0000u;
  memcpy(&x, &u, 4);
  return x;
}

static void fill(float *v, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; i++)
    v[i] = (float)(((i + seed) * 2654435761u) % 20011) / 10000.f - 1.00037f;
}

/* the largest error over the bound seen (<= 1: within it) */
static double run_case(int64_t m, int64_t n, int64_t k, bool ta, bool tb, bool bf16, int pad) {
  int64_t ar = ta ? k : m, ac = ta ? m : k, br = tb ? n : k, bc = tb ? k : n;
  int64_t lda = ac + pad, ldb = bc + pad, ldc = n + pad;
  float *A = malloc(sizeof(float) * (size_t)(ar * lda + 1));
  float *B = malloc(sizeof(float) * (size_t)(br * ldb + 1));
  float *C = malloc(sizeof(float) * (size_t)(m * ldc + 1));
  fill(A, (size_t)(ar * lda), 7);
  fill(B, (size_t)(br * ldb), 99);
  for (int64_t i = 0; i < m * ldc; i++) C[i] = NAN;
  rt_sgemm(bf16, ta, tb, m, n, k, A, lda, B, ldb, C, ldc);
  double worst = 0;
  for (int64_t i = 0; i < m; i++) {
    for (int64_t j = 0; j < n; j++) {
      double ref = 0, mag = 0;
      for (int64_t l = 0; l < k; l++) {
        double a = round_bf16(ta ? A[l * lda + i] : A[i * lda + l]);
        double b = round_bf16(tb ? B[j * ldb + l] : B[l * ldb + j]);
        ref += a * b;
        mag += fabs(a * b);
      }
      double e = fabs(C[i * ldc + j] - ref) / ((double)(k + 2) * 0x1p-24 * mag + 1e-30);
      if (!(e <= worst)) worst = e; /* NaN: never written */
    }
    for (int64_t j = n; j < ldc; j++) assert_true(isnan(C[i * ldc + j]));
  }
  free(A), free(B), free(C);
  return worst;
}

static void test_shapes(void **state) {
  (void)state;
  const char *env = getenv("KDC_CPU_BF16");
  kdc_cpu_bf16_kind want = env && !strcmp(env, "avx512") ? KDC_CPU_BF16_AVX512
                           : env && !strcmp(env, "off")  ? KDC_CPU_BF16_NONE
                                                         : KDC_CPU_BF16_AMX;
  if (kdc_cpu_bf16_kernel() != want) {
    printf("SKIP: this CPU has no %s (or KDC_CPU_BF16=off): the kernel here is %s\n",
           kdc_cpu_bf16_name(want), kdc_cpu_bf16_name(kdc_cpu_bf16_kernel()));
    skip();
  }
  printf("kernel: %s\n", kdc_cpu_bf16_name(want));
  const int64_t shapes[][3] = {{1, 1, 1},   {1, 37, 5},   {7, 33, 3},    {8, 32, 2},
                               {9, 31, 513}, {17, 65, 1},  {130, 70, 1025}, {3, 1030, 40},
                               {64, 64, 512}, {200, 40, 77}};
  for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
    for (int t = 0; t < 4; t++) {
      double w = run_case(shapes[s][0], shapes[s][1], shapes[s][2], t & 1, t & 2, true,
                          (int)(s % 3));
      if (w > 1)
        fail_msg("m %lld n %lld k %lld trans %d: error %.3g of the bound",
                 (long long)shapes[s][0], (long long)shapes[s][1], (long long)shapes[s][2], t, w);
    }
}

/* The reference is the product of the ROUNDED operands: the f32 path (no
 * rounding) misses it by far more than the bound, so a pass above is bf16. */
static void test_reference_tells_bf16_from_f32(void **state) {
  (void)state;
  assert_true(run_case(16, 40, 300, false, false, false, 0) > 10);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_shapes),
      cmocka_unit_test(test_reference_tells_bf16_from_f32),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
