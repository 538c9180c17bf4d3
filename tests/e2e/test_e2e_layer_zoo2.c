/*
 * End to end, examples/layer_zoo2 (tests/reference/gen_layer_zoo2.js):
 * TimeDistributed, Attention, AdditiveAttention, Resizing, CenterCrop and
 * the random augmentation layers.
 * - `kdc compile` (batch 16) + `kdc run` on the 37 reference rows, one
 *   device and a 2x4 mesh (DataParallel: the batch split over every axis,
 *   through TimeDistributed's reshapes): every element within 1e-5 +
 *   1e-4 |ref| of the Keras 3 reference;
 * - the single-input training model (fit_model.json: RandomFlip active,
 *   Resizing, CenterCrop, TimeDistributed(Dense), causal Attention,
 *   AdditiveAttention, Dense softmax) trains with `kdc run --fit` (SGD,
 *   categorical crossentropy, 3 epochs of 16-row batches) to the same epoch
 *   losses on one device and on 2x4 (relative 1e-5): RandomFlip's draws
 *   depend on the sample's global index only, as Dropout's.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <math.h>

#include "common/io.h"
#include "e2e_util.h"

static void predict_on(const char *mesh) {
  char *model = e2e_src("examples/layer_zoo2/model.json");
  char *w = e2e_src("examples/layer_zoo2/weights.safetensors");
  char *x0 = e2e_src("examples/layer_zoo2/input0.npy"), *x1 = e2e_src("examples/layer_zoo2/input1.npy");
  char *want_p = e2e_src("examples/layer_zoo2/expected.npy");
  char *plan = e2e_path("zoo2.plan"), *y = e2e_path("zoo2.npy");
  e2e_result r;
  e2e_kdc(&r, "compile", model, "--weights", w, "--batch", "16", "--mesh", mesh, "-o", plan, NULL);
  if (r.status) fail_msg("compile on %s: %s", mesh, r.err);
  e2e_kdc(&r, "run", plan, "--input", x0, "--input", x1, "--output", y, NULL);
  if (r.status) fail_msg("run on %s: %s", mesh, r.err);
  kdc_npy_array got, want;
  assert_null(kdc_npy_read(y, &got));
  assert_null(kdc_npy_read(want_p, &want));
  double err = e2e_npy_compare(&got, &want, 1e-5, 1e-4);
  if (err > 1) fail_msg("layer_zoo2 on %s: %.3g x tolerance", mesh, err);
  kdc_npy_free(&got), kdc_npy_free(&want);
  free(model), free(w), free(x0), free(x1), free(want_p), free(plan), free(y);
}

static void test_predict(void **state) {
  (void)state;
  predict_on("1");
  predict_on("2x4");
}

static void test_fit_meshes(void **state) {
  (void)state;
  enum { N = 37 };
  float y[N * 3] = {0};
  for (int i = 0; i < N; i++) y[i * 3 + (i * 7 + 1) % 3] = 1;
  char *yp = e2e_path("zoo2_fit_y.npy");
  assert_null(kdc_npy_write(yp, KDC_IO_DTYPE_F32, 2, (int64_t[]){N, 3}, y));
  char *model = e2e_src("examples/layer_zoo2/fit_model.json");
  char *w = e2e_src("examples/layer_zoo2/fit_weights.safetensors");
  char *xp = e2e_src("examples/layer_zoo2/fit_input.npy");
  double loss[2][3];
  const char *meshes[2] = {"1", "2x4"};
  for (int m = 0; m < 2; m++) {
    char *plan = e2e_path(m ? "zoo2_fit_2x4.plan" : "zoo2_fit_1.plan");
    e2e_result r;
    e2e_kdc(&r, "compile", model, "--weights", w, "--loss", "categorical_crossentropy",
            "--optimizer", "sgd", "--learning-rate", "0.1", "--batch", "16", "--mesh", meshes[m],
            "-o", plan, NULL);
    if (r.status != 0) fail_msg("compile on %s: %s", meshes[m], r.err);
    e2e_kdc(&r, "run", plan, "--fit", "--x", xp, "--y", yp, "--epochs", "3", "--batch-size", "16",
            NULL);
    if (r.status != 0) fail_msg("fit on %s: %s", meshes[m], r.err);
    const char *p = r.out;
    for (int e = 0; e < 3; e++) {
      p = strstr(p, "loss: ");
      assert_non_null(p);
      loss[m][e] = strtod(p + 6, NULL);
      assert_true(isfinite(loss[m][e]) && loss[m][e] > 0);
      p += 6;
    }
    free(plan);
  }
  for (int e = 0; e < 3; e++)
    if (fabs(loss[1][e] - loss[0][e]) > 1e-5 * fabs(loss[0][e]))
      fail_msg("epoch %d: loss %.7g on 2x4, %.7g on one device", e + 1, loss[1][e], loss[0][e]);
  free(yp), free(model), free(w), free(xp);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_predict),
      cmocka_unit_test(test_fit_meshes),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
