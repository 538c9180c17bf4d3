/*
 * passes/cse.c: common subexpression elimination.
 *
 * Two nodes are the same computation when they have the same op, the same
 * attributes, the same (already merged) operands, the same type and the same
 * sharding annotation; constants are compared by value, element by element
 * (so a dense constant of equal elements matches a splat, and bit patterns
 * decide: -0.0 and +0.0 differ, equal NaNs match).  Parameters never merge.
 * The first node in program order survives, so the result is deterministic
 * and operands still precede users.
 *
 * Ops whose attributes this file does not know are never merged: adding an op
 * to ops.def without teaching kdc_pass_attrs_equal about it is safe, only
 * less optimal.
 */
#include <stdlib.h>
#include <string.h>

#include "passes/passes.h"

static bool dimlist_equal(const kdc_dimlist *a, const kdc_dimlist *b) {
  if (a->n != b->n) return false;
  for (int i = 0; i < a->n; i++)
    if (a->v[i] != b->v[i]) return false;
  return true;
}

/* Element |i| of a constant node (a splat stores one element). */
static const unsigned char *const_elem(const kdc_node *nd, int64_t i) {
  size_t es = kdc_dtype_size(nd->type.dtype);
  const unsigned char *d = nd->attr.constant.data;
  return nd->attr.constant.splat ? d : d + (size_t)i * es;
}

static bool const_equal(const kdc_node *a, const kdc_node *b) {
  int64_t n = kdc_type_numel(&a->type);
  size_t es = kdc_dtype_size(a->type.dtype);
  if (a->attr.constant.splat && b->attr.constant.splat) n = n > 0 ? 1 : 0;
  for (int64_t i = 0; i < n; i++)
    if (memcmp(const_elem(a, i), const_elem(b, i), es) != 0) return false;
  return true;
}

bool kdc_pass_attrs_equal(kdc_op op, const kdc_node *a, const kdc_node *b) {
  const kdc_attrs *x = &a->attr, *y = &b->attr;
  unsigned fl = kdc_op_flags(op);
  switch (op) {
  case KDC_OP_PARAMETER: return false;
  case KDC_OP_CONSTANT: return const_equal(a, b);
  case KDC_OP_IOTA:
  case KDC_OP_CONCAT: return x->dim == y->dim;
  case KDC_OP_COMPARE: return x->cmp == y->cmp;
  case KDC_OP_BROADCAST:
  case KDC_OP_TRANSPOSE: return dimlist_equal(&x->dims, &y->dims);
  case KDC_OP_RESHAPE: return true; /* the type says it all */
  case KDC_OP_REDUCE:
    return x->reduce.kind == y->reduce.kind && dimlist_equal(&x->reduce.dims, &y->reduce.dims);
  case KDC_OP_DOT:
    return dimlist_equal(&x->dot.lhs_batch, &y->dot.lhs_batch) &&
           dimlist_equal(&x->dot.rhs_batch, &y->dot.rhs_batch) &&
           dimlist_equal(&x->dot.lhs_contract, &y->dot.lhs_contract) &&
           dimlist_equal(&x->dot.rhs_contract, &y->dot.rhs_contract) &&
           x->dot.bf16_operands == y->dot.bf16_operands;
  case KDC_OP_SLICE:
    return dimlist_equal(&x->slice.start, &y->slice.start) &&
           dimlist_equal(&x->slice.limit, &y->slice.limit) &&
           dimlist_equal(&x->slice.stride, &y->slice.stride);
  case KDC_OP_PAD:
    return dimlist_equal(&x->pad.low, &y->pad.low) && dimlist_equal(&x->pad.high, &y->pad.high) &&
           dimlist_equal(&x->pad.interior, &y->pad.interior);
  default:
    /* Elementwise ops other than COMPARE carry no attributes. */
    return (fl & OPF_EW) != 0;
  }
}

static bool sharding_equal(const kdc_sharding *a, const kdc_sharding *b) {
  if (a->present != b->present) return false;
  if (!a->present) return true;
  if (a->rank != b->rank || a->open_mask != b->open_mask || a->replicated != b->replicated ||
      a->partial != b->partial)
    return false;
  for (int d = 0; d < a->rank; d++) {
    if (a->naxes[d] != b->naxes[d]) return false;
    if (memcmp(a->axes[d], b->axes[d], a->naxes[d]) != 0) return false;
  }
  return true;
}

static bool same_node(const kdc_node *a, const kdc_node *b) {
  if (a->op != b->op || a->n_in != b->n_in || !kdc_type_equal(&a->type, &b->type)) return false;
  for (int j = 0; j < a->n_in; j++)
    if (a->in[j] != b->in[j]) return false;
  return kdc_pass_attrs_equal(a->op, a, b) && sharding_equal(&a->sharding, &b->sharding);
}

static uint64_t mix(uint64_t h, uint64_t v) { return (h ^ v) * 0x100000001b3ull; }

/* Hashes what same_node compares, minus attributes (collisions are fine). */
static uint64_t hash_node(const kdc_node *nd) {
  uint64_t h = mix(0xcbf29ce484222325ull, (uint64_t)nd->op);
  h = mix(h, (uint64_t)nd->type.dtype);
  for (int d = 0; d < nd->type.rank; d++) h = mix(h, (uint64_t)nd->type.dims[d]);
  for (int j = 0; j < nd->n_in; j++) h = mix(h, nd->in[j]);
  if (nd->op == KDC_OP_CONSTANT && kdc_type_numel(&nd->type) > 0) {
    const unsigned char *e = const_elem(nd, 0);
    for (size_t k = 0; k < kdc_dtype_size(nd->type.dtype); k++) h = mix(h, e[k]);
  }
  return h;
}

void kdc_pass_cse_func(kdc_func *f, bool *out_changed) {
  size_t n = f->n_nodes;
  if (n == 0) return;
  size_t cap = 16;
  while (cap < 2 * n) cap *= 2;
  kdc_value_id *table = kdc_xmalloc(cap * sizeof *table);
  for (size_t i = 0; i < cap; i++) table[i] = KDC_NO_VALUE;
  kdc_value_id *repl = kdc_xmalloc(n * sizeof *repl);
  bool changed = false;
  for (size_t i = 0; i < n; i++) {
    kdc_node *nd = &f->nodes[i];
    repl[i] = (kdc_value_id)i;
    /* Operands first point at their representatives, so chains merge too. */
    for (int j = 0; j < nd->n_in; j++) nd->in[j] = repl[nd->in[j]];
    if (nd->op == KDC_OP_PARAMETER) continue;
    size_t slot = (size_t)hash_node(nd) & (cap - 1);
    for (;; slot = (slot + 1) & (cap - 1)) {
      kdc_value_id c = table[slot];
      if (c == KDC_NO_VALUE) {
        table[slot] = (kdc_value_id)i;
        break;
      }
      if (same_node(&f->nodes[c], nd)) {
        repl[i] = c;
        changed = true;
        break;
      }
    }
  }
  if (changed) {
    kdc_pass_func_rebuild(f, repl, NULL, 0);
    if (out_changed) *out_changed = true;
  }
  free(repl);
  free(table);
}

kdc_status kdc_pass_cse(kdc_module *m, const kdc_pass_options *opt) {
  (void)opt;
  for (size_t i = 0; i < m->n_funcs; i++) kdc_pass_cse_func(m->funcs[i], NULL);
  return NULL;
}
