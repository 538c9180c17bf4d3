/*
 * End to end, kdc's files in and out (docs/ARCHITECTURE.md, "Files in and
 * out"; issue 17):
 *   - outputs: a character device the test makes itself (never the
 *     machine's /dev/null) is written in place and stays a device; a symlink
 *     is written through to its target and stays a link; a directory or a
 *     FIFO is a located error naming the flag;
 *   - a command's outputs are all-or-nothing: --fit whose --save-weights
 *     cannot be written leaves no --history (nor changes an old one), `run`
 *     whose second --output cannot be written leaves no first;
 *   - SIGINT while `compile -o` writes (the KDC_TEST_SIGNAL_IN_WRITE hook of
 *     common/files.c) leaves no temp file and no plan;
 *   - an output that is an input (-o the model, --output the --input,
 *     --save-weights the --x, the same path twice) is an error naming both
 *     flags, and the file is unchanged;
 *   - inputs: a FIFO as any input fails at once (no reader blocks on it);
 *   - labels: uint8, int8, bool, float16 and int64 class ids train exactly
 *     as int32 ones (the same history, bit for bit); ids outside
 *     [0, classes) are an error naming the row; `run --input` takes uint8
 *     pixels for a float32 input as numpy's astype(float32) would.
 * One plan (examples/mnist_mlp with a sparse crossentropy) serves all.
 */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/io.h"
#include "e2e_util.h"

static char *plan, *x_path, *y_path, *input;

static int setup(void **state) {
  (void)state;
  char *m = e2e_src("examples/mnist_mlp/model.json"),
       *w = e2e_src("examples/mnist_mlp/weights.safetensors");
  plan = e2e_path("t.plan");
  x_path = e2e_src("examples/mnist_mlp/train_x.npy");
  input = e2e_src("examples/mnist_mlp/input.npy");
  e2e_result r;
  e2e_kdc(&r, "compile", m, "--weights", w, "--batch", "32", "--loss",
          "sparse_categorical_crossentropy", "-o", plan, NULL);
  if (r.status != 0) fprintf(stderr, "%s", r.err);
  free(m);
  free(w);
  if (r.status != 0) return -1;
  /* sparse labels: the class ids of the one-hot train_y.npy, int32 */
  char *yp = e2e_src("examples/mnist_mlp/train_y.npy");
  kdc_npy_array y;
  if (kdc_npy_read(yp, &y)) return -1;
  free(yp);
  int64_t n = y.dims[0], c = y.dims[1];
  int32_t *ids = malloc((size_t)n * 4);
  for (int64_t i = 0; i < n; i++)
    for (int64_t k = 0; k < c; k++)
      if (((float *)y.data)[i * c + k] == 1.0f) ids[i] = (int32_t)k;
  y_path = e2e_path("y_i32.npy");
  int64_t dims[1] = {n};
  kdc_status st = kdc_npy_write(y_path, KDC_IO_DTYPE_I32, 1, dims, ids);
  kdc_npy_free(&y);
  free(ids);
  return st ? -1 : 0;
}

/* The entries of the directory |dir| whose name contains ".tmp.". */
static int temp_files(const char *dir) {
  DIR *d = opendir(dir);
  assert_non_null(d);
  int n = 0;
  for (struct dirent *e; (e = readdir(d));) n += strstr(e->d_name, ".tmp.") != NULL;
  closedir(d);
  return n;
}

static char *slurp(const char *path, size_t *n) {
  void *d = NULL;
  kdc_status st = kdc_file_read_all(path, &d, n);
  if (st) {
    kdc_status_free(st);
    return NULL;
  }
  return d;
}

static void expect_error(const e2e_result *r, const char *a, const char *b) {
  if (r->status != 2 || e2e_lines(r->err) != 1 || !strstr(r->err, a) || (b && !strstr(r->err, b)))
    fail_msg("status %d, expected one line with \"%s\"%s%s%s, got: %s", r->status, a,
             b ? " and \"" : "", b ? b : "", b ? "\"" : "", r->err);
}

static void expect_same(const char *path, const char *orig) {
  size_t n1, n2;
  char *a = slurp(path, &n1), *b = slurp(orig, &n2);
  assert_non_null(a);
  assert_non_null(b);
  assert_int_equal(n1, n2);
  assert_memory_equal(a, b, n1);
  free(a);
  free(b);
}

static char *subdir(const char *name) {
  char *d = e2e_path(name);
  assert_int_equal(mkdir(d, 0755), 0);
  return d;
}

/* A character device made by the test (the machine's /dev/null is never
 * touched): written in place, still a device afterwards, no temp files. */
static void test_output_character_device(void **state) {
  (void)state;
  char *dir = subdir("dev"), *dev = e2e_join(dir, "null");
  if (mknod(dev, S_IFCHR | 0666, makedev(1, 3)) != 0) {
    printf("skipped: mknod of a character device failed (%s): not root?\n", strerror(errno));
    free(dev);
    free(dir);
    return;
  }
  e2e_result r;
  e2e_kdc(&r, "run", plan, "--input", input, "--output", dev, NULL);
  if (r.status != 0) fail_msg("%s", r.err);
  struct stat sb;
  assert_int_equal(lstat(dev, &sb), 0);
  assert_true(S_ISCHR(sb.st_mode));  /* was replaced by a regular file */
  assert_int_equal(temp_files(dir), 0);
  free(dev);
  free(dir);
}

/* A symlink is written through: the link stays, its target (in another
 * directory, made new) gets the output, byte-identical to a plain write. */
static void test_output_symlink(void **state) {
  (void)state;
  char *a = subdir("links"), *b = subdir("targets");
  char *link = e2e_join(a, "out.npy"), *target = e2e_join(b, "real.npy"), *plain = e2e_path("plain.npy");
  assert_int_equal(symlink("../targets/real.npy", link), 0);  /* dangling: created through */
  e2e_result r;
  e2e_kdc(&r, "run", plan, "--input", input, "--output", link, NULL);
  if (r.status != 0) fail_msg("%s", r.err);
  e2e_kdc(&r, "run", plan, "--input", input, "--output", link, NULL);  /* now over a file */
  if (r.status != 0) fail_msg("%s", r.err);
  e2e_kdc(&r, "run", plan, "--input", input, "--output", plain, NULL);
  if (r.status != 0) fail_msg("%s", r.err);
  struct stat sb;
  assert_int_equal(lstat(link, &sb), 0);
  assert_true(S_ISLNK(sb.st_mode));  /* was replaced by a regular file */
  expect_same(target, plain);
  assert_int_equal(temp_files(a) + temp_files(b), 0);
  free(link);
  free(target);
  free(plain);
  free(a);
  free(b);
}

/* A directory or a FIFO as an output: refused before anything runs, left
 * as it was. */
static void test_output_not_regular(void **state) {
  (void)state;
  char *dir = subdir("outdir"), *fifo = e2e_path("out.fifo");
  assert_int_equal(mkfifo(fifo, 0600), 0);
  e2e_result r;
  e2e_kdc(&r, "run", plan, "--input", input, "--output", dir, NULL);
  expect_error(&r, "--output: cannot write: is a directory", NULL);
  e2e_kdc(&r, "run", plan, "--input", input, "--output", fifo, NULL);
  expect_error(&r, "--output: cannot write: is a FIFO", NULL);
  struct stat sb;
  assert_int_equal(stat(dir, &sb), 0);
  assert_true(S_ISDIR(sb.st_mode));
  assert_int_equal(stat(fifo, &sb), 0);
  assert_true(S_ISFIFO(sb.st_mode));
  free(dir);
  free(fifo);
}

/* --fit --history H --save-weights W where W cannot be written: no H (a new
 * one is not created; an old one keeps its bytes), no temp files. */
static void test_outputs_all_or_nothing(void **state) {
  (void)state;
  char *dir = subdir("set"), *h = e2e_join(dir, "history.json"),
       *w = e2e_join(dir, "missing_dir/w.safetensors");
  e2e_result r;
  for (int old = 0; old < 2; old++) {
    if (old) {
      FILE *f = fopen(h, "w");
      assert_non_null(f);
      fputs("OLD", f);
      fclose(f);
    }
    e2e_kdc(&r, "run", plan, "--fit", "--quiet", "--x", x_path, "--y", y_path, "--history", h,
            "--save-weights", w, NULL);
    expect_error(&r, "w.safetensors", "No such file or directory");
    size_t n;
    char *d = slurp(h, &n);
    if (old) {
      assert_non_null(d);
      assert_int_equal(n, 3);
      assert_memory_equal(d, "OLD", 3);
    } else {
      assert_null(d);  /* the history was written although the command failed */
    }
    free(d);
    assert_int_equal(temp_files(dir), 0);
  }
  /* the predictions after training (--predict/--output) belong to the set */
  char *p = e2e_join(dir, "missing_dir/p.npy"), *h2 = e2e_join(dir, "h2.json");
  e2e_kdc(&r, "run", plan, "--fit", "--quiet", "--x", x_path, "--y", y_path, "--history", h2,
          "--predict", x_path, "--output", p, NULL);
  expect_error(&r, "p.npy", "No such file or directory");
  assert_false(e2e_exists(h2));
  assert_int_equal(temp_files(dir), 0);
  free(p);
  free(h2);
  free(dir);
  free(h);
  free(w);
}

/* `kdc run` with two --output whose second cannot be written: neither
 * appears (the first was left), no temp files. */
static void test_run_two_outputs_all_or_nothing(void **state) {
  (void)state;
  char *m = e2e_src("tests/e2e/data/two_heads.json"), *dir = subdir("two"),
       *p = e2e_join(dir, "two.plan"), *x = e2e_join(dir, "x.npy"), *a = e2e_join(dir, "reg.npy"),
       *b = e2e_join(dir, "missing_dir/cls.npy");
  e2e_result r;
  e2e_kdc(&r, "compile", m, "--random-init", "--batch", "4", "-o", p, NULL);
  if (r.status != 0) fail_msg("%s", r.err);
  float xs[4 * 6] = {0};
  int64_t dims[2] = {4, 6};
  assert_null(kdc_npy_write(x, KDC_IO_DTYPE_F32, 2, dims, xs));
  e2e_kdc(&r, "run", p, "--input", x, "--output", a, "--output", b, NULL);
  expect_error(&r, "cls.npy", "No such file or directory");
  assert_false(e2e_exists(a));
  assert_int_equal(temp_files(dir), 0);
  free(m);
  free(dir);
  free(p);
  free(x);
  free(a);
  free(b);
}

/* SIGINT in the middle of writing the plan (a test hook in common/files.c
 * raises it between the temp file's last byte and its rename): the process
 * dies of the signal and leaves no temp file, no plan. */
static void test_interrupt_leaves_no_temp(void **state) {
  (void)state;
  char *dir = subdir("sigint"), *out = e2e_join(dir, "p.plan"),
       *m = e2e_src("examples/mnist_mlp/model.json");
  setenv("KDC_TEST_SIGNAL_IN_WRITE", "1", 1);
  e2e_result r;
  e2e_kdc(&r, "compile", m, "--batch", "8", "-o", out, NULL);
  unsetenv("KDC_TEST_SIGNAL_IN_WRITE");
  assert_int_equal(r.status, -1);  /* killed by the signal */
  assert_false(e2e_exists(out));
  assert_int_equal(temp_files(dir), 0);  /* plan.tmp.XXXXXX was left (23 MB) */
  free(dir);
  free(out);
  free(m);
}

static void copy_file(const char *from, const char *to) {
  size_t n;
  char *d = slurp(from, &n);
  assert_non_null(d);
  assert_null(kdc_file_write_atomic(to, d, n));
  free(d);
}


/* An output that names an input, or another output: refused, naming both
 * flags; the input keeps its bytes. */
static void test_output_is_input(void **state) {
  (void)state;
  char *m = e2e_src("examples/mnist_mlp/model.json"), *mc = e2e_path("model_copy.json"),
       *xc = e2e_path("x_copy.npy"), *ic = e2e_path("input_copy.npy"), *alias = e2e_path("x_alias.npy"),
       *h = e2e_path("twice.json");
  copy_file(m, mc);
  copy_file(x_path, xc);
  copy_file(input, ic);
  assert_int_equal(symlink(xc, alias), 0);
  e2e_result r;
  e2e_kdc(&r, "compile", mc, "-o", mc, NULL);
  expect_error(&r, "-o names the same file as the model", NULL);
  expect_same(mc, m);
  e2e_kdc(&r, "run", plan, "--input", ic, "--output", ic, NULL);
  expect_error(&r, "--output names the same file as --input", NULL);
  expect_same(ic, input);
  e2e_kdc(&r, "run", plan, "--fit", "--quiet", "--x", xc, "--y", y_path, "--save-weights", alias, NULL);
  expect_error(&r, "--save-weights names the same file as --x", NULL);  /* via a symlink */
  expect_same(xc, x_path);
  e2e_kdc(&r, "run", plan, "--fit", "--quiet", "--x", xc, "--y", y_path, "--history", h,
          "--save-weights", h, NULL);
  expect_error(&r, "--save-weights names the same file as --history", NULL);
  assert_false(e2e_exists(h));
  free(m);
  free(mc);
  free(xc);
  free(ic);
  free(alias);
  free(h);
}

/* A FIFO as any input: a located error at once (a reader would block
 * forever waiting for a writer). */
static void test_fifo_inputs(void **state) {
  (void)state;
  char *fifo = e2e_path("in.fifo"), *m = e2e_src("examples/mnist_mlp/model.json"),
       *out = e2e_path("fifo_out.plan");
  assert_int_equal(mkfifo(fifo, 0600), 0);
  const char *const cases[][12] = {
      {"compile", fifo, "-o", out, NULL},
      {"compile", m, "--weights", fifo, "-o", out, NULL},
      {"compile", m, "--mesh", "2", "--layout", fifo, "-o", out, NULL},
      {"inspect", fifo, NULL},
      {"run", fifo, "--input", input, "--print", NULL},
      {"run", plan, "--input", fifo, "--print", NULL},
      {"run", plan, "--fit", "--x", fifo, "--y", y_path, NULL},
      {"run", plan, "--fit", "--x", x_path, "--y", fifo, NULL},
      {"run", plan, "--evaluate", "--x", x_path, "--y", y_path, "--initial-weights", fifo, NULL},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    e2e_result r;
    e2e_kdcv(&r, cases[i]);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    expect_error(&r, "in.fifo: cannot read: is a FIFO", NULL);
    assert_true(t1.tv_sec - t0.tv_sec < 30);
    assert_false(e2e_exists(out));
  }
  free(fifo);
  free(m);
  free(out);
}

/* --y of |dtype|: the class ids of y_path converted by numpy's rules. */
static char *labels_as(const char *name, kdc_io_dtype dt, int64_t bad_row, int64_t bad_value) {
  kdc_npy_array y;
  assert_null(kdc_npy_read(y_path, &y));
  size_t n = (size_t)y.dims[0], sz = kdc_io_dtype_size(dt);
  uint8_t *out = calloc(n, sz);
  for (size_t i = 0; i < n; i++) {
    int64_t v = (int64_t)i == bad_row ? bad_value : ((int32_t *)y.data)[i];
    uint8_t *p = out + i * sz;
    switch (dt) {
    case KDC_IO_DTYPE_U8: *p = (uint8_t)v; break;
    case KDC_IO_DTYPE_I8: *(int8_t *)p = (int8_t)v; break;
    case KDC_IO_DTYPE_BOOL: *p = (uint8_t)(v & 1); break;
    case KDC_IO_DTYPE_I64: memcpy(p, &v, 8); break;
    case KDC_IO_DTYPE_I32: { int32_t x = (int32_t)v; memcpy(p, &x, 4); break; }
    case KDC_IO_DTYPE_F16: {  /* small integers are exact halves: 1.m x 2^e */
      uint16_t h = 0;
      if (v > 0) {
        int e = 0;
        while ((v >> (e + 1)) > 0) e++;
        h = (uint16_t)(((e + 15) << 10) | (((v << 10) >> e) & 0x3ff));
      }
      memcpy(p, &h, 2);
      break;
    }
    default: fail();
    }
  }
  char *path = e2e_path(name);
  assert_null(kdc_npy_write(path, dt, 1, y.dims, out));
  free(out);
  kdc_npy_free(&y);
  return path;
}

static char *fit_history(const char *y, const char *name) {
  char *h = e2e_path(name);
  e2e_result r;
  e2e_kdc(&r, "run", plan, "--fit", "--quiet", "--x", x_path, "--y", y, "--epochs", "2",
          "--history", h, NULL);
  if (r.status != 0) fail_msg("%s: %s", y, r.err);
  size_t n;
  char *d = slurp(h, &n);
  assert_non_null(d);
  free(h);
  return d;
}

/* Labels as Keras takes them: every integer, bool or float dtype holding
 * exact class ids trains as int32 does (bit for bit: the same ids reach the
 * same plan); bool ids are 0/1 and compared with their own int32 twin. */
static void test_label_dtypes(void **state) {
  (void)state;
  char *ref = fit_history(y_path, "h_i32.json");
  const struct { const char *file; kdc_io_dtype dt; } same[] = {
      {"y_u8.npy", KDC_IO_DTYPE_U8}, {"y_i8.npy", KDC_IO_DTYPE_I8},
      {"y_f16.npy", KDC_IO_DTYPE_F16}, {"y_i64.npy", KDC_IO_DTYPE_I64}};
  for (size_t i = 0; i < sizeof same / sizeof same[0]; i++) {
    char *y = labels_as(same[i].file, same[i].dt, -1, 0), *h = fit_history(y, "h.json");
    if (strcmp(h, ref) != 0) fail_msg("%s: history %s differs from int32's %s", y, h, ref);
    free(y);
    free(h);
  }
  char *yb = labels_as("y_bool.npy", KDC_IO_DTYPE_BOOL, -1, 0),
       *yb32 = e2e_path("y_bool_i32.npy");
  {
    kdc_npy_array a;
    assert_null(kdc_npy_read(yb, &a));
    int32_t *ids = malloc(a.nbytes * 4);
    for (size_t i = 0; i < a.nbytes; i++) ids[i] = ((uint8_t *)a.data)[i];
    assert_null(kdc_npy_write(yb32, KDC_IO_DTYPE_I32, 1, a.dims, ids));
    free(ids);
    kdc_npy_free(&a);
  }
  char *hb = fit_history(yb, "hb.json"), *hb32 = fit_history(yb32, "hb32.json");
  assert_string_equal(hb, hb32);
  /* --evaluate converts the same way */
  char *yu8 = e2e_path("y_u8.npy");
  e2e_result r;
  e2e_kdc(&r, "run", plan, "--evaluate", "--x", x_path, "--y", yu8, NULL);
  if (r.status != 0) fail_msg("%s", r.err);
  free(ref);
  free(yb);
  free(yb32);
  free(hb);
  free(hb32);
  free(yu8);
}

/* Ids outside [0, 10): an error naming the file and the row, for --fit and
 * --evaluate (Keras on TensorFlow raises; the loss changed silently). */
static void test_label_range(void **state) {
  (void)state;
  const struct { int64_t row, value; kdc_io_dtype dt; const char *want; } cases[] = {
      {5, 10, KDC_IO_DTYPE_I32, "row 5: class id 10 is outside [0, 10)"},
      {0, -1, KDC_IO_DTYPE_I64, "row 0: class id -1 is outside [0, 10)"},
      {95, INT32_MAX, KDC_IO_DTYPE_I32, "row 95: class id 2147483647 is outside [0, 10)"},
      {7, 200, KDC_IO_DTYPE_U8, "row 7: class id 200 is outside [0, 10)"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char *y = labels_as("y_bad.npy", cases[i].dt, cases[i].row, cases[i].value);
    e2e_result r;
    if (i % 2)
      e2e_kdc(&r, "run", plan, "--evaluate", "--x", x_path, "--y", y, NULL);
    else
      e2e_kdc(&r, "run", plan, "--fit", "--quiet", "--x", x_path, "--y", y, NULL);
    expect_error(&r, "y_bad.npy: ", cases[i].want);
    free(y);
  }
}

/* `kdc run --input` of uint8 pixels feeds the float32 input their values
 * (numpy's astype(float32)): the same outputs as the float32 array. */
static void test_run_uint8_input(void **state) {
  (void)state;
  kdc_npy_array a;
  assert_null(kdc_npy_read(x_path, &a));
  size_t n = a.nbytes / 4;
  uint8_t *u = malloc(n);
  float *f = malloc(n * 4);
  for (size_t i = 0; i < n; i++) {
    u[i] = (uint8_t)(((float *)a.data)[i] * 255.0f);
    f[i] = (float)u[i];
  }
  char *pu = e2e_path("x_u8.npy"), *pf = e2e_path("x_f32.npy"), *ou = e2e_path("o_u8.npy"),
       *of = e2e_path("o_f32.npy");
  assert_null(kdc_npy_write(pu, KDC_IO_DTYPE_U8, a.rank, a.dims, u));
  assert_null(kdc_npy_write(pf, KDC_IO_DTYPE_F32, a.rank, a.dims, f));
  e2e_result r;
  e2e_kdc(&r, "run", plan, "--input", pu, "--output", ou, NULL);
  if (r.status != 0) fail_msg("%s", r.err);
  e2e_kdc(&r, "run", plan, "--input", pf, "--output", of, NULL);
  if (r.status != 0) fail_msg("%s", r.err);
  expect_same(ou, of);
  kdc_npy_free(&a);
  free(u);
  free(f);
  free(pu);
  free(pf);
  free(ou);
  free(of);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_output_character_device),
      cmocka_unit_test(test_output_symlink),
      cmocka_unit_test(test_output_not_regular),
      cmocka_unit_test(test_outputs_all_or_nothing),
      cmocka_unit_test(test_run_two_outputs_all_or_nothing),
      cmocka_unit_test(test_interrupt_leaves_no_temp),
      cmocka_unit_test(test_output_is_input),
      cmocka_unit_test(test_fifo_inputs),
      cmocka_unit_test(test_label_dtypes),
      cmocka_unit_test(test_label_range),
      cmocka_unit_test(test_run_uint8_input),
  };
  return cmocka_run_group_tests(tests, setup, NULL);
}
