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

#include "runtime/runtime.h"

static bool rt_inplace_off; /* rt_exec_test_inplace */

void rt_exec_test_inplace(bool on) { rt_inplace_off = !on; }

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
 * it.  A kernel may read any of its outputs (codegen passes an operand
 * placed where the output goes only once: the kernel updates it in place),
 * so kernel outputs count as read too; a GEMM's C (beta 0), a copy's or a
 * collective's destination only as written.  A LOOP step reads and writes
 * everything (its body addresses the arena). */
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
      R(st->kernel.args[a]);
      if (a < st->kernel.n_out) *writes |= overlaps(&st->kernel.args[a], l);
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

/* Is all_gather |s| a candidate (file comment)?  Its chain is the steps
 * from the GEMM that writes its operand afresh to |s|, each touching the
 * operand only as exactly that range: *|first| is that GEMM. */
static bool candidate(const kdc_prog_func *f, uint32_t s, uint32_t *first) {
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

void rt_inplace_create(const kdc_rt_plan *p, const kdc_prog_func *f, rt_func *rf) {
  rf->n_inplace = 0;
  if (f->is_body) return; /* bound per iteration by its loop, never per run */
  for (uint32_t s = 0; s < f->n_steps; s++) {
    uint32_t first = 0;
    if (f->steps[s].kind != KDC_STEP_COLLECTIVE || !candidate(f, s, &first)) continue;
    if (!rf->n_inplace) {
      rf->inplace = kdc_xcalloc(f->n_steps, sizeof *rf->inplace);
      rf->inplace_of = kdc_xcalloc(f->n_steps, sizeof *rf->inplace_of);
      rf->inplace_skip = kdc_xcalloc(f->n_steps, sizeof *rf->inplace_skip);
      rf->inplace_dst = kdc_xcalloc((size_t)p->nd * f->n_steps, sizeof *rf->inplace_dst);
    }
    bool taken = false; /* a step of two chains: keep the first candidate only */
    for (uint32_t i = first; i < s; i++) taken |= rf->inplace_of[i] != 0;
    if (taken) continue;
    rf->inplace[rf->n_inplace++] = (rt_inplace){first, s};
    for (uint32_t i = first; i < s; i++) {
      bool r, w, whole;
      touches(&f->steps[i], &f->steps[s].coll.src, &r, &w, &whole);
      if (r || w) rf->inplace_of[i] = (uint32_t)rf->n_inplace;
    }
  }
}

void rt_inplace_destroy(rt_func *rf) {
  free(rf->inplace), free(rf->inplace_of), free(rf->inplace_skip), free(rf->inplace_dst);
}

void *rt_inplace_redirect(const rt_func *rf, const kdc_prog_func *f, int64_t dev, uint32_t s,
                          const kdc_prog_loc *l) {
  uint32_t i = rf->inplace_of ? rf->inplace_of[s] : 0;
  if (!i || !same_loc(l, &f->steps[rf->inplace[i - 1].coll].coll.src)) return NULL;
  return rf->inplace_dst[(size_t)dev * f->n_steps + i - 1];
}

/* Candidate |c| this run: every group local and bound to one buffer?
 * Then each writer group's members get their place in it. */
static bool bind_one(kdc_rt_plan *p, const kdc_prog_func *f, rt_func *rf, const rt_inplace *c) {
  const kdc_prog_coll_step *cs = &f->steps[c->coll].coll;
  const rt_coll_groups *g = &rf->groups[c->coll];
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
      rf->inplace_dst[m[j] * f->n_steps + (c - rf->inplace)] = buf + (uint64_t)j * cs->src.bytes;
  }
  return true;
}

size_t rt_inplace_bind(kdc_rt_plan *p, const kdc_prog_func *f, rt_func *rf) {
  size_t made = 0;
  for (size_t i = 0; i < rf->n_inplace; i++) {
    const rt_inplace *c = &rf->inplace[i];
    for (int64_t d = 0; d < p->nd; d++) rf->inplace_dst[d * f->n_steps + i] = NULL;
    rf->inplace_skip[c->coll] = !rt_inplace_off && !p->cuda && bind_one(p, f, rf, c);
    made += rf->inplace_skip[c->coll];
  }
  return made;
}
