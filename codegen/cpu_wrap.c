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
 * (row-major, the interpreter's order) the kept elements are folded in,
 * innermost (unit stride, vectorisable). */
static void column_loops(cg_plan *P, const cg_kernel *k, LLVMValueRef fn, LLVMValueRef acc,
                         LLVMValueRef *cargs, unsigned nc, int p, LLVMValueRef begin,
                         LLVMValueRef end, int64_t *out_extent) {
  const kdc_node *nd = &k->f->nodes[k->root];
  const kdc_type *xt = &k->f->nodes[nd->in[0]].type;
  int64_t n = kdc_type_numel(&k->out_type);
  LLVMValueRef slots[KDC_MAX_RANK + 2];
  LLVMBasicBlockRef cur = LLVMGetInsertBlock(P->b);
  LLVMPositionBuilderBefore(P->b, LLVMGetFirstInstruction(LLVMGetEntryBasicBlock(fn)));
  for (int i = 0; i < p + 2; i++) slots[i] = LLVMBuildAlloca(P->b, P->i64, "");
  LLVMPositionBuilderAtEnd(P->b, cur);
  LLVMValueRef lo = LLVMBuildNSWMul(P->b, begin, I64(P, COLUMN_BLOCK), "");
  LLVMValueRef hi = LLVMBuildNSWMul(P->b, end, I64(P, COLUMN_BLOCK), "");
  hi = LLVMBuildSelect(P->b, LLVMBuildICmp(P->b, LLVMIntSLT, hi, I64(P, n), ""), hi, I64(P, n), "");
  kdc_dtype d = nd->type.dtype;
  LLVMTypeRef mt = cg_mem_type(P, d);
  LLVMValueRef init = cg_reduce_init(P, nd->attr.reduce.kind, d);
  if (d == KDC_DTYPE_BOOL) init = LLVMBuildZExt(P->b, init, P->i8, "");
  wloop L[KDC_MAX_RANK + 2];
  LLVMValueRef c = open_loop(P, fn, slots[p + 1], &L[p + 1], lo, hi);
  LLVMBuildStore(P->b, init, LLVMBuildInBoundsGEP2(P->b, mt, cargs[0], &c, 1, ""));
  close_loop(P, &L[p + 1]);
  LLVMValueRef a[65 + KDC_MAX_RANK];
  memcpy(a, cargs, nc * sizeof *a);
  for (int i = 0; i < p; i++) a[nc + (unsigned)i] = open_loop(P, fn, slots[i], &L[i], I64(P, 0),
                                                              I64(P, xt->dims[i]));
  a[nc + (unsigned)p] = open_loop(P, fn, slots[p], &L[p], lo, hi);
  LLVMBuildCall2(P->b, LLVMGlobalGetValueType(acc), acc, a, nc + (unsigned)p + 1, "");
  for (int i = p + 1; i-- > 0;) close_loop(P, &L[i]);
  *out_extent = (n + COLUMN_BLOCK - 1) / COLUMN_BLOCK;
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
  LLVMTypeRef params[4] = {P->ptr, P->ptr, P->i64, P->i64};
  LLVMValueRef fn = LLVMAddFunction(P->mod, name, LLVMFunctionType(P->void_t, params, 4, 0));
  unsigned nounwind = LLVMGetEnumAttributeKindForName("nounwind", 8);
  LLVMAddAttributeAtIndex(fn, LLVMAttributeFunctionIndex,
                          LLVMCreateEnumAttribute(P->ctx, nounwind, 0));
  LLVMBasicBlockRef entry = LLVMAppendBasicBlockInContext(P->ctx, fn, "entry");
  LLVMPositionBuilderAtEnd(P->b, entry);
  LLVMValueRef row_slot = LLVMBuildAlloca(P->b, P->i64, "row");
  LLVMValueRef col_slot = LLVMBuildAlloca(P->b, P->i64, "col");

  LLVMValueRef cargs[65 + KDC_MAX_RANK];
  unsigned nc = 0;
  LLVMValueRef args = LLVMGetParam(fn, 0);
  for (uint32_t i = 0; i < k->n_args; i++) {
    LLVMValueRef idx = LLVMConstInt(P->i64, i, 0);
    LLVMValueRef g = LLVMBuildInBoundsGEP2(P->b, P->ptr, args, &idx, 1, "");
    cargs[nc++] = LLVMBuildLoad2(P->b, P->ptr, g, "");
  }
  cargs[nc++] = LLVMGetParam(fn, 1);  /* coords */
  if (p) {
    column_loops(P, k, fn, acc, cargs, nc, p, LLVMGetParam(fn, 2), LLVMGetParam(fn, 3),
                 out_extent);
    LLVMBuildRetVoid(P->b);
    *out_unit_cost = COLUMN_BLOCK * k->cost;
    return;
  }
  LLVMTypeRef bt = LLVMGlobalGetValueType(body);
  wloop rows, cols;
  LLVMValueRef r = open_loop(P, fn, row_slot, &rows, LLVMGetParam(fn, 2), LLVMGetParam(fn, 3));
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
    if (np) {  /* one loop per piece of the root concatenate */
      const kdc_node *nd = &k->f->nodes[k->root];
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
