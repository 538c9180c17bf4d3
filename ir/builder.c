/*
 * The IR builder: type-inferring node constructors with a sticky error.
 *
 * Every constructor runs kdc_ir_infer_type; on failure the first error is
 * kept in f->error (annotated with f->cur_origin) and KDC_NO_VALUE returned.
 * Constructors given a KDC_NO_VALUE operand return KDC_NO_VALUE silently, so
 * a lowering can build a whole layer and check kdc_ir_take_error once.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ir/ir.h"

void kdc_ir_set_origin(kdc_func *f, const char *origin) {
  f->cur_origin = origin ? kdc_arena_strdup(f->module->arena, origin) : NULL;
}

kdc_status kdc_ir_take_error(kdc_func *f) {
  kdc_status st = f->error;
  f->error = NULL;
  return st;
}

static void set_error(kdc_func *f, kdc_status st) {
  if (f->error) {
    kdc_status_free(st);
    return;
  }
  f->error = st;
}

/* Infers the type and appends; |t| is the given result type for ops that need
 * one (else ignored). */
static kdc_value_id build(kdc_func *f, kdc_op op, int n_in, const kdc_value_id *in,
                          const kdc_attrs *attr, const kdc_type *t) {
  kdc_type tin[16] = {{0}};
  kdc_type *tins = n_in <= 16 ? tin : kdc_xmalloc(sizeof(kdc_type) * (size_t)n_in);
  for (int i = 0; i < n_in; i++) {
    if (in[i] == KDC_NO_VALUE || in[i] >= f->n_nodes) {
      if (tins != tin) free(tins);
      if (in[i] != KDC_NO_VALUE)
        set_error(f, KDC_ERR(KDC_INTERNAL, "%s: operand %%%u is not defined", kdc_op_name(op), in[i]));
      return KDC_NO_VALUE;
    }
    tins[i] = f->nodes[in[i]].type;
  }
  kdc_type out = {0};
  if (t) out = *t;
  kdc_attrs a;
  memset(&a, 0, sizeof a);
  if (attr) a = *attr;
  kdc_status st = kdc_ir_infer_type(op, n_in, tins, &a, &out);
  if (tins != tin) free(tins);
  if (st) {
    set_error(f, st);
    return KDC_NO_VALUE;
  }
  /* a batch times a per-sample shape from a model file can leave int64:
   * every later size (kdc_type_bytes, buffer offsets) assumes it does not */
  int64_t bytes = (int64_t)kdc_dtype_size(out.dtype);
  for (int i = 0; i < out.rank; i++) {
    if (out.dims[i] < 0 || (!__builtin_mul_overflow(bytes, out.dims[i], &bytes) &&
                            bytes <= KDC_MAX_TENSOR_BYTES))
      continue;
    char b[160];
    set_error(f, KDC_ERR(KDC_INVALID_INPUT, "%s: result type %s has more than 2^62 bytes", kdc_op_name(op),
                         kdc_type_str(&out, b, sizeof b)));
    return KDC_NO_VALUE;
  }
  return kdc_ir_append(f, op, &out, n_in, in, &a);
}

kdc_value_id kdc_ir_parameter(kdc_func *f, kdc_param_kind kind, const char *name,
                              const kdc_type *t) {
  kdc_attrs a;
  memset(&a, 0, sizeof a);
  a.param.index = (int)f->n_params;
  a.param.kind = kind;
  a.param.name = kdc_arena_strdup(f->module->arena, name);
  return build(f, KDC_OP_PARAMETER, 0, NULL, &a, t);
}

kdc_value_id kdc_ir_constant(kdc_func *f, const kdc_type *t, const void *data) {
  kdc_attrs a;
  memset(&a, 0, sizeof a);
  a.constant.data = kdc_arena_memdup(f->module->arena, data, kdc_type_bytes(t));
  return build(f, KDC_OP_CONSTANT, 0, NULL, &a, t);
}

/* Stores |v| as one element of dtype |d| into |out|. */
static void store_scalar(kdc_dtype d, double v, void *out) {
  switch (d) {
  case KDC_DTYPE_F32: *(float *)out = (float)v; break;
  case KDC_DTYPE_I32: *(int32_t *)out = (int32_t)v; break;
  case KDC_DTYPE_I64: *(int64_t *)out = (int64_t)v; break;
  case KDC_DTYPE_BOOL: *(uint8_t *)out = v != 0; break;
  case KDC_DTYPE_BF16:
  case KDC_DTYPE_F16: kdc_float_store(out, d, 0, (float)v); break;
  default: kdc_unreachable();
  }
}

kdc_value_id kdc_ir_splat(kdc_func *f, kdc_dtype d, int rank, const int64_t *dims, double v) {
  kdc_type t = kdc_type_make(d, rank, dims);
  kdc_attrs a;
  memset(&a, 0, sizeof a);
  a.constant.splat = true;
  a.constant.data = kdc_arena_alloc(f->module->arena, 8);
  store_scalar(d, v, a.constant.data);
  return build(f, KDC_OP_CONSTANT, 0, NULL, &a, &t);
}

kdc_value_id kdc_ir_scalar(kdc_func *f, kdc_dtype d, double v) {
  return kdc_ir_splat(f, d, 0, NULL, v);
}

kdc_value_id kdc_ir_iota(kdc_func *f, const kdc_type *t, int64_t dim) {
  kdc_attrs a;
  memset(&a, 0, sizeof a);
  a.dim = dim;
  return build(f, KDC_OP_IOTA, 0, NULL, &a, t);
}

kdc_value_id kdc_ir_unary(kdc_func *f, kdc_op op, kdc_value_id x) {
  if (!(kdc_op_flags(op) & OPF_UN) || op == KDC_OP_CONVERT) {
    set_error(f, KDC_ERR(KDC_INTERNAL, "kdc_ir_unary: %s is not a unary op", kdc_op_name(op)));
    return KDC_NO_VALUE;
  }
  return build(f, op, 1, &x, NULL, NULL);
}

kdc_value_id kdc_ir_convert(kdc_func *f, kdc_value_id x, kdc_dtype to) {
  kdc_type t;
  memset(&t, 0, sizeof t);
  t.dtype = to;
  return build(f, KDC_OP_CONVERT, 1, &x, NULL, &t);
}

kdc_value_id kdc_ir_binary(kdc_func *f, kdc_op op, kdc_value_id a, kdc_value_id b) {
  if (!(kdc_op_flags(op) & OPF_BIN) || op == KDC_OP_COMPARE) {
    set_error(f, KDC_ERR(KDC_INTERNAL, "kdc_ir_binary: %s is not a binary op", kdc_op_name(op)));
    return KDC_NO_VALUE;
  }
  kdc_value_id in[2] = {a, b};
  return build(f, op, 2, in, NULL, NULL);
}

kdc_value_id kdc_ir_compare(kdc_func *f, kdc_cmp cmp, kdc_value_id a, kdc_value_id b) {
  kdc_attrs at;
  memset(&at, 0, sizeof at);
  at.cmp = cmp;
  kdc_value_id in[2] = {a, b};
  return build(f, KDC_OP_COMPARE, 2, in, &at, NULL);
}

kdc_value_id kdc_ir_select(kdc_func *f, kdc_value_id p, kdc_value_id a, kdc_value_id b) {
  kdc_value_id in[3] = {p, a, b};
  return build(f, KDC_OP_SELECT, 3, in, NULL, NULL);
}

static void set_list(kdc_dimlist *dl, int n, const int64_t *v) {
  dl->n = n;
  for (int i = 0; i < n && i < KDC_MAX_RANK; i++) dl->v[i] = v[i];
}

kdc_value_id kdc_ir_broadcast(kdc_func *f, kdc_value_id x, int rank, const int64_t *dims,
                              const int64_t *map) {
  if (x == KDC_NO_VALUE) return x;
  kdc_attrs a;
  memset(&a, 0, sizeof a);
  set_list(&a.dims, f->nodes[x].type.rank, map);
  kdc_type t = kdc_type_make(f->nodes[x].type.dtype, rank, dims);
  return build(f, KDC_OP_BROADCAST, 1, &x, &a, &t);
}

kdc_value_id kdc_ir_reshape(kdc_func *f, kdc_value_id x, int rank, const int64_t *dims) {
  if (x == KDC_NO_VALUE) return x;
  if (rank < 0 || rank > KDC_MAX_RANK) {
    set_error(f, KDC_ERR(KDC_INVALID_INPUT, "reshape: rank %d exceeds %d", rank, KDC_MAX_RANK));
    return KDC_NO_VALUE;
  }
  kdc_type t = kdc_type_make(f->nodes[x].type.dtype, rank, dims);
  if (kdc_type_equal(&t, &f->nodes[x].type)) return x;
  return build(f, KDC_OP_RESHAPE, 1, &x, NULL, &t);
}

kdc_value_id kdc_ir_transpose(kdc_func *f, kdc_value_id x, const int64_t *perm) {
  if (x == KDC_NO_VALUE) return x;
  kdc_attrs a;
  memset(&a, 0, sizeof a);
  int r = f->nodes[x].type.rank;
  set_list(&a.dims, r, perm);
  bool identity = true;
  for (int i = 0; i < r; i++)
    if (perm[i] != i) identity = false;
  if (identity) return x;
  return build(f, KDC_OP_TRANSPOSE, 1, &x, &a, NULL);
}

kdc_value_id kdc_ir_slice(kdc_func *f, kdc_value_id x, const int64_t *start, const int64_t *limit,
                          const int64_t *stride) {
  if (x == KDC_NO_VALUE) return x;
  kdc_attrs a;
  memset(&a, 0, sizeof a);
  int r = f->nodes[x].type.rank;
  set_list(&a.slice.start, r, start);
  set_list(&a.slice.limit, r, limit);
  if (stride) set_list(&a.slice.stride, r, stride);
  else {
    a.slice.stride.n = r;
    for (int i = 0; i < r; i++) a.slice.stride.v[i] = 1;
  }
  return build(f, KDC_OP_SLICE, 1, &x, &a, NULL);
}

kdc_value_id kdc_ir_concat(kdc_func *f, int n, const kdc_value_id *xs, int64_t dim) {
  kdc_attrs a;
  memset(&a, 0, sizeof a);
  a.dim = dim;
  if (n == 1) return xs[0];
  return build(f, KDC_OP_CONCAT, n, xs, &a, NULL);
}

kdc_value_id kdc_ir_pad(kdc_func *f, kdc_value_id x, kdc_value_id padv, const int64_t *low,
                        const int64_t *high, const int64_t *interior) {
  if (x == KDC_NO_VALUE) return x;
  kdc_attrs a;
  memset(&a, 0, sizeof a);
  int r = f->nodes[x].type.rank;
  set_list(&a.pad.low, r, low);
  set_list(&a.pad.high, r, high);
  a.pad.interior.n = r;
  for (int i = 0; i < r; i++) a.pad.interior.v[i] = interior ? interior[i] : 0;
  kdc_value_id in[2] = {x, padv};
  return build(f, KDC_OP_PAD, 2, in, &a, NULL);
}

kdc_value_id kdc_ir_reduce(kdc_func *f, kdc_reduce_kind kind, kdc_value_id x, int n_dims,
                           const int64_t *dims) {
  kdc_attrs a;
  memset(&a, 0, sizeof a);
  a.reduce.kind = kind;
  if (n_dims > KDC_MAX_RANK) n_dims = KDC_MAX_RANK + 1; /* rejected by inference */
  a.reduce.dims.n = n_dims;
  for (int i = 0; i < n_dims && i < KDC_MAX_RANK; i++) a.reduce.dims.v[i] = dims[i];
  return build(f, KDC_OP_REDUCE, 1, &x, &a, NULL);
}

/* f->lowp's operand: |x| (f32) converted to the low-precision type. */
static bool lowp_applies(const kdc_func *f, kdc_value_id a, kdc_value_id b) {
  return kdc_dtype_is_half(f->lowp) && a < f->n_nodes && b < f->n_nodes &&
         f->nodes[a].type.dtype == KDC_DTYPE_F32 && f->nodes[b].type.dtype == KDC_DTYPE_F32;
}

kdc_value_id kdc_ir_dot(kdc_func *f, kdc_value_id a, kdc_value_id b, const kdc_attr_dot *d) {
  kdc_attrs at;
  memset(&at, 0, sizeof at);
  at.dot = *d;
  if (lowp_applies(f, a, b)) {
    kdc_value_id in[2] = {kdc_ir_convert(f, a, f->lowp), kdc_ir_convert(f, b, f->lowp)};
    return kdc_ir_convert(f, build(f, KDC_OP_DOT, 2, in, &at, NULL), KDC_DTYPE_F32);
  }
  kdc_value_id in[2] = {a, b};
  return build(f, KDC_OP_DOT, 2, in, &at, NULL);
}

kdc_value_id kdc_ir_round_to(kdc_func *f, kdc_value_id x, kdc_dtype d) {
  if (!kdc_dtype_is_half(d) || x >= f->n_nodes || f->nodes[x].type.dtype != KDC_DTYPE_F32)
    return x;
  return kdc_ir_convert(f, kdc_ir_convert(f, x, d), KDC_DTYPE_F32);
}

kdc_value_id kdc_ir_rng_uniform(kdc_func *f, kdc_value_id step, int64_t seed, int rank,
                                const int64_t *dims) {
  kdc_attrs a;
  memset(&a, 0, sizeof a);
  a.seed = seed;
  kdc_type t = kdc_type_make(KDC_DTYPE_F32, rank, dims);
  return build(f, KDC_OP_RNG_UNIFORM, 1, &step, &a, &t);
}

/* ---- convenience -------------------------------------------------------- */

kdc_value_id kdc_ir_broadcast_to(kdc_func *f, kdc_value_id x, int rank, const int64_t *dims) {
  if (x == KDC_NO_VALUE) return x;
  const kdc_type *t = &f->nodes[x].type;
  if (t->rank > rank) {
    char b[96];
    set_error(f, KDC_ERR(KDC_INVALID_INPUT, "cannot broadcast %s to rank %d", kdc_type_str(t, b, sizeof b), rank));
    return KDC_NO_VALUE;
  }
  if (t->rank == rank) {
    bool same = true;
    for (int i = 0; i < rank; i++)
      if (t->dims[i] != dims[i]) same = false;
    if (same) return x;
  }
  int64_t map[KDC_MAX_RANK];
  for (int i = 0; i < t->rank; i++) map[i] = rank - t->rank + i;
  return kdc_ir_broadcast(f, x, rank, dims, map);
}

kdc_value_id kdc_ir_binary_bcast(kdc_func *f, kdc_op op, kdc_value_id a, kdc_value_id b) {
  if (a == KDC_NO_VALUE || b == KDC_NO_VALUE) return KDC_NO_VALUE;
  const kdc_type *ta = &f->nodes[a].type, *tb = &f->nodes[b].type;
  int rank = ta->rank > tb->rank ? ta->rank : tb->rank;
  int64_t dims[KDC_MAX_RANK];
  for (int i = 0; i < rank; i++) {
    int ia = i - (rank - ta->rank), ib = i - (rank - tb->rank);
    int64_t da = ia >= 0 ? ta->dims[ia] : 1, db = ib >= 0 ? tb->dims[ib] : 1;
    if (da != db && da != 1 && db != 1) {
      char b1[96], b2[96];
      set_error(f, KDC_ERR(KDC_INVALID_INPUT, "%s: shapes %s and %s cannot be broadcast together",
                           kdc_op_name(op), kdc_type_str(ta, b1, sizeof b1), kdc_type_str(tb, b2, sizeof b2)));
      return KDC_NO_VALUE;
    }
    dims[i] = da == 1 ? db : da;
  }
  a = kdc_ir_broadcast_to(f, a, rank, dims);
  b = kdc_ir_broadcast_to(f, b, rank, dims);
  if (op == KDC_OP_COMPARE) return KDC_NO_VALUE; /* use kdc_ir_compare */
  return kdc_ir_binary(f, op, a, b);
}

kdc_value_id kdc_ir_binary_scalar(kdc_func *f, kdc_op op, kdc_value_id x, double s) {
  if (x == KDC_NO_VALUE) return x;
  const kdc_type *t = &f->nodes[x].type;
  kdc_value_id c = kdc_ir_splat(f, t->dtype, t->rank, t->dims, s);
  return kdc_ir_binary(f, op, x, c);
}

kdc_value_id kdc_ir_matmul(kdc_func *f, kdc_value_id a, kdc_value_id b) {
  if (a == KDC_NO_VALUE || b == KDC_NO_VALUE) return KDC_NO_VALUE;
  kdc_attr_dot d;
  memset(&d, 0, sizeof d);
  d.lhs_contract.n = 1;
  d.lhs_contract.v[0] = f->nodes[a].type.rank - 1;
  d.rhs_contract.n = 1;
  d.rhs_contract.v[0] = 0;
  return kdc_ir_dot(f, a, b, &d);
}
