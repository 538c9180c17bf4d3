/*
 * tools/run_place.c: the process-placement flags of `kdc run`
 * (docs/processes.md):
 *
 *   --coordinator HOST:PORT  --num-processes N  --process-id I
 *
 * or KDC_COORDINATOR_ADDRESS / KDC_NUM_PROCESSES / KDC_PROCESS_ID, or the
 * MPI launcher's own variables under mpirun, or Slurm's under srun
 * (runtime/place.h, through api/place.c); --local-device-ids 0,1
 * (KDC_LOCAL_DEVICE_IDS) picks the GPUs of a CUDA plan.
 * With several processes each runs its share of the mesh's devices,
 * collectives go through MPI (under mpirun) or TCP (a rendezvous at the
 * coordinator), only process 0 writes outputs, and a failure ends the
 * whole job (kdc_job_finish).
 */
#include "tools/run_place.h"

bool run_place_flag(cli_args *a, kdc_run_options *ro, kdc_status *st) {
  const char *v;
  int64_t x;
  if (cli_flag_value(a, "--coordinator", &ro->coordinator, st) ||
      cli_flag_value(a, "--local-device-ids", &ro->local_device_ids, st))
    return true;
  if (cli_flag_value(a, "--num-processes", &v, st)) {
    if (!*st) *st = cli_parse_i64("--num-processes", v, 1, 1 << 20, &x);
    if (!*st) ro->num_processes = (int)x;
    return true;
  }
  if (cli_flag_value(a, "--process-id", &v, st)) {
    if (!*st) *st = cli_parse_i64("--process-id", v, 0, 1 << 20, &x);
    if (!*st) ro->process_id = (int)x;
    return true;
  }
  return false;
}
