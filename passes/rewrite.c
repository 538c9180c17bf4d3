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
