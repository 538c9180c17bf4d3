/* Modules, functions and the raw node store. */
#include <stdlib.h>
#include <string.h>

#include "ir/ir.h"

kdc_module *kdc_ir_module_create(const char *name) {
  kdc_arena *a = kdc_arena_create();
  kdc_module *m = kdc_arena_alloc(a, sizeof *m);
  m->arena = a;
  m->name = kdc_arena_strdup(a, name ? name : "model");
  m->weight_index = kdc_xcalloc(1, sizeof *m->weight_index);
  return m;
}

static void func_free(kdc_func *f) {
  free(f->nodes);
  free(f->params);
  free(f->results);
  free(f->result_names);
  kdc_status_free(f->error);
}

void kdc_ir_module_destroy(kdc_module *m) {
  if (!m) return;
  for (size_t i = 0; i < m->n_funcs; i++) func_free(m->funcs[i]);
  free(m->funcs);
  free(m->weights);
  kdc_strindex_free(m->weight_index);
  free(m->weight_index);
  kdc_arena_destroy(m->arena);
}

kdc_func *kdc_ir_func_create(kdc_module *m, const char *name) {
  kdc_func *f = kdc_arena_alloc(m->arena, sizeof *f);
  f->module = m;
  f->name = kdc_arena_strdup(m->arena, name);
  KDC_GROW(m->funcs, m->cap_funcs, m->n_funcs + 1);
  m->funcs[m->n_funcs++] = f;
  return f;
}

void kdc_ir_func_remove(kdc_module *m, kdc_func *f) {
  for (size_t i = 0; i < m->n_funcs; i++) {
    if (m->funcs[i] != f) continue;
    func_free(f);
    memmove(&m->funcs[i], &m->funcs[i + 1], (m->n_funcs - i - 1) * sizeof *m->funcs);
    m->n_funcs--;
    return;
  }
}

kdc_func *kdc_ir_module_find_func(const kdc_module *m, const char *name) {
  for (size_t i = 0; i < m->n_funcs; i++)
    if (strcmp(m->funcs[i]->name, name) == 0) return m->funcs[i];
  return NULL;
}

kdc_weight *kdc_ir_module_add_weight(kdc_module *m, const char *name, const kdc_type *t,
                                     const void *data) {
  KDC_GROW(m->weights, m->cap_weights, m->n_weights + 1);
  kdc_weight *w = &m->weights[m->n_weights++];
  memset(w, 0, sizeof *w);
  w->name = kdc_arena_strdup(m->arena, name);
  w->type = *t;
  w->trainable = true;
  if (data) w->data = kdc_arena_memdup(m->arena, data, kdc_type_bytes(t));
  kdc_strindex_add(m->weight_index, w->name, (uint32_t)(m->n_weights - 1));
  return w;
}

kdc_weight *kdc_ir_module_find_weight(const kdc_module *m, const char *name) {
  int64_t i = kdc_strindex_get(m->weight_index, name);
  return i >= 0 ? &m->weights[i] : NULL;
}

#ifdef KDC_CHECK_NODE_MOVES
/* Sanitizer builds: the node array moves on appends far more often than
 * doubling would move it (every append up to 1024 nodes, then every 64th),
 * so code that keeps a kdc_ir_node/kdc_ir_type pointer across an append
 * reads freed memory, which AddressSanitizer reports, instead of working
 * by luck until a growth lands inside that window. */
static void move_nodes(kdc_func *f) {
  if (f->n_nodes >= 1024 && f->n_nodes % 64) return;
  if (!f->cap_nodes) return;
  kdc_node *moved = kdc_xmalloc(f->cap_nodes * sizeof *moved);
  memcpy(moved, f->nodes, f->n_nodes * sizeof *moved);
  free(f->nodes);
  f->nodes = moved;
}
#endif

kdc_value_id kdc_ir_append(kdc_func *f, kdc_op op, const kdc_type *t, int n_in,
                           const kdc_value_id *in, const kdc_attrs *attr) {
  /* |t| and |attr| may point into f->nodes (kdc_ir_type(f, x)): copied
   * before the array can move */
  const kdc_type type = *t;
  kdc_attrs attrs;
  if (attr) attrs = *attr;
#ifdef KDC_CHECK_NODE_MOVES
  move_nodes(f);
#endif
  KDC_GROW(f->nodes, f->cap_nodes, f->n_nodes + 1);
  kdc_node *n = &f->nodes[f->n_nodes];
  memset(n, 0, sizeof *n);
  n->op = op;
  n->type = type;
  n->n_in = n_in;
  if (n_in > 0) n->in = kdc_arena_memdup(f->module->arena, in, sizeof(kdc_value_id) * (size_t)n_in);
  if (attr) n->attr = attrs;
  n->group = -1;
  n->mem_offset = -1;
  n->origin = f->cur_origin;
  kdc_value_id id = (kdc_value_id)f->n_nodes++;
  if (op == KDC_OP_PARAMETER) {
    int idx = n->attr.param.index;
    if (idx >= 0) {
      KDC_GROW(f->params, f->cap_params, (size_t)idx + 1);
      while (f->n_params <= (size_t)idx) f->params[f->n_params++] = KDC_NO_VALUE;
      f->params[idx] = id;
    }
  }
  return id;
}

void kdc_ir_add_result(kdc_func *f, kdc_value_id v, const char *name) {
  size_t cap = f->cap_results;
  KDC_GROW(f->results, f->cap_results, f->n_results + 1);
  if (cap != f->cap_results)
    f->result_names = kdc_xrealloc(f->result_names, f->cap_results * sizeof(char *));
  f->results[f->n_results] = v;
  f->result_names[f->n_results++] = name ? kdc_arena_strdup(f->module->arena, name) : NULL;
}

void kdc_ir_count_uses(const kdc_func *f, uint32_t *out_uses) {
  memset(out_uses, 0, f->n_nodes * sizeof *out_uses);
  for (size_t i = 0; i < f->n_nodes; i++)
    for (int j = 0; j < f->nodes[i].n_in; j++) out_uses[f->nodes[i].in[j]]++;
  for (size_t i = 0; i < f->n_results; i++) out_uses[f->results[i]]++;
}
