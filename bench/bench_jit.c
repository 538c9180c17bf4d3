/*
 * bench/bench_jit.c: where a plan's load spends its time (issue 18's cold
 * start): the JIT's phases for one load without a cache, in this process.
 *
 * usage: bench_jit PLAN [--threads N]
 * Prints one JSON object: "load_s" (kdc_rt_plan_load_with, wall), the
 * JIT's wall time and, summed over its compile threads (thread CPU
 * seconds), "check_s" (parse + verify of the whole module, partitioning),
 * "parse_s" (each partition's parse), "opt_s" (MergeFunctions + the
 * pipelines), "codegen_s" (the backend), "link_s" (LLJIT and the objects),
 * and the counts of functions, partitions and hot partitions.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/runtime.h"

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: bench_jit PLAN [--threads N]\n");
    return 2;
  }
  kdc_rt_options ro = {.cache_dir = ""};
  for (int i = 2; i + 1 < argc; i += 2)
    if (strcmp(argv[i], "--threads") == 0) ro.n_threads = atoi(argv[i + 1]);
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  kdc_rt_plan *p;
  kdc_status st = kdc_rt_plan_load_with(argv[1], &ro, &p);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  if (st) {
    fprintf(stderr, "bench_jit: %s\n", kdc_status_message(st));
    return 1;
  }
  const rt_jit_times *t = rt_jit_get_times(p->jit);
  printf("{\"load_s\": %.4f, \"jit_wall_s\": %.4f, \"check_s\": %.4f, \"parse_s\": %.4f, "
         "\"opt_s\": %.4f, \"codegen_s\": %.4f, \"link_s\": %.4f, \"functions\": %zu, "
         "\"parts\": %zu, \"hot_parts\": %zu, \"kernels\": %u, \"threads\": %d}\n",
         (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec), t->wall_s,
         t->check_s, t->parse_s, t->opt_s, t->codegen_s, t->link_s, t->functions, t->parts,
         t->hot_parts, p->prog.n_kernels, kdc_rt_plan_threads(p));
  kdc_rt_plan_release(p);
  return 0;
}
