/*
 * runtime/plan_load.c: plan.bin -> a runnable kdc_rt_plan.
 *
 * Order: the container (common/io.h validates header, table and checksum),
 * then WEIGHTS and PROGRAM through bounds-checked readers
 * (runtime/program.c checks every reference against buffer sizes), then
 * METADATA and IR_TEXT as text, then CODE through the JIT, whose kernels
 * must all exist.  Only then is anything big allocated: the thread pool, the
 * per-device state (devices.c: arenas, weight pieces, argument arrays,
 * collective groups, I/O staging) and the collectives backend, so
 * kdc_rt_plan_run allocates nothing.  The PROGRAM payload is read in two
 * parts around WEIGHTS: its head holds the mesh the weights' shardings are
 * checked against.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <json-c/json.h>

#include "common/trace.h"
#include "runtime/comm.h"
#include "runtime/cuda/cuda_rt.h"
#include "runtime/runtime.h"

static char *section_text(const kdc_plan_file *pf, uint32_t kind) {
  const void *data;
  size_t size;
  if (!kdc_plan_file_find(pf, kind, &data, &size)) return kdc_xstrdup("");
  char *s = kdc_xmalloc(size + 1);
  memcpy(s, data, size);
  s[size] = 0;
  return s;
}

/* Bytes of the arena the steps actually use (<= arena_bytes, checked by the
 * decoder): allocating this much, not the header's figure, means a
 * corrupted arena size can neither waste memory nor fail the load. */
static uint64_t arena_used(const kdc_program *p) {
  uint64_t used = 0;
  for (uint32_t i = 0; i < p->n_funcs; i++)
    for (uint32_t s = 0; s < p->funcs[i].n_steps; s++) {
      const kdc_prog_step *st = &p->funcs[i].steps[s];
      const kdc_prog_loc *ls[3] = {&st->src, &st->dst, NULL};
      const kdc_prog_loc *const *list = ls;
      const kdc_prog_loc *g[4] = {&st->gemm.a, &st->gemm.b, &st->gemm.c, NULL};
      const kdc_prog_loc *c[3] = {&st->coll.src, &st->coll.dst, NULL};
      if (st->kind == KDC_STEP_GEMM) list = g;
      if (st->kind == KDC_STEP_COLLECTIVE) list = c;
      for (; *list; list++)
        if ((*list)->buf == KDC_PROG_BUF_ARENA && (*list)->offset + (*list)->bytes > used)
          used = (*list)->offset + (*list)->bytes;
      if (st->kind == KDC_STEP_LOOP) /* every iteration's range (checked at decode) */
        for (uint32_t k = 0; k < st->loop.n_in + st->loop.n_out; k++) {
          bool in = k < st->loop.n_in;
          const kdc_prog_loc *l = in ? &st->loop.in[k] : &st->loop.out[k - st->loop.n_in];
          int64_t stride = in ? st->loop.in_stride[k] : st->loop.out_stride[k - st->loop.n_in];
          uint64_t end = l->offset + (uint64_t)(st->loop.length - 1) * (uint64_t)stride + l->bytes;
          if (l->buf == KDC_PROG_BUF_ARENA && end > used) used = end;
        }
      if (st->kind == KDC_STEP_KERNEL)
        for (uint32_t a = 0; a < st->kernel.n_args; a++) {
          const kdc_prog_loc *l = &st->kernel.args[a];
          if (l->buf == KDC_PROG_BUF_ARENA && l->offset + l->bytes > used)
            used = l->offset + l->bytes;
        }
    }
  return used;
}

/* Each kernel's work per run: extent x unit cost of its largest step, a
 * scan body's steps counted once per iteration of its LOOP (bodies follow
 * the entry functions and hold no LOOP). */
static double *kernel_work(const kdc_program *prog) {
  double *mult = kdc_xmalloc((prog->n_funcs + 1) * sizeof *mult);
  for (uint32_t f = 0; f < prog->n_funcs; f++) mult[f] = 1;
  for (uint32_t f = 0; f < prog->n_funcs; f++)
    for (uint32_t s = 0; s < prog->funcs[f].n_steps; s++) {
      const kdc_prog_step *st = &prog->funcs[f].steps[s];
      if (st->kind == KDC_STEP_LOOP && st->loop.body < prog->n_funcs &&
          mult[f] * (double)st->loop.length > mult[st->loop.body])
        mult[st->loop.body] = mult[f] * (double)st->loop.length;
    }
  double *work = kdc_xcalloc(prog->n_kernels + 1, sizeof *work);
  for (uint32_t f = 0; f < prog->n_funcs; f++)
    for (uint32_t s = 0; s < prog->funcs[f].n_steps; s++) {
      const kdc_prog_step *st = &prog->funcs[f].steps[s];
      if (st->kind != KDC_STEP_KERNEL || st->kernel.kernel >= prog->n_kernels) continue;
      int64_t unit = st->kernel.unit_cost > 0 ? st->kernel.unit_cost : 1;
      double w = (double)st->kernel.extent * (double)unit * mult[f];
      if (w > work[st->kernel.kernel]) work[st->kernel.kernel] = w;
    }
  free(mult);
  return work;
}

/* kdc_rt_options.only_func: marks that function and the scan bodies its
 * LOOPs run as compiled, and returns the kernels their steps call (NULL
 * when every function is wanted). */
static kdc_status only_func(kdc_rt_plan *p, const char *name, bool **out_needed) {
  *out_needed = NULL;
  if (!name) return NULL;
  const kdc_program *prog = &p->prog;
  uint32_t fi = 0;
  while (fi < prog->n_funcs && strcmp(prog->funcs[fi].name, name) != 0) fi++;
  if (fi == prog->n_funcs)
    return KDC_ERR(KDC_INVALID_INPUT, "%s: the plan has no %s function", p->path, name);
  p->func_compiled = kdc_arena_alloc(p->arena, (prog->n_funcs + 1) * sizeof *p->func_compiled);
  memset(p->func_compiled, 0, (prog->n_funcs + 1) * sizeof *p->func_compiled);
  p->func_compiled[fi] = true;
  for (uint32_t s = 0; s < prog->funcs[fi].n_steps; s++) { /* bodies hold no LOOP */
    const kdc_prog_step *st = &prog->funcs[fi].steps[s];
    if (st->kind == KDC_STEP_LOOP && st->loop.body < prog->n_funcs)
      p->func_compiled[st->loop.body] = true;
  }
  bool *needed = kdc_xcalloc(prog->n_kernels + 1, sizeof *needed);
  for (uint32_t f = 0; f < prog->n_funcs; f++)
    for (uint32_t s = 0; p->func_compiled[f] && s < prog->funcs[f].n_steps; s++) {
      const kdc_prog_step *st = &prog->funcs[f].steps[s];
      if (st->kind == KDC_STEP_KERNEL && st->kernel.kernel < prog->n_kernels)
        needed[st->kernel.kernel] = true;
    }
  *out_needed = needed;
  return NULL;
}

static kdc_status load_code(kdc_rt_plan *p, const kdc_rt_options *opt) {
  for (size_t i = 0; i < kdc_plan_file_count(p->file); i++) {
    kdc_plan_section_info si = kdc_plan_file_info(p->file, i);
    if (si.kind != KDC_PLAN_SECTION_CODE) continue;
    bool *needed;
    KDC_RETURN_IF_ERROR(only_func(p, opt ? opt->only_func : NULL, &needed));
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    rt_jit_hints hints = {kernel_work(&p->prog), p->prog.n_kernels, needed,
                          opt && opt->n_threads > 0 ? opt->n_threads : cores > 0 ? (int)cores : 1};
    kdc_status st = rt_jit_create(si.data, si.size, p->path, si.offset, rt_jit_cache_dir(opt),
                                  &hints, &p->jit);
    free((void *)hints.work);
    KDC_RETURN_IF_ERROR(st);
    p->kernels = kdc_xcalloc(p->prog.n_kernels + 1, sizeof *p->kernels);
    for (uint32_t k = 0; k < p->prog.n_kernels && !st; k++)
      if ((!needed || needed[k]) &&
          !(p->kernels[k] = rt_jit_lookup(p->jit, p->prog.kernels[k].name)))
        st = KDC_ERR(KDC_INVALID_INPUT, "%s: section code: byte %llu: kernel %s is not "
                     "defined", p->path, (unsigned long long)si.offset, p->prog.kernels[k].name);
    free(needed);
    return st;
  }
  if (p->prog.n_kernels == 0) return NULL;
  return KDC_ERR(KDC_INVALID_INPUT, "%s: no code section (the program has %u kernels)", p->path,
                 p->prog.n_kernels);
}

static kdc_status load(kdc_rt_plan *p, const kdc_rt_options *opt) {
  kdc_trace("plan load: %s", p->path);
  bool adopted = p->file != NULL;  /* kdc_api_place's: mapped and hashed there */
  if (!adopted) KDC_RETURN_IF_ERROR(kdc_plan_file_open(p->path, &p->file));
  kdc_trace("plan mapped + checksum (%.1f MB%s)", (double)kdc_plan_file_size(p->file) / 1e6,
            adopted ? ", once: at placement" : "");
  kdc_reader r, rw;
  const void *data;
  size_t size;
  /* The mesh first: weight and I/O shardings are checked against it. */
  KDC_RETURN_IF_ERROR(kdc_plan_file_reader(p->file, KDC_PLAN_SECTION_PROGRAM, &r));
  r.section = "program";
  KDC_RETURN_IF_ERROR(kdc_prog_decode_mesh(&r, p->arena, &p->prog));
  if (kdc_plan_file_find(p->file, KDC_PLAN_SECTION_WEIGHTS, &data, &size)) {
    kdc_reader_init(&rw, data, size, p->path, "weights");
    KDC_RETURN_IF_ERROR(kdc_prog_decode_weights(&rw, p->arena, &p->prog));
  }
  KDC_RETURN_IF_ERROR(kdc_prog_decode(&r, p->arena, &p->prog));
  p->metadata = section_text(p->file, KDC_PLAN_SECTION_METADATA);
  p->ir_text = section_text(p->file, KDC_PLAN_SECTION_IR_TEXT);
  kdc_trace("program + weights decoded (%u functions, %u weights)", p->prog.n_funcs,
            p->prog.n_weights);
  /* A CUDA plan runs on GPUs (cuda/exec.c) unless the caller asks for the
   * CPU code it also carries; the GPUs need no JIT and no host arenas. */
  bool cuda = (!opt || opt->target != KDC_RT_TARGET_CPU) &&
              kdc_plan_file_find(p->file, KDC_PLAN_SECTION_CUDA, &data, &size);
  p->describe_only = opt && opt->describe_only;
  bool bf16_gemms = false;
  for (uint32_t f = 0; !cuda && !p->describe_only && f < p->prog.n_funcs; f++)
    for (uint32_t s = 0; s < p->prog.funcs[f].n_steps; s++) {
      const kdc_prog_step *st = &p->prog.funcs[f].steps[s];
      bf16_gemms |= st->kind == KDC_STEP_GEMM && st->gemm.bf16_inputs;
      if (st->kind == KDC_STEP_GEMM && st->gemm.dtype != KDC_IO_DTYPE_F32)
        return KDC_ERR(KDC_UNSUPPORTED, "%s: function %s, step %u: a %s GEMM runs on CUDA only "
                       "(compile the model without --target cuda for the CPU)", p->path,
                       p->prog.funcs[f].name, s, kdc_io_dtype_name(st->gemm.dtype));
      /* the CPU collectives sum f32 and integers (a CPU compile widens the
       * bf16/f16 dots before partition: their partial sums are f32) */
      bool half = st->kind == KDC_STEP_COLLECTIVE && (st->coll.dtype == KDC_IO_DTYPE_BF16 ||
                                                      st->coll.dtype == KDC_IO_DTYPE_F16);
      if (half && (st->coll.kind == KDC_COLL_ALL_REDUCE || st->coll.kind == KDC_COLL_REDUCE_SCATTER))
        return KDC_ERR(KDC_UNSUPPORTED, "%s: function %s, step %u: a %s sum over devices runs "
                       "on CUDA only (NCCL)", p->path, p->prog.funcs[f].name, s,
                       kdc_io_dtype_name(st->coll.dtype));
    }
  if (bf16_gemms && !kdc_cpu_bf16()) /* a bf16 policy not honoured here: never silently */
    fprintf(stderr, "kdc: warning: %s: this CPU has no AMX-BF16 (or KDC_CPU_BF16=off): the "
            "plan's bfloat16 GEMMs are computed in float32\n", p->path);
  if (!cuda && !p->describe_only) {
    KDC_RETURN_IF_ERROR(load_code(p, opt));
    kdc_trace("CPU JIT: LLVM init + %u kernels compiled or read from the cache", p->prog.n_kernels);
  } else if (cuda) {
    kdc_trace("no LLVM, no CPU JIT (a CUDA plan)");
  }
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  p->n_threads = opt && opt->n_threads > 0 ? opt->n_threads : cores > 0 ? (int)cores : 1;
  KDC_RETURN_IF_ERROR(rt_pool_create(p->n_threads, &p->pool));
  KDC_RETURN_IF_ERROR(rt_devices_create(p, cuda ? 0 : arena_used(&p->prog)));
  kdc_trace("thread pool (%d threads) + host devices", p->n_threads);
  p->device_parallel = p->nd > 1 && p->nd >= p->n_threads;
  p->timeout_s = opt && opt->collective_timeout_s > 0 ? opt->collective_timeout_s : 60;
  p->profile = opt && opt->profile > 0;
  p->profile_cpu = opt && opt->profile == 2;
#ifdef NDEBUG
  p->check_replicas = opt && opt->check_replicas > 0;
#else
  p->check_replicas = true;
#endif
  p->n_procs = opt && opt->n_processes > 1 ? opt->n_processes : 1;
  p->proc_id = p->n_procs > 1 ? opt->process_id : 0;
  if (opt && opt->local_device_ids && opt->n_local_device_ids > 0) {  /* cuda/exec.c */
    size_t n = (size_t)opt->n_local_device_ids;
    p->local_device_ids = kdc_xmalloc(n * sizeof *p->local_device_ids);
    memcpy(p->local_device_ids, opt->local_device_ids, n * sizeof *p->local_device_ids);
    p->n_local_device_ids = opt->n_local_device_ids;
    p->local_device_ids_from = kdc_xstrdup(opt->local_device_ids_from ? opt->local_device_ids_from
                                                                      : "kdc_rt_options");
  }
  p->d0 = 0;
  p->d1 = p->nd;
  if (p->n_procs > 1) {  /* docs/processes.md: devices split evenly, row-major */
    if (p->nd % p->n_procs || p->proc_id < 0 || p->proc_id >= p->n_procs)
      return KDC_ERR(KDC_INVALID_INPUT, "%s: %lld devices cannot be split evenly over %d "
                     "processes (process id %d)", p->path, (long long)p->nd, p->n_procs,
                     p->proc_id);
    p->d0 = p->nd / p->n_procs * p->proc_id;
    p->d1 = p->d0 + p->nd / p->n_procs;
    p->device_parallel = p->d1 - p->d0 > 1 && p->d1 - p->d0 >= p->n_threads;
    if (!opt->net)
      return KDC_ERR(KDC_INVALID_INPUT, "%s: %d processes but no transport (kdc_rt_procs_init "
                     "gives kdc_rt_options.net)", p->path, p->n_procs);
    KDC_RETURN_IF_ERROR(rt_comm_p2p_create(p, opt->net, p->timeout_s, &p->comm));
  } else {
    KDC_RETURN_IF_ERROR(rt_comm_shm_create(&p->prog.mesh, p->pool, p->timeout_s, &p->comm));
  }
  /* GPUs: collectives through NCCL; the comm above only gathers outputs */
  if (cuda) return rt_cuda_create(p, arena_used(&p->prog), opt ? opt->net : NULL);
  return NULL;
}

kdc_status kdc_rt_plan_load_with(const char *path, const kdc_rt_options *opt, kdc_rt_plan **out) {
  *out = NULL;
  kdc_rt_plan *p = kdc_xcalloc(1, sizeof *p);
  p->refs = 1;
  p->path = kdc_xstrdup(path);
  p->arena = kdc_arena_create();
  p->file = opt ? opt->file : NULL;  /* adopted (runtime.h) */
  kdc_status st = load(p, opt);
  if (st) {
    kdc_rt_plan_release(p);
    return st;
  }
  *out = p;
  return NULL;
}

kdc_status kdc_rt_plan_load(const char *path, kdc_rt_plan **out) {
  return kdc_rt_plan_load_with(path, NULL, out);
}

void kdc_rt_plan_retain(kdc_rt_plan *p) { p->refs++; }

void kdc_rt_plan_release(kdc_rt_plan *p) {
  if (!p || --p->refs > 0) return;
  rt_cuda_destroy(p);
  rt_comm_destroy(p->comm);
  rt_pool_destroy(p->pool);
  rt_jit_destroy(p->jit);
  rt_devices_destroy(p);
  free(p->kernels);
  free(p->metadata);
  free(p->ir_text);
  kdc_plan_file_close(p->file);
  kdc_arena_destroy(p->arena);
  free(p->local_device_ids);
  free(p->local_device_ids_from);
  free(p->path);
  free(p);
}

size_t kdc_rt_plan_func_count(const kdc_rt_plan *p) { return p->prog.n_funcs; }

const char *kdc_rt_plan_func_name(const kdc_rt_plan *p, size_t func) {
  return func < p->prog.n_funcs ? p->prog.funcs[func].name : NULL;
}

int kdc_rt_plan_find_func(const kdc_rt_plan *p, const char *name) {
  for (uint32_t i = 0; i < p->prog.n_funcs; i++)
    if (strcmp(p->prog.funcs[i].name, name) == 0) return (int)i;
  return -1;
}

size_t kdc_rt_plan_input_count(const kdc_rt_plan *p, size_t func) {
  return func < p->prog.n_funcs ? p->prog.funcs[func].n_inputs : 0;
}

const kdc_rt_tensor_info *kdc_rt_plan_input(const kdc_rt_plan *p, size_t func, size_t i) {
  return i < kdc_rt_plan_input_count(p, func) ? &p->prog.funcs[func].inputs[i] : NULL;
}

size_t kdc_rt_plan_output_count(const kdc_rt_plan *p, size_t func) {
  return func < p->prog.n_funcs ? p->prog.funcs[func].n_outputs : 0;
}

const kdc_rt_tensor_info *kdc_rt_plan_output(const kdc_rt_plan *p, size_t func, size_t i) {
  return i < kdc_rt_plan_output_count(p, func) ? &p->prog.funcs[func].outputs[i] : NULL;
}

const char *kdc_rt_plan_metadata(const kdc_rt_plan *p) { return p->metadata ? p->metadata : ""; }
const char *kdc_rt_plan_matmul_precision(const kdc_rt_plan *p) {
  const char *r = "highest";
  json_object *m = p->metadata && *p->metadata ? json_tokener_parse(p->metadata) : NULL, *v;
  if (m && json_object_object_get_ex(m, "matmul_precision", &v) &&
      json_object_is_type(v, json_type_string) && !strcmp(json_object_get_string(v), "tf32"))
    r = "tf32";
  json_object_put(m);
  return r;
}

const char *kdc_rt_plan_ir_text(const kdc_rt_plan *p) { return p->ir_text ? p->ir_text : ""; }
int kdc_rt_plan_threads(const kdc_rt_plan *p) { return p->n_threads; }
const kdc_prog_mesh *kdc_rt_plan_mesh(const kdc_rt_plan *p) { return &p->prog.mesh; }
int64_t kdc_rt_plan_device_count(const kdc_rt_plan *p) { return p->nd > 0 ? p->nd : 1; }
