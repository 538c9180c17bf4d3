/*
 * Train, then predict (issue 22): the digits-style flow through the kdc
 * binary, on a Keras 3 JSON MLP (tests/e2e/data/digits_mlp.json: Dense 32
 * relu, Dropout 0.2, Dense 10 softmax) and 8x8 "digits" made here (ten
 * fixed prototypes plus noise, 320 rows: 256 to train, 64 held back).
 *
 *   - fit_then_predict: `kdc run train.plan --fit ... --save-weights W
 *     --predict XT --output P1` (one command trains and predicts), then
 *     `kdc run train.plan --input XT --initial-weights W --output P2`:
 *     P2 == P1 bitwise; `kdc compile model --weights W` (a predict plan:
 *     the 9 optimizer tensors are skipped with one note) predicts P3 ==
 *     the MLP computed here in double from W's tensors (atol 1e-5, rtol
 *     1e-4), and the held-out accuracy is >= 0.9;
 *   - optimizer_state: `kdc compile --weights W --loss ... --optimizer adam`
 *     restores adam's state from W: 2 more epochs of that plan save a
 *     checkpoint byte-identical to resuming train.plan with
 *     --initial-weights W, and different from the same weights with the
 *     optimizer state zeroed (so the restored state is used); another
 *     optimizer skips it with a note;
 *   - errors: --initial-weights on a predict plan, --predict without
 *     --output: exit 2, one line, no output file.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/io.h"
#include "e2e/e2e_util.h"

enum { ROWS = 320, TRAIN = 256, TEST = 64, PIX = 64, HID = 32, CLS = 10 };

static char *model, *x_path, *y_path, *xt_path, *train_plan, *ckpt;
static float xs[ROWS][PIX];
static int64_t ys[ROWS];

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static double uniform(void) {  /* xorshift64*, [0, 1) */
  rng ^= rng >> 12, rng ^= rng << 25, rng ^= rng >> 27;
  return (double)((rng * 0x2545f4914f6cdd1dull) >> 11) / 9007199254740992.0;
}

static void write_npy(const char *path, kdc_io_dtype dt, int rank, const int64_t *dims,
                      const void *data) {
  kdc_status st = kdc_npy_write(path, dt, rank, dims, data);
  if (st) fail_msg("%s", kdc_status_message(st));
}

static int setup(void **state) {
  (void)state;
  double proto[CLS][PIX];
  for (int c = 0; c < CLS; c++)
    for (int p = 0; p < PIX; p++) proto[c][p] = 16 * uniform();
  for (int r = 0; r < ROWS; r++) {
    ys[r] = (int64_t)(uniform() * CLS);
    for (int p = 0; p < PIX; p++) {
      double noise = 0;  /* ~N(0, 3^2): a sum of 12 uniforms */
      for (int k = 0; k < 12; k++) noise += uniform() - 0.5;
      double v = proto[ys[r]][p] + 3 * noise;
      xs[r][p] = (float)((v < 0 ? 0 : v > 16 ? 16 : v) / 16);
    }
  }
  model = e2e_src("tests/e2e/data/digits_mlp.json");
  x_path = e2e_path("x.npy"), y_path = e2e_path("y.npy"), xt_path = e2e_path("xt.npy");
  write_npy(x_path, KDC_IO_DTYPE_F32, 2, (int64_t[]){TRAIN, PIX}, xs);
  write_npy(y_path, KDC_IO_DTYPE_I64, 1, (int64_t[]){TRAIN}, ys);
  write_npy(xt_path, KDC_IO_DTYPE_F32, 2, (int64_t[]){TEST, PIX}, xs[TRAIN]);
  train_plan = e2e_path("train.plan");
  ckpt = e2e_path("w.safetensors");
  e2e_result r;
  e2e_kdc(&r, "compile", model, "-o", train_plan, "--loss", "sparse_categorical_crossentropy",
          "--optimizer", "adam", "--learning-rate", "0.01", "--batch", "32", "--seed", "3", NULL);
  if (r.status != 0) fail_msg("compile: %s", r.err);
  return 0;
}

static const float *tensor(const kdc_safetensors *sf, const char *name, size_t n) {
  const kdc_st_tensor *t = kdc_safetensors_find(sf, name);
  if (!t) fail_msg("checkpoint has no %s", name);
  assert_int_equal(t->dtype, KDC_IO_DTYPE_F32);
  assert_int_equal(t->nbytes, n * sizeof(float));
  float *copy = malloc(t->nbytes);
  memcpy(copy, t->data, t->nbytes);
  return copy;
}

/* softmax(relu(x W1 + b1) W2 + b2) in double, from the checkpoint's tensors. */
static void mlp(const kdc_safetensors *sf, const float *x, int rows, double *out) {
  const float *w1 = tensor(sf, "digits_mlp/hidden/kernel", PIX * HID);
  const float *b1 = tensor(sf, "digits_mlp/hidden/bias", HID);
  const float *w2 = tensor(sf, "digits_mlp/digit/kernel", HID * CLS);
  const float *b2 = tensor(sf, "digits_mlp/digit/bias", CLS);
  for (int r = 0; r < rows; r++) {
    double h[HID], z[CLS], mx = -INFINITY, sum = 0;
    for (int j = 0; j < HID; j++) {
      h[j] = b1[j];
      for (int p = 0; p < PIX; p++) h[j] += (double)x[r * PIX + p] * w1[p * HID + j];
      if (h[j] < 0) h[j] = 0;
    }
    for (int c = 0; c < CLS; c++) {
      z[c] = b2[c];
      for (int j = 0; j < HID; j++) z[c] += h[j] * w2[j * CLS + c];
      if (z[c] > mx) mx = z[c];
    }
    for (int c = 0; c < CLS; c++) sum += z[c] = exp(z[c] - mx);
    for (int c = 0; c < CLS; c++) out[r * CLS + c] = z[c] / sum;
  }
  free((void *)w1), free((void *)w2), free((void *)b1), free((void *)b2);
}

static void read_npy(const char *path, kdc_npy_array *a) {
  kdc_status st = kdc_npy_read(path, a);
  if (st) fail_msg("%s", kdc_status_message(st));
}

static void test_fit_then_predict(void **state) {
  (void)state;
  char *p1 = e2e_path("p1.npy"), *p2 = e2e_path("p2.npy"), *p3 = e2e_path("p3.npy");
  char *pplan = e2e_path("predict.plan");
  e2e_result r;
  e2e_kdc(&r, "run", train_plan, "--fit", "--x", x_path, "--y", y_path, "--epochs", "15",
          "--shuffle", "--seed", "7", "--validation-split", "0.125", "--save-weights", ckpt,
          "--predict", xt_path, "--output", p1, "--quiet", NULL);
  if (r.status != 0) fail_msg("fit: %s", r.err);
  e2e_kdc(&r, "run", train_plan, "--input", xt_path, "--initial-weights", ckpt, "--output", p2,
          NULL);
  if (r.status != 0) fail_msg("predict with the checkpoint: %s", r.err);
  kdc_npy_array a1, a2, a3;
  read_npy(p1, &a1);
  read_npy(p2, &a2);
  assert_int_equal(a1.nbytes, (size_t)TEST * CLS * 4);
  assert_int_equal(a1.nbytes, a2.nbytes);
  assert_memory_equal(a1.data, a2.data, a1.nbytes);  /* same plan, same weights */

  e2e_kdc(&r, "compile", model, "--weights", ckpt, "-o", pplan, "--batch", "16", NULL);
  if (r.status != 0) fail_msg("compile --weights checkpoint: %s", r.err);
  assert_int_equal(e2e_lines(r.err), 1);  /* the note, one line */
  assert_non_null(strstr(r.err, "kdc: note: "));
  assert_non_null(strstr(r.err, "9 optimizer tensors (adam/...) skipped: the plan does not train"));
  e2e_kdc(&r, "run", pplan, "--input", xt_path, "--output", p3, NULL);
  if (r.status != 0) fail_msg("predict plan: %s", r.err);
  read_npy(p3, &a3);
  kdc_safetensors *sf = NULL;
  assert_null(kdc_safetensors_open(ckpt, &sf));
  double want[TEST * CLS];
  mlp(sf, &xs[TRAIN][0], TEST, want);
  kdc_safetensors_close(sf);
  const float *got = a3.data;
  int correct = 0;
  for (int i = 0; i < TEST * CLS; i++)
    if (fabs(got[i] - want[i]) > 1e-5 + 1e-4 * fabs(want[i]))
      fail_msg("prediction %d: kdc %.8g, the MLP from the checkpoint %.8g", i, got[i], want[i]);
  for (int i = 0; i < TEST; i++) {
    int best = 0;
    for (int c = 1; c < CLS; c++) best = got[i * CLS + c] > got[i * CLS + best] ? c : best;
    correct += best == ys[TRAIN + i];
  }
  printf("held-out accuracy %d/%d\n", correct, TEST);
  assert_true(correct >= TEST * 9 / 10);
  assert_true(e2e_f32_compare(a1.data, a3.data, TEST * CLS, 1e-6, 1e-5) <= 1);
  kdc_npy_free(&a1), kdc_npy_free(&a2), kdc_npy_free(&a3);
  free(p1), free(p2), free(p3), free(pplan);
}

static char *read_all(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  if (!f) fail_msg("cannot open %s", path);
  fseek(f, 0, SEEK_END);
  *n = (size_t)ftell(f);
  fseek(f, 0, SEEK_SET);
  char *b = malloc(*n + 1);
  assert_int_equal(fread(b, 1, *n, f), *n);
  fclose(f);
  return b;
}

/* `--fit` 2 epochs of |plan| (+ --initial-weights |init|) saving |out|. */
static void fit2(const char *plan, const char *init, const char *out) {
  e2e_result r;
  const char *args[] = {"run", plan, "--fit", "--x", x_path, "--y", y_path, "--epochs", "2",
                        "--shuffle", "--seed", "9", "--quiet", "--save-weights", out,
                        init ? "--initial-weights" : NULL, init, NULL};
  e2e_kdcv(&r, args);
  if (r.status != 0) fail_msg("fit %s: %s", plan, r.err);
}

static void test_optimizer_state(void **state) {
  (void)state;
  char *resumed = e2e_path("resumed.plan"), *zeroed = e2e_path("zeroed.plan");
  char *a = e2e_path("a.st"), *b = e2e_path("b.st"), *c = e2e_path("c.st");
  char *weights_only = e2e_path("weights_only.safetensors");
  e2e_result r;
  if (!e2e_exists(ckpt)) fail_msg("fit_then_predict did not leave %s", ckpt);
  e2e_kdc(&r, "compile", model, "--weights", ckpt, "-o", resumed, "--loss",
          "sparse_categorical_crossentropy", "--optimizer", "adam", "--learning-rate", "0.01",
          "--batch", "32", "--seed", "3", NULL);
  if (r.status != 0) fail_msg("compile --weights checkpoint --loss: %s", r.err);
  assert_string_equal(r.err, "");  /* restored: no note */
  /* the same weights without the optimizer state (it starts at zero) */
  kdc_safetensors *sf = NULL;
  assert_null(kdc_safetensors_open(ckpt, &sf));
  kdc_st_tensor ts[8];
  size_t n = 0;
  for (size_t i = 0; i < kdc_safetensors_count(sf); i++)
    if (strncmp(kdc_safetensors_get(sf, i)->name, "adam/", 5)) ts[n++] = *kdc_safetensors_get(sf, i);
  assert_int_equal(n, 4);
  assert_null(kdc_safetensors_write(weights_only, ts, n, NULL));
  kdc_safetensors_close(sf);
  e2e_kdc(&r, "compile", model, "--weights", weights_only, "-o", zeroed, "--loss",
          "sparse_categorical_crossentropy", "--optimizer", "adam", "--learning-rate", "0.01",
          "--batch", "32", "--seed", "3", NULL);
  if (r.status != 0) fail_msg("compile weights only: %s", r.err);

  fit2(train_plan, ckpt, a);  /* resume with --initial-weights */
  fit2(resumed, NULL, b);     /* the state the compile restored */
  fit2(zeroed, NULL, c);      /* the weights, adam's state at zero */
  size_t na, nb, nc;
  char *da = read_all(a, &na), *db = read_all(b, &nb), *dc = read_all(c, &nc);
  assert_int_equal(na, nb);
  assert_memory_equal(da, db, na);
  assert_int_equal(na, nc);
  assert_true(memcmp(da, dc, na) != 0);
  free(da), free(db), free(dc);

  /* another optimizer: skipped with a note, and it trains */
  e2e_kdc(&r, "compile", model, "--weights", ckpt, "-o", zeroed, "--loss",
          "sparse_categorical_crossentropy", "--optimizer", "rmsprop", "--batch", "32", NULL);
  if (r.status != 0) fail_msg("compile rmsprop: %s", r.err);
  assert_int_equal(e2e_lines(r.err), 1);
  assert_non_null(strstr(r.err, "kdc: note: "));
  assert_non_null(strstr(r.err, "9 optimizer tensors (adam/...) skipped: the plan trains with rmsprop"));
  fit2(zeroed, NULL, c);
  free(resumed), free(zeroed), free(a), free(b), free(c), free(weights_only);
}

static void test_errors(void **state) {
  (void)state;
  char *pplan = e2e_path("predict.plan"), *out = e2e_path("never.npy");
  e2e_result r;
  e2e_kdc(&r, "run", pplan, "--input", xt_path, "--initial-weights", ckpt, "--output", out, NULL);
  assert_int_equal(r.status, 2);
  assert_int_equal(e2e_lines(r.err), 1);
  assert_non_null(strstr(r.err, "--initial-weights needs a training plan"));
  assert_false(e2e_exists(out));
  e2e_kdc(&r, "run", train_plan, "--fit", "--x", x_path, "--y", y_path, "--predict", xt_path,
          NULL);
  assert_int_equal(r.status, 2);
  assert_int_equal(e2e_lines(r.err), 1);
  assert_non_null(strstr(r.err, "--predict X.npy (per model input) and --output Y.npy"));
  e2e_kdc(&r, "run", train_plan, "--fit", "--x", x_path, "--y", y_path, "--predict", x_path,
          "--predict", xt_path, "--output", out, "--quiet", NULL);
  assert_int_equal(r.status, 2);
  assert_non_null(strstr(r.err, "the model has 1 inputs but 2 --predict were given"));
  assert_false(e2e_exists(out));
  free(pplan), free(out);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_fit_then_predict),
      cmocka_unit_test(test_optimizer_state),
      cmocka_unit_test(test_errors),
  };
  return cmocka_run_group_tests(tests, setup, NULL);
}
