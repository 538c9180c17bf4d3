/*
 * The CUDA target at run time (docs/gpu.md).
 *   - refused: a plan compiled with --target cuda, run where it cannot run,
 *     fails with the documented message and exit status (this machine has
 *     no GPU: "no CUDA device: cuInit failed: ..." exit 3 in a CUDA build,
 *     "this kdc was built without CUDA" exit 2 otherwise);
 *   - gpu_matches_cpu: with a usable CUDA device, the example models' CUDA
 *     results against the CPU plan's.  Skipped with the reason printed when
 *     kdc_rt_cuda_available says no (no device here; never faked).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "e2e/e2e_util.h"
#include "runtime/cuda_rt.h"

static const char *cuda_plan(void) {
  static char *plan;
  if (plan) return plan;
  plan = e2e_path("cuda.plan");
  char *model = e2e_src("examples/mnist_mlp/model.json");
  e2e_result r;
  e2e_kdc(&r, "compile", model, "-o", plan, "--target", "cuda", "--batch", "8", NULL);
  if (r.status != 0) fail_msg("compile --target cuda: %s", r.err);
  free(model);
  return plan;
}

static void test_refused(void **state) {
  (void)state;
  const char *plan = cuda_plan();
  kdc_status st = kdc_rt_cuda_available(plan);
  if (!st) {
    printf("a CUDA device is usable here: the refusal path is not exercised\n");
    skip();
  }
  kdc_status_free(st);
  char *x = e2e_src("examples/mnist_mlp/input.npy");
  char *y = e2e_path("y.npy");
  e2e_result r;
  e2e_kdc(&r, "run", plan, "--input", x, "--output", y, NULL);
#ifdef KDC_HAVE_CUDA
  assert_int_equal(r.status, 3);
  if (!strstr(r.err, "no CUDA device: cuInit failed:")) fail_msg("stderr: %s", r.err);
#else
  assert_int_equal(r.status, 2);
  if (!strstr(r.err, "this plan targets CUDA; this kdc was built without CUDA (toolkit not found)"))
    fail_msg("stderr: %s", r.err);
#endif
  assert_false(e2e_exists(y));
  free(x);
  free(y);
}

static void test_gpu_matches_cpu(void **state) {
  (void)state;
  kdc_status st = kdc_rt_cuda_available(cuda_plan());
  if (st) {
    printf("skipped: %s\n", kdc_status_message(st));
    kdc_status_free(st);
    skip();
  }
  fail_msg("a CUDA device is usable but this kdc has no CUDA executor to compare with");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_refused),
      cmocka_unit_test(test_gpu_matches_cpu),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
