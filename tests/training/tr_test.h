/*
 * tr_test.h: helpers shared by the tests of training (autodiff, losses,
 * optimizers, train_step).  Header-only; each test executable includes it
 * once.
 *
 *   tr_rand(lo, hi)          deterministic uniform doubles (fixed seed)
 *   tr_type(rank, d0, ...)   an f32 type
 *   tr_run(f, args, n, out)  kdc_ir_interpret, failing the test on error
 *   tr_free(out, n)          frees interpreter results
 *   TR_CLOSE(got, want, rtol, atol, what, ...)  |got - want| <= atol + rtol |want|
 */
#ifndef KDC_TESTS_TRAINING_TR_TEST_H
#define KDC_TESTS_TRAINING_TR_TEST_H

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "passes/passes.h"

static uint64_t tr_state = 0x9e3779b97f4a7c15ull;

static inline void tr_seed(uint64_t s) { tr_state = s * 0x9e3779b97f4a7c15ull + 1; }

/* xorshift64*: uniform in [lo, hi). */
static inline double tr_rand(double lo, double hi) {
  tr_state ^= tr_state >> 12;
  tr_state ^= tr_state << 25;
  tr_state ^= tr_state >> 27;
  uint64_t r = tr_state * 2685821657736338717ull;
  return lo + (hi - lo) * ((double)(r >> 11) / 9007199254740992.0);
}

static inline kdc_type tr_type(int rank, ...) {
  int64_t d[KDC_MAX_RANK];
  va_list ap;
  va_start(ap, rank);
  for (int i = 0; i < rank; i++) d[i] = va_arg(ap, int);
  va_end(ap);
  return kdc_type_make(KDC_DTYPE_F32, rank, d);
}

static inline void tr_run(const kdc_func *f, const kdc_tensor *args, size_t n, kdc_tensor *out) {
  kdc_status st = kdc_ir_interpret(f, args, n, out);
  if (st) {
    fail_msg("interpret %s: %s", f->name, kdc_status_message(st));
  }
}

static inline void tr_free(kdc_tensor *out, size_t n) {
  for (size_t i = 0; i < n; i++) free(out[i].data);
}

static inline void tr_expect_ok(kdc_status st) {
  if (st) fail_msg("unexpected error: %s", kdc_status_message(st));
}

#define TR_CLOSE(got, want, rtol, atol, ...)                                                 \
  do {                                                                                        \
    double g_ = (got), w_ = (want);                                                           \
    if (!(fabs(g_ - w_) <= (atol) + (rtol) * fabs(w_))) {                                     \
      char m_[256];                                                                           \
      snprintf(m_, sizeof m_, __VA_ARGS__);                                                   \
      fail_msg("%s: got %.9g, want %.9g (diff %.3g)", m_, g_, w_, fabs(g_ - w_));             \
    }                                                                                         \
  } while (0)

/* sum_i r[i] * w[i] in double: the scalar a gradient check differentiates. */
static inline double tr_weighted_sum(const kdc_tensor *r, const float *w) {
  double s = 0;
  int64_t n = kdc_type_numel(&r->type);
  for (int64_t i = 0; i < n; i++) s += (double)((const float *)r->data)[i] * (double)w[i];
  return s;
}

/* Checks the gradients of |f| against central finite differences.  |f|
 * returns y (weighted by |w| into a scalar) then dy/dx_k for each of its
 * |n_in| inputs; |base| holds those results at |args|.  Step h =
 * 1e-3·max(1,|x|); tolerance 1e-2·|fd| + 1e-3·max(1, max|fd|). */
static inline void tr_check_fd(const kdc_func *f, kdc_tensor *args, int n_in,
                               const kdc_tensor *base, const float *w, const char *name) {
  for (int k = 0; k < n_in; k++) {
    float *xk = args[k].data;
    const float *g = base[1 + k].data;
    int64_t n = kdc_type_numel(&args[k].type);
    double *fd = malloc(sizeof(double) * (size_t)(n ? n : 1)), scale = 1.0;
    kdc_tensor *out = calloc(f->n_results, sizeof *out);
    for (int64_t i = 0; i < n; i++) {
      float x0 = xk[i];
      double h = 1e-3 * fmax(1.0, fabs(x0));
      xk[i] = (float)(x0 + h);
      tr_run(f, args, (size_t)n_in, out);
      double yp = tr_weighted_sum(&out[0], w), xp = xk[i];
      tr_free(out, f->n_results);
      xk[i] = (float)(x0 - h);
      tr_run(f, args, (size_t)n_in, out);
      double ym = tr_weighted_sum(&out[0], w), xm = xk[i];
      tr_free(out, f->n_results);
      xk[i] = x0;
      fd[i] = (yp - ym) / (xp - xm);
      scale = fmax(scale, fabs(fd[i]));
    }
    for (int64_t i = 0; i < n; i++)
      TR_CLOSE(g[i], fd[i], 1e-2, 1e-3 * scale, "%s: d/dx%d[%lld]", name, k, (long long)i);
    free(out);
    free(fd);
  }
}

#endif
