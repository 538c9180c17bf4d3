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
 * usage: bench_plan PLAN [--threads N] [--reps N] [--inner N] [--profile 1]
 * --profile 1: also print every step's mean time (forward, then the
 * training step) to stderr (kdc_rt_plan_profile_print).
 * Prints one JSON object: {"forward_ms", "step_ms" (or null), "devices",
 * "threads", "load_s"}.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_util.h"
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
  const void *in[64];
  void *out[64];
} ctx;

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
    fprintf(stderr, "usage: bench_plan PLAN [--threads N] [--reps N] [--inner N] [--profile 1]\n");
    return 2;
  }
  int threads = (int)sysconf(_SC_NPROCESSORS_ONLN), reps = 11, inner = 1, profile = 0;
  for (int i = 2; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--threads")) threads = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--reps")) reps = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--inner")) inner = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--profile")) profile = atoi(argv[i + 1]);
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
  double fwd_ms = 1e3 * bench_median(run_forward, &c, reps, inner);
  if (profile) kdc_rt_plan_profile_print(c.plan, 0, stderr);
  for (size_t i = 0; i < ni; i++) free((void *)c.in[i]);
  for (size_t i = 0; i < no; i++) free(c.out[i]);
  double step_ms = -1;
  if (kdc_rt_plan_find_func(c.plan, "train_step") >= 0) {
    die(kdc_rt_train_create(c.plan, &c.train));
    size_t nd = kdc_rt_train_data_count(c.train);
    if (nd > 64) return 1;
    /* the model's inputs come first, then one target per trained output */
    for (size_t i = 0; i < nd; i++) c.in[i] = make_input(kdc_rt_train_data(c.train, i), i >= ni);
    step_ms = 1e3 * bench_median(run_step, &c, reps, inner);
    if (profile)
      kdc_rt_plan_profile_print(c.plan, (size_t)kdc_rt_plan_find_func(c.plan, "train_step"),
                                stderr);
    for (size_t i = 0; i < nd; i++) free((void *)c.in[i]);
    kdc_rt_train_destroy(c.train);
  }
  printf("{\"forward_ms\": %.4f, \"step_ms\": ", fwd_ms);
  if (step_ms >= 0) printf("%.4f", step_ms);
  else printf("null");
  printf(", \"devices\": %lld, \"threads\": %d, \"load_s\": %.3f}\n",
         (long long)kdc_rt_plan_device_count(c.plan), threads, load_s);
  kdc_rt_plan_release(c.plan);
  return 0;
}
