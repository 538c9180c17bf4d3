/*
 * bench_mesh: the MNIST MLP (examples/mnist_mlp) on device meshes.  Prints
 * one JSON object:
 *   - compile time (frontend -> passes -> codegen) and plan size for the
 *     meshes 1, 2x4 and 64x64 (4096 devices) under DataParallel at a global
 *     batch of 4096, and 2x4 under the guide's ModelParallel layout: the
 *     plan is one SPMD program, so its size must not grow with the devices;
 *   - predict time per global batch (128 and 1024) on 1 device and on 8
 *     virtual devices (mesh 8, DataParallel), and the throughput ratio
 *     t(1) / t(8) (target >= 0.9: the virtual devices cost nothing), and
 *     the guide's ModelParallel layout on 2x4 (one all_reduce per batch).
 * Threads: all cores (KDC_BENCH_THREADS overrides); both plans use the same.
 */
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bench_compile.h"
#include "bench_util.h"
#include "codegen/codegen.h"
#include "frontend/frontend.h"
#include "frontend/layout.h"
#include "passes/passes.h"
#include "runtime/runtime.h"

#ifndef KDC_SOURCE_DIR
#define KDC_SOURCE_DIR "."
#endif

static void die(kdc_status st) {
  if (!st) return;
  fprintf(stderr, "bench_mesh: %s\n", kdc_status_message(st));
  exit(1);
}

/* Compiles the MLP at |batch| on |mesh_str| (NULL: one device), with the
 * example's layout.json when |layout|; returns seconds. */
static double compile_plan(int64_t batch, const char *mesh_str, bool layout, const char *out) {
  bench_compile_opts o = {KDC_SOURCE_DIR "/examples/mnist_mlp/model.json",
                          KDC_SOURCE_DIR "/examples/mnist_mlp/weights.safetensors", 0, batch,
                          mesh_str, layout ? KDC_SOURCE_DIR "/examples/mnist_mlp/layout.json" : NULL,
                          NULL};
  return bench_compile("bench_mesh", &o, out);
}

static long long file_size(const char *path) {
  struct stat sb;
  return stat(path, &sb) == 0 ? (long long)sb.st_size : -1;
}

typedef struct run_ctx {
  kdc_rt_plan *plan;
  const void *in[1];
  void *out[1];
} run_ctx;

static void run_plan(void *p) {
  run_ctx *c = p;
  die(kdc_rt_plan_run(c->plan, c->in, c->out));
}

static float *filled(size_t n) {
  float *p = malloc(n * sizeof(float));
  for (size_t i = 0; i < n; i++) p[i] = (float)((i * 2654435761u) % 1000) / 1000.f - 0.5f;
  return p;
}

int main(int argc, char **argv) {
  (void)argc;
  kdc_rt_blas_select_core(argv);
  const char *env = getenv("KDC_BENCH_THREADS");
  int threads = env ? atoi(env) : 0;
  char plan[256];
  snprintf(plan, sizeof plan, "%s/kdc-bench-mesh-%d.plan",
           getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp", (int)getpid());
  printf("{\n  \"benchmark\": \"mesh_mnist_mlp\",\n  \"threads\": %d,\n  \"compile\": [\n", threads);
  static const struct { const char *mesh; bool layout; int64_t batch; } cc[] = {
      {NULL, false, 4096}, {"2x4", false, 4096}, {"64x64", false, 4096}, {"2x4", true, 32}};
  for (int i = 0; i < 4; i++) {
    double best = 0;
    for (int r = 0; r < 3; r++) {
      double t = compile_plan(cc[i].batch, cc[i].mesh, cc[i].layout, plan);
      if (r == 0 || t < best) best = t;
    }
    printf("    {\"mesh\": \"%s\", \"layout\": \"%s\", \"batch\": %lld, \"devices\": %d, "
           "\"compile_seconds\": %.4f, \"plan_bytes\": %lld}%s\n",
           cc[i].mesh ? cc[i].mesh : "1", cc[i].layout ? "guide" : "data_parallel",
           (long long)cc[i].batch, !cc[i].mesh ? 1 : strcmp(cc[i].mesh, "2x4") == 0 ? 8 : 4096,
           best, file_size(plan), i < 3 ? "," : "");
  }
  printf("  ],\n  \"predict\": [\n");
  const int64_t batches[] = {128, 1024};
  for (int bi = 0; bi < 2; bi++) {
    int64_t b = batches[bi];
    float *x = filled((size_t)b * 784), *y = filled((size_t)b * 10);
    run_ctx c[3];
    for (int k = 0; k < 3; k++) {
      char pk[300];
      snprintf(pk, sizeof pk, "%s.%d", plan, k);
      compile_plan(b, k == 0 ? NULL : k == 1 ? "8" : "2x4", k == 2, pk);
      kdc_rt_options ro = {.n_threads = threads};
      die(kdc_rt_plan_load_with(pk, &ro, &c[k].plan));
      remove(pk);
      c[k].in[0] = x;
      c[k].out[0] = y;
    }
    int inner = b >= 1024 ? 10 : 50;
    double t[3] = {0, 0, 0}; /* interleaved, best of 3 medians */
    for (int round = 0; round < 3; round++)
      for (int k = 0; k < 3; k++) {
        double m = bench_median(run_plan, &c[k], 9, inner);
        if (round == 0 || m < t[k]) t[k] = m;
      }
    printf("    {\"batch\": %lld, \"one_device_seconds\": %.3e, \"eight_devices_seconds\": %.3e, "
           "\"throughput_8_over_1\": %.3f, \"guide_layout_2x4_seconds\": %.3e}%s\n",
           (long long)b, t[0], t[1], t[0] / t[1], t[2], bi < 1 ? "," : "");
    for (int k = 0; k < 3; k++) kdc_rt_plan_release(c[k].plan);
    free(x);
    free(y);
  }
  printf("  ]\n}\n");
  remove(plan);
  return 0;
}
