/*
 * runtime/cuda/graph.c: graph eligibility and the graph cache (graph.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kdc/arena.h"
#include "runtime/cuda/graph.h"

/* Operations |f| enqueues per run, or UINT64_MAX when it holds a collective
 * (|*coll| names its step). */
static uint64_t count_nodes(const kdc_program *pr, uint32_t func, const char **coll_fn,
                            uint32_t *coll_step) {
  const kdc_prog_func *f = &pr->funcs[func];
  uint64_t n = 0;
  for (uint32_t s = 0; s < f->n_steps; s++) {
    const kdc_prog_step *st = &f->steps[s];
    switch (st->kind) {
    case KDC_STEP_COLLECTIVE:
      *coll_fn = f->name;
      *coll_step = s;
      return UINT64_MAX;
    case KDC_STEP_LOOP: {
      uint64_t b = count_nodes(pr, st->loop.body, coll_fn, coll_step);
      if (b == UINT64_MAX) return b;
      uint64_t per = b + st->loop.n_carry;
      uint64_t len = st->loop.length > 0 ? (uint64_t)st->loop.length : 0;
      if (per && len > (UINT64_MAX / 2 - n) / per) return UINT64_MAX - 1; /* absurdly long */
      n += len * per;
      break;
    }
    case KDC_STEP_COPY: n += 2; break; /* at most: an overlapping copy goes through scratch */
    default: n += 1; break;
    }
  }
  return n;
}

bool rt_cuda_graph_eligible(const kdc_program *pr, uint32_t func, int64_t n_devices,
                            uint64_t *nodes, char *why, size_t why_len) {
  *nodes = 0;
  if (why_len) why[0] = 0;
  if (func >= pr->n_funcs) {
    snprintf(why, why_len, "no function %u", func);
    return false;
  }
  if (n_devices > 1) {
    snprintf(why, why_len, "%lld GPUs in this process (multi-device runs are launched step by "
             "step: NCCL calls are not captured)", (long long)n_devices);
    return false;
  }
  const char *coll_fn = NULL;
  uint32_t coll_step = 0;
  uint64_t n = count_nodes(pr, func, &coll_fn, &coll_step);
  if (coll_fn) {
    snprintf(why, why_len, "%s step %u is a collective (NCCL calls are not captured)", coll_fn,
             coll_step);
    return false;
  }
  if (n > RT_GRAPH_MAX_NODES) {
    if (n >= UINT64_MAX - 1) snprintf(why, why_len, "its loops unroll to too many operations");
    else
      snprintf(why, why_len, "%llu operations once its loops are unrolled (at most %d)",
               (unsigned long long)n, RT_GRAPH_MAX_NODES);
    return false;
  }
  *nodes = n;
  return true;
}

void rt_graph_cache_init(rt_graph_cache *c, size_t n_key) {
  memset(c, 0, sizeof *c);
  c->n_key = n_key;
}

void *rt_graph_cache_get(rt_graph_cache *c, const uint64_t *key) {
  for (int i = 0; i < RT_GRAPH_WAYS; i++)
    if (c->graph[i] && !memcmp(c->key[i], key, c->n_key * sizeof *key)) {
      c->used[i] = ++c->tick;
      return c->graph[i];
    }
  return NULL;
}

void *rt_graph_cache_put(rt_graph_cache *c, const uint64_t *key, void *graph) {
  int v = 0;
  for (int i = 0; i < RT_GRAPH_WAYS; i++) {
    if (!c->graph[i]) {
      v = i;
      break;
    }
    if (c->used[i] < c->used[v]) v = i;
  }
  void *old = c->graph[v];
  if (!c->key[v]) c->key[v] = kdc_xcalloc(c->n_key + 1, sizeof *key);
  memcpy(c->key[v], key, c->n_key * sizeof *key);
  c->graph[v] = graph;
  c->used[v] = ++c->tick;
  return old;
}

void rt_graph_cache_free(rt_graph_cache *c, void (*destroy)(void *user, void *graph), void *user) {
  for (int i = 0; i < RT_GRAPH_WAYS; i++) {
    if (c->graph[i] && destroy) destroy(user, c->graph[i]);
    free(c->key[i]);
    c->key[i] = NULL;
    c->graph[i] = NULL;
  }
}
