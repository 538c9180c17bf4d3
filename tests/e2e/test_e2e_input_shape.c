/*
 * `kdc compile --input-shape [NAME=]D1,D2,...`: static dims for a model input
 * whose shape has unknown (None) non-batch dims.  The real Anaya-Koirala
 * file (Keras 3 .keras config.json; Input (None, None, 41) -> LSTM(256) ->
 * Dense) compiled with a sequence length of 12 for a 2x4 mesh gives, through
 * the kdc binary, the reference interpreter's predictions on the
 * unpartitioned model built by the frontend API with the same shape
 * (|d| <= 1e-5 + 1e-4 |ref|); bad uses are one-line errors, exit 2, no plan.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/io.h"
#include "e2e_util.h"
#include "frontend/frontend.h"
#include "ir/ir.h"

enum { BATCH = 8, STEPS = 12, FEAT = 41 };

static const char *anaya(char *buf, size_t n) {
  snprintf(buf, n, "%s/real-json/Anaya-Koirala__melody-generating-lstm-cs371__config.json",
           KDC_SHARED_DIR);
  return e2e_exists(buf) ? buf : NULL;
}

static void test_parse(void **state) {
  (void)state;
  kdc_input_shape s;
  assert_null(kdc_frontend_parse_input_shape("seq=12,41", &s));
  assert_string_equal(s.name, "seq");
  assert_int_equal(s.rank, 2);
  assert_int_equal(s.dims[0], 12);
  assert_int_equal(s.dims[1], 41);
  kdc_input_shape_free(&s);
  assert_null(kdc_frontend_parse_input_shape("7", &s));
  assert_null(s.name);
  assert_int_equal(s.rank, 1);
  assert_int_equal(s.dims[0], 7);
  static const char *bad[] = {"", "=3", "a=", "a=0", "a=-1", "a=3,", "a=,3", "a=3,,4", "a=3x4",
                              "a=1,1,1,1,1,1,1,1", "a=99999999999999999999"};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    kdc_status st = kdc_frontend_parse_input_shape(bad[i], &s);
    if (!st) fail_msg("\"%s\" parsed", bad[i]);
    assert_null(s.name);
    kdc_status_free(st);
  }
}

static void test_anaya_2x4_equals_interpreter(void **state) {
  (void)state;
  char path[1024];
  if (!anaya(path, sizeof path)) skip();
  /* reference: the frontend API with the same input shape, one device */
  kdc_input_shape is = {"input_layer", 2, {STEPS, FEAT}};
  kdc_load_options lo = {1, &is, NULL};
  kdc_keras_model *km = NULL;
  kdc_module *mod = NULL;
  assert_null(kdc_frontend_load_opts(path, &lo, &km));
  kdc_lower_options low = {.batch = BATCH};
  assert_null(kdc_frontend_lower(km, &low, &mod));
  assert_null(kdc_frontend_init_weights(km, mod, 7));
  kdc_frontend_free(km);
  kdc_func *f = kdc_ir_module_find_func(mod, "predict");
  kdc_tensor *args = calloc(f->n_params, sizeof *args);
  float *x = NULL;
  for (size_t i = 0; i < f->n_params; i++) {
    const kdc_node *nd = kdc_ir_node(f, f->params[i]);
    args[i].type = nd->type;
    if (nd->attr.param.kind != KDC_PARAM_INPUT) continue;
    assert_int_equal(nd->type.rank, 3);
    assert_int_equal(nd->type.dims[1], STEPS);
    x = malloc(sizeof(float) * BATCH * STEPS * FEAT);
    uint64_t s = 99;
    for (int k = 0; k < BATCH * STEPS * FEAT; k++) {
      s = s * 6364136223846793005ull + 1442695040888963407ull;
      x[k] = (float)((double)(s >> 11) / 9007199254740992.0 * 2 - 1);
    }
    args[i].data = x;
  }
  assert_non_null(x);
  kdc_tensor want[1];
  assert_int_equal(f->n_results, 1);
  assert_null(kdc_ir_interpret(f, args, f->n_params, want));
  kdc_ir_module_destroy(mod);

  /* the kdc binary on 2x4 */
  char *plan = e2e_path("anaya.plan"), *xin = e2e_path("anaya_x.npy"),
       *yout = e2e_path("anaya_y.npy");
  int64_t dims[3] = {BATCH, STEPS, FEAT};
  assert_null(kdc_npy_write(xin, KDC_IO_DTYPE_F32, 3, dims, x));
  e2e_result r;
  e2e_kdc(&r, "compile", path, "--random-init", "--seed", "7", "--batch", "8", "--input-shape",
          "input_layer=12,41", "--mesh", "2x4", "-o", plan, NULL);
  if (r.status) fail_msg("compile: %s", r.err);
  e2e_kdc(&r, "run", plan, "--input", xin, "--output", yout, NULL);
  if (r.status) fail_msg("run: %s", r.err);
  kdc_npy_array got;
  assert_null(kdc_npy_read(yout, &got));
  assert_int_equal(got.nbytes, kdc_type_bytes(&want[0].type));
  double err = e2e_f32_compare(got.data, want[0].data, got.nbytes / 4, 1e-5, 1e-4);
  if (err > 1) fail_msg("2x4 differs from the interpreter (%.3g of tolerance)", err);
  kdc_npy_free(&got);
  free(want[0].data), free(x), free(args);
  free(plan), free(xin), free(yout);
}

static void expect_bad(const char *model, const char *shape, const char *n1, const char *n2) {
  char *plan = e2e_path("bad.plan");
  e2e_result r;
  e2e_kdc(&r, "compile", model, "--random-init", "--input-shape", shape, "-o", plan, NULL);
  if (r.status != 2 || e2e_lines(r.err) != 1 || !strstr(r.err, n1) || (n2 && !strstr(r.err, n2)))
    fail_msg("--input-shape %s: status %d: %s", shape, r.status, r.err);
  assert_false(e2e_exists(plan));
  free(plan);
}

static void test_errors(void **state) {
  (void)state;
  char path[1024];
  if (!anaya(path, sizeof path)) skip();
  /* without the flag: the located error names the flag and the input */
  char *plan = e2e_path("none.plan");
  e2e_result r;
  e2e_kdc(&r, "compile", path, "--random-init", "-o", plan, NULL);
  assert_int_equal(r.status, 2);
  assert_int_equal(e2e_lines(r.err), 1);
  assert_non_null(strstr(r.err, "config.layers[0]"));
  assert_non_null(strstr(r.err, "--input-shape input_layer="));
  assert_false(e2e_exists(plan));
  free(plan);
  expect_bad(path, "foo=12,41", "not a model input", "\"input_layer\"");
  expect_bad(path, "12,40", "model fixes it to 41", "Anaya");
  expect_bad(path, "12", "gives 1 dims after the batch dim", "Anaya");
  expect_bad(path, "12,41,3", "gives 3 dims", "Anaya");
  expect_bad(path, "12,,41", "--input-shape", "character 4");
  /* two inputs: a shape without a name is ambiguous */
  char two[1024];
  snprintf(two, sizeof two, "%s/real-json/ShaikRiyaz2003__GaurdianEye__model_architecture.json",
           KDC_SHARED_DIR);
  if (e2e_exists(two)) expect_bad(two, "5,5", "model has 2 inputs", "GaurdianEye");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_parse),
      cmocka_unit_test(test_anaya_2x4_equals_interpreter),
      cmocka_unit_test(test_errors),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
