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
 */
#ifndef KDC_TESTS_FRONTEND_FE_TEST_H
#define KDC_TESTS_FRONTEND_FE_TEST_H

#include <dirent.h>
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

#endif
