/*
 * The collective conformance suite on the MPI backend (comm_mpi.c), run by
 * ctest under `mpirun -np 2` and `-np 8` (label mpi, loopback only): every
 * collective kind x every ordered choice of mesh axes x every dim, on the
 * meshes 2, 8, 2x4 and 2x2x2 (those the process count divides), f32 plus
 * i32/i64/bool on the first choices.  Every process builds the same
 * function, computes the oracle kdc_ir_interpret_spmd for every device,
 * compiles and loads the plan with its share of the devices
 * (n_processes = MPI size, process_id = rank) and checks ITS devices'
 * results bitwise on two runs: the sums are in device-id order, like the
 * in-process backend (tests/runtime/test_collectives.c).
 */
#include "runtime/rt_test.h"
#include "runtime/procs.h"

static kdc_rt_procs procs;

static const char *name(kdc_module *m, const char *fmt, int a, int b) {
  return kdc_arena_printf(m->arena, fmt, a, b);
}

static void check(kdc_module *m, kdc_func *f) {
  cgt_fail(kdc_ir_take_error(f), "builder");
  int64_t nd = kdc_mesh_devices(&m->mesh);
  size_t np = f->n_params, nr = f->n_results;
  kdc_tensor *args = rtt_inputs(f, nd);
  const kdc_tensor **argp = calloc((size_t)nd & 127, sizeof *argp);
  kdc_tensor **want = calloc((size_t)nd & 127, sizeof *want);
  for (int64_t d = 0; d < nd; d++) {
    argp[d] = args + d * (int64_t)np;
    want[d] = calloc(nr + 1, sizeof **want);
  }
  cgt_fail(kdc_ir_interpret_spmd(f, &m->mesh, argp, want), "interpret_spmd");
  cgt_fail(kdc_pass_fuse(m, NULL), "fuse");
  cgt_fail(kdc_pass_plan_memory(m, NULL), "plan_memory");
  const char *path = cgt_path("mpi.plan");
  cgt_fail(kdc_codegen_cpu_plan(m, NULL, path), "codegen");
  kdc_rt_plan *plan;
  kdc_rt_options ro = {.n_threads = 1, .collective_timeout_s = 20, .check_replicas = 1,
                       .n_processes = procs.n, .process_id = procs.id};
  cgt_fail(kdc_rt_plan_load_with(path, &ro, &plan), "load");
  const void ***in = calloc((size_t)nd & 127, sizeof *in);
  void ***out = calloc((size_t)nd & 127, sizeof *out);
  for (int64_t d = 0; d < nd; d++) {
    in[d] = calloc(np + 1, sizeof **in);
    out[d] = calloc(nr + 1, sizeof **out);
    for (size_t i = 0; i < np; i++) in[d][i] = argp[d][i].data;
    for (size_t r = 0; r < nr; r++) out[d][r] = malloc(kdc_type_bytes(&want[d][r].type) + 1);
  }
  int64_t per = nd / procs.n, d0 = per * procs.id, d1 = d0 + per;
  for (int rep = 0; rep < 2; rep++) {
    for (int64_t d = 0; d < nd; d++)
      for (size_t r = 0; r < nr; r++) memset(out[d][r], 0xa5, kdc_type_bytes(&want[d][r].type));
    cgt_fail(kdc_rt_plan_run_local(plan, 0, (const void *const *const *)in,
                                   (void *const *const *)out), "run_local");
    for (int64_t d = d0; d < d1; d++)
      for (size_t r = 0; r < nr; r++)
        if (memcmp(out[d][r], want[d][r].data, kdc_type_bytes(&want[d][r].type)))
          fail_msg("process %d: device %lld, result %zu (%s) differs from the SPMD interpreter",
                   procs.id, (long long)d, r, f->result_names[r] ? f->result_names[r] : "?");
  }
  kdc_rt_plan_release(plan);
  for (int64_t d = 0; d < nd; d++) {
    for (size_t r = 0; r < nr; r++) free(out[d][r]), free(want[d][r].data);
    for (size_t i = 0; i < np; i++) free(args[d * (int64_t)np + (int64_t)i].data);
    free(in[d]), free(out[d]), free(want[d]);
  }
  free(in), free(out), free(want), free(argp), free(args);
}

static void axes_case(const char *mesh, const uint8_t *axes, int n, const int64_t *shape,
                      kdc_dtype dt) {
  kdc_module *m = kdc_ir_module_create("coll");
  m->mesh = rtt_mesh(mesh);
  kdc_func *f = kdc_ir_func_create(m, "predict");
  kdc_type t = kdc_type_make(dt, 3, shape);
  kdc_value_id x = kdc_ir_parameter(f, KDC_PARAM_INPUT, "x", &t);
  int64_t k = kdc_mesh_axes_size(&m->mesh, n, axes);
  bool sums = dt != KDC_DTYPE_BOOL;
  if (sums) {
    kdc_ir_add_result(f, rtt_spmd(f, KDC_OP_ALL_REDUCE, x, n, axes, 0, 0, 0), "ar");
    kdc_value_id r = rtt_spmd(f, KDC_OP_ALL_REDUCE, kdc_ir_unary(f, KDC_OP_NEG, x), n, axes,
                              0, 0, 0);
    kdc_ir_add_result(f, kdc_ir_unary(f, KDC_OP_NEG, r), "ar_between_kernels");
  }
  for (int d = 0; d < 3; d++) {
    kdc_ir_add_result(f, rtt_spmd(f, KDC_OP_ALL_GATHER, x, n, axes, d, 0, 0),
                      name(m, "ag%d", d, 0));
    if (shape[d] % k) continue;
    if (sums)
      kdc_ir_add_result(f, rtt_spmd(f, KDC_OP_REDUCE_SCATTER, x, n, axes, d, 0, 0),
                        name(m, "rs%d", d, 0));
    for (int d2 = 0; d2 < 3; d2++)
      kdc_ir_add_result(f, rtt_spmd(f, KDC_OP_ALL_TO_ALL, x, n, axes, d, d2, 0),
                        name(m, "a2a_%d_%d", d, d2));
  }
  if (n == 1) {
    int64_t size = m->mesh.sizes[axes[0]];
    const int64_t shifts[] = {1, -1, 2, size};
    for (int i = 0; i < 4; i++)
      kdc_ir_add_result(f, rtt_spmd(f, KDC_OP_COLLECTIVE_PERMUTE, x, n, axes, 0, 0, shifts[i]),
                        name(m, "cp%d", (int)shifts[i], 0));
  }
  check(m, f);
  kdc_ir_module_destroy(m);
}

static void each_axes(const char *mesh, int naxes, uint8_t *axes, int n, int *count) {
  static const int64_t shape[3] = {8, 16, 8};
  if (n > 0) {
    axes_case(mesh, axes, n, shape, KDC_DTYPE_F32);
    if ((*count)++ < 1) {
      axes_case(mesh, axes, n, shape, KDC_DTYPE_I32);
      axes_case(mesh, axes, n, shape, KDC_DTYPE_I64);
      axes_case(mesh, axes, n, shape, KDC_DTYPE_BOOL);
    }
  }
  for (int a = 0; a < naxes; a++) {
    bool used = false;
    for (int i = 0; i < n; i++) used |= axes[i] == a;
    if (used) continue;
    axes[n] = (uint8_t)a;
    each_axes(mesh, naxes, axes, n + 1, count);
  }
}

static void test_mesh(void **state) {
  const char *mesh = *state;
  kdc_mesh m = rtt_mesh(mesh);
  if (kdc_mesh_devices(&m) % procs.n) {
    printf("mesh %s: %lld devices are not divisible by %d processes\n", mesh,
           (long long)kdc_mesh_devices(&m), procs.n);
    skip();
  }
  uint8_t axes[KDC_MAX_MESH_AXES];
  int count = 0;
  each_axes(mesh, m.naxes, axes, 0, &count);
}

int main(void) {
  kdc_status st = kdc_rt_procs_init(NULL, -1, -1, &procs);
  if (st) {
    fprintf(stderr, "%s\n", kdc_status_message(st));
    return 1;
  }
  static const char *const meshes[] = {"x=2", "x=8", "a=2,b=4", "a=2,b=2,c=2"};
  struct CMUnitTest tests[4];
  for (int i = 0; i < 4; i++)
    tests[i] = (struct CMUnitTest){meshes[i], test_mesh, NULL, NULL, (void *)meshes[i]};
  int rc = _cmocka_run_group_tests("mpi_collectives", tests, 4, NULL, NULL);
  kdc_rt_procs_finish(&procs, rc != 0, 60);
  return rc;
}
