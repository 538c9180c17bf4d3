/*
 * test_safetensors.c: safetensors round trips, the exact header bytes the
 * Rust crate layout prescribes, dtype conversion, and every validation error
 * naming the file and the tensor or byte.
 */
#include "test_util.h"

#include <math.h>

/* Builds "<u64 len><header padded to 8><data>" into a malloc'd block. */
static uint8_t *make(const char *header, const void *data, size_t ndata, size_t *out_n) {
  size_t h = strlen(header), padded = (h + 7) / 8 * 8;
  uint8_t *b = malloc(8 + padded + ndata + 1);
  kdc_store_le64(b, padded);
  memcpy(b + 8, header, h);
  memset(b + 8 + h, ' ', padded - h);
  if (ndata) memcpy(b + 8 + padded, data, ndata);
  *out_n = 8 + padded + ndata;
  return b;
}

static void expect_err(const char *header, size_t ndata, kdc_code code, const char *sub1,
                       const char *sub2) {
  static const uint8_t zeros[1024];
  size_t n;
  uint8_t *b = make(header, zeros, ndata, &n);
  kdc_safetensors *st = (kdc_safetensors *)1;
  TU_ERR(kdc_safetensors_open_mem("w.safetensors", b, n, &st), code, "w.safetensors: ", sub1,
         sub2);
  assert_null(st);
  free(b);
}

static void test_round_trip(void **state TU_UNUSED) {
  float a[6] = {1, 2, 3, 4, 5, 6};
  int64_t b = -9;
  uint16_t h[3] = {0x3c00, 0xc000, 0x3800};   /* f16 1, -2, 0.5 */
  uint16_t bf[2] = {0x3f80, 0xc0a0};          /* bf16 1, -5 */
  double d[2] = {0.25, -8};
  uint8_t flags[3] = {1, 0, 1};
  kdc_st_tensor ts[] = {
      {.name = "d1/kernel", .dtype = KDC_IO_DTYPE_F32, .rank = 2, .dims = {2, 3}, .data = a},
      {.name = "step", .dtype = KDC_IO_DTYPE_I64, .rank = 0, .data = &b},
      {.name = "half", .dtype = KDC_IO_DTYPE_F16, .rank = 1, .dims = {3}, .data = h},
      {.name = "brain", .dtype = KDC_IO_DTYPE_BF16, .rank = 1, .dims = {2}, .data = bf},
      {.name = "dbl", .dtype = KDC_IO_DTYPE_F64, .rank = 1, .dims = {2}, .data = d},
      {.name = "mask", .dtype = KDC_IO_DTYPE_BOOL, .rank = 1, .dims = {3}, .data = flags},
      {.name = "empty", .dtype = KDC_IO_DTYPE_F32, .rank = 2, .dims = {0, 4}, .data = NULL},
  };
  const char *meta[] = {"format", "kdc", "note", "quote\" and \\ and \n", NULL};
  const char *p = tu_path("w.safetensors");
  TU_OK(kdc_safetensors_write(p, ts, 7, meta));
  kdc_safetensors *st;
  TU_OK(kdc_safetensors_open(p, &st));
  assert_int_equal(kdc_safetensors_count(st), 7);
  for (size_t i = 0; i < 7; i++) {
    const kdc_st_tensor *t = kdc_safetensors_get(st, i);
    assert_string_equal(t->name, ts[i].name);  /* file order = given order */
    assert_int_equal(t->dtype, ts[i].dtype);
    assert_int_equal(t->rank, ts[i].rank);
    size_t nb;
    int bad;
    assert_true(kdc_io_shape_bytes(ts[i].dtype, ts[i].rank, ts[i].dims, &nb, &bad));
    assert_int_equal(t->nbytes, nb);
    if (nb) assert_memory_equal(t->data, ts[i].data, nb);
    assert_ptr_equal(kdc_safetensors_find(st, ts[i].name), t);
  }
  assert_null(kdc_safetensors_find(st, "nope"));
  assert_null(kdc_safetensors_get(st, 7));
  assert_string_equal(kdc_safetensors_metadata(st, "format"), "kdc");
  assert_string_equal(kdc_safetensors_metadata(st, "note"), "quote\" and \\ and \n");
  assert_null(kdc_safetensors_metadata(st, "other"));
  float f[3];
  TU_OK(kdc_safetensors_copy_f32(st, kdc_safetensors_find(st, "half"), f));
  assert_true(f[0] == 1.0f && f[1] == -2.0f && f[2] == 0.5f);
  TU_OK(kdc_safetensors_copy_f32(st, kdc_safetensors_find(st, "brain"), f));
  assert_true(f[0] == 1.0f && f[1] == -5.0f);
  TU_OK(kdc_safetensors_copy_f32(st, kdc_safetensors_find(st, "dbl"), f));
  assert_true(f[0] == 0.25f && f[1] == -8.0f);
  TU_ERR(kdc_safetensors_copy_f32(st, kdc_safetensors_find(st, "step"), f), KDC_INVALID_INPUT,
         p, "tensor \"step\"", "I64");
  kdc_safetensors_close(st);
  unlink(p);
}

/* The header is compact JSON, metadata first, padded with spaces to 8. */
static void test_exact_bytes(void **state TU_UNUSED) {
  float a[2] = {1, 2};
  int64_t b = 3;
  kdc_st_tensor ts[] = {
      {.name = "a", .dtype = KDC_IO_DTYPE_F32, .rank = 1, .dims = {2}, .data = a},
      {.name = "b/c", .dtype = KDC_IO_DTYPE_I64, .rank = 0, .data = &b},
  };
  const char *meta[] = {"format", "pt", NULL};
  const char *p = tu_path("exact.safetensors");
  TU_OK(kdc_safetensors_write(p, ts, 2, meta));
  const char *want = "{\"__metadata__\":{\"format\":\"pt\"},\"a\":{\"dtype\":\"F32\",\"shape\""
                     ":[2],\"data_offsets\":[0,8]},\"b/c\":{\"dtype\":\"I64\",\"shape\":[],"
                     "\"data_offsets\":[8,16]}}";
  size_t hl = strlen(want), padded = (hl + 7) / 8 * 8;
  void *got;
  size_t n;
  TU_OK(kdc_file_read_all(p, &got, &n));
  assert_int_equal(n, 8 + padded + 16);
  assert_int_equal(kdc_load_le64(got), padded);
  assert_memory_equal((char *)got + 8, want, hl);
  for (size_t i = hl; i < padded; i++) assert_int_equal(((char *)got)[8 + i], ' ');
  assert_memory_equal((char *)got + 8 + padded, a, 8);
  free(got);
  /* Without metadata there is no "__metadata__" key at all. */
  TU_OK(kdc_safetensors_write(p, ts, 1, NULL));
  TU_OK(kdc_file_read_all(p, &got, &n));
  const char *want2 = "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";
  assert_memory_equal((char *)got + 8, want2, strlen(want2));
  free(got);
  unlink(p);
}

static void test_writer_errors(void **state TU_UNUSED) {
  float a[1] = {0};
  const char *p = tu_path("bad.safetensors");
  int before = tu_dir_entries();
  kdc_st_tensor dup[] = {
      {.name = "x", .dtype = KDC_IO_DTYPE_F32, .rank = 1, .dims = {1}, .data = a},
      {.name = "x", .dtype = KDC_IO_DTYPE_F32, .rank = 1, .dims = {1}, .data = a},
  };
  TU_ERR(kdc_safetensors_write(p, dup, 2, NULL), KDC_INVALID_INPUT, p, "tensor \"x\"",
         "duplicate");
  kdc_st_tensor meta[] = {{.name = "__metadata__", .dtype = KDC_IO_DTYPE_F32, .data = a}};
  TU_ERR(kdc_safetensors_write(p, meta, 1, NULL), KDC_INVALID_INPUT, p, "invalid name");
  kdc_st_tensor neg[] = {{.name = "n", .dtype = KDC_IO_DTYPE_F32, .rank = 1, .dims = {-1}}};
  TU_ERR(kdc_safetensors_write(p, neg, 1, NULL), KDC_INVALID_INPUT, p, "tensor \"n\"", "shape");
  assert_int_equal(tu_dir_entries(), before);  /* nothing written, no temp left */
}

static void test_read_errors(void **state TU_UNUSED) {
  const char *ok_t = "\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}";
  char h[512];
  /* Sanity: the template is valid. */
  snprintf(h, sizeof h, "{%s}", ok_t);
  uint8_t z[8] = {0};
  size_t n;
  uint8_t *b = make(h, z, 8, &n);
  kdc_safetensors *st;
  TU_OK(kdc_safetensors_open_mem("w.safetensors", b, n, &st));
  kdc_safetensors_close(st);
  free(b);

  expect_err("{\"a\": [1, 2,}", 0, KDC_INVALID_INPUT, "byte 20: invalid JSON header", "");
  expect_err("{\"a\": {\"dtype\": ", 0, KDC_INVALID_INPUT, "invalid JSON header",
             "unexpected end");
  expect_err("[1, 2]", 0, KDC_INVALID_INPUT, "byte 8: the header is not a JSON object", "");
  expect_err("{\"t\":{}} xx", 0, KDC_INVALID_INPUT, "byte 17: unexpected text after", "");
  expect_err("{\"t\":{\"shape\":[2],\"data_offsets\":[0,8]}}", 8, KDC_INVALID_INPUT,
             "tensor \"t\": missing \"dtype\"", "");
  expect_err("{\"t\":{\"dtype\":\"F32\",\"data_offsets\":[0,8]}}", 8, KDC_INVALID_INPUT,
             "tensor \"t\": missing \"shape\"", "");
  expect_err("{\"t\":{\"dtype\":\"F32\",\"shape\":[2]}}", 8, KDC_INVALID_INPUT,
             "tensor \"t\": missing \"data_offsets\"", "");
  expect_err("{\"t\":3}", 0, KDC_INVALID_INPUT, "tensor \"t\": expected an object", "");
  expect_err("{\"t\":{\"dtype\":\"C64\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8,
             KDC_INVALID_INPUT, "tensor \"t\": dtype \"C64\" is not supported", "");
  expect_err("{\"t\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}",
             4, KDC_INVALID_INPUT, "tensor \"t\": rank 9 exceeds 8", "");
  expect_err("{\"t\":{\"dtype\":\"F32\",\"shape\":[2,-1],\"data_offsets\":[0,8]}}", 8,
             KDC_INVALID_INPUT, "tensor \"t\": shape[1] is not a non-negative integer", "");
  expect_err("{\"t\":{\"dtype\":\"F32\",\"shape\":[2.5],\"data_offsets\":[0,8]}}", 8,
             KDC_INVALID_INPUT, "tensor \"t\": shape[0]", "");
  expect_err("{\"t\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,4],"
             "\"data_offsets\":[0,8]}}", 8, KDC_INVALID_INPUT, "tensor \"t\": shape "
             "[4294967296,4294967296,4] overflows", "");
  expect_err("{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0]}}", 8,
             KDC_INVALID_INPUT, "tensor \"t\": \"data_offsets\" must be [begin, end]", "");
  expect_err("{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,16]}}", 8,
             KDC_INVALID_INPUT, "tensor \"t\": data_offsets [0, 16] are outside the data "
             "(8 bytes after the header)", "");
  expect_err("{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,4]}}", 8,
             KDC_INVALID_INPUT, "tensor \"t\": data_offsets [8, 4] are outside", "");
  expect_err("{\"d1/kernel\":{\"dtype\":\"F32\",\"shape\":[784,200],\"data_offsets\":[0,400]}}",
             400, KDC_INVALID_INPUT, "w.safetensors: tensor \"d1/kernel\": data_offsets "
             "[0, 400] do not match shape [784,200] f32 (627200 bytes)", "");
  expect_err("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
             "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12,
             KDC_INVALID_INPUT, "tensor \"b\": data_offsets [4, 12] overlap tensor \"a\" [0, 8]",
             "");
  expect_err("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
             "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}", 12,
             KDC_INVALID_INPUT, "tensor \"a\": duplicate name", "");
  expect_err("{\"__metadata__\":{\"k\":1}}", 0, KDC_INVALID_INPUT,
             "\"__metadata__\".\"k\": expected a string", "");
  expect_err("{\"__metadata__\":[]}", 0, KDC_INVALID_INPUT, "\"__metadata__\" must be", "");

  /* Header length beyond the file, and files too short for it. */
  b = make(h, z, 8, &n);
  kdc_store_le64(b, 1000);
  TU_ERR(kdc_safetensors_open_mem("w.safetensors", b, n, &st), KDC_INVALID_INPUT,
         "w.safetensors: byte 0: header length 1000 exceeds the file", "");
  kdc_store_le64(b, UINT64_MAX);
  TU_ERR(kdc_safetensors_open_mem("w.safetensors", b, n, &st), KDC_INVALID_INPUT,
         "header length 18446744073709551615 exceeds");
  free(b);
  /* Every truncation is refused with a status (never a crash). */
  b = make(h, z, 8, &n);
  for (size_t cut = 0; cut < n; cut++) {
    kdc_status s = kdc_safetensors_open_mem("w.safetensors", b, cut, &st);
    assert_non_null(s);
    assert_non_null(strstr(kdc_status_message(s), "w.safetensors: "));
    kdc_status_free(s);
  }
  TU_ERR(kdc_safetensors_open_mem("w.safetensors", b, 5, &st), KDC_INVALID_INPUT,
         "file is 5 bytes, too short");
  free(b);
  const char *missing = tu_path("missing.safetensors");
  TU_ERR(kdc_safetensors_open(missing, &st), KDC_IO_ERROR, missing, "cannot open");
}

/* Gaps between tensors and unknown keys inside an entry are tolerated. */
static void test_lenient(void **state TU_UNUSED) {
  const char *h = "{\"b\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[6,8],\"x\":1},"
                  "\"a\":{\"dtype\":\"I32\",\"shape\":[1],\"data_offsets\":[0,4]}}";
  uint8_t data[8] = {7, 0, 0, 0, 9, 9, 1, 2};
  size_t n;
  uint8_t *b = make(h, data, 8, &n);
  kdc_safetensors *st;
  TU_OK(kdc_safetensors_open_mem("w.safetensors", b, n, &st));
  free(b);
  assert_string_equal(kdc_safetensors_get(st, 0)->name, "b");  /* header order */
  assert_memory_equal(kdc_safetensors_find(st, "b")->data, "\1\2", 2);
  int32_t v;
  memcpy(&v, kdc_safetensors_find(st, "a")->data, 4);
  assert_int_equal(v, 7);
  kdc_safetensors_close(st);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_round_trip),   cmocka_unit_test(test_exact_bytes),
      cmocka_unit_test(test_writer_errors), cmocka_unit_test(test_read_errors),
      cmocka_unit_test(test_lenient),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
