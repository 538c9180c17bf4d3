/*
 * runtime/cuda/host.h: the host-side planning of the CUDA executor
 * (docs/gpu.md), free of any CUDA header so it builds and is unit-tested
 * everywhere (tests/gpu/test_cuda_host.c), with or without a GPU:
 *   - the launch table (the plan's CUDA section) and the grid of a kernel;
 *   - the row-major GEMM step -> cublasSgemmStridedBatched argument mapping;
 *   - the NCCL communicators: one split of the world per distinct axes list
 *     of the program's collectives (color = group, key = group index);
 *   - every collective step as a list of NCCL calls and device block copies
 *     (each copy as 2D copies, cuMemcpy2D's form) that reproduces the
 *     step's layout (runtime/program.h, coll_shm.c) on NCCL's flat buffers.
 * cuda/exec.c only translates these plans into driver, cuBLAS and NCCL
 * calls.
 */
#ifndef KDC_RUNTIME_CUDA_HOST_H
#define KDC_RUNTIME_CUDA_HOST_H

#include <stdbool.h>
#include <stdint.h>

#include "common/io.h"
#include "kdc/arena.h"
#include "runtime/runtime.h"

/* ---- the launch table ------------------------------------------------------ */

/* 3: + the cubin (ptxas's SASS for |sm|) after the kernels; 2 is still read */
enum { RT_CUDA_TABLE_VERSION = 3, RT_CUDA_MAX_GRID = 0x7fffffff };
#define RT_CUDA_MAX_SCRATCH (1ull << 32)

/* A kernel's launch form (codegen's cg_gpu_kind, docs/gpu.md "Kernel forms"). */
enum { RT_CUDA_FORM_ELEMENT = 0, RT_CUDA_FORM_COLUMN = 1, RT_CUDA_FORM_ROW = 2 };

typedef struct rt_cuda_launch {
  const char *entry;        /* "kdc_cuda_<k>" (PTX .entry) */
  uint64_t threads;         /* ELEMENT: one per output element; a reduction: grid x block */
  uint32_t grid, block;     /* grid = ceil(threads / block), >= 1; block per kernel */
  uint32_t form;            /* RT_CUDA_FORM_* */
  uint64_t scratch;         /* > 0: bytes of zeroed device scratch passed after coords (a
                               reduction split over blocks; its counters return to 0) */
} rt_cuda_launch;

typedef struct rt_cuda_table {
  uint32_t version;         /* 2 or 3 */
  uint32_t sm;              /* 80 or 90 */
  uint32_t n_kernels;
  rt_cuda_launch *kernels;
  /* version 3: the PTX assembled by ptxas at compile time (docs/gpu.md) */
  uint32_t cubin_sm;        /* == sm, or 0: no cubin */
  const char *cubin_note;   /* the ptxas that made it, or why there is none ("" in v2) */
  const void *cubin;        /* the ELF image, in the section (64-byte aligned in the file) */
  uint64_t cubin_bytes;
} rt_cuda_table;

/* Decodes the CUDA section (docs/gpu.md, "Plan sections") from |r| into |t|
 * (strings stay in the section).  Every count, each kernel's block size
 * (1..1024, a multiple of 32) and form, the sm, each entry name ("kdc_cuda_<k>" for kernel k)
 * and each grid are checked; it must list exactly |n_kernels| kernels (the
 * PROGRAM's); version 3's cubin must be for the table's sm, an ELF image,
 * and end the section.  Errors: KDC_INVALID_INPUT naming file, section and
 * byte. */
kdc_status rt_cuda_table_decode(kdc_reader *r, kdc_arena *a, uint32_t n_kernels,
                                rt_cuda_table *t);
/* ceil(threads / block), at least 1; false when it exceeds the grid limit. */
bool rt_cuda_grid(uint64_t threads, uint32_t block, uint32_t *grid);
/* Does a cubin for sm_|cubin_sm| run on a GPU of compute capability
 * |major|.|minor|?  SASS runs on its own major architecture at the same or
 * a later minor version (NVIDIA's binary compatibility rule). */
bool rt_cuda_cubin_runs(uint32_t cubin_sm, int major, int minor);

/* ---- GEMM -------------------------------------------------------------------- */

/* cublasSgemmStridedBatched's arguments for a row-major GEMM step: cuBLAS
 * is column-major, and the row-major C = op(A) op(B) is the column-major
 * C^T = op(B)^T op(A)^T, so cuBLAS's A operand is the plan's B and its B
 * the plan's A; leading dimensions and strides are the plan's. */
typedef struct rt_cuda_gemm {
  bool trans_a, trans_b;    /* cuBLAS's op on its A (= plan B), its B (= plan A) */
  int m, n, k;              /* cuBLAS's: m = plan n, n = plan m, k = plan k */
  int lda, ldb, ldc;        /* lda = plan ldb, ldb = plan lda, ldc = plan ldc */
  long long stride_a, stride_b, stride_c; /* elements: plan stride_b, stride_a, stride_c */
  int batch;
} rt_cuda_gemm;

/* KDC_UNSUPPORTED (naming |where|) when a size does not fit cuBLAS's int. */
kdc_status rt_cuda_gemm_map(const kdc_prog_gemm_step *g, const char *where, rt_cuda_gemm *out);

/* ---- communicators ----------------------------------------------------------- */

/* The devices' groups over one axes list as an ncclCommSplit of the world
 * communicator (world rank = device id). */
typedef struct rt_cuda_split {
  uint32_t naxes;
  uint8_t axes[KDC_PROG_MAX_AXES];
  int64_t k;                /* group size */
  int *color, *key;         /* per device: its group (0..), its index in it */
  bool world;               /* one group, index == device id: the world itself */
} rt_cuda_split;

typedef struct rt_cuda_comms {
  uint32_t n_splits;
  rt_cuda_split *splits;
  int **step_split;         /* [func][step]: the split of a collective step, or -1 */
} rt_cuda_comms;

/* One split per distinct (ordered) axes list among the program's
 * collectives, in first-use order (every process computes the same list,
 * so the ncclCommSplit calls match).  Free with rt_cuda_comms_free. */
void rt_cuda_comms_plan(const kdc_program *prog, rt_cuda_comms *out);
void rt_cuda_comms_free(rt_cuda_comms *c, const kdc_program *prog);

/* ---- copies ------------------------------------------------------------------ */

/* A strided copy in cuMemcpy2D's form: |height| rows of |width| bytes. */
typedef struct rt_copy2d {
  uint64_t src_off, dst_off, width, height, src_pitch, dst_pitch;
} rt_copy2d;

/* The copies doing rt_box |b| (its base offsets included): the innermost
 * iterated dim becomes the 2D copy's rows, the others are looped over.
 * Calls |emit| once per copy; returns the number of copies. */
int64_t rt_cuda_box_2d(const rt_box *b, void (*emit)(void *ctx, const rt_copy2d *c), void *ctx);

/* ---- collectives ---------------------------------------------------------------- */

typedef enum rt_cbuf { RT_CB_SRC = 0, RT_CB_DST = 1, RT_CB_SCRATCH = 2 } rt_cbuf;

typedef enum rt_cop_kind {
  RT_COP_BOX = 1,           /* device block copy (a rt_box between two buffers) */
  RT_COP_ZERO,              /* memset 0 of |bytes| at dst */
  RT_COP_ALL_REDUCE,        /* ncclAllReduce(src, dst, count, sum) */
  RT_COP_ALL_GATHER,        /* ncclAllGather(src, dst, count per rank) */
  RT_COP_REDUCE_SCATTER,    /* ncclReduceScatter(src, dst, count per rank, sum) */
  RT_COP_SEND,              /* ncclSend(src, count, peer) */
  RT_COP_RECV,              /* ncclRecv(dst, count, peer) */
} rt_cop_kind;

typedef struct rt_cop {
  rt_cop_kind kind;
  uint8_t sbuf, dbuf;       /* rt_cbuf */
  uint64_t soff, doff;      /* bytes */
  uint64_t count;           /* NCCL: elements; ZERO: bytes */
  int64_t peer;             /* SEND/RECV: rank in the communicator */
  bool world;               /* SEND/RECV on the world communicator (peer = device id) */
  rt_box box;               /* BOX */
} rt_cop;

/* What one device does for a collective step, in three phases: |pre| block
 * copies, then the NCCL calls (all local devices' in one ncclGroupStart/
 * End), then |post| block copies; all on the device's stream. */
typedef struct rt_coll_plan {
  int n_pre, n_nccl, n_post;
  rt_cop *pre, *nccl, *post;
  uint64_t scratch_bytes;   /* per device */
} rt_coll_plan;

/* The plan of step |c| (groups |g|, from devices.c) for |device|.  Sums
 * over bool are KDC_UNSUPPORTED (NCCL sums numbers).  |where| names the
 * step for messages.  Storage is from |a|. */
kdc_status rt_cuda_coll_plan(const kdc_prog_coll_step *c, const rt_coll_groups *g,
                             int64_t device, kdc_arena *a, const char *where, rt_coll_plan *out);

#endif
