/*
 * runtime/comm_null.c: the null collectives backend (STYLE.md 15), the
 * template for new backends (mpi, nccl): every entry of the vtable exists
 * and fails with KDC_UNSUPPORTED, so a plan without collectives still runs
 * on it and one with collectives fails cleanly at the first one.
 */
#include <stdlib.h>

#include "runtime/comm.h"

static void null_destroy(rt_comm *c) { free(c); }

static kdc_status null_arrive(rt_comm *c, const rt_coll_call *call, int64_t device,
                              const void *src, void *dst) {
  return KDC_ERR(KDC_UNSUPPORTED, "collective %s (step %u of %s): the null backend has no "
                 "collectives", kdc_prog_coll_name(call->step->kind), call->step_index,
                 call->func);
}

static kdc_status null_complete(rt_comm *c, const rt_coll_call *call) {
  return KDC_ERR(KDC_UNSUPPORTED, "collective %s (step %u of %s): the null backend has no "
                 "collectives", kdc_prog_coll_name(call->step->kind), call->step_index,
                 call->func);
}

static const rt_comm_vtable null_vtable = {
    .destroy = null_destroy,
    .arrive = null_arrive,
    .complete = null_complete,
};

kdc_status rt_comm_null_create(rt_comm **out) {
  rt_comm *c = kdc_xcalloc(1, sizeof *c);
  c->vt = &null_vtable;
  *out = c;
  return NULL;
}
