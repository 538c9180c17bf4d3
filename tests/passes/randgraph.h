/*
 * tests/passes/randgraph.h: deterministic random IR functions for pass tests.
 *
 * randgraph_build() makes one function of |n_ops| steps over values of type
 * f32[R,C] (R, C in 2..4): elementwise ops, splat and dense constants, iota,
 * GEMMs, and shape round trips (reduce + broadcast, transpose pairs, reshape
 * pairs, slice + concatenate) that return to [R,C], so every value can meet
 * every other.  Parameters are inputs (no weights needed), 1-3 results.
 * randgraph_run() interprets a function on inputs drawn from a seed.
 */
#ifndef KDC_TESTS_RANDGRAPH_H
#define KDC_TESTS_RANDGRAPH_H

#include <stdbool.h>
#include <stdint.h>

#include "ir/ir.h"

typedef struct rng { uint64_t s; } rng;
uint32_t rng_next(rng *r);
int rng_int(rng *r, int n); /* uniform in [0, n) */

kdc_func *randgraph_build(kdc_module *m, uint64_t seed, int n_ops);
/* Interprets |f| on random inputs from |seed|; results in out (f->n_results
 * tensors, caller frees with randgraph_free_results). */
kdc_status randgraph_run(const kdc_func *f, uint64_t seed, kdc_tensor *out);
void randgraph_free_results(kdc_tensor *out, size_t n);
/* Bitwise equality of two result lists (all NaNs equal). */
bool randgraph_same(const kdc_tensor *a, const kdc_tensor *b, size_t n);

#endif
