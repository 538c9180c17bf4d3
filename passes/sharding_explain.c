/*
 * passes/sharding_explain.c: `kdc inspect --explain NAME`.  Prints, for one
 * value, its sharding and for every (dim, axis) the chain of provenance
 * entries (ir.h "provenance table") back to the user rule it came from:
 *
 *   %5 {data,model}
 *     dim 0 axis data: <- %0 via dot_general %5 factor i (fwd, level 2, step 3)
 *                      <- user: input "x" batch dim over data
 *     dim 1 axis model: <- %1 via dot_general %5 factor j (fwd, level 2, step 4)
 *                      <- user: layout_map["d1/kernel"]
 *     partial model: reduction factor k of dot_general %7 is split on model
 *
 * Ids are those of |f| as it is now (partition remaps the entries).
 */
#include <stdio.h>

#include "passes/passes.h"

static void factor_name(FILE *out, int f) {
  if (f < 0) fputc('?', out);
  else if (f < 18) fputc('i' + f, out);
  else fprintf(out, "f%d", f);
}

static void chain(FILE *out, const kdc_module *m, const kdc_func *f, uint32_t e, int depth) {
  for (int guard = 0; e && guard < 1000; guard++) {
    const kdc_prov *p = &m->prov[e];
    fprintf(out, "%s", guard ? "\n                  " : "");
    if (p->kind == KDC_PROV_USER) {
      fprintf(out, "<- user: %s", p->text ? p->text : "?");
      return;
    }
    if (p->kind == KDC_PROV_PARTIAL) {
      fprintf(out, "partial: reduction factor ");
      factor_name(out, p->factor);
      fprintf(out, " of %s %%%u is split on this axis", kdc_op_name(f->nodes[p->op].op), p->op);
      return;
    }
    fprintf(out, "<- %%%u via %s %%%u factor ", p->source,
            p->op < f->n_nodes ? kdc_op_name(f->nodes[p->op].op) : "?", p->op);
    factor_name(out, p->factor);
    fprintf(out, " (%s, level %d, step %d)", p->backward ? "bwd" : "fwd", p->level, p->step);
    uint32_t next = p->parent;
    if (!next && p->source != KDC_NO_VALUE) next = kdc_ir_prov_find(m, f, p->source, -1, -1);
    e = next;
  }
  (void)depth;
}

kdc_status kdc_sharding_explain(const kdc_module *m, const kdc_func *f, kdc_value_id v, FILE *out) {
  if (v >= f->n_nodes)
    return KDC_ERR(KDC_INVALID_INPUT, "explain: func @%s has no value %%%u", f->name, v);
  const kdc_sharding *s = &f->nodes[v].sharding;
  fprintf(out, "%%%u ", v);
  if (!s->present) {
    fputs("has no sharding (run seed_shardings and propagate_shardings first)\n", out);
    return NULL;
  }
  kdc_ir_print_sharding(out, m, s);
  fputc('\n', out);
  bool any = false;
  for (int d = 0; d < s->rank; d++)
    for (int k = 0; k < s->naxes[d]; k++) {
      int a = s->axes[d][k];
      fprintf(out, "  dim %d axis %s: ", d, m->mesh.names[a]);
      chain(out, m, f, kdc_ir_prov_find(m, f, v, d, a), 0);
      fputc('\n', out);
      any = true;
    }
  for (int a = 0; a < m->mesh.naxes; a++)
    if (s->partial & (1u << a)) {
      fprintf(out, "  partial %s: ", m->mesh.names[a]);
      chain(out, m, f, kdc_ir_prov_find(m, f, v, -1, a), 0);
      fputc('\n', out);
      any = true;
    }
  if (!any) {
    uint32_t u = kdc_ir_prov_find(m, f, v, -1, -1);
    fputs("  replicated", out);
    if (u) fprintf(out, " (user: %s)", m->prov[u].text ? m->prov[u].text : "?");
    fputc('\n', out);
  }
  return NULL;
}
