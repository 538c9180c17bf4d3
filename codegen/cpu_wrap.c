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

void cg_cpu_wrap(cg_plan *P, const cg_kernel *k, LLVMValueRef body, const char *name,
                 int64_t *out_extent, int64_t *out_unit_cost) {
  const kdc_type *t = &k->out_type;
  int rank = t->rank;
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
    LLVMValueRef c = open_loop(P, fn, col_slot, &cols, LLVMConstInt(P->i64, 0, 0),
                               LLVMConstInt(P->i64, (unsigned long long)inner, 0));
    cargs[nc++] = c;
    LLVMBuildCall2(P->b, bt, body, cargs, nc, "");
    close_loop(P, &cols);
  } else {
    LLVMBuildCall2(P->b, bt, body, cargs, nc, "");
  }
  close_loop(P, &rows);
  LLVMBuildRetVoid(P->b);
  *out_extent = extent;
  *out_unit_cost = inner * k->cost;
}
