/*
 * test_hash.c: xxHash64 against reference values (computed with the xxhsum
 * tool, `printf %s STR | xxhsum -H1`), streaming split invariance, and the
 * dtype helpers of dtype.c (sizes, shape overflow, f16/bf16/f64 to f32).
 */
#include "test_util.h"

#include <math.h>
#include <time.h>

static const struct {
  const char *s;
  uint64_t h;
} vectors[] = {
    {"", 0xef46db3751d8e999ull},
    {"a", 0xd24ec4f1a98c6e5bull},
    {"abc", 0x44bc2cf5ad770999ull},
    {"0123456789012345678901234567890", 0x8b80da128591b789ull},   /* 31 bytes */
    {"01234567890123456789012345678901", 0xe5cc9f411ea110baull},  /* 32 bytes */
    {"The quick brown fox jumps over the lazy dog", 0x0b242d361fda71bcull},
};

static void test_vectors(void **state TU_UNUSED) {
  for (size_t i = 0; i < sizeof vectors / sizeof vectors[0]; i++)
    assert_int_equal(kdc_hash64(vectors[i].s, strlen(vectors[i].s), 0), vectors[i].h);
  /* 1000 bytes of (i*7+3) & 255: exercises stripes and every tail length. */
  uint8_t buf[1000];
  for (int i = 0; i < 1000; i++) buf[i] = (uint8_t)(i * 7 + 3);
  assert_int_equal(kdc_hash64(buf, sizeof buf, 0), 0x5f235fa033f1a3fbull);
  assert_true(kdc_hash64("abc", 3, 1) != kdc_hash64("abc", 3, 0));
}

static void test_streaming_splits(void **state TU_UNUSED) {
  uint8_t buf[300];
  for (int i = 0; i < 300; i++) buf[i] = (uint8_t)(i * 131 + 17);
  for (size_t n = 0; n <= sizeof buf; n += 7) {
    uint64_t want = kdc_hash64(buf, n, 42);
    for (size_t cut = 0; cut <= n; cut += 3) {
      kdc_hash64_state s;
      kdc_hash64_init(&s, 42);
      kdc_hash64_update(&s, buf, cut);
      kdc_hash64_update(&s, buf + cut, 0);
      kdc_hash64_update(&s, buf + cut, n - cut);
      assert_int_equal(kdc_hash64_digest(&s), want);
    }
  }
  /* Byte at a time. */
  kdc_hash64_state s;
  kdc_hash64_init(&s, 0);
  for (size_t i = 0; i < sizeof buf; i++) kdc_hash64_update(&s, buf + i, 1);
  assert_int_equal(kdc_hash64_digest(&s), kdc_hash64(buf, sizeof buf, 0));
}

/* Not a benchmark, a guard: 64 MB must hash well under a second. */
static void test_throughput(void **state TU_UNUSED) {
  size_t n = 64u << 20;
  uint8_t *buf = malloc(n);
  assert_non_null(buf);
  memset(buf, 0x5a, n);
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  volatile uint64_t h = kdc_hash64(buf, n, 0);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  (void)h;
  double s = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
  print_message("xxhash64: %.2f GB/s\n", (double)n / s / 1e9);
  assert_true(s < 2.0);  /* generous for sanitizer builds */
  free(buf);
}

static void test_dtype_sizes(void **state TU_UNUSED) {
  assert_int_equal(kdc_io_dtype_size(KDC_IO_DTYPE_F32), 4);
  assert_int_equal(kdc_io_dtype_size(KDC_IO_DTYPE_BF16), 2);
  assert_int_equal(kdc_io_dtype_size(KDC_IO_DTYPE_I64), 8);
  assert_int_equal(kdc_io_dtype_size(KDC_IO_DTYPE_BOOL), 1);
  assert_string_equal(kdc_io_dtype_name(KDC_IO_DTYPE_F16), "f16");
  size_t nb;
  int bad;
  int64_t dims[3] = {784, 200, 1};
  assert_true(kdc_io_shape_bytes(KDC_IO_DTYPE_F32, 2, dims, &nb, &bad));
  assert_int_equal(nb, 627200);
  assert_true(kdc_io_shape_bytes(KDC_IO_DTYPE_F32, 0, dims, &nb, &bad));
  assert_int_equal(nb, 4);
  int64_t zero[2] = {0, 5};
  assert_true(kdc_io_shape_bytes(KDC_IO_DTYPE_F64, 2, zero, &nb, &bad));
  assert_int_equal(nb, 0);
  int64_t neg[2] = {3, -1};
  assert_false(kdc_io_shape_bytes(KDC_IO_DTYPE_F32, 2, neg, &nb, &bad));
  assert_int_equal(bad, 1);
  int64_t huge[3] = {1ll << 40, 1ll << 20, 1ll << 10};
  assert_false(kdc_io_shape_bytes(KDC_IO_DTYPE_F32, 3, huge, &nb, &bad));
  assert_int_equal(bad, 2);
  int64_t big[1] = {INT64_MAX / 2};  /* elements fit, bytes do not */
  assert_false(kdc_io_shape_bytes(KDC_IO_DTYPE_F32, 1, big, &nb, &bad));
  assert_int_equal(bad, -1);
  /* A zero dim does not excuse an overflowing shape. */
  int64_t zhuge[3] = {0, 1ll << 40, 1ll << 40};
  assert_false(kdc_io_shape_bytes(KDC_IO_DTYPE_F32, 3, zhuge, &nb, &bad));
}

static void test_convert(void **state TU_UNUSED) {
  /* f16: 1, -2, 65504 (max), 2^-24 (smallest subnormal), 2^-14 (smallest
   * normal), inf, -0. */
  uint16_t h[] = {0x3c00, 0xc000, 0x7bff, 0x0001, 0x0400, 0x7c00, 0x8000, 0x03ff};
  float f[8];
  assert_true(kdc_io_convert_to_f32(KDC_IO_DTYPE_F16, h, 8, f));
  assert_true(f[0] == 1.0f && f[1] == -2.0f && f[2] == 65504.0f);
  assert_true(f[3] == ldexpf(1.0f, -24) && f[4] == ldexpf(1.0f, -14));
  assert_true(isinf(f[5]) && f[6] == 0.0f && signbit(f[6]));
  assert_true(f[7] == ldexpf(1023.0f, -24));
  uint16_t nan16 = 0x7e00;
  assert_true(kdc_io_convert_to_f32(KDC_IO_DTYPE_F16, &nan16, 1, f) && isnan(f[0]));
  /* bf16: the top 16 bits of an f32. */
  uint16_t bf[] = {0x3f80, 0xc0a0, 0x4049};  /* 1, -5, 3.140625 */
  assert_true(kdc_io_convert_to_f32(KDC_IO_DTYPE_BF16, bf, 3, f));
  assert_true(f[0] == 1.0f && f[1] == -5.0f && f[2] == 3.140625f);
  /* f64, from an unaligned source. */
  uint8_t raw[1 + 16];
  double d[2] = {0.1, -1e300};
  memcpy(raw + 1, d, 16);
  assert_true(kdc_io_convert_to_f32(KDC_IO_DTYPE_F64, raw + 1, 2, f));
  assert_true(f[0] == 0.1f && isinf(f[1]) && f[1] < 0);
  int32_t ints[1] = {1};
  assert_false(kdc_io_convert_to_f32(KDC_IO_DTYPE_I32, ints, 1, f));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_vectors),     cmocka_unit_test(test_streaming_splits),
      cmocka_unit_test(test_throughput),  cmocka_unit_test(test_dtype_sizes),
      cmocka_unit_test(test_convert),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
