/*
 * kdc_status: the only error channel of library code (STYLE.md 8-9).
 *
 * A status is NULL for success, or an owned heap object carrying a code, a
 * one-line message and the C file/line that made it.  Messages for bad input
 * read like a compiler's diagnostics, location first:
 *     model.json: config.layers[3].config.units: expected a positive integer
 * Library code never calls exit(); tools/kdc maps codes to exit statuses
 * (bad input -> 2, internal -> 3).
 *
 * Ownership: whoever receives a non-NULL status owns it and must either
 * return it upward or call kdc_status_free().
 */
#ifndef KDC_STATUS_H
#define KDC_STATUS_H

#include <stdarg.h>
#include <stddef.h>

#include "kdc/error.h"

/* Makes a status with |code| and a printf-formatted message.  Never returns
 * NULL (falls back to a static out-of-memory status). */
kdc_status kdc_status_make(kdc_code code, const char *file, int line,
                           const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
kdc_status kdc_status_makev(kdc_code code, const char *file, int line,
                            const char *fmt, va_list ap);

/* Prefixes the message of |st| with a formatted context ("ctx: old").
 * Returns |st| (NULL stays NULL). */
kdc_status kdc_status_annotate(kdc_status st, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#define KDC_ERR(code, ...) kdc_status_make((code), __FILE__, __LINE__, __VA_ARGS__)
#define KDC_RETURN_IF_ERROR(expr)                    \
  do { kdc_status st_ = (expr); if (st_) return st_; } while (0)

/* Internal invariants: abort with file:line.  Never for bad input. */
void kdc_fatal(const char *file, int line, const char *fmt, ...)
    __attribute__((noreturn, format(printf, 3, 4)));
#define KDC_ASSERT(c) \
  do { if (!(c)) kdc_fatal(__FILE__, __LINE__, "assertion failed: %s", #c); } while (0)
#define kdc_unreachable() kdc_fatal(__FILE__, __LINE__, "unreachable")

/* Memory exhausted (the checked allocators of arena.h): one line
 * "kdc: error: out of memory: cannot allocate N bytes" and exit status 3,
 * never an abort; exit() runs the atexit handler that removes temp files. */
void kdc_out_of_memory(size_t bytes) __attribute__((noreturn));

#endif
