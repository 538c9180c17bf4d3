/*
 * SPMD helpers shared by the partitioner, the SPMD interpreter and tests:
 * device coordinates, device groups over a set of mesh axes, and the local
 * (per-device) type of a sharded value.  Conventions (docs/sharding.md):
 *   - device ids are row-major over the mesh: coords = unravel(id, sizes);
 *   - a dim split by axes (a0, a1, ...) (major to minor) is cut into
 *     size(a0)*size(a1)*... equal pieces; a device holds the piece whose
 *     index is its coordinates on (a0, a1, ...) read as a mixed-radix number
 *     (its "group index" over those axes);
 *   - a group over axes A is the set of devices agreeing on every other
 *     coordinate, ordered by group index.
 */
#include <stdio.h>
#include <string.h>

#include "ir/ir.h"

void kdc_mesh_coords(const kdc_mesh *m, int64_t device, int64_t *out_coords) {
  for (int a = m->naxes - 1; a >= 0; a--) {
    out_coords[a] = device % m->sizes[a];
    device /= m->sizes[a];
  }
}

int64_t kdc_mesh_axes_size(const kdc_mesh *m, int n, const uint8_t *axes) {
  int64_t k = 1;
  for (int i = 0; i < n; i++) k *= axes[i] < m->naxes ? m->sizes[axes[i]] : 1;
  return k;
}

int64_t kdc_mesh_group_index(const kdc_mesh *m, int64_t device, int n, const uint8_t *axes) {
  int64_t c[KDC_MAX_MESH_AXES], g = 0;
  kdc_mesh_coords(m, device, c);
  for (int i = 0; i < n; i++) g = g * m->sizes[axes[i]] + c[axes[i]];
  return g;
}

static int64_t ravel_coords(const kdc_mesh *m, const int64_t *c) {
  int64_t d = 0;
  for (int a = 0; a < m->naxes; a++) d = d * m->sizes[a] + c[a];
  return d;
}

void kdc_mesh_group_members(const kdc_mesh *m, int64_t device, int n, const uint8_t *axes,
                            int64_t *out) {
  int64_t c[KDC_MAX_MESH_AXES], k = kdc_mesh_axes_size(m, n, axes);
  kdc_mesh_coords(m, device, c);
  for (int64_t g = 0; g < k; g++) {
    int64_t r = g;
    for (int i = n - 1; i >= 0; i--) {
      c[axes[i]] = r % m->sizes[axes[i]];
      r /= m->sizes[axes[i]];
    }
    out[g] = ravel_coords(m, c);
  }
}

char *kdc_mesh_groups_str(const kdc_mesh *m, int n, const uint8_t *axes, char *buf, size_t len) {
  int64_t nd = kdc_mesh_devices(m), k = kdc_mesh_axes_size(m, n, axes);
  int64_t mem[4096];
  size_t o = 0;
  if (len == 0) return buf;
  buf[0] = 0;
  if (k > 4096) {
    snprintf(buf, len, "<groups of %lld>", (long long)k);
    return buf;
  }
  o += (size_t)snprintf(buf + o, len - o, "[");
  bool first = true;
  for (int64_t d = 0; d < nd && o < len; d++) {
    kdc_mesh_group_members(m, d, n, axes, mem);
    int64_t lo = mem[0];
    for (int64_t i = 1; i < k; i++)
      if (mem[i] < lo) lo = mem[i];
    if (lo != d) continue; /* print each group once, at its smallest member */
    o += (size_t)snprintf(buf + o, len - o, first ? "[" : ",[");
    first = false;
    for (int64_t i = 0; i < k && o < len; i++)
      o += (size_t)snprintf(buf + o, len - o, i ? ",%lld" : "%lld", (long long)mem[i]);
    if (o < len) o += (size_t)snprintf(buf + o, len - o, "]");
  }
  if (o < len) snprintf(buf + o, len - o, "]");
  return buf;
}

unsigned kdc_sharding_dim_mask(const kdc_sharding *s, int dim) {
  unsigned mask = 0;
  for (int k = 0; k < s->naxes[dim]; k++) mask |= 1u << s->axes[dim][k];
  return mask;
}

unsigned kdc_sharding_used_mask(const kdc_sharding *s) {
  unsigned mask = 0;
  for (int d = 0; d < s->rank; d++) mask |= kdc_sharding_dim_mask(s, d);
  return mask;
}

int64_t kdc_sharding_dim_shards(const kdc_mesh *m, const kdc_sharding *s, int dim) {
  return kdc_mesh_axes_size(m, s->naxes[dim], s->axes[dim]);
}

kdc_status kdc_sharding_local_type(const kdc_mesh *m, const kdc_sharding *s,
                                   const kdc_type *global, kdc_type *out_local) {
  *out_local = *global;
  if (!s->present) return NULL;
  if (s->rank != global->rank)
    return KDC_ERR(KDC_INVALID_INPUT, "sharding of rank %d for a value of rank %d", s->rank,
                   global->rank);
  for (int d = 0; d < global->rank; d++) {
    int64_t k = kdc_sharding_dim_shards(m, s, d);
    if (global->dims[d] % k != 0) {
      char buf[2048];
      return KDC_ERR(KDC_INVALID_INPUT,
                     "dim %d of size %lld is not divisible by its %lld shards (sharding %s); "
                     "kdc never pads silently",
                     d, (long long)global->dims[d], (long long)k,
                     kdc_sharding_str(m, s, buf, sizeof buf));
    }
    out_local->dims[d] = global->dims[d] / k;
  }
  return NULL;
}

kdc_type kdc_value_global_type(const kdc_module *m, const kdc_func *f, kdc_value_id v) {
  kdc_type t = f->nodes[v].type;
  const kdc_sharding *s = &f->nodes[v].sharding;
  if (m->mesh.naxes && s->present && s->rank == t.rank)
    for (int d = 0; d < t.rank; d++) t.dims[d] *= kdc_sharding_dim_shards(&m->mesh, s, d);
  return t;
}

bool kdc_sharding_same_split(const kdc_sharding *a, const kdc_sharding *b) {
  if (a->rank != b->rank || a->partial != b->partial) return false;
  for (int d = 0; d < a->rank; d++) {
    if (a->naxes[d] != b->naxes[d]) return false;
    for (int k = 0; k < a->naxes[d]; k++)
      if (a->axes[d][k] != b->axes[d][k]) return false;
  }
  return true;
}

kdc_sharding kdc_sharding_replicated(int rank) {
  kdc_sharding s;
  memset(&s, 0, sizeof s);
  s.present = true;
  s.rank = (uint8_t)rank;
  return s;
}
