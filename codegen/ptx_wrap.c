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

enum { CUDA_BLOCK = 256, CUDA_SECTION_VERSION = 1, PTX_KERNEL_CC = 71 };

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

/* Emits kdc_cuda_<index> calling |body| into |mod|. */
static LLVMValueRef wrap(cg_plan *P, LLVMModuleRef mod, LLVMValueRef body, const kdc_type *t,
                         uint32_t n_args, uint32_t index) {
  LLVMTypeRef params[65];
  for (uint32_t i = 0; i <= n_args; i++) params[i] = P->ptr;
  char name[48];
  snprintf(name, sizeof name, "kdc_cuda_%u", index);
  LLVMValueRef fn =
      LLVMAddFunction(mod, name, LLVMFunctionType(P->void_t, params, n_args + 1, 0));
  LLVMSetFunctionCallConv(fn, PTX_KERNEL_CC);
  unsigned noalias = LLVMGetEnumAttributeKindForName("noalias", 7);
  for (uint32_t i = 0; i <= n_args; i++)
    LLVMAddAttributeAtIndex(fn, i + 1, LLVMCreateEnumAttribute(P->ctx, noalias, 0));
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
                                LLVMConstInt(P->i64, (unsigned long long)numel, 0), ""),
                  run, done);
  LLVMPositionBuilderAtEnd(P->b, run);
  LLVMValueRef cargs[65 + KDC_MAX_RANK];
  unsigned nc = 0;
  for (uint32_t i = 0; i <= n_args; i++) cargs[nc++] = LLVMGetParam(fn, i);  /* + coords */
  LLVMValueRef idx[KDC_MAX_RANK], rest = tid;
  for (int d = t->rank - 1; d >= 0; d--) {  /* unravel the element index */
    LLVMValueRef n = LLVMConstInt(P->i64, (unsigned long long)t->dims[d], 0);
    idx[d] = d == 0 ? rest : LLVMBuildURem(P->b, rest, n, "");
    if (d > 0) rest = LLVMBuildUDiv(P->b, rest, n, "");
  }
  for (int d = 0; d < t->rank; d++) cargs[nc++] = idx[d];
  LLVMBuildCall2(P->b, LLVMGlobalGetValueType(body), body, cargs, nc, "");
  LLVMBuildBr(P->b, done);
  LLVMPositionBuilderAtEnd(P->b, done);
  LLVMBuildRetVoid(P->b);
  LLVMMetadataRef md[3] = {LLVMValueAsMetadata(fn), LLVMMDStringInContext2(P->ctx, "kernel", 6),
                           LLVMValueAsMetadata(LLVMConstInt(P->i32, 1, 0))};
  LLVMAddNamedMetadataOperand(mod, "nvvm.annotations",
                              LLVMMetadataAsValue(P->ctx, LLVMMDNodeInContext2(P->ctx, md, 3)));
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
  kdc_buf_put_u32(launch, CUDA_BLOCK);
  kdc_buf_put_u32(launch, P->prog.n_kernels);
  for (uint32_t k = 0; k < P->prog.n_kernels; k++) {
    char name[48];
    snprintf(name, sizeof name, "kdc_kernel_%u", k);
    LLVMValueRef cpu = LLVMGetNamedFunction(mod, name);
    if (cpu) LLVMDeleteFunction(cpu);
    snprintf(name, sizeof name, "kdc_body_%u", k);
    LLVMValueRef body = LLVMGetNamedFunction(mod, name);
    if (!body || k >= P->cap_ktype) {
      LLVMDisposeMessage(dl);
      return KDC_ERR(KDC_INTERNAL, "codegen: --target cuda: kernel %u has no body", k);
    }
    wrap(P, mod, body, &P->ktype[k], P->prog.kernels[k].n_args, k);
    snprintf(name, sizeof name, "kdc_cuda_%u", k);
    kdc_buf_put_str(launch, name);
    kdc_buf_put_u64(launch, (uint64_t)kdc_type_numel(&P->ktype[k]));
  }
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
