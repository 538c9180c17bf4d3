/*
 * runtime/place.h: where this process stands in a job, and where each value
 * came from (docs/processes.md, "Placement"), like jax.distributed.initialize
 * with no arguments.
 *
 * Every value comes from the first source that gives it:
 *   process count / id:  --num-processes / --process-id, KDC_NUM_PROCESSES /
 *                        KDC_PROCESS_ID, the MPI launcher (OMPI_COMM_WORLD_SIZE
 *                        / _RANK, PMI_SIZE / PMI_RANK), Slurm (SLURM_NTASKS /
 *                        SLURM_PROCID), else 1 / 0;
 *   coordinator:         --coordinator, KDC_COORDINATOR_ADDRESS, Slurm: the first
 *                        host of SLURM_STEP_NODELIST (else SLURM_JOB_NODELIST)
 *                        and the port KDC_COORDINATOR_PORT, else SLURM_JOB_ID %
 *                        4096 + 61440 (jax/_src/clusters/slurm_cluster.py);
 *   local rank:          OMPI_COMM_WORLD_LOCAL_RANK, MPI_LOCALRANKID,
 *                        SLURM_LOCALID, else 0;
 *   processes on this host (the default threads are cores / this):
 *                        OMPI_COMM_WORLD_LOCAL_SIZE, Slurm's
 *                        SLURM_STEP_TASKS_PER_NODE ("2(x3),1") entry for
 *                        SLURM_NODEID, else the process count;
 *   local device ids:    --local-device-ids, KDC_LOCAL_DEVICE_IDS, under Slurm
 *                        one device per process (the GPU SLURM_LOCALID, as JAX
 *                        does), else none given (the rule of docs/gpu.md).
 * Slurm counts as present, as in JAX, when SLURM_JOB_ID, SLURM_NTASKS,
 * SLURM_PROCID, SLURM_LOCALID and a node list are all set.
 */
#ifndef KDC_RUNTIME_PLACE_H
#define KDC_RUNTIME_PLACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "kdc/status.h"

enum { KDC_RT_MAX_LOCAL_DEVICES = 64 };

/* What the command line gave (NULL / -1: not given). */
typedef struct kdc_rt_place_flags {
  const char *coordinator;
  int n, id;
  const char *local_device_ids;   /* "0,1" */
} kdc_rt_place_flags;

typedef struct kdc_rt_place {
  int n, id;                      /* processes in the job, this one's id */
  char coordinator[300];          /* HOST:PORT, or "" (none: one process, or MPI) */
  int local_rank;                 /* among the job's processes on this host */
  int local_n;                    /* the job's processes on this host */
  int local_devices[KDC_RT_MAX_LOCAL_DEVICES]; /* GPU ordinals this process uses */
  int n_local_devices;            /* 0: none given (docs/gpu.md's rule) */
  bool local_devices_default;     /* Slurm's one device per process (not an explicit list) */
  const char *launcher;           /* "mpi", "slurm" or "none" */
  /* where each value came from: "--process-id", "KDC_PROCESS_ID",
   * "SLURM_PROCID", "default", ... */
  char n_from[64], id_from[64], coordinator_from[160], local_rank_from[64], devices_from[96];
  char local_n_from[96];
} kdc_rt_place;

/* Resolves every value (rules above).  Errors (KDC_INVALID_INPUT, naming
 * the flag or variable): a malformed number, device list or Slurm node
 * list, a coordinator port out of range. */
kdc_status kdc_rt_place_resolve(const kdc_rt_place_flags *flags, kdc_rt_place *out);

/* Slurm's compressed host list ("node[01-04,07],gpu2", "rack[1-2]n[1-3]"):
 * the first |max| hosts in order into |hosts| (each malloc'd; the caller
 * frees them), their count in *|n|, the total in *|total| (may be larger
 * than |max|).  Numbers keep the zero padding of the range's lower bound
 * ("[08-10]" gives 08 09 10).  |what| names the variable in errors. */
kdc_status kdc_rt_slurm_hostlist(const char *what, const char *list, char **hosts, size_t max,
                                 size_t *n, size_t *total);

/* The process's rank among the job's processes on this host (the local
 * rank rule above), and in *|from| (may be NULL) the variable or "default". */
int kdc_rt_local_rank(const char **from);

/* Slurm's tasks-per-node list ("2(x3),1": 2 tasks on each of 3 nodes, then
 * 1): the count of node |node|, or -1 when the list is malformed or too
 * short. */
int kdc_rt_slurm_tasks_on_node(const char *list, int node);

/* "0,1,3" -> ordinals (distinct, >= 0, at most KDC_RT_MAX_LOCAL_DEVICES). */
kdc_status kdc_rt_parse_device_ids(const char *what, const char *s, int *ids, int *n);

/* The place as text lines ("  process id    0   (from SLURM_PROCID)"), or
 * as the members of a JSON object (no braces). */
void kdc_rt_place_print(const kdc_rt_place *p, FILE *out);
void kdc_rt_place_print_json(const kdc_rt_place *p, FILE *out);

#endif
