/*
 * passes/merge_scans.c: one loop for two scans that run the same carries.
 *
 * A training step runs a recurrent layer's forward scan (y_t = h) and, for
 * its gradient, the residual scan "<body>.res" (passes/grad_scan.c: the same
 * body over the same operands, y_t = the input carries).  Both walk the same
 * carry chain, so the second one recomputes every step of the first.  Here
 * two scans a (earlier) and b of one function with the same operands, length
 * and carry and sequence counts become ONE scan over a merged body:
 *   the body of a and the body of b cloned over the same parameters, then
 *   CSE'd (passes/cse.c); when every carry of b is then the very value of
 *   a's carry, the merged body returns a's carries and y_t = [y_a, y_b]
 *   packed side by side (kdc_pass_pack: dim 0 kept when both ys share it,
 *   the last dim when both end in the same F > 1, so the scan sharding rule
 *   still splits the batch and the units); a and b become slices of it.
 * Otherwise (a body with random ops, which CSE never merges, or different
 * carries) the merged body is dropped and nothing changes.  The merged scan
 * takes a's place (its operands precede a).  The old bodies stay in the
 * module until kdc_pass_drop_dead_bodies (simplify's last step) removes the
 * ones no scan names.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "passes/passes.h"

static bool same_scan_operands(const kdc_node *a, const kdc_node *b) {
  if (a->n_in != b->n_in || a->attr.scan.length != b->attr.scan.length ||
      a->attr.scan.n_carry != b->attr.scan.n_carry || a->attr.scan.n_xs != b->attr.scan.n_xs ||
      strcmp(a->attr.scan.body, b->attr.scan.body) == 0)
    return false;
  for (int i = 0; i < a->n_in; i++)
    if (a->in[i] != b->in[i]) return false;
  return true;
}

/* The common dim 0 of |a| and |b|, or 1. */
static int64_t common_lead(const kdc_type *a, const kdc_type *b) {
  return a->rank >= 1 && b->rank >= 1 && a->dims[0] == b->dims[0] ? a->dims[0] : 1;
}

/* The common last dim F > 1 of |a| and |b| (rank >= 2 each), or 1. */
static int64_t common_feat(const kdc_type *a, const kdc_type *b) {
  if (a->rank < 2 || b->rank < 2) return 1;
  int64_t F = a->dims[a->rank - 1];
  return F > 1 && b->dims[b->rank - 1] == F ? F : 1;
}

/* The merged body of scans |a| and |b| (bodies |ba|, |bb|), or NULL when
 * their carries are not provably the same; |*lead|, |*F| receive the
 * packing of its y. */
static kdc_func *merged_body(kdc_module *m, const kdc_node *a, const kdc_func *ba,
                             const kdc_func *bb, int64_t *lead, int64_t *F) {
  int nc = (int)a->attr.scan.n_carry, ni = a->n_in;
  if (ni > 64 || ba->n_params != (size_t)ni || bb->n_params != (size_t)ni ||
      ba->n_results != (size_t)nc + 1 || bb->n_results != (size_t)nc + 1)
    return NULL;
  char name[256];
  for (int k = 1;; k++) {
    snprintf(name, sizeof name, k == 1 ? "%s.m" : "%s.m%d", ba->name, k);
    if (!kdc_ir_module_find_func(m, name)) break;
  }
  kdc_func *mb = kdc_ir_func_create(m, name);
  kdc_value_id args[64];
  for (int i = 0; i < ni; i++) {
    const kdc_node *p = &ba->nodes[ba->params[i]];
    args[i] = kdc_ir_parameter(mb, p->attr.param.kind, p->attr.param.name, &p->type);
    mb->nodes[args[i]].attr.param.gate_packed = p->attr.param.gate_packed;
  }
  kdc_value_id *ma = kdc_xmalloc((ba->n_nodes + bb->n_nodes + 1) * sizeof *ma), *mbm = ma + ba->n_nodes;
  kdc_pass_clone_body(mb, ba, args, ma);
  kdc_pass_clone_body(mb, bb, args, mbm);
  const kdc_type *ya = &ba->nodes[ba->results[nc]].type, *yb = &bb->nodes[bb->results[nc]].type;
  *lead = common_lead(ya, yb);
  *F = common_feat(ya, yb);
  kdc_value_id ys[2] = {ma[ba->results[nc]], mbm[bb->results[nc]]};
  for (int i = 0; i < nc; i++) kdc_ir_add_result(mb, ma[ba->results[i]], ba->result_names[i]);
  for (int i = 0; i < nc; i++) kdc_ir_add_result(mb, mbm[bb->results[i]], "check");
  kdc_ir_add_result(mb, kdc_pass_pack(mb, 2, ys, *lead, *F), "y");
  free(ma);
  bool ok = !mb->error && !ba->error && !bb->error;
  if (ok) {
    kdc_pass_cse_func(mb, NULL);
    for (int i = 0; i < nc && ok; i++) ok = mb->results[i] == mb->results[nc + i];
  }
  if (!ok) {
    kdc_ir_func_remove(m, mb);
    return NULL;
  }
  mb->results[nc] = mb->results[2 * nc];
  mb->result_names[nc] = "y";
  mb->n_results = (size_t)nc + 1;
  kdc_pass_dce_func(mb, NULL);
  return mb;
}

/* Merges scan |b| into the earlier scan |a| when their bodies allow it. */
static bool merge_pair(kdc_func *f, kdc_value_id a, kdc_value_id b) {
  kdc_module *m = f->module;
  const kdc_func *ba = kdc_ir_scan_body(f, a), *bb = kdc_ir_scan_body(f, b);
  if (!ba || !bb || ba == f || bb == f) return false;
  int64_t lead, F;
  kdc_func *mb = merged_body(m, &f->nodes[a], ba, bb, &lead, &F);
  if (!mb) return false;
  const kdc_type ya = ba->nodes[ba->results[f->nodes[a].attr.scan.n_carry]].type;
  const kdc_type yb = bb->nodes[bb->results[f->nodes[b].attr.scan.n_carry]].type;
  size_t n_old = f->n_nodes;
  kdc_node an = f->nodes[a];
  kdc_value_id in[64];
  for (int i = 0; i < an.n_in; i++) in[i] = an.in[i];
  const char *saved = f->cur_origin;
  f->cur_origin = an.origin;
  kdc_value_id s = kdc_ir_scan(f, mb, an.attr.scan.length, (int)an.attr.scan.n_carry,
                               (int)an.attr.scan.n_xs, an.n_in, in);
  int64_t T = an.attr.scan.length, ka = kdc_type_numel(&ya) / lead / F;
  kdc_value_id ra = kdc_pass_piece(f, s, 0, T, 0, &ya, lead, false, F);
  f->cur_origin = f->nodes[b].origin;
  kdc_value_id rb = kdc_pass_piece(f, s, 0, T, ka, &yb, lead, false, F);
  f->cur_origin = saved;
  if (f->error) return false; /* sticky: reported by the pipeline */
  size_t n = f->n_nodes, k = 0;
  kdc_value_id *repl = kdc_xmalloc(n * sizeof *repl), *order = kdc_xmalloc(n * sizeof *order);
  for (size_t i = 0; i < n; i++) repl[i] = (kdc_value_id)i;
  repl[a] = ra;
  repl[b] = rb;
  for (size_t i = 0; i < n_old; i++) {
    if (i == a) /* the merged scan and both slices take a's place */
      for (size_t j = n_old; j < n; j++) order[k++] = (kdc_value_id)j;
    else if (i != b)
      order[k++] = (kdc_value_id)i;
  }
  kdc_pass_func_rebuild(f, repl, order, k);
  free(repl);
  free(order);
  return true;
}

void kdc_pass_merge_scans_func(kdc_func *f, bool *out_changed) {
  if (!f->module) return;
  for (size_t b = 0; b < f->n_nodes; b++) {
    if (f->nodes[b].op != KDC_OP_SCAN) continue;
    for (size_t a = 0; a < b; a++) {
      if (f->nodes[a].op != KDC_OP_SCAN || !same_scan_operands(&f->nodes[a], &f->nodes[b]))
        continue;
      if (merge_pair(f, (kdc_value_id)a, (kdc_value_id)b)) {
        if (out_changed) *out_changed = true;
        b = 0; /* ids moved: look again from the start */
        break;
      }
    }
  }
}

void kdc_pass_drop_dead_bodies(kdc_module *m, const bool *was_body, size_t n) {
  kdc_func **dead = kdc_xmalloc((n ? n : 1) * sizeof *dead);
  size_t nd = 0;
  for (size_t i = 0; i < n; i++)
    if (was_body[i] && !kdc_ir_func_is_body(m, m->funcs[i])) dead[nd++] = m->funcs[i];
  for (size_t i = 0; i < nd; i++) kdc_ir_func_remove(m, dead[i]);
  free(dead);
}
