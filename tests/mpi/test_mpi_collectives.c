/*
 * The collective conformance suite on the process backend (comm_p2p.c),
 * run by ctest as 2 and 8 processes under mpirun (label mpi) and as 2 and
 * 4 processes started without it, meeting over TCP (tcp_run.sh, label
 * procs; loopback only): the sweep of the in-process suite
 * (tests/runtime/coll_sweep.h) -- every collective kind x every ordered
 * choice of mesh axes x every dim, on the meshes 2, 8, 2x4 and 2x2x2 (those
 * the process count divides; others are skipped with the reason), f32 plus
 * i32/i64/bool on the first choice -- and its large pieces, each also
 * through the reduce-scatter + all-gather all_reduce (uneven chunks
 * included: the same bits).  Every
 * process builds the same function, computes the oracle
 * kdc_ir_interpret_spmd for every device, compiles and loads the plan with
 * its share of the devices and checks ITS devices' results bitwise on two
 * runs: the sums are in device-id order, like the in-process backend.
 */
#include "runtime/coll_sweep.h"
#include "runtime/procs.h"
#include "test_sampling.h"

static kdc_rt_procs procs;

static bool divides(const char *mesh) {
  kdc_mesh m = rtt_mesh(mesh);
  if (kdc_mesh_devices(&m) % procs.n == 0) return true;
  printf("mesh %s: %lld devices are not divisible by %d processes\n", mesh,
         (long long)kdc_mesh_devices(&m), procs.n);
  return false;
}

static void test_mesh(void **state) {
  if (!divides(*state)) skip();
  coll_sweep(*state, COLL_DEVICE_PARALLEL, 1);
}

static void test_large(void **state) {
  (void)state;
  if (!divides("a=2,b=4")) skip();
  coll_large(1);
}

/* The reduce-scatter + all-gather path (the default from 2 MiB) on the
 * same sizes, and on every all_reduce of the sweep (uneven and empty chunks
 * included): the same bits as the exchange. */
static void test_large_by_reduce_scatter(void **state) {
  (void)state;
  if (!divides("a=2,b=4")) skip();
  static const int64_t shape[3] = {64, 64, 32}, odd[3] = {63, 65, 17};
  static const uint8_t b[1] = {1}, ab[2] = {0, 1};
  rtt_procs.large_bytes = 1;
  coll_case("a=2,b=4", b, 1, shape, KDC_DTYPE_F32, 1);
  coll_case("a=2,b=4", ab, 2, odd, KDC_DTYPE_F32, 1);
  coll_case("a=2,b=4", b, 1, odd, KDC_DTYPE_I32, 1);
  rtt_procs.large_bytes = 0;
}

static void test_sweep_by_reduce_scatter(void **state) {
  (void)state;
  if (!divides("a=2,b=4")) skip();
  rtt_procs.large_bytes = 1;
  coll_sweep("a=2,b=4", COLL_DEVICE_PARALLEL, 0);
  rtt_procs.large_bytes = 0;
}

int main(void) {
  kdc_status st = kdc_rt_procs_init(NULL, -1, -1, &procs);
  if (st) {
    fprintf(stderr, "%s\n", kdc_status_message(st));
    return 1;
  }
  /* The Release build (or KDC_FULL_SWEEP=1) runs the whole sweep across
   * processes; under the sanitizers (each case compiles a plan: minutes per
   * process) every 4th choice of axes still drives every collective
   * through the process backend's code, and the in-process suite runs the
   * whole sweep. */
  if (kdc_test_sampled()) coll_sample = 4;
  rtt_procs.n = procs.n;
  rtt_procs.id = procs.id;
  rtt_procs.net = procs.net;
  static const char *const meshes[] = {"x=2", "x=8", "a=2,b=4", "a=2,b=2,c=2"};
  struct CMUnitTest tests[7];
  for (int i = 0; i < 4; i++)
    tests[i] = (struct CMUnitTest){meshes[i], test_mesh, NULL, NULL, (void *)meshes[i]};
  tests[4] = (struct CMUnitTest)cmocka_unit_test(test_large);
  tests[5] = (struct CMUnitTest)cmocka_unit_test(test_large_by_reduce_scatter);
  tests[6] = (struct CMUnitTest)cmocka_unit_test(test_sweep_by_reduce_scatter);
  int rc = _cmocka_run_group_tests("procs_collectives", tests, 7, NULL, NULL);
  kdc_rt_procs_finish(&procs, rc != 0, NULL, 60);
  return rc;
}
