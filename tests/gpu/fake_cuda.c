/*
 * tests/gpu/fake_cuda.c: a stand-in libcuda.so.1 for host tests of the
 * executor's load path (test_fake_driver.c).  It exports every driver entry
 * point kdc looks up (runtime/cuda/api.h, under the header's renamed
 * symbols), reports one GPU, gives "device" memory from the heap and copies
 * with memcpy; launches do nothing, so results are NOT computed -- the
 * tests check which code the executor loads and in what order, never
 * values.  Environment:
 *   FAKE_CUDA_CC=MAJOR.MINOR   compute capability (default 9.0)
 *   FAKE_CUDA_NO_CUBIN=1       cuModuleLoadDataEx refuses ELF images (209,
 *                              no binary for this GPU), as an old driver would
 * Written without cuda.h: the driver's ABI is plain C (ints, pointers,
 * 64-bit device pointers).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef unsigned long long dptr;
#define OK 0
#define API __attribute__((visibility("default")))

static int cc(int minor) {
  const char *e = getenv("FAKE_CUDA_CC");
  int ma = 9, mi = 0;
  if (e) sscanf(e, "%d.%d", &ma, &mi);
  return minor ? mi : ma;
}

API int cuInit(unsigned flags) { (void)flags; return OK; }
API int cuGetErrorString(int rc, const char **s) {
  *s = rc == 209 ? "no kernel image is available for execution on the device (fake)"
                 : "fake driver error";
  return OK;
}
API int cuDeviceGetCount(int *n) { *n = 1; return OK; }
API int cuDeviceGet(int *d, int ordinal) { *d = ordinal; return OK; }
API int cuDeviceGetAttribute(int *v, int attr, int dev) {
  (void)dev;
  *v = attr == 75 ? cc(0) : attr == 76 ? cc(1) : attr == 11 ? 0x7fffffff : 0;
  return OK;
}
API int cuDeviceGetName(char *buf, int len, int dev) {
  snprintf(buf, (size_t)len, "Fake GPU %d", dev);
  return OK;
}
API int cuDeviceTotalMem_v2(size_t *b, int dev) { (void)dev; *b = (size_t)80 << 30; return OK; }
API int cuDevicePrimaryCtxRetain(void **ctx, int dev) { (void)dev; *ctx = (void *)0x10; return OK; }
API int cuDevicePrimaryCtxRelease_v2(int dev) { (void)dev; return OK; }
API int cuCtxSetCurrent(void *ctx) { (void)ctx; return OK; }
API int cuStreamCreate(void **s, unsigned f) { (void)f; *s = (void *)0x20; return OK; }
API int cuStreamDestroy_v2(void *s) { (void)s; return OK; }
API int cuStreamSynchronize(void *s) { (void)s; return OK; }
API int cuStreamQuery(void *s) { (void)s; return OK; }
API int cuModuleLoadDataEx(void **mod, const void *image, unsigned n, void *opt, void **val) {
  (void)n, (void)opt, (void)val;
  const char *no = getenv("FAKE_CUDA_NO_CUBIN");
  if (!memcmp(image, "\177ELF", 4) && no && *no == '1') return 209;
  *mod = (void *)0x30;
  return OK;
}
API int cuModuleUnload(void *m) { (void)m; return OK; }
API int cuModuleGetFunction(void **f, void *m, const char *name) {
  (void)m, (void)name;
  *f = (void *)0x40;
  return OK;
}
API int cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                       unsigned bz, unsigned shared, void *s, void **params, void **extra) {
  (void)f, (void)gx, (void)gy, (void)gz, (void)bx, (void)by, (void)bz, (void)shared, (void)s;
  (void)params, (void)extra;
  return OK;
}
API int cuMemAlloc_v2(dptr *p, size_t n) {
  void *m = calloc(1, n ? n : 1);
  *p = (dptr)(uintptr_t)m;
  return m ? OK : 2;
}
API int cuMemFree_v2(dptr p) { free((void *)(uintptr_t)p); return OK; }
API int cuMemcpyHtoDAsync_v2(dptr d, const void *s, size_t n, void *st) {
  (void)st;
  memcpy((void *)(uintptr_t)d, s, n);
  return OK;
}
API int cuMemcpyDtoHAsync_v2(void *d, dptr s, size_t n, void *st) {
  (void)st;
  memcpy(d, (const void *)(uintptr_t)s, n);
  return OK;
}
API int cuMemcpyDtoDAsync_v2(dptr d, dptr s, size_t n, void *st) {
  (void)st;
  memmove((void *)(uintptr_t)d, (const void *)(uintptr_t)s, n);
  return OK;
}
API int cuMemcpy2DAsync_v2(const void *m, void *st) { (void)m, (void)st; return OK; }
API int cuMemsetD8Async(dptr d, unsigned char c, size_t n, void *st) {
  (void)st;
  memset((void *)(uintptr_t)d, c, n);
  return OK;
}
API int cuMemHostAlloc(void **p, size_t n, unsigned f) {
  (void)f;
  *p = malloc(n ? n : 1);
  return *p ? OK : 2;
}
API int cuMemFreeHost(void *p) { free(p); return OK; }
API int cuEventCreate(void **e, unsigned f) { (void)f; *e = (void *)0x50; return OK; }
API int cuEventDestroy_v2(void *e) { (void)e; return OK; }
API int cuEventRecord(void *e, void *s) { (void)e, (void)s; return OK; }
API int cuStreamWaitEvent(void *s, void *e, unsigned f) { (void)s, (void)e, (void)f; return OK; }
/* no graphs: capture is "not supported" (801), the executor launches step by step */
API int cuStreamBeginCapture_v2(void *s, int mode) { (void)s, (void)mode; return 801; }
API int cuStreamEndCapture(void *s, void **g) { (void)s, (void)g; return 801; }
API int cuGraphInstantiateWithFlags(void **e, void *g, unsigned long long f) {
  (void)e, (void)g, (void)f;
  return 801;
}
API int cuGraphLaunch(void *e, void *s) { (void)e, (void)s; return 801; }
API int cuGraphDestroy(void *g) { (void)g; return OK; }
API int cuGraphExecDestroy(void *e) { (void)e; return OK; }
