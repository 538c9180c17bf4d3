/*
 * codegen/ptx_wrap.c: the CUDA wrapper of every kernel body and the PTX of
 * the plan (docs/gpu.md).
 *
 * The kernel bodies are the CPU ones: P->mod is cloned after lowering, the
 * CPU wrappers (kdc_kernel_<k>) are deleted from the clone and each body
 * kdc_body_<k> gets a CUDA wrapper
 *
 *   ptx_kernel void kdc_cuda_<k>(ptr a_0, ..., ptr a_{n-1}, ptr coords)
 *
 * one thread per output element: t = ctaid.x * ntid.x + tid.x (i64); a
 * thread with t < numel unravels t over the output dims (div/mod by
 * constants) and calls the alwaysinline body, which stores out[t].  The
 * launch is ceil(numel / 256) blocks of 256 threads (the CUDA section).
 * Kernels are marked as PTX entries both with the PTX_Kernel calling
 * convention and the classic !nvvm.annotations {fn, "kernel", 1}.
 *
 * Math: exp, expm1, tanh and logistic are kdc's own (codegen/math_ir.c:
 * basic operations, the CPU's bits); the bodies call libm's f32 functions
 * for the others (logf, log1pf, erff) and llvm.pow; on the GPU they are renamed to libdevice's
 * __nv_expf, ... (__nv_powf), and /usr/local/cuda/nvvm/libdevice/
 * libdevice.10.bc (or $KDC_LIBDEVICE) is linked in with LLVMLinkModules2,
 * its functions internalised so O3 keeps only what is used.  Without
 * libdevice the PTX keeps the calls as .extern declarations and ptxas
 * rejects it: compile fails with a message naming the missing file
 * (kernels that use no transcendental still compile).  sqrt, floor, ceil,
 * roundeven, fabs and fptosi.sat are native PTX instructions (sqrt.rn,
 * cvt.rmi/rpi/rni); f32 division is div.rn (IEEE), no FTZ
 * (nvvm-reflect-ftz = 0), so elementwise results match the CPU bit for bit
 * except for libm's transcendentals (libdevice is not glibc's libm).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <llvm-c/Analysis.h>
#include <llvm-c/BitReader.h>
#include <llvm-c/Linker.h>
#include <llvm-c/Target.h>
#include <llvm-c/TargetMachine.h>
#include <llvm-c/Transforms/PassBuilder.h>

#include "codegen/codegen.h"

enum { CUDA_BLOCK = 256, CUDA_SECTION_VERSION = 3, PTX_KERNEL_CC = 71, SHARED_AS = 3 };

static const char TRIPLE[] = "nvptx64-nvidia-cuda";
static const char LIBDEVICE[] = "/usr/local/cuda/nvvm/libdevice/libdevice.10.bc";

/* libm name -> libdevice name (same f32 signature). */
static const char *const MATH[][2] = {
    {"expf", "__nv_expf"},     {"logf", "__nv_logf"},   {"log1pf", "__nv_log1pf"},
    {"expm1f", "__nv_expm1f"}, {"tanhf", "__nv_tanhf"}, {"erff", "__nv_erff"},
    {"llvm.pow.f32", "__nv_powf"}, {"llvm.exp.f32", "__nv_expf"}, {"llvm.log.f32", "__nv_logf"},
};

static LLVMValueRef sreg(cg_plan *P, LLVMModuleRef mod, const char *name) {
  unsigned id = LLVMLookupIntrinsicID(name, strlen(name));
  KDC_ASSERT(id != 0);
  LLVMValueRef fn = LLVMGetIntrinsicDeclaration(mod, id, NULL, 0);
  LLVMTypeRef ft = LLVMIntrinsicGetType(P->ctx, id, NULL, 0);
  return LLVMBuildZExt(P->b, LLVMBuildCall2(P->b, ft, fn, NULL, 0, ""), P->i64, "");
}

static void annotate(cg_plan *P, LLVMModuleRef mod, LLVMValueRef fn, const char *key,
                     uint32_t val) {
  LLVMMetadataRef md[3] = {LLVMValueAsMetadata(fn), LLVMMDStringInContext2(P->ctx, key, strlen(key)),
                           LLVMValueAsMetadata(LLVMConstInt(P->i32, val, 0))};
  LLVMAddNamedMetadataOperand(mod, "nvvm.annotations",
                              LLVMMetadataAsValue(P->ctx, LLVMMDNodeInContext2(P->ctx, md, 3)));
}

/* The PTX entry kdc_cuda_<index>(ptr a_0, ..., ptr a_{n_args-1}, ptr coords
 * [, ptr scratch]), every pointer noalias. */
/* Per kernel, whether some step launches it with a buffer that may not be
 * 16-byte aligned (one pass over the program): the device's buffers start
 * 256-byte aligned (runtime/cuda/exec.c) and the plan's offsets are static,
 * except inside a scan body, whose buffers move by the loop's strides each
 * iteration.  Caller frees. */
static bool *unaligned_kernels(const cg_plan *P) {
  bool *u = kdc_xcalloc(P->prog.n_kernels + 1, sizeof *u);
  for (uint32_t f = 0; f < P->prog.n_funcs; f++) {
    const kdc_prog_func *fn = &P->prog.funcs[f];
    for (uint32_t s = 0; s < fn->n_steps; s++) {
      const kdc_prog_step *st = &fn->steps[s];
      if (st->kind != KDC_STEP_KERNEL || st->kernel.kernel >= P->prog.n_kernels) continue;
      bool bad = fn->is_body;
      for (uint32_t a = 0; a < st->kernel.n_args && !bad; a++)
        bad = st->kernel.args[a].offset % 16 != 0;
      if (bad) u[st->kernel.kernel] = true;
    }
  }
  return u;
}

/* Marks the first |n_args| parameters of |fn| 16-byte aligned: LLVM then
 * merges a thread's adjacent loads and stores. */
static void mark_aligned(cg_plan *P, LLVMValueRef fn, uint32_t n_args) {
  unsigned align = LLVMGetEnumAttributeKindForName("align", 5);
  for (uint32_t i = 0; i < n_args; i++)
    LLVMAddAttributeAtIndex(fn, i + 1, LLVMCreateEnumAttribute(P->ctx, align, 16));
}

static LLVMValueRef entry_fn(cg_plan *P, LLVMModuleRef mod, uint32_t n_args, uint32_t index,
                             bool scratch) {
  LLVMTypeRef params[66];
  uint32_t n = n_args + 1 + (scratch ? 1 : 0);
  for (uint32_t i = 0; i < n; i++) params[i] = P->ptr;
  char name[48];
  snprintf(name, sizeof name, "kdc_cuda_%u", index);
  LLVMValueRef fn = LLVMAddFunction(mod, name, LLVMFunctionType(P->void_t, params, n, 0));
  LLVMSetFunctionCallConv(fn, PTX_KERNEL_CC);
  unsigned noalias = LLVMGetEnumAttributeKindForName("noalias", 7);
  for (uint32_t i = 0; i < n; i++)
    LLVMAddAttributeAtIndex(fn, i + 1, LLVMCreateEnumAttribute(P->ctx, noalias, 0));
  return fn;
}

/* Elements per thread of an ELEMENT kernel over |t|: 4 (or 2) adjacent
 * elements of the last dim when it divides and enough threads remain to
 * fill the GPU (>= 64K), else 1.  Each thread computes its elements one
 * after the other: the index arithmetic is done once, the loads of the
 * elements are independent (more bytes in flight per thread, where a bf16
 * kernel moves only 2 bytes per load), and LLVM may merge adjacent ones.
 * KDC_CUDA_UNROLL=1|2|4 at compile time caps it (a benchmarking knob:
 * docs/gpu.md, "Kernel forms"). */
static uint32_t element_unroll(const kdc_type *t) {
  uint32_t cap = 4;
  const char *env = getenv("KDC_CUDA_UNROLL");
  if (env && (!strcmp(env, "1") || !strcmp(env, "2") || !strcmp(env, "4")))
    cap = (uint32_t)atoi(env);
  if (t->rank < 1) return 1;
  int64_t last = t->dims[t->rank - 1], numel = kdc_type_numel(t);
  for (uint32_t v = cap; v > 1; v /= 2)
    if (last % v == 0 && numel / v >= 65536) return v;
  return 1;
}

/* Emits kdc_cuda_<index> calling |body| into |mod|, |unroll| adjacent
 * elements per thread (element_unroll). */
static LLVMValueRef wrap(cg_plan *P, LLVMModuleRef mod, LLVMValueRef body, const kdc_type *t,
                         uint32_t n_args, uint32_t index, uint32_t unroll) {
  LLVMValueRef fn = entry_fn(P, mod, n_args, index, false);
  LLVMBasicBlockRef entry = LLVMAppendBasicBlockInContext(P->ctx, fn, "entry");
  LLVMBasicBlockRef run = LLVMAppendBasicBlockInContext(P->ctx, fn, "run");
  LLVMBasicBlockRef done = LLVMAppendBasicBlockInContext(P->ctx, fn, "done");
  LLVMPositionBuilderAtEnd(P->b, entry);
  LLVMValueRef tid = LLVMBuildAdd(
      P->b,
      LLVMBuildMul(P->b, sreg(P, mod, "llvm.nvvm.read.ptx.sreg.ctaid.x"),
                   sreg(P, mod, "llvm.nvvm.read.ptx.sreg.ntid.x"), ""),
      sreg(P, mod, "llvm.nvvm.read.ptx.sreg.tid.x"), "t");
  int64_t numel = kdc_type_numel(t);
  LLVMBuildCondBr(P->b,
                  LLVMBuildICmp(P->b, LLVMIntULT, tid,
                                LLVMConstInt(P->i64, (unsigned long long)(numel / unroll), 0),
                                ""),
                  run, done);
  LLVMPositionBuilderAtEnd(P->b, run);
  LLVMValueRef cargs[65 + KDC_MAX_RANK];
  unsigned nc = 0;
  for (uint32_t i = 0; i <= n_args; i++) cargs[nc++] = LLVMGetParam(fn, i);  /* + coords */
  LLVMValueRef idx[KDC_MAX_RANK] = {0};
  LLVMValueRef rest = unroll > 1 ? LLVMBuildMul(P->b, tid, LLVMConstInt(P->i64, unroll, 0), "")
                                 : tid;
  for (int d = t->rank - 1; d >= 0; d--) {  /* unravel the (first) element index */
    LLVMValueRef n = LLVMConstInt(P->i64, (unsigned long long)t->dims[d], 0);
    idx[d] = d == 0 ? rest : LLVMBuildURem(P->b, rest, n, "");
    if (d > 0) rest = LLVMBuildUDiv(P->b, rest, n, "");
  }
  for (uint32_t e = 0; e < unroll; e++) {  /* the thread's adjacent elements of the last dim */
    unsigned m = nc;
    for (int d = 0; d < t->rank; d++)
      cargs[m++] = d == t->rank - 1 && e > 0
                       ? LLVMBuildNUWAdd(P->b, idx[d], LLVMConstInt(P->i64, e, 0), "")
                       : idx[d];
    LLVMBuildCall2(P->b, LLVMGlobalGetValueType(body), body, cargs, m, "");
  }
  LLVMBuildBr(P->b, done);
  LLVMPositionBuilderAtEnd(P->b, done);
  LLVMBuildRetVoid(P->b);
  annotate(P, mod, fn, "kernel", 1);
  annotate(P, mod, fn, "maxntidx", CUDA_BLOCK);
  return fn;
}

static uint32_t pow2_at_least(int64_t v, uint32_t cap) {
  uint32_t p = 1;
  while (p < cap && (int64_t)p < v) p *= 2;
  return p;
}

/* The launch form of a reduction (cg_gpu_form): |tile| outputs per block,
 * |lanes| threads per output, at most 1024 threads.  Columns: 32 or 8
 * adjacent outputs (a warp reads whole 32-byte sectors) and lanes enough
 * that each folds >= 16 terms; rows: a warp per output, or a whole block
 * when there are few outputs with long rows. */
static void reduce_geometry(cg_gpu_form *g) {
  if (g->kind == CG_GPU_COLUMN) {
    g->tile = g->outputs >= 4096 ? 32 : pow2_at_least(g->outputs, 8);
    g->lanes = pow2_at_least(g->terms / 16, 1024 / g->tile);
    /* at least a warp per block (the launch table's rule): few outputs with
     * short columns (text_classifier's training plan: 1 output, 128 terms)
     * get more lanes, the extra ones folding no term (the identity) */
    while (g->tile * g->lanes < 32) g->lanes *= 2;
  } else {
    g->lanes = g->outputs < 512 && g->terms >= 4096 ? pow2_at_least(g->terms / 16, 1024) : 32;
    g->tile = g->lanes >= 256 ? 1 : 256 / g->lanes;
  }
  /* few tiles (a handful of outputs, long columns: batch-norm statistics,
   * bias gradients): split the terms over blocks so that ~256 blocks run
   * (two per SM of an H100), each lane still folding >= 16 terms */
  int64_t tiles = (g->outputs + g->tile - 1) / g->tile;
  int64_t want = (256 + tiles - 1) / tiles, most = g->terms / ((int64_t)g->lanes * 16);
  g->splits = (uint32_t)(want < most ? want : most);
  if (g->splits < 2) g->splits = 1;
  if (g->splits > 1024) g->splits = 1024;
  if (g->splits > 1) {
    g->partials_at = ((uint64_t)tiles * 4 + 255) / 256 * 256;
    g->scratch = g->partials_at + (uint64_t)g->splits * (uint64_t)g->outputs * 8;
  }
}

kdc_status cg_ptx_plan_kernel(cg_plan *P, const cg_kernel *k, uint32_t idx) {
  KDC_GROW(P->kform, P->cap_kform, (size_t)idx + 1);
  cg_gpu_form *g = &P->kform[idx];
  memset(g, 0, sizeof *g);
  int lo, s;
  if (!cg_kernel_reduce_run(k, &lo, &s)) return NULL;
  const kdc_node *nd = &k->f->nodes[k->root];
  g->x = k->f->nodes[nd->in[0]].type;
  /* a run at the back is a row reduction: outputs [0, lo), terms [lo, rank);
   * any other run [lo, s) a column reduction: terms [lo, s), outputs the
   * outer dims [0, lo) times the inner [s, rank) */
  bool row = s == g->x.rank;
  int64_t terms = 1;
  for (int d = lo; d < s; d++) terms *= g->x.dims[d];
  int64_t inner = kdc_type_numel(&g->x) / terms;
  for (int d = 0; d < lo; d++) inner /= g->x.dims[d];
  /* a middle run needs enough adjacent outputs for a tile (a warp reads
   * whole sectors) */
  if (!row && lo > 0 && inner < 32) return NULL;
  g->split = row ? lo : s;
  g->lo = row ? 0 : lo;
  g->red = nd->attr.reduce.kind;
  g->kind = row ? CG_GPU_ROW : CG_GPU_COLUMN;
  g->terms = terms;
  g->outputs = kdc_type_numel(&g->x) / terms;
  /* short rows: one thread per output reads its row from cache lines it
   * owns anyway; a parallel form pays a tree for nothing */
  if (g->terms < (g->kind == CG_GPU_ROW ? 32 : 64) ||
      /* a row whose elements lie apart (a transpose on the way): one thread
       * per output reads adjacent addresses across the warp, lanes would not */
      (g->kind == CG_GPU_ROW && !cg_kernel_operand_plain(k))) {
    g->kind = CG_GPU_ELEMENT;
    return NULL;
  }
  reduce_geometry(g);
  char name[48];
  snprintf(name, sizeof name, "kdc_opnd_%u", idx);
  LLVMValueRef body;
  kdc_status st = cg_body_emit_operand(P, k, name, &body);
  if (st) g->kind = CG_GPU_ELEMENT;  /* cannot happen when the generic body emitted */
  kdc_status_free(st);
  return NULL;
}

/* |lin| (i64) unravelled over dims [lo, hi) of |t| into idx[lo..hi). */
static void unravel(cg_plan *P, const kdc_type *t, int lo, int hi, LLVMValueRef lin,
                    LLVMValueRef *idx) {
  for (int d = hi - 1; d >= lo; d--) {
    LLVMValueRef n = LLVMConstInt(P->i64, (unsigned long long)t->dims[d], 0);
    idx[d] = d == lo ? lin : LLVMBuildURem(P->b, lin, n, "");
    if (d > lo) lin = LLVMBuildUDiv(P->b, lin, n, "");
  }
}

/* A call of the no-argument intrinsic |name| (barrier, fence). */
static void call0(cg_plan *P, LLVMModuleRef mod, const char *name) {
  unsigned id = LLVMLookupIntrinsicID(name, strlen(name));
  KDC_ASSERT(id != 0);
  LLVMValueRef f = LLVMGetIntrinsicDeclaration(mod, id, NULL, 0);
  LLVMBuildCall2(P->b, LLVMIntrinsicGetType(P->ctx, id, NULL, 0), f, NULL, 0, "");
}

/* The end of a split reduction (the classic "last block" pattern, with a
 * fixed order): every writer has stored its partial; after a device-wide
 * fence and the block's barrier, thread 0 counts the block in its tile's
 * counter (scratch[tile], u32); the block that counts last (every other
 * block of the tile has fenced its partials) folds the tile's partials
 * g = 0, 1, .. splits-1 per output in that order (volatile loads: they
 * were written by other blocks in this launch), stores the outputs and
 * resets the counter to 0 for the next launch (the executor zeroes the
 * scratch once).  The result is independent of which block is last. */
static void combine_partials(cg_plan *P, LLVMModuleRef mod, LLVMValueRef fn, uint32_t index,
                             const cg_gpu_form *g, kdc_dtype dt, LLVMValueRef tid,
                             LLVMValueRef tix, LLVMValueRef writer, LLVMValueRef o,
                             LLVMValueRef scratch, LLVMValueRef partials) {
  LLVMBuilderRef B = P->b;
  LLVMTypeRef rt = cg_reg_type(P, dt), mt = cg_mem_type(P, dt);
  char name[48];
  snprintf(name, sizeof name, "kdc_last_%u", index);
  LLVMValueRef flag = LLVMAddGlobalInAddressSpace(mod, P->i32, name, SHARED_AS);
  LLVMSetInitializer(flag, LLVMGetUndef(P->i32));
  LLVMSetLinkage(flag, LLVMInternalLinkage);
  call0(P, mod, "llvm.nvvm.membar.gl");
  call0(P, mod, "llvm.nvvm.barrier0");
  LLVMValueRef zero = LLVMConstInt(P->i64, 0, 0);
  LLVMValueRef counter = LLVMBuildInBoundsGEP2(B, P->i32, scratch, &tix, 1, "");
  LLVMBasicBlockRef count = LLVMAppendBasicBlockInContext(P->ctx, fn, "count");
  LLVMBasicBlockRef counted = LLVMAppendBasicBlockInContext(P->ctx, fn, "counted");
  LLVMBuildCondBr(B, LLVMBuildICmp(B, LLVMIntEQ, tid, zero, ""), count, counted);
  LLVMPositionBuilderAtEnd(B, count);
  LLVMValueRef old = LLVMBuildAtomicRMW(B, LLVMAtomicRMWBinOpAdd, counter,
                                        LLVMConstInt(P->i32, 1, 0),
                                        LLVMAtomicOrderingMonotonic, 0);
  LLVMValueRef last = LLVMBuildICmp(B, LLVMIntEQ, old, LLVMConstInt(P->i32, g->splits - 1, 0), "");
  LLVMBuildStore(B, LLVMBuildZExt(B, last, P->i32, ""), flag);
  LLVMBuildBr(B, counted);
  LLVMPositionBuilderAtEnd(B, counted);
  call0(P, mod, "llvm.nvvm.barrier0");
  LLVMBasicBlockRef fold = LLVMAppendBasicBlockInContext(P->ctx, fn, "fold");
  LLVMBasicBlockRef end = LLVMAppendBasicBlockInContext(P->ctx, fn, "end");
  LLVMValueRef is_last =
      LLVMBuildICmp(B, LLVMIntNE, LLVMBuildLoad2(B, P->i32, flag, ""), LLVMConstInt(P->i32, 0, 0), "");
  LLVMBuildCondBr(B, is_last, fold, end);
  LLVMPositionBuilderAtEnd(B, fold);
  call0(P, mod, "llvm.nvvm.membar.gl");
  LLVMBasicBlockRef reset = LLVMAppendBasicBlockInContext(P->ctx, fn, "reset");
  LLVMBasicBlockRef fold2 = LLVMAppendBasicBlockInContext(P->ctx, fn, "fold2");
  LLVMBuildCondBr(B, LLVMBuildICmp(B, LLVMIntEQ, tid, zero, ""), reset, fold2);
  LLVMPositionBuilderAtEnd(B, reset);
  LLVMSetVolatile(LLVMBuildStore(B, LLVMConstInt(P->i32, 0, 0), counter), 1);
  LLVMBuildBr(B, fold2);
  LLVMPositionBuilderAtEnd(B, fold2);
  LLVMBasicBlockRef sum = LLVMAppendBasicBlockInContext(P->ctx, fn, "sum");
  LLVMBuildCondBr(B, writer, sum, end);
  LLVMPositionBuilderAtEnd(B, sum);
  /* acc = fold of partials[s * outputs + o], s = 0 .. splits-1 */
  LLVMValueRef accp = cg_entry_alloca(P, fn, rt), sp = cg_entry_alloca(P, fn, P->i64);
  LLVMBuildStore(B, cg_reduce_init(P, g->red, dt), accp);
  LLVMBuildStore(B, zero, sp);
  LLVMBasicBlockRef head = LLVMAppendBasicBlockInContext(P->ctx, fn, "parts");
  LLVMBasicBlockRef body = LLVMAppendBasicBlockInContext(P->ctx, fn, "part");
  LLVMBasicBlockRef put = LLVMAppendBasicBlockInContext(P->ctx, fn, "put");
  LLVMBuildBr(B, head);
  LLVMPositionBuilderAtEnd(B, head);
  LLVMValueRef sv = LLVMBuildLoad2(B, P->i64, sp, "");
  LLVMBuildCondBr(B, LLVMBuildICmp(B, LLVMIntULT, sv, LLVMConstInt(P->i64, g->splits, 0), ""),
                  body, put);
  LLVMPositionBuilderAtEnd(B, body);
  LLVMValueRef outs = LLVMConstInt(P->i64, (unsigned long long)g->outputs, 0);
  LLVMValueRef at = LLVMBuildAdd(B, LLVMBuildMul(B, sv, outs, ""), o, "");
  LLVMValueRef v = LLVMBuildLoad2(B, mt, LLVMBuildInBoundsGEP2(B, mt, partials, &at, 1, ""), "");
  LLVMSetVolatile(v, 1);
  if (dt == KDC_DTYPE_BOOL) v = LLVMBuildICmp(B, LLVMIntNE, v, LLVMConstInt(P->i8, 0, 0), "");
  LLVMBuildStore(B, cg_reduce_step(P, g->red, dt, LLVMBuildLoad2(B, rt, accp, ""), v), accp);
  LLVMBuildStore(B, LLVMBuildAdd(B, sv, LLVMConstInt(P->i64, 1, 0), ""), sp);
  LLVMBuildBr(B, head);
  LLVMPositionBuilderAtEnd(B, put);
  LLVMValueRef acc = LLVMBuildLoad2(B, rt, accp, "");
  LLVMValueRef res = dt == KDC_DTYPE_BOOL ? LLVMBuildZExt(B, acc, P->i8, "") : acc;
  LLVMValueRef dst = LLVMBuildInBoundsGEP2(B, mt, LLVMGetParam(fn, 0), &o, 1, "");
  LLVMSetAlignment(LLVMBuildStore(B, res, dst), (unsigned)kdc_dtype_size(dt));
  LLVMBuildBr(B, end);
  LLVMPositionBuilderAtEnd(B, end);
}

/* The parallel reduction kdc_cuda_<index> of form |g| (docs/gpu.md):
 *   output o = ctaid.x * tile + (its place in the block), lane l of lanes;
 *   acc = fold of opnd(o, j) for j = l, l + lanes, ... (terms);
 *   the lanes' accumulators are combined in shared memory by a fixed
 *   pairwise tree (lane i takes lane i + s, s = lanes/2 .. 1), so the result
 *   does not depend on scheduling: the same bits on every run.
 * Columns keep the tile's outputs adjacent in the block (a warp reads
 * adjacent addresses of one operand row); rows keep an output's lanes
 * adjacent (a warp reads adjacent elements of one row). */
static LLVMValueRef wrap_reduce(cg_plan *P, LLVMModuleRef mod, LLVMValueRef opnd,
                                const cg_gpu_form *g, kdc_dtype dt, uint32_t n_args,
                                uint32_t index) {
  LLVMValueRef fn = entry_fn(P, mod, n_args, index, g->splits > 1);
  LLVMTypeRef rt = cg_reg_type(P, dt), mt = cg_mem_type(P, dt);
  uint32_t block = g->tile * g->lanes;
  char name[48];
  snprintf(name, sizeof name, "kdc_shared_%u", index);
  LLVMValueRef sh = LLVMAddGlobalInAddressSpace(mod, LLVMArrayType2(mt, block), name, SHARED_AS);
  LLVMSetInitializer(sh, LLVMGetUndef(LLVMArrayType2(mt, block)));
  LLVMSetLinkage(sh, LLVMInternalLinkage);
  LLVMSetAlignment(sh, 16);
  LLVMBasicBlockRef entry = LLVMAppendBasicBlockInContext(P->ctx, fn, "entry");
  LLVMBasicBlockRef pre = LLVMAppendBasicBlockInContext(P->ctx, fn, "pre");
  LLVMBasicBlockRef head = LLVMAppendBasicBlockInContext(P->ctx, fn, "head");
  LLVMBasicBlockRef body = LLVMAppendBasicBlockInContext(P->ctx, fn, "body");
  LLVMBasicBlockRef tree = LLVMAppendBasicBlockInContext(P->ctx, fn, "tree");
  LLVMBuilderRef B = P->b;
  LLVMPositionBuilderAtEnd(B, entry);
  LLVMValueRef acc = LLVMBuildAlloca(B, rt, "acc"), jv = LLVMBuildAlloca(B, P->i64, "j");
  LLVMValueRef tid = sreg(P, mod, "llvm.nvvm.read.ptx.sreg.tid.x");
  LLVMValueRef bid = sreg(P, mod, "llvm.nvvm.read.ptx.sreg.ctaid.x");
  LLVMValueRef lanes = LLVMConstInt(P->i64, g->lanes, 0), tile = LLVMConstInt(P->i64, g->tile, 0);
  LLVMValueRef lane, slot;  /* lane within the output; the output's place in the block */
  if (g->kind == CG_GPU_COLUMN) {
    slot = LLVMBuildURem(B, tid, tile, "");
    lane = LLVMBuildUDiv(B, tid, tile, "");
  } else {
    lane = LLVMBuildURem(B, tid, lanes, "");
    slot = LLVMBuildUDiv(B, tid, lanes, "");
  }
  LLVMValueRef splits = LLVMConstInt(P->i64, g->splits, 0);
  LLVMValueRef tix = LLVMBuildUDiv(B, bid, splits, "tile"), part = LLVMBuildURem(B, bid, splits, "");
  LLVMValueRef o = LLVMBuildAdd(B, LLVMBuildMul(B, tix, tile, ""), slot, "o");
  /* this block's chunk of the terms: [part * chunk, min(part * chunk + chunk, terms)) */
  int64_t chunk = (g->terms + g->splits - 1) / g->splits;
  LLVMValueRef j0 = LLVMBuildMul(B, part, LLVMConstInt(P->i64, (unsigned long long)chunk, 0), "");
  LLVMValueRef j1 = LLVMBuildAdd(B, j0, LLVMConstInt(P->i64, (unsigned long long)chunk, 0), "");
  LLVMValueRef nt = LLVMConstInt(P->i64, (unsigned long long)g->terms, 0);
  j1 = LLVMBuildSelect(B, LLVMBuildICmp(B, LLVMIntULT, j1, nt, ""), j1, nt, "");
  LLVMBuildStore(B, cg_reduce_init(P, g->red, dt), acc);
  LLVMValueRef live =
      LLVMBuildICmp(B, LLVMIntULT, o, LLVMConstInt(P->i64, (unsigned long long)g->outputs, 0), "");
  LLVMBuildCondBr(B, live, pre, tree);
  /* pre: the output's part of the operand index, then the lane's terms */
  LLVMPositionBuilderAtEnd(B, pre);
  const kdc_type *x = &g->x;
  LLVMValueRef idx[KDC_MAX_RANK];
  bool col = g->kind == CG_GPU_COLUMN;
  if (col && g->lo) {  /* outputs over the outer dims [0, lo) and the inner [split, rank) */
    int64_t inner = 1;
    for (int d = g->split; d < x->rank; d++) inner *= x->dims[d];
    LLVMValueRef in = LLVMConstInt(P->i64, (unsigned long long)inner, 0);
    unravel(P, x, g->split, x->rank, LLVMBuildURem(B, o, in, ""), idx);
    unravel(P, x, 0, g->lo, LLVMBuildUDiv(B, o, in, ""), idx);
  } else if (col) unravel(P, x, g->split, x->rank, o, idx);
  else unravel(P, x, 0, g->split, o, idx);
  LLVMBuildStore(B, LLVMBuildAdd(B, j0, lane, ""), jv);
  LLVMBuildBr(B, head);
  LLVMPositionBuilderAtEnd(B, head);
  LLVMValueRef j = LLVMBuildLoad2(B, P->i64, jv, "");
  LLVMBuildCondBr(B, LLVMBuildICmp(B, LLVMIntULT, j, j1, ""), body, tree);
  LLVMPositionBuilderAtEnd(B, body);
  if (col) unravel(P, x, g->lo, g->split, j, idx);
  else unravel(P, x, g->split, x->rank, j, idx);
  LLVMValueRef cargs[65 + KDC_MAX_RANK];
  unsigned nc = 0;
  for (uint32_t i = 0; i <= n_args; i++) cargs[nc++] = LLVMGetParam(fn, i);  /* + coords */
  for (int d = 0; d < x->rank; d++) cargs[nc++] = idx[d];
  LLVMValueRef v = LLVMBuildCall2(B, LLVMGlobalGetValueType(opnd), opnd, cargs, nc, "");
  LLVMValueRef a = LLVMBuildLoad2(B, rt, acc, "");
  LLVMBuildStore(B, cg_reduce_step(P, g->red, dt, a, v), acc);
  LLVMBuildStore(B, LLVMBuildNSWAdd(B, j, lanes, ""), jv);
  LLVMBuildBr(B, head);
  /* tree: every thread of the block gets here (barriers below) */
  LLVMPositionBuilderAtEnd(B, tree);
  LLVMTypeRef at = LLVMArrayType2(mt, block);
  LLVMValueRef zero = LLVMConstInt(P->i64, 0, 0);
#define SLOT(ln)                                                                          \
  (col ? LLVMBuildAdd(B, LLVMBuildMul(B, (ln), tile, ""), slot, "")                      \
       : LLVMBuildAdd(B, LLVMBuildMul(B, slot, lanes, ""), (ln), ""))
#define AT(i) LLVMBuildInBoundsGEP2(B, at, sh, (LLVMValueRef[]){zero, (i)}, 2, "")
  LLVMValueRef mine = AT(SLOT(lane));
  LLVMValueRef av = LLVMBuildLoad2(B, rt, acc, "");
  LLVMBuildStore(B, dt == KDC_DTYPE_BOOL ? LLVMBuildZExt(B, av, P->i8, "") : av, mine);
  for (uint32_t s2 = g->lanes / 2; s2 >= 1; s2 /= 2) {
    call0(P, mod, "llvm.nvvm.barrier0");
    LLVMBasicBlockRef step = LLVMAppendBasicBlockInContext(P->ctx, fn, "step");
    LLVMBasicBlockRef next = LLVMAppendBasicBlockInContext(P->ctx, fn, "next");
    LLVMBuildCondBr(B, LLVMBuildICmp(B, LLVMIntULT, lane, LLVMConstInt(P->i64, s2, 0), ""), step,
                    next);
    LLVMPositionBuilderAtEnd(B, step);
    LLVMValueRef other = AT(SLOT(LLVMBuildAdd(B, lane, LLVMConstInt(P->i64, s2, 0), "")));
    LLVMValueRef m1 = LLVMBuildLoad2(B, mt, mine, ""), m2 = LLVMBuildLoad2(B, mt, other, "");
    if (dt == KDC_DTYPE_BOOL) {
      m1 = LLVMBuildICmp(B, LLVMIntNE, m1, LLVMConstInt(P->i8, 0, 0), "");
      m2 = LLVMBuildICmp(B, LLVMIntNE, m2, LLVMConstInt(P->i8, 0, 0), "");
    }
    LLVMValueRef r = cg_reduce_step(P, g->red, dt, m1, m2);
    LLVMBuildStore(B, dt == KDC_DTYPE_BOOL ? LLVMBuildZExt(B, r, P->i8, "") : r, mine);
    LLVMBuildBr(B, next);
    LLVMPositionBuilderAtEnd(B, next);
  }
#undef AT
#undef SLOT
  /* lane 0 of a live output stores what it combined last (no barrier: its
   * own slot): into the output, or, split, into its partial */
  LLVMBasicBlockRef store = LLVMAppendBasicBlockInContext(P->ctx, fn, "store");
  LLVMBasicBlockRef done = LLVMAppendBasicBlockInContext(P->ctx, fn, "done");
  LLVMValueRef first = LLVMBuildICmp(B, LLVMIntEQ, lane, zero, "");
  LLVMValueRef writer = LLVMBuildAnd(B, first, live, "");
  LLVMValueRef out = LLVMGetParam(fn, 0), scratch = NULL, partials = NULL;
  if (g->splits > 1) {  /* scratch: u32 counters (tiles, 256-byte rounded), then partials */
    scratch = LLVMGetParam(fn, n_args + 1);
    partials = LLVMBuildInBoundsGEP2(
        B, P->i64, scratch, (LLVMValueRef[]){LLVMConstInt(P->i64, g->partials_at / 8, 0)}, 1, "");
  }
  LLVMBuildCondBr(B, writer, store, done);
  LLVMPositionBuilderAtEnd(B, store);
  LLVMValueRef res = LLVMBuildLoad2(B, mt, mine, "");
  if (g->splits > 1) {
    LLVMValueRef outs = LLVMConstInt(P->i64, (unsigned long long)g->outputs, 0);
    LLVMValueRef pos = LLVMBuildAdd(B, LLVMBuildMul(B, part, outs, ""), o, "");
    LLVMSetVolatile(LLVMBuildStore(B, res, LLVMBuildInBoundsGEP2(B, mt, partials, &pos, 1, "")),
                    1);
  } else {
    LLVMValueRef dst = LLVMBuildInBoundsGEP2(B, mt, out, &o, 1, "");
    LLVMSetAlignment(LLVMBuildStore(B, res, dst), (unsigned)kdc_dtype_size(dt));
  }
  LLVMBuildBr(B, done);
  LLVMPositionBuilderAtEnd(B, done);
  if (g->splits > 1)
    combine_partials(P, mod, fn, index, g, dt, tid, tix, writer, o, scratch, partials);
  LLVMBuildRetVoid(B);
  annotate(P, mod, fn, "kernel", 1);
  annotate(P, mod, fn, "maxntidx", block);
  return fn;
}

/* Renames libm declarations and replaces math intrinsics by libdevice's
 * functions; true when any is used. */
static bool map_math(cg_plan *P, LLVMModuleRef mod) {
  bool used = false;
  for (size_t i = 0; i < sizeof MATH / sizeof MATH[0]; i++) {
    LLVMValueRef f = LLVMGetNamedFunction(mod, MATH[i][0]);
    if (!f) continue;
    used = true;
    LLVMValueRef nv = LLVMGetNamedFunction(mod, MATH[i][1]);
    if (!nv) {
      nv = LLVMAddFunction(mod, MATH[i][1], LLVMGlobalGetValueType(f));
      unsigned nounwind = LLVMGetEnumAttributeKindForName("nounwind", 8);
      LLVMAddAttributeAtIndex(nv, LLVMAttributeFunctionIndex,
                              LLVMCreateEnumAttribute(P->ctx, nounwind, 0));
    }
    LLVMReplaceAllUsesWith(f, nv);
    LLVMDeleteFunction(f);
  }
  return used;
}

static kdc_status link_libdevice(cg_plan *P, LLVMModuleRef mod, const char *dl) {
  const char *path = getenv("KDC_LIBDEVICE");
  if (!path || !*path) path = LIBDEVICE;
  LLVMMemoryBufferRef buf;
  char *msg = NULL;
  if (LLVMCreateMemoryBufferWithContentsOfFile(path, &buf, &msg)) {
    kdc_status st = KDC_ERR(KDC_UNSUPPORTED, "codegen: --target cuda: the kernels call math "
                            "functions and libdevice is missing (%s: %s); install the CUDA "
                            "toolkit or set KDC_LIBDEVICE", path, msg ? msg : "");
    LLVMDisposeMessage(msg);
    return st;
  }
  LLVMModuleRef ld = NULL;
  bool bad = LLVMParseBitcodeInContext2(P->ctx, buf, &ld);
  LLVMDisposeMemoryBuffer(buf);
  if (bad) return KDC_ERR(KDC_INVALID_INPUT, "codegen: %s: not LLVM bitcode", path);
  LLVMSetTarget(ld, TRIPLE);
  LLVMSetDataLayout(ld, dl);
  if (LLVMLinkModules2(mod, ld)) /* consumes ld */
    return KDC_ERR(KDC_INTERNAL, "codegen: linking %s failed", path);
  return NULL;
}

/* Everything but the kdc_cuda_ entries becomes internal (O3 drops the
 * unused libdevice functions and inlines the rest). */
static void internalize(LLVMModuleRef mod) {
  for (LLVMValueRef f = LLVMGetFirstFunction(mod); f; f = LLVMGetNextFunction(f)) {
    size_t len;
    const char *n = LLVMGetValueName2(f, &len);
    if (LLVMIsDeclaration(f) || !strncmp(n, "kdc_cuda_", 9)) continue;
    LLVMSetLinkage(f, LLVMInternalLinkage);
  }
  for (LLVMValueRef g = LLVMGetFirstGlobal(mod); g; g = LLVMGetNextGlobal(g))
    if (!LLVMIsDeclaration(g) && LLVMGetLinkage(g) != LLVMPrivateLinkage)
      LLVMSetLinkage(g, LLVMInternalLinkage);
}

static kdc_status target_machine(int sm, LLVMTargetMachineRef *out) {
  LLVMInitializeNVPTXTargetInfo();
  LLVMInitializeNVPTXTarget();
  LLVMInitializeNVPTXTargetMC();
  LLVMInitializeNVPTXAsmPrinter();
  LLVMTargetRef T;
  char *msg = NULL;
  if (LLVMGetTargetFromTriple(TRIPLE, &T, &msg)) {
    kdc_status st = KDC_ERR(KDC_UNSUPPORTED, "codegen: this LLVM has no NVPTX backend: %s",
                            msg ? msg : "");
    LLVMDisposeMessage(msg);
    return st;
  }
  char cpu[16];
  snprintf(cpu, sizeof cpu, "sm_%d", sm);
  /* PTX ISA 7.8 is the first with sm_90; ptxas of CUDA >= 11.8 reads it. */
  *out = LLVMCreateTargetMachine(T, TRIPLE, cpu, "+ptx78", LLVMCodeGenLevelAggressive,
                                 LLVMRelocDefault, LLVMCodeModelDefault);
  return *out ? NULL : KDC_ERR(KDC_INTERNAL, "codegen: no NVPTX target machine for %s", cpu);
}

static kdc_status lower(cg_plan *P, LLVMModuleRef mod, LLVMTargetMachineRef tm, int sm,
                        kdc_buf *launch) {
  LLVMTargetDataRef td = LLVMCreateTargetDataLayout(tm);
  char *dl = LLVMCopyStringRepOfTargetData(td);
  LLVMDisposeTargetData(td);
  LLVMSetTarget(mod, TRIPLE);
  LLVMSetDataLayout(mod, dl);
  kdc_buf_put_u32(launch, CUDA_SECTION_VERSION);
  kdc_buf_put_u32(launch, (uint32_t)sm);
  kdc_buf_put_u32(launch, P->prog.n_kernels);
  bool *unaligned = unaligned_kernels(P);
  for (uint32_t k = 0; k < P->prog.n_kernels; k++) {
    char name[48];
    snprintf(name, sizeof name, "kdc_kernel_%u", k);
    LLVMValueRef cpu = LLVMGetNamedFunction(mod, name);
    if (cpu) LLVMDeleteFunction(cpu);
    snprintf(name, sizeof name, "kdc_body_%u", k);
    LLVMValueRef body = LLVMGetNamedFunction(mod, name);
    if (!body || k >= P->cap_ktype) {
      LLVMDisposeMessage(dl);
      free(unaligned);
      return KDC_ERR(KDC_INTERNAL, "codegen: --target cuda: kernel %u has no body", k);
    }
    const cg_gpu_form *g = k < P->cap_kform ? &P->kform[k] : NULL;
    uint64_t threads = (uint64_t)kdc_type_numel(&P->ktype[k]);
    uint32_t block = CUDA_BLOCK, form = CG_GPU_ELEMENT;
    uint64_t scratch = 0;
    snprintf(name, sizeof name, "kdc_opnd_%u", k);
    LLVMValueRef opnd = LLVMGetNamedFunction(mod, name);
    LLVMValueRef entry;
    if (g && g->kind != CG_GPU_ELEMENT && opnd) {
      entry = wrap_reduce(P, mod, opnd, g, g->x.dtype, P->prog.kernels[k].n_args, k);
      block = g->tile * g->lanes;
      threads = (uint64_t)((g->outputs + g->tile - 1) / g->tile) * g->splits * block;
      form = (uint32_t)g->kind;
      scratch = g->scratch;
    } else {
      uint32_t unroll = element_unroll(&P->ktype[k]);
      entry = wrap(P, mod, body, &P->ktype[k], P->prog.kernels[k].n_args, k, unroll);
      threads /= unroll;
    }
    if (!unaligned[k]) mark_aligned(P, entry, P->prog.kernels[k].n_args);
    snprintf(name, sizeof name, "kdc_cuda_%u", k);
    kdc_buf_put_str(launch, name);
    kdc_buf_put_u64(launch, threads);
    kdc_buf_put_u32(launch, block);
    kdc_buf_put_u32(launch, form);
    kdc_buf_put_u64(launch, scratch);
  }
  free(unaligned);
  LLVMAddModuleFlag(mod, LLVMModuleFlagBehaviorOverride, "nvvm-reflect-ftz", 16,
                    LLVMValueAsMetadata(LLVMConstInt(P->i32, 0, 0)));
  kdc_status st = map_math(P, mod) ? link_libdevice(P, mod, dl) : NULL;
  LLVMDisposeMessage(dl);
  if (st) return st;
  internalize(mod);
  char *msg = NULL;
  if (LLVMVerifyModule(mod, LLVMReturnStatusAction, &msg)) {
    st = KDC_ERR(KDC_INTERNAL, "codegen: --target cuda: invalid LLVM IR: %.400s", msg);
    LLVMDisposeMessage(msg);
    return st;
  }
  LLVMDisposeMessage(msg);
  LLVMPassBuilderOptionsRef po = LLVMCreatePassBuilderOptions();
  LLVMErrorRef err = LLVMRunPasses(mod, "default<O3>", tm, po);
  LLVMDisposePassBuilderOptions(po);
  if (err) {
    char *e = LLVMGetErrorMessage(err);
    st = KDC_ERR(KDC_INTERNAL, "codegen: --target cuda: optimisation failed: %s", e);
    LLVMDisposeErrorMessage(e);
  }
  return st;
}

kdc_status cg_ptx_emit(cg_plan *P, int sm, char **ptx, size_t *ptx_len, kdc_buf *launch) {
  *ptx = NULL;
  *ptx_len = 0;
  if (sm != 80 && sm != 90)
    return KDC_ERR(KDC_INVALID_INPUT, "--sm %d: expected 80 or 90", sm);
  LLVMTargetMachineRef tm;
  KDC_RETURN_IF_ERROR(target_machine(sm, &tm));
  LLVMModuleRef mod = LLVMCloneModule(P->mod);
  for (uint32_t k = 0; k < P->prog.n_kernels; k++) {  /* the CPU never calls them */
    char name[48];
    snprintf(name, sizeof name, "kdc_opnd_%u", k);
    LLVMValueRef f = LLVMGetNamedFunction(P->mod, name);
    if (f) LLVMDeleteFunction(f);
  }
  kdc_status st = lower(P, mod, tm, sm, launch);
  LLVMMemoryBufferRef out = NULL;
  char *msg = NULL;
  if (!st && LLVMTargetMachineEmitToMemoryBuffer(tm, mod, LLVMAssemblyFile, &msg, &out)) {
    st = KDC_ERR(KDC_INTERNAL, "codegen: --target cuda: PTX emission failed: %s",
                 msg ? msg : "");
    LLVMDisposeMessage(msg);
  }
  if (!st) {
    *ptx_len = LLVMGetBufferSize(out);
    *ptx = kdc_xmalloc(*ptx_len + 1);
    memcpy(*ptx, LLVMGetBufferStart(out), *ptx_len);
    (*ptx)[*ptx_len] = 0;
    LLVMDisposeMemoryBuffer(out);
  }
  LLVMDisposeModule(mod);
  LLVMDisposeTargetMachine(tm);
  return st;
}
