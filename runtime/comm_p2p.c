/*
 * runtime/comm_p2p.c: the collectives backend of a job of several
 * processes (comm.h, docs/processes.md), over a point-to-point transport
 * (rt_net: MPI under mpirun, comm_mpi.c; TCP after a --coordinator
 * rendezvous, comm_tcp.c).
 *
 * The mesh's devices are split evenly over the processes, row-major:
 * process r runs devices [r*nd/P, (r+1)*nd/P) (p->d0, p->d1), so a process
 * owns whole contiguous blocks of device ids.  Every process runs the same
 * lock-step program (exec.c) on its devices; at a COLLECTIVE step each
 * local device arrive()s with its buffers and complete() does, for this
 * process:
 *   1. exchange: every operand a local device needs from another process
 *      (the members of its group; for collective_permute its source) is
 *      received into a staging buffer, and every local operand another
 *      process needs is sent to it once (tag = device id);
 *   2. wait: every message completes within the collective timeout, or the
 *      run fails naming the device and process that did not deliver (and
 *      kdc run leaves at once, procs.c, so nothing hangs);
 *   3. data movement for the local devices only, with the in-process
 *      backend's semantics and ORDER: sums run over the group's members in
 *      increasing device id, ((x0 + x1) + x2) ... per element in the
 *      step's dtype, so every result is bitwise equal to the virtual mesh
 *      (coll_shm.c) and to ir/interp_spmd.c.
 * Large all_reduce (>= LARGE_BYTES per device, a group over >= 2
 * processes): a reduce-scatter + all-gather instead, moving 2(q-1)/q of the
 * operand per member instead of q-1 operands (q processes in the group).
 * The operand is cut into q chunks by element ([n*c/q, n*(c+1)/q)); chunk c
 * belongs to the group's c-th process (in increasing id), which receives
 * chunk c of every remote member, sums the members IN INCREASING DEVICE ID
 * -- the same per-element order as above, so the result does not depend on
 * the algorithm, the process count or the backend -- and sends the summed
 * chunk to the group's other processes.  (A ring would sum each chunk
 * starting at a different member: its order would differ from the virtual
 * mesh's, so kdc does not use one; on one host or a switched network the
 * pairwise exchange moves the same bytes.)
 * No sub-communicators: the groups (devices.c) already say who exchanges
 * with whom.  After the steps, collect_outputs sends every output piece of
 * the other processes' devices to process 0, which gathers the outputs.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/comm.h"

enum {
  LARGE_BYTES = 2 << 20,   /* all_reduce operands from this size: reduce-scatter + all-gather */
  TAG_SPAN = 16384,        /* tags: device id (mod) for operands, + TAG_SPAN for summed chunks */
};

typedef struct p2p_comm {
  rt_comm base;
  kdc_rt_plan *p;
  rt_net *net;          /* borrowed */
  double timeout_s;
  int64_t per_proc;     /* devices per process */
  const void **src;     /* per device: local operands, or the staged remote ones */
  void **dst;           /* per device: local results */
  void **stage;         /* per device: staging for its operand when remote */
  uint64_t stage_bytes; /* size of each staging buffer */
  bool *need;           /* per device (scratch) */
  bool *sent;           /* per process (scratch) */
  int fault;            /* test hook KDC_TEST_PROCS_FAULT: 1 kill, 2 stall (timeout + 5 s) */
  uint64_t large_bytes; /* all_reduce operands from this size: reduce-scatter + all-gather */
} p2p_comm;

static int owner(const p2p_comm *c, int64_t d) { return (int)(d / c->per_proc); }
static bool local(const p2p_comm *c, int64_t d) { return owner(c, d) == c->p->proc_id; }

kdc_status rt_net_error(rt_net *n, const kdc_rt_plan *p, const rt_net_miss *m, const char *what,
                        double timeout_s) {
  char dev[200] = "";
  if (m->dev >= 0 && p) {
    size_t k = (size_t)snprintf(dev, sizeof dev, "device %lld (", (long long)m->dev);
    const kdc_prog_mesh *mesh = &p->prog.mesh;
    for (uint32_t a = 0; a < mesh->naxes && k < sizeof dev; a++)
      k += (size_t)snprintf(dev + k, sizeof dev - k, "%s%s=%lld", a ? "," : "", mesh->names[a],
                            (long long)p->coords[m->dev * KDC_PROG_MAX_AXES + a]);
    if (k < sizeof dev) snprintf(dev + k, sizeof dev - k, ") on ");
  }
  n->blame = m->fail == RT_NET_ABORTED ? m->culprit : m->peer;
  const char *w = n->rank_word;
  switch (m->fail) {
  case RT_NET_TIMEOUT:
    if (m->send)
      return KDC_ERR(KDC_UNAVAILABLE, "%s: process %d (%s %d) did not take our data within %g s",
                     what, m->peer, w, m->peer, timeout_s);
    return KDC_ERR(KDC_UNAVAILABLE, "%s: %sprocess %d (%s %d) did not arrive within %g s", what,
                   dev, m->peer, w, m->peer, timeout_s);
  case RT_NET_CLOSED:
    return KDC_ERR(KDC_UNAVAILABLE, "%s: %sprocess %d (%s %d) is gone: its connection closed "
                   "(it died or failed)", what, dev, m->peer, w, m->peer);
  case RT_NET_ABORTED:
    if (n->abort_why[0])  /* the culprit's own error: every process reports the same cause */
      return KDC_ERR(KDC_UNAVAILABLE, "%s: process %d (%s %d) ended the job: process %d (%s %d) "
                     "failed: %s", what, m->peer, w, m->peer, m->culprit, w, m->culprit,
                     n->abort_why);
    return KDC_ERR(KDC_UNAVAILABLE, "%s: process %d (%s %d) ended the job: process %d (%s %d) "
                   "failed or is missing", what, m->peer, w, m->peer, m->culprit, w, m->culprit);
  default:
    return KDC_ERR(KDC_INTERNAL, "%s: process %d (%s %d) sent an unexpected message (do all "
                   "processes run the same plan?)", what, m->peer, w, m->peer);
  }
}

static kdc_status wait_all(p2p_comm *c, const char *what) {
  rt_net_miss miss;
  if (c->net->vt->wait(c->net, c->timeout_s, &miss)) return NULL;
  return rt_net_error(c->net, c->p, &miss, what, c->timeout_s);
}

kdc_status rt_net_broadcast(rt_net *n, void *buf, size_t bytes, double timeout_s) {
  if (n->id == 0) {
    for (int r = 1; r < n->n; r++) n->vt->post(n, true, buf, bytes, r, TAG_SPAN - 1, -1);
  } else {
    n->vt->post(n, false, buf, bytes, 0, TAG_SPAN - 1, -1);
  }
  rt_net_miss miss;
  if (n->vt->wait(n, timeout_s, &miss)) return NULL;
  return rt_net_error(n, NULL, &miss, "broadcast from process 0", timeout_s);
}

kdc_status rt_net_barrier(rt_net *n, double timeout_s) {
  static char none[1];
  for (int r = 0; r < n->n; r++)
    if (r != n->id) n->vt->post(n, true, none, 0, r, TAG_SPAN - 2, -1);
  for (int r = 0; r < n->n; r++)
    if (r != n->id) n->vt->post(n, false, none, 0, r, TAG_SPAN - 2, -1);
  rt_net_miss miss;
  if (n->vt->wait(n, timeout_s, &miss)) return NULL;
  return rt_net_error(n, NULL, &miss, "the final barrier", timeout_s);
}

kdc_status rt_net_agree(rt_net *n, double timeout_s) {
  /* Round 1 finds a process that failed, or whose messages do not match
   * ours (it ran other steps: its stale data arrives instead of the
   * barrier's); it leaves with an ABORT instead of round 2, so every
   * other process fails in round 2 with its cause. */
  KDC_RETURN_IF_ERROR(rt_net_barrier(n, timeout_s));
  return rt_net_barrier(n, timeout_s);
}

static void p2p_destroy(rt_comm *base) {
  p2p_comm *c = (p2p_comm *)base;
  for (int64_t d = 0; d < c->p->nd; d++) free(c->stage[d]);
  free(c->stage);
  free(c->src);
  free(c->dst);
  free(c->need);
  free(c->sent);
  free(c);
}

static kdc_status p2p_arrive(rt_comm *base, const rt_coll_call *call, int64_t device,
                             const void *src, void *dst) {
  p2p_comm *c = (p2p_comm *)base;
  (void)call;
  if (device < c->p->d0 || device >= c->p->d1)
    return KDC_ERR(KDC_INTERNAL, "collective: device %lld is not in this process",
                   (long long)device);
  c->src[device] = src;
  c->dst[device] = dst;
  return NULL;
}

static void *staging(p2p_comm *c, int64_t d) {
  if (!c->stage[d]) c->stage[d] = kdc_xmalloc(c->stage_bytes ? c->stage_bytes : 1);
  return c->stage[d];
}

/* Device |d|'s operand goes to every other process owning a device that
 * reads it; operands local devices read from other processes are received. */
static void exchange(p2p_comm *c, const rt_coll_call *call) {
  const rt_coll_groups *g = call->groups;
  const kdc_prog_coll_step *st = call->step;
  kdc_rt_plan *p = c->p;
  rt_net *net = c->net;
  uint64_t bytes = st->src.bytes;
  bool permute = st->kind == KDC_COLL_PERMUTE;
  memset(c->need, 0, (size_t)p->nd * sizeof *c->need);
  for (int64_t d = p->d0; d < p->d1; d++) {
    if (permute) {
      if (g->peer[d] >= 0 && !local(c, g->peer[d])) c->need[g->peer[d]] = true;
      continue;
    }
    const int64_t *mem = g->members + g->group_of[d] * g->k;
    for (int64_t j = 0; j < g->k; j++)
      if (!local(c, mem[j])) c->need[mem[j]] = true;
  }
  for (int64_t d = 0; d < p->nd; d++) {  /* receives, in device order */
    if (!c->need[d]) continue;
    c->src[d] = staging(c, d);
    net->vt->post(net, false, c->stage[d], bytes, owner(c, d), (int)(d % TAG_SPAN), d);
  }
  for (int64_t d = p->d0; d < p->d1; d++) {  /* sends: to each reading process once */
    memset(c->sent, 0, (size_t)p->n_procs * sizeof *c->sent);
    c->sent[p->proc_id] = true;
    for (int64_t e = 0; e < p->nd; e++) {
      bool reads = permute ? g->peer[e] == d : g->group_of[e] == g->group_of[d];
      if (!reads || c->sent[owner(c, e)]) continue;
      c->sent[owner(c, e)] = true;
      net->vt->post(net, true, (void *)c->src[d], bytes, owner(c, e), (int)(d % TAG_SPAN), -1);
    }
  }
}

/* acc[0..n) += x[0..n) in |dt| (wrapping integers): per element, the same
 * sum as coll_shm.c's vector lanes. */
static void add_into(void *acc, const void *x, int64_t n, kdc_io_dtype dt) {
  if (dt == KDC_IO_DTYPE_F32) {
    float *a = acc;
    const float *b = x;
    for (int64_t i = 0; i < n; i++) a[i] += b[i];
  } else if (dt == KDC_IO_DTYPE_I32) {
    uint32_t *a = acc;
    const uint32_t *b = x;
    for (int64_t i = 0; i < n; i++) a[i] += b[i];
  } else {
    uint64_t *a = acc;
    const uint64_t *b = x;
    for (int64_t i = 0; i < n; i++) a[i] += b[i];
  }
}

/* out[b..e) = the sum of the |k| |sorted| members' operands, elements
 * [b, e), in increasing device id. */
static void sum_range(const p2p_comm *c, const int64_t *sorted, int64_t k, kdc_io_dtype dt,
                      size_t es, char *out, int64_t b, int64_t e) {
  memcpy(out + b * (int64_t)es, (const char *)c->src[sorted[0]] + b * (int64_t)es,
         (size_t)(e - b) * es);
  for (int64_t m = 1; m < k; m++)
    add_into(out + b * (int64_t)es, (const char *)c->src[sorted[m]] + b * (int64_t)es, e - b, dt);
}

/* The result of local device |d| from the (local or staged) operands. */
static void move(p2p_comm *c, const rt_coll_call *call, int64_t d) {
  if (!c->dst[d]) return; /* a shared replica: an earlier local device's buffer (comm.h) */
  const rt_coll_groups *g = call->groups;
  const kdc_prog_coll_step *st = call->step;
  size_t es = kdc_prog_dtype_size(st->dtype);
  int64_t k = g->k, grp = g->group_of[d];
  const int64_t *mem = g->members + grp * k, *sorted = g->sorted + grp * k;
  char *out = c->dst[d];
  int64_t zero[KDC_IO_MAX_RANK] = {0}, so[KDC_IO_MAX_RANK] = {0}, dof[KDC_IO_MAX_RANK] = {0},
          piece[KDC_IO_MAX_RANK];
  memcpy(piece, st->in_dims, sizeof piece);
  rt_box b;
  switch (st->kind) {
  case KDC_COLL_ALL_REDUCE:
    sum_range(c, sorted, k, st->dtype, es, out, 0, (int64_t)(st->src.bytes / es));
    return;
  case KDC_COLL_REDUCE_SCATTER:
    so[st->dim] = g->index_of[d] * st->out_dims[st->dim];
    rt_box_init(&b, st->rank, es, st->out_dims, st->in_dims, so, st->out_dims, zero);
    for (int64_t r = 0; r < b.rows; r++) {
      int64_t s_off, d_off;
      rt_box_row(&b, r, &s_off, &d_off);
      memcpy(out + d_off, (const char *)c->src[sorted[0]] + s_off, b.run);
      for (int64_t m = 1; m < k; m++)
        add_into(out + d_off, (const char *)c->src[sorted[m]] + s_off, (int64_t)(b.run / es),
                 st->dtype);
    }
    return;
  case KDC_COLL_ALL_GATHER:
    for (int64_t m = 0; m < k; m++) {
      dof[st->dim] = m * st->in_dims[st->dim];
      rt_box_init(&b, st->rank, es, st->in_dims, st->in_dims, zero, st->out_dims, dof);
      rt_box_copy(&b, out, c->src[mem[m]], 0, b.rows);
    }
    return;
  case KDC_COLL_ALL_TO_ALL:
    piece[st->dim] = st->in_dims[st->dim] / k;
    so[st->dim] = g->index_of[d] * piece[st->dim];
    for (int64_t m = 0; m < k; m++) {
      dof[st->dim2] = m * piece[st->dim2];
      rt_box_init(&b, st->rank, es, piece, st->in_dims, so, st->out_dims, dof);
      rt_box_copy(&b, out, c->src[mem[m]], 0, b.rows);
    }
    return;
  case KDC_COLL_PERMUTE:
    if (g->peer[d] < 0) memset(out, 0, st->dst.bytes);
    else memcpy(out, c->src[g->peer[d]], st->dst.bytes);
    return;
  default: kdc_unreachable();
  }
}

/* ---- large all_reduce: reduce-scatter + all-gather ---------------------------- */

/* The processes of group |grp| in increasing id (its members are sorted by
 * device id and a process owns a contiguous block): returns their count
 * and this process's index among them in |*out_me| (-1: not in it). */
static int group_procs(const p2p_comm *c, const rt_coll_groups *g, int64_t grp, int *procs,
                       int *out_me) {
  const int64_t *sorted = g->sorted + grp * g->k;
  int q = 0;
  *out_me = -1;
  for (int64_t m = 0; m < g->k; m++) {
    int o = owner(c, sorted[m]);
    if (q && procs[q - 1] == o) continue;
    if (o == c->p->proc_id) *out_me = q;
    procs[q++] = o;
  }
  return q;
}

/* Does |call| take the reduce-scatter + all-gather path?  Decided from the
 * step alone, so every process decides the same (a group within one
 * process is then summed whole by that process, q = 1). */
static bool large_all_reduce(const p2p_comm *c, const rt_coll_call *call) {
  return call->step->kind == KDC_COLL_ALL_REDUCE && call->step->src.bytes >= c->large_bytes;
}

/* Element range of chunk |j| of |q| over |n| elements. */
static void chunk(int64_t n, int q, int j, int64_t *b, int64_t *e) {
  *b = n * j / q;
  *e = n * (j + 1) / q;
}

/* Where a group's sum lands in this process: the result buffer of |first|,
 * its first local member, or when that is a shared replica written by
 * another group (NULL, comm.h) the device's own staging buffer (unused
 * otherwise: only remote operands are staged). */
static char *group_sum(p2p_comm *c, int64_t first) {
  return c->dst[first] ? c->dst[first] : staging(c, first);
}

static kdc_status large_all_reduce_run(p2p_comm *c, const rt_coll_call *call, const char *what) {
  const rt_coll_groups *g = call->groups;
  const kdc_prog_coll_step *st = call->step;
  kdc_rt_plan *p = c->p;
  rt_net *net = c->net;
  size_t es = kdc_prog_dtype_size(st->dtype);
  int64_t n = (int64_t)(st->src.bytes / es), k = g->k, b, e;
  int procs[KDC_PROG_MAX_DEVICES], me, q;
  /* groups with a local member, in increasing group id (both sides post in
   * this order) */
  for (int64_t grp = 0; grp < g->n_groups; grp++) {  /* 1. chunk j of every member to proc j */
    q = group_procs(c, g, grp, procs, &me);
    if (me < 0) continue;
    const int64_t *sorted = g->sorted + grp * k;
    for (int64_t m = 0; m < k; m++) {
      int64_t d = sorted[m];
      int tag = (int)(d % TAG_SPAN);
      if (local(c, d)) {
        for (int j = 0; j < q; j++) {
          if (j == me) continue;
          chunk(n, q, j, &b, &e);
          net->vt->post(net, true, (char *)c->src[d] + b * (int64_t)es, (uint64_t)(e - b) * es,
                        procs[j], tag, -1);
        }
      } else {
        chunk(n, q, me, &b, &e);
        c->src[d] = staging(c, d);
        net->vt->post(net, false, (char *)c->stage[d] + b * (int64_t)es, (uint64_t)(e - b) * es,
                      owner(c, d), tag, d);
      }
    }
  }
  KDC_RETURN_IF_ERROR(wait_all(c, what));
  for (int64_t grp = 0; grp < g->n_groups; grp++) {  /* 2. sum my chunk, hand it out */
    q = group_procs(c, g, grp, procs, &me);
    if (me < 0) continue;
    const int64_t *sorted = g->sorted + grp * k;
    int64_t first = -1;
    for (int64_t m = 0; m < k && first < 0; m++)
      if (local(c, sorted[m])) first = sorted[m];
    char *out = group_sum(c, first);
    chunk(n, q, me, &b, &e);
    sum_range(c, sorted, k, st->dtype, es, out, b, e);
    int tag = TAG_SPAN + (int)(sorted[0] % TAG_SPAN);
    for (int j = 0; j < q; j++) {
      if (j == me) continue;
      net->vt->post(net, true, out + b * (int64_t)es, (uint64_t)(e - b) * es, procs[j], tag, -1);
      int64_t rb, re;
      chunk(n, q, j, &rb, &re);
      net->vt->post(net, false, out + rb * (int64_t)es, (uint64_t)(re - rb) * es, procs[j], tag,
                    -1);
    }
  }
  KDC_RETURN_IF_ERROR(wait_all(c, what));
  for (int64_t d = p->d0; d < p->d1; d++) {  /* 3. the other local members: copies */
    const int64_t *sorted = g->sorted + g->group_of[d] * k;
    int64_t first = -1;
    for (int64_t m = 0; m < k && first < 0; m++)
      if (local(c, sorted[m])) first = sorted[m];
    if (first != d && c->dst[d]) memcpy(c->dst[d], group_sum(c, first), st->src.bytes);
  }
  return NULL;
}

static kdc_status p2p_complete(rt_comm *base, const rt_coll_call *call) {
  p2p_comm *c = (p2p_comm *)base;
  if (c->fault == 1) raise(SIGKILL);  /* tests: `kill -9` of this process mid-job */
  if (c->fault == 2) {                /* tests: a peer that does not arrive in time */
    sleep((unsigned)c->timeout_s + 5);  /* (bounded, so no test leaves an orphan behind) */
    _exit(1);
  }
  char what[160];
  snprintf(what, sizeof what, "collective %s (step %u of %s)", kdc_prog_coll_name(call->step->kind),
           call->step_index, call->func);
  if (large_all_reduce(c, call)) return large_all_reduce_run(c, call, what);
  exchange(c, call);
  KDC_RETURN_IF_ERROR(wait_all(c, what));
  for (int64_t d = c->p->d0; d < c->p->d1; d++) move(c, call, d);
  return NULL;
}

static kdc_status p2p_collect(rt_comm *base, kdc_rt_plan *p, size_t func) {
  p2p_comm *c = (p2p_comm *)base;
  const kdc_prog_func *f = &p->prog.funcs[func];
  const rt_func *rf = &p->funcs[func];
  for (int64_t d = c->per_proc; d < p->nd; d++) {
    if (p->proc_id != 0 && !local(c, d)) continue;
    for (uint32_t o = 0; o < f->n_outputs; o++) {
      void *buf = rf->out_ptr[d * f->n_outputs + o];
      uint64_t bytes = f->outputs[o].local_bytes;
      if (!bytes) continue;
      if (p->proc_id == 0) c->net->vt->post(c->net, false, buf, bytes, owner(c, d),
                                            (int)(d % TAG_SPAN), d);
      else c->net->vt->post(c->net, true, buf, bytes, 0, (int)(d % TAG_SPAN), -1);
    }
  }
  char what[160];
  snprintf(what, sizeof what, "%s: gathering the outputs on process 0", f->name);
  return wait_all(c, what);
}

static const rt_comm_vtable p2p_vtable = {
    .destroy = p2p_destroy,
    .arrive = p2p_arrive,
    .complete = p2p_complete,
    .collect_outputs = p2p_collect,
};

kdc_status rt_comm_p2p_create(kdc_rt_plan *p, rt_net *net, double timeout_s, rt_comm **out) {
  *out = NULL;
  if (net->n != p->n_procs || net->id != p->proc_id)
    return KDC_ERR(KDC_INVALID_INPUT, "%s: process %d of %d, but the job's transport says %d of "
                   "%d", p->path, p->proc_id, p->n_procs, net->id, net->n);
  p2p_comm *c = kdc_xcalloc(1, sizeof *c);
  c->base.vt = &p2p_vtable;
  c->p = p;
  c->net = net;
  c->timeout_s = timeout_s;
  c->per_proc = p->nd / p->n_procs;
  c->src = kdc_xcalloc((size_t)p->nd, sizeof *c->src);
  c->dst = kdc_xcalloc((size_t)p->nd, sizeof *c->dst);
  c->stage = kdc_xcalloc((size_t)p->nd, sizeof *c->stage);
  c->need = kdc_xcalloc((size_t)p->nd, sizeof *c->need);
  c->sent = kdc_xcalloc((size_t)p->n_procs, sizeof *c->sent);
  c->large_bytes = LARGE_BYTES;
  for (uint32_t fi = 0; fi < p->prog.n_funcs; fi++)  /* staging: the largest operand */
    for (uint32_t s = 0; s < p->prog.funcs[fi].n_steps; s++)
      if (p->prog.funcs[fi].steps[s].kind == KDC_STEP_COLLECTIVE &&
          p->prog.funcs[fi].steps[s].coll.src.bytes > c->stage_bytes)
        c->stage_bytes = p->prog.funcs[fi].steps[s].coll.src.bytes;
  /* Test hook (tests/mpi/procs_faults.sh): "kill:R" or "stall:R" makes
   * process R die with SIGKILL, or stop past the timeout, at its first
   * collective. */
  const char *f = getenv("KDC_TEST_PROCS_FAULT");
  if (f && (!strncmp(f, "kill:", 5) || !strncmp(f, "stall:", 6)) &&
      atoi(strchr(f, ':') + 1) == p->proc_id)
    c->fault = f[0] == 'k' ? 1 : 2;
  *out = &c->base;
  return NULL;
}

void rt_comm_p2p_test_large_bytes(rt_comm *c, uint64_t bytes) {
  KDC_ASSERT(c->vt == &p2p_vtable);
  ((p2p_comm *)c)->large_bytes = bytes;
}
