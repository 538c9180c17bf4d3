/*
 * passes/optimizers.c: Keras 3 optimizers and learning-rate schedules as IR.
 *
 * The update rules are those of keras/src/optimizers/{sgd,adam,adamw,
 * rmsprop}.py and base_optimizer.py, written op for op in the same order
 * (so f32 results agree with Keras to rounding).  With g the gradient, lr
 * the learning rate at the current step and t = iterations + 1:
 *   weight decay (any optimizer with weight_decay > 0; AdamW's default
 *   0.004), applied first:              var = var - var * wd * lr
 *   SGD        momentum == 0:           var = var - g * lr
 *              else m = m * momentum - g * lr;
 *                   nesterov: var = var + (m * momentum - g * lr), else var = var + m
 *   Adam(W)    alpha = lr * sqrt(1 - beta_2^t) / (1 - beta_1^t)
 *              m += (g - m) * (1 - beta_1);  v += (g^2 - v) * (1 - beta_2)
 *              amsgrad: vh = max(vh, v), v := vh
 *              var -= (m * alpha) / (sqrt(v) + epsilon)
 *   RMSprop    v = rho * v + (1 - rho) * g^2
 *              centered: a = rho * a + (1 - rho) * g; den = v - a^2 + epsilon
 *              else den = v + epsilon      (note: sqrt(v + eps), not sqrt(v) + eps)
 *              inc = lr * g / sqrt(den)
 *              momentum > 0: m = momentum * m + inc; var -= m, else var -= inc
 * Slots are named like Keras' optimizer variables ("momentum", "velocity",
 * "velocity_hat", "average_gradient") and ordered like them: all variables'
 * first slot, then all variables' second slot, ...
 *
 * Schedules (keras/src/optimizers/schedules/learning_rate_schedule.py) are
 * evaluated at step = iterations (the count of steps already done, as Keras
 * calls the schedule with optimizer.iterations before incrementing it), in
 * f32 like Keras' (the step cast to float32).  The IR has no cos: the
 * cosine schedules take cos(pi p), p in [0, 1], from a Taylor series
 * (cos_pi), within a few f32 ulps of cosf.
 */
#include <math.h>
#include <string.h>
#include <strings.h>

#include "passes/passes.h"

static const char *const names[KDC_OPT_COUNT] = {"SGD", "adam", "adamw", "rmsprop"};

const char *kdc_optimizer_name(kdc_optimizer_kind k) {
  return (unsigned)k < KDC_OPT_COUNT ? names[k] : "?";
}

bool kdc_optimizer_from_name(const char *s, kdc_optimizer_kind *out) {
  for (int i = 0; i < KDC_OPT_COUNT; i++)
    if (strcasecmp(s, names[i]) == 0) {
      *out = (kdc_optimizer_kind)i;
      return true;
    }
  return false;
}

void kdc_optimizer_options_init(kdc_optimizer_options *o, kdc_optimizer_kind kind) {
  memset(o, 0, sizeof *o);
  o->kind = kind;
  o->learning_rate = kind == KDC_OPT_SGD ? 0.01 : 0.001;
  o->schedule.kind = KDC_LR_CONSTANT;
  o->beta_1 = 0.9;
  o->beta_2 = 0.999;
  o->rho = 0.9;
  o->epsilon = 1e-7;
  o->weight_decay = kind == KDC_OPT_ADAMW ? 0.004 : 0.0;
}

#define BAD(...) KDC_ERR(KDC_INVALID_INPUT, __VA_ARGS__)

kdc_status kdc_optimizer_options_check(const kdc_optimizer_options *o) {
  const char *n = kdc_optimizer_name(o->kind);
  if ((unsigned)o->kind >= KDC_OPT_COUNT) return BAD("unknown optimizer %d", (int)o->kind);
  /* a warmup starts from any rate >= 0 (Keras' examples start at 0) */
  bool warmup = o->schedule.kind == KDC_LR_COSINE && o->schedule.warmup;
  if (!(warmup ? o->learning_rate >= 0 : o->learning_rate > 0) || !isfinite(o->learning_rate))
    return BAD("%s: learning rate must be finite and %s 0, got %g", n, warmup ? ">=" : ">", o->learning_rate);
  if (!(o->momentum >= 0 && o->momentum <= 1))
    return BAD("%s: momentum must be in [0, 1], got %g", n, o->momentum);
  if (!(o->beta_1 >= 0 && o->beta_1 < 1) || !(o->beta_2 >= 0 && o->beta_2 < 1))
    return BAD("%s: beta_1 and beta_2 must be in [0, 1), got %g and %g", n, o->beta_1, o->beta_2);
  if (!(o->rho >= 0 && o->rho < 1)) return BAD("%s: rho must be in [0, 1), got %g", n, o->rho);
  if (!(o->epsilon >= 0)) return BAD("%s: epsilon must be >= 0, got %g", n, o->epsilon);
  if (!(o->weight_decay >= 0))
    return BAD("%s: weight_decay must be >= 0, got %g", n, o->weight_decay);
  const kdc_lr_schedule *s = &o->schedule;
  if (s->kind != KDC_LR_CONSTANT && s->kind != KDC_LR_PIECEWISE && !(s->decay_steps > 0))
    return BAD("learning rate schedule: decay_steps must be > 0, got %g", s->decay_steps);
  if (s->kind == KDC_LR_COSINE && s->warmup && !(s->warmup_steps >= 0))
    return BAD("CosineDecay: warmup_steps must be >= 0, got %g", s->warmup_steps);
  if (s->kind == KDC_LR_COSINE_RESTARTS && !(s->t_mul > 0))
    return BAD("CosineDecayRestarts: t_mul must be > 0, got %g", s->t_mul);
  if (s->kind == KDC_LR_PIECEWISE) {
    if (s->n_boundaries < 1 || !s->boundaries || !s->values)
      return BAD("PiecewiseConstantDecay: needs boundaries and one more value than boundaries");
    for (int i = 0; i < s->n_boundaries; i++)
      if ((i > 0 && s->boundaries[i] <= s->boundaries[i - 1]) || s->boundaries[i] < INT32_MIN ||
          s->boundaries[i] > INT32_MAX)
        return BAD("PiecewiseConstantDecay: boundaries must be increasing int32 steps");
  }
  return NULL;
}

int kdc_optimizer_slots(const kdc_optimizer_options *o, const char **out_names) {
  int n = 0;
  switch (o->kind) {
  case KDC_OPT_SGD:
    if (o->momentum != 0) out_names[n++] = "momentum";
    break;
  case KDC_OPT_ADAM:
  case KDC_OPT_ADAMW:
    out_names[n++] = "momentum";
    out_names[n++] = "velocity";
    if (o->amsgrad) out_names[n++] = "velocity_hat";
    break;
  case KDC_OPT_RMSPROP:
    out_names[n++] = "velocity";
    if (o->momentum > 0) out_names[n++] = "momentum";
    if (o->centered) out_names[n++] = "average_gradient";
    break;
  default: break;
  }
  return n;
}

/* ---- helpers ------------------------------------------------------------------ */

static kdc_value_id bin(kdc_func *f, kdc_op op, kdc_value_id a, kdc_value_id b) {
  return kdc_ir_binary(f, op, a, b);
}

static kdc_value_id scalar(kdc_func *f, double v) { return kdc_ir_scalar(f, KDC_DTYPE_F32, v); }

/* |s| (scalar value) broadcast to |like|'s shape. */
static kdc_value_id bs(kdc_func *f, kdc_value_id s, kdc_value_id like) {
  const kdc_type *t = kdc_ir_type(f, like);
  return kdc_ir_broadcast_to(f, s, t->rank, t->dims);
}

/* x op c for a constant c (a splat of x's shape). */
static kdc_value_id sc(kdc_func *f, kdc_op op, kdc_value_id x, double c) {
  return kdc_ir_binary_scalar(f, op, x, c);
}

/* c op x */
static kdc_value_id cs(kdc_func *f, kdc_op op, double c, kdc_value_id x) {
  const kdc_type *t = kdc_ir_type(f, x);
  return bin(f, op, kdc_ir_splat(f, t->dtype, t->rank, t->dims, c), x);
}

/* ---- learning rate ---------------------------------------------------------------- */

static kdc_value_id piecewise(kdc_func *f, const kdc_lr_schedule *s, kdc_value_id it) {
  int nb = s->n_boundaries;
  kdc_value_id b0 = kdc_ir_scalar(f, KDC_DTYPE_I32, (double)s->boundaries[0]);
  kdc_value_id bl = kdc_ir_scalar(f, KDC_DTYPE_I32, (double)s->boundaries[nb - 1]);
  kdc_value_id first = kdc_ir_convert(f, kdc_ir_compare(f, KDC_CMP_LE, it, b0), KDC_DTYPE_F32);
  kdc_value_id r = bin(f, KDC_OP_ADD, scalar(f, 0.0), sc(f, KDC_OP_MUL, first, s->values[0]));
  kdc_value_id last = kdc_ir_convert(f, kdc_ir_compare(f, KDC_CMP_GT, it, bl), KDC_DTYPE_F32);
  r = bin(f, KDC_OP_ADD, r, sc(f, KDC_OP_MUL, last, s->values[nb]));
  for (int i = 1; i < nb; i++) {
    kdc_value_id lo = kdc_ir_scalar(f, KDC_DTYPE_I32, (double)s->boundaries[i - 1]);
    kdc_value_id hi = kdc_ir_scalar(f, KDC_DTYPE_I32, (double)s->boundaries[i]);
    kdc_value_id in = bin(f, KDC_OP_AND, kdc_ir_compare(f, KDC_CMP_GT, it, lo),
                          kdc_ir_compare(f, KDC_CMP_LE, it, hi));
    kdc_value_id inf = kdc_ir_convert(f, in, KDC_DTYPE_F32);
    r = bin(f, KDC_OP_ADD, r, sc(f, KDC_OP_MUL, inf, s->values[i]));
  }
  return r;
}

/* cos(pi p) for an f32 scalar p in [0, 1] (the IR has no cos):
 * -sin(t), t = pi (p - 1/2) in [-pi/2, pi/2], by its Taylor series to t^17
 * (truncation < 3e-13), evaluated in f32 (Horner in t^2). */
static kdc_value_id cos_pi(kdc_func *f, kdc_value_id p) {
  const double pi = 3.14159265358979323846;
  kdc_value_id t = sc(f, KDC_OP_MUL, sc(f, KDC_OP_SUB, p, 0.5), pi);
  kdc_value_id t2 = bin(f, KDC_OP_MUL, t, t);
  double c = 1;
  for (int k = 1; k <= 8; k++) c /= (2.0 * k) * (2.0 * k + 1); /* 1/17! */
  kdc_value_id acc = scalar(f, c);
  for (int k = 8; k >= 1; k--) {
    c *= -(2.0 * k) * (2.0 * k + 1); /* (-1)^(k-1) / (2k-1)! */
    acc = sc(f, KDC_OP_ADD, bin(f, KDC_OP_MUL, acc, t2), c);
  }
  /* acc = sin(t) / t */
  return kdc_ir_unary(f, KDC_OP_NEG, bin(f, KDC_OP_MUL, acc, t));
}

/* CosineDecay's decay: from_lr ((1 - alpha) 0.5 (1 + cos(pi step / decay_steps)) + alpha). */
static kdc_value_id cosine_decay(kdc_func *f, const kdc_lr_schedule *s, kdc_value_id step,
                                 kdc_value_id from_lr) {
  kdc_value_id frac = sc(f, KDC_OP_DIV, step, s->decay_steps);
  kdc_value_id cd = sc(f, KDC_OP_MUL, sc(f, KDC_OP_ADD, cos_pi(f, frac), 1.0), 0.5);
  kdc_value_id d = sc(f, KDC_OP_ADD, sc(f, KDC_OP_MUL, cd, 1.0 - s->alpha), s->alpha);
  return bin(f, KDC_OP_MUL, from_lr, d);
}

/* keras CosineDecay.__call__: step = min(step, decay_steps (+ warmup_steps));
 * with warmup_target, steps below warmup_steps ramp linearly from lr to the
 * target, then the decay runs from the target over step - warmup_steps. */
static kdc_value_id cosine(kdc_func *f, const kdc_optimizer_options *o, kdc_value_id step) {
  const kdc_lr_schedule *s = &o->schedule;
  kdc_value_id lr = scalar(f, o->learning_rate);
  if (!s->warmup)
    return cosine_decay(f, s, sc(f, KDC_OP_MIN, step, s->decay_steps), lr);
  step = sc(f, KDC_OP_MIN, step, s->decay_steps + s->warmup_steps);
  kdc_value_id wf = sc(f, KDC_OP_DIV, step, s->warmup_steps);
  kdc_value_id warm = sc(f, KDC_OP_ADD, sc(f, KDC_OP_MUL, wf, s->warmup_target - o->learning_rate),
                         o->learning_rate);
  kdc_value_id dec = cosine_decay(f, s, sc(f, KDC_OP_SUB, step, s->warmup_steps),
                                  scalar(f, s->warmup_target));
  kdc_value_id in_warmup = kdc_ir_compare(f, KDC_CMP_LT, step, scalar(f, s->warmup_steps));
  return kdc_ir_select(f, in_warmup, warm, dec);
}

/* keras CosineDecayRestarts.__call__ (t_mul == 1: i = floor(frac), frac -=
 * i; else the geometric form through log). */
static kdc_value_id cosine_restarts(kdc_func *f, const kdc_optimizer_options *o,
                                    kdc_value_id step) {
  const kdc_lr_schedule *s = &o->schedule;
  kdc_value_id frac = sc(f, KDC_OP_DIV, step, s->decay_steps), i;
  if (s->t_mul == 1.0) {
    i = kdc_ir_unary(f, KDC_OP_FLOOR, frac);
    frac = bin(f, KDC_OP_SUB, frac, i);
  } else {
    kdc_value_id l = kdc_ir_unary(f, KDC_OP_LOG, cs(f, KDC_OP_SUB, 1.0, sc(f, KDC_OP_MUL, frac,
                                                                          1.0 - s->t_mul)));
    i = kdc_ir_unary(f, KDC_OP_FLOOR, bin(f, KDC_OP_DIV, l, kdc_ir_unary(f, KDC_OP_LOG,
                                                                          scalar(f, s->t_mul))));
    kdc_value_id tp = cs(f, KDC_OP_POW, s->t_mul, i);
    kdc_value_id sum_r = sc(f, KDC_OP_DIV, cs(f, KDC_OP_SUB, 1.0, tp), 1.0 - s->t_mul);
    frac = bin(f, KDC_OP_DIV, bin(f, KDC_OP_SUB, frac, sum_r), tp);
  }
  kdc_value_id m_fac = cs(f, KDC_OP_POW, s->m_mul, i);
  kdc_value_id cd = bin(f, KDC_OP_MUL, sc(f, KDC_OP_MUL, m_fac, 0.5),
                        sc(f, KDC_OP_ADD, cos_pi(f, frac), 1.0));
  kdc_value_id d = sc(f, KDC_OP_ADD, sc(f, KDC_OP_MUL, cd, 1.0 - s->alpha), s->alpha);
  return cs(f, KDC_OP_MUL, o->learning_rate, d);
}

/* keras PolynomialDecay.__call__: cycle stretches decay_steps to the first
 * multiple above step (x1 at step 0), else step = min(step, decay_steps);
 * (lr - end) (1 - step / decay_steps)^power + end. */
static kdc_value_id polynomial(kdc_func *f, const kdc_optimizer_options *o, kdc_value_id step) {
  const kdc_lr_schedule *s = &o->schedule;
  kdc_value_id ds = scalar(f, s->decay_steps);
  if (s->cycle) {
    kdc_value_id mult = kdc_ir_unary(f, KDC_OP_CEIL, sc(f, KDC_OP_DIV, step, s->decay_steps));
    kdc_value_id zero = kdc_ir_compare(f, KDC_CMP_EQ, step, scalar(f, 0.0));
    mult = kdc_ir_select(f, zero, scalar(f, 1.0), mult);
    ds = bin(f, KDC_OP_MUL, ds, mult);
  } else {
    step = sc(f, KDC_OP_MIN, step, s->decay_steps);
  }
  kdc_value_id p = bin(f, KDC_OP_DIV, step, ds);
  kdc_value_id pw = bin(f, KDC_OP_POW, cs(f, KDC_OP_SUB, 1.0, p), scalar(f, s->power));
  return sc(f, KDC_OP_ADD, sc(f, KDC_OP_MUL, pw, o->learning_rate - s->end_learning_rate),
            s->end_learning_rate);
}

kdc_value_id kdc_optimizer_learning_rate(kdc_func *f, const kdc_optimizer_options *o,
                                         kdc_value_id iteration) {
  const kdc_lr_schedule *s = &o->schedule;
  if (s->kind == KDC_LR_CONSTANT) return scalar(f, o->learning_rate);
  if (s->kind == KDC_LR_PIECEWISE) return piecewise(f, s, iteration);
  kdc_value_id step = kdc_ir_convert(f, iteration, KDC_DTYPE_F32);
  if (s->kind == KDC_LR_COSINE) return cosine(f, o, step);
  if (s->kind == KDC_LR_COSINE_RESTARTS) return cosine_restarts(f, o, step);
  if (s->kind == KDC_LR_POLYNOMIAL) return polynomial(f, o, step);
  kdc_value_id p = sc(f, KDC_OP_DIV, step, s->decay_steps);
  if (s->staircase) p = kdc_ir_unary(f, KDC_OP_FLOOR, p);
  if (s->kind == KDC_LR_EXPONENTIAL)
    return cs(f, KDC_OP_MUL, o->learning_rate, cs(f, KDC_OP_POW, s->decay_rate, p));
  /* inverse time */
  kdc_value_id den = cs(f, KDC_OP_ADD, 1.0, cs(f, KDC_OP_MUL, s->decay_rate, p));
  return cs(f, KDC_OP_DIV, o->learning_rate, den);
}

/* ---- update rules ------------------------------------------------------------------- */

static void sgd(kdc_func *f, const kdc_optimizer_options *o, kdc_value_id lr, kdc_value_id var,
                kdc_value_id g, const kdc_value_id *slots, kdc_value_id *out_var,
                kdc_value_id *out_slots) {
  kdc_value_id glr = bin(f, KDC_OP_MUL, g, bs(f, lr, g));
  if (o->momentum == 0) {
    *out_var = bin(f, KDC_OP_SUB, var, glr);
    return;
  }
  kdc_value_id m = bin(f, KDC_OP_SUB, sc(f, KDC_OP_MUL, slots[0], o->momentum), glr);
  out_slots[0] = m;
  if (o->nesterov)
    *out_var = bin(f, KDC_OP_ADD, var, bin(f, KDC_OP_SUB, sc(f, KDC_OP_MUL, m, o->momentum), glr));
  else
    *out_var = bin(f, KDC_OP_ADD, var, m);
}

static void adam(kdc_func *f, const kdc_optimizer_options *o, kdc_value_id iteration,
                 kdc_value_id lr, kdc_value_id var, kdc_value_id g, const kdc_value_id *slots,
                 kdc_value_id *out_var, kdc_value_id *out_slots) {
  kdc_value_id t1 = kdc_ir_binary_scalar(f, KDC_OP_ADD, iteration, 1); /* integer add, then cast */
  kdc_value_id t = kdc_ir_convert(f, t1, KDC_DTYPE_F32);
  kdc_value_id b1p = cs(f, KDC_OP_POW, o->beta_1, t), b2p = cs(f, KDC_OP_POW, o->beta_2, t);
  kdc_value_id root = kdc_ir_unary(f, KDC_OP_SQRT, cs(f, KDC_OP_SUB, 1.0, b2p));
  kdc_value_id alpha = bin(f, KDC_OP_MUL, lr, root);
  alpha = bin(f, KDC_OP_DIV, alpha, cs(f, KDC_OP_SUB, 1.0, b1p));
  kdc_value_id m = slots[0], v = slots[1];
  m = bin(f, KDC_OP_ADD, m, sc(f, KDC_OP_MUL, bin(f, KDC_OP_SUB, g, m), 1.0 - o->beta_1));
  kdc_value_id g2 = bin(f, KDC_OP_MUL, g, g);
  v = bin(f, KDC_OP_ADD, v, sc(f, KDC_OP_MUL, bin(f, KDC_OP_SUB, g2, v), 1.0 - o->beta_2));
  out_slots[0] = m;
  out_slots[1] = v;
  if (o->amsgrad) {
    v = bin(f, KDC_OP_MAX, slots[2], v);
    out_slots[2] = v;
  }
  kdc_value_id num = bin(f, KDC_OP_MUL, m, bs(f, alpha, m));
  kdc_value_id den = sc(f, KDC_OP_ADD, kdc_ir_unary(f, KDC_OP_SQRT, v), o->epsilon);
  *out_var = bin(f, KDC_OP_SUB, var, bin(f, KDC_OP_DIV, num, den));
}

static void rmsprop(kdc_func *f, const kdc_optimizer_options *o, kdc_value_id lr,
                    kdc_value_id var, kdc_value_id g, const kdc_value_id *slots,
                    kdc_value_id *out_var, kdc_value_id *out_slots) {
  int k = 0;
  kdc_value_id g2 = bin(f, KDC_OP_MUL, g, g);
  kdc_value_id v = bin(f, KDC_OP_ADD, cs(f, KDC_OP_MUL, o->rho, slots[k]),
                       cs(f, KDC_OP_MUL, 1.0 - o->rho, g2));
  out_slots[k++] = v;
  int mom = o->momentum > 0 ? k++ : -1;
  kdc_value_id den;
  if (o->centered) {
    kdc_value_id a = bin(f, KDC_OP_ADD, cs(f, KDC_OP_MUL, o->rho, slots[k]),
                         cs(f, KDC_OP_MUL, 1.0 - o->rho, g));
    out_slots[k++] = a;
    den = sc(f, KDC_OP_ADD, bin(f, KDC_OP_SUB, v, bin(f, KDC_OP_MUL, a, a)), o->epsilon);
  } else {
    den = sc(f, KDC_OP_ADD, v, o->epsilon);
  }
  kdc_value_id inc = bin(f, KDC_OP_DIV, bin(f, KDC_OP_MUL, bs(f, lr, g), g),
                         kdc_ir_unary(f, KDC_OP_SQRT, den));
  if (mom >= 0) {
    kdc_value_id m = bin(f, KDC_OP_ADD, cs(f, KDC_OP_MUL, o->momentum, slots[mom]), inc);
    out_slots[mom] = m;
    inc = m;
  }
  *out_var = bin(f, KDC_OP_SUB, var, inc);
}

kdc_status kdc_optimizer_update(kdc_func *f, const kdc_optimizer_options *o,
                                kdc_value_id iteration, kdc_value_id lr, kdc_value_id var,
                                kdc_value_id grad, const kdc_value_id *slots,
                                kdc_value_id *out_var, kdc_value_id *out_slots) {
  if (o->weight_decay > 0) { /* base_optimizer._apply_weight_decay */
    kdc_value_id d = bin(f, KDC_OP_MUL, sc(f, KDC_OP_MUL, var, o->weight_decay), bs(f, lr, var));
    var = bin(f, KDC_OP_SUB, var, d);
  }
  switch (o->kind) {
  case KDC_OPT_SGD: sgd(f, o, lr, var, grad, slots, out_var, out_slots); break;
  case KDC_OPT_ADAM:
  case KDC_OPT_ADAMW: adam(f, o, iteration, lr, var, grad, slots, out_var, out_slots); break;
  case KDC_OPT_RMSPROP: rmsprop(f, o, lr, var, grad, slots, out_var, out_slots); break;
  default: return KDC_ERR(KDC_INVALID_INPUT, "unknown optimizer %d", (int)o->kind);
  }
  kdc_status st = kdc_ir_take_error(f);
  return st ? kdc_status_annotate(st, "internal error: optimizer %s", kdc_optimizer_name(o->kind))
            : NULL;
}
