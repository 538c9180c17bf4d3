/*
 * tools/run_place.c: the process-placement and target flags of `kdc run`
 * (docs/processes.md, docs/gpu.md), kept out of cmd_run.c.
 *
 *   --coordinator HOST:PORT  --num-processes N  --process-id I
 * or KDC_COORDINATOR_ADDRESS / KDC_NUM_PROCESSES / KDC_PROCESS_ID, or the
 * MPI launcher's own variables under mpirun, or Slurm's under srun
 * (runtime/place.h); --local-device-ids 0,1 (KDC_LOCAL_DEVICE_IDS) picks
 * the GPUs of a CUDA plan.  With several processes each
 * runs its share of the mesh's devices, collectives go through MPI (under
 * mpirun) or TCP (a rendezvous at the coordinator), only process 0 writes
 * outputs, and a failure ends the whole job.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/io.h"
#include "runtime/place.h"
#include "runtime/procs.h"
#include "tools/run_place.h"

bool run_place_flag(cli_args *a, run_place *pl, kdc_status *st) {
  const char *v;
  int64_t x;
  if (cli_flag_value(a, "--coordinator", &pl->coordinator, st) ||
      cli_flag_value(a, "--local-device-ids", &pl->local_device_ids, st))
    return true;
  if (cli_flag_value(a, "--num-processes", &v, st)) {
    if (!*st) *st = cli_parse_i64("--num-processes", v, 1, 1 << 20, &x);
    if (!*st) pl->n = (int)x;
    return true;
  }
  if (cli_flag_value(a, "--process-id", &v, st)) {
    if (!*st) *st = cli_parse_i64("--process-id", v, 0, 1 << 20, &x);
    if (!*st) pl->id = (int)x;
    return true;
  }
  return false;
}

void run_place_init_opts(run_place *pl) {
  memset(pl, 0, sizeof *pl);
  pl->n = -1;
  pl->id = -1;
}

/* The job is process-wide (MPI is): resolved once by run_place_start. */
static kdc_rt_procs procs = {1, 0, 1, false, NULL};
static kdc_rt_place place;
static double timeout_s;

kdc_status run_place_start(const run_place *pl, const char *plan, kdc_rt_options *ro) {
  kdc_plan_file *pf = NULL;
  KDC_RETURN_IF_ERROR(kdc_plan_file_open(plan, &pf));
  const void *data;
  size_t size;
  bool cuda = kdc_plan_file_find(pf, KDC_PLAN_SECTION_CUDA, &data, &size);
  uint64_t key = kdc_plan_file_checksum(pf);  /* every process must run this plan */
  kdc_plan_file_close(pf);
  if (cuda) KDC_RETURN_IF_ERROR(kdc_rt_cuda_available(plan));
  kdc_rt_place_flags fl = {pl->coordinator, pl->n, pl->id, pl->local_device_ids};
  KDC_RETURN_IF_ERROR(kdc_rt_place_resolve(&fl, &place));
  if (place.n_local_devices && !place.local_devices_default) {  /* explicit GPUs */
    ro->local_device_ids = place.local_devices;
    ro->n_local_device_ids = place.n_local_devices;
    ro->local_device_ids_from = place.devices_from;
  }
  kdc_rt_procs pr;
  timeout_s = ro->collective_timeout_s;
  kdc_status st = kdc_rt_procs_init_job(*place.coordinator ? place.coordinator : NULL, place.n,
                                        place.id, key, timeout_s, &pr);
  procs = pr;
  if (st) return st;
  ro->n_processes = pr.n;
  ro->process_id = pr.id;
  ro->net = pr.net;
  if (pr.n > 1 && ro->n_threads <= 0) {  /* share the cores of this host */
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int t = cores > 0 ? (int)(cores / (place.local_n > 0 ? place.local_n : 1)) : 1;
    ro->n_threads = t > 0 ? t : 1;
  }
  return NULL;
}

bool run_place_writes(void) { return procs.id == 0; }

void run_place_finish(int exit_code) { kdc_rt_procs_finish(&procs, exit_code, timeout_s); }
