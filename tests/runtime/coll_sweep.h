/*
 * tests/runtime/coll_sweep.h: the collective conformance sweep (STYLE.md
 * 15), shared by the in-process suite (tests/runtime/test_collectives.c,
 * shm backend) and the process suite (tests/mpi/test_mpi_collectives.c,
 * run under mpirun and over TCP): header-only, included once per test
 * executable after rt_test.h.
 *
 *   coll_case(mesh, axes, n, shape, dt, threads)  one function with every
 *       collective over |axes| of a parameter of local |shape| (rank 3) and
 *       dtype |dt| -- all_reduce (reading the input and writing an output
 *       directly, and between kernels in the arena), all_gather,
 *       reduce_scatter, shard_slice and all_to_all on every dim the group
 *       divides, collective_permute by 1, -1, 2 and the axis size --
 *       checked by rtt_check (bitwise against kdc_ir_interpret_spmd on this
 *       process's devices, two runs);
 *   coll_sweep(mesh, schedules, int_choices)  coll_case on every ordered
 *       non-empty choice of the mesh's axes (group-index order then
 *       differs from device order), f32 with each thread count of
 *       |schedules| (COLL_DEVICE_PARALLEL: 1 thread; COLL_STEPWISE: more
 *       threads than devices), plus i32, i64 and bool on the first
 *       |int_choices| choices; with coll_sample = k > 1, only every k-th
 *       choice (the first always);
 *   coll_large(threads)  pieces of 512 KiB and of 272 KiB (element count
 *       not divisible by the group: uneven chunks) per device on the mesh
 *       2x4: the pool's chunk-parallel paths in one process; across
 *       processes the exchange, and (tests/mpi) the reduce-scatter +
 *       all-gather all_reduce on the same sizes.
 */
#ifndef KDC_TESTS_RUNTIME_COLL_SWEEP_H
#define KDC_TESTS_RUNTIME_COLL_SWEEP_H

#include "rt_test.h"

enum { COLL_DEVICE_PARALLEL = 1, COLL_STEPWISE = 2 };

static CGT_UNUSED const char *coll_name(kdc_module *m, const char *fmt, int a, int b) {
  return kdc_arena_printf(m->arena, fmt, a, b);
}

static CGT_UNUSED void coll_case(const char *mesh, const uint8_t *axes, int n,
                                 const int64_t *shape, kdc_dtype dt, int threads) {
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
                      coll_name(m, "ag%d", d, 0));
    if (shape[d] % k) continue;
    if (sums)
      kdc_ir_add_result(f, rtt_spmd(f, KDC_OP_REDUCE_SCATTER, x, n, axes, d, 0, 0),
                        coll_name(m, "rs%d", d, 0));
    kdc_ir_add_result(f, rtt_spmd(f, KDC_OP_SHARD_SLICE, x, n, axes, d, 0, 0),
                      coll_name(m, "ss%d", d, 0));
    for (int d2 = 0; d2 < 3; d2++)
      kdc_ir_add_result(f, rtt_spmd(f, KDC_OP_ALL_TO_ALL, x, n, axes, d, d2, 0),
                        coll_name(m, "a2a_%d_%d", d, d2));
  }
  if (n == 1) {
    int64_t size = m->mesh.sizes[axes[0]];
    const int64_t shifts[] = {1, -1, 2, size};
    for (int i = 0; i < 4; i++)
      kdc_ir_add_result(f, rtt_spmd(f, KDC_OP_COLLECTIVE_PERMUTE, x, n, axes, 0, 0, shifts[i]),
                        coll_name(m, "cp%d", (int)shifts[i], 0));
  }
  rtt_check(m, f, threads);
  kdc_ir_module_destroy(m);
}

/* Calls |fn| on every ordered non-empty subset of the mesh's axes. */
static CGT_UNUSED void coll_each_axes(int naxes, uint8_t *axes, int n,
                                      void (*fn)(const uint8_t *, int, void *), void *ctx) {
  if (n > 0) fn(axes, n, ctx);
  if (n >= naxes || n >= KDC_MAX_MESH_AXES) return;
  for (int a = 0; a < naxes; a++) {
    bool used = false;
    for (int i = 0; i < n; i++) used |= axes[i] == a;
    if (used) continue;
    axes[n] = (uint8_t)a;
    coll_each_axes(naxes, axes, n + 1, fn, ctx);
  }
}

typedef struct coll_sweep_ctx {
  const char *mesh;
  int64_t nd;
  int schedules, int_choices, count, seen;
} coll_sweep_ctx;

/* 1: every choice of axes; k: every k-th (set by a suite that runs the
 * whole sweep in another configuration). */
static int coll_sample = 1;

static CGT_UNUSED void coll_sweep_one(const uint8_t *axes, int n, void *ctx) {
  coll_sweep_ctx *s = ctx;
  static const int64_t shape[3] = {8, 16, 8};
  if (s->seen++ % coll_sample) return;
  if (s->schedules & COLL_DEVICE_PARALLEL) coll_case(s->mesh, axes, n, shape, KDC_DTYPE_F32, 1);
  if (s->schedules & COLL_STEPWISE)
    coll_case(s->mesh, axes, n, shape, KDC_DTYPE_F32, (int)s->nd + 1);
  if (s->count++ < s->int_choices) {
    coll_case(s->mesh, axes, n, shape, KDC_DTYPE_I32, 0);
    coll_case(s->mesh, axes, n, shape, KDC_DTYPE_I64, 0);
    coll_case(s->mesh, axes, n, shape, KDC_DTYPE_BOOL, 0);
  }
}

static CGT_UNUSED void coll_sweep(const char *mesh, int schedules, int int_choices) {
  kdc_mesh m = rtt_mesh(mesh);
  coll_sweep_ctx s = {mesh, kdc_mesh_devices(&m), schedules, int_choices, 0, 0};
  uint8_t axes[KDC_MAX_MESH_AXES];
  coll_each_axes(m.naxes, axes, 0, coll_sweep_one, &s);
}

static CGT_UNUSED void coll_large(int threads) {
  static const int64_t shape[3] = {64, 64, 32}, odd[3] = {63, 65, 17};
  static const uint8_t b[1] = {1}, ab[2] = {0, 1}, ba[2] = {1, 0};
  coll_case("a=2,b=4", b, 1, shape, KDC_DTYPE_F32, threads);
  coll_case("a=2,b=4", ab, 2, shape, KDC_DTYPE_F32, threads);
  coll_case("a=2,b=4", ba, 2, shape, KDC_DTYPE_F32, threads ? threads : 9);
  coll_case("a=2,b=4", ab, 2, odd, KDC_DTYPE_F32, threads);
  coll_case("a=2,b=4", b, 1, odd, KDC_DTYPE_I32, threads);
}

#endif
