/*
 * End to end against Keras 3 (tests/reference/gen_conv.js, TF.js 4.22 with
 * Keras 3 semantics where tfjs differs): examples/conv_zoo, a two-input
 * model of Conv2DTranspose (strides 2, same) + Cropping2D, SeparableConv2D
 * (depth_multiplier 2, dilation 2), DepthwiseConv2D (depth_multiplier 2,
 * dilation 2, valid), Conv2D with dilation 2, Conv2D + pooling in
 * channels_first, UpSampling2D bilinear (half-pixel centres) + 1x1 Conv2D,
 * Conv1D causal with dilation 2 then Conv1D strides 2, each branch pooled and
 * concatenated.  `kdc compile` at batch 16, `kdc run` on the 37 reference
 * rows (two full batches and a partial one); every output element within
 * 1e-5 + 1e-4 |ref| of the reference, on one device and on a 2x4 mesh
 * (DataParallel: batch split over every axis).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <cmocka.h>

#include "e2e_util.h"

static void check_mesh(const char *mesh) {
  char *model = e2e_src("examples/conv_zoo/model.json");
  char *w = e2e_src("examples/conv_zoo/weights.safetensors");
  char *x0 = e2e_src("examples/conv_zoo/input0.npy"), *x1 = e2e_src("examples/conv_zoo/input1.npy");
  char *want_p = e2e_src("examples/conv_zoo/expected.npy");
  char *plan = e2e_path(mesh ? "conv_zoo_mesh.plan" : "conv_zoo.plan");
  char *y = e2e_path(mesh ? "conv_zoo_mesh.npy" : "conv_zoo.npy");
  e2e_result r;
  if (mesh)
    e2e_kdc(&r, "compile", model, "--weights", w, "--batch", "16", "--mesh", mesh, "-o", plan, NULL);
  else
    e2e_kdc(&r, "compile", model, "--weights", w, "--batch", "16", "-o", plan, NULL);
  if (r.status) fprintf(stderr, "%s", r.err);
  assert_int_equal(r.status, 0);
  e2e_kdc(&r, "run", plan, "--input", x0, "--input", x1, "--output", y, NULL);
  if (r.status) fprintf(stderr, "%s", r.err);
  assert_int_equal(r.status, 0);
  double err = e2e_npy_files_compare(y, want_p, 1e-5, 1e-4);
  if (err > 1) fprintf(stderr, "conv_zoo (%s): %.3g x tolerance\n", mesh ? mesh : "1 device", err);
  assert_true(err <= 1);
  free(model), free(w), free(x0), free(x1), free(want_p), free(plan), free(y);
}

static void test_one_device(void **state) {
  (void)state;
  check_mesh(NULL);
}

static void test_mesh_2x4(void **state) {
  (void)state;
  check_mesh("2x4");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_one_device),
      cmocka_unit_test(test_mesh_2x4),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
