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

/* Global arguments for the parameters of |rf|: sh_fill(seed0 + i) * scale
 * (free with sh_free_tensors). */
static inline kdc_tensor *sh_global_args(const kdc_func *rf, uint32_t seed0, float scale) {
  size_t np = rf->n_params;
  kdc_tensor *gargs = calloc(np, sizeof *gargs);
  for (size_t i = 0; i < np; i++) {
    gargs[i].type = rf->nodes[rf->params[i]].type;
    int64_t n = kdc_type_numel(&gargs[i].type);
    gargs[i].data = malloc((size_t)n * 4);
    sh_fill(gargs[i].data, n, (uint32_t)i + seed0);
    for (int64_t k = 0; k < n; k++) ((float *)gargs[i].data)[k] *= scale;
  }
  return gargs;
}

static inline void sh_free_tensors(kdc_tensor *t, size_t n) {
  for (size_t i = 0; i < n; i++) free(t[i].data);
  free(t);
}

/* Runs the partitioned function of |m| on every device with the SPMD
 * interpreter (global arguments |gargs| split by the parameters' shardings)
 * and asserts that every gathered result equals |want| (the unpartitioned
 * reference) within relative 1e-5.  |text| is printed with a failure. */
static inline void sh_spmd_check(kdc_module *m, const kdc_tensor *gargs, size_t np,
                                 const kdc_tensor *want, const char *text) {
  kdc_func *f = m->funcs[0];
  int64_t nd = kdc_mesh_devices(&m->mesh);
  kdc_tensor **largs = calloc((size_t)nd, sizeof *largs), **outs = calloc((size_t)nd, sizeof *outs);
  for (int64_t d = 0; d < nd; d++) {
    largs[d] = calloc(np, sizeof **largs);
    outs[d] = calloc(f->n_results, sizeof **outs);
    for (size_t i = 0; i < np; i++) {
      const kdc_sharding *s = &f->nodes[f->params[i]].sharding;
      kdc_sharding rep = kdc_sharding_replicated(gargs[i].type.rank);
      assert_null(kdc_sharding_shard(&m->mesh, s->present ? s : &rep, &gargs[i], d, &largs[d][i]));
    }
  }
  kdc_status st = kdc_ir_interpret_spmd(f, &m->mesh, (const kdc_tensor *const *)largs, outs);
  if (st) {
    kdc_ir_print_module(stderr, m);
    fail_msg("%s", kdc_status_message(st));
  }
  kdc_tensor *col = calloc((size_t)nd, sizeof *col);
  for (size_t r = 0; r < f->n_results; r++) {
    for (int64_t d = 0; d < nd; d++) col[d] = outs[d][r];
    const kdc_sharding *s = &f->nodes[f->results[r]].sharding;
    kdc_sharding rep = kdc_sharding_replicated(want[r].type.rank);
    kdc_tensor got;
    assert_null(kdc_sharding_unshard(&m->mesh, s->present ? s : &rep, &want[r].type, col, &got));
    double err = sh_relerr(got.data, want[r].data, kdc_type_numel(&want[r].type));
    if (err > 1e-5) {
      kdc_ir_print_module(stderr, m);
      fail_msg("result %zu: relative error %g\n%s", r, err, text);
    }
    free(got.data);
  }
  for (int64_t d = 0; d < nd; d++) {
    for (size_t i = 0; i < np; i++) free(largs[d][i].data);
    for (size_t r = 0; r < f->n_results; r++) free(outs[d][r].data);
    free(largs[d]), free(outs[d]);
  }
  free(largs), free(outs), free(col);
}

#endif
