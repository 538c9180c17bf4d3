/*
 * runtime/cuda/api.c: dlopen of libcuda.so.1, libcublas and libnccl (api.h).
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common/trace.h"
#include "runtime/cuda/api.h"
#include "runtime/cuda/libdirs.h"

#define RT_STR(x) #x
#define RT_XSTR(x) RT_STR(x)  /* expands the header's renames first */

#ifndef KDC_CUDA_LIBDIR
#define KDC_CUDA_LIBDIR "/usr/local/cuda/lib64"
#endif

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static rt_cuda_api api;
static int state;            /* 0 not tried, 1 loaded, -1 failed */
static char why[512], blas_why[512], nccl_why[512];

/* The first of |names| that opens by name (LD_LIBRARY_PATH, ld.so.cache),
 * else from the toolkit's or NVIDIA's pip wheels' folders (libdirs.h);
 * NULL with the first dlerror in |err|. */
static void *open_lib(const char *const *names, char *err, size_t n) {
  for (int i = 0; names[i]; i++) {
    void *h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (h) return h;
    if (i == 0) snprintf(err, n, "%s", dlerror());
  }
  char **dirs = NULL;
  size_t nd = rt_cuda_lib_dirs(KDC_CUDA_LIBDIR, &dirs);
  void *h = NULL;
  for (size_t d = 0; d < nd && !h; d++)
    for (int i = 0; names[i] && !h; i++) {
      char full[4096];
      snprintf(full, sizeof full, "%s/%s", dirs[d], names[i]);
      if (access(full, F_OK) == 0) h = dlopen(full, RTLD_NOW | RTLD_LOCAL);
    }
  rt_cuda_lib_dirs_free(dirs, nd);
  return h;
}

/* Looks up every symbol of one library into |t|; false (reason in |err|)
 * on the first missing. */
#define RT_CU_LOOKUP(f)                                                              \
  if (ok && !(t->f = (__typeof__(t->f))dlsym(h, RT_XSTR(f)))) {                     \
    snprintf(err, n, "%s: symbol %s not found", lib, RT_XSTR(f));                    \
    ok = false;                                                                      \
  }

static bool load_driver(rt_cuda_api *t, void *h, const char *lib, char *err, size_t n) {
  bool ok = true;
  RT_CU_DRIVER(RT_CU_LOOKUP)
  t->cuFuncGetParamInfo = (__typeof__(t->cuFuncGetParamInfo))dlsym(h, "cuFuncGetParamInfo");
  return ok;
}

static bool load_blas(rt_cuda_api *t, void *h, const char *lib, char *err, size_t n) {
  bool ok = true;
  RT_CU_BLAS(RT_CU_LOOKUP)
  return ok;
}

static bool load_nccl(rt_cuda_api *t, void *h, const char *lib, char *err, size_t n) {
  bool ok = true;
  RT_CU_NCCL(RT_CU_LOOKUP)
  return ok;
}
#undef RT_CU_LOOKUP

kdc_status rt_cuda_api_resolve(const char *driver, const char *blas, const char *nccl) {
  rt_cuda_api t;
  memset(&t, 0, sizeof t);
  const char *const path[3] = {driver, blas, nccl};
  bool (*const load_fn[3])(rt_cuda_api *, void *, const char *, char *, size_t) = {
      load_driver, load_blas, load_nccl};
  for (int i = 0; i < 3; i++) {
    char err[400];
    void *h = dlopen(path[i], RTLD_NOW | RTLD_LOCAL);
    if (!h) return KDC_ERR(KDC_UNAVAILABLE, "%s: %s", path[i], dlerror());
    bool ok = load_fn[i](&t, h, path[i], err, sizeof err);
    /* never dlclose'd, like the loader's: cuBLAS and NCCL keep allocations
     * from their static initialisers that an unload would leak */
    if (!ok) return KDC_ERR(KDC_UNAVAILABLE, "%s", err);
  }
  return NULL;
}

static const char *const blas_names[] = {"libcublas.so.13", "libcublas.so.12", "libcublas.so",
                                         NULL};
static const char *const nccl_names[] = {"libnccl.so.2", "libnccl.so", NULL};

/* cuBLAS and NCCL are opened only for a plan that needs them
 * (rt_cuda_api_libs): libcublas with its libcublasLt and libnccl are
 * hundreds of MB to map and relocate.  |tried| says which were tried. */
static unsigned tried;
static pthread_t preload;
static bool preloading;

static void load_libs(unsigned libs, bool bg) {
  char err[400] = "";
  if ((libs & RT_CUDA_LIB_BLAS) && !(tried & RT_CUDA_LIB_BLAS)) {
    tried |= RT_CUDA_LIB_BLAS;
    void *b = open_lib(blas_names, err, sizeof err);
    if (!b) snprintf(blas_why, sizeof blas_why, "cuBLAS cannot be loaded: %s", err);
    else if (!(api.has_blas = load_blas(&api, b, "libcublas", err, sizeof err)))
      snprintf(blas_why, sizeof blas_why, "%s", err);
    kdc_trace("cuBLAS %s (dlopen libcublas + libcublasLt%s)", api.has_blas ? "loaded" : "missing",
              bg ? ", on a second thread during cuInit" : "");
  }
  if ((libs & RT_CUDA_LIB_NCCL) && !(tried & RT_CUDA_LIB_NCCL)) {
    tried |= RT_CUDA_LIB_NCCL;
    void *c = open_lib(nccl_names, err, sizeof err);
    if (!c) snprintf(nccl_why, sizeof nccl_why, "NCCL cannot be loaded: %s", err);
    else if (!(api.has_nccl = load_nccl(&api, c, "libnccl", err, sizeof err)))
      snprintf(nccl_why, sizeof nccl_why, "%s", err);
    kdc_trace("NCCL %s (dlopen libnccl%s)", api.has_nccl ? "loaded" : "missing",
              bg ? ", on a second thread during cuInit" : "");
  }
}

static void *preload_main(void *libs) {
  load_libs((unsigned)(uintptr_t)libs, true);
  return NULL;
}

/* Waits for the libraries opened during cuInit (under |lock|). */
static void preload_join(void) {
  if (!preloading) return;
  pthread_join(preload, NULL);
  preloading = false;
}

static void load(unsigned libs) {
  static const char *const cu[] = {"libcuda.so.1", NULL};
  char err[400] = "";
  void *h = open_lib(cu, err, sizeof err);
  if (!h) {
    snprintf(why, sizeof why, "the CUDA driver (libcuda.so.1) cannot be loaded: %s", err);
    state = -1;
    return;
  }
  if (!load_driver(&api, h, "libcuda.so.1", err, sizeof err)) {
    snprintf(why, sizeof why, "%s", err);
    state = -1;
    return;
  }
  kdc_trace("CUDA driver loaded (dlopen libcuda.so.1)");
  /* the plan's libraries load while the driver initialises (cuInit is
   * mostly the kernel driver's work; a dlopen needs no CUDA call) */
  preloading = libs && !pthread_create(&preload, NULL, preload_main, (void *)(uintptr_t)libs);
  CUresult rc = api.cuInit(0);
  kdc_trace("cuInit (%s)", rc == CUDA_SUCCESS ? "ok" : "failed");
  if (rc != CUDA_SUCCESS) {
    preload_join();
    const char *s = NULL;
    api.cuGetErrorString(rc, &s);
    snprintf(why, sizeof why, "%s (error %d)", s ? s : "unknown error", (int)rc);
    state = -1;
    return;
  }
  state = 1;
}

kdc_status rt_cuda_api_get(const char *path, unsigned libs, const rt_cuda_api **out) {
  *out = NULL;
  pthread_mutex_lock(&lock);
  if (state == 0) load(libs);
  pthread_mutex_unlock(&lock);
  if (state < 0)
    return KDC_ERR(KDC_UNAVAILABLE, "%s: no CUDA device: cuInit failed: %s", path, why);
  *out = &api;
  return NULL;
}

void rt_cuda_api_libs(unsigned libs) {
  pthread_mutex_lock(&lock);
  bool waited = preloading;
  preload_join();
  if (waited) kdc_trace("second thread joined (the libraries it opened are ready)");
  if (state == 1) load_libs(libs, false);
  pthread_mutex_unlock(&lock);
}

const char *rt_cuda_api_blas_error(void) { return blas_why; }
const char *rt_cuda_api_nccl_error(void) { return nccl_why; }
