/*
 * passes/step_cost.c: the predicted time and memory of one call of a
 * partitioned, fused and memory-planned function on one device (the cost
 * model of `--layout auto`, docs/sharding.md "Cost model").
 *
 * Per step of the function, as the runtime runs it:
 *   - a GEMM (DOT outside a group): a roofline, max(flops / gemm_flops_per_s,
 *     bytes of operands and result / bytes_per_s), plus step_s;
 *   - a convolution kept as a direct kernel: its flops at gemm rate / 8
 *     (codegen's direct loops run far from the GEMM's rate);
 *   - a fusion group (one kernel): the bytes it reads from outside the group
 *     (splat constants are immediates) plus the bytes its root writes, at
 *     bytes_per_s, plus step_s;
 *   - a collective: latency_s of its slowest axis + its bytes per device
 *     (SHARDING.md 4, kdc_coll_bytes) at that axis's bytes_per_s for the
 *     ones that sum (all_reduce, reduce_scatter) or move_bytes_per_s for the
 *     ones that only move data (on the virtual mesh those read the other
 *     devices' pieces in place, runtime/gather_inplace.c: far faster);
 *   - a scan: its body's cost times the length.
 * Compute is per device; devices that share lanes (the virtual mesh's
 * devices share the host's cores) run one after the other, so the compute
 * part is multiplied by devices / lanes (below 1 when there are more lanes
 * than devices: the runtime splits a device's GEMMs and kernels in row
 * blocks over the pool).  Collectives are timed
 * as a whole (the machine file's numbers are measured per collective call).
 * Memory: the device's pieces of the function's parameters (weights,
 * optimizer state, inputs), its results that are not written back in place
 * (a result named like a parameter), and the largest arena of the module's
 * entry functions: the numbers `kdc inspect` prints for the plan.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "passes/passes.h"

void kdc_machine_defaults(kdc_machine *mc) {
  memset(mc, 0, sizeof *mc);
  /* Measured on the 2-core build VM's virtual mesh by bench/bench_auto.c
   * (docs/sharding.md "Cost model": micro-benchmark rates divided by the
   * factor fitted on mesh 2, 3.0); a machine file overrides them. */
  snprintf(mc->name, sizeof mc->name, "virtual-cpu (kdc defaults)");
  mc->gemm_flops_per_s = 5.5e10;
  mc->bytes_per_s = 2.4e10;
  mc->step_s = 1.5e-6;
  mc->lanes = 2;
  mc->default_axis.latency_s = 1.0e-6;
  mc->default_axis.bytes_per_s = 2.7e9;
  /* all_gather / all_to_all share their result between the virtual devices
   * (runtime/gather_inplace.c): the DataParallel MNIST train_step's profile
   * (bench_plan --profile 1) gathers 89600 bytes per device in 7 us and
   * 548800 in under 1 us; 1.3e10 B/s is the slower of the two */
  mc->default_axis.move_bytes_per_s = 1.3e10;
}

/* The link of a collective over |axes|: the slowest of its axes. */
static kdc_machine_axis link_of(const kdc_machine *mc, const kdc_mesh *mesh, const kdc_attr_coll *c) {
  kdc_machine_axis l = {0, 0, 0, ""};
  bool any = false;
  for (int i = 0; i < c->naxes; i++) {
    kdc_machine_axis a = mc->default_axis;
    const char *name = c->axes[i] < mesh->naxes ? mesh->names[c->axes[i]] : "";
    for (int k = 0; k < mc->n_axes; k++)
      if (!strcmp(mc->axes[k].name, name)) a = mc->axes[k];
    double move = a.move_bytes_per_s > 0 ? a.move_bytes_per_s : a.bytes_per_s;
    if (!any || a.latency_s > l.latency_s) l.latency_s = a.latency_s;
    if (!any || a.bytes_per_s < l.bytes_per_s) l.bytes_per_s = a.bytes_per_s;
    if (!any || move < l.move_bytes_per_s) l.move_bytes_per_s = move;
    any = true;
  }
  if (!any) {
    l = mc->default_axis;
    if (l.move_bytes_per_s <= 0) l.move_bytes_per_s = l.bytes_per_s;
  }
  return l;
}

static double prod(const kdc_type *t, const kdc_dimlist *dims) {
  double p = 1;
  for (int i = 0; i < dims->n; i++) p *= (double)t->dims[dims->v[i]];
  return p;
}

static kdc_status func_cost(const kdc_module *m, const kdc_func *f, const kdc_machine *mc,
                            double times, kdc_step_cost *c, int depth) {
  if (depth > 1) return KDC_ERR(KDC_INTERNAL, "step_cost: a scan body inside a scan body");
  /* the root (highest id) of every fusion group */
  int32_t n_groups = 0;
  for (size_t v = 0; v < f->n_nodes; v++)
    if (f->nodes[v].group >= n_groups) n_groups = f->nodes[v].group + 1;
  int64_t *root = n_groups ? kdc_xcalloc((size_t)n_groups, sizeof *root) : NULL;
  double *gbytes = n_groups ? kdc_xcalloc((size_t)n_groups, sizeof *gbytes) : NULL;
  for (size_t v = 0; v < f->n_nodes; v++)
    if (f->nodes[v].group >= 0) root[f->nodes[v].group] = (int64_t)v;
  kdc_status st = NULL;
  for (size_t v = 0; v < f->n_nodes && !st; v++) {
    const kdc_node *nd = &f->nodes[v];
    double out_b = (double)kdc_type_bytes(&nd->type);
    if (nd->group >= 0) {
      for (int i = 0; i < nd->n_in; i++) {
        const kdc_node *o = &f->nodes[nd->in[i]];
        if (o->group == nd->group || (o->op == KDC_OP_CONSTANT && o->attr.constant.splat))
          continue;  /* fused, or an immediate */
        gbytes[nd->group] += (double)kdc_type_bytes(&o->type);
      }
      if (nd->op == KDC_OP_CONVOLUTION) {
        const kdc_type *k = kdc_ir_type(f, nd->in[1]);
        double taps = 1;
        for (int d = 0; d + 2 < k->rank; d++) taps *= (double)k->dims[d];
        double fl = 2.0 * (double)kdc_type_numel(&nd->type) * taps * (double)k->dims[k->rank - 2];
        c->flops += fl * times;
        c->compute_s += fl / (mc->gemm_flops_per_s / 8) * times;
      }
      if (root[nd->group] == (int64_t)v) {
        double b = gbytes[nd->group] + out_b;
        c->mem_bytes += b * times;
        c->compute_s += (b / mc->bytes_per_s + mc->step_s) * times;
        c->n_steps += (int64_t)times;
      }
      continue;
    }
    switch (nd->op) {
    case KDC_OP_PARAMETER:
    case KDC_OP_CONSTANT:
    case KDC_OP_RESHAPE:
    case KDC_OP_SHARDING_CONSTRAINT:
    case KDC_OP_SHARD_SLICE:
      break;
    case KDC_OP_DOT: {
      const kdc_type *l = kdc_ir_type(f, nd->in[0]), *r = kdc_ir_type(f, nd->in[1]);
      double fl = 2.0 * (double)kdc_type_numel(&nd->type) * prod(l, &nd->attr.dot.lhs_contract);
      double b = (double)kdc_type_bytes(l) + (double)kdc_type_bytes(r) + out_b;
      c->flops += fl * times;
      c->mem_bytes += b * times;
      c->compute_s += (fmax(fl / mc->gemm_flops_per_s, b / mc->bytes_per_s) + mc->step_s) * times;
      c->n_steps += (int64_t)times;
      break;
    }
    case KDC_OP_ALL_REDUCE:
    case KDC_OP_ALL_GATHER:
    case KDC_OP_REDUCE_SCATTER:
    case KDC_OP_ALL_TO_ALL:
    case KDC_OP_COLLECTIVE_PERMUTE: {
      double b = kdc_coll_bytes(&m->mesh, nd->op, &nd->attr.coll, kdc_ir_type(f, nd->in[0]),
                                &nd->type);
      kdc_machine_axis l = link_of(mc, &m->mesh, &nd->attr.coll);
      bool sums = nd->op == KDC_OP_ALL_REDUCE || nd->op == KDC_OP_REDUCE_SCATTER;
      c->coll_bytes += b * times;
      c->coll_s += (l.latency_s + b / (sums ? l.bytes_per_s : l.move_bytes_per_s)) * times;
      c->n_collectives += (int64_t)times;
      break;
    }
    case KDC_OP_SCAN: {
      const kdc_func *body = kdc_ir_scan_body(f, (kdc_value_id)v);
      if (!body) {
        st = KDC_ERR(KDC_INTERNAL, "step_cost: scan %%%zu has no body", v);
        break;
      }
      st = func_cost(m, body, mc, times * (double)nd->attr.scan.length, c, depth + 1);
      break;
    }
    default: /* an unfused node: a kernel of one node */
      for (int i = 0; i < nd->n_in; i++) out_b += (double)kdc_type_bytes(kdc_ir_type(f, nd->in[i]));
      c->mem_bytes += out_b * times;
      c->compute_s += (out_b / mc->bytes_per_s + mc->step_s) * times;
      c->n_steps += (int64_t)times;
      break;
    }
  }
  free(root);
  free(gbytes);
  return st;
}

/* Local bytes of the inputs (parameters that are not weights) and outputs
 * of |f|: the plan's function inputs and outputs. */
static int64_t io_bytes(const kdc_func *f) {
  int64_t b = 0;
  for (size_t p = 0; p < f->n_params; p++) {
    const kdc_node *pn = kdc_ir_node(f, f->params[p]);
    if (pn->attr.param.kind != KDC_PARAM_WEIGHT) b += (int64_t)kdc_type_bytes(&pn->type);
  }
  for (size_t r = 0; r < f->n_results; r++)
    b += (int64_t)kdc_type_bytes(kdc_ir_type(f, f->results[r]));
  return b;
}

kdc_status kdc_step_cost_of(const kdc_module *m, const kdc_func *f, const kdc_machine *mc,
                         kdc_step_cost *out) {
  memset(out, 0, sizeof *out);
  KDC_RETURN_IF_ERROR(func_cost(m, f, mc, 1.0, out, 0));
  double devices = (double)kdc_mesh_devices(&m->mesh);
  /* lanes > devices: a device's GEMMs and kernels are split over the spare
   * lanes too (the runtime's row blocks) */
  double lanes = mc->lanes > 0 ? (double)mc->lanes : devices;
  out->step_s = out->compute_s * (devices / lanes) + out->coll_s;
  /* as `kdc inspect` counts it: the weights once, the largest function's
   * inputs and outputs, the largest arena */
  for (size_t p = 0; p < f->n_params; p++) {
    const kdc_node *pn = kdc_ir_node(f, f->params[p]);
    if (pn->attr.param.kind == KDC_PARAM_WEIGHT) out->weight_bytes += (int64_t)kdc_type_bytes(&pn->type);
  }
  for (size_t i = 0; i < m->n_funcs; i++) {
    /* train_forward is built into train_step, never a plan function */
    if (kdc_ir_func_is_body(m, m->funcs[i]) || !strcmp(m->funcs[i]->name, "train_forward")) continue;
    int64_t a = kdc_pass_plan_memory_arena_bytes(m->funcs[i]), io = io_bytes(m->funcs[i]);
    if (a > out->arena_bytes) out->arena_bytes = a;
    if (io > out->io_bytes) out->io_bytes = io;
  }
  out->peak_bytes = out->weight_bytes + out->io_bytes + out->arena_bytes;
  return NULL;
}
