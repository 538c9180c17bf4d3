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
  int fuse_max_recompute;    /* ops a cheap value may recompute per kernel; 0 = 4, <0 = never */
  int simplify_max_rounds;   /* simplify's fixpoint bound; 0 = 8 */
} kdc_pass_options;

/* One entry of the pipeline: a name (used in dumps and errors) and the
 * function that runs it over every function of the module. */
typedef struct kdc_pass {
  const char *name;
  kdc_status (*run)(kdc_module *m, const kdc_pass_options *opt);
} kdc_pass;

/* Runs the compile pipeline over |m| in place:
 *   verify -> infer_shapes -> simplify -> fuse
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
int kdc_pass_opt_simplify_rounds(const kdc_pass_options *opt);

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

/* ---- simplify (passes/simplify.c) ------------------------------------------
 * algebra, fold, cse, dce repeated until nothing changes (bounded). */
kdc_status kdc_pass_simplify(kdc_module *m, const kdc_pass_options *opt);

/* ---- fuse (passes/fuse.c) --------------------------------------------------
 * Sets kdc_node.group per the fusion contract in ir.h (loop and input
 * fusion); may duplicate cheap values so that each kernel recomputes its own
 * copy.  kdc_pass_fuse_check verifies the contract (KDC_INTERNAL if broken). */
kdc_status kdc_pass_fuse(kdc_module *m, const kdc_pass_options *opt);
kdc_status kdc_pass_fuse_check(const kdc_func *f);

/* ---- plan_memory (passes/plan_memory.c, owned by codegen) ------------------
 * Byte offsets of temporaries in the scratch arena (kdc_node.mem_offset);
 * see the file comment for the rules codegen relies on. */
kdc_status kdc_pass_plan_memory(kdc_module *m, const kdc_pass_options *opt);
kdc_status kdc_pass_plan_memory_func(kdc_func *f, int64_t *out_arena_bytes);
int64_t kdc_pass_plan_memory_arena_bytes(const kdc_func *f);

#endif
