/*
 * frontend/init.c: Keras' default weight initialisers, deterministic.
 *
 * Distributions and their parameters are Keras 3's
 * (keras/src/initializers/random_initializers.py, constant_initializers.py):
 * GlorotUniform/Normal, HeNormal/Uniform, LecunNormal/Uniform, the general
 * VarianceScaling (fans as compute_fans: receptive field * channels),
 * RandomNormal/Uniform, TruncatedNormal (resampled beyond 2 stddev),
 * Orthogonal (QR of a normal matrix with positive diagonal), Identity,
 * Zeros, Ones, Constant.  LSTM biases follow unit_forget_bias (the forget
 * gate block is ones).
 *
 * The random numbers are kdc's own, not Keras': element i of a variable is
 * drawn from a counter-based generator (splitmix64 of the counter, keyed by
 * xxHash64(variable path, seed)), so values do not depend on the order in
 * which variables are initialised or on the number of threads, and the same
 * seed always gives the same weights.  An initializer's own "seed" replaces
 * the global seed for that variable.  See docs/frontend.md.
 */
#include <ctype.h>
#include <json-c/json.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/io.h"
#include "frontend/frontend.h"

static uint64_t mix(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* Uniform in [0, 1) with 53 bits from counter |c| of stream |key|. */
static double uni(uint64_t key, uint64_t c) { return (double)(mix(key ^ mix(c)) >> 11) * 0x1p-53; }

static double normal(uint64_t key, uint64_t c) {
  double u1 = uni(key, 2 * c), u2 = uni(key, 2 * c + 1);
  return sqrt(-2.0 * log(1.0 - u1)) * cos(2.0 * M_PI * u2);
}

/* Standard normal truncated to [-2, 2] by resampling (counter c, try t). */
static double trunc_normal(uint64_t key, uint64_t c) {
  for (uint64_t t = 0; t < 64; t++) {
    double z = normal(key, c * 64 + t);
    if (fabs(z) <= 2.0) return z;
  }
  return 0.0;
}

/* "GlorotUniform" / "glorot_uniform" -> "glorotuniform" */
static void canon(const char *s, char *out, size_t n) {
  size_t k = 0;
  for (; *s && k + 1 < n; s++)
    if (*s != '_') out[k++] = (char)tolower((unsigned char)*s);
  out[k] = 0;
}

static double num(json_object *cfg, const char *key, double dflt) {
  json_object *v = kdc_fe_get(cfg, key);
  if (!v || (!json_object_is_type(v, json_type_double) && !json_object_is_type(v, json_type_int)))
    return dflt;
  return json_object_get_double(v);
}

static const char *str(json_object *cfg, const char *key, const char *dflt) {
  json_object *v = kdc_fe_get(cfg, key);
  return v && json_object_is_type(v, json_type_string) ? json_object_get_string(v) : dflt;
}

/* Keras compute_fans. */
static void fans(const kdc_kshape *s, double *fan_in, double *fan_out) {
  if (s->rank == 0) {
    *fan_in = *fan_out = 1;
  } else if (s->rank == 1) {
    *fan_in = *fan_out = (double)s->dims[0];
  } else {
    double rf = 1;
    for (int i = 0; i < s->rank - 2; i++) rf *= (double)s->dims[i];
    *fan_in = (double)s->dims[s->rank - 2] * rf;
    *fan_out = (double)s->dims[s->rank - 1] * rf;
  }
}

/* Orthogonal: QR (modified Gram-Schmidt, positive diagonal) of a normal
 * (max(r,c), min(r,c)) matrix, transposed when rows < cols. */
static void orthogonal(uint64_t key, const kdc_kshape *s, double gain, float *dst) {
  int64_t cols = s->rank ? s->dims[s->rank - 1] : 1, rows = 1;
  for (int i = 0; i + 1 < s->rank; i++) rows *= s->dims[i];
  int64_t n = rows > cols ? rows : cols, k = rows > cols ? cols : rows;
  /* column-major (a[c*n + r] is element (r, c) of the n x k matrix, drawn
   * as stream element r*k + c): Gram-Schmidt then walks contiguous columns.
   * Same operations in the same order as row-major, so the same values; the
   * row-major walk took 10 s for one seq2seq model's LSTM kernels */
  double *a = kdc_xmalloc(sizeof(double) * (size_t)(n * k));
  for (int64_t r = 0; r < n; r++)
    for (int64_t c = 0; c < k; c++) a[c * n + r] = normal(key, (uint64_t)(r * k + c));
  for (int64_t j = 0; j < k; j++) {
    double *aj = a + j * n;
    for (int64_t i = 0; i < j; i++) {
      const double *ai = a + i * n;
      double d = 0;
      for (int64_t r = 0; r < n; r++) d += ai[r] * aj[r];
      for (int64_t r = 0; r < n; r++) aj[r] -= d * ai[r];
    }
    double nr = 0;
    for (int64_t r = 0; r < n; r++) nr += aj[r] * aj[r];
    nr = sqrt(nr);
    for (int64_t r = 0; r < n; r++) aj[r] = nr > 0 ? aj[r] / nr : 0;
  }
  for (int64_t r = 0; r < rows; r++)
    for (int64_t c = 0; c < cols; c++)
      dst[r * cols + c] = (float)(gain * (rows >= cols ? a[c * n + r] : a[r * n + c]));
  free(a);
}

/* Fills |n| floats at |dst| (offset |c0| in the stream) by initializer |spec|. */
static kdc_status fill(const kdc_keras_model *m, const char *at, json_object *spec,
                       const char *dflt, const kdc_kshape *shape, uint64_t key, uint64_t c0,
                       int64_t n, float *dst) {
  const char *name = dflt;
  json_object *cfg = NULL;
  if (json_object_is_type(spec, json_type_string)) {
    name = json_object_get_string(spec);
  } else if (json_object_is_type(spec, json_type_object)) {
    name = str(spec, "class_name", NULL);
    cfg = kdc_fe_get(spec, "config");
    if (!name) return kdc_fe_err(m, KDC_INVALID_INPUT, at, "expected an initializer class_name");
  }
  char c[64];
  canon(name, c, sizeof c);
  json_object *sd = kdc_fe_get(cfg, "seed");
  if (sd && json_object_is_type(sd, json_type_int)) key = mix(key ^ (uint64_t)json_object_get_int64(sd));
  double scale = 1, fi, fo;
  const char *mode = "fan_in", *dist = "truncated_normal";
  if (!strcmp(c, "zeros") || !strcmp(c, "zero")) {
    for (int64_t i = 0; i < n; i++) dst[i] = 0;
    return NULL;
  }
  if (!strcmp(c, "ones") || !strcmp(c, "one")) {
    for (int64_t i = 0; i < n; i++) dst[i] = 1;
    return NULL;
  }
  if (!strcmp(c, "constant")) {
    double v = num(cfg, "value", 0);
    for (int64_t i = 0; i < n; i++) dst[i] = (float)v;
    return NULL;
  }
  if (!strcmp(c, "randomuniform") || !strcmp(c, "uniform")) {
    double lo = num(cfg, "minval", -0.05), hi = num(cfg, "maxval", 0.05);
    for (int64_t i = 0; i < n; i++) dst[i] = (float)(lo + (hi - lo) * uni(key, c0 + (uint64_t)i));
    return NULL;
  }
  if (!strcmp(c, "randomnormal") || !strcmp(c, "normal")) {
    double mu = num(cfg, "mean", 0), sd2 = num(cfg, "stddev", 0.05);
    for (int64_t i = 0; i < n; i++) dst[i] = (float)(mu + sd2 * normal(key, c0 + (uint64_t)i));
    return NULL;
  }
  if (!strcmp(c, "truncatednormal")) {
    double mu = num(cfg, "mean", 0), sd2 = num(cfg, "stddev", 0.05);
    for (int64_t i = 0; i < n; i++) dst[i] = (float)(mu + sd2 * trunc_normal(key, c0 + (uint64_t)i));
    return NULL;
  }
  /* Keras 3 writes its class name, OrthogonalInitializer ("Orthogonal" and
   * "orthogonal" are its aliases; keras/src/initializers/__init__.py) */
  if (!strcmp(c, "orthogonal") || !strcmp(c, "orthogonalinitializer")) {
    orthogonal(key, shape, num(cfg, "gain", 1), dst);
    return NULL;
  }
  if (!strcmp(c, "identity") || !strcmp(c, "identityinitializer")) {
    if (shape->rank != 2)
      return kdc_fe_err(m, KDC_INVALID_INPUT, at, "Identity initializer needs a 2-D variable");
    double g = num(cfg, "gain", 1);
    for (int64_t i = 0; i < n; i++)
      dst[i] = (i / shape->dims[1] == i % shape->dims[1]) ? (float)g : 0.0f;
    return NULL;
  }
  if (!strcmp(c, "glorotuniform")) mode = "fan_avg", dist = "uniform";
  else if (!strcmp(c, "glorotnormal")) mode = "fan_avg";
  else if (!strcmp(c, "henormal")) scale = 2;
  else if (!strcmp(c, "heuniform")) scale = 2, dist = "uniform";
  else if (!strcmp(c, "lecunnormal")) ;
  else if (!strcmp(c, "lecununiform")) dist = "uniform";
  else if (!strcmp(c, "variancescaling")) {
    scale = num(cfg, "scale", 1);
    mode = str(cfg, "mode", "fan_in");
    dist = str(cfg, "distribution", "truncated_normal");
    /* Keras' VarianceScaling.__init__ refuses both (a negative scale made
     * every weight NaN through sqrt) */
    if (!(scale > 0) || !isfinite(scale))
      return kdc_fe_err(m, KDC_INVALID_INPUT, at, "VarianceScaling scale must be a positive finite "
                        "number, got %g", scale);
    if (strcmp(mode, "fan_in") && strcmp(mode, "fan_out") && strcmp(mode, "fan_avg"))
      return kdc_fe_err(m, KDC_INVALID_INPUT, at, "VarianceScaling mode must be fan_in, fan_out or "
                        "fan_avg, got \"%s\"", mode);
  } else {
    return kdc_fe_err(m, KDC_UNSUPPORTED, at, "initializer \"%s\" is not supported by kdc", name);
  }
  fans(shape, &fi, &fo);
  double fan = !strcmp(mode, "fan_in") ? fi : !strcmp(mode, "fan_out") ? fo : (fi + fo) / 2;
  scale /= fan > 1 ? fan : 1;
  if (!strcmp(dist, "uniform")) {
    double lim = sqrt(3 * scale);
    for (int64_t i = 0; i < n; i++) dst[i] = (float)(lim * (2 * uni(key, c0 + (uint64_t)i) - 1));
  } else if (!strcmp(dist, "untruncated_normal")) {
    double sdv = sqrt(scale);
    for (int64_t i = 0; i < n; i++) dst[i] = (float)(sdv * normal(key, c0 + (uint64_t)i));
  } else if (!strcmp(dist, "truncated_normal") || !strcmp(dist, "normal")) {
    double sdv = sqrt(scale) / 0.87962566103423978;
    for (int64_t i = 0; i < n; i++) dst[i] = (float)(sdv * trunc_normal(key, c0 + (uint64_t)i));
  } else {
    return kdc_fe_err(m, KDC_INVALID_INPUT, at, "unknown VarianceScaling distribution \"%s\"", dist);
  }
  return NULL;
}

kdc_status kdc_frontend_init_var(const kdc_keras_model *m, const kdc_keras_var *v, uint64_t seed,
                                 void *dst) {
  const kdc_keras_layer *l = v->layer;
  int64_t n = kdc_kshape_numel(&v->shape);
  if (v->dtype == KDC_DTYPE_I64) {
    memset(dst, 0, sizeof(int64_t) * (size_t)n);
    return NULL;
  }
  uint64_t key = kdc_hash64(v->path, strlen(v->path), seed);
  json_object *spec = v->init_key ? kdc_fe_get(l->config, v->init_key) : NULL;
  if (kdc_fe_is_null(spec)) spec = NULL;
  const char *at = v->init_key ? kdc_arena_printf(l->model->arena, "%s.config.%s", l->loc, v->init_key)
                               : l->loc;
  bool forget = false;
  if (!strcmp(l->class_name, "LSTM") && !strcmp(v->name, "bias")) {
    json_object *ufb = kdc_fe_get(l->config, "unit_forget_bias");
    forget = !ufb || !json_object_is_type(ufb, json_type_boolean) || json_object_get_boolean(ufb);
  }
  if (!strcmp(l->class_name, "LayerScale")) { /* initializers.Constant(init_values) */
    double c = num(l->config, "init_values", 0);
    for (int64_t i = 0; i < n; i++) ((float *)dst)[i] = (float)c;
    return NULL;
  }
  if (!forget) return fill(m, at, spec, v->init_default, &v->shape, key, 0, n, dst);
  /* [init(units), ones(units), init(2 units)] (keras/src/layers/rnn/lstm.py) */
  int64_t u = n / 4;
  float *f = dst;
  kdc_kshape s1 = kdc_kshape_make(1, &u), s2 = s1;
  s2.dims[0] = 2 * u;
  KDC_RETURN_IF_ERROR(fill(m, at, spec, v->init_default, &s1, key, 0, u, f));
  for (int64_t i = 0; i < u; i++) f[u + i] = 1;
  return fill(m, at, spec, v->init_default, &s2, key, (uint64_t)(2 * u), 2 * u, f + 2 * u);
}
