/*
 * frontend/mask.c: Keras 3 mask propagation, and the Masking layer.
 *
 * In Keras 3 a mask travels with a tensor (`_keras_mask`, set by
 * backend.set_keras_mask).  When a layer is called (keras/src/layers/
 * layer.py __call__): its "previous mask" is the mask of its first
 * argument -- a list of masks when that argument is a list (merge layers)
 * -- or the call's explicit `mask` kwarg; a layer whose call() takes
 * `mask` receives it.  After the call, a layer with supports_masking sets
 * compute_mask(inputs, previous_mask) on outputs that have no mask yet
 * (_set_mask_metadata: nothing is computed when call() set every output's
 * mask itself); any other layer drops the mask (Keras warns).  The default
 * compute_mask returns the previous mask unchanged.
 *
 * kdc carries one optional mask value per tensor through the graph walk
 * (lower.c) and applies the table below, one row per class, read from
 * keras/src/layers/ (3.16 sources; `supports_masking = True` and the
 * compute_mask overrides):
 *   pass      the previous mask to output 0: Dense, Activation, ReLU,
 *             LeakyReLU, ELU, PReLU, Softmax, Dropout and the noise layers,
 *             Identity, ActivityRegularization, the normalisation layers,
 *             Rescaling, MultiHeadAttention (the query's mask, which its
 *             call also sets), Attention/AdditiveAttention (mask[0])
 *   Embedding ids != 0 when mask_zero (core/embedding.py)
 *   Masking   any(x != mask_value, axis=-1) (core/masking.py)
 *   LSTM/GRU/SimpleRNN  the mask when return_sequences, none for states
 *             (rnn/rnn.py); Bidirectional likewise, twice for merge_mode
 *             None (rnn/bidirectional.py).  Keras 3.16 turned
 *             supports_masking off for both (commit a8b52ca, "Disable
 *             automatic mask propagation in RNN layers"): files whose
 *             keras_version says >= 3.16 drop the mask there.
 *   Add/Subtract/Multiply/Average/Maximum/Minimum  OR of the masks, none
 *             when an input has none (merging/base_merge.py)
 *   Concatenate  each input's mask (ones when none) broadcast to its
 *             input, concatenated along the axis, any over the last axis
 *             (merging/concatenate.py)
 *   Dot, GlobalAveragePooling1D: none.  Every other class drops the mask.
 * Classes whose call() uses the mask (RNNs, Bidirectional,
 * GlobalAveragePooling1D, Softmax, MultiHeadAttention, Attention,
 * TimeDistributed) are marked: when one is given a mask, its lowering must
 * have read it (kdc_fe_input_mask), else the layer is a located error --
 * never a silently unmasked result.  BatchNormalization uses a mask only
 * for training statistics (masked moments, lower_norm.c).
 */
#include <json-c/json.h>
#include <float.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/frontend.h"

typedef kdc_status (*mask_fn)(kdc_lower_ctx *c, const kdc_keras_layer *l,
                              const kdc_keras_node *n, const kdc_value_id *in,
                              const kdc_value_id *in_mask, kdc_value_id *out_mask);

typedef struct mask_rule {
  const char *cls;
  mask_fn fn;      /* compute_mask; NULL: the mask is dropped */
  bool consumes;   /* call() uses the mask: the lowering must read it */
} mask_rule;

bool kdc_fe_keras_at_least(const kdc_keras_model *m, int major, int minor) {
  while (m->parent) m = m->parent;
  const char *v = m->keras_version;
  if (!v || m->tk2_topology) return false;
  char *end;
  long ma = strtol(v, &end, 10), mi = *end == '.' ? strtol(end + 1, NULL, 10) : 0;
  return ma > major || (ma == major && mi >= minor);
}

kdc_value_id kdc_fe_mask_bool(kdc_func *f, kdc_value_id m) {
  if (m == KDC_NO_VALUE) return m;
  const kdc_type t = *kdc_ir_type(f, m);
  if (t.dtype == KDC_DTYPE_BOOL) return m;
  return kdc_ir_compare(f, KDC_CMP_NE, m, kdc_ir_splat(f, t.dtype, t.rank, t.dims, 0));
}

kdc_value_id kdc_fe_input_mask(struct kdc_lower_ctx *c, int i) {
  if (!c->in_mask || c->in_mask[i] == KDC_NO_VALUE) return KDC_NO_VALUE;
  c->mask_taken = true;
  return c->in_mask[i];
}

/* any(p, axis = last) of a bool |p|, as bool. */
static kdc_value_id any_last(kdc_func *f, kdc_value_id p) {
  const kdc_type t = *kdc_ir_type(f, p);
  int64_t ax = t.rank - 1;
  kdc_value_id s = kdc_ir_reduce(f, KDC_RED_MAX, kdc_ir_convert(f, p, KDC_DTYPE_F32), 1, &ax);
  return kdc_fe_mask_bool(f, s);
}

static kdc_status mask_pass(kdc_lower_ctx *c, const kdc_keras_layer *l, const kdc_keras_node *n,
                            const kdc_value_id *in, const kdc_value_id *in_mask,
                            kdc_value_id *out_mask) {
  (void)c, (void)l, (void)n, (void)in;
  out_mask[0] = in_mask[0];
  return NULL;
}

static kdc_status mask_embedding(kdc_lower_ctx *c, const kdc_keras_layer *l,
                                 const kdc_keras_node *n, const kdc_value_id *in,
                                 const kdc_value_id *in_mask, kdc_value_id *out_mask) {
  (void)n, (void)in_mask;
  bool zero;
  KDC_RETURN_IF_ERROR(kdc_fe_cfg_bool(l, "mask_zero", false, &zero));
  if (zero) out_mask[0] = kdc_fe_mask_bool(c->f, in[0]);
  return NULL;
}

static kdc_status mask_value(const kdc_keras_layer *l, double *out) {
  json_object *o = kdc_fe_get(l->config, "mask_value");
  *out = 0;
  if (!o || kdc_fe_is_null(o)) return NULL;
  if (!json_object_is_type(o, json_type_double) && !json_object_is_type(o, json_type_int))
    return kdc_fe_layer_err(l, KDC_UNSUPPORTED, "config.mask_value: expected a number");
  *out = json_object_get_double(o);
  return NULL;
}

/* any(x != mask_value, axis=-1) */
static kdc_status masking_mask(kdc_lower_ctx *c, const kdc_keras_layer *l, kdc_value_id x,
                               kdc_value_id *out) {
  double mv;
  KDC_RETURN_IF_ERROR(mask_value(l, &mv));
  kdc_func *f = c->f;
  const kdc_type t = *kdc_ir_type(f, x);
  if (t.rank < 2)
    return kdc_fe_layer_err(l, KDC_INVALID_INPUT, "Masking needs an input of rank >= 2");
  *out = any_last(f, kdc_ir_compare(f, KDC_CMP_NE, x, kdc_ir_splat(f, t.dtype, t.rank, t.dims, mv)));
  return NULL;
}

static kdc_status mask_masking(kdc_lower_ctx *c, const kdc_keras_layer *l,
                               const kdc_keras_node *n, const kdc_value_id *in,
                               const kdc_value_id *in_mask, kdc_value_id *out_mask) {
  (void)n, (void)in_mask;
  return masking_mask(c, l, in[0], &out_mask[0]);
}

/* Masking.call: where(any(x != v, -1, keepdims), x, 0), its mask set on
 * the output. */
kdc_status kdc_fe_lower_masking(struct kdc_lower_ctx *c, const kdc_keras_layer *l,
                                const kdc_keras_node *n, const kdc_value_id *in,
                                const kdc_value_id *kw, kdc_value_id *out) {
  (void)n, (void)kw;
  kdc_func *f = c->f;
  if (in[0] == KDC_NO_VALUE) return NULL;
  const kdc_type t = *kdc_ir_type(f, in[0]);
  kdc_value_id m = KDC_NO_VALUE;
  KDC_RETURN_IF_ERROR(masking_mask(c, l, in[0], &m));
  int64_t map[KDC_MAX_RANK];
  for (int d = 0; d < t.rank - 1; d++) map[d] = d;
  kdc_value_id p = kdc_ir_broadcast(f, m, t.rank, t.dims, map);
  out[0] = kdc_ir_select(f, p, in[0], kdc_ir_splat(f, t.dtype, t.rank, t.dims, 0));
  if (c->out_mask) c->out_mask[0] = m;
  return NULL;
}

static bool cfg_flag(const kdc_keras_layer *l, const char *key) {
  json_object *o = kdc_fe_get(l->config, key);
  return o && json_object_is_type(o, json_type_boolean) && json_object_get_boolean(o);
}

static kdc_status mask_rnn(kdc_lower_ctx *c, const kdc_keras_layer *l, const kdc_keras_node *n,
                           const kdc_value_id *in, const kdc_value_id *in_mask,
                           kdc_value_id *out_mask) {
  (void)n, (void)in;
  if (kdc_fe_keras_at_least(c->top, 3, 16)) return NULL; /* supports_masking = False */
  if (cfg_flag(l, "return_sequences")) out_mask[0] = in_mask[0];
  return NULL;
}

static kdc_status mask_bidirectional(kdc_lower_ctx *c, const kdc_keras_layer *l,
                                     const kdc_keras_node *n, const kdc_value_id *in,
                                     const kdc_value_id *in_mask, kdc_value_id *out_mask) {
  (void)n, (void)in;
  if (kdc_fe_keras_at_least(c->top, 3, 16) || !l->inner[0]) return NULL;
  if (!cfg_flag(l->inner[0], "return_sequences")) return NULL;
  out_mask[0] = in_mask[0];
  json_object *mm = kdc_fe_get(l->config, "merge_mode");
  if (mm && kdc_fe_is_null(mm)) out_mask[1] = in_mask[0];
  return NULL;
}

/* Add, Subtract, ...: OR of every input's mask, none if one has none. */
static kdc_status mask_merge(kdc_lower_ctx *c, const kdc_keras_layer *l,
                             const kdc_keras_node *n, const kdc_value_id *in,
                             const kdc_value_id *in_mask, kdc_value_id *out_mask) {
  (void)l, (void)in;
  kdc_value_id m = KDC_NO_VALUE;
  for (int i = 0; i < n->n_in; i++) {
    if (in_mask[i] == KDC_NO_VALUE) return NULL;
    kdc_value_id b = kdc_fe_mask_bool(c->f, in_mask[i]);
    m = m == KDC_NO_VALUE ? b : kdc_ir_binary_bcast(c->f, KDC_OP_OR, m, b);
  }
  out_mask[0] = m;
  return NULL;
}

/* Concatenate: masks (ones for unmasked inputs) broadcast to their input,
 * concatenated along the axis, then any over the last axis. */
static kdc_status mask_concat(kdc_lower_ctx *c, const kdc_keras_layer *l,
                              const kdc_keras_node *n, const kdc_value_id *in,
                              const kdc_value_id *in_mask, kdc_value_id *out_mask) {
  kdc_func *f = c->f;
  bool any = false;
  for (int i = 0; i < n->n_in; i++) any = any || in_mask[i] != KDC_NO_VALUE;
  if (!any || n->n_in > 64) return NULL;
  int64_t axis;
  KDC_RETURN_IF_ERROR(kdc_fe_cfg_int(l, "axis", -1, &axis));
  kdc_value_id ms[64];
  int rank = 0;
  for (int i = 0; i < n->n_in; i++) {
    const kdc_type t = *kdc_ir_type(f, in[i]);
    rank = t.rank;
    if (in_mask[i] == KDC_NO_VALUE) {
      ms[i] = kdc_ir_splat(f, KDC_DTYPE_BOOL, t.rank, t.dims, 1);
      continue;
    }
    kdc_value_id m = kdc_fe_mask_bool(f, in_mask[i]);
    const kdc_type mt = *kdc_ir_type(f, m);
    if (mt.rank < t.rank) { /* expand_dims(-1), then numpy broadcasting to the input */
      int64_t d[KDC_MAX_RANK + 1];
      for (int k = 0; k < mt.rank; k++) d[k] = mt.dims[k];
      d[mt.rank] = 1;
      m = kdc_ir_broadcast_to(f, kdc_ir_reshape(f, m, mt.rank + 1, d), t.rank, t.dims);
    }
    ms[i] = m;
  }
  if (axis < 0) axis += rank;
  out_mask[0] = any_last(f, kdc_ir_concat(f, n->n_in, ms, axis));
  return NULL;
}

static const mask_rule rules[] = {
    {"Dense", mask_pass, false},
    {"Activation", mask_pass, false},
    {"ReLU", mask_pass, false},
    {"LeakyReLU", mask_pass, false},
    {"ELU", mask_pass, false},
    {"PReLU", mask_pass, false},
    {"ThresholdedReLU", mask_pass, false}, /* tf.keras 2 */
    {"Softmax", mask_pass, true},
    {"Dropout", mask_pass, false},
    {"SpatialDropout1D", mask_pass, false},
    {"SpatialDropout2D", mask_pass, false},
    {"SpatialDropout3D", mask_pass, false},
    {"GaussianNoise", mask_pass, false},
    {"GaussianDropout", mask_pass, false},
    {"AlphaDropout", mask_pass, false},
    {"ActivityRegularization", mask_pass, false},
    {"Identity", mask_pass, false},
    {"BatchNormalization", mask_pass, false},
    {"LayerNormalization", mask_pass, false},
    {"GroupNormalization", mask_pass, false},
    {"UnitNormalization", mask_pass, false},
    {"Normalization", mask_pass, false},
    {"Rescaling", mask_pass, false},
    {"MultiHeadAttention", mask_pass, true},
    {"Attention", mask_pass, true},
    {"AdditiveAttention", mask_pass, true},
    {"Embedding", mask_embedding, false},
    {"Masking", mask_masking, false},
    {"LSTM", mask_rnn, true},
    {"GRU", mask_rnn, true},
    {"SimpleRNN", mask_rnn, true},
    {"Bidirectional", mask_bidirectional, true},
    {"Add", mask_merge, false},
    {"Subtract", mask_merge, false},
    {"Multiply", mask_merge, false},
    {"Average", mask_merge, false},
    {"Maximum", mask_merge, false},
    {"Minimum", mask_merge, false},
    {"Concatenate", mask_concat, false},
    {"GlobalAveragePooling1D", NULL, true},
    {"GlobalAvgPool1D", NULL, true},
    {"TimeDistributed", NULL, true},
};

static const mask_rule *find_rule(const char *cls) {
  for (size_t i = 0; i < sizeof rules / sizeof rules[0]; i++)
    if (!strcmp(rules[i].cls, cls)) return &rules[i];
  return NULL;
}

bool kdc_fe_mask_consumer(const char *cls) {
  const mask_rule *r = find_rule(cls);
  return r && r->consumes;
}

kdc_status kdc_fe_compute_masks(struct kdc_lower_ctx *c, const kdc_keras_layer *l,
                                const kdc_keras_node *n, const kdc_value_id *in,
                                const kdc_value_id *in_mask, const kdc_value_id *out,
                                kdc_value_id *out_mask) {
  (void)out;
  if (kdc_fe_is_op_class(l->cls)) return NULL; /* an Operation sets no Keras mask */
  const mask_rule *r = find_rule(l->class_name);
  bool given = false;
  for (int i = 0; in_mask && i < n->n_in + n->n_kw; i++) given = given || in_mask[i] != KDC_NO_VALUE;
  if (given && r && r->consumes && !c->mask_taken)
    return kdc_fe_layer_err(l, KDC_UNSUPPORTED, "this %s is given a Keras mask (Embedding "
                            "mask_zero, Masking, ...) and kdc does not apply masks in it",
                            l->class_name);
  if (!r || !r->fn) return NULL;
  bool all = true;
  for (int i = 0; i < n->n_out; i++) all = all && out_mask[i] != KDC_NO_VALUE;
  if (all && n->n_out > 0) return NULL; /* call() set them (mask_already_computed) */
  int ni = n->n_in + n->n_kw;
  kdc_value_id *none = NULL;
  if (!in_mask) {
    none = kdc_xmalloc(sizeof(kdc_value_id) * (size_t)(ni + 1));
    for (int i = 0; i <= ni; i++) none[i] = KDC_NO_VALUE;
    in_mask = none;
  }
  kdc_value_id tmp[8];
  for (int i = 0; i < 8; i++) tmp[i] = KDC_NO_VALUE;
  kdc_status st = r->fn(c, l, n, in, in_mask, tmp);
  free(none);
  KDC_RETURN_IF_ERROR(st);
  for (int i = 0; i < n->n_out && i < 8; i++)
    if (out_mask[i] == KDC_NO_VALUE) out_mask[i] = tmp[i];
  return NULL;
}
