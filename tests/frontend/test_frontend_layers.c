/*
 * test_frontend_layers.c: the layer classes lowered by lower_norm.c,
 * lower_shape.c and lower_attention.c, one small Functional model each
 * (written to a temporary file):
 * - variable paths, shapes, creation order and parameter counts as Keras 3
 *   builds them (MultiHeadAttention, BatchNormalization, LayerNormalization,
 *   GroupNormalization, EinsumDense, PReLU, Normalization);
 * - output shapes (Dot, RepeatVector, UpSampling, Cropping);
 * - numbers checked by hand where no example covers them: bilinear
 *   UpSampling2D, list-valued Rescaling and Normalization configs,
 *   rms_scaling, keepdims / channels_first global pooling, MHA called with
 *   its value as a keyword tensor (the tf.keras 2 form of real files);
 * - unsupported configs are located errors naming the key.
 */
#include <math.h>

#include "fe_test.h"

static kdc_keras_model *load(const char *tag, const char *shape, const char *cls, const char *cfg) {
  return fe_load_ok(fe_model_file(tag, shape, cls, cfg, NULL, NULL));
}

/* Variable |i| has path "L/|name|" and shape |dims| (|rank| entries). */
static void expect_var(const kdc_keras_model *m, size_t i, const char *name, int rank,
                       const int64_t *dims) {
  const kdc_keras_var *v = kdc_frontend_variable(m, i);
  char path[128];
  snprintf(path, sizeof path, "L/%s", name);
  assert_string_equal(v->path, path);
  if (v->shape.rank != rank) fail_msg("%s: rank %d, expected %d", path, v->shape.rank, rank);
  for (int d = 0; d < rank; d++)
    if (v->shape.dims[d] != dims[d])
      fail_msg("%s: dim %d is %lld, expected %lld", path, d, (long long)v->shape.dims[d],
               (long long)dims[d]);
}
#define DIMS(...) (int64_t[]){__VA_ARGS__}
#define VAR(m, i, name, ...) \
  expect_var(m, i, name, sizeof(DIMS(__VA_ARGS__)) / sizeof(int64_t), DIMS(__VA_ARGS__))

static void test_mha_variables(void **s FE_UNUSED) {
  kdc_keras_model *m = fe_load_ok(fe_model_file("mha.json", "16, 32", "MultiHeadAttention",
                                             "\"num_heads\": 4, \"key_dim\": 8", "[KT, KT]", NULL));
  assert_int_equal(kdc_frontend_variable_count(m), 8);
  VAR(m, 0, "query/kernel", 32, 4, 8);
  VAR(m, 1, "query/bias", 4, 8);
  VAR(m, 2, "key/kernel", 32, 4, 8);
  VAR(m, 3, "key/bias", 4, 8);
  VAR(m, 4, "value/kernel", 32, 4, 8);
  VAR(m, 5, "value/bias", 4, 8);
  VAR(m, 6, "attention_output/kernel", 4, 8, 32);
  VAR(m, 7, "attention_output/bias", 32);
  assert_int_equal(kdc_frontend_param_count(m), 4 * (32 * 32 + 32));
  kdc_frontend_free(m);
  /* value_dim, output_shape, no bias */
  m = fe_load_ok(fe_model_file("mha2.json", "5, 6", "MultiHeadAttention", "\"num_heads\": 2, "
                            "\"key_dim\": 3, \"value_dim\": 4, \"use_bias\": false, "
                            "\"output_shape\": 7", "[KT, KT]", NULL));
  assert_int_equal(kdc_frontend_variable_count(m), 4);
  VAR(m, 2, "value/kernel", 6, 2, 4);
  VAR(m, 3, "attention_output/kernel", 2, 4, 7);
  assert_int_equal(m->layers[1].nodes[0].out[0].dims[2], 7);
  kdc_frontend_free(m);
}

static void test_norm_variables(void **s FE_UNUSED) {
  kdc_keras_model *m = load("bn.json", "5, 6", "BatchNormalization", "\"axis\": -1");
  VAR(m, 0, "gamma", 6);
  VAR(m, 1, "beta", 6);
  VAR(m, 2, "moving_mean", 6);
  VAR(m, 3, "moving_variance", 6);
  assert_int_equal(kdc_frontend_param_count(m), 24);
  assert_int_equal(kdc_frontend_trainable_count(m), 12);
  kdc_frontend_free(m);
  m = load("bn1.json", "5, 6", "BatchNormalization", "\"axis\": 1, \"center\": false");
  VAR(m, 0, "gamma", 5);
  VAR(m, 1, "moving_mean", 5);
  assert_int_equal(kdc_frontend_param_count(m), 15);
  kdc_frontend_free(m);
  m = load("ln.json", "5, 6", "LayerNormalization", "\"axis\": [1, 2], \"center\": false");
  assert_int_equal(kdc_frontend_variable_count(m), 1);
  VAR(m, 0, "gamma", 5, 6);
  kdc_frontend_free(m);
  m = load("gn.json", "4, 8", "GroupNormalization", "\"groups\": 4");
  VAR(m, 0, "gamma", 8);
  VAR(m, 1, "beta", 8);
  kdc_frontend_free(m);
  m = load("prelu.json", "4, 5, 3", "PReLU", "\"shared_axes\": [1, 2]");
  VAR(m, 0, "alpha", 1, 1, 3);
  kdc_frontend_free(m);
  m = load("norm.json", "4, 3", "Normalization",
           "\"axis\": [-1], \"mean\": null, \"variance\": null");
  assert_int_equal(kdc_frontend_variable_count(m), 3);
  VAR(m, 0, "mean", 3);
  VAR(m, 1, "variance", 3);
  assert_int_equal(kdc_frontend_variable(m, 2)->dtype, KDC_DTYPE_I64);
  assert_int_equal(kdc_frontend_trainable_count(m), 0);
  kdc_frontend_free(m);
  m = load("norm2.json", "4, 3", "Normalization", "\"axis\": -1, \"mean\": [1, 2, 3], "
           "\"variance\": [1, 4, 9]");
  assert_int_equal(kdc_frontend_variable_count(m), 0);
  kdc_frontend_free(m);
}

static void test_einsum_dense_variables(void **s FE_UNUSED) {
  kdc_keras_model *m = load("ed.json", "32, 128", "EinsumDense", "\"equation\": \"abc,cd->abd\", "
                            "\"output_shape\": [null, 64], \"bias_axes\": \"d\"");
  VAR(m, 0, "kernel", 128, 64);
  VAR(m, 1, "bias", 64);
  kdc_frontend_free(m);
  m = load("ed2.json", "32, 128", "EinsumDense", "\"equation\": \"abc,cde->abde\", "
           "\"output_shape\": [null, 4, 16], \"bias_axes\": \"de\"");
  VAR(m, 0, "kernel", 128, 4, 16);
  VAR(m, 1, "bias", 4, 16);
  assert_int_equal(m->layers[1].nodes[0].out[0].rank, 4);
  kdc_frontend_free(m);
  m = load("ed3.json", "7, 16", "EinsumDense", "\"equation\": \"...b,bc->...c\", "
           "\"output_shape\": 64, \"bias_axes\": \"c\", \"activation\": \"relu\"");
  VAR(m, 0, "kernel", 16, 64);
  assert_int_equal(m->layers[1].nodes[0].out[0].dims[1], 7);
  kdc_frontend_free(m);
  m = load("ed4.json", "7, 16", "EinsumDense", "\"equation\": \"ab...,bc->ac...\", "
           "\"output_shape\": 5, \"bias_axes\": \"c\"");
  VAR(m, 0, "kernel", 7, 5);
  VAR(m, 1, "bias", 5, 1); /* one trailing 1 per right-elided dim */
  kdc_frontend_free(m);
}

static void expect_out(const char *tag, const char *shape, const char *cls, const char *cfg,
                       const char *args, int rank, const int64_t *dims) {
  kdc_keras_model *m = fe_load_ok(fe_model_file(tag, shape, cls, cfg, args, NULL));
  const kdc_kshape *o = &m->layers[1].nodes[0].out[0];
  assert_int_equal(o->rank, rank);
  for (int d = 1; d < rank; d++) assert_int_equal(o->dims[d], dims[d]);
  assert_int_equal(kdc_frontend_param_count(m), 0);
  kdc_frontend_free(m);
}
#define OUT(tag, shape, cls, cfg, args, ...)                                          \
  expect_out(tag, shape, cls, cfg, args, sizeof(DIMS(__VA_ARGS__)) / sizeof(int64_t), \
             DIMS(__VA_ARGS__))

static void test_output_shapes(void **s FE_UNUSED) {
  OUT("dot.json", "3, 6", "Dot", "\"axes\": -1, \"normalize\": true", "[[KT, KT]]", -1, 3, 3);
  OUT("dot1.json", "6", "Dot", "\"axes\": 1", "[[KT, KT]]", -1, 1);
  OUT("rv.json", "6", "RepeatVector", "\"n\": 4", NULL, -1, 4, 6);
  OUT("up1.json", "5, 2", "UpSampling1D", "\"size\": 3", NULL, -1, 15, 2);
  OUT("up2.json", "2, 3, 4", "UpSampling2D",
      "\"size\": [2, 3], \"data_format\": \"channels_first\"", NULL, -1, 2, 6, 12);
  OUT("crop1.json", "9, 2", "Cropping1D", "\"cropping\": [2, 3]", NULL, -1, 4, 2);
  OUT("crop2.json", "9, 8, 2", "Cropping2D", "\"cropping\": [[1, 2], [0, 3]]", NULL, -1, 6, 5, 2);
  OUT("crop3.json", "5, 5, 5, 1", "Cropping3D", "", NULL, -1, 3, 3, 3, 1);
  OUT("zp3.json", "2, 2, 2, 1", "ZeroPadding3D", "\"padding\": [1, 2, 0]", NULL, -1, 4, 6, 2, 1);
  OUT("gap.json", "4, 5, 3", "GlobalAveragePooling2D", "\"keepdims\": true", NULL, -1, 1, 1, 3);
}

static void test_numbers(void **s FE_UNUSED) {
  /* bilinear x2 of [[0, 1], [2, 3]]: rows/cols 0, .25, .75, 1 (half-pixel,
   * edge clamp, jax.image.resize / tf.image.resize) */
  const float img[4] = {0, 1, 2, 3};
  float up[16];
  const float r[4] = {0, 0.25f, 0.75f, 1};
  for (int i = 0; i < 4; i++)
    for (int j = 0; j < 4; j++) up[i * 4 + j] = 2 * r[i] + r[j];
  fe_run_check(fe_model_file("bil.json", "2, 2, 1", "UpSampling2D", "\"size\": [2, 2], \"interpolation\": "
                 "\"bilinear\"", NULL, NULL), 1, img, NULL, up, 16);
  /* Rescaling with per-channel scale (the Hirenraj07 form) */
  const float x6[6] = {1, 2, 3, 4, 5, 6}, sc[6] = {0.5f, 4, 9, 2, 10, 18};
  fe_run_check(fe_model_file("resc.json", "2, 3", "Rescaling", "\"scale\": [0.5, 2.0, 3.0], \"offset\": 0.0",
                 NULL, NULL), 1, x6, NULL, sc, 6);
  /* Normalization with config mean/variance; invert */
  const float nz[6] = {0, 0, 0, 3, 1.5f, 1};
  fe_run_check(fe_model_file("nrm.json", "2, 3", "Normalization", "\"axis\": -1, \"mean\": [1, 2, 3], "
                 "\"variance\": [1, 4, 9]", NULL, NULL), 1, x6, NULL, nz, 6);
  const float inv[6] = {1.5f, 2, 2.5f, 3, 3.5f, 4};
  fe_run_check(fe_model_file("nrmi.json", "2, 3", "Normalization", "\"axis\": null, \"mean\": 1.0, "
                 "\"variance\": 0.25, \"invert\": true", NULL, NULL), 1, x6, NULL, inv, 6);
  /* LayerNormalization rms_scaling: x * rsqrt(var + eps) * gamma (gamma 1) */
  const float x2[2] = {1, 3};
  const float rms[2] = {(float)(1 / sqrt(1.001)), (float)(3 / sqrt(1.001))};
  fe_run_check(fe_model_file("rms.json", "2", "LayerNormalization", "\"rms_scaling\": true", NULL, NULL), 1, x2,
      NULL, rms, 2);
  /* GlobalMaxPooling1D channels_first keepdims: max over the steps axis 2 */
  const float mx[2] = {3, 6};
  fe_run_check(fe_model_file("gmp.json", "2, 3", "GlobalMaxPooling1D", "\"data_format\": \"channels_first\", "
                 "\"keepdims\": true", NULL, NULL), 1, x6, NULL, mx, 2);
  /* Softmax over two axes */
  float sm[6], z = 0;
  for (int i = 0; i < 6; i++) z += expf(x6[i]);
  for (int i = 0; i < 6; i++) sm[i] = expf(x6[i]) / z;
  fe_run_check(fe_model_file("smx.json", "2, 3", "Softmax", "\"axis\": [1, 2]", NULL, NULL), 1, x6, NULL, sm,
      6);
  /* PReLU with alpha 0.5 everywhere */
  const float xn[6] = {-2, 1, -4, 3, 0, -1}, a5[6] = {0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f};
  const float pr[6] = {-1, 1, -2, 3, 0, -0.5f};
  fe_run_check(fe_model_file("prl.json", "2, 3", "PReLU", "", NULL, NULL), 1, xn, a5, pr, 6);
  /* ThresholdedReLU (tf.keras 2): x * (x > theta) */
  const float th[6] = {0, 0, 0, 3, 0, 0};
  fe_run_check(fe_model_file("thr.json", "2, 3", "ThresholdedReLU", "\"theta\": 1.0", NULL, NULL), 1, xn, NULL,
      th, 6);
}

/* The real Hirenraj07 file calls its MultiHeadAttention with the value as a
 * keyword tensor; the result equals the positional call's. */
static void run_mha(const char *path, float *out) {
  kdc_keras_model *m = fe_load_ok(path);
  kdc_lower_options opt = {.batch = 2};
  kdc_module *mod = NULL;
  kdc_status st = kdc_frontend_lower(m, &opt, &mod);
  if (st) fail_msg("lowering: %s", kdc_status_message(st));
  assert_null(kdc_frontend_bind_weights(m, mod, NULL, 5));
  kdc_func *f = kdc_ir_module_find_func(mod, "predict");
  kdc_tensor *args = calloc(f->n_params, sizeof *args), res;
  float x[2 * 3 * 4];
  for (int i = 0; i < 24; i++) x[i] = sinf((float)i);
  args[0].type = kdc_ir_type(f, f->params[0])[0];
  args[0].data = x;
  assert_null(kdc_ir_interpret(f, args, f->n_params, &res));
  memcpy(out, res.data, sizeof(float) * 24);
  free(res.data);
  free(args);
  kdc_ir_module_destroy(mod);
  kdc_frontend_free(m);
}

static void test_mha_kwargs_value(void **s FE_UNUSED) {
  const char *cfg = "\"num_heads\": 2, \"key_dim\": 3, \"attention_axes\": [1]";
  float a[24], b[24];
  run_mha(fe_model_file("mha_pos.json", "3, 4", "MultiHeadAttention", cfg, "[KT, KT]", NULL), a);
  run_mha(fe_model_file("mha_kw.json", "3, 4", "MultiHeadAttention", cfg, "[KT]", "{\"value\": KT}"),
          b);
  for (int i = 0; i < 24; i++) assert_true(a[i] == b[i]);
  /* use_causal_mask: the first query step sees only the first key step */
  float c[24];
  run_mha(fe_model_file("mha_causal.json", "3, 4", "MultiHeadAttention", cfg, "[KT, KT]",
                     "{\"use_causal_mask\": true}"), c);
  bool differs = false;
  for (int i = 0; i < 24; i++) differs |= a[i] != c[i];
  assert_true(differs);
}

static kdc_status lower_err(const char *path) {
  kdc_keras_model *m = NULL;
  kdc_status st = kdc_frontend_load(path, &m);
  if (st) return st;
  kdc_lower_options opt = {.batch = 1};
  kdc_module *mod = NULL;
  st = kdc_frontend_lower(m, &opt, &mod);
  if (!st) kdc_ir_module_destroy(mod);
  kdc_frontend_free(m);
  return st;
}

static void test_errors(void **s FE_UNUSED) {
  fe_assert_err(lower_err(fe_model_file("e1.json", "3, 4", "MultiHeadAttention", "\"num_heads\": 2, "
                "\"key_dim\": 3", "[KT, KT]", "{\"attention_mask\": KT}")), KDC_INVALID_INPUT,
                "e1.json: config.layers[1] (MultiHeadAttention \"L\")", "attention_mask", NULL);
  fe_assert_err(lower_err(fe_model_file("e2.json", "3, 4", "MultiHeadAttention", "\"num_heads\": 2, "
                "\"key_dim\": 3, \"use_gate\": true", "[KT, KT]", NULL)), KDC_UNSUPPORTED,
                "e2.json: config.layers[1]", "config.use_gate", NULL);
  fe_assert_err(lower_err(fe_model_file("e3.json", "2, 2, 1", "UpSampling2D", "\"interpolation\": "
                "\"bicubic\"", NULL, NULL)), KDC_UNSUPPORTED, "e3.json: config.layers[1]",
                "config.interpolation \"bicubic\"", NULL);
  fe_assert_err(lower_err(fe_model_file("e4.json", "3, 4", "EinsumDense", "\"equation\": \"ab,bc\", "
                "\"output_shape\": 5", NULL, NULL)), KDC_INVALID_INPUT, "e4.json: config.layers[1]",
                "config.equation", NULL);
  fe_assert_err(lower_err(fe_model_file("e5.json", "3, 4", "EinsumDense",
                                     "\"equation\": \"abb,bc->ac\", "
                                     "\"output_shape\": 5",
                                     NULL, NULL)),
                KDC_UNSUPPORTED, "e5.json", "config.equation", NULL);
  fe_assert_err(lower_err(fe_model_file("e6.json", "3, 4", "Cropping1D", "\"cropping\": [2, 1]", NULL,
                NULL)), KDC_INVALID_INPUT, "e6.json: config.layers[1] (Cropping1D \"L\")",
                "config.cropping", NULL);
  fe_assert_err(lower_err(fe_model_file("e7.json", "3, 4", "GroupNormalization", "\"groups\": 3", NULL,
                NULL)), KDC_INVALID_INPUT, "e7.json", "config.groups 3", NULL);
  /* Softmax's mask tensor is applied (test_e2e_mask checks the numbers) */
  assert_null(lower_err(fe_model_file("e8.json", "3, 4", "Softmax", "\"axis\": -1", NULL,
                                      "{\"mask\": KT}")));
  fe_assert_err(lower_err(fe_model_file("e9.json", "3", "Rescaling", "\"scale\": [[1, 2], [3]]", NULL,
                NULL)), KDC_INVALID_INPUT, "e9.json: config.layers[1]", "config.scale", NULL);
  fe_assert_err(lower_err(fe_model_file("e10.json", "3", "Dot", "\"axes\": 0", "[[KT, KT]]", NULL)),
                KDC_INVALID_INPUT, "e10.json", "config.axes", NULL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_mha_variables),
      cmocka_unit_test(test_norm_variables),
      cmocka_unit_test(test_einsum_dense_variables),
      cmocka_unit_test(test_output_shapes),
      cmocka_unit_test(test_numbers),
      cmocka_unit_test(test_mha_kwargs_value),
      cmocka_unit_test(test_errors),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
