/*
 * codegen/dedup.c: identical kernels are emitted once (issue 17).
 *
 * A model of repeated layers gives kernels that differ only in the
 * buffers they read and write: the same ops, shapes, dtypes and constants.
 * Buffers are not part of a kernel's code (its step passes the pointers,
 * codegen.h), so such kernels are one function called by several steps.
 * After kernel k's functions are emitted (its wrapper, loop nest, body,
 * body variants: every name carries k, cpu_wrap.c / kernel_body.c /
 * ptx_wrap.c), they are compared with those of the earlier kernels: first
 * a cheap signature (per function: the name with k replaced, the type,
 * and every instruction's opcode, type and operand count), then, where
 * the signatures agree, the exact LLVM text of both with the names
 * replaced the same way.  Equal texts are the same code: the new functions
 * are deleted and the step calls the earlier kernel; the plan stores it
 * once.  Comparing the text LLVM prints (instead of a key over the IR)
 * means nothing that shapes the code can be missed: constants, immediates,
 * attributes, dense constant globals (by name, so only the same global).
 * In a CUDA plan the kernel's GPU form and the type it writes must match
 * too: the PTX wrapper and the launch grid are made per kernel from them
 * (a flat kernel's CPU code does not depend on its size, its GPU launch
 * does).
 */
#include <stdlib.h>
#include <string.h>

#include "codegen/codegen.h"

static uint64_t mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  return h * 0xff51afd7ed558ccdull;
}

/* |name| with the kernel index replaced by "K" (heap). */
static char *canonical(const char *name) {
  size_t a, e;
  if (kdc_prog_kernel_family(name, &a, &e) < 0) return kdc_xstrdup(name);
  size_t n = strlen(name);
  char *c = kdc_xmalloc(n + 2);
  memcpy(c, name, a);
  c[a] = 'K';
  memcpy(c + a + 1, name + e, n - e + 1);
  return c;
}

static uint64_t hash_str(uint64_t h, const char *s) {
  for (; *s; s++) h = mix(h, (unsigned char)*s);
  return h;
}

/* The cheap signature of functions |fn|[0..n). */
static uint64_t signature(LLVMValueRef *fn, size_t n) {
  uint64_t h = mix(0, n);
  for (size_t i = 0; i < n; i++) {
    char *c = canonical(LLVMGetValueName2(fn[i], &(size_t){0}));
    h = hash_str(h, c);
    free(c);
    h = mix(h, (uint64_t)(uintptr_t)LLVMGlobalGetValueType(fn[i]));  /* types are uniqued */
    for (LLVMBasicBlockRef bb = LLVMGetFirstBasicBlock(fn[i]); bb; bb = LLVMGetNextBasicBlock(bb)) {
      h = mix(h, 0xb10cu);
      for (LLVMValueRef in = LLVMGetFirstInstruction(bb); in; in = LLVMGetNextInstruction(in)) {
        h = mix(h, (uint64_t)LLVMGetInstructionOpcode(in));
        h = mix(h, (uint64_t)(uintptr_t)LLVMTypeOf(in));
        h = mix(h, (uint64_t)LLVMGetNumOperands(in));
      }
    }
  }
  return h;
}

/* The LLVM text of |fn|[0..n) with every kernel name canonical (heap).
 * Renamed and named back: other functions see no change. */
static kdc_buf text_of(LLVMValueRef *fn, size_t n) {
  char **old = kdc_xmalloc((n + 1) * sizeof *old);
  for (size_t i = 0; i < n; i++) {
    size_t len;
    old[i] = kdc_xstrdup(LLVMGetValueName2(fn[i], &len));
    char *c = canonical(old[i]);
    LLVMSetValueName2(fn[i], c, strlen(c));
    free(c);
  }
  kdc_buf b;
  kdc_buf_init(&b);
  for (size_t i = 0; i < n; i++) {
    char *t = LLVMPrintValueToString(fn[i]);
    kdc_buf_put_bytes(&b, t, strlen(t) + 1);
    LLVMDisposeMessage(t);
  }
  for (size_t i = 0; i < n; i++) {
    LLVMSetValueName2(fn[i], old[i], strlen(old[i]));
    free(old[i]);
  }
  free(old);
  return b;
}

/* Deletes |fn|[0..n), users first (a wrapper calls its nest, which calls
 * the body; nothing outside the kernel calls them). */
static void delete_all(LLVMValueRef *fn, size_t n) {
  size_t left = n;
  while (left) {
    size_t before = left;
    for (size_t i = 0; i < n; i++)
      if (fn[i] && !LLVMGetFirstUse(fn[i])) {
        LLVMDeleteFunction(fn[i]);
        fn[i] = NULL;
        left--;
      }
    KDC_ASSERT(left < before);  /* no cycles: kernels do not recurse */
  }
}

static bool same_type(const kdc_type *a, const kdc_type *b) {
  if (a->dtype != b->dtype || a->rank != b->rank) return false;
  for (int d = 0; d < a->rank; d++)
    if (a->dims[d] != b->dims[d]) return false;
  return true;
}

/* The table's buckets: entry index + 1 of the first entry of each
 * signature's chain, 0 = empty; rebuilt at twice the size when half full. */
static void rehash(cg_dedup *D) {
  size_t nb = D->n_buckets ? D->n_buckets * 2 : 256;
  free(D->buckets);
  D->buckets = kdc_xcalloc(nb, sizeof *D->buckets);
  D->n_buckets = nb;
  for (size_t i = 0; i < D->n; i++) {
    size_t b = D->entries[i].sig & (nb - 1);
    D->entries[i].next = D->buckets[b];
    D->buckets[b] = (uint32_t)i + 1;
  }
}

uint32_t cg_dedup_kernel(cg_plan *P, LLVMValueRef mark, uint32_t idx) {
  cg_dedup *D = &P->dedup;
  /* the kernel's functions: those emitted after |mark| that carry idx */
  LLVMValueRef *fn = NULL;
  size_t n = 0, cap = 0;
  for (LLVMValueRef f = mark ? LLVMGetNextFunction(mark) : LLVMGetFirstFunction(P->mod); f;
       f = LLVMGetNextFunction(f)) {
    if (kdc_prog_kernel_family(LLVMGetValueName2(f, &(size_t){0}), NULL, NULL) != (int64_t)idx)
      continue;
    KDC_GROW(fn, cap, n + 1);
    fn[n++] = f;
  }
  uint64_t sig = signature(fn, n);
  bool gpu = P->cuda_sm && P->kform;
  if (gpu) sig = mix(sig, kdc_hash64(&P->kform[idx], sizeof P->kform[idx], 1));
  kdc_buf mine = {NULL, 0, 0};
  bool have_mine = false;
  for (uint32_t e = D->n_buckets ? D->buckets[sig & (D->n_buckets - 1)] : 0; e;
       e = D->entries[e - 1].next) {
    const cg_dedup_entry *c = &D->entries[e - 1];
    if (c->sig != sig || c->n_fn != n) continue;
    if (gpu && (memcmp(&P->kform[idx], &P->kform[c->kernel], sizeof P->kform[idx]) != 0 ||
                !same_type(&P->ktype[idx], &P->ktype[c->kernel])))
      continue;  /* a GPU launch's grid and index mapping follow the kernel's type */
    if (!have_mine) mine = text_of(fn, n), have_mine = true;
    kdc_buf theirs = text_of(D->fn + c->first_fn, c->n_fn);
    bool same = theirs.size == mine.size && memcmp(theirs.data, mine.data, mine.size) == 0;
    kdc_buf_free(&theirs);
    if (!same) continue;
    kdc_buf_free(&mine);
    delete_all(fn, n);
    free(fn);
    D->n_merged++;
    return c->kernel;
  }
  if (have_mine) kdc_buf_free(&mine);
  /* a new kernel: remember it (its functions stay until the plan is written) */
  KDC_GROW(D->entries, D->cap_entries, D->n + 1);
  D->entries[D->n++] = (cg_dedup_entry){sig, idx, D->n_fn, n, 0};
  KDC_GROW(D->fn, D->cap_fn, D->n_fn + n + 1);
  memcpy(D->fn + D->n_fn, fn, n * sizeof *fn);
  D->n_fn += n;
  free(fn);
  if (2 * D->n >= D->n_buckets) rehash(D);
  else {
    size_t b = sig & (D->n_buckets - 1);
    D->entries[D->n - 1].next = D->buckets[b];
    D->buckets[b] = (uint32_t)D->n;
  }
  return idx;
}

void cg_dedup_free(cg_dedup *D) {
  free(D->entries);
  free(D->fn);
  free(D->buckets);
  memset(D, 0, sizeof *D);
}
