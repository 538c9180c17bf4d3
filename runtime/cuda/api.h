/*
 * runtime/cuda/api.h: the CUDA driver, cuBLAS and NCCL, opened with dlopen
 * at run time (docs/gpu.md, "Linking").
 *
 * kdc is linked against none of them, so one binary starts on machines
 * with and without a GPU, a driver or the toolkit's libraries.  Each entry
 * point is a pointer typed from the toolkit's own prototype and looked up
 * under the name the header maps it to (cuMemAlloc -> cuMemAlloc_v2,
 * cublasCreate -> cublasCreate_v2).  Only built with the toolkit
 * (KDC_HAVE_CUDA).
 */
#ifndef KDC_RUNTIME_CUDA_API_H
#define KDC_RUNTIME_CUDA_API_H

#include <stdbool.h>

#include <cuda.h>
#include <cublas_v2.h>
#include <nccl.h>

#include "kdc/status.h"
#include "runtime/cuda/cuda_rt.h"  /* RT_CUDA_LIB_* */

#define RT_CU_DRIVER(X)                                                                       \
  X(cuInit) X(cuGetErrorString) X(cuDeviceGetCount) X(cuDeviceGet) X(cuDeviceGetAttribute)    \
  X(cuDeviceGetName) X(cuDeviceTotalMem)                                                      \
  X(cuDevicePrimaryCtxRetain) X(cuDevicePrimaryCtxRelease) X(cuCtxSetCurrent)                 \
  X(cuStreamCreate) X(cuStreamDestroy) X(cuStreamSynchronize) X(cuStreamQuery)                \
  X(cuModuleLoadDataEx) X(cuModuleUnload) X(cuModuleGetFunction) X(cuLaunchKernel)            \
  X(cuMemAlloc) X(cuMemFree) X(cuMemcpyHtoDAsync) X(cuMemcpyDtoHAsync) X(cuMemcpyDtoDAsync)   \
  X(cuMemcpy2DAsync) X(cuMemsetD8Async)                                                      \
  X(cuMemHostAlloc) X(cuMemFreeHost) X(cuEventCreate) X(cuEventDestroy) X(cuEventRecord)     \
  X(cuStreamWaitEvent) X(cuStreamBeginCapture) X(cuStreamEndCapture) X(cuGraphInstantiate)   \
  X(cuGraphLaunch) X(cuGraphDestroy) X(cuGraphExecDestroy)
#define RT_CU_BLAS(X)                                                                         \
  X(cublasCreate) X(cublasDestroy) X(cublasSetStream) X(cublasSetMathMode)                    \
  X(cublasSgemmStridedBatched) X(cublasGemmStridedBatchedEx) X(cublasGetStatusString)       \
  X(cublasSetWorkspace)
#define RT_CU_NCCL(X)                                                                         \
  X(ncclGetVersion) X(ncclGetUniqueId) X(ncclCommInitRank) X(ncclCommInitAll) X(ncclCommSplit) \
  X(ncclCommDestroy) X(ncclCommAbort) X(ncclAllReduce) X(ncclAllGather) X(ncclReduceScatter)  \
  X(ncclSend) X(ncclRecv) X(ncclGroupStart) X(ncclGroupEnd) X(ncclGetErrorString)

typedef struct rt_cuda_api {
#define RT_CU_FIELD(f) __typeof__(&f) f;
  RT_CU_DRIVER(RT_CU_FIELD)
  RT_CU_BLAS(RT_CU_FIELD)
  RT_CU_NCCL(RT_CU_FIELD)
#undef RT_CU_FIELD
  /* optional (CUDA >= 12.4 drivers): the kernels' parameter count is checked with it */
  __typeof__(&cuFuncGetParamInfo) cuFuncGetParamInfo;
  bool has_blas, has_nccl;
} rt_cuda_api;

/* The process-wide table (loaded once, never unloaded): the driver, opened
 * and cuInit'ed by the first call.  KDC_UNAVAILABLE "no CUDA device: cuInit
 * failed: ..." when the driver cannot be opened or cuInit fails; |path|
 * names the plan.  |libs| (RT_CUDA_LIB_*): the libraries the caller will
 * ask rt_cuda_api_libs for; the first call opens them on a second thread
 * while cuInit runs (docs/gpu.md, "Start-up"). */
kdc_status rt_cuda_api_get(const char *path, unsigned libs, const rt_cuda_api **out);
/* Makes sure cuBLAS / NCCL (|libs|) were tried, after rt_cuda_api_get
 * succeeded: |has_blas|, |has_nccl| say whether they loaded, _blas_error /
 * _nccl_error why not.  A plan that needs a missing one fails at load
 * naming it; nothing else opens them (`kdc devices` needs neither). */
void rt_cuda_api_libs(unsigned libs);
/* Test hook: opens the three libraries at these paths and looks up every
 * entry point kdc uses, as the loader does, without calling any (no
 * cuInit: the toolkit's link-time libcuda.so will do);
 * NULL when all resolve.  The libraries stay loaded. */
kdc_status rt_cuda_api_resolve(const char *driver, const char *blas, const char *nccl);
/* Why cuBLAS / NCCL could not be loaded ("" when they were). */
const char *rt_cuda_api_blas_error(void);
const char *rt_cuda_api_nccl_error(void);

#endif
