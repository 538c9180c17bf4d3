/*
 * ir/ir.h: the kdc tensor IR and the table of contents of ir/.
 *
 * A kdc_module owns functions (predict, train_step, evaluate), a mesh and
 * the weight store.  A kdc_func is a list of nodes in topological order;
 * every node produces exactly one value whose id is the node's index
 * (STYLE.md 4: values are 32-bit ids into func-owned arrays, never pointers).
 * Everything the IR allocates lives in the module's arena and is freed with
 * the module.
 *
 * Types are static: a dtype and a shape of at most KDC_MAX_RANK dims.  The
 * cap is a deliberate departure from STYLE.md's "no fixed caps" (see
 * docs/ARCHITECTURE.md): it keeps node, attribute and sharding records
 * flat; an input of higher rank is a located error, never a truncation.
 *
 * Elementwise ops take operands of identical shape: broadcasting is always
 * an explicit broadcast_in_dim (StableHLO style), so every backend sees the
 * same index arithmetic.
 */
#ifndef KDC_IR_H
#define KDC_IR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "kdc/arena.h"
#include "kdc/status.h"
#include "kdc/strindex.h"

enum { KDC_MAX_RANK = 8, KDC_MAX_MESH_AXES = 8, KDC_MAX_AXES_PER_DIM = 4 };

typedef uint32_t kdc_value_id;
#define KDC_NO_VALUE ((kdc_value_id)0xffffffffu)

/* ---- types (ir/type.c) ---------------------------------------------------- */

typedef enum kdc_dtype {
  KDC_DTYPE_F32,
  KDC_DTYPE_I32,
  KDC_DTYPE_I64,
  KDC_DTYPE_BOOL, /* one byte per element, 0 or 1 */
  KDC_DTYPE_BF16, /* bfloat16 storage: computed in f32, rounded on every store (RNE) */
  KDC_DTYPE_F16,  /* IEEE half storage: the same */
  KDC_DTYPE_COUNT
} kdc_dtype;

typedef struct kdc_type {
  kdc_dtype dtype;
  int rank;
  int64_t dims[KDC_MAX_RANK];
} kdc_type;

const char *kdc_dtype_name(kdc_dtype d);       /* "f32", "i32", "i64", "bool", "bf16", "f16" */
/* f32, bf16 or f16: the floating types.  The 16-bit ones are storage types:
 * every op reads them widened to f32 (exact), computes in f32 and rounds its
 * result to the 16-bit type (round to nearest even; sums and dots accumulate
 * in f32 and round once), so "bf16 math" is f32 math rounded per node. */
bool kdc_dtype_is_float(kdc_dtype d);
bool kdc_dtype_is_half(kdc_dtype d);           /* bf16 or f16 */
/* Element |i| of a float buffer of dtype |d| (f32, bf16, f16) as f32, and
 * the store of |v| rounded to |d|. */
float kdc_float_load(const void *p, kdc_dtype d, int64_t i);
void kdc_float_store(void *p, kdc_dtype d, int64_t i, float v);
/* |v| rounded to |d| and widened back (v itself for f32). */
float kdc_float_round(kdc_dtype d, float v);
size_t kdc_dtype_size(kdc_dtype d);            /* bytes per element */
bool kdc_dtype_from_name(const char *s, kdc_dtype *out);
int64_t kdc_type_numel(const kdc_type *t);     /* 1 for rank 0 */
size_t kdc_type_bytes(const kdc_type *t);
/* The builder refuses a value type of more bytes (ir/builder.c), so sizes
 * and sums of a few of them stay within int64. */
#define KDC_MAX_TENSOR_BYTES ((int64_t)1 << 62)
bool kdc_type_equal(const kdc_type *a, const kdc_type *b);
kdc_type kdc_type_make(kdc_dtype d, int rank, const int64_t *dims);
/* Writes "f32[16,784]" into |buf| (always NUL-terminated); returns buf. */
char *kdc_type_str(const kdc_type *t, char *buf, size_t n);
/* Row-major strides in elements. */
void kdc_type_strides(const kdc_type *t, int64_t *out_strides);

/* ---- mesh and sharding (ir/sharding.c) ------------------------------------ */

/* The device mesh: named axes, row-major device order (KERAS.md 1.1). */
typedef struct kdc_mesh {
  int naxes;                                  /* 0: no mesh (one device) */
  char names[KDC_MAX_MESH_AXES][32];
  int64_t sizes[KDC_MAX_MESH_AXES];
} kdc_mesh;

int64_t kdc_mesh_devices(const kdc_mesh *m);  /* product of sizes, 1 if none */
int kdc_mesh_axis_index(const kdc_mesh *m, const char *name); /* -1 if absent */
/* Checks |m|: at most KDC_MAX_MESH_AXES axes, names unique identifiers
 * ([A-Za-z_][A-Za-z0-9_]*, < 32 bytes), sizes >= 1. */
kdc_status kdc_mesh_check(const kdc_mesh *m);

/*
 * A sharding (SHARDING.md 8a): per tensor dim the ordered mesh axes (major to
 * minor) that split it, plus the axes over which the value is an unreduced
 * partial sum.  |present| false means "not yet decided" (before seeding).
 */
typedef struct kdc_sharding {
  bool present;
  uint8_t rank;
  uint8_t naxes[KDC_MAX_RANK];
  uint8_t axes[KDC_MAX_RANK][KDC_MAX_AXES_PER_DIM];
  uint8_t open_mask;      /* bit d: dim d may still gain axes */
  uint16_t replicated;    /* explicitly replicated axes (bit per mesh axis) */
  uint16_t partial;       /* unreduced axes (bit per mesh axis), op is sum */
  uint32_t origin;        /* index into the module's provenance table, 0 = none */
} kdc_sharding;

/* The text of a sharding (SHARDING.md 7), e.g. `{data,-}`,
 * `{(data,model)?,?} replicated(x) partial(sum: model) prov=3`: per dim `-`
 * (closed, unsplit), `?` (open, unsplit), `a` or `(a,b)` major to minor, a
 * trailing `?` marks an open dim.  Writes into |buf| (always NUL-terminated,
 * truncated if |n| is short; 2048 bytes always suffice); returns |buf|.
 * Axis indices outside |m| print as `<axisN>` (the verifier rejects them). */
char *kdc_sharding_str(const kdc_mesh *m, const kdc_sharding *s, char *buf, size_t n);
/* Parses one sharding at |text| (which starts at `{`) with axis names from
 * |m|; sets *|out_end| to the first byte after it.  On error returns a
 * KDC_INVALID_INPUT status whose message is the bare complaint ("expected
 * ...") and sets *|out_end| to the offending byte, so callers can add their
 * own file:line:col. */
kdc_status kdc_sharding_parse(const char *text, const kdc_mesh *m, kdc_sharding *out,
                              const char **out_end);

/* ---- ops (ir/ops.def, ir/op.c) ------------------------------------------- */

enum {
  OPF_EW = 1 << 0,    /* elementwise */
  OPF_UN = 1 << 1,    /* elementwise unary */
  OPF_BIN = 1 << 2,   /* elementwise binary */
  OPF_TER = 1 << 3,   /* elementwise ternary (select) */
  OPF_RED = 1 << 4,   /* reduction */
  OPF_COLL = 1 << 5,  /* collective */
  OPF_LEAF = 1 << 6,  /* no operands */
  OPF_SHAPE = 1 << 7, /* pure data movement */
  OPF_BODY = 1 << 8,  /* calls a body function of the module (scan): never folded,
                         fused or merged */
};

typedef enum kdc_op {
#define X(e, name, arity, flags) KDC_OP_##e,
#include "ir/ops.def"
#undef X
  KDC_OP_COUNT
} kdc_op;

const char *kdc_op_name(kdc_op op);
int kdc_op_arity(kdc_op op);                 /* -1 variadic */
unsigned kdc_op_flags(kdc_op op);
bool kdc_op_from_name(const char *s, kdc_op *out);

/* ---- attributes: one typed struct per op family (STYLE.md anti-pattern 2) - */

typedef struct kdc_dimlist {
  int n;
  int64_t v[KDC_MAX_RANK];
} kdc_dimlist;

typedef enum kdc_param_kind {
  KDC_PARAM_INPUT,  /* model input (data), batch-major */
  KDC_PARAM_LABEL,  /* training targets */
  KDC_PARAM_WEIGHT, /* a model variable, named by its Keras path */
  KDC_PARAM_STATE,  /* optimizer slot or step counter */
} kdc_param_kind;

typedef struct kdc_attr_param {
  int index;           /* position in the function's parameter list */
  kdc_param_kind kind;
  const char *name;    /* Keras variable path or input layer name */
  bool gate_packed;    /* a recurrent weight kept per gate, [.., G, u], whose Keras (and
                          checkpoint) form is [.., G*u]: the last two dims merged
                          (frontend/lower_rnn.c); its optimizer slots too */
} kdc_attr_param;

typedef struct kdc_attr_const {
  bool splat;          /* one element repeated over the whole shape */
  void *data;          /* numel (or 1 if splat) elements of the dtype */
} kdc_attr_const;

typedef enum kdc_cmp { KDC_CMP_EQ, KDC_CMP_NE, KDC_CMP_LT, KDC_CMP_LE, KDC_CMP_GT, KDC_CMP_GE } kdc_cmp;
typedef enum kdc_reduce_kind { KDC_RED_SUM, KDC_RED_MAX, KDC_RED_MIN, KDC_RED_PROD } kdc_reduce_kind;

typedef struct kdc_attr_dot {
  kdc_dimlist lhs_batch, rhs_batch, lhs_contract, rhs_contract;
  int64_t bf16_operands; /* 1: each f32 operand element is rounded to bf16 (nearest even)
                            before the products (a widened bf16 dot, passes/widen_dots.c:
                            the GEMM rounds as it packs); 0: the operands as they are */
} kdc_attr_dot;

typedef struct kdc_attr_slice {
  kdc_dimlist start, limit, stride;
} kdc_attr_slice;

typedef struct kdc_attr_pad {
  kdc_dimlist low, high, interior;
} kdc_attr_pad;

/* SPMD ops (ops.def): mesh axes major to minor, plus the dims they act on.
 * Text form (ir/print.c): the axes as a prefix list of names, the rest as
 * keywords:
 *   all_reduce [model] %x
 *   all_gather [data,model] %x dim=0        reduce_scatter [model] %x dim=1
 *   all_to_all [model] %x split=0 concat=1  collective_permute [data] %x shift=1
 *   shard_slice [model] %x dim=1            sharding_constraint %x (no attributes) */
typedef struct kdc_attr_coll {
  int naxes;
  uint8_t axes[KDC_MAX_MESH_AXES]; /* mesh axis indices, major to minor, distinct */
  int64_t dim;    /* all_gather, reduce_scatter, shard_slice: the dim; all_to_all: split dim */
  int64_t dim2;   /* all_to_all: the concat dim */
  int64_t shift;  /* collective_permute: receive from coordinate c - shift (naxes == 1) */
} kdc_attr_coll;

/* convolution (ir/window.c), channels-last dimension numbers fixed:
 * lhs [N, S_0..S_{n-1}, Ci], rhs [K_0..K_{n-1}, Ci/groups, Co],
 * result [N, O_0..O_{n-1}, Co]; one list entry per spatial dim.
 * Text: `convolution %x, %w stride=[1,1] pad_low=[1,1] pad_high=[1,1]
 * lhs_dilation=[1,1] rhs_dilation=[1,1] groups=1 : f32[...]`. */
typedef struct kdc_attr_conv {
  kdc_dimlist stride;       /* window step in the (dilated, padded) input */
  kdc_dimlist pad_low;      /* may be negative (cropping) */
  kdc_dimlist pad_high;
  kdc_dimlist lhs_dilation; /* input dilation (transposed conv, gradients) */
  kdc_dimlist rhs_dilation; /* kernel dilation (Keras dilation_rate) */
  int64_t groups;           /* feature_group_count: Ci and Co divisible by it */
} kdc_attr_conv;

/* reduce_window, select_and_scatter: one list entry per operand dim.
 * Text: `reduce_window max %x window=[1,2,2,1] stride=[1,2,2,1]
 * pad_low=[0,0,0,0] pad_high=[0,1,1,0] dilation=[1,1,1,1] : f32[...]`. */
typedef struct kdc_attr_window {
  kdc_reduce_kind kind;     /* sum, max, min (select_and_scatter: max or min) */
  kdc_dimlist window, stride, pad_low, pad_high, dilation;
} kdc_attr_window;

/* scan (ir/scan.c): runs the module function |body| |length| times, in the
 * style of jax.lax.scan.  Operands: |n_carry| initial carries, |n_xs|
 * sequences (time-major, [length, ...]: step t reads x[t]), then loop-
 * invariant operands (weights).  The body takes (carries, x_t.., consts..)
 * and returns (carries'.., y_t); the result is every y_t stacked,
 * [length, ...y].  Final carries are not a result: a body that needs them
 * outside returns them inside y_t.  Text:
 * `scan @lstm.body %h0, %c0, %xs, %w length=10 carries=2 xs=1 : f32[10,4,8]`. */
typedef struct kdc_attr_scan {
  const char *body;         /* the body function's name (arena) */
  int64_t length, n_carry, n_xs;
} kdc_attr_scan;

typedef union kdc_attrs {
  kdc_attr_param param;     /* PARAMETER */
  kdc_attr_const constant;  /* CONSTANT */
  int64_t dim;              /* IOTA, CONCAT */
  kdc_cmp cmp;              /* COMPARE */
  kdc_dimlist dims;         /* BROADCAST (operand dim -> result dim), TRANSPOSE (perm), REVERSE */
  struct { kdc_reduce_kind kind; kdc_dimlist dims; } reduce; /* REDUCE */
  kdc_attr_dot dot;         /* DOT */
  kdc_attr_slice slice;     /* SLICE */
  kdc_attr_pad pad;         /* PAD */
  kdc_attr_coll coll;       /* ALL_REDUCE .. SHARD_SLICE */
  int64_t seed;             /* RNG_UNIFORM: the Philox key */
  kdc_attr_conv conv;       /* CONVOLUTION */
  kdc_attr_window window;   /* REDUCE_WINDOW, SELECT_AND_SCATTER */
  kdc_attr_scan scan;       /* SCAN */
} kdc_attrs;

/* Names of the enum attributes in the text form (ir/print.c): "lt", "sum",
 * "weight"; "?" when out of range.  *_from_name return false if unknown. */
const char *kdc_cmp_name(kdc_cmp c);
bool kdc_cmp_from_name(const char *s, kdc_cmp *out);
const char *kdc_reduce_kind_name(kdc_reduce_kind k);
bool kdc_reduce_kind_from_name(const char *s, kdc_reduce_kind *out);
const char *kdc_param_kind_name(kdc_param_kind k);
bool kdc_param_kind_from_name(const char *s, kdc_param_kind *out);

/* Keyword attributes of the text form (ir/print.c), `kw=[1,2]` or `kw=3`,
 * printed and parsed in table order; |offset| locates the kdc_dimlist (or
 * int64_t when |scalar|) inside kdc_attrs.  Optional ones are printed only
 * when non-empty. */
typedef struct kdc_attr_kw {
  kdc_op op;
  const char *kw;
  size_t offset;
  bool scalar;
  bool optional;
} kdc_attr_kw;
extern const kdc_attr_kw kdc_ir_attr_kws[];
extern const size_t kdc_ir_n_attr_kws;

/* ---- nodes, functions, modules (ir/module.c) ------------------------------ */

/* The most nodes passes/fuse.c puts in one fusion group (one kernel): it
 * starts a new kernel when a group is full.  A performance choice, not a
 * safety bound: LLVM's time per kernel grows faster than linearly with the
 * size of one basic block (docs/codegen.md).  Codegen takes larger groups
 * (from IR text): its walk over a kernel has an explicit stack. */
#define KDC_GROUP_MAX_MEMBERS 256

/* The most distinct buffers one kernel reads (its output is one more):
 * the generated kernel's argument array (codegen/lower.c).  passes/fuse.c
 * starts a new kernel before a group would read more, and a pass that
 * builds one node with many operands (passes/combine_collectives.c's
 * concatenate) keeps it within this; codegen refuses a larger kernel
 * (from IR text). */
#define KDC_KERNEL_MAX_INPUTS 63

typedef struct kdc_node {
  kdc_op op;
  kdc_type type;
  int n_in;
  kdc_value_id *in;        /* arena-owned */
  kdc_attrs attr;
  kdc_sharding sharding;
  /* Fusion contract (passes/fuse.c -> codegen/): nodes with equal |group|
   * (>= 0) form one kernel.  The group's root is its highest-id node and is
   * written to memory; every other member has all its users inside the
   * group and is recomputed per output element.  One exception, the
   * multi-output kernel: a non-root member that is a function result (and
   * has no user outside the group) is written too, by the same kernel at
   * the same index as the root, so it must have the root's dims
   * (kdc_ir_group_output).  group -1: not a kernel (PARAMETER, CONSTANT,
   * DOT = a GEMM call, RESHAPE of a materialized row-major value = an alias,
   * collectives).  A group reads at most KDC_KERNEL_MAX_INPUTS distinct
   * values from outside; fusion makes groups of at most
   * KDC_GROUP_MAX_MEMBERS members. */
  int32_t group;
  /* Memory plan (passes/plan_memory.c): byte offset of this value in the
   * device's scratch arena, -1 if not a planned temporary (parameters,
   * constants, results and aliases have their own storage). */
  int64_t mem_offset;
  const char *origin;      /* where it came from: "layer d2 (config.layers[4])"; may be NULL */
} kdc_node;

typedef struct kdc_func {
  struct kdc_module *module;
  const char *name;        /* "predict", "train_step", ... */
  kdc_node *nodes;         /* heap array, grows; node i defines value %i */
  size_t n_nodes, cap_nodes;
  kdc_value_id *params;    /* PARAMETER nodes in parameter-index order */
  size_t n_params, cap_params;
  kdc_value_id *results;
  const char **result_names; /* one per result, e.g. the output layer name */
  size_t n_results, cap_results;
  const char *cur_origin;  /* builder: origin stamped on new nodes */
  /* builder: bf16 or f16 while a mixed-precision layer is lowered: then
   * kdc_ir_dot of f32 operands converts them to it and computes the dot in
   * it (f32 accumulation, one rounding), returning its result widened to
   * f32; kdc_ir_convolution rounds its operands and result to it.  F32
   * (the default, 0): no effect. */
  kdc_dtype lowp;
  kdc_status error;        /* builder: first error (sticky), owned */
} kdc_func;

/* A forward function's result named "<r>" KDC_MASK_RESULT_SUFFIX is the
 * Keras mask of its result "<r>" (frontend/mask.c); the training builder
 * weights that output's loss with it and then drops it (docs/training.md). */
#define KDC_MASK_RESULT_SUFFIX "/_keras_mask"

/* A named weight with its host data (float32 unless dtype says otherwise). */
typedef struct kdc_weight {
  const char *name;        /* Keras 3 variable path, e.g. "d1/kernel" */
  kdc_type type;
  void *data;              /* arena-owned, kdc_type_bytes(&type) bytes; NULL = not loaded */
  bool trainable;
} kdc_weight;

/*
 * Sharding provenance (SHARDING.md 0.5): why a value is split the way it is.
 * One entry per (value, dim, axis) decision, module-wide, appended by
 * passes/seed_shardings.c (user shardings), passes/propagate_shardings.c
 * (propagation steps) and passes/partition.c (partials).  Entry 0 is unused,
 * so kdc_sharding.origin == 0 means "none"; a sharding's origin is the last
 * entry recorded for its value.  passes/sharding_explain.c prints chains.
 */
typedef enum kdc_prov_kind {
  KDC_PROV_USER,       /* a user sharding: |text| says which rule */
  KDC_PROV_PROPAGATED, /* copied from |source| through op |op| */
  KDC_PROV_PARTIAL,    /* partial over |axis| from a sharded reduction factor of |op| */
} kdc_prov_kind;

typedef struct kdc_prov {
  kdc_prov_kind kind;
  const kdc_func *func;    /* the function of |value| */
  kdc_value_id value;      /* the value explained */
  int dim;                 /* its dim (-1 for a partial axis) */
  int axis;                /* the mesh axis (-1: the whole sharding, USER entries) */
  const char *text;        /* USER: "layout_map[\"d1/kernel\"]" (arena) */
  kdc_value_id source, op; /* PROPAGATED: the tensor it came from, through op */
  int factor;              /* the op rule's factor index */
  bool backward;           /* result -> operand */
  int level, step;         /* propagation level (op priority) and step counter */
  uint32_t parent;         /* entry explaining |source|'s axis, 0 if none */
} kdc_prov;

typedef struct kdc_module {
  kdc_arena *arena;
  const char *name;        /* model name */
  kdc_func **funcs;
  size_t n_funcs, cap_funcs;
  kdc_mesh mesh;
  kdc_weight *weights;
  size_t n_weights, cap_weights;
  kdc_strindex *weight_index; /* name -> first weight of that name (add_weight keeps it) */
  kdc_prov *prov;          /* provenance table (arena-owned, entry 0 unused) */
  size_t n_prov, cap_prov;
} kdc_module;

kdc_module *kdc_ir_module_create(const char *name);
void kdc_ir_module_destroy(kdc_module *m);
kdc_func *kdc_ir_func_create(kdc_module *m, const char *name);
/* Removes |f| from |m| and frees it (no scan may name it). */
void kdc_ir_func_remove(kdc_module *m, kdc_func *f);
kdc_func *kdc_ir_module_find_func(const kdc_module *m, const char *name);
/* Adds a weight (data copied into the arena when non-NULL). */
kdc_weight *kdc_ir_module_add_weight(kdc_module *m, const char *name,
                                     const kdc_type *t, const void *data);
kdc_weight *kdc_ir_module_find_weight(const kdc_module *m, const char *name);

static inline kdc_node *kdc_ir_node(const kdc_func *f, kdc_value_id v) { return &f->nodes[v]; }
static inline const kdc_type *kdc_ir_type(const kdc_func *f, kdc_value_id v) { return &f->nodes[v].type; }

/* Appends a raw node (used by the parser and passes); operands are copied.
 * No type checking: run kdc_ir_verify afterwards. */
kdc_value_id kdc_ir_append(kdc_func *f, kdc_op op, const kdc_type *t, int n_in,
                           const kdc_value_id *in, const kdc_attrs *attr);
void kdc_ir_add_result(kdc_func *f, kdc_value_id v, const char *name);
/* Counts uses of every value (results count as uses); out has n_nodes slots. */
void kdc_ir_count_uses(const kdc_func *f, uint32_t *out_uses);

/* ---- builder (ir/builder.c) ----------------------------------------------
 * Type-inferring constructors.  On a type error they record the first error
 * in f->error (sticky) and return KDC_NO_VALUE; later calls with
 * KDC_NO_VALUE operands are no-ops.  The frontend checks
 * kdc_ir_take_error(f) after each layer and adds the layer's location.
 * New nodes get f->cur_origin as their origin. */

void kdc_ir_set_origin(kdc_func *f, const char *origin);
kdc_status kdc_ir_take_error(kdc_func *f);   /* caller owns; resets f->error */

kdc_value_id kdc_ir_parameter(kdc_func *f, kdc_param_kind kind, const char *name,
                              const kdc_type *t);
kdc_value_id kdc_ir_constant(kdc_func *f, const kdc_type *t, const void *data);
kdc_value_id kdc_ir_splat(kdc_func *f, kdc_dtype d, int rank, const int64_t *dims, double v);
kdc_value_id kdc_ir_scalar(kdc_func *f, kdc_dtype d, double v); /* rank 0 */
kdc_value_id kdc_ir_iota(kdc_func *f, const kdc_type *t, int64_t dim);
kdc_value_id kdc_ir_unary(kdc_func *f, kdc_op op, kdc_value_id x);
kdc_value_id kdc_ir_convert(kdc_func *f, kdc_value_id x, kdc_dtype to);
kdc_value_id kdc_ir_binary(kdc_func *f, kdc_op op, kdc_value_id a, kdc_value_id b);
kdc_value_id kdc_ir_compare(kdc_func *f, kdc_cmp cmp, kdc_value_id a, kdc_value_id b);
kdc_value_id kdc_ir_select(kdc_func *f, kdc_value_id p, kdc_value_id a, kdc_value_id b);
/* result dims |dims| (rank |rank|); operand dim i maps to result dim map[i]. */
kdc_value_id kdc_ir_broadcast(kdc_func *f, kdc_value_id x, int rank, const int64_t *dims,
                              const int64_t *map);
kdc_value_id kdc_ir_reshape(kdc_func *f, kdc_value_id x, int rank, const int64_t *dims);
kdc_value_id kdc_ir_transpose(kdc_func *f, kdc_value_id x, const int64_t *perm);
kdc_value_id kdc_ir_slice(kdc_func *f, kdc_value_id x, const int64_t *start,
                          const int64_t *limit, const int64_t *stride);
kdc_value_id kdc_ir_concat(kdc_func *f, int n, const kdc_value_id *xs, int64_t dim);
kdc_value_id kdc_ir_pad(kdc_func *f, kdc_value_id x, kdc_value_id padv, const int64_t *low,
                        const int64_t *high, const int64_t *interior);
kdc_value_id kdc_ir_reduce(kdc_func *f, kdc_reduce_kind kind, kdc_value_id x, int n_dims,
                           const int64_t *dims);
kdc_value_id kdc_ir_dot(kdc_func *f, kdc_value_id a, kdc_value_id b, const kdc_attr_dot *d);
/* f32 uniform [0,1) numbers of shape |dims| keyed by |seed| and the integer
 * scalar |step| (ir/interp.c kdc_rng_uniform_at gives element i). */
kdc_value_id kdc_ir_rng_uniform(kdc_func *f, kdc_value_id step, int64_t seed, int rank,
                                const int64_t *dims);

/* Convenience built from the above (ir/builder.c). */
/* numpy-style broadcast of |x| to |t|'s shape (trailing-aligned). */
kdc_value_id kdc_ir_broadcast_to(kdc_func *f, kdc_value_id x, int rank, const int64_t *dims);
/* Binary op with numpy broadcasting of both operands; scalar operands allowed. */
kdc_value_id kdc_ir_binary_bcast(kdc_func *f, kdc_op op, kdc_value_id a, kdc_value_id b);
/* x op scalar constant (x's dtype). */
kdc_value_id kdc_ir_binary_scalar(kdc_func *f, kdc_op op, kdc_value_id x, double s);
/* An f32 |x| rounded to the bf16/f16 type |d| and widened back (x itself
 * for any other dtype or |d|). */
kdc_value_id kdc_ir_round_to(kdc_func *f, kdc_value_id x, kdc_dtype d);
/* Plain matmul of [.., M, K] x [K, N] -> [.., M, N] (contract last with first). */
kdc_value_id kdc_ir_matmul(kdc_func *f, kdc_value_id a, kdc_value_id b);

/* ---- shape inference (ir/shape.c) ----------------------------------------
 * The result type of |op| over operand types, or an error naming what is
 * wrong.  For ops whose result type is given (BROADCAST, RESHAPE, CONSTANT,
 * PARAMETER, IOTA, CONVERT) |out| must hold it on entry and is checked. */
kdc_status kdc_ir_infer_type(kdc_op op, int n_in, const kdc_type *in, const kdc_attrs *attr,
                             kdc_type *out);

/* ---- windowed and indexed ops (ir/window.c) --------------------------------
 * Shapes (called by kdc_ir_infer_type) and builders of convolution,
 * reduce_window, select_and_scatter, gather, scatter_add and reverse.
 *   convolution: O_d = floor((Sd_d + lo_d + hi_d - Kd_d) / stride_d) + 1 with
 *     Sd = (S-1)*lhs_dilation + 1 and Kd = (K-1)*rhs_dilation + 1 (>= 1 needed).
 *   reduce_window / select_and_scatter: the same per operand dim with window
 *     W, dilation for the window and no input dilation.
 *   gather(table [V, F..], ids [I..] i32/i64) -> [I.., F..].
 *   scatter_add(ids [I..], updates [I.., F..]) -> given type [V, F..].
 * Builder versions follow the kdc_ir_* conventions (sticky errors). */
kdc_status kdc_ir_infer_window_op(kdc_op op, int n_in, const kdc_type *in, const kdc_attrs *attr,
                                  kdc_type *out);
/* An all-default conv attribute for |n| spatial dims: stride 1, no padding,
 * no dilation, groups 1. */
void kdc_attr_conv_init(kdc_attr_conv *a, int n);
/* An all-default window attribute for rank |r| (window 1 everywhere). */
void kdc_attr_window_init(kdc_attr_window *a, kdc_reduce_kind kind, int r);
kdc_value_id kdc_ir_convolution(kdc_func *f, kdc_value_id x, kdc_value_id w,
                                const kdc_attr_conv *a);
kdc_value_id kdc_ir_reduce_window(kdc_func *f, kdc_value_id x, const kdc_attr_window *a);
kdc_value_id kdc_ir_select_and_scatter(kdc_func *f, kdc_value_id x, kdc_value_id g,
                                       const kdc_attr_window *a);
kdc_value_id kdc_ir_gather(kdc_func *f, kdc_value_id table, kdc_value_id ids);
kdc_value_id kdc_ir_scatter_add(kdc_func *f, kdc_value_id ids, kdc_value_id updates,
                                const kdc_type *out);
kdc_value_id kdc_ir_reverse(kdc_func *f, kdc_value_id x, int n, const int64_t *dims);

/* ---- scan (ir/scan.c) -------------------------------------------------------
 * The body of scan node |v| of |f| (looked up by name in f's module), or
 * NULL. */
const kdc_func *kdc_ir_scan_body(const kdc_func *f, kdc_value_id v);
/* True when some scan of |m| names |f| as its body (bodies are not entry
 * functions: codegen emits them only inside their scan's loop). */
bool kdc_ir_func_is_body(const kdc_module *m, const kdc_func *f);
/* Checks scan node |v| against its body (called by the verifier): the body
 * exists, is not |f|, holds no scan itself, takes n_in parameters and returns
 * n_carry + 1 results; carry operand, body parameter and body result types
 * agree; xs are [length, param type]; the result is [length, y type]. */
kdc_status kdc_ir_scan_check(const kdc_func *f, kdc_value_id v);
/* Builder: scan of |body| over |n_in| operands (carries, xs, consts). */
kdc_value_id kdc_ir_scan(kdc_func *f, const kdc_func *body, int64_t length, int n_carry,
                         int n_xs, int n_in, const kdc_value_id *in);
/* Reference meaning of scan node |v| (operand buffers |vals|, result |out|):
 * the body run by the reference interpreter once per step. */
kdc_status kdc_ir_interp_scan(const kdc_func *f, kdc_value_id v, void *const *vals, void *out);

/* ---- verifier (ir/verify.c) ---------------------------------------------- */
/* Checks SSA order, arities, attribute ranges and types of every node. */
kdc_status kdc_ir_verify(const kdc_func *f);
kdc_status kdc_ir_verify_module(const kdc_module *m);

/* True when |v| is a non-root member of a fusion group that the group's
 * kernel also writes (a function result inside the group; see the fusion
 * contract at kdc_node.group).  |root| is the group's root. */
bool kdc_ir_group_output(const kdc_func *f, kdc_value_id v, kdc_value_id root);
/* The members of every fusion group, in increasing id order: group g's are
 * member[start[g] .. start[g + 1]).  Lets a pass visit one kernel's nodes
 * without sweeping the whole function (linear, not quadratic, over all
 * kernels). */
typedef struct kdc_group_members {
  int32_t n_groups;        /* highest group id + 1 */
  uint32_t *start;         /* n_groups + 1 entries */
  kdc_value_id *member;
} kdc_group_members;
void kdc_ir_group_members_init(kdc_group_members *gm, const kdc_func *f);
void kdc_ir_group_members_free(kdc_group_members *gm);

/* ---- text form (ir/print.c, ir/parse.c) ----------------------------------- */
/* The canonical text: stable, parseable, round-trips (print∘parse∘print = print). */
void kdc_ir_print_func(FILE *out, const kdc_func *f);
void kdc_ir_print_module(FILE *out, const kdc_module *m);
char *kdc_ir_module_to_string(const kdc_module *m); /* malloc'd */
void kdc_ir_print_sharding(FILE *out, const kdc_module *m, const kdc_sharding *s);
/* Parses module text; |filename| names the source in errors ("file:line:col: ..."). */
kdc_status kdc_ir_parse_module(const char *text, const char *filename, kdc_module **out);

/* ---- kdc's f32 exp, expm1, tanh, logistic (ir/math.c) --------------------
 * Written with basic IEEE operations and fused multiply-adds (one rounding:
 * fmaf, llvm.fma) in a fixed order so that codegen/math_ir.c can emit the
 * same sequence (vectorisable, and bitwise equal to these); the
 * interpreter, folding and every backend use them instead of libm (exp,
 * expm1 <= 2 ulp, tanh, logistic <= 3 ulp; file comment). */
#define KDC_MATH_LOG2E 1.44269504088896341f
#define KDC_MATH_LN2_HI 0x1.62e43p-1f           /* ln 2 rounded to f32 */
#define KDC_MATH_LN2_LO -0x1.05c61p-29f         /* ln 2 - LN2_HI rounded */
#define KDC_MATH_C2 0.5f                        /* minimax on |r| <= ln2/2 (C2 fixed): */
#define KDC_MATH_C3 0x1.5554a2p-3f              /* e^r = 1 + r + r^2 (C2 + C3 r + ... + */
#define KDC_MATH_C4 0x1.55568p-5f               /* C6 r^4) within 0.07 of 2^-24 relative */
#define KDC_MATH_C5 0x1.123076p-7f
#define KDC_MATH_C6 0x1.6b792ep-10f
#define KDC_MATH_EXP_HI 0x1.62e42ep+6f          /* 88.72283: the largest x with e^x finite */
#define KDC_MATH_EXP_LO -87.33654f              /* below: 0 (under FLT_MIN) */
#define KDC_MATH_EXPM1_BIG 40.0f                /* above: exp(x) (the -1 is lost) */
#define KDC_MATH_EXPM1_LO -17.5f                /* below: -1 */
#define KDC_MATH_TANH_ONE 9.1f                  /* above: tanh rounds to 1 */
float kdc_math_expf(float x);
float kdc_math_expm1f(float x);
float kdc_math_tanhf(float x);
float kdc_math_logisticf(float x);

/* ---- reference interpreter (ir/interp.c) ----------------------------------
 * Evaluates |f| on the host, slowly and obviously correctly (double-precision
 * accumulation is NOT used: f32 math in program order, sums in index order).
 * |args| holds one buffer per parameter, in parameter-index order; weights
 * parameters may be NULL to take the module's weight data by name.
 * Results are malloc'd buffers the caller frees. */
typedef struct kdc_tensor {
  kdc_type type;
  void *data;
} kdc_tensor;

kdc_status kdc_ir_interpret(const kdc_func *f, const kdc_tensor *args, size_t n_args,
                            kdc_tensor *out_results /* f->n_results */);
/* rng_uniform's definition (every backend must match it bit for bit):
 * Philox-4x32-10 (Salmon et al. 2011, Random123) of counter |ctr| and key
 * |key|; element |index| of rng_uniform(step, seed) is
 * (out[0] >> 8) * 2^-24 for ctr = (lo32 index, hi32 index, lo32 step,
 * hi32 step), key = (lo32 seed, hi32 seed). */
void kdc_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]);
float kdc_rng_uniform_at(int64_t seed, int64_t step, int64_t index);
/* For ir/interp_spmd.c: evaluates node |v| of |f| (not a PARAMETER, not an
 * SPMD op other than sharding_constraint) from the operand buffers in
 * |vals| (indexed by value id) into a new malloc'd buffer *|out|, in the
 * caller's floating-point mode (kdc_ir_interpret_spmd sets kdc's). */
kdc_status kdc_ir_interp_node(const kdc_func *f, kdc_value_id v, void *const *vals, void **out);
/* ir/interp_window.c: node |v| (convolution, reduce_window,
 * select_and_scatter, gather, scatter_add, reverse) from operand buffers
 * |vals| into |out| (its type's size). */
kdc_status kdc_ir_interp_window(const kdc_func *f, kdc_value_id v, void *const *vals, void *out);
/* Keras-on-JAX index rule of gather/scatter_add (jnp.take, mode "fill"): id
 * in [-V, 0) wraps to id + V; the result is in [0, V), or -1 when out of
 * range (gather: a NaN row; scatter_add: dropped). */
static inline int64_t kdc_gather_index(int64_t id, int64_t V) {
  if (id < 0) id += V;
  return id >= 0 && id < V ? id : -1;
}

/* ---- provenance table (ir/prov.c) ------------------------------------------ */
/* Appends |e| (copied; |e->text| copied into the arena); returns its index
 * (>= 1). */
uint32_t kdc_ir_prov_add(kdc_module *m, const kdc_prov *e);
/* A USER entry for the whole sharding of |v| with the text |text|. */
uint32_t kdc_ir_prov_add_user(kdc_module *m, const kdc_func *f, kdc_value_id v,
                              const char *text);
/* The last entry about (|f|, |v|, |dim|, |axis|) (dim -1 = partial), or the
 * value's USER entry, or 0. */
uint32_t kdc_ir_prov_find(const kdc_module *m, const kdc_func *f, kdc_value_id v, int dim,
                          int axis);

/* ---- SPMD helpers (ir/spmd.c) ----------------------------------------------
 * Devices are numbered row-major over the mesh: coordinates =
 * unravel(device id, mesh sizes).  A set of axes (major to minor) splits the
 * mesh into groups: the devices that agree on every other coordinate; inside
 * a group a device's index is its coordinates on the axes read as a
 * mixed-radix number, major first. */
void kdc_mesh_coords(const kdc_mesh *m, int64_t device, int64_t *out_coords);
/* Product of the sizes of |axes|. */
int64_t kdc_mesh_axes_size(const kdc_mesh *m, int n, const uint8_t *axes);
/* The group index of |device| over |axes|. */
int64_t kdc_mesh_group_index(const kdc_mesh *m, int64_t device, int n, const uint8_t *axes);
/* The device ids of |device|'s group over |axes|, in group-index order, into
 * |out| (kdc_mesh_axes_size entries). */
void kdc_mesh_group_members(const kdc_mesh *m, int64_t device, int n, const uint8_t *axes,
                            int64_t *out);
/* "[[0,1,2,3],[4,5,6,7]]": every group over |axes|, each in group-index
 * order, groups ordered by their smallest device id. */
char *kdc_mesh_groups_str(const kdc_mesh *m, int n, const uint8_t *axes, char *buf, size_t len);
/* Bit mask of the axes splitting a dim, and of all split axes. */
unsigned kdc_sharding_dim_mask(const kdc_sharding *s, int dim);
unsigned kdc_sharding_used_mask(const kdc_sharding *s);
/* Shards of dim |dim| (product of its axis sizes). */
int64_t kdc_sharding_dim_shards(const kdc_mesh *m, const kdc_sharding *s, int dim);
/* The local (per-device) type of a value of global type |global| with
 * sharding |s|: each dim divided by its shard count.  An indivisible dim is a
 * KDC_INVALID_INPUT error naming the dim, its size and the axes; callers add
 * the location. */
kdc_status kdc_sharding_local_type(const kdc_mesh *m, const kdc_sharding *s,
                                   const kdc_type *global, kdc_type *out_local);
/* The global type of value |v| of |f| (a partitioned function declares local
 * types: each dim times its shard count under the value's sharding; the
 * type itself before partitioning or without a mesh). */
kdc_type kdc_value_global_type(const kdc_module *m, const kdc_func *f, kdc_value_id v);
/* True when |a| and |b| split every dim by the same axes and have the same
 * partial axes (open marks, replicated sets and provenance ignored). */
bool kdc_sharding_same_split(const kdc_sharding *a, const kdc_sharding *b);
/* The replicated sharding of rank |rank| (present, all dims closed). */
kdc_sharding kdc_sharding_replicated(int rank);

/* ---- SPMD interpreter (ir/interp_spmd.c) -----------------------------------
 * Runs a partitioned function |f| (local types, collectives) on every device
 * of |mesh| in lockstep: node by node, each device evaluates its node with
 * the reference interpreter's semantics; an SPMD op is evaluated for all
 * devices at once with the semantics of ops.def, sums in increasing device-id
 * order.  |args_per_device[d]| holds f->n_params local tensors for device d
 * (weight parameters may have NULL data: the device's piece of the module's
 * global weight, per the parameter's sharding, is used).
 * |out_results_per_device[d]| is a caller-provided array of f->n_results
 * tensors that receive malloc'd data (freed by the caller).  The oracle for
 * partitioning and for the runtime's collectives. */
kdc_status kdc_ir_interpret_spmd(const kdc_func *f, const kdc_mesh *mesh,
                                 const kdc_tensor *const *args_per_device,
                                 kdc_tensor **out_results_per_device);
/* The piece of the global tensor |global| that |device| holds under
 * |s| (partial axes ignored: every device gets its piece); out->data is
 * malloc'd. */
kdc_status kdc_sharding_shard(const kdc_mesh *m, const kdc_sharding *s, const kdc_tensor *global,
                              int64_t device, kdc_tensor *out_local);
/* The global tensor of type |global_type| assembled from one local piece per
 * device (|locals|[device]) under |s|: pieces are placed by their shard
 * position; over partial axes the pieces are summed in device order (and
 * only the first replica of each piece is used otherwise).  out->data is
 * malloc'd. */
kdc_status kdc_sharding_unshard(const kdc_mesh *m, const kdc_sharding *s,
                                const kdc_type *global_type, const kdc_tensor *locals,
                                kdc_tensor *out_global);

#endif
