/*
 * runtime/comm_mpi.c: the MPI transport of the process backend (comm.h
 * rt_net, comm_p2p.c; docs/processes.md), for jobs started by mpirun.
 *
 * Messages are MPI_Isend / MPI_Irecv of MPI_BYTE on a duplicate of
 * MPI_COMM_WORLD (our tags never meet anyone else's), cut into pieces of
 * at most 1 GiB (MPI counts are int); MPI's non-overtaking rule matches
 * them in posting order.  wait() polls MPI_Testall -- busy for 2 ms (unless
 * this host runs more processes than it has CPUs), then with 20 us naps --
 * until every request completed or the timeout passed: MPI's blocking calls
 * have no timeout, and a rank that died must not leave us waiting.  A
 * request still pending at the deadline names its peer (and device).  No
 * collective of MPI's own is used: MPI does not specify MPI_Allreduce's
 * summation order, and kdc's must be the virtual mesh's.
 */
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include <mpi.h>

#include "runtime/comm.h"

typedef struct mpi_net {
  rt_net base;
  MPI_Comm world;
  MPI_Request *req;
  int64_t *req_dev;  /* per request: the device it carries (receives), or -1 */
  int *req_peer;
  bool *req_send;
  double spin_s;  /* SPIN_S, or 0 with more processes on this host than CPUs */
  int n_req;
  size_t cap;
} mpi_net;

enum { CHUNK = 1 << 30 };  /* bytes per message */
/* wait(): poll without pause for SPIN_S (unless oversubscribed), then with
 * 20 us naps (docs/processes.md). */
#define SPIN_S 2e-3

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void mpi_destroy(rt_net *base) {
  mpi_net *m = (mpi_net *)base;
  int fin = 0;
  MPI_Finalized(&fin);
  if (!fin) MPI_Comm_free(&m->world);
  free(m->req), free(m->req_dev), free(m->req_peer), free(m->req_send);
  free(m);
}

static void mpi_post(rt_net *base, bool send, void *buf, uint64_t bytes, int peer, int tag,
                     int64_t dev) {
  mpi_net *m = (mpi_net *)base;
  for (uint64_t o = 0; o < bytes || o == 0; o += CHUNK) {
    int n = (int)(bytes - o < CHUNK ? bytes - o : CHUNK);
    if ((size_t)m->n_req + 1 > m->cap) {
      KDC_GROW(m->req, m->cap, (size_t)m->n_req + 1);
      m->req_dev = kdc_xrealloc(m->req_dev, m->cap * sizeof *m->req_dev);
      m->req_peer = kdc_xrealloc(m->req_peer, m->cap * sizeof *m->req_peer);
      m->req_send = kdc_xrealloc(m->req_send, m->cap * sizeof *m->req_send);
    }
    m->req_dev[m->n_req] = send ? -1 : dev;
    m->req_peer[m->n_req] = peer;
    m->req_send[m->n_req] = send;
    if (send) MPI_Isend((char *)buf + o, n, MPI_BYTE, peer, tag, m->world, &m->req[m->n_req]);
    else MPI_Irecv((char *)buf + o, n, MPI_BYTE, peer, tag, m->world, &m->req[m->n_req]);
    m->n_req++;
    if (bytes == 0) break;
  }
}

static bool mpi_wait(rt_net *base, double timeout_s, rt_net_miss *out) {
  mpi_net *m = (mpi_net *)base;
  double start = now_s(), deadline = start + timeout_s, t = start;
  int done = 0;
  struct timespec nap = {0, 20000};
  for (;;) {
    MPI_Testall(m->n_req, m->req, &done, MPI_STATUSES_IGNORE);
    if (done) break;
    if (t > deadline) {
      int first = -1;  /* a pending receive names the device; else a send */
      for (int i = 0; i < m->n_req; i++) {
        int one = 1;
        if (m->req[i] != MPI_REQUEST_NULL) MPI_Test(&m->req[i], &one, MPI_STATUS_IGNORE);
        if (one) continue;
        if (first < 0 || (m->req_send[first] && !m->req_send[i])) first = i;
      }
      if (first < 0) continue;  /* everything completed meanwhile */
      *out = (rt_net_miss){RT_NET_TIMEOUT, m->req_peer[first], m->req_dev[first],
                           m->req_send[first], -1};
      return false;
    }
    /* Spin first: a small collective completes within microseconds of
     * both sides posting, far below a nap's real length (timer slack and
     * rescheduling: ~0.1-0.2 ms), which dominated 64-256 KiB all_reduces.
     * Open MPI's blocking calls spin too.  Not when oversubscribed: a
     * spinning process would take the CPU of the peer it waits for (8
     * processes on 2 cores ran test_mpi_collectives_np8 1.6x slower, even
     * with sched_yield).  After SPIN_S (a late peer: it is still
     * computing), nap. */
    t = now_s();
    if (t - start >= m->spin_s) nanosleep(&nap, NULL);
  }
  m->n_req = 0;
  return true;
}

static const rt_net_vtable mpi_vtable = {
    .destroy = mpi_destroy,
    .post = mpi_post,
    .wait = mpi_wait,
};

kdc_status rt_net_mpi_create(rt_net **out) {
  int init = 0, size = 0, rank = -1;
  MPI_Initialized(&init);
  if (!init) return KDC_ERR(KDC_INTERNAL, "MPI is not initialised (kdc_rt_procs_init)");
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  mpi_net *m = kdc_xcalloc(1, sizeof *m);
  m->base = (rt_net){.vt = &mpi_vtable, .n = size, .id = rank, .rank_word = "MPI rank", .blame = -1};
  MPI_Comm_dup(MPI_COMM_WORLD, &m->world);
  MPI_Comm local;  /* the processes sharing this host */
  int n_local = 1;
  if (MPI_Comm_split_type(m->world, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &local) ==
      MPI_SUCCESS) {
    MPI_Comm_size(local, &n_local);
    MPI_Comm_free(&local);
  }
  /* the host's CPUs, not this process's affinity: mpirun binds each rank
   * to a core when they fit */
  m->spin_s = n_local > sysconf(_SC_NPROCESSORS_ONLN) ? 0 : SPIN_S;
  *out = &m->base;
  return NULL;
}
