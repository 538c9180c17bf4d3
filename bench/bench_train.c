/*
 * bench/bench_train.c: training step time (train_step through the runtime's
 * device-resident state, runtime/state.c) of the MNIST MLP at batch 16 and
 * 128 and of a 784 -> 4096 -> 4096 -> 10 MLP at batch 256 (Adam,
 * categorical cross-entropy), on 1 device and on 8 data-parallel virtual
 * devices, against the OpenBLAS time of the step's GEMMs alone (forward,
 * dW and dX of every Dense, same thread count) measured in the same run:
 * the GEMMs, the 1-device step and the 8-device step sampled in turn (all
 * see the same load), each after a pause that lets OpenBLAS's workers go
 * to sleep (settle); the 8-device line's throughput_vs_1_device is the
 * median of t1/t8 over neighbouring samples.
 * KDC_BENCH_PROFILE=1: the step's per-step profile on stderr
 * (kdc_rt_plan_profile_print); KDC_BENCH_QUICK=1: 1 device only;
 * KDC_BENCH_BATCH=B: only the cases of batch B.
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

/* Untimed pause before each sample of bench_alt: after a call on all
 * threads OpenBLAS's idle workers keep polling (sched_yield) for 2^28
 * cycles, ~0.1 s, before they sleep (driver/others/blas_server.c), taking
 * CPU from whatever runs next on a small machine.  The kdc step never runs
 * after such a call when it trains (the runtime keeps OpenBLAS on one
 * thread), so the reference GEMMs must not slow it down here. */
static void settle(void) {
  struct timespec ts = {0, 250 * 1000 * 1000};
  nanosleep(&ts, NULL);
}

/* Samples |n| functions in turn, |reps| rounds of |inner| calls each
 * (settle() before each), so that all of them see the same machine load:
 * med[i] is function i's median seconds per call, and *ratio the median
 * over rounds of (seconds of function 1) / (seconds of function 2) -- a
 * ratio of neighbouring samples, steadier on a shared machine than a ratio
 * of medians taken at different times. */
enum { MAX_ALT = 3 };
static void bench_alt(int n, void (*const *fn)(void *), void *const *ctx, int reps, int inner,
                      double *med, double *ratio) {
  double *t = malloc(sizeof(double) * (size_t)(reps * MAX_ALT)), *q = malloc(sizeof(double) * (size_t)reps);
  for (int i = 0; i < n; i++) fn[i](ctx[i]); /* warm up */
  for (int r = 0; r < reps; r++)
    for (int i = 0; i < n; i++) {
      settle();
      double t0 = bench_now();
      for (int k = 0; k < inner; k++) fn[i](ctx[i]);
      t[i * reps + r] = (bench_now() - t0) / inner;
    }
  for (int r = 0; r < reps && n > 2; r++) q[r] = t[1 * reps + r] / t[2 * reps + r];
  if (n > 2) {
    qsort(q, (size_t)reps, sizeof(double), bench_cmp);
    *ratio = q[reps / 2];
  }
  for (int i = 0; i < n; i++) {
    qsort(t + i * reps, (size_t)reps, sizeof(double), bench_cmp);
    med[i] = t[i * reps + reps / 2];
  }
  free(t), free(q);
}

/* A plan's training state and one batch of data. */
typedef struct stepper {
  kdc_rt_plan *p;
  step_ctx c;
  float *x, *y, *mask;
  size_t fn; /* train_step */
} stepper;

static void stepper_init(stepper *s, const char *plan, int threads, int64_t batch, int in_w,
                         int classes, bool profile) {
  kdc_rt_options ro = {.n_threads = threads, .profile = profile};
  kdc_rt_train *t = NULL;
  die(kdc_rt_plan_load_with(plan, &ro, &s->p));
  die(kdc_rt_train_create(s->p, &t));
  s->x = filled((size_t)batch * (size_t)in_w, 5), s->y = calloc((size_t)batch * (size_t)classes, 4);
  s->mask = malloc((size_t)batch * 4);
  for (int64_t r = 0; r < batch; r++) s->y[r * classes + r % classes] = 1, s->mask[r] = 1;
  s->c = (step_ctx){t, {s->x, s->y, s->mask}};
  /* the data inputs in train_step order: x, labels, sample_mask */
  for (size_t i = 0; i < kdc_rt_train_data_count(t); i++) {
    const char *n = kdc_rt_train_data(t, i)->name;
    s->c.data[i] = !strcmp(n, "sample_mask") ? (const void *)s->mask : i == 0 ? (const void *)s->x : s->y;
  }
  run_step(&s->c), run_step(&s->c); /* first touch of both state buffers */
  s->fn = (size_t)kdc_rt_plan_find_func(s->p, "train_step");
  kdc_rt_plan_profile_print(s->p, s->fn, NULL);
}

static void stepper_free(stepper *s) {
  kdc_rt_train_destroy(s->c.t);
  kdc_rt_plan_release(s->p);
  free(s->x), free(s->y), free(s->mask);
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
  char plan[2][32] = {"/tmp/kdc_bench_train_XXXXXX", "/tmp/kdc_bench_train_XXXXXX"};
  for (int d = 0; d < 2; d++) {
    int fd = mkstemp(plan[d]);
    if (fd < 0) return 1;
    close(fd);
  }
  const char *prof = getenv("KDC_BENCH_PROFILE"), *ob = getenv("KDC_BENCH_BATCH");
  int64_t only_batch = ob ? atoll(ob) : 0;
  bool profile = prof && *prof;
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
  int first = 1, nd = quick && *quick ? 1 : 2;
  for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
    if (!cases[k].model || (only_batch && cases[k].batch != only_batch)) continue;
    gemm_ctx gc = gemm_setup(cases[k].w, cases[k].n_layers, (int)cases[k].batch);
    blas_ctx b = {&gc, threads};
    stepper st[2];
    void (*fn[MAX_ALT])(void *) = {run_blas, run_step, run_step};
    void *ctx[MAX_ALT] = {&b, NULL, NULL};
    for (int d = 0; d < nd; d++) { /* 1 device, then 8 data-parallel virtual devices */
      compile_plan(cases[k].model, cases[k].weights, cases[k].batch, d ? "8" : NULL, plan[d]);
      stepper_init(&st[d], plan[d], threads, cases[k].batch, 784, 10, profile);
      ctx[1 + d] = &st[d].c;
    }
    double med[MAX_ALT] = {0}, ratio = 0;
    bench_alt(1 + nd, fn, ctx, 15, cases[k].batch >= 256 ? 2 : 20, med, &ratio);
    for (int d = 0; d < nd; d++) {
      double s = med[1 + d], g = med[0];
      printf("%s    {\"model\": \"%s\", \"batch\": %lld, \"devices\": %d, \"step_ms\": %.4f, "
             "\"gemms_ms\": %.4f, \"step_over_gemms\": %.3f",
             first ? "" : ",\n", cases[k].name, (long long)cases[k].batch, d ? 8 : 1, 1e3 * s,
             1e3 * g, s / g);
      /* target: 8 virtual devices >= 0.9x the throughput of one, same global batch
       * (t1/t8, the median over rounds of neighbouring samples) */
      if (d) printf(", \"throughput_vs_1_device\": %.3f", ratio);
      printf("}");
      first = 0;
      if (profile) kdc_rt_plan_profile_print(st[d].p, st[d].fn, stderr);
      stepper_free(&st[d]);
    }
    fflush(stdout);
    gemm_free(&gc);
  }
  printf("\n  ]\n}\n");
  unlink(plan[0]), unlink(plan[1]);
  return 0;
}
