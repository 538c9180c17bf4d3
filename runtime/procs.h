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

/* What a job's process knows before it meets the others. */
typedef struct kdc_rt_job {
  const char *coordinator;  /* NULL: KDC_COORDINATOR_ADDRESS */
  int n, id;                /* -1: not given (environment, launcher) */
  uint64_t key;             /* the plan's checksum (the same in every process), or 0 */
  double timeout_s;         /* the rendezvous' bound (<= 0: 60 s) */
  const char *token_file;   /* --job-token-file, or NULL (docs/processes.md, "Job token") */
} kdc_rt_job;

/* With more than one process: initialises MPI under an MPI launcher, else
 * meets the other processes at the coordinator over TCP, authenticated by
 * the job token when there is one (|job|->token_file, else the file named
 * by KDC_JOB_TOKEN_FILE, else KDC_JOB_TOKEN; required when the coordinator
 * is not a loopback address).  Errors, all before any connection unless
 * said: inconsistent settings (KDC_INVALID_INPUT, naming the process),
 * several processes with neither an MPI launcher nor a
 * coordinator, a token file others may read (KDC_INVALID_INPUT naming the
 * file), a process that does not arrive (KDC_UNAVAILABLE, naming it). */
kdc_status kdc_rt_procs_init_job(const kdc_rt_job *job, kdc_rt_procs *out);
/* The syntax of a coordinator address ("HOST:PORT", "[V6]:PORT", a port
 * from 1 to 65535), checked before anything else about the job: a located
 * error naming --coordinator. */
kdc_status kdc_rt_procs_check_address(const char *coordinator);
/* kdc_rt_procs_init_job with key 0 and a 60 s rendezvous. */
kdc_status kdc_rt_procs_init(const char *coordinator, int n, int id, kdc_rt_procs *out);
/* Process 0's |bytes| bytes of |buf| land in |buf| on every process (same
 * |bytes| everywhere), within |timeout_s|; a no-op for one process.  This
 * is how process 0 hands out an opaque blob every process needs before any
 * plan runs -- the NCCL unique id (ncclGetUniqueId on process 0, then
 * ncclCommInitRank everywhere): docs/processes.md, "Broadcast". */
kdc_status kdc_rt_procs_broadcast(const kdc_rt_procs *pr, void *buf, size_t bytes,
                                  double timeout_s);
/* Ends the job for this process.  |exit_code| != 0 (|why|: the error):
 * tells the peers (TCP: an ABORT naming the process it blames, with that
 * process's exit status and error) and _exit at once with the culprit's
 * status (the peers fail on it; an MPI launcher ends the job).  0: the
 * outcome agreed with every peer (rt_net_agree, bounded by |timeout_s|;
 * else a message and the culprit's status, 3 when none), then
 * MPI_Finalize or the sockets closed.  No-op for a single process. */
void kdc_rt_procs_finish(kdc_rt_procs *pr, int exit_code, const char *why, double timeout_s);

#endif
