/*
 * passes/dce.c: dead code elimination.
 *
 * A node is live when a function result depends on it.  PARAMETER nodes are
 * always live: a function's parameter list is its ABI (the runtime binds
 * inputs and weights by position), so an unused weight stays a parameter.
 * Every op is pure (collectives included: all devices run the same SPMD
 * program, so removing one everywhere is consistent), hence nothing else is
 * kept for its effects.
 */
#include <stdlib.h>

#include "passes/passes.h"

void kdc_pass_dce_func(kdc_func *f, bool *out_changed) {
  size_t n = f->n_nodes;
  if (n == 0) return;
  bool *live = kdc_xcalloc(n, sizeof *live);
  for (size_t i = 0; i < f->n_results; i++) live[f->results[i]] = true;
  size_t n_live = 0;
  /* Operands precede users, so one backward sweep marks everything. */
  for (size_t i = n; i-- > 0;) {
    const kdc_node *nd = &f->nodes[i];
    if (nd->op == KDC_OP_PARAMETER) live[i] = true;
    if (!live[i]) continue;
    n_live++;
    for (int j = 0; j < nd->n_in; j++) live[nd->in[j]] = true;
  }
  if (n_live < n) {
    kdc_value_id *repl = kdc_xmalloc(n * sizeof *repl);
    for (size_t i = 0; i < n; i++) repl[i] = live[i] ? (kdc_value_id)i : KDC_NO_VALUE;
    kdc_pass_func_rebuild(f, repl, NULL, 0);
    free(repl);
    if (out_changed) *out_changed = true;
  }
  free(live);
}

kdc_status kdc_pass_dce(kdc_module *m, const kdc_pass_options *opt) {
  (void)opt;
  for (size_t i = 0; i < m->n_funcs; i++) kdc_pass_dce_func(m->funcs[i], NULL);
  return NULL;
}
