/*
 * passes/fold.c: constant folding.
 *
 * A node whose operands are all CONSTANT nodes becomes a CONSTANT.  Values
 * are computed by the reference interpreter (ir/interp.c) on a throw-away
 * one-node function, so folding can never disagree with the oracle that
 * codegen is tested against.  Leaves (IOTA) are not folded: an iota is
 * cheaper to recompute inside a kernel than to load.
 *
 * Splats stay splats without materializing anything:
 *   - an elementwise op over splat operands is evaluated once, at rank 0;
 *   - a data-movement op (broadcast, reshape, transpose, slice, concatenate,
 *     pad) over splats that all hold the same bytes is that splat, whatever
 *     the shape (this covers "broadcast of a scalar constant").
 * Anything else is folded only when the result and every operand have at most
 * fold_max_elements elements, so a model cannot blow up compile memory.  A
 * folded result whose elements are all equal is stored as a splat.
 *
 * The interpreter may refuse a node (integer division by zero, say); the node
 * is then left alone for the runtime to evaluate.
 */
#include <stdlib.h>
#include <string.h>

#include "passes/passes.h"

/* Rewrites node |v| in place into a constant holding |data| (copied). */
static void make_constant(kdc_func *f, kdc_value_id v, const void *data, bool splat) {
  kdc_node *nd = kdc_ir_node(f, v);
  size_t bytes = splat ? kdc_dtype_size(nd->type.dtype) : kdc_type_bytes(&nd->type);
  void *copy = kdc_arena_memdup(f->module->arena, data, bytes ? bytes : 1);
  nd->op = KDC_OP_CONSTANT;
  nd->n_in = 0;
  nd->in = NULL;
  memset(&nd->attr, 0, sizeof nd->attr);
  nd->attr.constant.splat = splat;
  nd->attr.constant.data = copy;
}

/* The one element of a splat constant (a dense all-equal constant too). */
static const void *splat_elem(const kdc_func *f, kdc_value_id v) {
  return kdc_ir_node(f, v)->attr.constant.data;
}

/* Evaluates |op| over operand constants with the interpreter.  When |rank0|
 * every type is taken at rank 0 (splat evaluation).  On success *out_data is
 * a malloc'd buffer of the result. */
static bool interpret(const kdc_func *f, kdc_value_id v, bool rank0, void **out_data) {
  const kdc_node *nd = kdc_ir_node(f, v);
  kdc_module *tm = kdc_ir_module_create("fold");
  kdc_func *tf = kdc_ir_func_create(tm, "fold");
  kdc_value_id ins[KDC_MAX_RANK * 4]; /* operands of folded ops: a handful */
  kdc_value_id *in = nd->n_in <= (int)(sizeof ins / sizeof ins[0]) ? ins
                     : kdc_xmalloc((size_t)nd->n_in * sizeof *in);
  for (int j = 0; j < nd->n_in; j++) {
    const kdc_node *c = kdc_ir_node(f, nd->in[j]);
    kdc_type t = c->type;
    kdc_attrs a = c->attr;
    if (rank0) {
      t.rank = 0;
      a.constant.splat = false;
    }
    in[j] = kdc_ir_append(tf, KDC_OP_CONSTANT, &t, 0, NULL, &a);
  }
  kdc_type t = nd->type;
  if (rank0) t.rank = 0;
  kdc_attrs a = nd->attr;
  kdc_value_id r = kdc_ir_append(tf, nd->op, &t, nd->n_in, in, &a);
  kdc_ir_add_result(tf, r, NULL);
  kdc_tensor out = {0};
  kdc_status st = kdc_ir_interpret(tf, NULL, 0, &out);
  if (in != ins) free(in);
  kdc_ir_module_destroy(tm);
  if (st) {
    kdc_status_free(st);
    free(out.data);
    return false;
  }
  *out_data = out.data;
  return true;
}

static bool all_equal(const void *data, int64_t n, size_t es) {
  const unsigned char *d = data;
  for (int64_t i = 1; i < n; i++)
    if (memcmp(d, d + (size_t)i * es, es) != 0) return false;
  return true;
}

/* Folds node |v| if it can; returns whether it did. */
static bool fold_node(kdc_func *f, kdc_value_id v, int64_t max_elems) {
  const kdc_node *nd = kdc_ir_node(f, v);
  unsigned fl = kdc_op_flags(nd->op);
  if ((fl & (OPF_LEAF | OPF_COLL | OPF_BODY)) || nd->n_in == 0) return false;
  bool splats = true, same = true;
  size_t es0 = kdc_dtype_size(kdc_ir_type(f, nd->in[0])->dtype);
  for (int j = 0; j < nd->n_in; j++) {
    kdc_value_id u = nd->in[j];
    if (kdc_ir_node(f, u)->op != KDC_OP_CONSTANT) return false;
    if (!kdc_pass_is_splat(f, u) || kdc_type_numel(kdc_ir_type(f, u)) == 0) splats = false;
    else if (kdc_ir_type(f, u)->dtype != kdc_ir_type(f, nd->in[0])->dtype ||
             memcmp(splat_elem(f, u), splat_elem(f, nd->in[0]), es0) != 0)
      same = false;
  }
  void *data = NULL;
  if (splats && (fl & OPF_SHAPE) && same) {
    make_constant(f, v, splat_elem(f, nd->in[0]), true);
    return true;
  }
  if (splats && (fl & OPF_EW)) {
    if (!interpret(f, v, true, &data)) return false;
    make_constant(f, v, data, true);
    free(data);
    return true;
  }
  if (kdc_type_numel(&nd->type) > max_elems) return false;
  for (int j = 0; j < nd->n_in; j++)
    if (kdc_type_numel(kdc_ir_type(f, nd->in[j])) > max_elems) return false;
  if (!interpret(f, v, false, &data)) return false;
  kdc_type t = nd->type;
  int64_t n = kdc_type_numel(&t);
  make_constant(f, v, data, n > 0 && all_equal(data, n, kdc_dtype_size(t.dtype)));
  free(data);
  return true;
}

kdc_status kdc_pass_fold_func(kdc_func *f, const kdc_pass_options *opt, bool *out_changed) {
  int64_t max_elems = kdc_pass_opt_fold_max(opt);
  bool changed = false;
  /* In order: a folded node is a constant for its users further down. */
  for (size_t i = 0; i < f->n_nodes; i++)
    if (fold_node(f, (kdc_value_id)i, max_elems)) changed = true;
  if (changed && out_changed) *out_changed = true;
  return NULL;
}

kdc_status kdc_pass_fold(kdc_module *m, const kdc_pass_options *opt) {
  for (size_t i = 0; i < m->n_funcs; i++) {
    kdc_func *f = m->funcs[i];
    bool changed = false;
    KDC_RETURN_IF_ERROR(kdc_pass_fold_func(f, opt, &changed));
    if (changed) kdc_pass_dce_func(f, NULL); /* drop the now-unused operands */
  }
  return NULL;
}
