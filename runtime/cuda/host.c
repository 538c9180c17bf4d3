/*
 * runtime/cuda/host.c: host-side planning of the CUDA executor (host.h).
 * Nothing here touches a device; tests/gpu/test_cuda_host.c checks it
 * against the CPU runtime on every machine.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/cuda/host.h"

/* ---- the launch table ------------------------------------------------------ */

bool rt_cuda_grid(uint64_t threads, uint32_t block, uint32_t *grid) {
  uint64_t g = block ? (threads + block - 1) / block : 0;
  if (g == 0) g = 1; /* an empty kernel still launches one block: every thread exits */
  *grid = g <= RT_CUDA_MAX_GRID ? (uint32_t)g : 0;
  return block && g <= RT_CUDA_MAX_GRID;
}

kdc_status rt_cuda_table_decode(kdc_reader *r, kdc_arena *a, uint32_t n_kernels,
                                rt_cuda_table *t) {
  memset(t, 0, sizeof *t);
  uint32_t version;
  KDC_RETURN_IF_ERROR(kdc_reader_u32(r, &version));
  if (version != 2 && version != RT_CUDA_TABLE_VERSION)
    return kdc_reader_error(r, "launch table version %u (this kdc reads 2 and %u)", version,
                            RT_CUDA_TABLE_VERSION);
  t->version = version;
  t->cubin_note = "";
  KDC_RETURN_IF_ERROR(kdc_reader_u32(r, &t->sm));
  if (t->sm != 80 && t->sm != 90) return kdc_reader_error(r, "sm_%u: expected 80 or 90", t->sm);
  KDC_RETURN_IF_ERROR(kdc_reader_count(r, 4 + 1 + 8 + 4 + 4 + 8, &t->n_kernels));
  if (t->n_kernels != n_kernels)
    return kdc_reader_error(r, "%u kernels in the launch table, %u in the program",
                            t->n_kernels, n_kernels);
  t->kernels = kdc_arena_alloc(a, (t->n_kernels + 1) * sizeof *t->kernels);
  for (uint32_t k = 0; k < t->n_kernels; k++) {
    rt_cuda_launch *l = &t->kernels[k];
    size_t len;
    char want[32];
    KDC_RETURN_IF_ERROR(kdc_reader_str(r, &l->entry, &len));
    snprintf(want, sizeof want, "kdc_cuda_%u", k);
    if (strcmp(l->entry, want))
      return kdc_reader_error(r, "kernel %u is \"%s\", expected \"%s\"", k, l->entry, want);
    KDC_RETURN_IF_ERROR(kdc_reader_u64(r, &l->threads));
    KDC_RETURN_IF_ERROR(kdc_reader_u32(r, &l->block));
    if (l->block == 0 || l->block > 1024 || l->block % 32)
      return kdc_reader_error(r, "kernel %u: block size %u: expected a multiple of 32 in "
                              "[32, 1024]", k, l->block);
    KDC_RETURN_IF_ERROR(kdc_reader_u32(r, &l->form));
    if (l->form > RT_CUDA_FORM_ROW)
      return kdc_reader_error(r, "kernel %u: unknown launch form %u", k, l->form);
    KDC_RETURN_IF_ERROR(kdc_reader_u64(r, &l->scratch));
    if (l->scratch > RT_CUDA_MAX_SCRATCH || (l->scratch && l->form == RT_CUDA_FORM_ELEMENT))
      return kdc_reader_error(r, "kernel %u: %llu bytes of scratch", k,
                              (unsigned long long)l->scratch);
    if (!rt_cuda_grid(l->threads, l->block, &l->grid))
      return kdc_reader_error(r, "kernel %u: %llu threads need more than %d blocks of %u",
                              k, (unsigned long long)l->threads, RT_CUDA_MAX_GRID, l->block);
  }
  if (version < 3) return NULL;
  size_t len;
  KDC_RETURN_IF_ERROR(kdc_reader_u32(r, &t->cubin_sm));
  if (t->cubin_sm && t->cubin_sm != t->sm)
    return kdc_reader_error(r, "a cubin for sm_%u in a plan for sm_%u", t->cubin_sm, t->sm);
  KDC_RETURN_IF_ERROR(kdc_reader_str(r, &t->cubin_note, &len));
  KDC_RETURN_IF_ERROR(kdc_reader_u64(r, &t->cubin_bytes));
  KDC_RETURN_IF_ERROR(kdc_reader_align(r, 64));
  if (!t->cubin_sm != !t->cubin_bytes)
    return kdc_reader_error(r, "cubin of %llu bytes for sm_%u", (unsigned long long)t->cubin_bytes,
                            t->cubin_sm);
  if (t->cubin_bytes != r->size - r->pos)
    return kdc_reader_error(r, "cubin of %llu bytes, %zu left in the section",
                            (unsigned long long)t->cubin_bytes, r->size - r->pos);
  if (t->cubin_bytes) {
    if (t->cubin_bytes < 64 || memcmp(r->data + r->pos, "\177ELF", 4))
      return kdc_reader_error(r, "the cubin is not an ELF image");
    KDC_RETURN_IF_ERROR(kdc_reader_bytes(r, (size_t)t->cubin_bytes, &t->cubin));
  }
  return NULL;
}

bool rt_cuda_cubin_runs(uint32_t cubin_sm, int major, int minor) {
  return cubin_sm && major == (int)cubin_sm / 10 && minor >= (int)cubin_sm % 10;
}

/* ---- GEMM -------------------------------------------------------------------- */

static bool fits_int(int64_t v) { return v >= 0 && v <= INT_MAX; }

kdc_status rt_cuda_gemm_map(const kdc_prog_gemm_step *g, const char *where, rt_cuda_gemm *out) {
  if (!fits_int(g->m) || !fits_int(g->n) || !fits_int(g->k) || !fits_int(g->lda) ||
      !fits_int(g->ldb) || !fits_int(g->ldc) || !fits_int(g->batch))
    return KDC_ERR(KDC_UNSUPPORTED, "%s: GEMM %lldx%lldx%lld (batch %lld) does not fit cuBLAS's "
                   "32-bit sizes", where, (long long)g->m, (long long)g->n, (long long)g->k,
                   (long long)g->batch);
  if (g->batch_inner > 1) /* codegen makes them for CPU plans only */
    return KDC_ERR(KDC_UNSUPPORTED, "%s: GEMM with a two-level batch (%lld x %lld): cuBLAS's "
                   "strided batches have one stride", where,
                   (long long)(g->batch / g->batch_inner), (long long)g->batch_inner);
  out->trans_a = g->trans_b;
  out->trans_b = g->trans_a;
  out->m = (int)g->n;
  out->n = (int)g->m;
  out->k = (int)g->k;
  out->lda = (int)g->ldb;
  out->ldb = (int)g->lda;
  out->ldc = (int)g->ldc;
  out->stride_a = g->stride_b;
  out->stride_b = g->stride_a;
  out->stride_c = g->stride_c;
  out->batch = (int)g->batch;
  return NULL;
}

/* ---- communicators ----------------------------------------------------------- */

static int find_split(const rt_cuda_comms *c, const kdc_prog_coll_step *s) {
  for (uint32_t i = 0; i < c->n_splits; i++)
    if (c->splits[i].naxes == s->naxes && !memcmp(c->splits[i].axes, s->axes, s->naxes))
      return (int)i;
  return -1;
}

void rt_cuda_comms_plan(const kdc_program *prog, rt_cuda_comms *out) {
  const kdc_prog_mesh *m = &prog->mesh;
  int64_t nd = m->n_devices > 0 ? m->n_devices : 1;
  memset(out, 0, sizeof *out);
  size_t cap = 0;
  out->step_split = kdc_xcalloc(prog->n_funcs + 1, sizeof *out->step_split);
  int64_t *mem = kdc_xcalloc((size_t)nd, sizeof *mem);
  for (uint32_t f = 0; f < prog->n_funcs; f++) {
    const kdc_prog_func *fn = &prog->funcs[f];
    out->step_split[f] = kdc_xcalloc(fn->n_steps + 1, sizeof **out->step_split);
    for (uint32_t s = 0; s < fn->n_steps; s++) {
      out->step_split[f][s] = -1;
      if (fn->steps[s].kind != KDC_STEP_COLLECTIVE) continue;
      const kdc_prog_coll_step *c = &fn->steps[s].coll;
      int i = find_split(out, c);
      if (i < 0) {
        KDC_GROW(out->splits, cap, (size_t)out->n_splits + 1);
        rt_cuda_split *sp = &out->splits[out->n_splits];
        memset(sp, 0, sizeof *sp);
        sp->naxes = c->naxes;
        memcpy(sp->axes, c->axes, c->naxes);
        sp->k = rt_mesh_axes_size(m, (int)c->naxes, c->axes);
        sp->color = kdc_xcalloc((size_t)nd, sizeof *sp->color);
        sp->key = kdc_xcalloc((size_t)nd, sizeof *sp->key);
        for (int64_t d = 0; d < nd; d++) sp->color[d] = -1;
        int groups = 0;
        for (int64_t d = 0; d < nd; d++) {
          if (sp->color[d] >= 0) continue; /* d is the smallest id of a new group */
          rt_mesh_group_members(m, d, (int)c->naxes, c->axes, mem);
          for (int64_t j = 0; j < sp->k; j++) {
            sp->color[mem[j]] = groups;
            sp->key[mem[j]] = (int)j;
          }
          groups++;
        }
        sp->world = groups == 1;
        for (int64_t d = 0; d < nd && sp->world; d++) sp->world = sp->key[d] == d;
        i = (int)out->n_splits++;
      }
      out->step_split[f][s] = i;
    }
  }
  free(mem);
}

void rt_cuda_comms_free(rt_cuda_comms *c, const kdc_program *prog) {
  for (uint32_t i = 0; i < c->n_splits; i++) free(c->splits[i].color), free(c->splits[i].key);
  if (c->step_split)
    for (uint32_t f = 0; f < prog->n_funcs; f++) free(c->step_split[f]);
  free(c->splits);
  free(c->step_split);
  memset(c, 0, sizeof *c);
}

/* ---- copies ------------------------------------------------------------------ */

int64_t rt_cuda_box_2d(const rt_box *b, void (*emit)(void *ctx, const rt_copy2d *c), void *ctx) {
  if (b->rows == 0 || b->run == 0) return 0;
  rt_copy2d c = {0, 0, b->run, 1, b->run, b->run};
  if (b->nouter == 0) {
    c.src_off = (uint64_t)b->src_base;
    c.dst_off = (uint64_t)b->dst_base;
    emit(ctx, &c);
    return 1;
  }
  int inner = b->nouter - 1;
  c.height = (uint64_t)b->outer[inner];
  c.src_pitch = (uint64_t)b->src_stride[inner];
  c.dst_pitch = (uint64_t)b->dst_stride[inner];
  int64_t n = 0;
  for (int64_t r = 0; r < b->rows; r += b->outer[inner], n++) {
    int64_t so, dof;
    rt_box_row(b, r, &so, &dof);
    c.src_off = (uint64_t)so;
    c.dst_off = (uint64_t)dof;
    emit(ctx, &c);
  }
  return n;
}

/* ---- collectives ---------------------------------------------------------------- */

typedef struct cop_list {
  rt_cop *v;
  int n;
  size_t cap;
} cop_list;

static rt_cop *push(cop_list *l, rt_cop_kind kind) {
  KDC_GROW(l->v, l->cap, (size_t)l->n + 1);
  rt_cop *o = &l->v[l->n++];
  memset(o, 0, sizeof *o);
  o->kind = kind;
  return o;
}

static rt_cop *nccl_op(cop_list *l, rt_cop_kind kind, rt_cbuf sb, uint64_t so, rt_cbuf db,
                       uint64_t dof, uint64_t count) {
  rt_cop *o = push(l, kind);
  o->sbuf = (uint8_t)sb, o->soff = so, o->dbuf = (uint8_t)db, o->doff = dof, o->count = count;
  return o;
}

/* A block |block| of a tensor |sdims| (at element offsets |so|) in buffer
 * sb + soff, to a tensor |ddims| at |dofs| in db + doff. */
static void box_op(cop_list *l, const kdc_prog_coll_step *c, size_t es, const int64_t *block,
                   rt_cbuf sb, uint64_t soff, const int64_t *sdims, const int64_t *so, rt_cbuf db,
                   uint64_t doff, const int64_t *ddims, const int64_t *dofs) {
  rt_cop *o = push(l, RT_COP_BOX);
  o->sbuf = (uint8_t)sb, o->soff = soff, o->dbuf = (uint8_t)db, o->doff = doff;
  rt_box_init(&o->box, c->rank, es, block, sdims, so, ddims, dofs);
}

static int64_t numel(int rank, const int64_t *dims) {
  int64_t n = 1;
  for (int d = 0; d < rank; d++) n *= dims[d];
  return n;
}

/* Are the dims before |dim| all 1 (so a split along |dim| is k contiguous
 * chunks of the flat buffer)? */
static bool leading_ones(const int64_t *dims, int64_t dim) {
  for (int64_t d = 0; d < dim; d++)
    if (dims[d] != 1) return false;
  return true;
}

static void take(rt_cop **dst, int *n, cop_list *l, kdc_arena *a) {
  *n = l->n;
  *dst = kdc_arena_alloc(a, ((size_t)l->n + 1) * sizeof **dst);
  if (l->n) memcpy(*dst, l->v, (size_t)l->n * sizeof **dst);
  free(l->v);
}

kdc_status rt_cuda_coll_plan(const kdc_prog_coll_step *c, const rt_coll_groups *g,
                             int64_t device, kdc_arena *a, const char *where, rt_coll_plan *out) {
  memset(out, 0, sizeof *out);
  size_t es = kdc_prog_dtype_size(c->dtype);
  bool sum = c->kind == KDC_COLL_ALL_REDUCE || c->kind == KDC_COLL_REDUCE_SCATTER;
  if (sum && (c->dtype == KDC_IO_DTYPE_BOOL || !es))
    return KDC_ERR(KDC_UNSUPPORTED, "%s: %s over %s is not supported on CUDA (NCCL sums numbers)",
                   where, kdc_prog_coll_name(c->kind), kdc_io_dtype_name(c->dtype));
  cop_list pre = {0}, nc = {0}, post = {0};
  int64_t k = g->k, zero[KDC_IO_MAX_RANK] = {0};
  uint64_t in_n = (uint64_t)numel(c->rank, c->in_dims), out_n = (uint64_t)numel(c->rank, c->out_dims);
  switch (c->kind) {
  case KDC_COLL_ALL_REDUCE:
    nccl_op(&nc, RT_COP_ALL_REDUCE, RT_CB_SRC, 0, RT_CB_DST, 0, in_n);
    break;
  case KDC_COLL_ALL_GATHER:
    if (leading_ones(c->in_dims, c->dim)) {
      nccl_op(&nc, RT_COP_ALL_GATHER, RT_CB_SRC, 0, RT_CB_DST, 0, in_n);
      break;
    }
    nccl_op(&nc, RT_COP_ALL_GATHER, RT_CB_SRC, 0, RT_CB_SCRATCH, 0, in_n);
    out->scratch_bytes = (uint64_t)k * in_n * es;
    for (int64_t m = 0; m < k; m++) { /* member m's operand at m along dim */
      int64_t dof[KDC_IO_MAX_RANK] = {0};
      dof[c->dim] = m * c->in_dims[c->dim];
      box_op(&post, c, es, c->in_dims, RT_CB_SCRATCH, (uint64_t)m * in_n * es, c->in_dims, zero,
             RT_CB_DST, 0, c->out_dims, dof);
    }
    break;
  case KDC_COLL_REDUCE_SCATTER:
    if (leading_ones(c->out_dims, c->dim)) {
      nccl_op(&nc, RT_COP_REDUCE_SCATTER, RT_CB_SRC, 0, RT_CB_DST, 0, out_n);
      break;
    }
    out->scratch_bytes = (uint64_t)k * out_n * es;
    for (int64_t m = 0; m < k; m++) { /* piece m along dim, packed at chunk m */
      int64_t so[KDC_IO_MAX_RANK] = {0};
      so[c->dim] = m * c->out_dims[c->dim];
      box_op(&pre, c, es, c->out_dims, RT_CB_SRC, 0, c->in_dims, so, RT_CB_SCRATCH,
             (uint64_t)m * out_n * es, c->out_dims, zero);
    }
    nccl_op(&nc, RT_COP_REDUCE_SCATTER, RT_CB_SCRATCH, 0, RT_CB_DST, 0, out_n);
    break;
  case KDC_COLL_ALL_TO_ALL: {
    int64_t piece[KDC_IO_MAX_RANK];
    memcpy(piece, c->in_dims, sizeof piece);
    piece[c->dim] = c->in_dims[c->dim] / k;
    uint64_t pn = (uint64_t)numel(c->rank, piece), pb = pn * es;
    bool pack = !leading_ones(c->in_dims, c->dim), unpack = !leading_ones(c->out_dims, c->dim2);
    uint64_t recv_at = pack ? (uint64_t)k * pb : 0;
    out->scratch_bytes = recv_at + (unpack ? (uint64_t)k * pb : 0);
    for (int64_t m = 0; m < k; m++) {
      int64_t so[KDC_IO_MAX_RANK] = {0}, dof[KDC_IO_MAX_RANK] = {0};
      so[c->dim] = m * piece[c->dim];
      dof[c->dim2] = m * piece[c->dim2];
      if (pack)
        box_op(&pre, c, es, piece, RT_CB_SRC, 0, c->in_dims, so, RT_CB_SCRATCH, (uint64_t)m * pb,
               piece, zero);
      rt_cop *s = nccl_op(&nc, RT_COP_SEND, pack ? RT_CB_SCRATCH : RT_CB_SRC, (uint64_t)m * pb,
                          RT_CB_DST, 0, pn);
      s->peer = m;
      rt_cop *r = nccl_op(&nc, RT_COP_RECV, RT_CB_SRC, 0, unpack ? RT_CB_SCRATCH : RT_CB_DST,
                          (unpack ? recv_at : 0) + (uint64_t)m * pb, pn);
      r->peer = m;
      if (unpack)
        box_op(&post, c, es, piece, RT_CB_SCRATCH, recv_at + (uint64_t)m * pb, piece, zero,
               RT_CB_DST, 0, c->out_dims, dof);
    }
    break;
  }
  case KDC_COLL_PERMUTE: {
    int64_t nd = g->n_groups * k, target = -1;
    for (int64_t e = 0; e < nd; e++)
      if (g->peer[e] == device) target = e; /* the device that reads ours */
    if (target >= 0) {
      rt_cop *s = nccl_op(&nc, RT_COP_SEND, RT_CB_SRC, 0, RT_CB_DST, 0, in_n);
      s->peer = target, s->world = true;
    }
    if (g->peer[device] >= 0) {
      rt_cop *r = nccl_op(&nc, RT_COP_RECV, RT_CB_SRC, 0, RT_CB_DST, 0, out_n);
      r->peer = g->peer[device], r->world = true;
    } else {
      rt_cop *z = push(&pre, RT_COP_ZERO);
      z->dbuf = RT_CB_DST, z->count = out_n * es;
    }
    break;
  }
  default:
    free(pre.v), free(nc.v), free(post.v);
    return KDC_ERR(KDC_INVALID_INPUT, "%s: collective kind %d", where, (int)c->kind);
  }
  take(&out->pre, &out->n_pre, &pre, a);
  take(&out->nccl, &out->n_nccl, &nc, a);
  take(&out->post, &out->n_post, &post, a);
  return NULL;
}
