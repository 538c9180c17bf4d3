/* Types and dtypes: names, sizes, element counts, printing. */
#include <stdio.h>
#include <string.h>

#include "common/io.h"
#include "ir/ir.h"

static const char *const dtype_names[KDC_DTYPE_COUNT] = {"f32", "i32", "i64", "bool", "bf16",
                                                         "f16"};
static const size_t dtype_sizes[KDC_DTYPE_COUNT] = {4, 4, 8, 1, 2, 2};

bool kdc_dtype_is_float(kdc_dtype d) {
  return d == KDC_DTYPE_F32 || d == KDC_DTYPE_BF16 || d == KDC_DTYPE_F16;
}

bool kdc_dtype_is_half(kdc_dtype d) { return d == KDC_DTYPE_BF16 || d == KDC_DTYPE_F16; }

float kdc_float_load(const void *p, kdc_dtype d, int64_t i) {
  if (d == KDC_DTYPE_F32) return ((const float *)p)[i];
  uint16_t h = ((const uint16_t *)p)[i];
  return d == KDC_DTYPE_BF16 ? kdc_bf16_to_f32(h) : kdc_f16_to_f32(h);
}

void kdc_float_store(void *p, kdc_dtype d, int64_t i, float v) {
  if (d == KDC_DTYPE_F32) ((float *)p)[i] = v;
  else ((uint16_t *)p)[i] = d == KDC_DTYPE_BF16 ? kdc_f32_to_bf16(v) : kdc_f32_to_f16(v);
}

float kdc_float_round(kdc_dtype d, float v) {
  if (d == KDC_DTYPE_BF16) return kdc_bf16_to_f32(kdc_f32_to_bf16(v));
  if (d == KDC_DTYPE_F16) return kdc_f16_to_f32(kdc_f32_to_f16(v));
  return v;
}

const char *kdc_dtype_name(kdc_dtype d) {
  return (unsigned)d < KDC_DTYPE_COUNT ? dtype_names[d] : "?";
}

size_t kdc_dtype_size(kdc_dtype d) { return (unsigned)d < KDC_DTYPE_COUNT ? dtype_sizes[d] : 0; }

bool kdc_dtype_from_name(const char *s, kdc_dtype *out) {
  for (int i = 0; i < KDC_DTYPE_COUNT; i++)
    if (strcmp(s, dtype_names[i]) == 0) {
      *out = (kdc_dtype)i;
      return true;
    }
  return false;
}

int64_t kdc_type_numel(const kdc_type *t) {
  int64_t n = 1;
  for (int i = 0; i < t->rank; i++) n *= t->dims[i];
  return n;
}

size_t kdc_type_bytes(const kdc_type *t) {
  return (size_t)kdc_type_numel(t) * kdc_dtype_size(t->dtype);
}

bool kdc_type_equal(const kdc_type *a, const kdc_type *b) {
  if (a->dtype != b->dtype || a->rank != b->rank) return false;
  for (int i = 0; i < a->rank; i++)
    if (a->dims[i] != b->dims[i]) return false;
  return true;
}

kdc_type kdc_type_make(kdc_dtype d, int rank, const int64_t *dims) {
  kdc_type t;
  memset(&t, 0, sizeof t);
  t.dtype = d;
  t.rank = rank;
  for (int i = 0; i < rank; i++) t.dims[i] = dims[i];
  return t;
}

char *kdc_type_str(const kdc_type *t, char *buf, size_t n) {
  size_t k = (size_t)snprintf(buf, n, "%s[", kdc_dtype_name(t->dtype));
  for (int i = 0; i < t->rank && k < n; i++)
    k += (size_t)snprintf(buf + k, n - k, i ? ",%lld" : "%lld", (long long)t->dims[i]);
  if (k < n) snprintf(buf + k, n - k, "]");
  return buf;
}

void kdc_type_strides(const kdc_type *t, int64_t *out_strides) {
  int64_t s = 1;
  for (int i = t->rank - 1; i >= 0; i--) {
    out_strides[i] = s;
    s *= t->dims[i];
  }
}
