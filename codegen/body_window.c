/*
 * codegen/body_window.c: kernel bodies of the windowed and indexed ops
 * (convolution, reduce_window, select_and_scatter, gather, scatter_add) at
 * one output multi-index, called from codegen/kernel_body.c.  Each is a loop
 * nest inside the body that visits its terms in exactly the order of the
 * reference interpreter (ir/interp_window.c, file comment), so results match
 * it bit for bit:
 *
 *   convolution     for each kernel position (row-major): if the input
 *                   position is an element of the dilated input, a loop over
 *                   the group's input channels accumulating x * w;
 *   reduce_window   for each window position (row-major), when inside the
 *                   operand, acc = acc op x;
 *   select_and_scatter  (the output is x-shaped) for each window that may
 *                   contain this element (at most ceil(Kd/s) per dim, row-major
 *                   in window order): recompute the window's selected
 *                   position with the interpreter's select(ge) loop and add
 *                   g[window] when it is this element;
 *   gather          one load of the (wrapped) id, one load of the row;
 *                   out of range: NaN (integer tables: the minimum);
 *   scatter_add     for every id in increasing order: add the update when the
 *                   wrapped id is this output row (deterministic, no atomics).
 *
 * Operand elements are read through |io->load|, so an operand may be a
 * buffer, a constant (splat or dense) or, in principle, a fused producer.
 * Loop counters live in allocas of the entry block (SROA makes them SSA).
 */
#include <math.h>
#include <string.h>

#include "codegen/codegen.h"

typedef struct wctx {
  cg_window_io *io;
  LLVMBuilderRef b;
  kdc_status *st;
} wctx;

typedef struct loop { LLVMValueRef iv; LLVMBasicBlockRef header, exit; } loop;

static LLVMValueRef C(wctx *W, int64_t v) {
  return LLVMConstInt(W->io->P->i64, (unsigned long long)v, 1);
}

static LLVMValueRef alloca_entry(wctx *W, LLVMTypeRef t, LLVMValueRef init) {
  LLVMBuilderRef tmp = LLVMCreateBuilderInContext(W->io->P->ctx);
  LLVMValueRef first = LLVMGetFirstInstruction(W->io->entry);
  if (first) LLVMPositionBuilderBefore(tmp, first);
  else LLVMPositionBuilderAtEnd(tmp, W->io->entry);
  LLVMValueRef a = LLVMBuildAlloca(tmp, t, "");
  LLVMDisposeBuilder(tmp);
  if (init) LLVMBuildStore(W->b, init, a);
  return a;
}

/* for (iv = 0; iv < n; iv++) { builder here } ; close_loop ends it. */
static LLVMValueRef open_loop(wctx *W, loop *L, int64_t n) {
  cg_plan *P = W->io->P;
  L->iv = alloca_entry(W, P->i64, C(W, 0));
  L->header = LLVMAppendBasicBlockInContext(P->ctx, W->io->fn, "wloop");
  LLVMBasicBlockRef body = LLVMAppendBasicBlockInContext(P->ctx, W->io->fn, "wbody");
  L->exit = LLVMAppendBasicBlockInContext(P->ctx, W->io->fn, "wdone");
  LLVMBuildBr(W->b, L->header);
  LLVMPositionBuilderAtEnd(W->b, L->header);
  LLVMValueRef i = LLVMBuildLoad2(W->b, P->i64, L->iv, "");
  LLVMBuildCondBr(W->b, LLVMBuildICmp(W->b, LLVMIntSLT, i, C(W, n), ""), body, L->exit);
  LLVMPositionBuilderAtEnd(W->b, body);
  return i;
}

static void close_loop(wctx *W, loop *L) {
  LLVMValueRef i = LLVMBuildLoad2(W->b, W->io->P->i64, L->iv, "");
  LLVMBuildStore(W->b, LLVMBuildNSWAdd(W->b, i, C(W, 1), ""), L->iv);
  LLVMBuildBr(W->b, L->header);
  LLVMPositionBuilderAtEnd(W->b, L->exit);
}

/* if (cond) { builder here } ; end_if joins. */
static LLVMBasicBlockRef open_if(wctx *W, LLVMValueRef cond) {
  cg_plan *P = W->io->P;
  LLVMBasicBlockRef then = LLVMAppendBasicBlockInContext(P->ctx, W->io->fn, "wthen");
  LLVMBasicBlockRef join = LLVMAppendBasicBlockInContext(P->ctx, W->io->fn, "wjoin");
  LLVMBuildCondBr(W->b, cond, then, join);
  LLVMPositionBuilderAtEnd(W->b, then);
  return join;
}

static void end_if(wctx *W, LLVMBasicBlockRef join) {
  LLVMBuildBr(W->b, join);
  LLVMPositionBuilderAtEnd(W->b, join);
}

static LLVMValueRef add(wctx *W, LLVMValueRef a, LLVMValueRef b) {
  return LLVMBuildNSWAdd(W->b, a, b, "");
}
static LLVMValueRef mul(wctx *W, LLVMValueRef a, int64_t k) {
  return k == 1 ? a : LLVMBuildNSWMul(W->b, a, C(W, k), "");
}
static LLVMValueRef and_(wctx *W, LLVMValueRef a, LLVMValueRef b) {
  return LLVMBuildAnd(W->b, a, b, "");
}
static LLVMValueRef icmp(wctx *W, LLVMIntPredicate p, LLVMValueRef a, LLVMValueRef b) {
  return LLVMBuildICmp(W->b, p, a, b, "");
}

/* Row-major linear offset of multi-index |m| in |t| (entries may be NULL = 0). */
static LLVMValueRef linear(wctx *W, const kdc_type *t, LLVMValueRef const *m) {
  LLVMValueRef l = C(W, 0);
  for (int d = 0; d < t->rank; d++) l = add(W, mul(W, l, t->dims[d]), m[d] ? m[d] : C(W, 0));
  return l;
}

static LLVMValueRef load(wctx *W, int k, LLVMValueRef lin) {
  if (*W->st) return NULL;
  return W->io->load(W->io->ctx, k, lin, W->st);
}

static const kdc_type *operand_type(wctx *W, int k) {
  const kdc_func *f = W->io->f;
  return &f->nodes[f->nodes[W->io->v].in[k]].type;
}

static LLVMValueRef emit_conv(wctx *W) {
  cg_plan *P = W->io->P;
  const kdc_node *nd = &W->io->f->nodes[W->io->v];
  const kdc_attr_conv *a = &nd->attr.conv;
  const kdc_type *xt = operand_type(W, 0), *wt = operand_type(W, 1);
  LLVMValueRef const *m = W->io->idx;
  int ns = xt->rank - 2;
  int64_t cig = wt->dims[ns], co = wt->dims[ns + 1], cog = co / a->groups;
  LLVMValueRef acc = alloca_entry(W, P->f32, LLVMConstReal(P->f32, 0.0));
  LLVMValueRef g = LLVMBuildUDiv(W->b, m[ns + 1], C(W, cog), "");
  loop L[KDC_MAX_RANK + 1];
  LLVMValueRef xi[KDC_MAX_RANK], wi[KDC_MAX_RANK], ok = LLVMConstInt(P->i1, 1, 0);
  xi[0] = m[0];
  xi[ns + 1] = NULL;
  wi[ns] = NULL;
  wi[ns + 1] = NULL;
  for (int d = 0; d < ns; d++) {
    int64_t ld = a->lhs_dilation.v[d], sd = (xt->dims[d + 1] - 1) * ld + 1;
    LLVMValueRef k = open_loop(W, &L[d], wt->dims[d]);
    LLVMValueRef p = add(W, add(W, mul(W, m[d + 1], a->stride.v[d]), C(W, -a->pad_low.v[d])),
                         mul(W, k, a->rhs_dilation.v[d]));
    LLVMValueRef in = and_(W, icmp(W, LLVMIntSGE, p, C(W, 0)), icmp(W, LLVMIntSLT, p, C(W, sd)));
    LLVMValueRef pc = LLVMBuildSelect(W->b, in, p, C(W, 0), "");
    if (ld > 1) {
      in = and_(W, in, icmp(W, LLVMIntEQ, LLVMBuildURem(W->b, pc, C(W, ld), ""), C(W, 0)));
      pc = LLVMBuildUDiv(W->b, pc, C(W, ld), "");
    }
    ok = and_(W, ok, in);
    xi[d + 1] = pc;
    wi[d] = k;
  }
  LLVMBasicBlockRef join = open_if(W, ok);
  LLVMValueRef xbase = add(W, linear(W, xt, xi), mul(W, g, cig));  /* channel g*cig */
  LLVMValueRef wbase = add(W, linear(W, wt, wi), m[ns + 1]);       /* [k.., 0, co] */
  LLVMValueRef ci = open_loop(W, &L[ns], cig);
  LLVMValueRef xv = load(W, 0, add(W, xbase, ci));
  LLVMValueRef wv = xv ? load(W, 1, add(W, wbase, mul(W, ci, co))) : NULL;
  if (!wv) return NULL;
  LLVMValueRef s = LLVMBuildLoad2(W->b, P->f32, acc, "");
  LLVMBuildStore(W->b, LLVMBuildFAdd(W->b, s, LLVMBuildFMul(W->b, xv, wv, ""), ""), acc);
  close_loop(W, &L[ns]);
  end_if(W, join);
  for (int d = ns; d-- > 0;) close_loop(W, &L[d]);
  int64_t kn = cig;
  for (int d = 0; d < ns; d++) kn *= wt->dims[d];
  W->io->cost = 2 * kn;
  return LLVMBuildLoad2(W->b, P->f32, acc, "");
}

/* Window positions of output |o| (multi-index over the operand's rank):
 * opens one loop per dim, leaves the builder inside them with *|ok| = all
 * positions inside the operand and |p| the clamped position. */
static void window_loops(wctx *W, const kdc_attr_window *a, const kdc_type *xt,
                         LLVMValueRef const *o, loop *L, LLVMValueRef *p, LLVMValueRef *ok) {
  *ok = LLVMConstInt(W->io->P->i1, 1, 0);
  for (int d = 0; d < xt->rank; d++) {
    LLVMValueRef k = open_loop(W, &L[d], a->window.v[d]);
    LLVMValueRef q = add(W, add(W, mul(W, o[d], a->stride.v[d]), C(W, -a->pad_low.v[d])),
                         mul(W, k, a->dilation.v[d]));
    LLVMValueRef in = and_(W, icmp(W, LLVMIntSGE, q, C(W, 0)),
                           icmp(W, LLVMIntSLT, q, C(W, xt->dims[d])));
    p[d] = LLVMBuildSelect(W->b, in, q, C(W, 0), "");
    *ok = and_(W, *ok, in);
  }
}

static LLVMValueRef emit_reduce_window(wctx *W) {
  cg_plan *P = W->io->P;
  const kdc_attr_window *a = &W->io->f->nodes[W->io->v].attr.window;
  const kdc_type *xt = operand_type(W, 0);
  LLVMValueRef acc = alloca_entry(W, P->f32, cg_reduce_init(P, a->kind, KDC_DTYPE_F32));
  loop L[KDC_MAX_RANK];
  LLVMValueRef p[KDC_MAX_RANK], ok;
  window_loops(W, a, xt, W->io->idx, L, p, &ok);
  LLVMBasicBlockRef join = open_if(W, ok);
  LLVMValueRef xv = load(W, 0, linear(W, xt, p));
  if (!xv) return NULL;
  LLVMValueRef s = LLVMBuildLoad2(W->b, P->f32, acc, "");
  LLVMBuildStore(W->b, cg_reduce_step(P, a->kind, KDC_DTYPE_F32, s, xv), acc);
  end_if(W, join);
  int64_t kn = 1;
  for (int d = xt->rank; d-- > 0;) close_loop(W, &L[d]), kn *= a->window.v[d];
  W->io->cost = kn;
  return LLVMBuildLoad2(W->b, P->f32, acc, "");
}

static LLVMValueRef emit_select_and_scatter(wctx *W) {
  cg_plan *P = W->io->P;
  const kdc_attr_window *a = &W->io->f->nodes[W->io->v].attr.window;
  const kdc_type *xt = operand_type(W, 0), *gt = operand_type(W, 1);
  LLVMValueRef const *i = W->io->idx;
  LLVMValueRef acc = alloca_entry(W, P->f32, LLVMConstReal(P->f32, 0.0));
  LLVMValueRef sel = alloca_entry(W, P->i64, NULL), selv = alloca_entry(W, P->f32, NULL);
  LLVMValueRef me = linear(W, xt, i), o[KDC_MAX_RANK], ok = LLVMConstInt(P->i1, 1, 0);
  loop Lo[KDC_MAX_RANK], Lk[KDC_MAX_RANK];
  int64_t cost = 1;
  for (int d = 0; d < xt->rank; d++) {  /* windows whose span may hold i_d */
    int64_t s = a->stride.v[d], kd = (a->window.v[d] - 1) * a->dilation.v[d] + 1;
    int64_t cnt = (kd + s - 1) / s;
    LLVMValueRef t = open_loop(W, &Lo[d], cnt);
    LLVMValueRef hi = add(W, i[d], C(W, a->pad_low.v[d]));           /* o*s <= i + lo */
    LLVMValueRef lo = add(W, hi, C(W, 1 - kd));                        /* o*s >= i+lo-kd+1 */
    LLVMValueRef lc = LLVMBuildSelect(W->b, icmp(W, LLVMIntSGT, lo, C(W, 0)), lo, C(W, 0), "");
    LLVMValueRef first = LLVMBuildUDiv(W->b, add(W, lc, C(W, s - 1)), C(W, s), "");
    o[d] = add(W, first, t);
    ok = and_(W, ok, icmp(W, LLVMIntSLE, mul(W, o[d], s), hi));
    ok = and_(W, ok, icmp(W, LLVMIntSLT, o[d], C(W, gt->dims[d])));
    cost *= cnt * a->window.v[d];
  }
  LLVMBasicBlockRef join = open_if(W, ok);
  LLVMBuildStore(W->b, C(W, -1), sel);
  LLVMBuildStore(W->b, LLVMConstReal(P->f32, 0.0), selv);
  LLVMValueRef p[KDC_MAX_RANK], in;
  window_loops(W, a, xt, o, Lk, p, &in);
  LLVMBasicBlockRef join2 = open_if(W, in);
  LLVMValueRef q = linear(W, xt, p), xv = load(W, 0, q);
  if (!xv) return NULL;
  LLVMValueRef cur = LLVMBuildLoad2(W->b, P->i64, sel, "");
  LLVMValueRef cv = LLVMBuildLoad2(W->b, P->f32, selv, "");
  LLVMValueRef better = LLVMBuildFCmp(W->b, a->kind == KDC_RED_MAX ? LLVMRealOGE : LLVMRealOLE,
                                      cv, xv, "");
  LLVMValueRef keep = and_(W, icmp(W, LLVMIntSGE, cur, C(W, 0)), better);
  LLVMBuildStore(W->b, LLVMBuildSelect(W->b, keep, cur, q, ""), sel);
  LLVMBuildStore(W->b, LLVMBuildSelect(W->b, keep, cv, xv, ""), selv);
  end_if(W, join2);
  for (int d = xt->rank; d-- > 0;) close_loop(W, &Lk[d]);
  LLVMValueRef hit = icmp(W, LLVMIntEQ, LLVMBuildLoad2(W->b, P->i64, sel, ""), me);
  LLVMBasicBlockRef join3 = open_if(W, hit);
  LLVMValueRef gv = load(W, 1, linear(W, gt, o));
  if (!gv) return NULL;
  LLVMValueRef s = LLVMBuildLoad2(W->b, P->f32, acc, "");
  LLVMBuildStore(W->b, LLVMBuildFAdd(W->b, s, gv, ""), acc);
  end_if(W, join3);
  end_if(W, join);
  for (int d = xt->rank; d-- > 0;) close_loop(W, &Lo[d]);
  W->io->cost = cost;
  return LLVMBuildLoad2(W->b, P->f32, acc, "");
}

/* kdc_gather_index in IR: the wrapped id and whether it is in [0, V). */
static LLVMValueRef wrap_id(wctx *W, LLVMValueRef id, kdc_dtype d, int64_t V, LLVMValueRef *ok) {
  if (d == KDC_DTYPE_I32) id = LLVMBuildSExt(W->b, id, W->io->P->i64, "");
  LLVMValueRef neg = icmp(W, LLVMIntSLT, id, C(W, 0));
  LLVMValueRef j = LLVMBuildSelect(W->b, neg, add(W, id, C(W, V)), id, "");
  if (ok) *ok = and_(W, icmp(W, LLVMIntSGE, j, C(W, 0)), icmp(W, LLVMIntSLT, j, C(W, V)));
  return j;
}

static LLVMValueRef emit_gather(wctx *W) {
  cg_plan *P = W->io->P;
  const kdc_type *tt = operand_type(W, 0), *it = operand_type(W, 1);
  LLVMValueRef const *m = W->io->idx;
  LLVMValueRef id = load(W, 1, linear(W, it, m)), ok;
  if (!id) return NULL;
  LLVMValueRef j = wrap_id(W, id, it->dtype, tt->dims[0], &ok);
  LLVMValueRef ti[KDC_MAX_RANK];
  ti[0] = LLVMBuildSelect(W->b, ok, j, C(W, 0), "");
  for (int d = 1; d < tt->rank; d++) ti[d] = m[it->rank + d - 1];
  LLVMValueRef v = load(W, 0, linear(W, tt, ti));
  if (!v) return NULL;
  LLVMValueRef fill;
  if (tt->dtype == KDC_DTYPE_F32) fill = LLVMConstReal(P->f32, NAN);
  else if (tt->dtype == KDC_DTYPE_I32)
    fill = LLVMConstInt(P->i32, (unsigned long long)INT32_MIN, 1);
  else fill = LLVMConstInt(P->i64, (unsigned long long)INT64_MIN, 1);
  W->io->cost = 2;
  return LLVMBuildSelect(W->b, ok, v, fill, "");
}

static LLVMValueRef emit_scatter_add(wctx *W) {
  cg_plan *P = W->io->P;
  const kdc_node *nd = &W->io->f->nodes[W->io->v];
  const kdc_type *it = operand_type(W, 0);
  LLVMValueRef const *m = W->io->idx;
  kdc_dtype d = nd->type.dtype;
  int64_t nid = kdc_type_numel(it), row = 1;
  for (int k = 1; k < nd->type.rank; k++) row *= nd->type.dims[k];
  LLVMValueRef ri[KDC_MAX_RANK]; /* the offset inside a row: dims 1.. */
  memcpy(ri, m, sizeof(LLVMValueRef) * (size_t)nd->type.rank);
  ri[0] = NULL;
  LLVMValueRef rlin = linear(W, &nd->type, ri);
  LLVMValueRef acc = alloca_entry(W, cg_reg_type(P, d), cg_reduce_init(P, KDC_RED_SUM, d));
  loop L;
  LLVMValueRef pi = open_loop(W, &L, nid);
  LLVMValueRef id = load(W, 0, pi);
  if (!id) return NULL;
  LLVMValueRef hit = icmp(W, LLVMIntEQ, wrap_id(W, id, it->dtype, nd->type.dims[0], NULL), m[0]);
  LLVMBasicBlockRef join = open_if(W, hit);
  LLVMValueRef u = load(W, 1, add(W, mul(W, pi, row), rlin));
  if (!u) return NULL;
  LLVMValueRef s = LLVMBuildLoad2(W->b, cg_reg_type(P, d), acc, "");
  LLVMBuildStore(W->b, cg_reduce_step(P, KDC_RED_SUM, d, s, u), acc);
  end_if(W, join);
  close_loop(W, &L);
  W->io->cost = 2 * nid;
  return LLVMBuildLoad2(W->b, cg_reg_type(P, d), acc, "");
}

LLVMValueRef cg_window_emit(cg_window_io *io, kdc_status *st) {
  wctx W = {io, io->P->b, st};
  switch (io->f->nodes[io->v].op) {
  case KDC_OP_CONVOLUTION: return emit_conv(&W);
  case KDC_OP_REDUCE_WINDOW: return emit_reduce_window(&W);
  case KDC_OP_SELECT_AND_SCATTER: return emit_select_and_scatter(&W);
  case KDC_OP_GATHER: return emit_gather(&W);
  case KDC_OP_SCATTER_ADD: return emit_scatter_add(&W);
  default:
    *st = KDC_ERR(KDC_INTERNAL, "codegen: %%%u = %s is not a windowed op", io->v,
                  kdc_op_name(io->f->nodes[io->v].op));
    return NULL;
  }
}
