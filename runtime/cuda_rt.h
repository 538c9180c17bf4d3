/*
 * runtime/cuda_rt.h: running plans compiled with `kdc compile --target
 * cuda` (docs/gpu.md).
 *
 * Such a plan carries the PTX of every kernel (PTX section) and its launch
 * table (CUDA section) next to the CPU code.  The CUDA runtime is built when
 * the toolkit is found (KDC_WITH_CUDA, KDC_HAVE_CUDA); it loads the driver
 * (libcuda.so.1), cuBLAS and NCCL with dlopen at run time, so one kdc
 * binary starts on machines with and without a GPU.
 */
#ifndef KDC_RUNTIME_CUDA_RT_H
#define KDC_RUNTIME_CUDA_RT_H

#include "kdc/status.h"

/* NULL when this kdc can run the CUDA plan |path| here; otherwise why not:
 *   built without CUDA   KDC_UNSUPPORTED "plan.bin: this plan targets CUDA;
 *                        this kdc was built without CUDA (toolkit not found)"
 *   no driver / device   KDC_UNAVAILABLE "no CUDA device: cuInit failed: ..."
 *                        (`kdc run` exits 3). */
kdc_status kdc_rt_cuda_available(const char *path);

#endif
