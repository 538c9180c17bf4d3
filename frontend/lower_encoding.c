/*
 * frontend/lower_encoding.c: CategoryEncoding and Discretization (Keras 3
 * keras/src/layers/preprocessing/category_encoding.py, discretization.py,
 * keras/src/utils/numerical_utils.py encode_categorical_inputs): shape
 * inference and lowering.
 *
 * Discretization(bin_boundaries b, output_mode): the bucket of x is
 *   jnp.digitize(x, b) = #{j : b_j <= x} (right=False), as int32 for
 *   output_mode "int", else encoded as below with depth len(b) + 1.  A layer
 *   without bin_boundaries (num_bins only, never adapted) is an error, as in
 *   Keras' call.
 * CategoryEncoding(num_tokens, output_mode) of ids x (any numeric dtype;
 *   compared exactly, as jax.nn.one_hot does):
 *   one_hot    out[..., k] = (x == k); a trailing dim of size 1 is dropped
 *              first (rank > 1)
 *   multi_hot  out[..., k] = any_i (x[..., i] == k)   (last dim reduced)
 *   count      out[..., k] = #{i : x[..., i] == k}
 *   Ids outside [0, num_tokens) match nothing.  Float outputs (the layer's
 *   dtype, float32); `sparse` and count_weights are refused.
 * Each compare is against an iota over a new last axis, so the layers keep
 * any split of the batch.
 */
#include <json-c/json.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/frontend.h"

typedef enum enc_mode { ENC_INT, ENC_ONE_HOT, ENC_MULTI_HOT, ENC_COUNT } enc_mode;

static kdc_status read_mode(const kdc_keras_layer *l, const char *dflt, enc_mode *m) {
  const char *s;
  bool sparse = false;
  KDC_RETURN_IF_ERROR(kdc_fe_cfg_str(l, "output_mode", dflt, &s));
  KDC_RETURN_IF_ERROR(kdc_fe_cfg_bool(l, "sparse", false, &sparse));
  if (sparse) return kdc_fe_layer_err(l, KDC_UNSUPPORTED, "config.sparse=true is not supported");
  bool disc = !strcmp(l->class_name, "Discretization");
  if (disc && !strcmp(s, "int")) *m = ENC_INT;
  else if (!strcmp(s, "one_hot")) *m = ENC_ONE_HOT;
  else if (!strcmp(s, "multi_hot") || !strcmp(s, "binary")) *m = ENC_MULTI_HOT;
  else if (!strcmp(s, "count")) *m = ENC_COUNT;
  else
    return kdc_fe_layer_err(l, KDC_INVALID_INPUT, "config.output_mode \"%s\": expected %s"
                            "\"one_hot\", \"multi_hot\" or \"count\"", s, disc ? "\"int\", " : "");
  return NULL;
}

/* Discretization's boundaries (|n| of them, at most |cap|); NULL |b| counts. */
static kdc_status boundaries(const kdc_keras_layer *l, int cap, double *b, int *n) {
  json_object *a = kdc_fe_get(l->config, "bin_boundaries");
  if (kdc_fe_is_null(a))
    return kdc_fe_layer_err(l, KDC_INVALID_INPUT, "config.bin_boundaries is null: the layer was "
                            "never adapted (Keras' call fails the same way)");
  if (!json_object_is_type(a, json_type_array))
    return kdc_fe_layer_err(l, KDC_INVALID_INPUT, "config.bin_boundaries: expected a list");
  *n = (int)json_object_array_length(a);
  for (int i = 0; i < *n && b; i++) {
    json_object *e = json_object_array_get_idx(a, (size_t)i);
    if (!json_object_is_type(e, json_type_double) && !json_object_is_type(e, json_type_int))
      return kdc_fe_layer_err(l, KDC_INVALID_INPUT, "config.bin_boundaries[%d]: expected a number",
                              i);
    if (i < cap) b[i] = json_object_get_double(e);
  }
  return NULL;
}

/* Output shape of the encoding of ids of shape |x| into |depth| classes. */
static kdc_kshape encoded_shape(const kdc_kshape *x, enc_mode m, int64_t depth) {
  kdc_kshape o = *x;
  if (m == ENC_INT) return o;
  bool drop_last = m != ENC_ONE_HOT || (x->rank > 1 && x->dims[x->rank - 1] == 1);
  if (drop_last) o.rank--;
  o.dims[o.rank++] = depth;
  return o;
}

static kdc_status depth_of(const kdc_keras_layer *l, int64_t *depth) {
  if (!strcmp(l->class_name, "Discretization")) {
    int n = 0;
    KDC_RETURN_IF_ERROR(boundaries(l, 0, NULL, &n));
    *depth = n + 1;
    return NULL;
  }
  KDC_RETURN_IF_ERROR(kdc_fe_cfg_int(l, "num_tokens", INT64_MIN, depth));
  if (*depth < 1)
    return kdc_fe_layer_err(l, KDC_INVALID_INPUT, "config.num_tokens must be >= 1, got %lld",
                            (long long)*depth);
  return NULL;
}

kdc_status kdc_fe_infer_encoding(kdc_infer_args *a) {
  const kdc_keras_layer *l = a->l;
  if (a->node->n_in != 1 || a->node->n_kw)
    return kdc_fe_layer_err(l, KDC_UNSUPPORTED, "expected 1 input tensor (count_weights are not "
                            "supported)");
  enc_mode m = ENC_INT;
  int64_t depth = 1;
  bool disc = !strcmp(l->class_name, "Discretization");
  KDC_RETURN_IF_ERROR(read_mode(l, disc ? "int" : "multi_hot", &m));
  KDC_RETURN_IF_ERROR(depth_of(l, &depth));
  const kdc_kshape *x = &a->in[0];
  if (x->rank < 1 || x->rank >= KDC_MAX_RANK)
    return kdc_fe_shape_err(a, "the input needs a batch dimension", x, NULL);
  kdc_kshape o = encoded_shape(x, m, depth);
  kdc_fe_set_outputs(a, 1, &o);
  return NULL;
}

/* The encoding of |ids| (any dtype) into |depth| classes. */
static kdc_value_id encode(kdc_func *f, kdc_value_id ids, enc_mode m, int64_t depth) {
  kdc_type t = *kdc_ir_type(f, ids);
  if (m == ENC_ONE_HOT && t.rank > 1 && t.dims[t.rank - 1] == 1) {
    t.rank--;
    ids = kdc_ir_reshape(f, ids, t.rank, t.dims);
  }
  int64_t dims[KDC_MAX_RANK], map[KDC_MAX_RANK];
  for (int i = 0; i < t.rank; i++) dims[i] = t.dims[i], map[i] = i;
  dims[t.rank] = depth;
  kdc_type it = kdc_type_make(t.dtype, t.rank + 1, dims);
  kdc_value_id hit = kdc_ir_compare(f, KDC_CMP_EQ, kdc_ir_broadcast(f, ids, t.rank + 1, dims, map),
                                    kdc_ir_iota(f, &it, t.rank));
  kdc_value_id y = kdc_ir_convert(f, hit, KDC_DTYPE_F32);
  if (m == ENC_ONE_HOT) return y;
  int64_t ax = t.rank - 1;
  return kdc_ir_reduce(f, m == ENC_COUNT ? KDC_RED_SUM : KDC_RED_MAX, y, 1, &ax);
}

kdc_status kdc_fe_lower_encoding(struct kdc_lower_ctx *c, const kdc_keras_layer *l,
                                 const kdc_keras_node *n, const kdc_value_id *in,
                                 const kdc_value_id *kw, kdc_value_id *out) {
  (void)n, (void)kw;
  kdc_func *f = c->f;
  enc_mode m = ENC_INT;
  int64_t depth = 1;
  bool disc = !strcmp(l->class_name, "Discretization");
  KDC_RETURN_IF_ERROR(read_mode(l, disc ? "int" : "multi_hot", &m));
  KDC_RETURN_IF_ERROR(depth_of(l, &depth));
  kdc_value_id x = in[0];
  if (x == KDC_NO_VALUE) return NULL;
  if (disc) {
    int nb = (int)depth - 1;
    double *b = kdc_xcalloc((size_t)nb + 1, sizeof *b);
    kdc_status st = boundaries(l, nb, b, &nb);
    if (st) {
      free(b);
      return st;
    }
    /* inputs are cast to floatx (Discretization.input_dtype) */
    x = kdc_ir_convert(f, x, KDC_DTYPE_F32);
    const kdc_type t = *kdc_ir_type(f, x);
    kdc_value_id idx = kdc_ir_splat(f, KDC_DTYPE_I32, t.rank, t.dims, 0);
    for (int j = 0; j < nb; j++) {
      kdc_value_id ge = kdc_ir_compare(f, KDC_CMP_GE, x, kdc_ir_splat(f, KDC_DTYPE_F32, t.rank,
                                                                      t.dims, b[j]));
      idx = kdc_ir_binary(f, KDC_OP_ADD, idx, kdc_ir_convert(f, ge, KDC_DTYPE_I32));
    }
    free(b);
    out[0] = m == ENC_INT ? idx : encode(f, idx, m, depth);
    return NULL;
  }
  out[0] = encode(f, x, m, depth);
  return NULL;
}
