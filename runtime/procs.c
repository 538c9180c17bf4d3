/*
 * runtime/procs.c: process placement (procs.h, docs/processes.md).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#ifdef KDC_HAVE_MPI
#include <mpi.h>
#endif

#include "runtime/comm.h"
#include "runtime/procs.h"

#ifdef KDC_HAVE_MPI
static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}
#endif

/* An integer environment variable, or |dflt|. */
static kdc_status env_int(const char *name, int dflt, int *out) {
  const char *v = getenv(name);
  *out = dflt;
  if (!v || !*v) return NULL;
  char *end;
  long x = strtol(v, &end, 10);
  if (*end || x < 0 || x > 1 << 20)
    return KDC_ERR(KDC_INVALID_INPUT, "%s=\"%s\": expected a non-negative integer", name, v);
  *out = (int)x;
  return NULL;
}

kdc_status kdc_rt_procs_init(const char *coordinator, int n, int id, kdc_rt_procs *out) {
  memset(out, 0, sizeof *out);
  int env_n, env_id, mpi_n, mpi_id, pmi_n, pmi_id, local_n;
  if (!coordinator || !*coordinator) coordinator = getenv("KDC_COORDINATOR_ADDRESS");
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
  out->local_n = local_n > 0 ? local_n : launcher ? mpi_n : 1;
  if (n == 1) return NULL;
  if (!launcher)
    return KDC_ERR(KDC_UNSUPPORTED, "%d processes (process %d%s%s) but no MPI launcher: start "
                   "them with `mpirun -np %d kdc run ...`; a rendezvous through --coordinator "
                   "alone is not supported yet (docs/processes.md)", n, id,
                   coordinator ? ", coordinator " : "", coordinator ? coordinator : "", n);
#ifdef KDC_HAVE_MPI
  int provided = 0, size = 0, rank = 0;
  MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  out->mpi = true;
  if (size != n || rank != id)
    return KDC_ERR(KDC_INVALID_INPUT, "process %d of %d, but MPI_Comm_rank/size say %d of %d", id,
                   n, rank, size);
  return NULL;
#else
  return KDC_ERR(KDC_UNSUPPORTED, "%d processes: this kdc was built without MPI (install "
                 "libopenmpi-dev and rebuild)", n);
#endif
}

void kdc_rt_procs_finish(const kdc_rt_procs *pr, int exit_code, double timeout_s) {
#ifdef KDC_HAVE_MPI
  if (!pr->mpi) return;
  fflush(stdout);
  fflush(stderr);
  /* A failed process leaves at once: its peers time out on it (their next
   * collective, or the barrier below) and the launcher ends the job.
   * MPI_Abort is not used: Open MPI 4.1's mpirun sometimes hangs in it. */
  if (exit_code) _exit(exit_code);
  /* Everyone succeeded?  A bounded barrier, so a peer that died after our
   * last collective cannot leave us waiting in MPI_Finalize. */
  MPI_Request r;
  MPI_Ibarrier(MPI_COMM_WORLD, &r);
  double t0 = now_s();
  int done = 0;
  struct timespec nap = {0, 200000};
  while (MPI_Test(&r, &done, MPI_STATUS_IGNORE) == MPI_SUCCESS && !done) {
    if (now_s() - t0 > (timeout_s > 0 ? timeout_s : 60)) {
      fprintf(stderr, "kdc: error: process %d of %d: the other processes did not finish within "
              "%g s (one of them failed or died)\n", pr->id, pr->n, timeout_s > 0 ? timeout_s : 60);
      _exit(3);
    }
    nanosleep(&nap, NULL);
  }
  MPI_Finalize();
#else
  (void)pr;
  (void)exit_code;
  (void)timeout_s;
#endif
}

#ifndef KDC_HAVE_MPI
kdc_status rt_comm_mpi_create(kdc_rt_plan *p, double timeout_s, rt_comm **out) {
  *out = NULL;
  return KDC_ERR(KDC_UNSUPPORTED, "%s: %d processes: this kdc was built without MPI", p->path,
                 p->n_procs);
}
#endif
