/*
 * passes/reshard.c: the reshard planner.  Given the sharding |src| a value
 * has (possibly partial) and the sharding |dst| a consumer wants, it returns
 * the sequence of SPMD ops (ops.def) that turns every device's local piece
 * under |src| into its piece under |dst|.  It is a pure function of
 * (mesh, global type, src, dst), so it is unit-tested on its own
 * (tests/sharding/test_reshard.c); passes/partition.c emits its steps.
 *
 * The order follows SHARDING.md 8 (partition step 3), "never gather before
 * you slice":
 *   1. local slices (shard_slice) of axes the value does not use yet, on dims
 *      whose current axes are a prefix of the wanted ones (no communication);
 *   2. partial axes: reduce_scatter where the wanted sharding splits a dim by
 *      them right after its current axes, all_reduce for the rest (partial
 *      axes the target keeps partial stay);
 *   3. then, until every dim matches: more slices; else all_to_all moving
 *      the minor-most axes of a dim that must lose them to a dim that wants
 *      them next; else all_gather of the minor-most axis of the first dim that
 *      must lose it (consecutive gathers of one dim merge into one).
 * A dim's axes can only change at their minor end, which is why a dim whose
 * current axes are not a prefix of the wanted ones must first lose axes.
 * Not done (documented in docs/sharding.md): replacing an axis by another of
 * the same size with a collective_permute (an all_gather + slice is used),
 * and partial targets over axes the source is not partial over.
 */
#include <stdio.h>
#include <string.h>

#include "passes/passes.h"

static bool is_prefix(const kdc_sharding *c, const kdc_sharding *t, int d) {
  if (c->naxes[d] > t->naxes[d]) return false;
  for (int k = 0; k < c->naxes[d]; k++)
    if (c->axes[d][k] != t->axes[d][k]) return false;
  return true;
}

static bool dims_equal(const kdc_sharding *a, const kdc_sharding *b) {
  for (int d = 0; d < a->rank; d++)
    if (!is_prefix(a, b, d) || a->naxes[d] != b->naxes[d]) return false;
  return true;
}

typedef struct planner {
  const kdc_mesh *m;
  const kdc_type *global;
  kdc_sharding cur;
  kdc_reshard_plan *out;
} planner;

static kdc_status push(planner *p, kdc_op op, int dim, int dim2, int n, const uint8_t *axes) {
  kdc_reshard_plan *o = p->out;
  if (o->n == KDC_RESHARD_MAX_STEPS)
    return KDC_ERR(KDC_INTERNAL, "reshard plan longer than %d steps", KDC_RESHARD_MAX_STEPS);
  kdc_reshard_step *s = &o->steps[o->n++];
  memset(s, 0, sizeof *s);
  s->op = op;
  s->attr.naxes = n;
  memcpy(s->attr.axes, axes, (size_t)n);
  s->attr.dim = dim;
  s->attr.dim2 = dim2;
  p->cur.origin = 0;
  s->after = p->cur;
  return kdc_sharding_local_type(p->m, &p->cur, p->global, &s->local);
}

/* Step 1 / 3a: slice in the free axes that come next on each dim. */
static kdc_status slices(planner *p, const kdc_sharding *t, bool *progress) {
  kdc_sharding *c = &p->cur;
  for (int d = 0; d < c->rank; d++) {
    if (!is_prefix(c, t, d)) continue;
    uint8_t ax[KDC_MAX_AXES_PER_DIM];
    int n = 0;
    unsigned busy = kdc_sharding_used_mask(c) | c->partial;
    for (int k = c->naxes[d]; k < t->naxes[d] && !(busy & (1u << t->axes[d][k])); k++)
      ax[n++] = t->axes[d][k];
    if (!n) continue;
    for (int i = 0; i < n; i++) c->axes[d][c->naxes[d]++] = ax[i];
    KDC_RETURN_IF_ERROR(push(p, KDC_OP_SHARD_SLICE, d, 0, n, ax));
    *progress = true;
  }
  return NULL;
}

/* Step 2: reduce the partial axes |dst| does not keep. */
static kdc_status partials(planner *p, const kdc_sharding *t) {
  kdc_sharding *c = &p->cur;
  unsigned left = c->partial & ~t->partial;
  for (int d = 0; d < c->rank && left; d++) {
    if (!is_prefix(c, t, d)) continue;
    uint8_t ax[KDC_MAX_AXES_PER_DIM];
    int n = 0;
    for (int k = c->naxes[d]; k < t->naxes[d] && (left & (1u << t->axes[d][k])); k++)
      ax[n++] = t->axes[d][k];
    if (!n) continue;
    for (int i = 0; i < n; i++) {
      c->axes[d][c->naxes[d]++] = ax[i];
      left &= ~(1u << ax[i]);
      c->partial &= (uint16_t)~(1u << ax[i]);
    }
    KDC_RETURN_IF_ERROR(push(p, KDC_OP_REDUCE_SCATTER, d, 0, n, ax));
  }
  if (!left) return NULL;
  uint8_t ax[KDC_MAX_MESH_AXES];
  int n = 0;
  for (int a = 0; a < p->m->naxes; a++)
    if (left & (1u << a)) ax[n++] = (uint8_t)a;
  c->partial &= (uint16_t)~left;
  return push(p, KDC_OP_ALL_REDUCE, 0, 0, n, ax);
}

/* Step 3b: an all_to_all moving the minor-most axes of a dim that must lose
 * them to a dim that wants exactly them next. */
static kdc_status all_to_all(planner *p, const kdc_sharding *t, bool *progress) {
  kdc_sharding *c = &p->cur;
  for (int i = 0; i < c->rank; i++) {
    if (is_prefix(c, t, i)) continue;
    int cp = 0;
    while (cp < c->naxes[i] && cp < t->naxes[i] && c->axes[i][cp] == t->axes[i][cp]) cp++;
    for (int j = 0; j < c->rank; j++) {
      if (j == i || !is_prefix(c, t, j)) continue;
      int have = c->naxes[j], best = 0;
      for (int m = c->naxes[i] - cp; m >= 1 && !best; m--) {
        if (have + m > t->naxes[j]) continue;
        bool ok = true;
        for (int k = 0; k < m && ok; k++)
          ok = c->axes[i][c->naxes[i] - m + k] == t->axes[j][have + k];
        if (ok) best = m;
      }
      if (!best) continue;
      uint8_t ax[KDC_MAX_AXES_PER_DIM];
      for (int k = 0; k < best; k++) ax[k] = c->axes[i][c->naxes[i] - best + k];
      c->naxes[i] = (uint8_t)(c->naxes[i] - best);
      for (int k = 0; k < best; k++) c->axes[j][c->naxes[j]++] = ax[k];
      *progress = true;
      return push(p, KDC_OP_ALL_TO_ALL, j, i, best, ax); /* split j, concat i */
    }
  }
  return NULL;
}

/* Step 3c: gather the minor-most axis of the first dim that must lose axes. */
static kdc_status all_gather(planner *p, const kdc_sharding *t) {
  kdc_sharding *c = &p->cur;
  for (int d = 0; d < c->rank; d++) {
    if (is_prefix(c, t, d)) continue;
    uint8_t a = c->axes[d][--c->naxes[d]];
    kdc_reshard_plan *o = p->out;
    kdc_reshard_step *prev = o->n ? &o->steps[o->n - 1] : NULL;
    if (prev && prev->op == KDC_OP_ALL_GATHER && prev->attr.dim == d) {
      /* gather b then a == one gather over (a, b), a major */
      memmove(prev->attr.axes + 1, prev->attr.axes, (size_t)prev->attr.naxes);
      prev->attr.axes[0] = a;
      prev->attr.naxes++;
      c->origin = 0;
      prev->after = *c;
      return kdc_sharding_local_type(p->m, c, p->global, &prev->local);
    }
    return push(p, KDC_OP_ALL_GATHER, d, 0, 1, &a);
  }
  return KDC_ERR(KDC_INTERNAL, "reshard: no dim to gather");
}

kdc_status kdc_reshard_plan_make(const kdc_mesh *m, const kdc_type *global, const kdc_sharding *src,
                                 const kdc_sharding *dst, kdc_reshard_plan *out) {
  kdc_type lt;
  char b1[2048], b2[2048];
  memset(out, 0, sizeof *out);
  kdc_sharding s = src->present ? *src : kdc_sharding_replicated(global->rank);
  kdc_sharding t = dst->present ? *dst : kdc_sharding_replicated(global->rank);
  if (s.rank != global->rank || t.rank != global->rank)
    return KDC_ERR(KDC_INTERNAL, "reshard: sharding rank differs from the type's");
  if (t.partial & ~s.partial)
    return KDC_ERR(KDC_UNSUPPORTED, "reshard %s -> %s: making a value partial is not supported",
                   kdc_sharding_str(m, &s, b1, sizeof b1), kdc_sharding_str(m, &t, b2, sizeof b2));
  KDC_RETURN_IF_ERROR(kdc_sharding_local_type(m, &s, global, &lt));
  KDC_RETURN_IF_ERROR(kdc_sharding_local_type(m, &t, global, &lt));
  planner p = {m, global, s, out};
  p.cur.open_mask = 0;
  p.cur.replicated = 0;
  bool progress = false;
  KDC_RETURN_IF_ERROR(slices(&p, &t, &progress));
  KDC_RETURN_IF_ERROR(partials(&p, &t));
  for (int guard = 0; !dims_equal(&p.cur, &t); guard++) {
    if (guard > 4 * KDC_RESHARD_MAX_STEPS) return KDC_ERR(KDC_INTERNAL, "reshard: no progress");
    progress = false;
    KDC_RETURN_IF_ERROR(slices(&p, &t, &progress));
    if (progress) continue;
    KDC_RETURN_IF_ERROR(all_to_all(&p, &t, &progress));
    if (progress) continue;
    KDC_RETURN_IF_ERROR(all_gather(&p, &t));
  }
  return NULL;
}

double kdc_coll_bytes(const kdc_mesh *m, kdc_op op, const kdc_attr_coll *c, const kdc_type *in_local,
                      const kdc_type *out_local) {
  double n = (double)kdc_mesh_axes_size(m, c->naxes, c->axes);
  double in = (double)kdc_type_bytes(in_local), out = (double)kdc_type_bytes(out_local);
  switch (op) {
  case KDC_OP_ALL_GATHER: return (n - 1) / n * out;
  case KDC_OP_REDUCE_SCATTER: return (n - 1) / n * in;
  case KDC_OP_ALL_REDUCE: return 2 * (n - 1) / n * in;
  case KDC_OP_ALL_TO_ALL: return (n - 1) / n * in;
  case KDC_OP_COLLECTIVE_PERMUTE: return in;
  default: return 0;
  }
}

char *kdc_reshard_step_str(const kdc_mesh *m, const kdc_reshard_step *s, char *buf, size_t n) {
  char g[1024];
  size_t k = (size_t)snprintf(buf, n, "%s [", kdc_op_name(s->op));
  for (int i = 0; i < s->attr.naxes && k < n; i++)
    k += (size_t)snprintf(buf + k, n - k, i ? ",%s" : "%s", m->names[s->attr.axes[i]]);
  if (k < n) k += (size_t)snprintf(buf + k, n - k, "]");
  if (k < n && s->op == KDC_OP_ALL_TO_ALL)
    k += (size_t)snprintf(buf + k, n - k, " split=%lld concat=%lld", (long long)s->attr.dim,
                          (long long)s->attr.dim2);
  else if (k < n && s->op != KDC_OP_ALL_REDUCE)
    k += (size_t)snprintf(buf + k, n - k, " dim=%lld", (long long)s->attr.dim);
  if (k < n && s->op != KDC_OP_SHARD_SLICE)
    snprintf(buf + k, n - k, " groups=%s",
             kdc_mesh_groups_str(m, s->attr.naxes, s->attr.axes, g, sizeof g));
  return buf;
}

kdc_value_id kdc_reshard_emit(kdc_func *f, kdc_value_id v, const kdc_reshard_plan *p) {
  for (int i = 0; i < p->n; i++) {
    const kdc_reshard_step *s = &p->steps[i];
    kdc_attrs a;
    memset(&a, 0, sizeof a);
    a.coll = s->attr;
    kdc_value_id nv = kdc_ir_append(f, s->op, &s->local, 1, &v, &a);
    f->nodes[nv].sharding = s->after;
    v = nv;
  }
  return v;
}
