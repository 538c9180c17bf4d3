/*
 * A deep model through the kdc binary (issue 17, "Depth"): a Keras 3
 * Functional chain of 100,000 Activation layers (relu, tanh, relu, ...),
 * written by the test (not checked in), compiles and runs; the outputs
 * equal the same chain computed here in double precision.
 *
 * Before the fix, 10,000 layers crashed `kdc compile` (the kernel body
 * emitter recursed once per fused op) and 100,000 ran for minutes (layer
 * name lookups, per-kernel sweeps of the whole function, one LLVM body of
 * 100,000 ops).  Fusion groups now hold at most KDC_GROUP_MAX_MEMBERS
 * nodes, so the chain is ceil(100000 / 256) = 391 kernels.
 *
 * Tolerance: |kdc - ref| <= 1e-7 + 5e-5 |ref|.  The chain forgets its input
 * (x_n ~ sqrt(3 / n) after n tanh layers) and rounding errors contract, so
 * kdc's f32 stays within ~4e-6 relative of the double chain; one layer pair
 * less changes the output by 1e-5 relative, a kernel boundary that dropped
 * or repeated its op (391 of them) by ~2e-3.  Negative inputs become exact
 * zeros at the first relu.
 *
 * Under the sanitizers the chain has 10,000 layers (a note is printed);
 * the Release suite runs the full size.
 *
 * test_deep_mlp_mesh: a 64-layer Dense MLP trained with adam on 2x4 gives
 * the epoch losses of 1 device (e2e_fit_equal_1_vs_2x4: 1e-5 relative +
 * 1e-5).  Its 65 small bias-gradient all_reduces were once combined into one
 * concatenate of 65 operands, a kernel codegen refused ("reads more than 63
 * buffers", exit 2); combine_collectives and fuse now keep a kernel within
 * KDC_KERNEL_MAX_INPUTS (ir/ir.h).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>

#include <cmocka.h>

#include "common/io.h"
#include "e2e_util.h"
#include "ir/ir.h"

#ifdef KDC_SANITIZE_BUILD
enum { LAYERS = 10000 };
#else
enum { LAYERS = 100000 };
#endif
enum { BATCH = 2, FEAT = 4 };

static const char *act(int i) { return i % 2 ? "tanh" : "relu"; }

/* The model file: InputLayer "in", then a0 .. a{LAYERS-1}, each reading the last. */
static char *write_chain(void) {
  char *path = e2e_path("chain.json");
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fprintf(f, "{\"module\": \"keras.src.models.functional\", \"class_name\": \"Functional\", "
             "\"config\": {\"name\": \"chain\", \"trainable\": true, \"layers\": [\n"
             "{\"class_name\": \"InputLayer\", \"config\": {\"batch_shape\": [null, %d], "
             "\"dtype\": \"float32\", \"name\": \"in\"}, \"name\": \"in\", \"inbound_nodes\": []}",
          FEAT);
  for (int i = 0; i < LAYERS; i++) {
    char prev[32];
    if (i) snprintf(prev, sizeof prev, "a%d", i - 1);
    else snprintf(prev, sizeof prev, "in");
    fprintf(f, ",\n{\"class_name\": \"Activation\", \"config\": {\"name\": \"a%d\", "
               "\"activation\": \"%s\"}, \"name\": \"a%d\", \"inbound_nodes\": [{\"args\": "
               "[{\"class_name\": \"__keras_tensor__\", \"config\": {\"shape\": [null, %d], "
               "\"dtype\": \"float32\", \"keras_history\": [\"%s\", 0, 0]}}], \"kwargs\": {}}]}",
            i, act(i), i, FEAT, prev);
  }
  fprintf(f, "],\n\"input_layers\": [[\"in\", 0, 0]], \"output_layers\": [[\"a%d\", 0, 0]]}}\n",
          LAYERS - 1);
  assert_int_equal(fclose(f), 0);
  return path;
}

static void test_deep_chain(void **state) {
  (void)state;
#ifdef KDC_SANITIZE_BUILD
  print_message("note: sanitizer build: a chain of %d layers (Release: 100,000)\n", LAYERS);
#endif
  char *model = write_chain(), *plan = e2e_path("chain.plan"), *xp = e2e_path("x.npy"),
       *yp = e2e_path("y.npy");
  const float x[BATCH * FEAT] = {-2.0f, -0.5f, 0.3f, 1.5f, 0.1f, 2.0f, -1.0f, 3.0f};
  const int64_t dims[2] = {BATCH, FEAT};
  assert_null(kdc_npy_write(xp, KDC_IO_DTYPE_F32, 2, dims, x));
  e2e_result r;
  e2e_kdc(&r, "compile", model, "-o", plan, "--batch", "2", NULL);
  if (r.status != 0) fail_msg("compile: exit %d: %s", r.status, r.err);
  e2e_kdc(&r, "inspect", plan, NULL);
  assert_int_equal(r.status, 0);
  /* one kernel step per fusion group of KDC_GROUP_MAX_MEMBERS layers, but
   * 3 kernels: the groups between the first (reads the input) and the last
   * (a shorter one, writes the output) are the same code (codegen/dedup.c) */
  int groups = (LAYERS + KDC_GROUP_MAX_MEMBERS - 1) / KDC_GROUP_MAX_MEMBERS;
  char want[64], want_steps[64];
  snprintf(want, sizeof want, "kernels: %d\n", groups < 3 ? groups : 3);
  snprintf(want_steps, sizeof want_steps, "outputs, %d steps\n", groups);
  if (!strstr(r.out, want) || !strstr(r.out, want_steps))
    fail_msg("inspect: want \"%s\" and \"%s\" in:\n%.600s", want, want_steps, r.out);
  e2e_kdc(&r, "run", plan, "--input", xp, "--output", yp, NULL);
  if (r.status != 0) fail_msg("run: exit %d: %s", r.status, r.err);
  kdc_npy_array y;
  assert_null(kdc_npy_read(yp, &y));
  assert_int_equal(y.rank, 2);
  assert_int_equal(y.dims[0], BATCH);
  assert_int_equal(y.dims[1], FEAT);
  float ref[BATCH * FEAT];
  for (int e = 0; e < BATCH * FEAT; e++) {
    double v = x[e];
    for (int i = 0; i < LAYERS; i++) v = i % 2 ? tanh(v) : (v > 0 ? v : 0);
    ref[e] = (float)v;
    if (x[e] < 0) assert_true(((const float *)y.data)[e] == 0.0f);
  }
  double err = e2e_f32_compare(y.data, ref, BATCH * FEAT, 1e-7, 5e-5);
  if (err > 1)
    fail_msg("outputs differ from the double chain (%.3g of tolerance): %g vs %g", err,
             (double)((const float *)y.data)[2], (double)ref[2]);
  kdc_npy_free(&y);
  remove(model), remove(plan), remove(xp), remove(yp);
  free(model), free(plan), free(xp), free(yp);
}

enum { MLP_DEPTH = 64, MLP_ROWS = 64, MLP_FEAT = 8, MLP_CLASSES = 4 };

static void test_deep_mlp_mesh(void **state) {
  (void)state;
  char *model = e2e_path("deep_mlp.json"), *xp = e2e_path("deep_mlp_x.npy"),
       *yp = e2e_path("deep_mlp_y.npy");
  FILE *f = fopen(model, "w");
  assert_non_null(f);
  fprintf(f, "{\"class_name\": \"Sequential\", \"config\": {\"name\": \"deep_mlp\", "
             "\"layers\": [{\"class_name\": \"InputLayer\", \"config\": {\"batch_shape\": "
             "[null, %d], \"name\": \"in\"}}", MLP_FEAT);
  for (int i = 0; i < MLP_DEPTH; i++)
    fprintf(f, ", {\"class_name\": \"Dense\", \"config\": {\"name\": \"d%d\", \"units\": %d, "
               "\"activation\": \"tanh\"}}", i, MLP_FEAT);
  fprintf(f, ", {\"class_name\": \"Dense\", \"config\": {\"name\": \"head\", \"units\": "
             "%d, \"activation\": \"softmax\"}}]}}\n", MLP_CLASSES);
  assert_int_equal(fclose(f), 0);
  float x[MLP_ROWS * MLP_FEAT], y[MLP_ROWS];
  for (int r = 0; r < MLP_ROWS; r++) {
    float s = 0;
    for (int c = 0; c < MLP_FEAT; c++) {
      float v = (float)((r * 7 + c * 3) % 11) / 5.0f - 1.0f;
      x[r * MLP_FEAT + c] = v;
      s += c < MLP_FEAT / 2 ? v : -v;
    }
    y[r] = (float)(r % 2 + 2 * (s > 0));
  }
  assert_null(kdc_npy_write(xp, KDC_IO_DTYPE_F32, 2, (int64_t[]){MLP_ROWS, MLP_FEAT}, x));
  assert_null(kdc_npy_write(yp, KDC_IO_DTYPE_F32, 1, (int64_t[]){MLP_ROWS}, y));
  e2e_fit_equal_1_vs_2x4("64-layer MLP", model, NULL, xp, yp, 1e-5);
  remove(model), remove(xp), remove(yp);
  free(model), free(xp), free(yp);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_deep_chain),
      cmocka_unit_test(test_deep_mlp_mesh),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
