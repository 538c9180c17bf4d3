/* Flag parsing helpers shared by the kdc subcommands. */
#include "tools/cli.h"

#include "common/io.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define USAGE(...) KDC_ERR(KDC_INVALID_INPUT, __VA_ARGS__)

bool cli_flag_value(cli_args *a, const char *flag, const char **out, kdc_status *st) {
  const char *arg = a->argv[a->i];
  size_t n = strlen(flag);
  if (strncmp(arg, flag, n) != 0) return false;
  if (arg[n] == '=') {
    *out = arg + n + 1;
    a->i++;
    return true;
  }
  if (arg[n] != '\0') return false;
  if (a->i + 1 >= a->argc) {
    *st = USAGE("%s needs a value (see kdc --help)", flag);
    a->i++;
    return true;
  }
  *out = a->argv[a->i + 1];
  a->i += 2;
  return true;
}

bool cli_flag(cli_args *a, const char *flag) {
  if (strcmp(a->argv[a->i], flag) != 0) return false;
  a->i++;
  return true;
}

/* strto* skip leading spaces and take '+', hex and "inf": flag numbers are
 * plain decimals (an optional '-' where negative values make sense). */
static bool plain_number(const char *s, bool real) {
  const char *p = s + (*s == '-');
  if (!*p) return false;
  for (; *p; p++)
    if (!((*p >= '0' && *p <= '9') || (real && (*p == '.' || *p == 'e' || *p == 'E' ||
                                                  *p == '-' || *p == '+'))))
      return false;
  return true;
}

kdc_status cli_parse_i64(const char *flag, const char *s, int64_t lo, int64_t hi, int64_t *out) {
  if (!plain_number(s, false))
    return USAGE("%s \"%s\": expected an integer from %" PRId64 " to %" PRId64, flag, s, lo, hi);
  char *end = NULL;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (errno || !*s || *end || v < lo || v > hi)
    return USAGE("%s \"%s\": expected an integer from %" PRId64 " to %" PRId64, flag, s, lo, hi);
  *out = v;
  return NULL;
}

kdc_status cli_parse_u64(const char *flag, const char *s, uint64_t *out) {
  if (!plain_number(s, false)) return USAGE("%s \"%s\": expected a non-negative integer", flag, s);
  char *end = NULL;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno || !*s || *end || s[0] == '-')
    return USAGE("%s \"%s\": expected a non-negative integer", flag, s);
  *out = v;
  return NULL;
}

kdc_status cli_parse_double(const char *flag, const char *s, double *out) {
  char *end = NULL;
  errno = 0;
  double v = plain_number(s, true) ? strtod(s, &end) : NAN;
  if (errno || !*s || !end || *end || !isfinite(v))
    return USAGE("%s \"%s\": expected a finite decimal number", flag, s);
  *out = v;
  return NULL;
}

kdc_status cli_unknown(const cli_args *a) {
  const char *arg = a->argv[a->i];
  if (arg[0] == '-') return USAGE("unknown option \"%s\" (see kdc --help)", arg);
  return USAGE("unexpected argument \"%s\" (see kdc --help)", arg);
}

kdc_status cli_outputs_end(kdc_status st) {
  kdc_status e = kdc_outputs_end(st == NULL);
  if (!st) return e;
  kdc_status_free(e);
  return st;
}

int cli_fail(kdc_status st) {
  int code = kdc_code_exit_status(kdc_status_code(st));
  fprintf(stderr, "kdc: error: %s\n", kdc_status_message(st));
  kdc_status_free(st);
  return code ? code : 3;
}
