/*
 * frontend/keras_files.c: Keras' own files in (docs/frontend.md, "Keras
 * files").
 *
 *   - `.keras` archives (what Keras 3 model.save() writes): a zip holding
 *     config.json (the model, with its compile_config), metadata.json
 *     (keras_version) and model.weights.h5;
 *   - `*.weights.h5` (model.save_weights()) and the archive's
 *     model.weights.h5: Keras 3's object-path layout, where a variable lives
 *     at `layers/<key>/vars/<i>` -- <key> the snake_case class name made
 *     unique per model in layer order (dense, dense_1, ...; saving_lib.py
 *     `_save_container_state`), <i> its index among the layer's own
 *     variables; sublayers under their Python attribute (`cell` of an RNN,
 *     `forward_layer`/`backward_layer` of Bidirectional, `layer` of a
 *     wrapper, `query_dense`... of MultiHeadAttention), nested models under
 *     `layers/<key>/layers/...`;
 *   - legacy tf.keras 2 HDF5 (`model.save('m.h5')`): the `model_config`
 *     attribute and the `model_weights` group (or, for a weights file, the
 *     root) with `layer_names` and each layer's `weight_names`.
 *
 * The zip and HDF5 containers are read by common/zip.c and common/h5.c
 * (libzip, the HDF5 C library).  Weights become a weights.c source: all of
 * it is read and checked before any variable of the module is given data.
 */
#include <ctype.h>
#include <json-c/json.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/kfiles.h"
#include "frontend/frontend.h"
#include "frontend/weights_src.h"

/* Caps on what kdc reads from an archive. */
#define CAP_JSON ((size_t)64 << 20)     /* config.json, model_config */
#define CAP_META ((size_t)1 << 20)      /* metadata.json */

size_t kdc_fe_weights_cap(void) {
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  size_t cap = (size_t)16 << 30;
  if (pages > 0 && page > 0 && (double)pages * (double)page < (double)cap)
    cap = (size_t)pages * (size_t)page;
  const char *e = getenv("KDC_TEST_WEIGHTS_CAP"); /* tests: a small cap for the zip bomb cases */
  if (e && atoll(e) > 0) cap = (size_t)atoll(e);
  return cap;
}

/* keras.src.utils.naming.to_snake_case. */
static void snake_case(const char *name, char *out, size_t n) {
  char a[256], b[512];
  size_t k = 0;
  for (const char *c = name; *c && k + 1 < sizeof a; c++)
    if (isalnum((unsigned char)*c) || *c == '_') a[k++] = *c;
  a[k] = 0;
  /* (.)([A-Z][a-z]+) -> \1_\2, leftmost non-overlapping matches */
  size_t j = 0;
  for (size_t i = 0; i < k && j + 3 < sizeof b;) {
    size_t e = i + 2;
    if (i + 2 < k && isupper((unsigned char)a[i + 1]) && islower((unsigned char)a[i + 2])) {
      while (e < k && islower((unsigned char)a[e])) e++;
      b[j++] = a[i];
      b[j++] = '_';
      for (size_t q = i + 1; q < e && j + 2 < sizeof b; q++) b[j++] = a[q];
      i = e;
    } else {
      b[j++] = a[i++];
    }
  }
  b[j] = 0;
  /* ([a-z])([A-Z]) -> \1_\2, then lower case */
  size_t o = 0;
  for (size_t i = 0; b[i] && o + 3 < n; i++) {
    out[o++] = (char)tolower((unsigned char)b[i]);
    if (islower((unsigned char)b[i]) && isupper((unsigned char)b[i + 1])) {
      out[o++] = '_';
      out[o++] = (char)tolower((unsigned char)b[++i]);
    }
  }
  out[o] = 0;
}

/* Keras' `model.layers` order of a Functional model (ops/function.py
 * map_graph): a depth-first walk from the outputs gives every layer the
 * index of its first visit and every node a place in a topological order;
 * node depths are then propagated from the outputs (a layer takes its
 * deepest node's depth); layers sort by decreasing depth, then by first
 * visit.  A config written by Keras lists its layers in this order; one
 * written otherwise may not, and the weights file numbers layers by it. */
typedef struct walk {
  const kdc_keras_model *m;
  int *first;       /* layer -> first visit index, -1 */
  int n_first;
  int *state;       /* per (layer, node): 0 new, 1 in progress, 2 done; flattened */
  int *node_base;   /* layer -> offset into state / depth */
  int *topo;        /* finished nodes, inputs first */
  int n_topo;
} walk;

static bool is_model_input(const kdc_keras_model *m, kdc_keras_ref r) {
  for (int i = 0; i < m->n_inputs; i++)
    if (m->inputs[i].layer == r.layer && m->inputs[i].node == r.node &&
        m->inputs[i].tensor == r.tensor)
      return true;
  return false;
}

static void walk_ref(walk *w, kdc_keras_ref r) {
  const kdc_keras_model *m = w->m;
  if (r.layer < 0 || r.layer >= m->n_layers) return;
  const kdc_keras_layer *l = &m->layers[r.layer];
  if (r.node < 0 || r.node >= l->n_nodes) return;
  int id = w->node_base[r.layer] + r.node;
  if (w->state[id]) return;  /* done (or a cycle, which the graph walk refused already) */
  if (w->first[r.layer] < 0) w->first[r.layer] = w->n_first++;
  w->state[id] = 1;
  if (!is_model_input(m, r)) {
    const kdc_keras_node *n = &l->nodes[r.node];
    for (int i = 0; i < n->n_in; i++) walk_ref(w, n->in[i]);
    for (int i = 0; i < n->n_kw; i++) walk_ref(w, n->kw[i]);
  }
  w->state[id] = 2;
  w->topo[w->n_topo++] = id;
}

/* |rank|[i]: the position of layer i in Keras' order (every layer gets one;
 * a layer the outputs do not reach goes last, in config order). */
static void keras_order(const kdc_keras_model *m, int *rank) {
  int nl = m->n_layers;
  if (m->sequential) {
    for (int i = 0; i < nl; i++) rank[i] = i;
    return;
  }
  walk w = {m, kdc_xmalloc(sizeof(int) * (size_t)(nl + 1)), 0, NULL,
            kdc_xmalloc(sizeof(int) * (size_t)(nl + 1)), NULL, 0};
  int total = 0;
  for (int i = 0; i < nl; i++) w.first[i] = -1, w.node_base[i] = total, total += m->layers[i].n_nodes;
  w.state = kdc_xcalloc((size_t)total + 1, sizeof(int));
  w.topo = kdc_xmalloc(sizeof(int) * ((size_t)total + 1));
  for (int i = 0; i < m->n_outputs; i++) walk_ref(&w, m->outputs[i]);
  int *ndepth = kdc_xcalloc((size_t)total + 1, sizeof(int));
  int *ldepth = kdc_xcalloc((size_t)nl + 1, sizeof(int));
  for (int k = w.n_topo - 1; k >= 0; k--) {
    int id = w.topo[k], li = 0;
    while (li + 1 < nl && w.node_base[li + 1] <= id) li++;
    /* skip layers without nodes that share the base */
    while (li < nl && (id < w.node_base[li] || id >= w.node_base[li] + m->layers[li].n_nodes)) li++;
    int d = ndepth[id] > ldepth[li] ? ndepth[id] : ldepth[li];
    ldepth[li] = d;
    ndepth[id] = d;
    kdc_keras_ref self = {li, id - w.node_base[li], 0};
    if (is_model_input(m, self)) continue;
    const kdc_keras_node *n = &m->layers[li].nodes[id - w.node_base[li]];
    for (int i = 0; i < n->n_in + n->n_kw; i++) {
      kdc_keras_ref r = i < n->n_in ? n->in[i] : n->kw[i - n->n_in];
      if (r.layer < 0 || r.layer >= nl || r.node < 0 || r.node >= m->layers[r.layer].n_nodes) continue;
      int pid = w.node_base[r.layer] + r.node;
      if (!w.state[pid]) continue;
      if (ndepth[pid] < d + 1) ndepth[pid] = d + 1;
    }
  }
  /* sort: reached layers by (depth desc, first visit asc), then the rest */
  int pos = 0;
  for (int i = 0; i < nl; i++) rank[i] = -1;
  for (;;) {
    int best = -1;
    for (int i = 0; i < nl; i++) {
      if (rank[i] >= 0 || w.first[i] < 0) continue;
      if (best < 0 || ldepth[i] > ldepth[best] ||
          (ldepth[i] == ldepth[best] && w.first[i] < w.first[best]))
        best = i;
    }
    if (best < 0) break;
    rank[best] = pos++;
  }
  for (int i = 0; i < nl; i++)
    if (rank[i] < 0) rank[i] = pos++;
  free(w.first), free(w.state), free(w.node_base), free(w.topo), free(ndepth), free(ldepth);
}

/* The key of layer |idx| of |m|: its snake_case class name, "_<k>" for the
 * k-th repeat in Keras' layer order. */
static void layer_key(const kdc_keras_model *m, int idx, char *out, size_t n) {
  char s[256], t[256];
  int *rank = kdc_xmalloc(sizeof(int) * (size_t)(m->n_layers + 1));
  keras_order(m, rank);
  snake_case(m->layers[idx].class_name, s, sizeof s);
  int seen = 0;
  for (int i = 0; i < m->n_layers; i++) {
    if (rank[i] >= rank[idx]) continue;
    snake_case(m->layers[i].class_name, t, sizeof t);
    seen += !strcmp(s, t);
  }
  free(rank);
  if (seen) snprintf(out, n, "%s_%d", s, seen);
  else snprintf(out, n, "%s", s);
}

static bool is_rnn(const char *cls) {
  return !strcmp(cls, "LSTM") || !strcmp(cls, "GRU") || !strcmp(cls, "SimpleRNN");
}

/* "layers/<key>/" of layer |l| (wrapped layers: the wrapper's, then the
 * attribute), appended to |buf|. */
static void layer_prefix(const kdc_keras_layer *l, char *buf, size_t n) {
  if (l->wrapper) {
    layer_prefix(l->wrapper, buf, n);
    const char *attr = "layer/";
    if (!strcmp(l->wrapper->class_name, "Bidirectional"))
      attr = l->wrapper->inner[1] == l ? "backward_layer/" : "forward_layer/";
    strncat(buf, attr, n - strlen(buf) - 1);
    return;
  }
  const kdc_keras_model *m = l->model;
  if (m->parent) {
    const kdc_keras_layer *holder = NULL;
    for (int i = 0; i < m->parent->n_layers && !holder; i++)
      if (m->parent->layers[i].sub == m) holder = &m->parent->layers[i];
    if (holder) layer_prefix(holder, buf, n);
  }
  char key[300];
  layer_key(m, (int)(l - m->layers), key, sizeof key);
  size_t len = strlen(buf);
  snprintf(buf + len, n - len, "layers/%s/", key);
}

/* The sublayer group of variable |v| inside its layer: "cell/",
 * "query_dense/", or "" for the layer's own variables. */
static const char *var_group(const kdc_keras_var *v) {
  const kdc_keras_layer *l = v->layer;
  if (is_rnn(l->class_name)) return "cell/";
  if (!strcmp(l->class_name, "MultiHeadAttention")) {
    const char *rel = v->path + strlen(l->path) + 1;
    static const char *const map[][2] = {{"query/", "query_dense/"}, {"key/", "key_dense/"},
                                         {"value/", "value_dense/"},
                                         {"attention_output/", "output_dense/"}};
    for (size_t i = 0; i < 4; i++)
      if (!strncmp(rel, map[i][0], strlen(map[i][0]))) return map[i][1];
  }
  return "";
}

/* The wrapped layer's kernel of a SpectralNormalization, which Keras also
 * tracks as the wrapper's own first variable (`self.kernel =
 * self.layer.kernel`), so its weights file holds it twice. */
static bool sn_kernel(const kdc_keras_var *v) {
  const kdc_keras_layer *w = v->layer->wrapper;
  return w && !strcmp(w->class_name, "SpectralNormalization") &&
         (!strcmp(v->name, "kernel") || !strcmp(v->name, "embeddings"));
}

bool kdc_frontend_h5_alias(const kdc_keras_var *v, char *buf, size_t n) {
  if (!sn_kernel(v)) return false;
  buf[0] = 0;
  layer_prefix(v->layer->wrapper, buf, n);
  strncat(buf, "vars/0", n - strlen(buf) - 1);
  return true;
}

void kdc_frontend_h5_path(const kdc_keras_var *v, char *buf, size_t n) {
  buf[0] = 0;
  layer_prefix(v->layer, buf, n);
  const char *g = var_group(v);
  const kdc_keras_layer *l = v->layer;
  /* SpectralNormalization's own variables: the kernel (above), vector_u */
  int idx = !strcmp(l->class_name, "SpectralNormalization") ? 1 : 0;
  for (int i = 0; i < l->n_vars && l->vars[i] != v; i++)
    if (l->vars[i]->layer == l && !strcmp(var_group(l->vars[i]), g)) idx++;
  size_t len = strlen(buf);
  snprintf(buf + len, n - len, "%svars/%d", g, idx);
}

/* ---- reading weights ----------------------------------------------------------- */

static kdc_status dataset_shape(kdc_h5 *h, const char *p, kdc_kshape *shape, kdc_io_dtype *dt) {
  int rank;
  int64_t dims[KDC_IO_MAX_RANK];
  KDC_RETURN_IF_ERROR(kdc_h5_dataset_info(h, p, &rank, dims, dt));
  *shape = kdc_kshape_make(rank, dims);
  return NULL;
}

static kdc_status read_k3(const kdc_keras_model *m, kdc_h5 *h, kdc_fe_source *s) {
  const char *file = kdc_h5_file(h);
  char **mapped = kdc_xcalloc((size_t)m->n_vars + 1, sizeof *mapped);
  char **alias = kdc_xcalloc((size_t)m->n_vars + 1, sizeof *alias);
  kdc_status st = NULL;
  char b1[160], b2[160];
  for (int i = 0; i < m->n_vars && !st; i++) {
    const kdc_keras_var *v = m->vars[i];
    char p[1024];
    if (kdc_frontend_h5_alias(v, p, sizeof p)) alias[i] = kdc_xstrdup(p);
    kdc_frontend_h5_path(v, p, sizeof p);
    mapped[i] = kdc_xstrdup(p);
    if (!kdc_h5_exists(h, p)) {
      st = KDC_ERR(KDC_INVALID_INPUT, "%s: %s: no dataset for variable \"%s\" %s (layer \"%s\", "
                   "%s: %s)", file, p, v->path, kdc_kshape_str(&v->shape, b1, sizeof b1),
                   v->layer->name, kdc_fe_file(m), v->layer->loc);
      break;
    }
    kdc_kshape shape;
    kdc_io_dtype dt;
    st = dataset_shape(h, p, &shape, &dt);
    if (st) break;
    if (!kdc_kshape_equal(&shape, &v->shape)) {
      st = KDC_ERR(KDC_INVALID_INPUT, "%s: %s: dataset has shape %s but variable \"%s\" needs %s",
                   file, p, kdc_kshape_str(&shape, b1, sizeof b1), v->path,
                   kdc_kshape_str(&v->shape, b2, sizeof b2));
      break;
    }
    bool is_float = dt == KDC_IO_DTYPE_F16 || dt == KDC_IO_DTYPE_F32 || dt == KDC_IO_DTYPE_F64;
    bool want_float = v->dtype != KDC_DTYPE_I64;
    if (is_float != want_float) {
      st = KDC_ERR(KDC_INVALID_INPUT, "%s: %s: %s dataset for variable \"%s\", which holds %s", file,
                   p, kdc_io_dtype_name(dt), v->path, want_float ? "floats" : "integers");
      break;
    }
    kdc_fe_src_tensor *t = kdc_fe_src_add(s, v->path);
    snprintf(t->where, sizeof t->where, "%.150s", p);
    t->shape = v->shape;
    size_t ne = (size_t)kdc_kshape_numel(&v->shape);
    t->data = kdc_xmalloc(sizeof(float) * (ne + 1));
    if (want_float) {
      st = kdc_h5_read(h, p, KDC_IO_DTYPE_F32, t->data, ne);
    } else {
      int64_t *tmp = kdc_xmalloc(sizeof(int64_t) * (ne + 1));
      st = kdc_h5_read(h, p, KDC_IO_DTYPE_I64, tmp, ne);
      for (size_t k = 0; k < ne && !st; k++) t->data[k] = (float)tmp[k];
      free(tmp);
    }
  }
  /* every dataset of the model part must be some variable's */
  for (int r = 0; r < 2 && !st; r++) {
    char **l = NULL;
    size_t n = 0;
    st = kdc_h5_list_datasets(h, r ? "vars" : "layers", (size_t)m->n_vars + 1024, &l, &n);
    for (size_t k = 0; k < n && !st; k++) {
      bool found = false;
      for (int i = 0; i < m->n_vars && !found; i++)
        found = (mapped[i] && !strcmp(mapped[i], l[k])) || (alias[i] && !strcmp(alias[i], l[k]));
      if (!found)
        st = KDC_ERR(KDC_INVALID_INPUT, "%s: %s: a dataset that matches no variable of the model "
                     "(%s): the weights file's layers do not match the config", file, l[k],
                     kdc_fe_file(m));
    }
    kdc_h5_free_list(l, n);
  }
  for (int i = 0; i < m->n_vars; i++) free(mapped[i]), free(alias[i]);
  free(mapped);
  free(alias);
  return st;
}

static kdc_status read_legacy(const kdc_keras_model *m, kdc_h5 *h, kdc_fe_source *s) {
  const char *file = kdc_h5_file(h);
  const char *root = kdc_h5_exists(h, "model_weights") ? "model_weights" : "/";
  char **layers = NULL;
  size_t nl = 0;
  KDC_RETURN_IF_ERROR(kdc_h5_attr_strings(h, root, "layer_names", 65536, &layers, &nl));
  int64_t biggest = 0;
  for (int i = 0; i < m->n_vars; i++) {
    int64_t e = kdc_kshape_numel(&m->vars[i]->shape);
    if (e > biggest) biggest = e;
  }
  kdc_status st = NULL;
  for (size_t i = 0; i < nl && !st; i++) {
    char g[1200];
    snprintf(g, sizeof g, "%s%s%s", strcmp(root, "/") ? root : "", strcmp(root, "/") ? "/" : "",
             layers[i]);
    if (!kdc_h5_exists(h, g)) {
      st = KDC_ERR(KDC_INVALID_INPUT, "%s: %s: layer_names lists \"%s\" but the file has no such "
                   "group", file, root, layers[i]);
      break;
    }
    char **w = NULL;
    size_t nw = 0;
    st = kdc_h5_attr_strings(h, g, "weight_names", 65536, &w, &nw);
    for (size_t k = 0; k < nw && !st; k++) {
      char p[2400];
      snprintf(p, sizeof p, "%s/%s", g, w[k]);
      kdc_kshape shape;
      kdc_io_dtype dt;
      st = dataset_shape(h, p, &shape, &dt);
      if (st) break;
      int64_t ne = 1;
      for (int d = 0; d < shape.rank && ne <= biggest; d++) ne *= shape.dims[d];
      char b1[160];
      if (ne > biggest) {
        st = KDC_ERR(KDC_INVALID_INPUT, "%s: %s: dataset %s is larger than every variable of the "
                     "model (%s)", file, p, kdc_kshape_str(&shape, b1, sizeof b1), kdc_fe_file(m));
        break;
      }
      if (dt != KDC_IO_DTYPE_F16 && dt != KDC_IO_DTYPE_F32 && dt != KDC_IO_DTYPE_F64 &&
          dt != KDC_IO_DTYPE_I32 && dt != KDC_IO_DTYPE_I64) {
        st = KDC_ERR(KDC_INVALID_INPUT, "%s: %s: %s dataset; weights are numbers", file, p,
                     kdc_io_dtype_name(dt));
        break;
      }
      kdc_fe_src_tensor *t = kdc_fe_src_add(s, w[k]);
      snprintf(t->where, sizeof t->where, "%.150s", p);
      t->shape = shape;
      t->data = kdc_xmalloc(sizeof(float) * ((size_t)ne + 1));
      st = kdc_h5_read(h, p, KDC_IO_DTYPE_F32, t->data, (size_t)ne);
    }
    for (size_t k = 0; k < nw; k++) free(w[k]);
    free(w);
  }
  for (size_t i = 0; i < nl; i++) free(layers[i]);
  free(layers);
  return st;
}

kdc_status kdc_fe_h5_source(const kdc_keras_model *m, const char *file, const void *img,
                            size_t len, kdc_fe_source *s) {
  kdc_h5 *h = NULL;
  KDC_RETURN_IF_ERROR(kdc_h5_open_image(file, img, len, &h));
  kdc_status st;
  bool legacy = kdc_h5_exists(h, "model_weights");
  if (!legacy) {
    char **l = NULL;
    size_t n = 0;
    st = kdc_h5_attr_strings(h, "/", "layer_names", 65536, &l, &n);
    legacy = !st && l;
    for (size_t i = 0; i < n; i++) free(l[i]);
    free(l);
    if (st) goto done;
  }
  if (legacy) st = read_legacy(m, h, s);
  else if (kdc_h5_exists(h, "layers") || kdc_h5_exists(h, "vars") || m->n_vars == 0)
    st = read_k3(m, h, s);
  else
    st = KDC_ERR(KDC_INVALID_INPUT, "%s: neither a Keras 3 weights file (groups layers/, vars/) "
                 "nor a legacy Keras HDF5 file (layer_names, model_weights)", file);
done:
  kdc_h5_close(h);
  return st;
}

/* ---- reading models ---------------------------------------------------------- */

static char *dup_str(kdc_arena *a, const char *s) { return s ? kdc_arena_strdup(a, s) : NULL; }

kdc_status kdc_fe_load_archive(const char *path, const void *data, size_t len,
                               const kdc_load_options *opt, kdc_keras_model **out) {
  *out = NULL;
  kdc_zip_member mem[3] = {{"config.json", CAP_JSON, true, NULL, 0},
                           {"metadata.json", CAP_META, false, NULL, 0},
                           {"model.weights.h5", kdc_fe_weights_cap(), false, NULL, 0}};
  KDC_RETURN_IF_ERROR(kdc_zip_read(path, data, len, mem, 3));
  char *cfg_name = NULL;
  if (asprintf(&cfg_name, "%s: config.json", path) < 0) cfg_name = NULL;
  kdc_status st = NULL;
  char *version = NULL;
  if (mem[1].data) {
    json_tokener *tok = json_tokener_new();
    json_object *meta = json_tokener_parse_ex(tok, mem[1].data, (int)mem[1].len);
    if (json_tokener_get_error(tok) != json_tokener_success ||
        !json_object_is_type(meta, json_type_object))
      st = KDC_ERR(KDC_INVALID_INPUT, "%s: metadata.json: not a JSON object", path);
    json_object *v = NULL;
    if (!st && json_object_object_get_ex(meta, "keras_version", &v)) {
      if (json_object_is_type(v, json_type_string)) version = kdc_xstrdup(json_object_get_string(v));
      else st = KDC_ERR(KDC_INVALID_INPUT, "%s: metadata.json: keras_version: expected a string", path);
    }
    json_object_put(meta);
    json_tokener_free(tok);
  }
  if (!st && kdc_is_zip(mem[0].data, mem[0].len))
    st = KDC_ERR(KDC_INVALID_INPUT, "%s: config.json: a zip archive inside the archive", path);
  kdc_keras_model *m = NULL;
  kdc_load_options o2 = {0};
  if (opt) o2 = *opt;
  o2.keras_version = version;
  if (!st) st = kdc_frontend_load_text_opts(cfg_name ? cfg_name : path, mem[0].data, mem[0].len, &o2, &m);
  if (!st) {
    if (version) m->keras_version = dup_str(m->arena, version);
    m->source_file = kdc_arena_strdup(m->arena, path);
    m->config_text = mem[0].data, m->config_len = mem[0].len;
    mem[0].data = NULL;
    if (mem[2].data) {
      m->h5_image = mem[2].data, m->h5_len = mem[2].len;
      m->h5_name = kdc_arena_printf(m->arena, "%s: model.weights.h5", path);
      mem[2].data = NULL;
    }
    *out = m;
  }
  free(version);
  free(cfg_name);
  for (int i = 0; i < 3; i++) free(mem[i].data);
  return st;
}

kdc_status kdc_fe_load_legacy_h5(const char *path, const void *data, size_t len,
                                 const kdc_load_options *opt, kdc_keras_model **out) {
  *out = NULL;
  kdc_h5 *h = NULL;
  KDC_RETURN_IF_ERROR(kdc_h5_open_image(path, data, len, &h));
  char *cfg = NULL;
  kdc_status st = kdc_h5_attr_string(h, "/", "model_config", CAP_JSON, &cfg);
  if (!st && !cfg) {
    bool k3 = kdc_h5_exists(h, "layers") || kdc_h5_exists(h, "vars");
    st = KDC_ERR(KDC_INVALID_INPUT, "%s: no model_config attribute: %s", path,
                 k3 ? "a Keras 3 weights file (save_weights), not a model; give the model and "
                      "pass this file with --weights"
                    : "an HDF5 weights file, not a model; give the model and pass this file "
                      "with --weights");
  }
  char *version = NULL;
  if (!st) st = kdc_h5_attr_string(h, "/", "keras_version", 256, &version);
  kdc_h5_close(h);
  char *name = NULL;
  if (!st && asprintf(&name, "%s: model_config", path) < 0) name = NULL;
  kdc_keras_model *m = NULL;
  kdc_load_options o2 = {0};
  if (opt) o2 = *opt;
  o2.keras_version = version;
  if (!st) st = kdc_frontend_load_text_opts(name ? name : path, cfg, strlen(cfg), &o2, &m);
  if (!st) {
    m->source_file = kdc_arena_strdup(m->arena, path);
    m->h5_image = kdc_xmalloc(len ? len : 1);
    memcpy(m->h5_image, data, len);
    m->h5_len = len;
    m->h5_name = kdc_arena_strdup(m->arena, path);
    *out = m;
  }
  free(name);
  free(version);
  free(cfg);
  return st;
}

/* ---- the plan's KERAS section ------------------------------------------------- */

char *kdc_frontend_keras_section(const kdc_keras_model *m, const char *optimizer_json) {
  json_object *o = json_object_new_object();
  /* a Keras 3 config (to_json, .keras config.json) is what load_model reads back */
  bool k3 = m->format == KDC_KERAS_K3 && json_object_is_type(m->root, json_type_object) &&
            kdc_fe_get(m->root, "class_name");
  json_object_object_add(o, "config", k3 ? json_object_get(m->root) : NULL);
  json_object_object_add(o, "keras_version",
                         m->keras_version ? json_object_new_string(m->keras_version) : NULL);
  json_object *vars = json_object_new_array();
  for (int i = 0; i < m->n_vars; i++) {
    const kdc_keras_var *v = m->vars[i];
    char p[1024];
    kdc_frontend_h5_path(v, p, sizeof p);
    json_object *e = json_object_new_array();
    json_object_array_add(e, json_object_new_string(v->path));
    json_object_array_add(e, json_object_new_string(p));
    json_object_array_add(e, json_object_new_boolean(v->trainable));
    if (kdc_frontend_h5_alias(v, p, sizeof p)) json_object_array_add(e, json_object_new_string(p));
    json_object_array_add(vars, e);
  }
  json_object_object_add(o, "vars", vars);
  json_object *opt = optimizer_json ? json_tokener_parse(optimizer_json) : NULL;
  json_object_object_add(o, "optimizer", opt);
  char *s = kdc_xstrdup(json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN));
  json_object_put(o);
  return s;
}
