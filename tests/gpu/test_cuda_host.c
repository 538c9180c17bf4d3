/*
 * The host-side planning of the CUDA executor (runtime/cuda/host.c),
 * checked on the CPU -- no GPU is involved or simulated as a GPU:
 *   - launch_table: the CUDA section of a real --target cuda plan decodes,
 *     every kernel's thread count is its output's element count (the
 *     kernel step's first argument) and its entry is in the PTX; grids
 *     are ceil(threads / block);
 *   - launch_table_errors: a corrupt section is a located error;
 *   - gemm_mapping: the cublasSgemmStridedBatched arguments host.c derives
 *     from a row-major GEMM step, fed to OpenBLAS's COLUMN-major cblas_sgemm
 *     (same argument convention as cuBLAS), give the row-major result;
 *   - comm_splits: each split's (color, key) groups are exactly
 *     kdc_mesh_group_members (ir/spmd.c) in group-index order;
 *   - box_2d: the cuMemcpy2D decomposition of a block copy moves the bytes
 *     rt_box_copy moves;
 *   - library_symbols (CUDA builds): every driver, cuBLAS and NCCL entry
 *     point the executor uses resolves, under the header's renamed name, in
 *     the toolkit's stub libcuda.so, libcublas.so.13 and libnccl.so.2
 *     (nothing is called); with the stub as libcuda.so.1, `kdc run` on a
 *     CUDA plan fails at cuInit (exit 3);
 *   - gpu_list / gpu_ordinals (cuda/gpus.c): the GPU inventory from fakes of
 *     the driver's answers (names, capabilities, memory; each failing call
 *     named with the driver's error), and which GPUs a process's devices
 *     use (the local-rank rule, a scheduler's binding, explicit ids);
 *   - devices_cli: `kdc devices` (+ --json) on this machine, and its GPU
 *     branch with the driver's answers faked (KDC_TEST_FAKE_GPUS) under a
 *     Slurm environment set by the test;
 *   - collective_plans: every kind x axes x dim on 2x4 and 2x2x2 meshes:
 *     the per-device plans (block copies + NCCL calls) applied on the host
 *     with NCCL's documented flat-buffer semantics equal the in-process
 *     collectives (coll_shm.c) bitwise (integer-valued f32 data, exact
 *     sums); sums over bool are refused.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cblas.h>
#include <cmocka.h>
#include <json-c/json.h>

#include "common/io.h"
#include "e2e/e2e_util.h"
#include "ir/ir.h"
#include "runtime/comm.h"
#include "runtime/cuda/cuda_rt.h"
#include "runtime/cuda/host.h"
#ifdef KDC_HAVE_CUDA
#include "runtime/cuda/api.h"
#endif

/* ---- launch table ---------------------------------------------------------------- */

static void test_launch_table(void **state) {
  (void)state;
  char *plan = e2e_path("host.plan"), *model = e2e_src("examples/mnist_mlp/model.json");
  e2e_result r;
  e2e_kdc(&r, "compile", model, "-o", plan, "--target", "cuda", "--mesh", "2", "--batch", "512",
          "--loss", "categorical_crossentropy", NULL);
  if (r.status != 0) fail_msg("compile: %s", r.err);
  kdc_plan_file *pf = NULL;
  assert_null(kdc_plan_file_open(plan, &pf));
  kdc_arena *a = kdc_arena_create();
  kdc_program prog;
  memset(&prog, 0, sizeof prog);
  kdc_reader pr, wr, cr;
  const void *data;
  size_t size;
  assert_null(kdc_plan_file_reader(pf, KDC_PLAN_SECTION_PROGRAM, &pr));
  assert_null(kdc_prog_decode_mesh(&pr, a, &prog));
  assert_true(kdc_plan_file_find(pf, KDC_PLAN_SECTION_WEIGHTS, &data, &size));
  kdc_reader_init(&wr, data, size, plan, "weights");
  assert_null(kdc_prog_decode_weights(&wr, a, &prog));
  assert_null(kdc_prog_decode(&pr, a, &prog));
  assert_null(kdc_plan_file_reader(pf, KDC_PLAN_SECTION_CUDA, &cr));
  rt_cuda_table t;
  assert_null(rt_cuda_table_decode(&cr, a, prog.n_kernels, &t));
  assert_int_equal(t.sm, 80);
  assert_int_equal(t.n_kernels, prog.n_kernels);
  assert_true(prog.n_kernels > 0);
  assert_true(kdc_plan_file_find(pf, KDC_PLAN_SECTION_PTX, &data, &size));
  char *ptx = kdc_xmalloc(size + 1);
  memcpy(ptx, data, size);
  ptx[size] = 0;
  int checked = 0, reductions = 0;
  for (uint32_t f = 0; f < prog.n_funcs; f++)
    for (uint32_t s = 0; s < prog.funcs[f].n_steps; s++) {
      const kdc_prog_step *st = &prog.funcs[f].steps[s];
      if (st->kind != KDC_STEP_KERNEL) continue;
      const rt_cuda_launch *l = &t.kernels[st->kernel.kernel];
      uint64_t bytes = st->kernel.args[0].bytes; /* the output */
      assert_true(l->threads > 0);
      if (l->form == RT_CUDA_FORM_ELEMENT) {
        uint64_t es = bytes / l->threads; /* 1, 2 or 4 elements of 1, 2, 4 or 8 bytes */
        if (bytes % l->threads || es > 32 || (es & (es - 1)))
          fail_msg("kernel %u: %llu threads for a %llu-byte output", st->kernel.kernel,
                   (unsigned long long)l->threads, (unsigned long long)bytes);
        assert_int_equal(l->block, 256);
      } else {  /* a reduction: whole blocks, at least one thread per output */
        assert_true(l->form == RT_CUDA_FORM_COLUMN || l->form == RT_CUDA_FORM_ROW);
        assert_int_equal(l->threads % l->block, 0);
        assert_true(l->threads >= bytes / 4);
        reductions++;
      }
      assert_int_equal(l->grid, (l->threads + l->block - 1) / l->block);
      assert_true((uint64_t)l->grid * l->block >= l->threads);
      assert_true((uint64_t)(l->grid - 1) * l->block < l->threads);
      char entry[64];
      snprintf(entry, sizeof entry, ".entry %s(", l->entry);
      if (!strstr(ptx, entry)) fail_msg("%s not in the PTX", entry);
      checked++;
    }
  assert_true(checked > 0);
  assert_true(reductions > 0); /* the bias gradients of train_step are column reductions */
  uint32_t g;
  assert_true(rt_cuda_grid(0, 256, &g) && g == 1);
  assert_true(rt_cuda_grid(256, 256, &g) && g == 1);
  assert_true(rt_cuda_grid(257, 256, &g) && g == 2);
  assert_true(rt_cuda_grid((uint64_t)RT_CUDA_MAX_GRID * 256, 256, &g) && g == RT_CUDA_MAX_GRID);
  assert_false(rt_cuda_grid((uint64_t)RT_CUDA_MAX_GRID * 256 + 1, 256, &g));
  free(ptx);
  kdc_arena_destroy(a);
  kdc_plan_file_close(pf);
  free(plan), free(model);
}

/* A launch table with one field changed by |bad| (0: valid). */
static void table(kdc_buf *b, int bad) {
  kdc_buf_init(b);
  kdc_buf_put_u32(b, bad == 1 ? 1 : 2);
  kdc_buf_put_u32(b, bad == 2 ? 70 : 90);
  kdc_buf_put_u32(b, 2);
  kdc_buf_put_str(b, "kdc_cuda_0");
  kdc_buf_put_u64(b, 1000);
  kdc_buf_put_u32(b, bad == 3 ? 100 : 128);
  kdc_buf_put_u32(b, RT_CUDA_FORM_ELEMENT);
  kdc_buf_put_u64(b, bad == 8 ? 64 : 0); /* scratch only for a reduction */
  kdc_buf_put_str(b, bad == 4 ? "kdc_cuda_7" : "kdc_cuda_1");
  kdc_buf_put_u64(b, bad == 5 ? ((uint64_t)RT_CUDA_MAX_GRID + 1) * 128 : 1);
  kdc_buf_put_u32(b, 128);
  kdc_buf_put_u32(b, bad == 7 ? 9 : RT_CUDA_FORM_COLUMN);
  kdc_buf_put_u64(b, bad == 9 ? RT_CUDA_MAX_SCRATCH + 1 : 4096);
  if (bad == 6) b->size -= 3; /* truncated */
}

static void test_launch_table_errors(void **state) {
  (void)state;
  static const char *const want[] = {NULL,          "version 1",         "sm_70",
                                     "block size 100", "expected \"kdc_cuda_1\"", "blocks of 128",
                                     "need 8 bytes", "unknown launch form 9",
                                     "kernel 0: 64 bytes of scratch", "bytes of scratch"};
  for (int bad = 0; bad <= 9; bad++) {
    kdc_buf b;
    table(&b, bad);
    kdc_reader r;
    kdc_reader_init(&r, b.data, b.size, "p.bin", "cuda");
    kdc_arena *a = kdc_arena_create();
    rt_cuda_table t;
    kdc_status st = rt_cuda_table_decode(&r, a, 2, &t);
    if (bad == 0) {
      assert_null(st);
      assert_int_equal(t.kernels[0].grid, 8);
      assert_int_equal(t.kernels[1].grid, 1);
      assert_int_equal(t.kernels[1].scratch, 4096);
      kdc_reader_init(&r, b.data, b.size, "p.bin", "cuda");
      st = rt_cuda_table_decode(&r, a, 3, &t); /* the program has 3 kernels */
      assert_non_null(st);
      assert_non_null(strstr(kdc_status_message(st), "2 kernels in the launch table, 3 in"));
    } else {
      assert_non_null(st);
      assert_int_equal(kdc_status_code(st), KDC_INVALID_INPUT);
      const char *m = kdc_status_message(st);
      if (!strstr(m, "p.bin: section cuda: byte") || !strstr(m, want[bad]))
        fail_msg("case %d: %s", bad, m);
    }
    kdc_status_free(st);
    kdc_arena_destroy(a);
    kdc_buf_free(&b);
  }
}

/* ---- GEMM -------------------------------------------------------------------------- */

static float frand(unsigned *s) {
  *s = *s * 1103515245u + 12345u;
  return (float)((*s >> 8) % 2001) / 1000.0f - 1.0f;
}

static void test_gemm_mapping(void **state) {
  (void)state;
  unsigned seed = 7;
  for (int ta = 0; ta < 2; ta++)
    for (int tb = 0; tb < 2; tb++)
      for (int pad = 0; pad < 2; pad++) {
        kdc_prog_gemm_step g;
        memset(&g, 0, sizeof g);
        g.batch = 3, g.m = 5, g.n = 7, g.k = 4;
        g.trans_a = ta, g.trans_b = tb;
        g.lda = (ta ? g.m : g.k) + pad * 3; /* row-major: row length of A as stored */
        g.ldb = (tb ? g.k : g.n) + pad * 2;
        g.ldc = g.n + pad;
        g.stride_a = (ta ? g.k : g.m) * g.lda + pad * 5;
        g.stride_b = (tb ? g.n : g.k) * g.ldb + pad;
        g.stride_c = g.m * g.ldc + pad * 4;
        size_t na = (size_t)(g.batch * g.stride_a), nb = (size_t)(g.batch * g.stride_b),
               nc = (size_t)(g.batch * g.stride_c);
        float *A = kdc_xcalloc(na, 4), *B = kdc_xcalloc(nb, 4), *C0 = kdc_xcalloc(nc, 4),
              *C1 = kdc_xcalloc(nc, 4);
        for (size_t i = 0; i < na; i++) A[i] = frand(&seed);
        for (size_t i = 0; i < nb; i++) B[i] = frand(&seed);
        for (int64_t i = 0; i < g.batch; i++) /* the CPU executor's row-major call */
          cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                      (int)g.m, (int)g.n, (int)g.k, 1.0f, A + i * g.stride_a, (int)g.lda,
                      B + i * g.stride_b, (int)g.ldb, 0.0f, C0 + i * g.stride_c, (int)g.ldc);
        rt_cuda_gemm c;
        assert_null(rt_cuda_gemm_map(&g, "test", &c));
        for (int i = 0; i < c.batch; i++) /* cuBLAS's arguments, column-major */
          cblas_sgemm(CblasColMajor, c.trans_a ? CblasTrans : CblasNoTrans,
                      c.trans_b ? CblasTrans : CblasNoTrans, c.m, c.n, c.k, 1.0f,
                      B + i * c.stride_a, c.lda, A + i * c.stride_b, c.ldb, 0.0f,
                      C1 + i * c.stride_c, c.ldc);
        for (size_t i = 0; i < nc; i++)
          if (!(C0[i] - C1[i] <= 1e-5f && C1[i] - C0[i] <= 1e-5f))
            fail_msg("ta=%d tb=%d pad=%d: C[%zu] %g vs %g", ta, tb, pad, i, C0[i], C1[i]);
        free(A), free(B), free(C0), free(C1);
      }
  kdc_prog_gemm_step big;
  memset(&big, 0, sizeof big);
  big.batch = 1, big.m = (int64_t)1 << 32, big.n = 1, big.k = 1, big.lda = 1, big.ldb = 1,
  big.ldc = 1;
  rt_cuda_gemm c;
  kdc_status st = rt_cuda_gemm_map(&big, "p.bin: predict step 3", &c);
  assert_non_null(st);
  assert_int_equal(kdc_status_code(st), KDC_UNSUPPORTED);
  assert_non_null(strstr(kdc_status_message(st), "p.bin: predict step 3: GEMM"));
  kdc_status_free(st);
}

/* ---- meshes ------------------------------------------------------------------------ */

static void make_mesh(int naxes, const int64_t *sizes, kdc_prog_mesh *pm, kdc_mesh *im) {
  static const char *const names[] = {"a", "b", "c"};
  memset(pm, 0, sizeof *pm);
  memset(im, 0, sizeof *im);
  pm->naxes = (uint32_t)naxes;
  im->naxes = naxes;
  pm->n_devices = 1;
  for (int i = 0; i < naxes; i++) {
    pm->names[i] = names[i];
    pm->sizes[i] = im->sizes[i] = sizes[i];
    snprintf(im->names[i], sizeof im->names[i], "%s", names[i]);
    pm->n_devices *= sizes[i];
  }
}

/* Every ordered choice of 1..naxes distinct axes, as (n, axes). */
static int axes_choices(int naxes, uint8_t out[][3], int *lens) {
  int n = 0;
  for (int a = 0; a < naxes; a++) {
    out[n][0] = (uint8_t)a, lens[n++] = 1;
    for (int b = 0; b < naxes; b++) {
      if (b == a) continue;
      out[n][0] = (uint8_t)a, out[n][1] = (uint8_t)b, lens[n++] = 2;
      for (int c = 0; c < naxes; c++)
        if (c != a && c != b) out[n][0] = (uint8_t)a, out[n][1] = (uint8_t)b,
                              out[n][2] = (uint8_t)c, lens[n++] = 3;
    }
  }
  return n;
}

static void test_comm_splits(void **state) {
  (void)state;
  static const int64_t shapes[][3] = {{8, 0, 0}, {2, 4, 0}, {2, 2, 2}};
  static const int ranks[] = {1, 2, 3};
  for (int m = 0; m < 3; m++) {
    kdc_prog_mesh pm;
    kdc_mesh im;
    make_mesh(ranks[m], shapes[m], &pm, &im);
    uint8_t ax[16][3];
    int len[16], n = axes_choices(ranks[m], ax, len);
    /* one program with a collective per axes choice, each twice */
    kdc_prog_step *steps = kdc_xcalloc((size_t)(2 * n), sizeof *steps);
    for (int i = 0; i < 2 * n; i++) {
      steps[i].kind = KDC_STEP_COLLECTIVE;
      steps[i].coll.naxes = (uint32_t)len[i % n];
      memcpy(steps[i].coll.axes, ax[i % n], 3);
    }
    kdc_prog_func fn = {.name = "f", .n_steps = (uint32_t)(2 * n), .steps = steps};
    kdc_program prog;
    memset(&prog, 0, sizeof prog);
    prog.mesh = pm;
    prog.n_funcs = 1;
    prog.funcs = &fn;
    rt_cuda_comms c;
    rt_cuda_comms_plan(&prog, &c);
    assert_int_equal(c.n_splits, n); /* one per distinct axes list */
    for (int i = 0; i < 2 * n; i++) assert_int_equal(c.step_split[0][i], i % n);
    int64_t want[8], got[8];
    for (int s = 0; s < n; s++) {
      const rt_cuda_split *sp = &c.splits[s];
      bool world = true;
      for (int64_t d = 0; d < 8; d++) {
        kdc_mesh_group_members(&im, d, len[s], ax[s], want);
        int64_t k = kdc_mesh_axes_size(&im, len[s], ax[s]);
        assert_int_equal(sp->k, k);
        for (int64_t e = 0; e < 8; e++) /* the split's group of d, ordered by key */
          if (sp->color[e] == sp->color[d]) got[sp->key[e]] = e;
        for (int64_t j = 0; j < k; j++) assert_int_equal(got[j], want[j]);
        assert_int_equal(sp->key[d], kdc_mesh_group_index(&im, d, len[s], ax[s]));
        world = world && k == 8 && kdc_mesh_group_index(&im, d, len[s], ax[s]) == d;
      }
      assert_int_equal(sp->world, world);
    }
    rt_cuda_comms_free(&c, &prog);
    free(steps);
  }
}

/* ---- copies ------------------------------------------------------------------------ */

typedef struct apply_ctx {
  char *dst;
  const char *src;
} apply_ctx;

static void apply2d(void *ctx, const rt_copy2d *c) {
  apply_ctx *x = ctx;
  for (uint64_t h = 0; h < c->height; h++)
    memcpy(x->dst + c->dst_off + h * c->dst_pitch, x->src + c->src_off + h * c->src_pitch,
           c->width);
}

static void test_box_2d(void **state) {
  (void)state;
  unsigned seed = 3;
  for (int trial = 0; trial < 200; trial++) {
    int rank = 1 + (int)(seed % 4);
    int64_t sd[4], dd[4], blk[4], so[4], dof[4];
    frand(&seed);
    for (int i = 0; i < rank; i++) {
      frand(&seed);
      sd[i] = 1 + seed % 5;
      frand(&seed);
      dd[i] = 1 + seed % 5;
      int64_t lim = sd[i] < dd[i] ? sd[i] : dd[i];
      frand(&seed);
      blk[i] = 1 + (int64_t)(seed % (unsigned)lim);
      frand(&seed);
      so[i] = (int64_t)(seed % (unsigned)(sd[i] - blk[i] + 1));
      frand(&seed);
      dof[i] = (int64_t)(seed % (unsigned)(dd[i] - blk[i] + 1));
    }
    int64_t ns = 1, ndd = 1;
    for (int i = 0; i < rank; i++) ns *= sd[i], ndd *= dd[i];
    float *src = kdc_xcalloc((size_t)ns, 4), *d0 = kdc_xcalloc((size_t)ndd, 4),
          *d1 = kdc_xcalloc((size_t)ndd, 4);
    for (int64_t i = 0; i < ns; i++) src[i] = (float)i;
    rt_box b;
    rt_box_init(&b, rank, 4, blk, sd, so, dd, dof);
    rt_box_copy(&b, d0, src, 0, b.rows);
    apply_ctx x = {(char *)d1, (const char *)src};
    int64_t n = rt_cuda_box_2d(&b, apply2d, &x);
    assert_true(n >= 1);
    assert_memory_equal(d0, d1, (size_t)ndd * 4);
    free(src), free(d0), free(d1);
  }
}

/* ---- collectives ------------------------------------------------------------------- */

/* The device groups of |c| (devices.c's, rebuilt here from rt_mesh). */
static void groups(const kdc_prog_mesh *m, const kdc_prog_coll_step *c, rt_coll_groups *g) {
  int64_t nd = m->n_devices, k = c->group_size;
  memset(g, 0, sizeof *g);
  g->k = k;
  g->members = kdc_xcalloc((size_t)nd, 8), g->sorted = kdc_xcalloc((size_t)nd, 8);
  g->group_of = kdc_xcalloc((size_t)nd, 8), g->index_of = kdc_xcalloc((size_t)nd, 8);
  g->peer = kdc_xcalloc((size_t)nd, 8);
  for (int64_t d = 0; d < nd; d++) g->group_of[d] = -1;
  for (int64_t d = 0; d < nd; d++) {
    if (g->group_of[d] >= 0) continue;
    int64_t *mem = g->members + g->n_groups * k;
    rt_mesh_group_members(m, d, (int)c->naxes, c->axes, mem);
    for (int64_t j = 0; j < k; j++) g->group_of[mem[j]] = g->n_groups, g->index_of[mem[j]] = j;
    memcpy(g->sorted + g->n_groups * k, mem, (size_t)k * 8);
    for (int64_t i = 1; i < k; i++) /* insertion sort by device id */
      for (int64_t j = i; j > 0 && g->sorted[g->n_groups * k + j - 1] > g->sorted[g->n_groups * k + j]; j--) {
        int64_t t = g->sorted[g->n_groups * k + j];
        g->sorted[g->n_groups * k + j] = g->sorted[g->n_groups * k + j - 1];
        g->sorted[g->n_groups * k + j - 1] = t;
      }
    g->n_groups++;
  }
  for (int64_t d = 0; d < nd; d++) {
    int64_t co[KDC_PROG_MAX_AXES], a = c->axes[0];
    g->peer[d] = -1;
    if (c->kind != KDC_COLL_PERMUTE) continue;
    rt_mesh_coords(m, d, co);
    if (c->shift > co[a] || co[a] - c->shift >= m->sizes[a]) continue;
    co[a] -= c->shift;
    g->peer[d] = rt_mesh_device(m, co);
  }
}

static void free_groups(rt_coll_groups *g) {
  free(g->members), free(g->sorted), free(g->group_of), free(g->index_of), free(g->peer);
}

typedef struct sim {
  int64_t nd;
  char **src, **dst, **scr;
  rt_coll_plan *plan;
  const rt_cuda_split *split;
  size_t es;
} sim;

static char *buf_of(const sim *s, int64_t d, uint8_t which) {
  return which == RT_CB_SRC ? s->src[d] : which == RT_CB_DST ? s->dst[d] : s->scr[d];
}

static void copies(const sim *s, int64_t d, const rt_cop *ops, int n) {
  for (int i = 0; i < n; i++) {
    const rt_cop *o = &ops[i];
    if (o->kind == RT_COP_ZERO) {
      memset(buf_of(s, d, o->dbuf) + o->doff, 0, o->count);
      continue;
    }
    apply_ctx x = {buf_of(s, d, o->dbuf) + o->doff, buf_of(s, d, o->sbuf) + o->soff};
    rt_cuda_box_2d(&o->box, apply2d, &x);
  }
}

/* The member of |d|'s communicator with rank |r| (world: device r). */
static int64_t member(const sim *s, int64_t d, int64_t r, bool world) {
  if (world) return r;
  for (int64_t e = 0; e < s->nd; e++)
    if (s->split->color[e] == s->split->color[d] && s->split->key[e] == r) return e;
  fail_msg("no rank %lld", (long long)r);
  return -1;
}

/* NCCL's documented semantics on flat buffers (f32). */
static void nccl_sim(const sim *s, int64_t d) {
  const rt_coll_plan *p = &s->plan[d];
  int64_t k = s->split->k;
  for (int i = 0; i < p->n_nccl; i++) {
    const rt_cop *o = &p->nccl[i];
    float *out = (float *)(buf_of(s, d, o->dbuf) + o->doff);
    switch (o->kind) {
    case RT_COP_ALL_REDUCE:
    case RT_COP_REDUCE_SCATTER: {
      uint64_t at = o->kind == RT_COP_REDUCE_SCATTER ? (uint64_t)s->split->key[d] * o->count : 0;
      for (uint64_t e = 0; e < o->count; e++) {
        float acc = 0;
        for (int64_t r = 0; r < k; r++) {
          int64_t m = member(s, d, r, false);
          acc += ((const float *)(buf_of(s, m, o->sbuf) + s->plan[m].nccl[i].soff))[at + e];
        }
        out[e] = acc;
      }
      break;
    }
    case RT_COP_ALL_GATHER:
      for (int64_t r = 0; r < k; r++) {
        int64_t m = member(s, d, r, false);
        memcpy(out + (uint64_t)r * o->count, buf_of(s, m, o->sbuf) + s->plan[m].nccl[i].soff,
               o->count * s->es);
      }
      break;
    case RT_COP_RECV: { /* the matching send of the peer */
      int64_t m = member(s, d, o->peer, o->world), me = o->world ? d : s->split->key[d];
      const rt_cop *snd = NULL;
      for (int j = 0; j < s->plan[m].n_nccl; j++)
        if (s->plan[m].nccl[j].kind == RT_COP_SEND && s->plan[m].nccl[j].peer == me)
          snd = &s->plan[m].nccl[j];
      assert_non_null(snd);
      assert_int_equal(snd->count, o->count);
      memcpy(out, buf_of(s, m, snd->sbuf) + snd->soff, o->count * s->es);
      break;
    }
    default: break;
    }
  }
}

static void check_coll(const kdc_prog_mesh *m, kdc_prog_coll_step *c) {
  int64_t nd = m->n_devices;
  c->group_size = rt_mesh_axes_size(m, (int)c->naxes, c->axes);
  int64_t in_n = 1, out_n = 1;
  for (int i = 0; i < c->rank; i++) in_n *= c->in_dims[i], out_n *= c->out_dims[i];
  c->src.bytes = (uint64_t)in_n * 4, c->dst.bytes = (uint64_t)out_n * 4;
  rt_coll_groups g;
  groups(m, c, &g);
  kdc_prog_step st = {.kind = KDC_STEP_COLLECTIVE, .coll = *c};
  kdc_prog_func fn = {.name = "f", .n_steps = 1, .steps = &st};
  kdc_program prog;
  memset(&prog, 0, sizeof prog);
  prog.mesh = *m, prog.n_funcs = 1, prog.funcs = &fn;
  rt_cuda_comms comms;
  rt_cuda_comms_plan(&prog, &comms);
  kdc_arena *a = kdc_arena_create();
  sim s = {nd, kdc_xcalloc((size_t)nd, 8), kdc_xcalloc((size_t)nd, 8), kdc_xcalloc((size_t)nd, 8),
           kdc_xcalloc((size_t)nd, sizeof(rt_coll_plan)), &comms.splits[0], 4};
  void **ref = kdc_xcalloc((size_t)nd, 8);
  for (int64_t d = 0; d < nd; d++) {
    assert_null(rt_cuda_coll_plan(c, &g, d, a, "t", &s.plan[d]));
    s.src[d] = kdc_xcalloc((size_t)in_n, 4);
    s.dst[d] = kdc_xcalloc((size_t)out_n, 4);
    ref[d] = kdc_xcalloc((size_t)out_n, 4);
    s.scr[d] = kdc_xcalloc(s.plan[d].scratch_bytes + 1, 1);
    for (int64_t i = 0; i < in_n; i++) ((float *)s.src[d])[i] = (float)(d * 1000 + i);
    memset(s.dst[d], 0x7f, (size_t)out_n * 4); /* every byte must be written */
  }
  rt_coll_call call = {c, &g, 1, "f", 0};
  rt_pool *pool = NULL;
  assert_null(rt_pool_create(1, &pool));
  rt_coll_shm_run(pool, &call, (const void *const *)s.src, ref);
  rt_pool_destroy(pool);
  for (int64_t d = 0; d < nd; d++) copies(&s, d, s.plan[d].pre, s.plan[d].n_pre);
  for (int64_t d = 0; d < nd; d++) nccl_sim(&s, d);
  for (int64_t d = 0; d < nd; d++) copies(&s, d, s.plan[d].post, s.plan[d].n_post);
  for (int64_t d = 0; d < nd; d++)
    if (memcmp(s.dst[d], ref[d], (size_t)out_n * 4))
      fail_msg("%s axes %u dim %lld dim2 %lld shift %lld: device %lld differs",
               kdc_prog_coll_name(c->kind), c->naxes, (long long)c->dim, (long long)c->dim2,
               (long long)c->shift, (long long)d);
  for (int64_t d = 0; d < nd; d++) free(s.src[d]), free(s.dst[d]), free(s.scr[d]), free(ref[d]);
  free(s.src), free(s.dst), free(s.scr), free(s.plan), free(ref);
  rt_cuda_comms_free(&comms, &prog);
  kdc_arena_destroy(a);
  free_groups(&g);
}

static void test_collective_plans(void **state) {
  (void)state;
  static const int64_t shapes[][3] = {{2, 4, 0}, {2, 2, 2}};
  static const int ranks[] = {2, 3};
  int cases = 0;
  for (int mi = 0; mi < 2; mi++) {
    kdc_prog_mesh pm;
    kdc_mesh im;
    make_mesh(ranks[mi], shapes[mi], &pm, &im);
    uint8_t ax[16][3];
    int len[16], n = axes_choices(ranks[mi], ax, len);
    for (int a = 0; a < n; a++) {
      int64_t k = rt_mesh_axes_size(&pm, len[a], ax[a]);
      for (int kind = KDC_COLL_ALL_REDUCE; kind < KDC_COLL_KIND_END; kind++)
        for (int dim = 0; dim < 3; dim++)
          for (int dim2 = 0; dim2 < (kind == KDC_COLL_ALL_TO_ALL ? 3 : 1); dim2++) {
            if (kind == KDC_COLL_PERMUTE && (len[a] != 1 || dim > 0)) continue;
            if (kind == KDC_COLL_ALL_REDUCE && dim > 0) continue;
            kdc_prog_coll_step c;
            memset(&c, 0, sizeof c);
            c.kind = (kdc_prog_coll_kind)kind;
            c.dtype = KDC_IO_DTYPE_F32;
            c.naxes = (uint32_t)len[a];
            memcpy(c.axes, ax[a], 3);
            c.rank = 3;
            int64_t base[3] = {2 * k, 3, 2 * k};
            memcpy(c.in_dims, base, sizeof base);
            memcpy(c.out_dims, base, sizeof base);
            c.dim = dim, c.dim2 = dim2, c.shift = 1;
            if (kind == KDC_COLL_ALL_GATHER) c.out_dims[dim] *= k;
            if (kind == KDC_COLL_REDUCE_SCATTER) {
              c.in_dims[1] = 3 * k;
              c.out_dims[1] = 3 * k;
              c.out_dims[dim] /= k;
            }
            if (kind == KDC_COLL_ALL_TO_ALL) {
              c.in_dims[1] = 3 * k, c.out_dims[1] = 3 * k;
              c.out_dims[dim] /= k;
              c.out_dims[dim2] *= k;
            }
            check_coll(&pm, &c);
            cases++;
          }
    }
  }
  printf("%d collective plans equal the in-process collectives\n", cases);
  assert_true(cases > 100);
  /* NCCL sums numbers: a bool all_reduce is refused, naming the step */
  kdc_prog_mesh pm;
  kdc_mesh im;
  make_mesh(2, shapes[0], &pm, &im);
  kdc_prog_coll_step c;
  memset(&c, 0, sizeof c);
  c.kind = KDC_COLL_ALL_REDUCE, c.dtype = KDC_IO_DTYPE_BOOL, c.naxes = 1, c.rank = 1;
  c.in_dims[0] = c.out_dims[0] = 4, c.group_size = 2;
  rt_coll_groups g;
  groups(&pm, &c, &g);
  kdc_arena *a = kdc_arena_create();
  rt_coll_plan p;
  kdc_status st = rt_cuda_coll_plan(&c, &g, 0, a, "p.bin: predict step 9", &p);
  assert_non_null(st);
  assert_int_equal(kdc_status_code(st), KDC_UNSUPPORTED);
  assert_non_null(strstr(kdc_status_message(st), "p.bin: predict step 9: all_reduce over bool"));
  kdc_status_free(st);
  kdc_arena_destroy(a);
  free_groups(&g);
}

static void test_library_symbols(void **state) {
  (void)state;
#ifdef KDC_HAVE_CUDA
  const char *const lib[3] = {KDC_CUDA_LIBDIR "/stubs/libcuda.so", KDC_CUDA_LIBDIR "/libcublas.so.13",
                              KDC_CUDA_LIBDIR "/libnccl.so.2"};
  for (int i = 0; i < 3; i++)
    if (!e2e_exists(lib[i])) {
      printf("skipped: %s is not installed\n", lib[i]);
      skip();
    }
  kdc_status st = rt_cuda_api_resolve(lib[0], lib[1], lib[2]);
  if (st) fail_msg("%s", kdc_status_message(st));
  st = rt_cuda_api_resolve(lib[2], lib[1], lib[2]); /* NCCL is not a driver */
  assert_non_null(st);
  assert_non_null(strstr(kdc_status_message(st), "symbol cuInit not found"));
  kdc_status_free(st);
  /* the stub as the driver: it loads, every symbol resolves, cuInit fails */
  char *dir = e2e_path("stubdrv"), link[1100];
  char *model = e2e_src("examples/mnist_mlp/model.json"), *plan = e2e_path("stub.plan");
  char *x = e2e_src("examples/mnist_mlp/input.npy"), *y = e2e_path("stub_y.npy");
  e2e_result r;
  e2e_kdc(&r, "compile", model, "-o", plan, "--target", "cuda", "--batch", "8", NULL);
  assert_int_equal(r.status, 0);
  assert_int_equal(mkdir(dir, 0755), 0);
  snprintf(link, sizeof link, "%s/libcuda.so.1", dir);
  assert_int_equal(symlink(lib[0], link), 0);
  setenv("LD_LIBRARY_PATH", dir, 1);
  e2e_kdc(&r, "run", plan, "--input", x, "--output", y, NULL);
  unsetenv("LD_LIBRARY_PATH");
  printf("with the stub driver: %s", r.err);
  assert_int_equal(r.status, 3);
  assert_non_null(strstr(r.err, "no CUDA device: cuInit failed:"));
  assert_null(strstr(r.err, "cannot be loaded")); /* it was loaded */
  assert_false(e2e_exists(y));
  free(dir), free(model), free(plan), free(x), free(y);
#else
  printf("skipped: this kdc was built without CUDA\n");
  skip();
#endif
}

/* ---- the GPUs the driver sees (cuda/gpus.c) on fakes of its answers --------------- */

typedef struct fake_drv {
  int count, count_rc, fail_ordinal, fail_rc;
} fake_drv;

static int fd_count(void *u, int *n) {
  *n = ((fake_drv *)u)->count;
  return ((fake_drv *)u)->count_rc;
}
static int fd_name(void *u, int i, char *buf, int len) {
  fake_drv *f = u;
  if (i == f->fail_ordinal) return f->fail_rc;
  snprintf(buf, (size_t)len, "Fake GPU %d", i);
  return 0;
}
static int fd_cap(void *u, int i, int *major, int *minor) {
  (void)u;
  *major = 8 + i, *minor = i;
  return 0;
}
static int fd_mem(void *u, int i, uint64_t *bytes) {
  (void)u;
  *bytes = (uint64_t)(i + 1) << 30;
  return 0;
}
static const char *fd_error(void *u, int rc) {
  (void)u;
  return rc == 100 ? "no CUDA-capable device is detected" : rc == 999 ? "unknown error" : NULL;
}

static void fake_list(fake_drv *f, const char *unavailable, kdc_rt_gpus *g) {
  kdc_rt_gpu_driver d = {f, unavailable, fd_count, fd_name, fd_cap, fd_mem, fd_error};
  kdc_rt_gpus_list(&d, g);
}

static void test_gpu_list(void **state) {
  (void)state;
  kdc_rt_gpus g;
  fake_drv f = {3, 0, -1, 0};
  fake_list(&f, NULL, &g);
  assert_int_equal(g.n, 3);
  assert_int_equal(g.driver_count, 3);
  assert_string_equal(g.why, "");
  for (int i = 0; i < 3; i++) {
    char name[32];
    snprintf(name, sizeof name, "Fake GPU %d", i);
    assert_int_equal(g.gpu[i].ordinal, i);
    assert_string_equal(g.gpu[i].name, name);
    assert_int_equal(g.gpu[i].cc_major, 8 + i);
    assert_int_equal(g.gpu[i].cc_minor, i);
    assert_int_equal(g.gpu[i].memory_bytes, (uint64_t)(i + 1) << 30);
  }
  f = (fake_drv){0, 100, -1, 0};  /* cuDeviceGetCount fails */
  fake_list(&f, NULL, &g);
  assert_int_equal(g.n, 0);
  assert_string_equal(g.why, "cuDeviceGetCount failed: no CUDA-capable device is detected (error 100)");
  f = (fake_drv){2, 0, 1, 999};  /* the second GPU's name fails: no half list */
  fake_list(&f, NULL, &g);
  assert_int_equal(g.n, 0);
  assert_string_equal(g.why, "cuDeviceGetName failed: unknown error (error 999)");
  f = (fake_drv){0, 0, -1, 0};
  fake_list(&f, NULL, &g);
  assert_int_equal(g.n, 0);
  assert_string_equal(g.why, "the CUDA driver loaded and reports 0 GPUs");
  fake_list(&f, "the CUDA driver (libcuda.so.1) cannot be loaded: nope", &g);
  assert_int_equal(g.n, 0);
  assert_int_equal(g.driver_count, -1);
  assert_string_equal(g.why, "the CUDA driver (libcuda.so.1) cannot be loaded: nope");
}

/* Which GPUs a process's devices use (kdc_rt_gpu_ordinals, cuda/exec.c). */
static void test_gpu_ordinals(void **state) {
  (void)state;
  int ord[8];
  /* the rule: local rank x k + i */
  assert_null(kdc_rt_gpu_ordinals("p", 1, NULL, 0, NULL, 1, 2, 4, ord));
  assert_int_equal(ord[0], 2);
  assert_int_equal(ord[1], 3);
  /* one device per process (Slurm's default): GPU = local rank */
  assert_null(kdc_rt_gpu_ordinals("p", 5, NULL, 0, NULL, 3, 1, 8, ord));
  assert_int_equal(ord[0], 3);
  /* the rule's GPU does not exist, but the process sees exactly its one
   * GPU (CUDA_VISIBLE_DEVICES from --gpus-per-task): GPU 0 */
  assert_null(kdc_rt_gpu_ordinals("p", 5, NULL, 0, NULL, 3, 1, 1, ord));
  assert_int_equal(ord[0], 0);
  kdc_status st = kdc_rt_gpu_ordinals("p.plan", 5, NULL, 0, NULL, 3, 1, 2, ord);
  assert_non_null(st);
  assert_int_equal(kdc_status_code(st), KDC_UNAVAILABLE);
  assert_string_equal(kdc_status_message(st), "p.plan: no CUDA device: process 5 runs 1 devices "
                      "of the mesh on GPUs 3..3 (local rank 3), but the driver reports 2 GPU(s)");
  kdc_status_free(st);
  /* explicit ids: exactly one per device, each existing */
  assert_null(kdc_rt_gpu_ordinals("p", 0, (const int[]){3, 1}, 2, "--local-device-ids", 0, 2, 4, ord));
  assert_int_equal(ord[0], 3);
  assert_int_equal(ord[1], 1);
  st = kdc_rt_gpu_ordinals("p.plan", 0, (const int[]){0}, 1, "KDC_LOCAL_DEVICE_IDS", 0, 2, 4, ord);
  assert_non_null(st);
  assert_int_equal(kdc_status_code(st), KDC_INVALID_INPUT);
  assert_non_null(strstr(kdc_status_message(st), "runs 2 devices of the mesh but the local device "
                         "ids (KDC_LOCAL_DEVICE_IDS) name 1 GPU(s)"));
  kdc_status_free(st);
  st = kdc_rt_gpu_ordinals("p.plan", 0, (const int[]){0, 4}, 2, "--local-device-ids", 0, 2, 4, ord);
  assert_non_null(st);
  assert_non_null(strstr(kdc_status_message(st), "GPU 4 (local device ids, --local-device-ids) "
                         "does not exist: the driver reports 4 GPU(s)"));
  kdc_status_free(st);
}

/* `kdc devices` on this machine (its real answer, GPU or not) and with the
 * driver's answers faked (KDC_TEST_FAKE_GPUS) under a Slurm environment
 * set here. */
static void test_devices_cli(void **state) {
  (void)state;
  static const char *const vars[] = {"SLURM_JOB_ID", "SLURM_NTASKS", "SLURM_PROCID",
                                     "SLURM_LOCALID", "SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST",
                                     "KDC_LOCAL_DEVICE_IDS", "KDC_NUM_PROCESSES", "KDC_PROCESS_ID",
                                     "KDC_COORDINATOR_ADDRESS", "OMPI_COMM_WORLD_SIZE",
                                     "OMPI_COMM_WORLD_LOCAL_RANK", "PMI_SIZE", NULL};
  for (int i = 0; vars[i]; i++) unsetenv(vars[i]);
  e2e_result r;
  e2e_kdc(&r, "devices", NULL);
  assert_int_equal(r.status, 0);
  assert_non_null(strstr(r.out, "CPU: "));
  assert_non_null(strstr(r.out, "GPUs: "));  /* a list, or "none: <why>" */
  assert_non_null(strstr(r.out, "  processes         1                     (from default)"));
  printf("%s", r.out);
  e2e_kdc(&r, "devices", "--json", NULL);
  assert_int_equal(r.status, 0);
  json_object *j = json_tokener_parse(r.out);
  if (!j) fail_msg("not JSON: %s", r.out);
  json_object *cpu, *cores, *gpus, *why;
  assert_true(json_object_object_get_ex(j, "cpu", &cpu));
  assert_true(json_object_object_get_ex(cpu, "cores", &cores));
  assert_int_equal(json_object_get_int(cores), sysconf(_SC_NPROCESSORS_ONLN));
  assert_true(json_object_object_get_ex(j, "gpus", &gpus));
  assert_true(json_object_object_get_ex(j, "gpus_why_none", &why));
  /* no GPU here: the reason is given; a GPU: listed */
  assert_true(json_object_array_length(gpus) > 0 ? json_object_is_type(why, json_type_null)
                                                 : strlen(json_object_get_string(why)) > 10);
  json_object_put(j);

  /* Slurm, 2 GPUs answered by the fake driver, nothing given */
  setenv("KDC_TEST_FAKE_GPUS", "NVIDIA H100 80GB HBM3/9.0/81559;NVIDIA H100 80GB HBM3/9.0/81559", 1);
  setenv("SLURM_JOB_ID", "4242", 1);
  setenv("SLURM_NTASKS", "4", 1);
  setenv("SLURM_PROCID", "3", 1);
  setenv("SLURM_LOCALID", "1", 1);
  setenv("SLURM_STEP_NODELIST", "gpu[07-08]", 1);
  e2e_kdc(&r, "devices", "--json", NULL);
  assert_int_equal(r.status, 0);
  j = json_tokener_parse(r.out);
  if (!j) fail_msg("not JSON: %s", r.out);
  json_object *proc, *v, *x;
  assert_true(json_object_object_get_ex(j, "gpus", &gpus));
  assert_int_equal(json_object_array_length(gpus), 2);
  x = json_object_array_get_idx(gpus, 1);
  assert_true(json_object_object_get_ex(x, "ordinal", &v));
  assert_int_equal(json_object_get_int(v), 1);
  assert_true(json_object_object_get_ex(x, "name", &v));
  assert_string_equal(json_object_get_string(v), "NVIDIA H100 80GB HBM3");
  assert_true(json_object_object_get_ex(x, "compute_capability", &v));
  assert_string_equal(json_object_get_string(v), "9.0");
  assert_true(json_object_object_get_ex(x, "memory_bytes", &v));
  assert_int_equal(json_object_get_int64(v), (int64_t)81559 << 20);
  assert_true(json_object_object_get_ex(j, "process", &proc));
  assert_true(json_object_object_get_ex(proc, "coordinator", &x));
  assert_true(json_object_object_get_ex(x, "value", &v));
  char want[64];
  snprintf(want, sizeof want, "gpu07:%d", 4242 % 4096 + 61440);
  assert_string_equal(json_object_get_string(v), want);
  assert_true(json_object_object_get_ex(proc, "process_id", &x));
  assert_true(json_object_object_get_ex(x, "from", &v));
  assert_string_equal(json_object_get_string(v), "SLURM_PROCID");
  assert_true(json_object_object_get_ex(proc, "uses_gpus", &x));
  assert_int_equal(json_object_array_length(x), 1);  /* one device per process: SLURM_LOCALID */
  assert_int_equal(json_object_get_int(json_object_array_get_idx(x, 0)), 1);
  json_object_put(j);
  /* --local-device-ids overrides; a GPU that does not exist is said */
  e2e_kdc(&r, "devices", "--local-device-ids", "1,0", NULL);
  assert_int_equal(r.status, 0);
  assert_non_null(strstr(r.out, "  local device ids  1,0                   (from --local-device-ids)"));
  assert_non_null(strstr(r.out, "  uses GPUs         1,0\n"));
  setenv("KDC_LOCAL_DEVICE_IDS", "5", 1);
  e2e_kdc(&r, "devices", NULL);
  assert_int_equal(r.status, 0);
  assert_non_null(strstr(r.out, "GPU 5 (local device ids, KDC_LOCAL_DEVICE_IDS) does not exist"));
  unsetenv("KDC_LOCAL_DEVICE_IDS");
  /* one GPU visible to the task (--gpus-per-task), SLURM_LOCALID 1: GPU 0 */
  setenv("KDC_TEST_FAKE_GPUS", "NVIDIA A100-SXM4-40GB/8.0/40960", 1);
  e2e_kdc(&r, "devices", NULL);
  assert_non_null(strstr(r.out, "  uses GPUs         0  (one device per process"));
  /* the driver fails: why */
  setenv("KDC_TEST_FAKE_GPUS", "error:100", 1);
  e2e_kdc(&r, "devices", NULL);
  assert_int_equal(r.status, 0);
  assert_non_null(strstr(r.out, "GPUs: none: cuDeviceGetCount failed: no CUDA-capable device is detected (error 100)\n"));
  /* a malformed Slurm node list: exit 2, one line */
  setenv("SLURM_STEP_NODELIST", "gpu[07-", 1);
  e2e_kdc(&r, "devices", NULL);
  assert_int_equal(r.status, 2);
  assert_int_equal(e2e_lines(r.err), 1);
  assert_non_null(strstr(r.err, "kdc: error: SLURM_STEP_NODELIST=\"gpu[07-\": \"[\" without \"]\""));
  for (int i = 0; vars[i]; i++) unsetenv(vars[i]);
  unsetenv("KDC_TEST_FAKE_GPUS");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_launch_table),     cmocka_unit_test(test_launch_table_errors),
      cmocka_unit_test(test_gemm_mapping),     cmocka_unit_test(test_comm_splits),
      cmocka_unit_test(test_box_2d),           cmocka_unit_test(test_collective_plans),
      cmocka_unit_test(test_library_symbols),  cmocka_unit_test(test_gpu_list),
      cmocka_unit_test(test_gpu_ordinals),     cmocka_unit_test(test_devices_cli),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
