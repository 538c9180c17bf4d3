/*
 * runtime/cuda/exec.c: the CUDA executor (cuda_rt.h, docs/gpu.md).
 *
 * NEVER EXECUTED ON A GPU: no machine kdc is developed on has one.  It is
 * compiled with -Werror against CUDA 13's headers; its host-side planning
 * (cuda/host.c) is unit-tested; tests/gpu/test_gpu_exec.c compares it with
 * the CPU on a machine with a GPU and skips here.
 *
 * Per local device (mesh devices [p->d0, p->d1) of this process, GPU
 * ordinal from kdc_rt_gpu_ordinals: the local device ids, else local rank
 * on the host x devices per process + index):
 *   - the primary context (shared with cuBLAS and NCCL, which use the
 *     runtime API), one non-blocking stream: every operation of a run is
 *     stream-ordered on it, and the run ends with one poll of all streams
 *     bounded by the collective timeout;
 *   - the plan's PTX loaded with cuModuleLoadDataEx (error and info logs
 *     into buffers, quoted on failure), cuModuleGetFunction per kernel;
 *   - one cuMemAlloc block (never managed memory): the arena, every weight
 *     piece (replicas too: each GPU holds its own), the I/O buffers of the
 *     largest function, the mesh coordinates (i64 per axis, the kernels'
 *     last parameter) and the collective scratch;
 *   - a cuBLAS handle on the stream, its workspace ours (capture-safe),
 *     TF32 tensor cores only for a plan compiled with --matmul-precision tf32.
 * Steps: KERNEL = cuLaunchKernel(grid, block) of the launch table with the
 * resolved buffer addresses + coordinates; GEMM =
 * cublasSgemmStridedBatched with host.c's column-major mapping; COPY =
 * cuMemcpyDtoDAsync (through scratch when the ranges overlap); COLLECTIVE
 * = host.c's plan: block copies (cuMemcpy2DAsync), then the NCCL calls of
 * every local device in one ncclGroupStart/End, then block copies.
 * Communicators: the world (rank = mesh device id; ncclCommInitAll in one
 * process, ncclCommInitRank with process 0's ncclUniqueId otherwise), and
 * one ncclCommSplit per distinct axes list (color = group, key = index).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <json-c/json.h>

#include "common/trace.h"
#include "runtime/cuda/api.h"
#include "runtime/cuda/cuda_rt.h"
#include "runtime/cuda/graph.h"
#include "runtime/cuda/host.h"
#include "runtime/comm.h"
#include "runtime/place.h"
#include "runtime/runtime.h"

enum { ALIGN = 256, LOG_BYTES = 8192, MAX_PARAMS = 66 };

typedef struct cu_dev {
  int64_t id;                 /* mesh device */
  int ordinal;
  CUdevice dev;
  CUcontext ctx;
  CUstream stream;
  CUmodule mod;
  CUfunction *fn;             /* per kernel */
  cublasHandle_t blas;
  ncclComm_t world;
  ncclComm_t *split;          /* per split (== world for a world split) */
  CUdeviceptr mem, arena, coords, scratch, io, blas_ws;
  CUdeviceptr red;            /* split reductions' counters and partials, zeroed once */
  int max_pitch;
  size_t blas_ws_bytes;       /* cuBLAS's workspace (cublasSetWorkspace: capture-safe) */
  CUstream copy;              /* staged uploads (cuda_rt.h), made on first use */
  CUevent staged[RT_CUDA_STAGE_SLOTS];
  rt_coll_plan ***coll;       /* [func][step] */
} cu_dev;

typedef struct rt_cuda rt_cuda;

struct rt_cuda {
  const rt_cuda_api *api;
  kdc_arena *arena;
  rt_cuda_table table;
  rt_cuda_comms comms;
  const char *ptx;
  int64_t n;                  /* local devices */
  cu_dev *dev;
  uint64_t **in_off, **out_off; /* [func][i]: offset in the I/O region */
  rt_cuda_gemm **gemm;        /* [func][step] */
  uint64_t scratch_bytes;
  uint64_t red_bytes;         /* the largest split reduction's scratch (host.h) */
  bool broken;                /* a run timed out: NCCL was aborted */
  bool tf32;                  /* METADATA "matmul_precision": "tf32" (kdc compile
                                 --matmul-precision): cuBLAS may use TF32 tensor cores */
  bool graphs;                /* KDC_CUDA_GRAPHS is not 0 */
  bool blas;                  /* the plan has GEMM steps: cuBLAS loaded, a handle per device */
  struct cu_graph *graph;     /* [func] */
  uint64_t *key;              /* one run's graph key (graph_key) */
  uint64_t runs;              /* runs so far (the start-up trace follows the first) */
};

/* A function's CUDA graphs (docs/gpu.md, "Graphs"): its steps captured on
 * the second run with a given set of bound addresses and replayed with
 * cuGraphLaunch after; the run's host <-> device copies stay outside. */
typedef struct cu_graph {
  bool eligible, failed;      /* failed: capture or instantiation failed once (noted) */
  char why[200];              /* not eligible: why (also `kdc inspect`) */
  uint64_t nodes, runs, launches;
  rt_graph_cache cache;
} cu_graph;

static const char *cu_str(const rt_cuda_api *api, CUresult rc) {
  const char *s = NULL;
  if (api->cuGetErrorString(rc, &s) != CUDA_SUCCESS || !s) s = "unknown error";
  return s;
}

static kdc_status cu_fail(const kdc_rt_plan *p, const cu_dev *d, const char *what, CUresult rc) {
  return KDC_ERR(rc == CUDA_ERROR_OUT_OF_MEMORY ? KDC_OUT_OF_MEMORY : KDC_UNAVAILABLE,
                 "%s: device %lld (GPU %d): %s failed: %s (error %d)", p->path,
                 (long long)(d ? d->id : -1), d ? d->ordinal : -1, what,
                 cu_str(p->cuda->api, rc), (int)rc);
}

#define CU(p, d, what, call)                                             \
  do {                                                                   \
    CUresult rc_ = (call);                                               \
    if (rc_ != CUDA_SUCCESS) return cu_fail((p), (d), (what), rc_);       \
  } while (0)

#define NC(p, d, what, call)                                                            \
  do {                                                                                  \
    ncclResult_t rc_ = (call);                                                          \
    if (rc_ != ncclSuccess)                                                             \
      return KDC_ERR(KDC_UNAVAILABLE, "%s: device %lld: %s failed: %s", (p)->path,        \
                     (long long)((d) ? (d)->id : -1), (what),                             \
                     (p)->cuda->api->ncclGetErrorString(rc_));                          \
  } while (0)

#define BL(p, d, what, call)                                                            \
  do {                                                                                  \
    cublasStatus_t rc_ = (call);                                                        \
    if (rc_ != CUBLAS_STATUS_SUCCESS)                                                   \
      return KDC_ERR(KDC_UNAVAILABLE, "%s: device %lld: %s failed: %s", (p)->path,        \
                     (long long)(d)->id, (what), (p)->cuda->api->cublasGetStatusString(rc_)); \
  } while (0)

static uint64_t align_up(uint64_t v) { return (v + ALIGN - 1) / ALIGN * ALIGN; }

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- load ------------------------------------------------------------------------- */

static kdc_status read_sections(kdc_rt_plan *p, rt_cuda *c) {
  const void *data;
  size_t size;
  if (!kdc_plan_file_find(p->file, KDC_PLAN_SECTION_PTX, &data, &size) || size == 0)
    return KDC_ERR(KDC_INVALID_INPUT, "%s: a CUDA plan without a ptx section", p->path);
  char *ptx = kdc_arena_alloc(c->arena, size + 1); /* the driver reads a C string */
  memcpy(ptx, data, size);
  ptx[size] = 0;
  if (strlen(ptx) != size)
    return KDC_ERR(KDC_INVALID_INPUT, "%s: section ptx: byte %zu: a NUL inside the PTX text",
                   p->path, strlen(ptx));
  c->ptx = ptx;
  kdc_reader r;
  KDC_RETURN_IF_ERROR(kdc_plan_file_reader(p->file, KDC_PLAN_SECTION_CUDA, &r));
  r.section = "cuda";
  KDC_RETURN_IF_ERROR(rt_cuda_table_decode(&r, c->arena, p->prog.n_kernels, &c->table));
  for (uint32_t k = 0; k < p->prog.n_kernels; k++) {
    if (p->prog.kernels[k].n_args + 2 > MAX_PARAMS)
      return KDC_ERR(KDC_UNSUPPORTED, "%s: kernel %u takes %u buffers (at most %d on CUDA)",
                     p->path, k, p->prog.kernels[k].n_args, MAX_PARAMS - 2);
    /* kernels run one after another on a device's stream: one region serves all */
    if (c->table.kernels[k].scratch > c->red_bytes) c->red_bytes = c->table.kernels[k].scratch;
  }
  return NULL;
}

/* Offsets of every function's inputs and outputs in the I/O region (the
 * largest function's size: functions never run concurrently), GEMM
 * mappings, and the largest scratch a COPY step needs. */
static uint64_t plan_steps(kdc_rt_plan *p, rt_cuda *c, kdc_status *st) {
  const kdc_program *pr = &p->prog;
  uint64_t io_max = 0;
  c->in_off = kdc_arena_alloc(c->arena, (pr->n_funcs + 1) * sizeof *c->in_off);
  c->out_off = kdc_arena_alloc(c->arena, (pr->n_funcs + 1) * sizeof *c->out_off);
  c->gemm = kdc_arena_alloc(c->arena, (pr->n_funcs + 1) * sizeof *c->gemm);
  for (uint32_t f = 0; f < pr->n_funcs && !*st; f++) {
    const kdc_prog_func *fn = &pr->funcs[f];
    uint64_t at = 0;
    c->in_off[f] = kdc_arena_alloc(c->arena, (fn->n_inputs + 1) * sizeof **c->in_off);
    c->out_off[f] = kdc_arena_alloc(c->arena, (fn->n_outputs + 1) * sizeof **c->out_off);
    for (uint32_t i = 0; i < fn->n_inputs; i++) {
      c->in_off[f][i] = at;
      at += align_up(fn->inputs[i].local_bytes);
    }
    for (uint32_t o = 0; o < fn->n_outputs; o++) {
      c->out_off[f][o] = at;
      at += align_up(fn->outputs[o].local_bytes);
    }
    if (at > io_max) io_max = at;
    c->gemm[f] = kdc_arena_alloc(c->arena, (fn->n_steps + 1) * sizeof **c->gemm);
    for (uint32_t s = 0; s < fn->n_steps && !*st; s++) {
      const kdc_prog_step *step = &fn->steps[s];
      if (step->kind == KDC_STEP_GEMM) {
        char where[160];
        snprintf(where, sizeof where, "%s: %s step %u", p->path, fn->name, s);
        *st = rt_cuda_gemm_map(&step->gemm, where, &c->gemm[f][s]);
      } else if (step->kind == KDC_STEP_COPY && step->src.buf == step->dst.buf &&
                 step->src.index == step->dst.index &&
                 step->src.offset < step->dst.offset + step->dst.bytes &&
                 step->dst.offset < step->src.offset + step->src.bytes &&
                 step->src.bytes > c->scratch_bytes) {
        c->scratch_bytes = step->src.bytes; /* overlapping: staged through scratch */
      }
    }
  }
  return io_max;
}

static kdc_status plan_collectives(kdc_rt_plan *p, rt_cuda *c, cu_dev *d) {
  const kdc_program *pr = &p->prog;
  d->coll = kdc_arena_alloc(c->arena, (pr->n_funcs + 1) * sizeof *d->coll);
  for (uint32_t f = 0; f < pr->n_funcs; f++) {
    const kdc_prog_func *fn = &pr->funcs[f];
    d->coll[f] = kdc_arena_alloc(c->arena, (fn->n_steps + 1) * sizeof **d->coll);
    memset(d->coll[f], 0, (fn->n_steps + 1) * sizeof **d->coll);
    for (uint32_t s = 0; s < fn->n_steps; s++) {
      if (fn->steps[s].kind != KDC_STEP_COLLECTIVE) continue;
      char where[160];
      snprintf(where, sizeof where, "%s: %s step %u", p->path, fn->name, s);
      rt_coll_plan *cp = kdc_arena_alloc(c->arena, sizeof *cp);
      KDC_RETURN_IF_ERROR(rt_cuda_coll_plan(&fn->steps[s].coll, &p->funcs[f].groups[s], d->id,
                                            c->arena, where, cp));
      if (cp->scratch_bytes > c->scratch_bytes) c->scratch_bytes = cp->scratch_bytes;
      d->coll[f][s] = cp;
    }
  }
  return NULL;
}

/* The plan's cubin when it runs on this GPU (compute capability
 * |major|.|minor|, host.h), else its PTX through the driver's JIT (and
 * the driver's cache of it); a cubin the driver refuses (older than its
 * toolkit) falls back to the PTX.  The trace says which. */
static kdc_status load_module(kdc_rt_plan *p, rt_cuda *c, cu_dev *d, int major, int minor) {
  const rt_cuda_api *api = c->api;
  char *elog = kdc_xcalloc(1, LOG_BYTES), *ilog = kdc_xcalloc(1, LOG_BYTES);
  CUjit_option opt[4] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
                         CU_JIT_INFO_LOG_BUFFER, CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES};
  void *val[4] = {elog, (void *)(uintptr_t)LOG_BYTES, ilog, (void *)(uintptr_t)LOG_BYTES};
  CUresult rc = CUDA_ERROR_NO_BINARY_FOR_GPU;
  const rt_cuda_table *t = &c->table;
  if (t->cubin_bytes && rt_cuda_cubin_runs(t->cubin_sm, major, minor)) {
    rc = api->cuModuleLoadDataEx(&d->mod, t->cubin, 4, opt, val);
    if (rc == CUDA_SUCCESS)
      kdc_trace("module loaded: cubin sm_%u (%.1f KB, %s) on GPU %d (sm_%d%d)", t->cubin_sm,
                (double)t->cubin_bytes / 1e3, t->cubin_note, d->ordinal, major, minor);
    else
      kdc_trace("cubin sm_%u refused by the driver: %s (error %d): loading the PTX", t->cubin_sm,
                cu_str(api, rc), (int)rc);
  }
  if (rc != CUDA_SUCCESS) {
    elog[0] = ilog[0] = 0;
    rc = api->cuModuleLoadDataEx(&d->mod, c->ptx, 4, opt, val);
    if (rc == CUDA_SUCCESS)
      kdc_trace("module loaded: PTX (driver JIT or its cache%s; %s) on GPU %d (sm_%d%d)",
                getenv("CUDA_CACHE_DISABLE") ? ", CUDA_CACHE_DISABLE set" : "",
                !t->cubin_bytes ? (*t->cubin_note ? t->cubin_note : "no cubin in the plan")
                                : "the cubin is for another GPU",
                d->ordinal, major, minor);
  }
  kdc_status st = NULL;
  if (rc != CUDA_SUCCESS)
    st = KDC_ERR(KDC_UNAVAILABLE, "%s: section ptx: device %lld (GPU %d): cuModuleLoadDataEx "
                 "failed: %s (error %d): %.2000s%s%.1000s", p->path, (long long)d->id, d->ordinal,
                 cu_str(api, rc), (int)rc, elog, *ilog ? " | " : "", ilog);
  free(elog);
  free(ilog);
  if (st) {
    d->mod = NULL;
    return st;
  }
  d->fn = kdc_arena_alloc(c->arena, (p->prog.n_kernels + 1) * sizeof *d->fn);
  for (uint32_t k = 0; k < p->prog.n_kernels; k++) {
    const char *e = c->table.kernels[k].entry;
    rc = api->cuModuleGetFunction(&d->fn[k], d->mod, e);
    if (rc != CUDA_SUCCESS)
      return KDC_ERR(KDC_INVALID_INPUT, "%s: section ptx: kernel %s is not in the PTX: %s",
                     p->path, e, cu_str(api, rc));
    size_t off, sz;
    /* buffers + coordinates (+ a split reduction's scratch) */
    bool scratch = c->table.kernels[k].scratch > 0;
    uint32_t n = p->prog.kernels[k].n_args + 1 + (scratch ? 1 : 0);
    if (api->cuFuncGetParamInfo &&
        (api->cuFuncGetParamInfo(d->fn[k], n - 1, &off, &sz) != CUDA_SUCCESS ||
         api->cuFuncGetParamInfo(d->fn[k], n, &off, &sz) == CUDA_SUCCESS))
      return KDC_ERR(KDC_INVALID_INPUT, "%s: section ptx: kernel %s does not take %u parameters "
                     "(the program's %u buffers + coordinates%s)", p->path, e, n,
                     p->prog.kernels[k].n_args, scratch ? " + scratch" : "");
  }
  return NULL;
}

static bool has_step(const kdc_program *pr, kdc_prog_step_kind kind);

static kdc_status open_device(kdc_rt_plan *p, rt_cuda *c, cu_dev *d, uint64_t arena_bytes,
                              uint64_t weights_bytes, uint64_t io_bytes) {
  const rt_cuda_api *api = c->api;
  CU(p, d, "cuDeviceGet", api->cuDeviceGet(&d->dev, d->ordinal));
  int major = 0, minor = 0;
  CU(p, d, "cuDeviceGetAttribute",
     api->cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, d->dev));
  CU(p, d, "cuDeviceGetAttribute",
     api->cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, d->dev));
  CU(p, d, "cuDeviceGetAttribute",
     api->cuDeviceGetAttribute(&d->max_pitch, CU_DEVICE_ATTRIBUTE_MAX_PITCH, d->dev));
  if (major * 10 + minor < (int)c->table.sm)
    return KDC_ERR(KDC_UNSUPPORTED, "%s: compiled for sm_%u but GPU %d is sm_%d%d: recompile "
                   "with --sm %d0", p->path, c->table.sm, d->ordinal, major, minor,
                   major >= 9 ? 9 : 8);
  CU(p, d, "cuDevicePrimaryCtxRetain", api->cuDevicePrimaryCtxRetain(&d->ctx, d->dev));
  CU(p, d, "cuCtxSetCurrent", api->cuCtxSetCurrent(d->ctx));
  CU(p, d, "cuStreamCreate", api->cuStreamCreate(&d->stream, CU_STREAM_NON_BLOCKING));
  kdc_trace("context + stream on GPU %d", d->ordinal);
  KDC_RETURN_IF_ERROR(load_module(p, c, d, major, minor));
  /* cuBLAS gets its workspace from us (NVIDIA's sizes: 32 MiB on Hopper, 4
   * MiB before), so a captured GEMM never allocates */
  if (c->blas)
    d->blas_ws_bytes = (size_t)(major >= 9 ? 32 : 4) << 20;
  uint64_t coords_bytes = align_up(KDC_PROG_MAX_AXES * sizeof(int64_t));
  uint64_t total = arena_bytes + weights_bytes + io_bytes + coords_bytes +
                   align_up(c->scratch_bytes) + align_up(c->red_bytes) + d->blas_ws_bytes;
  CU(p, d, "cuMemAlloc", api->cuMemAlloc(&d->mem, total ? total : ALIGN));
  kdc_trace("device memory (%.1f MB)", (double)total / 1e6);
  d->arena = d->mem;
  CUdeviceptr w = d->arena + arena_bytes;
  d->io = w + weights_bytes;
  d->coords = d->io + io_bytes;
  d->scratch = d->coords + coords_bytes;
  d->red = d->scratch + align_up(c->scratch_bytes);
  if (c->red_bytes)
    CU(p, d, "cuMemsetD8Async", api->cuMemsetD8Async(d->red, 0, c->red_bytes, d->stream));
  d->blas_ws = d->red + align_up(c->red_bytes);
  if (c->blas) {
    rt_cuda_api_libs(RT_CUDA_LIB_BLAS);
    if (!api->has_blas)
      return KDC_ERR(KDC_UNAVAILABLE, "%s: the plan has GEMM steps but %s", p->path,
                     rt_cuda_api_blas_error());
    BL(p, d, "cublasCreate", api->cublasCreate(&d->blas));
    BL(p, d, "cublasSetStream", api->cublasSetStream(d->blas, (cudaStream_t)d->stream));
    if (d->blas_ws_bytes) /* after SetStream, which resets the workspace */
      BL(p, d, "cublasSetWorkspace", api->cublasSetWorkspace(d->blas, (void *)(uintptr_t)d->blas_ws,
                                                             d->blas_ws_bytes));
    BL(p, d, "cublasSetMathMode",
       api->cublasSetMathMode(d->blas, c->tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
    kdc_trace("cuBLAS handle");
  }
  CU(p, d, "cuMemcpyHtoDAsync",
     api->cuMemcpyHtoDAsync(d->coords, p->coords + d->id * KDC_PROG_MAX_AXES,
                            KDC_PROG_MAX_AXES * sizeof(int64_t), d->stream));
  /* every weight piece onto this GPU; dev_weights then holds GPU addresses */
  uint32_t nw = p->prog.n_weights;
  for (uint32_t i = 0; i < nw; i++) {
    const void **slot = &p->dev_weights[d->id * (int64_t)nw + i];
    uint64_t bytes = p->prog.weights[i].local_bytes;
    if (bytes) CU(p, d, "cuMemcpyHtoDAsync", api->cuMemcpyHtoDAsync(w, *slot, bytes, d->stream));
    *slot = (const void *)(uintptr_t)w;
    w += align_up(bytes);
  }
  CU(p, d, "cuStreamSynchronize", api->cuStreamSynchronize(d->stream));
  kdc_trace("weights uploaded (%.1f MB)", (double)weights_bytes / 1e6);
  return NULL;
}

static kdc_status open_nccl(kdc_rt_plan *p, rt_cuda *c, rt_net *net) {
  const rt_cuda_api *api = c->api;
  rt_cuda_api_libs(RT_CUDA_LIB_NCCL);
  if (!api->has_nccl)
    return KDC_ERR(KDC_UNAVAILABLE, "%s: the plan has collectives but %s", p->path,
                   rt_cuda_api_nccl_error());
  if (p->n_procs == 1) {
    ncclComm_t *w = kdc_xcalloc((size_t)c->n, sizeof *w);
    int *ord = kdc_xcalloc((size_t)c->n, sizeof *ord);
    for (int64_t i = 0; i < c->n; i++) ord[i] = c->dev[i].ordinal;
    ncclResult_t rc = api->ncclCommInitAll(w, (int)c->n, ord);
    for (int64_t i = 0; i < c->n && rc == ncclSuccess; i++) c->dev[i].world = w[i];
    free(w);
    free(ord);
    NC(p, (cu_dev *)NULL, "ncclCommInitAll", rc);
  } else {
    ncclUniqueId id;
    memset(&id, 0, sizeof id);
    if (p->proc_id == 0) NC(p, (cu_dev *)NULL, "ncclGetUniqueId", api->ncclGetUniqueId(&id));
    if (!net)
      return KDC_ERR(KDC_INVALID_INPUT, "%s: %d processes but no transport for the NCCL id",
                     p->path, p->n_procs);
    KDC_RETURN_IF_ERROR(rt_net_broadcast(net, &id, sizeof id, p->timeout_s));
    NC(p, (cu_dev *)NULL, "ncclGroupStart", api->ncclGroupStart());
    ncclResult_t rc = ncclSuccess;
    for (int64_t i = 0; i < c->n && rc == ncclSuccess; i++) {
      CU(p, &c->dev[i], "cuCtxSetCurrent", api->cuCtxSetCurrent(c->dev[i].ctx));
      rc = api->ncclCommInitRank(&c->dev[i].world, (int)p->nd, id, (int)c->dev[i].id);
    }
    ncclResult_t end = api->ncclGroupEnd();
    NC(p, (cu_dev *)NULL, "ncclCommInitRank", rc);
    NC(p, (cu_dev *)NULL, "ncclGroupEnd", end);
  }
  for (uint32_t s = 0; s < c->comms.n_splits; s++) {
    const rt_cuda_split *sp = &c->comms.splits[s];
    for (int64_t i = 0; i < c->n; i++) {
      if (!c->dev[i].split)
        c->dev[i].split = kdc_arena_alloc(c->arena, (c->comms.n_splits + 1) * sizeof(ncclComm_t));
      c->dev[i].split[s] = sp->world ? c->dev[i].world : NULL;
    }
    if (sp->world) continue;
    NC(p, (cu_dev *)NULL, "ncclGroupStart", api->ncclGroupStart());
    ncclResult_t rc = ncclSuccess;
    for (int64_t i = 0; i < c->n && rc == ncclSuccess; i++) {
      int64_t d = c->dev[i].id;
      rc = api->ncclCommSplit(c->dev[i].world, sp->color[d], sp->key[d], &c->dev[i].split[s],
                              NULL);
    }
    ncclResult_t end = api->ncclGroupEnd();
    NC(p, (cu_dev *)NULL, "ncclCommSplit", rc);
    NC(p, (cu_dev *)NULL, "ncclGroupEnd", end);
  }
  return NULL;
}

static bool has_step(const kdc_program *pr, kdc_prog_step_kind kind) {
  for (uint32_t f = 0; f < pr->n_funcs; f++)
    for (uint32_t s = 0; s < pr->funcs[f].n_steps; s++)
      if (pr->funcs[f].steps[s].kind == kind) return true;
  return false;
}

/* Which functions run as graphs (graph.h), and the key buffer: one value per
 * input, output and weight of the largest function. */
static void plan_graphs(kdc_rt_plan *p, rt_cuda *c) {
  const kdc_program *pr = &p->prog;
  const char *env = getenv("KDC_CUDA_GRAPHS");
  c->graphs = !(env && !strcmp(env, "0"));
  c->graph = kdc_arena_alloc(c->arena, (pr->n_funcs + 1) * sizeof *c->graph);
  memset(c->graph, 0, (pr->n_funcs + 1) * sizeof *c->graph);
  size_t n_key = 0;
  for (uint32_t f = 0; f < pr->n_funcs; f++) {
    cu_graph *g = &c->graph[f];
    size_t n = (size_t)pr->funcs[f].n_inputs + pr->funcs[f].n_outputs + pr->n_weights;
    g->eligible = rt_cuda_graph_eligible(pr, f, p->d1 - p->d0, &g->nodes, g->why, sizeof g->why);
    rt_graph_cache_init(&g->cache, n);
    if (n > n_key) n_key = n;
  }
  c->key = kdc_arena_alloc(c->arena, (n_key + 1) * sizeof *c->key);
}

static void destroy_graph(void *user, void *g) {
  ((const rt_cuda_api *)user)->cuGraphExecDestroy((CUgraphExec)g);
}

static kdc_status create(kdc_rt_plan *p, rt_cuda *c, uint64_t arena_bytes, rt_net *net) {
  /* cuBLAS only for GEMM steps, NCCL only for collectives: opened on a
   * second thread while the driver initialises (api.h) and waited for
   * where they are first used (the cuBLAS handle, the communicators) */
  rt_cuda_comms_plan(&p->prog, &c->comms);
  unsigned libs = kdc_rt_cuda_plan_libs(&p->prog);
  c->blas = libs & RT_CUDA_LIB_BLAS;
  KDC_RETURN_IF_ERROR(rt_cuda_api_get(p->path, libs, &c->api));
  KDC_RETURN_IF_ERROR(read_sections(p, c));
  kdc_status st = NULL;
  uint64_t io_bytes = align_up(plan_steps(p, c, &st));
  KDC_RETURN_IF_ERROR(st);
  c->tf32 = !strcmp(kdc_rt_plan_matmul_precision(p), "tf32");
  plan_graphs(p, c);
  int count = 0;
  CU(p, (cu_dev *)NULL, "cuDeviceGetCount", c->api->cuDeviceGetCount(&count));
  c->n = p->d1 - p->d0;
  int *ord = kdc_arena_alloc(c->arena, (size_t)c->n * sizeof *ord);
  KDC_RETURN_IF_ERROR(kdc_rt_gpu_ordinals(p->path, p->proc_id, p->local_device_ids,
                                          p->n_local_device_ids, p->local_device_ids_from,
                                          kdc_rt_local_rank(NULL), c->n, count, ord));
  c->dev = kdc_arena_alloc(c->arena, (size_t)c->n * sizeof *c->dev);
  memset(c->dev, 0, (size_t)c->n * sizeof *c->dev);
  uint64_t weights_bytes = 0;
  for (uint32_t w = 0; w < p->prog.n_weights; w++)
    weights_bytes += align_up(p->prog.weights[w].local_bytes);
  for (int64_t i = 0; i < c->n; i++) {
    c->dev[i].id = p->d0 + i;
    c->dev[i].ordinal = ord[i];
    KDC_RETURN_IF_ERROR(plan_collectives(p, c, &c->dev[i]));
  }
  for (int64_t i = 0; i < c->n; i++)
    KDC_RETURN_IF_ERROR(open_device(p, c, &c->dev[i], align_up(arena_bytes), weights_bytes,
                                    io_bytes));
  if (c->comms.n_splits) KDC_RETURN_IF_ERROR(open_nccl(p, c, net));
  return NULL;
}

kdc_status rt_cuda_create(kdc_rt_plan *p, uint64_t arena_bytes, struct rt_net *net) {
  rt_cuda *c = kdc_xcalloc(1, sizeof *c);
  c->arena = kdc_arena_create();
  p->cuda = c;
  kdc_status st = create(p, c, arena_bytes, net);
  if (st) rt_cuda_destroy(p);
  return st;
}

void rt_cuda_destroy(kdc_rt_plan *p) {
  rt_cuda *c = p->cuda;
  if (!c) return;
  const rt_cuda_api *api = c->api;
  for (int64_t i = 0; api && c->dev && i < c->n; i++) {
    cu_dev *d = &c->dev[i];
    if (!d->ctx) continue;
    api->cuCtxSetCurrent(d->ctx);
    for (uint32_t s = 0; d->split && s < c->comms.n_splits; s++)
      if (d->split[s] && d->split[s] != d->world)
        (c->broken ? api->ncclCommAbort : api->ncclCommDestroy)(d->split[s]);
    if (d->world) (c->broken ? api->ncclCommAbort : api->ncclCommDestroy)(d->world);
    for (uint32_t f = 0; c->graph && f < p->prog.n_funcs; f++)
      rt_graph_cache_free(&c->graph[f].cache, destroy_graph, (void *)api);
    for (int k = 0; k < RT_CUDA_STAGE_SLOTS; k++)
      if (d->staged[k]) api->cuEventDestroy(d->staged[k]);
    if (d->copy) api->cuStreamDestroy(d->copy);
    if (d->blas) api->cublasDestroy(d->blas);
    if (d->mod) api->cuModuleUnload(d->mod);
    if (d->mem) api->cuMemFree(d->mem);
    if (d->stream) api->cuStreamDestroy(d->stream);
    api->cuDevicePrimaryCtxRelease(d->dev);
  }
  for (uint32_t f = 0; c->graph && f < p->prog.n_funcs; f++) /* keys left (no context) */
    rt_graph_cache_free(&c->graph[f].cache, NULL, NULL);
  rt_cuda_comms_free(&c->comms, &p->prog);
  kdc_arena_destroy(c->arena);
  free(c);
  p->cuda = NULL;
}

/* ---- run ---------------------------------------------------------------------------- */

typedef struct cu_run {
  kdc_rt_plan *p;
  rt_cuda *c;
  size_t func;
  const kdc_prog_func *f;
  rt_func *rf;
} cu_run;

static CUdeviceptr resolve(const cu_run *r, const cu_dev *d, const kdc_prog_loc *l) {
  const kdc_rt_plan *p = r->p;
  int64_t dev = d->id;
  CUdeviceptr base;
  switch (l->buf) {
  case KDC_PROG_BUF_ARENA: base = d->arena; break;
  case KDC_PROG_BUF_INPUT: {
    void *b = r->rf->in_dev ? r->rf->in_dev[dev * r->f->n_inputs + l->index] : NULL;
    base = b ? (CUdeviceptr)(uintptr_t)b : d->io + r->c->in_off[r->func][l->index];
    break;
  }
  case KDC_PROG_BUF_OUTPUT: {
    void *b = r->rf->out_dev ? r->rf->out_dev[dev * r->f->n_outputs + l->index] : NULL;
    base = b ? (CUdeviceptr)(uintptr_t)b : d->io + r->c->out_off[r->func][l->index];
    break;
  }
  default:
    base = (CUdeviceptr)(uintptr_t)p->dev_weights[dev * p->prog.n_weights + l->index];
    break;
  }
  return base + l->offset;
}

typedef struct copy_ctx {
  const cu_run *r;
  const cu_dev *d;
  CUdeviceptr src, dst;
  CUresult rc;
} copy_ctx;

static void emit_copy(void *ctx, const rt_copy2d *cp) {
  copy_ctx *x = ctx;
  const rt_cuda_api *api = x->r->c->api;
  if (x->rc != CUDA_SUCCESS) return;
  if (cp->height == 1) {
    x->rc = api->cuMemcpyDtoDAsync(x->dst + cp->dst_off, x->src + cp->src_off, cp->width,
                                   x->d->stream);
    return;
  }
  if (cp->src_pitch > (uint64_t)x->d->max_pitch || cp->dst_pitch > (uint64_t)x->d->max_pitch) {
    for (uint64_t h = 0; h < cp->height && x->rc == CUDA_SUCCESS; h++) /* row by row */
      x->rc = api->cuMemcpyDtoDAsync(x->dst + cp->dst_off + h * cp->dst_pitch,
                                     x->src + cp->src_off + h * cp->src_pitch, cp->width,
                                     x->d->stream);
    return;
  }
  CUDA_MEMCPY2D m;
  memset(&m, 0, sizeof m);
  m.srcMemoryType = m.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  m.srcDevice = x->src + cp->src_off;
  m.dstDevice = x->dst + cp->dst_off;
  m.srcPitch = cp->src_pitch;
  m.dstPitch = cp->dst_pitch;
  m.WidthInBytes = cp->width;
  m.Height = cp->height;
  x->rc = api->cuMemcpy2DAsync(&m, x->d->stream);
}

static CUdeviceptr cbuf(const cu_dev *d, uint8_t which, CUdeviceptr src, CUdeviceptr dst) {
  return which == RT_CB_SRC ? src : which == RT_CB_DST ? dst : d->scratch;
}

static kdc_status run_copies(const cu_run *r, const cu_dev *d, const rt_cop *ops, int n,
                             CUdeviceptr src, CUdeviceptr dst) {
  const rt_cuda_api *api = r->c->api;
  if (n && r->c->n > 1) CU(r->p, d, "cuCtxSetCurrent", api->cuCtxSetCurrent(d->ctx));
  for (int i = 0; i < n; i++) {
    const rt_cop *o = &ops[i];
    CUdeviceptr sb = cbuf(d, o->sbuf, src, dst) + o->soff, db = cbuf(d, o->dbuf, src, dst) + o->doff;
    if (o->kind == RT_COP_ZERO) {
      CU(r->p, d, "cuMemsetD8Async", api->cuMemsetD8Async(db, 0, o->count, d->stream));
      continue;
    }
    copy_ctx x = {r, d, sb, db, CUDA_SUCCESS};
    rt_cuda_box_2d(&o->box, emit_copy, &x);
    if (x.rc != CUDA_SUCCESS) return cu_fail(r->p, d, "cuMemcpy2DAsync", x.rc);
  }
  return NULL;
}

static ncclDataType_t nccl_type(kdc_io_dtype dt) {
  switch (dt) {
  case KDC_IO_DTYPE_F32: return ncclFloat32;
  case KDC_IO_DTYPE_I32: return ncclInt32;
  case KDC_IO_DTYPE_I64: return ncclInt64;
  case KDC_IO_DTYPE_BF16: return ncclBfloat16; /* mixed-precision partial sums */
  case KDC_IO_DTYPE_F16: return ncclFloat16;
  default: return ncclUint8; /* bool: moved, never summed (host.c refuses) */
  }
}

static ncclResult_t nccl_ops(const cu_run *r, const cu_dev *d, const rt_coll_plan *cp,
                             const kdc_prog_coll_step *c, ncclComm_t comm, CUdeviceptr src,
                             CUdeviceptr dst) {
  const rt_cuda_api *api = r->c->api;
  ncclDataType_t t = nccl_type(c->dtype);
  cudaStream_t s = (cudaStream_t)d->stream;
  ncclResult_t rc = ncclSuccess;
  for (int i = 0; i < cp->n_nccl && rc == ncclSuccess; i++) {
    const rt_cop *o = &cp->nccl[i];
    void *sb = (void *)(uintptr_t)(cbuf(d, o->sbuf, src, dst) + o->soff);
    void *db = (void *)(uintptr_t)(cbuf(d, o->dbuf, src, dst) + o->doff);
    ncclComm_t cm = o->world ? d->world : comm;
    switch (o->kind) {
    case RT_COP_ALL_REDUCE: rc = api->ncclAllReduce(sb, db, o->count, t, ncclSum, cm, s); break;
    case RT_COP_ALL_GATHER: rc = api->ncclAllGather(sb, db, o->count, t, cm, s); break;
    case RT_COP_REDUCE_SCATTER:
      rc = api->ncclReduceScatter(sb, db, o->count, t, ncclSum, cm, s);
      break;
    case RT_COP_SEND: rc = api->ncclSend(sb, o->count, t, (int)o->peer, cm, s); break;
    case RT_COP_RECV: rc = api->ncclRecv(db, o->count, t, (int)o->peer, cm, s); break;
    default: break;
    }
  }
  return rc;
}

static kdc_status run_collective(const cu_run *r, uint32_t s) {
  const kdc_prog_coll_step *c = &r->f->steps[s].coll;
  rt_cuda *cu = r->c;
  int split = cu->comms.step_split[r->func][s];
  for (int64_t i = 0; i < cu->n; i++) {
    const cu_dev *d = &cu->dev[i];
    const rt_coll_plan *cp = d->coll[r->func][s];
    KDC_RETURN_IF_ERROR(run_copies(r, d, cp->pre, cp->n_pre, resolve(r, d, &c->src),
                                   resolve(r, d, &c->dst)));
  }
  NC(r->p, (cu_dev *)NULL, "ncclGroupStart", cu->api->ncclGroupStart());
  ncclResult_t rc = ncclSuccess;
  int64_t bad = -1;
  for (int64_t i = 0; i < cu->n && rc == ncclSuccess; i++) {
    const cu_dev *d = &cu->dev[i];
    rc = nccl_ops(r, d, d->coll[r->func][s], c, d->split[split], resolve(r, d, &c->src),
                  resolve(r, d, &c->dst));
    if (rc != ncclSuccess) bad = d->id;
  }
  ncclResult_t end = cu->api->ncclGroupEnd();
  if (rc == ncclSuccess) rc = end;
  if (rc != ncclSuccess)
    return KDC_ERR(KDC_UNAVAILABLE, "%s: collective %s (step %u of %s): device %lld: NCCL: %s",
                   r->p->path, kdc_prog_coll_name(c->kind), s, r->f->name, (long long)bad,
                   cu->api->ncclGetErrorString(rc));
  for (int64_t i = 0; i < cu->n; i++) {
    const cu_dev *d = &cu->dev[i];
    const rt_coll_plan *cp = d->coll[r->func][s];
    KDC_RETURN_IF_ERROR(run_copies(r, d, cp->post, cp->n_post, resolve(r, d, &c->src),
                                   resolve(r, d, &c->dst)));
  }
  return NULL;
}

/* LOOP steps (scans).  The body function runs |length| times with its
 * inputs and outputs bound as GPU buffers at iteration t's ranges
 * (in_dev / out_dev), then the carries are copied over their inputs
 * (runtime/exec.c's semantics).  A body without collectives runs on each
 * device in turn (run_loop); one that meets the other devices (an RNN
 * split by units over `model` all_gathers h every step) runs iteration by
 * iteration on all devices, its steps like a function's (run_loop_meeting:
 * kernels per device, each collective once for all of them through NCCL). */
static bool body_meets(const kdc_program *pr, const kdc_prog_loop_step *l) {
  const kdc_prog_func *b = &pr->funcs[l->body];
  for (uint32_t s = 0; s < b->n_steps; s++)
    if (b->steps[s].kind == KDC_STEP_COLLECTIVE ||
        (b->steps[s].kind == KDC_STEP_LOOP && body_meets(pr, &b->steps[s].loop)))
      return true;
  return false;
}

static cu_run body_run(const cu_run *r, const kdc_prog_loop_step *l) {
  return (cu_run){r->p, r->c, l->body, &r->p->prog.funcs[l->body], &r->p->funcs[l->body]};
}

/* Binds device |d|'s body buffers to iteration |t| (t < 0: unbinds). */
static void bind_iteration(const cu_run *r, const cu_run *b, const cu_dev *d,
                           const kdc_prog_loop_step *l, int64_t t) {
  for (uint32_t i = 0; i < l->n_in; i++)
    b->rf->in_dev[d->id * l->n_in + i] =
        t < 0 ? NULL
              : (void *)(uintptr_t)(resolve(r, d, &l->in[i]) + (CUdeviceptr)(t * l->in_stride[i]));
  for (uint32_t o = 0; o < l->n_out; o++)
    b->rf->out_dev[d->id * l->n_out + o] =
        t < 0 ? NULL
              : (void *)(uintptr_t)(resolve(r, d, &l->out[o]) +
                                    (CUdeviceptr)(t * l->out_stride[o]));
}

static kdc_status copy_carries(const cu_run *r, const cu_dev *d, const kdc_prog_loop_step *l) {
  for (uint32_t i = 0; i < l->n_carry; i++) {
    CUresult rc = r->c->api->cuMemcpyDtoDAsync(resolve(r, d, &l->in[i]), resolve(r, d, &l->out[i]),
                                               l->in[i].bytes, d->stream);
    if (rc != CUDA_SUCCESS) return cu_fail(r->p, d, "cuMemcpyDtoDAsync", rc);
  }
  return NULL;
}

static kdc_status run_step(const cu_run *r, const cu_dev *d, uint32_t s);
static kdc_status run_steps(const cu_run *r);

static kdc_status run_loop(const cu_run *r, const cu_dev *d, const kdc_prog_loop_step *l) {
  cu_run b = body_run(r, l);
  kdc_status st = NULL;
  for (int64_t t = 0; t < l->length && !st; t++) {
    bind_iteration(r, &b, d, l, t);
    for (uint32_t s = 0; s < b.f->n_steps && !st; s++) st = run_step(&b, d, s);
    if (!st) st = copy_carries(r, d, l);
  }
  bind_iteration(r, &b, d, l, -1);
  return st;
}

static kdc_status run_loop_meeting(const cu_run *r, const kdc_prog_loop_step *l) {
  rt_cuda *c = r->c;
  cu_run b = body_run(r, l);
  kdc_status st = NULL;
  for (int64_t t = 0; t < l->length && !st; t++) {
    for (int64_t i = 0; i < c->n; i++) bind_iteration(r, &b, &c->dev[i], l, t);
    st = run_steps(&b);
    for (int64_t i = 0; i < c->n && !st; i++) {
      const cu_dev *d = &c->dev[i];
      CUresult rc = c->n > 1 ? c->api->cuCtxSetCurrent(d->ctx) : CUDA_SUCCESS;
      st = rc != CUDA_SUCCESS ? cu_fail(r->p, d, "cuCtxSetCurrent", rc) : copy_carries(r, d, l);
    }
  }
  for (int64_t i = 0; i < c->n; i++) bind_iteration(r, &b, &c->dev[i], l, -1);
  return st;
}

static kdc_status run_step(const cu_run *r, const cu_dev *d, uint32_t s) {
  const rt_cuda_api *api = r->c->api;
  const kdc_prog_step *st = &r->f->steps[s];
  switch (st->kind) {
  case KDC_STEP_KERNEL: {
    const kdc_prog_kernel_step *k = &st->kernel;
    const rt_cuda_launch *l = &r->c->table.kernels[k->kernel];
    CUdeviceptr v[MAX_PARAMS];
    void *params[MAX_PARAMS];
    for (uint32_t a = 0; a < k->n_args; a++) v[a] = resolve(r, d, &k->args[a]);
    v[k->n_args] = d->coords;
    uint32_t np = k->n_args + 1;
    if (l->scratch) v[np++] = d->red;
    for (uint32_t a = 0; a < np; a++) params[a] = &v[a];
    CU(r->p, d, "cuLaunchKernel",
       api->cuLaunchKernel(d->fn[k->kernel], l->grid, 1, 1, l->block, 1, 1, 0, d->stream, params,
                           NULL));
    return NULL;
  }
  case KDC_STEP_GEMM: {
    const rt_cuda_gemm *g = &r->c->gemm[r->func][s];
    const float one = 1.0f, zero = 0.0f;
    /* cuBLAS's A is the plan's B and its B the plan's A (host.h) */
    if (st->gemm.dtype != KDC_IO_DTYPE_F32) { /* bf16/f16 in and out, f32 accumulation */
      cudaDataType t = st->gemm.dtype == KDC_IO_DTYPE_BF16 ? CUDA_R_16BF : CUDA_R_16F;
      BL(r->p, d, "cublasGemmStridedBatchedEx",
         api->cublasGemmStridedBatchedEx(
             d->blas, g->trans_a ? CUBLAS_OP_T : CUBLAS_OP_N,
             g->trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, g->m, g->n, g->k, &one,
             (const void *)(uintptr_t)resolve(r, d, &st->gemm.b), t, g->lda, g->stride_a,
             (const void *)(uintptr_t)resolve(r, d, &st->gemm.a), t, g->ldb, g->stride_b, &zero,
             (void *)(uintptr_t)resolve(r, d, &st->gemm.c), t, g->ldc, g->stride_c, g->batch,
             CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
      return NULL;
    }
    BL(r->p, d, "cublasSgemmStridedBatched",
       api->cublasSgemmStridedBatched(
           d->blas, g->trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, g->trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
           g->m, g->n, g->k, &one, (const float *)(uintptr_t)resolve(r, d, &st->gemm.b), g->lda,
           g->stride_a, (const float *)(uintptr_t)resolve(r, d, &st->gemm.a), g->ldb, g->stride_b,
           &zero, (float *)(uintptr_t)resolve(r, d, &st->gemm.c), g->ldc, g->stride_c, g->batch));
    return NULL;
  }
  case KDC_STEP_COPY: {
    CUdeviceptr src = resolve(r, d, &st->src), dst = resolve(r, d, &st->dst);
    size_t n = st->src.bytes;
    if (n == 0 || src == dst) return NULL;
    if (src < dst + n && dst < src + n) { /* overlapping (memmove): through scratch */
      CU(r->p, d, "cuMemcpyDtoDAsync", api->cuMemcpyDtoDAsync(d->scratch, src, n, d->stream));
      src = d->scratch;
    }
    CU(r->p, d, "cuMemcpyDtoDAsync", api->cuMemcpyDtoDAsync(dst, src, n, d->stream));
    return NULL;
  }
  case KDC_STEP_LOOP:
    if (body_meets(&r->p->prog, &st->loop)) break; /* run_steps runs it on every device */
    return run_loop(r, d, &st->loop);
  default: break;
  }
  return KDC_ERR(KDC_UNSUPPORTED, "%s: %s step %u: step kind %d is not supported on CUDA",
                 r->p->path, r->f->name, s, (int)st->kind);
}

/* Waits for every local stream, at most the collective timeout: a peer
 * that never joins an NCCL call leaves its stream pending, and the run
 * fails naming the device instead of hanging (NCCL is then aborted). */
static kdc_status wait_streams(const cu_run *r) {
  rt_cuda *c = r->c;
  if (!c->comms.n_splits) { /* no NCCL: nothing can wait for a peer, so block (no poll latency) */
    for (int64_t i = 0; i < c->n; i++) {
      if (c->n > 1) CU(r->p, &c->dev[i], "cuCtxSetCurrent", c->api->cuCtxSetCurrent(c->dev[i].ctx));
      CU(r->p, &c->dev[i], r->f->name, c->api->cuStreamSynchronize(c->dev[i].stream));
    }
    return NULL;
  }
  double deadline = now_s() + r->p->timeout_s;
  struct timespec nap = {0, 50000};
  for (int64_t i = 0; i < c->n;) {
    CUresult rc = c->api->cuCtxSetCurrent(c->dev[i].ctx);
    if (rc == CUDA_SUCCESS) rc = c->api->cuStreamQuery(c->dev[i].stream);
    if (rc == CUDA_SUCCESS) {
      i++;
      continue;
    }
    if (rc != CUDA_ERROR_NOT_READY) return cu_fail(r->p, &c->dev[i], r->f->name, rc);
    if (now_s() > deadline) {
      c->broken = true;
      return KDC_ERR(KDC_UNAVAILABLE, "%s: %s: device %lld (GPU %d) did not finish within %g s "
                     "(a peer device or process never joined a collective); NCCL aborted",
                     r->p->path, r->f->name, (long long)c->dev[i].id, c->dev[i].ordinal,
                     r->p->timeout_s);
    }
    nanosleep(&nap, NULL);
  }
  return NULL;
}

/* Function |r|'s steps on every local device: collectives once for all,
 * loops that meet iteration by iteration, everything else per device. */
static kdc_status run_steps(const cu_run *r) {
  rt_cuda *c = r->c;
  const kdc_prog_func *f = r->f;
  for (uint32_t s = 0; s < f->n_steps; s++) {
    const kdc_prog_step *st = &f->steps[s];
    if (st->kind == KDC_STEP_COLLECTIVE) {
      KDC_RETURN_IF_ERROR(run_collective(r, s));
      continue;
    }
    if (st->kind == KDC_STEP_LOOP && body_meets(&r->p->prog, &st->loop)) {
      KDC_RETURN_IF_ERROR(run_loop_meeting(r, &st->loop));
      continue;
    }
    for (int64_t i = 0; i < c->n; i++) {
      if (c->n > 1) CU(r->p, &c->dev[i], "cuCtxSetCurrent", c->api->cuCtxSetCurrent(c->dev[i].ctx));
      KDC_RETURN_IF_ERROR(run_step(r, &c->dev[i], s));
    }
  }
  return NULL;
}

/* The graph key of run |r| on device |d|: the address of every input,
 * output and weight the run binds (graph.h). */
static void graph_key(const cu_run *r, const cu_dev *d, uint64_t *key) {
  size_t n = 0;
  for (uint32_t i = 0; i < r->f->n_inputs; i++) {
    kdc_prog_loc l = {.buf = KDC_PROG_BUF_INPUT, .index = i};
    key[n++] = resolve(r, d, &l);
  }
  for (uint32_t o = 0; o < r->f->n_outputs; o++) {
    kdc_prog_loc l = {.buf = KDC_PROG_BUF_OUTPUT, .index = o};
    key[n++] = resolve(r, d, &l);
  }
  uint32_t nw = r->p->prog.n_weights;
  for (uint32_t w = 0; w < nw; w++)
    key[n++] = (uint64_t)(uintptr_t)r->p->dev_weights[d->id * (int64_t)nw + w];
}

/* Function |r|'s steps as one CUDA graph (docs/gpu.md, "Graphs"): the first
 * run launches them plainly (cuBLAS and the module warm up), a later run
 * with addresses not seen before captures them (cuStreamBeginCapture,
 * thread-local) and instantiates the graph, and every run with known
 * addresses is one cuGraphLaunch.  *done false: run them plainly -- not
 * eligible, disabled, or the capture failed (noted once on stderr; nothing
 * captured ran, so the plain launches compute the result). */
static kdc_status run_graphed(const cu_run *r, bool *done) {
  rt_cuda *c = r->c;
  const rt_cuda_api *api = c->api;
  cu_graph *g = &c->graph[r->func];
  *done = false;
  if (!c->graphs || !g->eligible || g->failed || c->n != 1 || g->runs++ == 0) return NULL;
  const cu_dev *d = &c->dev[0];
  graph_key(r, d, c->key);
  CUgraphExec x = rt_graph_cache_get(&g->cache, c->key);
  if (!x) {
    CUgraph graph = NULL;
    const char *what = "cuStreamBeginCapture";
    kdc_status st = NULL;
    CUresult rc = api->cuStreamBeginCapture(d->stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL);
    if (rc == CUDA_SUCCESS) {
      st = run_steps(r);
      what = "cuStreamEndCapture";
      rc = api->cuStreamEndCapture(d->stream, &graph);
      if (rc == CUDA_SUCCESS && !st) {
        what = "cuGraphInstantiate";
        rc = api->cuGraphInstantiate(&x, graph, 0);
      }
      if (graph) api->cuGraphDestroy(graph);
    }
    if (st || rc != CUDA_SUCCESS) {
      fprintf(stderr, "kdc: note: %s: %s: CUDA graph not used (%s%s%s); its steps run as plain "
              "launches\n", r->p->path, r->f->name, st ? "capture: " : what,
              st ? kdc_status_message(st) : " failed: ", st ? "" : cu_str(api, rc));
      kdc_status_free(st);
      g->failed = true;
      return NULL;
    }
    void *old = rt_graph_cache_put(&g->cache, c->key, x);
    if (old) api->cuGraphExecDestroy((CUgraphExec)old);
  }
  CU(r->p, d, "cuGraphLaunch", api->cuGraphLaunch(x, d->stream));
  g->launches++;
  *done = true;
  return NULL;
}

/* The results the caller reads on the host (not out_dev buffers). */
static kdc_status copy_results(const cu_run *r) {
  rt_cuda *c = r->c;
  const kdc_prog_func *f = r->f;
  for (int64_t i = 0; i < c->n; i++) {
    const cu_dev *d = &c->dev[i];
    CU(r->p, d, "cuCtxSetCurrent", c->api->cuCtxSetCurrent(d->ctx));
    for (uint32_t o = 0; o < f->n_outputs; o++) {
      size_t slot = (size_t)d->id * f->n_outputs + o;
      if ((r->rf->out_dev && r->rf->out_dev[slot]) || !f->outputs[o].local_bytes) continue;
      CU(r->p, d, "cuMemcpyDtoHAsync",
         c->api->cuMemcpyDtoHAsync(r->rf->out_ptr[slot], d->io + c->out_off[r->func][o],
                                   f->outputs[o].local_bytes, d->stream));
    }
  }
  return NULL;
}

static kdc_status run(const cu_run *r) {
  rt_cuda *c = r->c;
  const rt_cuda_api *api = c->api;
  const kdc_prog_func *f = r->f;
  const rt_func *rf = r->rf;
  bool first = c->runs++ == 0;
  for (int64_t i = 0; i < c->n; i++) { /* inputs the caller bound on the host */
    const cu_dev *d = &c->dev[i];
    CU(r->p, d, "cuCtxSetCurrent", api->cuCtxSetCurrent(d->ctx));
    for (uint32_t k = 0; k < f->n_inputs; k++) {
      size_t slot = (size_t)d->id * f->n_inputs + k;
      if ((rf->in_dev && rf->in_dev[slot]) || !f->inputs[k].local_bytes) continue;
      CU(r->p, d, "cuMemcpyHtoDAsync",
         api->cuMemcpyHtoDAsync(d->io + c->in_off[r->func][k], rf->in_ptr[slot],
                                f->inputs[k].local_bytes, d->stream));
    }
  }
  if (first) kdc_trace("first run: inputs queued (%s)", f->name);
  bool graphed = false;
  KDC_RETURN_IF_ERROR(run_graphed(r, &graphed));
  if (!graphed) KDC_RETURN_IF_ERROR(run_steps(r));
  if (first) kdc_trace("first run: %u steps queued (first launch)", f->n_steps);
  /* host work overlapping this run (fit's next batch: its upload goes on the
   * copy stream), before the results' copies: a copy into pageable host
   * memory returns only once it is done, i.e. after every step */
  kdc_status during = r->p->during_run ? r->p->during_run(r->p->during_user) : NULL;
  kdc_status st = copy_results(r);
  if (!st) st = wait_streams(r);
  if (first && !st) kdc_trace("first run: outputs downloaded (the GPU finished)");
  if (st) {
    kdc_status_free(during);
    return st;
  }
  return during;
}

kdc_status rt_cuda_exec(kdc_rt_plan *p, size_t func) {
  rt_cuda *c = p->cuda;
  if (c->broken)
    return KDC_ERR(KDC_UNAVAILABLE, "%s: an earlier run timed out and aborted NCCL; load the plan "
                   "again", p->path);
  cu_run r = {p, c, func, &p->prog.funcs[func], &p->funcs[func]};
  return run(&r);
}

/* ---- memory for the training state ------------------------------------------------ */

static kdc_status local_dev(kdc_rt_plan *p, int64_t dev, cu_dev **out) {
  rt_cuda *c = p->cuda;
  if (dev < p->d0 || dev >= p->d1)
    return KDC_ERR(KDC_UNSUPPORTED, "%s: device %lld is run by another process", p->path,
                   (long long)dev);
  *out = &c->dev[dev - p->d0];
  CU(p, *out, "cuCtxSetCurrent", c->api->cuCtxSetCurrent((*out)->ctx));
  return NULL;
}

kdc_status rt_cuda_mem_alloc(kdc_rt_plan *p, int64_t dev, size_t bytes, void **out) {
  *out = NULL;
  cu_dev *d = NULL;
  KDC_RETURN_IF_ERROR(local_dev(p, dev, &d));
  CUdeviceptr m = 0;
  CU(p, d, "cuMemAlloc", p->cuda->api->cuMemAlloc(&m, bytes ? bytes : ALIGN));
  CU(p, d, "cuMemsetD8Async", p->cuda->api->cuMemsetD8Async(m, 0, bytes ? bytes : ALIGN,
                                                             d->stream));
  *out = (void *)(uintptr_t)m;
  CU(p, d, "cuStreamSynchronize", p->cuda->api->cuStreamSynchronize(d->stream));
  return NULL;
}

void rt_cuda_mem_free(kdc_rt_plan *p, int64_t dev, void *ptr) {
  cu_dev *d = NULL;
  kdc_status st = local_dev(p, dev, &d);
  if (st) {
    kdc_status_free(st);
    return;
  }
  if (ptr) p->cuda->api->cuMemFree((CUdeviceptr)(uintptr_t)ptr);
}

kdc_status rt_cuda_mem_copy(kdc_rt_plan *p, int64_t dev, void *dst, const void *src,
                            size_t bytes, bool to_device) {
  cu_dev *d = NULL;
  KDC_RETURN_IF_ERROR(local_dev(p, dev, &d));
  const rt_cuda_api *api = p->cuda->api;
  if (!bytes) return NULL;
  if (to_device)
    CU(p, d, "cuMemcpyHtoDAsync",
       api->cuMemcpyHtoDAsync((CUdeviceptr)(uintptr_t)dst, src, bytes, d->stream));
  else
    CU(p, d, "cuMemcpyDtoHAsync",
       api->cuMemcpyDtoHAsync(dst, (CUdeviceptr)(uintptr_t)src, bytes, d->stream));
  CU(p, d, "cuStreamSynchronize", api->cuStreamSynchronize(d->stream));
  return NULL;
}

/* ---- staged uploads (fit) ------------------------------------------------------------ */

kdc_status rt_cuda_host_alloc(kdc_rt_plan *p, size_t bytes, void **out) {
  *out = NULL;
  cu_dev *d = NULL;
  KDC_RETURN_IF_ERROR(local_dev(p, p->d0, &d));
  CU(p, d, "cuMemHostAlloc", p->cuda->api->cuMemHostAlloc(out, bytes ? bytes : 1, 0));
  memset(*out, 0, bytes);
  return NULL;
}

void rt_cuda_host_free(kdc_rt_plan *p, void *ptr) {
  if (ptr) p->cuda->api->cuMemFreeHost(ptr);
}

kdc_status rt_cuda_upload_async(kdc_rt_plan *p, int64_t dev, void *dst, const void *src,
                                size_t bytes, int slot) {
  cu_dev *d = NULL;
  KDC_RETURN_IF_ERROR(local_dev(p, dev, &d));
  const rt_cuda_api *api = p->cuda->api;
  if (slot < 0 || slot >= RT_CUDA_STAGE_SLOTS)
    return KDC_ERR(KDC_INTERNAL, "%s: upload slot %d", p->path, slot);
  if (!d->copy) CU(p, d, "cuStreamCreate", api->cuStreamCreate(&d->copy, CU_STREAM_NON_BLOCKING));
  if (!d->staged[slot])
    CU(p, d, "cuEventCreate", api->cuEventCreate(&d->staged[slot], CU_EVENT_DISABLE_TIMING));
  if (bytes)
    CU(p, d, "cuMemcpyHtoDAsync",
       api->cuMemcpyHtoDAsync((CUdeviceptr)(uintptr_t)dst, src, bytes, d->copy));
  CU(p, d, "cuEventRecord", api->cuEventRecord(d->staged[slot], d->copy));
  return NULL;
}

kdc_status rt_cuda_upload_wait(kdc_rt_plan *p, int64_t dev, int slot) {
  cu_dev *d = NULL;
  KDC_RETURN_IF_ERROR(local_dev(p, dev, &d));
  if (slot < 0 || slot >= RT_CUDA_STAGE_SLOTS || !d->staged[slot])
    return KDC_ERR(KDC_INTERNAL, "%s: no upload in slot %d", p->path, slot);
  CU(p, d, "cuStreamWaitEvent", p->cuda->api->cuStreamWaitEvent(d->stream, d->staged[slot], 0));
  return NULL;
}

void rt_cuda_uploads_finish(kdc_rt_plan *p, int64_t dev) {
  cu_dev *d = NULL;
  kdc_status st = local_dev(p, dev, &d);
  if (st) {
    kdc_status_free(st);
    return;
  }
  if (d->copy) p->cuda->api->cuStreamSynchronize(d->copy);
}

uint64_t rt_cuda_graph_launches(const kdc_rt_plan *p, size_t func) {
  return p->cuda && func < p->prog.n_funcs ? p->cuda->graph[func].launches : 0;
}

bool rt_cuda_graphed(const kdc_rt_plan *p, size_t func, char *why, size_t why_len) {
  const rt_cuda *c = p->cuda;
  if (why_len) why[0] = 0;
  if (!c || func >= p->prog.n_funcs) {
    snprintf(why, why_len, "not a CUDA plan on a GPU");
    return false;
  }
  const cu_graph *g = &c->graph[func];
  if (!c->graphs) snprintf(why, why_len, "KDC_CUDA_GRAPHS=0");
  else if (!g->eligible) snprintf(why, why_len, "%s", g->why);
  else if (g->failed) snprintf(why, why_len, "its capture failed");
  return c->graphs && g->eligible && !g->failed;
}
