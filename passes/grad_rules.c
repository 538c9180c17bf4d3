/*
 * passes/grad_rules.c: one vector-Jacobian product rule per op (STYLE.md 3,
 * tinygrad's pm_gradient), used by passes/autodiff.c.
 *
 * The table |rules| is written in ops.def order; the static_asserts below
 * check, at compile time, that it has exactly one row per op and that every
 * row sits at its op's index, so adding an op to ops.def without deciding its
 * gradient breaks the build here.
 *
 * A rule gets the forward node |n| (a copy), its value |v| and the cotangent
 * |g| of v, and calls kdc_grad_accum(c, operand, contribution) for each
 * operand that kdc_grad_wants.  Conventions, chosen to follow JAX where the
 * math leaves a choice (docs/training.md lists them):
 *   - max/min: the gradient goes to the selected operand; on a tie it is
 *     split 1/2-1/2 (jax.lax.max), except that a constant operand wins the tie,
 *     so relu = max(x, 0) and relu6 have gradient 0 at the kinks exactly like
 *     jax.nn.relu / relu6 (their custom JVPs) and TF.
 *   - reduce max/min: every position equal to the result shares the gradient
 *     equally (JAX's _reduce_chooser_jvp_rule: mask / count).
 *   - reduce prod: g * prod / x (undefined where x == 0, as documented).
 *   - pow: d/da = b * a^(b-1) (0 where b == 0), d/db = y * log(a) (0 at a == 0).
 *   - sign, floor, ceil, round, compare, and integer/bool ops: no gradient.
 *   - dot_general: both gradients are dot_generals whose result is already in
 *     the operand's dim order when the forward op is a plain matmul (dx =
 *     g . W^T contracting N, dW = x^T . g contracting the batch dims), so
 *     weights are never transposed; a transpose is emitted only when no
 *     operand order of the backward dot gives the operand's layout.
 */
#include <assert.h>
#include <math.h>
#include <string.h>

#include "passes/passes.h"

/* ---- helpers -------------------------------------------------------------- */

static kdc_value_id splat_like(kdc_func *f, kdc_value_id x, double s) {
  const kdc_type *t = kdc_ir_type(f, x);
  return kdc_ir_splat(f, t->dtype, t->rank, t->dims, s);
}

static kdc_value_id mul(kdc_func *f, kdc_value_id a, kdc_value_id b) {
  return kdc_ir_binary(f, KDC_OP_MUL, a, b);
}

static kdc_value_id mul_s(kdc_func *f, kdc_value_id a, double s) {
  return kdc_ir_binary_scalar(f, KDC_OP_MUL, a, s);
}

static kdc_value_id sum_all(kdc_func *f, kdc_value_id x) {
  int64_t dims[KDC_MAX_RANK];
  int r = kdc_ir_type(f, x)->rank;
  for (int i = 0; i < r; i++) dims[i] = i;
  return kdc_ir_reduce(f, KDC_RED_SUM, x, r, dims);
}

/* Operand |i| of |n|, when it wants a gradient. */
static bool want(kdc_grad_ctx *c, const kdc_node *n, int i) {
  return kdc_grad_wants(c, n->in[i]);
}

static void acc(kdc_grad_ctx *c, const kdc_node *n, int i, kdc_value_id g) {
  kdc_grad_accum(c, n->in[i], g);
}

/* ---- elementwise ---------------------------------------------------------- */

static void vjp_neg(kdc_grad_ctx *c, const kdc_node *n, kdc_value_id v, kdc_value_id g) {
  acc(c, n, 0, kdc_ir_unary(kdc_grad_func(c), KDC_OP_NEG, g));
}

static void vjp_abs(kdc_grad_ctx *c, const kdc_node *n, kdc_value_id v, kdc_value_id g) {
  kdc_func *f = kdc_grad_func(c);
  acc(c, n, 0, mul(f, g, kdc_ir_unary(f, KDC_OP_SIGN, n->in[0])));
}

/* g * y: exp */
static void vjp_exp(kdc_grad_ctx *c, const kdc_node *n, kdc_value_id v, kdc_value_id g) {
  acc(c, n, 0, mul(kdc_grad_func(c), g, v));
}

static void vjp_log(kdc_grad_ctx *c, const kdc_node *n, kdc_value_id v, kdc_value_id g) {
  acc(c, n, 0, kdc_ir_binary(kdc_grad_func(c), KDC_OP_DIV, g, n->in[0]));
}

static void vjp_log1p(kdc_grad_ctx *c, const kdc_node *n, kdc_value_id v, kdc_value_id g) {
  kdc_func *f = kdc_grad_func(c);
  kdc_value_id d = kdc_ir_binary_scalar(f, KDC_OP_ADD, n->in[0], 1.0);
  acc(c, n, 0, kdc_ir_binary(f, KDC_OP_DIV, g, d));
}

static void vjp_expm1(kdc_grad_ctx *c, const kdc_node *n, kdc_value_id v, kdc_value_id g) {
  kdc_func *f = kdc_grad_func(c);
  acc(c, n, 0, mul(f, g, kdc_ir_binary_scalar(f, KDC_OP_ADD, v, 1.0)));
}

/* g * (1 - y^2) */
static void vjp_tanh(kdc_grad_ctx *c, const kdc_node *n, kdc_value_id v, kdc_value_id g) {
  kdc_func *f = kdc_grad_func(c);
  kdc_value_id d = kdc_ir_binary(f, KDC_OP_SUB, splat_like(f, v, 1.0), mul(f, v, v));
  acc(c, n, 0, mul(f, g, d));
}

/* g * y * (1 - y) */
static void vjp_logistic(kdc_grad_ctx *c, const kdc_node *n, kdc_value_id v, kdc_value_id g) {
  kdc_func *f = kdc_grad_func(c);
  kdc_value_id d = mul(f, v, kdc_ir_binary(f, KDC_OP_SUB, splat_like(f, v, 1.0), v));
  acc(c, n, 0, mul(f, g, d));
}

/* g / (2 y) */
static void vjp_sqrt(kdc_grad_ctx *c, const kdc_node *n, kdc_value_id v, kdc_value_id g) {
  kdc_func *f = kdc_grad_func(c);
  acc(c, n, 0, kdc_ir_binary(f, KDC_OP_DIV, g, mul_s(f, v, 2.0)));
}

/* d x^-1/2 = -1/2 x^-3/2 = -0.5 y / x */
static void vjp_rsqrt(kdc_grad_ctx *c, const kdc_node *n, kdc_value_id v, kdc_value_id g) {
  kdc_func *f = kdc_grad_func(c);
  kdc_value_id d = kdc_ir_binary(f, KDC_OP_DIV, mul_s(f, v, -0.5), n->in[0]);
  acc(c, n, 0, mul(f, g, d));
}

/* g * 2/sqrt(pi) * exp(-x^2) */
static void vjp_erf(kdc_grad_ctx *c, const kdc_node *n, kdc_value_id v, kdc_value_id g) {
  kdc_func *f = kdc_grad_func(c);
  kdc_value_id x = n->in[0];
  kdc_value_id e = kdc_ir_unary(f, KDC_OP_EXP, kdc_ir_unary(f, KDC_OP_NEG, mul(f, x, x)));
  acc(c, n, 0, mul(f, g, mul_s(f, e, 2.0 / sqrt(M_PI))));
}

/* Between float types (f32, bf16, f16) the cotangent is converted back to
 * the operand's type (JAX's convert_element_type rule: an f32 variable's
 * gradient is f32); conversions to or from integers carry none. */
static void vjp_convert(kdc_grad_ctx *c, const kdc_node *n, kdc_value_id v, kdc_value_id g) {
  kdc_func *f = kdc_grad_func(c);
  kdc_dtype from = kdc_ir_type(f, n->in[0])->dtype;
  if (kdc_dtype_is_float(from) && kdc_dtype_is_float(n->type.dtype))
    acc(c, n, 0, from == n->type.dtype ? g : kdc_ir_convert(f, g, from));
}

static void vjp_add(kdc_grad_ctx *c, const kdc_node *n, kdc_value_id v, kdc_value_id g) {
  acc(c, n, 0, g);
  acc(c, n, 1, g);
}

static void vjp_sub(kdc_grad_ctx *c, const kdc_node *n, kdc_value_id v, kdc_value_id g) {
  acc(c, n, 0, g);
  if (want(c, n, 1)) acc(c, n, 1, kdc_ir_unary(kdc_grad_func(c), KDC_OP_NEG, g));
}

static void vjp_mul(kdc_grad_ctx *c, const kdc_node *n, kdc_value_id v, kdc_value_id g) {
  kdc_func *f = kdc_grad_func(c);
  if (want(c, n, 0)) acc(c, n, 0, mul(f, g, n->in[1]));
  if (want(c, n, 1)) acc(c, n, 1, mul(f, n->in[0], g));
}

/* a / b: g / b and -(g / b) * y */
static void vjp_div(kdc_grad_ctx *c, const kdc_node *n, kdc_value_id v, kdc_value_id g) {
  kdc_func *f = kdc_grad_func(c);
  kdc_value_id ga = kdc_ir_binary(f, KDC_OP_DIV, g, n->in[1]);
  if (want(c, n, 0)) acc(c, n, 0, ga);
  if (want(c, n, 1)) acc(c, n, 1, kdc_ir_unary(f, KDC_OP_NEG, mul(f, ga, v)));
}

/* The share of operand |i| of max/min: g where it is strictly selected, a
 * fraction |tie| of g where both are equal. */
static kdc_value_id chooser_share(kdc_func *f, kdc_value_id mine, kdc_value_id other,
                                  kdc_cmp strict, double tie, kdc_value_id g) {
  kdc_value_id zero = splat_like(f, g, 0.0);
  kdc_value_id sel = kdc_ir_compare(f, strict, mine, other);
  kdc_value_id rest = zero;
  if (tie != 0.0)
    rest = kdc_ir_select(f, kdc_ir_compare(f, KDC_CMP_EQ, mine, other), mul_s(f, g, tie), zero);
  return kdc_ir_select(f, sel, g, rest);
}

static void vjp_maxmin(kdc_grad_ctx *c, const kdc_node *n, kdc_value_id v, kdc_value_id g) {
  kdc_func *f = kdc_grad_func(c);
  kdc_cmp strict = n->op == KDC_OP_MAX ? KDC_CMP_GT : KDC_CMP_LT;
  bool ca = kdc_grad_is_constant(c, n->in[0]), cb = kdc_grad_is_constant(c, n->in[1]);
  for (int i = 0; i < 2; i++) {
    if (!want(c, n, i)) continue;
    bool other_const = i == 0 ? cb : ca;
    double tie = other_const ? 0.0 : 0.5;
    acc(c, n, i, chooser_share(f, n->in[i], n->in[1 - i], strict, tie, g));
  }
}

/* a^b: b * a^(b-1) (0 where b == 0) and y * log(a) (log(1) where a == 0). */
static void vjp_pow(kdc_grad_ctx *c, const kdc_node *n, kdc_value_id v, kdc_value_id g) {
  kdc_func *f = kdc_grad_func(c);
  kdc_value_id a = n->in[0], b = n->in[1], zero = splat_like(f, a, 0.0);
  if (want(c, n, 0)) {
    kdc_value_id p = kdc_ir_binary(f, KDC_OP_POW, a, kdc_ir_binary_scalar(f, KDC_OP_SUB, b, 1.0));
    kdc_value_id d = kdc_ir_select(f, kdc_ir_compare(f, KDC_CMP_EQ, b, zero), zero, mul(f, b, p));
    acc(c, n, 0, mul(f, g, d));
  }
  if (want(c, n, 1)) {
    kdc_value_id safe =
        kdc_ir_select(f, kdc_ir_compare(f, KDC_CMP_EQ, a, zero), splat_like(f, a, 1.0), a);
    acc(c, n, 1, mul(f, g, mul(f, v, kdc_ir_unary(f, KDC_OP_LOG, safe))));
  }
}

static void vjp_select(kdc_grad_ctx *c, const kdc_node *n, kdc_value_id v, kdc_value_id g) {
  kdc_func *f = kdc_grad_func(c);
  kdc_value_id zero = splat_like(f, g, 0.0);
  if (want(c, n, 1)) acc(c, n, 1, kdc_ir_select(f, n->in[0], g, zero));
  if (want(c, n, 2)) acc(c, n, 2, kdc_ir_select(f, n->in[0], zero, g));
}

/* ---- data movement -------------------------------------------------------- */

/* broadcast_in_dim: sum over the new dims and the stretched size-1 dims. */
static void vjp_broadcast(kdc_grad_ctx *c, const kdc_node *n, kdc_value_id v, kdc_value_id g) {
  kdc_func *f = kdc_grad_func(c);
  const kdc_type *xt = kdc_ir_type(f, n->in[0]);
  kdc_type xcopy = *xt;
  bool kept[KDC_MAX_RANK] = {0};
  for (int k = 0; k < xcopy.rank; k++)
    if (xcopy.dims[k] == n->type.dims[n->attr.dims.v[k]]) kept[n->attr.dims.v[k]] = true;
  int64_t red[KDC_MAX_RANK];
  int nr = 0;
  for (int d = 0; d < n->type.rank; d++)
    if (!kept[d]) red[nr++] = d;
  kdc_value_id s = nr ? kdc_ir_reduce(f, KDC_RED_SUM, g, nr, red) : g;
  acc(c, n, 0, kdc_ir_reshape(f, s, xcopy.rank, xcopy.dims));
}

static void vjp_reshape(kdc_grad_ctx *c, const kdc_node *n, kdc_value_id v, kdc_value_id g) {
  kdc_func *f = kdc_grad_func(c);
  kdc_type xt = *kdc_ir_type(f, n->in[0]);
  acc(c, n, 0, kdc_ir_reshape(f, g, xt.rank, xt.dims));
}

static void vjp_transpose(kdc_grad_ctx *c, const kdc_node *n, kdc_value_id v, kdc_value_id g) {
  int64_t inv[KDC_MAX_RANK];
  for (int i = 0; i < n->attr.dims.n; i++) inv[n->attr.dims.v[i]] = i;
  acc(c, n, 0, kdc_ir_transpose(kdc_grad_func(c), g, inv));
}

/* slice -> pad with zeros (interior = stride - 1); -0.0 for f32, the
 * additive identity, so the pads of a value's slices sum exactly into one
 * pad of their concatenate (kdc_grad_accum). */
static void vjp_slice(kdc_grad_ctx *c, const kdc_node *n, kdc_value_id v, kdc_value_id g) {
  kdc_func *f = kdc_grad_func(c);
  const kdc_attr_slice *s = &n->attr.slice;
  kdc_type xt = *kdc_ir_type(f, n->in[0]);
  int64_t lo[KDC_MAX_RANK], hi[KDC_MAX_RANK], in[KDC_MAX_RANK];
  for (int d = 0; d < xt.rank; d++) {
    int64_t k = n->type.dims[d];
    lo[d] = s->start.v[d];
    in[d] = s->stride.v[d] - 1;
    int64_t last = s->start.v[d] + (k - 1) * s->stride.v[d]; /* last element taken */
    hi[d] = k > 0 ? xt.dims[d] - (last + 1) : xt.dims[d] - lo[d];
  }
  kdc_dtype dt = kdc_ir_type(f, g)->dtype;
  acc(c, n, 0, kdc_ir_pad(f, g, kdc_ir_scalar(f, dt, dt == KDC_DTYPE_F32 ? -0.0 : 0.0), lo, hi, in));
}

/* pad -> (pad the cropped edges back with zeros, then) a strided slice; the
 * padding value gets the sum of the cotangent over the padded positions. */
static void vjp_pad(kdc_grad_ctx *c, const kdc_node *n, kdc_value_id v, kdc_value_id g) {
  kdc_func *f = kdc_grad_func(c);
  const kdc_attr_pad *p = &n->attr.pad;
  kdc_type xt = *kdc_ir_type(f, n->in[0]);
  int64_t lo[KDC_MAX_RANK], hi[KDC_MAX_RANK], st[KDC_MAX_RANK], lim[KDC_MAX_RANK];
  bool crop = false;
  for (int d = 0; d < xt.rank; d++) {
    lo[d] = p->low.v[d] < 0 ? -p->low.v[d] : 0;
    hi[d] = p->high.v[d] < 0 ? -p->high.v[d] : 0;
    crop = crop || lo[d] || hi[d];
  }
  kdc_value_id gg = crop ? kdc_ir_pad(f, g, kdc_ir_scalar(f, kdc_ir_type(f, g)->dtype, 0.0), lo, hi, NULL) : g;
  for (int d = 0; d < xt.rank; d++) {
    st[d] = p->interior.v[d] + 1;
    lo[d] = p->low.v[d] > 0 ? p->low.v[d] : 0; /* slice start */
    lim[d] = xt.dims[d] > 0 ? lo[d] + (xt.dims[d] - 1) * st[d] + 1 : lo[d];
  }
  kdc_value_id gx = kdc_ir_slice(f, gg, lo, lim, st);
  if (want(c, n, 0)) acc(c, n, 0, gx);
  if (want(c, n, 1))
    acc(c, n, 1, kdc_ir_binary(f, KDC_OP_SUB, sum_all(f, g), sum_all(f, gx)));
}

static void vjp_concat(kdc_grad_ctx *c, const kdc_node *n, kdc_value_id v, kdc_value_id g) {
  kdc_func *f = kdc_grad_func(c);
  int64_t dim = n->attr.dim, off = 0, start[KDC_MAX_RANK], lim[KDC_MAX_RANK];
  for (int k = 0; k < n->n_in; k++) {
    kdc_type xt = *kdc_ir_type(f, n->in[k]);
    if (want(c, n, k)) {
      for (int d = 0; d < xt.rank; d++) {
        start[d] = d == dim ? off : 0;
        lim[d] = d == dim ? off + xt.dims[d] : xt.dims[d];
      }
      acc(c, n, k, kdc_ir_slice(f, g, start, lim, NULL));
    }
    off += xt.dims[dim];
  }
}

/* ---- reductions and contractions -------------------------------------------- */

static void vjp_reduce(kdc_grad_ctx *c, const kdc_node *n, kdc_value_id v, kdc_value_id g) {
  kdc_func *f = kdc_grad_func(c);
  kdc_value_id x = n->in[0];
  kdc_type xt = *kdc_ir_type(f, x);
  int64_t map[KDC_MAX_RANK];
  bool red[KDC_MAX_RANK] = {0};
  for (int i = 0; i < n->attr.reduce.dims.n; i++) red[n->attr.reduce.dims.v[i]] = true;
  int k = 0;
  for (int d = 0; d < xt.rank; d++)
    if (!red[d]) map[k++] = d;
  kdc_reduce_kind kind = n->attr.reduce.kind;
  if (kind == KDC_RED_SUM) {
    acc(c, n, 0, kdc_ir_broadcast(f, g, xt.rank, xt.dims, map));
  } else if (kind == KDC_RED_PROD) {
    kdc_value_id gy = kdc_ir_broadcast(f, mul(f, g, v), xt.rank, xt.dims, map);
    acc(c, n, 0, kdc_ir_binary(f, KDC_OP_DIV, gy, x));
  } else { /* max, min: the tied positions share g equally (JAX) */
    kdc_value_id yb = kdc_ir_broadcast(f, v, xt.rank, xt.dims, map);
    kdc_value_id mask = kdc_ir_convert(f, kdc_ir_compare(f, KDC_CMP_EQ, x, yb), xt.dtype);
    kdc_value_id cnt = kdc_ir_reduce(f, KDC_RED_SUM, mask, n->attr.reduce.dims.n,
                                     n->attr.reduce.dims.v);
    kdc_value_id share = kdc_ir_binary(f, KDC_OP_DIV, g, cnt);
    acc(c, n, 0, mul(f, kdc_ir_broadcast(f, share, xt.rank, xt.dims, map), mask));
  }
}

static bool in_list(const kdc_dimlist *l, int64_t d) {
  for (int i = 0; i < l->n; i++)
    if (l->v[i] == d) return true;
  return false;
}

/*
 * The cotangent of operand |x| (side 0 = lhs, 1 = rhs) of dot_general |n|,
 * with |y| the other operand.  g's dims are [batch, lhs free, rhs free].
 * dx contracts g's y-free dims with y's free dims, batches g's batch dims
 * with y's batch dims.  Written as dot(g, y) its dims come out as
 * [x batch, x free, x contract (in y's order)]; as dot(y, g) as
 * [x batch, x contract (in y's order), x free].  The form whose dims are
 * already x's order is used; otherwise dot(g, y) plus a transpose.
 */
kdc_value_id kdc_grad_dot_operand(kdc_func *f, const kdc_node *n, int side, kdc_value_id g) {
  const kdc_attr_dot *a = &n->attr.dot;
  const kdc_dimlist *xb = side ? &a->rhs_batch : &a->lhs_batch;
  const kdc_dimlist *xc = side ? &a->rhs_contract : &a->lhs_contract;
  const kdc_dimlist *yb = side ? &a->lhs_batch : &a->rhs_batch;
  const kdc_dimlist *yc = side ? &a->lhs_contract : &a->rhs_contract;
  kdc_value_id x = n->in[side], y = n->in[1 - side];
  kdc_type xt = *kdc_ir_type(f, x), yt = *kdc_ir_type(f, y);
  int nb = a->lhs_batch.n;
  /* Positions in g of x's free dims and of y's free dims. */
  int n_lfree = kdc_ir_type(f, n->in[0])->rank - nb - a->lhs_contract.n;
  int n_yfree = yt.rank - nb - yc->n, yfree0 = side ? nb : nb + n_lfree;
  kdc_attr_dot d;
  memset(&d, 0, sizeof d);
  kdc_dimlist gb = {nb, {0}}, gc = {n_yfree, {0}}, yfree = {0, {0}}, ybl = *yb;
  for (int i = 0; i < nb; i++) gb.v[i] = i;
  for (int i = 0; i < n_yfree; i++) gc.v[i] = yfree0 + i;
  for (int i = 0; i < yt.rank; i++)
    if (!in_list(yb, i) && !in_list(yc, i)) yfree.v[yfree.n++] = i;
  /* x's dims in the order dot(g, y) produces them. */
  int64_t order_gy[KDC_MAX_RANK], order_yg[KDC_MAX_RANK];
  int k = 0;
  for (int i = 0; i < nb; i++) order_gy[k++] = xb->v[i];
  for (int i = 0; i < xt.rank; i++)
    if (!in_list(xb, i) && !in_list(xc, i)) order_gy[k++] = i;
  int64_t contract_by_y[KDC_MAX_RANK]; /* x contract dims, sorted by the y dim they pair with */
  int nc = 0;
  for (int j = 0; j < yt.rank; j++)
    for (int i = 0; i < yc->n; i++)
      if (yc->v[i] == j) contract_by_y[nc++] = xc->v[i];
  for (int i = 0; i < nc; i++) order_gy[k++] = contract_by_y[i];
  k = 0;
  for (int i = 0; i < nb; i++) order_yg[k++] = xb->v[i];
  for (int i = 0; i < nc; i++) order_yg[k++] = contract_by_y[i];
  for (int i = 0; i < xt.rank; i++)
    if (!in_list(xb, i) && !in_list(xc, i)) order_yg[k++] = i;
  bool id_gy = true, id_yg = true;
  for (int i = 0; i < xt.rank; i++) {
    id_gy = id_gy && order_gy[i] == i;
    id_yg = id_yg && order_yg[i] == i;
  }
  kdc_value_id r;
  if (id_yg && !id_gy) { /* dot(y, g): e.g. dW = x^T g */
    d.lhs_batch = ybl;
    d.rhs_batch = gb;
    d.lhs_contract = yfree;
    d.rhs_contract = gc;
    return kdc_ir_dot(f, y, g, &d);
  }
  d.lhs_batch = gb;
  d.rhs_batch = ybl;
  d.lhs_contract = gc;
  d.rhs_contract = yfree;
  r = kdc_ir_dot(f, g, y, &d);
  if (id_gy) return r;
  int64_t perm[KDC_MAX_RANK]; /* result dim i = operand dim perm[i] */
  for (int i = 0; i < xt.rank; i++) perm[order_gy[i]] = i;
  return kdc_ir_transpose(f, r, perm);
}

static void vjp_dot(kdc_grad_ctx *c, const kdc_node *n, kdc_value_id v, kdc_value_id g) {
  kdc_func *f = kdc_grad_func(c);
  for (int side = 0; side < 2; side++)
    if (want(c, n, side)) acc(c, n, side, kdc_grad_dot_operand(f, n, side, g));
}

/* ---- SPMD ops ------------------------------------------------------------------ */

/* The cotangent keeps the constraint (JAX transposes sharding_constraint to
 * itself), so autodiff does not lose a user's sharding. */
static void vjp_sharding_constraint(kdc_grad_ctx *c, const kdc_node *n, kdc_value_id v,
                                    kdc_value_id g) {
  kdc_func *f = kdc_grad_func(c);
  kdc_value_id r = kdc_ir_append(f, KDC_OP_SHARDING_CONSTRAINT, kdc_ir_type(f, g), 1, &g, &n->attr);
  f->nodes[r].sharding = n->sharding;
  acc(c, n, 0, r);
}

/* ---- the table --------------------------------------------------------------- */

#define LEAF(e) {KDC_GRAD_LEAF, NULL, "leaf"}
#define ZERO(e, why) {KDC_GRAD_ZERO, NULL, why}
#define RULE(e, fn, why) {KDC_GRAD_RULE, fn, why}
#define NONE(e, why) {KDC_GRAD_UNSUPPORTED, NULL, why}
#define SPMD "SPMD ops appear only after partitioning; autodiff runs before it"

/* The rows, in ops.def order; G(ENUM, row).  Checked below. */
#define GRAD_TABLE(G)                                                                  \
  G(PARAMETER, LEAF(PARAMETER))                                                        \
  G(CONSTANT, LEAF(CONSTANT))                                                          \
  G(IOTA, LEAF(IOTA))                                                                  \
  G(NEG, RULE(NEG, vjp_neg, "-g"))                                                     \
  G(ABS, RULE(ABS, vjp_abs, "g sign(x)"))                                              \
  G(EXP, RULE(EXP, vjp_exp, "g y"))                                                    \
  G(LOG, RULE(LOG, vjp_log, "g / x"))                                                  \
  G(LOG1P, RULE(LOG1P, vjp_log1p, "g / (1 + x)"))                                      \
  G(EXPM1, RULE(EXPM1, vjp_expm1, "g (y + 1)"))                                        \
  G(TANH, RULE(TANH, vjp_tanh, "g (1 - y^2)"))                                         \
  G(LOGISTIC, RULE(LOGISTIC, vjp_logistic, "g y (1 - y)"))                             \
  G(SQRT, RULE(SQRT, vjp_sqrt, "g / 2y"))                                              \
  G(RSQRT, RULE(RSQRT, vjp_rsqrt, "g (-y / 2x)"))                                      \
  G(ERF, RULE(ERF, vjp_erf, "g 2/sqrt(pi) exp(-x^2)"))                                 \
  G(SIGN, ZERO(SIGN, "piecewise constant"))                                            \
  G(FLOOR, ZERO(FLOOR, "piecewise constant"))                                          \
  G(CEIL, ZERO(CEIL, "piecewise constant"))                                            \
  G(ROUND, ZERO(ROUND, "piecewise constant"))                                          \
  G(NOT, ZERO(NOT, "bool/integer"))                                                    \
  G(CONVERT, RULE(CONVERT, vjp_convert, "converted back between floats, else none"))             \
  G(STOP_GRADIENT, ZERO(STOP_GRADIENT, "jax.lax.stop_gradient"))                      \
  G(ADD, RULE(ADD, vjp_add, "g, g"))                                                   \
  G(SUB, RULE(SUB, vjp_sub, "g, -g"))                                                  \
  G(MUL, RULE(MUL, vjp_mul, "g b, a g"))                                               \
  G(DIV, RULE(DIV, vjp_div, "g / b, -(g / b) y"))                                      \
  G(MAX, RULE(MAX, vjp_maxmin, "to the selected operand; ties 1/2 each, a constant wins")) \
  G(MIN, RULE(MIN, vjp_maxmin, "to the selected operand; ties 1/2 each, a constant wins")) \
  G(POW, RULE(POW, vjp_pow, "g b a^(b-1), g y log a"))                                 \
  G(AND, ZERO(AND, "bool/integer"))                                                    \
  G(OR, ZERO(OR, "bool/integer"))                                                      \
  G(COMPARE, ZERO(COMPARE, "bool result"))                                             \
  G(SELECT, RULE(SELECT, vjp_select, "select(p, g, 0), select(p, 0, g)"))              \
  G(BROADCAST, RULE(BROADCAST, vjp_broadcast, "reduce sum over the broadcast dims"))   \
  G(RESHAPE, RULE(RESHAPE, vjp_reshape, "reshape back"))                               \
  G(TRANSPOSE, RULE(TRANSPOSE, vjp_transpose, "inverse permutation"))                  \
  G(SLICE, RULE(SLICE, vjp_slice, "pad with zeros"))                                   \
  G(CONCAT, RULE(CONCAT, vjp_concat, "slices"))                                        \
  G(PAD, RULE(PAD, vjp_pad, "strided slice; pad value: sum over the padding"))         \
  G(REDUCE, RULE(REDUCE, vjp_reduce, "broadcast; max/min: tied positions share"))      \
  G(DOT, RULE(DOT, vjp_dot, "dot_generals with the other operand"))                    \
  G(SHARDING_CONSTRAINT,                                                               \
    RULE(SHARDING_CONSTRAINT, vjp_sharding_constraint, "identity, same constraint"))   \
  G(ALL_REDUCE, NONE(ALL_REDUCE, SPMD))                                                \
  G(ALL_GATHER, NONE(ALL_GATHER, SPMD))                                                \
  G(REDUCE_SCATTER, NONE(REDUCE_SCATTER, SPMD))                                        \
  G(ALL_TO_ALL, NONE(ALL_TO_ALL, SPMD))                                                \
  G(COLLECTIVE_PERMUTE, NONE(COLLECTIVE_PERMUTE, SPMD))                                \
  G(SHARD_SLICE, NONE(SHARD_SLICE, SPMD))                                              \
  G(RNG_UNIFORM, ZERO(RNG_UNIFORM, "random numbers: no gradient"))                     \
  G(CONVOLUTION, RULE(CONVOLUTION, kdc_vjp_convolution, "transposed conv; batch-contracted conv")) \
  G(REDUCE_WINDOW, RULE(REDUCE_WINDOW, kdc_vjp_reduce_window, "sum: windowed sum; max: select_and_scatter")) \
  G(SELECT_AND_SCATTER, NONE(SELECT_AND_SCATTER, "second-order max pooling is not supported")) \
  G(GATHER, RULE(GATHER, kdc_vjp_gather, "scatter_add of g at the ids"))                \
  G(SCATTER_ADD, RULE(SCATTER_ADD, kdc_vjp_scatter_add, "gather of g, 0 for dropped ids")) \
  G(REVERSE, RULE(REVERSE, kdc_vjp_reverse, "reverse"))                                \
  G(SCAN, RULE(SCAN, kdc_vjp_scan, "reverse scan of the body's VJP (grad_scan.c)"))

#define ROW(e, row) row,
static const kdc_grad_rule rules[] = {GRAD_TABLE(ROW)};
#undef ROW

/* Compile-time: one row per op, each at its op's index. */
enum {
#define POS(e, row) GRAD_POS_##e,
  GRAD_TABLE(POS)
#undef POS
  GRAD_N_ROWS
};
static_assert((int)GRAD_N_ROWS == (int)KDC_OP_COUNT, "grad_rules.c: one row per op of ir/ops.def");
static_assert(sizeof rules / sizeof rules[0] == KDC_OP_COUNT, "grad rule table size");
#define CHECK(e, row) \
  static_assert((int)GRAD_POS_##e == (int)KDC_OP_##e,            \
                "grad_rules.c: row " #e " is out of ops.def order");
GRAD_TABLE(CHECK)
#undef CHECK

const kdc_grad_rule *kdc_grad_rule_of(kdc_op op) {
  KDC_ASSERT((unsigned)op < KDC_OP_COUNT);
  return &rules[op];
}
