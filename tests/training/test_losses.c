/*
 * Losses (passes/losses.c) against references computed here in double from
 * the Keras 3 formulas (keras/src/losses/losses.py, backend/jax/nn.py), on
 * fixed data that also hits the clipping (probabilities 0 and 1), soft
 * labels, unnormalised probability rows and an out-of-range sparse label.
 * Tolerance: relative 1e-5 plus 1e-6 absolute (f32 IR vs double reference).
 * Also: the gradients of the from_logits cross-entropies against their
 * closed forms ((softmax - t) / B, (sigmoid - t) / (B C)).
 */
#include "tr_test.h"

#define EPS 1e-7

enum { B = 4, C = 3 };

static const float P_PROB[B * C] = {0.2f, 0.7f, 0.1f, 0.0f, 1.0f, 0.5f,
                                    0.9f, 0.05f, 0.3f, 0.6f, 0.6f, 0.6f};
static const float P_LOGIT[B * C] = {1.5f, -0.5f, 0.2f, -3.0f, 2.5f, 0.0f,
                                     0.7f, 0.7f, -1.2f, 4.0f, -4.0f, 0.1f};
static const float T_ONEHOT[B * C] = {0, 1, 0, 1, 0, 0, 0, 0, 1, 0.2f, 0.5f, 0.3f};
static const float T_BIN[B * C] = {1, 0, 1, 0, 1, 1, 0.3f, 0, 1, 1, 0, 0.5f};
static const int32_t T_SPARSE[B] = {1, 0, 2, 3}; /* 3 is out of range: an all-zero row */

static double clip(double x) { return x < EPS ? EPS : x > 1 - EPS ? 1 - EPS : x; }

static double ref_loss(kdc_loss_kind k, bool logits, const float *p, const float *t,
                       const int32_t *ts) {
  double total = 0;
  for (int b = 0; b < B; b++) {
    const float *pr = p + b * C;
    double row = 0, sum = 0, mx = -INFINITY, lse = 0, tt[C];
    for (int c = 0; c < C; c++) {
      tt[c] = ts ? (ts[b] == c) : t[b * C + c];
      sum += pr[c];
      mx = fmax(mx, pr[c]);
    }
    for (int c = 0; c < C; c++) lse += exp(pr[c] - mx);
    lse = log(lse);
    for (int c = 0; c < C; c++) {
      double x = pr[c], y = tt[c];
      switch (k) {
      case KDC_LOSS_MSE: row += (y - x) * (y - x) / C; break;
      case KDC_LOSS_MAE: row += fabs(y - x) / C; break;
      case KDC_LOSS_BCE:
        if (logits) row += (y * log1p(exp(-x)) + (1 - y) * log1p(exp(x))) / C;
        else row += -(y * log(clip(x)) + (1 - y) * log(1 - clip(x))) / C;
        break;
      default: /* CCE, SCCE */
        row += -y * (logits ? x - mx - lse : log(clip(x / sum)));
        break;
      }
    }
    total += row;
  }
  return total / B;
}

/* Builds f(pred, labels) = loss and, with |grad|, d loss / d pred too. */
static kdc_func *loss_func(kdc_module *m, kdc_loss_kind k, bool logits, const kdc_type *pt,
                           bool grad) {
  kdc_func *f = kdc_ir_func_create(m, "loss");
  kdc_value_id p = kdc_ir_parameter(f, KDC_PARAM_INPUT, "p", pt);
  kdc_type lt = kdc_loss_label_type(k, pt);
  kdc_value_id t = kdc_ir_parameter(f, KDC_PARAM_LABEL, "t", &lt);
  kdc_value_id loss, g;
  tr_expect_ok(kdc_loss_build(f, k, logits, t, p, &loss));
  kdc_ir_add_result(f, loss, "loss");
  if (grad) {
    tr_expect_ok(kdc_autodiff(f, loss, &p, 1, &g));
    kdc_ir_add_result(f, g, "grad");
  }
  tr_expect_ok(kdc_ir_verify(f));
  return f;
}

static void check(kdc_loss_kind k, bool logits) {
  kdc_module *m = kdc_ir_module_create("l");
  kdc_type pt = tr_type(2, B, C);
  kdc_func *f = loss_func(m, k, logits, &pt, false);
  const float *p = logits ? P_LOGIT : P_PROB;
  const float *t = k == KDC_LOSS_BCE ? T_BIN : T_ONEHOT;
  kdc_type lt = kdc_loss_label_type(k, &pt);
  kdc_tensor args[2] = {{pt, (void *)p}, {lt, k == KDC_LOSS_SCCE ? (void *)T_SPARSE : (void *)t}};
  kdc_tensor out[1];
  tr_run(f, args, 2, out);
  assert_int_equal(out[0].type.rank, 0);
  double want = ref_loss(k, logits, p, t, k == KDC_LOSS_SCCE ? T_SPARSE : NULL);
  TR_CLOSE(*(float *)out[0].data, want, 1e-5, 1e-6, "%s from_logits=%d", kdc_loss_name(k), logits);
  tr_free(out, 1);
  kdc_ir_module_destroy(m);
}

static void test_regression(void **state) {
  (void)state;
  check(KDC_LOSS_MSE, false);
  check(KDC_LOSS_MAE, false);
}

static void test_binary(void **state) {
  (void)state;
  check(KDC_LOSS_BCE, false);
  check(KDC_LOSS_BCE, true);
}

static void test_categorical(void **state) {
  (void)state;
  check(KDC_LOSS_CCE, false);
  check(KDC_LOSS_CCE, true);
  check(KDC_LOSS_SCCE, false);
  check(KDC_LOSS_SCCE, true);
}

/* Rank 3 ([2,3,4]: mean over 6 per-position values) and rank 1 ([5]: the
 * per-sample mean is already the loss). */
static void test_ranks(void **state) {
  (void)state;
  kdc_module *m = kdc_ir_module_create("l");
  kdc_type p3 = tr_type(3, 2, 3, 4), p1 = tr_type(1, 5);
  kdc_func *f3 = loss_func(m, KDC_LOSS_MSE, false, &p3, false);
  kdc_func *f1 = loss_func(m, KDC_LOSS_MAE, false, &p1, false);
  float a[24], b[24];
  double want3 = 0, want1 = 0;
  tr_seed(7);
  for (int i = 0; i < 24; i++) {
    a[i] = (float)tr_rand(-2, 2);
    b[i] = (float)tr_rand(-2, 2);
    want3 += ((double)a[i] - b[i]) * ((double)a[i] - b[i]) / 24;
    if (i < 5) want1 += fabs((double)a[i] - b[i]) / 5;
  }
  kdc_tensor args3[2] = {{p3, a}, {p3, b}}, args1[2] = {{p1, a}, {p1, b}}, out[1];
  tr_run(f3, args3, 2, out);
  TR_CLOSE(*(float *)out[0].data, want3, 1e-5, 1e-6, "mse rank 3");
  tr_free(out, 1);
  tr_run(f1, args1, 2, out);
  TR_CLOSE(*(float *)out[0].data, want1, 1e-5, 1e-6, "mae rank 1");
  tr_free(out, 1);
  kdc_ir_module_destroy(m);
}

static void test_logit_gradients(void **state) {
  (void)state;
  kdc_module *m = kdc_ir_module_create("l");
  kdc_type pt = tr_type(2, B, C);
  kdc_func *fc = loss_func(m, KDC_LOSS_CCE, true, &pt, true);
  kdc_func *fb = loss_func(m, KDC_LOSS_BCE, true, &pt, true);
  kdc_tensor args_c[2] = {{pt, (void *)P_LOGIT}, {pt, (void *)T_ONEHOT}};
  kdc_tensor args_b[2] = {{pt, (void *)P_LOGIT}, {pt, (void *)T_BIN}}, out[2];
  tr_run(fc, args_c, 2, out);
  const float *g = out[1].data;
  for (int b = 0; b < B; b++) {
    double mx = -INFINITY, s = 0;
    for (int c = 0; c < C; c++) mx = fmax(mx, P_LOGIT[b * C + c]);
    for (int c = 0; c < C; c++) s += exp(P_LOGIT[b * C + c] - mx);
    double tsum = 0;
    for (int c = 0; c < C; c++) tsum += T_ONEHOT[b * C + c];
    for (int c = 0; c < C; c++) {
      double sm = exp(P_LOGIT[b * C + c] - mx) / s;
      double want = (sm * tsum - T_ONEHOT[b * C + c]) / B;
      TR_CLOSE(g[b * C + c], want, 1e-5, 1e-6, "cce grad %d,%d", b, c);
    }
  }
  tr_free(out, 2);
  tr_run(fb, args_b, 2, out);
  g = out[1].data;
  for (int i = 0; i < B * C; i++) {
    double sg = 1 / (1 + exp(-(double)P_LOGIT[i]));
    TR_CLOSE(g[i], (sg - T_BIN[i]) / (B * C), 1e-5, 1e-7, "bce grad %d", i);
  }
  tr_free(out, 2);
  kdc_ir_module_destroy(m);
}

/* Logits far beyond exp's f32 range (|x| > 88), as a padded row of a
 * partial batch can have: binary cross-entropy from logits and its
 * gradient stay finite and exact.  The branch of log_sigmoid not taken
 * once computed log1p(exp(100)) = inf, and its zero cotangent times
 * exp(100) made the gradient 0 * inf = NaN. */
static void test_extreme_logits(void **state) {
  (void)state;
  static const float x[B * C] = {100, -100, 89, -89, 1000, -1000, 88.5f, 200, -200, 0, 50, -50};
  kdc_module *m = kdc_ir_module_create("l");
  kdc_type pt = tr_type(2, B, C);
  kdc_func *fb = loss_func(m, KDC_LOSS_BCE, true, &pt, true);
  kdc_tensor args[2] = {{pt, (void *)x}, {pt, (void *)T_BIN}}, out[2];
  tr_run(fb, args, 2, out);
  double want = 0;
  for (int i = 0; i < B * C; i++) { /* softplus(-x) y + softplus(x) (1 - y), stable */
    double a = x[i], sp = fmax(a, 0) + log1p(exp(-fabs(a))), sn = sp - a;
    want += (T_BIN[i] * sn + (1 - T_BIN[i]) * sp) / (B * C);
  }
  TR_CLOSE(*(float *)out[0].data, want, 1e-5, 1e-6, "bce from logits, extreme logits");
  const float *g = out[1].data;
  for (int i = 0; i < B * C; i++) {
    double sg = 1 / (1 + exp(-(double)x[i]));
    assert_true(isfinite(g[i]));
    TR_CLOSE(g[i], (sg - T_BIN[i]) / (B * C), 1e-5, 1e-7, "bce grad %d (logit %g)", i, x[i]);
  }
  tr_free(out, 2);
  kdc_ir_module_destroy(m);
}

static void test_names_and_errors(void **state) {
  (void)state;
  kdc_loss_kind k;
  assert_true(kdc_loss_from_name("mse", &k) && k == KDC_LOSS_MSE);
  assert_true(kdc_loss_from_name("sparse_categorical_crossentropy", &k) && k == KDC_LOSS_SCCE);
  assert_true(kdc_loss_from_name("BinaryCrossentropy", &k) && k == KDC_LOSS_BCE);
  assert_false(kdc_loss_from_name("hinge", &k));
  kdc_module *m = kdc_ir_module_create("l");
  kdc_func *f = kdc_ir_func_create(m, "loss");
  kdc_type pt = tr_type(2, B, C), bad = tr_type(2, B, C + 1);
  kdc_value_id p = kdc_ir_parameter(f, KDC_PARAM_INPUT, "p", &pt);
  kdc_value_id t = kdc_ir_parameter(f, KDC_PARAM_LABEL, "t", &bad), loss;
  kdc_status st = kdc_loss_build(f, KDC_LOSS_CCE, false, t, p, &loss);
  assert_int_equal(kdc_status_code(st), KDC_INVALID_INPUT);
  assert_non_null(strstr(kdc_status_message(st), "f32[4,4]"));
  kdc_status_free(st);
  kdc_ir_module_destroy(m);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_regression),      cmocka_unit_test(test_binary),
      cmocka_unit_test(test_categorical),     cmocka_unit_test(test_ranks),
      cmocka_unit_test(test_logit_gradients), cmocka_unit_test(test_names_and_errors),
      cmocka_unit_test(test_extreme_logits),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
