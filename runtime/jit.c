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
#include <stdatomic.h>
#include <stdio.h>
#include <time.h>
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
  rt_jit_times times;
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
 * mark_nontemporal, the TargetMachine's options, the partitioning.  It is
 * part of the key of every compiled-code cache entry (jit_cache.c). */
enum { RT_JIT_CODE_VERSION = 3 };  /* 2: ordered FP reductions vectorised;
                                      3: partitions, hot/cold pipelines */

/* The two pipelines (docs/runtime.md, "Compile time").  Unrolling is most
 * of O3's and the backend's time on kdc's kernels (they are loops) and pays
 * only where a kernel runs long enough. */
#define PIPE_HOT "default<O3>"
#define PIPE_COLD "default<O2>"

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

static double cpu_now(void) {
  struct timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static double wall_now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Parses and verifies the bitcode in |ctx|. */
static kdc_status parse(LLVMContextRef ctx, const void *bc, size_t size, const char *file,
                        uint64_t off, bool verify, LLVMModuleRef *out) {
  char *diag = NULL;
  LLVMContextSetDiagnosticHandler(ctx, on_diag, &diag);
  LLVMMemoryBufferRef buf = LLVMCreateMemoryBufferWithMemoryRange(bc, size, "code", 0);
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
  if (!verify) return NULL;
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

/* ---- partitions ------------------------------------------------------------
 * The module is compiled as a fixed list of partitions, each a group of
 * kernels (a kernel's wrapper, loop nest, body and body variants all carry
 * its index: kdc_kernel_<k>..., kdc_body_<k>..., kdc_opnd_<k>) optimised
 * and compiled to an object of its own, in parallel threads with one
 * LLVMContext each.  The list depends on the bitcode and the kernels' work
 * only, never on the thread count, so the objects are the same bytes
 * whatever the number of threads.  Functions of no kernel (kdc_math_*)
 * belong to partition 0, and so do functions named after a kernel index the
 * program does not have (only a forged plan has them; the index does not
 * size anything); the others see them as declarations.  The families of
 * kernels the load does not need (rt_jit_hints.needed: a plan loaded for
 * one function) are in no partition. */

enum { MAX_PARTS = 8, PART_MIN_INSTRUCTIONS = 3000 };
#define PART_NONE UINT32_MAX /* a family not compiled (rt_jit_hints.needed) */

/* The kernel a function belongs to (runtime/program.h), or -1. */
static int64_t kernel_of(LLVMValueRef fn) {
  return kdc_prog_kernel_family(LLVMGetValueName2(fn, &(size_t){0}), NULL, NULL);
}

static size_t instructions(LLVMValueRef fn) {
  size_t n = 0;
  for (LLVMBasicBlockRef bb = LLVMGetFirstBasicBlock(fn); bb; bb = LLVMGetNextBasicBlock(bb))
    for (LLVMValueRef in = LLVMGetFirstInstruction(bb); in; in = LLVMGetNextInstruction(in)) n++;
  return n;
}

typedef struct plan_parts {
  uint32_t n;                /* partitions */
  uint32_t n_fam;            /* kernel families: max index + 1 */
  uint32_t *part_of;         /* [family] -> partition */
  bool hot[MAX_PARTS * 2];   /* partition -> the hot pipeline */
} plan_parts;

/* Splits the families of |mod| into hot (work >= RT_JIT_HOT_WORK) and cold
 * ones, each side into chunks of at least PART_MIN_INSTRUCTIONS (at most
 * MAX_PARTS per side), in index order. */
static void partition(LLVMModuleRef mod, const rt_jit_hints *hints, plan_parts *pp) {
  memset(pp, 0, sizeof *pp);
  int64_t max_fam = -1;
  int64_t limit = hints ? hints->n_kernels : 0;  /* other indices: no kernel of the program */
  for (LLVMValueRef fn = LLVMGetFirstFunction(mod); fn; fn = LLVMGetNextFunction(fn)) {
    int64_t k = LLVMIsDeclaration(fn) ? -1 : kernel_of(fn);
    if (k > max_fam && k < limit) max_fam = k;
  }
  pp->n_fam = (uint32_t)(max_fam + 1);
  size_t *size = kdc_xcalloc(pp->n_fam + 1, sizeof *size);
  size_t total[2] = {0, 0};
  for (LLVMValueRef fn = LLVMGetFirstFunction(mod); fn; fn = LLVMGetNextFunction(fn)) {
    int64_t k = LLVMIsDeclaration(fn) ? -1 : kernel_of(fn);
    if (k >= 0 && k < (int64_t)pp->n_fam && !(hints && hints->needed && !hints->needed[k]))
      size[k] += instructions(fn);
  }
  bool *hot = kdc_xcalloc(pp->n_fam + 1, sizeof *hot);
  for (uint32_t k = 0; k < pp->n_fam; k++) {
    hot[k] = hints && k < hints->n_kernels && hints->work[k] >= RT_JIT_HOT_WORK;
    total[hot[k]] += size[k];
  }
  pp->part_of = kdc_xcalloc(pp->n_fam + 1, sizeof *pp->part_of);
  for (uint32_t k = 0; k < pp->n_fam; k++)
    if (hints && hints->needed && !hints->needed[k]) pp->part_of[k] = PART_NONE;
  /* hot first: partition 0 holds the shared functions (kdc_math_*), which
   * the cold pipeline made slower everywhere they are called */
  for (int side = 1; side >= 0; side--) {
    if (total[side] == 0 && !(side == 0 && pp->n == 0)) continue;
    size_t chunk = total[side] / MAX_PARTS + 1;
    if (chunk < PART_MIN_INSTRUCTIONS) chunk = PART_MIN_INSTRUCTIONS;
    uint32_t first = pp->n, cur = pp->n;
    size_t filled = 0;
    pp->hot[cur] = side;
    pp->n++;
    for (uint32_t k = 0; k < pp->n_fam; k++) {
      if (hot[k] != side || size[k] == 0) continue;
      if (filled >= chunk && cur - first + 1 < MAX_PARTS) {
        cur = pp->n++;
        pp->hot[cur] = side;
        filled = 0;
      }
      pp->part_of[k] = cur;
      filled += size[k];
    }
  }
  free(size);
  free(hot);
}

static uint32_t part_of_fn(const plan_parts *pp, LLVMValueRef fn) {
  int64_t k = kernel_of(fn);
  return k >= 0 && (uint64_t)k < pp->n_fam ? pp->part_of[k] : 0;
}

/* Removes from |mod| every function definition of another partition: one
 * nothing uses is deleted, one used here (a shared function) becomes a
 * declaration with the same attributes. */
static void keep_partition(LLVMModuleRef mod, const plan_parts *pp, uint32_t part) {
  LLVMValueRef next;
  for (LLVMValueRef fn = LLVMGetFirstFunction(mod); fn; fn = next) {
    next = LLVMGetNextFunction(fn);
    if (LLVMIsDeclaration(fn) || part_of_fn(pp, fn) == part) continue;
    if (!LLVMGetFirstUse(fn)) {
      LLVMDeleteFunction(fn);
      continue;
    }
    size_t len;
    char *name = kdc_xstrdup(LLVMGetValueName2(fn, &len));
    LLVMValueRef d = LLVMAddFunction(mod, "", LLVMGlobalGetValueType(fn));
    unsigned na = LLVMGetAttributeCountAtIndex(fn, LLVMAttributeFunctionIndex);
    if (na) {
      LLVMAttributeRef *at = kdc_xmalloc(na * sizeof *at);
      LLVMGetAttributesAtIndex(fn, LLVMAttributeFunctionIndex, at);
      for (unsigned i = 0; i < na; i++)
        LLVMAddAttributeAtIndex(d, LLVMAttributeFunctionIndex, at[i]);
      free(at);
    }
    LLVMReplaceAllUsesWith(fn, d);
    LLVMDeleteFunction(fn);
    LLVMSetValueName2(d, name, len);
    free(name);
  }
}

/* Everything besides the bitcode that determines the objects: the
 * compiled-code cache's key (heap). */
static char *compile_desc(const host *h, const plan_parts *pp) {
  unsigned major, minor, patch;
  LLVMGetVersion(&major, &minor, &patch);
  uint64_t parts = kdc_hash64(pp->part_of, pp->n_fam * sizeof *pp->part_of, pp->n);
  parts = kdc_hash64(pp->hot, sizeof pp->hot, parts);
  const char *fmt = "triple=%s cpu=%s features=%s passes=mergefunc,hot:" PIPE_HOT
                    ",cold:" PIPE_COLD "-unroll,nontemporal parts=%u:%016llx "
                    "codegen=aggressive,reloc-default,jit-code-model llvm=%u.%u.%u kdc-code=%d";
  int n = snprintf(NULL, 0, fmt, h->triple, h->cpu, h->features, pp->n,
                   (unsigned long long)parts, major, minor, patch, (int)RT_JIT_CODE_VERSION);
  char *d = kdc_xmalloc((size_t)n + 1);
  snprintf(d, (size_t)n + 1, fmt, h->triple, h->cpu, h->features, pp->n,
           (unsigned long long)parts, major, minor, patch, (int)RT_JIT_CODE_VERSION);
  return d;
}

/* One partition's job and result. */
typedef struct part_job {
  LLVMMemoryBufferRef obj;
  kdc_status st;
  size_t n_nontemporal, n_merged;
  double t_parse, t_opt, t_codegen;  /* thread CPU seconds */
} part_job;

typedef struct compile_ctx {
  const void *bitcode;
  size_t size;
  const char *file;
  uint64_t off;
  const host *h;
  const plan_parts *pp;
  part_job *jobs;
  atomic_uint next;
} compile_ctx;

/* Partition |part|: parse, keep its functions, MergeFunctions, its
 * pipeline, streaming stores, object file. */
static void compile_part(compile_ctx *C, uint32_t part, LLVMTargetMachineRef tm) {
  part_job *J = &C->jobs[part];
  double t0 = cpu_now();
  LLVMContextRef ctx = LLVMContextCreate();
  LLVMModuleRef mod = NULL;
  J->st = parse(ctx, C->bitcode, C->size, C->file, C->off, false, &mod);
  double t1 = cpu_now(), t2 = t1;
  if (!J->st) {
    keep_partition(mod, C->pp, part);
    char *triple = LLVMGetTargetMachineTriple(tm);
    LLVMSetTarget(mod, triple);
    LLVMDisposeMessage(triple);
    LLVMTargetDataRef dl = LLVMCreateTargetDataLayout(tm);
    LLVMSetModuleDataLayout(mod, dl);
    LLVMDisposeTargetData(dl);
    bool hot = C->pp->hot[part];
    LLVMPassBuilderOptionsRef po = LLVMCreatePassBuilderOptions();
    LLVMPassBuilderOptionsSetLoopVectorization(po, 1);
    LLVMPassBuilderOptionsSetSLPVectorization(po, 1);
    LLVMPassBuilderOptionsSetLoopUnrolling(po, hot);
    size_t before = defined_functions(mod);
    LLVMErrorRef e = LLVMRunPasses(mod, "mergefunc", tm, po);
    J->n_merged = before - defined_functions(mod);
    if (!e) e = LLVMRunPasses(mod, hot ? PIPE_HOT : PIPE_COLD, tm, po);
    LLVMDisposePassBuilderOptions(po);
    if (e) J->st = llvm_err(e, C->file, C->off, "optimisation failed");
    else J->n_nontemporal = mark_nontemporal(mod);
    t2 = cpu_now();
    char *msg = NULL;
    if (!J->st && LLVMTargetMachineEmitToMemoryBuffer(tm, mod, LLVMObjectFile, &msg, &J->obj))
      J->st = KDC_ERR(KDC_INVALID_INPUT, "%s: section code: byte %llu: code generation failed: "
                      "%.300s", C->file, (unsigned long long)C->off, msg ? msg : "?");
    LLVMDisposeMessage(msg);
  }
  if (mod) LLVMDisposeModule(mod);
  LLVMContextDispose(ctx);
  J->t_parse = t1 - t0, J->t_opt = t2 - t1, J->t_codegen = cpu_now() - t2;
}

static void *compile_worker(void *arg) {
  compile_ctx *C = arg;
  LLVMTargetMachineRef tm = host_tm(C->h, NULL);
  for (uint32_t p; (p = atomic_fetch_add(&C->next, 1)) < C->pp->n;) {
    if (tm) compile_part(C, p, tm);
    else C->jobs[p].st = KDC_ERR(KDC_UNAVAILABLE, "LLVM cannot target this host");
  }
  if (tm) LLVMDisposeTargetMachine(tm);
  return NULL;
}

/* The objects of every partition (one malloc'd blob, the cache entry's
 * payload): u32 count, u32 0, u64 size per object, then the objects, each
 * at a multiple of 16 bytes. */
typedef struct objects {
  uint8_t *blob;
  size_t size;
} objects;

static bool objects_get(const void *blob, size_t size, uint32_t i, const void **obj, size_t *n) {
  if (size < 8) return false;
  uint32_t count;
  memcpy(&count, blob, 4);
  if (i >= count || 8 + (uint64_t)count * 8 > size) return false;
  uint64_t at = (8 + (uint64_t)count * 8 + 15) / 16 * 16, len = 0;
  for (uint32_t k = 0; k <= i; k++) {
    at += (len + 15) / 16 * 16;
    memcpy(&len, (const uint8_t *)blob + 8 + 8 * k, 8);
    if (at > size || len > size) return false;  /* no overflow below */
  }
  if (at > size || len > size - at) return false;
  *obj = (const uint8_t *)blob + at;
  *n = len;
  return true;
}

static objects objects_pack(const part_job *jobs, uint32_t count) {
  uint64_t head = (8 + (uint64_t)count * 8 + 15) / 16 * 16, total = head;
  for (uint32_t i = 0; i < count; i++) total += (LLVMGetBufferSize(jobs[i].obj) + 15) / 16 * 16;
  objects o = {kdc_xcalloc(1, total), total};
  memcpy(o.blob, &count, 4);
  uint64_t at = head;
  for (uint32_t i = 0; i < count; i++) {
    uint64_t len = LLVMGetBufferSize(jobs[i].obj);
    memcpy(o.blob + 8 + 8 * i, &len, 8);
    memcpy(o.blob + at, LLVMGetBufferStart(jobs[i].obj), len);
    at += (len + 15) / 16 * 16;
  }
  return o;
}

/* Compiles every partition on |threads| threads (the caller included). */
static kdc_status compile_all(compile_ctx *C, int threads, rt_jit_times *times,
                              rt_jit_stats *stats, objects *out) {
  uint32_t n = C->pp->n;
  C->jobs = kdc_xcalloc(n, sizeof *C->jobs);
  atomic_init(&C->next, 0);
  if (threads > (int)n) threads = (int)n;
  if (threads < 1) threads = 1;
  pthread_t *tid = kdc_xcalloc((size_t)threads, sizeof *tid);
  int started = 0;
  for (int t = 1; t < threads; t++, started++)
    if (pthread_create(&tid[t], NULL, compile_worker, C)) break;
  compile_worker(C);
  for (int t = 1; t <= started; t++) pthread_join(tid[t], NULL);
  free(tid);
  kdc_status st = NULL;
  *stats = (rt_jit_stats){0, 0};
  for (uint32_t i = 0; i < n; i++) {
    part_job *J = &C->jobs[i];
    if (!st) st = J->st;
    else kdc_status_free(J->st);
    stats->n_nontemporal += J->n_nontemporal;
    stats->n_merged += J->n_merged;
    times->parse_s += J->t_parse, times->opt_s += J->t_opt, times->codegen_s += J->t_codegen;
    times->hot_parts += C->pp->hot[i];
  }
  times->parts = n;
  if (!st) *out = objects_pack(C->jobs, n);
  for (uint32_t i = 0; i < n; i++)
    if (C->jobs[i].obj) LLVMDisposeMemoryBuffer(C->jobs[i].obj);
  free(C->jobs);
  return st;
}

/* The objects for |bitcode|: from the cache in |cache_dir| when it has a
 * valid entry, else compiled (and stored there). */
static kdc_status objects_for(compile_ctx *C, const char *cache_dir, int threads,
                              rt_jit_times *times, objects *out, rt_jit_stats *out_stats,
                              bool *out_cached) {
  *out_cached = false;
  if (!cache_dir) return compile_all(C, threads, times, out_stats, out);
  rt_jit_key key;
  char *desc = compile_desc(C->h, C->pp);
  rt_jit_cache_key(C->bitcode, C->size, desc, &key);
  free(desc);
  int lock = -1;
  /* Look, then (on a miss) lock and look again: another process may have
   * compiled this code while we waited for the lock. */
  for (int attempt = 0; attempt < 2; attempt++) {
    void *entry;
    const void *obj;
    size_t n;
    if (rt_jit_cache_get(cache_dir, &key, &entry, &obj, &n, out_stats)) {
      const void *o;
      size_t on;
      bool whole = true;
      for (uint32_t i = 0; i < C->pp->n && whole; i++) whole = objects_get(obj, n, i, &o, &on);
      if (whole) {
        out->blob = kdc_xmalloc(n);
        memcpy(out->blob, obj, n);
        out->size = n;
        free(entry);
        rt_jit_cache_unlock(lock);
        *out_cached = true;
        return NULL;
      }
      free(entry);
    }
    if (attempt == 0) lock = rt_jit_cache_lock(cache_dir, &key);
  }
  kdc_status st = compile_all(C, threads, times, out_stats, out);
  if (!st) rt_jit_cache_put(cache_dir, &key, out->blob, out->size, out_stats);
  rt_jit_cache_unlock(lock);
  return st;
}

kdc_status rt_jit_create(const void *bitcode, size_t size, const char *file, uint64_t off,
                         const char *cache_dir, const rt_jit_hints *hints, rt_jit **out) {
  *out = NULL;
  double w0 = wall_now(), c0 = cpu_now();
  pthread_once(&init_once, init_llvm);
  if (init_failed) return KDC_ERR(KDC_UNAVAILABLE, "LLVM has no native target for this host");
  rt_jit_times times;
  memset(&times, 0, sizeof times);
  /* The whole module once: errors in the bitcode, and the partitions. */
  LLVMContextRef ctx = LLVMContextCreate();
  LLVMModuleRef mod = NULL;
  kdc_status st = parse(ctx, bitcode, size, file, off, true, &mod);
  if (st) {
    LLVMContextDispose(ctx);
    return st;
  }
  plan_parts pp;
  partition(mod, hints, &pp);
  times.functions = defined_functions(mod);
  LLVMDisposeModule(mod);
  LLVMContextDispose(ctx);
  times.check_s = cpu_now() - c0;
  char *err = NULL;
  host h = host_get();
  LLVMTargetMachineRef tm_jit = host_tm(&h, &err);
  if (!tm_jit) {
    st = KDC_ERR(KDC_UNAVAILABLE, "LLVM cannot target this host: %s", err ? err : "?");
    LLVMDisposeMessage(err);
    host_free(&h);
    free(pp.part_of);
    return st;
  }
  compile_ctx C = {.bitcode = bitcode, .size = size, .file = file, .off = off, .h = &h, .pp = &pp};
  objects objs = {NULL, 0};
  rt_jit_stats stats;
  bool cached;
  int threads = hints && hints->n_threads > 0 ? hints->n_threads : 1;
  st = objects_for(&C, cache_dir, threads, &times, &objs, &stats, &cached);
  host_free(&h);
  if (st) {
    LLVMDisposeTargetMachine(tm_jit);
    free(pp.part_of);
    return st;
  }
  double c1 = cpu_now();
  LLVMOrcLLJITBuilderRef jb = LLVMOrcCreateLLJITBuilder();
  LLVMOrcLLJITBuilderSetJITTargetMachineBuilder(
      jb, LLVMOrcJITTargetMachineBuilderCreateFromTargetMachine(tm_jit));  /* takes tm_jit */
  LLVMOrcLLJITRef jit;
  LLVMErrorRef e = LLVMOrcCreateLLJIT(&jit, jb);  /* takes jb */
  if (e) {
    free(objs.blob);
    free(pp.part_of);
    return llvm_err(e, file, off, "cannot create the JIT");
  }
  LLVMOrcDefinitionGeneratorRef gen;
  e = LLVMOrcCreateDynamicLibrarySearchGeneratorForProcess(&gen, LLVMOrcLLJITGetGlobalPrefix(jit),
                                                           NULL, NULL);
  if (!e) LLVMOrcJITDylibAddGenerator(LLVMOrcLLJITGetMainJITDylib(jit), gen);
  for (uint32_t i = 0; i < pp.n && !e; i++) {
    const void *o;
    size_t on;
    if (!objects_get(objs.blob, objs.size, i, &o, &on)) break;  /* checked when read */
    LLVMMemoryBufferRef ob = LLVMCreateMemoryBufferWithMemoryRangeCopy(o, on, "kdc-code");
    e = LLVMOrcLLJITAddObjectFile(jit, LLVMOrcLLJITGetMainJITDylib(jit), ob);  /* takes ob */
  }
  free(objs.blob);
  free(pp.part_of);
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
  times.link_s = cpu_now() - c1;
  times.wall_s = wall_now() - w0;
  j->times = times;
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

const rt_jit_times *rt_jit_get_times(const rt_jit *j) { return j ? &j->times : NULL; }

void rt_jit_destroy(rt_jit *j) {
  if (!j) return;
  LLVMErrorRef e = LLVMOrcDisposeLLJIT(j->jit);
  if (e) LLVMConsumeError(e);
  free(j);
}
