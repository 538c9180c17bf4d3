/*
 * runtime/gather_inplace.c: all_gathers into a shared replica made in place.
 *
 * After the sharded weight update (passes/shard_update.c) every device's
 * update kernel writes its piece of the new weight into its arena, and an
 * all_gather copies the pieces into the weight's next buffer.  On the cpu
 * device set that buffer is ONE per process when every local replica binds
 * it (state.c, "Shared replicas"); the all_gather then only moves bytes
 * from the arenas to their place in that one buffer.  Made in place, the
 * steps that compute device d's piece (the gradient GEMM, the update
 * kernel) work straight at its offset in the shared buffer (group index j
 * x piece bytes) and the collective step moves nothing.  Nothing in the
 * run reads what a peer wrote there (the result is an output no other
 * step touches), so the step does not even end a device-parallel segment
 * (RT_SKIP_FREE, exec.c).
 *
 * At load (rt_inplace_create), per function, the candidates: an
 * all_gather step s whose result is a whole output that nothing else in
 * the function reads or writes, that is laid out piece after piece (no dim
 * before |dim| larger than 1), and whose operand is an arena range that a
 * GEMM writes afresh (its C) and that every step from that GEMM to s
 * touches, if at all, as exactly that range from a KERNEL or GEMM step (a
 * kernel may update it in place: codegen hands a kernel an operand that
 * sits where its output goes only as the output), while no step after s
 * reads it before it is overwritten whole (LOOP steps count as touching
 * everything).  Per run (rt_inplace_bind), a candidate is made in place
 * only when every member of every group is a device of this process and
 * all members of a group bind the same result buffer; groups binding a
 * buffer an earlier group already writes keep their arena (their writes
 * would be identical).  Otherwise the collective runs as always -- in
 * particular on processes (p2p), so 8 virtual devices and 8 processes
 * compute the same bytes.
 *
 * Two more kinds (docs/runtime.md, "Collectives"): shared results (an
 * all_gather or all_reduce into the arena that only kernels and GEMMs
 * read: one buffer per group, shared_candidate) and views (an all_to_all
 * whose members' operands lie one after another, read by GEMMs as a
 * column block of them, view_candidate / bind_view; when no step writes
 * those operands -- inputs, ready before the run -- the step orders
 * nothing either).
 */
#include <stdlib.h>
#include <string.h>

#include "runtime/runtime.h"

static bool rt_inplace_off; /* rt_exec_test_inplace */

void rt_exec_test_inplace(bool on) { rt_inplace_off = !on; }

bool rt_inplace_on(void) { return !rt_inplace_off; }

static bool overlaps(const kdc_prog_loc *a, const kdc_prog_loc *b) {
  return a->buf == b->buf && a->index == b->index && a->offset < b->offset + b->bytes &&
         b->offset < a->offset + a->bytes && a->bytes && b->bytes;
}

static bool same_loc(const kdc_prog_loc *a, const kdc_prog_loc *b) {
  return a->buf == b->buf && a->index == b->index && a->offset == b->offset &&
         a->bytes == b->bytes;
}

/* How step |st| meets |l|: *reads / *writes set when it may read / write
 * an overlapping range; *whole when it writes all of |l| without reading
 * it.  A kernel reads an output's range only when the plan marks that
 * output in place (codegen hands a kernel an operand placed where its
 * output goes only as that output); a GEMM's C (beta 0), a copy's or a
 * collective's destination are only written.  A LOOP step reads and
 * writes everything (its body addresses the arena). */
static void touches(const kdc_prog_step *st, const kdc_prog_loc *l, bool *reads, bool *writes,
                    bool *whole) {
  *reads = *writes = *whole = false;
#define R(x) (*reads |= overlaps(&(x), l))
#define W(x) (*writes |= overlaps(&(x), l), *whole |= (x).buf == l->buf && (x).index == l->index && \
                                                    (x).offset <= l->offset &&                      \
                                                    (x).offset + (x).bytes >= l->offset + l->bytes)
  switch (st->kind) {
  case KDC_STEP_KERNEL:
    for (uint32_t a = 0; a < st->kernel.n_args; a++) {
      const kdc_prog_loc *x = &st->kernel.args[a];
      if (a >= st->kernel.n_out) R(*x);
      else if (a < 64 && (st->kernel.in_place >> a & 1)) R(*x), W(*x);
      else W(*x);
    }
    break;
  case KDC_STEP_GEMM: R(st->gemm.a), R(st->gemm.b), W(st->gemm.c); break;
  case KDC_STEP_COPY: R(st->src), W(st->dst); break;
  case KDC_STEP_COLLECTIVE: R(st->coll.src), W(st->coll.dst); break;
  case KDC_STEP_LOOP: *reads = *writes = true; break;
  }
  if (*reads) *whole = false;
#undef R
#undef W
}

/* The bytes of a range that later steps overwrote with other values
 * (shared_candidate): a union of at most 8 intervals. */
typedef struct dead_bytes {
  uint64_t lo[8], hi[8];
  int n;
} dead_bytes;

/* Adds |w| ∩ |l|; false when there is no room. */
static bool dead_add(dead_bytes *d, const kdc_prog_loc *w, const kdc_prog_loc *l) {
  if (!overlaps(w, l)) return true;
  uint64_t lo = w->offset > l->offset ? w->offset : l->offset;
  uint64_t hi = w->offset + w->bytes < l->offset + l->bytes ? w->offset + w->bytes
                                                             : l->offset + l->bytes;
  if (d->n == 8) return false;
  d->lo[d->n] = lo, d->hi[d->n++] = hi;
  return true;
}

/* Does |x| read a byte of |l| that is not dead (still the collective's)? */
static bool reads_live(const kdc_prog_loc *x, const kdc_prog_loc *l, const dead_bytes *d) {
  if (!overlaps(x, l)) return false;
  uint64_t at = x->offset > l->offset ? x->offset : l->offset;
  uint64_t end = x->offset + x->bytes < l->offset + l->bytes ? x->offset + x->bytes
                                                              : l->offset + l->bytes;
  for (bool moved = true; at < end && moved;) { /* walk the covered prefix */
    moved = false;
    for (int i = 0; i < d->n; i++)
      if (d->lo[i] <= at && at < d->hi[i]) at = d->hi[i], moved = true;
  }
  return at < end;
}

/* Does step |st| read live bytes of |l| (see reads_live)?  A LOOP reads
 * everything. */
static bool step_reads_live(const kdc_prog_step *st, const kdc_prog_loc *l, const dead_bytes *d) {
  switch (st->kind) {
  case KDC_STEP_KERNEL:
    for (uint32_t a = 0; a < st->kernel.n_args; a++)
      if ((a >= st->kernel.n_out || (a < 64 && (st->kernel.in_place >> a & 1))) &&
          reads_live(&st->kernel.args[a], l, d))
        return true;
    return false;
  case KDC_STEP_GEMM: return reads_live(&st->gemm.a, l, d) || reads_live(&st->gemm.b, l, d);
  case KDC_STEP_COPY: return reads_live(&st->src, l, d);
  case KDC_STEP_COLLECTIVE: return reads_live(&st->coll.src, l, d);
  case KDC_STEP_LOOP: return true;
  }
  return true;
}

/* Marks what step |st| writes of |l| dead; false when out of room. */
static bool step_kills(const kdc_prog_step *st, const kdc_prog_loc *l, dead_bytes *d) {
  switch (st->kind) {
  case KDC_STEP_KERNEL:
    for (uint32_t a = 0; a < st->kernel.n_out; a++)
      if (!dead_add(d, &st->kernel.args[a], l)) return false;
    return true;
  case KDC_STEP_GEMM: return dead_add(d, &st->gemm.c, l);
  case KDC_STEP_COPY: return dead_add(d, &st->dst, l);
  case KDC_STEP_COLLECTIVE: return dead_add(d, &st->coll.dst, l);
  case KDC_STEP_LOOP: return false;
  }
  return false;
}

/* Does no step of |f| but |s| read or write output |o|? */
static bool output_private(const kdc_prog_func *f, uint32_t s, uint32_t o) {
  kdc_prog_loc all = {KDC_PROG_BUF_OUTPUT, o, 0, f->outputs[o].local_bytes};
  for (uint32_t i = 0; i < f->n_steps; i++) {
    bool r, w, whole;
    touches(&f->steps[i], &all, &r, &w, &whole);
    if (i != s && (r || w)) return false;
  }
  return true;
}

/* Does every reference of KERNEL or GEMM step |st| that overlaps |l| name
 * exactly |l| (so that redirecting |l| moves all of them)? */
static bool exact_refs(const kdc_prog_step *st, const kdc_prog_loc *l) {
  const kdc_prog_loc *refs[3] = {&st->gemm.a, &st->gemm.b, &st->gemm.c};
  if (st->kind == KDC_STEP_KERNEL) {
    for (uint32_t a = 0; a < st->kernel.n_args; a++)
      if (overlaps(&st->kernel.args[a], l) && !same_loc(&st->kernel.args[a], l)) return false;
    return true;
  }
  if (st->kind != KDC_STEP_GEMM) return false;
  for (int i = 0; i < 3; i++)
    if (overlaps(refs[i], l) && !same_loc(refs[i], l)) return false;
  return true;
}

/* Is all_gather |s| an in-place candidate (file comment)?  Its chain is
 * the steps from the GEMM that writes its operand afresh to |s|, each
 * touching the operand only as exactly that range: *|first| is that GEMM. */
static bool gather_candidate(const kdc_prog_func *f, uint32_t s, uint32_t *first) {
  const kdc_prog_coll_step *c = &f->steps[s].coll;
  if (c->kind != KDC_COLL_ALL_GATHER || c->dst.buf != KDC_PROG_BUF_OUTPUT ||
      c->src.buf != KDC_PROG_BUF_ARENA || c->dst.offset != 0 ||
      c->dst.bytes != f->outputs[c->dst.index].local_bytes ||
      c->dst.bytes != c->src.bytes * (uint64_t)c->group_size || !c->src.bytes)
    return false;
  for (int64_t d = 0; d < c->dim; d++)
    if (c->out_dims[d] != 1) return false;
  if (!output_private(f, s, c->dst.index)) return false;
  bool r, w, whole;
  for (uint32_t i = s + 1; i < f->n_steps; i++) { /* nothing reads the operand later */
    touches(&f->steps[i], &c->src, &r, &w, &whole);
    if (r) return false;
    if (whole) break;
  }
  for (uint32_t i = s; i-- > 0;) {
    const kdc_prog_step *st = &f->steps[i];
    touches(st, &c->src, &r, &w, &whole);
    if (!r && !w) continue;
    if (!exact_refs(st, &c->src)) return false;
    if (whole && st->kind == KDC_STEP_GEMM) {
      *first = i;
      return true;
    }
  }
  return false;
}

/* The steps after collective |s| that read its result |l| (kept in the
 * arena): each must read all of it, exactly as that range, before any
 * later step overwrote part of it with another value (dead bytes, which
 * later steps may then read), never write it, and, with |gemm_ld| > 0, be
 * a GEMM (batch 1) reading it as A or B with that leading dimension;
 * *|last| is the last one. */
static bool result_readers(const kdc_prog_func *f, uint32_t s, const kdc_prog_loc *l,
                           int64_t gemm_ld, uint32_t *last) {
  *last = s;
  dead_bytes dead = {.n = 0};
  for (uint32_t i = s + 1; i < f->n_steps; i++) {
    const kdc_prog_step *st = &f->steps[i];
    const kdc_prog_gemm_step *g = &st->gemm;
    bool r, w, whole;
    touches(st, l, &r, &w, &whole);
    if (whole) break;
    if (r && step_reads_live(st, l, &dead)) {
      if (w || dead.n || !exact_refs(st, l)) return false;
      if (gemm_ld && (st->kind != KDC_STEP_GEMM || g->batch != 1 ||
                      (same_loc(&g->a, l) && g->lda != gemm_ld) ||
                      (same_loc(&g->b, l) && g->ldb != gemm_ld)))
        return false;
      *last = i;
      continue;
    }
    if (w && !step_kills(st, l, &dead)) return false;
  }
  return *last > s;
}

/* Is collective |s| (an all_gather or all_reduce: every member of a group
 * gets the same result) into the arena a shared-result candidate (file
 * comment), read only by kernels (inputs) and GEMMs (A or B)?  *|last| is
 * the last step reading its result. */
static bool shared_candidate(const kdc_prog_func *f, uint32_t s, uint32_t *last) {
  const kdc_prog_coll_step *c = &f->steps[s].coll;
  if ((c->kind != KDC_COLL_ALL_GATHER && c->kind != KDC_COLL_ALL_REDUCE) ||
      c->dst.buf != KDC_PROG_BUF_ARENA || !c->dst.bytes)
    return false;
  return result_readers(f, s, &c->dst, 0, last);
}

/* Is all_to_all |s| a view candidate (file comment)?  Rank 2, split over
 * columns and concatenated over rows, f32 into the arena, read only by
 * GEMMs (batch 1) as their A or B, exactly that range with its dense
 * leading dimension, while nothing after it writes its operand; *|last| is
 * the last reader. */
static bool view_candidate(const kdc_prog_func *f, uint32_t s, uint32_t *last) {
  const kdc_prog_coll_step *c = &f->steps[s].coll;
  if (c->kind != KDC_COLL_ALL_TO_ALL || c->rank != 2 || c->dim != 1 || c->dim2 != 0 ||
      c->dtype != KDC_IO_DTYPE_F32 || c->dst.buf != KDC_PROG_BUF_ARENA || !c->dst.bytes ||
      c->out_dims[1] * c->group_size != c->in_dims[1] ||
      !result_readers(f, s, &c->dst, c->out_dims[1], last))
    return false;
  /* the operands stay as they are: not only up to the last reader, which
   * reads its peers' operands while they may run ahead (no collective
   * need separate them), but to the end of the function */
  for (uint32_t i = s + 1; i < f->n_steps; i++) {
    bool r, w, whole;
    touches(&f->steps[i], &c->src, &r, &w, &whole);
    if (w) return false;
  }
  return *last > s;
}

/* Does no step of |f| write the operand of collective |s| (an input, say:
 * ready before the run, so a view of it orders nothing)? */
static bool operand_constant(const kdc_prog_func *f, uint32_t s) {
  for (uint32_t i = 0; i < f->n_steps; i++) {
    bool r, w, whole;
    touches(&f->steps[i], &f->steps[s].coll.src, &r, &w, &whole);
    if (w && i != s) return false;
  }
  return true;
}

/* Marks steps [first, last] that touch |l| as steps of candidate |n| (at
 * most RT_INPLACE_PER_STEP per step); false, nothing marked, when a step
 * has no slot left. */
static bool mark(const kdc_prog_func *f, rt_func *rf, uint32_t first, uint32_t last,
                 const kdc_prog_loc *l, uint32_t n) {
  for (int pass = 0; pass < 2; pass++)
    for (uint32_t i = first; i <= last; i++) {
      bool r, w, whole;
      touches(&f->steps[i], l, &r, &w, &whole);
      if (!r && !w) continue;
      uint32_t *slot = &rf->inplace_of[i * RT_INPLACE_PER_STEP], k = 0;
      while (k < RT_INPLACE_PER_STEP && slot[k]) k++;
      if (k == RT_INPLACE_PER_STEP) return false;
      if (pass) slot[k] = n;
    }
  return true;
}

static void add(const kdc_rt_plan *p, const kdc_prog_func *f, rt_func *rf, rt_inplace c) {
  if (!rf->n_inplace) {
    rf->inplace = kdc_xcalloc(f->n_steps, sizeof *rf->inplace);
    rf->inplace_of = kdc_xcalloc((size_t)f->n_steps * RT_INPLACE_PER_STEP, sizeof *rf->inplace_of);
    rf->inplace_skip = kdc_xcalloc(f->n_steps, sizeof *rf->inplace_skip);
    rf->inplace_dst = kdc_xcalloc((size_t)p->nd * f->n_steps, sizeof *rf->inplace_dst);
  }
  const rt_coll_groups *g = &rf->groups[c.coll];
  uint64_t room = (c.loc.bytes + 63) / 64 * 64;
  if (c.kind == RT_INPLACE_SHARED) { /* one result buffer per group, device d reads its group's */
    c.buf = aligned_alloc(64, room * (uint64_t)g->n_groups);
    if (!c.buf) return; /* no room: the collective writes every arena, as without it */
  }
  if (!mark(f, rf, c.first, c.last, &c.loc, (uint32_t)rf->n_inplace + 1)) {
    free(c.buf);
    return;
  }
  if (c.kind == RT_INPLACE_SHARED) {
    memset(c.buf, 0, room * (uint64_t)g->n_groups);
    for (int64_t d = 0; d < p->nd; d++)
      rf->inplace_dst[(size_t)d * f->n_steps + rf->n_inplace] = c.buf + room * (uint64_t)g->group_of[d];
  }
  rf->inplace[rf->n_inplace++] = c;
}

void rt_inplace_create(const kdc_rt_plan *p, const kdc_prog_func *f, rt_func *rf) {
  rf->n_inplace = 0;
  if (f->is_body || p->cuda) return; /* a body is bound per iteration, never per run */
  for (uint32_t s = 0; s < f->n_steps; s++) {
    uint32_t at = 0;
    if (f->steps[s].kind != KDC_STEP_COLLECTIVE) continue;
    const kdc_prog_coll_step *c = &f->steps[s].coll;
    if (gather_candidate(f, s, &at))
      add(p, f, rf, (rt_inplace){.first = at, .last = s - 1, .coll = s, .loc = c->src,
                                 .kind = RT_INPLACE_GATHER, .free = true});
    else if (shared_candidate(f, s, &at))
      add(p, f, rf, (rt_inplace){.first = s, .last = at, .coll = s, .loc = c->dst,
                                 .kind = RT_INPLACE_SHARED});
    else if (view_candidate(f, s, &at))
      add(p, f, rf, (rt_inplace){.first = s, .last = at, .coll = s, .loc = c->dst,
                                 .kind = RT_INPLACE_VIEW, .ld = c->in_dims[1],
                                 .free = operand_constant(f, s)});
  }
}

void rt_inplace_destroy(rt_func *rf) {
  for (size_t i = 0; i < rf->n_inplace; i++) free(rf->inplace[i].buf);
  free(rf->inplace), free(rf->inplace_of), free(rf->inplace_skip), free(rf->inplace_dst);
}

/* The candidate on this run whose range step |s| reads or writes as
 * exactly |l|, or NULL. */
static const rt_inplace *active(const rt_func *rf, uint32_t s, const kdc_prog_loc *l) {
  const uint32_t *slot = &rf->inplace_of[s * RT_INPLACE_PER_STEP];
  for (int k = 0; k < RT_INPLACE_PER_STEP && slot[k]; k++) {
    const rt_inplace *c = &rf->inplace[slot[k] - 1];
    if (c->on && same_loc(l, &c->loc)) return c;
  }
  return NULL;
}

void *rt_inplace_redirect(const rt_func *rf, const kdc_prog_func *f, int64_t dev, uint32_t s,
                          const kdc_prog_loc *l) {
  const rt_inplace *c = active(rf, s, l);
  return c ? rf->inplace_dst[(size_t)dev * f->n_steps + (size_t)(c - rf->inplace)] : NULL;
}

int64_t rt_inplace_ld(const rt_func *rf, uint32_t s, const kdc_prog_loc *l) {
  const rt_inplace *c = active(rf, s, l);
  return c && c->kind == RT_INPLACE_VIEW ? c->ld : 0;
}

/* In-place candidate |c| this run: every group local and bound to one
 * buffer?  Then each writer group's members get their place in it. */
static bool bind_gather(kdc_rt_plan *p, const kdc_prog_func *f, rt_func *rf, const rt_inplace *c) {
  const kdc_prog_coll_step *cs = &f->steps[c->coll].coll;
  const rt_coll_groups *g = &rf->groups[c->coll];
  size_t n = (size_t)(c - rf->inplace);
  for (int64_t d = 0; d < p->nd; d++) rf->inplace_dst[d * f->n_steps + n] = NULL;
  for (int64_t gi = 0; gi < g->n_groups; gi++) {
    const int64_t *m = &g->members[gi * g->k];
    char *buf = rf->out_ptr[m[0] * f->n_outputs + cs->dst.index];
    for (int64_t j = 0; j < g->k; j++)
      if (m[j] < p->d0 || m[j] >= p->d1 || !buf ||
          rf->out_ptr[m[j] * f->n_outputs + cs->dst.index] != buf)
        return false;
  }
  for (int64_t gi = 0; gi < g->n_groups; gi++) {
    const int64_t *m = &g->members[gi * g->k];
    char *buf = rf->out_ptr[m[0] * f->n_outputs + cs->dst.index];
    bool earlier = false;
    for (int64_t e = 0; e < gi && !earlier; e++)
      earlier = rf->out_ptr[g->members[e * g->k] * f->n_outputs + cs->dst.index] == buf;
    if (earlier) continue;
    for (int64_t j = 0; j < g->k; j++)
      rf->inplace_dst[m[j] * f->n_steps + n] = buf + (uint64_t)j * cs->src.bytes;
  }
  return true;
}

/* View candidate |c| this run: every group local, its members' operands
 * one after another in member order (the rows of one [k r, C] matrix, as
 * a batch split input bound in place in the caller's array is)?  Then
 * member i reads its result as columns [i C/k, (i+1) C/k) of that matrix
 * with leading dimension C. */
static bool bind_view(kdc_rt_plan *p, const kdc_prog_func *f, rt_func *rf, const rt_inplace *c) {
  const kdc_prog_coll_step *cs = &f->steps[c->coll].coll;
  const rt_coll_groups *g = &rf->groups[c->coll];
  size_t n = (size_t)(c - rf->inplace);
  for (int64_t gi = 0; gi < g->n_groups; gi++) {
    const int64_t *m = &g->members[gi * g->k];
    char *base = m[0] < p->d0 || m[0] >= p->d1 ? NULL : rt_exec_resolve(p, f, rf, m[0], &cs->src);
    for (int64_t j = 0; j < g->k; j++)
      if (m[j] < p->d0 || m[j] >= p->d1 || !base ||
          (char *)rt_exec_resolve(p, f, rf, m[j], &cs->src) != base + (uint64_t)j * cs->src.bytes)
        return false;
  }
  for (int64_t gi = 0; gi < g->n_groups; gi++) {
    const int64_t *m = &g->members[gi * g->k];
    char *base = rt_exec_resolve(p, f, rf, m[0], &cs->src);
    for (int64_t j = 0; j < g->k; j++)
      rf->inplace_dst[m[j] * f->n_steps + n] = base + (uint64_t)(j * cs->out_dims[1]) * sizeof(float);
  }
  return true;
}

void rt_inplace_bind(kdc_rt_plan *p, const kdc_prog_func *f, rt_func *rf) {
  memset(rf->inplace_made, 0, sizeof rf->inplace_made);
  bool all_local = p->d0 == 0 && p->d1 == p->nd && p->nd > 1;
  static const rt_share counted[] = {[RT_INPLACE_GATHER] = RT_SHARE_INPLACE,
                                     [RT_INPLACE_SHARED] = RT_SHARE_RESULT,
                                     [RT_INPLACE_VIEW] = RT_SHARE_VIEW};
  for (size_t i = 0; i < rf->n_inplace; i++) {
    rt_inplace *c = &rf->inplace[i];
    bool on = false;
    if (!rt_inplace_off) switch (c->kind) {
      case RT_INPLACE_GATHER: on = bind_gather(p, f, rf, c); break;
      case RT_INPLACE_SHARED: on = all_local; break;
      case RT_INPLACE_VIEW: on = bind_view(p, f, rf, c); break;
      }
    c->on = on;
    rf->inplace_skip[c->coll] = !on || c->kind == RT_INPLACE_SHARED ? RT_SKIP_NONE
                                : c->free                        ? RT_SKIP_FREE
                                                                 : RT_SKIP_MEET;
    rf->inplace_made[counted[c->kind]] += on;
  }
}
