/*
 * ir/window.c: result types and builders of the windowed and indexed ops
 * (ops.def: convolution, reduce_window, select_and_scatter, gather,
 * scatter_add, reverse).  kdc_ir_infer_type calls kdc_ir_infer_window_op for
 * them, so the builder, the verifier and the interpreter share these rules.
 *
 * Conventions (the reference meaning is ir/interp_window.c):
 *   - convolution is StableHLO's with the dimension numbers fixed to
 *     channels-last (Keras' kernel layout): lhs [N, S.., Ci], rhs
 *     [K.., Ci/groups, Co], result [N, O.., Co].  Per spatial dim: the input
 *     is dilated by lhs_dilation (zeros between elements), padded by
 *     pad_low/pad_high (negative = cropped), and a kernel dilated by
 *     rhs_dilation slides with |stride|:
 *       O = floor((Sd + lo + hi - Kd) / stride) + 1,
 *       Sd = (S - 1) * lhs_dilation + 1, Kd = (K - 1) * rhs_dilation + 1;
 *     the padded input must hold at least one window (Sd + lo + hi >= Kd).
 *   - reduce_window / select_and_scatter: the same per operand dim (window
 *     W, dilation of the window; no input dilation).
 *   - gather: table [V, F..] by integer ids of any shape: [I.., F..].
 *   - scatter_add: ids [I..], updates [I.., F..], result type [V, F..] given.
 *   - reverse: dims distinct, the type is unchanged.
 * Errors are KDC_INVALID_INPUT statuses describing the mismatch.
 */
#include <stdlib.h>
#include <string.h>

#include "ir/ir.h"

#define BAD(...) KDC_ERR(KDC_INVALID_INPUT, __VA_ARGS__)

static const char *ts(const kdc_type *t, char *buf) { return kdc_type_str(t, buf, 96); }

static bool is_int(kdc_dtype d) { return d == KDC_DTYPE_I32 || d == KDC_DTYPE_I64; }

/* Output size of one windowed dim, or -1 when the window does not fit. */
static int64_t window_size(int64_t S, int64_t in_dil, int64_t lo, int64_t hi, int64_t K,
                           int64_t k_dil, int64_t stride) {
  int64_t sd = S > 0 ? (S - 1) * in_dil + 1 : 0, kd = (K - 1) * k_dil + 1;
  int64_t span = sd + lo + hi - kd;
  if (K < 1 || span < 0) return -1;
  return span / stride + 1;
}

static kdc_status check_lists(const char *op, int n, const kdc_dimlist *const *l,
                              const char *const *names, int n_lists) {
  for (int i = 0; i < n_lists; i++)
    if (l[i]->n != n) return BAD("%s: %s has %d entries, expected %d", op, names[i], l[i]->n, n);
  return NULL;
}

static kdc_status positive(const char *op, const char *what, const kdc_dimlist *l) {
  for (int i = 0; i < l->n; i++)
    if (l->v[i] < 1) return BAD("%s: %s[%d] = %lld must be >= 1", op, what, i, (long long)l->v[i]);
  return NULL;
}

static kdc_status infer_conv(const kdc_type *x, const kdc_type *w, const kdc_attr_conv *a,
                             kdc_type *out) {
  char b1[96], b2[96];
  int n = x->rank - 2;
  if (x->dtype != KDC_DTYPE_F32 || w->dtype != KDC_DTYPE_F32)
    return BAD("convolution: operands must be f32, got %s and %s", ts(x, b1), ts(w, b2));
  if (n < 1 || w->rank != n + 2)
    return BAD("convolution: lhs %s and rhs %s: expected [N,spatial..,C] and [spatial..,C/groups,"
               "Co] with at least one spatial dim", ts(x, b1), ts(w, b2));
  const kdc_dimlist *l[] = {&a->stride, &a->pad_low, &a->pad_high, &a->lhs_dilation,
                            &a->rhs_dilation};
  const char *const names[] = {"stride", "pad_low", "pad_high", "lhs_dilation", "rhs_dilation"};
  KDC_RETURN_IF_ERROR(check_lists("convolution", n, l, names, 5));
  KDC_RETURN_IF_ERROR(positive("convolution", "stride", &a->stride));
  KDC_RETURN_IF_ERROR(positive("convolution", "lhs_dilation", &a->lhs_dilation));
  KDC_RETURN_IF_ERROR(positive("convolution", "rhs_dilation", &a->rhs_dilation));
  int64_t ci = x->dims[n + 1], cig = w->dims[n], co = w->dims[n + 1], g = a->groups;
  if (g < 1 || ci % g != 0 || co % g != 0 || ci / g != cig)
    return BAD("convolution: %lld input channels, rhs %s and groups=%lld do not fit (rhs dim %d "
               "must be channels/groups, output channels divisible by groups)", (long long)ci,
               ts(w, b2), (long long)g, n);
  kdc_type o = {KDC_DTYPE_F32, n + 2, {0}};
  o.dims[0] = x->dims[0];
  o.dims[n + 1] = co;
  for (int i = 0; i < n; i++) {
    int64_t s = window_size(x->dims[i + 1], a->lhs_dilation.v[i], a->pad_low.v[i],
                            a->pad_high.v[i], w->dims[i], a->rhs_dilation.v[i], a->stride.v[i]);
    if (s < 0)
      return BAD("convolution: spatial dim %d: the window of rhs %s does not fit lhs %s with "
                 "padding [%lld,%lld]", i, ts(w, b2), ts(x, b1), (long long)a->pad_low.v[i],
                 (long long)a->pad_high.v[i]);
    o.dims[i + 1] = s;
  }
  *out = o;
  return NULL;
}

static kdc_status infer_window(kdc_op op, const kdc_type *x, const kdc_attr_window *a,
                               kdc_type *out) {
  char b1[96];
  const char *name = kdc_op_name(op);
  if (x->dtype != KDC_DTYPE_F32) return BAD("%s: operand must be f32, got %s", name, ts(x, b1));
  if ((unsigned)a->kind > KDC_RED_MIN || a->kind == KDC_RED_PROD ||
      (op == KDC_OP_SELECT_AND_SCATTER && a->kind == KDC_RED_SUM))
    return BAD("%s: kind must be %s", name, op == KDC_OP_REDUCE_WINDOW ? "sum, max or min"
                                                                       : "max or min");
  const kdc_dimlist *l[] = {&a->window, &a->stride, &a->pad_low, &a->pad_high, &a->dilation};
  const char *const names[] = {"window", "stride", "pad_low", "pad_high", "dilation"};
  KDC_RETURN_IF_ERROR(check_lists(name, x->rank, l, names, 5));
  KDC_RETURN_IF_ERROR(positive(name, "window", &a->window));
  KDC_RETURN_IF_ERROR(positive(name, "stride", &a->stride));
  KDC_RETURN_IF_ERROR(positive(name, "dilation", &a->dilation));
  kdc_type o = *x;
  for (int i = 0; i < x->rank; i++) {
    o.dims[i] = window_size(x->dims[i], 1, a->pad_low.v[i], a->pad_high.v[i], a->window.v[i],
                            a->dilation.v[i], a->stride.v[i]);
    if (o.dims[i] < 0)
      return BAD("%s: dim %d: window %lld (dilation %lld) does not fit %s padded by [%lld,%lld]",
                 name, i, (long long)a->window.v[i], (long long)a->dilation.v[i], ts(x, b1),
                 (long long)a->pad_low.v[i], (long long)a->pad_high.v[i]);
  }
  *out = o;
  return NULL;
}

kdc_status kdc_ir_infer_window_op(kdc_op op, int n_in, const kdc_type *in, const kdc_attrs *attr,
                                  kdc_type *out) {
  char b1[96], b2[96];
  switch (op) {
  case KDC_OP_CONVOLUTION: return infer_conv(&in[0], &in[1], &attr->conv, out);
  case KDC_OP_REDUCE_WINDOW: return infer_window(op, &in[0], &attr->window, out);
  case KDC_OP_SELECT_AND_SCATTER: {
    kdc_type r;
    KDC_RETURN_IF_ERROR(infer_window(op, &in[0], &attr->window, &r));
    if (!kdc_type_equal(&r, &in[1]))
      return BAD("select_and_scatter: source %s must have the windows' type %s", ts(&in[1], b1),
                 ts(&r, b2));
    *out = in[0];
    return NULL;
  }
  case KDC_OP_GATHER: {
    const kdc_type *t = &in[0], *ids = &in[1];
    if (t->rank < 1 || t->dtype == KDC_DTYPE_BOOL || kdc_dtype_is_half(t->dtype) ||
        !is_int(ids->dtype))
      return BAD("gather: expected an f32 or integer table of rank >= 1 and integer ids, got %s and %s",
                 ts(t, b1), ts(ids, b2));
    if (ids->rank + t->rank - 1 > KDC_MAX_RANK)
      return BAD("gather: result rank exceeds %d", KDC_MAX_RANK);
    kdc_type o = *ids;
    o.dtype = t->dtype;
    for (int i = 1; i < t->rank; i++) o.dims[o.rank++] = t->dims[i];
    *out = o;
    return NULL;
  }
  case KDC_OP_SCATTER_ADD: {
    const kdc_type *ids = &in[0], *u = &in[1];
    bool ok = is_int(ids->dtype) && u->dtype != KDC_DTYPE_BOOL && !kdc_dtype_is_half(u->dtype) &&
              out->dtype == u->dtype &&
              out->rank >= 1 && u->rank == ids->rank + out->rank - 1;
    for (int i = 0; ok && i < ids->rank; i++) ok = u->dims[i] == ids->dims[i];
    for (int i = 1; ok && i < out->rank; i++) ok = u->dims[ids->rank + i - 1] == out->dims[i];
    for (int i = 0; ok && i < out->rank; i++) ok = out->dims[i] >= 0;
    if (!ok)
      return BAD("scatter_add: ids %s and updates %s do not fit the result %s (updates = "
                 "ids dims + result dims after the first)", ts(ids, b1), ts(u, b2),
                 kdc_type_str(out, (char[96]){0}, 96));
    return NULL;
  }
  case KDC_OP_REVERSE: {
    unsigned seen = 0;
    for (int i = 0; i < attr->dims.n; i++) {
      int64_t d = attr->dims.v[i];
      if (d < 0 || d >= in[0].rank || (seen & (1u << d)))
        return BAD("reverse: dims must be distinct and in [0, %d)", in[0].rank);
      seen |= 1u << d;
    }
    if (attr->dims.n < 0 || attr->dims.n > KDC_MAX_RANK) return BAD("reverse: bad dim count");
    *out = in[0];
    return NULL;
  }
  default: return BAD("%s: not a windowed op (%d operands)", kdc_op_name(op), n_in);
  }
}

/* ---- attribute defaults and builders ---------------------------------------- */

static void fill(kdc_dimlist *l, int n, int64_t v) {
  l->n = n;
  for (int i = 0; i < n; i++) l->v[i] = v;
}

void kdc_attr_conv_init(kdc_attr_conv *a, int n) {
  memset(a, 0, sizeof *a);
  fill(&a->stride, n, 1);
  fill(&a->pad_low, n, 0);
  fill(&a->pad_high, n, 0);
  fill(&a->lhs_dilation, n, 1);
  fill(&a->rhs_dilation, n, 1);
  a->groups = 1;
}

void kdc_attr_window_init(kdc_attr_window *a, kdc_reduce_kind kind, int r) {
  memset(a, 0, sizeof *a);
  a->kind = kind;
  fill(&a->window, r, 1);
  fill(&a->stride, r, 1);
  fill(&a->pad_low, r, 0);
  fill(&a->pad_high, r, 0);
  fill(&a->dilation, r, 1);
}

/* Infers the type and appends, with the builder's sticky error. */
static kdc_value_id build(kdc_func *f, kdc_op op, int n_in, const kdc_value_id *in,
                          const kdc_attrs *a, const kdc_type *given) {
  kdc_type tin[2], out;
  for (int i = 0; i < n_in; i++) {
    if (in[i] == KDC_NO_VALUE || in[i] >= f->n_nodes) return KDC_NO_VALUE;
    tin[i] = f->nodes[in[i]].type;
  }
  if (given) out = *given;
  else memset(&out, 0, sizeof out);
  kdc_status st = kdc_ir_infer_window_op(op, n_in, tin, a, &out);
  if (st) {
    if (f->error) kdc_status_free(st);
    else f->error = st;
    return KDC_NO_VALUE;
  }
  return kdc_ir_append(f, op, &out, n_in, in, a);
}

kdc_value_id kdc_ir_convolution(kdc_func *f, kdc_value_id x, kdc_value_id w,
                                const kdc_attr_conv *c) {
  kdc_attrs a;
  memset(&a, 0, sizeof a);
  a.conv = *c;
  kdc_dtype lp = f->lowp; /* a mixed-precision layer: operands and result rounded */
  kdc_value_id in[2] = {kdc_ir_round_to(f, x, lp), kdc_ir_round_to(f, w, lp)};
  return kdc_ir_round_to(f, build(f, KDC_OP_CONVOLUTION, 2, in, &a, NULL), lp);
}

kdc_value_id kdc_ir_reduce_window(kdc_func *f, kdc_value_id x, const kdc_attr_window *w) {
  kdc_attrs a;
  memset(&a, 0, sizeof a);
  a.window = *w;
  return build(f, KDC_OP_REDUCE_WINDOW, 1, &x, &a, NULL);
}

kdc_value_id kdc_ir_select_and_scatter(kdc_func *f, kdc_value_id x, kdc_value_id g,
                                       const kdc_attr_window *w) {
  kdc_attrs a;
  memset(&a, 0, sizeof a);
  a.window = *w;
  kdc_value_id in[2] = {x, g};
  return build(f, KDC_OP_SELECT_AND_SCATTER, 2, in, &a, NULL);
}

kdc_value_id kdc_ir_gather(kdc_func *f, kdc_value_id table, kdc_value_id ids) {
  kdc_attrs a;
  memset(&a, 0, sizeof a);
  kdc_value_id in[2] = {table, ids};
  return build(f, KDC_OP_GATHER, 2, in, &a, NULL);
}

kdc_value_id kdc_ir_scatter_add(kdc_func *f, kdc_value_id ids, kdc_value_id updates,
                                const kdc_type *out) {
  kdc_attrs a;
  memset(&a, 0, sizeof a);
  kdc_value_id in[2] = {ids, updates};
  return build(f, KDC_OP_SCATTER_ADD, 2, in, &a, out);
}

kdc_value_id kdc_ir_reverse(kdc_func *f, kdc_value_id x, int n, const int64_t *dims) {
  kdc_attrs a;
  memset(&a, 0, sizeof a);
  a.dims.n = n;
  for (int i = 0; i < n; i++) a.dims.v[i] = dims[i];
  return build(f, KDC_OP_REVERSE, 1, &x, &a, NULL);
}
