/*
 * passes/fuse.c: kernel formation (loop fusion and input fusion).
 *
 * Output: kdc_node.group for every node, per the contract in ir/ir.h.  A
 * group is one generated kernel; its root (highest id) is the only member
 * written to memory, every other member is recomputed per element from the
 * root's index.  Roots are therefore executed in id order without cycles:
 * a member reads only group-mates, materialized values and free leaves.
 *
 * What goes where:
 *   - PARAMETER, dense CONSTANT, DOT (a GEMM call), collectives and ops this
 *     file does not know: never in a group (-1), always materialized.
 *   - shard_slice (SPMD, but no communication): data movement, index
 *     arithmetic over the device coordinates; fused like slice.
 *   - REDUCE: always the root of its own kernel; the chain that feeds it is
 *     fused into it (input fusion); its users read it from memory.
 *   - convolution, reduce_window, select_and_scatter, gather, scatter_add:
 *     roots of their own kernels too, but without input fusion (they read
 *     every operand element many times); reverse is data movement.
 *   - elementwise ops, broadcast_in_dim, transpose, slice, concatenate, pad,
 *     reshape, iota, shard_slice: fused into their consumer's kernel when every user is in
 *     that one kernel (loop fusion), else the root of a new kernel.
 *   - CONSTANT, splat or dense: -1 too (the verifier enforces it); codegen
 *     reads a splat operand as an immediate, so nothing is lost.
 *   - RESHAPE whose operand is materialized: -1, an alias of that buffer.
 *   - a producer never fuses through a BROADCAST that grows the element
 *     count (unless it is a free leaf): that would recompute it once per
 *     copy; it is materialized instead (XLA avoids the same duplication).
 *
 * Multi-output kernels.  A function result whose every user is in one
 * kernel, and whose dims are that kernel's root's, joins the kernel as a
 * second output (the kernel writes it at the root's index; ir.h contract):
 * an optimizer update reads the gradient, m, v and the weight once and
 * writes the new weight, m and v in one pass, instead of three kernels
 * re-reading each other's results.
 *
 * Values used by several kernels.  Such a value is materialized (a root),
 * unless it is cheap: its recompute tree -- itself plus the fusible
 * producers it would pull in, down to materialized values and free leaves
 * (iota; a broadcast that grows the element count counts one op, it never
 * pulls its operand in) -- has at most fuse_max_recompute ops (default 4;
 * 16 for a CUDA plan, where a kernel is bound by its memory traffic and
 * recomputing, e.g., an activation's gradient in each of the two kernels
 * that read it costs less than writing it and reading it back twice),
 * it is not a function result, and every user is in some kernel.  A value of
 * at least FUSE_BIG_BYTES (4 MiB per device, beyond a core's L2) may
 * recompute up to 16 DISTINCT ops (a shared operand counted once, dag_cost)
 * on the CPU too: writing it and reading it back in each consumer costs
 * more memory traffic than that much arithmetic (cnn_64's batch norm: x -
 * mean, 5 ops, was written as 16 MB for the variance and the gradient, and
 * the gradient's 2 * s * (x - mean), 11 distinct ops, as another 16 MB for
 * a reduction and the input gradient).  A cheap value is
 * then duplicated, one copy per consumer kernel (softmax's exp(x - max) is
 * the textbook case: one copy feeds the sum, one the division).
 *
 * Algorithm (deterministic: decisions depend only on ids):
 *   1. assign(): one sweep from the last node to the first; a node's users
 *      are all decided before it.
 *   2. duplicate(): from the groups of step 1, pick the cheap multi-kernel
 *      values (again last to first, so a clone's operands see the clones as
 *      users) and insert one copy per kernel right where the original was.
 *   3. assign() again on the new graph, renumber groups by root order,
 *      and check the contract (kdc_pass_fuse_check).
 *
 * Size cap.  A group holds at most KDC_GROUP_MAX_MEMBERS (ir/ir.h) nodes:
 * when a producer would join a full group it becomes the root of a new
 * kernel instead (its value is materialized).  A 100,000-layer elementwise
 * chain is thus ~400 kernels of 256 ops, not one body LLVM needs minutes
 * for (codegen itself takes any size: its walk has an explicit stack).
 * Likewise a group reads at most KDC_KERNEL_MAX_INPUTS values from outside
 * (the kernel's argument array): a producer whose operands would push it
 * over starts a new kernel (counted as an upper bound, see new_reads()).
 */
#include <stdlib.h>
#include <string.h>

#include "passes/passes.h"

/* Recompute caps (file comment): |max| ops for every value; a value of at
 * least |big_bytes| per device may recompute up to |big| distinct ops. */
typedef struct fuse_caps {
  int max, big;
  size_t big_bytes;
} fuse_caps;

/* Beyond a core's L2 (2 MiB on the session VM's Xeon): a value this large
 * is written to memory and read back from it by each consumer kernel. */
enum { FUSE_BIG_BYTES = 4 << 20 };

typedef enum kind {
  K_MATERIAL, /* never in a group */
  K_ROOT,     /* always its own root (REDUCE) */
  K_FUSIBLE,  /* member or root */
} kind;

/* Windowed and indexed ops read each operand element many times (a window,
 * every id): they are kernel roots and never pull their producers in. */
static bool is_windowed(kdc_op op) {
  return op == KDC_OP_CONVOLUTION || op == KDC_OP_REDUCE_WINDOW ||
         op == KDC_OP_SELECT_AND_SCATTER || op == KDC_OP_GATHER || op == KDC_OP_SCATTER_ADD;
}

static kind classify(const kdc_func *f, kdc_value_id v) {
  const kdc_node *nd = kdc_ir_node(f, v);
  unsigned fl = kdc_op_flags(nd->op);
  if (nd->op == KDC_OP_IOTA || nd->op == KDC_OP_SHARD_SLICE) return K_FUSIBLE;
  if (nd->op == KDC_OP_REDUCE || is_windowed(nd->op)) return K_ROOT;
  if (fl & OPF_COLL) return K_MATERIAL;
  if (fl & (OPF_EW | OPF_SHAPE)) return K_FUSIBLE;
  return K_MATERIAL; /* PARAMETER, DOT, anything new */
}

/* Free leaves cost nothing to recompute anywhere. */
static bool is_free(const kdc_func *f, kdc_value_id v) {
  return kdc_ir_node(f, v)->op == KDC_OP_IOTA;
}

/* May producer |p| be recomputed inside the kernel of its user |u|? */
static bool edge_ok(const kdc_func *f, kdc_value_id p, kdc_value_id u) {
  if (is_windowed(kdc_ir_node(f, u)->op)) return false;
  if (kdc_ir_node(f, u)->op != KDC_OP_BROADCAST || is_free(f, p)) return true;
  return kdc_type_numel(kdc_ir_type(f, u)) <= kdc_type_numel(kdc_ir_type(f, p));
}

static bool same_dims(const kdc_type *a, const kdc_type *b) {
  if (a->rank != b->rank) return false;
  for (int d = 0; d < a->rank; d++)
    if (a->dims[d] != b->dims[d]) return false;
  return true;
}

/* The one group all users of |v| are in and may absorb |v|, or -1.  A
 * function result joins only as a second output of a kernel whose root
 * (|root|[group]) has its dims. */
static int32_t consumer_group(const kdc_func *f, const kdc_users *us, const int32_t *g,
                              const kdc_value_id *root, kdc_value_id v) {
  if (us->start[v] == us->start[v + 1]) return -1;
  int32_t common = -1;
  for (uint32_t k = us->start[v]; k < us->start[v + 1]; k++) {
    kdc_value_id u = us->users[k];
    if (g[u] < 0 || !edge_ok(f, v, u)) return -1;
    if (common >= 0 && common != g[u]) return -1;
    common = g[u];
  }
  if (us->is_result[v] &&
      (g[root[common]] != common || !same_dims(kdc_ir_type(f, v), kdc_ir_type(f, root[common]))))
    return -1;
  return common;
}

/* Operands of |v| group |grp| does not read yet (|mark|[x] == grp: counted),
 * i.e. the buffers |v| adds when it joins.  An upper bound: a value read by
 * two groups in turn may be counted twice, a splat constant (an immediate)
 * or an alias is counted too -- a kernel is at most split early. */
static uint32_t new_reads(const kdc_func *f, const int32_t *mark, int32_t grp, kdc_value_id v) {
  const kdc_node *nd = kdc_ir_node(f, v);
  uint32_t n = 0;
  for (int j = 0; j < nd->n_in; j++) {
    bool seen = mark[nd->in[j]] == grp;
    for (int q = 0; q < j && !seen; q++) seen = nd->in[q] == nd->in[j];
    n += !seen;
  }
  return n;
}

/* new_reads(), and marks those operands as read by |grp|. */
static uint32_t count_reads(const kdc_func *f, int32_t *mark, int32_t grp, kdc_value_id v) {
  uint32_t n = new_reads(f, mark, grp, v);
  const kdc_node *nd = kdc_ir_node(f, v);
  for (int j = 0; j < nd->n_in; j++) mark[nd->in[j]] = grp;
  return n;
}

/* Step 1/3: groups for every node of |f| into |g|; returns the group count
 * (ids are not yet dense or ordered). */
static int32_t assign(const kdc_func *f, int32_t *g) {
  kdc_users us;
  kdc_pass_users_init(&us, f);
  int32_t next = 0;
  kdc_value_id *root = kdc_xmalloc((f->n_nodes + 1) * sizeof *root); /* per group */
  uint32_t *size = kdc_xmalloc((f->n_nodes + 1) * sizeof *size);     /* members per group */
  uint32_t *reads = kdc_xmalloc((f->n_nodes + 1) * sizeof *reads);   /* outside values read */
  int32_t *mark = kdc_xmalloc((f->n_nodes + 1) * sizeof *mark);      /* group that counted it */
  for (size_t i = 0; i < f->n_nodes; i++) mark[i] = -1;
  for (size_t i = f->n_nodes; i-- > 0;) {
    kdc_value_id v = (kdc_value_id)i;
    kind k = classify(f, v);
    int32_t common = k == K_FUSIBLE ? consumer_group(f, &us, g, root, v) : -1;
    if (common >= 0 && size[common] >= KDC_GROUP_MAX_MEMBERS) common = -1; /* full: new kernel */
    if (common >= 0) { /* would read too many buffers: new kernel (a join that does not add
                          reads is always taken: 64 slices of one buffer joining a concatenate
                          of them bring its reads from 64 down to 1) */
      uint32_t after = reads[common] - 1 + new_reads(f, mark, common, v);
      if (after > KDC_KERNEL_MAX_INPUTS && after > reads[common]) common = -1;
    }
    if (k == K_MATERIAL) g[i] = -1;
    else if (k == K_ROOT || common < 0) root[next] = v, size[next] = 1, reads[next] = 0, g[i] = next++;
    else g[i] = common, size[common]++, reads[common]--;
    if (g[i] >= 0) reads[g[i]] += count_reads(f, mark, g[i], v);
    /* A reshape that did not pull its operand in reads it from memory: alias. */
    for (uint32_t j = us.start[i]; j < us.start[i + 1]; j++) {
      kdc_value_id u = us.users[j];
      if (kdc_ir_node(f, u)->op == KDC_OP_RESHAPE && g[u] >= 0 && g[u] != g[i])
        size[g[u]]--, g[u] = -1;
    }
  }
  free(mark);
  free(reads);
  free(size);
  free(root);
  kdc_pass_users_free(&us);
  return next;
}

/* Recompute cost of every node (see the file comment), saturated at cap+1. */
static void costs(const kdc_func *f, int cap, int *cost) {
  for (size_t i = 0; i < f->n_nodes; i++) {
    const kdc_node *nd = &f->nodes[i];
    kdc_value_id v = (kdc_value_id)i;
    if (classify(f, v) != K_FUSIBLE || is_free(f, v)) {
      cost[i] = 0;
      continue;
    }
    /* a growing broadcast never pulls its operand in (edge_ok): one op */
    bool grows = nd->op == KDC_OP_BROADCAST &&
                 kdc_type_numel(&nd->type) > kdc_type_numel(kdc_ir_type(f, nd->in[0]));
    int c = 1;
    for (int j = 0; j < nd->n_in && !grows; j++)
      if (classify(f, nd->in[j]) == K_FUSIBLE) c += cost[nd->in[j]];
    cost[i] = c > cap ? cap + 1 : c;
  }
}

/* Distinct ops of |v|'s recompute DAG (the nodes costs() counts, each once:
 * a kernel evaluates a shared operand once), saturated at cap+1.  |seen| is
 * all -1 on entry and on return; |stack| has room for n_nodes entries. */
static int dag_cost(const kdc_func *f, kdc_value_id v, int cap, int32_t *seen,
                    kdc_value_id *stack) {
  int c = 0;
  size_t sp = 0, n_seen = 0;
  stack[sp++] = v;
  seen[v] = 0;
  kdc_value_id *order = stack + f->n_nodes / 2; /* visited, to reset |seen| */
  while (sp > 0 && c <= cap) {
    kdc_value_id u = stack[--sp];
    order[n_seen++] = u;
    const kdc_node *nd = kdc_ir_node(f, u);
    if (classify(f, u) != K_FUSIBLE || is_free(f, u)) continue;
    c++;
    if (nd->op == KDC_OP_BROADCAST &&
        kdc_type_numel(&nd->type) > kdc_type_numel(kdc_ir_type(f, nd->in[0])))
      continue; /* a growing broadcast never pulls its operand in: one op */
    for (int j = 0; j < nd->n_in && sp < f->n_nodes / 2; j++)
      if (seen[nd->in[j]] < 0) seen[nd->in[j]] = 0, stack[sp++] = nd->in[j];
  }
  for (size_t k = 0; k < n_seen; k++) seen[order[k]] = -1;
  while (sp > 0) seen[stack[--sp]] = -1;
  return c > cap ? cap + 1 : c;
}

/* Clone plan: node i gets copies for groups cg[start[i] .. start[i]+cnt[i]),
 * in descending step-1 group id; cnt[i] == 0 means not cloned. */
typedef struct clones {
  uint32_t *start, *cnt;
  int32_t *cg;
  kdc_value_id *id; /* id of the copy for cg[k], once appended */
  size_t n, cap;
} clones;

/* Inserts |grp| into the descending set |set|.  Step-1 ids grow as roots
 * get lower, so descending ids put copies in kernel execution order. */
static void add_group(int32_t *set, uint32_t *n, int32_t grp) {
  uint32_t k = 0;
  while (k < *n && set[k] > grp) k++;
  if (k < *n && set[k] == grp) return;
  memmove(set + k + 1, set + k, (*n - k) * sizeof *set);
  set[k] = grp;
  (*n)++;
}

/* The copy of |v| for group |grp|, or |v| itself when it is not cloned. */
static kdc_value_id copy_for(const clones *c, kdc_value_id v, int32_t grp) {
  for (uint32_t k = 0; k < c->cnt[v]; k++)
    if (c->cg[c->start[v] + k] == grp) return c->id[c->start[v] + k];
  KDC_ASSERT(c->cnt[v] == 0);
  return v;
}

/* Decides which values to duplicate (step 2).  Returns whether any is. */
static bool plan_clones(const kdc_func *f, const int32_t *g, const fuse_caps *caps, clones *c) {
  size_t n = f->n_nodes;
  int max_cost = caps->max;
  int *cost = kdc_xmalloc((n ? n : 1) * sizeof *cost);
  costs(f, max_cost, cost);
  int32_t *seen = kdc_xmalloc((n ? n : 1) * sizeof *seen);
  kdc_value_id *stack = kdc_xmalloc((2 * n + 2) * sizeof *stack);
  for (size_t i = 0; i < n; i++) seen[i] = -1;
  kdc_users us;
  kdc_pass_users_init(&us, f);
  int32_t *set = kdc_xmalloc((n + 1) * sizeof *set); /* group ids are < n */
  bool any = false;
  for (size_t i = n; i-- > 0;) {
    kdc_value_id v = (kdc_value_id)i;
    c->cnt[i] = 0;
    if (classify(f, v) != K_FUSIBLE || us.is_result[i]) continue;
    if (cost[i] > max_cost &&
        (caps->big <= max_cost || kdc_type_bytes(kdc_ir_type(f, v)) < caps->big_bytes ||
         dag_cost(f, v, caps->big, seen, stack) > caps->big))
      continue;
    uint32_t ns = 0;
    bool outside = us.start[i] == us.start[i + 1];
    for (uint32_t k = us.start[i]; k < us.start[i + 1] && !outside; k++) {
      kdc_value_id u = us.users[k];
      if (!edge_ok(f, v, u)) outside = true;
      else if (c->cnt[u] > 0)
        for (uint32_t q = 0; q < c->cnt[u]; q++) add_group(set, &ns, c->cg[c->start[u] + q]);
      else if (g[u] < 0) outside = true;
      else add_group(set, &ns, g[u]);
    }
    if (outside || ns < 2) continue;
    KDC_GROW(c->cg, c->cap, c->n + ns);
    c->id = kdc_xrealloc(c->id, c->cap * sizeof *c->id);
    memcpy(c->cg + c->n, set, ns * sizeof *set);
    c->start[i] = (uint32_t)c->n;
    c->cnt[i] = ns;
    c->n += ns;
    any = true;
  }
  free(set);
  free(stack);
  free(seen);
  kdc_pass_users_free(&us);
  free(cost);
  return any;
}

/* Step 2: inserts the planned copies and rewires every user to the copy of
 * its own kernel; the originals disappear. */
static void duplicate(kdc_func *f, const int32_t *g, clones *c) {
  size_t n = f->n_nodes;
  kdc_value_id *order = kdc_xmalloc((n + c->n) * sizeof *order);
  size_t n_order = 0;
  for (size_t i = 0; i < n; i++) {
    kdc_value_id v = (kdc_value_id)i;
    if (c->cnt[i] == 0) {
      kdc_node *nd = &f->nodes[i];
      if (g[i] >= 0)
        for (int j = 0; j < nd->n_in; j++) nd->in[j] = copy_for(c, nd->in[j], g[i]);
      order[n_order++] = v;
      continue;
    }
    for (uint32_t k = 0; k < c->cnt[i]; k++) {
      int32_t grp = c->cg[c->start[i] + k];
      kdc_node src = f->nodes[i]; /* by value: appending may move the array */
      kdc_value_id ins[16];
      kdc_value_id *in = src.n_in <= 16 ? ins : kdc_xmalloc((size_t)src.n_in * sizeof *in);
      for (int j = 0; j < src.n_in; j++) in[j] = copy_for(c, src.in[j], grp);
      kdc_value_id id = kdc_ir_append(f, src.op, &src.type, src.n_in, in, &src.attr);
      if (in != ins) free(in);
      f->nodes[id].origin = src.origin;
      f->nodes[id].sharding = src.sharding;
      c->id[c->start[i] + k] = id;
      order[n_order++] = id;
    }
  }
  kdc_value_id *repl = kdc_xmalloc(f->n_nodes * sizeof *repl);
  for (size_t i = 0; i < f->n_nodes; i++)
    repl[i] = i < n && c->cnt[i] > 0 ? KDC_NO_VALUE : (kdc_value_id)i;
  kdc_pass_func_rebuild(f, repl, order, n_order);
  free(repl);
  free(order);
}

/* Step 3: dense group ids in the order kernels run (by root id). */
static void renumber(kdc_func *f, const int32_t *g, int32_t n_groups) {
  int32_t *root = kdc_xmalloc(((size_t)n_groups + 1) * sizeof *root);
  int32_t *dense = kdc_xmalloc(((size_t)n_groups + 1) * sizeof *dense);
  for (int32_t k = 0; k < n_groups; k++) root[k] = -1;
  for (size_t i = 0; i < f->n_nodes; i++)
    if (g[i] >= 0) root[g[i]] = (int32_t)i;
  int32_t next = 0;
  for (size_t i = 0; i < f->n_nodes; i++)
    if (g[i] >= 0 && root[g[i]] == (int32_t)i) dense[g[i]] = next++;
  for (size_t i = 0; i < f->n_nodes; i++) f->nodes[i].group = g[i] >= 0 ? dense[g[i]] : -1;
  free(dense);
  free(root);
}

static kdc_status fuse_func(kdc_func *f, const fuse_caps *caps) {
  size_t n = f->n_nodes;
  int32_t *g = kdc_xmalloc((n ? n : 1) * sizeof *g);
  assign(f, g);
  clones c = {0};
  c.start = kdc_xcalloc(n ? n : 1, sizeof *c.start);
  c.cnt = kdc_xcalloc(n ? n : 1, sizeof *c.cnt);
  if (caps->max > 0 && plan_clones(f, g, caps, &c)) {
    duplicate(f, g, &c);
    g = kdc_xrealloc(g, (f->n_nodes ? f->n_nodes : 1) * sizeof *g);
  }
  int32_t n_groups = assign(f, g);
  renumber(f, g, n_groups);
  free(c.start);
  free(c.cnt);
  free(c.cg);
  free(c.id);
  free(g);
  return kdc_pass_fuse_check(f);
}

kdc_status kdc_pass_fuse(kdc_module *m, const kdc_pass_options *opt) {
  fuse_caps caps = {kdc_pass_opt_fuse_recompute(opt), kdc_pass_opt_fuse_recompute_big(opt),
                    FUSE_BIG_BYTES};
  for (size_t i = 0; i < m->n_funcs; i++) KDC_RETURN_IF_ERROR(fuse_func(m->funcs[i], &caps));
  return NULL;
}

/* ---- the contract, checked --------------------------------------------- */

static kdc_status broken(const kdc_func *f, kdc_value_id v, const char *what) {
  char where[256];
  return KDC_ERR(KDC_INTERNAL, "%s: fusion contract broken: %s (group %d)",
                 kdc_pass_where(f, v, where, sizeof where), what, (int)kdc_ir_node(f, v)->group);
}

kdc_status kdc_pass_fuse_check(const kdc_func *f) {
  size_t n = f->n_nodes;
  int32_t max_group = -1;
  for (size_t i = 0; i < n; i++)
    if (f->nodes[i].group > max_group) max_group = f->nodes[i].group;
  int32_t *root = kdc_xmalloc(((size_t)max_group + 2) * sizeof *root);
  uint32_t *size = kdc_xcalloc((size_t)max_group + 2, sizeof *size);
  for (int32_t k = 0; k <= max_group; k++) root[k] = -1;
  for (size_t i = 0; i < n; i++)
    if (f->nodes[i].group >= 0) root[f->nodes[i].group] = (int32_t)i, size[f->nodes[i].group]++;
  kdc_users us;
  kdc_pass_users_init(&us, f);
  kdc_status st = NULL;
  for (size_t i = 0; i < n && !st; i++) {
    const kdc_node *nd = &f->nodes[i];
    kdc_value_id v = (kdc_value_id)i;
    kind k = classify(f, v);
    int32_t grp = nd->group;
    bool is_root = grp >= 0 && root[grp] == (int32_t)i;
    if (grp < 0) {
      if (nd->op == KDC_OP_RESHAPE) {
        int32_t og = kdc_ir_node(f, nd->in[0])->group;
        if (og >= 0 && root[og] != (int32_t)nd->in[0])
          st = broken(f, v, "alias of a value that is not materialized");
      } else if (k == K_FUSIBLE || k == K_ROOT) {
        st = broken(f, v, "computing node outside every kernel");
      }
      continue;
    }
    if (k == K_MATERIAL) st = broken(f, v, "materialized op inside a kernel");
    else if (is_root && size[grp] > KDC_GROUP_MAX_MEMBERS) st = broken(f, v, "group too large");
    else if (k == K_ROOT && !is_root) st = broken(f, v, "reduce that is not its kernel's root");
    else if (!is_root && us.is_result[i] &&
             !same_dims(kdc_ir_type(f, v), kdc_ir_type(f, (kdc_value_id)root[grp])))
      st = broken(f, v, "function result in a kernel of other dims");
    for (uint32_t j = us.start[i]; j < us.start[i + 1] && !st && !is_root; j++)
      if (f->nodes[us.users[j]].group != grp) st = broken(f, v, "member used outside its kernel");
  }
  kdc_pass_users_free(&us);
  free(size);
  free(root);
  return st;
}
