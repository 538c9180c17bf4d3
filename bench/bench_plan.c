/*
 * bench/bench_plan.c: the median time of one plan's forward (function
 * "predict") and, when the plan has one, training step ("train_step"), on
 * inputs it makes itself from the plan's input descriptions.  It is kdc's
 * side of bench/peers.py's comparison against XLA (jax.jit, Keras 3 on
 * JAX) and PyTorch 2 (bench/compare.py runs both in one run, same
 * threads).
 *
 * Inputs: floats in [0, 1); integers (token ids) in [0, 10); labels of a
 * float [B, C] target one-hot on row % C; integer labels row % C; a
 * "sample_mask" of ones.
 *
 * usage: bench_plan PLAN [--threads N] [--reps N] [--inner N] [--profile 1|2]
 *                   [--resident 1] [--fit-steps N] [--cpu 1]
 * --cpu 1: medians of the process's CPU time instead of wall time (with
 * --threads 1 on a loaded machine: the work, not the wait for a core;
 * --profile 2 likewise times each step by the thread's CPU clock).
 * --profile 1: also print every step's mean time (forward, then the
 * training step) to stderr (kdc_rt_plan_profile_print).
 * --resident 1 (docs/gpu.md, "Benchmark mode"): the inputs are uploaded
 * once (kdc_rt_resident, kdc_rt_train_data_upload) and every timed run
 * reads them where the kernels run (GPU memory for a CUDA plan, host
 * memory on the CPU), forward results staying there and only the loss
 * coming back from a training step: what XLA's and PyTorch's timings with
 * data on the GPU measure.  Then the fit loop (kdc_rt_fit, one epoch of
 * --fit-steps steps, default 50, after a warm-up epoch) is timed per step
 * with uploads staged and overlapped ("fit_step_ms") and with
 * KDC_FIT_STAGING=0 ("fit_step_ms_unstaged").
 * Prints one JSON object: {"forward_ms", "step_ms" (or null), "devices",
 * "threads", "load_s"}, with --resident 1 also "resident": true,
 * "matmul_precision", "graphs" (per function: how many runs were one
 * cuGraphLaunch, or why it is not graphed; null on the CPU), "fit_step_ms"
 * and "fit_step_ms_unstaged" (or
 * null without train_step).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_util.h"
#include "runtime/cuda/cuda_rt.h"
#include "runtime/runtime.h"

static void die(kdc_status st) {
  if (!st) return;
  fprintf(stderr, "bench_plan: %s\n", kdc_status_message(st));
  exit(1);
}

static int64_t numel(const kdc_rt_tensor_info *t) {
  int64_t n = 1;
  for (int d = 0; d < t->rank; d++) n *= t->dims[d];
  return n;
}

/* A buffer for |t| filled as the header says; |label| marks a training
 * target (one-hot / class ids). */
static void *make_input(const kdc_rt_tensor_info *t, bool label) {
  int64_t n = numel(t);
  void *p = calloc(1, t->bytes + 8);
  if (!p) exit(1);
  int64_t c = t->rank >= 2 ? t->dims[t->rank - 1] : 1;
  bool mask = !strcmp(t->name, "sample_mask");
  for (int64_t i = 0; i < n; i++) {
    double v;
    if (mask) v = 1;
    else if (label && t->dtype == KDC_IO_DTYPE_F32 && t->rank >= 2) v = (i % c) == ((i / c) % c);
    else if (label) v = (double)(i % (c > 1 ? c : 2));
    else v = t->dtype == KDC_IO_DTYPE_F32 ? (double)((i * 2654435761u) % 1000) / 1000.0
                                          : (double)((i * 7) % 10);
    switch (t->dtype) {
      case KDC_IO_DTYPE_F32: ((float *)p)[i] = (float)v; break;
      case KDC_IO_DTYPE_I32: ((int32_t *)p)[i] = (int32_t)v; break;
      case KDC_IO_DTYPE_I64: ((int64_t *)p)[i] = (int64_t)v; break;
      case KDC_IO_DTYPE_U8:
      case KDC_IO_DTYPE_I8:
      case KDC_IO_DTYPE_BOOL: ((uint8_t *)p)[i] = (uint8_t)v; break;
      default: fprintf(stderr, "bench_plan: input %s: dtype not supported\n", t->name); exit(1);
    }
  }
  return p;
}

typedef struct ctx {
  kdc_rt_plan *plan;
  kdc_rt_train *train;
  kdc_rt_resident *res;
  const void *in[64];
  void *out[64];
} ctx;

static void run_forward_resident(void *p) { die(kdc_rt_resident_run(((ctx *)p)->res)); }

static void run_step_resident(void *p) {
  ctx *c = p;
  float loss;
  die(kdc_rt_train_step(c->train, NULL, &loss));
}

/* Seconds per step of kdc_rt_fit over one epoch of |steps| full batches
 * (the batch in c->in repeated), after a warm-up epoch. */
static double time_fit(ctx *c, size_t nd, int64_t steps) {
  int64_t batch = kdc_rt_train_data(c->train, 0)->dims[0];
  const void *arrays[64];
  size_t na = 0;
  for (size_t i = 0; i < nd; i++) {
    const kdc_rt_tensor_info *t = kdc_rt_train_data(c->train, i);
    if (!strcmp(t->name, "sample_mask")) continue;
    char *a = malloc(t->bytes * (size_t)steps + 8);
    if (!a) exit(1);
    for (int64_t s = 0; s < steps; s++) memcpy(a + t->bytes * (size_t)s, c->in[i], t->bytes);
    arrays[na++] = a;
  }
  kdc_rt_fit_options o = {.epochs = 1};
  kdc_rt_history h;
  die(kdc_rt_fit(c->train, arrays, batch * steps, &o, &h));
  kdc_rt_history_free(&h);
  double t0 = bench_now();
  die(kdc_rt_fit(c->train, arrays, batch * steps, &o, &h));
  double dt = (bench_now() - t0) / (double)steps;
  kdc_rt_history_free(&h);
  for (size_t i = 0; i < na; i++) free((void *)arrays[i]);
  return dt;
}

static void put_graphs(const kdc_rt_plan *p) {
  if (!p->cuda) {
    printf("null");
    return;
  }
  printf("{");
  for (size_t f = 0, n = 0; f < kdc_rt_plan_func_count(p); f++) {
    if (p->prog.funcs[f].is_body) continue;
    char why[200];
    bool on = rt_cuda_graphed(p, f, why, sizeof why);
    printf("%s\"%s\": ", n++ ? ", " : "", kdc_rt_plan_func_name(p, f));
    if (on) printf("%llu", (unsigned long long)rt_cuda_graph_launches(p, f));
    else {
      printf("\"");
      for (const char *s = why; *s; s++) printf(*s == '"' || *s == '\\' ? "\\%c" : "%c", *s);
      printf("\"");
    }
  }
  printf("}");
}

static void run_forward(void *p) {
  ctx *c = p;
  die(kdc_rt_plan_run_func(c->plan, 0, c->in, c->out));
}

static void run_step(void *p) {
  ctx *c = p;
  float loss;
  die(kdc_rt_train_step(c->train, c->in, &loss));
}

int main(int argc, char **argv) {
  kdc_rt_blas_select_core(argv);
  if (argc < 2) {
    fprintf(stderr, "usage: bench_plan PLAN [--threads N] [--reps N] [--inner N] [--profile 1|2] [--cpu 1] "
            "[--resident 1] [--fit-steps N]\n");
    return 2;
  }
  int threads = (int)sysconf(_SC_NPROCESSORS_ONLN), reps = 11, inner = 1, profile = 0;
  int resident = 0, fit_steps = 50;
  for (int i = 2; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--threads")) threads = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--reps")) reps = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--inner")) inner = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--profile")) profile = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--resident")) resident = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--fit-steps")) fit_steps = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--cpu")) bench_clock = atoi(argv[i + 1]) ? CLOCK_PROCESS_CPUTIME_ID
                                                                        : CLOCK_MONOTONIC;
    else {
      fprintf(stderr, "bench_plan: unknown option %s\n", argv[i]);
      return 2;
    }
  }
  kdc_rt_options ro = {.n_threads = threads, .profile = profile};
  ctx c;
  memset(&c, 0, sizeof c);
  double t0 = bench_now();
  die(kdc_rt_plan_load_with(argv[1], &ro, &c.plan));
  double load_s = bench_now() - t0;
  int fwd = kdc_rt_plan_find_func(c.plan, "predict");
  if (fwd != 0) {
    fprintf(stderr, "bench_plan: %s: function 0 is not predict\n", argv[1]);
    return 1;
  }
  size_t ni = kdc_rt_plan_input_count(c.plan, 0), no = kdc_rt_plan_output_count(c.plan, 0);
  if (ni > 64 || no > 64) return 1;
  for (size_t i = 0; i < ni; i++) c.in[i] = make_input(kdc_rt_plan_input(c.plan, 0, i), false);
  for (size_t i = 0; i < no; i++) c.out[i] = malloc(kdc_rt_plan_output(c.plan, 0, i)->bytes + 8);
  if (resident) die(kdc_rt_resident_create(c.plan, 0, c.in, &c.res));
  double fwd_ms =
      1e3 * bench_median(resident ? run_forward_resident : run_forward, &c, reps, inner);
  kdc_rt_resident_destroy(c.res);
  if (profile) kdc_rt_plan_profile_print(c.plan, 0, stderr);
  for (size_t i = 0; i < ni; i++) free((void *)c.in[i]);
  for (size_t i = 0; i < no; i++) free(c.out[i]);
  double step_ms = -1, fit_ms = -1, fit_plain_ms = -1;
  if (kdc_rt_plan_find_func(c.plan, "train_step") >= 0) {
    die(kdc_rt_train_create(c.plan, &c.train));
    size_t nd = kdc_rt_train_data_count(c.train);
    if (nd > 64) return 1;
    /* the model's inputs come first, then one target per trained output */
    for (size_t i = 0; i < nd; i++) c.in[i] = make_input(kdc_rt_train_data(c.train, i), i >= ni);
    void **dev[64] = {0};
    for (size_t i = 0; resident && i < nd; i++) {
      dev[i] = calloc((size_t)kdc_rt_plan_device_count(c.plan), sizeof(void *));
      die(kdc_rt_train_data_upload(c.train, i, c.in[i], dev[i]));
      kdc_rt_train_bind_data_dev(c.train, i, dev[i]);
    }
    step_ms = 1e3 * bench_median(resident ? run_step_resident : run_step, &c, reps, inner);
    for (size_t i = 0; resident && i < nd; i++) {
      kdc_rt_train_bind_data_dev(c.train, i, NULL);
      kdc_rt_train_data_free(c.train, dev[i]);
      free(dev[i]);
    }
    if (resident && fit_steps > 0) {
      fit_ms = 1e3 * time_fit(&c, nd, fit_steps);
      setenv("KDC_FIT_STAGING", "0", 1);
      fit_plain_ms = 1e3 * time_fit(&c, nd, fit_steps);
      unsetenv("KDC_FIT_STAGING");
    }
    if (profile)
      kdc_rt_plan_profile_print(c.plan, (size_t)kdc_rt_plan_find_func(c.plan, "train_step"),
                                stderr);
    for (size_t i = 0; i < nd; i++) free((void *)c.in[i]);
    kdc_rt_train_destroy(c.train);
  }
  printf("{\"forward_ms\": %.4f, \"step_ms\": ", fwd_ms);
  if (step_ms >= 0) printf("%.4f", step_ms);
  else printf("null");
  printf(", \"devices\": %lld, \"threads\": %d, \"load_s\": %.3f",
         (long long)kdc_rt_plan_device_count(c.plan), threads, load_s);
  if (resident) {
    printf(", \"resident\": true, \"matmul_precision\": \"%s\", \"graphs\": ",
           kdc_rt_plan_matmul_precision(c.plan));
    put_graphs(c.plan);
    if (fit_ms >= 0) printf(", \"fit_step_ms\": %.4f, \"fit_step_ms_unstaged\": %.4f", fit_ms,
                            fit_plain_ms);
    else printf(", \"fit_step_ms\": null, \"fit_step_ms_unstaged\": null");
  }
  printf("}\n");
  kdc_rt_plan_release(c.plan);
  return 0;
}
