/*
 * End to end, `kdc compile --layout auto` (issue 20; docs/layout.md
 * "--layout auto") through the kdc binary:
 *   - predict: the MNIST MLP (batch 16, a machine of processes) and the transformer block (batch 2:
 *     the attention heads over model, the hand layout of examples/) on 2x4 and the
 *     small CNN (no hand layout in examples/) on 2x4 with the chosen
 *     layout equal the examples' independent TF.js outputs (|d| <= 1e-5 +
 *     1e-4 |ref|); the written layout.json compiled again with --layout
 *     gives the same plan (collectives and memory of `kdc inspect`);
 *   - training: three Adam epochs of the MNIST MLP under the chosen layout
 *     equal one device (losses within 1e-5 relative + 1e-6);
 *   - `kdc inspect` prints the predicted step time, `--explain` the
 *     choice and the runner-up, and the predicted peak is the plan's;
 *   - --memory-per-device below DataParallel's peak: a layout that fits
 *     (the plan's peak, measured by `kdc inspect`, is under the limit) and
 *     a note of what it gave up; a limit no layout meets: exit 2, one
 *     located line naming the smallest peak, no plan;
 *   - --machine: slow links make it data parallel; bad machine files;
 *   - the flags' errors.
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

/* kdc compile EXAMPLE/model.json --weights ... --batch 16 -o PLAN ARGS...
 * (a --batch in ARGS wins) */
static void compile(e2e_result *r, const char *example, const char *plan, ...) {
  char rel[128];
  snprintf(rel, sizeof rel, "examples/%s/model.json", example);
  char *model = e2e_src(rel);
  snprintf(rel, sizeof rel, "examples/%s/weights.safetensors", example);
  char *w = e2e_src(rel);
  const char *args[40];
  int n = 0;
  args[n++] = "compile", args[n++] = model, args[n++] = "--weights", args[n++] = w;
  args[n++] = "--batch", args[n++] = "16", args[n++] = "-o", args[n++] = plan;
  va_list ap;
  va_start(ap, plan);
  for (const char *a; (a = va_arg(ap, const char *)) != NULL && n < 38;) args[n++] = a;
  va_end(ap);
  args[n] = NULL;
  e2e_kdcv(r, args);
  free(model), free(w);
}

/* The number after |key| in |s|, or -1. */
static double num_after(const char *s, const char *key) {
  const char *k = strstr(s, key);
  return k ? strtod(k + strlen(key), NULL) : -1;
}

/* Predict of |plan| on the example's input equals its expected.npy. */
static void check_predict(const char *example, const char *plan) {
  char rel[128], name[96];
  snprintf(rel, sizeof rel, "examples/%s/input.npy", example);
  char *x = e2e_src(rel);
  snprintf(rel, sizeof rel, "examples/%s/expected.npy", example);
  char *want_p = e2e_src(rel);
  snprintf(name, sizeof name, "auto_%s_out.npy", example);
  char *y = e2e_path(name);
  e2e_result r;
  e2e_kdc(&r, "run", plan, "--input", x, "--output", y, NULL);
  if (r.status) fprintf(stderr, "%s", r.err);
  assert_int_equal(r.status, 0);
  double err = e2e_npy_files_compare(y, want_p, 1e-5, 1e-4);
  if (err > 1) fprintf(stderr, "%s under --layout auto: %.3g x tolerance\n", example, err);
  assert_true(err <= 1);
  free(x), free(want_p), free(y);
}

/* `kdc inspect PLAN [flag]` into |r| (must succeed). */
static void inspect(e2e_result *r, const char *plan, const char *flag, const char *arg) {
  e2e_kdc(r, "inspect", plan, flag, arg, NULL);
  if (r->status) fprintf(stderr, "%s", r->err);
  assert_int_equal(r->status, 0);
}

/* The default machine as processes: no shared gathers, no stacked GEMMs
 * (passes/step_cost.c), collectives without the segment cost. */
static const char PROCS_MACHINE[] = "{\"name\": \"processes\", \"sync_s\": 1e-9, "
                                    "\"shared_gathers\": false}\n";

static void test_predict_and_written_layout(void **state) {
  (void)state;
  char *procs = e2e_write_text("procs_machine.json", PROCS_MACHINE);
  /* the transformer at batch 16 runs fastest DataParallel (no LayoutMap);
   * at batch 2 (no DataParallel over 8 devices) it splits the heads */
  static const char *const examples[] = {"mnist_mlp", "transformer_block"};
  static const char *const batch[] = {"16", "2"};
  for (size_t i = 0; i < 2; i++) {
    char name[96];
    snprintf(name, sizeof name, "auto_%s.plan", examples[i]);
    char *plan = e2e_path(name);
    snprintf(name, sizeof name, "auto_%s_layout.json", examples[i]);
    char *lay = e2e_path(name);
    snprintf(name, sizeof name, "auto_%s_again.plan", examples[i]);
    char *again = e2e_path(name);
    e2e_result r;
    /* on the default machine (one process) the MNIST MLP's stacked GEMM
     * makes DataParallel best; on processes (no shared gathers) it splits */
    if (i == 0)
      compile(&r, examples[i], plan, "--mesh", "2x4", "--layout", "auto", "--write-layout", lay,
              "--batch", batch[i], "--machine", procs, NULL);
    else
      compile(&r, examples[i], plan, "--mesh", "2x4", "--layout", "auto", "--write-layout", lay,
              "--batch", batch[i], NULL);
    if (r.status) fprintf(stderr, "%s", r.err);
    assert_int_equal(r.status, 0);
    assert_non_null(strstr(r.err, "kdc: note: --layout auto: chose "));
    assert_true(e2e_exists(lay));  /* a layout, not DataParallel */
    if (i == 1) {  /* the attention heads split over model */
      char *text = NULL;
      size_t len = 0;
      assert_null(kdc_file_read_all(lay, (void **)&text, &len));
      static const char rule[] = "\"mha/query/kernel\": [null, \"model\"]";
      assert_non_null(memmem(text, len, rule, sizeof rule - 1));
      free(text);
    }
    check_predict(examples[i], plan);
    /* the layout file is a layout kdc reads, and it gives the same plan */
    compile(&r, examples[i], again, "--mesh", "2x4", "--layout", lay, "--batch", batch[i], NULL);
    if (r.status) fprintf(stderr, "%s", r.err);
    assert_int_equal(r.status, 0);
    e2e_result a, b;
    inspect(&a, plan, "--collectives", NULL);
    inspect(&b, again, "--collectives", NULL);
    assert_string_equal(a.out, b.out);
    inspect(&a, plan, NULL, NULL);
    inspect(&b, again, NULL, NULL);
    const char *ma = strstr(a.out, "memory per device"), *mb = strstr(b.out, "memory per device");
    assert_non_null(ma), assert_non_null(mb);
    assert_true(num_after(ma, "= ") == num_after(mb, "= "));
    /* inspect: the predicted step time; the predicted peak is the plan's */
    assert_non_null(strstr(a.out, "predicted step time (--layout auto, "));
    assert_null(strstr(b.out, "predicted step time"));
    /* (exact for the MLP; the transformer's plan adds codegen's transposed
     * copies to the arena, which the cost model does not see) */
    double pred = num_after(strstr(a.out, "\"chosen\": {"), "\"peak_bytes\": ");
    double actual = num_after(ma, "= ");
    if (fabs(pred - actual) > (i == 0 ? 0 : 0.1 * actual))
      fail_msg("%s: predicted peak %.0f, the plan's %.0f", examples[i], pred, actual);
    free(plan), free(lay), free(again);
  }
  free(procs);
}

static void test_explain(void **state) {
  (void)state;
  char *plan = e2e_path("auto_explain.plan");
  e2e_result r;
  compile(&r, "mnist_mlp", plan, "--mesh", "2x4", "--layout", "auto", NULL);
  assert_int_equal(r.status, 0);
  inspect(&r, plan, "--explain", "d1/kernel");
  assert_non_null(strstr(r.out, "@@ auto_layout d1/kernel"));
  assert_non_null(strstr(r.out, "--layout auto: d1 (Dense) is "));
  assert_non_null(strstr(r.out, "runner-up for d1: "));
  inspect(&r, plan, "--explain", "d2");   /* a layer name */
  assert_non_null(strstr(r.out, "--layout auto: d2 (Dense) is "));
  free(plan);
}

/* A model with no hand layout: the small CNN. */
static void test_no_hand_layout(void **state) {
  (void)state;
  char *plan = e2e_path("auto_cnn.plan"), *lay = e2e_path("auto_cnn_layout.json");
  e2e_result r;
  compile(&r, "small_cnn", plan, "--mesh", "2x4", "--layout", "auto", "--write-layout", lay, NULL);
  if (r.status) fprintf(stderr, "%s", r.err);
  assert_int_equal(r.status, 0);
  /* DataParallel over all 8 devices is no LayoutMap: then no file, and a note */
  bool flat = strstr(r.err, "no layout file is written") != NULL;
  assert_true(flat != e2e_exists(lay));
  check_predict("small_cnn", plan);
  free(plan), free(lay);
}

/* Three Adam epochs of |plan| on the MNIST training data: the losses. */
static void fit_losses(const char *plan, double *loss) {
  char *x = e2e_src("examples/mnist_mlp/train_x.npy"), *y = e2e_src("examples/mnist_mlp/train_y.npy");
  e2e_result r;
  e2e_kdc(&r, "run", plan, "--fit", "--x", x, "--y", y, "--epochs", "3", "--batch-size", "16", NULL);
  if (r.status) fprintf(stderr, "%s", r.err);
  assert_int_equal(r.status, 0);
  const char *p = r.out;
  for (int e = 0; e < 3; e++) {
    p = strstr(p, "loss: ");
    assert_non_null(p);
    loss[e] = strtod(p + 6, NULL);
    p += 6;
  }
  free(x), free(y);
}

static void test_training_and_memory(void **state) {
  (void)state;
  char *one = e2e_path("auto_t1.plan"), *plan = e2e_path("auto_t.plan");
  char *lim = e2e_path("auto_tl.plan"), *none = e2e_path("auto_none.plan");
  e2e_result r;
  compile(&r, "mnist_mlp", one, "--loss", "categorical_crossentropy", "--optimizer", "adam", NULL);
  assert_int_equal(r.status, 0);
  compile(&r, "mnist_mlp", plan, "--loss", "categorical_crossentropy", "--optimizer", "adam",
          "--mesh", "2x4", "--layout", "auto", NULL);
  if (r.status) fprintf(stderr, "%s", r.err);
  assert_int_equal(r.status, 0);
  double l1[3], l2[3];
  fit_losses(one, l1);
  fit_losses(plan, l2);
  assert_true(l1[2] < l1[0]);
  for (int e = 0; e < 3; e++)
    if (fabs(l1[e] - l2[e]) > 1e-5 * fabs(l1[e]) + 1e-6)
      fail_msg("epoch %d: loss %.7f on 1 device, %.7f under --layout auto on 2x4", e + 1, l1[e], l2[e]);

  /* DataParallel's peak, from the metadata; a limit one byte under it */
  inspect(&r, plan, NULL, NULL);
  const char *dp = strstr(r.out, "\"data_parallel\": {");
  assert_non_null(dp);
  double dp_peak = num_after(dp, "\"peak_bytes\": ");
  assert_true(dp_peak > 0);
  char limit[32];
  snprintf(limit, sizeof limit, "%.0f", dp_peak - 1);
  compile(&r, "mnist_mlp", lim, "--loss", "categorical_crossentropy", "--optimizer", "adam",
          "--mesh", "2x4", "--layout", "auto", "--memory-per-device", limit, NULL);
  if (r.status) fprintf(stderr, "%s", r.err);
  assert_int_equal(r.status, 0);
  assert_non_null(strstr(r.err, "--layout auto: DataParallel needs "));
  assert_non_null(strstr(r.err, " fits in "));
  inspect(&r, lim, NULL, NULL);
  double peak = num_after(strstr(r.out, "memory per device"), "= ");
  assert_true(peak > 0 && peak <= dp_peak - 1);

  /* no layout fits: one located line, exit 2, no plan */
  compile(&r, "mnist_mlp", none, "--loss", "categorical_crossentropy", "--optimizer", "adam",
          "--mesh", "2x4", "--layout", "auto", "--memory-per-device", "1KiB", NULL);
  assert_int_equal(r.status, 2);
  assert_int_equal(e2e_lines(r.err), 1);
  assert_non_null(strstr(r.err, "kdc: error: --memory-per-device 1024: no layout of the "));
  assert_non_null(strstr(r.err, "the smallest peak found is "));
  assert_false(e2e_exists(none));
  free(one), free(plan), free(lim), free(none);
}

static void test_flag_errors(void **state) {
  (void)state;
  char *plan = e2e_path("auto_err.plan");
  static const struct { const char *a[6]; const char *msg; } cases[] = {
      {{"--mesh", "2x4", "--memory-per-device", "1GB", NULL}, "--memory-per-device needs --layout auto"},
      {{"--mesh", "2x4", "--write-layout", "x.json", NULL}, "--write-layout needs --layout auto"},
      {{"--mesh", "2x4", "--layout", "auto", "--memory-per-device", "12XB"}, "expected a size in bytes"},
      {{"--mesh", "2x4", "--layout", "auto", "--objective", "speed"}, "--objective \"speed\": expected time or memory"},
      {{"--layout", "auto", NULL}, "--layout needs --mesh"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    e2e_result r;
    compile(&r, "mnist_mlp", plan, cases[i].a[0], cases[i].a[1], cases[i].a[2], cases[i].a[3],
            cases[i].a[4], cases[i].a[5], NULL);
    if (!strstr(r.err, cases[i].msg)) fprintf(stderr, "case %zu: %s", i, r.err);
    assert_int_equal(r.status, 2);
    assert_int_equal(e2e_lines(r.err), 1);
    assert_non_null(strstr(r.err, cases[i].msg));
    assert_false(e2e_exists(plan));
  }
  /* a model no layout compiles: the model's own error, as without auto */
  e2e_result r;
  compile(&r, "layer_zoo2", plan, "--mesh", "2x4", "--layout", "auto", "--loss", "mse", NULL);
  assert_int_equal(r.status, 2);
  assert_int_equal(e2e_lines(r.err), 1);
  assert_non_null(strstr(r.err, "RandomRotation in a training step is not supported"));
  assert_false(e2e_exists(plan));
  free(plan);
}

/* --machine: a machine whose collectives cost a second each makes the MLP
 * data parallel (no collective in predict); bad files are located errors. */
static void test_machine(void **state) {
  (void)state;
  char *plan = e2e_path("auto_machine.plan");
  char *slow = e2e_write_text("slow_links.json", "{\"name\": \"slow links\", \"axes\": {\"*\": "
                              "{\"latency_s\": 1, \"bytes_per_s\": 1e3}}}\n");
  e2e_result r;
  char *procs = e2e_write_text("procs_machine.json", PROCS_MACHINE);
  compile(&r, "mnist_mlp", plan, "--mesh", "2x4", "--layout", "auto", "--machine", procs, NULL);
  assert_int_equal(r.status, 0);
  assert_null(strstr(r.err, "chose data_parallel "));  /* processes: d1 split */
  free(procs);
  compile(&r, "mnist_mlp", plan, "--mesh", "2x4", "--layout", "auto", "--machine", slow, NULL);
  if (r.status) fprintf(stderr, "%s", r.err);
  assert_int_equal(r.status, 0);
  assert_non_null(strstr(r.err, "chose data_parallel "));
  inspect(&r, plan, NULL, NULL);
  assert_non_null(strstr(r.out, "\"machine\": \"slow links\""));
  /* the virtual mesh written out: the MNIST training step on mesh 8 has
   * a layout (d2's rows) predicted under 1% faster than DataParallel, which
   * the model cannot tell apart (api/auto_layout.c, DP_MARGIN): DataParallel
   * is chosen and the layout is the runner-up */
  char *virt = e2e_write_text("virtual_machine.json",
                              "{\"name\": \"virtual\", \"gemm_flops_per_s\": 5.5e10, "
                              "\"bytes_per_s\": 2.4e10, \"step_s\": 1.5e-6, \"gemm_m0\": 12, "
                              "\"gemm_n0\": 21.5, \"lanes\": 2, \"axes\": {\"*\": "
                              "{\"latency_s\": 1e-6, \"bytes_per_s\": 2.7e9}}}\n");
  compile(&r, "mnist_mlp", plan, "--mesh", "8", "--layout", "auto", "--machine", virt, "--batch",
          "128", "--loss", "categorical_crossentropy", NULL);
  if (r.status) fprintf(stderr, "%s", r.err);
  assert_int_equal(r.status, 0);
  assert_non_null(strstr(r.err, "chose data_parallel "));
  double dp = num_after(strstr(r.err, "chose data_parallel "), "predicted step ");
  double up = num_after(strstr(r.err, "runner-up "), "predicted step ");
  assert_true(up > 0 && up < dp && up > dp * 0.99);
  free(virt);
  static const struct { const char *text, *msg; } bad[] = {
      {"{\"gemm_flops_per_s\": -1}", "bad_machine.json: gemm_flops_per_s: expected a positive number"},
      {"{\"gemm_n0\": -1}", "bad_machine.json: gemm_n0: expected a positive number"},
      {"{\"flops\": 1}", "bad_machine.json: flops: unknown key"},
      {"{\"axes\": {\"model\": {\"latency\": 1}}}", "axes[\"model\"].latency: unknown key"},
      {"[1", "bad_machine.json: --machine: not a JSON object"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char *m = e2e_write_text("bad_machine.json", bad[i].text);
    compile(&r, "mnist_mlp", plan, "--mesh", "2x4", "--layout", "auto", "--machine", m, NULL);
    if (!strstr(r.err, bad[i].msg)) fprintf(stderr, "case %zu: %s", i, r.err);
    assert_int_equal(r.status, 2);
    assert_int_equal(e2e_lines(r.err), 1);
    assert_non_null(strstr(r.err, bad[i].msg));
    free(m);
  }
  free(plan), free(slow);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_predict_and_written_layout),
      cmocka_unit_test(test_explain),
      cmocka_unit_test(test_no_hand_layout),
      cmocka_unit_test(test_training_and_memory),
      cmocka_unit_test(test_flag_errors),
      cmocka_unit_test(test_machine),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
