/*
 * Split and gather of GLOBAL arrays (runtime/shard_io.c): for EVERY sharding
 * of a rank-3 array on the 2x4 and 2x2x2 meshes (each mesh axis on no dim
 * or on one of the three, in every major-to-minor order), a plan that
 * returns its input must give the input back through kdc_rt_plan_run
 * (split, a copy step on every device, gather), and every device's bound
 * piece must be exactly kdc_sharding_shard's (the IR's definition).  Also:
 * a replicated output whose replicas disagree is caught by the replica
 * check.
 */
#include "rt_test.h"

/* kdc_sharding of |rank| from per-axis dims (-1: unused) and an axis order. */
static kdc_sharding make(int rank, int naxes, const int *dim_of, const int *order) {
  kdc_sharding s = kdc_sharding_replicated(rank);
  for (int i = 0; i < naxes; i++) {
    int a = order[i], d = dim_of[a];
    if (d >= 0) s.axes[d][s.naxes[d]++] = (uint8_t)a;
  }
  return s;
}

static void round_trip(const kdc_mesh *mesh, const kdc_sharding *s, int threads) {
  kdc_module *m = kdc_ir_module_create("io");
  m->mesh = *mesh;
  kdc_func *f = kdc_ir_func_create(m, "predict");
  int64_t g[3] = {8, 8, 16};
  kdc_type gt = kdc_type_make(KDC_DTYPE_F32, 3, g), lt;
  cgt_fail(kdc_sharding_local_type(mesh, s, &gt, &lt), "local type");
  kdc_value_id x = kdc_ir_parameter(f, KDC_PARAM_INPUT, "x", &lt);
  f->nodes[x].sharding = *s;
  kdc_ir_add_result(f, x, "y");
  kdc_rt_plan *plan = rtt_compile(m, threads, false);
  float in[8 * 8 * 16], out[8 * 8 * 16];
  for (int i = 0; i < 8 * 8 * 16; i++) in[i] = (float)i;
  memset(out, 0xa5, sizeof out);
  const void *ins[1] = {in};
  void *outs[1] = {out};
  cgt_fail(kdc_rt_plan_run(plan, ins, outs), "run");
  char sh[256];
  if (memcmp(in, out, sizeof in))
    fail_msg("round trip of %s changed the array", kdc_sharding_str(mesh, s, sh, sizeof sh));
  /* every device's piece, as bound by the split, against the IR's shard */
  kdc_tensor global = {gt, in};
  for (int64_t d = 0; d < kdc_mesh_devices(mesh); d++) {
    kdc_tensor piece;
    cgt_fail(kdc_sharding_shard(mesh, s, &global, d, &piece), "shard");
    const void *bound = plan->funcs[0].in_ptr[d];
    if (memcmp(bound, piece.data, kdc_type_bytes(&piece.type)))
      fail_msg("%s: device %lld's piece differs from kdc_sharding_shard", sh, (long long)d);
    free(piece.data);
  }
  kdc_rt_plan_release(plan);
  kdc_ir_module_destroy(m);
}

static int sweep_mesh(const char *spec) {
  kdc_mesh mesh = rtt_mesh(spec);
  int n = mesh.naxes, count = 0, dim_of[3], order[3] = {0, 1, 2};
  char seen[256][64];
  int n_seen = 0;
  int combos = 1;
  for (int i = 0; i < n; i++) combos *= 4;
  /* every assignment of axes to dims (or none), times every axis order */
  static const int perms[6][3] = {{0, 1, 2}, {0, 2, 1}, {1, 0, 2}, {1, 2, 0}, {2, 0, 1}, {2, 1, 0}};
  for (int c = 0; c < combos; c++) {
    for (int i = 0, r = c; i < n; i++, r /= 4) dim_of[i] = r % 4 - 1;
    for (int p = 0; p < (n == 3 ? 6 : 2); p++) {
      for (int i = 0; i < n; i++) order[i] = n == 3 ? perms[p][i] : (p ? 1 - i : i);
      kdc_sharding s = make(3, n, dim_of, order);
      char key[64];
      kdc_sharding_str(&mesh, &s, key, sizeof key);
      bool dup = false;
      for (int k = 0; k < n_seen; k++) dup |= strcmp(seen[k], key) == 0;
      if (dup) continue;
      snprintf(seen[n_seen++], sizeof seen[0], "%s", key);
      round_trip(&mesh, &s, count % 2 ? 0 : 3);
      count++;
    }
  }
  return count;
}

static void test_every_sharding(void **state) {
  (void)state;
  int a = sweep_mesh("a=2,b=4"), b = sweep_mesh("a=2,b=2,c=2");
  print_message("round trips: %d shardings on 2x4, %d on 2x2x2\n", a, b);
  assert_int_equal(a, 19);  /* 4^2 assignments + 3 dims holding both axes in the other order */
  assert_true(b > 64);
}

/* A function declaring its output replicated while the devices hold
 * different pieces: the replica check names the devices. */
static void test_replica_check(void **state) {
  (void)state;
  kdc_module *m = kdc_ir_module_create("lie");
  m->mesh = rtt_mesh("a=2,b=4");
  kdc_func *f = kdc_ir_func_create(m, "predict");
  int64_t l[2] = {2, 3};
  kdc_type lt = kdc_type_make(KDC_DTYPE_F32, 2, l);
  kdc_value_id x = kdc_ir_parameter(f, KDC_PARAM_INPUT, "x", &lt);
  const char *end;
  cgt_fail(kdc_sharding_parse("{(a,b),-}", &m->mesh, &f->nodes[x].sharding, &end), "parse");
  kdc_value_id y = kdc_ir_unary(f, KDC_OP_NEG, x);
  f->nodes[y].sharding = kdc_sharding_replicated(2);
  kdc_ir_add_result(f, y, "y");
  kdc_rt_plan *plan = rtt_compile(m, 0, false);
  float in[16 * 3], out[2 * 3];
  for (int i = 0; i < 48; i++) in[i] = (float)i;
  const void *ins[1] = {in};
  void *outs[1] = {out};
  kdc_status st = kdc_rt_plan_run(plan, ins, outs);
  assert_non_null(st);
  assert_int_equal(kdc_status_code(st), KDC_INTERNAL);
  assert_non_null(strstr(kdc_status_message(st), "replica on device 1 differs from device 0"));
  kdc_status_free(st);
  kdc_rt_plan_release(plan);
  kdc_ir_module_destroy(m);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_every_sharding),
      cmocka_unit_test(test_replica_check),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
