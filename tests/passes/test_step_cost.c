/*
 * The cost model of --layout auto (passes/step_cost.c) on a Megatron MLP:
 * x [16,6] split on the batch over data of [data=2, model=4], W1 [6,8]
 * column-split and W2 [8,2] row-split over model, through the whole
 * pipeline.  Each device then computes x_l [8,6] @ W1_l [6,2] -> relu ->
 * @ W2_l [2,2] and one all_reduce over model of y [8,2].  Every number is
 * checked against that hand count with an explicit machine:
 *   flops       2*8*2*6 + 2*8*2*2 = 256
 *   collective  2(n-1)/n * 64 bytes = 96 bytes, n = 4; time latency + 96 / bw
 *   weights     (6*2 + 2*2) * 4 = 64 bytes; inputs/outputs 8*6*4 + 8*2*4 = 256
 *   peak        weights + inputs/outputs + the function's arena
 *   step        compute * devices / lanes + collectives; each GEMM at least
 *               max(flops / rate, bytes / rate) + step_s
 * and a collective over an axis the machine names takes that axis's link.
 *
 * test_shared_mesh: what the runtime does on one process's virtual mesh
 * (shared_gathers): a GEMM stacked over the devices reads its replicated
 * weight once (1/8 of its bytes per device), a weight update's all_gather
 * of a GEMM-written piece and an input's all_to_all cost nothing, and
 * every other collective costs sync_s more (it ends a device-parallel
 * segment) and moves the whole mesh's bytes in the host's memory (every
 * device's operand read, every distinct result written: one per group for
 * an arena result, one per distinct piece for a function result) at
 * bytes_per_s;
 * without shared_gathers (processes) all of them are ordinary.
 *
 * test_slice_read: a fused kernel that slices its piece of a replicated
 * weight (the sharded update) reads the piece, not the weight.
 *
 * test_narrow_gemm: with gemm_m0 / gemm_n0 a GEMM of m rows and n columns
 * runs at gemm_flops_per_s (1 + m0/512 + n0/512) / (1 + m0/m + n0/n); a
 * GEMM stacked over the devices counts every local device's rows.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <math.h>

#include "passes/passes.h"

static const char *const MODEL =
    "module @megatron {\n"
    "  mesh [data=2, model=4]\n"
    "  weight \"w1\" : f32[6,8]\n"
    "  weight \"w2\" : f32[8,2]\n"
    "  func @predict {\n"
    "    %x = parameter 0 input \"x\" : f32[16,6] {data,-}\n"
    "    %w1 = parameter 1 weight \"w1\" : f32[6,8] {-,model}\n"
    "    %w2 = parameter 2 weight \"w2\" : f32[8,2] {model,-}\n"
    "    %h0 = dot_general %x, %w1 lhs_contract=[1] rhs_contract=[0] : f32[16,8]\n"
    "    %z = constant 0 : f32[16,8]\n"
    "    %h = max %h0, %z : f32[16,8]\n"
    "    %y = dot_general %h, %w2 lhs_contract=[1] rhs_contract=[0] : f32[16,2]\n"
    "    return %y \"y\"\n"
    "  }\n"
    "}\n";

static kdc_module *compiled(void) {
  kdc_module *m = NULL;
  kdc_status st = kdc_ir_parse_module(MODEL, "megatron", &m);
  if (!st) st = kdc_pass_pipeline_run(m, NULL);
  if (st) fail_msg("%s", kdc_status_message(st));
  return m;
}

static kdc_machine machine(int lanes) {
  kdc_machine mc;
  memset(&mc, 0, sizeof mc);
  mc.gemm_flops_per_s = 1e9;
  mc.bytes_per_s = 2e9;
  mc.step_s = 1e-6;
  mc.lanes = lanes;
  mc.default_axis.latency_s = 1e-5;
  mc.default_axis.bytes_per_s = 1e9;
  return mc;
}

static void test_megatron_counts(void **state) {
  (void)state;
  kdc_module *m = compiled();
  const kdc_func *f = kdc_ir_module_find_func(m, "predict");
  kdc_machine mc = machine(0);
  kdc_step_cost c;
  assert_null(kdc_step_cost_of(m, f, &mc, &c));
  assert_true(c.flops == 256);
  assert_int_equal(c.n_collectives, 1);
  assert_true(fabs(c.coll_bytes - 96) < 1e-9);
  assert_true(fabs(c.coll_s - (1e-5 + 96 / 1e9)) < 1e-15);
  assert_int_equal(c.weight_bytes, 64);
  assert_int_equal(c.io_bytes, 256);
  assert_int_equal(c.arena_bytes, kdc_pass_plan_memory_arena_bytes(f));
  assert_int_equal(c.peak_bytes, 64 + 256 + c.arena_bytes);
  /* GEMM 1 reads x_l (192 B) + W1_l (48 B), writes 64 B: 304 B at 2e9/s
   * beats 192 flops at 1e9/s; GEMM 2: 64 + 16 + 64 = 144 B vs 64 flops */
  double gemms = 304 / 2e9 + 144 / 2e9 + 2e-6;
  assert_true(c.compute_s >= gemms - 1e-15);
  assert_true(c.compute_s <= gemms + 4 * (1e-6 + 256 / 2e9));  /* plus a few small kernels */
  assert_true(fabs(c.step_s - (c.compute_s + c.coll_s)) < 1e-15);  /* lanes 0: all at once */
  /* 8 devices on 2 lanes: compute 4 times over, collectives once */
  mc = machine(2);
  kdc_step_cost c2;
  assert_null(kdc_step_cost_of(m, f, &mc, &c2));
  assert_true(fabs(c2.step_s - (4 * c.compute_s + c.coll_s)) < 1e-15);
  /* a link named for the model axis */
  mc = machine(0);
  mc.n_axes = 1;
  snprintf(mc.axes[0].name, sizeof mc.axes[0].name, "model");
  mc.axes[0].latency_s = 1e-3;
  mc.axes[0].bytes_per_s = 1e6;
  assert_null(kdc_step_cost_of(m, f, &mc, &c2));
  assert_true(fabs(c2.coll_s - (1e-3 + 96 / 1e6)) < 1e-15);
  kdc_ir_module_destroy(m);
}

/* Partitioned already (local types), one device of [data=8]. */
static const char *const SHARED =
    "module @shared {\n"
    "  mesh [data=8]\n"
    "  weight \"w\" : f32[256,512]\n"
    "  func @train_step {\n"
    "    %x = parameter 0 input \"x\" : f32[8,256]\n"
    "    %w = parameter 1 weight \"w\" : f32[256,512] {-,-}\n"
    "    %xs = parameter 2 input \"xs\" : f32[8,32]\n"
    "    %h = dot_general %x, %w lhs_contract=[1] rhs_contract=[0] : f32[8,512]\n"
    "    %r = all_reduce [data] %h : f32[8,512]\n"
    "    %gp = dot_general %xs, %r lhs_contract=[0] rhs_contract=[0] : f32[32,512]\n"
    "    %lr = constant 0.5 : f32[32,512]\n"
    "    %u = mul %gp, %lr : f32[32,512]\n"
    "    %wn = all_gather [data] %u dim=0 : f32[256,512]\n"
    "    %xt = all_to_all [data] %x split=1 concat=0 : f32[64,32]\n"
    "    %q = all_gather [data] %xs dim=0 : f32[64,32]\n"
    "    return %wn \"w\", %xt \"xt\", %q \"q\"\n"
    "  }\n"
    "}\n";

/* |text| parsed (already partitioned), fused and memory-planned. */
static kdc_module *planned(const char *text, const char *name) {
  kdc_module *m = NULL;
  kdc_status st = kdc_ir_parse_module(text, name, &m);
  if (!st) st = kdc_pass_run_list(m, "verify,fuse,plan_memory", NULL);
  if (st) fail_msg("%s", kdc_status_message(st));
  return m;
}

static void test_shared_mesh(void **state) {
  (void)state;
  kdc_module *m = planned(SHARED, "shared");
  const kdc_func *f = kdc_ir_module_find_func(m, "train_step");
  kdc_machine mc = machine(0);
  mc.sync_s = 1e-3;
  kdc_step_cost shared, procs;
  mc.shared_gathers = true;
  assert_null(kdc_step_cost_of(m, f, &mc, &shared));
  mc.shared_gathers = false;
  assert_null(kdc_step_cost_of(m, f, &mc, &procs));
  assert_int_equal(shared.n_collectives, 4);
  assert_int_equal(procs.n_collectives, 4);
  assert_int_equal(shared.n_syncs, 2);  /* the all_reduce and the input's all_gather */
  assert_int_equal(procs.n_syncs, 4);
  double ar = 2.0 * 7 / 8 * 8 * 512 * 4;  /* all_reduce bytes per device */
  double ag = 7.0 / 8 * 64 * 32 * 4;      /* all_gather bytes per device */
  assert_true(fabs(shared.coll_bytes - (ar + ag)) < 1e-6);
  /* in memory: the all_reduce reads 8 operands of 16 KiB and writes one
   * shared result (an arena value, one group); the all_gather of q (a
   * function result, replicated: one piece) reads 8 pieces of 1 KiB and
   * writes one result of 8 KiB */
  double moved = (8 * 16384.0 + 16384) + (8 * 1024.0 + 8192);
  assert_true(fabs(shared.coll_s - (2 * (1e-5 + 1e-3) + moved / 2e9)) < 1e-12);
  /* processes: per-device bytes over the links */
  assert_true(fabs(procs.coll_s - shared.coll_s) > 1e-4);
  assert_true(procs.coll_bytes > ar + ag + 32 * 512 * 4);
  /* the first GEMM: 2*8*512*256 = 2^21 flops (2.1 ms at 1e9/s) against
   * x 8 KiB + w 512 KiB + h 16 KiB at 2e9/s -- make bytes win to see w's share */
  mc.gemm_flops_per_s = 1e12;
  mc.shared_gathers = true;
  assert_null(kdc_step_cost_of(m, f, &mc, &shared));
  mc.shared_gathers = false;
  assert_null(kdc_step_cost_of(m, f, &mc, &procs));
  double w = 256.0 * 512 * 4;
  assert_true(fabs((procs.compute_s - shared.compute_s) - (w - w / 8) / 2e9) < 1e-12);
  kdc_ir_module_destroy(m);
}

static void test_slice_read(void **state) {
  (void)state;
  static const char *const text =
      "module @slice {\n"
      "  mesh [data=8]\n"
      "  weight \"w\" : f32[256,512]\n"
      "  func @train_step {\n"
      "    %w = parameter 0 weight \"w\" : f32[256,512] {-,-}\n"
      "    %g = parameter 1 input \"g\" : f32[32,512]\n"
      "    %ws = shard_slice [data] %w dim=0 : f32[32,512]\n"
      "    %n = sub %ws, %g : f32[32,512]\n"
      "    return %n \"n\"\n"
      "  }\n"
      "}\n";
  kdc_module *m = planned(text, "slice");
  const kdc_func *f = kdc_ir_module_find_func(m, "train_step");
  kdc_machine mc = machine(0);
  kdc_step_cost c;
  assert_null(kdc_step_cost_of(m, f, &mc, &c));
  /* one kernel: w's piece (64 KiB, not 512 KiB) and g in, n out */
  assert_int_equal(c.n_steps, 1);
  double piece = 32 * 512 * 4;
  assert_true(fabs(c.mem_bytes - 3 * piece) < 1e-6);
  assert_true(fabs(c.compute_s - (3 * piece / 2e9 + 1e-6)) < 1e-15);
  kdc_ir_module_destroy(m);
}

/* gemm_flops_per_s scaled by the narrow-GEMM penalty */
static double narrow(const kdc_machine *mc, double m, double n) {
  return mc->gemm_flops_per_s * (1 + mc->gemm_m0 / 512 + mc->gemm_n0 / 512) /
         (1 + mc->gemm_m0 / m + mc->gemm_n0 / n);
}

static void test_narrow_gemm(void **state) {
  (void)state;
  /* the Megatron MLP: GEMM 1 [8,6] x [6,2] (192 flops), GEMM 2 [8,2] x
   * [2,2] (64 flops), both m 8, n 2; memory made free so flops decide */
  kdc_module *m = compiled();
  const kdc_func *f = kdc_ir_module_find_func(m, "predict");
  kdc_machine mc = machine(0);
  mc.bytes_per_s = 1e18;
  kdc_step_cost flat, pen;
  assert_null(kdc_step_cost_of(m, f, &mc, &flat));
  mc.gemm_m0 = 12, mc.gemm_n0 = 21.5;
  assert_null(kdc_step_cost_of(m, f, &mc, &pen));
  assert_true(fabs(flat.compute_s - (256 / 1e9 + flat.n_steps * 1e-6)) < 1e-12);
  assert_true(fabs(pen.compute_s - (256 / narrow(&mc, 8, 2) + pen.n_steps * 1e-6)) < 1e-12);
  /* m 8, n 2: 12 times below the 512^3 rate */
  assert_true(pen.compute_s - pen.n_steps * 1e-6 > 10 * (flat.compute_s - flat.n_steps * 1e-6));
  kdc_ir_module_destroy(m);
  /* the shared mesh's stacked GEMM: 8 devices x 8 rows = 64 rows, 512
   * columns (2^21 flops per device); gp [32,512] = xs^T r: m 32, n 512 */
  m = planned(SHARED, "shared");
  f = kdc_ir_module_find_func(m, "train_step");
  mc = machine(0);
  mc.bytes_per_s = 1e18, mc.default_axis.bytes_per_s = 1e18;
  mc.gemm_m0 = 12, mc.gemm_n0 = 21.5;
  mc.shared_gathers = true;
  assert_null(kdc_step_cost_of(m, f, &mc, &pen));
  double g1 = 2.0 * 8 * 512 * 256, g2 = 2.0 * 32 * 512 * 8;
  double want = g1 / narrow(&mc, 64, 512) + g2 / narrow(&mc, 32, 512);
  assert_true(fabs(pen.compute_s - (want + pen.n_steps * 1e-6)) < 1e-9);
  kdc_ir_module_destroy(m);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_megatron_counts),
      cmocka_unit_test(test_shared_mesh),
      cmocka_unit_test(test_slice_read),
      cmocka_unit_test(test_narrow_gemm),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
