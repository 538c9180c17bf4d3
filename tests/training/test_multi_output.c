/*
 * Multi-output training (passes/train_step.c, docs/training.md "Several
 * outputs"): a shared Dense trunk with two heads, "reg" (MSE) and "cls"
 * (categorical crossentropy from logits), run by the reference interpreter.
 * The weighted total is checked independently: with SGD at learning rate
 * 1, each train_step's update is its gradient, and the two-output step's
 * loss and gradients must equal w_reg * (reg-only step) + w_cls * (cls-only
 * step) computed from two single-output train_steps.  Tolerance: relative
 * 1e-5 plus 2e-6 absolute (f32 weights differenced).  Also: dict losses and
 * loss_weights, a None loss, a single loss for every output, the label ABI
 * and errors.  Per-output losses (Keras 3's "<output>_loss" metrics, results
 * after "loss" when more than one output is trained): each equals the
 * loss of the single-output step of that output (unweighted), in train_step
 * and in evaluate; none with one trained output.
 */
#include "tr_test.h"

enum { B = 4, IN = 3, H = 5, R = 2, C = 3, NW = 3 };

static const char *const W_NAMES[NW] = {"trunk/kernel", "reg/kernel", "cls/kernel"};
static const int64_t W_SHAPE[NW][2] = {{IN, H}, {H, R}, {H, C}};

typedef struct data {
  float w[NW][IN * H > H * C ? IN * H : H * C];
  float x[B * IN], t_reg[B * R], t_cls[B * C];
} data;

/* predict(x) = (relu(x Wt) Wr, relu(x Wt) Wc), results "reg", "cls". */
static kdc_module *build(const data *d) {
  kdc_module *m = kdc_ir_module_create("two_heads");
  kdc_func *f = kdc_ir_func_create(m, "predict");
  kdc_type xt = tr_type(2, B, IN);
  kdc_value_id x = kdc_ir_parameter(f, KDC_PARAM_INPUT, "x", &xt), w[NW];
  for (int i = 0; i < NW; i++) {
    kdc_type t = tr_type(2, (int)W_SHAPE[i][0], (int)W_SHAPE[i][1]);
    kdc_ir_module_add_weight(m, W_NAMES[i], &t, d->w[i]);
    w[i] = kdc_ir_parameter(f, KDC_PARAM_WEIGHT, W_NAMES[i], &t);
  }
  kdc_value_id h = kdc_ir_binary_scalar(f, KDC_OP_MAX, kdc_ir_matmul(f, x, w[0]), 0.0);
  kdc_ir_add_result(f, kdc_ir_matmul(f, h, w[1]), "reg");
  kdc_ir_add_result(f, kdc_ir_matmul(f, h, w[2]), "cls");
  tr_expect_ok(kdc_ir_take_error(f));
  return m;
}

static void make_data(data *d) {
  tr_seed(11);
  for (int i = 0; i < NW; i++)
    for (int64_t k = 0; k < W_SHAPE[i][0] * W_SHAPE[i][1]; k++) d->w[i][k] = (float)tr_rand(-0.8, 0.8);
  for (int k = 0; k < B * IN; k++) d->x[k] = (float)tr_rand(-1, 1);
  for (int k = 0; k < B * R; k++) d->t_reg[k] = (float)tr_rand(-1, 1);
  for (int b = 0; b < B; b++)
    for (int c = 0; c < C; c++) d->t_cls[b * C + c] = c == b % C ? 1.0f : 0.0f;
}

typedef struct step {
  double loss;
  float grad[NW][IN * H > H * C ? IN * H : H * C];
  size_t n_labels;
  char labels[4][16];   /* copies: the names live in the module */
  size_t n_outs;        /* per-output losses, results after "loss" */
  char out_names[4][16];
  double out_loss[4];
} step;

/* Builds training with |o| (SGD, learning rate 1) and runs one train_step:
 * the loss and each weight's gradient (w - w_new). */
static void run_step(const data *d, kdc_train_options *o, step *s) {
  memset(s, 0, sizeof *s);
  kdc_module *m = build(d);
  o->optimizer.learning_rate = 1.0;
  tr_expect_ok(kdc_pass_build_training(m, o));
  const kdc_func *ts = kdc_ir_module_find_func(m, "train_step");
  kdc_tensor args[16], out[16];
  int32_t it = 0;
  assert_true(ts->n_params <= 16 && ts->n_results <= 16);
  for (size_t i = 0; i < ts->n_params; i++) {
    const kdc_node *p = &ts->nodes[ts->params[i]];
    const char *n = p->attr.param.name;
    const void *v = NULL;
    if (!strcmp(n, "x")) v = d->x;
    else if (!strcmp(n, "reg")) v = d->t_reg;
    else if (!strcmp(n, "cls")) v = d->t_cls;
    else if (!strcmp(n, "SGD/iteration")) v = &it;
    for (int w = 0; w < NW; w++)
      if (!strcmp(n, W_NAMES[w])) v = d->w[w];
    if (!v) fail_msg("unexpected train_step parameter %s", n);
    if (p->attr.param.kind == KDC_PARAM_LABEL && s->n_labels < 4)
      snprintf(s->labels[s->n_labels++], sizeof s->labels[0], "%s", n);
    args[i].type = p->type;
    args[i].data = (void *)v;
  }
  tr_run(ts, args, ts->n_params, out);
  bool after_loss = false;
  for (size_t r = 0; r < ts->n_results; r++) {
    if (after_loss) {  /* the ABI: only per-output losses follow "loss" */
      assert_true(s->n_outs < 4);
      assert_int_equal(out[r].type.rank, 0);
      snprintf(s->out_names[s->n_outs], sizeof s->out_names[0], "%s", ts->result_names[r]);
      s->out_loss[s->n_outs++] = ((float *)out[r].data)[0];
    }
    if (!strcmp(ts->result_names[r], "loss")) s->loss = ((float *)out[r].data)[0], after_loss = true;
    for (int w = 0; w < NW; w++)
      if (!strcmp(ts->result_names[r], W_NAMES[w]))
        for (int64_t k = 0; k < W_SHAPE[w][0] * W_SHAPE[w][1]; k++)
          s->grad[w][k] = d->w[w][k] - ((float *)out[r].data)[k];
  }
  /* evaluate returns the same total loss */
  const kdc_func *ev = kdc_ir_module_find_func(m, "evaluate");
  kdc_tensor eo[5];
  assert_int_equal(ev->n_results, 1 + s->n_outs);
  tr_run(ev, args, ev->n_params, eo);
  TR_CLOSE(((float *)eo[0].data)[0], s->loss, 1e-6, 0, "evaluate loss");
  for (size_t j = 0; j < s->n_outs; j++) { /* and the same per-output losses, same names */
    assert_string_equal(ev->result_names[1 + j], s->out_names[j]);
    TR_CLOSE(((float *)eo[1 + j].data)[0], s->out_loss[j], 1e-6, 0, "evaluate %s",
             s->out_names[j]);
  }
  tr_free(eo, ev->n_results);
  tr_free(out, ts->n_results);
  kdc_ir_module_destroy(m);
}

static void single(const data *d, int output, kdc_loss_kind k, bool logits, step *s) {
  kdc_train_options o;
  kdc_train_options_init(&o, k, KDC_OPT_SGD);
  o.output = output;
  o.from_logits = logits;
  run_step(d, &o, s);
}

/* The per-output losses of |got|: none, or "reg_loss" = a's loss and
 * "cls_loss" = b's (unweighted, Keras 3 CompileLoss records the value before
 * multiplying by the loss weight). */
static void check_outputs(const step *got, const step *a, const step *b, const char *what) {
  if (!a || !b) {
    assert_int_equal(got->n_outs, 0);
    return;
  }
  assert_int_equal(got->n_outs, 2);
  assert_string_equal(got->out_names[0], "reg_loss");
  assert_string_equal(got->out_names[1], "cls_loss");
  assert_int_equal(a->n_outs, 0); /* a single-output step has only "loss" */
  TR_CLOSE(got->out_loss[0], a->loss, 1e-6, 0, "%s: reg_loss", what);
  TR_CLOSE(got->out_loss[1], b->loss, 1e-6, 0, "%s: cls_loss", what);
}

static void check_combination(const step *got, const step *a, double wa, const step *b,
                              double wb, const char *what) {
  TR_CLOSE(got->loss, wa * a->loss + wb * b->loss, 1e-5, 0, "%s: loss", what);
  for (int w = 0; w < NW; w++)
    for (int64_t k = 0; k < W_SHAPE[w][0] * W_SHAPE[w][1]; k++)
      TR_CLOSE(got->grad[w][k], wa * a->grad[w][k] + wb * b->grad[w][k], 1e-5, 2e-6,
               "%s: d loss / d %s[%lld]", what, W_NAMES[w], (long long)k);
}

static void set_loss(struct kdc_output_loss *e, const char *name, kdc_loss_kind k, bool logits) {
  memset(e, 0, sizeof *e);
  e->output = name, e->loss = k, e->from_logits = logits;
}

/* loss [mse, cce(logits)], loss_weights [1.0, 0.5] */
static void test_list_weighted(void **state) {
  (void)state;
  data d;
  make_data(&d);
  step reg, cls, both;
  single(&d, 0, KDC_LOSS_MSE, false, &reg);
  single(&d, 1, KDC_LOSS_CCE, true, &cls);
  assert_true(reg.loss > 0 && cls.loss > 0);
  kdc_train_options o;
  kdc_train_options_init(&o, KDC_LOSS_MSE, KDC_OPT_SGD);
  o.n_losses = 2;
  set_loss(&o.losses[0], NULL, KDC_LOSS_MSE, false);
  set_loss(&o.losses[1], NULL, KDC_LOSS_CCE, true);
  o.n_weights = 2;
  o.weights[0].weight = 1.0;
  o.weights[1].weight = 0.5;
  run_step(&d, &o, &both);
  assert_int_equal(both.n_labels, 2); /* label parameters in output order */
  assert_string_equal(both.labels[0], "reg");
  assert_string_equal(both.labels[1], "cls");
  check_combination(&both, &reg, 1.0, &cls, 0.5, "list");
  check_outputs(&both, &reg, &cls, "list");
}

/* dict losses {"cls": cce, "reg": mse}, loss_weights {"reg": 0.25};
 * a list with None; a dict with one output. */
static void test_dict_and_none(void **state) {
  (void)state;
  data d;
  make_data(&d);
  step reg, cls, got;
  single(&d, 0, KDC_LOSS_MSE, false, &reg);
  single(&d, 1, KDC_LOSS_CCE, true, &cls);
  kdc_train_options o;
  kdc_train_options_init(&o, KDC_LOSS_MSE, KDC_OPT_SGD);
  o.n_losses = 2;
  set_loss(&o.losses[0], "cls", KDC_LOSS_CCE, true);
  set_loss(&o.losses[1], "reg", KDC_LOSS_MSE, false);
  o.n_weights = 1;
  o.weights[0].output = "reg";
  o.weights[0].weight = 0.25;
  run_step(&d, &o, &got);
  assert_string_equal(got.labels[0], "reg"); /* output order, not dict order */
  check_combination(&got, &reg, 0.25, &cls, 1.0, "dict");
  check_outputs(&got, &reg, &cls, "dict");
  /* [None, cce]: only cls is trained, with one label */
  kdc_train_options_init(&o, KDC_LOSS_MSE, KDC_OPT_SGD);
  o.n_losses = 2;
  set_loss(&o.losses[0], NULL, KDC_LOSS_MSE, false);
  o.losses[0].none = true;
  set_loss(&o.losses[1], NULL, KDC_LOSS_CCE, true);
  run_step(&d, &o, &got);
  assert_int_equal(got.n_labels, 1);
  assert_string_equal(got.labels[0], "cls");
  check_combination(&got, &reg, 0.0, &cls, 1.0, "None");
  check_outputs(&got, NULL, NULL, "None"); /* one flat loss: no per-output metrics */
  /* {"reg": mse}: cls untrained */
  kdc_train_options_init(&o, KDC_LOSS_MSE, KDC_OPT_SGD);
  o.n_losses = 1;
  set_loss(&o.losses[0], "reg", KDC_LOSS_MSE, false);
  run_step(&d, &o, &got);
  assert_int_equal(got.n_labels, 1);
  check_combination(&got, &reg, 1.0, &cls, 0.0, "dict of one");
  check_outputs(&got, NULL, NULL, "dict of one");
}

/* One loss for a multi-output model (Keras 3: every output's). */
static void test_every_output(void **state) {
  (void)state;
  data d;
  make_data(&d);
  for (int k = 0; k < B * C; k++) d.t_cls[k] = (float)tr_rand(-1, 1);
  step reg, cls, got;
  single(&d, 0, KDC_LOSS_MSE, false, &reg);
  single(&d, 1, KDC_LOSS_MSE, false, &cls);
  kdc_train_options o;
  kdc_train_options_init(&o, KDC_LOSS_MSE, KDC_OPT_SGD);
  o.every_output = true;
  o.n_weights = 2;
  o.weights[0].weight = 2.0;
  o.weights[1].weight = 3.0;
  run_step(&d, &o, &got);
  assert_int_equal(got.n_labels, 2);
  check_combination(&got, &reg, 2.0, &cls, 3.0, "every output");
  check_outputs(&got, &reg, &cls, "every output");
}

static void expect_error(kdc_train_options *o, const char *needle) {
  data d;
  make_data(&d);
  kdc_module *m = build(&d);
  kdc_status st = kdc_pass_build_training(m, o);
  assert_int_equal(kdc_status_code(st), KDC_INVALID_INPUT);
  if (!strstr(kdc_status_message(st), needle))
    fail_msg("error \"%s\" lacks \"%s\"", kdc_status_message(st), needle);
  kdc_status_free(st);
  kdc_ir_module_destroy(m);
}

static void test_errors(void **state) {
  (void)state;
  kdc_train_options o;
  kdc_train_options_init(&o, KDC_LOSS_MSE, KDC_OPT_SGD);
  o.n_losses = 1;
  set_loss(&o.losses[0], "nope", KDC_LOSS_MSE, false);
  expect_error(&o, "\"nope\"");
  set_loss(&o.losses[0], NULL, KDC_LOSS_MSE, false); /* a list of 1 for 2 outputs */
  expect_error(&o, "1 entries but the model has 2 outputs");
  o.n_losses = 2;
  set_loss(&o.losses[1], NULL, KDC_LOSS_MSE, false);
  o.losses[0].none = o.losses[1].none = true;
  expect_error(&o, "None");
  o.losses[0].none = false;
  o.n_weights = 1;
  o.weights[0].output = "reg2";
  expect_error(&o, "\"reg2\"");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_list_weighted),
      cmocka_unit_test(test_dict_and_none),
      cmocka_unit_test(test_every_output),
      cmocka_unit_test(test_errors),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
