/*
 * tests/runtime/rt_test.h: helpers of the SPMD runtime tests (header-only,
 * included once per test executable, after cg_test.h).
 *
 *   rtt_mesh("a=2,b=4")          a mesh;
 *   rtt_spmd(m, f, op, x, ...)   an SPMD node with its local result type;
 *   rtt_check(m, f, threads)     the conformance check: random per-device
 *       local inputs, kdc_ir_interpret_spmd as the oracle, then fuse,
 *       plan_memory, codegen, load with |threads| and
 *       kdc_rt_plan_run_local; every device's every result must equal the
 *       interpreter's BITWISE (same summation order), on two runs; in the
 *       second, devices of this process whose expected result is the same
 *       share ONE result buffer wherever only collectives write the output
 *       (rt_exec_output_shareable: the shared replicas of runtime/state.c,
 *       written once); rtt_shared_results counts the devices bound to an
 *       earlier device's buffer.
 *   rtt_procs                    the job the test executable is a process
 *       of (tests/mpi: set from kdc_rt_procs_init): plans load with this
 *       process's share of the devices, and rtt_check checks those.
 */
#ifndef KDC_TESTS_RUNTIME_RT_TEST_H
#define KDC_TESTS_RUNTIME_RT_TEST_H

#include "../codegen/cg_test.h"

#include "runtime/comm.h"

static CGT_UNUSED struct {
  int n, id;            /* processes, this one */
  struct rt_net *net;   /* the job's transport (n > 1) */
  uint64_t large_bytes; /* n > 1 and not 0: rt_comm_p2p_test_large_bytes */
} rtt_procs = {1, 0, NULL, 0};

/* Results bound to an earlier device's buffer in rtt_check's second runs. */
static CGT_UNUSED int64_t rtt_shared_results;

static CGT_UNUSED kdc_mesh rtt_mesh(const char *spec) {
  kdc_mesh m;
  memset(&m, 0, sizeof m);
  const char *p = spec;
  while (*p) {
    const char *eq = strchr(p, '=');
    memcpy(m.names[m.naxes], p, (size_t)(eq - p));
    m.sizes[m.naxes++] = strtoll(eq + 1, (char **)&p, 10);
    if (*p == ',') p++;
  }
  return m;
}

/* |op| (a collective or shard_slice) of |x| over |axes|; the local result
 * type follows ops.def. */
static CGT_UNUSED kdc_value_id rtt_spmd(kdc_func *f, kdc_op op, kdc_value_id x, int naxes,
                                        const uint8_t *axes, int64_t dim, int64_t dim2,
                                        int64_t shift) {
  const kdc_mesh *m = &f->module->mesh;
  kdc_attrs a;
  memset(&a, 0, sizeof a);
  a.coll.naxes = naxes;
  for (int i = 0; i < naxes; i++) a.coll.axes[i] = axes[i];
  a.coll.dim = dim, a.coll.dim2 = dim2, a.coll.shift = shift;
  int64_t k = kdc_mesh_axes_size(m, naxes, axes);
  kdc_type t = f->nodes[x].type;
  if (op == KDC_OP_ALL_GATHER) t.dims[dim] *= k;
  if (op == KDC_OP_REDUCE_SCATTER || op == KDC_OP_SHARD_SLICE) t.dims[dim] /= k;
  if (op == KDC_OP_ALL_TO_ALL && dim != dim2) t.dims[dim] /= k, t.dims[dim2] *= k;
  return kdc_ir_append(f, op, &t, 1, &x, &a);
}

/* Compiles |m| (fuse unless |no_fuse|, plan_memory, codegen) and loads it. */
static CGT_UNUSED kdc_rt_plan *rtt_compile(kdc_module *m, int threads, bool no_fuse) {
  if (!no_fuse) cgt_fail(kdc_pass_fuse(m, NULL), "fuse");
  cgt_fail(kdc_pass_plan_memory(m, NULL), "plan_memory");
  const char *path = cgt_path("spmd.plan");
  cgt_fail(kdc_codegen_cpu_plan(m, NULL, path), "codegen");
  kdc_rt_plan *plan;
  kdc_rt_options ro = {.n_threads = threads, .check_replicas = 1, .collective_timeout_s = 60,
                       .n_processes = rtt_procs.n, .process_id = rtt_procs.id,
                       .net = rtt_procs.net};
  cgt_fail(kdc_rt_plan_load_with(path, &ro, &plan), "load");
  if (rtt_procs.n > 1 && rtt_procs.large_bytes)
    rt_comm_p2p_test_large_bytes(plan->comm, rtt_procs.large_bytes);
  return plan;
}

/* Device d's inputs: deterministic, different on every device. */
static CGT_UNUSED kdc_tensor *rtt_inputs(const kdc_func *f, int64_t nd) {
  kdc_tensor *args = calloc((size_t)(nd * (int64_t)f->n_params) + 1, sizeof *args);
  for (int64_t d = 0; d < nd; d++)
    for (size_t i = 0; i < f->n_params; i++) {
      kdc_tensor *a = &args[d * (int64_t)f->n_params + (int64_t)i];
      a->type = f->nodes[f->params[i]].type;
      a->data = malloc(kdc_type_bytes(&a->type) + 1);
      cgt_fill(&a->type, a->data, (uint64_t)(d * 131 + (int64_t)i + 7), false);
    }
  return args;
}

/* See the file comment.  |no_fuse| keeps the groups the caller set. */
static CGT_UNUSED void rtt_check_opts(kdc_module *m, kdc_func *f, int threads, bool no_fuse) {
  cgt_fail(kdc_ir_take_error(f), "builder");
  cgt_fail(kdc_ir_verify_module(m), "verify");
  int64_t nd = kdc_mesh_devices(&m->mesh);
  assert_true(nd >= 1 && nd <= 64);
  size_t np = f->n_params, nr = f->n_results;
  kdc_tensor *args = rtt_inputs(f, nd);
  const kdc_tensor **argp = calloc((size_t)nd & 63, sizeof *argp);
  kdc_tensor **want = calloc((size_t)nd & 127, sizeof *want);
  for (int64_t d = 0; d < nd; d++) {
    argp[d] = args + d * (int64_t)np;
    want[d] = calloc(nr + 1, sizeof **want);
  }
  cgt_fail(kdc_ir_interpret_spmd(f, &m->mesh, argp, want), "interpret_spmd");
  kdc_rt_plan *plan = rtt_compile(m, threads, no_fuse);
  assert_int_equal(kdc_rt_plan_device_count(plan), nd);
  const void ***in = calloc((size_t)nd & 127, sizeof *in);
  void ***out = calloc((size_t)nd & 127, sizeof *out);
  for (int64_t d = 0; d < nd; d++) {
    in[d] = calloc(np + 1, sizeof **in);
    out[d] = calloc(nr + 1, sizeof **out);
    for (size_t i = 0; i < np; i++) in[d][i] = argp[d][i].data;
    for (size_t r = 0; r < nr; r++) {
      out[d][r] = malloc(kdc_type_bytes(&want[d][r].type) + 1);
      assert_int_equal(kdc_type_bytes(&want[d][r].type),
                       kdc_rt_plan_output(plan, 0, r)->local_bytes);
    }
  }
  int64_t d0 = nd / rtt_procs.n * rtt_procs.id, d1 = d0 + nd / rtt_procs.n; /* this process's */
  void ***bound = calloc((size_t)nd & 127, sizeof *bound);
  for (int64_t d = 0; d < nd; d++) bound[d] = calloc(nr + 1, sizeof **bound);
  for (int rep = 0; rep < 2; rep++) {
    for (int64_t d = 0; d < nd; d++)
      for (size_t r = 0; r < nr; r++) {
        memset(out[d][r], 0xa5, kdc_type_bytes(&want[d][r].type));
        bound[d][r] = out[d][r];
        if (rep == 0 || d < d0 || !rt_exec_output_shareable(&plan->prog.funcs[0], (uint32_t)r))
          continue;
        for (int64_t e = d0; e < d; e++) /* the first local device expecting the same bytes */
          if (bound[e][r] == out[e][r] &&
              !memcmp(want[e][r].data, want[d][r].data, kdc_type_bytes(&want[d][r].type))) {
            bound[d][r] = out[e][r];
            rtt_shared_results++;
            break;
          }
      }
    cgt_fail(kdc_rt_plan_run_local(plan, 0, (const void *const *const *)in,
                                   (void *const *const *)bound), "run_local");
    for (int64_t d = d0; d < d1; d++)
      for (size_t r = 0; r < nr; r++)
        if (memcmp(bound[d][r], want[d][r].data, kdc_type_bytes(&want[d][r].type))) {
          kdc_rt_plan_describe(plan, stderr);
          fail_msg("process %d: device %lld, result %zu (%s) differs from the SPMD interpreter",
                   rtt_procs.id, (long long)d, r, f->result_names[r] ? f->result_names[r] : "?");
        }
  }
  kdc_rt_plan_release(plan);
  for (int64_t d = 0; d < nd; d++) {
    for (size_t r = 0; r < nr; r++) free(out[d][r]), free(want[d][r].data);
    for (size_t i = 0; i < np; i++) free(args[d * (int64_t)np + (int64_t)i].data);
    free(in[d]), free(out[d]), free(want[d]), free(bound[d]);
  }
  free(in), free(out), free(want), free(argp), free(args), free(bound);
}

static CGT_UNUSED void rtt_check(kdc_module *m, kdc_func *f, int threads) {
  rtt_check_opts(m, f, threads, false);
}

#endif
