/*
 * ir/interp_window.c: the reference meaning of the windowed and indexed ops
 * (ops.def; shapes in ir/window.c).  Plain loops, f32 accumulation in a fixed
 * order that every backend reproduces (codegen/body_window.c does, bit for
 * bit):
 *
 *   convolution  out[n, o.., co] = 0.0f, then for every window position k
 *                (row-major over the kernel's spatial dims) whose input
 *                position p_d = o_d*stride_d - pad_low_d + k_d*rhs_dilation_d
 *                lands on an element of the lhs-dilated input (0 <= p_d <
 *                (S_d-1)*lhs_dilation_d + 1 and p_d % lhs_dilation_d == 0),
 *                for ci = 0..Ci/groups-1 in order:
 *                  acc += x[n, p/lhs_dilation.., g*(Ci/groups) + ci] * w[k.., ci, co]
 *                with g = co / (Co/groups).  Padding and dilation holes are
 *                skipped (they would add zeros).
 *   reduce_window  acc = identity (sum 0, max -inf, min +inf), then for every
 *                window position k (row-major) whose p_d = o_d*stride_d -
 *                pad_low_d + k_d*dilation_d is inside the operand:
 *                acc = acc op x[p].  Padding is the identity.
 *   select_and_scatter  result = 0; windows o in row-major order; in each,
 *                the selected position is the first in-bounds one, replaced
 *                by a later position p whenever !(x[sel] >= x[p]) (max; <= for
 *                min) -- XLA's select(ge) loop, so ties pick the first; then
 *                result[sel] += g[o].  A window with no in-bounds element
 *                adds nothing.  Every result element therefore sums its
 *                contributions in increasing window order from 0.0f.
 *   gather       out[i.., f..] = table[j, f..] with j = kdc_gather_index(
 *                ids[i..], V) (Keras 3 on JAX: jnp.take, mode "fill": ids in
 *                [-V, 0) wrap, others out of range give NaN, or the minimum
 *                integer for integer tables).
 *   scatter_add  out = 0; for the ids positions p in row-major order with
 *                j = kdc_gather_index(ids[p], V) >= 0: out[j, f..] +=
 *                updates[p, f..] (out-of-range rows are dropped, the exact
 *                transpose of gather: JAX's FILL_OR_DROP scatter).  Integers wrap.
 *   reverse      out[i] = x[i with i_d -> D_d - 1 - i_d on the listed dims].
 */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("fp-contract=off")
#elif defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ir/ir.h"

static void unravel(int64_t lin, int rank, const int64_t *dims, int64_t *idx) {
  for (int d = rank - 1; d >= 0; d--) {
    idx[d] = dims[d] ? lin % dims[d] : 0;
    lin = dims[d] ? lin / dims[d] : 0;
  }
}

static int64_t ravel(const int64_t *idx, const kdc_type *t) {
  int64_t lin = 0;
  for (int d = 0; d < t->rank; d++) lin = lin * t->dims[d] + idx[d];
  return lin;
}

static int64_t ld_int(const void *p, kdc_dtype d, int64_t i) {
  return d == KDC_DTYPE_I32 ? ((const int32_t *)p)[i] : ((const int64_t *)p)[i];
}

static float max_f(float a, float b) { /* ir/interp.c's NaN-propagating max */
  if (isnan(a)) return a;
  if (isnan(b)) return b;
  if (a == b) return signbit(a) ? b : a;
  return a > b ? a : b;
}

static float min_f(float a, float b) {
  if (isnan(a)) return a;
  if (isnan(b)) return b;
  if (a == b) return signbit(a) ? a : b;
  return a < b ? a : b;
}

static void run_conv(const kdc_func *f, const kdc_node *n, const float *x, const float *w,
                     float *out) {
  const kdc_attr_conv *a = &n->attr.conv;
  const kdc_type *xt = &f->nodes[n->in[0]].type, *wt = &f->nodes[n->in[1]].type;
  int ns = xt->rank - 2;
  int64_t cig = wt->dims[ns], co = wt->dims[ns + 1], cog = co / a->groups;
  int64_t kn = 1, oidx[KDC_MAX_RANK], k[KDC_MAX_RANK], xi[KDC_MAX_RANK], wi[KDC_MAX_RANK];
  for (int d = 0; d < ns; d++) kn *= wt->dims[d];
  int64_t numel = kdc_type_numel(&n->type);
  for (int64_t i = 0; i < numel; i++) {
    unravel(i, n->type.rank, n->type.dims, oidx);
    int64_t c = oidx[ns + 1], g = c / cog;
    float acc = 0.0f;
    for (int64_t kl = 0; kl < kn; kl++) {
      unravel(kl, ns, wt->dims, k);
      bool ok = true;
      xi[0] = oidx[0];
      for (int d = 0; d < ns && ok; d++) {
        int64_t ld = a->lhs_dilation.v[d];
        int64_t p = oidx[d + 1] * a->stride.v[d] - a->pad_low.v[d] + k[d] * a->rhs_dilation.v[d];
        ok = p >= 0 && p < (xt->dims[d + 1] - 1) * ld + 1 && p % ld == 0;
        xi[d + 1] = p / (ld ? ld : 1);
        wi[d] = k[d];
      }
      if (!ok) continue;
      /* channels are the last dim of x (stride 1) and w's input-channel
       * dim has stride co: the row's start, then steps */
      xi[ns + 1] = g * cig;
      wi[ns] = 0;
      wi[ns + 1] = c;
      const float *xr = x + ravel(xi, xt), *wr = w + ravel(wi, wt);
      for (int64_t ci = 0; ci < cig; ci++) acc += xr[ci] * wr[ci * co];
    }
    out[i] = acc;
  }
}

/* The input position of window position |k| of output |o|, or false when
 * it falls in the padding. */
static bool window_pos(const kdc_attr_window *a, const kdc_type *xt, const int64_t *o,
                       const int64_t *k, int64_t *p) {
  for (int d = 0; d < xt->rank; d++) {
    p[d] = o[d] * a->stride.v[d] - a->pad_low.v[d] + k[d] * a->dilation.v[d];
    if (p[d] < 0 || p[d] >= xt->dims[d]) return false;
  }
  return true;
}

static void run_reduce_window(const kdc_func *f, const kdc_node *n, const float *x, float *out) {
  const kdc_attr_window *a = &n->attr.window;
  const kdc_type *xt = &f->nodes[n->in[0]].type;
  int64_t kn = 1, o[KDC_MAX_RANK], k[KDC_MAX_RANK], p[KDC_MAX_RANK];
  for (int d = 0; d < xt->rank; d++) kn *= a->window.v[d];
  int64_t numel = kdc_type_numel(&n->type);
  for (int64_t i = 0; i < numel; i++) {
    unravel(i, n->type.rank, n->type.dims, o);
    float acc = a->kind == KDC_RED_SUM ? 0.0f : a->kind == KDC_RED_MAX ? -INFINITY : INFINITY;
    for (int64_t kl = 0; kl < kn; kl++) {
      unravel(kl, xt->rank, a->window.v, k);
      if (!window_pos(a, xt, o, k, p)) continue;
      float v = x[ravel(p, xt)];
      acc = a->kind == KDC_RED_SUM ? acc + v : a->kind == KDC_RED_MAX ? max_f(acc, v)
                                                                      : min_f(acc, v);
    }
    out[i] = acc;
  }
}

static void run_select_and_scatter(const kdc_func *f, const kdc_node *n, const float *x,
                                   const float *g, float *out) {
  const kdc_attr_window *a = &n->attr.window;
  const kdc_type *xt = &f->nodes[n->in[0]].type, *gt = &f->nodes[n->in[1]].type;
  int64_t kn = 1, o[KDC_MAX_RANK], k[KDC_MAX_RANK], p[KDC_MAX_RANK];
  for (int d = 0; d < xt->rank; d++) kn *= a->window.v[d];
  memset(out, 0, kdc_type_bytes(&n->type));
  int64_t nw = kdc_type_numel(gt);
  for (int64_t wi = 0; wi < nw; wi++) {
    unravel(wi, gt->rank, gt->dims, o);
    int64_t sel = -1;
    for (int64_t kl = 0; kl < kn; kl++) {
      unravel(kl, xt->rank, a->window.v, k);
      if (!window_pos(a, xt, o, k, p)) continue;
      int64_t q = ravel(p, xt);
      bool keep = sel >= 0 && (a->kind == KDC_RED_MAX ? x[sel] >= x[q] : x[sel] <= x[q]);
      if (!keep) sel = q;
    }
    if (sel >= 0) out[sel] += g[wi];
  }
}

static void run_gather(const kdc_func *f, const kdc_node *n, const void *table, const void *ids,
                       void *out) {
  const kdc_type *tt = &f->nodes[n->in[0]].type, *it = &f->nodes[n->in[1]].type;
  int64_t nid = kdc_type_numel(it), row = 1, V = tt->dims[0];
  for (int d = 1; d < tt->rank; d++) row *= tt->dims[d];
  size_t es = kdc_dtype_size(tt->dtype);
  for (int64_t i = 0; i < nid; i++) {
    int64_t j = kdc_gather_index(ld_int(ids, it->dtype, i), V);
    char *dst = (char *)out + (size_t)(i * row) * es;
    if (j >= 0) {
      memcpy(dst, (const char *)table + (size_t)(j * row) * es, (size_t)row * es);
      continue;
    }
    for (int64_t e = 0; e < row; e++) {
      if (tt->dtype == KDC_DTYPE_F32) ((float *)dst)[e] = NAN;
      else if (tt->dtype == KDC_DTYPE_I32) ((int32_t *)dst)[e] = INT32_MIN;
      else ((int64_t *)dst)[e] = INT64_MIN;
    }
  }
}

static void run_scatter_add(const kdc_func *f, const kdc_node *n, const void *ids,
                            const void *upd, void *out) {
  const kdc_type *it = &f->nodes[n->in[0]].type;
  kdc_dtype d = n->type.dtype;
  int64_t nid = kdc_type_numel(it), row = 1, V = n->type.dims[0];
  for (int k = 1; k < n->type.rank; k++) row *= n->type.dims[k];
  memset(out, 0, kdc_type_bytes(&n->type));
  for (int64_t i = 0; i < nid; i++) {
    int64_t j = kdc_gather_index(ld_int(ids, it->dtype, i), V);
    if (j < 0) continue;
    for (int64_t e = 0; e < row; e++) {
      int64_t o = j * row + e, u = i * row + e;
      if (d == KDC_DTYPE_F32) ((float *)out)[o] += ((const float *)upd)[u];
      else if (d == KDC_DTYPE_I32)
        ((int32_t *)out)[o] = (int32_t)((uint32_t)((int32_t *)out)[o] +
                                        (uint32_t)((const int32_t *)upd)[u]);
      else
        ((int64_t *)out)[o] = (int64_t)((uint64_t)((int64_t *)out)[o] +
                                        (uint64_t)((const int64_t *)upd)[u]);
    }
  }
}

static void run_reverse(const kdc_func *f, const kdc_node *n, const void *x, void *out) {
  const kdc_type *t = &n->type;
  int64_t idx[KDC_MAX_RANK], numel = kdc_type_numel(t);
  size_t es = kdc_dtype_size(t->dtype);
  (void)f;
  for (int64_t i = 0; i < numel; i++) {
    unravel(i, t->rank, t->dims, idx);
    for (int k = 0; k < n->attr.dims.n; k++) {
      int64_t d = n->attr.dims.v[k];
      idx[d] = t->dims[d] - 1 - idx[d];
    }
    memcpy((char *)out + (size_t)i * es, (const char *)x + (size_t)ravel(idx, t) * es, es);
  }
}

kdc_status kdc_ir_interp_window(const kdc_func *f, kdc_value_id v, void *const *vals, void *out) {
  const kdc_node *n = &f->nodes[v];
  const void *a = vals[n->in[0]], *b = n->n_in > 1 ? vals[n->in[1]] : NULL;
  switch (n->op) {
  case KDC_OP_CONVOLUTION: run_conv(f, n, a, b, out); return NULL;
  case KDC_OP_REDUCE_WINDOW: run_reduce_window(f, n, a, out); return NULL;
  case KDC_OP_SELECT_AND_SCATTER: run_select_and_scatter(f, n, a, b, out); return NULL;
  case KDC_OP_GATHER: run_gather(f, n, a, b, out); return NULL;
  case KDC_OP_SCATTER_ADD: run_scatter_add(f, n, a, b, out); return NULL;
  case KDC_OP_REVERSE: run_reverse(f, n, a, out); return NULL;
  default:
    return KDC_ERR(KDC_INTERNAL, "interpreter: %%%u = %s is not a windowed op", v,
                   kdc_op_name(n->op));
  }
}
