/*
 * test_npy.c: .npy files written by numpy (tests/common/data, see
 * make_data.py) read correctly; kdc_npy_write reproduces numpy.save byte for
 * byte; round trips of every dtype and rank; every error path names the
 * file and the place.
 */
#include "test_util.h"

#include <math.h>

static void read_data(const char *name, kdc_npy_array *a) {
  TU_OK(kdc_npy_read(tu_data(name), a));
}

static void test_numpy_files(void **state TU_UNUSED) {
  kdc_npy_array a;
  read_data("f32_2x3.npy", &a);
  assert_int_equal(a.dtype, KDC_IO_DTYPE_F32);
  assert_int_equal(a.rank, 2);
  assert_int_equal(a.dims[0], 2);
  assert_int_equal(a.dims[1], 3);
  assert_int_equal(a.nbytes, 24);
  for (int i = 0; i < 6; i++) assert_true(((float *)a.data)[i] == 0.5f * (float)i);
  assert_int_equal((uintptr_t)a.data % 64, 0);
  kdc_npy_free(&a);

  read_data("f64_4.npy", &a);
  assert_int_equal(a.dtype, KDC_IO_DTYPE_F64);
  assert_true(((double *)a.data)[2] == 1e300);
  TU_OK(kdc_npy_to_f32("f64_4.npy", &a));
  assert_int_equal(a.dtype, KDC_IO_DTYPE_F32);
  assert_int_equal(a.nbytes, 16);
  float *f = a.data;
  assert_true(f[0] == 1.5f && f[1] == -2.25f && isinf(f[2]) && f[3] == 3.0f);
  kdc_npy_free(&a);

  read_data("i32_scalar.npy", &a);
  assert_int_equal(a.dtype, KDC_IO_DTYPE_I32);
  assert_int_equal(a.rank, 0);
  assert_int_equal(a.nbytes, 4);
  assert_int_equal(*(int32_t *)a.data, -7);
  TU_ERR(kdc_npy_to_f32("i32_scalar.npy", &a), KDC_INVALID_INPUT, "i32_scalar.npy", "i32");
  kdc_npy_free(&a);

  read_data("i64_5.npy", &a);
  assert_int_equal(a.dtype, KDC_IO_DTYPE_I64);
  assert_int_equal(a.rank, 1);
  assert_int_equal(a.dims[0], 5);
  assert_int_equal(((int64_t *)a.data)[0], -2);
  assert_int_equal(((int64_t *)a.data)[4], 2);
  kdc_npy_free(&a);

  read_data("bool_2x2.npy", &a);
  assert_int_equal(a.dtype, KDC_IO_DTYPE_BOOL);
  assert_memory_equal(a.data, "\1\0\0\1", 4);
  kdc_npy_free(&a);

  read_data("u8_0x3.npy", &a);
  assert_int_equal(a.dtype, KDC_IO_DTYPE_U8);
  assert_int_equal(a.rank, 2);
  assert_int_equal(a.dims[0], 0);
  assert_int_equal(a.nbytes, 0);
  assert_non_null(a.data);
  kdc_npy_free(&a);

  read_data("f16_3.npy", &a);
  assert_int_equal(a.dtype, KDC_IO_DTYPE_F16);
  TU_OK(kdc_npy_to_f32("f16_3.npy", &a));
  f = a.data;
  assert_true(f[0] == 1.0f && f[1] == -0.5f && f[2] == 65504.0f);
  kdc_npy_free(&a);

  for (int v = 2; v <= 3; v++) {
    char name[32];
    snprintf(name, sizeof name, "f32_4_v%d.npy", v);
    read_data(name, &a);
    assert_int_equal(a.rank, 1);
    assert_int_equal(a.dims[0], 4);
    assert_true(((float *)a.data)[3] == 3.0f);
    kdc_npy_free(&a);
  }
}

/* The writer's bytes equal numpy.save's for every v1.0 file numpy made. */
static void test_writer_matches_numpy(void **state TU_UNUSED) {
  const char *files[] = {"f32_2x3.npy", "f64_4.npy", "i32_scalar.npy", "i64_5.npy",
                         "bool_2x2.npy", "u8_0x3.npy", "f16_3.npy"};
  for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
    void *want;
    size_t want_n;
    TU_OK(kdc_file_read_all(tu_data(files[i]), &want, &want_n));
    kdc_npy_array a;
    read_data(files[i], &a);
    const char *out = tu_path(files[i]);
    TU_OK(kdc_npy_write(out, a.dtype, a.rank, a.dims, a.data));
    void *got;
    size_t got_n;
    TU_OK(kdc_file_read_all(out, &got, &got_n));
    if (got_n != want_n || memcmp(got, want, want_n) != 0)
      fail_msg("%s: kdc_npy_write differs from numpy.save", files[i]);
    void *enc;
    size_t enc_n;
    TU_OK(kdc_npy_encode(files[i], a.dtype, a.rank, a.dims, a.data, &enc, &enc_n));
    assert_int_equal(enc_n, want_n);
    assert_memory_equal(enc, want, want_n);
    free(enc);
    free(got);
    free(want);
    kdc_npy_free(&a);
    unlink(out);
  }
}

static void test_round_trip(void **state TU_UNUSED) {
  uint8_t src[8 * 64];
  for (size_t i = 0; i < sizeof src; i++) src[i] = (uint8_t)(i * 37 + 1);
  const kdc_io_dtype types[] = {KDC_IO_DTYPE_F32, KDC_IO_DTYPE_F64, KDC_IO_DTYPE_F16,
                                KDC_IO_DTYPE_I32, KDC_IO_DTYPE_I64, KDC_IO_DTYPE_I8,
                                KDC_IO_DTYPE_U8};
  const int64_t dims[8] = {2, 1, 2, 1, 2, 1, 2, 2};  /* 32 elements at rank 8 */
  const char *p = tu_path("rt.npy");
  for (size_t t = 0; t < sizeof types / sizeof types[0]; t++)
    for (int rank = 0; rank <= 8; rank++) {
      TU_OK(kdc_npy_write(p, types[t], rank, dims, src));
      kdc_npy_array a;
      TU_OK(kdc_npy_read(p, &a));
      assert_int_equal(a.dtype, types[t]);
      assert_int_equal(a.rank, rank);
      for (int d = 0; d < rank; d++) assert_int_equal(a.dims[d], dims[d]);
      size_t want = kdc_io_dtype_size(types[t]);
      for (int d = 0; d < rank; d++) want *= (size_t)dims[d];
      assert_int_equal(a.nbytes, want);
      assert_memory_equal(a.data, src, want);
      /* The reader from memory agrees with the reader from a file. */
      void *bytes;
      size_t n;
      TU_OK(kdc_file_read_all(p, &bytes, &n));
      assert_int_equal(n % 64, want % 64);  /* data starts at a multiple of 64 */
      kdc_npy_array b;
      TU_OK(kdc_npy_read_mem("rt.npy", bytes, n, &b));
      assert_int_equal(b.nbytes, a.nbytes);
      assert_memory_equal(b.data, a.data, a.nbytes);
      kdc_npy_free(&b);
      kdc_npy_free(&a);
      free(bytes);
    }
  TU_ERR(kdc_npy_write(p, KDC_IO_DTYPE_BF16, 1, dims, src), KDC_UNSUPPORTED, p, "bf16");
  TU_ERR(kdc_npy_write(p, KDC_IO_DTYPE_F32, 9, dims, src), KDC_INVALID_INPUT, p, "rank 9");
  int64_t neg[1] = {-1};
  TU_ERR(kdc_npy_write(p, KDC_IO_DTYPE_F32, 1, neg, src), KDC_INVALID_INPUT, p, "dim 0");
  unlink(p);
}

/* Builds a v1.0 file around |dict| (padded like numpy) plus |ndata| bytes. */
static size_t make(uint8_t *buf, const char *dict, size_t ndata) {
  size_t n = strlen(dict), hlen = n + 1;
  size_t pad = 64 - (10 + hlen) % 64;
  memcpy(buf, "\x93NUMPY\x01\x00", 8);
  kdc_store_le16(buf + 8, (uint16_t)(hlen + pad));
  memcpy(buf + 10, dict, n);
  memset(buf + 10 + n, ' ', pad);
  buf[10 + hlen + pad - 1] = '\n';
  memset(buf + 10 + hlen + pad, 0, ndata);
  return 10 + hlen + pad + ndata;
}

/* Expects |dict| to be refused with |code| and the given substrings. */
static void bad_header(const char *dict, kdc_code code, const char *sub1, const char *sub2) {
  uint8_t buf[1024];
  size_t n = make(buf, dict, 64);
  kdc_npy_array a;
  TU_ERR(kdc_npy_read_mem("x.npy", buf, n, &a), code, "x.npy: ", sub1, sub2);
  const char *p = tu_path("x.npy");
  tu_write(p, buf, n);
  TU_ERR(kdc_npy_read(p, &a), code, p, sub1, sub2);
  assert_null(a.data);
}

static void test_header_errors(void **state TU_UNUSED) {
  /* Keys in any order, double quotes and no trailing comma are accepted. */
  uint8_t buf[1024];
  kdc_npy_array a;
  size_t n = make(buf, "{\"shape\": (3,), 'fortran_order': False, 'descr': '<i4'}", 12);
  TU_OK(kdc_npy_read_mem("x.npy", buf, n, &a));
  assert_int_equal(a.dims[0], 3);
  kdc_npy_free(&a);

  bad_header("['descr', '<f4']", KDC_INVALID_INPUT, "byte 10:", "not a Python dict literal");
  bad_header("{'descr': '<f4', 'fortran_order': True, 'shape': (2,), }", KDC_UNSUPPORTED,
             "byte 44:", "fortran_order True is not supported");
  bad_header("{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }", KDC_UNSUPPORTED,
             "byte 20:", "big-endian dtype '>f4'");
  bad_header("{'descr': '<c8', 'fortran_order': False, 'shape': (2,), }", KDC_UNSUPPORTED,
             "byte 20:", "dtype '<c8' is not supported");
  bad_header("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2,), }",
             KDC_UNSUPPORTED, "byte 20:", "structured");
  bad_header("{'descr': '<f4', 'fortran_order': False, 'shape': (1,1,1,1,1,1,1,1,1), }",
             KDC_INVALID_INPUT, "byte 77:", "more than 8 dimensions");
  bad_header("{'descr': '<f4', 'fortran_order': False, 'shape': (2, -3), }",
             KDC_INVALID_INPUT, "byte 64:", "negative dimension");
  bad_header("{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,), }",
             KDC_INVALID_INPUT, "byte 61:", "overflows int64");
  bad_header("{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296), }",
             KDC_INVALID_INPUT, "dim 1 (4294967296)", "overflow");
  bad_header("{'descr': '<f4', 'fortran_order': False, }", KDC_INVALID_INPUT, "byte 10:",
             "no 'shape' key");
  bad_header("{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (), }",
             KDC_INVALID_INPUT, "byte 27:", "duplicate key");
  bad_header("{'descr': '<f4', 'fortran_order': False, 'shape': (), 'x': 1}",
             KDC_INVALID_INPUT, "byte 64:", "unexpected key");
  bad_header("{'descr': '<f4', 'fortran_order': False, 'shape': (2) }", KDC_INVALID_INPUT,
             "byte 62:", "tuple (n,)");
  bad_header("{'descr': '<f4', 'fortran_order': False, 'shape': [2], }", KDC_INVALID_INPUT,
             "byte 60:", "must be a tuple");
  bad_header("{'descr': '<f4' 'fortran_order': False}", KDC_INVALID_INPUT, "byte 26:",
             "expected ',' or '}'");
  bad_header("{'descr': '<f4', 'fortran_order': 0, 'shape': ()}", KDC_INVALID_INPUT,
             "byte 44:", "True or False");
  bad_header("{'descr: '<f4'}", KDC_INVALID_INPUT, "byte", "");
  bad_header("{'descr': '<f4', 'fortran_order': False, 'shape': (), } junk",
             KDC_INVALID_INPUT, "byte 66:", "after the header dict");
}

static void test_framing_errors(void **state TU_UNUSED) {
  uint8_t buf[1024];
  size_t n = make(buf, "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }", 48);
  kdc_npy_array a;
  const char *p = tu_path("t.npy");

  /* Every truncation gives a status, with expected vs actual for the data. */
  for (size_t cut = 0; cut < n; cut++) {
    tu_write(p, buf, cut);
    kdc_status st = kdc_npy_read(p, &a);
    assert_non_null(st);
    assert_non_null(strstr(kdc_status_message(st), p));
    kdc_status_free(st);
    st = kdc_npy_read_mem("t.npy", buf, cut, &a);
    assert_non_null(st);
    kdc_status_free(st);
  }
  TU_ERR(kdc_npy_read_mem("t.npy", buf, n - 5, &a), KDC_INVALID_INPUT,
         "t.npy: truncated data: expected 176 bytes (128 header + 48 data), file has 171");
  tu_write(p, buf, n - 5);
  TU_ERR(kdc_npy_read(p, &a), KDC_INVALID_INPUT, "truncated data: expected 176 bytes",
         "file has 171");
  TU_ERR(kdc_npy_read_mem("t.npy", buf, 100, &a), KDC_INVALID_INPUT,
         "t.npy: truncated header: expected 128 bytes, file has 100");
  /* Trailing bytes are ignored, as numpy does. */
  TU_OK(kdc_npy_read_mem("t.npy", buf, n, &a));
  kdc_npy_free(&a);

  uint8_t bad[1024];
  memcpy(bad, buf, n);
  bad[1] = 'X';
  TU_ERR(kdc_npy_read_mem("t.npy", bad, n, &a), KDC_INVALID_INPUT, "t.npy: byte 0:",
         "bad magic");
  memcpy(bad, buf, n);
  bad[6] = 4;
  TU_ERR(kdc_npy_read_mem("t.npy", bad, n, &a), KDC_UNSUPPORTED, "t.npy: byte 6:",
         "version 4.0");
  memcpy(bad, buf, n);
  bad[127] = ' ';
  TU_ERR(kdc_npy_read_mem("t.npy", bad, n, &a), KDC_INVALID_INPUT, "t.npy: byte 127:",
         "newline");
  memcpy(bad, buf, n);
  bad[70] = 0;
  TU_ERR(kdc_npy_read_mem("t.npy", bad, n, &a), KDC_INVALID_INPUT, "t.npy: byte 70:", "NUL");
  /* A v2 header length far beyond the file or the header limit is an
   * error, not an alloc. */
  memcpy(bad, "\x93NUMPY\x02\x00\xff\xff\xff\x7f", 12);
  tu_write(p, bad, 64);
  TU_ERR(kdc_npy_read(p, &a), KDC_INVALID_INPUT, p, "byte 8: a header of 2147483647 bytes is "
         "over the 65536-byte limit");
  memcpy(bad, "\x93NUMPY\x02\x00\x00\x01\x00\x00", 12);  /* 256 bytes, file has 52 */
  tu_write(p, bad, 64);
  TU_ERR(kdc_npy_read(p, &a), KDC_INVALID_INPUT, p, "truncated header: expected 268");
  TU_ERR(kdc_npy_read(tu_path("nope.npy"), &a), KDC_IO_ERROR, "nope.npy: cannot open");
  unlink(p);
}

static void test_numpy_unsupported_files(void **state TU_UNUSED) {
  kdc_npy_array a;
  TU_ERR(kdc_npy_read(tu_data("fortran_2x3.npy"), &a), KDC_UNSUPPORTED, "fortran_2x3.npy: byte",
         "fortran_order True is not supported");
  TU_ERR(kdc_npy_read(tu_data("big_endian.npy"), &a), KDC_UNSUPPORTED, "big_endian.npy: byte 20",
         "big-endian dtype '>f4'");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_numpy_files),    cmocka_unit_test(test_writer_matches_numpy),
      cmocka_unit_test(test_round_trip),     cmocka_unit_test(test_header_errors),
      cmocka_unit_test(test_framing_errors), cmocka_unit_test(test_numpy_unsupported_files),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
