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

/* NULL when this kdc can run the CUDA plan |path| here; otherwise why not:
 *   built without CUDA   KDC_UNSUPPORTED "plan.bin: this plan targets CUDA;
 *                        this kdc was built without CUDA (toolkit not found)"
 *   no driver / device   KDC_UNAVAILABLE "no CUDA device: cuInit failed: ..."
 *                        (`kdc run` exits 3). */
kdc_status kdc_rt_cuda_available(const char *path);

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

#endif
