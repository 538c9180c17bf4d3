/*
 * test_frontend_lower.c: lowering to IR and binding weights.
 *
 * - the examples/ models (Keras 3 JSON + safetensors, and their TF.js
 *   model_tfjs.json + weights.bin) run through the reference interpreter and
 *   match the outputs Keras computed (expected*.npy);
 * - the predict function's parameter and result layout;
 * - lowering a layer without a lowering rule is a located error;
 * - missing, extra and misshapen weights are errors naming both shapes;
 * - initialisation is deterministic for a seed and follows the configs.
 */
#include <math.h>

#include "common/io.h"
#include "fe_test.h"

static kdc_module *lower_ok(const kdc_keras_model *m, int64_t batch) {
  kdc_lower_options opt = {.batch = batch};
  kdc_module *mod = NULL;
  kdc_status st = kdc_frontend_lower(m, &opt, &mod);
  if (st) fail_msg("lowering: %s", kdc_status_message(st));
  st = kdc_ir_verify_module(mod);
  if (st) fail_msg("verify: %s", kdc_status_message(st));
  return mod;
}

static void read_npy(const char *path, kdc_npy_array *a) {
  kdc_status st = kdc_npy_read(path, a);
  if (!st) st = kdc_npy_to_f32(path, a);
  if (st) fail_msg("%s", kdc_status_message(st));
}

/* Runs |model| with |weights| on inputs and compares every output. */
static void run_example(const char *model, const char *weights, const char *const *inputs,
                        int n_in, const char *const *expected, int n_out) {
  kdc_keras_model *m = fe_load_ok(model);
  kdc_npy_array in[4], ex[4];
  for (int i = 0; i < n_in; i++) read_npy(inputs[i], &in[i]);
  kdc_module *mod = lower_ok(m, in[0].dims[0]);
  kdc_status st = kdc_frontend_bind_weights(m, mod, weights, 0);
  if (st) fail_msg("binding %s: %s", weights, kdc_status_message(st));
  kdc_func *f = kdc_ir_module_find_func(mod, "predict");
  assert_non_null(f);
  assert_int_equal(f->n_results, n_out);
  kdc_tensor *args = calloc(f->n_params, sizeof *args);
  for (int i = 0; i < n_in; i++) {
    args[i].type = kdc_ir_type(f, f->params[i])[0];
    args[i].data = in[i].data;
  }
  kdc_tensor outs[4];
  st = kdc_ir_interpret(f, args, f->n_params, outs);
  if (st) fail_msg("interpret: %s", kdc_status_message(st));
  for (int o = 0; o < n_out; o++) {
    read_npy(expected[o], &ex[o]);
    int64_t n = kdc_type_numel(&outs[o].type);
    assert_int_equal((size_t)n * 4, ex[o].nbytes);
    const float *got = outs[o].data, *want = ex[o].data;
    for (int64_t k = 0; k < n; k++)
      if (!(fabsf(got[k] - want[k]) <= 2e-5f + 2e-5f * fabsf(want[k])))
        fail_msg("%s: output %d element %lld: got %.9g, Keras %.9g", model, o, (long long)k,
                 got[k], want[k]);
    free(outs[o].data);
    kdc_npy_free(&ex[o]);
  }
  for (int i = 0; i < n_in; i++) kdc_npy_free(&in[i]);
  free(args);
  kdc_ir_module_destroy(mod);
  kdc_frontend_free(m);
}

#define ONE(dir, f) (const char *const[]){FE_EXAMPLE(dir, f)}

static void test_example_mnist_mlp(void **s FE_UNUSED) {
  run_example(FE_EXAMPLE("mnist_mlp", "model.json"), FE_EXAMPLE("mnist_mlp", "weights.safetensors"),
              ONE("mnist_mlp", "input.npy"), 1, ONE("mnist_mlp", "expected.npy"), 1);
  run_example(FE_EXAMPLE("mnist_mlp", "model_tfjs.json"),
              FE_EXAMPLE("mnist_mlp", "model_tfjs.json"), ONE("mnist_mlp", "input.npy"), 1,
              ONE("mnist_mlp", "expected.npy"), 1);
}

static void test_example_mlp_sequential(void **s FE_UNUSED) {
  run_example(FE_EXAMPLE("mlp_sequential", "model.json"),
              FE_EXAMPLE("mlp_sequential", "weights.safetensors"),
              ONE("mlp_sequential", "input.npy"), 1, ONE("mlp_sequential", "expected.npy"), 1);
  run_example(FE_EXAMPLE("mlp_sequential", "model_tfjs.json"),
              FE_EXAMPLE("mlp_sequential", "model_tfjs.json"), ONE("mlp_sequential", "input.npy"),
              1, ONE("mlp_sequential", "expected.npy"), 1);
}

static void test_example_activations(void **s FE_UNUSED) {
  run_example(FE_EXAMPLE("activations", "model.json"),
              FE_EXAMPLE("activations", "weights.safetensors"), ONE("activations", "input.npy"), 1,
              ONE("activations", "expected.npy"), 1);
  run_example(FE_EXAMPLE("activations", "model_tfjs.json"),
              FE_EXAMPLE("activations", "model_tfjs.json"), ONE("activations", "input.npy"), 1,
              ONE("activations", "expected_tfjs.npy"), 1);
}

static void test_example_merge_reshape(void **s FE_UNUSED) {
  const char *const ins[] = {FE_EXAMPLE("merge_reshape", "input0.npy"),
                             FE_EXAMPLE("merge_reshape", "input1.npy")};
  const char *const outs[] = {FE_EXAMPLE("merge_reshape", "expected0.npy"),
                              FE_EXAMPLE("merge_reshape", "expected1.npy")};
  run_example(FE_EXAMPLE("merge_reshape", "model.json"),
              FE_EXAMPLE("merge_reshape", "weights.safetensors"), ins, 2, outs, 2);
  run_example(FE_EXAMPLE("merge_reshape", "model_tfjs.json"),
              FE_EXAMPLE("merge_reshape", "model_tfjs.json"), ins, 2, outs, 2);
}

static void test_example_transformer_block(void **s FE_UNUSED) {
  run_example(FE_EXAMPLE("transformer_block", "model.json"),
              FE_EXAMPLE("transformer_block", "weights.safetensors"),
              ONE("transformer_block", "input.npy"), 1, ONE("transformer_block", "expected.npy"),
              1);
  run_example(FE_EXAMPLE("transformer_block", "model_tfjs.json"),
              FE_EXAMPLE("transformer_block", "model_tfjs.json"),
              ONE("transformer_block", "input.npy"), 1, ONE("transformer_block", "expected.npy"),
              1);
}

static void test_example_norm_zoo(void **s FE_UNUSED) {
  run_example(FE_EXAMPLE("norm_zoo", "model.json"), FE_EXAMPLE("norm_zoo", "weights.safetensors"),
              ONE("norm_zoo", "input.npy"), 1, ONE("norm_zoo", "expected.npy"), 1);
  run_example(FE_EXAMPLE("norm_zoo", "model_tfjs.json"), FE_EXAMPLE("norm_zoo", "model_tfjs.json"),
              ONE("norm_zoo", "input.npy"), 1, ONE("norm_zoo", "expected.npy"), 1);
}

static void test_predict_layout(void **s FE_UNUSED) {
  kdc_keras_model *m = fe_load_ok(FE_DATA("k3_sequential.json"));
  kdc_module *mod = lower_ok(m, 16);
  kdc_func *f = kdc_ir_module_find_func(mod, "predict");
  assert_int_equal(f->n_params, 4);
  const kdc_node *p0 = kdc_ir_node(f, f->params[0]);
  assert_int_equal(p0->attr.param.kind, KDC_PARAM_INPUT);
  assert_string_equal(p0->attr.param.name, "input_layer");
  assert_int_equal(p0->type.dims[0], 16);
  const kdc_node *p1 = kdc_ir_node(f, f->params[1]);
  assert_int_equal(p1->attr.param.kind, KDC_PARAM_WEIGHT);
  assert_string_equal(p1->attr.param.name, "sequential/d1/kernel");
  assert_string_equal(kdc_ir_node(f, f->params[3])->attr.param.name, "sequential/d2/bias");
  assert_int_equal(f->n_results, 1);
  assert_string_equal(f->result_names[0], "d2");
  assert_int_equal(mod->n_weights, 3);
  assert_null(mod->weights[0].data);
  assert_non_null(kdc_ir_module_find_weight(mod, "sequential/d2/kernel"));
  kdc_ir_module_destroy(mod);
  kdc_frontend_free(m);
}

static void test_nested_lowering(void **s FE_UNUSED) {
  kdc_keras_model *m = fe_load_ok(FE_DATA("k3_nested_shared.json"));
  kdc_module *mod = lower_ok(m, 3);
  kdc_func *f = kdc_ir_module_find_func(mod, "predict");
  assert_int_equal(f->n_results, 2);
  assert_string_equal(f->result_names[0], "add");
  assert_string_equal(f->result_names[1], "shared");
  assert_null(kdc_frontend_bind_weights(m, mod, NULL, 7));
  kdc_ir_module_destroy(mod);
  kdc_frontend_free(m);
}

static void test_err_unsupported_lowering(void **s FE_UNUSED) {
  kdc_keras_model *m = fe_load_ok(FE_DATA("conv_sequential.json"));
  assert_int_equal(kdc_frontend_param_count(m), 3 * 3 * 4 + 4 + 256 * 2 + 2);
  kdc_lower_options opt = {.batch = 1};
  kdc_module *mod = NULL;
  assert_null(kdc_frontend_lower(m, &opt, &mod)); /* Conv2D lowers (lower_conv.c) */
  kdc_ir_module_destroy(mod);
  kdc_frontend_free(m);
  m = fe_load_ok(FE_DATA("lstm_sequential.json")); /* LSTM lowers to a scan (lower_rnn.c) */
  mod = NULL;
  assert_null(kdc_frontend_lower(m, &opt, &mod));
  assert_non_null(kdc_ir_module_find_func(mod, "lstm.step"));
  kdc_ir_module_destroy(mod);
  kdc_frontend_free(m);
  m = fe_load_ok(FE_DATA("lstm_stateful.json"));
  mod = NULL;
  fe_assert_err(kdc_frontend_lower(m, &opt, &mod), KDC_UNSUPPORTED,
                "lstm_stateful.json: config.layers[1] (LSTM \"lstm\"): config.stateful=true: "
                "stateful recurrent layers are not supported", NULL);
  assert_null(mod);
  kdc_frontend_free(m);
}

/* Writes a safetensors file from the MLP's shapes with one change. */
static const char *write_weights(const char *name, int drop, int extra, int64_t bad_dim) {
  static float buf[784 * 200];
  kdc_st_tensor t[4] = {
      {.name = "d1/kernel", .dtype = KDC_IO_DTYPE_F32, .rank = 2, .dims = {784, 200}, .data = buf},
      {.name = "d2/kernel", .dtype = KDC_IO_DTYPE_F32, .rank = 2, .dims = {200, 10}, .data = buf},
      {.name = "d2/bias:0", .dtype = KDC_IO_DTYPE_F32, .rank = 1, .dims = {10}, .data = buf},
      {.name = "d3/kernel", .dtype = KDC_IO_DTYPE_F32, .rank = 1, .dims = {5}, .data = buf},
  };
  if (bad_dim) t[1].dims[1] = bad_dim;
  kdc_st_tensor sel[4];
  size_t n = 0;
  for (int i = 0; i < 3 + extra; i++)
    if (i != drop) sel[n++] = t[i];
  const char *p = fe_tmp(name);
  kdc_status st = kdc_safetensors_write(p, sel, n, NULL);
  if (st) fail_msg("%s", kdc_status_message(st));
  return p;
}

static void test_weights_errors(void **s FE_UNUSED) {
  kdc_keras_model *m = fe_load_ok(FE_DATA("k3_functional.json"));
  kdc_module *mod = lower_ok(m, 2);
  /* good file (":0" stripped) */
  assert_null(kdc_frontend_bind_weights(m, mod, write_weights("ok.safetensors", -1, 0, 0), 0));
  fe_assert_err(kdc_frontend_bind_weights(m, mod, write_weights("missing.safetensors", 1, 0, 0), 0),
                KDC_INVALID_INPUT, "missing.safetensors: no tensor for variable \"d2/kernel\"",
                "(200, 10)", "config.layers[4]", NULL);
  fe_assert_err(kdc_frontend_bind_weights(m, mod, write_weights("extra.safetensors", -1, 1, 0), 0),
                KDC_INVALID_INPUT, "extra.safetensors: tensor \"d3/kernel\" (5,) matches no "
                "variable", NULL);
  fe_assert_err(kdc_frontend_bind_weights(m, mod, write_weights("shape.safetensors", -1, 0, 11), 0),
                KDC_INVALID_INPUT, "shape.safetensors: tensor \"d2/kernel\" has shape (200, 11) "
                "but variable \"d2/kernel\" needs (200, 10)", NULL);
  kdc_ir_module_destroy(mod);
  kdc_frontend_free(m);
}

/* Sequential paths bind "<layer>/<weight>" names (TK2 / TF.js exports). */
static void test_weights_fallback_names(void **s FE_UNUSED) {
  kdc_keras_model *m = fe_load_ok(FE_DATA("k3_sequential.json"));
  kdc_module *mod = lower_ok(m, 2);
  assert_null(kdc_frontend_bind_weights(m, mod, write_weights("seq.safetensors", -1, 0, 0), 0));
  assert_non_null(kdc_ir_module_find_weight(mod, "sequential/d2/bias")->data);
  kdc_ir_module_destroy(mod);
  kdc_frontend_free(m);
}

static void test_tfjs_shard_errors(void **s FE_UNUSED) {
  kdc_keras_model *m = fe_load_ok(FE_DATA("tfjs_model_config.json"));
  kdc_module *mod = lower_ok(m, 1);
  /* the fixture's shard file does not exist */
  fe_assert_err(kdc_frontend_bind_weights(m, mod, m->file, 0), KDC_IO_ERROR,
                "tfjs_shard.bin", "weightsManifest[0].paths[0]", NULL);
  kdc_ir_module_destroy(mod);
  kdc_frontend_free(m);
}

static void test_init_deterministic(void **s FE_UNUSED) {
  kdc_keras_model *m = fe_load_ok(FE_DATA("k3_functional.json"));
  kdc_module *a = lower_ok(m, 1), *b = lower_ok(m, 1), *c = lower_ok(m, 1);
  assert_null(kdc_frontend_bind_weights(m, a, NULL, 42));
  assert_null(kdc_frontend_bind_weights(m, b, NULL, 42));
  assert_null(kdc_frontend_bind_weights(m, c, NULL, 43));
  const kdc_weight *wa = kdc_ir_module_find_weight(a, "d1/kernel");
  const kdc_weight *wb = kdc_ir_module_find_weight(b, "d1/kernel");
  const kdc_weight *wc = kdc_ir_module_find_weight(c, "d1/kernel");
  assert_memory_equal(wa->data, wb->data, 784 * 200 * 4);
  assert_memory_not_equal(wa->data, wc->data, 784 * 200 * 4);
  /* glorot_uniform: |w| <= sqrt(6 / (784 + 200)), mean near 0 */
  const float *w = wa->data;
  double lim = sqrt(6.0 / 984), sum = 0, maxabs = 0;
  for (int i = 0; i < 784 * 200; i++) {
    sum += w[i];
    if (fabs(w[i]) > maxabs) maxabs = fabs(w[i]);
  }
  assert_true(maxabs <= lim && maxabs > 0.95 * lim);
  assert_true(fabs(sum / (784 * 200)) < 0.01 * lim);
  const float *bias = kdc_ir_module_find_weight(a, "d2/bias")->data;
  for (int i = 0; i < 10; i++) assert_true(bias[i] == 0.0f);
  kdc_ir_module_destroy(a);
  kdc_ir_module_destroy(b);
  kdc_ir_module_destroy(c);
  kdc_frontend_free(m);
}

/* |v|'s values from its initializer (malloc'd); an error fails the test. */
static float *init_values(const kdc_keras_model *m, const kdc_keras_var *v) {
  float *d = malloc(sizeof(float) * (size_t)kdc_kshape_numel(&v->shape));
  kdc_status st = kdc_frontend_init_var(m, v, 1, d);
  if (st) fail_msg("%s: %s", v->path, kdc_status_message(st));
  return d;
}

/* Rows 0 and 1 of the [rows, |cols|] matrix |d| have norm 1 and are orthogonal. */
static void assert_orthonormal_rows(const float *d, int64_t cols) {
  double dot = 0, n0 = 0, n1 = 0;
  for (int64_t k = 0; k < cols; k++)
    dot += d[k] * d[cols + k], n0 += d[k] * d[k], n1 += d[cols + k] * d[cols + k];
  assert_true(fabs(dot) < 1e-5 && fabs(n0 - 1) < 1e-5 && fabs(n1 - 1) < 1e-5);
}

/* Non-Dense initialisers of the real files (orthogonal, BN ones/zeros, LSTM
 * unit_forget_bias) fill without lowering. */
static void test_init_real_variables(void **s FE_UNUSED) {
  const char *dir = fe_real_dir();
  if (!dir) skip();
  char path[1024];
  snprintf(path, sizeof path, "%s/%s", dir, "ShaikRiyaz2003__GaurdianEye__model_architecture.json");
  kdc_keras_model *m = fe_load_ok(path);
  for (size_t i = 0; i < kdc_frontend_variable_count(m); i++) {
    const kdc_keras_var *v = kdc_frontend_variable(m, i);
    float *d = init_values(m, v);
    if (!strcmp(v->path, "lstm/lstm_cell/bias")) {
      assert_true(d[0] == 0.0f && d[8] == 1.0f && d[15] == 1.0f && d[16] == 0.0f);
    }
    if (!strcmp(v->path, "lstm/lstm_cell/recurrent_kernel")) /* (8, 32): orthonormal rows */
      assert_orthonormal_rows(d, 32);
    free(d);
  }
  kdc_frontend_free(m);
}

/* Keras 3 files name the LSTM's default recurrent initializer by its class,
 * "OrthogonalInitializer" (tests/frontend/data/real2, Cheshta08): every
 * variable fills, the recurrent kernels with orthonormal rows. */
static void test_init_keras3_orthogonal(void **s FE_UNUSED) {
  kdc_keras_model *m = fe_load_ok(KDC_SOURCE_DIR "/tests/frontend/data/real2/"
                                  "Cheshta08__Sarcasm-detection-demo__lstm_model.json");
  int checked = 0;
  for (size_t i = 0; i < kdc_frontend_variable_count(m); i++) {
    const kdc_keras_var *v = kdc_frontend_variable(m, i);
    float *d = init_values(m, v);
    size_t pl = strlen(v->path);
    if (pl > 17 && !strcmp(v->path + pl - 17, "/recurrent_kernel")) {
      assert_orthonormal_rows(d, v->shape.dims[1]);
      checked++;
    }
    free(d);
  }
  assert_int_equal(checked, 2);
  kdc_frontend_free(m);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_example_mnist_mlp),
      cmocka_unit_test(test_example_mlp_sequential),
      cmocka_unit_test(test_example_activations),
      cmocka_unit_test(test_example_merge_reshape),
      cmocka_unit_test(test_example_transformer_block),
      cmocka_unit_test(test_example_norm_zoo),
      cmocka_unit_test(test_predict_layout),
      cmocka_unit_test(test_nested_lowering),
      cmocka_unit_test(test_err_unsupported_lowering),
      cmocka_unit_test(test_weights_errors),
      cmocka_unit_test(test_weights_fallback_names),
      cmocka_unit_test(test_tfjs_shard_errors),
      cmocka_unit_test(test_init_deterministic),
      cmocka_unit_test(test_init_real_variables),
      cmocka_unit_test(test_init_keras3_orthogonal),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
