/*
 * passes/sharding_rules.c: the sharding rule of every op, as data
 * (SHARDING.md 8a "Op rules as data", Shardy's OpShardingRule).
 *
 * A rule names the op's factors (independent index ranges), gives each a size
 * and a kind, and maps every dim of every operand and of the result to an
 * ordered list of factors (major to minor; a dim of several factors is a
 * reshape's compound dim).  Printed like Shardy:
 *     ([i,k],[k,j])->([i,j]) {i=8,j=16,k=4} reduction={k}
 * Kinds: pass (the factor may be split the same way on every tensor that has
 * it), reduction (it may be split on the operands; the result is then a
 * partial sum over those axes), need_replication (it must be unsplit).
 * A dim printed `_` has no factor (a broadcast size-1 dim, a reshape's size-1
 * dim): it is never split.
 *
 * Rules per op:
 *   elementwise, select, compare, convert, sharding_constraint: identity.
 *   parameter, constant, iota, rng_uniform (its step operand is a scalar):
 *     one pass factor per result dim.
 *   broadcast_in_dim: operand dim k shares result dim dims[k]'s factor unless
 *     it is a size-1 dim broadcast to more (then `_`); other result dims get
 *     result-only factors.
 *   transpose: permuted.  reshape: compound factors from a gcd walk over the
 *     two shapes (Shardy): equal runs share factors; where the walk gets stuck
 *     (coprime remainders, e.g. [2,3]->[3,2]) the dims up to the next point
 *     where both shapes' prefix products agree get need_replication factors.
 *   slice, pad: untouched dims pass; sliced or padded dims need_replication.
 *   concatenate: the concat dim need_replication, the others pass.
 *   reduce sum: reduced dims are reduction factors; reduce max/min/prod:
 *     need_replication (partials are sums only).
 *   dot_general: batch and free dims pass, contracting dims reduction.
 *   convolution: batch pass; groups 1: output channels pass, input channels
 *     reduction; with groups, channels need_replication; spatial dims are
 *     halo factors when the shards line up (see rule_conv), else
 *     need_replication.  reduce_window, select_and_scatter: dims with a
 *     trivial window pass, aligned windowed dims are halo factors
 *     (rule_window), others need_replication.  Halo factors are printed
 *     `halo={..}`; passes/partition_halo.c exchanges the window overlap.  gather: vocab (table dim 0) reduction, id and
 *     feature dims pass; scatter_add: vocab pass, id dims reduction, feature
 *     dims pass (partition.c masks the local lookup / scatter by the shard's
 *     vocab range: passes/partition_gather.c).  reverse: reversed dims
 *     need_replication, others pass.
 *   collectives, shard_slice: need_replication everywhere (they only exist
 *     after partitioning).
 *   scan: one pass factor (the batch) on dim 0 of every carry, dim 1 of
 *     every sequence and of the result, when those sizes agree; a second
 *     pass factor (the features: a recurrent layer's units) when every carry
 *     has the same last dim F > 1, on the last dim of every carry, sequence,
 *     loop-invariant operand and result whose last dim is F (and not its
 *     time or batch dim); every other dim need_replication.
 *     An accumulator scan (kdc_scan_accumulates: zero-initialised carries
 *     that only add, y made of them -- the weight gradients of
 *     passes/grad_scan.c) has the batch on dim 1 of its sequences only, as
 *     a reduction factor: split, its carries and result are partial sums.
 *     The body is partitioned with its parameters fixed from the scan's
 *     operands (propagate_shardings.c), so the split is sound for any body;
 *     what the body then needs (an all_gather of a split h for h @ U) is
 *     communication inside the loop, run once per iteration.
 * Also here: projecting a tensor's sharding onto factors and back.
 */
#include <stdio.h>
#include <string.h>

#include "passes/passes.h"

static int new_factor(kdc_factor_rule *r, int64_t size, kdc_factor_kind kind) {
  KDC_ASSERT(r->nfactors < KDC_RULE_MAX_FACTORS);
  r->size[r->nfactors] = size;
  r->kind[r->nfactors] = kind;
  return r->nfactors++;
}

static void add(kdc_factor_rule *r, int t, int d, int f) {
  KDC_ASSERT(r->nf[t][d] < KDC_RULE_MAX_DIM_FACTORS);
  r->f[t][d][r->nf[t][d]++] = (uint8_t)f;
}

/* Tensor |t| gets dims; returns t. */
static int tensor(kdc_factor_rule *r, int rank) {
  r->rank[r->ntensors] = rank;
  return r->ntensors++;
}

static int64_t gcd(int64_t a, int64_t b) {
  while (b) {
    int64_t t = a % b;
    a = b;
    b = t;
  }
  return a;
}

static void rule_reshape(kdc_factor_rule *r, const kdc_type *a, const kdc_type *b) {
  int ta = 0, tb = 1, i = 0, j = 0;
  int64_t ra = a->rank ? a->dims[0] : 1, rb = b->rank ? b->dims[0] : 1;
  while (i < a->rank && j < b->rank) {
    if (ra == 1) {
      if (++i < a->rank) ra = a->dims[i];
      continue;
    }
    if (rb == 1) {
      if (++j < b->rank) rb = b->dims[j];
      continue;
    }
    int64_t g = gcd(ra, rb);
    if (g > 1) {
      int f = new_factor(r, g, KDC_FACTOR_PASS);
      add(r, ta, i, f);
      add(r, tb, j, f);
      ra /= g;
      rb /= g;
      continue;
    }
    /* stuck: need_replication until the prefix products agree again */
    int64_t pa = ra, pb = rb;
    add(r, ta, i++, new_factor(r, ra, KDC_FACTOR_NEED_REPL));
    add(r, tb, j++, new_factor(r, rb, KDC_FACTOR_NEED_REPL));
    while (pa != pb && (i < a->rank || j < b->rank)) {
      if ((pa < pb && i < a->rank) || j >= b->rank) {
        if (a->dims[i] > 1) add(r, ta, i, new_factor(r, a->dims[i], KDC_FACTOR_NEED_REPL));
        pa *= a->dims[i++];
      } else {
        if (b->dims[j] > 1) add(r, tb, j, new_factor(r, b->dims[j], KDC_FACTOR_NEED_REPL));
        pb *= b->dims[j++];
      }
    }
    ra = i < a->rank ? a->dims[i] : 1;
    rb = j < b->rank ? b->dims[j] : 1;
  }
}

static bool in_list(const kdc_dimlist *l, int64_t d) {
  for (int i = 0; i < l->n; i++)
    if (l->v[i] == d) return true;
  return false;
}

static void rule_dot(kdc_factor_rule *r, const kdc_attr_dot *a, const kdc_type *l,
                     const kdc_type *rt) {
  int res = 2, rd = 0;
  for (int k = 0; k < a->lhs_batch.n; k++) {
    int f = new_factor(r, l->dims[a->lhs_batch.v[k]], KDC_FACTOR_PASS);
    add(r, 0, (int)a->lhs_batch.v[k], f);
    add(r, 1, (int)a->rhs_batch.v[k], f);
    add(r, res, rd++, f);
  }
  for (int d = 0; d < l->rank; d++)
    if (!in_list(&a->lhs_batch, d) && !in_list(&a->lhs_contract, d)) {
      int f = new_factor(r, l->dims[d], KDC_FACTOR_PASS);
      add(r, 0, d, f);
      add(r, res, rd++, f);
    }
  for (int d = 0; d < rt->rank; d++)
    if (!in_list(&a->rhs_batch, d) && !in_list(&a->rhs_contract, d)) {
      int f = new_factor(r, rt->dims[d], KDC_FACTOR_PASS);
      add(r, 1, d, f);
      add(r, res, rd++, f);
    }
  for (int k = 0; k < a->lhs_contract.n; k++) {
    int f = new_factor(r, l->dims[a->lhs_contract.v[k]], KDC_FACTOR_REDUCTION);
    add(r, 0, (int)a->lhs_contract.v[k], f);
    add(r, 1, (int)a->rhs_contract.v[k], f);
  }
}

/* Untouched dims pass between operand 0 and the result; the others get
 * need_replication factors (|same|: unchanged dim). */
static void rule_same_or_repl(kdc_factor_rule *r, const kdc_type *x, const kdc_type *out,
                              const bool *same, bool shared) {
  int res = r->ntensors - 1;
  for (int d = 0; d < x->rank; d++) {
    if (same[d]) {
      int f = new_factor(r, x->dims[d], KDC_FACTOR_PASS);
      add(r, 0, d, f);
      add(r, res, d, f);
    } else if (shared) {
      int f = new_factor(r, out->dims[d], KDC_FACTOR_NEED_REPL);
      for (int t = 0; t <= res; t++) add(r, t, d, f);
    } else {
      if (x->dims[d] > 1) add(r, 0, d, new_factor(r, x->dims[d], KDC_FACTOR_NEED_REPL));
      if (out->dims[d] > 1) add(r, res, d, new_factor(r, out->dims[d], KDC_FACTOR_NEED_REPL));
    }
  }
}

/* convolution: batch pass; output channels pass (groups 1); input channels
 * reduction (groups 1); with groups, the channel dims need_replication.
 * Spatial dim d (input S, kernel K, output O, stride s, no input dilation):
 * O * s == S (output rows line up with input rows: "same" padding, or a
 * window no longer than its stride): a halo factor shared by input and
 * output (pass); else K * rhs_dilation == S (the kernel spans the input: the
 * weight gradient of such a conv): a halo factor shared by input and kernel
 * (reduction, partial sums over the positions); otherwise need_replication.
 * passes/partition_halo.c runs the split ones with a halo exchange. */
static void rule_conv(kdc_factor_rule *r, const kdc_node *n, const kdc_type *x,
                      const kdc_type *w) {
  const kdc_attr_conv *a = &n->attr.conv;
  int ns = x->rank - 2, res = 2;
  bool g1 = a->groups == 1;
  int f = new_factor(r, x->dims[0], KDC_FACTOR_PASS);
  add(r, 0, 0, f);
  add(r, res, 0, f);
  f = new_factor(r, w->dims[ns + 1], g1 ? KDC_FACTOR_PASS : KDC_FACTOR_NEED_REPL);
  add(r, 1, ns + 1, f);
  add(r, res, ns + 1, f);
  if (g1) {
    f = new_factor(r, x->dims[ns + 1], KDC_FACTOR_REDUCTION);
    add(r, 0, ns + 1, f);
    add(r, 1, ns, f);
  } else {
    add(r, 0, ns + 1, new_factor(r, x->dims[ns + 1], KDC_FACTOR_NEED_REPL));
    if (w->dims[ns] > 1) add(r, 1, ns, new_factor(r, w->dims[ns], KDC_FACTOR_NEED_REPL));
  }
  for (int d = 0; d < ns; d++) {
    int64_t S = x->dims[d + 1], K = w->dims[d], O = n->type.dims[d + 1];
    bool flat = a->lhs_dilation.v[d] == 1;
    if (flat && O > 1 && O * a->stride.v[d] == S) {
      f = new_factor(r, O, KDC_FACTOR_PASS);
      r->halo |= 1ull << f;
      add(r, 0, d + 1, f);
      add(r, res, d + 1, f);
      if (K > 1) add(r, 1, d, new_factor(r, K, KDC_FACTOR_NEED_REPL));
      continue;
    }
    if (flat && K > 1 && K * a->rhs_dilation.v[d] == S) {
      f = new_factor(r, K, KDC_FACTOR_REDUCTION);
      r->halo |= 1ull << f;
      add(r, 0, d + 1, f);
      add(r, 1, d, f);
      if (O > 1) add(r, res, d + 1, new_factor(r, O, KDC_FACTOR_NEED_REPL));
      continue;
    }
    if (S > 1) add(r, 0, d + 1, new_factor(r, S, KDC_FACTOR_NEED_REPL));
    if (K > 1) add(r, 1, d, new_factor(r, K, KDC_FACTOR_NEED_REPL));
    if (O > 1) add(r, res, d + 1, new_factor(r, O, KDC_FACTOR_NEED_REPL));
  }
}

/* reduce_window, select_and_scatter: dims with a trivial window pass.  A
 * windowed dim whose output rows line up with the input rows (O * stride ==
 * S) is a halo factor (pass) of reduce_window; of select_and_scatter only
 * when no window crosses a shard edge (no low padding, window extent <=
 * stride), as its halo would have to return scattered values.  Other dims
 * need replication. */
static void rule_window(kdc_factor_rule *r, const kdc_node *n, const kdc_func *fn) {
  const kdc_attr_window *a = &n->attr.window;
  int res = r->ntensors - 1;
  bool sas = n->op == KDC_OP_SELECT_AND_SCATTER;
  for (int d = 0; d < n->type.rank; d++) {
    bool triv = a->window.v[d] == 1 && a->stride.v[d] == 1 && a->pad_low.v[d] == 0 &&
                a->pad_high.v[d] == 0;
    int64_t S = kdc_ir_type(fn, n->in[0])->dims[d];
    int64_t O = sas ? kdc_ir_type(fn, n->in[1])->dims[d] : n->type.dims[d];
    int64_t kd = (a->window.v[d] - 1) * a->dilation.v[d] + 1;
    bool halo = !triv && O > 1 && O * a->stride.v[d] == S &&
                (!sas || (a->pad_low.v[d] == 0 && kd <= a->stride.v[d]));
    if (halo) {
      int f = new_factor(r, O, KDC_FACTOR_PASS);
      r->halo |= 1ull << f;
      for (int t = 0; t <= res; t++) add(r, t, d, f);
      continue;
    }
    for (int t = 0; t <= res; t++) {
      int64_t sz = t == res ? n->type.dims[d] : kdc_ir_type(fn, n->in[t])->dims[d];
      if (triv) {
        if (t == 0) new_factor(r, sz, KDC_FACTOR_PASS);
        add(r, t, d, r->nfactors - 1);
      } else if (sz > 1) {
        add(r, t, d, new_factor(r, sz, KDC_FACTOR_NEED_REPL));
      }
    }
  }
}

/* gather(table [V,F..], ids [I..]) -> [I..,F..]: V (factor 0) reduction
 * (a masked local lookup, passes/partition_gather.c), F and I pass.
 * scatter_add(ids [I..], upd [I..,F..]) -> [V,F..]: V (factor 0) pass on the
 * result only (masked local scatter), F pass, I reduction. */
static void rule_indexed(kdc_factor_rule *r, const kdc_node *n, const kdc_type *a,
                         const kdc_type *b) {
  bool g = n->op == KDC_OP_GATHER;
  const kdc_type *ids = g ? b : a, *table = g ? a : &n->type;
  int res = 2, ti = g ? 0 : res, ii = g ? 1 : 0, oi = g ? res : 1; /* table, ids, rows */
  int f = new_factor(r, table->dims[0], g ? KDC_FACTOR_REDUCTION : KDC_FACTOR_PASS);
  add(r, ti, 0, f);
  for (int d = 0; d < ids->rank; d++) {
    f = new_factor(r, ids->dims[d], g ? KDC_FACTOR_PASS : KDC_FACTOR_REDUCTION);
    add(r, ii, d, f);
    add(r, oi, d, f);
  }
  for (int d = 1; d < table->rank; d++) {
    f = new_factor(r, table->dims[d], KDC_FACTOR_PASS);
    add(r, ti, d, f);
    add(r, oi, ids->rank + d - 1, f);
  }
}

static bool zero_splat(const kdc_node *n) {
  return n->op == KDC_OP_CONSTANT && n->attr.constant.splat && n->type.dtype == KDC_DTYPE_F32 &&
         *(const float *)n->attr.constant.data == 0.0f;
}

/* Whether body value |v| is built from the carry results |res| (n) by
 * reshape and concatenate only. */
static bool of_carries(const kdc_func *b, kdc_value_id v, const kdc_value_id *res, int n, int depth) {
  for (int i = 0; i < n; i++)
    if (res[i] == v) return true;
  const kdc_node *x = &b->nodes[v];
  if (depth > 8 || (x->op != KDC_OP_RESHAPE && x->op != KDC_OP_CONCAT)) return false;
  for (int k = 0; k < x->n_in; k++)
    if (!of_carries(b, x->in[k], res, n, depth + 1)) return false;
  return true;
}

bool kdc_scan_accumulates(const kdc_func *fn, const kdc_node *n) {
  const kdc_attr_scan *a = &n->attr.scan;
  const kdc_func *b = fn->module ? kdc_ir_module_find_func(fn->module, a->body) : NULL;
  int nc = (int)a->n_carry;
  if (!b || nc < 1 || a->n_xs < 1 || b->n_params != (size_t)n->n_in ||
      b->n_results != (size_t)nc + 1)
    return false;
  for (int i = 0; i < nc; i++) {
    kdc_value_id p = b->params[i], r = b->results[i];
    if (!zero_splat(&fn->nodes[n->in[i]])) return false;
    if (r == p) continue;
    const kdc_node *x = &b->nodes[r];
    if (x->op != KDC_OP_ADD || (x->in[0] == p) == (x->in[1] == p)) return false;
  }
  for (size_t u = 0; u < b->n_nodes; u++) { /* a carry feeds only its own add or y */
    const kdc_node *x = &b->nodes[u];
    for (int k = 0; k < x->n_in; k++)
      for (int i = 0; i < nc; i++) {
        if (x->in[k] != b->params[i] || (kdc_value_id)u == b->results[i]) continue;
        if (!of_carries(b, (kdc_value_id)u, b->results, nc, 0)) return false;
      }
  }
  for (int i = 0; i < nc; i++) /* no carry result is another carry's */
    for (int j = 0; j < nc; j++)
      if (i != j && b->results[i] == b->results[j]) return false;
  return of_carries(b, b->results[nc], b->results, nc, 0);
}

/* scan: the batch factor (first, factor 0, when it exists), the feature
 * factor (the carries' last dim), the rest need_replication.  In an
 * accumulator scan (kdc_scan_accumulates) the batch lives in the sequences
 * only and is a reduction factor: the carries and y are sums over the
 * batch; the feature factor passes (a weight gradient split by units). */
static void rule_scan(kdc_factor_rule *r, const kdc_node *n, const kdc_func *fn) {
  const kdc_attr_scan *a = &n->attr.scan;
  int res = r->ntensors - 1;
  bool acc = kdc_scan_accumulates(fn, n);
  int64_t b = acc ? kdc_ir_type(fn, n->in[a->n_carry])->dims[1]
                  : n->type.rank >= 2 ? n->type.dims[1] : -1;
  for (int i = 0; i < n->n_in && b >= 0; i++) {
    const kdc_type *t = kdc_ir_type(fn, n->in[i]);
    if (!acc && i < a->n_carry && (t->rank < 1 || t->dims[0] != b)) b = -1;
    if (i >= a->n_carry && i < a->n_carry + a->n_xs && (t->rank < 2 || t->dims[1] != b)) b = -1;
  }
  int fb = b > 1 ? new_factor(r, b, acc ? KDC_FACTOR_REDUCTION : KDC_FACTOR_PASS) : -1;
  /* the feature factor: the carries' common last dim (a recurrent layer's
   * units), on the last dim of every tensor whose last dim is neither its
   * time nor its batch dim and has that size */
  int64_t fsz = a->n_carry < 1 ? -1 : 0;
  for (int i = 0; i < a->n_carry && fsz >= 0; i++) {
    const kdc_type *t = kdc_ir_type(fn, n->in[i]);
    int64_t l = t->rank >= 2 ? t->dims[t->rank - 1] : -1;
    fsz = (fsz && l != fsz) || l <= 1 ? -1 : l;
  }
  int ff = fsz > 1 ? new_factor(r, fsz, KDC_FACTOR_PASS) : -1;
  for (int t = 0; t <= res; t++) {
    const kdc_type *ty = t == res ? &n->type : kdc_ir_type(fn, n->in[t]);
    int bd = t < a->n_carry ? (acc ? -1 : 0) : t < a->n_carry + a->n_xs ? 1 : t == res && !acc ? 1 : -1;
    bool timed = t == res || (t >= a->n_carry && t < a->n_carry + a->n_xs);
    int fd = ty->rank - 1;
    if (fd <= (timed ? 1 : t < a->n_carry && !acc ? 0 : -1) || ty->dims[fd] != fsz) fd = -1;
    for (int d = 0; d < ty->rank; d++) {
      if (fb >= 0 && d == bd) add(r, t, d, fb);
      else if (ff >= 0 && d == fd) add(r, t, d, ff);
      else if (ty->dims[d] > 1) add(r, t, d, new_factor(r, ty->dims[d], KDC_FACTOR_NEED_REPL));
    }
  }
}

/* Does the reshape |x| -> |out| only insert or drop dims of size 1 (its
 * other dims the same, in order)?  Then it moves shardings as a transpose
 * does: a pass-through op (priority 0/1), like pad below, so that in a
 * weight-gradient loop the accumulator's split reaches the per-gate
 * pieces (pad(reshape(dot))) of a GRU's dU before the dot is decided. */
static bool unit_dims_only(const kdc_type *x, const kdc_type *out) {
  int i = 0, j = 0;
  for (;;) {
    while (i < x->rank && x->dims[i] == 1) i++;
    while (j < out->rank && out->dims[j] == 1) j++;
    if (i == x->rank || j == out->rank) return i == x->rank && j == out->rank;
    if (x->dims[i++] != out->dims[j++]) return false;
  }
}

kdc_status kdc_sharding_rule(const kdc_func *fn, kdc_value_id v, kdc_factor_rule *r) {
  const kdc_node *n = kdc_ir_node(fn, v);
  const kdc_type *out = &n->type, *x = n->n_in ? kdc_ir_type(fn, n->in[0]) : NULL;
  unsigned fl = kdc_op_flags(n->op);
  memset(r, 0, sizeof *r);
  if (n->n_in + 1 > KDC_RULE_MAX_TENSORS)
    return KDC_ERR(KDC_UNSUPPORTED, "%s with %d operands: sharding rules take at most %d",
                   kdc_op_name(n->op), n->n_in, KDC_RULE_MAX_TENSORS - 1);
  for (int i = 0; i < n->n_in; i++) tensor(r, kdc_ir_type(fn, n->in[i])->rank);
  int res = tensor(r, out->rank);
  bool same[KDC_MAX_RANK];
  if ((fl & OPF_EW) || (fl & OPF_LEAF) || n->op == KDC_OP_SHARDING_CONSTRAINT) {
    r->pass_through = !(fl & OPF_LEAF);
    for (int d = 0; d < out->rank; d++) {
      int f = new_factor(r, out->dims[d], KDC_FACTOR_PASS);
      for (int t = 0; t <= res; t++) add(r, t, d, f);
    }
    return NULL;
  }
  switch (n->op) {
  case KDC_OP_RNG_UNIFORM: /* scalar step operand; the counter is the global index */
    for (int d = 0; d < out->rank; d++) add(r, res, d, new_factor(r, out->dims[d], KDC_FACTOR_PASS));
    return NULL;
  case KDC_OP_TRANSPOSE:
    r->pass_through = true;
    for (int d = 0; d < out->rank; d++) {
      int f = new_factor(r, out->dims[d], KDC_FACTOR_PASS);
      add(r, res, d, f);
      add(r, 0, (int)n->attr.dims.v[d], f);
    }
    return NULL;
  case KDC_OP_BROADCAST: {
    int fres[KDC_MAX_RANK];
    r->broadcast = true;
    for (int d = 0; d < out->rank; d++) {
      fres[d] = new_factor(r, out->dims[d], KDC_FACTOR_PASS);
      add(r, res, d, fres[d]);
    }
    for (int k = 0; k < x->rank; k++)
      if (x->dims[k] == out->dims[n->attr.dims.v[k]]) add(r, 0, k, fres[n->attr.dims.v[k]]);
    return NULL;
  }
  case KDC_OP_RESHAPE:
    rule_reshape(r, x, out);
    r->pass_through = unit_dims_only(x, out);
    return NULL;
  case KDC_OP_DOT: rule_dot(r, &n->attr.dot, x, kdc_ir_type(fn, n->in[1])); return NULL;
  case KDC_OP_REDUCE: {
    kdc_factor_kind k = n->attr.reduce.kind == KDC_RED_SUM ? KDC_FACTOR_REDUCTION
                                                             : KDC_FACTOR_NEED_REPL;
    for (int d = 0, rd = 0; d < x->rank; d++) {
      bool red = in_list(&n->attr.reduce.dims, d);
      int f = new_factor(r, x->dims[d], red ? k : KDC_FACTOR_PASS);
      add(r, 0, d, f);
      if (!red) add(r, res, rd++, f);
    }
    return NULL;
  }
  case KDC_OP_SLICE:
    for (int d = 0; d < x->rank; d++)
      same[d] = n->attr.slice.start.v[d] == 0 && n->attr.slice.stride.v[d] == 1 &&
                n->attr.slice.limit.v[d] == x->dims[d];
    rule_same_or_repl(r, x, out, same, false);
    return NULL;
  case KDC_OP_PAD:
    for (int d = 0; d < x->rank; d++)
      same[d] = n->attr.pad.low.v[d] == 0 && n->attr.pad.high.v[d] == 0 &&
                n->attr.pad.interior.v[d] == 0;
    rule_same_or_repl(r, x, out, same, false);
    r->pass_through = true; /* the padded dims need replication: the others pass */
    return NULL;
  case KDC_OP_CONVOLUTION: rule_conv(r, n, x, kdc_ir_type(fn, n->in[1])); return NULL;
  case KDC_OP_REDUCE_WINDOW:
  case KDC_OP_SELECT_AND_SCATTER: rule_window(r, n, fn); return NULL;
  case KDC_OP_GATHER:
  case KDC_OP_SCATTER_ADD: rule_indexed(r, n, x, kdc_ir_type(fn, n->in[1])); return NULL;
  case KDC_OP_SCAN: rule_scan(r, n, fn); return NULL;
  case KDC_OP_REVERSE:
    for (int d = 0; d < x->rank; d++) {
      bool rev = false;
      for (int k = 0; k < n->attr.dims.n; k++) rev |= n->attr.dims.v[k] == d;
      same[d] = !rev;
    }
    rule_same_or_repl(r, x, out, same, false);
    return NULL;
  case KDC_OP_CONCAT:
    for (int d = 0; d < out->rank; d++) {
      int f = new_factor(r, out->dims[d], d == n->attr.dim ? KDC_FACTOR_NEED_REPL : KDC_FACTOR_PASS);
      for (int t = 0; t <= res; t++) add(r, t, d, f);
    }
    return NULL;
  default: /* SPMD ops: never split across them */
    for (int d = 0; d < out->rank; d++) same[d] = false;
    rule_same_or_repl(r, x, out, same, false);
    return NULL;
  }
}

/* Factor names: i j k l m n o p q r s t u v w x y z, then f18, f19, ... */
static void put_factor(FILE *out, int f) {
  if (f < 18) fputc('i' + f, out);
  else fprintf(out, "f%d", f);
}

void kdc_sharding_rule_print(FILE *out, const kdc_factor_rule *r) {
  fputc('(', out);
  for (int t = 0; t < r->ntensors; t++) {
    if (t == r->ntensors - 1) fputs(")->(", out);
    else if (t) fputc(',', out);
    fputc('[', out);
    for (int d = 0; d < r->rank[t]; d++) {
      if (d) fputc(',', out);
      if (!r->nf[t][d]) fputc('_', out);
      for (int k = 0; k < r->nf[t][d]; k++) put_factor(out, r->f[t][d][k]);
    }
    fputc(']', out);
  }
  fputs(") {", out);
  for (int f = 0; f < r->nfactors; f++) {
    if (f) fputc(',', out);
    put_factor(out, f);
    fprintf(out, "=%lld", (long long)r->size[f]);
  }
  fputc('}', out);
  static const char *const kind_kw[] = {NULL, "reduction", "need_replication"};
  for (int k = KDC_FACTOR_REDUCTION; k <= KDC_FACTOR_NEED_REPL; k++) {
    bool first = true;
    for (int f = 0; f < r->nfactors; f++) {
      if (r->kind[f] != (kdc_factor_kind)k) continue;
      fprintf(out, first ? " %s={" : ",", kind_kw[k]);
      put_factor(out, f);
      first = false;
    }
    if (!first) fputc('}', out);
  }
  for (int f = 0, first = 1; f < r->nfactors; f++) {
    if (!(r->halo >> f & 1)) continue;
    fputs(first ? " halo={" : ",", out);
    put_factor(out, f);
    first = 0;
  }
  if (r->halo) fputc('}', out);
  if (r->pass_through) fputs(" pass_through", out);
  if (r->broadcast) fputs(" broadcast", out);
  fputc('\n', out);
}

bool kdc_rule_project_in(const kdc_mesh *m, const kdc_factor_rule *r, int t,
                         const kdc_sharding *s, kdc_factor_shardings *fs) {
  bool exact = true;
  memset(fs, 0, sizeof *fs);
  if (!s->present) return true;
  for (int d = 0; d < r->rank[t] && d < s->rank; d++) {
    int fi = 0;
    int64_t prod = 1;
    for (int k = 0; k < s->naxes[d]; k++) {
      int64_t sz = m->sizes[s->axes[d][k]];
      while (fi < r->nf[t][d] && prod == r->size[r->f[t][d][fi]]) fi++, prod = 1;
      int f = fi < r->nf[t][d] ? r->f[t][d][fi] : -1;
      if (f < 0 || r->size[f] % (prod * sz) != 0) {
        exact = false;
        break;
      }
      fs->axes[f][fs->n[f]++] = s->axes[d][k];
      prod *= sz;
    }
  }
  return exact;
}

void kdc_rule_project_out(const kdc_mesh *m, const kdc_factor_rule *r, int t,
                          const kdc_factor_shardings *fs, kdc_sharding *out) {
  for (int d = 0; d < r->rank[t]; d++) {
    out->naxes[d] = 0;
    for (int k = 0; k < r->nf[t][d]; k++) {
      int f = r->f[t][d][k];
      int64_t prod = 1;
      for (int i = 0; i < fs->n[f] && out->naxes[d] < KDC_MAX_AXES_PER_DIM; i++) {
        out->axes[d][out->naxes[d]++] = fs->axes[f][i];
        prod *= m->sizes[fs->axes[f][i]];
      }
      if (prod != r->size[f]) break; /* a minor factor cannot be split under a partly split one */
    }
  }
}
