/*
 * test_util.h: helpers shared by the tests of common/ (header-only, each
 * test executable includes it once).
 *
 *   tu_tmpdir()          a fresh directory under $TMPDIR, removed at exit
 *   tu_path(name)        "<tmpdir>/<name>" in a static rotating buffer
 *   tu_write(path, ...)  writes raw bytes (not atomically: test setup)
 *   tu_dir_entries()     number of entries in the temp dir (leftover temps)
 *   TU_ERR(st, code, ...)  asserts |st| has |code| and its message contains
 *                        every given substring, then frees it
 */
#ifndef KDC_TESTS_COMMON_TEST_UTIL_H
#define KDC_TESTS_COMMON_TEST_UTIL_H

#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/io.h"

/* cmocka passes every test a |state| most of them ignore. */
#define TU_UNUSED __attribute__((unused))

#ifndef KDC_TEST_DATA_DIR
#define KDC_TEST_DATA_DIR "tests/common/data"
#endif

static char tu_dir[256];

static void tu_cleanup(void) {
  if (!tu_dir[0]) return;
  DIR *d = opendir(tu_dir);
  if (d) {
    struct dirent *e;
    char p[512];
    while ((e = readdir(d)))
      if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
        snprintf(p, sizeof p, "%s/%s", tu_dir, e->d_name);
        unlink(p);
      }
    closedir(d);
  }
  rmdir(tu_dir);
}

static inline const char *tu_tmpdir(void) {
  if (!tu_dir[0]) {
    const char *base = getenv("TMPDIR");
    snprintf(tu_dir, sizeof tu_dir, "%s/kdc_test_XXXXXX", base && *base ? base : "/tmp");
    if (!mkdtemp(tu_dir)) abort();
    atexit(tu_cleanup);
  }
  return tu_dir;
}

static inline const char *tu_path(const char *name) {
  static char bufs[4][512];
  static int next;
  char *p = bufs[next++ % 4];
  snprintf(p, 512, "%s/%s", tu_tmpdir(), name);
  return p;
}

static inline const char *tu_data(const char *name) {
  static char bufs[4][512];
  static int next;
  char *p = bufs[next++ % 4];
  snprintf(p, 512, "%s/%s", KDC_TEST_DATA_DIR, name);
  return p;
}

static inline void tu_write(const char *path, const void *data, size_t n) {
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  assert_int_equal(fwrite(data, 1, n, f), n);
  assert_int_equal(fclose(f), 0);
}

static inline int tu_dir_entries(void) {
  DIR *d = opendir(tu_tmpdir());
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)))
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) n++;
  closedir(d);
  return n;
}

static inline void tu_assert_ok(kdc_status st, const char *file, int line) {
  if (st) {
    print_error("%s:%d: unexpected error: %s\n", file, line, kdc_status_message(st));
    kdc_status_free(st);
    _fail(file, line);
  }
}
#define TU_OK(expr) tu_assert_ok((expr), __FILE__, __LINE__)

/* Checks |st| against |code| and a NULL-terminated list of substrings. */
static inline void tu_assert_err(kdc_status st, kdc_code code, const char *file, int line,
                                 ...) {
  if (!st) {
    print_error("%s:%d: expected an error, got success\n", file, line);
    _fail(file, line);
  }
  const char *msg = kdc_status_message(st);
  bool ok = kdc_status_code(st) == code && !strchr(msg, '\n');
  va_list ap;
  va_start(ap, line);
  for (const char *sub; (sub = va_arg(ap, const char *));)
    if (!strstr(msg, sub)) {
      print_error("%s:%d: message lacks \"%s\"\n", file, line, sub);
      ok = false;
    }
  va_end(ap);
  if (!ok) {
    print_error("%s:%d: got [%s] %s\n", file, line, kdc_code_name(kdc_status_code(st)), msg);
    kdc_status_free(st);
    _fail(file, line);
  }
  kdc_status_free(st);
}
#define TU_ERR(st, code, ...) tu_assert_err((st), (code), __FILE__, __LINE__, __VA_ARGS__, NULL)

#endif
