/*
 * End to end on device meshes, in process (frontend -> passes -> codegen ->
 * kdc_rt_plan_load/run; no kdc process per case): every example model on
 * meshes 1, 2, 4, 8, 2x4, 4x2, 1x8, 8x1 and 2x2x2, DataParallel (no layout)
 * and model-parallel layouts, compiled at batch 16 and run on the example's
 * 37 rows (16+16+5: the last batch partial, zero padded), equals (1) the
 * reference interpreter on the unpartitioned model (|d| <= 1e-6 + 1e-5|ref|)
 * and (2) the Keras reference expected*.npy (|d| <= 1e-5 + 1e-4|ref|).
 * Communication is asserted exactly on the compiled plan's COLLECTIVE steps:
 * DataParallel predict has none; the Megatron MLP and the transformer block
 * under heads-on-model have exactly the all_reduces SHARDING.md 4 predicts.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "codegen/codegen.h"
#include "e2e_layout.h"
#include "e2e_util.h"
#include "frontend/frontend.h"
#include "frontend/layout.h"
#include "ir/ir.h"
#include "passes/passes.h"
#include "runtime/runtime.h"
#include "test_sampling.h"

enum { BATCH = 16 };

typedef struct example {
  const char *dir;
  int n_in, n_out;
  const char *layout;       /* examples/<dir>/<layout>, or NULL: a generated column split */
  const char *match;        /* layout match mode, or NULL */
} example;

static const example examples[] = {
    {"mnist_mlp", 1, 1, "examples/mnist_mlp/layout.json", NULL},
    {"mlp_sequential", 1, 1, "examples/mnist_mlp/layout.json", "search"},
    {"activations", 1, 1, NULL, NULL},
    {"merge_reshape", 2, 2, NULL, NULL},
    {"transformer_block", 1, 1, "examples/transformer_block/layout.json", NULL},
    {"norm_zoo", 1, 1, NULL, NULL},
    {"small_cnn", 1, 1, NULL, NULL},
    {"text_classifier", 1, 1, NULL, NULL},
    {"lstm_text", 1, 1, NULL, NULL},
    {"gru_rnn", 1, 1, NULL, NULL},
    {"bidir_rnn", 1, 1, NULL, NULL},
    {"seq2seq", 2, 1, NULL, NULL},
    {"layer_zoo2", 2, 1, NULL, NULL},
    {"masked_text", 2, 1, NULL, NULL},
};

static const char *const meshes[] = {"1", "2", "4", "8", "2x4", "4x2", "1x8", "8x1", "2x2x2"};
/* Sampled runs (the sanitizer build checks memory, not numerics;
 * tests/test_sampling.h): a representative subset (1-D, 2-D both ways,
 * 3-D).  The release build, or KDC_FULL_SWEEP=1, runs the whole matrix. */
static const char *const sampled_meshes[] = {"1", "8", "2x4", "4x2", "2x2x2"};

static char *ex_file(const char *dir, const char *fmt, int i) {
  char rel[256], name[64];
  snprintf(name, sizeof name, fmt, i);
  snprintf(rel, sizeof rel, "examples/%s/%s", dir, name);
  return e2e_src(rel);
}

typedef struct collectives {
  int n, n_all_reduce;
  int64_t ar_numel[8];      /* local element count of each all_reduce */
  uint32_t ar_axes[8];      /* axis bit set of each all_reduce */
  double bytes;             /* per device, SHARDING.md 4 */
} collectives;

static void count_collectives(const kdc_rt_plan *p, int func, collectives *c) {
  memset(c, 0, sizeof *c);
  const kdc_prog_func *pf = &p->prog.funcs[func];
  for (uint32_t s = 0; s < pf->n_steps; s++) {
    if (pf->steps[s].kind != KDC_STEP_COLLECTIVE) continue;
    const kdc_prog_coll_step *cs = &pf->steps[s].coll;
    int64_t numel = 1;
    for (int d = 0; d < cs->rank; d++) numel *= cs->in_dims[d];
    double g = (double)cs->group_size, bytes = (double)numel * 4;
    c->n++;
    if (cs->kind == KDC_COLL_ALL_REDUCE) {
      if (c->n_all_reduce < 8) {
        c->ar_numel[c->n_all_reduce] = numel;
        uint32_t ax = 0;
        for (uint32_t a = 0; a < cs->naxes; a++) ax |= 1u << cs->axes[a];
        c->ar_axes[c->n_all_reduce] = ax;
      }
      c->n_all_reduce++;
      c->bytes += 2 * (g - 1) / g * bytes;
    }
  }
}

/* frontend -> passes -> codegen: the plan at |out|. */
static kdc_status compile_plan(const char *model, const char *weights, int64_t batch,
                               const char *mesh_str, const char *layout_text, const char *match,
                               const char *out) {
  kdc_mesh mesh;
  kdc_layout *layout = NULL;
  kdc_keras_model *km = NULL;
  kdc_module *mod = NULL;
  kdc_status st = NULL;
  memset(&mesh, 0, sizeof mesh);
  if (mesh_str) st = kdc_mesh_parse(mesh_str, NULL, &mesh);
  if (!st && mesh_str && layout_text) {
    st = kdc_layout_parse(layout_text, strlen(layout_text), "layout.json", &layout);
    kdc_layout_match mm;
    if (!st && match && kdc_layout_match_from_name(match, &mm)) kdc_layout_set_match(layout, mm);
    if (!st) st = kdc_layout_check(layout, &mesh);
  }
  if (!st) st = kdc_frontend_load(model, &km);
  if (!st) {
    kdc_lower_options lo = {.batch = batch, .mesh = mesh_str ? &mesh : NULL, .layout = layout};
    st = kdc_frontend_lower(km, &lo, &mod);
  }
  if (!st) st = kdc_frontend_bind_weights(km, mod, weights, 0);
  if (!st) st = kdc_pass_pipeline_run(mod, NULL);
  if (!st) {
    kdc_codegen_options co;
    memset(&co, 0, sizeof co);
    co.no_ir_text = true;
    st = kdc_codegen_cpu_plan(mod, &co, out);
  }
  kdc_ir_module_destroy(mod);
  kdc_frontend_free(km);
  kdc_layout_free(layout);
  return st;
}

/* Runs |p| over |rows| rows of the inputs in batches of |batch| (the last
 * zero padded); outputs get |rows| rows each (malloc'd). */
static void run_rows(kdc_rt_plan *p, int n_in, const kdc_npy_array *in, int n_out, int64_t rows,
                     int64_t batch, void **out) {
  const void *bin[4];
  void *bout[4];
  size_t in_row[4], out_row[4];
  for (int i = 0; i < n_in; i++) {
    in_row[i] = in[i].nbytes / (size_t)in[i].dims[0];
    assert_int_equal(kdc_rt_plan_input(p, 0, (size_t)i)->bytes, in_row[i] * (size_t)batch);
    bin[i] = calloc((size_t)batch, in_row[i]);
  }
  for (int o = 0; o < n_out; o++) {
    const kdc_rt_tensor_info *ti = kdc_rt_plan_output(p, 0, (size_t)o);
    out_row[o] = ti->bytes / (size_t)batch;
    bout[o] = malloc(ti->bytes);
    out[o] = malloc(out_row[o] * (size_t)rows);
  }
  for (int64_t r0 = 0; r0 < rows; r0 += batch) {
    int64_t k = rows - r0 < batch ? rows - r0 : batch;
    for (int i = 0; i < n_in; i++) {
      memset((void *)bin[i], 0, in_row[i] * (size_t)batch);
      memcpy((void *)bin[i], (const char *)in[i].data + in_row[i] * (size_t)r0, in_row[i] * (size_t)k);
    }
    kdc_status st = kdc_rt_plan_run(p, bin, bout);
    if (st) fprintf(stderr, "run: %s\n", kdc_status_message(st));
    assert_null(st);
    for (int o = 0; o < n_out; o++)
      memcpy((char *)out[o] + out_row[o] * (size_t)r0, bout[o], out_row[o] * (size_t)k);
  }
  for (int i = 0; i < n_in; i++) free((void *)bin[i]);
  for (int o = 0; o < n_out; o++) free(bout[o]);
}

/* The reference interpreter on the unpartitioned model (batch = rows). */
static void interpret(const example *e, const kdc_npy_array *in, int64_t rows, kdc_tensor *out) {
  char *model = ex_file(e->dir, "model.json", 0), *w = ex_file(e->dir, "weights.safetensors", 0);
  kdc_keras_model *km = NULL;
  kdc_module *mod = NULL;
  assert_null(kdc_frontend_load(model, &km));
  kdc_lower_options lo = {.batch = rows};
  assert_null(kdc_frontend_lower(km, &lo, &mod));
  assert_null(kdc_frontend_bind_weights(km, mod, w, 0));
  kdc_func *f = kdc_ir_module_find_func(mod, "predict");
  assert_non_null(f);
  kdc_tensor *args = calloc(f->n_params, sizeof *args);
  for (size_t i = 0; i < f->n_params; i++) {
    const kdc_node *nd = kdc_ir_node(f, f->params[i]);
    args[i].type = nd->type;
    args[i].data = nd->attr.param.kind == KDC_PARAM_INPUT ? in[i].data : NULL;
  }
  assert_null(kdc_ir_interpret(f, args, f->n_params, out));
  free(args);
  kdc_ir_module_destroy(mod);
  kdc_frontend_free(km);
  free(model);
  free(w);
}

/* A column split of the kernels and embedding tables (e2e_layout.h); NULL
 * when nothing divides. */
static char *column_layout(const example *e, int64_t model) {
  char *mpath = ex_file(e->dir, "model.json", 0);
  kdc_keras_model *km = NULL;
  assert_null(kdc_frontend_load(mpath, &km));
  free(mpath);
  int rules;
  char *s = e2e_column_layout(km, model, &rules);
  kdc_frontend_free(km);
  if (!rules) free(s), s = NULL;
  return s;
}

static char *slurp(const char *rel) {
  char *p = e2e_src(rel);
  FILE *f = fopen(p, "rb");
  assert_non_null(f);
  char *s = calloc(1, 1 << 16);
  size_t n = fread(s, 1, (1 << 16) - 1, f);
  (void)n;
  fclose(f);
  free(p);
  return s;
}

static int64_t model_axis_size(const char *mesh) {
  const char *x = strchr(mesh, 'x');
  return x ? strtoll(x + 1, NULL, 10) : 0;
}

static int n_cases, n_pass, n_skip;

/* One (example, mesh, layout) case; returns false when it did not compile
 * with a status other than a layout divisibility error (a failure). */
static void check_case(const example *e, const char *mesh, const char *layout, const char *match,
                       const kdc_npy_array *in, const kdc_tensor *ref, const kdc_npy_array *want) {
  char name[128];
  snprintf(name, sizeof name, "%s-%s-%s.plan", e->dir, mesh, layout ? "mp" : "dp");
  char *plan = e2e_path(name);
  char *model = ex_file(e->dir, "model.json", 0), *w = ex_file(e->dir, "weights.safetensors", 0);
  n_cases++;
  kdc_status st = compile_plan(model, w, BATCH, strcmp(mesh, "1") ? mesh : NULL, layout, match, plan);
  if (st && layout && strstr(kdc_status_message(st), "not divisible")) { /* e.g. 4 heads on 8 */
    fprintf(stderr, "skip %s on %s (layout): %s\n", e->dir, mesh, kdc_status_message(st));
    n_skip++;
    kdc_status_free(st);
    free(plan), free(model), free(w);
    return;
  }
  if (st) fprintf(stderr, "%s on %s (%s): %s\n", e->dir, mesh, layout ? "layout" : "dp",
                  kdc_status_message(st));
  assert_null(st);
  kdc_rt_plan *p = NULL;
  assert_null(kdc_rt_plan_load(plan, &p));
  int64_t rows = in[0].dims[0];
  void *got[4];
  run_rows(p, e->n_in, in, e->n_out, rows, BATCH, got);
  for (int o = 0; o < e->n_out; o++) {
    size_t n = (size_t)kdc_type_numel(&ref[o].type);
    double err = e2e_f32_compare(got[o], ref[o].data, n, 1e-6, 1e-5);
    double kerr = e2e_f32_compare(got[o], want[o].data, n, 1e-5, 1e-4);
    if (err > 1 || kerr > 1)
      fprintf(stderr, "%s on %s (%s) output %d: %.3g x tol vs interpreter, %.3g x vs Keras\n",
              e->dir, mesh, layout ? "layout" : "dp", o, err, kerr);
    assert_true(err <= 1);
    assert_true(kerr <= 1);
    free(got[o]);
  }
  collectives c;
  count_collectives(p, 0, &c);
  if (!layout) assert_int_equal(c.n, 0); /* DataParallel predict: no communication */
  if (layout && strcmp(e->dir, "transformer_block") == 0 && model_axis_size(mesh) > 1) {
    /* heads on model: one all_reduce after the attention output projection,
     * one after ffn2, each of the [B/data, 16, 32] activation over model */
    int64_t data = kdc_rt_plan_mesh(p)->sizes[0];
    if (c.n != 2 || c.n_all_reduce != 2)
      fprintf(stderr, "transformer_block on %s: %d collectives, %d all_reduce\n", mesh, c.n,
              c.n_all_reduce);
    assert_int_equal(c.n, 2);
    assert_int_equal(c.n_all_reduce, 2);
    for (int i = 0; i < 2; i++) {
      assert_int_equal(c.ar_numel[i], BATCH / data * 16 * 32);
      assert_int_equal(c.ar_axes[i], 2u); /* axis 1 = model */
    }
  }
  kdc_rt_plan_release(p);
  n_pass++;
  free(plan), free(model), free(w);
}

static void check_example(const example *e) {
  kdc_npy_array in[4], want[4];
  kdc_tensor ref[4];
  for (int i = 0; i < e->n_in; i++) {
    char *p = ex_file(e->dir, e->n_in == 1 ? "input.npy" : "input%d.npy", i);
    assert_null(kdc_npy_read(p, &in[i]));
    free(p);
  }
  for (int o = 0; o < e->n_out; o++) {
    char *p = ex_file(e->dir, e->n_out == 1 ? "expected.npy" : "expected%d.npy", o);
    assert_null(kdc_npy_read(p, &want[o]));
    free(p);
  }
  interpret(e, in, in[0].dims[0], ref);
  char *fixed = e->layout ? slurp(e->layout) : NULL;
  bool sampled = kdc_test_sampled();
  const char *const *ms = sampled ? sampled_meshes : meshes;
  size_t nm = sampled ? sizeof sampled_meshes / sizeof *sampled_meshes
                      : sizeof meshes / sizeof *meshes;
  for (size_t m = 0; m < nm; m++) {
    check_case(e, ms[m], NULL, NULL, in, ref, want);
    int64_t model = model_axis_size(ms[m]);
    if (!model) continue; /* layouts name "model": multi-axis meshes */
    char *gen = fixed ? NULL : column_layout(e, model);
    if (fixed || gen) check_case(e, ms[m], fixed ? fixed : gen, e->match, in, ref, want);
    free(gen);
  }
  free(fixed);
  for (int i = 0; i < e->n_in; i++) kdc_npy_free(&in[i]);
  for (int o = 0; o < e->n_out; o++) kdc_npy_free(&want[o]), free(ref[o].data);
}

static void test_examples_on_meshes(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof examples / sizeof examples[0]; i++) check_example(&examples[i]);
  fprintf(stderr, "mesh matrix: %d cases, %d pass, %d skipped (indivisible layout)\n", n_cases,
          n_pass, n_skip);
}

/* Megatron MLP (16 -> 64 relu -> 16): up/kernel split by columns, down/kernel
 * by rows on model; on 2x4 at batch 32 predict has exactly one all_reduce
 * over model of the [32/2, 16] activation, 2(m-1)/m * S = 1536 B per device. */
static const char megatron_json[] =
    "{\"module\": \"keras.src.models.functional\", \"class_name\": \"Functional\", \"config\": "
    "{\"name\": \"megatron\", \"layers\": ["
    "{\"module\": \"keras.layers\", \"class_name\": \"InputLayer\", \"config\": {\"batch_shape\": "
    "[null, 16], \"dtype\": \"float32\", \"name\": \"x\"}, \"name\": \"x\", \"inbound_nodes\": []},"
    "{\"module\": \"keras.layers\", \"class_name\": \"Dense\", \"config\": {\"name\": \"up\", "
    "\"units\": 64, \"activation\": \"relu\", \"use_bias\": true}, \"name\": \"up\", "
    "\"inbound_nodes\": [{\"args\": [{\"class_name\": \"__keras_tensor__\", \"config\": {\"shape\": "
    "[null, 16], \"dtype\": \"float32\", \"keras_history\": [\"x\", 0, 0]}}], \"kwargs\": {}}]},"
    "{\"module\": \"keras.layers\", \"class_name\": \"Dense\", \"config\": {\"name\": \"down\", "
    "\"units\": 16, \"activation\": \"linear\", \"use_bias\": true}, \"name\": \"down\", "
    "\"inbound_nodes\": [{\"args\": [{\"class_name\": \"__keras_tensor__\", \"config\": {\"shape\": "
    "[null, 64], \"dtype\": \"float32\", \"keras_history\": [\"up\", 0, 0]}}], \"kwargs\": {}}]}],"
    "\"input_layers\": [[\"x\", 0, 0]], \"output_layers\": [[\"down\", 0, 0]]}}";

static const char megatron_layout[] =
    "{\"batch_dim_name\": \"data\", \"layout_map\": {\"up/kernel\": [null, \"model\"], "
    "\"up/bias\": [\"model\"], \"down/kernel\": [\"model\", null]}}";

static void test_megatron_mlp_one_all_reduce(void **state) {
  (void)state;
  char *model = e2e_path("megatron.json"), *plan = e2e_path("megatron.plan");
  FILE *f = fopen(model, "w");
  assert_non_null(f);
  fputs(megatron_json, f);
  fclose(f);
  kdc_status st = compile_plan(model, NULL, 32, "2x4", megatron_layout, NULL, plan);
  if (st) fprintf(stderr, "megatron: %s\n", kdc_status_message(st));
  assert_null(st);
  kdc_rt_plan *p = NULL;
  kdc_rt_options ro = {.describe_only = 1}; /* counting steps needs no code */
  assert_null(kdc_rt_plan_load_with(plan, &ro, &p));
  collectives c;
  count_collectives(p, 0, &c);
  assert_int_equal(c.n, 1);
  assert_int_equal(c.n_all_reduce, 1);
  assert_int_equal(c.ar_numel[0], 16 * 16);
  assert_int_equal(c.ar_axes[0], 2u);                 /* over model */
  assert_true(c.bytes == 2.0 * 3 / 4 * 16 * 16 * 4); /* 1536 B */
  kdc_rt_plan_release(p);
  free(model), free(plan);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_examples_on_meshes),
      cmocka_unit_test(test_megatron_mlp_one_all_reduce),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
