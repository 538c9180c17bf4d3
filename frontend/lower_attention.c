/*
 * frontend/lower_attention.c: lowering of EinsumDense and MultiHeadAttention.
 *
 * EinsumDense (keras/src/layers/core/einsum_dense.py call):
 *   y = activation(einsum(equation, x, kernel) + bias)   (numpy broadcast)
 * MultiHeadAttention (keras/src/layers/attention/multi_head_attention.py),
 * with its equations built exactly as _build_proj_equation and
 * _build_attention_equation build them for the query rank r:
 *   q = query_dense(query)   "abc,cde->abde" for r = 3, bias (heads, key_dim)
 *   k = key_dense(key); v = value_dense(value)
 *   q = q * (1 / sqrt(key_dim))                 (_compute_attention)
 *   scores = softmax(einsum(dot_eq, k, q)) over the attention axes, with
 *            use_causal_mask: -1e9 where key index > query index, 0 after
 *   out = attention_output(einsum(combine_eq, scores, v))
 * Dropout is the identity at inference.  Keras routes 4-D projections
 * through ops.dot_product_attention, which scales the logits instead of the
 * query: the same function up to rounding.
 * Masks (_compute_attention_mask; any rank whose one attention axis is
 * the steps axis T, leading dims "batch.."): the query's
 * Keras mask [B, T, 1] & the value's [B, 1, S] & the key's [B, 1, S] (the
 * call's value_mask / key_mask kwargs when given, else the tensors' Keras
 * masks; an explicit query_mask is ignored, as Keras overwrites it) &
 * causal & the attention_mask kwarg [B, T, S]; the scores of false entries:
 *   Keras >= 3.7 (or no keras_version), rank-3 inputs, dropout 0, no
 *   attention scores returned: ops.dot_product_attention, where(mask, s, -0.7 * FLT_MAX),
 *   softmax (a fully masked row attends uniformly);
 *   other Keras 3: the Softmax layer, where(mask, s, -1e9), softmax,
 *   where(mask, y, 0) (a fully masked row gives zeros);
 *   tf.keras 2 / TF.js topologies: s + (1 - mask) * -1e9, softmax.
 * Rows with one unmasked key agree in all three.  The output carries the
 * query's mask.
 */
#include <float.h>
#include <json-c/json.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "frontend/frontend.h"

kdc_status kdc_fe_lower_einsum_dense(struct kdc_lower_ctx *c, const kdc_keras_layer *l,
                                     const kdc_keras_node *n, const kdc_value_id *in,
                                     const kdc_value_id *kw, kdc_value_id *out) {
  const char *act, *eq;
  KDC_RETURN_IF_ERROR(kdc_fe_cfg_activation(l, "activation", &act));
  KDC_RETURN_IF_ERROR(kdc_fe_cfg_str(l, "equation", NULL, &eq));
  kdc_value_id k = kdc_fe_weight(c, l, "kernel");
  kdc_fe_einsum e;
  KDC_RETURN_IF_ERROR(kdc_fe_einsum_parse(l, "equation", eq, kdc_ir_type(c->f, in[0])->rank,
                                          kdc_ir_type(c->f, k)->rank, &e));
  kdc_value_id y = kdc_fe_einsum_lower(c->f, &e, in[0], k);
  kdc_value_id b = kdc_fe_weight(c, l, "bias");
  if (b != KDC_NO_VALUE) y = kdc_ir_binary_bcast(c->f, KDC_OP_ADD, y, b);
  if (kdc_fe_is_null(kdc_fe_get(l->config, "activation"))) act = "linear";
  return kdc_fe_activation(c, l, "activation", act, y, &out[0]);
}

static char letter(int i) { return (char)('a' + i); }

enum { EQ_LEN = 96 }; /* room for "%s,%s->%s" of three label strings */

/* _build_proj_equation(free_dims, bound_dims, output_dims). */
static void proj_equation(char *buf, int free_dims, int bound, int outd) {
  char in[16] = "", ker[16] = "", o[16] = "";
  int a = 0, b = 0, z = 0, off = 0;
  for (int i = 0; i < free_dims; i++) in[a++] = o[z++] = letter(off + i);
  off += free_dims;
  for (int i = 0; i < bound; i++) in[a++] = ker[b++] = letter(off + i);
  off += bound;
  for (int i = 0; i < outd; i++) ker[b++] = o[z++] = letter(off + i);
  snprintf(buf, EQ_LEN, "%s,%s->%s", in, ker, o);
}

/* _build_attention_equation(rank, attn_axes): dot_eq "key,query->scores"
 * and combine_eq "scores,value->out". */
static void attention_equations(char *dot, char *combine, int rank, int na, const int64_t *attn) {
  char target[16] = "", source[16] = "", prod[24] = "";
  bool is_attn[16] = {0};
  for (int i = 0; i < na; i++) is_attn[attn[i]] = true;
  int off = rank, k = 0;
  for (int i = 0; i < rank; i++) target[i] = letter(i);
  for (int i = 0; i < rank; i++)
    source[i] = (!is_attn[i] || i == rank - 1) ? target[i] : letter(off++);
  for (int i = 0; i < rank; i++)
    if (!is_attn[i] && i != rank - 1) prod[k++] = target[i];
  for (int i = 0; i < na; i++) prod[k++] = target[attn[i]];
  for (int i = 0; i < na; i++) prod[k++] = source[attn[i]];
  snprintf(dot, EQ_LEN, "%s,%s->%s", source, target, prod);
  snprintf(combine, EQ_LEN, "%s,%s->%s", prod, source, target);
}

/* einsum(eq, x, kernel) + bias of sublayer |name| ("query", ...). */
static kdc_status project(kdc_lower_ctx *c, const kdc_keras_layer *l, const char *name,
                          const char *eq, kdc_value_id x, kdc_value_id *out) {
  char kn[64], bn[64];
  snprintf(kn, sizeof kn, "%s/kernel", name);
  snprintf(bn, sizeof bn, "%s/bias", name);
  kdc_value_id k = kdc_fe_weight(c, l, kn), b = kdc_fe_weight(c, l, bn);
  kdc_fe_einsum e;
  if (x == KDC_NO_VALUE) return NULL;
  KDC_RETURN_IF_ERROR(kdc_fe_einsum_parse(l, name, eq, kdc_ir_type(c->f, x)->rank,
                                          kdc_ir_type(c->f, k)->rank, &e));
  *out = kdc_fe_einsum_lower(c->f, &e, x, k);
  if (b != KDC_NO_VALUE) *out = kdc_ir_binary_bcast(c->f, KDC_OP_ADD, *out, b);
  return NULL;
}

static kdc_value_id tensor_kw(const kdc_keras_node *n, const kdc_value_id *kw, const char *name) {
  for (int i = 0; i < n->n_kw; i++)
    if (!strcmp(n->kw_names[i], name)) return kw[i];
  return KDC_NO_VALUE;
}

/* Causal masking of scores (..., T, S) as keras' Softmax with a mask:
 * where(mask, x, -1e9), softmax, where(mask, y, 0); mask = s <= t. */
static kdc_value_id causal_softmax(kdc_func *f, kdc_value_id x, int n_axes, const int64_t *axes) {
  const kdc_type t = *kdc_ir_type(f, x);
  kdc_type it = kdc_type_make(KDC_DTYPE_I32, t.rank, t.dims);
  kdc_value_id p = kdc_ir_compare(f, KDC_CMP_LE, kdc_ir_iota(f, &it, t.rank - 1),
                                  kdc_ir_iota(f, &it, t.rank - 2));
  kdc_value_id neg = kdc_ir_splat(f, t.dtype, t.rank, t.dims, -1e9);
  kdc_value_id y = kdc_fe_softmax(f, kdc_ir_select(f, p, x, neg), n_axes, axes, false);
  return kdc_ir_select(f, p, y, kdc_ir_splat(f, t.dtype, t.rank, t.dims, 0));
}

/* The Keras mask of argument |name| (positional |pos| or keyword), or
 * KDC_NO_VALUE. */
static kdc_value_id arg_mask(kdc_lower_ctx *c, const kdc_keras_node *n, int pos,
                             const char *name) {
  if (n->n_in > pos) return kdc_fe_input_mask(c, pos);
  for (int i = 0; i < n->n_kw; i++)
    if (!strcmp(n->kw_names[i], name)) return kdc_fe_input_mask(c, n->n_in + i);
  return KDC_NO_VALUE;
}

/* m & (|x| bool [batch.., L], broadcast to the mask dims |dims| [batch..,
 * T, S] (rank |rank|) with L landing on dim |at|). */
static kdc_value_id and_mask(kdc_func *f, kdc_value_id m, kdc_value_id x, int rank,
                             const int64_t *dims, int at) {
  if (x == KDC_NO_VALUE) return m;
  int64_t map[KDC_MAX_RANK];
  for (int i = 0; i < rank - 2; i++) map[i] = i;
  map[rank - 2] = at;
  kdc_value_id b = kdc_ir_broadcast(f, kdc_fe_mask_bool(f, x), rank, dims, map);
  return m == KDC_NO_VALUE ? b : kdc_ir_binary(f, KDC_OP_AND, m, b);
}

typedef enum mask_fill { FILL_DPA, FILL_SOFTMAX, FILL_TK2 } mask_fill;

/* softmax of scores |x| [batch.., N, T, S] over the last axis under the
 * bool mask |m| [batch.., T, S] (expanded at the heads axis, as Keras'
 * _masked_softmax), filled as |how| says (see the file comment). */
static kdc_value_id masked_softmax(kdc_func *f, kdc_value_id x, kdc_value_id m, mask_fill how) {
  const kdc_type t = *kdc_ir_type(f, x);
  int r = t.rank;
  int64_t map[KDC_MAX_RANK], last = r - 1;
  for (int i = 0; i < r - 3; i++) map[i] = i;
  map[r - 3] = r - 2, map[r - 2] = r - 1;
  kdc_value_id p = kdc_ir_broadcast(f, m, r, t.dims, map);
  kdc_value_id z;
  switch (how) {
  case FILL_DPA:
    z = kdc_ir_select(f, p, x, kdc_ir_splat(f, t.dtype, r, t.dims, -0.7 * (double)FLT_MAX));
    return kdc_fe_softmax(f, z, 1, &last, false);
  case FILL_SOFTMAX:
    z = kdc_ir_select(f, p, x, kdc_ir_splat(f, t.dtype, r, t.dims, -1e9));
    return kdc_ir_select(f, p, kdc_fe_softmax(f, z, 1, &last, false),
                         kdc_ir_splat(f, t.dtype, r, t.dims, 0));
  case FILL_TK2: {
    kdc_value_id one = kdc_ir_splat(f, t.dtype, r, t.dims, 1);
    kdc_value_id add = kdc_ir_binary_scalar(f, KDC_OP_MUL, kdc_ir_binary(f, KDC_OP_SUB, one,
                                            kdc_ir_convert(f, p, t.dtype)), -1e9);
    return kdc_fe_softmax(f, kdc_ir_binary(f, KDC_OP_ADD, x, add), 1, &last, false);
  }
  }
  return KDC_NO_VALUE;
}

kdc_status kdc_fe_lower_mha(struct kdc_lower_ctx *c, const kdc_keras_layer *l,
                            const kdc_keras_node *n, const kdc_value_id *in,
                            const kdc_value_id *kw, kdc_value_id *out) {
  kdc_func *f = c->f;
  kdc_value_id q = n->n_in > 0 ? in[0] : tensor_kw(n, kw, "query");
  kdc_value_id v = n->n_in > 1 ? in[1] : tensor_kw(n, kw, "value");
  kdc_value_id k = n->n_in > 2 ? in[2] : tensor_kw(n, kw, "key");
  /* masks: query's Keras mask; value_mask / key_mask kwargs, else the
   * tensors' masks (key's only when key is passed); attention_mask */
  kdc_value_id qm = arg_mask(c, n, 0, "query");
  kdc_value_id vm = tensor_kw(n, kw, "value_mask"), km = tensor_kw(n, kw, "key_mask");
  if (vm == KDC_NO_VALUE) vm = arg_mask(c, n, 1, "value");
  if (km == KDC_NO_VALUE && k != KDC_NO_VALUE) km = arg_mask(c, n, 2, "key");
  kdc_value_id am = tensor_kw(n, kw, "attention_mask");
  if (k == KDC_NO_VALUE) k = v;
  int64_t kd;
  KDC_RETURN_IF_ERROR(kdc_fe_cfg_int(l, "key_dim", 1, &kd));
  json_object *causal = kdc_fe_get(n->kwargs, "use_causal_mask");
  bool use_causal = causal && json_object_get_boolean(causal);
  json_object *ras = kdc_fe_get(n->kwargs, "return_attention_scores");
  bool scores_out = ras && json_object_get_boolean(ras);
  int qr = kdc_ir_type(f, q)->rank, kr = kdc_ir_type(f, k)->rank, vr = kdc_ir_type(f, v)->rank;
  /* output_shape: the attention_output kernel's trailing dims */
  int n_os = 1;
  json_object *os = kdc_fe_get(l->config, "output_shape");
  if (json_object_is_type(os, json_type_array)) n_os = (int)json_object_array_length(os);
  char eq[EQ_LEN], dot_eq[EQ_LEN], comb_eq[EQ_LEN];
  kdc_value_id pq = KDC_NO_VALUE, pk = KDC_NO_VALUE, pv = KDC_NO_VALUE, o = KDC_NO_VALUE;
  proj_equation(eq, qr - 1, 1, 2);
  KDC_RETURN_IF_ERROR(project(c, l, "query", eq, q, &pq));
  proj_equation(eq, kr - 1, 1, 2);
  KDC_RETURN_IF_ERROR(project(c, l, "key", eq, k, &pk));
  proj_equation(eq, vr - 1, 1, 2);
  KDC_RETURN_IF_ERROR(project(c, l, "value", eq, v, &pv));
  /* attention axes of the projected rank qr + 1: default 1 .. qr - 2 */
  int rank = qr + 1, na = 0;
  int64_t attn[KDC_MAX_RANK];
  if (kdc_fe_is_null(kdc_fe_get(l->config, "attention_axes"))) {
    for (int i = 1; i < rank - 2; i++) attn[na++] = i;
  } else {
    KDC_RETURN_IF_ERROR(kdc_fe_cfg_axes(l, "attention_axes", 1, &na, attn));
    for (int i = 0; i < na; i++) {
      if (attn[i] < 0) attn[i] += rank - 1;
      if (attn[i] < 1 || attn[i] >= rank - 2)
        return kdc_fe_layer_err(l, KDC_INVALID_INPUT, "config.attention_axes: axis %lld is not an "
                                "attention axis of a rank-%d query", (long long)attn[i], qr);
    }
  }
  if (use_causal && na != 1)
    return kdc_fe_layer_err(l, KDC_UNSUPPORTED, "use_causal_mask needs one attention axis");
  bool masked = qm != KDC_NO_VALUE || vm != KDC_NO_VALUE || km != KDC_NO_VALUE ||
                am != KDC_NO_VALUE;
  /* masks need the steps as the one attention axis (the last but one of
   * the inputs): Keras' [batch.., T, 1] & [batch.., 1, S] then line up with
   * the scores [batch.., N, T, S]; with other axes they broadcast onto
   * unrelated dims */
  if (masked && (vr != qr || kr != qr || na != 1 || attn[0] != qr - 2))
    return kdc_fe_layer_err(l, KDC_UNSUPPORTED, "masks on MultiHeadAttention with rank-%d "
                            "inputs need query, key and value of one rank and attention_axes "
                            "= the steps axis (%d)", qr, qr - 2);
  double drop;
  KDC_RETURN_IF_ERROR(kdc_fe_cfg_double(l, "dropout", 0, &drop));
  mask_fill fill = FILL_SOFTMAX;
  const kdc_keras_model *top = c->top;
  if (top->tk2_topology) fill = FILL_TK2;
  else if ((!top->keras_version || kdc_fe_keras_at_least(top, 3, 7)) && drop <= 0 &&
           !scores_out && qr == 3) /* dot_product_attention takes 4-d projections only */
    fill = FILL_DPA;
  attention_equations(dot_eq, comb_eq, rank, na, attn);
  pq = kdc_ir_binary_scalar(f, KDC_OP_MUL, pq, (double)(float)(1.0 / sqrt((double)kd)));
  kdc_fe_einsum e;
  if (pq == KDC_NO_VALUE || pk == KDC_NO_VALUE || pv == KDC_NO_VALUE) return NULL;
  KDC_RETURN_IF_ERROR(kdc_fe_einsum_parse(l, "attention_axes", dot_eq, rank, rank, &e));
  kdc_value_id s = kdc_fe_einsum_lower(f, &e, pk, pq);
  int sr = e.n[2];
  int64_t norm[KDC_MAX_RANK];
  for (int i = 0; i < na; i++) norm[i] = sr - na + i;
  if (masked) {
    /* the mask dims [batch.., T, S] */
    const kdc_type qt = *kdc_ir_type(f, q);
    int mr = qr;
    int64_t dims[KDC_MAX_RANK];
    for (int i = 0; i < qr - 1; i++) dims[i] = qt.dims[i];
    dims[qr - 1] = kdc_ir_type(f, v)->dims[qr - 2];
    for (int i = 0; i < qr - 2; i++)
      if (kdc_ir_type(f, v)->dims[i] != dims[i] || kdc_ir_type(f, k)->dims[i] != dims[i])
        return kdc_fe_layer_err(l, KDC_INVALID_INPUT, "masked MultiHeadAttention needs equal "
                                "leading dims in query, key and value");
    kdc_value_id m = KDC_NO_VALUE;
    m = and_mask(f, m, qm, mr, dims, mr - 2);
    m = and_mask(f, m, vm, mr, dims, mr - 1);
    m = and_mask(f, m, km, mr, dims, mr - 1);
    if (use_causal) {
      kdc_type it = kdc_type_make(KDC_DTYPE_I32, mr, dims);
      kdc_value_id cm = kdc_ir_compare(f, KDC_CMP_LE, kdc_ir_iota(f, &it, mr - 1),
                                       kdc_ir_iota(f, &it, mr - 2));
      m = m == KDC_NO_VALUE ? cm : kdc_ir_binary(f, KDC_OP_AND, m, cm);
    }
    if (am != KDC_NO_VALUE) {
      const kdc_type at = *kdc_ir_type(f, am);
      bool ok = at.rank == mr;
      for (int i = 0; ok && i < mr; i++) ok = at.dims[i] == dims[i];
      if (!ok)
        return kdc_fe_layer_err(l, KDC_INVALID_INPUT, "the call's attention_mask must be "
                                "(batch.., %lld, %lld)", (long long)dims[mr - 2],
                                (long long)dims[mr - 1]);
      kdc_value_id ab = kdc_fe_mask_bool(f, am);
      m = m == KDC_NO_VALUE ? ab : kdc_ir_binary(f, KDC_OP_AND, ab, m);
    }
    s = masked_softmax(f, s, m, fill);
  } else {
    s = use_causal ? causal_softmax(f, s, na, norm) : kdc_fe_softmax(f, s, na, norm, false);
  }
  KDC_RETURN_IF_ERROR(kdc_fe_einsum_parse(l, "attention_axes", comb_eq, sr, rank, &e));
  kdc_value_id a = kdc_fe_einsum_lower(f, &e, s, pv);
  proj_equation(eq, qr - 1, 2, n_os);
  KDC_RETURN_IF_ERROR(project(c, l, "attention_output", eq, a, &o));
  out[0] = o;
  if (scores_out && n->n_out > 1) out[1] = s;
  if (qm != KDC_NO_VALUE && c->out_mask) c->out_mask[0] = qm; /* set_keras_mask(output) */
  return NULL;
}
