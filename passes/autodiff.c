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

void kdc_grad_accum(kdc_grad_ctx *c, kdc_value_id v, kdc_value_id contribution) {
  if (!kdc_grad_wants(c, v) || contribution == KDC_NO_VALUE) return;
  if (c->adj[v] == KDC_NO_VALUE) c->adj[v] = contribution;
  else c->adj[v] = kdc_ir_binary(c->f, KDC_OP_ADD, c->adj[v], contribution);
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
