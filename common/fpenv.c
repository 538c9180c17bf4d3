/*
 * common/fpenv.c: subnormal flushing on the calling thread (kdc/fpenv.h).
 *
 * x86-64: MXCSR bits FTZ (15) and DAZ (6), which every x86-64 CPU has;
 * SSE and AVX code (LLVM's kernels, OpenBLAS, libm's f32 functions) obeys
 * them.  AArch64: FPCR.FZ (bit 24) does both.  Elsewhere nothing is set
 * and subnormals are kept (kdc_fp_flushing says so).
 */
#include "kdc/fpenv.h"

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>

enum { FLUSH_BITS = 0x8040 }; /* FTZ | DAZ */

unsigned long kdc_fp_flush_enter(void) {
  unsigned prev = _mm_getcsr();
  if ((prev & FLUSH_BITS) != FLUSH_BITS) _mm_setcsr(prev | FLUSH_BITS);
  return prev;
}

void kdc_fp_flush_leave(unsigned long saved) {
  if (_mm_getcsr() != (unsigned)saved) _mm_setcsr((unsigned)saved);
}

int kdc_fp_flushing(void) { return (_mm_getcsr() & FLUSH_BITS) == FLUSH_BITS; }

#elif defined(__aarch64__)

static unsigned long get_fpcr(void) {
  unsigned long v;
  __asm__ __volatile__("mrs %0, fpcr" : "=r"(v));
  return v;
}

static void set_fpcr(unsigned long v) { __asm__ __volatile__("msr fpcr, %0" : : "r"(v)); }

enum { FPCR_FZ = 1 << 24 };

unsigned long kdc_fp_flush_enter(void) {
  unsigned long prev = get_fpcr();
  if (!(prev & FPCR_FZ)) set_fpcr(prev | FPCR_FZ);
  return prev;
}

void kdc_fp_flush_leave(unsigned long saved) {
  if (get_fpcr() != saved) set_fpcr(saved);
}

int kdc_fp_flushing(void) { return (get_fpcr() & FPCR_FZ) != 0; }

#else

unsigned long kdc_fp_flush_enter(void) { return 0; }
void kdc_fp_flush_leave(unsigned long saved) { (void)saved; }
int kdc_fp_flushing(void) { return 0; }

#endif
