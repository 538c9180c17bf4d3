/*
 * runtime/box.c: copying a rectangular block between two row-major tensors
 * (the pieces of splits, gathers and collectives).
 *
 * rt_box_init reduces a block copy to |rows| contiguous runs of |run| bytes:
 * trailing dims that the block covers whole in both tensors merge into the
 * run (so a piece along dim 0 is one memcpy), the remaining leading dims are
 * iterated.  Rows can be copied in any ranges, which is how a big copy is
 * split over threads.  Nothing is allocated.
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
  b->nouter = rank ? t : 0;
  b->rows = 1;
  for (int i = 0; i < b->nouter; i++) {
    b->outer[i] = block[i];
    b->src_stride[i] = ss[i];
    b->dst_stride[i] = ds[i];
    b->rows *= block[i];
  }
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

void rt_box_copy(const rt_box *b, void *dst, const void *src, int64_t r0, int64_t r1) {
  if (r0 >= r1) return;
  int64_t idx[KDC_IO_MAX_RANK], so, dof, r = r0;
  rt_box_row(b, r0, &so, &dof);
  for (int i = b->nouter - 1; i >= 0; i--) {
    idx[i] = r % b->outer[i];
    r /= b->outer[i];
  }
  for (r = r0; r < r1; r++) {
    memcpy((char *)dst + dof, (const char *)src + so, b->run);
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
