/*
 * runtime/cuda/graph.h: which plan functions run as one CUDA graph, and
 * the per-function cache of instantiated graphs (docs/gpu.md, "Graphs").
 *
 * Host-side logic only (built in every build, unit-tested without a GPU);
 * cuda/exec.c captures and replays.
 */
#ifndef KDC_RUNTIME_CUDA_GRAPH_H
#define KDC_RUNTIME_CUDA_GRAPH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "runtime/program.h"

/* Operations one run of a function puts on the stream, at most: a graph of
 * more is not captured (a scan of this many steps is better launched). */
enum { RT_GRAPH_MAX_NODES = 200000 };

/* Can function |func| of |pr| be captured as one graph when this process
 * drives |n_devices| GPUs?  true with the operations it enqueues (loops
 * unrolled: |length| x the body + the carry copies) in |*nodes|; false
 * with the reason in |why| (no host work in the middle of a step exists
 * today: what makes a function ineligible is NCCL (several devices or
 * collectives) or its size). */
bool rt_cuda_graph_eligible(const kdc_program *pr, uint32_t func, int64_t n_devices,
                            uint64_t *nodes, char *why, size_t why_len);

/* Instantiated graphs of one function, keyed by the device addresses its
 * run binds (inputs, outputs, weights: the training state flips between
 * two buffers, a staged fit between two batch slots), least recently used
 * evicted.  |graph| is opaque (a CUgraphExec). */
enum { RT_GRAPH_WAYS = 4 };

typedef struct rt_graph_cache {
  size_t n_key;
  uint64_t *key[RT_GRAPH_WAYS];
  void *graph[RT_GRAPH_WAYS];
  uint64_t used[RT_GRAPH_WAYS], tick;
} rt_graph_cache;

void rt_graph_cache_init(rt_graph_cache *c, size_t n_key);
/* The graph made for |key| (n_key values), or NULL. */
void *rt_graph_cache_get(rt_graph_cache *c, const uint64_t *key);
/* Keeps |graph| for |key|; returns the graph it evicts (the caller destroys
 * it), or NULL. */
void *rt_graph_cache_put(rt_graph_cache *c, const uint64_t *key, void *graph);
/* Hands every kept graph to |destroy| and empties the cache. */
void rt_graph_cache_free(rt_graph_cache *c, void (*destroy)(void *user, void *graph), void *user);

#endif
