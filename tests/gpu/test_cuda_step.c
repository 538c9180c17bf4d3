/*
 * Whole-step execution on the GPU, the host side (docs/gpu.md: "Graphs",
 * "Matmul precision", "Staging", "Benchmark mode"); no GPU involved, runs
 * in every build:
 *   - graph_eligibility: which functions of real plans replay as one CUDA
 *     graph (one GPU, no collectives) and how many operations a scan
 *     unrolls to, against counts taken from the program here; a loop too
 *     long to capture; several GPUs; collectives;
 *   - graph_cache: the per-function cache keyed by bound addresses (hit,
 *     miss, least recently used evicted);
 *   - precision_flag: --matmul-precision recorded in METADATA, read back,
 *     printed by inspect; a bad value is a located error, exit 2, no plan;
 *     a CPU plan accepts it and computes the same bits;
 *   - staging_bitwise: Model.fit with the staged batch order
 *     (KDC_FIT_STAGING=1 on a CPU plan: the same slots and order, uploads
 *     as copies) equals the plain loop bitwise (history, every batch loss,
 *     the final state), with shuffling, a validation split and partial
 *     masked batches;
 *   - resident_bitwise: predict and train_step on resident data
 *     (kdc_rt_resident, kdc_rt_train_data_upload) equal the usual runs
 *     bitwise.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "e2e/e2e_util.h"
#include "runtime/cuda/graph.h"
#include "runtime/runtime.h"

static char *compile(const char *example, const char *name, const char *const *extra) {
  char rel[256];
  snprintf(rel, sizeof rel, "examples/%s/model.json", example);
  char *model = e2e_src(rel), *plan = e2e_path(name);
  const char *argv[24] = {"compile", model, "-o", plan, "--batch", "8"};
  int n = 6;
  for (int i = 0; extra && extra[i]; i++) argv[n++] = extra[i];
  e2e_result r;
  e2e_kdcv(&r, argv);
  if (r.status != 0) fail_msg("%s: compile: %s", example, r.err);
  free(model);
  return plan;
}

static kdc_rt_plan *load_cpu(const char *plan) {
  kdc_rt_options ro = {.target = KDC_RT_TARGET_CPU, .n_threads = 1};
  kdc_rt_plan *p = NULL;
  kdc_status st = kdc_rt_plan_load_with(plan, &ro, &p);
  if (st) fail_msg("%s", kdc_status_message(st));
  return p;
}

static const char *const TRAIN[] = {"--loss", "categorical_crossentropy", "--optimizer", "adam",
                                    NULL};

static void test_graph_eligibility(void **state) {
  (void)state;
  char *plan = compile("mnist_mlp", "g1.plan", TRAIN);
  kdc_rt_plan *p = load_cpu(plan);
  const kdc_program *pr = &p->prog;
  char why[200];
  uint64_t nodes;
  for (uint32_t f = 0; f < pr->n_funcs; f++) {
    uint64_t want = 0; /* no loops here: one operation per step, two per copy at most */
    for (uint32_t s = 0; s < pr->funcs[f].n_steps; s++)
      want += pr->funcs[f].steps[s].kind == KDC_STEP_COPY ? 2 : 1;
    assert_true(rt_cuda_graph_eligible(pr, f, 1, &nodes, why, sizeof why));
    assert_int_equal(nodes, want);
    assert_false(rt_cuda_graph_eligible(pr, f, 2, &nodes, why, sizeof why));
    if (!strstr(why, "2 GPUs in this process")) fail_msg("why: %s", why);
  }
  kdc_rt_plan_release(p);
  free(plan);

  /* data parallel on 2: train_step all-reduces its gradients */
  const char *mesh2[] = {"--loss", "categorical_crossentropy", "--mesh", "2", NULL};
  plan = compile("mnist_mlp", "g2.plan", mesh2);
  p = load_cpu(plan);
  int ts = kdc_rt_plan_find_func(p, "train_step");
  assert_true(ts >= 0);
  assert_false(rt_cuda_graph_eligible(&p->prog, (uint32_t)ts, 1, &nodes, why, sizeof why));
  if (!strstr(why, "is a collective (NCCL calls are not captured)")) fail_msg("why: %s", why);
  kdc_rt_plan_release(p);
  free(plan);

  /* a scan: its body unrolled length times, plus the carry copies */
  plan = compile("lstm_text", "g3.plan", NULL);
  p = load_cpu(plan);
  pr = &p->prog;
  uint64_t want = 0;
  int loops = 0;
  for (uint32_t s = 0; s < pr->funcs[0].n_steps; s++) {
    const kdc_prog_step *st = &pr->funcs[0].steps[s];
    if (st->kind != KDC_STEP_LOOP) {
      want += st->kind == KDC_STEP_COPY ? 2 : 1;
      continue;
    }
    loops++;
    const kdc_prog_func *b = &pr->funcs[st->loop.body];
    uint64_t per = st->loop.n_carry;
    for (uint32_t k = 0; k < b->n_steps; k++) per += b->steps[k].kind == KDC_STEP_COPY ? 2 : 1;
    want += (uint64_t)st->loop.length * per;
  }
  assert_true(loops >= 1);
  assert_true(rt_cuda_graph_eligible(pr, 0, 1, &nodes, why, sizeof why));
  assert_int_equal(nodes, want);
  printf("lstm_text predict: %d scan(s), %llu operations in its graph\n", loops,
         (unsigned long long)nodes);
  kdc_rt_plan_release(p);
  free(plan);

  /* a made-up program: a scan too long to capture */
  kdc_prog_step body_step = {.kind = KDC_STEP_KERNEL};
  kdc_prog_step loop = {.kind = KDC_STEP_LOOP};
  loop.loop.body = 1;
  loop.loop.length = RT_GRAPH_MAX_NODES;
  loop.loop.n_carry = 1;
  kdc_prog_func funcs[2] = {{.name = "predict", .n_steps = 1, .steps = &loop},
                            {.name = "body", .n_steps = 1, .steps = &body_step}};
  kdc_program big = {.n_funcs = 2, .funcs = funcs};
  assert_false(rt_cuda_graph_eligible(&big, 0, 1, &nodes, why, sizeof why));
  if (!strstr(why, "400000 operations once its loops are unrolled (at most 200000)"))
    fail_msg("why: %s", why);
  loop.loop.length = RT_GRAPH_MAX_NODES / 2;
  assert_true(rt_cuda_graph_eligible(&big, 0, 1, &nodes, why, sizeof why));
  assert_int_equal(nodes, RT_GRAPH_MAX_NODES);
}

static void count_destroy(void *user, void *graph) {
  (void)graph;
  ++*(int *)user;
}

static void test_graph_cache(void **state) {
  (void)state;
  rt_graph_cache c;
  rt_graph_cache_init(&c, 3);
  uint64_t k[6][3] = {{1, 2, 3}, {1, 2, 4}, {5, 2, 3}, {7, 7, 7}, {8, 8, 8}, {9, 9, 9}};
  char g[6];
  assert_null(rt_graph_cache_get(&c, k[0]));
  for (int i = 0; i < 4; i++) assert_null(rt_graph_cache_put(&c, k[i], &g[i]));
  for (int i = 0; i < 4; i++) assert_ptr_equal(rt_graph_cache_get(&c, k[i]), &g[i]);
  assert_ptr_equal(rt_graph_cache_get(&c, k[0]), &g[0]); /* 1 is now the oldest */
  assert_ptr_equal(rt_graph_cache_put(&c, k[4], &g[4]), &g[1]);
  assert_null(rt_graph_cache_get(&c, k[1]));
  assert_ptr_equal(rt_graph_cache_get(&c, k[4]), &g[4]);
  assert_ptr_equal(rt_graph_cache_put(&c, k[5], &g[5]), &g[2]);
  int destroyed = 0;
  rt_graph_cache_free(&c, count_destroy, &destroyed);
  assert_int_equal(destroyed, 4); /* 0, 3, 4, 5 were kept */
  assert_null(rt_graph_cache_get(&c, k[0]));
}

static void test_precision_flag(void **state) {
  (void)state;
  const char *tf32[] = {"--matmul-precision", "tf32", "--target", "cuda", "--loss",
                        "categorical_crossentropy", NULL};
  char *plan = compile("mnist_mlp", "tf32.plan", tf32);
  kdc_rt_plan *p = load_cpu(plan);
  assert_string_equal(kdc_rt_plan_matmul_precision(p), "tf32");
  kdc_rt_plan_release(p);
  e2e_result r;
  e2e_kdc(&r, "inspect", plan, NULL);
  assert_int_equal(r.status, 0);
  if (!strstr(r.out, "\"matmul_precision\": \"tf32\"") ||
      !strstr(r.out, "cuda: matmul precision tf32\n") || !strstr(r.out, "  predict: yes, ") ||
      !strstr(r.out, "  train_step: yes, "))
    fail_msg("inspect: %.3000s", r.out);
  free(plan);

  const char *hi[] = {"--target", "cuda", "--mesh", "2", "--loss", "categorical_crossentropy",
                      NULL};
  plan = compile("mnist_mlp", "hi.plan", hi);
  p = load_cpu(plan);
  assert_string_equal(kdc_rt_plan_matmul_precision(p), "highest");
  kdc_rt_plan_release(p);
  e2e_kdc(&r, "inspect", plan, NULL);
  assert_int_equal(r.status, 0);
  if (strstr(r.out, "matmul_precision") || !strstr(r.out, "cuda: matmul precision highest\n") ||
      !strstr(r.out, "  predict: no, 2 GPUs in this process"))
    fail_msg("inspect: %.3000s", r.out);
  free(plan);

  char *model = e2e_src("examples/mnist_mlp/model.json"), *bad = e2e_path("bad.plan");
  e2e_kdc(&r, "compile", model, "-o", bad, "--target", "cuda", "--matmul-precision", "fast", NULL);
  assert_int_equal(r.status, 2);
  if (!strstr(r.err, "kdc: error: ") ||
      !strstr(r.err, "--matmul-precision \"fast\": expected highest or tf32") ||
      e2e_lines(r.err) != 1)
    fail_msg("stderr: %s", r.err);
  assert_false(e2e_exists(bad));

  /* a CPU plan: accepted, recorded, and the same bits as without it */
  const char *cpu_tf32[] = {"--matmul-precision", "tf32", NULL};
  char *a = compile("mnist_mlp", "cpu_tf32.plan", cpu_tf32), *b = compile("mnist_mlp", "cpu.plan", NULL);
  kdc_rt_plan *pa = load_cpu(a), *pb = load_cpu(b);
  assert_string_equal(kdc_rt_plan_matmul_precision(pa), "tf32");
  const kdc_rt_tensor_info *ti = kdc_rt_plan_input(pa, 0, 0), *to = kdc_rt_plan_output(pa, 0, 0);
  float *x = kdc_xcalloc(1, ti->bytes), *ya = kdc_xcalloc(1, to->bytes), *yb = kdc_xcalloc(1, to->bytes);
  for (size_t i = 0; i < ti->bytes / 4; i++) x[i] = (float)((i * 37) % 101) / 101.0f;
  const void *in[1] = {x};
  void *oa[1] = {ya}, *ob[1] = {yb};
  assert_null(kdc_rt_plan_run(pa, in, oa));
  assert_null(kdc_rt_plan_run(pb, in, ob));
  assert_memory_equal(ya, yb, to->bytes);
  free(x), free(ya), free(yb);
  kdc_rt_plan_release(pa);
  kdc_rt_plan_release(pb);
  free(a), free(b), free(model), free(bad);
}

/* Deterministic training data for |t|'s inputs but the mask, |rows| rows. */
static void make_data(kdc_rt_train *t, int64_t rows, void **arrays, size_t *n) {
  *n = 0;
  for (size_t i = 0; i < kdc_rt_train_data_count(t); i++) {
    const kdc_rt_tensor_info *d = kdc_rt_train_data(t, i);
    if (!strcmp(d->name, "sample_mask")) continue;
    size_t row = d->bytes / (size_t)d->dims[0] / 4, cols = (size_t)d->dims[d->rank - 1];
    float *a = kdc_xcalloc((size_t)rows * row + 1, 4);
    for (size_t e = 0; e < (size_t)rows * row; e++)
      a[e] = *n == 0 ? (float)((e * 29) % 97) / 97.0f : (float)((e % cols) == (e / cols) % cols);
    arrays[(*n)++] = a;
  }
}

static void fit_once(const char *plan, bool staged, bool shuffle, kdc_rt_history *h,
                     float **state_out) {
  setenv("KDC_FIT_STAGING", staged ? "1" : "0", 1);
  kdc_rt_plan *p = load_cpu(plan);
  kdc_rt_train *t = NULL;
  assert_null(kdc_rt_train_create(p, &t));
  void *arrays[8];
  size_t n;
  make_data(t, 45, arrays, &n);
  kdc_rt_fit_options o = {.epochs = 2, .shuffle = shuffle, .seed = 7, .validation_split = 0.2,
                          .batch_size = 5};
  kdc_status st = kdc_rt_fit(t, (const void *const *)arrays, 45, &o, h);
  if (st) fail_msg("fit: %s", kdc_status_message(st));
  size_t total = 0;
  for (size_t k = 0; k < kdc_rt_train_state_count(t); k++) total += kdc_rt_train_state(t, k)->bytes;
  char *s = kdc_xcalloc(1, total + 1);
  total = 0;
  for (size_t k = 0; k < kdc_rt_train_state_count(t); k++) {
    kdc_rt_train_state_get(t, k, s + total);
    total += kdc_rt_train_state(t, k)->bytes;
  }
  *state_out = (float *)s;
  for (size_t i = 0; i < n; i++) free(arrays[i]);
  kdc_rt_train_destroy(t);
  kdc_rt_plan_release(p);
  unsetenv("KDC_FIT_STAGING");
}

static void test_staging_bitwise(void **state) {
  (void)state;
  char *plan = compile("mnist_mlp", "fit.plan", TRAIN);
  for (int shuffle = 0; shuffle < 2; shuffle++) {
  kdc_rt_history a, b;
  float *sa, *sb;
  fit_once(plan, false, shuffle, &a, &sa);
  fit_once(plan, true, shuffle, &b, &sb);
  /* 36 training rows in steps of 5: 8 steps (the last one 1 row, masked) */
  assert_int_equal(a.steps, 8);
  assert_int_equal(b.steps, 8);
  assert_int_equal(a.staged, 0);
  assert_int_equal(b.staged, 2 * 7); /* every step but an epoch's first */
  assert_memory_equal(a.loss, b.loss, 2 * sizeof *a.loss);
  assert_memory_equal(a.val_loss, b.val_loss, 2 * sizeof *a.val_loss);
  assert_memory_equal(a.batch_loss, b.batch_loss, 16 * sizeof *a.batch_loss);
  kdc_rt_plan *p = load_cpu(plan);
  kdc_rt_train *t = NULL;
  assert_null(kdc_rt_train_create(p, &t));
  size_t total = 0;
  for (size_t k = 0; k < kdc_rt_train_state_count(t); k++) total += kdc_rt_train_state(t, k)->bytes;
  assert_memory_equal(sa, sb, total);
  assert_true(a.loss[1] < a.loss[0]); /* it trained */
  kdc_rt_train_destroy(t);
  kdc_rt_plan_release(p);
  kdc_rt_history_free(&a);
  kdc_rt_history_free(&b);
  free(sa), free(sb);
  }
  free(plan);
}

static void test_resident_bitwise(void **state) {
  (void)state;
  char *plan = compile("mnist_mlp", "res.plan", TRAIN);
  kdc_rt_plan *p = load_cpu(plan);
  const kdc_rt_tensor_info *ti = kdc_rt_plan_input(p, 0, 0), *to = kdc_rt_plan_output(p, 0, 0);
  float *x = kdc_xcalloc(1, ti->bytes), *y = kdc_xcalloc(1, to->bytes), *yr = kdc_xcalloc(1, to->bytes);
  for (size_t i = 0; i < ti->bytes / 4; i++) x[i] = (float)((i * 37) % 101) / 101.0f;
  const void *in[1] = {x};
  void *out[1] = {y};
  assert_null(kdc_rt_plan_run(p, in, out));
  kdc_rt_resident *r = NULL;
  assert_null(kdc_rt_resident_create(p, 0, in, &r));
  memset(x, 0, ti->bytes); /* the resident copy is what runs */
  assert_null(kdc_rt_resident_run(r));
  assert_null(kdc_rt_resident_run(r));
  assert_null(kdc_rt_resident_output(r, 0, 0, yr));
  assert_memory_equal(y, yr, to->bytes);
  kdc_rt_resident_destroy(r);

  /* two train_steps: data passed vs data uploaded once */
  float loss[2][2];
  float *st[2];
  for (int mode = 0; mode < 2; mode++) {
    kdc_rt_train *t = NULL;
    assert_null(kdc_rt_train_create(p, &t));
    void *arrays[8];
    size_t n;
    make_data(t, 8, arrays, &n);
    size_t nd = kdc_rt_train_data_count(t);
    const void *data[8] = {0};
    float mask[8] = {1, 1, 1, 1, 1, 1, 1, 1};
    void *dev[8][1] = {{0}};
    for (size_t i = 0, a = 0; i < nd; i++)
      data[i] = !strcmp(kdc_rt_train_data(t, i)->name, "sample_mask") ? (void *)mask : arrays[a++];
    for (size_t i = 0; mode && i < nd; i++) {
      assert_null(kdc_rt_train_data_upload(t, i, data[i], dev[i]));
      kdc_rt_train_bind_data_dev(t, i, dev[i]);
    }
    for (int s = 0; s < 2; s++)
      assert_null(kdc_rt_train_step(t, mode ? NULL : data, &loss[mode][s]));
    size_t total = 0;
    for (size_t k = 0; k < kdc_rt_train_state_count(t); k++) total += kdc_rt_train_state(t, k)->bytes;
    st[mode] = kdc_xcalloc(1, total + 1);
    total = 0;
    for (size_t k = 0; k < kdc_rt_train_state_count(t); k++) {
      kdc_rt_train_state_get(t, k, (char *)st[mode] + total);
      total += kdc_rt_train_state(t, k)->bytes;
    }
    if (mode) assert_memory_equal(st[0], st[1], total);
    for (size_t i = 0; mode && i < nd; i++) {
      kdc_rt_train_bind_data_dev(t, i, NULL);
      kdc_rt_train_data_free(t, dev[i]);
    }
    for (size_t i = 0; i < n; i++) free(arrays[i]);
    kdc_rt_train_destroy(t);
  }
  assert_memory_equal(loss[0], loss[1], sizeof loss[0]);
  free(st[0]), free(st[1]);
  free(x), free(y), free(yr);
  kdc_rt_plan_release(p);
  free(plan);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_graph_eligibility),
      cmocka_unit_test(test_graph_cache),
      cmocka_unit_test(test_precision_flag),
      cmocka_unit_test(test_staging_bitwise),
      cmocka_unit_test(test_resident_bitwise),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
