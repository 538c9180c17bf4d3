/*
 * frontend/layers_conv.c: shape and variable inference of the layers that
 * kdc counts but does not lower yet: convolutions, pooling, zero padding,
 * normalisations, Embedding, recurrent layers and MultiHeadAttention.
 *
 * Output sizes follow keras/src/ops/operation_utils.py
 * (compute_conv_output_shape, compute_pooling_output_shape):
 *   valid: floor((L - dilated_kernel) / stride) + 1
 *   same, causal: floor((L - 1) / stride) + 1
 * Variable names and creation order are Keras 3's (KERAS.md 2.1), so the
 * paths match `variable.path` and the weights files.
 */
#include <json-c/json.h>
#include <string.h>

#include "frontend/frontend.h"

static kdc_status one_input(kdc_infer_args *a) {
  if (a->node->n_in == 1) return NULL;
  return kdc_fe_layer_err(a->l, KDC_INVALID_INPUT, "expected 1 input tensor, got %d",
                          a->node->n_in);
}

/* The spatial rank a class name ends with ("Conv2D" -> 2). */
static int class_rank(const char *cls) {
  const char *d = strpbrk(cls, "123");
  return d ? *d - '0' : 2;
}

static kdc_status channels_last(const kdc_keras_layer *l, bool *out) {
  const char *df;
  KDC_RETURN_IF_ERROR(kdc_fe_cfg_str(l, "data_format", "channels_last", &df));
  if (strcmp(df, "channels_last") && strcmp(df, "channels_first"))
    return kdc_fe_layer_err(l, KDC_INVALID_INPUT,
                            "config.data_format: expected \"channels_last\" or \"channels_first\", "
                            "got \"%s\"", df);
  *out = !strcmp(df, "channels_last");
  return NULL;
}

static kdc_status padding_mode(const kdc_keras_layer *l, bool allow_causal, const char **out) {
  KDC_RETURN_IF_ERROR(kdc_fe_cfg_str(l, "padding", "valid", out));
  if (!strcmp(*out, "valid") || !strcmp(*out, "same") || (allow_causal && !strcmp(*out, "causal")))
    return NULL;
  return kdc_fe_layer_err(l, KDC_INVALID_INPUT, "config.padding: expected \"valid\" or \"same\", "
                          "got \"%s\"", *out);
}

/* Spatial output sizes; an input smaller than the window is an error. */
static kdc_status window_out(kdc_infer_args *a, const kdc_kshape *x, int n, int sp0,
                             const int64_t *k, const int64_t *s, const int64_t *d, bool valid,
                             kdc_kshape *o) {
  for (int i = 0; i < n; i++) {
    int64_t L = x->dims[sp0 + i], dk;
    if (s[i] <= 0 || k[i] <= 0 || d[i] <= 0)
      return kdc_fe_layer_err(a->l, KDC_INVALID_INPUT,
                              "kernel/pool sizes, strides and dilations must be positive");
    if (__builtin_mul_overflow(k[i] - 1, d[i], &dk) || dk >= KDC_FE_MAX_ELEMENTS)
      return kdc_fe_layer_err(a->l, KDC_INVALID_INPUT, "kernel size %lld with dilation %lld spans more "
                              "than 2^40 elements", (long long)k[i], (long long)d[i]);
    dk += 1;
    if (L < 0) {
      o->dims[sp0 + i] = -1;
    } else if (valid) {
      if (L < dk)
        return kdc_fe_shape_err(a, kdc_arena_printf(a->m->arena, "window of size %lld does not fit "
                                "spatial dimension %d", (long long)dk, i), x, NULL);
      o->dims[sp0 + i] = (L - dk) / s[i] + 1;
    } else {
      o->dims[sp0 + i] = L == 0 ? 0 : (L - 1) / s[i] + 1;
    }
  }
  return NULL;
}

kdc_status kdc_fe_infer_conv(kdc_infer_args *a) {
  KDC_RETURN_IF_ERROR(one_input(a));
  const kdc_keras_layer *l = a->l;
  int n = class_rank(l->class_name);
  bool depthwise = !strncmp(l->class_name, "Depthwise", 9);
  bool separable = !strncmp(l->class_name, "Separable", 9);
  bool last = true;
  const char *pad;
  int64_t k[3], s[3], d[3], filters = 0, groups = 1, dm = 1;
  bool bias;
  KDC_RETURN_IF_ERROR(channels_last(l, &last));
  KDC_RETURN_IF_ERROR(padding_mode(l, n == 1, &pad));
  KDC_RETURN_IF_ERROR(kdc_fe_cfg_tuple(l, "kernel_size", n, -1, k));
  KDC_RETURN_IF_ERROR(kdc_fe_cfg_tuple(l, "strides", n, 1, s));
  KDC_RETURN_IF_ERROR(kdc_fe_cfg_tuple(l, "dilation_rate", n, 1, d));
  KDC_RETURN_IF_ERROR(kdc_fe_cfg_bool(l, "use_bias", true, &bias));
  if (depthwise || separable) KDC_RETURN_IF_ERROR(kdc_fe_cfg_int(l, "depth_multiplier", 1, &dm));
  if (!depthwise) KDC_RETURN_IF_ERROR(kdc_fe_cfg_int(l, "filters", INT64_MIN, &filters));
  if (!depthwise && !separable) KDC_RETURN_IF_ERROR(kdc_fe_cfg_int(l, "groups", 1, &groups));
  const kdc_kshape *x = &a->in[0];
  if (x->rank != n + 2)
    return kdc_fe_shape_err(a, kdc_arena_printf(a->m->arena, "%s expects an input of rank %d",
                                                l->class_name, n + 2), x, NULL);
  int cax = last ? n + 1 : 1, sp0 = last ? 1 : 2;
  int64_t c = x->dims[cax];
  if (c < 0) return kdc_fe_shape_err(a, "the channel dimension must be known", x, NULL);
  if (filters <= 0 && !depthwise)
    return kdc_fe_layer_err(l, KDC_INVALID_INPUT, "config.filters: expected a positive integer");
  if (groups <= 0 || c % groups || filters % groups)
    return kdc_fe_shape_err(a, kdc_arena_printf(a->m->arena, "channels and filters must be "
                            "divisible by groups=%lld", (long long)groups), x, NULL);
  kdc_kshape o = *x;
  KDC_RETURN_IF_ERROR(window_out(a, x, n, sp0, k, s, d, strcmp(pad, "valid") == 0, &o));
  kdc_kshape kern = {.rank = n + 2};
  memcpy(kern.dims, k, sizeof(int64_t) * (size_t)n);
  int64_t out_c;
  if (depthwise) {
    kern.dims[n] = c, kern.dims[n + 1] = dm;
    out_c = c * dm;
    KDC_RETURN_IF_ERROR(kdc_fe_add_var(a, "kernel", &kern, true, "depthwise_initializer",
                                       "glorot_uniform"));
    l->vars[l->n_vars - 1]->legacy_name = "depthwise_kernel";
  } else if (separable) {
    kern.dims[n] = c, kern.dims[n + 1] = dm;
    KDC_RETURN_IF_ERROR(kdc_fe_add_var(a, "depthwise_kernel", &kern, true,
                                       "depthwise_initializer", "glorot_uniform"));
    kdc_kshape pw = {.rank = n + 2};
    for (int i = 0; i < n; i++) pw.dims[i] = 1;
    pw.dims[n] = c * dm, pw.dims[n + 1] = filters;
    KDC_RETURN_IF_ERROR(kdc_fe_add_var(a, "pointwise_kernel", &pw, true,
                                       "pointwise_initializer", "glorot_uniform"));
    out_c = filters;
  } else {
    kern.dims[n] = c / groups, kern.dims[n + 1] = filters;
    KDC_RETURN_IF_ERROR(kdc_fe_add_var(a, "kernel", &kern, true, "kernel_initializer",
                                       "glorot_uniform"));
    out_c = filters;
  }
  if (bias) {
    kdc_kshape b = kdc_kshape_make(1, &out_c);
    KDC_RETURN_IF_ERROR(kdc_fe_add_var(a, "bias", &b, true, "bias_initializer", "zeros"));
  }
  o.dims[cax] = out_c;
  kdc_fe_set_outputs(a, 1, &o);
  return NULL;
}

kdc_status kdc_fe_infer_pool(kdc_infer_args *a) {
  KDC_RETURN_IF_ERROR(one_input(a));
  const kdc_keras_layer *l = a->l;
  int n = class_rank(l->class_name);
  bool last = true;
  const char *pad;
  int64_t k[3], s[3], d[3] = {1, 1, 1};
  KDC_RETURN_IF_ERROR(channels_last(l, &last));
  KDC_RETURN_IF_ERROR(padding_mode(l, false, &pad));
  KDC_RETURN_IF_ERROR(kdc_fe_cfg_tuple(l, "pool_size", n, 2, k));
  KDC_RETURN_IF_ERROR(kdc_fe_cfg_tuple(l, "strides", n, 0, s));
  for (int i = 0; i < n; i++)
    if (s[i] == 0) s[i] = k[i]; /* strides=None means pool_size */
  const kdc_kshape *x = &a->in[0];
  if (x->rank != n + 2)
    return kdc_fe_shape_err(a, kdc_arena_printf(a->m->arena, "%s expects an input of rank %d",
                                                l->class_name, n + 2), x, NULL);
  kdc_kshape o = *x;
  KDC_RETURN_IF_ERROR(window_out(a, x, n, last ? 1 : 2, k, s, d, !strcmp(pad, "valid"), &o));
  kdc_fe_set_outputs(a, 1, &o);
  return NULL;
}

kdc_status kdc_fe_infer_global_pool(kdc_infer_args *a) {
  KDC_RETURN_IF_ERROR(one_input(a));
  const kdc_keras_layer *l = a->l;
  int n = class_rank(l->class_name);
  bool last = true, keep = false;
  KDC_RETURN_IF_ERROR(channels_last(l, &last));
  KDC_RETURN_IF_ERROR(kdc_fe_cfg_bool(l, "keepdims", false, &keep));
  const kdc_kshape *x = &a->in[0];
  if (x->rank != n + 2)
    return kdc_fe_shape_err(a, kdc_arena_printf(a->m->arena, "%s expects an input of rank %d",
                                                l->class_name, n + 2), x, NULL);
  kdc_kshape o = *x;
  int sp0 = last ? 1 : 2;
  if (keep) {
    for (int i = 0; i < n; i++) o.dims[sp0 + i] = 1;
  } else {
    o.rank = 2;
    o.dims[1] = x->dims[last ? n + 1 : 1];
  }
  kdc_fe_set_outputs(a, 1, &o);
  return NULL;
}

kdc_status kdc_fe_cfg_pairs(const kdc_keras_layer *l, const char *key, int n, int64_t dflt,
                            int64_t *lo, int64_t *hi) {
  for (int i = 0; i < n; i++) lo[i] = hi[i] = dflt;
  json_object *p = kdc_fe_get(l->config, key);
  const char *want = "expected an integer, a list of integers or a list of (before, after) pairs";
  if (json_object_is_type(p, json_type_int)) {
    for (int i = 0; i < n; i++) lo[i] = hi[i] = json_object_get_int64(p);
  } else if (json_object_is_type(p, json_type_array) && n == 1 &&
             json_object_array_length(p) == 2) {
    lo[0] = json_object_get_int64(json_object_array_get_idx(p, 0));
    hi[0] = json_object_get_int64(json_object_array_get_idx(p, 1));
  } else if (json_object_is_type(p, json_type_array) && (int)json_object_array_length(p) == n) {
    for (int i = 0; i < n; i++) {
      json_object *e = json_object_array_get_idx(p, (size_t)i);
      if (json_object_is_type(e, json_type_int)) {
        lo[i] = hi[i] = json_object_get_int64(e);
      } else if (json_object_is_type(e, json_type_array) && json_object_array_length(e) == 2) {
        lo[i] = json_object_get_int64(json_object_array_get_idx(e, 0));
        hi[i] = json_object_get_int64(json_object_array_get_idx(e, 1));
      } else {
        return kdc_fe_layer_err(l, KDC_INVALID_INPUT, "config.%s: %s", key, want);
      }
    }
  } else if (!kdc_fe_is_null(p)) {
    return kdc_fe_layer_err(l, KDC_INVALID_INPUT, "config.%s: %s", key, want);
  }
  for (int i = 0; i < n; i++)
    if (lo[i] < 0 || hi[i] < 0)
      return kdc_fe_layer_err(l, KDC_INVALID_INPUT, "config.%s: negative value", key);
  return NULL;
}

/* ZeroPadding1D/2D/3D and Cropping1D/2D/3D (Keras defaults: padding 1,
 * Cropping1D and Cropping3D 1, Cropping2D 0). */
kdc_status kdc_fe_infer_zero_pad(kdc_infer_args *a) {
  KDC_RETURN_IF_ERROR(one_input(a));
  const kdc_keras_layer *l = a->l;
  int n = class_rank(l->class_name);
  bool crop = !strncmp(l->class_name, "Cropping", 8);
  bool last = true;
  KDC_RETURN_IF_ERROR(channels_last(l, &last));
  int64_t lo[3], hi[3];
  KDC_RETURN_IF_ERROR(kdc_fe_cfg_pairs(l, crop ? "cropping" : "padding", n, crop && n == 2 ? 0 : 1,
                                       lo, hi));
  const kdc_kshape *x = &a->in[0];
  if (x->rank != n + 2)
    return kdc_fe_shape_err(a, kdc_arena_printf(a->m->arena, "%s expects an input of rank %d",
                                                l->class_name, n + 2), x, NULL);
  kdc_kshape o = *x;
  int sp0 = last ? 1 : 2;
  for (int i = 0; i < n; i++) {
    if (o.dims[sp0 + i] < 0) continue;
    if (!crop) {
      o.dims[sp0 + i] += lo[i] + hi[i];
    } else if (lo[i] + hi[i] >= o.dims[sp0 + i]) {
      return kdc_fe_shape_err(a, kdc_arena_printf(a->m->arena, "config.cropping (%lld, %lld) "
                              "must be smaller than spatial dimension %d", (long long)lo[i],
                              (long long)hi[i], i), x, NULL);
    } else {
      o.dims[sp0 + i] -= lo[i] + hi[i];
    }
  }
  kdc_fe_set_outputs(a, 1, &o);
  return NULL;
}

/* Shape of per-feature parameters over |axis| (int or list) of |x|. */
static kdc_status feature_shape(kdc_infer_args *a, const char *key, int64_t dflt,
                                const kdc_kshape *x, bool sort, kdc_kshape *out) {
  int n;
  int64_t ax[KDC_MAX_RANK];
  KDC_RETURN_IF_ERROR(kdc_fe_cfg_axes(a->l, key, dflt, &n, ax));
  for (int i = 0; i < n; i++) {
    if (ax[i] < -x->rank || ax[i] >= x->rank)
      return kdc_fe_shape_err(a, kdc_arena_printf(a->m->arena, "config.%s %lld is out of range",
                                                  key, (long long)ax[i]), x, NULL);
    if (ax[i] < 0) ax[i] += x->rank;
  }
  for (int i = 1; sort && i < n; i++)
    for (int j = i; j > 0 && ax[j - 1] > ax[j]; j--) {
      int64_t t = ax[j];
      ax[j] = ax[j - 1];
      ax[j - 1] = t;
    }
  out->rank = n;
  for (int i = 0; i < n; i++) {
    out->dims[i] = x->dims[ax[i]];
    if (out->dims[i] < 0)
      return kdc_fe_shape_err(a, kdc_arena_printf(a->m->arena, "the dimension of config.%s must be "
                                                  "known", key), x, NULL);
  }
  return NULL;
}

kdc_status kdc_fe_infer_batchnorm(kdc_infer_args *a) {
  KDC_RETURN_IF_ERROR(one_input(a));
  const kdc_keras_layer *l = a->l;
  bool center, scale, renorm;
  KDC_RETURN_IF_ERROR(kdc_fe_cfg_bool(l, "center", true, &center));
  KDC_RETURN_IF_ERROR(kdc_fe_cfg_bool(l, "scale", true, &scale));
  KDC_RETURN_IF_ERROR(kdc_fe_cfg_bool(l, "renorm", false, &renorm));
  if (renorm) return kdc_fe_layer_err(l, KDC_UNSUPPORTED, "renorm=True is not supported");
  kdc_kshape s;
  KDC_RETURN_IF_ERROR(feature_shape(a, "axis", -1, &a->in[0], false, &s));
  if (scale) KDC_RETURN_IF_ERROR(kdc_fe_add_var(a, "gamma", &s, true, "gamma_initializer", "ones"));
  if (center) KDC_RETURN_IF_ERROR(kdc_fe_add_var(a, "beta", &s, true, "beta_initializer", "zeros"));
  KDC_RETURN_IF_ERROR(
      kdc_fe_add_var(a, "moving_mean", &s, false, "moving_mean_initializer", "zeros"));
  KDC_RETURN_IF_ERROR(kdc_fe_add_var(a, "moving_variance", &s, false,
                                     "moving_variance_initializer", "ones"));
  kdc_fe_set_outputs(a, 1, &a->in[0]);
  return NULL;
}

kdc_status kdc_fe_infer_layernorm(kdc_infer_args *a) {
  KDC_RETURN_IF_ERROR(one_input(a));
  const kdc_keras_layer *l = a->l;
  bool center, scale, rms;
  KDC_RETURN_IF_ERROR(kdc_fe_cfg_bool(l, "center", true, &center));
  KDC_RETURN_IF_ERROR(kdc_fe_cfg_bool(l, "scale", true, &scale));
  /* deprecated Keras 3 flag: gamma only, scaled by the variance */
  KDC_RETURN_IF_ERROR(kdc_fe_cfg_bool(l, "rms_scaling", false, &rms));
  kdc_kshape s;
  KDC_RETURN_IF_ERROR(feature_shape(a, "axis", -1, &a->in[0], false, &s));
  if (scale || rms)
    KDC_RETURN_IF_ERROR(kdc_fe_add_var(a, "gamma", &s, true, "gamma_initializer", "ones"));
  if (center && !rms)
    KDC_RETURN_IF_ERROR(kdc_fe_add_var(a, "beta", &s, true, "beta_initializer", "zeros"));
  kdc_fe_set_outputs(a, 1, &a->in[0]);
  return NULL;
}

/* GroupNormalization: gamma and beta of the channel count (groups -1 =
 * one group per channel; the channels must divide into the groups). */
kdc_status kdc_fe_infer_groupnorm(kdc_infer_args *a) {
  KDC_RETURN_IF_ERROR(one_input(a));
  const kdc_keras_layer *l = a->l;
  bool center, scale;
  int64_t groups;
  KDC_RETURN_IF_ERROR(kdc_fe_cfg_bool(l, "center", true, &center));
  KDC_RETURN_IF_ERROR(kdc_fe_cfg_bool(l, "scale", true, &scale));
  KDC_RETURN_IF_ERROR(kdc_fe_cfg_int(l, "groups", 32, &groups));
  kdc_kshape s;
  KDC_RETURN_IF_ERROR(feature_shape(a, "axis", -1, &a->in[0], false, &s));
  if (s.rank != 1) return kdc_fe_layer_err(l, KDC_INVALID_INPUT, "config.axis: expected one axis");
  if (groups == -1) groups = s.dims[0];
  if (groups <= 0 || s.dims[0] % groups)
    return kdc_fe_shape_err(a, kdc_arena_printf(a->m->arena, "config.groups %lld must be positive "
                            "and divide the %lld channels", (long long)groups,
                            (long long)s.dims[0]), &a->in[0], NULL);
  if (scale) KDC_RETURN_IF_ERROR(kdc_fe_add_var(a, "gamma", &s, true, "gamma_initializer", "ones"));
  if (center) KDC_RETURN_IF_ERROR(kdc_fe_add_var(a, "beta", &s, true, "beta_initializer", "zeros"));
  kdc_fe_set_outputs(a, 1, &a->in[0]);
  return NULL;
}

kdc_status kdc_fe_infer_normalization(kdc_infer_args *a) {
  KDC_RETURN_IF_ERROR(one_input(a));
  const kdc_keras_layer *l = a->l;
  kdc_kshape s = {0};
  json_object *axis = kdc_fe_get(l->config, "axis");
  bool has_axis = kdc_fe_get(l->config, "axis") != NULL;
  if (!has_axis || !kdc_fe_is_null(axis)) /* axis=None: one scalar mean */
    KDC_RETURN_IF_ERROR(feature_shape(a, "axis", -1, &a->in[0], true, &s));
  if (kdc_fe_is_null(kdc_fe_get(l->config, "mean"))) {
    /* Adapted state: mean, variance and a count kept "for backwards
     * compatibility" (keras/src/layers/preprocessing/normalization.py). */
    KDC_RETURN_IF_ERROR(kdc_fe_add_var(a, "mean", &s, false, NULL, "zeros"));
    KDC_RETURN_IF_ERROR(kdc_fe_add_var(a, "variance", &s, false, NULL, "ones"));
    kdc_kshape sc = {0};
    KDC_RETURN_IF_ERROR(kdc_fe_add_var(a, "count", &sc, false, NULL, "zeros"));
    l->vars[l->n_vars - 1]->dtype = KDC_DTYPE_I64;
  }
  kdc_fe_set_outputs(a, 1, &a->in[0]);
  return NULL;
}

kdc_status kdc_fe_infer_embedding(kdc_infer_args *a) {
  KDC_RETURN_IF_ERROR(one_input(a));
  const kdc_keras_layer *l = a->l;
  int64_t in_dim, out_dim;
  KDC_RETURN_IF_ERROR(kdc_fe_cfg_int(l, "input_dim", INT64_MIN, &in_dim));
  KDC_RETURN_IF_ERROR(kdc_fe_cfg_int(l, "output_dim", INT64_MIN, &out_dim));
  if (in_dim <= 0 || out_dim <= 0)
    return kdc_fe_layer_err(l, KDC_INVALID_INPUT, "input_dim and output_dim must be positive");
  if (!kdc_fe_is_null(kdc_fe_get(l->config, "quantization_config")) ||
      !kdc_fe_is_null(kdc_fe_get(l->config, "lora_rank")))
    return kdc_fe_layer_err(l, KDC_UNSUPPORTED, "quantized or LoRA Embedding layers are not "
                            "supported");
  kdc_kshape e = kdc_kshape_make(2, (int64_t[]){in_dim, out_dim});
  KDC_RETURN_IF_ERROR(kdc_fe_add_var(a, "embeddings", &e, true, "embeddings_initializer",
                                     "uniform"));
  kdc_kshape o = a->in[0];
  if (o.rank + 1 > KDC_MAX_RANK) return kdc_fe_layer_err(l, KDC_UNSUPPORTED, "rank too large");
  o.dims[o.rank++] = out_dim;
  kdc_fe_set_outputs(a, 1, &o);
  return NULL;
}

int kdc_fe_rnn_state_inputs(const kdc_keras_node *n, int *idx, int cap) {
  int k = 0;
  for (int i = 1; i < n->n_in && k < cap; i++) idx[k++] = i;
  for (int i = 0; i < n->n_kw && k < cap; i++)
    if (!strcmp(n->kw_names[i], "initial_state")) idx[k++] = n->n_in + i;
  return k;
}

kdc_status kdc_fe_infer_rnn(kdc_infer_args *a) {
  const kdc_keras_layer *l = a->l;
  if (a->node->n_in < 1)
    return kdc_fe_layer_err(l, KDC_INVALID_INPUT, "expected an input sequence");
  int idx[16];
  int ns = kdc_fe_rnn_state_inputs(a->node, idx, 16);
  kdc_kshape st[16];
  for (int i = 0; i < ns; i++) st[i] = idx[i] < a->node->n_in ? a->in[idx[i]] : a->kw[idx[i] - a->node->n_in];
  return kdc_fe_infer_rnn_layer(a, ns, st);
}

kdc_status kdc_fe_infer_rnn_layer(kdc_infer_args *a, int n_states, const kdc_kshape *states) {
  const kdc_keras_layer *l = a->l;
  bool lstm = !strcmp(l->class_name, "LSTM"), gru = !strcmp(l->class_name, "GRU");
  int gates = lstm ? 4 : gru ? 3 : 1;
  int64_t units;
  bool bias, seq, state, time_major, reset_after = true;
  KDC_RETURN_IF_ERROR(kdc_fe_cfg_int(l, "units", INT64_MIN, &units));
  KDC_RETURN_IF_ERROR(kdc_fe_cfg_bool(l, "use_bias", true, &bias));
  KDC_RETURN_IF_ERROR(kdc_fe_cfg_bool(l, "return_sequences", false, &seq));
  KDC_RETURN_IF_ERROR(kdc_fe_cfg_bool(l, "return_state", false, &state));
  KDC_RETURN_IF_ERROR(kdc_fe_cfg_bool(l, "time_major", false, &time_major));
  if (gru) KDC_RETURN_IF_ERROR(kdc_fe_cfg_bool(l, "reset_after", true, &reset_after));
  if (units <= 0) return kdc_fe_layer_err(l, KDC_INVALID_INPUT, "config.units must be positive");
  if (time_major) return kdc_fe_layer_err(l, KDC_UNSUPPORTED, "time_major=True is not supported");
  const kdc_kshape *x = &a->in[0];
  if (x->rank != 3)
    return kdc_fe_shape_err(a, "recurrent layers expect a (batch, time, features) input", x, NULL);
  if (x->dims[2] < 0) return kdc_fe_shape_err(a, "the feature dimension must be known", x, NULL);
  /* initial states (Keras' RNN.call initial_state): one [batch, units]
   * tensor per state, h (and c for LSTM) */
  if (n_states && n_states != (lstm ? 2 : 1))
    return kdc_fe_layer_err(l, KDC_INVALID_INPUT, "%d initial state tensor(s) passed: %s takes "
                            "%d ([h, c] for LSTM, [h] otherwise)", n_states, l->class_name,
                            lstm ? 2 : 1);
  for (int i = 0; i < n_states; i++) {
    const kdc_kshape *s = &states[i];
    if (s->rank != 2 || s->dims[1] != units || (s->dims[0] >= 0 && x->dims[0] >= 0 &&
                                                s->dims[0] != x->dims[0]))
      return kdc_fe_shape_err(a, kdc_arena_printf(a->m->arena, "initial state %d must be "
                              "(batch, units=%lld)", i, (long long)units), s, x);
  }
  const char *cell = lstm ? "lstm_cell" : gru ? "gru_cell" : "simple_rnn_cell";
  kdc_arena *ar = a->m->arena;
  kdc_kshape k = kdc_kshape_make(2, (int64_t[]){x->dims[2], gates * units});
  kdc_kshape r = kdc_kshape_make(2, (int64_t[]){units, gates * units});
  KDC_RETURN_IF_ERROR(kdc_fe_add_var(a, kdc_arena_printf(ar, "%s/kernel", cell), &k, true,
                                     "kernel_initializer", "glorot_uniform"));
  KDC_RETURN_IF_ERROR(kdc_fe_add_var(a, kdc_arena_printf(ar, "%s/recurrent_kernel", cell), &r,
                                     true, "recurrent_initializer", "orthogonal"));
  if (bias) {
    kdc_kshape b = gru && reset_after ? kdc_kshape_make(2, (int64_t[]){2, 3 * units})
                                      : kdc_kshape_make(1, (int64_t[]){gates * units});
    KDC_RETURN_IF_ERROR(kdc_fe_add_var(a, kdc_arena_printf(ar, "%s/bias", cell), &b, true,
                                       "bias_initializer", "zeros"));
  }
  kdc_kshape outs[3];
  outs[0] = seq ? kdc_kshape_make(3, (int64_t[]){x->dims[0], x->dims[1], units})
                : kdc_kshape_make(2, (int64_t[]){x->dims[0], units});
  int n = 1;
  for (int i = 0; state && i < (lstm ? 2 : 1); i++)
    outs[n++] = kdc_kshape_make(2, (int64_t[]){x->dims[0], units});
  kdc_fe_set_outputs(a, n, outs);
  return NULL;
}

/* The tensor passed as keyword |name|, or NULL. */
static const kdc_kshape *kwarg(kdc_infer_args *a, const char *name) {
  for (int i = 0; i < a->node->n_kw; i++)
    if (!strcmp(a->node->kw_names[i], name)) return &a->kw[i];
  return NULL;
}

kdc_status kdc_fe_infer_mha(kdc_infer_args *a) {
  const kdc_keras_layer *l = a->l;
  const kdc_kshape *q = a->node->n_in > 0 ? &a->in[0] : kwarg(a, "query");
  const kdc_kshape *v = a->node->n_in > 1 ? &a->in[1] : kwarg(a, "value");
  const kdc_kshape *k = a->node->n_in > 2 ? &a->in[2] : kwarg(a, "key");
  if (!q || !v) return kdc_fe_layer_err(l, KDC_INVALID_INPUT, "expected query and value tensors");
  if (!k) k = v;
  int64_t heads, kd, vd;
  bool bias;
  KDC_RETURN_IF_ERROR(kdc_fe_cfg_int(l, "num_heads", INT64_MIN, &heads));
  KDC_RETURN_IF_ERROR(kdc_fe_cfg_int(l, "key_dim", INT64_MIN, &kd));
  KDC_RETURN_IF_ERROR(kdc_fe_cfg_int(l, "value_dim", kd, &vd));
  KDC_RETURN_IF_ERROR(kdc_fe_cfg_bool(l, "use_bias", true, &bias));
  if (heads <= 0 || kd <= 0 || vd <= 0)
    return kdc_fe_layer_err(l, KDC_INVALID_INPUT,
                            "num_heads, key_dim and value_dim must be positive");
  bool gate;
  KDC_RETURN_IF_ERROR(kdc_fe_cfg_bool(l, "use_gate", false, &gate));
  if (gate) return kdc_fe_layer_err(l, KDC_UNSUPPORTED, "config.use_gate=true is not supported");
  if (!kdc_fe_is_null(kdc_fe_get(l->config, "sliding_window")))
    return kdc_fe_layer_err(l, KDC_UNSUPPORTED, "config.sliding_window is not supported");
  int64_t qd = q->dims[q->rank - 1], kdim = k->dims[k->rank - 1], vdim = v->dims[v->rank - 1];
  if (q->rank < 3 || qd < 0 || kdim < 0 || vdim < 0)
    return kdc_fe_shape_err(a, "query, key and value need rank >= 3 and a known last dimension",
                            q, v);
  kdc_kshape outdim = kdc_kshape_make(1, &qd);
  json_object *os = kdc_fe_get(l->config, "output_shape");
  if (json_object_is_type(os, json_type_int))
    outdim.dims[0] = json_object_get_int64(os);
  else if (!kdc_fe_is_null(os))
    KDC_RETURN_IF_ERROR(kdc_fe_parse_shape(a->m, os, kdc_fe_join(a->m->arena, l->loc,
                                           "config.output_shape"), &outdim));
  struct { const char *name; int64_t in, d; } proj[3] = {
      {"query", qd, kd}, {"key", kdim, kd}, {"value", vdim, vd}};
  kdc_arena *ar = a->m->arena;
  for (int i = 0; i < 3; i++) {
    kdc_kshape w = kdc_kshape_make(3, (int64_t[]){proj[i].in, heads, proj[i].d});
    kdc_kshape b = kdc_kshape_make(2, (int64_t[]){heads, proj[i].d});
    KDC_RETURN_IF_ERROR(kdc_fe_add_var(a, kdc_arena_printf(ar, "%s/kernel", proj[i].name), &w,
                                       true, "kernel_initializer", "glorot_uniform"));
    if (bias)
      KDC_RETURN_IF_ERROR(kdc_fe_add_var(a, kdc_arena_printf(ar, "%s/bias", proj[i].name), &b,
                                         true, "bias_initializer", "zeros"));
  }
  kdc_kshape w = {.rank = 2 + outdim.rank};
  w.dims[0] = heads, w.dims[1] = vd;
  memcpy(w.dims + 2, outdim.dims, sizeof(int64_t) * (size_t)outdim.rank);
  KDC_RETURN_IF_ERROR(kdc_fe_add_var(a, "attention_output/kernel", &w, true, "kernel_initializer",
                                     "glorot_uniform"));
  if (bias)
    KDC_RETURN_IF_ERROR(kdc_fe_add_var(a, "attention_output/bias", &outdim, true,
                                       "bias_initializer", "zeros"));
  kdc_kshape outs[2];
  outs[0] = *q;
  outs[0].rank = q->rank - 1 + outdim.rank;
  memcpy(outs[0].dims + q->rank - 1, outdim.dims, sizeof(int64_t) * (size_t)outdim.rank);
  int n = 1;
  json_object *ras = kdc_fe_get(a->node->kwargs, "return_attention_scores");
  if (ras && json_object_get_boolean(ras) && q->rank == 3)
    outs[n++] = kdc_kshape_make(4, (int64_t[]){q->dims[0], heads, q->dims[1], k->dims[1]});
  kdc_fe_set_outputs(a, n, outs);
  return NULL;
}
