/*
 * The load-time rules of runtime/gather_inplace.c, on hand-made functions
 * (no code, nothing run): which collectives become candidates, of which
 * kind, and which of them "order nothing" (free: exec.c then runs the
 * devices through the step without a barrier, RT_SKIP_FREE).  Each case
 * is a precondition whose loss would race or change results:
 *   - a view (an all_to_all read where its operands are) of an INPUT is
 *     free; of an arena range a kernel writes before it, a candidate that
 *     still ends the segment (the writes must precede the peers' reads);
 *     with a step writing that operand AFTER it, none (a device running
 *     ahead would overwrite what a peer's GEMM still reads), also when that
 *     step is a LOOP, which may touch anything;
 *   - a view read by anything but a GEMM with the dense leading
 *     dimension: none;
 *   - an all_gather made in place (its operand computed straight into the
 *     shared output): free only because nothing else touches its output;
 *     with a later reader of the output, or of the operand, none;
 *   - a shared result (one buffer per group): never free; a kernel that
 *     reads it in place (its in-place mask) is no plain reader: none;
 *     a kernel that only overwrites it ends its readers.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "runtime/runtime.h"

enum { ND = 4, M = 4, C = 8, MAXS = 6 };

#define LOC(b, i, off, n) ((kdc_prog_loc){(uint8_t)(b), (i), (off), (n)})
#define ARENA(off, n) LOC(KDC_PROG_BUF_ARENA, 0, off, n)

/* A function under construction: steps, 2 inputs, 1 output. */
typedef struct fn {
  kdc_prog_func f;
  kdc_prog_step steps[MAXS];
  kdc_prog_tensor in[2], out[1];
  kdc_prog_loc args[MAXS][3];
} fn;

static void fn_init(fn *b, uint64_t out_bytes) {
  memset(b, 0, sizeof *b);
  b->f = (kdc_prog_func){.name = "f", .n_inputs = 2, .n_outputs = 1, .inputs = b->in,
                         .outputs = b->out, .steps = b->steps};
  b->in[0].local_bytes = b->in[1].local_bytes = 4 * M * C;
  b->out[0].local_bytes = out_bytes;
}

static kdc_prog_step *step(fn *b, kdc_prog_step_kind kind) {
  assert_true(b->f.n_steps < MAXS);
  kdc_prog_step *s = &b->steps[b->f.n_steps++];
  s->kind = kind;
  return s;
}

/* A kernel writing |out| (read in place when |in_place|), reading |in|
 * when its bytes are not 0. */
static void kernel(fn *b, kdc_prog_loc out, bool in_place, kdc_prog_loc in) {
  kdc_prog_step *s = step(b, KDC_STEP_KERNEL);
  kdc_prog_loc *a = b->args[b->f.n_steps - 1];
  a[0] = out, a[1] = in;
  s->kernel = (kdc_prog_kernel_step){.extent = 1, .n_args = in.bytes ? 2 : 1, .args = a,
                                     .n_out = 1, .in_place = in_place};
}

/* C [m, n] = op(A) B with A's leading dimension |lda|. */
static void gemm(fn *b, kdc_prog_loc a, bool trans_a, int64_t lda, kdc_prog_loc bb,
                 kdc_prog_loc c, int64_t m, int64_t n, int64_t k) {
  kdc_prog_step *s = step(b, KDC_STEP_GEMM);
  s->gemm = (kdc_prog_gemm_step){.batch = 1, .m = m, .n = n, .k = k, .trans_a = trans_a,
                                 .lda = lda, .ldb = n, .ldc = n, .a = a, .b = bb, .c = c};
}

/* all_to_all of [M, C] split over columns, concatenated over rows. */
static void all_to_all(fn *b, kdc_prog_loc src, kdc_prog_loc dst) {
  kdc_prog_step *s = step(b, KDC_STEP_COLLECTIVE);
  s->coll = (kdc_prog_coll_step){.kind = KDC_COLL_ALL_TO_ALL, .dtype = KDC_IO_DTYPE_F32,
                                 .rank = 2, .dim = 1, .dim2 = 0, .group_size = ND,
                                 .in_dims = {M, C}, .out_dims = {ND * M, C / ND},
                                 .src = src, .dst = dst};
}

static void collective(fn *b, kdc_prog_coll_kind kind, kdc_prog_loc src, kdc_prog_loc dst) {
  kdc_prog_step *s = step(b, KDC_STEP_COLLECTIVE);
  s->coll = (kdc_prog_coll_step){.kind = kind, .dtype = KDC_IO_DTYPE_F32, .rank = 2,
                                 .dim = 0, .group_size = ND, .in_dims = {M, C},
                                 .out_dims = {kind == KDC_COLL_ALL_GATHER ? ND * M : M, C},
                                 .src = src, .dst = dst};
}

/* The candidates of |b| on a plan of ND devices in one group. */
typedef struct found {
  size_t n;
  rt_inplace c[MAXS];
} found;

static found candidates(fn *b) {
  kdc_rt_plan p;
  memset(&p, 0, sizeof p);
  p.nd = ND, p.d0 = 0, p.d1 = ND;
  int64_t members[ND], group_of[ND] = {0}, index_of[ND];
  for (int64_t d = 0; d < ND; d++) members[d] = index_of[d] = d;
  rt_coll_groups g[MAXS];
  for (int s = 0; s < MAXS; s++)
    g[s] = (rt_coll_groups){.k = ND, .n_groups = 1, .members = members, .sorted = members,
                            .group_of = group_of, .index_of = index_of};
  rt_func rf;
  memset(&rf, 0, sizeof rf);
  rf.groups = g;
  rt_inplace_create(&p, &b->f, &rf);
  found r = {.n = rf.n_inplace};
  if (rf.n_inplace) memcpy(r.c, rf.inplace, rf.n_inplace * sizeof *rf.inplace);
  rt_inplace_destroy(&rf);
  return r;
}

static const uint64_t PIECE = 4 * M * C, COLS = 4 * ND * M * (C / ND);

/* x (input 0) -> all_to_all -> the dW GEMM reads it transposed as A. */
static void view_reader(fn *b, kdc_prog_loc x) {
  all_to_all(b, x, ARENA(1024, COLS));
  gemm(b, ARENA(1024, COLS), true, C / ND, LOC(KDC_PROG_BUF_INPUT, 1, 0, PIECE),
       ARENA(4096, 4 * (C / ND) * C), C / ND, C, ND * M);
}

static void test_views(void **s) {
  (void)s;
  fn b;
  fn_init(&b, 64);
  view_reader(&b, LOC(KDC_PROG_BUF_INPUT, 0, 0, PIECE));
  found r = candidates(&b);
  assert_int_equal(r.n, 1);
  assert_int_equal(r.c[0].kind, RT_INPLACE_VIEW);
  assert_true(r.c[0].free); /* an input: ready before the run */
  assert_int_equal(r.c[0].ld, C);
  assert_int_equal(r.c[0].last, 1);

  fn_init(&b, 64); /* an operand a kernel computes first: ordered by the step */
  kernel(&b, ARENA(0, PIECE), false, LOC(KDC_PROG_BUF_INPUT, 0, 0, PIECE));
  view_reader(&b, ARENA(0, PIECE));
  r = candidates(&b);
  assert_int_equal(r.n, 1);
  assert_int_equal(r.c[0].kind, RT_INPLACE_VIEW);
  assert_false(r.c[0].free);

  /* ... and overwritten after the reader: a device running ahead would
   * write it while a peer's GEMM reads it */
  kernel(&b, ARENA(0, PIECE), false, LOC(KDC_PROG_BUF_INPUT, 1, 0, PIECE));
  assert_int_equal(candidates(&b).n, 0);

  fn_init(&b, 64); /* a LOOP after it may write anything */
  view_reader(&b, LOC(KDC_PROG_BUF_INPUT, 0, 0, PIECE));
  step(&b, KDC_STEP_LOOP);
  assert_int_equal(candidates(&b).n, 0);

  fn_init(&b, 64); /* a LOOP before it: still a view, but not free */
  step(&b, KDC_STEP_LOOP);
  view_reader(&b, LOC(KDC_PROG_BUF_INPUT, 0, 0, PIECE));
  r = candidates(&b);
  assert_int_equal(r.n, 1);
  assert_false(r.c[0].free);

  fn_init(&b, 64); /* a kernel reading the result: no view */
  view_reader(&b, LOC(KDC_PROG_BUF_INPUT, 0, 0, PIECE));
  kernel(&b, ARENA(8192, 64), false, ARENA(1024, COLS));
  assert_int_equal(candidates(&b).n, 0);

  fn_init(&b, 64); /* a GEMM reading it with another leading dimension */
  all_to_all(&b, LOC(KDC_PROG_BUF_INPUT, 0, 0, PIECE), ARENA(1024, COLS));
  gemm(&b, ARENA(1024, COLS), true, C, LOC(KDC_PROG_BUF_INPUT, 1, 0, PIECE),
       ARENA(4096, 4 * (C / ND) * C), C / ND, C, ND * M);
  assert_int_equal(candidates(&b).n, 0);
}

/* The sharded update: dW GEMM -> update kernel (in place) -> all_gather
 * into output 0. */
static void update_gather(fn *b) {
  gemm(b, LOC(KDC_PROG_BUF_INPUT, 0, 0, PIECE), true, M, LOC(KDC_PROG_BUF_INPUT, 1, 0, PIECE),
       ARENA(0, PIECE), M, C, M);
  kernel(b, ARENA(0, PIECE), true, LOC(KDC_PROG_BUF_INPUT, 1, 0, PIECE));
  collective(b, KDC_COLL_ALL_GATHER, ARENA(0, PIECE), LOC(KDC_PROG_BUF_OUTPUT, 0, 0, ND * PIECE));
}

static void test_gathers(void **s) {
  (void)s;
  fn b;
  fn_init(&b, ND * PIECE);
  update_gather(&b);
  found r = candidates(&b);
  assert_int_equal(r.n, 1);
  assert_int_equal(r.c[0].kind, RT_INPLACE_GATHER);
  assert_true(r.c[0].free);
  assert_int_equal(r.c[0].first, 0); /* from the GEMM writing it afresh */
  assert_int_equal(r.c[0].last, 1);

  /* a step reading the output: a peer's piece might not be there yet */
  kernel(&b, ARENA(8192, 64), false, LOC(KDC_PROG_BUF_OUTPUT, 0, 0, ND * PIECE));
  assert_int_equal(candidates(&b).n, 0);

  fn_init(&b, ND * PIECE); /* a step reading the operand after the all_gather */
  update_gather(&b);
  kernel(&b, ARENA(8192, 64), false, ARENA(0, PIECE));
  assert_int_equal(candidates(&b).n, 0);

  fn_init(&b, ND * PIECE); /* a LOOP anywhere may touch the output */
  step(&b, KDC_STEP_LOOP);
  update_gather(&b);
  assert_int_equal(candidates(&b).n, 0);
}

static void test_shared(void **s) {
  (void)s;
  fn b;
  fn_init(&b, 64);
  collective(&b, KDC_COLL_ALL_REDUCE, ARENA(0, PIECE), ARENA(0, PIECE));
  gemm(&b, ARENA(0, PIECE), false, C, LOC(KDC_PROG_BUF_INPUT, 1, 0, PIECE), ARENA(1024, PIECE),
       M, C, C);
  found r = candidates(&b);
  assert_int_equal(r.n, 1);
  assert_int_equal(r.c[0].kind, RT_INPLACE_SHARED);
  assert_false(r.c[0].free); /* its readers run after every device arrived */

  /* a kernel updating it in place reads it as its output: not shared */
  kernel(&b, ARENA(0, PIECE), true, LOC(KDC_PROG_BUF_INPUT, 1, 0, PIECE));
  kernel(&b, ARENA(1024, PIECE), false, ARENA(0, PIECE));
  assert_int_equal(candidates(&b).n, 0);

  /* the same kernel only writing there ends the readers: what it wrote is
   * the device's own, read from the arena */
  b.steps[2].kernel.in_place = 0;
  r = candidates(&b);
  assert_int_equal(r.n, 1);
  assert_int_equal(r.c[0].last, 1);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_views),
      cmocka_unit_test(test_gathers),
      cmocka_unit_test(test_shared),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
