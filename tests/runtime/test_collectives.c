/*
 * The collective conformance suite (STYLE.md 15): every collective kind x
 * every choice of mesh axes (each ordered, non-empty subset, so group-index
 * order differs from device order) x every dim, on the meshes 2, 8, 2x4 and
 * 2x2x2, through the whole path -- a hand-built partitioned function (local
 * types, module->mesh set), fuse, plan_memory, codegen, plan file, load,
 * kdc_rt_plan_run_local on the virtual devices -- against
 * kdc_ir_interpret_spmd, bitwise on every device (sums in the same
 * device-id order), on two runs, with the device-parallel schedule (threads
 * <= devices) and the step-by-step one (threads > devices).
 *
 * Every case runs twice, the second time with replicas sharing result
 * buffers (rt_test.h): the shared-replica write-once path of each backend.
 *
 * Backends: this executable runs the in-process shm backend; the process
 * backend (MPI and TCP transports) runs the same sweep (coll_sweep.h) in
 * tests/mpi/test_mpi_collectives.c; nccl needs a GPU: reported as skipped.
 * The sanitizer build samples the choices of axes (main).
 */
#include "coll_sweep.h"
#include "test_sampling.h"

static const char *const meshes[] = {"x=2", "x=8", "a=2,b=4", "a=2,b=2,c=2"};
enum { N_MESHES = sizeof meshes / sizeof meshes[0] };

/* f32 on both schedules; integer and bool dtypes on the first two choices */
static void test_mesh(void **state) {
  coll_sweep(*state, COLL_DEVICE_PARALLEL | COLL_STEPWISE, 2);
}

/* Large pieces: the chunk-parallel paths of every kind on the pool, both
 * schedules. */
static void test_large(void **state) {
  (void)state;
  coll_large(0);
}

/* The sweeps' second runs shared result buffers between replicas (an
 * all_reduce's or all_gather's group members, rt_test.h): the backend's
 * write-once path for shared replicas was exercised, and checked. */
static void test_shared_results(void **state) {
  (void)state;
  assert_true(rtt_shared_results > 0);
}

static void test_backends_not_built(void **state) {
  (void)state;
  skip(); /* nccl: no GPU here (tests/gpu); the process backend: tests/mpi */
}

int main(void) {
  /* Under the sanitizers (docs/testing.md) every 2nd choice of axes, the
   * first always: every collective kind on every mesh, both schedules and
   * the integer dtypes still run through the shm backend; the Release
   * build (or KDC_FULL_SWEEP=1) runs every choice. */
  if (kdc_test_sampled()) coll_sample = 2;
  struct CMUnitTest tests[N_MESHES + 3];
  for (int i = 0; i < N_MESHES; i++)
    tests[i] = (struct CMUnitTest){meshes[i], test_mesh, NULL, NULL, (void *)meshes[i]};
  tests[N_MESHES] = (struct CMUnitTest)cmocka_unit_test(test_large);
  tests[N_MESHES + 1] = (struct CMUnitTest)cmocka_unit_test(test_shared_results);
  tests[N_MESHES + 2] = (struct CMUnitTest)cmocka_unit_test(test_backends_not_built);
  return _cmocka_run_group_tests("collectives", tests, N_MESHES + 3, NULL, NULL);
}
