/*
 * passes/simplify.c: the "simplify" pipeline step.
 *
 * Runs algebra, fold, cse and dce over each function until a round changes
 * nothing, at most simplify_max_rounds rounds (each round only shrinks or
 * folds the graph, so the bound is a safety net, not a tuning knob).  Each
 * rewrite lives in its own file; this one only orders them:
 *   algebra first (x*1 exposes more CSE), fold next (folding needs operands
 *   already simplified), cse, then merge_scans (scans over operands cse
 *   made the same), then dce (merging leaves dead duplicates).  Last, the
 *   scan bodies merge_scans left without a scan leave the module.
 */
#include <stdlib.h>

#include "passes/passes.h"

kdc_status kdc_pass_simplify(kdc_module *m, const kdc_pass_options *opt) {
  int rounds = kdc_pass_opt_simplify_rounds(opt);
  size_t n0 = m->n_funcs;
  bool *was_body = kdc_xmalloc((n0 ? n0 : 1) * sizeof *was_body);
  for (size_t i = 0; i < n0; i++) was_body[i] = kdc_ir_func_is_body(m, m->funcs[i]);
  for (size_t i = 0; i < m->n_funcs; i++) {
    kdc_func *f = m->funcs[i];
    for (int r = 0; r < rounds; r++) {
      bool changed = false;
      kdc_pass_algebra_func(f, &changed);
      kdc_status st = kdc_pass_fold_func(f, opt, &changed);
      if (st) {
        free(was_body);
        return st;
      }
      kdc_pass_cse_func(f, &changed);
      kdc_pass_merge_scans_func(f, &changed);
      kdc_pass_dce_func(f, &changed);
      if (!changed) break;
    }
  }
  kdc_pass_drop_dead_bodies(m, was_body, n0);
  free(was_body);
  return NULL;
}
