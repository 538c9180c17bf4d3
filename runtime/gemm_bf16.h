/*
 * runtime/gemm_bf16.h: the CPU GEMM of a step, with AMX-BF16 tiles for steps
 * whose operands hold bf16 values (runtime/gemm_bf16.c).
 */
#ifndef KDC_RUNTIME_GEMM_BF16_H
#define KDC_RUNTIME_GEMM_BF16_H

#include <stdbool.h>
#include <stdint.h>

/* C = op(A) op(B), row-major, m x n, alpha 1, beta 0, single-threaded.
 * |bf16_inputs|: the operands are bf16 values (held in f32) -- computed
 * in AMX tiles or by vdpbf16ps as kdc_cpu_bf16_kernel() says (common/io.h),
 * else (and for other steps) by cblas_sgemm. */
void rt_sgemm(bool bf16_inputs, bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float *A,
              int64_t lda, const float *B, int64_t ldb, float *C, int64_t ldc);

#endif
