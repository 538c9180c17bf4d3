/*
 * bench_collectives: in-process all_reduce on the `cpu` virtual devices.
 * Prints one JSON object: for 8 devices (mesh x=8, one group) and per-device
 * buffers of 1 to 64 MiB f32, the time of a plan whose only step is
 * all_reduce[x] (kdc_rt_plan_run_local: per-device buffers, no split or
 * gather), against memcpy of the same size measured in the same run.
 *   algbw  = S / t                 (NCCL's "algorithm bandwidth", S = bytes per device)
 *   busbw  = algbw * 2(n-1)/n      (NCCL's "bus bandwidth")
 *   memcpy = S / t_memcpy          (one thread, the same S)
 *   traffic_ratio = (2 n S / t) / (2 S / t_memcpy): bytes the all_reduce
 *          must read and write in shared memory (n operands in, n results
 *          out) per second, over memcpy's bytes read and written per second
 * An in-process all_reduce over n devices has to touch n times the bytes a
 * memcpy of S does, so algbw/memcpy is bounded by about (threads' memory
 * bandwidth / one thread's) / n; traffic_ratio is the efficiency figure.
 * Threads: all cores (KDC_BENCH_THREADS overrides).
 */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "bench_compile.h"
#include "bench_util.h"
#include "codegen/codegen.h"
#include "passes/passes.h"
#include "runtime/runtime.h"

enum { DEVICES = 8 };

static void die(kdc_status st) {
  if (!st) return;
  fprintf(stderr, "bench_collectives: %s\n", kdc_status_message(st));
  exit(1);
}

static kdc_rt_plan *plan_for(int64_t n, int threads) {
  kdc_rt_options ro = {.n_threads = threads};
  return bench_allreduce_plan("bench_collectives", DEVICES, n, &ro);
}

typedef struct ctx {
  kdc_rt_plan *p;
  const void *const *in[DEVICES];
  void *const *out[DEVICES];
  void *a, *b;
  size_t bytes;
} ctx;

static void run_allreduce(void *v) {
  ctx *c = v;
  die(kdc_rt_plan_run_local(c->p, 0, c->in, c->out));
}

static void run_memcpy(void *v) {
  ctx *c = v;
  memcpy(c->b, c->a, c->bytes);
  __asm__ __volatile__("" ::: "memory");
}

int main(void) {
  const char *env = getenv("KDC_BENCH_THREADS");
  int threads = env ? atoi(env) : (int)sysconf(_SC_NPROCESSORS_ONLN);
  printf("{\"bench\": \"collectives\", \"op\": \"all_reduce\", \"devices\": %d, \"threads\": %d, "
         "\"dtype\": \"f32\", \"results\": [", DEVICES, threads);
  int first = 1;
  for (size_t mib = 1; mib <= 64; mib *= 2) {
    size_t bytes = mib << 20;
    int64_t n = (int64_t)(bytes / 4);
    ctx c = {.p = plan_for(n, threads), .bytes = bytes};
    void *bufs[2 * DEVICES], *ptrs[2 * DEVICES];
    for (int d = 0; d < 2 * DEVICES; d++) {
      bufs[d] = aligned_alloc(64, bytes);
      memset(bufs[d], d, bytes);
      ptrs[d] = bufs[d];
    }
    for (int d = 0; d < DEVICES; d++) {
      c.in[d] = (const void *const *)&ptrs[d];
      c.out[d] = (void *const *)&ptrs[DEVICES + d];
    }
    c.a = aligned_alloc(64, bytes);
    c.b = aligned_alloc(64, bytes);
    memset(c.a, 1, bytes);
    memset(c.b, 2, bytes);
    int reps = mib <= 8 ? 15 : 7, inner = mib <= 4 ? 4 : 1;
    double t_mc = bench_median(run_memcpy, &c, reps, inner);
    double t_ar = bench_median(run_allreduce, &c, reps, inner);
    double t_mc2 = bench_median(run_memcpy, &c, reps, inner);
    if (t_mc2 < t_mc) t_mc = t_mc2;
    double algbw = (double)bytes / t_ar, mc = (double)bytes / t_mc;
    printf("%s\n  {\"bytes\": %zu, \"allreduce_ms\": %.3f, \"memcpy_ms\": %.3f, "
           "\"algbw_GBps\": %.2f, \"busbw_GBps\": %.2f, \"memcpy_GBps\": %.2f, "
           "\"algbw_over_memcpy\": %.3f, \"traffic_ratio\": %.3f}",
           first ? "" : ",", bytes, t_ar * 1e3, t_mc * 1e3, algbw / 1e9,
           algbw * 2 * (DEVICES - 1) / DEVICES / 1e9, mc / 1e9, algbw / mc,
           (2.0 * DEVICES * (double)bytes / t_ar) / (2.0 * (double)bytes / t_mc));
    first = 0;
    for (int d = 0; d < 2 * DEVICES; d++) free(bufs[d]);
    free(c.a);
    free(c.b);
    kdc_rt_plan_release(c.p);
  }
  printf("\n]}\n");
  return 0;
}
