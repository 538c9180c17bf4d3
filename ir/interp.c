/*
 * The reference interpreter (kdc_ir_interpret): the oracle every backend and
 * every sharded run is compared against, so it is written to be obviously
 * right, not fast.  It evaluates the unpartitioned program on the host, node
 * by node in id order, one malloc'd buffer per value, with plain loops over
 * row-major indices.  Shardings, groups and memory offsets are ignored.
 *
 * Semantics (ops.def gives the one-line version):
 *   - f32 math is done in float, in program order; exp, expm1, tanh and
 *     logistic are kdc's own (ir/math.c), the other transcendentals libm's
 *     f32 functions (logf, log1pf, erff, powf); subnormal inputs and results are flushed to
 *     (signed) zero, as the runtime does (kdc/fpenv.h).  Sums (reduce, dot_general) accumulate in a float
 *     in increasing index order: reduce over the operand's row-major order,
 *     dot over the contracting dims row-major in lhs_contract order.  The
 *     file is compiled with fp-contract off, so a*b+c is never fused.
 *   - max/min propagate NaN (the first NaN operand); max(-0,+0) = +0,
 *     min(-0,+0) = -0.  round is half to even.  sign(±0) = ±0, sign(NaN) = NaN.
 *   - Integers wrap (two's complement) on add, sub, mul, neg, abs, sums.
 *     Integer div truncates toward zero; x/0 = -1 and INT_MIN/-1 = INT_MIN
 *     (XLA's choice, so no input traps).
 *   - bf16 and f16 are storage types (ir.h): every op reads them widened to
 *     f32, computes as above and rounds its result to nearest even when it
 *     stores it; reduce and dot_general accumulate in f32 and round once.
 *     convert between float types rounds the same way.
 *   - convert: f32 -> int truncates toward zero, saturates at the int's range,
 *     NaN -> 0; anything -> bool is x != 0; bool -> anything is 0 or 1;
 *     int -> int wraps.
 *   - compare returns bool; NaN compares false except ne.
 *   - broadcast_in_dim: operand dim k maps to result dim dims[k]; an operand
 *     dim of size 1 broadcasts.  pad: low/high may be negative (cropping),
 *     interior >= 0.  reduce of an empty set gives the identity (0, 1, -inf
 *     or the int minimum for max, +inf or the int maximum for min).
 *   - sharding_constraint is the identity.  The other SPMD ops (collectives,
 *     shard_slice) are identities on a 1-device mesh and an error otherwise:
 *     a partitioned function runs under kdc_ir_interpret_spmd
 *     (ir/interp_spmd.c), which reuses this file's node semantics through
 *     kdc_ir_interp_node.
 * Every node is type-checked with kdc_ir_infer_type before it runs, so a
 * malformed function is an error, never an out-of-bounds access.
 */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("fp-contract=off")
#elif defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ir/ir.h"
#include "kdc/fpenv.h"

typedef struct interp {
  const kdc_func *f;
  void **vals;  /* one buffer per node */
  bool *owned;  /* vals[i] was malloc'd here (parameters alias their args) */
} interp;

/* ---- element helpers ------------------------------------------------------- */

static int64_t ld_int(const void *p, kdc_dtype d, int64_t i) {
  switch (d) {
  case KDC_DTYPE_I32: return ((const int32_t *)p)[i];
  case KDC_DTYPE_I64: return ((const int64_t *)p)[i];
  case KDC_DTYPE_BOOL: return ((const uint8_t *)p)[i] != 0;
  default: return (int64_t)kdc_float_load(p, d, i);
  }
}

/* Stores |v| with two's-complement wrap (i32) or as 0/1 (bool). */
static void st_int(void *p, kdc_dtype d, int64_t i, int64_t v) {
  switch (d) {
  case KDC_DTYPE_I32: ((int32_t *)p)[i] = (int32_t)(uint32_t)(uint64_t)v; break;
  case KDC_DTYPE_I64: ((int64_t *)p)[i] = v; break;
  case KDC_DTYPE_BOOL: ((uint8_t *)p)[i] = v != 0; break;
  default: kdc_float_store(p, d, i, (float)v); break;
  }
}

static int64_t wrap_add(int64_t a, int64_t b) { return (int64_t)((uint64_t)a + (uint64_t)b); }
static int64_t wrap_mul(int64_t a, int64_t b) { return (int64_t)((uint64_t)a * (uint64_t)b); }

static float max_f(float a, float b) {
  if (isnan(a)) return a;
  if (isnan(b)) return b;
  if (a == b) return signbit(a) ? b : a;
  return a > b ? a : b;
}

static float min_f(float a, float b) {
  if (isnan(a)) return a;
  if (isnan(b)) return b;
  if (a == b) return signbit(a) ? a : b;
  return a < b ? a : b;
}

/* Half to even; a zero result keeps x's sign (round(-0.4) = -0, as numpy). */
static float round_half_even(float x) {
  float fl = floorf(x), d = x - fl; /* exact for floats */
  float r = d > 0.5f ? fl + 1.0f : d < 0.5f ? fl : fmodf(fl, 2.0f) == 0.0f ? fl : fl + 1.0f;
  return r == 0.0f ? copysignf(0.0f, x) : r;
}

static bool un_f32(kdc_op op, float x, float *out) {
  switch (op) {
  case KDC_OP_NEG: *out = -x; return true;
  case KDC_OP_ABS: *out = fabsf(x); return true;
  case KDC_OP_EXP: *out = kdc_math_expf(x); return true;
  case KDC_OP_LOG: *out = logf(x); return true;
  case KDC_OP_LOG1P: *out = log1pf(x); return true;
  case KDC_OP_EXPM1: *out = kdc_math_expm1f(x); return true;
  case KDC_OP_TANH: *out = kdc_math_tanhf(x); return true;
  case KDC_OP_LOGISTIC: *out = kdc_math_logisticf(x); return true;
  case KDC_OP_SQRT: *out = sqrtf(x); return true;
  case KDC_OP_RSQRT: *out = 1.0f / sqrtf(x); return true;
  case KDC_OP_ERF: *out = erff(x); return true;
  case KDC_OP_SIGN: *out = isnan(x) ? x : x > 0 ? 1.0f : x < 0 ? -1.0f : x; return true;
  case KDC_OP_FLOOR: *out = floorf(x); return true;
  case KDC_OP_CEIL: *out = ceilf(x); return true;
  case KDC_OP_ROUND: *out = round_half_even(x); return true;
  case KDC_OP_STOP_GRADIENT: *out = x; return true;
  default: return false;
  }
}

static bool un_int(kdc_op op, kdc_dtype d, int64_t x, int64_t *out) {
  switch (op) {
  case KDC_OP_NEG: *out = (int64_t)(0 - (uint64_t)x); return true;
  case KDC_OP_ABS: *out = x < 0 ? (int64_t)(0 - (uint64_t)x) : x; return true;
  case KDC_OP_SIGN: *out = (x > 0) - (x < 0); return true;
  case KDC_OP_NOT: *out = d == KDC_DTYPE_BOOL ? !x : ~x; return true;
  case KDC_OP_FLOOR: case KDC_OP_CEIL: case KDC_OP_ROUND: *out = x; return true;
  default: return false;
  }
}

static bool bin_f32(kdc_op op, float a, float b, float *out) {
  switch (op) {
  case KDC_OP_ADD: *out = a + b; return true;
  case KDC_OP_SUB: *out = a - b; return true;
  case KDC_OP_MUL: *out = a * b; return true;
  case KDC_OP_DIV: *out = a / b; return true;
  case KDC_OP_MAX: *out = max_f(a, b); return true;
  case KDC_OP_MIN: *out = min_f(a, b); return true;
  case KDC_OP_POW: *out = powf(a, b); return true;
  default: return false;
  }
}

static bool bin_int(kdc_op op, int64_t a, int64_t b, int64_t *out) {
  switch (op) {
  case KDC_OP_ADD: *out = wrap_add(a, b); return true;
  case KDC_OP_SUB: *out = (int64_t)((uint64_t)a - (uint64_t)b); return true;
  case KDC_OP_MUL: *out = wrap_mul(a, b); return true;
  case KDC_OP_DIV: *out = b == 0 ? -1 : (b == -1 ? (int64_t)(0 - (uint64_t)a) : a / b); return true;
  case KDC_OP_MAX: *out = a > b ? a : b; return true;
  case KDC_OP_MIN: *out = a < b ? a : b; return true;
  case KDC_OP_AND: *out = a & b; return true;
  case KDC_OP_OR: *out = a | b; return true;
  default: return false;
  }
}

static bool compare(kdc_cmp c, int s) { /* s: -1, 0, 1, or 2 = unordered */
  switch (c) {
  case KDC_CMP_EQ: return s == 0;
  case KDC_CMP_NE: return s != 0;
  case KDC_CMP_LT: return s == -1;
  case KDC_CMP_LE: return s == -1 || s == 0;
  case KDC_CMP_GT: return s == 1;
  case KDC_CMP_GE: return s == 1 || s == 0;
  }
  return false;
}

/* f32 -> integer: truncate toward zero, saturate, NaN -> 0. */
static int64_t f32_to_int(float x, kdc_dtype d) {
  double lo = d == KDC_DTYPE_I32 ? (double)INT32_MIN : (double)INT64_MIN;
  double hi = d == KDC_DTYPE_I32 ? (double)INT32_MAX : (double)INT64_MAX;
  if (isnan(x)) return 0;
  if ((double)x <= lo) return d == KDC_DTYPE_I32 ? INT32_MIN : INT64_MIN;
  if ((double)x >= hi) return d == KDC_DTYPE_I32 ? INT32_MAX : INT64_MAX;
  return (int64_t)x;
}

/* ---- index helpers --------------------------------------------------------- */

static void unravel(int64_t lin, const kdc_type *t, int64_t *idx) {
  for (int d = t->rank - 1; d >= 0; d--) {
    idx[d] = t->dims[d] ? lin % t->dims[d] : 0;
    lin = t->dims[d] ? lin / t->dims[d] : 0;
  }
}

static int64_t ravel(const int64_t *idx, const kdc_type *t) {
  int64_t lin = 0;
  for (int d = 0; d < t->rank; d++) lin = lin * t->dims[d] + idx[d];
  return lin;
}

static void copy_elem(void *dst, int64_t di, const void *src, int64_t si, size_t es) {
  memcpy((char *)dst + (size_t)di * es, (const char *)src + (size_t)si * es, es);
}

/* ---- ops --------------------------------------------------------------------- */

static kdc_status run_elementwise(interp *in, const kdc_node *n, void *out, int64_t numel) {
  const kdc_func *f = in->f;
  kdc_dtype od = n->type.dtype, xd = f->nodes[n->in[0]].type.dtype;
  const void *x = in->vals[n->in[0]], *y = n->n_in > 1 ? in->vals[n->in[1]] : NULL;
  size_t es = kdc_dtype_size(od);
  for (int64_t i = 0; i < numel; i++) {
    bool ok = true;
    if (n->op == KDC_OP_SELECT) {
      copy_elem(out, i, ((const uint8_t *)x)[i] ? y : in->vals[n->in[2]], i, es);
    } else if (n->op == KDC_OP_CONVERT) {
      bool xf = kdc_dtype_is_float(xd), of = kdc_dtype_is_float(od);
      if (xf && of) kdc_float_store(out, od, i, kdc_float_load(x, xd, i));
      else if (xf && od == KDC_DTYPE_BOOL) st_int(out, od, i, kdc_float_load(x, xd, i) != 0);
      else if (xf) st_int(out, od, i, f32_to_int(kdc_float_load(x, xd, i), od));
      else if (of) kdc_float_store(out, od, i, (float)ld_int(x, xd, i));
      else st_int(out, od, i, ld_int(x, xd, i));
    } else if (n->op == KDC_OP_COMPARE && kdc_dtype_is_float(xd)) {
      float a = kdc_float_load(x, xd, i), b = kdc_float_load(y, xd, i);
      int s = a < b ? -1 : a > b ? 1 : a == b ? 0 : 2;
      st_int(out, od, i, compare(n->attr.cmp, s));
    } else if (n->op == KDC_OP_COMPARE) {
      int64_t a = ld_int(x, xd, i), b = ld_int(y, xd, i);
      st_int(out, od, i, compare(n->attr.cmp, a < b ? -1 : a > b));
    } else if (kdc_dtype_is_float(xd)) {
      float o = 0, a = kdc_float_load(x, xd, i);
      ok = n->n_in == 1 ? un_f32(n->op, a, &o) : bin_f32(n->op, a, kdc_float_load(y, xd, i), &o);
      kdc_float_store(out, od, i, o);
    } else {
      int64_t r, a = ld_int(x, xd, i);
      ok = n->n_in == 1 ? un_int(n->op, xd, a, &r) : bin_int(n->op, a, ld_int(y, xd, i), &r);
      if (ok) st_int(out, od, i, r);
    }
    if (!ok)
      return KDC_ERR(KDC_UNSUPPORTED, "interpreter: %s on %s", kdc_op_name(n->op),
                     kdc_dtype_name(xd));
  }
  return NULL;
}

static void run_broadcast(interp *in, const kdc_node *n, void *out, int64_t numel) {
  const kdc_type *xt = &in->f->nodes[n->in[0]].type;
  int64_t ridx[KDC_MAX_RANK], xidx[KDC_MAX_RANK];
  for (int64_t i = 0; i < numel; i++) {
    unravel(i, &n->type, ridx);
    for (int k = 0; k < xt->rank; k++) xidx[k] = xt->dims[k] == 1 ? 0 : ridx[n->attr.dims.v[k]];
    copy_elem(out, i, in->vals[n->in[0]], ravel(xidx, xt), kdc_dtype_size(xt->dtype));
  }
}

/* transpose and slice: result index -> operand index. */
static void run_gather_like(interp *in, const kdc_node *n, void *out, int64_t numel) {
  const kdc_type *xt = &in->f->nodes[n->in[0]].type;
  const kdc_attr_slice *s = &n->attr.slice;
  int64_t ridx[KDC_MAX_RANK], xidx[KDC_MAX_RANK];
  for (int64_t i = 0; i < numel; i++) {
    unravel(i, &n->type, ridx);
    for (int d = 0; d < xt->rank; d++) {
      if (n->op == KDC_OP_TRANSPOSE) xidx[n->attr.dims.v[d]] = ridx[d];
      else xidx[d] = s->start.v[d] + ridx[d] * s->stride.v[d];
    }
    copy_elem(out, i, in->vals[n->in[0]], ravel(xidx, xt), kdc_dtype_size(xt->dtype));
  }
}

static void run_concat(interp *in, const kdc_node *n, void *out) {
  int64_t off = 0, idx[KDC_MAX_RANK];
  size_t es = kdc_dtype_size(n->type.dtype);
  for (int k = 0; k < n->n_in; k++) {
    const kdc_type *xt = &in->f->nodes[n->in[k]].type;
    int64_t numel = kdc_type_numel(xt);
    for (int64_t i = 0; i < numel; i++) {
      unravel(i, xt, idx);
      idx[n->attr.dim] += off;
      copy_elem(out, ravel(idx, &n->type), in->vals[n->in[k]], i, es);
    }
    off += xt->dims[n->attr.dim];
  }
}

static void run_pad(interp *in, const kdc_node *n, void *out, int64_t numel) {
  const kdc_type *xt = &in->f->nodes[n->in[0]].type;
  const kdc_attr_pad *p = &n->attr.pad;
  size_t es = kdc_dtype_size(n->type.dtype);
  int64_t xidx[KDC_MAX_RANK], ridx[KDC_MAX_RANK];
  for (int64_t i = 0; i < numel; i++) copy_elem(out, i, in->vals[n->in[1]], 0, es);
  int64_t xn = kdc_type_numel(xt);
  for (int64_t i = 0; i < xn; i++) {
    unravel(i, xt, xidx);
    bool inside = true;
    for (int d = 0; d < xt->rank; d++) {
      ridx[d] = p->low.v[d] + xidx[d] * (p->interior.v[d] + 1);
      if (ridx[d] < 0 || ridx[d] >= n->type.dims[d]) inside = false;
    }
    if (inside) copy_elem(out, ravel(ridx, &n->type), in->vals[n->in[0]], i, es);
  }
}

/* The identity of reduction |k| (the result over an empty set). */
static float red_init_f32(kdc_reduce_kind k) {
  return k == KDC_RED_SUM ? 0.0f : k == KDC_RED_PROD ? 1.0f
         : k == KDC_RED_MAX ? -INFINITY : INFINITY;
}

static int64_t red_init_int(kdc_reduce_kind k, kdc_dtype d) {
  if (k == KDC_RED_SUM || k == KDC_RED_PROD) return k == KDC_RED_PROD;
  if (k == KDC_RED_MAX) return d == KDC_DTYPE_I32 ? INT32_MIN : INT64_MIN;
  return d == KDC_DTYPE_I32 ? INT32_MAX : INT64_MAX;
}

static float red_f32(kdc_reduce_kind k, float acc, float v) {
  return k == KDC_RED_SUM ? acc + v : k == KDC_RED_PROD ? acc * v
         : k == KDC_RED_MAX ? max_f(acc, v) : min_f(acc, v);
}

static int64_t red_int(kdc_reduce_kind k, int64_t acc, int64_t v) {
  return k == KDC_RED_SUM ? wrap_add(acc, v) : k == KDC_RED_PROD ? wrap_mul(acc, v)
         : k == KDC_RED_MAX ? (v > acc ? v : acc) : (v < acc ? v : acc);
}

/* One pass over the operand in row-major order, so every result element
 * accumulates its inputs in increasing index order. */
static kdc_status run_reduce(interp *in, const kdc_node *n, void *out, int64_t numel) {
  const kdc_type *xt = &in->f->nodes[n->in[0]].type;
  kdc_reduce_kind kind = n->attr.reduce.kind;
  kdc_dtype d = xt->dtype;
  const void *x = in->vals[n->in[0]];
  bool keep[KDC_MAX_RANK];
  for (int k = 0; k < xt->rank; k++) keep[k] = true;
  for (int k = 0; k < n->attr.reduce.dims.n; k++) keep[n->attr.reduce.dims.v[k]] = false;
  float *acc = NULL; /* bf16/f16: accumulate in f32, round once at the end */
  if (kdc_dtype_is_half(d) && !(acc = malloc(sizeof(float) * (size_t)(numel ? numel : 1))))
    return KDC_ERR(KDC_OUT_OF_MEMORY, "interpreter: reduce of %lld elements", (long long)numel);
  float *fo = acc ? acc : out;
  for (int64_t i = 0; i < numel; i++) {
    if (kdc_dtype_is_float(d)) fo[i] = red_init_f32(kind);
    else st_int(out, d, i, red_init_int(kind, d));
  }
  int64_t xidx[KDC_MAX_RANK], ridx[KDC_MAX_RANK], xn = kdc_type_numel(xt);
  for (int64_t i = 0; i < xn; i++) {
    unravel(i, xt, xidx);
    int r = 0;
    for (int k = 0; k < xt->rank; k++)
      if (keep[k]) ridx[r++] = xidx[k];
    int64_t o = ravel(ridx, &n->type);
    if (kdc_dtype_is_float(d))
      fo[o] = red_f32(kind, fo[o], kdc_float_load(x, d, i));
    else
      st_int(out, d, o, red_int(kind, ld_int(out, d, o), ld_int(x, d, i)));
  }
  for (int64_t i = 0; acc && i < numel; i++) kdc_float_store(out, d, i, acc[i]);
  free(acc);
  return NULL;
}

static bool in_list(const kdc_dimlist *l, int64_t d) {
  for (int i = 0; i < l->n; i++)
    if (l->v[i] == d) return true;
  return false;
}

/* dot_general: result dims = batch, lhs free, rhs free.  The contraction
 * offsets are tabulated once (row-major over the contracting dims). */
static kdc_status run_dot(interp *in, const kdc_node *n, void *out, int64_t numel) {
  const kdc_attr_dot *a = &n->attr.dot;
  const kdc_type *lt = &in->f->nodes[n->in[0]].type, *rt = &in->f->nodes[n->in[1]].type;
  const void *L = in->vals[n->in[0]], *R = in->vals[n->in[1]];
  int64_t ls[KDC_MAX_RANK], rs[KDC_MAX_RANK], cidx[KDC_MAX_RANK], ridx[KDC_MAX_RANK];
  kdc_type ct = {KDC_DTYPE_F32, a->lhs_contract.n, {0}};
  kdc_type_strides(lt, ls);
  kdc_type_strides(rt, rs);
  for (int k = 0; k < ct.rank; k++) ct.dims[k] = lt->dims[a->lhs_contract.v[k]];
  int64_t nc = kdc_type_numel(&ct);
  int64_t *coff = malloc(sizeof(int64_t) * 2 * (size_t)(nc ? nc : 1));
  if (!coff)
    return KDC_ERR(KDC_OUT_OF_MEMORY, "interpreter: dot_general over %lld terms", (long long)nc);
  for (int64_t c = 0; c < nc; c++) {
    unravel(c, &ct, cidx);
    coff[2 * c] = coff[2 * c + 1] = 0;
    for (int k = 0; k < ct.rank; k++) {
      coff[2 * c] += cidx[k] * ls[a->lhs_contract.v[k]];
      coff[2 * c + 1] += cidx[k] * rs[a->rhs_contract.v[k]];
    }
  }
  for (int64_t i = 0; i < numel; i++) {
    unravel(i, &n->type, ridx);
    int64_t lo = 0, ro = 0;
    int r = 0;
    for (int k = 0; k < a->lhs_batch.n; k++, r++) {
      lo += ridx[r] * ls[a->lhs_batch.v[k]];
      ro += ridx[r] * rs[a->rhs_batch.v[k]];
    }
    for (int d = 0; d < lt->rank; d++)
      if (!in_list(&a->lhs_batch, d) && !in_list(&a->lhs_contract, d)) lo += ridx[r++] * ls[d];
    for (int d = 0; d < rt->rank; d++)
      if (!in_list(&a->rhs_batch, d) && !in_list(&a->rhs_contract, d)) ro += ridx[r++] * rs[d];
    if (kdc_dtype_is_float(n->type.dtype)) { /* f32 accumulation, rounded once */
      float acc = 0.0f;
      kdc_dtype od = a->bf16_operands ? KDC_DTYPE_BF16 : KDC_DTYPE_F32;
      for (int64_t c = 0; c < nc; c++)
        acc += kdc_float_round(od, kdc_float_load(L, lt->dtype, lo + coff[2 * c])) *
               kdc_float_round(od, kdc_float_load(R, rt->dtype, ro + coff[2 * c + 1]));
      kdc_float_store(out, n->type.dtype, i, acc);
    } else {
      int64_t acc = 0;
      for (int64_t c = 0; c < nc; c++)
        acc = wrap_add(acc, wrap_mul(ld_int(L, lt->dtype, lo + coff[2 * c]),
                                     ld_int(R, rt->dtype, ro + coff[2 * c + 1])));
      st_int(out, n->type.dtype, i, acc);
    }
  }
  free(coff);
  return NULL;
}

/* ---- rng_uniform: Philox-4x32-10 ---------------------------------------------- */

void kdc_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]) {
  uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3], k0 = key[0], k1 = key[1];
  for (int r = 0; r < 10; r++) {
    if (r > 0) { /* key schedule: bump before rounds 2..10 */
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
    }
    uint64_t p0 = (uint64_t)0xD2511F53u * c0, p1 = (uint64_t)0xCD9E8D57u * c2;
    uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0, n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
    c1 = (uint32_t)p1;
    c3 = (uint32_t)p0;
    c0 = n0;
    c2 = n2;
  }
  out[0] = c0;
  out[1] = c1;
  out[2] = c2;
  out[3] = c3;
}

float kdc_rng_uniform_at(int64_t seed, int64_t step, int64_t index) {
  uint64_t i = (uint64_t)index, s = (uint64_t)step, k = (uint64_t)seed;
  uint32_t ctr[4] = {(uint32_t)i, (uint32_t)(i >> 32), (uint32_t)s, (uint32_t)(s >> 32)};
  uint32_t key[2] = {(uint32_t)k, (uint32_t)(k >> 32)}, out[4];
  kdc_philox4x32_10(ctr, key, out);
  return (float)(out[0] >> 8) * 0x1p-24f;
}

/* ---- driver -------------------------------------------------------------------- */

static kdc_status alloc_value(const kdc_type *t, void **out) {
  int64_t numel = 1;
  size_t bytes;
  for (int d = 0; d < t->rank; d++)
    if (__builtin_mul_overflow(numel, t->dims[d], &numel)) numel = -1;
  if (numel < 0 || __builtin_mul_overflow((size_t)numel, kdc_dtype_size(t->dtype), &bytes) ||
      !(*out = malloc(bytes ? bytes : 1))) {
    char b[160];
    return KDC_ERR(KDC_OUT_OF_MEMORY, "interpreter: cannot allocate %s",
                   kdc_type_str(t, b, sizeof b));
  }
  return NULL;
}

/* Binds parameter |n| to its argument or, for weights, the module's data. */
static kdc_status bind_param(interp *in, const kdc_node *n, const kdc_tensor *args, size_t n_args,
                             void **out) {
  const kdc_attr_param *p = &n->attr.param;
  const char *name = p->name ? p->name : "";
  const kdc_type *t = NULL;
  char b1[160], b2[160];
  if (p->index >= 0 && (size_t)p->index < n_args && args[p->index].data) {
    t = &args[p->index].type;
    *out = args[p->index].data;
  } else if (p->kind == KDC_PARAM_WEIGHT) {
    const kdc_weight *w = kdc_ir_module_find_weight(in->f->module, name);
    if (!w || !w->data)
      return KDC_ERR(KDC_INVALID_INPUT, "interpreter: no data for weight \"%s\" (parameter %d)",
                     name, p->index);
    t = &w->type;
    *out = w->data;
  } else {
    return KDC_ERR(KDC_INVALID_INPUT, "interpreter: no argument for parameter %d \"%s\"", p->index,
                   name);
  }
  if (!kdc_type_equal(t, &n->type))
    return KDC_ERR(KDC_INVALID_INPUT, "interpreter: parameter %d \"%s\" is %s, got %s", p->index,
                   name, kdc_type_str(&n->type, b1, sizeof b1), kdc_type_str(t, b2, sizeof b2));
  return NULL;
}

/* Operands defined earlier and the type kdc_ir_infer_type gives. */
static kdc_status check_node(const kdc_func *f, kdc_value_id v) {
  const kdc_node *n = &f->nodes[v];
  kdc_type tin[8], out = n->type;
  memset(tin, 0, sizeof tin); /* quiets a false -Wmaybe-uninitialized for n_in == 0 */
  if ((unsigned)n->op >= KDC_OP_COUNT || n->n_in < 0)
    return KDC_ERR(KDC_INVALID_INPUT, "interpreter: %%%u: bad op or operand count", v);
  for (int i = 0; i < n->n_in; i++)
    if (n->in[i] >= v) return KDC_ERR(KDC_INVALID_INPUT, "interpreter: %%%u: operand after use", v);
  kdc_type *ts = n->n_in <= 8 ? tin : kdc_xmalloc(sizeof(kdc_type) * (size_t)n->n_in);
  for (int i = 0; i < n->n_in; i++) ts[i] = f->nodes[n->in[i]].type;
  kdc_status st = kdc_ir_infer_type(n->op, n->n_in, ts, &n->attr, &out);
  if (ts != tin) free(ts);
  if (!st && !kdc_type_equal(&out, &n->type))
    st = KDC_ERR(KDC_INVALID_INPUT, "result type differs from the inferred type");
  if (n->op == KDC_OP_CONSTANT && !n->attr.constant.data && !st)
    st = KDC_ERR(KDC_INVALID_INPUT, "constant without data");
  return st ? kdc_status_annotate(st, "interpreter: func @%s: %%%u = %s", f->name, v,
                                  kdc_op_name(n->op))
            : NULL;
}

/* Evaluates non-parameter node |v| into |out| (its type's size). */
static kdc_status eval_node(interp *in, kdc_value_id v, void *out) {
  const kdc_node *n = &in->f->nodes[v];
  int64_t numel = kdc_type_numel(&n->type);
  size_t es = kdc_dtype_size(n->type.dtype);
  int64_t idx[KDC_MAX_RANK];
  switch (n->op) {
  case KDC_OP_CONSTANT:
    for (int64_t i = 0; i < numel; i++)
      copy_elem(out, i, n->attr.constant.data, n->attr.constant.splat ? 0 : i, es);
    return NULL;
  case KDC_OP_IOTA:
    for (int64_t i = 0; i < numel; i++) {
      unravel(i, &n->type, idx);
      if (kdc_dtype_is_float(n->type.dtype))
        kdc_float_store(out, n->type.dtype, i, (float)idx[n->attr.dim]);
      else st_int(out, n->type.dtype, i, idx[n->attr.dim]);
    }
    return NULL;
  case KDC_OP_BROADCAST: run_broadcast(in, n, out, numel); return NULL;
  case KDC_OP_RESHAPE:
  case KDC_OP_SHARDING_CONSTRAINT: memcpy(out, in->vals[n->in[0]], (size_t)numel * es); return NULL;
  case KDC_OP_TRANSPOSE:
  case KDC_OP_SLICE: run_gather_like(in, n, out, numel); return NULL;
  case KDC_OP_CONCAT: run_concat(in, n, out); return NULL;
  case KDC_OP_PAD: run_pad(in, n, out, numel); return NULL;
  case KDC_OP_REDUCE: return run_reduce(in, n, out, numel);
  case KDC_OP_DOT: return run_dot(in, n, out, numel);
  case KDC_OP_CONVOLUTION: case KDC_OP_REDUCE_WINDOW: case KDC_OP_SELECT_AND_SCATTER:
  case KDC_OP_GATHER: case KDC_OP_SCATTER_ADD: case KDC_OP_REVERSE:
    return kdc_ir_interp_window(in->f, v, in->vals, out); /* ir/interp_window.c */
  case KDC_OP_SCAN: return kdc_ir_interp_scan(in->f, v, in->vals, out); /* ir/scan.c */
  case KDC_OP_RNG_UNIFORM: {
    const kdc_node *s = &in->f->nodes[n->in[0]];
    int64_t step = ld_int(in->vals[n->in[0]], s->type.dtype, 0);
    for (int64_t i = 0; i < numel; i++)
      ((float *)out)[i] = kdc_rng_uniform_at(n->attr.seed, step, i);
    return NULL;
  }
  default:
    if (kdc_op_flags(n->op) & OPF_EW) return run_elementwise(in, n, out, numel);
    /* SPMD ops: identities on one device (the types then agree), else they
     * need kdc_ir_interpret_spmd. */
    if ((kdc_op_flags(n->op) & OPF_COLL) && kdc_mesh_devices(&in->f->module->mesh) == 1 &&
        kdc_type_equal(&n->type, &in->f->nodes[n->in[0]].type)) {
      memcpy(out, in->vals[n->in[0]], (size_t)numel * es);
      return NULL;
    }
    if (kdc_op_flags(n->op) & OPF_COLL)
      return KDC_ERR(KDC_INVALID_INPUT,
                     "interpreter: %%%u = %s needs the device mesh: run the partitioned "
                     "function with kdc_ir_interpret_spmd", v, kdc_op_name(n->op));
    return KDC_ERR(KDC_UNSUPPORTED, "interpreter: op %s is not supported", kdc_op_name(n->op));
  }
}

static kdc_status run_node(interp *in, kdc_value_id v, const kdc_tensor *args, size_t n_args) {
  const kdc_node *n = &in->f->nodes[v];
  KDC_RETURN_IF_ERROR(check_node(in->f, v));
  if (n->op == KDC_OP_PARAMETER) return bind_param(in, n, args, n_args, &in->vals[v]);
  void *out;
  KDC_RETURN_IF_ERROR(alloc_value(&n->type, &out));
  in->vals[v] = out;
  in->owned[v] = true;
  return eval_node(in, v, out);
}

kdc_status kdc_ir_interp_node(const kdc_func *f, kdc_value_id v, void *const *vals, void **out) {
  interp in = {f, (void **)vals, NULL};
  *out = NULL;
  KDC_RETURN_IF_ERROR(check_node(f, v));
  if (f->nodes[v].op == KDC_OP_PARAMETER)
    return KDC_ERR(KDC_INTERNAL, "interpreter: %%%u is a parameter", v);
  KDC_RETURN_IF_ERROR(alloc_value(&f->nodes[v].type, out));
  kdc_status st = eval_node(&in, v, *out);
  if (st) {
    free(*out);
    *out = NULL;
  }
  return st;
}

static kdc_status interpret(const kdc_func *f, const kdc_tensor *args, size_t n_args,
                            kdc_tensor *out_results) {
  interp in = {f, calloc(f->n_nodes + 1, sizeof(void *)), calloc(f->n_nodes + 1, sizeof(bool))};
  kdc_status st = NULL;
  if (f->n_results) memset(out_results, 0, f->n_results * sizeof *out_results);
  if (!in.vals || !in.owned) st = KDC_ERR(KDC_OUT_OF_MEMORY, "interpreter: out of memory");
  else if (n_args != f->n_params)
    st = KDC_ERR(KDC_INVALID_INPUT, "interpreter: func @%s takes %zu arguments, got %zu", f->name,
                 f->n_params, n_args);
  for (size_t v = 0; v < f->n_nodes && !st; v++) st = run_node(&in, (kdc_value_id)v, args, n_args);
  for (size_t i = 0; i < f->n_results && !st; i++) {
    kdc_value_id r = f->results[i];
    if (r >= f->n_nodes) {
      st = KDC_ERR(KDC_INVALID_INPUT, "interpreter: result %zu is not a value", i);
      break;
    }
    out_results[i].type = f->nodes[r].type;
    st = alloc_value(&f->nodes[r].type, &out_results[i].data);
    if (!st) memcpy(out_results[i].data, in.vals[r], kdc_type_bytes(&f->nodes[r].type));
  }
  if (st)
    for (size_t i = 0; i < f->n_results; i++) {
      free(out_results[i].data);
      out_results[i].data = NULL;
    }
  for (size_t v = 0; v < f->n_nodes && in.owned; v++)
    if (in.owned[v]) free(in.vals[v]);
  free(in.vals);
  free(in.owned);
  return st;
}

/* In kdc's floating-point mode (kdc/fpenv.h: subnormals flushed), as the
 * runtime computes. */
kdc_status kdc_ir_interpret(const kdc_func *f, const kdc_tensor *args, size_t n_args,
                            kdc_tensor *out_results) {
  unsigned long fp = kdc_fp_flush_enter();
  kdc_status st = interpret(f, args, n_args, out_results);
  kdc_fp_flush_leave(fp);
  return st;
}
