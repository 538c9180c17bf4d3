/*
 * frontend/lower_image.c: the image preprocessing layers of Keras 3
 * (keras/src/layers/preprocessing/image_preprocessing/): Resizing,
 * CenterCrop, and the random augmentation layers.
 *
 * Resizing(height, width, interpolation, crop_to_aspect_ratio,
 * pad_to_aspect_ratio, fill_value, antialias, data_format) is
 * keras.src.backend.jax.image.resize:
 *   crop_to_aspect_ratio: crop_h = max(min(H, int(W * h / w)), 1), likewise
 *     crop_w = max(min(W, int(H * w / h)), 1), a centred slice starting at
 *     int((H - crop_h) / 2), int((W - crop_w) / 2);
 *   pad_to_aspect_ratio: pad_h = max(H, int(W * h / w)), pad_w likewise;
 *     if int((pad_h - H) / 2) > 0 that many rows of fill_value above and
 *     below, else if int((pad_w - W) / 2) > 0 that many columns either side;
 *   then jax.image.resize(x, shape, method, antialias), each changed spatial
 *   axis on its own (a dim of unchanged size is left alone, as jax does):
 *     nearest: out[i] = x[floor((i + 0.5) * in / out)];
 *     bilinear / bicubic / lanczos3 / lanczos5: jax's scale_and_translate
 *       weight matrix: sample s_i = (i + 0.5) * in / out - 0.5, weight of
 *       input j = k(|s_i - j| / ks) with ks = max(in / out, 1) when
 *       antialias else 1, each row divided by its sum (0 when the sum is
 *       below 1000 float32 eps); k = triangle max(0, 1 - x), Keys cubic
 *       (a = -0.5), or Lanczos sinc(x) sinc(x / r) with r = 3 or 5.
 *   Each axis is one dot_general with a constant (out x in) matrix, so the
 *   layer is differentiable and keeps any split of the batch or channels.
 * CenterCrop(height, width): when H >= h and W >= w a slice starting at
 *   (H - h) // 2, (W - w) // 2; otherwise Keras' smart_resize: the
 *   crop_to_aspect_ratio crop above, then a bilinear resize.
 * Random augmentation layers (RandomFlip, RandomRotation, RandomZoom,
 *   RandomTranslation, RandomContrast, RandomBrightness, ...): identities at
 *   inference, as Keras' transform_images with training=False.  A call
 *   recorded with `training: true` (Keras 3.15 writes it for every one of
 *   them) is the same: Keras 3's predict passes training=False over it; a
 *   tf.keras 2 topology's is refused (lower_dropout.c).  In a training step
 *   RandomFlip flips each sample with probability 1/2 (u <= 0.5, one u per
 *   sample for both axes, as Keras), u drawn from kdc's counter-based
 *   stream like Dropout (lower_dropout.c); the others refuse training with
 *   a located error -- except RandomBrightness and RandomContrast, drawn
 *   the same way per image (random_value below).
 */
#include <json-c/json.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/io.h"
#include "frontend/frontend.h"

typedef kdc_fe_interp interp;

typedef struct resize_cfg {
  int64_t h, w;
  interp method;
  bool crop, pad, antialias, last;
  double fill;
} resize_cfg;

static kdc_status read_format(const kdc_keras_layer *l, bool *last) {
  const char *df;
  KDC_RETURN_IF_ERROR(kdc_fe_cfg_str(l, "data_format", "channels_last", &df));
  if (strcmp(df, "channels_last") && strcmp(df, "channels_first"))
    return kdc_fe_layer_err(l, KDC_INVALID_INPUT, "config.data_format: expected \"channels_last\" "
                            "or \"channels_first\", got \"%s\"", df);
  *last = !strcmp(df, "channels_last");
  return NULL;
}

static kdc_status read_resize(const kdc_keras_layer *l, resize_cfg *r) {
  memset(r, 0, sizeof *r);
  KDC_RETURN_IF_ERROR(kdc_fe_cfg_int(l, "height", INT64_MIN, &r->h));
  KDC_RETURN_IF_ERROR(kdc_fe_cfg_int(l, "width", INT64_MIN, &r->w));
  if (r->h <= 0 || r->w <= 0)
    return kdc_fe_layer_err(l, KDC_INVALID_INPUT, "config.height and config.width must be "
                            "positive, got %lld and %lld", (long long)r->h, (long long)r->w);
  KDC_RETURN_IF_ERROR(read_format(l, &r->last));
  r->method = KDC_FE_BILINEAR;
  if (!strcmp(l->class_name, "CenterCrop")) return NULL;
  const char *m, *fm;
  KDC_RETURN_IF_ERROR(kdc_fe_cfg_str(l, "interpolation", "bilinear", &m));
  static const char *const names[] = {"nearest", "bilinear", "bicubic", "lanczos3", "lanczos5"};
  int k = 0;
  while (k < 5 && strcmp(m, names[k])) k++;
  if (k == 5)
    return kdc_fe_layer_err(l, KDC_UNSUPPORTED, "config.interpolation \"%s\" is not supported "
                            "(nearest, bilinear, bicubic, lanczos3 and lanczos5 are)", m);
  r->method = (interp)k;
  KDC_RETURN_IF_ERROR(kdc_fe_cfg_bool(l, "crop_to_aspect_ratio", false, &r->crop));
  KDC_RETURN_IF_ERROR(kdc_fe_cfg_bool(l, "pad_to_aspect_ratio", false, &r->pad));
  KDC_RETURN_IF_ERROR(kdc_fe_cfg_bool(l, "antialias", false, &r->antialias));
  KDC_RETURN_IF_ERROR(kdc_fe_cfg_double(l, "fill_value", 0.0, &r->fill));
  KDC_RETURN_IF_ERROR(kdc_fe_cfg_str(l, "fill_mode", "constant", &fm));
  if (strcmp(fm, "constant"))
    return kdc_fe_layer_err(l, KDC_INVALID_INPUT, "config.fill_mode \"%s\": Keras' resize "
                            "accepts only \"constant\"", fm);
  if (r->crop && r->pad)
    return kdc_fe_layer_err(l, KDC_INVALID_INPUT, "config.crop_to_aspect_ratio and "
                            "config.pad_to_aspect_ratio cannot both be true");
  return NULL;
}

kdc_status kdc_fe_infer_resizing(kdc_infer_args *a) {
  const kdc_keras_layer *l = a->l;
  resize_cfg r;
  KDC_RETURN_IF_ERROR(read_resize(l, &r));
  if (a->node->n_in != 1)
    return kdc_fe_layer_err(l, KDC_INVALID_INPUT, "expected 1 input tensor, got %d", a->node->n_in);
  const kdc_kshape *x = &a->in[0];
  if (x->rank != 4)
    return kdc_fe_shape_err(a, kdc_arena_printf(a->m->arena, "%s expects a batch of images of "
                                                "rank 4", l->class_name), x, NULL);
  int hd = r.last ? 1 : 2;
  if (x->dims[hd] < 0 || x->dims[hd + 1] < 0)
    return kdc_fe_shape_err(a, "the image height and width must be known", x, NULL);
  kdc_kshape o = *x;
  o.dims[hd] = r.h;
  o.dims[hd + 1] = r.w;
  kdc_fe_set_outputs(a, 1, &o);
  return NULL;
}

/* jax.image's kernels (see the header). */
static double kernel(interp m, double x) {
  switch (m) {
  case KDC_FE_BILINEAR: return x < 1 ? 1 - x : 0;
  case KDC_FE_BICUBIC:
    if (x >= 2) return 0;
    if (x >= 1) return ((-0.5 * x + 2.5) * x - 4) * x + 2;
    return ((1.5 * x - 2.5) * x) * x + 1;
  case KDC_FE_LANCZOS3:
  case KDC_FE_LANCZOS5: {
    double rad = m == KDC_FE_LANCZOS3 ? 3 : 5;
    if (x > rad) return 0;
    if (x <= 1e-3) return 1;
    return rad * sin(M_PI * x) * sin(M_PI * x / rad) / (M_PI * M_PI * x * x);
  }
  case KDC_FE_NEAREST: break;
  }
  return 0;
}

kdc_value_id kdc_fe_resize_axis(kdc_func *f, kdc_value_id x, int d, int64_t on,
                                kdc_fe_interp m, bool antialias) {
  if (x == KDC_NO_VALUE) return x;
  const kdc_type t = *kdc_ir_type(f, x);
  int64_t in = t.dims[d];
  if (in == on) return x;
  float *w = calloc((size_t)(on * in), sizeof *w);
  double inv = (double)in / (double)on, ks = antialias && inv > 1 ? inv : 1;
  for (int64_t i = 0; i < on; i++) {
    if (m == KDC_FE_NEAREST) {
      int64_t j = (2 * i + 1) * in / (2 * on); /* floor((i + 0.5) * in / on) */
      w[i * in + (j < in ? j : in - 1)] = 1;
      continue;
    }
    double s = (i + 0.5) * inv - 0.5, tot = 0;
    double *row = calloc((size_t)in, sizeof *row);
    for (int64_t j = 0; j < in; j++) tot += row[j] = kernel(m, fabs(s - (double)j) / ks);
    for (int64_t j = 0; j < in; j++)
      w[i * in + j] = fabs(tot) > 1000.0 * 0x1p-23 ? (float)(row[j] / tot) : 0.0f;
    free(row);
  }
  kdc_value_id y = kdc_fe_axis_matrix(f, x, d, on, w);
  free(w);
  return y;
}

kdc_value_id kdc_fe_axis_matrix(kdc_func *f, kdc_value_id x, int d, int64_t on, const float *w) {
  if (x == KDC_NO_VALUE) return x;
  const kdc_type t = *kdc_ir_type(f, x);
  kdc_type mt = kdc_type_make(t.dtype, 2, (int64_t[]){on, t.dims[d]});
  kdc_value_id wm = kdc_ir_constant(f, &mt, w);
  kdc_attr_dot dd;
  memset(&dd, 0, sizeof dd);
  dd.lhs_contract.n = dd.rhs_contract.n = 1;
  dd.lhs_contract.v[0] = 1;
  dd.rhs_contract.v[0] = d;
  kdc_value_id y = kdc_ir_dot(f, wm, x, &dd); /* (on, dims without d) */
  int64_t perm[KDC_MAX_RANK];
  for (int i = 0, k = 1; i < t.rank; i++) perm[i] = i == d ? 0 : k++;
  return kdc_ir_transpose(f, y, perm);
}

/* The centred crop to the target aspect ratio (crop_to_aspect_ratio). */
static kdc_value_id aspect_crop(kdc_func *f, kdc_value_id x, int hd, int64_t th, int64_t tw) {
  const kdc_type t = *kdc_ir_type(f, x);
  int64_t H = t.dims[hd], W = t.dims[hd + 1];
  int64_t ch = (int64_t)((double)(W * th) / (double)tw), cw = (int64_t)((double)(H * tw) / (double)th);
  ch = ch < H ? ch : H, cw = cw < W ? cw : W;
  ch = ch > 1 ? ch : 1, cw = cw > 1 ? cw : 1;
  int64_t start[KDC_MAX_RANK] = {0}, limit[KDC_MAX_RANK], stride[KDC_MAX_RANK];
  for (int i = 0; i < t.rank; i++) limit[i] = t.dims[i], stride[i] = 1;
  start[hd] = (int64_t)((double)(H - ch) / 2), limit[hd] = start[hd] + ch;
  start[hd + 1] = (int64_t)((double)(W - cw) / 2), limit[hd + 1] = start[hd + 1] + cw;
  return kdc_ir_slice(f, x, start, limit, stride);
}

/* pad_to_aspect_ratio: fill_value rows (or columns) on both sides. */
static kdc_value_id aspect_pad(kdc_func *f, kdc_value_id x, int hd, int64_t th, int64_t tw,
                               double fill) {
  const kdc_type t = *kdc_ir_type(f, x);
  int64_t H = t.dims[hd], W = t.dims[hd + 1];
  int64_t ph = (int64_t)((double)(W * th) / (double)tw), pw = (int64_t)((double)(H * tw) / (double)th);
  ph = ph > H ? ph : H, pw = pw > W ? pw : W;
  int64_t hs = (int64_t)((double)(ph - H) / 2), ws = (int64_t)((double)(pw - W) / 2);
  int64_t lo[KDC_MAX_RANK] = {0}, zero[KDC_MAX_RANK] = {0};
  if (hs > 0) lo[hd] = hs;
  else if (ws > 0) lo[hd + 1] = ws;
  else return x;
  return kdc_ir_pad(f, x, kdc_ir_scalar(f, t.dtype, fill), lo, lo, zero);
}

kdc_status kdc_fe_lower_resizing(struct kdc_lower_ctx *c, const kdc_keras_layer *l,
                                 const kdc_keras_node *n, const kdc_value_id *in,
                                 const kdc_value_id *kw, kdc_value_id *out) {
  (void)n, (void)kw;
  kdc_func *f = c->f;
  resize_cfg r;
  KDC_RETURN_IF_ERROR(read_resize(l, &r));
  kdc_value_id x = in[0];
  if (x == KDC_NO_VALUE) return NULL;
  int hd = r.last ? 1 : 2;
  const kdc_type t = *kdc_ir_type(f, x);
  if (!strcmp(l->class_name, "CenterCrop")) {
    int64_t dh = t.dims[hd] - r.h, dw = t.dims[hd + 1] - r.w;
    if (dh >= 0 && dw >= 0) {
      int64_t start[KDC_MAX_RANK] = {0}, limit[KDC_MAX_RANK], stride[KDC_MAX_RANK];
      for (int i = 0; i < t.rank; i++) limit[i] = t.dims[i], stride[i] = 1;
      start[hd] = dh / 2, limit[hd] = dh / 2 + r.h;
      start[hd + 1] = dw / 2, limit[hd + 1] = dw / 2 + r.w;
      out[0] = kdc_ir_slice(f, x, start, limit, stride);
      return NULL;
    }
    r.crop = true; /* Keras' smart_resize */
  }
  if (r.crop) x = aspect_crop(f, x, hd, r.h, r.w);
  if (r.pad) x = aspect_pad(f, x, hd, r.h, r.w, r.fill);
  x = kdc_fe_resize_axis(f, x, hd, r.h, r.method, r.antialias);
  out[0] = kdc_fe_resize_axis(f, x, hd + 1, r.w, r.method, r.antialias);
  return NULL;
}

/* ---- random augmentation -------------------------------------------------- */

kdc_status kdc_fe_infer_augment(kdc_infer_args *a) {
  if (a->node->n_in != 1)
    return kdc_fe_layer_err(a->l, KDC_UNSUPPORTED, "expected 1 input tensor (images), got %d "
                            "(dict inputs with boxes or labels are not supported)", a->node->n_in);
  bool last = true;
  KDC_RETURN_IF_ERROR(read_format(a->l, &last));
  kdc_fe_set_outputs(a, 1, &a->in[0]);
  return NULL;
}

static kdc_status random_flip(kdc_lower_ctx *c, const kdc_keras_layer *l, kdc_value_id x,
                              kdc_value_id *out) {
  kdc_func *f = c->f;
  const char *mode;
  bool last = true;
  KDC_RETURN_IF_ERROR(kdc_fe_cfg_str(l, "mode", "horizontal_and_vertical", &mode));
  KDC_RETURN_IF_ERROR(read_format(l, &last));
  bool hor = !strcmp(mode, "horizontal") || !strcmp(mode, "horizontal_and_vertical");
  bool ver = !strcmp(mode, "vertical") || !strcmp(mode, "horizontal_and_vertical");
  if (!hor && !ver)
    return kdc_fe_layer_err(l, KDC_INVALID_INPUT, "config.mode \"%s\": expected \"horizontal\", "
                            "\"vertical\" or \"horizontal_and_vertical\"", mode);
  const kdc_type t = *kdc_ir_type(f, x);
  if (t.rank != 4)
    return kdc_fe_layer_err(l, KDC_UNSUPPORTED, "RandomFlip in training needs a batch of images "
                            "of rank 4, got rank %d", t.rank);
  int64_t axes[2], na = 0;
  if (ver) axes[na++] = last ? 1 : 2;
  if (hor) axes[na++] = last ? 2 : 3;
  uint64_t key = kdc_hash64(l->path, strlen(l->path), c->dropout_seed);
  kdc_value_id u = kdc_ir_rng_uniform(f, c->iteration, (int64_t)key, 1, t.dims);
  kdc_value_id flip = kdc_ir_compare(f, KDC_CMP_LE, u, kdc_ir_splat(f, KDC_DTYPE_F32, 1, t.dims, 0.5));
  flip = kdc_ir_broadcast(f, flip, t.rank, t.dims, (int64_t[]){0});
  *out = kdc_ir_select(f, flip, kdc_ir_reverse(f, x, (int)na, axes), x);
  return NULL;
}

/* The (lower, upper) factor pair of Keras' _set_factor with bounds (|b0|, 1):
 * a number f gives (max(-|f|, b0), |f|), a pair is sorted. */
static kdc_status read_factor(const kdc_keras_layer *l, double b0, double *lo, double *hi) {
  json_object *f = kdc_fe_get(l->config, "factor");
  if (json_object_is_type(f, json_type_double) || json_object_is_type(f, json_type_int)) {
    double v = fabs(json_object_get_double(f));
    *lo = -v > b0 ? -v : b0, *hi = v;
  } else if (json_object_is_type(f, json_type_array) && json_object_array_length(f) == 2) {
    *lo = json_object_get_double(json_object_array_get_idx(f, 0));
    *hi = json_object_get_double(json_object_array_get_idx(f, 1));
    if (*lo > *hi) {
      double t = *lo;
      *lo = *hi, *hi = t;
    }
  } else {
    return kdc_fe_layer_err(l, KDC_INVALID_INPUT, "config.factor: expected a number or a list "
                            "of two numbers");
  }
  if (*lo > 1 || *hi < b0)
    return kdc_fe_layer_err(l, KDC_INVALID_INPUT, "config.factor: outside [%g, 1]", b0);
  return NULL;
}

/* RandomBrightness (x + U[lo, hi) * (v1 - v0)) and RandomContrast ((x - m) *
 * U[1 - lo, 1 + hi) + m, m the per-image, per-channel mean over height and
 * width), one draw per image, then clipped to value_range (default [0,
 * 255]; random_brightness.py, random_contrast.py). */
static kdc_status random_value(kdc_lower_ctx *c, const kdc_keras_layer *l, kdc_value_id x,
                               kdc_value_id *out) {
  kdc_func *f = c->f;
  bool bright = !strcmp(l->class_name, "RandomBrightness"), last = true;
  double lo = 0, hi = 0, v0 = 0, v1 = 255;
  KDC_RETURN_IF_ERROR(read_factor(l, bright ? -1 : 0, &lo, &hi));
  KDC_RETURN_IF_ERROR(read_format(l, &last));
  json_object *vr = kdc_fe_get(l->config, "value_range");
  if (vr && !kdc_fe_is_null(vr)) {
    if (!json_object_is_type(vr, json_type_array) || json_object_array_length(vr) != 2)
      return kdc_fe_layer_err(l, KDC_INVALID_INPUT, "config.value_range: expected two numbers");
    v0 = json_object_get_double(json_object_array_get_idx(vr, 0));
    v1 = json_object_get_double(json_object_array_get_idx(vr, 1));
    if (bright && v0 > v1) { /* RandomBrightness sorts it */
      double t = v0;
      v0 = v1, v1 = t;
    }
  }
  const kdc_type t = *kdc_ir_type(f, x);
  if (t.rank != 4)
    return kdc_fe_layer_err(l, KDC_UNSUPPORTED, "%s in training needs a batch of images of rank "
                            "4, got rank %d", l->class_name, t.rank);
  uint64_t key = kdc_hash64(l->path, strlen(l->path), c->dropout_seed);
  kdc_value_id u = kdc_ir_rng_uniform(f, c->iteration, (int64_t)key, 1, t.dims);
  int64_t map0[1] = {0};
  kdc_value_id y;
  if (bright) {
    kdc_value_id d = kdc_ir_binary_scalar(f, KDC_OP_ADD, kdc_ir_binary_scalar(f, KDC_OP_MUL, u, hi - lo), lo);
    d = kdc_ir_binary_scalar(f, KDC_OP_MUL, d, v1 - v0);
    y = kdc_ir_binary(f, KDC_OP_ADD, x, kdc_ir_broadcast(f, d, t.rank, t.dims, map0));
  } else {
    kdc_value_id k = kdc_ir_binary_scalar(f, KDC_OP_ADD, kdc_ir_binary_scalar(f, KDC_OP_MUL, u,
                                                                           hi + lo), 1 - lo);
    int64_t hw[2] = {last ? 1 : 2, last ? 2 : 3}, keep[2] = {0, last ? 3 : 1};
    kdc_value_id m = kdc_ir_reduce(f, KDC_RED_SUM, x, 2, hw);
    m = kdc_ir_binary_scalar(f, KDC_OP_DIV, m, (double)(t.dims[hw[0]] * t.dims[hw[1]]));
    m = kdc_ir_broadcast(f, m, t.rank, t.dims, keep);
    y = kdc_ir_binary(f, KDC_OP_ADD, kdc_ir_binary(f, KDC_OP_MUL, kdc_ir_binary(f, KDC_OP_SUB, x, m),
                                                   kdc_ir_broadcast(f, k, t.rank, t.dims, map0)), m);
  }
  *out = kdc_ir_binary_scalar(f, KDC_OP_MIN, kdc_ir_binary_scalar(f, KDC_OP_MAX, y, v0), v1);
  return NULL;
}

kdc_status kdc_fe_lower_augment(struct kdc_lower_ctx *c, const kdc_keras_layer *l,
                                const kdc_keras_node *n, const kdc_value_id *in,
                                const kdc_value_id *kw, kdc_value_id *out) {
  (void)kw;
  if (kdc_fe_call_forces_training(l, n)) /* Keras 3's predict overrides it (lower_dropout.c) */
    return kdc_fe_layer_err(l, KDC_UNSUPPORTED, "the call's training=true applies the random "
                            "augmentation in predict (tf.keras 2 honours it), which kdc does not "
                            "support");
  out[0] = in[0];
  if (!c->training || in[0] == KDC_NO_VALUE) return NULL;
  if (!strcmp(l->class_name, "RandomFlip")) return random_flip(c, l, in[0], out);
  if (!strcmp(l->class_name, "RandomBrightness") || !strcmp(l->class_name, "RandomContrast"))
    return random_value(c, l, in[0], out);
  return kdc_fe_layer_err(l, KDC_UNSUPPORTED, "%s in a training step is not supported (it is the "
                          "identity at inference only; RandomFlip, RandomBrightness and "
                          "RandomContrast train)", l->class_name);
}
