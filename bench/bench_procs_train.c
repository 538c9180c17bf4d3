/*
 * bench_procs_train PLAN: the training step of PLAN (a plan compiled with
 * --loss and a mesh) as a job of several processes, each running its share
 * of the devices -- started by mpirun, or without it and placed by
 * KDC_COORDINATOR_ADDRESS / KDC_NUM_PROCESSES / KDC_PROCESS_ID (TCP):
 * bench/bench_procs.sh runs both against PyTorch DDP.  Threads per process:
 * KDC_BENCH_THREADS (default 1).  Every process trains on the same random
 * global batch (its devices read their pieces); process 0 prints one JSON
 * object with the median seconds per kdc_rt_train_step (one optimizer step
 * on the global batch: forward, backward, gradient all_reduce between the
 * processes, update).
 */
#include <stdio.h>
#include <string.h>

#include "bench_util.h"
#include "runtime/procs.h"
#include "runtime/runtime.h"

static kdc_rt_procs procs;

static void die(kdc_status st) {
  if (!st) return;
  fprintf(stderr, "bench_procs_train: %s\n", kdc_status_message(st));
  kdc_rt_procs_finish(&procs, 1, NULL, 10);
  exit(1);
}

typedef struct ctx {
  kdc_rt_train *t;
  const void *data[16];
} ctx;

static void step(void *v) {
  ctx *c = v;
  float loss;
  die(kdc_rt_train_step(c->t, c->data, &loss));
}

int main(int argc, char **argv) {
  kdc_rt_blas_select_core(argv);
  if (argc != 2) {
    fprintf(stderr, "usage: bench_procs_train PLAN (under mpirun, or with KDC_* placement)\n");
    return 2;
  }
  die(kdc_rt_procs_init(NULL, -1, -1, &procs));
  const char *th = getenv("KDC_BENCH_THREADS");
  kdc_rt_options ro = {.n_threads = th ? atoi(th) : 1, .collective_timeout_s = 60,
                       .n_processes = procs.n, .process_id = procs.id, .net = procs.net};
  kdc_rt_plan *p;
  die(kdc_rt_plan_load_with(argv[1], &ro, &p));
  ctx c = {0};
  die(kdc_rt_train_create(p, &c.t));
  size_t n = kdc_rt_train_data_count(c.t);
  if (n > 16) die(KDC_ERR(KDC_UNSUPPORTED, "%zu data inputs", n));
  int64_t batch = 0;
  uint64_t s = 12345;
  for (size_t i = 0, arr = 0; i < n; i++) {  /* the same data on every process */
    const kdc_rt_tensor_info *d = kdc_rt_train_data(c.t, i);
    char *buf = aligned_alloc(64, (d->bytes + 63) / 64 * 64);
    int64_t rows = d->dims[0], per = (int64_t)(d->bytes / 4) / (rows ? rows : 1);
    bool mask = !strcmp(d->name, "sample_mask"), x = !mask && arr++ == 0;
    memset(buf, 0, d->bytes);
    batch = rows;
    for (int64_t r = 0; r < rows; r++)
      for (int64_t j = 0; j < per; j++) {
        float *f = (float *)buf + r * per + j;
        int32_t *id = (int32_t *)buf + r * per + j;
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        if (mask) *f = 1.0f;                                  /* every row real */
        else if (x) *f = (float)(s >> 40) / (float)(1 << 24); /* inputs in [0, 1) */
        else if (d->dtype == KDC_IO_DTYPE_I32) *id = (int32_t)(r % 10); /* class ids */
        else *f = j == r % per ? 1.0f : 0.0f;                 /* one-hot labels */
      }
    c.data[i] = buf;
  }
  double t = bench_median(step, &c, 21, 3);
  if (procs.id == 0)
    printf("{\"bench\": \"procs_train_step\", \"plan\": \"%s\", \"transport\": \"%s\", "
           "\"processes\": %d, \"devices\": %lld, \"threads_per_process\": %d, "
           "\"global_batch\": %lld, \"step_ms\": %.3f}\n",
           argv[1], procs.mpi ? "mpi" : "tcp", procs.n, (long long)kdc_rt_plan_device_count(p),
           kdc_rt_plan_threads(p), (long long)batch, t * 1e3);
  for (size_t i = 0; i < n; i++) free((void *)c.data[i]);
  kdc_rt_train_destroy(c.t);
  kdc_rt_plan_release(p);
  kdc_rt_procs_finish(&procs, 0, NULL, 60);
  return 0;
}
