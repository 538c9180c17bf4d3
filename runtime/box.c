/*
 * runtime/box.c: copying a rectangular block between two row-major tensors
 * (the pieces of splits, gathers and collectives).
 *
 * rt_box_init reduces a block copy to |rows| contiguous runs of |run| bytes:
 * trailing dims that the block covers whole in both tensors merge into the
 * run (so a piece along dim 0 is one memcpy), the remaining leading dims are
 * iterated; leading dims of size 1 are dropped and neighbours that are laid
 * out contiguously in both tensors (a gather along the last dim: every dim
 * but the last) merge into one, which keeps the row order.  Rows can be
 * copied in any ranges, which is how a big copy is split over threads.
 * Short runs (a gather or split along an inner dim: 4 to 64 bytes) are
 * copied by loops of one fixed size over the innermost iterated dim, which
 * the compiler turns into plain loads and stores, instead of a memcpy call
 * and an odometer step per run.  Nothing is allocated.
 */
#include <string.h>

#include "runtime/runtime.h"

void rt_box_init(rt_box *b, int rank, size_t elem, const int64_t *block, const int64_t *src_dims,
                 const int64_t *src_off, const int64_t *dst_dims, const int64_t *dst_off) {
  int64_t ss[KDC_IO_MAX_RANK], ds[KDC_IO_MAX_RANK], s = (int64_t)elem, d = (int64_t)elem;
  for (int i = rank - 1; i >= 0; i--) {
    ss[i] = s, ds[i] = d;
    s *= src_dims[i], d *= dst_dims[i];
  }
  b->src_base = b->dst_base = 0;
  for (int i = 0; i < rank; i++) {
    b->src_base += src_off[i] * ss[i];
    b->dst_base += dst_off[i] * ds[i];
  }
  int t = rank - 1;
  int64_t run = rank ? block[t] : 1;
  while (t > 0 && block[t] == src_dims[t] && block[t] == dst_dims[t]) run *= block[--t];
  b->run = (size_t)run * elem;
  b->rows = 1;
  int n = 0;
  for (int i = 0; i < (rank ? t : 0); i++) {
    b->rows *= block[i];
    if (block[i] == 1) continue; /* contributes no stride */
    if (n && b->src_stride[n - 1] == block[i] * ss[i] && b->dst_stride[n - 1] == block[i] * ds[i]) {
      b->outer[n - 1] *= block[i]; /* contiguous after the previous one in both */
      b->src_stride[n - 1] = ss[i];
      b->dst_stride[n - 1] = ds[i];
      continue;
    }
    b->outer[n] = block[i];
    b->src_stride[n] = ss[i];
    b->dst_stride[n] = ds[i];
    n++;
  }
  b->nouter = n;
  if (run == 0) b->rows = 0;
}

void rt_box_row(const rt_box *b, int64_t r, int64_t *out_src, int64_t *out_dst) {
  int64_t so = b->src_base, dof = b->dst_base;
  for (int i = b->nouter - 1; i >= 0; i--) {
    int64_t c = r % b->outer[i];
    r /= b->outer[i];
    so += c * b->src_stride[i];
    dof += c * b->dst_stride[i];
  }
  *out_src = so, *out_dst = dof;
}

/* |n| runs of RUN bytes, |ss| / |ds| bytes apart (a fixed-size memcpy is a
 * load and a store). */
#define RUNS(RUN)                                                  \
  for (int64_t i = 0; i < n; i++) memcpy(d + i * ds, s + i * ss, RUN); \
  return;

static void copy_runs(char *restrict d, const char *restrict s, int64_t n, int64_t ds, int64_t ss,
                      size_t run) {
  switch (run) {
  case 4: RUNS(4)
  case 8: RUNS(8)
  case 12: RUNS(12)
  case 16: RUNS(16)
  case 24: RUNS(24)
  case 32: RUNS(32)
  case 48: RUNS(48)
  case 64: RUNS(64)
  default: RUNS(run)
  }
}
#undef RUNS

void rt_box_copy(const rt_box *b, void *dst, const void *src, int64_t r0, int64_t r1) {
  if (r0 >= r1) return;
  int64_t idx[KDC_IO_MAX_RANK], so, dof, r = r0;
  rt_box_row(b, r0, &so, &dof);
  for (int i = b->nouter - 1; i >= 0; i--) {
    idx[i] = r % b->outer[i];
    r /= b->outer[i];
  }
  int in = b->nouter - 1;
  for (r = r0; r < r1;) {
    if (in >= 0) { /* to the end of the innermost dim (or r1) in one loop */
      int64_t n = b->outer[in] - idx[in];
      if (n > r1 - r) n = r1 - r;
      copy_runs((char *)dst + dof, (const char *)src + so, n, b->dst_stride[in],
                b->src_stride[in], b->run);
      r += n;
      if (r >= r1) break;
      so += (n - 1) * b->src_stride[in]; /* at the last run copied: step from there */
      dof += (n - 1) * b->dst_stride[in];
      idx[in] += n - 1;
    } else {
      memcpy((char *)dst + dof, (const char *)src + so, b->run);
      r++;
    }
    for (int i = b->nouter - 1; i >= 0; i--) { /* odometer step */
      so += b->src_stride[i];
      dof += b->dst_stride[i];
      if (++idx[i] < b->outer[i]) break;
      so -= b->outer[i] * b->src_stride[i];
      dof -= b->outer[i] * b->dst_stride[i];
      idx[i] = 0;
    }
  }
}
