/*
 * frontend/lower_layers.c: lowering rules of the layer classes kdc compiles.
 *
 * Each rule reads its config (already validated by shape inference), takes
 * shapes from the IR values (static: the batch is known here) and builds
 * nodes with the ir/ builder.  Builder errors are collected by the caller
 * (lower.c) and located there.  Semantics are Keras 3's:
 *  - Dense on N-D input contracts the last axis (dot_general {r-1}x{0});
 *  - Dropout and the noise layers are identities at inference;
 *  - Flatten is a reshape (channels_first first moves channels last);
 *  - merge layers broadcast like keras.layers.Merge: inputs of lower rank
 *    get size-1 dims inserted at axis 1 (after the batch), then numpy
 *    broadcasting; Average is the sum divided by the input count.
 */
#include <json-c/json.h>
#include <math.h>
#include <string.h>

#include "frontend/frontend.h"

kdc_status kdc_fe_lower_identity(struct kdc_lower_ctx *c, const kdc_keras_layer *l,
                                 const kdc_keras_node *n, const kdc_value_id *in,
                                 const kdc_value_id *kw, kdc_value_id *out) {
  out[0] = in[0];
  return NULL;
}

kdc_status kdc_fe_lower_dense(struct kdc_lower_ctx *c, const kdc_keras_layer *l,
                              const kdc_keras_node *n, const kdc_value_id *in,
                              const kdc_value_id *kw, kdc_value_id *out) {
  kdc_func *f = c->f;
  const char *act;
  KDC_RETURN_IF_ERROR(kdc_fe_cfg_activation(l, "activation", &act));
  kdc_attr_dot d;
  memset(&d, 0, sizeof d);
  d.lhs_contract.n = d.rhs_contract.n = 1;
  d.lhs_contract.v[0] = kdc_ir_type(f, in[0])->rank - 1;
  d.rhs_contract.v[0] = 0;
  kdc_value_id y = kdc_ir_dot(f, in[0], kdc_fe_weight(c, l, "kernel"), &d);
  kdc_value_id b = kdc_fe_weight(c, l, "bias");
  if (b != KDC_NO_VALUE) y = kdc_ir_binary_bcast(f, KDC_OP_ADD, y, b);
  return kdc_fe_activation(c, l, "activation", act, y, &out[0]);
}

kdc_status kdc_fe_lower_flatten(struct kdc_lower_ctx *c, const kdc_keras_layer *l,
                                const kdc_keras_node *n, const kdc_value_id *in,
                                const kdc_value_id *kw, kdc_value_id *out) {
  kdc_func *f = c->f;
  kdc_value_id x = in[0];
  const kdc_type *t = kdc_ir_type(f, x);
  const char *df;
  KDC_RETURN_IF_ERROR(kdc_fe_cfg_str(l, "data_format", "channels_last", &df));
  if (!strcmp(df, "channels_first") && t->rank > 2) {
    int64_t perm[KDC_MAX_RANK];
    perm[0] = 0;
    for (int i = 2; i < t->rank; i++) perm[i - 1] = i;
    perm[t->rank - 1] = 1;
    x = kdc_ir_transpose(f, x, perm);
    t = kdc_ir_type(f, x);
  }
  int64_t dims[2] = {t->dims[0], 1};
  for (int i = 1; i < t->rank; i++) dims[1] *= t->dims[i];
  out[0] = kdc_ir_reshape(f, x, 2, dims);
  return NULL;
}

kdc_status kdc_fe_lower_reshape(struct kdc_lower_ctx *c, const kdc_keras_layer *l,
                                const kdc_keras_node *n, const kdc_value_id *in,
                                const kdc_value_id *kw, kdc_value_id *out) {
  kdc_func *f = c->f;
  const kdc_type *t = kdc_ir_type(f, in[0]);
  kdc_kshape ts;
  KDC_RETURN_IF_ERROR(kdc_fe_parse_shape(l->model, kdc_fe_get(l->config, "target_shape"),
                                         kdc_fe_join(l->model->arena, l->loc, "config.target_shape"),
                                         &ts));
  int64_t dims[KDC_MAX_RANK], numel = 1, known = 1;
  for (int i = 1; i < t->rank; i++) numel *= t->dims[i];
  int wild = -1;
  dims[0] = t->dims[0];
  for (int i = 0; i < ts.rank; i++) {
    dims[i + 1] = ts.dims[i];
    if (ts.dims[i] < 0) wild = i + 1;
    else known *= ts.dims[i];
  }
  if (wild >= 0) dims[wild] = known ? numel / known : 0;
  out[0] = kdc_ir_reshape(f, in[0], ts.rank + 1, dims);
  return NULL;
}

kdc_status kdc_fe_lower_permute(struct kdc_lower_ctx *c, const kdc_keras_layer *l,
                                const kdc_keras_node *n, const kdc_value_id *in,
                                const kdc_value_id *kw, kdc_value_id *out) {
  int64_t dims[KDC_MAX_RANK], perm[KDC_MAX_RANK];
  int nd = 0;
  KDC_RETURN_IF_ERROR(kdc_fe_cfg_axes(l, "dims", 0, &nd, dims));
  perm[0] = 0;
  for (int i = 0; i < nd; i++) perm[i + 1] = dims[i];
  out[0] = kdc_ir_transpose(c->f, in[0], perm);
  return NULL;
}

/* Inserts size-1 dims at axis 1 until |x| has rank |r| (keras Merge). */
static kdc_value_id expand_to(kdc_func *f, kdc_value_id x, int r) {
  if (x == KDC_NO_VALUE) return x;
  const kdc_type *t = kdc_ir_type(f, x);
  if (t->rank >= r) return x;
  int64_t dims[KDC_MAX_RANK];
  int k = t->rank, add = r - t->rank;
  dims[0] = t->dims[0];
  for (int i = 0; i < add; i++) dims[1 + i] = 1;
  for (int i = 1; i < k; i++) dims[add + i] = t->dims[i];
  return kdc_ir_reshape(f, x, r, dims);
}

kdc_status kdc_fe_lower_merge(struct kdc_lower_ctx *c, const kdc_keras_layer *l,
                              const kdc_keras_node *n, const kdc_value_id *in,
                              const kdc_value_id *kw, kdc_value_id *out) {
  kdc_func *f = c->f;
  const char *cls = l->class_name;
  kdc_op op = !strcmp(cls, "Subtract")  ? KDC_OP_SUB
              : !strcmp(cls, "Multiply") ? KDC_OP_MUL
              : !strcmp(cls, "Maximum")  ? KDC_OP_MAX
              : !strcmp(cls, "Minimum")  ? KDC_OP_MIN
                                         : KDC_OP_ADD;
  int r = 0;
  for (int i = 0; i < n->n_in; i++)
    if (in[i] != KDC_NO_VALUE && kdc_ir_type(f, in[i])->rank > r) r = kdc_ir_type(f, in[i])->rank;
  kdc_value_id y = expand_to(f, in[0], r);
  for (int i = 1; i < n->n_in; i++) y = kdc_ir_binary_bcast(f, op, y, expand_to(f, in[i], r));
  if (!strcmp(cls, "Average")) y = kdc_ir_binary_scalar(f, KDC_OP_DIV, y, (double)n->n_in);
  out[0] = y;
  return NULL;
}

kdc_status kdc_fe_lower_concat(struct kdc_lower_ctx *c, const kdc_keras_layer *l,
                               const kdc_keras_node *n, const kdc_value_id *in,
                               const kdc_value_id *kw, kdc_value_id *out) {
  int64_t axis;
  KDC_RETURN_IF_ERROR(kdc_fe_cfg_int(l, "axis", -1, &axis));
  int r = in[0] == KDC_NO_VALUE ? 1 : kdc_ir_type(c->f, in[0])->rank;
  if (axis < 0) axis += r;
  out[0] = n->n_in == 1 ? in[0] : kdc_ir_concat(c->f, n->n_in, in, axis);
  return NULL;
}

/* An optional number: false when absent or null. */
static kdc_status opt_number(const kdc_keras_layer *l, const char *key, double *out, bool *has) {
  *has = !kdc_fe_is_null(kdc_fe_get(l->config, key));
  *out = 0;
  return *has ? kdc_fe_cfg_double(l, key, 0, out) : NULL;
}

kdc_status kdc_fe_lower_activation_layer(struct kdc_lower_ctx *c, const kdc_keras_layer *l,
                                         const kdc_keras_node *n, const kdc_value_id *in,
                                         const kdc_value_id *kw, kdc_value_id *out) {
  kdc_func *f = c->f;
  const char *cls = l->class_name;
  if (!strcmp(cls, "Activation")) {
    const char *act;
    KDC_RETURN_IF_ERROR(kdc_fe_cfg_activation(l, "activation", &act));
    return kdc_fe_activation(c, l, "activation", act, in[0], &out[0]);
  }
  if (!strcmp(cls, "ReLU")) {
    double mx, slope, th;
    bool has_max, has;
    KDC_RETURN_IF_ERROR(opt_number(l, "max_value", &mx, &has_max));
    KDC_RETURN_IF_ERROR(opt_number(l, "negative_slope", &slope, &has));
    KDC_RETURN_IF_ERROR(opt_number(l, "threshold", &th, &has));
    if (has_max && mx < 0)
      return kdc_fe_layer_err(l, KDC_INVALID_INPUT, "config.max_value must be >= 0");
    out[0] = kdc_fe_relu(f, in[0], slope, mx, has_max, th);
    return NULL;
  }
  if (!strcmp(cls, "LeakyReLU")) {
    double slope;
    bool has;
    KDC_RETURN_IF_ERROR(opt_number(l, "negative_slope", &slope, &has));
    if (!has) KDC_RETURN_IF_ERROR(opt_number(l, "alpha", &slope, &has)); /* tf.keras 2 name */
    if (!has) slope = 0.3;
    out[0] = kdc_fe_relu(f, in[0], slope, 0, false, 0);
    return NULL;
  }
  if (!strcmp(cls, "ELU")) {
    double alpha;
    KDC_RETURN_IF_ERROR(kdc_fe_cfg_double(l, "alpha", 1.0, &alpha));
    out[0] = kdc_fe_elu(f, in[0], alpha);
    return NULL;
  }
  /* Softmax */
  int na;
  int64_t axes[KDC_MAX_RANK];
  KDC_RETURN_IF_ERROR(kdc_fe_cfg_axes(l, "axis", -1, &na, axes));
  kdc_value_id m = kdc_fe_input_mask(c, 0);
  if (m == KDC_NO_VALUE) {
    out[0] = kdc_fe_softmax(f, in[0], na, axes, false);
    return NULL;
  }
  /* Softmax.call with a mask (activations/softmax.py): a non-bool mask
   * keeps entries > 0.5; the mask broadcasts numpy-style to the input;
   * where(mask, x, -1e9), softmax, where(mask, y, 0) */
  const kdc_type t = *kdc_ir_type(f, in[0]), mt = *kdc_ir_type(f, m);
  bool fits = mt.rank <= t.rank;
  for (int i = 1; fits && i <= mt.rank; i++) {
    int64_t md = mt.dims[mt.rank - i], xd = t.dims[t.rank - i];
    fits = md == 1 || md == xd;
  }
  if (!fits) {
    char b1[96], b2[96];
    return kdc_fe_layer_err(l, KDC_INVALID_INPUT, "the mask %s does not broadcast to the input %s "
                            "(Keras raises the same error)", kdc_type_str(&mt, b1, sizeof b1),
                            kdc_type_str(&t, b2, sizeof b2));
  }
  kdc_value_id p = mt.dtype == KDC_DTYPE_BOOL ? m
      : kdc_ir_compare(f, KDC_CMP_GT, m, kdc_ir_splat(f, mt.dtype, mt.rank, mt.dims, 0.5));
  p = kdc_ir_broadcast_to(f, p, t.rank, t.dims);
  kdc_value_id y = kdc_fe_softmax(f, kdc_ir_select(f, p, in[0], kdc_ir_splat(f, t.dtype, t.rank,
                                                                           t.dims, -1e9)),
                                  na, axes, false);
  out[0] = kdc_ir_select(f, p, y, kdc_ir_splat(f, t.dtype, t.rank, t.dims, 0));
  return NULL;
}

kdc_status kdc_fe_lower_submodel(struct kdc_lower_ctx *c, const kdc_keras_layer *l,
                                 const kdc_keras_node *n, const kdc_value_id *in,
                                 const kdc_value_id *kw, kdc_value_id *out) {
  /* Functional.call(inputs, mask): the inputs' masks flow in, the outputs
   * keep the masks their inner layers set */
  kdc_value_id *om = c->out_mask;
  const kdc_value_id *im = c->in_mask;
  if (im) c->mask_taken = true;
  if (im && n->n_in < l->sub->n_inputs)
    return kdc_fe_layer_err(l, KDC_UNSUPPORTED, "a masked input passed to a nested model as a "
                            "keyword argument is not supported");
  return kdc_fe_lower_graph_masked(c, l->sub, in, im, out, om);
}
