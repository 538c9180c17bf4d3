/*
 * Real model files of tests/frontend/data/real3 (SOURCES.md there), the fast
 * subset of their checks:
 *
 * - every loadable file loads with the parameter count TensorFlow.js 4.22
 *   gives (tests/reference/count_params.js; derived without kdc) and the
 *   same non-trainable part;
 * - every refused file makes `kdc inspect` exit with status 2 and one
 *   located line naming the file, the JSON place and the reason;
 * - kdc's predictions equal TF.js's: tests/e2e/data/real3/<model>/ holds
 *   seeded weights, an input batch and tfjs' outputs written by
 *   tests/reference/gen_real3.sh (real_diff.js; kdc plays no part), for the
 *   files whose weights are small enough to keep and for
 *   tests/e2e/data/k3_not_equal_mask.json (the Keras 3 NotEqual mask node
 *   of elrath017's caption model at a small size). `kdc compile --weights`
 *   + `kdc run` on 1 device and data-parallel on 2 devices must give tfjs'
 *   outputs within |d| <= 1e-5 max|ref| + 1e-4 |ref| (both sides float32,
 *   summed in other orders; real_diff.js explains the bound). The sanitizer
 *   build (tests/test_sampling.h) runs 1 device only.
 * - the mask check is not vacuous: the same mask model with its mask
 *   removed differs from tfjs on the padded rows and matches on the others.
 *
 * The whole differential sweep (every file, 2x4 DataParallel and
 * ModelParallel layouts) is `node tests/reference/real_diff.js`, by hand.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "../test_sampling.h"
#include "common/io.h"
#include "e2e_util.h"
#include "frontend/frontend.h"

#define REAL3 "tests/frontend/data/real3/"

static const struct {
  const char *file;
  int64_t total, non_trainable;
} counted[] = {
    {"02vansh__Speech-Emotion-Recognition__cnn_lstm_model.json", 124488, 0},
    {"HelenVe__FakeNews__gru_model.json", 641522, 0},
    {"Kaviya152__SAC-TTS__lstm_model.json", 3431807, 0},
    {"Krishnasai-18__Toxic-Comment-Classification_DL-NLP__model_gru.json", 6168963, 0},
    {"MdAdeebahmed01__Epileptic-Seizure-Detection__model_architecture.json", 157190, 0},
    {"ansh2607__Solar-Power-Prediction__gru_model.json", 33916, 0},
    {"anthonymfowler15__nlu_training__cnn_model.json", 288251, 0},
    {"elrath017__Image-Caption-Generator__model_arch.json", 5992741, 0},
    {"icemeteor__information-extraction__lstm_model.json", 81553, 51200},
    {"nwerblun__selective_voice_filter__model_arch.json", 11298065, 0},
    {"teriusbin__boston-house-price-predict__attention_model.json", 20799, 0},
    {"vyomshm__DeepAnomaly__lstm_model.json", 3701, 0},
};

static void test_counts(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof counted / sizeof counted[0]; i++) {
    char rel[512];
    snprintf(rel, sizeof rel, REAL3 "%s", counted[i].file);
    char *path = e2e_src(rel);
    kdc_keras_model *m = NULL;
    kdc_status st = kdc_frontend_load(path, &m);
    if (st) fail_msg("%s", kdc_status_message(st));
    int64_t total = kdc_frontend_param_count(m);
    int64_t frozen = total - kdc_frontend_trainable_count(m);
    if (total != counted[i].total || frozen != counted[i].non_trainable)
      fail_msg("%s: %lld params (%lld non-trainable), expected %lld (%lld)", counted[i].file,
               (long long)total, (long long)frozen, (long long)counted[i].total,
               (long long)counted[i].non_trainable);
    kdc_frontend_free(m);
    free(path);
  }
}

static void test_refused(void **state) {
  (void)state;
  static const struct {
    const char *file, *msg; /* msg follows "<path>: " */
  } refused[] = {
      {"Mebreda__Autokeras__model_architecture.json",
       "config.layers[1].class_name: custom layer class \"CastToFloat32\" (module "
       "\"autokeras.keras_layers\""},
      {"SanjanaISB__NLPGroup8__transformer_model_architecture.json",
       "config.layers[2].class_name: custom layer class \"PositionalEmbedding\" (registered_name "
       "\"PositionalEmbedding\""},
      {"Vanshita99__Modulation-Scheme-Classifier__model_lstm.json",
       "config.layers[0].class_name: layer class \"CuDNNLSTM\" is not supported by kdc: Keras 2's "
       "GPU-only layer"},
      {"Rishit605__Resume-Analysis-NLP__model_architecture.json",
       "class_name: expected a model class (\"Functional\", \"Sequential\" or \"Model\"), got "
       "\"TextClassifier\""},
      {"reinoudbosch__tensorflow-vanilla-transformer__transformer.json",
       "class_name: expected a model class (\"Functional\", \"Sequential\" or \"Model\"), got "
       "\"Transformer\""},
  };
  for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
    char rel[512], want[1024];
    snprintf(rel, sizeof rel, REAL3 "%s", refused[i].file);
    char *path = e2e_src(rel);
    e2e_result r;
    e2e_kdc(&r, "inspect", path, NULL);
    snprintf(want, sizeof want, "kdc: error: %s: %s", path, refused[i].msg);
    if (r.status != 2 || strncmp(r.err, want, strlen(want)) || e2e_lines(r.err) != 1)
      fail_msg("%s: status %d, stderr:\n%s\nexpected status 2 and one line starting\n%s",
               refused[i].file, r.status, r.err, want);
    free(path);
  }
}

/* One checked-in reference: the model, its data folder, the batch. */
static const struct {
  const char *model; /* relative to the source dir */
  const char *data;  /* folder in tests/e2e/data/real3 */
  const char *batch;
} refs[] = {
    {REAL3 "teriusbin__boston-house-price-predict__attention_model.json",
     "teriusbin__boston-house-price-predict__attention_model", "2"},
    {REAL3 "vyomshm__DeepAnomaly__lstm_model.json", "vyomshm__DeepAnomaly__lstm_model", "2"},
    {REAL3 "ansh2607__Solar-Power-Prediction__gru_model.json",
     "ansh2607__Solar-Power-Prediction__gru_model", "2"},
    {REAL3 "icemeteor__information-extraction__lstm_model.json",
     "icemeteor__information-extraction__lstm_model", "2"},
    {REAL3 "02vansh__Speech-Emotion-Recognition__cnn_lstm_model.json",
     "02vansh__Speech-Emotion-Recognition__cnn_lstm_model", "2"},
    {"tests/e2e/data/k3_not_equal_mask.json", "k3_not_equal_mask", "4"},
};

static char *ref_file(const char *data, const char *name) {
  char rel[512];
  snprintf(rel, sizeof rel, "tests/e2e/data/real3/%s/%s", data, name);
  return e2e_src(rel);
}

/* Max over the rows in [r0, r1) of |got - ref| / (1e-5 max|ref| + 1e-4 |ref|). */
static double row_ratio(const kdc_npy_array *got, const kdc_npy_array *ref, int64_t r0, int64_t r1) {
  assert_int_equal(got->rank, ref->rank);
  for (int d = 0; d < ref->rank; d++) assert_int_equal(got->dims[d], ref->dims[d]);
  const float *g = got->data, *e = ref->data;
  size_t n = ref->nbytes / sizeof(float), row = n / (size_t)ref->dims[0];
  double scale = 0, worst = 0;
  for (size_t i = 0; i < n; i++) scale = fmax(scale, fabs(e[i]));
  for (size_t i = (size_t)r0 * row; i < (size_t)r1 * row; i++) {
    double q = fabs((double)g[i] - e[i]) / (1e-5 * scale + 1e-4 * fabs(e[i]));
    worst = isnan(q) ? INFINITY : fmax(worst, q);
  }
  return worst;
}

/* Compiles |model| with the reference's weights on |mesh| and runs it on
 * the reference input; the output, read into |got|. */
static void run_kdc(const char *model, const char *data, const char *batch, const char *mesh,
                    kdc_npy_array *got) {
  char *w = ref_file(data, "weights.safetensors"), *in = ref_file(data, "input0.npy");
  char *plan = e2e_path("real3.plan"), *out = e2e_path("real3_out.npy");
  e2e_result r;
  e2e_kdc(&r, "compile", model, "--weights", w, "--batch", batch, "--mesh", mesh, "-o", plan, NULL);
  if (r.status) fail_msg("%s (mesh %s): kdc compile: %s", data, mesh, r.err);
  e2e_kdc(&r, "run", plan, "--threads", "1", "--input", in, "--output", out, NULL);
  if (r.status) fail_msg("%s (mesh %s): kdc run: %s", data, mesh, r.err);
  assert_null(kdc_npy_read(out, got));
  free(w), free(in), free(plan), free(out);
}

static void test_tfjs_numbers(void **state) {
  (void)state;
  const char *meshes[] = {"1", "2"};
  int n_mesh = kdc_test_sampled() ? 1 : 2;
  for (size_t i = 0; i < sizeof refs / sizeof refs[0]; i++) {
    char *model = e2e_src(refs[i].model), *exp = ref_file(refs[i].data, "expected0.npy");
    kdc_npy_array ref;
    assert_null(kdc_npy_read(exp, &ref));
    for (int k = 0; k < n_mesh; k++) {
      kdc_npy_array got;
      run_kdc(model, refs[i].data, refs[i].batch, meshes[k], &got);
      double q = row_ratio(&got, &ref, 0, ref.dims[0]);
      if (!(q <= 1)) fail_msg("%s (mesh %s): kdc vs TF.js ratio %g > 1", refs[i].data, meshes[k], q);
      kdc_npy_free(&got);
    }
    kdc_npy_free(&ref);
    free(model), free(exp);
  }
}

/* The mask model with mask_zero off and no mask kwarg: rows 0 and 1 of the
 * reference input have no padding (gen: row r ends in floor(r * 6 / 8)
 * zeros) and still match; rows 2 and 3 do not. */
static void test_mask_matters(void **state) {
  (void)state;
  char *src = e2e_src("tests/e2e/data/k3_not_equal_mask.json");
  void *raw = NULL;
  size_t n = 0;
  assert_null(kdc_file_read_all(src, &raw, &n));
  char *text = calloc(1, n + 2); /* + 1 for "false" over "true" */
  assert_non_null(text);
  memcpy(text, raw, n);
  const char *kw = ", \"mask\": {\"class_name\": \"__keras_tensor__\", \"config\": {\"shape\": "
                   "[null, 6], \"dtype\": \"bool\", \"keras_history\": [\"not_equal\", 0, 0]}}";
  char *at = strstr(text, kw);
  assert_non_null(at);
  memmove(at, at + strlen(kw), strlen(at + strlen(kw)) + 1);
  at = strstr(text, "\"mask_zero\": true");
  assert_non_null(at);
  at += strlen("\"mask_zero\": ");
  memmove(at + 1, at, strlen(at) + 1);
  memcpy(at, "false", 5);
  char *model = e2e_path("no_mask.json");
  FILE *f = fopen(model, "w");
  assert_non_null(f);
  fputs(text, f);
  fclose(f);
  char *exp = ref_file("k3_not_equal_mask", "expected0.npy");
  kdc_npy_array ref, got;
  assert_null(kdc_npy_read(exp, &ref));
  run_kdc(model, "k3_not_equal_mask", "4", "1", &got);
  assert_true(row_ratio(&got, &ref, 0, 2) <= 1);
  assert_true(row_ratio(&got, &ref, 2, 3) > 100);
  assert_true(row_ratio(&got, &ref, 3, 4) > 100);
  kdc_npy_free(&ref), kdc_npy_free(&got);
  free(raw), free(text), free(src), free(model), free(exp);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_counts),
      cmocka_unit_test(test_refused),
      cmocka_unit_test(test_tfjs_numbers),
      cmocka_unit_test(test_mask_matters),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
