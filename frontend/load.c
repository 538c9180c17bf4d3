/*
 * frontend/load.c: reading a model file and recognising its format.
 *
 * Accepted (KERAS.md 3): a Keras 3 `to_json` or the `config.json` of a
 * `.keras` archive (top-level "class_name" with "module"), a tf.keras 2 /
 * Keras 2 `to_json` (top-level "class_name", "keras_version" 2.x; Keras 1.x
 * topologies are refused: their layer configs predate Keras 2), and a
 * TensorFlow.js layers-model `model.json` ("modelTopology", holding either
 * {"model_config": envelope} or the envelope itself, plus "weightsManifest").
 * Zip (`.keras`) and HDF5 files are recognised by their magic bytes and
 * refused with a hint.  Broken JSON is reported with its line and column.
 */
#include <errno.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/io.h"
#include "common/kfiles.h"
#include "frontend/frontend.h"

static kdc_status parse_json(const char *path, const char *text, size_t len, json_object **out) {
  if (len == 0) return KDC_ERR(KDC_INVALID_INPUT, "%s: the file is empty", path);
  KDC_RETURN_IF_ERROR(kdc_json_text_check(path, text, len, 0));  /* comments, \u0000 */
  json_tokener *tok = json_tokener_new_ex(1024);
  if (!tok) return KDC_ERR(KDC_OUT_OF_MEMORY, "out of memory");
  json_object *o = json_tokener_parse_ex(tok, text, (int)len);
  enum json_tokener_error e = json_tokener_get_error(tok);
  size_t end = json_tokener_get_parse_end(tok);
  json_tokener_free(tok);
  int line, col;
  if (e != json_tokener_success) {
    json_object_put(o);
    kdc_text_line_col(text, end < len ? end : len, &line, &col);
    if (e == json_tokener_continue)
      return KDC_ERR(KDC_INVALID_INPUT, "%s: line %d, column %d: invalid JSON: unexpected end of "
                     "file", path, line, col);
    return KDC_ERR(KDC_INVALID_INPUT, "%s: line %d, column %d (byte %zu): invalid JSON: %s", path,
                   line, col, end, json_tokener_error_desc(e));
  }
  size_t i = end;
  while (i < len && strchr(" \t\r\n", text[i])) i++;
  if (i < len) {
    json_object_put(o);
    kdc_text_line_col(text, i, &line, &col);
    return KDC_ERR(KDC_INVALID_INPUT, "%s: line %d, column %d (byte %zu): invalid JSON: "
                   "unexpected text after the end of the document", path, line, col, i);
  }
  *out = o;
  return NULL;
}

static const char *str_of(json_object *o) {
  /* (strings of the parsed tree, or of the caller's options) */
  return o && json_object_is_type(o, json_type_string) ? json_object_get_string(o) : NULL;
}

kdc_status kdc_frontend_load_text(const char *path, const char *text, size_t len,
                                  kdc_keras_model **out) {
  return kdc_frontend_load_text_opts(path, text, len, NULL, out);
}

kdc_status kdc_frontend_load_text_opts(const char *path, const char *text, size_t len,
                                       const kdc_load_options *opt, kdc_keras_model **out) {
  *out = NULL;
  if (kdc_is_zip(text, len)) return kdc_fe_load_archive(path, text, len, opt, out);
  if (kdc_is_hdf5(text, len)) return kdc_fe_load_legacy_h5(path, text, len, opt, out);
  json_object *root = NULL;
  KDC_RETURN_IF_ERROR(parse_json(path, text, len, &root));
  kdc_keras_model *m = kdc_xcalloc(1, sizeof *m);
  m->arena = kdc_arena_create();
  m->root = root;
  m->file = kdc_arena_strdup(m->arena, path);
  m->trainable = true;
  m->load_opt = opt;
  kdc_status st = NULL;
  json_object *env = NULL;
  const char *loc = "";
  if (!json_object_is_type(root, json_type_object)) {
    st = kdc_fe_err(m, KDC_INVALID_INPUT, NULL, "expected a JSON object at the top level");
  } else if (kdc_fe_get(root, "modelTopology")) {
    json_object *topo = kdc_fe_get(root, "modelTopology");
    m->format = KDC_KERAS_TFJS;
    const char *fmt = str_of(kdc_fe_get(root, "format"));
    if (fmt && !strcmp(fmt, "graph-model")) {
      st = kdc_fe_err(m, KDC_UNSUPPORTED, "format", "a TensorFlow.js graph model (\"format\": "
                      "\"graph-model\", a converted TensorFlow graph) is not a Keras layers "
                      "model; kdc reads layers models (\"format\": \"layers-model\", "
                      "tensorflowjs_converter --output_format tfjs_layers_model)");
      goto parsed;
    }
    m->weights_manifest = kdc_fe_get(root, "weightsManifest");
    m->manifest_loc = "weightsManifest";
    m->keras_version = str_of(kdc_fe_get(topo, "keras_version"));
    if (kdc_fe_get(topo, "model_config")) {
      env = kdc_fe_get(topo, "model_config");
      loc = "modelTopology.model_config";
    } else {
      env = topo;
      loc = "modelTopology";
    }
    const char *gen = str_of(kdc_fe_get(root, "generatedBy"));
    if (!m->keras_version && gen && !strncmp(gen, "keras v", 7)) m->keras_version = gen + 7;
    m->tk2_topology = !m->keras_version || m->keras_version[0] != '3';
  } else if (kdc_fe_get(root, "class_name")) {
    env = root;
    m->keras_version = str_of(kdc_fe_get(root, "keras_version"));
    if (!m->keras_version && opt && opt->keras_version) m->keras_version = kdc_arena_strdup(m->arena, opt->keras_version);
    bool k3 = m->keras_version ? m->keras_version[0] == '3' : kdc_fe_get(root, "module") != NULL;
    m->format = k3 ? KDC_KERAS_K3 : KDC_KERAS_TK2;
    m->tk2_topology = !k3;
  } else if (kdc_fe_get(root, "model_config")) {
    env = kdc_fe_get(root, "model_config");
    loc = "model_config";
    m->keras_version = str_of(kdc_fe_get(root, "keras_version"));
    m->format = m->keras_version && m->keras_version[0] == '3' ? KDC_KERAS_K3 : KDC_KERAS_TK2;
    m->tk2_topology = m->format == KDC_KERAS_TK2;
  } else {
    st = kdc_fe_err(m, KDC_INVALID_INPUT, NULL,
                    "not a Keras model description: expected \"class_name\" (Keras to_json or "
                    ".keras config.json) or \"modelTopology\" (TensorFlow.js model.json) at the "
                    "top level");
  }
  if (!st && m->keras_version && m->keras_version[0] == '1' && m->keras_version[1] == '.') {
    /* Keras 2.0 renamed the layer arguments (nb_filter, border_mode, init,
     * output_dim, Merge layers): a Keras 1 topology reads as nonsense. */
    st = kdc_fe_err(m, KDC_UNSUPPORTED,
                    kdc_arena_printf(m->arena, "%skeras_version \"%s\"",
                                     m->format == KDC_KERAS_TFJS ? "modelTopology." : "",
                                     m->keras_version),
                    "Keras 1 model files are not supported (their layer configs, such as "
                    "Convolution2D nb_filter/border_mode and Merge layers, predate Keras 2); "
                    "save the model again with Keras 2 or 3");
  }
  if (!st && json_object_is_type(env, json_type_string)) {
    /* Some writers store the topology as a JSON string inside the JSON. */
    st = kdc_fe_err(m, KDC_UNSUPPORTED, loc, "the model config is a string holding JSON; decode "
                    "it first");
  }
  if (!st) st = kdc_fe_parse_model(m, env, loc);
parsed:
  m->load_opt = NULL;
  if (st) {
    kdc_frontend_free(m);
    return st;
  }
  kdc_fe_collect_vars(m);
  *out = m;
  return NULL;
}

kdc_status kdc_frontend_load(const char *path, kdc_keras_model **out) {
  return kdc_frontend_load_opts(path, NULL, out);
}

kdc_status kdc_frontend_load_opts(const char *path, const kdc_load_options *opt,
                                  kdc_keras_model **out) {
  void *text = NULL;
  size_t len = 0;
  *out = NULL;
  /* a regular file of at most KDC_JSON_MAX_BYTES (common/files.c), or a .keras / .h5 model
   * with its weights (frontend/keras_files.c caps each member again) */
  KDC_RETURN_IF_ERROR(kdc_file_read_max(path, KDC_JSON_MAX_BYTES + kdc_fe_weights_cap(),
                                        "a model file", &text, &len));
  if (len > KDC_JSON_MAX_BYTES && !kdc_is_zip(text, len) && !kdc_is_hdf5(text, len)) {
    free(text);
    return KDC_ERR(KDC_INVALID_INPUT, "%s: %zu bytes, more than kdc reads for a model file (%zu)",
                   path, len, (size_t)KDC_JSON_MAX_BYTES);
  }
  kdc_status st = kdc_frontend_load_text_opts(path, text, len, opt, out);
  free(text);
  return st;
}

void kdc_frontend_free(kdc_keras_model *m) {
  if (!m) return;
  json_object_put(m->root);
  free(m->vars);
  free(m->config_text);
  free(m->h5_image);
  kdc_arena_destroy(m->arena);
  free(m);
}
