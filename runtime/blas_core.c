/*
 * runtime/blas_core.c: make a DYNAMIC_ARCH OpenBLAS use the kernels of the
 * CPU it runs on.
 *
 * OpenBLAS picks its kernels once, when the library loads, from the CPU's
 * family and model.  A release older than the CPU (Debian 12 ships 0.3.21)
 * does not know newer models and falls back to its oldest x86-64 kernels
 * (Prescott, SSE3), 3-10x slower on GEMMs than the AVX-512 or AVX2 kernels
 * the CPU can run.  The choice can only be changed by OPENBLAS_CORETYPE in
 * the environment before the library loads, so a program that finds the
 * fallback on a CPU with better instructions sets it and executes itself
 * again (same arguments, same process id: mpirun and timeouts see nothing).
 *
 * Left alone: a user's OPENBLAS_CORETYPE, KDC_BLAS_CORE=keep, a core that
 * is not the fallback, and a CPU with nothing better.  Results stay within
 * float rounding of the fallback's (different kernels sum in another order).
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "runtime/runtime.h"

char *openblas_get_corename(void);

/* The best OpenBLAS core this CPU runs, or NULL. */
static const char *best_core(void) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl"))
    return "SkylakeX";
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "Haswell";
  if (__builtin_cpu_supports("avx")) return "Sandybridge";
#endif
  return NULL;
}

const char *kdc_rt_blas_core(void) { return openblas_get_corename(); }

void kdc_rt_blas_select_core(char **argv) {
  const char *keep = getenv("KDC_BLAS_CORE");
  if (getenv("OPENBLAS_CORETYPE") || (keep && !strcmp(keep, "keep"))) return;
  const char *now = openblas_get_corename();
  if (!now || strcasecmp(now, "Prescott")) return;
  const char *best = best_core();
  if (!best) return;
  if (setenv("OPENBLAS_CORETYPE", best, 1)) return;
  execv("/proc/self/exe", argv);
  /* not re-executed (no /proc): run on the fallback kernels */
  unsetenv("OPENBLAS_CORETYPE");
}
