/*
 * frontend/distribute.c: Keras distribution semantics applied while
 * lowering (KERAS.md 1.5-1.6): the user shardings the sharding passes start
 * from.
 *   - model inputs: dim 0 split over batch_dim_name (ModelParallel) or over
 *     every mesh axis (DataParallel without a layout file), the rest
 *     replicated;
 *   - variables: layout_map[path] (exact key, then regex), else replicated;
 *   - layer outputs (ModelParallel only): layout_map["<layer path>/output"]
 *     becomes a sharding_constraint node after the layer.
 * Every user sharding is closed and carries a provenance entry naming the rule
 * it came from, for `kdc inspect --explain`.  Without a mesh nothing happens.
 */
#include <string.h>

#include "frontend/frontend.h"
#include "frontend/layout.h"

static bool active(const kdc_lower_ctx *c) {
  return c->mesh && c->mesh->naxes > 0;
}

/* The provenance text of |path|'s rule: `layout_map["key"]`, or NULL. */
static kdc_status rule_text(const kdc_lower_ctx *c, const char *path, char *buf, size_t n,
                            bool *found) {
  int rule = -1;
  *found = false;
  if (!c->layout) return NULL;
  KDC_RETURN_IF_ERROR(kdc_layout_lookup(c->layout, path, &rule));
  if (rule < 0) return NULL;
  *found = true;
  snprintf(buf, n, "%s: layout_map[\"%s\"]", kdc_layout_filename(c->layout),
           kdc_layout_rule_key(c->layout, (size_t)rule));
  return NULL;
}

kdc_status kdc_fe_shard_input(kdc_lower_ctx *c, const kdc_keras_layer *l, kdc_value_id v) {
  if (!active(c) || v == KDC_NO_VALUE) return NULL;
  kdc_node *n = kdc_ir_node(c->f, v);
  kdc_status st = kdc_layout_data_sharding(c->layout, c->mesh, l->name, n->type.rank,
                                           n->type.dims, &n->sharding);
  if (st) return kdc_status_annotate(st, "%s: %s (InputLayer \"%s\")", kdc_fe_file(c->top), l->loc, l->name);
  char text[512];
  const char *bd = c->layout ? kdc_layout_batch_dim_name(c->layout) : NULL;
  if (c->layout)
    snprintf(text, sizeof text, "input \"%s\": batch dim over batch_dim_name=%s", l->name,
             bd ? bd : c->mesh->names[0]);
  else
    snprintf(text, sizeof text, "input \"%s\": batch dim over every mesh axis (DataParallel)", l->name);
  n->sharding.origin = kdc_ir_prov_add_user(c->mod, c->f, v, text);
  return NULL;
}

kdc_status kdc_fe_shard_weight(kdc_lower_ctx *c, const kdc_keras_var *var, kdc_value_id v) {
  if (!active(c) || v == KDC_NO_VALUE) return NULL;
  kdc_node *n = kdc_ir_node(c->f, v);
  bool found = false;
  KDC_RETURN_IF_ERROR(kdc_layout_resolve(c->layout, c->mesh, var->path, n->type.rank,
                                         n->type.dims, &n->sharding, &found));
  char text[512];
  bool has_rule = false;
  KDC_RETURN_IF_ERROR(rule_text(c, var->path, text, sizeof text, &has_rule));
  if (!has_rule)
    snprintf(text, sizeof text, c->layout ? "replicated: no layout rule matches \"%s\""
                                          : "replicated: DataParallel (\"%s\")", var->path);
  n->sharding.origin = kdc_ir_prov_add_user(c->mod, c->f, v, text);
  return NULL;
}

kdc_status kdc_fe_constrain_output(kdc_lower_ctx *c, const kdc_keras_layer *l, kdc_value_id *v) {
  if (!active(c) || !c->layout || *v == KDC_NO_VALUE) return NULL;
  const char *path = kdc_arena_printf(c->mod->arena, "%s/output", l->path);
  char text[512];
  bool found = false;
  KDC_RETURN_IF_ERROR(rule_text(c, path, text, sizeof text, &found));
  if (!found) return NULL;
  const kdc_type *t = kdc_ir_type(c->f, *v);
  kdc_sharding s;
  bool resolved = false;
  kdc_status st = kdc_layout_resolve(c->layout, c->mesh, path, t->rank, t->dims, &s, &resolved);
  if (st) return kdc_status_annotate(st, "%s: %s (%s \"%s\")", kdc_fe_file(c->top), l->loc, l->class_name, l->name);
  kdc_type ty = *t;
  kdc_value_id in = *v;
  kdc_value_id out = kdc_ir_append(c->f, KDC_OP_SHARDING_CONSTRAINT, &ty, 1, &in, NULL);
  kdc_ir_node(c->f, out)->sharding = s;
  kdc_ir_node(c->f, out)->sharding.origin = kdc_ir_prov_add_user(c->mod, c->f, out, text);
  *v = out;
  return NULL;
}
