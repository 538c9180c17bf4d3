/*
 * train_step and evaluate (passes/train_step.c) on an MNIST-MLP-shaped model
 * (Dense relu, Dense softmax, categorical_crossentropy, Adam): the ABI
 * (parameter and result order, kinds, names), three steps of train_step run
 * by the reference interpreter with its results fed back, against an
 * independent double-precision C forward / backward / Adam written here.
 * Tolerance: relative 1e-5, plus 1e-5 of the summed learning rates absolute
 * for the weights (see test_optimizers.c: Keras' own f32 1 - beta^t).
 * Also: evaluate's loss, train_step after simplify, non-trainable weights,
 * sparse labels, train_forward's step counter, and errors.
 */
#include "tr_test.h"

enum { B = 8, IN = 20, H = 16, OUT = 5, STEPS = 3 };

typedef struct mlp {
  double w1[IN * H], b1[H], w2[H * OUT], b2[OUT];
} mlp;

/* predict(x) = softmax(relu(x W1 + b1) W2 + b2), weights as module data. */
static kdc_module *build_mlp(const mlp *init, bool d2_trainable) {
  kdc_module *m = kdc_ir_module_create("mlp");
  kdc_func *f = kdc_ir_func_create(m, "predict");
  kdc_type xt = tr_type(2, B, IN), w1t = tr_type(2, IN, H), b1t = tr_type(1, H);
  kdc_type w2t = tr_type(2, H, OUT), b2t = tr_type(1, OUT);
  float buf[IN * H];
  const double *src[4] = {init->w1, init->b1, init->w2, init->b2};
  const kdc_type *ts[4] = {&w1t, &b1t, &w2t, &b2t};
  const char *names[4] = {"d1/kernel", "d1/bias", "d2/kernel", "d2/bias"};
  kdc_value_id x = kdc_ir_parameter(f, KDC_PARAM_INPUT, "x", &xt), w[4];
  for (int i = 0; i < 4; i++) {
    for (int64_t k = 0; k < kdc_type_numel(ts[i]); k++) buf[k] = (float)src[i][k];
    kdc_weight *wt = kdc_ir_module_add_weight(m, names[i], ts[i], buf);
    wt->trainable = i < 2 || d2_trainable;
    w[i] = kdc_ir_parameter(f, KDC_PARAM_WEIGHT, names[i], ts[i]);
  }
  kdc_ir_set_origin(f, "layer d1");
  int64_t d1[2] = {B, H}, d2[2] = {B, OUT}, map1[1] = {1}, rows[1] = {0}, last = 1;
  kdc_value_id h = kdc_ir_binary(f, KDC_OP_ADD, kdc_ir_matmul(f, x, w[0]),
                                 kdc_ir_broadcast(f, w[1], 2, d1, map1));
  h = kdc_ir_binary_scalar(f, KDC_OP_MAX, h, 0.0);
  kdc_ir_set_origin(f, "layer d2");
  kdc_value_id z = kdc_ir_binary(f, KDC_OP_ADD, kdc_ir_matmul(f, h, w[2]),
                                 kdc_ir_broadcast(f, w[3], 2, d2, map1));
  kdc_value_id mx = kdc_ir_broadcast(f, kdc_ir_reduce(f, KDC_RED_MAX, z, 1, &last), 2, d2, rows);
  kdc_value_id e = kdc_ir_unary(f, KDC_OP_EXP, kdc_ir_binary(f, KDC_OP_SUB, z, mx));
  kdc_value_id s = kdc_ir_broadcast(f, kdc_ir_reduce(f, KDC_RED_SUM, e, 1, &last), 2, d2, rows);
  kdc_ir_add_result(f, kdc_ir_binary(f, KDC_OP_DIV, e, s), "d2");
  tr_expect_ok(kdc_ir_take_error(f));
  tr_expect_ok(kdc_ir_verify(f));
  return m;
}

static void init_mlp(mlp *p) {
  for (int i = 0; i < IN * H; i++) p->w1[i] = (float)tr_rand(-0.4, 0.4);
  for (int i = 0; i < H; i++) p->b1[i] = (float)tr_rand(-0.1, 0.1);
  for (int i = 0; i < H * OUT; i++) p->w2[i] = (float)tr_rand(-0.5, 0.5);
  for (int i = 0; i < OUT; i++) p->b2[i] = (float)tr_rand(-0.1, 0.1);
}

/* ---- the independent reference --------------------------------------------------- */

/* Loss of |p| on (x, t) and, if |g|, its gradients (softmax + CCE: dz = (q - t) / B). */
static double ref_forward_backward(const mlp *p, const float *x, const float *t, mlp *g) {
  double h[B * H], q[B * OUT], loss = 0;
  if (g) memset(g, 0, sizeof *g);
  for (int b = 0; b < B; b++) {
    for (int j = 0; j < H; j++) {
      double a = p->b1[j];
      for (int i = 0; i < IN; i++) a += x[b * IN + i] * p->w1[i * H + j];
      h[b * H + j] = a > 0 ? a : 0;
    }
    double z[OUT], mx = -INFINITY, s = 0;
    for (int k = 0; k < OUT; k++) {
      z[k] = p->b2[k];
      for (int j = 0; j < H; j++) z[k] += h[b * H + j] * p->w2[j * OUT + k];
      mx = fmax(mx, z[k]);
    }
    for (int k = 0; k < OUT; k++) s += exp(z[k] - mx);
    for (int k = 0; k < OUT; k++) {
      q[b * OUT + k] = exp(z[k] - mx) / s;
      loss -= t[b * OUT + k] * log(q[b * OUT + k]) / B;
    }
  }
  if (!g) return loss;
  for (int b = 0; b < B; b++) {
    double dz[OUT], dh[H];
    for (int k = 0; k < OUT; k++) dz[k] = (q[b * OUT + k] - t[b * OUT + k]) / B;
    for (int k = 0; k < OUT; k++) g->b2[k] += dz[k];
    for (int j = 0; j < H; j++) {
      dh[j] = 0;
      for (int k = 0; k < OUT; k++) {
        g->w2[j * OUT + k] += h[b * H + j] * dz[k];
        dh[j] += p->w2[j * OUT + k] * dz[k];
      }
      if (h[b * H + j] <= 0) dh[j] = 0;
      g->b1[j] += dh[j];
      for (int i = 0; i < IN; i++) g->w1[i * H + j] += x[b * IN + i] * dh[j];
    }
  }
  return loss;
}

/* Keras 3 Adam on every element of the flat mlp (m, v: same layout). */
static void ref_adam(double lr, int it, mlp *p, const mlp *g, mlp *m, mlp *v) {
  double *pp = (double *)p, *mm = (double *)m, *vv = (double *)v;
  const double *gg = (const double *)g;
  double t = it + 1, b1 = (float)0.9, b2 = (float)0.999;
  double alpha = lr * sqrt(1 - pow(b2, t)) / (1 - pow(b1, t));
  for (size_t i = 0; i < sizeof *p / sizeof(double); i++) {
    mm[i] += (gg[i] - mm[i]) * (1 - 0.9);
    vv[i] += (gg[i] * gg[i] - vv[i]) * (1 - 0.999);
    pp[i] -= mm[i] * alpha / (sqrt(vv[i]) + 1e-7);
  }
}

static void make_batch(float *x, float *t) {
  for (int i = 0; i < B * IN; i++) x[i] = (float)tr_rand(0, 1);
  memset(t, 0, sizeof(float) * B * OUT);
  for (int b = 0; b < B; b++) t[b * OUT + (int)tr_rand(0, OUT)] = 1.0f;
}

/* ---- tests ---------------------------------------------------------------------------- */

static const char *const W_NAMES[4] = {"d1/kernel", "d1/bias", "d2/kernel", "d2/bias"};

static void check_abi(const kdc_func *ts) {
  static const char *const params[] = {
      "x", "d1/kernel", "d1/bias", "d2/kernel", "d2/bias", "d2", "adam/iteration",
      "adam/d1_kernel_momentum", "adam/d1_bias_momentum", "adam/d2_kernel_momentum",
      "adam/d2_bias_momentum", "adam/d1_kernel_velocity", "adam/d1_bias_velocity",
      "adam/d2_kernel_velocity", "adam/d2_bias_velocity"};
  static const kdc_param_kind kinds[] = {KDC_PARAM_INPUT, KDC_PARAM_WEIGHT, KDC_PARAM_WEIGHT,
                                         KDC_PARAM_WEIGHT, KDC_PARAM_WEIGHT, KDC_PARAM_LABEL};
  assert_int_equal(ts->n_params, 15);
  for (size_t i = 0; i < ts->n_params; i++) {
    const kdc_node *p = &ts->nodes[ts->params[i]];
    assert_string_equal(p->attr.param.name, params[i]);
    assert_int_equal(p->attr.param.kind, i < 6 ? kinds[i] : KDC_PARAM_STATE);
    assert_int_equal(p->attr.param.index, (int)i);
  }
  assert_int_equal(ts->nodes[ts->params[6]].type.dtype, KDC_DTYPE_I32);
  assert_int_equal(ts->nodes[ts->params[6]].type.rank, 0);
  /* results: the 4 weights, the iteration, the 8 slots (same names), the loss */
  assert_int_equal(ts->n_results, 14);
  for (size_t i = 0; i < 4; i++) assert_string_equal(ts->result_names[i], W_NAMES[i]);
  for (size_t i = 4; i < 13; i++) assert_string_equal(ts->result_names[i], params[i + 2]);
  assert_string_equal(ts->result_names[13], "loss");
  for (size_t i = 0; i < 13; i++) /* each result has its parameter's type */
    assert_true(kdc_type_equal(&ts->nodes[ts->results[i]].type,
                               &ts->nodes[ts->params[i < 4 ? i + 1 : i + 2]].type));
}

static void test_mlp_adam(void **state) {
  (void)state;
  tr_seed(3);
  mlp ref, g, mref, vref;
  init_mlp(&ref);
  memset(&mref, 0, sizeof mref);
  memset(&vref, 0, sizeof vref);
  kdc_module *m = build_mlp(&ref, true);
  kdc_train_options o;
  kdc_train_options_init(&o, KDC_LOSS_CCE, KDC_OPT_ADAM);
  o.optimizer.learning_rate = 0.01;
  tr_expect_ok(kdc_pass_build_training(m, &o));
  tr_expect_ok(kdc_ir_verify_module(m));
  kdc_func *ts = kdc_ir_module_find_func(m, "train_step");
  kdc_func *ev = kdc_ir_module_find_func(m, "evaluate");
  assert_non_null(ts);
  assert_non_null(ev);
  check_abi(ts);
  /* state: weights, iteration, slots as flat f32 buffers in ABI order */
  float *bufs[15] = {0};
  int32_t iter = 0;
  float x[B * IN], t[B * OUT];
  for (size_t i = 1; i < 15; i++) {
    if (i == 5 || i == 6) continue;
    const kdc_type *pt = &ts->nodes[ts->params[i]].type;
    bufs[i] = calloc((size_t)kdc_type_numel(pt), sizeof(float));
    if (i < 5)
      memcpy(bufs[i], kdc_ir_module_find_weight(m, W_NAMES[i - 1])->data, kdc_type_bytes(pt));
  }
  double lr_sum = 0;
  for (int step = 0; step < STEPS; step++) {
    make_batch(x, t);
    kdc_tensor args[15];
    for (size_t i = 0; i < 15; i++) args[i].type = ts->nodes[ts->params[i]].type;
    args[0].data = x;
    args[5].data = t;
    args[6].data = &iter;
    for (size_t i = 1; i < 15; i++)
      if (bufs[i]) args[i].data = bufs[i];
    /* evaluate at the same weights gives the same loss */
    kdc_tensor ev_out[1], out[14];
    tr_run(ev, args, 6, ev_out);
    tr_run(ts, args, 15, out);
    assert_true(*(float *)ev_out[0].data == *(float *)out[13].data);
    double want_loss = ref_forward_backward(&ref, x, t, &g);
    TR_CLOSE(*(float *)out[13].data, want_loss, 1e-5, 0, "step %d loss", step);
    ref_adam(0.01, iter, &ref, &g, &mref, &vref);
    lr_sum += 0.01;
    for (size_t i = 0; i < 13; i++) { /* write results back into their parameters */
      size_t pi = i < 4 ? i + 1 : i + 2;
      if (pi == 6) iter = *(int32_t *)out[i].data;
      else memcpy(bufs[pi], out[i].data, kdc_type_bytes(&out[i].type));
    }
    assert_int_equal(iter, step + 1);
    const double *rw[4] = {ref.w1, ref.b1, ref.w2, ref.b2};
    const double *rm[4] = {mref.w1, mref.b1, mref.w2, mref.b2};
    for (int k = 0; k < 4; k++) {
      int64_t n = kdc_type_numel(&args[1 + k].type);
      for (int64_t e = 0; e < n; e++) {
        TR_CLOSE(bufs[1 + k][e], rw[k][e], 1e-5, 1e-5 * lr_sum, "step %d %s[%lld]", step,
                 W_NAMES[k], (long long)e);
        TR_CLOSE(bufs[7 + k][e], rm[k][e], 1e-5, 1e-7, "step %d momentum of %s[%lld]", step,
                 W_NAMES[k], (long long)e);
      }
    }
    tr_free(ev_out, 1);
    tr_free(out, 14);
  }
  /* The same step after simplify (fold, cse, dce) gives the same results. */
  make_batch(x, t);
  kdc_tensor args[15], before[14], after[14];
  for (size_t i = 0; i < 15; i++) {
    args[i].type = ts->nodes[ts->params[i]].type;
    args[i].data = bufs[i];
  }
  args[0].data = x;
  args[5].data = t;
  args[6].data = &iter;
  tr_run(ts, args, 15, before);
  size_t n_before = ts->n_nodes;
  tr_expect_ok(kdc_pass_run_list(m, "verify,infer_shapes,simplify", NULL));
  assert_true(ts->n_nodes < n_before);
  tr_run(ts, args, 15, after);
  for (size_t i = 0; i < 14; i++) {
    int64_t n = kdc_type_numel(&before[i].type);
    for (int64_t e = 0; e < n && i != 4; e++)
      TR_CLOSE(((float *)after[i].data)[e], ((float *)before[i].data)[e], 1e-6, 1e-9,
               "simplified result %zu[%lld]", i, (long long)e);
  }
  tr_free(before, 14);
  tr_free(after, 14);
  for (size_t i = 0; i < 15; i++) free(bufs[i]);
  kdc_ir_module_destroy(m);
}

/* d2 non-trainable: only d1's weights are updated and returned; SGD without
 * momentum has no slots; sparse labels are i32 [B]. */
static void test_frozen_sparse_sgd(void **state) {
  (void)state;
  tr_seed(5);
  mlp p;
  init_mlp(&p);
  kdc_module *m = build_mlp(&p, false);
  kdc_train_options o;
  kdc_train_options_init(&o, KDC_LOSS_SCCE, KDC_OPT_SGD);
  tr_expect_ok(kdc_pass_build_training(m, &o));
  kdc_func *ts = kdc_ir_module_find_func(m, "train_step");
  assert_int_equal(ts->n_params, 7); /* x, 4 weights, labels, SGD/iteration */
  const kdc_node *lab = &ts->nodes[ts->params[5]];
  assert_int_equal(lab->attr.param.kind, KDC_PARAM_LABEL);
  assert_int_equal(lab->type.dtype, KDC_DTYPE_I32);
  assert_int_equal(lab->type.rank, 1);
  assert_string_equal(ts->nodes[ts->params[6]].attr.param.name, "SGD/iteration");
  assert_int_equal(ts->n_results, 4);
  assert_string_equal(ts->result_names[0], "d1/kernel");
  assert_string_equal(ts->result_names[1], "d1/bias");
  assert_string_equal(ts->result_names[2], "SGD/iteration");
  assert_string_equal(ts->result_names[3], "loss");
  kdc_ir_module_destroy(m);
}

/* train_forward's "iteration" STATE parameter becomes the optimizer counter. */
static void test_train_forward_counter(void **state) {
  (void)state;
  kdc_module *m = kdc_ir_module_create("t");
  kdc_type xt = tr_type(2, 2, 3), wt = tr_type(1, 3), it = kdc_type_make(KDC_DTYPE_I32, 0, NULL);
  kdc_weight *w = kdc_ir_module_add_weight(m, "d/bias", &wt, NULL);
  (void)w;
  for (int k = 0; k < 2; k++) {
    kdc_func *f = kdc_ir_func_create(m, k ? "train_forward" : "predict");
    kdc_value_id x = kdc_ir_parameter(f, KDC_PARAM_INPUT, "x", &xt);
    kdc_value_id b = kdc_ir_parameter(f, KDC_PARAM_WEIGHT, "d/bias", &wt);
    if (k) kdc_ir_parameter(f, KDC_PARAM_STATE, "iteration", &it);
    int64_t map[1] = {1};
    kdc_value_id bb = kdc_ir_broadcast(f, b, 2, xt.dims, map);
    kdc_ir_add_result(f, kdc_ir_binary(f, KDC_OP_ADD, x, bb), "y");
  }
  kdc_train_options o;
  kdc_train_options_init(&o, KDC_LOSS_MSE, KDC_OPT_RMSPROP);
  tr_expect_ok(kdc_pass_build_training(m, &o));
  kdc_func *ts = kdc_ir_module_find_func(m, "train_step");
  /* x, d/bias, rmsprop/iteration (renamed in place), y (labels), velocity */
  assert_int_equal(ts->n_params, 5);
  assert_string_equal(ts->nodes[ts->params[2]].attr.param.name, "rmsprop/iteration");
  assert_string_equal(ts->nodes[ts->params[3]].attr.param.name, "y");
  assert_string_equal(ts->nodes[ts->params[4]].attr.param.name, "rmsprop/d_bias_velocity");
  assert_int_equal(kdc_ir_module_find_func(m, "evaluate")->n_params, 3);
  kdc_ir_module_destroy(m);
}

static void test_errors(void **state) {
  (void)state;
  kdc_module *m = kdc_ir_module_create("t");
  kdc_train_options o;
  kdc_train_options_init(&o, KDC_LOSS_MSE, KDC_OPT_SGD);
  kdc_status st = kdc_pass_build_training(m, &o);
  assert_int_equal(kdc_status_code(st), KDC_INVALID_INPUT);
  assert_non_null(strstr(kdc_status_message(st), "predict"));
  kdc_status_free(st);
  /* a model without weights: nothing to train */
  kdc_func *f = kdc_ir_func_create(m, "predict");
  kdc_type xt = tr_type(2, 2, 3);
  kdc_value_id x = kdc_ir_parameter(f, KDC_PARAM_INPUT, "x", &xt);
  kdc_ir_add_result(f, kdc_ir_unary(f, KDC_OP_EXP, x), "y");
  st = kdc_pass_build_training(m, &o);
  assert_int_equal(kdc_status_code(st), KDC_INVALID_INPUT);
  assert_non_null(strstr(kdc_status_message(st), "no trainable weight"));
  kdc_status_free(st);
  kdc_ir_module_destroy(m);
  m = kdc_ir_module_create("t");
  f = kdc_ir_func_create(m, "predict");
  kdc_ir_add_result(f, kdc_ir_parameter(f, KDC_PARAM_INPUT, "x", &xt), "y");
  o.output = 1;
  st = kdc_pass_build_training(m, &o);
  assert_non_null(strstr(kdc_status_message(st), "output 1"));
  kdc_status_free(st);
  kdc_ir_module_destroy(m);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_mlp_adam),
      cmocka_unit_test(test_frozen_sparse_sgd),
      cmocka_unit_test(test_train_forward_counter),
      cmocka_unit_test(test_errors),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
