/*
 * runtime/comm_shm.c: the in-process collectives backend of the `cpu`
 * device set (comm.h): virtual devices of one process exchange data
 * through shared memory.
 *
 * Rendezvous.  arrive() records a device's operand and result pointers and
 * publishes its arrival as the call's sequence number (release store);
 * complete() waits until every device published that number (acquire
 * loads, so their buffers are visible), spinning briefly and then sleeping
 * 50 us at a time, bounded by the timeout, and then runs the data movement
 * (coll_shm.c) on the pool.  With the lock-step executor every device has
 * arrived before complete() is called, so the wait costs one pass over the
 * flags; the timeout exists so that a backend or executor bug, or a
 * withheld device (rt_comm_shm_test_withhold), fails the run with the
 * missing device's name instead of hanging (ARCHITECTURE "no hang").
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/comm.h"

typedef struct shm_comm {
  rt_comm base;
  const kdc_prog_mesh *mesh;
  int64_t nd;
  rt_pool *pool;
  double timeout_s;
  int64_t withhold;              /* test hook: this device never arrives (-1: none) */
  atomic_uint_fast64_t *arrived; /* per device: seq of its last arrival */
  const void **src;              /* per device, for the current call */
  void **dst;
} shm_comm;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void shm_destroy(rt_comm *c) {
  shm_comm *s = (shm_comm *)c;
  free(s->arrived);
  free(s->src);
  free(s->dst);
  free(s);
}

static kdc_status shm_arrive(rt_comm *c, const rt_coll_call *call, int64_t device,
                             const void *src, void *dst) {
  shm_comm *s = (shm_comm *)c;
  if (device < 0 || device >= s->nd)
    return KDC_ERR(KDC_INTERNAL, "collective: device %lld is not on the mesh", (long long)device);
  if (device == s->withhold) return NULL; /* test hook: never shows up */
  s->src[device] = src;
  s->dst[device] = dst;
  atomic_store_explicit(&s->arrived[device], call->seq, memory_order_release);
  return NULL;
}

/* The first device that has not arrived at |seq|, or -1. */
static int64_t missing(shm_comm *s, uint64_t seq, int64_t *out_count) {
  int64_t first = -1, n = 0;
  for (int64_t d = 0; d < s->nd; d++)
    if (atomic_load_explicit(&s->arrived[d], memory_order_acquire) != seq) {
      if (first < 0) first = d;
      n++;
    }
  *out_count = n;
  return first;
}

static kdc_status timeout_error(shm_comm *s, const rt_coll_call *call, int64_t dev, int64_t n) {
  char where[160], axes[128];
  int64_t co[KDC_PROG_MAX_AXES];
  size_t o = 0;
  rt_mesh_coords(s->mesh, dev, co);
  where[0] = axes[0] = 0;
  for (uint32_t a = 0; a < s->mesh->naxes && o < sizeof where; a++)
    o += (size_t)snprintf(where + o, sizeof where - o, "%s%s=%lld", a ? "," : "",
                          s->mesh->names[a], (long long)co[a]);
  o = 0;
  for (uint32_t i = 0; i < call->step->naxes && o < sizeof axes; i++)
    o += (size_t)snprintf(axes + o, sizeof axes - o, "%s%s", i ? "," : "",
                          s->mesh->names[call->step->axes[i]]);
  return KDC_ERR(KDC_UNAVAILABLE, "collective %s[%s] (step %u of %s): device %lld (%s) did not "
                 "arrive within %g s (%lld of %lld devices missing)",
                 kdc_prog_coll_name(call->step->kind), axes, call->step_index, call->func,
                 (long long)dev, where, s->timeout_s, (long long)n, (long long)s->nd);
}

static kdc_status shm_complete(rt_comm *c, const rt_coll_call *call) {
  shm_comm *s = (shm_comm *)c;
  int64_t n, dev = missing(s, call->seq, &n);
  if (dev >= 0) {
    double deadline = now_s() + s->timeout_s;
    for (int spins = 0; dev >= 0; spins++) {
      if (spins > 1000) {
        if (now_s() > deadline) return timeout_error(s, call, dev, n);
        nanosleep(&(struct timespec){0, 50000}, NULL);
      }
      dev = missing(s, call->seq, &n);
    }
  }
  rt_coll_shm_run(s->pool, call, s->src, s->dst);
  return NULL;
}

static const rt_comm_vtable shm_vtable = {
    .destroy = shm_destroy,
    .arrive = shm_arrive,
    .complete = shm_complete,
};

kdc_status rt_comm_shm_create(const kdc_prog_mesh *mesh, rt_pool *pool, double timeout_s,
                              rt_comm **out) {
  shm_comm *s = kdc_xcalloc(1, sizeof *s);
  s->base.vt = &shm_vtable;
  s->mesh = mesh;
  s->nd = mesh->n_devices > 0 ? mesh->n_devices : 1;
  s->pool = pool;
  s->timeout_s = timeout_s > 0 ? timeout_s : 60;
  s->withhold = -1;
  s->arrived = kdc_xcalloc((size_t)s->nd, sizeof *s->arrived);
  for (int64_t d = 0; d < s->nd; d++) atomic_init(&s->arrived[d], 0);
  s->src = kdc_xcalloc((size_t)s->nd, sizeof *s->src);
  s->dst = kdc_xcalloc((size_t)s->nd, sizeof *s->dst);
  *out = &s->base;
  return NULL;
}

void rt_comm_shm_test_withhold(rt_comm *c, int64_t device) {
  KDC_ASSERT(c->vt == &shm_vtable);
  ((shm_comm *)c)->withhold = device;
}
