/*
 * frontend/lower_shape.c: lowering of the reshaping, pooling-over-everything
 * and merging layers that need no window ops:
 *   ZeroPadding1D/2D/3D  pad with 0 (keras ops.pad)
 *   Cropping1D/2D/3D     slice
 *   UpSampling1D/2D/3D   nearest: ops.repeat per spatial axis, i.e. a
 *                        broadcast into a new axis after it and a reshape;
 *                        UpSampling2D bilinear: jax.image.resize /
 *                        tf.image.resize with half-pixel centres, which for
 *                        an integer factor s reads x at (i + 0.5) / s - 0.5,
 *                        edge-clamped: a constant (out x in) matrix per axis
 *                        (kdc_fe_resize_axis, lower_image.c)
 *   RepeatVector         (B, D) broadcast to (B, n, D)
 *   GlobalAverage/MaxPooling1D/2D/3D  ops.mean / ops.max over the spatial
 *                        axes, keepdims
 *   PReLU                relu(x) - alpha * relu(-x)
 *   ThresholdedReLU      x * (x > theta)   (tf.keras 2; theta 1.0)
 *   Dot                  keras batch_dot: dot_general with the batch dim,
 *                        output (x free dims, y free dims), rank 1 -> (B, 1);
 *                        normalize: x * rsqrt(max(sum(x^2), 1e-14)) first
 * Sources: keras/src/layers/reshaping/, pooling/global_*_pooling*.py,
 * activations/prelu.py, merging/dot.py.
 */
#include <json-c/json.h>
#include <string.h>

#include "frontend/frontend.h"

static int class_rank(const char *cls) {
  const char *d = strpbrk(cls, "123");
  return d ? *d - '0' : 2;
}

static kdc_status first_spatial(const kdc_keras_layer *l, int *sp0) {
  const char *df;
  KDC_RETURN_IF_ERROR(kdc_fe_cfg_str(l, "data_format", "channels_last", &df));
  *sp0 = !strcmp(df, "channels_first") ? 2 : 1;
  return NULL;
}

kdc_status kdc_fe_lower_pad_crop(struct kdc_lower_ctx *c, const kdc_keras_layer *l,
                                 const kdc_keras_node *n, const kdc_value_id *in,
                                 const kdc_value_id *kw, kdc_value_id *out) {
  kdc_func *f = c->f;
  const kdc_type t = *kdc_ir_type(f, in[0]);
  int k = class_rank(l->class_name), sp0;
  bool crop = !strncmp(l->class_name, "Cropping", 8);
  int64_t lo[3], hi[3], a[KDC_MAX_RANK] = {0}, b[KDC_MAX_RANK], s[KDC_MAX_RANK] = {0};
  KDC_RETURN_IF_ERROR(first_spatial(l, &sp0));
  KDC_RETURN_IF_ERROR(kdc_fe_cfg_pairs(l, crop ? "cropping" : "padding", k, crop && k == 2 ? 0 : 1,
                                       lo, hi));
  for (int d = 0; d < t.rank; d++) b[d] = crop ? t.dims[d] : 0, s[d] = 1;
  for (int i = 0; i < k; i++) {
    a[sp0 + i] = lo[i];
    b[sp0 + i] = crop ? t.dims[sp0 + i] - hi[i] : hi[i];
  }
  if (crop) {
    out[0] = kdc_ir_slice(f, in[0], a, b, s);
  } else {
    int64_t zero[KDC_MAX_RANK] = {0};
    out[0] = kdc_ir_pad(f, in[0], kdc_ir_scalar(f, t.dtype, 0), a, b, zero);
  }
  return NULL;
}

/* ops.repeat(x, r, axis=d): each element of dim d repeated r times. */
static kdc_value_id repeat(kdc_func *f, kdc_value_id x, int d, int64_t r) {
  if (r == 1 || x == KDC_NO_VALUE) return x;
  const kdc_type t = *kdc_ir_type(f, x);
  int64_t dims[KDC_MAX_RANK], map[KDC_MAX_RANK];
  for (int i = 0, k = 0; i < t.rank; i++) {
    map[i] = k;
    dims[k++] = t.dims[i];
    if (i == d) dims[k++] = r;
  }
  kdc_value_id y = kdc_ir_broadcast(f, x, t.rank + 1, dims, map);
  kdc_type o = t;
  o.dims[d] *= r;
  return kdc_ir_reshape(f, y, o.rank, o.dims);
}

kdc_status kdc_fe_lower_upsampling(struct kdc_lower_ctx *c, const kdc_keras_layer *l,
                                   const kdc_keras_node *n, const kdc_value_id *in,
                                   const kdc_value_id *kw, kdc_value_id *out) {
  int k;
  int64_t size[3];
  bool last, bil;
  KDC_RETURN_IF_ERROR(kdc_fe_upsampling_config(l, &k, size, &last, &bil));
  kdc_value_id x = in[0];
  for (int i = 0; i < k; i++)
    x = bil ? kdc_fe_resize_axis(c->f, x, (last ? 1 : 2) + i,
                                 kdc_ir_type(c->f, x)->dims[(last ? 1 : 2) + i] * size[i],
                                 KDC_FE_BILINEAR, false)
            : repeat(c->f, x, (last ? 1 : 2) + i, size[i]);
  out[0] = x;
  return NULL;
}

kdc_status kdc_fe_lower_repeat_vector(struct kdc_lower_ctx *c, const kdc_keras_layer *l,
                                      const kdc_keras_node *n, const kdc_value_id *in,
                                      const kdc_value_id *kw, kdc_value_id *out) {
  const kdc_type *t = kdc_ir_type(c->f, in[0]);
  int64_t r;
  KDC_RETURN_IF_ERROR(kdc_fe_cfg_int(l, "n", 1, &r));
  int64_t dims[3] = {t->dims[0], r, t->dims[1]}, map[2] = {0, 2};
  out[0] = kdc_ir_broadcast(c->f, in[0], 3, dims, map);
  return NULL;
}

kdc_status kdc_fe_lower_global_pool(struct kdc_lower_ctx *c, const kdc_keras_layer *l,
                                    const kdc_keras_node *n, const kdc_value_id *in,
                                    const kdc_value_id *kw, kdc_value_id *out) {
  kdc_func *f = c->f;
  const kdc_type t = *kdc_ir_type(f, in[0]);
  int k = class_rank(l->class_name), sp0;
  bool keep, avg = strstr(l->class_name, "Av") != NULL; /* GlobalAverage.., GlobalAvgPool.. */
  KDC_RETURN_IF_ERROR(first_spatial(l, &sp0));
  KDC_RETURN_IF_ERROR(kdc_fe_cfg_bool(l, "keepdims", false, &keep));
  int64_t ax[3], cnt = 1;
  for (int i = 0; i < k; i++) ax[i] = sp0 + i, cnt *= t.dims[sp0 + i];
  kdc_value_id m = k == 1 && avg ? kdc_fe_input_mask(c, 0) : KDC_NO_VALUE;
  kdc_value_id y;
  if (m != KDC_NO_VALUE) {
    /* GlobalAveragePooling1D.call with a mask: where(mask, x, 0) summed over
     * the steps / the count of true mask entries (0/0 = NaN as in Keras) */
    const kdc_type mt = *kdc_ir_type(f, kdc_fe_mask_bool(f, m));
    if (mt.rank != 2 || mt.dims[0] != t.dims[0] || mt.dims[1] != t.dims[sp0])
      return kdc_fe_layer_err(l, KDC_INVALID_INPUT, "the mask does not match the steps of the "
                              "input (expected [batch, steps])");
    int64_t map[2] = {0, sp0};
    kdc_value_id p = kdc_ir_broadcast(f, kdc_fe_mask_bool(f, m), t.rank, t.dims, map);
    kdc_value_id xs = kdc_ir_select(f, p, in[0], kdc_ir_splat(f, t.dtype, t.rank, t.dims, 0));
    kdc_value_id num = kdc_ir_reduce(f, KDC_RED_SUM, xs, 1, ax);
    kdc_value_id den = kdc_ir_reduce(f, KDC_RED_SUM, kdc_ir_convert(f, p, t.dtype), 1, ax);
    y = kdc_ir_binary(f, KDC_OP_DIV, num, den);
  } else {
    y = kdc_ir_reduce(f, avg ? KDC_RED_SUM : KDC_RED_MAX, in[0], k, ax);
    if (avg) y = kdc_ir_binary_scalar(f, KDC_OP_DIV, y, (double)cnt);
  }
  if (keep) {
    kdc_type o = t;
    for (int i = 0; i < k; i++) o.dims[sp0 + i] = 1;
    y = kdc_ir_reshape(f, y, o.rank, o.dims);
  }
  out[0] = y;
  return NULL;
}

kdc_status kdc_fe_lower_prelu(struct kdc_lower_ctx *c, const kdc_keras_layer *l,
                              const kdc_keras_node *n, const kdc_value_id *in,
                              const kdc_value_id *kw, kdc_value_id *out) {
  kdc_func *f = c->f;
  const kdc_type t = *kdc_ir_type(f, in[0]);
  int64_t map[KDC_MAX_RANK];
  for (int i = 1; i < t.rank; i++) map[i - 1] = i;
  kdc_value_id alpha = kdc_ir_broadcast(f, kdc_fe_weight(c, l, "alpha"), t.rank, t.dims, map);
  kdc_value_id pos = kdc_ir_binary_scalar(f, KDC_OP_MAX, in[0], 0);
  kdc_value_id rn = kdc_ir_binary_scalar(f, KDC_OP_MAX, kdc_ir_unary(f, KDC_OP_NEG, in[0]), 0);
  kdc_value_id neg = kdc_ir_binary(f, KDC_OP_MUL, kdc_ir_unary(f, KDC_OP_NEG, alpha), rn);
  out[0] = kdc_ir_binary(f, KDC_OP_ADD, pos, neg);
  return NULL;
}

/* LayerScale: x * gamma with numpy broadcasting (gamma on the last axis). */
kdc_status kdc_fe_lower_layer_scale(struct kdc_lower_ctx *c, const kdc_keras_layer *l,
                                    const kdc_keras_node *n, const kdc_value_id *in,
                                    const kdc_value_id *kw, kdc_value_id *out) {
  (void)n;
  (void)kw;
  out[0] = kdc_ir_binary_bcast(c->f, KDC_OP_MUL, in[0], kdc_fe_weight(c, l, "variable"));
  return NULL;
}

kdc_status kdc_fe_lower_thresholded_relu(struct kdc_lower_ctx *c, const kdc_keras_layer *l,
                                         const kdc_keras_node *n, const kdc_value_id *in,
                                         const kdc_value_id *kw, kdc_value_id *out) {
  kdc_func *f = c->f;
  const kdc_type t = *kdc_ir_type(f, in[0]);
  double theta;
  KDC_RETURN_IF_ERROR(kdc_fe_cfg_double(l, "theta", 1.0, &theta));
  kdc_value_id p = kdc_ir_compare(f, KDC_CMP_GT, in[0],
                                  kdc_ir_splat(f, t.dtype, t.rank, t.dims, theta));
  out[0] = kdc_ir_binary(f, KDC_OP_MUL, in[0], kdc_ir_convert(f, p, t.dtype));
  return NULL;
}

/* ops.normalize(x, axis, order=2) with Keras' epsilon 1e-7. */
static kdc_value_id l2_normalize(kdc_func *f, kdc_value_id x, int64_t axis) {
  if (x == KDC_NO_VALUE) return x;
  const kdc_type t = *kdc_ir_type(f, x);
  int64_t keep[KDC_MAX_RANK];
  for (int d = 0, k = 0; d < t.rank; d++)
    if (d != axis) keep[k++] = d;
  kdc_value_id s = kdc_ir_reduce(f, KDC_RED_SUM, kdc_ir_binary(f, KDC_OP_MUL, x, x), 1, &axis);
  kdc_value_id inv = kdc_ir_unary(f, KDC_OP_RSQRT, kdc_ir_binary_scalar(f, KDC_OP_MAX, s, 1e-14));
  return kdc_ir_binary(f, KDC_OP_MUL, x, kdc_ir_broadcast(f, inv, t.rank, t.dims, keep));
}

kdc_status kdc_fe_lower_dot_layer(struct kdc_lower_ctx *c, const kdc_keras_layer *l,
                                  const kdc_keras_node *n, const kdc_value_id *in,
                                  const kdc_value_id *kw, kdc_value_id *out) {
  kdc_func *f = c->f;
  int r0 = kdc_ir_type(f, in[0])->rank, r1 = kdc_ir_type(f, in[1])->rank;
  int64_t ax[2];
  bool norm;
  KDC_RETURN_IF_ERROR(kdc_fe_dot_axes(l, r0, r1, ax));
  KDC_RETURN_IF_ERROR(kdc_fe_cfg_bool(l, "normalize", false, &norm));
  kdc_value_id x = in[0], y = in[1];
  if (norm) x = l2_normalize(f, x, ax[0]), y = l2_normalize(f, y, ax[1]);
  kdc_attr_dot d;
  memset(&d, 0, sizeof d);
  d.lhs_batch.n = d.rhs_batch.n = d.lhs_contract.n = d.rhs_contract.n = 1;
  d.lhs_contract.v[0] = ax[0];
  d.rhs_contract.v[0] = ax[1];
  kdc_value_id z = kdc_ir_dot(f, x, y, &d);
  if (z != KDC_NO_VALUE && kdc_ir_type(f, z)->rank == 1)
    z = kdc_ir_reshape(f, z, 2, (int64_t[]){kdc_ir_type(f, z)->dims[0], 1});
  out[0] = z;
  return NULL;
}
