/*
 * frontend/lower_norm.c: lowering of the normalisation and preprocessing
 * layers at inference, and BatchNormalization in training (train_forward:
 * batch statistics, moving-statistics updates; docs/training.md).
 *
 * Formulas are Keras 3's, read from keras/src/layers/normalization/ and
 * keras/src/layers/preprocessing/ and the JAX backend (keras/src/backend/
 * jax/nn.py: batch_normalization, moments):
 *   BatchNormalization  inv = rsqrt(moving_variance + eps) * gamma,
 *                       y = x * inv + (beta - moving_mean * inv)
 *   LayerNormalization  ops.layer_normalization: mean and var = mean((x -
 *                       mean)^2) (jnp.var, two-pass) over the sorted axes,
 *                       then the same x * inv + res form; rms_scaling
 *                       (deprecated): y = x * rsqrt(var + eps) * gamma
 *   GroupNormalization  x reshaped to (..., groups, C / groups, ...) at the
 *                       channel axis, moments over every axis but the batch
 *                       and group axes, then x * inv + res
 *   UnitNormalization   x * rsqrt(max(sum(x^2), 1e-24))  (epsilon 1e-12)
 *   RMSNormalization    x * rsqrt(mean(x^2 over axis) + epsilon) * scale
 *                       (ops.rms_normalization; epsilon 1e-6; "scale" of the
 *                       axes' sizes in Keras' sorted(axis) order, ones,
 *                       multiplied with numpy broadcasting as Keras does)
 *   Rescaling           x * scale + offset (numpy broadcasting)
 *   Normalization       (x - mean) / max(sqrt(var), 1e-7);
 *                       invert: mean + x * max(sqrt(var), 1e-7)
 * Per-feature values are combined on their own small shape and broadcast
 * once.  The numpy and torch backends compute the variance as E[x^2] -
 * E[x]^2; kdc follows JAX and TensorFlow (mean of squared deviations).
 */
#include <json-c/json.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/frontend.h"

/* Canonical, sorted axes of config |key| for rank |r|; duplicates refused. */
static kdc_status sorted_axes(const kdc_keras_layer *l, const char *key, int64_t dflt, int r,
                              int *n, int64_t *ax) {
  KDC_RETURN_IF_ERROR(kdc_fe_cfg_axes(l, key, dflt, n, ax));
  for (int i = 0; i < *n; i++)
    if (ax[i] < 0) ax[i] += r;
  for (int i = 1; i < *n; i++)
    for (int j = i; j > 0 && ax[j - 1] > ax[j]; j--) {
      int64_t t = ax[j];
      ax[j] = ax[j - 1];
      ax[j - 1] = t;
    }
  for (int i = 0; i < *n; i++)
    if (ax[i] < 0 || ax[i] >= r || (i && ax[i] == ax[i - 1]))
      return kdc_fe_layer_err(l, KDC_INVALID_INPUT, "config.%s: axes out of range or repeated",
                              key);
  return NULL;
}

/* |p| (its elements laid out over the dims |ax| of |t|) broadcast to |t|. */
static kdc_value_id over(kdc_func *f, kdc_value_id p, const kdc_type *t, int n, const int64_t *ax) {
  if (p == KDC_NO_VALUE) return p;
  int64_t d[KDC_MAX_RANK];
  for (int i = 0; i < n; i++) d[i] = t->dims[ax[i]];
  if (kdc_ir_type(f, p)->rank != n) p = kdc_ir_reshape(f, p, n, d);
  return kdc_ir_broadcast(f, p, t->rank, t->dims, ax);
}

/* The dims of |t| not in |ax|, in order. */
static int rest(const kdc_type *t, int n, const int64_t *ax, int64_t *out) {
  int k = 0;
  for (int d = 0; d < t->rank; d++) {
    bool in = false;
    for (int i = 0; i < n; i++) in |= ax[i] == d;
    if (!in) out[k++] = d;
  }
  return k;
}

/* mean and var (broadcast back to |x|'s shape) over |ax|. */
static void moments(kdc_func *f, kdc_value_id x, int n, const int64_t *ax, kdc_value_id *mean,
                    kdc_value_id *var) {
  *mean = *var = KDC_NO_VALUE;
  if (x == KDC_NO_VALUE) return; /* a builder error, reported by the caller */
  const kdc_type t = *kdc_ir_type(f, x);
  int64_t keep[KDC_MAX_RANK], cnt = 1;
  rest(&t, n, ax, keep);
  for (int i = 0; i < n; i++) cnt *= t.dims[ax[i]];
  kdc_value_id m = kdc_ir_binary_scalar(f, KDC_OP_DIV, kdc_ir_reduce(f, KDC_RED_SUM, x, n, ax),
                                        (double)cnt);
  *mean = kdc_ir_broadcast(f, m, t.rank, t.dims, keep);
  kdc_value_id dx = kdc_ir_binary(f, KDC_OP_SUB, x, *mean);
  kdc_value_id v = kdc_ir_reduce(f, KDC_RED_SUM, kdc_ir_binary(f, KDC_OP_MUL, dx, dx), n, ax);
  v = kdc_ir_binary_scalar(f, KDC_OP_DIV, v, (double)cnt);
  *var = kdc_ir_broadcast(f, v, t.rank, t.dims, keep);
}

/* x * inv + (beta - mean * inv) with inv = rsqrt(var + eps) * gamma, all
 * operands of |x|'s shape (gamma, beta may be KDC_NO_VALUE). */
static kdc_value_id normalize(kdc_func *f, kdc_value_id x, kdc_value_id mean, kdc_value_id var,
                              kdc_value_id gamma, kdc_value_id beta, double eps) {
  kdc_value_id inv = kdc_ir_unary(f, KDC_OP_RSQRT, kdc_ir_binary_scalar(f, KDC_OP_ADD, var, eps));
  if (gamma != KDC_NO_VALUE) inv = kdc_ir_binary(f, KDC_OP_MUL, inv, gamma);
  kdc_value_id res = kdc_ir_binary(f, KDC_OP_MUL, kdc_ir_unary(f, KDC_OP_NEG, mean), inv);
  if (beta != KDC_NO_VALUE) res = kdc_ir_binary(f, KDC_OP_ADD, res, beta);
  return kdc_ir_binary(f, KDC_OP_ADD, kdc_ir_binary(f, KDC_OP_MUL, x, inv), res);
}

/* Training-mode BatchNormalization statistics (Keras 3 _moments, JAX
 * ops.moments: mean, then the biased variance as the mean of squared
 * deviations) over every dim of |x| but the feature dims |ax|, counting only
 * the rows whose sample_mask is 1 (the batch is dim 0; a padded partial
 * batch then has exactly Keras' statistics of its real rows).  The results
 * have the weights' shape |wt| (the feature dims).  A split batch makes the
 * sums partial: the partitioner all-reduces them over the batch axes, so the
 * statistics are always those of the global batch.
 * With a Keras mask |km| (the input's dims but the last; Keras 3 _moments
 * with a mask): entries are weighted by the mask broadcast over the last
 * dim (times the sample mask), and both sums are divided by the sum of the
 * weights + backend.epsilon() (1e-7). */
static void batch_moments(kdc_lower_ctx *c, kdc_value_id x, kdc_value_id km, int na,
                          const int64_t *ax, const kdc_type *wt, kdc_value_id *mean,
                          kdc_value_id *var) {
  kdc_func *f = c->f;
  const kdc_type t = *kdc_ir_type(f, x);
  int64_t red[KDC_MAX_RANK], fd[KDC_MAX_RANK], spatial = 1;
  int nr = rest(&t, na, ax, red);
  for (int i = 0; i < na; i++) fd[i] = t.dims[ax[i]];
  bool masked = nr > 0 && red[0] == 0;
  for (int i = masked ? 1 : 0; i < nr; i++) spatial *= t.dims[red[i]];
  kdc_value_id w = KDC_NO_VALUE, cnt;
  if (km != KDC_NO_VALUE) {
    int64_t map[KDC_MAX_RANK];
    for (int i = 0; i < t.rank - 1; i++) map[i] = i;
    w = kdc_ir_broadcast(f, kdc_ir_convert(f, kdc_fe_mask_bool(f, km), KDC_DTYPE_F32), t.rank,
                         t.dims, map);
    if (masked) {
      int64_t zero = 0;
      w = kdc_ir_binary(f, KDC_OP_MUL, w,
                        kdc_ir_broadcast(f, kdc_fe_sample_mask(c), t.rank, t.dims, &zero));
    }
    masked = true;
    cnt = kdc_ir_binary_scalar(f, KDC_OP_ADD, kdc_ir_reduce(f, KDC_RED_SUM, w, nr, red), 1e-7);
  } else if (masked) {
    int64_t zero = 0;
    kdc_value_id m = kdc_fe_sample_mask(c);
    w = kdc_ir_broadcast(f, m, t.rank, t.dims, &zero);
    kdc_value_id rows = kdc_ir_reduce(f, KDC_RED_SUM, m, 1, &zero);
    cnt = kdc_ir_broadcast(f, kdc_ir_binary_scalar(f, KDC_OP_MUL, rows, (double)spatial), na,
                           fd, NULL);
  } else {
    cnt = kdc_ir_splat(f, KDC_DTYPE_F32, na, fd, (double)spatial);
  }
  kdc_value_id xs = masked ? kdc_ir_binary(f, KDC_OP_MUL, x, w) : x;
  kdc_value_id mu = kdc_ir_binary(f, KDC_OP_DIV, kdc_ir_reduce(f, KDC_RED_SUM, xs, nr, red), cnt);
  kdc_value_id dx = kdc_ir_binary(f, KDC_OP_SUB, x, kdc_ir_broadcast(f, mu, t.rank, t.dims, ax));
  kdc_value_id sq = kdc_ir_binary(f, KDC_OP_MUL, dx, dx);
  if (masked) sq = kdc_ir_binary(f, KDC_OP_MUL, sq, w);
  kdc_value_id v = kdc_ir_binary(f, KDC_OP_DIV, kdc_ir_reduce(f, KDC_RED_SUM, sq, nr, red), cnt);
  *mean = kdc_ir_reshape(f, mu, wt->rank, wt->dims);
  *var = kdc_ir_reshape(f, v, wt->rank, wt->dims);
}

/* moving * momentum + stat * (1 - momentum) (batch_normalization.py call;
 * both factors rounded to f32 as JAX does with the Python floats). */
static kdc_status update_moving(kdc_lower_ctx *c, const kdc_keras_layer *l, const char *name,
                                kdc_value_id stat, double momentum) {
  kdc_func *f = c->f;
  kdc_value_id cur = kdc_fe_state_value(c, l, name);
  kdc_value_id a = kdc_ir_binary_scalar(f, KDC_OP_MUL, cur, momentum);
  kdc_value_id b = kdc_ir_binary_scalar(f, KDC_OP_MUL, stat, 1.0 - momentum);
  return kdc_fe_assign(c, l, name, kdc_ir_binary(f, KDC_OP_ADD, a, b));
}

kdc_status kdc_fe_lower_batchnorm(struct kdc_lower_ctx *c, const kdc_keras_layer *l,
                                  const kdc_keras_node *n, const kdc_value_id *in,
                                  const kdc_value_id *kw, kdc_value_id *out) {
  kdc_func *f = c->f;
  const kdc_type t = *kdc_ir_type(f, in[0]);
  int na;
  int64_t ax[KDC_MAX_RANK];
  double eps, momentum;
  KDC_RETURN_IF_ERROR(kdc_fe_cfg_double(l, "epsilon", 1e-3, &eps));
  KDC_RETURN_IF_ERROR(kdc_fe_cfg_double(l, "momentum", 0.99, &momentum));
  KDC_RETURN_IF_ERROR(kdc_fe_cfg_axes(l, "axis", -1, &na, ax));
  for (int i = 0; i < na; i++) {
    if (ax[i] < 0) ax[i] += t.rank;
    if (i && ax[i] <= ax[i - 1])
      return kdc_fe_layer_err(l, KDC_UNSUPPORTED, "config.axis: a list of axes must be increasing");
  }
  /* per-feature inv and res first, then one broadcast each */
  kdc_value_id var = kdc_fe_weight(c, l, "moving_variance");
  kdc_value_id mean = kdc_fe_weight(c, l, "moving_mean");
  /* Keras: `training and self.trainable` uses the batch statistics (over
   * the global batch whatever `synchronized` says) and updates the moving
   * ones; a frozen layer stays in inference mode. */
  if (c->training && l->trainable && var != KDC_NO_VALUE && mean != KDC_NO_VALUE) {
    const kdc_type wt = *kdc_ir_type(f, var);
    kdc_value_id km = kdc_fe_input_mask(c, 0);
    if (km != KDC_NO_VALUE) {
      const kdc_type mt = *kdc_ir_type(f, km);
      bool ok = mt.rank == t.rank - 1;
      for (int i = 0; ok && i < mt.rank; i++) ok = mt.dims[i] == t.dims[i];
      if (!ok)
        return kdc_fe_layer_err(l, KDC_INVALID_INPUT, "the Keras mask must have the input's "
                                "dims but the last (Keras raises for any other mask)");
    }
    batch_moments(c, in[0], km, na, ax, &wt, &mean, &var);
    KDC_RETURN_IF_ERROR(update_moving(c, l, "moving_mean", mean, momentum));
    KDC_RETURN_IF_ERROR(update_moving(c, l, "moving_variance", var, momentum));
  }
  kdc_value_id inv = kdc_ir_unary(f, KDC_OP_RSQRT, kdc_ir_binary_scalar(f, KDC_OP_ADD, var, eps));
  kdc_value_id gamma = kdc_fe_weight(c, l, "gamma"), beta = kdc_fe_weight(c, l, "beta");
  if (gamma != KDC_NO_VALUE) inv = kdc_ir_binary(f, KDC_OP_MUL, inv, gamma);
  kdc_value_id res = kdc_ir_binary(f, KDC_OP_MUL, kdc_ir_unary(f, KDC_OP_NEG, mean), inv);
  if (beta != KDC_NO_VALUE) res = kdc_ir_binary(f, KDC_OP_ADD, res, beta);
  kdc_value_id y = kdc_ir_binary(f, KDC_OP_MUL, in[0], over(f, inv, &t, na, ax));
  out[0] = kdc_ir_binary(f, KDC_OP_ADD, y, over(f, res, &t, na, ax));
  return NULL;
}

kdc_status kdc_fe_lower_layernorm(struct kdc_lower_ctx *c, const kdc_keras_layer *l,
                                  const kdc_keras_node *n, const kdc_value_id *in,
                                  const kdc_value_id *kw, kdc_value_id *out) {
  kdc_func *f = c->f;
  const kdc_type t = *kdc_ir_type(f, in[0]);
  int na;
  int64_t ax[KDC_MAX_RANK];
  double eps;
  bool rms;
  KDC_RETURN_IF_ERROR(kdc_fe_cfg_double(l, "epsilon", 1e-3, &eps));
  KDC_RETURN_IF_ERROR(kdc_fe_cfg_bool(l, "rms_scaling", false, &rms));
  KDC_RETURN_IF_ERROR(sorted_axes(l, "axis", -1, t.rank, &na, ax));
  kdc_value_id mean, var;
  moments(f, in[0], na, ax, &mean, &var);
  /* gamma/beta are reshaped row-major onto the sorted axes, as Keras'
   * ops.layer_normalization does (even when the config lists them unsorted) */
  kdc_value_id gamma = over(f, kdc_fe_weight(c, l, "gamma"), &t, na, ax);
  kdc_value_id beta = over(f, kdc_fe_weight(c, l, "beta"), &t, na, ax);
  if (rms) {
    kdc_value_id inv = kdc_ir_unary(f, KDC_OP_RSQRT, kdc_ir_binary_scalar(f, KDC_OP_ADD, var, eps));
    out[0] = kdc_ir_binary(f, KDC_OP_MUL, in[0], inv);
    if (gamma != KDC_NO_VALUE) out[0] = kdc_ir_binary(f, KDC_OP_MUL, out[0], gamma);
    return NULL;
  }
  out[0] = normalize(f, in[0], mean, var, gamma, beta, eps);
  return NULL;
}

kdc_status kdc_fe_lower_groupnorm(struct kdc_lower_ctx *c, const kdc_keras_layer *l,
                                  const kdc_keras_node *n, const kdc_value_id *in,
                                  const kdc_value_id *kw, kdc_value_id *out) {
  kdc_func *f = c->f;
  const kdc_type t = *kdc_ir_type(f, in[0]);
  int64_t axis, groups;
  double eps;
  KDC_RETURN_IF_ERROR(kdc_fe_cfg_double(l, "epsilon", 1e-3, &eps));
  KDC_RETURN_IF_ERROR(kdc_fe_cfg_int(l, "axis", -1, &axis));
  KDC_RETURN_IF_ERROR(kdc_fe_cfg_int(l, "groups", 32, &groups));
  if (axis < 0) axis += t.rank;
  int64_t ch = t.dims[axis];
  if (groups == -1) groups = ch;
  if (t.rank + 1 > KDC_MAX_RANK) return kdc_fe_layer_err(l, KDC_UNSUPPORTED, "rank too large");
  /* (..., C, ...) -> (..., G, C/G, ...) */
  kdc_type g = {t.dtype, t.rank + 1, {0}};
  for (int d = 0, k = 0; d < t.rank; d++) {
    if (d == axis) g.dims[k++] = groups, g.dims[k++] = ch / groups;
    else g.dims[k++] = t.dims[d];
  }
  kdc_value_id x = kdc_ir_reshape(f, in[0], g.rank, g.dims);
  int64_t red[KDC_MAX_RANK], pax[2] = {axis, axis + 1};
  int nr = 0;
  for (int d = 1; d < g.rank; d++)
    if (d != axis) red[nr++] = d;
  kdc_value_id mean, var;
  moments(f, x, nr, red, &mean, &var);
  kdc_value_id gamma = over(f, kdc_fe_weight(c, l, "gamma"), &g, 2, pax);
  kdc_value_id beta = over(f, kdc_fe_weight(c, l, "beta"), &g, 2, pax);
  out[0] = kdc_ir_reshape(f, normalize(f, x, mean, var, gamma, beta, eps), t.rank, t.dims);
  return NULL;
}

kdc_status kdc_fe_lower_unitnorm(struct kdc_lower_ctx *c, const kdc_keras_layer *l,
                                 const kdc_keras_node *n, const kdc_value_id *in,
                                 const kdc_value_id *kw, kdc_value_id *out) {
  kdc_func *f = c->f;
  const kdc_type t = *kdc_ir_type(f, in[0]);
  int na;
  int64_t ax[KDC_MAX_RANK], keep[KDC_MAX_RANK];
  KDC_RETURN_IF_ERROR(sorted_axes(l, "axis", -1, t.rank, &na, ax));
  rest(&t, na, ax, keep);
  kdc_value_id s =
      kdc_ir_reduce(f, KDC_RED_SUM, kdc_ir_binary(f, KDC_OP_MUL, in[0], in[0]), na, ax);
  kdc_value_id inv = kdc_ir_unary(f, KDC_OP_RSQRT, kdc_ir_binary_scalar(f, KDC_OP_MAX, s, 1e-24));
  out[0] = kdc_ir_binary(f, KDC_OP_MUL, in[0], kdc_ir_broadcast(f, inv, t.rank, t.dims, keep));
  return NULL;
}

/* RMSNormalization's axes as Keras keeps them: an int, or a list sorted as
 * given (negative entries included, as Python's sorted() does). */
static kdc_status rms_axes(const kdc_keras_layer *l, int r, int *n, int64_t *raw) {
  KDC_RETURN_IF_ERROR(kdc_fe_cfg_axes(l, "axis", -1, n, raw));
  for (int i = 0; i < *n; i++) {
    if (raw[i] < -r || raw[i] >= r)
      return kdc_fe_layer_err(l, KDC_INVALID_INPUT, "config.axis: axis %lld is out of bounds for "
                              "an input of rank %d", (long long)raw[i], r);
    for (int j = i; j > 0 && raw[j - 1] > raw[j]; j--) {
      int64_t t = raw[j];
      raw[j] = raw[j - 1], raw[j - 1] = t;
    }
  }
  return NULL;
}

kdc_status kdc_fe_infer_rmsnorm(kdc_infer_args *a) {
  const kdc_kshape *x = &a->in[0];
  int n;
  int64_t raw[KDC_MAX_RANK];
  KDC_RETURN_IF_ERROR(rms_axes(a->l, x->rank, &n, raw));
  kdc_kshape s = {.rank = n};
  for (int i = 0; i < n; i++) s.dims[i] = x->dims[raw[i] < 0 ? raw[i] + x->rank : raw[i]];
  KDC_RETURN_IF_ERROR(kdc_fe_add_var(a, "scale", &s, true, NULL, "ones"));
  kdc_fe_set_outputs(a, 1, x);
  return NULL;
}

kdc_status kdc_fe_lower_rmsnorm(struct kdc_lower_ctx *c, const kdc_keras_layer *l,
                                const kdc_keras_node *n, const kdc_value_id *in,
                                const kdc_value_id *kw, kdc_value_id *out) {
  kdc_func *f = c->f;
  if (in[0] == KDC_NO_VALUE) return NULL;
  const kdc_type t = *kdc_ir_type(f, in[0]);
  int na;
  int64_t ax[KDC_MAX_RANK], keep[KDC_MAX_RANK];
  double eps;
  KDC_RETURN_IF_ERROR(kdc_fe_cfg_double(l, "epsilon", 1e-6, &eps));
  KDC_RETURN_IF_ERROR(sorted_axes(l, "axis", -1, t.rank, &na, ax));
  rest(&t, na, ax, keep);
  kdc_value_id ms = kdc_ir_reduce(f, KDC_RED_SUM, kdc_ir_binary(f, KDC_OP_MUL, in[0], in[0]), na, ax);
  int64_t cnt = 1;
  for (int i = 0; i < na; i++) cnt *= t.dims[ax[i]];
  ms = kdc_ir_binary_scalar(f, KDC_OP_DIV, ms, (double)cnt);
  kdc_value_id inv = kdc_ir_unary(f, KDC_OP_RSQRT, kdc_ir_binary_scalar(f, KDC_OP_ADD, ms, eps));
  kdc_value_id y = kdc_ir_binary(f, KDC_OP_MUL, in[0], kdc_ir_broadcast(f, inv, t.rank, t.dims, keep));
  /* ops.multiply(outputs, scale): numpy broadcasting of the scale's shape */
  out[0] = kdc_ir_binary_bcast(f, KDC_OP_MUL, y, kdc_fe_weight(c, l, "scale"));
  return NULL;
}

/* The shape of a (nested) JSON list of numbers, from its first elements. */
static bool list_shape(json_object *o, kdc_kshape *s) {
  s->rank = 0;
  while (json_object_is_type(o, json_type_array)) {
    if (s->rank >= KDC_MAX_RANK || json_object_array_length(o) == 0) return false;
    s->dims[s->rank++] = (int64_t)json_object_array_length(o);
    o = json_object_array_get_idx(o, 0);
  }
  return true;
}

/* Appends the numbers of |o| (depth |d| of shape |s|) to |data|. */
static bool collect(json_object *o, int d, const kdc_kshape *s, float *data, int64_t *n) {
  if (d == s->rank) {
    if (!json_object_is_type(o, json_type_int) && !json_object_is_type(o, json_type_double))
      return false;
    data[(*n)++] = (float)json_object_get_double(o);
    return true;
  }
  if (!json_object_is_type(o, json_type_array) ||
      (int64_t)json_object_array_length(o) != s->dims[d])
    return false;
  for (int64_t i = 0; i < s->dims[d]; i++)
    if (!collect(json_object_array_get_idx(o, (size_t)i), d + 1, s, data, n)) return false;
  return true;
}

static kdc_status cfg_const(kdc_lower_ctx *c, const kdc_keras_layer *l, const char *key,
                            double dflt, kdc_value_id *out) {
  json_object *o = kdc_fe_get(l->config, key);
  json_object *cls = kdc_fe_get(o, "class_name");
  if (cls && !strcmp(json_object_get_string(cls), "__numpy__"))
    o = kdc_fe_get(kdc_fe_get(o, "config"), "value");
  if (kdc_fe_is_null(o)) {
    *out = kdc_ir_scalar(c->f, KDC_DTYPE_F32, dflt);
    return NULL;
  }
  kdc_kshape s;
  int64_t n = 0;
  float *data = NULL;
  bool ok = list_shape(o, &s);
  if (ok) {
    data = kdc_xmalloc(sizeof(float) * (size_t)(kdc_kshape_numel(&s) + 1));
    ok = collect(o, 0, &s, data, &n);
  }
  kdc_status st = NULL;
  if (!ok)
    st = kdc_fe_layer_err(l, KDC_INVALID_INPUT, "config.%s: expected a number or a non-empty "
                          "rectangular list of numbers", key);
  if (!st) {
    kdc_type t = kdc_type_make(KDC_DTYPE_F32, s.rank, s.dims);
    *out = kdc_ir_constant(c->f, &t, data);
  }
  free(data);
  return st;
}

kdc_status kdc_fe_lower_rescaling(struct kdc_lower_ctx *c, const kdc_keras_layer *l,
                                  const kdc_keras_node *n, const kdc_value_id *in,
                                  const kdc_value_id *kw, kdc_value_id *out) {
  kdc_value_id scale, offset;
  if (kdc_fe_is_null(kdc_fe_get(l->config, "scale")))
    return kdc_fe_layer_err(l, KDC_INVALID_INPUT, "config.scale is required");
  KDC_RETURN_IF_ERROR(cfg_const(c, l, "scale", 1.0, &scale));
  KDC_RETURN_IF_ERROR(cfg_const(c, l, "offset", 0.0, &offset));
  kdc_value_id y = kdc_ir_binary_bcast(c->f, KDC_OP_MUL, in[0], scale);
  out[0] = kdc_ir_binary_bcast(c->f, KDC_OP_ADD, y, offset);
  return NULL;
}

/* A config mean/variance aligned right to left onto the kept axes
 * (keras/src/layers/preprocessing/normalization.py build), then broadcast
 * to |t|. */
static kdc_status cfg_stat(kdc_lower_ctx *c, const kdc_keras_layer *l, const char *key,
                           const kdc_type *t, int nk, const int64_t *keep, kdc_value_id *out) {
  kdc_func *f = c->f;
  KDC_RETURN_IF_ERROR(cfg_const(c, l, key, 0, out));
  if (*out == KDC_NO_VALUE) return NULL;
  const kdc_type m = *kdc_ir_type(f, *out);
  if (m.rank > nk)
    return kdc_fe_layer_err(l, KDC_INVALID_INPUT, "config.%s has rank %d, more than the %d kept "
                            "axes", key, m.rank, nk);
  int64_t e[KDC_MAX_RANK];
  for (int d = 0; d < t->rank; d++) e[d] = 1;
  for (int i = 1; i <= m.rank; i++) {
    int64_t want = t->dims[keep[nk - i]], got = m.dims[m.rank - i];
    if (got != want && got != 1)
      return kdc_fe_layer_err(l, KDC_INVALID_INPUT, "config.%s: size %lld does not fit axis %lld "
                              "of size %lld", key, (long long)got, (long long)keep[nk - i],
                              (long long)want);
    e[keep[nk - i]] = got;
  }
  if (m.rank) *out = kdc_ir_reshape(f, *out, t->rank, e);
  *out = kdc_ir_broadcast_to(f, *out, t->rank, t->dims);
  return NULL;
}

kdc_status kdc_fe_lower_normalization(struct kdc_lower_ctx *c, const kdc_keras_layer *l,
                                      const kdc_keras_node *n, const kdc_value_id *in,
                                      const kdc_value_id *kw, kdc_value_id *out) {
  kdc_func *f = c->f;
  const kdc_type t = *kdc_ir_type(f, in[0]);
  int nk = 0;
  int64_t keep[KDC_MAX_RANK];
  json_object *axis = kdc_fe_get(l->config, "axis");
  if (!axis || !kdc_fe_is_null(axis))
    KDC_RETURN_IF_ERROR(sorted_axes(l, "axis", -1, t.rank, &nk, keep));
  bool invert;
  KDC_RETURN_IF_ERROR(kdc_fe_cfg_bool(l, "invert", false, &invert));
  kdc_value_id mean, var;
  if (kdc_fe_is_null(kdc_fe_get(l->config, "mean"))) {
    mean = over(f, kdc_fe_weight(c, l, "mean"), &t, nk, keep);
    var = over(f, kdc_fe_weight(c, l, "variance"), &t, nk, keep);
  } else {
    if (kdc_fe_is_null(kdc_fe_get(l->config, "variance")))
      return kdc_fe_layer_err(l, KDC_INVALID_INPUT, "config.variance: required with config.mean");
    KDC_RETURN_IF_ERROR(cfg_stat(c, l, "mean", &t, nk, keep, &mean));
    KDC_RETURN_IF_ERROR(cfg_stat(c, l, "variance", &t, nk, keep, &var));
  }
  kdc_value_id sd = kdc_ir_binary_scalar(f, KDC_OP_MAX, kdc_ir_unary(f, KDC_OP_SQRT, var), 1e-7);
  if (invert)
    out[0] = kdc_ir_binary(f, KDC_OP_ADD, mean, kdc_ir_binary(f, KDC_OP_MUL, in[0], sd));
  else
    out[0] = kdc_ir_binary(f, KDC_OP_DIV, kdc_ir_binary(f, KDC_OP_SUB, in[0], mean), sd);
  return NULL;
}
