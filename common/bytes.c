/*
 * bytes.c: kdc_reader and kdc_buf, the two halves of section payload
 * encoding.  kdc_buf (codegen) appends little-endian fields to a growable
 * buffer; kdc_reader (runtime) reads them back with a bounds check on every
 * field, so a corrupt or hostile payload yields a status naming the file,
 * the section and the byte offset, never an out-of-bounds read.
 *
 * Encodings: u8/u32/u64/i32/i64 little endian, f32 as its IEEE bits (u32),
 * strings as u32 length + bytes + NUL (the NUL lets the reader hand out C
 * strings that point into the mapped plan without copying).
 */
#include "common/io.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "kdc/arena.h"

/* ---- reader ---- */

void kdc_reader_init(kdc_reader *r, const void *data, size_t size, const char *file,
                     const char *section) {
  r->data = data;
  r->size = size;
  r->pos = 0;
  r->file = file;
  r->section = section;
}

static kdc_status verror(const kdc_reader *r, size_t at, const char *fmt, va_list ap) {
  kdc_status st = kdc_status_makev(KDC_INVALID_INPUT, __FILE__, __LINE__, fmt, ap);
  return kdc_status_annotate(st, "%s: section %s: byte %zu", r->file, r->section, at);
}

kdc_status kdc_reader_error(const kdc_reader *r, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  kdc_status st = verror(r, r->pos, fmt, ap);
  va_end(ap);
  return st;
}

/* Ensures |n| bytes are left for a |what|. */
static kdc_status need(const kdc_reader *r, size_t n, const char *what) {
  if (r->size - r->pos >= n) return NULL;
  return kdc_reader_error(r, "need %zu bytes for %s, %zu left", n, what, r->size - r->pos);
}

kdc_status kdc_reader_u8(kdc_reader *r, uint8_t *out) {
  KDC_RETURN_IF_ERROR(need(r, 1, "a u8"));
  *out = r->data[r->pos++];
  return NULL;
}

kdc_status kdc_reader_u32(kdc_reader *r, uint32_t *out) {
  KDC_RETURN_IF_ERROR(need(r, 4, "a u32"));
  *out = kdc_load_le32(r->data + r->pos);
  r->pos += 4;
  return NULL;
}

kdc_status kdc_reader_i32(kdc_reader *r, int32_t *out) {
  KDC_RETURN_IF_ERROR(need(r, 4, "an i32"));
  *out = (int32_t)kdc_load_le32(r->data + r->pos);
  r->pos += 4;
  return NULL;
}

kdc_status kdc_reader_u64(kdc_reader *r, uint64_t *out) {
  KDC_RETURN_IF_ERROR(need(r, 8, "a u64"));
  *out = kdc_load_le64(r->data + r->pos);
  r->pos += 8;
  return NULL;
}

kdc_status kdc_reader_i64(kdc_reader *r, int64_t *out) {
  KDC_RETURN_IF_ERROR(need(r, 8, "an i64"));
  *out = (int64_t)kdc_load_le64(r->data + r->pos);
  r->pos += 8;
  return NULL;
}

kdc_status kdc_reader_f32(kdc_reader *r, float *out) {
  KDC_RETURN_IF_ERROR(need(r, 4, "an f32"));
  uint32_t bits = kdc_load_le32(r->data + r->pos);
  memcpy(out, &bits, 4);
  r->pos += 4;
  return NULL;
}

kdc_status kdc_reader_bytes(kdc_reader *r, size_t n, const void **out) {
  KDC_RETURN_IF_ERROR(need(r, n, "a byte block"));
  *out = r->data + r->pos;
  r->pos += n;
  return NULL;
}

kdc_status kdc_reader_str(kdc_reader *r, const char **out, size_t *out_len) {
  size_t start = r->pos;
  uint32_t len;
  KDC_RETURN_IF_ERROR(kdc_reader_u32(r, &len));
  kdc_status st = need(r, (size_t)len + 1, "a string");
  const char *s = (const char *)r->data + r->pos;
  if (!st && (s[len] != 0 || memchr(s, 0, len)))
    st = kdc_reader_error(r, "string of %" PRIu32 " bytes is not NUL-terminated or has a NUL "
                          "inside", len);
  if (st) {
    r->pos = start;
    return st;
  }
  r->pos += (size_t)len + 1;
  *out = s;
  if (out_len) *out_len = len;
  return NULL;
}

kdc_status kdc_reader_count(kdc_reader *r, size_t min_elem_bytes, uint32_t *out) {
  size_t start = r->pos;
  uint32_t n;
  KDC_RETURN_IF_ERROR(kdc_reader_u32(r, &n));
  size_t left = r->size - r->pos;
  if (min_elem_bytes && n > left / min_elem_bytes) {
    r->pos = start;
    return kdc_reader_error(r, "count %" PRIu32 " of %zu-byte elements exceeds the %zu bytes "
                            "left", n, min_elem_bytes, left);
  }
  *out = n;
  return NULL;
}

kdc_status kdc_reader_align(kdc_reader *r, size_t align) {
  size_t pad = (align - r->pos % align) % align;
  KDC_RETURN_IF_ERROR(need(r, pad, "alignment padding"));
  r->pos += pad;
  return NULL;
}

/* ---- buffer ---- */

void kdc_buf_init(kdc_buf *b) { memset(b, 0, sizeof *b); }

void kdc_buf_free(kdc_buf *b) {
  free(b->data);
  memset(b, 0, sizeof *b);
}

/* Room for |n| more bytes; returns where they go. */
static uint8_t *grow(kdc_buf *b, size_t n) {
  if (n > SIZE_MAX - b->size) kdc_fatal(__FILE__, __LINE__, "kdc_buf overflow");
  KDC_GROW(b->data, b->cap, b->size + n);
  uint8_t *p = b->data + b->size;
  b->size += n;
  return p;
}

void kdc_buf_put_u8(kdc_buf *b, uint8_t v) { *grow(b, 1) = v; }
void kdc_buf_put_u32(kdc_buf *b, uint32_t v) { kdc_store_le32(grow(b, 4), v); }
void kdc_buf_put_i32(kdc_buf *b, int32_t v) { kdc_store_le32(grow(b, 4), (uint32_t)v); }
void kdc_buf_put_u64(kdc_buf *b, uint64_t v) { kdc_store_le64(grow(b, 8), v); }
void kdc_buf_put_i64(kdc_buf *b, int64_t v) { kdc_store_le64(grow(b, 8), (uint64_t)v); }

void kdc_buf_put_f32(kdc_buf *b, float v) {
  uint32_t bits;
  memcpy(&bits, &v, 4);
  kdc_store_le32(grow(b, 4), bits);
}

void kdc_buf_put_bytes(kdc_buf *b, const void *data, size_t n) {
  if (n) memcpy(grow(b, n), data, n);
}

void kdc_buf_put_str(kdc_buf *b, const char *s) {
  size_t n = strlen(s);
  KDC_ASSERT(n <= UINT32_MAX);
  kdc_buf_put_u32(b, (uint32_t)n);
  kdc_buf_put_bytes(b, s, n + 1);
}

void kdc_buf_align(kdc_buf *b, size_t align) {
  size_t pad = (align - b->size % align) % align;
  if (pad) memset(grow(b, pad), 0, pad);
}

void kdc_buf_patch_u32(kdc_buf *b, size_t at, uint32_t v) {
  KDC_ASSERT(at <= b->size && b->size - at >= 4);
  kdc_store_le32(b->data + at, v);
}
