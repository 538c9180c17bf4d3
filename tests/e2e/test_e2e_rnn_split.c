/*
 * Recurrent layers split by units over `model` (docs/sharding.md,
 * "Recurrent layers"): the LayoutMap {".*_cell/(recurrent_)?kernel":
 * (None, "model"), ".*_cell/bias": ("model",)} on examples/lstm_text (LSTM
 * 12 -> 16 units and LSTM 8), gru_rnn (GRU reset_after=false 10 -> 8 and
 * SimpleRNN 7 -> 8; again with reset_after=true) and bidir_rnn
 * (Bidirectional LSTM 7 -> 8 and GRU 5 -> 8),
 * units changed so that every layer divides 8, weights from the Keras
 * initialisers (seed 3), batch 8, on meshes 1x8, 2x4 and 1x2:
 *   - predictions through the binary equal one device (relative 1e-5), and
 *     the plan stores every recurrent weight per gate, 1/model of it per
 *     device (gate_packed);
 *   - the plan's loop bodies hold exactly the expected collectives: one
 *     all_gather of h over `model` per step (two in a reset_after=false
 *     GRU: h and r*h, each an operand of a matmul with U);
 *   - the SPMD interpreter on the partitioned predict equals the
 *     reference interpreter on the unpartitioned one (relative 1e-5);
 *   - two epochs of Adam fit (sparse categorical cross-entropy, 32 rows in
 *     steps of 16) on 2x4 equal one device: batch and epoch losses and the
 *     final weights and slots (relative 1e-5, e2e_same_run); lstm_text's
 *     backward loops (residual scan, scan A) gather h once per step and
 *     scan A reduce_scatters h's cotangent, nothing else, and there is no
 *     scan B (U only a matmul operand: its gradient is one dot after the
 *     loop, passes/grad_scan.c; SimpleRNN's too); gru_rnn's GRU
 *     (reset_after=false, U sliced per gate) scan B gathers h, r*h and
 *     d[z, r], reduce_scatters d(r*h) and moves the two dU pieces to the
 *     units split (all_to_all), nothing else;
 *   - that 2x4 run's checkpoint holds Keras' packed shapes, loads bitwise on
 *     one device and on 1x8 (whose recurrent state is 1/8 per device), saves
 *     back unchanged from one device, and one more epoch from it on 1x8
 *     equals one device (relative 1e-5);
 * lstm_text with its own weights on 1x2 and 1x4 (batch 37, the TF.js
 * reference's) equals examples/lstm_text/expected.npy; and a layout whose
 * per-gate split does not divide the units (bidir_rnn's 7 over 4) is the
 * frontend's located error, exit status 2, no plan written.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <math.h>
#include <string.h>

#include <cmocka.h>

#include "e2e_fit_util.h"
#include "e2e_util.h"
#include "frontend/frontend.h"
#include "frontend/layout.h"
#include "ir/ir.h"
#include "passes/passes.h"
#include "runtime/runtime.h"
#include "tests/sharding/sh_test.h"

enum { BATCH = 8, MAX_BODIES = 4, N = 32 /* training rows */ };

static const char *LAYOUT =
    "{\"batch_dim_name\": \"data\", \"layout_map\": {"
    "\".*_cell/(recurrent_)?kernel\": [null, \"model\"], \".*_cell/bias\": [\"model\"]}}";
/* A reset_after GRU's bias is [2, 3u]: its packed dim is the second */
static const char *LAYOUT_RESET_AFTER =
    "{\"batch_dim_name\": \"data\", \"layout_map\": {"
    "\".*_cell/(recurrent_)?kernel\": [null, \"model\"], \".*_cell/bias\": [\"model\"], "
    "\"gru/gru_cell/bias\": [null, \"model\"]}}";

typedef struct example {
  const char *dir;
  int T, vocab, feat;                /* ids in [0, vocab) over T steps, or floats [T, feat] */
  const char *units[4][2];           /* "\"units\": a" -> "\"units\": b" */
  bool reset_after;                  /* GRUs "reset_after": false -> true */
  const char *bodies[MAX_BODIES];    /* loop bodies and their all_gathers over model */
  int gathers[MAX_BODIES];
} example;

static const example EXAMPLES[] = {
    {"lstm_text", 10, 50, 0, {{"12", "16"}}, false, {"lstm.step", "lstm_1.step"}, {1, 1}},
    {"gru_rnn", 8, 0, 6, {{"10", "8"}, {"7", "8"}}, false, {"gru.step", "simple_rnn.step"},
     {2, 1}},
    {"bidir_rnn", 9, 40, 0, {{"7", "8"}, {"5", "8"}}, false,
     {"forward_lstm.step", "backward_lstm.step", "forward_gru.step", "backward_gru.step"},
     {1, 1, 2, 2}},
    /* a reset_after GRU: h @ U once per step for all gates, bias [2, 3u] */
    {"gru_rnn", 8, 0, 6, {{"10", "8"}, {"7", "8"}}, true, {"gru.step", "simple_rnn.step"},
     {1, 1}},
};
static const char *MESHES[] = {"1x8", "2x4", "1x2"};


/* Replaces every |from| in the malloc'd string *|s| by |to|; at least once. */
static void replace_all(char **s, const char *from, const char *to) {
  int hits = 0;
  for (char *p = strstr(*s, from); p; p = strstr(p + 1, from), hits++) {
    size_t lf = strlen(from), lt = strlen(to), n = strlen(*s);
    char *t = malloc(n + lt + 1);
    memcpy(t, *s, (size_t)(p - *s));
    memcpy(t + (p - *s), to, lt);
    memcpy(t + (p - *s) + lt, p + lf, n - (size_t)(p - *s) - lf + 1);
    p = t + (p - *s);
    free(*s);
    *s = t;
  }
  assert_true(hits >= 1);
}

/* The example's model.json with its recurrent units (and reset_after)
 * changed (malloc'd path). */
static char *model_of(const example *ex) {
  char rel[128];
  snprintf(rel, sizeof rel, "examples/%s/model.json", ex->dir);
  char *src = e2e_src(rel), *s;
  size_t size;
  assert_null(kdc_file_read_all(src, (void **)&s, &size)); /* NUL-terminated */
  for (int k = 0; k < 4 && ex->units[k][0]; k++) {
    char from[32], to[32];
    snprintf(from, sizeof from, "\"units\": %s,", ex->units[k][0]);
    snprintf(to, sizeof to, "\"units\": %s,", ex->units[k][1]);
    replace_all(&s, from, to);
  }
  if (ex->reset_after) replace_all(&s, "\"reset_after\": false", "\"reset_after\": true");
  snprintf(rel, sizeof rel, "%s_units.json", ex->dir);
  char *out = e2e_write_text(rel, s);
  free(s), free(src);
  return out;
}

/* Deterministic inputs of |rows| rows: ids as floats, or floats in [-1, 1). */
static float *inputs(const example *ex, int rows, int64_t *n) {
  *n = (int64_t)rows * ex->T * (ex->vocab ? 1 : ex->feat);
  float *x = malloc((size_t)*n * sizeof *x);
  uint64_t s = 99;
  for (int64_t i = 0; i < *n; i++) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    double u = (double)(s >> 11) / 9007199254740992.0;
    x[i] = ex->vocab ? (float)(int64_t)(u * ex->vocab) : (float)(2 * u - 1);
  }
  return x;
}

static char *input_file(const example *ex, int rows, const char *name) {
  int64_t n;
  float *x = inputs(ex, rows, &n);
  char *p = e2e_path(name);
  int64_t dims[3] = {rows, ex->T, ex->feat};
  assert_null(kdc_npy_write(p, KDC_IO_DTYPE_F32, ex->vocab ? 2 : 3, dims, x));
  free(x);
  return p;
}

/* The N training rows of |ex| (malloc'd) and their labels |y|: i mod 3. */
static float *fit_rows(const example *ex, float *y) {
  int64_t n;
  for (int i = 0; i < N; i++) y[i] = (float)(i % 3);
  return inputs(ex, N, &n);
}

/* kdc compile |model| (initialisers, seed 3) [--mesh |mesh| --layout |layout|]. */
static char *compile(const char *name, const char *model, const char *weights, const char *batch,
                     const char *mesh, const char *layout, const char *loss) {
  char *plan = e2e_path(name);
  const char *argv[24];
  int n = 0;
  argv[n++] = "compile", argv[n++] = model, argv[n++] = "--batch", argv[n++] = batch;
  if (weights) argv[n++] = "--weights", argv[n++] = weights;
  else argv[n++] = "--seed", argv[n++] = "3";
  if (mesh) argv[n++] = "--mesh", argv[n++] = mesh, argv[n++] = "--layout", argv[n++] = layout;
  if (loss) argv[n++] = "--loss", argv[n++] = loss, argv[n++] = "--optimizer", argv[n++] = "adam";
  argv[n++] = "-o", argv[n++] = plan;
  argv[n] = NULL;
  e2e_result *r = malloc(sizeof *r);
  e2e_kdcv(r, argv);
  if (r->status) fail_msg("compile %s on %s: %s", model, mesh ? mesh : "1", r->err);
  free(r);
  return plan;
}

static kdc_npy_array run(const char *plan, const char *x, const char *name) {
  char *out = e2e_path(name);
  e2e_result *r = malloc(sizeof *r);
  e2e_kdc(r, "run", plan, "--input", x, "--output", out, NULL);
  if (r->status) fail_msg("run %s: %s", plan, r->err);
  kdc_npy_array a;
  assert_null(kdc_npy_read(out, &a));
  free(r), free(out);
  return a;
}

/* Is |name| a gate-packed recurrent weight or one of its slots? */
static bool recurrent(const char *name) {
  return strstr(name, "_cell") && !strstr(name, "iteration") &&
         (strstr(name, "kernel") || strstr(name, "bias"));
}

/* The plan's recurrent weights are stored per gate, |model| pieces of
 * them (each device its units of every gate): their per-device bytes. */
static void check_weight_pieces(const char *plan, int model) {
  kdc_rt_plan *p = NULL;
  kdc_rt_options ro = {.describe_only = 1};
  assert_null(kdc_rt_plan_load_with(plan, &ro, &p));
  int n = 0;
  for (uint32_t i = 0; i < p->prog.n_weights; i++) {
    const kdc_prog_tensor *w = &p->prog.weights[i];
    if (!recurrent(w->name)) continue;
    n++;
    if (!w->gate_packed || w->local_bytes * (uint64_t)model != w->bytes)
      fail_msg("%s: weight %s (gate_packed %d) holds %llu of %llu bytes per device", plan,
               w->name, w->gate_packed, (unsigned long long)w->local_bytes,
               (unsigned long long)w->bytes);
  }
  assert_true(n >= 3);
  kdc_rt_plan_release(p);
}

/* The layout of |ex| as text. */
static const char *layout_of(const example *ex) {
  return ex->reset_after ? LAYOUT_RESET_AFTER : LAYOUT;
}

/* Predictions and loop-body collectives of every example on every mesh. */
static void test_predict_meshes(void **state) {
  (void)state;
  for (size_t e = 0; e < sizeof EXAMPLES / sizeof *EXAMPLES; e++) {
    const example *ex = &EXAMPLES[e];
    char *layout = e2e_write_text("layout.json", layout_of(ex));
    char *model = model_of(ex), *x = input_file(ex, BATCH, "x.npy");
    char *p1 = compile("one.plan", model, NULL, "8", NULL, NULL, NULL);
    kdc_npy_array want = run(p1, x, "one.npy");
    for (size_t m = 0; m < sizeof MESHES / sizeof *MESHES; m++) {
      char *pm = compile("mesh.plan", model, NULL, "8", MESHES[m], layout, NULL);
      check_weight_pieces(pm, MESHES[m][2] - '0');
      kdc_npy_array got = run(pm, x, "mesh.npy");
      double err = e2e_npy_compare(&got, &want, 1e-6, 1e-5);
      if (err > 1) fail_msg("%s on %s: predictions differ from 1 device (%g)", ex->dir, MESHES[m], err);
      for (int b = 0; b < MAX_BODIES && ex->bodies[b]; b++) {
        int g = e2e_count_colls(pm, ex->bodies[b], KDC_COLL_ALL_GATHER, "model", false);
        int all = e2e_count_colls(pm, ex->bodies[b], -1, NULL, false) +
                  e2e_count_colls(pm, ex->bodies[b], -1, NULL, true);
        if (g != ex->gathers[b] || all != g)
          fail_msg("%s on %s: body %s has %d all_gathers over model and %d collectives, want %d",
                   ex->dir, MESHES[m], ex->bodies[b], g, all, ex->gathers[b]);
      }
      kdc_npy_free(&got);
      free(pm);
    }
    kdc_npy_free(&want);
    free(p1), free(model), free(x), free(layout);
  }
}

static kdc_module *lower(const char *model, const kdc_mesh *mesh, const kdc_layout *lay) {
  kdc_keras_model *km = NULL;
  kdc_module *mod = NULL;
  assert_null(kdc_frontend_load(model, &km));
  kdc_lower_options lo = {.batch = BATCH, .mesh = mesh, .layout = lay};
  kdc_status st = kdc_frontend_lower(km, &lo, &mod);
  if (st) fail_msg("%s", kdc_status_message(st));
  assert_null(kdc_frontend_init_weights(km, mod, 3));
  kdc_frontend_free(km);
  return mod;
}

/* The SPMD interpreter on the partitioned predict vs the reference
 * interpreter on the unpartitioned one. */
static void test_spmd_interpreter(void **state) {
  (void)state;
  const char *meshes[] = {"data=1,model=8", "data=2,model=4", "data=1,model=2"};
  for (size_t e = 0; e < sizeof EXAMPLES / sizeof *EXAMPLES; e++) {
    const example *ex = &EXAMPLES[e];
    kdc_layout *lay = NULL;
    const char *text = layout_of(ex);
    assert_null(kdc_layout_parse(text, strlen(text), "layout.json", &lay));
    char *model = model_of(ex);
    kdc_module *ref = lower(model, NULL, NULL);
    kdc_func *rf = kdc_ir_module_find_func(ref, "predict");
    int64_t n;
    float *x = inputs(ex, BATCH, &n);
    kdc_tensor *args = calloc(rf->n_params, sizeof *args);
    for (size_t i = 0; i < rf->n_params; i++) {
      const kdc_node *nd = kdc_ir_node(rf, rf->params[i]);
      args[i].type = nd->type;
      if (nd->attr.param.kind == KDC_PARAM_INPUT) {
        assert_int_equal(kdc_type_numel(&nd->type), n);
        args[i].data = malloc((size_t)n * sizeof *x);
        memcpy(args[i].data, x, (size_t)n * sizeof *x);
      } else {
        const kdc_weight *w = kdc_ir_module_find_weight(ref, nd->attr.param.name);
        assert_non_null(w);
        size_t bytes = kdc_type_bytes(&w->type);
        args[i].data = malloc(bytes);
        memcpy(args[i].data, w->data, bytes);
      }
    }
    kdc_tensor want[1];
    assert_int_equal(rf->n_results, 1);
    assert_null(kdc_ir_interpret(rf, args, rf->n_params, want));
    for (size_t m = 0; m < sizeof meshes / sizeof *meshes; m++) {
      kdc_mesh mesh = sh_mesh(meshes[m]);
      kdc_module *mod = lower(model, &mesh, lay);
      const char *passes[] = {"verify", "infer_shapes", "seed_shardings", "propagate_shardings",
                              "partition"};
      for (size_t k = 0; k < sizeof passes / sizeof *passes; k++) {
        kdc_status st = kdc_pass_run_one(mod, passes[k], NULL);
        if (st) fail_msg("%s on %s: %s: %s", ex->dir, meshes[m], passes[k], kdc_status_message(st));
      }
      assert_string_equal(mod->funcs[0]->name, "predict");
      /* the split recurrent weights are kept per gate: the same bytes as
       * the reference's packed ones, typed [.., G, u] */
      for (size_t i = 0; i < rf->n_params; i++) {
        const char *name = kdc_ir_node(rf, rf->params[i])->attr.param.name;
        const kdc_weight *w = kdc_ir_module_find_weight(mod, name);
        if (!w) continue;
        assert_int_equal(kdc_type_numel(&w->type), kdc_type_numel(&args[i].type));
        args[i].type = w->type;
      }
      sh_spmd_check(mod, args, rf->n_params, want, ex->dir);
      kdc_ir_module_destroy(mod);
    }
    free(want[0].data);
    sh_free_tensors(args, rf->n_params);
    kdc_ir_module_destroy(ref);
    kdc_layout_free(lay);
    free(model), free(x);
  }
}

/* The training state of |plan| (fresh, or loaded from |init|), its per
 * device bytes checked: on 2x4 every recurrent weight and slot is kept per
 * gate, 1/4 of it per device (units split over model), the rest as
 * before; on one device nothing is kept per gate. */
static void state_of(const char *plan, const char *init, int model_split, e2e_run *r) {
  kdc_rt_plan *p = e2e_plan_load(plan);
  kdc_rt_train *t = NULL;
  assert_null(kdc_rt_train_create(p, &t));
  if (init) assert_null(kdc_rt_train_load(t, init));
  memset(r, 0, sizeof *r);
  e2e_run_collect(t, r);
  int split = 0;
  for (size_t k = 0; k < r->n_state; k++) {
    const kdc_rt_tensor_info *i = kdc_rt_train_state(t, k);
    bool rec = recurrent(i->name) && model_split > 1;
    if (kdc_rt_train_state_gate_packed(t, k) != rec)
      fail_msg("%s: state %s gate_packed %d", plan, i->name, !rec);
    if (rec && i->local_bytes * (uint64_t)model_split != i->bytes)
      fail_msg("%s: state %s holds %llu of %llu bytes per device", plan, i->name,
               (unsigned long long)i->local_bytes, (unsigned long long)i->bytes);
    split += rec;
  }
  if (model_split > 1) assert_true(split >= 9);  /* 3 weights and 2 Adam slots, or more */
  kdc_rt_train_destroy(t);
  kdc_rt_plan_release(p);
}

/* |ck|, saved on 2x4 (|p24|, two Adam epochs with the units split; its
 * final state |trained|), holds Keras' packed shapes (those of the
 * one-device plan |p1|); it loads bitwise on one device and on 1x8, saves
 * back unchanged from one device, and one more epoch from it on 1x8 equals
 * one device (relative 1e-5). */
static void check_checkpoint(const example *ex, const char *model, const char *layout,
                             const char *p1, const char *ck, const e2e_run *trained,
                             const void *const *arrays) {
  char *p18 = compile("fit18.plan", model, NULL, "16", "1x8", layout,
                      "sparse_categorical_crossentropy");
  char *ck1 = e2e_path("ck1.safetensors");
  kdc_safetensors *sf = NULL;
  assert_null(kdc_safetensors_open(ck, &sf));
  kdc_rt_plan *one = e2e_plan_load(p1);
  kdc_rt_train *t1 = NULL;
  assert_null(kdc_rt_train_create(one, &t1));
  for (size_t k = 0; k < kdc_rt_train_state_count(t1); k++) {
    const kdc_rt_tensor_info *i = kdc_rt_train_state(t1, k);
    const kdc_st_tensor *f = kdc_safetensors_find(sf, i->name);
    assert_non_null(f);
    assert_int_equal(f->rank, i->rank);
    for (int d = 0; d < i->rank; d++) assert_int_equal(f->dims[d], i->dims[d]);
  }
  kdc_rt_train_destroy(t1);
  kdc_rt_plan_release(one);
  kdc_safetensors_close(sf);
  e2e_run s1, s18, again, more1, more18;
  state_of(p1, ck, 1, &s1);
  state_of(p18, ck, 8, &s18);
  assert_int_equal(s1.n_state, trained->n_state);
  assert_int_equal(s18.n_state, trained->n_state);
  for (size_t k = 0; k < trained->n_state; k++) {
    assert_string_equal(s1.names[k], trained->names[k]);
    assert_string_equal(s18.names[k], trained->names[k]);
    assert_memory_equal(s1.state[k], trained->state[k], trained->bytes[k]);
    assert_memory_equal(s18.state[k], trained->state[k], trained->bytes[k]);
  }
  /* saved back from one device: the same tensors */
  e2e_fit(p1, arrays, N, 0, 16, 0, ck, ck1, &again);
  kdc_safetensors *a = NULL, *b = NULL;
  assert_null(kdc_safetensors_open(ck, &a));
  assert_null(kdc_safetensors_open(ck1, &b));
  for (size_t k = 0; k < trained->n_state; k++) {
    const kdc_st_tensor *ta = kdc_safetensors_find(a, trained->names[k]);
    const kdc_st_tensor *tb = kdc_safetensors_find(b, trained->names[k]);
    assert_non_null(ta), assert_non_null(tb);
    assert_int_equal(ta->rank, tb->rank);
    assert_memory_equal(ta->dims, tb->dims, sizeof ta->dims);
    assert_int_equal(ta->nbytes, tb->nbytes);
    assert_memory_equal(ta->data, tb->data, ta->nbytes);
  }
  kdc_safetensors_close(a), kdc_safetensors_close(b);
  e2e_fit(p1, arrays, N, 0, 16, 1, ck, NULL, &more1);
  e2e_fit(p18, arrays, N, 0, 16, 1, ck, NULL, &more18);
  e2e_same_run(&more18, &more1, 0, 1e-5, ex->dir);
  e2e_run_free(&s1), e2e_run_free(&s18), e2e_run_free(&again);
  e2e_run_free(&more1), e2e_run_free(&more18);
  free(p18), free(ck1);
}

/* Does |plan| hold a function named |name|? */
static bool has_func(const char *plan, const char *name) {
  kdc_rt_plan *p = NULL;
  kdc_rt_options ro = {.describe_only = 1};
  assert_null(kdc_rt_plan_load_with(plan, &ro, &p));
  bool has = kdc_rt_plan_find_func(p, name) >= 0;
  kdc_rt_plan_release(p);
  return has;
}

/* Two epochs of Adam on 2x4 with the units split equal one device, with
 * 1/4 of every recurrent weight and slot per device; the checkpoint of
 * the 2x4 run moves to other meshes (check_checkpoint). */
static void test_fit_split_units(void **state) {
  (void)state;
  for (size_t e = 0; e < sizeof EXAMPLES / sizeof *EXAMPLES; e++) {
    const example *ex = &EXAMPLES[e];
    char *layout = e2e_write_text("layout.json", layout_of(ex));
    char *model = model_of(ex);
    float y[N], *x = fit_rows(ex, y);
    const void *arrays[2] = {x, y};
    const char *loss = "sparse_categorical_crossentropy";
    char *p1 = compile("fit1.plan", model, NULL, "16", NULL, NULL, loss);
    char *p2 = compile("fit2.plan", model, NULL, "16", "2x4", layout, loss);
    if (e == 0) /* the LSTMs' backward loops split by units too (LSTM bodies) */
      for (int b = 0; b < 2; b++) {
        /* the forward scan and the residual scan are one loop ("m",
         * passes/merge_scans.c) */
        const char *kinds[2] = {"m", "vjp"};
        char name[64];
        snprintf(name, sizeof name, "%s2.res", ex->bodies[b]);
        if (has_func(p2, name)) fail_msg("%s: %s exists", ex->dir, name);
        /* U is only a matmul operand: its gradient is one dot after scan A */
        snprintf(name, sizeof name, "%s2.wgrad", ex->bodies[b]);
        if (has_func(p2, name)) fail_msg("%s: %s exists", ex->dir, name);
        for (int k = 0; k < 2; k++) {
          snprintf(name, sizeof name, "%s2.%s", ex->bodies[b], kinds[k]);
          int g = e2e_count_colls(p2, name, KDC_COLL_ALL_GATHER, "model", false);
          int rs = e2e_count_colls(p2, name, KDC_COLL_REDUCE_SCATTER, "model", false);
          int all = e2e_count_colls(p2, name, -1, NULL, false) +
                    e2e_count_colls(p2, name, -1, NULL, true);
          /* h gathered once per step; scan A also reduce_scatters h's cotangent */
          if (g != 1 || rs != (k == 1) || all != g + rs)
            fail_msg("%s: body %s has %d all_gathers, %d reduce_scatters, %d collectives",
                     ex->dir, name, g, rs, all);
        }
      }
    if (e == 1) { /* the GRU (reset_after=false) and SimpleRNN backward loops */
      static const struct { const char *body; int gathers, scatters, others; } W[] = {
          /* scan B: h and r*h gathered (the forward's); d(r*h) = dhh @ U_h^T
           * (needed for dr) reduce_scattered.  Since the cotangents of the
           * gate slices sum into one concatenate (passes/autodiff.c,
           * merge_pads), propagation also gathers d[z, r] for the dU_zr dot
           * and moves both dU pieces to the units split with an all_to_all
           * each (before: h, r*h and the reduce_scatter only) */
          {"gru.step2.wgrad", 4, 1, 2}, {"gru.step2.vjp", 2, 2, 0}, {"gru.step2.m", 2, 0, 0},
          {"simple_rnn.step2.vjp", 1, 1, 0}};
      /* SimpleRNN's U is only a matmul operand: its gradient is one dot */
      if (has_func(p2, "simple_rnn.step2.wgrad")) fail_msg("simple_rnn.step2.wgrad exists");
      for (size_t k = 0; k < sizeof W / sizeof *W; k++) {
        int g = e2e_count_colls(p2, W[k].body, KDC_COLL_ALL_GATHER, "model", false);
        int rs = e2e_count_colls(p2, W[k].body, KDC_COLL_REDUCE_SCATTER, "model", false);
        int all = e2e_count_colls(p2, W[k].body, -1, NULL, false) +
                  e2e_count_colls(p2, W[k].body, -1, NULL, true);
        if (g != W[k].gathers || rs != W[k].scatters || all != g + rs + W[k].others)
          fail_msg("%s: body %s has %d all_gathers, %d reduce_scatters, %d collectives", ex->dir,
                   W[k].body, g, rs, all);
      }
    }
    e2e_run want, got, fresh;
    state_of(p2, NULL, 4, &fresh);
    e2e_run_free(&fresh);
    char *ck = e2e_path("ck.safetensors");
    e2e_fit(p1, arrays, N, 0, 16, 2, NULL, NULL, &want);
    e2e_fit(p2, arrays, N, 0, 16, 2, NULL, ck, &got);
    e2e_same_run(&got, &want, 0, 1e-5, ex->dir);
    check_checkpoint(ex, model, layout, p1, ck, &got, arrays);
    e2e_run_free(&want), e2e_run_free(&got);
    free(p1), free(p2), free(ck), free(model), free(x), free(layout);
  }
}

/* lstm_text with its own weights, split by units, against its TF.js
 * reference (meshes without a data split: the reference batch is 37). */
static void test_lstm_text_reference(void **state) {
  (void)state;
  char *layout = e2e_write_text("layout.json", LAYOUT);
  char *model = e2e_src("examples/lstm_text/model.json");
  char *w = e2e_src("examples/lstm_text/weights.safetensors");
  char *x = e2e_src("examples/lstm_text/input.npy");
  char *ref = e2e_src("examples/lstm_text/expected.npy");
  kdc_npy_array want;
  assert_null(kdc_npy_read(ref, &want));
  const char *meshes[] = {"1x2", "1x4"};
  for (int m = 0; m < 2; m++) {
    char *p = compile("ref.plan", model, w, "37", meshes[m], layout, NULL);
    assert_int_equal(e2e_count_colls(p, "lstm.step", KDC_COLL_ALL_GATHER, "model", false), 1);
    kdc_npy_array got = run(p, x, "ref.npy");
    double err = e2e_npy_compare(&got, &want, 1e-5, 1e-4);
    if (err > 1) fail_msg("lstm_text on %s vs the TF.js reference: %g", meshes[m], err);
    kdc_npy_free(&got);
    free(p);
  }
  kdc_npy_free(&want);
  free(layout), free(model), free(w), free(x), free(ref);
}

/* bidir_rnn's 7 and 5 units do not divide 4 per gate (the packed 28 does). */
static void test_indivisible_units(void **state) {
  (void)state;
  const char *lay = "{\"batch_dim_name\": \"data\", \"layout_map\": "
                    "{\"bidirectional/.*_cell/(recurrent_)?kernel\": [null, \"model\"]}}";
  char *layout = e2e_write_text("layout7.json", lay);
  char *model = e2e_src("examples/bidir_rnn/model.json");
  char *w = e2e_src("examples/bidir_rnn/weights.safetensors");
  char *plan = e2e_path("bad.plan");
  e2e_result *r = malloc(sizeof *r);
  e2e_kdc(r, "compile", model, "--weights", w, "--batch", "8", "--mesh", "2x4", "--layout",
          layout, "-o", plan, NULL);
  assert_int_equal(r->status, 2);
  assert_int_equal(e2e_lines(r->err), 1);
  assert_non_null(strstr(r->err, "model.json: config.layers[2].config.layer"));
  assert_non_null(strstr(r->err, "\"bidirectional/forward_lstm/lstm_cell/kernel\""));
  assert_non_null(strstr(r->err, "7 units are not divisible by 4"));
  assert_false(e2e_exists(plan));
  free(r), free(layout), free(model), free(w), free(plan);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_predict_meshes),
      cmocka_unit_test(test_spmd_interpreter),
      cmocka_unit_test(test_fit_split_units),
      cmocka_unit_test(test_lstm_text_reference),
      cmocka_unit_test(test_indivisible_units),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
