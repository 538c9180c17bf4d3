/*
 * tests/test_sampling.h: whether this test run samples its sweeps
 * (docs/testing.md).  The sanitizer build (KDC_SANITIZE_BUILD) checks
 * memory and undefined behaviour, not numerics, and runs a representative
 * part of the long sweeps -- meshes, fuzz cases, choices of mesh axes --
 * that still reaches every code path; the Release build runs them whole.
 * KDC_FULL_SWEEP=1 in the environment runs them whole in any build.
 */
#ifndef KDC_TESTS_TEST_SAMPLING_H
#define KDC_TESTS_TEST_SAMPLING_H

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

static inline bool kdc_test_sampled(void) {
  const char *full = getenv("KDC_FULL_SWEEP");
  if (full && strcmp(full, "1") == 0) return false;
#ifdef KDC_SANITIZE_BUILD
  return true;
#else
  return false;
#endif
}

#endif
