/*
 * Learning-rate schedules read from a Keras 3 compile_config (tools/
 * compile_config.c; docs/training.md "Optimizers").  The per-step formulas
 * are checked in double by tests/training/test_optimizers.c; here every
 * Keras 3 schedule class goes through `kdc compile` with all its config
 * arguments, and each argument's effect is observed in training.
 *
 * Method: tests/e2e/data/two_heads.json with loss {"reg": "mse"}, SGD,
 * one 8-row batch per epoch, the same batch every step.  With SGD a step
 * with learning rate 0 leaves the weights unchanged, so the next batch loss
 * repeats exactly; any other rate changes it.  Steps whose rate is 0 or
 * not follow from Keras' formulas by hand (comments per case).
 * PiecewiseConstantDecay is also checked against chained constant-rate
 * plans: boundaries [1, 3], values [0.1, 0.05, 0] trains steps 0-1 at 0.1,
 * 2-3 at 0.05, then stands still; the final weights equal 2 steps of a 0.1
 * plan followed by 2 steps of a 0.05 plan (--initial-weights), bitwise.
 * Errors: a missing required argument, an argument the class does not have,
 * a wrong type, bad boundaries, --learning-rate with a piecewise schedule:
 * one-line errors naming the key, exit 2, no plan written.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/io.h"
#include "e2e_fit_util.h"
#include "e2e_util.h"

enum { ROWS = 8, IN = 6, R = 2 };

static float xs[ROWS * IN], yr[ROWS * R];

static void setup_data(void) {
  uint64_t s = 777;
  for (int i = 0; i < ROWS * IN; i++) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    xs[i] = (float)((double)(s >> 11) / 9007199254740992.0 * 2 - 1);
  }
  for (int i = 0; i < ROWS * R; i++) yr[i] = xs[i] * 0.7f - xs[i + 2] * 0.3f;
}

/* two_heads.json with compile_config {"optimizer": SGD(learning_rate =
 * |lr|), "loss": {"reg": "mse"}} spliced in; |lr| is JSON. */
static char *model_with(const char *name, const char *lr) {
  char *src = e2e_src("tests/e2e/data/two_heads.json"), cc[1536];
  snprintf(cc, sizeof cc, "\"optimizer\": {\"module\": \"keras.optimizers\", \"class_name\": "
           "\"SGD\", \"config\": {\"name\": \"SGD\", \"learning_rate\": %s, \"momentum\": 0.0}}, "
           "\"loss\": {\"reg\": \"mse\"}", lr);
  char *path = e2e_with_compile_config(src, name, cc);
  free(src);
  return path;
}

/* A schedule object of class |cls| with config |cfg| (JSON members). */
static char *sched(const char *name, const char *cls, const char *cfg) {
  char lr[1024];
  snprintf(lr, sizeof lr, "{\"module\": \"keras.optimizers.schedules\", \"class_name\": \"%s\", "
           "\"config\": {%s, \"name\": \"%s\"}, \"registered_name\": null}", cls, cfg, cls);
  return model_with(name, lr);
}

static char *compile_ok(const char *model, const char *plan_name) {
  char *plan = e2e_path(plan_name);
  e2e_result r;
  e2e_kdc(&r, "compile", model, "--random-init", "--seed", "5", "--batch", "8", "-o", plan, NULL);
  if (r.status) fprintf(stderr, "%s: %s", model, r.err);
  assert_int_equal(r.status, 0);
  return plan;
}

/* Trains |cls|(|cfg|) for |steps| steps of the same batch; |still| has a
 * '0' at step s when the rate of step s is 0 (batch loss s+1 == loss s) and
 * '+' when it is not ('.' = not checked). */
static void check_steps(const char *cls, const char *cfg, const char *still) {
  char *model = sched("sched.json", cls, cfg), *plan = compile_ok(model, "sched.plan");
  int steps = (int)strlen(still) + 1;
  const void *arrays[2] = {xs, yr};
  e2e_run r;
  e2e_fit(plan, arrays, ROWS, 0, 0, steps, NULL, NULL, &r);
  for (int s = 0; s + 1 < steps; s++) {
    float a = r.h.batch_loss[s], b = r.h.batch_loss[s + 1];
    if (still[s] == '.') continue;
    if ((still[s] == '0') != (a == b))
      fail_msg("%s {%s}: step %d: batch loss %.9g then %.9g, expected rate %s", cls, cfg, s, a, b,
               still[s] == '0' ? "0" : "> 0");
  }
  e2e_run_free(&r);
  free(model), free(plan);
}

static void test_every_class(void **state) {
  (void)state;
  setup_data();
  /* staircase: floor(step / 4) = 0 for steps 0-3, so 0.1 * 0^0 = 0.1; from
   * step 4, 0.1 * 0^1 = 0.  Without staircase, 0^(1/4) = 0 already at 1. */
  check_steps("ExponentialDecay", "\"initial_learning_rate\": 0.1, \"decay_steps\": 4, "
              "\"decay_rate\": 0.0, \"staircase\": true", "++++00");
  check_steps("ExponentialDecay", "\"initial_learning_rate\": 0.1, \"decay_steps\": 4, "
              "\"decay_rate\": 0.0, \"staircase\": false", "+00");
  /* InverseTimeDecay with decay_rate 1e30: 0.1 / (1 + 1e30 k) is ~1e-31 for
   * k > 0, an update far below the weights' rounding ('0'); staircase keeps
   * k = floor(step / 2) = 0 for steps 0 and 1. */
  check_steps("InverseTimeDecay", "\"initial_learning_rate\": 0.1, \"decay_steps\": 2, "
              "\"decay_rate\": 1e30, \"staircase\": true", "++00");
  check_steps("InverseTimeDecay", "\"initial_learning_rate\": 0.1, \"decay_steps\": 2, "
              "\"decay_rate\": 1e30, \"staircase\": false", "+00");
  /* PolynomialDecay to end 0 over 2 steps, power 1: steps 0, 1 > 0, then 0
   * without cycle; with cycle, step 2: decay_steps 2 * ceil(2/2) = 2, rate
   * 0; step 3: 2 * ceil(3/2) = 4, rate 0.1 * (1 - 3/4) > 0. */
  check_steps("PolynomialDecay", "\"initial_learning_rate\": 0.1, \"decay_steps\": 2, "
              "\"end_learning_rate\": 0.0, \"power\": 1.0, \"cycle\": false", "++00");
  check_steps("PolynomialDecay", "\"initial_learning_rate\": 0.1, \"decay_steps\": 2, "
              "\"end_learning_rate\": 0.0, \"power\": 1.0, \"cycle\": true", "++0+");
  /* power 2 vs 1 (end 0.05): never 0 */
  check_steps("PolynomialDecay", "\"initial_learning_rate\": 0.1, \"decay_steps\": 2, "
              "\"end_learning_rate\": 0.05, \"power\": 2.0, \"cycle\": false", "++++");
  /* CosineDecay with warmup from 0 to 0.1 over 2 steps: step 0 rate 0, step
   * 1 0.05; then the decay over 1 step to alpha * 0.1: 0 with alpha 0 from
   * step 3 = warmup_steps + decay_steps on; alpha 0.5 keeps 0.05. */
  check_steps("CosineDecay", "\"initial_learning_rate\": 0.0, \"decay_steps\": 1, "
              "\"alpha\": 0.0, \"warmup_target\": 0.1, \"warmup_steps\": 2", "0++00");
  check_steps("CosineDecay", "\"initial_learning_rate\": 0.0, \"decay_steps\": 1, "
              "\"alpha\": 0.5, \"warmup_target\": 0.1, \"warmup_steps\": 2", "0++++");
  /* without warmup_target, warmup_steps is ignored (Keras): 0.1 at step 0,
   * then alpha * 0.1 = 0 */
  check_steps("CosineDecay", "\"initial_learning_rate\": 0.1, \"decay_steps\": 1, "
              "\"alpha\": 0.0, \"warmup_target\": null, \"warmup_steps\": 5", "+00");
  /* CosineDecayRestarts, first period 1 step: step 0 the full rate, then
   * period i >= 1 scaled by m_mul^i: 0 with m_mul 0 (alpha 0); with m_mul
   * 1 every period restarts at the full rate. */
  check_steps("CosineDecayRestarts", "\"initial_learning_rate\": 0.1, \"first_decay_steps\": 1, "
              "\"t_mul\": 1.0, \"m_mul\": 0.0, \"alpha\": 0.0", "+00");
  check_steps("CosineDecayRestarts", "\"initial_learning_rate\": 0.1, \"first_decay_steps\": 1, "
              "\"t_mul\": 1.0, \"m_mul\": 1.0, \"alpha\": 0.0", "+++");
}

/* Copies one state tensor of a run, by name. */
static const float *state_of(const e2e_run *r, const char *name, uint64_t *bytes) {
  for (size_t k = 0; k < r->n_state; k++)
    if (!strcmp(r->names[k], name)) {
      *bytes = r->bytes[k];
      return r->state[k];
    }
  fail_msg("no state %s", name);
  return NULL;
}

static void test_piecewise(void **state) {
  (void)state;
  setup_data();
  char *m = sched("pw.json", "PiecewiseConstantDecay",
                  "\"boundaries\": [1, 3], \"values\": [0.1, 0.05, 0.0]");
  char *pw = compile_ok(m, "pw.plan");
  char *m1 = model_with("c1.json", "0.1"), *m2 = model_with("c2.json", "0.05");
  char *p1 = compile_ok(m1, "c1.plan"), *p2 = compile_ok(m2, "c2.plan");
  char *ck = e2e_path("pw.safetensors");
  const void *arrays[2] = {xs, yr};
  e2e_run a, b, c;
  e2e_fit(pw, arrays, ROWS, 0, 0, 6, NULL, NULL, &a);
  e2e_fit(p1, arrays, ROWS, 0, 0, 2, NULL, ck, &b);
  e2e_fit(p2, arrays, ROWS, 0, 0, 2, ck, NULL, &c);
  for (int s = 0; s < 4; s++) /* the same losses as the chained constant plans */
    assert_true(a.h.batch_loss[s] == (s < 2 ? b.h.batch_loss[s] : c.h.batch_loss[s - 2]));
  assert_true(a.h.batch_loss[5] == a.h.batch_loss[4]); /* rate 0 after the last boundary */
  static const char *const names[] = {"trunk/kernel", "trunk/bias", "reg/kernel", "reg/bias"};
  for (int k = 0; k < 4; k++) {
    uint64_t na = 0, nc = 0;
    const float *wa = state_of(&a, names[k], &na), *wc = state_of(&c, names[k], &nc);
    assert_int_equal(na, nc);
    assert_memory_equal(wa, wc, na);
  }
  float c0 = c.h.batch_loss[0];
  e2e_run_free(&a), e2e_run_free(&b), e2e_run_free(&c);
  /* float boundaries are cast to the integer step like Keras (1.9 -> 1) */
  free(m), free(pw);
  m = sched("pwf.json", "PiecewiseConstantDecay",
            "\"boundaries\": [1.9, 3.2], \"values\": [0.1, 0.05, 0.0]");
  pw = compile_ok(m, "pwf.plan");
  e2e_fit(pw, arrays, ROWS, 0, 0, 6, NULL, NULL, &a);
  assert_true(a.h.batch_loss[2] == c0 && a.h.batch_loss[4] == a.h.batch_loss[5]);
  e2e_run_free(&a);
  free(m), free(pw), free(m1), free(m2), free(p1), free(p2), free(ck);
}

/* `kdc compile` of |model| [--learning-rate 0.5] fails with exit 2, one
 * line containing |needle|, and writes no plan. */
static void expect_error(char *model, bool lr, const char *needle) {
  char *plan = e2e_path("bad.plan");
  e2e_result r;
  if (lr)
    e2e_kdc(&r, "compile", model, "--random-init", "--batch", "8", "--learning-rate", "0.5",
            "-o", plan, NULL);
  else
    e2e_kdc(&r, "compile", model, "--random-init", "--batch", "8", "-o", plan, NULL);
  if (r.status != 2 || !strstr(r.err, needle))
    fail_msg("expected exit 2 with \"%s\", got %d: %s", needle, r.status, r.err);
  assert_int_equal(e2e_lines(r.err), 1);
  assert_false(e2e_exists(plan));
  free(plan), free(model);
}

static void test_errors(void **state) {
  (void)state;
  expect_error(sched("e1.json", "ExponentialDecay",
                     "\"initial_learning_rate\": 0.1, \"decay_steps\": 4"),
               false, "learning_rate.config.decay_rate is required for ExponentialDecay");
  expect_error(sched("e2.json", "CosineDecay",
                     "\"initial_learning_rate\": 0.1, \"decay_steps\": 4, \"staircase\": true"),
               false, "learning_rate.config.staircase: CosineDecay has no such argument");
  expect_error(sched("e3.json", "PolynomialDecay",
                     "\"initial_learning_rate\": 0.1, \"decay_steps\": 4, \"cycle\": \"yes\""),
               false, "learning_rate.config.cycle: expected true or false");
  expect_error(sched("e4.json", "CosineDecayRestarts",
                     "\"initial_learning_rate\": 0.1, \"decay_steps\": 4"),
               false, "learning_rate.config.decay_steps: CosineDecayRestarts has no such argument");
  expect_error(sched("e5.json", "InverseTimeDecay", "\"decay_steps\": 4, \"decay_rate\": 0.5"),
               false, "learning_rate.config.initial_learning_rate is required");
  expect_error(sched("e6.json", "PiecewiseConstantDecay",
                     "\"boundaries\": [3, 3], \"values\": [0.1, 0.05, 0.0]"),
               false, "learning_rate.config.boundaries[1]: 3 is not greater");
  expect_error(sched("e7.json", "PiecewiseConstantDecay",
                     "\"boundaries\": [3], \"values\": [0.1, 0.05, 0.0]"),
               false, "1 boundaries and 3 values");
  expect_error(sched("e8.json", "PiecewiseConstantDecay",
                     "\"boundaries\": [3], \"values\": [0.1, \"x\"]"),
               false, "learning_rate.config.values[1]: expected a number");
  expect_error(sched("e9.json", "PiecewiseConstantDecay",
                     "\"boundaries\": [3], \"values\": [0.1, 0.01]"),
               true, "--learning-rate");
  expect_error(sched("e10.json", "ExponentialDecay",
                     "\"initial_learning_rate\": 0.1, \"decay_steps\": \"4\", \"decay_rate\": 0.5"),
               false, "learning_rate.config.decay_steps: expected a number");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_every_class),
      cmocka_unit_test(test_piecewise),
      cmocka_unit_test(test_errors),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
