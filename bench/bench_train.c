/*
 * bench/bench_train.c: training step time (train_step through the runtime's
 * device-resident state, runtime/state.c) of the MNIST MLP at batch 16 and
 * 128 and of a 784 -> 4096 -> 4096 -> 10 MLP at batch 256 (Adam,
 * categorical cross-entropy), on 1 device and on 8 data-parallel virtual
 * devices, against the OpenBLAS time of the step's GEMMs alone (forward,
 * dW and dX of every Dense, same thread count) measured in the same run,
 * sample by sample alternately with the step (both see the same load),
 * after a pause that lets OpenBLAS's workers go to sleep (settle).
 * KDC_BENCH_PROFILE=1: the step's per-step profile on stderr
 * (kdc_rt_plan_profile_print); KDC_BENCH_QUICK=1: 1 device only.
 * PyTorch eager's time for the same steps comes from bench/torch_train.py
 * (bench/run.sh runs both).  Prints one JSON object.
 * usage: bench_train [BIG_MLP_JSON]   (bench/big_mlp.py writes it)
 */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench_compile.h"
#include "bench_util.h"
#include "codegen/codegen.h"
#include "frontend/frontend.h"
#include "frontend/layout.h"
#include "passes/passes.h"
#include "runtime/runtime.h"

static void die(kdc_status st) {
  if (!st) return;
  fprintf(stderr, "bench_train: %s\n", kdc_status_message(st));
  exit(1);
}

static void compile_plan(const char *model, const char *weights, int64_t batch, const char *mesh,
                         const char *out) {
  kdc_train_options t;
  kdc_train_options_init(&t, KDC_LOSS_CCE, KDC_OPT_ADAM);
  t.sample_mask = true;
  /* KDC_BENCH_NO_SHARD_UPDATE=1: the replicated update (kdc compile --no-shard-update) */
  t.no_shard_update = getenv("KDC_BENCH_NO_SHARD_UPDATE") != NULL;
  bench_compile_opts o = {model, weights, 1, batch, mesh, NULL, &t};
  bench_compile("bench_train", &o, out);
}

static float *filled(size_t n, unsigned salt) {
  float *p = malloc(n * sizeof(float) + 4);
  for (size_t i = 0; i < n; i++) p[i] = (float)(((i + salt) * 2654435761u) % 1000) / 1000.f;
  return p;
}

typedef struct step_ctx {
  kdc_rt_train *t;
  const void *data[3];
} step_ctx;

static void run_step(void *p) {
  step_ctx *c = p;
  float loss;
  die(kdc_rt_train_step(c->t, c->data, &loss));
}

/* The GEMMs of one step of a bias-free Dense chain |w| at batch |m|. */
typedef struct gemm_ctx {
  int n_layers, m;
  const int *w;
  float *a[4], *k[4], *g[4], *dk[4];
} gemm_ctx;

static void run_gemms(void *p) {
  gemm_ctx *c = p;
  int m = c->m;
  for (int i = 0; i < c->n_layers; i++)  /* forward: a[i+1] = a[i] k[i] */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, c->w[i + 1], c->w[i], 1.f, c->a[i],
                c->w[i], c->k[i], c->w[i + 1], 0.f, c->a[i + 1], c->w[i + 1]);
  for (int i = c->n_layers - 1; i >= 0; i--) {
    /* dk[i] = a[i]^T g[i+1] */
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, c->w[i], c->w[i + 1], m, 1.f, c->a[i],
                c->w[i], c->g[i + 1], c->w[i + 1], 0.f, c->dk[i], c->w[i + 1]);
    if (i > 0) /* g[i] = g[i+1] k[i]^T */
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, c->w[i], c->w[i + 1], 1.f,
                  c->g[i + 1], c->w[i + 1], c->k[i], c->w[i + 1], 0.f, c->g[i], c->w[i]);
  }
}

static gemm_ctx gemm_setup(const int *w, int n_layers, int m) {
  gemm_ctx c = {n_layers, m, w, {0}, {0}, {0}, {0}};
  for (int i = 0; i <= n_layers; i++) {
    c.a[i] = filled((size_t)m * (size_t)w[i], 1);
    c.g[i] = filled((size_t)m * (size_t)w[i], 2);
    if (i < n_layers) {
      c.k[i] = filled((size_t)w[i] * (size_t)w[i + 1], 3);
      c.dk[i] = filled((size_t)w[i] * (size_t)w[i + 1], 4);
    }
  }
  return c;
}

static void gemm_free(gemm_ctx *c) {
  for (int i = 0; i <= c->n_layers; i++)
    free(c->a[i]), free(c->g[i]), free(c->k[i]), free(c->dk[i]);
}

/* The GEMMs with OpenBLAS on |threads| threads (the runtime sets its own
 * thread count at every run). */
typedef struct blas_ctx {
  gemm_ctx *g;
  int threads;
} blas_ctx;

static void run_blas(void *p) {
  blas_ctx *b = p;
  openblas_set_num_threads(b->threads);
  run_gemms(b->g);
}

/* Untimed pause before each sample of bench_pair: after a call on all
 * threads OpenBLAS's idle workers keep polling (sched_yield) for 2^28
 * cycles, ~0.1 s, before they sleep (driver/others/blas_server.c), taking
 * CPU from whatever runs next on a small machine.  The kdc step never runs
 * after such a call when it trains (the runtime keeps OpenBLAS on one
 * thread), so the reference GEMMs must not slow it down here. */
static void settle(void) {
  struct timespec ts = {0, 250 * 1000 * 1000};
  nanosleep(&ts, NULL);
}

/* Median seconds per call of |fa| and of |fb|, sampled alternately (|reps|
 * samples of |inner| calls each, settle() before each), so that both see
 * the same machine load. */
static void bench_pair(void (*fa)(void *), void *a, void (*fb)(void *), void *b, int reps,
                       int inner, double *out_a, double *out_b) {
  double *ta = malloc(sizeof(double) * (size_t)reps), *tb = malloc(sizeof(double) * (size_t)reps);
  fa(a), fb(b); /* warm up */
  for (int r = 0; r < reps; r++) {
    settle();
    double t0 = bench_now();
    for (int i = 0; i < inner; i++) fa(a);
    ta[r] = (bench_now() - t0) / inner;
    settle();
    double t1 = bench_now();
    for (int i = 0; i < inner; i++) fb(b);
    tb[r] = (bench_now() - t1) / inner;
  }
  qsort(ta, (size_t)reps, sizeof(double), bench_cmp);
  qsort(tb, (size_t)reps, sizeof(double), bench_cmp);
  *out_a = ta[reps / 2], *out_b = tb[reps / 2];
  free(ta), free(tb);
}

/* One training step and the GEMMs alone, measured alternately.  With
 * KDC_BENCH_PROFILE set, prints the step's per-step profile to stderr. */
static void step_time(const char *plan, int threads, int64_t batch, int in_w, int classes,
                      gemm_ctx *gc, double *out_step, double *out_gemms) {
  const char *prof = getenv("KDC_BENCH_PROFILE");
  kdc_rt_options ro = {.n_threads = threads, .profile = prof && *prof};
  kdc_rt_plan *p = NULL;
  kdc_rt_train *t = NULL;
  die(kdc_rt_plan_load_with(plan, &ro, &p));
  die(kdc_rt_train_create(p, &t));
  float *x = filled((size_t)batch * (size_t)in_w, 5), *y = calloc((size_t)batch * (size_t)classes, 4);
  float *mask = malloc((size_t)batch * 4);
  for (int64_t r = 0; r < batch; r++) y[r * classes + r % classes] = 1, mask[r] = 1;
  step_ctx c = {t, {x, y, mask}};
  /* the data inputs in train_step order: x, labels, sample_mask */
  for (size_t i = 0; i < kdc_rt_train_data_count(t); i++) {
    const char *n = kdc_rt_train_data(t, i)->name;
    c.data[i] = !strcmp(n, "sample_mask") ? (const void *)mask : i == 0 ? (const void *)x : y;
  }
  blas_ctx b = {gc, threads};
  run_step(&c), run_step(&c); /* first touch of both state buffers */
  size_t fn = (size_t)kdc_rt_plan_find_func(p, "train_step");
  kdc_rt_plan_profile_print(p, fn, NULL);
  bench_pair(run_blas, &b, run_step, &c, 15, batch >= 256 ? 2 : 20, out_gemms, out_step);
  if (ro.profile) kdc_rt_plan_profile_print(p, fn, stderr);
  kdc_rt_train_destroy(t);
  kdc_rt_plan_release(p);
  free(x), free(y), free(mask);
}

int main(int argc, char **argv) {
  kdc_rt_blas_select_core(argv);
  if (argc > 1 && !strcmp(argv[1], "--blas-core")) {
    printf("%s\n", kdc_rt_blas_core()); /* bench/run.sh: PyTorch's kernels */
    return 0;
  }
  const char *big = argc > 1 ? argv[1] : NULL;
  const char *quick = getenv("KDC_BENCH_QUICK"); /* set: 1 device only */
  int threads = (int)sysconf(_SC_NPROCESSORS_ONLN);
  char plan[] = "/tmp/kdc_bench_train_XXXXXX";
  int fd = mkstemp(plan);
  if (fd < 0) return 1;
  close(fd);
  static const int mnist_w[] = {784, 200, 10}, big_w[] = {784, 4096, 4096, 10};
  struct { const char *name, *model, *weights; const int *w; int n_layers; int64_t batch; } cases[] = {
      {"mnist_mlp", KDC_SOURCE_DIR "/examples/mnist_mlp/model.json",
       KDC_SOURCE_DIR "/examples/mnist_mlp/weights.safetensors", mnist_w, 2, 16},
      {"mnist_mlp", KDC_SOURCE_DIR "/examples/mnist_mlp/model.json",
       KDC_SOURCE_DIR "/examples/mnist_mlp/weights.safetensors", mnist_w, 2, 128},
      {"mlp_4096", big, NULL, big_w, 3, 256},
  };
  printf("{\n  \"bench\": \"train_step\", \"threads\": %d, \"optimizer\": \"adam\", "
         "\"blas_core\": \"%s\",\n  \"steps\": [\n",
         threads, kdc_rt_blas_core());
  int first = 1;
  for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
    if (!cases[k].model) continue;
    gemm_ctx gc = gemm_setup(cases[k].w, cases[k].n_layers, (int)cases[k].batch);
    double s1 = 0; /* the 1-device step, for the 8-device throughput ratio */
    for (int dev = 0; dev < (quick && *quick ? 1 : 2); dev++) {
      compile_plan(cases[k].model, cases[k].weights, cases[k].batch, dev ? "8" : NULL, plan);
      double s = 0, g = 0;
      step_time(plan, threads, cases[k].batch, 784, 10, &gc, &s, &g);
      if (!dev) s1 = s;
      printf("%s    {\"model\": \"%s\", \"batch\": %lld, \"devices\": %d, \"step_ms\": %.4f, "
             "\"gemms_ms\": %.4f, \"step_over_gemms\": %.3f",
             first ? "" : ",\n", cases[k].name, (long long)cases[k].batch, dev ? 8 : 1, 1e3 * s,
             1e3 * g, s / g);
      /* target: 8 virtual devices >= 0.9x the throughput of one, same global batch */
      if (dev) printf(", \"throughput_vs_1_device\": %.3f", s1 / s);
      printf("}");
      first = 0;
      fflush(stdout);
    }
    gemm_free(&gc);
  }
  printf("\n  ]\n}\n");
  unlink(plan);
  return 0;
}
