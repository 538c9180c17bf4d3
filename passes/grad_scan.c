/*
 * passes/grad_scan.c: the VJP of scan (ir/scan.c), two reverse scans.
 *
 * For y = scan(body; carries c0, sequences xs, constants w):
 *   1. residuals: a second forward scan over "<body>.res", the body with
 *      y_t replaced by the step's INPUT carries packed side by side, so
 *      row t of its result holds c_t (the carry before step t);
 *   2. scan A over "<body>.vjp" (carries cbar_i; sequences c_t.., x_t..,
 *      ybar_t; constants w) clones the body, forms the scalar
 *      L = sum(y_t * ybar_t) + sum_i sum(c'_i * cbar_i) and differentiates
 *      it with kdc_autodiff wrt c_t and x_t: cbar_i' = dL/dc_t_i and
 *      y = [dL/dx_t.., cbar_i'..] (kdc's scan has one result, so the final
 *      cotangents travel in the last row);
 *   3. a weight w_j whose every use in the body is the rhs of a batch-free
 *      dot_general z = dot(a, w_j) (an RNN's recurrent kernel) needs no
 *      loop: scan A's rows also carry dL/dz (shared with dx_t when it is
 *      the same value) and a when a is computed (a carry or sequence is
 *      already stacked), and dW = dot over all steps of the stacked a
 *      [T, ..] and dL/dz [T, ..], the step dim contracted with the batch:
 *      one GEMM after the loop instead of a GEMM per step (dot_uses);
 *   4. for the other weights, scan B over "<body>.wgrad" (carries acc_j,
 *      zero-initialised; sequences c_t.., x_t.., the cotangent cbar
 *      entering each reverse step
 *      -- zero, then scan A's cbar' one row later -- and ybar_t; constants
 *      w) builds the same L and differentiates it wrt w only:
 *      acc_j' = acc_j + dL/dw_j, y = [acc_j'..] (the last row is dW).
 * Both backward scans run over the time-reversed residuals, sequences and
 * cotangent (the final carries are not a result of scan: their cotangent
 * is zero); x's gradient is scan A's rows reversed back, c0's its last
 * row's pieces, w's the dots of 3 or scan B's last row.
 * The packed rows keep the batch as dim 0 ([B, K], lead_dim) when every
 * carry and sequence row has it, and the carries' common last dim F (a
 * layer's units, feat_dim) as their last ([B, K, F]; scan B's [1, K, F])
 * when every packed value ends in it, so the residual scan and scan A split
 * on the batch and the units like the forward scan, and scan B on the
 * units (the sharding rule's feature factor); scan B's carries only accumulate sums
 * over the batch, so under a batch split they are partial over the batch
 * axes inside the loop and reduced once after it (the scan sharding rule
 * makes the batch a reduction factor of such an accumulator scan;
 * docs/sharding.md "Recurrent layers").  Splitting the weight gradients off
 * scan A costs a second evaluation of the body's forward part per step.
 * Integer operands get no gradient.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "passes/passes.h"

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

/* The common dim 0 of the carries and of the sequences' rows (the batch of
 * a recurrent layer), or 1 when they differ: the packed rows below keep
 * it as their dim 0, so a batch split of the loop stays expressible. */
static int64_t lead_dim(const kdc_type *const *pt, int n) {
  int64_t b = 0;
  for (int i = 0; i < n; i++) {
    if (pt[i]->rank < 1 || pt[i]->dims[0] < 1) return 1;
    if (!b) b = pt[i]->dims[0];
    else if (pt[i]->dims[0] != b) return 1;
  }
  return b ? b : 1;
}

/* The carries' common last dim F > 1 (a recurrent layer's units), or 1:
 * rows are then packed as [lead, K, F], so a units split of the loop
 * (the scan rule's feature factor) stays expressible in the backward
 * scans. */
static int64_t feat_dim(const kdc_type *const *pt, int nc) {
  int64_t F = 0;
  for (int i = 0; i < nc; i++) {
    int64_t l = pt[i]->rank >= 2 ? pt[i]->dims[pt[i]->rank - 1] : 1;
    if (l <= 1 || (F && l != F)) return 1;
    F = l;
  }
  return F ? F : 1;
}

/* Whether the n values |ts| can be packed as [lead, K, F] (F > 1): each
 * ends in F. */
static bool packs_feat(const kdc_type *const *ts, int n, int64_t F) {
  for (int i = 0; i < n && F > 1; i++)
    if (ts[i]->rank < 2 || ts[i]->dims[ts[i]->rank - 1] != F) return false;
  return F > 1;
}

static void set_error(kdc_func *f, kdc_status st) {
  if (!f->error) f->error = st;
  else kdc_status_free(st);
}

/* Appends to |vb| the clone of |body| at (c_t.., x_t.., w..) and the scalar
 * L = sum(y_t * ybar_t) + sum_i sum(c'_i * cbar_i); returns L. */
static kdc_value_id vjp_loss(kdc_func *vb, const kdc_func *body, const kdc_value_id *args,
                             const kdc_value_id *cbar, kdc_value_id ybar, int nc,
                             kdc_value_id *map) {
  kdc_pass_clone_body(vb, body, args, map);
  kdc_value_id L = sum_all(vb, kdc_ir_binary(vb, KDC_OP_MUL, map[body->results[nc]], ybar));
  for (int i = 0; i < nc; i++)
    L = kdc_ir_binary(vb, KDC_OP_ADD, L,
                      sum_all(vb, kdc_ir_binary(vb, KDC_OP_MUL, map[body->results[i]], cbar[i])));
  return L;
}

/* Can a per-step value of type |t| travel in scan A's packed rows
 * ([lead, K] or [lead, K, F])? */
static bool rides_packed(const kdc_type *t, int64_t lead, int64_t F) {
  if (t->dtype != KDC_DTYPE_F32) return false;
  if (lead > 1 && (t->rank < 1 || t->dims[0] != lead)) return false;
  return F <= 1 || (t->rank >= 2 && t->dims[t->rank - 1] == F);
}

/* One use of a loop-invariant weight in the body: the rhs of a batch-free
 * dot_general |node| whose lhs is body parameter |other| (a carry or a
 * sequence row), or a computed value when |other| is -1. */
typedef struct w_use {
  kdc_value_id node;
  int w, other;
} w_use;

/* Appends to |u| (room for |cap|) the uses of weight |j| when every use is
 * such a dot_general whose lhs and result can ride scan A's rows; returns
 * the new count, or |nu| unchanged when weight |j| has another use. */
static int dot_uses(const kdc_func *body, int nc, int nx, int j, int64_t lead, int64_t F,
                    w_use *u, int nu, int cap) {
  kdc_value_id p = body->params[nc + nx + j];
  if (body->nodes[p].type.dtype != KDC_DTYPE_F32) return nu;
  int k = nu;
  for (size_t v = 0; v < body->n_nodes; v++) {
    const kdc_node *nd = &body->nodes[v];
    for (int i = 0; i < nd->n_in; i++) {
      if (nd->in[i] != p) continue;
      if (nd->op != KDC_OP_DOT || i != 1 || nd->in[0] == p || nd->attr.dot.lhs_batch.n ||
          k == cap || !rides_packed(&nd->type, lead, F))
        return nu;
      const kdc_node *a = &body->nodes[nd->in[0]];
      int other = a->op == KDC_OP_PARAMETER ? (int)a->attr.param.index : -1;
      if (other >= nc + nx || a->type.rank >= KDC_MAX_RANK ||
          (other < 0 && !rides_packed(&a->type, lead, F)))
        return nu;
      u[k++] = (w_use){(kdc_value_id)v, j, other};
      break;
    }
  }
  return k;
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
    set_error(f, KDC_ERR(KDC_UNSUPPORTED, "the gradient of a scan with %d operands and %d "
                         "carries is not supported (at most 30, at least 1)", ni, nc));
    return;
  }
  for (int i = 0; i < ni; i++) pt[i] = &body->nodes[body->params[i]].type;
  const kdc_type *yt = &body->nodes[body->results[nc]].type;
  int64_t lead = lead_dim(pt, nc + nx), F = feat_dim(pt, nc);
  const kdc_type *at[64]; /* scan A's packed rows: dx_t.., cbar'.. */
  for (int q = 0; q < nx; q++) at[q] = pt[nc + q];
  for (int i = 0; i < nc; i++) at[nx + i] = pt[i];
  int64_t Fr = packs_feat(pt, nc, F) ? F : 1, Fa = packs_feat(at, nx + nc, F) ? F : 1;
  kdc_value_id *map = kdc_xmalloc((body->n_nodes + 1) * sizeof *map);
  kdc_value_id args[64], in[64];
  for (int i = 0; i < ni; i++) in[i] = n->in[i]; /* |n| may point into f's nodes */
  /* 1. residuals: the input carries of every step */
  kdc_func *res = kdc_ir_func_create(m, fname(m, body->name, "res"));
  kdc_ir_set_origin(res, f->cur_origin);
  for (int i = 0; i < ni; i++) args[i] = param(res, body->nodes[body->params[i]].attr.param.name, pt[i]);
  kdc_pass_clone_body(res, body, args, map);
  for (int i = 0; i < nc; i++) kdc_ir_add_result(res, map[body->results[i]], "c");
  kdc_ir_add_result(res, kdc_pass_pack(res, nc, args, lead, Fr), "c_t");
  kdc_value_id rs = kdc_ir_scan(f, res, T, nc, nx, ni, in);
  /* the reversed sequences both backward scans read */
  kdc_value_id ct_rev[32], xs_rev[32], g_rev;
  int64_t off = 0, zero = 0;
  for (int i = 0; i < nc; i++) {
    ct_rev[i] = kdc_ir_reverse(f, kdc_pass_piece(f, rs, 0, T, off, pt[i], lead, false, Fr), 1, &zero);
    off += kdc_type_numel(pt[i]) / lead / Fr;
  }
  for (int q = 0; q < nx; q++) xs_rev[q] = kdc_ir_reverse(f, in[nc + q], 1, &zero);
  g_rev = kdc_ir_reverse(f, g, 1, &zero);
  /* 2. scan A, the cotangents: carries cbar_i; y_t = [dx_t.., cbar'_i..,
   * then per weight use of dot_uses its result's cotangent and (when not
   * a carry or sequence) its lhs] */
  w_use use[32];
  int nu = 0;
  bool by_dot[32] = {false};
  for (int j = 0; j < nw; j++) {
    int k = dot_uses(body, nc, nx, j, lead, Fa, use, nu, 32);
    by_dot[j] = k > nu;
    nu = k;
  }
  kdc_func *va = kdc_ir_func_create(m, fname(m, body->name, "vjp"));
  kdc_ir_set_origin(va, f->cur_origin);
  kdc_value_id cbar[32], ybar, grads[96], wrt[96];
  for (int i = 0; i < nc; i++) cbar[i] = param(va, "cbar", pt[i]);
  for (int i = 0; i < nc; i++) args[i] = param(va, "c_t", pt[i]);
  for (int k = 0; k < nx; k++) args[nc + k] = param(va, "x_t", pt[nc + k]);
  ybar = param(va, "ybar_t", yt);
  for (int j = 0; j < nw; j++) args[nc + nx + j] = param(va, "w", pt[nc + nx + j]);
  kdc_value_id L = vjp_loss(va, body, args, cbar, ybar, nc, map);
  for (int i = 0; i < nc + nx; i++) wrt[i] = args[i];
  for (int u = 0; u < nu; u++) wrt[nc + nx + u] = map[use[u].node];
  kdc_status st = kdc_ir_take_error(va);
  if (!st) st = kdc_autodiff(va, L, wrt, (size_t)(nc + nx + nu), grads);
  if (st) { /* reported through the caller's builder (sticky) */
    set_error(f, st);
    free(map);
    return;
  }
  /* where each use's result cotangent and lhs ride: -1 nowhere (no
   * cotangent), else the index in outs (dx_t pieces are shared) */
  kdc_value_id outs[96];
  kdc_type ot[96];
  int z_at[32], a_at[32], no = nx + nc;
  for (int u = 0; u < nu; u++) {
    kdc_value_id z = grads[nc + nx + u];
    z_at[u] = a_at[u] = -1;
    if (z == KDC_NO_VALUE) continue;
    for (int q = 0; q < nx && z_at[u] < 0; q++)
      if (grads[nc + q] == z) z_at[u] = q;
    if (z_at[u] < 0) {
      z_at[u] = no;
      ot[no] = *kdc_ir_type(va, z);
      outs[no++] = z;
    }
    if (use[u].other < 0) {
      a_at[u] = no;
      outs[no] = map[body->nodes[use[u].node].in[0]];
      ot[no] = *kdc_ir_type(va, outs[no]);
      no++;
    }
  }
  for (int i = 0; i < nc + nx; i++)
    if (grads[i] == KDC_NO_VALUE)
      grads[i] = kdc_ir_splat(va, KDC_DTYPE_F32, pt[i]->rank, pt[i]->dims, 0.0);
  for (int i = 0; i < nc; i++) kdc_ir_add_result(va, grads[i], "cbar");
  for (int q = 0; q < nx; q++) outs[q] = grads[nc + q], ot[q] = *pt[nc + q];
  for (int i = 0; i < nc; i++) outs[nx + i] = grads[i], ot[nx + i] = *pt[i];
  kdc_ir_add_result(va, kdc_pass_pack(va, no, outs, lead, Fa), "y");
  kdc_value_id ops[96];
  int o = 0;
  for (int i = 0; i < nc; i++) ops[o++] = kdc_ir_splat(f, KDC_DTYPE_F32, pt[i]->rank, pt[i]->dims, 0.0);
  for (int i = 0; i < nc; i++) ops[o++] = ct_rev[i];
  for (int q = 0; q < nx; q++) ops[o++] = xs_rev[q];
  ops[o++] = g_rev;
  for (int j = 0; j < nw; j++) ops[o++] = in[nc + nx + j];
  kdc_value_id as = kdc_ir_scan(f, va, T, nc, nc + nx + 1, o, ops);
  int64_t col[96]; /* column of outs[k] in scan A's rows */
  off = 0;
  for (int k = 0; k < no; k++) {
    col[k] = off;
    off += kdc_type_numel(&ot[k]) / lead / Fa;
  }
  for (int q = 0; q < nx; q++)
    kdc_grad_accum(c, in[nc + q],
                   kdc_ir_reverse(f, kdc_pass_piece(f, as, 0, T, col[q], pt[nc + q], lead, false, Fa), 1, &zero));
  int64_t cbar_off = col[nx];
  for (int i = 0; i < nc; i++)
    kdc_grad_accum(c, in[i], kdc_pass_piece(f, as, T - 1, T, col[nx + i], pt[i], lead, true, Fa));
  /* the weights of dot_uses: per use, ONE dot over all steps of the lhs
   * rows [T, ..] and the result's cotangent rows (both in scan A's
   * reversed time), the contraction extended by the step dim */
  for (int u = 0; u < nu; u++) {
    if (z_at[u] < 0) continue;
    const kdc_node *bn = &body->nodes[use[u].node];
    kdc_type bt = bn->type, lt = body->nodes[bn->in[0]].type;
    kdc_attr_dot d = bn->attr.dot;
    for (int i = 0; i < d.lhs_contract.n; i++) d.lhs_contract.v[i]++;
    kdc_value_id zs = kdc_pass_piece(f, as, 0, T, col[z_at[u]], &bt, lead, false, Fa), ls;
    int oi = use[u].other;
    if (oi < 0) ls = kdc_pass_piece(f, as, 0, T, col[a_at[u]], &lt, lead, false, Fa);
    else ls = oi < nc ? ct_rev[oi] : xs_rev[oi - nc];
    kdc_value_id w = in[nc + nx + use[u].w];
    kdc_value_id zf = kdc_ir_dot(f, ls, w, &d); /* never used: the rule's operand */
    if (zf == KDC_NO_VALUE) continue;             /* the builder's sticky error reports it */
    kdc_node fwd = f->nodes[zf]; /* after the append: the node array may have moved */
    kdc_grad_accum(c, w, kdc_grad_dot_operand(f, &fwd, 1, zs));
  }
  /* 3. scan B, the gradients of the other weights: carries acc_j (zero,
   * sums only); sequences c_t, x_t, the cotangent entering each reverse
   * step (zero, then scan A's cbar' one row later) and ybar_t;
   * y_t = [acc'_j..] */
  int bj[32], nb = 0;
  const kdc_type *bt[32];
  for (int j = 0; j < nw; j++)
    if (!by_dot[j]) bt[nb] = pt[nc + nx + j], bj[nb++] = j;
  if (nb > 0) {
    int64_t Fb = packs_feat(bt, nb, F) ? F : 1;
    kdc_value_id cin[32];
    off = cbar_off;
    for (int i = 0; i < nc; i++) {
      int64_t d1[KDC_MAX_RANK + 1];
      d1[0] = 1;
      for (int d = 0; d < pt[i]->rank; d++) d1[d + 1] = pt[i]->dims[d];
      kdc_value_id z = kdc_ir_splat(f, KDC_DTYPE_F32, pt[i]->rank + 1, d1, 0.0);
      cin[i] = T == 1 ? z
                      : kdc_ir_concat(f, 2, (kdc_value_id[]){z, kdc_pass_piece(f, as, 0, T - 1, off, pt[i],
                                                                        lead, false, Fa)}, 0);
      off += kdc_type_numel(pt[i]) / lead / Fa;
    }
    kdc_func *vw = kdc_ir_func_create(m, fname(m, body->name, "wgrad"));
    kdc_ir_set_origin(vw, f->cur_origin);
    kdc_value_id acc[32];
    for (int k = 0; k < nb; k++) acc[k] = param(vw, "acc", bt[k]);
    for (int i = 0; i < nc; i++) args[i] = param(vw, "c_t", pt[i]);
    for (int k = 0; k < nx; k++) args[nc + k] = param(vw, "x_t", pt[nc + k]);
    for (int i = 0; i < nc; i++) cbar[i] = param(vw, "cbar_t", pt[i]);
    ybar = param(vw, "ybar_t", yt);
    for (int j = 0; j < nw; j++) args[nc + nx + j] = param(vw, "w", pt[nc + nx + j]);
    L = vjp_loss(vw, body, args, cbar, ybar, nc, map);
    for (int k = 0; k < nb; k++) wrt[k] = args[nc + nx + bj[k]];
    st = kdc_ir_take_error(vw);
    if (!st) st = kdc_autodiff(vw, L, wrt, (size_t)nb, grads);
    if (st) {
      set_error(f, st);
      free(map);
      return;
    }
    for (int k = 0; k < nb; k++) {
      outs[k] = grads[k] == KDC_NO_VALUE ? acc[k] : kdc_ir_binary(vw, KDC_OP_ADD, acc[k], grads[k]);
      kdc_ir_add_result(vw, outs[k], "acc");
    }
    kdc_ir_add_result(vw, kdc_pass_pack(vw, nb, outs, 1, Fb), "y");
    o = 0;
    for (int k = 0; k < nb; k++) ops[o++] = kdc_ir_splat(f, KDC_DTYPE_F32, bt[k]->rank, bt[k]->dims, 0.0);
    for (int i = 0; i < nc; i++) ops[o++] = ct_rev[i];
    for (int q = 0; q < nx; q++) ops[o++] = xs_rev[q];
    for (int i = 0; i < nc; i++) ops[o++] = cin[i];
    ops[o++] = g_rev;
    for (int j = 0; j < nw; j++) ops[o++] = in[nc + nx + j];
    kdc_value_id bs = kdc_ir_scan(f, vw, T, nb, 2 * nc + nx + 1, o, ops);
    off = 0;
    for (int k = 0; k < nb; k++) {
      kdc_grad_accum(c, in[nc + nx + bj[k]], kdc_pass_piece(f, bs, T - 1, T, off, bt[k], 1, true, Fb));
      off += kdc_type_numel(bt[k]) / Fb;
    }
  }
  free(map);
}
