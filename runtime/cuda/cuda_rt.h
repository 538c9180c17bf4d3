/*
 * runtime/cuda/cuda_rt.h: running plans compiled with `kdc compile --target
 * cuda` (docs/gpu.md).
 *
 * Such a plan carries the PTX of every kernel (PTX section) and its launch
 * table (CUDA section) next to the CPU code.  The CUDA executor is built
 * when the toolkit is found (KDC_WITH_CUDA, KDC_HAVE_CUDA); it opens the
 * driver (libcuda.so.1), cuBLAS and NCCL with dlopen at run time
 * (cuda/api.c), so one kdc binary starts on machines with and without a
 * GPU.  kdc_rt_plan_load picks it for a CUDA plan (unless
 * kdc_rt_options.target says CPU): every device of this process is a GPU,
 * and the plan API (run, run_local, training state) is unchanged.
 */
#ifndef KDC_RUNTIME_CUDA_RT_H
#define KDC_RUNTIME_CUDA_RT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kdc/status.h"

struct kdc_rt_plan;
struct rt_net;

/* The libraries a CUDA plan needs besides the driver: cuBLAS for GEMM
 * steps, NCCL for collectives. */
enum { RT_CUDA_LIB_BLAS = 1, RT_CUDA_LIB_NCCL = 2 };

/* NULL when this kdc can run the CUDA plan |path| here; otherwise why not:
 *   built without CUDA   KDC_UNSUPPORTED "plan.bin: this plan targets CUDA;
 *                        this kdc was built without CUDA (toolkit not found)"
 *   no driver / device   KDC_UNAVAILABLE "no CUDA device: cuInit failed: ..."
 *                        (`kdc run` exits 3).
 * The first call initialises the driver; |libs| (RT_CUDA_LIB_*, from
 * kdc_rt_cuda_plan_libs) are opened meanwhile on a second thread. */
kdc_status kdc_rt_cuda_available(const char *path, unsigned libs);
/* RT_CUDA_LIB_* that the steps of |prog| need. */
struct kdc_program;
unsigned kdc_rt_cuda_plan_libs(const struct kdc_program *prog);

/* ---- the GPUs this process can see (cuda/gpus.c; `kdc devices`) ------------------ */

enum { KDC_RT_MAX_GPUS = 64 };

typedef struct kdc_rt_gpu {
  int ordinal;
  char name[128];
  int cc_major, cc_minor;          /* compute capability */
  uint64_t memory_bytes;
} kdc_rt_gpu;

typedef struct kdc_rt_gpus {
  int n;                           /* 0: none, |why| says why */
  kdc_rt_gpu gpu[KDC_RT_MAX_GPUS];
  int driver_count;                /* what cuDeviceGetCount said (-1: not asked) */
  char why[600];
} kdc_rt_gpus;

/* The driver's answers as calls (cuda/api.c adapts libcuda.so.1; tests fake
 * them): each returns 0 (CUDA_SUCCESS) or the driver's error code, which
 * |error| names.  |unavailable| non-NULL: no usable driver at all, and why. */
typedef struct kdc_rt_gpu_driver {
  void *user;
  const char *unavailable;
  int (*count)(void *user, int *n);
  int (*name)(void *user, int ordinal, char *buf, int len);
  int (*capability)(void *user, int ordinal, int *major, int *minor);
  int (*memory)(void *user, int ordinal, uint64_t *bytes);
  const char *(*error)(void *user, int rc);
} kdc_rt_gpu_driver;

/* Asks |d| for every GPU (at most KDC_RT_MAX_GPUS); on any failure |out|
 * has no GPU and |why| names the call and the driver's error. */
void kdc_rt_gpus_list(const kdc_rt_gpu_driver *d, kdc_rt_gpus *out);
/* The GPUs of this machine through the real driver: built without CUDA,
 * no libcuda.so.1 or a failed cuInit give none with the reason.  Test hook:
 * KDC_TEST_FAKE_GPUS="NAME/MAJOR.MINOR/MIB;..." (or "error:CODE") answers
 * instead of the driver (tests/runtime/test_place.c, tests/e2e). */
void kdc_rt_gpus_query(kdc_rt_gpus *out);

/* The GPU ordinals of a process's |k| local devices (docs/gpu.md):
 * explicit local device ids (|ids|, |n_ids| > 0, named by |ids_from|)
 * must name k existing GPUs; otherwise local device i is GPU local_rank x
 * k + i, or, when those do not exist but the process sees exactly k GPUs
 * (a scheduler bound them: CUDA_VISIBLE_DEVICES, Slurm --gpus-per-task),
 * GPU i.  Errors name |plan|, the process and the GPUs (KDC_UNAVAILABLE,
 * KDC_INVALID_INPUT for a wrong explicit list). */
kdc_status kdc_rt_gpu_ordinals(const char *plan, int proc_id, const int *ids, int n_ids,
                               const char *ids_from, int local_rank, int64_t k, int count,
                               int *out);

/* ---- the executor (cuda/exec.c), called by runtime/ ---------------------------
 * Without the toolkit each fails with the "built without CUDA" message. */

/* Makes the GPU state of |p| (after rt_devices_create and the process
 * split): one context, stream, module, cuBLAS handle and memory block
 * (|arena_bytes| arena, weights, I/O, coordinates, collective scratch) per
 * local device, NCCL communicators, and re-points p->dev_weights at the
 * weights on the GPUs.  With several processes |net| (runtime/comm.h)
 * carries process 0's ncclUniqueId to the others.  Sets p->cuda. */
kdc_status rt_cuda_create(struct kdc_rt_plan *p, uint64_t arena_bytes, struct rt_net *net);
void rt_cuda_destroy(struct kdc_rt_plan *p);
/* Runs function |func| on this process's GPUs with the bound in_ptr /
 * out_ptr (host) or in_dev / out_dev (GPU) buffers; returns when every
 * result is on the host (bounded by the collective timeout). */
kdc_status rt_cuda_exec(struct kdc_rt_plan *p, size_t func);
/* GPU memory of local device |dev| (zeroed), and copies host <-> GPU. */
kdc_status rt_cuda_mem_alloc(struct kdc_rt_plan *p, int64_t dev, size_t bytes, void **out);
void rt_cuda_mem_free(struct kdc_rt_plan *p, int64_t dev, void *ptr);
kdc_status rt_cuda_mem_copy(struct kdc_rt_plan *p, int64_t dev, void *dst, const void *src,
                            size_t bytes, bool to_device);

/* Staged uploads (runtime/fit.c, docs/gpu.md "Staging"): pinned host
 * memory (cuMemHostAlloc), and copies host -> GPU of local device |dev| on
 * a second stream; |slot| (< RT_CUDA_STAGE_SLOTS) names the upload, whose
 * completion _wait makes the next run wait for (cuStreamWaitEvent: the
 * host does not wait).  A slot must not be uploaded again before the run
 * that read it has finished (fit's double buffering). */
enum { RT_CUDA_STAGE_SLOTS = 2 };
kdc_status rt_cuda_host_alloc(struct kdc_rt_plan *p, size_t bytes, void **out);
void rt_cuda_host_free(struct kdc_rt_plan *p, void *ptr);
kdc_status rt_cuda_upload_async(struct kdc_rt_plan *p, int64_t dev, void *dst, const void *src,
                                size_t bytes, int slot);
kdc_status rt_cuda_upload_wait(struct kdc_rt_plan *p, int64_t dev, int slot);
/* Waits (on the host) until every upload of local device |dev| is done. */
void rt_cuda_uploads_finish(struct kdc_rt_plan *p, int64_t dev);
/* Is function |func| replayed as a CUDA graph (KDC_CUDA_GRAPHS, graph.h)?
 * false with the reason in |why| (test and `kdc inspect` hook). */
bool rt_cuda_graphed(const struct kdc_rt_plan *p, size_t func, char *why, size_t why_len);
/* How many runs of |func| were one cuGraphLaunch so far (0 on the CPU). */
uint64_t rt_cuda_graph_launches(const struct kdc_rt_plan *p, size_t func);

#endif
