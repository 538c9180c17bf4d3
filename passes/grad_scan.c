/*
 * passes/grad_scan.c: the VJP of scan (ir/scan.c), a reverse scan.
 *
 * For y = scan(body; carries c0, sequences xs, constants w):
 *   1. residuals: a second forward scan over "<body>.res", the body with
 *      y_t replaced by the step's INPUT carries flattened side by side, so
 *      row t of its result holds c_t (the carry before step t);
 *   2. "<body>.vjp" (carries cbar_i, acc_j; sequences c_t.., x_t.., ybar_t;
 *      constants w) clones the body, forms the scalar
 *      L = sum(y_t * ybar_t) + sum_i sum(c'_i * cbar_i) and differentiates
 *      it with kdc_autodiff: cbar_i' = dL/dc_t_i, acc_j' = acc_j + dL/dw_j,
 *      and returns y = [dL/dx_t.., acc_j'.., cbar_i'..] flattened (kdc's
 *      scan has one result, so the final accumulators travel in the last
 *      row);
 *   3. the reverse scan runs that body over the time-reversed residuals,
 *      sequences and cotangent from zero accumulators (the final carries
 *      are not a result of scan: their cotangent is zero); x's gradient is
 *      its rows reversed back, w's and c0's are the last row's pieces.
 * Integer operands get no gradient.  The accumulators have no batch dim,
 * so under a batch split the backward loop runs replicated (the sharding
 * rule finds no batch factor; partition gathers its inputs with a warning).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "passes/passes.h"

/* Appends |src|'s nodes to |dst| with its parameters bound to |args|;
 * |map| (src->n_nodes) receives the new ids. */
static void clone_body(kdc_func *dst, const kdc_func *src, const kdc_value_id *args,
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

static kdc_value_id flat(kdc_func *f, kdc_value_id x) {
  int64_t n = kdc_type_numel(kdc_ir_type(f, x));
  return kdc_ir_reshape(f, x, 1, &n);
}

static kdc_value_id sum_all(kdc_func *f, kdc_value_id x) {
  const kdc_type *t = kdc_ir_type(f, x);
  int64_t dims[KDC_MAX_RANK];
  for (int d = 0; d < t->rank; d++) dims[d] = d;
  return kdc_ir_reduce(f, KDC_RED_SUM, x, t->rank, dims);
}

static kdc_value_id param(kdc_func *f, const char *name, const kdc_type *t) {
  return kdc_ir_parameter(f, KDC_PARAM_INPUT, name, t);
}

static const char *fname(kdc_module *m, const char *base, const char *suffix) {
  for (int k = 1;; k++) {
    const char *s = k == 1 ? kdc_arena_printf(m->arena, "%s.%s", base, suffix)
                           : kdc_arena_printf(m->arena, "%s.%s%d", base, suffix, k);
    if (!kdc_ir_module_find_func(m, s)) return s;
  }
}

/* Columns [c0, c0 + n) of the [T, W] value |r| at rows [r0, r1), reshaped
 * to [r1 - r0, dims of |t|] (or |t| itself when |one_row|). */
static kdc_value_id piece(kdc_func *f, kdc_value_id r, int64_t r0, int64_t r1, int64_t c0,
                          const kdc_type *t, bool one_row) {
  int64_t n = kdc_type_numel(t);
  int64_t st[2] = {r0, c0}, lim[2] = {r1, c0 + n}, one[2] = {1, 1};
  kdc_value_id s = kdc_ir_slice(f, r, st, lim, one);
  int64_t dims[KDC_MAX_RANK + 1];
  int rank = 0;
  if (!one_row) dims[rank++] = r1 - r0;
  for (int d = 0; d < t->rank; d++) dims[rank++] = t->dims[d];
  return kdc_ir_reshape(f, s, rank, dims);
}

void kdc_vjp_scan(kdc_grad_ctx *c, const kdc_node *n, kdc_value_id v, kdc_value_id g) {
  (void)v;
  kdc_func *f = kdc_grad_func(c);
  kdc_module *m = f->module;
  const kdc_func *body = kdc_ir_module_find_func(m, n->attr.scan.body);
  if (!body) return;
  int nc = (int)n->attr.scan.n_carry, nx = (int)n->attr.scan.n_xs, ni = n->n_in;
  int nw = ni - nc - nx;
  int64_t T = n->attr.scan.length;
  const kdc_type *pt[64];
  if (ni > 30 || nc < 1) {
    kdc_status st = KDC_ERR(KDC_UNSUPPORTED, "the gradient of a scan with %d operands and %d "
                            "carries is not supported (at most 30, at least 1)", ni, nc);
    if (!f->error) f->error = st;
    else kdc_status_free(st);
    return;
  }
  for (int i = 0; i < ni; i++) pt[i] = &body->nodes[body->params[i]].type;
  const kdc_type *yt = &body->nodes[body->results[nc]].type;
  kdc_value_id *map = kdc_xmalloc((body->n_nodes + 1) * sizeof *map);
  kdc_value_id args[64];
  /* 1. residuals: the input carries of every step */
  kdc_func *res = kdc_ir_func_create(m, fname(m, body->name, "res"));
  kdc_ir_set_origin(res, f->cur_origin);
  for (int i = 0; i < ni; i++) args[i] = param(res, body->nodes[body->params[i]].attr.param.name, pt[i]);
  clone_body(res, body, args, map);
  kdc_value_id cat[64];
  for (int i = 0; i < nc; i++) kdc_ir_add_result(res, map[body->results[i]], "c");
  for (int i = 0; i < nc; i++) cat[i] = flat(res, args[i]);
  kdc_ir_add_result(res, nc == 1 ? cat[0] : kdc_ir_concat(res, nc, cat, 0), "c_t");
  kdc_value_id rs = kdc_ir_scan(f, res, T, nc, nx, ni, n->in);
  /* 2. the VJP body */
  kdc_func *vb = kdc_ir_func_create(m, fname(m, body->name, "vjp"));
  kdc_ir_set_origin(vb, f->cur_origin);
  kdc_value_id cbar[32], acc[32], ct[32], xt[32], w[32], ybar;
  for (int i = 0; i < nc; i++) cbar[i] = param(vb, "cbar", pt[i]);
  for (int j = 0; j < nw; j++) acc[j] = param(vb, "acc", pt[nc + nx + j]);
  for (int i = 0; i < nc; i++) ct[i] = param(vb, "c_t", pt[i]);
  for (int k = 0; k < nx; k++) xt[k] = param(vb, "x_t", pt[nc + k]);
  ybar = param(vb, "ybar_t", yt);
  for (int j = 0; j < nw; j++) w[j] = param(vb, "w", pt[nc + nx + j]);
  for (int i = 0; i < nc; i++) args[i] = ct[i];
  for (int k = 0; k < nx; k++) args[nc + k] = xt[k];
  for (int j = 0; j < nw; j++) args[nc + nx + j] = w[j];
  clone_body(vb, body, args, map);
  kdc_value_id L = sum_all(vb, kdc_ir_binary(vb, KDC_OP_MUL, map[body->results[nc]], ybar));
  for (int i = 0; i < nc; i++)
    L = kdc_ir_binary(vb, KDC_OP_ADD, L,
                      sum_all(vb, kdc_ir_binary(vb, KDC_OP_MUL, map[body->results[i]], cbar[i])));
  kdc_value_id grads[64];
  kdc_status st = kdc_ir_take_error(vb);
  if (!st) st = kdc_autodiff(vb, L, args, (size_t)ni, grads);
  if (st) { /* reported through the caller's builder (sticky) */
    if (!f->error) f->error = st;
    else kdc_status_free(st);
    free(map);
    return;
  }
  for (int i = 0; i < ni; i++)
    if (grads[i] == KDC_NO_VALUE)
      grads[i] = kdc_ir_splat(vb, KDC_DTYPE_F32, pt[i]->rank, pt[i]->dims, 0.0);
  int k = 0;
  kdc_value_id outs[64];
  for (int i = 0; i < nc; i++) kdc_ir_add_result(vb, grads[i], "cbar");
  for (int j = 0; j < nw; j++) {
    kdc_value_id a = kdc_ir_binary(vb, KDC_OP_ADD, acc[j], grads[nc + nx + j]);
    kdc_ir_add_result(vb, a, "acc");
    outs[nx + j] = flat(vb, a);
  }
  for (int q = 0; q < nx; q++) outs[k++] = flat(vb, grads[nc + q]);
  k = nx + nw;
  for (int i = 0; i < nc; i++) outs[k++] = flat(vb, grads[i]);
  kdc_ir_add_result(vb, k == 1 ? outs[0] : kdc_ir_concat(vb, k, outs, 0), "y");
  /* 3. the reverse scan */
  kdc_value_id ops[96];
  int o = 0;
  for (int i = 0; i < nc; i++) ops[o++] = kdc_ir_splat(f, KDC_DTYPE_F32, pt[i]->rank, pt[i]->dims, 0.0);
  for (int j = 0; j < nw; j++)
    ops[o++] = kdc_ir_splat(f, KDC_DTYPE_F32, pt[nc + nx + j]->rank, pt[nc + nx + j]->dims, 0.0);
  int64_t off = 0, zero = 0;
  for (int i = 0; i < nc; i++) {
    ops[o++] = kdc_ir_reverse(f, piece(f, rs, 0, T, off, pt[i], false), 1, &zero);
    off += kdc_type_numel(pt[i]);
  }
  for (int q = 0; q < nx; q++) ops[o++] = kdc_ir_reverse(f, n->in[nc + q], 1, &zero);
  ops[o++] = kdc_ir_reverse(f, g, 1, &zero);
  for (int j = 0; j < nw; j++) ops[o++] = n->in[nc + nx + j];
  kdc_value_id bs = kdc_ir_scan(f, vb, T, nc + nw, nc + nx + 1, o, ops);
  off = 0;
  for (int q = 0; q < nx; q++) {
    kdc_grad_accum(c, n->in[nc + q],
                   kdc_ir_reverse(f, piece(f, bs, 0, T, off, pt[nc + q], false), 1, &zero));
    off += kdc_type_numel(pt[nc + q]);
  }
  for (int j = 0; j < nw; j++) {
    kdc_grad_accum(c, n->in[nc + nx + j], piece(f, bs, T - 1, T, off, pt[nc + nx + j], true));
    off += kdc_type_numel(pt[nc + nx + j]);
  }
  for (int i = 0; i < nc; i++) {
    kdc_grad_accum(c, n->in[i], piece(f, bs, T - 1, T, off, pt[i], true));
    off += kdc_type_numel(pt[i]);
  }
  free(map);
}
