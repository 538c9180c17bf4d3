/*
 * runtime/resident.c: a function's inputs kept where the kernels run
 * (runtime.h, "Resident data"; bench_plan --resident, docs/gpu.md).
 *
 * Made once: the global inputs are split into every local device's piece
 * (rt_io_split, as a run does) and each piece copied into memory of that
 * device (rt_mem_alloc: GPU memory for a CUDA plan, host memory
 * otherwise); room for every output piece is allocated there too.  A run
 * then binds them (in_dev / out_dev on a GPU, in_ptr / out_ptr on the
 * CPU) and nothing crosses the bus: what the peers' benchmarks time (XLA's
 * and PyTorch's data stay on the GPU).
 */
#include <stdlib.h>
#include <string.h>

#include "runtime/runtime.h"

struct kdc_rt_resident {
  kdc_rt_plan *p;
  size_t func;
  void **in, **out;          /* [device * n + i] */
};

kdc_status kdc_rt_resident_create(kdc_rt_plan *p, size_t func, const void *const *inputs,
                                  kdc_rt_resident **out) {
  *out = NULL;
  if (func >= p->prog.n_funcs)
    return KDC_ERR(KDC_INVALID_INPUT, "%s: no function %zu", p->path, func);
  const kdc_prog_func *f = &p->prog.funcs[func];
  rt_func *rf = &p->funcs[func];
  for (uint32_t i = 0; i < f->n_inputs; i++)
    if (!inputs || (!inputs[i] && f->inputs[i].bytes))
      return KDC_ERR(KDC_INVALID_INPUT, "%s: %s: input %u (%s) is missing", p->path, f->name, i,
                     f->inputs[i].name);
  kdc_rt_resident *r = kdc_xcalloc(1, sizeof *r);
  r->p = p;
  r->func = func;
  r->in = kdc_xcalloc((size_t)p->nd * f->n_inputs + 1, sizeof *r->in);
  r->out = kdc_xcalloc((size_t)p->nd * f->n_outputs + 1, sizeof *r->out);
  void **host_out = kdc_xcalloc(f->n_outputs + 1, sizeof *host_out);
  for (uint32_t o = 0; o < f->n_outputs; o++) host_out[o] = kdc_xcalloc(1, f->outputs[o].bytes + 1);
  rt_io_split(p, f, rf, inputs, host_out);
  kdc_status st = NULL;
  for (int64_t d = p->d0; d < p->d1 && !st; d++) {
    for (uint32_t i = 0; i < f->n_inputs && !st; i++) {
      size_t n = f->inputs[i].local_bytes, k = (size_t)d * f->n_inputs + i;
      st = rt_mem_alloc(p, d, n, &r->in[k]);
      if (!st) st = rt_mem_put(p, d, r->in[k], rf->in_ptr[k], n);
    }
    for (uint32_t o = 0; o < f->n_outputs && !st; o++)
      st = rt_mem_alloc(p, d, f->outputs[o].local_bytes, &r->out[(size_t)d * f->n_outputs + o]);
  }
  for (uint32_t o = 0; o < f->n_outputs; o++) free(host_out[o]);
  free(host_out);
  if (st) {
    kdc_rt_resident_destroy(r);
    return st;
  }
  *out = r;
  return NULL;
}

/* Binds |r|'s buffers (or unbinds them: |on| false). */
static void bind(kdc_rt_resident *r, bool on) {
  kdc_rt_plan *p = r->p;
  const kdc_prog_func *f = &p->prog.funcs[r->func];
  rt_func *rf = &p->funcs[r->func];
  for (int64_t d = p->d0; d < p->d1; d++) {
    for (uint32_t i = 0; i < f->n_inputs; i++) {
      size_t k = (size_t)d * f->n_inputs + i;
      if (p->cuda) rf->in_dev[k] = on ? r->in[k] : NULL;
      else rf->in_ptr[k] = r->in[k];
    }
    for (uint32_t o = 0; o < f->n_outputs; o++) {
      size_t k = (size_t)d * f->n_outputs + o;
      if (p->cuda) rf->out_dev[k] = on ? r->out[k] : NULL;
      else rf->out_ptr[k] = r->out[k];
    }
  }
}

kdc_status kdc_rt_resident_run(kdc_rt_resident *r) {
  bind(r, true);
  kdc_status st = rt_exec_steps(r->p, r->func);
  bind(r, false);
  return st;
}

kdc_status kdc_rt_resident_output(kdc_rt_resident *r, size_t o, int64_t dev, void *dst) {
  kdc_rt_plan *p = r->p;
  const kdc_prog_func *f = &p->prog.funcs[r->func];
  if (o >= f->n_outputs || dev < p->d0 || dev >= p->d1)
    return KDC_ERR(KDC_INVALID_INPUT, "%s: %s: no output %zu on device %lld here", p->path,
                   f->name, o, (long long)dev);
  return rt_mem_get(p, dev, dst, r->out[(size_t)dev * f->n_outputs + o], f->outputs[o].local_bytes);
}

void kdc_rt_resident_destroy(kdc_rt_resident *r) {
  if (!r) return;
  kdc_rt_plan *p = r->p;
  const kdc_prog_func *f = &p->prog.funcs[r->func];
  for (int64_t d = p->d0; d < p->d1; d++) {
    for (uint32_t i = 0; i < f->n_inputs; i++)
      if (r->in[(size_t)d * f->n_inputs + i]) rt_mem_free(p, d, r->in[(size_t)d * f->n_inputs + i]);
    for (uint32_t o = 0; o < f->n_outputs; o++)
      if (r->out[(size_t)d * f->n_outputs + o])
        rt_mem_free(p, d, r->out[(size_t)d * f->n_outputs + o]);
  }
  free(r->in), free(r->out);
  free(r);
}
