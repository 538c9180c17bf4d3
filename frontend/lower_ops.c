/*
 * frontend/lower_ops.c: Keras 3 operations recorded as graph nodes: shape
 * inference and lowering.
 *
 * A Keras 3 Functional model records an op applied to a symbolic tensor as
 * a node of an Operation, serialized like a layer whose module is
 * keras.src.ops.<...> (keras/src/models/functional.py). The one real files
 * carry most is the mask Embedding(mask_zero=True).compute_mask builds,
 * ops.not_equal(ids, 0) (keras/src/layers/core/embedding.py), which Keras 3
 * writes as a NotEqual node and passes to the next layer as its `mask`
 * kwarg (an LSTM after the embedding, say; lower.c takes an explicit mask
 * kwarg as the layer's previous mask).
 *
 * The comparisons of keras/src/ops/numpy.py: Equal, NotEqual, Less,
 * LessEqual, Greater, GreaterEqual, `x op y` with y a number (the node's
 * positional args [x, y]) or a tensor of x's shape; bool output, as in
 * Keras. Other shapes of y (numpy broadcasting) are a located error.
 */
#include <json-c/json.h>
#include <string.h>

#include "frontend/frontend.h"

static const struct {
  const char *cls;
  kdc_cmp cmp;
} compares[] = {
    {"Equal", KDC_CMP_EQ},   {"NotEqual", KDC_CMP_NE},    {"Less", KDC_CMP_LT},
    {"LessEqual", KDC_CMP_LE}, {"Greater", KDC_CMP_GT}, {"GreaterEqual", KDC_CMP_GE},
};

static kdc_cmp compare_of(const kdc_keras_layer *l) {
  for (size_t i = 0; i < sizeof compares / sizeof compares[0]; i++)
    if (!strcmp(l->class_name, compares[i].cls)) return compares[i].cmp;
  return KDC_CMP_EQ; /* not reached: layers.c routes only these classes here */
}

/* The number y of a node called as op(x, y), from its args list. */
static kdc_status scalar_operand(const kdc_keras_layer *l, const kdc_keras_node *n, double *y) {
  json_object *args = n->args;
  json_object *v = json_object_is_type(args, json_type_array) && json_object_array_length(args) == 2
                       ? json_object_array_get_idx(args, 1)
                       : NULL;
  if (!v || !(json_object_is_type(v, json_type_int) || json_object_is_type(v, json_type_double)))
    return kdc_fe_layer_err(l, KDC_UNSUPPORTED,
                            "%s is read as op(x, y) with y a number or a tensor of x's shape "
                            "(the node's args [x, y])",
                            l->class_name);
  *y = json_object_get_double(v);
  return NULL;
}

kdc_status kdc_fe_infer_compare(kdc_infer_args *a) {
  const kdc_keras_node *n = a->node;
  if (n->n_in == 1) {
    double y;
    KDC_RETURN_IF_ERROR(scalar_operand(a->l, n, &y));
  } else if (n->n_in == 2) {
    const kdc_kshape *x = &a->in[0], *y = &a->in[1];
    bool same = x->rank == y->rank;
    for (int d = 0; same && d < x->rank; d++) same = x->dims[d] == y->dims[d];
    if (!same) return kdc_fe_shape_err(a, "the compared tensors differ in shape", x, y);
  } else {
    return kdc_fe_layer_err(a->l, KDC_INVALID_INPUT, "expected 1 or 2 input tensors, got %d",
                            n->n_in);
  }
  kdc_fe_set_outputs(a, 1, &a->in[0]);
  return NULL;
}

kdc_status kdc_fe_lower_compare(struct kdc_lower_ctx *c, const kdc_keras_layer *l,
                                const kdc_keras_node *n, const kdc_value_id *in,
                                const kdc_value_id *kw, kdc_value_id *out) {
  (void)kw;
  kdc_func *f = c->f;
  kdc_value_id y = n->n_in == 2 ? in[1] : KDC_NO_VALUE;
  if (y == KDC_NO_VALUE) {
    double v;
    KDC_RETURN_IF_ERROR(scalar_operand(l, n, &v));
    const kdc_type t = *kdc_ir_type(f, in[0]);
    y = kdc_ir_splat(f, t.dtype, t.rank, t.dims, v);
  }
  out[0] = kdc_ir_compare(f, compare_of(l), in[0], y);
  return NULL;
}
