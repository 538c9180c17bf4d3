/*
 * passes/simplify.c: the "simplify" pipeline step.
 *
 * Runs algebra, fold, cse and dce over each function until a round changes
 * nothing, at most simplify_max_rounds rounds (each round only shrinks or
 * folds the graph, so the bound is a safety net, not a tuning knob).  Each
 * rewrite lives in its own file; this one only orders them:
 *   algebra first (x*1 exposes more CSE), fold next (folding needs operands
 *   already simplified), cse then dce (merging leaves dead duplicates).
 */
#include "passes/passes.h"

kdc_status kdc_pass_simplify(kdc_module *m, const kdc_pass_options *opt) {
  int rounds = kdc_pass_opt_simplify_rounds(opt);
  for (size_t i = 0; i < m->n_funcs; i++) {
    kdc_func *f = m->funcs[i];
    for (int r = 0; r < rounds; r++) {
      bool changed = false;
      kdc_pass_algebra_func(f, &changed);
      KDC_RETURN_IF_ERROR(kdc_pass_fold_func(f, opt, &changed));
      kdc_pass_cse_func(f, &changed);
      kdc_pass_dce_func(f, &changed);
      if (!changed) break;
    }
  }
  return NULL;
}
