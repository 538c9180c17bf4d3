/*
 * common/trace.h: the start-up trace (docs/runtime.md, "Start-up trace").
 *
 * With KDC_TRACE_STARTUP=1 in the environment, kdc_trace() prints one line
 * per phase on stderr:
 *
 *   kdc: startup:   41.3 ms   +2.1 ms  plan read + checksum (12.4 MB)
 *
 * the first figure is milliseconds since the process started (exec: the
 * start time the kernel records in /proc/self/stat, in clock ticks of 10
 * ms, so it is that coarse), the second the time since the previous line
 * (CLOCK_BOOTTIME, exact).  Without the variable nothing is printed and a
 * call costs one load of a flag.  Thread-safe (one fprintf per line).
 */
#ifndef KDC_COMMON_TRACE_H
#define KDC_COMMON_TRACE_H

#include <stdbool.h>

bool kdc_trace_on(void);
void kdc_trace(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
