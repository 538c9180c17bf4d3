/*
 * frontend/lower_dot_attention.c: Attention (Luong, dot-product) and
 * AdditiveAttention (Bahdanau), Keras 3 keras/src/layers/attention/
 * attention.py and additive_attention.py: shape and variable inference,
 * and lowering.
 *
 * Inputs: [query (..., Tq, dim), value (..., Tv, dv)] or [query, value,
 * key (..., Tv, dim)] (key defaults to value); the leading (batch) dims of
 * the three must be equal.  Scores (..., Tq, Tv):
 *   Attention "dot"      q @ k^T, then * scale (scalar variable "scale",
 *                        ones, when use_scale)
 *   Attention "concat"   concat_score_weight * sum_d tanh([scale *] (q_i + k_j))
 *                        (scalar variables "scale" (use_scale) and
 *                        "concat_score_weight", both ones)
 *   AdditiveAttention    sum_d scale_d * tanh(q_i + k_j)  ("scale" [dim],
 *                        glorot_uniform, when use_scale (default true);
 *                        else the factor is 1)
 * The call's use_causal_mask (tf.keras 2's config `causal`) gives
 * scores - 1e9 where j > i (Keras:
 * ops.where(not mask, scores - 1e9, scores)); weights = softmax over Tv;
 * output = weights @ value (..., Tq, dv); return_attention_scores adds the
 * weights as a second output.  `dropout` only acts in training: a rate > 0
 * is refused for training steps.
 * Masks (Keras' `mask=[query_mask, value_mask]`: the inputs' Keras masks or
 * the call's mask list; a key mask is unused, as in Keras), rank-3 inputs:
 * value_mask [B, Tv] gives scores - 1e9 where false (attention.py
 * _apply_scores: where(not mask, scores - 1e9, scores); with
 * use_causal_mask the two masks are ANDed), and the output rows of false
 * query_mask [B, Tq] entries are 0 (where(q_mask, out, 0); the returned
 * weights are not masked).  The output carries the query's mask (mask.c).
 */
#include <json-c/json.h>
#include <string.h>

#include "frontend/frontend.h"

typedef enum score_mode { SCORE_DOT, SCORE_CONCAT, SCORE_ADDITIVE } score_mode;

static bool additive(const kdc_keras_layer *l) {
  return !strcmp(l->class_name, "AdditiveAttention");
}

static kdc_status read_mode(const kdc_keras_layer *l, score_mode *mode, bool *use_scale) {
  if (additive(l)) {
    *mode = SCORE_ADDITIVE;
    return kdc_fe_cfg_bool(l, "use_scale", true, use_scale);
  }
  const char *sm;
  KDC_RETURN_IF_ERROR(kdc_fe_cfg_str(l, "score_mode", "dot", &sm));
  if (strcmp(sm, "dot") && strcmp(sm, "concat"))
    return kdc_fe_layer_err(l, KDC_INVALID_INPUT, "config.score_mode \"%s\": expected \"dot\" "
                            "or \"concat\"", sm);
  *mode = !strcmp(sm, "dot") ? SCORE_DOT : SCORE_CONCAT;
  return kdc_fe_cfg_bool(l, "use_scale", false, use_scale);
}

static bool kw_flag(const kdc_keras_node *n, const char *key) {
  json_object *v = kdc_fe_get(n->kwargs, key);
  return v && json_object_is_type(v, json_type_boolean) && json_object_get_boolean(v);
}

kdc_status kdc_fe_infer_dot_attention(kdc_infer_args *a) {
  kdc_keras_layer *l = a->l;
  if (a->node->n_in < 2 || a->node->n_in > 3)
    return kdc_fe_layer_err(l, KDC_INVALID_INPUT, "%s takes a list [query, value] or [query, "
                            "value, key], got %d tensors", l->class_name, a->node->n_in);
  for (int i = 0; i < a->node->n_kw; i++)
    if (strcmp(a->node->kw_names[i], "mask"))
      return kdc_fe_layer_err(l, KDC_UNSUPPORTED, "the call's %s tensor is not supported",
                              a->node->kw_names[i]);
  score_mode mode = SCORE_DOT;
  bool use_scale = false;
  double drop = 0;
  KDC_RETURN_IF_ERROR(read_mode(l, &mode, &use_scale));
  KDC_RETURN_IF_ERROR(kdc_fe_cfg_double(l, "dropout", 0.0, &drop));
  if (!(drop >= 0 && drop < 1))
    return kdc_fe_layer_err(l, KDC_INVALID_INPUT, "config.dropout must be in [0, 1), got %g", drop);
  const kdc_kshape *q = &a->in[0], *v = &a->in[1], *k = a->node->n_in > 2 ? &a->in[2] : v;
  int r = q->rank;
  if (r < 3 || v->rank != r || k->rank != r)
    return kdc_fe_shape_err(a, "query, value and key need the same rank >= 3 (batch, T, dim)", q,
                            v);
  for (int i = 0; i < r - 2; i++)
    if (q->dims[i] != v->dims[i] || q->dims[i] != k->dims[i])
      return kdc_fe_shape_err(a, "query, value and key must have equal leading (batch) dims", q, k);
  if (k->dims[r - 2] != v->dims[r - 2])
    return kdc_fe_shape_err(a, "key and value need the same number of steps Tv", k, v);
  int64_t dim = q->dims[r - 1];
  if (dim < 0 || dim != k->dims[r - 1])
    return kdc_fe_shape_err(a, "query and key need the same known last dimension", q, k);
  if (mode == SCORE_ADDITIVE) {
    if (use_scale)
      KDC_RETURN_IF_ERROR(kdc_fe_add_var(a, "scale", &(kdc_kshape){.rank = 1, .dims = {dim}},
                                         true, NULL, "glorot_uniform"));
  } else {
    kdc_kshape scalar = {.rank = 0};
    if (use_scale) KDC_RETURN_IF_ERROR(kdc_fe_add_var(a, "scale", &scalar, true, NULL, "ones"));
    if (mode == SCORE_CONCAT)
      KDC_RETURN_IF_ERROR(kdc_fe_add_var(a, "concat_score_weight", &scalar, true, NULL, "ones"));
  }
  kdc_kshape outs[2];
  outs[0] = *q;
  outs[0].dims[r - 1] = v->dims[r - 1];
  outs[1] = *q;
  outs[1].dims[r - 1] = k->dims[r - 2];
  kdc_fe_set_outputs(a, kw_flag(a->node, "return_attention_scores") ? 2 : 1, outs);
  return NULL;
}

/* (..., Tq, d) and (..., Tv, d) broadcast to (..., Tq, Tv, d) and added. */
static kdc_value_id pair_sum(kdc_func *f, kdc_value_id q, kdc_value_id k) {
  const kdc_type qt = *kdc_ir_type(f, q), kt = *kdc_ir_type(f, k);
  int r = qt.rank;
  int64_t dims[KDC_MAX_RANK], mq[KDC_MAX_RANK], mk[KDC_MAX_RANK];
  for (int i = 0; i < r - 1; i++) dims[i] = qt.dims[i], mq[i] = i, mk[i] = i;
  dims[r - 1] = kt.dims[r - 2];
  dims[r] = qt.dims[r - 1];
  mq[r - 1] = r;     /* q's dim lands after Tv */
  mk[r - 2] = r - 1; /* k's steps are Tv */
  mk[r - 1] = r;
  kdc_value_id bq = kdc_ir_broadcast(f, q, r + 1, dims, mq);
  kdc_value_id bk = kdc_ir_broadcast(f, k, r + 1, dims, mk);
  return kdc_ir_binary(f, KDC_OP_ADD, bq, bk);
}

static kdc_value_id batched_dot(kdc_func *f, kdc_value_id a, kdc_value_id b, int r, int ca,
                                int cb) {
  kdc_attr_dot d;
  memset(&d, 0, sizeof d);
  d.lhs_batch.n = d.rhs_batch.n = r - 2;
  for (int i = 0; i < r - 2; i++) d.lhs_batch.v[i] = d.rhs_batch.v[i] = i;
  d.lhs_contract.n = d.rhs_contract.n = 1;
  d.lhs_contract.v[0] = ca;
  d.rhs_contract.v[0] = cb;
  return kdc_ir_dot(f, a, b, &d);
}

/* A query or value mask must be (batch |b|, steps |t|). */
static kdc_status check_mask(kdc_func *f, const kdc_keras_layer *l, kdc_value_id m, int64_t b,
                             int64_t t, const char *which) {
  const kdc_type *mt = kdc_ir_type(f, m);
  if (mt->rank != 2 || mt->dims[0] != b || mt->dims[1] != t)
    return kdc_fe_layer_err(l, KDC_INVALID_INPUT, "the %s mask must be (batch %lld, steps "
                            "%lld)", which, (long long)b, (long long)t);
  return NULL;
}

kdc_status kdc_fe_lower_dot_attention(struct kdc_lower_ctx *c, const kdc_keras_layer *l,
                                      const kdc_keras_node *n, const kdc_value_id *in,
                                      const kdc_value_id *kw, kdc_value_id *out) {
  (void)kw;
  kdc_func *f = c->f;
  score_mode mode = SCORE_DOT;
  bool use_scale = false;
  double drop = 0;
  KDC_RETURN_IF_ERROR(read_mode(l, &mode, &use_scale));
  KDC_RETURN_IF_ERROR(kdc_fe_cfg_double(l, "dropout", 0.0, &drop));
  if (c->training && drop > 0)
    return kdc_fe_layer_err(l, KDC_UNSUPPORTED, "config.dropout %g: attention dropout in a "
                            "training step is not supported (set it to 0)", drop);
  kdc_value_id q = in[0], v = in[1], k = n->n_in > 2 ? in[2] : in[1];
  if (q == KDC_NO_VALUE || v == KDC_NO_VALUE || k == KDC_NO_VALUE) return NULL;
  int r = kdc_ir_type(f, q)->rank;
  kdc_value_id scale = use_scale ? kdc_fe_weight(c, l, "scale") : KDC_NO_VALUE;
  kdc_value_id s;
  if (mode == SCORE_DOT) {
    s = batched_dot(f, q, k, r, r - 1, r - 1); /* (..., Tq, Tv) */
    if (use_scale) s = kdc_ir_binary_bcast(f, KDC_OP_MUL, s, scale);
  } else {
    kdc_value_id p = pair_sum(f, q, k); /* (..., Tq, Tv, d) */
    if (mode == SCORE_CONCAT && use_scale) p = kdc_ir_binary_bcast(f, KDC_OP_MUL, p, scale);
    p = kdc_ir_unary(f, KDC_OP_TANH, p);
    if (mode == SCORE_ADDITIVE && use_scale) p = kdc_ir_binary_bcast(f, KDC_OP_MUL, p, scale);
    int64_t last = r;
    s = kdc_ir_reduce(f, KDC_RED_SUM, p, 1, &last);
    if (mode == SCORE_CONCAT)
      s = kdc_ir_binary_bcast(f, KDC_OP_MUL, s, kdc_fe_weight(c, l, "concat_score_weight"));
  }
  bool causal_cfg = false; /* tf.keras 2.4-2.10 configs: `causal` */
  KDC_RETURN_IF_ERROR(kdc_fe_cfg_bool(l, "causal", false, &causal_cfg));
  kdc_value_id qm = kdc_fe_input_mask(c, 0), vm = kdc_fe_input_mask(c, 1);
  if ((qm != KDC_NO_VALUE || vm != KDC_NO_VALUE) && r != 3)
    return kdc_fe_layer_err(l, KDC_UNSUPPORTED, "masks on %s inputs of rank %d: kdc applies "
                            "them to (batch, steps, features) inputs", l->class_name, r);
  const kdc_type st = *kdc_ir_type(f, s);
  kdc_value_id keep = KDC_NO_VALUE; /* the scores mask (..., Tq, Tv) */
  if (causal_cfg || kw_flag(n, "use_causal_mask")) {
    kdc_type it = kdc_type_make(KDC_DTYPE_I32, st.rank, st.dims);
    keep = kdc_ir_compare(f, KDC_CMP_GE, kdc_ir_iota(f, &it, st.rank - 2),
                          kdc_ir_iota(f, &it, st.rank - 1));
  }
  if (vm != KDC_NO_VALUE) {
    KDC_RETURN_IF_ERROR(check_mask(f, l, vm, st.dims[0], st.dims[2], "value"));
    kdc_value_id b = kdc_ir_broadcast(f, kdc_fe_mask_bool(f, vm), 3, st.dims, (int64_t[]){0, 2});
    keep = keep == KDC_NO_VALUE ? b : kdc_ir_binary(f, KDC_OP_AND, b, keep);
  }
  if (keep != KDC_NO_VALUE)
    s = kdc_ir_select(f, keep, s, kdc_ir_binary_scalar(f, KDC_OP_SUB, s, 1e9));
  int64_t last = -1;
  kdc_value_id w = kdc_fe_softmax(f, s, 1, &last, false);
  out[0] = batched_dot(f, w, v, r, r - 1, r - 2);
  if (qm != KDC_NO_VALUE) {
    KDC_RETURN_IF_ERROR(check_mask(f, l, qm, st.dims[0], st.dims[1], "query"));
    const kdc_type ot = *kdc_ir_type(f, out[0]);
    kdc_value_id p = kdc_ir_broadcast(f, kdc_fe_mask_bool(f, qm), 3, ot.dims, (int64_t[]){0, 1});
    out[0] = kdc_ir_select(f, p, out[0], kdc_ir_splat(f, ot.dtype, 3, ot.dims, 0));
  }
  if (n->n_out > 1) out[1] = w;
  return NULL;
}
