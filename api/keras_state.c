/*
 * api/keras_state.c: the optimizer state of a Keras file given to
 * `kdc compile --weights` (a `.keras` archive's model.weights.h5, or a
 * `.weights.h5` saved with its optimizer), restored as the plan's initial
 * training state (the TRAIN_STATE section, as for kdc's own checkpoints;
 * docs/training.md).
 *
 * Keras 3 writes the optimizer's variables as `optimizer/vars/<i>`:
 * iterations, the learning rate unless it is a schedule, then the slots in
 * add_optimizer_variables' order (docs/frontend.md, "Optimizer
 * variables").  The plan's KERAS section says which index is which state
 * tensor (kdc_rt_keras_opt_layout, shared with kdc run's reader), so
 * compile and run read a file the same way.
 *
 * When the plan does not train, or trains with another optimizer than the
 * file's (an archive names it in its compile_config; a weights file only
 * shows it by its number of variables), the variables are skipped with one
 * `kdc: note:` line.  The same optimizer with another number of variables
 * (amsgrad, momentum, centered differ) is an error naming the file, as are
 * a misshapen or non-numeric variable: nothing is written then.
 */
#include <json-c/json.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "api/api.h"
#include "common/io.h"
#include "common/kfiles.h"
#include "frontend/frontend.h"
#include "ir/ir.h"
#include "passes/passes.h"

/* The train_step STATE parameter named |name|, or KDC_NO_VALUE. */
static kdc_value_id state_param(const kdc_func *f, const char *name) {
  for (size_t i = 0; i < f->n_params; i++) {
    const kdc_node *p = kdc_ir_node(f, f->params[i]);
    if (p->attr.param.kind == KDC_PARAM_STATE && !strcmp(p->attr.param.name, name))
      return f->params[i];
  }
  return KDC_NO_VALUE;
}

/* Whether |name| is training state of the plan: an optimizer tensor, or a
 * weight train_step updates (trainable: passes/train_step.c). */
static bool has_state(void *user, const char *name) {
  const kdc_func *f = user;
  if (state_param(f, name) != KDC_NO_VALUE) return true;
  for (size_t i = 0; i < f->n_params; i++) {
    const kdc_node *p = kdc_ir_node(f, f->params[i]);
    if (p->attr.param.kind != KDC_PARAM_WEIGHT || strcmp(p->attr.param.name, name)) continue;
    const kdc_weight *w = kdc_ir_module_find_weight(f->module, name);
    return !w || w->trainable;
  }
  return false;
}

static kdc_io_dtype io_dtype(kdc_dtype d) {
  return d == KDC_DTYPE_I32 ? KDC_IO_DTYPE_I32 : d == KDC_DTYPE_I64 ? KDC_IO_DTYPE_I64
                                                                     : KDC_IO_DTYPE_F32;
}

/* The optimizer an archive's config.json names in its compile_config
 * (lower case into |buf|), or "" when it names none. */
static void archive_optimizer(const void *cfg, size_t len, char *buf, size_t n) {
  buf[0] = 0;
  if (!cfg) return;
  json_tokener *tok = json_tokener_new();
  json_object *root = json_tokener_parse_ex(tok, cfg, (int)len);
  json_tokener_free(tok);
  json_object *cc = NULL, *o = NULL, *cls = NULL;
  if (json_object_object_get_ex(root, "compile_config", &cc) &&
      json_object_object_get_ex(cc, "optimizer", &o)) {
    if (json_object_is_type(o, json_type_string)) cls = o;
    else json_object_object_get_ex(o, "class_name", &cls);
    if (cls && json_object_is_type(cls, json_type_string))
      snprintf(buf, n, "%s", json_object_get_string(cls));
  }
  for (char *c = buf; *c; c++) *c = (char)(*c >= 'A' && *c <= 'Z' ? *c - 'A' + 'a' : *c);
  json_object_put(root);
}

/* Reads optimizer/vars/<index> as plan state |p| into a new tensor |t|
 * (Keras' shape: a recurrent weight kept per gate [.., G, u] is [.., G*u]
 * in the file).  The file and the TRAIN_STATE section hold the global
 * array; |f| is partitioned (local types) on a mesh. */
static kdc_status read_var(kdc_h5 *h, int index, const kdc_func *f, kdc_value_id p,
                           const char *name, kdc_st_tensor *t) {
  char h5p[64];
  snprintf(h5p, sizeof h5p, "optimizer/vars/%d", index);
  if (!kdc_h5_exists(h, h5p))
    return KDC_ERR(KDC_INVALID_INPUT, "%s: %s: missing: the plan's optimizer state \"%s\" has no "
                   "variable in the file", kdc_h5_file(h), h5p, name);
  int rank;
  int64_t dims[KDC_IO_MAX_RANK];
  kdc_io_dtype dt;
  KDC_RETURN_IF_ERROR(kdc_h5_dataset_info(h, h5p, &rank, dims, &dt));
  const kdc_type global = kdc_value_global_type(f->module, f, p), *pt = &global;
  bool same = rank == pt->rank, merged = rank + 1 == pt->rank && rank >= 1;
  for (int d = 0; same && d < rank; d++) same = dims[d] == pt->dims[d];
  for (int d = 0; merged && d < rank; d++)
    merged = dims[d] == (d == rank - 1 ? pt->dims[d] * pt->dims[d + 1] : pt->dims[d]);
  if (!same && !merged) {
    char b[96];
    return KDC_ERR(KDC_INVALID_INPUT, "%s: %s: a dataset of rank %d whose shape is not the plan's "
                   "\"%s\" %s", kdc_h5_file(h), h5p, rank, name, kdc_type_str(pt, b, sizeof b));
  }
  bool is_float = dt == KDC_IO_DTYPE_F16 || dt == KDC_IO_DTYPE_F32 || dt == KDC_IO_DTYPE_F64;
  if (is_float != (pt->dtype == KDC_DTYPE_F32))
    return KDC_ERR(KDC_INVALID_INPUT, "%s: %s: %s dataset, but the plan's \"%s\" is %s",
                   kdc_h5_file(h), h5p, kdc_io_dtype_name(dt), name, kdc_dtype_name(pt->dtype));
  size_t n = (size_t)kdc_type_numel(pt), bytes = kdc_type_bytes(pt);
  void *buf = kdc_xmalloc(bytes + 1);
  kdc_status st = kdc_h5_read(h, h5p, io_dtype(pt->dtype), buf, n);
  if (st) {
    free(buf);
    return st;
  }
  *t = (kdc_st_tensor){.name = name, .dtype = io_dtype(pt->dtype), .rank = rank, .data = buf,
                       .nbytes = bytes};
  memcpy(t->dims, dims, sizeof(int64_t) * (size_t)rank);
  return NULL;
}

/* Reads a LossScaleOptimizer's dynamic_scale (optimizer/vars/<index>) as
 * the plan's i32 loss-scale exponent state |name|. */
static kdc_status read_scale(kdc_h5 *h, int index, const char *name, kdc_st_tensor *t) {
  char h5p[64];
  snprintf(h5p, sizeof h5p, "optimizer/vars/%d", index);
  int32_t *e = kdc_xmalloc(sizeof *e);
  kdc_status st = kdc_rt_keras_read_lso_exponent(h, h5p, e);
  if (st) {
    free(e);
    return st;
  }
  *t = (kdc_st_tensor){.name = name, .dtype = KDC_IO_DTYPE_I32, .rank = 0, .data = e,
                       .nbytes = sizeof *e};
  return NULL;
}

kdc_status kdc_api_keras_train_state(const char *weights, const kdc_module *mod,
                                     const char *keras_section, bool train_on,
                                     const kdc_train_options *train, FILE *warnings,
                                     kdc_buf *out) {
  void *data = NULL, *img = NULL, *cfg = NULL;
  size_t len = 0, ilen = 0, clen = 0;
  char *name = NULL;
  kdc_status st = kdc_file_read_all(weights, &data, &len);
  if (!st && kdc_is_zip(data, len)) {
    kdc_zip_member m[2] = {{"model.weights.h5", kdc_fe_weights_cap(), true, NULL, 0},
                           {"config.json", (size_t)64 << 20, false, NULL, 0}};
    st = kdc_zip_read(weights, data, len, m, 2);
    img = m[0].data, ilen = m[0].len, cfg = m[1].data, clen = m[1].len;
    if (asprintf(&name, "%s: model.weights.h5", weights) < 0) name = NULL;
  } else if (!st) {
    img = data, ilen = len, data = NULL;
  }
  kdc_h5 *h = NULL;
  if (!st) st = kdc_h5_open_image(name ? name : weights, img, ilen, &h);
  size_t n_file = 0;
  char buf[64];
  snprintf(buf, sizeof buf, "optimizer/vars/0");
  while (!st && kdc_h5_exists(h, buf)) snprintf(buf, sizeof buf, "optimizer/vars/%zu", ++n_file);
  json_object *sec = NULL;
  kdc_rt_opt_var *v = NULL;
  size_t nv = 0;
  kdc_st_tensor *ts = NULL;
  size_t n = 0;
  const char *plan_opt = train_on ? kdc_optimizer_name(train->optimizer.kind) : NULL;
  char file_opt[64];
  archive_optimizer(cfg, clen, file_opt, sizeof file_opt);
  if (st || n_file == 0) goto done;
  if (!plan_opt) {
    fprintf(warnings, "kdc: note: %s: %zu optimizer variables (optimizer/vars/...) skipped: the "
            "plan does not train (predict only)\n", weights, n_file);
    goto done;
  }
  if (*file_opt && strcasecmp(file_opt, plan_opt)) {
    fprintf(warnings, "kdc: note: %s: %zu optimizer variables (optimizer/vars/...) skipped: the "
            "file's optimizer is %s, the plan trains with %s\n", weights, n_file, file_opt,
            plan_opt);
    goto done;
  }
  const kdc_func *f = kdc_ir_module_find_func(mod, "train_step");
  json_object *opt = NULL, *vars = NULL;
  sec = json_tokener_parse(keras_section);
  json_object_object_get_ex(sec, "optimizer", &opt);
  json_object_object_get_ex(sec, "vars", &vars);
  int lr_index = -1;
  if (!f || !opt || !vars)
    st = KDC_ERR(KDC_INTERNAL, "compile: a training plan without train_step or keras section");
  /* Keras' mixed_float16 compile wraps the optimizer in a LossScaleOptimizer, whose file
   * nests the inner optimizer (its variables after the wrapper's four) */
  bool lso = kdc_h5_exists(h, "optimizer/inner_optimizer");
  if (!st) st = kdc_rt_keras_opt_layout(opt, vars, has_state, (void *)f, lso, &v, &nv, &lr_index);
  size_t want = nv + (lr_index >= 0);
  if (!st && want != n_file) {
    if (*file_opt)
      st = KDC_ERR(KDC_INVALID_INPUT, "%s: optimizer/vars: the file's %s has %zu variables, the "
                   "plan's %zu (saved with other options: amsgrad, momentum, centered?)",
                   name ? name : weights, file_opt, n_file, want);
    else
      fprintf(warnings, "kdc: note: %s: %zu optimizer variables (optimizer/vars/...) skipped: the "
              "plan's %s keeps %zu (the file was saved by another optimizer?)\n", weights, n_file,
              plan_opt, want);
    goto done;
  }
  ts = kdc_xcalloc(nv + 1, sizeof *ts);
  for (size_t q = 0; q < nv && !st; q++) {
    if (!v[q].state) continue; /* the LossScaleOptimizer's own iteration and rate, or skipped */
    if (v[q].kind == KDC_OPT_SCALE)
      st = read_scale(h, v[q].index, v[q].state, &ts[n]);
    else
      st = read_var(h, v[q].index, f, state_param(f, v[q].state), v[q].state, &ts[n]);
    if (!st) n++;
  }
  if (!st) st = kdc_safetensors_encode(weights, ts, n, NULL, out);
done:
  for (size_t q = 0; q < n; q++) free((void *)ts[q].data);
  free(ts);
  kdc_rt_opt_vars_free(v, nv);
  json_object_put(sec);
  kdc_h5_close(h);
  free(name);
  free(cfg);
  free(img);
  free(data);
  return st;
}
