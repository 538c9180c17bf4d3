/*
 * api/place.c: a process's place in a multi-process job (docs/
 * processes.md), resolved at the first plan load of the process
 * (runtime/place.h): the coordinator / process count / id / local device
 * ids of kdc_run_options, else the environment (KDC_*, an MPI launcher,
 * Slurm), else one process.  The job is process-wide (MPI
 * is): every later load shares it.  Also the target check: a CUDA plan on a
 * machine that cannot run it is refused by name (the driver's cuInit,
 * while the libraries the plan's steps need load on a second thread).
 */
#include <string.h>
#include <unistd.h>

#include "api/api.h"
#include "common/io.h"
#include "common/trace.h"
#include "kdc/arena.h"
#include "runtime/program.h"
#include "runtime/cuda/cuda_rt.h"
#include "runtime/place.h"
#include "runtime/procs.h"

static kdc_rt_procs procs = {1, 0, 1, false, NULL};
static kdc_rt_place place;
static bool placed;
static double timeout_s;

void kdc_api_rt_options(const kdc_run_options *o, kdc_rt_options *ro) {
  memset(ro, 0, sizeof *ro);
  if (!o) return;
  ro->n_threads = o->threads;
  ro->collective_timeout_s = o->collective_timeout_s;
  ro->cache_dir = o->cache_dir;
  ro->describe_only = o->describe_only;
  ro->only_func = o->predict_only ? "predict" : NULL;
  if (o->cpu_only || o->describe_only) ro->target = KDC_RT_TARGET_CPU;
}

static kdc_status place_plan(const kdc_run_options *o, const char *plan, kdc_plan_file *pf,
                             kdc_rt_options *ro) {
  const void *data;
  size_t size;
  bool cuda = kdc_plan_file_find(pf, KDC_PLAN_SECTION_CUDA, &data, &size);
  uint64_t key = kdc_plan_file_checksum(pf);  /* every process must run this plan */
  /* the mesh's device count: a process count that cannot share it is
   * refused before anyone waits at the rendezvous */
  kdc_reader r;
  kdc_program prog;
  memset(&prog, 0, sizeof prog);
  kdc_arena *arena = kdc_arena_create();
  kdc_status st = kdc_plan_file_reader(pf, KDC_PLAN_SECTION_PROGRAM, &r);
  if (!st) {
    r.section = "program";
    st = kdc_prog_decode_mesh(&r, arena, &prog);
  }
  int64_t n_devices = prog.mesh.n_devices;
  bool gpu = cuda && ro->target != KDC_RT_TARGET_CPU && !ro->describe_only;
  unsigned libs = 0;
  if (!st && gpu) {  /* which of cuBLAS / NCCL the steps need (a bad plan: the load says why) */
    kdc_reader w;
    const void *wd;
    size_t ws;
    if (kdc_plan_file_find(pf, KDC_PLAN_SECTION_WEIGHTS, &wd, &ws)) {
      kdc_reader_init(&w, wd, ws, plan, "weights");
      kdc_status_free(kdc_prog_decode_weights(&w, arena, &prog));
    }
    kdc_status e = kdc_prog_decode(&r, arena, &prog);
    libs = e ? RT_CUDA_LIB_BLAS : kdc_rt_cuda_plan_libs(&prog);
    kdc_status_free(e);
  }
  kdc_arena_destroy(arena);
  if (ro->describe_only || st) return st;
  kdc_trace("plan checked for placement (mapped, checksum, program decoded%s)",
            gpu ? "; a CUDA plan" : "");
  if (gpu) KDC_RETURN_IF_ERROR(kdc_rt_cuda_available(plan, libs));
  if (!placed) {
    kdc_rt_place_flags fl = {o ? o->coordinator : NULL, o ? o->num_processes : -1,
                             o ? o->process_id : -1, o ? o->local_device_ids : NULL};
    KDC_RETURN_IF_ERROR(kdc_rt_place_resolve(&fl, &place));
    /* the address's syntax first: a flag error names its flag */
    if (place.n > 1 && place.coordinator[0])
      KDC_RETURN_IF_ERROR(kdc_rt_procs_check_address(place.coordinator));
    if (n_devices > 0 && place.n > 1 && n_devices % place.n)
      return KDC_ERR(KDC_INVALID_INPUT, "%s: %d processes (from %s) cannot share the plan's "
                     "%lld devices evenly: the process count must divide the device count", plan,
                     place.n, place.n_from, (long long)n_devices);
    kdc_rt_procs pr;
    timeout_s = ro->collective_timeout_s;
    kdc_rt_job job = {*place.coordinator ? place.coordinator : NULL, place.n, place.id, key,
                      timeout_s, o ? o->job_token_file : NULL};
    st = kdc_rt_procs_init_job(&job, &pr);
    procs = pr;
    if (st) return st;
    placed = true;
  }
  if (place.n_local_devices && !place.local_devices_default) {  /* explicit GPUs */
    ro->local_device_ids = place.local_devices;
    ro->n_local_device_ids = place.n_local_devices;
    ro->local_device_ids_from = place.devices_from;
  }
  ro->n_processes = procs.n;
  ro->process_id = procs.id;
  ro->net = procs.net;
  if (procs.n > 1 && ro->n_threads <= 0) {  /* share the cores of this host */
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int t = cores > 0 ? (int)(cores / (place.local_n > 0 ? place.local_n : 1)) : 1;
    ro->n_threads = t > 0 ? t : 1;
  }
  return NULL;
}

void kdc_job_finish(int exit_code) { kdc_rt_procs_finish(&procs, exit_code, NULL, timeout_s); }

void kdc_job_fail(int exit_code, const char *why) {
  kdc_rt_procs_finish(&procs, exit_code, why, timeout_s);
}

kdc_status kdc_api_place(const kdc_run_options *o, const char *plan, kdc_rt_options *ro) {
  kdc_plan_file *pf = NULL;
  KDC_RETURN_IF_ERROR(kdc_plan_file_open(plan, &pf));
  kdc_status st = place_plan(o, plan, pf, ro);
  if (st) kdc_plan_file_close(pf);
  else ro->file = pf;  /* the load takes it over: the file is mapped and hashed once */
  return st;
}
