/*
 * codegen/epilogue.c: GEMM epilogues -- a kernel step moved right after the
 * GEMM step whose result it reads elementwise, flagged so that the runtime
 * runs it on each row panel of the GEMM's result while the panel is in
 * cache (kdc_prog_kernel_step.epilogue, docs/codegen.md "GEMM epilogues").
 * An optimizer update after its weight-gradient GEMM is the case that
 * matters: the update then reads dW from cache instead of memory.
 *
 * A kernel step t (root r) becomes the epilogue of GEMM step s (result D)
 * when
 *   - D reaches the kernel only through elementwise members of D's shape
 *     (so output row i reads row i of D and nothing else of it), and the
 *     kernel's rows are D's rows (batch 1, extent m, innermost dim n);
 *   - s < t and no step between them writes what t reads or writes, or
 *     reads what t writes (byte ranges of the step locations), and none is
 *     a LOOP (a body's steps address arena ranges the LOOP step does not
 *     list);
 *   - s has no epilogue yet.
 * The move keeps every other step's order, so the results are those of the
 * steps in their original order.  Steps are matched to nodes through
 * |node| (the value each step was lowered for).
 */
#include <stdlib.h>
#include <string.h>

#include "codegen/codegen.h"

typedef struct ranges {
  const kdc_prog_loc *r[64 + 8];
  uint32_t n;
} ranges;

static void add(ranges *x, const kdc_prog_loc *l) {
  if (x->n < sizeof x->r / sizeof *x->r) x->r[x->n++] = l;
}

static bool overlap(const kdc_prog_loc *a, const kdc_prog_loc *b) {
  return a->buf == b->buf && a->index == b->index && a->offset < b->offset + b->bytes &&
         b->offset < a->offset + a->bytes;
}

static bool any_overlap(const ranges *a, const ranges *b) {
  for (uint32_t i = 0; i < a->n; i++)
    for (uint32_t j = 0; j < b->n; j++)
      if (overlap(a->r[i], b->r[j])) return true;
  return false;
}

/* What step |s| reads and writes; false for a LOOP (not described by its
 * locations) or more locations than |ranges| holds. */
static bool step_ranges(const kdc_prog_step *s, ranges *rd, ranges *wr) {
  rd->n = wr->n = 0;
  switch (s->kind) {
  case KDC_STEP_KERNEL:
    if (s->kernel.n_args > 64) return false;
    for (uint32_t a = 0; a < s->kernel.n_args; a++)
      add(a < s->kernel.n_out ? wr : rd, &s->kernel.args[a]);
    return true;
  case KDC_STEP_GEMM: add(rd, &s->gemm.a), add(rd, &s->gemm.b), add(wr, &s->gemm.c); return true;
  case KDC_STEP_COPY: add(rd, &s->src), add(wr, &s->dst); return true;
  case KDC_STEP_COLLECTIVE: add(rd, &s->coll.src), add(wr, &s->coll.dst); return true;
  default: return false;
  }
}

static bool same_dims(const kdc_type *a, const kdc_type *b) {
  if (a->rank != b->rank) return false;
  for (int d = 0; d < a->rank; d++)
    if (a->dims[d] != b->dims[d]) return false;
  return true;
}

/* The GEMM value that kernel root |r| reads, only through elementwise
 * members of its shape, or KDC_NO_VALUE (also when it reads two GEMM
 * values).  |is_gemm[v]|: v is lowered as a GEMM step. */
static kdc_value_id elementwise_gemm(const kdc_func *f, kdc_value_id r, const bool *is_gemm) {
  int32_t g = f->nodes[r].group;
  const kdc_type *rt = &f->nodes[r].type;
  if (rt->rank < 2) return KDC_NO_VALUE;
  kdc_value_id d = KDC_NO_VALUE;
  bool *dep = kdc_xcalloc((size_t)r + 1, sizeof *dep); /* member reads D, maybe through others */
  bool ok = true;
  for (kdc_value_id m = 0; m <= r && ok; m++) {
    const kdc_node *nd = &f->nodes[m];
    if (m != r && (g < 0 || nd->group != g)) continue;
    for (int j = 0; j < nd->n_in && ok; j++) {
      kdc_value_id x = nd->in[j];
      if (is_gemm[x]) {
        if (d == KDC_NO_VALUE && same_dims(&f->nodes[x].type, rt)) d = x;
        ok = x == d;
        dep[m] = true;
      } else if (g >= 0 && f->nodes[x].group == g && dep[x]) {
        dep[m] = true;
      }
    }
    if (dep[m] && (!(kdc_op_flags(nd->op) & OPF_EW) || !same_dims(&nd->type, rt))) ok = false;
  }
  free(dep);
  return ok ? d : KDC_NO_VALUE;
}

void cg_attach_epilogues(const kdc_func *f, kdc_prog_step *steps, kdc_value_id *node,
                         size_t n_steps) {
  bool *is_gemm = kdc_xcalloc(f->n_nodes + 1, sizeof *is_gemm);
  for (size_t s = 0; s < n_steps; s++)
    if (steps[s].kind == KDC_STEP_GEMM) is_gemm[node[s]] = true;
  for (size_t t = 0; t < n_steps; t++) {
    if (steps[t].kind != KDC_STEP_KERNEL || steps[t].kernel.epilogue) continue;
    kdc_value_id d = elementwise_gemm(f, node[t], is_gemm);
    if (d == KDC_NO_VALUE) continue;
    size_t s = 0;
    while (s < t && !(steps[s].kind == KDC_STEP_GEMM && node[s] == d)) s++;
    if (s == t) continue;
    const kdc_prog_gemm_step *g = &steps[s].gemm;
    const kdc_type *rt = &f->nodes[node[t]].type;
    if (g->batch != 1 || g->m != steps[t].kernel.extent || g->n != rt->dims[rt->rank - 1] ||
        (s + 1 < n_steps && steps[s + 1].kind == KDC_STEP_KERNEL && steps[s + 1].kernel.epilogue))
      continue;
    ranges rt_rd, rt_wr, ru_rd, ru_wr;
    bool ok = step_ranges(&steps[t], &rt_rd, &rt_wr);
    for (size_t u = s + 1; u < t && ok; u++)
      ok = step_ranges(&steps[u], &ru_rd, &ru_wr) && !any_overlap(&ru_wr, &rt_rd) &&
           !any_overlap(&ru_wr, &rt_wr) && !any_overlap(&ru_rd, &rt_wr);
    if (!ok) continue;
    kdc_prog_step k = steps[t];
    kdc_value_id kn = node[t];
    memmove(&steps[s + 2], &steps[s + 1], (t - s - 1) * sizeof *steps);
    memmove(&node[s + 2], &node[s + 1], (t - s - 1) * sizeof *node);
    k.kernel.epilogue = true;
    steps[s + 1] = k;
    node[s + 1] = kn;
  }
  free(is_gemm);
}
