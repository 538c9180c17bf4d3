/* kdc_status implementation: heap-allocated, one line, context prefixes. */
#include "kdc/status.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct kdc_status_s {
  kdc_code code;
  const char *file;
  int line;
  char *msg;
};

static struct kdc_status_s oom_status = {KDC_OUT_OF_MEMORY, __FILE__, __LINE__,
                                         "out of memory"};

/* Keeps messages on one line: newlines and tabs become spaces. */
static void flatten(char *s) {
  for (; *s; s++)
    if (*s == '\n' || *s == '\r' || *s == '\t') *s = ' ';
}

kdc_status kdc_status_makev(kdc_code code, const char *file, int line,
                            const char *fmt, va_list ap) {
  struct kdc_status_s *st = malloc(sizeof *st);
  if (!st) return &oom_status;
  char *msg = NULL;
  if (vasprintf(&msg, fmt, ap) < 0) {
    free(st);
    return &oom_status;
  }
  flatten(msg);
  st->code = code;
  st->file = file;
  st->line = line;
  st->msg = msg;
  return st;
}

kdc_status kdc_status_make(kdc_code code, const char *file, int line,
                           const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  kdc_status st = kdc_status_makev(code, file, line, fmt, ap);
  va_end(ap);
  return st;
}

kdc_status kdc_status_annotate(kdc_status st, const char *fmt, ...) {
  if (!st || st == &oom_status) return st;
  char *ctx = NULL;
  va_list ap;
  va_start(ap, fmt);
  int n = vasprintf(&ctx, fmt, ap);
  va_end(ap);
  if (n < 0) return st;
  char *msg = NULL;
  if (asprintf(&msg, "%s: %s", ctx, st->msg) >= 0) {
    flatten(msg);
    free(st->msg);
    st->msg = msg;
  }
  free(ctx);
  return st;
}

kdc_code kdc_status_code(kdc_status st) { return st ? st->code : KDC_OK; }
const char *kdc_status_message(kdc_status st) { return st ? st->msg : ""; }
const char *kdc_status_file(kdc_status st) { return st ? st->file : ""; }
int kdc_status_line(kdc_status st) { return st ? st->line : 0; }

void kdc_status_free(kdc_status st) {
  if (!st || st == &oom_status) return;
  free(st->msg);
  free(st);
}

const char *kdc_code_name(kdc_code code) {
  switch (code) {
  case KDC_OK: return "ok";
  case KDC_INVALID_INPUT: return "invalid input";
  case KDC_UNSUPPORTED: return "unsupported";
  case KDC_IO_ERROR: return "i/o error";
  case KDC_OUT_OF_MEMORY: return "out of memory";
  case KDC_UNAVAILABLE: return "unavailable";
  case KDC_INTERNAL: return "internal error";
  }
  return "unknown";
}

int kdc_code_exit_status(kdc_code code) {
  switch (code) {
  case KDC_OK: return 0;
  case KDC_INVALID_INPUT:
  case KDC_UNSUPPORTED:
  case KDC_IO_ERROR: return 2;
  default: return 3;
  }
}

void kdc_fatal(const char *file, int line, const char *fmt, ...) {
  va_list ap;
  fprintf(stderr, "kdc: internal error at %s:%d: ", file, line);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
  abort();
}

void kdc_out_of_memory(size_t bytes) {
  fprintf(stderr, "kdc: error: out of memory: cannot allocate %zu bytes\n", bytes);
  exit(3);
}
