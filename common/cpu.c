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

static int bf16_state; /* kind + 1, 0 unknown (a benign race: every thread finds the same) */

/* AVX-512 BF16 (with F, BW, VL for the packing), then AMX-BF16 tiles
 * (CPUID 7.0 EDX bits 22 and 24) that the kernel lets this process use.
 * The AVX-512 BF16 kernel only where asked for (KDC_CPU_BF16=avx512): on
 * the one CPU measured it runs at half the speed of OpenBLAS' sgemm
 * (docs/codegen.md), and both compute the same exact products. */
static kdc_cpu_bf16_kind probe(void) {
#if defined(__x86_64__) && defined(__GNUC__) && (__GNUC__ >= 11 || defined(__clang__))
  const char *env = getenv("KDC_CPU_BF16");
  if (env && !strcmp(env, "off")) return KDC_CPU_BF16_NONE;
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512bw") ||
      !__builtin_cpu_supports("avx512vl") || !__builtin_cpu_supports("avx512bf16"))
    return KDC_CPU_BF16_NONE;
  if (env && !strcmp(env, "avx512")) return KDC_CPU_BF16_AVX512;
  unsigned a, b, c, d;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(d & (1u << 22)) || !(d & (1u << 24)))
    return KDC_CPU_BF16_NONE;
  return syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0 ? KDC_CPU_BF16_AMX
                                                                               : KDC_CPU_BF16_NONE;
#else
  return KDC_CPU_BF16_NONE;
#endif
}

kdc_cpu_bf16_kind kdc_cpu_bf16_kernel(void) {
  int s = __atomic_load_n(&bf16_state, __ATOMIC_RELAXED);
  if (s) return (kdc_cpu_bf16_kind)(s - 1);
  kdc_cpu_bf16_kind k = probe();
  __atomic_store_n(&bf16_state, (int)k + 1, __ATOMIC_RELAXED);
  return k;
}

bool kdc_cpu_bf16(void) { return kdc_cpu_bf16_kernel() != KDC_CPU_BF16_NONE; }

const char *kdc_cpu_bf16_name(kdc_cpu_bf16_kind k) {
  return k == KDC_CPU_BF16_AMX ? "AMX-BF16" : k == KDC_CPU_BF16_AVX512 ? "AVX-512 BF16" : "none";
}
