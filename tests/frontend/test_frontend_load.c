/*
 * test_frontend_load.c: reading model files.
 *
 * - the twelve real files of ../shared/real-json load with the parameter
 *   counts listed in their SOURCES.md (skipped when the folder is absent);
 * - every format variant of KERAS.md section 3 (fixtures in data/);
 * - every load-time error kind names the file and the JSON place.
 */
#include "fe_test.h"

/* ---- real files ---------------------------------------------------------- */

static const struct {
  const char *file;
  int64_t total;
  int64_t non_trainable; /* -1: not checked (frozen layers count too in Keras) */
} real[] = {
    {"AnshSharma2521__Multimodal-Emotion-Recognition__expression_model_architecture.json",
     4100167, 35136},
    {"JayDaslani__explainable-ai-deployment__model_architecture.json", 24641930, -1},
    {"Rakshitha973-pn__CodeAlpha_Handwritten_Character_Recognition-__model_architecture.json",
     250058, 448},
    {"NTU-DL-APP__dnn-inference-AmazingWilson-hub__model_architecture.json", 1494154, 0},
    {"Bhone-Sithu__WasteClassify__model.json", 5631234, 0},
    {"ShaikRiyaz2003__GaurdianEye__model_architecture.json", 3725682, 0},
    {"Hirenraj07__Hybrid-CNN-Transformer-Framework-for-Multi-Parasite-Detection-in-Microscopic-"
     "Blood-Smear-Images__model_architecture.json",
     8651435, -1},
    {"0xPr0xy__keras-imdb-sentiment-classification__model.json", 1656405, 0},
    {"35C4n0r__converted_tfjs_model__model.json", 66623560, -1},
    {"Ekuaappiah__Maternal-Health-Risk-Prediction-App__model.json", 9219, 0},
    {"Anaya-Koirala__melody-generating-lstm-cs371__config.json", 315689, 0},
    {"DAYYAN2008__live-neural-networks__config.json", 121930, 0},
};

static void test_real_files(void **state FE_UNUSED) {
  const char *dir = fe_real_dir();
  if (!dir) skip();
  for (size_t i = 0; i < sizeof real / sizeof real[0]; i++) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, real[i].file);
    kdc_keras_model *m = fe_load_ok(path);
    int64_t total = kdc_frontend_param_count(m);
    if (total != real[i].total) fail_msg("%s: %lld params, expected %lld", real[i].file,
                                         (long long)total, (long long)real[i].total);
    if (real[i].non_trainable >= 0)
      assert_int_equal(total - kdc_frontend_trainable_count(m), real[i].non_trainable);
    kdc_frontend_free(m);
  }
}

/* Frozen base models: Keras counts a frozen layer's weights as non-trainable. */
static void test_real_frozen(void **state FE_UNUSED) {
  const char *dir = fe_real_dir();
  if (!dir) skip();
  char path[1024];
  snprintf(path, sizeof path, "%s/%s", dir, real[1].file);
  kdc_keras_model *m = fe_load_ok(path);
  /* the outer Dense head is trainable: 1,049,088 + 5,130 plus ResNet50's
   * trainable top layers; BatchNormalization statistics never are */
  assert_true(kdc_frontend_trainable_count(m) >= 1049088 + 5130);
  assert_true(kdc_frontend_trainable_count(m) <= 24641930 - 53120);
  /* nested sub-model variables keep their standalone paths (KERAS.md 2.1) */
  assert_string_equal(kdc_frontend_variable(m, 0)->path, "conv1_conv/kernel");
  const kdc_keras_var *last = kdc_frontend_variable(m, kdc_frontend_variable_count(m) - 1);
  assert_string_equal(last->path, "sequential/dense_1/bias");
  kdc_frontend_free(m);
}

static void test_real_summary(void **state FE_UNUSED) {
  const char *dir = fe_real_dir();
  if (!dir) skip();
  char path[1024], *buf = NULL;
  size_t len = 0;
  snprintf(path, sizeof path, "%s/%s", dir, real[0].file);
  kdc_keras_model *m = fe_load_ok(path);
  FILE *f = open_memstream(&buf, &len);
  assert_null(kdc_frontend_summary(m, f));
  fclose(f);
  assert_non_null(strstr(buf, "Total params: 4,100,167"));
  assert_non_null(strstr(buf, "Trainable params: 4,065,031"));
  assert_non_null(strstr(buf, "Non-trainable params: 35,136"));
  assert_non_null(strstr(buf, "Conv1 (Conv2D)"));
  assert_non_null(strstr(buf, "(None, 112, 112, 32)"));
  free(buf);
  kdc_frontend_free(m);
}

/* Lowering a real file either works or names the first layer kdc cannot
 * compile yet (or the dimension it needs static). */
static void test_real_lowering(void **state FE_UNUSED) {
  const char *dir = fe_real_dir();
  if (!dir) skip();
  for (size_t i = 0; i < sizeof real / sizeof real[0]; i++) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, real[i].file);
    kdc_keras_model *m = fe_load_ok(path);
    kdc_lower_options opt = {.batch = 2};
    kdc_module *mod = NULL;
    kdc_status st = kdc_frontend_lower(m, &opt, &mod);
    if (st) {
      const char *msg = kdc_status_message(st);
      assert_int_equal(kdc_status_code(st), KDC_UNSUPPORTED);
      assert_non_null(strstr(msg, path));
      assert_true(strstr(msg, "is not supported by kdc for compilation yet") ||
                  strstr(msg, "is unknown (None)"));
      assert_true(strstr(msg, "config.layers[") || strstr(msg, "config["));
      kdc_status_free(st);
    } else {
      assert_null(kdc_ir_verify_module(mod));
      kdc_ir_module_destroy(mod);
    }
    kdc_frontend_free(m);
  }
}

/* ---- format variants ----------------------------------------------------- */

static void expect_mlp(const char *fixture, const char *prefix) {
  kdc_keras_model *m = fe_load_ok(fixture);
  assert_int_equal(kdc_frontend_param_count(m), 158810);
  assert_int_equal(kdc_frontend_variable_count(m), 3);
  char p[64];
  snprintf(p, sizeof p, "%sd1/kernel", prefix);
  assert_string_equal(kdc_frontend_variable(m, 0)->path, p);
  snprintf(p, sizeof p, "%sd2/bias", prefix);
  assert_string_equal(kdc_frontend_variable(m, 2)->path, p);
  assert_int_equal(kdc_frontend_variable(m, 0)->shape.dims[0], 784);
  assert_int_equal(kdc_frontend_variable(m, 0)->shape.dims[1], 200);
  kdc_frontend_free(m);
}

static void test_k3_functional(void **s FE_UNUSED) { expect_mlp(FE_DATA("k3_functional.json"), ""); }
static void test_k3_sequential(void **s FE_UNUSED) {
  expect_mlp(FE_DATA("k3_sequential.json"), "sequential/");
}
static void test_tk2_functional(void **s FE_UNUSED) { expect_mlp(FE_DATA("tk2_functional.json"), ""); }
static void test_tk2_model_class(void **s FE_UNUSED) {
  expect_mlp(FE_DATA("tk2_model_class.json"), "");
}
static void test_tfjs_model_config(void **s FE_UNUSED) {
  expect_mlp(FE_DATA("tfjs_model_config.json"), "");
}

static void test_tfjs_direct_topology(void **s FE_UNUSED) {
  kdc_keras_model *m = fe_load_ok(FE_DATA("tfjs_direct.json"));
  assert_int_equal(kdc_frontend_param_count(m), 5 * 3 + 3 + 3 * 2 + 2);
  assert_int_equal(m->format, KDC_KERAS_TFJS);
  kdc_frontend_free(m);
}

static void test_tk2_legacy_sequential(void **s FE_UNUSED) {
  kdc_keras_model *m = fe_load_ok(FE_DATA("tk2_legacy_sequential.json"));
  assert_int_equal(kdc_frontend_param_count(m), 8 * 16 + 16 + 16 * 4 + 4);
  assert_string_equal(m->layers[0].name, "dense_1_input"); /* synthesized InputLayer */
  assert_int_equal(m->layers[0].nodes[0].out[0].dims[1], 8);
  kdc_frontend_free(m);
}

static void test_tk2_sequential_without_input(void **s FE_UNUSED) {
  kdc_keras_model *m = fe_load_ok(FE_DATA("tk2_sequential_noinput.json"));
  assert_int_equal(kdc_frontend_param_count(m), 8 * 16 + 16 + 16 * 4);
  assert_string_equal(kdc_frontend_variable(m, 0)->path, "sequential_3/dense_1/kernel");
  kdc_frontend_free(m);
}

/* A legacy Sequential (Keras 2.0) whose first layer is itself a legacy
 * Sequential holding the batch_input_shape: the outer model is built on the
 * nested model's input, as Keras' model.add does. */
static void test_tk2_sequential_nested_first(void **s FE_UNUSED) {
  const char *json =
      "{\"class_name\": \"Sequential\", \"keras_version\": \"2.0.6\", \"config\": ["
      "{\"class_name\": \"Sequential\", \"config\": ["
      "{\"class_name\": \"Dense\", \"config\": {\"name\": \"enc\", \"units\": 5, "
      "\"batch_input_shape\": [null, 7]}}]}, "
      "{\"class_name\": \"Dense\", \"config\": {\"name\": \"out\", \"units\": 3}}]}";
  const char *path = fe_tmp("nested_first.json");
  fe_write(path, json, strlen(json));
  kdc_keras_model *m = fe_load_ok(path);
  assert_int_equal(kdc_frontend_param_count(m), 7 * 5 + 5 + 5 * 3 + 3);
  assert_int_equal(m->layers[0].nodes[0].out[0].dims[1], 7);
  kdc_frontend_free(m);
}

/* A nested Functional called through node_index 1, a layer shared by two
 * calls, a merge list-arg, and a dict of outputs (sorted keys). */
static void test_nested_shared_dict_outputs(void **s FE_UNUSED) {
  kdc_keras_model *m = fe_load_ok(FE_DATA("k3_nested_shared.json"));
  assert_int_equal(kdc_frontend_param_count(m), 15 + 12);
  assert_string_equal(kdc_frontend_variable(m, 0)->path, "inner_d/kernel");
  assert_int_equal(m->n_outputs, 2);
  assert_string_equal(m->layers[m->outputs[0].layer].name, "add");   /* key "a" */
  assert_string_equal(m->layers[m->outputs[1].layer].name, "shared"); /* key "y" */
  assert_int_equal(m->outputs[1].node, 1);
  kdc_frontend_free(m);
}

/* Layer dtype policies: float policies load (kdc computes float32), a
 * quantized policy and a name Keras does not know are located errors. */
static void test_dtype_policies(void **s FE_UNUSED) {
  static const char *head =
      "{\"class_name\": \"Sequential\", \"config\": {\"name\": \"s\", \"layers\": ["
      "{\"class_name\": \"InputLayer\", \"config\": {\"batch_shape\": [null, 4], \"name\": \"x\"}}, "
      "{\"class_name\": \"Dense\", \"config\": {\"name\": \"d\", \"units\": 2, \"dtype\": ";
  static const struct { const char *dtype; kdc_code code; const char *msg; } cases[] = {
      {"\"mixed_float16\"", KDC_OK, NULL},
      {"{\"class_name\": \"Policy\", \"config\": {\"name\": \"mixed_bfloat16\"}}", KDC_OK, NULL},
      {"{\"module\": \"keras\", \"class_name\": \"DTypePolicy\", \"config\": {\"name\": \"float64\"}}",
       KDC_OK, NULL},
      {"\"bogus\"", KDC_INVALID_INPUT, "config.layers[1].config.dtype: unknown dtype policy \"bogus\""},
      {"{\"module\": \"keras\", \"class_name\": \"QuantizedDTypePolicy\", \"config\": "
       "{\"name\": \"int8_from_float32\"}}",
       KDC_UNSUPPORTED, "config.layers[1].config.dtype: quantized dtype policy \"int8_from_float32\""},
      {"7", KDC_INVALID_INPUT, "config.layers[1].config.dtype: expected a dtype name"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    char json[1024];
    snprintf(json, sizeof json, "%s%s}}]}}", head, cases[i].dtype);
    const char *path = fe_tmp("dtype.json");
    fe_write(path, json, strlen(json));
    kdc_keras_model *m = NULL;
    if (cases[i].code == KDC_OK) {
      m = fe_load_ok(path);
      assert_int_equal(kdc_frontend_param_count(m), 4 * 2 + 2);
      kdc_frontend_free(m);
    } else {
      fe_assert_err(kdc_frontend_load(path, &m), cases[i].code, "dtype.json: ", cases[i].msg, NULL);
      assert_null(m);
    }
  }
}

/* ---- load errors --------------------------------------------------------- */

static void test_err_broken_json(void **s FE_UNUSED) {
  kdc_keras_model *m = NULL;
  fe_assert_err(kdc_frontend_load(FE_DATA("broken.json"), &m), KDC_INVALID_INPUT,
                "broken.json: line 3, column ", "invalid JSON", NULL);
  assert_null(m);
  const char *p = fe_tmp("truncated.json");
  fe_write(p, "{\"class_name\": \"Seq", 19);
  fe_assert_err(kdc_frontend_load(p, &m), KDC_INVALID_INPUT, "truncated.json: line 1, column",
                "unexpected end of file", NULL);
  p = fe_tmp("trailing.json");
  fe_write(p, "{}\n}", 4);
  fe_assert_err(kdc_frontend_load(p, &m), KDC_INVALID_INPUT, "trailing.json: line 2, column 1",
                NULL);
}

static void test_err_unknown_layer(void **s FE_UNUSED) {
  kdc_keras_model *m = NULL;
  fe_assert_err(kdc_frontend_load(FE_DATA("unknown_layer.json"), &m), KDC_INVALID_INPUT,
                "unknown_layer.json: config.layers[2].class_name: unknown layer class \"Foo\" "
                "(layer \"foo\")", NULL);
}

static void test_err_lambda_and_custom(void **s FE_UNUSED) {
  kdc_keras_model *m = NULL;
  fe_assert_err(kdc_frontend_load(FE_DATA("lambda.json"), &m), KDC_UNSUPPORTED,
                "lambda.json: config.layers[1].class_name: Lambda layer \"my_lambda\"", NULL);
  fe_assert_err(kdc_frontend_load(FE_DATA("custom_layer.json"), &m), KDC_UNSUPPORTED,
                "custom_layer.json: config.layers[1].class_name: custom layer class \"MyBlock\"",
                NULL);
}

static void test_err_shape_mismatch(void **s FE_UNUSED) {
  kdc_keras_model *m = NULL;
  fe_assert_err(kdc_frontend_load(FE_DATA("add_mismatch.json"), &m), KDC_INVALID_INPUT,
                "add_mismatch.json: config.layers[2] (Add \"add\")", "(None, 10)", "(None, 12)",
                NULL);
  fe_assert_err(kdc_frontend_load(FE_DATA("reshape_bad.json"), &m), KDC_INVALID_INPUT,
                "reshape_bad.json: config.layers[1].config.target_shape: cannot reshape", NULL);
}

static void test_err_config_values(void **s FE_UNUSED) {
  kdc_keras_model *m = NULL;
  fe_assert_err(kdc_frontend_load(FE_DATA("bad_units.json"), &m), KDC_INVALID_INPUT,
                "bad_units.json: config.layers[1].config.units: expected an integer, got \"ten\"",
                NULL);
  fe_assert_err(kdc_frontend_load(FE_DATA("tfjs_bad_units.json"), &m), KDC_INVALID_INPUT,
                "tfjs_bad_units.json: modelTopology.model_config.config.layers[1].config.units",
                NULL);
}

static void test_err_graph(void **s FE_UNUSED) {
  kdc_keras_model *m = NULL;
  fe_assert_err(kdc_frontend_load(FE_DATA("loop.json"), &m), KDC_INVALID_INPUT,
                "loop.json: config.layers[1].inbound_nodes[0]", "loop", NULL);
}

static void test_err_file_kinds(void **s FE_UNUSED) {
  kdc_keras_model *m = NULL;
  const char *p = fe_tmp("model.keras");
  /* recognised by their bytes and read (frontend/keras_files.c): broken ones are located */
  fe_write(p, "PK\x03\x04rest of a zip", 18);
  fe_assert_err(kdc_frontend_load(p, &m), KDC_INVALID_INPUT,
                "model.keras: not a readable zip archive", NULL);
  p = fe_tmp("model.h5");
  fe_write(p, "\x89HDF\r\n\x1a\n....", 12);
  fe_assert_err(kdc_frontend_load(p, &m), KDC_INVALID_INPUT, "model.h5: not a readable HDF5 file",
                NULL);
  p = fe_tmp("empty.json");
  fe_write(p, "", 0);
  fe_assert_err(kdc_frontend_load(p, &m), KDC_INVALID_INPUT, "empty.json: the file is empty", NULL);
  p = fe_tmp("other.json");
  fe_write(p, "{\"a\": 1}", 8);
  fe_assert_err(kdc_frontend_load(p, &m), KDC_INVALID_INPUT, "other.json: not a Keras model", NULL);
  fe_assert_err(kdc_frontend_load(fe_tmp("missing.json"), &m), KDC_IO_ERROR, "missing.json", NULL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_real_files),
      cmocka_unit_test(test_real_frozen),
      cmocka_unit_test(test_real_summary),
      cmocka_unit_test(test_real_lowering),
      cmocka_unit_test(test_k3_functional),
      cmocka_unit_test(test_k3_sequential),
      cmocka_unit_test(test_tk2_functional),
      cmocka_unit_test(test_tk2_model_class),
      cmocka_unit_test(test_tfjs_model_config),
      cmocka_unit_test(test_tfjs_direct_topology),
      cmocka_unit_test(test_tk2_legacy_sequential),
      cmocka_unit_test(test_tk2_sequential_nested_first),
      cmocka_unit_test(test_tk2_sequential_without_input),
      cmocka_unit_test(test_nested_shared_dict_outputs),
      cmocka_unit_test(test_err_broken_json),
      cmocka_unit_test(test_err_unknown_layer),
      cmocka_unit_test(test_err_lambda_and_custom),
      cmocka_unit_test(test_err_shape_mismatch),
      cmocka_unit_test(test_err_config_values), cmocka_unit_test(test_dtype_policies),
      cmocka_unit_test(test_err_graph),
      cmocka_unit_test(test_err_file_kinds),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
