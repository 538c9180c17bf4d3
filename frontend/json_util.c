/*
 * frontend/json_util.c: located errors and typed getters over json-c.
 *
 * Every getter that reads a layer config names the file and the exact JSON
 * path in its error ("model.json: config.layers[3].config.units: expected a
 * positive integer, got \"ten\""), so no caller formats locations by hand.
 * JSON null counts as absent, as in Keras' from_config.
 */
#include <json-c/json.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/frontend.h"

const char *kdc_fe_file(const kdc_keras_model *m) {
  while (m->parent) m = m->parent;
  return m->file ? m->file : "<model>";
}

static kdc_status verr(const kdc_keras_model *m, kdc_code code, const char *loc,
                       const char *fmt, va_list ap) {
  char *msg = NULL;
  if (vasprintf(&msg, fmt, ap) < 0) return KDC_ERR(KDC_OUT_OF_MEMORY, "out of memory");
  kdc_status st;
  if (loc && *loc)
    st = KDC_ERR(code, "%s: %s: %s", kdc_fe_file(m), loc, msg);
  else
    st = KDC_ERR(code, "%s: %s", kdc_fe_file(m), msg);
  free(msg);
  return st;
}

kdc_status kdc_fe_err(const kdc_keras_model *m, kdc_code code, const char *loc,
                      const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  kdc_status st = verr(m, code, loc, fmt, ap);
  va_end(ap);
  return st;
}

kdc_status kdc_fe_layer_err(const kdc_keras_layer *l, kdc_code code, const char *fmt, ...) {
  char *msg = NULL;
  va_list ap;
  va_start(ap, fmt);
  int n = vasprintf(&msg, fmt, ap);
  va_end(ap);
  if (n < 0) return KDC_ERR(KDC_OUT_OF_MEMORY, "out of memory");
  kdc_status st = KDC_ERR(code, "%s: %s (%s \"%s\"): %s", kdc_fe_file(l->model), l->loc,
                          l->class_name, l->name, msg);
  free(msg);
  return st;
}

json_object *kdc_fe_get(json_object *o, const char *key) {
  json_object *v = NULL;
  if (!o || !json_object_is_type(o, json_type_object)) return NULL;
  if (!json_object_object_get_ex(o, key, &v)) return NULL;
  return v;
}

bool kdc_fe_is_null(json_object *o) { return o == NULL || json_object_is_type(o, json_type_null); }

static const char *str_of(json_object *o) {
  return o && json_object_is_type(o, json_type_string) ? json_object_get_string(o) : NULL;
}

const char *kdc_fe_dtype_name(json_object *o, const char **class_name) {
  if (class_name) *class_name = NULL;
  if (!json_object_is_type(o, json_type_object)) return str_of(o);
  if (class_name) *class_name = str_of(kdc_fe_get(o, "class_name"));
  return str_of(kdc_fe_get(kdc_fe_get(o, "config"), "name"));
}

/* A short rendering of a JSON value for messages. */
static const char *show(json_object *v, char *buf, size_t n) {
  const char *s = json_object_to_json_string_ext(v, JSON_C_TO_STRING_PLAIN);
  snprintf(buf, n, "%s", s ? s : "?");
  if (strlen(s ? s : "") >= n && n > 4) strcpy(buf + n - 4, "...");
  return buf;
}

static kdc_status cfg_err(const kdc_keras_layer *l, const char *key, const char *want,
                          json_object *got) {
  char b[64];
  return KDC_ERR(KDC_INVALID_INPUT, "%s: %s.config.%s: expected %s, got %s (%s \"%s\")",
                 kdc_fe_file(l->model), l->loc, key, want, show(got, b, sizeof b),
                 l->class_name, l->name);
}

/* Integer value of |v| (ints, or doubles with an integral value). */
static bool as_int(json_object *v, int64_t *out) {
  if (json_object_is_type(v, json_type_int)) {
    *out = json_object_get_int64(v);
    return true;
  }
  if (json_object_is_type(v, json_type_double)) {
    double d = json_object_get_double(v);
    if (d != floor(d) || fabs(d) > 9e15) return false;
    *out = (int64_t)d;
    return true;
  }
  return false;
}

/* Sizes, strides, axes... in a config: past kdc's tensor limit they can only
 * overflow the shape arithmetic (a dilation of 2^62 did). */
#define WITHIN_LIMIT " of magnitude at most 2^40 (kdc's limit per tensor)"
static bool too_big(int64_t x) { return x > KDC_FE_MAX_ELEMENTS || x < -KDC_FE_MAX_ELEMENTS; }

kdc_status kdc_fe_cfg_int(const kdc_keras_layer *l, const char *key, int64_t dflt,
                          int64_t *out) {
  json_object *v = kdc_fe_get(l->config, key);
  if (kdc_fe_is_null(v)) {
    if (dflt == INT64_MIN) return cfg_err(l, key, "an integer", v);
    *out = dflt;
    return NULL;
  }
  if (!as_int(v, out)) return cfg_err(l, key, "an integer", v);
  if (too_big(*out)) return cfg_err(l, key, "an integer" WITHIN_LIMIT, v);
  return NULL;
}

kdc_status kdc_fe_cfg_double(const kdc_keras_layer *l, const char *key, double dflt,
                             double *out) {
  json_object *v = kdc_fe_get(l->config, key);
  if (kdc_fe_is_null(v)) {
    if (isnan(dflt)) return cfg_err(l, key, "a number", v);
    *out = dflt;
    return NULL;
  }
  if (!json_object_is_type(v, json_type_int) && !json_object_is_type(v, json_type_double))
    return cfg_err(l, key, "a number", v);
  *out = json_object_get_double(v);
  return NULL;
}

kdc_status kdc_fe_cfg_bool(const kdc_keras_layer *l, const char *key, bool dflt, bool *out) {
  json_object *v = kdc_fe_get(l->config, key);
  if (kdc_fe_is_null(v)) {
    *out = dflt;
    return NULL;
  }
  if (!json_object_is_type(v, json_type_boolean)) return cfg_err(l, key, "true or false", v);
  *out = json_object_get_boolean(v);
  return NULL;
}

kdc_status kdc_fe_cfg_str(const kdc_keras_layer *l, const char *key, const char *dflt,
                          const char **out) {
  json_object *v = kdc_fe_get(l->config, key);
  if (kdc_fe_is_null(v)) {
    if (!dflt) return cfg_err(l, key, "a string", v);
    *out = dflt;
    return NULL;
  }
  if (!json_object_is_type(v, json_type_string)) return cfg_err(l, key, "a string", v);
  *out = json_object_get_string(v);
  return NULL;
}

kdc_status kdc_fe_cfg_tuple(const kdc_keras_layer *l, const char *key, int n, int64_t dflt,
                            int64_t *out) {
  json_object *v = kdc_fe_get(l->config, key);
  char want[64];
  snprintf(want, sizeof want, "an integer or a list of %d integers", n);
  if (kdc_fe_is_null(v)) {
    if (dflt < 0) return cfg_err(l, key, want, v);
    for (int i = 0; i < n; i++) out[i] = dflt;
    return NULL;
  }
  int64_t x;
  if (as_int(v, &x)) {
    if (too_big(x)) return cfg_err(l, key, "an integer" WITHIN_LIMIT, v);
    for (int i = 0; i < n; i++) out[i] = x;
    return NULL;
  }
  if (!json_object_is_type(v, json_type_array) || (int)json_object_array_length(v) != n)
    return cfg_err(l, key, want, v);
  for (int i = 0; i < n; i++)
    if (!as_int(json_object_array_get_idx(v, (size_t)i), &out[i])) return cfg_err(l, key, want, v);
  for (int i = 0; i < n; i++)
    if (too_big(out[i])) return cfg_err(l, key, "integers" WITHIN_LIMIT, v);
  return NULL;
}

kdc_status kdc_fe_cfg_axes(const kdc_keras_layer *l, const char *key, int64_t dflt,
                           int *n_out, int64_t *out) {
  json_object *v = kdc_fe_get(l->config, key);
  if (kdc_fe_is_null(v)) {
    *n_out = 1;
    out[0] = dflt;
    return NULL;
  }
  if (as_int(v, &out[0])) {
    *n_out = 1;
    return NULL;
  }
  if (!json_object_is_type(v, json_type_array) || json_object_array_length(v) < 1 ||
      json_object_array_length(v) > KDC_MAX_RANK)
    return cfg_err(l, key, "an axis or a list of axes", v);
  *n_out = (int)json_object_array_length(v);
  for (int i = 0; i < *n_out; i++)
    if (!as_int(json_object_array_get_idx(v, (size_t)i), &out[i]))
      return cfg_err(l, key, "an axis or a list of axes", v);
  return NULL;
}

kdc_status kdc_fe_parse_shape(const kdc_keras_model *m, json_object *o, const char *loc,
                              kdc_kshape *out) {
  char b[64];
  if (!json_object_is_type(o, json_type_array))
    return kdc_fe_err(m, KDC_INVALID_INPUT, loc, "expected a shape list, got %s",
                      show(o, b, sizeof b));
  size_t n = json_object_array_length(o);
  if (n > KDC_MAX_RANK)
    return kdc_fe_err(m, KDC_UNSUPPORTED, loc, "rank %zu exceeds kdc's maximum rank %d", n,
                      (int)KDC_MAX_RANK);
  out->rank = (int)n;
  for (size_t i = 0; i < n; i++) {
    json_object *d = json_object_array_get_idx(o, i);
    int64_t x;
    if (kdc_fe_is_null(d)) {
      out->dims[i] = -1;
    } else if (as_int(d, &x) && (x >= 0 || x == -1)) {
      out->dims[i] = x;
    } else {
      return kdc_fe_err(m, KDC_INVALID_INPUT, loc,
                        "expected a shape list of integers or null, got %s at [%zu]",
                        show(d, b, sizeof b), i);
    }
  }
  int64_t numel;
  if (!kdc_kshape_known_numel(out, &numel))
    return kdc_fe_err(m, KDC_INVALID_INPUT, loc, "the dims multiply to more than 2^40 elements "
                      "(kdc's limit per tensor)");
  return NULL;
}

kdc_status kdc_fe_cfg_activation(const kdc_keras_layer *l, const char *key,
                                 const char **out) {
  json_object *v = kdc_fe_get(l->config, key);
  if (kdc_fe_is_null(v)) {
    *out = "linear";
    return NULL;
  }
  if (json_object_is_type(v, json_type_string)) {
    *out = json_object_get_string(v);
    return NULL;
  }
  /* Keras 3 may serialize a function as {"class_name": "function", "config": "relu"}. */
  json_object *c = kdc_fe_get(v, "config");
  if (c && json_object_is_type(c, json_type_string)) {
    *out = json_object_get_string(c);
    return NULL;
  }
  return cfg_err(l, key, "an activation name", v);
}
