/*
 * The floating-point environment kdc computes in (common/fpenv.c).
 *
 * kdc's f32 arithmetic on the CPU flushes subnormals: inputs below 2^-126
 * in magnitude are read as zero (DAZ) and results that small are written
 * as zero (FTZ), with the sign kept.  That is what Keras users get from
 * XLA:CPU (JAX) and TensorFlow, whose CPU executors run every computation
 * under tsl::port::ScopedFlushDenormal; PyTorch does not by default.  It
 * also keeps training from slowing down five-fold once Adam's moments or
 * vanishing gradients decay into subnormals (docs/runtime.md,
 * "Subnormals").  Everything that computes values of a program does it in
 * this mode: the runtime's threads (JIT kernels, OpenBLAS, collective
 * sums) and the reference interpreter, so the two agree bit for bit on
 * such values as they do on others.
 *
 * A library must not leave its mode on the caller's thread: enter/leave
 * bracket each computation, like TensorFlow's scoped guard.
 */
#ifndef KDC_FPENV_H
#define KDC_FPENV_H

/* Sets flush-to-zero and denormals-are-zero on this thread; returns the
 * previous control word for kdc_fp_flush_leave. */
unsigned long kdc_fp_flush_enter(void);
void kdc_fp_flush_leave(unsigned long saved);
/* Is this thread flushing subnormals now? (tests) */
int kdc_fp_flushing(void);

#endif
