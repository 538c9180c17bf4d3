/*
 * passes/step_cost.c: the predicted time and memory of one call of a
 * partitioned, fused and memory-planned function on one device (the cost
 * model of `--layout auto`, docs/sharding.md "Cost model").
 *
 * Per step of the function, as the runtime runs it:
 *   - a GEMM (DOT outside a group): a roofline, max(flops / rate, bytes of
 *     operands and result / bytes_per_s), plus step_s, the rate
 *     gemm_flops_per_s scaled down for narrow GEMMs (m rows, n columns:
 *     (1 + m0/512 + n0/512) / (1 + m0/m + n0/n), OpenBLAS's small blocks);
 *     with shared_gathers a GEMM the runtime stacks over the local devices
 *     reads its weight once for all of them (1/devices of its bytes per
 *     device) and has all their rows;
 *   - a convolution kept as a direct kernel: its flops at gemm rate / 8
 *     (codegen's direct loops run far from the GEMM's rate);
 *   - a fusion group (one kernel): the bytes it reads from outside the group
 *     (splat constants are immediates; a slice in the group reads only its
 *     piece) plus the bytes its root writes, at bytes_per_s, plus step_s;
 *   - a collective: latency_s of its slowest axis + its bytes per device
 *     (SHARDING.md 4, kdc_coll_bytes) at that axis's bytes_per_s for the
 *     ones that sum (all_reduce, reduce_scatter) or move_bytes_per_s for the
 *     ones that only move data (on the virtual mesh those read the other
 *     devices' pieces in place, runtime/gather_inplace.c: far faster);
 *     plus sync_s when it ends a device-parallel segment of the run (every
 *     device waits for the others there); with shared_gathers the links are
 *     the host's memory: every local device's operand read and every
 *     distinct result written (shared_moved) at bytes_per_s, once for the
 *     whole mesh (the pool moves them for all devices);
 *   - with shared_gathers (one process, the virtual mesh), what the runtime
 *     makes free (runtime/gather_inplace.c): an all_gather whose result is
 *     only a function result (a weight's update) and whose operand a GEMM
 *     wrote, maybe updated in place by kernels (the GEMM writes straight
 *     into the shared result; no bytes, no sync), and an all_to_all of a
 *     function input (a view of the inputs; no bytes, no sync);
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
  /* single-thread OpenBLAS sgemm on this VM (best of 15, k 64-784): 151
   * GFLOP/s at 128x200, 112 at 128x50, 87 at 128x25, 95 at 16x200, 105 at
   * 64x50, 144 at 98x200; 1 + 12/m + 21.5/n fits them within 15% */
  mc->gemm_m0 = 12;
  mc->gemm_n0 = 21.5;
  mc->lanes = 2;
  mc->default_axis.latency_s = 1.0e-6;
  mc->default_axis.bytes_per_s = 2.7e9;
  /* A segment end: no default.  MNIST's train_step (batch 128, SGD) on
   * 2x4, 2 threads, load 0.5: measured step minus the profile's sum of
   * steps is 0.17 ms over DataParallel's 3 such collectives and 0.35 ms
   * over examples/mnist_mlp/layout.json's 6 (57 us each), but the
   * transformer block's whole predict at batch 2 on 2x4 is 21 us with one
   * collective: no constant fits both (docs/sharding.md "Cost model"). */
  mc->sync_s = 0;
  mc->shared_gathers = true;
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

/* Did a GEMM write |v| (a DOT, or a kernel that reads a DOT's result of
 * |v|'s bytes: an update in place over it), |depth| kernels back at most? */
static bool gemm_written(const kdc_func *f, kdc_value_id v, int depth) {
  const kdc_node *nd = &f->nodes[v];
  if (nd->op == KDC_OP_DOT) return true;
  if (nd->op == KDC_OP_RESHAPE && nd->group < 0) return gemm_written(f, nd->in[0], depth);
  if (nd->group < 0 || depth == 0) return false;
  for (size_t m = 0; m <= v; m++) {
    const kdc_node *mn = &f->nodes[m];
    if (mn->group != nd->group) continue;
    for (int i = 0; i < mn->n_in; i++) {
      kdc_value_id x = mn->in[i];
      if (f->nodes[x].group != nd->group &&
          kdc_type_bytes(&f->nodes[x].type) == kdc_type_bytes(&nd->type) &&
          gemm_written(f, x, depth - 1))
        return true;
    }
  }
  return false;
}

/* Does the runtime run DOT |v| once over every local device's rows
 * (runtime/gemm_stack.c: B one buffer of >= 512 KiB that every device
 * reads -- a replicated weight --, A's rows contiguous, >= 2^19 flops per
 * device)?  Then B is read once for all devices, not once per device. */
static bool stacked_gemm(const kdc_func *f, kdc_value_id v, double flops) {
  const kdc_node *nd = &f->nodes[v];
  const kdc_node *l = &f->nodes[nd->in[0]], *r = &f->nodes[nd->in[1]];
  if (r->op != KDC_OP_PARAMETER || r->attr.param.kind != KDC_PARAM_WEIGHT) return false;
  for (int d = 0; d < r->sharding.rank; d++)
    if (r->sharding.naxes[d]) return false;  /* pieces: each device its own B */
  return nd->attr.dot.lhs_batch.n == 0 && nd->attr.dot.lhs_contract.n == 1 &&
         nd->attr.dot.lhs_contract.v[0] == l->type.rank - 1 &&
         kdc_type_bytes(&r->type) >= (512 << 10) && flops >= (double)(1 << 19);
}

/* Does the runtime make collective |v| free on a shared-memory mesh
 * (runtime/gather_inplace.c)? */
static bool shared_free(const kdc_func *f, const kdc_users *us, kdc_value_id v) {
  const kdc_node *nd = &f->nodes[v];
  const kdc_node *o = &f->nodes[nd->in[0]];
  while (o->op == KDC_OP_RESHAPE && o->group < 0) o = &f->nodes[o->in[0]]; /* a view */
  if (nd->op == KDC_OP_ALL_TO_ALL)
    return o->op == KDC_OP_PARAMETER && o->attr.param.kind != KDC_PARAM_WEIGHT;
  if (nd->op != KDC_OP_ALL_GATHER || !us->is_result[v] || us->start[v] != us->start[v + 1])
    return false;
  return gemm_written(f, nd->in[0], 2);
}

/* The bytes a collective reads and writes in one process's memory, all its
 * local devices together (runtime/coll_shm.c: the pool reads every
 * device's operand once and writes every distinct result once, so the time
 * is the whole mesh's bytes, not one device's).  A function result (a
 * weight rebuilt after its sharded update) is one buffer per distinct
 * piece (runtime/state.c, "Shared replicas"); an all_gather or all_reduce
 * into the arena one per group (a shared result, runtime/gather_inplace.c);
 * anything else one per device. */
static double shared_moved(const kdc_module *m, const kdc_func *f, const kdc_users *us,
                           kdc_value_id v) {
  const kdc_node *nd = &f->nodes[v];
  double devices = (double)kdc_mesh_devices(&m->mesh), writers = devices;
  if (us->is_result[v]) {
    uint32_t used = 0;
    for (int d = 0; d < nd->sharding.rank; d++)
      for (int k = 0; k < nd->sharding.naxes[d]; k++) used |= 1u << nd->sharding.axes[d][k];
    writers = 1;
    for (int a = 0; a < m->mesh.naxes; a++)
      if (used & (1u << a)) writers *= (double)m->mesh.sizes[a];
  } else if (nd->op == KDC_OP_ALL_GATHER || nd->op == KDC_OP_ALL_REDUCE) {
    double group = 1;
    for (int i = 0; i < nd->attr.coll.naxes; i++)
      if (nd->attr.coll.axes[i] < m->mesh.naxes)
        group *= (double)m->mesh.sizes[nd->attr.coll.axes[i]];
    writers = devices / group;
  }
  return devices * (double)kdc_type_bytes(kdc_ir_type(f, nd->in[0])) +
         writers * (double)kdc_type_bytes(&nd->type);
}

static double prod(const kdc_type *t, const kdc_dimlist *dims) {
  double p = 1;
  for (int i = 0; i < dims->n; i++) p *= (double)t->dims[dims->v[i]];
  return p;
}

/* The GEMM rate of a product of |m| rows by |n| columns: gemm_flops_per_s
 * (measured at 512^3) scaled by the machine's narrow-GEMM penalty. */
static double gemm_rate(const kdc_machine *mc, double m, double n) {
  if (m < 1) m = 1;
  if (n < 1) n = 1;
  return mc->gemm_flops_per_s * (1 + mc->gemm_m0 / 512 + mc->gemm_n0 / 512) /
         (1 + mc->gemm_m0 / m + mc->gemm_n0 / n);
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
  kdc_users us;
  kdc_pass_users_init(&us, f);
  kdc_status st = NULL;
  for (size_t v = 0; v < f->n_nodes && !st; v++) {
    const kdc_node *nd = &f->nodes[v];
    double out_b = (double)kdc_type_bytes(&nd->type);
    if (nd->group >= 0) {
      for (int i = 0; i < nd->n_in; i++) {
        const kdc_node *o = &f->nodes[nd->in[i]];
        if (o->group == nd->group || (o->op == KDC_OP_CONSTANT && o->attr.constant.splat))
          continue;  /* fused, or an immediate */
        double ob = (double)kdc_type_bytes(&o->type);
        /* a slice in the group (a sharded update's piece of a replicated
         * weight) reads only its piece of the operand */
        if (nd->op == KDC_OP_SHARD_SLICE || nd->op == KDC_OP_SLICE) ob = fmin(ob, out_b);
        gbytes[nd->group] += ob;
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
      double rb = (double)kdc_type_bytes(r);
      /* rows: the lhs's free dims (per batch entry); columns: the rhs's */
      double rows = (double)kdc_type_numel(l) / prod(l, &nd->attr.dot.lhs_contract) /
                    prod(l, &nd->attr.dot.lhs_batch);
      double cols = (double)kdc_type_numel(&nd->type) / prod(l, &nd->attr.dot.lhs_batch) / rows;
      if (mc->shared_gathers && stacked_gemm(f, (kdc_value_id)v, fl)) {
        /* one GEMM over every local device's rows */
        rb /= (double)kdc_mesh_devices(&m->mesh);
        rows *= (double)kdc_mesh_devices(&m->mesh);
      }
      double b = (double)kdc_type_bytes(l) + rb + out_b;
      c->flops += fl * times;
      c->mem_bytes += b * times;
      double t = fmax(fl / gemm_rate(mc, rows, cols), b / mc->bytes_per_s);
      c->compute_s += (t + mc->step_s) * times;
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
      c->n_collectives += (int64_t)times;
      if (mc->shared_gathers && shared_free(f, &us, (kdc_value_id)v)) break;
      c->coll_bytes += b * times;
      double move_s = b / (sums ? l.bytes_per_s : l.move_bytes_per_s);
      if (mc->shared_gathers) move_s = shared_moved(m, f, &us, (kdc_value_id)v) / mc->bytes_per_s;
      c->coll_s += (l.latency_s + mc->sync_s + move_s) * times;
      c->n_syncs += (int64_t)times;
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
  kdc_pass_users_free(&us);
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
