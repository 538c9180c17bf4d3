/*
 * rng_uniform (ir/ops.def, ir/interp.c): Philox-4x32-10 against the Random123
 * known-answer vectors (kat_vectors), the interpreter against
 * kdc_rng_uniform_at element by element, independence of the shape (element
 * i only depends on (seed, step, i), which is what makes a sharded program
 * agree with the unsharded one), the text round trip, and Keras' dropout
 * written with it, including its gradient.
 */
#include "tr_test.h"

static void test_philox_kat(void **state) {
  (void)state;
  static const uint32_t kat[3][10] = {
      {0, 0, 0, 0, 0, 0, 0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8},
      {0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0x408f276d,
       0x41c83b0e, 0xa20bc7c6, 0x6d5451fd},
      {0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344, 0xa4093822, 0x299f31d0, 0xd16cfe09,
       0x94fdcceb, 0x5001e420, 0x24126ea1}};
  for (int k = 0; k < 3; k++) {
    uint32_t out[4];
    kdc_philox4x32_10(kat[k], kat[k] + 4, out);
    for (int i = 0; i < 4; i++) assert_int_equal(out[i], kat[k][6 + i]);
  }
}

/* f(step) = rng_uniform(step, seed) over |rank|, |dims|. */
static kdc_func *rng_func(kdc_module *m, int64_t seed, int rank, const int64_t *dims) {
  kdc_func *f = kdc_ir_func_create(m, "r");
  kdc_type st = kdc_type_make(KDC_DTYPE_I32, 0, NULL);
  kdc_value_id s = kdc_ir_parameter(f, KDC_PARAM_STATE, "iteration", &st);
  kdc_ir_add_result(f, kdc_ir_rng_uniform(f, s, seed, rank, dims), "u");
  tr_expect_ok(kdc_ir_take_error(f));
  tr_expect_ok(kdc_ir_verify(f));
  return f;
}

static void test_interp(void **state) {
  (void)state;
  kdc_module *m = kdc_ir_module_create("r");
  int64_t d2[2] = {64, 50}, d1[1] = {3200};
  kdc_func *f2 = rng_func(m, 42, 2, d2), *f1 = rng_func(m, 42, 1, d1);
  kdc_func *other = rng_func(m, 43, 1, d1);
  kdc_type st = kdc_type_make(KDC_DTYPE_I32, 0, NULL);
  int32_t step = 7, step2 = 8;
  kdc_tensor a[1] = {{st, &step}}, b[1] = {{st, &step2}}, o2[1], o1[1], o3[1], o4[1];
  tr_run(f2, a, 1, o2);
  tr_run(f1, a, 1, o1);
  tr_run(f1, b, 1, o3);
  tr_run(other, a, 1, o4);
  const float *u2 = o2[0].data, *u1 = o1[0].data, *u3 = o3[0].data, *u4 = o4[0].data;
  double mean = 0;
  int same_step = 0, same_seed = 0;
  for (int i = 0; i < 3200; i++) {
    assert_true(u2[i] == kdc_rng_uniform_at(42, 7, i));
    assert_true(u1[i] == u2[i]); /* depends on the index only, not the shape */
    assert_true(u1[i] >= 0.0f && u1[i] < 1.0f);
    mean += u1[i] / 3200.0;
    same_step += u3[i] == u1[i];
    same_seed += u4[i] == u1[i];
  }
  assert_true(fabs(mean - 0.5) < 0.02);
  assert_true(same_step < 5 && same_seed < 5);
  tr_free(o1, 1);
  tr_free(o2, 1);
  tr_free(o3, 1);
  tr_free(o4, 1);
  kdc_ir_module_destroy(m);
}

static void test_text(void **state) {
  (void)state;
  const char *text = "module @r {\n"
                     "  func @r {\n"
                     "    %0 = parameter 0 state \"iteration\" : i32[]\n"
                     "    %1 = rng_uniform %0 seed=1234 : f32[2,3]\n"
                     "    return %1 \"u\"\n"
                     "  }\n"
                     "}\n";
  kdc_module *m = NULL;
  tr_expect_ok(kdc_ir_parse_module(text, "r.kir", &m));
  char *printed = kdc_ir_module_to_string(m);
  assert_string_equal(printed, text);
  free(printed);
  kdc_ir_module_destroy(m);
  const char *bad = "module @r {\n  func @r {\n    %0 = parameter 0 state \"s\" : f32[]\n"
                    "    %1 = rng_uniform %0 seed=1 : f32[2]\n    return %1 \"u\"\n  }\n}\n";
  tr_expect_ok(kdc_ir_parse_module(bad, "bad.kir", &m)); /* the parser does not type-check */
  kdc_status st = kdc_ir_verify_module(m);
  assert_non_null(st);
  assert_non_null(strstr(kdc_status_message(st), "integer scalar"));
  kdc_status_free(st);
  kdc_ir_module_destroy(m);
}

/* Keras Dropout(rate) in training (jax backend: keep = bernoulli(1 - rate),
 * i.e. u < 1 - rate; y = keep ? x / (1 - rate) : 0), and its gradient. */
static void test_dropout(void **state) {
  (void)state;
  const double rate = 0.25;
  kdc_module *m = kdc_ir_module_create("d");
  kdc_func *f = kdc_ir_func_create(m, "train_forward");
  kdc_type xt = tr_type(2, 4, 8), st = kdc_type_make(KDC_DTYPE_I32, 0, NULL);
  kdc_value_id x = kdc_ir_parameter(f, KDC_PARAM_INPUT, "x", &xt);
  kdc_value_id s = kdc_ir_parameter(f, KDC_PARAM_STATE, "iteration", &st);
  kdc_value_id u = kdc_ir_rng_uniform(f, s, 99, xt.rank, xt.dims);
  kdc_value_id keep_p = kdc_ir_splat(f, KDC_DTYPE_F32, 2, xt.dims, 1 - rate);
  kdc_value_id keep = kdc_ir_compare(f, KDC_CMP_LT, u, keep_p);
  kdc_value_id y = kdc_ir_select(f, keep, kdc_ir_binary_scalar(f, KDC_OP_DIV, x, 1 - rate),
                                 kdc_ir_splat(f, KDC_DTYPE_F32, 2, xt.dims, 0));
  int64_t all[2] = {0, 1};
  kdc_value_id loss = kdc_ir_reduce(f, KDC_RED_SUM, y, 2, all), g;
  tr_expect_ok(kdc_ir_take_error(f));
  tr_expect_ok(kdc_autodiff(f, loss, &x, 1, &g));
  kdc_ir_add_result(f, y, "y");
  kdc_ir_add_result(f, g, "dx");
  float xv[32];
  for (int i = 0; i < 32; i++) xv[i] = (float)(i + 1);
  int32_t step = 3;
  kdc_tensor args[2] = {{xt, xv}, {st, &step}}, out[2];
  tr_run(f, args, 2, out);
  const float *yv = out[0].data, *gv = out[1].data;
  int kept = 0;
  for (int i = 0; i < 32; i++) {
    bool k = kdc_rng_uniform_at(99, 3, i) < (float)(1 - rate);
    kept += k;
    assert_true(yv[i] == (k ? xv[i] / (float)(1 - rate) : 0.0f));
    assert_true(gv[i] == (k ? 1.0f / (float)(1 - rate) : 0.0f));
  }
  assert_true(kept > 16 && kept < 32);
  tr_free(out, 2);
  kdc_ir_module_destroy(m);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_philox_kat),
      cmocka_unit_test(test_interp),
      cmocka_unit_test(test_text),
      cmocka_unit_test(test_dropout),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
