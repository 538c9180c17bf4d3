/*
 * Shape inference: the result type of every op from its operand types and
 * attributes (kdc_ir_infer_type).  The builder, the verifier and
 * passes/infer_shapes all use this one definition.  Errors are
 * KDC_INVALID_INPUT statuses describing the mismatch; callers add the
 * location (value, layer, file).
 */
#include <string.h>

#include "ir/ir.h"

#define BAD(...) KDC_ERR(KDC_INVALID_INPUT, __VA_ARGS__)

static const char *ts(const kdc_type *t, char *buf) { return kdc_type_str(t, buf, 96); }

static bool is_float(kdc_dtype d) { return kdc_dtype_is_float(d); }

/* Checks |dl| holds distinct dims in [0, rank). */
static kdc_status check_dims(const char *what, const kdc_dimlist *dl, int rank) {
  unsigned seen = 0;
  if (dl->n < 0 || dl->n > KDC_MAX_RANK) return BAD("%s: %d dims is out of range", what, dl->n);
  for (int i = 0; i < dl->n; i++) {
    int64_t d = dl->v[i];
    if (d < 0 || d >= rank) return BAD("%s: dim %lld out of range for rank %d", what, (long long)d, rank);
    if (seen & (1u << d)) return BAD("%s: dim %lld repeated", what, (long long)d);
    seen |= 1u << d;
  }
  return NULL;
}

static bool in_list(const kdc_dimlist *dl, int64_t d) {
  for (int i = 0; i < dl->n; i++)
    if (dl->v[i] == d) return true;
  return false;
}

static kdc_status infer_elementwise(kdc_op op, int n_in, const kdc_type *in, kdc_type *out) {
  char b1[96], b2[96];
  unsigned fl = kdc_op_flags(op);
  if (fl & OPF_UN) {
    if (op == KDC_OP_CONVERT) {
      kdc_dtype to = out->dtype;
      *out = in[0];
      out->dtype = to;
      return NULL;
    }
    if (op == KDC_OP_NOT) {
      if (is_float(in[0].dtype)) return BAD("not: operand must be bool or integer, got %s", ts(&in[0], b1));
    } else if (op == KDC_OP_NEG || op == KDC_OP_ABS || op == KDC_OP_SIGN) {
      if (in[0].dtype == KDC_DTYPE_BOOL) return BAD("%s: operand must be numeric, got %s", kdc_op_name(op), ts(&in[0], b1));
    } else if (!is_float(in[0].dtype)) {
      return BAD("%s: operand must be floating point, got %s", kdc_op_name(op), ts(&in[0], b1));
    }
    *out = in[0];
    return NULL;
  }
  int first = (op == KDC_OP_SELECT) ? 1 : 0; /* select's predicate is checked below */
  for (int i = first + 1; i < n_in; i++)
    if (!kdc_type_equal(&in[first], &in[i]))
      return BAD("%s: operand types differ: %s vs %s", kdc_op_name(op), ts(&in[first], b1), ts(&in[i], b2));
  if (op == KDC_OP_SELECT) {
    if (in[0].dtype != KDC_DTYPE_BOOL) return BAD("select: predicate must be bool, got %s", ts(&in[0], b1));
    kdc_type p = in[1];
    p.dtype = KDC_DTYPE_BOOL;
    if (!kdc_type_equal(&p, &in[0]))
      return BAD("select: predicate %s does not match operands %s", ts(&in[0], b1), ts(&in[1], b2));
    *out = in[1];
    return NULL;
  }
  if ((op == KDC_OP_AND || op == KDC_OP_OR) && is_float(in[0].dtype))
    return BAD("%s: operands must be bool or integer, got %s", kdc_op_name(op), ts(&in[0], b1));
  if (op != KDC_OP_AND && op != KDC_OP_OR && op != KDC_OP_COMPARE && in[0].dtype == KDC_DTYPE_BOOL)
    return BAD("%s: operands must be numeric, got %s", kdc_op_name(op), ts(&in[0], b1));
  if (op == KDC_OP_POW && !is_float(in[0].dtype))
    return BAD("pow: operands must be floating point, got %s", ts(&in[0], b1));
  *out = in[0];
  if (op == KDC_OP_COMPARE) out->dtype = KDC_DTYPE_BOOL;
  return NULL;
}

static kdc_status infer_broadcast(const kdc_type *x, const kdc_attrs *a, kdc_type *out) {
  char b1[96], b2[96];
  if (a->dims.n != x->rank)
    return BAD("broadcast_in_dim: %d dims for operand rank %d", a->dims.n, x->rank);
  KDC_RETURN_IF_ERROR(check_dims("broadcast_in_dim", &a->dims, out->rank));
  for (int i = 0; i < x->rank; i++) {
    int64_t r = a->dims.v[i];
    if (i > 0 && r <= a->dims.v[i - 1]) return BAD("broadcast_in_dim: dims must be increasing");
    if (x->dims[i] != 1 && x->dims[i] != out->dims[r])
      return BAD("broadcast_in_dim: cannot broadcast %s to %s (operand dim %d -> %lld)",
                 ts(x, b1), ts(out, b2), i, (long long)r);
  }
  out->dtype = x->dtype;
  return NULL;
}

static kdc_status infer_reduce(const kdc_type *x, const kdc_attrs *a, kdc_type *out) {
  KDC_RETURN_IF_ERROR(check_dims("reduce", &a->reduce.dims, x->rank));
  if (x->dtype == KDC_DTYPE_BOOL) return BAD("reduce: operand must be numeric");
  kdc_type r = {x->dtype, 0, {0}};
  for (int i = 0; i < x->rank; i++)
    if (!in_list(&a->reduce.dims, i)) r.dims[r.rank++] = x->dims[i];
  *out = r;
  return NULL;
}

static kdc_status infer_dot(const kdc_type *l, const kdc_type *r, const kdc_attr_dot *d, kdc_type *out) {
  char b1[96], b2[96];
  if (l->dtype != r->dtype || l->dtype == KDC_DTYPE_BOOL)
    return BAD("dot_general: operand dtypes %s and %s", ts(l, b1), ts(r, b2));
  KDC_RETURN_IF_ERROR(check_dims("dot_general lhs_batch", &d->lhs_batch, l->rank));
  KDC_RETURN_IF_ERROR(check_dims("dot_general rhs_batch", &d->rhs_batch, r->rank));
  KDC_RETURN_IF_ERROR(check_dims("dot_general lhs_contract", &d->lhs_contract, l->rank));
  KDC_RETURN_IF_ERROR(check_dims("dot_general rhs_contract", &d->rhs_contract, r->rank));
  if (d->lhs_batch.n != d->rhs_batch.n || d->lhs_contract.n != d->rhs_contract.n)
    return BAD("dot_general: batch or contracting dim counts differ");
  if (d->bf16_operands != 0 && (d->bf16_operands != 1 || l->dtype != KDC_DTYPE_F32))
    return BAD("dot_general: bf16_operands=%lld: must be 0, or 1 with f32 operands (%s)",
               (long long)d->bf16_operands, ts(l, b1));
  for (int i = 0; i < d->lhs_batch.n; i++) {
    if (in_list(&d->lhs_contract, d->lhs_batch.v[i]) || in_list(&d->rhs_contract, d->rhs_batch.v[i]))
      return BAD("dot_general: a dim is both batch and contracting");
    if (l->dims[d->lhs_batch.v[i]] != r->dims[d->rhs_batch.v[i]])
      return BAD("dot_general: batch dim sizes differ: %s x %s", ts(l, b1), ts(r, b2));
  }
  for (int i = 0; i < d->lhs_contract.n; i++)
    if (l->dims[d->lhs_contract.v[i]] != r->dims[d->rhs_contract.v[i]])
      return BAD("dot_general: contracting dim sizes differ: %s x %s (dims %lld and %lld)", ts(l, b1),
                 ts(r, b2), (long long)d->lhs_contract.v[i], (long long)d->rhs_contract.v[i]);
  kdc_type o = {l->dtype, 0, {0}};
  for (int i = 0; i < d->lhs_batch.n; i++) o.dims[o.rank++] = l->dims[d->lhs_batch.v[i]];
  for (int i = 0; i < l->rank; i++)
    if (!in_list(&d->lhs_batch, i) && !in_list(&d->lhs_contract, i)) o.dims[o.rank++] = l->dims[i];
  for (int i = 0; i < r->rank; i++)
    if (!in_list(&d->rhs_batch, i) && !in_list(&d->rhs_contract, i)) {
      if (o.rank >= KDC_MAX_RANK) return BAD("dot_general: result rank exceeds %d", KDC_MAX_RANK);
      o.dims[o.rank++] = r->dims[i];
    }
  *out = o;
  return NULL;
}

static kdc_status infer_slice(const kdc_type *x, const kdc_attr_slice *s, kdc_type *out) {
  if (s->start.n != x->rank || s->limit.n != x->rank || s->stride.n != x->rank)
    return BAD("slice: start/limit/stride must have %d entries", x->rank);
  *out = *x;
  for (int i = 0; i < x->rank; i++) {
    int64_t b = s->start.v[i], e = s->limit.v[i], st = s->stride.v[i];
    if (b < 0 || b > e || e > x->dims[i] || st < 1)
      return BAD("slice: dim %d: [%lld:%lld:%lld] out of range for size %lld", i, (long long)b,
                 (long long)e, (long long)st, (long long)x->dims[i]);
    out->dims[i] = (e - b + st - 1) / st;
  }
  return NULL;
}

static kdc_status infer_concat(int n_in, const kdc_type *in, int64_t dim, kdc_type *out) {
  char b1[96], b2[96];
  if (n_in < 1) return BAD("concatenate: needs at least one operand");
  if (dim < 0 || dim >= in[0].rank) return BAD("concatenate: dim %lld out of range", (long long)dim);
  kdc_type o = in[0];
  for (int i = 1; i < n_in; i++) {
    bool ok = in[i].rank == o.rank && in[i].dtype == o.dtype;
    for (int d = 0; ok && d < o.rank; d++)
      if (d != dim && in[i].dims[d] != in[0].dims[d]) ok = false;
    if (!ok) return BAD("concatenate along %lld: %s and %s do not match", (long long)dim, ts(&in[0], b1), ts(&in[i], b2));
    o.dims[dim] += in[i].dims[dim];
  }
  *out = o;
  return NULL;
}

static kdc_status infer_pad(const kdc_type *x, const kdc_type *v, const kdc_attr_pad *p, kdc_type *out) {
  if (v->rank != 0 || v->dtype != x->dtype) return BAD("pad: padding value must be a %s scalar", kdc_dtype_name(x->dtype));
  if (p->low.n != x->rank || p->high.n != x->rank || p->interior.n != x->rank)
    return BAD("pad: low/high/interior must have %d entries", x->rank);
  *out = *x;
  for (int i = 0; i < x->rank; i++) {
    int64_t d = x->dims[i], in = p->interior.v[i];
    if (in < 0) return BAD("pad: negative interior padding");
    int64_t r = p->low.v[i] + p->high.v[i] + d + (d > 0 ? (d - 1) * in : 0);
    if (r < 0) return BAD("pad: dim %d would have negative size", i);
    out->dims[i] = r;
  }
  return NULL;
}

/* SPMD ops have a given result type (the group size needs the mesh, which
 * ir/verify.c checks); here only what holds on any mesh: same dtype and
 * rank, and each dim a whole multiple of the other side as the op implies. */
static kdc_status infer_spmd(kdc_op op, const kdc_type *x, const kdc_attr_coll *c, kdc_type *out) {
  char b1[96], b2[96];
  if (out->rank != x->rank) return BAD("%s: result rank %d differs from operand rank %d", kdc_op_name(op), out->rank, x->rank);
  out->dtype = x->dtype;
  int64_t d1 = -1, d2 = -1; /* dims allowed to change: d1 shrinks/grows, d2 the other way */
  switch (op) {
  case KDC_OP_ALL_GATHER: case KDC_OP_REDUCE_SCATTER: case KDC_OP_SHARD_SLICE: d1 = c->dim; break;
  case KDC_OP_ALL_TO_ALL: d1 = c->dim; d2 = c->dim2; break;
  default: break;
  }
  bool has_dim = op == KDC_OP_ALL_GATHER || op == KDC_OP_REDUCE_SCATTER ||
                 op == KDC_OP_SHARD_SLICE || op == KDC_OP_ALL_TO_ALL;
  if (has_dim && (d1 < 0 || d1 >= x->rank))
    return BAD("%s: dim %lld out of range for rank %d", kdc_op_name(op), (long long)d1, x->rank);
  if (op == KDC_OP_ALL_TO_ALL && (d2 < 0 || d2 >= x->rank))
    return BAD("all_to_all: concat dim %lld out of range for rank %d", (long long)d2, x->rank);
  for (int i = 0; i < x->rank; i++) {
    int64_t a = x->dims[i], r = out->dims[i];
    bool ok = a == r;
    if (op == KDC_OP_ALL_TO_ALL && d1 == d2) ok = a == r;
    else if ((i == d1 && op == KDC_OP_ALL_GATHER) || (i == d2 && op == KDC_OP_ALL_TO_ALL))
      ok = a > 0 ? r % a == 0 : r == 0;
    else if (i == d1) ok = r > 0 ? a % r == 0 : a == 0;
    if (!ok) return BAD("%s: result %s does not fit operand %s", kdc_op_name(op), ts(out, b1), ts(x, b2));
  }
  if (op == KDC_OP_ALL_TO_ALL && d1 != d2 && x->dims[d2] > 0 && out->dims[d1] > 0 &&
      x->dims[d1] / out->dims[d1] != out->dims[d2] / x->dims[d2])
    return BAD("all_to_all: split and concat factors differ: %s -> %s", ts(x, b2), ts(out, b1));
  return NULL;
}

kdc_status kdc_ir_infer_type(kdc_op op, int n_in, const kdc_type *in, const kdc_attrs *attr,
                             kdc_type *out) {
  char b1[96], b2[96];
  int ar = kdc_op_arity(op);
  if ((ar >= 0 && n_in != ar) || (ar < 0 && n_in < 1))
    return BAD("%s: takes %d operands, got %d", kdc_op_name(op), ar, n_in);
  if (out->rank < 0 || out->rank > KDC_MAX_RANK) return BAD("rank %d exceeds %d", out->rank, KDC_MAX_RANK);
  for (int i = 0; i < out->rank; i++)
    if (out->dims[i] < 0 && (op == KDC_OP_PARAMETER || op == KDC_OP_CONSTANT || op == KDC_OP_IOTA ||
                             op == KDC_OP_BROADCAST || op == KDC_OP_RESHAPE ||
                             op == KDC_OP_RNG_UNIFORM || op == KDC_OP_SCAN ||
                             (kdc_op_flags(op) & OPF_COLL)))
      return BAD("%s: negative dim in %s", kdc_op_name(op), ts(out, b1));
  switch (op) {
  case KDC_OP_PARAMETER:
  case KDC_OP_CONSTANT:
    return NULL;
  case KDC_OP_IOTA:
    if (attr->dim < 0 || attr->dim >= out->rank) return BAD("iota: dim %lld out of range", (long long)attr->dim);
    if (out->dtype == KDC_DTYPE_BOOL) return BAD("iota: result must be numeric");
    return NULL;
  case KDC_OP_BROADCAST:
    return infer_broadcast(&in[0], attr, out);
  case KDC_OP_RESHAPE:
    if (kdc_type_numel(out) != kdc_type_numel(&in[0]))
      return BAD("reshape: %s has a different element count than %s", ts(&in[0], b1), ts(out, b2));
    out->dtype = in[0].dtype;
    return NULL;
  case KDC_OP_TRANSPOSE: {
    if (attr->dims.n != in[0].rank) return BAD("transpose: permutation of %d for rank %d", attr->dims.n, in[0].rank);
    KDC_RETURN_IF_ERROR(check_dims("transpose", &attr->dims, in[0].rank));
    kdc_type o = in[0];
    for (int i = 0; i < o.rank; i++) o.dims[i] = in[0].dims[attr->dims.v[i]];
    *out = o;
    return NULL;
  }
  case KDC_OP_SLICE:
    return infer_slice(&in[0], &attr->slice, out);
  case KDC_OP_CONCAT:
    return infer_concat(n_in, in, attr->dim, out);
  case KDC_OP_PAD:
    return infer_pad(&in[0], &in[1], &attr->pad, out);
  case KDC_OP_REDUCE:
    return infer_reduce(&in[0], attr, out);
  case KDC_OP_DOT:
    return infer_dot(&in[0], &in[1], &attr->dot, out);
  case KDC_OP_SHARDING_CONSTRAINT:
  case KDC_OP_ALL_REDUCE:
  case KDC_OP_COLLECTIVE_PERMUTE:
    *out = in[0];
    return NULL;
  case KDC_OP_ALL_GATHER:
  case KDC_OP_REDUCE_SCATTER:
  case KDC_OP_ALL_TO_ALL:
  case KDC_OP_SHARD_SLICE:
    return infer_spmd(op, &in[0], &attr->coll, out);
  case KDC_OP_RNG_UNIFORM:
    if (in[0].rank != 0 || (in[0].dtype != KDC_DTYPE_I32 && in[0].dtype != KDC_DTYPE_I64))
      return BAD("rng_uniform: the step must be an integer scalar, got %s", ts(&in[0], b1));
    if (out->dtype != KDC_DTYPE_F32)
      return BAD("rng_uniform: the result must be f32, got %s", ts(out, b2));
    return NULL;
  case KDC_OP_CONVOLUTION:
  case KDC_OP_REDUCE_WINDOW:
  case KDC_OP_SELECT_AND_SCATTER:
  case KDC_OP_GATHER:
  case KDC_OP_SCATTER_ADD:
  case KDC_OP_REVERSE:
    return kdc_ir_infer_window_op(op, n_in, in, attr, out); /* ir/window.c */
  case KDC_OP_SCAN: {
    /* The result type is given; what needs the body is in kdc_ir_scan_check. */
    const kdc_attr_scan *sc = &attr->scan;
    if (sc->length < 1) return BAD("scan: length %lld must be positive", (long long)sc->length);
    if (sc->n_carry < 0 || sc->n_xs < 0 || sc->n_carry + sc->n_xs > n_in)
      return BAD("scan: %lld carries and %lld sequences do not fit %d operands",
                 (long long)sc->n_carry, (long long)sc->n_xs, n_in);
    for (int64_t i = sc->n_carry; i < sc->n_carry + sc->n_xs; i++)
      if (in[i].rank < 1 || in[i].dims[0] != sc->length)
        return BAD("scan: sequence operand %lld is %s, not [%lld, ...]", (long long)i,
                   ts(&in[i], b1), (long long)sc->length);
    if (out->rank < 1 || out->dims[0] != sc->length)
      return BAD("scan: result %s is not [%lld, ...]", ts(out, b2), (long long)sc->length);
    return NULL;
  }
  default:
    if (kdc_op_flags(op) & OPF_EW) return infer_elementwise(op, n_in, in, out);
    return BAD("%s: no shape rule", kdc_op_name(op));
  }
}
