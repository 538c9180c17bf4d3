/*
 * Fused kernels end to end: a dense layer's bias-add + GELU + softmax
 * pieces, layer-norm-like reductions, big kernels split over threads, the
 * CPU loop forms (column reductions, per-piece concatenate loops), and
 * random graphs from tests/passes/randgraph.c, all against the reference
 * interpreter (cg_test.h tolerances: exact without GEMMs, CGT_GEMM with).
 */
#include "cg_test.h"
#include "randgraph.h"

static kdc_value_id param(kdc_func *f, const char *name, int rank, const int64_t *dims) {
  kdc_type t = kdc_type_make(KDC_DTYPE_F32, rank, dims);
  return kdc_ir_parameter(f, KDC_PARAM_INPUT, name, &t);
}

/* softmax over the last dim of [R,C], max-subtracted, as Keras lowers it */
static kdc_value_id softmax(kdc_func *f, kdc_value_id x) {
  const kdc_type *t = kdc_ir_type(f, x);
  int64_t last = t->rank - 1, dims[KDC_MAX_RANK], map[KDC_MAX_RANK];
  for (int i = 0; i < t->rank; i++) dims[i] = t->dims[i], map[i] = i;
  int r = t->rank;
  kdc_value_id mx = kdc_ir_reduce(f, KDC_RED_MAX, x, 1, &last);
  kdc_value_id c = kdc_ir_binary(f, KDC_OP_SUB, x, kdc_ir_broadcast(f, mx, r, dims, map));
  kdc_value_id e = kdc_ir_unary(f, KDC_OP_EXP, c);
  kdc_value_id s = kdc_ir_reduce(f, KDC_RED_SUM, e, 1, &last);
  return kdc_ir_binary(f, KDC_OP_DIV, e, kdc_ir_broadcast(f, s, r, dims, map));
}

/* gelu(x) = 0.5 x (1 + erf(x / sqrt 2)) */
static kdc_value_id gelu(kdc_func *f, kdc_value_id x) {
  kdc_value_id s = kdc_ir_binary_scalar(f, KDC_OP_MUL, x, 0.7071067811865476);
  kdc_value_id e = kdc_ir_unary(f, KDC_OP_ERF, s);
  kdc_value_id one = kdc_ir_binary_scalar(f, KDC_OP_ADD, e, 1.0);
  return kdc_ir_binary(f, KDC_OP_MUL, kdc_ir_binary_scalar(f, KDC_OP_MUL, x, 0.5), one);
}

static void test_bias_gelu_softmax(void **state) {
  (void)state;
  static const int64_t shapes[][2] = {{7, 33}, {1, 7}, {128, 10}, {33, 1}};
  for (int s = 0; s < 4; s++)
    for (int fuse = 0; fuse < 2; fuse++) {
      kdc_module *m = kdc_ir_module_create("chain");
      kdc_func *f = kdc_ir_func_create(m, "predict");
      kdc_value_id x = param(f, "x", 2, shapes[s]);
      kdc_value_id b = param(f, "b", 1, &shapes[s][1]);
      kdc_value_id y = softmax(f, gelu(f, kdc_ir_binary_bcast(f, KDC_OP_ADD, x, b)));
      kdc_ir_add_result(f, y, "probs");
      cgt_opts o = {.no_fuse = !fuse};
      cgt_check(m, f, &o);
      kdc_ir_module_destroy(m);
    }
}

/* mean/variance normalisation over the last dim (two reductions). */
static void test_layer_norm(void **state) {
  (void)state;
  int64_t d[3] = {3, 5, 33}, last = 2, map[3] = {0, 1, 2};
  kdc_module *m = kdc_ir_module_create("ln");
  kdc_func *f = kdc_ir_func_create(m, "predict");
  kdc_value_id x = param(f, "x", 3, d);
  kdc_value_id sum = kdc_ir_reduce(f, KDC_RED_SUM, x, 1, &last);
  kdc_value_id mean = kdc_ir_binary_scalar(f, KDC_OP_DIV, sum, 33);
  kdc_value_id c = kdc_ir_binary(f, KDC_OP_SUB, x, kdc_ir_broadcast(f, mean, 3, d, map));
  kdc_value_id sq = kdc_ir_reduce(f, KDC_RED_SUM, kdc_ir_binary(f, KDC_OP_MUL, c, c), 1, &last);
  kdc_value_id var = kdc_ir_binary_scalar(f, KDC_OP_DIV, sq, 33);
  kdc_value_id inv = kdc_ir_unary(f, KDC_OP_RSQRT, kdc_ir_binary_scalar(f, KDC_OP_ADD, var, 1e-5));
  kdc_ir_add_result(f, kdc_ir_binary(f, KDC_OP_MUL, c, kdc_ir_broadcast(f, inv, 3, d, map)), "y");
  cgt_check(m, f, NULL);
  kdc_ir_module_destroy(m);
}

/* Kernels big enough to be split over the pool, with 1, 2 and 3 threads. */
static void test_threads(void **state) {
  (void)state;
  int64_t d[2] = {333, 517}, last = 1, map[2] = {0, 1};
  for (int th = 1; th <= 3; th++) {
    kdc_module *m = kdc_ir_module_create("big");
    kdc_func *f = kdc_ir_func_create(m, "predict");
    kdc_value_id x = param(f, "x", 2, d), y = param(f, "y", 2, d);
    kdc_value_id t = kdc_ir_unary(f, KDC_OP_TANH, kdc_ir_binary(f, KDC_OP_MUL, x, y));
    kdc_value_id s = kdc_ir_reduce(f, KDC_RED_SUM, t, 1, &last);
    kdc_ir_add_result(f, kdc_ir_binary(f, KDC_OP_SUB, t, kdc_ir_broadcast(f, s, 2, d, map)), "z");
    kdc_ir_add_result(f, s, "s");
    cgt_opts o = {.threads = th};
    for (int rep = 0; rep < 3; rep++) cgt_check(m, f, &o);
    kdc_ir_module_destroy(m);
  }
}

/* Extents of the plan's kernel steps, for the loop-form tests. */
typedef struct extents { int n; int64_t e[64]; } extents;

static void get_extents(const kdc_rt_plan *plan, void *ctx) {
  extents *x = ctx;
  const kdc_prog_func *f = &plan->prog.funcs[0];
  x->n = 0;
  for (uint32_t i = 0; i < f->n_steps && x->n < 64; i++)
    if (f->steps[i].kind == KDC_STEP_KERNEL) x->e[x->n++] = f->steps[i].kernel.extent;
}

static bool has_extent(const extents *x, int64_t e) {
  for (int i = 0; i < x->n; i++)
    if (x->e[i] == e) return true;
  return false;
}

/* Flat kernels (codegen.h): an Adam-like update of a [200, 10] weight
 * (elementwise over equal dims, a scalar broadcast, two outputs) runs as
 * one row per element (extent 2000), while a kernel that broadcasts a
 * [10] bias along the rows still needs the row index (extent 200); every
 * output bit for bit against the interpreter, on 1 and 2 threads. */
static void test_flat_kernels(void **state) {
  (void)state;
  int64_t d[2] = {200, 10}, c[1] = {10}, map[1] = {1}, none[1] = {0};
  for (int th = 1; th <= 2; th++) {
    kdc_module *m = kdc_ir_module_create("flat");
    kdc_func *f = kdc_ir_func_create(m, "predict");
    kdc_value_id g = param(f, "g", 2, d), mo = param(f, "m", 2, d), w = param(f, "w", 2, d);
    kdc_value_id lr = param(f, "lr", 0, none), b = param(f, "b", 1, c);
    kdc_value_id m1 = kdc_ir_binary(f, KDC_OP_ADD, kdc_ir_binary_scalar(f, KDC_OP_MUL, mo, 0.9),
                                    kdc_ir_binary_scalar(f, KDC_OP_MUL, g, 0.1));
    kdc_value_id step = kdc_ir_binary(f, KDC_OP_MUL, m1, kdc_ir_broadcast(f, lr, 2, d, none));
    kdc_ir_add_result(f, kdc_ir_binary(f, KDC_OP_SUB, w, step), "w_new");
    kdc_ir_add_result(f, m1, "m_new");
    kdc_value_id y = kdc_ir_binary(f, KDC_OP_ADD, kdc_ir_unary(f, KDC_OP_TANH, g),
                                   kdc_ir_broadcast(f, b, 2, d, map));
    kdc_ir_add_result(f, y, "biased");
    extents e = {0};
    cgt_opts o = {.threads = th, .inspect = get_extents, .ctx = &e};
    cgt_check(m, f, &o);
    assert_true(has_extent(&e, 2000)); /* the update: flat */
    assert_true(has_extent(&e, 200));  /* the bias broadcast: rows */
    assert_false(has_extent(&e, 10));
    kdc_ir_module_destroy(m);
  }
}

/* Column reductions (codegen.h: a root reduce over the leading dims runs
 * with the kept elements innermost, rows of 16 output elements): batch-
 * norm-like statistics over [4,16,16,37] (sum of an affine map, sum of its
 * squares, a max of a log with NaNs from negative inputs), a product over
 * dim 0 of [6,5,33] (two kept dims), an i32 sum, a sum of exp over [64,9,32]
 * (whole blocks: a thread's one row must vectorise); 1 and 3 threads; bit
 * for bit against the interpreter (same summation order).  The reduce
 * kernels have ceil(kept / 16) rows (3 for 37, 11 for 5*33), never one row
 * per output element. */
static void test_column_reduction(void **state) {
  (void)state;
  int64_t d[4] = {4, 16, 16, 37}, c[1] = {37}, lead[3] = {0, 1, 2}, map[1] = {3};
  int64_t d2[3] = {6, 5, 33}, zero[1] = {0};
  for (int th = 1; th <= 3; th += 2) {
    kdc_module *m = kdc_ir_module_create("bn");
    kdc_func *f = kdc_ir_func_create(m, "predict");
    kdc_value_id x = param(f, "x", 4, d), s = param(f, "s", 1, c), b = param(f, "b", 1, c);
    kdc_value_id y = kdc_ir_binary(f, KDC_OP_ADD,
                                   kdc_ir_binary(f, KDC_OP_MUL, x, kdc_ir_broadcast(f, s, 4, d, map)),
                                   kdc_ir_broadcast(f, b, 4, d, map));
    kdc_ir_add_result(f, kdc_ir_reduce(f, KDC_RED_SUM, y, 3, lead), "sum");
    kdc_ir_add_result(f, kdc_ir_reduce(f, KDC_RED_SUM, kdc_ir_binary(f, KDC_OP_MUL, y, y), 3, lead),
                      "sumsq");
    kdc_ir_add_result(f, kdc_ir_reduce(f, KDC_RED_MAX, kdc_ir_unary(f, KDC_OP_LOG, y), 3, lead),
                      "max_log");
    kdc_value_id z = param(f, "z", 3, d2);
    kdc_ir_add_result(f, kdc_ir_reduce(f, KDC_RED_PROD, kdc_ir_unary(f, KDC_OP_TANH, z), 1, zero),
                      "prod");
    /* whole blocks only (32 = two rows of 16): on 3 threads each thread's range is
     * one block, which must take the block loop (cpu_wrap.c column_loops) */
    int64_t d3[3] = {64, 9, 32}, two[2] = {0, 1};
    kdc_ir_add_result(f, kdc_ir_reduce(f, KDC_RED_SUM, kdc_ir_unary(f, KDC_OP_EXP, param(f, "w", 3, d3)),
                                       2, two),
                      "wsum");
    kdc_type it = kdc_type_make(KDC_DTYPE_I32, 3, d2);
    kdc_value_id iz = kdc_ir_parameter(f, KDC_PARAM_INPUT, "iz", &it);
    kdc_ir_add_result(f, kdc_ir_reduce(f, KDC_RED_SUM, kdc_ir_unary(f, KDC_OP_NEG, iz), 1, zero),
                      "isum");
    extents e = {0};
    cgt_opts o = {.threads = th, .inspect = get_extents, .ctx = &e};
    cgt_check(m, f, &o);
    assert_true(has_extent(&e, 3));
    assert_true(has_extent(&e, 11));
    assert_false(has_extent(&e, 37));
    assert_false(has_extent(&e, 5));
    kdc_ir_module_destroy(m);
  }
}

/* A root concatenate along the last dim runs one loop per piece
 * (codegen.h): an im2col-like patch matrix (pad, 3x3 stride-2 slices, a
 * fused exp on one piece, concatenated on channels), uneven pieces of
 * a plain concatenate and a rank-1 concatenate; 1 and 3 threads; bit for
 * bit. */
static void test_concat_pieces(void **state) {
  (void)state;
  int64_t d[4] = {3, 17, 15, 5}, lo[4] = {0, 1, 1, 0}, hi[4] = {0, 1, 1, 0}, in[4] = {0};
  for (int th = 1; th <= 3; th += 2) {
    kdc_module *m = kdc_ir_module_create("im2col");
    kdc_func *f = kdc_ir_func_create(m, "predict");
    kdc_value_id x = param(f, "x", 4, d);
    kdc_value_id xp = kdc_ir_pad(f, x, kdc_ir_scalar(f, KDC_DTYPE_F32, 0.0), lo, hi, in);
    kdc_value_id pieces[9];
    for (int t = 0; t < 9; t++) {
      int64_t st[4] = {0, t / 3, t % 3, 0}, lim[4] = {3, t / 3 + 17, t % 3 + 15, 5};
      int64_t sd[4] = {1, 2, 2, 1};
      pieces[t] = kdc_ir_slice(f, xp, st, lim, sd);
      if (t == 4) pieces[t] = kdc_ir_unary(f, KDC_OP_EXP, pieces[t]);
    }
    kdc_ir_add_result(f, kdc_ir_concat(f, 9, pieces, 3), "patches");
    int64_t a[2] = {40, 3}, b[2] = {40, 29}, c[2] = {40, 1};
    kdc_value_id u[3] = {param(f, "a", 2, a), param(f, "b", 2, b), param(f, "c", 2, c)};
    u[1] = kdc_ir_unary(f, KDC_OP_TANH, u[1]);
    kdc_ir_add_result(f, kdc_ir_concat(f, 3, u, 1), "cat");
    /* rank 1 (gradients packed for one all_reduce): a flattened matrix, a
     * short vector and a fused exp long enough to be split across threads,
     * so a thread's rows start and end inside pieces */
    int64_t mat[2] = {20, 10}, flat[1] = {200}, sv[1] = {7}, lv[1] = {70001};
    kdc_value_id w[3] = {kdc_ir_reshape(f, param(f, "m", 2, mat), 1, flat), param(f, "s", 1, sv),
                         kdc_ir_unary(f, KDC_OP_EXP, param(f, "l", 1, lv))};
    kdc_ir_add_result(f, kdc_ir_concat(f, 3, w, 0), "flat");
    /* along a row dim (an LSTM's gate gradients, [B, 4, u] along 1): each
     * row lies in one piece; uneven pieces, an empty one, a fused tanh;
     * and rank 2 along dim 0 */
    int64_t g1[3] = {5, 1, 9}, g2[3] = {5, 2, 9}, g0[3] = {5, 0, 9};
    kdc_value_id g[4] = {param(f, "g1", 3, g1), kdc_ir_unary(f, KDC_OP_TANH, param(f, "g2", 3, g2)),
                         param(f, "g0", 3, g0), kdc_ir_unary(f, KDC_OP_EXP, param(f, "g3", 3, g1))};
    kdc_ir_add_result(f, kdc_ir_concat(f, 4, g, 1), "gates");
    int64_t r1[2] = {3, 33}, r2[2] = {4, 33};
    kdc_value_id rr[2] = {kdc_ir_unary(f, KDC_OP_NEG, param(f, "r1", 2, r1)), param(f, "r2", 2, r2)};
    kdc_ir_add_result(f, kdc_ir_concat(f, 2, rr, 0), "rows");
    cgt_opts o = {.threads = th};
    cgt_check(m, f, &o);
    kdc_ir_module_destroy(m);
  }
}

/* Several results: the same value twice, a parameter, an alias, a constant. */
static void test_results(void **state) {
  (void)state;
  int64_t d[2] = {7, 5}, r[1] = {35};
  kdc_module *m = kdc_ir_module_create("res");
  kdc_func *f = kdc_ir_func_create(m, "predict");
  kdc_value_id x = param(f, "x", 2, d);
  kdc_value_id e = kdc_ir_unary(f, KDC_OP_EXP, x);
  kdc_ir_add_result(f, e, "e");
  kdc_ir_add_result(f, e, "e_again");
  kdc_ir_add_result(f, x, "x_passthrough");
  kdc_ir_add_result(f, kdc_ir_reshape(f, e, 1, r), "e_flat");
  kdc_ir_add_result(f, kdc_ir_splat(f, KDC_DTYPE_F32, 2, d, 2.5), "const");
  kdc_ir_add_result(f, kdc_ir_reshape(f, x, 1, r), "x_flat");
  cgt_check(m, f, NULL);
  kdc_ir_module_destroy(m);
}

static void test_random_graphs(void **state) {
  (void)state;
  for (uint64_t seed = 0; seed < 60; seed++)
    for (int fuse = 0; fuse < 2; fuse++) {
      kdc_module *m = kdc_ir_module_create("rand");
      kdc_func *f = randgraph_build(m, seed, 3 + (int)(seed % 14));
      cgt_opts o = {.no_fuse = !fuse, .tol = CGT_GEMM, .gemm_k = 16};
      cgt_check(m, f, &o);
      kdc_ir_module_destroy(m);
    }
}

static void count_kernels(const kdc_rt_plan *plan, void *ctx) {
  *(int *)ctx = cgt_count_steps(plan, KDC_STEP_KERNEL);
}

/* The fusion group cap (KDC_GROUP_MAX_MEMBERS, issue 17): a chain of 600
 * elementwise ops becomes kernels of 256, 256 and 88 nodes that compute the
 * chain exactly.  The cap is a performance choice: one group of all 600
 * (as IR text could give) is emitted by the body's explicit-stack walk
 * (codegen/kernel_body.c) and computes the same, exactly. */
static void test_group_cap(void **state) {
  (void)state;
  enum { N = 600 };
  kdc_module *m = kdc_ir_module_create("cap");
  kdc_func *f = kdc_ir_func_create(m, "f");
  int64_t d[2] = {3, 5};
  kdc_type t = kdc_type_make(KDC_DTYPE_F32, 2, d);
  kdc_value_id v = kdc_ir_parameter(f, KDC_PARAM_INPUT, "x", &t);
  for (int i = 0; i < N; i++) v = kdc_ir_unary(f, i % 3 ? KDC_OP_NEG : KDC_OP_TANH, v);
  kdc_ir_add_result(f, v, "y");
  cgt_fail(kdc_pass_fuse(m, NULL), "fuse");
  int size[8] = {0};
  int32_t max_group = -1;
  for (size_t i = 0; i < f->n_nodes; i++) {
    int32_t g = f->nodes[i].group;
    if (g > max_group) max_group = g;
    if (g >= 0 && g < 8) size[g]++;
  }
  assert_int_equal(max_group, 2);
  assert_int_equal(size[0], N - 2 * KDC_GROUP_MAX_MEMBERS);
  assert_int_equal(size[1], KDC_GROUP_MAX_MEMBERS);
  assert_int_equal(size[2], KDC_GROUP_MAX_MEMBERS);
  cgt_opts o = {.no_fuse = true};
  cgt_check(m, f, &o);  /* the fused kernels against the interpreter, exact */
  for (size_t i = 1; i < f->n_nodes; i++) f->nodes[i].group = 0;  /* one group of 600 */
  int n_kernels = 0;
  o.inspect = count_kernels, o.ctx = &n_kernels;
  cgt_check(m, f, &o);
  assert_int_equal(n_kernels, 1);
  kdc_ir_module_destroy(m);
}

/* One group of about |n| nodes: a chain through every kind of walk step --
 * elementwise ops of one and two operands, reshapes, transposes,
 * broadcasts, slices, pads, reverses and a reduce. */
static kdc_func *huge_chain(kdc_module *m, int n) {
  kdc_func *f = kdc_ir_func_create(m, "f");
  int64_t d[2] = {2, 3}, r[2] = {3, 2}, perm[2] = {1, 0}, row[1] = {3};
  kdc_type t = kdc_type_make(KDC_DTYPE_F32, 2, d), tr = kdc_type_make(KDC_DTYPE_F32, 1, row);
  kdc_value_id x = kdc_ir_parameter(f, KDC_PARAM_INPUT, "x", &t);
  kdc_value_id b = kdc_ir_parameter(f, KDC_PARAM_INPUT, "b", &tr);
  kdc_type ts = kdc_type_make(KDC_DTYPE_F32, 0, NULL);
  float h = 0.5f;
  kdc_value_id half = kdc_ir_constant(f, &ts, &h), v = x;
  for (int i = 0; (int)f->n_nodes < n; i++) {
    switch (i % 8) {
    case 0: v = kdc_ir_unary(f, KDC_OP_TANH, v); break;
    case 1: v = kdc_ir_binary(f, KDC_OP_ADD, v, kdc_ir_broadcast(f, b, 2, d, (int64_t[]){1})); break;
    case 2: v = kdc_ir_reshape(f, kdc_ir_reshape(f, v, 2, r), 2, d); break;
    case 3: v = kdc_ir_transpose(f, kdc_ir_transpose(f, v, perm), perm); break;
    case 4: v = kdc_ir_reverse(f, v, 1, (int64_t[]){1}); break;
    case 5:
      v = kdc_ir_slice(f, kdc_ir_pad(f, v, half, (int64_t[]){1, 0}, (int64_t[]){0, 1},
                                     (int64_t[]){0, 0}),
                       (int64_t[]){1, 0}, (int64_t[]){3, 3}, (int64_t[]){1, 1});
      break;
    case 6: v = kdc_ir_unary(f, KDC_OP_NEG, v); break;
    default: v = kdc_ir_binary_scalar(f, KDC_OP_MUL, v, 0.75); break;
    }
  }
  kdc_ir_add_result(f, kdc_ir_reduce(f, KDC_RED_SUM, v, 1, (int64_t[]){1}), "y");
  for (size_t i = 0; i < f->n_nodes; i++)
    if (f->nodes[i].op != KDC_OP_PARAMETER && f->nodes[i].op != KDC_OP_CONSTANT)
      f->nodes[i].group = 0;
  return f;
}

/* Kernels past the cap, which only fusion applies (issue 17): the body's
 * walk has an explicit stack (codegen/kernel_body.c).  2,000 nodes run
 * against the interpreter, exactly; 100,000 nodes -- the recursive emitter
 * overflowed an 8 MiB stack at about 18,700 frames -- compile to a plan of
 * one kernel (not run here: the JIT's O3 on one function that size takes
 * minutes). */
static void test_huge_kernel(void **state) {
  (void)state;
  kdc_module *m = kdc_ir_module_create("huge");
  kdc_func *f = huge_chain(m, 2000);
  int n_kernels = 0;
  cgt_opts o = {.no_fuse = true, .inspect = count_kernels, .ctx = &n_kernels};
  cgt_check(m, f, &o);
  assert_int_equal(n_kernels, 1);
  kdc_ir_module_destroy(m);

  m = kdc_ir_module_create("huge");
  f = huge_chain(m, 100000);
  cgt_fail(kdc_ir_verify_module(m), "verify");
  cgt_fail(kdc_pass_plan_memory(m, NULL), "plan_memory");
  const char *path = cgt_path("huge.plan");
  cgt_fail(kdc_codegen_cpu_plan(m, NULL, path), "codegen");
  kdc_rt_plan *plan;
  kdc_rt_options ro = {.describe_only = true};
  cgt_fail(kdc_rt_plan_load_with(path, &ro, &plan), "load");
  count_kernels(plan, &n_kernels);
  assert_int_equal(n_kernels, 1);
  kdc_rt_plan_release(plan);
  kdc_ir_module_destroy(m);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_group_cap),         cmocka_unit_test(test_huge_kernel),
      cmocka_unit_test(test_bias_gelu_softmax), cmocka_unit_test(test_layer_norm),
      cmocka_unit_test(test_threads),           cmocka_unit_test(test_results),
      cmocka_unit_test(test_random_graphs),     cmocka_unit_test(test_column_reduction),
      cmocka_unit_test(test_concat_pieces),     cmocka_unit_test(test_flat_kernels),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
