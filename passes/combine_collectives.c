/*
 * passes/combine_collectives.c: merges small independent all_reduces into
 * one (XLA's AllReduceCombiner, on kdc's partitioned IR).
 *
 * A data-parallel training step ends with several tiny all_reduces: the
 * masked loss's numerator and row count, each output's loss, every
 * BatchNormalization layer's batch sums (sum x, sum (x - mean)^2, the row
 * count), small bias gradients.  Each collective costs a rendezvous of every
 * device (and a message per peer across processes) whatever its size, so
 * several small ones cost several latencies where one would do.
 *
 * Rule.  all_reduces with the same mesh axes (same order) and the same
 * dtype, each of at most KDC_COMBINE_MAX_BYTES local bytes, none of which
 * depends on another (through any path), are combined while their total
 * stays within KDC_COMBINE_MAX_BYTES and their count within
 * KDC_KERNEL_MAX_INPUTS (the concatenate below is one kernel, ir/ir.h):
 *
 *   %a' = reshape %a : f32[n_a]          (each member's operand, flat; not for rank 1)
 *   %c  = concatenate %a', %b', ... dim=0
 *   %r  = all_reduce [axes] %c
 *   %ra = slice %r [0:n_a] -> reshape to a's type  (replaces the member a;
 *                                                  its sharding and origin)
 *   ...
 *
 * all_reduce is the only op combined (all_gather / reduce_scatter keep
 * their own: the sharded optimizer update's collectives are large and
 * dim-specific).  Candidates are taken in node order, per (axes, dtype):
 * the open group closes when a candidate depends on one of its members or
 * would exceed the size or the count; the candidate then opens the next group.  So the
 * groups of one key are contiguous in node order and the graph with each
 * group contracted to one node stays acyclic; keys are processed one after
 * the other, each on the function rebuilt by the previous one (a combined
 * all_reduce is an ordinary node for the next key).  The new order is a
 * topological sort of the contracted graph that takes the ready node of
 * least original index first: a group runs at its last member's place, the
 * members' users that came earlier move right after it.
 *
 * Numerics.  An all_reduce sums each element over the group in increasing
 * device id, independently of the other elements (runtime/coll_shm.c,
 * comm_p2p.c, ir/interp_spmd.c), and reshape / concatenate / slice copy
 * bits: the combined program's results are bitwise those of the separate
 * all_reduces.
 *
 * The threshold (local bytes of one combined all_reduce): 64 KiB, or
 * kdc_pass_options.combine_max_bytes (< 0: the pass does nothing).  Larger
 * all_reduces (weight gradients) are left alone: copying them into a
 * buffer would cost more than the rendezvous it saves.
 */
#include <stdlib.h>
#include <string.h>

#include "passes/passes.h"

/* MAX_MEMBERS: the concatenate is one kernel reading every member's operand
 * (ir/ir.h): a 64-layer MLP's 64 bias gradients once made one of 64. */
enum { KDC_COMBINE_MAX_BYTES = 64 << 10, MAX_MEMBERS = KDC_KERNEL_MAX_INPUTS };

int64_t kdc_pass_opt_combine_max_bytes(const kdc_pass_options *opt) {
  if (!opt || opt->combine_max_bytes == 0) return KDC_COMBINE_MAX_BYTES;
  return opt->combine_max_bytes < 0 ? 0 : opt->combine_max_bytes;
}

/* The combining key of an all_reduce: axes (in order) and dtype. */
typedef struct comb_key {
  int naxes;
  uint8_t axes[KDC_MAX_MESH_AXES];
  kdc_dtype dtype;
} comb_key;

static comb_key key_of(const kdc_node *n) {
  comb_key k;
  memset(&k, 0, sizeof k);
  k.naxes = n->attr.coll.naxes;
  memcpy(k.axes, n->attr.coll.axes, sizeof k.axes);
  k.dtype = n->type.dtype;
  return k;
}

static bool same_key(const comb_key *a, const comb_key *b) {
  return a->naxes == b->naxes && a->dtype == b->dtype &&
         !memcmp(a->axes, b->axes, (size_t)a->naxes * sizeof a->axes[0]);
}

/* Local bytes of |n|'s result, or -1 when it is not a combining candidate. */
static int64_t candidate_bytes(const kdc_node *n, int64_t max_bytes) {
  if (n->op != KDC_OP_ALL_REDUCE || n->n_in != 1 || n->type.dtype == KDC_DTYPE_BOOL) return -1;
  int64_t numel = kdc_type_numel(&n->type);
  int64_t bytes = numel * (int64_t)kdc_dtype_size(n->type.dtype);
  return numel > 0 && bytes <= max_bytes ? bytes : -1;
}

/* One group of all_reduces to combine. */
typedef struct group {
  size_t n;
  kdc_value_id m[MAX_MEMBERS];
  int64_t bytes;
} group;

/* A binary min-heap of (key, unit). */
typedef struct heap {
  size_t n;
  uint64_t *v; /* key << 32 | unit */
} heap;

static void heap_push(heap *h, uint64_t x) {
  size_t i = h->n++;
  h->v[i] = x;
  while (i > 0 && h->v[(i - 1) / 2] > h->v[i]) {
    uint64_t t = h->v[i];
    h->v[i] = h->v[(i - 1) / 2];
    h->v[(i - 1) / 2] = t;
    i = (i - 1) / 2;
  }
}

static uint64_t heap_pop(heap *h) {
  uint64_t top = h->v[0];
  h->v[0] = h->v[--h->n];
  for (size_t i = 0;;) {
    size_t l = 2 * i + 1, r = l + 1, s = i;
    if (l < h->n && h->v[l] < h->v[s]) s = l;
    if (r < h->n && h->v[r] < h->v[s]) s = r;
    if (s == i) break;
    uint64_t t = h->v[i];
    h->v[i] = h->v[s];
    h->v[s] = t;
    i = s;
  }
  return top;
}

/* Appends the combined form of |g| to |f|: flat operands, concatenate,
 * all_reduce, per member a slice and a reshape to its type (with its
 * sharding and origin), recorded in repl[member].  The new ids are
 * [first, f->n_nodes). */
static void emit_group(kdc_func *f, const group *g, kdc_value_id *repl) {
  kdc_value_id flat[MAX_MEMBERS];
  int64_t off[MAX_MEMBERS + 1];
  off[0] = 0;
  for (size_t i = 0; i < g->n; i++) {
    kdc_value_id x = f->nodes[g->m[i]].in[0];
    int64_t numel = kdc_type_numel(&f->nodes[g->m[i]].type);
    f->cur_origin = f->nodes[g->m[i]].origin;
    flat[i] = f->nodes[g->m[i]].type.rank == 1 ? x : kdc_ir_reshape(f, x, 1, &numel);
    off[i + 1] = off[i] + numel;
  }
  f->cur_origin = NULL;
  kdc_value_id cat = kdc_ir_concat(f, (int)g->n, flat, 0);
  kdc_attrs attr = f->nodes[g->m[0]].attr; /* copied before the append moves the array */
  kdc_type rt = f->nodes[cat].type;
  kdc_value_id red = kdc_ir_append(f, KDC_OP_ALL_REDUCE, &rt, 1, &cat, &attr);
  for (size_t i = 0; i < g->n; i++) {
    kdc_node mem = f->nodes[g->m[i]]; /* a copy: appends move the array */
    int64_t lo = off[i], hi = off[i + 1], one = 1;
    f->cur_origin = mem.origin;
    kdc_value_id s = kdc_ir_slice(f, red, &lo, &hi, &one);
    kdc_value_id r = mem.type.rank == 1 ? s : kdc_ir_reshape(f, s, mem.type.rank, mem.type.dims);
    f->nodes[r].sharding = mem.sharding;
    repl[g->m[i]] = r;
  }
  f->cur_origin = NULL;
}

/* unit of node |v|: itself, or n_old + its group */
static size_t unit_of(const int32_t *member_of, size_t n_old, kdc_value_id v) {
  return member_of[v] >= 0 ? n_old + (size_t)member_of[v] : v;
}

/* The new node order of |f| after |n_groups| groups were appended
 * (group g's nodes are [gfirst[g], gfirst[g + 1])): a topological order of
 * the graph with every group contracted to one unit, least original index
 * (a group: its last member's) first.  Members are left out (replaced). */
static size_t order_units(const kdc_func *f, size_t n_old, const int32_t *member_of,
                          const group *groups, size_t n_groups, const kdc_value_id *gfirst,
                          kdc_value_id *order) {
  size_t nu = n_old + n_groups;
  uint32_t *indeg = kdc_xcalloc(nu + 1, sizeof *indeg);
  uint32_t *start = kdc_xcalloc(nu + 2, sizeof *start);
  /* edges unit(operand) -> unit(user) as CSR: count, then fill */
  for (size_t v = 0; v < n_old; v++) {
    size_t uv = unit_of(member_of, n_old, (kdc_value_id)v);
    for (int j = 0; j < f->nodes[v].n_in; j++) {
      size_t uo = unit_of(member_of, n_old, f->nodes[v].in[j]);
      if (uo != uv) start[uo + 1]++, indeg[uv]++;
    }
  }
  for (size_t u = 0; u < nu; u++) start[u + 1] += start[u];
  uint32_t *fill = kdc_xmalloc((nu + 1) * sizeof *fill);
  memcpy(fill, start, (nu + 1) * sizeof *fill);
  uint32_t *adj = kdc_xmalloc((start[nu] + 1) * sizeof *adj);
  for (size_t v = 0; v < n_old; v++) {
    size_t uv = unit_of(member_of, n_old, (kdc_value_id)v);
    for (int j = 0; j < f->nodes[v].n_in; j++) {
      size_t uo = unit_of(member_of, n_old, f->nodes[v].in[j]);
      if (uo != uv) adj[fill[uo]++] = (uint32_t)uv;
    }
  }
  uint64_t *key = kdc_xmalloc((nu + 1) * sizeof *key);
  for (size_t v = 0; v < n_old; v++) key[v] = v;
  for (size_t g = 0; g < n_groups; g++) key[n_old + g] = groups[g].m[groups[g].n - 1];
  heap h = {0, kdc_xmalloc((nu + 1) * sizeof *h.v)};
  for (size_t u = 0; u < nu; u++)
    if (indeg[u] == 0 && (u >= n_old || member_of[u] < 0)) heap_push(&h, key[u] << 32 | u);
  size_t k = 0;
  while (h.n) {
    size_t u = (size_t)(heap_pop(&h) & 0xffffffffu);
    if (u < n_old) {
      order[k++] = (kdc_value_id)u;
    } else {
      for (kdc_value_id x = gfirst[u - n_old]; x < gfirst[u - n_old + 1]; x++) order[k++] = x;
    }
    for (uint32_t e = start[u]; e < start[u + 1]; e++)
      if (--indeg[adj[e]] == 0) heap_push(&h, key[adj[e]] << 32 | adj[e]);
  }
  free(h.v), free(key), free(adj), free(fill), free(start), free(indeg);
  return k;
}

/* Combines the candidates of key |k| in |f|; *out_changed when a group of
 * at least two was formed. */
static kdc_status combine_key(kdc_func *f, const comb_key *k, int64_t max_bytes,
                              bool *out_changed) {
  size_t n = f->n_nodes;
  int32_t *dep = kdc_xcalloc(n + 1, sizeof *dep);    /* latest group id v depends on */
  int32_t *member_of = kdc_xmalloc((n + 1) * sizeof *member_of);
  size_t cap = 8, n_groups = 0;
  group *groups = kdc_xmalloc(cap * sizeof *groups);
  int32_t open = 0;                                   /* 1-based id of the open group, 0 none */
  for (size_t v = 0; v < n; v++) {
    const kdc_node *nd = &f->nodes[v];
    member_of[v] = -1;
    int32_t d = 0;
    for (int j = 0; j < nd->n_in; j++) d = dep[nd->in[j]] > d ? dep[nd->in[j]] : d;
    dep[v] = d;
    int64_t bytes = candidate_bytes(nd, max_bytes);
    if (bytes < 0) continue;
    comb_key kv = key_of(nd);
    if (!same_key(&kv, k)) continue;
    group *g = open ? &groups[open - 1] : NULL;
    if (!g || d == open || g->bytes + bytes > max_bytes || g->n == MAX_MEMBERS) {
      if (n_groups == cap) groups = kdc_xrealloc(groups, (cap *= 2) * sizeof *groups);
      g = &groups[n_groups++];
      g->n = 0;
      g->bytes = 0;
      open = (int32_t)n_groups;
    }
    g->m[g->n++] = (kdc_value_id)v;
    g->bytes += bytes;
    dep[v] = open;
  }
  /* keep the groups of two or more, renumbered */
  size_t kept = 0;
  for (size_t i = 0; i < n_groups; i++)
    if (groups[i].n >= 2) groups[kept++] = groups[i];
  n_groups = kept;
  if (n_groups) {
    for (size_t i = 0; i < n_groups; i++)
      for (size_t j = 0; j < groups[i].n; j++) member_of[groups[i].m[j]] = (int32_t)i;
    kdc_value_id *repl = kdc_xmalloc((n + 1) * sizeof *repl);
    for (size_t v = 0; v < n; v++) repl[v] = (kdc_value_id)v;
    kdc_value_id *gfirst = kdc_xmalloc((n_groups + 1) * sizeof *gfirst);
    for (size_t i = 0; i < n_groups; i++) {
      gfirst[i] = (kdc_value_id)f->n_nodes;
      emit_group(f, &groups[i], repl);
    }
    gfirst[n_groups] = (kdc_value_id)f->n_nodes;
    kdc_status st = kdc_ir_take_error(f);
    if (st) {
      free(gfirst), free(repl), free(groups), free(member_of), free(dep);
      return st;
    }
    size_t total = f->n_nodes;
    repl = kdc_xrealloc(repl, (total + 1) * sizeof *repl);
    for (size_t v = n; v < total; v++) repl[v] = (kdc_value_id)v;
    kdc_value_id *order = kdc_xmalloc((total + 1) * sizeof *order);
    size_t n_order = order_units(f, n, member_of, groups, n_groups, gfirst, order);
    /* every node is ordered: the contracted graph is acyclic (header) */
    size_t members = 0;
    for (size_t i = 0; i < n_groups; i++) members += groups[i].n;
    KDC_ASSERT(n_order == total - members);
    kdc_pass_func_rebuild(f, repl, order, n_order);
    free(order), free(gfirst), free(repl);
    *out_changed = true;
  }
  free(groups), free(member_of), free(dep);
  return NULL;
}

static kdc_status combine_func(kdc_func *f, int64_t max_bytes) {
  /* the keys present, in order of first appearance; each pass may rebuild f */
  comb_key keys[64];
  size_t n_keys = 0;
  for (size_t v = 0; v < f->n_nodes; v++) {
    const kdc_node *nd = &f->nodes[v];
    if (candidate_bytes(nd, max_bytes) < 0) continue;
    comb_key k = key_of(nd);
    size_t i = 0;
    while (i < n_keys && !same_key(&keys[i], &k)) i++;
    if (i == n_keys && n_keys < sizeof keys / sizeof keys[0]) keys[n_keys++] = k;
  }
  for (size_t i = 0; i < n_keys; i++) {
    bool changed = false;
    KDC_RETURN_IF_ERROR(combine_key(f, &keys[i], max_bytes, &changed));
  }
  return NULL;
}

kdc_status kdc_pass_combine_collectives(kdc_module *m, const kdc_pass_options *opt) {
  int64_t max_bytes = kdc_pass_opt_combine_max_bytes(opt);
  if (max_bytes <= 0) return NULL;
  for (size_t i = 0; i < m->n_funcs; i++) KDC_RETURN_IF_ERROR(combine_func(m->funcs[i], max_bytes));
  return NULL;
}
