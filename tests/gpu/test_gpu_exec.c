/*
 * The CUDA target at run time (docs/gpu.md).
 *   - refused: a plan compiled with --target cuda, run where it cannot run,
 *     fails with the documented message and exit status (this machine has
 *     no GPU: "no CUDA device: cuInit failed: ..." exit 3 in a CUDA build,
 *     "this kdc was built without CUDA" exit 2 otherwise);
 *   - gpu_matches_cpu: with a usable CUDA device, every example under
 *     examples/ (1 device and data parallel on 2) run by the CUDA executor against the same
 *     plan's CPU code, within a tolerance;
 *   - gpu_train_matches_cpu: three train_step calls (adam, 2 devices), loss
 *     and every state tensor, GPU vs CPU;
 *     both skipped with the reason printed when kdc_rt_cuda_available says
 *     no (no device here; never faked);
 *   - fit_refused_cpu_runs: without a GPU `kdc run --fit` on a CUDA plan
 *     fails the same way (no silent CPU fall-back), a CPU plan still runs
 *     and `kdc inspect` still describes the CUDA plan;
 *   - graphs_match_plain: with a GPU, predict (mnist_mlp, transformer_block,
 *     lstm_text: a scan unrolled into the graph) and 4 adam train_steps
 *     replayed as CUDA graphs equal the same plan loaded with
 *     KDC_CUDA_GRAPHS=0 bitwise, and the graphs were used
 *     (rt_cuda_graphed); resident predict equals the usual run bitwise;
 *   - tf32_close: a --matmul-precision tf32 plan against the CPU within
 *     TF32's tolerance (1e-2 + 1e-2 |cpu|; TF32 keeps 10 mantissa bits);
 *   - fit_staged_matches: kdc_rt_fit staged (the default on one GPU)
 *     equals KDC_FIT_STAGING=0 bitwise (losses, every batch loss) and
 *     staged every step but each epoch's first.
 *   All GPU tests skip with the reason printed when no device is usable.
 */
#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "e2e/e2e_util.h"
#include "runtime/cuda/cuda_rt.h"
#include "runtime/runtime.h"

static const char *cuda_plan(void) {
  static char *plan;
  if (plan) return plan;
  plan = e2e_path("cuda.plan");
  char *model = e2e_src("examples/mnist_mlp/model.json");
  e2e_result r;
  e2e_kdc(&r, "compile", model, "-o", plan, "--target", "cuda", "--batch", "8", NULL);
  if (r.status != 0) fail_msg("compile --target cuda: %s", r.err);
  free(model);
  return plan;
}

static void test_refused(void **state) {
  (void)state;
  const char *plan = cuda_plan();
  kdc_status st = kdc_rt_cuda_available(plan, 0);
  if (!st) {
    printf("a CUDA device is usable here: the refusal path is not exercised\n");
    skip();
  }
  kdc_status_free(st);
  char *x = e2e_src("examples/mnist_mlp/input.npy");
  char *y = e2e_path("y.npy");
  e2e_result r;
  e2e_kdc(&r, "run", plan, "--input", x, "--output", y, NULL);
#ifdef KDC_HAVE_CUDA
  assert_int_equal(r.status, 3);
  if (!strstr(r.err, "no CUDA device: cuInit failed:")) fail_msg("stderr: %s", r.err);
#else
  assert_int_equal(r.status, 2);
  if (!strstr(r.err, "this plan targets CUDA; this kdc was built without CUDA (toolkit not found)"))
    fail_msg("stderr: %s", r.err);
#endif
  assert_false(e2e_exists(y));
  free(x);
  free(y);
}

/* Outputs of |plan| run on |target| for the global inputs |in|. */
static kdc_rt_plan *load(const char *plan, int target) {
  kdc_rt_options ro = {.target = target};
  kdc_rt_plan *p = NULL;
  kdc_status st = kdc_rt_plan_load_with(plan, &ro, &p);
  if (st) fail_msg("%s", kdc_status_message(st));
  return p;
}

/* GPU vs CPU within a tolerance: NCCL sums in its own order and libdevice
 * is not glibc's libm (docs/gpu.md, "Numerics"). */
static void close_enough(const char *what, const float *gpu, const float *cpu, size_t n) {
  for (size_t i = 0; i < n; i++) {
    float tol = 1e-4f + 1e-4f * (cpu[i] < 0 ? -cpu[i] : cpu[i]);
    float d = gpu[i] - cpu[i];
    if (!(d <= tol && -d <= tol)) fail_msg("%s[%zu]: GPU %g, CPU %g", what, i, gpu[i], cpu[i]);
  }
}

/* |layout|: a layout.json text for --layout, or NULL. */
static void compare_example(const char *ex, const char *mesh, const char *layout) {
  char rel[256];
  snprintf(rel, sizeof rel, "examples/%s/model.json", ex);
  char *model = e2e_src(rel), *plan = e2e_path("cmp.plan");
  e2e_result r;
  const char *argv[16] = {"compile", model, "-o", plan, "--target", "cuda", "--batch", "8"};
  int na = 8;
  if (*mesh) argv[na++] = "--mesh", argv[na++] = mesh;
  char *lay = layout ? e2e_write_text("gpu_layout.json", layout) : NULL;
  if (lay) argv[na++] = "--layout", argv[na++] = lay;
  e2e_kdcv(&r, argv);
  free(lay);
  if (r.status != 0) fail_msg("%s: compile: %s", ex, r.err);
  kdc_rt_plan *g = load(plan, KDC_RT_TARGET_PLAN), *c = load(plan, KDC_RT_TARGET_CPU);
  size_t ni = kdc_rt_plan_input_count(c, 0), no = kdc_rt_plan_output_count(c, 0);
  void *in[16] = {0}, *og[16] = {0}, *oc[16] = {0};
  assert_true(ni <= 16 && no <= 16);
  for (size_t i = 0; i < ni; i++) { /* deterministic inputs of the plan's dtype */
    const kdc_rt_tensor_info *t = kdc_rt_plan_input(c, 0, i);
    in[i] = kdc_xcalloc(1, t->bytes + 1);
    size_t es = kdc_io_dtype_size(t->dtype), n = t->bytes / es;
    for (size_t e = 0; e < n; e++) {
      if (t->dtype == KDC_IO_DTYPE_F32) ((float *)in[i])[e] = (float)((e * 37) % 101) / 50.0f - 1;
      else if (t->dtype == KDC_IO_DTYPE_I32) ((int32_t *)in[i])[e] = (int32_t)(e % 7);
      else if (t->dtype == KDC_IO_DTYPE_I64) ((int64_t *)in[i])[e] = (int64_t)(e % 7);
      else ((uint8_t *)in[i])[e] = (uint8_t)(e % 2);
    }
  }
  for (size_t o = 0; o < no; o++) {
    og[o] = kdc_xcalloc(1, kdc_rt_plan_output(c, 0, o)->bytes + 1);
    oc[o] = kdc_xcalloc(1, kdc_rt_plan_output(c, 0, o)->bytes + 1);
  }
  kdc_status st = kdc_rt_plan_run(g, (const void *const *)in, og);
  if (st) fail_msg("%s on the GPU: %s", ex, kdc_status_message(st));
  assert_null(kdc_rt_plan_run(c, (const void *const *)in, oc));
  for (size_t o = 0; o < no; o++) {
    const kdc_rt_tensor_info *t = kdc_rt_plan_output(c, 0, o);
    if (t->dtype == KDC_IO_DTYPE_F32) close_enough(ex, og[o], oc[o], t->bytes / 4);
    else assert_memory_equal(og[o], oc[o], t->bytes);
  }
  printf("ok: %s%s%s: GPU matches CPU\n", ex, *mesh ? " --mesh " : "", mesh);
  for (size_t i = 0; i < 16; i++) free(in[i]), free(og[i]), free(oc[i]);
  kdc_rt_plan_release(g);
  kdc_rt_plan_release(c);
  free(model), free(plan);
}

/* Recurrent kernels split by units over `model` (docs/sharding.md). */
static const char *UNITS_LAYOUT =
    "{\"batch_dim_name\": \"data\", \"layout_map\": {"
    "\".*_cell/(recurrent_)?kernel\": [null, \"model\"], \".*_cell/bias\": [\"model\"]}}";

/* Skips (printing why) unless a CUDA device is usable; never fakes one. */
static bool gpu_usable(void) {
  kdc_status st = kdc_rt_cuda_available(cuda_plan(), 0);
  if (!st) return true;
  printf("skipped: %s\n", kdc_status_message(st));
  kdc_status_free(st);
  return false;
}

static void test_gpu_matches_cpu(void **state) {
  (void)state;
  if (!gpu_usable()) skip();
  char *dir = e2e_src("examples");
  DIR *dh = opendir(dir);
  assert_non_null(dh);
  int n = 0;
  for (struct dirent *e; (e = readdir(dh));) { /* every example model */
    char path[1024];
    snprintf(path, sizeof path, "%s/%s/model.json", dir, e->d_name);
    if (e->d_name[0] == '.' || !e2e_exists(path)) continue;
    compare_example(e->d_name, "", NULL);
    compare_example(e->d_name, "2", NULL); /* data parallel: NCCL collectives */
    n++;
  }
  closedir(dh);
  free(dir);
  assert_true(n >= 8);
  /* LSTMs split by units over `model`: an all_gather of h inside every
   * step of the scan, run iteration by iteration on both GPUs */
  compare_example("lstm_text", "1x2", UNITS_LAYOUT);
}

/* Three train_step calls on the same batches, GPU vs CPU: losses and every
 * state tensor within the tolerance. */
static void test_gpu_train_matches_cpu(void **state) {
  (void)state;
  if (!gpu_usable()) skip();
  char *model = e2e_src("examples/mnist_mlp/model.json"), *plan = e2e_path("train.plan");
  e2e_result r;
  e2e_kdc(&r, "compile", model, "-o", plan, "--target", "cuda", "--batch", "8", "--mesh", "2",
          "--loss", "sparse_categorical_crossentropy", "--optimizer", "adam", NULL);
  if (r.status != 0) fail_msg("compile: %s", r.err);
  kdc_rt_plan *pg = load(plan, KDC_RT_TARGET_PLAN), *pc = load(plan, KDC_RT_TARGET_CPU);
  kdc_rt_train *tg = NULL, *tc = NULL;
  assert_null(kdc_rt_train_create(pg, &tg));
  assert_null(kdc_rt_train_create(pc, &tc));
  size_t nd = kdc_rt_train_data_count(tc);
  void *data[8] = {0};
  assert_true(nd <= 8);
  for (size_t i = 0; i < nd; i++) {
    const kdc_rt_tensor_info *t = kdc_rt_train_data(tc, i);
    data[i] = kdc_xcalloc(1, t->bytes + 1);
    size_t es = kdc_io_dtype_size(t->dtype), n = t->bytes / es;
    for (size_t e = 0; e < n; e++) {
      if (!strcmp(t->name, "sample_mask")) ((float *)data[i])[e] = 1;
      else if (t->dtype == KDC_IO_DTYPE_F32) ((float *)data[i])[e] = (float)((e * 13) % 17) / 8 - 1;
      else ((int32_t *)data[i])[e] = (int32_t)(e % 10);
    }
  }
  for (int step = 0; step < 3; step++) {
    float lg = 0, lc = 0;
    kdc_status st = kdc_rt_train_step(tg, (const void *const *)data, &lg);
    if (st) fail_msg("train_step on the GPU: %s", kdc_status_message(st));
    assert_null(kdc_rt_train_step(tc, (const void *const *)data, &lc));
    close_enough("loss", &lg, &lc, 1);
  }
  for (size_t k = 0; k < kdc_rt_train_state_count(tc); k++) {
    const kdc_rt_tensor_info *t = kdc_rt_train_state(tc, k);
    void *a = kdc_xcalloc(1, t->bytes + 1), *b = kdc_xcalloc(1, t->bytes + 1);
    kdc_rt_train_state_get(tg, k, a);
    kdc_rt_train_state_get(tc, k, b);
    if (t->dtype == KDC_IO_DTYPE_F32) close_enough(t->name, a, b, t->bytes / 4);
    else assert_memory_equal(a, b, t->bytes);
    free(a), free(b);
  }
  for (size_t i = 0; i < 8; i++) free(data[i]);
  kdc_rt_train_destroy(tg);
  kdc_rt_train_destroy(tc);
  kdc_rt_plan_release(pg);
  kdc_rt_plan_release(pc);
  free(model), free(plan);
}

/* Without a usable GPU, --fit on a CUDA plan fails like `kdc run` (it
 * never falls back to the plan's CPU code), and a CPU plan still runs. */
static void test_fit_refused_cpu_runs(void **state) {
  (void)state;
  const char *plan = cuda_plan();
  kdc_status st = kdc_rt_cuda_available(plan, 0);
  if (!st) {
    printf("a CUDA device is usable here: the refusal path is not exercised\n");
    skip();
  }
  kdc_status_free(st);
  char *x = e2e_src("examples/mnist_mlp/train_x.npy"), *y = e2e_src("examples/mnist_mlp/train_y.npy");
  char *model = e2e_src("examples/mnist_mlp/model.json"), *cpu = e2e_path("cpu.plan");
  char *in = e2e_src("examples/mnist_mlp/input.npy"), *out = e2e_path("cpu_y.npy");
  e2e_result r;
  e2e_kdc(&r, "run", plan, "--fit", "--x", x, "--y", y, "--epochs", "1", "--quiet", NULL);
#ifdef KDC_HAVE_CUDA
  assert_int_equal(r.status, 3);
  if (!strstr(r.err, "no CUDA device: cuInit failed:")) fail_msg("stderr: %s", r.err);
#else
  assert_int_equal(r.status, 2);
  if (!strstr(r.err, "this kdc was built without CUDA")) fail_msg("stderr: %s", r.err);
#endif
  e2e_kdc(&r, "compile", model, "-o", cpu, "--batch", "8", NULL);
  assert_int_equal(r.status, 0);
  e2e_kdc(&r, "run", cpu, "--input", in, "--output", out, NULL);
  if (r.status != 0) fail_msg("a CPU plan in a CUDA build: %s", r.err);
  assert_true(e2e_exists(out));
  e2e_kdc(&r, "inspect", plan, NULL); /* describing a CUDA plan needs no GPU */
  if (r.status != 0) fail_msg("inspect: %s", r.err);
  free(x), free(y), free(model), free(cpu), free(in), free(out);
}

/* A deterministic array for |t| (a mask of ones, ids < 7). */
static void *fill_tensor(const kdc_rt_tensor_info *t) {
  void *a = kdc_xcalloc(1, t->bytes + 1);
  size_t es = kdc_io_dtype_size(t->dtype), n = t->bytes / es;
  for (size_t e = 0; e < n; e++) {
    if (!strcmp(t->name, "sample_mask")) ((float *)a)[e] = 1;
    else if (t->dtype == KDC_IO_DTYPE_F32) ((float *)a)[e] = (float)((e * 37) % 101) / 50.0f - 1;
    else if (t->dtype == KDC_IO_DTYPE_I32) ((int32_t *)a)[e] = (int32_t)(e % 7);
    else if (t->dtype == KDC_IO_DTYPE_I64) ((int64_t *)a)[e] = (int64_t)(e % 7);
    else ((uint8_t *)a)[e] = (uint8_t)(e % 2);
  }
  return a;
}

/* Deterministic inputs of function |func| of |p|. */
static void fill_inputs(kdc_rt_plan *p, size_t func, void **in, size_t cap) {
  size_t ni = kdc_rt_plan_input_count(p, func);
  assert_true(ni <= cap);
  for (size_t i = 0; i < ni; i++) in[i] = fill_tensor(kdc_rt_plan_input(p, func, i));
}

static kdc_rt_plan *load_graphs(const char *plan, bool graphs) {
  if (!graphs) setenv("KDC_CUDA_GRAPHS", "0", 1);
  kdc_rt_plan *p = load(plan, KDC_RT_TARGET_PLAN);
  unsetenv("KDC_CUDA_GRAPHS");
  return p;
}

/* predict of |ex| three times (plain, captured, replayed) with graphs and
 * without: bitwise equal; resident runs too. */
static void graphs_predict(const char *ex) {
  char rel[256];
  snprintf(rel, sizeof rel, "examples/%s/model.json", ex);
  char *model = e2e_src(rel), *plan = e2e_path("graph.plan");
  e2e_result r;
  e2e_kdc(&r, "compile", model, "-o", plan, "--target", "cuda", "--batch", "8", NULL);
  if (r.status != 0) fail_msg("%s: compile: %s", ex, r.err);
  kdc_rt_plan *g = load_graphs(plan, true), *u = load_graphs(plan, false);
  void *in[16] = {0}, *og[16] = {0}, *ou[16] = {0};
  fill_inputs(g, 0, in, 16);
  size_t no = kdc_rt_plan_output_count(g, 0);
  for (size_t o = 0; o < no; o++) {
    og[o] = kdc_xcalloc(1, kdc_rt_plan_output(g, 0, o)->bytes + 1);
    ou[o] = kdc_xcalloc(1, kdc_rt_plan_output(g, 0, o)->bytes + 1);
  }
  for (int run = 0; run < 3; run++) {
    kdc_status st = kdc_rt_plan_run(g, (const void *const *)in, og);
    if (st) fail_msg("%s graphed, run %d: %s", ex, run, kdc_status_message(st));
    assert_null(kdc_rt_plan_run(u, (const void *const *)in, ou));
    for (size_t o = 0; o < no; o++)
      if (memcmp(og[o], ou[o], kdc_rt_plan_output(g, 0, o)->bytes))
        fail_msg("%s: run %d: output %zu graphed != plain", ex, run, o);
  }
  char why[200];
  if (!rt_cuda_graphed(g, 0, why, sizeof why)) fail_msg("%s: predict not graphed: %s", ex, why);
  assert_int_equal(rt_cuda_graph_launches(g, 0), 2); /* run 1 plain, 2 captured, 3 replayed */
  assert_int_equal(rt_cuda_graph_launches(u, 0), 0);
  assert_false(rt_cuda_graphed(u, 0, why, sizeof why));
  assert_string_equal(why, "KDC_CUDA_GRAPHS=0");
  kdc_rt_resident *res = NULL;
  assert_null(kdc_rt_resident_create(g, 0, (const void *const *)in, &res));
  for (int run = 0; run < 3; run++) assert_null(kdc_rt_resident_run(res));
  for (size_t o = 0; o < no; o++) {
    const kdc_rt_tensor_info *t = kdc_rt_plan_output(g, 0, o);
    char *y = kdc_xcalloc(1, t->bytes + 1);
    assert_null(kdc_rt_resident_output(res, o, 0, y));
    if (memcmp(y, ou[o], t->bytes)) fail_msg("%s: resident output %zu != plain run", ex, o);
    free(y);
  }
  kdc_rt_resident_destroy(res);
  printf("ok: %s predict: graphed == plain == resident, bitwise\n", ex);
  for (size_t i = 0; i < 16; i++) free(in[i]), free(og[i]), free(ou[i]);
  kdc_rt_plan_release(g);
  kdc_rt_plan_release(u);
  free(model), free(plan);
}

static void test_graphs_match_plain(void **state) {
  (void)state;
  if (!gpu_usable()) skip();
  graphs_predict("mnist_mlp");
  graphs_predict("transformer_block");
  graphs_predict("lstm_text");
  char *model = e2e_src("examples/mnist_mlp/model.json"), *plan = e2e_path("gtrain.plan");
  e2e_result r;
  e2e_kdc(&r, "compile", model, "-o", plan, "--target", "cuda", "--batch", "8", "--loss",
          "sparse_categorical_crossentropy", "--optimizer", "adam", NULL);
  if (r.status != 0) fail_msg("compile: %s", r.err);
  kdc_rt_plan *pg = load_graphs(plan, true), *pu = load_graphs(plan, false);
  kdc_rt_train *tg = NULL, *tu = NULL;
  assert_null(kdc_rt_train_create(pg, &tg));
  assert_null(kdc_rt_train_create(pu, &tu));
  int ts = kdc_rt_plan_find_func(pg, "train_step");
  void *data[8] = {0};
  assert_true(kdc_rt_train_data_count(tg) <= 8);
  for (size_t i = 0; i < kdc_rt_train_data_count(tg); i++)
    data[i] = fill_tensor(kdc_rt_train_data(tg, i)); /* class ids < 7 of 10 */
  for (int step = 0; step < 4; step++) {
    float lg = 0, lu = 0;
    kdc_status st = kdc_rt_train_step(tg, (const void *const *)data, &lg);
    if (st) fail_msg("graphed train_step %d: %s", step, kdc_status_message(st));
    assert_null(kdc_rt_train_step(tu, (const void *const *)data, &lu));
    if (memcmp(&lg, &lu, sizeof lg)) fail_msg("step %d: loss graphed %.9g, plain %.9g", step, lg, lu);
  }
  char why[200];
  if (!rt_cuda_graphed(pg, (size_t)ts, why, sizeof why)) fail_msg("train_step not graphed: %s", why);
  /* step 1 plain, 2 and 3 captured (the state's two parities), 4 replayed */
  assert_int_equal(rt_cuda_graph_launches(pg, (size_t)ts), 3);
  for (size_t k = 0; k < kdc_rt_train_state_count(tg); k++) {
    const kdc_rt_tensor_info *t = kdc_rt_train_state(tg, k);
    void *a = kdc_xcalloc(1, t->bytes + 1), *b = kdc_xcalloc(1, t->bytes + 1);
    kdc_rt_train_state_get(tg, k, a);
    kdc_rt_train_state_get(tu, k, b);
    if (memcmp(a, b, t->bytes)) fail_msg("state %s: graphed != plain", t->name);
    free(a), free(b);
  }
  printf("ok: 4 adam train_steps graphed == plain, bitwise\n");
  for (size_t i = 0; i < 8; i++) free(data[i]);
  kdc_rt_train_destroy(tg);
  kdc_rt_train_destroy(tu);
  kdc_rt_plan_release(pg);
  kdc_rt_plan_release(pu);
  free(model), free(plan);
}

static void test_tf32_close(void **state) {
  (void)state;
  if (!gpu_usable()) skip();
  const char *ex[] = {"mnist_mlp", "transformer_block"};
  for (int e = 0; e < 2; e++) {
    char rel[256];
    snprintf(rel, sizeof rel, "examples/%s/model.json", ex[e]);
    char *model = e2e_src(rel), *plan = e2e_path("tf32.plan");
    e2e_result r;
    e2e_kdc(&r, "compile", model, "-o", plan, "--target", "cuda", "--batch", "8",
            "--matmul-precision", "tf32", NULL);
    if (r.status != 0) fail_msg("%s: compile: %s", ex[e], r.err);
    kdc_rt_plan *g = load(plan, KDC_RT_TARGET_PLAN), *c = load(plan, KDC_RT_TARGET_CPU);
    void *in[16] = {0}, *og[16] = {0}, *oc[16] = {0};
    fill_inputs(c, 0, in, 16);
    size_t no = kdc_rt_plan_output_count(c, 0);
    for (size_t o = 0; o < no; o++) {
      og[o] = kdc_xcalloc(1, kdc_rt_plan_output(c, 0, o)->bytes + 1);
      oc[o] = kdc_xcalloc(1, kdc_rt_plan_output(c, 0, o)->bytes + 1);
    }
    kdc_status st = kdc_rt_plan_run(g, (const void *const *)in, og);
    if (st) fail_msg("%s tf32 on the GPU: %s", ex[e], kdc_status_message(st));
    assert_null(kdc_rt_plan_run(c, (const void *const *)in, oc));
    double worst = 0;
    for (size_t o = 0; o < no; o++) {
      const kdc_rt_tensor_info *t = kdc_rt_plan_output(c, 0, o);
      if (t->dtype != KDC_IO_DTYPE_F32) continue;
      const float *a = og[o], *b = oc[o];
      for (size_t i = 0; i < t->bytes / 4; i++) {
        double d = a[i] - b[i], tol = 1e-2 + 1e-2 * (b[i] < 0 ? -b[i] : b[i]);
        if (d < 0) d = -d;
        if (!(d <= tol)) fail_msg("%s tf32 [%zu]: GPU %g, CPU %g", ex[e], i, a[i], b[i]);
        if (d > worst) worst = d;
      }
    }
    printf("ok: %s --matmul-precision tf32: GPU within 1e-2 of the CPU (largest difference %.3g)\n",
           ex[e], worst);
    for (size_t i = 0; i < 16; i++) free(in[i]), free(og[i]), free(oc[i]);
    kdc_rt_plan_release(g);
    kdc_rt_plan_release(c);
    free(model), free(plan);
  }
}

static void fit_gpu(const char *plan, bool staged, kdc_rt_history *h) {
  if (!staged) setenv("KDC_FIT_STAGING", "0", 1);
  kdc_rt_plan *p = load(plan, KDC_RT_TARGET_PLAN);
  kdc_rt_train *t = NULL;
  assert_null(kdc_rt_train_create(p, &t));
  const void *arrays[8];
  size_t n = 0;
  int64_t rows = 100;
  for (size_t i = 0; i < kdc_rt_train_data_count(t); i++) {
    const kdc_rt_tensor_info *d = kdc_rt_train_data(t, i);
    if (!strcmp(d->name, "sample_mask")) continue;
    size_t row = d->bytes / (size_t)d->dims[0] / 4;
    float *a = kdc_xcalloc((size_t)rows * row + 1, 4);
    for (size_t e = 0; e < (size_t)rows * row; e++)
      a[e] = n == 0 ? (float)((e * 29) % 97) / 97.0f : (float)((e % row) == (e / row) % row);
    arrays[n++] = a;
  }
  kdc_rt_fit_options o = {.epochs = 2, .shuffle = true, .seed = 3, .validation_split = 0.1};
  kdc_status st = kdc_rt_fit(t, arrays, rows, &o, h);
  if (st) fail_msg("fit (%s): %s", staged ? "staged" : "plain", kdc_status_message(st));
  for (size_t i = 0; i < n; i++) free((void *)arrays[i]);
  kdc_rt_train_destroy(t);
  kdc_rt_plan_release(p);
  unsetenv("KDC_FIT_STAGING");
}

static void test_fit_staged_matches(void **state) {
  (void)state;
  if (!gpu_usable()) skip();
  char *model = e2e_src("examples/mnist_mlp/model.json"), *plan = e2e_path("fit.plan");
  e2e_result r;
  e2e_kdc(&r, "compile", model, "-o", plan, "--target", "cuda", "--batch", "8", "--loss",
          "categorical_crossentropy", "--optimizer", "adam", NULL);
  if (r.status != 0) fail_msg("compile: %s", r.err);
  kdc_rt_history a, b;
  fit_gpu(plan, true, &a);
  fit_gpu(plan, false, &b);
  assert_int_equal(a.steps, 12); /* 90 rows in batches of 8 */
  assert_int_equal(a.staged, 2 * 11);
  assert_int_equal(b.staged, 0);
  assert_memory_equal(a.loss, b.loss, 2 * sizeof *a.loss);
  assert_memory_equal(a.val_loss, b.val_loss, 2 * sizeof *a.val_loss);
  assert_memory_equal(a.batch_loss, b.batch_loss, 24 * sizeof *a.batch_loss);
  printf("ok: fit staged (%lld steps staged) == plain, bitwise; loss %.6g -> %.6g\n",
         (long long)a.staged, a.loss[0], a.loss[1]);
  kdc_rt_history_free(&a);
  kdc_rt_history_free(&b);
  free(model), free(plan);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_refused),
      cmocka_unit_test(test_gpu_matches_cpu),
      cmocka_unit_test(test_gpu_train_matches_cpu),
      cmocka_unit_test(test_fit_refused_cpu_runs),
      cmocka_unit_test(test_graphs_match_plain),
      cmocka_unit_test(test_tf32_close),
      cmocka_unit_test(test_fit_staged_matches),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
