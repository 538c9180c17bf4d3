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
 *   - p2p (comm_p2p.c): processes, each with a share of the devices, over
 *     a point-to-point transport (rt_net: MPI in comm_mpi.c under mpirun,
 *     TCP in comm_tcp.c after a --coordinator rendezvous); arrive() records
 *     the local buffers, complete() exchanges the operands and sums in
 *     device-id order (bitwise equal to shm); collect_outputs() brings
 *     every output to process 0.
 *   - NCCL: not a backend of this vtable: a CUDA plan's collectives are
 *     NCCL calls inside the CUDA executor (cuda/exec.c, docs/gpu.md).
 * No backend may hang: a device that does not arrive within the timeout
 * fails the run with KDC_UNAVAILABLE naming it.
 */
#ifndef KDC_RUNTIME_COMM_H
#define KDC_RUNTIME_COMM_H

#include <stdbool.h>
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
   * buffer |dst| (local shapes of the step).  |dst| NULL: the device's
   * result buffer is an earlier local device's of the same call (replicas
   * sharing one buffer, state.c; exec.c decides), so the backend writes
   * that result once, for the earlier device, and never for this one. */
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

/* ---- transports between processes (rt_net) ---------------------------------------- */

/* A point-to-point message transport between the |n| processes of a job
 * (this one is |id|).  post() queues messages, wait() completes every queued
 * one; messages between two processes are matched in posting order (the
 * tag is checked, or used for MPI matching), so both sides must post the
 * messages they exchange in the same order -- the collectives do, by
 * iterating devices and groups in increasing id. */
typedef struct rt_net rt_net;

enum { RT_NET_WHY = 480 };  /* bytes of a failed process's error an ABORT carries */

typedef enum rt_net_fail {
  RT_NET_OK = 0,
  RT_NET_TIMEOUT,   /* |peer| did not deliver (or take) within the timeout */
  RT_NET_CLOSED,    /* |peer|'s connection broke: it died or failed */
  RT_NET_ABORTED,   /* |peer| ended the job because process |culprit| failed */
  RT_NET_PROTOCOL,  /* |peer| sent something else than expected (a different plan?) */
} rt_net_fail;

/* Why wait() failed: the first message that did not complete. */
typedef struct rt_net_miss {
  rt_net_fail fail;
  int peer;         /* the process */
  int64_t dev;      /* the device whose data it was, or -1 */
  bool send;        /* the message was ours to send */
  int culprit;      /* RT_NET_ABORTED: the process the peer blamed */
} rt_net_miss;

typedef struct rt_net_vtable {
  void (*destroy)(rt_net *n);
  /* Queues |bytes| bytes of |buf| to (|send|) or from process |peer|, with
   * |tag| (0 <= tag < 32768); |buf| stays valid until wait() returns.
   * |dev| names the device the data belongs to in errors (-1: none). */
  void (*post)(rt_net *n, bool send, void *buf, uint64_t bytes, int peer, int tag, int64_t dev);
  /* Completes every queued message within |timeout_s| seconds; false with
   * |out| filled when one does not (the queue is then unusable: the job is
   * over). */
  bool (*wait)(rt_net *n, double timeout_s, rt_net_miss *out);
  /* (optional) Best effort, on the way out of a failed process: tells every
   * peer the job is over, blaming process |culprit|, whose exit status
   * |code| and error |why| (at most RT_NET_WHY - 1 bytes) the peers report
   * as theirs (rt_net.abort_code, abort_why). */
  void (*abort)(rt_net *n, int culprit, int code, const char *why);
} rt_net_vtable;
_Static_assert(offsetof(rt_net_vtable, destroy) == 0, "destroy is a vtable's first entry");

struct rt_net {
  const rt_net_vtable *vt;
  int n, id;             /* processes, this one */
  const char *rank_word; /* "MPI rank" or "rank": how messages name a process */
  int blame;             /* the peer the last failed wait named, or -1 */
  int abort_code;        /* an ABORT that came: the culprit's exit status, or 0 */
  char abort_why[RT_NET_WHY]; /* ... and its error */
};

static inline void rt_net_destroy(rt_net *n) {
  if (n) n->vt->destroy(n);
}

/* A one-line error for |miss| during |what| (the device's mesh coordinates
 * from |p| when it names one).  Sets n->blame. */
kdc_status rt_net_error(rt_net *n, const kdc_rt_plan *p, const rt_net_miss *miss,
                        const char *what, double timeout_s);
/* Process 0's |bytes| bytes of |buf| to every process (the same |bytes|
 * everywhere), within |timeout_s|. */
kdc_status rt_net_broadcast(rt_net *n, void *buf, size_t bytes, double timeout_s);
/* Returns once every process called it, or fails after |timeout_s|. */
kdc_status rt_net_barrier(rt_net *n, double timeout_s);
/* The end of a job that succeeded here: two barriers, so a process that
 * fails the first (a peer failed, or sent what we did not expect) stops
 * every other in the second: no process exits 0 when another fails
 * (kdc_rt_procs_finish, docs/processes.md "Faults"). */
kdc_status rt_net_agree(rt_net *n, double timeout_s);

/* comm_mpi.c: MPI_COMM_WORLD (duplicated), MPI initialised.  KDC_UNSUPPORTED
 * in builds without MPI. */
kdc_status rt_net_mpi_create(rt_net **out);
/* comm_tcp.c: the rendezvous of `kdc run --coordinator HOST:PORT`.  Process
 * 0 listens on |coordinator|; every other process connects to it (retrying
 * until |timeout_s|) and says hello with its id, |n| and |key| (the plan's
 * checksum); process 0 checks them (a different plan or process count is
 * an error naming the process, on both sides) and hands out every
 * process's listening address; then every pair connects directly.  A
 * process missing at the deadline is named. */
kdc_status rt_net_tcp_connect(const char *coordinator, int n, int id, uint64_t key,
                              const void *token, size_t token_len, double timeout_s,
                              rt_net **out);

/* ---- comm_p2p.c: processes, one device or several each ----------------------------- */

/* The process backend of plan |p| (p->d0..d1 are this process's devices;
 * the mesh is split over p->n_procs = net->n processes) over |net|
 * (borrowed; it outlives the plan). */
kdc_status rt_comm_p2p_create(kdc_rt_plan *p, rt_net *net, double timeout_s, rt_comm **out);
/* Test and bench hook: all_reduce operands of |bytes| and more take the
 * reduce-scatter + all-gather path (default 2 MiB; UINT64_MAX: never).
 * Both paths give the same bits; this only changes the speed. */
void rt_comm_p2p_test_large_bytes(rt_comm *c, uint64_t bytes);

/* ---- comm_null.c: the template backend ----------------------------------------- */

kdc_status rt_comm_null_create(rt_comm **out);

#endif
