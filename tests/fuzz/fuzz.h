/* tests/fuzz/fuzz.h: what every libFuzzer target of tests/fuzz shares
 * (docs/testing.md, "Coverage-guided fuzzing").  A target defines
 * LLVMFuzzerTestOneInput and nothing else; under -DKDC_FUZZ=ON libFuzzer
 * drives it, in the normal builds replay_main.c runs it over its corpus. */
#ifndef KDC_TESTS_FUZZ_H
#define KDC_TESTS_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kdc/status.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The input as a NUL-terminated string (a copy; the caller frees it). */
static inline char *fuzz_cstr(const uint8_t *data, size_t size) {
  char *s = malloc(size + 1);
  if (!s) abort();
  memcpy(s, data, size);
  s[size] = 0;
  return s;
}

/* Errors are the expected outcome of most inputs: dropped. */
static inline void fuzz_drop(kdc_status st) {
  if (st) kdc_status_free(st);
}

#endif
