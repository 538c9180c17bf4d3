/*
 * passes/grad_window.c: the VJP rules of the windowed and indexed ops
 * (rows in passes/grad_rules.c's table; docs/training.md).  Per spatial dim,
 * with stride s, padding (lo, hi), input dilation ld, kernel dilation rd,
 * input size S, kernel/window size K, output size O, Gd = (O-1)s + 1 (the
 * stride-dilated cotangent) and Kd = (K-1)rd + 1:
 *
 *   convolution, d lhs, groups 1, a stride > 1 and no input dilation: one
 *     GEMM cols = g . w^T ([N*O, K*Ci]) and a col2im: per tap k, its
 *     columns padded with interior s-1 and low edge k*rd - lo (the input
 *     rows they touch), summed over the taps (the transposed convolution
 *     below would run on an input mostly made of inserted zeros).
 *   convolution, d lhs (otherwise): a convolution of g with the spatially
 *     reversed kernel
 *     whose channel dims are swapped per group, lhs_dilation = s,
 *     rhs_dilation = rd, stride = ld, pad_low = Kd - 1 - lo,
 *     pad_high = (S-1) ld - Gd - pad_low + Kd, the same groups (the
 *     transposed convolution; output size S).
 *   convolution, d rhs: the batch is the contraction: lhs = x as
 *     [Ci, S.., N], rhs = g as [O.., N, Co], stride = rd, rhs_dilation = s,
 *     lhs_dilation = ld, pad_low = lo, pad_high = Kd - 1 + Gd - Sd - lo
 *     (Sd = (S-1) ld + 1), giving [Ci, K.., Co], transposed to the kernel
 *     layout.  groups G > 1: the groups move into the contraction, lhs = x
 *     as [Cig, S.., G*N] (group major) and the same conv with groups = G
 *     pairs group g's N images with output channels g*Cog.. (XLA's
 *     batch_group_count, spelled with feature groups), giving [Cig, K.., Co]
 *     with exactly the needed work.
 *   reduce_window sum: reduce_window sum (window K, dilation rd, stride 1)
 *     of g padded with interior s-1 and edges (Kd-1-lo, (S-1) - Gd - lo' + Kd).
 *   reduce_window max/min: select_and_scatter (the first max of each window
 *     gets the window's g: XLA / JAX / TF MaxPoolGrad semantics).
 *   select_and_scatter: no rule (second-order max pooling).
 *   gather: table gets scatter_add(ids, g) (out-of-range ids dropped).
 *   scatter_add: updates get gather(g, ids), zero where the id is out of range.
 *   reverse: reverse of g on the same dims.
 */
#include <string.h>

#include "passes/passes.h"

static kdc_value_id transpose(kdc_func *f, kdc_value_id x, int r, const int64_t *perm) {
  (void)r;
  return kdc_ir_transpose(f, x, perm);
}

static kdc_value_id reshape(kdc_func *f, kdc_value_id x, int r, const int64_t *dims) {
  return kdc_ir_reshape(f, x, r, dims);
}

/* d lhs of a strided convolution |n| (groups 1, no input dilation) as one
 * GEMM and a col2im: cols = g [N*O, Co] . w [K*Ci, Co]^T, then tap k's
 * columns [N, O.., Ci] land at input rows o*s + k*rd - lo: a pad with
 * interior s-1 and edges (k*rd - lo, the rest; negative edges crop), summed
 * over the taps. */
static kdc_value_id conv_dx_gemm(kdc_func *f, const kdc_node *n, kdc_value_id g) {
  const kdc_attr_conv *a = &n->attr.conv;
  kdc_type xs = *kdc_ir_type(f, n->in[0]), ws = *kdc_ir_type(f, n->in[1]), ys = n->type;
  int ns = xs.rank - 2, r = xs.rank;
  int64_t ci = ws.dims[ns], co = ws.dims[ns + 1], taps = 1, outs = 1;
  for (int d = 0; d < ns; d++) taps *= ws.dims[d], outs *= ys.dims[d + 1];
  int64_t d2[2] = {xs.dims[0] * outs, co};
  kdc_value_id g2 = reshape(f, g, 2, d2);
  d2[0] = taps * ci;
  kdc_value_id w2 = reshape(f, n->in[1], 2, d2);
  kdc_attr_dot da;
  memset(&da, 0, sizeof da);
  da.lhs_contract.n = da.rhs_contract.n = 1;
  da.lhs_contract.v[0] = 1, da.rhs_contract.v[0] = 1;
  kdc_value_id cols = kdc_ir_dot(f, g2, w2, &da); /* [N*O, K*Ci] */
  int64_t cd[KDC_MAX_RANK];
  for (int d = 0; d <= ns; d++) cd[d] = ys.dims[d];
  cd[ns + 1] = taps, cd[ns + 2] = ci;
  cols = reshape(f, cols, ns + 3, cd);
  kdc_value_id zero = kdc_ir_scalar(f, KDC_DTYPE_F32, 0.0), sum = KDC_NO_VALUE;
  for (int64_t t = 0; t < taps; t++) {
    int64_t st[KDC_MAX_RANK] = {0}, lim[KDC_MAX_RANK], one[KDC_MAX_RANK], k[KDC_MAX_RANK];
    int64_t lo[KDC_MAX_RANK] = {0}, hi[KDC_MAX_RANK] = {0}, in[KDC_MAX_RANK] = {0}, rem = t;
    for (int d = ns; d-- > 0;) k[d] = rem % ws.dims[d], rem /= ws.dims[d];
    for (int d = 0; d < ns + 3; d++) lim[d] = cd[d], one[d] = 1;
    st[ns + 1] = t, lim[ns + 1] = t + 1;
    kdc_value_id c = kdc_ir_slice(f, cols, st, lim, one);
    int64_t pd[KDC_MAX_RANK];
    for (int d = 0; d <= ns; d++) pd[d] = ys.dims[d];
    pd[ns + 1] = ci;
    c = reshape(f, c, r, pd);
    for (int d = 0; d < ns; d++) {
      int64_t s = a->stride.v[d], O = ys.dims[d + 1];
      lo[d + 1] = k[d] * a->rhs_dilation.v[d] - a->pad_low.v[d];
      in[d + 1] = s - 1;
      hi[d + 1] = xs.dims[d + 1] - lo[d + 1] - (O - 1) * s - 1;
    }
    c = kdc_ir_pad(f, c, zero, lo, hi, in);
    sum = sum == KDC_NO_VALUE ? c : kdc_ir_binary(f, KDC_OP_ADD, sum, c);
  }
  return sum;
}

/* d lhs of convolution |n| for cotangent |g|. */
static kdc_value_id conv_dx(kdc_func *f, const kdc_node *n, kdc_value_id g) {
  const kdc_attr_conv *a = &n->attr.conv;
  kdc_type xs = *kdc_ir_type(f, n->in[0]), ws = *kdc_ir_type(f, n->in[1]); /* nodes move */
  const kdc_type *xt = &xs, *wt = &ws;
  int ns = xt->rank - 2;
  int64_t G = a->groups, cig = wt->dims[ns], co = wt->dims[ns + 1], cog = co / G;
  bool strided = false, flat = true;
  for (int d = 0; d < ns; d++) {
    strided |= a->stride.v[d] > 1;
    flat &= a->lhs_dilation.v[d] == 1;
  }
  if (G == 1 && strided && flat) return conv_dx_gemm(f, n, g);
  int64_t dims[KDC_MAX_RANK], perm[KDC_MAX_RANK], sp[KDC_MAX_RANK];
  /* w [K.., Cig, G*Cog] -> [K.., Cig, G, Cog] -> [K.., Cog, G, Cig] -> [K.., Cog, G*Cig] */
  for (int d = 0; d < ns; d++) dims[d] = wt->dims[d], perm[d] = d, sp[d] = d;
  dims[ns] = cig, dims[ns + 1] = G, dims[ns + 2] = cog;
  kdc_value_id w = reshape(f, n->in[1], ns + 3, dims);
  perm[ns] = ns + 2, perm[ns + 1] = ns + 1, perm[ns + 2] = ns;
  w = transpose(f, w, ns + 3, perm);
  dims[ns] = cog, dims[ns + 1] = G * cig;
  w = reshape(f, w, ns + 2, dims);
  w = kdc_ir_reverse(f, w, ns, sp);
  kdc_attr_conv b;
  kdc_attr_conv_init(&b, ns);
  b.groups = G;
  for (int d = 0; d < ns; d++) {
    int64_t s = a->stride.v[d], ld = a->lhs_dilation.v[d], rd = a->rhs_dilation.v[d];
    int64_t S = xt->dims[d + 1], O = n->type.dims[d + 1], K = wt->dims[d];
    int64_t gd = (O - 1) * s + 1, kd = (K - 1) * rd + 1;
    b.stride.v[d] = ld;
    b.lhs_dilation.v[d] = s;
    b.rhs_dilation.v[d] = rd;
    b.pad_low.v[d] = kd - 1 - a->pad_low.v[d];
    b.pad_high.v[d] = (S - 1) * ld - gd - b.pad_low.v[d] + kd;
  }
  return kdc_ir_convolution(f, g, w, &b);
}

/* d rhs of convolution |n| for cotangent |g|. */
static kdc_value_id conv_dw(kdc_func *f, const kdc_node *n, kdc_value_id g) {
  const kdc_attr_conv *a = &n->attr.conv;
  kdc_type xs = *kdc_ir_type(f, n->in[0]), ws = *kdc_ir_type(f, n->in[1]); /* nodes move */
  const kdc_type *xt = &xs, *wt = &ws;
  int ns = xt->rank - 2;
  int64_t G = a->groups, cig = wt->dims[ns];
  int64_t perm[KDC_MAX_RANK];
  perm[0] = ns + 1; /* x [N, S.., Ci] -> [Ci, S.., N] */
  for (int d = 0; d < ns; d++) perm[d + 1] = d + 1;
  perm[ns + 1] = 0;
  kdc_value_id lhs;
  if (G == 1) {
    lhs = transpose(f, n->in[0], ns + 2, perm);
  } else { /* x [N, S.., G*Cig] -> [N, S.., G, Cig] -> [Cig, S.., G, N] -> [Cig, S.., G*N] */
    int64_t dims[KDC_MAX_RANK];
    for (int d = 0; d <= ns; d++) dims[d] = xt->dims[d];
    dims[ns + 1] = G, dims[ns + 2] = cig;
    lhs = reshape(f, n->in[0], ns + 3, dims);
    perm[0] = ns + 2;
    for (int d = 0; d < ns; d++) perm[d + 1] = d + 1;
    perm[ns + 1] = ns + 1, perm[ns + 2] = 0;
    lhs = transpose(f, lhs, ns + 3, perm);
    dims[0] = cig;
    for (int d = 0; d < ns; d++) dims[d + 1] = xt->dims[d + 1];
    dims[ns + 1] = G * xt->dims[0];
    lhs = reshape(f, lhs, ns + 2, dims);
  }
  for (int d = 0; d < ns; d++) perm[d] = d + 1; /* g [N, O.., Co] -> [O.., N, Co] */
  perm[ns] = 0, perm[ns + 1] = ns + 1;
  kdc_value_id rhs = transpose(f, g, ns + 2, perm);
  kdc_attr_conv b;
  kdc_attr_conv_init(&b, ns);
  b.groups = G;
  for (int d = 0; d < ns; d++) {
    int64_t s = a->stride.v[d], ld = a->lhs_dilation.v[d], rd = a->rhs_dilation.v[d];
    int64_t S = xt->dims[d + 1], O = n->type.dims[d + 1], K = wt->dims[d];
    int64_t gd = (O - 1) * s + 1, kd = (K - 1) * rd + 1, sd = (S - 1) * ld + 1;
    b.stride.v[d] = rd;
    b.rhs_dilation.v[d] = s;
    b.lhs_dilation.v[d] = ld;
    b.pad_low.v[d] = a->pad_low.v[d];
    b.pad_high.v[d] = kd - 1 + gd - sd - a->pad_low.v[d];
  }
  kdc_value_id full = kdc_ir_convolution(f, lhs, rhs, &b); /* [Cig, K.., Co] */
  for (int d = 0; d < ns; d++) perm[d] = d + 1;
  perm[ns] = 0, perm[ns + 1] = ns + 1;
  return transpose(f, full, ns + 2, perm); /* [K.., Cig, Co] */
}

void kdc_vjp_convolution(kdc_grad_ctx *c, const kdc_node *n, kdc_value_id v, kdc_value_id g) {
  kdc_func *f = kdc_grad_func(c);
  (void)v;
  if (kdc_grad_wants(c, n->in[0])) kdc_grad_accum(c, n->in[0], conv_dx(f, n, g));
  if (kdc_grad_wants(c, n->in[1])) kdc_grad_accum(c, n->in[1], conv_dw(f, n, g));
}

void kdc_vjp_reduce_window(kdc_grad_ctx *c, const kdc_node *n, kdc_value_id v, kdc_value_id g) {
  kdc_func *f = kdc_grad_func(c);
  const kdc_attr_window *a = &n->attr.window;
  (void)v;
  if (!kdc_grad_wants(c, n->in[0])) return;
  if (a->kind != KDC_RED_SUM) {
    kdc_grad_accum(c, n->in[0], kdc_ir_select_and_scatter(f, n->in[0], g, a));
    return;
  }
  kdc_type xs = *kdc_ir_type(f, n->in[0]);
  const kdc_type *xt = &xs;
  int r = xt->rank;
  int64_t lo[KDC_MAX_RANK], hi[KDC_MAX_RANK], in[KDC_MAX_RANK];
  kdc_attr_window b;
  kdc_attr_window_init(&b, KDC_RED_SUM, r);
  for (int d = 0; d < r; d++) {
    int64_t s = a->stride.v[d], dil = a->dilation.v[d], K = a->window.v[d];
    int64_t S = xt->dims[d], O = n->type.dims[d];
    int64_t gd = (O - 1) * s + 1, kd = (K - 1) * dil + 1;
    in[d] = s - 1;
    lo[d] = kd - 1 - a->pad_low.v[d];
    hi[d] = (S - 1) - gd - lo[d] + kd;
    b.window.v[d] = K;
    b.dilation.v[d] = dil;
  }
  kdc_value_id padded = kdc_ir_pad(f, g, kdc_ir_scalar(f, KDC_DTYPE_F32, 0.0), lo, hi, in);
  kdc_grad_accum(c, n->in[0], kdc_ir_reduce_window(f, padded, &b));
}

void kdc_vjp_gather(kdc_grad_ctx *c, const kdc_node *n, kdc_value_id v, kdc_value_id g) {
  kdc_func *f = kdc_grad_func(c);
  (void)v;
  if (kdc_grad_wants(c, n->in[0]))
  {
    kdc_type t = *kdc_ir_type(f, n->in[0]);
    kdc_grad_accum(c, n->in[0], kdc_ir_scatter_add(f, n->in[1], g, &t));
  }
}

void kdc_vjp_scatter_add(kdc_grad_ctx *c, const kdc_node *n, kdc_value_id v, kdc_value_id g) {
  kdc_func *f = kdc_grad_func(c);
  (void)v;
  if (!kdc_grad_wants(c, n->in[1])) return;
  kdc_type is = *kdc_ir_type(f, n->in[0]), us = *kdc_ir_type(f, n->in[1]); /* nodes move */
  const kdc_type *it = &is, *ut = &us;
  double V = (double)n->type.dims[0];
  kdc_value_id lo = kdc_ir_splat(f, it->dtype, it->rank, it->dims, -V);
  kdc_value_id hi = kdc_ir_splat(f, it->dtype, it->rank, it->dims, V);
  kdc_value_id ok = kdc_ir_binary(f, KDC_OP_AND, kdc_ir_compare(f, KDC_CMP_GE, n->in[0], lo),
                                  kdc_ir_compare(f, KDC_CMP_LT, n->in[0], hi));
  int64_t map[KDC_MAX_RANK];
  for (int d = 0; d < it->rank; d++) map[d] = d;
  ok = kdc_ir_broadcast(f, ok, ut->rank, ut->dims, map);
  kdc_value_id z = kdc_ir_splat(f, KDC_DTYPE_F32, ut->rank, ut->dims, 0.0);
  kdc_grad_accum(c, n->in[1], kdc_ir_select(f, ok, kdc_ir_gather(f, g, n->in[0]), z));
}

void kdc_vjp_reverse(kdc_grad_ctx *c, const kdc_node *n, kdc_value_id v, kdc_value_id g) {
  (void)v;
  kdc_grad_accum(c, n->in[0], kdc_ir_reverse(kdc_grad_func(c), g, n->attr.dims.n,
                                             n->attr.dims.v));
}
