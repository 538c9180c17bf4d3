/*
 * Running SPMD plans on the virtual devices, beyond per-op conformance:
 *   - determinism: two runs, and runs with different thread counts (both
 *     schedules), are bitwise equal;
 *   - the collective timeout: a device withheld by the test hook of the shm
 *     backend fails the run with KDC_UNAVAILABLE naming it, and the plan
 *     runs again afterwards;
 *   - zero allocations per run: every malloc/calloc/realloc/aligned_alloc/
 *     posix_memalign made by kdc code (the static libraries linked here;
 *     -Wl,--wrap, see CMakeLists.txt) is counted across runs of an 8-device
 *     plan with kernels, a GEMM, collectives and staged I/O;
 *   - `kdc inspect`: the mesh, shardings, collectives with their device
 *     groups and bytes (SHARDING.md 4), peak memory, and the sharding
 *     picture;
 *   - the null backend (the template) refuses collectives cleanly.
 */
#include <stdatomic.h>

#include "rt_test.h"
#include "runtime/comm.h"

/* ---- allocation counting (-Wl,--wrap=...) ------------------------------------ */

static atomic_long allocs;
static atomic_bool counting;

void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t s);
void *__real_realloc(void *p, size_t n);
void *__real_aligned_alloc(size_t a, size_t n);
int __real_posix_memalign(void **p, size_t a, size_t n);
void *__wrap_malloc(size_t n);
void *__wrap_calloc(size_t n, size_t s);
void *__wrap_realloc(void *p, size_t n);
void *__wrap_aligned_alloc(size_t a, size_t n);
int __wrap_posix_memalign(void **p, size_t a, size_t n);

static void count(void) {
  if (atomic_load(&counting)) atomic_fetch_add(&allocs, 1);
}
void *__wrap_malloc(size_t n) { return count(), __real_malloc(n); }
void *__wrap_calloc(size_t n, size_t s) { return count(), __real_calloc(n, s); }
void *__wrap_realloc(void *p, size_t n) { return count(), __real_realloc(p, n); }
void *__wrap_aligned_alloc(size_t a, size_t n) { return count(), __real_aligned_alloc(a, n); }
int __wrap_posix_memalign(void **p, size_t a, size_t n) {
  return count(), __real_posix_memalign(p, a, n);
}

/* ---- a data-parallel + model-parallel MLP-like step, by hand ----------------- */

/* On mesh a=2,b=4: x [16,32] split {a,-} (a contiguous slice), w [32,64]
 * split {-,b}, h = tanh(x w) local [8,16]; y = all_gather over b of h (dim 1)
 * -> [8,64] {a,-}; s = all_reduce over a of reduce-sum rows -> [64]
 * replicated; also a staged output: h itself {a,b}. */
static kdc_module *mlp(void) {
  kdc_module *m = kdc_ir_module_create("mlp");
  m->mesh = rtt_mesh("a=2,b=4");
  kdc_func *f = kdc_ir_func_create(m, "predict");
  int64_t xl[2] = {8, 32}, wl[2] = {32, 16};
  kdc_type xt = kdc_type_make(KDC_DTYPE_F32, 2, xl), wt = kdc_type_make(KDC_DTYPE_F32, 2, wl);
  int64_t wg[2] = {32, 64};
  kdc_type wgt = kdc_type_make(KDC_DTYPE_F32, 2, wg);
  float *w = malloc(32 * 64 * 4);
  cgt_fill(&wgt, w, 3, false);
  kdc_ir_module_add_weight(m, "d/kernel", &wgt, w);
  free(w);
  const char *end;
  kdc_value_id x = kdc_ir_parameter(f, KDC_PARAM_INPUT, "x", &xt);
  kdc_sharding_parse("{a,-}", &m->mesh, &f->nodes[x].sharding, &end);
  kdc_value_id k = kdc_ir_parameter(f, KDC_PARAM_WEIGHT, "d/kernel", &wt);
  kdc_sharding_parse("{-,b}", &m->mesh, &f->nodes[k].sharding, &end);
  kdc_value_id h = kdc_ir_unary(f, KDC_OP_TANH, kdc_ir_matmul(f, x, k));
  kdc_sharding_parse("{a,b}", &m->mesh, &f->nodes[h].sharding, &end);
  static const uint8_t a[1] = {0}, b[1] = {1};
  kdc_value_id y = rtt_spmd(f, KDC_OP_ALL_GATHER, h, 1, b, 1, 0, 0);
  kdc_sharding_parse("{a,-}", &m->mesh, &f->nodes[y].sharding, &end);
  kdc_value_id r = kdc_ir_reduce(f, KDC_RED_SUM, y, 1, (int64_t[]){0});
  kdc_value_id s = rtt_spmd(f, KDC_OP_ALL_REDUCE, r, 1, a, 0, 0, 0);
  f->nodes[s].sharding = kdc_sharding_replicated(1);
  kdc_ir_add_result(f, y, "y");
  kdc_ir_add_result(f, s, "s");
  kdc_ir_add_result(f, h, "h");
  cgt_fail(kdc_ir_take_error(f), "builder");
  cgt_fail(kdc_ir_verify_module(m), "verify");
  return m;
}

typedef struct mlp_run { float x[16 * 32], y[16 * 64], s[64], h[16 * 64]; } mlp_run;

static void run_mlp(kdc_rt_plan *plan, mlp_run *r) {
  const void *in[1] = {r->x};
  void *out[3] = {r->y, r->s, r->h};
  cgt_fail(kdc_rt_plan_run(plan, in, out), "run");
}

static kdc_rt_plan *load(kdc_module *m, int threads, double timeout) {
  cgt_fail(kdc_pass_fuse(m, NULL), "fuse");
  cgt_fail(kdc_pass_plan_memory(m, NULL), "plan_memory");
  const char *path = cgt_path("mlp.plan");
  cgt_fail(kdc_codegen_cpu_plan(m, NULL, path), "codegen");
  kdc_rt_plan *plan;
  kdc_rt_options ro = {.n_threads = threads, .collective_timeout_s = timeout};
  cgt_fail(kdc_rt_plan_load_with(path, &ro, &plan), "load");
  return plan;
}

static void test_determinism(void **state) {
  (void)state;
  static mlp_run r[3];
  kdc_type xt = kdc_type_make(KDC_DTYPE_F32, 2, (int64_t[]){16, 32});
  int threads[3] = {0, 1, 9};
  for (int i = 0; i < 3; i++) {
    kdc_module *m = mlp();
    kdc_rt_plan *plan = load(m, threads[i], 0);
    cgt_fill(&xt, r[i].x, 11, false);
    run_mlp(plan, &r[i]);
    mlp_run again = r[i];
    run_mlp(plan, &again);
    assert_memory_equal(&again, &r[i], sizeof again);
    if (i) assert_memory_equal(&r[i], &r[0], sizeof r[0]);
    kdc_rt_plan_release(plan);
    kdc_ir_module_destroy(m);
  }
  /* and against the math: s = column sums of y, y = gathered tanh(x w) */
  for (int c = 0; c < 64; c++) {
    double sum = 0;
    for (int i = 0; i < 16; i++) sum += r[0].y[i * 64 + c];
    assert_true(fabs(sum - r[0].s[c]) < 1e-4 * (1 + fabs(sum)));
  }
  assert_memory_equal(r[0].y, r[0].h, sizeof r[0].y); /* y = h gathered */
}

static void test_timeout(void **state) {
  (void)state;
  kdc_module *m = mlp();
  kdc_rt_plan *plan = load(m, 0, 0.2);
  static mlp_run r;
  rt_comm_shm_test_withhold(plan->comm, 5);
  const void *in[1] = {r.x};
  void *out[3] = {r.y, r.s, r.h};
  kdc_status st = kdc_rt_plan_run(plan, in, out);
  assert_non_null(st);
  assert_int_equal(kdc_status_code(st), KDC_UNAVAILABLE);
  print_message("%s\n", kdc_status_message(st));
  assert_non_null(strstr(kdc_status_message(st), "device 5 (a=1,b=1) did not arrive within 0.2 s"));
  assert_non_null(strstr(kdc_status_message(st), "all_gather[b]"));
  kdc_status_free(st);
  rt_comm_shm_test_withhold(plan->comm, -1);
  run_mlp(plan, &r);
  kdc_rt_plan_release(plan);
  kdc_ir_module_destroy(m);
}

static void test_zero_alloc(void **state) {
  (void)state;
  int threads[2] = {0, 9};  /* device-parallel and step-by-step */
  for (int i = 0; i < 2; i++) {
    kdc_module *m = mlp();
    atomic_store(&allocs, 0);
    atomic_store(&counting, true);  /* the hook is live: loading allocates */
    kdc_rt_plan *plan = load(m, threads[i], 0);
    atomic_store(&counting, false);
    assert_true(atomic_load(&allocs) > 10);
    static mlp_run r;
    run_mlp(plan, &r);  /* warm-up: OpenBLAS's own first-call buffers */
    atomic_store(&allocs, 0);
    atomic_store(&counting, true);
    for (int k = 0; k < 20; k++) run_mlp(plan, &r);
    atomic_store(&counting, false);
    assert_int_equal(atomic_load(&allocs), 0);
    kdc_rt_plan_release(plan);
    kdc_ir_module_destroy(m);
  }
}

static char *describe(kdc_rt_plan *plan, const char *sharding) {
  char *text = NULL;
  size_t len = 0;
  FILE *o = open_memstream(&text, &len);
  if (sharding) cgt_fail(kdc_rt_plan_describe_sharding(plan, sharding, o), "sharding");
  else kdc_rt_plan_describe(plan, o);
  fclose(o);
  return text;
}

static void expect_all(const char *text, const char *const *want, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (!strstr(text, want[i])) fail_msg("lacks \"%s\":\n%s", want[i], text);
}

static void test_inspect(void **state) {
  (void)state;
  kdc_module *m = mlp();
  kdc_rt_plan *plan = load(m, 0, 0);
  char *text = describe(plan, NULL);
  /* all_gather of [8,16] f32 over 4: (n-1)/n * 2048 B = 1536; all_reduce of
   * [64] f32 over 2: 2(n-1)/n * 256 B = 256 */
  static const char *const want[] = {
      "mesh: a=2, b=4 (8 devices", "input x f32[16,32] {a,-} local f32[8,32]",
      "d/kernel f32[32,64] {-,b} local f32[32,16]", "output h f32[16,64] {a,b} local f32[8,16]",
      "collective all_gather[b] f32[8,16] -> f32[8,64] dim=1 n=4 bytes/device=1536 ((n-1)/n*S)",
      "groups (b): [[0,1,2,3],[4,5,6,7]]",
      "collective all_reduce[a] f32[64] -> f32[64] n=2 bytes/device=256 (2(n-1)/n*S)",
      "groups (a): [[0,4],[1,5],[2,6],[3,7]]", "collectives: 2, 1792 bytes per device per step",
      "memory per device (peak)", "device 7 (a=1,b=3)"};
  expect_all(text, want, sizeof want / sizeof want[0]);
  free(text);
  text = describe(plan, "h");
  print_message("%s", text);
  static const char *const grid[] = {"h (output 2 of predict): f32[16,64] {a,b} on mesh a=2, b=4",
                                     "|  0   |  1   |  2   |  3   |  rows 0:8",
                                     "|  4   |  5   |  6   |  7   |  rows 8:16"};
  expect_all(text, grid, sizeof grid / sizeof grid[0]);
  free(text);
  text = describe(plan, "x");
  print_message("%s", text);
  static const char *const xs[] = {"| 0-3  |  rows 0:8", "| 4-7  |  rows 8:16"};
  expect_all(text, xs, 2);
  free(text);
  text = describe(plan, "s");
  static const char *const ss[] = {"[0:64] -> devices 0-7"};
  expect_all(text, ss, 1);
  free(text);
  FILE *devnull = fopen("/dev/null", "w");
  kdc_status st = kdc_rt_plan_describe_sharding(plan, "nope", devnull);
  fclose(devnull);
  assert_int_equal(kdc_status_code(st), KDC_INVALID_INPUT);
  kdc_status_free(st);
  kdc_rt_plan_release(plan);
  kdc_ir_module_destroy(m);
}

/* The whole pass chain on a 2x4 mesh: an unpartitioned MLP with user
 * shardings on its parameters (batch over a, Megatron column/row split over
 * b) through seed, propagate, partition, fuse, plan_memory and codegen, run
 * on GLOBAL arrays against the reference interpreter on the unpartitioned
 * function (tolerance: GEMMs and the partial sums of the row split). */
static void test_pipeline(void **state) {
  (void)state;
  kdc_module *m = kdc_ir_module_create("mlp2");
  m->mesh = rtt_mesh("a=2,b=4");
  kdc_func *f = kdc_ir_func_create(m, "predict");
  int64_t xd[2] = {16, 32}, w1d[2] = {32, 64}, w2d[2] = {64, 8};
  kdc_type xt = kdc_type_make(KDC_DTYPE_F32, 2, xd), w1t = kdc_type_make(KDC_DTYPE_F32, 2, w1d),
           w2t = kdc_type_make(KDC_DTYPE_F32, 2, w2d);
  float w1[32 * 64], w2[64 * 8], x[16 * 32], got[16 * 8];
  cgt_fill(&w1t, w1, 5, false);
  cgt_fill(&w2t, w2, 6, false);
  cgt_fill(&xt, x, 7, false);
  kdc_ir_module_add_weight(m, "d1/kernel", &w1t, w1);
  kdc_ir_module_add_weight(m, "d2/kernel", &w2t, w2);
  kdc_value_id xv = kdc_ir_parameter(f, KDC_PARAM_INPUT, "x", &xt);
  kdc_value_id k1 = kdc_ir_parameter(f, KDC_PARAM_WEIGHT, "d1/kernel", &w1t);
  kdc_value_id k2 = kdc_ir_parameter(f, KDC_PARAM_WEIGHT, "d2/kernel", &w2t);
  const char *end;
  kdc_sharding_parse("{a,-}", &m->mesh, &f->nodes[xv].sharding, &end);
  kdc_sharding_parse("{-,b}", &m->mesh, &f->nodes[k1].sharding, &end);
  kdc_sharding_parse("{b,-}", &m->mesh, &f->nodes[k2].sharding, &end);
  kdc_value_id h = kdc_ir_unary(f, KDC_OP_TANH, kdc_ir_matmul(f, xv, k1));
  kdc_ir_add_result(f, kdc_ir_matmul(f, h, k2), "y");
  cgt_fail(kdc_ir_take_error(f), "builder");
  kdc_tensor args[3] = {{xt, x}, {w1t, NULL}, {w2t, NULL}}, want[1];
  cgt_fail(kdc_ir_interpret(f, args, 3, want), "interpret");
  cgt_fail(kdc_pass_run_list(m, "seed_shardings,propagate_shardings,partition", NULL), "passes");
  int colls = 0;
  for (size_t v = 0; v < f->n_nodes; v++) colls += cg_is_collective(f->nodes[v].op);
  assert_true(colls >= 1); /* the row split's partial sums are reduced */
  kdc_rt_plan *plan = load(m, 0, 0);
  assert_int_equal(kdc_rt_plan_input(plan, 0, 0)->dims[0], 16);  /* global shapes */
  assert_int_equal(kdc_rt_plan_output(plan, 0, 0)->dims[1], 8);
  const void *in[1] = {x};
  void *out[1] = {got};
  cgt_fail(kdc_rt_plan_run(plan, in, out), "run");
  const float *w = want[0].data;
  for (int i = 0; i < 16 * 8; i++)
    if (fabsf(got[i] - w[i]) > 1e-4f * (1 + fabsf(w[i])))
      fail_msg("y[%d] = %g, the interpreter says %g", i, got[i], w[i]);
  free(want[0].data);
  kdc_rt_plan_release(plan);
  kdc_ir_module_destroy(m);
}

static void test_null_backend(void **state) {
  (void)state;
  kdc_module *m = mlp();
  kdc_rt_plan *plan = load(m, 0, 0);
  rt_comm_destroy(plan->comm);
  cgt_fail(rt_comm_null_create(&plan->comm), "null");
  static mlp_run r;
  const void *in[1] = {r.x};
  void *out[3] = {r.y, r.s, r.h};
  kdc_status st = kdc_rt_plan_run(plan, in, out);
  assert_int_equal(kdc_status_code(st), KDC_UNSUPPORTED);
  assert_non_null(strstr(kdc_status_message(st), "null backend"));
  kdc_status_free(st);
  kdc_rt_plan_release(plan);
  kdc_ir_module_destroy(m);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_determinism), cmocka_unit_test(test_timeout),
      cmocka_unit_test(test_zero_alloc),  cmocka_unit_test(test_inspect),
      cmocka_unit_test(test_pipeline),    cmocka_unit_test(test_null_backend),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
