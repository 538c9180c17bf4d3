/*
 * passes/infer_shapes.c: recompute every node's type and check it.
 *
 * Types are static and every producer (builder, parser) already stores one;
 * this pass is the independent check that the stored type is exactly what
 * ir/shape.c derives from the operands, so later passes can trust types
 * without re-deriving them.  A mismatch is bad input (a hand-written or
 * corrupted .kir file, or a frontend bug that the frontend's own tests must
 * catch): KDC_INVALID_INPUT, located at the node.
 */
#include <stdlib.h>

#include "passes/passes.h"

static kdc_status check_node(const kdc_func *f, kdc_value_id v) {
  const kdc_node *nd = kdc_ir_node(f, v);
  char where[256];
  for (int j = 0; j < nd->n_in; j++) /* it may run before the verifier */
    if (nd->in[j] >= v)
      return KDC_ERR(KDC_INVALID_INPUT, "%s: operand %d (%%%u) is not defined before its use",
                     kdc_pass_where(f, v, where, sizeof where), j, (unsigned)nd->in[j]);
  kdc_type ins[16] = {{0}};
  kdc_type *in = nd->n_in <= 16 ? ins : kdc_xmalloc((size_t)nd->n_in * sizeof *in);
  for (int j = 0; j < nd->n_in; j++) in[j] = *kdc_ir_type(f, nd->in[j]);
  kdc_type out = nd->type; /* ops with a given result type check it */
  kdc_status st = kdc_ir_infer_type(nd->op, nd->n_in, in, &nd->attr, &out);
  if (in != ins) free(in);
  if (st) return kdc_status_annotate(st, "%s", kdc_pass_where(f, v, where, sizeof where));
  if (!kdc_type_equal(&out, &nd->type)) {
    char want[96], got[96];
    return KDC_ERR(KDC_INVALID_INPUT, "%s: declared type %s but the operands give %s",
                   kdc_pass_where(f, v, where, sizeof where),
                   kdc_type_str(&nd->type, got, sizeof got), kdc_type_str(&out, want, sizeof want));
  }
  return NULL;
}

kdc_status kdc_pass_infer_shapes(kdc_module *m, const kdc_pass_options *opt) {
  (void)opt;
  for (size_t i = 0; i < m->n_funcs; i++) {
    const kdc_func *f = m->funcs[i];
    for (size_t v = 0; v < f->n_nodes; v++) KDC_RETURN_IF_ERROR(check_node(f, (kdc_value_id)v));
  }
  return NULL;
}
