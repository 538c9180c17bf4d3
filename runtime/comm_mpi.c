/*
 * runtime/comm_mpi.c: the MPI transport of the process backend (comm.h
 * rt_net, comm_p2p.c; docs/processes.md), for jobs started by mpirun.
 *
 * Messages are MPI_Isend / MPI_Irecv of MPI_BYTE on a duplicate of
 * MPI_COMM_WORLD (our tags never meet anyone else's), cut into pieces of
 * at most 1 GiB (MPI counts are int); MPI's non-overtaking rule matches
 * them in posting order.  wait() polls MPI_Testall with 20 us naps until
 * every request completed or the timeout passed: MPI's blocking calls have
 * no timeout, and a rank that died must not leave us waiting.  A request
 * still pending at the deadline names its peer (and device).  No
 * collective of MPI's own is used: MPI does not specify MPI_Allreduce's
 * summation order, and kdc's must be the virtual mesh's.
 */
#include <stdlib.h>
#include <time.h>

#include <mpi.h>

#include "runtime/comm.h"

typedef struct mpi_net {
  rt_net base;
  MPI_Comm world;
  MPI_Request *req;
  int64_t *req_dev;  /* per request: the device it carries (receives), or -1 */
  int *req_peer;
  bool *req_send;
  int n_req;
  size_t cap;
} mpi_net;

enum { CHUNK = 1 << 30 };  /* bytes per message */

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
  double deadline = now_s() + timeout_s;
  int done = 0;
  struct timespec nap = {0, 20000};
  for (;;) {
    MPI_Testall(m->n_req, m->req, &done, MPI_STATUSES_IGNORE);
    if (done) break;
    if (now_s() > deadline) {
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
    nanosleep(&nap, NULL);
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
  *out = &m->base;
  return NULL;
}
