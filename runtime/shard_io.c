/*
 * runtime/shard_io.c: the caller's GLOBAL arrays <-> every device's piece.
 *
 * kdc_rt_plan_run takes and returns global arrays; the program works on
 * pieces (kdc_prog_tensor: global shape, sharding, local shape).  For each
 * function input and output this file decides once, at load, how the two
 * meet (rt_io_mode), then binds per run without allocating:
 *   - replicated (no dim split): every device reads the caller's input in
 *     place; the output is written in place by device 0;
 *   - a piece contiguous in the global array (only dims of local size 1
 *     before the one split dim, e.g. a batch split on dim 0): read or
 *     written in place at its byte offset;
 *   - otherwise a staging buffer per piece, filled from the global input
 *     before the steps (one block copy per piece), or gathered into the
 *     global output after them.
 * Replicas: a device whose coordinates are 0 on every axis the tensor does
 * not split is the CANONICAL holder of its piece.  Inputs: replicas share
 * the canonical device's staging buffer (read-only).  Outputs: only the
 * canonical copy is gathered; every other device writes its own staging
 * buffer, which the replica check (debug builds, or
 * kdc_rt_options.check_replicas) compares bitwise with the canonical copy.
 */
#include <stdlib.h>
#include <string.h>

#include "runtime/runtime.h"

/* Above this many bytes a split or gather runs on the pool. */
enum { PARALLEL_BYTES = 1 << 20 };

/* Is every piece of |t| one contiguous range of the global array? */
static bool piece_contiguous(const kdc_prog_tensor *t) {
  int k = 0;
  while (k < t->rank && t->local_dims[k] == t->dims[k]) k++;
  if (k == t->rank) return true;
  for (int d = 0; d < k; d++)
    if (t->local_dims[d] != 1) return false;
  for (int d = k + 1; d < t->rank; d++)
    if (t->local_dims[d] != t->dims[d]) return false;
  return true;
}

static uint64_t linear_offset(const kdc_prog_tensor *t, const int64_t *off) {
  uint64_t lin = 0;
  for (int d = 0; d < t->rank; d++) lin = lin * (uint64_t)t->dims[d] + (uint64_t)off[d];
  return lin * kdc_prog_dtype_size(t->dtype);
}

static void make_io(kdc_rt_plan *p, const kdc_prog_tensor *t, bool output, rt_io *io) {
  size_t nd = (size_t)p->nd;
  io->t = t;
  io->offset = kdc_xcalloc(nd, sizeof *io->offset);
  io->staging = kdc_xcalloc(nd, sizeof *io->staging);
  io->canonical = kdc_xcalloc(nd, sizeof *io->canonical);
  io->piece_off = kdc_xcalloc(nd * KDC_IO_MAX_RANK, sizeof *io->piece_off);
  io->mode = t->local_bytes == t->bytes ? RT_IO_SHARED
             : piece_contiguous(t)      ? RT_IO_SLICE
                                        : RT_IO_STAGED;
  for (size_t d = 0; d < nd; d++) {
    int64_t *off = io->piece_off + d * KDC_IO_MAX_RANK;
    rt_mesh_piece_offsets(&p->prog.mesh, t, (int64_t)d, off);
    io->offset[d] = linear_offset(t, off);
    io->canonical[d] = rt_mesh_canonical(&p->prog.mesh, t, (int64_t)d);
    bool canon = io->canonical[d] == (int64_t)d;
    /* staged: canonical pieces of a staged tensor, and every output replica */
    if ((canon && io->mode == RT_IO_STAGED) || (output && !canon))
      io->staging[d] = kdc_xcalloc(1, t->local_bytes ? t->local_bytes : 1);
  }
}

static void free_io(rt_io *io, size_t nd) {
  if (io->staging)
    for (size_t d = 0; d < nd; d++) free(io->staging[d]);
  free(io->offset), free(io->staging), free(io->canonical), free(io->piece_off);
}

void rt_io_create(kdc_rt_plan *p, const kdc_prog_func *f, rt_func *rf) {
  rf->in = kdc_xcalloc(f->n_inputs + 1, sizeof *rf->in);
  rf->out = kdc_xcalloc(f->n_outputs + 1, sizeof *rf->out);
  for (uint32_t i = 0; i < f->n_inputs; i++) make_io(p, &f->inputs[i], false, &rf->in[i]);
  for (uint32_t o = 0; o < f->n_outputs; o++) make_io(p, &f->outputs[o], true, &rf->out[o]);
}

void rt_io_destroy(kdc_rt_plan *p, const kdc_prog_func *f, rt_func *rf) {
  if (rf->in)
    for (uint32_t i = 0; i < f->n_inputs; i++) free_io(&rf->in[i], (size_t)p->nd);
  if (rf->out)
    for (uint32_t o = 0; o < f->n_outputs; o++) free_io(&rf->out[o], (size_t)p->nd);
  free(rf->in), free(rf->out);
}

/* One staged piece copy per task: task = tensor * nd + device. */
typedef struct copy_job {
  kdc_rt_plan *p;
  const rt_io *io;
  uint32_t n;
  const void *const *global_in;  /* split: the caller's inputs */
  void *const *global_out;       /* gather: the caller's outputs */
} copy_job;

static void copy_task(void *ctx, int64_t task) {
  const copy_job *j = ctx;
  int64_t nd = j->p->nd, d = task % nd;
  const rt_io *io = &j->io[task / nd];
  if (io->mode != RT_IO_STAGED || io->canonical[d] != d) return;
  const kdc_prog_tensor *t = io->t;
  int64_t zero[KDC_IO_MAX_RANK] = {0};
  const int64_t *off = io->piece_off + d * KDC_IO_MAX_RANK;
  size_t es = kdc_prog_dtype_size(t->dtype);
  rt_box b;
  if (j->global_in) {
    rt_box_init(&b, t->rank, es, t->local_dims, t->dims, off, t->local_dims, zero);
    rt_box_copy(&b, io->staging[d], j->global_in[task / nd], 0, b.rows);
  } else {
    rt_box_init(&b, t->rank, es, t->local_dims, t->local_dims, zero, t->dims, off);
    rt_box_copy(&b, j->global_out[task / nd], io->staging[d], 0, b.rows);
  }
}

static void run_copies(copy_job *j) {
  uint64_t bytes = 0;
  for (uint32_t i = 0; i < j->n; i++)
    if (j->io[i].mode == RT_IO_STAGED) bytes += j->io[i].t->bytes;
  if (bytes == 0) return;
  int64_t tasks = (int64_t)j->n * j->p->nd;
  if (bytes < PARALLEL_BYTES || tasks > RT_POOL_MAX_TASKS) {
    for (int64_t t = 0; t < tasks; t++) copy_task(j, t);
  } else {
    rt_pool_run(j->p->pool, copy_task, j, tasks);
  }
}

void rt_io_split(kdc_rt_plan *p, const kdc_prog_func *f, rt_func *rf, const void *const *inputs,
                 void *const *outputs) {
  int64_t nd = p->nd;
  for (uint32_t i = 0; i < f->n_inputs; i++) {
    const rt_io *io = &rf->in[i];
    for (int64_t d = 0; d < nd; d++) {
      const void **slot = &rf->in_ptr[d * f->n_inputs + i];
      if (io->mode == RT_IO_SHARED) *slot = inputs[i];
      else if (io->mode == RT_IO_SLICE) *slot = (const char *)inputs[i] + io->offset[d];
      else *slot = io->staging[io->canonical[d]];
    }
  }
  for (uint32_t o = 0; o < f->n_outputs; o++) {
    const rt_io *io = &rf->out[o];
    for (int64_t d = 0; d < nd; d++) {
      void **slot = &rf->out_ptr[d * f->n_outputs + o];
      if (io->canonical[d] != d || io->mode == RT_IO_STAGED) *slot = io->staging[d];
      else if (io->mode == RT_IO_SHARED) *slot = outputs[o];
      else *slot = (char *)outputs[o] + io->offset[d];
    }
  }
  copy_job j = {p, rf->in, f->n_inputs, inputs, NULL};
  run_copies(&j);
}

kdc_status rt_io_gather(kdc_rt_plan *p, const kdc_prog_func *f, rt_func *rf,
                        void *const *outputs, bool check) {
  for (uint32_t o = 0; check && o < f->n_outputs; o++) {
    const rt_io *io = &rf->out[o];
    for (int64_t d = 0; d < p->nd; d++) {
      int64_t c = io->canonical[d];
      if (c == d) continue;
      const void *mine = rf->out_ptr[d * f->n_outputs + o];
      const void *canon = rf->out_ptr[c * f->n_outputs + o];
      if (memcmp(mine, canon, io->t->local_bytes))
        return KDC_ERR(KDC_INTERNAL, "%s: %s: output \"%s\": the replica on device %lld differs "
                       "from device %lld's (a replicated output must agree everywhere)",
                       p->path, f->name, io->t->name, (long long)d, (long long)c);
    }
  }
  copy_job j = {p, rf->out, f->n_outputs, NULL, outputs};
  run_copies(&j);
  return NULL;
}
