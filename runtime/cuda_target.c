/*
 * runtime/cuda_target.c: can this kdc run a CUDA plan here? (cuda_rt.h)
 *
 * Without the toolkit at build time the answer is a clear no.  With it, the
 * driver is opened with dlopen("libcuda.so.1") -- never linked, so kdc
 * starts on machines without a GPU driver -- and cuInit(0) plus
 * cuDeviceGetCount tell whether a device exists.
 */
#include <stdio.h>

#ifdef KDC_HAVE_CUDA
#include <dlfcn.h>
#endif

#include "runtime/cuda_rt.h"

#ifdef KDC_HAVE_CUDA
typedef int (*cu_init_fn)(unsigned);
typedef int (*cu_count_fn)(int *);
typedef int (*cu_errstr_fn)(int, const char **);

kdc_status kdc_rt_cuda_available(const char *path) {
  void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib)
    return KDC_ERR(KDC_UNAVAILABLE, "%s: no CUDA device: cuInit failed: the CUDA driver "
                   "(libcuda.so.1) cannot be loaded: %s", path, dlerror());
  cu_init_fn init = (cu_init_fn)dlsym(lib, "cuInit");
  cu_count_fn count = (cu_count_fn)dlsym(lib, "cuDeviceGetCount");
  cu_errstr_fn errstr = (cu_errstr_fn)dlsym(lib, "cuGetErrorString");
  int rc = init ? init(0) : -1, n = 0;
  const char *why = "cuInit not found in libcuda.so.1";
  if (rc > 0 && errstr) errstr(rc, &why);
  kdc_status st = NULL;
  if (rc != 0)
    st = KDC_ERR(KDC_UNAVAILABLE, "%s: no CUDA device: cuInit failed: %s (error %d)", path,
                 why ? why : "unknown error", rc);
  else if (!count || count(&n) != 0 || n < 1)
    st = KDC_ERR(KDC_UNAVAILABLE, "%s: no CUDA device: cuInit succeeded but the driver reports "
                 "%d devices", path, n);
  else  /* docs/gpu.md: the PTX is validated with ptxas; the executor is next */
    st = KDC_ERR(KDC_UNSUPPORTED, "%s: %d CUDA device(s) found, but this kdc cannot execute "
                 "CUDA plans yet (docs/gpu.md, \"Status\"); compile without --target cuda "
                 "to run on the CPU", path, n);
  dlclose(lib);
  return st;
}
#else
kdc_status kdc_rt_cuda_available(const char *path) {
  return KDC_ERR(KDC_UNSUPPORTED, "%s: this plan targets CUDA; this kdc was built without CUDA "
                 "(toolkit not found)", path);
}
#endif
