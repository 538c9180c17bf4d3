/*
 * End to end, predict: for every example model, `kdc compile` + `kdc run`
 * gives (1) the predictions of the independent Keras implementation
 * (TensorFlow.js, checked in as expected*.npy; tolerance |d| <= 1e-5 +
 * 1e-4|ref|) and (2) the reference interpreter's result on the same IR
 * (|d| <= 1e-6 + 1e-5|ref|), for several compiled batch sizes, including a
 * last partial batch, and for both JSON families (Keras 3 and TF.js).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "e2e_util.h"
#include "frontend/frontend.h"
#include "ir/ir.h"

typedef struct example {
  const char *dir;
  int n_in, n_out;
} example;

static const example examples[] = {
    {"mnist_mlp", 1, 1},
    {"mlp_sequential", 1, 1},
    {"activations", 1, 1},
    {"merge_reshape", 2, 2},
    {"transformer_block", 1, 1},
    {"norm_zoo", 1, 1},
    {"small_cnn", 1, 1},
    {"text_classifier", 1, 1},
    {"lstm_text", 1, 1},
    {"gru_rnn", 1, 1},
    {"bidir_rnn", 1, 1},
    {"seq2seq", 2, 1},
};

static char *ex_file(const example *e, const char *fmt, int i) {
  char rel[256], name[64];
  snprintf(name, sizeof name, fmt, i);
  snprintf(rel, sizeof rel, "examples/%s/%s", e->dir, name);
  return e2e_src(rel);
}

static char *in_file(const example *e, int i) {
  return ex_file(e, e->n_in == 1 ? "input.npy" : "input%d.npy", i);
}

static char *expected_file(const example *e, int i, bool tfjs) {
  if (tfjs && strcmp(e->dir, "activations") == 0) return ex_file(e, "expected_tfjs.npy", i);
  return ex_file(e, e->n_out == 1 ? "expected.npy" : "expected%d.npy", i);
}

/* Interprets the example's predict function on its whole input (batch =
 * rows) with the reference interpreter; returns malloc'd results. */
static void interpret(const example *e, int64_t rows, kdc_tensor *out) {
  char *model = ex_file(e, "model.json", 0), *w = ex_file(e, "weights.safetensors", 0);
  kdc_keras_model *km = NULL;
  kdc_module *mod = NULL;
  assert_null(kdc_frontend_load(model, &km));
  kdc_lower_options lo = {.batch = rows};
  assert_null(kdc_frontend_lower(km, &lo, &mod));
  assert_null(kdc_frontend_bind_weights(km, mod, w, 0));
  kdc_func *f = kdc_ir_module_find_func(mod, "predict");
  assert_non_null(f);
  kdc_tensor *args = calloc(f->n_params, sizeof *args);
  kdc_npy_array in[4];
  for (int i = 0; i < e->n_in; i++) {
    char *p = in_file(e, i);
    assert_null(kdc_npy_read(p, &in[i]));
    free(p);
  }
  for (size_t i = 0; i < f->n_params; i++) {
    const kdc_node *nd = kdc_ir_node(f, f->params[i]);
    args[i].type = nd->type;
    args[i].data = nd->attr.param.kind == KDC_PARAM_INPUT ? in[i].data : NULL;
  }
  assert_null(kdc_ir_interpret(f, args, f->n_params, out));
  free(args);
  for (int i = 0; i < e->n_in; i++) kdc_npy_free(&in[i]);
  kdc_ir_module_destroy(mod);
  kdc_frontend_free(km);
  free(model);
  free(w);
}

static void check_example(const example *e, const char *batch, bool tfjs) {
  char plan_name[128];
  snprintf(plan_name, sizeof plan_name, "%s-%s-%d.plan", e->dir, batch, tfjs);
  char *plan = e2e_path(plan_name);
  char *model = ex_file(e, tfjs ? "model_tfjs.json" : "model.json", 0);
  char *w = ex_file(e, "weights.safetensors", 0);
  e2e_result r;
  if (tfjs) e2e_kdc(&r, "compile", model, "--batch", batch, "-o", plan, NULL);
  else e2e_kdc(&r, "compile", model, "--weights", w, "--batch", batch, "-o", plan, NULL);
  if (r.status != 0) fprintf(stderr, "compile %s: %s", e->dir, r.err);
  assert_int_equal(r.status, 0);

  char *ins[4], *outs[4];
  const char *argv[32];
  int n = 0;
  argv[n++] = "run";
  argv[n++] = plan;
  for (int i = 0; i < e->n_in; i++) {
    ins[i] = in_file(e, i);
    argv[n++] = "--input";
    argv[n++] = ins[i];
  }
  for (int i = 0; i < e->n_out; i++) {
    char name[160];
    snprintf(name, sizeof name, "%s-out%d.npy", plan_name, i);
    outs[i] = e2e_path(name);
    argv[n++] = "--output";
    argv[n++] = outs[i];
  }
  argv[n] = NULL;
  e2e_kdcv(&r, argv);
  if (r.status != 0) fprintf(stderr, "run %s: %s", e->dir, r.err);
  assert_int_equal(r.status, 0);

  kdc_npy_array got[4], want[4];
  for (int i = 0; i < e->n_out; i++) {
    char *ef = expected_file(e, i, tfjs);
    assert_null(kdc_npy_read(outs[i], &got[i]));
    assert_null(kdc_npy_read(ef, &want[i]));
    double err = e2e_npy_compare(&got[i], &want[i], 1e-5, 1e-4);
    if (err > 1) fprintf(stderr, "%s output %d: error %.3g x tolerance vs Keras reference\n", e->dir, i, err);
    assert_true(err <= 1);
    free(ef);
  }
  if (!tfjs) {
    kdc_tensor ref[4];
    interpret(e, got[0].dims[0], ref);
    for (int i = 0; i < e->n_out; i++) {
      double err = e2e_f32_compare(got[i].data, ref[i].data, got[i].nbytes / 4, 1e-6, 1e-5);
      if (err > 1) fprintf(stderr, "%s output %d: error %.3g x tolerance vs interpreter\n", e->dir, i, err);
      assert_true(err <= 1);
      free(ref[i].data);
    }
  }
  for (int i = 0; i < e->n_out; i++) {
    kdc_npy_free(&got[i]);
    kdc_npy_free(&want[i]);
    free(outs[i]);
  }
  for (int i = 0; i < e->n_in; i++) free(ins[i]);
  free(plan);
  free(model);
  free(w);
}

static void test_examples_batch32(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof examples / sizeof examples[0]; i++) check_example(&examples[i], "32", false);
}

static void test_examples_partial_batches(void **state) {
  (void)state; /* 37 rows: 16+16+5 and one batch of 64 with 27 padding rows */
  for (size_t i = 0; i < sizeof examples / sizeof examples[0]; i++) {
    check_example(&examples[i], "16", false);
    check_example(&examples[i], "64", false);
  }
}

static void test_examples_tfjs_format(void **state) {
  (void)state; /* TF.js model.json with its own weight shards */
  for (size_t i = 0; i < sizeof examples / sizeof examples[0]; i++) check_example(&examples[i], "8", true);
}

/* Keras converts each model input to its Input's dtype
 * (Functional._convert_inputs_to_tensors), so token ids saved as int32 or
 * int64 feed a float32 Input, and float ids an int32 Input: text_classifier
 * with each gives the Keras reference. */
static void run_text_classifier(const char *model, const char *input) {
  char *w = e2e_src("examples/text_classifier/weights.safetensors");
  char *want_p = e2e_src("examples/text_classifier/expected.npy");
  char *plan = e2e_path("ids.plan"), *out = e2e_path("ids_out.npy");
  e2e_result r;
  e2e_kdc(&r, "compile", model, "--weights", w, "--batch", "16", "-o", plan, NULL);
  assert_int_equal(r.status, 0);
  e2e_kdc(&r, "run", plan, "--input", input, "--output", out, NULL);
  if (r.status != 0) fprintf(stderr, "%s: %s", input, r.err);
  assert_int_equal(r.status, 0);
  kdc_npy_array got, want;
  assert_null(kdc_npy_read(out, &got));
  assert_null(kdc_npy_read(want_p, &want));
  assert_true(e2e_npy_compare(&got, &want, 1e-5, 1e-4) <= 1);
  kdc_npy_free(&got);
  kdc_npy_free(&want);
  free(w), free(want_p), free(plan), free(out);
}

static void test_input_dtype_conversion(void **state) {
  (void)state;
  char *model = e2e_src("examples/text_classifier/model.json");
  char *in_p = e2e_src("examples/text_classifier/input.npy");
  kdc_npy_array x;
  assert_null(kdc_npy_read(in_p, &x));
  size_t n = x.nbytes / 4;
  int32_t *i32 = malloc(n * 4);
  int64_t *i64 = malloc(n * 8);
  for (size_t i = 0; i < n; i++) {
    i32[i] = (int32_t)((float *)x.data)[i];
    i64[i] = i32[i];
  }
  char *p32 = e2e_path("ids_i32.npy"), *p64 = e2e_path("ids_i64.npy");
  assert_null(kdc_npy_write(p32, KDC_IO_DTYPE_I32, x.rank, x.dims, i32));
  assert_null(kdc_npy_write(p64, KDC_IO_DTYPE_I64, x.rank, x.dims, i64));
  run_text_classifier(model, p32);
  run_text_classifier(model, p64);
  /* the same model with Input(dtype="int32"), fed the float32 ids */
  size_t len;
  void *text = NULL;
  assert_null(kdc_file_read_all(model, &text, &len));
  const char *from = "\"dtype\": \"float32\"", *at = strstr(text, from);
  assert_non_null(at);
  char *model_i32 = e2e_path("ids_i32_model.json");
  FILE *f = fopen(model_i32, "wb");
  assert_non_null(f);
  fwrite(text, 1, (size_t)(at - (const char *)text), f);
  fputs("\"dtype\": \"int32\"", f);
  fputs(at + strlen(from), f);
  fclose(f);
  run_text_classifier(model_i32, in_p);
  /* a NaN cannot become an id: exit 2 naming the file and the element */
  ((float *)x.data)[5] = 0.0f / 0.0f;
  char *nan_p = e2e_path("ids_nan.npy"), *plan = e2e_path("ids_nan.plan"), *out = e2e_path("ids_nan_out.npy");
  char *w = e2e_src("examples/text_classifier/weights.safetensors");
  assert_null(kdc_npy_write(nan_p, KDC_IO_DTYPE_F32, x.rank, x.dims, x.data));
  e2e_result r;
  e2e_kdc(&r, "compile", model_i32, "--weights", w, "--batch", "16", "-o", plan, NULL);
  assert_int_equal(r.status, 0);
  e2e_kdc(&r, "run", plan, "--input", nan_p, "--output", out, NULL);
  assert_int_equal(r.status, 2);
  assert_int_equal(e2e_lines(r.err), 1);
  assert_non_null(strstr(r.err, "ids_nan.npy: element 5 ("));
  assert_non_null(strstr(r.err, "nan) is not an integer"));
  assert_false(e2e_exists(out));
  free(nan_p), free(plan), free(out), free(w);
  free(text), free(model_i32), free(p32), free(p64), free(i32), free(i64), free(model), free(in_p);
  kdc_npy_free(&x);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_examples_batch32),
      cmocka_unit_test(test_examples_partial_batches),
      cmocka_unit_test(test_examples_tfjs_format),
      cmocka_unit_test(test_input_dtype_conversion),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
