/*
 * bench/bench_models.c: predict and training-step time of two real models
 * against PyTorch eager on the CPU, same shapes, same thread count, in the
 * same run (bench/torch_models.py is started from here):
 *   - transformer_512: a Keras encoder block (MultiHeadAttention 8 heads of
 *     64, d_model 512, FFN 2048, LayerNorm, residuals, pooled softmax head)
 *     at sequence 128, batch 8;
 *   - cnn_64: examples/small_cnn scaled to 64x64x3 images and 32 / 64
 *     filters (Conv2D, BatchNormalization, pooling, DepthwiseConv2D, Dense),
 *     batch 32.
 * bench/big_models.py writes both Keras JSONs (initialisers, seed 1).  The
 * training step is Adam on categorical cross-entropy.  Prints one JSON
 * object with kdc and torch medians and kdc / torch ratios (< 1: kdc is
 * faster).  usage: bench_models DIR [MODEL]   (DIR holds big_models.py's
 * output; MODEL: time only that one)
 * Threads: all cores (KDC_BENCH_THREADS overrides).  KDC_BENCH_NO_TORCH=1
 * skips PyTorch (kdc alone, e.g. under perf).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_compile.h"
#include "bench_util.h"
#include "runtime/runtime.h"

#ifndef KDC_SOURCE_DIR
#define KDC_SOURCE_DIR "."
#endif

static void die(kdc_status st) {
  if (!st) return;
  fprintf(stderr, "bench_models: %s\n", kdc_status_message(st));
  exit(1);
}

static float *filled(size_t n, unsigned salt) {
  float *p = malloc(n * sizeof(float) + 4);
  for (size_t i = 0; i < n; i++) p[i] = (float)(((i + salt) * 2654435761u) % 1000) / 1000.f;
  return p;
}

typedef struct run_ctx {
  kdc_rt_plan *plan;
  const void *in[1];
  void *out[1];
  kdc_rt_train *t;
  const void *data[3];
} run_ctx;

static void run_predict(void *p) {
  run_ctx *c = p;
  die(kdc_rt_plan_run(c->plan, c->in, c->out));
}

static void run_step(void *p) {
  run_ctx *c = p;
  float loss;
  die(kdc_rt_train_step(c->t, c->data, &loss));
}

typedef struct model {
  const char *name, *file;
  int64_t batch, in_elems, classes; /* in_elems per row */
  int reps;
} model;

/* Median seconds of predict (train = false) or train_step. */
static double time_plan(const model *m, const char *plan, int threads, bool train) {
  kdc_rt_options ro = {.n_threads = threads};
  run_ctx c;
  memset(&c, 0, sizeof c);
  die(kdc_rt_plan_load_with(plan, &ro, &c.plan));
  size_t nx = (size_t)(m->batch * m->in_elems), ny = (size_t)(m->batch * m->classes);
  float *x = filled(nx, 5), *y = calloc(ny, 4), *mask = malloc((size_t)m->batch * 4);
  for (int64_t r = 0; r < m->batch; r++) y[r * m->classes + r % m->classes] = 1, mask[r] = 1;
  double s;
  if (train) {
    die(kdc_rt_train_create(c.plan, &c.t));
    for (size_t i = 0; i < kdc_rt_train_data_count(c.t) && i < 3; i++) {
      const char *n = kdc_rt_train_data(c.t, i)->name;
      c.data[i] = !strcmp(n, "sample_mask") ? (const void *)mask : i == 0 ? (const void *)x : y;
    }
    s = bench_median(run_step, &c, m->reps, 1);
    kdc_rt_train_destroy(c.t);
  } else {
    float *out = malloc(ny * 4);
    c.in[0] = x, c.out[0] = out;
    s = bench_median(run_predict, &c, m->reps, 1);
    free(out);
  }
  kdc_rt_plan_release(c.plan);
  free(x), free(y), free(mask);
  return s;
}

/* The number after "key": inside the object "name" of |json|, or -1. */
static double torch_ms(const char *json, const char *name, const char *key) {
  char k[64];
  snprintf(k, sizeof k, "\"%s\"", name);
  const char *p = json ? strstr(json, k) : NULL;
  if (!p) return -1;
  snprintf(k, sizeof k, "\"%s\":", key);
  p = strstr(p, k);
  return p ? strtod(p + strlen(k), NULL) : -1;
}

int main(int argc, char **argv) {
  kdc_rt_blas_select_core(argv);
  if (argc < 2) {
    fprintf(stderr, "usage: bench_models DIR (bench/big_models.py's output)\n");
    return 2;
  }
  const char *env = getenv("KDC_BENCH_THREADS");
  int threads = env ? atoi(env) : (int)sysconf(_SC_NPROCESSORS_ONLN);
  char tfile[1024], cfile[1024], cmd[2048];
  snprintf(tfile, sizeof tfile, "%s/transformer_512.json", argv[1]);
  snprintf(cfile, sizeof cfile, "%s/cnn_64.json", argv[1]);
  const model models[] = {{"transformer_512", tfile, 8, 128 * 512, 10, 7},
                          {"cnn_64", cfile, 32, 64 * 64 * 3, 10, 7}};
  /* PyTorch first (it runs alone, then kdc alone: they never share the cores) */
  snprintf(cmd, sizeof cmd, "/usr/bin/python3 %s/bench/torch_models.py %d", KDC_SOURCE_DIR,
           threads);
  static char torch[4096];
  const char *no_torch = getenv("KDC_BENCH_NO_TORCH"); /* set: kdc alone (profiling) */
  FILE *pp = no_torch ? NULL : popen(cmd, "r");
  size_t nt = pp ? fread(torch, 1, sizeof torch - 1, pp) : 0;
  while (nt > 0 && (torch[nt - 1] == '\n' || torch[nt - 1] == '\r')) nt--;
  torch[nt] = 0;
  if (pp && pclose(pp) != 0) torch[0] = 0;
  char plan[] = "/tmp/kdc_bench_models_XXXXXX";
  int fd = mkstemp(plan);
  if (fd < 0) return 1;
  close(fd);
  kdc_train_options t;
  kdc_train_options_init(&t, KDC_LOSS_CCE, KDC_OPT_ADAM);
  t.sample_mask = true;
  printf("{\n  \"benchmark\": \"models_vs_torch\", \"threads\": %d, \"optimizer\": \"adam\",\n"
         "  \"models\": [\n", threads);
  for (size_t k = 0; k < sizeof models / sizeof *models; k++) {
    const model *m = &models[k];
    if (argc > 2 && strcmp(argv[2], m->name)) continue; /* one model only */
    double ms[2], tm[2];
    for (int train = 0; train < 2; train++) {
      bench_compile_opts o = {m->file, NULL, 1, m->batch, NULL, NULL, train ? &t : NULL};
      bench_compile("bench_models", &o, plan);
      ms[train] = 1e3 * time_plan(m, plan, threads, train);
      tm[train] = torch_ms(torch[0] ? torch : NULL, m->name, train ? "step_ms" : "forward_ms");
    }
    printf("    {\"model\": \"%s\", \"batch\": %lld, \"kdc_forward_ms\": %.3f, "
           "\"torch_forward_ms\": %.3f, \"forward_kdc_over_torch\": %.3f, \"kdc_step_ms\": %.3f, "
           "\"torch_step_ms\": %.3f, \"step_kdc_over_torch\": %.3f}%s\n",
           m->name, (long long)m->batch, ms[0], tm[0], tm[0] > 0 ? ms[0] / tm[0] : -1, ms[1], tm[1],
           tm[1] > 0 ? ms[1] / tm[1] : -1, k + 1 < sizeof models / sizeof *models && argc <= 2 ? "," : "");
    fflush(stdout);
  }
  printf("  ],\n  \"torch\": %s\n}\n", torch[0] ? torch : "null");
  unlink(plan);
  return 0;
}
