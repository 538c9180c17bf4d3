/*
 * runtime/jit.c: the CODE section (LLVM bitcode) -> machine code for this
 * CPU, with LLVM's ORC LLJIT.
 *
 * The plan carries target-independent, unoptimised bitcode; here it gets
 * the host triple, the host CPU name and features, and LLVM's "default<O3>"
 * pipeline (loop and SLP vectorisers on) with a TargetMachine for this CPU,
 * so AVX2/AVX-512 are used where the machine has them and nowhere else.
 * LLVM's MergeFunctions runs first: the kernels of one plan repeat (predict,
 * train_step and evaluate share the forward pass; every optimizer update of
 * weights of one shape is the same kernel), so identical bodies are merged
 * and identical wrappers become a tail call to the first, before O3 and
 * the backend spend their time on each copy (small_cnn's training plan:
 * 332 functions, 152 distinct).
 * The optimised module is compiled here into one object file in memory
 * (the same TargetMachine options LLJIT would use) and the object is added
 * to the LLJIT; with a cache directory the object is looked up first and
 * stored after (jit_cache.c), so a plan loaded again on the same kind of
 * machine skips the optimiser and the backend, which are nearly all of a
 * load's time.
 * This is JIT-at-load: the build never looks at the host (STYLE
 * anti-pattern 5), and one plan runs on any x86-64 or arm64 machine.
 *
 * Kernels call libm (logf, erff, ...): a DynamicLibrarySearchGenerator for
 * the process resolves them from the libm the runtime itself links.
 *
 * Every LLVM failure (bitcode that does not parse, a module that does not
 * verify, a missing symbol) is a KDC_INVALID_INPUT naming the file, the
 * "code" section and its offset: a bad plan never aborts the process.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <llvm-c/Analysis.h>
#include <llvm-c/BitReader.h>
#include <llvm-c/Core.h>
#include <llvm-c/Error.h>
#include <llvm-c/LLJIT.h>
#include <llvm-c/Orc.h>
#include <llvm-c/Support.h>
#include <llvm-c/Target.h>
#include <llvm-c/TargetMachine.h>
#include <llvm-c/Transforms/PassBuilder.h>

#include "runtime/runtime.h"

struct rt_jit {
  LLVMOrcLLJITRef jit;
  size_t n_nontemporal;  /* stores mark_nontemporal marked */
  size_t n_merged;       /* function bodies MergeFunctions removed */
  bool from_cache;       /* the object came from the compiled-code cache */
};

static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static int init_failed;

/* LLVM's loop vectoriser vectorises a floating-point sum in order (a
 * vector of elements added one lane after the other, llvm.vector.reduce.fadd
 * without reassoc) only where the target asks for it (AArch64) or with
 * this option.  In order is the interpreter's order, so results keep
 * their bits, and what feeds the sum is vectorised: a softmax's
 * sum exp(x - max) runs kdc's exp 8 lanes at a time instead of one call
 * per element (docs/codegen.md, "Transcendentals and vectorisation"). */
static void init_llvm(void) {
  init_failed = LLVMInitializeNativeTarget() || LLVMInitializeNativeAsmPrinter();
  const char *const argv[] = {"kdc", "-force-ordered-reductions"};
  LLVMParseCommandLineOptions(2, argv, NULL);
}

/* Collects the first diagnostic LLVM reports while parsing bitcode. */
static void on_diag(LLVMDiagnosticInfoRef di, void *ctx) {
  char **slot = ctx;
  if (*slot) return;
  char *d = LLVMGetDiagInfoDescription(di);
  *slot = strdup(d ? d : "?");
  LLVMDisposeMessage(d);
}

static kdc_status llvm_err(LLVMErrorRef e, const char *file, uint64_t off, const char *what) {
  char *m = LLVMGetErrorMessage(e);
  kdc_status st = KDC_ERR(KDC_INVALID_INPUT, "%s: section code: byte %llu: %s: %.300s", file,
                          (unsigned long long)off, what, m);
  LLVMDisposeErrorMessage(m);
  return st;
}

/* Bump when anything that shapes the machine code changes without changing
 * the bitcode or the strings of compile_desc(): the passes of optimise(),
 * mark_nontemporal, the TargetMachine's options.  It is part of the key of
 * every compiled-code cache entry (jit_cache.c). */
enum { RT_JIT_CODE_VERSION = 2 };  /* 2: ordered FP reductions vectorised */

typedef struct host { char *triple, *cpu, *features; } host;

static host host_get(void) {
  return (host){LLVMGetDefaultTargetTriple(), LLVMGetHostCPUName(), LLVMGetHostCPUFeatures()};
}

static void host_free(host *h) {
  LLVMDisposeMessage(h->triple);
  LLVMDisposeMessage(h->cpu);
  LLVMDisposeMessage(h->features);
}

static LLVMTargetMachineRef host_tm(const host *h, char **out_err) {
  LLVMTargetRef target;
  if (LLVMGetTargetFromTriple(h->triple, &target, out_err)) return NULL;
  return LLVMCreateTargetMachine(target, h->triple, h->cpu, h->features,
                                 LLVMCodeGenLevelAggressive, LLVMRelocDefault,
                                 LLVMCodeModelJITDefault);
}

/* Everything besides the bitcode that determines the object file: the
 * compiled-code cache's key (heap). */
static char *compile_desc(const host *h) {
  unsigned major, minor, patch;
  LLVMGetVersion(&major, &minor, &patch);
  const char *fmt = "triple=%s cpu=%s features=%s passes=mergefunc,default<O3>,nontemporal "
                    "codegen=aggressive,reloc-default,jit-code-model llvm=%u.%u.%u kdc-code=%d";
  int n = snprintf(NULL, 0, fmt, h->triple, h->cpu, h->features, major, minor, patch,
                   (int)RT_JIT_CODE_VERSION);
  char *d = kdc_xmalloc((size_t)n + 1);
  snprintf(d, (size_t)n + 1, fmt, h->triple, h->cpu, h->features, major, minor, patch,
           (int)RT_JIT_CODE_VERSION);
  return d;
}

/* Parses and verifies the bitcode in |ctx|. */
static kdc_status parse(LLVMContextRef ctx, const void *bc, size_t size, const char *file,
                        uint64_t off, LLVMModuleRef *out) {
  char *diag = NULL;
  LLVMContextSetDiagnosticHandler(ctx, on_diag, &diag);
  LLVMMemoryBufferRef buf = LLVMCreateMemoryBufferWithMemoryRangeCopy(bc, size, "code");
  LLVMBool bad = LLVMParseBitcodeInContext2(ctx, buf, out);
  LLVMDisposeMemoryBuffer(buf);
  LLVMContextSetDiagnosticHandler(ctx, NULL, NULL);
  if (bad) {
    kdc_status st = KDC_ERR(KDC_INVALID_INPUT, "%s: section code: byte %llu: LLVM rejected the "
                            "bitcode: %.300s", file, (unsigned long long)off,
                            diag ? diag : "unknown error");
    free(diag);
    return st;
  }
  free(diag);
  char *msg = NULL;
  if (LLVMVerifyModule(*out, LLVMReturnStatusAction, &msg)) {
    kdc_status st = KDC_ERR(KDC_INVALID_INPUT, "%s: section code: byte %llu: invalid LLVM "
                            "module: %.300s", file, (unsigned long long)off, msg);
    LLVMDisposeMessage(msg);
    LLVMDisposeModule(*out);
    *out = NULL;
    return st;
  }
  LLVMDisposeMessage(msg);
  return NULL;
}

/* Streaming stores (codegen's cg_cpu_wrap_stream): in a function marked
 * "kdc-nontemporal", every vector store LLVM proved aligned to its size
 * (whole 64-byte rows, assumed by the wrapper) becomes non-temporal, which
 * the backend emits as a streaming store (x86: vmovntps) that skips reading
 * the line before overwriting it.  Done after O3: a loop whose scalar store
 * is already non-temporal is not vectorised. */
static size_t mark_nontemporal(LLVMModuleRef mod) {
  size_t n = 0;
  LLVMContextRef ctx = LLVMGetModuleContext(mod);
  LLVMTargetDataRef dl = LLVMGetModuleDataLayout(mod);
  unsigned kind = LLVMGetMDKindIDInContext(ctx, "nontemporal", 11);
  LLVMMetadataRef one = LLVMValueAsMetadata(LLVMConstInt(LLVMInt32TypeInContext(ctx), 1, 0));
  LLVMValueRef node = LLVMMetadataAsValue(ctx, LLVMMDNodeInContext2(ctx, &one, 1));
  for (LLVMValueRef fn = LLVMGetFirstFunction(mod); fn; fn = LLVMGetNextFunction(fn)) {
    if (!LLVMGetStringAttributeAtIndex(fn, LLVMAttributeFunctionIndex, "kdc-nontemporal", 15))
      continue;
    for (LLVMBasicBlockRef bb = LLVMGetFirstBasicBlock(fn); bb; bb = LLVMGetNextBasicBlock(bb))
      for (LLVMValueRef in = LLVMGetFirstInstruction(bb); in; in = LLVMGetNextInstruction(in)) {
        if (LLVMGetInstructionOpcode(in) != LLVMStore) continue;
        LLVMTypeRef t = LLVMTypeOf(LLVMGetOperand(in, 0));
        if (LLVMGetTypeKind(t) != LLVMVectorTypeKind) continue;
        if (LLVMGetAlignment(in) < LLVMStoreSizeOfType(dl, t)) continue;
        LLVMSetMetadata(in, kind, node);
        n++;
      }
  }
  return n;
}

static size_t defined_functions(LLVMModuleRef mod) {
  size_t n = 0;
  for (LLVMValueRef fn = LLVMGetFirstFunction(mod); fn; fn = LLVMGetNextFunction(fn))
    n += !LLVMIsDeclaration(fn);
  return n;
}

/* Host triple, data layout, MergeFunctions and the O3 pipeline for this
 * CPU. */
static kdc_status optimise(LLVMModuleRef mod, LLVMTargetMachineRef tm, const char *file,
                           uint64_t off, size_t *out_nontemporal, size_t *out_merged) {
  char *triple = LLVMGetTargetMachineTriple(tm);
  LLVMSetTarget(mod, triple);
  LLVMDisposeMessage(triple);
  LLVMTargetDataRef dl = LLVMCreateTargetDataLayout(tm);
  LLVMSetModuleDataLayout(mod, dl);
  LLVMDisposeTargetData(dl);
  LLVMPassBuilderOptionsRef po = LLVMCreatePassBuilderOptions();
  LLVMPassBuilderOptionsSetLoopVectorization(po, 1);
  LLVMPassBuilderOptionsSetSLPVectorization(po, 1);
  LLVMPassBuilderOptionsSetLoopUnrolling(po, 1);
  size_t before = defined_functions(mod);
  LLVMErrorRef e = LLVMRunPasses(mod, "mergefunc", tm, po);
  *out_merged = before - defined_functions(mod);
  if (!e) e = LLVMRunPasses(mod, "default<O3>", tm, po);
  LLVMDisposePassBuilderOptions(po);
  if (e) return llvm_err(e, file, off, "optimisation failed");
  *out_nontemporal = mark_nontemporal(mod);
  return NULL;
}

/* Bitcode -> optimised module -> object file in memory. */
static kdc_status compile(const void *bitcode, size_t size, const char *file, uint64_t off,
                          LLVMTargetMachineRef tm, LLVMMemoryBufferRef *out_obj,
                          rt_jit_stats *out_stats) {
  LLVMContextRef ctx = LLVMContextCreate();
  LLVMModuleRef mod = NULL;
  size_t n_nontemporal = 0, n_merged = 0;
  kdc_status st = parse(ctx, bitcode, size, file, off, &mod);
  if (!st) st = optimise(mod, tm, file, off, &n_nontemporal, &n_merged);
  char *msg = NULL;
  if (!st && LLVMTargetMachineEmitToMemoryBuffer(tm, mod, LLVMObjectFile, &msg, out_obj)) {
    st = KDC_ERR(KDC_INVALID_INPUT, "%s: section code: byte %llu: code generation failed: "
                 "%.300s", file, (unsigned long long)off, msg ? msg : "?");
  }
  LLVMDisposeMessage(msg);
  if (mod) LLVMDisposeModule(mod);
  LLVMContextDispose(ctx);
  *out_stats = (rt_jit_stats){n_nontemporal, n_merged};
  return st;
}

/* The object for |bitcode|: from the cache in |cache_dir| when it has a
 * valid entry, else compiled (and stored there). */
static kdc_status object_for(const void *bitcode, size_t size, const char *file, uint64_t off,
                             const char *cache_dir, const host *h, LLVMTargetMachineRef tm,
                             LLVMMemoryBufferRef *out_obj, rt_jit_stats *out_stats,
                             bool *out_cached) {
  *out_cached = false;
  if (!cache_dir) return compile(bitcode, size, file, off, tm, out_obj, out_stats);
  rt_jit_key key;
  char *desc = compile_desc(h);
  rt_jit_cache_key(bitcode, size, desc, &key);
  free(desc);
  int lock = -1;
  /* Look, then (on a miss) lock and look again: another process may have
   * compiled this code while we waited for the lock. */
  for (int attempt = 0; attempt < 2; attempt++) {
    void *entry;
    const void *obj;
    size_t n;
    if (rt_jit_cache_get(cache_dir, &key, &entry, &obj, &n, out_stats)) {
      *out_obj = LLVMCreateMemoryBufferWithMemoryRangeCopy(obj, n, "kdc-code");
      free(entry);
      rt_jit_cache_unlock(lock);
      *out_cached = true;
      return NULL;
    }
    if (attempt == 0) lock = rt_jit_cache_lock(cache_dir, &key);
  }
  kdc_status st = compile(bitcode, size, file, off, tm, out_obj, out_stats);
  if (!st)
    rt_jit_cache_put(cache_dir, &key, LLVMGetBufferStart(*out_obj), LLVMGetBufferSize(*out_obj),
                     out_stats);
  rt_jit_cache_unlock(lock);
  return st;
}

kdc_status rt_jit_create(const void *bitcode, size_t size, const char *file, uint64_t off,
                         const char *cache_dir, rt_jit **out) {
  *out = NULL;
  pthread_once(&init_once, init_llvm);
  if (init_failed) return KDC_ERR(KDC_UNAVAILABLE, "LLVM has no native target for this host");
  char *err = NULL;
  host h = host_get();
  LLVMTargetMachineRef tm = host_tm(&h, &err), tm_jit = host_tm(&h, NULL);
  if (!tm || !tm_jit) {
    kdc_status st = KDC_ERR(KDC_UNAVAILABLE, "LLVM cannot target this host: %s", err ? err : "?");
    LLVMDisposeMessage(err);
    if (tm) LLVMDisposeTargetMachine(tm);
    if (tm_jit) LLVMDisposeTargetMachine(tm_jit);
    host_free(&h);
    return st;
  }
  LLVMMemoryBufferRef obj = NULL;
  rt_jit_stats stats;
  bool cached;
  kdc_status st = object_for(bitcode, size, file, off, cache_dir, &h, tm, &obj, &stats, &cached);
  LLVMDisposeTargetMachine(tm);
  host_free(&h);
  if (st) {
    LLVMDisposeTargetMachine(tm_jit);
    return st;
  }
  LLVMOrcLLJITBuilderRef jb = LLVMOrcCreateLLJITBuilder();
  LLVMOrcLLJITBuilderSetJITTargetMachineBuilder(
      jb, LLVMOrcJITTargetMachineBuilderCreateFromTargetMachine(tm_jit));  /* takes tm_jit */
  LLVMOrcLLJITRef jit;
  LLVMErrorRef e = LLVMOrcCreateLLJIT(&jit, jb);  /* takes jb */
  if (e) {
    LLVMDisposeMemoryBuffer(obj);
    return llvm_err(e, file, off, "cannot create the JIT");
  }
  LLVMOrcDefinitionGeneratorRef gen;
  e = LLVMOrcCreateDynamicLibrarySearchGeneratorForProcess(&gen, LLVMOrcLLJITGetGlobalPrefix(jit),
                                                           NULL, NULL);
  if (!e) LLVMOrcJITDylibAddGenerator(LLVMOrcLLJITGetMainJITDylib(jit), gen);
  if (!e) e = LLVMOrcLLJITAddObjectFile(jit, LLVMOrcLLJITGetMainJITDylib(jit), obj);  /* takes obj */
  else LLVMDisposeMemoryBuffer(obj);
  if (e) {
    st = llvm_err(e, file, off, "cannot add the object to the JIT");
    LLVMOrcDisposeLLJIT(jit);
    return st;
  }
  rt_jit *j = kdc_xcalloc(1, sizeof *j);
  j->jit = jit;
  j->n_nontemporal = stats.n_nontemporal;
  j->n_merged = stats.n_merged;
  j->from_cache = cached;
  *out = j;
  return NULL;
}

kdc_rt_kernel_fn rt_jit_lookup(rt_jit *j, const char *name) {
  LLVMOrcExecutorAddress addr = 0;
  LLVMErrorRef e = LLVMOrcLLJITLookup(j->jit, &addr, name);
  if (e) {
    LLVMConsumeError(e);
    return NULL;
  }
  kdc_rt_kernel_fn fn;
  uintptr_t a = (uintptr_t)addr;
  memcpy(&fn, &a, sizeof fn);  /* object -> function pointer, ISO-clean */
  return fn;
}

size_t rt_jit_nontemporal_stores(const rt_jit *j) { return j ? j->n_nontemporal : 0; }

size_t rt_jit_merged_functions(const rt_jit *j) { return j ? j->n_merged : 0; }

bool rt_jit_from_cache(const rt_jit *j) { return j && j->from_cache; }

void rt_jit_destroy(rt_jit *j) {
  if (!j) return;
  LLVMErrorRef e = LLVMOrcDisposeLLJIT(j->jit);
  if (e) LLVMConsumeError(e);
  free(j);
}
