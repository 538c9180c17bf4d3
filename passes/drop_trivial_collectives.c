/*
 * passes/drop_trivial_collectives.c: removes SPMD ops whose device group
 * has one member.
 *
 * A mesh axis of size 1 (DataParallel's `data` on a 1x8 mesh, `model` on
 * 8x1, the middle axis of 2x1x4) still names axes in shardings, so the
 * partitioner (passes/reshard.c, partition.c, shard_update.c) emits
 * collectives over it: an all_reduce of a value partial over `data` alone,
 * an all_gather of a dim split by it.  Over a group whose axes' sizes
 * multiply to 1 these are the identity on every device's local piece:
 *   all_reduce      the sum of one term;
 *   all_gather      the concatenation of one piece;
 *   reduce_scatter  piece 0 of 1 of the sum of one term;
 *   all_to_all      one piece sent to itself;
 *   shard_slice     piece 0 of 1.
 * Each costs a copy and a rendezvous of the devices in the runtime, and an
 * all_reduce between a GEMM and an all_gather keeps that gather from being
 * made in place (runtime/gather_inplace.c).  This pass replaces every use
 * of such an op by its operand.  collective_permute is kept: over a size-1
 * axis a nonzero shift has no source device and yields zeros.
 *
 * Shardings.  The op's result sharding and its operand's differ only in
 * size-1 axes, so they describe the same pieces.  The operand takes the
 * result's sharding (so a value partial over `data` of size 1 stops being
 * partial for codegen and the later passes), except a parameter, whose
 * sharding is the plan's ABI.  An op that is a function result whose
 * operand is a parameter or another result is kept (its output must keep
 * its own buffer and sharding).
 */
#include <stdlib.h>

#include "passes/passes.h"

static bool trivial_op(kdc_op op) {
  return op == KDC_OP_ALL_REDUCE || op == KDC_OP_ALL_GATHER || op == KDC_OP_REDUCE_SCATTER ||
         op == KDC_OP_ALL_TO_ALL || op == KDC_OP_SHARD_SLICE;
}

static bool types_equal(const kdc_type *a, const kdc_type *b) {
  if (a->dtype != b->dtype || a->rank != b->rank) return false;
  for (int d = 0; d < a->rank; d++)
    if (a->dims[d] != b->dims[d]) return false;
  return true;
}

static void drop_func(const kdc_mesh *m, kdc_func *f) {
  size_t n = f->n_nodes;
  if (!n) return;
  kdc_users us;
  kdc_pass_users_init(&us, f);
  kdc_value_id *repl = kdc_xmalloc(n * sizeof *repl);
  bool any = false;
  for (size_t i = 0; i < n; i++) {
    repl[i] = (kdc_value_id)i;
    kdc_node *nd = &f->nodes[i];
    if (!trivial_op(nd->op) || nd->n_in != 1) continue;
    if (kdc_mesh_axes_size(m, nd->attr.coll.naxes, nd->attr.coll.axes) != 1) continue;
    kdc_value_id o = repl[nd->in[0]]; /* chains: an earlier dropped op */
    kdc_node *on = &f->nodes[o];
    if (!types_equal(&nd->type, &on->type)) continue;
    bool o_fixed = on->op == KDC_OP_PARAMETER || us.is_result[o];
    if (us.is_result[i] && o_fixed) continue;
    if (!o_fixed) on->sharding = nd->sharding;
    if (us.is_result[i]) us.is_result[o] = true; /* a second such result keeps its op */
    repl[i] = o;
    any = true;
  }
  if (any) kdc_pass_func_rebuild(f, repl, NULL, 0);
  free(repl);
  kdc_pass_users_free(&us);
}

kdc_status kdc_pass_drop_trivial_collectives(kdc_module *m, const kdc_pass_options *opt) {
  (void)opt;
  if (m->mesh.naxes == 0) return NULL;
  for (size_t i = 0; i < m->n_funcs; i++) drop_func(&m->mesh, m->funcs[i]);
  return NULL;
}
