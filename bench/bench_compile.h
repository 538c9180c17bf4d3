/* The benchmarks' one compile helper (bench/bench_compile.c): a Keras model
 * through frontend -> passes -> codegen into a plan file, in process. */
#ifndef KDC_BENCH_COMPILE_H
#define KDC_BENCH_COMPILE_H

#include <stdbool.h>
#include <stdint.h>

#include "passes/passes.h"

typedef struct bench_compile_opts {
  const char *model;              /* Keras model JSON */
  const char *weights;            /* safetensors / TF.js JSON; NULL: initialisers from |seed| */
  uint64_t seed;
  int64_t batch;
  const char *mesh;               /* "2x4"; NULL: one device */
  const char *layout;             /* layout.json path, or NULL */
  const kdc_train_options *train; /* NULL: predict only; else predict, train_step, evaluate */
} bench_compile_opts;

/* Compiles |o| into the plan file |out|; returns the seconds it took.  Any
 * error is printed with |who| and exits 1 (benchmarks have no recovery). */
double bench_compile(const char *who, const bench_compile_opts *o, const char *out);

/* A plan whose only step is all_reduce (|gather| false) or all_gather on
 * dim 0 over a mesh x=|devices| of |n| f32 per device, loaded with |ro| (the
 * `cpu` virtual devices on n_threads, or a process of a job; run it with
 * kdc_rt_plan_run_local). */
struct kdc_rt_plan;
struct kdc_rt_options;
struct kdc_rt_plan *bench_allreduce_plan(const char *who, int devices, int64_t n,
                                         const struct kdc_rt_options *ro);
struct kdc_rt_plan *bench_collective_plan(const char *who, int devices, int64_t n, bool gather,
                                          const struct kdc_rt_options *ro);

#endif
