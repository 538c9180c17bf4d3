/*
 * bf16 and f16 storage types (ir.h): rounding of f32 to them against values
 * computed independently with numpy + ml_dtypes (ml_dtypes 0.5,
 * `np.float32 -> ml_dtypes.bfloat16 / np.float16`, round to nearest even),
 * in common/dtype.c, the reference interpreter and the CPU plan; and a
 * graph of bf16/f16 ops (elementwise, fused and not, reduce, dot,
 * broadcast, transpose, compare/select, convert to and from ints) through
 * the whole CPU path against the interpreter, bit for bit (cg_test.h:
 * half outputs are compared bytewise).
 *
 * The inputs hit the cases that matter: ties (low bits exactly half an ulp)
 * with an even and an odd kept bit, one below and one above a tie, carries
 * into the exponent, the largest finite values (f16: 65504, 65520 and up go
 * to inf), the f16 subnormals and half the smallest one (a tie to 0), f32
 * subnormals (bf16 keeps the f32 exponent), NaN, infinities, signed zeros.
 */
#include "cg_test.h"
#include "common/io.h"

/* generated once with numpy/ml_dtypes as the file comment says */
static const uint32_t in_bits[] = {0x3f800000, 0x3f807fff, 0x3f808000, 0x3f808001, 0x3f80ffff, 0x3f810000, 0x3f817fff, 0x3f818000, 0x3f818001, 0x3f81ffff, 0x40490000, 0x40497fff, 0x40498000, 0x40498001, 0x4049ffff, 0xbf810000, 0xbf817fff, 0xbf818000, 0xbf818001, 0xbf81ffff, 0x7f7f0000, 0x7f7f7fff, 0x7f7f8000, 0x7f7f8001, 0x7f7fffff, 0x00800000, 0x00807fff, 0x00808000, 0x00808001, 0x0080ffff, 0x00810000, 0x00817fff, 0x00818000, 0x00818001, 0x0081ffff, 0x3f800000, 0x3f800fff, 0x3f801000, 0x3f801001, 0x3f802000, 0x3f802fff, 0x3f803000, 0x3f803001, 0x38800000, 0x38800fff, 0x38801000, 0x38801001, 0x33000000, 0x33000fff, 0x33001000, 0x33001001, 0x33800000, 0x33800fff, 0x33801000, 0x33801001, 0x387fc000, 0x387fcfff, 0x387fd000, 0x387fd001, 0x477fe000, 0x477fefff, 0x477ff000, 0x477ff001, 0x477ff000, 0x477fffff, 0x477ff000, 0x477ff001, 0x477fefff, 0x477fefff, 0x477fffff, 0x477fffff, 0x37800000, 0x37800fff, 0x37801000, 0x37801001, 0x35000000, 0x35000fff, 0x35001000, 0x35001001, 0x35001000, 0x35001fff, 0x35001000, 0x35001001, 0x7f800000, 0xff800000, 0x80000000, 0x00000000, 0x7fc00000, 0x00000001, 0x007fffff, 0x7f7fffff};
static const uint16_t bf16_bits[] = {0x3f80, 0x3f80, 0x3f80, 0x3f81, 0x3f81, 0x3f81, 0x3f81, 0x3f82, 0x3f82, 0x3f82, 0x4049, 0x4049, 0x404a, 0x404a, 0x404a, 0xbf81, 0xbf81, 0xbf82, 0xbf82, 0xbf82, 0x7f7f, 0x7f7f, 0x7f80, 0x7f80, 0x7f80, 0x0080, 0x0080, 0x0080, 0x0081, 0x0081, 0x0081, 0x0081, 0x0082, 0x0082, 0x0082, 0x3f80, 0x3f80, 0x3f80, 0x3f80, 0x3f80, 0x3f80, 0x3f80, 0x3f80, 0x3880, 0x3880, 0x3880, 0x3880, 0x3300, 0x3300, 0x3300, 0x3300, 0x3380, 0x3380, 0x3380, 0x3380, 0x3880, 0x3880, 0x3880, 0x3880, 0x4780, 0x4780, 0x4780, 0x4780, 0x4780, 0x4780, 0x4780, 0x4780, 0x4780, 0x4780, 0x4780, 0x4780, 0x3780, 0x3780, 0x3780, 0x3780, 0x3500, 0x3500, 0x3500, 0x3500, 0x3500, 0x3500, 0x3500, 0x3500, 0x7f80, 0xff80, 0x8000, 0x0000, 0x7fc0, 0x0000, 0x0080, 0x7f80};
static const uint16_t f16_bits[] = {0x3c00, 0x3c04, 0x3c04, 0x3c04, 0x3c08, 0x3c08, 0x3c0c, 0x3c0c, 0x3c0c, 0x3c10, 0x4248, 0x424c, 0x424c, 0x424c, 0x4250, 0xbc08, 0xbc0c, 0xbc0c, 0xbc0c, 0xbc10, 0x7c00, 0x7c00, 0x7c00, 0x7c00, 0x7c00, 0x0000, 0x0000, 0x0000, 0x0000, 0x0000, 0x0000, 0x0000, 0x0000, 0x0000, 0x0000, 0x3c00, 0x3c00, 0x3c00, 0x3c01, 0x3c01, 0x3c01, 0x3c02, 0x3c02, 0x0400, 0x0400, 0x0400, 0x0401, 0x0000, 0x0001, 0x0001, 0x0001, 0x0001, 0x0001, 0x0001, 0x0001, 0x03ff, 0x03ff, 0x03ff, 0x03ff, 0x7bff, 0x7bff, 0x7c00, 0x7c00, 0x7c00, 0x7c00, 0x7c00, 0x7c00, 0x7bff, 0x7bff, 0x7c00, 0x7c00, 0x0100, 0x0100, 0x0100, 0x0100, 0x0008, 0x0008, 0x0008, 0x0008, 0x0008, 0x0008, 0x0008, 0x0008, 0x7c00, 0xfc00, 0x8000, 0x0000, 0x7e00, 0x0000, 0x0000, 0x7c00};
enum { N = sizeof in_bits / sizeof in_bits[0] };
_Static_assert(sizeof bf16_bits / sizeof bf16_bits[0] == N, "table");
_Static_assert(sizeof f16_bits / sizeof f16_bits[0] == N, "table");

static float in_val(int i) {
  float x;
  memcpy(&x, &in_bits[i], 4);
  return x;
}

static void test_common_rounding(void **state) {
  (void)state;
  for (int i = 0; i < N; i++) {
    if (kdc_f32_to_bf16(in_val(i)) != bf16_bits[i])
      fail_msg("bf16 of 0x%08x: got 0x%04x want 0x%04x", in_bits[i], kdc_f32_to_bf16(in_val(i)),
               bf16_bits[i]);
    if (kdc_f32_to_f16(in_val(i)) != f16_bits[i])
      fail_msg("f16 of 0x%08x: got 0x%04x want 0x%04x", in_bits[i], kdc_f32_to_f16(in_val(i)),
               f16_bits[i]);
    /* widening is exact: the round trip keeps the 16 bits */
    assert_int_equal(kdc_f32_to_bf16(kdc_bf16_to_f32(bf16_bits[i])), bf16_bits[i]);
    assert_int_equal(kdc_f32_to_f16(kdc_f16_to_f32(f16_bits[i])), f16_bits[i]);
  }
}

/* convert f32 -> bf16 and -> f16 as a plan and in the interpreter: both
 * equal the table. */
static void run_convert(kdc_dtype to, const uint16_t *want) {
  kdc_module *m = kdc_ir_module_create("half");
  kdc_func *f = kdc_ir_func_create(m, "predict");
  int64_t n = N;
  kdc_type t = kdc_type_make(KDC_DTYPE_F32, 1, &n);
  kdc_value_id x = kdc_ir_parameter(f, KDC_PARAM_INPUT, "x", &t);
  kdc_ir_add_result(f, kdc_ir_convert(f, x, to), "y");
  cgt_fail(kdc_ir_take_error(f), "builder");
  float xs[N];
  for (int i = 0; i < N; i++) xs[i] = in_val(i);
  kdc_tensor arg = {t, xs}, res;
  cgt_fail(kdc_ir_interpret(f, &arg, 1, &res), "interpret");
  for (int i = 0; i < N; i++)
    if (((uint16_t *)res.data)[i] != want[i])
      fail_msg("interpreter %s of 0x%08x: got 0x%04x want 0x%04x", kdc_dtype_name(to), in_bits[i],
               ((uint16_t *)res.data)[i], want[i]);
  free(res.data);
  cgt_fail(kdc_pass_fuse(m, NULL), "fuse");
  cgt_fail(kdc_pass_plan_memory(m, NULL), "plan_memory");
  const char *path = cgt_path("convert.plan");
  cgt_fail(kdc_codegen_cpu_plan(m, NULL, path), "codegen");
  kdc_rt_plan *plan;
  cgt_fail(kdc_rt_plan_load_with(path, &(kdc_rt_options){0}, &plan), "load");
  assert_int_equal(kdc_rt_plan_output(plan, 0, 0)->bytes, 2 * N);
  uint16_t got[N];
  const void *in[1] = {xs};
  void *out[1] = {got};
  cgt_fail(kdc_rt_plan_run(plan, in, out), "run");
  for (int i = 0; i < N; i++)
    if (got[i] != want[i])
      fail_msg("plan %s of 0x%08x: got 0x%04x want 0x%04x", kdc_dtype_name(to), in_bits[i], got[i],
               want[i]);
  kdc_rt_plan_release(plan);
  kdc_ir_module_destroy(m);
}

static void test_convert_plan(void **state) {
  (void)state;
  run_convert(KDC_DTYPE_BF16, bf16_bits);
  run_convert(KDC_DTYPE_F16, f16_bits);
}

/* 65536 random f32 bit patterns (every exponent: subnormals, NaNs with
 * payloads, infinities) through a plan's convert to bf16 and to f16 and
 * back: the plan (integer code for bf16, LLVM's fptrunc for f16) equals
 * common/dtype.c's functions bit for bit, NaN for NaN. */
static void test_convert_random(void **state) {
  (void)state;
  enum { R = 1 << 16 };
  kdc_module *m = kdc_ir_module_create("half");
  kdc_func *f = kdc_ir_func_create(m, "predict");
  int64_t n = R;
  kdc_type t = kdc_type_make(KDC_DTYPE_F32, 1, &n);
  kdc_value_id x = kdc_ir_parameter(f, KDC_PARAM_INPUT, "x", &t);
  kdc_value_id b = kdc_ir_convert(f, x, KDC_DTYPE_BF16), h = kdc_ir_convert(f, x, KDC_DTYPE_F16);
  kdc_ir_add_result(f, b, "b");
  kdc_ir_add_result(f, h, "h");
  kdc_ir_add_result(f, kdc_ir_convert(f, h, KDC_DTYPE_F32), "h32");
  cgt_fail(kdc_ir_take_error(f), "builder");
  cgt_fail(kdc_pass_fuse(m, NULL), "fuse");
  cgt_fail(kdc_pass_plan_memory(m, NULL), "plan_memory");
  const char *path = cgt_path("random.plan");
  cgt_fail(kdc_codegen_cpu_plan(m, NULL, path), "codegen");
  kdc_rt_plan *plan;
  cgt_fail(kdc_rt_plan_load_with(path, &(kdc_rt_options){0}, &plan), "load");
  uint32_t *xs = malloc(sizeof(uint32_t) * R);
  uint16_t *gb = malloc(2 * R), *gh = malloc(2 * R);
  float *g32 = malloc(4 * R);
  uint64_t s = 12345;
  for (int i = 0; i < R; i++) xs[i] = (uint32_t)(cgt_rng(&s) ^ (cgt_rng(&s) << 16));
  const void *in[1] = {xs};
  void *out[3] = {gb, gh, g32};
  cgt_fail(kdc_rt_plan_run(plan, in, out), "run");
  int bad = 0;
  for (int i = 0; i < R && bad < 5; i++) {
    float v;
    memcpy(&v, &xs[i], 4);
    uint16_t wb = kdc_f32_to_bf16(v), wh = kdc_f32_to_f16(v);
    float w32 = kdc_f16_to_f32(wh);
    bool ok = gb[i] == wb && gh[i] == wh &&
              (isnan(w32) ? isnan(g32[i]) : memcmp(&w32, &g32[i], 4) == 0);
    if (!ok && bad++ < 5)
      print_message("0x%08x: bf16 0x%04x want 0x%04x, f16 0x%04x want 0x%04x\n", xs[i], gb[i], wb,
                    gh[i], wh);
  }
  assert_int_equal(bad, 0);
  free(xs), free(gb), free(gh), free(g32);
  kdc_rt_plan_release(plan);
  kdc_ir_module_destroy(m);
}

/* A small graph in dtype |d| (inputs given in d): elementwise chains, a
 * broadcast bias, a reduction, a dot, a transpose, compare + select,
 * converts to i32 and back and to f32; fused and not. */
static void graph_case(kdc_dtype d, bool fuse) {
  kdc_module *m = kdc_ir_module_create("half");
  kdc_func *f = kdc_ir_func_create(m, "predict");
  int64_t xd[2] = {5, 33}, wd[2] = {33, 7}, bd[1] = {7}, yd[2] = {5, 7};
  kdc_type xt = kdc_type_make(d, 2, xd), wt = kdc_type_make(d, 2, wd), bt = kdc_type_make(d, 1, bd);
  kdc_value_id x = kdc_ir_parameter(f, KDC_PARAM_INPUT, "x", &xt);
  kdc_value_id w = kdc_ir_parameter(f, KDC_PARAM_INPUT, "w", &wt);
  kdc_value_id b = kdc_ir_parameter(f, KDC_PARAM_INPUT, "b", &bt);
  kdc_value_id e = kdc_ir_unary(f, KDC_OP_TANH, kdc_ir_binary(f, KDC_OP_MUL, x, x));
  kdc_value_id y = kdc_ir_matmul(f, kdc_ir_binary(f, KDC_OP_ADD, e, x), w);
  y = kdc_ir_binary(f, KDC_OP_ADD, y, kdc_ir_broadcast(f, b, 2, yd, (const int64_t[]){1}));
  kdc_value_id pos = kdc_ir_compare(f, KDC_CMP_GT, y, kdc_ir_splat(f, d, 2, yd, 0.0));
  kdc_value_id r = kdc_ir_select(f, pos, y, kdc_ir_unary(f, KDC_OP_EXP, y));
  kdc_value_id s = kdc_ir_reduce(f, KDC_RED_SUM, kdc_ir_transpose(f, r, (const int64_t[]){1, 0}), 1,
                                 (const int64_t[]){1});
  kdc_value_id q = kdc_ir_convert(f, kdc_ir_convert(f, kdc_ir_binary(f, KDC_OP_MUL, r, r),
                                                    KDC_DTYPE_I32), d);
  kdc_ir_add_result(f, r, "r");
  kdc_ir_add_result(f, s, "s");
  kdc_ir_add_result(f, q, "q");
  kdc_ir_add_result(f, kdc_ir_convert(f, y, KDC_DTYPE_F32), "y32");
  cgt_check(m, f, &(cgt_opts){.no_fuse = !fuse});
  kdc_ir_module_destroy(m);
}

static void test_graph(void **state) {
  (void)state;
  for (int fuse = 0; fuse < 2; fuse++) {
    graph_case(KDC_DTYPE_BF16, fuse);
    graph_case(KDC_DTYPE_F16, fuse);
  }
}

/* The text form keeps the dtypes and the constants (printed as the exact
 * widened value, parsed back to the same 16 bits). */
static void test_text_roundtrip(void **state) {
  (void)state;
  const char *src =
      "module @t {\n"
      "  func @predict {\n"
      "    %x = parameter 0 input \"x\" : bf16[3]\n"
      "    %h = parameter 1 input \"h\" : f16[3]\n"
      "    %c = constant [1.00390625, -0.1, 3] : bf16[3]\n"
      "    %d = constant [0.1, 65504, 5.96046448e-08] : f16[3]\n"
      "    %a = add %x, %c : bf16[3]\n"
      "    %b = mul %h, %d : f16[3]\n"
      "    return %a \"a\", %b \"b\"\n"
      "  }\n"
      "}\n";
  kdc_module *m;
  cgt_fail(kdc_ir_parse_module(src, "t.kir", &m), "parse");
  cgt_fail(kdc_ir_verify_module(m), "verify");
  const kdc_func *f = m->funcs[0];
  const kdc_node *c = NULL, *dn = NULL;
  for (size_t i = 0; i < f->n_nodes; i++)
    if (f->nodes[i].op == KDC_OP_CONSTANT) {
      if (c) dn = &f->nodes[i];
      else c = &f->nodes[i];
    }
  assert_non_null(dn);
  assert_int_equal(c->type.dtype, KDC_DTYPE_BF16);
  assert_int_equal(((uint16_t *)c->attr.constant.data)[0], 0x3f80); /* 1+2^-8: tie to even */
  assert_int_equal(((uint16_t *)c->attr.constant.data)[1], kdc_f32_to_bf16(-0.1f));
  assert_int_equal(((uint16_t *)dn->attr.constant.data)[1], 0x7bff);
  assert_int_equal(((uint16_t *)dn->attr.constant.data)[2], 0x0001); /* smallest subnormal */
  char *text = NULL, *text2 = NULL;
  size_t len = 0, len2 = 0;
  FILE *mf = open_memstream(&text, &len);
  kdc_ir_print_module(mf, m);
  fclose(mf);
  kdc_module *m2;
  cgt_fail(kdc_ir_parse_module(text, "t2.kir", &m2), "reparse");
  mf = open_memstream(&text2, &len2);
  kdc_ir_print_module(mf, m2);
  fclose(mf);
  assert_string_equal(text, text2);
  free(text), free(text2);
  kdc_ir_module_destroy(m);
  kdc_ir_module_destroy(m2);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_common_rounding),
      cmocka_unit_test(test_convert_plan),
      cmocka_unit_test(test_convert_random),
      cmocka_unit_test(test_graph),
      cmocka_unit_test(test_text_roundtrip),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
