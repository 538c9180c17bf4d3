/*
 * Recurrent layers (frontend/lower_rnn.c) against the Keras 3 formulas
 * written out here in double precision (keras/src/layers/rnn/gru.py,
 * lstm.py, simple_rnn.py), for the configurations the TF.js reference in
 * examples/ cannot produce: GRU reset_after=true (Keras 3's default, bias
 * [2, 3u]; tfjs only has reset_after=false) and LSTM return_state with
 * go_backwards.  Weights are seeded; the lowered predict runs on the
 * reference interpreter; |d| <= 1e-5.
 */
#include <math.h>

#include "fe_test.h"

enum { B = 2, T = 4, F = 3, U = 2 };

static double u01(uint64_t *s) {
  *s = *s * 6364136223846793005ull + 1442695040888963407ull;
  return (double)(*s >> 11) / 9007199254740992.0;
}

/* Fills every weight of |mod| with seeded values in [-0.8, 0.8). */
static void fill_weights(kdc_module *mod, uint64_t seed) {
  for (size_t i = 0; i < mod->n_weights; i++) {
    kdc_weight *w = &mod->weights[i];
    int64_t n = kdc_type_numel(&w->type);
    float *d = kdc_arena_alloc(mod->arena, (size_t)n * sizeof *d + 1);
    for (int64_t k = 0; k < n; k++) d[k] = (float)(1.6 * u01(&seed) - 0.8);
    w->data = d;
  }
}

static const float *weight(kdc_module *mod, const char *name) {
  kdc_weight *w = kdc_ir_module_find_weight(mod, name);
  if (!w) fail_msg("no weight %s", name);
  return w->data;
}

static double sigm(double x) { return 1 / (1 + exp(-x)); }

/* Lowers |json| (written to a temp file) at batch B, fills the weights and
 * runs predict on |x| [B, T, F]; *out gets the results. */
static kdc_module *run(const char *json, const float *x, kdc_tensor *out, size_t n_out) {
  const char *path = fe_tmp("rnn.json");
  fe_write(path, json, strlen(json));
  kdc_keras_model *m = fe_load_ok(path);
  kdc_lower_options opt = {.batch = B};
  kdc_module *mod = NULL;
  kdc_status st = kdc_frontend_lower(m, &opt, &mod);
  if (st) fail_msg("%s", kdc_status_message(st));
  kdc_frontend_free(m);
  fill_weights(mod, 99);
  kdc_func *f = kdc_ir_module_find_func(mod, "predict");
  assert_int_equal(f->n_results, n_out);
  kdc_tensor *args = calloc(f->n_params, sizeof *args);
  for (size_t i = 0; i < f->n_params; i++) {
    const kdc_node *nd = kdc_ir_node(f, f->params[i]);
    args[i].type = nd->type;
    if (nd->attr.param.kind == KDC_PARAM_INPUT) args[i].data = (void *)x;
  }
  st = kdc_ir_interpret(f, args, f->n_params, out);
  if (st) fail_msg("%s", kdc_status_message(st));
  free(args);
  return mod;
}

static void close_to(const float *got, const double *want, int n) {
  for (int i = 0; i < n; i++)
    if (fabs(got[i] - want[i]) > 1e-5)
      fail_msg("element %d: got %.7g, want %.7g", i, (double)got[i], want[i]);
}

static void input(float *x) {
  uint64_t s = 5;
  for (int i = 0; i < B * T * F; i++) x[i] = (float)(2 * u01(&s) - 1);
}

#define SEQ_MODEL(layer)                                                                      \
  "{\"class_name\": \"Sequential\", \"config\": {\"name\": \"s\", \"layers\": ["             \
  "{\"class_name\": \"InputLayer\", \"config\": {\"batch_shape\": [null, 4, 3], "             \
  "\"name\": \"in\"}}, " layer "]}}"

static void test_gru_reset_after(void **state) {
  (void)state;
  float x[B * T * F];
  input(x);
  kdc_tensor out[1];
  kdc_module *mod = run(SEQ_MODEL("{\"class_name\": \"GRU\", \"config\": {\"name\": \"gru\", "
                                  "\"units\": 2, \"return_sequences\": true}}"),
                        x, out, 1);
  const float *W = weight(mod, "s/gru/gru_cell/kernel");            /* [F, 3U] */
  const float *R = weight(mod, "s/gru/gru_cell/recurrent_kernel");  /* [U, 3U] */
  const float *bias = weight(mod, "s/gru/gru_cell/bias");           /* [2, 3U] */
  double want[B * T * U];
  for (int b = 0; b < B; b++) {
    double h[U] = {0, 0};
    for (int t = 0; t < T; t++) {
      double mx[3 * U], mi[3 * U], hn[U];
      for (int j = 0; j < 3 * U; j++) {
        mx[j] = bias[j], mi[j] = bias[3 * U + j];
        for (int k = 0; k < F; k++) mx[j] += x[(b * T + t) * F + k] * W[k * 3 * U + j];
        for (int k = 0; k < U; k++) mi[j] += h[k] * R[k * 3 * U + j];
      }
      for (int j = 0; j < U; j++) {
        double z = sigm(mx[j] + mi[j]), r = sigm(mx[U + j] + mi[U + j]);
        double hh = tanh(mx[2 * U + j] + r * mi[2 * U + j]);
        hn[j] = z * h[j] + (1 - z) * hh;
      }
      for (int j = 0; j < U; j++) h[j] = hn[j], want[(b * T + t) * U + j] = hn[j];
    }
  }
  close_to(out[0].data, want, B * T * U);
  free(out[0].data);
  kdc_ir_module_destroy(mod);
}

static void test_lstm_state_backwards(void **state) {
  (void)state;
  float x[B * T * F];
  input(x);
  kdc_tensor out[3];
  /* tf.keras 2 functional form: the three outputs of one node */
  kdc_module *mod = run(
      "{\"class_name\": \"Model\", \"config\": {\"name\": \"m\", \"layers\": ["
      "{\"class_name\": \"InputLayer\", \"name\": \"in\", \"config\": {\"batch_input_shape\": "
      "[null, 4, 3], \"name\": \"in\"}, \"inbound_nodes\": []}, "
      "{\"class_name\": \"LSTM\", \"name\": \"lstm\", \"config\": {\"name\": \"lstm\", "
      "\"units\": 2, \"return_sequences\": true, \"return_state\": true, \"go_backwards\": true, "
      "\"recurrent_activation\": \"sigmoid\"}, \"inbound_nodes\": [[[\"in\", 0, 0, {}]]]}], "
      "\"input_layers\": [[\"in\", 0, 0]], "
      "\"output_layers\": [[\"lstm\", 0, 0], [\"lstm\", 0, 1], [\"lstm\", 0, 2]]}, "
      "\"keras_version\": \"2.13.1\", \"backend\": \"tensorflow\"}",
      x, out, 3);
  const float *W = weight(mod, "lstm/lstm_cell/kernel");           /* [F, 4U] */
  const float *R = weight(mod, "lstm/lstm_cell/recurrent_kernel"); /* [U, 4U] */
  const float *bias = weight(mod, "lstm/lstm_cell/bias");          /* [4U] */
  double seq[B * T * U], hs[B * U], cs[B * U];
  for (int b = 0; b < B; b++) {
    double h[U] = {0, 0}, c[U] = {0, 0};
    for (int s = 0; s < T; s++) {
      int t = T - 1 - s; /* go_backwards: the last step first, outputs in that order */
      double z[4 * U];
      for (int j = 0; j < 4 * U; j++) {
        z[j] = bias[j];
        for (int k = 0; k < F; k++) z[j] += x[(b * T + t) * F + k] * W[k * 4 * U + j];
        for (int k = 0; k < U; k++) z[j] += h[k] * R[k * 4 * U + j];
      }
      for (int j = 0; j < U; j++) {
        double i = sigm(z[j]), f = sigm(z[U + j]), g = tanh(z[2 * U + j]), o = sigm(z[3 * U + j]);
        c[j] = f * c[j] + i * g;
        h[j] = o * tanh(c[j]);
        seq[(b * T + s) * U + j] = h[j];
      }
    }
    for (int j = 0; j < U; j++) hs[b * U + j] = h[j], cs[b * U + j] = c[j];
  }
  close_to(out[0].data, seq, B * T * U);
  close_to(out[1].data, hs, B * U);
  close_to(out[2].data, cs, B * U);
  for (int i = 0; i < 3; i++) free(out[i].data);
  kdc_ir_module_destroy(mod);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_gru_reset_after),
      cmocka_unit_test(test_lstm_state_backwards),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
