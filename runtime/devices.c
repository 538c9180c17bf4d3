/*
 * runtime/devices.c: the `cpu` device set -- every device of the plan's mesh
 * as a virtual device of this process -- and everything per device that is
 * made once at load so that a run allocates nothing:
 *   - mesh coordinates (what kernels read for shard_slice and rng_uniform);
 *   - one scratch arena per device (the plan's arena size, 64-byte aligned,
 *     all in one allocation);
 *   - each weight's piece: a replicated weight is read in place from the
 *     plan by every device; a split one is cut once into a buffer per
 *     distinct piece (replicas of a piece share it: weights are read-only);
 *   - per function: the kernel argument arrays of every device, the device
 *     groups of every collective step, and the I/O plan (shard_io.c).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/cuda/cuda_rt.h"
#include "runtime/runtime.h"

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return x < y ? -1 : x > y;
}

/* Groups of a collective step (see rt_coll_groups). */
static void make_groups(const kdc_prog_mesh *m, const kdc_prog_coll_step *c, rt_coll_groups *g) {
  int64_t nd = m->n_devices, k = c->group_size;
  g->k = k;
  g->n_groups = 0;
  g->members = kdc_xcalloc((size_t)nd, sizeof *g->members);
  g->sorted = kdc_xcalloc((size_t)nd, sizeof *g->sorted);
  g->group_of = kdc_xcalloc((size_t)nd, sizeof *g->group_of);
  g->index_of = kdc_xcalloc((size_t)nd, sizeof *g->index_of);
  g->peer = kdc_xcalloc((size_t)nd, sizeof *g->peer);
  for (int64_t d = 0; d < nd; d++) g->group_of[d] = -1;
  for (int64_t d = 0; d < nd; d++) {
    if (g->group_of[d] >= 0) continue;  /* d is the smallest id of a new group */
    int64_t *mem = g->members + g->n_groups * k;
    rt_mesh_group_members(m, d, (int)c->naxes, c->axes, mem);
    for (int64_t j = 0; j < k; j++) {
      g->group_of[mem[j]] = g->n_groups;
      g->index_of[mem[j]] = j;
    }
    memcpy(g->sorted + g->n_groups * k, mem, (size_t)k * sizeof *mem);
    qsort(g->sorted + g->n_groups * k, (size_t)k, sizeof *mem, cmp_i64);
    g->n_groups++;
  }
  for (int64_t d = 0; d < nd; d++) {
    g->peer[d] = -1;
    if (c->kind != KDC_COLL_PERMUTE) continue;
    int64_t co[KDC_PROG_MAX_AXES], a = c->axes[0];
    rt_mesh_coords(m, d, co);
    if (c->shift > co[a] || co[a] - c->shift >= m->sizes[a]) continue; /* off the mesh: zeros */
    co[a] -= c->shift;
    g->peer[d] = rt_mesh_device(m, co);
  }
}

static void free_groups(rt_coll_groups *g) {
  free(g->members), free(g->sorted), free(g->group_of), free(g->index_of), free(g->peer);
}

static void make_func(kdc_rt_plan *p, const kdc_prog_func *f, rt_func *rf) {
  size_t total = 0, nd = (size_t)p->nd;
  for (uint32_t s = 0; s < f->n_steps; s++)
    if (f->steps[s].kind == KDC_STEP_KERNEL) total += f->steps[s].kernel.n_args;
  rf->argv = kdc_xcalloc(total * nd + 1, sizeof *rf->argv);
  rf->step_args = kdc_xcalloc(f->n_steps * nd + 1, sizeof *rf->step_args);
  rf->groups = kdc_xcalloc(f->n_steps + 1, sizeof *rf->groups);
  rf->prof_ns = kdc_xcalloc(f->n_steps + 1, sizeof *rf->prof_ns);
  size_t at = 0;
  for (size_t d = 0; d < nd; d++)
    for (uint32_t s = 0; s < f->n_steps; s++)
      if (f->steps[s].kind == KDC_STEP_KERNEL) {
        rf->step_args[d * f->n_steps + s] = rf->argv + at;
        at += f->steps[s].kernel.n_args;
      }
  for (uint32_t s = 0; s < f->n_steps; s++)
    if (f->steps[s].kind == KDC_STEP_COLLECTIVE)
      make_groups(&p->prog.mesh, &f->steps[s].coll, &rf->groups[s]);
  rf->in_ptr = kdc_xcalloc(nd * f->n_inputs + 1, sizeof *rf->in_ptr);
  rf->out_ptr = kdc_xcalloc(nd * f->n_outputs + 1, sizeof *rf->out_ptr);
  rf->in_dev = kdc_xcalloc(nd * f->n_inputs + 1, sizeof *rf->in_dev);
  rf->out_dev = kdc_xcalloc(nd * f->n_outputs + 1, sizeof *rf->out_dev);
  rt_io_create(p, f, rf);
  rt_inplace_create(p, f, rf);
  rt_stack_create(p, f, rf);
}

/* Each device's pointer to every weight (see the file comment). */
static kdc_status make_weights(kdc_rt_plan *p) {
  const kdc_program *pr = &p->prog;
  size_t nw = pr->n_weights;
  p->dev_weights = kdc_xcalloc((size_t)p->nd * nw + 1, sizeof *p->dev_weights);
  p->weight_pieces = kdc_xcalloc((size_t)p->nd * nw + 1, sizeof *p->weight_pieces);
  for (size_t w = 0; w < nw; w++) {
    const kdc_prog_tensor *t = &pr->weights[w];
    int64_t zero[KDC_IO_MAX_RANK] = {0}, off[KDC_IO_MAX_RANK];
    size_t es = kdc_prog_dtype_size(t->dtype);
    for (int64_t d = 0; d < p->nd; d++) {
      int64_t c = rt_mesh_canonical(&pr->mesh, t, d);
      if (t->local_bytes == t->bytes) {  /* replicated: the plan's bytes */
        p->dev_weights[d * (int64_t)nw + (int64_t)w] = pr->weight_data[w];
      } else if (c != d) {               /* a replica: share the canonical piece (c < d) */
        p->dev_weights[d * (int64_t)nw + (int64_t)w] = p->dev_weights[c * (int64_t)nw + (int64_t)w];
      } else {
        void *buf = aligned_alloc(64, (t->local_bytes + 63) / 64 * 64);
        if (!buf)
          return KDC_ERR(KDC_OUT_OF_MEMORY, "%s: cannot allocate a piece of weight \"%s\"",
                         p->path, t->name);
        rt_box b;
        rt_mesh_piece_offsets(&pr->mesh, t, d, off);
        rt_box_init(&b, t->rank, es, t->local_dims, t->dims, off, t->local_dims, zero);
        rt_box_copy(&b, buf, pr->weight_data[w], 0, b.rows);
        p->weight_pieces[p->n_weight_pieces++] = buf;
        p->dev_weights[d * (int64_t)nw + (int64_t)w] = buf;
      }
    }
  }
  return NULL;
}

kdc_status rt_devices_create(kdc_rt_plan *p, uint64_t arena_bytes) {
  const kdc_prog_mesh *m = &p->prog.mesh;
  p->nd = m->n_devices > 0 ? m->n_devices : 1;
  p->coords = kdc_xcalloc((size_t)p->nd * KDC_PROG_MAX_AXES, sizeof *p->coords);
  for (int64_t d = 0; d < p->nd; d++) rt_mesh_coords(m, d, p->coords + d * KDC_PROG_MAX_AXES);
  p->arena_stride = (arena_bytes + 63) / 64 * 64;
  if (p->arena_stride == 0) p->arena_stride = 64;
  uint64_t total;
  if (__builtin_mul_overflow(p->arena_stride, (uint64_t)p->nd, &total) ||
      !(p->scratch = aligned_alloc(64, (size_t)total)))
    return KDC_ERR(KDC_OUT_OF_MEMORY, "%s: cannot allocate %lld arenas of %llu bytes", p->path,
                   (long long)p->nd, (unsigned long long)p->arena_stride);
  KDC_RETURN_IF_ERROR(make_weights(p));
  for (p->dst_seen_cap = 2; p->dst_seen_cap < 2 * (uint64_t)p->nd;) p->dst_seen_cap *= 2;
  p->dst_seen = kdc_xcalloc(p->dst_seen_cap, sizeof *p->dst_seen);
  p->funcs = kdc_xcalloc(p->prog.n_funcs + 1, sizeof *p->funcs);
  for (uint32_t i = 0; i < p->prog.n_funcs; i++) make_func(p, &p->prog.funcs[i], &p->funcs[i]);
  return NULL;
}

void rt_devices_destroy(kdc_rt_plan *p) {
  if (p->funcs)
    for (uint32_t i = 0; i < p->prog.n_funcs; i++) {
      const kdc_prog_func *f = &p->prog.funcs[i];
      rt_func *rf = &p->funcs[i];
      rt_io_destroy(p, f, rf);
      for (uint32_t s = 0; s < f->n_steps; s++)
        if (f->steps[s].kind == KDC_STEP_COLLECTIVE) free_groups(&rf->groups[s]);
      free(rf->groups), free(rf->argv), free(rf->step_args), free(rf->in_ptr), free(rf->out_ptr);
      free(rf->in_dev), free(rf->out_dev), free(rf->prof_ns);
      rt_inplace_destroy(rf);
      rt_stack_destroy(rf, f->n_steps);
    }
  free(p->funcs);
  for (size_t i = 0; i < p->n_weight_pieces; i++) free(p->weight_pieces[i]);
  free(p->weight_pieces);
  free(p->dst_seen);
  free(p->dev_weights);
  free(p->scratch);
  free(p->coords);
}

/* ---- device memory (runtime.h) ---------------------------------------------------- */

/* Host memory: zeroed, 64-byte aligned.  calloc, not aligned_alloc +
 * memset: a large block is fresh pages from the kernel that calloc knows
 * are zero, so nothing touches them before the program writes them (a
 * training state's second buffer, Adam's moments: mlp_4096's 480 MB were
 * memset at start-up, a third of its first step).  The block calloc
 * returned is kept just below the aligned pointer. */
enum { HOST_ALIGN = 64 };

kdc_status rt_mem_alloc(kdc_rt_plan *p, int64_t dev, size_t bytes, void **out) {
  if (p->cuda) return rt_cuda_mem_alloc(p, dev, bytes, out);
  size_t n = (bytes + HOST_ALIGN - 1) / HOST_ALIGN * HOST_ALIGN;
  char *raw = n <= SIZE_MAX - 2 * HOST_ALIGN ? calloc(1, n + sizeof(void *) + HOST_ALIGN) : NULL;
  if (!raw)
    return KDC_ERR(KDC_OUT_OF_MEMORY, "%s: device %lld: cannot allocate %zu bytes", p->path,
                   (long long)dev, bytes);
  uintptr_t a = ((uintptr_t)raw + sizeof(void *) + HOST_ALIGN - 1) & ~(uintptr_t)(HOST_ALIGN - 1);
  memcpy((void *)(a - sizeof(void *)), &raw, sizeof raw);
  *out = (void *)a;
  return NULL;
}

void rt_mem_free(kdc_rt_plan *p, int64_t dev, void *ptr) {
  if (p->cuda) {
    rt_cuda_mem_free(p, dev, ptr);
  } else if (ptr) {
    void *raw;
    memcpy(&raw, (char *)ptr - sizeof raw, sizeof raw);
    free(raw);
  }
}

kdc_status rt_mem_put(kdc_rt_plan *p, int64_t dev, void *dst, const void *src, size_t bytes) {
  if (p->cuda) return rt_cuda_mem_copy(p, dev, dst, src, bytes, true);
  memcpy(dst, src, bytes);
  return NULL;
}

kdc_status rt_mem_get(kdc_rt_plan *p, int64_t dev, void *dst, const void *src, size_t bytes) {
  if (p->cuda) return rt_cuda_mem_copy(p, dev, dst, src, bytes, false);
  memcpy(dst, src, bytes);
  return NULL;
}
