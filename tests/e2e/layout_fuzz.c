/* tests/e2e/layout_fuzz.c: see layout_fuzz.h. */
#include "layout_fuzz.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <json-c/json.h>

#include "codegen/codegen.h"
#include "e2e_util.h"
#include "frontend/frontend.h"
#include "frontend/layout.h"
#include "ir/ir.h"
#include "passes/passes.h"
#include "runtime/runtime.h"

enum { BATCH = 16, STEPS = 3, MAX_IO = 4, MAX_STATE = 160 };

/* Tolerances (|d| <= atol + rtol |ref|), as test_e2e_mesh against Keras:
 * a contraction split over 8 devices sums in another order (1e-6 + 1e-5
 * was exceeded by 3% on one output of 400 cases); a wrong piece is O(1). */
static const double PRED_ATOL = 1e-5, PRED_RTOL = 1e-4, FIT_ATOL = 1e-5, FIT_RTOL = 1e-4;

static const char *const examples[] = {
    "mnist_mlp",    "mlp_sequential", "activations", "merge_reshape", "transformer_block",
    "norm_zoo",     "small_cnn",      "text_classifier", "lstm_text", "gru_rnn",
    "bidir_rnn",    "seq2seq",        "layer_zoo2",  "masked_text",
};
enum { N_EXAMPLES = sizeof examples / sizeof examples[0] };

static const char *const axis_pool[] = {"data", "model", "x", "fsdp", "tp", "seq", "expert", "b_2"};
enum { N_POOL = sizeof axis_pool / sizeof axis_pool[0] };

int lf_n_examples(void) { return N_EXAMPLES; }
const char *lf_example(int i) { return examples[i]; }

/* ---- random cases -------------------------------------------------------- */

typedef struct rng {
  uint64_t s;
} rng;

static uint64_t next(rng *r) { /* splitmix64 */
  uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
static int below(rng *r, int n) { return (int)(next(r) % (uint64_t)n); }
static bool chance(rng *r, int num, int den) { return below(r, den) < num; }

typedef struct text {
  char *s;
  size_t len, cap;
} text;

static void put(text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(text *t, const char *fmt, ...) {
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(t->s ? t->s + t->len : NULL, t->s ? t->cap - t->len : 0, fmt, ap);
    va_end(ap);
    assert_true(n >= 0);
    if (t->s && (size_t)n < t->cap - t->len) {
      t->len += (size_t)n;
      return;
    }
    t->cap = 2 * t->cap + (size_t)n + 64;
    t->s = realloc(t->s, t->cap);
    assert_non_null(t->s);
  }
}

static char *example_file(const char *ex, const char *name) {
  char rel[256];
  snprintf(rel, sizeof rel, "examples/%s/%s", ex, name);
  return e2e_src(rel);
}

/* One layout tuple for a tensor of |rank| dims |dims| (batch dims given as
 * BATCH): each dim null or an unused axis whose size divides it; the last
 * dim of a recurrent cell's weight packs |gates| gates, and kdc splits it
 * per gate (docs/sharding.md), so there the axis must divide the units. */
static void put_tuple(text *t, rng *r, const kdc_mesh *m, int rank, const int64_t *dims,
                      int gates) {
  int len = chance(r, 1, 6) ? below(r, rank + 1) : rank; /* JAX: a short spec replicates the rest */
  unsigned used = 0;
  put(t, "[");
  for (int d = 0; d < len; d++) {
    int a = -1;
    if (!chance(r, 1, 2)) {
      int cand[KDC_MAX_MESH_AXES], nc = 0;
      for (int k = 0; k < m->naxes; k++)
        if (!(used & (1u << k)) && dims[d] > 0 &&
            (d == rank - 1 ? dims[d] / gates : dims[d]) % m->sizes[k] == 0)
          cand[nc++] = k;
      if (nc) a = cand[below(r, nc)];
    }
    if (a >= 0) used |= 1u << a;
    put(t, "%s", d ? ", " : "");
    if (a >= 0) put(t, "\"%s\"", m->names[a]);
    else put(t, "null");
  }
  put(t, "]");
}

void lf_case_make(uint64_t seed, lf_case *c) {
  memset(c, 0, sizeof *c);
  rng r = {seed * 0x2545f4914f6cdd1dull + 17};
  c->seed = seed;
  snprintf(c->example, sizeof c->example, "%s", examples[seed % N_EXAMPLES]);
  c->rank = 1 + (int)((seed / N_EXAMPLES) % 4);
  static const int sizes[] = {1, 2, 2, 2, 4, 8};
  int64_t sz[4];
  for (int tries = 0;; tries++) {
    int64_t prod = 1;
    for (int k = 0; k < c->rank; k++) prod *= sz[k] = sizes[below(&r, 6)];
    if (prod <= 8 && (prod >= 2 || tries > 20 || chance(&r, 1, 10))) break;
  }
  int pick[N_POOL];
  for (int k = 0; k < N_POOL; k++) pick[k] = k;
  for (int k = 0; k < c->rank; k++) { /* partial Fisher-Yates */
    int j = k + below(&r, N_POOL - k), x = pick[k];
    pick[k] = pick[j], pick[j] = x;
  }
  size_t ml = 0, al = 0;
  for (int k = 0; k < c->rank; k++) {
    ml += (size_t)snprintf(c->mesh + ml, sizeof c->mesh - ml, "%s%lld", k ? "x" : "",
                           (long long)sz[k]);
    al += (size_t)snprintf(c->axes + al, sizeof c->axes - al, "%s%s", k ? "," : "",
                           axis_pool[pick[k]]);
  }
  snprintf(c->optimizer, sizeof c->optimizer, "%s", chance(&r, 1, 2) ? "adam" : "sgd");
  if (chance(&r, 1, 8)) return; /* DataParallel */
  kdc_mesh m;
  assert_null(kdc_mesh_parse(c->mesh, c->axes, &m));
  char *mpath = example_file(c->example, "model.json");
  kdc_keras_model *km = NULL;
  assert_null(kdc_frontend_load(mpath, &km));
  free(mpath);
  text t = {NULL, 0, 0};
  put(&t, "{");
  if (!chance(&r, 1, 4)) put(&t, "\"batch_dim_name\": \"%s\", ", m.names[below(&r, m.naxes)]);
  put(&t, "\"layout_map\": {");
  /* sparse layouts leave most weights open to propagation (the issue's
   * reproducers have one rule), dense ones close most of them */
  static const int weight_p[] = {1, 2, 5, 9}, output_p[] = {0, 1, 3};
  int wp = weight_p[below(&r, 4)], op = output_p[below(&r, 3)], rules = 0;
  for (size_t i = 0; i < kdc_frontend_variable_count(km); i++) {
    const kdc_keras_var *v = kdc_frontend_variable(km, i);
    if (v->shape.rank == 0 || !chance(&r, wp, 20)) continue;
    put(&t, "%s\"%s\": ", rules++ ? ", " : "", v->path);
    int gates = strstr(v->path, "lstm_cell/") ? 4 : strstr(v->path, "gru_cell/") ? 3 : 1;
    put_tuple(&t, &r, &m, v->shape.rank, v->shape.dims, gates);
  }
  for (int i = 0; i < km->n_layers; i++) { /* <layer>/output of single-output layers */
    const kdc_keras_layer *l = &km->layers[i];
    if (l->sub || l->n_nodes != 1 || l->nodes[0].n_out != 1 ||
        !strcmp(l->class_name, "InputLayer") || !chance(&r, op, 20))
      continue;
    kdc_kshape s = l->nodes[0].out[0];
    if (s.rank < 1) continue;
    s.dims[0] = BATCH;
    bool known = true;
    for (int d = 0; d < s.rank; d++) known = known && s.dims[d] > 0;
    if (!known) continue;
    put(&t, "%s\"%s/output\": ", rules++ ? ", " : "", l->path);
    put_tuple(&t, &r, &m, s.rank, s.dims, 1);
  }
  put(&t, "}}");
  kdc_frontend_free(km);
  c->layout = t.s;
}

void lf_case_free(lf_case *c) {
  free(c->layout);
  c->layout = NULL;
}

char *lf_case_json(const lf_case *c) {
  text t = {NULL, 0, 0};
  put(&t, "{\"example\": \"%s\", \"mesh\": \"%s\", \"axes\": \"%s\", \"optimizer\": \"%s\", "
          "\"seed\": %llu,\n \"layout\": %s}\n",
      c->example, c->mesh, c->axes, c->optimizer, (unsigned long long)c->seed,
      c->layout ? c->layout : "null");
  return t.s;
}

static const char *jstr(json_object *o, const char *key) {
  json_object *v = NULL;
  assert_true(json_object_object_get_ex(o, key, &v) && json_object_is_type(v, json_type_string));
  return json_object_get_string(v);
}

void lf_case_read(const char *path, lf_case *c) {
  memset(c, 0, sizeof *c);
  json_object *o = json_object_from_file(path);
  if (!o) fprintf(stderr, "%s: not JSON\n", path);
  assert_non_null(o);
  snprintf(c->example, sizeof c->example, "%s", jstr(o, "example"));
  snprintf(c->mesh, sizeof c->mesh, "%s", jstr(o, "mesh"));
  snprintf(c->axes, sizeof c->axes, "%s", jstr(o, "axes"));
  snprintf(c->optimizer, sizeof c->optimizer, "%s", jstr(o, "optimizer"));
  c->rank = 1;
  for (const char *p = c->mesh; *p; p++) c->rank += *p == 'x';
  json_object *l = NULL;
  if (json_object_object_get_ex(o, "plan", &l)) c->no_plan = !json_object_get_boolean(l);
  l = NULL;
  if (json_object_object_get_ex(o, "layout", &l) && l)
    c->layout = strdup(json_object_to_json_string_ext(l, JSON_C_TO_STRING_PLAIN));
  json_object_put(o);
}

/* ---- running a case ------------------------------------------------------ */

/* Named global tensors carried between train_steps (weights, slots,
 * iterations): the bytes are the same whatever shape a function declares
 * them in (an RNN weight split per gate is [in, G, u] instead of [in, G*u]). */
typedef struct state {
  int n;
  char *name[MAX_STATE];
  void *data[MAX_STATE];
  size_t bytes[MAX_STATE];
  kdc_dtype dtype[MAX_STATE];
} state;

static int state_find(const state *s, const char *name) {
  for (int i = 0; i < s->n; i++)
    if (!strcmp(s->name[i], name)) return i;
  return -1;
}

static void state_set(state *s, const char *name, const void *data, size_t bytes, kdc_dtype dt) {
  int i = state_find(s, name);
  if (i < 0) {
    assert_true(s->n < MAX_STATE);
    i = s->n++;
    s->name[i] = strdup(name);
    s->data[i] = NULL;
  }
  free(s->data[i]);
  s->data[i] = malloc(bytes ? bytes : 1);
  memcpy(s->data[i], data, bytes);
  s->bytes[i] = bytes;
  s->dtype[i] = dt;
}

static void state_free(state *s) {
  for (int i = 0; i < s->n; i++) free(s->name[i]), free(s->data[i]);
  s->n = 0;
}

/* Inputs and labels of one batch. */
typedef struct batch {
  int n_in;
  kdc_npy_array in[MAX_IO];
  float mask[BATCH];
} batch;

/* The global arguments of |f| (borrowed data, except zero state: *|owned|). */
static kdc_tensor *arguments(const kdc_module *m, const kdc_func *f, const batch *b,
                             const float *y, state *st, void **owned) {
  kdc_tensor *args = calloc(f->n_params ? f->n_params : 1, sizeof *args);
  int k_in = 0;
  *owned = NULL;
  size_t zeros = 0;
  for (size_t i = 0; i < f->n_params; i++) {
    const kdc_node *nd = &f->nodes[f->params[i]];
    args[i].type = kdc_value_global_type(m, f, f->params[i]);
    size_t bytes = kdc_type_bytes(&args[i].type);
    const char *name = nd->attr.param.name ? nd->attr.param.name : "";
    int j;
    if (nd->attr.param.kind == KDC_PARAM_INPUT) {
      assert_true(k_in < b->n_in);
      assert_int_equal(bytes, b->in[k_in].nbytes / (size_t)b->in[k_in].dims[0] * BATCH);
      args[i].data = b->in[k_in++].data;
    } else if (nd->attr.param.kind == KDC_PARAM_LABEL) {
      args[i].data = (void *)(strcmp(name, "sample_mask") ? y : b->mask);
    } else if ((j = state_find(st, name)) >= 0) {
      assert_int_equal(st->bytes[j], bytes);
      args[i].data = st->data[j];
    } else if (nd->attr.param.kind == KDC_PARAM_WEIGHT) {
      const kdc_weight *w = kdc_ir_module_find_weight(m, name);
      assert_non_null(w);
      assert_non_null(w->data);
      assert_int_equal(kdc_type_bytes(&w->type), bytes);
      args[i].data = w->data;
    } else { /* optimizer state starts at zero */
      zeros = zeros > bytes ? zeros : bytes;
      args[i].data = NULL;
    }
  }
  *owned = calloc(1, zeros ? zeros : 1);
  for (size_t i = 0; i < f->n_params; i++)
    if (!args[i].data) args[i].data = *owned;
  return args;
}

/* Runs |f| of |m| on global arguments: the reference interpreter when the
 * module is not partitioned, else the SPMD interpreter over every device
 * (the arguments cut by the parameters' shardings, the results assembled by
 * theirs).  |out| gets f->n_results global tensors. */
static kdc_status run_func(const kdc_module *m, const kdc_func *f, const kdc_tensor *args,
                           kdc_tensor *out) {
  if (m->mesh.naxes == 0) return kdc_ir_interpret(f, args, f->n_params, out);
  if (!f->n_results) return NULL;
  int64_t nd = kdc_mesh_devices(&m->mesh);
  kdc_tensor **la = calloc((size_t)nd, sizeof *la), **lo = calloc((size_t)nd, sizeof *lo);
  kdc_status st = NULL;
  for (int64_t d = 0; d < nd; d++) {
    la[d] = calloc(f->n_params + 1, sizeof **la);
    lo[d] = calloc(f->n_results + 1, sizeof **lo);
    for (size_t i = 0; i < f->n_params && !st; i++) {
      kdc_sharding rep = kdc_sharding_replicated(args[i].type.rank);
      const kdc_sharding *s = &f->nodes[f->params[i]].sharding;
      st = kdc_sharding_shard(&m->mesh, s->present ? s : &rep, &args[i], d, &la[d][i]);
    }
  }
  if (!st) st = kdc_ir_interpret_spmd(f, &m->mesh, (const kdc_tensor *const *)la, lo);
  kdc_tensor *col = calloc((size_t)nd, sizeof *col);
  for (size_t r = 0; r < f->n_results; r++) {
    out[r].data = NULL;
    if (st) continue;
    kdc_value_id v = f->results[r];
    for (int64_t d = 0; d < nd; d++) col[d] = lo[d][r];
    kdc_sharding rep = kdc_sharding_replicated(f->nodes[v].type.rank);
    const kdc_sharding *s = &f->nodes[v].sharding;
    kdc_type g = kdc_value_global_type(m, f, v);
    st = kdc_sharding_unshard(&m->mesh, s->present ? s : &rep, &g, col, &out[r]);
  }
  for (int64_t d = 0; d < nd; d++) {
    for (size_t i = 0; i < f->n_params; i++) free(la[d][i].data);
    for (size_t r = 0; r < f->n_results; r++) free(lo[d][r].data);
    free(la[d]), free(lo[d]);
  }
  free(la), free(lo), free(col);
  return st;
}

/* What one module computes: predict's results, and per step the loss and
 * then the final state. */
typedef struct trace {
  int n_pred;
  kdc_tensor pred[2 * MAX_IO];
  char *pred_name[2 * MAX_IO]; /* copies: the module goes before the comparison */
  float loss[STEPS];
  state st;
} trace;

static void trace_free(trace *t) {
  for (int i = 0; i < t->n_pred; i++) free(t->pred[i].data), free(t->pred_name[i]);
  state_free(&t->st);
  memset(t, 0, sizeof *t);
}

/* |n| labels in [-1, 1) (the same for every module of a case). */
static float *labels(int64_t n) {
  float *y = malloc((size_t)(n ? n : 1) * sizeof *y);
  uint64_t s = 12345;
  for (int64_t k = 0; k < n; k++) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    y[k] = (float)((double)(s >> 40) / (double)(1ull << 24)) * 2 - 1;
  }
  return y;
}

/* The labels of train_step |ts| (its one label parameter besides the mask). */
static float *labels_for(const kdc_func *ts, const kdc_module *m) {
  for (size_t i = 0; i < ts->n_params; i++) {
    const kdc_node *nd = &ts->nodes[ts->params[i]];
    if (nd->attr.param.kind != KDC_PARAM_LABEL || !strcmp(nd->attr.param.name, "sample_mask"))
      continue;
    kdc_type g = kdc_value_global_type(m, ts, ts->params[i]);
    return labels(kdc_type_numel(&g));
  }
  return NULL;
}

static kdc_status run_trace(const kdc_module *m, const batch *b, bool fit, trace *t) {
  memset(t, 0, sizeof *t);
  kdc_func *pf = kdc_ir_module_find_func(m, "predict"), *ts = kdc_ir_module_find_func(m, "train_step");
  assert_non_null(pf);
  assert_true(!fit || ts);
  void *owned;
  kdc_tensor *args = arguments(m, pf, b, NULL, &t->st, &owned);
  assert_true(pf->n_results <= 2 * MAX_IO);
  kdc_status st = run_func(m, pf, args, t->pred);
  t->n_pred = st ? 0 : (int)pf->n_results;
  for (int r = 0; r < t->n_pred; r++)
    t->pred_name[r] = strdup(pf->result_names && pf->result_names[r] ? pf->result_names[r] : "?");
  free(args), free(owned);
  float *y = fit ? labels_for(ts, m) : NULL;
  for (int s = 0; s < STEPS && fit && !st; s++) {
    args = arguments(m, ts, b, y, &t->st, &owned);
    kdc_tensor *out = calloc(ts->n_results, sizeof *out);
    st = run_func(m, ts, args, out);
    for (size_t r = 0; r < ts->n_results && !st; r++) {
      const char *name = ts->result_names[r];
      if (!strcmp(name, "loss")) t->loss[s] = *(const float *)out[r].data;
      for (size_t i = 0; i < ts->n_params; i++) {
        const kdc_node *nd = &ts->nodes[ts->params[i]];
        if ((nd->attr.param.kind == KDC_PARAM_WEIGHT || nd->attr.param.kind == KDC_PARAM_STATE) &&
            !strcmp(nd->attr.param.name, name))
          state_set(&t->st, name, out[r].data, kdc_type_bytes(&out[r].type), out[r].type.dtype);
      }
    }
    for (size_t r = 0; r < ts->n_results; r++) free(out[r].data);
    free(out), free(args), free(owned);
  }
  free(y);
  return st;
}

static void train_options(const char *optimizer, kdc_train_options *t) {
  kdc_optimizer_kind k;
  assert_true(kdc_optimizer_from_name(optimizer, &k));
  kdc_train_options_init(t, KDC_LOSS_MSE, k);
  t->sample_mask = true;
}

/* Lowers |ex| on |mesh_str| (NULL: one device) with |layout| and runs the
 * pipeline with train_step; *|out| is the module, or the status. */
static kdc_status build(const char *ex, const char *mesh_str, const char *axes, const char *layout,
                        const char *optimizer, bool fit, kdc_module **out) {
  kdc_mesh mesh;
  kdc_layout *lay = NULL;
  kdc_keras_model *km = NULL;
  kdc_status st = NULL;
  memset(&mesh, 0, sizeof mesh);
  *out = NULL;
  if (mesh_str) st = kdc_mesh_parse(mesh_str, axes, &mesh);
  if (!st && mesh_str && layout) st = kdc_layout_parse(layout, strlen(layout), "layout.json", &lay);
  if (!st && lay) st = kdc_layout_check(lay, &mesh);
  char *model = example_file(ex, "model.json"), *w = example_file(ex, "weights.safetensors");
  if (!st) st = kdc_frontend_load(model, &km);
  if (!st) {
    kdc_lower_options lo = {.batch = BATCH, .mesh = mesh_str ? &mesh : NULL, .layout = lay,
                            .train_forward = fit, .output_masks = fit};
    st = kdc_frontend_lower(km, &lo, out);
  }
  if (!st) st = kdc_frontend_bind_weights(km, *out, w, 0);
  kdc_train_options t;
  train_options(optimizer, &t);
  kdc_pass_options po;
  memset(&po, 0, sizeof po);
  po.train = fit ? &t : NULL;
  if (!st) st = kdc_pass_pipeline_run(*out, &po);
  if (st) kdc_ir_module_destroy(*out), *out = NULL;
  kdc_frontend_free(km);
  kdc_layout_free(lay);
  free(model), free(w);
  return st;
}

static void batch_load(const char *ex, batch *b) {
  memset(b, 0, sizeof *b);
  for (int i = 0; i < MAX_IO; i++) {
    char name[32];
    snprintf(name, sizeof name, "input%d.npy", i);
    char *p = example_file(ex, name);
    if (!e2e_exists(p)) {
      free(p);
      break;
    }
    assert_null(kdc_npy_read(p, &b->in[b->n_in++]));
    free(p);
  }
  if (!b->n_in) {
    char *p = example_file(ex, "input.npy");
    assert_null(kdc_npy_read(p, &b->in[b->n_in++]));
    free(p);
  }
  for (int i = 0; i < b->n_in; i++) assert_true(b->in[i].dims[0] >= BATCH);
  for (int r = 0; r < BATCH; r++) b->mask[r] = r < BATCH - 3 ? 1.0f : 0.0f; /* a partial batch */
}

static void batch_free(batch *b) {
  for (int i = 0; i < b->n_in; i++) kdc_npy_free(&b->in[i]);
}

/* One-device references, per (example, optimizer): the predict-only module
 * (what `kdc compile` builds without --loss: weights no other function
 * reads, which partition may cut at load) and the training module. */
static struct ref {
  char ex[32], opt[8];
  bool fit; /* false: the example cannot train (predict only) */
  batch b;
  trace p, t;
} refs[2 * N_EXAMPLES];
static int n_refs;

static struct ref *reference(const char *ex, const char *opt) {
  for (int i = 0; i < n_refs; i++)
    if (!strcmp(refs[i].ex, ex) && !strcmp(refs[i].opt, opt)) return &refs[i];
  assert_true(n_refs < 2 * N_EXAMPLES);
  struct ref *r = &refs[n_refs++];
  snprintf(r->ex, sizeof r->ex, "%s", ex);
  snprintf(r->opt, sizeof r->opt, "%s", opt);
  batch_load(ex, &r->b);
  kdc_module *m = NULL;
  kdc_status st = build(ex, NULL, NULL, NULL, opt, false, &m);
  if (!st) st = run_trace(m, &r->b, false, &r->p);
  kdc_ir_module_destroy(m);
  m = NULL;
  r->fit = true;
  if (!st) st = build(ex, NULL, NULL, NULL, opt, true, &m);
  if (st && kdc_status_code(st) == KDC_UNSUPPORTED) { /* e.g. RandomRotation: predict only */
    kdc_status_free(st);
    st = NULL;
    r->fit = false;
  }
  if (!st && r->fit) st = run_trace(m, &r->b, true, &r->t);
  if (st) fprintf(stderr, "layout fuzz: one-device %s: %s\n", ex, kdc_status_message(st));
  assert_null(st);
  kdc_ir_module_destroy(m);
  return r;
}

void lf_cleanup(void) {
  for (int i = 0; i < n_refs; i++)
    batch_free(&refs[i].b), trace_free(&refs[i].p), trace_free(&refs[i].t);
  n_refs = 0;
}

/* Worst tolerance ratio of |got| against |want| (same dtype and bytes):
 * floats |d| <= atol + rtol |want|, integers bitwise. */
static double compare(const void *got, const void *want, size_t bytes, kdc_dtype dt, double atol,
                      double rtol) {
  if (dt != KDC_DTYPE_F32) return memcmp(got, want, bytes) ? 1e30 : 0;
  return e2e_f32_compare(got, want, bytes / 4, atol, rtol);
}

/* Appends "; |what|" to |buf| when |e| is the worst so far. */
static void worse(double e, double *worst, char *buf, size_t n, const char *what) {
  if (e <= *worst) return;
  *worst = e;
  size_t k = strlen(buf);
  snprintf(buf + k, n - k, "; %s", what);
}

/* |t| against |ref| (same module kind): predict into *|wp|, losses and
 * state into *|wf|. */
static void compare_trace(const trace *t, const trace *ref, double *wp, double *wf, char *what,
                          size_t n) {
  char w[200];
  assert_int_equal(t->n_pred, ref->n_pred);
  for (int i = 0; i < t->n_pred; i++) {
    size_t bytes = kdc_type_bytes(&ref->pred[i].type);
    assert_int_equal(kdc_type_bytes(&t->pred[i].type), bytes);
    snprintf(w, sizeof w, "predict result %s", t->pred_name[i]);
    worse(compare(t->pred[i].data, ref->pred[i].data, bytes, ref->pred[i].type.dtype, PRED_ATOL,
                  PRED_RTOL), wp, what, n, w);
  }
  for (int s = 0; s < STEPS; s++) {
    snprintf(w, sizeof w, "loss of step %d", s);
    worse(compare(&t->loss[s], &ref->loss[s], 4, KDC_DTYPE_F32, FIT_ATOL, FIT_RTOL), wf, what, n, w);
  }
  assert_int_equal(t->st.n, ref->st.n);
  for (int i = 0; i < t->st.n; i++) {
    int j = state_find(&ref->st, t->st.name[i]);
    assert_true(j >= 0);
    assert_int_equal(t->st.bytes[i], ref->st.bytes[j]);
    snprintf(w, sizeof w, "state %s", t->st.name[i]);
    worse(compare(t->st.data[i], ref->st.data[j], t->st.bytes[i], t->st.dtype[i], FIT_ATOL,
                  FIT_RTOL), wf, what, n, w);
  }
}

void lf_check(const lf_case *c, lf_outcome *o) {
  memset(o, 0, sizeof *o);
  struct ref *ref = reference(c->example, c->optimizer);
  char what[512] = "";
  for (int fit = 0; fit <= (int)ref->fit; fit++) {
    kdc_module *m = NULL;
    kdc_status st = build(c->example, c->mesh, c->axes, c->layout, c->optimizer, fit, &m);
    trace t;
    memset(&t, 0, sizeof t);
    if (!st) st = run_trace(m, &ref->b, fit, &t);
    kdc_ir_module_destroy(m);
    if (st) {
      kdc_code code = kdc_status_code(st);
      o->result = code == KDC_INVALID_INPUT || code == KDC_UNSUPPORTED ? LF_REFUSED : LF_INTERNAL;
      const char *msg = kdc_status_message(st), *cn = kdc_code_name(code);
      bool named = !strncmp(msg, cn, strlen(cn)); /* "internal error: pass ..." */
      snprintf(o->msg, sizeof o->msg, "%s%s%s%s", fit ? "training: " : "", named ? "" : cn,
               named ? "" : ": ", msg);
      kdc_status_free(st);
      trace_free(&t);
      return;
    }
    compare_trace(&t, fit ? &ref->t : &ref->p, &o->err_predict, &o->err_fit, what, sizeof what);
    trace_free(&t);
  }
  o->result = o->err_predict > 1 || o->err_fit > 1 ? LF_MISMATCH : LF_OK;
  if (o->result == LF_MISMATCH)
    snprintf(o->msg, sizeof o->msg, "differs from one device: predict %.3g x tol, fit %.3g x tol "
             "(worst so far%s)", o->err_predict, o->err_fit, what);
}

/* |c| (mesh, layout) compiled to a CPU plan at |plan|: with train_step
 * (the plan's functions predict, train_step, evaluate) when |fit|. */
static void compile_plan(const lf_case *c, bool fit, const char *plan) {
  kdc_mesh mesh;
  kdc_layout *lay = NULL;
  kdc_keras_model *km = NULL;
  kdc_module *mod = NULL;
  assert_null(kdc_mesh_parse(c->mesh, c->axes, &mesh));
  if (c->layout) {
    assert_null(kdc_layout_parse(c->layout, strlen(c->layout), "layout.json", &lay));
    assert_null(kdc_layout_check(lay, &mesh));
  }
  char *model = example_file(c->example, "model.json"), *w = example_file(c->example, "weights.safetensors");
  assert_null(kdc_frontend_load(model, &km));
  kdc_lower_options lo = {.batch = BATCH, .mesh = &mesh, .layout = lay, .train_forward = fit,
                          .output_masks = fit};
  kdc_status st = kdc_frontend_lower(km, &lo, &mod);
  if (!st) st = kdc_frontend_bind_weights(km, mod, w, 0);
  kdc_train_options t;
  train_options(c->optimizer, &t);
  kdc_pass_options po;
  memset(&po, 0, sizeof po);
  po.train = fit ? &t : NULL;
  if (!st) st = kdc_pass_pipeline_run(mod, &po);
  if (!st) {
    kdc_codegen_options co;
    memset(&co, 0, sizeof co);
    co.no_ir_text = true;
    static const char *const train_funcs[] = {"predict", "train_step", "evaluate"};
    if (fit) co.funcs = train_funcs, co.n_funcs = 3;
    st = kdc_codegen_cpu_plan(mod, &co, plan);
  }
  if (st) fprintf(stderr, "%s on %s: %s\n", c->example, c->mesh, kdc_status_message(st));
  assert_null(st);
  kdc_ir_module_destroy(mod);
  kdc_frontend_free(km);
  kdc_layout_free(lay);
  free(model), free(w);
}

/* predict of the loaded plan |p| against |want| (n results). */
static double plan_predict(kdc_rt_plan *p, const batch *b, const trace *want) {
  const void *in[MAX_IO];
  void *out[2 * MAX_IO];
  size_t n_out = kdc_rt_plan_output_count(p, 0);
  assert_int_equal(n_out, (size_t)want->n_pred);
  for (int i = 0; i < b->n_in; i++) in[i] = b->in[i].data;
  for (size_t k = 0; k < n_out; k++) out[k] = malloc(kdc_rt_plan_output(p, 0, k)->bytes);
  assert_null(kdc_rt_plan_run(p, in, out));
  double worst = 0;
  for (size_t k = 0; k < n_out; k++) {
    const kdc_tensor *w = &want->pred[k];
    assert_int_equal(kdc_rt_plan_output(p, 0, k)->bytes, kdc_type_bytes(&w->type));
    double e = compare(out[k], w->data, kdc_type_bytes(&w->type), w->type.dtype, PRED_ATOL, PRED_RTOL);
    worst = e > worst ? e : worst;
    free(out[k]);
  }
  return worst;
}

/* STEPS train_steps of the loaded training plan |p| (the runtime's state,
 * from the plan's weights) against the one-device trace |want|. */
static double plan_fit(kdc_rt_plan *p, const batch *b, const trace *want) {
  kdc_rt_train *t = NULL;
  assert_null(kdc_rt_train_create(p, &t));
  size_t nd = kdc_rt_train_data_count(t);
  const void *data[2 * MAX_IO];
  float *y = NULL;
  assert_true(nd <= 2 * MAX_IO);
  for (size_t i = 0; i < nd; i++) {
    const kdc_rt_tensor_info *ti = kdc_rt_train_data(t, i);
    if (!strcmp(ti->name, "sample_mask")) data[i] = b->mask;
    else if ((int)i < b->n_in) data[i] = b->in[i].data;
    else data[i] = y = labels(ti->bytes / 4);
  }
  double worst = 0;
  for (int s = 0; s < STEPS; s++) {
    float loss;
    assert_null(kdc_rt_train_step(t, data, &loss));
    double e = compare(&loss, &want->loss[s], 4, KDC_DTYPE_F32, FIT_ATOL, FIT_RTOL);
    worst = e > worst ? e : worst;
  }
  assert_int_equal(kdc_rt_train_state_count(t), (size_t)want->st.n);
  for (size_t k = 0; k < kdc_rt_train_state_count(t); k++) {
    const kdc_rt_tensor_info *ti = kdc_rt_train_state(t, k);
    int j = state_find(&want->st, ti->name);
    assert_true(j >= 0);
    assert_int_equal(ti->bytes, want->st.bytes[j]);
    void *got = malloc(ti->bytes);
    kdc_rt_train_state_get(t, k, got);
    double e = compare(got, want->st.data[j], ti->bytes, want->st.dtype[j], FIT_ATOL, FIT_RTOL);
    worst = e > worst ? e : worst;
    free(got);
  }
  kdc_rt_train_destroy(t);
  free(y);
  return worst;
}

double lf_check_plan(const lf_case *c) {
  struct ref *ref = reference(c->example, c->optimizer);
  double worst = 0;
  for (int fit = 0; fit <= (int)ref->fit; fit++) {
    char name[128];
    snprintf(name, sizeof name, "lf-%s-%s-%d.plan", c->example, c->mesh, fit);
    char *plan = e2e_path(name);
    compile_plan(c, fit, plan);
    kdc_rt_plan *p = NULL;
    assert_null(kdc_rt_plan_load(plan, &p));
    double e = plan_predict(p, &ref->b, fit ? &ref->t : &ref->p);
    worst = e > worst ? e : worst;
    if (fit) e = plan_fit(p, &ref->b, &ref->t);
    worst = e > worst ? e : worst;
    kdc_rt_plan_release(p);
    remove(plan);
    free(plan);
  }
  return worst;
}
