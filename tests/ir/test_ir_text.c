/*
 * The IR text form: print -> parse -> print is the identity on canonical
 * text covering every op, attribute and sharding form; hand-written text
 * (names, comments, odd spacing) canonicalises; sharding text helpers; and
 * parse errors report file:line:col.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <math.h>
#include <string.h>

#include <cmocka.h>

#include "ir/ir.h"

/* Every op of ops.def, every attribute and every sharding form. */
static const char everything[] =
    "module @everything {\n"
    "  mesh [data=2, model=4]\n"
    "  weight \"d1/kernel\" : f32[4,3]\n"
    "  weight \"bn/mean\" : f32[3] non_trainable\n"
    "  func @predict {\n"
    "    %0 = parameter 0 input \"x\" : f32[2,4] {data,-} loc \"input_layer (config.layers[0])\"\n"
    "    %1 = parameter 1 weight \"d1/kernel\" : f32[4,3] {-,model}\n"
    "    %2 = parameter 2 label : i32[2]\n"
    "    %3 = parameter 3 state \"step\" : i64[] {}\n"
    "    %4 = constant 0 : f32[]\n"
    "    %5 = constant [1, 2.5, -0, inf, -inf, nan, 0.100000001, 3.40282347e+38, 1.40129846e-45] : "
    "f32[9]\n"
    "    %6 = constant [1, -2147483648, 2147483647] : i32[3]\n"
    "    %7 = constant [9223372036854775807, -9223372036854775808] : i64[2]\n"
    "    %8 = constant [0, 1] : bool[2]\n"
    "    %9 = constant 1 : bool[2,3]\n"
    "    %10 = iota dim=1 : i32[2,3]\n"
    "    %11 = dot_general %0, %1 lhs_contract=[1] rhs_contract=[0] : f32[2,3] {data,-} "
    "partial(sum: model)\n"
    "    %12 = neg %11 : f32[2,3] group=0\n"
    "    %13 = abs %12 : f32[2,3] group=0\n"
    "    %14 = exp %13 : f32[2,3] group=0 mem=128\n"
    "    %15 = log %14 : f32[2,3] mem=0\n"
    "    %16 = log1p %15 : f32[2,3]\n"
    "    %17 = expm1 %16 : f32[2,3]\n"
    "    %18 = tanh %17 : f32[2,3]\n"
    "    %19 = logistic %18 : f32[2,3]\n"
    "    %20 = sqrt %19 : f32[2,3]\n"
    "    %21 = rsqrt %20 : f32[2,3]\n"
    "    %22 = erf %21 : f32[2,3]\n"
    "    %23 = sign %22 : f32[2,3]\n"
    "    %24 = floor %23 : f32[2,3]\n"
    "    %25 = ceil %24 : f32[2,3]\n"
    "    %26 = round %25 : f32[2,3] group=3 loc \"a \\\"quoted\\\" \\\\ name\\n\\ttab\\x01 "
    "\xc3\xa9\"\n"
    "    %27 = not %9 : bool[2,3]\n"
    "    %28 = convert %26 : i32[2,3]\n"
    "    %29 = add %26, %26 : f32[2,3] {(data,model),-}\n"
    "    %30 = sub %29, %26 : f32[2,3] {data?,?}\n"
    "    %31 = mul %30, %26 : f32[2,3] {-,-} replicated(data,model)\n"
    "    %32 = div %31, %26 : f32[2,3] {(model,data)?,-} prov=7\n"
    "    %33 = max %32, %26 : f32[2,3] {-,data} replicated(model) prov=1\n"
    "    %34 = min %33, %26 : f32[2,3]\n"
    "    %35 = pow %34, %26 : f32[2,3]\n"
    "    %36 = and %27, %9 : bool[2,3]\n"
    "    %37 = or %36, %27 : bool[2,3]\n"
    "    %38 = compare lt %35, %26 : bool[2,3]\n"
    "    %39 = compare ge %28, %10 : bool[2,3]\n"
    "    %40 = select %38, %35, %26 : f32[2,3]\n"
    "    %41 = broadcast_in_dim %4 dims=[] : f32[2,3]\n"
    "    %42 = broadcast_in_dim %5 dims=[1] : f32[4,9]\n"
    "    %43 = reshape %40 : f32[3,2]\n"
    "    %44 = transpose %43 perm=[1,0] : f32[2,3]\n"
    "    %45 = slice %5 start=[1] limit=[9] stride=[3] : f32[3]\n"
    "    %46 = concatenate %44, %41, %40 dim=0 : f32[6,3]\n"
    "    %47 = pad %46, %4 low=[1,0] high=[0,-1] interior=[0,1] : f32[7,4]\n"
    "    %48 = reduce sum %47 dims=[1] : f32[7]\n"
    "    %49 = reduce max %47 dims=[0,1] : f32[]\n"
    "    %50 = reduce min %28 dims=[0] : i32[3]\n"
    "    %51 = reduce prod %7 dims=[0] : i64[]\n"
    "    %52 = reshape %46 : f32[2,3,3]\n"
    "    %53 = dot_general %52, %52 lhs_batch=[0] rhs_batch=[0] lhs_contract=[2] rhs_contract=[1]"
    " : f32[2,3,3]\n"
    "    %54 = sharding_constraint %53 : f32[2,3,3] {data,-,?} prov=2\n"
    "    %55 = all_reduce [model] %54 : f32[2,3,3]\n"
    "    %56 = all_gather [data,model] %55 dim=1 : f32[2,24,3]\n"
    "    %57 = reduce_scatter [model] %56 dim=1 : f32[2,6,3]\n"
    "    %58 = all_to_all [data] %57 split=1 concat=2 : f32[2,3,6]\n"
    "    %59 = collective_permute [model] %58 shift=-1 : f32[2,3,6]\n"
    "    %60 = shard_slice [model,data] %56 dim=1 : f32[2,3,3] {-,-,?}\n"
    "    %61 = rng_uniform %3 seed=-5 : f32[2,3]\n"
    "    %62 = convolution %52, %53 stride=[1] pad_low=[1] pad_high=[0] lhs_dilation=[1] "
    "rhs_dilation=[1] groups=1 : f32[2,3,3] {data,-,-}\n"
    "    %63 = reduce_window max %47 window=[2,2] stride=[2,1] pad_low=[0,1] pad_high=[1,0] "
    "dilation=[1,1] : f32[4,4]\n"
    "    %64 = select_and_scatter max %47, %63 window=[2,2] stride=[2,1] pad_low=[0,1] "
    "pad_high=[1,0] dilation=[1,1] : f32[7,4]\n"
    "    %65 = gather %1, %2 : f32[2,3]\n"
    "    %66 = scatter_add %2, %65 : f32[4,3]\n"
    "    %67 = reverse %40 dims=[0] : f32[2,3]\n"
    "    %68 = constant 0 : f32[3]\n"
    "    %69 = scan @cell %68, %67 length=2 carries=1 xs=1 : f32[2,3]\n"
    "    %70 = stop_gradient %67 : f32[2,3]\n"
    "    return %53 \"out\", %48, %49 \"max\"\n"
    "  }\n"
    "  func @\"train step\" {\n"
    "    return\n"
    "  }\n"
    "  func @cell {\n"
    "    %0 = parameter 0 input \"s\" : f32[3]\n"
    "    %1 = parameter 1 input \"x\" : f32[3]\n"
    "    %2 = add %0, %1 : f32[3]\n"
    "    return %2, %2\n"
    "  }\n"
    "}\n";

static kdc_module *parse_ok(const char *text) {
  kdc_module *m = NULL;
  kdc_status st = kdc_ir_parse_module(text, "t.kir", &m);
  if (st) fail_msg("unexpected parse error: %s", kdc_status_message(st));
  assert_non_null(m);
  return m;
}

/* Parses, prints and compares with |want|. */
static void assert_prints_as(const char *text, const char *want) {
  kdc_module *m = parse_ok(text);
  char *s = kdc_ir_module_to_string(m);
  assert_string_equal(s, want);
  free(s);
  kdc_ir_module_destroy(m);
}

static void test_round_trip_everything(void **state) {
  (void)state;
  assert_prints_as(everything, everything);
  kdc_module *m = parse_ok(everything);
  kdc_status st = kdc_ir_verify_module(m);
  if (st) fail_msg("%s", kdc_status_message(st));
  kdc_func *f = kdc_ir_module_find_func(m, "predict");
  assert_int_equal(f->n_nodes, 71);
  assert_int_equal(f->n_params, 4);
  assert_int_equal(f->n_results, 3);
  assert_null(f->result_names[1]);
  assert_string_equal(f->result_names[2], "max");
  assert_string_equal(f->nodes[26].origin, "a \"quoted\" \\ name\n\ttab\x01 \xc3\xa9");
  assert_int_equal(f->nodes[14].mem_offset, 128);
  assert_int_equal(f->nodes[12].group, 0);
  assert_false(m->weights[1].trainable);
  const float *c5 = f->nodes[5].attr.constant.data;
  assert_true(c5[6] == 0.1f && c5[7] == 3.40282347e+38f && c5[8] == 1.40129846e-45f);
  assert_true(c5[2] == 0 && signbit(c5[2]));
  const kdc_sharding *s = &f->nodes[32].sharding;
  assert_int_equal(s->naxes[0], 2);
  assert_int_equal(s->axes[0][0], 1);
  assert_int_equal(s->open_mask, 1);
  assert_int_equal(s->origin, 7);
  assert_int_equal(f->nodes[11].sharding.partial, 2);
  assert_non_null(kdc_ir_module_find_func(m, "train step"));
  kdc_ir_module_destroy(m);
}

/* Adding an op to ops.def without covering it here fails this test. */
static void test_everything_covers_every_op(void **state) {
  (void)state;
  for (int op = 0; op < KDC_OP_COUNT; op++) {
    char pat[64];
    snprintf(pat, sizeof pat, " = %s ", kdc_op_name((kdc_op)op));
    if (!strstr(everything, pat))
      fail_msg("op %s is not in the round-trip text", kdc_op_name((kdc_op)op));
  }
}

static void test_hand_written_canonicalises(void **state) {
  (void)state;
  const char *in =
      "# a comment line\n"
      "module @m{mesh[data=2]\n"
      "func @f {   %x = parameter 0 input : f32[4]{ data }   # trailing comment\n"
      "%y=neg %x:f32[4]  loc\"here\"\n"
      "%c = constant [ 1 , 2,3,4.0 ] : f32[4] %z = add %y , %c : f32[4]\n"
      " return %z \"out\" } }";
  const char *want =
      "module @m {\n"
      "  mesh [data=2]\n"
      "  func @f {\n"
      "    %0 = parameter 0 input : f32[4] {data}\n"
      "    %1 = neg %0 : f32[4] loc \"here\"\n"
      "    %2 = constant [1, 2, 3, 4] : f32[4]\n"
      "    %3 = add %1, %2 : f32[4]\n"
      "    return %3 \"out\"\n"
      "  }\n"
      "}\n";
  assert_prints_as(in, want);
  assert_prints_as(want, want);
}

static void test_builder_module_round_trips(void **state) {
  (void)state;
  kdc_module *m = kdc_ir_module_create("mlp");
  kdc_func *f = kdc_ir_func_create(m, "predict");
  int64_t xd[] = {8, 4}, wd[] = {4, 2};
  kdc_type xt = kdc_type_make(KDC_DTYPE_F32, 2, xd), wt = kdc_type_make(KDC_DTYPE_F32, 2, wd);
  kdc_ir_module_add_weight(m, "d/kernel", &wt, NULL);
  kdc_ir_set_origin(f, "layer d (config.layers[1])");
  kdc_value_id x = kdc_ir_parameter(f, KDC_PARAM_INPUT, "in", &xt);
  kdc_value_id w = kdc_ir_parameter(f, KDC_PARAM_WEIGHT, "d/kernel", &wt);
  kdc_value_id y = kdc_ir_binary_bcast(f, KDC_OP_MAX, kdc_ir_matmul(f, x, w),
                                       kdc_ir_scalar(f, KDC_DTYPE_F32, 0.1));
  kdc_ir_add_result(f, y, "d");
  assert_null(f->error);
  assert_null(kdc_ir_verify_module(m));
  char *s1 = kdc_ir_module_to_string(m);
  assert_non_null(
      strstr(s1, "%2 = constant 0.100000001 : f32[] loc \"layer d (config.layers[1])\""));
  assert_prints_as(s1, s1);
  free(s1);
  kdc_ir_module_destroy(m);
}

static void test_sharding_text(void **state) {
  (void)state;
  kdc_mesh mesh = {3, {"data", "model", "pipe"}, {2, 4, 1}};
  assert_null(kdc_mesh_check(&mesh));
  assert_int_equal(kdc_mesh_devices(&mesh), 8);
  assert_int_equal(kdc_mesh_axis_index(&mesh, "model"), 1);
  assert_int_equal(kdc_mesh_axis_index(&mesh, "nope"), -1);
  const char *forms[] = {
      "{}", "{-}", "{?,-}", "{data,model}", "{(data,model),-}", "{(model,pipe,data)?,-,?}",
      "{data?} replicated(pipe)", "{-,-} partial(sum: data,model)",
      "{-} replicated(data) partial(sum: model) prov=4294967295",
  };
  for (size_t i = 0; i < sizeof forms / sizeof forms[0]; i++) {
    kdc_sharding s;
    const char *end;
    kdc_status st = kdc_sharding_parse(forms[i], &mesh, &s, &end);
    if (st) fail_msg("%s: %s", forms[i], kdc_status_message(st));
    assert_ptr_equal(end, forms[i] + strlen(forms[i]));
    char buf[2048];
    assert_string_equal(kdc_sharding_str(&mesh, &s, buf, sizeof buf), forms[i]);
  }
  /* Whitespace is tolerated and the end stops before the next word. */
  kdc_sharding s;
  const char *text = "{ ( data , model ) ? , - }  partial( sum : pipe ) group=1", *end;
  assert_null(kdc_sharding_parse(text, &mesh, &s, &end));
  assert_string_equal(end, " group=1");
  char buf[64];
  assert_string_equal(kdc_sharding_str(&mesh, &s, buf, sizeof buf),
                      "{(data,model)?,-} partial(sum: pipe)");
  /* Truncation is safe. */
  assert_string_equal(kdc_sharding_str(&mesh, &s, buf, 6), "{(dat");
  struct { const char *text, *msg; int at; } bad[] = {
      {"{data,foo}", "unknown mesh axis 'foo'", 6},
      {"{data", "expected ',' or '}' in sharding", 5},
      {"{-} partial(max: data)", "expected 'sum' (the only partial op)", 12},
      {"{-} replicated(data,data)", "mesh axis 'data' listed twice", 20},
      {"{(data,model,pipe,data,model)}", "more than 4 axes on one dim", 23},
      {"data", "expected '{' to start a sharding", 0},
      {"{-} partial(sum: )", "expected a mesh axis name", 17},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    kdc_status st = kdc_sharding_parse(bad[i].text, &mesh, &s, &end);
    assert_non_null(st);
    assert_string_equal(kdc_status_message(st), bad[i].msg);
    assert_int_equal(end - bad[i].text, bad[i].at);
    kdc_status_free(st);
  }
  kdc_mesh dup = {2, {"a", "a"}, {1, 2}}, zero = {1, {"a"}, {0}}, badname = {1, {"1x"}, {2}};
  kdc_status st;
  assert_non_null(st = kdc_mesh_check(&dup));
  kdc_status_free(st);
  assert_non_null(st = kdc_mesh_check(&zero));
  kdc_status_free(st);
  assert_non_null(st = kdc_mesh_check(&badname));
  kdc_status_free(st);
}

/* Parses |text| and expects the error message |want|. */
static void assert_parse_error(const char *text, const char *want) {
  kdc_module *m = (kdc_module *)1;
  kdc_status st = kdc_ir_parse_module(text, "bad.kir", &m);
  if (!st) fail_msg("expected error \"%s\", parse succeeded", want);
  assert_null(m);
  assert_int_equal(kdc_status_code(st), KDC_INVALID_INPUT);
  assert_string_equal(kdc_status_message(st), want);
  kdc_status_free(st);
}

#define HEAD "module @m {\n  func @f {\n"
static void test_parse_errors(void **state) {
  (void)state;
  assert_parse_error("", "bad.kir:1:1: error: expected 'module', got end of input");
  assert_parse_error("modul @m {}", "bad.kir:1:1: error: expected 'module', got 'modul'");
  assert_parse_error(HEAD "    %0 = frobnicate : f32[]\n",
                     "bad.kir:3:10: error: unknown op 'frobnicate'");
  assert_parse_error(HEAD "    %0 = neg %1 : f32[]\n",
                     "bad.kir:3:14: error: use of undefined value %1");
  assert_parse_error(HEAD "    %0 = neg %0 : f32[]\n",
                     "bad.kir:3:14: error: use of undefined value %0");
  assert_parse_error(HEAD "    %0 = constant 1 : f32[]\n    %1 = add %0 : f32[]\n",
                     "bad.kir:4:10: error: add takes 2 operands, got 1");
  assert_parse_error(HEAD "    %0 = concatenate dim=0 : f32[]\n",
                     "bad.kir:3:10: error: concatenate takes at least 1 operand, got 0");
  assert_parse_error(HEAD "    %0 = constant 1 : f32[]\n    %0 = neg %0 : f32[]\n",
                     "bad.kir:4:5: error: redefinition of %0 (first defined as %0)");
  assert_parse_error(HEAD "    %0 = constant 1 : f32[2]\n    %1 = transpose %0 : f32[2]\n",
                     "bad.kir:4:23: error: missing attribute 'perm' for transpose");
  assert_parse_error(HEAD "    %0 = constant 1 : f32[2]\n    %1 = neg %0 dims=[0] : f32[2]\n",
                     "bad.kir:4:17: error: unknown attribute 'dims' for neg");
  assert_parse_error(HEAD "    %0 = iota dim=0 dim=1 : f32[2]\n",
                     "bad.kir:3:21: error: attribute 'dim' given twice");
  assert_parse_error(HEAD "    %0 = constant 1 : f32[2] {data}\n",
                     "bad.kir:3:31: error: unknown mesh axis 'data'");
  assert_parse_error(HEAD "    %0 = constant 1 : f32[2] loc \"abc\n",
                     "bad.kir:3:34: error: unterminated string");
  assert_parse_error(HEAD "    %0 = constant 1 : f32[2] loc \"a\\qb\"\n",
                     "bad.kir:3:36: error: unknown escape in string (use \\\" \\\\ \\n \\t \\xHH)");
  assert_parse_error(HEAD "    %0 = constant [1, 2, 3] : f32[2,2]\n",
                     "bad.kir:3:19: error: constant has 3 elements, its type needs 4");
  assert_parse_error(HEAD "    %0 = constant [1, 2147483648] : i32[2]\n",
                     "bad.kir:3:23: error: expected a i32 literal, got '2147483648'");
  assert_parse_error(HEAD "    %0 = constant [1, 2.5] : i64[2]\n",
                     "bad.kir:3:23: error: expected a i64 literal, got '2.5'");
  assert_parse_error(HEAD "    %0 = constant [1, x] : f32[2]\n",
                     "bad.kir:3:23: error: expected a f32 literal, got 'x'");
  assert_parse_error(HEAD "    %0 = parameter 1 input : f32[2]\n    return\n  }\n}\n",
                     "bad.kir:3:5: error: parameter index 1 out of range (1 parameters)");
  assert_parse_error(HEAD
                     "    %0 = parameter 0 input : f32[2]\n    %1 = parameter 0 input : f32[2]\n"
                     "    return\n  }\n}\n",
                     "bad.kir:4:5: error: parameter index 0 already used by %0");
  assert_parse_error(
      HEAD "    %0 = parameter 0 data : f32[2]\n",
      "bad.kir:3:22: error: expected a parameter kind (input, label, weight, state), got 'data'");
  assert_parse_error(
      HEAD "    %0 = compare less %0, %0 : f32[2]\n",
      "bad.kir:3:18: error: expected a comparison (eq, ne, lt, le, gt, ge), got 'less'");
  assert_parse_error(HEAD "    %0 = constant 1 : f32[1,1,1,1,1,1,1,1,1]\n",
                     "bad.kir:3:43: error: rank exceeds the maximum of 8");
  assert_parse_error(HEAD "    %0 = constant 1 : f32[-1]\n",
                     "bad.kir:3:27: error: negative dimension size");
  assert_parse_error(HEAD "    %0 = constant 1 : f32[4611686018427387904,4]\n",
                     "bad.kir:3:27: error: type is too large");
  assert_parse_error(HEAD "    %0 = constant 1 : f33[1]\n",
                     "bad.kir:3:23: error: expected a type such as f32[2,3], got 'f33'");
  assert_parse_error(HEAD "    return %0\n", "bad.kir:3:12: error: use of undefined value %0");
  assert_parse_error(HEAD "    return\n  }\n}\nextra",
                     "bad.kir:6:1: error: expected end of input after the module, got 'extra'");
  assert_parse_error(HEAD "    return\n  }\n  func @f {\n    return\n  }\n}\n",
                     "bad.kir:5:3: error: function @f defined twice");
  assert_parse_error("module @m {\n  mesh [a=2, a=3]\n}\n",
                     "bad.kir:2:3: error: mesh: axis \"a\" named twice");
  assert_parse_error("module @m {\n  func @f {\n    return\n  }\n  mesh [a=2]\n}\n",
                     "bad.kir:5:3: error: the mesh must come once, before any func");
  assert_parse_error("module @m {\n  weight \"w\" : f32[1]\n  weight \"w\" : f32[1]\n}\n",
                     "bad.kir:3:3: error: weight \"w\" listed twice");
  assert_parse_error(HEAD "    %0 = constant 1 : f32[] $\n",
                     "bad.kir:3:29: error: unexpected character '$'");
  assert_parse_error(HEAD "    %0 = constant 1 : f32[] group=-1\n",
                     "bad.kir:3:29: error: group out of range");
  assert_parse_error(HEAD "    %0 = constant 1 : f32[]\n    %1 = add %0, : f32[]\n",
                     "bad.kir:4:18: error: expected a value, got ':'");
  assert_parse_error(HEAD "    %0 = constant 1 : f32[]\n    %1 = neg %0\n",
                     "bad.kir:5:1: error: expected ':', got end of input");
}

/* Every prefix and many byte mutations of |everything| either parse (and
 * then verify or not, and round-trip) or fail with a located message. */
static void test_parse_never_crashes(void **state) {
  (void)state;
  size_t n = strlen(everything);
  char *buf = malloc(n + 1);
  uint32_t seed = 12345;
  for (size_t i = 0; i < n + 3000; i++) {
    memcpy(buf, everything, n + 1);
    if (i < n) {
      buf[i] = 0;
    } else {
      for (int k = 0; k < 3; k++) {
        seed = seed * 1103515245u + 12345u;
        size_t at = (seed >> 8) % n;
        seed = seed * 1103515245u + 12345u;
        buf[at] = "%@\"{}[](),:=-?#x9 \n\x01\xff"[(seed >> 8) % 21];
      }
    }
    kdc_module *m = NULL;
    kdc_status st = kdc_ir_parse_module(buf, "t.kir", &m);
    if (st) {
      assert_null(m);
      assert_memory_equal(kdc_status_message(st), "t.kir:", 6);
      kdc_status_free(st);
      continue;
    }
    kdc_status_free(kdc_ir_verify_module(m));
    char *text = kdc_ir_module_to_string(m);
    assert_prints_as(text, text);
    free(text);
    kdc_ir_module_destroy(m);
  }
  free(buf);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_round_trip_everything),
      cmocka_unit_test(test_everything_covers_every_op),
      cmocka_unit_test(test_hand_written_canonicalises),
      cmocka_unit_test(test_builder_module_round_trips),
      cmocka_unit_test(test_sharding_text),
      cmocka_unit_test(test_parse_errors),
      cmocka_unit_test(test_parse_never_crashes),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
