/*
 * test_plan_file.c: the plan.bin container: round trip, the section cursor
 * (kdc_reader) and builder (kdc_buf), and every validation of the reader:
 * foreign files, other format versions, truncation at every byte, every
 * single-bit flip, and structural errors in files with a valid checksum.
 */
#include "test_util.h"

#include <inttypes.h>

static uint8_t weights[1000];

/* A small plan: program (built with kdc_buf), weights, an empty section. */
static const char *write_plan(const char *name) {
  kdc_buf b;
  kdc_buf_init(&b);
  kdc_buf_put_u32(&b, 0);  /* count, patched below */
  kdc_buf_put_str(&b, "dot_general");
  kdc_buf_put_i64(&b, -5);
  kdc_buf_put_u64(&b, UINT64_MAX);
  kdc_buf_put_f32(&b, 0.5f);
  kdc_buf_put_i32(&b, -2);
  kdc_buf_put_u8(&b, 7);
  kdc_buf_align(&b, 8);
  kdc_buf_put_bytes(&b, "raw!", 4);
  kdc_buf_patch_u32(&b, 0, 3);
  for (size_t i = 0; i < sizeof weights; i++) weights[i] = (uint8_t)(i * 13);
  kdc_plan_writer *w = kdc_plan_writer_create();
  TU_OK(kdc_plan_writer_add(w, KDC_PLAN_SECTION_METADATA, "metadata", "{}", 2));
  TU_OK(kdc_plan_writer_add(w, KDC_PLAN_SECTION_PROGRAM, "program", b.data, b.size));
  TU_OK(kdc_plan_writer_add(w, KDC_PLAN_SECTION_WEIGHTS, "weights", weights, sizeof weights));
  TU_OK(kdc_plan_writer_add(w, KDC_PLAN_SECTION_PTX, "ptx.sm_80", NULL, 0));
  const char *p = tu_path(name);
  TU_OK(kdc_plan_writer_write(w, p));
  kdc_plan_writer_destroy(w);
  kdc_buf_free(&b);
  return p;
}

static void load(const char *path, uint8_t **out, size_t *n) {
  void *d;
  TU_OK(kdc_file_read_all(path, &d, n));
  *out = d;
}

/* Recomputes the checksum after a deliberate edit. */
static void reseal(uint8_t *b, size_t n) {
  kdc_hash64_state h;
  kdc_hash64_init(&h, 0);
  kdc_hash64_update(&h, b, 48);
  kdc_hash64_update(&h, b + 56, n - 56);
  kdc_store_le64(b + 48, kdc_hash64_digest(&h));
}

static void test_round_trip(void **state TU_UNUSED) {
  const char *p = write_plan("plan.bin");
  kdc_plan_file *pf;
  TU_OK(kdc_plan_file_open(p, &pf));
  assert_string_equal(kdc_plan_file_name(pf), p);
  assert_string_equal(kdc_plan_file_kdc_version(pf), kdc_plan_kdc_version());
  assert_int_equal(kdc_plan_file_flags(pf), 0);
  assert_int_equal(kdc_plan_file_count(pf), 4);
  for (size_t i = 0; i < 4; i++) {
    kdc_plan_section_info in = kdc_plan_file_info(pf, i);
    assert_int_equal(in.offset % 64, 0);
    assert_int_equal((uintptr_t)in.data % 64, 0);
  }
  kdc_plan_section_info in = kdc_plan_file_info(pf, 2);
  assert_int_equal(in.kind, KDC_PLAN_SECTION_WEIGHTS);
  assert_string_equal(in.name, "weights");
  assert_int_equal(in.size, sizeof weights);
  assert_memory_equal(in.data, weights, sizeof weights);
  const void *d;
  size_t n;
  assert_true(kdc_plan_file_find(pf, KDC_PLAN_SECTION_METADATA, &d, &n));
  assert_int_equal(n, 2);
  assert_memory_equal(d, "{}", 2);
  assert_true(kdc_plan_file_find_name(pf, "ptx.sm_80", &d, &n));
  assert_int_equal(n, 0);
  assert_false(kdc_plan_file_find(pf, KDC_PLAN_SECTION_CODE, &d, &n));
  assert_null(d);
  assert_false(kdc_plan_file_find_name(pf, "code", &d, &n));

  kdc_reader r;
  TU_OK(kdc_plan_file_reader(pf, KDC_PLAN_SECTION_PROGRAM, &r));
  uint32_t count;
  const char *s;
  size_t len;
  int64_t i64;
  uint64_t u64;
  float f;
  int32_t i32;
  uint8_t u8;
  const void *raw;
  TU_OK(kdc_reader_count(&r, 1, &count));
  assert_int_equal(count, 3);
  TU_OK(kdc_reader_str(&r, &s, &len));
  assert_string_equal(s, "dot_general");
  assert_int_equal(len, 11);
  TU_OK(kdc_reader_i64(&r, &i64));
  assert_int_equal(i64, -5);
  TU_OK(kdc_reader_u64(&r, &u64));
  assert_true(u64 == UINT64_MAX);
  TU_OK(kdc_reader_f32(&r, &f));
  assert_true(f == 0.5f);
  TU_OK(kdc_reader_i32(&r, &i32));
  assert_int_equal(i32, -2);
  TU_OK(kdc_reader_u8(&r, &u8));
  assert_int_equal(u8, 7);
  TU_OK(kdc_reader_align(&r, 8));
  TU_OK(kdc_reader_bytes(&r, 4, &raw));
  assert_memory_equal(raw, "raw!", 4);
  assert_int_equal(r.pos, r.size);
  /* Overruns name the file, the section and the byte offset. */
  uint32_t u32;
  TU_ERR(kdc_reader_u32(&r, &u32), KDC_INVALID_INPUT, p, ": section program: byte 52:",
         "need 4 bytes for a u32, 0 left");
  assert_int_equal(r.pos, 52);
  TU_ERR(kdc_plan_file_reader(pf, KDC_PLAN_SECTION_CODE, &r), KDC_INVALID_INPUT, p,
         "no code section");
  kdc_plan_file_close(pf);
}

static void test_reader_cursor(void **state TU_UNUSED) {
  kdc_reader r;
  uint8_t buf[16] = {5, 0, 0, 0, 'a', 'b', 'c', 'd', 'e', 0, 0xff, 0xff, 0xff, 0x7f, 1, 2};
  kdc_reader_init(&r, buf, sizeof buf, "plan.bin", "program");
  const char *s;
  size_t len;
  TU_OK(kdc_reader_str(&r, &s, &len));
  assert_string_equal(s, "abcde");
  uint32_t n;
  TU_ERR(kdc_reader_count(&r, 4, &n), KDC_INVALID_INPUT,
         "plan.bin: section program: byte 10: count 2147483647 of 4-byte elements exceeds the "
         "2 bytes left");
  assert_int_equal(r.pos, 10);
  TU_ERR(kdc_reader_str(&r, &s, &len), KDC_INVALID_INPUT, "plan.bin: section program: byte 14:",
         "need 2147483648 bytes for a string, 2 left");
  assert_int_equal(r.pos, 10);  /* unchanged after an error */
  uint8_t bad[8] = {3, 0, 0, 0, 'a', 0, 'b', 0};  /* NUL inside */
  kdc_reader_init(&r, bad, sizeof bad, "plan.bin", "program");
  TU_ERR(kdc_reader_str(&r, &s, &len), KDC_INVALID_INPUT, "byte 4:", "NUL");
  uint8_t nonul[8] = {3, 0, 0, 0, 'a', 'b', 'c', 'd'};
  kdc_reader_init(&r, nonul, sizeof nonul, "plan.bin", "program");
  TU_ERR(kdc_reader_str(&r, &s, &len), KDC_INVALID_INPUT, "not NUL-terminated");
  kdc_reader_init(&r, buf, 3, "plan.bin", "buffers");
  uint64_t v;
  TU_ERR(kdc_reader_u64(&r, &v), KDC_INVALID_INPUT,
         "plan.bin: section buffers: byte 0: need 8 bytes for a u64, 3 left");
  const void *raw;
  TU_ERR(kdc_reader_bytes(&r, SIZE_MAX, &raw), KDC_INVALID_INPUT, "byte block");
  r.pos = 1;
  TU_ERR(kdc_reader_align(&r, 8), KDC_INVALID_INPUT, "byte 1:", "alignment padding");
  TU_ERR(kdc_reader_error(&r, "unknown op %d", 99), KDC_INVALID_INPUT,
         "plan.bin: section buffers: byte 1: unknown op 99");
}

static void test_foreign_and_version(void **state TU_UNUSED) {
  kdc_plan_file *pf = (kdc_plan_file *)1;
  const char *junk = "PK\3\4 this is a zip file, not a plan at all..........................";
  TU_ERR(kdc_plan_file_open_mem("plan.bin", junk, strlen(junk), &pf), KDC_INVALID_INPUT,
         "plan.bin: not a kdc plan (bad magic at byte 0)");
  assert_null(pf);
  const char *p = write_plan("v.bin");
  uint8_t *b;
  size_t n;
  load(p, &b, &n);
  kdc_store_le32(b + 8, 7);
  char want[160];
  snprintf(want, sizeof want, "plan.bin: plan format version 7 (written by kdc %s), this kdc "
           "reads version 1 (kdc %s)", kdc_plan_kdc_version(), kdc_plan_kdc_version());
  TU_ERR(kdc_plan_file_open_mem("plan.bin", b, n, &pf), KDC_UNSUPPORTED, want);
  kdc_store_le32(b + 8, 1);
  kdc_store_le32(b + 12, 64);
  TU_ERR(kdc_plan_file_open_mem("plan.bin", b, n, &pf), KDC_INVALID_INPUT,
         "plan.bin: byte 12: header_size 64, format version 1 has 56");
  free(b);
  TU_ERR(kdc_plan_file_open(tu_path("absent.bin"), &pf), KDC_IO_ERROR, "absent.bin",
         "No such file");
}

static void test_truncation_every_byte(void **state TU_UNUSED) {
  const char *p = write_plan("t.bin");
  uint8_t *b;
  size_t n;
  load(p, &b, &n);
  const char *cut_path = tu_path("cut.bin");
  for (size_t cut = 0; cut < n; cut++) {
    kdc_plan_file *pf;
    kdc_status st = kdc_plan_file_open_mem("plan.bin", b, cut, &pf);
    if (!st) fail_msg("a plan cut to %zu of %zu bytes was accepted", cut, n);
    assert_non_null(strstr(kdc_status_message(st), "plan.bin: "));
    assert_non_null(strstr(kdc_status_message(st), "truncated"));
    kdc_status_free(st);
    if (cut % 97 == 0) {  /* and through the file path (mmap) too */
      tu_write(cut_path, b, cut);
      st = kdc_plan_file_open(cut_path, &pf);
      assert_non_null(st);
      kdc_status_free(st);
    }
  }
  char want[128];
  snprintf(want, sizeof want, "plan.bin: truncated: the header says %zu bytes, the file has %zu",
           n, n - 1);
  kdc_plan_file *pf;
  TU_ERR(kdc_plan_file_open_mem("plan.bin", b, n - 1, &pf), KDC_INVALID_INPUT, want);
  uint8_t *longer = calloc(n + 3, 1);
  memcpy(longer, b, n);
  TU_ERR(kdc_plan_file_open_mem("plan.bin", longer, n + 3, &pf), KDC_INVALID_INPUT,
         "plan.bin: 3 bytes of trailing data");
  free(longer);
  free(b);
  unlink(cut_path);
}

static void test_bit_flips(void **state TU_UNUSED) {
  const char *p = write_plan("flip.bin");
  uint8_t *b;
  size_t n;
  load(p, &b, &n);
  for (size_t i = 0; i < n; i++)
    for (int bit = 0; bit < 8; bit++) {
      b[i] ^= (uint8_t)(1u << bit);
      kdc_plan_file *pf;
      kdc_status st = kdc_plan_file_open_mem("plan.bin", b, n, &pf);
      if (!st) fail_msg("flipping bit %d of byte %zu went unnoticed", bit, i);
      /* Past the fields checked before it, the checksum catches every flip. */
      bool checked_early = i < 16 || (i >= 40 && i < 48);
      if (!checked_early && !strstr(kdc_status_message(st), "checksum mismatch (stored "))
        fail_msg("byte %zu bit %d: %s", i, bit, kdc_status_message(st));
      kdc_status_free(st);
      b[i] ^= (uint8_t)(1u << bit);
    }
  b[200] ^= 1;
  kdc_plan_file *pf;
  TU_ERR(kdc_plan_file_open_mem("plan.bin", b, n, &pf), KDC_INVALID_INPUT,
         "plan.bin: checksum mismatch (stored ", "): the file is corrupted");
  free(b);
}

/* Edits a valid plan, reseals the checksum, expects |sub|. */
static void structural(size_t at, uint64_t value, int width, const char *sub) {
  const char *p = write_plan("s.bin");
  uint8_t *b;
  size_t n;
  load(p, &b, &n);
  if (width == 4)
    kdc_store_le32(b + at, (uint32_t)value);
  else if (width == 8)
    kdc_store_le64(b + at, value);
  else
    b[at] = (uint8_t)value;
  reseal(b, n);
  kdc_plan_file *pf = (kdc_plan_file *)1;
  kdc_status st = kdc_plan_file_open_mem("plan.bin", b, n, &pf);
  if (!st) fail_msg("accepted after an edit expected to give \"%s\"", sub);
  TU_ERR(st, KDC_INVALID_INPUT, "plan.bin: ", sub);
  assert_null(pf);
  free(b);
}

static void test_structure(void **state TU_UNUSED) {
  /* Entry i starts at 56 + 48 i: kind +0, reserved +4, name +8, offset +32,
   * size +40.  The plan: 4 sections, the table ends at 248, payloads at 256
   * (2 bytes), 320 (52), 384 (1000) and 1408 (0); the file is 1408 bytes. */
  const size_t e1 = 56 + 48, e2 = 56 + 96, e3 = 56 + 144;
  char want[160];
  const char *p = write_plan("s0.bin");
  uint8_t *b;
  size_t n;
  load(p, &b, &n);
  free(b);
  snprintf(want, sizeof want, "section 2 (weights): offset 384 + size 4000 exceeds file size %zu",
           n);
  structural(e2 + 40, 4000, 8, want);
  structural(e2 + 40, UINT64_MAX - 100, 8, "section 2 (weights): offset 384 + size "
             "18446744073709551515 exceeds");
  structural(e2 + 32, UINT64_MAX - 63, 8, "section 2 (weights): offset 18446744073709551552");
  structural(e1 + 32, 260, 8, "section 1 (program): offset 260 is not a multiple of 64");
  structural(e1 + 32, 192, 8, "section 1 (program): offset 192 is inside the header or "
             "section table");
  structural(e1 + 32, 384, 8, "overlap");
  structural(32, 1000000, 4, "section table of 1000000 entries");
  structural(32, 0xffffffffu, 4, "section table of 4294967295 entries");
  structural(e1 + 4, 1, 4, "section 1 (program): reserved field is not 0");
  structural(36, 4, 4, "byte 36: unknown flags 0x4");
  structural(e1 + 8, 0, 1, "section 1: name \"\" is empty");
  /* "program" padded with 'x' to fill all 24 bytes: no NUL left. */
  const char *p2 = write_plan("s1.bin");
  load(p2, &b, &n);
  memset(b + e1 + 8 + 7, 'x', 17);
  reseal(b, n);
  kdc_plan_file *pf;
  TU_ERR(kdc_plan_file_open_mem("plan.bin", b, n, &pf), KDC_INVALID_INPUT,
         "plan.bin: section 1: name \"programxxxxxxxxxxxxxxxx\" is empty or not NUL-terminated");
  free(b);
  load(p2, &b, &n);
  memcpy(b + e3 + 8, "weights", 8);
  reseal(b, n);
  TU_ERR(kdc_plan_file_open_mem("plan.bin", b, n, &pf), KDC_INVALID_INPUT,
         "plan.bin: section 3 (weights): name also used by section 2");
  free(b);
}

static void test_writer_errors(void **state TU_UNUSED) {
  kdc_plan_writer *w = kdc_plan_writer_create();
  TU_ERR(kdc_plan_writer_add(w, 1, "a_name_that_is_24_bytes_", "", 0), KDC_INTERNAL, "1..23");
  TU_ERR(kdc_plan_writer_add(w, 1, "", "", 0), KDC_INTERNAL, "1..23");
  TU_OK(kdc_plan_writer_add(w, 1, "a_name_that_is_23_bytes", "", 0));
  TU_ERR(kdc_plan_writer_add(w, 2, "a_name_that_is_23_bytes", "", 0), KDC_INTERNAL,
         "added twice");
  const char *bad = tu_path("missing_dir/plan.bin");
  TU_ERR(kdc_plan_writer_write(w, bad), KDC_IO_ERROR, bad);
  /* An empty plan is valid. */
  kdc_plan_writer_destroy(w);
  w = kdc_plan_writer_create();
  const char *p = tu_path("empty.bin");
  TU_OK(kdc_plan_writer_write(w, p));
  kdc_plan_writer_destroy(w);
  kdc_plan_file *pf;
  TU_OK(kdc_plan_file_open(p, &pf));
  assert_int_equal(kdc_plan_file_count(pf), 0);
  kdc_plan_file_close(pf);
  assert_string_equal(kdc_plan_section_kind_name(KDC_PLAN_SECTION_IR_TEXT), "ir_text");
  assert_string_equal(kdc_plan_section_kind_name(99), "unknown");
}

/* A section given as borrowed parts is the file a copied section of the same
 * bytes makes, byte for byte (checksum included); names are checked alike. */
static void test_add_parts(void **state TU_UNUSED) {
  for (size_t i = 0; i < sizeof weights; i++) weights[i] = (uint8_t)(i * 7 + 1);
  const char *whole = tu_path("whole.bin"), *parted = tu_path("parted.bin");
  kdc_plan_writer *w = kdc_plan_writer_create();
  TU_OK(kdc_plan_writer_add(w, KDC_PLAN_SECTION_METADATA, "metadata", "{}", 2));
  TU_OK(kdc_plan_writer_add(w, KDC_PLAN_SECTION_WEIGHTS, "weights", weights, sizeof weights));
  TU_OK(kdc_plan_writer_write(w, whole));
  kdc_plan_writer_destroy(w);
  w = kdc_plan_writer_create();
  kdc_plan_part parts[] = {{weights, 3}, {weights + 3, 0}, {weights + 3, 500},
                           {weights + 503, sizeof weights - 503}};
  TU_OK(kdc_plan_writer_add_parts(w, KDC_PLAN_SECTION_METADATA, "metadata",
                                  &(kdc_plan_part){"{}", 2}, 1));
  TU_ERR(kdc_plan_writer_add_parts(w, 1, "metadata", parts, 4), KDC_INTERNAL, "added twice");
  TU_ERR(kdc_plan_writer_add_parts(w, 1, "", parts, 4), KDC_INTERNAL, "1..23");
  TU_OK(kdc_plan_writer_add_parts(w, KDC_PLAN_SECTION_WEIGHTS, "weights", parts, 4));
  TU_OK(kdc_plan_writer_write(w, parted));
  kdc_plan_writer_destroy(w);
  uint8_t *a, *b;
  size_t na, nb;
  load(whole, &a, &na);
  load(parted, &b, &nb);
  assert_int_equal(na, nb);
  assert_memory_equal(a, b, na);
  free(a);
  free(b);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_round_trip),         cmocka_unit_test(test_reader_cursor),
      cmocka_unit_test(test_foreign_and_version), cmocka_unit_test(test_truncation_every_byte),
      cmocka_unit_test(test_bit_flips),          cmocka_unit_test(test_structure),
      cmocka_unit_test(test_writer_errors),      cmocka_unit_test(test_add_parts),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
