/*
 * The sharding provenance table (ir.h "provenance table"): one module-wide
 * array of kdc_prov entries in the module's arena.  Entry 0 is a sentinel so
 * that kdc_sharding.origin == 0 means "no provenance".  The table only grows;
 * a grown array is copied into a new arena block (the old one stays until the
 * module dies, an amortised 2x overhead).
 */
#include <string.h>

#include "ir/ir.h"

uint32_t kdc_ir_prov_add(kdc_module *m, const kdc_prov *e) {
  if (m->n_prov == 0) m->n_prov = 1; /* entry 0: none */
  if (m->n_prov + 1 > m->cap_prov) {
    size_t cap = m->cap_prov ? 2 * m->cap_prov : 64;
    kdc_prov *p = kdc_arena_alloc(m->arena, cap * sizeof *p);
    if (m->prov) memcpy(p, m->prov, m->n_prov * sizeof *p);
    else memset(p, 0, sizeof *p);
    m->prov = p;
    m->cap_prov = cap;
  }
  kdc_prov *d = &m->prov[m->n_prov];
  *d = *e;
  if (e->text) d->text = kdc_arena_strdup(m->arena, e->text);
  KDC_ASSERT(m->n_prov < UINT32_MAX);
  return (uint32_t)m->n_prov++;
}

uint32_t kdc_ir_prov_add_user(kdc_module *m, const kdc_func *f, kdc_value_id v,
                              const char *text) {
  kdc_prov e;
  memset(&e, 0, sizeof e);
  e.kind = KDC_PROV_USER;
  e.func = f;
  e.value = v;
  e.dim = -1;
  e.axis = -1;
  e.text = text;
  e.source = e.op = KDC_NO_VALUE;
  e.factor = -1;
  return kdc_ir_prov_add(m, &e);
}

uint32_t kdc_ir_prov_find(const kdc_module *m, const kdc_func *f, kdc_value_id v, int dim,
                          int axis) {
  uint32_t user = 0;
  for (size_t i = m->n_prov; i-- > 1;) {
    const kdc_prov *e = &m->prov[i];
    if (e->func != f || e->value != v) continue;
    if (e->dim == dim && e->axis == axis) return (uint32_t)i;
    if (e->kind == KDC_PROV_USER && e->axis < 0 && !user) user = (uint32_t)i;
  }
  return user;
}
