/*
 * The public C API (include/kdc/kdc.h) through libkdc.so, the way a client
 * links it (only the exported symbols; docs/api.md):
 *   - versions: kdc_api_version() is the header's KDC_API_VERSION;
 *   - bad input is a status with the CLI's located message, never a crash:
 *     broken model text (line and column), a layout naming no mesh axis,
 *     options not made by _init, NULL pointers, wrong arrays to predict,
 *     fit, get/set (dtype, rank, dims, counts, unknown names);
 *   - the examples/mnist_mlp MLP (Dropout rate 0) compiled from TEXT on a
 *     2x4 mesh with the guide's layout (also text), batch 16, SGD 0.1:
 *     predict on 37 rows (2 full batches in place + a padded one) = the
 *     model's TF.js outputs (expected.npy, 1e-5 + 1e-4 |ref|); fit 3 epochs
 *     = the Keras 3 reference history (train_sgd_history.json, every batch
 *     and epoch loss within 1e-4 relative) and final weights
 *     (train_sgd_final.safetensors, 1e-5 + 1e-4 |ref|) read back with
 *     kdc_trainer_get; set then get is exact; evaluate gives a finite loss
 *     that one more step changes; the JSON report parses and lists the
 *     plan's collectives; a second trainer of the plan is refused.
 * One plan is JIT-compiled.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <json-c/json.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/io.h"
#include "kdc/kdc.h"

static char *src(const char *rel) {
  char *p = NULL;
  assert_true(asprintf(&p, "%s/%s", KDC_SOURCE_DIR, rel) > 0);
  return p;
}

static char *slurp(const char *rel, size_t *n) {
  char *p = src(rel);
  FILE *f = fopen(p, "rb");
  assert_non_null(f);
  fseek(f, 0, SEEK_END);
  long len = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *d = malloc((size_t)len + 1);
  assert_int_equal(fread(d, 1, (size_t)len, f), (size_t)len);
  d[len] = 0;
  fclose(f);
  free(p);
  *n = (size_t)len;
  return d;
}

/* |st| is an error of |code| whose message contains |needle|; frees it. */
static void expect_err(kdc_status st, kdc_code code, const char *needle) {
  if (!st) fail_msg("expected an error containing \"%s\"", needle);
  if (kdc_status_code(st) != code || !strstr(kdc_status_message(st), needle))
    fail_msg("got [%s] %s; expected [%s] ...%s...", kdc_code_name(kdc_status_code(st)),
             kdc_status_message(st), kdc_code_name(code), needle);
  kdc_status_free(st);
}

static void test_version(void **s) {
  (void)s;
  assert_int_equal(kdc_api_version(), KDC_API_VERSION);
  assert_true(strlen(kdc_version()) > 0);
  assert_string_equal(kdc_array_dtype_name(KDC_ARRAY_I64), "i64");
  assert_string_equal(kdc_array_dtype_name(99), "?");
}

static const char layout[] =
    "{\"batch_dim_name\": \"data\", \"layout_map\": {\"d1/kernel\": [null, \"model\"], "
    "\"d2/output\": [\"data\", null]}}";

static void test_bad_input(void **s) {
  (void)s;
  kdc_compile_options co;
  kdc_plan *p = (kdc_plan *)1;
  kdc_compile_options_init(&co);
  /* broken JSON: the located message of `kdc compile` */
  co.model_text = "{\"class_name\": \"Functional\",\n  \"config\": {";
  co.model_text_len = strlen(co.model_text);
  co.model_path = "broken.json";
  expect_err(kdc_compile(&co, NULL, &p), KDC_INVALID_INPUT, "broken.json");
  assert_null(p);
  /* a layout naming an axis the mesh lacks */
  size_t n;
  char *model = slurp("examples/mnist_mlp/model.json", &n);
  co.model_text = model, co.model_text_len = n, co.model_path = "mlp.json";
  co.mesh = "8", co.layout_text = layout, co.layout_text_len = strlen(layout);
  co.layout_path = "guide.json";
  expect_err(kdc_compile(&co, NULL, &p), KDC_INVALID_INPUT, "guide.json: layout_map[\"d1/kernel\"]");
  co.mesh = NULL;
  expect_err(kdc_compile(&co, NULL, &p), KDC_INVALID_INPUT, "--layout needs --mesh");
  /* options not made by _init; NULL everything */
  kdc_compile_options raw;
  memset(&raw, 0, sizeof raw);
  expect_err(kdc_compile(&raw, NULL, &p), KDC_INVALID_INPUT, "kdc_compile_options_init");
  expect_err(kdc_compile(NULL, NULL, &p), KDC_INVALID_INPUT, "kdc_compile_options_init");
  expect_err(kdc_compile(&co, NULL, NULL), KDC_INVALID_INPUT, "out is NULL");
  expect_err(kdc_compile_file(&co, NULL, NULL), KDC_INVALID_INPUT, "no output plan");
  expect_err(kdc_plan_load(NULL, NULL, &p), KDC_INVALID_INPUT, "no plan given");
  expect_err(kdc_plan_load("/nonexistent/p.bin", NULL, &p), KDC_IO_ERROR, "/nonexistent/p.bin");
  kdc_run_options ro;
  memset(&ro, 0, sizeof ro);
  expect_err(kdc_plan_load("/nonexistent/p.bin", &ro, &p), KDC_INVALID_INPUT, "kdc_run_options_init");
  expect_err(kdc_plan_predict(NULL, NULL, 0, NULL, 0), KDC_INVALID_INPUT, "no plan");
  expect_err(kdc_trainer_create(NULL, NULL), KDC_INVALID_INPUT, "no plan");
  expect_err(kdc_model_summary(NULL, NULL, 0, NULL), KDC_INVALID_INPUT, "no model");
  char *text = NULL;
  expect_err(kdc_plan_file_describe("/nonexistent/p.bin", KDC_DESCRIBE_PLAN, NULL, &text),
             KDC_IO_ERROR, "/nonexistent/p.bin");
  assert_null(text);
  /* the model's summary from text */
  assert_null(kdc_model_summary("mlp.json", model, n, &text));
  assert_non_null(strstr(text, "d1 (Dense)"));
  kdc_free(text);
  /* NULL-safe getters and frees */
  kdc_plan_free(NULL), kdc_trainer_free(NULL), kdc_history_free(NULL), kdc_free(NULL);
  assert_int_equal(kdc_plan_input_count(NULL), 0);
  assert_null(kdc_history_key(NULL, 0));
  free(model);
}

static double worst_f32(const float *got, const float *want, size_t n) {
  double w = 0;
  for (size_t i = 0; i < n; i++) {
    double d = fabs((double)got[i] - want[i]) / (1e-5 + 1e-4 * fabs((double)want[i]));
    if (!(d <= w)) w = d;  /* NaN too */
  }
  return w;
}

static kdc_array array_of(const kdc_npy_array *a, const char *name) {
  kdc_array r;
  memset(&r, 0, sizeof r);
  r.data = a->data, r.dtype = (int)a->dtype, r.rank = a->rank, r.name = name;
  memcpy(r.dims, a->dims, sizeof r.dims);
  return r;
}

/* The numbers of |key| (a list) in the JSON |text|. */
static size_t numbers(json_object *root, const char *key, double *out, size_t cap) {
  json_object *v = NULL;
  assert_true(json_object_object_get_ex(root, key, &v));
  size_t n = json_object_array_length(v);
  assert_true(n <= cap);
  for (size_t i = 0; i < n; i++) out[i] = json_object_get_double(json_object_array_get_idx(v, i));
  return n;
}

static void test_mlp(void **s) {
  (void)s;
  size_t n;
  char *model = slurp("examples/mnist_mlp/model.json", &n);
  char *at = strstr(model, "\"rate\": 0.4");
  assert_non_null(at);
  memcpy(at, "\"rate\": 0.0", 11);  /* the reference trains without dropout */
  char *w = src("examples/mnist_mlp/weights.safetensors");
  kdc_compile_options co;
  kdc_compile_options_init(&co);
  co.model_text = model, co.model_text_len = n, co.model_path = "mlp.json";
  co.weights_path = w, co.batch = 16, co.mesh = "2x4", co.axes = "data,model";
  co.layout_text = layout, co.layout_text_len = strlen(layout);
  co.loss = "categorical_crossentropy", co.optimizer = "sgd", co.learning_rate = 0.1;
  kdc_plan *p = NULL;
  kdc_status st = kdc_compile(&co, NULL, &p);
  if (st) fail_msg("%s", kdc_status_message(st));
  assert_int_equal(kdc_plan_batch(p), 16);
  assert_int_equal(kdc_plan_device_count(p), 8);
  assert_int_equal(kdc_plan_mesh_rank(p), 2);
  int64_t size = 0;
  assert_string_equal(kdc_plan_mesh_axis(p, 1, &size), "model");
  assert_int_equal(size, 4);
  assert_null(kdc_plan_mesh_axis(p, 2, &size));
  assert_true(kdc_plan_has_training(p));
  assert_int_equal(kdc_plan_input_count(p), 1);
  assert_int_equal(kdc_plan_output_count(p), 1);
  kdc_tensor_info ti;
  assert_null(kdc_plan_output(p, 0, &ti));
  assert_string_equal(ti.name, "d2");
  expect_err(kdc_plan_output(p, 1, &ti), KDC_INVALID_INPUT, "1 output");

  /* predict: 37 rows = 2 full batches in place + 5 padded */
  char *xp = src("examples/mnist_mlp/input.npy"), *ep = src("examples/mnist_mlp/expected.npy");
  kdc_npy_array x, e;
  assert_null(kdc_npy_read(xp, &x));
  assert_null(kdc_npy_read(ep, &e));
  assert_int_equal(x.dims[0], 37);
  kdc_array in = array_of(&x, "input.npy");
  float *out = calloc((size_t)e.dims[0] * 10, sizeof *out);
  kdc_array o = {.data = out, .dtype = KDC_ARRAY_F32, .rank = 2, .dims = {37, 10}};
  assert_null(kdc_plan_predict(p, &in, 1, &o, 1));
  double wp = worst_f32(out, e.data, 370);
  fprintf(stderr, "predict vs TF.js: %.3g x tolerance\n", wp);
  assert_true(wp <= 1);
  /* wrong arrays: named in the message */
  kdc_array bad = in;
  bad.dims[1] = 27;
  expect_err(kdc_plan_predict(p, &bad, 1, &o, 1), KDC_INVALID_INPUT, "input.npy: shape (37, 27");
  o.dims[0] = 36;
  expect_err(kdc_plan_predict(p, &in, 1, &o, 1), KDC_INVALID_INPUT, "output 0 (\"d2\")");
  o.dims[0] = 37;
  expect_err(kdc_plan_predict(p, &in, 2, &o, 1), KDC_INVALID_INPUT, "takes 1 input(s), 2 given");
  bad = in, bad.rank = 9;
  expect_err(kdc_plan_predict(p, &bad, 1, &o, 1), KDC_INVALID_INPUT, "rank 9");
  bad = in, bad.data = NULL;
  expect_err(kdc_plan_predict(p, &bad, 1, &o, 1), KDC_INVALID_INPUT, "no data");
  bad = in, bad.dtype = 42;
  expect_err(kdc_plan_predict(p, &bad, 1, &o, 1), KDC_INVALID_INPUT, "unknown dtype 42");

  /* describe: text, and JSON with the collectives */
  char *text = NULL;
  assert_null(kdc_plan_describe(p, KDC_DESCRIBE_EXPLAIN, "d1/kernel", &text));
  assert_non_null(strstr(text, "layout_map[\"d1/kernel\"]"));
  kdc_free(text);
  expect_err(kdc_plan_describe(p, KDC_DESCRIBE_EXPLAIN, "nope", &text), KDC_INVALID_INPUT,
             "no value named \"nope\"");
  expect_err(kdc_plan_describe(p, 77, NULL, &text), KDC_INVALID_INPUT, "unknown kind 77");
  assert_null(kdc_plan_describe(p, KDC_DESCRIBE_JSON, NULL, &text));
  json_object *rep = json_tokener_parse(text);
  assert_non_null(rep);
  json_object *colls = NULL, *mem = NULL;
  assert_true(json_object_object_get_ex(rep, "collectives", &colls));
  assert_true(json_object_object_get_ex(rep, "memory_per_device", &mem));
  assert_true(json_object_array_length(colls) > 0);
  json_object_put(rep);
  kdc_free(text);

  /* fit 3 epochs = the Keras 3 reference */
  kdc_trainer *t = NULL;
  assert_null(kdc_trainer_create(p, &t));
  kdc_trainer *t2 = NULL;
  expect_err(kdc_trainer_create(p, &t2), KDC_INVALID_INPUT, "already has a trainer");
  assert_int_equal(kdc_trainer_data_count(t), 2);
  assert_int_equal(kdc_trainer_input_count(t), 1);
  char *txp = src("examples/mnist_mlp/train_x.npy"), *typ = src("examples/mnist_mlp/train_y.npy");
  kdc_npy_array tx, ty;
  assert_null(kdc_npy_read(txp, &tx));
  assert_null(kdc_npy_read(typ, &ty));
  kdc_array data[2] = {array_of(&tx, "train_x.npy"), array_of(&ty, "train_y.npy")};
  kdc_fit_options fo;
  kdc_fit_options_init(&fo);
  fo.epochs = 3, fo.batch_size = 16;
  kdc_history *h = NULL;
  expect_err(kdc_trainer_fit(t, data, 1, &fo, &h), KDC_INVALID_INPUT, "trains on 2 arrays");
  kdc_array short_y = data[1];
  short_y.dims[0] = 95;
  kdc_array d2[2] = {data[0], short_y};
  expect_err(kdc_trainer_fit(t, d2, 2, &fo, &h), KDC_INVALID_INPUT, "train_y.npy has 95");
  fo.batch_size = 17;
  expect_err(kdc_trainer_fit(t, data, 2, &fo, &h), KDC_UNSUPPORTED, "larger than the plan");
  fo.batch_size = 16;
  assert_null(kdc_trainer_fit(t, data, 2, &fo, &h));
  assert_int_equal(kdc_history_epochs(h), 3);
  assert_int_equal(kdc_history_steps(h), 6);
  assert_int_equal(kdc_history_key_count(h), 1);
  assert_string_equal(kdc_history_key(h, 0), "loss");
  size_t rn;
  char *ref = slurp("examples/mnist_mlp/train_sgd_history.json", &rn);
  json_object *rj = json_tokener_parse(ref);
  double want[64], worst = 0;
  size_t ne = numbers(rj, "loss", want, 64);
  assert_int_equal(ne, 3);
  for (size_t i = 0; i < ne; i++)
    worst = fmax(worst, fabs(kdc_history_values(h, 0)[i] - want[i]) / fabs(want[i]));
  size_t nb = numbers(rj, "batch_loss", want, 64);
  assert_int_equal(nb, 18);
  for (size_t i = 0; i < nb; i++)
    worst = fmax(worst, fabs(kdc_history_batch_loss(h)[i] - want[i]) / fabs(want[i]));
  fprintf(stderr, "fit losses vs Keras 3 reference: %.3g relative\n", worst);
  assert_true(worst <= 1e-4);
  json_object_put(rj);
  free(ref);
  kdc_history_free(h);

  /* final weights, by name, global layout */
  char *fp = src("examples/mnist_mlp/train_sgd_final.safetensors");
  kdc_safetensors *sf = NULL;
  assert_null(kdc_safetensors_open(fp, &sf));
  static const char *const names[] = {"d1/kernel", "d2/kernel", "d2/bias"};
  for (int k = 0; k < 3; k++) {
    const kdc_st_tensor *rt = kdc_safetensors_find(sf, names[k]);
    assert_non_null(rt);
    float *got = calloc(rt->nbytes, 1), *want_w = malloc(rt->nbytes);
    memcpy(want_w, rt->data, rt->nbytes);
    kdc_array a = {.data = got, .dtype = KDC_ARRAY_F32, .rank = rt->rank};
    memcpy(a.dims, rt->dims, sizeof a.dims);
    assert_null(kdc_trainer_get(t, names[k], &a));
    double wk = worst_f32(got, want_w, rt->nbytes / 4);
    fprintf(stderr, "%s vs Keras 3 reference: %.3g x tolerance\n", names[k], wk);
    assert_true(wk <= 1);
    if (k == 2) {
      /* set, then get: exact; a wrong shape or name is an error */
      for (size_t i = 0; i < rt->nbytes / 4; i++) got[i] = (float)i * 0.5f;
      assert_null(kdc_trainer_set(t, names[k], &a));
      memset(want_w, 0, rt->nbytes);
      kdc_array b = a;
      b.data = want_w;
      assert_null(kdc_trainer_get(t, names[k], &b));
      assert_memory_equal(got, want_w, rt->nbytes);
      b.dims[0] = 11;
      expect_err(kdc_trainer_set(t, names[k], &b), KDC_INVALID_INPUT, "the weight f32 (10,)");
      expect_err(kdc_trainer_get(t, "d9/kernel", &a), KDC_INVALID_INPUT, "weight \"d9/kernel\"");
    }
    free(got), free(want_w);
  }
  kdc_safetensors_close(sf);
  size_t ns = kdc_trainer_state_count(t);
  int is_w = 0;
  assert_true(ns >= 3);
  assert_null(kdc_trainer_state(t, 0, &ti, &is_w));
  assert_true(is_w);
  /* evaluate: a finite mean loss; one step: finite, and evaluate changes */
  double l0 = NAN, l1 = NAN;
  assert_null(kdc_trainer_evaluate(t, data, 2, 0, &l0, NULL));
  assert_true(isfinite(l0));
  kdc_array first[2] = {data[0], data[1]};
  first[0].dims[0] = first[1].dims[0] = 16;
  double sl = NAN;
  assert_null(kdc_trainer_step(t, first, 2, &sl));
  assert_true(isfinite(sl));
  assert_null(kdc_trainer_evaluate(t, data, 2, 0, &l1, NULL));
  assert_true(l1 != l0);
  kdc_trainer_free(t);
  kdc_plan_free(p);
  kdc_npy_free(&x), kdc_npy_free(&e), kdc_npy_free(&tx), kdc_npy_free(&ty);
  free(out), free(model), free(w), free(xp), free(ep), free(txp), free(typ), free(fp);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_version),
      cmocka_unit_test(test_bad_input),
      cmocka_unit_test(test_mlp),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
