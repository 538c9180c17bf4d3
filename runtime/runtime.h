/*
 * runtime/runtime.h: loading and running plan.bin on the CPU, and the table
 * of contents of runtime/.  The runtime knows plans, not Keras or passes.
 *
 * Ownership (STYLE.md 7): kdc_rt_plan_load gives the caller one reference;
 * kdc_rt_plan_retain adds one, kdc_rt_plan_release drops one and destroys
 * the plan (JIT code, arena, threads, mapped file) at the last.  Pointers
 * returned by getters (tensor infos, names, text) are borrowed and live as
 * long as the plan.
 *
 * Threading: a plan owns one scratch arena, so runs of one plan must not
 * overlap (callers serialise; different plans may run concurrently).  Each
 * run uses the plan's thread pool for large kernels and OpenBLAS for GEMMs,
 * see docs/runtime.md ("Threads").
 */
#ifndef KDC_RUNTIME_H
#define KDC_RUNTIME_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "kdc/status.h"
#include "runtime/program.h"

typedef struct kdc_rt_plan kdc_rt_plan;

/* Name, dtype, shape and byte size of a function input or output. */
typedef kdc_prog_tensor kdc_rt_tensor_info;

typedef struct kdc_rt_options {
  int n_threads;  /* threads for kernels and BLAS, caller included; 0 = online cores */
} kdc_rt_options;

/* ---- plan_load.c ------------------------------------------------------------ */

/* Opens and validates |path| (container, then every section with bounds-
 * checked readers), JIT-compiles its code for this CPU and allocates the
 * arena.  Any inconsistency is KDC_INVALID_INPUT naming the file, the
 * section and the byte offset; never a crash.  |opt| may be NULL. */
kdc_status kdc_rt_plan_load(const char *path, kdc_rt_plan **out);
kdc_status kdc_rt_plan_load_with(const char *path, const kdc_rt_options *opt,
                                 kdc_rt_plan **out);
void kdc_rt_plan_retain(kdc_rt_plan *p);
void kdc_rt_plan_release(kdc_rt_plan *p);

size_t kdc_rt_plan_func_count(const kdc_rt_plan *p);
const char *kdc_rt_plan_func_name(const kdc_rt_plan *p, size_t func);
/* Index of the function called |name|, or -1. */
int kdc_rt_plan_find_func(const kdc_rt_plan *p, const char *name);
size_t kdc_rt_plan_input_count(const kdc_rt_plan *p, size_t func);
const kdc_rt_tensor_info *kdc_rt_plan_input(const kdc_rt_plan *p, size_t func, size_t i);
size_t kdc_rt_plan_output_count(const kdc_rt_plan *p, size_t func);
const kdc_rt_tensor_info *kdc_rt_plan_output(const kdc_rt_plan *p, size_t func, size_t i);
/* The METADATA and IR_TEXT sections as C strings ("" when absent). */
const char *kdc_rt_plan_metadata(const kdc_rt_plan *p);
const char *kdc_rt_plan_ir_text(const kdc_rt_plan *p);
/* Threads the plan runs with. */
int kdc_rt_plan_threads(const kdc_rt_plan *p);

/* ---- exec.c ----------------------------------------------------------------- */

/* Runs function |func|: |inputs[i]| holds kdc_rt_plan_input(p, func, i)->bytes
 * bytes (row-major, the declared dtype; read, never written), |outputs[i]|
 * receives output i.  Buffers must not overlap each other.  Inputs are read
 * in place (no copy); outputs are written directly by the kernel or GEMM
 * that computes them, or copied at the end.  Allocates nothing. */
kdc_status kdc_rt_plan_run_func(kdc_rt_plan *p, size_t func, const void *const *inputs,
                                void *const *outputs);
/* kdc_rt_plan_run_func on function 0 ("predict" in plans kdc compiles). */
kdc_status kdc_rt_plan_run(kdc_rt_plan *p, const void *const *inputs, void *const *outputs);

/* ---- describe.c ------------------------------------------------------------- */

/* `kdc inspect plan.bin`: buffers and sizes, weights, every step with its
 * buffer ranges, the metadata and the IR text. */
void kdc_rt_plan_describe(const kdc_rt_plan *p, FILE *out);

/* ======================================================================
 * Internal: shared by the files of runtime/.
 * ==================================================================== */

typedef void (*kdc_rt_kernel_fn)(void **args, int64_t begin, int64_t end);

/* ---- jit.c: LLVM ORC LLJIT over the CODE section ----------------------------- */

typedef struct rt_jit rt_jit;
/* Parses, verifies, optimises (O3 for the host CPU) and JITs |bitcode|.
 * Errors name |file|, the "code" section and its byte |offset|. */
kdc_status rt_jit_create(const void *bitcode, size_t size, const char *file, uint64_t offset,
                         rt_jit **out);
/* The address of kernel |name|, or NULL. */
kdc_rt_kernel_fn rt_jit_lookup(rt_jit *j, const char *name);
void rt_jit_destroy(rt_jit *j);

/* ---- pool.c: a small persistent thread pool -------------------------------- */

typedef struct rt_pool rt_pool;
/* |n_threads| counts the caller: n_threads - 1 workers are started. */
kdc_status rt_pool_create(int n_threads, rt_pool **out);
void rt_pool_destroy(rt_pool *pool);
/* Runs fn(args, b, e) over [0, extent) split into |chunks| ranges, on the
 * workers and the calling thread; returns when all are done. */
void rt_pool_run(rt_pool *pool, kdc_rt_kernel_fn fn, void **args, int64_t extent,
                 int64_t chunks);

/* ---- the plan object (plan_load.c) ----------------------------------------- */

typedef struct rt_func {
  void ***step_args;        /* per step: its kernel's argument array (or NULL) */
  void **argv;              /* storage for all of them */
} rt_func;

struct kdc_rt_plan {
  int refs;
  char *path;
  kdc_plan_file *file;      /* kept open: weights point into it */
  kdc_arena *arena;         /* the decoded program */
  kdc_program prog;
  kdc_rt_kernel_fn *kernels;
  rt_func *funcs;
  char *metadata, *ir_text;
  rt_jit *jit;
  rt_pool *pool;
  int n_threads;
  void *scratch;            /* the arena, 64-byte aligned, prog.arena_bytes */
};

#endif
