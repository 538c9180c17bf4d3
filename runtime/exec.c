/*
 * runtime/exec.c: running one function of a plan on every device, in lock
 * step.
 *
 * The program is SPMD: every device runs the same steps on its own buffers.
 * A run binds the caller's arrays (shard_io.c), then walks the steps so
 * that no device starts step s+1 before every device finished step s --
 * which is all a collective needs to read its peers' operands safely.  Two
 * schedules, picked at load (docs/runtime.md, "Threads"):
 *   - devices >= threads ("device-parallel"): a run of consecutive
 *     non-collective steps is one pool job with one task per device, each
 *     task running those steps for its device (kernels unsplit, GEMMs with
 *     OpenBLAS on 1 thread: GEMMs of different devices run concurrently,
 *     safe with the pthreads OpenBLAS in single-thread mode).  The devices
 *     meet only at collectives.
 *   - otherwise (one device, or fewer devices than threads): step by step;
 *     a kernel's rows on every device are split into devices x chunks pool
 *     tasks, a GEMM into blocks, each a single-threaded cblas_sgemm on a
 *     pool task (run_gemm_split).
 * Either way the pool's threads are the only ones (at most the cores):
 * OpenBLAS runs in single-thread mode and starts none.  With
 * kdc_rt_options.profile every step is timed (kdc_rt_plan_profile_print).
 * A COLLECTIVE step: every device arrives at the communicator with its
 * buffers, then the call completes (comm.h); a device whose result buffer
 * an earlier device already brought (a shared replica, state.c) arrives
 * with NULL, so the result is written once.  A LOOP whose body holds a
 * collective (a recurrent layer split by units) runs iteration by
 * iteration for all devices, its body scheduled like a function.  Nothing
 * here allocates; every buffer reference was checked at load.
 */
#include <string.h>
#include <time.h>

#include <cblas.h>

#include "kdc/fpenv.h"
#include "runtime/comm.h"
#include "runtime/cuda/cuda_rt.h"
#include "runtime/gemm_bf16.h"
#include "runtime/runtime.h"

/* Below this many element-ops a step (all devices) runs on the calling
 * thread: waking workers costs a few microseconds, about what 64K simple
 * ops take. */
enum { PARALLEL_MIN_OPS = 1 << 16, OPS_PER_CHUNK = 1 << 14 };
/* GEMM blocks are multiples of this many rows or columns: such blocks gave
 * results bitwise equal to the whole single-threaded GEMM (docs/runtime.md). */
enum { GEMM_ALIGN = RT_GEMM_ALIGN };

/* OpenBLAS's thread count is process-wide: set it only when it changes
 * (read back every run: the embedding program may have changed it). */
static void set_blas_threads(int n) {
  if (openblas_get_num_threads() != n) openblas_set_num_threads(n);
}

typedef struct runner {
  kdc_rt_plan *p;
  const kdc_prog_func *f;
  rt_func *rf;
  uint32_t s0, s1;    /* device-parallel: the steps of the current segment */
  uint32_t step;      /* step mode: the kernel step */
  int64_t chunks;     /* step mode: chunks per device */
  const float *stack_a; /* a stacked GEMM's A: the devices' own, or the stacking buffer */
  uint32_t unstack;   /* a stacked GEMM whose rows the devices still have to take into
                         their C (run_stacked_gemm), or UINT32_MAX */
} runner;

void *rt_exec_resolve(const kdc_rt_plan *p, const kdc_prog_func *f, const rt_func *rf,
                      int64_t dev, const kdc_prog_loc *l) {
  char *base;
  switch (l->buf) {
  case KDC_PROG_BUF_ARENA: base = p->scratch + (uint64_t)dev * p->arena_stride; break;
  case KDC_PROG_BUF_INPUT: base = (char *)rf->in_ptr[dev * f->n_inputs + l->index]; break;
  case KDC_PROG_BUF_OUTPUT: base = rf->out_ptr[dev * f->n_outputs + l->index]; break;
  default: base = (char *)p->dev_weights[dev * p->prog.n_weights + l->index]; break;
  }
  return base + l->offset;
}

static void *resolve(const runner *r, int64_t dev, const kdc_prog_loc *l) {
  return rt_exec_resolve(r->p, r->f, r->rf, dev, l);
}

/* |l| as step |s| sees it: redirected into a shared result when the step
 * computes the operand of an all_gather made in place (gather_inplace.c). */
static void *resolve_at(const runner *r, int64_t dev, uint32_t s, const kdc_prog_loc *l) {
  void *to = r->rf->inplace_of ? rt_inplace_redirect(r->rf, r->f, dev, s, l) : NULL;
  return to ? to : resolve(r, dev, l);
}

static void **bind_kernel(const runner *r, int64_t dev, uint32_t s) {
  const kdc_prog_kernel_step *k = &r->f->steps[s].kernel;
  void **args = r->rf->step_args[dev * r->f->n_steps + s];
  for (uint32_t a = 0; a < k->n_args; a++) args[a] = resolve_at(r, dev, s, &k->args[a]);
  return args;
}

/* This process's devices are [p->d0, p->d1) (all of them unless the mesh is
 * split over processes, docs/processes.md); tasks count local devices. */
static int64_t nlocal(const kdc_rt_plan *p) { return p->d1 - p->d0; }

static const int64_t *coords(const kdc_rt_plan *p, int64_t dev) {
  return p->coords + dev * KDC_PROG_MAX_AXES;
}

/* The leading dimension step |s| reads operand |l| with (|ld| unless a
 * view of an all_to_all result, gather_inplace.c). */
static int64_t ld_at(const runner *r, uint32_t s, const kdc_prog_loc *l, int64_t ld) {
  int64_t v = r->rf->inplace_of ? rt_inplace_ld(r->rf, s, l) : 0;
  return v ? v : ld;
}

/* Rows [m0, m1) and columns [n0, n1) of batch entry |i| of GEMM step |s|. */
static void gemm_block(const runner *r, int64_t dev, uint32_t s, int64_t i, int64_t m0,
                       int64_t m1, int64_t n0, int64_t n1) {
  const kdc_prog_gemm_step *g = &r->f->steps[s].gemm;
  int64_t lda = ld_at(r, s, &g->a, g->lda), ldb = ld_at(r, s, &g->b, g->ldb);
  int64_t bi = g->batch_inner;
  const float *A = (const float *)resolve_at(r, dev, s, &g->a) +
                   kdc_prog_gemm_off(i, bi, g->stride_a, g->stride_a2);
  const float *B = (const float *)resolve_at(r, dev, s, &g->b) +
                   kdc_prog_gemm_off(i, bi, g->stride_b, g->stride_b2);
  float *C = (float *)resolve_at(r, dev, s, &g->c) + kdc_prog_gemm_off(i, bi, g->stride_c, g->stride_c2);
  A += g->trans_a ? m0 : m0 * lda;  /* op(A) is M x K: A is K x M when transposed */
  B += g->trans_b ? n0 * ldb : n0;  /* op(B) is K x N: B is N x K when transposed */
  C += m0 * g->ldc + n0;
  rt_sgemm(g->bf16_inputs, g->trans_a, g->trans_b, m1 - m0, n1 - n0, g->k, A, lda, B, ldb, C,
           g->ldc);
}

static void run_gemm(const runner *r, int64_t dev, uint32_t s) {
  const kdc_prog_gemm_step *g = &r->f->steps[s].gemm;
  for (int64_t i = 0; i < g->batch; i++) gemm_block(r, dev, s, i, 0, g->m, 0, g->n);
}

/* LOOP steps (a scan): the body is a function of the plan whose inputs and
 * outputs are rebound before every iteration; its arena locations are
 * absolute (codegen placed them after the caller's live values). */
static runner body_runner(const runner *r, const kdc_prog_loop_step *l) {
  return (runner){.p = r->p, .f = &r->p->prog.funcs[l->body], .rf = &r->p->funcs[l->body],
                  .unstack = UINT32_MAX};
}

/* Binds iteration |t|'s ranges of |l| for device |dev| into |b|'s pointers. */
static void bind_iteration(const runner *r, const runner *b, const kdc_prog_loop_step *l,
                           int64_t dev, int64_t t) {
  for (uint32_t i = 0; i < l->n_in; i++)
    b->rf->in_ptr[dev * l->n_in + i] = (char *)resolve(r, dev, &l->in[i]) + t * l->in_stride[i];
  for (uint32_t o = 0; o < l->n_out; o++)
    b->rf->out_ptr[dev * l->n_out + o] = (char *)resolve(r, dev, &l->out[o]) + t * l->out_stride[o];
}

static void copy_carries(const runner *r, const kdc_prog_loop_step *l, int64_t dev) {
  for (uint32_t i = 0; i < l->n_carry; i++)
    memcpy(resolve(r, dev, &l->in[i]), resolve(r, dev, &l->out[i]), l->in[i].bytes);
}

static void run_local_step(const runner *r, int64_t dev, uint32_t s);

/* The whole loop for one device, on this thread. */
static void run_loop_device(const runner *r, int64_t dev, const kdc_prog_loop_step *l) {
  runner b = body_runner(r, l);
  for (int64_t t = 0; t < l->length; t++) {
    bind_iteration(r, &b, l, dev, t);
    for (uint32_t s = 0; s < b.f->n_steps; s++) run_local_step(&b, dev, s);
    copy_carries(r, l, dev);
  }
}

/* Step |s| (not a collective) on device |dev|, whole, on this thread. */
static void run_local_step(const runner *r, int64_t dev, uint32_t s) {
  const kdc_prog_step *st = &r->f->steps[s];
  switch (st->kind) {
  case KDC_STEP_KERNEL:
    r->p->kernels[st->kernel.kernel](bind_kernel(r, dev, s), coords(r->p, dev), 0,
                                     st->kernel.extent);
    break;
  case KDC_STEP_GEMM: run_gemm(r, dev, s); break;
  case KDC_STEP_COPY:
    memmove(resolve(r, dev, &st->dst), resolve(r, dev, &st->src), st->src.bytes);
    break;
  case KDC_STEP_LOOP: run_loop_device(r, dev, &st->loop); break;
  case KDC_STEP_COLLECTIVE: /* only one made in place that orders nothing (meets_at) */
    if (!r->rf->inplace_skip || r->rf->inplace_skip[s] != RT_SKIP_FREE) kdc_unreachable();
    break;
  }
}

/* Profiling (kdc_rt_options.profile): a monotonic clock (1) or the
 * calling thread's CPU clock (2), read only then. */
static uint64_t now_ns(const kdc_rt_plan *p) {
  if (!p->profile) return 0;
  struct timespec ts;
  clock_gettime(p->profile_cpu ? CLOCK_THREAD_CPUTIME_ID : CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void charge(const runner *r, uint32_t s, uint64_t t0) {
  if (r->p->profile) r->rf->prof_ns[s] += now_ns(r->p) - t0;
}

/* a * b for non-negative a, b, saturating at INT64_MAX */
static int64_t sat_mul(int64_t a, int64_t b) {
  int64_t r;
  return __builtin_mul_overflow(a, b, &r) ? INT64_MAX : r;
}

/* ~element-ops of a step on one device (the threading heuristic; saturates:
 * the decoder bounds each factor, not their product). */
static int64_t step_ops(const kdc_prog_step *st) {
  switch (st->kind) {
  case KDC_STEP_KERNEL:
    return sat_mul(st->kernel.extent, st->kernel.unit_cost > 0 ? st->kernel.unit_cost : 1);
  case KDC_STEP_GEMM:
    return sat_mul(sat_mul(sat_mul(2 * st->gemm.batch, st->gemm.m), st->gemm.n), st->gemm.k);
  case KDC_STEP_COPY: return (int64_t)(st->src.bytes / 4);
  case KDC_STEP_LOOP: return st->loop.length * PARALLEL_MIN_OPS; /* worth a task */
  default: return 0;
  }
}

/* Shared replicas (comm.h): has an earlier local device of call |seq| the
 * result buffer |dst| already?  An open-addressing set over the call's
 * buffers, reset by the sequence number (nothing cleared per call). */
static bool dst_seen(kdc_rt_plan *p, uint64_t seq, const void *dst) {
  uint64_t mask = p->dst_seen_cap - 1, h = ((uintptr_t)dst >> 6) * 0x9E3779B97F4A7C15u;
  for (uint64_t i = h >> 32 & mask;; i = (i + 1) & mask) {
    rt_dst_slot *slot = &p->dst_seen[i];
    if (slot->seq != seq) {
      *slot = (rt_dst_slot){dst, seq};
      return false;
    }
    if (slot->ptr == dst) return true;
  }
}

static kdc_status run_collective(runner *r, uint32_t s) {
  kdc_rt_plan *p = r->p;
  const kdc_prog_coll_step *c = &r->f->steps[s].coll;
  if (r->rf->inplace_skip && r->rf->inplace_skip[s]) return NULL; /* made in place */
  rt_coll_call call = {c, &r->rf->groups[s], ++p->coll_seq, r->f->name, s};
  /* Only an output (state.c shares replicas of training state) or a shared
   * result (gather_inplace.c) can be one buffer for several devices. */
  bool may_share = (c->dst.buf == KDC_PROG_BUF_OUTPUT || r->rf->inplace_of) && nlocal(p) > 1;
  for (int64_t d = p->d0; d < p->d1; d++) {
    void *dst = resolve_at(r, d, s, &c->dst); /* a shared result: gather_inplace.c */
    if (may_share && dst_seen(p, call.seq, dst)) dst = NULL; /* written by an earlier device */
    KDC_RETURN_IF_ERROR(p->comm->vt->arrive(p->comm, &call, d, resolve(r, d, &c->src), dst));
  }
  return p->comm->vt->complete(p->comm, &call);
}

bool rt_exec_output_shareable(const kdc_prog_func *f, uint32_t o) {
  uint64_t bytes = f->outputs[o].local_bytes;
  int by_coll = 0;
#define WRITES(l) ((l).buf == KDC_PROG_BUF_OUTPUT && (l).index == o)
  for (uint32_t i = 0; i < f->n_steps; i++) {
    const kdc_prog_step *st = &f->steps[i];
    switch (st->kind) {
    case KDC_STEP_KERNEL:
      for (uint32_t a = 0; a < st->kernel.n_out; a++)
        if (WRITES(st->kernel.args[a])) return false;
      break;
    case KDC_STEP_GEMM:
      if (WRITES(st->gemm.c)) return false;
      break;
    case KDC_STEP_COPY:
      if (WRITES(st->dst)) return false;
      break;
    case KDC_STEP_LOOP:
      for (uint32_t a = 0; a < st->loop.n_out; a++)
        if (WRITES(st->loop.out[a])) return false;
      break;
    case KDC_STEP_COLLECTIVE:
      if (!WRITES(st->coll.dst)) break;
      if (st->coll.dst.offset != 0 || st->coll.dst.bytes != bytes) return false;
      by_coll++;
      break;
    }
  }
#undef WRITES
  return by_coll > 0;
}

/* Does the body of loop |l| hold a collective step?  Such a loop cannot
 * run as one task per device: every iteration meets the other devices. */
static bool loop_meets(const kdc_rt_plan *p, const kdc_prog_loop_step *l) {
  const kdc_prog_func *b = &p->prog.funcs[l->body];
  for (uint32_t s = 0; s < b->n_steps; s++)
    if (b->steps[s].kind == KDC_STEP_COLLECTIVE) return true;
  return false;
}

/* A step the devices meet at: a collective, or a loop whose body has one. */
static bool meets(const kdc_rt_plan *p, const kdc_prog_step *st) {
  return st->kind == KDC_STEP_COLLECTIVE || (st->kind == KDC_STEP_LOOP && loop_meets(p, &st->loop));
}

/* Does step |s| meet the other devices this run?  Not a collective made in
 * place that orders nothing (gather_inplace.c): the devices run on through
 * it in one segment. */
static bool meets_at(const runner *r, uint32_t s) {
  if (r->rf->inplace_skip && r->rf->inplace_skip[s] == RT_SKIP_FREE) return false;
  return meets(r->p, &r->f->steps[s]);
}

/* ---- device-parallel schedule ------------------------------------------------ */

static kdc_status run_device_parallel(runner *r);

/* A loop whose body meets the other devices: iteration by iteration for
 * all devices, the body run like a function of its own (segments between
 * its collectives). */
static kdc_status run_loop_meeting(runner *r, const kdc_prog_loop_step *l) {
  runner b = body_runner(r, l);
  for (int64_t t = 0; t < l->length; t++) {
    for (int64_t d = r->p->d0; d < r->p->d1; d++) bind_iteration(r, &b, l, d, t);
    KDC_RETURN_IF_ERROR(run_device_parallel(&b));
    for (int64_t d = r->p->d0; d < r->p->d1; d++) copy_carries(r, l, d);
  }
  return NULL;
}

static void unstack_rows(const runner *r, int64_t task);

static void segment_task(void *ctx, int64_t dev) {
  const runner *r = ctx;
  bool timed = r->p->profile && dev == 0; /* device 0's share, by one thread */
  if (r->unstack != UINT32_MAX) unstack_rows(r, dev);
  for (uint32_t s = r->s0; s < r->s1; s++) {
    uint64_t t0 = timed ? now_ns(r->p) : 0;
    run_local_step(r, r->p->d0 + dev, s);
    if (timed) charge(r, s, t0);
  }
}

/* A GEMM whose B every local device reads from one buffer (a replicated
 * weight, a shared replica, a shared collective result), with op(A) = A
 * (not transposed) and a stacking buffer made at load
 * (gemm_stack.c): the devices' A are stacked into one (nl x m) x k
 * matrix, ONE GEMM on it runs in column blocks of 64-multiples on the pool
 * (or, where only that is bitwise the devices' GEMMs, in chunks of rows),
 * and each device's rows of the result are copied back.  8 devices each
 * with 1/8 of the batch otherwise pack and stream the whole of B 8 times,
 * each GEMM with 1/8 of the rows to amortise it over (docs/runtime.md,
 * "Threads"). */
static bool stacked_gemm(const runner *r, uint32_t s) {
  if (!r->rf->stack || !r->rf->stack[s].a || nlocal(r->p) != r->p->nd || !rt_inplace_on())
    return false;
  const kdc_prog_gemm_step *g = &r->f->steps[s].gemm;
  if (ld_at(r, s, &g->a, 0) || ld_at(r, s, &g->b, 0)) return false; /* a strided view */
  const void *b = resolve_at(r, r->p->d0, s, &g->b);
  for (int64_t d = r->p->d0 + 1; d < r->p->d1; d++)
    if (resolve_at(r, d, s, &g->b) != b) return false;
  return true;
}

/* Device |task|'s rows of stacked GEMM |r->unstack| into its C. */
static void unstack_rows(const runner *r, int64_t task) {
  const kdc_prog_gemm_step *g = &r->f->steps[r->unstack].gemm;
  memcpy(resolve_at(r, r->p->d0 + task, r->unstack, &g->c),
         r->rf->stack[r->unstack].c + task * g->m * g->n, (size_t)(g->m * g->n) * sizeof(float));
}

static void unstack_task(void *ctx, int64_t task) { unstack_rows(ctx, task); }

/* task < nl: copy device task's A into the stack */
static void stack_copy_task(void *ctx, int64_t task) {
  const runner *r = ctx;
  const kdc_prog_gemm_step *g = &r->f->steps[r->step].gemm;
  memcpy(r->rf->stack[r->step].a + task * g->m * g->k, resolve_at(r, r->p->d0 + task, r->step, &g->a),
         (size_t)(g->m * g->k) * sizeof(float));
}

static void stack_gemm_task(void *ctx, int64_t task) {
  const runner *r = ctx;
  const kdc_prog_gemm_step *g = &r->f->steps[r->step].gemm;
  const rt_gemm_stack *st = &r->rf->stack[r->step];
  rt_stack_gemm_block(g, st->chunk, nlocal(r->p), r->p->n_threads, task, r->stack_a,
                      resolve_at(r, r->p->d0, r->step, &g->b), st->c);
}

/* The devices' rows of a stacked GEMM still in the stacking buffer go to
 * their C now (before a meeting or another stacked GEMM; a segment's
 * tasks take them themselves, segment_task). */
static void flush_unstack(runner *r) {
  if (r->unstack == UINT32_MAX) return;
  rt_pool_run(r->p->pool, unstack_task, r, nlocal(r->p));
  r->unstack = UINT32_MAX;
}

/* The stacked GEMM: A read where the devices' pieces already lie one
 * after another (a batch-split input bound in place, shard_io.c), else
 * copied into the stacking buffer; ONE GEMM; each device's rows of C
 * copied back by its next segment task. */
/* Do the local devices' A of GEMM step |s| lie one after another? */
static bool a_contiguous(const runner *r, uint32_t s) {
  const kdc_prog_gemm_step *g = &r->f->steps[s].gemm;
  const float *a0 = resolve_at(r, r->p->d0, s, &g->a);
  for (int64_t d = r->p->d0 + 1; d < r->p->d1; d++)
    if (resolve_at(r, d, s, &g->a) != a0 + (d - r->p->d0) * g->m * g->k) return false;
  return true;
}

static void run_stacked_gemm(runner *r, uint32_t s) {
  kdc_rt_plan *p = r->p;
  flush_unstack(r);
  r->step = s;
  if (a_contiguous(r, s)) {
    r->stack_a = resolve_at(r, p->d0, s, &r->f->steps[s].gemm.a);
  } else {
    rt_pool_run(p->pool, stack_copy_task, r, nlocal(p));
    r->stack_a = r->rf->stack[s].a;
  }
  rt_pool_run(p->pool, stack_gemm_task, r, p->n_threads);
  r->unstack = s;
  r->rf->inplace_made[RT_SHARE_GEMM_B]++;
}

static kdc_status run_device_parallel(runner *r) {
  const kdc_prog_func *f = r->f;
  set_blas_threads(1);
  for (uint32_t s = 0; s < f->n_steps;) {
    if (stacked_gemm(r, s)) {
      uint64_t t0 = now_ns(r->p);
      run_stacked_gemm(r, s);
      charge(r, s, t0);
      s++;
      continue;
    }
    if (meets_at(r, s)) {
      flush_unstack(r);
      uint64_t t0 = now_ns(r->p);
      if (f->steps[s].kind == KDC_STEP_LOOP) KDC_RETURN_IF_ERROR(run_loop_meeting(r, &f->steps[s].loop));
      else KDC_RETURN_IF_ERROR(run_collective(r, s));
      charge(r, s, t0);
      s++;
      continue;
    }
    int64_t ops = 0;
    r->s0 = s;
    while (s < f->n_steps && !meets_at(r, s) && !stacked_gemm(r, s))
      ops += step_ops(&f->steps[s++]);
    r->s1 = s;
    int64_t nl = nlocal(r->p);
    if (ops * nl < PARALLEL_MIN_OPS || nl > RT_POOL_MAX_TASKS) {
      for (int64_t d = 0; d < nl; d++) segment_task(r, d);
    } else {
      rt_pool_run(r->p->pool, segment_task, r, nl);
    }
    r->unstack = UINT32_MAX; /* the segment's tasks took their rows */
  }
  flush_unstack(r);
  return NULL;
}

/* ---- step-by-step schedule --------------------------------------------------- */

static void chunk_task(void *ctx, int64_t task) {
  const runner *r = ctx;
  const kdc_prog_kernel_step *k = &r->f->steps[r->step].kernel;
  int64_t dev = r->p->d0 + task / r->chunks, c = task % r->chunks;
  int64_t b = k->extent * c / r->chunks, e = k->extent * (c + 1) / r->chunks;
  r->p->kernels[k->kernel](r->rf->step_args[dev * r->f->n_steps + r->step], coords(r->p, dev),
                           b, e);
}

static void run_kernel_split(runner *r, uint32_t s) {
  kdc_rt_plan *p = r->p;
  const kdc_prog_kernel_step *k = &r->f->steps[s].kernel;
  int64_t ops = step_ops(&r->f->steps[s]), chunks = ops / OPS_PER_CHUNK;
  int64_t nl = nlocal(p), most = 4 * (int64_t)p->n_threads / nl;
  if (chunks > most) chunks = most;
  if (chunks > k->extent) chunks = k->extent;
  if (chunks > RT_POOL_MAX_TASKS / nl) chunks = RT_POOL_MAX_TASKS / nl;
  if (chunks < 1) chunks = 1;
  if (p->n_threads <= 1 || ops * nl < PARALLEL_MIN_OPS || chunks * nl < 2) {
    for (int64_t d = p->d0; d < p->d1; d++) run_local_step(r, d, s);
    return;
  }
  for (int64_t d = p->d0; d < p->d1; d++) bind_kernel(r, d, s);
  r->step = s;
  r->chunks = chunks;
  rt_pool_run(p->pool, chunk_task, r, chunks * nl);
}

static void run_gemm_split(runner *r, uint32_t s);

/* A LOOP step, iteration by iteration for all devices, each body step
 * split like a step of its own (kernels in row chunks, GEMMs in blocks on
 * the pool).  Profiling charges the body's steps to the body function
 * (one run per loop run; kdc_rt_plan_profile_print lists it under its
 * caller). */
static kdc_status run_loop_stepwise(runner *r, const kdc_prog_loop_step *l) {
  runner b = body_runner(r, l);
  for (int64_t t = 0; t < l->length; t++) {
    for (int64_t d = r->p->d0; d < r->p->d1; d++) bind_iteration(r, &b, l, d, t);
    for (uint32_t s = 0; s < b.f->n_steps; s++) {
      uint64_t t0 = now_ns(r->p);
      switch (b.f->steps[s].kind) {
      case KDC_STEP_KERNEL: run_kernel_split(&b, s); break;
      case KDC_STEP_GEMM: run_gemm_split(&b, s); break;
      case KDC_STEP_COLLECTIVE: KDC_RETURN_IF_ERROR(run_collective(&b, s)); break;
      default:
        for (int64_t d = r->p->d0; d < r->p->d1; d++) run_local_step(&b, d, s);
        break;
      }
      charge(&b, s, t0);
    }
    for (int64_t d = r->p->d0; d < r->p->d1; d++) copy_carries(r, l, d);
  }
  b.rf->prof_runs += r->p->profile;
  return NULL;
}

/* A GEMM step is split into blocks, each one single-threaded cblas_sgemm
 * call on a pool task: batch entries when there are enough of them, else
 * row (or column, whichever is longer) blocks of GEMM_ALIGN multiples.  The
 * pool is then the only set of threads (OpenBLAS's own never start, so they
 * never spin against the pool's workers on a small machine). */
enum { GEMM_PARALLEL_MIN_FLOPS = 1 << 20 };

static void gemm_task(void *ctx, int64_t task) {
  const runner *r = ctx;
  const kdc_prog_gemm_step *g = &r->f->steps[r->step].gemm;
  int64_t dev = r->p->d0 + task / r->chunks, c = task % r->chunks;
  if (g->batch >= r->chunks) { /* a range of whole batch entries */
    for (int64_t i = g->batch * c / r->chunks; i < g->batch * (c + 1) / r->chunks; i++)
      gemm_block(r, dev, r->step, i, 0, g->m, 0, g->n);
    return;
  }
  int64_t per = r->chunks / g->batch, i = c / per, b = c % per; /* block b of entry i */
  bool rows = g->m >= g->n;
  int64_t len = rows ? g->m : g->n, units = (len + GEMM_ALIGN - 1) / GEMM_ALIGN;
  int64_t lo = units * b / per * GEMM_ALIGN, hi = units * (b + 1) / per * GEMM_ALIGN;
  if (hi > len) hi = len;
  if (lo >= hi) return;
  if (rows) gemm_block(r, dev, r->step, i, lo, hi, 0, g->n);
  else gemm_block(r, dev, r->step, i, 0, g->m, lo, hi);
}

static void run_gemm_split(runner *r, uint32_t s) {
  kdc_rt_plan *p = r->p;
  const kdc_prog_gemm_step *g = &r->f->steps[s].gemm;
  int64_t nl = nlocal(p), threads = p->n_threads, chunks;
  if (g->batch >= threads) {
    chunks = g->batch < 4 * threads ? g->batch : 4 * threads;
  } else {
    int64_t len = g->m >= g->n ? g->m : g->n, units = (len + GEMM_ALIGN - 1) / GEMM_ALIGN;
    int64_t per = (threads + g->batch - 1) / g->batch;
    chunks = g->batch * (per < units ? per : units);
  }
  if (chunks > RT_POOL_MAX_TASKS / nl) chunks = RT_POOL_MAX_TASKS / nl;
  if (threads <= 1 || step_ops(&r->f->steps[s]) * nl < GEMM_PARALLEL_MIN_FLOPS ||
      chunks * nl < 2 || (g->batch < threads && chunks % g->batch)) {
    for (int64_t d = p->d0; d < p->d1; d++) run_gemm(r, d, s);
    return;
  }
  r->step = s;
  r->chunks = chunks;
  rt_pool_run(p->pool, gemm_task, r, chunks * nl);
}

static kdc_status run_stepwise(runner *r) {
  const kdc_prog_func *f = r->f;
  set_blas_threads(1);
  for (uint32_t s = 0; s < f->n_steps; s++) {
    uint64_t t0 = now_ns(r->p);
    switch (f->steps[s].kind) {
    case KDC_STEP_KERNEL: run_kernel_split(r, s); break;
    case KDC_STEP_GEMM: run_gemm_split(r, s); break;
    case KDC_STEP_LOOP: KDC_RETURN_IF_ERROR(run_loop_stepwise(r, &f->steps[s].loop)); break;
    case KDC_STEP_COLLECTIVE: KDC_RETURN_IF_ERROR(run_collective(r, s)); break;
    default:
      for (int64_t d = r->p->d0; d < r->p->d1; d++) run_local_step(r, d, s);
      break;
    }
    charge(r, s, t0);
  }
  return NULL;
}

kdc_status rt_exec_steps(kdc_rt_plan *p, size_t func) {
  if (p->cuda) return rt_cuda_exec(p, func); /* a CUDA plan on GPUs (docs/gpu.md) */
  if (p->prog.n_kernels && !p->kernels)
    return KDC_ERR(KDC_INVALID_INPUT, "%s: loaded to be described only (no code): it cannot "
                   "run", p->path);
  if (p->func_compiled && !p->func_compiled[func])
    return KDC_ERR(KDC_INVALID_INPUT, "%s: loaded to run one function only: the code of %s "
                   "was not compiled", p->path, p->prog.funcs[func].name);
  runner r = {.p = p, .f = &p->prog.funcs[func], .rf = &p->funcs[func], .unstack = UINT32_MAX};
  rt_inplace_bind(p, r.f, r.rf);
  unsigned long fp = kdc_fp_flush_enter(); /* kdc/fpenv.h; the workers are in it already */
  kdc_status st = p->device_parallel ? run_device_parallel(&r) : run_stepwise(&r);
  kdc_fp_flush_leave(fp);
  r.rf->prof_runs += p->profile;
  if (st) st = kdc_status_annotate(st, "%s: %s", p->path, r.f->name);
  if (!st && p->during_run) st = p->during_run(p->during_user); /* after it: nothing to overlap */
  return st;
}

size_t rt_exec_inplace_count(const kdc_rt_plan *p, size_t func, rt_share kind) {
  return func < p->prog.n_funcs ? p->funcs[func].inplace_made[kind] : 0;
}

/* ---- the API -------------------------------------------------------------------- */

static kdc_status check_func(const kdc_rt_plan *p, size_t func) {
  if (func >= p->prog.n_funcs)
    return KDC_ERR(KDC_INVALID_INPUT, "%s: no function %zu (the plan has %u)", p->path, func,
                   p->prog.n_funcs);
  return NULL;
}

kdc_status kdc_rt_plan_run_func(kdc_rt_plan *p, size_t func, const void *const *inputs,
                                void *const *outputs) {
  KDC_RETURN_IF_ERROR(check_func(p, func));
  const kdc_prog_func *f = &p->prog.funcs[func];
  for (uint32_t i = 0; i < f->n_inputs; i++)
    if (!inputs || (!inputs[i] && f->inputs[i].bytes))
      return KDC_ERR(KDC_INVALID_INPUT, "%s: %s: input %u (%s) is missing", p->path, f->name, i,
                     f->inputs[i].name);
  for (uint32_t i = 0; i < f->n_outputs; i++)
    if (!outputs || (!outputs[i] && f->outputs[i].bytes))
      return KDC_ERR(KDC_INVALID_INPUT, "%s: %s: output %u (%s) is missing", p->path, f->name, i,
                     f->outputs[i].name);
  rt_func *rf = &p->funcs[func];
  rt_io_split(p, f, rf, inputs, outputs);
  KDC_RETURN_IF_ERROR(rt_exec_steps(p, func));
  if (p->comm->vt->collect_outputs) {  /* processes: the pieces meet on process 0 */
    KDC_RETURN_IF_ERROR(p->comm->vt->collect_outputs(p->comm, p, func));
    if (p->proc_id != 0) return NULL;
  }
  return rt_io_gather(p, f, rf, outputs, p->check_replicas);
}

kdc_status kdc_rt_plan_run(kdc_rt_plan *p, const void *const *inputs, void *const *outputs) {
  return kdc_rt_plan_run_func(p, 0, inputs, outputs);
}

kdc_status kdc_rt_plan_run_local(kdc_rt_plan *p, size_t func, const void *const *const *inputs,
                                 void *const *const *outputs) {
  KDC_RETURN_IF_ERROR(check_func(p, func));
  const kdc_prog_func *f = &p->prog.funcs[func];
  rt_func *rf = &p->funcs[func];
  for (int64_t d = 0; d < p->nd; d++) {
    for (uint32_t i = 0; i < f->n_inputs; i++) {
      if (!inputs || !inputs[d] || (!inputs[d][i] && f->inputs[i].local_bytes))
        return KDC_ERR(KDC_INVALID_INPUT, "%s: %s: device %lld: input %u (%s) is missing",
                       p->path, f->name, (long long)d, i, f->inputs[i].name);
      rf->in_ptr[d * f->n_inputs + i] = inputs[d][i];
    }
    for (uint32_t o = 0; o < f->n_outputs; o++) {
      if (!outputs || !outputs[d] || (!outputs[d][o] && f->outputs[o].local_bytes))
        return KDC_ERR(KDC_INVALID_INPUT, "%s: %s: device %lld: output %u (%s) is missing",
                       p->path, f->name, (long long)d, o, f->outputs[o].name);
      rf->out_ptr[d * f->n_outputs + o] = outputs[d][o];
    }
  }
  return rt_exec_steps(p, func);
}
