/*
 * runtime/box.c (unit): rt_box_copy of random blocks (rank 1-5, element
 * sizes 1-8, dims 1-7, random offsets in both tensors) equals an element by
 * element copy computed from the indices alone, byte for byte over the
 * whole destination (bytes outside the block untouched), with the rows
 * copied in three random ranges (how the collectives split a copy over
 * threads); and the block of a gather along the last dim
 * ([1,15,15,64,4] pieces into [1,15,15,64,32], cnn_64's) is one iterated
 * dim of 14400 runs of 16 bytes.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "runtime/runtime.h"

static uint64_t rng = 88172645463325252ull;
static int64_t rnd(int64_t n) {
  rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
  return (int64_t)(rng % (uint64_t)n);
}

static int64_t numel(int rank, const int64_t *d) {
  int64_t n = 1;
  for (int i = 0; i < rank; i++) n *= d[i];
  return n;
}

/* Offset (elements) of index |ix| + |off| in a row-major tensor of |dims|. */
static int64_t at(int rank, const int64_t *dims, const int64_t *ix, const int64_t *off) {
  int64_t o = 0;
  for (int i = 0; i < rank; i++) o = o * dims[i] + ix[i] + off[i];
  return o;
}

static void one_case(void) {
  int rank = 1 + (int)rnd(5);
  size_t es = (size_t)1 << rnd(4);
  int64_t block[KDC_IO_MAX_RANK], sd[KDC_IO_MAX_RANK], dd[KDC_IO_MAX_RANK], so[KDC_IO_MAX_RANK],
      dof[KDC_IO_MAX_RANK];
  for (int i = 0; i < rank; i++) {
    block[i] = 1 + rnd(7);
    /* often whole in one or both tensors, so dims merge into the run or each other */
    sd[i] = block[i] + (rnd(3) ? 0 : rnd(4));
    dd[i] = block[i] + (rnd(3) ? 0 : rnd(4));
    so[i] = rnd(sd[i] - block[i] + 1);
    dof[i] = rnd(dd[i] - block[i] + 1);
  }
  size_t sn = (size_t)numel(rank, sd) * es, dn = (size_t)numel(rank, dd) * es;
  unsigned char *src = malloc(sn), *got = malloc(dn), *want = malloc(dn);
  for (size_t i = 0; i < sn; i++) src[i] = (unsigned char)rnd(256);
  for (size_t i = 0; i < dn; i++) got[i] = want[i] = (unsigned char)rnd(256);
  int64_t ix[KDC_IO_MAX_RANK] = {0}, n = numel(rank, block);
  for (int64_t e = 0; e < n; e++) {
    int64_t r = e;
    for (int i = rank - 1; i >= 0; i--) ix[i] = r % block[i], r /= block[i];
    memcpy(want + at(rank, dd, ix, dof) * (int64_t)es, src + at(rank, sd, ix, so) * (int64_t)es,
           es);
  }
  rt_box b;
  rt_box_init(&b, rank, es, block, sd, so, dd, dof);
  assert_int_equal(b.rows * (int64_t)b.run, n * (int64_t)es);
  int64_t c1 = rnd(b.rows + 1), c2 = c1 + rnd(b.rows - c1 + 1);
  rt_box_copy(&b, got, src, 0, c1);
  rt_box_copy(&b, got, src, c2, b.rows);
  rt_box_copy(&b, got, src, c1, c2);
  assert_memory_equal(got, want, dn);
  free(src), free(got), free(want);
}

static void test_random_boxes(void **s) {
  (void)s;
  for (int i = 0; i < 20000; i++) one_case();
}

static void test_last_dim_gather_merges(void **s) {
  (void)s;
  int64_t in[5] = {1, 15, 15, 64, 4}, out[5] = {1, 15, 15, 64, 32}, zero[5] = {0},
          dof[5] = {0, 0, 0, 0, 3 * 4};
  rt_box b;
  rt_box_init(&b, 5, 4, in, in, zero, out, dof);
  assert_int_equal(b.nouter, 1);
  assert_int_equal(b.outer[0], 15 * 15 * 64);
  assert_int_equal(b.rows, 15 * 15 * 64);
  assert_int_equal(b.run, 16);
  assert_int_equal(b.src_stride[0], 16);
  assert_int_equal(b.dst_stride[0], 128);
  assert_int_equal(b.dst_base, 48);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_random_boxes),
      cmocka_unit_test(test_last_dim_gather_merges),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
