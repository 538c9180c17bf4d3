/*
 * runtime/describe.c: kdc_rt_plan_describe, the text `kdc inspect plan.bin`
 * prints: what the plan holds, in the order a reader wants it (the mesh and
 * sizes first, each device's peak memory, then each function's inputs,
 * outputs and steps with their buffer ranges -- collectives with their
 * device groups and the bytes each device sends per call (SHARDING.md 4) --
 * then the IR).  The format is for people; it is not parsed and not
 * golden-tested.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/cuda/graph.h"
#include "runtime/cuda/host.h"
#include "runtime/runtime.h"

static void put_dims(FILE *o, kdc_io_dtype dt, int rank, const int64_t *dims) {
  fprintf(o, "%s[", kdc_io_dtype_name(dt));
  for (int d = 0; d < rank; d++) fprintf(o, "%s%" PRId64, d ? "," : "", dims[d]);
  fprintf(o, "]");
}

/* "f32[64,128]", plus " {data,-} local f32[32,128]" on a mesh. */
static void put_tensor_sharded(FILE *o, const kdc_program *p, const kdc_prog_tensor *t) {
  put_dims(o, t->dtype, t->rank, t->dims);
  if (p->mesh.naxes == 0) return;
  char sh[512];
  fprintf(o, " %s local ", kdc_prog_sharding_str(&p->mesh, &t->sharding, t->rank, sh, sizeof sh));
  put_dims(o, t->dtype, t->rank, t->local_dims);
}

/* Bytes one device sends (= receives) per call of |c|, for bandwidth-optimal
 * algorithms (SHARDING.md 4), and the formula. */
static double coll_bytes(const kdc_prog_coll_step *c, const char **out_formula) {
  double n = (double)c->group_size, s = (double)c->src.bytes, f = (n - 1) / n;
  switch (c->kind) {
  case KDC_COLL_ALL_REDUCE: *out_formula = "2(n-1)/n*S"; return 2 * f * s;
  case KDC_COLL_ALL_GATHER: *out_formula = "(n-1)/n*S"; return f * (double)c->dst.bytes;
  case KDC_COLL_REDUCE_SCATTER: *out_formula = "(n-1)/n*S"; return f * s;
  case KDC_COLL_ALL_TO_ALL: *out_formula = "(n-1)/n^2*S"; return f * s;
  default: *out_formula = "S_local"; return s;
  }
}

static void put_axes(FILE *o, const kdc_program *p, const kdc_prog_coll_step *c) {
  for (uint32_t i = 0; i < c->naxes; i++)
    fprintf(o, "%s%s", i ? "," : "", p->mesh.names[c->axes[i]]);
}

static void put_coll(FILE *o, const kdc_program *p, const kdc_prog_coll_step *c) {
  char groups[4096];
  const char *formula;
  fprintf(o, "collective %s[", kdc_prog_coll_name(c->kind));
  put_axes(o, p, c);
  fprintf(o, "] ");
  put_dims(o, c->dtype, c->rank, c->in_dims);
  fprintf(o, " -> ");
  put_dims(o, c->dtype, c->rank, c->out_dims);
  if (c->kind == KDC_COLL_ALL_GATHER || c->kind == KDC_COLL_REDUCE_SCATTER)
    fprintf(o, " dim=%" PRId64, c->dim);
  if (c->kind == KDC_COLL_ALL_TO_ALL)
    fprintf(o, " split=%" PRId64 " concat=%" PRId64, c->dim, c->dim2);
  if (c->kind == KDC_COLL_PERMUTE) fprintf(o, " shift=%" PRId64, c->shift);
  double b = coll_bytes(c, &formula);
  fprintf(o, " n=%" PRId64 " bytes/device=%.0f (%s)\n          groups (", c->group_size, b,
          formula);
  put_axes(o, p, c);
  fprintf(o, "): %s\n          ",
          rt_mesh_groups_str(&p->mesh, (int)c->naxes, c->axes, groups, sizeof groups));
}

static void put_loc(FILE *o, const kdc_prog_func *f, const kdc_program *p, const kdc_prog_loc *l) {
  switch (l->buf) {
  case KDC_PROG_BUF_ARENA: fprintf(o, "arena"); break;
  case KDC_PROG_BUF_INPUT: fprintf(o, "in:%s", f->inputs[l->index].name); break;
  case KDC_PROG_BUF_OUTPUT: fprintf(o, "out:%s", f->outputs[l->index].name); break;
  default: fprintf(o, "w:%s", p->weights[l->index].name); break;
  }
  fprintf(o, "+%" PRIu64 "[%" PRIu64 "]", l->offset, l->bytes);
}

static void put_step(FILE *o, const kdc_program *p, const kdc_prog_func *f, uint32_t i,
                     const kdc_prog_step *s) {
  fprintf(o, "    %3u ", i);
  switch (s->kind) {
  case KDC_STEP_KERNEL:
    fprintf(o, "kernel %s rows=%" PRId64 " cost/row=%" PRId64 " out=",
            p->kernels[s->kernel.kernel].name, s->kernel.extent, s->kernel.unit_cost);
    for (uint32_t a = 0; a < s->kernel.n_args; a++) {
      fprintf(o, a == s->kernel.n_out ? " in=" : a ? "," : "");
      put_loc(o, f, p, &s->kernel.args[a]);
    }
    break;
  case KDC_STEP_GEMM: {
    const kdc_prog_gemm_step *g = &s->gemm;
    fprintf(o, "gemm batch=%" PRId64 " m=%" PRId64 " n=%" PRId64 " k=%" PRId64 " %c%c", g->batch,
            g->m, g->n, g->k, g->trans_a ? 'T' : 'N', g->trans_b ? 'T' : 'N');
    if (g->dtype != KDC_IO_DTYPE_F32) fprintf(o, " (%s)", kdc_io_dtype_name(g->dtype));
    if (g->bf16_inputs) fprintf(o, " (bf16 inputs)");
    if (g->batch_inner > 1)
      fprintf(o, " batch=%" PRId64 "x%" PRId64 " strides A=%" PRId64 ",%" PRId64 " B=%" PRId64
              ",%" PRId64 " lda=%" PRId64 " ldb=%" PRId64, g->batch / g->batch_inner,
              g->batch_inner, g->stride_a, g->stride_a2, g->stride_b, g->stride_b2, g->lda,
              g->ldb);
    fprintf(o, " A=");
    put_loc(o, f, p, &g->a);
    fprintf(o, " B=");
    put_loc(o, f, p, &g->b);
    fprintf(o, " C=");
    put_loc(o, f, p, &g->c);
    break;
  }
  case KDC_STEP_COPY:
    fprintf(o, "copy ");
    put_loc(o, f, p, &s->src);
    fprintf(o, " -> ");
    put_loc(o, f, p, &s->dst);
    break;
  case KDC_STEP_COLLECTIVE:
    put_coll(o, p, &s->coll);
    fprintf(o, "src=");
    put_loc(o, f, p, &s->coll.src);
    fprintf(o, " dst=");
    put_loc(o, f, p, &s->coll.dst);
    break;
  case KDC_STEP_LOOP: {
    const kdc_prog_loop_step *l = &s->loop;
    fprintf(o, "loop %s x%" PRId64 " carries=%u in=", p->funcs[l->body].name, l->length,
            l->n_carry);
    for (uint32_t k = 0; k < l->n_in; k++) {
      if (k) fputc(',', o);
      put_loc(o, f, p, &l->in[k]);
      if (l->in_stride[k]) fprintf(o, "+t*%" PRId64, l->in_stride[k]);
    }
    fprintf(o, " out=");
    for (uint32_t k = 0; k < l->n_out; k++) {
      if (k) fputc(',', o);
      put_loc(o, f, p, &l->out[k]);
      if (l->out_stride[k]) fprintf(o, "+t*%" PRId64, l->out_stride[k]);
    }
    break;
  }
  }
  fprintf(o, "\n");
}

/* The device-peak memory parts (arena, weights, largest function's I/O). */
static void memory_parts(const kdc_program *p, uint64_t *w, uint64_t *io) {
  *w = 0, *io = 0;
  for (uint32_t i = 0; i < p->n_weights; i++) *w += p->weights[i].local_bytes;
  for (uint32_t i = 0; i < p->n_funcs; i++) {
    uint64_t b = 0;
    for (uint32_t j = 0; j < p->funcs[i].n_inputs; j++) b += p->funcs[i].inputs[j].local_bytes;
    for (uint32_t j = 0; j < p->funcs[i].n_outputs; j++) b += p->funcs[i].outputs[j].local_bytes;
    if (b > *io) *io = b;
  }
}

/* The number after |key| in |obj| (text), or -1. */
static double meta_num(const char *obj, const char *key) {
  const char *k = obj ? strstr(obj, key) : NULL;
  return k ? strtod(k + strlen(key), NULL) : -1;
}

/* "<name>" after |key| in |obj| into |buf|. */
static void meta_name(const char *obj, const char *key, char *buf, size_t n) {
  const char *k = obj ? strstr(obj, key) : NULL;
  snprintf(buf, n, "?");
  if (!k) return;
  k += strlen(key);
  const char *e = strchr(k, '"');
  if (e) snprintf(buf, n, "%.*s", (int)(e - k), k);
}

/* A plan compiled with --layout auto: the predicted step time of the chosen
 * layout and of the runner-up (METADATA "auto_layout", api/auto_layout.c). */
static void put_predicted(FILE *o, const kdc_rt_plan *plan) {
  const char *a = strstr(kdc_rt_plan_metadata(plan), "\"auto_layout\": {");
  if (!a) return;
  const char *chosen = strstr(a, "\"chosen\": {"), *ru = strstr(a, "\"runner_up\": {");
  char name[128], scored[32];
  meta_name(chosen, "\"name\": \"", name, sizeof name);
  meta_name(a, "\"scored\": \"", scored, sizeof scored);
  fprintf(o, "predicted step time (--layout auto, %s per %s call): %.3f ms, peak %.0f bytes per "
          "device", name, scored, meta_num(chosen, "\"predicted_step_s\": ") * 1e3,
          meta_num(chosen, "\"peak_bytes\": "));
  if (ru) {
    meta_name(ru, "\"name\": \"", name, sizeof name);
    fprintf(o, "; runner-up %s: %.3f ms, peak %.0f bytes", name,
            meta_num(ru, "\"predicted_step_s\": ") * 1e3, meta_num(ru, "\"peak_bytes\": "));
  }
  fprintf(o, "\n");
}

/* The mesh, and each device's peak memory: its arena, its pieces of the
 * weights, and its pieces of the largest function's inputs and outputs. */
static void put_devices(FILE *o, const kdc_rt_plan *plan) {
  const kdc_program *p = &plan->prog;
  int64_t nd = kdc_rt_plan_device_count(plan);
  fprintf(o, "mesh: ");
  if (p->mesh.naxes == 0) fprintf(o, "none");
  for (uint32_t a = 0; a < p->mesh.naxes; a++)
    fprintf(o, "%s%s=%" PRId64, a ? ", " : "", p->mesh.names[a], p->mesh.sizes[a]);
  fprintf(o, " (%" PRId64 " device%s, device ids row-major)\n", nd, nd == 1 ? "" : "s");
  uint64_t w, io;
  memory_parts(p, &w, &io);
  uint64_t total = p->arena_bytes + w + io;
  fprintf(o, "memory per device (peak): arena %" PRIu64 " + weights %" PRIu64
          " + inputs/outputs %" PRIu64 " = %" PRIu64 " bytes\n", p->arena_bytes, w, io, total);
  put_predicted(o, plan);
  for (int64_t d = 0; d < nd && d < 64 && p->mesh.naxes; d++) {
    int64_t c[KDC_PROG_MAX_AXES];
    rt_mesh_coords(&p->mesh, d, c);
    fprintf(o, "  device %" PRId64 " (", d);
    for (uint32_t a = 0; a < p->mesh.naxes; a++)
      fprintf(o, "%s%s=%" PRId64, a ? "," : "", p->mesh.names[a], c[a]);
    fprintf(o, "): %" PRIu64 " bytes\n", total);
  }
  if (nd > 64) fprintf(o, "  ... (every device: %" PRIu64 " bytes)\n", total);
  uint64_t stack = 0; /* per process, the largest function's, when all devices are local */
  for (uint32_t i = 0; i < p->n_funcs && nd > 1; i++) {
    uint64_t b = 0;
    for (uint32_t s = 0; s < p->funcs[i].n_steps && !p->funcs[i].is_body; s++)
      if (rt_stack_candidate(&p->funcs[i].steps[s]))
        b += rt_stack_bytes(&p->funcs[i].steps[s].gemm, nd);
    if (b > stack) stack = b;
  }
  if (stack)
    fprintf(o, "stacking buffers (one process running every device, GEMMs stacked where bitwise "
               "equal, gemm_stack.c): up to %" PRIu64 " bytes\n", stack);
}

static void json_dims(FILE *o, int rank, const int64_t *dims) {
  fprintf(o, "[");
  for (int d = 0; d < rank; d++) fprintf(o, "%s%" PRId64, d ? ", " : "", dims[d]);
  fprintf(o, "]");
}

void kdc_rt_plan_describe_json(const kdc_rt_plan *plan, FILE *o) {
  const kdc_program *p = &plan->prog;
  uint64_t w, io;
  memory_parts(p, &w, &io);
  fprintf(o, "{\"mesh\": {");
  for (uint32_t a = 0; a < p->mesh.naxes; a++)
    fprintf(o, "%s\"%s\": %" PRId64, a ? ", " : "", p->mesh.names[a], p->mesh.sizes[a]);
  fprintf(o, "}, \"devices\": %" PRId64 ",\n \"memory_per_device\": {\"arena\": %" PRIu64
          ", \"weights\": %" PRIu64 ", \"inputs_outputs\": %" PRIu64 ", \"total\": %" PRIu64
          "},\n \"collectives\": [", kdc_rt_plan_device_count(plan), p->arena_bytes, w, io,
          p->arena_bytes + w + io);
  bool first = true;
  for (uint32_t i = 0; i < p->n_funcs; i++) {
    const kdc_prog_func *f = &p->funcs[i];
    for (uint32_t s = 0; s < f->n_steps; s++) {
      if (f->steps[s].kind != KDC_STEP_COLLECTIVE) continue;
      const kdc_prog_coll_step *c = &f->steps[s].coll;
      const char *formula;
      double b = coll_bytes(c, &formula);
      char groups[4096];
      fprintf(o, "%s\n  {\"function\": \"%s\", \"step\": %u, \"kind\": \"%s\", \"axes\": [",
              first ? "" : ",", f->name, s, kdc_prog_coll_name(c->kind));
      for (uint32_t k = 0; k < c->naxes; k++)
        fprintf(o, "%s\"%s\"", k ? ", " : "", p->mesh.names[c->axes[k]]);
      fprintf(o, "], \"dtype\": \"%s\", \"in\": ", kdc_io_dtype_name(c->dtype));
      json_dims(o, c->rank, c->in_dims);
      fprintf(o, ", \"out\": ");
      json_dims(o, c->rank, c->out_dims);
      fprintf(o, ", \"group_size\": %" PRId64 ", \"bytes_per_device\": %.0f, \"groups\": %s}",
              c->group_size, b,
              rt_mesh_groups_str(&p->mesh, (int)c->naxes, c->axes, groups, sizeof groups));
      first = false;
    }
  }
  fprintf(o, "]}\n");
}

/* Collectives of |f|: count and bytes per device per call of the function. */
static void put_coll_summary(FILE *o, const kdc_prog_func *f) {
  int n = 0;
  double bytes = 0;
  for (uint32_t s = 0; s < f->n_steps; s++)
    if (f->steps[s].kind == KDC_STEP_COLLECTIVE) {
      const char *formula;
      n++;
      bytes += coll_bytes(&f->steps[s].coll, &formula);
    }
  if (n) fprintf(o, "  collectives: %d, %.0f bytes per device per step\n", n, bytes);
}

void kdc_rt_plan_describe_collectives(const kdc_rt_plan *plan, FILE *o) {
  const kdc_program *p = &plan->prog;
  const kdc_prog_mesh *m = &p->mesh;
  fprintf(o, "mesh:");
  if (m->naxes == 0) fprintf(o, " none (1 device)");
  for (uint32_t a = 0; a < m->naxes; a++) fprintf(o, "%s %s=%lld", a ? "," : "", m->names[a], (long long)m->sizes[a]);
  fprintf(o, "\n");
  for (uint32_t i = 0; i < p->n_funcs; i++) {
    const kdc_prog_func *f = &p->funcs[i];
    fprintf(o, "func %s:\n", f->name);
    put_coll_summary(o, f);
    bool any = false;
    for (uint32_t s = 0; s < f->n_steps; s++)
      if (f->steps[s].kind == KDC_STEP_COLLECTIVE) {
        put_step(o, p, f, s, &f->steps[s]);
        any = true;
      }
    if (!any) fprintf(o, "  no collectives\n");
  }
}

/* A CUDA plan's GEMM precision and which functions replay as CUDA graphs
 * when one process drives all its devices (docs/gpu.md). */
static void put_cuda(FILE *o, const kdc_rt_plan *plan) {
  const void *data;
  size_t size;
  if (!kdc_plan_file_find(plan->file, KDC_PLAN_SECTION_PTX, &data, &size)) return;
  const kdc_program *p = &plan->prog;
  /* the code the GPU loads: the cubin of a plan compiled where ptxas was, else PTX */
  kdc_reader r;
  rt_cuda_table t;
  kdc_arena *a = kdc_arena_create();
  kdc_status st = kdc_plan_file_reader(plan->file, KDC_PLAN_SECTION_CUDA, &r);
  if (!st) r.section = "cuda", st = rt_cuda_table_decode(&r, a, p->n_kernels, &t);
  if (st)
    fprintf(o, "cuda: %s\n", kdc_status_message(st));
  else if (t.cubin_bytes)
    fprintf(o, "cuda: sm_%u: cubin %" PRIu64 " bytes (%s; loaded on sm_%u.x GPUs of minor >= %u) "
            "+ PTX %zu bytes (other GPUs: the driver compiles it)\n", t.sm, t.cubin_bytes,
            t.cubin_note, t.cubin_sm / 10, t.cubin_sm % 10, size);
  else
    fprintf(o, "cuda: sm_%u: PTX only, %zu bytes (%s): the driver compiles it at load (cached "
            "per user); compile where ptxas is to ship SASS\n", t.sm, size,
            t.version < 3 ? "a version-2 plan" : t.cubin_note);
  kdc_status_free(st);
  kdc_arena_destroy(a);
  fprintf(o, "cuda: matmul precision %s\ncuda graphs (one process, KDC_CUDA_GRAPHS=0 turns them "
          "off):\n", kdc_rt_plan_matmul_precision(plan));
  for (uint32_t i = 0; i < p->n_funcs; i++) {
    if (p->funcs[i].is_body) continue;
    char why[200];
    uint64_t nodes;
    if (rt_cuda_graph_eligible(p, i, kdc_rt_plan_device_count(plan), &nodes, why, sizeof why))
      fprintf(o, "  %s: yes, %" PRIu64 " operations\n", p->funcs[i].name, nodes);
    else
      fprintf(o, "  %s: no, %s\n", p->funcs[i].name, why);
  }
}

void kdc_rt_plan_describe(const kdc_rt_plan *plan, FILE *o) {
  const kdc_program *p = &plan->prog;
  fprintf(o, "plan %s (written by kdc %s)\n", plan->path, kdc_plan_file_kdc_version(plan->file));
  fprintf(o, "%s", kdc_rt_plan_metadata(plan));
  uint64_t wbytes = 0;
  for (uint32_t i = 0; i < p->n_weights; i++) wbytes += p->weights[i].bytes;
  put_devices(o, plan);
  put_cuda(o, plan);
  fprintf(o, "arena: %" PRIu64 " bytes per device\nkernels: %u\nweights: %u (%" PRIu64
          " bytes)\n", p->arena_bytes, p->n_kernels, p->n_weights, wbytes);
  for (uint32_t i = 0; i < p->n_weights; i++) {
    fprintf(o, "  %s ", p->weights[i].name);
    put_tensor_sharded(o, p, &p->weights[i]);
    fprintf(o, "\n");
  }
  for (uint32_t i = 0; i < p->n_funcs; i++) {
    const kdc_prog_func *f = &p->funcs[i];
    fprintf(o, "func %s%s: %u inputs, %u outputs, %u steps\n", f->name,
            f->is_body ? " (scan body)" : "", f->n_inputs, f->n_outputs, f->n_steps);
    for (uint32_t j = 0; j < f->n_inputs; j++) {
      fprintf(o, "  input %s ", f->inputs[j].name);
      put_tensor_sharded(o, p, &f->inputs[j]);
      fprintf(o, "\n");
    }
    for (uint32_t j = 0; j < f->n_outputs; j++) {
      fprintf(o, "  output %s ", f->outputs[j].name);
      put_tensor_sharded(o, p, &f->outputs[j]);
      fprintf(o, "\n");
    }
    put_coll_summary(o, f);
    for (uint32_t s = 0; s < f->n_steps; s++) put_step(o, p, f, s, &f->steps[s]);
  }
  const char *ir = kdc_rt_plan_ir_text(plan);
  if (*ir) fprintf(o, "ir:\n%s", ir);
}

void kdc_rt_plan_profile_print(kdc_rt_plan *plan, size_t func, FILE *o) {
  const kdc_program *p = &plan->prog;
  if (func >= p->n_funcs) return;
  const kdc_prog_func *f = &p->funcs[func];
  rt_func *rf = &plan->funcs[func];
  if (!o) { /* reset only (the loop bodies too) */
    memset(rf->prof_ns, 0, f->n_steps * sizeof *rf->prof_ns);
    rf->prof_runs = 0;
    for (uint32_t s = 0; s < f->n_steps; s++)
      if (f->steps[s].kind == KDC_STEP_LOOP && f->steps[s].loop.body != func)
        kdc_rt_plan_profile_print(plan, f->steps[s].loop.body, NULL);
    return;
  }
  if (!plan->profile || !rf->prof_runs) {
    fprintf(o, "profile %s: none (load the plan with profile on, then run it)\n", f->name);
    return;
  }
  double runs = (double)rf->prof_runs, total = 0, by_kind[KDC_STEP_LOOP + 1] = {0};
  for (uint32_t s = 0; s < f->n_steps; s++) total += (double)rf->prof_ns[s];
  fprintf(o, "profile %s: %.3f ms per run over %.0f runs (ms per run, share, step)\n", f->name,
          total / runs * 1e-6, runs);
  for (uint32_t s = 0; s < f->n_steps; s++) {
    double t = (double)rf->prof_ns[s];
    by_kind[f->steps[s].kind <= KDC_STEP_LOOP ? f->steps[s].kind : 0] += t;
    fprintf(o, "%9.3f %5.1f%%", t / runs * 1e-6, total > 0 ? 100 * t / total : 0);
    put_step(o, p, f, s, &f->steps[s]);
    if (rf->stack && rf->stack[s].a) {
      const kdc_prog_gemm_step *g = &f->steps[s].gemm;
      fprintf(o, "          stacked over %" PRId64 " devices: %" PRId64 " rows, %" PRId64
              " per call\n", plan->nd, plan->nd * g->m, rf->stack[s].chunk);
    }
    rf->prof_ns[s] = 0;
  }
  static const struct { int kind; const char *name; } kinds[] = {
      {KDC_STEP_GEMM, "gemm"}, {KDC_STEP_KERNEL, "kernel"}, {KDC_STEP_COPY, "copy"},
      {KDC_STEP_COLLECTIVE, "collective"}, {KDC_STEP_LOOP, "loop"}};
  fprintf(o, "profile %s by kind:", f->name);
  for (size_t k = 0; k < sizeof kinds / sizeof *kinds; k++)
    if (by_kind[kinds[k].kind] > 0)
      fprintf(o, " %s %.3f ms", kinds[k].name, by_kind[kinds[k].kind] / runs * 1e-6);
  fprintf(o, "\n");
  rf->prof_runs = 0;
  for (uint32_t s = 0; s < f->n_steps; s++) /* the loop bodies' steps, per run of |func| */
    if (f->steps[s].kind == KDC_STEP_LOOP && f->steps[s].loop.body != func &&
        plan->funcs[f->steps[s].loop.body].prof_runs)
      kdc_rt_plan_profile_print(plan, f->steps[s].loop.body, o);
}
