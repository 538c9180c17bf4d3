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

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_megatron_counts),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
