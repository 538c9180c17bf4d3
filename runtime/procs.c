/*
 * runtime/procs.c: process placement (procs.h, docs/processes.md).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef KDC_HAVE_MPI
#include <mpi.h>
#endif

#include "runtime/comm.h"
#include "runtime/procs.h"

/* An integer environment variable, or |dflt|. */
static kdc_status env_int(const char *name, int dflt, int *out) {
  const char *v = getenv(name);
  *out = dflt;
  if (!v || !*v) return NULL;
  char *end;
  long x = strtol(v, &end, 10);
  if (*v < '0' || *v > '9' || *end || x < 0 || x > 1 << 20)  /* no spaces or signs */
    return KDC_ERR(KDC_INVALID_INPUT, "%s=\"%s\": expected a non-negative integer", name, v);
  *out = (int)x;
  return NULL;
}

kdc_status kdc_rt_procs_init_job(const char *coordinator, int n, int id, uint64_t key,
                                 double timeout_s, kdc_rt_procs *out) {
  memset(out, 0, sizeof *out);
  int env_n, env_id, mpi_n, mpi_id, pmi_n, pmi_id, local_n;
  if (!coordinator || !*coordinator) coordinator = getenv("KDC_COORDINATOR_ADDRESS");
  if (coordinator && !*coordinator) coordinator = NULL;
  KDC_RETURN_IF_ERROR(env_int("KDC_NUM_PROCESSES", -1, &env_n));
  KDC_RETURN_IF_ERROR(env_int("KDC_PROCESS_ID", -1, &env_id));
  KDC_RETURN_IF_ERROR(env_int("OMPI_COMM_WORLD_SIZE", -1, &mpi_n));
  KDC_RETURN_IF_ERROR(env_int("OMPI_COMM_WORLD_RANK", -1, &mpi_id));
  KDC_RETURN_IF_ERROR(env_int("PMI_SIZE", -1, &pmi_n));
  KDC_RETURN_IF_ERROR(env_int("PMI_RANK", -1, &pmi_id));
  KDC_RETURN_IF_ERROR(env_int("OMPI_COMM_WORLD_LOCAL_SIZE", -1, &local_n));
  if (mpi_n < 0) {
    mpi_n = pmi_n;
    mpi_id = pmi_id;
  }
  if (n < 0) n = env_n;
  if (id < 0) id = env_id;
  bool launcher = mpi_n > 0;
  if (n < 0) n = launcher ? mpi_n : 1;
  if (id < 0) id = launcher ? mpi_id : 0;
  if (n < 1 || id < 0 || id >= n)
    return KDC_ERR(KDC_INVALID_INPUT, "process id %d of %d processes: expected 0 <= id < n", id, n);
  if (launcher && (n != mpi_n || id != mpi_id))
    return KDC_ERR(KDC_INVALID_INPUT, "process %d of %d (flags or KDC_* environment), but the MPI "
                   "launcher says rank %d of %d", id, n, mpi_id, mpi_n);
  out->n = n;
  out->id = id;
  out->local_n = local_n > 0 ? local_n : n;
  if (n == 1) return NULL;
  if (!launcher) {  /* TCP: the rendezvous at the coordinator (comm_tcp.c) */
    if (!coordinator)
      return KDC_ERR(KDC_INVALID_INPUT, "%d processes (process %d) but no coordinator: give "
                     "--coordinator HOST:PORT (or KDC_COORDINATOR_ADDRESS), process 0 listens "
                     "there; or start them with `mpirun -np %d kdc run ...`", n, id, n);
    return rt_net_tcp_connect(coordinator, n, id, key, timeout_s > 0 ? timeout_s : 60,
                              &out->net);
  }
#ifdef KDC_HAVE_MPI
  int provided = 0, size = 0, rank = 0;
  MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  out->mpi = true;
  if (size != n || rank != id)
    return KDC_ERR(KDC_INVALID_INPUT, "process %d of %d, but MPI_Comm_rank/size say %d of %d", id,
                   n, rank, size);
  return rt_net_mpi_create(&out->net);
#else
  return KDC_ERR(KDC_UNSUPPORTED, "%d processes under an MPI launcher: this kdc was built "
                 "without MPI (install libopenmpi-dev and rebuild, or start the processes "
                 "without mpirun, with --coordinator)", n);
#endif
}

kdc_status kdc_rt_procs_init(const char *coordinator, int n, int id, kdc_rt_procs *out) {
  return kdc_rt_procs_init_job(coordinator, n, id, 0, 60, out);
}

kdc_status kdc_rt_procs_broadcast(const kdc_rt_procs *pr, void *buf, size_t bytes,
                                  double timeout_s) {
  if (pr->n <= 1) return NULL;
  if (!pr->net) return KDC_ERR(KDC_INTERNAL, "broadcast: the job has no transport");
  return rt_net_broadcast(pr->net, buf, bytes, timeout_s > 0 ? timeout_s : 60);
}

void kdc_rt_procs_finish(kdc_rt_procs *pr, int exit_code, double timeout_s) {
  if (pr->n <= 1) return;
  fflush(stdout);
  fflush(stderr);
  rt_net *net = pr->net;
  /* A failed process leaves at once: its peers fail on it (an ABORT frame,
   * a closed connection or the timeout) and an MPI launcher ends the job.
   * MPI_Abort is not used: Open MPI 4.1's mpirun sometimes hangs in it. */
  if (exit_code) {
    if (net && net->vt->abort) net->vt->abort(net, net->blame >= 0 ? net->blame : pr->id);
    _exit(exit_code);
  }
  /* Everyone succeeded?  A bounded barrier, so a peer that died after our
   * last collective cannot leave us waiting (in MPI_Finalize).  It waits
   * twice the collective timeout (+1 s): a peer still blocked in a
   * collective on a missing process times out first and its ABORT, naming
   * the real culprit, reaches us before we would blame that peer. */
  double t = 2 * (timeout_s > 0 ? timeout_s : 60) + 1;
  kdc_status st = net ? rt_net_barrier(net, t) : NULL;
  if (st) {
    fprintf(stderr, "kdc: error: process %d of %d: %s\n", pr->id, pr->n, kdc_status_message(st));
    if (net->vt->abort) net->vt->abort(net, net->blame >= 0 ? net->blame : pr->id);
    _exit(3);
  }
  rt_net_destroy(net);
  pr->net = NULL;
#ifdef KDC_HAVE_MPI
  if (pr->mpi) MPI_Finalize();
#endif
}

#ifndef KDC_HAVE_MPI
kdc_status rt_net_mpi_create(rt_net **out) {
  *out = NULL;
  return KDC_ERR(KDC_UNSUPPORTED, "this kdc was built without MPI");
}
#endif
