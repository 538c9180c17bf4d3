/*
 * runtime/cuda/gpus.c: the GPUs the driver sees and which of them a
 * process's devices use (cuda_rt.h; `kdc devices`, cuda/exec.c).  Built in
 * every configuration: the driver is reached through kdc_rt_gpu_driver,
 * adapted here from the dlopen'ed libcuda (cuda/api.c) in CUDA builds.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/cuda/cuda_rt.h"
#ifdef KDC_HAVE_CUDA
#include "runtime/cuda/api.h"
#endif

void kdc_rt_gpus_list(const kdc_rt_gpu_driver *d, kdc_rt_gpus *out) {
  memset(out, 0, sizeof *out);
  out->driver_count = -1;
  if (d->unavailable) {
    snprintf(out->why, sizeof out->why, "%s", d->unavailable);
    return;
  }
  int n = 0, rc = d->count(d->user, &n);
  const char *call = "cuDeviceGetCount";
  if (!rc) out->driver_count = n;
  if (!rc && n == 0) {
    snprintf(out->why, sizeof out->why, "the CUDA driver loaded and reports 0 GPUs");
    return;
  }
  for (int i = 0; !rc && i < n && i < KDC_RT_MAX_GPUS; i++) {
    kdc_rt_gpu *g = &out->gpu[i];
    g->ordinal = i;
    if ((rc = d->name(d->user, i, g->name, (int)sizeof g->name))) call = "cuDeviceGetName";
    else if ((rc = d->capability(d->user, i, &g->cc_major, &g->cc_minor)))
      call = "cuDeviceGetAttribute (compute capability)";
    else if ((rc = d->memory(d->user, i, &g->memory_bytes))) call = "cuDeviceTotalMem";
    g->name[sizeof g->name - 1] = 0;
    if (!rc) out->n = i + 1;
  }
  if (rc) {
    const char *e = d->error ? d->error(d->user, rc) : NULL;
    snprintf(out->why, sizeof out->why, "%s failed: %s (error %d)", call, e ? e : "unknown error", rc);
    out->n = 0;
  } else if (n > KDC_RT_MAX_GPUS) {
    snprintf(out->why, sizeof out->why, "the driver reports %d GPUs; the first %d are listed", n,
             KDC_RT_MAX_GPUS);
  }
}

/* ---- the fake driver: KDC_TEST_FAKE_GPUS ------------------------------------------
 * "NAME/MAJOR.MINOR/MIB;..." (";"-separated GPUs) answers as the driver
 * would; "error:CODE" makes cuDeviceGetCount fail with CODE;
 * "unavailable:TEXT" is a driver that cannot be loaded. */

typedef struct fake {
  int n, fail;
  kdc_rt_gpu gpu[KDC_RT_MAX_GPUS];
} fake;

static int fake_count(void *u, int *n) {
  fake *f = u;
  *n = f->n;
  return f->fail;
}

static int fake_name(void *u, int i, char *buf, int len) {
  snprintf(buf, (size_t)len, "%s", ((fake *)u)->gpu[i].name);
  return 0;
}

static int fake_cap(void *u, int i, int *major, int *minor) {
  *major = ((fake *)u)->gpu[i].cc_major, *minor = ((fake *)u)->gpu[i].cc_minor;
  return 0;
}

static int fake_mem(void *u, int i, uint64_t *bytes) {
  *bytes = ((fake *)u)->gpu[i].memory_bytes;
  return 0;
}

static const char *fake_error(void *u, int rc) {
  (void)u;
  return rc == 100 ? "no CUDA-capable device is detected" : "fake driver error";
}

static void fake_parse(const char *spec, fake *f, kdc_rt_gpu_driver *d) {
  memset(f, 0, sizeof *f);
  if (!strncmp(spec, "unavailable:", 12)) {
    d->unavailable = spec + 12;
    return;
  }
  if (!strncmp(spec, "error:", 6)) {
    f->fail = atoi(spec + 6);
    return;
  }
  for (const char *s = spec; *s && f->n < KDC_RT_MAX_GPUS;) {
    kdc_rt_gpu *g = &f->gpu[f->n++];
    size_t len = strcspn(s, "/;");
    snprintf(g->name, sizeof g->name, "%.*s", (int)len, s);
    s += len;
    unsigned long long mib = 0;
    if (*s == '/') sscanf(s + 1, "%d.%d/%llu", &g->cc_major, &g->cc_minor, &mib);
    g->memory_bytes = mib << 20;
    s += strcspn(s, ";");
    if (*s == ';') s++;
  }
}

/* ---- the real driver --------------------------------------------------------------- */

#ifdef KDC_HAVE_CUDA
static int cu_count(void *u, int *n) { return (int)((const rt_cuda_api *)u)->cuDeviceGetCount(n); }

static int cu_name(void *u, int i, char *buf, int len) {
  const rt_cuda_api *api = u;
  CUdevice dev;
  CUresult rc = api->cuDeviceGet(&dev, i);
  return (int)(rc ? rc : api->cuDeviceGetName(buf, len, dev));
}

static int cu_cap(void *u, int i, int *major, int *minor) {
  const rt_cuda_api *api = u;
  CUdevice dev;
  CUresult rc = api->cuDeviceGet(&dev, i);
  if (!rc) rc = api->cuDeviceGetAttribute(major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev);
  if (!rc) rc = api->cuDeviceGetAttribute(minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev);
  return (int)rc;
}

static int cu_mem(void *u, int i, uint64_t *bytes) {
  const rt_cuda_api *api = u;
  CUdevice dev;
  size_t b = 0;
  CUresult rc = api->cuDeviceGet(&dev, i);
  if (!rc) rc = api->cuDeviceTotalMem(&b, dev);
  *bytes = b;
  return (int)rc;
}

static const char *cu_error(void *u, int rc) {
  const char *s = NULL;
  ((const rt_cuda_api *)u)->cuGetErrorString((CUresult)rc, &s);
  return s;
}
#endif

void kdc_rt_gpus_query(kdc_rt_gpus *out) {
  kdc_rt_gpu_driver d;
  memset(&d, 0, sizeof d);
  const char *spec = getenv("KDC_TEST_FAKE_GPUS");
  fake f;
  char why[600];
  if (spec) {
    fake_parse(spec, &f, &d);
    d.user = &f, d.count = fake_count, d.name = fake_name, d.capability = fake_cap;
    d.memory = fake_mem, d.error = fake_error;
    kdc_rt_gpus_list(&d, out);
    return;
  }
#ifdef KDC_HAVE_CUDA
  const rt_cuda_api *api = NULL;
  kdc_status st = rt_cuda_api_get("CUDA", 0, &api);
  if (st) {
    const char *m = kdc_status_message(st), *tail = strstr(m, "no CUDA device: ");
    snprintf(why, sizeof why, "%s", tail ? tail + strlen("no CUDA device: ") : m);
    kdc_status_free(st);
    d.unavailable = why;
  } else {
    d.user = (void *)api, d.count = cu_count, d.name = cu_name, d.capability = cu_cap;
    d.memory = cu_mem, d.error = cu_error;
  }
#else
  snprintf(why, sizeof why, "this kdc was built without CUDA (the toolkit's headers were not "
           "found at build time)");
  d.unavailable = why;
#endif
  kdc_rt_gpus_list(&d, out);
}

kdc_status kdc_rt_gpu_ordinals(const char *plan, int proc_id, const int *ids, int n_ids,
                               const char *ids_from, int local_rank, int64_t k, int count,
                               int *out) {
  if (n_ids > 0) {
    if (n_ids != k)
      return KDC_ERR(KDC_INVALID_INPUT, "%s: process %d runs %lld devices of the mesh but the "
                     "local device ids (%s) name %d GPU(s): give one GPU per device", plan,
                     proc_id, (long long)k, ids_from, n_ids);
    for (int i = 0; i < n_ids; i++) {
      if (ids[i] >= count)
        return KDC_ERR(KDC_UNAVAILABLE, "%s: no CUDA device: GPU %d (local device ids, %s) does "
                       "not exist: the driver reports %d GPU(s)", plan, ids[i], ids_from, count);
      out[i] = ids[i];
    }
    return NULL;
  }
  int64_t base = (int64_t)local_rank * k;
  if (base + k <= count) {
    for (int64_t i = 0; i < k; i++) out[i] = (int)(base + i);
    return NULL;
  }
  if (count == k) {  /* the process sees exactly its GPUs (a scheduler bound them) */
    for (int64_t i = 0; i < k; i++) out[i] = (int)i;
    return NULL;
  }
  return KDC_ERR(KDC_UNAVAILABLE, "%s: no CUDA device: process %d runs %lld devices of the mesh "
                 "on GPUs %lld..%lld (local rank %d), but the driver reports %d GPU(s)", plan,
                 proc_id, (long long)k, (long long)base, (long long)(base + k - 1), local_rank,
                 count);
}
