/*
 * runtime/cuda/target.c: can this kdc run a CUDA plan here? (cuda_rt.h)
 *
 * Without the toolkit at build time the answer is a clear no, and the
 * executor's entry points fail with the same message.  With it, the driver
 * is opened with dlopen (cuda/api.c: never linked, so kdc starts on
 * machines without a GPU driver) and cuInit(0) plus cuDeviceGetCount tell
 * whether a device exists.
 */
#include <stdio.h>

#include "runtime/cuda/cuda_rt.h"
#include "runtime/runtime.h"

unsigned kdc_rt_cuda_plan_libs(const kdc_program *prog) {
  unsigned libs = 0;
  for (uint32_t f = 0; f < prog->n_funcs; f++)
    for (uint32_t s = 0; s < prog->funcs[f].n_steps; s++) {
      kdc_prog_step_kind k = prog->funcs[f].steps[s].kind;
      if (k == KDC_STEP_GEMM) libs |= RT_CUDA_LIB_BLAS;
      if (k == KDC_STEP_COLLECTIVE) libs |= RT_CUDA_LIB_NCCL;
    }
  return libs;
}

#ifdef KDC_HAVE_CUDA
#include "runtime/cuda/api.h"

kdc_status kdc_rt_cuda_available(const char *path, unsigned libs) {
  const rt_cuda_api *api;
  KDC_RETURN_IF_ERROR(rt_cuda_api_get(path, libs, &api));
  int n = 0;
  if (api->cuDeviceGetCount(&n) != CUDA_SUCCESS || n < 1)
    return KDC_ERR(KDC_UNAVAILABLE, "%s: no CUDA device: cuInit succeeded but the driver reports "
                   "%d devices", path, n);
  return NULL;
}
#else
static kdc_status no_cuda(const char *path) {
  return KDC_ERR(KDC_UNSUPPORTED, "%s: this plan targets CUDA; this kdc was built without CUDA "
                 "(toolkit not found)", path);
}

kdc_status kdc_rt_cuda_available(const char *path, unsigned libs) {
  (void)libs;
  return no_cuda(path);
}

kdc_status rt_cuda_create(struct kdc_rt_plan *p, uint64_t arena_bytes, struct rt_net *net) {
  (void)arena_bytes, (void)net;
  return no_cuda(p->path);
}

void rt_cuda_destroy(struct kdc_rt_plan *p) { (void)p; }

kdc_status rt_cuda_exec(struct kdc_rt_plan *p, size_t func) {
  (void)func;
  return no_cuda(p->path);
}

kdc_status rt_cuda_mem_alloc(struct kdc_rt_plan *p, int64_t dev, size_t bytes, void **out) {
  (void)dev, (void)bytes;
  *out = NULL;
  return no_cuda(p->path);
}

void rt_cuda_mem_free(struct kdc_rt_plan *p, int64_t dev, void *ptr) { (void)p, (void)dev, (void)ptr; }

kdc_status rt_cuda_mem_copy(struct kdc_rt_plan *p, int64_t dev, void *dst, const void *src,
                            size_t bytes, bool to_device) {
  (void)dev, (void)dst, (void)src, (void)bytes, (void)to_device;
  return no_cuda(p->path);
}

kdc_status rt_cuda_host_alloc(struct kdc_rt_plan *p, size_t bytes, void **out) {
  (void)bytes;
  *out = NULL;
  return no_cuda(p->path);
}

void rt_cuda_host_free(struct kdc_rt_plan *p, void *ptr) { (void)p, (void)ptr; }

kdc_status rt_cuda_upload_async(struct kdc_rt_plan *p, int64_t dev, void *dst, const void *src,
                                size_t bytes, int slot) {
  (void)dev, (void)dst, (void)src, (void)bytes, (void)slot;
  return no_cuda(p->path);
}

kdc_status rt_cuda_upload_wait(struct kdc_rt_plan *p, int64_t dev, int slot) {
  (void)dev, (void)slot;
  return no_cuda(p->path);
}

void rt_cuda_uploads_finish(struct kdc_rt_plan *p, int64_t dev) { (void)p, (void)dev; }

uint64_t rt_cuda_graph_launches(const struct kdc_rt_plan *p, size_t func) {
  (void)p, (void)func;
  return 0;
}

bool rt_cuda_graphed(const struct kdc_rt_plan *p, size_t func, char *why, size_t why_len) {
  (void)p, (void)func;
  snprintf(why, why_len, "this kdc was built without CUDA");
  return false;
}
#endif
