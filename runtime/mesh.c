/*
 * runtime/mesh.c: device ids, mesh coordinates, device groups and the piece
 * of a sharded tensor a device holds -- the conventions of ir/spmd.c
 * (docs/sharding.md) restated over the plan's kdc_prog_mesh, since the
 * runtime does not link ir/:
 *   - device ids are row-major over the mesh: coords = unravel(id, sizes);
 *   - a group over axes A (major to minor) is the devices agreeing on every
 *     other coordinate; a device's index in it is its coordinates on A read
 *     as a mixed-radix number;
 *   - a dim split by axes A is cut into prod(sizes of A) equal pieces and a
 *     device holds piece <its group index over A>.
 */
#include <stdio.h>

#include "runtime/runtime.h"

void rt_mesh_coords(const kdc_prog_mesh *m, int64_t device, int64_t *out_coords) {
  for (int a = (int)m->naxes - 1; a >= 0; a--) {
    out_coords[a] = device % m->sizes[a];
    device /= m->sizes[a];
  }
}

int64_t rt_mesh_device(const kdc_prog_mesh *m, const int64_t *coords) {
  int64_t d = 0;
  for (uint32_t a = 0; a < m->naxes; a++) d = d * m->sizes[a] + coords[a];
  return d;
}

int64_t rt_mesh_axes_size(const kdc_prog_mesh *m, int n, const uint8_t *axes) {
  int64_t k = 1;
  for (int i = 0; i < n; i++) k *= axes[i] < m->naxes ? m->sizes[axes[i]] : 1;
  return k;
}

int64_t rt_mesh_group_index(const kdc_prog_mesh *m, const int64_t *coords, int n,
                            const uint8_t *axes) {
  int64_t g = 0;
  for (int i = 0; i < n; i++) g = g * m->sizes[axes[i]] + coords[axes[i]];
  return g;
}

void rt_mesh_group_members(const kdc_prog_mesh *m, int64_t device, int n, const uint8_t *axes,
                           int64_t *out) {
  int64_t c[KDC_PROG_MAX_AXES], k = rt_mesh_axes_size(m, n, axes);
  rt_mesh_coords(m, device, c);
  for (int64_t g = 0; g < k; g++) {
    int64_t r = g;
    for (int i = n - 1; i >= 0; i--) {
      c[axes[i]] = r % m->sizes[axes[i]];
      r /= m->sizes[axes[i]];
    }
    out[g] = rt_mesh_device(m, c);
  }
}

void rt_mesh_piece_offsets(const kdc_prog_mesh *m, const kdc_prog_tensor *t, int64_t device,
                           int64_t *out) {
  int64_t c[KDC_PROG_MAX_AXES];
  rt_mesh_coords(m, device, c);
  for (int d = 0; d < t->rank; d++)
    out[d] = rt_mesh_group_index(m, c, t->sharding.naxes[d], t->sharding.axes[d]) *
             t->local_dims[d];
}

int64_t rt_mesh_canonical(const kdc_prog_mesh *m, const kdc_prog_tensor *t, int64_t device) {
  int64_t c[KDC_PROG_MAX_AXES];
  unsigned used = 0;
  for (int d = 0; d < t->rank; d++)
    for (int i = 0; i < t->sharding.naxes[d]; i++) used |= 1u << t->sharding.axes[d][i];
  rt_mesh_coords(m, device, c);
  for (uint32_t a = 0; a < m->naxes; a++)
    if (!(used & (1u << a))) c[a] = 0;
  return rt_mesh_device(m, c);
}

char *rt_mesh_groups_str(const kdc_prog_mesh *m, int n, const uint8_t *axes, char *buf,
                         size_t len) {
  int64_t nd = m->n_devices, k = rt_mesh_axes_size(m, n, axes);
  int64_t mem[KDC_PROG_MAX_DEVICES];
  size_t o = 0;
  if (len == 0) return buf;
  buf[0] = 0;
#define PUT(...) (o += o < len ? (size_t)snprintf(buf + o, len - o, __VA_ARGS__) : 0)
  PUT("[");
  bool first = true;
  for (int64_t d = 0; d < nd && o < len; d++) {
    rt_mesh_group_members(m, d, n, axes, mem);
    int64_t lo = mem[0];
    for (int64_t i = 1; i < k; i++)
      if (mem[i] < lo) lo = mem[i];
    if (lo != d) continue; /* each group once, at its smallest member */
    PUT(first ? "[" : ",[");
    first = false;
    for (int64_t i = 0; i < k; i++) PUT(i ? ",%lld" : "%lld", (long long)mem[i]);
    PUT("]");
  }
  PUT("]");
#undef PUT
  return buf;
}
