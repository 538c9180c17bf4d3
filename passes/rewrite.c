/*
 * passes/rewrite.c: the shared machinery of rewriting passes.
 *
 * Passes never splice the node array by hand.  They record, per node, which
 * value replaces it (repl) and which nodes survive in which order, append any
 * new nodes at the end, and call kdc_pass_func_rebuild once, which renumbers
 * everything compactly.  This keeps ids dense and deterministic (the printed
 * IR of a pass depends only on its input), and keeps the invariant "operands
 * precede their users" checked in one place.
 *
 * Also here: the users table (CSR) most passes need, located-error prefixes
 * and small constant predicates.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "passes/passes.h"

/* Follows replacement chains to the final representative of |v|. */
static kdc_value_id resolve(const kdc_value_id *repl, kdc_value_id v) {
  if (!repl) return v;
  while (repl[v] != v) {
    KDC_ASSERT(repl[v] != KDC_NO_VALUE);
    v = repl[v];
  }
  return v;
}

void kdc_pass_func_rebuild(kdc_func *f, const kdc_value_id *repl, const kdc_value_id *order,
                           size_t n_order) {
  size_t n = f->n_nodes;
  kdc_value_id *newid = kdc_xmalloc(n * sizeof *newid);
  for (size_t i = 0; i < n; i++) newid[i] = KDC_NO_VALUE;
  kdc_value_id *seq = NULL;
  if (!order) { /* default order: survivors in id order */
    seq = kdc_xmalloc(n * sizeof *seq);
    n_order = 0;
    for (size_t i = 0; i < n; i++)
      if (!repl || repl[i] == i) seq[n_order++] = (kdc_value_id)i;
    order = seq;
  }
  KDC_ASSERT(n_order <= n);
  for (size_t k = 0; k < n_order; k++) {
    KDC_ASSERT(order[k] < n && newid[order[k]] == KDC_NO_VALUE);
    KDC_ASSERT(!repl || repl[order[k]] == order[k]);
    newid[order[k]] = (kdc_value_id)k;
  }
  /* Every surviving operand must be kept and placed before its user. */
  kdc_node *old = kdc_xmalloc((n ? n : 1) * sizeof *old);
  memcpy(old, f->nodes, n * sizeof *old);
  for (size_t k = 0; k < n_order; k++) {
    kdc_node nd = old[order[k]];
    for (int j = 0; j < nd.n_in; j++) {
      kdc_value_id v = newid[resolve(repl, nd.in[j])];
      KDC_ASSERT(v != KDC_NO_VALUE && v < k);
      nd.in[j] = v; /* operand arrays are per node, so this is safe in place */
    }
    f->nodes[k] = nd;
  }
  for (size_t i = 0; i < n; i++)
    if (old[i].op == KDC_OP_PARAMETER) KDC_ASSERT(newid[i] != KDC_NO_VALUE);
  f->n_nodes = n_order;
  for (size_t i = 0; i < f->n_params; i++)
    if (f->params[i] != KDC_NO_VALUE) f->params[i] = newid[f->params[i]];
  for (size_t i = 0; i < f->n_results; i++) {
    kdc_value_id v = newid[resolve(repl, f->results[i])];
    KDC_ASSERT(v != KDC_NO_VALUE);
    f->results[i] = v;
  }
  free(old);
  free(seq);
  free(newid);
}

void kdc_pass_users_init(kdc_users *u, const kdc_func *f) {
  size_t n = f->n_nodes;
  u->start = kdc_xcalloc(n + 1, sizeof *u->start);
  u->is_result = kdc_xcalloc(n ? n : 1, sizeof *u->is_result);
  for (size_t i = 0; i < n; i++)
    for (int j = 0; j < f->nodes[i].n_in; j++) u->start[f->nodes[i].in[j] + 1]++;
  for (size_t i = 0; i < n; i++) u->start[i + 1] += u->start[i];
  u->users = kdc_xmalloc((u->start[n] ? u->start[n] : 1) * sizeof *u->users);
  uint32_t *fill = kdc_xmalloc((n ? n : 1) * sizeof *fill);
  memcpy(fill, u->start, n * sizeof *fill);
  for (size_t i = 0; i < n; i++) /* users come out in increasing id order */
    for (int j = 0; j < f->nodes[i].n_in; j++)
      u->users[fill[f->nodes[i].in[j]]++] = (kdc_value_id)i;
  free(fill);
  for (size_t i = 0; i < f->n_results; i++) u->is_result[f->results[i]] = true;
}

void kdc_pass_users_free(kdc_users *u) {
  free(u->start);
  free(u->users);
  free(u->is_result);
  memset(u, 0, sizeof *u);
}

const char *kdc_pass_where(const kdc_func *f, kdc_value_id v, char *buf, size_t n) {
  const kdc_node *nd = kdc_ir_node(f, v);
  if (nd->origin)
    snprintf(buf, n, "func %s: %%%u (%s, %s)", f->name, (unsigned)v, kdc_op_name(nd->op),
             nd->origin);
  else
    snprintf(buf, n, "func %s: %%%u (%s)", f->name, (unsigned)v, kdc_op_name(nd->op));
  return buf;
}

bool kdc_pass_is_splat(const kdc_func *f, kdc_value_id v) {
  const kdc_node *nd = kdc_ir_node(f, v);
  if (nd->op != KDC_OP_CONSTANT) return false;
  if (nd->attr.constant.splat || kdc_type_numel(&nd->type) <= 1) return true;
  size_t es = kdc_dtype_size(nd->type.dtype);
  const unsigned char *d = nd->attr.constant.data;
  int64_t k = kdc_type_numel(&nd->type);
  for (int64_t i = 1; i < k; i++)
    if (memcmp(d, d + (size_t)i * es, es) != 0) return false;
  return true;
}

bool kdc_pass_is_splat_of(const kdc_func *f, kdc_value_id v, double x, bool want_neg_zero) {
  if (!kdc_pass_is_splat(f, v)) return false;
  const kdc_node *nd = kdc_ir_node(f, v);
  if (kdc_type_numel(&nd->type) == 0) return false; /* no element to compare */
  const void *d = nd->attr.constant.data;
  switch (nd->type.dtype) {
  case KDC_DTYPE_F32: {
    float e;
    memcpy(&e, d, sizeof e);
    return e == (float)x && (x != 0 || (signbit(e) != 0) == want_neg_zero);
  }
  case KDC_DTYPE_I32: {
    int32_t e;
    memcpy(&e, d, sizeof e);
    return (double)e == x;
  }
  case KDC_DTYPE_I64: {
    int64_t e;
    memcpy(&e, d, sizeof e);
    return (double)e == x;
  }
  case KDC_DTYPE_BOOL: return (double)*(const unsigned char *)d == x;
  default: return false;
  }
}

void kdc_pass_splice(kdc_func *f, size_t n_old, const size_t *first, const kdc_value_id *to) {
  size_t n = f->n_nodes, k = 0;
  kdc_value_id *repl = kdc_xmalloc(n * sizeof *repl);
  kdc_value_id *order = kdc_xmalloc(n * sizeof *order);
  for (size_t i = 0; i < n; i++) repl[i] = (kdc_value_id)i;
  for (size_t i = 0; i < n_old; i++) {
    if (to[i] == KDC_NO_VALUE) {
      order[k++] = (kdc_value_id)i;
      continue;
    }
    repl[i] = to[i]; /* the new nodes take the old one's place */
    for (size_t j = first[i]; j < first[i + 1]; j++) order[k++] = (kdc_value_id)j;
  }
  kdc_pass_func_rebuild(f, repl, order, k);
  free(repl);
  free(order);
}

/* Appends |src|'s nodes to |dst| with its parameters bound to |args|;
 * |map| (src->n_nodes) receives the new ids. */
void kdc_pass_clone_body(kdc_func *dst, const kdc_func *src, const kdc_value_id *args,
                       kdc_value_id *map) {
  for (size_t v = 0; v < src->n_nodes; v++) {
    const kdc_node *nd = &src->nodes[v];
    if (nd->op == KDC_OP_PARAMETER) {
      map[v] = args[nd->attr.param.index];
      continue;
    }
    kdc_value_id in[64];
    kdc_value_id *ins = nd->n_in <= 64 ? in : kdc_xmalloc((size_t)nd->n_in * sizeof *ins);
    for (int j = 0; j < nd->n_in; j++) ins[j] = map[nd->in[j]];
    map[v] = kdc_ir_append(dst, nd->op, &nd->type, nd->n_in, ins, &nd->attr);
    if (ins != in) free(ins);
  }
}

/* |xs| (n values whose dim 0 is |lead|, or any values when |lead| is 1)
 * side by side as one [lead, K] row, or [lead, K, F] when |F| > 1. */
kdc_value_id kdc_pass_pack(kdc_func *f, int n, const kdc_value_id *xs, int64_t lead, int64_t F) {
  kdc_value_id r[96];
  for (int i = 0; i < n; i++) {
    int64_t k = kdc_type_numel(kdc_ir_type(f, xs[i])) / lead;
    int64_t dims[3] = {lead, F > 1 ? k / F : k, F};
    r[i] = kdc_ir_reshape(f, xs[i], F > 1 ? 3 : 2, dims);
  }
  return n == 1 ? r[0] : kdc_ir_concat(f, n, r, 1);
}

/* The piece of type |t| at column |c0| of the packed [T, lead, K(, F)]
 * value |r|, rows [r0, r1), reshaped to [r1 - r0, dims of |t|] (or |t|
 * itself when |one_row|).  Columns count [F] blocks when |F| > 1. */
kdc_value_id kdc_pass_piece(kdc_func *f, kdc_value_id r, int64_t r0, int64_t r1, int64_t c0,
                          const kdc_type *t, int64_t lead, bool one_row, int64_t F) {
  int64_t n = kdc_type_numel(t) / lead / F;
  int64_t st[4] = {r0, 0, c0, 0}, lim[4] = {r1, lead, c0 + n, F}, one[4] = {1, 1, 1, 1};
  kdc_value_id s = kdc_ir_slice(f, r, st, lim, one); /* rank 3 when F is 1: [3] unread */
  int64_t dims[KDC_MAX_RANK + 1];
  int rank = 0;
  if (!one_row) dims[rank++] = r1 - r0;
  for (int d = 0; d < t->rank; d++) dims[rank++] = t->dims[d];
  return kdc_ir_reshape(f, s, rank, dims);
}
