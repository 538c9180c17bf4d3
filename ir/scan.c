/*
 * ir/scan.c: the scan op (ops.def), the IR's one loop construct.
 *
 * scan runs a body function of the same module once per step, in the style
 * of jax.lax.scan: operands are n_carry initial carries, n_xs time-major
 * sequences ([length, ...], step t reads row t) and loop-invariant operands
 * (weights); the body maps (carries, x_t.., consts..) to (carries'.., y_t)
 * and the scan's one result is every y_t stacked along a new leading dim.
 * The body is an ordinary kdc_func (printed with the module, run through
 * the same passes); the scan node names it (attr.scan.body), so passes that
 * work node by node never look inside and never fold across it (OPF_BODY).
 * A body holds no scan itself (no nesting, no recursion).
 */
#include <stdlib.h>
#include <string.h>

#include "ir/ir.h"

const kdc_func *kdc_ir_scan_body(const kdc_func *f, kdc_value_id v) {
  const kdc_node *n = &f->nodes[v];
  if (n->op != KDC_OP_SCAN || !n->attr.scan.body || !f->module) return NULL;
  return kdc_ir_module_find_func(f->module, n->attr.scan.body);
}

bool kdc_ir_func_is_body(const kdc_module *m, const kdc_func *f) {
  if (!f->name) return false;
  for (size_t i = 0; i < m->n_funcs; i++) {
    const kdc_func *g = m->funcs[i];
    for (size_t v = 0; v < g->n_nodes; v++)
      if (g->nodes[v].op == KDC_OP_SCAN && g->nodes[v].attr.scan.body &&
          strcmp(g->nodes[v].attr.scan.body, f->name) == 0)
        return true;
  }
  return false;
}

static kdc_status scan_err(const kdc_func *f, kdc_value_id v, const char *what, int i,
                           const kdc_type *a, const kdc_type *b) {
  char b1[96], b2[96];
  const kdc_node *n = &f->nodes[v];
  return KDC_ERR(KDC_INVALID_INPUT, "func @%s: %%%u = scan%s%s%s: %s %d: %s vs %s",
                 f->name ? f->name : "", v, n->origin ? " (loc \"" : "",
                 n->origin ? n->origin : "", n->origin ? "\")" : "", what, i,
                 a ? kdc_type_str(a, b1, sizeof b1) : "-", b ? kdc_type_str(b, b2, sizeof b2) : "-");
}

/* |x| without its leading dim. */
static kdc_type drop_lead(const kdc_type *x) {
  kdc_type t = *x;
  t.rank = x->rank - 1;
  for (int d = 0; d < t.rank; d++) t.dims[d] = x->dims[d + 1];
  return t;
}

kdc_status kdc_ir_scan_check(const kdc_func *f, kdc_value_id v) {
  const kdc_node *n = &f->nodes[v];
  const kdc_attr_scan *a = &n->attr.scan;
  const kdc_func *b = kdc_ir_scan_body(f, v);
  if (!b) {
    return KDC_ERR(KDC_INVALID_INPUT, "func @%s: %%%u = scan: body @%s is not a function of "
                   "the module", f->name ? f->name : "", v, a->body ? a->body : "");
  }
  if (b == f) return scan_err(f, v, "the body is the scan's own function, operand", 0, NULL, NULL);
  for (size_t u = 0; u < b->n_nodes; u++)
    if (b->nodes[u].op == KDC_OP_SCAN)
      return scan_err(f, v, "the body holds a scan itself (nesting is not supported), node",
                      (int)u, NULL, NULL);
  if (b->n_params != (size_t)n->n_in)
    return scan_err(f, v, "the body's parameter count differs from the operands, count",
                    (int)b->n_params, NULL, NULL);
  if (b->n_results != (size_t)a->n_carry + 1)
    return scan_err(f, v, "the body must return the carries and y_t; results", (int)b->n_results,
                    NULL, NULL);
  for (int i = 0; i < n->n_in; i++) {
    const kdc_type *op = &f->nodes[n->in[i]].type, *pt = &b->nodes[b->params[i]].type;
    kdc_type want = i >= a->n_carry && i < a->n_carry + a->n_xs ? drop_lead(op) : *op;
    if (!kdc_type_equal(&want, pt)) return scan_err(f, v, "operand/body parameter", i, op, pt);
    if (i < a->n_carry && !kdc_type_equal(pt, &b->nodes[b->results[i]].type))
      return scan_err(f, v, "carry/body result", i, pt, &b->nodes[b->results[i]].type);
  }
  const kdc_type *y = &b->nodes[b->results[a->n_carry]].type;
  kdc_type got = drop_lead(&n->type);
  if (!kdc_type_equal(&got, y))
    return scan_err(f, v, "result row/body y", (int)a->n_carry, &got, y);
  return NULL;
}

kdc_value_id kdc_ir_scan(kdc_func *f, const kdc_func *body, int64_t length, int n_carry,
                         int n_xs, int n_in, const kdc_value_id *in) {
  for (int i = 0; i < n_in; i++)
    if (in[i] == KDC_NO_VALUE) return KDC_NO_VALUE;
  kdc_status st = NULL;
  if (body->n_results != (size_t)n_carry + 1 || body->n_params != (size_t)n_in)
    st = KDC_ERR(KDC_INTERNAL, "scan: body @%s does not fit %d operands and %d carries",
                 body->name, n_in, n_carry);
  kdc_attrs at;
  memset(&at, 0, sizeof at);
  at.scan = (kdc_attr_scan){kdc_arena_strdup(f->module->arena, body->name), length, n_carry, n_xs};
  kdc_type out = {0};
  if (!st) {
    const kdc_type *y = &body->nodes[body->results[n_carry]].type;
    if (y->rank >= KDC_MAX_RANK) {
      st = KDC_ERR(KDC_UNSUPPORTED, "scan: a stacked result would exceed rank %d", KDC_MAX_RANK);
    } else {
      out.dtype = y->dtype;
      out.rank = y->rank + 1;
      out.dims[0] = length;
      for (int d = 0; d < y->rank; d++) out.dims[d + 1] = y->dims[d];
    }
  }
  if (!st) { /* the checks that need no body (length, operand counts) */
    kdc_type *ts = kdc_xcalloc((size_t)n_in + 1, sizeof *ts);
    for (int i = 0; i < n_in; i++) ts[i] = f->nodes[in[i]].type;
    st = kdc_ir_infer_type(KDC_OP_SCAN, n_in, ts, &at, &out);
    free(ts);
  }
  kdc_value_id r = KDC_NO_VALUE;
  if (!st) r = kdc_ir_append(f, KDC_OP_SCAN, &out, n_in, in, &at);
  if (!st) {
    st = kdc_ir_scan_check(f, r);
    if (st) f->n_nodes--; /* drop the ill-typed node again */
  }
  if (st) {
    if (!f->error) f->error = st;
    else kdc_status_free(st);
    return KDC_NO_VALUE;
  }
  return r;
}

kdc_status kdc_ir_interp_scan(const kdc_func *f, kdc_value_id v, void *const *vals, void *out) {
  const kdc_node *n = &f->nodes[v];
  const kdc_attr_scan *a = &n->attr.scan;
  KDC_RETURN_IF_ERROR(kdc_ir_scan_check(f, v));
  const kdc_func *b = kdc_ir_scan_body(f, v);
  int nc = (int)a->n_carry, nx = (int)a->n_xs;
  kdc_tensor *args = kdc_xcalloc((size_t)n->n_in + 1, sizeof *args);
  kdc_tensor *res = kdc_xcalloc((size_t)nc + 1, sizeof *res);
  void **carry = kdc_xcalloc((size_t)nc + 1, sizeof *carry);
  for (int i = 0; i < n->n_in; i++) {
    args[i].type = b->nodes[b->params[i]].type;
    args[i].data = vals[n->in[i]];
  }
  for (int i = 0; i < nc; i++) { /* the carries live in owned copies */
    size_t bytes = kdc_type_bytes(&args[i].type);
    carry[i] = kdc_xmalloc(bytes ? bytes : 1);
    memcpy(carry[i], vals[n->in[i]], bytes);
    args[i].data = carry[i];
  }
  size_t ybytes = kdc_type_bytes(&b->nodes[b->results[nc]].type);
  kdc_status st = NULL;
  for (int64_t t = 0; t < a->length && !st; t++) {
    for (int i = nc; i < nc + nx; i++)
      args[i].data = (char *)vals[n->in[i]] + (size_t)t * kdc_type_bytes(&args[i].type);
    st = kdc_ir_interpret(b, args, (size_t)n->n_in, res);
    if (st) break;
    for (int i = 0; i < nc; i++) {
      memcpy(carry[i], res[i].data, kdc_type_bytes(&args[i].type));
      free(res[i].data);
    }
    memcpy((char *)out + (size_t)t * ybytes, res[nc].data, ybytes);
    free(res[nc].data);
  }
  for (int i = 0; i < nc; i++) free(carry[i]);
  free(carry), free(res), free(args);
  return st ? kdc_status_annotate(st, "scan %%%u step", v) : NULL;
}
