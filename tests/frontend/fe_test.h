/*
 * fe_test.h: helpers shared by the frontend tests (header-only; each test
 * executable includes it once).
 *
 *   FE_DATA(name)        path of a fixture under tests/frontend/data
 *   FE_EXAMPLE(dir, f)   path of a file under examples/
 *   fe_real_dir()        ../shared/real-json, or NULL (tests then skip)
 *   fe_load_ok(path)     loads a model, failing the test with the message
 *   fe_assert_err(st, code, subs...)  |st| has |code| and its message holds
 *                        every substring (NULL-terminated list); frees it
 *   fe_tmp(name)         a path in a per-run temporary directory
 *   fe_model_file(tag, shape, cls, cfg, args, kwargs)  a one-layer Functional
 *                        model written to fe_tmp(tag)
 *   fe_run_check(path, b, x, w0, want, n)  lowers, binds default weights, interprets
 *                        and compares every output element with |want|
 */
#ifndef KDC_TESTS_FRONTEND_FE_TEST_H
#define KDC_TESTS_FRONTEND_FE_TEST_H

#include <dirent.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "frontend/frontend.h"

#define FE_UNUSED __attribute__((unused))
#define FE_DATA(name) KDC_SOURCE_DIR "/tests/frontend/data/" name
#define FE_EXAMPLE(dir, f) KDC_SOURCE_DIR "/examples/" dir "/" f

static FE_UNUSED const char *fe_real_dir(void) {
  static const char *dir = KDC_SHARED_DIR "/real-json";
  struct stat sb;
  if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
    printf("[  SKIP    ] %s is absent: real model files not tested\n", dir);
    return NULL;
  }
  return dir;
}

static FE_UNUSED kdc_keras_model *fe_load_ok(const char *path) {
  kdc_keras_model *m = NULL;
  kdc_status st = kdc_frontend_load(path, &m);
  if (st) fail_msg("loading %s: %s", path, kdc_status_message(st));
  return m;
}

static FE_UNUSED void fe_assert_err(kdc_status st, kdc_code code, ...) {
  if (!st) fail_msg("expected an error, got success");
  const char *msg = kdc_status_message(st);
  if (kdc_status_code(st) != code)
    fail_msg("expected code %s, got %s: %s", kdc_code_name(code), kdc_code_name(kdc_status_code(st)),
             msg);
  if (strchr(msg, '\n')) fail_msg("message is not one line: %s", msg);
  va_list ap;
  va_start(ap, code);
  for (const char *s; (s = va_arg(ap, const char *));)
    if (!strstr(msg, s)) fail_msg("message lacks \"%s\": %s", s, msg);
  va_end(ap);
  kdc_status_free(st);
}

static char fe_dir[256];

static FE_UNUSED void fe_cleanup(void) {
  if (!fe_dir[0]) return;
  DIR *d = opendir(fe_dir);
  if (d) {
    struct dirent *e;
    char p[600];
    while ((e = readdir(d)))
      if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
        snprintf(p, sizeof p, "%s/%s", fe_dir, e->d_name);
        unlink(p);
      }
    closedir(d);
  }
  rmdir(fe_dir);
}

static FE_UNUSED const char *fe_tmp(const char *name) {
  static char bufs[4][600];
  static int k;
  if (!fe_dir[0]) {
    const char *base = getenv("TMPDIR");
    snprintf(fe_dir, sizeof fe_dir, "%s/kdc_fe_XXXXXX", base && *base ? base : "/tmp");
    if (!mkdtemp(fe_dir)) abort();
    atexit(fe_cleanup);
  }
  char *b = bufs[k++ % 4];
  snprintf(b, 600, "%s/%s", fe_dir, name);
  return b;
}

static FE_UNUSED void fe_write(const char *path, const void *data, size_t n) {
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  assert_int_equal(fwrite(data, 1, n, f), n);
  fclose(f);
}

/* ---- small one-layer models (test_frontend_layers.c, test_frontend_layers2.c) */

/* |src| with every "KT" replaced by |kt|, into |dst|. */
static FE_UNUSED void fe_subst(char *dst, size_t n, const char *src, const char *kt) {
  size_t k = 0;
  for (const char *p = src; *p && k + 1 < n; p++) {
    if (p[0] == 'K' && p[1] == 'T') {
      k += (size_t)snprintf(dst + k, n - k, "%s", kt);
      p++;
    } else {
      dst[k++] = *p;
    }
  }
  dst[k < n ? k : n - 1] = 0;
}

/* A Keras 3 Functional model: Input(|shape|) -> layer |cls| named "L" with
 * |cfg| (the JSON members after "name"), called with |args| (NULL: the
 * input tensor) and |kwargs| ("{}" if NULL), where KT stands for the input
 * tensor. */
static FE_UNUSED const char *fe_model_file(const char *tag, const char *shape, const char *cls,
                              const char *cfg, const char *args, const char *kwargs) {
  static char buf[8192];
  char kt[512];
  snprintf(kt, sizeof kt, "{\"class_name\": \"__keras_tensor__\", \"config\": {\"shape\": [null, "
           "%s], \"dtype\": \"float32\", \"keras_history\": [\"in\", 0, 0]}}", shape);
  char a[1200], k[1200];
  fe_subst(a, sizeof a, args ? args : "[KT]", kt);
  fe_subst(k, sizeof k, kwargs ? kwargs : "{}", kt);
  int n = snprintf(
      buf, sizeof buf,
      "{\"module\": \"keras.src.models.functional\", \"class_name\": \"Functional\", \"config\": "
      "{\"name\": \"m\", \"trainable\": true, \"layers\": ["
      "{\"module\": \"keras.layers\", \"class_name\": \"InputLayer\", \"config\": "
      "{\"batch_shape\": "
      "[null, %s], \"dtype\": \"float32\", \"name\": \"in\"}, \"name\": \"in\", \"inbound_nodes\": "
      "[]},"
      "{\"module\": \"keras.layers\", \"class_name\": \"%s\", \"config\": {\"name\": \"L\", "
      "\"trainable\": true%s%s}, \"name\": \"L\", \"inbound_nodes\": [{\"args\": %s, \"kwargs\": "
      "%s}]}"
      "], \"input_layers\": [\"in\", 0, 0], \"output_layers\": [\"L\", 0, 0]}}",
      shape, cls, *cfg ? ", " : "", cfg, a, k);
  const char *p = fe_tmp(tag);
  fe_write(p, buf, (size_t)n);
  return p;
}

/* Lowers the model at |path| for batch |b|, binds Keras' default weights
 * (or |w| values for variable 0), runs |x| through the interpreter and
 * checks every output element against |want| (|n| values). */
static FE_UNUSED void fe_run_check(const char *path, int64_t b, const float *x, const float *w0, const float *want,
                int64_t n) {
  kdc_keras_model *m = fe_load_ok(path);
  kdc_lower_options opt = {.batch = b};
  kdc_module *mod = NULL;
  kdc_status st = kdc_frontend_lower(m, &opt, &mod);
  if (st) fail_msg("lowering: %s", kdc_status_message(st));
  assert_null(kdc_ir_verify_module(mod));
  assert_null(kdc_frontend_bind_weights(m, mod, NULL, 3));
  if (w0) memcpy(mod->weights[0].data, w0, kdc_type_bytes(&mod->weights[0].type));
  kdc_func *f = kdc_ir_module_find_func(mod, "predict");
  kdc_tensor *args = calloc(f->n_params, sizeof *args), out;
  args[0].type = kdc_ir_type(f, f->params[0])[0];
  args[0].data = (void *)x;
  st = kdc_ir_interpret(f, args, f->n_params, &out);
  if (st) fail_msg("interpret: %s", kdc_status_message(st));
  assert_int_equal(kdc_type_numel(&out.type), n);
  const float *got = out.data;
  for (int64_t i = 0; i < n; i++)
    if (!(fabsf(got[i] - want[i]) <= 1e-5f + 1e-5f * fabsf(want[i])))
      fail_msg("%s: element %lld: got %.8g, want %.8g", path, (long long)i, got[i], want[i]);
  free(out.data);
  free(args);
  kdc_ir_module_destroy(mod);
  kdc_frontend_free(m);
}

#endif
