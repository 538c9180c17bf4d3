/*
 * passes/partition_gather.c: the local program of a gather or scatter_add
 * whose vocabulary (table dim 0) is split over mesh axes A (Megatron's
 * vocab-parallel embedding; SHARDING.md 8a).  Called by passes/partition.c
 * for those two ops instead of its generic emit.  With n = |A| shards, a
 * device holds rows [off, off + V/n) where off = (its group index over A) *
 * V/n.  off is read from the program itself: shard_slice [A] of iota(V),
 * first element, so the plan stays one SPMD program (no new construct).
 * For ids (local piece) j = wrap(id) (ids < 0 add V, as kdc_gather_index):
 *
 *   gather:      l = j - off; in = 0 <= l < V/n;
 *                out = select(in, gather(table_local, select(in, l, 0)), 0)
 *                out = select(j outside [0, V), NaN, out)
 *                -> partial sum over A (every device adds NaN for an
 *                out-of-range id, so the sum is NaN like the unsplit op;
 *                integer tables: the fill value is not reproduced).
 *   scatter_add: out = scatter_add(select(in, l, V/n), updates): rows of
 *                other shards become the out-of-range id V/n, which
 *                scatter_add drops; the result is the device's rows.
 *
 * Intermediate values carry the ids' (or the result's) sharding; the offset
 * chain after shard_slice is device-dependent and marked replicated, like
 * the other coordinate-dependent values partition.c builds.
 */
#include <math.h>
#include <string.h>

#include "passes/passes.h"

typedef struct vb {
  kdc_func *f;
  kdc_sharding ids_s, out_s, repl0;
  kdc_value_id ids;  /* the local ids value: a parameter still has its global type */
  kdc_type ids_t;    /* so its local type is kept here */
} vb;

static const kdc_type *ty(vb *b, kdc_value_id v) {
  return v == b->ids ? &b->ids_t : kdc_ir_type(b->f, v);
}

static kdc_value_id app(vb *b, kdc_op op, const kdc_type *t, int n, const kdc_value_id *in,
                        const kdc_attrs *a, const kdc_sharding *s) {
  kdc_attrs z;
  if (!a) memset(&z, 0, sizeof z), a = &z;
  /* |t| and |s| may point into f->nodes, which the append may reallocate */
  kdc_type tc = *t;
  kdc_sharding sh = *s;
  kdc_value_id v = kdc_ir_append(b->f, op, &tc, n, in, a);
  if (sh.rank != tc.rank) sh = kdc_sharding_replicated(tc.rank);
  sh.rank = (uint8_t)tc.rank;
  b->f->nodes[v].sharding = sh;
  return v;
}

static kdc_value_id splat(vb *b, const kdc_type *t, double x, const kdc_sharding *s) {
  kdc_attrs a;
  memset(&a, 0, sizeof a);
  a.constant.splat = true;
  a.constant.data = kdc_arena_alloc(b->f->module->arena, 8);
  if (t->dtype == KDC_DTYPE_F32) *(float *)a.constant.data = (float)x;
  else if (t->dtype == KDC_DTYPE_I32) *(int32_t *)a.constant.data = (int32_t)x;
  else *(int64_t *)a.constant.data = (int64_t)x;
  return app(b, KDC_OP_CONSTANT, t, 0, NULL, &a, s);
}

static kdc_value_id bin(vb *b, kdc_op op, kdc_value_id x, kdc_value_id y) {
  kdc_value_id in[2] = {x, y};
  return app(b, op, ty(b, x), 2, in, NULL, &b->ids_s);
}

static kdc_value_id cmp(vb *b, kdc_cmp c, kdc_value_id x, kdc_value_id y) {
  kdc_type t = *ty(b, x);
  t.dtype = KDC_DTYPE_BOOL;
  kdc_attrs a;
  memset(&a, 0, sizeof a);
  a.cmp = c;
  kdc_value_id in[2] = {x, y};
  return app(b, KDC_OP_COMPARE, &t, 2, in, &a, &b->ids_s);
}

static kdc_value_id sel(vb *b, kdc_value_id p, kdc_value_id x, kdc_value_id y) {
  kdc_value_id in[3] = {p, x, y};
  const kdc_type *t = ty(b, x);
  return app(b, KDC_OP_SELECT, t, 3, in, NULL, t->rank == b->out_s.rank ? &b->out_s : &b->ids_s);
}

/* |x| (ids-shaped) broadcast over the trailing feature dims of |t|. */
static kdc_value_id widen(vb *b, kdc_value_id x, const kdc_type *t) {
  const kdc_type *xt = kdc_ir_type(b->f, x);
  if (xt->rank == t->rank) return x;
  kdc_type o = *t;
  o.dtype = xt->dtype;
  kdc_attrs a;
  memset(&a, 0, sizeof a);
  a.dims.n = xt->rank;
  for (int d = 0; d < xt->rank; d++) a.dims.v[d] = d;
  return app(b, KDC_OP_BROADCAST, &o, 1, &x, &a, &b->out_s);
}

kdc_status kdc_partition_vocab(kdc_func *f, const kdc_mesh *mesh, const kdc_node *nd,
                               const kdc_value_id *ins, const kdc_type *in_local,
                               const kdc_sharding *in_s, int naxes, const uint8_t *axes,
                               const kdc_sharding *rs, kdc_value_id *out) {
  bool g = nd->op == KDC_OP_GATHER;
  int ii = g ? 1 : 0;
  int64_t V = g ? f->nodes[nd->in[0]].type.dims[0] : nd->type.dims[0];
  int64_t n = kdc_mesh_axes_size(mesh, naxes, axes), vl = V / n;
  kdc_type ot;
  KDC_RETURN_IF_ERROR(kdc_sharding_local_type(mesh, rs, &nd->type, &ot));
  vb b = {f, in_s[ii], *rs, kdc_sharding_replicated(0), ins[g ? 1 : 0], in_local[g ? 1 : 0]};
  b.out_s.partial = 0;
  kdc_ir_set_origin(f, nd->origin);
  const kdc_type *it = &in_local[ii];
  kdc_dtype D = it->dtype;
  /* off: first element of this device's piece of iota(V) */
  kdc_type tv = kdc_type_make(D, 1, &V), tl = kdc_type_make(D, 1, &vl), t1 = tv, t0 = tv;
  t1.dims[0] = 1, t0.rank = 0;
  kdc_attrs a;
  memset(&a, 0, sizeof a);
  a.dim = 0;
  kdc_sharding r1 = kdc_sharding_replicated(1), sl = r1;
  kdc_value_id io = app(&b, KDC_OP_IOTA, &tv, 0, NULL, &a, &r1);
  memset(&a, 0, sizeof a);
  a.coll.naxes = naxes;
  memcpy(a.coll.axes, axes, (size_t)naxes);
  sl.naxes[0] = (uint8_t)naxes;
  memcpy(sl.axes[0], axes, (size_t)naxes);
  kdc_value_id off = app(&b, KDC_OP_SHARD_SLICE, &tl, 1, &io, &a, &sl);
  memset(&a, 0, sizeof a);
  a.slice.start.n = a.slice.limit.n = a.slice.stride.n = 1;
  a.slice.limit.v[0] = a.slice.stride.v[0] = 1;
  off = app(&b, KDC_OP_SLICE, &t1, 1, &off, &a, &r1);
  off = app(&b, KDC_OP_RESHAPE, &t0, 1, &off, NULL, &b.repl0);
  memset(&a, 0, sizeof a);
  off = app(&b, KDC_OP_BROADCAST, it, 1, &off, &a, &b.ids_s);
  kdc_value_id ids = ins[ii], zero = splat(&b, it, 0, &b.ids_s), vc = splat(&b, it, (double)V,
                                                                             &b.ids_s);
  kdc_value_id j = sel(&b, cmp(&b, KDC_CMP_LT, ids, zero), bin(&b, KDC_OP_ADD, ids, vc), ids);
  kdc_value_id l = bin(&b, KDC_OP_SUB, j, off), vlc = splat(&b, it, (double)vl, &b.ids_s);
  kdc_value_id in = bin(&b, KDC_OP_AND, cmp(&b, KDC_CMP_GE, l, zero), cmp(&b, KDC_CMP_LT, l, vlc));
  kdc_value_id x;
  if (g) {
    kdc_value_id gi[2] = {ins[0], sel(&b, in, l, zero)};
    x = app(&b, KDC_OP_GATHER, &ot, 2, gi, NULL, &b.out_s);
    kdc_value_id z = splat(&b, &ot, 0, &b.out_s);
    x = sel(&b, widen(&b, in, &ot), x, z);
    if (ot.dtype == KDC_DTYPE_F32) {
      kdc_value_id oob = bin(&b, KDC_OP_OR, cmp(&b, KDC_CMP_LT, j, zero),
                             cmp(&b, KDC_CMP_GE, j, vc));
      x = sel(&b, widen(&b, oob, &ot), splat(&b, &ot, (double)NAN, &b.out_s), x);
    }
  } else {
    kdc_value_id si[2] = {sel(&b, in, l, vlc), ins[1]};
    x = app(&b, KDC_OP_SCATTER_ADD, &ot, 2, si, NULL, &b.out_s);
  }
  f->nodes[x].sharding = *rs;
  *out = x;
  return NULL;
}
