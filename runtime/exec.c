/*
 * runtime/exec.c: running one function of a plan.
 *
 * A run binds the caller's input and output pointers, resolves every kernel
 * argument to base + offset in the argument arrays made at load, and walks
 * the steps: KERNEL calls the JIT'd function over its rows (split over the
 * thread pool when the step is big enough), GEMM calls cblas_sgemm per
 * batch entry, COPY is a memcpy.  No allocation, no locks besides the
 * pool's wake-up.  Every offset was checked against its buffer's size when
 * the plan was loaded, so nothing here is re-checked per step.
 */
#include <string.h>

#include <cblas.h>

#include "runtime/runtime.h"

/* Below this many element-ops a kernel runs on the calling thread: waking
 * workers costs a few microseconds, about what 64K simple ops take. */
enum { PARALLEL_MIN_OPS = 1 << 16, OPS_PER_CHUNK = 1 << 14 };

typedef struct bind {
  void *const *in;
  void *const *out;
  const void *const *weights;
  void *arena;
} bind;

static void *resolve(const bind *b, const kdc_prog_loc *l) {
  char *base;
  switch (l->buf) {
  case KDC_PROG_BUF_ARENA: base = b->arena; break;
  case KDC_PROG_BUF_INPUT: base = b->in[l->index]; break;
  case KDC_PROG_BUF_OUTPUT: base = b->out[l->index]; break;
  default: base = (char *)b->weights[l->index]; break;
  }
  return base + l->offset;
}

static void run_kernel(kdc_rt_plan *p, kdc_rt_kernel_fn fn, void **args,
                       const kdc_prog_kernel_step *k) {
  int64_t ops = k->extent * (k->unit_cost > 0 ? k->unit_cost : 1);
  if (p->n_threads <= 1 || k->extent < 2 || ops < PARALLEL_MIN_OPS) {
    fn(args, 0, k->extent);
    return;
  }
  int64_t chunks = ops / OPS_PER_CHUNK;
  if (chunks > 4 * (int64_t)p->n_threads) chunks = 4 * (int64_t)p->n_threads;
  if (chunks > k->extent) chunks = k->extent;
  rt_pool_run(p->pool, fn, args, k->extent, chunks);
}

static void run_gemm(const bind *b, const kdc_prog_gemm_step *g) {
  const float *A = resolve(b, &g->a), *B = resolve(b, &g->b);
  float *C = resolve(b, &g->c);
  for (int64_t i = 0; i < g->batch; i++)
    cblas_sgemm(CblasRowMajor, g->trans_a ? CblasTrans : CblasNoTrans,
                g->trans_b ? CblasTrans : CblasNoTrans, (blasint)g->m, (blasint)g->n,
                (blasint)g->k, 1.0f, A + i * g->stride_a, (blasint)g->lda, B + i * g->stride_b,
                (blasint)g->ldb, 0.0f, C + i * g->stride_c, (blasint)g->ldc);
}

kdc_status kdc_rt_plan_run_func(kdc_rt_plan *p, size_t func, const void *const *inputs,
                                void *const *outputs) {
  if (func >= p->prog.n_funcs)
    return KDC_ERR(KDC_INVALID_INPUT, "%s: no function %zu (the plan has %u)", p->path, func,
                   p->prog.n_funcs);
  const kdc_prog_func *f = &p->prog.funcs[func];
  for (uint32_t i = 0; i < f->n_inputs; i++)
    if (!inputs || (!inputs[i] && f->inputs[i].bytes))
      return KDC_ERR(KDC_INVALID_INPUT, "%s: %s: input %u (%s) is missing", p->path, f->name, i,
                     f->inputs[i].name);
  for (uint32_t i = 0; i < f->n_outputs; i++)
    if (!outputs || (!outputs[i] && f->outputs[i].bytes))
      return KDC_ERR(KDC_INVALID_INPUT, "%s: %s: output %u (%s) is missing", p->path, f->name, i,
                     f->outputs[i].name);
  bind b = {(void *const *)inputs, outputs, p->prog.weight_data, p->scratch};
  rt_func *rf = &p->funcs[func];
  for (uint32_t s = 0; s < f->n_steps; s++) {
    const kdc_prog_step *st = &f->steps[s];
    switch (st->kind) {
    case KDC_STEP_KERNEL: {
      void **args = rf->step_args[s];
      for (uint32_t a = 0; a < st->kernel.n_args; a++) args[a] = resolve(&b, &st->kernel.args[a]);
      run_kernel(p, p->kernels[st->kernel.kernel], args, &st->kernel);
      break;
    }
    case KDC_STEP_GEMM: run_gemm(&b, &st->gemm); break;
    case KDC_STEP_COPY:
      memmove(resolve(&b, &st->dst), resolve(&b, &st->src), st->src.bytes);
      break;
    }
  }
  return NULL;
}

kdc_status kdc_rt_plan_run(kdc_rt_plan *p, const void *const *inputs, void *const *outputs) {
  return kdc_rt_plan_run_func(p, 0, inputs, outputs);
}
