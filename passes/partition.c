/*
 * passes/partition.c: rewrites every function into ONE SPMD program for all
 * devices of the module's mesh (SHARDING.md 8a "Partition").  After it, every
 * node's type is LOCAL (the piece one device holds) and its sharding says how
 * the pieces form the global value; see docs/sharding.md for the contract.
 *
 * Per node, in order:
 *   1. the op's factor shardings come from its result's propagated sharding
 *      (a scan's from its body's fixed parameters: scan_factors);
 *      factors the result does not have (contracting and other reduction
 *      factors) come from the first operand that splits them; need-replication
 *      factors stay unsplit; each axis serves one factor; then the factors
 *      are made consistent (a factor keeps only the axes every tensor having
 *      it can represent, passes/sharding_rules.c projection rules);
 *   2. each operand is resharded (passes/reshard.c plans, cached per value and
 *      target) to its projection of those factors.  Partials are kept
 *      through linear ops (neg, transpose, reshape, slice, broadcast_in_dim,
 *      reduce sum, concatenate of equally-partial operands, add/sub of
 *      equally-partial operands, mul by / div of a non-partial value, dot
 *      with a non-partial other operand) and materialised anywhere else by
 *      the planner: all_reduce, or reduce_scatter when the consumer wants the
 *      partial axis split (pad by a constant 0 keeps a partial too);
 *   3. the op is emitted on local types; its result is partial over the axes
 *      of its split reduction factors (plus kept partials); if the
 *      consistent factors changed the result's sharding, it is resharded back
 *      to the propagated one;
 * special cases: parameters keep their (user) sharding and get local types;
 * a gather / scatter_add split on its vocabulary becomes a masked local
 * lookup / scatter (passes/partition_gather.c); a convolution or pooling
 * split on a spatial dim exchanges halos with its neighbours
 * (passes/partition_halo.c);
 * sharding_constraint becomes a reshard to its sharding (materialising
 * partials); iota split on its own dim and dense constants split anywhere
 * are built global and cut with shard_slice (fused, no copy), rng_uniform
 * is emitted split (codegen draws at the global index); function results are
 * materialised (no partial), except the carries and y of an accumulator
 * scan's body, which stay partial over the batch axes inside the loop (the
 * scan's result is partial and reduced after it).  A scan body is
 * partitioned like any function, collectives included: they run once per
 * loop iteration (a units split of a recurrent layer all_gathers h).
 * An operand that must be gathered because the op cannot run split on that
 * factor (a need_replication factor, or a reshape the factors cannot
 * express) is a full-replication fallback: one warning line on
 * opt->warnings naming the op, both shardings and where each came from.
 * Indivisible local shapes are located errors (never padded).
 * On a mesh of one device the pass only removes sharding_constraint nodes.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "passes/passes.h"

typedef struct cache_entry {
  kdc_value_id old, val;
  kdc_sharding target;
} cache_entry;

typedef struct part {
  kdc_module *m;
  kdc_func *f;
  const kdc_pass_options *opt;
  size_t n0;              /* node count before partitioning */
  kdc_value_id *map;      /* old value -> new local value */
  kdc_sharding *have;     /* old value -> sharding of map[old] (with partial) */
  kdc_type *local;        /* parameters: their local type */
  cache_entry *cache;
  size_t n_cache, cap_cache;
} part;

static kdc_status located(part *p, kdc_value_id v, kdc_status st) {
  char where[256];
  return kdc_status_annotate(st, "%s", kdc_pass_where(p->f, v, where, sizeof where));
}

/* Short "where it came from" of the sharding of old value |u|. */
static const char *origin_text(part *p, kdc_value_id u, char *buf, size_t n) {
  uint32_t e = p->f->nodes[u].sharding.origin;
  if (!e || e >= p->m->n_prov) return "unset";
  const kdc_prov *pr = &p->m->prov[e];
  while (pr->kind == KDC_PROV_PROPAGATED && pr->parent) pr = &p->m->prov[pr->parent];
  if (pr->kind == KDC_PROV_USER) snprintf(buf, n, "%s", pr->text ? pr->text : "user");
  else snprintf(buf, n, "propagated from %%%u", pr->source);
  return buf;
}

/* The value of old |u| resharded to |target| (cached). */
static kdc_status get(part *p, kdc_value_id u, const kdc_sharding *target, kdc_value_id *out) {
  if (kdc_sharding_same_split(&p->have[u], target)) return *out = p->map[u], NULL;
  for (size_t i = 0; i < p->n_cache; i++)
    if (p->cache[i].old == u && kdc_sharding_same_split(&p->cache[i].target, target))
      return *out = p->cache[i].val, NULL;
  kdc_reshard_plan plan;
  KDC_RETURN_IF_ERROR(kdc_reshard_plan_make(&p->m->mesh, &p->f->nodes[u].type, &p->have[u],
                                            target, &plan));
  kdc_ir_set_origin(p->f, p->f->nodes[u].origin);
  *out = kdc_reshard_emit(p->f, p->map[u], &plan);
  KDC_GROW(p->cache, p->cap_cache, p->n_cache + 1);
  p->cache[p->n_cache++] = (cache_entry){u, *out, *target};
  return NULL;
}

static bool tensor_has(const kdc_factor_rule *r, int t, int f) {
  for (int d = 0; d < r->rank[t]; d++)
    if (memchr(r->f[t][d], f, r->nf[t][d])) return true;
  return false;
}

/* Keeps of |fs| what every tensor of |r| can express. */
static void consistent(const kdc_mesh *mesh, const kdc_factor_rule *r, kdc_factor_shardings *fs) {
  for (int round = 0; round < 2; round++)
    for (int t = 0; t < r->ntensors; t++) {
      kdc_sharding s = kdc_sharding_replicated(r->rank[t]);
      kdc_factor_shardings back;
      kdc_rule_project_out(mesh, r, t, fs, &s);
      kdc_rule_project_in(mesh, r, t, &s, &back);
      for (int f = 0; f < r->nfactors; f++)
        if (tensor_has(r, t, f) && back.n[f] < fs->n[f]) fs->n[f] = back.n[f];
    }
}

/* Step 1: the op's consistent factor shardings. */
static void factors(part *p, kdc_value_id v, const kdc_factor_rule *r, kdc_factor_shardings *fs) {
  const kdc_node *n = &p->f->nodes[v];
  const kdc_mesh *mesh = &p->m->mesh;
  int res = r->ntensors - 1;
  kdc_rule_project_in(mesh, r, res, &n->sharding, fs);
  unsigned used = 0; /* result factors first, in factor order */
  for (int f = 0; f < r->nfactors; f++) {
    if (r->kind[f] == KDC_FACTOR_NEED_REPL) fs->n[f] = 0;
    int k = 0;
    while (k < fs->n[f] && !(used & (1u << fs->axes[f][k]))) used |= 1u << fs->axes[f][k++];
    fs->n[f] = (uint8_t)k;
  }
  for (int f = 0; f < r->nfactors; f++) {
    if (tensor_has(r, res, f) || r->kind[f] == KDC_FACTOR_NEED_REPL) continue;
    for (int t = 0; t < n->n_in && !fs->n[f]; t++) {
      kdc_factor_shardings o;
      kdc_rule_project_in(mesh, r, t, &p->have[n->in[t]], &o);
      int k = 0;
      while (k < o.n[f] && !(used & (1u << o.axes[f][k]))) k++;
      for (int i = 0; i < k; i++) used |= 1u << o.axes[f][i];
      fs->n[f] = (uint8_t)k;
      memcpy(fs->axes[f], o.axes[f], (size_t)k);
    }
  }
  consistent(mesh, r, fs);
}

/* Step 1 for a scan: the factor shardings its body's parameters were fixed
 * to (propagate_shardings.c fixes a body from one scan of it, and a body
 * may be shared: predict's and train_step's forward scans), so every scan
 * of a body hands it exactly those pieces. */
static void scan_factors(part *p, kdc_value_id v, const kdc_factor_rule *r,
                         kdc_factor_shardings *fs) {
  const kdc_node *n = &p->f->nodes[v];
  const kdc_func *b = kdc_ir_scan_body(p->f, v);
  int nc = (int)n->attr.scan.n_carry, nx = (int)n->attr.scan.n_xs;
  memset(fs, 0, sizeof *fs);
  for (int t = 0; b && t < n->n_in && t < (int)b->n_params; t++) {
    const kdc_sharding *bs = &b->nodes[b->params[t]].sharding;
    if (!bs->present) continue;
    int seq = t >= nc && t < nc + nx;
    kdc_sharding s = kdc_sharding_replicated(r->rank[t]);
    for (int d = 0; d < bs->rank && d + seq < s.rank; d++) {
      s.naxes[d + seq] = bs->naxes[d];
      memcpy(s.axes[d + seq], bs->axes[d], bs->naxes[d]);
    }
    kdc_factor_shardings o;
    kdc_rule_project_in(&p->m->mesh, r, t, &s, &o);
    for (int f = 0; f < r->nfactors; f++)
      if (o.n[f] > fs->n[f]) {
        fs->n[f] = o.n[f];
        memcpy(fs->axes[f], o.axes[f], o.n[f]);
      }
  }
}

/* Which operands may stay partial (linear ops, step 2); returns the kept
 * partial axes of each operand in |keep|. */
static void linear(part *p, const kdc_node *n, unsigned fs_axes, uint16_t *keep) {
  uint16_t pa[KDC_RULE_MAX_TENSORS];
  int np = 0;
  for (int i = 0; i < n->n_in; i++) {
    pa[i] = p->have[n->in[i]].partial;
    keep[i] = 0;
    np += pa[i] != 0;
  }
  if (!np) return;
  switch (n->op) {
  case KDC_OP_NEG: case KDC_OP_TRANSPOSE: case KDC_OP_RESHAPE: case KDC_OP_SLICE:
  case KDC_OP_BROADCAST:
    keep[0] = pa[0];
    break;
  case KDC_OP_REDUCE:
    if (n->attr.reduce.kind == KDC_RED_SUM) keep[0] = pa[0];
    break;
  case KDC_OP_PAD: { /* padding with 0 (a gradient of slice) */
    const kdc_node *pv = &p->f->nodes[n->in[1]];
    if (!pa[1] && pv->op == KDC_OP_CONSTANT && pv->type.dtype == KDC_DTYPE_F32 &&
        *(const float *)pv->attr.constant.data == 0.0f)
      keep[0] = pa[0];
    break;
  }
  case KDC_OP_ADD: case KDC_OP_SUB: case KDC_OP_CONCAT: {
    bool same = true;
    for (int i = 1; i < n->n_in; i++) same = same && pa[i] == pa[0];
    if (same)
      for (int i = 0; i < n->n_in; i++) keep[i] = pa[i];
    break;
  }
  case KDC_OP_MUL: case KDC_OP_DOT: case KDC_OP_CONVOLUTION:
    if (np == 1) keep[pa[0] ? 0 : 1] = pa[0] ? pa[0] : pa[1];
    break;
  case KDC_OP_DIV:
    if (pa[0] && !pa[1]) keep[0] = pa[0];
    break;
  default: break;
  }
  for (int i = 0; i < n->n_in; i++)
    if (keep[i] & fs_axes) keep[i] = 0; /* the op splits on it: reduce(-scatter) instead */
}

/* Bytes per device (kdc_coll_bytes) of resharding a value of global type
 * |g| from |src| to |dst|; a plan that cannot be made costs "infinitely". */
static double reshard_bytes(const kdc_mesh *mesh, const kdc_type *g, const kdc_sharding *src,
                            const kdc_sharding *dst) {
  if (kdc_sharding_same_split(src, dst)) return 0;
  kdc_reshard_plan plan;
  kdc_type cur;
  kdc_status st = kdc_reshard_plan_make(mesh, g, src, dst, &plan);
  if (!st) st = kdc_sharding_local_type(mesh, src, g, &cur);
  if (st) {
    kdc_status_free(st);
    return 1e300;
  }
  double b = 0;
  for (int i = 0; i < plan.n; i++) {
    b += kdc_coll_bytes(mesh, plan.steps[i].op, &plan.steps[i].attr, &cur, &plan.steps[i].local);
    cur = plan.steps[i].local;
  }
  return b;
}

/* What running node |v| with factor shardings |fs| moves (bytes per device,
 * SHARDING.md 4): its operands resharded to their projections, and its
 * result, partial over the split reduction factors, resharded to the
 * propagated sharding (as node() does it). */
static double cost_of(part *p, kdc_value_id v, const kdc_factor_rule *r,
                      const kdc_factor_shardings *fs) {
  const kdc_mesh *mesh = &p->m->mesh;
  const kdc_node *n = &p->f->nodes[v];
  unsigned fs_axes = 0;
  for (int f = 0; f < r->nfactors; f++)
    for (int k = 0; k < fs->n[f]; k++) fs_axes |= 1u << fs->axes[f][k];
  uint16_t keep[KDC_RULE_MAX_TENSORS], partial = 0;
  linear(p, n, fs_axes, keep);
  double b = 0;
  for (int t = 0; t < n->n_in; t++) {
    kdc_sharding want = kdc_sharding_replicated(r->rank[t]);
    kdc_rule_project_out(mesh, r, t, fs, &want);
    want.partial = keep[t];
    partial |= keep[t];
    b += reshard_bytes(mesh, &p->f->nodes[n->in[t]].type, &p->have[n->in[t]], &want);
  }
  for (int f = 0; f < r->nfactors; f++)
    if (r->kind[f] == KDC_FACTOR_REDUCTION)
      for (int k = 0; k < fs->n[f]; k++) partial |= (uint16_t)(1u << fs->axes[f][k]);
  kdc_sharding rs = kdc_sharding_replicated(n->type.rank);
  kdc_rule_project_out(mesh, r, r->ntensors - 1, fs, &rs);
  rs.partial = partial;
  kdc_sharding want = n->sharding.present ? n->sharding : kdc_sharding_replicated(n->type.rank);
  want.partial = (uint16_t)(partial & ~kdc_sharding_used_mask(&want));
  return b + reshard_bytes(mesh, &n->type, &rs, &want);
}

/* The other way to run an op whose result takes a mesh axis that an
 * operand splits a reduction factor on (a weight gradient dot(x, g) wanted
 * split on a weight dim while x and g are split on the batch):
 * |fs| (result first) reshards the operands (all_to_all / all_gather of
 * the activations) and computes only the result's piece; the alternative
 * keeps the operands' split of the reduction factor and reduce_scatters
 * the partial result.  Which is cheaper depends on the sizes (batch vs
 * weight); *|alt| is the operand-first choice, false when there is none. */
static bool operand_first(part *p, kdc_value_id v, const kdc_factor_rule *r,
                          const kdc_factor_shardings *fs, kdc_factor_shardings *alt) {
  const kdc_node *n = &p->f->nodes[v];
  const kdc_mesh *mesh = &p->m->mesh;
  if (n->op == KDC_OP_GATHER || n->op == KDC_OP_SCATTER_ADD) return false;
  *alt = *fs;
  bool changed = false;
  for (int f = 0; f < r->nfactors; f++) {
    if (r->kind[f] != KDC_FACTOR_REDUCTION || alt->n[f]) continue;
    for (int t = 0; t < n->n_in; t++) {
      kdc_factor_shardings o;
      kdc_rule_project_in(mesh, r, t, &p->have[n->in[t]], &o);
      if (!o.n[f]) continue;
      unsigned want = 0;
      for (int k = 0; k < o.n[f]; k++) want |= 1u << o.axes[f][k];
      for (int g = 0; g < r->nfactors; g++)
        for (int k = 0; k < alt->n[g]; k++)
          if (want & (1u << alt->axes[g][k])) {
            alt->n[g] = (uint8_t)k;
            break;
          }
      memcpy(alt->axes[f], o.axes[f], o.n[f]);
      alt->n[f] = o.n[f];
      changed = true;
      break;
    }
  }
  if (changed) consistent(mesh, r, alt);
  return changed;
}

static void warn_fallback(part *p, kdc_value_id v, kdc_value_id u, const kdc_sharding *target) {
  FILE *w = p->opt ? p->opt->warnings : NULL;
  if (!w) return;
  char where[256], b1[2048], b2[2048], b3[2048], o1[512], o2[512];
  kdc_sharding have = p->have[u], res = p->f->nodes[v].sharding, tgt = *target;
  have.origin = res.origin = tgt.origin = 0;
  res.open_mask = 0;
  fprintf(w, "warning: %s: operand %%%u %s [%s] is gathered to %s: the op cannot run split that "
          "way; result %s [%s]\n", kdc_pass_where(p->f, v, where, sizeof where), u,
          kdc_sharding_str(&p->m->mesh, &have, b1, sizeof b1), origin_text(p, u, o1, sizeof o1),
          kdc_sharding_str(&p->m->mesh, &tgt, b2, sizeof b2),
          kdc_sharding_str(&p->m->mesh, &res, b3, sizeof b3), origin_text(p, v, o2, sizeof o2));
}

/* Emits |op| on local types (attributes adjusted) into *out. */
static kdc_status emit(part *p, kdc_value_id v, const kdc_value_id *ins, const kdc_sharding *rs,
                       kdc_value_id *out) {
  kdc_node nd = p->f->nodes[v];
  const kdc_mesh *mesh = &p->m->mesh;
  kdc_type lt;
  KDC_RETURN_IF_ERROR(kdc_sharding_local_type(mesh, rs, &nd.type, &lt));
  kdc_attrs a = nd.attr;
  kdc_ir_set_origin(p->f, nd.origin);
  if (nd.op == KDC_OP_SLICE)
    for (int d = 0; d < lt.rank; d++)
      if (rs->naxes[d]) a.slice.limit.v[d] = lt.dims[d];
  /* built global, then cut: dense constants and iota on its own dim (the cut
   * fuses into the consumer as index arithmetic, passes/fuse.c); rng_uniform
   * is emitted split: its counter is the global element index */
  bool whole = nd.op == KDC_OP_CONSTANT && !nd.attr.constant.splat;
  kdc_type bt = lt; /* build type: global on the dims cut afterwards */
  for (int d = 0; d < lt.rank; d++)
    if (rs->naxes[d] && (whole || (nd.op == KDC_OP_IOTA && d == nd.attr.dim)))
      bt.dims[d] = nd.type.dims[d];
  kdc_value_id x = kdc_ir_append(p->f, nd.op, &bt, nd.n_in, ins, &a);
  kdc_sharding s = *rs;
  for (int d = 0; d < lt.rank; d++)
    if (bt.dims[d] != lt.dims[d]) s.naxes[d] = 0;
  p->f->nodes[x].sharding = s;
  for (int d = 0; d < lt.rank; d++) {
    if (bt.dims[d] == lt.dims[d]) continue;
    kdc_attrs sa;
    memset(&sa, 0, sizeof sa);
    sa.coll.naxes = rs->naxes[d];
    memcpy(sa.coll.axes, rs->axes[d], rs->naxes[d]);
    sa.coll.dim = d;
    kdc_type t = p->f->nodes[x].type;
    t.dims[d] = lt.dims[d];
    x = kdc_ir_append(p->f, KDC_OP_SHARD_SLICE, &t, 1, &x, &sa);
    s.naxes[d] = rs->naxes[d];
    memcpy(s.axes[d], rs->axes[d], rs->naxes[d]);
    p->f->nodes[x].sharding = s;
  }
  *out = x;
  return NULL;
}

static kdc_status node(part *p, kdc_value_id v) {
  const kdc_mesh *mesh = &p->m->mesh;
  kdc_node nd = p->f->nodes[v];
  if (!nd.sharding.present) nd.sharding = kdc_sharding_replicated(nd.type.rank);
  nd.sharding.open_mask = 0;
  if (nd.op == KDC_OP_PARAMETER) {
    kdc_type lt;
    kdc_status st = kdc_sharding_local_type(mesh, &nd.sharding, &nd.type, &lt);
    if (st) return located(p, v, st);
    p->local[v] = lt; /* applied at the end: rules read the global types */
    p->f->nodes[v].sharding = nd.sharding;
    p->map[v] = v;
    p->have[v] = nd.sharding;
    return NULL;
  }
  if (nd.op == KDC_OP_SHARDING_CONSTRAINT) {
    kdc_sharding t = nd.sharding;
    t.partial = 0;
    kdc_status st = get(p, nd.in[0], &t, &p->map[v]);
    if (st) return located(p, v, st);
    p->have[v] = t;
    return NULL;
  }
  kdc_factor_rule r;
  kdc_factor_shardings fs;
  kdc_status st = kdc_sharding_rule(p->f, v, &r);
  if (st) return located(p, v, st);
  kdc_factor_shardings alt;
  if (nd.op == KDC_OP_SCAN) {
    scan_factors(p, v, &r, &fs);
  } else {
    factors(p, v, &r, &fs);
    if (operand_first(p, v, &r, &fs, &alt) && cost_of(p, v, &r, &alt) < cost_of(p, v, &r, &fs))
      fs = alt;
  }
  bool halo = r.halo && kdc_partition_halo_check(p->f, mesh, v, &r, &fs);
  unsigned fs_axes = 0;
  for (int f = 0; f < r.nfactors; f++)
    for (int k = 0; k < fs.n[f]; k++) fs_axes |= 1u << fs.axes[f][k];
  uint16_t keep[KDC_RULE_MAX_TENSORS];
  linear(p, &p->f->nodes[v], fs_axes, keep);
  kdc_value_id *ins = kdc_xmalloc((size_t)(nd.n_in ? nd.n_in : 1) * sizeof *ins);
  kdc_type lts[KDC_RULE_MAX_TENSORS];      /* operands' local types */
  kdc_sharding wants[KDC_RULE_MAX_TENSORS]; /* and shardings */
  uint16_t partial = 0;
  for (int t = 0; t < nd.n_in && !st; t++) {
    kdc_value_id u = nd.in[t];
    kdc_sharding want = kdc_sharding_replicated(r.rank[t]);
    kdc_rule_project_out(mesh, &r, t, &fs, &want);
    want.partial = keep[t];
    partial |= keep[t];
    /* a fallback: the operand loses axes the result keeps on that dim's factors */
    kdc_factor_shardings had;
    bool exact = kdc_rule_project_in(mesh, &r, t, &p->have[u], &had);
    for (int f = 0; f < r.nfactors && exact; f++)
      if (had.n[f] > fs.n[f] && r.kind[f] == KDC_FACTOR_NEED_REPL) exact = false;
    if (!exact) warn_fallback(p, v, u, &want);
    wants[t] = want;
    st = kdc_sharding_local_type(mesh, &want, &p->f->nodes[u].type, &lts[t]);
    if (!st) st = get(p, u, &want, &ins[t]);
  }
  for (int f = 0; f < r.nfactors; f++)
    if (r.kind[f] == KDC_FACTOR_REDUCTION)
      for (int k = 0; k < fs.n[f]; k++) partial |= (uint16_t)(1u << fs.axes[f][k]);
  kdc_sharding rs = kdc_sharding_replicated(nd.type.rank);
  kdc_rule_project_out(mesh, &r, r.ntensors - 1, &fs, &rs);
  rs.partial = partial;
  rs.origin = nd.sharding.origin;
  kdc_value_id x = KDC_NO_VALUE;
  bool vocab = (nd.op == KDC_OP_GATHER || nd.op == KDC_OP_SCATTER_ADD) && fs.n[0] > 0;
  if (!st && vocab) /* vocab split: masked local lookup (partition_gather.c) */
    st = kdc_partition_vocab(p->f, mesh, &nd, ins, lts, wants, fs.n[0], fs.axes[0], &rs, &x);
  else if (!st && halo) /* spatial split: halo exchange (partition_halo.c) */
    st = kdc_partition_halo(p->f, mesh, &nd, ins, lts, wants, &r, &fs, &rs, &x);
  else if (!st) st = emit(p, v, ins, &rs, &x);
  free(ins);
  if (st) return located(p, v, st);
  p->map[v] = x;
  p->have[v] = rs;
  kdc_sharding want = nd.sharding;
  /* a partial axis the propagated sharding splits a dim on is reduced
   * (reduce_scatter) on the way: a value cannot be both */
  want.partial = (uint16_t)(partial & ~kdc_sharding_used_mask(&want));
  if (!kdc_sharding_same_split(&rs, &want)) { /* back to the propagated sharding */
    st = get(p, v, &want, &x);
    if (st) return located(p, v, st);
    p->map[v] = x;
    p->have[v] = want;
  }
  return NULL;
}

/* Records a PARTIAL provenance entry per partial axis of new value |x|. */
static void note_partials(part *p, kdc_value_id old, kdc_value_id x) {
  const kdc_sharding *s = &p->have[old];
  kdc_factor_rule r;
  if (!s->partial || kdc_sharding_rule(p->f, old, &r)) return;
  for (int a = 0; a < p->m->mesh.naxes; a++) {
    if (!(s->partial & (1u << a))) continue;
    kdc_prov e;
    memset(&e, 0, sizeof e);
    e.kind = KDC_PROV_PARTIAL;
    e.func = p->f;
    e.value = x;
    e.dim = -1;
    e.axis = a;
    e.source = KDC_NO_VALUE;
    e.op = x;
    e.factor = -1;
    for (int f = 0; f < r.nfactors; f++)
      if (r.kind[f] == KDC_FACTOR_REDUCTION) e.factor = f;
    kdc_ir_prov_add(p->m, &e);
  }
}

/* Is the weight |name| a parameter of a function other than |f|? */
static bool weight_shared(const kdc_module *m, const kdc_func *f, const char *name) {
  for (size_t i = 0; i < m->n_funcs; i++) {
    const kdc_func *g = m->funcs[i];
    for (size_t j = 0; g != f && j < g->n_params; j++) {
      const kdc_node *nd = &g->nodes[g->params[j]];
      if (nd->attr.param.name && strcmp(nd->attr.param.name, name) == 0) return true;
    }
  }
  return false;
}

/* A weight parameter read only through shard_slices of one kind (a
 * replicated d2/kernel consumed by a dot split on its contracting dim) takes
 * the sliced sharding itself: the runtime cuts it once at load instead of
 * every run (the plan keeps the global weight).  Repeated, so a weight cut
 * on two dims narrows twice.  Only weights no other function reads (a
 * train_step updates the weight with its own sharding).  fold[x] = the
 * parameter replacing folded shard_slice x. */
static void narrow_weights(part *p, kdc_value_id *fold) {
  kdc_func *f = p->f;
  size_t n = f->n_nodes;
  for (size_t i = 0; i < f->n_params; i++) {
    kdc_value_id w = f->params[i];
    kdc_node *pn = &f->nodes[w];
    if (pn->attr.param.kind != KDC_PARAM_WEIGHT || !pn->attr.param.name ||
        weight_shared(p->m, f, pn->attr.param.name))
      continue;
    bool result = false;
    for (size_t r = 0; r < f->n_results; r++) result |= f->results[r] == w;
    for (bool changed = !result; changed;) {
      changed = false;
      const kdc_attr_coll *cut = NULL;
      kdc_value_id cut_node = KDC_NO_VALUE;
      size_t n_users = 0;
      bool ok = true;
      for (size_t x = p->n0; x < n && ok; x++) {
        if (fold[x] != KDC_NO_VALUE) continue;
        const kdc_node *nd = &f->nodes[x];
        for (int k = 0; k < nd->n_in && ok; k++) {
          kdc_value_id u = nd->in[k];
          while (u >= p->n0 && fold[u] != KDC_NO_VALUE) u = fold[u];
          if (u != w) continue;
          n_users++;
          ok = nd->op == KDC_OP_SHARD_SLICE &&
               (!cut || (cut->dim == nd->attr.coll.dim && cut->naxes == nd->attr.coll.naxes &&
                         !memcmp(cut->axes, nd->attr.coll.axes, (size_t)cut->naxes)));
          if (ok) cut = &nd->attr.coll, cut_node = (kdc_value_id)x;
        }
      }
      if (!ok || !n_users) break;
      kdc_sharding *s = &pn->sharding;
      int d = (int)cut->dim;
      if (s->naxes[d] + cut->naxes > KDC_MAX_AXES_PER_DIM) break;
      memcpy(s->axes[d] + s->naxes[d], cut->axes, (size_t)cut->naxes);
      s->naxes[d] = (uint8_t)(s->naxes[d] + cut->naxes);
      p->local[w].dims[d] = f->nodes[cut_node].type.dims[d];
      /* fold exactly the users checked above: a slice of one of them (the
       * weight cut on a second dim) reads w only once they are folded, and
       * is the next round's cut, not this one's (descending order: a user's
       * input is never marked before the user is looked at) */
      for (size_t x = n; x-- > p->n0;) {
        if (fold[x] != KDC_NO_VALUE || f->nodes[x].op != KDC_OP_SHARD_SLICE) continue;
        kdc_value_id u = f->nodes[x].in[0];
        while (u >= p->n0 && fold[u] != KDC_NO_VALUE) u = fold[u];
        if (u == w) fold[x] = w;
      }
      changed = true;
    }
  }
}

static kdc_status partition_func(kdc_module *m, kdc_func *f, const kdc_pass_options *opt) {
  part p = {m, f, opt, f->n_nodes, NULL, NULL, NULL, NULL, 0, 0};
  bool one = kdc_mesh_devices(&m->mesh) <= 1;
  p.map = kdc_xcalloc(p.n0 + 1, sizeof *p.map);
  p.have = kdc_xcalloc(p.n0 + 1, sizeof *p.have);
  p.local = kdc_xcalloc(p.n0 + 1, sizeof *p.local);
  kdc_status st = NULL;
  const char *saved_origin = f->cur_origin;
  if (one) { /* only drop the constraints */
    for (size_t v = 0; v < p.n0; v++)
      p.map[v] = f->nodes[v].op == KDC_OP_SHARDING_CONSTRAINT ? p.map[f->nodes[v].in[0]]
                                                               : (kdc_value_id)v;
    kdc_pass_func_rebuild(f, p.map, NULL, 0);
    free(p.map), free(p.have), free(p.local);
    return NULL;
  }
  for (size_t v = 0; v < p.n0 && !st; v++) st = node(&p, (kdc_value_id)v);
  /* results: no partials, except those an accumulator scan's body was
   * given (propagate_shardings.c): its carries stay partial in the loop */
  bool body = kdc_ir_func_is_body(m, f);
  for (size_t i = 0; i < f->n_results && !st; i++) {
    kdc_value_id r = f->results[i], x;
    kdc_sharding t = p.have[r];
    t.partial = body ? (uint16_t)(f->nodes[r].sharding.partial & t.partial) : 0;
    if (body && t.partial != f->nodes[r].sharding.partial) {
      char where[256];
      st = KDC_ERR(KDC_UNSUPPORTED, "%s: result %zu of this recurrent (scan) body should be a "
                   "partial sum over the batch axes (an accumulated weight gradient) but is "
                   "not: this batch split of the loop is not supported",
                   kdc_pass_where(f, r, where, sizeof where), i);
      break;
    }
    st = get(&p, r, &t, &x);
    if (!st) f->results[i] = x;
  }
  f->cur_origin = saved_origin;
  if (!st) {
    for (size_t v = 0; v < p.n0; v++) note_partials(&p, (kdc_value_id)v, p.map[v]);
    size_t n = f->n_nodes, k = 0;
    kdc_value_id *repl = kdc_xmalloc(n * sizeof *repl), *order = kdc_xmalloc(n * sizeof *order);
    kdc_value_id *pos = kdc_xmalloc(n * sizeof *pos), *fold = kdc_xmalloc(n * sizeof *fold);
    for (size_t v = 0; v < n; v++) fold[v] = KDC_NO_VALUE;
    narrow_weights(&p, fold);
    for (size_t v = 0; v < n; v++) {
      bool kept = (v >= p.n0 && fold[v] == KDC_NO_VALUE) || f->nodes[v].op == KDC_OP_PARAMETER;
      repl[v] = kept ? (kdc_value_id)v : v >= p.n0 ? fold[v] : p.map[v];
      pos[v] = KDC_NO_VALUE;
      if (kept) pos[v] = (kdc_value_id)k, order[k++] = (kdc_value_id)v;
    }
    for (size_t v = 0; v < n; v++) /* one step to a kept node */
      if (repl[v] >= p.n0 && repl[v] < n && fold[repl[v]] != KDC_NO_VALUE) repl[v] = fold[repl[v]];
    for (size_t v = 0; v < n; v++) f->nodes[v].sharding.open_mask = 0;
    for (size_t v = 0; v < p.n0; v++)
      if (f->nodes[v].op == KDC_OP_PARAMETER) f->nodes[v].type = p.local[v];
    for (size_t i = 1; i < m->n_prov; i++) { /* provenance follows the new ids */
      kdc_prov *e = &m->prov[i];
      if (e->func != f) continue;
      if (e->value < n) e->value = pos[repl[e->value]];
      if (e->source < n) e->source = pos[repl[e->source]];
      if (e->op < n) e->op = pos[repl[e->op]];
    }
    kdc_pass_func_rebuild(f, repl, order, k);
    free(repl), free(order), free(pos), free(fold);
  }
  free(p.map), free(p.have), free(p.cache), free(p.local);
  return st;
}

kdc_status kdc_pass_partition(kdc_module *m, const kdc_pass_options *opt) {
  for (size_t i = 0; i < m->n_funcs; i++) KDC_RETURN_IF_ERROR(partition_func(m, m->funcs[i], opt));
  return NULL;
}
