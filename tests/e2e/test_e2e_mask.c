/*
 * Keras masks end to end (frontend/mask.c): Embedding(mask_zero) and
 * Masking masks through LSTM/GRU/SimpleRNN/Bidirectional scans,
 * GlobalAveragePooling1D, MultiHeadAttention and merges, and the masked loss.
 *
 * References: examples/masked_text (TF.js 4.22 with Keras 3 masked layers,
 * tests/reference/gen_masked.js; the classifier is also in test_e2e_mesh's
 * matrix) and hand computations in double over values the interpreter
 * returns:
 *   - tagger.json (Embedding mask_zero -> LSTM sequences -> Dense softmax per
 *     step) predicts tagger_expected.npy on meshes 1 and 2x4 (|d| <= 1e-5 +
 *     1e-4|ref|), also through a training plan (the mask results are gone);
 *   - its evaluate loss is Keras' masked sparse categorical crossentropy,
 *     sum over unmasked steps / their count, computed here from
 *     tagger_expected.npy (relative 1e-5; the unmasked mean differs);
 *   - it trains with equal epoch losses on 1 device and 2x4 (1e-5 relative);
 *   - GlobalAveragePooling1D after LSTM(return_sequences) is the masked mean
 *     of the LSTM's rows, and the plain mean for a file written by Keras
 *     3.16 (RNN mask propagation switched off there);
 *   - Add ORs two masks and Concatenate(axis=1) concatenates them (masked
 *     means of the merged steps);
 *   - MultiHeadAttention with return_attention_scores: a query row's
 *     weights on masked keys are exactly 0 and sum to 1, a masked query row
 *     is all 0 (the Softmax-layer path); without scores (dot_product_attention
 *     path) every masked query row of a sequence attends uniformly (equal
 *     outputs);
 *   - TimeDistributed folds the mask for the wrapped layer
 *     (GlobalAveragePooling1D's masked mean per step, a masked LSTM skips
 *     masked steps, Dense ignores it); Attention with the call's mask list
 *     and causal, AdditiveAttention with Masking masks, against Keras 3's
 *     _apply_scores in double; rank-4 MultiHeadAttention (attention_axes
 *     [2]) equals the rank-3 layer on its slices; BatchNormalization's
 *     masked moments in train_forward (with a padded row) by hand;
 *   - a model training through masked BatchNormalization, Attention and
 *     TimeDistributed has equal epoch losses on 1 device and 2x4.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "e2e_util.h"
#include "frontend/frontend.h"
#include "ir/ir.h"

enum { ROWS = 37, T = 12, C = 4 };

static char *ex(const char *f) {
  char rel[128];
  snprintf(rel, sizeof rel, "examples/masked_text/%s", f);
  return e2e_src(rel);
}

/* Labels as f32 [ROWS, T]: in [0, C) from a fixed LCG at real steps, the
 * least likely class of the reference prediction at padded ones (so that a
 * loss over padded steps shows). */
static char *write_labels(float *y) {
  char *in = ex("input0.npy"), *ref = ex("tagger_expected.npy");
  kdc_npy_array ids, pr;
  assert_null(kdc_npy_read(in, &ids));
  assert_null(kdc_npy_read(ref, &pr));
  const float *id = ids.data, *p = pr.data;
  uint64_t s = 99;
  for (int i = 0; i < ROWS * T; i++) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    int lo = 0;
    for (int k = 1; k < C; k++) lo = p[i * C + k] < p[i * C + lo] ? k : lo;
    y[i] = id[i] != 0 ? (float)((s >> 33) % C) : (float)lo;
  }
  kdc_npy_free(&ids), kdc_npy_free(&pr);
  free(in), free(ref);
  char *path = e2e_path("tag_y.npy");
  assert_null(kdc_npy_write(path, KDC_IO_DTYPE_F32, 2, (int64_t[]){ROWS, T}, y));
  return path;
}

static void run_predict(const char *plan, const char *in, const char *out, const char *ref) {
  e2e_result r;
  e2e_kdc(&r, "run", plan, "--input", in, "--output", out, NULL);
  if (r.status != 0) fail_msg("run %s: %s", plan, r.err);
  kdc_npy_array a, b;
  assert_null(kdc_npy_read(out, &a));
  assert_null(kdc_npy_read(ref, &b));
  double d = e2e_npy_compare(&a, &b, 1e-5, 1e-4);
  if (d > 1) fail_msg("%s: differs from %s (%.3g of tolerance)", plan, ref, d);
  kdc_npy_free(&a), kdc_npy_free(&b);
}

static void test_tagger_reference_meshes(void **state) {
  (void)state;
  char *model = ex("tagger.json"), *w = ex("tagger.safetensors"), *in = ex("input0.npy");
  char *ref = ex("tagger_expected.npy");
  const char *meshes[2] = {"1", "2x4"};
  for (int m = 0; m < 2; m++) {
    char name[32];
    snprintf(name, sizeof name, "tag_%d.plan", m);
    char *plan = e2e_path(name), *out = e2e_path("tag_out.npy");
    e2e_result r;
    e2e_kdc(&r, "compile", model, "--weights", w, "--batch", "16", "--mesh", meshes[m], "-o",
            plan, NULL);
    if (r.status != 0) fail_msg("compile on %s: %s", meshes[m], r.err);
    run_predict(plan, in, out, ref);
    free(plan), free(out);
  }
  free(model), free(w), free(in), free(ref);
}

/* Keras' sparse categorical crossentropy of probabilities at one step. */
static double scce(const float *p, int label) {
  double s = 0;
  for (int k = 0; k < C; k++) s += p[k];
  double q = p[label] / s;
  q = fmin(fmax(q, 1e-7), 1 - 1e-7);
  return -log(q);
}

static double loss_of(const char *out) {
  const char *p = strstr(out, "loss: ");
  if (!p) fail_msg("no loss in: %s", out);
  return strtod(p + 6, NULL);
}

static void test_tagger_masked_loss(void **state) {
  (void)state;
  char *model = ex("tagger.json"), *w = ex("tagger.safetensors"), *in = ex("input0.npy");
  char *ref = ex("tagger_expected.npy");
  float y[ROWS * T];
  char *yp = write_labels(y);
  kdc_npy_array ids, pr;
  assert_null(kdc_npy_read(in, &ids));
  assert_null(kdc_npy_read(ref, &pr));
  const float *id = ids.data, *p = pr.data;
  double sum = 0, all = 0;
  int n = 0;
  for (int i = 0; i < ROWS * T; i++) {
    double l = scce(p + (size_t)i * C, (int)y[i]);
    all += l;
    if (id[i] != 0) sum += l, n++;
  }
  double want = sum / n;
  all /= ROWS * T;
  if (fabs(want - all) < 1e-2) fail_msg("masked %.5f vs unmasked %.5f: no test", want, all);
  char *plan = e2e_path("tag_train.plan"), *out = e2e_path("tag_train_out.npy");
  e2e_result r;
  e2e_kdc(&r, "compile", model, "--weights", w, "--batch", "37", "--loss",
          "sparse_categorical_crossentropy", "-o", plan, NULL);
  if (r.status != 0) fail_msg("compile: %s", r.err);
  e2e_kdc(&r, "run", plan, "--evaluate", "--x", in, "--y", yp, NULL);
  if (r.status != 0) fail_msg("evaluate: %s", r.err);
  double got = loss_of(r.out);
  if (fabs(got - want) > 1e-5 * want)
    fail_msg("masked loss %.7f, Keras' formula gives %.7f (unmasked %.7f)", got, want, all);
  run_predict(plan, in, out, ref); /* predict of a training plan: one output */
  kdc_npy_free(&ids), kdc_npy_free(&pr);
  free(model), free(w), free(in), free(ref), free(yp), free(plan), free(out);
}

static void test_tagger_fit_meshes(void **state) {
  (void)state;
  char *model = ex("tagger.json"), *w = ex("tagger.safetensors"), *in = ex("input0.npy");
  float y[ROWS * T];
  char *yp = write_labels(y);
  e2e_fit_equal_1_vs_2x4("tagger", model, w, in, yp, 0);
  free(model), free(w), free(in), free(yp);
}

/* ---- hand checks through the interpreter ---------------------------------- */

/* A Keras 3 layer entry: class, name, config body (after "name"), inbound
 * node args (a list of keras tensors "src" or "src,src2"), kwargs. */
static size_t layer(char *b, size_t cap, const char *cls, const char *name, const char *cfg,
                    const char *srcs, const char *kwargs) {
  char args[512] = "";
  if (srcs) {
    char tmp[128];
    snprintf(tmp, sizeof tmp, "%s", srcs);
    size_t k = 0;
    bool list = strchr(tmp, ',') && strcmp(cls, "MultiHeadAttention");
    k += (size_t)snprintf(args + k, sizeof args - k, "[%s", list ? "[" : "");
    char *save = NULL;
    for (char *s = strtok_r(tmp, ",", &save); s; s = strtok_r(NULL, ",", &save))
      k += (size_t)snprintf(args + k, sizeof args - k, "%s{\"class_name\": \"__keras_tensor__\", "
                            "\"config\": {\"keras_history\": [\"%s\", 0, 0]}}",
                            s == tmp ? "" : ", ", s);
    snprintf(args + k, sizeof args - k, "%s]", list ? "]" : "");
  }
  return (size_t)snprintf(b, cap, "%s{\"class_name\": \"%s\", \"name\": \"%s\", \"config\": "
                          "{\"name\": \"%s\"%s%s}, \"inbound_nodes\": [%s%s%s%s%s]}",
                          "", cls, name, name, cfg[0] ? ", " : "", cfg,
                          srcs ? "{\"args\": " : "", srcs ? args : "", srcs ? ", \"kwargs\": " : "",
                          srcs ? (kwargs ? kwargs : "{}") : "", srcs ? "}" : "");
}

/* Loads |json|, lowers predict (or, with |sample_mask|, train_forward at
 * step 0 with that sample_mask) at batch |B|, random weights, interprets it
 * on the f32 inputs |x| (one per input); out gets the results. */
static void interp_fn(const char *json, int64_t B, const float *const *x,
                      const float *sample_mask, kdc_tensor *out, size_t *n_out) {
  kdc_keras_model *km = NULL;
  kdc_module *mod = NULL;
  kdc_status st = kdc_frontend_load_text("mask.json", json, strlen(json), &km);
  if (st) fail_msg("load: %s", kdc_status_message(st));
  kdc_lower_options lo = {.batch = B, .train_forward = sample_mask != NULL};
  st = kdc_frontend_lower(km, &lo, &mod);
  if (st) fail_msg("lower: %s", kdc_status_message(st));
  assert_null(kdc_frontend_init_weights(km, mod, 3));
  kdc_func *f = kdc_ir_module_find_func(mod, sample_mask ? "train_forward" : "predict");
  kdc_tensor args[32];
  int k = 0;
  int32_t step = 0;
  for (size_t i = 0; i < f->n_params; i++) {
    const kdc_node *nd = kdc_ir_node(f, f->params[i]);
    args[i].type = nd->type;
    args[i].data = NULL;
    if (nd->attr.param.kind == KDC_PARAM_INPUT) args[i].data = (void *)x[k++];
    if (nd->attr.param.kind == KDC_PARAM_STATE) args[i].data = &step;
    if (nd->attr.param.kind == KDC_PARAM_LABEL) args[i].data = (void *)sample_mask;
  }
  st = kdc_ir_interpret(f, args, f->n_params, out);
  if (st) fail_msg("interpret: %s", kdc_status_message(st));
  *n_out = f->n_results;
  kdc_ir_module_destroy(mod);
  kdc_frontend_free(km);
}

static void interp(const char *json, int64_t B, const float *const *x, kdc_tensor *out,
                   size_t *n_out) {
  interp_fn(json, B, x, NULL, out, n_out);
}

static char *model_json(const char *version, const char *layers, const char *ins,
                        const char *outs) {
  char *b = malloc(16384);
  snprintf(b, 16384, "{\"module\": \"keras.src.models.functional\", \"class_name\": "
           "\"Functional\", %s%s%s\"config\": {\"name\": \"m\", \"trainable\": true, "
           "\"layers\": [%s], \"input_layers\": %s, \"output_layers\": %s}}",
           version ? "\"keras_version\": \"" : "", version ? version : "", version ? "\", " : "",
           layers, ins, outs);
  return b;
}

static const char *const INPUT5 = "\"batch_shape\": [null, 5], \"dtype\": \"float32\"";
static const char *const EMB = "\"input_dim\": 9, \"output_dim\": 3, \"mask_zero\": true";
/* 3 rows of ids: lengths 5, 2 and 3 with a 0 inside */
static const float IDS[15] = {1, 2, 3, 4, 5, 6, 7, 0, 0, 0, 8, 0, 2, 0, 0};

static void check_masked_mean(const float *seq, const float *gap, int B, int Tn, int D,
                              const bool *m) {
  for (int b = 0; b < B; b++)
    for (int d = 0; d < D; d++) {
      double s = 0;
      int n = 0;
      for (int t = 0; t < Tn; t++)
        if (m[b * Tn + t]) s += seq[(b * Tn + t) * D + d], n++;
      double want = s / n, got = gap[b * D + d];
      if (fabs(got - want) > 1e-6 + 1e-5 * fabs(want))
        fail_msg("row %d feature %d: %.7g, masked mean %.7g", b, d, got, want);
    }
}

static void rnn_gap(const char *version, bool masked_mean) {
  char ls[8192];
  size_t k = 0;
  k += layer(ls + k, sizeof ls - k, "InputLayer", "ids", INPUT5, NULL, NULL);
  ls[k++] = ',';
  k += layer(ls + k, sizeof ls - k, "Embedding", "emb", EMB, "ids", NULL);
  ls[k++] = ',';
  k += layer(ls + k, sizeof ls - k, "LSTM", "lstm", "\"units\": 2, \"return_sequences\": true",
             "emb", NULL);
  ls[k++] = ',';
  layer(ls + k, sizeof ls - k, "GlobalAveragePooling1D", "gap", "", "lstm", NULL);
  char *j = model_json(version, ls, "[[\"ids\", 0, 0]]", "[[\"lstm\", 0, 0], [\"gap\", 0, 0]]");
  const float *x[1] = {IDS};
  kdc_tensor out[2];
  size_t n;
  interp(j, 3, x, out, &n);
  bool m[15];
  for (int i = 0; i < 15; i++) m[i] = masked_mean ? IDS[i] != 0 : true;
  check_masked_mean(out[0].data, out[1].data, 3, 5, 2, m);
  for (size_t i = 0; i < n; i++) free(out[i].data);
  free(j);
}

static void test_rnn_mask_version(void **state) {
  (void)state;
  rnn_gap(NULL, true);          /* Keras 3 up to 3.15: LSTM passes its mask on */
  rnn_gap("3.16.0", false);     /* Keras 3.16: RNN supports_masking = False */
}

static void test_merge_masks(void **state) {
  (void)state;
  static const float IDS2[15] = {0, 0, 3, 4, 5, 6, 7, 8, 0, 0, 0, 0, 0, 0, 1};
  char ls[8192];
  size_t k = 0;
  k += layer(ls + k, sizeof ls - k, "InputLayer", "a", INPUT5, NULL, NULL);
  ls[k++] = ',';
  k += layer(ls + k, sizeof ls - k, "InputLayer", "b", INPUT5, NULL, NULL);
  ls[k++] = ',';
  k += layer(ls + k, sizeof ls - k, "Embedding", "ea", EMB, "a", NULL);
  ls[k++] = ',';
  k += layer(ls + k, sizeof ls - k, "Embedding", "eb", EMB, "b", NULL);
  ls[k++] = ',';
  k += layer(ls + k, sizeof ls - k, "Add", "add", "", "ea,eb", NULL);
  ls[k++] = ',';
  k += layer(ls + k, sizeof ls - k, "GlobalAveragePooling1D", "gap_add", "", "add", NULL);
  ls[k++] = ',';
  k += layer(ls + k, sizeof ls - k, "Concatenate", "cat", "\"axis\": 1", "ea,eb", NULL);
  ls[k++] = ',';
  layer(ls + k, sizeof ls - k, "GlobalAveragePooling1D", "gap_cat", "", "cat", NULL);
  char *j = model_json(NULL, ls, "[[\"a\", 0, 0], [\"b\", 0, 0]]",
                       "[[\"add\", 0, 0], [\"gap_add\", 0, 0], [\"cat\", 0, 0], "
                       "[\"gap_cat\", 0, 0]]");
  const float *x[2] = {IDS, IDS2};
  kdc_tensor out[4];
  size_t n;
  interp(j, 3, x, out, &n);
  bool m_or[15], m_cat[30];
  for (int i = 0; i < 15; i++) m_or[i] = IDS[i] != 0 || IDS2[i] != 0;
  for (int b = 0; b < 3; b++)
    for (int t = 0; t < 10; t++)
      m_cat[b * 10 + t] = t < 5 ? IDS[b * 5 + t] != 0 : IDS2[b * 5 + t - 5] != 0;
  check_masked_mean(out[0].data, out[1].data, 3, 5, 3, m_or);
  check_masked_mean(out[2].data, out[3].data, 3, 10, 3, m_cat);
  for (size_t i = 0; i < n; i++) free(out[i].data);
  free(j);
}

static char *mha_model(bool scores) {
  char ls[8192];
  size_t k = 0;
  k += layer(ls + k, sizeof ls - k, "InputLayer", "ids", INPUT5, NULL, NULL);
  ls[k++] = ',';
  k += layer(ls + k, sizeof ls - k, "Embedding", "emb", EMB, "ids", NULL);
  ls[k++] = ',';
  layer(ls + k, sizeof ls - k, "MultiHeadAttention", "mha", "\"num_heads\": 2, \"key_dim\": 2",
        "emb,emb", scores ? "{\"return_attention_scores\": true}" : "{}");
  return model_json(NULL, ls, "[[\"ids\", 0, 0]]",
                    scores ? "[[\"mha\", 0, 0], [\"mha\", 0, 1]]" : "[[\"mha\", 0, 0]]");
}

static void test_mha_masks(void **state) {
  (void)state;
  /* return_attention_scores: the Softmax-layer path, scores [B, 2, T, S] */
  char *j = mha_model(true);
  const float *x[1] = {IDS};
  kdc_tensor out[2];
  size_t n;
  interp(j, 3, x, out, &n);
  assert_int_equal(n, 2);
  const float *s = out[1].data;
  for (int b = 0; b < 3; b++)
    for (int h = 0; h < 2; h++)
      for (int t = 0; t < 5; t++) {
        double sum = 0;
        for (int u = 0; u < 5; u++) {
          float v = s[((b * 2 + h) * 5 + t) * 5 + u];
          if (IDS[b * 5 + t] == 0 || IDS[b * 5 + u] == 0) {
            if (v != 0) fail_msg("row %d head %d: weight[%d][%d] = %g, masked", b, h, t, u, v);
          }
          sum += v;
        }
        if (IDS[b * 5 + t] != 0 && fabs(sum - 1) > 1e-6)
          fail_msg("row %d head %d query %d: weights sum to %.7f", b, h, t, sum);
      }
  float *sm = out[0].data; /* the Softmax path's output (same weights below) */
  free(out[1].data);
  free(j);
  /* dot_product_attention path: masked query rows attend uniformly (equal
   * outputs, not the Softmax path's bias-only rows); unmasked rows agree */
  j = mha_model(false);
  interp(j, 3, x, out, &n);
  const float *o = out[0].data;
  for (int b = 0; b < 3; b++) {
    int first = -1;
    for (int t = 0; t < 5; t++) {
      const float *r = o + (b * 5 + t) * 3, *q = sm + (b * 5 + t) * 3;
      double dmax = 0;
      for (int d = 0; d < 3; d++) dmax = fmax(dmax, fabs(r[d] - q[d]));
      if (IDS[b * 5 + t] != 0) {
        if (dmax > 1e-6) fail_msg("row %d query %d: the two paths differ by %g", b, t, dmax);
        continue;
      }
      if (dmax < 1e-4) fail_msg("row %d masked query %d: uniform attention = zeros?", b, t);
      if (first < 0) {
        first = t;
        continue;
      }
      for (int d = 0; d < 3; d++)
        if (fabs(r[d] - o[(b * 5 + first) * 3 + d]) > 1e-6)
          fail_msg("row %d: masked queries %d and %d differ", b, first, t);
    }
  }
  free(out[0].data);
  free(sm);
  free(j);
}

/* Softmax(x, mask=m) with a float mask: entries with m > 0.5 kept, the
 * others (and every entry of a fully masked row) 0. */
static void test_softmax_mask(void **state) {
  (void)state;
  static const char *const IN34 = "\"batch_shape\": [null, 3, 4], \"dtype\": \"float32\"";
  char ls[4096];
  size_t k = 0;
  k += layer(ls + k, sizeof ls - k, "InputLayer", "x", IN34, NULL, NULL);
  ls[k++] = ',';
  k += layer(ls + k, sizeof ls - k, "InputLayer", "m", IN34, NULL, NULL);
  ls[k++] = ',';
  layer(ls + k, sizeof ls - k, "Softmax", "sm", "\"axis\": -1", "x",
        "{\"mask\": {\"class_name\": \"__keras_tensor__\", \"config\": "
        "{\"keras_history\": [\"m\", 0, 0]}}}");
  char *j = model_json(NULL, ls, "[[\"x\", 0, 0], [\"m\", 0, 0]]", "[\"sm\", 0, 0]");
  float x[24], m[24];
  for (int i = 0; i < 24; i++) x[i] = (float)((i * 7) % 11) / 3.0f - 1.5f;
  for (int i = 0; i < 24; i++) m[i] = i % 4 == 1 || i >= 20 ? 0.25f : 1.0f; /* row 5: all masked */
  const float *xs[2] = {x, m};
  kdc_tensor out[1];
  size_t n;
  interp(j, 2, xs, out, &n);
  const float *y = out[0].data;
  for (int r = 0; r < 6; r++) {
    double mx = -INFINITY, z = 0;
    for (int c = 0; c < 4; c++)
      if (m[r * 4 + c] > 0.5f) mx = fmax(mx, x[r * 4 + c]);
    for (int c = 0; c < 4; c++)
      if (m[r * 4 + c] > 0.5f) z += exp(x[r * 4 + c] - mx);
    for (int c = 0; c < 4; c++) {
      double want = m[r * 4 + c] > 0.5f ? exp(x[r * 4 + c] - mx) / z : 0;
      if (fabs(y[r * 4 + c] - want) > 1e-6)
        fail_msg("row %d col %d: %.7g, want %.7g", r, c, y[r * 4 + c], want);
    }
  }
  free(out[0].data);
  free(j);
}

/* ---- masks in TimeDistributed, Attention, AdditiveAttention, rank-4
 * MultiHeadAttention, BatchNormalization training -------------------- */

/* Layer entries InputLayer "ids" (|in_cfg|) -> Embedding "emb" (EMB, mask_zero),
 * and a trailing comma; returns the length written. */
static size_t ids_emb(char *ls, size_t cap, const char *in_cfg) {
  size_t k = layer(ls, cap, "InputLayer", "ids", in_cfg, NULL, NULL);
  ls[k++] = ',';
  k += layer(ls + k, cap - k, "Embedding", "emb", EMB, "ids", NULL);
  ls[k++] = ',';
  return k;
}

static const char *const IN34I = "\"batch_shape\": [null, 3, 4], \"dtype\": \"float32\"";
/* 2 rows of 3 x 4 ids: row 0's steps [1 0 2 0] and [1 2 0 0] give the same
 * masked LSTM output, [1 2 5 0] another; row 1 has a step [0 0 0 4] */
static const float IDS34[24] = {1, 0, 2, 0, 1, 2, 0, 0, 1, 2, 5, 0,
                                3, 3, 0, 0, 0, 0, 0, 4, 6, 7, 8, 1};

/* TimeDistributed folds the mask [B, T, S] to the wrapped layer's [B*T, S]
 * (Keras passes mask[:, t] to each step's call): GlobalAveragePooling1D is
 * the masked mean of each step's embeddings; a masked LSTM's last output
 * ignores masked steps (equal for [1 0 2 0] and [1 2 0 0]); Dense ignores
 * the mask. */
static void test_time_distributed_mask(void **state) {
  (void)state;
  char ls[8192];
  size_t k = ids_emb(ls, sizeof ls, IN34I);
  k += layer(ls + k, sizeof ls - k, "TimeDistributed", "td_gap", "\"layer\": {\"class_name\": "
             "\"GlobalAveragePooling1D\", \"config\": {\"name\": \"g\"}}", "emb", NULL);
  ls[k++] = ',';
  k += layer(ls + k, sizeof ls - k, "TimeDistributed", "td_lstm", "\"layer\": {\"class_name\": "
             "\"LSTM\", \"config\": {\"name\": \"l\", \"units\": 2}}", "emb", NULL);
  ls[k++] = ',';
  layer(ls + k, sizeof ls - k, "TimeDistributed", "td_dense", "\"layer\": {\"class_name\": "
        "\"Dense\", \"config\": {\"name\": \"d\", \"units\": 2}}", "emb", NULL);
  char *j = model_json(NULL, ls, "[[\"ids\", 0, 0]]", "[[\"emb\", 0, 0], [\"td_gap\", 0, 0], "
                       "[\"td_lstm\", 0, 0], [\"td_dense\", 0, 0]]");
  const float *x[1] = {IDS34};
  kdc_tensor out[4];
  size_t n;
  interp(j, 2, x, out, &n);
  assert_int_equal(n, 4);
  bool m[24];
  for (int i = 0; i < 24; i++) m[i] = IDS34[i] != 0;
  check_masked_mean(out[0].data, out[1].data, 6, 4, 3, m);
  const float *y = out[2].data; /* [2, 3, 2] */
  for (int d = 0; d < 2; d++) {
    if (fabsf(y[d] - y[2 + d]) > 1e-6f)
      fail_msg("[1 0 2 0] and [1 2 0 0]: %g vs %g (masked steps not skipped)", y[d], y[2 + d]);
  }
  assert_true(fabsf(y[2] - y[4]) + fabsf(y[3] - y[5]) > 1e-4f);
  for (size_t i = 0; i < n; i++) free(out[i].data);
  free(j);
}

/* Keras 3 Attention / AdditiveAttention with masks, written out in double:
 * scores s (dot: q.k; additive, use_scale false: sum tanh(q + k)), s - 1e9
 * where the value mask (and causal j <= i) is false, softmax, @ v, rows of
 * a false query mask 0. */
static void attention_ref(const float *q, const float *v, const float *qm, const float *vm,
                          int B, int Tq, int Tv, int D, bool additive, bool causal, double *o,
                          double *w) {
  for (int b = 0; b < B; b++)
    for (int i = 0; i < Tq; i++) {
      double s[16], mx = -INFINITY, z = 0;
      for (int j = 0; j < Tv; j++) {
        double acc = 0;
        for (int d = 0; d < D; d++) {
          double a = q[(b * Tq + i) * D + d], c = v[(b * Tv + j) * D + d];
          acc += additive ? tanh(a + c) : a * c;
        }
        bool keep = (!vm || vm[b * Tv + j] != 0) && (!causal || j <= i);
        s[j] = keep ? acc : acc - 1e9;
        mx = fmax(mx, s[j]);
      }
      for (int j = 0; j < Tv; j++) z += exp(s[j] - mx);
      for (int j = 0; j < Tv; j++) w[(b * Tq + i) * Tv + j] = exp(s[j] - mx) / z;
      for (int d = 0; d < D; d++) {
        double acc = 0;
        for (int j = 0; j < Tv; j++) acc += w[(b * Tq + i) * Tv + j] * v[(b * Tv + j) * D + d];
        o[(b * Tq + i) * D + d] = qm && qm[b * Tq + i] == 0 ? 0 : acc;
      }
    }
}

static void close_d(const float *got, const double *want, int n, const char *what) {
  for (int i = 0; i < n; i++)
    if (fabs(got[i] - want[i]) > 1e-5 + 1e-5 * fabs(want[i]))
      fail_msg("%s element %d: %.7g, want %.7g", what, i, got[i], want[i]);
}

static void test_attention_masks(void **state) {
  (void)state;
  enum { AB = 2, TQ = 4, TV = 5, D = 3 };
  char ls[8192];
  size_t k = 0;
  k += layer(ls + k, sizeof ls - k, "InputLayer", "q", "\"batch_shape\": [null, 4, 3]", NULL, NULL);
  ls[k++] = ',';
  k += layer(ls + k, sizeof ls - k, "InputLayer", "v", "\"batch_shape\": [null, 5, 3]", NULL, NULL);
  ls[k++] = ',';
  k += layer(ls + k, sizeof ls - k, "InputLayer", "qm", "\"batch_shape\": [null, 4]", NULL, NULL);
  ls[k++] = ',';
  k += layer(ls + k, sizeof ls - k, "InputLayer", "vm", "\"batch_shape\": [null, 5]", NULL, NULL);
  ls[k++] = ',';
#define KT(name) "{\"class_name\": \"__keras_tensor__\", \"config\": {\"keras_history\": [\"" name "\", 0, 0]}}"
  /* the call's mask list [query_mask, value_mask] */
  k += layer(ls + k, sizeof ls - k, "Attention", "att", "", "q,v",
             "{\"mask\": [" KT("qm") ", " KT("vm") "]}");
  ls[k++] = ',';
  k += layer(ls + k, sizeof ls - k, "Attention", "att_c", "", "q,v",
             "{\"mask\": [null, " KT("vm") "], \"use_causal_mask\": true}");
  ls[k++] = ',';
  /* Keras masks of the inputs (Masking: rows of zeros) */
  k += layer(ls + k, sizeof ls - k, "Masking", "mq", "", "q", NULL);
  ls[k++] = ',';
  k += layer(ls + k, sizeof ls - k, "Masking", "mv", "", "v", NULL);
  ls[k++] = ',';
  layer(ls + k, sizeof ls - k, "AdditiveAttention", "add_att", "\"use_scale\": false", "mq,mv",
        "{\"return_attention_scores\": true}");
#undef KT
  char *j = model_json(NULL, ls, "[[\"q\", 0, 0], [\"v\", 0, 0], [\"qm\", 0, 0], [\"vm\", 0, 0]]",
                       "[[\"att\", 0, 0], [\"att_c\", 0, 0], [\"add_att\", 0, 0], "
                       "[\"add_att\", 0, 1]]");
  float q[AB * TQ * D], v[AB * TV * D], qm[AB * TQ], vm[AB * TV];
  uint64_t s = 17;
  for (int i = 0; i < AB * TQ * D; i++) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    q[i] = (float)((double)(s >> 11) / 9007199254740992.0 * 2 - 1);
  }
  for (int i = 0; i < AB * TV * D; i++) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    v[i] = (float)((double)(s >> 11) / 9007199254740992.0 * 2 - 1);
  }
  /* zero rows for Masking: query row (0, 2), value rows (0, 4), (1, 1) */
  for (int d = 0; d < D; d++) q[(0 * TQ + 2) * D + d] = 0, v[(0 * TV + 4) * D + d] = 0,
                              v[(1 * TV + 1) * D + d] = 0;
  for (int i = 0; i < AB * TQ; i++) qm[i] = i % 3 == 1 ? 0.0f : 1.0f;
  for (int i = 0; i < AB * TV; i++) vm[i] = i % 4 == 2 ? 0.0f : 1.0f;
  const float *x[4] = {q, v, qm, vm};
  kdc_tensor out[4];
  size_t n;
  interp(j, AB, x, out, &n);
  assert_int_equal(n, 4);
  double o[AB * TQ * D], w[AB * TQ * TV];
  attention_ref(q, v, qm, vm, AB, TQ, TV, D, false, false, o, w);
  close_d(out[0].data, o, AB * TQ * D, "Attention mask=[qm, vm]");
  attention_ref(q, v, NULL, vm, AB, TQ, TV, D, false, true, o, w);
  close_d(out[1].data, o, AB * TQ * D, "Attention causal, mask=[None, vm]");
  float mq[AB * TQ], mv[AB * TV];
  for (int i = 0; i < AB * TQ; i++) mq[i] = i == 2 ? 0.0f : 1.0f;
  for (int i = 0; i < AB * TV; i++) mv[i] = i == 4 || i == TV + 1 ? 0.0f : 1.0f;
  attention_ref(q, v, mq, mv, AB, TQ, TV, D, true, false, o, w);
  close_d(out[2].data, o, AB * TQ * D, "AdditiveAttention, Masking masks");
  close_d(out[3].data, w, AB * TQ * TV, "AdditiveAttention weights");
  for (size_t i = 0; i < n; i++) free(out[i].data);
  free(j);
}

/* MultiHeadAttention on rank-4 inputs (B, X, T, d) with attention_axes
 * [2] and Embedding masks equals the rank-3 layer on the (B*X, T, d)
 * slices with the same weights (Keras < 3.7 files: both take the Softmax
 * fill). */
static char *mha_rank_model(bool rank4) {
  char ls[8192];
  size_t k = ids_emb(ls, sizeof ls, rank4 ? IN34I :
                     "\"batch_shape\": [null, 4], \"dtype\": \"float32\"");
  layer(ls + k, sizeof ls - k, "MultiHeadAttention", "mha",
        rank4 ? "\"num_heads\": 2, \"key_dim\": 2, \"attention_axes\": [2]"
              : "\"num_heads\": 2, \"key_dim\": 2", "emb,emb", "{}");
  return model_json("3.6.0", ls, "[[\"ids\", 0, 0]]", "[[\"mha\", 0, 0]]");
}

static void test_mha_rank4_masks(void **state) {
  (void)state;
  char *j4 = mha_rank_model(true), *j3 = mha_rank_model(false);
  const float *x[1] = {IDS34};
  kdc_tensor o4[1], o3[1];
  size_t n;
  interp(j4, 2, x, o4, &n);
  interp(j3, 6, x, o3, &n);
  const float *a = o4[0].data, *b = o3[0].data;
  for (int i = 0; i < 24 * 3; i++)
    if (fabsf(a[i] - b[i]) > 1e-6f + 1e-5f * fabsf(b[i]))
      fail_msg("rank 4 vs rank-3 slices, element %d: %.7g vs %.7g", i, a[i], b[i]);
  free(o4[0].data), free(o3[0].data), free(j4), free(j3);
}

/* BatchNormalization in train_forward with an Embedding mask and a padded
 * last row (sample_mask 0): Keras 3 _moments with a mask, written out in
 * double: weights m (times the sample mask), mean = sum(m x) / (sum m +
 * 1e-7), var = sum(m (x - mean)^2) / (sum m + 1e-7); y = (x - mean) /
 * sqrt(var + 1e-3) (gamma 1, beta 0); moving_mean = 0.01 mean. */
static void test_batchnorm_masked_moments(void **state) {
  (void)state;
  char ls[4096];
  size_t k = ids_emb(ls, sizeof ls, INPUT5);
  layer(ls + k, sizeof ls - k, "BatchNormalization", "bn", "", "emb", NULL);
  char *j = model_json(NULL, ls, "[[\"ids\", 0, 0]]", "[[\"emb\", 0, 0], [\"bn\", 0, 0]]");
  const float *x[1] = {IDS};
  static const float sm[3] = {1, 1, 0};
  kdc_tensor out[8];
  size_t n;
  interp_fn(j, 3, x, sm, out, &n);
  assert_true(n >= 3);
  const float *e = out[0].data, *y = out[1].data;
  double mean[3] = {0}, var[3] = {0}, cnt = 0;
  for (int i = 0; i < 15; i++) cnt += (IDS[i] != 0) * sm[i / 5];
  for (int c = 0; c < 3; c++) {
    for (int i = 0; i < 15; i++) mean[c] += (IDS[i] != 0) * sm[i / 5] * e[i * 3 + c];
    mean[c] /= cnt + 1e-7;
    for (int i = 0; i < 15; i++) {
      double dlt = e[i * 3 + c] - mean[c];
      var[c] += (IDS[i] != 0) * sm[i / 5] * dlt * dlt;
    }
    var[c] /= cnt + 1e-7;
  }
  double want[45];
  for (int i = 0; i < 15; i++)
    for (int c = 0; c < 3; c++) want[i * 3 + c] = (e[i * 3 + c] - mean[c]) / sqrt(var[c] + 1e-3);
  close_d(y, want, 30, "masked BatchNormalization (real rows)");
  bool found = false;
  for (size_t r = 2; r < n; r++)
    if (kdc_type_numel(&out[r].type) == 3) {
      double mm[3] = {0.01 * mean[0], 0.01 * mean[1], 0.01 * mean[2]};
      close_d(out[r].data, mm, 3, "moving_mean");
      found = true;
      break;
    }
  assert_true(found);
  for (size_t i = 0; i < n; i++) free(out[i].data);
  free(j);
}

/* Training through the masked layers: masked_text's ids -> Embedding(30,
 * 8, mask_zero) -> BatchNormalization (masked moments) -> Attention([b, b])
 * (query and value masks) -> TimeDistributed(Dense(4)) (given the mask)
 * -> GlobalAveragePooling1D -> Dense(4, softmax), random init; 37 rows in
 * batches of 16 (a padded last batch) for 3 epochs: the loss goes down and
 * the epoch losses on 1 device and 2x4 agree (1e-5 relative). */
static void test_masked_layers_fit_meshes(void **state) {
  (void)state;
  char ls[8192];
  size_t k = layer(ls, sizeof ls, "InputLayer", "ids", "\"batch_shape\": [null, 12], "
                   "\"dtype\": \"float32\"", NULL, NULL);
  ls[k++] = ',';
  k += layer(ls + k, sizeof ls - k, "Embedding", "emb", "\"input_dim\": 30, \"output_dim\": 8, "
             "\"mask_zero\": true", "ids", NULL);
  ls[k++] = ',';
  k += layer(ls + k, sizeof ls - k, "BatchNormalization", "bn", "", "emb", NULL);
  ls[k++] = ',';
  k += layer(ls + k, sizeof ls - k, "Attention", "att", "", "bn,bn", NULL);
  ls[k++] = ',';
  k += layer(ls + k, sizeof ls - k, "TimeDistributed", "td", "\"layer\": {\"class_name\": "
             "\"Dense\", \"config\": {\"name\": \"d\", \"units\": 4, \"activation\": "
             "\"tanh\"}}", "att", NULL);
  ls[k++] = ',';
  k += layer(ls + k, sizeof ls - k, "GlobalAveragePooling1D", "gap", "", "td", NULL);
  ls[k++] = ',';
  layer(ls + k, sizeof ls - k, "Dense", "head", "\"units\": 4, \"activation\": \"softmax\"",
        "gap", NULL);
  char *j = model_json(NULL, ls, "[[\"ids\", 0, 0]]", "[\"head\", 0, 0]");
  char *model = e2e_path("masked_layers.json");
  FILE *fp = fopen(model, "w");
  assert_non_null(fp);
  fputs(j, fp);
  fclose(fp);
  char *in = ex("input0.npy");
  kdc_npy_array ids;
  assert_null(kdc_npy_read(in, &ids));
  float y[ROWS];
  for (int r = 0; r < ROWS; r++) {
    int len = 0;
    for (int t = 0; t < T; t++) len += ((const float *)ids.data)[r * T + t] != 0;
    y[r] = (float)(len % 4);
  }
  kdc_npy_free(&ids);
  char *yp = e2e_path("masked_layers_y.npy");
  assert_null(kdc_npy_write(yp, KDC_IO_DTYPE_F32, 1, (int64_t[]){ROWS}, y));
  e2e_fit_equal_1_vs_2x4("masked layers", model, NULL, in, yp, 0);
  free(j), free(model), free(in), free(yp);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_rnn_mask_version),
      cmocka_unit_test(test_merge_masks),
      cmocka_unit_test(test_mha_masks),
      cmocka_unit_test(test_softmax_mask),
      cmocka_unit_test(test_time_distributed_mask),
      cmocka_unit_test(test_attention_masks),
      cmocka_unit_test(test_mha_rank4_masks),
      cmocka_unit_test(test_batchnorm_masked_moments),
      cmocka_unit_test(test_masked_layers_fit_meshes),
      cmocka_unit_test(test_tagger_reference_meshes),
      cmocka_unit_test(test_tagger_masked_loss),
      cmocka_unit_test(test_tagger_fit_meshes),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
