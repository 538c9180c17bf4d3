/*
 * bench_mpi: all_reduce between local processes through kdc's process
 * backend (runtime/comm_p2p.c) -- under `mpirun -np 2` (MPI transport), or
 * started without mpirun and placed by KDC_COORDINATOR_ADDRESS /
 * KDC_NUM_PROCESSES / KDC_PROCESS_ID (TCP transport); bench/bench_mpi.sh
 * runs both, loopback only.  Process 0 prints one JSON object: for
 * per-device buffers of 64 KiB to 64 MiB f32, the time of a plan whose only
 * step is all_reduce[x] on the mesh x=P (one device per process,
 * kdc_rt_plan_run_local), and under MPI against MPI_Allreduce(MPI_SUM) of
 * the same buffer measured in the same run (Open MPI's own algorithm, whose
 * summation order MPI does not specify; kdc sums in device-id order, so its
 * results are bitwise those of the virtual mesh).  Buffers of 2 MiB and
 * more take kdc's reduce-scatter + all-gather path ("kdc_ms"); every size
 * is also timed on the exchange path every size took before it existed
 * ("kdc_exchange_ms", rt_comm_p2p_test_large_bytes: the same bits).
 *   algbw = S / t,  busbw = algbw * 2(n-1)/n  (NCCL's definitions)
 */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <mpi.h>

#include "bench_compile.h"
#include "bench_util.h"
#include "codegen/codegen.h"
#include "passes/passes.h"
#include "runtime/comm.h"
#include "runtime/procs.h"
#include "runtime/runtime.h"

static kdc_rt_procs procs;

static void die(kdc_status st) {
  if (!st) return;
  fprintf(stderr, "bench_mpi: %s\n", kdc_status_message(st));
  kdc_rt_procs_finish(&procs, 1, NULL, 10);
  exit(1);
}

static kdc_rt_plan *plan_for(int64_t n) {
  kdc_rt_options ro = {.n_threads = 1, .n_processes = procs.n, .process_id = procs.id,
                       .net = procs.net};
  return bench_allreduce_plan("bench_mpi", procs.n, n, &ro);
}

typedef struct ctx {
  kdc_rt_plan *p;
  const void *const *in[64];
  void *const *out[64];
  void *a, *b;
  int64_t n;
} ctx;

static void run_kdc(void *v) {
  ctx *c = v;
  die(kdc_rt_plan_run_local(c->p, 0, c->in, c->out));
}

static void run_mpi(void *v) {
  ctx *c = v;
  MPI_Allreduce(c->a, c->b, (int)c->n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
}

int main(void) {
  die(kdc_rt_procs_init(NULL, -1, -1, &procs));
  if (procs.n < 2 || procs.n > 64)
    die(KDC_ERR(KDC_INVALID_INPUT, "run as 2 processes: under mpirun -np 2, or with KDC_*"));
  if (procs.id == 0)
    printf("{\"bench\": \"procs_all_reduce\", \"processes\": %d, \"transport\": \"%s\", "
           "\"dtype\": \"f32\", \"results\": [", procs.n,
           procs.mpi ? "mpi (btl self,vader: shared memory, one host)" : "tcp (127.0.0.1)");
  for (size_t kib = 64; kib <= 64 << 10; kib *= 4) {
    size_t bytes = kib << 10;
    ctx c = {.p = plan_for((int64_t)(bytes / 4)), .n = (int64_t)(bytes / 4)};
    c.a = aligned_alloc(64, bytes);
    c.b = aligned_alloc(64, bytes);
    memset(c.a, 0, bytes);
    void *pa = c.a, *pb = c.b;
    for (int d = 0; d < procs.n; d++) {  /* only this process's device is used */
      c.in[d] = (const void *const *)&pa;
      c.out[d] = (void *const *)&pb;
    }
    int reps = kib <= 4 << 10 ? 11 : 5;
    die(rt_net_barrier(procs.net, 60));
    double t_kdc = bench_median(run_kdc, &c, reps, 1);
    rt_comm_p2p_test_large_bytes(c.p->comm, UINT64_MAX);  /* the exchange path, as before */
    die(rt_net_barrier(procs.net, 60));
    double t_ex = bench_median(run_kdc, &c, reps, 1);
    die(rt_net_barrier(procs.net, 60));
    double t_mpi = procs.mpi ? bench_median(run_mpi, &c, reps, 1) : 0;
    if (procs.id == 0) {
      double bw = (double)bytes / t_kdc, bwm = (double)bytes / t_mpi;
      printf("%s\n  {\"bytes\": %zu, \"kdc_path\": \"%s\", \"kdc_ms\": %.3f, "
             "\"kdc_algbw_GBps\": %.2f, \"kdc_busbw_GBps\": %.2f, \"kdc_exchange_ms\": %.3f",
             kib == 64 ? "" : ",", bytes, bytes >= 2 << 20 ? "reduce_scatter+all_gather"
             : "exchange", t_kdc * 1e3, bw / 1e9, bw * 2 * (procs.n - 1) / procs.n / 1e9,
             t_ex * 1e3);
      if (procs.mpi)
        printf(", \"mpi_allreduce_ms\": %.3f, \"mpi_algbw_GBps\": %.2f, "
               "\"kdc_over_mpi_time\": %.2f", t_mpi * 1e3, bwm / 1e9, t_kdc / t_mpi);
      printf("}");
    }
    free(c.a);
    free(c.b);
    kdc_rt_plan_release(c.p);
  }
  if (procs.id == 0) printf("\n], \"training_vs_ddp\": \"bench/bench_procs.sh\"}\n");
  kdc_rt_procs_finish(&procs, 0, NULL, 60);
  return 0;
}
