/*
 * frontend/lower_conv.c: lowering of the convolution, pooling and Embedding
 * layers (and the shape inference of the transposed convolutions), following
 * Keras 3 on JAX (keras/src/backend/jax/nn.py):
 *
 *  - Conv1D/2D/3D: one `convolution` (channels-last; channels_first inputs
 *    are transposed in and the result back), bias added on the channel dim,
 *    then the activation.  `groups` = feature_group_count.
 *  - padding "same" is XLA's SAME, i.e. TF's split: total = max((ceil(L/s)-1)
 *    s + Kd - L, 0) with floor(total/2) before and the rest (the extra one)
 *    after; "causal" (Conv1D) pads Kd-1 before.
 *  - DepthwiseConv: kernel [K.., C, M] reshaped to [K.., 1, C*M] with
 *    groups = C (output channel c*M + m, as TF and Keras).
 *  - SeparableConv: that depthwise conv (no bias), then a 1x1 conv with the
 *    pointwise kernel, the bias and the activation.
 *  - ConvNDTranspose: kernel [K.., filters, C] flipped and swapped to
 *    [K.., C, filters], a convolution with lhs_dilation = strides, stride 1 and
 *    the padding of Keras' _convert_conv_transpose_padding_args_from_keras_to_jax
 *    (valid: Kd-1 and Kd-1+max(Kd,s)-Kd; same: pad_len = s+Kd-2 split
 *    min(ceil(pad_len/2), Kd-1) / rest; output_padding honoured).
 *  - MaxPooling: reduce_window max (padding is -inf).  AveragePooling:
 *    reduce_window sum divided by the window size (valid) or, for "same",
 *    by the reduce_window sum of ones: the count of VALID elements in each
 *    window, as Keras on JAX (and TF) do.
 *  - Embedding: ids of a float input are cast to int32 (Keras casts non-
 *    integer inputs with ops.cast: truncation), then `gather` (jnp.take:
 *    negative ids wrap, out-of-range ids give NaN rows).  mask_zero's mask
 *    (ids != 0) is frontend/mask.c's.
 */
#include <json-c/json.h>
#include <string.h>

#include "frontend/frontend.h"

static int class_rank(const char *cls) {
  const char *d = strpbrk(cls, "123");
  return d ? *d - '0' : 2;
}

static kdc_status is_last(const kdc_keras_layer *l, bool *out) {
  const char *df;
  KDC_RETURN_IF_ERROR(kdc_fe_cfg_str(l, "data_format", "channels_last", &df));
  *out = strcmp(df, "channels_first") != 0;
  return NULL;
}

/* channels_first [N, C, S..] <-> channels_last [N, S.., C]. */
static kdc_value_id to_last(kdc_func *f, kdc_value_id x, bool last) {
  if (last || x == KDC_NO_VALUE) return x;
  int r = kdc_ir_type(f, x)->rank;
  int64_t perm[KDC_MAX_RANK];
  perm[0] = 0;
  for (int i = 1; i < r - 1; i++) perm[i] = i + 1;
  perm[r - 1] = 1;
  return kdc_ir_transpose(f, x, perm);
}

static kdc_value_id to_first(kdc_func *f, kdc_value_id x, bool last) {
  if (last || x == KDC_NO_VALUE) return x;
  int r = kdc_ir_type(f, x)->rank;
  int64_t perm[KDC_MAX_RANK];
  perm[0] = 0, perm[1] = r - 1;
  for (int i = 2; i < r; i++) perm[i] = i - 1;
  return kdc_ir_transpose(f, x, perm);
}

/* Padding of one spatial dim of size |L| for window |kd| and stride |s|. */
static void pads(const char *mode, int64_t L, int64_t kd, int64_t s, int64_t *lo, int64_t *hi) {
  *lo = *hi = 0;
  if (!strcmp(mode, "causal")) {
    *lo = kd - 1;
  } else if (!strcmp(mode, "same")) {
    int64_t out = (L + s - 1) / s, total = (out - 1) * s + kd - L;
    if (total < 0) total = 0;
    *lo = total / 2;
    *hi = total - *lo;
  }
}

typedef struct conv_cfg {
  int n;
  int64_t k[3], s[3], d[3];
  const char *pad;
} conv_cfg;

static kdc_status read_cfg(const kdc_keras_layer *l, const char *size_key, conv_cfg *c) {
  c->n = class_rank(l->class_name);
  KDC_RETURN_IF_ERROR(kdc_fe_cfg_str(l, "padding", "valid", &c->pad));
  KDC_RETURN_IF_ERROR(kdc_fe_cfg_tuple(l, size_key, c->n, -1, c->k));
  KDC_RETURN_IF_ERROR(kdc_fe_cfg_tuple(l, "strides", c->n, 0, c->s));
  KDC_RETURN_IF_ERROR(kdc_fe_cfg_tuple(l, "dilation_rate", c->n, 1, c->d));
  for (int i = 0; i < c->n; i++)
    if (c->s[i] == 0) c->s[i] = strcmp(size_key, "pool_size") ? 1 : c->k[i]; /* None */
  return NULL;
}

/* The convolution attribute of |c| for channels-last input |x|. */
static kdc_attr_conv conv_attr(kdc_func *f, kdc_value_id x, const conv_cfg *c, int64_t groups) {
  kdc_attr_conv a;
  kdc_attr_conv_init(&a, c->n);
  const kdc_type *t = kdc_ir_type(f, x);
  for (int i = 0; i < c->n; i++) {
    a.stride.v[i] = c->s[i];
    a.rhs_dilation.v[i] = c->d[i];
    pads(c->pad, t->dims[i + 1], (c->k[i] - 1) * c->d[i] + 1, c->s[i], &a.pad_low.v[i],
         &a.pad_high.v[i]);
  }
  a.groups = groups;
  return a;
}

static kdc_status finish(kdc_lower_ctx *c, const kdc_keras_layer *l, kdc_value_id y, bool last,
                         kdc_value_id *out) {
  kdc_value_id b = kdc_fe_weight(c, l, "bias");
  if (b != KDC_NO_VALUE) y = kdc_ir_binary_bcast(c->f, KDC_OP_ADD, y, b);
  const char *act;
  KDC_RETURN_IF_ERROR(kdc_fe_cfg_activation(l, "activation", &act));
  KDC_RETURN_IF_ERROR(kdc_fe_activation(c, l, "activation", act, y, &y));
  out[0] = to_first(c->f, y, last);
  return NULL;
}

kdc_status kdc_fe_lower_conv(struct kdc_lower_ctx *c, const kdc_keras_layer *l,
                             const kdc_keras_node *n, const kdc_value_id *in,
                             const kdc_value_id *kw, kdc_value_id *out) {
  kdc_func *f = c->f;
  bool last, depthwise = !strncmp(l->class_name, "Depthwise", 9);
  bool separable = !strncmp(l->class_name, "Separable", 9);
  conv_cfg cc;
  (void)n, (void)kw;
  KDC_RETURN_IF_ERROR(is_last(l, &last));
  KDC_RETURN_IF_ERROR(read_cfg(l, "kernel_size", &cc));
  kdc_value_id x = to_last(f, in[0], last);
  if (x == KDC_NO_VALUE) return NULL;
  int64_t ch = kdc_ir_type(f, x)->dims[cc.n + 1], groups = 1;
  if (!depthwise && !separable) {
    KDC_RETURN_IF_ERROR(kdc_fe_cfg_int(l, "groups", 1, &groups));
    kdc_attr_conv a = conv_attr(f, x, &cc, groups);
    return finish(c, l, kdc_ir_convolution(f, x, kdc_fe_weight(c, l, "kernel"), &a), last, out);
  }
  kdc_value_id k = kdc_fe_weight(c, l, separable ? "depthwise_kernel" : "kernel");
  if (k == KDC_NO_VALUE) return NULL;
  int64_t dims[KDC_MAX_RANK];
  const kdc_type *kt = kdc_ir_type(f, k);
  for (int i = 0; i < cc.n; i++) dims[i] = kt->dims[i];
  dims[cc.n] = 1, dims[cc.n + 1] = ch * kt->dims[cc.n + 1];
  kdc_attr_conv a = conv_attr(f, x, &cc, ch);
  kdc_value_id y = kdc_ir_convolution(f, x, kdc_ir_reshape(f, k, cc.n + 2, dims), &a);
  if (separable) {
    kdc_attr_conv p;
    kdc_attr_conv_init(&p, cc.n);
    y = kdc_ir_convolution(f, y, kdc_fe_weight(c, l, "pointwise_kernel"), &p);
  }
  return finish(c, l, y, last, out);
}

/* Keras' output_padding of dim |i| (-1 = None). */
static kdc_status output_padding(const kdc_keras_layer *l, int n, int64_t *op) {
  for (int i = 0; i < n; i++) op[i] = -1;
  if (kdc_fe_is_null(kdc_fe_get(l->config, "output_padding"))) return NULL;
  return kdc_fe_cfg_tuple(l, "output_padding", n, -1, op);
}

static void transpose_pads(const char *mode, int64_t kd, int64_t s, int64_t op, int64_t *lo,
                           int64_t *hi) {
  if (!strcmp(mode, "valid")) {
    if (op < 0) op = (kd > s ? kd : s) - kd;
    *lo = kd - 1;
    *hi = kd - 1 + op;
    return;
  }
  int64_t len = op < 0 ? s + kd - 2 : kd + kd % 2 - 2 + op;
  *lo = len / 2 + len % 2;
  if (*lo > kd - 1) *lo = kd - 1;
  *hi = len - *lo;
}

kdc_status kdc_fe_infer_conv_transpose(kdc_infer_args *a) {
  const kdc_keras_layer *l = a->l;
  conv_cfg cc;
  bool last, bias;
  int64_t filters, op[3];
  if (a->node->n_in != 1)
    return kdc_fe_layer_err(l, KDC_INVALID_INPUT, "expected 1 input tensor, got %d", a->node->n_in);
  KDC_RETURN_IF_ERROR(is_last(l, &last));
  KDC_RETURN_IF_ERROR(read_cfg(l, "kernel_size", &cc));
  KDC_RETURN_IF_ERROR(output_padding(l, cc.n, op));
  KDC_RETURN_IF_ERROR(kdc_fe_cfg_int(l, "filters", INT64_MIN, &filters));
  KDC_RETURN_IF_ERROR(kdc_fe_cfg_bool(l, "use_bias", true, &bias));
  if (strcmp(cc.pad, "valid") && strcmp(cc.pad, "same"))
    return kdc_fe_layer_err(l, KDC_INVALID_INPUT, "config.padding: expected \"valid\" or "
                            "\"same\", got \"%s\"", cc.pad);
  const kdc_kshape *x = &a->in[0];
  int cax = last ? cc.n + 1 : 1, sp0 = last ? 1 : 2;
  if (x->rank != cc.n + 2 || x->dims[cax] < 0 || filters <= 0)
    return kdc_fe_shape_err(a, kdc_arena_printf(a->m->arena, "%s expects an input of rank %d "
                            "with known channels and filters > 0", l->class_name, cc.n + 2),
                            x, NULL);
  kdc_kshape o = *x, kern = {.rank = cc.n + 2};
  for (int i = 0; i < cc.n; i++) {
    int64_t L = x->dims[sp0 + i], kd = (cc.k[i] - 1) * cc.d[i] + 1, lo, hi;
    transpose_pads(cc.pad, kd, cc.s[i], op[i], &lo, &hi);
    o.dims[sp0 + i] = L < 0 ? -1 : (L - 1) * cc.s[i] + 1 + lo + hi - kd + 1;
    kern.dims[i] = cc.k[i];
  }
  kern.dims[cc.n] = filters, kern.dims[cc.n + 1] = x->dims[cax];
  KDC_RETURN_IF_ERROR(kdc_fe_add_var(a, "kernel", &kern, true, "kernel_initializer",
                                     "glorot_uniform"));
  if (bias) {
    kdc_kshape b = kdc_kshape_make(1, &filters);
    KDC_RETURN_IF_ERROR(kdc_fe_add_var(a, "bias", &b, true, "bias_initializer", "zeros"));
  }
  o.dims[cax] = filters;
  kdc_fe_set_outputs(a, 1, &o);
  return NULL;
}

kdc_status kdc_fe_lower_conv_transpose(struct kdc_lower_ctx *c, const kdc_keras_layer *l,
                                       const kdc_keras_node *n, const kdc_value_id *in,
                                       const kdc_value_id *kw, kdc_value_id *out) {
  kdc_func *f = c->f;
  bool last;
  conv_cfg cc;
  int64_t op[3], perm[KDC_MAX_RANK], sp[3];
  (void)n, (void)kw;
  KDC_RETURN_IF_ERROR(is_last(l, &last));
  KDC_RETURN_IF_ERROR(read_cfg(l, "kernel_size", &cc));
  KDC_RETURN_IF_ERROR(output_padding(l, cc.n, op));
  kdc_value_id x = to_last(f, in[0], last), k = kdc_fe_weight(c, l, "kernel");
  kdc_attr_conv a;
  kdc_attr_conv_init(&a, cc.n);
  for (int i = 0; i < cc.n; i++) {
    perm[i] = i, sp[i] = i;
    a.lhs_dilation.v[i] = cc.s[i];
    a.rhs_dilation.v[i] = cc.d[i];
    transpose_pads(cc.pad, (cc.k[i] - 1) * cc.d[i] + 1, cc.s[i], op[i], &a.pad_low.v[i],
                   &a.pad_high.v[i]);
  }
  perm[cc.n] = cc.n + 1, perm[cc.n + 1] = cc.n;
  k = kdc_ir_reverse(f, kdc_ir_transpose(f, k, perm), cc.n, sp);
  return finish(c, l, kdc_ir_convolution(f, x, k, &a), last, out);
}

kdc_status kdc_fe_lower_pool(struct kdc_lower_ctx *c, const kdc_keras_layer *l,
                             const kdc_keras_node *n, const kdc_value_id *in,
                             const kdc_value_id *kw, kdc_value_id *out) {
  kdc_func *f = c->f;
  bool last, avg = strstr(l->class_name, "Av") != NULL;
  conv_cfg cc;
  (void)n, (void)kw;
  KDC_RETURN_IF_ERROR(is_last(l, &last));
  KDC_RETURN_IF_ERROR(read_cfg(l, "pool_size", &cc));
  for (int i = 0; i < cc.n; i++) cc.d[i] = 1; /* pools have no dilation */
  kdc_value_id x = to_last(f, in[0], last);
  if (x == KDC_NO_VALUE) return NULL;
  kdc_type ts = *kdc_ir_type(f, x), *t = &ts; /* a copy: appending moves the nodes */
  kdc_attr_window a;
  kdc_attr_window_init(&a, avg ? KDC_RED_SUM : KDC_RED_MAX, t->rank);
  for (int i = 0; i < cc.n; i++) {
    a.window.v[i + 1] = cc.k[i];
    a.stride.v[i + 1] = cc.s[i];
    pads(cc.pad, t->dims[i + 1], cc.k[i], cc.s[i], &a.pad_low.v[i + 1], &a.pad_high.v[i + 1]);
  }
  kdc_value_id y = kdc_ir_reduce_window(f, x, &a);
  if (avg && !strcmp(cc.pad, "valid")) {
    int64_t size = 1;
    for (int i = 0; i < cc.n; i++) size *= cc.k[i];
    y = kdc_ir_binary_scalar(f, KDC_OP_DIV, y, (double)size);
  } else if (avg) { /* count the valid elements of each window (Keras on JAX) */
    int64_t dims[KDC_MAX_RANK];
    for (int i = 0; i < t->rank; i++) dims[i] = i == 0 || i == t->rank - 1 ? 1 : t->dims[i];
    kdc_value_id cnt = kdc_ir_reduce_window(f, kdc_ir_splat(f, KDC_DTYPE_F32, t->rank, dims, 1.0),
                                            &a);
    y = kdc_ir_binary_bcast(f, KDC_OP_DIV, y, cnt);
  }
  out[0] = to_first(f, y, last);
  return NULL;
}

kdc_status kdc_fe_lower_embedding(struct kdc_lower_ctx *c, const kdc_keras_layer *l,
                                  const kdc_keras_node *n, const kdc_value_id *in,
                                  const kdc_value_id *kw, kdc_value_id *out) {
  kdc_func *f = c->f;
  (void)n, (void)kw;
  kdc_value_id ids = in[0];
  if (ids == KDC_NO_VALUE) return NULL;
  kdc_dtype d = kdc_ir_type(f, ids)->dtype;
  if (d != KDC_DTYPE_I32 && d != KDC_DTYPE_I64) ids = kdc_ir_convert(f, ids, KDC_DTYPE_I32);
  out[0] = kdc_ir_gather(f, kdc_fe_weight(c, l, "embeddings"), ids);
  return NULL;
}
