/*
 * passes/conv_to_gemm.c: convolutions as im2col + one GEMM.
 *
 * A direct convolution kernel (codegen/body_window.c) computes every output
 * element as a K_spatial * C_in dot product in a scalar loop nest: correct,
 * but far from BLAS speed.  This pass rewrites
 *
 *   y = convolution x, w      x [N, S..., Ci], w [K..., Ci, Co], y [N, O..., Co]
 *
 * into data movement plus one dot_general that codegen/gemm.c turns into a
 * single cblas_sgemm without copies:
 *
 *   xp   = pad x, 0  low=[0, pad_low..., 0] high=[0, pad_high..., 0]
 *   s_k  = slice xp  start=[0, k_d*rd_d..., 0]  stride=[1, stride_d..., 1]
 *          (one per kernel position k = (k_0..k_{n-1}), row-major; each is
 *          [N, O..., Ci]: the input pixel that kernel tap k multiplies)
 *   p    = concatenate s_0 .. s_{K-1} dim=n+1       [N, O..., K_spatial*Ci]
 *   wr   = reshape w                                [K_spatial*Ci, Co]
 *   y'   = dot_general p, wr lhs_contract=[n+1] rhs_contract=[0]
 *                                                   [N, O..., Co]
 *
 * The patch matrix p is laid out (tap, channel) along its last dim, which is
 * exactly the row-major order of w's leading dims, so wr is a free reshape
 * (an alias) and p is [M = N*prod(O) | K] row-major: GEMM operand A with
 * lda = K, no transpose copy.  The dot's result is already [N, O..., Co].
 * fuse.c puts pad, slices and concatenate into ONE kernel (the pad's users
 * are all in the concatenate's kernel, and fused kernels compute each patch
 * element by index arithmetic), so the patch matrix is the only temporary.
 * A zero pad (and an identity slice) is not emitted; a 1x1 stride-1
 * unpadded convolution is just the dot (x itself is [M | Ci]).  Negative
 * padding (cropping) is a negative pad, which pad supports.
 *
 * Numerics: the dot sums over (tap, channel) in BLAS's blocked order, the
 * interpreter's convolution in its own loop order; results agree up to f32
 * summation order (tests/passes/test_conv_to_gemm.c: relative 1e-5 scaled by
 * the contraction length K).  Padding contributes exact zeros either way.
 *
 * Left to the direct kernel:
 *   - groups > 1 (depthwise, groups == Ci, in particular), except conv_dw's
 *     depthwise weight gradient (FORM_DEPTHWISE_DW below): each group would
 *     be its own tiny GEMM (Ci/groups = 1 channel for depthwise, so K =
 *     K_spatial, e.g. 9): the patch matrix would be K_spatial times the
 *     input for a GEMM with nothing to block on, and a batched dot over
 *     groups needs the groups as a leading batch dim (a transpose copy of
 *     both operands).  The direct loop reads each input element K_spatial
 *     times from cache and does the same flops: it wins.
 *   - lhs_dilation != 1 (transposed convolutions, input gradients of strided
 *     convolutions): most patch entries would be structural zeros.
 *   - non-f32 operands, empty shapes, and more than KDC_C2G_MAX_TAPS kernel
 *     positions AND more than KDC_C2G_MAX_TAPS output positions: a fused
 *     concatenate evaluates every piece per element
 *     (codegen/kernel_body.c emit_concat), so a patch kernel costs
 *     O(pieces) per element.
 *
 * Weight gradients (passes/grad_window.c conv_dw) have it the other way
 * round: the "kernel" is an activation map (hundreds of taps) and the output
 * a few kernel taps.  With more than KDC_C2G_MAX_TAPS taps but at most that
 * many output positions, the patches are cut per OUTPUT position o instead:
 *
 *   s_o = slice xp start=[0, o*stride..., 0] stride=[1, rd..., 1]  [B, K..., F]
 *   p   = concatenate s_0 .. s_{O-1} dim=0                         [O*B, K..., F]
 *   y'  = dot_general reshape(p) [O*B, K*F], reshape(w) [K*F, Co]   [O*B, Co]
 *   y   = transpose(reshape(y') [O..., B, Co]) to [B, O..., Co]
 *
 * (for conv_dw: B = Ci, F = N images, so the GEMM contracts over every
 * image position at once, like im2col of the forward convolution.)
 * When the operands are the transposes conv_dw makes (lhs = x [N, S.., Ci]
 * as [Ci, S.., N], rhs = g [N, O.., Co] as [O.., N, Co]) and there are at
 * most KDC_C2G_MAX_TAPS output positions (however many taps), the patches are
 * cut from x itself and the GEMM reads g in place (FORM_OUTPUTS_NATURAL,
 * rewrite_outputs_natural): the patch matrix is then the forward
 * convolution's im2col [N, K.., O*Ci] (channels contiguous), where the
 * transposed form gathered x with a stride of a whole image per element
 * and copied g once more.  The transposes left unread are removed.  A GEMM
 * the runtime could not split over threads (both sides <= 64, e.g. a first
 * layer's [27, 32] over 131072 positions) runs per image instead, a batched
 * dot [N, O*Ci, Co] and a sum over the images (KDC_C2G_GEMM_BLOCK).
 *
 * Placement: after partition (the shapes are LOCAL: a batch split sees the
 * local N, an output-channel split the local Co, an input-channel split the
 * local Ci and the dot's result stays partial like the convolution's), and
 * before fuse.  The dot takes the convolution's sharding and origin; the new
 * data-movement nodes take x's sharding (same rank and dims order; they are
 * interior values nothing reads the sharding of) and the weight reshape is
 * left without one.  The one place this pass adds a collective: the
 * depthwise weight gradient whose operands the partitioner gathered along a
 * split batch is reduced over the local images and all-reduced over the
 * gathers' axes (rewrite_depthwise_dw), the gathers left unread.
 */
#include <stdlib.h>
#include <string.h>

#include "passes/passes.h"

enum { KDC_C2G_MAX_TAPS = 64 };

/* FORM_OUTPUTS_NATURAL's GEMM [O*Ci, Co] contracts over every image position
 * at once.  When neither side exceeds one block of the runtime's GEMM split
 * (RT_GEMM_ALIGN = 64 rows or columns: runtime/exec.c runs it whole, on one
 * thread) and each image has at least KDC_C2G_MIN_IMAGE_K positions, it runs
 * per image instead -- a batched GEMM the runtime splits over the images --
 * and a reduction sums the N partial products in image order (the same
 * grouping for any thread count). */
enum { KDC_C2G_GEMM_BLOCK = 64, KDC_C2G_MIN_IMAGE_K = 256 };

/* How convolution |v| is rewritten: none, one slice per kernel tap, or (a
 * weight gradient: many taps, few output positions) one slice per output
 * position (see the file comment). */
typedef enum form {
  FORM_NONE,
  FORM_TAPS,
  FORM_OUTPUTS,
  FORM_OUTPUTS_NATURAL,
  FORM_DEPTHWISE_DW
} form;

/* Whether node |v| is a transpose with permutation |perm| (rank |r|); its
 * operand in *src. */
static bool is_transpose(const kdc_func *f, kdc_value_id v, int r, const int64_t *perm,
                         kdc_value_id *src) {
  const kdc_node *nd = kdc_ir_node(f, v);
  if (nd->op != KDC_OP_TRANSPOSE || nd->attr.dims.n != r) return false;
  for (int d = 0; d < r; d++)
    if (nd->attr.dims.v[d] != perm[d]) return false;
  *src = nd->in[0];
  return true;
}

/* A weight gradient spelled by passes/grad_window.c conv_dw (groups 1):
 * lhs = transpose(x [N, S.., Ci]) to [Ci, S.., N] and rhs = transpose(g
 * [N, O.., Co]) to [O.., N, Co].  x and g in *x, *g. */
static bool natural_operands(const kdc_func *f, const kdc_node *cv, kdc_value_id *x,
                             kdc_value_id *g) {
  int r = kdc_ir_type(f, cv->in[0])->rank, n = r - 2;
  int64_t pl[KDC_MAX_RANK], pr[KDC_MAX_RANK];
  pl[0] = r - 1, pl[r - 1] = 0;
  for (int d = 0; d < n; d++) pl[d + 1] = d + 1, pr[d] = d + 1;
  pr[n] = 0, pr[n + 1] = n + 1;
  return is_transpose(f, cv->in[0], r, pl, x) && is_transpose(f, cv->in[1], r, pr, g);
}

/* |v| itself, or, where |v| is an all_gather along |dim| (the partitioner's
 * gather of a batch-split operand), its operand, the gather's attributes
 * in *coll (naxes 0 when there is none). */
static kdc_value_id ungathered(const kdc_func *f, kdc_value_id v, int64_t dim,
                               kdc_attr_coll *coll) {
  const kdc_node *nd = kdc_ir_node(f, v);
  memset(coll, 0, sizeof *coll);
  if (nd->op != KDC_OP_ALL_GATHER || nd->n_in != 1 || nd->attr.coll.dim != dim) return v;
  *coll = nd->attr.coll;
  return nd->in[0];
}

static bool same_axes(const kdc_attr_coll *a, const kdc_attr_coll *b) {
  if (a->naxes != b->naxes) return false;
  for (int i = 0; i < a->naxes; i++)
    if (a->axes[i] != b->axes[i]) return false;
  return true;
}

/* The depthwise weight gradient as conv_dw spells it (groups G, one input
 * channel per group): lhs = x [N, S.., G] reshaped to [N, S.., G, 1],
 * transposed to [1, S.., G, N] and reshaped to [1, S.., G*N]; rhs = g
 * [N, O.., G*M] transposed to [O.., N, G*M].  x and g in *x, *g.  After a
 * batch split the partitioner gathers both transposes along N (the grouped
 * lhs cannot run split): then x and g are the LOCAL operands (local N) and
 * *coll the gathers' axes (the same for both), the weight gradient a sum of
 * per-device partial sums; *coll has naxes 0 otherwise. */
static bool depthwise_operands(const kdc_func *f, const kdc_node *cv, kdc_value_id *x,
                               kdc_value_id *g, kdc_attr_coll *coll) {
  int r = cv->type.rank, n = r - 2;
  int64_t G = cv->attr.conv.groups, pt[KDC_MAX_RANK], pr[KDC_MAX_RANK];
  const kdc_node *l = kdc_ir_node(f, cv->in[0]);
  if (l->op != KDC_OP_RESHAPE || r + 1 > KDC_MAX_RANK) return false;
  pt[0] = n + 2, pt[n + 1] = n + 1, pt[n + 2] = 0;
  for (int d = 0; d < n; d++) pt[d + 1] = d + 1, pr[d] = d + 1;
  pr[n] = 0, pr[n + 1] = n + 1;
  kdc_value_id t, rs;
  kdc_attr_coll cl, cr;
  if (!is_transpose(f, ungathered(f, l->in[0], r, &cl), r + 1, pt, &t)) return false;
  const kdc_node *rn = kdc_ir_node(f, t);
  if (rn->op != KDC_OP_RESHAPE || rn->type.dims[n + 2] != 1 || rn->type.dims[n + 1] != G)
    return false;
  rs = rn->in[0];
  const kdc_type *xt = kdc_ir_type(f, rs);
  if (xt->rank != r || xt->dims[r - 1] != G ||
      !is_transpose(f, ungathered(f, cv->in[1], n, &cr), r, pr, g) || !same_axes(&cl, &cr))
    return false;
  *x = rs;
  *coll = cl;
  const kdc_type *gt = kdc_ir_type(f, *g);
  return gt->dims[r - 1] % G == 0 && gt->dims[0] == xt->dims[0];
}

static form eligible(const kdc_func *f, kdc_value_id v) {
  const kdc_node *nd = kdc_ir_node(f, v);
  if (nd->op != KDC_OP_CONVOLUTION || nd->n_in != 2) return false;
  const kdc_attr_conv *a = &nd->attr.conv;
  const kdc_type *xt = kdc_ir_type(f, nd->in[0]), *wt = kdc_ir_type(f, nd->in[1]);
  if (xt->dtype != KDC_DTYPE_F32 || wt->dtype != KDC_DTYPE_F32 ||
      nd->type.dtype != KDC_DTYPE_F32)
    return FORM_NONE;
  if (a->groups != 1) {
    int64_t outs = 1;
    bool flat = true;
    for (int d = 0; d + 2 < nd->type.rank; d++)
      outs *= nd->type.dims[d + 1], flat &= a->lhs_dilation.v[d] == 1;
    kdc_value_id x, g;
    kdc_attr_coll coll;
    return flat && outs <= KDC_C2G_MAX_TAPS && kdc_type_numel(&nd->type) > 0 &&
                   depthwise_operands(f, nd, &x, &g, &coll)
               ? FORM_DEPTHWISE_DW
               : FORM_NONE;
  }
  int n = xt->rank - 2;
  if (n < 0 || wt->rank != n + 2 || nd->type.rank != n + 2) return FORM_NONE;
  int64_t taps = 1, outs = 1;
  for (int d = 0; d < n; d++) {
    if (a->lhs_dilation.v[d] != 1) return FORM_NONE;
    taps *= wt->dims[d];
    outs *= nd->type.dims[d + 1];
  }
  if (kdc_type_numel(&nd->type) <= 0 || kdc_type_numel(xt) <= 0 || kdc_type_numel(wt) <= 0)
    return FORM_NONE;
  kdc_value_id x, g;
  if (outs <= KDC_C2G_MAX_TAPS && natural_operands(f, nd, &x, &g)) return FORM_OUTPUTS_NATURAL;
  if (taps >= 1 && taps <= KDC_C2G_MAX_TAPS) return FORM_TAPS;
  return outs <= KDC_C2G_MAX_TAPS ? FORM_OUTPUTS : FORM_NONE;
}

/* Appends a node with |sharding| and |origin|; returns its id. */
static kdc_value_id add(kdc_func *f, kdc_op op, const kdc_type *t, int n_in,
                        const kdc_value_id *in, const kdc_attrs *attr, const kdc_sharding *s,
                        const char *origin) {
  kdc_value_id v = kdc_ir_append(f, op, t, n_in, in, attr);
  kdc_node *nd = kdc_ir_node(f, v);
  if (s) nd->sharding = *s;
  else memset(&nd->sharding, 0, sizeof nd->sharding);
  nd->origin = origin;
  return v;
}

/* x (convolution |cv|'s lhs, or a value with the same spatial dims 1..n)
 * padded like |cv| pads its lhs (x itself without padding); its type in
 * *pt. */
static kdc_value_id pad_input(kdc_func *f, const kdc_node *cv, kdc_value_id x,
                              const kdc_sharding *xs, kdc_type *pt) {
  const kdc_attr_conv *a = &cv->attr.conv;
  kdc_value_id xp = x;
  const char *org = cv->origin;
  int r = pt->rank, n = r - 2;
  bool padded = false;
  for (int d = 0; d < n; d++) padded |= a->pad_low.v[d] != 0 || a->pad_high.v[d] != 0;
  if (padded) {
    kdc_type zt = kdc_type_make(KDC_DTYPE_F32, 0, NULL);
    float zero = 0.0f;
    kdc_attrs ca;
    memset(&ca, 0, sizeof ca);
    ca.constant.splat = true;
    ca.constant.data = kdc_arena_alloc(f->module->arena, sizeof zero);
    memcpy(ca.constant.data, &zero, sizeof zero);
    kdc_value_id z = add(f, KDC_OP_CONSTANT, &zt, 0, NULL, &ca, NULL, org);
    kdc_attrs pa;
    memset(&pa, 0, sizeof pa);
    pa.pad.low.n = pa.pad.high.n = pa.pad.interior.n = r;
    for (int d = 0; d < n; d++) {
      pa.pad.low.v[d + 1] = a->pad_low.v[d];
      pa.pad.high.v[d + 1] = a->pad_high.v[d];
      pt->dims[d + 1] += a->pad_low.v[d] + a->pad_high.v[d];
    }
    kdc_value_id ops[2] = {x, z};
    xp = add(f, KDC_OP_PAD, pt, 2, ops, &pa, xs, org);
  }
  return xp;
}

/* The patch matrix: for every position k of |grid| (the n spatial dims,
 * row-major) the strided slice of the padded input |xp| (type |pt|) that
 * starts at k*step and takes len elements stride apart along each spatial
 * dim (all of dims 0 and r-1), concatenated along |cdim|.  An identity
 * slice is xp itself; one piece is not concatenated. */
static kdc_value_id cut_patches(kdc_func *f, kdc_value_id xp, const kdc_type *pt,
                                const int64_t *grid, const int64_t *step, const int64_t *len,
                                const int64_t *stride, int cdim, const kdc_sharding *xs,
                                const char *org) {
  int r = pt->rank, n = r - 2;
  int64_t count = 1;
  for (int d = 0; d < n; d++) count *= grid[d];
  kdc_value_id *pieces = kdc_xmalloc((size_t)count * sizeof *pieces);
  kdc_type st = *pt;
  for (int d = 0; d < n; d++) st.dims[d + 1] = len[d];
  for (int64_t t = 0; t < count; t++) {
    int64_t k[KDC_MAX_RANK], rem = t;
    for (int d = n; d-- > 0;) {
      k[d] = rem % grid[d];
      rem /= grid[d];
    }
    kdc_attrs sa;
    memset(&sa, 0, sizeof sa);
    sa.slice.start.n = sa.slice.limit.n = sa.slice.stride.n = r;
    sa.slice.limit.v[0] = pt->dims[0], sa.slice.stride.v[0] = 1;
    sa.slice.limit.v[r - 1] = pt->dims[r - 1], sa.slice.stride.v[r - 1] = 1;
    bool identity = true;
    for (int d = 0; d < n; d++) {
      int64_t b = k[d] * step[d];
      sa.slice.start.v[d + 1] = b;
      sa.slice.limit.v[d + 1] = b + (len[d] - 1) * stride[d] + 1;
      sa.slice.stride.v[d + 1] = stride[d];
      identity &= b == 0 && stride[d] == 1 && len[d] == pt->dims[d + 1];
    }
    pieces[t] = identity ? xp : add(f, KDC_OP_SLICE, &st, 1, &xp, &sa, xs, org);
  }
  kdc_value_id patches = pieces[0];
  if (count > 1) {
    kdc_type ct = st;
    ct.dims[cdim] *= count;
    kdc_attrs ca;
    memset(&ca, 0, sizeof ca);
    ca.dim = cdim;
    patches = add(f, KDC_OP_CONCAT, &ct, (int)count, pieces, &ca, xs, org);
  }
  free(pieces);
  return patches;
}

/* A 2-D dot y' [O*B, Co] (output positions o-major) as convolution |cv|'s
 * [B, O.., Co]: reshape to [O.., B, Co], transpose. */
static kdc_value_id to_conv_layout(kdc_func *f, kdc_value_id y, const kdc_node *cv) {
  const kdc_type *yt = &cv->type;
  int r = yt->rank, n = r - 2;
  kdc_type ot = *yt;
  for (int d = 0; d < n; d++) ot.dims[d] = yt->dims[d + 1];
  ot.dims[n] = yt->dims[0], ot.dims[n + 1] = yt->dims[r - 1];
  kdc_attrs za;
  memset(&za, 0, sizeof za);
  y = add(f, KDC_OP_RESHAPE, &ot, 1, &y, &za, NULL, cv->origin);
  kdc_attrs ta;
  memset(&ta, 0, sizeof ta);
  ta.dims.n = r;
  ta.dims.v[0] = n;
  for (int d = 0; d < n; d++) ta.dims.v[d + 1] = d;
  ta.dims.v[r - 1] = n + 1;
  return add(f, KDC_OP_TRANSPOSE, yt, 1, &y, &ta, &cv->sharding, cv->origin);
}

/* Appends the im2col + GEMM form of convolution |v|; returns the dot. */
static kdc_value_id rewrite(kdc_func *f, kdc_value_id v) {
  kdc_node cv = *kdc_ir_node(f, v); /* copy: appends may move the node array */
  const kdc_attr_conv *a = &cv.attr.conv;
  kdc_value_id w = cv.in[1];
  kdc_type xt = *kdc_ir_type(f, cv.in[0]), wt = *kdc_ir_type(f, w), yt = cv.type;
  kdc_sharding xs = kdc_ir_node(f, cv.in[0])->sharding;
  const char *org = cv.origin;
  int n = xt.rank - 2, r = xt.rank;
  int64_t ci = xt.dims[r - 1], co = wt.dims[n + 1], taps = 1;
  int64_t step[KDC_MAX_RANK], len[KDC_MAX_RANK];
  for (int d = 0; d < n; d++)
    taps *= wt.dims[d], step[d] = a->rhs_dilation.v[d], len[d] = yt.dims[d + 1];
  kdc_type pt = xt;
  kdc_value_id xp = pad_input(f, &cv, cv.in[0], &xs, &pt);
  /* one strided slice per kernel tap, taps in row-major order of w */
  kdc_value_id patches =
      cut_patches(f, xp, &pt, wt.dims, step, len, a->stride.v, r - 1, &xs, org);

  /* The kernel as a [taps*Ci, Co] matrix: a free reshape. */
  int64_t wd[2] = {taps * ci, co};
  kdc_type wrt = kdc_type_make(KDC_DTYPE_F32, 2, wd);
  kdc_attrs ra;
  memset(&ra, 0, sizeof ra);
  kdc_value_id wr = add(f, KDC_OP_RESHAPE, &wrt, 1, &w, &ra, NULL, org);

  kdc_attrs da;
  memset(&da, 0, sizeof da);
  da.dot.lhs_contract.n = da.dot.rhs_contract.n = 1;
  da.dot.lhs_contract.v[0] = r - 1;
  da.dot.rhs_contract.v[0] = 0;
  kdc_value_id ops[2] = {patches, wr};
  return add(f, KDC_OP_DOT, &yt, 2, ops, &da, &cv.sharding, org);
}

/* The per-output-position form of convolution |v| (FORM_OUTPUTS: a weight
 * gradient, whose "kernel" is an activation map and whose output is a few
 * kernel taps); returns the final transpose. */
static kdc_value_id rewrite_outputs(kdc_func *f, kdc_value_id v) {
  kdc_node cv = *kdc_ir_node(f, v);
  const kdc_attr_conv *a = &cv.attr.conv;
  kdc_value_id w = cv.in[1];
  kdc_type xt = *kdc_ir_type(f, cv.in[0]), wt = *kdc_ir_type(f, w), yt = cv.type;
  kdc_sharding xs = kdc_ir_node(f, cv.in[0])->sharding;
  const char *org = cv.origin;
  int n = xt.rank - 2, r = xt.rank;
  int64_t b = xt.dims[0], fi = xt.dims[r - 1], co = wt.dims[n + 1], taps = 1, outs = 1;
  for (int d = 0; d < n; d++) taps *= wt.dims[d], outs *= yt.dims[d + 1];
  kdc_type pt = xt;
  kdc_value_id xp = pad_input(f, &cv, cv.in[0], &xs, &pt);
  /* output position o reads xp[:, o*s + k*rd, :] for every tap k: one
   * strided slice [B, K.., F] per o, stacked o-major on dim 0 */
  kdc_value_id patches = cut_patches(f, xp, &pt, yt.dims + 1, a->stride.v, wt.dims,
                                     a->rhs_dilation.v, 0, &xs, org);
  kdc_attrs za;
  memset(&za, 0, sizeof za);
  int64_t pd[2] = {outs * b, taps * fi}, wd[2] = {taps * fi, co}, dd[2] = {outs * b, co};
  kdc_type p2 = kdc_type_make(KDC_DTYPE_F32, 2, pd), w2 = kdc_type_make(KDC_DTYPE_F32, 2, wd);
  kdc_type d2 = kdc_type_make(KDC_DTYPE_F32, 2, dd);
  kdc_value_id pm = add(f, KDC_OP_RESHAPE, &p2, 1, &patches, &za, NULL, org);
  kdc_value_id wm = add(f, KDC_OP_RESHAPE, &w2, 1, &w, &za, NULL, org);
  kdc_attrs da;
  memset(&da, 0, sizeof da);
  da.dot.lhs_contract.n = da.dot.rhs_contract.n = 1;
  da.dot.lhs_contract.v[0] = 1;
  da.dot.rhs_contract.v[0] = 0;
  kdc_value_id ops[2] = {pm, wm};
  return to_conv_layout(f, add(f, KDC_OP_DOT, &d2, 2, ops, &da, NULL, org), &cv);
}

/* FORM_OUTPUTS_NATURAL: the weight gradient dW[Ci, O.., Co] = sum over
 * (n, k..) of x[n, o*s + k*rd.., ci] g[n, k.., co] computed on x and g
 * themselves, in their own row-major layouts (no transposed copies):
 *
 *   s_o = slice xp start=[0, o*s.., 0] stride=[1, rd.., 1]      [N, K.., Ci]
 *   p   = concatenate s_0 .. s_{O-1} dim=r-1                    [N, K.., O*Ci]
 *   y'  = dot_general p, g contracting (n, k..) on both          [O*Ci, Co]
 *   y   = transpose(reshape(y') [O.., Ci, Co]) to [Ci, O.., Co]
 *
 * p is exactly the forward convolution's patch matrix (im2col, taps = O),
 * read by the GEMM as a transposed operand; g is read in place. */
static kdc_value_id rewrite_outputs_natural(kdc_func *f, kdc_value_id v) {
  kdc_node cv = *kdc_ir_node(f, v);
  const kdc_attr_conv *a = &cv.attr.conv;
  kdc_value_id x = KDC_NO_VALUE, g = KDC_NO_VALUE;
  natural_operands(f, &cv, &x, &g);
  kdc_type xt = *kdc_ir_type(f, x), gt = *kdc_ir_type(f, g), yt = cv.type;
  kdc_sharding xs = kdc_ir_node(f, x)->sharding;
  const char *org = cv.origin;
  int n = xt.rank - 2, r = xt.rank;
  int64_t ci = xt.dims[r - 1], co = gt.dims[r - 1], outs = 1;
  for (int d = 0; d < n; d++) outs *= yt.dims[d + 1];
  kdc_type pt = xt;
  kdc_value_id xp = pad_input(f, &cv, x, &xs, &pt);
  kdc_value_id patches = cut_patches(f, xp, &pt, yt.dims + 1, a->stride.v, gt.dims + 1,
                                     a->rhs_dilation.v, r - 1, &xs, org);
  kdc_attrs da;
  memset(&da, 0, sizeof da);
  int64_t dd[2] = {outs * ci, co};
  kdc_type d2 = kdc_type_make(KDC_DTYPE_F32, 2, dd);
  kdc_value_id ops[2] = {patches, g};
  int64_t nimg = xt.dims[0], per = kdc_type_numel(&gt) / (nimg * co);
  if (nimg >= 2 && dd[0] <= KDC_C2G_GEMM_BLOCK && co <= KDC_C2G_GEMM_BLOCK &&
      per >= KDC_C2G_MIN_IMAGE_K) {
    /* per image: [N, K.., O*Ci] x [N, K.., Co] -> [N, O*Ci, Co] (batch dim 0;
     * no reshape of the patches, which would pull their concatenate out of its
     * per-piece loops), then the sum over the images (a column reduction) */
    int64_t bd[3] = {nimg, dd[0], co};
    kdc_type b3 = kdc_type_make(KDC_DTYPE_F32, 3, bd);
    da.dot.lhs_batch.n = da.dot.rhs_batch.n = 1;
    da.dot.lhs_contract.n = da.dot.rhs_contract.n = n;
    for (int d = 0; d < n; d++) da.dot.lhs_contract.v[d] = da.dot.rhs_contract.v[d] = d + 1;
    kdc_value_id bdot = add(f, KDC_OP_DOT, &b3, 2, ops, &da, NULL, org);
    kdc_attrs ra;
    memset(&ra, 0, sizeof ra);
    ra.reduce.kind = KDC_RED_SUM;
    ra.reduce.dims.n = 1;
    return to_conv_layout(f, add(f, KDC_OP_REDUCE, &d2, 1, &bdot, &ra, NULL, org), &cv);
  }
  da.dot.lhs_contract.n = da.dot.rhs_contract.n = n + 1;
  for (int d = 0; d <= n; d++) da.dot.lhs_contract.v[d] = da.dot.rhs_contract.v[d] = d;
  return to_conv_layout(f, add(f, KDC_OP_DOT, &d2, 2, ops, &da, NULL, org), &cv);
}

/* FORM_DEPTHWISE_DW: dW[0, o.., c] = sum over (n, k..) of
 * x[n, o*s + k*rd.., c/M] g[n, k.., c] with no GEMM shape (one input
 * channel per group): per output position o a column reduction
 *
 *   r_o = reduce sum (slice xp start=[0, o*s.., 0] stride=[1, rd.., 1]
 *                     [N, K.., G], repeated M times per channel) * g
 *         dims=[0..n]                                            [G*M]
 *   y   = reshape(concatenate r_0 .. r_{O-1} as [1, G*M] rows)   [1, O.., G*M]
 *
 * each one pass over its slice of x and over g, vectorised over the
 * channels (codegen's column reductions), where the grouped convolution
 * walks g with the stride of a channel row per multiply.  When the
 * partitioner gathered both operands along a split batch (see
 * depthwise_operands), the reductions run over the local images and one
 * all_reduce over the gathers' axes sums the [O, G*M] partial results
 * (the runtime's fixed order: deterministic); the gathers go unread. */
static kdc_value_id rewrite_depthwise_dw(kdc_func *f, kdc_value_id v) {
  kdc_node cv = *kdc_ir_node(f, v);
  const kdc_attr_conv *a = &cv.attr.conv;
  kdc_value_id x = KDC_NO_VALUE, g = KDC_NO_VALUE;
  kdc_attr_coll coll;
  depthwise_operands(f, &cv, &x, &g, &coll);
  kdc_type xt = *kdc_ir_type(f, x), gt = *kdc_ir_type(f, g), yt = cv.type;
  kdc_sharding xs = kdc_ir_node(f, x)->sharding;
  const char *org = cv.origin;
  int n = xt.rank - 2, r = xt.rank;
  int64_t G = a->groups, co = gt.dims[r - 1], M = co / G, outs = 1;
  for (int d = 0; d < n; d++) outs *= yt.dims[d + 1];
  kdc_type pt = xt;
  kdc_value_id xp = pad_input(f, &cv, x, &xs, &pt);
  kdc_value_id *rows = kdc_xmalloc((size_t)outs * sizeof *rows);
  kdc_attrs za;
  memset(&za, 0, sizeof za);
  kdc_type st = gt, bt = gt, rt = kdc_type_make(KDC_DTYPE_F32, 1, &co);
  st.dims[r - 1] = G;
  for (int d = 0; d < r; d++) bt.dims[d] = st.dims[d];
  bt.dims[r] = M, bt.rank = r + 1;
  int64_t row[2] = {1, co};
  kdc_type r2 = kdc_type_make(KDC_DTYPE_F32, 2, row);
  for (int64_t t = 0; t < outs; t++) {
    int64_t o[KDC_MAX_RANK], rem = t;
    for (int d = n; d-- > 0;) {
      o[d] = rem % yt.dims[d + 1];
      rem /= yt.dims[d + 1];
    }
    kdc_attrs sa;
    memset(&sa, 0, sizeof sa);
    sa.slice.start.n = sa.slice.limit.n = sa.slice.stride.n = r;
    sa.slice.limit.v[0] = pt.dims[0], sa.slice.stride.v[0] = 1;
    sa.slice.limit.v[r - 1] = G, sa.slice.stride.v[r - 1] = 1;
    for (int d = 0; d < n; d++) {
      int64_t s0 = o[d] * a->stride.v[d], rd = a->rhs_dilation.v[d];
      sa.slice.start.v[d + 1] = s0;
      sa.slice.limit.v[d + 1] = s0 + (gt.dims[d + 1] - 1) * rd + 1;
      sa.slice.stride.v[d + 1] = rd;
    }
    kdc_value_id p = add(f, KDC_OP_SLICE, &st, 1, &xp, &sa, &xs, org);
    if (M > 1) { /* channel c of g reads input channel c / M */
      kdc_attrs ba;
      memset(&ba, 0, sizeof ba);
      ba.dims.n = r;
      for (int d = 0; d < r; d++) ba.dims.v[d] = d;
      p = add(f, KDC_OP_BROADCAST, &bt, 1, &p, &ba, NULL, org);
      p = add(f, KDC_OP_RESHAPE, &gt, 1, &p, &za, NULL, org);
    }
    kdc_value_id ops[2] = {p, g};
    kdc_value_id prod = add(f, KDC_OP_MUL, &gt, 2, ops, &za, NULL, org);
    kdc_attrs ra;
    memset(&ra, 0, sizeof ra);
    ra.reduce.kind = KDC_RED_SUM;
    ra.reduce.dims.n = n + 1;
    for (int d = 0; d <= n; d++) ra.reduce.dims.v[d] = d;
    kdc_value_id red = add(f, KDC_OP_REDUCE, &rt, 1, &prod, &ra, NULL, org);
    rows[t] = outs > 1 ? add(f, KDC_OP_RESHAPE, &r2, 1, &red, &za, NULL, org) : red;
  }
  kdc_value_id y = rows[0];
  if (outs > 1) {
    int64_t cd[2] = {outs, co};
    kdc_type ct = kdc_type_make(KDC_DTYPE_F32, 2, cd);
    kdc_attrs ca;
    memset(&ca, 0, sizeof ca);
    ca.dim = 0;
    y = add(f, KDC_OP_CONCAT, &ct, (int)outs, rows, &ca, NULL, org);
  }
  free(rows);
  if (coll.naxes > 0) { /* per-device partial sums over the local images */
    kdc_attrs aa;
    memset(&aa, 0, sizeof aa);
    aa.coll = coll;
    aa.coll.dim = 0;
    kdc_type yt2 = *kdc_ir_type(f, y); /* a copy: the append may move the nodes */
    y = add(f, KDC_OP_ALL_REDUCE, &yt2, 1, &y, &aa, NULL, org);
  }
  return add(f, KDC_OP_RESHAPE, &yt, 1, &y, &za, &cv.sharding, org);
}

static void run_func(kdc_func *f) {
  size_t n_old = f->n_nodes;
  bool any = false;
  for (size_t i = 0; i < n_old && !any; i++) any = eligible(f, (kdc_value_id)i) != FORM_NONE;
  if (!any) return;
  /* first[i] .. first[i+1]: the new nodes of convolution i (none if not). */
  size_t *first = kdc_xmalloc((n_old + 1) * sizeof *first);
  kdc_value_id *dot = kdc_xmalloc(n_old * sizeof *dot);
  for (size_t i = 0; i < n_old; i++) {
    first[i] = f->n_nodes;
    form fm = eligible(f, (kdc_value_id)i);
    dot[i] = fm == FORM_TAPS              ? rewrite(f, (kdc_value_id)i)
             : fm == FORM_OUTPUTS         ? rewrite_outputs(f, (kdc_value_id)i)
             : fm == FORM_OUTPUTS_NATURAL ? rewrite_outputs_natural(f, (kdc_value_id)i)
             : fm == FORM_DEPTHWISE_DW    ? rewrite_depthwise_dw(f, (kdc_value_id)i)
                                          : KDC_NO_VALUE;
  }
  first[n_old] = f->n_nodes;
  kdc_pass_splice(f, n_old, first, dot);
  kdc_pass_dce_func(f, NULL); /* transposed operands the natural form no longer reads */
  free(first);
  free(dot);
}

kdc_status kdc_pass_conv_to_gemm(kdc_module *m, const kdc_pass_options *opt) {
  (void)opt;
  for (size_t i = 0; i < m->n_funcs; i++) run_func(m->funcs[i]);
  return NULL;
}
