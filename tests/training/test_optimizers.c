/*
 * Optimizers and schedules (passes/optimizers.c): three steps of every
 * optimizer variant, each step's IR run by the reference interpreter with
 * its outputs fed back as the next step's state, against a hand-written
 * double-precision C implementation of the Keras 3 update rule
 * (keras/src/optimizers/{sgd,adam,adamw,rmsprop}.py, base_optimizer.py).
 * Tolerance: relative 1e-5 plus an absolute 1e-7 + 1e-5 * (sum of the
 * learning rates so far): Keras itself computes 1 - beta_2^t in f32, whose
 * rounding (~1e-5 relative at t = 2) scales the update, not the variable.  The
 * schedules
 * (ExponentialDecay, InverseTimeDecay, PiecewiseConstantDecay) are checked at
 * steps 0..7 the same way.
 */
#include "tr_test.h"

enum { N = 6, STEPS = 3 };

static double g_scale = 1.0; /* gradients are uniform in +-2 g_scale */

/* The Keras 3 rules, in double.  |it| = iterations before the step. */
static void ref_step(const kdc_optimizer_options *o, int it, double lr, double *var,
                     const double *g, double (*slot)[N]) {
  for (int i = 0; i < N; i++) {
    if (o->weight_decay > 0) var[i] -= var[i] * o->weight_decay * lr;
    double gi = g[i];
    switch (o->kind) {
    case KDC_OPT_SGD:
      if (o->momentum == 0) {
        var[i] -= gi * lr;
      } else {
        slot[0][i] = slot[0][i] * o->momentum - gi * lr;
        var[i] += o->nesterov ? slot[0][i] * o->momentum - gi * lr : slot[0][i];
      }
      break;
    case KDC_OPT_ADAM:
    case KDC_OPT_ADAMW: {
      /* Keras casts the betas to the variable's dtype before ops.power: with
       * f32, 1 - 0.999f^t differs from 1 - 0.999^t by ~1e-5 relative. */
      double t = it + 1, b1 = (float)o->beta_1, b2 = (float)o->beta_2;
      double alpha = lr * sqrt(1 - pow(b2, t)) / (1 - pow(b1, t));
      slot[0][i] += (gi - slot[0][i]) * (1 - o->beta_1);
      slot[1][i] += (gi * gi - slot[1][i]) * (1 - o->beta_2);
      double v = slot[1][i];
      if (o->amsgrad) v = slot[2][i] = fmax(slot[2][i], v);
      var[i] -= slot[0][i] * alpha / (sqrt(v) + o->epsilon);
      break;
    }
    case KDC_OPT_RMSPROP: {
      int k = 1, mom = o->momentum > 0 ? k++ : -1, cen = o->centered ? k++ : -1;
      slot[0][i] = o->rho * slot[0][i] + (1 - o->rho) * gi * gi;
      double den = slot[0][i] + o->epsilon;
      if (cen >= 0) {
        slot[cen][i] = o->rho * slot[cen][i] + (1 - o->rho) * gi;
        den = slot[0][i] - slot[cen][i] * slot[cen][i] + o->epsilon;
      }
      double inc = lr * gi / sqrt(den);
      if (mom >= 0) inc = slot[mom][i] = o->momentum * slot[mom][i] + inc;
      var[i] -= inc;
      break;
    }
    default: fail();
    }
  }
}

#define M_PI_REF 3.14159265358979323846

static double ref_lr(const kdc_optimizer_options *o, int step) {
  const kdc_lr_schedule *s = &o->schedule;
  double p = s->decay_steps > 0 ? step / s->decay_steps : 0;
  if (s->staircase) p = floor(p);
  switch (s->kind) {
  case KDC_LR_CONSTANT: return o->learning_rate;
  case KDC_LR_EXPONENTIAL: return o->learning_rate * pow(s->decay_rate, p);
  case KDC_LR_INVERSE_TIME: return o->learning_rate / (1 + s->decay_rate * p);
  case KDC_LR_PIECEWISE:
    for (int i = 0; i < s->n_boundaries; i++)
      if (step <= s->boundaries[i]) return s->values[i];
    return s->values[s->n_boundaries];
  case KDC_LR_COSINE: {
    double lr0 = o->learning_rate, st = step, warm = s->warmup ? s->warmup_steps : 0;
    st = fmin(st, s->decay_steps + warm);
    if (s->warmup && st < warm) return lr0 + (s->warmup_target - lr0) * st / warm;
    double from = s->warmup ? s->warmup_target : lr0;
    double c = 0.5 * (1 + cos(M_PI_REF * (st - warm) / s->decay_steps));
    return from * ((1 - s->alpha) * c + s->alpha);
  }
  case KDC_LR_COSINE_RESTARTS: {
    double frac = step / s->decay_steps, i, len = 1;
    if (s->t_mul == 1) {
      i = floor(frac);
      frac -= i;
    } else { /* walk the periods: lengths 1, t, t^2, ... (in first_decay_steps) */
      i = 0;
      while (frac >= len) frac -= len, len *= s->t_mul, i++;
      frac /= len;
    }
    double c = 0.5 * pow(s->m_mul, i) * (1 + cos(M_PI_REF * frac));
    return o->learning_rate * ((1 - s->alpha) * c + s->alpha);
  }
  case KDC_LR_POLYNOMIAL: {
    double st = step, ds = s->decay_steps;
    if (s->cycle) ds *= step == 0 ? 1 : ceil(st / ds);
    else st = fmin(st, ds);
    return (o->learning_rate - s->end_learning_rate) * pow(1 - st / ds, s->power) +
           s->end_learning_rate;
  }
  }
  return NAN;
}

/* f(var, grad, iteration, slots...) = (new var, new slots..., iteration + 1, lr) */
static kdc_func *step_func(kdc_module *m, const kdc_optimizer_options *o, int *out_slots) {
  kdc_func *f = kdc_ir_func_create(m, "step");
  kdc_type t = tr_type(2, 2, 3), it = kdc_type_make(KDC_DTYPE_I32, 0, NULL);
  kdc_value_id var = kdc_ir_parameter(f, KDC_PARAM_WEIGHT, "v", &t);
  kdc_value_id g = kdc_ir_parameter(f, KDC_PARAM_INPUT, "g", &t);
  kdc_value_id iter = kdc_ir_parameter(f, KDC_PARAM_STATE, "iteration", &it);
  const char *names[4];
  int ns = kdc_optimizer_slots(o, names);
  kdc_value_id slots[4], new_slots[4], new_var;
  for (int s = 0; s < ns; s++) slots[s] = kdc_ir_parameter(f, KDC_PARAM_STATE, names[s], &t);
  kdc_value_id lr = kdc_optimizer_learning_rate(f, o, iter);
  tr_expect_ok(kdc_ir_take_error(f));
  tr_expect_ok(kdc_optimizer_update(f, o, iter, lr, var, g, slots, &new_var, new_slots));
  kdc_ir_add_result(f, new_var, "v");
  for (int s = 0; s < ns; s++) kdc_ir_add_result(f, new_slots[s], names[s]);
  kdc_ir_add_result(f, kdc_ir_binary_scalar(f, KDC_OP_ADD, iter, 1), "iteration");
  kdc_ir_add_result(f, lr, "lr");
  tr_expect_ok(kdc_ir_take_error(f));
  tr_expect_ok(kdc_ir_verify(f));
  *out_slots = ns;
  return f;
}

static void run_steps(const char *what, const kdc_optimizer_options *o) {
  tr_expect_ok(kdc_optimizer_options_check(o));
  kdc_module *m = kdc_ir_module_create("o");
  int ns;
  kdc_func *f = step_func(m, o, &ns);
  kdc_type t = tr_type(2, 2, 3), it = kdc_type_make(KDC_DTYPE_I32, 0, NULL);
  float var[N], g[N], slots[3][N] = {{0}};
  double rvar[N], rslots[3][N] = {{0}}, rg[N];
  int32_t iter = 0;
  double lr_sum = 0;
  tr_seed(11);
  for (int i = 0; i < N; i++) rvar[i] = var[i] = (float)tr_rand(-1, 1);
  for (int step = 0; step < STEPS; step++) {
    for (int i = 0; i < N; i++) rg[i] = g[i] = (float)(tr_rand(-2, 2) * g_scale);
    kdc_tensor args[6] = {{t, var}, {t, g}, {it, &iter}};
    for (int s = 0; s < ns; s++) args[3 + s] = (kdc_tensor){t, slots[s]};
    kdc_tensor out[6];
    tr_run(f, args, 3 + (size_t)ns, out);
    double lr = ref_lr(o, iter);
    TR_CLOSE(*(float *)out[ns + 2].data, lr, 1e-6, 0, "%s: lr at step %d", what, step);
    ref_step(o, iter, lr, rvar, rg, rslots);
    lr_sum += lr;
    double atol = 1e-7 + 1e-5 * lr_sum;
    memcpy(var, out[0].data, sizeof var);
    for (int s = 0; s < ns; s++) memcpy(slots[s], out[1 + s].data, sizeof slots[s]);
    iter = *(int32_t *)out[ns + 1].data;
    assert_int_equal(iter, step + 1);
    tr_free(out, f->n_results);
    for (int i = 0; i < N; i++) {
      TR_CLOSE(var[i], rvar[i], 1e-5, atol, "%s: step %d var[%d]", what, step, i);
      for (int s = 0; s < ns; s++)
        TR_CLOSE(slots[s][i], rslots[s][i], 1e-5, atol, "%s: step %d slot %d[%d]", what, step, s,
                 i);
    }
  }
  kdc_ir_module_destroy(m);
}

static void test_sgd(void **state) {
  (void)state;
  kdc_optimizer_options o;
  kdc_optimizer_options_init(&o, KDC_OPT_SGD);
  assert_true(o.learning_rate == 0.01 && o.momentum == 0 && !o.nesterov);
  run_steps("sgd", &o);
  o.momentum = 0.9;
  run_steps("sgd momentum", &o);
  o.nesterov = true;
  run_steps("sgd nesterov", &o);
  o.weight_decay = 0.01;
  run_steps("sgd nesterov weight decay", &o);
}

static void test_adam(void **state) {
  (void)state;
  kdc_optimizer_options o;
  kdc_optimizer_options_init(&o, KDC_OPT_ADAM);
  assert_true(o.learning_rate == 0.001 && o.beta_1 == 0.9 && o.beta_2 == 0.999 &&
              o.epsilon == 1e-7 && o.weight_decay == 0);
  run_steps("adam", &o);
  o.learning_rate = 0.05;
  o.amsgrad = true;
  run_steps("adam amsgrad", &o);
  kdc_optimizer_options_init(&o, KDC_OPT_ADAMW);
  assert_true(o.weight_decay == 0.004);
  run_steps("adamw", &o);
  o.learning_rate = 0.1;
  run_steps("adamw lr 0.1", &o);
}

static void test_rmsprop(void **state) {
  (void)state;
  kdc_optimizer_options o;
  kdc_optimizer_options_init(&o, KDC_OPT_RMSPROP);
  assert_true(o.rho == 0.9 && o.momentum == 0 && !o.centered && o.epsilon == 1e-7);
  run_steps("rmsprop", &o);
  o.momentum = 0.5;
  o.centered = true;
  run_steps("rmsprop momentum centered", &o);
  /* Tiny gradients: v ~ 1e-10, where Keras' sqrt(v + eps) and the textbook
   * sqrt(v) + eps differ tenfold. */
  kdc_optimizer_options_init(&o, KDC_OPT_RMSPROP);
  g_scale = 1e-4;
  run_steps("rmsprop tiny gradients", &o);
  g_scale = 1.0;
}

static void test_schedules(void **state) {
  (void)state;
  kdc_optimizer_options o;
  kdc_optimizer_options_init(&o, KDC_OPT_SGD);
  o.learning_rate = 0.1;
  o.schedule.kind = KDC_LR_EXPONENTIAL;
  o.schedule.decay_steps = 2;
  o.schedule.decay_rate = 0.5;
  run_steps("exponential", &o);
  o.schedule.staircase = true;
  run_steps("exponential staircase", &o);
  o.schedule.kind = KDC_LR_INVERSE_TIME;
  run_steps("inverse time staircase", &o);
  o.schedule.staircase = false;
  run_steps("inverse time", &o);
  static const int64_t bounds[2] = {0, 1};
  static const double vals[3] = {0.3, 0.2, 0.05};
  o.schedule.kind = KDC_LR_PIECEWISE;
  o.schedule.n_boundaries = 2;
  o.schedule.boundaries = bounds;
  o.schedule.values = vals;
  run_steps("piecewise", &o); /* steps 0, 1, 2 hit all three values */
}

/* The learning rate of |o| at every step 0..n-1 (an IR function of the
 * iteration, interpreted) against ref_lr in double: relative 2e-6, plus
 * 2e-7 of the largest rate absolute (f32 rounding of 1 + cos near -1 at the
 * end of a cosine period, an ulp of the unit scale). */
static void lr_curve(const char *what, const kdc_optimizer_options *o, int n) {
  tr_expect_ok(kdc_optimizer_options_check(o));
  kdc_module *m = kdc_ir_module_create("lr");
  kdc_func *f = kdc_ir_func_create(m, "lr");
  kdc_type it = kdc_type_make(KDC_DTYPE_I32, 0, NULL);
  kdc_value_id iter = kdc_ir_parameter(f, KDC_PARAM_STATE, "iteration", &it);
  kdc_ir_add_result(f, kdc_optimizer_learning_rate(f, o, iter), "lr");
  tr_expect_ok(kdc_ir_take_error(f));
  tr_expect_ok(kdc_ir_verify(f));
  for (int32_t step = 0; step < n; step++) {
    kdc_tensor args[1] = {{it, &step}}, out[1];
    tr_run(f, args, 1, out);
    double want = ref_lr(o, step);
    double scale = fmax(o->learning_rate, o->schedule.warmup ? o->schedule.warmup_target : 0);
    TR_CLOSE(*(float *)out[0].data, want, 2e-6, 2e-7 * scale, "%s: lr at step %d", what, step);
    tr_free(out, 1);
  }
  kdc_ir_module_destroy(m);
}

/* CosineDecay (+ warmup), CosineDecayRestarts (geometric and constant
 * periods) and PolynomialDecay (+ cycle), over steps that cross the decay
 * end, the warmup end, the restarts and the cycles. */
static void test_schedule_curves(void **state) {
  (void)state;
  kdc_optimizer_options o;
  kdc_optimizer_options_init(&o, KDC_OPT_SGD);
  o.learning_rate = 0.1;
  o.schedule.kind = KDC_LR_COSINE;
  o.schedule.decay_steps = 10;
  o.schedule.alpha = 0.1;
  lr_curve("CosineDecay", &o, 16); /* constant alpha * lr after step 10 */
  o.learning_rate = 0.0;
  o.schedule.alpha = 0;
  o.schedule.warmup = true;
  o.schedule.warmup_target = 0.1;
  o.schedule.warmup_steps = 5;
  lr_curve("CosineDecay warmup", &o, 20); /* ramp to 5, decay to 15 */
  memset(&o.schedule, 0, sizeof o.schedule);
  o.learning_rate = 0.1;
  o.schedule.kind = KDC_LR_COSINE_RESTARTS;
  o.schedule.decay_steps = 4;
  o.schedule.t_mul = 2;
  o.schedule.m_mul = 0.5;
  o.schedule.alpha = 0.05;
  lr_curve("CosineDecayRestarts t_mul 2", &o, 30); /* restarts at 4, 12, 28 */
  o.schedule.t_mul = 1;
  o.schedule.m_mul = 0.8;
  lr_curve("CosineDecayRestarts t_mul 1", &o, 14); /* restarts every 4 */
  memset(&o.schedule, 0, sizeof o.schedule);
  o.schedule.kind = KDC_LR_POLYNOMIAL;
  o.schedule.decay_steps = 8;
  o.schedule.end_learning_rate = 0.01;
  o.schedule.power = 2;
  lr_curve("PolynomialDecay", &o, 12);
  o.schedule.cycle = true;
  o.schedule.power = 0.5;
  lr_curve("PolynomialDecay cycle", &o, 20); /* periods 8, 16, 24 */
}

static void test_names_and_checks(void **state) {
  (void)state;
  kdc_optimizer_kind k;
  assert_true(kdc_optimizer_from_name("Adam", &k) && k == KDC_OPT_ADAM);
  assert_true(kdc_optimizer_from_name("sgd", &k) && k == KDC_OPT_SGD);
  assert_false(kdc_optimizer_from_name("lamb", &k));
  assert_string_equal(kdc_optimizer_name(KDC_OPT_SGD), "SGD");
  kdc_optimizer_options o;
  kdc_optimizer_options_init(&o, KDC_OPT_ADAM);
  o.beta_1 = 1.0;
  kdc_status st = kdc_optimizer_options_check(&o);
  assert_int_equal(kdc_status_code(st), KDC_INVALID_INPUT);
  kdc_status_free(st);
  kdc_optimizer_options_init(&o, KDC_OPT_SGD);
  o.learning_rate = 0;
  st = kdc_optimizer_options_check(&o);
  assert_int_equal(kdc_status_code(st), KDC_INVALID_INPUT);
  kdc_status_free(st);
  kdc_optimizer_options_init(&o, KDC_OPT_SGD);
  o.schedule.kind = KDC_LR_EXPONENTIAL; /* decay_steps 0 */
  st = kdc_optimizer_options_check(&o);
  assert_non_null(strstr(kdc_status_message(st), "decay_steps"));
  kdc_status_free(st);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_sgd),       cmocka_unit_test(test_adam),
      cmocka_unit_test(test_rmsprop),   cmocka_unit_test(test_schedules),
      cmocka_unit_test(test_schedule_curves),
      cmocka_unit_test(test_names_and_checks),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
