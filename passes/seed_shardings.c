/*
 * passes/seed_shardings.c: the starting point of sharding propagation.
 *
 * User shardings arrive already attached by the frontend (frontend/layout.h):
 * parameter nodes carry closed shardings (layout_map rules, batch_dim_name,
 * data-parallel defaults), sharding_constraint nodes carry `<layer>/output`
 * layouts.  This pass
 *   - records a USER provenance entry for each of them (unless the frontend
 *     already did, kdc_sharding.origin != 0), with a text naming the rule:
 *     `layout_map["d1/kernel"]`, `input "x" batch dim over data`,
 *     `replicated: no layout rule for "d2/bias"`, `"<loc>" output layout`;
 *   - closes every dim of a parameter sharding (a user sharding is final);
 *     a constraint keeps its own `?` dims open;
 *   - gives every other value an open, unsplit sharding (so earlier
 *     shardings of intermediate values never leak in; a parameter without a
 *     sharding becomes open too and propagation may split it).
 * Without a mesh, or on a 1-device mesh, it changes nothing.
 */
#include <stdio.h>
#include <string.h>

#include "passes/passes.h"

static void axes_text(const kdc_mesh *m, const kdc_sharding *s, int d, char *buf, size_t n) {
  size_t k = 0;
  buf[0] = 0;
  for (int i = 0; i < s->naxes[d] && k < n; i++)
    k += (size_t)snprintf(buf + k, n - k, i ? ",%s" : "%s", m->names[s->axes[d][i]]);
}

static void user_text(const kdc_module *m, const kdc_node *n, char *buf, size_t len) {
  const kdc_sharding *s = &n->sharding;
  bool split = kdc_sharding_used_mask(s) != 0;
  const char *name = n->attr.param.name ? n->attr.param.name : "";
  char ax[256];
  if (n->op == KDC_OP_SHARDING_CONSTRAINT) {
    if (n->origin) snprintf(buf, len, "\"%s\" output layout", n->origin);
    else snprintf(buf, len, "sharding_constraint");
  } else if (n->attr.param.kind == KDC_PARAM_WEIGHT) {
    if (split) snprintf(buf, len, "layout_map[\"%s\"]", name);
    else snprintf(buf, len, "replicated: no layout rule for \"%s\"", name);
  } else if (n->attr.param.kind == KDC_PARAM_STATE) {
    snprintf(buf, len, "state \"%s\"", name);
  } else if (s->rank > 0 && s->naxes[0] > 0) {
    axes_text(&m->mesh, s, 0, ax, sizeof ax);
    snprintf(buf, len, "%s \"%s\" batch dim over %s",
             n->attr.param.kind == KDC_PARAM_LABEL ? "label" : "input", name, ax);
  } else {
    snprintf(buf, len, "%s \"%s\" replicated",
             n->attr.param.kind == KDC_PARAM_LABEL ? "label" : "input", name);
  }
}

static void seed_func(kdc_module *m, kdc_func *f) {
  for (size_t i = 0; i < f->n_nodes; i++) {
    kdc_node *n = &f->nodes[i];
    bool user = n->sharding.present &&
                (n->op == KDC_OP_PARAMETER || n->op == KDC_OP_SHARDING_CONSTRAINT);
    if (!user) {
      kdc_sharding s = kdc_sharding_replicated(n->type.rank);
      s.open_mask = (uint8_t)((1u << n->type.rank) - 1);
      n->sharding = s;
      continue;
    }
    if (n->op == KDC_OP_PARAMETER) n->sharding.open_mask = 0;
    if (n->sharding.origin == 0 || n->sharding.origin >= m->n_prov) {
      char text[512];
      user_text(m, n, text, sizeof text);
      n->sharding.origin = kdc_ir_prov_add_user(m, f, (kdc_value_id)i, text);
    }
  }
}

kdc_status kdc_pass_seed_shardings(kdc_module *m, const kdc_pass_options *opt) {
  (void)opt;
  if (m->mesh.naxes == 0 || kdc_mesh_devices(&m->mesh) <= 1) return NULL;
  for (size_t i = 0; i < m->n_funcs; i++) seed_func(m, m->funcs[i]);
  return NULL;
}
