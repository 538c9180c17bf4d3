/*
 * frontend/weights.c: giving the module's weights their values.
 *
 * Sources: a safetensors file, a TF.js model.json (its weightsManifest and
 * the .bin shards beside it), or Keras' initialisers (init.c).  Tensors are
 * matched to variables (KERAS.md 2.2) by, in order of preference:
 *   1. the exact Keras 3 path ("sequential/d1/kernel");
 *   2. the path without its leading model-name segment ("d1/kernel");
 *   3. "<layer name>/<weight name>", also with the tf.keras 2 weight name
 *      (DepthwiseConv2D "depthwise_kernel");
 *   4. for a weight Keras creates without a name (add_weight() with none:
 *      ConvNeXt's LayerScale), "<layer path>/variable_<N>": Keras names such
 *      weights from one counter per Python session (variable, variable_1,
 *      ...), so N depends on what else the exporting process built;
 * after stripping a trailing ":0" from the tensor name.  Every variable must
 * get exactly one tensor of its shape, and every tensor must bind a variable
 * (TF.js "optimizer" group entries are ignored): anything else is an error
 * naming the variable or tensor and both shapes.  The optimizer state of a
 * kdc training checkpoint ("adam/iteration", "adam/d1_kernel_momentum":
 * kdc_safetensors_checkpoint_optimizer) binds no variable and is no error.
 * The object-tree names of
 * `.keras` HDF5 files (layers/dense/vars/0) are not matched yet.
 */
#include <json-c/json.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/io.h"
#include "common/kfiles.h"
#include "frontend/frontend.h"
#include "frontend/weights_src.h"

typedef kdc_fe_src_tensor src_tensor;
typedef kdc_fe_source source;

void kdc_fe_src_free(source *s) {
  for (size_t i = 0; i < s->n; i++) free(s->t[i].name), free(s->t[i].raw), free(s->t[i].data);
  free(s->t);
}

src_tensor *kdc_fe_src_add(source *s, const char *name) {
  KDC_GROW(s->t, s->cap, s->n + 1);
  src_tensor *t = &s->t[s->n++];
  memset(t, 0, sizeof *t);
  t->raw = kdc_xstrdup(name);
  t->name = kdc_xstrdup(name);
  size_t len = strlen(t->name);
  if (len > 2 && !strcmp(t->name + len - 2, ":0")) t->name[len - 2] = 0;
  return t;
}

static kdc_status load_safetensors(const char *path, source *s) {
  kdc_safetensors *st = NULL;
  KDC_RETURN_IF_ERROR(kdc_safetensors_open(path, &st));
  kdc_status err = NULL;
  char opt[128];
  bool checkpoint = kdc_safetensors_checkpoint_optimizer(st, opt, sizeof opt);
  for (size_t i = 0; i < kdc_safetensors_count(st) && !err; i++) {
    const kdc_st_tensor *x = kdc_safetensors_get(st, i);
    src_tensor *t = kdc_fe_src_add(s, x->name);
    t->used = checkpoint && kdc_safetensors_is_optimizer_tensor(opt, x->name);
    t->shape.rank = x->rank;
    for (int d = 0; d < x->rank; d++) t->shape.dims[d] = x->dims[d];
    size_t n = x->nbytes / kdc_io_dtype_size(x->dtype);
    t->data = kdc_xmalloc(sizeof(float) * (n + 1));
    if (x->dtype == KDC_IO_DTYPE_I64 || x->dtype == KDC_IO_DTYPE_I32) {
      for (size_t k = 0; k < n; k++)
        t->data[k] = x->dtype == KDC_IO_DTYPE_I64
                         ? (float)(int64_t)kdc_load_le64((const uint8_t *)x->data + 8 * k)
                         : (float)(int32_t)kdc_load_le32((const uint8_t *)x->data + 4 * k);
    } else {
      err = kdc_safetensors_copy_f32(st, x, t->data);
    }
  }
  kdc_safetensors_close(st);
  return err;
}

static float half_to_float(uint16_t h) {
  int e = (h >> 10) & 31, m = h & 1023;
  float v = e == 0 ? ldexpf((float)m, -24) : e == 31 ? (m ? NAN : INFINITY)
                                                    : ldexpf((float)(m | 1024), e - 25);
  return (h & 0x8000) ? -v : v;
}

/* Is |rel| a path inside the model's folder: relative, no ".." component?
 * (tensorflowjs_converter writes bare file names; a manifest must not make
 * kdc read files elsewhere.) */
static bool inside_folder(const char *rel) {
  if (rel[0] == '/') return false;
  for (const char *c = rel; *c;) {
    size_t n = strcspn(c, "/");
    if (n == 2 && c[0] == '.' && c[1] == '.') return false;
    c += n;
    if (*c == '/') c++;
  }
  return true;
}

/* TF.js weightsManifest (KERAS.md 3.2): groups of shards, raw LE values. */
static kdc_status load_tfjs(const kdc_keras_model *m, const char *json_path, json_object *man,
                            source *s) {
  const char *f = json_path;
  if (!json_object_is_type(man, json_type_array))
    return KDC_ERR(KDC_INVALID_INPUT, "%s: weightsManifest: expected a list of weight groups", f);
  const char *slash = strrchr(json_path, '/');
  int dirlen = slash ? (int)(slash - json_path + 1) : 0;
  for (size_t g = 0; g < json_object_array_length(man); g++) {
    json_object *grp = json_object_array_get_idx(man, g);
    json_object *paths = kdc_fe_get(grp, "paths"), *ws = kdc_fe_get(grp, "weights");
    if (!json_object_is_type(paths, json_type_array) || !json_object_is_type(ws, json_type_array))
      return KDC_ERR(KDC_INVALID_INPUT, "%s: weightsManifest[%zu]: expected \"paths\" and "
                     "\"weights\" lists", f, g);
    uint8_t *buf = NULL;
    size_t len = 0;
    for (size_t p = 0; p < json_object_array_length(paths); p++) {
      json_object *pj = json_object_array_get_idx(paths, p);
      if (!json_object_is_type(pj, json_type_string) || !json_object_get_string_len(pj)) {
        free(buf);
        return KDC_ERR(KDC_INVALID_INPUT, "%s: weightsManifest[%zu].paths[%zu]: expected a shard file name",
                       f, g, p);
      }
      const char *rel = json_object_get_string(pj);
      if (!inside_folder(rel)) {
        free(buf);
        return KDC_ERR(KDC_INVALID_INPUT, "%s: weightsManifest[%zu].paths[%zu]: \"%s\": a shard "
                       "must lie in the model's folder (a relative path without \"..\")", f, g, p,
                       rel);
      }
      char *full = NULL;
      if (asprintf(&full, "%.*s%s", dirlen, json_path, rel) < 0) full = NULL;
      void *data = NULL;
      size_t n = 0;
      kdc_status st = full ? kdc_file_read_all(full, &data, &n) : KDC_ERR(KDC_OUT_OF_MEMORY, "oom");
      free(full);
      if (st) {
        free(buf);
        return kdc_status_annotate(st, "%s: weightsManifest[%zu].paths[%zu]", f, g, p);
      }
      buf = kdc_xrealloc(buf, len + n + 1);
      memcpy(buf + len, data, n);
      len += n;
      free(data);
    }
    size_t off = 0;
    kdc_status err = NULL;
    for (size_t w = 0; w < json_object_array_length(ws) && !err; w++) {
      json_object *e = json_object_array_get_idx(ws, w);
      char at[96];
      snprintf(at, sizeof at, "weightsManifest[%zu].weights[%zu]", g, w);
      json_object *nm = kdc_fe_get(e, "name");
      const char *dt = json_object_get_string(kdc_fe_get(e, "dtype"));
      json_object *q = kdc_fe_get(e, "quantization");
      kdc_kshape shape;
      if (!nm || !json_object_is_type(nm, json_type_string)) {
        err = KDC_ERR(KDC_INVALID_INPUT, "%s: %s.name: expected a string", f, at);
        break;
      }
      err = kdc_fe_parse_shape(m, kdc_fe_get(e, "shape"), at, &shape);
      if (err) break;
      int64_t n = kdc_kshape_numel(&shape);
      const char *qdt = q ? json_object_get_string(kdc_fe_get(q, "dtype")) : NULL;
      size_t es = qdt ? (!strcmp(qdt, "uint8") ? 1 : 2) : (dt && !strcmp(dt, "bool")) ? 1 : 4;
      if (qdt && strcmp(qdt, "uint8") && strcmp(qdt, "uint16") && strcmp(qdt, "float16")) {
        err = KDC_ERR(KDC_UNSUPPORTED, "%s: %s.quantization.dtype: \"%s\" is not supported", f, at, qdt);
        break;
      }
      /* TF.js dequantizes uint8/uint16 as v * scale + min: without them every
       * weight silently became 0 */
      for (int k = 0; k < 2 && qdt && strcmp(qdt, "float16") && !err; k++) {
        const char *key = k ? "min" : "scale";
        json_object *v = kdc_fe_get(q, key);
        if (!json_object_is_type(v, json_type_double) && !json_object_is_type(v, json_type_int))
          err = KDC_ERR(KDC_INVALID_INPUT, "%s: %s.quantization.%s: expected a number for %s "
                        "quantization", f, at, key, qdt);
      }
      if (err) break;
      if (!qdt && dt && strcmp(dt, "float32") && strcmp(dt, "int32") && strcmp(dt, "bool")) {
        err = KDC_ERR(KDC_UNSUPPORTED, "%s: %s.dtype: \"%s\" weights are not supported", f, at, dt);
        break;
      }
      if (n < 0 || off + (size_t)n * es > len) {
        err = KDC_ERR(KDC_INVALID_INPUT, "%s: %s: the shard files of group %zu hold %zu bytes, "
                      "too few for weight \"%s\"", f, at, g, len, json_object_get_string(nm));
        break;
      }
      const char *grpname = json_object_get_string(kdc_fe_get(e, "group"));
      if (grpname && !strcmp(grpname, "optimizer")) {
        off += (size_t)n * es;
        continue;
      }
      src_tensor *t = kdc_fe_src_add(s, json_object_get_string(nm));
      snprintf(t->where, sizeof t->where, "%s", at);
      t->shape = shape;
      t->data = kdc_xmalloc(sizeof(float) * ((size_t)n + 1));
      double scale = q ? json_object_get_double(kdc_fe_get(q, "scale")) : 1;
      double mn = q ? json_object_get_double(kdc_fe_get(q, "min")) : 0;
      const uint8_t *p = buf + off;
      for (int64_t i = 0; i < n; i++) {
        float v;
        if (qdt && !strcmp(qdt, "uint8")) v = (float)(p[i] * scale + mn);
        else if (qdt && !strcmp(qdt, "uint16")) v = (float)(kdc_load_le16(p + 2 * i) * scale + mn);
        else if (qdt) v = half_to_float(kdc_load_le16(p + 2 * i));
        else if (dt && !strcmp(dt, "int32")) v = (float)(int32_t)kdc_load_le32(p + 4 * i);
        else if (dt && !strcmp(dt, "bool")) v = p[i] ? 1.0f : 0.0f;
        else {
          uint32_t u = kdc_load_le32(p + 4 * i);
          memcpy(&v, &u, 4);
        }
        t->data[i] = v;
      }
      off += (size_t)n * es;
    }
    free(buf);
    KDC_RETURN_IF_ERROR(err);
  }
  return NULL;
}

bool kdc_kshape_equal(const kdc_kshape *a, const kdc_kshape *b) {
  if (a->rank != b->rank) return false;
  for (int i = 0; i < a->rank; i++)
    if (a->dims[i] != b->dims[i]) return false;
  return true;
}

/* The candidate name of rule |r| for |v|, or NULL. */
static const char *candidate(const kdc_keras_model *m, const kdc_keras_var *v, int r, char *buf,
                             size_t n) {
  const char *slash = strchr(v->path, '/');
  const kdc_keras_layer *l = v->layer;
  const char *rel = v->path + strlen(l->path) + 1; /* "kernel", "lstm_cell/kernel" */
  switch (r) {
  case 0: return v->path;
  case 1: return slash && l->model->sequential ? slash + 1 : NULL;
  case 2: snprintf(buf, n, "%s/%s", l->name, v->name); return buf;
  case 3:
    if (!v->legacy_name) return NULL;
    snprintf(buf, n, "%s/%s", l->name, v->legacy_name);
    return buf;
  case 4: snprintf(buf, n, "%s/%s", l->name, rel); return buf;
  case 5: /* TF.js / tf.keras 2 Bidirectional: "bidirectional/forward_lstm/kernel" */
    if (!l->wrapper) return NULL;
    snprintf(buf, n, "%s/%s/%s", l->wrapper->name, l->name, v->name);
    return buf;
  case 6: /* tf.keras 2 TimeDistributed: "time_distributed/kernel" */
    if (!l->wrapper || strcmp(l->wrapper->class_name, "TimeDistributed")) return NULL;
    snprintf(buf, n, "%s/%s", l->wrapper->name, rel);
    return buf;
  default: return NULL;
  }
}

/* Rule 4 above: |t| is "<layer path>/variable_<digits>" for an unnamed |v|. */
static bool unnamed_match(const kdc_keras_var *v, const char *t) {
  size_t lp = strlen(v->layer->path);
  if (strcmp(v->name, "variable") || strncmp(t, v->layer->path, lp) ||
      strncmp(t + lp, "/variable_", 10))
    return false;
  const char *d = t + lp + 10;
  if (!*d) return false;
  for (; *d; d++)
    if (*d < '0' || *d > '9') return false;
  return true;
}

static kdc_status bind_from(const kdc_keras_model *m, kdc_module *mod, source *s) {
  int nv = m->n_vars;
  int *match = kdc_xmalloc(sizeof(int) * (size_t)(nv + 1));
  for (int i = 0; i < nv; i++) match[i] = -1;
  for (int r = 0; r < 8; r++)
    for (int i = 0; i < nv; i++) {
      if (match[i] >= 0) continue;
      char buf[512];
      const char *c = r < 7 ? candidate(m, m->vars[i], r, buf, sizeof buf) : NULL;
      if (!c && r < 7) continue;
      for (size_t k = 0; k < s->n; k++)
        if (!s->t[k].used && (c ? !strcmp(s->t[k].name, c) : unnamed_match(m->vars[i], s->t[k].name))) {
          match[i] = (int)k;
          s->t[k].used = true;
          break;
        }
    }
  kdc_status st = NULL;
  char b1[160], b2[160];
  for (int i = 0; i < nv && !st; i++) {
    const kdc_keras_var *v = m->vars[i];
    if (match[i] < 0) {
      st = KDC_ERR(KDC_INVALID_INPUT, "%s: no tensor for variable \"%s\" %s (layer \"%s\", %s: %s)",
                   s->file, v->path, kdc_kshape_str(&v->shape, b1, sizeof b1), v->layer->name,
                   kdc_fe_file(m), v->layer->loc);
      break;
    }
    src_tensor *t = &s->t[match[i]];
    if (!kdc_kshape_equal(&t->shape, &v->shape)) {
      st = KDC_ERR(KDC_INVALID_INPUT, "%s: %s%stensor \"%s\" has shape %s but variable \"%s\" "
                   "needs %s", s->file, t->where, *t->where ? ": " : "", t->raw,
                   kdc_kshape_str(&t->shape, b1, sizeof b1), v->path,
                   kdc_kshape_str(&v->shape, b2, sizeof b2));
      break;
    }
    kdc_weight *w = kdc_ir_module_find_weight(mod, v->path);
    if (!w) {
      st = KDC_ERR(KDC_INTERNAL, "module has no weight \"%s\": not lowered from this model", v->path);
      break;
    }
    int64_t n = kdc_kshape_numel(&v->shape);
    w->data = kdc_arena_alloc(mod->arena, kdc_type_bytes(&w->type) + 1);
    if (v->dtype == KDC_DTYPE_I64)
      for (int64_t k = 0; k < n; k++) ((int64_t *)w->data)[k] = (int64_t)t->data[k];
    else
      memcpy(w->data, t->data, sizeof(float) * (size_t)n);
  }
  for (size_t k = 0; k < s->n && !st; k++)
    if (!s->t[k].used)
      st = KDC_ERR(KDC_INVALID_INPUT, "%s: %s%stensor \"%s\" %s matches no variable of the model "
                   "(%s)", s->file, s->t[k].where, *s->t[k].where ? ": " : "", s->t[k].raw,
                   kdc_kshape_str(&s->t[k].shape, b1, sizeof b1), kdc_fe_file(m));
  free(match);
  return st;
}

static kdc_status bind_init(const kdc_keras_model *m, kdc_module *mod, uint64_t seed) {
  for (int i = 0; i < m->n_vars; i++) {
    const kdc_keras_var *v = m->vars[i];
    kdc_weight *w = kdc_ir_module_find_weight(mod, v->path);
    if (!w) return KDC_ERR(KDC_INTERNAL, "module has no weight \"%s\"", v->path);
    w->data = kdc_arena_alloc(mod->arena, kdc_type_bytes(&w->type) + 1);
    KDC_RETURN_IF_ERROR(kdc_frontend_init_var(m, v, seed, w->data));
  }
  return NULL;
}

/* compile holds every initial value in memory (and then in the plan): a
 * model whose variables need more than the machine has is refused, naming
 * the largest, before anything is allocated (it used to abort in the
 * arena: `units: 100000000` in a Dense). */
static kdc_status check_memory(const kdc_keras_model *m) {
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || page <= 0) return NULL;
  double have = (double)pages * (double)page, need = 0, most = -1;
  const kdc_keras_var *big = NULL;
  for (int i = 0; i < m->n_vars; i++) {
    const kdc_keras_var *v = m->vars[i];
    double b = (double)kdc_kshape_numel(&v->shape) * (v->dtype == KDC_DTYPE_I64 ? 8 : 4);
    need += b;
    if (b > most) most = b, big = v;
  }
  if (need <= have) return NULL;
  char b1[160];
  return KDC_ERR(KDC_INVALID_INPUT, "%s: %s: the model's variables need %.0f bytes, more than this "
                 "machine's %.0f bytes of memory; the largest is \"%s\" %s (%.0f bytes, layer \"%s\")",
                 kdc_fe_file(m), big->layer->loc, need, have, big->path,
                 kdc_kshape_str(&big->shape, b1, sizeof b1), most, big->layer->name);
}

static bool ends_with(const char *s, const char *suf) {
  size_t a = strlen(s), b = strlen(suf);
  return a >= b && !strcmp(s + a - b, suf);
}

/* A .weights.h5 / legacy .h5 / .keras file given as --weights (recognised
 * by its bytes, whatever its name says). */
static kdc_status load_keras_file(const kdc_keras_model *m, const char *path, source *s) {
  void *data = NULL;
  size_t len = 0;
  KDC_RETURN_IF_ERROR(kdc_file_read_max(path, kdc_fe_weights_cap() + KDC_JSON_MAX_BYTES,
                                        "a weights file", &data, &len));
  kdc_status st = NULL;
  if (kdc_is_zip(data, len)) {
    kdc_zip_member w = {"model.weights.h5", kdc_fe_weights_cap(), true, NULL, 0};
    st = kdc_zip_read(path, data, len, &w, 1);
    if (!st) {
      char *name = NULL;
      if (asprintf(&name, "%s: model.weights.h5", path) < 0) name = NULL;
      st = kdc_fe_h5_source(m, name ? name : path, w.data, w.len, s);
      free(name);
      free(w.data);
    }
  } else if (len > kdc_fe_weights_cap()) {
    st = KDC_ERR(KDC_INVALID_INPUT, "%s: %zu bytes, past kdc's limit of %zu bytes for a weights "
                 "file", path, len, kdc_fe_weights_cap());
  } else {
    st = kdc_fe_h5_source(m, path, data, len, s);
  }
  free(data);
  return st;
}

kdc_status kdc_frontend_init_weights(const kdc_keras_model *m, kdc_module *mod, uint64_t seed) {
  KDC_RETURN_IF_ERROR(check_memory(m));
  return bind_init(m, mod, seed);
}

kdc_status kdc_frontend_bind_weights(const kdc_keras_model *m, kdc_module *mod,
                                     const char *weights_path, uint64_t seed) {
  KDC_RETURN_IF_ERROR(check_memory(m));
  /* A TF.js model.json carries its own weights: use them (a missing shard is
   * an error, never a silent fall-back to random initialisation). */
  if (!weights_path && m->weights_manifest) weights_path = m->file;
  if (!weights_path && m->h5_image) {
    source s = {m->h5_name, NULL, 0, 0};
    kdc_status st = kdc_fe_h5_source(m, m->h5_name, m->h5_image, m->h5_len, &s);
    if (!st) st = bind_from(m, mod, &s);
    kdc_fe_src_free(&s);
    return st;
  }
  if (!weights_path) return bind_init(m, mod, seed);
  source s = {weights_path, NULL, 0, 0};
  kdc_status st;
  if (ends_with(weights_path, ".h5") || ends_with(weights_path, ".hdf5") ||
      ends_with(weights_path, ".keras")) {
    st = load_keras_file(m, weights_path, &s);
  } else if (ends_with(weights_path, ".json")) {
    kdc_keras_model *wm = NULL;
    const kdc_keras_model *src = m;
    st = NULL;
    if (strcmp(weights_path, m->file)) st = kdc_frontend_load(weights_path, &wm), src = wm;
    if (!st && !src->weights_manifest)
      st = KDC_ERR(KDC_INVALID_INPUT, "%s: no weightsManifest: not a TensorFlow.js model.json",
                   weights_path);
    if (!st) st = load_tfjs(src, weights_path, src->weights_manifest, &s);
    kdc_frontend_free(wm);
  } else {
    st = load_safetensors(weights_path, &s);
  }
  if (!st) st = bind_from(m, mod, &s);
  kdc_fe_src_free(&s);
  return st;
}
