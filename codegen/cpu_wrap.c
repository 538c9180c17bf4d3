/*
 * codegen/cpu_wrap.c: the CPU wrapper of a kernel body.
 *
 *   void kdc_kernel_<k>(ptr args, ptr coords, i64 begin, i64 end)
 *
 * |args| is the step's array of buffer pointers (slot 0 = output); |coords|
 * the device's mesh coordinates, passed through to the body.  The
 * iteration space the runtime splits over threads is the output's "rows":
 * for rank >= 2 the flattened leading dims (row r covers every element whose
 * leading multi-index ravels to r), for rank 1 the elements, for rank 0 the
 * single element.  For each row the wrapper computes the leading
 * multi-index once (div/mod per row, never per element) and runs the
 * innermost dim as a unit-stride loop calling the alwaysinline body, which
 * LLVM's loop vectoriser turns into SIMD code for elementwise and broadcast
 * kernels.  A CUDA wrapper would instead compute the same multi-index from
 * (block, thread) and call the same body.
 */
#include <stdio.h>
#include <string.h>

#include "codegen/codegen.h"

typedef struct wloop { LLVMValueRef iv; LLVMBasicBlockRef header, exit; } wloop;

/* for (iv = lo; iv < hi; iv++) using an alloca in |entry| (mem2reg'd). */
static LLVMValueRef open_loop(cg_plan *P, LLVMValueRef fn, LLVMValueRef slot, wloop *L,
                              LLVMValueRef lo, LLVMValueRef hi) {
  L->iv = slot;
  LLVMBuildStore(P->b, lo, slot);
  L->header = LLVMAppendBasicBlockInContext(P->ctx, fn, "rows");
  LLVMBasicBlockRef body = LLVMAppendBasicBlockInContext(P->ctx, fn, "row");
  L->exit = LLVMAppendBasicBlockInContext(P->ctx, fn, "end");
  LLVMBuildBr(P->b, L->header);
  LLVMPositionBuilderAtEnd(P->b, L->header);
  LLVMValueRef i = LLVMBuildLoad2(P->b, P->i64, slot, "");
  LLVMBuildCondBr(P->b, LLVMBuildICmp(P->b, LLVMIntSLT, i, hi, ""), body, L->exit);
  LLVMPositionBuilderAtEnd(P->b, body);
  return i;
}

static void close_loop(cg_plan *P, wloop *L) {
  LLVMValueRef i = LLVMBuildLoad2(P->b, P->i64, L->iv, "");
  LLVMBuildStore(P->b, LLVMBuildNSWAdd(P->b, i, LLVMConstInt(P->i64, 1, 0), ""), L->iv);
  LLVMBuildBr(P->b, L->header);
  LLVMPositionBuilderAtEnd(P->b, L->exit);
}

/* Output elements per row of a column reduction: a cache line of f32, so
 * threads never share one. */
enum { COLUMN_BLOCK = 16 };

static LLVMValueRef I64(cg_plan *P, int64_t v) {
  return LLVMConstInt(P->i64, (unsigned long long)v, 1);
}

/* A column reduction's wrapper body (cg_kernel_column_reduce: |p| leading
 * reduced dims): rows are blocks of COLUMN_BLOCK output elements; the
 * block's elements are set to the identity, then for every reduced index
 * (row-major, the interpreter's order) the kept elements of the thread's
 * rows are folded in, innermost (unit stride, vectorisable): whole blocks
 * as constant-trip loops, then the last partial block.  One pass over the
 * operand per thread, whole lines where the thread has several blocks. */
static void column_loops(cg_plan *P, const cg_kernel *k, LLVMValueRef fn, LLVMValueRef acc,
                         LLVMValueRef *cargs, unsigned nc, int p, LLVMValueRef begin,
                         LLVMValueRef end, int64_t *out_extent) {
  const kdc_node *nd = &k->f->nodes[k->root];
  const kdc_type *xt = &k->f->nodes[nd->in[0]].type;
  int64_t n = kdc_type_numel(&k->out_type);
  LLVMValueRef slots[KDC_MAX_RANK + 3];
  LLVMBasicBlockRef cur = LLVMGetInsertBlock(P->b);
  LLVMPositionBuilderBefore(P->b, LLVMGetFirstInstruction(LLVMGetEntryBasicBlock(fn)));
  for (int i = 0; i < p + 3; i++) slots[i] = LLVMBuildAlloca(P->b, P->i64, "");
  LLVMPositionBuilderAtEnd(P->b, cur);
  LLVMValueRef lo = LLVMBuildNSWMul(P->b, begin, I64(P, COLUMN_BLOCK), "");
  LLVMValueRef hi = LLVMBuildNSWMul(P->b, end, I64(P, COLUMN_BLOCK), "");
  hi = LLVMBuildSelect(P->b, LLVMBuildICmp(P->b, LLVMIntSLT, hi, I64(P, n), ""), hi, I64(P, n), "");
  kdc_dtype d = nd->type.dtype;
  LLVMTypeRef mt = cg_mem_type(P, d);
  LLVMValueRef init = cg_reduce_init(P, nd->attr.reduce.kind, d);
  if (d == KDC_DTYPE_BOOL) init = LLVMBuildZExt(P->b, init, P->i8, "");
  wloop L[KDC_MAX_RANK + 3];
  LLVMValueRef c = open_loop(P, fn, slots[p + 1], &L[p + 1], lo, hi);
  LLVMBuildStore(P->b, init, LLVMBuildInBoundsGEP2(P->b, mt, cargs[0], &c, 1, ""));
  close_loop(P, &L[p + 1]);
  LLVMValueRef a[65 + KDC_MAX_RANK];
  memcpy(a, cargs, nc * sizeof *a);
  for (int i = 0; i < p; i++) a[nc + (unsigned)i] = open_loop(P, fn, slots[i], &L[i], I64(P, 0),
                                                              I64(P, xt->dims[i]));
  /* whole blocks: a loop over them, each a constant COLUMN_BLOCK-trip loop (LLVM
   * vectorises it without a remainder; a runtime trip count shorter than its vector
   * body times its interleave -- a thread's one block of 16 -- ran the scalar loop) */
  LLVMValueRef nb = LLVMBuildSDiv(P->b, LLVMBuildNSWSub(P->b, hi, lo, ""), I64(P, COLUMN_BLOCK), "");
  LLVMValueRef qb = open_loop(P, fn, slots[p], &L[p], I64(P, 0), nb);
  LLVMValueRef base = LLVMBuildNSWAdd(
      P->b, lo, LLVMBuildNSWMul(P->b, qb, I64(P, COLUMN_BLOCK), ""), "");
  LLVMValueRef j = open_loop(P, fn, slots[p + 2], &L[p + 2], I64(P, 0), I64(P, COLUMN_BLOCK));
  a[nc + (unsigned)p] = LLVMBuildNSWAdd(P->b, base, j, "");
  LLVMBuildCall2(P->b, LLVMGlobalGetValueType(acc), acc, a, nc + (unsigned)p + 1, "");
  close_loop(P, &L[p + 2]);
  close_loop(P, &L[p]);
  /* the last, partial block */
  LLVMValueRef tail = LLVMBuildNSWAdd(
      P->b, lo, LLVMBuildNSWMul(P->b, nb, I64(P, COLUMN_BLOCK), ""), "");
  a[nc + (unsigned)p] = open_loop(P, fn, slots[p + 1], &L[p + 1], tail, hi);
  LLVMBuildCall2(P->b, LLVMGlobalGetValueType(acc), acc, a, nc + (unsigned)p + 1, "");
  close_loop(P, &L[p + 1]);
  for (int i = p; i-- > 0;) close_loop(P, &L[i]);
  *out_extent = (n + COLUMN_BLOCK - 1) / COLUMN_BLOCK;
}

/* cg_kernel_scatter_rows: a scatter_add kernel (always its own root,
 * never fused) whose ids and updates are buffers, of a numeric dtype. */
bool cg_kernel_scatter_rows(const cg_kernel *k) {
  if (k->transpose) return false;
  const kdc_node *nd = &k->f->nodes[k->root];
  if (nd->op != KDC_OP_SCATTER_ADD || nd->type.rank < 1 || nd->type.dtype == KDC_DTYPE_BOOL ||
      kdc_type_numel(&nd->type) <= 0)
    return false;
  return k->slot[nd->in[0]] > 0 && k->slot[nd->in[1]] > 0;
}

/* The scatter-rows wrapper body: rows are output rows (dim 0).  A thread's
 * rows [begin, end) are set to 0, then for every id in increasing order
 * whose wrapped value (kdc_gather_index) falls in [begin, end) the
 * update's row is added to that output row.  Each output element thus sums
 * the same updates in the same order as the generic body (which, per output
 * element, scans every id: O(V * ids * row) against O(ids + rows * row)
 * here; the gradient of a 1000-word Embedding over 1600 tokens took 85 ms
 * a step). */
static void scatter_loops(cg_plan *P, const cg_kernel *k, LLVMValueRef fn, LLVMValueRef *cargs,
                          LLVMValueRef begin, LLVMValueRef end) {
  const kdc_node *nd = &k->f->nodes[k->root];
  const kdc_type *it = &k->f->nodes[nd->in[0]].type;
  kdc_dtype d = nd->type.dtype;
  int64_t V = nd->type.dims[0], row = kdc_type_numel(&nd->type) / V, nid = kdc_type_numel(it);
  LLVMTypeRef et = cg_mem_type(P, d);
  LLVMValueRef out = cargs[0], ids = cargs[k->slot[nd->in[0]]], upd = cargs[k->slot[nd->in[1]]];
  LLVMValueRef slots[3];
  LLVMBasicBlockRef cur = LLVMGetInsertBlock(P->b);
  LLVMPositionBuilderBefore(P->b, LLVMGetFirstInstruction(LLVMGetEntryBasicBlock(fn)));
  for (int i = 0; i < 3; i++) slots[i] = LLVMBuildAlloca(P->b, P->i64, "");
  LLVMPositionBuilderAtEnd(P->b, cur);
  wloop L0, L1, L2;
  LLVMValueRef lo = LLVMBuildNSWMul(P->b, begin, I64(P, row), "");
  LLVMValueRef hi = LLVMBuildNSWMul(P->b, end, I64(P, row), "");
  LLVMValueRef e = open_loop(P, fn, slots[0], &L0, lo, hi);
  LLVMBuildStore(P->b, cg_reduce_init(P, KDC_RED_SUM, d),
                 LLVMBuildInBoundsGEP2(P->b, et, out, &e, 1, ""));
  close_loop(P, &L0);
  LLVMValueRef i = open_loop(P, fn, slots[1], &L1, I64(P, 0), I64(P, nid));
  LLVMTypeRef idt = cg_mem_type(P, it->dtype);
  LLVMValueRef id = LLVMBuildLoad2(P->b, idt, LLVMBuildInBoundsGEP2(P->b, idt, ids, &i, 1, ""), "");
  if (it->dtype != KDC_DTYPE_I64) id = LLVMBuildSExt(P->b, id, P->i64, "");
  LLVMValueRef neg = LLVMBuildICmp(P->b, LLVMIntSLT, id, I64(P, 0), "");
  LLVMValueRef w = LLVMBuildSelect(P->b, neg, LLVMBuildAdd(P->b, id, I64(P, V), ""), id, "");
  LLVMValueRef hit = LLVMBuildAnd(P->b, LLVMBuildICmp(P->b, LLVMIntSGE, w, begin, ""),
                                  LLVMBuildICmp(P->b, LLVMIntSLT, w, end, ""), "");
  LLVMBasicBlockRef add = LLVMAppendBasicBlockInContext(P->ctx, fn, "hit");
  LLVMBasicBlockRef next = LLVMAppendBasicBlockInContext(P->ctx, fn, "next");
  LLVMBuildCondBr(P->b, hit, add, next);
  LLVMPositionBuilderAtEnd(P->b, add);
  LLVMValueRef ob = LLVMBuildNSWMul(P->b, w, I64(P, row), "");
  LLVMValueRef ub = LLVMBuildNSWMul(P->b, i, I64(P, row), "");
  LLVMValueRef c = open_loop(P, fn, slots[2], &L2, I64(P, 0), I64(P, row));
  LLVMValueRef oi = LLVMBuildNSWAdd(P->b, ob, c, ""), ui = LLVMBuildNSWAdd(P->b, ub, c, "");
  LLVMValueRef op = LLVMBuildInBoundsGEP2(P->b, et, out, &oi, 1, "");
  LLVMValueRef u = LLVMBuildLoad2(P->b, et, LLVMBuildInBoundsGEP2(P->b, et, upd, &ui, 1, ""), "");
  LLVMValueRef a = LLVMBuildLoad2(P->b, et, op, "");
  LLVMBuildStore(P->b, cg_reduce_step(P, KDC_RED_SUM, d, a, u), op);
  close_loop(P, &L2);
  LLVMBuildBr(P->b, next);
  LLVMPositionBuilderAtEnd(P->b, next);
  close_loop(P, &L1);
}

/* llvm.assume((ptrtoint p[i] & 63) == 0) for i < |n|: LLVM then knows the
 * alignment of every row (whole lines) and of the vector stores in them. */
static void assume_aligned(cg_plan *P, LLVMValueRef *p, uint32_t n) {
  unsigned id = LLVMLookupIntrinsicID("llvm.assume", 11);
  LLVMValueRef fn = LLVMGetIntrinsicDeclaration(P->mod, id, NULL, 0);
  LLVMTypeRef ft = LLVMIntrinsicGetType(P->ctx, id, NULL, 0);
  for (uint32_t i = 0; i < n; i++) {
    LLVMValueRef addr = LLVMBuildPtrToInt(P->b, p[i], P->i64, "");
    LLVMValueRef low = LLVMBuildAnd(P->b, addr, LLVMConstInt(P->i64, 63, 0), "");
    LLVMValueRef ok = LLVMBuildICmp(P->b, LLVMIntEQ, low, LLVMConstInt(P->i64, 0, 0), "");
    LLVMBuildCall2(P->b, ft, fn, &ok, 1, "");
  }
}

/* The kernel function "void |name|(ptr args, ptr coords, i64 begin, i64
 * end)": it loads the buffer pointers from |args| and calls the loop nest,
 * returned here: an internal alwaysinline function "(ptr noalias
 * buffers.., ptr noalias coords, i64 begin, i64 end)" for the caller to
 * fill.
 * Once inlined, the noalias of the buffers is scoped to the whole loop
 * nest (the bodies' own noalias only holds within one element's call), so
 * the loop vectoriser knows that the buffers do not overlap across
 * iterations and needs no runtime overlap checks -- it could not build
 * them for most kernels ("cannot identify array bounds").  Distinct slots
 * are distinct buffers (plan_memory gives live values disjoint ranges; an
 * in-place operand is read through slot 0 itself). */
static LLVMValueRef loop_nest_shell(cg_plan *P, const cg_kernel *k, const char *name) {
  KDC_ASSERT(k->n_args <= 64);
  LLVMTypeRef params[64 + 4];
  unsigned n = 0;
  for (uint32_t i = 0; i < k->n_args; i++) params[n++] = P->ptr;
  params[n++] = P->ptr;  /* coords */
  params[n++] = P->i64;
  params[n++] = P->i64;
  char iname[80];
  snprintf(iname, sizeof iname, "%s_nest", name);
  LLVMValueRef in = LLVMAddFunction(P->mod, iname, LLVMFunctionType(P->void_t, params, n, 0));
  LLVMSetLinkage(in, LLVMInternalLinkage);
  unsigned inl = LLVMGetEnumAttributeKindForName("alwaysinline", 12);
  unsigned nounwind = LLVMGetEnumAttributeKindForName("nounwind", 8);
  unsigned noalias = LLVMGetEnumAttributeKindForName("noalias", 7);
  LLVMAddAttributeAtIndex(in, LLVMAttributeFunctionIndex, LLVMCreateEnumAttribute(P->ctx, inl, 0));
  LLVMAddAttributeAtIndex(in, LLVMAttributeFunctionIndex,
                          LLVMCreateEnumAttribute(P->ctx, nounwind, 0));
  for (uint32_t i = 0; i <= k->n_args; i++)  /* the buffers and coords */
    LLVMAddAttributeAtIndex(in, i + 1, LLVMCreateEnumAttribute(P->ctx, noalias, 0));

  LLVMTypeRef wparams[4] = {P->ptr, P->ptr, P->i64, P->i64};
  LLVMValueRef fn = LLVMAddFunction(P->mod, name, LLVMFunctionType(P->void_t, wparams, 4, 0));
  LLVMAddAttributeAtIndex(fn, LLVMAttributeFunctionIndex,
                          LLVMCreateEnumAttribute(P->ctx, nounwind, 0));
  LLVMPositionBuilderAtEnd(P->b, LLVMAppendBasicBlockInContext(P->ctx, fn, "entry"));
  LLVMValueRef a[64 + 4], args = LLVMGetParam(fn, 0);
  unsigned na = 0;
  for (uint32_t i = 0; i < k->n_args; i++) {
    LLVMValueRef idx = LLVMConstInt(P->i64, i, 0);
    LLVMValueRef g = LLVMBuildInBoundsGEP2(P->b, P->ptr, args, &idx, 1, "");
    a[na++] = LLVMBuildLoad2(P->b, P->ptr, g, "");
  }
  for (unsigned i = 1; i < 4; i++) a[na++] = LLVMGetParam(fn, i);
  LLVMBuildCall2(P->b, LLVMGlobalGetValueType(in), in, a, na, "");
  LLVMBuildRetVoid(P->b);
  return in;
}

void cg_cpu_wrap(cg_plan *P, const cg_kernel *k, LLVMValueRef body, const char *name,
                 int64_t *out_extent, int64_t *out_unit_cost) {
  const kdc_type *t = &k->out_type;
  int rank = t->rank;
  /* the CPU loop forms (codegen.h): their bodies first (emitting moves P->b) */
  char vname[64];
  LLVMValueRef acc = NULL, piece[CG_MAX_PIECES];
  int p = cg_kernel_column_reduce(k), np = cg_kernel_concat_pieces(k);
  kdc_status vst = NULL;
  if (p) {
    snprintf(vname, sizeof vname, "%s_acc", name);
    vst = cg_body_emit_accumulate(P, k, vname, &acc);
  }
  for (int j = 0; j < np && !vst; j++) {
    snprintf(vname, sizeof vname, "%s_p%d", name, j);
    vst = cg_body_emit_piece(P, k, vname, j, &piece[j]);
  }
  if (vst) {  /* cannot happen when the generic body emitted: keep the generic loops */
    kdc_status_free(vst);
    p = np = 0;
  }
  LLVMValueRef fn = loop_nest_shell(P, k, name);
  LLVMBasicBlockRef entry = LLVMAppendBasicBlockInContext(P->ctx, fn, "entry");
  LLVMPositionBuilderAtEnd(P->b, entry);
  LLVMValueRef row_slot = LLVMBuildAlloca(P->b, P->i64, "row");
  LLVMValueRef col_slot = LLVMBuildAlloca(P->b, P->i64, "col");

  LLVMValueRef cargs[65 + KDC_MAX_RANK];
  unsigned nc = 0;
  for (uint32_t i = 0; i < k->n_args; i++) cargs[nc++] = LLVMGetParam(fn, i);
  if (k->aligned_out) assume_aligned(P, cargs, 1 + k->n_extra);
  cargs[nc++] = LLVMGetParam(fn, k->n_args);  /* coords */
  LLVMValueRef begin = LLVMGetParam(fn, k->n_args + 1), end = LLVMGetParam(fn, k->n_args + 2);
  if (p) {
    column_loops(P, k, fn, acc, cargs, nc, p, begin, end, out_extent);
    LLVMBuildRetVoid(P->b);
    *out_unit_cost = COLUMN_BLOCK * k->cost;
    return;
  }
  if (cg_kernel_scatter_rows(k)) {
    scatter_loops(P, k, fn, cargs, begin, end);
    LLVMBuildRetVoid(P->b);
    const kdc_node *nd = &k->f->nodes[k->root];
    *out_extent = t->dims[0];
    *out_unit_cost = 2 * (kdc_type_numel(t) / t->dims[0]) +
                     kdc_type_numel(&k->f->nodes[nd->in[0]].type) / t->dims[0] + 1;
    return;
  }
  LLVMTypeRef bt = LLVMGlobalGetValueType(body);
  wloop rows, cols;
  if (rank == 1 && np) {  /* rows are elements: each piece loops over its part of them */
    const kdc_node *nd = &k->f->nodes[k->root];
    int64_t off = 0;
    for (int j = 0; j < np; j++) {
      int64_t len = k->f->nodes[nd->in[j]].type.dims[0];
      if (len == 0) continue;
      LLVMValueRef a = I64(P, off), z = I64(P, off + len);
      LLVMValueRef lo =
          LLVMBuildSelect(P->b, LLVMBuildICmp(P->b, LLVMIntSGT, begin, a, ""), begin, a, "");
      LLVMValueRef hi =
          LLVMBuildSelect(P->b, LLVMBuildICmp(P->b, LLVMIntSLT, end, z, ""), end, z, "");
      cargs[nc] = open_loop(P, fn, col_slot, &cols, lo, hi);
      LLVMBuildCall2(P->b, LLVMGlobalGetValueType(piece[j]), piece[j], cargs, nc + 1, "");
      close_loop(P, &cols);
      off += len;
    }
    LLVMBuildRetVoid(P->b);
    *out_extent = t->dims[0];
    *out_unit_cost = k->cost;
    return;
  }
  LLVMValueRef r = open_loop(P, fn, row_slot, &rows, begin, end);
  int64_t extent = 1, inner = 1;
  if (rank == 1) {
    cargs[nc++] = r;
    extent = t->dims[0];
    LLVMBuildCall2(P->b, bt, body, cargs, nc, "");
  } else if (rank >= 2) {
    LLVMValueRef lead[KDC_MAX_RANK], rest = r;
    for (int d = rank - 2; d >= 0; d--) {  /* unravel the row once */
      LLVMValueRef n = LLVMConstInt(P->i64, (unsigned long long)t->dims[d], 0);
      lead[d] = d == 0 ? rest : LLVMBuildURem(P->b, rest, n, "");
      if (d > 0) rest = LLVMBuildUDiv(P->b, rest, n, "");
      extent *= t->dims[d];
    }
    for (int d = 0; d < rank - 1; d++) cargs[nc++] = lead[d];
    inner = t->dims[rank - 1];
    const kdc_node *cn = &k->f->nodes[k->root];
    if (np && cn->attr.dim < rank - 1) { /* a concatenate along a row dim: the row's piece */
      int64_t dim = cn->attr.dim, off = 0;
      LLVMBasicBlockRef done = LLVMAppendBasicBlockInContext(P->ctx, fn, "pieces");
      for (int j = 0; j < np; j++) {
        int64_t len = k->f->nodes[cn->in[j]].type.dims[dim];
        if (len == 0) continue;
        LLVMBasicBlockRef in = LLVMAppendBasicBlockInContext(P->ctx, fn, "piece");
        LLVMBasicBlockRef next = LLVMAppendBasicBlockInContext(P->ctx, fn, "next");
        LLVMBuildCondBr(P->b, LLVMBuildICmp(P->b, LLVMIntSLT, lead[dim], I64(P, off + len), ""),
                        in, next);
        LLVMPositionBuilderAtEnd(P->b, in);
        cargs[nc] = open_loop(P, fn, col_slot, &cols, I64(P, 0), I64(P, inner));
        LLVMBuildCall2(P->b, LLVMGlobalGetValueType(piece[j]), piece[j], cargs, nc + 1, "");
        close_loop(P, &cols);
        LLVMBuildBr(P->b, done);
        LLVMPositionBuilderAtEnd(P->b, next);
        off += len;
      }
      LLVMBuildBr(P->b, done);
      LLVMPositionBuilderAtEnd(P->b, done);
    } else if (np) {  /* one loop per piece of the root concatenate */
      const kdc_node *nd = cn;
      int64_t off = 0;
      for (int j = 0; j < np; j++) {
        int64_t len = k->f->nodes[nd->in[j]].type.dims[rank - 1];
        if (len == 0) continue;
        cargs[nc] = open_loop(P, fn, col_slot, &cols, I64(P, off), I64(P, off + len));
        LLVMBuildCall2(P->b, LLVMGlobalGetValueType(piece[j]), piece[j], cargs, nc + 1, "");
        close_loop(P, &cols);
        off += len;
      }
    } else {
      LLVMValueRef c = open_loop(P, fn, col_slot, &cols, LLVMConstInt(P->i64, 0, 0),
                                 LLVMConstInt(P->i64, (unsigned long long)inner, 0));
      cargs[nc++] = c;
      LLVMBuildCall2(P->b, bt, body, cargs, nc, "");
      close_loop(P, &cols);
    }
  } else {
    LLVMBuildCall2(P->b, bt, body, cargs, nc, "");
  }
  close_loop(P, &rows);
  LLVMBuildRetVoid(P->b);
  *out_extent = extent;
  *out_unit_cost = inner * k->cost;
}

/* ---- streaming stores ---------------------------------------------------- */

bool cg_kernel_streams(const cg_kernel *k) {
  const kdc_type *t = &k->out_type;
  /* a reduce root may accumulate into its output (column reductions) */
  if (k->transpose || t->rank < 2 || k->f->nodes[k->root].op == KDC_OP_REDUCE) return false;
  size_t es = kdc_dtype_size(t->dtype);
  if (es == 0 || (t->dims[t->rank - 1] * (int64_t)es) % 64) return false;
  uint64_t bytes = kdc_type_bytes(t);
  for (uint32_t i = 0; i < k->n_extra; i++) {
    const kdc_type *x = &k->f->nodes[k->extra[i]].type;
    if (kdc_dtype_size(x->dtype) != es) return false; /* other rows: other line counts */
    bytes += kdc_type_bytes(x);
  }
  return bytes >= CG_STREAM_MIN_BYTES;
}

void cg_cpu_wrap_stream(cg_plan *P, const cg_kernel *k, LLVMValueRef body, const char *name,
                        int64_t *out_extent, int64_t *out_unit_cost) {
  char na[64], nu[64];
  snprintf(na, sizeof na, "%s_a", name);
  snprintf(nu, sizeof nu, "%s_u", name);
  cg_kernel ka = *k;
  ka.aligned_out = true;
  cg_cpu_wrap(P, &ka, body, na, out_extent, out_unit_cost);
  cg_cpu_wrap(P, k, body, nu, out_extent, out_unit_cost);
  LLVMValueRef fa = LLVMGetNamedFunction(P->mod, na), fu = LLVMGetNamedFunction(P->mod, nu);
  /* kept out of line so that the runtime finds the marked function */
  unsigned noinline = LLVMGetEnumAttributeKindForName("noinline", 8);
  LLVMAddAttributeAtIndex(fa, LLVMAttributeFunctionIndex,
                          LLVMCreateEnumAttribute(P->ctx, noinline, 0));
  LLVMAddAttributeAtIndex(fa, LLVMAttributeFunctionIndex,
                          LLVMCreateStringAttribute(P->ctx, "kdc-nontemporal", 15, "", 0));
  LLVMTypeRef params[4] = {P->ptr, P->ptr, P->i64, P->i64};
  LLVMTypeRef ft = LLVMFunctionType(P->void_t, params, 4, 0);
  LLVMValueRef fn = LLVMAddFunction(P->mod, name, ft);
  unsigned nounwind = LLVMGetEnumAttributeKindForName("nounwind", 8);
  LLVMAddAttributeAtIndex(fn, LLVMAttributeFunctionIndex,
                          LLVMCreateEnumAttribute(P->ctx, nounwind, 0));
  LLVMBasicBlockRef entry = LLVMAppendBasicBlockInContext(P->ctx, fn, "entry");
  LLVMBasicBlockRef aligned = LLVMAppendBasicBlockInContext(P->ctx, fn, "aligned");
  LLVMBasicBlockRef plain = LLVMAppendBasicBlockInContext(P->ctx, fn, "plain");
  LLVMPositionBuilderAtEnd(P->b, entry);
  LLVMValueRef args = LLVMGetParam(fn, 0), low = LLVMConstInt(P->i64, 0, 0);
  for (uint32_t i = 0; i <= k->n_extra; i++) {
    LLVMValueRef idx = LLVMConstInt(P->i64, i, 0);
    LLVMValueRef slot = LLVMBuildInBoundsGEP2(P->b, P->ptr, args, &idx, 1, "");
    LLVMValueRef ptr = LLVMBuildLoad2(P->b, P->ptr, slot, "");
    low = LLVMBuildOr(P->b, low, LLVMBuildPtrToInt(P->b, ptr, P->i64, ""), "");
  }
  low = LLVMBuildAnd(P->b, low, LLVMConstInt(P->i64, 63, 0), "");
  LLVMValueRef ok = LLVMBuildICmp(P->b, LLVMIntEQ, low, LLVMConstInt(P->i64, 0, 0), "");
  LLVMBuildCondBr(P->b, ok, aligned, plain);
  LLVMValueRef a[4];
  for (unsigned i = 0; i < 4; i++) a[i] = LLVMGetParam(fn, i);
  LLVMPositionBuilderAtEnd(P->b, aligned);
  LLVMBuildCall2(P->b, ft, fa, a, 4, "");
  /* non-temporal stores are weakly ordered: drain them before the runtime
   * tells other threads the rows are written */
  LLVMBuildFence(P->b, LLVMAtomicOrderingSequentiallyConsistent, 0, "");
  LLVMBuildRetVoid(P->b);
  LLVMPositionBuilderAtEnd(P->b, plain);
  LLVMBuildCall2(P->b, ft, fu, a, 4, "");
  LLVMBuildRetVoid(P->b);
}
