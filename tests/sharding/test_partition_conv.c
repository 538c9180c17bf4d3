/*
 * Partitioning of the windowed and indexed ops (passes/sharding_rules.c,
 * passes/partition.c, passes/partition_gather.c): seed, propagate and
 * partition, then kdc_ir_interpret_spmd equals kdc_ir_interpret on the
 * unpartitioned function (relative 1e-5; NaN where the reference has NaN) on
 * the meshes {2, 8, 2x4}:
 *   - a conv -> relu -> max pool / avg-style sum pool -> depthwise conv graph
 *     with the batch split, the output channels split, the input channels
 *     split (partial sums, then an all_reduce) and batch x out-channels;
 *   - an embedding gather + its scatter_add gradient with the vocabulary
 *     split (masked local lookup, partial sum), the features split, and the
 *     ids split; ids include wrapped negative and out-of-range (NaN) ids.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "sh_test.h"

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

static kdc_module *parse(const char *text) {
  kdc_module *m = NULL;
  kdc_status st = kdc_ir_parse_module(text, "t.kir", &m);
  if (st) fail_msg("%s\n%s", kdc_status_message(st), text);
  return m;
}

/* Runs |text| both ways; returns the number of all_reduce nodes. */
static int run(const char *text) {
  kdc_module *ref = parse(text), *m = parse(text);
  kdc_func *rf = ref->funcs[0];
  size_t np = rf->n_params;
  kdc_tensor *gargs = calloc(np, sizeof *gargs);
  for (size_t i = 0; i < np; i++) {
    gargs[i].type = rf->nodes[rf->params[i]].type;
    int64_t n = kdc_type_numel(&gargs[i].type);
    gargs[i].data = malloc((size_t)n * 4);
    sh_fill(gargs[i].data, n, (uint32_t)i + 3);
    if (gargs[i].type.dtype == KDC_DTYPE_I32) /* ids in [-18, 18): wraps and out of range */
      for (int64_t k = 0; k < n; k++)
        ((int32_t *)gargs[i].data)[k] = (int32_t)((k * 7 + (int64_t)i * 5) % 36) - 18;
    else
      for (int64_t k = 0; k < n; k++) ((float *)gargs[i].data)[k] *= 0.125f;
  }
  kdc_tensor *want = calloc(rf->n_results, sizeof *want);
  kdc_status st = kdc_ir_interpret(rf, gargs, np, want);
  if (st) fail_msg("%s", kdc_status_message(st));
  kdc_pass_options opt = {0};
  st = kdc_pass_run_list(m, "seed_shardings,propagate_shardings,partition", &opt);
  if (st) fail_msg("%s\n%s", kdc_status_message(st), text);
  st = kdc_ir_verify_module(m);
  if (st) fail_msg("verify: %s", kdc_status_message(st));
  kdc_func *f = m->funcs[0];
  sh_spmd_check(m, gargs, np, want, text);
  int ar = sh_count(f, KDC_OP_ALL_REDUCE);
  for (size_t i = 0; i < np; i++) free(gargs[i].data);
  for (size_t r = 0; r < rf->n_results; r++) free(want[r].data);
  free(gargs), free(want);
  kdc_ir_module_destroy(ref);
  kdc_ir_module_destroy(m);
  return ar;
}

static const char cnn[] =
    "module @cnn {\n  mesh [$MESH$]\n"
    "  weight \"c/kernel\" : f32[3,3,8,8]\n  weight \"d/kernel\" : f32[3,3,1,8]\n"
    "  func @predict {\n"
    "    %x = parameter 0 input \"x\" : f32[8,6,6,8] $X$\n"
    "    %w = parameter 1 weight \"c/kernel\" : f32[3,3,8,8] $W$\n"
    "    %dw = parameter 2 weight \"d/kernel\" : f32[3,3,1,8] {-,-,-,-}\n"
    "    %y = convolution %x, %w stride=[1,1] pad_low=[1,1] pad_high=[1,1] lhs_dilation=[1,1]"
    " rhs_dilation=[1,1] groups=1 : f32[8,6,6,8]\n"
    "    %z = constant 0 : f32[8,6,6,8]\n"
    "    %a = max %y, %z : f32[8,6,6,8]\n"
    "    %p = reduce_window max %a window=[1,2,2,1] stride=[1,2,2,1] pad_low=[0,0,0,0]"
    " pad_high=[0,0,0,0] dilation=[1,1,1,1] : f32[8,3,3,8]\n"
    "    %q = reduce_window sum %a window=[1,3,3,1] stride=[1,2,2,1] pad_low=[0,1,1,0]"
    " pad_high=[0,1,1,0] dilation=[1,1,1,1] : f32[8,3,3,8]\n"
    "    %r = convolution %p, %dw stride=[1,1] pad_low=[1,1] pad_high=[1,1] lhs_dilation=[1,1]"
    " rhs_dilation=[1,1] groups=8 : f32[8,3,3,8]\n"
    "    return %y \"conv\", %p \"pool\", %q \"sum\", %r \"dw\"\n  }\n}\n";

static const char emb[] =
    "module @emb {\n  mesh [$MESH$]\n  weight \"e/embeddings\" : f32[16,8]\n"
    "  func @predict {\n"
    "    %t = parameter 0 weight \"e/embeddings\" : f32[16,8] $T$\n"
    "    %i = parameter 1 input \"ids\" : i32[8,5] $I$\n"
    "    %g = gather %t, %i : f32[8,5,8]\n"
    "    %s = scatter_add %i, %g : f32[16,8]\n"
    "    %c = sharding_constraint %s : f32[16,8] $S$\n"
    "    return %g \"emb\", %c \"grad\"\n  }\n}\n";

typedef struct mesh_case { const char *line, *all, *m; } mesh_case;
static const mesh_case meshes[] = {
    {"MESH=data=2", "data", "data"},
    {"MESH=data=8", "data", "data"},
    {"MESH=data=2, model=4", "(data,model)", "model"},
};

static void test_conv_layouts(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof meshes / sizeof meshes[0]; i++) {
    char xb[64], wo[64], wi[64], xd[64];
    snprintf(xb, sizeof xb, "X={%s,-,-,-}", meshes[i].all);
    snprintf(wo, sizeof wo, "W={-,-,-,%s}", meshes[i].m);
    snprintf(wi, sizeof wi, "W={-,-,%s,-}", meshes[i].m);
    snprintf(xd, sizeof xd, "X={%s,-,-,-}", strchr(meshes[i].line, ',') ? "data" : "-");
    const char *batch[] = {meshes[i].line, xb, "W={-,-,-,-}"};
    const char *outc[] = {meshes[i].line, "X={-,-,-,-}", wo};
    const char *inc[] = {meshes[i].line, "X={-,-,-,-}", wi};
    const char *both[] = {meshes[i].line, xd, wo};
    const char *const *layouts[] = {batch, outc, inc, both};
    for (int l = 0; l < 4; l++) {
      char *text = subst(cnn, layouts[l], 3);
      int ar = run(text);
      if (l == 2) assert_true(ar >= 1); /* in-channel split: partial sums reduced */
      free(text);
    }
  }
}

static void test_embedding_layouts(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof meshes / sizeof meshes[0]; i++) {
    char tv[64], tf[64], ib[64], sv[64];
    bool two = strchr(meshes[i].line, ',') != NULL;
    snprintf(tv, sizeof tv, "T={%s,-}", meshes[i].m);
    snprintf(sv, sizeof sv, "S={%s,-}", meshes[i].m);
    snprintf(tf, sizeof tf, "T={-,%s}", meshes[i].m);
    snprintf(ib, sizeof ib, "I={%s,-}", two ? "data" : meshes[i].all);
    const char *vocab[] = {meshes[i].line, tv, "I={-,-}", sv};
    const char *feat[] = {meshes[i].line, tf, "I={-,-}", "S={-,?}"};
    const char *ids[] = {meshes[i].line, "T={-,-}", ib, "S={-,-}"};
    const char *mixed[] = {meshes[i].line, tv, two ? "I={data,-}" : "I={-,-}", sv};
    const char *const *layouts[] = {vocab, feat, ids, mixed};
    for (int l = 0; l < 4; l++) {
      char *text = subst(emb, layouts[l], 4);
      int ar = run(text);
      if (l == 0) assert_true(ar >= 1); /* vocab split: the partial lookups are summed */
      free(text);
    }
  }
}

/* Found by tests/reference/fuzz.js (a SeparableConv2D's pointwise kernel split
 * on its input channels, then a PReLU alpha split on a spatial dim): the
 * convolution's result is partial over "model" while its propagated
 * sharding splits a dim on "model"; the partial sum must be reduced on the
 * way (a value cannot be partial and split over one axis). */
static const char partial_then_split[] =
    "module @ps {\n  mesh [$MESH$]\n  weight \"c/kernel\" : f32[1,1,4,2]\n"
    "  func @predict {\n"
    "    %x = parameter 0 input \"x\" : f32[4,3,4,4] {data,-,-,-}\n"
    "    %w = parameter 1 weight \"c/kernel\" : f32[1,1,4,2] {-,-,model,-}\n"
    "    %y = convolution %x, %w stride=[1,1] pad_low=[0,0] pad_high=[0,0] lhs_dilation=[1,1]"
    " rhs_dilation=[1,1] groups=1 : f32[4,3,4,2]\n"
    "    %c = sharding_constraint %y : f32[4,3,4,2] {data,-,model,-}\n"
    "    return %c \"y\"\n  }\n}\n";

static void test_partial_result_split_on_same_axis(void **state) {
  (void)state;
  const char *const meshes2[] = {"MESH=data=2, model=1", "MESH=data=1, model=2", "MESH=data=2, model=2"};
  for (size_t i = 0; i < sizeof meshes2 / sizeof meshes2[0]; i++) {
    const char *subs[] = {meshes2[i]};
    char *text = subst(partial_then_split, subs, 1);
    run(text);
    free(text);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_conv_layouts),
      cmocka_unit_test(test_embedding_layouts),
      cmocka_unit_test(test_partial_result_split_on_same_axis),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
