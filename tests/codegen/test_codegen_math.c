/*
 * kdc's exp, expm1, tanh and logistic in kernels (codegen/math_ir.c: the
 * vector variants the loop vectoriser calls, and the scalar one of a
 * loop's remainder) against the reference interpreter (ir/math.c), bit for
 * bit, over 2^24 floats spread over the whole range: every 256th bit
 * pattern with its low byte varied, NaNs, infinities, zeros and
 * subnormals included, and the ends of each function's ranges.  Both sides
 * fuse their multiply-adds (llvm.fma, fmaf: one rounding), so no CPU may
 * give other bits.  The accuracy of these bits against the exact functions
 * is test_ir_math's.
 */
#include "cg_test.h"

enum { CHUNK = (1 << 20) + 3, SAMPLES = 1 << 24 };

static const kdc_op ops[] = {KDC_OP_EXP, KDC_OP_EXPM1, KDC_OP_TANH, KDC_OP_LOGISTIC};
enum { N_OPS = sizeof ops / sizeof ops[0] };

/* Sample k of the sweep: bit pattern k * 256 with its low byte from k. */
static float sample(uint32_t k) {
  uint32_t u = (k << 8) | ((k * 97u) & 0xff);
  float x;
  memcpy(&x, &u, sizeof x);
  return x;
}

/* The ends of ir/math.c's ranges, and their neighbours. */
static const float ends[] = {KDC_MATH_EXP_HI, KDC_MATH_EXP_LO, KDC_MATH_EXPM1_BIG, KDC_MATH_EXPM1_LO,
                             KDC_MATH_TANH_ONE, -KDC_MATH_EXP_HI, -KDC_MATH_EXP_LO, 88.72284f,
                             -87.33655f, 0.34657359f, -0.34657359f, 0.0f, -0.0f, 1e-30f, -1e-30f};

static bool same(float a, float b) { return memcmp(&a, &b, sizeof a) == 0 || (isnan(a) && isnan(b)); }

/* y_k = ops[k](x) for x of CHUNK floats. */
static kdc_module *build(kdc_func **out) {
  int64_t n = CHUNK;
  kdc_module *m = kdc_ir_module_create("math");
  kdc_func *f = kdc_ir_func_create(m, "predict");
  kdc_type t = kdc_type_make(KDC_DTYPE_F32, 1, &n);
  kdc_value_id x = kdc_ir_parameter(f, KDC_PARAM_INPUT, "x", &t);
  for (int k = 0; k < N_OPS; k++) {
    char name[8];
    snprintf(name, sizeof name, "y%d", k);
    kdc_ir_add_result(f, kdc_ir_unary(f, ops[k], x), name);
  }
  cgt_fail(kdc_ir_take_error(f), "builder");
  cgt_fail(kdc_ir_verify_module(m), "verify");
  *out = f;
  return m;
}

static void test_kernels_equal_interpreter(void **state) {
  (void)state;
  kdc_func *f, *g;
  kdc_module *ref = build(&f), *m = build(&g);
  cgt_fail(kdc_pass_fuse(m, NULL), "fuse");
  cgt_fail(kdc_pass_plan_memory(m, NULL), "plan_memory");
  const char *path = cgt_path("math.plan");
  cgt_fail(kdc_codegen_cpu_plan(m, NULL, path), "codegen");
  kdc_rt_plan *plan;
  kdc_rt_options ro = {.n_threads = 1};
  cgt_fail(kdc_rt_plan_load_with(path, &ro, &plan), "load");
  float *in = malloc(sizeof(float) * CHUNK);
  kdc_tensor arg = {f->nodes[f->params[0]].type, in};
  float *out[N_OPS];
  for (int k = 0; k < N_OPS; k++) out[k] = malloc(sizeof(float) * CHUNK);
  int64_t bad = 0;
  for (int64_t c = 0; c * CHUNK < SAMPLES; c++) {
    for (int64_t i = 0; i < CHUNK; i++) {
      int64_t k = c * CHUNK + i;
      in[i] = k < SAMPLES ? sample((uint32_t)k) : ends[(k - SAMPLES) % (sizeof ends / sizeof *ends)];
    }
    kdc_tensor want[N_OPS];
    cgt_fail(kdc_ir_interpret(f, &arg, 1, want), "interpret");
    const void *ins[1] = {in};
    cgt_fail(kdc_rt_plan_run(plan, ins, (void *const *)out), "run");
    for (int k = 0; k < N_OPS; k++) {
      const float *w = want[k].data;
      for (int64_t i = 0; i < CHUNK; i++)
        if (!same(out[k][i], w[i]) && bad++ < 10)
          print_message("%s(%.9g): kernel %.9g, interpreter %.9g\n", kdc_op_name(ops[k]),
                        (double)in[i], (double)out[k][i], (double)w[i]);
      free(want[k].data);
    }
  }
  kdc_rt_plan_release(plan);
  kdc_ir_module_destroy(m);
  kdc_ir_module_destroy(ref);
  for (int k = 0; k < N_OPS; k++) free(out[k]);
  free(in);
  if (bad) fail_msg("%lld results differ from the interpreter", (long long)bad);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_kernels_equal_interpreter),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
