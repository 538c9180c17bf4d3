/*
 * Recurrent layers (frontend/lower_rnn.c) against the Keras 3 formulas
 * written out here in double precision (keras/src/layers/rnn/gru.py,
 * lstm.py, simple_rnn.py), for the configurations the TF.js reference in
 * examples/ cannot produce: GRU reset_after=true (Keras 3's default, bias
 * [2, 3u]; tfjs only has reset_after=false) and LSTM return_state with
 * go_backwards; and the Bidirectional wrapper (merge modes, weight paths,
 * Keras' parameter counts, located config errors); initial states passed
 * to the call (tf.keras 2 extra inputs, Keras 3 `initial_state`, split in
 * half by Bidirectional).  Weights are seeded; the
 * lowered predict runs on the reference interpreter; |d| <= 1e-5.
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
 * runs predict on the inputs |xs| (input i gets xs[i], or xs[0] for all
 * when |n_x| is 1); *out gets the results. */
static kdc_module *run_inputs(const char *json, const float *const *xs, size_t n_x,
                              kdc_tensor *out, size_t n_out) {
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
  size_t k = 0;
  for (size_t i = 0; i < f->n_params; i++) {
    const kdc_node *nd = kdc_ir_node(f, f->params[i]);
    args[i].type = nd->type;
    if (nd->attr.param.kind != KDC_PARAM_INPUT) continue;
    assert_true(n_x == 1 || k < n_x);
    args[i].data = (void *)xs[n_x == 1 ? 0 : k++];
  }
  st = kdc_ir_interpret(f, args, f->n_params, out);
  if (st) fail_msg("%s", kdc_status_message(st));
  free(args);
  return mod;
}

static kdc_module *run(const char *json, const float *x, kdc_tensor *out, size_t n_out) {
  return run_inputs(json, &x, 1, out, n_out);
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

/* Keras' lstm.py over |x| from (h0, c0) (NULL: zeros) with the weights of
 * |mod|'s LSTM |layer|: outputs in processing order (the last step first
 * when |back|), final h and c. */
static void lstm_ref(kdc_module *mod, const char *layer, const float *x, bool back,
                     const float *h0, const float *c0, double *seq, double *hs, double *cs) {
  char n[3][96];
  snprintf(n[0], sizeof n[0], "%s/lstm_cell/kernel", layer);
  snprintf(n[1], sizeof n[1], "%s/lstm_cell/recurrent_kernel", layer);
  snprintf(n[2], sizeof n[2], "%s/lstm_cell/bias", layer);
  const float *W = weight(mod, n[0]);    /* [F, 4U] */
  const float *R = weight(mod, n[1]);    /* [U, 4U] */
  const float *bias = weight(mod, n[2]); /* [4U] */
  for (int b = 0; b < B; b++) {
    double h[U] = {0, 0}, c[U] = {0, 0};
    for (int j = 0; h0 && j < U; j++) h[j] = h0[b * U + j], c[j] = c0[b * U + j];
    for (int s = 0; s < T; s++) {
      int t = back ? T - 1 - s : s;
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
}

/* Keras' gru.py (reset_after) over |x| from h0 (NULL: zeros), layer "gru"
 * of |prefix| ("s/" or ""): the outputs in processing order. */
static void gru_ref(kdc_module *mod, const char *prefix, const float *x, bool back,
                    const float *h0, double *want) {
  char n[3][96];
  snprintf(n[0], sizeof n[0], "%sgru/gru_cell/kernel", prefix);
  snprintf(n[1], sizeof n[1], "%sgru/gru_cell/recurrent_kernel", prefix);
  snprintf(n[2], sizeof n[2], "%sgru/gru_cell/bias", prefix);
  const float *W = weight(mod, n[0]);    /* [F, 3U] */
  const float *R = weight(mod, n[1]);    /* [U, 3U] */
  const float *bias = weight(mod, n[2]); /* [2, 3U] */
  for (int b = 0; b < B; b++) {
    double h[U] = {0, 0};
    for (int j = 0; h0 && j < U; j++) h[j] = h0[b * U + j];
    for (int s = 0; s < T; s++) {
      int t = back ? T - 1 - s : s;
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
      for (int j = 0; j < U; j++) h[j] = hn[j], want[(b * T + s) * U + j] = hn[j];
    }
  }
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
  double want[B * T * U];
  gru_ref(mod, "s/", x, false, NULL, want);
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
  double seq[B * T * U], hs[B * U], cs[B * U];
  lstm_ref(mod, "lstm", x, true, NULL, NULL, seq, hs, cs);
  close_to(out[0].data, seq, B * T * U);
  close_to(out[1].data, hs, B * U);
  close_to(out[2].data, cs, B * U);
  for (int i = 0; i < 3; i++) free(out[i].data);
  kdc_ir_module_destroy(mod);
}

/* h_t of a SimpleRNN (tanh) over |x| [B, T, F], written to y[b][s] in
 * processing order (the last step first when |back|). */
static void simple_rnn_ref0(const float *x, const float *W, const float *R, const float *bias,
                            bool back, const float *h0, double *y) {
  for (int b = 0; b < B; b++) {
    double h[U] = {0, 0};
    for (int j = 0; h0 && j < U; j++) h[j] = h0[b * U + j];
    for (int s = 0; s < T; s++) {
      int t = back ? T - 1 - s : s;
      double hn[U];
      for (int j = 0; j < U; j++) {
        double z = bias[j];
        for (int k = 0; k < F; k++) z += x[(b * T + t) * F + k] * W[k * U + j];
        for (int k = 0; k < U; k++) z += h[k] * R[k * U + j];
        hn[j] = tanh(z);
      }
      for (int j = 0; j < U; j++) h[j] = hn[j], y[(b * T + s) * U + j] = hn[j];
    }
  }
}

static void simple_rnn_ref(const float *x, const float *W, const float *R, const float *bias,
                           bool back, double *y) {
  simple_rnn_ref0(x, W, R, bias, back, NULL, y);
}

/* A functional model (tf.keras 2 node form): input "in" [null, 4, 3] ->
 * |layer| (named "bi") with outputs |outs|. */
#define FUNC_MODEL(layer, outs)                                                               \
  "{\"class_name\": \"Model\", \"config\": {\"name\": \"m\", \"layers\": ["                  \
  "{\"class_name\": \"InputLayer\", \"name\": \"in\", \"config\": {\"batch_input_shape\": "   \
  "[null, 4, 3], \"name\": \"in\"}, \"inbound_nodes\": []}, "                                 \
  "{\"class_name\": \"Bidirectional\", \"name\": \"bi\", \"config\": " layer ", "             \
  "\"inbound_nodes\": [[[\"in\", 0, 0, {}]]]}], \"input_layers\": [[\"in\", 0, 0]], "         \
  "\"output_layers\": " outs "}}"

#define BIDIR_SIMPLE(merge, merge2)                                                           \
  FUNC_MODEL("{\"name\": \"bi\", \"merge_mode\": " merge ", \"layer\": {\"module\": "        \
             "\"keras.layers\", \"class_name\": \"SimpleRNN\", \"config\": {\"name\": "      \
             "\"simple_rnn\", \"units\": 2, \"return_sequences\": true}, "                   \
             "\"registered_name\": null}}",                                                   \
             "[[\"bi\", 0, 0]" merge2 "]")

/* Keras 3 Bidirectional(SimpleRNN, return_sequences) without a
 * backward_layer (derived: go_backwards, "backward_<name>"), every
 * merge_mode, against bidirectional.py's call written out: the backward
 * outputs flipped along time, then merged. */
static void test_bidir_merge_modes(void **state) {
  (void)state;
  static const char *const modes[] = {"\"concat\"", "\"sum\"", "\"mul\"", "\"ave\"", "null"};
  static const char *const jsons[] = {
      BIDIR_SIMPLE("\"concat\"", ""), BIDIR_SIMPLE("\"sum\"", ""), BIDIR_SIMPLE("\"mul\"", ""),
      BIDIR_SIMPLE("\"ave\"", ""), BIDIR_SIMPLE("null", ", [\"bi\", 0, 1]")};
  float x[B * T * F];
  input(x);
  for (int m = 0; m < 5; m++) {
    kdc_tensor out[2];
    int n_out = m == 4 ? 2 : 1;
    kdc_module *mod = run(jsons[m], x, out, (size_t)n_out);
    const char *fw = "bi/forward_simple_rnn/simple_rnn_cell/";
    const char *bw = "bi/backward_simple_rnn/simple_rnn_cell/";
    char k[3][128], kb[3][128];
    static const char *const leaf[] = {"kernel", "recurrent_kernel", "bias"};
    for (int i = 0; i < 3; i++) {
      snprintf(k[i], sizeof k[i], "%s%s", fw, leaf[i]);
      snprintf(kb[i], sizeof kb[i], "%s%s", bw, leaf[i]);
    }
    double yf[B * T * U], yb[B * T * U], want[B * T * 2 * U];
    simple_rnn_ref(x, weight(mod, k[0]), weight(mod, k[1]), weight(mod, k[2]), false, yf);
    simple_rnn_ref(x, weight(mod, kb[0]), weight(mod, kb[1]), weight(mod, kb[2]), true, yb);
    double flip[B * T * U];
    for (int b = 0; b < B; b++)
      for (int t = 0; t < T; t++)
        for (int j = 0; j < U; j++)
          flip[(b * T + t) * U + j] = yb[(b * T + (T - 1 - t)) * U + j];
    for (int i = 0; i < B * T; i++)
      for (int j = 0; j < U; j++) {
        double f = yf[i * U + j], r = flip[i * U + j];
        switch (m) {
        case 0: want[i * 2 * U + j] = f, want[i * 2 * U + U + j] = r; break;
        case 1: want[i * U + j] = f + r; break;
        case 2: want[i * U + j] = f * r; break;
        case 3: want[i * U + j] = (f + r) / 2; break;
        default: want[i * U + j] = f; break;
        }
      }
    if (out[0].type.rank != 3 || out[0].type.dims[2] != (m == 0 ? 2 * U : U))
      fail_msg("merge_mode %s: output rank %d, last dim %lld", modes[m], out[0].type.rank,
               (long long)out[0].type.dims[out[0].type.rank - 1]);
    close_to(out[0].data, want, B * T * (m == 0 ? 2 * U : U));
    if (m == 4) close_to(out[1].data, flip, B * T * U);
    for (int i = 0; i < n_out; i++) free(out[i].data);
    kdc_ir_module_destroy(mod);
  }
}

/* tf.keras 2 form ({class_name, config}, inner name "lstm"): variables,
 * Keras' parameter count (2 x 4u(f + u + 1)), return_state outputs
 * [merged, h_f, c_f, h_b, c_b] with the merged output (not sequences, so no
 * flip) the concatenation of h_f and h_b. */
static void test_bidir_lstm_state(void **state) {
  (void)state;
  const char *json = FUNC_MODEL(
      "{\"name\": \"bi\", \"layer\": {\"class_name\": \"LSTM\", \"config\": {\"name\": "
      "\"lstm\", \"units\": 2, \"return_state\": true, \"recurrent_activation\": \"sigmoid\"}}}",
      "[[\"bi\", 0, 0], [\"bi\", 0, 1], [\"bi\", 0, 2], [\"bi\", 0, 3], [\"bi\", 0, 4]]");
  const char *path = fe_tmp("bidir_lstm.json");
  fe_write(path, json, strlen(json));
  kdc_keras_model *m = fe_load_ok(path);
  assert_int_equal(kdc_frontend_param_count(m), 2 * 4 * U * (F + U + 1));
  static const char *const want_paths[] = {
      "bi/forward_lstm/lstm_cell/kernel", "bi/forward_lstm/lstm_cell/recurrent_kernel",
      "bi/forward_lstm/lstm_cell/bias", "bi/backward_lstm/lstm_cell/kernel",
      "bi/backward_lstm/lstm_cell/recurrent_kernel", "bi/backward_lstm/lstm_cell/bias"};
  assert_int_equal(m->n_vars, 6);
  for (int i = 0; i < 6; i++) assert_string_equal(m->vars[i]->path, want_paths[i]);
  kdc_frontend_free(m);
  float x[B * T * F];
  input(x);
  kdc_tensor out[5];
  kdc_module *mod = run(json, x, out, 5);
  const float *y = out[0].data;
  for (int b = 0; b < B; b++)
    for (int j = 0; j < U; j++) {
      assert_float_equal(y[b * 2 * U + j], ((float *)out[1].data)[b * U + j], 0);
      assert_float_equal(y[b * 2 * U + U + j], ((float *)out[3].data)[b * U + j], 0);
    }
  for (int i = 0; i < 5; i++) free(out[i].data);
  kdc_ir_module_destroy(mod);
}

/* GRU reset_after (bias [2, 3u]): 2 x 3u(f + u + 2) parameters, as Keras.
 * Names as bidirectional.py makes them for a layer already called
 * "forward_gru" and no backward_layer: "forward_" + name without the
 * "forward_" prefix, "backward_" + name without a "backward_" prefix. */
static void test_bidir_gru_count(void **state) {
  (void)state;
  const char *json = SEQ_MODEL(
      "{\"class_name\": \"Bidirectional\", \"config\": {\"name\": \"bi\", \"merge_mode\": "
      "\"ave\", \"layer\": {\"class_name\": \"GRU\", \"config\": {\"name\": \"forward_gru\", "
      "\"units\": 5}}}}");
  const char *path = fe_tmp("bidir_gru.json");
  fe_write(path, json, strlen(json));
  kdc_keras_model *m = fe_load_ok(path);
  assert_int_equal(kdc_frontend_param_count(m), 2 * 3 * 5 * (F + 5 + 2));
  assert_string_equal(m->vars[0]->path, "s/bi/forward_gru/gru_cell/kernel");
  assert_string_equal(m->vars[3]->path, "s/bi/backward_forward_gru/gru_cell/kernel");
  kdc_frontend_free(m);
}

static void load_err(const char *layer, kdc_code code, const char *what) {
  char json[1024];
  snprintf(json, sizeof json, SEQ_MODEL("%s"), layer);
  const char *path = fe_tmp("bidir_bad.json");
  fe_write(path, json, strlen(json));
  kdc_keras_model *m = NULL;
  fe_assert_err(kdc_frontend_load(path, &m), code, path, "config.layers[1]", what, NULL);
}

static void test_bidir_errors(void **state) {
  (void)state;
  load_err("{\"class_name\": \"Bidirectional\", \"config\": {\"name\": \"bi\", \"merge_mode\": "
           "\"max\", \"layer\": {\"class_name\": \"LSTM\", \"config\": {\"units\": 2}}}}",
           KDC_INVALID_INPUT, "config.merge_mode \"max\"");
  load_err("{\"class_name\": \"Bidirectional\", \"config\": {\"name\": \"bi\", \"layer\": "
           "{\"class_name\": \"Dense\", \"config\": {\"units\": 2}}}}",
           KDC_UNSUPPORTED, "config.layer.class_name \"Dense\"");
  load_err("{\"class_name\": \"Bidirectional\", \"config\": {\"name\": \"bi\"}}",
           KDC_INVALID_INPUT, "config.layer: expected");
  load_err("{\"class_name\": \"Bidirectional\", \"config\": {\"name\": \"bi\", \"layer\": "
           "{\"class_name\": \"GRU\", \"config\": {\"units\": 2}}, \"backward_layer\": "
           "{\"class_name\": \"GRU\", \"config\": {\"units\": 2}}}}",
           KDC_INVALID_INPUT, "same go_backwards");
}


#define TK2_INPUT(name, shape)                                                                \
  "{\"class_name\": \"InputLayer\", \"name\": \"" name "\", \"config\": "                      \
  "{\"batch_input_shape\": " shape ", \"name\": \"" name "\"}, \"inbound_nodes\": []}"

/* Seeded values in [-1, 1) for an initial state [B, U]. */
static void state_input(float *h, uint64_t seed) {
  for (int i = 0; i < B * U; i++) h[i] = (float)(2 * u01(&seed) - 1);
}

/* A sequence and two seeded initial states, as the inputs of a model. */
typedef struct seq_states {
  float x[B * T * F], s0[B * U], s1[B * U];
  const float *xs[3];
} seq_states;

static void seq_states_init(seq_states *d, uint64_t seed) {
  input(d->x);
  state_input(d->s0, seed);
  state_input(d->s1, seed + 1);
  d->xs[0] = d->x, d->xs[1] = d->s0, d->xs[2] = d->s1;
}

/* A tf.keras 2 functional model: inputs "in" [null, 4, 3], "s0" and "s1"
 * [null, 2], then the recurrent layer "r" given as |cls| and |cfg| called
 * on [in, s0, s1]; outputs |outs|. */
#define TK2_STATES_MODEL(cls, cfg, outs)                                                      \
  "{\"class_name\": \"Model\", \"config\": {\"name\": \"m\", \"layers\": ["                   \
  TK2_INPUT("in", "[null, 4, 3]") ", " TK2_INPUT("s0", "[null, 2]") ", "                     \
  TK2_INPUT("s1", "[null, 2]") ", {\"class_name\": \"" cls "\", \"name\": \"r\", "             \
  "\"config\": " cfg ", \"inbound_nodes\": [[[\"in\", 0, 0, {}], [\"s0\", 0, 0, {}], "           \
  "[\"s1\", 0, 0, {}]]]}], \"input_layers\": [[\"in\", 0, 0], [\"s0\", 0, 0], [\"s1\", 0, 0]], " \
  "\"output_layers\": " outs "}, \"keras_version\": \"2.4.0\"}"

/* A seq2seq decoder's call (tf.keras 2 records `initial_state=[h0, c0]` as
 * extra positional inputs): the scan starts from h0, c0 instead of zeros;
 * sequences and final states as Keras' lstm.py from those states. */
static void test_lstm_initial_state(void **state) {
  (void)state;
  seq_states d;
  seq_states_init(&d, 11);
  kdc_tensor out[3];
  kdc_module *mod = run_inputs(
      TK2_STATES_MODEL("LSTM", "{\"name\": \"lstm\", \"units\": 2, \"return_sequences\": true, "
                       "\"return_state\": true, \"recurrent_activation\": \"sigmoid\"}",
                       "[[\"r\", 0, 0], [\"r\", 0, 1], [\"r\", 0, 2]]"),
      d.xs, 3, out, 3);
  double seq[B * T * U], hs[B * U], cs[B * U];
  lstm_ref(mod, "r", d.x, false, d.s0, d.s1, seq, hs, cs);
  close_to(out[0].data, seq, B * T * U);
  close_to(out[1].data, hs, B * U);
  close_to(out[2].data, cs, B * U);
  for (int i = 0; i < 3; i++) free(out[i].data);
  kdc_ir_module_destroy(mod);
}

#define K3_TENSOR(name, shape)                                                                \
  "{\"class_name\": \"__keras_tensor__\", \"config\": {\"shape\": " shape ", \"dtype\": "    \
  "\"float32\", \"keras_history\": [\"" name "\", 0, 0]}}"
#define K3_INPUT(name, shape)                                                                 \
  "{\"module\": \"keras.layers\", \"class_name\": \"InputLayer\", \"config\": {\"batch_shape\": " \
  shape ", \"dtype\": \"float32\", \"name\": \"" name "\"}, \"name\": \"" name "\", "          \
  "\"inbound_nodes\": []}"

/* Keras 3 passes the states as the `initial_state` keyword: a GRU
 * (reset_after, go_backwards) started from h0. */
static void test_gru_initial_state_k3(void **state) {
  (void)state;
  seq_states d;
  seq_states_init(&d, 21);
  kdc_tensor out[1];
  kdc_module *mod = run_inputs(
      "{\"module\": \"keras\", \"class_name\": \"Functional\", \"config\": {\"name\": \"m\", "
      "\"layers\": [" K3_INPUT("in", "[null, 4, 3]") ", " K3_INPUT("h0", "[null, 2]") ", "
      "{\"module\": \"keras.layers\", \"class_name\": \"GRU\", \"config\": {\"name\": \"gru\", "
      "\"units\": 2, \"return_sequences\": true, \"go_backwards\": true}, \"name\": \"gru\", "
      "\"inbound_nodes\": [{\"args\": [" K3_TENSOR("in", "[null, 4, 3]") "], \"kwargs\": "
      "{\"initial_state\": [" K3_TENSOR("h0", "[null, 2]") "], \"mask\": null, "
      "\"training\": false}}]}], "
      "\"input_layers\": [[\"in\", 0, 0], [\"h0\", 0, 0]], \"output_layers\": [[\"gru\", 0, 0]]}}",
      d.xs, 2, out, 1);
  double want[B * T * U];
  gru_ref(mod, "", d.x, true, d.s0, want);
  close_to(out[0].data, want, B * T * U);
  free(out[0].data);
  kdc_ir_module_destroy(mod);
}

/* Bidirectional's call splits initial_state in half: [h_forward,
 * h_backward] for a SimpleRNN pair (tf.keras 2 positional form). */
static void test_bidir_initial_state(void **state) {
  (void)state;
  seq_states d;
  seq_states_init(&d, 31);
  kdc_tensor out[1];
  kdc_module *mod = run_inputs(
      TK2_STATES_MODEL("Bidirectional", "{\"name\": \"bi\", \"layer\": {\"class_name\": "
                       "\"SimpleRNN\", \"config\": {\"name\": \"rnn\", \"units\": 2, "
                       "\"return_sequences\": true}}}", "[[\"r\", 0, 0]]"),
      d.xs, 3, out, 1);
  double yf[B * T * U], yb[B * T * U], want[B * T * 2 * U];
  simple_rnn_ref0(d.x, weight(mod, "r/forward_rnn/simple_rnn_cell/kernel"),
                  weight(mod, "r/forward_rnn/simple_rnn_cell/recurrent_kernel"),
                  weight(mod, "r/forward_rnn/simple_rnn_cell/bias"), false, d.s0, yf);
  simple_rnn_ref0(d.x, weight(mod, "r/backward_rnn/simple_rnn_cell/kernel"),
                  weight(mod, "r/backward_rnn/simple_rnn_cell/recurrent_kernel"),
                  weight(mod, "r/backward_rnn/simple_rnn_cell/bias"), true, d.s1, yb);
  for (int b = 0; b < B; b++)
    for (int t = 0; t < T; t++)
      for (int j = 0; j < U; j++) {
        want[(b * T + t) * 2 * U + j] = yf[(b * T + t) * U + j];
        want[(b * T + t) * 2 * U + U + j] = yb[(b * T + (T - 1 - t)) * U + j];
      }
  close_to(out[0].data, want, B * T * 2 * U);
  free(out[0].data);
  kdc_ir_module_destroy(mod);
}

/* A state count or shape that does not fit the layer is a located error. */
static void test_initial_state_errors(void **state) {
  (void)state;
  static const char *const cases[][3] = {
      {"LSTM", "[[\"in\", 0, 0, {}], [\"h0\", 0, 0, {}]]",
       "1 initial state tensors given; a LSTM takes 2"},
      {"GRU", "[[\"in\", 0, 0, {}], [\"h0\", 0, 0, {}], [\"h0\", 0, 0, {}]]",
       "2 initial state tensors given; a GRU takes 1"},
      {"SimpleRNN", "[[\"in\", 0, 0, {}], [\"in\", 0, 0, {}]]",
       "initial state 0 must be (batch, units=2)"},
  };
  for (int i = 0; i < 3; i++) {
    char json[2048];
    snprintf(json, sizeof json,
             "{\"class_name\": \"Model\", \"config\": {\"name\": \"m\", \"layers\": ["
             TK2_INPUT("in", "[null, 4, 3]") ", "
             TK2_INPUT("h0", "[null, 2]") ", "
             "{\"class_name\": \"%s\", \"name\": \"r\", "
             "\"config\": {\"name\": \"r\", \"units\": 2}, "
             "\"inbound_nodes\": [%s]}], \"input_layers\": [[\"in\", 0, 0], [\"h0\", 0, 0]], "
             "\"output_layers\": [[\"r\", 0, 0]]}, \"keras_version\": \"2.4.0\"}",
             cases[i][0], cases[i][1]);
    const char *path = fe_tmp("rnn_state_bad.json");
    fe_write(path, json, strlen(json));
    kdc_keras_model *m = NULL;
    fe_assert_err(kdc_frontend_load(path, &m), KDC_INVALID_INPUT, path, "config.layers[2]",
                  cases[i][2], NULL);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_gru_reset_after),
      cmocka_unit_test(test_lstm_state_backwards),
      cmocka_unit_test(test_bidir_merge_modes),
      cmocka_unit_test(test_bidir_lstm_state),
      cmocka_unit_test(test_bidir_gru_count),
      cmocka_unit_test(test_bidir_errors),
      cmocka_unit_test(test_lstm_initial_state),
      cmocka_unit_test(test_gru_initial_state_k3),
      cmocka_unit_test(test_bidir_initial_state),
      cmocka_unit_test(test_initial_state_errors),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
