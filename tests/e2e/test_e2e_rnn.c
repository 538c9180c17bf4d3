/*
 * Recurrent layers on real files (../shared/real-json, SOURCES.md): the
 * LSTM models of GaurdianEye (tf.keras 2, two inputs, an LSTM over 2500
 * steps) and keras-imdb (Keras 2.0 list Sequential: Embedding, Conv1D,
 * MaxPooling1D, LSTM) with Keras initialisers (--random-init's path),
 * compiled for a 2x4 mesh with DataParallel and run through the runtime
 * (LOOP steps on 8 devices), equal the reference interpreter on the
 * unpartitioned model (|d| <= 1e-5 + 1e-4 |ref|).  The third LSTM file
 * (Anaya-Koirala) has an unknown time dimension: lowering it is the
 * located "is unknown (None)" error.  And examples/lstm_text and
 * examples/bidir_rnn (Bidirectional LSTM and GRU) train (`kdc run --fit`)
 * with equal losses on 1 device and on 2x4, and so does a model whose
 * LSTM and GRU decoders start from a Bidirectional encoder's final states
 * (Keras 3 `initial_state` kwargs; gradients reach the encoder through
 * them), also with dropout and recurrent_dropout on the decoders.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <math.h>
#include <string.h>

#include <cmocka.h>

#include "codegen/codegen.h"
#include "e2e_util.h"
#include "frontend/frontend.h"
#include "frontend/layout.h"
#include "ir/ir.h"
#include "passes/passes.h"
#include "runtime/runtime.h"

enum { BATCH = 8 };

static const char *real_path(const char *file, char *buf, size_t n) {
  snprintf(buf, n, "%s/real-json/%s", KDC_SHARED_DIR, file);
  return e2e_exists(buf) ? buf : NULL;
}

/* Lowers |path| (batch BATCH, mesh |mesh| or none) with seeded initialisers. */
static kdc_module *lower(const char *path, const kdc_mesh *mesh) {
  kdc_keras_model *km = NULL;
  kdc_module *mod = NULL;
  assert_null(kdc_frontend_load(path, &km));
  kdc_lower_options lo = {.batch = BATCH, .mesh = mesh};
  kdc_status st = kdc_frontend_lower(km, &lo, &mod);
  if (st) fail_msg("%s", kdc_status_message(st));
  assert_null(kdc_frontend_init_weights(km, mod, 7));
  kdc_frontend_free(km);
  return mod;
}

static void run_real(const char *file, int64_t id_range) {
  char path[1024];
  if (!real_path(file, path, sizeof path)) skip();
  /* inputs: uniform [-1, 1), or integer ids in [0, id_range) */
  kdc_module *ref = lower(path, NULL);
  kdc_func *f = kdc_ir_module_find_func(ref, "predict");
  kdc_tensor *args = calloc(f->n_params, sizeof *args);
  const void *ins[4];
  size_t ni = 0;
  uint64_t s = 12345;
  for (size_t i = 0; i < f->n_params; i++) {
    const kdc_node *nd = kdc_ir_node(f, f->params[i]);
    args[i].type = nd->type;
    if (nd->attr.param.kind != KDC_PARAM_INPUT) continue;
    int64_t n = kdc_type_numel(&nd->type);
    float *x = malloc((size_t)n * sizeof *x);
    for (int64_t k = 0; k < n; k++) {
      s = s * 6364136223846793005ull + 1442695040888963407ull;
      double u = (double)(s >> 11) / 9007199254740992.0;
      x[k] = id_range ? (float)(int64_t)(u * (double)id_range) : (float)(2 * u - 1);
    }
    args[i].data = x;
    assert_true(ni < 4);
    ins[ni++] = x;
  }
  kdc_tensor want[1];
  size_t np = f->n_params;
  assert_int_equal(f->n_results, 1);
  assert_null(kdc_ir_interpret(f, args, np, want));
  kdc_ir_module_destroy(ref);
  /* 2x4 DataParallel through the runtime */
  kdc_mesh mesh;
  assert_null(kdc_mesh_parse("2x4", NULL, &mesh));
  kdc_module *mod = lower(path, &mesh);
  assert_null(kdc_pass_pipeline_run(mod, NULL));
  char *plan_path = e2e_path("rnn.plan");
  kdc_codegen_options co;
  memset(&co, 0, sizeof co);
  co.no_ir_text = true;
  assert_null(kdc_codegen_cpu_plan(mod, &co, plan_path));
  kdc_ir_module_destroy(mod);
  kdc_rt_plan *p = NULL;
  assert_null(kdc_rt_plan_load(plan_path, &p));
  assert_int_equal(kdc_rt_plan_device_count(p), 8);
  int loops = 0, colls = 0;
  const kdc_prog_func *pf = &p->prog.funcs[0];
  for (uint32_t k = 0; k < pf->n_steps; k++) {
    loops += pf->steps[k].kind == KDC_STEP_LOOP;
    colls += pf->steps[k].kind == KDC_STEP_COLLECTIVE;
  }
  assert_true(loops >= 1);
  assert_int_equal(colls, 0); /* DataParallel: the batch splits, no communication */
  size_t bytes = kdc_type_bytes(&want[0].type);
  assert_int_equal(kdc_rt_plan_output(p, 0, 0)->bytes, bytes);
  float *got = malloc(bytes);
  void *outs[1] = {got};
  assert_null(kdc_rt_plan_run(p, ins, outs));
  double err = e2e_f32_compare(got, want[0].data, bytes / 4, 1e-5, 1e-4);
  if (err > 1) fail_msg("%s: 2x4 differs from the interpreter (%.3g of tolerance)", file, err);
  kdc_rt_plan_release(p);
  free(got), free(want[0].data), free(plan_path);
  for (size_t i = 0; i < np; i++) free(args[i].data);
  free(args);
}

static void test_gaurdian_eye(void **state) {
  (void)state;
  run_real("ShaikRiyaz2003__GaurdianEye__model_architecture.json", 0);
}

static void test_imdb(void **state) {
  (void)state;
  run_real("0xPr0xy__keras-imdb-sentiment-classification__model.json", 50000);
}

static void test_anaya_unknown_time(void **state) {
  (void)state;
  char path[1024];
  if (!real_path("Anaya-Koirala__melody-generating-lstm-cs371__config.json", path, sizeof path))
    skip();
  kdc_keras_model *km = NULL;
  kdc_module *mod = NULL;
  assert_null(kdc_frontend_load(path, &km));
  kdc_lower_options lo = {.batch = BATCH};
  kdc_status st = kdc_frontend_lower(km, &lo, &mod);
  assert_non_null(st);
  assert_non_null(strstr(kdc_status_message(st), "is unknown (None)"));
  assert_non_null(strstr(kdc_status_message(st), path));
  kdc_status_free(st);
  kdc_frontend_free(km);
}

/* Training through scan (passes/grad_scan.c) with the kdc binary: example
 * |dir| (ids in [0, vocab) over |L| steps), sparse categorical
 * cross-entropy, Adam, 3 epochs of 64 seeded rows in batches of 16, on 1
 * device and on 2x4: the loss goes down and the epoch losses agree
 * (|d| <= 1e-5 relative). */
static void fit_meshes(const char *dir, int L, int vocab) {
  enum { N = 64 };
  float *x = calloc((size_t)(N * L), sizeof *x), y[N];
  uint64_t s = 77;
  for (int i = 0; i < N; i++) {
    int sum = 0;
    for (int t = 0; t < L; t++) {
      s = s * 6364136223846793005ull + 1442695040888963407ull;
      int id = (int)((s >> 33) % (uint64_t)vocab);
      x[i * L + t] = (float)id, sum += id;
    }
    y[i] = (float)(sum % 3);
  }
  char *xp = e2e_path("fit_x.npy"), *yp = e2e_path("fit_y.npy");
  assert_null(kdc_npy_write(xp, KDC_IO_DTYPE_F32, 2, (int64_t[]){N, L}, x));
  assert_null(kdc_npy_write(yp, KDC_IO_DTYPE_F32, 1, (int64_t[]){N}, y));
  char rel[128];
  snprintf(rel, sizeof rel, "examples/%s/model.json", dir);
  char *model = e2e_src(rel);
  snprintf(rel, sizeof rel, "examples/%s/weights.safetensors", dir);
  char *w = e2e_src(rel);
  e2e_fit_equal_1_vs_2x4(dir, model, w, xp, yp, 1e-4);
  free(xp), free(yp), free(model), free(w), free(x);
}

static void test_lstm_fit_meshes(void **state) {
  (void)state;
  fit_meshes("lstm_text", 10, 50);
}

/* Bidirectional(LSTM) + Bidirectional(GRU, sum): both scans of each wrapper
 * train through the scan VJP. */
static void test_bidir_fit_meshes(void **state) {
  (void)state;
  fit_meshes("bidir_rnn", 9, 40);
}

/* A Keras 3 layer entry |name| of class |cls| with config members |cfg|,
 * called on the keras tensor |x| (layer, tensor) with the tensors |st|
 * ("layer:i,layer:j", or NULL) as the call's initial_state kwarg. */
static size_t k3_layer(char *b, size_t cap, const char *cls, const char *name, const char *cfg,
                       const char *x, const char *st) {
  char kw[512] = "{}";
  if (st) {
    size_t k = (size_t)snprintf(kw, sizeof kw, "{\"initial_state\": [");
    char tmp[128];
    snprintf(tmp, sizeof tmp, "%s", st);
    char *save = NULL;
    for (char *s = strtok_r(tmp, ",", &save); s; s = strtok_r(NULL, ",", &save)) {
      char *colon = strchr(s, ':');
      *colon = 0;
      k += (size_t)snprintf(kw + k, sizeof kw - k, "%s{\"class_name\": \"__keras_tensor__\", "
                            "\"config\": {\"keras_history\": [\"%s\", 0, %s]}}",
                            s == tmp ? "" : ", ", s, colon + 1);
    }
    snprintf(kw + k, sizeof kw - k, "]}");
  }
  return (size_t)snprintf(b, cap, "{\"class_name\": \"%s\", \"name\": \"%s\", \"config\": "
                          "{\"name\": \"%s\", %s}, \"inbound_nodes\": [{\"args\": "
                          "[{\"class_name\": \"__keras_tensor__\", \"config\": "
                          "{\"keras_history\": [\"%s\", 0, 0]}}], \"kwargs\": %s}]}",
                          cls, name, name, cfg, x, kw);
}

/* Input (8, 4) -> Bidirectional(LSTM(5, return_state)) `enc`; LSTM(5)(x,
 * initial_state=[h_b, c_b]) `dec` and GRU(5)(x, initial_state=[h_f])
 * `gdec` -> Concatenate -> Dense(3, softmax); |rnn_cfg| extra config of
 * the decoders (e.g. dropout).  Written to TMP/|file|. */
static char *state_model(const char *file, const char *rnn_cfg) {
  char *b = malloc(16384), ls[12000], cfg[512];
  size_t k = 0;
  k += (size_t)snprintf(ls + k, sizeof ls - k, "{\"class_name\": \"InputLayer\", \"name\": "
                        "\"x\", \"config\": {\"name\": \"x\", \"batch_shape\": [null, 8, 4], "
                        "\"dtype\": \"float32\"}, \"inbound_nodes\": []}, ");
  k += k3_layer(ls + k, sizeof ls - k, "Bidirectional", "enc",
                "\"layer\": {\"class_name\": \"LSTM\", \"config\": {\"name\": \"lstm\", "
                "\"units\": 5, \"return_state\": true}}", "x", NULL);
  snprintf(cfg, sizeof cfg, "\"units\": 5%s", rnn_cfg);
  k += (size_t)snprintf(ls + k, sizeof ls - k, ", ");
  k += k3_layer(ls + k, sizeof ls - k, "LSTM", "dec", cfg, "x", "enc:3,enc:4");
  k += (size_t)snprintf(ls + k, sizeof ls - k, ", ");
  k += k3_layer(ls + k, sizeof ls - k, "GRU", "gdec", cfg, "x", "enc:1");
  k += (size_t)snprintf(ls + k, sizeof ls - k, ", {\"class_name\": \"Concatenate\", \"name\": "
                        "\"cat\", \"config\": {\"name\": \"cat\", \"axis\": -1}, "
                        "\"inbound_nodes\": [{\"args\": [[{\"class_name\": \"__keras_tensor__\", "
                        "\"config\": {\"keras_history\": [\"dec\", 0, 0]}}, {\"class_name\": "
                        "\"__keras_tensor__\", \"config\": {\"keras_history\": [\"gdec\", 0, 0]}}]], "
                        "\"kwargs\": {}}]}, ");
  k3_layer(ls + k, sizeof ls - k, "Dense", "head", "\"units\": 3, \"activation\": \"softmax\"",
           "cat", NULL);
  snprintf(b, 16384, "{\"class_name\": \"Functional\", \"config\": {\"name\": \"s2s\", "
           "\"layers\": [%s], \"input_layers\": [[\"x\", 0, 0]], \"output_layers\": "
           "[[\"head\", 0, 0]]}}", ls);
  char *path = e2e_path(file);
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fputs(b, f);
  fclose(f);
  free(b);
  return path;
}

/* Training through initial states: the model above (random init, seed 5),
 * 64 seeded rows (x uniform [-1, 1), y = the sign pattern class of x's
 * first step) in batches of 16 for 3 epochs with Adam: the loss goes down
 * and the epoch losses on 1 device and 2x4 agree (1e-5 relative). */
static void fit_state_model(const char *rnn_cfg) {
  enum { N = 64, L = 8, F = 4 };
  float *x = calloc((size_t)(N * L * F), sizeof *x), y[N];
  uint64_t s = 91;
  for (int i = 0; i < N * L * F; i++) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    x[i] = (float)(2.0 * (double)(s >> 11) / 9007199254740992.0 - 1.0);
  }
  for (int i = 0; i < N; i++) y[i] = (float)((x[i * L * F] > 0) + (x[i * L * F + 1] > 0));
  char *xp = e2e_path("s2s_x.npy"), *yp = e2e_path("s2s_y.npy");
  assert_null(kdc_npy_write(xp, KDC_IO_DTYPE_F32, 3, (int64_t[]){N, L, F}, x));
  assert_null(kdc_npy_write(yp, KDC_IO_DTYPE_F32, 1, (int64_t[]){N}, y));
  char *model = state_model("s2s.json", rnn_cfg);
  e2e_fit_equal_1_vs_2x4("initial states", model, NULL, xp, yp, 1e-4);
  free(xp), free(yp), free(model), free(x);
}

static void test_initial_state_fit_meshes(void **state) {
  (void)state;
  fit_state_model("");
}

/* The same with dropout and recurrent_dropout on both decoders: the masks
 * (kdc's counter-based stream, drawn once per call) are the same on every
 * mesh, so the epoch losses still agree. */
static void test_dropout_fit_meshes(void **state) {
  (void)state;
  fit_state_model(", \"dropout\": 0.2, \"recurrent_dropout\": 0.3");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_gaurdian_eye),
      cmocka_unit_test(test_imdb),
      cmocka_unit_test(test_anaya_unknown_time),
      cmocka_unit_test(test_lstm_fit_meshes),
      cmocka_unit_test(test_bidir_fit_meshes),
      cmocka_unit_test(test_initial_state_fit_meshes),
      cmocka_unit_test(test_dropout_fit_meshes),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
