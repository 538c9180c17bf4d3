/*
 * Partitioning end to end: seed_shardings, propagate_shardings and partition
 * on small graphs, then kdc_ir_interpret_spmd on the inputs split per the
 * parameters' shardings must give (after assembling the results per their
 * shardings) the same global results as kdc_ir_interpret on the unpartitioned
 * function (relative 1e-5), on every mesh of {1, 2, 4, 8, 2x4, 4x2, 1x8,
 * 8x1, 2x2x2}, with data parallelism and model-parallel layouts.  Also the
 * exact collectives of a Megatron MLP and of data-parallel predict, with
 * their bytes per device (SHARDING.md 4), provenance (explain) and the
 * fallback warning.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "sh_test.h"

/* Replaces $K$ placeholders: |subs| is "K=value" strings. */
static char *subst(const char *tmpl, const char *const *subs, int n) {
  char *out = kdc_xmalloc(strlen(tmpl) * 2 + 4096);
  size_t o = 0;
  for (const char *p = tmpl; *p;) {
    if (*p == '$') {
      const char *e = strchr(p + 1, '$');
      size_t klen = (size_t)(e - p - 1);
      for (int i = 0; i < n; i++)
        if (!strncmp(subs[i], p + 1, klen) && subs[i][klen] == '=') {
          strcpy(out + o, subs[i] + klen + 1);
          o += strlen(subs[i] + klen + 1);
        }
      p = e + 1;
      continue;
    }
    out[o++] = *p++;
  }
  out[o] = 0;
  return out;
}

typedef struct outcome {
  int collectives, all_reduce, all_gather;
  double bytes; /* per device, all collectives */
  kdc_module *m; /* the partitioned module (caller destroys) */
  char *warnings;
} outcome;

static kdc_module *parse(const char *text) {
  kdc_module *m = NULL;
  kdc_status st = kdc_ir_parse_module(text, "t.kir", &m);
  if (st) fail_msg("%s\n%s", kdc_status_message(st), text);
  return m;
}

static void run(const char *text, outcome *res) {
  kdc_module *ref = parse(text), *m = parse(text);
  kdc_func *rf = ref->funcs[0];
  size_t np = rf->n_params;
  kdc_tensor *gargs = sh_global_args(rf, 3, 0.125f);
  kdc_tensor *want = calloc(rf->n_results, sizeof *want);
  kdc_status st = kdc_ir_interpret(rf, gargs, np, want);
  if (st) fail_msg("%s", kdc_status_message(st));
  size_t wl = 0;
  char *warn = NULL;
  kdc_pass_options opt = {0};
  opt.warnings = open_memstream(&warn, &wl);
  st = kdc_pass_run_list(m, "seed_shardings,propagate_shardings,partition", &opt);
  fclose(opt.warnings);
  if (st) fail_msg("%s\n%s", kdc_status_message(st), text);
  kdc_func *f = m->funcs[0];
  for (size_t r = 0; r < f->n_results; r++) assert_int_equal(f->nodes[f->results[r]].sharding.partial, 0);
  sh_spmd_check(m, gargs, np, want, text);
  memset(res, 0, sizeof *res);
  for (size_t v = 0; v < f->n_nodes; v++) {
    const kdc_node *n = &f->nodes[v];
    if (n->op == KDC_OP_SHARD_SLICE || !(kdc_op_flags(n->op) & OPF_COLL)) continue;
    res->collectives++;
    res->all_reduce += n->op == KDC_OP_ALL_REDUCE;
    res->all_gather += n->op == KDC_OP_ALL_GATHER;
    res->bytes += kdc_coll_bytes(&m->mesh, n->op, &n->attr.coll, kdc_ir_type(f, n->in[0]), &n->type);
  }
  res->m = m;
  res->warnings = warn;
  for (size_t i = 0; i < np; i++) free(gargs[i].data);
  for (size_t r = 0; r < rf->n_results; r++) free(want[r].data);
  free(gargs), free(want);
  kdc_ir_module_destroy(ref);
}

static void done(outcome *o) {
  kdc_ir_module_destroy(o->m);
  free(o->warnings);
}

static const char mlp[] =
    "module @mlp {\n  mesh [$MESH$]\n"
    "  weight \"d1/kernel\" : f32[16,32]\n  weight \"d1/bias\" : f32[32]\n"
    "  weight \"d2/kernel\" : f32[32,8]\n  weight \"d2/bias\" : f32[8]\n"
    "  func @predict {\n"
    "    %x = parameter 0 input \"x\" : f32[16,16] $X$\n"
    "    %w1 = parameter 1 weight \"d1/kernel\" : f32[16,32] $W1$\n"
    "    %b1 = parameter 2 weight \"d1/bias\" : f32[32] $B1$\n"
    "    %w2 = parameter 3 weight \"d2/kernel\" : f32[32,8] $W2$\n"
    "    %b2 = parameter 4 weight \"d2/bias\" : f32[8] {-}\n"
    "    %h = dot_general %x, %w1 lhs_contract=[1] rhs_contract=[0] : f32[16,32]\n"
    "    %bb1 = broadcast_in_dim %b1 dims=[1] : f32[16,32]\n"
    "    %h1 = add %h, %bb1 : f32[16,32]\n"
    "    %z = constant 0 : f32[16,32]\n"
    "    %a = max %h1, %z : f32[16,32]\n"
    "    %l = dot_general %a, %w2 lhs_contract=[1] rhs_contract=[0] : f32[16,8]\n"
    "    %bb2 = broadcast_in_dim %b2 dims=[1] : f32[16,8]\n"
    "    %y0 = add %l, %bb2 : f32[16,8]\n"
    "    %y = sharding_constraint %y0 : f32[16,8] $OUT$\n"
    "    %m = reduce max %y dims=[1] : f32[16]\n"
    "    %mb = broadcast_in_dim %m dims=[0] : f32[16,8]\n"
    "    %s = sub %y, %mb : f32[16,8]\n"
    "    %e = exp %s : f32[16,8]\n"
    "    %sum = reduce sum %e dims=[1] : f32[16]\n"
    "    %sb = broadcast_in_dim %sum dims=[0] : f32[16,8]\n"
    "    %p = div %e, %sb : f32[16,8]\n"
    "    return %p \"probs\", %h1 \"hidden\"\n  }\n}\n";

/* merge, reshape, transpose, reduce, concatenate, iota, rng_uniform and a
 * dense constant */
static const char merge[] =
    "module @merge {\n  mesh [$MESH$]\n  weight \"w\" : f32[24,16]\n"
    "  func @predict {\n"
    "    %x = parameter 0 input \"x\" : f32[16,4,6] $X$\n"
    "    %w = parameter 1 weight \"w\" : f32[24,16] $W$\n"
    "    %a = reshape %x : f32[16,24]\n"
    "    %t = transpose %x perm=[0,2,1] : f32[16,6,4]\n"
    "    %b = reshape %t : f32[16,24]\n"
    "    %c = add %a, %b : f32[16,24]\n"
    "    %d = dot_general %c, %w lhs_contract=[1] rhs_contract=[0] : f32[16,16]\n"
    "    %i = iota dim=0 : f32[16,16]\n"
    "    %k = constant [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16] : f32[16]\n"
    "    %kb = broadcast_in_dim %k dims=[1] : f32[16,16]\n"
    "    %di = mul %d, %i : f32[16,16]\n"
    "    %dk = add %di, %kb : f32[16,16]\n"
    "    %st = constant 1 : i64[]\n"
    "    %rn = rng_uniform %st seed=5 : f32[16,16]\n"
    "    %dr = add %dk, %rn : f32[16,16]\n"
    "    %e = reduce sum %dr dims=[1] : f32[16]\n"
    "    %f = concatenate %dk, %d dim=1 : f32[16,32]\n"
    "    %g = tanh %f : f32[16,32]\n"
    "    %r = reshape %g : f32[16,4,8]\n"
    "    %q = reduce sum %r dims=[0] : f32[4,8]\n"
    "    return %e \"e\", %g \"g\", %q \"q\"\n  }\n}\n";

static const char *const meshes[] = {"data=1", "data=2", "data=4", "data=8", "data=2,model=4",
                                     "data=4,model=2", "data=1,model=8", "data=8,model=1",
                                     "data=2,model=2,axis2=2"};

/* The data-parallel batch sharding: dim 0 over every axis. */
static void dp_batch(const char *mesh, char *buf) {
  kdc_mesh m = sh_mesh(mesh);
  strcpy(buf, "(");
  for (int a = 0; a < m.naxes; a++) {
    strcat(buf, a ? "," : "");
    strcat(buf, m.names[a]);
  }
  strcat(buf, ")");
}

static void test_mlp_all_meshes(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof meshes / sizeof meshes[0]; i++) {
    char mesh[64], xs[64], b[32];
    bool two = strchr(meshes[i], ',') != NULL;
    snprintf(mesh, sizeof mesh, "%s", meshes[i]);
    for (char *p = mesh; *p; p++)
      if (*p == ',') *p = 0; /* rebuilt below with ", " */
    char meshline[96];
    kdc_mesh mm = sh_mesh(meshes[i]);
    meshline[0] = 0;
    for (int a = 0; a < mm.naxes; a++) {
      char one[40];
      snprintf(one, sizeof one, "%s%s=%lld", a ? ", " : "", mm.names[a], (long long)mm.sizes[a]);
      strcat(meshline, one);
    }
    char ms[120];
    snprintf(ms, sizeof ms, "MESH=%s", meshline);
    dp_batch(meshes[i], b);
    snprintf(xs, sizeof xs, "X={%s,-}", b);
    /* data parallel */
    const char *dp[] = {ms, xs, "W1={-,-}", "B1={-}", "W2={-,-}", "OUT={?,?}"};
    char *text = subst(mlp, dp, 6);
    outcome o;
    run(text, &o);
    assert_int_equal(o.collectives, 0); /* DP predict: no communication */
    done(&o);
    free(text);
    /* model parallel layouts (axis "model" when the mesh has one, else data) */
    const char *mx = two ? "model" : "data";
    char w1[64], b1[32], w2[64], w1r[64], out[32];
    snprintf(w1, sizeof w1, "W1={-,%s}", mx);
    snprintf(b1, sizeof b1, "B1={%s}", mx);
    snprintf(w2, sizeof w2, "W2={%s,-}", mx);
    snprintf(w1r, sizeof w1r, "W1={%s,-}", mx);
    snprintf(out, sizeof out, "OUT={%s,-}", two ? "data" : "?");
    const char *xl = two ? "X={data,-}" : "X={-,-}";
    const char *mp1[] = {ms, xl, w1, b1, w2, out};          /* Megatron + bias */
    const char *mp2[] = {ms, xl, w1r, "B1={-}", "W2={-,-}", "OUT={?,?}"}; /* contract split */
    const char *mp3[] = {ms, xs, w1r, "B1={-}", w2, "OUT={-,-}"}; /* DP batch vs split weights */
    const char *const *layouts[] = {mp1, mp2, mp3};
    for (int l = 0; l < 3; l++) {
      text = subst(mlp, layouts[l], 6);
      run(text, &o);
      done(&o);
      free(text);
    }
    /* merge/reshape/transpose/reduce graph */
    char ws[64];
    snprintf(ws, sizeof ws, "W={-,%s}", mx);
    char xs3[64];
    snprintf(xs3, sizeof xs3, "X={%s,-,-}", b);
    const char *g1[] = {ms, xs3, "W={-,-}"};
    const char *g2[] = {ms, two ? "X={data,-,-}" : "X={-,-,-}", ws};
    const char *g3[] = {ms, "X={-,-,-}", two ? "W={(model,data),-}" : "W={data,-}"};
    const char *const *gl[] = {g1, g2, g3};
    for (int l = 0; l < 3; l++) {
      text = subst(merge, gl[l], 3);
      run(text, &o);
      done(&o);
      free(text);
    }
  }
}

static const char megatron[] =
    "module @megatron {\n  mesh [data=2, model=4]\n"
    "  weight \"w1\" : f32[16,64]\n  weight \"w2\" : f32[64,16]\n"
    "  func @predict {\n"
    "    %x = parameter 0 input \"x\" : f32[16,16] {data,-}\n"
    "    %w1 = parameter 1 weight \"w1\" : f32[16,64] {-,model}\n"
    "    %w2 = parameter 2 weight \"w2\" : f32[64,16] {model,-}\n"
    "    %h = dot_general %x, %w1 lhs_contract=[1] rhs_contract=[0] : f32[16,64]\n"
    "    %z = constant 0 : f32[16,64]\n"
    "    %a = max %h, %z : f32[16,64]\n"
    "    %y = dot_general %a, %w2 lhs_contract=[1] rhs_contract=[0] : f32[16,16]\n"
    "    return %y \"y\"\n  }\n}\n";

/* SHARDING.md 4: one all_reduce over model of [B/d, h] forward, no other
 * collective; bytes per device 2(t-1)/t * (B/d) * h * e. */
static void test_megatron_counts(void **state) {
  (void)state;
  outcome o;
  run(megatron, &o);
  kdc_func *f = o.m->funcs[0];
  assert_int_equal(o.collectives, 1);
  assert_int_equal(o.all_reduce, 1);
  for (size_t v = 0; v < f->n_nodes; v++)
    if (f->nodes[v].op == KDC_OP_ALL_REDUCE) {
      const kdc_node *n = &f->nodes[v];
      assert_int_equal(n->attr.coll.naxes, 1);
      assert_string_equal(o.m->mesh.names[n->attr.coll.axes[0]], "model");
      assert_int_equal(n->type.dims[0], 16 / 2);
      assert_int_equal(n->type.dims[1], 16);
    }
  double t = 4, B = 16, d = 2, h = 16, e = 4;
  assert_true(o.bytes == 2 * (t - 1) / t * (B / d) * h * e); /* 768 bytes */
  assert_string_equal(o.warnings, "");
  done(&o);
}

/* The explain chain of the hidden activation of the Megatron MLP. */
static void test_explain(void **state) {
  (void)state;
  kdc_module *m = parse(megatron);
  assert_null(kdc_pass_run_list(m, "seed_shardings,propagate_shardings", NULL));
  char *buf = NULL;
  size_t len = 0;
  FILE *out = open_memstream(&buf, &len);
  assert_null(kdc_sharding_explain(m, m->funcs[0], 3, out));
  fclose(out);
  assert_non_null(strstr(buf, "%3 {data?,model?}"));
  assert_non_null(strstr(buf, "dim 0 axis data: <- %0 via dot_general %3 factor i (fwd"));
  assert_non_null(strstr(buf, "<- user: input \"x\" batch dim over data"));
  assert_non_null(strstr(buf, "dim 1 axis model: <- %1 via dot_general %3 factor j (fwd"));
  assert_non_null(strstr(buf, "<- user: layout_map[\"w1\"]"));
  free(buf);
  kdc_ir_module_destroy(m);
}

/* A softmax over a model-split class dim must gather: never silently. */
static void test_fallback_warning(void **state) {
  (void)state;
  const char *text =
      "module @w {\n  mesh [data=2, model=4]\n"
      "  func @f {\n"
      "    %x = parameter 0 input \"x\" : f32[8,16] {data,model}\n"
      "    %m = reduce max %x dims=[1] : f32[8]\n"
      "    return %m \"m\"\n  }\n}\n";
  outcome o;
  run(text, &o);
  assert_int_equal(o.all_gather, 1);
  assert_string_equal(o.warnings,
                      "warning: func f: %1 (reduce): operand %0 {data,model} [input \"x\" batch dim "
                      "over data] is gathered to {data,-}: the op cannot run split that way; "
                      "result {data} [input \"x\" batch dim over data]\n");
  done(&o);
}

/* issue 21: a replicated weight that a dot reads cut on both dims (its
 * contracting dim over x, from the activation; its output dim over model,
 * from the next layer's rule) is narrowed at load on both: the parameter
 * becomes {x,model} of local type [16,32], and no shard_slice of it is left
 * (before the fix the second cut was dropped and the dot read a [16,64]
 * piece as [16,32]: "pass partition produced invalid IR"). */
static void test_weight_cut_on_two_dims(void **state) {
  (void)state;
  const char *text =
      "module @w2d {\n  mesh [data=2, model=2, x=2]\n"
      "  weight \"w1\" : f32[32,64]\n  weight \"w2\" : f32[64,32]\n"
      "  func @predict {\n"
      "    %x = parameter 0 input \"x\" : f32[16,32] {data,x}\n"
      "    %w1 = parameter 1 weight \"w1\" : f32[32,64] {-,-}\n"
      "    %w2 = parameter 2 weight \"w2\" : f32[64,32] {model,x}\n"
      "    %h = dot_general %x, %w1 lhs_contract=[1] rhs_contract=[0] : f32[16,64]\n"
      "    %z = constant 0 : f32[16,64]\n"
      "    %a = max %h, %z : f32[16,64]\n"
      "    %y = dot_general %a, %w2 lhs_contract=[1] rhs_contract=[0] : f32[16,32]\n"
      "    return %y \"y\"\n  }\n}\n";
  outcome o;
  run(text, &o);
  kdc_func *f = o.m->funcs[0];
  const kdc_node *w1 = &f->nodes[f->params[1]];
  kdc_sharding s = w1->sharding;
  s.origin = 0;
  char buf[256];
  assert_string_equal(kdc_sharding_str(&o.m->mesh, &s, buf, sizeof buf), "{x,model}");
  assert_int_equal(w1->type.dims[0], 16);
  assert_int_equal(w1->type.dims[1], 32);
  for (size_t v = 0; v < f->n_nodes; v++)
    if (f->nodes[v].op == KDC_OP_SHARD_SLICE) assert_int_not_equal(f->nodes[v].in[0], f->params[1]);
  done(&o);
}

/* Indivisible dims are located errors, never padding. */
static void test_indivisible(void **state) {
  (void)state;
  kdc_module *m = parse("module @u {\n  mesh [data=2, model=4]\n  func @f {\n"
                        "    %x = parameter 0 input \"x\" : f32[6,8] {model,-}\n"
                        "    %y = neg %x : f32[6,8]\n    return %y\n  }\n}\n");
  kdc_status st = kdc_pass_run_list(m, "seed_shardings,propagate_shardings,partition", NULL);
  assert_non_null(st);
  assert_non_null(strstr(kdc_status_message(st), "not divisible"));
  assert_non_null(strstr(kdc_status_message(st), "%0 (parameter)"));
  kdc_status_free(st);
  kdc_ir_module_destroy(m);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_megatron_counts), cmocka_unit_test(test_explain),
      cmocka_unit_test(test_fallback_warning), cmocka_unit_test(test_indivisible),
      cmocka_unit_test(test_weight_cut_on_two_dims),
      cmocka_unit_test(test_mlp_all_meshes),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
