/* Shared helpers for the benchmarks: a monotonic clock and robust timing
 * (the median of repeated runs; machines here are shared and noisy, so
 * every figure that matters is a ratio of two timings taken in one run). */
#ifndef KDC_BENCH_UTIL_H
#define KDC_BENCH_UTIL_H

#include <stdint.h>
#include <stdlib.h>
#include <time.h>

/* The clock bench_median reads: wall time, or the process's CPU time
 * (bench_plan --cpu 1: on a loaded shared machine, with --threads 1, the
 * work alone, not the time waited for a core). */
static clockid_t bench_clock = CLOCK_MONOTONIC;

static inline double bench_now(void) {
  struct timespec ts;
  clock_gettime(bench_clock, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int bench_cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* Median seconds per call of fn(ctx) over |reps| samples of |inner| calls. */
static inline double bench_median(void (*fn)(void *), void *ctx, int reps, int inner) {
  double *t = malloc(sizeof(double) * (size_t)reps);
  fn(ctx); /* warm up */
  for (int r = 0; r < reps; r++) {
    double t0 = bench_now();
    for (int i = 0; i < inner; i++) fn(ctx);
    t[r] = (bench_now() - t0) / inner;
  }
  qsort(t, (size_t)reps, sizeof(double), bench_cmp);
  double m = t[reps / 2];
  free(t);
  return m;
}

#endif
