/*
 * f32 dot_general through cblas_sgemm: every transpose combination, batch
 * dims, several contracting dims, layouts that need a canonicalising
 * transpose kernel, weights and constants as operands, GEMMs split over
 * threads.  Tolerance CGT_GEMM
 * (OpenBLAS sums in blocks; the interpreter in index order).
 */
#include "cg_test.h"

static kdc_value_id param(kdc_func *f, const char *name, int rank, const int64_t *dims) {
  kdc_type t = kdc_type_make(KDC_DTYPE_F32, rank, dims);
  return kdc_ir_parameter(f, KDC_PARAM_INPUT, name, &t);
}

static kdc_dimlist dl(int n, const int64_t *v) {
  kdc_dimlist l = {n, {0}};
  for (int i = 0; i < n; i++) l.v[i] = v[i];
  return l;
}

typedef struct expect { int kernels, gemms; } expect;

static void check_steps(const kdc_rt_plan *plan, void *ctx) {
  const expect *e = ctx;
  assert_int_equal(cgt_count_steps(plan, KDC_STEP_KERNEL), e->kernels);
  assert_int_equal(cgt_count_steps(plan, KDC_STEP_GEMM), e->gemms);
}

/* lhs/rhs given as dims + dot attrs; result optionally fed to a kernel.
 * |copies|: transpose kernels expected before the GEMM. */
static void dot_case_x(int lr, const int64_t *ld, int rr, const int64_t *rd, kdc_attr_dot d,
                       bool epilogue, int64_t k, int copies) {
  kdc_module *m = kdc_ir_module_create("gemm");
  kdc_func *f = kdc_ir_func_create(m, "predict");
  kdc_value_id a = param(f, "a", lr, ld), b = param(f, "b", rr, rd);
  kdc_value_id y = kdc_ir_dot(f, a, b, &d);
  if (epilogue) y = kdc_ir_unary(f, KDC_OP_TANH, y);
  kdc_ir_add_result(f, y, "y");
  expect e = {copies + epilogue, 1};
  cgt_opts o = {.tol = CGT_GEMM, .gemm_k = (double)k, .inspect = check_steps, .ctx = &e};
  cgt_check(m, f, &o);
  kdc_ir_module_destroy(m);
}

static void dot_case(int lr, const int64_t *ld, int rr, const int64_t *rd, kdc_attr_dot d,
                     bool epilogue, int64_t k) {
  dot_case_x(lr, ld, rr, rd, d, epilogue, k, 0);
}

static void test_gemm_trans(void **state) {
  (void)state;
  static const int64_t sizes[][3] = {{1, 1, 1}, {7, 33, 1}, {33, 7, 5}, {1, 7, 33}, {16, 64, 9}};
  for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
    for (int ta = 0; ta < 2; ta++)
      for (int tb = 0; tb < 2; tb++) {
        int64_t M = sizes[s][0], K = sizes[s][1], N = sizes[s][2];
        int64_t ld[2] = {ta ? K : M, ta ? M : K}, rd[2] = {tb ? N : K, tb ? K : N};
        int64_t lc = ta ? 0 : 1, rc = tb ? 1 : 0;
        kdc_attr_dot d = {dl(0, NULL), dl(0, NULL), dl(1, &lc), dl(1, &rc), 0};
        dot_case(2, ld, 2, rd, d, (ta + tb) % 2, K);
      }
}

static void test_gemm_batch(void **state) {
  (void)state;
  int64_t z = 0, one = 1, two = 2;
  /* [B,M,K] x [B,K,N] */
  int64_t l1[3] = {3, 7, 5}, r1[3] = {3, 5, 4};
  kdc_attr_dot d1 = {dl(1, &z), dl(1, &z), dl(1, &two), dl(1, &one), 0};
  dot_case(3, l1, 3, r1, d1, false, 5);
  /* [B,K,M] x [B,N,K]: both transposed, batched */
  int64_t l2[3] = {2, 5, 7}, r2[3] = {2, 4, 5};
  kdc_attr_dot d2 = {dl(1, &z), dl(1, &z), dl(1, &one), dl(1, &two), 0};
  dot_case(3, l2, 3, r2, d2, true, 5);
  /* batch dim not leading in the lhs: [M,B,K] read in place (lda = B*K,
   * batch stride K) */
  int64_t l3[3] = {7, 3, 5}, r3[3] = {3, 5, 4};
  kdc_attr_dot d3 = {dl(1, &one), dl(1, &z), dl(1, &two), dl(1, &one), 0};
  dot_case_x(3, l3, 3, r3, d3, false, 5, 0);
  /* two batch dims and two contracting dims in matching order */
  int64_t l4[4] = {2, 3, 4, 5}, r4[4] = {2, 3, 4, 5};
  int64_t bb[2] = {0, 1}, cc[1] = {3};
  kdc_attr_dot d4 = {dl(2, bb), dl(2, bb), dl(1, cc), dl(1, cc), 0};
  dot_case(4, l4, 4, r4, d4, true, 5);
}

/* Batch dims apart in memory: a two-level batch (kdc_prog_gemm_step), the
 * operands read in place, as attention reads its heads. */
static void test_gemm_batch_two_level(void **state) {
  (void)state;
  /* scores: q [b,s,h,d] x k [b,s,h,d] over (b, h), contracting d */
  int64_t q[4] = {2, 5, 3, 4}, bh[2] = {0, 2}, c3 = 3, c1 = 1, one = 1;
  kdc_attr_dot d1 = {dl(2, bh), dl(2, bh), dl(1, &c3), dl(1, &c3), 0};
  dot_case_x(4, q, 4, q, d1, false, 4, 0);
  /* scores [b,h,s,t] x v [b,t,h,d] over (b, h) = dims (0, 1) / (0, 2) */
  int64_t sc[4] = {2, 3, 5, 6}, v[4] = {2, 6, 3, 4}, b01[2] = {0, 1};
  kdc_attr_dot d2 = {dl(2, b01), dl(2, bh), dl(1, &c3), dl(1, &c1), 0};
  dot_case_x(4, sc, 4, v, d2, true, 6, 0);
  /* the batch list against memory order: (y, x) of [x, M, y, K] and of
   * [x, y, K, N] */
  int64_t l3[4] = {3, 5, 2, 4}, r3[4] = {3, 2, 4, 6}, yx_l[2] = {2, 0}, yx_r[2] = {1, 0};
  int64_t k3 = 2;
  kdc_attr_dot d3 = {dl(2, yx_l), dl(2, yx_r), dl(1, &c3), dl(1, &k3), 0};
  dot_case_x(4, l3, 4, r3, d3, false, 4, 0);
  /* inner groups of different sizes: z (lhs [x,y,M,z,K]) against y*z (rhs
   * [x,K,y,z,N]): the rhs is copied */
  int64_t l4[5] = {2, 3, 4, 2, 5}, r4[5] = {2, 5, 3, 2, 3};
  int64_t bl[3] = {0, 1, 3}, br[3] = {0, 2, 3}, c4 = 4;
  kdc_attr_dot d4 = {dl(3, bl), dl(3, br), dl(1, &c4), dl(1, &one), 0};
  dot_case_x(5, l4, 5, r4, d4, false, 5, 1);
  /* the GEMM's parameters: a CPU plan's two-level batch; a CUDA plan's
   * copies (batch dims leading only) */
  {
    kdc_module *m = kdc_ir_module_create("params");
    kdc_func *f = kdc_ir_func_create(m, "predict");
    kdc_value_id y = kdc_ir_dot(f, param(f, "q", 4, q), param(f, "k", 4, q), &d1);
    cg_gemm g;
    cg_gemm_plan(f, y, true, &g);
    assert_false(g.copy_a || g.copy_b);
    assert_true(!g.trans_a && g.trans_b);
    assert_int_equal(g.batch, 6);
    assert_int_equal(g.batch_inner, 3);
    assert_int_equal(g.lda, 12);  /* h*d */
    assert_int_equal(g.ldb, 12);
    assert_int_equal(g.stride_a, 60);  /* s*h*d, then d */
    assert_int_equal(g.stride_a2, 4);
    assert_int_equal(g.stride_c, 75);  /* h*s*s, then s*s */
    assert_int_equal(g.stride_c2, 25);
    cg_gemm_plan(f, y, false, &g);
    assert_true(g.copy_a && g.copy_b);
    assert_int_equal(g.batch_inner, 1);
    assert_int_equal(g.lda, 4);
    assert_int_equal(g.stride_a, 20);
    kdc_ir_module_destroy(m);
  }
  /* split over threads: whole entries (batch 4 >= threads), then rows of
   * entries (batch 2 < 3 threads), strided rows (lda = h*d) */
  for (int threads = 2; threads <= 3; threads++)
    for (int64_t b = 1; b <= 2; b++) {
      int64_t qq[4] = {b, 128, 2, 64};
      kdc_module *m = kdc_ir_module_create("heads");
      kdc_func *f = kdc_ir_func_create(m, "predict");
      kdc_value_id y = kdc_ir_dot(f, param(f, "q", 4, qq), param(f, "k", 4, qq), &d1);
      kdc_ir_add_result(f, y, "y");
      expect e = {0, 1};
      cgt_opts o = {.tol = CGT_GEMM, .gemm_k = 64, .inspect = check_steps, .ctx = &e,
                    .threads = threads};
      cgt_check(m, f, &o);
      kdc_ir_module_destroy(m);
    }
}

static void test_gemm_contract(void **state) {
  (void)state;
  /* two contracting dims, [M,K1,K2] x [K1,K2,N] */
  int64_t l1[3] = {7, 3, 5}, r1[3] = {3, 5, 4};
  int64_t lc1[2] = {1, 2}, rc1[2] = {0, 1};
  kdc_attr_dot d1 = {dl(0, NULL), dl(0, NULL), dl(2, lc1), dl(2, rc1), 0};
  dot_case(3, l1, 3, r1, d1, false, 15);
  /* pairs listed in reverse order: still a plain GEMM */
  int64_t lc2[2] = {2, 1}, rc2[2] = {1, 0};
  kdc_attr_dot d2 = {dl(0, NULL), dl(0, NULL), dl(2, lc2), dl(2, rc2), 0};
  dot_case(3, l1, 3, r1, d2, false, 15);
  /* pair orders disagree between lhs and rhs: rhs [K2,K1,N] needs a copy */
  int64_t r3[3] = {5, 3, 4}, rc3[2] = {1, 0};
  kdc_attr_dot d3 = {dl(0, NULL), dl(0, NULL), dl(2, lc1), dl(2, rc3), 0};
  dot_case_x(3, l1, 3, r3, d3, true, 15, 1);
  /* free dims split around the contracting dim: lhs [M1,K,M2] needs a copy */
  int64_t l4[3] = {3, 5, 2}, r4[2] = {5, 6}, lc4 = 1, rc4 = 0;
  kdc_attr_dot d4 = {dl(0, NULL), dl(0, NULL), dl(1, &lc4), dl(1, &rc4), 0};
  dot_case_x(3, l4, 2, r4, d4, false, 5, 1);
  /* no contracting dim: outer product */
  int64_t l5[1] = {7}, r5[1] = {33};
  kdc_attr_dot d5 = {dl(0, NULL), dl(0, NULL), dl(0, NULL), dl(0, NULL), 0};
  dot_case(1, l5, 1, r5, d5, false, 1);
}

/* GEMMs of >= 2^20 flops are split over the pool's threads (runtime/exec.c):
 * row blocks (M >= N), column blocks (N > M) and batch ranges, every
 * transpose, on 2 and 3 threads, against the interpreter. */
static void test_gemm_split(void **state) {
  (void)state;
  static const int64_t sizes[][4] = {/* batch, M, K, N */
                                     {1, 130, 200, 70}, {1, 40, 300, 150}, {3, 64, 100, 90},
                                     {2, 200, 50, 129}};
  for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
    for (int t = 0; t < 4; t++)
      for (int threads = 2; threads <= 3; threads++) {
        int ta = t & 1, tb = t >> 1;
        int64_t B = sizes[s][0], M = sizes[s][1], K = sizes[s][2], N = sizes[s][3];
        int64_t z = 0, lc = ta ? 1 : 2, rc = tb ? 2 : 1;
        int64_t ld[3] = {B, ta ? K : M, ta ? M : K}, rd[3] = {B, tb ? N : K, tb ? K : N};
        kdc_attr_dot d = {dl(1, &z), dl(1, &z), dl(1, &lc), dl(1, &rc), 0};
        kdc_module *m = kdc_ir_module_create("split");
        kdc_func *f = kdc_ir_func_create(m, "predict");
        kdc_value_id y = kdc_ir_dot(f, param(f, "a", 3, ld), param(f, "b", 3, rd), &d);
        kdc_ir_add_result(f, y, "y");
        expect e = {0, 1};
        cgt_opts o = {.tol = CGT_GEMM, .gemm_k = (double)K, .inspect = check_steps, .ctx = &e,
                      .threads = threads};
        cgt_check(m, f, &o);
        kdc_ir_module_destroy(m);
      }
}

/* A dense layer: weights embedded in the plan, bias and relu fused. */
static void test_gemm_weights(void **state) {
  (void)state;
  kdc_module *m = kdc_ir_module_create("dense");
  kdc_func *f = kdc_ir_func_create(m, "predict");
  int64_t xd[2] = {33, 20}, wd[2] = {20, 7}, bd[1] = {7};
  kdc_type wt = kdc_type_make(KDC_DTYPE_F32, 2, wd), bt = kdc_type_make(KDC_DTYPE_F32, 1, bd);
  float w[140], b[7];
  cgt_fill(&wt, w, 99, false);
  cgt_fill(&bt, b, 98, false);
  kdc_ir_module_add_weight(m, "d1/kernel", &wt, w);
  kdc_ir_module_add_weight(m, "d1/bias", &bt, b);
  kdc_value_id x = param(f, "x", 2, xd);
  kdc_value_id k = kdc_ir_parameter(f, KDC_PARAM_WEIGHT, "d1/kernel", &wt);
  kdc_value_id bias = kdc_ir_parameter(f, KDC_PARAM_WEIGHT, "d1/bias", &bt);
  kdc_value_id y = kdc_ir_binary_bcast(f, KDC_OP_ADD, kdc_ir_matmul(f, x, k), bias);
  y = kdc_ir_binary(f, KDC_OP_MAX, y, kdc_ir_splat(f, KDC_DTYPE_F32, 2, (int64_t[]){33, 7}, 0));
  /* a constant operand of a second GEMM */
  float c[7 * 3];
  kdc_type ct = kdc_type_make(KDC_DTYPE_F32, 2, (int64_t[]){7, 3});
  cgt_fill(&ct, c, 97, false);
  kdc_value_id z = kdc_ir_matmul(f, y, kdc_ir_constant(f, &ct, c));
  kdc_ir_add_result(f, z, "z");
  kdc_ir_add_result(f, y, "hidden");
  cgt_opts o = {.tol = CGT_GEMM, .gemm_k = 20};
  cgt_check(m, f, &o);
  kdc_ir_module_destroy(m);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_gemm_trans),
      cmocka_unit_test(test_gemm_batch),
      cmocka_unit_test(test_gemm_batch_two_level),
      cmocka_unit_test(test_gemm_contract),
      cmocka_unit_test(test_gemm_weights),
      cmocka_unit_test(test_gemm_split),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
