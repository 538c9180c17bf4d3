/*
 * runtime/procs.h: where this process stands in a multi-process job
 * (docs/processes.md), like jax.distributed.initialize.
 *
 * The place comes from, in order: the flags (`kdc run --coordinator
 * HOST:PORT --num-processes N --process-id I`), the environment
 * (KDC_COORDINATOR_ADDRESS, KDC_NUM_PROCESSES, KDC_PROCESS_ID), and the MPI
 * launcher (OMPI_COMM_WORLD_SIZE / OMPI_COMM_WORLD_RANK under Open MPI's
 * mpirun, PMI_SIZE / PMI_RANK under others; then MPI_Comm_size/rank).  With
 * more than one process the collectives go through MPI (comm_mpi.c); the
 * processes must have been started by mpirun (the rendezvous is MPI's own;
 * --coordinator is checked against it, not used to connect).
 */
#ifndef KDC_RUNTIME_PROCS_H
#define KDC_RUNTIME_PROCS_H

#include <stdbool.h>

#include "kdc/status.h"

typedef struct kdc_rt_procs {
  int n, id;       /* processes in the job and this one's id (0-based) */
  int local_n;     /* processes of the job on this host (threads default) */
  bool mpi;        /* MPI was initialised here */
} kdc_rt_procs;

/* |coordinator| may be NULL, |n| and |id| -1 when not given.  Initialises
 * MPI when the job has more than one process.  Errors: inconsistent
 * settings (KDC_INVALID_INPUT), several processes without an MPI launcher
 * or in a build without MPI (KDC_UNSUPPORTED). */
kdc_status kdc_rt_procs_init(const char *coordinator, int n, int id, kdc_rt_procs *out);
/* Ends the job for this process.  |exit_code| != 0: _exit(exit_code) at
 * once (the peers time out on it; the launcher ends the job).  0: a barrier
 * bounded by |timeout_s| (else a message and _exit(3)), then
 * MPI_Finalize.  No-op for a single process. */
void kdc_rt_procs_finish(const kdc_rt_procs *pr, int exit_code, double timeout_s);

#endif
