/*
 * Every op of ir/ops.def through the whole CPU path (fuse, plan_memory,
 * codegen, plan file, load, JIT, run) against the reference interpreter,
 * on shapes of rank 0..4 with odd sizes (1, 7, 33).  The last test fails
 * when an op of ops.def was not exercised by any case (STYLE.md 14).
 * Tolerances: see cg_test.h (exact unless a case says otherwise).
 */
#include "cg_test.h"
#include "kdc/fpenv.h"

static bool covered[KDC_OP_COUNT];

static void mark(const kdc_func *f) {
  for (size_t i = 0; i < f->n_nodes; i++) covered[f->nodes[i].op] = true;
}

typedef struct shape { int rank; int64_t dims[4]; } shape;
static const shape shapes[] = {{0, {0}}, {1, {7}}, {2, {1, 33}}, {3, {3, 1, 7}}, {4, {2, 3, 1, 5}}};
enum { N_SHAPES = sizeof shapes / sizeof shapes[0] };

static kdc_module *new_case(kdc_func **f) {
  kdc_module *m = kdc_ir_module_create("ops");
  *f = kdc_ir_func_create(m, "predict");
  return m;
}

static kdc_value_id param(kdc_func *f, kdc_dtype d, int rank, const int64_t *dims) {
  kdc_type t = kdc_type_make(d, rank, dims);
  char name[16];
  snprintf(name, sizeof name, "x%zu", f->n_params);
  return kdc_ir_parameter(f, KDC_PARAM_INPUT, name, &t);
}

static void finish(kdc_module *m, kdc_func *f, kdc_value_id r, const cgt_opts *o) {
  kdc_ir_add_result(f, r, "y");
  mark(f);
  cgt_check(m, f, o);
  kdc_ir_module_destroy(m);
}

/* One unary op on a parameter, every shape, fused and unfused. */
static void unary_case(kdc_op op, kdc_dtype d, const cgt_opts *o) {
  for (int s = 0; s < N_SHAPES; s++)
    for (int fuse = 0; fuse < 2; fuse++) {
      kdc_func *f;
      kdc_module *m = new_case(&f);
      kdc_value_id x = param(f, d, shapes[s].rank, shapes[s].dims);
      /* a neg (or not) after the op keeps it an interior of a fused group */
      kdc_value_id y = kdc_ir_unary(f, op, x);
      if (fuse && d != KDC_DTYPE_BOOL) y = kdc_ir_unary(f, KDC_OP_NEG, y);
      cgt_opts oo = o ? *o : (cgt_opts){0};
      oo.no_fuse = !fuse;
      finish(m, f, y, &oo);
    }
}

static void test_unary_f32(void **state) {
  (void)state;
  static const kdc_op exact[] = {KDC_OP_NEG, KDC_OP_ABS, KDC_OP_SQRT, KDC_OP_SIGN, KDC_OP_FLOOR,
                                 KDC_OP_CEIL, KDC_OP_ROUND, KDC_OP_RSQRT, KDC_OP_EXP,
                                 KDC_OP_TANH, KDC_OP_ERF, KDC_OP_EXPM1, KDC_OP_LOGISTIC,
                                 KDC_OP_STOP_GRADIENT};
  for (size_t i = 0; i < sizeof exact / sizeof exact[0]; i++)
    unary_case(exact[i], KDC_DTYPE_F32, NULL);
  cgt_opts pos = {.positive = 1};
  unary_case(KDC_OP_LOG, KDC_DTYPE_F32, &pos);
  unary_case(KDC_OP_LOG1P, KDC_DTYPE_F32, &pos);
  unary_case(KDC_OP_RSQRT, KDC_DTYPE_F32, &pos);
  /* special values: NaN, infinities, signed zeros, halves (round to even) */
  static const float sp[] = {NAN, INFINITY, -INFINITY, 0.0f, -0.0f, 0.5f, -0.5f, 1.5f, 2.5f,
                             -2.5f, 1e-40f, 100.0f, -100.0f, 3.0f,
                             /* the range ends of ir/math.c's exp, expm1, tanh */
                             88.72f, 88.8f, 88.9f, -87.33f, -87.34f, -17.5f, -17.6f, 40.0f,
                             40.5f, 9.1f, 9.2f, 1e-30f, -1e-30f, 0.34657f, -0.34658f};
  static const kdc_op all[] = {KDC_OP_NEG, KDC_OP_ABS, KDC_OP_EXP, KDC_OP_LOG, KDC_OP_LOG1P,
                               KDC_OP_EXPM1, KDC_OP_TANH, KDC_OP_LOGISTIC, KDC_OP_SQRT,
                               KDC_OP_RSQRT, KDC_OP_ERF, KDC_OP_SIGN, KDC_OP_FLOOR, KDC_OP_CEIL,
                               KDC_OP_ROUND};
  int64_t n = sizeof sp / sizeof sp[0];
  kdc_type t = kdc_type_make(KDC_DTYPE_F32, 1, &n);
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
    kdc_func *f;
    kdc_module *m = new_case(&f);
    kdc_value_id c = kdc_ir_constant(f, &t, sp);
    kdc_value_id x = param(f, KDC_DTYPE_F32, 1, &n);
    /* x*0 + c: the specials flow through a parameter-dependent kernel */
    kdc_value_id z = kdc_ir_binary(f, KDC_OP_MUL, x, kdc_ir_splat(f, KDC_DTYPE_F32, 1, &n, 0.0));
    kdc_value_id v = kdc_ir_binary(f, KDC_OP_ADD, z, c);
    finish(m, f, kdc_ir_unary(f, all[i], v), NULL);
  }
}

/* kdc computes with subnormals flushed (kdc/fpenv.h), as XLA:CPU and
 * TensorFlow do: a result below 2^-126 is written as a zero of its sign
 * (FTZ) and a subnormal input is read as zero (DAZ), in the JIT's kernels,
 * in OpenBLAS's GEMMs and in the reference interpreter alike; the caller's
 * own mode is left as it was.  Expected values are the IEEE rules with
 * that flushing, written out by hand. */
static void test_subnormals_flushed(void **state) {
  (void)state;
  unsigned long fp = kdc_fp_flush_enter();
  bool can = kdc_fp_flushing();
  kdc_fp_flush_leave(fp);
  if (!can) skip(); /* a CPU kdc cannot switch: subnormals are kept */
  assert_false(kdc_fp_flushing()); /* the test process starts in IEEE mode */
  int64_t n = 6, mk[2] = {1, 1}, nk[2] = {1, 1};
  kdc_func *f;
  kdc_module *m = new_case(&f);
  kdc_value_id x = param(f, KDC_DTYPE_F32, 1, &n);
  kdc_value_id a = param(f, KDC_DTYPE_F32, 2, mk), b = param(f, KDC_DTYPE_F32, 2, nk);
  /* y1 = x * 1e-30 (FTZ), y2 = x * 2 + 0 (DAZ), y3 = a . b (FTZ inside a GEMM) */
  kdc_value_id y1 = kdc_ir_binary(f, KDC_OP_MUL, x, kdc_ir_splat(f, KDC_DTYPE_F32, 1, &n, 1e-30));
  kdc_value_id y2 = kdc_ir_binary(f, KDC_OP_ADD,
                                  kdc_ir_binary(f, KDC_OP_MUL, x, kdc_ir_splat(f, KDC_DTYPE_F32, 1, &n, 2.0)),
                                  kdc_ir_splat(f, KDC_DTYPE_F32, 1, &n, 0.0));
  kdc_attr_dot d = {.lhs_contract = {1, {1}}, .rhs_contract = {1, {0}}};
  kdc_value_id y3 = kdc_ir_dot(f, a, b, &d);
  kdc_ir_add_result(f, y1, "y1");
  kdc_ir_add_result(f, y2, "y2");
  kdc_ir_add_result(f, y3, "y3");
  cgt_fail(kdc_ir_take_error(f), "builder");
  static const float xs[6] = {1e-10f, -1e-10f, 1.0f, 1e-40f, -1e-40f, 1e-8f};
  static const float as[1] = {1e-20f}, bs[1] = {1e-20f};
  /* IEEE would give the subnormals 1e-40, -1e-40 and 1e-38 for x * 1e-30
   * (flushed: +0, -0, +0), 2e-40 and -2e-40 for 2x + 0 on the subnormal
   * inputs (read as +-0: +0 both) and 1e-40 for the GEMM (flushed: +0) */
  const float want1[6] = {0.0f, -0.0f, 1e-30f, 0.0f, -0.0f, 0.0f};
  const float want2[6] = {2e-10f, -2e-10f, 2.0f, 0.0f, 0.0f, 2e-8f};
  kdc_tensor args[3] = {{f->nodes[x].type, (void *)xs}, {f->nodes[a].type, (void *)as},
                        {f->nodes[b].type, (void *)bs}};
  kdc_tensor ref[3];
  memset(ref, 0, sizeof ref);
  cgt_fail(kdc_ir_interpret(f, args, 3, ref), "interpret");
  assert_false(kdc_fp_flushing());
  kdc_pass_fuse(m, NULL);
  cgt_fail(kdc_pass_plan_memory(m, NULL), "plan_memory");
  const char *path = cgt_path("subnormal.plan");
  cgt_fail(kdc_codegen_cpu_plan(m, NULL, path), "codegen");
  for (int threads = 1; threads <= 2; threads++) {
    kdc_rt_plan *plan;
    kdc_rt_options ro = {.n_threads = threads};
    cgt_fail(kdc_rt_plan_load_with(path, &ro, &plan), "load");
    float o1[6], o2[6], o3[1];
    const void *in[3] = {xs, as, bs};
    void *out[3] = {o1, o2, o3};
    cgt_fail(kdc_rt_plan_run(plan, in, out), "run");
    assert_false(kdc_fp_flushing()); /* the caller's mode is restored */
    const float *got[2][3] = {{o1, o2, o3}, {ref[0].data, ref[1].data, ref[2].data}};
    for (int k = 0; k < 2; k++) { /* the runtime, then the interpreter */
      for (int i = 0; i < 6; i++) {
        if (memcmp(&got[k][0][i], &want1[i], 4))
          fail_msg("%s y1[%d] = %g, want %g", k ? "interpreter" : "runtime", i, got[k][0][i], want1[i]);
        if (memcmp(&got[k][1][i], &want2[i], 4))
          fail_msg("%s y2[%d] = %g, want %g", k ? "interpreter" : "runtime", i, got[k][1][i], want2[i]);
      }
      if (got[k][2][0] != 0.0f || signbit(got[k][2][0]))
        fail_msg("%s y3 = %g, want +0", k ? "interpreter" : "runtime", got[k][2][0]);
    }
    kdc_rt_plan_release(plan);
  }
  for (int i = 0; i < 3; i++) free(ref[i].data);
  kdc_ir_module_destroy(m);
}

static void test_unary_int(void **state) {
  (void)state;
  static const kdc_op ops[] = {KDC_OP_NEG, KDC_OP_ABS, KDC_OP_SIGN, KDC_OP_NOT};
  for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
    unary_case(ops[i], KDC_DTYPE_I32, NULL);
    unary_case(ops[i], KDC_DTYPE_I64, NULL);
  }
  unary_case(KDC_OP_NOT, KDC_DTYPE_BOOL, NULL);
}

static void test_convert(void **state) {
  (void)state;
  static const kdc_dtype ds[] = {KDC_DTYPE_F32, KDC_DTYPE_I32, KDC_DTYPE_I64, KDC_DTYPE_BOOL};
  for (int a = 0; a < 4; a++)
    for (int b = 0; b < 4; b++)
      for (int s = 1; s < N_SHAPES; s += 2) {
        kdc_func *f;
        kdc_module *m = new_case(&f);
        kdc_value_id x = param(f, ds[a], shapes[s].rank, shapes[s].dims);
        if (ds[a] == KDC_DTYPE_F32)  /* large values: saturation of f32 -> i32 */
          x = kdc_ir_binary_scalar(f, KDC_OP_MUL, x, 1e9);
        finish(m, f, kdc_ir_convert(f, x, ds[b]), NULL);
      }
}

static void binary_case(kdc_op op, kdc_dtype d, bool positive) {
  for (int s = 0; s < N_SHAPES; s++) {
    kdc_func *f;
    kdc_module *m = new_case(&f);
    kdc_value_id a = param(f, d, shapes[s].rank, shapes[s].dims);
    kdc_value_id b = param(f, d, shapes[s].rank, shapes[s].dims);
    cgt_opts o = {.positive = positive, .no_fuse = s == 2};
    finish(m, f, kdc_ir_binary(f, op, a, b), &o);
  }
}

static void test_binary(void **state) {
  (void)state;
  static const kdc_op fops[] = {KDC_OP_ADD, KDC_OP_SUB, KDC_OP_MUL,
                                KDC_OP_DIV, KDC_OP_MAX, KDC_OP_MIN};
  for (size_t i = 0; i < sizeof fops / sizeof fops[0]; i++) {
    binary_case(fops[i], KDC_DTYPE_F32, false);
    binary_case(fops[i], KDC_DTYPE_I32, false);
    binary_case(fops[i], KDC_DTYPE_I64, false);
  }
  binary_case(KDC_OP_POW, KDC_DTYPE_F32, true);
  static const kdc_op bops[] = {KDC_OP_AND, KDC_OP_OR};
  for (int i = 0; i < 2; i++) {
    binary_case(bops[i], KDC_DTYPE_I32, false);
    binary_case(bops[i], KDC_DTYPE_I64, false);
    binary_case(bops[i], KDC_DTYPE_BOOL, false);
  }
  /* NaN-propagating max/min and signed zeros, as the interpreter */
  static const float a[] = {NAN, 1, NAN, 0.0f, -0.0f, -0.0f, 2, -INFINITY};
  static const float b[] = {1, NAN, NAN, -0.0f, 0.0f, -0.0f, 2, 3};
  int64_t n = 8;
  kdc_type t = kdc_type_make(KDC_DTYPE_F32, 1, &n);
  for (int op = 0; op < 2; op++) {
    kdc_func *f;
    kdc_module *m = new_case(&f);
    kdc_value_id x = param(f, KDC_DTYPE_F32, 1, &n);
    kdc_value_id z = kdc_ir_binary(f, KDC_OP_MUL, x, kdc_ir_splat(f, KDC_DTYPE_F32, 1, &n, 0.0));
    kdc_value_id ca = kdc_ir_binary(f, KDC_OP_ADD, z, kdc_ir_constant(f, &t, a));
    kdc_value_id cb = kdc_ir_constant(f, &t, b);
    finish(m, f, kdc_ir_binary(f, op ? KDC_OP_MIN : KDC_OP_MAX, ca, cb), NULL);
  }
}

static void test_compare_select(void **state) {
  (void)state;
  static const kdc_dtype ds[] = {KDC_DTYPE_F32, KDC_DTYPE_I32, KDC_DTYPE_I64, KDC_DTYPE_BOOL};
  for (int d = 0; d < 4; d++)
    for (int c = KDC_CMP_EQ; c <= KDC_CMP_GE; c++) {
      kdc_func *f;
      kdc_module *m = new_case(&f);
      int64_t dims[2] = {3, 7};
      kdc_value_id a = param(f, ds[d], 2, dims), b = param(f, ds[d], 2, dims);
      if (ds[d] == KDC_DTYPE_F32)  /* some equal elements, and a NaN */
        b = kdc_ir_unary(f, KDC_OP_FLOOR, b), a = kdc_ir_unary(f, KDC_OP_FLOOR, a);
      kdc_value_id p = kdc_ir_compare(f, (kdc_cmp)c, a, b);
      finish(m, f, kdc_ir_select(f, p, a, b), NULL);
    }
  for (int s = 0; s < N_SHAPES; s++) {  /* select returning bool, and the predicate itself */
    kdc_func *f;
    kdc_module *m = new_case(&f);
    kdc_value_id p = param(f, KDC_DTYPE_BOOL, shapes[s].rank, shapes[s].dims);
    kdc_value_id q = param(f, KDC_DTYPE_BOOL, shapes[s].rank, shapes[s].dims);
    kdc_value_id r = param(f, KDC_DTYPE_BOOL, shapes[s].rank, shapes[s].dims);
    finish(m, f, kdc_ir_select(f, p, q, r), NULL);
  }
}

static void test_leaves(void **state) {
  (void)state;
  static const kdc_dtype ds[] = {KDC_DTYPE_F32, KDC_DTYPE_I32, KDC_DTYPE_I64};
  for (int s = 1; s < N_SHAPES; s++)
    for (int d = 0; d < 3; d++)
      for (int dim = 0; dim < shapes[s].rank; dim++) {  /* iota alone and fused */
        kdc_func *f;
        kdc_module *m = new_case(&f);
        kdc_type t = kdc_type_make(ds[d], shapes[s].rank, shapes[s].dims);
        kdc_value_id x = param(f, ds[d], shapes[s].rank, shapes[s].dims);
        kdc_value_id i = kdc_ir_iota(f, &t, dim);
        finish(m, f, dim % 2 ? i : kdc_ir_binary(f, KDC_OP_ADD, i, x), NULL);
      }
  /* dense constants: read by a kernel, returned directly, and 33 wide */
  float data[3 * 33];
  for (int i = 0; i < 99; i++) data[i] = (float)i * 0.25f - 7;
  int64_t dims[2] = {3, 33};
  kdc_type t = kdc_type_make(KDC_DTYPE_F32, 2, dims);
  for (int k = 0; k < 3; k++) {
    kdc_func *f;
    kdc_module *m = new_case(&f);
    kdc_value_id x = param(f, KDC_DTYPE_F32, 2, dims);
    kdc_value_id c = kdc_ir_constant(f, &t, data);
    kdc_value_id s = kdc_ir_splat(f, KDC_DTYPE_F32, 2, dims, 1.5);
    kdc_value_id y = k == 0 ? kdc_ir_binary(f, KDC_OP_MUL, kdc_ir_binary(f, KDC_OP_ADD, x, c), s)
                     : k == 1 ? c : s;
    if (k) kdc_ir_add_result(f, kdc_ir_binary(f, KDC_OP_ADD, x, x), "z");
    finish(m, f, y, NULL);
  }
}

static void test_broadcast(void **state) {
  (void)state;
  struct { int r0; int64_t d0[3]; int r1; int64_t d1[4]; int64_t map[3]; } cs[] = {
      {1, {7}, 2, {3, 7}, {1}},
      {2, {3, 1}, 2, {3, 5}, {0, 1}},
      {0, {0}, 2, {2, 3}, {0}},
      {1, {3}, 3, {3, 4, 2}, {0}},
      {2, {3, 4}, 3, {3, 2, 4}, {0, 2}},
      {1, {1}, 4, {2, 1, 33, 3}, {2}},
      {3, {2, 1, 5}, 4, {2, 7, 1, 5}, {0, 2, 3}},
  };
  for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++)
    for (int fuse = 0; fuse < 2; fuse++) {
      kdc_func *f;
      kdc_module *m = new_case(&f);
      kdc_value_id x = param(f, KDC_DTYPE_F32, cs[i].r0, cs[i].d0);
      kdc_value_id b = kdc_ir_broadcast(f, x, cs[i].r1, cs[i].d1, cs[i].map);
      kdc_value_id y = param(f, KDC_DTYPE_F32, cs[i].r1, cs[i].d1);
      cgt_opts o = {.no_fuse = !fuse};
      finish(m, f, kdc_ir_binary(f, KDC_OP_ADD, b, y), &o);
    }
}

static void test_reshape(void **state) {
  (void)state;
  int64_t d0[3] = {3, 5, 7}, d1[2] = {15, 7}, d2[2] = {7, 15}, d3[1] = {105};
  for (int k = 0; k < 4; k++) {
    kdc_func *f;
    kdc_module *m = new_case(&f);
    kdc_value_id x = param(f, KDC_DTYPE_F32, 3, d0), y;
    if (k == 0) y = kdc_ir_reshape(f, x, 2, d1);                  /* alias of a parameter */
    else if (k == 1) y = kdc_ir_reshape(f, kdc_ir_unary(f, KDC_OP_EXP, x), 2, d2);  /* fused */
    else if (k == 2) {  /* alias of a kernel result, read by a kernel */
      kdc_value_id s = kdc_ir_reduce(f, KDC_RED_SUM, x, 1, (int64_t[]){1});
      y = kdc_ir_unary(f, KDC_OP_NEG, kdc_ir_reshape(f, s, 1, (int64_t[]){21}));
    }
    else y = kdc_ir_reshape(f, kdc_ir_reshape(f, kdc_ir_unary(f, KDC_OP_ABS, x), 1, d3), 2, d2);
    finish(m, f, y, NULL);
  }
}

static void test_transpose(void **state) {
  (void)state;
  struct { int r; int64_t d[4]; int64_t perm[4]; } cs[] = {
      {2, {7, 33}, {1, 0}}, {3, {3, 1, 7}, {2, 0, 1}}, {3, {2, 3, 5}, {1, 2, 0}},
      {4, {2, 3, 1, 5}, {3, 1, 0, 2}}, {1, {7}, {0}}};
  for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++)
    for (int fuse = 0; fuse < 2; fuse++) {
      kdc_func *f;
      kdc_module *m = new_case(&f);
      kdc_value_id x = param(f, KDC_DTYPE_I32, cs[i].r, cs[i].d);
      kdc_value_id t = kdc_ir_transpose(f, fuse ? kdc_ir_unary(f, KDC_OP_NEG, x) : x, cs[i].perm);
      cgt_opts o = {.no_fuse = !fuse};
      finish(m, f, t, &o);
    }
}

static void test_slice(void **state) {
  (void)state;
  struct { int r; int64_t d[3], lo[3], hi[3], st[3]; } cs[] = {
      {1, {33}, {1}, {32}, {3}}, {2, {7, 33}, {2, 0}, {7, 33}, {2, 5}},
      {3, {3, 1, 7}, {1, 0, 0}, {3, 1, 7}, {1, 1, 7}}, {2, {5, 5}, {4, 0}, {5, 1}, {1, 1}}};
  for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
    kdc_func *f;
    kdc_module *m = new_case(&f);
    kdc_value_id x = param(f, KDC_DTYPE_F32, cs[i].r, cs[i].d);
    kdc_value_id s = kdc_ir_slice(f, kdc_ir_unary(f, KDC_OP_TANH, x), cs[i].lo, cs[i].hi, cs[i].st);
    finish(m, f, s, NULL);
  }
}

static void test_concat(void **state) {
  (void)state;
  for (int dim = 0; dim < 2; dim++)
    for (int fuse = 0; fuse < 2; fuse++) {
      kdc_func *f;
      kdc_module *m = new_case(&f);
      int64_t a[2] = {3, 7}, b[2] = {3, 7}, c[2] = {3, 7};
      a[dim] = 1, b[dim] = 5, c[dim] = 2;
      kdc_value_id xs[3] = {param(f, KDC_DTYPE_F32, 2, a), param(f, KDC_DTYPE_F32, 2, b),
                            param(f, KDC_DTYPE_F32, 2, c)};
      if (fuse) xs[1] = kdc_ir_unary(f, KDC_OP_EXP, xs[1]);
      cgt_opts o = {.no_fuse = !fuse};
      finish(m, f, kdc_ir_concat(f, 3, xs, dim), &o);
    }
}

static void test_pad(void **state) {
  (void)state;
  struct { int r; int64_t d[3], lo[3], hi[3], in[3]; } cs[] = {
      {1, {7}, {2}, {3}, {0}}, {2, {3, 5}, {1, -1}, {0, 2}, {0, 1}},
      {3, {2, 1, 7}, {0, 1, -2}, {1, 1, -3}, {1, 0, 2}}, {0, {0}, {0}, {0}, {0}}};
  for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
    kdc_func *f;
    kdc_module *m = new_case(&f);
    kdc_value_id x = param(f, KDC_DTYPE_F32, cs[i].r, cs[i].d);
    kdc_value_id pv = param(f, KDC_DTYPE_F32, 0, NULL);
    kdc_value_id nx = kdc_ir_unary(f, KDC_OP_NEG, x);
    kdc_value_id y = kdc_ir_pad(f, nx, pv, cs[i].lo, cs[i].hi, cs[i].in);
    finish(m, f, y, NULL);
  }
}

static void test_reduce(void **state) {
  (void)state;
  struct { int r; int64_t d[4]; int nd; int64_t dims[4]; } cs[] = {
      {1, {33}, 1, {0}}, {2, {7, 33}, 1, {1}}, {2, {7, 33}, 1, {0}}, {2, {7, 33}, 2, {0, 1}},
      {3, {3, 1, 7}, 2, {0, 2}}, {4, {2, 3, 1, 5}, 2, {1, 3}}, {4, {2, 3, 1, 5}, 4, {0, 1, 2, 3}},
      {2, {3, 0}, 1, {1}}};
  static const kdc_dtype ds[] = {KDC_DTYPE_F32, KDC_DTYPE_I32, KDC_DTYPE_I64};
  for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++)
    for (int k = KDC_RED_SUM; k <= KDC_RED_PROD; k++)
      for (int d = 0; d < 3; d++) {
        kdc_func *f;
        kdc_module *m = new_case(&f);
        kdc_value_id x = param(f, ds[d], cs[i].r, cs[i].d);
        if (ds[d] == KDC_DTYPE_F32) x = kdc_ir_unary(f, KDC_OP_EXP, x);  /* fused operand */
        else x = kdc_ir_unary(f, KDC_OP_NEG, x);
        finish(m, f, kdc_ir_reduce(f, (kdc_reduce_kind)k, x, cs[i].nd, cs[i].dims), NULL);
      }
  /* NaN propagation through max/min reductions */
  static const float v[] = {1, NAN, 3, -0.0f, 0.0f, -1};
  int64_t n = 6;
  kdc_type t = kdc_type_make(KDC_DTYPE_F32, 1, &n);
  for (int k = KDC_RED_SUM; k <= KDC_RED_PROD; k++) {
    kdc_func *f;
    kdc_module *m = new_case(&f);
    kdc_value_id x = param(f, KDC_DTYPE_F32, 1, &n);
    kdc_value_id z = kdc_ir_binary(f, KDC_OP_MUL, x, kdc_ir_splat(f, KDC_DTYPE_F32, 1, &n, 0.0));
    kdc_value_id c = kdc_ir_binary(f, KDC_OP_ADD, z, kdc_ir_constant(f, &t, v));
    finish(m, f, kdc_ir_reduce(f, (kdc_reduce_kind)k, c, 1, (int64_t[]){0}), NULL);
  }
  /* Row max/min long enough to run as vector reductions (llvm.maximum /
   * minimum): rows of only signed zeros, one NaN late in a row, +-inf,
   * a tie between -0 and +0 at the extreme, an odd length (a remainder). */
  enum { R = 5, L = 101 };
  static float w[R * L];
  for (int r = 0; r < R; r++)
    for (int j = 0; j < L; j++) w[r * L + j] = (float)((j * 37 + r * 11) % 89) - 44.0f;
  for (int j = 0; j < L; j++) w[j] = j % 3 ? -0.0f : 0.0f; /* row 0: zeros only */
  w[1 * L + 97] = NAN;
  w[2 * L + 60] = INFINITY;
  w[2 * L + 61] = -INFINITY;
  for (int j = 0; j < L; j++) w[3 * L + j] = j == 50 ? 0.0f : -0.0f; /* one +0 */
  for (int j = 0; j < L; j++) w[4 * L + j] = j == 7 ? -0.0f : 0.0f;  /* one -0 */
  int64_t wd[2] = {R, L};
  kdc_type wt = kdc_type_make(KDC_DTYPE_F32, 2, wd);
  for (int k = KDC_RED_MAX; k <= KDC_RED_MIN; k++) {
    kdc_func *f;
    kdc_module *m = new_case(&f);
    kdc_value_id x = param(f, KDC_DTYPE_F32, 2, wd);
    kdc_value_id z = kdc_ir_binary(f, KDC_OP_MUL, x, kdc_ir_splat(f, KDC_DTYPE_F32, 2, wd, 0.0));
    z = kdc_ir_binary(f, KDC_OP_MUL, z, z); /* +0: w - z keeps w's signed zeros */
    kdc_value_id c = kdc_ir_binary(f, KDC_OP_SUB, kdc_ir_constant(f, &wt, w), z);
    finish(m, f, kdc_ir_reduce(f, (kdc_reduce_kind)k, c, 1, (int64_t[]){1}), NULL);
  }
}

/* Integer dot_general runs as a kernel (no BLAS): exact. */
static void test_dot_kernel(void **state) {
  (void)state;
  int64_t a[3] = {2, 3, 7}, b[3] = {2, 7, 5};
  kdc_attr_dot d = {{1, {0}}, {1, {0}}, {1, {2}}, {1, {1}}, 0};
  kdc_func *f;
  kdc_module *m = new_case(&f);
  kdc_value_id x = param(f, KDC_DTYPE_I32, 3, a), y = param(f, KDC_DTYPE_I32, 3, b);
  finish(m, f, kdc_ir_dot(f, x, y, &d), NULL);
}

/* sharding_constraint: an alias of its operand (an identity after
 * partitioning), both of a parameter and of a kernel result. */
static void test_sharding_constraint(void **state) {
  (void)state;
  int64_t d[2] = {7, 33};
  for (int k = 0; k < 2; k++) {
    kdc_func *f;
    kdc_module *m = new_case(&f);
    kdc_value_id x = param(f, KDC_DTYPE_F32, 2, d);
    if (k) x = kdc_ir_unary(f, KDC_OP_EXP, x);
    kdc_type t = kdc_type_make(KDC_DTYPE_F32, 2, d);
    kdc_value_id c = kdc_ir_append(f, KDC_OP_SHARDING_CONSTRAINT, &t, 1, &x, NULL);
    f->nodes[c].sharding.present = true;  /* replicated */
    f->nodes[c].sharding.rank = 2;
    finish(m, f, kdc_ir_unary(f, KDC_OP_TANH, c), NULL);
  }
}

/* ---- windowed and indexed ops (codegen/body_window.c): exact -------------- */

static kdc_attr_conv conv_attr(int n, const int64_t *s, const int64_t *lo, const int64_t *hi,
                               const int64_t *ld, const int64_t *rd, int64_t groups) {
  kdc_attr_conv a;
  kdc_attr_conv_init(&a, n);
  for (int d = 0; d < n; d++) {
    a.stride.v[d] = s[d], a.pad_low.v[d] = lo[d], a.pad_high.v[d] = hi[d];
    a.lhs_dilation.v[d] = ld[d], a.rhs_dilation.v[d] = rd[d];
  }
  a.groups = groups;
  return a;
}

static void test_convolution(void **state) {
  (void)state;
  static const struct { int n; int64_t x[5], w[5], s[3], lo[3], hi[3], ld[3], rd[3], g; } cs[] = {
      {2, {2, 7, 6, 5}, {3, 3, 5, 4}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, 1},   /* same */
      {2, {1, 9, 8, 3}, {3, 2, 3, 2}, {2, 3}, {0, 1}, {2, 0}, {1, 1}, {2, 1}, 1},   /* strided */
      {2, {2, 5, 5, 4}, {3, 3, 1, 8}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, 4},   /* depthwise */
      {2, {1, 4, 3, 6}, {2, 2, 3, 4}, {1, 1}, {1, 0}, {1, 2}, {2, 3}, {1, 1}, 2},   /* lhs dil */
      {2, {1, 6, 6, 2}, {3, 3, 2, 3}, {1, 1}, {-1, 2}, {0, -1}, {1, 1}, {1, 2}, 1}, /* crop */
      {1, {3, 11, 4}, {5, 4, 7}, {2}, {2}, {2}, {1}, {1}, 1},                       /* conv1d */
      {3, {1, 4, 3, 5, 2}, {2, 2, 3, 2, 3}, {1, 1, 2}, {0, 1, 1}, {1, 0, 1}, {1, 1, 1},
       {1, 1, 1}, 1},                                                                 /* conv3d */
  };
  for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++)
    for (int fuse = 0; fuse < 2; fuse++) {
      kdc_func *f;
      kdc_module *m = new_case(&f);
      kdc_value_id x = param(f, KDC_DTYPE_F32, cs[i].n + 2, cs[i].x);
      kdc_value_id w = param(f, KDC_DTYPE_F32, cs[i].n + 2, cs[i].w);
      if (fuse) x = kdc_ir_unary(f, KDC_OP_TANH, x); /* a producer: never pulled in */
      kdc_attr_conv a = conv_attr(cs[i].n, cs[i].s, cs[i].lo, cs[i].hi, cs[i].ld, cs[i].rd,
                                  cs[i].g);
      kdc_value_id y = kdc_ir_convolution(f, x, w, &a);
      if (fuse) y = kdc_ir_unary(f, KDC_OP_NEG, y);
      finish(m, f, y, &(cgt_opts){.no_fuse = !fuse});
    }
}

static void test_reduce_window(void **state) {
  (void)state;
  int64_t d[4] = {2, 7, 6, 3};
  for (int k = KDC_RED_SUM; k <= KDC_RED_MIN; k++)
    for (int c = 0; c < 3; c++) {
      kdc_func *f;
      kdc_module *m = new_case(&f);
      kdc_value_id x = param(f, KDC_DTYPE_F32, 4, d);
      if (c == 2) x = kdc_ir_unary(f, KDC_OP_FLOOR, x); /* ties for select_and_scatter */
      kdc_attr_window a;
      kdc_attr_window_init(&a, (kdc_reduce_kind)k, 4);
      a.window.v[1] = 3, a.window.v[2] = 2;
      a.stride.v[1] = 2, a.stride.v[2] = c ? 2 : 1;
      a.pad_low.v[1] = c ? 1 : 0, a.pad_high.v[1] = 1, a.pad_high.v[2] = c;
      a.dilation.v[2] = c == 1 ? 2 : 1;
      kdc_value_id y = kdc_ir_reduce_window(f, x, &a);
      if (k != KDC_RED_SUM) { /* and its gradient: select_and_scatter of y-shaped g */
        kdc_value_id g = param(f, KDC_DTYPE_F32, 4, kdc_ir_type(f, y)->dims);
        kdc_ir_add_result(f, kdc_ir_select_and_scatter(f, x, g, &a), "dx");
      }
      finish(m, f, y, NULL);
    }
}

static void test_gather_scatter(void **state) {
  (void)state;
  static const struct { kdc_dtype td, id; int tr; int64_t t[3]; int ir; int64_t i[2]; } cs[] = {
      {KDC_DTYPE_F32, KDC_DTYPE_I32, 2, {13, 5}, 2, {3, 4}},
      {KDC_DTYPE_F32, KDC_DTYPE_I64, 3, {7, 2, 3}, 1, {6}},
      {KDC_DTYPE_I32, KDC_DTYPE_I32, 1, {9}, 2, {5, 2}},
      {KDC_DTYPE_F32, KDC_DTYPE_I32, 2, {33, 7}, 0, {0}},
      /* scatter rows (codegen/cpu_wrap.c) split over 2 threads: ids in
       * [-20, 20] hit rows of both halves, wrap, repeat and fall outside */
      {KDC_DTYPE_F32, KDC_DTYPE_I32, 2, {24, 9}, 2, {40, 5}},
      {KDC_DTYPE_I32, KDC_DTYPE_I32, 3, {17, 2, 3}, 1, {300}},
  };
  for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
    kdc_func *f;
    kdc_module *m = new_case(&f);
    kdc_value_id t = param(f, cs[i].td, cs[i].tr, cs[i].t);
    kdc_value_id ids = param(f, cs[i].id, cs[i].ir, cs[i].i);
    kdc_value_id y = kdc_ir_gather(f, t, ids);
    kdc_value_id u = param(f, cs[i].td, kdc_ir_type(f, y)->rank, kdc_ir_type(f, y)->dims);
    kdc_ir_add_result(f, kdc_ir_scatter_add(f, ids, u, kdc_ir_type(f, t)), "scatter");
    finish(m, f, y, &(cgt_opts){.threads = i % 2 ? 2 : 1});
  }
}

static void test_reverse(void **state) {
  (void)state;
  for (int fuse = 0; fuse < 2; fuse++) {
    kdc_func *f;
    kdc_module *m = new_case(&f);
    kdc_value_id x = param(f, KDC_DTYPE_F32, 4, shapes[4].dims);
    kdc_value_id y = kdc_ir_reverse(f, x, 2, (int64_t[]){3, 0});
    if (fuse) y = kdc_ir_unary(f, KDC_OP_NEG, y);
    finish(m, f, y, &(cgt_opts){.no_fuse = !fuse});
  }
}

/* rng_uniform: Philox-4x32-10 in the kernel, bit-exact against the
 * interpreter for i32 and i64 steps (negative ones too), 64-bit seeds, every
 * shape, alone and feeding a fused consumer.  On one device the global index
 * is the local one; tests/runtime/test_spmd_kernels.c covers sharded ones. */
static void test_rng_uniform(void **state) {
  (void)state;
  static const int64_t seeds[] = {0, 42, -7, INT64_C(0x123456789abcdef)};
  static const kdc_dtype steps[] = {KDC_DTYPE_I32, KDC_DTYPE_I64};
  for (int s = 0; s < N_SHAPES; s++)
    for (size_t k = 0; k < sizeof seeds / sizeof seeds[0]; k++) {
      kdc_func *f;
      kdc_module *m = new_case(&f);
      kdc_value_id step = param(f, steps[k % 2], 0, NULL);
      kdc_value_id u = kdc_ir_rng_uniform(f, step, seeds[k], shapes[s].rank, shapes[s].dims);
      if (k % 2) {
        kdc_value_id x = param(f, KDC_DTYPE_F32, shapes[s].rank, shapes[s].dims);
        u = kdc_ir_binary(f, KDC_OP_ADD, kdc_ir_unary(f, KDC_OP_NEG, u), x);
      }
      finish(m, f, u, NULL);
    }
  /* a big 1-D one: the wrapper's vector loop and the threaded split */
  int64_t n = 100003;
  kdc_func *f;
  kdc_module *m = new_case(&f);
  kdc_value_id step = param(f, KDC_DTYPE_I64, 0, NULL);
  cgt_opts o = {.threads = 2};
  finish(m, f, kdc_ir_rng_uniform(f, step, 1234, 1, &n), &o);
}

static void test_all_ops_covered(void **state) {
  (void)state;
  covered[KDC_OP_DOT] = true;  /* f32 GEMM paths: test_codegen_gemm.c */
  covered[KDC_OP_SCAN] = true; /* LOOP steps: test_codegen_scan.c */
  for (int op = 0; op < KDC_OP_COUNT; op++) {
    /* The SPMD ops need a mesh: tests/runtime/test_collectives.c (every
     * collective) and test_spmd_kernels.c (shard_slice, sharded rng). */
    if ((kdc_op_flags((kdc_op)op) & OPF_COLL) && op != KDC_OP_SHARDING_CONSTRAINT) continue;
    if (!covered[op]) fail_msg("op %s has no codegen test case", kdc_op_name((kdc_op)op));
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_unary_f32),      cmocka_unit_test(test_unary_int),
      cmocka_unit_test(test_subnormals_flushed),
      cmocka_unit_test(test_convert),        cmocka_unit_test(test_binary),
      cmocka_unit_test(test_compare_select), cmocka_unit_test(test_leaves),
      cmocka_unit_test(test_broadcast),      cmocka_unit_test(test_reshape),
      cmocka_unit_test(test_transpose),      cmocka_unit_test(test_slice),
      cmocka_unit_test(test_concat),         cmocka_unit_test(test_pad),
      cmocka_unit_test(test_reduce),         cmocka_unit_test(test_dot_kernel),
      cmocka_unit_test(test_sharding_constraint), cmocka_unit_test(test_convolution),
      cmocka_unit_test(test_reduce_window),  cmocka_unit_test(test_gather_scatter),
      cmocka_unit_test(test_reverse),        cmocka_unit_test(test_rng_uniform),
      cmocka_unit_test(test_all_ops_covered),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
