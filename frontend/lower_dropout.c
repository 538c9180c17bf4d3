/*
 * frontend/lower_dropout.c: Dropout-like layers.  At inference (predict)
 * they are the identity.  In train_forward (kdc_lower_options.train_forward)
 * Dropout and SpatialDropout{1,2,3}D drop as keras.random.dropout does on
 * JAX (keep with probability 1 - rate, kept values scaled by 1 / (1 - rate)):
 *
 *   u    = rng_uniform %iteration seed=S : f32[noise shape]
 *   keep = u < 1 - rate           (broadcast to the input for SpatialDropout)
 *   y    = select(keep, x / (1 - rate), 0)
 *
 * S = xxhash64 of the layer path keyed by kdc_lower_options.dropout_seed
 * (`kdc compile --seed`), so every layer has its own stream; element i of u
 * depends on (S, step, global index) only, so the mask -- and the loss -- is
 * the same on every mesh (docs/training.md, "rng_uniform").  The numbers are
 * kdc's Philox stream, not Keras': the masks are Keras-distributed, not
 * Keras-identical.  GaussianNoise, GaussianDropout and AlphaDropout need a
 * normal sampler (not yet): in train_forward they are an UNSUPPORTED error,
 * and so is BatchNormalization (kdc_fe_check_trainable_layers).
 */
#include <string.h>

#include "common/io.h"
#include "frontend/frontend.h"

kdc_status kdc_fe_check_trainable_layers(const kdc_keras_model *m) {
  for (int i = 0; i < m->n_layers; i++) {
    const kdc_keras_layer *l = &m->layers[i];
    if (l->sub) KDC_RETURN_IF_ERROR(kdc_fe_check_trainable_layers(l->sub));
    if (!strcmp(l->class_name, "BatchNormalization"))
      return kdc_fe_layer_err(l, KDC_UNSUPPORTED, "BatchNormalization training is not supported "
                              "yet (batch statistics and moving-average updates)");
    if (!strcmp(l->class_name, "GaussianNoise") || !strcmp(l->class_name, "GaussianDropout") ||
        !strcmp(l->class_name, "AlphaDropout"))
      return kdc_fe_layer_err(l, KDC_UNSUPPORTED, "%s training is not supported yet (needs a "
                              "normal random sampler)", l->class_name);
  }
  return NULL;
}

kdc_status kdc_fe_lower_dropout(struct kdc_lower_ctx *c, const kdc_keras_layer *l,
                                const kdc_keras_node *n, const kdc_value_id *in,
                                const kdc_value_id *kw, kdc_value_id *out) {
  out[0] = in[0];
  if (!c->training || in[0] == KDC_NO_VALUE) return NULL;
  double rate;
  KDC_RETURN_IF_ERROR(kdc_fe_cfg_double(l, "rate", 0.0, &rate));
  if (!(rate >= 0 && rate < 1))
    return kdc_fe_layer_err(l, KDC_INVALID_INPUT, "config.rate must be in [0, 1), got %g", rate);
  if (rate == 0) return NULL;
  if (!kdc_fe_is_null(kdc_fe_get(l->config, "noise_shape")))
    return kdc_fe_layer_err(l, KDC_UNSUPPORTED, "config.noise_shape is not supported in training");
  kdc_func *f = c->f;
  const kdc_type *t = kdc_ir_type(f, in[0]);
  int rank = t->rank;
  int64_t dims[KDC_MAX_RANK], nd[KDC_MAX_RANK];
  memcpy(dims, t->dims, sizeof(int64_t) * (size_t)rank);
  memcpy(nd, dims, sizeof nd);
  if (!strncmp(l->class_name, "SpatialDropout", 14)) {
    const char *fmt;
    KDC_RETURN_IF_ERROR(kdc_fe_cfg_str(l, "data_format", "channels_last", &fmt));
    bool first = fmt && !strcmp(fmt, "channels_first");
    for (int d = 1; d < rank; d++)
      if (first ? d != 1 : d != rank - 1) nd[d] = 1;
  }
  uint64_t key = kdc_hash64(l->path, strlen(l->path), c->dropout_seed);
  kdc_value_id u = kdc_ir_rng_uniform(f, c->iteration, (int64_t)key, rank, nd);
  kdc_value_id keep = kdc_ir_compare(f, KDC_CMP_LT, u, kdc_ir_splat(f, KDC_DTYPE_F32, rank, nd, 1.0 - rate));
  bool bcast = memcmp(nd, dims, sizeof(int64_t) * (size_t)rank) != 0;
  if (bcast) {
    /* broadcast_in_dim of the size-1 dims: drop them, then broadcast back */
    int64_t kd[KDC_MAX_RANK], km[KDC_MAX_RANK];
    int k = 0;
    for (int d = 0; d < rank; d++)
      if (nd[d] != 1 || dims[d] == 1) kd[k] = nd[d], km[k] = d, k++;
    keep = kdc_ir_broadcast(f, kdc_ir_reshape(f, keep, k, kd), rank, dims, km);
  }
  kdc_value_id scaled = kdc_ir_binary_scalar(f, KDC_OP_DIV, in[0], 1.0 - rate);
  out[0] = kdc_ir_select(f, keep, scaled, kdc_ir_splat(f, t->dtype, rank, dims, 0));
  return NULL;
}
