/*
 * The executor's load path on a stand-in driver (fake_cuda.c as
 * libcuda.so.1 through LD_LIBRARY_PATH; CUDA builds): what kdc loads, in
 * what order, read from the start-up trace (docs/runtime.md).  Kernels do
 * not run on the fake, so no value is checked -- that is the GPU's
 * (tests/gpu/device_check.sh, bench/gpu_startup.sh).
 *   - cubin_or_ptx: a GEMM-free plan with a cubin for sm_90 runs on a 9.0
 *     GPU from the cubin, on a 10.0 GPU from the PTX, falls back to the PTX
 *     when the driver refuses the cubin, and is refused on an 8.9 GPU; a
 *     PTX-only plan says why it has no cubin; no LLVM, no CPU JIT, and
 *     neither cuBLAS nor NCCL is opened for a plan without GEMMs or
 *     collectives;
 *   - blas_on_second_thread: a plan with GEMMs opens cuBLAS on a second
 *     thread started before cuInit and joins it before the handle; NCCL is
 *     not opened;
 *   - devices: `kdc devices` lists the fake GPU and opens neither library.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/io.h"
#include "e2e/e2e_util.h"

#ifndef KDC_TEST_PTXAS
#define KDC_TEST_PTXAS ""
#endif

static void write_text(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fputs(text, f);
  fclose(f);
}

/* Phases of |want| must appear in |err| in that order. */
static void in_order(const char *err, const char *const *want) {
  const char *at = err;
  for (int i = 0; want[i]; i++) {
    const char *f = strstr(at, want[i]);
    if (!f) fail_msg("\"%s\" missing or out of order in\n%s", want[i], err);
    at = f + strlen(want[i]);
  }
}

static void run_fake(e2e_result *r, const char *cc, bool no_cubin, const char *plan,
                     const char *x, const char *y) {
  setenv("LD_LIBRARY_PATH", KDC_FAKE_CUDA_DIR, 1);
  setenv("KDC_TRACE_STARTUP", "1", 1);
  setenv("FAKE_CUDA_CC", cc, 1);
  if (no_cubin) setenv("FAKE_CUDA_NO_CUBIN", "1", 1);
  e2e_kdc(r, "run", plan, "--input", x, "--output", y, NULL);
  unsetenv("FAKE_CUDA_NO_CUBIN");
  unsetenv("FAKE_CUDA_CC");
  unsetenv("KDC_TRACE_STARTUP");
  unsetenv("LD_LIBRARY_PATH");
}

static char *compile(const char *model, const char *name, const char *ptxas) {
  char *plan = e2e_path(name);
  e2e_result r;
  setenv("KDC_PTXAS", ptxas, 1);
  e2e_kdc(&r, "compile", model, "-o", plan, "--batch", "8", "--target", "cuda", "--sm", "90", NULL);
  unsetenv("KDC_PTXAS");
  if (r.status != 0) fail_msg("compile: %s", r.err);
  return plan;
}

static void test_cubin_or_ptx(void **state) {
  (void)state;
  if (!*KDC_TEST_PTXAS) {
    printf("skipped: no ptxas at build time\n");
    skip();
  }
  char *model = e2e_path("tanh.json"), *x = e2e_path("tanh_x.npy"), *y = e2e_path("tanh_y.npy");
  write_text(model, "{\"class_name\": \"Sequential\", \"config\": {\"name\": \"s\", \"layers\": ["
                    "{\"class_name\": \"InputLayer\", \"config\": {\"batch_shape\": [null, 16], "
                    "\"name\": \"x\"}}, {\"class_name\": \"Activation\", \"config\": {\"name\": "
                    "\"t\", \"activation\": \"tanh\"}}]}}");
  int64_t dims[2] = {8, 16};
  float data[128] = {0};
  assert_null(kdc_npy_write(x, KDC_IO_DTYPE_F32, 2, dims, data));
  char *cubin = compile(model, "tanh_cubin.plan", KDC_TEST_PTXAS);
  char *ptx = compile(model, "tanh_ptx.plan", "none");
  e2e_result r;
  run_fake(&r, "9.0", false, cubin, x, y);
  if (r.status != 0) fail_msg("%s", r.err);
  static const char *const cubin_run[] = {
      "plan checked for placement", "CUDA driver loaded", "cuInit (ok)", "plan load:",
      "no LLVM, no CPU JIT (a CUDA plan)", "context + stream on GPU 0",
      "module loaded: cubin sm_90 (", "ptxas ", "on GPU 0 (sm_90)", "device memory",
      "weights uploaded", "first run: inputs queued (predict)", "first run: 1 steps queued",
      "first run: outputs downloaded", "outputs written", "exit (status 0)", NULL};
  in_order(r.err, cubin_run);
  assert_null(strstr(r.err, "cuBLAS"));
  assert_null(strstr(r.err, "NCCL"));
  assert_null(strstr(r.err, "second thread"));
  assert_null(strstr(r.err, "CPU JIT:"));
  assert_true(e2e_exists(y));
  run_fake(&r, "10.0", false, cubin, x, y);  /* another major: the PTX */
  if (r.status != 0) fail_msg("%s", r.err);
  static const char *const other[] = {"module loaded: PTX (driver JIT or its cache; the cubin is "
                                      "for another GPU) on GPU 0 (sm_100)", "exit (status 0)", NULL};
  in_order(r.err, other);
  run_fake(&r, "9.0", true, cubin, x, y);  /* the driver refuses the cubin: the PTX */
  if (r.status != 0) fail_msg("%s", r.err);
  static const char *const refused[] = {"cubin sm_90 refused by the driver: no kernel image is "
                                        "available", "(error 209): loading the PTX",
                                        "module loaded: PTX", "exit (status 0)", NULL};
  in_order(r.err, refused);
  run_fake(&r, "9.0", false, ptx, x, y);  /* PTX only: why */
  if (r.status != 0) fail_msg("%s", r.err);
  static const char *const ptx_only[] = {"module loaded: PTX (driver JIT or its cache; KDC_PTXAS="
                                         "none at compile time) on GPU 0 (sm_90)", NULL};
  in_order(r.err, ptx_only);
  run_fake(&r, "8.9", false, cubin, x, y);  /* too old for sm_90 */
  assert_int_not_equal(r.status, 0);
  if (!strstr(r.err, "compiled for sm_90 but GPU 0 is sm_89")) fail_msg("%s", r.err);
  assert_null(strstr(r.err, "module loaded"));
  free(model), free(x), free(y), free(cubin), free(ptx);
}

static void test_blas_on_second_thread(void **state) {
  (void)state;
  char *model = e2e_src("examples/mnist_mlp/model.json"), *plan = compile(model, "m.plan", "none");
  char *x = e2e_src("examples/mnist_mlp/input.npy"), *y = e2e_path("m_y.npy");
  e2e_result r;
  run_fake(&r, "9.0", false, plan, x, y);
  /* the fake cannot serve the CUDA runtime cuBLAS needs: cublasCreate (or
   * cuBLAS's absence) ends the run; what matters is the order before it */
  static const char *const want[] = {"CUDA driver loaded", "cuInit (ok)", "module loaded: PTX",
                                     "second thread joined", NULL};
  in_order(r.err, want);
  const char *b = strstr(r.err, "kdc: startup:");
  b = b ? strstr(b, "cuBLAS ") : NULL;
  if (!b || !strstr(r.err, "(dlopen libcublas + libcublasLt, on a second thread during cuInit)"))
    fail_msg("no cuBLAS line from the second thread:\n%s", r.err);
  assert_null(strstr(r.err, "NCCL"));
  if (r.status != 0)
    assert_true(strstr(r.err, "cublasCreate failed") || strstr(r.err, "cuBLAS cannot be loaded"));
  free(model), free(plan), free(x), free(y);
}

static void test_devices(void **state) {
  (void)state;
  e2e_result r;
  setenv("LD_LIBRARY_PATH", KDC_FAKE_CUDA_DIR, 1);
  setenv("KDC_TRACE_STARTUP", "1", 1);
  e2e_kdc(&r, "devices", NULL);
  unsetenv("KDC_TRACE_STARTUP");
  unsetenv("LD_LIBRARY_PATH");
  assert_int_equal(r.status, 0);
  if (!strstr(r.out, "Fake GPU 0")) fail_msg("%s", r.out);
  static const char *const want[] = {"main entered (devices)", "CUDA driver loaded", "cuInit (ok)",
                                     NULL};
  in_order(r.err, want);
  assert_null(strstr(r.err, "cuBLAS"));
  assert_null(strstr(r.err, "NCCL"));
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_cubin_or_ptx),
                                     cmocka_unit_test(test_blas_on_second_thread),
                                     cmocka_unit_test(test_devices)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
