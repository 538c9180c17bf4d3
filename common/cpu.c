/*
 * common/cpu.c: what the processor running kdc can do, where a pass or the
 * runtime chooses by it (common/io.h).
 */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "common/io.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#define ARCH_REQ_XCOMP_PERM 0x1023 /* Linux 5.16+: ask for the AMX tile state */
#define XFEATURE_XTILEDATA 18
#endif

static int bf16_state; /* 0 unknown, 1 yes, -1 no (a benign race: every thread finds the same) */

/* AMX-BF16 tiles (CPUID 7.0 EDX bits 22 and 24) that the kernel lets this
 * process use, and AVX-512 BF16 for the conversions. */
static bool probe(void) {
#if defined(__x86_64__) && defined(__GNUC__) && (__GNUC__ >= 11 || defined(__clang__))
  const char *env = getenv("KDC_CPU_BF16");
  if (env && !strcmp(env, "off")) return false;
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512bw") ||
      !__builtin_cpu_supports("avx512vl") || !__builtin_cpu_supports("avx512bf16"))
    return false;
  unsigned a, b, c, d;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(d & (1u << 22)) || !(d & (1u << 24)))
    return false;
  return syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
#else
  return false;
#endif
}

bool kdc_cpu_bf16(void) {
  int s = __atomic_load_n(&bf16_state, __ATOMIC_RELAXED);
  if (s) return s > 0;
  bool yes = probe();
  __atomic_store_n(&bf16_state, yes ? 1 : -1, __ATOMIC_RELAXED);
  return yes;
}
