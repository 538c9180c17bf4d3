/*
 * passes/propagate_shardings.c: factor-based sharding propagation to a
 * fixpoint (SHARDING.md 8a "Propagation", Shardy's hierarchy, trimmed).
 *
 *   for level in 0..4:                      op priority
 *     repeat until nothing changes:
 *       for op in program order:   step(op, forward)   operands -> result
 *       for op in reverse order:   step(op, backward)  result -> operands
 *
 * Levels (which ops and factors may move axes):
 *   0: pass-through ops (elementwise, transpose, sharding_constraint, pad,
 *      a reshape of unit dims only) whose operands have a single use;
 *   1: pass-through ops;
 *   2: every op, pass factors only; broadcast_in_dim backward only;
 *   3: every factor (reduction factors too); broadcast backward only;
 *   4: everything, broadcast forward too.
 * step(op): project every tensor of the op onto the op's factors
 * (passes/sharding_rules.c); per factor, the candidates are the tensors'
 * axis lists for it.  When they are compatible (each a prefix of the
 * longest), the longest wins.  On conflict, levels 0-1 keep the longest
 * common prefix (basic); levels 2-4 resolve aggressively: the candidate of
 * the tensor with the most bytes wins (that side would cost the most to
 * reshard, SHARDING.md 4), ties to the lower value id.  Each mesh axis goes
 * to at most one factor (in factor order), so it is used once per tensor.
 * The chosen factor shardings are projected back onto the tensors being
 * updated; a dim changes only if it is open and its axes grow (the old axes
 * are a prefix of the new ones) and the new axes are unused elsewhere in
 * the tensor.  Closed dims (user shardings) never change.  Updates only add
 * axes, so the fixpoint exists; the visiting order is fixed, so the result
 * is deterministic.  Every added (value, dim, axis) gets a provenance entry
 * (source tensor, op, factor, direction, level, step) whose parent is the
 * source's own entry for that axis: kdc_sharding_explain follows the chain.
 * The whole module shares one user priority (p0); a no-mesh or 1-device
 * module is left alone.
 */
#include <stdlib.h>
#include <string.h>

#include "passes/passes.h"

typedef struct prop {
  kdc_module *m;
  kdc_func *f;
  kdc_factor_rule *rules; /* one per node */
  bool *has_rule;
  uint32_t *uses;
  int level, step;
  bool changed;
} prop;

static bool is_prefix(const uint8_t *a, int na, const uint8_t *b, int nb) {
  if (na > nb) return false;
  return memcmp(a, b, (size_t)na) == 0;
}

static kdc_value_id tensor_value(const kdc_node *n, int t, kdc_value_id v) {
  return t < n->n_in ? n->in[t] : v;
}

/* Where |axis| sits in value |u|'s sharding: its dim, or -1. */
static int dim_of(const kdc_sharding *s, int axis) {
  for (int d = 0; d < s->rank; d++)
    if (kdc_sharding_dim_mask(s, d) & (1u << axis)) return d;
  return -1;
}

/* Updates tensor |t| of op |v| from the chosen factor shardings. */
static void update(prop *p, kdc_value_id v, int t, const kdc_factor_shardings *fs,
                   const kdc_value_id *src_of_factor, bool backward) {
  const kdc_factor_rule *r = &p->rules[v];
  kdc_node *n = &p->f->nodes[v];
  kdc_value_id u = tensor_value(n, t, v);
  kdc_sharding *s = &p->f->nodes[u].sharding, want = *s;
  kdc_rule_project_out(&p->m->mesh, r, t, fs, &want);
  for (int d = 0; d < s->rank; d++) {
    if (!((s->open_mask >> d) & 1)) continue;
    if (want.naxes[d] <= s->naxes[d] ||
        !is_prefix(s->axes[d], s->naxes[d], want.axes[d], want.naxes[d]))
      continue;
    unsigned others = (kdc_sharding_used_mask(s) & ~kdc_sharding_dim_mask(s, d)) | s->partial |
                      s->replicated;
    int k0 = s->naxes[d];
    for (int k = k0; k < want.naxes[d]; k++) {
      int a = want.axes[d][k];
      if (others & (1u << a)) break;
      if (u < p->f->n_nodes && (int64_t)p->f->nodes[u].type.dims[d] %
                                       (kdc_sharding_dim_shards(&p->m->mesh, s, d) *
                                        p->m->mesh.sizes[a]) != 0)
        break;
      s->axes[d][s->naxes[d]++] = (uint8_t)a;
      /* provenance: which factor carried it, from which tensor */
      int fac = -1;
      for (int i = 0; i < r->nf[t][d] && fac < 0; i++) {
        int ff = r->f[t][d][i];
        if (memchr(fs->axes[ff], a, fs->n[ff])) fac = ff;
      }
      kdc_prov e;
      memset(&e, 0, sizeof e);
      e.kind = KDC_PROV_PROPAGATED;
      e.func = p->f;
      e.value = u;
      e.dim = d;
      e.axis = a;
      e.source = fac >= 0 ? src_of_factor[fac] : KDC_NO_VALUE;
      e.op = v;
      e.factor = fac;
      e.backward = backward;
      e.level = p->level;
      e.step = ++p->step;
      if (e.source != KDC_NO_VALUE) {
        int sd = dim_of(&p->f->nodes[e.source].sharding, a);
        e.parent = sd >= 0 ? kdc_ir_prov_find(p->m, p->f, e.source, sd, a) : 0;
      }
      s->origin = kdc_ir_prov_add(p->m, &e);
      p->changed = true;
    }
  }
}

static void step(prop *p, kdc_value_id v, bool backward) {
  const kdc_node *n = &p->f->nodes[v];
  if (!p->has_rule[v] || n->n_in == 0) return;
  const kdc_factor_rule *r = &p->rules[v];
  int lvl = p->level;
  if (!r->pass_through && lvl < 2) return;
  if (lvl == 0)
    for (int i = 0; i < n->n_in; i++)
      if (p->uses[n->in[i]] > 1) return;
  if (r->broadcast && !backward && lvl < 4) return;
  const kdc_mesh *mesh = &p->m->mesh;
  kdc_factor_shardings cand[KDC_RULE_MAX_TENSORS], chosen;
  memset(&chosen, 0, sizeof chosen);
  for (int t = 0; t < r->ntensors; t++)
    kdc_rule_project_in(mesh, r, t, &p->f->nodes[tensor_value(n, t, v)].sharding, &cand[t]);
  kdc_value_id src[KDC_RULE_MAX_FACTORS];
  unsigned used = 0;
  for (int f = 0; f < r->nfactors; f++) {
    src[f] = KDC_NO_VALUE;
    if (r->kind[f] == KDC_FACTOR_NEED_REPL) continue;
    if (r->kind[f] == KDC_FACTOR_REDUCTION && lvl < 3) continue;
    int best = -1;
    bool conflict = false;
    for (int t = 0; t < r->ntensors; t++) {
      if (!cand[t].n[f]) continue;
      if (best < 0) {
        best = t;
        continue;
      }
      const kdc_factor_shardings *b = &cand[best], *c = &cand[t];
      if (is_prefix(b->axes[f], b->n[f], c->axes[f], c->n[f])) best = t;
      else if (!is_prefix(c->axes[f], c->n[f], b->axes[f], b->n[f])) conflict = true;
    }
    if (best < 0) continue;
    uint8_t ax[KDC_MAX_MESH_AXES];
    int na = cand[best].n[f];
    memcpy(ax, cand[best].axes[f], (size_t)na);
    if (conflict && lvl < 2) { /* basic: the longest common prefix */
      for (int t = 0; t < r->ntensors; t++) {
        int k = 0;
        while (k < na && k < cand[t].n[f] && cand[t].axes[f][k] == ax[k]) k++;
        if (cand[t].n[f]) na = k;
      }
    } else if (conflict) { /* aggressive: the largest tensor's candidate */
      size_t most = 0;
      for (int t = 0; t < r->ntensors; t++) {
        if (!cand[t].n[f]) continue;
        size_t bytes = kdc_type_bytes(&p->f->nodes[tensor_value(n, t, v)].type);
        if (bytes > most) most = bytes, best = t;
      }
      na = cand[best].n[f];
      memcpy(ax, cand[best].axes[f], (size_t)na);
    }
    int k = 0;
    while (k < na && !(used & (1u << ax[k]))) k++;
    for (int i = 0; i < k; i++) used |= 1u << ax[i];
    chosen.n[f] = (uint8_t)k;
    memcpy(chosen.axes[f], ax, (size_t)k);
    src[f] = tensor_value(n, best, v);
  }
  if (!backward) update(p, v, r->ntensors - 1, &chosen, src, false);
  else
    for (int t = 0; t < n->n_in; t++) update(p, v, t, &chosen, src, true);
}

static kdc_status propagate_func(kdc_module *m, kdc_func *f) {
  prop p = {m, f, NULL, NULL, NULL, 0, 0, false};
  size_t nn = f->n_nodes;
  p.rules = kdc_xcalloc(nn ? nn : 1, sizeof *p.rules);
  p.has_rule = kdc_xcalloc(nn ? nn : 1, sizeof *p.has_rule);
  p.uses = kdc_xcalloc(nn ? nn : 1, sizeof *p.uses);
  kdc_ir_count_uses(f, p.uses);
  kdc_status st = NULL;
  for (size_t v = 0; v < nn && !st; v++) {
    if (!f->nodes[v].sharding.present) continue;
    st = kdc_sharding_rule(f, (kdc_value_id)v, &p.rules[v]);
    p.has_rule[v] = st == NULL;
    if (st) {
      char where[256];
      st = kdc_status_annotate(st, "%s", kdc_pass_where(f, (kdc_value_id)v, where, sizeof where));
    }
  }
  for (p.level = 0; p.level <= 4 && !st; p.level++) {
    for (int round = 0; round < 1000; round++) {
      p.changed = false;
      for (size_t v = 0; v < nn; v++) step(&p, (kdc_value_id)v, false);
      for (size_t v = nn; v-- > 0;) step(&p, (kdc_value_id)v, true);
      if (!p.changed) break;
    }
  }
  free(p.rules);
  free(p.has_rule);
  free(p.uses);
  return st;
}

/* The scan of |m| whose body is |body| (its function in *|out_f|), or
 * KDC_NO_VALUE. */
static kdc_value_id find_scan(kdc_module *m, const kdc_func *body, kdc_func **out_f) {
  for (size_t i = 0; i < m->n_funcs; i++) {
    kdc_func *g = m->funcs[i];
    for (size_t v = 0; v < g->n_nodes; v++)
      if (g->nodes[v].op == KDC_OP_SCAN && kdc_ir_scan_body(g, (kdc_value_id)v) == body) {
        *out_f = g;
        return (kdc_value_id)v;
      }
  }
  return KDC_NO_VALUE;
}

/* A scan body runs on the pieces its scan hands it: its parameters and
 * results are fixed (closed) to the scan's factor shardings -- the batch
 * split of carries, x_t and y_t, the feature split of their last dims and
 * of the loop-invariant operands' (sharding_rules.c), everything else
 * replicated; in an
 * accumulator scan the batch split of x_t only, with carries and y_t
 * partial over its axes -- and then the body propagates like any function.
 * The carries' shardings are fixed on both sides of the loop (parameter
 * and result alike), so they are a fixed point of the body by
 * construction.  Its caller was propagated first. */
static kdc_status propagate_body(kdc_module *m, kdc_func *body) {
  kdc_func *g = NULL;
  kdc_value_id v = find_scan(m, body, &g);
  if (v == KDC_NO_VALUE) return propagate_func(m, body);
  const kdc_node *n = &g->nodes[v];
  kdc_factor_rule r;
  KDC_RETURN_IF_ERROR(kdc_sharding_rule(g, v, &r));
  kdc_factor_shardings fs;
  kdc_rule_project_in(&m->mesh, &r, r.ntensors - 1, &n->sharding, &fs);
  int nc = (int)n->attr.scan.n_carry, nx = (int)n->attr.scan.n_xs;
  /* an accumulator scan: the batch (a reduction factor) and a feature
   * split the result lacks come from the first sequence that splits them;
   * carries and y are then partial over the batch axes */
  uint16_t partial = 0;
  bool acc = kdc_scan_accumulates(g, n) && r.nfactors && r.kind[0] == KDC_FACTOR_REDUCTION;
  for (int f = 0; acc && f < r.nfactors; f++)
    for (int t = nc; r.kind[f] != KDC_FACTOR_NEED_REPL && t < nc + nx && !fs.n[f]; t++) {
      kdc_factor_shardings o;
      kdc_rule_project_in(&m->mesh, &r, t, &g->nodes[n->in[t]].sharding, &o);
      unsigned used = 0;
      for (int h = 0; h < r.nfactors; h++)
        for (int k = 0; k < fs.n[h]; k++) used |= 1u << fs.axes[h][k];
      int k = 0;
      while (k < o.n[f] && !(used & (1u << o.axes[f][k]))) k++;
      fs.n[f] = (uint8_t)k;
      memcpy(fs.axes[f], o.axes[f], (size_t)k);
    }
  for (int f = 0; f < r.nfactors; f++) {
    if (r.kind[f] == KDC_FACTOR_NEED_REPL) fs.n[f] = 0;
    if (r.kind[f] == KDC_FACTOR_REDUCTION)
      for (int k = 0; k < fs.n[f]; k++) partial |= (uint16_t)(1u << fs.axes[f][k]);
  }
  char text[256];
  for (int t = 0; t < r.ntensors; t++) {
    bool res = t == r.ntensors - 1, seq = res || (t >= nc && t < nc + nx);
    kdc_sharding s = kdc_sharding_replicated(r.rank[t]), bs;
    kdc_rule_project_out(&m->mesh, &r, t, &fs, &s);
    bs = kdc_sharding_replicated(seq ? r.rank[t] - 1 : r.rank[t]);
    for (int d = 0; d < bs.rank; d++) {
      bs.naxes[d] = s.naxes[d + seq];
      memcpy(bs.axes[d], s.axes[d + seq], s.naxes[d + seq]);
    }
    if (res || t < nc) bs.partial = partial;
    /* y_t and carry i' are body results: fix them too (the carry's result
     * is the carry's parameter sharding) */
    kdc_value_id targets[2] = {KDC_NO_VALUE, KDC_NO_VALUE};
    if (res) targets[0] = body->results[nc];
    else if (t < nc) targets[0] = body->params[t], targets[1] = body->results[t];
    else targets[0] = body->params[t];
    for (int k = 0; k < 2; k++) {
      kdc_value_id u = targets[k];
      if (u == KDC_NO_VALUE) continue;
      bs.origin = 0;
      body->nodes[u].sharding = bs;
      snprintf(text, sizeof text, "scan %%%u of @%s: %s %d", v, g->name ? g->name : "",
               res ? "result" : t < nc ? "carry" : t < nc + nx ? "sequence" : "operand", t);
      body->nodes[u].sharding.origin = kdc_ir_prov_add_user(m, body, u, text);
    }
  }
  return propagate_func(m, body);
}

kdc_status kdc_pass_propagate_shardings(kdc_module *m, const kdc_pass_options *opt) {
  (void)opt;
  if (m->mesh.naxes == 0 || kdc_mesh_devices(&m->mesh) <= 1) return NULL;
  for (size_t i = 0; i < m->n_funcs; i++) /* callers first, then scan bodies */
    if (!kdc_ir_func_is_body(m, m->funcs[i])) KDC_RETURN_IF_ERROR(propagate_func(m, m->funcs[i]));
  for (size_t i = 0; i < m->n_funcs; i++)
    if (kdc_ir_func_is_body(m, m->funcs[i])) KDC_RETURN_IF_ERROR(propagate_body(m, m->funcs[i]));
  return NULL;
}
