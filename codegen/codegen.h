/*
 * codegen/codegen.h: IR -> LLVM IR -> plan.bin, and the table of contents of
 * codegen/ (STYLE.md 2).  Sections are titled after the files.
 *
 * Input: a module whose functions are fused (passes/fuse.c sets
 * node->group) and memory-planned (passes/plan_memory.c sets
 * node->mem_offset).  Output: one plan.bin with ONE LLVM module for all
 * kernels of all functions, a step program per function, the weights, and
 * metadata (docs/plan-format.md).  Codegen reads the IR and nothing else: it
 * never re-derives fusion, memory or shardings, and knows nothing of Keras.
 *
 * Kernel design (docs/codegen.md).  Each fusion group becomes
 *   - a BODY, generated once as LLVM IR over an element multi-index:
 *       internal alwaysinline void kdc_body_<k>(ptr out,
 *           ptr in_1, ..., ptr coords, i64 i_0, ..., i64 i_{r-1})
 *     computing the group's root at that index (operand chains fused,
 *     reductions as loops inside) and storing it to out[linear(i)].
 *     |coords| is the device's mesh coordinates (one i64 per mesh axis),
 *     the implicit argument of SPMD programs: shard_slice selects its piece
 *     and rng_uniform offsets its counter with it (index arithmetic);
 *   - a WRAPPER per target.  CPU (cpu_wrap.c):
 *       void kdc_kernel_<k>(ptr args, ptr coords, i64 begin, i64 end)
 *     a loop nest over the output whose innermost loop is the innermost
 *     dim (unit stride, no div/mod: LLVM vectorises it), over the range
 *     [begin, end) of the outer iteration space so the runtime can split
 *     it over threads.  A CUDA wrapper maps (block, thread) to the same
 *     multi-index and calls the same body.
 * A DOT outside any group becomes a GEMM step (cblas_sgemm), preceded when
 * an operand's layout cannot be expressed with transpose flags by a
 * transpose kernel into a staging area after the planned arena.  A
 * collective (all_reduce, all_gather, reduce_scatter, all_to_all,
 * collective_permute) becomes a COLLECTIVE step (lower_spmd.c).
 *
 * SPMD.  After passes/partition.c a function's types are LOCAL and the
 * module's mesh is the device grid; the plan records the mesh and, for
 * every input, output and weight, its GLOBAL shape and sharding
 * (lower_spmd.c), so the runtime splits and gathers.
 */
#ifndef KDC_CODEGEN_H
#define KDC_CODEGEN_H

#include <stdbool.h>
#include <stddef.h>

#include "ir/ir.h"

/* ---- plan_writer.c: the entry point ------------------------------------- */

typedef struct kdc_codegen_options {
  const char *const *funcs;  /* functions to compile, in plan order; NULL = all */
  size_t n_funcs;
  bool no_ir_text;           /* omit the IR_TEXT section (smaller plans) */
  const char *explain;       /* EXPLAIN section text (`kdc inspect --explain`); NULL = none */
  const char *keras;         /* KERAS section text (frontend kdc_frontend_keras_section); NULL = none */
  int cuda_sm;               /* > 0: also lower every kernel to PTX for sm_<cuda_sm> (80, 90):
                                PTX and CUDA sections, metadata target "cuda" (docs/gpu.md) */
  bool tf32;                 /* METADATA "matmul_precision": "tf32" (GEMMs on a GPU may use
                                TF32 tensor cores; docs/gpu.md); false: the key is absent
                                ("highest") */
  const void *train_state;   /* a safetensors image of initial training state (optimizer
                                tensors of a checkpoint, `kdc compile --weights`): the
                                TRAIN_STATE section; NULL = none (state starts at zero) */
  size_t train_state_size;
  const char *metadata_auto; /* METADATA "auto_layout": a JSON object (--layout auto); NULL = none */
} kdc_codegen_options;

/* Compiles every selected function of |m| (fused and memory-planned) into
 * one CPU plan written atomically to |out_path|.  Weight parameters whose
 * module weight has data are embedded in the plan; other parameters become
 * function inputs, in parameter order.  |opt| may be NULL.  Errors:
 * KDC_INTERNAL when the IR breaks the fusion or memory contract,
 * KDC_UNSUPPORTED for an op or dtype combination codegen does not handle,
 * KDC_IO_ERROR when the file cannot be written. */
kdc_status kdc_codegen_cpu_plan(const kdc_module *m, const kdc_codegen_options *opt,
                                const char *out_path);

/* ======================================================================
 * Internal: shared by the files of codegen/ (not for other folders).
 * ==================================================================== */

#include <llvm-c/Core.h>

#include "runtime/program.h"

/* One kernel to generate: a fusion group of |f| (or a singleton), or a
 * synthetic transpose copy feeding a GEMM. */
typedef struct cg_kernel {
  const kdc_func *f;
  kdc_value_id root;          /* group root; for a transpose: the source value */
  int32_t group;              /* f's group id, -1 for a singleton / transpose */
  bool transpose;             /* out = transpose(root's value, perm) */
  int64_t perm[KDC_MAX_RANK]; /* transpose: result dim i = source dim perm[i] */
  kdc_type out_type;          /* type of what the kernel writes */
  uint32_t n_args;            /* pointer arguments; slot 0 is the output */
  uint32_t n_extra;           /* the group's other outputs (ir.h), in slots 1..n_extra */
  const kdc_value_id *extra;  /* their value ids */
  int32_t *slot;              /* f->n_nodes entries: arg slot of an external
                                 stored value read by the kernel, else -1 */
  int64_t cost;               /* ~ops per output element (set by the body) */
  bool aligned_out;           /* CPU wrapper: every output pointer is 64-byte aligned
                                 (assumed; cg_cpu_wrap_stream checks it first) */
} cg_kernel;

/* A dense constant already emitted as an LLVM global. */
typedef struct cg_global {
  const kdc_func *f;
  kdc_value_id v;
  LLVMValueRef g;
} cg_global;

/* dedup.c's table of the kernels emitted so far. */
typedef struct cg_dedup_entry {
  uint64_t sig;          /* cheap signature of the kernel's functions */
  uint32_t kernel;       /* its index */
  size_t first_fn, n_fn; /* its functions: cg_dedup.fn[first_fn ..] */
  uint32_t next;         /* the next entry of the bucket + 1, 0 = none */
} cg_dedup_entry;

typedef struct cg_dedup {
  cg_dedup_entry *entries;
  size_t n, cap_entries;
  LLVMValueRef *fn;
  size_t n_fn, cap_fn;
  uint32_t *buckets;     /* entry index + 1, 0 = empty; a power of 2 of them */
  size_t n_buckets;
  size_t n_merged;       /* kernels emitted as an earlier one */
} cg_dedup;

/* The whole compilation: one LLVM module and the program being built. */
typedef struct cg_plan {
  const kdc_module *m;
  LLVMContextRef ctx;
  LLVMModuleRef mod;
  LLVMBuilderRef b;
  LLVMTypeRef f32, i1, i8, i16, i32, i64, half, ptr, void_t;
  kdc_arena *a;               /* program arrays and names */
  kdc_program prog;           /* kernels, funcs (weights kept below) */
  size_t cap_kernels, cap_funcs;
  kdc_prog_tensor *w;         /* weights table for the WEIGHTS section */
  const void **wdata;
  uint32_t nw;
  size_t cap_w;
  kdc_strindex w_index;       /* weight name -> its first entry in |w| */
  cg_global *globals;
  size_t n_globals, cap_globals;
  kdc_type *ktype;            /* per kernel: the type of what it writes (ptx_wrap.c) */
  size_t cap_ktype;
  struct cg_gpu_form *kform;  /* per kernel with cuda_sm: its GPU launch form (ptx_wrap.c) */
  size_t cap_kform;
  int cuda_sm;                /* options' cuda_sm (metadata) */
  bool tf32;                  /* options' tf32 (metadata) */
  /* Scan bodies (lower.c): lowered when their scan is, appended after the
   * n_entries entry functions, so body k is function n_entries + k. */
  uint32_t n_entries;
  kdc_prog_func *bodies;
  size_t n_bodies, cap_bodies;
  cg_dedup dedup;             /* identical kernels emitted once (dedup.c) */
} cg_plan;

/* ---- lower.c: one function -> steps, storage, kernels ------------------ */

/* Appends |f|'s step program to P->prog.funcs, emitting its kernels into
 * P->mod; *|out_arena| receives the arena bytes |f| needs (planned values
 * plus GEMM staging and the scan loops' carries and bodies).  Scan bodies
 * land in P->bodies (LOOP steps, docs/codegen.md "Loops"). */
kdc_status cg_lower_func(cg_plan *P, const kdc_func *f, uint64_t *out_arena);
/* kdc_dtype -> the plan's kdc_io_dtype. */
kdc_io_dtype cg_io_dtype(kdc_dtype d);

/* ---- dedup.c: identical kernels once --------------------------------------- */

/* Kernel |idx|'s functions were just emitted after function |mark| (NULL:
 * from the module's first).  If an earlier kernel's functions are the same
 * code (the same LLVM text, names aside), deletes the new ones and returns
 * the earlier kernel's index; else remembers kernel |idx| and returns it. */
uint32_t cg_dedup_kernel(cg_plan *P, LLVMValueRef mark, uint32_t idx);
void cg_dedup_free(cg_dedup *D);

/* ---- lower_spmd.c: the SPMD parts of lowering --------------------------- */

/* The plan tensor of a value of LOCAL type |local| with sharding |s| (NULL
 * or not present: replicated): global dims and the sharding.  A partial
 * sharding is a KDC_INTERNAL error (partition reduces every function input
 * and output); |what| names the value for messages. */
kdc_status cg_tensor_of(cg_plan *P, const char *name, const kdc_type *local,
                        const kdc_sharding *s, const char *what, kdc_prog_tensor *out);
/* The COLLECTIVE step of node |v| of |f| reading |src| and writing |dst|. */
kdc_status cg_collective_step(cg_plan *P, const kdc_func *f, kdc_value_id v,
                              const kdc_prog_loc *src, const kdc_prog_loc *dst,
                              kdc_prog_step *out);
/* True for the ops that become COLLECTIVE steps. */
bool cg_is_collective(kdc_op op);
/* P->prog.mesh from the module's mesh. */
void cg_set_mesh(cg_plan *P);

/* ---- gemm.c: DOT -> GEMM parameters ------------------------------------ */

typedef struct cg_gemm {
  int64_t batch, m, n, k;
  bool trans_a, trans_b;
  int64_t lda, ldb;
  int64_t batch_inner;          /* a two-level batch (kdc_prog_gemm_step), else 1 */
  int64_t stride_a, stride_a2, stride_b, stride_b2, stride_c, stride_c2;
  bool copy_a, copy_b;          /* operand needs a transpose kernel first */
  int64_t perm_a[KDC_MAX_RANK]; /* the copy's permutation (when copy_*) */
  int64_t perm_b[KDC_MAX_RANK];
} cg_gemm;

/* The cblas_sgemm form of DOT node |v| of |f|; |strided| (CPU plans):
 * operands read in place by their strides, batch dims anywhere (a
 * two-level batch); else (CUDA plans, cuBLAS has one batch stride) only
 * with their batch dims leading. */
void cg_gemm_plan(const kdc_func *f, kdc_value_id v, bool strided, cg_gemm *out);

/* ---- kernel_body.c: the body over a multi-index ------------------------- */

/* Emits "kdc_body_<index>" for |k| into P->mod and returns it. */
kdc_status cg_body_emit(cg_plan *P, cg_kernel *k, uint32_t index, LLVMValueRef *out_body);
/* An alloca at the top of |fn|'s entry block (promoted to registers by O3). */
LLVMValueRef cg_entry_alloca(cg_plan *P, LLVMValueRef fn, LLVMTypeRef t);

/* CPU loop forms (cpu_wrap.c; the CUDA wrapper uses kdc_body_<k> only):
 *  - a root concatenate along the last dim: one loop per piece, each
 *    calling a body |name| that evaluates only piece |piece| (the generic
 *    body evaluates every piece per element and selects); along an earlier
 *    dim (an LSTM's gate gradients, [B, 4, u] along 1): each row lies in
 *    one piece, whose loop the row picks; rank 1 (e.g. the
 *    gradients packed for one all_reduce): each piece loops over its part
 *    of the kernel's rows [begin, end), which are its elements;
 *  - a column reduction (a root reduce over the operand's leading dims
 *    [0, p)): the reduced dims outermost, the kept elements innermost,
 *    folding into the output (every output still accumulates in increasing
 *    index order, bit-exact with the interpreter), where the generic body
 *    walks the operand with the stride of the kept dims per element. */
enum { CG_MAX_PIECES = 64 };
int cg_kernel_concat_pieces(const cg_kernel *k);  /* pieces, or 0 */
/* Scatter rows (cpu_wrap.c): a scatter_add root reading its ids and
 * updates from buffers runs, per thread, over its output rows: zero them,
 * then add every update row whose id falls in them, ids in increasing
 * order (the generic body's order, so the same bits). */
bool cg_kernel_scatter_rows(const cg_kernel *k);
/* Flat kernels: a kernel of rank >= 2 whose every output is computed from
 * its row-major linear index alone (elementwise members over operands of
 * the output's dims, reshapes, broadcasts of one element, loads, constants)
 * runs as rank 1 over all its elements (lower.c sets out_type to
 * [numel]): one unit-stride loop instead of rows of a short innermost dim
 * (an optimizer update of a [200, 10] kernel: 200 loops of 10).  The body
 * is the same code at the same linear index; nothing else changes. */
bool cg_kernel_flat(const cg_kernel *k);
int cg_kernel_column_reduce(const cg_kernel *k);  /* p, or 0 */
kdc_status cg_body_emit_piece(cg_plan *P, const cg_kernel *k, const char *name, int piece,
                              LLVMValueRef *out_body);
kdc_status cg_body_emit_accumulate(cg_plan *P, const cg_kernel *k, const char *name,
                                   LLVMValueRef *out_body);
/* GPU reductions (ptx_wrap.c): a reduce root with no other output whose
 * reduced dims are one run [*lo, *hi) of its operand's, not all of them
 * (kernel_body.c). */
bool cg_kernel_reduce_run(const cg_kernel *k, int *lo, int *hi);
/* The reduce root's operand is read in its own row-major order (loads at
 * its index, broadcasts, reshapes, elementwise ops; no transpose): its
 * trailing dims are contiguous. */
bool cg_kernel_operand_plain(const cg_kernel *k);
/* "|name|(args.., coords, j_0..j_{r-1}) -> value": the reduce root's
 * operand at operand multi-index j (register type). */
kdc_status cg_body_emit_operand(cg_plan *P, const cg_kernel *k, const char *name,
                                LLVMValueRef *out_body);

/* ---- body_window.c: windowed and indexed ops inside a body ------------- */

/* What kernel_body.c gives body_window.c for node |v| (convolution,
 * reduce_window, select_and_scatter, gather, scatter_add) at one output
 * multi-index. */
typedef struct cg_window_io {
  cg_plan *P;
  const kdc_func *f;
  kdc_value_id v;
  LLVMValueRef fn;                /* the body function being emitted */
  LLVMBasicBlockRef entry;        /* its entry block (for allocas) */
  LLVMValueRef const *idx;        /* the output multi-index (i64, rank of v) */
  /* Element |lin| (row-major, i64) of operand |k| of v, as a register value,
   * emitted at P->b's position; NULL with *|st| set on error. */
  LLVMValueRef (*load)(void *ctx, int k, LLVMValueRef lin, kdc_status *st);
  void *ctx;
  int64_t cost;                   /* out: ~ops per output element */
} cg_window_io;
/* Emits the loops computing v at io->idx (interpreter order, file comment)
 * and returns the value (f32, or the integer type for integer gather /
 * scatter_add).  Leaves P->b after the loops. */
LLVMValueRef cg_window_emit(cg_window_io *io, kdc_status *st);

/* ---- elementwise.c: scalar semantics of every elementwise op ------------ */

LLVMTypeRef cg_reg_type(cg_plan *P, kdc_dtype d);  /* i1 for bool */
LLVMTypeRef cg_mem_type(cg_plan *P, kdc_dtype d);  /* i8 for bool */
/* bf16/f16 storage <-> the f32 register (identities for other dtypes), and
 * the round trip: |v| rounded to |d| as the interpreter stores it. */
LLVMValueRef cg_widen(cg_plan *P, kdc_dtype d, LLVMValueRef v);
LLVMValueRef cg_narrow(cg_plan *P, kdc_dtype d, LLVMValueRef v);
LLVMValueRef cg_round(cg_plan *P, kdc_dtype d, LLVMValueRef v);
/* |nd|'s elementwise op over already-emitted operand values. */
kdc_status cg_emit_elementwise(cg_plan *P, const kdc_func *f, const kdc_node *nd,
                               LLVMValueRef *in, LLVMValueRef *out);
/* One splat element of |d| from host bytes |p|. */
LLVMValueRef cg_const_scalar(cg_plan *P, kdc_dtype d, const void *p);
/* Reduction: identity element and combine step (NaN-propagating max/min). */
LLVMValueRef cg_reduce_init(cg_plan *P, kdc_reduce_kind kind, kdc_dtype d);
LLVMValueRef cg_reduce_step(cg_plan *P, kdc_reduce_kind kind, kdc_dtype d, LLVMValueRef acc,
                            LLVMValueRef x);
LLVMValueRef cg_emit_binop(cg_plan *P, kdc_op op, kdc_dtype d, LLVMValueRef a, LLVMValueRef b);
/* rng_uniform's f32 at the i64 global |index| for the i64 |step|. */
LLVMValueRef cg_emit_rng_uniform(cg_plan *P, int64_t seed, LLVMValueRef step, LLVMValueRef index);

/* ---- math_ir.c: ir/math.c's exp, expm1, tanh, logistic as LLVM IR -------- */

LLVMValueRef cg_math_exp(cg_plan *P, LLVMValueRef x);
LLVMValueRef cg_math_expm1(cg_plan *P, LLVMValueRef x);
LLVMValueRef cg_math_tanh(cg_plan *P, LLVMValueRef x);
LLVMValueRef cg_math_logistic(cg_plan *P, LLVMValueRef x);

/* ---- cpu_wrap.c: the CPU loop nest --------------------------------------- */

/* Emits "void <name>(ptr args, i64 begin, i64 end)" calling |body| over the
 * rows [begin, end) of |k|'s output; returns the runtime's (extent,
 * unit_cost) for the step. */
void cg_cpu_wrap(cg_plan *P, const cg_kernel *k, LLVMValueRef body, const char *name,
                 int64_t *out_extent, int64_t *out_unit_cost);
/* Streaming stores (docs/codegen.md): |k| writes only function results, so
 * nothing in the step reads them back, and CG_STREAM_MIN_BYTES or more of
 * them; writing them past the cache saves reading every line before it is
 * overwritten.  True when |k|'s rows are whole 64-byte lines (rank >= 2,
 * innermost bytes a multiple of 64). */
enum { CG_STREAM_MIN_BYTES = 16 << 20 };
bool cg_kernel_streams(const cg_kernel *k);
/* cg_cpu_wrap for such a kernel: "<name>" checks that every output pointer
 * is 64-byte aligned and then calls "<name>_a", the wrapper compiled with
 * that alignment assumed and marked "kdc-nontemporal" (the runtime's JIT
 * makes its aligned vector stores non-temporal, runtime/jit.c) followed by
 * a full fence (such stores are weakly ordered), else "<name>_u", the plain
 * wrapper. */
void cg_cpu_wrap_stream(cg_plan *P, const cg_kernel *k, LLVMValueRef body, const char *name,
                        int64_t *out_extent, int64_t *out_unit_cost);

/* ---- ptx_wrap.c: the CUDA wrapper and the PTX of every kernel ------------ */

/* How kernel k runs on a GPU (docs/gpu.md, "Kernel forms"). */
typedef enum cg_gpu_kind {
  CG_GPU_ELEMENT = 0,  /* one thread per output element, the body computes it */
  CG_GPU_COLUMN = 1,   /* reduction over the leading dims: lanes split the rows */
  CG_GPU_ROW = 2,      /* reduction over the trailing dims: lanes split each row */
} cg_gpu_kind;

typedef struct cg_gpu_form {
  cg_gpu_kind kind;
  int split;           /* operand dims [0, split) | [split, rank) */
  int lo;              /* COLUMN over middle dims: the terms are dims [lo, split),
                          the outputs dims [0, lo) and [split, rank); 0 = leading */
  kdc_type x;          /* the reduce's operand */
  kdc_reduce_kind red;
  int64_t outputs, terms;  /* kept elements, reduced elements per output */
  uint32_t tile, lanes;    /* outputs per block, threads per output (powers of 2) */
  uint32_t splits;         /* blocks per tile of outputs, each folding a chunk of the
                              terms; > 1: partials in scratch, the last block combines */
  uint64_t scratch;        /* bytes: a counter per tile, then splits x outputs partials */
  uint64_t partials_at;    /* where the partials start in it (the counters rounded to 256) */
} cg_gpu_form;

/* With P->cuda_sm: chooses kernel |idx|'s GPU form (P->kform) and, for a
 * reduction form, emits its operand body "kdc_opnd_<idx>" into P->mod
 * (removed again from the CPU module by cg_ptx_emit). */
kdc_status cg_ptx_plan_kernel(cg_plan *P, const cg_kernel *k, uint32_t idx);

/* Lowers a clone of P->mod (bodies shared with the CPU wrappers, which are
 * dropped from the clone) through LLVM's NVPTX backend for sm_<sm>: one
 * PTX kernel "kdc_cuda_<k>" per kernel in its form (P->kform), libm calls
 * mapped to libdevice's __nv_* functions.  *|ptx| (malloc'd,
 * NUL-terminated) is the PTX text; |launch| receives the CUDA section
 * (docs/gpu.md: version, sm, then per kernel its entry name, thread count,
 * block size and form). */
kdc_status cg_ptx_emit(cg_plan *P, int sm, char **ptx, size_t *ptx_len, kdc_buf *launch);

/* ---- SASS in the plan (ptxas.c; docs/gpu.md) ---- */

typedef struct cg_cubin {
  int sm;                 /* the cubin's architecture (0: none) */
  uint8_t *data;          /* the ELF image (malloc'd) */
  size_t size;
  char note[96];          /* "ptxas 13.0 (V13.0.88)" */
} cg_cubin;

/* The ptxas to use (KDC_PTXAS, else $CUDA_HOME/bin, /usr/local/cuda/bin,
 * PATH) into |path|; "" with the reason in |why| when there is none or
 * KDC_PTXAS is "none" or "".  A KDC_PTXAS that is not an executable file is
 * KDC_INVALID_INPUT. */
kdc_status cg_ptxas_find(char *path, size_t n, char *why, size_t why_n);
/* Runs |ptxas| -arch=sm_<sm> on the PTX text: *|out| the cubin.  A ptxas
 * that fails is KDC_INTERNAL quoting its first error with the PTX line. */
kdc_status cg_ptxas_assemble(const char *ptxas, const char *ptx, size_t len, int sm,
                             cg_cubin *out);
/* Appends the CUDA section's version-3 tail to |launch|: u32 cubin sm (0:
 * none), str note (ptxas's version, or |why| there is no cubin), u64
 * bytes, zero padding to 64, the cubin. */
void cg_cubin_put(kdc_buf *launch, const cg_cubin *c, const char *why);

#endif
