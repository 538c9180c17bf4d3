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
 * Backends: the in-process shm backend is the one built here; mpi and nccl
 * do not exist yet and are reported as skipped, not passed.
 */
#include "rt_test.h"

static const char *const meshes[] = {"x=2", "x=8", "a=2,b=4", "a=2,b=2,c=2"};
enum { N_MESHES = sizeof meshes / sizeof meshes[0] };

static const char *name(kdc_module *m, const char *fmt, int a, int b) {
  return kdc_arena_printf(m->arena, fmt, a, b);
}

/* One function with every collective over |axes| of a parameter of local
 * |shape| (rank 3) and dtype |dt|: the results are the collectives (some
 * reading the input and writing an output directly, some between kernels
 * in the arena). */
static void axes_case(const char *mesh, const uint8_t *axes, int n, const int64_t *shape,
                      kdc_dtype dt, int threads) {
  kdc_module *m = kdc_ir_module_create("coll");
  m->mesh = rtt_mesh(mesh);
  kdc_func *f = kdc_ir_func_create(m, "predict");
  kdc_type t = kdc_type_make(dt, 3, shape);
  kdc_value_id x = kdc_ir_parameter(f, KDC_PARAM_INPUT, "x", &t);
  int64_t k = kdc_mesh_axes_size(&m->mesh, n, axes);
  bool sums = dt != KDC_DTYPE_BOOL;
  if (sums) {
    kdc_ir_add_result(f, rtt_spmd(f, KDC_OP_ALL_REDUCE, x, n, axes, 0, 0, 0), "ar");
    kdc_value_id nx = kdc_ir_unary(f, KDC_OP_NEG, x);
    kdc_value_id r = rtt_spmd(f, KDC_OP_ALL_REDUCE, nx, n, axes, 0, 0, 0);
    kdc_ir_add_result(f, kdc_ir_unary(f, KDC_OP_NEG, r), "ar_between_kernels");
  }
  for (int d = 0; d < 3; d++) {
    kdc_ir_add_result(f, rtt_spmd(f, KDC_OP_ALL_GATHER, x, n, axes, d, 0, 0),
                      name(m, "ag%d", d, 0));
    if (shape[d] % k) continue;
    if (sums)
      kdc_ir_add_result(f, rtt_spmd(f, KDC_OP_REDUCE_SCATTER, x, n, axes, d, 0, 0),
                        name(m, "rs%d", d, 0));
    kdc_ir_add_result(f, rtt_spmd(f, KDC_OP_SHARD_SLICE, x, n, axes, d, 0, 0),
                      name(m, "ss%d", d, 0));
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
  rtt_check(m, f, threads);
  kdc_ir_module_destroy(m);
}

/* Calls |fn| on every ordered non-empty subset of the mesh's axes. */
static void each_axes(int naxes, uint8_t *axes, int n, void (*fn)(const uint8_t *, int, void *),
                      void *ctx) {
  if (n > 0) fn(axes, n, ctx);
  if (n >= naxes || n >= KDC_MAX_MESH_AXES) return;
  for (int a = 0; a < naxes; a++) {
    bool used = false;
    for (int i = 0; i < n; i++) used |= axes[i] == a;
    if (used) continue;
    axes[n] = (uint8_t)a;
    each_axes(naxes, axes, n + 1, fn, ctx);
  }
}

typedef struct sweep { const char *mesh; int64_t nd; int count; } sweep;

static void sweep_one(const uint8_t *axes, int n, void *ctx) {
  sweep *s = ctx;
  static const int64_t shape[3] = {8, 16, 8};
  /* f32 on both schedules; integer and bool dtypes on the first choices */
  axes_case(s->mesh, axes, n, shape, KDC_DTYPE_F32, 1);
  axes_case(s->mesh, axes, n, shape, KDC_DTYPE_F32, (int)s->nd + 1);
  if (s->count++ < 2) {
    axes_case(s->mesh, axes, n, shape, KDC_DTYPE_I32, 0);
    axes_case(s->mesh, axes, n, shape, KDC_DTYPE_I64, 0);
    axes_case(s->mesh, axes, n, shape, KDC_DTYPE_BOOL, 0);
  }
}

static void test_mesh(void **state) {
  const char *mesh = *state;
  kdc_mesh m = rtt_mesh(mesh);
  sweep s = {mesh, kdc_mesh_devices(&m), 0};
  uint8_t axes[KDC_MAX_MESH_AXES];
  each_axes(m.naxes, axes, 0, sweep_one, &s);
}

/* Large pieces (512 KiB per device): the chunk-parallel paths of every
 * kind on the pool, both schedules. */
static void test_large(void **state) {
  (void)state;
  static const int64_t shape[3] = {64, 64, 32};
  static const uint8_t b[1] = {1}, ab[2] = {0, 1}, ba[2] = {1, 0};
  axes_case("a=2,b=4", b, 1, shape, KDC_DTYPE_F32, 0);
  axes_case("a=2,b=4", ab, 2, shape, KDC_DTYPE_F32, 0);
  axes_case("a=2,b=4", ba, 2, shape, KDC_DTYPE_F32, 9);
}

static void test_backends_not_built(void **state) {
  (void)state;
  skip(); /* mpi and nccl backends: not built (issue 6); reported as skipped */
}

int main(void) {
  struct CMUnitTest tests[N_MESHES + 2];
  for (int i = 0; i < N_MESHES; i++)
    tests[i] = (struct CMUnitTest){meshes[i], test_mesh, NULL, NULL, (void *)meshes[i]};
  tests[N_MESHES] = (struct CMUnitTest)cmocka_unit_test(test_large);
  tests[N_MESHES + 1] = (struct CMUnitTest)cmocka_unit_test(test_backends_not_built);
  return _cmocka_run_group_tests("collectives", tests, N_MESHES + 2, NULL, NULL);
}
