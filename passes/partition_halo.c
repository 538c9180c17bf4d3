/*
 * passes/partition_halo.c: the local program of a convolution, reduce_window
 * or select_and_scatter split on a spatial dim (a halo factor of
 * passes/sharding_rules.c), by halo exchange (SHARDING.md 4, "spatial
 * partitioning").  Called by passes/partition.c for those nodes instead of
 * its generic emit.
 *
 * Per split dim (operand 0 dim d, mesh axis A of n shards, local input rows
 * Sl = S/n): input row i = p*P + q*Qs - lo, where p runs over the split
 * index (the output rows, or for a weight gradient the kernel rows: stride
 * P, Sl = (local count) * P by the rule's alignment) and q over the full
 * other one (Q positions, step Qs).  A device then needs
 *     L = lo              rows before its piece (from the device at c - 1),
 *     R = (Q-1)Qs + 1 - P - lo   rows after it (from the device at c + 1):
 *   left  = collective_permute [A] shift=+1 (slice of the last L rows)
 *   right = collective_permute [A] shift=-1 (slice of the first R rows)
 *   x'    = concatenate(left, x, right) on d; the op runs on x' with no
 *           padding on d.
 * The permute yields zeros off the mesh, i.e. exactly the unsplit op's zero
 * padding at the global borders; reduce_window max/min replaces them with
 * its identity (-inf / +inf) on the first / last device (a select on the
 * device coordinate, read as shard_slice [A] of iota(n), like
 * partition_gather.c's offset).  Dims are exchanged one after the other, so
 * the second exchange carries the corners.  R < 0 needs no rows: the
 * trailing rows no window reaches are left unread.
 *
 * Valid when (kdc_partition_halo_check; else the caller gathers the dim with
 * its fallback warning): one mesh axis on the dim, 0 <= L <= Sl, R <= Sl (a
 * halo comes from the next device only) and -R < stride (the local output
 * has exactly its share of rows).  The result keeps the split; the weight
 * gradient form (kernel split, a reduction factor) is a partial sum.
 */
#include <math.h>
#include <string.h>

#include "passes/passes.h"

typedef struct geom {
  int d;                 /* operand 0 dim */
  int64_t lo, R, stride; /* rows needed before / after the piece; the op's stride */
} geom;

/* Operand 0's dim holding factor |f| and the halo geometry of that dim. */
static bool geometry(const kdc_func *fn, const kdc_node *n, const kdc_factor_rule *r, int f,
                     geom *g) {
  int d = -1, res = r->ntensors - 1;
  for (int k = 0; k < r->rank[0] && d < 0; k++)
    if (r->nf[0][k] == 1 && r->f[0][k][0] == f) d = k;
  if (d < 0) return false;
  int64_t P, Q, Qs, lo;
  if (n->op == KDC_OP_CONVOLUTION) {
    const kdc_attr_conv *a = &n->attr.conv;
    int s = d - 1;
    bool out_split = r->nf[res][d] == 1 && r->f[res][d][0] == f;
    lo = a->pad_low.v[s];
    g->stride = a->stride.v[s];
    if (out_split) P = a->stride.v[s], Q = kdc_ir_type(fn, n->in[1])->dims[s], Qs = a->rhs_dilation.v[s];
    else P = a->rhs_dilation.v[s], Q = n->type.dims[d], Qs = a->stride.v[s];
  } else {
    const kdc_attr_window *a = &n->attr.window;
    lo = a->pad_low.v[d];
    g->stride = P = a->stride.v[d];
    Q = a->window.v[d];
    Qs = a->dilation.v[d];
  }
  g->d = d;
  g->lo = lo;
  g->R = (Q - 1) * Qs + 1 - P - lo;
  return true;
}

bool kdc_partition_halo_check(const kdc_func *f, const kdc_mesh *mesh, kdc_value_id v,
                              kdc_factor_rule *r, kdc_factor_shardings *fs) {
  const kdc_node *n = &f->nodes[v];
  bool any = false;
  for (int k = 0; k < r->nfactors; k++) {
    if (!(r->halo >> k & 1) || !fs->n[k]) continue;
    geom g;
    bool ok = fs->n[k] == 1 && geometry(f, n, r, k, &g);
    if (ok) {
      int64_t sl = kdc_ir_type(f, n->in[0])->dims[g.d] / mesh->sizes[fs->axes[k][0]];
      ok = g.lo >= 0 && g.lo <= sl && g.R <= sl && -g.R < g.stride;
    }
    if (!ok) {
      r->kind[k] = KDC_FACTOR_NEED_REPL;
      fs->n[k] = 0;
    }
    any |= ok;
  }
  return any;
}

typedef struct hb {
  kdc_func *f;
  kdc_sharding s; /* sharding of the intermediate pieces: operand 0's */
  kdc_value_id x; /* operand 0 (a parameter still has its global type) */
  kdc_type xt;    /* so its local type is kept here */
} hb;

static const kdc_type *ty(hb *b, kdc_value_id v) {
  return v == b->x ? &b->xt : kdc_ir_type(b->f, v);
}

static kdc_value_id app(hb *b, kdc_op op, const kdc_type *t, int n, const kdc_value_id *in,
                        const kdc_attrs *a, const kdc_sharding *s) {
  kdc_value_id v = kdc_ir_append(b->f, op, t, n, in, a);
  b->f->nodes[v].sharding = s->rank == t->rank ? *s : kdc_sharding_replicated(t->rank);
  b->f->nodes[v].sharding.partial = s->rank == t->rank ? s->partial : 0;
  return v;
}

/* Rows [from, to) of |x| on dim |d|. */
static kdc_value_id rows(hb *b, kdc_value_id x, int d, int64_t from, int64_t to) {
  kdc_type t = *ty(b, x);
  kdc_attrs a;
  memset(&a, 0, sizeof a);
  a.slice.start.n = a.slice.limit.n = a.slice.stride.n = t.rank;
  for (int k = 0; k < t.rank; k++) {
    a.slice.limit.v[k] = t.dims[k];
    a.slice.stride.v[k] = 1;
  }
  a.slice.start.v[d] = from;
  a.slice.limit.v[d] = to;
  t.dims[d] = to - from;
  return app(b, KDC_OP_SLICE, &t, 1, &x, &a, &b->s);
}

static kdc_value_id permute(hb *b, kdc_value_id x, int axis, int64_t shift) {
  kdc_attrs a;
  memset(&a, 0, sizeof a);
  a.coll.naxes = 1;
  a.coll.axes[0] = (uint8_t)axis;
  a.coll.shift = shift;
  kdc_type t = *kdc_ir_type(b->f, x); /* appending may move the nodes */
  return app(b, KDC_OP_COLLECTIVE_PERMUTE, &t, 1, &x, &a, &b->s);
}

static kdc_value_id constant(hb *b, const kdc_type *t, double x) {
  kdc_attrs a;
  memset(&a, 0, sizeof a);
  a.constant.splat = true;
  a.constant.data = kdc_arena_alloc(b->f->module->arena, 8);
  if (t->dtype == KDC_DTYPE_F32) *(float *)a.constant.data = (float)x;
  else *(int32_t *)a.constant.data = (int32_t)x;
  kdc_sharding r = kdc_sharding_replicated(t->rank);
  return app(b, KDC_OP_CONSTANT, t, 0, NULL, &a, t->rank ? &b->s : &r);
}

/* |h| with |fill| where this device's coordinate on |axis| is |edge|. */
static kdc_value_id border(hb *b, kdc_value_id h, int axis, int64_t n, int64_t edge, double fill) {
  int64_t one = 1;
  kdc_type ti = kdc_type_make(KDC_DTYPE_I32, 1, &n), t1 = kdc_type_make(KDC_DTYPE_I32, 1, &one);
  kdc_type t0 = kdc_type_make(KDC_DTYPE_I32, 0, NULL), p0 = t0;
  p0.dtype = KDC_DTYPE_BOOL;
  kdc_sharding r1 = kdc_sharding_replicated(1), r0 = kdc_sharding_replicated(0), sl = r1;
  sl.naxes[0] = 1;
  sl.axes[0][0] = (uint8_t)axis;
  kdc_attrs a;
  memset(&a, 0, sizeof a);
  kdc_value_id c = app(b, KDC_OP_IOTA, &ti, 0, NULL, &a, &r1); /* a.dim = 0 */
  a.coll.naxes = 1;
  a.coll.axes[0] = (uint8_t)axis;
  c = app(b, KDC_OP_SHARD_SLICE, &t1, 1, &c, &a, &sl);
  c = app(b, KDC_OP_RESHAPE, &t0, 1, &c, NULL, &r0);
  memset(&a, 0, sizeof a);
  a.cmp = KDC_CMP_EQ;
  kdc_value_id in[3] = {c, constant(b, &t0, (double)edge), KDC_NO_VALUE};
  kdc_value_id p = app(b, KDC_OP_COMPARE, &p0, 2, in, &a, &r0);
  kdc_type ht = *kdc_ir_type(b->f, h), pt = ht;
  pt.dtype = KDC_DTYPE_BOOL;
  memset(&a, 0, sizeof a);
  p = app(b, KDC_OP_BROADCAST, &pt, 1, &p, &a, &b->s);
  in[0] = p, in[1] = constant(b, &ht, fill), in[2] = h;
  return app(b, KDC_OP_SELECT, &ht, 3, in, NULL, &b->s);
}

kdc_status kdc_partition_halo(kdc_func *f, const kdc_mesh *mesh, const kdc_node *nd,
                              const kdc_value_id *ins, const kdc_type *in_local,
                              const kdc_sharding *in_s, const kdc_factor_rule *r,
                              const kdc_factor_shardings *fs, const kdc_sharding *rs,
                              kdc_value_id *out) {
  kdc_type lt;
  KDC_RETURN_IF_ERROR(kdc_sharding_local_type(mesh, rs, &nd->type, &lt));
  kdc_ir_set_origin(f, nd->origin);
  hb b = {f, in_s[0], ins[0], in_local[0]};
  kdc_attrs a = nd->attr;
  bool conv = nd->op == KDC_OP_CONVOLUTION;
  bool extreme = nd->op == KDC_OP_REDUCE_WINDOW && nd->attr.window.kind != KDC_RED_SUM;
  double fill = nd->attr.window.kind == KDC_RED_MAX ? -INFINITY : INFINITY;
  kdc_value_id x = ins[0];
  for (int k = 0; k < r->nfactors; k++) {
    geom g;
    if (!(r->halo >> k & 1) || !fs->n[k] || !geometry(f, nd, r, k, &g)) continue;
    int axis = fs->axes[k][0];
    int64_t n = mesh->sizes[axis], sl = ty(&b, x)->dims[g.d];
    kdc_value_id parts[3];
    int np = 0;
    if (g.lo > 0) {
      kdc_value_id h = permute(&b, rows(&b, x, g.d, sl - g.lo, sl), axis, 1);
      parts[np++] = extreme ? border(&b, h, axis, n, 0, fill) : h;
    }
    parts[np++] = x;
    if (g.R > 0) {
      kdc_value_id h = permute(&b, rows(&b, x, g.d, 0, g.R), axis, -1);
      parts[np++] = extreme ? border(&b, h, axis, n, n - 1, fill) : h;
    }
    if (np > 1) {
      kdc_type t = *ty(&b, x);
      t.dims[g.d] += (g.lo > 0 ? g.lo : 0) + (g.R > 0 ? g.R : 0);
      kdc_attrs ca;
      memset(&ca, 0, sizeof ca);
      ca.dim = g.d;
      x = app(&b, KDC_OP_CONCAT, &t, np, parts, &ca, &b.s);
    }
    if (conv) a.conv.pad_low.v[g.d - 1] = a.conv.pad_high.v[g.d - 1] = 0;
    else a.window.pad_low.v[g.d] = a.window.pad_high.v[g.d] = 0;
  }
  kdc_type in_t[3] = {*ty(&b, x), nd->n_in > 1 ? in_local[1] : lt, lt}, got;
  KDC_RETURN_IF_ERROR(kdc_ir_infer_window_op(nd->op, nd->n_in, in_t, &a, &got));
  if (!kdc_type_equal(&got, &lt)) {
    char b1[96], b2[96];
    return KDC_ERR(KDC_INTERNAL, "halo exchange of %s: local result %s, expected %s",
                   kdc_op_name(nd->op), kdc_type_str(&got, b1, sizeof b1),
                   kdc_type_str(&lt, b2, sizeof b2));
  }
  kdc_value_id in[2] = {x, nd->n_in > 1 ? ins[1] : KDC_NO_VALUE};
  *out = kdc_ir_append(f, nd->op, &lt, nd->n_in, in, &a);
  f->nodes[*out].sharding = *rs;
  return NULL;
}
