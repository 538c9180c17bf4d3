/*
 * passes/passes.h: IR -> IR transformations and the table of contents of
 * passes/ (STYLE.md 2).  One pass per .c file; each section below is titled
 * after the file that implements it.
 *
 * A pass reads and writes the IR of a whole module and nothing else (no
 * codegen, no runtime).  It returns NULL or a status whose message names the
 * function, the value (%id), the op and the node's origin.  Passes may leave
 * a module half-rewritten on error: the caller discards it.
 *
 * Passes allocate new IR data (constants, operand arrays) in the module's
 * arena, and their own bookkeeping on the heap, freed before they return.
 */
#ifndef KDC_PASSES_H
#define KDC_PASSES_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "ir/ir.h"

/* ---- options and the pass manager (passes/pipeline.c) --------------------- */

/* Everything that changes what the passes produce is an explicit field here
 * (ARCHITECTURE anti-pattern 5: no environment variables).  Zero-initialise
 * and set what you need: zero always means "the documented default". */
typedef struct kdc_pass_options {
  const char *dump_dir;      /* --dump-ir DIR: DIR/00-input.kir, 01-verify.kir, ...; NULL = off */
  FILE *print_after_all;     /* --print-ir-after-all: IR after every pass; NULL = off */
  int64_t fold_max_elements; /* largest constant fold folds (elements); 0 = 1M */
  int fuse_max_recompute;    /* ops a cheap value may recompute per kernel; 0 = 4 (CUDA:
                              16, see fuse.c), <0 = never */
  int simplify_max_rounds;   /* simplify's fixpoint bound; 0 = 8 */
  FILE *warnings;            /* partition's warnings (full-replication fallbacks); NULL = none */
  /* Training (passes/train_step.c): when set, the build_training pass adds
   * train_step and evaluate after infer_shapes; NULL = inference only. */
  const struct kdc_train_options *train;
  /* Called after every pass (and its verification) with the pass name; tools
   * use it to capture state between passes (e.g. sharding explanations
   * before partition rewrites the function).  NULL = none. */
  void (*after_pass)(const char *pass, const kdc_module *m, void *user);
  void *after_pass_user;
  /* combine_collectives: the largest combined all_reduce (local bytes);
   * 0 = 64 KiB, < 0 = the pass does nothing. */
  int64_t combine_max_bytes;
  /* The plan's target is CUDA: bf16/f16 dot_generals stay GEMM steps of
   * their dtype (widen_dots does nothing). */
  bool cuda;
} kdc_pass_options;

/* One entry of the pipeline: a name (used in dumps and errors) and the
 * function that runs it over every function of the module. */
typedef struct kdc_pass {
  const char *name;
  kdc_status (*run)(kdc_module *m, const kdc_pass_options *opt);
} kdc_pass;

/* Runs the compile pipeline over |m| in place:
 *   verify -> infer_shapes -> simplify -> seed_shardings ->
 *   propagate_shardings -> partition -> fuse
 * (with empty slots for autodiff, seed_shardings, propagate_shardings,
 * partition and plan_memory, see pipeline.c).  After each pass the module is
 * verified; a verifier failure is KDC_INTERNAL naming the pass.  |opt| may be
 * NULL (all defaults).  Dump files that cannot be written are KDC_IO_ERROR. */
kdc_status kdc_pass_pipeline_run(kdc_module *m, const kdc_pass_options *opt);

/* Runs the comma-separated list of pass names in |names| ("dce,cse" or the
 * name of a pipeline: "pipeline") with the same verification and dump hooks.
 * An unknown name is KDC_INVALID_INPUT listing the known ones. */
kdc_status kdc_pass_run_list(kdc_module *m, const char *names, const kdc_pass_options *opt);
/* Runs |n| explicit passes (tests, tools) with the same hooks. */
kdc_status kdc_pass_run_passes(kdc_module *m, const kdc_pass *passes, size_t n,
                               const kdc_pass_options *opt);
/* Runs the single pass |name| (tests). */
kdc_status kdc_pass_run_one(kdc_module *m, const char *name, const kdc_pass_options *opt);
/* The pass named |name|, or NULL.  Lists every pass, not only the pipeline's. */
const kdc_pass *kdc_pass_find(const char *name);
/* Writes the known pass names, comma-separated, to |out|. */
void kdc_pass_print_names(FILE *out);

/* Option accessors with the defaults applied (opt may be NULL). */
int64_t kdc_pass_opt_fold_max(const kdc_pass_options *opt);
int kdc_pass_opt_fuse_recompute(const kdc_pass_options *opt);
/* The cap for values of at least 4 MiB per device (fuse.c): 16 distinct ops
 * by default (CPU and CUDA), else fuse_max_recompute's. */
int kdc_pass_opt_fuse_recompute_big(const kdc_pass_options *opt);
int kdc_pass_opt_simplify_rounds(const kdc_pass_options *opt);
int64_t kdc_pass_opt_combine_max_bytes(const kdc_pass_options *opt);

/* ---- combine_collectives (passes/combine_collectives.c) --------------------
 * After partition: merges independent all_reduces with the same axes and
 * dtype, each and together at most kdc_pass_opt_combine_max_bytes local
 * bytes, into one all_reduce of their flattened concatenation, sliced back
 * (bitwise the same results). */
kdc_status kdc_pass_combine_collectives(kdc_module *m, const kdc_pass_options *opt);

/* ---- rebuilding a function (passes/rewrite.c) ------------------------------
 * The one way passes delete, replace, reorder or insert nodes.  A pass marks
 * its decisions, appends any new nodes at the end with kdc_ir_append, then
 * calls kdc_pass_func_rebuild once:
 *   |repl| (n_nodes entries, or NULL for identity): repl[v] is the value that
 *     replaces every use of v; repl[v] == v keeps v's uses.  Chains are
 *     followed (repl[a] = b, repl[b] = c: uses of a become c).
 *   |order| (n_order old ids, or NULL for "all nodes that are their own
 *     replacement, in id order"): the nodes kept, in their new order.
 * Operands, parameter lists and results are renumbered; ids become compact.
 * Every remaining use must refer to a kept node placed earlier, and every
 * PARAMETER must be kept (the parameter list is the function's ABI): both are
 * asserted, since a pass that breaks them is a compiler bug. */
void kdc_pass_func_rebuild(kdc_func *f, const kdc_value_id *repl, const kdc_value_id *order,
                           size_t n_order);
/* A rewrite that appended, for each of the first |n_old| nodes i it
 * replaces, the new nodes first[i] .. first[i+1] (first[n_old] = the
 * function's size after them) ending in its replacement to[i]
 * (KDC_NO_VALUE: node i kept): puts each replacement's nodes in the place
 * of the node they replace and rebuilds |f| (kdc_pass_func_rebuild). */
void kdc_pass_splice(kdc_func *f, size_t n_old, const size_t *first, const kdc_value_id *to);
/* Scan bodies (passes/rewrite.c, shared by grad_scan and merge_scans):
 * appends |src|'s nodes to |dst| with its parameters bound to |args|, |map|
 * (src->n_nodes) receiving the new ids; |xs| (n values whose dim 0 is
 * |lead|, or any values when |lead| is 1) side by side as one [lead, K] row,
 * or [lead, K, F] when |F| > 1; and the piece of type |t| at column |c0| of
 * such a packed [T, lead, K(, F)] value, rows [r0, r1), reshaped to
 * [r1 - r0, dims of |t|] (|t| itself when |one_row|; columns count [F]
 * blocks when |F| > 1). */
void kdc_pass_clone_body(kdc_func *dst, const kdc_func *src, const kdc_value_id *args,
                         kdc_value_id *map);
kdc_value_id kdc_pass_pack(kdc_func *f, int n, const kdc_value_id *xs, int64_t lead, int64_t F);
kdc_value_id kdc_pass_piece(kdc_func *f, kdc_value_id r, int64_t r0, int64_t r1, int64_t c0,
                            const kdc_type *t, int64_t lead, bool one_row, int64_t F);
/* Users of every value as a CSR table: users of v are
 * users[start[v] .. start[v+1]) in increasing id order, each user listed once
 * per operand slot.  |is_result[v]| is true when v is a function result. */
typedef struct kdc_users {
  uint32_t *start;   /* n_nodes + 1 entries */
  kdc_value_id *users;
  bool *is_result;
} kdc_users;
void kdc_pass_users_init(kdc_users *u, const kdc_func *f);
void kdc_pass_users_free(kdc_users *u);
/* "func predict: %3 (exp, layer d2): " prefix for located errors, into |buf|. */
const char *kdc_pass_where(const kdc_func *f, kdc_value_id v, char *buf, size_t n);
/* True when node |v| is a constant whose every element is the same bytes. */
bool kdc_pass_is_splat(const kdc_func *f, kdc_value_id v);
/* True when node |v| is a splat constant whose value equals |x| exactly
 * (dtype-aware; -0.0 and +0.0 differ for f32). */
bool kdc_pass_is_splat_of(const kdc_func *f, kdc_value_id v, double x, bool want_neg_zero);

/* ---- verify (passes/pipeline.c) -----------------------------------------
 * The "verify" pass: kdc_ir_verify_module, as a bad-input error. */

/* ---- infer_shapes (passes/infer_shapes.c) ---------------------------------
 * Recomputes every node's type with kdc_ir_infer_type; a node whose declared
 * type differs is a located KDC_INVALID_INPUT error. */
kdc_status kdc_pass_infer_shapes(kdc_module *m, const kdc_pass_options *opt);

/* ---- dce (passes/dce.c) ----------------------------------------------------
 * Deletes nodes no result depends on; parameters always stay. */
kdc_status kdc_pass_dce(kdc_module *m, const kdc_pass_options *opt);
/* The same on one function; sets *out_changed when something was removed. */
void kdc_pass_dce_func(kdc_func *f, bool *out_changed);

/* ---- cse (passes/cse.c) ----------------------------------------------------
 * Merges nodes with the same op, attributes, operands, type and sharding;
 * constants are compared by value (bytes), parameters never merge. */
kdc_status kdc_pass_cse(kdc_module *m, const kdc_pass_options *opt);
void kdc_pass_cse_func(kdc_func *f, bool *out_changed);
/* Attribute equality for |op| (false for ops whose attributes it does not
 * know, which makes them ineligible for CSE). */
bool kdc_pass_attrs_equal(kdc_op op, const kdc_node *a, const kdc_node *b);

/* ---- fold (passes/fold.c) --------------------------------------------------
 * Constant folding: a node whose operands are all constants becomes a
 * constant, evaluated by the reference interpreter (ir/interp.c), so folding
 * can never disagree with it.  Results of at most fold_max_elements elements;
 * a result whose elements are all equal becomes a splat. */
kdc_status kdc_pass_fold(kdc_module *m, const kdc_pass_options *opt);
kdc_status kdc_pass_fold_func(kdc_func *f, const kdc_pass_options *opt, bool *out_changed);

/* ---- algebra (passes/algebra.c) --------------------------------------------
 * Identities exact in IEEE f32: x*1, x/1, x+(-0), x-(+0), neg(neg x),
 * reshape(reshape x), transpose(transpose x), and no-op reshape, transpose,
 * broadcast, convert and slice. */
kdc_status kdc_pass_algebra(kdc_module *m, const kdc_pass_options *opt);
void kdc_pass_algebra_func(kdc_func *f, bool *out_changed);

/* ---- merge_scans (passes/merge_scans.c) ------------------------------------
 * Two scans of |f| over the same operands whose bodies compute the same
 * carries become one scan whose y_t is both ys side by side (a training
 * step's forward scan and the residual scan of its gradient).  Adds the
 * merged body to the module; the old bodies stay until
 * kdc_pass_drop_dead_bodies. */
void kdc_pass_merge_scans_func(kdc_func *f, bool *out_changed);
/* Removes the functions of |m| flagged in |was_body| (the first n entries
 * of m->funcs) that no scan names any more. */
void kdc_pass_drop_dead_bodies(kdc_module *m, const bool *was_body, size_t n);

/* ---- simplify (passes/simplify.c) ------------------------------------------
 * algebra, fold, cse, dce repeated until nothing changes (bounded). */
kdc_status kdc_pass_simplify(kdc_module *m, const kdc_pass_options *opt);

/* ---- fuse (passes/fuse.c) --------------------------------------------------
 * Sets kdc_node.group per the fusion contract in ir.h (loop and input
 * fusion); may duplicate cheap values so that each kernel recomputes its own
 * copy.  kdc_pass_fuse_check verifies the contract (KDC_INTERNAL if broken). */
kdc_status kdc_pass_fuse(kdc_module *m, const kdc_pass_options *opt);
kdc_status kdc_pass_fuse_check(const kdc_func *f);

/* ---- sharding rules (passes/sharding_rules.c) -------------------------------
 * Every op's factor rule (see the file comment).  Tensors are the operands in
 * order, then the result (index ntensors - 1). */
enum { KDC_RULE_MAX_FACTORS = 40, KDC_RULE_MAX_TENSORS = 65, KDC_RULE_MAX_DIM_FACTORS = 8 };
typedef enum kdc_factor_kind {
  KDC_FACTOR_PASS,      /* split alike on every tensor that has it */
  KDC_FACTOR_REDUCTION, /* split on operands only: the result becomes partial */
  KDC_FACTOR_NEED_REPL, /* never split */
} kdc_factor_kind;
typedef struct kdc_factor_rule {
  int nfactors, ntensors;
  int64_t size[KDC_RULE_MAX_FACTORS];
  kdc_factor_kind kind[KDC_RULE_MAX_FACTORS];
  int rank[KDC_RULE_MAX_TENSORS];
  uint8_t nf[KDC_RULE_MAX_TENSORS][KDC_MAX_RANK];  /* factors of each dim */
  uint8_t f[KDC_RULE_MAX_TENSORS][KDC_MAX_RANK][KDC_RULE_MAX_DIM_FACTORS]; /* major to minor */
  bool pass_through;   /* op priority class 0/1: elementwise, transpose, constraint, pad,
                          a reshape of unit dims only */
  bool broadcast;      /* op priority: forward only at the last level */
  uint64_t halo;       /* bit f: factor f is a windowed spatial dim (conv, pool) whose
                        * split needs a halo exchange (passes/partition_halo.c) */
} kdc_factor_rule;
/* The mesh axes on each factor, major to minor. */
typedef struct kdc_factor_shardings {
  uint8_t n[KDC_RULE_MAX_FACTORS];
  uint8_t axes[KDC_RULE_MAX_FACTORS][KDC_MAX_MESH_AXES];
} kdc_factor_shardings;
/* The rule of node |v| (KDC_UNSUPPORTED beyond the caps above). */
kdc_status kdc_sharding_rule(const kdc_func *f, kdc_value_id v, kdc_factor_rule *out);
/* Whether scan |n| of |f| is an accumulator scan: every carry starts at a
 * zero splat and its body result is the carry itself or add(carry, z), no
 * carry is read elsewhere, and y_t is the carry results reshaped and
 * concatenated (the weight gradients of passes/grad_scan.c).  Its batch is
 * a reduction factor: under a batch split the carries are partial sums. */
bool kdc_scan_accumulates(const kdc_func *f, const kdc_node *n);
/* One line: `([i,k],[k,j])->([i,j]) {i=2,j=3,k=4} reduction={k}`. */
void kdc_sharding_rule_print(FILE *out, const kdc_factor_rule *r);
/* Tensor |t|'s dim shardings onto factors: each dim's axes fill its factors
 * major first (a factor must be fully split before the next gets axes, and
 * axes must divide the factor).  Returns false when some axis does not fit
 * (it is dropped). */
bool kdc_rule_project_in(const kdc_mesh *m, const kdc_factor_rule *r, int t,
                         const kdc_sharding *s, kdc_factor_shardings *out);
/* Factor shardings onto tensor |t|'s dims (naxes/axes of |out| only):
 * concatenated per dim, stopping after a factor that is not fully split. */
void kdc_rule_project_out(const kdc_mesh *m, const kdc_factor_rule *r, int t,
                          const kdc_factor_shardings *fs, kdc_sharding *out);

/* ---- seed_shardings (passes/seed_shardings.c) -------------------------------
 * Records the provenance of the user shardings the frontend attached
 * (parameters, sharding_constraint), closes parameter dims and resets every
 * other value to an open, unsplit sharding.  No-op without a mesh or on one
 * device. */
kdc_status kdc_pass_seed_shardings(kdc_module *m, const kdc_pass_options *opt);

/* ---- propagate_shardings (passes/propagate_shardings.c) ---------------------
 * Forward/backward factor propagation to a fixpoint in op-priority levels;
 * never changes closed (user) dims; records provenance per (value, dim,
 * axis).  No-op without a mesh or on one device. */
kdc_status kdc_pass_propagate_shardings(kdc_module *m, const kdc_pass_options *opt);

/* ---- partition (passes/partition.c) ------------------------------------------
 * Rewrites each function into the SPMD program: local types, reshards
 * (collectives, shard_slice) where operands disagree with an op's factor
 * sharding, partials kept through linear ops; parameters and results keep
 * their sharding (docs/sharding.md).  Full-replication fallbacks print one
 * line on opt->warnings. */
kdc_status kdc_pass_partition(kdc_module *m, const kdc_pass_options *opt);

/* ---- drop_trivial_collectives (passes/drop_trivial_collectives.c) -----------
 * After partition: all_reduce, all_gather, reduce_scatter, all_to_all and
 * shard_slice over axes whose sizes multiply to 1 (size-1 mesh axes) are the
 * identity: their uses take the operand (which takes their sharding). */
kdc_status kdc_pass_drop_trivial_collectives(kdc_module *m, const kdc_pass_options *opt);

/* ---- widen_dots (passes/widen_dots.c) -------------------------------------
 * CPU plans (before the sharding passes): every bf16/f16 dot_general
 * becomes an f32 one between converts (an f32 GEMM step), with one warning
 * naming the dtype. */
kdc_status kdc_pass_widen_dots(kdc_module *m, const kdc_pass_options *opt);

/* ---- conv_to_gemm (passes/conv_to_gemm.c) -----------------------------------
 * f32 convolutions with groups 1 and no input dilation (at most 64 kernel
 * taps) become pad + strided slices + concatenate (the im2col patch matrix,
 * one fused kernel) and one dot_general with the reshaped kernel; runs after
 * partition, on local shapes.  Exact up to f32 summation order. */
kdc_status kdc_pass_conv_to_gemm(kdc_module *m, const kdc_pass_options *opt);

/* ---- explain (passes/sharding_explain.c) -------------------------------------
 * `kdc inspect --explain`: prints |v|'s sharding and, per (dim, axis), the
 * chain of rules and ops it came from. */
kdc_status kdc_sharding_explain(const kdc_module *m, const kdc_func *f, kdc_value_id v, FILE *out);

/* ---- reshard planner (passes/reshard.c) ------------------------------------
 * The SPMD ops that turn a value's local pieces under one sharding into its
 * pieces under another (see the file comment for the order). */
enum { KDC_RESHARD_MAX_STEPS = 32 };
typedef struct kdc_reshard_step {
  kdc_op op;             /* SHARD_SLICE, ALL_REDUCE, REDUCE_SCATTER, ALL_TO_ALL or ALL_GATHER */
  kdc_attr_coll attr;    /* axes, dim (all_to_all: dim = split, dim2 = concat) */
  kdc_sharding after;    /* the value's sharding after the step (closed dims) */
  kdc_type local;        /* its local type after the step */
} kdc_reshard_step;
typedef struct kdc_reshard_plan {
  int n;
  kdc_reshard_step steps[KDC_RESHARD_MAX_STEPS];
} kdc_reshard_plan;
/* Plans |src| -> |dst| for a value of global type |global| on |m|.  Errors:
 * a dim not divisible by its shards under either sharding (located by the
 * caller), a |dst| partial over axes |src| is not partial over
 * (KDC_UNSUPPORTED).  Open marks, replicated sets and provenance of both
 * shardings are ignored; |dst|'s partial axes must be a subset of |src|'s
 * and stay partial. */
kdc_status kdc_reshard_plan_make(const kdc_mesh *m, const kdc_type *global, const kdc_sharding *src,
                                 const kdc_sharding *dst, kdc_reshard_plan *out);
/* "all_gather [model] dim=1 groups=[[0,1,2,3],[4,5,6,7]]" into |buf|. */
char *kdc_reshard_step_str(const kdc_mesh *m, const kdc_reshard_step *s, char *buf, size_t n);
/* Appends the plan's nodes to |f| after value |v| (each with its local type
 * and sharding); returns the last value (|v| for an empty plan). */
kdc_value_id kdc_reshard_emit(kdc_func *f, kdc_value_id v, const kdc_reshard_plan *p);
/* Bytes each device sends for one SPMD op (SHARDING.md 4, bandwidth-optimal
 * algorithms): all_gather (n-1)/n * out, reduce_scatter (n-1)/n * in,
 * all_reduce 2(n-1)/n * in, all_to_all (n-1)/n * in (local), collective_permute
 * in, others 0; n = group size, in/out = local bytes. */
double kdc_coll_bytes(const kdc_mesh *m, kdc_op op, const kdc_attr_coll *c, const kdc_type *in_local,
                      const kdc_type *out_local);

/* ---- partition_gather (passes/partition_gather.c) --------------------------
 * For partition.c: the local program of gather / scatter_add node |nd| (the
 * old, global node) whose vocabulary factor is split over |axes|: |ins| the
 * local operands, |in_local| / |in_s| their local types and shardings, |rs|
 * the result's sharding (partial for gather).  *|out| gets the local value. */
kdc_status kdc_partition_vocab(kdc_func *f, const kdc_mesh *mesh, const kdc_node *nd,
                               const kdc_value_id *ins, const kdc_type *in_local,
                               const kdc_sharding *in_s, int naxes, const uint8_t *axes,
                               const kdc_sharding *rs, kdc_value_id *out);

/* ---- partition_halo (passes/partition_halo.c) -----------------------------
 * For partition.c: convolutions and pooling split on a spatial dim.
 * kdc_partition_halo_check demotes the split halo factors of node |v| that
 * cannot run with a halo exchange on |mesh| (several axes, a halo larger
 * than the neighbour's shard, misaligned output shards) to need_replication
 * with no axes, so the caller gathers them with its fallback warning; it
 * returns whether a halo factor stays split.  kdc_partition_halo emits the
 * local program of such a node (arguments as kdc_partition_vocab, plus the
 * rule and factor shardings). */
bool kdc_partition_halo_check(const kdc_func *f, const kdc_mesh *mesh, kdc_value_id v,
                              kdc_factor_rule *r, kdc_factor_shardings *fs);
kdc_status kdc_partition_halo(kdc_func *f, const kdc_mesh *mesh, const kdc_node *nd,
                              const kdc_value_id *ins, const kdc_type *in_local,
                              const kdc_sharding *in_s, const kdc_factor_rule *r,
                              const kdc_factor_shardings *fs, const kdc_sharding *rs,
                              kdc_value_id *out);

/* ---- plan_memory (passes/plan_memory.c, owned by codegen) ------------------
 * Byte offsets of temporaries in the scratch arena (kdc_node.mem_offset);
 * see the file comment for the rules codegen relies on. */
kdc_status kdc_pass_plan_memory(kdc_module *m, const kdc_pass_options *opt);
kdc_status kdc_pass_plan_memory_func(kdc_func *f, int64_t *out_arena_bytes);
int64_t kdc_pass_plan_memory_arena_bytes(const kdc_func *f);

/* ---- step_cost (passes/step_cost.c) ----------------------------------------
 * The cost model of `--layout auto` (docs/sharding.md "Cost model"): the
 * predicted time and memory of one call of a partitioned, fused and
 * memory-planned function on one device, from a machine description. */
typedef struct kdc_machine_axis {
  double latency_s;     /* per collective call over this axis */
  double bytes_per_s;   /* bytes per device (SHARDING.md 4) per second: all_reduce,
                           reduce_scatter (they sum) */
  double move_bytes_per_s; /* the same for all_gather, all_to_all, collective_permute
                              (they only move; 0: bytes_per_s) */
  char name[32];        /* a mesh axis name; "" = the default */
} kdc_machine_axis;

typedef struct kdc_machine {
  char name[64];
  double gemm_flops_per_s;  /* one device's GEMM rate */
  double bytes_per_s;       /* one device's memory traffic rate (kernels) */
  double step_s;            /* per kernel / GEMM launch */
  double gemm_m0, gemm_n0;  /* a GEMM of m rows and n columns runs at
                               gemm_flops_per_s x (1 + m0/512 + n0/512) /
                               (1 + m0/m + n0/n): narrow ones run slower
                               (0: no such penalty) */
  int lanes;                /* devices that compute at once (0: all; the virtual
                               mesh: the host's cores) */
  double sync_s;            /* per collective that ends a device-parallel segment
                               of the run (every device waits for the others) */
  bool shared_gathers;      /* devices share memory (one process: the virtual
                               mesh): a weight update's all_gather is made in
                               place and an input's all_to_all is a view
                               (runtime/gather_inplace.c): no bytes, no sync */
  kdc_machine_axis default_axis;
  int n_axes;
  kdc_machine_axis axes[KDC_MAX_MESH_AXES];
} kdc_machine;

/* The defaults: the build VM's virtual mesh (bench/bench_auto.c measures them). */
void kdc_machine_defaults(kdc_machine *mc);

typedef struct kdc_step_cost {
  double flops, mem_bytes;      /* per device per call */
  double coll_bytes;            /* bytes each device sends per call */
  int64_t n_collectives, n_steps;
  int64_t n_syncs;              /* collectives that end a segment (sync_s each) */
  double compute_s, coll_s;     /* per device compute; collectives */
  double step_s;                /* predicted time of one call on the mesh */
  int64_t weight_bytes, io_bytes, arena_bytes, peak_bytes;  /* per device */
} kdc_step_cost;

/* The cost of one call of |f| (a function of |m| after the whole pipeline). */
kdc_status kdc_step_cost_of(const kdc_module *m, const kdc_func *f, const kdc_machine *mc,
                            kdc_step_cost *out);

/* ==== training: autodiff, losses, optimizers, train_step ====================
 * (passes/autodiff.c, grad_rules.c, losses.c, optimizers.c, train_step.c;
 * docs/training.md gives the formulas and the train_step ABI.) */

/* ---- autodiff (passes/autodiff.c) -----------------------------------------
 * Reverse mode over |f|: appends to |f| the nodes computing d|y|/d|wrt[i]|
 * for the f32 scalar |y| (rank 0) and stores the gradient ids in
 * |out_grads| (|n| entries).  out_grads[i] is KDC_NO_VALUE when |y| does not
 * depend on wrt[i] through differentiable ops (Keras then skips the
 * variable).  Forward nodes are left untouched; the new nodes carry the
 * origin of the forward node they differentiate.  Contributions to one value
 * are summed with `add` in decreasing user id order.  Errors: |y| not an f32
 * scalar or a wrt not an f32 value (KDC_INVALID_INPUT), an op on the path
 * whose rule is "unsupported" (KDC_UNSUPPORTED, located). */
kdc_status kdc_autodiff(kdc_func *f, kdc_value_id y, const kdc_value_id *wrt, size_t n,
                        kdc_value_id *out_grads);

/* ---- grad_rules (passes/grad_rules.c) -------------------------------------
 * One VJP rule per op, in a table indexed by kdc_op whose completeness and
 * order are static_asserts against ir/ops.def.  A rule receives the forward
 * node (a copy: the node array may move while it builds), its value id and
 * the cotangent |g| (same type), and hands each operand's contribution to
 * kdc_grad_accum.  Rules build with the kdc_ir_* builder (sticky errors). */
typedef struct kdc_grad_ctx kdc_grad_ctx; /* autodiff.c's state */
typedef void (*kdc_grad_fn)(kdc_grad_ctx *c, const kdc_node *n, kdc_value_id v, kdc_value_id g);
typedef enum kdc_grad_kind {
  KDC_GRAD_LEAF,        /* no operands: nothing to propagate */
  KDC_GRAD_ZERO,        /* non-differentiable / piecewise constant: operands get no gradient */
  KDC_GRAD_RULE,        /* |fn| propagates */
  KDC_GRAD_UNSUPPORTED, /* reaching it is an error (|why|) */
} kdc_grad_kind;
typedef struct kdc_grad_rule {
  kdc_grad_kind kind;
  kdc_grad_fn fn;       /* KDC_GRAD_RULE only */
  const char *why;      /* one line: the rule, or why there is none */
} kdc_grad_rule;
const kdc_grad_rule *kdc_grad_rule_of(kdc_op op);
/* For rules (implemented in autodiff.c): */
kdc_func *kdc_grad_func(kdc_grad_ctx *c);
/* True when operand value |v| needs a gradient (depends on a wrt, f32). */
bool kdc_grad_wants(const kdc_grad_ctx *c, kdc_value_id v);
/* True when |v| depends on no parameter (a constant expression). */
bool kdc_grad_is_constant(const kdc_grad_ctx *c, kdc_value_id v);
/* Adds |contribution| to the gradient of |v| (ignored unless wanted). */
void kdc_grad_accum(kdc_grad_ctx *c, kdc_value_id v, kdc_value_id contribution);
/* The cotangent of operand |side| (0 lhs, 1 rhs) of dot_general node |n|
 * of |f| given the cotangent |g| of its result (grad_rules.c; grad_scan.c
 * uses it for a weight's gradient over all time steps at once). */
kdc_value_id kdc_grad_dot_operand(kdc_func *f, const kdc_node *n, int side, kdc_value_id g);

/* ---- grad_window (passes/grad_window.c): the rules of the windowed and
 * indexed ops (convolution, reduce_window, gather, scatter_add, reverse),
 * rows of grad_rules.c's table; the formulas are in the file comment. */
void kdc_vjp_convolution(kdc_grad_ctx *c, const kdc_node *n, kdc_value_id v, kdc_value_id g);
void kdc_vjp_reduce_window(kdc_grad_ctx *c, const kdc_node *n, kdc_value_id v, kdc_value_id g);
void kdc_vjp_gather(kdc_grad_ctx *c, const kdc_node *n, kdc_value_id v, kdc_value_id g);
void kdc_vjp_scatter_add(kdc_grad_ctx *c, const kdc_node *n, kdc_value_id v, kdc_value_id g);
void kdc_vjp_reverse(kdc_grad_ctx *c, const kdc_node *n, kdc_value_id v, kdc_value_id g);
/* passes/grad_scan.c: scan's VJP, a reverse scan over a body built by
 * differentiating the forward body (see the file comment). */
void kdc_vjp_scan(kdc_grad_ctx *c, const kdc_node *n, kdc_value_id v, kdc_value_id g);

/* ---- losses (passes/losses.c) ---------------------------------------------
 * Keras 3 losses with reduction "sum_over_batch_size": the per-sample loss
 * (mean over the last axis for the regression and binary losses, the sum over
 * classes for the categorical ones) summed and divided by its element count. */
typedef enum kdc_loss_kind {
  KDC_LOSS_MSE,   /* mean_squared_error */
  KDC_LOSS_MAE,   /* mean_absolute_error */
  KDC_LOSS_BCE,   /* binary_crossentropy (from_logits both ways) */
  KDC_LOSS_CCE,   /* categorical_crossentropy: one-hot (or soft) f32 labels */
  KDC_LOSS_SCCE,  /* sparse_categorical_crossentropy: i32 class ids */
  KDC_LOSS_COUNT
} kdc_loss_kind;
/* Keras names: "mean_squared_error" or "mse", "mean_absolute_error"/"mae",
 * "binary_crossentropy", "categorical_crossentropy",
 * "sparse_categorical_crossentropy". */
bool kdc_loss_from_name(const char *s, kdc_loss_kind *out);
const char *kdc_loss_name(kdc_loss_kind k);
/* The labels' type for predictions of type |pred|: the same type, except
 * SCCE: i32 with the last dim removed. */
kdc_type kdc_loss_label_type(kdc_loss_kind k, const kdc_type *pred);
/* Appends the scalar loss of |y_pred| against |y_true| to |f|. */
kdc_status kdc_loss_build(kdc_func *f, kdc_loss_kind k, bool from_logits, kdc_value_id y_true,
                          kdc_value_id y_pred, kdc_value_id *out_loss);
/* kdc_loss_build with a per-row weight |mask| (f32[B], B = dim 0 of the
 * per-sample values; KDC_NO_VALUE = none): loss = sum(per * mask) /
 * (sum(mask) * per-sample values per row), i.e. with a 0/1 mask exactly the
 * loss of the smaller batch of the rows whose mask is 1 (a padded last
 * batch).  An all-zero mask gives 0/0. */
kdc_status kdc_loss_build_masked(kdc_func *f, kdc_loss_kind k, bool from_logits,
                                 kdc_value_id y_true, kdc_value_id y_pred, kdc_value_id mask,
                                 kdc_value_id *out_loss);
/* kdc_loss_build_masked where |y_pred| also carries a Keras mask |keras_mask|
 * (f32 0/1 of the per-sample values' shape, or with a trailing 1 added or
 * removed): Keras 3's Loss.__call__ / reduce_weighted_values
 * (keras/src/losses/loss.py apply_mask): weight = where(m, total / valid, 0)
 * (divide_no_nan), loss = sum(per * weight) / total, with total the mask's
 * element count and valid its sum, both over the rows whose |mask| is 1. */
kdc_status kdc_loss_build_keras_masked(kdc_func *f, kdc_loss_kind k, bool from_logits,
                                       kdc_value_id y_true, kdc_value_id y_pred,
                                       kdc_value_id mask, kdc_value_id keras_mask,
                                       kdc_value_id *out_loss);

/* ---- optimizers (passes/optimizers.c) -------------------------------------
 * Keras 3 update rules (docs/training.md quotes them) and learning-rate
 * schedules evaluated in the IR over the step counter. */
typedef enum kdc_optimizer_kind {
  KDC_OPT_SGD,      /* lr 0.01, momentum 0, nesterov false */
  KDC_OPT_ADAM,     /* lr 0.001, beta_1 0.9, beta_2 0.999, epsilon 1e-7 */
  KDC_OPT_ADAMW,    /* Adam + weight_decay 0.004 */
  KDC_OPT_RMSPROP,  /* lr 0.001, rho 0.9, momentum 0, epsilon 1e-7, centered false */
  KDC_OPT_COUNT
} kdc_optimizer_kind;
typedef enum kdc_lr_schedule_kind {
  KDC_LR_CONSTANT,    /* learning_rate */
  KDC_LR_EXPONENTIAL, /* lr * decay_rate^(step/decay_steps) (floor'd if staircase) */
  KDC_LR_INVERSE_TIME,/* lr / (1 + decay_rate * step/decay_steps) (floor'd if staircase) */
  KDC_LR_PIECEWISE,   /* values[i] for boundaries[i-1] < step <= boundaries[i] */
  KDC_LR_COSINE,      /* CosineDecay (alpha, warmup_target, warmup_steps) */
  KDC_LR_COSINE_RESTARTS, /* CosineDecayRestarts (decay_steps = first_decay_steps, t_mul,
                             m_mul, alpha) */
  KDC_LR_POLYNOMIAL,  /* PolynomialDecay (end_learning_rate, power, cycle) */
} kdc_lr_schedule_kind;
typedef struct kdc_lr_schedule {
  kdc_lr_schedule_kind kind;
  double decay_steps, decay_rate;  /* EXPONENTIAL, INVERSE_TIME, COSINE*, POLYNOMIAL (> 0) */
  bool staircase;
  double alpha;                    /* COSINE*: the final fraction of the rate (0) */
  bool warmup;                     /* COSINE: warmup_target is set */
  double warmup_target, warmup_steps; /* COSINE with warmup */
  double t_mul, m_mul;             /* COSINE_RESTARTS (2, 1) */
  double end_learning_rate, power; /* POLYNOMIAL (1e-4, 1) */
  bool cycle;                      /* POLYNOMIAL */
  int n_boundaries;                /* PIECEWISE: n_boundaries + 1 values */
  const int64_t *boundaries;       /* caller-owned, copied into the IR */
  const double *values;
} kdc_lr_schedule;
typedef struct kdc_optimizer_options {
  kdc_optimizer_kind kind;
  double learning_rate;            /* the initial learning rate of |schedule| */
  kdc_lr_schedule schedule;
  double momentum;                 /* SGD, RMSprop */
  bool nesterov;                   /* SGD */
  double beta_1, beta_2;           /* Adam, AdamW */
  bool amsgrad;                    /* Adam, AdamW */
  double rho;                      /* RMSprop */
  bool centered;                   /* RMSprop */
  double epsilon;                  /* Adam, AdamW, RMSprop */
  double weight_decay;             /* decoupled decay var -= var*wd*lr; 0 = none */
} kdc_optimizer_options;
/* Fills the Keras 3 defaults of |kind|. */
void kdc_optimizer_options_init(kdc_optimizer_options *o, kdc_optimizer_kind kind);
/* Keras names: "sgd", "adam", "adamw", "rmsprop" (any case). */
bool kdc_optimizer_from_name(const char *s, kdc_optimizer_kind *out);
/* The Keras default optimizer name, the prefix of its variables: "SGD",
 * "adam", "adamw", "rmsprop". */
const char *kdc_optimizer_name(kdc_optimizer_kind k);
/* Checks ranges (learning rate > 0, betas in [0,1), ...): KDC_INVALID_INPUT. */
kdc_status kdc_optimizer_options_check(const kdc_optimizer_options *o);
/* The slot names of |o| in Keras order (e.g. "momentum", "velocity"), at
 * most 3; returns their count. */
int kdc_optimizer_slots(const kdc_optimizer_options *o, const char **out_names);
/* The f32 scalar learning rate at |iteration| (i32 scalar: steps done). */
kdc_value_id kdc_optimizer_learning_rate(kdc_func *f, const kdc_optimizer_options *o,
                                         kdc_value_id iteration);
/* One variable's update: |var|, its gradient |grad|, its slots (in the order
 * of kdc_optimizer_slots), the learning rate |lr| and the step counter
 * |iteration| before this step.  Writes the new variable and new slots. */
kdc_status kdc_optimizer_update(kdc_func *f, const kdc_optimizer_options *o,
                                kdc_value_id iteration, kdc_value_id lr, kdc_value_id var,
                                kdc_value_id grad, const kdc_value_id *slots,
                                kdc_value_id *out_var, kdc_value_id *out_slots);

/* ---- train_step (passes/train_step.c) --------------------------------------
 * Builds the functions `train_step` and `evaluate` from `predict` (or, when
 * present, `train_forward`: the training-mode forward, e.g. with dropout,
 * taking the same parameters as predict plus optionally an i32 scalar STATE
 * parameter named "iteration" that is bound to the step counter).  The ABI
 * is in docs/training.md.  Call it after infer_shapes, before simplify. */
#define KDC_TRAIN_MAX_OUTPUTS 32
typedef struct kdc_train_options {
  kdc_loss_kind loss;
  bool from_logits;                /* BCE, CCE, SCCE: y_pred are logits */
  kdc_optimizer_options optimizer;
  int output;                      /* index of the predict result trained (0: first) */
  bool sample_mask;                /* train_step/evaluate take "sample_mask" f32[B] after the
                                      labels (partial batches; docs/training.md) */
  /* Keras 3 multi-output compile (docs/training.md "Several outputs"):
   * n_losses == 0: `loss` trains `output`, or every predict result when
   * every_output (Keras: one loss for a multi-output model).  n_losses > 0:
   * one entry per output, by name (a dict) or, when `output` is NULL, by
   * position (a list as long as predict's results).  loss_weights likewise
   * (n_weights == 0: all 1). */
  bool every_output;
  size_t n_losses, n_weights;
  struct kdc_output_loss {
    const char *output;            /* predict result name; NULL: position in the list */
    bool none;                     /* Keras loss None: this output is not trained */
    kdc_loss_kind loss;
    bool from_logits;
    double weight;                 /* loss_weights entry (only in weights[]) */
  } losses[KDC_TRAIN_MAX_OUTPUTS], weights[KDC_TRAIN_MAX_OUTPUTS];
  /* true: every weight's optimizer update keeps its weight's sharding (each
   * replica updates its whole copy).  false (the default): the update of a
   * weight replicated over a batch axis runs on 1/n pieces, slots sharded
   * (passes/shard_update.c; kdc compile --no-shard-update). */
  bool no_shard_update;
} kdc_train_options;
/* Keras defaults for |loss| and |optimizer|. */
void kdc_train_options_init(kdc_train_options *o, kdc_loss_kind loss, kdc_optimizer_kind optimizer);
kdc_status kdc_pass_build_training(kdc_module *m, const kdc_train_options *o);

/* ---- sharded weight update (passes/shard_update.c) ------------------------
 * The mesh axes splitting the batch (dim 0 of |f|'s INPUT parameters); 0
 * without a mesh or on one device. */
unsigned kdc_shard_update_axes(const kdc_module *m, const kdc_func *f);
/* The sharding of the optimizer update of a weight of global type |t| and
 * sharding |w|: |w| with every axis of |axes| it does not use appended to
 * its first dim whose local size that axis divides.  Returns false (and
 * *out = *w) when no axis fits or the weight's piece is too small to pay
 * (under 16 KiB per device). */
bool kdc_shard_update_sharding(const kdc_mesh *mesh, const kdc_type *t, const kdc_sharding *w,
                               unsigned axes, kdc_sharding *out);

#endif
