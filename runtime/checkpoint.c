/*
 * runtime/checkpoint.c: the training state <-> one safetensors file.
 *
 * Save gathers every state tensor (weights, <opt>/iteration, slots; Keras
 * names) from the devices' pieces into global arrays and writes them with
 * kdc_safetensors_write, which is atomic (a temporary file in the target's
 * directory, fsync, rename: a crash leaves the previous file intact).  The
 * file says nothing about the mesh: load splits each global array by the
 * loading plan's shardings, so a checkpoint saved on 2x4 resumes on 1x8 or
 * on one device.  A recurrent weight kept per gate [.., G, u] (and its
 * slots; kdc_rt_train_state_gate_packed) has the same bytes as Keras'
 * gate-packed [.., G*u], the shape the file gives it, on every mesh.
 *
 * Test hook: with KDC_TEST_CRASH_IN_SAVE set in the environment, save writes
 * the first half of the checkpoint's bytes to the temporary file and calls
 * abort() -- a crash in the middle of a save (tests/training/test_fit.c
 * checks the previous checkpoint still loads).
 */
#include <stdlib.h>
#include <string.h>

#include "common/io.h"
#include "runtime/runtime.h"

static void crash_midway(const char *path, const kdc_st_tensor *ts, size_t n) {
  kdc_atomic_file *f = NULL;
  if (kdc_atomic_file_open(path, &f)) abort();
  size_t total = 0;
  for (size_t i = 0; i < n; i++) total += ts[i].nbytes;
  size_t left = total / 2;
  for (size_t i = 0; i < n && left; i++) {
    size_t k = ts[i].nbytes < left ? ts[i].nbytes : left;
    if (kdc_atomic_file_write(f, ts[i].data, k)) abort();
    left -= k;
  }
  fflush(kdc_atomic_file_stream(f));
  abort();
}

/* The shape of state |k| in a checkpoint: the plan's global shape, with
 * the last two dims merged for a weight kept per gate. */
static int file_shape(const kdc_rt_train *t, size_t k, int64_t *dims) {
  const kdc_rt_tensor_info *i = kdc_rt_train_state(t, k);
  int rank = i->rank;
  memcpy(dims, i->dims, sizeof i->dims);
  if (kdc_rt_train_state_gate_packed(t, k) && rank >= 2) {
    dims[rank - 2] *= dims[rank - 1];
    dims[--rank] = 0;
  }
  return rank;
}

kdc_status kdc_rt_train_save(kdc_rt_train *t, const char *path) {
  KDC_RETURN_IF_ERROR(kdc_rt_train_gather(t));  /* processes: the pieces meet on process 0 */
  if (kdc_rt_train_process(t) != 0) return NULL;
  size_t n = kdc_rt_train_state_count(t);
  kdc_st_tensor *ts = kdc_xcalloc(n + 1, sizeof *ts);
  void **bufs = kdc_xcalloc(n + 1, sizeof *bufs);
  for (size_t k = 0; k < n; k++) {
    const kdc_rt_tensor_info *i = kdc_rt_train_state(t, k);
    bufs[k] = kdc_xmalloc(i->bytes ? i->bytes : 1);
    kdc_rt_train_state_get(t, k, bufs[k]);
    ts[k].name = i->name;
    ts[k].dtype = i->dtype;
    ts[k].rank = file_shape(t, k, ts[k].dims);
    ts[k].data = bufs[k];
    ts[k].nbytes = i->bytes;
  }
  if (getenv("KDC_TEST_CRASH_IN_SAVE")) crash_midway(path, ts, n);
  const char *meta[] = {"format", "kdc-train-state", NULL};
  kdc_status st = kdc_safetensors_write(path, ts, n, meta);
  for (size_t k = 0; k < n; k++) free(bufs[k]);
  free(bufs);
  free(ts);
  return st;
}

/* Which state tensors a load needs (load_from). */
typedef enum load_mode {
  LOAD_ALL,       /* every state tensor (--initial-weights of --fit / --evaluate) */
  LOAD_WEIGHTS,   /* the weights; other tensors of the file are ignored (predict) */
  LOAD_PRESENT,   /* those present (the plan's TRAIN_STATE section) */
} load_mode;

static kdc_status load_from(kdc_rt_train *t, const kdc_safetensors *sf, const char *path,
                            load_mode mode) {
  size_t n = kdc_rt_train_state_count(t);
  /* check everything before changing anything */
  for (size_t k = 0; k < n; k++) {
    const kdc_rt_tensor_info *i = kdc_rt_train_state(t, k);
    const kdc_st_tensor *x = kdc_safetensors_find(sf, i->name);
    bool needed = mode == LOAD_ALL || (mode == LOAD_WEIGHTS && kdc_rt_train_state_is_weight(t, k));
    int64_t dims[KDC_IO_MAX_RANK];
    int rank = file_shape(t, k, dims);
    bool ok = x && x->dtype == i->dtype && x->rank == rank && x->nbytes == i->bytes;
    for (int d = 0; ok && d < rank; d++) ok = x->dims[d] == dims[d];
    if (!x && needed)
      return KDC_ERR(KDC_INVALID_INPUT, "%s: no tensor \"%s\" (the plan's %s needs it)", path,
                     i->name, mode == LOAD_ALL ? "training state" : "weights");
    if (x && !ok && (needed || mode == LOAD_PRESENT))
      return KDC_ERR(KDC_INVALID_INPUT, "%s: tensor \"%s\" is %s of %zu bytes; the plan expects "
                     "%s of %llu bytes", path, i->name, kdc_io_dtype_name(x->dtype), x->nbytes,
                     kdc_io_dtype_name(i->dtype), (unsigned long long)i->bytes);
  }
  for (size_t k = 0; k < n; k++) {
    const kdc_rt_tensor_info *i = kdc_rt_train_state(t, k);
    const kdc_st_tensor *x = kdc_safetensors_find(sf, i->name);
    if (!x || (mode == LOAD_WEIGHTS && !kdc_rt_train_state_is_weight(t, k))) continue;
    void *tmp = kdc_xmalloc(i->bytes ? i->bytes : 1);  /* the mapped data may be unaligned */
    memcpy(tmp, x->data, i->bytes);
    kdc_rt_train_state_set(t, k, tmp);
    free(tmp);
  }
  return NULL;
}

static kdc_status load_file(kdc_rt_train *t, const char *path, load_mode mode) {
  kdc_safetensors *sf = NULL;
  KDC_RETURN_IF_ERROR(kdc_safetensors_open(path, &sf));
  kdc_status st = load_from(t, sf, path, mode);
  kdc_safetensors_close(sf);
  return st;
}

kdc_status kdc_rt_train_load(kdc_rt_train *t, const char *path) {
  return load_file(t, path, LOAD_ALL);
}

kdc_status kdc_rt_train_load_weights(kdc_rt_train *t, const char *path) {
  return load_file(t, path, LOAD_WEIGHTS);
}

kdc_status kdc_rt_train_load_initial(kdc_rt_train *t, const char *name, const void *bytes,
                                     size_t size) {
  kdc_safetensors *sf = NULL;
  KDC_RETURN_IF_ERROR(kdc_safetensors_open_mem(name, bytes, size, &sf));
  kdc_status st = load_from(t, sf, name, LOAD_PRESENT);
  kdc_safetensors_close(sf);
  return st;
}

/* ---- Keras' own files: .weights.h5 and .keras (docs/training.md, "Keras files") ----
 *
 * The plan's KERAS section (kdc compile writes it: the Keras 3 config, each
 * variable's path in Keras' weights file, the optimizer's variable layout)
 * maps the state to Keras 3's object-path layout: variable V at its
 * `layers/<key>/.../vars/<i>`, the optimizer at `optimizer/vars/<i>`:
 * iterations, the learning rate (unless it is a schedule), then the slots
 * in blocks (a block of several names interleaved per trainable weight, as
 * Keras' add_optimizer_variables makes them).  Weights that are not
 * training state (frozen ones) come from the plan.  Every array is global:
 * a file saved on 2x4 loads on one device and in Keras alike. */

#include <json-c/json.h>
#include <math.h>
#include <time.h>

#include "common/kfiles.h"

typedef struct keras_map {
  json_object *root;     /* the parsed section */
  json_object *vars;     /* [[path, h5 path, trainable], ...] */
  json_object *opt;      /* or NULL */
  json_object *config;   /* or NULL */
} keras_map;

static kdc_status keras_map_open(const kdc_rt_plan *p, keras_map *k) {
  memset(k, 0, sizeof *k);
  const void *data = NULL;
  size_t size = 0;
  if (!kdc_plan_file_find(p->file, KDC_PLAN_SECTION_KERAS, &data, &size))
    return KDC_ERR(KDC_INVALID_INPUT, "%s: the plan has no keras section (compiled by an older "
                   "kdc): compile it again to read or write Keras files", p->path);
  json_tokener *tok = json_tokener_new();
  k->root = json_tokener_parse_ex(tok, data, (int)size);
  bool ok = json_tokener_get_error(tok) == json_tokener_success;
  json_tokener_free(tok);
  if (!ok || !json_object_object_get_ex(k->root, "vars", &k->vars) ||
      !json_object_is_type(k->vars, json_type_array)) {
    json_object_put(k->root);
    return KDC_ERR(KDC_INVALID_INPUT, "%s: keras section: not the JSON kdc writes", p->path);
  }
  json_object_object_get_ex(k->root, "optimizer", &k->opt);
  json_object_object_get_ex(k->root, "config", &k->config);
  if (k->opt && !json_object_is_type(k->opt, json_type_object)) k->opt = NULL;
  if (k->config && !json_object_is_type(k->config, json_type_object)) k->config = NULL;
  return NULL;
}

static const char *map_str(json_object *e, size_t i) {
  json_object *x = json_object_array_get_idx(e, i);
  return x && json_object_is_type(x, json_type_string) ? json_object_get_string(x) : "";
}

static int find_state(const kdc_rt_train *t, const char *name) {
  for (size_t k = 0; k < kdc_rt_train_state_count(t); k++)
    if (!strcmp(kdc_rt_train_state(t, k)->name, name)) return (int)k;
  return -1;
}

static int find_plan_weight(const kdc_rt_plan *p, const char *name) {
  for (uint32_t w = 0; w < p->prog.n_weights; w++)
    if (!strcmp(p->prog.weights[w].name, name)) return (int)w;
  return -1;
}

kdc_status kdc_rt_keras_opt_layout(json_object *opt, json_object *vars,
                                   bool (*has_state)(void *user, const char *name), void *user,
                                   bool lso, kdc_rt_opt_var **out, size_t *n, int *lr_index) {
  *out = NULL;
  *n = 0;
  *lr_index = -1;
  if (!opt) return NULL;
  json_object *name = NULL, *blocks = NULL, *lrv = NULL;
  json_object_object_get_ex(opt, "name", &name);
  json_object_object_get_ex(opt, "blocks", &blocks);
  json_object_object_get_ex(opt, "lr_variable", &lrv);
  const char *on = json_object_get_string(name);
  char buf[1200];
  snprintf(buf, sizeof buf, "%s/iteration", on);
  if (!has_state(user, buf)) return KDC_ERR(KDC_INTERNAL, "plan: no state %s", buf);
  size_t cap = 8, m = 0;
  kdc_rt_opt_var *e = kdc_xmalloc(sizeof *e * cap);
  int idx = 0;
  if (lso) {
    bool scaled = has_state(user, KDC_LSO_SCALE_EXPONENT) && has_state(user, KDC_LSO_STEP_COUNTER);
    e[m++] = (kdc_rt_opt_var){idx++, NULL, KDC_OPT_ZERO_I32};
    e[m++] = (kdc_rt_opt_var){idx++, NULL, KDC_OPT_ZERO_F32};
    e[m++] = (kdc_rt_opt_var){idx++, scaled ? kdc_xstrdup(KDC_LSO_STEP_COUNTER) : NULL,
                              scaled ? KDC_OPT_STATE : KDC_OPT_SKIP};
    e[m++] = (kdc_rt_opt_var){idx++, scaled ? kdc_xstrdup(KDC_LSO_SCALE_EXPONENT) : NULL,
                              scaled ? KDC_OPT_SCALE : KDC_OPT_SKIP};
  }
  e[m++] = (kdc_rt_opt_var){idx++, kdc_xstrdup(buf), KDC_OPT_STATE};
  if (json_object_get_boolean(lrv)) *lr_index = idx++;
  size_t nv = json_object_array_length(vars);
  kdc_status st = NULL;
  for (size_t b = 0; b < json_object_array_length(blocks) && !st; b++) {
    json_object *bl = json_object_array_get_idx(blocks, b);
    for (size_t v = 0; v < nv && !st; v++) {
      json_object *ve = json_object_array_get_idx(vars, v);
      const char *path = map_str(ve, 0);
      /* Keras' trainable_variables: trainable and trained by this plan */
      if (!json_object_get_boolean(json_object_array_get_idx(ve, 2)) || !has_state(user, path))
        continue;
      for (size_t j = 0; j < json_object_array_length(bl) && !st; j++) {
        char mangled[1024];
        snprintf(mangled, sizeof mangled, "%s", path);
        for (char *c = mangled; *c; c++)
          if (*c == '/') *c = '_';
        snprintf(buf, sizeof buf, "%s/%s_%s", on, mangled,
                 json_object_get_string(json_object_array_get_idx(bl, j)));
        if (!has_state(user, buf)) {
          st = KDC_ERR(KDC_INTERNAL, "plan: no optimizer state %s", buf);
          break;
        }
        KDC_GROW(e, cap, m + 1);
        e[m++] = (kdc_rt_opt_var){idx++, kdc_xstrdup(buf), KDC_OPT_STATE};
      }
    }
  }
  if (st) {
    kdc_rt_opt_vars_free(e, m);
    return st;
  }
  *out = e;
  *n = m;
  return NULL;
}

void kdc_rt_opt_vars_free(kdc_rt_opt_var *e, size_t n) {
  for (size_t q = 0; e && q < n; q++) free(e[q].state);
  free(e);
}

/* One entry of the optimizer's variable list: "optimizer/vars/<i>" <-> state. */
typedef struct opt_entry {
  int index;
  int state;            /* state index, -1 for the kinds without one */
  kdc_rt_opt_kind kind;
} opt_entry;

static bool train_has_state(void *user, const char *name) {
  return find_state(user, name) >= 0;
}

/* The optimizer's variables of |k| matched to the state of |t|: |*n|
 * entries, the learning rate's index in *|lr_index| (-1: a schedule).  NULL
 * entries when the plan does not train or the section has no optimizer. */
static kdc_status opt_layout(const kdc_rt_train *t, const keras_map *k, bool lso, opt_entry **out,
                             size_t *n, int *lr_index) {
  kdc_rt_opt_var *v = NULL;
  size_t m = 0;
  *out = NULL;
  *n = 0;
  KDC_RETURN_IF_ERROR(kdc_rt_keras_opt_layout(k->opt, k->vars, train_has_state, (void *)t, lso,
                                              &v, &m, lr_index));
  if (!v) return NULL;
  opt_entry *e = kdc_xmalloc(sizeof *e * (m + 1));
  for (size_t q = 0; q < m; q++)
    e[q] = (opt_entry){v[q].index, v[q].state ? find_state(t, v[q].state) : -1, v[q].kind};
  kdc_rt_opt_vars_free(v, m);
  *out = e;
  *n = m;
  return NULL;
}

kdc_status kdc_rt_keras_check(const kdc_rt_plan *p, bool archive) {
  keras_map k;
  KDC_RETURN_IF_ERROR(keras_map_open(p, &k));
  kdc_status st = NULL;
  if (archive && !k.config)
    st = KDC_ERR(KDC_INVALID_INPUT, "%s: --save-model: the plan was compiled from a tf.keras 2 "
                 "or TensorFlow.js topology; a .keras archive needs a Keras 3 config (compile "
                 "from a Keras 3 to_json or .keras); --save-weights W.weights.h5 works", p->path);
  json_object_put(k.root);
  return st;
}

/* The Keras shape of state |k| or plan weight |w| (gate-packed merged). */
static int keras_dims(const kdc_rt_tensor_info *i, int64_t *dims) {
  int rank = i->rank;
  memcpy(dims, i->dims, sizeof i->dims);
  if (i->gate_packed && rank >= 2) {
    dims[rank - 2] *= dims[rank - 1];
    dims[--rank] = 0;
  }
  return rank;
}

static kdc_status put(kdc_h5w *w, const char *h5p, const kdc_rt_tensor_info *i, const void *data) {
  int64_t dims[KDC_IO_MAX_RANK];
  int rank = keras_dims(i, dims);
  if (i->dtype == KDC_IO_DTYPE_I64) { /* Normalization's count: int32 in Keras (jax) */
    size_t n = i->bytes / 8;
    int32_t *tmp = kdc_xmalloc(4 * n + 4);
    for (size_t q = 0; q < n; q++) tmp[q] = (int32_t)((const int64_t *)data)[q];
    kdc_status st = kdc_h5w_dataset(w, h5p, KDC_IO_DTYPE_I32, rank, dims, tmp);
    free(tmp);
    return st;
  }
  return kdc_h5w_dataset(w, h5p, i->dtype, rank, dims, data);
}

kdc_status kdc_rt_keras_save(kdc_rt_plan *p, kdc_rt_train *t, const char *path, bool archive,
                             bool optimizer) {
  KDC_RETURN_IF_ERROR(kdc_rt_keras_check(p, archive));
  KDC_RETURN_IF_ERROR(kdc_rt_train_gather(t));
  if (kdc_rt_train_process(t) != 0) return NULL;
  keras_map k;
  KDC_RETURN_IF_ERROR(keras_map_open(p, &k));
  /* Keras writes the optimizer only for a compiled model: the archive's
   * config must have a compile_config for load_model to take it */
  json_object *cc = NULL;
  if (archive) optimizer = k.config && json_object_object_get_ex(k.config, "compile_config", &cc) &&
                           json_object_is_type(cc, json_type_object);
  kdc_h5w *w = NULL;
  kdc_status st = kdc_h5w_create(&w);
  size_t nv = json_object_array_length(k.vars);
  if (!st) st = kdc_h5w_group(w, "vars");
  if (!st && nv) st = kdc_h5w_group(w, "layers");
  for (size_t v = 0; v < nv && !st; v++) {
    json_object *e = json_object_array_get_idx(k.vars, v);
    const char *name = map_str(e, 0), *h5p = map_str(e, 1), *alias = map_str(e, 3);
    int s = find_state(t, name);
    if (s >= 0) {
      const kdc_rt_tensor_info *i = kdc_rt_train_state(t, (size_t)s);
      void *buf = kdc_xmalloc(i->bytes + 1);
      kdc_rt_train_state_get(t, (size_t)s, buf);
      kdc_rt_tensor_info i2 = *i;
      i2.gate_packed = kdc_rt_train_state_gate_packed(t, (size_t)s);
      st = put(w, h5p, &i2, buf);
      if (!st && *alias) st = put(w, alias, &i2, buf);
      free(buf);
    } else {
      int pw = find_plan_weight(p, name);
      if (pw < 0) st = KDC_ERR(KDC_INTERNAL, "%s: no weight or state %s", p->path, name);
      else st = put(w, h5p, &p->prog.weights[pw], p->prog.weight_data[pw]);
      if (!st && *alias) st = put(w, alias, &p->prog.weights[pw], p->prog.weight_data[pw]);
    }
  }
  opt_entry *oe = NULL;
  size_t no = 0;
  int lr_index = -1;
  /* mixed_float16: Keras' compile wrapped the optimizer in a LossScaleOptimizer */
  bool lso = find_state(t, KDC_LSO_SCALE_EXPONENT) >= 0;
  if (!st && optimizer) st = opt_layout(t, &k, lso, &oe, &no, &lr_index);
  if (!st && optimizer && oe) st = kdc_h5w_group(w, "optimizer/vars");
  if (!st && optimizer && oe && lso) st = kdc_h5w_group(w, "optimizer/inner_optimizer/vars");
  for (size_t q = 0; q < no && !st; q++)
    for (int copy = 0; copy < 1 + (lso && oe[q].index >= KDC_LSO_VARS) && !st; copy++) {
      char h5p[80];
      if (copy) /* the inner optimizer's own copy, as Keras writes it */
        snprintf(h5p, sizeof h5p, "optimizer/inner_optimizer/vars/%d", oe[q].index - KDC_LSO_VARS);
      else
        snprintf(h5p, sizeof h5p, "optimizer/vars/%d", oe[q].index);
      if (oe[q].kind == KDC_OPT_ZERO_I32 || oe[q].kind == KDC_OPT_ZERO_F32) {
        int32_t zi = 0;
        float zf = 0.0f;
        bool i32 = oe[q].kind == KDC_OPT_ZERO_I32;
        st = kdc_h5w_dataset(w, h5p, i32 ? KDC_IO_DTYPE_I32 : KDC_IO_DTYPE_F32, 0, NULL,
                             i32 ? (const void *)&zi : (const void *)&zf);
        continue;
      }
      const kdc_rt_tensor_info *i = kdc_rt_train_state(t, (size_t)oe[q].state);
      void *buf = kdc_xmalloc(i->bytes + 4);
      kdc_rt_train_state_get(t, (size_t)oe[q].state, buf);
      if (oe[q].kind == KDC_OPT_SCALE) { /* dynamic_scale = 2^(15 + exponent) */
        int32_t e;
        memcpy(&e, buf, 4);
        float scale = ldexpf(1.0f, KDC_LOSS_SCALE_LOG2_INIT + e);
        st = kdc_h5w_dataset(w, h5p, KDC_IO_DTYPE_F32, 0, NULL, &scale);
      } else {
        kdc_rt_tensor_info i2 = *i;
        i2.gate_packed = kdc_rt_train_state_gate_packed(t, (size_t)oe[q].state);
        st = put(w, h5p, &i2, buf);
      }
      free(buf);
    }
  if (!st && lr_index >= 0) {
    json_object *lr = NULL;
    json_object_object_get_ex(k.opt, "learning_rate", &lr);
    float v = (float)json_object_get_double(lr);
    char h5p[80];
    snprintf(h5p, sizeof h5p, "optimizer/vars/%d", lr_index);
    st = kdc_h5w_dataset(w, h5p, KDC_IO_DTYPE_F32, 0, NULL, &v);
    if (!st && lso) {
      snprintf(h5p, sizeof h5p, "optimizer/inner_optimizer/vars/%d", lr_index - KDC_LSO_VARS);
      st = kdc_h5w_dataset(w, h5p, KDC_IO_DTYPE_F32, 0, NULL, &v);
    }
  }
  free(oe);
  void *img = NULL;
  size_t len = 0;
  if (!st) st = kdc_h5w_finish(w, &img, &len);
  else kdc_h5w_abort(w);
  if (!st && !archive) st = kdc_file_write_atomic(path, img, len);
  if (!st && archive) {
    json_object *ver = NULL;
    json_object_object_get_ex(k.root, "keras_version", &ver);
    char meta[256], date[64];
    time_t now = time(NULL);
    struct tm tm;
    strftime(date, sizeof date, "%Y-%m-%d@%H:%M:%S", gmtime_r(&now, &tm));
    snprintf(meta, sizeof meta, "{\"keras_version\": \"%s\", \"date_saved\": \"%s\"}",
             ver && json_object_is_type(ver, json_type_string) ? json_object_get_string(ver)
                                                               : "3.0.0", date);
    const char *cfg = json_object_to_json_string_ext(k.config, JSON_C_TO_STRING_PLAIN);
    kdc_zip_entry ze[3] = {{"metadata.json", meta, strlen(meta)},
                           {"config.json", cfg, strlen(cfg)},
                           {"model.weights.h5", img, len}};
    void *zip = NULL;
    size_t zlen = 0;
    st = kdc_zip_write(ze, 3, &zip, &zlen);
    if (!st) st = kdc_file_write_atomic(path, zip, zlen);
    free(zip);
  }
  free(img);
  json_object_put(k.root);
  return st;
}

/* Reads dataset |h5p| of |h| as the Keras form of |i| into |dst| (i->bytes). */
static kdc_status get(kdc_h5 *h, const char *h5p, const kdc_rt_tensor_info *i, void *dst) {
  int rank, krank;
  int64_t dims[KDC_IO_MAX_RANK], kd[KDC_IO_MAX_RANK];
  kdc_io_dtype dt;
  KDC_RETURN_IF_ERROR(kdc_h5_dataset_info(h, h5p, &rank, dims, &dt));
  krank = keras_dims(i, kd);
  bool same = rank == krank;
  for (int d = 0; same && d < rank; d++) same = dims[d] == kd[d];
  if (!same) {
    char a[160] = "(", b[160] = "(";
    for (int d = 0; d < rank; d++) snprintf(a + strlen(a), sizeof a - strlen(a), "%s%lld", d ? ", " : "", (long long)dims[d]);
    for (int d = 0; d < krank; d++) snprintf(b + strlen(b), sizeof b - strlen(b), "%s%lld", d ? ", " : "", (long long)kd[d]);
    return KDC_ERR(KDC_INVALID_INPUT, "%s: %s: dataset has shape %s) but the plan's \"%s\" is %s)",
                   kdc_h5_file(h), h5p, a, i->name, b);
  }
  bool is_float = dt == KDC_IO_DTYPE_F16 || dt == KDC_IO_DTYPE_F32 || dt == KDC_IO_DTYPE_F64;
  bool want_float = i->dtype == KDC_IO_DTYPE_F32;
  if (is_float != want_float)
    return KDC_ERR(KDC_INVALID_INPUT, "%s: %s: %s dataset, but the plan's \"%s\" is %s",
                   kdc_h5_file(h), h5p, kdc_io_dtype_name(dt), i->name, kdc_io_dtype_name(i->dtype));
  return kdc_h5_read(h, h5p, i->dtype, dst, i->bytes / kdc_io_dtype_size(i->dtype));
}

kdc_status kdc_rt_keras_read_lso_exponent(kdc_h5 *h, const char *h5p, int32_t *exponent) {
  int rank;
  int64_t dims[KDC_IO_MAX_RANK];
  kdc_io_dtype dt;
  KDC_RETURN_IF_ERROR(kdc_h5_dataset_info(h, h5p, &rank, dims, &dt));
  if (rank != 0 || (dt != KDC_IO_DTYPE_F32 && dt != KDC_IO_DTYPE_F64 && dt != KDC_IO_DTYPE_F16))
    return KDC_ERR(KDC_INVALID_INPUT, "%s: %s: the LossScaleOptimizer's dynamic_scale must be a "
                   "float scalar", kdc_h5_file(h), h5p);
  float scale;
  KDC_RETURN_IF_ERROR(kdc_h5_read(h, h5p, KDC_IO_DTYPE_F32, &scale, 1));
  int e = 0;
  float m = frexpf(scale, &e); /* scale = m 2^e, m in [0.5, 1) */
  e -= 1 + KDC_LOSS_SCALE_LOG2_INIT;
  if (!(scale > 0) || isinf(scale) || m != 0.5f || e < -126 || e > 127)
    return KDC_ERR(KDC_INVALID_INPUT, "%s: %s: dynamic_scale %g is not a power of two kdc can "
                   "continue from (kdc's loss scale starts at 2^%d and only doubles or halves)",
                   kdc_h5_file(h), h5p, (double)scale, KDC_LOSS_SCALE_LOG2_INIT);
  *exponent = e;
  return NULL;
}

kdc_status kdc_rt_keras_load(kdc_rt_plan *p, kdc_rt_train *t, const char *path) {
  keras_map k;
  KDC_RETURN_IF_ERROR(keras_map_open(p, &k));
  void *data = NULL, *img = NULL;
  size_t len = 0, ilen = 0;
  char *name = NULL;
  kdc_status st = kdc_file_read_all(path, &data, &len);
  if (!st && kdc_is_zip(data, len)) {
    kdc_zip_member m = {"model.weights.h5", (size_t)16 << 30, true, NULL, 0};
    st = kdc_zip_read(path, data, len, &m, 1);
    img = m.data, ilen = m.len;
    if (asprintf(&name, "%s: model.weights.h5", path) < 0) name = NULL;
  } else if (!st) {
    img = data, ilen = len, data = NULL;
  }
  kdc_h5 *h = NULL;
  if (!st) st = kdc_h5_open_image(name ? name : path, img, ilen, &h);
  size_t ns = kdc_rt_train_state_count(t), nv = json_object_array_length(k.vars);
  void **bufs = kdc_xcalloc(ns + 1, sizeof *bufs);
  /* weights: every variable of the model; non-state ones must equal the plan's */
  for (size_t v = 0; v < nv && !st; v++) {
    json_object *e = json_object_array_get_idx(k.vars, v);
    const char *vn = map_str(e, 0), *h5p = map_str(e, 1);
    int s = find_state(t, vn);
    if (s >= 0) {
      kdc_rt_tensor_info i2 = *kdc_rt_train_state(t, (size_t)s);
      i2.gate_packed = kdc_rt_train_state_gate_packed(t, (size_t)s);
      bufs[s] = kdc_xmalloc(i2.bytes + 1);
      st = get(h, h5p, &i2, bufs[s]);
      continue;
    }
    int pw = find_plan_weight(p, vn);
    if (pw < 0) continue;
    const kdc_rt_tensor_info *i = &p->prog.weights[pw];
    void *tmp = kdc_xmalloc(i->bytes + 1);
    st = get(h, h5p, i, tmp);
    if (!st && memcmp(tmp, p->prog.weight_data[pw], i->bytes))
      st = KDC_ERR(KDC_INVALID_INPUT, "%s: %s: variable \"%s\" is not trained by this plan (frozen "
                   "or a constant) and differs from the plan's value: compile the plan from this "
                   "file instead", kdc_h5_file(h), h5p, vn);
    free(tmp);
  }
  /* every dataset of the model part must be some variable's */
  for (int r = 0; r < 2 && !st; r++) {
    char **l = NULL;
    size_t n = 0;
    st = kdc_h5_list_datasets(h, r ? "vars" : "layers", nv + 1024, &l, &n);
    for (size_t q = 0; q < n && !st; q++) {
      bool found = false;
      for (size_t v = 0; v < nv && !found; v++)
        found = !strcmp(map_str(json_object_array_get_idx(k.vars, v), 1), l[q]) ||
                !strcmp(map_str(json_object_array_get_idx(k.vars, v), 3), l[q]);
      if (!found)
        st = KDC_ERR(KDC_INVALID_INPUT, "%s: %s: a dataset that matches no variable of the plan's "
                     "model", kdc_h5_file(h), l[q]);
    }
    kdc_h5_free_list(l, n);
  }
  /* the optimizer, when the file has one */
  opt_entry *oe = NULL;
  size_t no = 0;
  int lr_index = -1;
  /* a LossScaleOptimizer's file (Keras' mixed_float16) nests the inner optimizer */
  bool lso = kdc_h5_exists(h, "optimizer/inner_optimizer");
  if (!st && kdc_h5_exists(h, "optimizer/vars/0"))
    st = opt_layout(t, &k, lso, &oe, &no, &lr_index);
  for (size_t q = 0; q < no && !st; q++) {
    char h5p[64];
    snprintf(h5p, sizeof h5p, "optimizer/vars/%d", oe[q].index);
    if (!kdc_h5_exists(h, h5p)) {
      st = KDC_ERR(KDC_INVALID_INPUT, "%s: %s: missing: the plan's optimizer has more "
                   "variables than the file's", kdc_h5_file(h), h5p);
      break;
    }
    if (oe[q].state < 0) continue; /* the LossScaleOptimizer's own iteration and rate, or skipped */
    size_t s = (size_t)oe[q].state;
    kdc_rt_tensor_info i2 = *kdc_rt_train_state(t, s);
    i2.gate_packed = kdc_rt_train_state_gate_packed(t, s);
    bufs[s] = kdc_xmalloc(i2.bytes + 4);
    if (oe[q].kind == KDC_OPT_SCALE)
      st = kdc_rt_keras_read_lso_exponent(h, h5p, (int32_t *)bufs[s]);
    else
      st = get(h, h5p, &i2, bufs[s]);
  }
  if (!st && oe) {
    char h5p[64];
    snprintf(h5p, sizeof h5p, "optimizer/vars/%zu", no + (lr_index >= 0));
    if (kdc_h5_exists(h, h5p))
      st = KDC_ERR(KDC_INVALID_INPUT, "%s: %s: the file's optimizer has more variables than the "
                   "plan's (another optimizer or slots?)", kdc_h5_file(h), h5p);
  }
  free(oe);
  /* nothing is set before everything was read and checked */
  for (size_t s = 0; s < ns && !st; s++)
    if (bufs[s]) kdc_rt_train_state_set(t, s, bufs[s]);
  for (size_t s = 0; s < ns; s++) free(bufs[s]);
  free(bufs);
  kdc_h5_close(h);
  free(name);
  free(img);
  free(data);
  json_object_put(k.root);
  return st;
}
