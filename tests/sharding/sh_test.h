/*
 * tests/sharding/sh_test.h: helpers shared by the sharding tests: meshes,
 * sharding parsing, deterministic data, and running a partitioned function on
 * every device with kdc_ir_interpret_spmd from global inputs.
 */
#ifndef KDC_SH_TEST_H
#define KDC_SH_TEST_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/ir.h"
#include "passes/passes.h"

/* "data=2,model=4" -> mesh. */
static inline kdc_mesh sh_mesh(const char *spec) {
  kdc_mesh m;
  memset(&m, 0, sizeof m);
  const char *p = spec;
  while (*p) {
    const char *eq = strchr(p, '=');
    size_t len = (size_t)(eq - p);
    memcpy(m.names[m.naxes], p, len);
    m.sizes[m.naxes++] = strtoll(eq + 1, (char **)&p, 10);
    if (*p == ',') p++;
  }
  return m;
}

static inline kdc_sharding sh_parse(const kdc_mesh *m, const char *text) {
  kdc_sharding s;
  const char *end;
  kdc_status st = kdc_sharding_parse(text, m, &s, &end);
  if (st) {
    fprintf(stderr, "bad sharding %s: %s\n", text, kdc_status_message(st));
    abort();
  }
  return s;
}

/* Small integers as floats, so sums are exact in any order. */
static inline void sh_fill(float *x, int64_t n, uint32_t seed) {
  uint32_t s = seed * 2654435761u + 12345u;
  for (int64_t i = 0; i < n; i++) {
    s = s * 1103515245u + 12345u;
    x[i] = (float)((int)((s >> 16) % 17) - 8);
  }
}

/* Max relative error of |got| vs |want| (n floats), scale max(1, |want|). */
static inline double sh_relerr(const float *got, const float *want, int64_t n) {
  double worst = 0;
  for (int64_t i = 0; i < n; i++) {
    double d = fabs((double)got[i] - (double)want[i]);
    double sc = fabs((double)want[i]) > 1 ? fabs((double)want[i]) : 1;
    if (isnan(got[i]) != isnan(want[i])) return INFINITY;
    if (d / sc > worst) worst = d / sc;
  }
  return worst;
}

/* Counts nodes of op |op| in |f|. */
static inline int sh_count(const kdc_func *f, kdc_op op) {
  int k = 0;
  for (size_t i = 0; i < f->n_nodes; i++) k += f->nodes[i].op == op;
  return k;
}

static inline int sh_count_collectives(const kdc_func *f) {
  int k = 0;
  for (size_t i = 0; i < f->n_nodes; i++) {
    kdc_op op = f->nodes[i].op;
    k += op == KDC_OP_ALL_REDUCE || op == KDC_OP_ALL_GATHER || op == KDC_OP_REDUCE_SCATTER ||
         op == KDC_OP_ALL_TO_ALL || op == KDC_OP_COLLECTIVE_PERMUTE;
  }
  return k;
}

#endif
