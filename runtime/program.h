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
 * SPMD: the program is the same for every device of |mesh|.  Steps address
 * the device's own buffers (its arena, its piece of each input, output and
 * weight, of LOCAL shape); kernels read the device's mesh coordinates;
 * COLLECTIVE steps move data between the devices of a group.  Inputs,
 * outputs and weights are described GLOBALLY with their sharding, so the
 * runtime splits what the caller passes and gathers what it returns.
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
 * version).  Bump on any change; a reader refuses other versions.
 * 2: the mesh, shardings of inputs/outputs/weights (global shapes), and
 *    COLLECTIVE steps.
 * 4: kernel steps carry their output count (multi-output kernels).
 * 5: LOOP steps (a scan body run |length| times) and a flags byte per
 *    function (bit 0: scan body).
 * 6: a gate_packed byte per tensor (kdc_prog_tensor).
 * 7: kernel steps carry which outputs they update in place.
 * 8: GEMM steps carry their element type (f32, or bf16/f16 on CUDA).
 * 9: GEMM steps carry a flags byte (bit 0: bf16_inputs).
 * 10: bf16_inputs means the GEMM rounds its operands to bf16 (they may be
 *     any f32 values: the roundings before it are folded into it).
 * 11: GEMM steps carry a two-level batch (batch_inner, stride_*2). */
#define KDC_PROG_VERSION 11u

/* Caps of the format: mesh axes (ir/ir.h KDC_MAX_MESH_AXES) and devices a
 * plan may ask for (a bound checked before anything per device is made). */
enum { KDC_PROG_MAX_AXES = 8, KDC_PROG_MAX_DEVICES = 4096 };

/* The device mesh of an SPMD program: named axes, devices numbered
 * row-major over the sizes (device id <-> coordinates, ir/spmd.c). */
typedef struct kdc_prog_mesh {
  uint32_t naxes;                        /* 0: one device */
  const char *names[KDC_PROG_MAX_AXES];
  int64_t sizes[KDC_PROG_MAX_AXES];
  int64_t n_devices;                     /* product of sizes, 1 when naxes == 0 */
} kdc_prog_mesh;

/* How a GLOBAL tensor is laid out over the mesh: per dim, the mesh axes
 * that split it, major to minor (each axis at most once in the tensor).
 * A device holds the piece whose index along dim d is its coordinates on
 * axes[d] read as a mixed-radix number; over the axes no dim uses the
 * tensor is replicated.  All zeros = replicated.  Never partial: partition
 * reduces every function input and output. */
typedef struct kdc_prog_sharding {
  uint8_t naxes[KDC_IO_MAX_RANK];
  uint8_t axes[KDC_IO_MAX_RANK][KDC_PROG_MAX_AXES];
} kdc_prog_sharding;

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

/* A named tensor: a function input/output or a weight.  |dims| and |bytes|
 * are GLOBAL (what the user passes and gets); every device holds a piece of
 * |local_dims| (global dims divided by their shard counts, exactly: the
 * decoder refuses indivisible shapes), and buffer references (kdc_prog_loc)
 * to it are checked against |local_bytes|. */
typedef struct kdc_prog_tensor {
  const char *name;
  kdc_io_dtype dtype;       /* F32, I32, I64 or BOOL */
  int rank;
  int64_t dims[KDC_IO_MAX_RANK];
  uint64_t bytes;           /* numel * dtype size (checked) */
  kdc_prog_sharding sharding;
  int64_t local_dims[KDC_IO_MAX_RANK]; /* set by kdc_prog_tensor_localize */
  uint64_t local_bytes;
  bool gate_packed;         /* a recurrent weight (or its slot) kept per gate [.., G, u]:
                               its checkpoint form, Keras', merges the last two dims
                               [.., G*u] (frontend/lower_rnn.c, runtime/checkpoint.c) */
} kdc_prog_tensor;

typedef enum kdc_prog_step_kind {
  KDC_STEP_KERNEL = 1,      /* call a JIT kernel over [0, extent) */
  KDC_STEP_GEMM = 2,        /* batched cblas_sgemm (row-major) */
  KDC_STEP_COPY = 3,        /* memcpy src -> dst */
  KDC_STEP_COLLECTIVE = 4,  /* a collective over device groups of the mesh */
  KDC_STEP_LOOP = 5,        /* run a body function |length| times (scan) */
} kdc_prog_step_kind;

typedef struct kdc_prog_kernel_step {
  uint32_t kernel;          /* index into kdc_program.kernels */
  int64_t extent;           /* iteration space the runtime may split */
  int64_t unit_cost;        /* ~element-ops per iteration (threading heuristic) */
  uint32_t n_args;          /* == kernels[kernel].n_args */
  kdc_prog_loc *args;
  uint32_t n_out;           /* 1 <= n_out <= n_args: args[0, n_out) are written (args[0] the
                               root, then a multi-output kernel's other outputs), the rest read */
  uint64_t in_place;        /* bit o (o < n_out, o < 64): output o's range also holds a value
                               the kernel reads (codegen gives an input that sits where an
                               output goes only as that output: updated in place); a clear bit:
                               the kernel only writes that range */
} kdc_prog_kernel_step;

/* C[b] = op(A[b]) * op(B[b]) for b < batch, row-major, alpha 1, beta 0.
 * Element strides, a two-level batch: entry b is (o, i) = (b / batch_inner,
 * b % batch_inner) and A[b] starts at a + o*stride_a + i*stride_a2 (likewise
 * B, C); batch_inner 1 is the plain b*stride_a.  A CPU plan
 * reads an operand whose batch dims are not leading ([b, s, h, d] batched
 * over (b, h): attention heads) in place this way (codegen/gemm.c). */
typedef struct kdc_prog_gemm_step {
  int64_t batch, m, n, k;
  bool trans_a, trans_b;
  int64_t lda, ldb, ldc;
  int64_t stride_a, stride_b, stride_c;
  kdc_prog_loc a, b, c;
  kdc_io_dtype dtype;       /* of A, B and C: F32 (0), or BF16/F16 (CUDA only: cublasGemmEx
                               with f32 accumulation; the CPU executor refuses them at load) */
  bool bf16_inputs;         /* an F32 step that rounds each element of A and B to bf16 before
                               the products (a CPU plan's widened bf16 dot, the dot's
                               bf16_operands): AMX-BF16 tiles compute it where the CPU has
                               them (runtime/gemm_bf16.c) */
  int64_t batch_inner;      /* divides batch; <= 1: one level (a decoded plan holds >= 1) */
  int64_t stride_a2, stride_b2, stride_c2;
} kdc_prog_gemm_step;

/* Element offset of batch entry |b| in a two-level batch with |inner|
 * entries per group (<= 1: one level) and strides |s1| (groups), |s2|. */
static inline int64_t kdc_prog_gemm_off(int64_t b, int64_t inner, int64_t s1, int64_t s2) {
  return inner > 1 ? b / inner * s1 + b % inner * s2 : b * s1;
}

/* The collectives of ir/ops.def, same semantics (ir/interp_spmd.c is the
 * reference): groups over |axes| (major to minor), members ordered by group
 * index; sums in increasing device-id order. */
typedef enum kdc_prog_coll_kind {
  KDC_COLL_ALL_REDUCE = 1,     /* group sum */
  KDC_COLL_ALL_GATHER = 2,     /* concat of the members' pieces along |dim| */
  KDC_COLL_REDUCE_SCATTER = 3, /* group sum, piece <group index> along |dim| */
  KDC_COLL_ALL_TO_ALL = 4,     /* piece j along |dim| to member j, concat along |dim2| */
  KDC_COLL_PERMUTE = 5,        /* value of coordinate c - |shift| on the one axis, or 0 */
  KDC_COLL_KIND_END
} kdc_prog_coll_kind;

/* Every device runs the step on its own |src| and |dst| (local shapes
 * |in_dims| and |out_dims|); |src| and |dst| never overlap. */
typedef struct kdc_prog_coll_step {
  kdc_prog_coll_kind kind;
  kdc_io_dtype dtype;
  uint32_t naxes;
  uint8_t axes[KDC_PROG_MAX_AXES];
  int64_t dim, dim2, shift;
  int rank;
  int64_t in_dims[KDC_IO_MAX_RANK], out_dims[KDC_IO_MAX_RANK];
  int64_t group_size;          /* product of the axes' sizes (decoder) */
  kdc_prog_loc src, dst;
} kdc_prog_coll_step;

/* The scan loop (ir/ops.def scan): iteration t (0 <= t < length) runs every
 * step of function |body| with its input i bound to in[i] moved t *
 * in_stride[i] bytes on (output o likewise), then copies each of the first
 * |n_carry| outputs over the input of the same index (the carries: inputs
 * and outputs i < n_carry have stride 0 and equal bytes; the carry inputs
 * are arena buffers).  A loc's |bytes| is one iteration's extent and equals
 * the body's LOCAL input/output size.  The body is a function flagged as a
 * scan body, holds no LOOP step (collectives run once per iteration, on
 * every device) and addresses its own part of
 * the arena (the caller placed it after everything live at the step). */
typedef struct kdc_prog_loop_step {
  uint32_t body;            /* function index */
  int64_t length;           /* >= 1 */
  uint32_t n_carry, n_in, n_out;
  kdc_prog_loc *in, *out;   /* iteration 0's ranges */
  int64_t *in_stride, *out_stride; /* bytes per iteration, >= 0 */
} kdc_prog_loop_step;

typedef struct kdc_prog_step {
  kdc_prog_step_kind kind;
  kdc_prog_kernel_step kernel;   /* KERNEL */
  kdc_prog_gemm_step gemm;       /* GEMM */
  kdc_prog_loc src, dst;         /* COPY (equal bytes) */
  kdc_prog_coll_step coll;       /* COLLECTIVE */
  kdc_prog_loop_step loop;       /* LOOP */
} kdc_prog_step;

typedef struct kdc_prog_func {
  const char *name;
  uint32_t n_inputs, n_outputs, n_steps;
  kdc_prog_tensor *inputs, *outputs;
  kdc_prog_step *steps;
  bool is_body;             /* a scan body: run only by LOOP steps */
} kdc_prog_func;

typedef struct kdc_prog_kernel {
  const char *name;         /* symbol in the CODE module: "kdc_kernel_<i>" */
  uint32_t n_args;
} kdc_prog_kernel;

typedef struct kdc_program {
  kdc_prog_mesh mesh;
  uint64_t arena_bytes;     /* per device */
  uint32_t n_kernels, n_funcs, n_weights;
  kdc_prog_kernel *kernels;
  kdc_prog_func *funcs;
  kdc_prog_tensor *weights; /* from the WEIGHTS section (decode) */
  const void **weight_data; /* n_weights pointers into the WEIGHTS payload */
} kdc_program;

/* Byte size of one element of |dt| (kdc_io_dtype_size) for the dtypes a
 * program may use, 0 for others. */
size_t kdc_prog_dtype_size(kdc_io_dtype dt);
/* Sets |t|'s local dims and bytes from its global shape and sharding on
 * |mesh|; false (nothing reliable set) when an axis is not in the mesh or
 * used twice, or a dim is not divisible by its shard count. */
bool kdc_prog_tensor_localize(kdc_prog_tensor *t, const kdc_prog_mesh *mesh);
/* "{data,-,(data,model)}" (axis names from |mesh|) into |buf|; returns buf. */
char *kdc_prog_sharding_str(const kdc_prog_mesh *mesh, const kdc_prog_sharding *s, int rank,
                            char *buf, size_t n);
/* "all_reduce" ... for a collective kind ("?" when unknown). */
const char *kdc_prog_coll_name(kdc_prog_coll_kind k);
/* The kernel index an LLVM function name of the CODE section carries:
 * every function of kernel k is named kdc_kernel_<k>... (the wrapper the
 * program names and its variants), kdc_body_<k>... or kdc_opnd_<k>
 * (codegen).  -1 for other names (shared functions: kdc_math_*); with a
 * kernel, the digits are name[*digits_at, *digits_end) (both may be NULL). */
int64_t kdc_prog_kernel_family(const char *name, size_t *digits_at, size_t *digits_end);

/* ---- encode (codegen) ------------------------------------------------------ */

/* Appends the PROGRAM payload for |p| (weights are not part of it; tensors
 * are written with their global dims and sharding). */
void kdc_prog_encode(const kdc_program *p, kdc_buf *out);
/* The head of the WEIGHTS payload: into the empty |out|, the version, count
 * and table; |data_at[i]| gets the section offset where tensors[i]'s bytes
 * follow (64-byte aligned from the section start, zeros between).  The
 * writer appends the data itself without copying it (codegen/plan_writer.c). */
void kdc_prog_encode_weights_table(const kdc_prog_tensor *tensors, uint32_t n, kdc_buf *out,
                                   uint64_t *data_at);

/* ---- decode (runtime) ------------------------------------------------------
 * Both decoders check every count, dtype, shape, string and reference and
 * return a KDC_INVALID_INPUT naming the file, the section and the byte
 * offset of the first inconsistency (kdc_reader_error).  Nothing they accept
 * can make a step touch memory outside its buffer. */

/* Decodes the head of the PROGRAM payload of |r| (version and mesh) into
 * |p|; call first: weight and I/O shardings are checked against the mesh. */
kdc_status kdc_prog_decode_mesh(kdc_reader *r, kdc_arena *a, kdc_program *p);
/* Decodes the WEIGHTS payload of |r| into |p|'s weights tables (data stays
 * in the payload: it must outlive |p|).  After kdc_prog_decode_mesh. */
kdc_status kdc_prog_decode_weights(kdc_reader *r, kdc_arena *a, kdc_program *p);
/* Decodes the rest of the PROGRAM payload of |r| into |p| (after the mesh
 * and the weights). */
kdc_status kdc_prog_decode(kdc_reader *r, kdc_arena *a, kdc_program *p);

#endif
