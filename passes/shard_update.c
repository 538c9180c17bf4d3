/*
 * passes/shard_update.c: the sharding of a weight's optimizer update
 * (cross-replica sharding of the weight update, Xu et al. 2020, "Automatic
 * Cross-Replica Sharding of Weight Update in Data-Parallel Training"; ZeRO
 * stage 1).  Used by passes/train_step.c when it builds the update.
 *
 * A weight replicated over a mesh axis that splits the batch has a gradient
 * that is a partial sum over that axis (every device saw other rows).
 * Updated replicated, every device would all_reduce the full gradient and
 * then repeat the whole update on its own copy.  Instead the update runs on
 * the device's 1/n piece: the gradient is constrained to the update
 * sharding (the partitioner's reshard planner turns the partial sum into a
 * reduce_scatter, or, when the weight-gradient dot is cheaper with its
 * operands moved, computes only the device's piece, passes/partition.c),
 * the weight is cut locally (shard_slice, no communication), the optimizer
 * slots are state of the update sharding (each device keeps 1/n of them),
 * and the new weight's constraint back to its own sharding is one
 * all_gather.  Communication stays the all_reduce's (reduce_scatter +
 * all_gather move the same bytes) and the update's work and slot memory
 * shrink n times.
 *
 * The update sharding is the weight's sharding with the batch axes the
 * weight does not use appended (minor-most) to its first dim whose local
 * size they divide, in mesh-axis order; an axis that divides no dim is left
 * out (that part of the update stays replicated), so any weight works.
 *
 * When it pays: with bandwidth-optimal collectives reduce_scatter +
 * all_gather cost what the all_reduce costs (SHARDING.md 4: 2(n-1) steps,
 * 2(n-1)/n of the bytes), so the saving is the update's work and slot
 * memory, against one more collective to launch.  A weight whose piece on a
 * device is below KDC_SHARD_UPDATE_MIN_BYTES (biases, normalisation
 * scales) keeps the replicated update: its update costs less than a
 * collective's fixed cost.
 */
#include "passes/passes.h"

enum { KDC_SHARD_UPDATE_MIN_BYTES = 16 << 10 };

unsigned kdc_shard_update_axes(const kdc_module *m, const kdc_func *f) {
  unsigned axes = 0;
  if (m->mesh.naxes == 0 || kdc_mesh_devices(&m->mesh) <= 1) return 0;
  for (size_t i = 0; i < f->n_params; i++) {
    const kdc_node *p = &f->nodes[f->params[i]];
    if (p->attr.param.kind != KDC_PARAM_INPUT || !p->sharding.present || p->type.rank == 0)
      continue;
    axes |= kdc_sharding_dim_mask(&p->sharding, 0);
  }
  return axes;
}

bool kdc_shard_update_sharding(const kdc_mesh *mesh, const kdc_type *t, const kdc_sharding *w,
                               unsigned axes, kdc_sharding *out) {
  *out = *w;
  if (!w->present || t->rank == 0 || t->rank != w->rank) return false;
  kdc_type local;
  kdc_status st = kdc_sharding_local_type(mesh, w, t, &local);
  if (st) {
    kdc_status_free(st); /* partition reports the indivisible weight */
    return false;
  }
  if (kdc_type_bytes(&local) < KDC_SHARD_UPDATE_MIN_BYTES) return false;
  unsigned free_axes = axes & ~kdc_sharding_used_mask(w) & ~(unsigned)w->partial;
  bool changed = false;
  for (int a = 0; a < mesh->naxes; a++) {
    if (!(free_axes & (1u << a)) || mesh->sizes[a] <= 1) continue;
    for (int d = 0; d < t->rank; d++) {
      if (out->naxes[d] >= KDC_MAX_AXES_PER_DIM) continue;
      int64_t shards = kdc_sharding_dim_shards(mesh, out, d);
      if (t->dims[d] % (shards * mesh->sizes[a]) != 0) continue;
      out->axes[d][out->naxes[d]++] = (uint8_t)a;
      changed = true;
      break;
    }
  }
  out->open_mask = 0;
  out->origin = 0;
  return changed;
}
