/*
 * runtime/comm_mpi.c: the MPI collectives backend (comm.h) and process
 * placement (docs/processes.md).
 *
 * The mesh's devices are split evenly over the processes of
 * MPI_COMM_WORLD, row-major: process r runs devices [r*nd/P, (r+1)*nd/P)
 * (p->d0, p->d1), so a rank owns whole contiguous blocks of device ids.
 * Every process runs the same lock-step program (exec.c) on its devices;
 * at a COLLECTIVE step each local device arrive()s with its buffers and
 * complete() does, for this process:
 *   1. exchange: every operand a local device needs from another process
 *      (the members of its group; for collective_permute its source) is
 *      received into a staging buffer, and every local operand another
 *      process needs is sent to it once (MPI_Isend / MPI_Irecv on a
 *      duplicate of MPI_COMM_WORLD, tag = device id);
 *   2. wait: MPI_Testall polled until every request completed or the
 *      collective timeout passed; a receive still pending at the deadline
 *      names its device and rank (KDC_UNAVAILABLE), and kdc run then
 *      leaves at once (kdc_rt_procs_finish: _exit), so nothing hangs;
 *   3. data movement for the local devices only, with the in-process
 *      backend's semantics and ORDER: sums run over the group's members in
 *      increasing device id, ((x0 + x1) + x2) ... per element in the
 *      step's dtype, so every result is bitwise equal to the virtual mesh
 *      (coll_shm.c) and to ir/interp_spmd.c.
 * MPI_Allreduce is not used: MPI does not specify its summation order.  No
 * sub-communicators are needed either: the groups (devices.c) already say
 * who exchanges with whom, and point-to-point messages between the owning
 * ranks carry exactly those operands.  The cost is k-1 operands received
 * per group member (an all-gather), the price of bitwise determinism;
 * a reduce-scatter + all-gather ring would move less (docs/processes.md).
 * After the steps, collect_outputs sends every output piece of the other
 * processes' devices to process 0, which gathers the global outputs.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <signal.h>
#include <unistd.h>

#include <mpi.h>

#include "runtime/comm.h"

typedef struct mpi_comm {
  rt_comm base;
  kdc_rt_plan *p;
  MPI_Comm world;       /* a duplicate of MPI_COMM_WORLD: our tags never meet anyone's */
  double timeout_s;
  int64_t per_proc;     /* devices per process */
  const void **src;     /* per device: local operands, or the staged remote ones */
  void **dst;           /* per device: local results */
  void **stage;         /* per device: staging for its operand when remote */
  uint64_t stage_bytes; /* size of each staging buffer */
  MPI_Request *req;
  int64_t *req_dev;     /* per request: the remote device it receives, or -1 (a send) */
  int n_req;
  size_t cap_req;
  bool *need;           /* per device (scratch) */
  bool *sent;           /* per process (scratch) */
  int fault;            /* test hook KDC_TEST_MPI_FAULT: 1 kill, 2 stall (timeout + 5 s) */
} mpi_comm;

enum { CHUNK = 1 << 30 };  /* bytes per message (MPI counts are int) */

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int owner(const mpi_comm *c, int64_t d) { return (int)(d / c->per_proc); }
static bool local(const mpi_comm *c, int64_t d) { return owner(c, d) == c->p->proc_id; }

static void post(mpi_comm *c, bool send, void *buf, uint64_t bytes, int peer, int tag,
                 int64_t dev) {
  for (uint64_t o = 0; o < bytes || (o == 0 && bytes == 0); o += CHUNK) {
    int n = (int)(bytes - o < CHUNK ? bytes - o : CHUNK);
    KDC_GROW(c->req, c->cap_req, (size_t)c->n_req + 1);
    c->req_dev = kdc_xrealloc(c->req_dev, (size_t)c->cap_req * sizeof *c->req_dev);
    c->req_dev[c->n_req] = send ? -1 : dev;
    if (send) MPI_Isend((char *)buf + o, n, MPI_BYTE, peer, tag, c->world, &c->req[c->n_req]);
    else MPI_Irecv((char *)buf + o, n, MPI_BYTE, peer, tag, c->world, &c->req[c->n_req]);
    c->n_req++;
    if (bytes == 0) break;
  }
}

/* Waits for every posted request, at most the timeout; |what| names the
 * operation in the error. */
static kdc_status wait_all(mpi_comm *c, const char *what) {
  double deadline = now_s() + c->timeout_s;
  int done = 0;
  struct timespec nap = {0, 20000};
  for (;;) {
    MPI_Testall(c->n_req, c->req, &done, MPI_STATUSES_IGNORE);
    if (done) break;
    if (now_s() > deadline) {
      for (int i = 0; i < c->n_req; i++) {
        int one = 1;
        if (c->req[i] != MPI_REQUEST_NULL) MPI_Test(&c->req[i], &one, MPI_STATUS_IGNORE);
        if (one || c->req_dev[i] < 0) continue;
        int64_t d = c->req_dev[i];
        char co[128] = "";
        size_t k = 0;
        const kdc_prog_mesh *m = &c->p->prog.mesh;
        for (uint32_t a = 0; a < m->naxes && k < sizeof co; a++)
          k += (size_t)snprintf(co + k, sizeof co - k, "%s%s=%lld", a ? "," : "", m->names[a],
                                (long long)c->p->coords[d * KDC_PROG_MAX_AXES + a]);
        return KDC_ERR(KDC_UNAVAILABLE, "%s: device %lld (%s) on process %d (MPI rank %d) did "
                       "not arrive within %g s", what, (long long)d, co, owner(c, d),
                       owner(c, d), c->timeout_s);
      }
      return KDC_ERR(KDC_UNAVAILABLE, "%s: a peer did not take our data within %g s", what,
                     c->timeout_s);
    }
    nanosleep(&nap, NULL);
  }
  c->n_req = 0;
  return NULL;
}

static void mpi_destroy(rt_comm *base) {
  mpi_comm *c = (mpi_comm *)base;
  int fin = 0;
  MPI_Finalized(&fin);
  if (!fin) MPI_Comm_free(&c->world);
  for (int64_t d = 0; d < c->p->nd; d++) free(c->stage[d]);
  free(c->stage);
  free(c->src);
  free(c->dst);
  free(c->req);
  free(c->req_dev);
  free(c->need);
  free(c->sent);
  free(c);
}

static kdc_status mpi_arrive(rt_comm *base, const rt_coll_call *call, int64_t device,
                             const void *src, void *dst) {
  mpi_comm *c = (mpi_comm *)base;
  if (device < c->p->d0 || device >= c->p->d1)
    return KDC_ERR(KDC_INTERNAL, "collective: device %lld is not in this process",
                   (long long)device);
  c->src[device] = src;
  c->dst[device] = dst;
  return NULL;
}

/* Device |d|'s operand goes to every other process owning a device that
 * reads it; operands local devices read from other processes are received. */
static void exchange(mpi_comm *c, const rt_coll_call *call) {
  const rt_coll_groups *g = call->groups;
  const kdc_prog_coll_step *st = call->step;
  kdc_rt_plan *p = c->p;
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
    if (!c->stage[d]) c->stage[d] = kdc_xmalloc(c->stage_bytes ? c->stage_bytes : 1);
    c->src[d] = c->stage[d];
    post(c, false, c->stage[d], bytes, owner(c, d), (int)(d % 32000), d);
  }
  for (int64_t d = p->d0; d < p->d1; d++) {  /* sends: to each reading process once */
    memset(c->sent, 0, (size_t)p->n_procs * sizeof *c->sent);
    c->sent[p->proc_id] = true;
    for (int64_t e = 0; e < p->nd; e++) {
      bool reads = permute ? g->peer[e] == d
                           : g->group_of[e] == g->group_of[d];
      if (!reads || c->sent[owner(c, e)]) continue;
      c->sent[owner(c, e)] = true;
      post(c, true, (void *)c->src[d], bytes, owner(c, e), (int)(d % 32000), -1);
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

/* The result of local device |d| from the (local or staged) operands. */
static void move(mpi_comm *c, const rt_coll_call *call, int64_t d) {
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
    memcpy(out, c->src[sorted[0]], st->src.bytes);
    for (int64_t m = 1; m < k; m++)
      add_into(out, c->src[sorted[m]], (int64_t)(st->src.bytes / es), st->dtype);
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

static kdc_status mpi_complete(rt_comm *base, const rt_coll_call *call) {
  mpi_comm *c = (mpi_comm *)base;
  if (c->fault == 1) raise(SIGKILL);  /* tests: `kill -9` of this rank mid-job */
  if (c->fault == 2) {                /* tests: a peer that does not arrive in time */
    sleep((unsigned)c->timeout_s + 5);  /* (bounded, so no test leaves an orphan behind) */
    _exit(1);
  }
  exchange(c, call);
  char what[160];
  snprintf(what, sizeof what, "collective %s (step %u of %s)", kdc_prog_coll_name(call->step->kind),
           call->step_index, call->func);
  KDC_RETURN_IF_ERROR(wait_all(c, what));
  for (int64_t d = c->p->d0; d < c->p->d1; d++) move(c, call, d);
  return NULL;
}

static kdc_status mpi_collect(rt_comm *base, kdc_rt_plan *p, size_t func) {
  mpi_comm *c = (mpi_comm *)base;
  const kdc_prog_func *f = &p->prog.funcs[func];
  const rt_func *rf = &p->funcs[func];
  for (int64_t d = c->per_proc; d < p->nd; d++) {
    if (p->proc_id != 0 && !local(c, d)) continue;
    for (uint32_t o = 0; o < f->n_outputs; o++) {
      void *buf = rf->out_ptr[d * f->n_outputs + o];
      uint64_t bytes = f->outputs[o].local_bytes;
      if (!bytes) continue;
      if (p->proc_id == 0) post(c, false, buf, bytes, owner(c, d), (int)(d % 32000), d);
      else post(c, true, buf, bytes, 0, (int)(d % 32000), -1);
    }
  }
  char what[160];
  snprintf(what, sizeof what, "%s: gathering the outputs on process 0", f->name);
  return wait_all(c, what);
}

static const rt_comm_vtable mpi_vtable = {
    .destroy = mpi_destroy,
    .arrive = mpi_arrive,
    .complete = mpi_complete,
    .collect_outputs = mpi_collect,
};

kdc_status rt_comm_mpi_create(kdc_rt_plan *p, double timeout_s, rt_comm **out) {
  int init = 0, size = 0, rank = -1;
  MPI_Initialized(&init);
  if (!init)
    return KDC_ERR(KDC_INTERNAL, "%s: %d processes but MPI is not initialised "
                   "(kdc_rt_procs_init)", p->path, p->n_procs);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (size != p->n_procs || rank != p->proc_id)
    return KDC_ERR(KDC_INVALID_INPUT, "%s: process %d of %d, but MPI says rank %d of %d",
                   p->path, p->proc_id, p->n_procs, rank, size);
  mpi_comm *c = kdc_xcalloc(1, sizeof *c);
  c->base.vt = &mpi_vtable;
  c->p = p;
  c->timeout_s = timeout_s;
  c->per_proc = p->nd / p->n_procs;
  c->src = kdc_xcalloc((size_t)p->nd, sizeof *c->src);
  c->dst = kdc_xcalloc((size_t)p->nd, sizeof *c->dst);
  c->stage = kdc_xcalloc((size_t)p->nd, sizeof *c->stage);
  c->need = kdc_xcalloc((size_t)p->nd, sizeof *c->need);
  c->sent = kdc_xcalloc((size_t)p->n_procs, sizeof *c->sent);
  for (uint32_t fi = 0; fi < p->prog.n_funcs; fi++)  /* staging: the largest operand */
    for (uint32_t s = 0; s < p->prog.funcs[fi].n_steps; s++)
      if (p->prog.funcs[fi].steps[s].kind == KDC_STEP_COLLECTIVE &&
          p->prog.funcs[fi].steps[s].coll.src.bytes > c->stage_bytes)
        c->stage_bytes = p->prog.funcs[fi].steps[s].coll.src.bytes;
  /* Test hook (tests/mpi/mpi_faults.sh): "kill:R" or "stall:R" makes rank R
   * die with SIGKILL or stop forever at its first collective. */
  const char *f = getenv("KDC_TEST_MPI_FAULT");
  if (f && (!strncmp(f, "kill:", 5) || !strncmp(f, "stall:", 6)) &&
      atoi(strchr(f, ':') + 1) == rank)
    c->fault = f[0] == 'k' ? 1 : 2;
  MPI_Comm_dup(MPI_COMM_WORLD, &c->world);
  *out = &c->base;
  return NULL;
}
