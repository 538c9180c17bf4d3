/*
 * common/trace.c: the start-up trace (trace.h).
 *
 * The flag and the process's start time are read by a constructor, so the
 * first line can say how long the loader and the libraries' constructors
 * took before kdc's own code ran.
 */
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/trace.h"

static bool on;
static double start_ms;             /* the process's start (CLOCK_BOOTTIME), ms */
static _Atomic double last_ms;

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_BOOTTIME, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

/* Field 22 of /proc/self/stat: the start time in clock ticks after boot
 * (field 2, the command name, may hold spaces and parentheses: skip to the
 * last ')'). */
static double process_start_ms(double fallback) {
  FILE *f = fopen("/proc/self/stat", "r");
  if (!f) return fallback;
  char buf[1024];
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = 0;
  char *p = strrchr(buf, ')');
  long hz = sysconf(_SC_CLK_TCK);
  if (!p || hz <= 0) return fallback;
  unsigned long long ticks = 0;
  /* after ')': state (3) ... starttime (22): 19 fields to skip */
  if (sscanf(p + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d %*d %*d "
             "%*d %llu", &ticks) != 1)
    return fallback;
  double ms = (double)ticks * 1e3 / (double)hz;
  return ms <= fallback ? ms : fallback;
}

__attribute__((constructor)) static void trace_init(void) {
  const char *e = getenv("KDC_TRACE_STARTUP");
  on = e && *e && strcmp(e, "0");
  if (!on) return;
  double t = now_ms();
  start_ms = process_start_ms(t);
  last_ms = start_ms;
  kdc_trace("libraries loaded (exec to kdc's first constructor)");
}

bool kdc_trace_on(void) { return on; }

void kdc_trace(const char *fmt, ...) {
  if (!on) return;
  char msg[400];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  double t = now_ms(), prev = atomic_exchange(&last_ms, t);
  fprintf(stderr, "kdc: startup: %8.1f ms %+8.1f ms  %s\n", t - start_ms, t - prev, msg);
}
