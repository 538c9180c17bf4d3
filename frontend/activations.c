/*
 * frontend/activations.c: Keras 3 activation functions as IR.
 *
 * Each formula is the one Keras 3 computes on the JAX backend
 * (keras/src/activations/activations.py -> keras.ops -> jax.nn), written with
 * the ops of ir/ops.def only:
 *   relu        max(x, 0)                 relu6       min(max(x, 0), 6)
 *   sigmoid     logistic(x)               tanh        tanh(x)
 *   softmax     exp(x - max) / sum        log_softmax (x - max) - log(sum)
 *   gelu        0.5 x (1 + erf(x / sqrt 2)); approximate: x * 0.5 (1 + tanh(
 *               sqrt(2/pi) (x + 0.044715 x^3)))  (the "gelu" string is exact)
 *   silu/swish  x * sigmoid(x)            elu         x > 0 ? x : expm1(x)
 *   selu        1.0507009873554805 * elu(x, 1.6732632423543772)
 *   softplus    max(x, 0) + log1p(exp(-|x|))     softsign x / (|x| + 1)
 *   leaky_relu  x >= 0 ? x : 0.2 x        exponential exp(x)
 *   hard_sigmoid relu6(x + 3) / 6         hard_silu   x * hard_sigmoid(x)
 *   mish        x * tanh(softplus(x))     log_sigmoid -softplus(-x)
 *   celu        max(x, 0) + min(0, expm1(x))  (alpha 1)
 *   hard_tanh   clip(x, -1, 1)            tanh_shrink x - tanh(x)
 *   soft_shrink x > .5 ? x - .5 : x < -.5 ? x + .5 : 0   (threshold 0.5)
 *   hard_shrink |x| > .5 ? x : 0          sparse_sigmoid clip(x + 1, 0, 2) / 2
 *   sparse_plus x <= -1 ? 0 : x >= 1 ? x : (x + 1)^2 / 4
 *   squareplus  (x + sqrt(x^2 + 4)) / 2   (b 4)
 *   sparsemax   max(z - tau, 0) over the last axis (see sparsemax() below)
 * glu (halves the last dim) and threshold (needs arguments) are refused.
 * hard_sigmoid is the one name whose meaning depends on the file: in a
 * tf.keras 2 or TF.js topology (keras_version 1.x/2.x/tfjs-layers) it is
 * clip(0.2 x + 0.5, 0, 1), the function those writers meant; in a Keras 3
 * file it is relu6(x + 3) / 6 (tests/reference/README.md, "Keras 3 vs tfjs").
 * camelCase names of TF.js ("hardSigmoid", "leakyRelu") are accepted.
 */
#include <math.h>
#include <string.h>

#include "frontend/frontend.h"

static kdc_value_id splat_like(kdc_func *f, kdc_value_id x, double v) {
  if (x == KDC_NO_VALUE) return x;
  const kdc_type *t = kdc_ir_type(f, x);
  return kdc_ir_splat(f, t->dtype, t->rank, t->dims, v);
}

static kdc_value_id sc(kdc_func *f, kdc_op op, kdc_value_id x, double s) {
  return kdc_ir_binary_scalar(f, op, x, s);
}

static kdc_value_id un(kdc_func *f, kdc_op op, kdc_value_id x) { return kdc_ir_unary(f, op, x); }
static kdc_value_id bin(kdc_func *f, kdc_op op, kdc_value_id a, kdc_value_id b) {
  return kdc_ir_binary(f, op, a, b);
}

/* where(x <cmp> 0, a, b) */
static kdc_value_id where0(kdc_func *f, kdc_cmp cmp, kdc_value_id x, kdc_value_id a,
                           kdc_value_id b) {
  kdc_value_id p = kdc_ir_compare(f, cmp, x, splat_like(f, x, 0));
  return kdc_ir_select(f, p, a, b);
}

/* where(x <cmp> c, a, b) */
static kdc_value_id where_c(kdc_func *f, kdc_cmp cmp, kdc_value_id x, double c, kdc_value_id a,
                            kdc_value_id b) {
  return kdc_ir_select(f, kdc_ir_compare(f, cmp, x, splat_like(f, x, c)), a, b);
}

/* sparsemax over the last axis without a sort: z_i is in the support when
 * 1 + k_i z_i > s_i, k_i = #{j: z_j >= z_i}, s_i = sum of those z_j (the
 * sorted test of jax's sparsemax at the last position of z_i's ties);
 * tau = (sum of the support - 1) / |support|, y = max(z - tau, 0). */
static kdc_value_id sparsemax(kdc_func *f, kdc_value_id z) {
  if (z == KDC_NO_VALUE) return z;
  const kdc_type t = *kdc_ir_type(f, z);
  int r = t.rank;
  int64_t dims[KDC_MAX_RANK], mi[KDC_MAX_RANK], mj[KDC_MAX_RANK], last = r - 1, pair = r;
  for (int d = 0; d < r; d++) dims[d] = t.dims[d], mi[d] = d, mj[d] = d;
  dims[r] = t.dims[r - 1]; /* [.., i, j] */
  mj[r - 1] = r;
  kdc_value_id zi = kdc_ir_broadcast(f, z, r + 1, dims, mi);
  kdc_value_id zj = kdc_ir_broadcast(f, z, r + 1, dims, mj);
  kdc_value_id ge = kdc_ir_convert(f, kdc_ir_compare(f, KDC_CMP_GE, zj, zi), t.dtype);
  kdc_value_id k = kdc_ir_reduce(f, KDC_RED_SUM, ge, 1, &pair);
  kdc_value_id s = kdc_ir_reduce(f, KDC_RED_SUM, bin(f, KDC_OP_MUL, ge, zj), 1, &pair);
  kdc_value_id in = kdc_ir_compare(f, KDC_CMP_GT, sc(f, KDC_OP_ADD, bin(f, KDC_OP_MUL, k, z), 1), s);
  kdc_value_id sup = kdc_ir_convert(f, in, t.dtype);
  kdc_value_id tot = kdc_ir_reduce(f, KDC_RED_SUM, bin(f, KDC_OP_MUL, sup, z), 1, &last);
  kdc_value_id cnt = kdc_ir_reduce(f, KDC_RED_SUM, sup, 1, &last);
  kdc_value_id tau = bin(f, KDC_OP_DIV, sc(f, KDC_OP_SUB, tot, 1), cnt);
  tau = kdc_ir_broadcast(f, tau, r, t.dims, mi);
  return sc(f, KDC_OP_MAX, bin(f, KDC_OP_SUB, z, tau), 0);
}

static kdc_value_id relu6(kdc_func *f, kdc_value_id x) { return sc(f, KDC_OP_MIN, sc(f, KDC_OP_MAX, x, 0), 6); }

static kdc_value_id softplus(kdc_func *f, kdc_value_id x) {
  kdc_value_id t = un(f, KDC_OP_LOG1P, un(f, KDC_OP_EXP, un(f, KDC_OP_NEG, un(f, KDC_OP_ABS, x))));
  return bin(f, KDC_OP_ADD, sc(f, KDC_OP_MAX, x, 0), t);
}

/* expm1 of x where x <= 0, else expm1(0) = 0: the exponential branch of
 * elu/selu/celu reads x only where it is taken (JAX's "double where"), so
 * its zero cotangent elsewhere never meets exp(x) = inf (x > 88 in f32) as
 * 0 * inf = NaN in the gradient. */
static kdc_value_id expm1_nonpos(kdc_func *f, kdc_value_id x) {
  return un(f, KDC_OP_EXPM1, where0(f, KDC_CMP_GT, x, splat_like(f, x, 0), x));
}

kdc_value_id kdc_fe_elu(kdc_func *f, kdc_value_id x, double alpha) {
  return where0(f, KDC_CMP_GT, x, x, sc(f, KDC_OP_MUL, expm1_nonpos(f, x), alpha));
}

kdc_value_id kdc_fe_gelu(kdc_func *f, kdc_value_id x, bool approximate) {
  if (!approximate) {
    kdc_value_id e = un(f, KDC_OP_ERF, sc(f, KDC_OP_MUL, x, 1.0 / sqrt(2.0)));
    return sc(f, KDC_OP_MUL, bin(f, KDC_OP_MUL, x, sc(f, KDC_OP_ADD, e, 1)), 0.5);
  }
  kdc_value_id x3 = bin(f, KDC_OP_MUL, bin(f, KDC_OP_MUL, x, x), x);
  kdc_value_id in = sc(f, KDC_OP_MUL, bin(f, KDC_OP_ADD, x, sc(f, KDC_OP_MUL, x3, 0.044715)),
                       sqrt(2.0 / M_PI));
  kdc_value_id cdf = sc(f, KDC_OP_MUL, sc(f, KDC_OP_ADD, un(f, KDC_OP_TANH, in), 1), 0.5);
  return bin(f, KDC_OP_MUL, x, cdf);
}

kdc_value_id kdc_fe_softmax(kdc_func *f, kdc_value_id x, int n_axes, const int64_t *axes,
                            bool log) {
  if (x == KDC_NO_VALUE) return x;
  kdc_type t = *kdc_ir_type(f, x);
  int64_t ax[KDC_MAX_RANK], map[KDC_MAX_RANK];
  bool red[KDC_MAX_RANK] = {0};
  for (int i = 0; i < n_axes; i++) {
    ax[i] = axes[i] < 0 ? axes[i] + t.rank : axes[i];
    if (ax[i] >= 0 && ax[i] < t.rank) red[ax[i]] = true;
  }
  int k = 0;
  for (int d = 0; d < t.rank; d++)
    if (!red[d]) map[k++] = d;
  /* the shift is constant to the gradient, as jax.nn.softmax's
   * stop_gradient(x_max): no cotangent flows through the max */
  kdc_value_id m = kdc_ir_unary(f, KDC_OP_STOP_GRADIENT, kdc_ir_reduce(f, KDC_RED_MAX, x, n_axes, ax));
  kdc_value_id z = bin(f, KDC_OP_SUB, x, kdc_ir_broadcast(f, m, t.rank, t.dims, map));
  kdc_value_id e = un(f, KDC_OP_EXP, z);
  kdc_value_id s = kdc_ir_broadcast(f, kdc_ir_reduce(f, KDC_RED_SUM, e, n_axes, ax), t.rank,
                                    t.dims, map);
  return log ? bin(f, KDC_OP_SUB, z, un(f, KDC_OP_LOG, s)) : bin(f, KDC_OP_DIV, e, s);
}

kdc_value_id kdc_fe_relu(kdc_func *f, kdc_value_id x, double negative_slope, double max_value,
                         bool has_max, double threshold) {
  /* keras.layers.ReLU.static_call, step by step. */
  if (negative_slope != 0 && !has_max && threshold == 0)
    return where0(f, KDC_CMP_GE, x, x, sc(f, KDC_OP_MUL, x, negative_slope));
  kdc_value_id neg = KDC_NO_VALUE;
  if (negative_slope != 0) {
    kdc_value_id mx = un(f, KDC_OP_NEG, x);
    if (threshold != 0) mx = sc(f, KDC_OP_ADD, mx, threshold);
    neg = sc(f, KDC_OP_MAX, mx, 0);
  }
  bool clip = has_max;
  kdc_value_id y;
  if (threshold != 0) {
    kdc_value_id p = kdc_ir_compare(f, KDC_CMP_GT, x, splat_like(f, x, threshold));
    y = bin(f, KDC_OP_MUL, x, kdc_ir_convert(f, p, kdc_ir_type(f, x)->dtype));
  } else if (has_max && max_value == 6) {
    y = relu6(f, x);
    clip = false;
  } else {
    y = sc(f, KDC_OP_MAX, x, 0);
  }
  if (clip) y = sc(f, KDC_OP_MIN, sc(f, KDC_OP_MAX, y, 0), max_value);
  if (negative_slope != 0) y = bin(f, KDC_OP_SUB, y, sc(f, KDC_OP_MUL, neg, negative_slope));
  return y;
}

static const char *const known[] = {
    "linear", "relu", "sigmoid", "tanh", "softmax", "gelu", "silu", "swish", "elu", "selu",
    "softplus", "softsign", "relu6", "leaky_relu", "exponential", "hard_sigmoid", "hard_silu",
    "hard_swish", "mish", "log_softmax", "log_sigmoid", "celu", "hard_tanh", "soft_shrink",
    "hard_shrink", "tanh_shrink", "sparse_plus", "sparse_sigmoid", "squareplus", "sparsemax", NULL};

bool kdc_fe_activation_known(const char *name) {
  for (int i = 0; known[i]; i++)
    if (!strcmp(known[i], name)) return true;
  return false;
}

kdc_status kdc_fe_activation(struct kdc_lower_ctx *c, const kdc_keras_layer *l, const char *key,
                             const char *name, kdc_value_id x, kdc_value_id *out) {
  kdc_func *f = c->f;
  kdc_value_id y;
  int64_t last = -1;
  char snake[64];
  size_t k = 0;
  for (const char *p = name; *p && k + 2 < sizeof snake; p++) {
    if (*p >= 'A' && *p <= 'Z') snake[k++] = '_', snake[k++] = (char)(*p - 'A' + 'a');
    else snake[k++] = *p;
  }
  snake[k] = 0;
  const char *orig = name;
  name = snake;
  if (!strcmp(name, "hard_sigmoid") && l->model->tk2_topology)
    y = sc(f, KDC_OP_MIN, sc(f, KDC_OP_MAX, sc(f, KDC_OP_ADD, sc(f, KDC_OP_MUL, x, 0.2), 0.5), 0), 1);
  else if (!strcmp(name, "linear")) y = x;
  else if (!strcmp(name, "relu")) y = sc(f, KDC_OP_MAX, x, 0);
  else if (!strcmp(name, "sigmoid")) y = un(f, KDC_OP_LOGISTIC, x);
  else if (!strcmp(name, "tanh")) y = un(f, KDC_OP_TANH, x);
  else if (!strcmp(name, "softmax")) y = kdc_fe_softmax(f, x, 1, &last, false);
  else if (!strcmp(name, "log_softmax")) y = kdc_fe_softmax(f, x, 1, &last, true);
  else if (!strcmp(name, "gelu")) y = kdc_fe_gelu(f, x, false);
  else if (!strcmp(name, "silu") || !strcmp(name, "swish"))
    y = bin(f, KDC_OP_MUL, x, un(f, KDC_OP_LOGISTIC, x));
  else if (!strcmp(name, "elu")) y = kdc_fe_elu(f, x, 1.0);
  else if (!strcmp(name, "selu"))
    y = sc(f, KDC_OP_MUL, kdc_fe_elu(f, x, 1.6732632423543772848170429916717),
           1.0507009873554804934193349852946);
  else if (!strcmp(name, "softplus")) y = softplus(f, x);
  else if (!strcmp(name, "softsign"))
    y = bin(f, KDC_OP_DIV, x, sc(f, KDC_OP_ADD, un(f, KDC_OP_ABS, x), 1));
  else if (!strcmp(name, "relu6")) y = relu6(f, x);
  else if (!strcmp(name, "leaky_relu")) y = kdc_fe_relu(f, x, 0.2, 0, false, 0);
  else if (!strcmp(name, "exponential")) y = un(f, KDC_OP_EXP, x);
  else if (!strcmp(name, "hard_sigmoid")) y = sc(f, KDC_OP_DIV, relu6(f, sc(f, KDC_OP_ADD, x, 3)), 6);
  else if (!strcmp(name, "hard_silu") || !strcmp(name, "hard_swish"))
    y = bin(f, KDC_OP_MUL, x, sc(f, KDC_OP_DIV, relu6(f, sc(f, KDC_OP_ADD, x, 3)), 6));
  else if (!strcmp(name, "mish")) y = bin(f, KDC_OP_MUL, x, un(f, KDC_OP_TANH, softplus(f, x)));
  else if (!strcmp(name, "log_sigmoid")) y = un(f, KDC_OP_NEG, softplus(f, un(f, KDC_OP_NEG, x)));
  else if (!strcmp(name, "celu"))
    y = bin(f, KDC_OP_ADD, sc(f, KDC_OP_MAX, x, 0), sc(f, KDC_OP_MIN, expm1_nonpos(f, x), 0));
  else if (!strcmp(name, "hard_tanh")) y = sc(f, KDC_OP_MIN, sc(f, KDC_OP_MAX, x, -1), 1);
  else if (!strcmp(name, "soft_shrink"))
    y = where_c(f, KDC_CMP_GT, x, 0.5, sc(f, KDC_OP_SUB, x, 0.5),
                where_c(f, KDC_CMP_LT, x, -0.5, sc(f, KDC_OP_ADD, x, 0.5), splat_like(f, x, 0)));
  else if (!strcmp(name, "hard_shrink"))
    y = where_c(f, KDC_CMP_GT, un(f, KDC_OP_ABS, x), 0.5, x, splat_like(f, x, 0));
  else if (!strcmp(name, "tanh_shrink")) y = bin(f, KDC_OP_SUB, x, un(f, KDC_OP_TANH, x));
  else if (!strcmp(name, "sparse_plus")) {
    kdc_value_id q = sc(f, KDC_OP_DIV, sc(f, KDC_OP_ADD, x, 1), 2);
    y = where_c(f, KDC_CMP_LE, x, -1, splat_like(f, x, 0),
                where_c(f, KDC_CMP_GE, x, 1, x, bin(f, KDC_OP_MUL, q, q)));
  } else if (!strcmp(name, "sparse_sigmoid"))
    y = sc(f, KDC_OP_MUL, sc(f, KDC_OP_MIN, sc(f, KDC_OP_MAX, sc(f, KDC_OP_ADD, x, 1), 0), 2), 0.5);
  else if (!strcmp(name, "squareplus"))
    y = sc(f, KDC_OP_DIV, bin(f, KDC_OP_ADD, x, un(f, KDC_OP_SQRT, sc(f, KDC_OP_ADD,
                                                   bin(f, KDC_OP_MUL, x, x), 4))), 2);
  else if (!strcmp(name, "sparsemax")) y = sparsemax(f, x);
  else if (!strcmp(name, "glu") || !strcmp(name, "threshold"))
    return kdc_fe_err(l->model, KDC_UNSUPPORTED,
                      kdc_arena_printf(l->model->arena, "%s.config.%s", l->loc, key),
                      "activation \"%s\" is not supported by kdc (%s; %s \"%s\")", orig,
                      name[0] == 'g' ? "it halves the last dimension" : "it needs arguments",
                      l->class_name, l->name);
  else
    return kdc_fe_err(l->model, KDC_UNSUPPORTED,
                      kdc_arena_printf(l->model->arena, "%s.config.%s", l->loc, key),
                      "activation \"%s\" is not supported by kdc (%s \"%s\")", orig, l->class_name,
                      l->name);
  *out = y;
  return NULL;
}
