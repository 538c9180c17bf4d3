/*
 * runtime/coll_shm.c: the data movement of the in-process collectives
 * (comm_shm.c), with exactly the semantics of ir/interp_spmd.c.
 *
 * Every device's operand |src[d]| and result |dst[d]| are visible to every
 * thread, so a collective is a set of independent block copies and sums run
 * as one pool job, each byte of every result written once:
 *   all_reduce       tasks = groups x element chunks; per chunk the group's
 *                    operands are summed in increasing device-id order into
 *                    an L1-sized accumulator ((x0 + x1) + x2 ..., f32 math,
 *                    wrapping integers: bit-identical to the interpreter
 *                    and on every member), then stored to every member;
 *   reduce_scatter   tasks = groups x members x row parts; member j's piece
 *                    j summed the same way;
 *   all_gather       tasks = devices x members x row parts; member j's
 *                    operand copied to offset j along |dim|;
 *   all_to_all       tasks = devices x members x row parts; piece <my group
 *                    index> of member j's operand along |dim| copied to
 *                    offset j along |dim2|;
 *                    both, when the runs are short (a gather along an inner
 *                    dim: at most SHORT_RUN bytes, 16 for cnn_64's depthwise
 *                    gradient), interleave the members instead: tasks =
 *                    devices x row parts, and per block of rows (about
 *                    BLOCK_BYTES of the result) every member's runs, so
 *                    each cache line of the result is filled by one task
 *                    while it is in L1, not revisited by k tasks (3x
 *                    faster on 8 members' 16-byte runs);
 *   collective_permute  tasks = devices x parts; a copy from the source
 *                    device, or zeros where the source is off the mesh.
 * A NULL |dst[d]| is a shared replica (comm.h): device d's result is an
 * earlier device's buffer, written once by that device's tasks; d's tasks
 * write nothing and the byte counts below count written results only.
 * Small collectives (< 256 KiB moved) run on the calling thread.  Nothing
 * is allocated: the accumulator is on the stack.
 */
#include <string.h>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "runtime/comm.h"

enum {
  ACC_BYTES = 8192,          /* accumulator block (stays in L1) */
  PART_BYTES = 64 << 10,     /* target bytes per task */
  SERIAL_BYTES = 256 << 10,  /* below this a collective runs on the calling thread */
  STREAM_BYTES = 16 << 20,   /* all_reduce results beyond this (all devices) bypass the cache */
  SHORT_RUN = 256,           /* gather / all_to_all runs up to this interleave the members */
  BLOCK_BYTES = 4096,        /* result bytes per interleaved block */
  MAX_INTERLEAVED = 64,      /* members an interleaved task holds boxes for */
};

typedef struct coll_job {
  const rt_coll_call *call;
  const void *const *src;
  void *const *dst;
  size_t es;
  int64_t chunk;     /* all_reduce: elements per task; permute: bytes per part */
  int64_t per_group; /* all_reduce: tasks per group */
  int64_t q;         /* box kinds: row parts per transfer */
  bool stream;       /* all_reduce: non-temporal stores of the results */
  bool interleave;   /* all_gather / all_to_all: a task copies every member's runs */
} coll_job;

/* Stores |n| bytes of |src| (64-byte aligned) at |dst|: non-temporal
 * stores when |stream| (results too big to stay in cache: no read for
 * ownership, half the write traffic) and |dst| is 16-byte aligned. */
static void store(void *dst, const void *src, int64_t n, bool stream) {
#if defined(__SSE2__)
  if (stream && ((uintptr_t)dst & 15) == 0) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
      _mm_stream_si128((__m128i *)((char *)dst + i),
                       _mm_load_si128((const __m128i *)((const char *)src + i)));
    memcpy((char *)dst + i, (const char *)src + i, (size_t)(n - i));
    return;
  }
#endif
  (void)stream;
  memcpy(dst, src, (size_t)n);
}

/* acc[0..n) += x[0..n) in the step's dtype (wrapping for integers), 16
 * bytes at a time with GCC vector types (SSE2 / NEON baseline: the build
 * never targets the host CPU); |acc| is 64-byte aligned, |x| any.  Each lane
 * is one element's own sum, so the order per element is unchanged. */
typedef float v4f __attribute__((vector_size(16)));
typedef uint32_t v4u __attribute__((vector_size(16)));
typedef uint64_t v2u __attribute__((vector_size(16)));

#define ADD_VEC(VT, ET)                                      \
  do {                                                       \
    ET *a = acc;                                             \
    int64_t i = 0, per = (int64_t)(16 / sizeof(ET));         \
    for (; i + per <= n; i += per) {                         \
      VT va, vx;                                             \
      memcpy(&va, a + i, 16);                                \
      memcpy(&vx, (const ET *)x + i, 16);                    \
      va += vx;                                              \
      memcpy(a + i, &va, 16);                                \
    }                                                        \
    for (; i < n; i++) a[i] += ((const ET *)x)[i];           \
  } while (0)

static void add_into(void *restrict acc, const void *restrict x, int64_t n, kdc_io_dtype dt) {
  if (dt == KDC_IO_DTYPE_F32) ADD_VEC(v4f, float);
  else if (dt == KDC_IO_DTYPE_I32) ADD_VEC(v4u, uint32_t);
  else ADD_VEC(v2u, uint64_t);
}
#undef ADD_VEC

/* out[m][o..o+bytes) = sum over |sorted| members of src[m][so..so+bytes),
 * for each of the |n_out| destinations (dst pointer + |dof|). */
static void sum_range(const coll_job *j, const int64_t *sorted, int64_t k, int64_t so,
                      void *const *outs, int64_t n_out, int64_t dof, int64_t bytes) {
  _Alignas(64) unsigned char acc[ACC_BYTES];
  kdc_io_dtype dt = j->call->step->dtype;
  for (int64_t o = 0; o < bytes; o += ACC_BYTES) {
    int64_t nb = bytes - o < ACC_BYTES ? bytes - o : ACC_BYTES;
    memcpy(acc, (const char *)j->src[sorted[0]] + so + o, (size_t)nb);
    for (int64_t m = 1; m < k; m++)
      add_into(acc, (const char *)j->src[sorted[m]] + so + o, nb / (int64_t)j->es, dt);
    for (int64_t m = 0; m < n_out; m++) store((char *)outs[m] + dof + o, acc, nb, j->stream);
  }
}

static void all_reduce_task(const coll_job *j, int64_t t) {
  const rt_coll_groups *g = j->call->groups;
  const kdc_prog_coll_step *c = j->call->step;
  int64_t grp = t / j->per_group, part = t % j->per_group, n = 1, k = g->k;
  for (int d = 0; d < c->rank; d++) n *= c->in_dims[d];
  int64_t b = part * j->chunk, e = b + j->chunk < n ? b + j->chunk : n;
  if (b >= e) return;
  void *outs[KDC_PROG_MAX_DEVICES > 64 ? 64 : KDC_PROG_MAX_DEVICES];
  const int64_t *mem = g->members + grp * k;
  for (int64_t m0 = 0; m0 < k; m0 += 64) { /* destinations in batches of 64 */
    int64_t nm = 0;
    for (int64_t m = m0; m < k && m < m0 + 64; m++)
      if (j->dst[mem[m]]) outs[nm++] = j->dst[mem[m]]; /* NULL: a shared replica */
    sum_range(j, g->sorted + grp * k, k, b * (int64_t)j->es, outs, nm, b * (int64_t)j->es,
              (e - b) * (int64_t)j->es);
  }
#if defined(__SSE2__)
  if (j->stream) _mm_sfence(); /* order the streamed stores before the task is done */
#endif
}

/* The block transfer of (device or group |who|, member |m|) as a box, and
 * the source and destination devices. */
static void transfer(const coll_job *j, int64_t who, int64_t m, rt_box *b, int64_t *out_src,
                     int64_t *out_dst) {
  const kdc_prog_coll_step *c = j->call->step;
  const rt_coll_groups *g = j->call->groups;
  int64_t k = g->k, zero[KDC_IO_MAX_RANK] = {0}, so[KDC_IO_MAX_RANK] = {0},
          dof[KDC_IO_MAX_RANK] = {0}, piece[KDC_IO_MAX_RANK];
  memcpy(piece, c->in_dims, sizeof piece);
  switch (c->kind) {
  case KDC_COLL_REDUCE_SCATTER: /* who = group; member m's piece m, to member m */
    so[c->dim] = m * c->out_dims[c->dim];
    rt_box_init(b, c->rank, j->es, c->out_dims, c->in_dims, so, c->out_dims, zero);
    *out_src = -1;
    *out_dst = g->members[who * k + m];
    return;
  case KDC_COLL_ALL_GATHER: /* who = device; member m's operand at offset m */
    dof[c->dim] = m * c->in_dims[c->dim];
    rt_box_init(b, c->rank, j->es, c->in_dims, c->in_dims, zero, c->out_dims, dof);
    break;
  default: /* ALL_TO_ALL: member m's piece <my index> along dim, at m along dim2 */
    piece[c->dim] = c->in_dims[c->dim] / k;
    so[c->dim] = g->index_of[who] * piece[c->dim];
    dof[c->dim2] = m * piece[c->dim2];
    rt_box_init(b, c->rank, j->es, piece, c->in_dims, so, c->out_dims, dof);
    break;
  }
  *out_src = g->members[g->group_of[who] * k + m];
  *out_dst = who;
}

static void box_task(const coll_job *j, int64_t t) {
  int64_t k = j->call->groups->k, who = t / (k * j->q), m = t / j->q % k, part = t % j->q;
  rt_box b;
  int64_t sdev, ddev;
  transfer(j, who, m, &b, &sdev, &ddev);
  if (!j->dst[ddev]) return; /* a shared replica: an earlier device writes it */
  int64_t r0 = b.rows * part / j->q, r1 = b.rows * (part + 1) / j->q;
  if (sdev >= 0) {
    rt_box_copy(&b, j->dst[ddev], j->src[sdev], r0, r1);
    return;
  }
  const int64_t *sorted = j->call->groups->sorted + who * k;
  void *out = j->dst[ddev];
  for (int64_t r = r0; r < r1; r++) {
    int64_t so, dof;
    rt_box_row(&b, r, &so, &dof);
    sum_range(j, sorted, k, so, &out, 1, dof, (int64_t)b.run);
  }
}

/* Interleaved (file comment): device |who|'s row part |part|, block by
 * block, every member's runs.  Every member's box has the same rows. */
static void interleaved_task(const coll_job *j, int64_t t) {
  int64_t k = j->call->groups->k, who = t / j->q, part = t % j->q, sdev[MAX_INTERLEAVED], ddev;
  rt_box b[MAX_INTERLEAVED];
  for (int64_t m = 0; m < k; m++) transfer(j, who, m, &b[m], &sdev[m], &ddev);
  if (!j->dst[ddev]) return; /* a shared replica: an earlier device writes it */
  int64_t r0 = b[0].rows * part / j->q, r1 = b[0].rows * (part + 1) / j->q;
  int64_t blk = BLOCK_BYTES / ((int64_t)b[0].run * k);
  if (blk < 1) blk = 1;
  for (int64_t r = r0; r < r1; r += blk) {
    int64_t e = r + blk < r1 ? r + blk : r1;
    for (int64_t m = 0; m < k; m++) rt_box_copy(&b[m], j->dst[ddev], j->src[sdev[m]], r, e);
  }
}

static void permute_task(const coll_job *j, int64_t t) {
  int64_t dev = t / j->q, part = t % j->q, peer = j->call->groups->peer[dev];
  int64_t bytes = (int64_t)j->call->step->dst.bytes;
  int64_t b = bytes * part / j->q, e = bytes * (part + 1) / j->q;
  if (!j->dst[dev]) return; /* a shared replica */
  char *out = (char *)j->dst[dev] + b;
  if (peer < 0) memset(out, 0, (size_t)(e - b));
  else memcpy(out, (const char *)j->src[peer] + b, (size_t)(e - b));
}

static void coll_task(void *ctx, int64_t t) {
  const coll_job *j = ctx;
  switch (j->call->step->kind) {
  case KDC_COLL_ALL_REDUCE: all_reduce_task(j, t); break;
  case KDC_COLL_PERMUTE: permute_task(j, t); break;
  default:
    if (j->interleave) interleaved_task(j, t);
    else box_task(j, t);
    break;
  }
}

static int64_t clamp(int64_t v, int64_t lo, int64_t hi) { return v < lo ? lo : v > hi ? hi : v; }

void rt_coll_shm_run(rt_pool *pool, const rt_coll_call *call, const void *const *src,
                     void *const *dst) {
  const kdc_prog_coll_step *c = call->step;
  const rt_coll_groups *g = call->groups;
  coll_job j = {call, src, dst, kdc_prog_dtype_size(c->dtype), 0, 1, 1, false, false};
  int64_t n_dev = g->n_groups * g->k, nd = n_dev, tasks, moved;
  for (int64_t d = 0; d < n_dev; d++) nd -= !dst[d]; /* results actually written */
  uint64_t in_bytes = c->src.bytes;
  switch (c->kind) {
  case KDC_COLL_ALL_REDUCE: {
    int64_t n = (int64_t)(in_bytes / j.es);
    j.chunk = PART_BYTES / (int64_t)j.es;
    while (g->n_groups * ((n + j.chunk - 1) / j.chunk) > RT_POOL_MAX_TASKS) j.chunk *= 2;
    j.per_group = n ? (n + j.chunk - 1) / j.chunk : 0;
    tasks = g->n_groups * j.per_group;
    moved = 2 * nd * (int64_t)in_bytes;
    j.stream = nd * (int64_t)in_bytes >= STREAM_BYTES;
    break;
  }
  case KDC_COLL_PERMUTE:
    j.q = clamp((int64_t)c->dst.bytes / PART_BYTES, 1, RT_POOL_MAX_TASKS / n_dev);
    tasks = n_dev * j.q;
    moved = 2 * nd * (int64_t)c->dst.bytes;
    break;
  default: {
    rt_box b;
    int64_t sd, dd, who_n = c->kind == KDC_COLL_REDUCE_SCATTER ? g->n_groups : n_dev;
    transfer(&j, 0, 0, &b, &sd, &dd);
    int64_t piece = b.rows * (int64_t)b.run, most = RT_POOL_MAX_TASKS / (who_n * g->k);
    j.interleave = c->kind != KDC_COLL_REDUCE_SCATTER && b.run <= SHORT_RUN && g->k > 1 &&
                   g->k <= MAX_INTERLEAVED && b.rows > 1;
    if (j.interleave) {
      most = RT_POOL_MAX_TASKS / who_n;
      j.q = clamp(piece * g->k / PART_BYTES, 1, clamp(b.rows, 1, most > 1 ? most : 1));
      tasks = who_n * j.q;
    } else {
      j.q = clamp(piece / PART_BYTES, 1, clamp(b.rows, 1, most > 1 ? most : 1));
      tasks = who_n * g->k * j.q;
    }
    moved = 2 * nd * (int64_t)(c->dst.bytes > in_bytes ? c->dst.bytes : in_bytes);
    break;
  }
  }
  if (moved < SERIAL_BYTES || tasks > RT_POOL_MAX_TASKS || tasks <= 1) {
    for (int64_t t = 0; t < tasks; t++) coll_task(&j, t);
  } else {
    rt_pool_run(pool, coll_task, &j, tasks);
  }
}
