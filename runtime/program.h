/*
 * runtime/program.h: the PROGRAM and WEIGHTS sections of plan.bin, the one
 * definition both codegen/plan_writer.c (encode) and runtime/plan_load.c
 * (decode) use.  The byte layout is documented in docs/plan-format.md,
 * "Sections"; this header is its C form.  The container (header, section
 * table, checksum) is common/io.h's.
 *
 * A program is a list of functions ("predict", "train_step", ...) sharing
 * one kernel table (the kernels of the CODE section's LLVM module), one
 * weights table and one scratch arena (functions never run concurrently on
 * one device, so the arena is the largest function's).  A function is a
 * list of steps over buffers; every buffer reference is a |kdc_prog_loc|:
 * which buffer, a byte offset and the bytes the step may touch, so the
 * decoder can check every access against the buffer's size once, at load.
 *
 * Ownership: a decoded program lives in a kdc_arena the caller passes (its
 * strings are copied), so freeing the arena frees it.
 */
#ifndef KDC_RUNTIME_PROGRAM_H
#define KDC_RUNTIME_PROGRAM_H

#include <stdbool.h>
#include <stdint.h>

#include "common/io.h"
#include "kdc/arena.h"
#include "kdc/status.h"

/* Version of the PROGRAM/WEIGHTS payload layout (inside the container's own
 * version).  Bump on any change; a reader refuses other versions. */
#define KDC_PROG_VERSION 1u

typedef enum kdc_prog_buf {
  KDC_PROG_BUF_ARENA = 0,   /* the scratch arena (index 0) */
  KDC_PROG_BUF_INPUT = 1,   /* the function's input |index| (caller memory) */
  KDC_PROG_BUF_OUTPUT = 2,  /* the function's output |index| (caller memory) */
  KDC_PROG_BUF_WEIGHT = 3,  /* WEIGHTS entry |index| (plan data, read-only) */
  KDC_PROG_BUF_COUNT
} kdc_prog_buf;

/* A byte range of one buffer. */
typedef struct kdc_prog_loc {
  uint8_t buf;              /* kdc_prog_buf */
  uint32_t index;           /* input/output/weight index; 0 for the arena */
  uint64_t offset;          /* bytes from the buffer start */
  uint64_t bytes;           /* extent the step may read or write */
} kdc_prog_loc;

/* A named tensor: a function input/output or a weight. */
typedef struct kdc_prog_tensor {
  const char *name;
  kdc_io_dtype dtype;       /* F32, I32, I64 or BOOL */
  int rank;
  int64_t dims[KDC_IO_MAX_RANK];
  uint64_t bytes;           /* numel * dtype size (checked) */
} kdc_prog_tensor;

typedef enum kdc_prog_step_kind {
  KDC_STEP_KERNEL = 1,      /* call a JIT kernel over [0, extent) */
  KDC_STEP_GEMM = 2,        /* batched cblas_sgemm (row-major) */
  KDC_STEP_COPY = 3,        /* memcpy src -> dst */
} kdc_prog_step_kind;

typedef struct kdc_prog_kernel_step {
  uint32_t kernel;          /* index into kdc_program.kernels */
  int64_t extent;           /* iteration space the runtime may split */
  int64_t unit_cost;        /* ~element-ops per iteration (threading heuristic) */
  uint32_t n_args;          /* == kernels[kernel].n_args; args[0] is the output */
  kdc_prog_loc *args;
} kdc_prog_kernel_step;

/* C[b] = op(A[b]) * op(B[b]) for b < batch, row-major, alpha 1, beta 0.
 * Element strides: A[b] starts at a + b*stride_a (likewise B, C). */
typedef struct kdc_prog_gemm_step {
  int64_t batch, m, n, k;
  bool trans_a, trans_b;
  int64_t lda, ldb, ldc;
  int64_t stride_a, stride_b, stride_c;
  kdc_prog_loc a, b, c;
} kdc_prog_gemm_step;

typedef struct kdc_prog_step {
  kdc_prog_step_kind kind;
  kdc_prog_kernel_step kernel;   /* KERNEL */
  kdc_prog_gemm_step gemm;       /* GEMM */
  kdc_prog_loc src, dst;         /* COPY (equal bytes) */
} kdc_prog_step;

typedef struct kdc_prog_func {
  const char *name;
  uint32_t n_inputs, n_outputs, n_steps;
  kdc_prog_tensor *inputs, *outputs;
  kdc_prog_step *steps;
} kdc_prog_func;

typedef struct kdc_prog_kernel {
  const char *name;         /* symbol in the CODE module: "kdc_kernel_<i>" */
  uint32_t n_args;
} kdc_prog_kernel;

typedef struct kdc_program {
  uint64_t arena_bytes;
  uint32_t n_kernels, n_funcs, n_weights;
  kdc_prog_kernel *kernels;
  kdc_prog_func *funcs;
  kdc_prog_tensor *weights; /* from the WEIGHTS section (decode) */
  const void **weight_data; /* n_weights pointers into the WEIGHTS payload */
} kdc_program;

/* Byte size of one element of |dt| (kdc_io_dtype_size) for the dtypes a
 * program may use, 0 for others. */
size_t kdc_prog_dtype_size(kdc_io_dtype dt);

/* ---- encode (codegen) ------------------------------------------------------ */

/* Appends the PROGRAM payload for |p| (weights are not part of it). */
void kdc_prog_encode(const kdc_program *p, kdc_buf *out);
/* Appends the WEIGHTS payload: |n| tensors with their data (|data[i]| holds
 * tensors[i].bytes bytes), each 64-byte aligned from the section start. */
void kdc_prog_encode_weights(const kdc_prog_tensor *tensors, const void *const *data,
                             uint32_t n, kdc_buf *out);

/* ---- decode (runtime) ------------------------------------------------------
 * Both decoders check every count, dtype, shape, string and reference and
 * return a KDC_INVALID_INPUT naming the file, the section and the byte
 * offset of the first inconsistency (kdc_reader_error).  Nothing they accept
 * can make a step touch memory outside its buffer. */

/* Decodes the WEIGHTS payload of |r| into |p|'s weights tables (data stays
 * in the payload: it must outlive |p|). */
kdc_status kdc_prog_decode_weights(kdc_reader *r, kdc_arena *a, kdc_program *p);
/* Decodes the PROGRAM payload of |r| into |p| (after the weights). */
kdc_status kdc_prog_decode(kdc_reader *r, kdc_arena *a, kdc_program *p);

#endif
