/*
 * End to end, bad input: every kind ends with exit status 2, exactly one
 * line on stderr that names the file and the place, and no output file.
 */
#define _DEFAULT_SOURCE /* sysconf(_SC_PHYS_PAGES) */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/io.h"
#include "e2e_util.h"

static char *model_json, *weights, *input;

static void write_file(const char *path, const void *data, size_t n) {
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  assert_int_equal(fwrite(data, 1, n, f), n);
  fclose(f);
}

__attribute__((noinline)) static char *read_text(const char *path, size_t *n) {
  void *d = NULL;
  kdc_status st = kdc_file_read_all(path, &d, n);
  assert_null(st);
  return (char *)d;
}

/* Asserts the failure contract; |needles| must all appear in the line. */
static void expect_bad(const e2e_result *r, const char *out_path, const char *n1, const char *n2) {
  if (r->status != 2 || e2e_lines(r->err) != 1 || !strstr(r->err, n1) || (n2 && !strstr(r->err, n2)))
    fprintf(stderr, "unexpected (status %d): %s", r->status, r->err);
  assert_int_equal(r->status, 2);
  assert_int_equal(e2e_lines(r->err), 1);
  assert_non_null(strstr(r->err, n1));
  if (n2) assert_non_null(strstr(r->err, n2));
  if (out_path) assert_false(e2e_exists(out_path));
}

/* Writes the example model with the first occurrence of |from| replaced. */
static char *patched_model(const char *name, const char *from, const char *to) {
  size_t n;
  char *text = read_text(model_json, &n);
  char *at = strstr(text, from);
  assert_non_null(at);
  char *p = e2e_path(name);
  FILE *f = fopen(p, "wb");
  fwrite(text, 1, (size_t)(at - text), f);
  fputs(to, f);
  fputs(at + strlen(from), f);
  fclose(f);
  free(text);
  return p;
}

static void test_broken_json(void **state) {
  (void)state;
  size_t n;
  char *text = read_text(model_json, &n);
  char *bad = e2e_path("broken.json"), *out = e2e_path("broken.plan");
  write_file(bad, text, n / 2);
  e2e_result r;
  e2e_kdc(&r, "compile", bad, "-o", out, NULL);
  expect_bad(&r, out, "broken.json", "line");
  free(text);
  free(bad);
  free(out);
}

static void test_unknown_layer(void **state) {
  (void)state;
  char *bad = patched_model("unknown.json", "\"class_name\": \"Dropout\"", "\"class_name\": \"Frobnicate\"");
  char *out = e2e_path("unknown.plan");
  e2e_result r;
  e2e_kdc(&r, "compile", bad, "-o", out, NULL);
  expect_bad(&r, out, "unknown.json", "Frobnicate");
  assert_non_null(strstr(r.err, "config.layers["));
  free(bad);
  free(out);
}

static const char add_mismatch[] =
    "{\"class_name\": \"Functional\", \"config\": {\"name\": \"m\", \"layers\": ["
    "{\"class_name\": \"InputLayer\", \"name\": \"a\", \"config\": {\"name\": \"a\", "
    "\"batch_shape\": [null, 10]}, \"inbound_nodes\": []},"
    "{\"class_name\": \"InputLayer\", \"name\": \"b\", \"config\": {\"name\": \"b\", "
    "\"batch_shape\": [null, 12]}, \"inbound_nodes\": []},"
    "{\"class_name\": \"Add\", \"name\": \"add\", \"config\": {\"name\": \"add\"}, "
    "\"inbound_nodes\": [{\"args\": [[{\"class_name\": \"__keras_tensor__\", \"config\": "
    "{\"shape\": [null, 10], \"dtype\": \"float32\", \"keras_history\": [\"a\", 0, 0]}}, "
    "{\"class_name\": \"__keras_tensor__\", \"config\": {\"shape\": [null, 12], \"dtype\": "
    "\"float32\", \"keras_history\": [\"b\", 0, 0]}}]], \"kwargs\": {}}]}], "
    "\"input_layers\": [[\"a\", 0, 0], [\"b\", 0, 0]], \"output_layers\": [[\"add\", 0, 0]]}}";

static void test_shape_mismatch(void **state) {
  (void)state;
  char *bad = e2e_path("add.json"), *out = e2e_path("add.plan");
  write_file(bad, add_mismatch, strlen(add_mismatch));
  e2e_result r;
  e2e_kdc(&r, "compile", bad, "-o", out, NULL);
  expect_bad(&r, out, "add.json", "12");
  assert_non_null(strstr(r.err, "10"));
  free(bad);
  free(out);
}

static void test_bad_config_value(void **state) {
  (void)state;
  char *bad = patched_model("units.json", "\"units\": 10", "\"units\": -3");
  char *out = e2e_path("units.plan");
  e2e_result r;
  e2e_kdc(&r, "compile", bad, "-o", out, NULL);
  expect_bad(&r, out, "units.json", "units");
  free(bad);
  free(out);
}

/* Writes the example weights with |name| dropped or reshaped to |dims0|. */
static char *patched_weights(const char *file, const char *name, int64_t dims0) {
  kdc_safetensors *st = NULL;
  assert_null(kdc_safetensors_open(weights, &st));
  kdc_st_tensor ts[16];
  size_t k = 0;
  for (size_t i = 0; i < kdc_safetensors_count(st); i++) {
    kdc_st_tensor t = *kdc_safetensors_get(st, i);
    if (strcmp(t.name, name) == 0) {
      if (dims0 < 0) continue;
      t.dims[0] = dims0;
      t.nbytes = t.nbytes / (size_t)kdc_safetensors_get(st, i)->dims[0] * (size_t)dims0;
    }
    ts[k++] = t;
  }
  char *p = e2e_path(file);
  assert_null(kdc_safetensors_write(p, ts, k, NULL));
  kdc_safetensors_close(st);
  return p;
}

static void test_missing_weight(void **state) {
  (void)state;
  char *w = patched_weights("missing.safetensors", "d2/bias", -1), *out = e2e_path("missing.plan");
  e2e_result r;
  e2e_kdc(&r, "compile", model_json, "--weights", w, "-o", out, NULL);
  expect_bad(&r, out, "d2/bias", NULL);
  free(w);
  free(out);
}

static void test_wrong_weight_shape(void **state) {
  (void)state;
  char *w = patched_weights("shape.safetensors", "d1/kernel", 700), *out = e2e_path("shape.plan");
  e2e_result r;
  e2e_kdc(&r, "compile", model_json, "--weights", w, "-o", out, NULL);
  expect_bad(&r, out, "d1/kernel", "700");
  free(w);
  free(out);
}

static void test_bad_batch(void **state) {
  (void)state;
  char *out = e2e_path("batch.plan");
  e2e_result r;
  e2e_kdc(&r, "compile", model_json, "--batch", "0", "-o", out, NULL);
  expect_bad(&r, out, "--batch", "0");
  e2e_kdc(&r, "compile", model_json, "--batch", "12abc", "-o", out, NULL);
  expect_bad(&r, out, "--batch", "12abc");
  free(out);
}

/* Compiles a good plan and returns its bytes. */
static char *good_plan(size_t *n) {
  char *plan = e2e_path("good.plan");
  e2e_result r;
  e2e_kdc(&r, "compile", model_json, "--weights", weights, "-o", plan, NULL);
  assert_int_equal(r.status, 0);
  char *bytes = read_text(plan, n);
  free(plan);
  return bytes;
}

static void run_bad_plan(const char *name, const void *bytes, size_t n, const char *needle) {
  char *p = e2e_path(name), *y = e2e_path("y.npy");
  write_file(p, bytes, n);
  e2e_result r;
  e2e_kdc(&r, "run", p, "--input", input, "--output", y, NULL);
  expect_bad(&r, y, name, needle);
  free(p);
  free(y);
}

static void test_truncated_plan(void **state) {
  (void)state;
  size_t n;
  char *bytes = good_plan(&n);
  run_bad_plan("trunc.plan", bytes, n - 100, NULL);
  run_bad_plan("trunc2.plan", bytes, 30, NULL);
  run_bad_plan("empty.plan", bytes, 0, NULL);
  free(bytes);
}

static void test_corrupted_plan(void **state) {
  (void)state;
  size_t n;
  char *bytes = good_plan(&n);
  bytes[n / 2] ^= 0x5a;
  run_bad_plan("corrupt.plan", bytes, n, "checksum");
  free(bytes);
}

static void test_other_format_version(void **state) {
  (void)state;
  size_t n;
  char *bytes = good_plan(&n);
  bytes[8] = 7; /* format_version, little endian u32 at offset 8 */
  run_bad_plan("v7.plan", bytes, n, "7");
  free(bytes);
}

static void test_foreign_plan(void **state) {
  (void)state;
  size_t n;
  char *text = read_text(model_json, &n);
  run_bad_plan("foreign.plan", text, n, "not a kdc plan");
  free(text);
}

static void test_wrong_input(void **state) {
  (void)state;
  char *plan = e2e_path("in.plan"), *x = e2e_path("x_bad.npy"), *y = e2e_path("y_bad.npy");
  e2e_result r;
  e2e_kdc(&r, "compile", model_json, "--weights", weights, "-o", plan, NULL);
  assert_int_equal(r.status, 0);
  int64_t dims[4] = {5, 27, 28, 1};
  float *zeros = calloc(5 * 27 * 28, sizeof(float));
  assert_null(kdc_npy_write(x, KDC_IO_DTYPE_F32, 4, dims, zeros));
  e2e_kdc(&r, "run", plan, "--input", x, "--output", y, NULL);
  expect_bad(&r, y, "x_bad.npy", "(5, 27, 28, 1)");
  int64_t dims2[4] = {5, 28, 28, 1};
  uint8_t *b = calloc(5 * 28 * 28, 1);
  /* another dtype is not bad input: Keras converts it to the Input's dtype
   * (bool -> float32 0/1), and so does kdc run */
  assert_null(kdc_npy_write(x, KDC_IO_DTYPE_BOOL, 4, dims2, b));
  e2e_kdc(&r, "run", plan, "--input", x, "--output", y, NULL);
  assert_int_equal(r.status, 0);
  assert_true(e2e_exists(y));
  remove(y);
  e2e_kdc(&r, "run", plan, "--input", "/nonexistent/x.npy", "--output", y, NULL);
  expect_bad(&r, y, "/nonexistent/x.npy", NULL);
  free(zeros);
  free(b);
  free(plan);
  free(x);
  free(y);
}

static void test_usage_errors(void **state) {
  (void)state;
  e2e_result r;
  e2e_kdc(&r, "frobnicate", NULL);
  expect_bad(&r, NULL, "frobnicate", NULL);
  e2e_kdc(&r, "compile", model_json, "--no-such-flag", NULL);
  expect_bad(&r, NULL, "--no-such-flag", NULL);
  e2e_kdc(&r, "compile", "/nonexistent/model.json", "-o", "/tmp/x.plan", NULL);
  expect_bad(&r, NULL, "/nonexistent/model.json", NULL);
}

/* --mesh / --layout errors: each exit 2, one line naming the place. */
static void mesh_case(const char *name, const char *mesh, const char *layout_text, const char *n1,
                      const char *n2) {
  char file[64], plan[64];
  snprintf(file, sizeof file, "%s.json", name);
  snprintf(plan, sizeof plan, "%s.plan", name);
  char *lp = e2e_path(file), *out = e2e_path(plan);
  e2e_result r;
  if (layout_text) {
    write_file(lp, layout_text, strlen(layout_text));
    e2e_kdc(&r, "compile", model_json, "--weights", weights, "--batch", "16", "--mesh", mesh,
            "--layout", lp, "-o", out, NULL);
  } else {
    e2e_kdc(&r, "compile", model_json, "--weights", weights, "--batch", "16", "--mesh", mesh,
            "-o", out, NULL);
  }
  expect_bad(&r, out, n1, n2);
  free(lp);
  free(out);
}

static void test_layout_uneven_dim(void **state) {
  (void)state; /* 200 units over model=3: the variable, the dim and both sizes */
  mesh_case("uneven", "1x3", "{\"batch_dim_name\": \"data\", \"layout_map\": "
            "{\"d1/kernel\": [null, \"model\"]}}", "dim 1 of \"d1/kernel\" (size 200)",
            "\"model\" (size 3)");
}

static void test_bad_mesh_string(void **state) {
  (void)state;
  mesh_case("badmesh", "2xx4", NULL, "--mesh \"2xx4\"", "column 3");
}

static void test_layout_unknown_axis(void **state) {
  (void)state;
  mesh_case("unkaxis", "2x4", "{\"batch_dim_name\": \"data\", \"layout_map\": "
            "{\"d1/kernel\": [null, \"tensor\"]}}", "layout_map[\"d1/kernel\"][1]",
            "\"tensor\" is not an axis");
}

static void test_layout_wrong_rank(void **state) {
  (void)state;
  mesh_case("rank", "2x4", "{\"batch_dim_name\": \"data\", \"layout_map\": "
            "{\"d1/kernel\": [null, \"model\", null]}}", "layout_map[\"d1/kernel\"]", "rank 2");
}

static void test_layout_two_regex_keys(void **state) {
  (void)state;
  mesh_case("tworx", "2x4", "{\"batch_dim_name\": \"data\", \"layout_map\": "
            "{\"d1/.*\": [null, \"model\"], \".*/kernel\": [null, \"model\"]}}",
            "\"d1/kernel\" matches multiple layout keys", "\".*/kernel\"");
}

/* Found clean by tests/reference/fuzz.js' malformed mode; kept as the
 * contract for each kind of bad layout or mesh it generates. */
static void test_layout_axis_twice(void **state) {
  (void)state;
  mesh_case("twice", "2x4", "{\"layout_map\": {\"d1/kernel\": [\"model\", \"model\"]}}",
            "layout_map[\"d1/kernel\"]", "splits both dim 0 and dim 1");
}

static void test_layout_multi_axis_entry(void **state) {
  (void)state;
  mesh_case("multi", "2x4", "{\"layout_map\": {\"d1/kernel\": [null, [\"data\", \"model\"]]}}",
            "layout_map[\"d1/kernel\"][1]", "a list of mesh axes for one dimension");
}

static void test_layout_duplicate_key(void **state) {
  (void)state;
  mesh_case("dupkey", "2x4", "{\"layout_map\": {\"d1/kernel\": [], \"d1/kernel\": [null, \"model\"]}}",
            "layout_map[\"d1/kernel\"]", "duplicate key");
}

static void test_layout_bad_batch_dim(void **state) {
  (void)state;
  mesh_case("batchdim", "2x4", "{\"batch_dim_name\": \"batch\", \"layout_map\": {}}", "batch_dim_name",
            "\"batch\" is not an axis of the mesh");
}

static void test_layout_bare_string(void **state) {
  (void)state;
  mesh_case("bare", "2x4", "{\"layout_map\": {\"d1/kernel\": \"model\"}}", "layout_map[\"d1/kernel\"]",
            "(write [\"model\"])");
}

static void test_batch_not_divisible_by_mesh(void **state) {
  (void)state; /* batch 16 over 3 devices: DataParallel and a layout's batch axis */
  mesh_case("batch3", "3", NULL, "config.layers[0]", "batch size 16 is not divisible by the 3 data shards");
  mesh_case("batch3x2", "3x2", "{\"layout_map\": {\"d1/kernel\": [null, \"model\"]}}", "config.layers[0]",
            "not divisible by the 3 data shards of mesh axis \"data\"");
}

static void test_tfjs_missing_shard(void **state) {
  (void)state; /* a TF.js model.json without its weights.bin beside it */
  char *src = e2e_src("examples/mnist_mlp/model_tfjs.json"), *copy = e2e_path("lonely_tfjs.json");
  size_t n;
  char *text = read_text(src, &n);
  write_file(copy, text, n);
  char *out = e2e_path("lonely.plan");
  e2e_result r;
  e2e_kdc(&r, "compile", copy, "-o", out, NULL);
  expect_bad(&r, out, "lonely_tfjs.json", "weightsManifest[0].paths[0]");
  free(src), free(copy), free(text), free(out);
}

/* A plan whose outputs do not fit in memory (RepeatVector 2^30 of 4
 * features at batch 32: 512 GiB) ends `kdc run` with a one-line error
 * naming the plan and the output, exit 3 (KDC_OUT_OF_MEMORY), no output
 * file -- it used to abort in the checked allocator. */
static void test_outputs_too_large(void **state) {
  (void)state;
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  if (pages > 0 && page > 0 && (double)pages * (double)page >= 256.0 * (1ull << 30)) {
    printf("skipped: this machine has %.0f GiB, the 512 GiB output might be allocated\n",
           (double)pages * (double)page / (1ull << 30));
    skip();
  }
  static const char *json =
      "{\"class_name\": \"Sequential\", \"config\": {\"name\": \"s\", \"layers\": ["
      "{\"class_name\": \"InputLayer\", \"config\": {\"batch_shape\": [null, 4], \"name\": \"x\"}}, "
      "{\"class_name\": \"RepeatVector\", \"config\": {\"name\": \"r\", \"n\": 1073741824}}, "
      "{\"class_name\": \"Activation\", \"config\": {\"name\": \"big\", \"activation\": \"tanh\"}}]}}";
  char *model = e2e_path("huge.json"), *plan = e2e_path("huge.plan"), *x = e2e_path("huge_x.npy");
  char *y = e2e_path("huge_y.npy");
  write_file(model, json, strlen(json));
  e2e_result r;
  e2e_kdc(&r, "compile", model, "--batch", "32", "-o", plan, NULL);
  assert_int_equal(r.status, 0);
  int64_t dims[2] = {32, 4};
  float zeros[128] = {0};
  assert_null(kdc_npy_write(x, KDC_IO_DTYPE_F32, 2, dims, zeros));
  /* under AddressSanitizer a failed allocation aborts unless told to
   * return NULL as libc does */
  const char *asan = getenv("ASAN_OPTIONS");
  char *saved = asan ? strdup(asan) : NULL, opts[512];
  snprintf(opts, sizeof opts, "%s%sallocator_may_return_null=1", asan ? asan : "", asan ? ":" : "");
  setenv("ASAN_OPTIONS", opts, 1);
  e2e_kdc(&r, "run", plan, "--input", x, "--output", y, NULL);
  if (saved) setenv("ASAN_OPTIONS", saved, 1);
  else unsetenv("ASAN_OPTIONS");
  free(saved);
  assert_int_equal(r.status, 3);
  assert_int_equal(e2e_lines(r.err), 1);
  if (!strstr(r.err, "huge.plan: output \"big\": cannot allocate")) fail_msg("stderr: %s", r.err);
  assert_false(e2e_exists(y));
  free(model), free(plan), free(x), free(y);
}

int main(void) {
  model_json = e2e_src("examples/mnist_mlp/model.json");
  weights = e2e_src("examples/mnist_mlp/weights.safetensors");
  input = e2e_src("examples/mnist_mlp/input.npy");
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_broken_json),     cmocka_unit_test(test_unknown_layer),
      cmocka_unit_test(test_shape_mismatch), cmocka_unit_test(test_bad_config_value),  cmocka_unit_test(test_missing_weight),
      cmocka_unit_test(test_wrong_weight_shape), cmocka_unit_test(test_bad_batch),
      cmocka_unit_test(test_truncated_plan),  cmocka_unit_test(test_corrupted_plan),
      cmocka_unit_test(test_other_format_version), cmocka_unit_test(test_foreign_plan),
      cmocka_unit_test(test_wrong_input),     cmocka_unit_test(test_usage_errors),
      cmocka_unit_test(test_layout_uneven_dim), cmocka_unit_test(test_bad_mesh_string),
      cmocka_unit_test(test_layout_unknown_axis), cmocka_unit_test(test_layout_wrong_rank),
      cmocka_unit_test(test_layout_two_regex_keys), cmocka_unit_test(test_layout_axis_twice),
      cmocka_unit_test(test_layout_multi_axis_entry), cmocka_unit_test(test_layout_duplicate_key),
      cmocka_unit_test(test_layout_bad_batch_dim), cmocka_unit_test(test_layout_bare_string),
      cmocka_unit_test(test_batch_not_divisible_by_mesh), cmocka_unit_test(test_tfjs_missing_shard),
      cmocka_unit_test(test_outputs_too_large),
  };
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  free(model_json);
  free(weights);
  free(input);
  return rc;
}
