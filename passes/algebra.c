/*
 * passes/algebra.c: algebraic identities that are exact in IEEE f32.
 *
 * Only rewrites that give bit-identical results for every input, NaNs and
 * signed zeros included, are allowed here:
 *   x * 1, 1 * x, x / 1              -> x
 *   x + (-0.0), (-0.0) + x, x - (+0.0) -> x   (f32; for integers any 0)
 *     (x + (+0.0) is NOT x: -0.0 + +0.0 = +0.0)
 *   neg(neg(x))                      -> x
 *   stop_gradient(x)                 -> x  (the pipeline differentiates before
 *     it simplifies: pipeline.c, build_training)
 *   reshape(reshape(x))              -> reshape(x), or x if the types match
 *   transpose(transpose(x, p), q)    -> transpose(x, p∘q), or x if identity
 *   broadcast(broadcast(x, a), b)    -> broadcast(x, b∘a)
 *   no-op reshape / transpose / broadcast / convert / slice / concatenate / pad -> x
 *   convert(convert(x: bf16|f16, f32), bf16|f16 = x's) -> x  (the widening is exact;
 *     the other order, f32 -> bf16 -> f32, rounds and stays)
 * Rewrites that need a new node modify the outer node in place (it keeps its
 * id, so the order stays topological); the now-unused inner node is left for
 * DCE, which the pass runs when it changed something.
 */
#include <stdlib.h>
#include <string.h>

#include "passes/passes.h"

static bool is_identity_perm(const kdc_dimlist *p) {
  for (int i = 0; i < p->n; i++)
    if (p->v[i] != i) return false;
  return true;
}

static bool is_one(const kdc_func *f, kdc_value_id v) {
  return kdc_pass_is_splat_of(f, v, 1, false);
}

/* The additive identity that leaves every x unchanged: -0.0 for floats. */
static bool is_add_identity(const kdc_func *f, kdc_value_id v) {
  return kdc_pass_is_splat_of(f, v, 0, kdc_ir_type(f, v)->dtype == KDC_DTYPE_F32);
}

static bool is_sub_identity(const kdc_func *f, kdc_value_id v) {
  return kdc_pass_is_splat_of(f, v, 0, false);
}

static bool is_full_slice(const kdc_func *f, const kdc_node *nd) {
  const kdc_type *t = kdc_ir_type(f, nd->in[0]);
  const kdc_attr_slice *s = &nd->attr.slice;
  for (int d = 0; d < t->rank; d++) {
    if (s->start.v[d] != 0 || s->limit.v[d] != t->dims[d]) return false;
    if (s->stride.n > d && s->stride.v[d] != 1) return false;
  }
  return true;
}

/* Returns the value node |v| reduces to (|v| itself if none applies); may
 * rewrite |v| in place. */
static kdc_value_id simplify_node(kdc_func *f, kdc_value_id v) {
  kdc_node *nd = kdc_ir_node(f, v);
  kdc_value_id a = nd->n_in > 0 ? nd->in[0] : KDC_NO_VALUE;
  kdc_value_id b = nd->n_in > 1 ? nd->in[1] : KDC_NO_VALUE;
  const kdc_node *an = a != KDC_NO_VALUE ? kdc_ir_node(f, a) : NULL;
  bool same_type = an && kdc_type_equal(&nd->type, &an->type);
  switch (nd->op) {
  case KDC_OP_MUL:
    if (is_one(f, b)) return a;
    if (is_one(f, a)) return b;
    break;
  case KDC_OP_DIV:
    if (is_one(f, b)) return a;
    break;
  case KDC_OP_ADD:
    if (is_add_identity(f, b)) return a;
    if (is_add_identity(f, a)) return b;
    break;
  case KDC_OP_SUB:
    if (is_sub_identity(f, b)) return a;
    break;
  case KDC_OP_NEG:
    if (an->op == KDC_OP_NEG) return an->in[0];
    break;
  case KDC_OP_STOP_GRADIENT: /* its work is done: autodiff runs before simplify */
    return a;
  case KDC_OP_CONVERT:
    if (same_type) return a;
    /* convert(convert(x, W), T) with x of type T and W wider (bf16/f16 ->
     * f32): the widening is exact, so the round trip is x */
    if (an->op == KDC_OP_CONVERT && kdc_dtype_is_half(nd->type.dtype) &&
        an->type.dtype == KDC_DTYPE_F32 &&
        kdc_type_equal(&nd->type, kdc_ir_type(f, an->in[0])))
      return an->in[0];
    break;
  case KDC_OP_RESHAPE:
    if (an->op == KDC_OP_RESHAPE) {
      nd->in[0] = an->in[0];
      an = kdc_ir_node(f, nd->in[0]);
      same_type = kdc_type_equal(&nd->type, &an->type);
    }
    if (same_type) return nd->in[0];
    break;
  case KDC_OP_TRANSPOSE:
    if (an->op == KDC_OP_TRANSPOSE) { /* result dim i = x dim p[q[i]] */
      kdc_dimlist p = an->attr.dims, q = nd->attr.dims;
      for (int i = 0; i < q.n; i++) nd->attr.dims.v[i] = p.v[q.v[i]];
      nd->in[0] = an->in[0];
    }
    if (is_identity_perm(&nd->attr.dims)) return nd->in[0];
    break;
  case KDC_OP_BROADCAST:
    if (an->op == KDC_OP_BROADCAST) { /* x dim i -> inner dim a[i] -> outer dim b[a[i]] */
      kdc_dimlist in_map = an->attr.dims, out_map = nd->attr.dims;
      nd->attr.dims = in_map;
      for (int i = 0; i < in_map.n; i++) nd->attr.dims.v[i] = out_map.v[in_map.v[i]];
      nd->in[0] = an->in[0];
      an = kdc_ir_node(f, nd->in[0]);
      same_type = kdc_type_equal(&nd->type, &an->type);
    }
    if (same_type && is_identity_perm(&nd->attr.dims)) return nd->in[0];
    break;
  case KDC_OP_SLICE:
    if (same_type && is_full_slice(f, nd)) return a;
    break;
  case KDC_OP_CONCAT:
    if (nd->n_in == 1 && same_type) return a;
    break;
  case KDC_OP_PAD: /* by nothing: the same elements (the gradient of slices that tile x) */
    if (same_type) {
      const kdc_attr_pad *p = &nd->attr.pad;
      bool none = true;
      for (int d = 0; d < nd->type.rank; d++)
        none = none && !p->low.v[d] && !p->high.v[d] && !p->interior.v[d];
      if (none) return a;
    }
    break;
  default: break;
  }
  return v;
}

void kdc_pass_algebra_func(kdc_func *f, bool *out_changed) {
  size_t n = f->n_nodes;
  if (n == 0) return;
  kdc_value_id *repl = kdc_xmalloc(n * sizeof *repl);
  bool changed = false;
  for (size_t i = 0; i < n; i++) {
    kdc_node *nd = &f->nodes[i];
    for (int j = 0; j < nd->n_in; j++) nd->in[j] = repl[nd->in[j]];
    kdc_attrs attr0 = nd->attr;
    kdc_value_id in0 = nd->n_in > 0 ? nd->in[0] : KDC_NO_VALUE;
    repl[i] = simplify_node(f, (kdc_value_id)i);
    if (repl[i] != i || memcmp(&attr0, &nd->attr, sizeof attr0) != 0 ||
        (nd->n_in > 0 && in0 != nd->in[0]))
      changed = true;
  }
  if (changed) {
    kdc_pass_func_rebuild(f, repl, NULL, 0);
    kdc_pass_dce_func(f, NULL);
    if (out_changed) *out_changed = true;
  }
  free(repl);
}

kdc_status kdc_pass_algebra(kdc_module *m, const kdc_pass_options *opt) {
  (void)opt;
  for (size_t i = 0; i < m->n_funcs; i++) kdc_pass_algebra_func(m->funcs[i], NULL);
  return NULL;
}
