/*
 * runtime/procs.h: where this process stands in a multi-process job
 * (docs/processes.md), like jax.distributed.initialize.
 *
 * The place comes from, in order: the flags (`kdc run --coordinator
 * HOST:PORT --num-processes N --process-id I`), the environment
 * (KDC_COORDINATOR_ADDRESS, KDC_NUM_PROCESSES, KDC_PROCESS_ID), and the MPI
 * launcher (OMPI_COMM_WORLD_SIZE / OMPI_COMM_WORLD_RANK under Open MPI's
 * mpirun, PMI_SIZE / PMI_RANK under others; then MPI_Comm_size/rank).
 * With more than one process the job needs a transport (comm.h rt_net):
 * MPI when an MPI launcher started the processes (the flags are then
 * checked against it), else TCP through a rendezvous at the coordinator
 * address (comm_tcp.c), which every process but 0 connects to.
 */
#ifndef KDC_RUNTIME_PROCS_H
#define KDC_RUNTIME_PROCS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kdc/status.h"

struct rt_net;

typedef struct kdc_rt_procs {
  int n, id;       /* processes in the job and this one's id (0-based) */
  int local_n;     /* processes of the job on this host (threads default) */
  bool mpi;        /* MPI was initialised here */
  struct rt_net *net; /* n > 1: the job's transport (kdc_rt_options.net) */
} kdc_rt_procs;

/* |coordinator| may be NULL, |n| and |id| -1 when not given.  With more
 * than one process: initialises MPI under an MPI launcher, else meets the
 * other processes at the coordinator over TCP; |key| (the plan's checksum,
 * or 0) must be the same in every process, and the rendezvous waits at
 * most |timeout_s| for the others.  Errors: inconsistent settings
 * (KDC_INVALID_INPUT, naming the process), several processes with neither
 * an MPI launcher nor a coordinator (KDC_INVALID_INPUT), a process that
 * does not arrive (KDC_UNAVAILABLE, naming it). */
kdc_status kdc_rt_procs_init_job(const char *coordinator, int n, int id, uint64_t key,
                                 double timeout_s, kdc_rt_procs *out);
/* kdc_rt_procs_init_job with key 0 and a 60 s rendezvous. */
kdc_status kdc_rt_procs_init(const char *coordinator, int n, int id, kdc_rt_procs *out);
/* Process 0's |bytes| bytes of |buf| land in |buf| on every process (same
 * |bytes| everywhere), within |timeout_s|; a no-op for one process.  This
 * is how process 0 hands out an opaque blob every process needs before any
 * plan runs -- the NCCL unique id (ncclGetUniqueId on process 0, then
 * ncclCommInitRank everywhere): docs/processes.md, "Broadcast". */
kdc_status kdc_rt_procs_broadcast(const kdc_rt_procs *pr, void *buf, size_t bytes,
                                  double timeout_s);
/* Ends the job for this process.  |exit_code| != 0: tells the peers (TCP:
 * an ABORT naming the process it blames) and _exit(exit_code) at once (the
 * peers fail on it; an MPI launcher ends the job).  0: a barrier bounded
 * by |timeout_s| (else a message and _exit(3)), then MPI_Finalize or the
 * sockets closed.  No-op for a single process. */
void kdc_rt_procs_finish(kdc_rt_procs *pr, int exit_code, double timeout_s);

#endif
