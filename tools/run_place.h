/* tools/run_place.h: process placement and target checks of `kdc run`
 * (run_place.c). */
#ifndef KDC_TOOLS_RUN_PLACE_H
#define KDC_TOOLS_RUN_PLACE_H

#include "runtime/cuda/cuda_rt.h"
#include "runtime/runtime.h"
#include "tools/cli.h"

typedef struct run_place {
  const char *coordinator;
  int n, id;      /* -1: not given */
  const char *local_device_ids;  /* --local-device-ids "0,1", or NULL */
} run_place;

void run_place_init_opts(run_place *pl);
/* --coordinator, --num-processes, --process-id, --local-device-ids. */
bool run_place_flag(cli_args *a, run_place *pl, kdc_status *st);
/* Refuses a CUDA plan this kdc cannot run, resolves the process's place
 * (runtime/place.h: flags, KDC_*, an MPI launcher, Slurm; MPI_Init or the
 * TCP rendezvous when several) and fills |ro|'s process fields and local
 * device ids. */
kdc_status run_place_start(const run_place *pl, const char *plan, kdc_rt_options *ro);
/* Several processes: MPI_Finalize after a bounded barrier, or _exit(exit_code)
 * when it is not 0 (kdc_rt_procs_finish). */
void run_place_finish(int exit_code);
/* Only process 0 writes outputs. */
bool run_place_writes(void);

#endif
