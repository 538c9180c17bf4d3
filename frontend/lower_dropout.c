/*
 * frontend/lower_dropout.c: the random regularisation layers.  At inference
 * (predict) they are the identity.  In train_forward
 * (kdc_lower_options.train_forward) they draw kdc's counter-based stream,
 * u = rng_uniform %iteration seed=S (docs/training.md, "rng_uniform"), with
 * S = xxhash64 of the layer path keyed by kdc_lower_options.dropout_seed
 * (`kdc compile --seed`), so every layer has its own stream and element i
 * of u depends on (S, step, global index) only: the noise -- and the loss --
 * is the same on every mesh.  The numbers are kdc's Philox stream, not
 * Keras': Keras-distributed, not Keras-identical.  Formulas are Keras 3's
 * (keras/src/layers/regularization/, keras/src/backend/jax/random.py):
 *
 *   Dropout(rate, noise_shape)     keep = u < 1 - rate (u of the noise
 *   SpatialDropout{1,2,3}D(rate)   shape, broadcast to x);
 *                                  y = select(keep, x / (1 - rate), 0)
 *   GaussianNoise(stddev)          y = x + z * stddev
 *   GaussianDropout(rate)          y = x * (z * sqrt(rate / (1 - rate)) + 1)
 *   AlphaDropout(rate, noise_shape) kept = u >= rate; a, b, alpha_p as Keras:
 *                                  y = a * (x * kept + alpha_p * (1 - kept)) + b
 *
 * SpatialDropout's noise shape is [B, 1.., C] (channels_first [B, C, 1..]);
 * Dropout's `noise_shape` has the input's rank, None entries taking the
 * input's size.  z is a standard normal drawn like jax.random.normal: the
 * inverse CDF, z = sqrt(2) * erfinv(v) with v = max(lo, 2u + lo) uniform in
 * (-1, 1) (lo = nextafter(-1, 0) = -1 + 2^-24), and erfinv the single-
 * precision polynomial of M. Giles, "Approximating the erfinv function"
 * (GPU Computing Gems, 2011), which XLA's ErfInv uses too:
 *   w = -log((1 - v)(1 + v));  w < 5: p = P1(w - 2.5)  else p = P2(sqrt(w) - 3)
 *   erfinv(v) = p * v
 * (Box-Muller would need cos, which the IR does not have).
 *
 * A call recorded with `training: true`: Keras 3's predict and fit pass
 * training=False / True to every node themselves and that overrides the
 * recorded value (models/functional.py operation_fn), so Keras 3 files
 * ignore it -- Keras 3.15 records training=True for every layer whose
 * call() defaults to it (RandomFlip, ...).  tf.keras 2 honours an
 * explicit training=True in predict (Monte Carlo dropout): the random
 * augmentation layers refuse such a topology (kdc_fe_call_forces_training);
 * these layers stay the identity in its predict, as kdc has always done
 * (tests/frontend/data/real2's AidanBlumLevine U-Net has such Dropouts).
 */
#include <math.h>
#include <string.h>

#include <json-c/json.h>

#include "common/io.h"
#include "frontend/frontend.h"

/* Giles' coefficients, highest degree first (Horner). */
static const double k_erfinv_lt5[9] = {2.81022636e-08,  3.43273939e-07, -3.5233877e-06,
                                       -4.39150654e-06, 0.00021858087,  -0.00125372503,
                                       -0.00417768164,  0.246640727,    1.50140941};
static const double k_erfinv_ge5[9] = {-0.000200214257, 0.000100950558, 0.00134934322,
                                        -0.00367342844,  0.00573950773,  -0.0076224613,
                                        0.00943887047,   1.00167406,     2.83297682};

/* Standard normal samples of shape |dims| (see the header). */
static kdc_value_id normal(kdc_lower_ctx *c, uint64_t key, int rank, const int64_t *dims) {
  kdc_func *f = c->f;
  const double lo = -1.0 + ldexp(1.0, -24);
  kdc_value_id u = kdc_ir_rng_uniform(f, c->iteration, (int64_t)key, rank, dims);
  kdc_value_id v = kdc_ir_binary_scalar(f, KDC_OP_ADD, kdc_ir_binary_scalar(f, KDC_OP_MUL, u, 2.0), lo);
  v = kdc_ir_binary_scalar(f, KDC_OP_MAX, v, lo);
  kdc_value_id one_m = kdc_ir_unary(f, KDC_OP_NEG, kdc_ir_binary_scalar(f, KDC_OP_SUB, v, 1.0));
  kdc_value_id one_p = kdc_ir_binary_scalar(f, KDC_OP_ADD, v, 1.0);
  kdc_value_id w = kdc_ir_unary(f, KDC_OP_NEG,
                                kdc_ir_unary(f, KDC_OP_LOG, kdc_ir_binary(f, KDC_OP_MUL, one_m, one_p)));
  kdc_value_id small = kdc_ir_compare(f, KDC_CMP_LT, w, kdc_ir_splat(f, KDC_DTYPE_F32, rank, dims, 5.0));
  kdc_value_id w1 = kdc_ir_binary_scalar(f, KDC_OP_SUB, w, 2.5);
  kdc_value_id w2 = kdc_ir_binary_scalar(f, KDC_OP_SUB, kdc_ir_unary(f, KDC_OP_SQRT, w), 3.0);
  kdc_value_id p1 = kdc_ir_splat(f, KDC_DTYPE_F32, rank, dims, k_erfinv_lt5[0]);
  kdc_value_id p2 = kdc_ir_splat(f, KDC_DTYPE_F32, rank, dims, k_erfinv_ge5[0]);
  for (int i = 1; i < 9; i++) {
    p1 = kdc_ir_binary_scalar(f, KDC_OP_ADD, kdc_ir_binary(f, KDC_OP_MUL, p1, w1), k_erfinv_lt5[i]);
    p2 = kdc_ir_binary_scalar(f, KDC_OP_ADD, kdc_ir_binary(f, KDC_OP_MUL, p2, w2), k_erfinv_ge5[i]);
  }
  kdc_value_id e = kdc_ir_binary(f, KDC_OP_MUL, kdc_ir_select(f, small, p1, p2), v);
  return kdc_ir_binary_scalar(f, KDC_OP_MUL, e, sqrt(2.0));
}

/* The noise shape of |l| for input dims |dims| into |nd|: the input's, [B,
 * 1.., C] for SpatialDropout, or Dropout/AlphaDropout's config.noise_shape. */
static kdc_status noise_shape(const kdc_keras_layer *l, int rank, const int64_t *dims,
                              int64_t *nd) {
  memcpy(nd, dims, sizeof(int64_t) * (size_t)rank);
  if (!strncmp(l->class_name, "SpatialDropout", 14)) {
    const char *fmt;
    KDC_RETURN_IF_ERROR(kdc_fe_cfg_str(l, "data_format", "channels_last", &fmt));
    bool first = fmt && !strcmp(fmt, "channels_first");
    for (int d = 1; d < rank; d++)
      if (first ? d != 1 : d != rank - 1) nd[d] = 1;
    return NULL;
  }
  json_object *ns = kdc_fe_get(l->config, "noise_shape");
  if (kdc_fe_is_null(ns)) return NULL;
  if (!json_object_is_type(ns, json_type_array) || (int)json_object_array_length(ns) != rank)
    return kdc_fe_layer_err(l, KDC_INVALID_INPUT, "config.noise_shape: expected a list of %d "
                            "sizes (the input's rank)", rank);
  for (int d = 0; d < rank; d++) {
    json_object *e = json_object_array_get_idx(ns, (size_t)d);
    if (kdc_fe_is_null(e)) continue;
    if (!json_object_is_type(e, json_type_int))
      return kdc_fe_layer_err(l, KDC_INVALID_INPUT, "config.noise_shape[%d]: expected an int or "
                              "null", d);
    int64_t v = json_object_get_int64(e);
    if (v != 1 && v != dims[d])
      return kdc_fe_layer_err(l, KDC_INVALID_INPUT, "config.noise_shape[%d] = %lld does not "
                              "broadcast to the input's size %lld", d, (long long)v,
                              (long long)dims[d]);
    nd[d] = v;
  }
  return NULL;
}

/* |v| of shape |nd| broadcast to |dims| (its size-1 dims stretched). */
static kdc_value_id stretch(kdc_func *f, kdc_value_id v, int rank, const int64_t *nd,
                            const int64_t *dims) {
  if (!memcmp(nd, dims, sizeof(int64_t) * (size_t)rank)) return v;
  int64_t kd[KDC_MAX_RANK], km[KDC_MAX_RANK];
  int k = 0;
  for (int d = 0; d < rank; d++)
    if (nd[d] != 1 || dims[d] == 1) kd[k] = nd[d], km[k] = d, k++;
  return kdc_ir_broadcast(f, kdc_ir_reshape(f, v, k, kd), rank, dims, km);
}

static kdc_status cfg_rate(const kdc_keras_layer *l, const char *key, double *rate) {
  KDC_RETURN_IF_ERROR(kdc_fe_cfg_double(l, key, 0.0, rate));
  if (!(*rate >= 0 && *rate < 1))
    return kdc_fe_layer_err(l, KDC_INVALID_INPUT, "config.%s must be in [0, 1), got %g", key, *rate);
  return NULL;
}

bool kdc_fe_call_forces_training(const kdc_keras_layer *l, const kdc_keras_node *n) {
  json_object *tr = kdc_fe_get(n->kwargs, "training");
  return l->model->tk2_topology && tr && json_object_is_type(tr, json_type_boolean) &&
         json_object_get_boolean(tr);
}

kdc_status kdc_fe_lower_dropout(struct kdc_lower_ctx *c, const kdc_keras_layer *l,
                                const kdc_keras_node *n, const kdc_value_id *in,
                                const kdc_value_id *kw, kdc_value_id *out) {
  out[0] = in[0];
  if (!c->training || in[0] == KDC_NO_VALUE) return NULL;
  kdc_func *f = c->f;
  /* copy what is needed: emitting nodes reallocates the node array */
  const kdc_type *t = kdc_ir_type(f, in[0]);
  const kdc_dtype dtype = t->dtype;
  int rank = t->rank;
  int64_t dims[KDC_MAX_RANK], nd[KDC_MAX_RANK];
  memcpy(dims, t->dims, sizeof(int64_t) * (size_t)rank);
  uint64_t key = kdc_hash64(l->path, strlen(l->path), c->dropout_seed);
  const char *cls = l->class_name;
  if (!strcmp(cls, "GaussianNoise")) {
    double sd;
    KDC_RETURN_IF_ERROR(kdc_fe_cfg_double(l, "stddev", 0.0, &sd));
    if (!(sd >= 0))
      return kdc_fe_layer_err(l, KDC_INVALID_INPUT, "config.stddev must be >= 0, got %g", sd);
    if (sd == 0) return NULL;
    kdc_value_id z = kdc_ir_binary_scalar(f, KDC_OP_MUL, normal(c, key, rank, dims), sd);
    out[0] = kdc_ir_binary(f, KDC_OP_ADD, in[0], z);
    return NULL;
  }
  double rate;
  KDC_RETURN_IF_ERROR(cfg_rate(l, "rate", &rate));
  if (rate == 0) return NULL;
  if (!strcmp(cls, "GaussianDropout")) {
    kdc_value_id z = kdc_ir_binary_scalar(f, KDC_OP_MUL, normal(c, key, rank, dims),
                                          sqrt(rate / (1.0 - rate)));
    out[0] = kdc_ir_binary(f, KDC_OP_MUL, in[0], kdc_ir_binary_scalar(f, KDC_OP_ADD, z, 1.0));
    return NULL;
  }
  KDC_RETURN_IF_ERROR(noise_shape(l, rank, dims, nd));
  kdc_value_id u = kdc_ir_rng_uniform(f, c->iteration, (int64_t)key, rank, nd);
  if (!strcmp(cls, "AlphaDropout")) {
    const double alpha = 1.6732632423543772848170429916717;
    const double scale = 1.0507009873554804934193349852946, alpha_p = -alpha * scale;
    double a = pow((1 - rate) * (1 + rate * alpha_p * alpha_p), -0.5), b = -a * alpha_p * rate;
    kdc_value_id kept = kdc_ir_compare(f, KDC_CMP_GE, u, kdc_ir_splat(f, KDC_DTYPE_F32, rank, nd, rate));
    kept = kdc_ir_convert(f, kept, KDC_DTYPE_F32);
    kept = stretch(f, kept, rank, nd, dims);
    kdc_value_id drop = kdc_ir_unary(f, KDC_OP_NEG, kdc_ir_binary_scalar(f, KDC_OP_SUB, kept, 1.0));
    kdc_value_id x = kdc_ir_binary(f, KDC_OP_ADD, kdc_ir_binary(f, KDC_OP_MUL, in[0], kept),
                                   kdc_ir_binary_scalar(f, KDC_OP_MUL, drop, alpha_p));
    out[0] = kdc_ir_binary_scalar(f, KDC_OP_ADD, kdc_ir_binary_scalar(f, KDC_OP_MUL, x, a), b);
    return NULL;
  }
  kdc_value_id keep = kdc_ir_compare(f, KDC_CMP_LT, u, kdc_ir_splat(f, KDC_DTYPE_F32, rank, nd, 1.0 - rate));
  keep = stretch(f, keep, rank, nd, dims);
  kdc_value_id scaled = kdc_ir_binary_scalar(f, KDC_OP_DIV, in[0], 1.0 - rate);
  out[0] = kdc_ir_select(f, keep, scaled, kdc_ir_splat(f, dtype, rank, dims, 0));
  return NULL;
}
