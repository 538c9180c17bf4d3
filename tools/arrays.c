/*
 * tools/arrays.c: .npy arrays converted to a plan tensor's dtype, the same
 * way for `kdc run --input`, `--fit` and `--evaluate` (--x and --y).
 *
 * As Keras converts a model input (Functional._convert_inputs_to_tensors:
 * convert_to_tensor(x, dtype=input.dtype)): token ids saved as int64 or
 * uint8 feed a float32 Input, float ids feed an int32 one.  Floats round to
 * nearest f32; integers and booleans become floats exactly up to 2^24 (to
 * nearest beyond); floats become integers by truncation toward zero
 * (numpy's astype).  A value an integer tensor cannot hold (NaN, infinite,
 * out of range) is an error naming it.
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

#include "common/io.h"
#include "runtime/runtime.h"
#include "tools/cli.h"

kdc_status cli_convert_array(const char *path, const kdc_rt_tensor_info *t, int64_t classes,
                             kdc_npy_array *a) {
  if (a->dtype == t->dtype && classes <= 0) return NULL;
  bool to_f32 = t->dtype == KDC_IO_DTYPE_F32;
  if (!to_f32 && t->dtype != KDC_IO_DTYPE_I32 && t->dtype != KDC_IO_DTYPE_I64)
    return KDC_ERR(KDC_INVALID_INPUT, "%s: dtype %s does not match the plan's \"%s\" (%s)", path,
                   kdc_io_dtype_name(a->dtype), t->name, kdc_io_dtype_name(t->dtype));
  size_t n = a->nbytes / kdc_io_dtype_size(a->dtype), osz = kdc_io_dtype_size(t->dtype);
  size_t per_row = a->rank && a->dims[0] ? n / (size_t)a->dims[0] : 1;
  void *out = malloc(n ? n * osz : 1);
  if (!out)
    return KDC_ERR(KDC_OUT_OF_MEMORY, "%s: cannot allocate %zu bytes", path, n * osz);
  kdc_status st = NULL;
  for (size_t i = 0; i < n && !st; i++) {
    int64_t iv = 0;
    double fv = 0;
    bool is_int = kdc_io_element(a->dtype, a->data, i, &iv, &fv);
    if (to_f32) {
      ((float *)out)[i] = is_int ? (float)iv : (float)fv;
      continue;
    }
    if (!is_int) {
      /* the largest doubles below 2^63 in magnitude convert without overflow */
      if (!(fv > -9223372036854774784.0 && fv < 9223372036854774784.0) ||
          (classes > 0 && fv != trunc(fv))) {
        st = classes > 0
                 ? KDC_ERR(KDC_INVALID_INPUT, "%s: row %zu: %g is not an integer class id (the "
                           "plan's \"%s\" takes class ids)", path, i / per_row, fv, t->name)
                 : KDC_ERR(KDC_INVALID_INPUT, "%s: element %zu (%g) is not an integer the plan's "
                           "\"%s\" (%s) can hold", path, i, fv, t->name,
                           kdc_io_dtype_name(t->dtype));
        break;
      }
      iv = (int64_t)fv;
    }
    if (classes > 0 && (iv < 0 || iv >= classes)) {
      st = KDC_ERR(KDC_INVALID_INPUT, "%s: row %zu: class id %" PRId64 " is outside [0, %" PRId64
                   ") (the plan's \"%s\" has %" PRId64 " classes)", path, i / per_row, iv,
                   classes, t->name, classes);
    } else if (t->dtype == KDC_IO_DTYPE_I32) {
      if (iv < INT32_MIN || iv > INT32_MAX)
        st = KDC_ERR(KDC_INVALID_INPUT, "%s: element %zu (%" PRId64 ") does not fit int32", path,
                     i, iv);
      else
        ((int32_t *)out)[i] = (int32_t)iv;
    } else {
      ((int64_t *)out)[i] = iv;
    }
  }
  if (st) {
    free(out);
    return st;
  }
  free(a->data);
  a->data = out;
  a->dtype = t->dtype;
  a->nbytes = n * osz;
  return NULL;
}
