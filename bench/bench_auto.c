/*
 * bench_auto: `--layout auto` (issue 20) on the virtual mesh.  Prints one
 * JSON object:
 *   machine   the cost model's constants measured here, written to
 *             DIR/machine.json and used for every prediction below:
 *             gemm_flops_per_s  cblas_sgemm 512x512x512 on one thread (kdc
 *                               runs OpenBLAS on one thread per device);
 *             bytes_per_s       c = a + b over 4M floats, bytes read and
 *                               written per second, one thread;
 *             axes["*"]         an all_reduce over 8 devices: latency_s = the
 *                               time of a 4 KiB one, bytes_per_s = the extra
 *                               bytes per device (2(n-1)/n S) of a 4 MiB one
 *                               over the extra time; move_bytes_per_s
 *                               kdc's default (a plan's profile: below);
 *             lanes             the threads (devices share the cores);
 *             step_s            kdc's default (docs/runtime.md: 1-4 us per call);
 *             then both rates divided by one factor, the median over the MNIST
 *             MLP, the 4096 MLP and cnn_64 of measured / predicted
 *             DataParallel step on mesh 2 (not a mesh of the table), and the
 *             latency raised by what a collective costs inside a plan: the
 *             MNIST predict on mesh 2, DataParallel vs d1's columns
 *             over the axis, measured minus predicted difference per extra
 *             collective;
 *   search    the 64-layer MLP (Dense 256 x 64) on 2x4: the search alone and
 *             the whole compile with --layout auto (predict), seconds;
 *   table     MNIST MLP (batch 128), the 784-4096-4096-10 MLP (128),
 *             transformer_512 (8) and cnn_64 (32), predict, on meshes 8, 2x4,
 *             4x2, 1x8: for auto, DataParallel and the hand layout of
 *             examples/ (mnist_mlp's for both MLPs -- read with match search
 *             for the Sequential 4096 MLP, whose paths are sequential/d1/... --,
 *             transformer_block's for
 *             the transformer; none for the CNN or a 1-D mesh), the predicted
 *             (with kdc's default machine; --fitted: this run's) and the
 *             measured (median of 5) step time; per model and mesh,
 *             auto's measured time over the best other one;
 *   table_train_step  the same for one training step (categorical
 *             cross-entropy, SGD) of the four models (--train-only: this
 *             table alone, after the calibration and the search).
 * usage: bench_auto DIR [--fit-only | --fitted | --train-only]   (DIR: big_mlp.py's big_mlp.json and big_models.py's
 * transformer_512.json, cnn_64.json; bench/run.sh makes them)
 * Threads: all cores (KDC_BENCH_THREADS overrides).
 */
#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "api/api.h"
#include "bench_compile.h"
#include "bench_util.h"
#include "common/io.h"
#include "frontend/frontend.h"
#include "frontend/layout.h"
#include "passes/passes.h"

static void die(kdc_status st) {
  if (!st) return;
  fprintf(stderr, "bench_auto: %s\n", kdc_status_message(st));
  exit(1);
}

/* ---- calibration ---------------------------------------------------------- */

typedef struct gemm_ctx { float *a, *b, *c; int n; } gemm_ctx;
static void run_gemm(void *v) {
  gemm_ctx *g = v;
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, g->n, g->n, g->n, 1.0f, g->a, g->n,
              g->b, g->n, 0.0f, g->c, g->n);
}

typedef struct add_ctx { float *a, *b, *c; size_t n; } add_ctx;
static void run_add(void *v) {
  add_ctx *x = v;
  for (size_t i = 0; i < x->n; i++) x->c[i] = x->a[i] + x->b[i];
  __asm__ __volatile__("" ::: "memory");
}

typedef struct ar_ctx {
  kdc_rt_plan *p;
  const void *const *in[8];
  void *const *out[8];
} ar_ctx;
static void run_ar(void *v) {
  ar_ctx *c = v;
  die(kdc_rt_plan_run_local(c->p, 0, c->in, c->out));
}

static double collective_s(int64_t n, bool gather, int threads) {
  kdc_rt_options ro = {.n_threads = threads};
  ar_ctx c = {.p = bench_collective_plan("bench_auto", 8, n, gather, &ro)};
  void *bufs[16], *ptrs[16];
  for (int d = 0; d < 16; d++) {
    size_t b = (size_t)n * 4 * (gather && d >= 8 ? 8 : 1);
    bufs[d] = aligned_alloc(64, b);
    memset(bufs[d], 0, b);
    ptrs[d] = bufs[d];
  }
  for (int d = 0; d < 8; d++) {
    c.in[d] = (const void *const *)&ptrs[d];
    c.out[d] = (void *const *)&ptrs[8 + d];
  }
  double t = bench_median(run_ar, &c, 9, n < 65536 ? 20 : 2);
  for (int d = 0; d < 16; d++) free(bufs[d]);
  kdc_rt_plan_release(c.p);
  return t;
}

static void calibrate(int threads, const char *path) {
  gemm_ctx g = {.n = 512};
  size_t nn = (size_t)g.n * (size_t)g.n;
  g.a = calloc(nn, 4), g.b = calloc(nn, 4), g.c = calloc(nn, 4);
  for (size_t i = 0; i < nn; i++) g.a[i] = (float)(i % 7), g.b[i] = (float)(i % 5);
  double tg = bench_median(run_gemm, &g, 7, 1);
  double flops = 2.0 * g.n * g.n * g.n / tg;
  free(g.a), free(g.b), free(g.c);
  add_ctx x = {.n = (size_t)4 << 20};
  x.a = calloc(x.n, 4), x.b = calloc(x.n, 4), x.c = calloc(x.n, 4);
  double ta = bench_median(run_add, &x, 7, 1);
  double bps = 12.0 * (double)x.n / ta;
  free(x.a), free(x.b), free(x.c);
  int64_t small = 1024, big = 1 << 20;
  double ts = collective_s(small, false, threads), tb = collective_s(big, false, threads);
  double lat = ts, bw = 2.0 * 7 / 8 * 4.0 * (double)(big - small) / fmax(tb - ts, 1e-9);
  /* all_gather with a result buffer per device (7e8 B/s here) is no measure
   * of a plan's: inside a plan the devices share one gathered result
   * (runtime/gather_inplace.c), so the rate of moves is kdc's default,
   * taken from a plan's profile (passes/step_cost.c) */
  kdc_machine def;
  kdc_machine_defaults(&def);
  double move = def.default_axis.move_bytes_per_s;
  FILE *f = fopen(path, "w");
  if (!f) die(KDC_ERR(KDC_IO_ERROR, "%s: cannot write", path));
  fprintf(f, "{\"name\": \"virtual-cpu (bench_auto, %d threads)\", \"gemm_flops_per_s\": %.4g, "
          "\"bytes_per_s\": %.4g, \"step_s\": %.4g, \"lanes\": %d, \"axes\": {\"*\": "
          "{\"latency_s\": %.4g, \"bytes_per_s\": %.4g, \"move_bytes_per_s\": %.4g}}}\n", threads,
          flops, bps, def.step_s, threads, lat, bw, move);
  fclose(f);
  char *text = NULL;
  size_t len = 0;
  die(kdc_file_read_all(path, (void **)&text, &len));
  printf("  \"machine\": %.*s,\n", (int)len - 1, text);
  free(text);
}

/* ---- the 64-layer search -------------------------------------------------- */

static void deep_search(const char *dir, const char *machine) {
  char path[512], plan[512];
  snprintf(path, sizeof path, "%s/deep64.json", dir);
  snprintf(plan, sizeof plan, "%s/deep64.plan", dir);
  FILE *f = fopen(path, "w");
  if (!f) die(KDC_ERR(KDC_IO_ERROR, "%s: cannot write", path));
  fprintf(f, "{\"class_name\": \"Sequential\", \"config\": {\"name\": \"deep64\", \"layers\": "
          "[{\"class_name\": \"InputLayer\", \"config\": {\"batch_shape\": [null, 256], "
          "\"name\": \"input_layer\"}}");
  for (int i = 0; i < 64; i++)
    fprintf(f, ", {\"class_name\": \"Dense\", \"config\": {\"name\": \"d%d\", \"units\": 256, "
            "\"activation\": \"relu\"}}", i);
  fprintf(f, "]}}\n");
  fclose(f);
  kdc_keras_model *km = NULL;
  die(kdc_frontend_load(path, &km));
  kdc_mesh mesh;
  die(kdc_mesh_parse("2x4", NULL, &mesh));
  kdc_auto_options ao = {0, false, machine};
  kdc_auto_result r;
  FILE *notes = fopen("/dev/null", "w");
  double t0 = bench_now();
  die(kdc_api_auto_layout(km, &mesh, 64, NULL, 0, &ao, notes, &r));
  double search = bench_now() - t0;
  fclose(notes);
  kdc_frontend_free(km);
  kdc_compile_options co;
  kdc_compile_options_init(&co);
  co.model_path = path, co.random_init = 1, co.batch = 64, co.mesh = "2x4";
  co.layout_path = "auto", co.machine_path = machine;
  char *w = NULL;
  t0 = bench_now();
  die(kdc_compile_file(&co, plan, &w));
  double whole = bench_now() - t0;
  unlink(plan);
  kdc_free(w);
  printf("  \"search_64_layers\": {\"mesh\": \"2x4\", \"chosen\": \"%s\", \"search_s\": %.3f, "
         "\"compile_s\": %.3f},\n", r.name, search, whole);
  kdc_auto_result_free(&r);
}

/* ---- the table ----------------------------------------------------------------- */

typedef struct run_ctx {
  kdc_plan *p;
  kdc_array in[4], out[4];
  size_t n_in, n_out;
} run_ctx;

static void run_predict(void *v) {
  run_ctx *c = v;
  die(kdc_plan_predict(c->p, c->in, c->n_in, c->out, c->n_out));
}

static void fill_array(kdc_array *a, const kdc_tensor_info *t, bool random) {
  memset(a, 0, sizeof *a);
  a->dtype = t->dtype, a->rank = t->rank;
  memcpy(a->dims, t->dims, sizeof a->dims);
  a->data = calloc(1, t->bytes);
  if (random && t->dtype == KDC_ARRAY_F32) {
    uint32_t s = 1;
    for (size_t i = 0; i < t->bytes / 4; i++) {
      s = s * 1103515245u + 12345u;
      ((float *)a->data)[i] = (float)((s >> 8) % 2001) / 1000.0f - 1.0f;
    }
  }
}

static char *read_text(const char *path) {
  void *d = NULL;
  size_t n = 0;
  if (access(path, R_OK) != 0) return NULL;
  die(kdc_file_read_all(path, &d, &n));
  char *s = realloc(d, n + 1);
  s[n] = 0;
  return s;
}

/* The measured seconds per predict of |p| over one batch (median of 5). */
static double measure(kdc_plan *p) {
  run_ctx c = {.p = p, .n_in = kdc_plan_input_count(p), .n_out = kdc_plan_output_count(p)};
  for (size_t i = 0; i < c.n_in && i < 4; i++) {
    kdc_tensor_info ti;
    die(kdc_plan_input(p, i, &ti));
    fill_array(&c.in[i], &ti, true);
  }
  for (size_t i = 0; i < c.n_out && i < 4; i++) {
    kdc_tensor_info ti;
    die(kdc_plan_output(p, i, &ti));
    fill_array(&c.out[i], &ti, false);
  }
  double t = bench_median(run_predict, &c, 5, 1);
  for (size_t i = 0; i < 4; i++) free(c.in[i].data), free(c.out[i].data);
  return t;
}

typedef struct step_ctx {
  kdc_trainer *t;
  kdc_array data[4];
  size_t n;
} step_ctx;

static void run_step(void *v) {
  step_ctx *c = v;
  double loss;
  die(kdc_trainer_step(c->t, c->data, c->n, &loss));
}

/* The measured seconds per training step of |p| (median of 5). */
static double measure_step(kdc_plan *p) {
  step_ctx c;
  memset(&c, 0, sizeof c);
  die(kdc_trainer_create(p, &c.t));
  c.n = kdc_trainer_data_count(c.t);
  for (size_t i = 0; i < c.n && i < 4; i++) {
    kdc_tensor_info ti;
    die(kdc_trainer_data(c.t, i, &ti));
    fill_array(&c.data[i], &ti, true);
  }
  double t = bench_median(run_step, &c, 5, 1);
  for (size_t i = 0; i < 4; i++) free(c.data[i].data);
  kdc_trainer_free(c.t);
  return t;
}

/* The training the table's training rows compile: categorical
 * cross-entropy, SGD (as `kdc compile --loss categorical_crossentropy`). */
static const char *train_loss;
static void train_options(kdc_train_options *t) {
  kdc_loss_kind loss;
  if (!kdc_loss_from_name("categorical_crossentropy", &loss)) die(KDC_ERR(KDC_INTERNAL, "loss"));
  kdc_train_options_init(t, loss, KDC_OPT_SGD);
  t->every_output = true;
  t->sample_mask = true;
}

/* Compiles (|layout|: a file, "auto", or NULL), measures and frees one plan;
 * with "auto", *|text| gets the chosen layout (NULL: DataParallel) and
 * |chosen| its name. */
static double compile_measure(const char *model, const char *weights, int64_t batch,
                              const char *mesh, const char *layout, const char *machine,
                              const char *lay_out, int threads, char **text, char *chosen) {
  kdc_compile_options co;
  kdc_compile_options_init(&co);
  co.model_path = model, co.batch = batch, co.mesh = mesh;
  if (weights) co.weights_path = weights;
  else co.random_init = 1;
  co.layout_path = layout;
  co.loss = train_loss;
  if (layout && !strcmp(layout, "auto")) {
    unlink(lay_out);
    co.machine_path = machine, co.write_layout_path = lay_out;
  }
  kdc_run_options ro;
  kdc_run_options_init(&ro);
  ro.threads = threads;
  kdc_plan *p = NULL;
  die(kdc_compile(&co, &ro, &p));
  if (layout && !strcmp(layout, "auto") && text) {
    *text = read_text(lay_out);
    const char *w = strstr(kdc_plan_warnings(p), "chose ");
    if (w) sscanf(w + 6, "%127s", chosen);
  }
  double t = train_loss ? measure_step(p) : measure(p);
  kdc_plan_free(p);
  return t;
}

typedef struct model_row {
  const char *name, *file, *weights, *hand;
  int64_t batch;
} model_row;


/* The micro-benchmark rates overstate what a step gets (small GEMMs,
 * kernels that do not stream): one factor, the median over the three
 * models of measured / predicted DataParallel on mesh 2 (two devices on the
 * two lanes: one thread per device, as on the table's meshes), scales both
 * rates.  The table's meshes are not used to fit it. */
static void write_machine(const char *machine, const kdc_machine *mc, double s, double latency) {
  FILE *f = fopen(machine, "w");
  if (!f) die(KDC_ERR(KDC_IO_ERROR, "%s: cannot write", machine));
  fprintf(f, "{\"name\": \"virtual-cpu (bench_auto), fitted\", \"gemm_flops_per_s\": %.4g, "
          "\"bytes_per_s\": %.4g, \"step_s\": %.4g, \"lanes\": %d, \"axes\": {\"*\": "
          "{\"latency_s\": %.4g, \"bytes_per_s\": %.4g, \"move_bytes_per_s\": %.4g}}}\n",
          mc->gemm_flops_per_s / s, mc->bytes_per_s / s, mc->step_s, mc->lanes, latency,
          mc->default_axis.bytes_per_s, mc->default_axis.move_bytes_per_s);
  fclose(f);
}

static void fit(const char *dir, const char *machine, int threads, const char *const *files,
                const char *const *weights, const int64_t *batches, int n) {
  double r[8];
  kdc_mesh two;
  die(kdc_mesh_parse("2", NULL, &two));
  printf("  \"fit_mesh_2\": [");
  for (int i = 0; i < n; i++) {
    double t = compile_measure(files[i], weights[i], batches[i], "2", NULL, machine, NULL, threads,
                               NULL, NULL);
    kdc_keras_model *km = NULL;
    die(kdc_frontend_load(files[i], &km));
    kdc_step_cost cost;
    die(kdc_api_layout_cost(km, &two, batches[i], NULL, 0, machine, NULL, &cost));
    kdc_frontend_free(km);
    r[i] = t / cost.step_s;
    printf("%s{\"model\": \"%s\", \"predicted_ms\": %.3f, \"measured_ms\": %.3f}", i ? ", " : "",
           files[i], cost.step_s * 1e3, t * 1e3);
  }
  qsort(r, (size_t)n, sizeof r[0], bench_cmp);
  double s = r[n / 2];
  kdc_machine mc;
  die(kdc_api_machine_load(machine, &mc));
  write_machine(machine, &mc, s, mc.default_axis.latency_s);
  /* A collective inside a plan also ends the pool's device-parallel
   * segment, which a one-step plan does not show: the MNIST MLP's predict
   * on mesh 2, DataParallel against d1's columns over the axis; the
   * measured difference less the predicted one, per extra collective, is
   * added to the latency. */
  char lay[512];
  snprintf(lay, sizeof lay, "%s/fit_layout.json", dir);
  FILE *lf = fopen(lay, "w");
  if (!lf) die(KDC_ERR(KDC_IO_ERROR, "%s: cannot write", lay));
  static const char ltext[] = "{\"batch_dim_name\": \"data\", \"layout_map\": "
                              "{\"d1/kernel\": [null, \"data\"]}}\n";
  fputs(ltext, lf);
  fclose(lf);
  double t_dp = 0, t_l = 0;
  for (int round = 0; round < 2; round++) {  /* the faster of two each */
    double a = compile_measure(files[0], weights[0], batches[0], "2", NULL, machine, NULL,
                               threads, NULL, NULL);
    double b = compile_measure(files[0], weights[0], batches[0], "2", lay, machine, NULL,
                               threads, NULL, NULL);
    t_dp = round ? fmin(t_dp, a) : a, t_l = round ? fmin(t_l, b) : b;
  }
  kdc_keras_model *km = NULL;
  die(kdc_frontend_load(files[0], &km));
  kdc_step_cost c_dp, c_l;
  die(kdc_api_layout_cost(km, &two, batches[0], NULL, 0, machine, NULL, &c_dp));
  die(kdc_api_layout_cost(km, &two, batches[0], NULL, 0, machine, ltext, &c_l));
  kdc_frontend_free(km);
  double latency = mc.default_axis.latency_s;
  int64_t dn = c_l.n_collectives - c_dp.n_collectives;
  if (dn > 0)
    latency = fmax(latency, latency + ((t_l - t_dp) - (c_l.step_s - c_dp.step_s)) / (double)dn);
  write_machine(machine, &mc, s, latency);
  char *text = read_text(machine);
  printf("],\n  \"fit_factor\": %.3f,\n  \"fit_latency\": {\"data_parallel_ms\": [%.3f, %.3f], "
         "\"d1_columns_ms\": [%.3f, %.3f], \"extra_collectives\": %lld},\n  \"machine_fitted\": "
         "%.*s,\n", s, c_dp.step_s * 1e3, t_dp * 1e3, c_l.step_s * 1e3, t_l * 1e3, (long long)dn,
         (int)strlen(text) - 1, text);
  free(text);
}

static void table(const char *dir, const char *machine, int threads, bool train) {
  char big[512], tr[512], cnn[512], lay[512];
  snprintf(big, sizeof big, "%s/big_mlp.json", dir);
  snprintf(tr, sizeof tr, "%s/transformer_512.json", dir);
  snprintf(cnn, sizeof cnn, "%s/cnn_64.json", dir);
  snprintf(lay, sizeof lay, "%s/auto_layout.json", dir);
  const char *mnist_hand = KDC_SOURCE_DIR "/examples/mnist_mlp/layout.json";
  /* the same rules for the Sequential 4096 MLP, whose paths are
   * "sequential/d1/kernel": read with match search (Keras 3.0-3.13) */
  char big_hand[512];
  snprintf(big_hand, sizeof big_hand, "%s/mlp_4096_hand.json", dir);
  char *guide = read_text(mnist_hand);
  char *brace = guide ? strchr(guide, '{') : NULL;
  FILE *hf = fopen(big_hand, "w");
  if (!brace || !hf) die(KDC_ERR(KDC_IO_ERROR, "%s: cannot write", big_hand));
  fprintf(hf, "{\"match\": \"search\", %s", brace + 1);
  fclose(hf);
  free(guide);
  const model_row models[] = {
      {"mnist_mlp", KDC_SOURCE_DIR "/examples/mnist_mlp/model.json",
       KDC_SOURCE_DIR "/examples/mnist_mlp/weights.safetensors", mnist_hand, 128},
      {"mlp_4096", big, NULL, big_hand, 128},
      {"transformer_512", tr, NULL, KDC_SOURCE_DIR "/examples/transformer_block/layout.json", 8},
      {"cnn_64", cnn, NULL, NULL, 32},
  };
  static const char *const meshes[] = {"8", "2x4", "4x2", "1x8"};
  const char *const files[3] = {models[0].file, models[1].file, models[3].file};
  const char *const weights[3] = {models[0].weights, NULL, NULL};
  const int64_t batches[3] = {models[0].batch, models[1].batch, models[3].batch};
  char machine_file[512];
  snprintf(machine_file, sizeof machine_file, "%s/machine.json", dir);
  if (!train) fit(dir, machine_file, threads, files, weights, batches, 3);
  kdc_train_options topt;
  train_options(&topt);
  train_loss = train ? "categorical_crossentropy" : NULL;
  printf("  \"%s\": [", train ? "table_train_step" : "table");
  int first = 1;
  for (size_t m = 0; m < sizeof models / sizeof models[0]; m++) {
    kdc_keras_model *km = NULL;
    die(kdc_frontend_load(models[m].file, &km));
    for (size_t k = 0; k < 4; k++) {
      kdc_mesh mesh;
      die(kdc_mesh_parse(meshes[k], NULL, &mesh));
      static const char *const kinds[] = {"auto", "data_parallel", "hand"};
      const char *layouts[3] = {"auto", NULL, models[m].hand};
      double pred[3] = {0, 0, 0}, meas[3] = {0, 0, 0};
      char chosen[128] = "";
      char *texts[3] = {NULL, NULL, NULL};
      int n = models[m].hand && mesh.naxes >= 2 ? 3 : 2;
      /* two rounds, the second in reverse order; one plan alive at a time
       * (each plan has its own thread pool); the faster median of each */
      for (int round = 0; round < 2; round++)
        for (int j = 0; j < n; j++) {
          int i = round ? n - 1 - j : j;
          double t = compile_measure(models[m].file, models[m].weights, models[m].batch,
                                     meshes[k], layouts[i], machine, lay, threads,
                                     i == 0 && round == 0 ? &texts[0] : NULL, chosen);
          if (meas[i] == 0 || t < meas[i]) meas[i] = t;
        }
      if (n == 3) texts[2] = read_text(models[m].hand);
      for (int i = 0; i < n; i++) {
        kdc_step_cost cost;
        die(kdc_api_layout_cost(km, &mesh, models[m].batch, train ? &topt : NULL, 0, machine,
                                texts[i], &cost));
        pred[i] = cost.step_s;
        free(texts[i]);
      }
      /* auto's DataParallel is the DataParallel plan itself (the same
       * compile): its time is the faster of the two measurements of it */
      bool same = !strcmp(chosen, "data_parallel");
      double same_t = fmin(meas[0], meas[1]);
      double best_other = same ? same_t : 0;
      for (int i = 0; i < n; i++) {
        if (i > 1 && meas[i] < best_other) best_other = meas[i];
        if (i == 1 && !same) best_other = meas[i];
        printf("%s\n    {\"model\": \"%s\", \"mesh\": \"%s\", \"batch\": %lld, \"layout\": \"%s\", "
               "\"chosen\": \"%s\", \"predicted_ms\": %.3f, \"measured_ms\": %.3f, "
               "\"error\": %.3f}", first ? "" : ",", models[m].name, meshes[k],
               (long long)models[m].batch, kinds[i], i == 0 ? chosen : kinds[i],
               pred[i] * 1e3, meas[i] * 1e3, (pred[i] - meas[i]) / meas[i]);
        first = 0;
      }
      double auto_meas = same ? same_t : meas[0];
      printf(",\n    {\"model\": \"%s\", \"mesh\": \"%s\", \"auto_over_best_other\": %.3f, "
             "\"same_plan_as_data_parallel\": %s}", models[m].name, meshes[k],
             auto_meas / best_other, same ? "true" : "false");
    }
    kdc_frontend_free(km);
  }
  printf("\n  ]%s\n", train ? "" : ",");
  train_loss = NULL;
}

int main(int argc, char **argv) {
  kdc_rt_blas_select_core(argv);
  bool fit_only = argc > 2 && !strcmp(argv[2], "--fit-only");
  if (argc < 2) {
    fprintf(stderr, "usage: bench_auto DIR (bench/big_mlp.py's and big_models.py's output)\n");
    return 2;
  }
  const char *env = getenv("KDC_BENCH_THREADS");
  int threads = env ? atoi(env) : (int)sysconf(_SC_NPROCESSORS_ONLN);
  char machine[512];
  snprintf(machine, sizeof machine, "%s/machine.json", argv[1]);
  double load[3] = {0, 0, 0};
  FILE *la = fopen("/proc/loadavg", "r");
  if (la) {
    if (fscanf(la, "%lf %lf %lf", &load[0], &load[1], &load[2]) != 3) load[0] = -1;
    fclose(la);
  }
  printf("{\n  \"benchmark\": \"auto_layout\", \"threads\": %d, \"loadavg_start\": [%.2f, %.2f, "
         "%.2f],\n", threads, load[0], load[1], load[2]);
  calibrate(threads, machine);
  deep_search(argv[1], machine);
  if (fit_only) {
    static const char *const w[3] = {KDC_SOURCE_DIR "/examples/mnist_mlp/weights.safetensors", NULL,
                                     NULL};
    char f1[512], f2[512];
    snprintf(f1, sizeof f1, "%s/big_mlp.json", argv[1]);
    snprintf(f2, sizeof f2, "%s/cnn_64.json", argv[1]);
    const char *const files[3] = {KDC_SOURCE_DIR "/examples/mnist_mlp/model.json", f1, f2};
    const int64_t batches[3] = {128, 128, 32};
    fit(argv[1], machine, threads, files, w, batches, 3);
    printf("  \"fit_only\": true\n}\n");
    return 0;
  }
  /* the table predicts with kdc's defaults (what `--layout auto` uses
   * without --machine): a calibration on a loaded machine moves by 2-3x
   * within minutes (docs/sharding.md), the defaults come from a quiet run;
   * --fitted predicts with this run's DIR/machine.json instead */
  bool fitted = argc > 2 && !strcmp(argv[2], "--fitted");
  bool train_only = argc > 2 && !strcmp(argv[2], "--train-only");
  if (!train_only) table(argv[1], fitted ? machine : NULL, threads, false);
  table(argv[1], fitted ? machine : NULL, threads, true);
  la = fopen("/proc/loadavg", "r");
  if (la) {
    if (fscanf(la, "%lf %lf %lf", &load[0], &load[1], &load[2]) != 3) load[0] = -1;
    fclose(la);
  }
  printf("  , \"loadavg_end\": [%.2f, %.2f, %.2f]\n}\n", load[0], load[1], load[2]);
  return 0;
}
