/*
 * dtype.c: element types of array files (.npy, .safetensors): sizes, names,
 * overflow-checked shape sizes, and conversion of floating types to f32.
 */
#include "common/io.h"

#include <string.h>

static const struct {
  const char *name;
  size_t size;
} dtypes[] = {
    [KDC_IO_DTYPE_F32] = {"f32", 4}, [KDC_IO_DTYPE_F64] = {"f64", 8},
    [KDC_IO_DTYPE_F16] = {"f16", 2}, [KDC_IO_DTYPE_BF16] = {"bf16", 2},
    [KDC_IO_DTYPE_I32] = {"i32", 4}, [KDC_IO_DTYPE_I64] = {"i64", 8},
    [KDC_IO_DTYPE_I8] = {"i8", 1},   [KDC_IO_DTYPE_U8] = {"u8", 1},
    [KDC_IO_DTYPE_BOOL] = {"bool", 1},
};
_Static_assert(sizeof dtypes / sizeof dtypes[0] == KDC_IO_DTYPE_COUNT,
               "one row per kdc_io_dtype");

size_t kdc_io_dtype_size(kdc_io_dtype dt) {
  return (unsigned)dt < KDC_IO_DTYPE_COUNT ? dtypes[dt].size : 0;
}

const char *kdc_io_dtype_name(kdc_io_dtype dt) {
  return (unsigned)dt < KDC_IO_DTYPE_COUNT ? dtypes[dt].name : "?";
}

bool kdc_io_shape_bytes(kdc_io_dtype dt, int rank, const int64_t *dims,
                        size_t *out_nbytes, int *out_bad_dim) {
  uint64_t elems = 1;
  bool zero = false;
  *out_nbytes = 0;
  *out_bad_dim = -1;
  for (int i = 0; i < rank; i++) {
    if (dims[i] < 0) {
      *out_bad_dim = i;
      return false;
    }
    if (dims[i] == 0) zero = true;
    /* Keep multiplying past a zero dim so an absurd shape is still refused. */
    uint64_t d = dims[i] == 0 ? 1 : (uint64_t)dims[i];
    if (elems > (uint64_t)INT64_MAX / d) {
      *out_bad_dim = i;
      return false;
    }
    elems *= d;
  }
  uint64_t size = kdc_io_dtype_size(dt);
  if (elems > (uint64_t)INT64_MAX / size || elems * size > SIZE_MAX) return false;
  *out_nbytes = zero ? 0 : (size_t)(elems * size);
  return true;
}

/* IEEE binary16 to binary32, exact (every half is a float). */
float kdc_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f, mant = h & 0x3ff, bits;
  if (exp == 0x1f) {                 /* inf, nan (payload kept) */
    bits = sign | 0x7f800000u | mant << 13;
  } else if (exp != 0) {             /* normal */
    bits = sign | (exp + 112) << 23 | mant << 13;
  } else if (mant == 0) {            /* signed zero */
    bits = sign;
  } else {                           /* subnormal: normalise */
    int e = -1;
    do {
      mant <<= 1;
      e++;
    } while (!(mant & 0x400));
    bits = sign | (uint32_t)(112 - e) << 23 | (mant & 0x3ff) << 13;
  }
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

float kdc_bf16_to_f32(uint16_t h) {
  uint32_t bits = (uint32_t)h << 16;
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

/* Add 0x7fff plus the lowest kept bit, then cut: ties go to the even
 * neighbour, a carry into the exponent is the correct rounding up (to inf at
 * the top).  NaN: cut, with the quiet bit set so no NaN becomes inf. */
uint16_t kdc_f32_to_bf16(float x) {
  uint32_t b;
  memcpy(&b, &x, 4);
  if ((b & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((b >> 16) | 0x40);
  return (uint16_t)((b + 0x7fffu + ((b >> 16) & 1)) >> 16);
}

uint16_t kdc_f32_to_f16(float x) {
  uint32_t b;
  memcpy(&b, &x, 4);
  uint16_t sign = (uint16_t)((b >> 16) & 0x8000);
  uint32_t a = b & 0x7fffffffu;
  if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00 | ((a >> 13) & 0x3ff)); /* NaN, quiet */
  if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00); /* >= 65520 (or inf): inf */
  if (a >= 0x38800000u) {                                 /* normal half: rebias, round */
    uint32_t r = a - 0x38000000u;                         /* exponent 127 -> 15 */
    r += 0xfffu + ((r >> 13) & 1);
    return (uint16_t)(sign | (r >> 13));
  }
  if (a < 0x33000000u) return sign;                       /* below half the smallest subnormal */
  /* subnormal half: the significand with its hidden bit, shifted right by
   * (126 - e) - 13 more places, rounded to nearest even on the dropped bits */
  uint32_t e = a >> 23, m = (a & 0x7fffffu) | 0x800000u;
  uint32_t shift = 126 - e; /* 14..24 (a >= 2^-25) */
  uint32_t q = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
  if (rem > half || (rem == half && (q & 1))) q++;
  return (uint16_t)(sign | q);
}

bool kdc_io_convert_from_f32(kdc_io_dtype dt, const float *src, size_t n, void *dst) {
  uint8_t *p = dst;
  switch (dt) {
  case KDC_IO_DTYPE_F32: memmove(dst, src, n * 4); return true;
  case KDC_IO_DTYPE_F64:
    for (size_t i = n; i-- > 0;) { /* backwards: |dst| may start at |src| */
      double d = src[i];
      memcpy(p + 8 * i, &d, 8);
    }
    return true;
  case KDC_IO_DTYPE_F16:
  case KDC_IO_DTYPE_BF16:
    for (size_t i = 0; i < n; i++) {
      uint16_t h = dt == KDC_IO_DTYPE_F16 ? kdc_f32_to_f16(src[i]) : kdc_f32_to_bf16(src[i]);
      memcpy(p + 2 * i, &h, 2);
    }
    return true;
  default: return false;
  }
}

bool kdc_io_convert_to_f32(kdc_io_dtype dt, const void *src, size_t n, float *dst) {
  const uint8_t *p = src;
  switch (dt) {
  case KDC_IO_DTYPE_F32:
    memmove(dst, src, n * 4);
    return true;
  case KDC_IO_DTYPE_F64:
    for (size_t i = 0; i < n; i++) {
      uint64_t bits = kdc_load_le64(p + 8 * i);
      double d;
      memcpy(&d, &bits, 8);
      dst[i] = (float)d;
    }
    return true;
  case KDC_IO_DTYPE_F16:
    for (size_t i = 0; i < n; i++) dst[i] = kdc_f16_to_f32(kdc_load_le16(p + 2 * i));
    return true;
  case KDC_IO_DTYPE_BF16:
    for (size_t i = 0; i < n; i++) {
      uint32_t bits = (uint32_t)kdc_load_le16(p + 2 * i) << 16;
      memcpy(&dst[i], &bits, 4);
    }
    return true;
  default:
    return false;
  }
}

bool kdc_io_element(kdc_io_dtype dt, const void *data, size_t i, int64_t *iv, double *fv) {
  const uint8_t *p = (const uint8_t *)data + i * kdc_io_dtype_size(dt);
  *iv = 0;
  *fv = 0;
  switch (dt) {
  case KDC_IO_DTYPE_I32: *iv = (int32_t)kdc_load_le32(p); return true;
  case KDC_IO_DTYPE_I64: *iv = (int64_t)kdc_load_le64(p); return true;
  case KDC_IO_DTYPE_I8: *iv = (int8_t)*p; return true;
  case KDC_IO_DTYPE_U8:
  case KDC_IO_DTYPE_BOOL: *iv = *p; return true;
  case KDC_IO_DTYPE_F64: {
    uint64_t bits = kdc_load_le64(p);
    memcpy(fv, &bits, 8);
    return false;
  }
  default: {
    float f = 0;
    kdc_io_convert_to_f32(dt, p, 1, &f);
    *fv = f;
    return false;
  }
  }
}
