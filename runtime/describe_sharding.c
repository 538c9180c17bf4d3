/*
 * runtime/describe_sharding.c: `kdc inspect --sharding NAME plan.bin`, a
 * picture of how one input, output or weight is laid out over the devices
 * (in the spirit of jax.debug.visualize_array_sharding).  A tensor is cut
 * into blocks (the product of each dim's shard counts); every block is
 * held by one or more devices (replicas over the axes the tensor does not
 * use).  Rank 2 is drawn as a grid of boxes, one per block, labelled with
 * the device ids holding it; other ranks list the blocks with their index
 * ranges.  For people, not parsed.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/runtime.h"

enum { MAX_BLOCKS_LISTED = 256, LABEL = 96 };

/* Looks |name| up among the inputs and outputs of every function, then the
 * weights; |out_what| says which. */
static const kdc_prog_tensor *find(const kdc_program *p, const char *name, char *what, size_t n) {
  for (uint32_t i = 0; i < p->n_funcs; i++) {
    const kdc_prog_func *f = &p->funcs[i];
    for (uint32_t j = 0; j < f->n_inputs; j++)
      if (strcmp(f->inputs[j].name, name) == 0) {
        snprintf(what, n, "input %u of %s", j, f->name);
        return &f->inputs[j];
      }
    for (uint32_t j = 0; j < f->n_outputs; j++)
      if (strcmp(f->outputs[j].name, name) == 0) {
        snprintf(what, n, "output %u of %s", j, f->name);
        return &f->outputs[j];
      }
  }
  for (uint32_t i = 0; i < p->n_weights; i++)
    if (strcmp(p->weights[i].name, name) == 0) {
      snprintf(what, n, "weight");
      return &p->weights[i];
    }
  return NULL;
}

/* The linear index of the block |device| holds (row-major over the
 * per-dim shard counts |shards|). */
static int64_t block_of(const kdc_prog_mesh *m, const kdc_prog_tensor *t, const int64_t *shards,
                        int64_t device) {
  int64_t c[KDC_PROG_MAX_AXES], b = 0;
  rt_mesh_coords(m, device, c);
  for (int d = 0; d < t->rank; d++)
    b = b * shards[d] + rt_mesh_group_index(m, c, t->sharding.naxes[d], t->sharding.axes[d]);
  return b;
}

/* "0-3,8" : the devices holding block |b|, runs of consecutive ids joined. */
static void label(const kdc_prog_mesh *m, const kdc_prog_tensor *t, const int64_t *shards,
                  int64_t b, char *buf, size_t n) {
  size_t o = 0;
  int64_t nd = m->n_devices, run = -1, prev = -2;
  buf[0] = 0;
  for (int64_t d = 0; d <= nd; d++) {
    bool holds = d < nd && block_of(m, t, shards, d) == b;
    if (holds && d == prev + 1 && run >= 0) {
      prev = d;
      continue;
    }
    if (run >= 0 && o < n) /* close the run [run, prev] */
      o += (size_t)snprintf(buf + o, n - o, prev > run ? "%s%" PRId64 "-%" PRId64 : "%s%" PRId64,
                            o ? "," : "", run, prev);
    run = holds ? d : -1;
    prev = d;
  }
}

static void put_rule(FILE *o, int64_t cols, int width) {
  fprintf(o, "  +");
  for (int64_t c = 0; c < cols; c++) {
    for (int i = 0; i < width; i++) fputc('-', o);
    fputc('+', o);
  }
  fputc('\n', o);
}

static void grid(FILE *o, const kdc_prog_mesh *m, const kdc_prog_tensor *t, const int64_t *shards) {
  char lab[LABEL];
  int width = 6;
  for (int64_t b = 0; b < shards[0] * shards[1]; b++) {
    label(m, t, shards, b, lab, sizeof lab);
    if ((int)strlen(lab) + 2 > width) width = (int)strlen(lab) + 2;
  }
  fprintf(o, "  rows: dim 0 in %" PRId64 " block(s) of %" PRId64 ", columns: dim 1 in %" PRId64
          " block(s) of %" PRId64 "; each box lists the devices holding that block\n",
          shards[0], t->local_dims[0], shards[1], t->local_dims[1]);
  put_rule(o, shards[1], width);
  for (int64_t r = 0; r < shards[0]; r++) {
    fprintf(o, "  |");
    for (int64_t c = 0; c < shards[1]; c++) {
      label(m, t, shards, r * shards[1] + c, lab, sizeof lab);
      int len = (int)strlen(lab), left = (width - len) / 2;
      fprintf(o, "%*s%s%*s|", left, "", lab, width - len - left, "");
    }
    fprintf(o, "  rows %" PRId64 ":%" PRId64 "\n", r * t->local_dims[0],
            (r + 1) * t->local_dims[0]);
    put_rule(o, shards[1], width);
  }
}

static void listing(FILE *o, const kdc_prog_mesh *m, const kdc_prog_tensor *t,
                    const int64_t *shards, int64_t n_blocks) {
  char lab[LABEL];
  for (int64_t b = 0; b < n_blocks && b < MAX_BLOCKS_LISTED; b++) {
    int64_t idx[KDC_IO_MAX_RANK], r = b;
    for (int d = t->rank - 1; d >= 0; d--) idx[d] = r % shards[d], r /= shards[d];
    fprintf(o, "  [");
    for (int d = 0; d < t->rank; d++)
      fprintf(o, "%s%" PRId64 ":%" PRId64, d ? ", " : "", idx[d] * t->local_dims[d],
              (idx[d] + 1) * t->local_dims[d]);
    label(m, t, shards, b, lab, sizeof lab);
    fprintf(o, "] -> device%s %s\n", strpbrk(lab, ",-") ? "s" : "", lab);
  }
  if (n_blocks > MAX_BLOCKS_LISTED)
    fprintf(o, "  ... (%" PRId64 " blocks)\n", n_blocks);
}

kdc_status kdc_rt_plan_describe_sharding(const kdc_rt_plan *plan, const char *name, FILE *o) {
  const kdc_program *p = &plan->prog;
  char what[160], sh[512];
  const kdc_prog_tensor *t = find(p, name, what, sizeof what);
  if (!t)
    return KDC_ERR(KDC_INVALID_INPUT, "%s: no input, output or weight is called \"%s\"",
                   plan->path, name);
  const kdc_prog_mesh *m = &p->mesh;
  int64_t shards[KDC_IO_MAX_RANK], n_blocks = 1;
  for (int d = 0; d < t->rank; d++) {
    shards[d] = t->local_dims[d] ? t->dims[d] / t->local_dims[d] : 1;
    n_blocks *= shards[d];
  }
  fprintf(o, "%s (%s): %s[", t->name, what, kdc_io_dtype_name(t->dtype));
  for (int d = 0; d < t->rank; d++) fprintf(o, "%s%" PRId64, d ? "," : "", t->dims[d]);
  fprintf(o, "] %s on mesh ", kdc_prog_sharding_str(m, &t->sharding, t->rank, sh, sizeof sh));
  if (m->naxes == 0) fprintf(o, "(none)");
  for (uint32_t a = 0; a < m->naxes; a++)
    fprintf(o, "%s%s=%" PRId64, a ? ", " : "", m->names[a], m->sizes[a]);
  fprintf(o, "\n  each device holds %s[", kdc_io_dtype_name(t->dtype));
  for (int d = 0; d < t->rank; d++) fprintf(o, "%s%" PRId64, d ? "," : "", t->local_dims[d]);
  fprintf(o, "]; %" PRId64 " block(s), each on %" PRId64 " device(s)\n", n_blocks,
          m->n_devices / n_blocks);
  for (int d = 0; d < t->rank; d++) {
    fprintf(o, "  dim %d (%" PRId64 "): ", d, t->dims[d]);
    if (!t->sharding.naxes[d]) fprintf(o, "not split\n");
    else {
      fprintf(o, "split by ");
      for (int i = 0; i < t->sharding.naxes[d]; i++)
        fprintf(o, "%s%s", i ? " then " : "", m->names[t->sharding.axes[d][i]]);
      fprintf(o, " into %" PRId64 " pieces of %" PRId64 "\n", shards[d], t->local_dims[d]);
    }
  }
  if (t->rank == 2) grid(o, m, t, shards);
  else listing(o, m, t, shards, n_blocks);
  return NULL;
}
