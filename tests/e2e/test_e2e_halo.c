/*
 * End to end, spatial layouts (docs/sharding.md "Halo exchange"): the small
 * CNN (examples/small_cnn: Conv2D same, BatchNormalization, MaxPooling2D,
 * a stride-2 valid Conv2D, DepthwiseConv2D, AveragePooling2D same, global
 * pooling, Dense) compiled with the layout
 *     {"batch_dim_name": "data",
 *      "layout_map": {"conv1/output": ["data", "model", null, null]}}
 * (the rows of conv1's output, and by propagation of its input, over
 * `model`) on the meshes 1x2, 1x4 and 2x4 through the kdc binary:
 *   - predict equals the one-device plan (|d| <= 1e-5 + 1e-4 |ref|);
 *   - the plan exchanges halos (collective_permute in `kdc inspect
 *     --collectives`) and conv1 is not gathered (no fallback warning naming
 *     it; the stride-2 valid conv2 does fall back, with its warning);
 *   - one SGD training step (categorical cross-entropy, batch 8, `kdc run
 *     --fit`) gives the same weights and loss as one device.
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

#include "e2e_util.h"

static const char layout[] =
    "{\"batch_dim_name\": \"data\", \"layout_map\": "
    "{\"conv1/output\": [\"data\", \"model\", null, null]}}\n";

static const char *const meshes[] = {"1x2", "1x4", "2x4"};

/* tmpdir/<prefix><mesh><ext> (malloc'd). */
static char *mesh_file(const char *prefix, const char *mesh, const char *ext) {
  char name[64];
  snprintf(name, sizeof name, "%s%s%s", prefix, mesh, ext);
  return e2e_path(name);
}

static char *write_layout(void) {
  char *p = e2e_path("halo_layout.json");
  FILE *f = fopen(p, "w");
  assert_non_null(f);
  fputs(layout, f);
  fclose(f);
  return p;
}

static void compile(const char *mesh, const char *lay, bool train, const char *plan,
                    e2e_result *r) {
  char *model = e2e_src("examples/small_cnn/model.json");
  char *w = e2e_src("examples/small_cnn/weights.safetensors");
  const char *args[24];
  int n = 0;
  args[n++] = "compile", args[n++] = model, args[n++] = "--weights", args[n++] = w;
  args[n++] = "--batch", args[n++] = "8", args[n++] = "-o", args[n++] = plan;
  if (mesh) args[n++] = "--mesh", args[n++] = mesh;
  if (lay) args[n++] = "--layout", args[n++] = lay;
  if (train) {
    args[n++] = "--loss", args[n++] = "categorical_crossentropy";
    args[n++] = "--optimizer", args[n++] = "sgd", args[n++] = "--learning-rate", args[n++] = "0.1";
  }
  args[n] = NULL;
  e2e_kdcv(r, args);
  if (r->status) fprintf(stderr, "%s", r->err);
  assert_int_equal(r->status, 0);
  free(model), free(w);
}

static void test_predict(void **state) {
  (void)state;
  char *lay = write_layout(), *ref_plan = e2e_path("halo_1.plan"), *ref_y = e2e_path("halo_1.npy");
  char *x = e2e_src("examples/small_cnn/input.npy");
  e2e_result r;
  compile(NULL, NULL, false, ref_plan, &r);
  e2e_kdc(&r, "run", ref_plan, "--input", x, "--output", ref_y, NULL);
  assert_int_equal(r.status, 0);
  kdc_npy_array want;
  assert_null(kdc_npy_read(ref_y, &want));
  for (size_t i = 0; i < sizeof meshes / sizeof meshes[0]; i++) {
    char *plan = mesh_file("halo_", meshes[i], ".plan"), *y = mesh_file("halo_", meshes[i], ".npy");
    compile(meshes[i], lay, false, plan, &r);
    assert_null(strstr(r.err, "(convolution, conv1"));         /* conv1 runs split, with halos */
    assert_non_null(strstr(r.err, "(convolution, conv2"));     /* stride 2 valid: the gather fallback */
    e2e_kdc(&r, "run", plan, "--input", x, "--output", y, NULL);
    if (r.status) fprintf(stderr, "%s", r.err);
    assert_int_equal(r.status, 0);
    kdc_npy_array got;
    assert_null(kdc_npy_read(y, &got));
    double err = e2e_npy_compare(&got, &want, 1e-5, 1e-4);
    if (err > 1) fprintf(stderr, "small_cnn on %s: %.3g x tolerance\n", meshes[i], err);
    assert_true(err <= 1);
    kdc_npy_free(&got);
    e2e_kdc(&r, "inspect", plan, "--collectives", NULL);
    assert_int_equal(r.status, 0);
    assert_non_null(strstr(r.out, "collective_permute"));
    free(plan), free(y);
  }
  kdc_npy_free(&want);
  free(lay), free(ref_plan), free(ref_y), free(x);
}

/* 8 rows of [16,16,3] inputs and one-hot labels of 10 classes (an LCG). */
static void write_data(const char *xp, const char *yp) {
  int64_t xd[4] = {8, 16, 16, 3}, yd[2] = {8, 10};
  float *xv = malloc(8 * 16 * 16 * 3 * sizeof *xv), yv[80] = {0};
  uint32_t s = 12345;
  for (int i = 0; i < 8 * 16 * 16 * 3; i++) {
    s = s * 1103515245u + 12345u;
    xv[i] = (float)((s >> 8) % 2001) / 1000.0f - 1.0f;
  }
  for (int i = 0; i < 8; i++) yv[i * 10 + (i * 7 + 3) % 10] = 1;
  assert_null(kdc_npy_write(xp, KDC_IO_DTYPE_F32, 4, xd, xv));
  assert_null(kdc_npy_write(yp, KDC_IO_DTYPE_F32, 2, yd, yv));
  free(xv);
}

static void fit(const char *plan, const char *x, const char *y, const char *out) {
  e2e_result r;
  e2e_kdc(&r, "run", plan, "--fit", "--x", x, "--y", y, "--epochs", "1", "--batch-size", "8",
          "--save-weights", out, "--quiet", NULL);
  if (r.status) fprintf(stderr, "%s", r.err);
  assert_int_equal(r.status, 0);
}

static void test_train_step(void **state) {
  (void)state;
  char *lay = write_layout(), *x = e2e_path("halo_x.npy"), *y = e2e_path("halo_y.npy");
  write_data(x, y);
  char *ref_plan = e2e_path("halo_t1.plan"), *ref_w = e2e_path("halo_t1.safetensors");
  e2e_result r;
  compile(NULL, NULL, true, ref_plan, &r);
  fit(ref_plan, x, y, ref_w);
  kdc_safetensors *sw = NULL;
  assert_null(kdc_safetensors_open(ref_w, &sw));
  for (size_t i = 0; i < sizeof meshes / sizeof meshes[0]; i++) {
    char *plan = mesh_file("halo_t", meshes[i], ".plan");
    char *wp = mesh_file("halo_t", meshes[i], ".safetensors");
    compile(meshes[i], lay, true, plan, &r);
    fit(plan, x, y, wp);
    kdc_safetensors *sg = NULL;
    assert_null(kdc_safetensors_open(wp, &sg));
    size_t nt = kdc_safetensors_count(sw);
    assert_int_equal(kdc_safetensors_count(sg), nt);
    double worst = 0;
    for (size_t k = 0; k < nt; k++) {
      const kdc_st_tensor *tw = kdc_safetensors_get(sw, k);
      const kdc_st_tensor *tg = kdc_safetensors_find(sg, tw->name);
      assert_non_null(tg);
      assert_int_equal(tg->nbytes, tw->nbytes);
      if (tw->dtype != KDC_IO_DTYPE_F32) continue;
      size_t ne = tw->nbytes / 4;
      float *fg = malloc(tg->nbytes), *fw = malloc(tw->nbytes);
      memcpy(fg, tg->data, tg->nbytes);
      memcpy(fw, tw->data, tw->nbytes);
      double e = e2e_f32_compare(fg, fw, ne, 1e-5, 1e-4);
      if (e > 1) fprintf(stderr, "%s on %s: %.3g x tolerance\n", tw->name, meshes[i], e);
      worst = fmax(worst, e);
      free(fg), free(fw);
    }
    assert_true(worst <= 1);
    kdc_safetensors_close(sg);
    free(plan), free(wp);
  }
  kdc_safetensors_close(sw);
  free(lay), free(x), free(y), free(ref_plan), free(ref_w);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_predict),
      cmocka_unit_test(test_train_step),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
