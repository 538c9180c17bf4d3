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
 * x piece bytes) and the collective step moves nothing: the lock step already orders the writes before any later step
 * (the step still ends a device-parallel segment, exec.c).
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
 * it.  Codegen hands a kernel an operand placed where its output goes
 * (same buffer and offset) only as that output, which the kernel then
 * updates in place: a kernel output starting where |l| starts may read
 * it.  A GEMM's C (beta 0), a copy's or a collective's destination are
 * only written.  A LOOP step reads and writes everything (its body
 * addresses the arena). */
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
      else if (x->buf == l->buf && x->index == l->index && x->offset == l->offset) R(*x), W(*x);
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

/* Is collective |s| (an all_gather or all_reduce: every member of a group
 * gets the same result) into the arena a shared-result candidate (file
 * comment)?  *|last| is the last step reading its result. */
static bool shared_candidate(const kdc_prog_func *f, uint32_t s, uint32_t *last) {
  const kdc_prog_coll_step *c = &f->steps[s].coll;
  if ((c->kind != KDC_COLL_ALL_GATHER && c->kind != KDC_COLL_ALL_REDUCE) ||
      c->dst.buf != KDC_PROG_BUF_ARENA || !c->dst.bytes)
    return false;
  *last = s;
  bool clobbered = false; /* written in part: nothing may read it any more */
  for (uint32_t i = s + 1; i < f->n_steps; i++) {
    const kdc_prog_step *st = &f->steps[i];
    bool r, w, whole;
    touches(st, &c->dst, &r, &w, &whole);
    if (whole) break;
    if (!r) {
      clobbered |= w;
      continue;
    }
    /* only read, as exactly that range: a kernel's input or a GEMM's A or B */
    if (w || clobbered || !exact_refs(st, &c->dst)) return false;
    *last = i;
  }
  return *last > s;
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
  if (c.shared) { /* one result buffer per group, device d reads its group's */
    c.buf = aligned_alloc(64, room * (uint64_t)g->n_groups);
    if (!c.buf) return; /* no room: the collective writes every arena, as without it */
  }
  if (!mark(f, rf, c.first, c.last, &c.loc, (uint32_t)rf->n_inplace + 1)) {
    free(c.buf);
    return;
  }
  if (c.shared) {
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
    if (gather_candidate(f, s, &at))
      add(p, f, rf, (rt_inplace){.first = at, .last = s - 1, .coll = s, .loc = f->steps[s].coll.src});
    else if (shared_candidate(f, s, &at))
      add(p, f, rf, (rt_inplace){.first = s, .last = at, .coll = s, .loc = f->steps[s].coll.dst,
                                 .shared = true});
  }
}

void rt_inplace_destroy(rt_func *rf) {
  for (size_t i = 0; i < rf->n_inplace; i++) free(rf->inplace[i].buf);
  free(rf->inplace), free(rf->inplace_of), free(rf->inplace_skip), free(rf->inplace_dst);
}

void *rt_inplace_redirect(const rt_func *rf, const kdc_prog_func *f, int64_t dev, uint32_t s,
                          const kdc_prog_loc *l) {
  const uint32_t *slot = &rf->inplace_of[s * RT_INPLACE_PER_STEP];
  for (int k = 0; k < RT_INPLACE_PER_STEP && slot[k]; k++) {
    const rt_inplace *c = &rf->inplace[slot[k] - 1];
    if (c->on && same_loc(l, &c->loc)) return rf->inplace_dst[(size_t)dev * f->n_steps + slot[k] - 1];
  }
  return NULL;
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

void rt_inplace_bind(kdc_rt_plan *p, const kdc_prog_func *f, rt_func *rf) {
  memset(rf->inplace_made, 0, sizeof rf->inplace_made);
  bool all_local = p->d0 == 0 && p->d1 == p->nd && p->nd > 1;
  for (size_t i = 0; i < rf->n_inplace; i++) {
    rt_inplace *c = &rf->inplace[i];
    c->on = !rt_inplace_off && (c->shared ? all_local : bind_gather(p, f, rf, c));
    rf->inplace_skip[c->coll] = c->on && !c->shared;
    rf->inplace_made[c->shared ? RT_SHARE_RESULT : RT_SHARE_INPLACE] += c->on;
  }
}
