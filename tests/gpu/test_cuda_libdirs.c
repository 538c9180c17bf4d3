/*
 * Where kdc looks for cuBLAS and NCCL beyond the loader's own search
 * (runtime/cuda/libdirs.c; docs/gpu.md, "Bundle"), on a tree of fake
 * Python environments made by the test:
 *   - wheel_dirs: the nvidia/NAME/lib folders of $VIRTUAL_ENV,
 *     $CONDA_PREFIX, a $PATH entry's prefix (site-packages and
 *     dist-packages) and ~/.local are found, in that order, after the
 *     toolkit folder given; a folder without lib/, an environment without
 *     nvidia/, and a file named like a folder are not listed;
 *   - no_duplicates: the same environment reached twice (VIRTUAL_ENV and
 *     its bin/ on PATH, a symlinked lib64) is listed once.
 * No library is opened: what the dlopen of each folder gives is the
 * loader's business.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "runtime/cuda/libdirs.h"

static char root[256];

static void mkdirs(const char *rel) {
  char p[512];
  snprintf(p, sizeof p, "%s/%s", root, rel);
  for (char *s = p + strlen(root) + 1; *s; s++)
    if (*s == '/') {
      *s = 0;
      mkdir(p, 0755);
      *s = '/';
    }
  mkdir(p, 0755);
}

static char *at(const char *rel) {
  static char bufs[8][512];
  static int k;
  char *b = bufs[k++ % 8];
  snprintf(b, 512, "%s/%s", root, rel);
  return b;
}

/* Index of |want| (relative to root, resolved) in the list, or -1. */
static int find(char **d, size_t n, const char *rel) {
  char *real = realpath(at(rel), NULL);
  assert_non_null(real);
  int r = -1;
  for (size_t i = 0; i < n; i++)
    if (strcmp(d[i], real) == 0) r = (int)i;
  free(real);
  return r;
}

static int setup(void **state) {
  snprintf(root, sizeof root, "/tmp/kdc_libdirs_XXXXXX");
  assert_non_null(mkdtemp(root));
  mkdirs("tk/lib64");
  mkdirs("venv/bin");
  mkdirs("venv/lib/python3.12/site-packages/nvidia/cu13/lib");
  mkdirs("venv/lib/python3.12/site-packages/nvidia/nccl/lib");
  mkdirs("venv/lib/python3.12/site-packages/nvidia/cuda_nvcc/nvvm");  /* no lib/: not listed */
  mkdirs("conda/lib/python3.11/site-packages/nvidia/cublas/lib");
  mkdirs("usr/bin");
  mkdirs("usr/lib/python3/dist-packages/nvidia/nccl/lib");
  mkdirs("plain/bin");
  mkdirs("plain/lib/python3.10/site-packages/numpy");  /* no nvidia/ */
  mkdirs("home/.local/lib/python3.12/site-packages/nvidia/cu13/lib");
  mkdirs("file/lib/python3.12/site-packages/nvidia");
  FILE *f = fopen(at("file/lib/python3.12/site-packages/nvidia/x"), "w");  /* nvidia/x is a file */
  assert_non_null(f);
  fclose(f);
  char path[2048];
  snprintf(path, sizeof path, "%s:%s:%s:/nonexistent/bin", at("plain/bin"), at("usr/bin"),
           at("venv/bin"));
  setenv("PATH", path, 1);
  setenv("VIRTUAL_ENV", at("venv"), 1);
  setenv("CONDA_PREFIX", at("conda"), 1);
  setenv("HOME", at("home"), 1);
  (void)state;
  return 0;
}

static int teardown(void **state) {
  char cmd[600];
  snprintf(cmd, sizeof cmd, "/bin/rm -rf '%s'", root);  /* PATH is the test's */
  (void)state;
  return system(cmd) == 0 ? 0 : -1;
}

static void test_wheel_dirs(void **state) {
  char **d = NULL;
  size_t n = rt_cuda_lib_dirs(at("tk/lib64"), &d);
  int tk = find(d, n, "tk/lib64");
  int cu13 = find(d, n, "venv/lib/python3.12/site-packages/nvidia/cu13/lib");
  int nccl = find(d, n, "venv/lib/python3.12/site-packages/nvidia/nccl/lib");
  int conda = find(d, n, "conda/lib/python3.11/site-packages/nvidia/cublas/lib");
  int deb = find(d, n, "usr/lib/python3/dist-packages/nvidia/nccl/lib");
  int local = find(d, n, "home/.local/lib/python3.12/site-packages/nvidia/cu13/lib");
  assert_int_equal(tk, 0);  /* the toolkit first */
  assert_true(cu13 > tk && nccl > cu13);  /* glob order: cu13 before nccl */
  assert_true(conda > nccl);              /* VIRTUAL_ENV, then CONDA_PREFIX, */
  assert_true(deb > conda);               /* then PATH's prefixes, */
  assert_true(local > deb);               /* then ~/.local */
  for (size_t i = 0; i < n; i++) {
    assert_null(strstr(d[i], "cuda_nvcc"));
    assert_null(strstr(d[i], "/plain/"));
    assert_null(strstr(d[i], "/file/"));
  }
  rt_cuda_lib_dirs_free(d, n);
  (void)state;
}

static void test_no_duplicates(void **state) {
  /* the venv is VIRTUAL_ENV and on PATH; lib64 -> lib as venv makes it */
  assert_int_equal(symlink("lib", at("venv/lib64")), 0);
  char **d = NULL;
  size_t n = rt_cuda_lib_dirs(NULL, &d);
  for (size_t i = 0; i < n; i++)
    for (size_t j = i + 1; j < n; j++) assert_string_not_equal(d[i], d[j]);
  assert_true(find(d, n, "venv/lib/python3.12/site-packages/nvidia/cu13/lib") >= 0);
  assert_int_equal(find(d, n, "tk/lib64"), -1);  /* no toolkit given */
  rt_cuda_lib_dirs_free(d, n);
  (void)state;
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_wheel_dirs),
      cmocka_unit_test(test_no_duplicates),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
