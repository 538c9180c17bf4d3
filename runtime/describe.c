/*
 * runtime/describe.c: kdc_rt_plan_describe, the text `kdc inspect plan.bin`
 * prints: what the plan holds, in the order a reader wants it (sizes first,
 * then each function's steps with their buffer ranges, then the IR).
 * The format is for people; it is not parsed and not golden-tested.
 */
#include <inttypes.h>

#include "runtime/runtime.h"

static void put_tensor(FILE *o, const kdc_prog_tensor *t) {
  fprintf(o, "%s[", kdc_io_dtype_name(t->dtype));
  for (int d = 0; d < t->rank; d++) fprintf(o, "%s%" PRId64, d ? "," : "", t->dims[d]);
  fprintf(o, "]");
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
    put_loc(o, f, p, &s->kernel.args[0]);
    for (uint32_t a = 1; a < s->kernel.n_args; a++) {
      fprintf(o, a == 1 ? " in=" : ",");
      put_loc(o, f, p, &s->kernel.args[a]);
    }
    break;
  case KDC_STEP_GEMM: {
    const kdc_prog_gemm_step *g = &s->gemm;
    fprintf(o, "gemm batch=%" PRId64 " m=%" PRId64 " n=%" PRId64 " k=%" PRId64 " %c%c A=",
            g->batch, g->m, g->n, g->k, g->trans_a ? 'T' : 'N', g->trans_b ? 'T' : 'N');
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
  }
  fprintf(o, "\n");
}

void kdc_rt_plan_describe(const kdc_rt_plan *plan, FILE *o) {
  const kdc_program *p = &plan->prog;
  fprintf(o, "plan %s (written by kdc %s)\n", plan->path, kdc_plan_file_kdc_version(plan->file));
  fprintf(o, "%s", kdc_rt_plan_metadata(plan));
  uint64_t wbytes = 0;
  for (uint32_t i = 0; i < p->n_weights; i++) wbytes += p->weights[i].bytes;
  fprintf(o, "arena: %" PRIu64 " bytes\nkernels: %u\nweights: %u (%" PRIu64 " bytes)\n",
          p->arena_bytes, p->n_kernels, p->n_weights, wbytes);
  for (uint32_t i = 0; i < p->n_weights; i++) {
    fprintf(o, "  %s ", p->weights[i].name);
    put_tensor(o, &p->weights[i]);
    fprintf(o, "\n");
  }
  for (uint32_t i = 0; i < p->n_funcs; i++) {
    const kdc_prog_func *f = &p->funcs[i];
    fprintf(o, "func %s: %u inputs, %u outputs, %u steps\n", f->name, f->n_inputs, f->n_outputs,
            f->n_steps);
    for (uint32_t j = 0; j < f->n_inputs; j++) {
      fprintf(o, "  input %s ", f->inputs[j].name);
      put_tensor(o, &f->inputs[j]);
      fprintf(o, "\n");
    }
    for (uint32_t j = 0; j < f->n_outputs; j++) {
      fprintf(o, "  output %s ", f->outputs[j].name);
      put_tensor(o, &f->outputs[j]);
      fprintf(o, "\n");
    }
    for (uint32_t s = 0; s < f->n_steps; s++) put_step(o, p, f, s, &f->steps[s]);
  }
  const char *ir = kdc_rt_plan_ir_text(plan);
  if (*ir) fprintf(o, "ir:\n%s", ir);
}
