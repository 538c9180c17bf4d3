/*
 * runtime/comm.h: the collectives backend interface (STYLE.md 17) and its
 * implementations.
 *
 * A collective is a rendezvous: every device of the mesh ARRIVES at the
 * same COLLECTIVE step with its operand and result buffers, and the step
 * COMPLETES once every member has arrived.  The executor (exec.c) calls
 * arrive() once per device it runs, then complete() once; a backend decides
 * how the bytes move:
 *   - shm  (comm_shm.c, coll_shm.c): the virtual devices of this process.
 *     arrive() records the device's buffers; complete() waits for every
 *     device (bounded by the timeout), then moves the data through shared
 *     memory on the plan's thread pool, each byte copied once, sums in
 *     increasing device-id order (bitwise equal to ir/interp_spmd.c).
 *   - null (comm_null.c): the template for new backends; every entry fails
 *     with KDC_UNSUPPORTED.
 *   - mpi (comm_mpi.c): processes under mpirun, each with a share of the
 *     devices; arrive() records the local buffers, complete() exchanges
 *     the operands point-to-point and sums in device-id order (bitwise
 *     equal to shm); collect_outputs() brings every output to process 0.
 *   - NCCL: not a backend of this vtable: a CUDA plan's collectives are
 *     NCCL calls inside the CUDA executor (cuda/exec.c, docs/gpu.md).
 * No backend may hang: a device that does not arrive within the timeout
 * fails the run with KDC_UNAVAILABLE naming it.
 */
#ifndef KDC_RUNTIME_COMM_H
#define KDC_RUNTIME_COMM_H

#include <stddef.h>

#include "runtime/runtime.h"

typedef struct rt_comm rt_comm;

/* One call of a collective step, as every device sees it. */
typedef struct rt_coll_call {
  const kdc_prog_coll_step *step;
  const rt_coll_groups *groups;  /* computed at load (devices.c) */
  uint64_t seq;                  /* increasing per call on one communicator */
  const char *func;              /* for messages: function name and step index */
  uint32_t step_index;
} rt_coll_call;

typedef struct rt_comm_vtable {
  void (*destroy)(rt_comm *c);
  /* Device |device| reached |call| with its operand |src| and its result
   * buffer |dst| (local shapes of the step). */
  kdc_status (*arrive)(rt_comm *c, const rt_coll_call *call, int64_t device, const void *src,
                       void *dst);
  /* Waits, at most the communicator's timeout, until every device arrived
   * at |call|, then completes it (every |dst| written).  A device that did
   * not arrive is a KDC_UNAVAILABLE naming it. */
  kdc_status (*complete)(rt_comm *c, const rt_coll_call *call);
  /* Optional (NULL: every device is in this process).  After the steps of
   * |func|: process 0 receives every other process's output pieces
   * (out_ptr of their devices), bounded by the timeout. */
  kdc_status (*collect_outputs)(rt_comm *c, kdc_rt_plan *p, size_t func);
} rt_comm_vtable;
_Static_assert(offsetof(rt_comm_vtable, destroy) == 0, "destroy is a vtable's first entry");

struct rt_comm {
  const rt_comm_vtable *vt;
};

static inline void rt_comm_destroy(rt_comm *c) {
  if (c) c->vt->destroy(c);
}

/* ---- comm_shm.c: the in-process backend -------------------------------------- */

/* Virtual devices of |mesh| (borrowed, outlives the communicator) in this
 * process; data moves on |pool|.  |timeout_s| > 0. */
kdc_status rt_comm_shm_create(const kdc_prog_mesh *mesh, rt_pool *pool, double timeout_s,
                              rt_comm **out);
/* Test hook: |device|'s arrivals are dropped from now on (-1: none), so the
 * timeout path can be checked; the in-process lock-step executor otherwise
 * guarantees every arrival by construction. */
void rt_comm_shm_test_withhold(rt_comm *c, int64_t device);

/* ---- coll_shm.c: the data movement of the shm backend -------------------------- */

/* Runs |call| for every device: |src[d]|, |dst[d]| are device d's buffers. */
void rt_coll_shm_run(rt_pool *pool, const rt_coll_call *call, const void *const *src,
                     void *const *dst);

/* ---- comm_mpi.c: one process per device or per group of devices ---------------- */

/* The MPI backend of plan |p| (p->d0..d1 are this process's devices; the
 * mesh is split over p->n_procs processes, MPI_COMM_WORLD rank = process
 * id).  KDC_UNSUPPORTED in builds without MPI. */
kdc_status rt_comm_mpi_create(kdc_rt_plan *p, double timeout_s, rt_comm **out);

/* ---- comm_null.c: the template backend ----------------------------------------- */

kdc_status rt_comm_null_create(rt_comm **out);

#endif
