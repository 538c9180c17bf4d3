/*
 * Multi-output training end to end (docs/training.md "Several outputs"):
 * tests/e2e/data/two_heads.json (Dense trunk, heads "reg" linear and "cls"
 * softmax), random-initialised with a fixed seed.
 *   - `kdc compile --loss mse,categorical_crossentropy` on meshes 1 and 2x4
 *     (data parallel) train the same run: batch and epoch losses and the
 *     final state within 1e-5 relative (reduction order differs).
 *   - compile_config loss/loss_weights as a dict and as a list describe the
 *     same training: identical runs; loss_weights change the run.
 *   - `kdc run --fit --y NAME=path` equals positional --y.
 *   - bad input: unknown output names in --loss, the compile_config and
 *     --y, a wrong number of --y: one-line errors, exit 2.
 *   - per-output losses (Keras 3 "<output>_loss", History and progress):
 *     `kdc run --fit --history` on meshes 1 and 2x4 against TensorFlow.js
 *     (tests/reference/train.js two_heads: tfjs' loss, reg_loss, cls_loss;
 *     the val_ values computed there after each epoch) within 1e-5
 *     relative; the progress line and --evaluate print them sorted like
 *     Keras.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/io.h"
#include "e2e_fit_util.h"
#include "e2e_util.h"

enum { ROWS = 24, IN = 6, R = 2, C = 3 };

static float xs[ROWS * IN], yr[ROWS * R], yc[ROWS * C];
static char *x_npy, *yr_npy, *yc_npy, *model;

static void setup_data(void) {
  if (x_npy) return;
  uint64_t s = 12345;
  for (int i = 0; i < ROWS * IN; i++) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    xs[i] = (float)((double)(s >> 11) / 9007199254740992.0 * 2 - 1);
  }
  for (int i = 0; i < ROWS * R; i++) yr[i] = xs[i] * 0.5f - xs[i + 1];
  for (int b = 0; b < ROWS; b++)
    for (int c = 0; c < C; c++) yc[b * C + c] = c == (b * 7) % C ? 1.0f : 0.0f;
  x_npy = e2e_path("x.npy"), yr_npy = e2e_path("yr.npy"), yc_npy = e2e_path("yc.npy");
  int64_t xd[2] = {ROWS, IN}, rd[2] = {ROWS, R}, cd[2] = {ROWS, C};
  assert_null(kdc_npy_write(x_npy, KDC_IO_DTYPE_F32, 2, xd, xs));
  assert_null(kdc_npy_write(yr_npy, KDC_IO_DTYPE_F32, 2, rd, yr));
  assert_null(kdc_npy_write(yc_npy, KDC_IO_DTYPE_F32, 2, cd, yc));
  model = e2e_src("tests/e2e/data/two_heads.json");
}

/* `kdc compile MODEL --random-init --seed 3 --batch 8 [--loss LOSS] [--mesh MESH] -o NAME` */
static char *compile(const char *name, const char *m, const char *loss, const char *mesh,
                     e2e_result *r) {
  char *plan = e2e_path(name);
  const char *argv[16] = {"compile", m, "--random-init", "--seed", "3", "--batch", "8",
                          "--optimizer", "adam", "-o", plan};
  int n = 11;
  if (loss) argv[n++] = "--loss", argv[n++] = loss;
  if (mesh) argv[n++] = "--mesh", argv[n++] = mesh;
  argv[n] = NULL;
  e2e_kdcv(r, argv);
  return plan;
}

static char *compile_ok(const char *name, const char *m, const char *loss, const char *mesh) {
  e2e_result r;
  char *plan = compile(name, m, loss, mesh, &r);
  if (r.status) fprintf(stderr, "%s: %s", name, r.err);
  assert_int_equal(r.status, 0);
  return plan;
}

static void fit(const char *plan, e2e_run *r) {
  const void *arrays[3] = {xs, yr, yc};
  e2e_fit(plan, arrays, ROWS, 0.0, 0, 2, NULL, NULL, r);
  assert_true(r->h.loss[0] > 0 && isfinite(r->h.loss[1]));
}

/* |model| with "compile_config": {...|cc|...} spliced in front. */
static char *with_config(const char *name, const char *cc) {
  char members[1024];
  snprintf(members, sizeof members, "\"optimizer\": \"adam\", %s", cc);
  return e2e_with_compile_config(model, name, members);
}

static void test_meshes(void **s) {
  (void)s;
  setup_data();
  char *p1 = compile_ok("m1.plan", model, "mse,categorical_crossentropy", NULL);
  char *p8 = compile_ok("m8.plan", model, "mse,categorical_crossentropy", "2x4");
  e2e_run a, b;
  fit(p1, &a);
  fit(p8, &b);
  e2e_same_run(&b, &a, 0, 1e-5, "2x4 vs 1 device");
  e2e_run_free(&a), e2e_run_free(&b);
  free(p1), free(p8);
}

static void test_compile_config(void **s) {
  (void)s;
  setup_data();
  char *md = with_config("cc_dict.json",
                         "\"loss\": {\"cls\": {\"class_name\": \"CategoricalCrossentropy\", "
                         "\"config\": {\"from_logits\": false}}, \"reg\": \"mse\"}, "
                         "\"loss_weights\": {\"reg\": 1.0, \"cls\": 0.5}");
  char *ml = with_config("cc_list.json", "\"loss\": [\"mean_squared_error\", "
                         "\"categorical_crossentropy\"], \"loss_weights\": [1.0, 0.5]");
  char *pd = compile_ok("cc_dict.plan", md, NULL, NULL), *pl = compile_ok("cc_list.plan", ml, NULL, NULL);
  char *pu = compile_ok("cc_unweighted.plan", model, "mse,categorical_crossentropy", NULL);
  e2e_run a, b, c;
  fit(pd, &a);
  fit(pl, &b);
  fit(pu, &c);
  e2e_same_run(&a, &b, 0, 0.0, "dict vs list compile_config");
  assert_true(e2e_rel(a.h.batch_loss[0], c.h.batch_loss[0]) > 1e-3); /* weights matter */
  e2e_run_free(&a), e2e_run_free(&b), e2e_run_free(&c);
  /* unknown output in the compile_config: located one-line error */
  char *bad = with_config("cc_bad.json", "\"loss\": {\"rgr\": \"mse\"}");
  e2e_result r;
  char *pb = compile("cc_bad.plan", bad, NULL, NULL, &r);
  assert_int_equal(r.status, 2);
  assert_int_equal(e2e_lines(r.err), 1);
  assert_non_null(strstr(r.err, "compile_config.loss[\"rgr\"]"));
  assert_false(e2e_exists(pb));
  free(md), free(ml), free(pd), free(pl), free(pu), free(bad), free(pb);
}

static void test_cli(void **s) {
  (void)s;
  setup_data();
  char *p = compile_ok("cli.plan", model, "reg=mse,cls=categorical_crossentropy", NULL);
  char *h1 = e2e_path("h1.json"), *h2 = e2e_path("h2.json");
  e2e_result r;
  e2e_kdc(&r, "run", p, "--fit", "--x", x_npy, "--y", yr_npy, "--y", yc_npy, "--epochs", "2",
          "--history", h1, "--quiet", NULL);
  if (r.status) fprintf(stderr, "%s", r.err);
  assert_int_equal(r.status, 0);
  char cls[512], reg[512];
  snprintf(cls, sizeof cls, "cls=%s", yc_npy);
  snprintf(reg, sizeof reg, "reg=%s", yr_npy);
  e2e_kdc(&r, "run", p, "--fit", "--x", x_npy, "--y", cls, "--y", reg, "--epochs", "2",
          "--history", h2, "--quiet", NULL);
  assert_int_equal(r.status, 0);
  void *a = NULL, *b = NULL;
  size_t na = 0, nb = 0;
  assert_null(kdc_file_read_all(h1, &a, &na));
  assert_null(kdc_file_read_all(h2, &b, &nb));
  assert_int_equal(na, nb);
  assert_memory_equal(a, b, na); /* named --y binds the same arrays */
  free(a), free(b);
  e2e_kdc(&r, "run", p, "--evaluate", "--x", x_npy, "--y", yr_npy, "--y", yc_npy, NULL);
  assert_int_equal(r.status, 0);
  assert_non_null(strstr(r.out, "loss: "));
  /* errors */
  e2e_kdc(&r, "run", p, "--fit", "--x", x_npy, "--y", yr_npy, "--quiet", NULL);
  assert_int_equal(r.status, 2);
  assert_int_equal(e2e_lines(r.err), 1);
  assert_non_null(strstr(r.err, "the plan trains 2 outputs but 1 --y were given"));
  e2e_kdc(&r, "run", p, "--fit", "--x", x_npy, "--y", reg, "--y", "rgr=y.npy", "--quiet", NULL);
  assert_int_equal(r.status, 2);
  assert_int_equal(e2e_lines(r.err), 1);
  assert_non_null(strstr(r.err, "rgr=y.npy"));
  char *pb = compile("bad.plan", model, "nope=mse", NULL, &r);
  assert_int_equal(r.status, 2);
  assert_int_equal(e2e_lines(r.err), 1);
  assert_non_null(strstr(r.err, "--loss nope=...: the model has no output \"nope\""));
  assert_false(e2e_exists(pb));
  free(pb);
  pb = compile("bad.plan", model, "mse,mse,mse", NULL, &r);
  assert_int_equal(r.status, 2);
  assert_int_equal(e2e_lines(r.err), 1);
  assert_non_null(strstr(r.err, "3 entries but the model has 2 outputs"));
  free(pb), free(p), free(h1), free(h2);
}

/* The TF.js reference run (tests/e2e/data/two_heads_train, see the header). */
static void tfjs_case(const char *mesh) {
  char *dir = e2e_src("tests/e2e/data/two_heads_train");
  char w[512], x[512], yr_p[512], yc_p[512], ref[512];
  snprintf(w, sizeof w, "%s/weights.safetensors", dir);
  snprintf(x, sizeof x, "%s/x.npy", dir);
  snprintf(yr_p, sizeof yr_p, "%s/yr.npy", dir);
  snprintf(yc_p, sizeof yc_p, "%s/yc.npy", dir);
  snprintf(ref, sizeof ref, "%s/history.json", dir);
  char *m = e2e_src("tests/e2e/data/two_heads.json"), *plan = e2e_path("tfjs.plan"),
       *hist = e2e_path("tfjs_history.json");
  e2e_result r;
  const char *argv[24] = {"compile", m, "--weights", w, "--batch", "8", "--loss",
                          "mse,categorical_crossentropy", "--optimizer", "sgd",
                          "--learning-rate", "0.1", "-o", plan};
  int n = 14;
  if (mesh) argv[n++] = "--mesh", argv[n++] = mesh;
  argv[n] = NULL;
  e2e_kdcv(&r, argv);
  if (r.status) fprintf(stderr, "%s", r.err);
  assert_int_equal(r.status, 0);
  e2e_kdc(&r, "run", plan, "--fit", "--x", x, "--y", yr_p, "--y", yc_p, "--epochs", "3",
          "--batch-size", "8", "--validation-split", "0.25", "--history", hist, NULL);
  if (r.status) fprintf(stderr, "%s", r.err);
  assert_int_equal(r.status, 0);
  /* Keras' progress: the logs sorted by name, val_ after the training ones */
  const char *line = strstr(r.out, "Epoch 3/3");
  assert_non_null(line);
  const char *c = strstr(line, " - cls_loss: "), *l = strstr(line, " - loss: "),
             *g = strstr(line, " - reg_loss: "), *vc = strstr(line, " - val_cls_loss: "),
             *vl = strstr(line, " - val_loss: "), *vg = strstr(line, " - val_reg_loss: ");
  assert_true(c && l && g && vc && vl && vg);
  assert_true(c < l && l < g && g < vc && vc < vl && vl < vg);
  void *a = NULL, *b = NULL;
  size_t na = 0, nb = 0;
  assert_null(kdc_file_read_all(hist, &a, &na));
  assert_null(kdc_file_read_all(ref, &b, &nb));
  static const char *const keys[] = {"loss", "reg_loss", "cls_loss",
                                     "val_loss", "val_reg_loss", "val_cls_loss"};
  double got[8], want[8], worst = 0;
  for (int k = 0; k < 6; k++) {
    int ng = e2e_json_numbers(a, keys[k], got, 8), nw = e2e_json_numbers(b, keys[k], want, 8);
    assert_int_equal(nw, 3);
    assert_int_equal(ng, 3);
    for (int e = 0; e < 3; e++) worst = fmax(worst, fabs(got[e] - want[e]) / fabs(want[e]));
  }
  fprintf(stderr, "two_heads %s: history vs TF.js: %.3g relative\n", mesh ? mesh : "1",
          worst);
  assert_true(worst <= 1e-5);
  /* the total is the sum of the per-output losses (weights 1) */
  double tot[3], reg_l[3], cls_l[3];
  assert_int_equal(e2e_json_numbers(a, "loss", tot, 3), 3);
  assert_int_equal(e2e_json_numbers(a, "reg_loss", reg_l, 3), 3);
  assert_int_equal(e2e_json_numbers(a, "cls_loss", cls_l, 3), 3);
  for (int e = 0; e < 3; e++) assert_true(fabs(tot[e] - (reg_l[e] + cls_l[e])) <= 1e-6 * tot[e]);
  /* evaluate: the same names, sorted */
  e2e_kdc(&r, "run", plan, "--evaluate", "--x", x, "--y", yr_p, "--y", yc_p, NULL);
  assert_int_equal(r.status, 0);
  assert_true(!strncmp(r.out, "cls_loss: ", 10));
  assert_non_null(strstr(r.out, " - loss: "));
  assert_non_null(strstr(r.out, " - reg_loss: "));
  free(a), free(b), free(dir), free(m), free(plan), free(hist);
}

static void test_tfjs_reference(void **s) {
  (void)s;
  tfjs_case(NULL);
  tfjs_case("2x4");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_meshes),
      cmocka_unit_test(test_compile_config),
      cmocka_unit_test(test_cli),
      cmocka_unit_test(test_tfjs_reference),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
