/*
 * SPMD ops that are index arithmetic inside kernels, on several meshes:
 *   - shard_slice fused into its consumer's kernel (groups set by hand, as
 *     passes/fuse.c keeps SPMD ops out of groups today) and alone;
 *   - rng_uniform with a sharding that splits dims (the counter is the
 *     GLOBAL index: local index + the piece's offset), alone and fused,
 * each against kdc_ir_interpret_spmd on every device (bitwise), and for
 * rng_uniform also end to end through the global API: the gathered output
 * must be exactly the unsharded rng_uniform (kdc_rng_uniform_at).
 */
#include "rt_test.h"

static kdc_sharding parse(const kdc_mesh *m, const char *text) {
  kdc_sharding s;
  const char *end;
  cgt_fail(kdc_sharding_parse(text, m, &s, &end), text);
  return s;
}

/* y = neg(shard_slice(x)) * 2 in one kernel (|fused|) or three. */
static void shard_slice_case(const char *mesh, const uint8_t *axes, int n, int64_t dim,
                             bool fused) {
  kdc_module *m = kdc_ir_module_create("ss");
  m->mesh = rtt_mesh(mesh);
  kdc_func *f = kdc_ir_func_create(m, "predict");
  int64_t shape[3] = {8, 12, 16};
  kdc_type t = kdc_type_make(KDC_DTYPE_F32, 3, shape);
  kdc_value_id x = kdc_ir_parameter(f, KDC_PARAM_INPUT, "x", &t);
  kdc_value_id s = rtt_spmd(f, KDC_OP_SHARD_SLICE, x, n, axes, dim, 0, 0);
  kdc_value_id y = kdc_ir_unary(f, KDC_OP_NEG, s);
  kdc_value_id z = kdc_ir_binary_scalar(f, KDC_OP_MUL, y, 2.0);
  kdc_ir_add_result(f, z, "y");
  for (size_t v = 0; v < f->n_nodes; v++) f->nodes[v].group = -1;
  if (fused)
    for (size_t v = s; v < f->n_nodes; v++)
      if (f->nodes[v].op != KDC_OP_CONSTANT) f->nodes[v].group = 0;
  rtt_check_opts(m, f, 0, true);
  kdc_ir_module_destroy(m);
}

static void test_shard_slice(void **state) {
  (void)state;
  static const uint8_t x[1] = {0}, a[1] = {0}, b[1] = {1}, ab[2] = {0, 1}, ba[2] = {1, 0},
                       cab[3] = {2, 0, 1};
  for (int fused = 0; fused < 2; fused++)
    for (int64_t dim = 0; dim < 3; dim++) {
      shard_slice_case("x=2", x, 1, dim, fused);
      shard_slice_case("a=2,b=4", b, 1, dim, fused);
      shard_slice_case("a=2,b=4", ba, 2, dim == 1 ? 0 : dim, fused);
      shard_slice_case("a=2,b=2,c=2", cab, 3, dim == 1 ? 2 : dim, fused);
      shard_slice_case("a=2,b=2,c=2", ab, 2, dim, fused);
      shard_slice_case("a=2,b=2,c=2", a, 1, dim, fused);
    }
}

/* u = rng_uniform(step) of LOCAL |local| with sharding |sh|, alone or fused
 * with an add; checked on every device and through the global API. */
static void rng_case(const char *mesh, const char *sh, int rank, const int64_t *local, bool fused,
                     kdc_dtype step_dt) {
  kdc_module *m = kdc_ir_module_create("rng");
  m->mesh = rtt_mesh(mesh);
  kdc_func *f = kdc_ir_func_create(m, "predict");
  kdc_type st = kdc_type_make(step_dt, 0, NULL), lt = kdc_type_make(KDC_DTYPE_F32, rank, local);
  kdc_value_id step = kdc_ir_parameter(f, KDC_PARAM_STATE, "step", &st);
  f->nodes[step].sharding = kdc_sharding_replicated(0);
  kdc_value_id u = kdc_ir_rng_uniform(f, step, 987654321, rank, local);
  kdc_sharding s = parse(&m->mesh, sh);
  f->nodes[u].sharding = s;
  kdc_value_id r = u;
  if (fused) {  /* u + 0 (exact), the add's kernel computing the rng inline */
    kdc_value_id z = kdc_ir_parameter(f, KDC_PARAM_INPUT, "zero", &lt);
    f->nodes[z].sharding = s;
    r = kdc_ir_binary(f, KDC_OP_ADD, u, z);
    f->nodes[r].sharding = s;
  }
  kdc_ir_add_result(f, r, "u");
  for (size_t v = 0; v < f->n_nodes; v++) f->nodes[v].group = -1;
  if (fused) f->nodes[u].group = f->nodes[r].group = 0;
  /* per device against the SPMD interpreter (which draws at global indices) */
  rtt_check_opts(m, f, 0, true);
  /* end to end: global in, global out == the unsharded rng */
  kdc_rt_plan *plan = rtt_compile(m, 0, true);
  const kdc_rt_tensor_info *out = kdc_rt_plan_output(plan, 0, 0);
  int64_t n = (int64_t)(out->bytes / 4);
  float *got = malloc((size_t)n * 4 + 4), *zero = calloc((size_t)n + 1, 4);
  int64_t stepv = -3;
  int32_t step32 = -3;
  const void *in[2] = {step_dt == KDC_DTYPE_I64 ? (const void *)&stepv : (const void *)&step32,
                       zero};
  void *outs[1] = {got};
  cgt_fail(kdc_rt_plan_run(plan, in, outs), "run");
  for (int64_t i = 0; i < n; i++)
    if (got[i] != kdc_rng_uniform_at(987654321, -3, i))
      fail_msg("%s %s: global element %lld is %g, want %g", mesh, sh, (long long)i, got[i],
               kdc_rng_uniform_at(987654321, -3, i));
  free(got), free(zero);
  kdc_rt_plan_release(plan);
  kdc_ir_module_destroy(m);
}

static void test_rng_sharded(void **state) {
  (void)state;
  int64_t l2[2] = {4, 6}, l3[3] = {2, 3, 5}, l1[1] = {33};
  for (int fused = 0; fused < 2; fused++) {
    kdc_dtype dt = fused ? KDC_DTYPE_I64 : KDC_DTYPE_I32;
    rng_case("x=2", "{x}", 1, l1, fused, dt);
    rng_case("x=2", "{-,x}", 2, l2, fused, dt);
    rng_case("a=2,b=4", "{a,b}", 2, l2, fused, dt);
    rng_case("a=2,b=4", "{b,-}", 2, l2, fused, dt);
    rng_case("a=2,b=4", "{(b,a),-}", 2, l2, fused, dt);
    rng_case("a=2,b=2,c=2", "{c,(a,b),-}", 3, l3, fused, dt);
    rng_case("a=2,b=2,c=2", "{-,b,a}", 3, l3, fused, dt);
    rng_case("a=2,b=2,c=2", "{-,-,-}", 3, l3, fused, dt);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_shard_slice),
      cmocka_unit_test(test_rng_sharded),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
