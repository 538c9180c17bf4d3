/*
 * frontend/lower_ops.c: Keras 3 operations recorded as graph nodes: the
 * class table, shape inference and lowering.
 *
 * A Keras 3 Functional model records a `keras.ops` function applied to a
 * symbolic tensor as a node of an Operation, serialized like a layer whose
 * module is keras.src.ops.<numpy|nn|math|core> (keras/src/models/functional.py;
 * ops/operation.py: the config is the constructor's arguments, the node's
 * `args` the call's, numbers included).  Real files carry them for masks:
 * Embedding(mask_zero=True).compute_mask is ops.not_equal(ids, 0), Keras'
 * merge of two masks ops.logical_or, Masking's ops.any(x != v, -1).  Op
 * classes share names with layers (Add, Concatenate, Reshape, Softmax,
 * Maximum, ...), so graph.c looks them up here by module
 * (kdc_fe_find_op_class).  An op does not carry a Keras mask (Operation's
 * symbolic_call sets none): mask.c gives op nodes no mask rule.
 *
 * Lowered, with Keras 3.15's shape and dtype rules (each class's
 * compute_output_spec and the jax backend's function):
 * - elementwise unary: Abs/Absolute, Negative, Sign, Square, Round
 *   (decimals 0) keep the dtype (Square of bool: int32); Sqrt, Exp, Log,
 *   Log1p, Expm1, Tanh, Floor, Ceil, Reciprocal, Rsqrt, Erf, Sigmoid take
 *   int and bool to float32; LogicalNot gives bool;
 * - keras.ops.nn activations on float32: Relu, Relu6, Silu, Softplus,
 *   Softsign, LogSigmoid, Selu, HardSigmoid, HardSilu, TanhShrink,
 *   HardTanh, SparsePlus, SparseSigmoid, Elu(alpha), LeakyRelu
 *   (negative_slope), Gelu (approximate, True by default for the op),
 *   Celu (alpha 1), SoftShrink/HardShrink (threshold 0.5), Squareplus
 *   (b 4), Softmax and LogSoftmax (axis);
 * - elementwise binary with numpy broadcasting and Keras' result_type:
 *   Add, Subtract, Multiply, Divide/TrueDivide (ints: float32), Maximum,
 *   Minimum, Power (float); LogicalAnd/Or/Xor (bool); Equal, NotEqual,
 *   Less, LessEqual, Greater, GreaterEqual (bool); Where(cond, x1, x2);
 *   Clip(x_min, x_max) (bool: int32); Cast(dtype);
 * - reductions over axes that keep the batch: Sum (bool: int32), Mean
 *   (int and bool: float32), Max/Amax, Min/Amin, Prod, Any, All; keepdims;
 * - Var, Std, Logsumexp (float32), Argmax / Argmin (int32, first index);
 * - shapes that keep the batch as dim 0: ExpandDims, Squeeze, Reshape,
 *   Transpose, Swapaxes, Concatenate, Stack, GetItem (ints, slices, None,
 *   Ellipsis), Take (one integer index);
 * - Matmul of two float tensors of one rank >= 3 (a batched dot), OneHot,
 *   Flip, Repeat, Tile, Cumsum (float: a lower-triangular constant dot),
 *   Einsum of two float operands (einsum.c) keeping the batch label first.
 * Result types (keras/src/backend/common/dtypes.py result_type, JAX
 * lattice): a Python int operand is weak (int32 for bool, else the
 * tensor's type), a Python float makes float32; two tensors give the
 * higher of bool < int < float32, two different ints int32 (jax without
 * x64).  kdc's dtypes are float32, int32, int64 and bool; Cast to another
 * is a located error.
 *
 * An op that moves, merges or reduces the batch dimension (axis 0, axis
 * None of a reduction, a Reshape whose first dim is not -1) is a located
 * error: kdc's plans keep the batch as every output's dim 0.  Every other
 * op class is "not supported", naming it (graph.c).
 */
#include <json-c/json.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/frontend.h"

typedef enum op_kind {
  K_UN,      /* elementwise unary IR op |op| */
  K_FLOATUN, /* the same after int/bool -> float32 */
  K_SQUARE,
  K_ROUND,
  K_RECIP,
  K_NOT,
  K_ACT,     /* an activation by name (activations.c) */
  K_BIN,     /* arithmetic binary IR op |op| */
  K_DIV,
  K_LOGIC,   /* |op| AND / OR; NOT for xor */
  K_CMP,     /* compare |op| */
  K_WHERE,
  K_CLIP,
  K_CAST,
  K_RED,     /* reduction |op| (reduce kind); |arg|: 1 mean, 2 any, 3 all */
  K_EXPAND,
  K_SQUEEZE,
  K_RESHAPE,
  K_TRANSPOSE,
  K_SWAP,
  K_CONCAT,
  K_STACK,
  K_GETITEM,
  K_TAKE,
  K_MATMUL,
  K_ARG,     /* argmax / argmin: |op| the reduce kind */
  K_ONEHOT,
  K_FLIP,
  K_REPEAT,
  K_TILE,
  K_CUMSUM,
  K_EINSUM,
} op_kind;

typedef struct op_row {
  op_kind kind;
  int op;
  int arg;
  const char *act;
} op_row;

/* name, kind, IR op / compare / reduce kind, extra, activation name */
#define KDC_OPS(X)                                                     \
  X("Abs", K_UN, KDC_OP_ABS, 0, NULL)                                  \
  X("Absolute", K_UN, KDC_OP_ABS, 0, NULL)                             \
  X("Negative", K_UN, KDC_OP_NEG, 0, NULL)                             \
  X("Sign", K_UN, KDC_OP_SIGN, 0, NULL)                                \
  X("Square", K_SQUARE, 0, 0, NULL)                                    \
  X("Round", K_ROUND, KDC_OP_ROUND, 0, NULL)                           \
  X("Sqrt", K_FLOATUN, KDC_OP_SQRT, 0, NULL)                           \
  X("Exp", K_FLOATUN, KDC_OP_EXP, 0, NULL)                             \
  X("Log", K_FLOATUN, KDC_OP_LOG, 0, NULL)                             \
  X("Log1p", K_FLOATUN, KDC_OP_LOG1P, 0, NULL)                         \
  X("Expm1", K_FLOATUN, KDC_OP_EXPM1, 0, NULL)                         \
  X("Tanh", K_FLOATUN, KDC_OP_TANH, 0, NULL)                           \
  X("Floor", K_FLOATUN, KDC_OP_FLOOR, 0, NULL)                         \
  X("Ceil", K_FLOATUN, KDC_OP_CEIL, 0, NULL)                           \
  X("Rsqrt", K_FLOATUN, KDC_OP_RSQRT, 0, NULL)                         \
  X("Erf", K_FLOATUN, KDC_OP_ERF, 0, NULL)                             \
  X("Sigmoid", K_FLOATUN, KDC_OP_LOGISTIC, 0, NULL)                    \
  X("Reciprocal", K_RECIP, 0, 0, NULL)                                 \
  X("LogicalNot", K_NOT, 0, 0, NULL)                                   \
  X("Relu", K_ACT, 0, 0, "relu")                                       \
  X("Relu6", K_ACT, 0, 0, "relu6")                                     \
  X("Silu", K_ACT, 0, 0, "silu")                                       \
  X("Softplus", K_ACT, 0, 0, "softplus")                               \
  X("Softsign", K_ACT, 0, 0, "softsign")                               \
  X("LogSigmoid", K_ACT, 0, 0, "log_sigmoid")                          \
  X("Selu", K_ACT, 0, 0, "selu")                                       \
  X("HardSigmoid", K_ACT, 0, 0, "hard_sigmoid")                        \
  X("HardSilu", K_ACT, 0, 0, "hard_silu")                              \
  X("TanhShrink", K_ACT, 0, 0, "tanh_shrink")                          \
  X("HardTanh", K_ACT, 0, 0, "hard_tanh")                              \
  X("SparsePlus", K_ACT, 0, 0, "sparse_plus")                          \
  X("SparseSigmoid", K_ACT, 0, 0, "sparse_sigmoid")                    \
  X("Elu", K_ACT, 0, 0, "elu")                                         \
  X("LeakyRelu", K_ACT, 0, 0, "leaky_relu")                            \
  X("Gelu", K_ACT, 0, 0, "gelu")                                       \
  X("Celu", K_ACT, 0, 0, "celu")                                       \
  X("SoftShrink", K_ACT, 0, 0, "soft_shrink")                          \
  X("HardShrink", K_ACT, 0, 0, "hard_shrink")                          \
  X("Squareplus", K_ACT, 0, 0, "squareplus")                           \
  X("Softmax", K_ACT, 0, 0, "softmax")                                 \
  X("LogSoftmax", K_ACT, 0, 0, "log_softmax")                          \
  X("Add", K_BIN, KDC_OP_ADD, 0, NULL)                                 \
  X("Subtract", K_BIN, KDC_OP_SUB, 0, NULL)                            \
  X("Multiply", K_BIN, KDC_OP_MUL, 0, NULL)                            \
  X("Maximum", K_BIN, KDC_OP_MAX, 0, NULL)                             \
  X("Minimum", K_BIN, KDC_OP_MIN, 0, NULL)                             \
  X("Power", K_BIN, KDC_OP_POW, 0, NULL)                               \
  X("Divide", K_DIV, 0, 0, NULL)                                       \
  X("TrueDivide", K_DIV, 0, 0, NULL)                                   \
  X("LogicalAnd", K_LOGIC, KDC_OP_AND, 0, NULL)                        \
  X("LogicalOr", K_LOGIC, KDC_OP_OR, 0, NULL)                          \
  X("LogicalXor", K_LOGIC, KDC_OP_NOT, 0, NULL)                        \
  X("Equal", K_CMP, KDC_CMP_EQ, 0, NULL)                               \
  X("NotEqual", K_CMP, KDC_CMP_NE, 0, NULL)                            \
  X("Less", K_CMP, KDC_CMP_LT, 0, NULL)                                \
  X("LessEqual", K_CMP, KDC_CMP_LE, 0, NULL)                           \
  X("Greater", K_CMP, KDC_CMP_GT, 0, NULL)                             \
  X("GreaterEqual", K_CMP, KDC_CMP_GE, 0, NULL)                        \
  X("Where", K_WHERE, 0, 0, NULL)                                      \
  X("Clip", K_CLIP, 0, 0, NULL)                                        \
  X("Cast", K_CAST, 0, 0, NULL)                                        \
  X("Sum", K_RED, KDC_RED_SUM, 0, NULL)                                \
  X("Mean", K_RED, KDC_RED_SUM, 1, NULL)                               \
  X("Max", K_RED, KDC_RED_MAX, 0, NULL)                                \
  X("Amax", K_RED, KDC_RED_MAX, 0, NULL)                               \
  X("Min", K_RED, KDC_RED_MIN, 0, NULL)                                \
  X("Amin", K_RED, KDC_RED_MIN, 0, NULL)                               \
  X("Prod", K_RED, KDC_RED_PROD, 0, NULL)                              \
  X("Any", K_RED, KDC_RED_MAX, 2, NULL)                                \
  X("All", K_RED, KDC_RED_MIN, 3, NULL)                                \
  X("Var", K_RED, KDC_RED_SUM, 4, NULL)                                \
  X("Std", K_RED, KDC_RED_SUM, 5, NULL)                                \
  X("Logsumexp", K_RED, KDC_RED_SUM, 6, NULL)                          \
  X("Argmax", K_ARG, KDC_RED_MAX, 0, NULL)                             \
  X("Argmin", K_ARG, KDC_RED_MIN, 0, NULL)                             \
  X("GetItem", K_GETITEM, 0, 0, NULL)                                  \
  X("Take", K_TAKE, 0, 0, NULL)                                        \
  X("Matmul", K_MATMUL, 0, 0, NULL)                                    \
  X("OneHot", K_ONEHOT, 0, 0, NULL)                                    \
  X("Flip", K_FLIP, 0, 0, NULL)                                        \
  X("Repeat", K_REPEAT, 0, 0, NULL)                                    \
  X("Tile", K_TILE, 0, 0, NULL)                                        \
  X("Cumsum", K_CUMSUM, 0, 0, NULL)                                    \
  X("Einsum", K_EINSUM, 0, 0, NULL)                                    \
  X("ExpandDims", K_EXPAND, 0, 0, NULL)                                \
  X("Squeeze", K_SQUEEZE, 0, 0, NULL)                                  \
  X("Reshape", K_RESHAPE, 0, 0, NULL)                                  \
  X("Transpose", K_TRANSPOSE, 0, 0, NULL)                              \
  X("Swapaxes", K_SWAP, 0, 0, NULL)                                    \
  X("Concatenate", K_CONCAT, 0, 0, NULL)                               \
  X("Stack", K_STACK, 0, 0, NULL)

#define ROW(name, kind, op, arg, act) {kind, op, arg, act},
#define CLS(name, kind, op, arg, act) {name, kdc_fe_infer_op, kdc_fe_lower_op, NULL},
static const op_row rows[] = {KDC_OPS(ROW)};
static const kdc_layer_class classes[] = {KDC_OPS(CLS)};
#undef ROW
#undef CLS

bool kdc_fe_is_op_module(const char *module) {
  return module && (!strncmp(module, "keras.src.ops.", 14) || !strncmp(module, "keras.ops", 9));
}

const kdc_layer_class *kdc_fe_find_op_class(const char *class_name) {
  for (size_t i = 0; i < sizeof classes / sizeof classes[0]; i++)
    if (!strcmp(classes[i].name, class_name)) return &classes[i];
  return NULL;
}

bool kdc_fe_is_op_class(const kdc_layer_class *c) {
  return c >= classes && c < classes + sizeof classes / sizeof classes[0];
}

static const op_row *row_of(const kdc_keras_layer *l) { return &rows[l->cls - classes]; }

/* ---- operands: the node's positional args, tensors or numbers ------------ */

enum { W_NONE, W_BOOL, W_INT, W_FLOAT }; /* a Python scalar's weak type */

typedef struct operand {
  int tensor;  /* index among the node's tensor inputs, -1 for a number */
  int weak;    /* W_* for a number */
  double num;
} operand;

static bool is_tensor(json_object *v) {
  json_object *cn = kdc_fe_get(v, "class_name");
  return json_object_is_type(v, json_type_object) && cn &&
         json_object_is_type(cn, json_type_string) &&
         !strcmp(json_object_get_string(cn), "__keras_tensor__");
}

/* The node's positional arguments 0..|want|-1 (missing trailing ones as
 * W_NONE numbers when |optional|), each a tensor or a number. */
static kdc_status operands(const kdc_keras_layer *l, const kdc_keras_node *n, int want,
                           operand *out) {
  json_object *args = n->args;
  if (!json_object_is_type(args, json_type_array))
    return kdc_fe_layer_err(l, KDC_INVALID_INPUT, "expected the node's args list");
  int na = (int)json_object_array_length(args), t = 0;
  if (na != want)
    return kdc_fe_layer_err(l, KDC_UNSUPPORTED, "%s takes %d positional argument%s in kdc, the "
                            "node has %d", l->class_name, want, want == 1 ? "" : "s", na);
  for (int i = 0; i < na; i++) {
    json_object *v = json_object_array_get_idx(args, (size_t)i);
    out[i] = (operand){-1, W_NONE, 0};
    if (is_tensor(v)) out[i].tensor = t++;
    else if (json_object_is_type(v, json_type_boolean))
      out[i].weak = W_BOOL, out[i].num = json_object_get_boolean(v);
    else if (json_object_is_type(v, json_type_int))
      out[i].weak = W_INT, out[i].num = (double)json_object_get_int64(v);
    else if (json_object_is_type(v, json_type_double))
      out[i].weak = W_FLOAT, out[i].num = json_object_get_double(v);
    else
      return kdc_fe_layer_err(l, KDC_UNSUPPORTED, "%s: argument %d must be a tensor or a number",
                              l->class_name, i);
  }
  if (t != n->n_in)
    return kdc_fe_layer_err(l, KDC_UNSUPPORTED, "%s: tensors passed as keyword arguments are not "
                            "supported", l->class_name);
  return NULL;
}

/* ---- shape inference ------------------------------------------------------ */

/* numpy broadcasting of |a| and |b| (-1: the unknown batch). */
static bool bcast(const kdc_kshape *a, const kdc_kshape *b, kdc_kshape *out) {
  int r = a->rank > b->rank ? a->rank : b->rank;
  out->rank = r;
  for (int i = 0; i < r; i++) {
    int ia = i - (r - a->rank), ib = i - (r - b->rank);
    int64_t da = ia >= 0 ? a->dims[ia] : 1, db = ib >= 0 ? b->dims[ib] : 1;
    if (da == db || db == 1) out->dims[i] = da;
    else if (da == 1) out->dims[i] = db;
    else if (da < 0 || db < 0) out->dims[i] = da < 0 ? db : da;
    else return false;
  }
  return true;
}

static bool keeps_batch(const kdc_kshape *s) { return s->rank >= 1 && s->dims[0] < 0; }

static kdc_status batch_err(const kdc_keras_layer *l, const char *what) {
  return kdc_fe_layer_err(l, KDC_UNSUPPORTED, "%s %s the batch dimension (axis 0), which kdc "
                          "keeps as dim 0 of every tensor", l->class_name, what);
}

/* Axes config |key| (int, list, or null = |none|) normalized for |rank|;
 * *|n| 0 for null. */
static kdc_status axes_of(const kdc_keras_layer *l, const char *key, int rank, int *n,
                          int64_t *ax) {
  json_object *v = kdc_fe_get(l->config, key);
  *n = 0;
  if (kdc_fe_is_null(v)) return NULL;
  KDC_RETURN_IF_ERROR(kdc_fe_cfg_axes(l, key, 0, n, ax));
  for (int i = 0; i < *n; i++) {
    if (ax[i] < -rank || ax[i] >= rank)
      return kdc_fe_layer_err(l, KDC_INVALID_INPUT, "config.%s: axis %lld is out of range for "
                              "rank %d", key, (long long)ax[i], rank);
    if (ax[i] < 0) ax[i] += rank;
    for (int j = 0; j < i; j++)
      if (ax[j] == ax[i])
        return kdc_fe_layer_err(l, KDC_INVALID_INPUT, "config.%s: axis %lld repeated", key,
                                (long long)ax[i]);
  }
  return NULL;
}

static int int_cfg(const kdc_keras_layer *l, const char *key, int64_t dflt, int64_t *v) {
  return kdc_fe_cfg_int(l, key, dflt, v) == NULL;
}

/* The result shape of a reduction / shape op of |x|, checked. */
static kdc_status shape_op(const kdc_keras_layer *l, const op_row *r, const kdc_kshape *x,
                           kdc_kshape *out) {
  int64_t ax[KDC_MAX_RANK];
  int n = 0;
  *out = *x;
  switch (r->kind) {
  case K_RED: {
    bool keep = false;
    KDC_RETURN_IF_ERROR(kdc_fe_cfg_bool(l, "keepdims", false, &keep));
    KDC_RETURN_IF_ERROR(axes_of(l, "axis", x->rank, &n, ax));
    json_object *init = kdc_fe_get(l->config, "initial");
    if (!kdc_fe_is_null(init))
      return kdc_fe_layer_err(l, KDC_UNSUPPORTED, "config.initial: only null is supported");
    if (n == 0) return batch_err(l, "with axis null reduces");
    bool red[KDC_MAX_RANK] = {0};
    for (int i = 0; i < n; i++) red[ax[i]] = true;
    if (red[0]) return batch_err(l, "reduces");
    out->rank = 0;
    for (int d = 0; d < x->rank; d++)
      if (!red[d]) out->dims[out->rank++] = x->dims[d];
      else if (keep) out->dims[out->rank++] = 1;
    return NULL;
  }
  case K_EXPAND: {
    KDC_RETURN_IF_ERROR(kdc_fe_cfg_axes(l, "axis", 0, &n, ax));
    int rank = x->rank + n;
    if (rank > KDC_MAX_RANK)
      return kdc_fe_layer_err(l, KDC_UNSUPPORTED, "rank %d exceeds kdc's maximum %d", rank,
                              KDC_MAX_RANK);
    bool ins[KDC_MAX_RANK] = {0};
    for (int i = 0; i < n; i++) {
      int64_t a = ax[i] < 0 ? ax[i] + rank : ax[i];
      if (a < 0 || a >= rank || ins[a])
        return kdc_fe_layer_err(l, KDC_INVALID_INPUT, "config.axis: bad axis %lld for rank %d",
                                (long long)ax[i], rank);
      ins[a] = true;
    }
    if (ins[0]) return batch_err(l, "with axis 0 moves");
    out->rank = rank;
    for (int d = 0, k = 0; d < rank; d++) out->dims[d] = ins[d] ? 1 : x->dims[k++];
    return NULL;
  }
  case K_SQUEEZE: {
    KDC_RETURN_IF_ERROR(axes_of(l, "axis", x->rank, &n, ax));
    bool drop[KDC_MAX_RANK] = {0};
    for (int d = 1; n == 0 && d < x->rank; d++) drop[d] = x->dims[d] == 1;
    for (int i = 0; i < n; i++) {
      if (ax[i] == 0) return batch_err(l, "squeezes");
      if (x->dims[ax[i]] != 1)
        return kdc_fe_layer_err(l, KDC_INVALID_INPUT, "config.axis: dimension %lld has size "
                                "%lld, not 1", (long long)ax[i], (long long)x->dims[ax[i]]);
      drop[ax[i]] = true;
    }
    out->rank = 0;
    for (int d = 0; d < x->rank; d++)
      if (!drop[d]) out->dims[out->rank++] = x->dims[d];
    return NULL;
  }
  case K_RESHAPE: {
    kdc_kshape ns;
    json_object *v = kdc_fe_get(l->config, "newshape");
    KDC_RETURN_IF_ERROR(kdc_fe_parse_shape(l->model, v ? v : NULL,
                                           kdc_fe_join(l->model->arena, l->loc, "config.newshape"),
                                           &ns));
    if (ns.rank < 1 || ns.dims[0] != -1) return batch_err(l, "with a first dim other than -1 changes");
    int64_t per = 1, known = 1;
    int unknown = 0;
    for (int d = 1; d < x->rank; d++) per *= x->dims[d];
    for (int d = 1; d < ns.rank; d++)
      if (ns.dims[d] < 0) unknown++;
      else known *= ns.dims[d];
    if (unknown > 0 || known != per)
      return kdc_fe_layer_err(l, KDC_UNSUPPORTED, "config.newshape: kdc needs -1 first (the "
                              "batch) and the other dims known with %lld elements per sample",
                              (long long)per);
    *out = ns;
    return NULL;
  }
  case K_TRANSPOSE: {
    KDC_RETURN_IF_ERROR(axes_of(l, "axes", x->rank, &n, ax));
    if (n == 0) {
      if (x->rank > 1) return batch_err(l, "with axes null moves");
      return NULL;
    }
    if (n != x->rank)
      return kdc_fe_layer_err(l, KDC_INVALID_INPUT, "config.axes: %d axes for rank %d", n,
                              x->rank);
    if (ax[0] != 0) return batch_err(l, "moves");
    for (int d = 0; d < n; d++) out->dims[d] = x->dims[ax[d]];
    return NULL;
  }
  case K_ARG: {
    bool keep = false;
    KDC_RETURN_IF_ERROR(kdc_fe_cfg_bool(l, "keepdims", false, &keep));
    KDC_RETURN_IF_ERROR(axes_of(l, "axis", x->rank, &n, ax));
    if (n == 0) return batch_err(l, "with axis null flattens");
    if (n != 1) return kdc_fe_layer_err(l, KDC_INVALID_INPUT, "config.axis: expected one axis");
    if (ax[0] == 0) return batch_err(l, "reduces");
    out->rank = 0;
    for (int d = 0; d < x->rank; d++)
      if (d != ax[0]) out->dims[out->rank++] = x->dims[d];
      else if (keep) out->dims[out->rank++] = 1;
    return NULL;
  }
  case K_ONEHOT: {
    int64_t k = 0, axis = -1;
    bool sparse = false;
    KDC_RETURN_IF_ERROR(kdc_fe_cfg_int(l, "num_classes", -1, &k));
    KDC_RETURN_IF_ERROR(kdc_fe_cfg_int(l, "axis", -1, &axis));
    KDC_RETURN_IF_ERROR(kdc_fe_cfg_bool(l, "sparse", false, &sparse));
    if (k < 1 || k > KDC_FE_MAX_ELEMENTS)
      return kdc_fe_layer_err(l, KDC_INVALID_INPUT, "config.num_classes: expected a positive "
                              "integer");
    if ((axis != -1 && axis != x->rank) || sparse)
      return kdc_fe_layer_err(l, KDC_UNSUPPORTED, "config.axis / sparse: kdc puts the classes "
                              "last (axis -1), dense");
    if (x->rank + 1 > KDC_MAX_RANK)
      return kdc_fe_layer_err(l, KDC_UNSUPPORTED, "rank %d exceeds kdc's maximum %d",
                              x->rank + 1, KDC_MAX_RANK);
    out->dims[out->rank++] = k;
    return NULL;
  }
  case K_FLIP: case K_CUMSUM:
    KDC_RETURN_IF_ERROR(axes_of(l, "axis", x->rank, &n, ax));
    if (n == 0) return batch_err(l, r->kind == K_FLIP ? "with axis null reverses"
                                                      : "with axis null flattens");
    if (r->kind == K_CUMSUM && n != 1)
      return kdc_fe_layer_err(l, KDC_INVALID_INPUT, "config.axis: expected one axis");
    for (int i = 0; i < n; i++)
      if (ax[i] == 0) return batch_err(l, r->kind == K_FLIP ? "reverses" : "accumulates along");
    if (r->kind == K_CUMSUM && !kdc_fe_is_null(kdc_fe_get(l->config, "dtype")))
      return kdc_fe_layer_err(l, KDC_UNSUPPORTED, "config.dtype: only null is supported");
    return NULL;
  case K_REPEAT: {
    int64_t rep = 0;
    json_object *rv = kdc_fe_get(l->config, "repeats");
    if (!json_object_is_type(rv, json_type_int) || (rep = json_object_get_int64(rv)) < 1)
      return kdc_fe_layer_err(l, KDC_UNSUPPORTED, "config.repeats: kdc reads one positive "
                              "integer");
    KDC_RETURN_IF_ERROR(axes_of(l, "axis", x->rank, &n, ax));
    if (n == 0) return batch_err(l, "with axis null flattens");
    if (n != 1) return kdc_fe_layer_err(l, KDC_INVALID_INPUT, "config.axis: expected one axis");
    if (ax[0] == 0) return batch_err(l, "repeats");
    if (x->rank + 1 > KDC_MAX_RANK || x->dims[ax[0]] > KDC_FE_MAX_ELEMENTS / rep)
      return kdc_fe_layer_err(l, KDC_UNSUPPORTED, "the result is too large");
    out->dims[ax[0]] *= rep;
    return NULL;
  }
  case K_TILE: {
    json_object *rv = kdc_fe_get(l->config, "repeats");
    int64_t rep[KDC_MAX_RANK];
    int k = json_object_is_type(rv, json_type_array) ? (int)json_object_array_length(rv) : 1;
    if (k > x->rank) return batch_err(l, "with more repeats than dims moves");
    for (int i = 0; i < x->rank; i++) rep[i] = 1;
    for (int i = 0; i < k; i++) {
      json_object *e = json_object_is_type(rv, json_type_array)
                           ? json_object_array_get_idx(rv, (size_t)i) : rv;
      if (!json_object_is_type(e, json_type_int) || json_object_get_int64(e) < 1)
        return kdc_fe_layer_err(l, KDC_UNSUPPORTED, "config.repeats: expected positive integers");
      rep[x->rank - k + i] = json_object_get_int64(e);
    }
    if (rep[0] != 1) return batch_err(l, "repeats");
    for (int i = 1; i < x->rank; i++) {
      if (x->dims[i] > KDC_FE_MAX_ELEMENTS / rep[i])
        return kdc_fe_layer_err(l, KDC_UNSUPPORTED, "the result is too large");
      out->dims[i] *= rep[i];
    }
    if (x->rank + 1 > KDC_MAX_RANK)
      return kdc_fe_layer_err(l, KDC_UNSUPPORTED, "rank %d exceeds kdc's maximum %d", x->rank + 1,
                              KDC_MAX_RANK);
    return NULL;
  }
  case K_SWAP: {
    int64_t a1 = 0, a2 = 0;
    if (!int_cfg(l, "axis1", 0, &a1) || !int_cfg(l, "axis2", 0, &a2) || a1 < -x->rank ||
        a1 >= x->rank || a2 < -x->rank || a2 >= x->rank)
      return kdc_fe_layer_err(l, KDC_INVALID_INPUT, "config.axis1/axis2: expected axes of "
                              "rank %d", x->rank);
    a1 = a1 < 0 ? a1 + x->rank : a1;
    a2 = a2 < 0 ? a2 + x->rank : a2;
    if ((a1 == 0) != (a2 == 0)) return batch_err(l, "moves");
    out->dims[a1] = x->dims[a2];
    out->dims[a2] = x->dims[a1];
    return NULL;
  }
  default:
    return NULL;
  }
}

/* x[key] of GetItem (args [x, key]; key: a slice, an int, None, Ellipsis
 * or a list of them, as Keras serializes them: {"class_name": "__slice__",
 * "config": {start, stop, step}}, {"class_name": "__ellipsis__"}) and
 * Take(x, i, axis): the slice of |x| (start/limit/stride per dim) and the
 * result shape.  The batch dim must be taken whole. */
typedef struct index_plan {
  int64_t start[KDC_MAX_RANK], limit[KDC_MAX_RANK], stride[KDC_MAX_RANK];
  kdc_kshape out;
} index_plan;

static const char *special(json_object *v) {
  json_object *cn = kdc_fe_get(v, "class_name");
  return json_object_is_type(v, json_type_object) && cn && json_object_is_type(cn, json_type_string)
             ? json_object_get_string(cn) : NULL;
}

static bool opt_int(json_object *v, int64_t *out) {
  if (kdc_fe_is_null(v)) return false;
  *out = json_object_get_int64(v);
  return true;
}

/* One index component |v| for dim |d| of size |size|. */
static kdc_status index_one(const kdc_keras_layer *l, json_object *v, int d, int64_t size,
                            index_plan *p, bool *keep) {
  const char *cls = special(v);
  *keep = true;
  p->start[d] = 0, p->limit[d] = size, p->stride[d] = 1;
  if (json_object_is_type(v, json_type_int)) {
    if (d == 0) return batch_err(l, "with an integer index takes one row of");
    int64_t i = json_object_get_int64(v);
    if (i < -size || i >= size)
      return kdc_fe_layer_err(l, KDC_INVALID_INPUT, "index %lld is out of range for dimension "
                              "%d of size %lld", (long long)i, d, (long long)size);
    p->start[d] = i < 0 ? i + size : i;
    p->limit[d] = p->start[d] + 1;
    *keep = false;
    return NULL;
  }
  if (!cls || strcmp(cls, "__slice__"))
    return kdc_fe_layer_err(l, KDC_UNSUPPORTED, "GetItem: kdc reads integer, slice, None and "
                            "Ellipsis indices (not tensors or lists)");
  json_object *c = kdc_fe_get(v, "config");
  int64_t a = 0, b = size, st = 1;
  bool has_a = opt_int(kdc_fe_get(c, "start"), &a), has_b = opt_int(kdc_fe_get(c, "stop"), &b);
  bool has_st = opt_int(kdc_fe_get(c, "step"), &st);
  if (d == 0 && (has_a || has_b || (has_st && st != 1))) return batch_err(l, "slices");
  if (d == 0) return NULL; /* the whole batch (its size -1 while shapes are inferred) */
  if (st < 1)
    return kdc_fe_layer_err(l, KDC_UNSUPPORTED, "GetItem: slice steps below 1 are not supported");
  if (has_a) a = a < 0 ? (a + size < 0 ? 0 : a + size) : (a > size ? size : a);
  if (has_b) b = b < 0 ? (b + size < 0 ? 0 : b + size) : (b > size ? size : b);
  if (b <= a)
    return kdc_fe_layer_err(l, KDC_UNSUPPORTED, "GetItem: an empty slice of dimension %d", d);
  p->start[d] = a, p->limit[d] = b, p->stride[d] = st;
  return NULL;
}

static kdc_status index_plan_of(const kdc_keras_layer *l, const kdc_keras_node *n,
                                const kdc_kshape *x, index_plan *p) {
  json_object *args = n->args;
  const op_row *r = row_of(l);
  if (n->n_in != 1 || !json_object_is_type(args, json_type_array) ||
      json_object_array_length(args) != 2)
    return kdc_fe_layer_err(l, KDC_UNSUPPORTED, "%s: expected the arguments (x, index) with a "
                            "constant index", l->class_name);
  json_object *key = json_object_array_get_idx(args, 1);
  p->out.rank = 0;
  if (r->kind == K_TAKE) {
    int64_t axis = 0;
    json_object *av = kdc_fe_get(l->config, "axis");
    if (kdc_fe_is_null(av)) return batch_err(l, "with axis null flattens");
    KDC_RETURN_IF_ERROR(kdc_fe_cfg_int(l, "axis", 0, &axis));
    if (!json_object_is_type(key, json_type_int))
      return kdc_fe_layer_err(l, KDC_UNSUPPORTED, "Take: kdc reads one integer index (not a "
                              "tensor or a list)");
    if (axis < -x->rank || axis >= x->rank)
      return kdc_fe_layer_err(l, KDC_INVALID_INPUT, "config.axis: %lld out of range for rank %d",
                              (long long)axis, x->rank);
    if (axis < 0) axis += x->rank;
    for (int d = 0; d < x->rank; d++) {
      bool keep = true;
      p->start[d] = 0, p->limit[d] = x->dims[d], p->stride[d] = 1;
      if (d == axis) KDC_RETURN_IF_ERROR(index_one(l, key, d, x->dims[d], p, &keep));
      if (keep) p->out.dims[p->out.rank++] = x->dims[d];
    }
    return NULL;
  }
  bool list = json_object_is_type(key, json_type_array);
  int nk = list ? (int)json_object_array_length(key) : 1, used = 0, ell = 0;
  for (int k = 0; k < nk; k++) {
    json_object *v = list ? json_object_array_get_idx(key, (size_t)k) : key;
    const char *cls = special(v);
    if (cls && !strcmp(cls, "__ellipsis__")) ell++;
    else if (!kdc_fe_is_null(v)) used++;
  }
  if (ell > 1 || used > x->rank)
    return kdc_fe_layer_err(l, KDC_INVALID_INPUT, "GetItem: too many indices for rank %d",
                            x->rank);
  int d = 0;
  for (int k = 0; k <= nk; k++) {
    json_object *v = k < nk ? (list ? json_object_array_get_idx(key, (size_t)k) : key) : NULL;
    const char *cls = v ? special(v) : NULL;
    bool is_ell = cls && !strcmp(cls, "__ellipsis__");
    if (k < nk && !is_ell && kdc_fe_is_null(v)) { /* None: a new axis */
      if (d == 0) return batch_err(l, "with None first moves");
      if (p->out.rank >= KDC_MAX_RANK)
        return kdc_fe_layer_err(l, KDC_UNSUPPORTED, "rank exceeds kdc's maximum %d", KDC_MAX_RANK);
      p->out.dims[p->out.rank++] = 1;
      continue;
    }
    /* Ellipsis: the dims no explicit index takes; the end: the rest */
    int full = k == nk ? x->rank - d : is_ell ? x->rank - used : 0;
    if (p->out.rank + full > KDC_MAX_RANK)
      return kdc_fe_layer_err(l, KDC_UNSUPPORTED, "rank exceeds kdc's maximum %d", KDC_MAX_RANK);
    for (int e = 0; e < full; e++, d++) {
      p->start[d] = 0, p->limit[d] = x->dims[d], p->stride[d] = 1;
      p->out.dims[p->out.rank++] = x->dims[d];
    }
    if (k == nk || is_ell) continue;
    bool keep;
    KDC_RETURN_IF_ERROR(index_one(l, v, d, x->dims[d], p, &keep));
    if (keep) {
      if (p->out.rank >= KDC_MAX_RANK)
        return kdc_fe_layer_err(l, KDC_UNSUPPORTED, "rank exceeds kdc's maximum %d", KDC_MAX_RANK);
      int64_t len = (p->limit[d] - p->start[d] + p->stride[d] - 1) / p->stride[d];
      p->out.dims[p->out.rank++] = d == 0 ? x->dims[0] : len;
    }
    d++;
  }
  return NULL;
}

/* Einsum(subscripts)(a, b): two operands (einsum.c), the batch a label of
 * dim 0 of both and of the output; *|out| the result shape. */
static kdc_status einsum_of(const kdc_keras_layer *l, const kdc_kshape *a, const kdc_kshape *b,
                            kdc_fe_einsum *e, kdc_kshape *out) {
  const char *eq = NULL;
  KDC_RETURN_IF_ERROR(kdc_fe_cfg_str(l, "subscripts", NULL, &eq));
  KDC_RETURN_IF_ERROR(kdc_fe_einsum_parse(l, "subscripts", eq, a->rank, b->rank, e));
  if (e->n[0] < 1 || e->n[1] < 1 || e->n[2] < 1 || e->lab[0][0] != e->lab[1][0] ||
      e->lab[2][0] != e->lab[0][0])
    return batch_err(l, "does not keep as the first label of both operands and the output");
  const kdc_kshape *ops2[2] = {a, b};
  int64_t size[128];
  for (int i = 0; i < 128; i++) size[i] = -2;
  for (int s = 0; s < 2; s++)
    for (int i = 0; i < e->n[s]; i++) {
      int lab = e->lab[s][i];
      int64_t d = ops2[s]->dims[i];
      if (size[lab] != -2 && size[lab] != d)
        return kdc_fe_layer_err(l, KDC_INVALID_INPUT, "config.subscripts \"%s\": a label's "
                                "dims differ in size (%lld, %lld)", eq, (long long)size[lab],
                                (long long)d);
      size[lab] = d;
    }
  out->rank = e->n[2];
  for (int i = 0; i < e->n[2]; i++) out->dims[i] = size[(int)e->lab[2][i]];
  return NULL;
}

kdc_status kdc_fe_infer_op(kdc_infer_args *a) {
  const kdc_keras_layer *l = a->l;
  const kdc_keras_node *n = a->node;
  const op_row *r = row_of(l);
  kdc_kshape out = {0};
  operand o[3];
  if (n->n_kw)
    return kdc_fe_layer_err(l, KDC_UNSUPPORTED, "%s: tensors passed as keyword arguments are not "
                            "supported", l->class_name);
  switch (r->kind) {
  case K_BIN: case K_DIV: case K_LOGIC: case K_CMP: case K_WHERE: {
    int na = r->kind == K_WHERE ? 3 : 2;
    KDC_RETURN_IF_ERROR(operands(l, n, na, o));
    kdc_kshape s = {0};
    for (int i = 0; i < na; i++) {
      if (o[i].tensor < 0) continue;
      kdc_kshape t = s;
      if (!bcast(&t, &a->in[o[i].tensor], &s))
        return kdc_fe_shape_err(a, "the operands do not broadcast together", &t,
                                &a->in[o[i].tensor]);
    }
    out = s;
    break;
  }
  case K_CONCAT: case K_STACK: {
    json_object *args = n->args;
    json_object *lst = json_object_is_type(args, json_type_array) && json_object_array_length(args) == 1
                           ? json_object_array_get_idx(args, 0) : NULL;
    if (!json_object_is_type(lst, json_type_array) || n->n_in < 1 ||
        (int)json_object_array_length(lst) != n->n_in)
      return kdc_fe_layer_err(l, KDC_UNSUPPORTED, "%s: expected one list of tensors as its "
                              "argument", l->class_name);
    int64_t axis = 0;
    KDC_RETURN_IF_ERROR(kdc_fe_cfg_int(l, "axis", 0, &axis));
    const kdc_kshape *x = &a->in[0];
    int rank = x->rank + (r->kind == K_STACK);
    if (axis < -rank || axis >= rank)
      return kdc_fe_layer_err(l, KDC_INVALID_INPUT, "config.axis: %lld out of range for rank %d",
                              (long long)axis, rank);
    if (axis < 0) axis += rank;
    if (axis == 0) return batch_err(l, "along axis 0 changes");
    if (rank > KDC_MAX_RANK)
      return kdc_fe_layer_err(l, KDC_UNSUPPORTED, "rank %d exceeds kdc's maximum %d", rank,
                              KDC_MAX_RANK);
    out = *x;
    for (int i = 1; i < n->n_in; i++) {
      const kdc_kshape *y = &a->in[i];
      bool ok = y->rank == x->rank;
      for (int d = 0; ok && d < x->rank; d++)
        ok = y->dims[d] == x->dims[d] || (r->kind == K_CONCAT && d == axis);
      if (!ok) return kdc_fe_shape_err(a, "the tensors' shapes do not fit together", x, y);
      if (r->kind == K_CONCAT) out.dims[axis] += y->dims[axis];
    }
    if (r->kind == K_STACK) {
      out.rank = rank;
      for (int d = rank - 1; d > axis; d--) out.dims[d] = x->dims[d - 1];
      out.dims[axis] = n->n_in;
    }
    break;
  }
  case K_GETITEM: case K_TAKE: {
    index_plan p;
    KDC_RETURN_IF_ERROR(index_plan_of(l, n, &a->in[0], &p));
    out = p.out;
    break;
  }
  case K_EINSUM: {
    KDC_RETURN_IF_ERROR(operands(l, n, 2, o));
    if (n->n_in != 2)
      return kdc_fe_layer_err(l, KDC_UNSUPPORTED, "Einsum: kdc reads two tensor operands");
    kdc_fe_einsum e;
    KDC_RETURN_IF_ERROR(einsum_of(l, &a->in[0], &a->in[1], &e, &out));
    break;
  }
  case K_MATMUL: {
    KDC_RETURN_IF_ERROR(operands(l, n, 2, o));
    const kdc_kshape *x = &a->in[0], *y = &a->in[1];
    bool ok = n->n_in == 2 && x->rank == y->rank && x->rank >= 3;
    for (int d = 1; ok && d < x->rank - 2; d++) ok = x->dims[d] == y->dims[d];
    if (ok) ok = x->dims[x->rank - 1] == y->dims[y->rank - 2];
    if (!ok)
      return kdc_fe_shape_err(a, "Matmul: kdc multiplies two tensors of one rank >= 3 with "
                              "equal leading dims and matching inner dims", x, y);
    out = *x;
    out.dims[x->rank - 1] = y->dims[y->rank - 1];
    break;
  }
  default:
    KDC_RETURN_IF_ERROR(operands(l, n, 1, o));
    if (o[0].tensor != 0)
      return kdc_fe_layer_err(l, KDC_UNSUPPORTED, "%s: argument 0 must be a tensor",
                              l->class_name);
    KDC_RETURN_IF_ERROR(shape_op(l, r, &a->in[0], &out));
    break;
  }
  if (!keeps_batch(&out))
    return kdc_fe_layer_err(l, KDC_UNSUPPORTED, "%s: the result has no batch dimension", l->class_name);
  kdc_fe_set_outputs(a, 1, &out);
  return NULL;
}

/* ---- lowering --------------------------------------------------------------- */

static bool is_int(kdc_dtype d) { return d == KDC_DTYPE_I32 || d == KDC_DTYPE_I64; }

/* |v| as dtype |d| (Keras' cast: float -> int truncates, nonzero -> true,
 * to bf16/f16 rounds to nearest even).  Op nodes see f32, not half, inputs
 * (policy.c widens them); a half result stays half for the next layer. */
static kdc_value_id to_dtype(kdc_func *f, kdc_value_id v, kdc_dtype d) {
  if (v == KDC_NO_VALUE || kdc_ir_type(f, v)->dtype == d) return v;
  if (d == KDC_DTYPE_BOOL) return kdc_fe_mask_bool(f, v);
  if (kdc_dtype_is_half(d) && kdc_ir_type(f, v)->dtype != KDC_DTYPE_F32)
    v = kdc_ir_convert(f, v, KDC_DTYPE_F32);
  return kdc_ir_convert(f, v, d);
}

/* Keras' result_type of the operands (dtypes.py, JAX lattice). */
static kdc_dtype result_type(kdc_func *f, const operand *o, int n, const kdc_value_id *in) {
  bool any_t = false, t_float = false, t_int = false, t_bool = false, w_float = false,
       w_int = false;
  kdc_dtype first_int = KDC_DTYPE_I32;
  bool two_ints = false;
  for (int i = 0; i < n; i++) {
    if (o[i].tensor < 0) {
      w_float |= o[i].weak == W_FLOAT;
      w_int |= o[i].weak == W_INT;
      continue;
    }
    kdc_dtype d = kdc_ir_type(f, in[o[i].tensor])->dtype;
    any_t = true;
    if (d == KDC_DTYPE_F32) t_float = true;
    else if (d == KDC_DTYPE_BOOL) t_bool = true;
    else {
      if (t_int && d != first_int) two_ints = true;
      if (!t_int) first_int = d;
      t_int = true;
    }
  }
  (void)any_t;
  if (t_float || w_float) return KDC_DTYPE_F32;
  if (t_int) return two_ints ? KDC_DTYPE_I32 : first_int;
  if (w_int) return KDC_DTYPE_I32;
  (void)t_bool;
  return KDC_DTYPE_BOOL;
}

/* Operand |o| as a value of dtype |d| (numbers as rank-0 constants). */
static kdc_value_id value_of(kdc_func *f, const operand *o, const kdc_value_id *in, kdc_dtype d) {
  if (o->tensor >= 0) return to_dtype(f, in[o->tensor], d);
  double v = o->num;
  if (d == KDC_DTYPE_BOOL) v = v != 0;
  else if (is_int(d)) v = trunc(v);
  return kdc_ir_scalar(f, d, v);
}

/* Broadcasts the |n| values to their common numpy shape. */
static void broadcast_all(kdc_func *f, int n, kdc_value_id *v) {
  kdc_kshape s = {0};
  for (int i = 0; i < n; i++) {
    const kdc_type tt = *kdc_ir_type(f, v[i]), *t = &tt;
    kdc_kshape x = kdc_kshape_make(t->rank, t->dims), y = s;
    if (!bcast(&y, &x, &s)) return; /* the builder reports the mismatch */
  }
  for (int i = 0; i < n; i++) v[i] = kdc_ir_broadcast_to(f, v[i], s.rank, s.dims);
}

static kdc_status dtype_err(const kdc_keras_layer *l, kdc_dtype d, const char *what) {
  return kdc_fe_layer_err(l, KDC_UNSUPPORTED, "%s of a %s tensor is not supported (%s)",
                          l->class_name, kdc_dtype_name(d), what);
}

static kdc_status act_checks(const kdc_keras_layer *l, double *alpha) {
  double v = 0;
  if (!strcmp(l->class_name, "Celu")) {
    KDC_RETURN_IF_ERROR(kdc_fe_cfg_double(l, "alpha", 1.0, &v));
    if (v != 1.0) return kdc_fe_layer_err(l, KDC_UNSUPPORTED, "config.alpha: only 1.0 is supported");
  } else if (!strcmp(l->class_name, "SoftShrink") || !strcmp(l->class_name, "HardShrink")) {
    KDC_RETURN_IF_ERROR(kdc_fe_cfg_double(l, "threshold", 0.5, &v));
    if (v != 0.5)
      return kdc_fe_layer_err(l, KDC_UNSUPPORTED, "config.threshold: only 0.5 is supported");
  } else if (!strcmp(l->class_name, "Squareplus")) {
    KDC_RETURN_IF_ERROR(kdc_fe_cfg_double(l, "b", 4.0, &v));
    if (v != 4.0) return kdc_fe_layer_err(l, KDC_UNSUPPORTED, "config.b: only 4 is supported");
  } else if (!strcmp(l->class_name, "Elu")) {
    return kdc_fe_cfg_double(l, "alpha", 1.0, alpha);
  } else if (!strcmp(l->class_name, "LeakyRelu")) {
    return kdc_fe_cfg_double(l, "negative_slope", 0.2, alpha);
  }
  return NULL;
}

static kdc_status lower_act(kdc_lower_ctx *c, const kdc_keras_layer *l, const op_row *r,
                            kdc_value_id x, kdc_value_id *out) {
  kdc_func *f = c->f;
  kdc_dtype d = kdc_ir_type(f, x)->dtype;
  if (d != KDC_DTYPE_F32) return dtype_err(l, d, "keras.ops.nn activations take float tensors");
  double alpha = 0;
  KDC_RETURN_IF_ERROR(act_checks(l, &alpha));
  if (!strcmp(l->class_name, "Elu")) {
    *out = kdc_fe_elu(f, x, alpha);
    return NULL;
  }
  if (!strcmp(l->class_name, "LeakyRelu")) {
    *out = kdc_fe_relu(f, x, alpha, 0, false, 0);
    return NULL;
  }
  if (!strcmp(l->class_name, "Gelu")) {
    bool approx = true;
    KDC_RETURN_IF_ERROR(kdc_fe_cfg_bool(l, "approximate", true, &approx));
    *out = kdc_fe_gelu(f, x, approx);
    return NULL;
  }
  if (!strcmp(l->class_name, "Softmax") || !strcmp(l->class_name, "LogSoftmax")) {
    int n = 0;
    int64_t ax[KDC_MAX_RANK];
    const kdc_type tt = *kdc_ir_type(f, x), *t = &tt;
    KDC_RETURN_IF_ERROR(axes_of(l, "axis", t->rank, &n, ax));
    if (n == 0) return batch_err(l, "with axis null normalizes over");
    for (int i = 0; i < n; i++)
      if (ax[i] == 0) return batch_err(l, "normalizes over");
    *out = kdc_fe_softmax(f, x, n, ax, l->class_name[0] == 'L');
    return NULL;
  }
  return kdc_fe_activation(c, l, "name", r->act, x, out);
}

static kdc_status cast_dtype(const kdc_keras_layer *l, kdc_dtype *d) {
  json_object *v = kdc_fe_get(l->config, "dtype");
  const char *s = kdc_fe_dtype_name(v, NULL);
  if (!s) return kdc_fe_layer_err(l, KDC_INVALID_INPUT, "config.dtype: expected a dtype name");
  if (!strcmp(s, "float32")) *d = KDC_DTYPE_F32;
  else if (!strcmp(s, "int32")) *d = KDC_DTYPE_I32;
  else if (!strcmp(s, "int64")) *d = KDC_DTYPE_I64;
  else if (!strcmp(s, "bool")) *d = KDC_DTYPE_BOOL;
  else if (!strcmp(s, "bfloat16")) *d = KDC_DTYPE_BF16;
  else if (!strcmp(s, "float16")) *d = KDC_DTYPE_F16;
  else
    return kdc_fe_layer_err(l, KDC_UNSUPPORTED, "config.dtype \"%s\": kdc's tensors are float32, "
                            "bfloat16, float16, int32, int64 or bool", s);
  return NULL;
}

/* The reduction |m| of |x| over |ax| broadcast back to |x|'s shape. */
static kdc_value_id unreduce(kdc_func *f, kdc_value_id x, kdc_value_id m, int na,
                             const int64_t *ax) {
  const kdc_type t = *kdc_ir_type(f, x);
  bool red[KDC_MAX_RANK] = {0};
  int64_t map[KDC_MAX_RANK];
  int k = 0;
  for (int i = 0; i < na; i++) red[ax[i]] = true;
  for (int i = 0; i < t.rank; i++)
    if (!red[i]) map[k++] = i;
  return kdc_ir_broadcast(f, m, t.rank, t.dims, map);
}

static kdc_value_id minus_reduced(kdc_func *f, kdc_value_id x, kdc_value_id m, int na,
                                  const int64_t *ax) {
  return kdc_ir_binary(f, KDC_OP_SUB, x, unreduce(f, x, m, na, ax));
}

/* Var (|kind| 4: jnp.var, mean((x - mean)^2)), Std (5: its sqrt) and
 * Logsumexp (6: jax.scipy.special.logsumexp, log(sum(exp(x - m))) + m with
 * m the max where finite, else 0) of float |x| over |ax| (|cnt| elements). */
static kdc_value_id moments(kdc_func *f, int kind, kdc_value_id x, int na, const int64_t *ax,
                            double cnt) {
  if (kind == 6) {
    kdc_value_id m = kdc_ir_reduce(f, KDC_RED_MAX, x, na, ax);
    const kdc_type mt = *kdc_ir_type(f, m);
    kdc_value_id fin = kdc_ir_compare(f, KDC_CMP_LT, kdc_ir_unary(f, KDC_OP_ABS, m),
                                      kdc_ir_splat(f, KDC_DTYPE_F32, mt.rank, mt.dims, INFINITY));
    m = kdc_ir_select(f, fin, m, kdc_ir_splat(f, KDC_DTYPE_F32, mt.rank, mt.dims, 0));
    m = kdc_ir_unary(f, KDC_OP_STOP_GRADIENT, m); /* as JAX's logsumexp */
    kdc_value_id e = kdc_ir_unary(f, KDC_OP_EXP, minus_reduced(f, x, m, na, ax));
    kdc_value_id s = kdc_ir_unary(f, KDC_OP_LOG, kdc_ir_reduce(f, KDC_RED_SUM, e, na, ax));
    return kdc_ir_binary(f, KDC_OP_ADD, s, m);
  }
  kdc_value_id mean = kdc_ir_binary_scalar(f, KDC_OP_DIV, kdc_ir_reduce(f, KDC_RED_SUM, x, na, ax),
                                           cnt);
  kdc_value_id dx = minus_reduced(f, x, mean, na, ax);
  kdc_value_id v = kdc_ir_binary_scalar(f, KDC_OP_DIV,
                                        kdc_ir_reduce(f, KDC_RED_SUM, kdc_ir_binary(f, KDC_OP_MUL,
                                                                                    dx, dx),
                                                      na, ax),
                                        cnt);
  return kind == 5 ? kdc_ir_unary(f, KDC_OP_SQRT, v) : v;
}

/* argmax (|kind| MAX) / argmin (MIN) of |x| along |axis|, int32: the first
 * index of the extreme, or of the first NaN (jnp.argmax). */
static kdc_value_id arg_extreme(kdc_func *f, kdc_reduce_kind kind, kdc_value_id x, int64_t axis) {
  if (kdc_ir_type(f, x)->dtype == KDC_DTYPE_BOOL) x = kdc_ir_convert(f, x, KDC_DTYPE_I32);
  const kdc_type t = *kdc_ir_type(f, x);
  kdc_value_id m = kdc_ir_reduce(f, kind, x, 1, &axis);
  kdc_value_id at = kdc_ir_compare(f, KDC_CMP_EQ, x, unreduce(f, x, m, 1, &axis));
  if (t.dtype == KDC_DTYPE_F32) /* NaN (x != x) wins, as max propagates it */
    at = kdc_ir_binary(f, KDC_OP_OR, at, kdc_ir_compare(f, KDC_CMP_NE, x, x));
  kdc_type it = kdc_type_make(KDC_DTYPE_I32, t.rank, t.dims);
  kdc_value_id idx = kdc_ir_select(f, at, kdc_ir_iota(f, &it, axis),
                                   kdc_ir_splat(f, KDC_DTYPE_I32, t.rank, t.dims,
                                                (double)t.dims[axis]));
  return kdc_ir_reduce(f, KDC_RED_MIN, idx, 1, &axis);
}

static kdc_status lower_shape_op(kdc_lower_ctx *c, const kdc_keras_layer *l, const op_row *r,
                                 const kdc_keras_node *n, kdc_value_id x, kdc_value_id *out) {
  kdc_func *f = c->f;
  kdc_type t = *kdc_ir_type(f, x);
  kdc_kshape xs = kdc_kshape_make(t.rank, t.dims), ys;
  xs.dims[0] = -1; /* the batch, as shape inference saw it */
  KDC_RETURN_IF_ERROR(shape_op(l, r, &xs, &ys));
  ys.dims[0] = t.dims[0];
  kdc_dtype d = t.dtype;
  int64_t ax[KDC_MAX_RANK];
  int na = 0;
  switch (r->kind) {
  case K_RED: {
    KDC_RETURN_IF_ERROR(axes_of(l, "axis", t.rank, &na, ax));
    kdc_reduce_kind kind = (kdc_reduce_kind)r->op;
    double cnt = 1;
    for (int i = 0; i < na; i++) cnt *= (double)t.dims[ax[i]];
    if (r->arg >= 4) { /* Var, Std, Logsumexp: float32 */
      *out = kdc_ir_reshape(f, moments(f, r->arg, to_dtype(f, x, KDC_DTYPE_F32), na, ax, cnt),
                            ys.rank, ys.dims);
      return NULL;
    }
    if (r->arg >= 2) x = kdc_ir_convert(f, to_dtype(f, x, KDC_DTYPE_BOOL), KDC_DTYPE_I32);
    else if (r->arg == 1 && d != KDC_DTYPE_F32) x = to_dtype(f, x, KDC_DTYPE_F32);
    else if (d == KDC_DTYPE_BOOL) x = kdc_ir_convert(f, x, KDC_DTYPE_I32);
    kdc_value_id y = kdc_ir_reduce(f, kind, x, na, ax);
    if (r->arg == 1) {
      y = kdc_ir_binary_scalar(f, KDC_OP_DIV, y, cnt);
    } else if (r->arg >= 2) {
      y = to_dtype(f, y, KDC_DTYPE_BOOL);
    } else if (d == KDC_DTYPE_BOOL && (kind == KDC_RED_MAX || kind == KDC_RED_MIN)) {
      y = to_dtype(f, y, KDC_DTYPE_BOOL); /* max / min of bools stay bool */
    }
    *out = kdc_ir_reshape(f, y, ys.rank, ys.dims);
    return NULL;
  }
  case K_TRANSPOSE:
    KDC_RETURN_IF_ERROR(axes_of(l, "axes", t.rank, &na, ax));
    *out = na ? kdc_ir_transpose(f, x, ax) : x;
    return NULL;
  case K_FLIP:
    KDC_RETURN_IF_ERROR(axes_of(l, "axis", t.rank, &na, ax));
    *out = kdc_ir_reverse(f, x, na, ax);
    return NULL;
  case K_CUMSUM: {
    if (d != KDC_DTYPE_F32) return dtype_err(l, d, "Cumsum takes float tensors in kdc");
    KDC_RETURN_IF_ERROR(axes_of(l, "axis", t.rank, &na, ax));
    int64_t L = t.dims[ax[0]];
    if (L > 4096)
      return kdc_fe_layer_err(l, KDC_UNSUPPORTED, "Cumsum over %lld elements (kdc's limit 4096)",
                              (long long)L);
    float *w = kdc_xcalloc((size_t)(L * L), sizeof *w);
    for (int64_t i = 0; i < L; i++)
      for (int64_t j = 0; j <= i; j++) w[i * L + j] = 1.0f;
    *out = kdc_fe_axis_matrix(f, x, (int)ax[0], L, w);
    free(w);
    return NULL;
  }
  case K_REPEAT: case K_TILE: {
    /* one dim at a time: [.., D, ..] -> [.., D, r, ..] (Repeat) or
     * [.., r, D, ..] (Tile), broadcast, then merged */
    for (int i = 1; i < t.rank; i++) {
      int64_t rep = ys.dims[i] / t.dims[i];
      if (rep == 1) continue;
      const kdc_type ct = *kdc_ir_type(f, x);
      int64_t dims[KDC_MAX_RANK], map[KDC_MAX_RANK];
      int at = r->kind == K_REPEAT ? i + 1 : i; /* the new axis */
      for (int k = 0, j = 0; k <= ct.rank; k++) {
        if (k == at) {
          dims[k] = rep;
          continue;
        }
        map[j] = k;
        dims[k] = ct.dims[j++];
      }
      x = kdc_ir_broadcast(f, x, ct.rank + 1, dims, map);
      int64_t merged[KDC_MAX_RANK];
      for (int k = 0; k < ct.rank; k++) merged[k] = k == i ? ct.dims[k] * rep : ct.dims[k];
      x = kdc_ir_reshape(f, x, ct.rank, merged);
    }
    *out = x;
    return NULL;
  }
  case K_ARG:
    KDC_RETURN_IF_ERROR(axes_of(l, "axis", t.rank, &na, ax));
    *out = kdc_ir_reshape(f, arg_extreme(f, (kdc_reduce_kind)r->op, x, ax[0]), ys.rank, ys.dims);
    return NULL;
  case K_ONEHOT: {
    kdc_dtype to = KDC_DTYPE_F32;
    if (!kdc_fe_is_null(kdc_fe_get(l->config, "dtype"))) KDC_RETURN_IF_ERROR(cast_dtype(l, &to));
    if (d == KDC_DTYPE_F32) x = kdc_ir_convert(f, x, KDC_DTYPE_I32); /* Keras casts to int */
    else if (d == KDC_DTYPE_BOOL) x = kdc_ir_convert(f, x, KDC_DTYPE_I32);
    kdc_dtype id = kdc_ir_type(f, x)->dtype;
    int64_t map[KDC_MAX_RANK];
    for (int i = 0; i < t.rank; i++) map[i] = i;
    kdc_value_id b = kdc_ir_broadcast(f, x, ys.rank, ys.dims, map);
    kdc_type it = kdc_type_make(id, ys.rank, ys.dims);
    kdc_value_id hot = kdc_ir_compare(f, KDC_CMP_EQ, b, kdc_ir_iota(f, &it, ys.rank - 1));
    *out = to_dtype(f, hot, to);
    return NULL;
  }
  case K_SWAP: {
    int64_t a1 = 0, a2 = 0;
    (void)int_cfg(l, "axis1", 0, &a1);
    (void)int_cfg(l, "axis2", 0, &a2);
    a1 = a1 < 0 ? a1 + t.rank : a1;
    a2 = a2 < 0 ? a2 + t.rank : a2;
    for (int i = 0; i < t.rank; i++) ax[i] = i;
    ax[a1] = a2;
    ax[a2] = a1;
    *out = kdc_ir_transpose(f, x, ax);
    return NULL;
  }
  default: /* ExpandDims, Squeeze, Reshape: row-major reinterpretations */
    (void)n;
    *out = kdc_ir_reshape(f, x, ys.rank, ys.dims);
    return NULL;
  }
}

static kdc_value_id bin(kdc_func *f, kdc_op op, kdc_value_id a, kdc_value_id b) {
  return kdc_ir_binary(f, op, a, b);
}

kdc_status kdc_fe_lower_op(struct kdc_lower_ctx *c, const kdc_keras_layer *l,
                           const kdc_keras_node *n, const kdc_value_id *in,
                           const kdc_value_id *kw, kdc_value_id *out) {
  (void)kw;
  kdc_func *f = c->f;
  const op_row *r = row_of(l);
  operand o[3];
  kdc_value_id v[3];
  switch (r->kind) {
  case K_BIN: case K_DIV: case K_LOGIC: case K_CMP: case K_WHERE: {
    int na = r->kind == K_WHERE ? 3 : 2;
    KDC_RETURN_IF_ERROR(operands(l, n, na, o));
    const operand *vo = r->kind == K_WHERE ? o + 1 : o;
    kdc_dtype d = r->kind == K_LOGIC ? KDC_DTYPE_BOOL : result_type(f, vo, 2, in);
    if (r->kind == K_DIV && d != KDC_DTYPE_F32) d = KDC_DTYPE_F32;
    if (r->kind == K_BIN && d == KDC_DTYPE_BOOL)
      return dtype_err(l, d, "arithmetic on two bool operands");
    if (r->kind == K_BIN && r->op == KDC_OP_POW && d != KDC_DTYPE_F32)
      return dtype_err(l, d, "Power takes float operands in kdc");
    if (r->kind == K_WHERE) {
      v[0] = value_of(f, &o[0], in, KDC_DTYPE_BOOL);
      v[1] = value_of(f, &o[1], in, d);
      v[2] = value_of(f, &o[2], in, d);
    } else {
      v[0] = value_of(f, &o[0], in, d);
      v[1] = value_of(f, &o[1], in, d);
    }
    broadcast_all(f, na, v);
    if (r->kind == K_WHERE) out[0] = kdc_ir_select(f, v[0], v[1], v[2]);
    else if (r->kind == K_CMP) out[0] = kdc_ir_compare(f, (kdc_cmp)r->op, v[0], v[1]);
    else if (r->kind == K_LOGIC && r->op == KDC_OP_NOT)
      out[0] = kdc_ir_compare(f, KDC_CMP_NE, v[0], v[1]);
    else if (r->kind == K_DIV) out[0] = bin(f, KDC_OP_DIV, v[0], v[1]);
    else out[0] = bin(f, (kdc_op)r->op, v[0], v[1]);
    return NULL;
  }
  case K_CONCAT: case K_STACK: {
    int64_t axis = 0;
    KDC_RETURN_IF_ERROR(kdc_fe_cfg_int(l, "axis", 0, &axis));
    kdc_dtype d = kdc_ir_type(f, in[0])->dtype;
    bool mixed = false;
    for (int i = 1; i < n->n_in; i++) mixed |= kdc_ir_type(f, in[i])->dtype != d;
    if (mixed) {
      operand os[64];
      for (int i = 0; i < n->n_in; i++) os[i] = (operand){i, W_NONE, 0};
      d = result_type(f, os, n->n_in, in);
    }
    kdc_value_id xs[64];
    int rank = kdc_ir_type(f, in[0])->rank + (r->kind == K_STACK);
    if (axis < 0) axis += rank;
    for (int i = 0; i < n->n_in; i++) {
      xs[i] = to_dtype(f, in[i], d);
      if (r->kind == K_STACK) {
        kdc_type t = *kdc_ir_type(f, xs[i]);
        int64_t dims[KDC_MAX_RANK];
        for (int k = 0, j = 0; k < rank; k++) dims[k] = k == axis ? 1 : t.dims[j++];
        xs[i] = kdc_ir_reshape(f, xs[i], rank, dims);
      }
    }
    out[0] = kdc_ir_concat(f, n->n_in, xs, axis);
    return NULL;
  }
  case K_GETITEM: case K_TAKE: {
    const kdc_type t = *kdc_ir_type(f, in[0]);
    kdc_kshape xs = kdc_kshape_make(t.rank, t.dims);
    index_plan p;
    KDC_RETURN_IF_ERROR(index_plan_of(l, n, &xs, &p));
    kdc_value_id y = kdc_ir_slice(f, in[0], p.start, p.limit, p.stride);
    out[0] = kdc_ir_reshape(f, y, p.out.rank, p.out.dims);
    return NULL;
  }
  case K_EINSUM: {
    const kdc_type ta = *kdc_ir_type(f, in[0]), tb = *kdc_ir_type(f, in[1]);
    if (ta.dtype != KDC_DTYPE_F32 || tb.dtype != KDC_DTYPE_F32)
      return dtype_err(l, ta.dtype != KDC_DTYPE_F32 ? ta.dtype : tb.dtype,
                       "Einsum takes float tensors in kdc");
    kdc_kshape sa = kdc_kshape_make(ta.rank, ta.dims), sb = kdc_kshape_make(tb.rank, tb.dims), so;
    kdc_fe_einsum e;
    KDC_RETURN_IF_ERROR(einsum_of(l, &sa, &sb, &e, &so));
    out[0] = kdc_fe_einsum_lower(f, &e, in[0], in[1]);
    return NULL;
  }
  case K_MATMUL: {
    const kdc_type ta = *kdc_ir_type(f, in[0]), tb = *kdc_ir_type(f, in[1]);
    if (ta.dtype != KDC_DTYPE_F32 || tb.dtype != KDC_DTYPE_F32)
      return dtype_err(l, ta.dtype != KDC_DTYPE_F32 ? ta.dtype : tb.dtype,
                       "Matmul takes float tensors in kdc");
    kdc_attr_dot d;
    memset(&d, 0, sizeof d);
    d.lhs_batch.n = d.rhs_batch.n = ta.rank - 2;
    for (int i = 0; i < ta.rank - 2; i++) d.lhs_batch.v[i] = d.rhs_batch.v[i] = i;
    d.lhs_contract.n = d.rhs_contract.n = 1;
    d.lhs_contract.v[0] = ta.rank - 1;
    d.rhs_contract.v[0] = tb.rank - 2;
    out[0] = kdc_ir_dot(f, in[0], in[1], &d);
    return NULL;
  }
  default:
    break;
  }
  kdc_value_id x = in[0];
  kdc_dtype d = kdc_ir_type(f, x)->dtype;
  switch (r->kind) {
  case K_UN:
    if (d == KDC_DTYPE_BOOL) return dtype_err(l, d, "take an int or float tensor");
    out[0] = kdc_ir_unary(f, (kdc_op)r->op, x);
    return NULL;
  case K_FLOATUN:
    out[0] = kdc_ir_unary(f, (kdc_op)r->op, to_dtype(f, x, KDC_DTYPE_F32));
    return NULL;
  case K_SQUARE:
    if (d == KDC_DTYPE_BOOL) x = kdc_ir_convert(f, x, KDC_DTYPE_I32);
    out[0] = bin(f, KDC_OP_MUL, x, x);
    return NULL;
  case K_ROUND: {
    int64_t dec = 0;
    KDC_RETURN_IF_ERROR(kdc_fe_cfg_int(l, "decimals", 0, &dec));
    if (dec != 0) return kdc_fe_layer_err(l, KDC_UNSUPPORTED, "config.decimals: only 0 is supported");
    if (d == KDC_DTYPE_BOOL) return dtype_err(l, d, "take an int or float tensor");
    out[0] = d == KDC_DTYPE_F32 ? kdc_ir_unary(f, KDC_OP_ROUND, x) : x;
    return NULL;
  }
  case K_RECIP: {
    x = to_dtype(f, x, KDC_DTYPE_F32);
    const kdc_type tt = *kdc_ir_type(f, x), *t = &tt;
    out[0] = bin(f, KDC_OP_DIV, kdc_ir_splat(f, KDC_DTYPE_F32, t->rank, t->dims, 1.0), x);
    return NULL;
  }
  case K_NOT:
    out[0] = kdc_ir_unary(f, KDC_OP_NOT, to_dtype(f, x, KDC_DTYPE_BOOL));
    return NULL;
  case K_ACT:
    return lower_act(c, l, r, x, out);
  case K_CLIP: {
    json_object *lo = kdc_fe_get(l->config, "x_min"), *hi = kdc_fe_get(l->config, "x_max");
    bool num_lo = json_object_is_type(lo, json_type_int) || json_object_is_type(lo, json_type_double);
    bool num_hi = json_object_is_type(hi, json_type_int) || json_object_is_type(hi, json_type_double);
    if (!num_lo || !num_hi)
      return kdc_fe_layer_err(l, KDC_UNSUPPORTED, "config.x_min / x_max: expected two numbers");
    if (d == KDC_DTYPE_BOOL) x = kdc_ir_convert(f, x, KDC_DTYPE_I32), d = KDC_DTYPE_I32;
    const kdc_type tt = *kdc_ir_type(f, x), *t = &tt;
    double a = json_object_get_double(lo), b = json_object_get_double(hi);
    if (is_int(d)) a = trunc(a), b = trunc(b);
    kdc_value_id y = bin(f, KDC_OP_MAX, x, kdc_ir_splat(f, d, t->rank, t->dims, a));
    out[0] = bin(f, KDC_OP_MIN, y, kdc_ir_splat(f, d, t->rank, t->dims, b));
    return NULL;
  }
  case K_CAST: {
    kdc_dtype to = KDC_DTYPE_F32;
    KDC_RETURN_IF_ERROR(cast_dtype(l, &to));
    out[0] = to_dtype(f, x, to);
    return NULL;
  }
  default:
    return lower_shape_op(c, l, r, n, x, out);
  }
}
