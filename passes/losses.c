/*
 * passes/losses.c: Keras 3 losses as IR (kdc_loss_build).
 *
 * Each formula is the one of keras/src/losses/losses.py with the JAX
 * backend's ops (keras/src/backend/jax/nn.py), step by step in the same
 * order, so that f32 results agree with Keras to rounding.  Over predictions
 * p and labels t of shape [..., C] (axis = the last dim):
 *   mean_squared_error    mean(square(t - p), axis)
 *   mean_absolute_error   mean(abs(t - p), axis)
 *   binary_crossentropy   mean(bce, axis) with
 *       logits:  bce = -t * log_sigmoid(p) - (1 - t) * log_sigmoid(-p)
 *       probs:   o = clip(p, eps, 1 - eps);  bce = -(t log o + (1 - t) log(1 - o))
 *   categorical_crossentropy   -sum(t * log_prob, axis) with
 *       logits:  log_prob = log_softmax(p) = (p - max) - log(sum(exp(p - max)))
 *       probs:   log_prob = log(clip(p / sum(p, axis), eps, 1 - eps))
 *   sparse_categorical_crossentropy   the same with t = one_hot(labels, C)
 *       (a label outside [0, C) gives an all-zero row, as jax.nn.one_hot)
 * eps = 1e-7 (keras.backend.epsilon()); clip(x, lo, hi) = min(max(x, lo), hi);
 * log_sigmoid(x) = -softplus(-x), softplus(z) = max(z, 0) + log1p(exp(-|z|))
 * (computed branch-wise, see log_sigmoid below).
 * The per-sample values are then reduced with "sum_over_batch_size":
 * sum / element count (keras/src/losses/loss.py reduce_values); a scalar
 * per-sample value (rank-1 predictions) is the loss itself.
 */
#include <string.h>

#include "passes/passes.h"

#define KERAS_EPSILON 1e-7

static const char *const names[KDC_LOSS_COUNT] = {
    "mean_squared_error", "mean_absolute_error", "binary_crossentropy",
    "categorical_crossentropy", "sparse_categorical_crossentropy"};

const char *kdc_loss_name(kdc_loss_kind k) {
  return (unsigned)k < KDC_LOSS_COUNT ? names[k] : "?";
}

bool kdc_loss_from_name(const char *s, kdc_loss_kind *out) {
  static const struct { const char *alias; kdc_loss_kind k; } aliases[] = {
      {"mse", KDC_LOSS_MSE}, {"mae", KDC_LOSS_MAE},
      {"MeanSquaredError", KDC_LOSS_MSE}, {"MeanAbsoluteError", KDC_LOSS_MAE},
      {"BinaryCrossentropy", KDC_LOSS_BCE}, {"CategoricalCrossentropy", KDC_LOSS_CCE},
      {"SparseCategoricalCrossentropy", KDC_LOSS_SCCE}};
  for (int i = 0; i < KDC_LOSS_COUNT; i++)
    if (strcmp(s, names[i]) == 0) {
      *out = (kdc_loss_kind)i;
      return true;
    }
  for (size_t i = 0; i < sizeof aliases / sizeof aliases[0]; i++)
    if (strcmp(s, aliases[i].alias) == 0) {
      *out = aliases[i].k;
      return true;
    }
  return false;
}

kdc_type kdc_loss_label_type(kdc_loss_kind k, const kdc_type *pred) {
  kdc_type t = *pred;
  if (k == KDC_LOSS_SCCE && t.rank > 0) {
    t.rank--;
    t.dtype = KDC_DTYPE_I32;
  }
  return t;
}

/* ---- helpers ---------------------------------------------------------------- */

static kdc_value_id sc(kdc_func *f, kdc_op op, kdc_value_id x, double s) {
  return kdc_ir_binary_scalar(f, op, x, s);
}

static kdc_value_id bin(kdc_func *f, kdc_op op, kdc_value_id a, kdc_value_id b) {
  return kdc_ir_binary(f, op, a, b);
}

static kdc_value_id un(kdc_func *f, kdc_op op, kdc_value_id x) { return kdc_ir_unary(f, op, x); }

/* s - x for a scalar s (broadcast as a splat). */
static kdc_value_id rsub(kdc_func *f, double s, kdc_value_id x) {
  const kdc_type *t = kdc_ir_type(f, x);
  return bin(f, KDC_OP_SUB, kdc_ir_splat(f, t->dtype, t->rank, t->dims, s), x);
}

/* Reduces the last dim with |kind|; with |keep|, broadcasts the result back. */
static kdc_value_id reduce_last(kdc_func *f, kdc_reduce_kind kind, kdc_value_id x, bool keep) {
  kdc_type t = *kdc_ir_type(f, x);
  int64_t last = t.rank - 1, map[KDC_MAX_RANK];
  kdc_value_id r = kdc_ir_reduce(f, kind, x, 1, &last);
  if (!keep) return r;
  for (int i = 0; i < t.rank - 1; i++) map[i] = i;
  return kdc_ir_broadcast(f, r, t.rank, t.dims, map);
}

static kdc_value_id mean_last(kdc_func *f, kdc_value_id x) {
  int64_t n = kdc_ir_type(f, x)->dims[kdc_ir_type(f, x)->rank - 1];
  return sc(f, KDC_OP_DIV, reduce_last(f, KDC_RED_SUM, x, false), (double)n);
}

static kdc_value_id clip_eps(kdc_func *f, kdc_value_id x) {
  return sc(f, KDC_OP_MIN, sc(f, KDC_OP_MAX, x, KERAS_EPSILON), 1.0 - KERAS_EPSILON);
}

/* jax.nn.log_sigmoid(x) = -softplus(-x), with softplus(z) = logaddexp(z, 0)
 * = max(z, 0) + log1p(exp(-|z|)) written as the select of its two smooth
 * branches: z > 0 ? z + log1p(exp(-z)) : log1p(exp(z)).  The values are the
 * same bits, and the gradient at z == 0 is the true 1/2 instead of depending
 * on how max and abs split their kinks (grad_rules.c gives relu'(0) = 0).
 * Each branch reads z only where it is selected (0 elsewhere, JAX's "double
 * where"): the branch not taken gets a zero cotangent, and zero times its
 * derivative must not be 0 * inf = NaN (log1p(exp(z)) for z > 88 in f32,
 * e.g. the logits of a padded row, which the sample mask then multiplies by
 * 0 and cannot clean). */
static kdc_value_id log_sigmoid(kdc_func *f, kdc_value_id x) {
  kdc_value_id z = un(f, KDC_OP_NEG, x);
  const kdc_type *t = kdc_ir_type(f, z);
  kdc_value_id zero = kdc_ir_splat(f, t->dtype, t->rank, t->dims, 0);
  kdc_value_id pos = kdc_ir_compare(f, KDC_CMP_GT, z, zero);
  kdc_value_id zp = kdc_ir_select(f, pos, z, zero), zn = kdc_ir_select(f, pos, zero, z);
  kdc_value_id e = un(f, KDC_OP_EXP, un(f, KDC_OP_NEG, zp));
  kdc_value_id hi = bin(f, KDC_OP_ADD, zp, un(f, KDC_OP_LOG1P, e));
  kdc_value_id lo = un(f, KDC_OP_LOG1P, un(f, KDC_OP_EXP, zn));
  return un(f, KDC_OP_NEG, kdc_ir_select(f, pos, hi, lo));
}

/* jax.nn.log_softmax over the last dim (its shift by the max carries no
 * gradient: lax.stop_gradient). */
static kdc_value_id log_softmax(kdc_func *f, kdc_value_id x) {
  kdc_value_id m = un(f, KDC_OP_STOP_GRADIENT, reduce_last(f, KDC_RED_MAX, x, true));
  kdc_value_id shifted = bin(f, KDC_OP_SUB, x, m);
  kdc_value_id e = un(f, KDC_OP_EXP, shifted);
  kdc_value_id lse = un(f, KDC_OP_LOG, reduce_last(f, KDC_RED_SUM, e, true));
  return bin(f, KDC_OP_SUB, shifted, lse);
}

/* f32 one-hot rows of the i32 |labels| over the |pred|-shaped last dim. */
static kdc_value_id one_hot(kdc_func *f, kdc_value_id labels, const kdc_type *pred) {
  kdc_type it = *pred;
  it.dtype = KDC_DTYPE_I32;
  int64_t map[KDC_MAX_RANK];
  for (int i = 0; i < pred->rank - 1; i++) map[i] = i;
  kdc_value_id cls = kdc_ir_iota(f, &it, pred->rank - 1);
  kdc_value_id lb = kdc_ir_broadcast(f, labels, it.rank, it.dims, map);
  return kdc_ir_convert(f, kdc_ir_compare(f, KDC_CMP_EQ, cls, lb), KDC_DTYPE_F32);
}

/* The per-sample values of |k| (shape of p without its last dim). */
static kdc_value_id per_sample(kdc_func *f, kdc_loss_kind k, bool from_logits, kdc_value_id t,
                               kdc_value_id p) {
  switch (k) {
  case KDC_LOSS_MSE: {
    kdc_value_id d = bin(f, KDC_OP_SUB, t, p);
    return mean_last(f, bin(f, KDC_OP_MUL, d, d));
  }
  case KDC_LOSS_MAE: return mean_last(f, un(f, KDC_OP_ABS, bin(f, KDC_OP_SUB, t, p)));
  case KDC_LOSS_BCE: {
    kdc_value_id bce;
    if (from_logits) {
      kdc_value_id a = bin(f, KDC_OP_MUL, sc(f, KDC_OP_MUL, t, -1.0), log_sigmoid(f, p));
      kdc_value_id b = bin(f, KDC_OP_MUL, rsub(f, 1.0, t), log_sigmoid(f, un(f, KDC_OP_NEG, p)));
      bce = bin(f, KDC_OP_SUB, a, b);
    } else {
      kdc_value_id o = clip_eps(f, p);
      kdc_value_id a = bin(f, KDC_OP_MUL, t, un(f, KDC_OP_LOG, o));
      kdc_value_id b = bin(f, KDC_OP_MUL, rsub(f, 1.0, t), un(f, KDC_OP_LOG, rsub(f, 1.0, o)));
      bce = un(f, KDC_OP_NEG, bin(f, KDC_OP_ADD, a, b));
    }
    return mean_last(f, bce);
  }
  case KDC_LOSS_SCCE: t = one_hot(f, t, kdc_ir_type(f, p)); /* fall through */
  case KDC_LOSS_CCE: {
    kdc_value_id lp;
    if (from_logits) {
      lp = log_softmax(f, p);
    } else {
      kdc_value_id o = bin(f, KDC_OP_DIV, p, reduce_last(f, KDC_RED_SUM, p, true));
      lp = un(f, KDC_OP_LOG, clip_eps(f, o));
    }
    return un(f, KDC_OP_NEG, reduce_last(f, KDC_RED_SUM, bin(f, KDC_OP_MUL, t, lp), false));
  }
  default: kdc_unreachable();
  }
}

kdc_status kdc_loss_build(kdc_func *f, kdc_loss_kind k, bool from_logits, kdc_value_id y_true,
                          kdc_value_id y_pred, kdc_value_id *out_loss) {
  return kdc_loss_build_masked(f, k, from_logits, y_true, y_pred, KDC_NO_VALUE, out_loss);
}

/* sum(per * mask) / (sum(mask) * per-values per row). */
static kdc_value_id masked_mean(kdc_func *f, kdc_value_id per, kdc_value_id mask) {
  const kdc_type *st = kdc_ir_type(f, per);
  int rank = st->rank;
  int64_t dims[KDC_MAX_RANK], all[KDC_MAX_RANK], map[1] = {0}, zero[1] = {0};
  for (int i = 0; i < rank; i++) dims[i] = st->dims[i], all[i] = i;
  double per_row = (double)kdc_type_numel(st) / (double)st->dims[0];
  kdc_value_id m = kdc_ir_broadcast(f, mask, rank, dims, map);
  kdc_value_id num = kdc_ir_reduce(f, KDC_RED_SUM, bin(f, KDC_OP_MUL, per, m), rank, all);
  kdc_value_id den = kdc_ir_reduce(f, KDC_RED_SUM, mask, 1, zero);
  if (per_row != 1.0) den = sc(f, KDC_OP_MUL, den, per_row);
  return bin(f, KDC_OP_DIV, num, den);
}

kdc_status kdc_loss_build_masked(kdc_func *f, kdc_loss_kind k, bool from_logits,
                                 kdc_value_id y_true, kdc_value_id y_pred, kdc_value_id mask,
                                 kdc_value_id *out_loss) {
  char b1[96], b2[96], b3[96];
  *out_loss = KDC_NO_VALUE;
  if ((unsigned)k >= KDC_LOSS_COUNT) return KDC_ERR(KDC_INVALID_INPUT, "unknown loss %d", (int)k);
  const kdc_type *pt = kdc_ir_type(f, y_pred);
  if (pt->dtype != KDC_DTYPE_F32 || pt->rank < 1)
    return KDC_ERR(KDC_INVALID_INPUT, "loss %s: predictions are %s; expected f32 of rank >= 1",
                   names[k], kdc_type_str(pt, b1, sizeof b1));
  kdc_type want = kdc_loss_label_type(k, pt);
  if (!kdc_type_equal(&want, kdc_ir_type(f, y_true)))
    return KDC_ERR(KDC_INVALID_INPUT, "loss %s: labels are %s; expected %s for predictions %s",
                   names[k], kdc_type_str(kdc_ir_type(f, y_true), b1, sizeof b1),
                   kdc_type_str(&want, b2, sizeof b2), kdc_type_str(pt, b3, sizeof b3));
  kdc_value_id per = per_sample(f, k, from_logits, y_true, y_pred);
  kdc_value_id loss = per;
  const kdc_type *st = per == KDC_NO_VALUE ? NULL : kdc_ir_type(f, per);
  if (st && st->rank > 0 && mask != KDC_NO_VALUE) {
    const kdc_type *mt = kdc_ir_type(f, mask);
    if (mt->dtype != KDC_DTYPE_F32 || mt->rank != 1 || mt->dims[0] != st->dims[0])
      return KDC_ERR(KDC_INVALID_INPUT, "loss %s: sample mask is %s; expected f32[%lld]",
                     names[k], kdc_type_str(mt, b1, sizeof b1), (long long)st->dims[0]);
    loss = masked_mean(f, per, mask);
  } else if (st && st->rank > 0) {
    int64_t dims[KDC_MAX_RANK];
    for (int i = 0; i < st->rank; i++) dims[i] = i;
    double count = (double)kdc_type_numel(st);
    loss = sc(f, KDC_OP_DIV, kdc_ir_reduce(f, KDC_RED_SUM, per, st->rank, dims), count);
  }
  kdc_status s = kdc_ir_take_error(f);
  if (s) return kdc_status_annotate(s, "internal error: loss %s", names[k]);
  *out_loss = loss;
  return NULL;
}

/* divide_no_nan(a, b) of scalars: 0 where b == 0. */
static kdc_value_id div_no_nan(kdc_func *f, kdc_value_id a, kdc_value_id b) {
  kdc_value_id z = kdc_ir_scalar(f, KDC_DTYPE_F32, 0);
  kdc_value_id p = kdc_ir_compare(f, KDC_CMP_EQ, b, z);
  kdc_value_id safe = kdc_ir_select(f, p, kdc_ir_scalar(f, KDC_DTYPE_F32, 1), b);
  return kdc_ir_select(f, p, z, bin(f, KDC_OP_DIV, a, safe));
}

static kdc_value_id sum_all(kdc_func *f, kdc_value_id x) {
  const kdc_type *t = kdc_ir_type(f, x);
  int64_t dims[KDC_MAX_RANK];
  for (int i = 0; i < t->rank; i++) dims[i] = i;
  return kdc_ir_reduce(f, KDC_RED_SUM, x, t->rank, dims);
}

kdc_status kdc_loss_build_keras_masked(kdc_func *f, kdc_loss_kind k, bool from_logits,
                                       kdc_value_id y_true, kdc_value_id y_pred,
                                       kdc_value_id mask, kdc_value_id keras_mask,
                                       kdc_value_id *out_loss) {
  char b1[96], b2[96];
  if (keras_mask == KDC_NO_VALUE)
    return kdc_loss_build_masked(f, k, from_logits, y_true, y_pred, mask, out_loss);
  *out_loss = KDC_NO_VALUE;
  /* the checks and per-sample values of the unmasked loss */
  kdc_value_id plain;
  KDC_RETURN_IF_ERROR(kdc_loss_build_masked(f, k, from_logits, y_true, y_pred, mask, &plain));
  kdc_value_id per = per_sample(f, k, from_logits, y_true, y_pred);
  const kdc_type st = *kdc_ir_type(f, per);
  kdc_type mt = *kdc_ir_type(f, keras_mask);
  kdc_value_id m = keras_mask;
  /* squeeze_or_expand_to_same_rank */
  if (mt.rank == st.rank + 1 && mt.dims[mt.rank - 1] == 1) {
    mt.rank--;
    m = kdc_ir_reshape(f, m, mt.rank, mt.dims);
  } else if (st.rank == mt.rank + 1 && st.dims[st.rank - 1] == 1) {
    mt.dims[mt.rank++] = 1;
    m = kdc_ir_reshape(f, m, mt.rank, mt.dims);
  }
  if (!kdc_type_equal(&mt, &st) || mt.dtype != KDC_DTYPE_F32 || st.rank < 1)
    return KDC_ERR(KDC_INVALID_INPUT, "loss %s: the output's Keras mask %s does not match the "
                   "loss values %s", names[k], kdc_type_str(&mt, b1, sizeof b1),
                   kdc_type_str(&st, b2, sizeof b2));
  double per_row = (double)kdc_type_numel(&st) / (double)st.dims[0];
  kdc_value_id total;
  if (mask != KDC_NO_VALUE) {  /* only the rows of the (smaller) real batch count */
    int64_t map[1] = {0}, zero[1] = {0};
    m = bin(f, KDC_OP_MUL, m, kdc_ir_broadcast(f, mask, st.rank, st.dims, map));
    total = sc(f, KDC_OP_MUL, kdc_ir_reduce(f, KDC_RED_SUM, mask, 1, zero), per_row);
  } else {
    total = kdc_ir_scalar(f, KDC_DTYPE_F32, (double)kdc_type_numel(&st));
  }
  kdc_value_id valid = sum_all(f, m);
  kdc_value_id wt = div_no_nan(f, total, valid);
  int64_t nomap[1] = {0};
  kdc_value_id w = bin(f, KDC_OP_MUL, m, kdc_ir_broadcast(f, wt, st.rank, st.dims, nomap));
  *out_loss = div_no_nan(f, sum_all(f, bin(f, KDC_OP_MUL, per, w)), total);
  kdc_status s = kdc_ir_take_error(f);
  if (s) return kdc_status_annotate(s, "internal error: masked loss %s", names[k]);
  return NULL;
}
