/*
 * Recurrent layers (frontend/lower_rnn.c) against the Keras 3 formulas
 * written out here in double precision (keras/src/layers/rnn/gru.py,
 * lstm.py, simple_rnn.py), for the configurations the TF.js reference in
 * examples/ cannot produce: GRU reset_after=true (Keras 3's default, bias
 * [2, 3u]; tfjs only has reset_after=false) and LSTM return_state with
 * go_backwards; and the Bidirectional wrapper (merge modes, weight paths,
 * Keras' parameter counts, located config errors).  Weights are seeded; the
 * lowered predict runs on the reference interpreter; |d| <= 1e-5.
 * Initial states (Keras' `initial_state`): examples/seq2seq (TF.js 4.22,
 * tests/reference/gen.js: encoders' final states start LSTM, GRU,
 * SimpleRNN and Bidirectional decoders) through the interpreter within
 * 1e-5 + 1e-4 |ref|, its gradients (the encoder input's only path is
 * through the states) against central differences, and the located
 * errors for a wrong number or shape of states.
 * dropout / recurrent_dropout in train_forward (Keras 3 DropoutRNNCell):
 * the Keras 3 cells written out with per-gate masks (implementation 1,
 * which recurrent_dropout forces) or one shared mask, fed the masks of
 * kdc's counter-based stream read back with kdc_rng_uniform_at; and their
 * gradients against central differences.
 */
#include <math.h>

#include "fe_test.h"
#include "fe_grad.h"

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

static void close_to_what(const float *got, const double *want, int n, const char *what) {
  for (int i = 0; i < n; i++)
    if (fabs(got[i] - want[i]) > 1e-5)
      fail_msg("%s: element %d: got %.7g, want %.7g", what, i, (double)got[i], want[i]);
}

static void close_to(const float *got, const double *want, int n) {
  close_to_what(got, want, n, "output");
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

/* h_t of a SimpleRNN (tanh) over |x| [B, T, F], written to y[b][s] in
 * processing order (the last step first when |back|). */
static void simple_rnn_ref(const float *x, const float *W, const float *R, const float *bias,
                           bool back, double *y) {
  for (int b = 0; b < B; b++) {
    double h[U] = {0, 0};
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

/* ---- dropout / recurrent_dropout in train_forward ----------------------- */

/* The layer |cls| ("LSTM", "GRU", "GRU0" = reset_after false, "SimpleRNN")
 * in Keras 3 implementation-1 form (keras/src/layers/rnn/lstm.py, gru.py,
 * simple_rnn.py), return_sequences, in double: gate k's input is x * mi[k]
 * and its recurrent input h * mr[k] (mi [G][B][F], mr [G][B][U]: a mask
 * shared by the gates is repeated), the same masks at every step. */
static void dropout_ref(const char *cls, const float *x, const float *W, const float *R,
                        const float *bias, const double *mi, const double *mr, double *y) {
  bool lstm = !strcmp(cls, "LSTM"), gru = !strncmp(cls, "GRU", 3), after = !strcmp(cls, "GRU");
  int G = lstm ? 4 : gru ? 3 : 1;
  for (int b = 0; b < B; b++) {
    double h[U] = {0}, c[U] = {0};
    for (int t = 0; t < T; t++) {
      double xg[4 * U], hg[4 * U]; /* x_k @ W_k (+ input bias), h_k @ U_k (+ recurrent bias) */
      for (int k = 0; k < G; k++)
        for (int j = 0; j < U; j++) {
          int col = k * U + j;
          double sx = bias[col], sh = after ? bias[G * U + col] : 0;
          for (int q = 0; q < F; q++)
            sx += x[(b * T + t) * F + q] * mi[(k * B + b) * F + q] * W[q * G * U + col];
          for (int q = 0; q < U; q++) sh += h[q] * mr[(k * B + b) * U + q] * R[q * G * U + col];
          xg[col] = sx, hg[col] = sh;
        }
      double hn[U];
      for (int j = 0; j < U; j++) {
        if (lstm) {
          double i = sigm(xg[j] + hg[j]), f = sigm(xg[U + j] + hg[U + j]);
          double g = tanh(xg[2 * U + j] + hg[2 * U + j]), o = sigm(xg[3 * U + j] + hg[3 * U + j]);
          c[j] = f * c[j] + i * g;
          hn[j] = o * tanh(c[j]);
        } else if (gru) {
          double z = sigm(xg[j] + hg[j]), r = sigm(xg[U + j] + hg[U + j]), rh;
          if (after) {
            rh = r * hg[2 * U + j];
          } else { /* (r * h_h) @ U_h, r of the summed unit q */
            rh = 0;
            for (int q = 0; q < U; q++)
              rh += sigm(xg[U + q] + hg[U + q]) * h[q] * mr[(2 * B + b) * U + q] *
                    R[q * G * U + 2 * U + j];
          }
          hn[j] = z * h[j] + (1 - z) * tanh(xg[2 * U + j] + rh);
        } else {
          hn[j] = tanh(xg[j] + hg[j]);
        }
      }
      for (int j = 0; j < U; j++) h[j] = hn[j], y[(b * T + t) * U + j] = hn[j];
    }
  }
}

/* The masks of the rng_uniform [n, B, d] node of |f| whose last dim is |d|
 * (u < 1 - rate kept, scaled by 1 / (1 - rate): keras.random.dropout) at
 * step |step|, repeated to |G| gates when n is 1; returns n (0: none). */
static int masks_of(const kdc_func *f, int64_t d, double rate, int32_t step, int G, double *m) {
  for (size_t v = 0; v < f->n_nodes; v++) {
    const kdc_node *nd = &f->nodes[v];
    if (nd->op != KDC_OP_RNG_UNIFORM || nd->type.dims[2] != d) continue;
    int n = (int)nd->type.dims[0];
    assert_true(n == 1 || n == G);
    assert_int_equal(nd->type.dims[1], B);
    for (int k = 0; k < G; k++)
      for (int i = 0; i < B * d; i++) {
        float u = kdc_rng_uniform_at(nd->attr.seed, step, (n == 1 ? 0 : k) * B * d + i);
        m[k * B * d + i] = u < (float)(1 - rate) ? (float)(1 / (1 - rate)) : 0;
      }
    return n;
  }
  for (int i = 0; i < G * B * d; i++) m[i] = 1;
  return 0;
}

/* |cls| with dropout |dr| and recurrent_dropout |rdr| in train_forward at
 * step 3 against dropout_ref with the masks of kdc's stream; |n_want|: the
 * expected number of input and of recurrent masks. */
static void check_dropout(const char *cls, const char *extra, double dr, double rdr, int n_in,
                          int n_rec) {
  bool lstm = !strcmp(cls, "LSTM"), gru = !strncmp(cls, "GRU", 3);
  int G = lstm ? 4 : gru ? 3 : 1;
  const char *kcls = gru ? "GRU" : cls;
  char json[1024];
  snprintf(json, sizeof json, SEQ_MODEL("{\"class_name\": \"%s\", \"config\": {\"name\": "
                                        "\"r\", \"units\": 2, \"return_sequences\": true, "
                                        "\"dropout\": %g, \"recurrent_dropout\": %g%s%s}}"),
           kcls, dr, rdr, strcmp(cls, "GRU0") ? "" : ", \"reset_after\": false", extra);
  const char *path = fe_tmp("rnn_drop.json");
  fe_write(path, json, strlen(json));
  kdc_keras_model *km = fe_load_ok(path);
  kdc_lower_options opt = {.batch = B, .train_forward = true, .dropout_seed = 5};
  kdc_module *mod = NULL;
  kdc_status st = kdc_frontend_lower(km, &opt, &mod);
  if (st) fail_msg("%s: %s", cls, kdc_status_message(st));
  kdc_frontend_free(km);
  fill_weights(mod, 99);
  kdc_func *f = kdc_ir_module_find_func(mod, "train_forward");
  float x[B * T * F];
  input(x);
  int32_t step = 3;
  kdc_tensor *args = calloc(f->n_params, sizeof *args), out[1];
  for (size_t i = 0; i < f->n_params; i++) {
    const kdc_node *nd = kdc_ir_node(f, f->params[i]);
    args[i].type = nd->type;
    if (nd->attr.param.kind == KDC_PARAM_INPUT) args[i].data = x;
    if (nd->attr.param.kind == KDC_PARAM_STATE) args[i].data = &step;
  }
  st = kdc_ir_interpret(f, args, f->n_params, out);
  if (st) fail_msg("%s: %s", cls, kdc_status_message(st));
  double mi[4 * B * F], mr[4 * B * U], want[B * T * U];
  assert_int_equal(masks_of(f, F, dr, step, G, mi), n_in);
  assert_int_equal(masks_of(f, U, rdr, step, G, mr), n_rec);
  char pre[64];
  snprintf(pre, sizeof pre, "s/r/%s_cell/", lstm ? "lstm" : gru ? "gru" : "simple_rnn");
  char wn[3][96];
  snprintf(wn[0], 96, "%skernel", pre), snprintf(wn[1], 96, "%srecurrent_kernel", pre);
  snprintf(wn[2], 96, "%sbias", pre);
  dropout_ref(cls, x, weight(mod, wn[0]), weight(mod, wn[1]), weight(mod, wn[2]), mi, mr, want);
  close_to_what(out[0].data, want, B * T * U, json);
  /* the masks act: predict (inference) differs */
  kdc_tensor pout[1];
  kdc_func *p = kdc_ir_module_find_func(mod, "predict");
  for (size_t i = 0; i < p->n_params; i++) {
    const kdc_node *nd = kdc_ir_node(p, p->params[i]);
    args[i].type = nd->type;
    args[i].data = nd->attr.param.kind == KDC_PARAM_INPUT ? x : NULL;
  }
  assert_null(kdc_ir_interpret(p, args, p->n_params, pout));
  double diff = 0;
  for (int i = 0; i < B * T * U; i++)
    diff = fmax(diff, fabs(((float *)pout[0].data)[i] - ((float *)out[0].data)[i]));
  assert_true(diff > 1e-3);
  free(out[0].data), free(pout[0].data), free(args);
  kdc_ir_module_destroy(mod);
}

static void test_dropout_train_forward(void **state) {
  (void)state;
  /* recurrent_dropout != 0 switches LSTM/GRU to implementation 1: a mask per gate */
  check_dropout("LSTM", "", 0.3, 0.4, 4, 4);
  check_dropout("GRU", "", 0.5, 0.25, 3, 3);
  check_dropout("GRU0", "", 0.2, 0.5, 3, 3);
  check_dropout("SimpleRNN", "", 0.3, 0.4, 1, 1);
  /* dropout alone (implementation 2): one input mask shared by the gates */
  check_dropout("LSTM", "", 0.4, 0, 1, 0);
  check_dropout("GRU", "", 0.4, 0, 1, 0);
  /* implementation 1 asked for: a mask per gate */
  check_dropout("LSTM", ", \"implementation\": 1", 0.4, 0, 4, 0);
  check_dropout("SimpleRNN", "", 0, 0.5, 0, 1);
}

/* Gradients of train_forward with both dropouts (masks fixed by the step):
 * every weight and input element against central differences. */
static void test_dropout_gradients(void **state) {
  (void)state;
  static const char *const layers[2] = {
      "{\"class_name\": \"LSTM\", \"config\": {\"name\": \"r\", \"units\": 2, "
      "\"return_sequences\": true, \"dropout\": 0.3, \"recurrent_dropout\": 0.4}}",
      "{\"class_name\": \"GRU\", \"config\": {\"name\": \"r\", \"units\": 2, "
      "\"dropout\": 0.3, \"recurrent_dropout\": 0.4, \"reset_after\": false}}"};
  for (int k = 0; k < 2; k++) {
    char json[1024];
    snprintf(json, sizeof json, SEQ_MODEL("%s"), layers[k]);
    const char *path = fe_tmp("rnn_drop_grad.json");
    fe_write(path, json, strlen(json));
    lowered L;
    float x[B * T * F];
    input(x);
    lower_model(path, true, B, (const float *const[]){x}, 7, &L);
    grad_check(&L, "iteration", 1, 20);
    lowered_free(&L);
  }
}

#define S2S(f) FE_EXAMPLE("seq2seq", f)

static void test_seq2seq_reference(void **state) {
  (void)state;
  lowered L;
  lower_example(S2S("model.json"), S2S("weights.safetensors"),
                (const char *[]){S2S("input0.npy"), S2S("input1.npy")}, 37, &L);
  kdc_tensor out;
  assert_null(kdc_ir_interpret(L.f, L.args, L.f->n_params, &out));
  kdc_npy_array want;
  assert_null(kdc_npy_read(S2S("expected.npy"), &want));
  int64_t n = kdc_type_numel(&out.type);
  assert_int_equal((int64_t)(want.nbytes / 4), n);
  const float *g = out.data, *w = want.data;
  for (int64_t i = 0; i < n; i++)
    if (!(fabsf(g[i] - w[i]) <= 1e-5f + 1e-4f * fabsf(w[i])))
      fail_msg("seq2seq element %lld: got %.8g, TF.js %.8g", (long long)i, g[i], w[i]);
  kdc_npy_free(&want);
  free(out.data);
  lowered_free(&L);
}

/* Every input and weight element of seq2seq at batch 2 (every 3rd
 * element): the encoders reach the output only through the decoders'
 * initial states, so scan's initial-carry cotangent is what is checked on
 * `enc`. */
static void test_seq2seq_gradients(void **state) {
  (void)state;
  lowered L;
  lower_example(S2S("model.json"), S2S("weights.safetensors"),
                (const char *[]){S2S("input0.npy"), S2S("input1.npy")}, 2, &L);
  grad_check(&L, NULL, 3, 600);
  lowered_free(&L);
}

static void state_err(const char *cls, const char *cfg, const char *kwargs, const char *what) {
  const char *path = fe_model_file("state_bad.json", "4, 3", cls, cfg, NULL, kwargs);
  kdc_keras_model *m = NULL;
  fe_assert_err(kdc_frontend_load(path, &m), KDC_INVALID_INPUT, path, what, NULL);
}

static void test_initial_state_errors(void **state) {
  (void)state;
  state_err("LSTM", "\"units\": 3", "{\"initial_state\": [KT]}",
            "1 initial state tensor(s) passed: LSTM takes 2");
  state_err("GRU", "\"units\": 3", "{\"initial_state\": [KT]}", "initial state 0 must be "
            "(batch, units=3)");
  state_err("Bidirectional", "\"layer\": {\"class_name\": \"GRU\", \"config\": "
            "{\"units\": 3}}", "{\"initial_state\": [KT]}",
            "1 initial state tensors passed: Bidirectional takes");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_gru_reset_after),
      cmocka_unit_test(test_lstm_state_backwards),
      cmocka_unit_test(test_bidir_merge_modes),
      cmocka_unit_test(test_bidir_lstm_state),
      cmocka_unit_test(test_bidir_gru_count),
      cmocka_unit_test(test_bidir_errors),
      cmocka_unit_test(test_seq2seq_reference),
      cmocka_unit_test(test_seq2seq_gradients),
      cmocka_unit_test(test_initial_state_errors),
      cmocka_unit_test(test_dropout_train_forward),
      cmocka_unit_test(test_dropout_gradients),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
