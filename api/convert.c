/*
 * api/convert.c: caller arrays checked against a plan's tensor and
 * converted to its dtype, the same way for predict's inputs and fit's and
 * evaluate's inputs and labels (`kdc run --input`, --x, --y).  An array of
 * the plan's dtype is used in place (no copy), class ids excepted (checked).
 *
 * As Keras converts a model input (Functional._convert_inputs_to_tensors:
 * convert_to_tensor(x, dtype=input.dtype)): token ids saved as int64 or
 * uint8 feed a float32 Input, float ids feed an int32 one.
 *
 * Class ids (the labels of a sparse crossentropy): any integer, bool or
 * float dtype whose values are exact integers (uint8 is the dtype of
 * keras.datasets.mnist's labels); an id outside [0, classes) is an error
 * naming its row, as Keras on TensorFlow raises (jax would silently take a
 * zero one-hot row).
 */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "api/api.h"
#include "common/io.h"

/* Floats round to nearest f32; integers and booleans become floats
 * exactly up to 2^24 (to nearest beyond); floats become integers by
 * truncation toward zero (numpy's astype).  A value an integer tensor
 * cannot hold (NaN, infinite, out of range) is an error naming it; with
 * |classes| > 0 values must be exact integers in [0, classes). */
static kdc_status convert(const char *what, const kdc_rt_tensor_info *t, kdc_io_dtype from,
                          const void *data, size_t n, size_t per_row, int64_t classes,
                          void **out) {
  bool to_f32 = t->dtype == KDC_IO_DTYPE_F32;
  if (!to_f32 && t->dtype != KDC_IO_DTYPE_I32 && t->dtype != KDC_IO_DTYPE_I64)
    return KDC_ERR(KDC_INVALID_INPUT, "%s: dtype %s does not match the plan's \"%s\" (%s)", what,
                   kdc_io_dtype_name(from), t->name, kdc_io_dtype_name(t->dtype));
  size_t osz = kdc_io_dtype_size(t->dtype);
  void *buf = n < SIZE_MAX / 8 ? malloc(n ? n * osz : 1) : NULL;
  if (!buf)
    return KDC_ERR(KDC_OUT_OF_MEMORY, "%s: cannot allocate %zu elements to convert", what, n);
  kdc_status st = NULL;
  for (size_t i = 0; i < n && !st; i++) {
    int64_t iv = 0;
    double fv = 0;
    bool is_int = kdc_io_element(from, data, i, &iv, &fv);
    if (to_f32) {
      ((float *)buf)[i] = is_int ? (float)iv : (float)fv;
      continue;
    }
    if (!is_int) {
      /* the largest doubles below 2^63 in magnitude convert without overflow */
      if (!(fv > -9223372036854774784.0 && fv < 9223372036854774784.0) ||
          (classes > 0 && fv != trunc(fv))) {
        st = classes > 0
                 ? KDC_ERR(KDC_INVALID_INPUT, "%s: row %zu: %g is not an integer class id (the "
                           "plan's \"%s\" takes class ids)", what, i / per_row, fv, t->name)
                 : KDC_ERR(KDC_INVALID_INPUT, "%s: element %zu (%g) is not an integer the plan's "
                           "\"%s\" (%s) can hold", what, i, fv, t->name,
                           kdc_io_dtype_name(t->dtype));
        break;
      }
      iv = (int64_t)fv;
    }
    if (classes > 0 && (iv < 0 || iv >= classes)) {
      st = KDC_ERR(KDC_INVALID_INPUT, "%s: row %zu: class id %" PRId64 " is outside [0, %" PRId64
                   ") (the plan's \"%s\" has %" PRId64 " classes)", what, i / per_row, iv,
                   classes, t->name, classes);
    } else if (t->dtype == KDC_IO_DTYPE_I32) {
      if (iv < INT32_MIN || iv > INT32_MAX)
        st = KDC_ERR(KDC_INVALID_INPUT, "%s: element %zu (%" PRId64 ") does not fit int32", what,
                     i, iv);
      else
        ((int32_t *)buf)[i] = (int32_t)iv;
    } else {
      ((int64_t *)buf)[i] = iv;
    }
  }
  if (st) {
    free(buf);
    return st;
  }
  *out = buf;
  return NULL;
}

kdc_status kdc_api_convert(const char *what, const kdc_rt_tensor_info *t, const kdc_array *a,
                           bool labels, int64_t classes, const void **out, void **owned) {
  *out = NULL;
  *owned = NULL;
  if (a->dtype < 0 || a->dtype >= KDC_IO_DTYPE_COUNT)
    return KDC_ERR(KDC_INVALID_INPUT, "%s: unknown dtype %d", what, a->dtype);
  if (a->rank < 1 || a->rank > KDC_IO_MAX_RANK)
    return KDC_ERR(KDC_INVALID_INPUT, "%s: rank %d (expected 1 to %d, rows first)", what, a->rank,
                   KDC_IO_MAX_RANK);
  uint64_t n = 1;
  for (int d = 0; d < a->rank; d++) {
    if (a->dims[d] < 0 || (a->dims[d] && n > UINT64_MAX / 16 / (uint64_t)a->dims[d]))
      return KDC_ERR(KDC_INVALID_INPUT, "%s: dim %d is %" PRId64, what, d, a->dims[d]);
    n *= (uint64_t)a->dims[d];
  }
  if (!a->data && n)
    return KDC_ERR(KDC_INVALID_INPUT, "%s: no data", what);
  char want[160], got[160];
  kdc_api_shape_str(t->rank, t->dims, want, sizeof want);
  kdc_api_shape_str(a->rank, a->dims, got, sizeof got);
  if (labels) {
    /* the per-row shape (a [N,1] array for [B] sparse labels too) */
    uint64_t per = t->bytes / (uint64_t)t->dims[0] / kdc_io_dtype_size(t->dtype), row = 1;
    for (int d = 1; d < a->rank; d++) row *= (uint64_t)a->dims[d];
    if (row != per)
      return KDC_ERR(KDC_INVALID_INPUT, "%s: %" PRIu64 " values per row; the plan's \"%s\" takes "
                     "%" PRIu64 " per row", what, row, t->name, per);
  } else {
    bool ok = a->rank == t->rank;
    for (int d = 1; ok && d < t->rank; d++) ok = a->dims[d] == t->dims[d];
    if (!ok)
      return KDC_ERR(KDC_INVALID_INPUT, "%s: shape %s does not match the plan's input \"%s\" "
                     "(batch, ...) = %s", what, got, t->name, want);
  }
  if (a->dtype == (int)t->dtype && classes <= 0) {
    *out = a->data;
    return NULL;
  }
  size_t per_row = a->dims[0] ? (size_t)(n / (uint64_t)a->dims[0]) : 1;
  void *buf = NULL;
  KDC_RETURN_IF_ERROR(convert(what, t, (kdc_io_dtype)a->dtype, a->data, (size_t)n,
                              per_row ? per_row : 1, classes, &buf));
  *out = buf;
  *owned = buf;
  return NULL;
}
