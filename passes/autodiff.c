/*
 * passes/autodiff.c: reverse-mode differentiation over the IR.
 *
 * kdc_autodiff(f, y, wrt) appends the backward program to |f|:
 *   1. which values lie on a path wrt -> y: |dep| (forward, only through f32
 *      values: an integer or bool value blocks the gradient) and |live|
 *      (backward from y).  A value wants a gradient when it is both;
 *   2. the cotangent of y is 1; nodes are then visited from y down to 0 and
 *      each node with a cotangent hands it to its op's rule
 *      (passes/grad_rules.c), which adds contributions to its operands'
 *      cotangents (kdc_grad_accum).  Because operands precede users, a
 *      node's cotangent is complete when it is visited;
 *   3. the cotangents of the wrt values are the gradients.
 * Nothing of the forward program changes, so predict's values (and their
 * shardings) stay as they were; the pass manager's simplify removes what the
 * backward program does not use.
 *
 * Determinism: contributions are summed in the order the users are visited
 * (decreasing id), so the same input always gives the same IR.
 */
#include <stdlib.h>
#include <string.h>

#include "passes/passes.h"

struct kdc_grad_ctx {
  kdc_func *f;
  size_t n_fwd;          /* nodes of the forward program */
  bool *wants;           /* per forward value */
  bool *is_const;        /* per forward value: depends on no parameter */
  kdc_value_id *adj;     /* per forward value: its cotangent so far, or KDC_NO_VALUE */
};

kdc_func *kdc_grad_func(kdc_grad_ctx *c) { return c->f; }

bool kdc_grad_wants(const kdc_grad_ctx *c, kdc_value_id v) { return v < c->n_fwd && c->wants[v]; }

bool kdc_grad_is_constant(const kdc_grad_ctx *c, kdc_value_id v) {
  return v < c->n_fwd && c->is_const[v];
}

/* The sum of two cotangents that are pads by -0.0 (the additive identity:
 * x + -0.0 = x) of adjacent blocks along one dim d, equal elsewhere -- the
 * gradients of slices that split a value, an LSTM's four gates of [B, 4, u]
 * -- as ONE pad of their concatenate (pieces of a concatenate along d
 * spliced in), bit for bit the sum; KDC_NO_VALUE when they are not.  The
 * sum of all the gates' pads is then a pad by nothing (algebra drops it)
 * of one concatenate, which a kernel writes piece by piece, where the
 * chain of adds of pads evaluated every gate's gradient per element. */
static kdc_value_id merge_pads(kdc_func *f, kdc_value_id a, kdc_value_id b) {
  const kdc_node *pa = kdc_ir_node(f, a), *pb = kdc_ir_node(f, b);
  if (pa->op != KDC_OP_PAD || pb->op != KDC_OP_PAD || pa->type.dtype != KDC_DTYPE_F32 ||
      !kdc_pass_is_splat_of(f, pa->in[1], 0, true) || !kdc_pass_is_splat_of(f, pb->in[1], 0, true))
    return KDC_NO_VALUE;
  const kdc_type *xa = kdc_ir_type(f, pa->in[0]), *xb = kdc_ir_type(f, pb->in[0]);
  const kdc_attr_pad *A = &pa->attr.pad, *B = &pb->attr.pad;
  int d = -1;
  for (int i = 0; i < xa->rank; i++) {
    if (A->interior.v[i] || B->interior.v[i] || A->low.v[i] < 0 || A->high.v[i] < 0 ||
        B->low.v[i] < 0 || B->high.v[i] < 0)
      return KDC_NO_VALUE;
    if (A->low.v[i] == B->low.v[i] && A->high.v[i] == B->high.v[i]) continue;
    if (d >= 0) return KDC_NO_VALUE;
    d = i;
  }
  if (d < 0) return KDC_NO_VALUE;
  bool a_first = A->low.v[d] + xa->dims[d] == B->low.v[d];
  if (!a_first && B->low.v[d] + xb->dims[d] != A->low.v[d]) return KDC_NO_VALUE;
  kdc_value_id ends[2] = {a_first ? pa->in[0] : pb->in[0], a_first ? pb->in[0] : pa->in[0]};
  kdc_value_id parts[64], padv = pa->in[1];
  int n = 0;
  for (int e = 0; e < 2; e++) {
    const kdc_node *x = kdc_ir_node(f, ends[e]);
    if (x->op == KDC_OP_CONCAT && x->attr.dim == d) {
      if (n + x->n_in > 64) return KDC_NO_VALUE;
      for (int j = 0; j < x->n_in; j++) parts[n++] = x->in[j];
    } else {
      if (n == 64) return KDC_NO_VALUE;
      parts[n++] = ends[e];
    }
  }
  int64_t lo[KDC_MAX_RANK], hi[KDC_MAX_RANK];
  for (int i = 0; i < xa->rank; i++) lo[i] = A->low.v[i], hi[i] = A->high.v[i];
  lo[d] = a_first ? A->low.v[d] : B->low.v[d];
  hi[d] = a_first ? B->high.v[d] : A->high.v[d];
  return kdc_ir_pad(f, kdc_ir_concat(f, n, parts, d), padv, lo, hi, NULL);
}

/* |acc| + |p| with |p| merged into a pad of |acc| or of a term of an add
 * in |acc| (depth < 8), or KDC_NO_VALUE.  Exact: the merged pads cover
 * disjoint blocks and add -0.0 elsewhere, so (a + b) + c = a + (b (+) c)
 * element by element, NaNs and signed zeros included; a merged term that
 * can then merge with its sibling does. */
static kdc_value_id merge_into(kdc_func *f, kdc_value_id acc, kdc_value_id p, int depth) {
  kdc_value_id m = merge_pads(f, acc, p);
  if (m != KDC_NO_VALUE || depth >= 8) return m;
  const kdc_node *a = kdc_ir_node(f, acc);
  if (a->op != KDC_OP_ADD) return KDC_NO_VALUE;
  for (int i = 0; i < 2; i++) {
    kdc_value_id other = kdc_ir_node(f, acc)->in[1 - i];
    m = merge_into(f, kdc_ir_node(f, acc)->in[i], p, depth + 1);
    if (m == KDC_NO_VALUE) continue;
    kdc_value_id both = merge_pads(f, other, m);
    return both != KDC_NO_VALUE ? both : kdc_ir_binary(f, KDC_OP_ADD, other, m);
  }
  return KDC_NO_VALUE;
}

void kdc_grad_accum(kdc_grad_ctx *c, kdc_value_id v, kdc_value_id contribution) {
  if (!kdc_grad_wants(c, v) || contribution == KDC_NO_VALUE) return;
  if (c->adj[v] == KDC_NO_VALUE) {
    c->adj[v] = contribution;
    return;
  }
  kdc_value_id m = merge_into(c->f, c->adj[v], contribution, 0);
  c->adj[v] = m != KDC_NO_VALUE ? m : kdc_ir_binary(c->f, KDC_OP_ADD, c->adj[v], contribution);
}

static kdc_status check_args(const kdc_func *f, kdc_value_id y, const kdc_value_id *wrt, size_t n) {
  char b[96];
  if (y >= f->n_nodes)
    return KDC_ERR(KDC_INVALID_INPUT, "autodiff: func %s: %%%u is not a value", f->name, y);
  const kdc_type *t = kdc_ir_type(f, y);
  if (t->dtype != KDC_DTYPE_F32 || t->rank != 0)
    return KDC_ERR(KDC_INVALID_INPUT, "autodiff: func %s: %%%u is %s, expected an f32 scalar",
                   f->name, y, kdc_type_str(t, b, sizeof b));
  for (size_t i = 0; i < n; i++) {
    if (wrt[i] >= f->n_nodes)
      return KDC_ERR(KDC_INVALID_INPUT, "autodiff: func %s: wrt[%zu] is not a value", f->name, i);
    if (kdc_ir_type(f, wrt[i])->dtype != KDC_DTYPE_F32)
      return KDC_ERR(KDC_INVALID_INPUT,
                     "autodiff: func %s: %%%u is %s; only f32 values have gradients", f->name,
                     wrt[i], kdc_type_str(kdc_ir_type(f, wrt[i]), b, sizeof b));
  }
  return NULL;
}

/* Fills c->wants and c->is_const. */
static void mark(kdc_grad_ctx *c, kdc_value_id y, const kdc_value_id *wrt, size_t n) {
  const kdc_func *f = c->f;
  size_t nn = c->n_fwd;
  bool *dep = kdc_xcalloc(nn, sizeof *dep), *live = kdc_xcalloc(nn, sizeof *live);
  for (size_t i = 0; i < n; i++) dep[wrt[i]] = true;
  for (size_t v = 0; v < nn; v++) {
    const kdc_node *nd = &f->nodes[v];
    c->is_const[v] = nd->op != KDC_OP_PARAMETER;
    for (int j = 0; j < nd->n_in; j++) {
      dep[v] = dep[v] || dep[nd->in[j]];
      c->is_const[v] = c->is_const[v] && c->is_const[nd->in[j]];
    }
    if (!kdc_dtype_is_float(nd->type.dtype)) dep[v] = false; /* bf16/f16 values carry
                                                                 cotangents of their type */
  }
  live[y] = true;
  for (size_t v = nn; v-- > 0;) {
    if (!live[v]) continue;
    const kdc_node *nd = &f->nodes[v];
    for (int j = 0; j < nd->n_in; j++) live[nd->in[j]] = true;
  }
  for (size_t v = 0; v < nn; v++) c->wants[v] = dep[v] && live[v];
  free(dep);
  free(live);
}

/* Runs the rule of node |v| on its cotangent. */
static kdc_status backprop_node(kdc_grad_ctx *c, kdc_value_id v) {
  kdc_func *f = c->f;
  kdc_node nd = f->nodes[v]; /* a copy: rules append nodes, which may move the array */
  const kdc_grad_rule *r = kdc_grad_rule_of(nd.op);
  char where[256];
  switch (r->kind) {
  case KDC_GRAD_LEAF:
  case KDC_GRAD_ZERO: return NULL;
  case KDC_GRAD_UNSUPPORTED:
    return KDC_ERR(KDC_UNSUPPORTED, "%s: cannot differentiate %s: %s",
                   kdc_pass_where(f, v, where, sizeof where), kdc_op_name(nd.op), r->why);
  case KDC_GRAD_RULE: break;
  }
  f->cur_origin = nd.origin;
  r->fn(c, &nd, v, c->adj[v]);
  kdc_status st = kdc_ir_take_error(f);
  if (st)
    return kdc_status_annotate(st, "internal error: autodiff: gradient of %s",
                               kdc_pass_where(f, v, where, sizeof where));
  return NULL;
}

kdc_status kdc_autodiff(kdc_func *f, kdc_value_id y, const kdc_value_id *wrt, size_t n,
                        kdc_value_id *out_grads) {
  KDC_RETURN_IF_ERROR(check_args(f, y, wrt, n));
  kdc_grad_ctx c = {f, f->n_nodes, NULL, NULL, NULL};
  c.wants = kdc_xcalloc(c.n_fwd, sizeof *c.wants);
  c.is_const = kdc_xcalloc(c.n_fwd, sizeof *c.is_const);
  c.adj = kdc_xmalloc(c.n_fwd * sizeof *c.adj);
  for (size_t v = 0; v < c.n_fwd; v++) c.adj[v] = KDC_NO_VALUE;
  mark(&c, y, wrt, n);
  const char *saved_origin = f->cur_origin;
  kdc_status st = NULL;
  if (c.wants[y]) {
    f->cur_origin = f->nodes[y].origin;
    c.adj[y] = kdc_ir_scalar(f, KDC_DTYPE_F32, 1.0);
    for (size_t v = y + 1; v-- > 0 && !st;)
      if (c.wants[v] && c.adj[v] != KDC_NO_VALUE) st = backprop_node(&c, (kdc_value_id)v);
  }
  for (size_t i = 0; i < n && !st; i++) out_grads[i] = c.adj[wrt[i]];
  f->cur_origin = saved_origin;
  free(c.wants);
  free(c.is_const);
  free(c.adj);
  return st;
}
