/*
 * codegen/lower_spmd.c: the SPMD parts of lowering a partitioned function
 * (passes/partition.c: LOCAL types, collectives, module->mesh = the device
 * grid; parameters and results keep the sharding that says how the global
 * values are split).
 *
 *   - the plan's mesh (axis names and sizes) from the module's;
 *   - every function input, output and weight as a plan tensor with its
 *     GLOBAL shape (local dims times the shard count of each dim) and its
 *     sharding, so the runtime splits inputs and gathers outputs and the
 *     user never sees shards.  A partial value at a function boundary is a
 *     partitioner bug (KDC_INTERNAL): results must be reduced;
 *   - a collective node as a COLLECTIVE step: kind, mesh axes, dims, shift
 *     and the local shapes of its operand and result.
 * shard_slice and rng_uniform are not here: they are index arithmetic over
 * the device's coordinates inside kernels (kernel_body.c).
 */
#include <string.h>

#include "codegen/codegen.h"

bool cg_is_collective(kdc_op op) {
  return op == KDC_OP_ALL_REDUCE || op == KDC_OP_ALL_GATHER || op == KDC_OP_REDUCE_SCATTER ||
         op == KDC_OP_ALL_TO_ALL || op == KDC_OP_COLLECTIVE_PERMUTE;
}

void cg_set_mesh(cg_plan *P) {
  const kdc_mesh *m = &P->m->mesh;
  kdc_prog_mesh *pm = &P->prog.mesh;
  memset(pm, 0, sizeof *pm);
  pm->naxes = (uint32_t)m->naxes;
  for (int a = 0; a < m->naxes; a++) {
    pm->names[a] = kdc_arena_strdup(P->a, m->names[a]);
    pm->sizes[a] = m->sizes[a];
  }
  pm->n_devices = kdc_mesh_devices(m);
}

static char *axes_str(const kdc_mesh *m, unsigned mask, char *buf, size_t n) {
  size_t o = 0;
  buf[0] = 0;
  for (int a = 0; a < m->naxes && o < n; a++)
    if (mask & (1u << a)) o += (size_t)snprintf(buf + o, n - o, "%s%s", o ? "," : "", m->names[a]);
  return buf;
}

kdc_status cg_tensor_of(cg_plan *P, const char *name, const kdc_type *local,
                        const kdc_sharding *s, const char *what, kdc_prog_tensor *out) {
  const kdc_mesh *m = &P->m->mesh;
  memset(out, 0, sizeof *out);
  out->name = kdc_arena_strdup(P->a, name);
  out->dtype = cg_io_dtype(local->dtype);
  out->rank = local->rank;
  bool sharded = s && s->present && m->naxes > 0;
  if (sharded && s->partial) {
    char ax[256];
    return KDC_ERR(KDC_INTERNAL, "codegen: %s \"%s\" is a partial sum over (%s): partition must "
                   "reduce every function input and output", what, name,
                   axes_str(m, s->partial, ax, sizeof ax));
  }
  if (sharded && s->rank != local->rank)
    return KDC_ERR(KDC_INTERNAL, "codegen: %s \"%s\": sharding of rank %d for rank %d", what,
                   name, s->rank, local->rank);
  uint64_t global = kdc_dtype_size(local->dtype);
  for (int d = 0; d < local->rank; d++) {
    int64_t k = 1;
    if (sharded) {
      out->sharding.naxes[d] = s->naxes[d];
      for (int i = 0; i < s->naxes[d]; i++) out->sharding.axes[d][i] = s->axes[d][i];
      k = kdc_sharding_dim_shards(m, s, d);
    }
    out->dims[d] = local->dims[d] * k;
    out->local_dims[d] = local->dims[d];
    global *= (uint64_t)out->dims[d];
  }
  out->bytes = global;
  out->local_bytes = kdc_type_bytes(local);
  kdc_prog_tensor check = *out;
  if (!kdc_prog_tensor_localize(&check, &P->prog.mesh) || check.local_bytes != out->local_bytes)
    return KDC_ERR(KDC_INTERNAL, "codegen: %s \"%s\": its sharding does not fit the mesh", what,
                   name);
  return NULL;
}

kdc_status cg_collective_step(cg_plan *P, const kdc_func *f, kdc_value_id v,
                              const kdc_prog_loc *src, const kdc_prog_loc *dst,
                              kdc_prog_step *out) {
  const kdc_node *nd = &f->nodes[v];
  const kdc_attr_coll *a = &nd->attr.coll;
  const kdc_type *xt = &f->nodes[nd->in[0]].type;
  kdc_prog_coll_step *c = &out->coll;
  memset(out, 0, sizeof *out);
  out->kind = KDC_STEP_COLLECTIVE;
  switch (nd->op) {
  case KDC_OP_ALL_REDUCE: c->kind = KDC_COLL_ALL_REDUCE; break;
  case KDC_OP_ALL_GATHER: c->kind = KDC_COLL_ALL_GATHER; break;
  case KDC_OP_REDUCE_SCATTER: c->kind = KDC_COLL_REDUCE_SCATTER; break;
  case KDC_OP_ALL_TO_ALL: c->kind = KDC_COLL_ALL_TO_ALL; break;
  case KDC_OP_COLLECTIVE_PERMUTE: c->kind = KDC_COLL_PERMUTE; break;
  default: kdc_unreachable();
  }
  bool sums = c->kind == KDC_COLL_ALL_REDUCE || c->kind == KDC_COLL_REDUCE_SCATTER;
  if (sums && nd->type.dtype == KDC_DTYPE_BOOL)
    return KDC_ERR(KDC_UNSUPPORTED, "codegen: func %s: %%%u: %s of bool", f->name, v,
                   kdc_op_name(nd->op));
  c->dtype = cg_io_dtype(nd->type.dtype);
  c->naxes = (uint32_t)a->naxes;
  c->group_size = 1;
  for (int i = 0; i < a->naxes; i++) {
    c->axes[i] = a->axes[i];
    c->group_size *= P->m->mesh.sizes[a->axes[i]];
  }
  c->dim = a->dim;
  c->dim2 = a->dim2;
  c->shift = a->shift;
  c->rank = nd->type.rank;
  for (int d = 0; d < c->rank; d++) {
    c->in_dims[d] = xt->dims[d];
    c->out_dims[d] = nd->type.dims[d];
  }
  c->src = *src;
  c->dst = *dst;
  return NULL;
}
