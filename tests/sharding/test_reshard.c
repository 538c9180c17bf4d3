/*
 * The reshard planner (passes/reshard.c):
 *   - a table of (mesh, src, dst) -> the exact step sequence with device
 *     groups, written by reasoning from the planner's rules;
 *   - every (src, dst) pair of rank-2 shardings on [x=8], [data=2,model=4]
 *     and [a=2,b=2,c=2] (src may be partial, dst may keep partials): the plan
 *     applied by kdc_ir_interpret_spmd turns the src-distributed array into
 *     the dst-distributed one, exactly (integer-valued data); plans to
 *     replicated use only gathers/reductions; plans that only add axes use
 *     only local slices (no communication).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "sh_test.h"

static const char *plan_str(const kdc_mesh *m, const kdc_reshard_plan *p, char *buf, size_t n) {
  size_t k = 0;
  buf[0] = 0;
  for (int i = 0; i < p->n && k < n; i++) {
    char s[1200];
    k += (size_t)snprintf(buf + k, n - k, "%s%s", i ? "; " : "",
                          kdc_reshard_step_str(m, &p->steps[i], s, sizeof s));
  }
  return buf;
}

typedef struct row {
  const char *mesh, *src, *dst, *want;
} row;

static const row table[] = {
    {"data=2,model=4", "{-,-}", "{data,model}", "shard_slice [data] dim=0; shard_slice [model] dim=1"},
    {"data=2,model=4", "{data,model}", "{-,-}",
     "all_gather [data] dim=0 groups=[[0,4],[1,5],[2,6],[3,7]]; "
     "all_gather [model] dim=1 groups=[[0,1,2,3],[4,5,6,7]]"},
    {"data=2,model=4", "{model,-}", "{-,model}",
     "all_to_all [model] split=1 concat=0 groups=[[0,1,2,3],[4,5,6,7]]"},
    {"data=2,model=4", "{-,-} partial(sum: model)", "{-,-}",
     "all_reduce [model] groups=[[0,1,2,3],[4,5,6,7]]"},
    {"data=2,model=4", "{data,-} partial(sum: model)", "{data,model}",
     "reduce_scatter [model] dim=1 groups=[[0,1,2,3],[4,5,6,7]]"},
    {"data=2,model=4", "{-,-} partial(sum: data,model)", "{data,-}",
     "reduce_scatter [data] dim=0 groups=[[0,4],[1,5],[2,6],[3,7]]; "
     "all_reduce [model] groups=[[0,1,2,3],[4,5,6,7]]"},
    {"data=2,model=4", "{(data,model),-}", "{data,-}",
     "all_gather [model] dim=0 groups=[[0,1,2,3],[4,5,6,7]]"},
    {"data=2,model=4", "{(data,model),-}", "{model,data}",
     "all_gather [model] dim=0 groups=[[0,1,2,3],[4,5,6,7]]; "
     "all_to_all [data] split=1 concat=0 groups=[[0,4],[1,5],[2,6],[3,7]]; "
     "shard_slice [model] dim=0"},
    {"data=2,model=4", "{model,-}", "{data,-}",
     "all_gather [model] dim=0 groups=[[0,1,2,3],[4,5,6,7]]; shard_slice [data] dim=0"},
    {"data=2,model=4", "{-,-} partial(sum: model)", "{-,data} partial(sum: model)",
     "shard_slice [data] dim=1"},
    {"data=2,model=4", "{data,-}", "{(data,model),-}", "shard_slice [model] dim=0"},
    {"data=2,model=4", "{-,model}", "{(data,model),-}",
     "shard_slice [data] dim=0; "
     "all_to_all [model] split=0 concat=1 groups=[[0,1,2,3],[4,5,6,7]]"},
    {"x=8", "{x,-}", "{-,x}", "all_to_all [x] split=1 concat=0 groups=[[0,1,2,3,4,5,6,7]]"},
    {"x=8", "{-,-} partial(sum: x)", "{x,-}",
     "reduce_scatter [x] dim=0 groups=[[0,1,2,3,4,5,6,7]]"},
    {"a=2,b=2,c=2", "{(a,b),c}", "{a,(b,c)}",
     "all_gather [b] dim=0 groups=[[0,2],[1,3],[4,6],[5,7]]; "
     "all_gather [c] dim=1 groups=[[0,1],[2,3],[4,5],[6,7]]; shard_slice [b,c] dim=1"},
    {"a=2,b=2,c=2", "{-,-} partial(sum: a,c)", "{c,a}",
     "reduce_scatter [c] dim=0 groups=[[0,1],[2,3],[4,5],[6,7]]; "
     "reduce_scatter [a] dim=1 groups=[[0,4],[1,5],[2,6],[3,7]]"},
    {"a=2,b=2,c=2", "{(a,b,c),-}", "{-,-}",
     "all_gather [a,b,c] dim=0 groups=[[0,1,2,3,4,5,6,7]]"},
    {"a=2,b=2,c=2", "{b,-}", "{(b,a),c}", "shard_slice [a] dim=0; shard_slice [c] dim=1"},
};

static void test_table(void **state) {
  (void)state;
  kdc_type t = {KDC_DTYPE_F32, 2, {16, 16}};
  for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
    kdc_mesh m = sh_mesh(table[i].mesh);
    kdc_sharding s = sh_parse(&m, table[i].src), d = sh_parse(&m, table[i].dst);
    kdc_reshard_plan p;
    kdc_status st = kdc_reshard_plan_make(&m, &t, &s, &d, &p);
    if (st) fail_msg("%s -> %s: %s", table[i].src, table[i].dst, kdc_status_message(st));
    char buf[8192];
    plan_str(&m, &p, buf, sizeof buf);
    if (strcmp(buf, table[i].want) != 0)
      fail_msg("[%s] %s -> %s:\n  got  %s\n  want %s", table[i].mesh, table[i].src, table[i].dst,
               buf, table[i].want);
  }
}

/* ---- every pair, numerically ------------------------------------------------ */

/* All rank-2 shardings of |m|: each axis unused, on dim 0 or 1 (every order
 * within a dim), or (if |partial|) partial. */
static int enumerate(const kdc_mesh *m, bool partial, kdc_sharding *out, int cap) {
  int n = 0, na = m->naxes, choices = partial ? 4 : 3, total = 1;
  for (int i = 0; i < na; i++) total *= choices;
  for (int code = 0; code < total; code++) {
    int place[KDC_MAX_MESH_AXES], c = code, cnt[2] = {0, 0};
    for (int a = 0; a < na; a++) {
      place[a] = c % choices;
      c /= choices;
      if (place[a] == 1 || place[a] == 2) cnt[place[a] - 1]++;
    }
    /* every permutation of the axes on each dim: iterate over orders */
    int perms0 = 1, perms1 = 1;
    for (int k = 2; k <= cnt[0]; k++) perms0 *= k;
    for (int k = 2; k <= cnt[1]; k++) perms1 *= k;
    for (int p0 = 0; p0 < perms0; p0++)
      for (int p1 = 0; p1 < perms1; p1++) {
        kdc_sharding s = kdc_sharding_replicated(2);
        int pr[2] = {p0, p1};
        for (int d = 0; d < 2; d++) {
          uint8_t pool[KDC_MAX_MESH_AXES];
          int np = 0;
          for (int a = 0; a < na; a++)
            if (place[a] == d + 1) pool[np++] = (uint8_t)a;
          int r = pr[d];
          while (np > 0) { /* factorial-base decode of the permutation */
            int f = 1;
            for (int k = 2; k < np; k++) f *= k;
            int pick = r / f;
            r %= f;
            s.axes[d][s.naxes[d]++] = pool[pick];
            memmove(pool + pick, pool + pick + 1, (size_t)(np - pick - 1));
            np--;
          }
        }
        for (int a = 0; a < na; a++)
          if (place[a] == 3) s.partial |= (uint16_t)(1u << a);
        assert_true(n < cap);
        out[n++] = s;
      }
  }
  return n;
}

/* Runs the plan src -> dst through the SPMD interpreter and compares. */
static void check_pair(const kdc_mesh *m, const kdc_type *gt, const kdc_sharding *src,
                       const kdc_sharding *dst, const kdc_reshard_plan *p) {
  kdc_module *mod = kdc_ir_module_create("r");
  mod->mesh = *m;
  kdc_func *f = kdc_ir_func_create(mod, "f");
  kdc_type lt;
  assert_null(kdc_sharding_local_type(m, src, gt, &lt));
  kdc_value_id x = kdc_ir_parameter(f, KDC_PARAM_INPUT, "x", &lt);
  f->nodes[x].sharding = *src;
  kdc_value_id y = kdc_reshard_emit(f, x, p);
  kdc_ir_add_result(f, y, "y");
  kdc_status st = kdc_ir_verify_module(mod);
  if (st) fail_msg("%s", kdc_status_message(st));
  int64_t nd = kdc_mesh_devices(m), n = kdc_type_numel(gt);
  /* per device: the piece of a global array chosen by its partial coords */
  kdc_tensor *in = calloc((size_t)nd, sizeof *in), *out = calloc((size_t)nd, sizeof *out);
  const kdc_tensor **args = calloc((size_t)nd, sizeof *args);
  kdc_tensor **outs = calloc((size_t)nd, sizeof *outs);
  float *g = malloc((size_t)n * sizeof *g);
  for (int64_t d = 0; d < nd; d++) {
    int64_t c[KDC_MAX_MESH_AXES];
    uint32_t seed = 1;
    kdc_mesh_coords(m, d, c);
    for (int a = 0; a < m->naxes; a++)
      if (src->partial & (1u << a)) seed = seed * 7 + (uint32_t)c[a] + 1;
    sh_fill(g, n, seed);
    kdc_tensor gl = {*gt, g};
    assert_null(kdc_sharding_shard(m, src, &gl, d, &in[d]));
    args[d] = &in[d];
    outs[d] = &out[d];
  }
  st = kdc_ir_interpret_spmd(f, m, args, outs);
  if (st) fail_msg("%s", kdc_status_message(st));
  kdc_tensor want, got;
  assert_null(kdc_sharding_unshard(m, src, gt, in, &want));
  kdc_sharding plain = *dst;
  for (int64_t d = 0; d < nd; d++) { /* each device's piece must be the dst piece */
    kdc_tensor piece;
    if (dst->partial) break;
    assert_null(kdc_sharding_shard(m, &plain, &want, d, &piece));
    assert_true(kdc_type_equal(&piece.type, &out[d].type));
    if (memcmp(piece.data, out[d].data, kdc_type_bytes(&piece.type)) != 0) {
      char b1[256], b2[256];
      fail_msg("device %lld: %s -> %s wrong", (long long)d, kdc_sharding_str(m, src, b1, 256),
               kdc_sharding_str(m, dst, b2, 256));
    }
    free(piece.data);
  }
  assert_null(kdc_sharding_unshard(m, dst, gt, out, &got));
  assert_memory_equal(got.data, want.data, kdc_type_bytes(gt));
  free(got.data);
  free(want.data);
  for (int64_t d = 0; d < nd; d++) {
    free(in[d].data);
    free(out[d].data);
  }
  free(in), free(out), free(args), free(outs), free(g);
  kdc_ir_module_destroy(mod);
}

static void all_pairs(const char *mesh_spec) {
  kdc_mesh m = sh_mesh(mesh_spec);
  kdc_type t = {KDC_DTYPE_F32, 2, {16, 8}};
  static kdc_sharding srcs[512], dsts[512];
  int ns = enumerate(&m, true, srcs, 512), ndst = enumerate(&m, false, dsts, 512);
  int pairs = 0;
  for (int i = 0; i < ns; i++)
    for (int j = 0; j < ndst + ns; j++) {
      kdc_sharding d = j < ndst ? dsts[j] : srcs[j - ndst];
      if (j >= ndst) { /* partial targets: keep the source's partial axes */
        if (d.partial != srcs[i].partial || !d.partial) continue;
      }
      kdc_type lt;
      if (kdc_sharding_local_type(&m, &srcs[i], &t, &lt)) continue;
      kdc_status st = kdc_sharding_local_type(&m, &d, &t, &lt);
      if (st) {
        kdc_status_free(st);
        continue;
      }
      kdc_reshard_plan p;
      st = kdc_reshard_plan_make(&m, &t, &srcs[i], &d, &p);
      if (st) fail_msg("%s", kdc_status_message(st));
      bool only_slices = !srcs[i].partial, only_gathers = true;
      for (int dd = 0; dd < 2; dd++)
        for (int k = 0; k < srcs[i].naxes[dd]; k++)
          if (k >= d.naxes[dd] || d.axes[dd][k] != srcs[i].axes[dd][k]) only_slices = false;
      for (int dd = 0; dd < 2; dd++) only_gathers = only_gathers && d.naxes[dd] == 0;
      for (int k = 0; k < p.n; k++) {
        if (only_slices) assert_int_equal(p.steps[k].op, KDC_OP_SHARD_SLICE);
        if (only_gathers)
          assert_true(p.steps[k].op == KDC_OP_ALL_GATHER || p.steps[k].op == KDC_OP_ALL_REDUCE);
      }
      check_pair(&m, &t, &srcs[i], &d, &p);
      pairs++;
    }
  print_message("%s: %d pairs\n", mesh_spec, pairs);
  assert_true(pairs > 10);
}

static void test_pairs_1d(void **state) { (void)state; all_pairs("x=8"); }
static void test_pairs_2x4(void **state) { (void)state; all_pairs("data=2,model=4"); }
static void test_pairs_2x2x2(void **state) { (void)state; all_pairs("a=2,b=2,c=2"); }

static void test_errors(void **state) {
  (void)state;
  kdc_mesh m = sh_mesh("data=2,model=4");
  kdc_type t = {KDC_DTYPE_F32, 2, {6, 8}};
  kdc_reshard_plan p;
  kdc_sharding s = sh_parse(&m, "{-,-}"), d = sh_parse(&m, "{model,-}");
  kdc_status st = kdc_reshard_plan_make(&m, &t, &s, &d, &p);
  assert_non_null(st);
  assert_non_null(strstr(kdc_status_message(st), "not divisible"));
  kdc_status_free(st);
  d = sh_parse(&m, "{-,-} partial(sum: data)");
  st = kdc_reshard_plan_make(&m, &t, &s, &d, &p);
  assert_int_equal(kdc_status_code(st), KDC_UNSUPPORTED);
  kdc_status_free(st);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_table),      cmocka_unit_test(test_pairs_1d),
      cmocka_unit_test(test_pairs_2x4),  cmocka_unit_test(test_pairs_2x2x2),
      cmocka_unit_test(test_errors),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
