/*
 * The IR verifier (kdc_ir_verify, kdc_ir_verify_module): the invariants every
 * pass may assume and must preserve.
 *
 * Per node: a known op; a well-formed type (rank <= KDC_MAX_RANK, dims >= 0);
 * the op's arity; operands defined earlier (SSA order, so node order is a
 * topological order); enum attributes in range and constant data present;
 * the result type equal to kdc_ir_infer_type's (which checks every dim list:
 * ranges, permutations, slice bounds, dot dims); SPMD ops' mesh axes (in
 * the mesh, distinct) and their exact group-size factor between operand and
 * result dims; a sharding_constraint carries a sharding; a sharding, when present,
 * that fits the type and the mesh (each axis used once per value, partial
 * and replicated axes disjoint from the split ones); group >= -1 and
 * mem_offset >= -1.
 * Per function: f->params lists exactly the PARAMETER nodes, params[i]
 * having index i; results are defined values; the fusion group contract of
 * ir.h (only a group's root, its highest id, may be used outside the group
 * or returned; parameters, constants and dots are never in a group).
 * Per module: a valid mesh, unique function and weight names, and every
 * `weight` parameter naming a module weight of the same type (or, after
 * partitioning, of the local type its sharding gives that weight).
 *
 * Errors are KDC_INVALID_INPUT statuses (the pass manager re-labels failures
 * after a pass as internal) and name the function, the value, the op and the
 * origin: `func @predict: %3 = dot_general (loc "d1"): <what is wrong>`.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/ir.h"

static kdc_status bad(const kdc_func *f, kdc_value_id v, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static kdc_status bad(const kdc_func *f, kdc_value_id v, const char *fmt, ...) {
  char msg[512], where[384];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  const char *fname = f->name ? f->name : "";
  if (v == KDC_NO_VALUE || v >= f->n_nodes) {
    snprintf(where, sizeof where, "func @%s", fname);
  } else {
    const kdc_node *n = &f->nodes[v];
    int k = snprintf(where, sizeof where, "func @%s: %%%u = %s", fname, v, kdc_op_name(n->op));
    if (n->origin && k > 0 && (size_t)k < sizeof where)
      snprintf(where + k, sizeof where - (size_t)k, " (loc \"%s\")", n->origin);
  }
  return KDC_ERR(KDC_INVALID_INPUT, "%s: %s", where, msg);
}

static kdc_status check_type(const kdc_func *f, kdc_value_id v, const kdc_type *t) {
  if ((unsigned)t->dtype >= KDC_DTYPE_COUNT) return bad(f, v, "bad dtype %d", (int)t->dtype);
  if (t->rank < 0 || t->rank > KDC_MAX_RANK) return bad(f, v, "bad rank %d", t->rank);
  for (int i = 0; i < t->rank; i++)
    if (t->dims[i] < 0) return bad(f, v, "negative dim %d", i);
  return NULL;
}

/* SPMD ops: axes in the mesh and distinct, and the exact group-size factor
 * between operand and result dims that kdc_ir_infer_type cannot check. */
static kdc_status check_coll(const kdc_func *f, kdc_value_id v) {
  const kdc_node *n = &f->nodes[v];
  const kdc_attr_coll *c = &n->attr.coll;
  const kdc_mesh *m = &f->module->mesh;
  if (n->op == KDC_OP_SHARDING_CONSTRAINT) {
    if (!n->sharding.present) return bad(f, v, "sharding_constraint without a sharding");
    return NULL;
  }
  if (c->naxes < 0 || c->naxes > KDC_MAX_MESH_AXES) return bad(f, v, "bad axis count %d", c->naxes);
  if (n->op == KDC_OP_COLLECTIVE_PERMUTE && c->naxes != 1)
    return bad(f, v, "collective_permute takes exactly one mesh axis, got %d", c->naxes);
  unsigned seen = 0;
  for (int i = 0; i < c->naxes; i++) {
    if (c->axes[i] >= m->naxes) return bad(f, v, "axis %d is not in the mesh", c->axes[i]);
    if (seen & (1u << c->axes[i])) return bad(f, v, "mesh axis '%s' listed twice", m->names[c->axes[i]]);
    seen |= 1u << c->axes[i];
  }
  int64_t k = kdc_mesh_axes_size(m, c->naxes, c->axes);
  const kdc_type *x = &f->nodes[n->in[0]].type, *r = &n->type;
  int64_t want_x = 0, want_r = 0, d = c->dim;
  switch (n->op) {
  case KDC_OP_ALL_GATHER: want_x = x->dims[d], want_r = x->dims[d] * k; break;
  case KDC_OP_REDUCE_SCATTER:
  case KDC_OP_SHARD_SLICE: want_x = r->dims[d] * k, want_r = r->dims[d]; break;
  case KDC_OP_ALL_TO_ALL:
    if (c->dim != c->dim2 && (x->dims[d] != r->dims[d] * k || r->dims[c->dim2] != x->dims[c->dim2] * k))
      return bad(f, v, "all_to_all over a group of %lld: split dim %lld %lld -> %lld, concat dim %lld "
                 "%lld -> %lld", (long long)k, (long long)d, (long long)x->dims[d],
                 (long long)r->dims[d], (long long)c->dim2, (long long)x->dims[c->dim2],
                 (long long)r->dims[c->dim2]);
    return NULL;
  default: return NULL;
  }
  if (x->dims[d] != want_x || r->dims[d] != want_r)
    return bad(f, v, "dim %lld: %lld -> %lld does not match a group of %lld devices", (long long)d,
               (long long)x->dims[d], (long long)r->dims[d], (long long)k);
  return NULL;
}

/* Enum ranges and payloads that kdc_ir_infer_type does not look at. */
static kdc_status check_attrs(const kdc_func *f, kdc_value_id v) {
  const kdc_node *n = &f->nodes[v];
  const kdc_attrs *a = &n->attr;
  if (kdc_op_flags(n->op) & OPF_COLL) return NULL; /* check_coll, after the type check */
  switch (n->op) {
  case KDC_OP_PARAMETER:
    if ((unsigned)a->param.kind > KDC_PARAM_STATE)
      return bad(f, v, "bad parameter kind %d", (int)a->param.kind);
    return NULL;
  case KDC_OP_CONSTANT:
    if (!a->constant.data) return bad(f, v, "constant without data");
    return NULL;
  case KDC_OP_COMPARE:
    if ((unsigned)a->cmp > KDC_CMP_GE) return bad(f, v, "bad comparison %d", (int)a->cmp);
    return NULL;
  case KDC_OP_REDUCE:
    if ((unsigned)a->reduce.kind > KDC_RED_PROD)
      return bad(f, v, "bad reduction %d", (int)a->reduce.kind);
    return NULL;
  default:
    return NULL;
  }
}

static kdc_status check_sharding(const kdc_func *f, kdc_value_id v) {
  const kdc_sharding *s = &f->nodes[v].sharding;
  const kdc_mesh *m = &f->module->mesh;
  if (!s->present) return NULL;
  if (m->naxes < 0 || m->naxes > KDC_MAX_MESH_AXES)
    return bad(f, v, "sharding over a malformed mesh");
  unsigned all = (1u << m->naxes) - 1, used = 0;
  if (s->rank != f->nodes[v].type.rank)
    return bad(f, v, "sharding has %d dims, the type has rank %d", s->rank, f->nodes[v].type.rank);
  for (int d = 0; d < s->rank; d++) {
    if (s->naxes[d] > KDC_MAX_AXES_PER_DIM) return bad(f, v, "sharding dim %d: too many axes", d);
    for (int k = 0; k < s->naxes[d]; k++) {
      int a = s->axes[d][k];
      if (a >= m->naxes) return bad(f, v, "sharding dim %d: axis %d is not in the mesh", d, a);
      if (used & (1u << a)) return bad(f, v, "sharding: mesh axis '%s' used twice", m->names[a]);
      used |= 1u << a;
    }
  }
  if (s->rank < 8 && (s->open_mask >> s->rank)) return bad(f, v, "sharding: open_mask beyond rank");
  if ((s->partial | s->replicated) & ~all)
    return bad(f, v, "sharding: partial/replicated axis not in the mesh");
  if (s->partial & used) return bad(f, v, "sharding: an axis both splits a dim and is partial");
  if (s->replicated & (used | s->partial))
    return bad(f, v, "sharding: an explicitly replicated axis is also split or partial");
  return NULL;
}

/* Type-checks node |v| against kdc_ir_infer_type. */
static kdc_status check_infer(const kdc_func *f, kdc_value_id v) {
  const kdc_node *n = &f->nodes[v];
  kdc_type tin[8];
  memset(tin, 0, sizeof tin); /* quiets a false -Wmaybe-uninitialized for n_in == 0 */
  kdc_type *ts = n->n_in <= 8 ? tin : kdc_xmalloc(sizeof(kdc_type) * (size_t)n->n_in);
  for (int i = 0; i < n->n_in; i++) ts[i] = f->nodes[n->in[i]].type;
  kdc_type out = n->type;
  kdc_status st = kdc_ir_infer_type(n->op, n->n_in, ts, &n->attr, &out);
  if (ts != tin) free(ts);
  if (st) {
    kdc_status r = bad(f, v, "%s", kdc_status_message(st));
    kdc_status_free(st);
    return r;
  }
  if (!kdc_type_equal(&out, &n->type)) {
    char b1[160], b2[160];
    return bad(f, v, "result type %s does not match the inferred %s",
               kdc_type_str(&n->type, b1, sizeof b1), kdc_type_str(&out, b2, sizeof b2));
  }
  return NULL;
}

static kdc_status check_node(const kdc_func *f, kdc_value_id v) {
  const kdc_node *n = &f->nodes[v];
  if ((unsigned)n->op >= KDC_OP_COUNT) return bad(f, v, "unknown op %d", (int)n->op);
  KDC_RETURN_IF_ERROR(check_type(f, v, &n->type));
  int ar = kdc_op_arity(n->op);
  if ((ar >= 0 && n->n_in != ar) || (ar < 0 && n->n_in < 1))
    return bad(f, v, "has %d operands, the op takes %s%d", n->n_in, ar < 0 ? "at least " : "",
               ar < 0 ? 1 : ar);
  if (n->n_in > 0 && !n->in) return bad(f, v, "operand array missing");
  for (int i = 0; i < n->n_in; i++)
    if (n->in[i] >= v)
      return bad(f, v, "operand %d is %%%u, which is not defined before it", i, n->in[i]);
  KDC_RETURN_IF_ERROR(check_attrs(f, v));
  KDC_RETURN_IF_ERROR(check_infer(f, v));
  if (kdc_op_flags(n->op) & OPF_COLL) KDC_RETURN_IF_ERROR(check_coll(f, v));
  if (n->op == KDC_OP_SCAN) KDC_RETURN_IF_ERROR(kdc_ir_scan_check(f, v)); /* ir/scan.c */
  KDC_RETURN_IF_ERROR(check_sharding(f, v));
  if (n->group < -1) return bad(f, v, "group %d (must be >= -1)", (int)n->group);
  if (n->group >= 0 &&
      (n->op == KDC_OP_PARAMETER || n->op == KDC_OP_CONSTANT || n->op == KDC_OP_DOT ||
       n->op == KDC_OP_SCAN))
    return bad(f, v, "a %s cannot be in a fusion group (group=%d)", kdc_op_name(n->op),
               (int)n->group);
  if (n->mem_offset < -1)
    return bad(f, v, "mem offset %lld (must be >= -1)", (long long)n->mem_offset);
  return NULL;
}

static kdc_status check_params(const kdc_func *f) {
  size_t np = 0;
  for (size_t i = 0; i < f->n_nodes; i++) np += f->nodes[i].op == KDC_OP_PARAMETER;
  if (np != f->n_params)
    return bad(f, KDC_NO_VALUE, "%zu parameter nodes but %zu entries in the parameter list", np,
               f->n_params);
  for (size_t i = 0; i < f->n_params; i++) {
    kdc_value_id p = f->params[i];
    if (p >= f->n_nodes || f->nodes[p].op != KDC_OP_PARAMETER)
      return bad(f, KDC_NO_VALUE, "parameter list entry %zu is not a parameter node", i);
    if ((size_t)f->nodes[p].attr.param.index != i)
      return bad(f, p, "parameter index %d is listed at position %zu", f->nodes[p].attr.param.index,
                 i);
  }
  return NULL;
}

typedef struct gmember {
  int32_t group;
  kdc_value_id id;
} gmember;

static int cmp_member(const void *a, const void *b) {
  const gmember *x = a, *y = b;
  if (x->group != y->group) return x->group < y->group ? -1 : 1;
  return x->id < y->id ? -1 : x->id > y->id;
}

bool kdc_ir_group_output(const kdc_func *f, kdc_value_id v, kdc_value_id root) {
  if (v == root || f->nodes[v].group < 0) return false;
  for (size_t i = 0; i < f->n_results; i++)
    if (f->results[i] == v) return true;
  return false;
}

void kdc_ir_group_members_init(kdc_group_members *gm, const kdc_func *f) {
  int32_t ng = 0;
  for (size_t v = 0; v < f->n_nodes; v++)
    if (f->nodes[v].group >= ng) ng = f->nodes[v].group + 1;
  gm->n_groups = ng;
  gm->start = kdc_xcalloc((size_t)ng + 2, sizeof *gm->start);
  for (size_t v = 0; v < f->n_nodes; v++)
    if (f->nodes[v].group >= 0) gm->start[f->nodes[v].group + 2]++;
  for (int32_t g = 0; g < ng; g++) gm->start[g + 2] += gm->start[g + 1];
  gm->member = kdc_xmalloc((gm->start[ng + 1] + 1) * sizeof *gm->member);
  for (size_t v = 0; v < f->n_nodes; v++)  /* counting sort, stable: ids ascend */
    if (f->nodes[v].group >= 0) gm->member[gm->start[f->nodes[v].group + 1]++] = (kdc_value_id)v;
}

void kdc_ir_group_members_free(kdc_group_members *gm) {
  free(gm->start);
  free(gm->member);
  memset(gm, 0, sizeof *gm);
}

static bool same_dims(const kdc_type *a, const kdc_type *b) {
  if (a->rank != b->rank) return false;
  for (int d = 0; d < a->rank; d++)
    if (a->dims[d] != b->dims[d]) return false;
  return true;
}

/* The fusion contract: a non-root member is used only inside its group; if
 * it is a function result, the kernel writes it too (root's dims). */
static kdc_status check_groups(const kdc_func *f) {
  size_t nm = 0;
  for (size_t i = 0; i < f->n_nodes; i++) nm += f->nodes[i].group >= 0;
  if (nm == 0) return NULL;
  gmember *ms = kdc_xmalloc(nm * sizeof *ms);
  kdc_value_id *root = kdc_xmalloc(f->n_nodes * sizeof *root);
  nm = 0;
  for (size_t i = 0; i < f->n_nodes; i++) {
    root[i] = KDC_NO_VALUE;
    if (f->nodes[i].group >= 0) ms[nm++] = (gmember){f->nodes[i].group, (kdc_value_id)i};
  }
  qsort(ms, nm, sizeof *ms, cmp_member);
  for (size_t i = nm; i-- > 0;)
    root[ms[i].id] = (i + 1 < nm && ms[i + 1].group == ms[i].group) ? root[ms[i + 1].id] : ms[i].id;
  free(ms);
  kdc_status st = NULL;
  for (size_t v = 0; v < f->n_nodes && !st; v++) {
    const kdc_node *n = &f->nodes[v];
    for (int j = 0; j < n->n_in && !st; j++) {
      kdc_value_id u = n->in[j];
      if (root[u] != KDC_NO_VALUE && root[u] != u && n->group != f->nodes[u].group)
        st = bad(f, u, "member of group %d (root %%%u) is used by %%%zu outside the group",
                 (int)f->nodes[u].group, root[u], v);
    }
  }
  for (size_t i = 0; i < f->n_results && !st; i++) {
    kdc_value_id u = f->results[i];
    if (root[u] != KDC_NO_VALUE && root[u] != u &&
        !same_dims(&f->nodes[u].type, &f->nodes[root[u]].type))
      st = bad(f, u, "member of group %d (root %%%u) is a function result of other dims than the "
               "root", (int)f->nodes[u].group, root[u]);
  }
  free(root);
  return st;
}

kdc_status kdc_ir_verify(const kdc_func *f) {
  if (!f->module) return bad(f, KDC_NO_VALUE, "function has no module");
  for (size_t v = 0; v < f->n_nodes; v++) KDC_RETURN_IF_ERROR(check_node(f, (kdc_value_id)v));
  KDC_RETURN_IF_ERROR(check_params(f));
  for (size_t i = 0; i < f->n_results; i++)
    if (f->results[i] >= f->n_nodes)
      return bad(f, KDC_NO_VALUE, "result %zu is %%%u, which is not defined", i, f->results[i]);
  return check_groups(f);
}

/* A weight parameter must name a module weight of the same type. */
static kdc_status check_weight_params(const kdc_module *m, const kdc_func *f) {
  for (size_t i = 0; i < f->n_params; i++) {
    const kdc_node *n = &f->nodes[f->params[i]];
    if (n->attr.param.kind != KDC_PARAM_WEIGHT) continue;
    const char *name = n->attr.param.name ? n->attr.param.name : "";
    const kdc_weight *w = kdc_ir_module_find_weight(m, name);
    if (!w) return bad(f, f->params[i], "weight \"%s\" is not in the module", name);
    kdc_type lt; /* after partitioning, a weight parameter holds its local piece */
    kdc_status ls = n->sharding.present ? kdc_sharding_local_type(&m->mesh, &n->sharding, &w->type, &lt)
                                        : KDC_ERR(KDC_INVALID_INPUT, "no sharding");
    bool local_ok = !ls && kdc_type_equal(&lt, &n->type);
    kdc_status_free(ls);
    if (!kdc_type_equal(&w->type, &n->type) && !local_ok) {
      char b1[160], b2[160];
      return bad(f, f->params[i], "weight \"%s\" is %s in the module but %s here", name,
                 kdc_type_str(&w->type, b1, sizeof b1), kdc_type_str(&n->type, b2, sizeof b2));
    }
  }
  return NULL;
}

kdc_status kdc_ir_verify_module(const kdc_module *m) {
  kdc_status st = kdc_mesh_check(&m->mesh);
  if (st) return kdc_status_annotate(st, "module @%s", m->name ? m->name : "");
  for (size_t i = 0; i < m->n_weights; i++) {
    const kdc_weight *w = &m->weights[i];
    if (!w->name || w->type.rank < 0 || w->type.rank > KDC_MAX_RANK ||
        (unsigned)w->type.dtype >= KDC_DTYPE_COUNT)
      return KDC_ERR(KDC_INVALID_INPUT, "module @%s: weight %zu is malformed", m->name, i);
    if (kdc_ir_module_find_weight(m, w->name) != w)  /* the first of that name */
      return KDC_ERR(KDC_INVALID_INPUT, "module @%s: weight \"%s\" listed twice", m->name,
                     w->name);
  }
  for (size_t i = 0; i < m->n_funcs; i++) {
    const kdc_func *f = m->funcs[i];
    for (size_t j = 0; j < i; j++)
      if (f->name && m->funcs[j]->name && strcmp(f->name, m->funcs[j]->name) == 0)
        return bad(f, KDC_NO_VALUE, "function defined twice");
    if (f->module != m) return bad(f, KDC_NO_VALUE, "function belongs to another module");
    KDC_RETURN_IF_ERROR(kdc_ir_verify(f));
    KDC_RETURN_IF_ERROR(check_weight_params(m, f));
  }
  return NULL;
}
