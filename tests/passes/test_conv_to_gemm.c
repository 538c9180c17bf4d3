/*
 * passes/conv_to_gemm.c: random convolutions (1-D and 2-D, batch, strides,
 * padding including negative, kernel dilation, 1x1) interpreted before and
 * after the pass agree within the stated tolerance: |got - want| <=
 * 1e-5 * K * max(1, |want|), K the contraction length (taps * Ci); rewritten
 * ones contain no convolution and one dot; weight-gradient shaped ones
 * (many taps, few output positions) take the per-output-position form,
 * cut from x and reading g in place when the operands are conv_dw's
 * transposes, per image (a batched dot and a sum) when its GEMM fits one
 * runtime block; the depthwise weight gradient becomes column reductions;
 * grouped and lhs-dilated ones are left alone; the result fuses into one patch kernel; and one SPMD case
 * (batch and output-channel splits) runs seed, propagate, partition and the
 * pass, then kdc_ir_interpret_spmd against the global reference; the
 * batch-split depthwise weight gradient (both operands gathered by the
 * partitioner) becomes local column reductions + one all_reduce, no
 * all_gather left, equal to the whole-batch reference on both devices.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "passes/passes.h"

static uint64_t rng_state;
static uint32_t rnd(void) {
  rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
  return (uint32_t)(rng_state >> 33);
}
static int64_t rnd_in(int64_t lo, int64_t hi) { return lo + (int64_t)(rnd() % (uint32_t)(hi - lo + 1)); }

static void fill(kdc_tensor *t) {
  int64_t n = kdc_type_numel(&t->type);
  float *p = malloc((size_t)(n ? n : 1) * sizeof *p);
  for (int64_t i = 0; i < n; i++) p[i] = (float)((int)(rnd() % 2001) - 1000) / 250.0f;
  t->data = p;
}

static int count(const kdc_func *f, kdc_op op) {
  int k = 0;
  for (size_t i = 0; i < f->n_nodes; i++) k += f->nodes[i].op == op;
  return k;
}

/* A module computing relu(conv(x, w)) + 1 (so the conv is not the result). */
static kdc_module *build(int n, const int64_t *xd, const int64_t *wd, const kdc_attr_conv *a,
                         bool tail) {
  kdc_module *m = kdc_ir_module_create("c");
  kdc_func *f = kdc_ir_func_create(m, "predict");
  kdc_type xt = kdc_type_make(KDC_DTYPE_F32, n + 2, xd), wt = kdc_type_make(KDC_DTYPE_F32, n + 2, wd);
  kdc_value_id x = kdc_ir_parameter(f, KDC_PARAM_INPUT, "x", &xt);
  kdc_value_id w = kdc_ir_parameter(f, KDC_PARAM_INPUT, "w", &wt);
  kdc_value_id y = kdc_ir_convolution(f, x, w, a);
  if (tail) y = kdc_ir_binary_scalar(f, KDC_OP_ADD, y, 1.0);
  kdc_ir_add_result(f, y, "y");
  kdc_status st = kdc_ir_take_error(f);
  if (st) fail_msg("%s", kdc_status_message(st));
  return m;
}

/* Interprets |f| on |args|; returns the single result (caller frees). */
static kdc_tensor interp(const kdc_func *f, const kdc_tensor *args) {
  kdc_tensor out;
  kdc_status st = kdc_ir_interpret(f, args, 2, &out);
  if (st) fail_msg("%s", kdc_status_message(st));
  return out;
}

static void check_close(const kdc_tensor *got, const kdc_tensor *want, int64_t K) {
  assert_true(kdc_type_equal(&got->type, &want->type));
  const float *g = got->data, *w = want->data;
  for (int64_t i = 0; i < kdc_type_numel(&want->type); i++) {
    double sc = fabs(w[i]) > 1 ? fabs(w[i]) : 1;
    if (!(fabs((double)g[i] - w[i]) <= 1e-5 * (double)K * sc))
      fail_msg("element %lld: %g vs %g (K=%lld)", (long long)i, g[i], w[i], (long long)K);
  }
}

static bool before_after_dots(kdc_module *m, int64_t K, int dots);

/* Runs the pass on |m| and compares with the interpretation before; returns
 * whether it rewrote the convolution (into one dot). */
static bool before_after(kdc_module *m, int64_t K) { return before_after_dots(m, K, 1); }

/* The same with |dots| dots expected after a rewrite. */
static bool before_after_dots(kdc_module *m, int64_t K, int dots) {
  kdc_func *f = m->funcs[0];
  kdc_tensor args[2];
  for (int i = 0; i < 2; i++) {
    args[i].type = f->nodes[f->params[i]].type;
    fill(&args[i]);
  }
  kdc_tensor want = interp(f, args);
  assert_null(kdc_pass_run_one(m, "conv_to_gemm", NULL));
  assert_null(kdc_ir_verify_module(m));
  kdc_tensor got = interp(f, args);
  check_close(&got, &want, K);
  bool rewritten = count(f, KDC_OP_CONVOLUTION) == 0;
  if (rewritten) assert_int_equal(count(f, KDC_OP_DOT), dots);
  /* and it still fuses, with the same numbers */
  assert_null(kdc_pass_run_one(m, "fuse", NULL));
  kdc_tensor fused = interp(f, args);
  check_close(&fused, &want, K);
  free(got.data), free(want.data), free(fused.data);
  free(args[0].data), free(args[1].data);
  return rewritten;
}

static void test_random_convs(void **state) {
  (void)state;
  int rewrote = 0;
  for (uint64_t seed = 1; seed <= 300; seed++) {
    rng_state = seed;
    int n = (int)rnd_in(1, 2);
    kdc_attr_conv a;
    kdc_attr_conv_init(&a, n);
    int64_t xd[KDC_MAX_RANK], wd[KDC_MAX_RANK], taps = 1;
    xd[0] = rnd_in(1, 3);
    int64_t ci = rnd_in(1, 5), co = rnd_in(1, 6);
    bool ok = true;
    for (int d = 0; d < n; d++) {
      wd[d] = rnd_in(1, seed % 7 == 0 ? 1 : 4);
      a.stride.v[d] = rnd_in(1, 3);
      a.rhs_dilation.v[d] = rnd() % 4 == 0 ? 2 : 1;
      a.pad_low.v[d] = rnd_in(-1, 2);
      a.pad_high.v[d] = rnd_in(-1, 2);
      if (seed % 7 == 0) a.pad_low.v[d] = a.pad_high.v[d] = 0, a.stride.v[d] = 1;
      xd[d + 1] = rnd_in(1, 9);
      int64_t pd = xd[d + 1] + a.pad_low.v[d] + a.pad_high.v[d];
      int64_t kd = (wd[d] - 1) * a.rhs_dilation.v[d] + 1;
      ok &= pd >= kd;
      taps *= wd[d];
    }
    if (!ok) continue;
    xd[n + 1] = wd[n] = ci;
    wd[n + 1] = co;
    kdc_module *m = build(n, xd, wd, &a, seed % 2 == 0);
    rewrote += before_after(m, taps * ci) ? 1 : 0;
    kdc_ir_module_destroy(m);
  }
  assert_true(rewrote > 100);
}

/* Weight-gradient shaped convolutions (more than 64 kernel taps, at most 64
 * output positions: the kernel is an activation map) take the per-output-
 * position form: same numbers, one dot, no convolution.  Random 1-D and 2-D
 * cases with strides, kernel dilation and padding, and the exact weight
 * gradient of a 3x3 "same" conv on 16x16 (kdc_autodiff's conv_dw form). */
static void test_weight_gradient_form(void **state) {
  (void)state;
  int rewrote = 0;
  for (uint64_t seed = 1; seed <= 60; seed++) {
    rng_state = seed * 977;
    int n = (int)rnd_in(1, 2);
    kdc_attr_conv a;
    kdc_attr_conv_init(&a, n);
    int64_t xd[KDC_MAX_RANK], wd[KDC_MAX_RANK], taps = 1;
    xd[0] = rnd_in(1, 3);
    int64_t ci = rnd_in(1, 4), co = rnd_in(1, 5);
    for (int d = 0; d < n; d++) {
      wd[d] = n == 1 ? rnd_in(65, 90) : rnd_in(9, 12);
      a.stride.v[d] = rnd_in(1, 2);
      a.rhs_dilation.v[d] = rnd_in(1, 2);
      a.pad_low.v[d] = rnd_in(-1, 2);
      a.pad_high.v[d] = rnd_in(-1, 2);
      int64_t kd = (wd[d] - 1) * a.rhs_dilation.v[d] + 1;
      xd[d + 1] = kd - a.pad_low.v[d] - a.pad_high.v[d] + rnd_in(0, 3) * a.stride.v[d];
      taps *= wd[d];
    }
    xd[n + 1] = wd[n] = ci;
    wd[n + 1] = co;
    kdc_module *m = build(n, xd, wd, &a, seed % 2 == 0);
    bool r = before_after(m, taps * ci);
    if (r) assert_int_equal(count(m->funcs[0], KDC_OP_TRANSPOSE), 1);
    rewrote += r;
    kdc_ir_module_destroy(m);
  }
  assert_true(rewrote >= 50);
  /* dW of y = conv(x [2,16,16,3], w [3,3,3,4], same): lhs x^T [3,16,16,2],
   * rhs g^T [16,16,2,4], pad 1/1 -> [3,3,3,4] */
  kdc_attr_conv a;
  kdc_attr_conv_init(&a, 2);
  a.pad_low.v[0] = a.pad_low.v[1] = a.pad_high.v[0] = a.pad_high.v[1] = 1;
  int64_t xd[4] = {3, 16, 16, 2}, wd[4] = {16, 16, 2, 4};
  kdc_module *m = build(2, xd, wd, &a, false);
  assert_true(before_after(m, 16 * 16 * 2));
  kdc_ir_module_destroy(m);
}

/* Random strides, kernel dilations and padding (low >= |lo_min|) of a
 * weight-gradient-shaped convolution whose "kernel" has the spatial dims
 * gd[1..n], and input sizes xd[1..n] that fit a few output positions;
 * returns the product of gd[1..n]. */
static int64_t random_spatial(int n, int64_t lo_min, kdc_attr_conv *a, int64_t *xd,
                              const int64_t *gd) {
  int64_t K = 1;
  for (int d = 0; d < n; d++) {
    a->stride.v[d] = rnd_in(1, 2);
    a->rhs_dilation.v[d] = rnd_in(1, 2);
    a->pad_low.v[d] = rnd_in(lo_min, 2);
    a->pad_high.v[d] = rnd_in(-1, 2);
    int64_t kd = (gd[d + 1] - 1) * a->rhs_dilation.v[d] + 1;
    xd[d + 1] = kd - a->pad_low.v[d] - a->pad_high.v[d] + rnd_in(0, 3) * a->stride.v[d];
    if (xd[d + 1] < 1) xd[d + 1] = 1, a->pad_high.v[d] = kd - 1 - a->pad_low.v[d];
    K *= gd[d + 1];
  }
  return K;
}

/* The weight gradient as passes/grad_window.c conv_dw spells it: lhs = x
 * [N, S.., Ci] transposed to [Ci, S.., N], rhs = g [N, O.., Co] transposed
 * to [O.., N, Co].  The pass cuts the patches from x and reads g in place
 * (no transpose left but the result's, the dot's operands are the patches
 * and g itself); random 1-D and 2-D strides, dilations and paddings, with
 * few and with many (> 64) taps, agree with the direct convolution. */
static void test_weight_gradient_natural(void **state) {
  (void)state;
  int natural = 0;
  for (uint64_t seed = 1; seed <= 60; seed++) {
    rng_state = seed * 131;
    int n = (int)rnd_in(1, 2), r = n + 2;
    kdc_attr_conv a;
    kdc_attr_conv_init(&a, n);
    int64_t xd[KDC_MAX_RANK], gd[KDC_MAX_RANK], K = 1;
    int64_t nb = rnd_in(1, 3), ci = rnd_in(1, 4), co = rnd_in(1, 5);
    xd[0] = gd[0] = nb, xd[r - 1] = ci, gd[r - 1] = co;
    for (int d = 0; d < n; d++) /* the "kernel" */
      gd[d + 1] = seed % 3 == 0 ? rnd_in(65, 80) / n : rnd_in(2, 6);
    K = random_spatial(n, -1, &a, xd, gd);
    kdc_module *m = kdc_ir_module_create("c");
    kdc_func *f = kdc_ir_func_create(m, "train_step");
    kdc_type xt = kdc_type_make(KDC_DTYPE_F32, r, xd), gt = kdc_type_make(KDC_DTYPE_F32, r, gd);
    kdc_value_id x = kdc_ir_parameter(f, KDC_PARAM_INPUT, "x", &xt);
    kdc_value_id g = kdc_ir_parameter(f, KDC_PARAM_INPUT, "g", &gt);
    int64_t pl[KDC_MAX_RANK], pr[KDC_MAX_RANK];
    pl[0] = r - 1, pl[r - 1] = 0;
    for (int d = 0; d < n; d++) pl[d + 1] = d + 1, pr[d] = d + 1;
    pr[n] = 0, pr[n + 1] = n + 1;
    kdc_value_id y = kdc_ir_convolution(f, kdc_ir_transpose(f, x, pl), kdc_ir_transpose(f, g, pr), &a);
    kdc_ir_add_result(f, y, "dw");
    kdc_status st = kdc_ir_take_error(f);
    if (st) fail_msg("%s", kdc_status_message(st));
    int64_t outs = kdc_type_numel(kdc_ir_type(f, y)) / (ci * co);
    if (outs > 64) {
      kdc_ir_module_destroy(m);
      continue;
    }
    assert_true(before_after(m, K * nb));
    assert_int_equal(count(f, KDC_OP_TRANSPOSE), 1);
    for (size_t i = 0; i < f->n_nodes; i++)
      if (f->nodes[i].op == KDC_OP_DOT) {
        assert_int_equal(f->nodes[i].in[1], g);
        kdc_op lop = f->nodes[f->nodes[i].in[0]].op;
        assert_true(lop == KDC_OP_CONCAT || (outs == 1 && (lop == KDC_OP_SLICE || lop == KDC_OP_PAD ||
                                                           f->nodes[i].in[0] == x)));
      }
    natural++;
    kdc_ir_module_destroy(m);
  }
  assert_true(natural >= 40);
}

/* The natural weight gradient whose GEMM [taps*Ci, Co] fits one runtime
 * block (<= 64 each way) with >= 256 positions per image runs per image: one
 * dot with batch dim 0 over the images ([N, taps*Ci, Co]) summed by one
 * reduce, agreeing with the direct convolution; 72 rows (Ci = 8, 9 taps)
 * keep the one unbatched dot. */
static void test_weight_gradient_per_image(void **state) {
  (void)state;
  for (int big = 0; big < 2; big++) {
    rng_state = 7 + (uint64_t)big;
    kdc_attr_conv a;
    kdc_attr_conv_init(&a, 2);
    int64_t ci = big ? 8 : 3, co = 5;
    int64_t xd[4] = {3, 20, 19, ci}, gd[4] = {3, 18, 17, co};
    kdc_module *m = kdc_ir_module_create("c");
    kdc_func *f = kdc_ir_func_create(m, "train_step");
    kdc_type xt = kdc_type_make(KDC_DTYPE_F32, 4, xd), gt = kdc_type_make(KDC_DTYPE_F32, 4, gd);
    kdc_value_id x = kdc_ir_parameter(f, KDC_PARAM_INPUT, "x", &xt);
    kdc_value_id g = kdc_ir_parameter(f, KDC_PARAM_INPUT, "g", &gt);
    int64_t pl[4] = {3, 1, 2, 0}, pr[4] = {1, 2, 0, 3};
    kdc_value_id y = kdc_ir_convolution(f, kdc_ir_transpose(f, x, pl), kdc_ir_transpose(f, g, pr), &a);
    kdc_ir_add_result(f, y, "dw");
    kdc_status st = kdc_ir_take_error(f);
    if (st) fail_msg("%s", kdc_status_message(st));
    assert_true(before_after(m, 18 * 17 * 3));
    int batched = 0;
    for (size_t i = 0; i < f->n_nodes; i++)
      if (f->nodes[i].op == KDC_OP_DOT) {
        batched += f->nodes[i].attr.dot.lhs_batch.n == 1;
        assert_int_equal(f->nodes[i].in[1], g);
      }
    assert_int_equal(batched, big ? 0 : 1);
    assert_int_equal(count(f, KDC_OP_REDUCE), big ? 0 : 1);
    kdc_ir_module_destroy(m);
  }
}

/* The depthwise weight gradient as conv_dw spells it (groups G, one input
 * channel per group, channel multiplier M): lhs = x [N, S.., G] reshaped
 * to [N, S.., G, 1], transposed to [1, S.., G, N], reshaped to
 * [1, S.., G*N]; rhs = g [N, O.., G*M] transposed to [O.., N, G*M].  The
 * pass turns it into one column reduction per output position (no dot, no
 * convolution, O reduces); random 1-D and 2-D strides, dilations, padding
 * and multipliers 1 and 2 agree with the grouped convolution. */
static void test_depthwise_gradient(void **state) {
  (void)state;
  int done = 0;
  for (uint64_t seed = 1; seed <= 40; seed++) {
    rng_state = seed * 71;
    int n = (int)rnd_in(1, 2), r = n + 2;
    kdc_attr_conv a;
    kdc_attr_conv_init(&a, n);
    int64_t nb = rnd_in(1, 3), G = rnd_in(2, 5), M = seed % 3 == 0 ? 2 : 1, K = 1;
    int64_t xd[KDC_MAX_RANK], gd[KDC_MAX_RANK];
    xd[0] = gd[0] = nb, xd[r - 1] = G, gd[r - 1] = G * M;
    a.groups = G;
    for (int d = 0; d < n; d++) gd[d + 1] = rnd_in(2, 7);
    K = random_spatial(n, 0, &a, xd, gd);
    kdc_module *m = kdc_ir_module_create("c");
    kdc_func *f = kdc_ir_func_create(m, "train_step");
    kdc_type xt = kdc_type_make(KDC_DTYPE_F32, r, xd), gt = kdc_type_make(KDC_DTYPE_F32, r, gd);
    kdc_value_id x = kdc_ir_parameter(f, KDC_PARAM_INPUT, "x", &xt);
    kdc_value_id g = kdc_ir_parameter(f, KDC_PARAM_INPUT, "g", &gt);
    int64_t d4[KDC_MAX_RANK], pt[KDC_MAX_RANK], pr[KDC_MAX_RANK], l3[KDC_MAX_RANK];
    for (int d = 0; d < r; d++) d4[d] = xd[d];
    d4[r] = 1;
    pt[0] = n + 2, pt[n + 1] = n + 1, pt[n + 2] = 0;
    for (int d = 0; d < n; d++) pt[d + 1] = d + 1, pr[d] = d + 1, l3[d + 1] = xd[d + 1];
    pr[n] = 0, pr[n + 1] = n + 1;
    l3[0] = 1, l3[r - 1] = G * nb;
    kdc_value_id lhs = kdc_ir_reshape(f, kdc_ir_transpose(f, kdc_ir_reshape(f, x, r + 1, d4), pt),
                                      r, l3);
    kdc_value_id y = kdc_ir_convolution(f, lhs, kdc_ir_transpose(f, g, pr), &a);
    kdc_ir_add_result(f, y, "dw");
    kdc_status st = kdc_ir_take_error(f);
    if (st) fail_msg("%s", kdc_status_message(st));
    int64_t outs = kdc_type_numel(kdc_ir_type(f, y)) / (G * M);
    if (outs > 64) {
      kdc_ir_module_destroy(m);
      continue;
    }
    assert_true(before_after_dots(m, K * nb, 0));
    assert_int_equal(count(f, KDC_OP_REDUCE), outs);
    done++;
    kdc_ir_module_destroy(m);
  }
  assert_true(done >= 30);
}

/* groups > 1 and lhs_dilation != 1 stay direct convolutions. */
static void test_left_alone(void **state) {
  (void)state;
  rng_state = 7;
  kdc_attr_conv a;
  kdc_attr_conv_init(&a, 2);
  a.groups = 4;
  int64_t xd[4] = {2, 5, 5, 4}, wd[4] = {3, 3, 1, 4};
  kdc_module *m = build(2, xd, wd, &a, true);
  assert_false(before_after(m, 9));
  kdc_ir_module_destroy(m);
  kdc_attr_conv_init(&a, 2);
  a.lhs_dilation.v[0] = 2;
  int64_t wd2[4] = {3, 3, 4, 2};
  m = build(2, xd, wd2, &a, true);
  assert_false(before_after(m, 36));
  kdc_ir_module_destroy(m);
}

/* A padded 3x3 conv: after fuse, the patch matrix is one kernel (pad, the 9
 * slices and the concatenate share a group) and the dot reads it directly. */
static void test_one_patch_kernel(void **state) {
  (void)state;
  kdc_attr_conv a;
  kdc_attr_conv_init(&a, 2);
  for (int d = 0; d < 2; d++) a.pad_low.v[d] = a.pad_high.v[d] = 1;
  int64_t xd[4] = {2, 6, 6, 3}, wd[4] = {3, 3, 3, 8};
  kdc_module *m = build(2, xd, wd, &a, true);
  assert_null(kdc_pass_run_list(m, "conv_to_gemm,fuse", NULL));
  kdc_func *f = m->funcs[0];
  assert_int_equal(count(f, KDC_OP_SLICE), 9);
  int32_t g = -2;
  for (size_t i = 0; i < f->n_nodes; i++) {
    kdc_op op = f->nodes[i].op;
    if (op == KDC_OP_PAD || op == KDC_OP_SLICE || op == KDC_OP_CONCAT) {
      if (g == -2) g = f->nodes[i].group;
      assert_true(g >= 0);
      assert_int_equal(f->nodes[i].group, g);
    }
    if (op == KDC_OP_DOT) assert_int_equal(f->nodes[f->nodes[i].in[0]].op, KDC_OP_CONCAT);
  }
  kdc_ir_module_destroy(m);
  /* 1x1, stride 1, unpadded: just the dot on x */
  kdc_attr_conv_init(&a, 2);
  int64_t w1[4] = {1, 1, 3, 8};
  m = build(2, xd, w1, &a, false);
  assert_null(kdc_pass_run_one(m, "conv_to_gemm", NULL));
  f = m->funcs[0];
  assert_int_equal(count(f, KDC_OP_SLICE) + count(f, KDC_OP_PAD) + count(f, KDC_OP_CONCAT), 0);
  assert_int_equal(count(f, KDC_OP_DOT), 1);
  kdc_ir_module_destroy(m);
}

/* The 2-device mesh program m->funcs[0] on the two whole parameters |g|,
 * each sharded as its parameter says: device d's one result in out[d]. */
static void spmd_run(const kdc_module *m, const kdc_tensor *g, kdc_tensor *out) {
  const kdc_func *f = m->funcs[0];
  kdc_tensor loc[2][2], res[2][1];
  const kdc_tensor *args[2] = {loc[0], loc[1]};
  kdc_tensor *outs[2] = {res[0], res[1]};
  for (int64_t d = 0; d < 2; d++)
    for (int i = 0; i < 2; i++)
      assert_null(kdc_sharding_shard(&m->mesh, &f->nodes[f->params[i]].sharding, &g[i], d,
                                     &loc[d][i]));
  assert_null(kdc_ir_interpret_spmd(f, &m->mesh, args, outs));
  for (int d = 0; d < 2; d++) {
    out[d] = res[d][0];
    for (int i = 0; i < 2; i++) free(loc[d][i].data);
  }
}

/* SPMD: batch split, output-channel split and input-channel split (partial
 * dot, then all_reduce) on a 2-device mesh through the pass. */
static const char spmd_text[] =
    "module @s {\n  mesh [d=2]\n  weight \"c/kernel\" : f32[3,3,4,6]\n"
    "  func @predict {\n"
    "    %%x = parameter 0 input \"x\" : f32[4,5,5,4] %s\n"
    "    %%w = parameter 1 weight \"c/kernel\" : f32[3,3,4,6] %s\n"
    "    %%y = convolution %%x, %%w stride=[2,1] pad_low=[1,1] pad_high=[1,0]"
    " lhs_dilation=[1,1] rhs_dilation=[1,1] groups=1 : f32[4,3,4,6]\n"
    "    return %%y \"y\"\n  }\n}\n";

static void test_spmd(void **state) {
  (void)state;
  static const char *const layouts[][2] = {
      {"{d,-,-,-}", "{-,-,-,-}"}, {"{-,-,-,-}", "{-,-,-,d}"}, {"{-,-,-,d}", "{-,-,d,-}"}};
  for (size_t l = 0; l < 3; l++) {
    char text[1024];
    snprintf(text, sizeof text, spmd_text, layouts[l][0], layouts[l][1]);
    kdc_module *ref = NULL, *m = NULL;
    assert_null(kdc_ir_parse_module(text, "s.kir", &ref));
    assert_null(kdc_ir_parse_module(text, "s.kir", &m));
    kdc_func *rf = ref->funcs[0];
    rng_state = 99 + l;
    kdc_tensor g[2];
    for (int i = 0; i < 2; i++) {
      g[i].type = rf->nodes[rf->params[i]].type;
      fill(&g[i]);
    }
    kdc_tensor want = interp(rf, g);
    assert_null(kdc_pass_run_list(m, "seed_shardings,propagate_shardings,partition,conv_to_gemm", NULL));
    kdc_func *f = m->funcs[0];
    assert_int_equal(count(f, KDC_OP_CONVOLUTION), 0);
    kdc_tensor col[2], got;
    spmd_run(m, g, col);
    assert_null(kdc_sharding_unshard(&m->mesh, &f->nodes[f->results[0]].sharding, &want.type, col,
                                     &got));
    check_close(&got, &want, 36);
    free(col[0].data), free(col[1].data);
    free(got.data), free(want.data), free(g[0].data), free(g[1].data);
    kdc_ir_module_destroy(ref);
    kdc_ir_module_destroy(m);
  }
}

/* The depthwise weight gradient of a batch-split step: the partitioner
 * gathers both transposed operands along the batch (the grouped lhs cannot
 * run split); the pass reduces over the local images and all-reduces the
 * partial [taps, channels] instead, and the gathers go unread.  Reference:
 * the interpreter on the whole batch (relative 1e-5 scaled). */
static const char dw_spmd_text[] =
    "module @s {\n  mesh [d=2]\n"
    "  func @train_step {\n"
    "    %x = parameter 0 input \"x\" : f32[4,5,5,3] {d,-,-,-}\n"
    "    %g = parameter 1 input \"g\" : f32[4,5,5,3] {d,-,-,-}\n"
    "    %x4 = reshape %x : f32[4,5,5,3,1]\n"
    "    %xt = transpose %x4 perm=[4,1,2,3,0] : f32[1,5,5,3,4]\n"
    "    %l = reshape %xt : f32[1,5,5,12]\n"
    "    %gt = transpose %g perm=[1,2,0,3] : f32[5,5,4,3]\n"
    "    %dw = convolution %l, %gt stride=[1,1] pad_low=[1,1] pad_high=[1,1]"
    " lhs_dilation=[1,1] rhs_dilation=[1,1] groups=3 : f32[1,3,3,3]\n"
    "    return %dw \"dw\"\n  }\n}\n";

static void test_depthwise_gradient_spmd(void **state) {
  (void)state;
  kdc_module *ref = NULL, *m = NULL;
  assert_null(kdc_ir_parse_module(dw_spmd_text, "s.kir", &ref));
  assert_null(kdc_ir_parse_module(dw_spmd_text, "s.kir", &m));
  kdc_func *rf = ref->funcs[0];
  rng_state = 5;
  kdc_tensor g[2];
  for (int i = 0; i < 2; i++) {
    g[i].type = rf->nodes[rf->params[i]].type;
    fill(&g[i]);
  }
  kdc_tensor want = interp(rf, g);
  assert_null(kdc_pass_run_list(m, "seed_shardings,propagate_shardings,partition", NULL));
  kdc_func *f = m->funcs[0];
  assert_int_equal(count(f, KDC_OP_ALL_GATHER), 2); /* the gathers this pass removes */
  assert_null(kdc_pass_run_one(m, "conv_to_gemm", NULL));
  assert_int_equal(count(f, KDC_OP_CONVOLUTION), 0);
  assert_int_equal(count(f, KDC_OP_ALL_GATHER), 0);
  assert_int_equal(count(f, KDC_OP_ALL_REDUCE), 1);
  assert_int_equal(count(f, KDC_OP_REDUCE), 9);
  kdc_tensor out[2];
  spmd_run(m, g, out);
  for (int d = 0; d < 2; d++) {
    check_close(&out[d], &want, 4 * 25);
    free(out[d].data);
  }
  free(want.data), free(g[0].data), free(g[1].data);
  kdc_ir_module_destroy(ref);
  kdc_ir_module_destroy(m);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_random_convs),
      cmocka_unit_test(test_weight_gradient_form),
      cmocka_unit_test(test_weight_gradient_natural),
      cmocka_unit_test(test_weight_gradient_per_image),
      cmocka_unit_test(test_depthwise_gradient),
      cmocka_unit_test(test_left_alone),
      cmocka_unit_test(test_one_patch_kernel),
      cmocka_unit_test(test_spmd),
      cmocka_unit_test(test_depthwise_gradient_spmd),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
