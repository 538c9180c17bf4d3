/*
 * passes/plan_memory.c: static memory planning (ARCHITECTURE "Performance by
 * design": every buffer is planned at compile time, the runtime allocates
 * nothing per step).
 *
 * Input: a fused function (node->group set per the contract in ir.h).  The
 * schedule is the function's node order restricted to the nodes that write
 * memory ("steps"):
 *   - the root of each fusion group (its highest-id member): one kernel,
 *     which also writes the group's other outputs (function results inside
 *     the group, ir.h), stored like roots;
 *   - a DOT outside any group: one GEMM;
 *   - any other compute node outside a group (IOTA, an unfused add, ...): a
 *     kernel of one node, so an unfused function is still plannable;
 *   - a collective (all_reduce, ...; never in a group): one COLLECTIVE
 *     step.  Its result never shares storage with its operand: in-place
 *     reuse is only for elementwise kernels, and the operand's interval
 *     includes the step (intervals are closed), because the other devices
 *     of the group read it while this one writes its result.
 * After partitioning, types are LOCAL and the arena is per device: every
 * device of the mesh gets one of this size (runtime/devices.c).
 * A RESHAPE outside any group is an alias: it shares its operand's storage
 * (row-major reinterpretation), so its uses extend its base's lifetime; so
 * is a SHARDING_CONSTRAINT (an identity once partitioning is done).
 * PARAMETER and CONSTANT nodes have their own storage.  Fused interiors are
 * never stored.
 *
 * Output: node->mem_offset, the 64-byte aligned byte offset of each stored
 * temporary in the function's scratch arena, and -1 for everything else.  A
 * function result computed by a kernel or GEMM, listed once among the
 * results, is written straight into the caller's output buffer and gets -1
 * too ("own storage"); any other result (a parameter, a constant, an alias,
 * a value listed twice) is copied out after the last step, so it stays live
 * to the end.  codegen/ applies exactly these rules to find every value's
 * storage.
 *
 * Algorithm:
 *   1. live interval [def, last use] per stored value, in step positions
 *      (a step's position is its node id; a kernel reads its operands at its
 *      root's position);
 *   2. in-place reuse: an elementwise kernel whose output has the same byte
 *      size as an arena operand that dies at this kernel, and that the kernel
 *      reads only at the output's own linear index (through elementwise ops
 *      and reshapes, never broadcasts, slices or reductions), writes over that
 *      operand: the two values become one storage class;
 *   3. greedy by size with best fit (the TFLite/XLA "greedy by size"
 *      heuristic): classes in decreasing size order each take the smallest
 *      gap between already-placed classes whose intervals overlap theirs, or
 *      the end of the arena.  Sizes and offsets are multiples of 64 bytes.
 * Step 1 is linear in the nodes; step 2 looks at each kernel's members once
 * per candidate operand (kernels are capped in size); step 3 is
 * O((n + K) log n) for n classes and K pairs of overlapping intervals
 * (placed_tree), not O(n^2): a chain plans in O(n log n).
 */
#include <stdlib.h>
#include <string.h>

#include "passes/passes.h"

enum { ALIGN = 64 };
#define LIVE_TO_END INT64_MAX

typedef enum store_kind {
  ST_NONE,   /* fused interior: never in memory */
  ST_PARAM,  /* parameter: caller's or weight storage */
  ST_CONST,  /* constant: plan data */
  ST_ARENA,  /* written by a step: arena or own output storage */
  ST_ALIAS,  /* reshape sharing in[0]'s storage */
} store_kind;

typedef struct planner {
  kdc_func *f;
  size_t n;
  store_kind *kind;
  kdc_value_id *step;     /* step position at which node v executes (kernel root) */
  kdc_value_id *base;     /* storage owner after following aliases */
  int64_t *last;          /* last use position of a stored value */
  bool *own;              /* result with its own (output) storage */
  kdc_value_id *cls;      /* storage class representative (in-place merges) */
  int64_t *size;          /* aligned bytes */
  kdc_group_members gm;   /* each kernel's nodes: a kernel costs its size, not n */
} planner;

/* The nodes of the kernel rooted at |r| (ids ascending, r last): its group's
 * members, or r alone; *|n| of them. */
static const kdc_value_id *kernel_nodes(const planner *p, const kdc_value_id *r, size_t *n) {
  int32_t g = p->f->nodes[*r].group;
  if (g < 0 || g >= p->gm.n_groups) return *n = 1, r;
  *n = p->gm.start[g + 1] - p->gm.start[g];
  return p->gm.member + p->gm.start[g];
}

static int64_t align_up(int64_t x) { return (x + ALIGN - 1) / ALIGN * ALIGN; }

static kdc_status fail(const kdc_func *f, kdc_value_id v, const char *what) {
  return KDC_ERR(KDC_INTERNAL, "plan_memory: func %s: %%%u (%s): %s", f->name, v,
                 kdc_op_name(f->nodes[v].op), what);
}

typedef struct gpair { int32_t group; kdc_value_id id; } gpair;

static int cmp_gpair(const void *a, const void *b) {
  const gpair *x = a, *y = b;
  if (x->group != y->group) return x->group < y->group ? -1 : 1;
  return x->id < y->id ? -1 : x->id > y->id;
}

/* Fills kind/step/base: who writes memory and where each value lives. */
static kdc_status classify(planner *p) {
  kdc_func *f = p->f;
  gpair *gp = kdc_xmalloc((p->n + 1) * sizeof *gp);
  size_t ng = 0;
  for (size_t v = 0; v < p->n; v++)
    if (f->nodes[v].group >= 0) gp[ng++] = (gpair){f->nodes[v].group, (kdc_value_id)v};
  qsort(gp, ng, sizeof *gp, cmp_gpair);
  for (size_t i = 0; i < ng;) {  /* each run of one group: root = last id */
    size_t j = i;
    while (j < ng && gp[j].group == gp[i].group) j++;
    for (size_t k = i; k < j; k++) p->step[gp[k].id] = gp[j - 1].id;
    i = j;
  }
  free(gp);
  for (size_t v = 0; v < p->n; v++) {
    const kdc_node *nd = &f->nodes[v];
    p->base[v] = (kdc_value_id)v;
    if (nd->op == KDC_OP_PARAMETER) p->kind[v] = ST_PARAM;
    else if (nd->op == KDC_OP_CONSTANT) p->kind[v] = ST_CONST;
    else if (nd->group >= 0)  /* the root, or a second output of the kernel (ir.h) */
      p->kind[v] = p->step[v] == v || kdc_ir_group_output(f, (kdc_value_id)v, p->step[v])
                       ? ST_ARENA : ST_NONE;
    else if (nd->op == KDC_OP_RESHAPE || nd->op == KDC_OP_SHARDING_CONSTRAINT) {
      kdc_value_id x = nd->in[0];
      if (p->kind[x] == ST_NONE) return fail(f, (kdc_value_id)v, "alias of a fused interior");
      p->kind[v] = ST_ALIAS;
      p->base[v] = p->base[x];
    } else p->kind[v] = ST_ARENA;
    if (nd->group < 0) p->step[v] = (kdc_value_id)v;
  }
  /* Contract: a fused interior is only used inside its own group. */
  for (size_t u = 0; u < p->n; u++) {
    const kdc_node *nd = &f->nodes[u];
    for (int j = 0; j < nd->n_in; j++) {
      kdc_value_id x = nd->in[j];
      if (p->kind[x] == ST_NONE && f->nodes[x].group != nd->group)
        return fail(f, x, "fused interior used outside its group");
    }
  }
  for (size_t i = 0; i < f->n_results; i++)
    if (p->kind[f->results[i]] == ST_NONE)
      return fail(f, f->results[i], "result is a fused interior");
  return NULL;
}

/* Live intervals: last[] of every stored base; own[] for direct results. */
static void liveness(planner *p) {
  kdc_func *f = p->f;
  for (size_t v = 0; v < p->n; v++) p->last[v] = (int64_t)v;
  for (size_t u = 0; u < p->n; u++) {
    const kdc_node *nd = &f->nodes[u];
    if (p->kind[u] == ST_ALIAS || p->kind[u] == ST_PARAM || p->kind[u] == ST_CONST) continue;
    for (int j = 0; j < nd->n_in; j++) {
      kdc_value_id x = nd->in[j];
      if (p->kind[x] == ST_NONE) continue;  /* same group, recomputed */
      kdc_value_id b = p->base[x];
      if (p->last[b] < (int64_t)p->step[u]) p->last[b] = p->step[u];
    }
  }
  for (size_t i = 0; i < f->n_results; i++) {
    kdc_value_id r = f->results[i];
    bool first = true;
    for (size_t k = 0; k < i; k++) first &= f->results[k] != r;
    if (p->kind[r] == ST_ARENA && first) p->own[r] = true;
    else p->last[p->base[r]] = LIVE_TO_END;  /* copied out at the end */
  }
}

/* True when the kernel rooted at |r| reads storage |s|, and reads it only at
 * the output's own linear index: every member on the way from the root to
 * the read is elementwise or a reshape (both keep the linear index).  One
 * sweep in decreasing id order: a member's users all have higher ids, so its
 * |ident| flag is final when the sweep reaches it.  |ident| has n slots. */
static bool reads_at_identity(const planner *p, kdc_value_id r, kdc_value_id s, bool *ident) {
  const kdc_func *f = p->f;
  size_t nm;
  const kdc_value_id *mem = kernel_nodes(p, &r, &nm);
  for (size_t i = 0; i < nm; i++) ident[mem[i]] = true;
  bool ok = true, reads = false;
  for (size_t i = nm; i-- > 0;) {
    kdc_value_id v = mem[i];
    const kdc_node *nd = &f->nodes[v];
    bool pass = ident[v] && ((kdc_op_flags(nd->op) & OPF_EW) || nd->op == KDC_OP_RESHAPE);
    for (int j = 0; j < nd->n_in; j++) {
      kdc_value_id x = nd->in[j];
      if (p->kind[x] == ST_NONE) {
        if (!pass) ident[x] = false;
      } else if (p->base[x] == s) {
        reads = true;
        ok &= pass;
      }
    }
  }
  return ok && reads;
}

static kdc_value_id find(kdc_value_id *cls, kdc_value_id v) {
  while (cls[v] != v) v = cls[v] = cls[cls[v]];
  return v;
}

/* Step 2: merges each elementwise kernel's output with one dying operand. */
static void inplace(planner *p) {
  kdc_func *f = p->f;
  bool *ident = kdc_xmalloc(p->n * sizeof *ident);
  for (size_t r = 0; r < p->n; r++) {
    if (p->kind[r] != ST_ARENA || p->own[r] || f->nodes[r].op == KDC_OP_DOT ||
        f->nodes[r].op == KDC_OP_SCAN)
      continue;
    if (p->step[r] != r) continue;
    kdc_value_id root = (kdc_value_id)r;
    size_t nm;
    const kdc_value_id *mem = kernel_nodes(p, &root, &nm);
    for (size_t i = 0; i < nm; i++) {  /* candidate storages read by the kernel */
      const kdc_node *nd = &f->nodes[mem[i]];
      for (int j = 0; j < nd->n_in; j++) {
        kdc_value_id s = p->base[nd->in[j]];
        if (p->kind[s] != ST_ARENA || p->own[s]) continue;
        kdc_value_id cs = find(p->cls, s);
        if (cs == find(p->cls, (kdc_value_id)r)) continue;
        /* the class of s must die here: its latest member's last use is r */
        if (p->last[cs] != (int64_t)r || p->size[s] != p->size[r]) continue;
        if (kdc_type_bytes(&f->nodes[s].type) != kdc_type_bytes(&f->nodes[r].type)) continue;
        if (!reads_at_identity(p, (kdc_value_id)r, s, ident)) continue;
        p->cls[r] = cs;                  /* r joins s's class... */
        p->last[cs] = p->last[r];        /* ...which now lives as long as r */
        goto next;
      }
    }
  next:;
  }
  free(ident);
}

typedef struct slot { kdc_value_id cls; int64_t def, last, size, off; } slot;

/* Placement order: decreasing size, then increasing def (a total order). */
static int cmp_slot_ptr_size(const void *a, const void *b) {
  const slot *x = *(const slot *const *)a, *y = *(const slot *const *)b;
  if (x->size != y->size) return x->size > y->size ? -1 : 1;
  return x->def < y->def ? -1 : x->def > y->def;
}

/* The number of slots of |byd| (increasing def) with def <= |l|. */
static size_t upper_def(const slot *byd, size_t n, int64_t l) {
  size_t lo = 0, hi = n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (byd[mid].def <= l) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

static int cmp_slot_off(const void *a, const void *b) {
  const slot *x = *(const slot *const *)a, *y = *(const slot *const *)b;
  return x->off < y->off ? -1 : x->off > y->off;
}

/* The placed slots, found by interval overlap: a max tree over the slots
 * in increasing def order (def = node id, so that order is the slots'
 * creation order), leaf i holding slot i's last use once it is placed and
 * -1 before.  The slots overlapping [d, l] are those of the prefix def <= l
 * whose last >= d: a descent visits only subtrees holding one, so a query
 * costs O((k + 1) log n) for k answers, and placing a slot O(log n). */
typedef struct placed_tree { int64_t *mx; size_t leaves; } placed_tree;

static void placed_init(placed_tree *t, size_t n) {
  t->leaves = 1;
  while (t->leaves < n) t->leaves *= 2;
  t->mx = kdc_xmalloc(2 * t->leaves * sizeof *t->mx);
  for (size_t i = 0; i < 2 * t->leaves; i++) t->mx[i] = -1;
}

static void placed_set(placed_tree *t, size_t i, int64_t last) {
  size_t j = t->leaves + i;
  t->mx[j] = last;
  for (j /= 2; j >= 1; j /= 2) t->mx[j] = t->mx[2 * j] > t->mx[2 * j + 1] ? t->mx[2 * j] : t->mx[2 * j + 1];
}

/* Appends to |out| the placed slots among leaves [0, |end|) with last >=
 * |d|, in def order; an explicit stack of at most log2(leaves) + 1 pending
 * right siblings (no recursion). */
static size_t placed_query(const placed_tree *t, slot *by_def, size_t end, int64_t d,
                           slot **out) {
  typedef struct span { size_t node, lo, hi; } span;  /* node covers leaves [lo, hi) */
  span stack[66];
  size_t n = 0, sp = 0;
  stack[sp++] = (span){1, 0, t->leaves};
  while (sp) {
    span s = stack[--sp];
    if (s.lo >= end || t->mx[s.node] < d) continue;
    if (s.node >= t->leaves) {
      out[n++] = &by_def[s.lo];
      continue;
    }
    size_t mid = s.lo + (s.hi - s.lo) / 2;
    stack[sp++] = (span){2 * s.node + 1, mid, s.hi};  /* left on top: def order */
    stack[sp++] = (span){2 * s.node, s.lo, mid};
  }
  return n;
}

/* Step 3: greedy by size, best fit.  Returns the arena size.  Each slot
 * looks only at the placed slots whose intervals overlap its own
 * (placed_tree), sorted by offset: O((n + K) log n) for K overlapping
 * pairs, instead of a scan of every placed slot.  The choice is the one
 * defined by the gaps between those slots (smallest gap that fits, the
 * lowest such; else the end of the highest), whatever their order. */
static int64_t assign(planner *p) {
  kdc_func *f = p->f;
  slot *byd = kdc_xmalloc((p->n + 1) * sizeof *byd);
  size_t ns = 0;
  for (size_t v = 0; v < p->n; v++) {
    if (p->kind[v] != ST_ARENA || p->own[v] || find(p->cls, (kdc_value_id)v) != v) continue;
    byd[ns++] = (slot){(kdc_value_id)v, (int64_t)v, p->last[v], p->size[v], -1};
  }
  /* the placement order, as indices into byd (in def order) */
  slot **order = kdc_xmalloc((ns + 1) * sizeof *order);
  for (size_t i = 0; i < ns; i++) order[i] = &byd[i];
  qsort(order, ns, sizeof *order, cmp_slot_ptr_size);
  placed_tree t;
  placed_init(&t, ns);
  slot **live = kdc_xmalloc((ns + 1) * sizeof *live);
  int64_t total = 0;
  for (size_t i = 0; i < ns; i++) {
    slot *s = order[i];
    size_t end = upper_def(byd, ns, s->last);  /* the slots with def <= s->last */
    size_t nl = placed_query(&t, byd, end, s->def, live);
    qsort(live, nl, sizeof *live, cmp_slot_off);
    int64_t best = -1, best_gap = INT64_MAX, at = 0;
    for (size_t k = 0; k < nl; k++) {
      int64_t gap = live[k]->off - at;
      if (gap >= s->size && gap < best_gap) best = at, best_gap = gap;
      if (live[k]->off + live[k]->size > at) at = live[k]->off + live[k]->size;
    }
    s->off = best >= 0 ? best : at;
    if (s->off + s->size > total) total = s->off + s->size;
    placed_set(&t, (size_t)(s - byd), s->last);
  }
  for (size_t v = 0; v < p->n; v++) f->nodes[v].mem_offset = -1;
  for (size_t i = 0; i < ns; i++) f->nodes[byd[i].cls].mem_offset = byd[i].off;
  for (size_t v = 0; v < p->n; v++)
    if (p->kind[v] == ST_ARENA && !p->own[v])
      f->nodes[v].mem_offset = f->nodes[find(p->cls, (kdc_value_id)v)].mem_offset;
  free(t.mx);
  free(live);
  free(order);
  free(byd);
  return total;
}

kdc_status kdc_pass_plan_memory_func(kdc_func *f, int64_t *out_arena_bytes) {
  planner p = {.f = f, .n = f->n_nodes};
  size_t n = p.n + 1;
  p.kind = kdc_xcalloc(n, sizeof *p.kind);
  p.step = kdc_xcalloc(n, sizeof *p.step);
  p.base = kdc_xcalloc(n, sizeof *p.base);
  p.last = kdc_xcalloc(n, sizeof *p.last);
  p.own = kdc_xcalloc(n, sizeof *p.own);
  p.cls = kdc_xcalloc(n, sizeof *p.cls);
  p.size = kdc_xcalloc(n, sizeof *p.size);
  kdc_status st = classify(&p);
  kdc_ir_group_members_init(&p.gm, f);
  if (!st) {
    for (size_t v = 0; v < p.n; v++) {
      p.cls[v] = (kdc_value_id)v;
      int64_t b = (int64_t)kdc_type_bytes(&f->nodes[v].type);
      p.size[v] = b > 0 ? align_up(b) : ALIGN;
    }
    liveness(&p);
    inplace(&p);
    int64_t total = assign(&p);
    if (out_arena_bytes) *out_arena_bytes = total;
  }
  free(p.kind), free(p.step), free(p.base), free(p.last), free(p.own), free(p.cls);
  free(p.size);
  kdc_ir_group_members_free(&p.gm);
  return st;
}

kdc_status kdc_pass_plan_memory(kdc_module *m, const kdc_pass_options *opt) {
  (void)opt;
  for (size_t i = 0; i < m->n_funcs; i++)
    KDC_RETURN_IF_ERROR(kdc_pass_plan_memory_func(m->funcs[i], NULL));
  return NULL;
}

int64_t kdc_pass_plan_memory_arena_bytes(const kdc_func *f) {
  int64_t total = 0;
  for (size_t v = 0; v < f->n_nodes; v++) {
    const kdc_node *nd = &f->nodes[v];
    if (nd->mem_offset < 0) continue;
    int64_t b = (int64_t)kdc_type_bytes(&nd->type);
    int64_t end = nd->mem_offset + (b > 0 ? align_up(b) : ALIGN);
    if (end > total) total = end;
  }
  return total;
}
