/*
 * Spatial partitioning of convolutions and pooling with halo exchange
 * (passes/partition_halo.c): the input of a Conv1D / Conv2D / pooling /
 * depthwise conv is split on its spatial dims; seed, propagate and
 * partition, then kdc_ir_interpret_spmd equals kdc_ir_interpret on the
 * unpartitioned function (relative 1e-5), for the forward op and for its
 * gradients (kdc_autodiff of sum(y * c) with respect to the input and the
 * kernel).  Configurations: kernel 1/3/5, stride 1/2, dilation 1/2, padding
 * same/valid (and causal for Conv1D), on the meshes model=2, model=4 (rows
 * split 2 and 4 ways), data=2,model=4 (batch over data, rows over model) and
 * the same 2x4 mesh with rows over data and columns over model (two
 * exchanges, corners).
 * Where the output shards line up ("same" or causal with the stride dividing
 * the local rows, the halo within one neighbour's shard), the forward
 * program has no all_gather and exactly one collective_permute per side
 * that needs rows (expected counts from Keras' padding formula here, not
 * from the code); elsewhere the fallback gathers with its warning.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "sh_test.h"

typedef struct cfg {
  int ns;            /* spatial dims: 1 or 2 */
  int64_t k, s, dil; /* kernel, stride, dilation (same on every spatial dim) */
  int pad;           /* 0 valid, 1 same, 2 causal (Conv1D) */
  const char *mesh, *xs; /* mesh line, input sharding */
  int64_t n[2];          /* shards of each spatial dim */
} cfg;

static const int64_t B = 2, S[2] = {16, 8}, CI = 3, CO = 4;

/* Keras padding of one spatial dim: output size and low padding. */
static void keras_pad(int64_t sz, int64_t k, int64_t s, int64_t dil, int pad, int64_t *o,
                      int64_t *lo, int64_t *hi) {
  int64_t kd = (k - 1) * dil + 1;
  if (pad == 2) { /* causal: all the padding on the left */
    *o = (sz + s - 1) / s;
    *lo = kd - 1;
    *hi = 0;
  } else if (pad == 1) {
    *o = (sz + s - 1) / s;
    int64_t tot = (*o - 1) * s + kd - sz;
    if (tot < 0) tot = 0;
    *lo = tot / 2;
    *hi = tot - *lo;
  } else {
    *o = (sz - kd) / s + 1;
    *lo = *hi = 0;
  }
}

static kdc_module *parse(const char *text) {
  kdc_module *m = NULL;
  kdc_status st = kdc_ir_parse_module(text, "t.kir", &m);
  if (st) fail_msg("%s\n%s", kdc_status_message(st), text);
  return m;
}

static void dims_str(char *out, const int64_t *d, int r) {
  out[0] = 0;
  for (int i = 0; i < r; i++) sprintf(out + strlen(out), "%s%lld", i ? "," : "", (long long)d[i]);
}

static void list_str(char *out, int64_t v0, int64_t v1, int n) {
  if (n == 1) sprintf(out, "[%lld]", (long long)v0);
  else sprintf(out, "[%lld,%lld]", (long long)v0, (long long)v1);
}

static kdc_value_id sum_all(kdc_func *f, kdc_value_id y) {
  int64_t all[KDC_MAX_RANK];
  int r = kdc_ir_type(f, y)->rank;
  for (int d = 0; d < r; d++) all[d] = d;
  return kdc_ir_reduce(f, KDC_RED_SUM, y, r, all);
}

/* Appends d/dx and d/dw of sum(y0 * c) + sum(y1) + ... as results (c =
 * parameter 2, y0 the first result). */
static void add_grads(kdc_module *m) {
  kdc_func *f = m->funcs[0];
  kdc_value_id c = f->params[2];
  kdc_value_id l = sum_all(f, kdc_ir_binary(f, KDC_OP_MUL, f->results[0], c));
  size_t nr = f->n_results;
  for (size_t i = 1; i < nr; i++) l = kdc_ir_binary(f, KDC_OP_ADD, l, sum_all(f, f->results[i]));
  kdc_value_id wrt[2] = {f->params[0], f->params[1]}, g[2];
  assert_null(kdc_autodiff(f, l, wrt, 2, g));
  kdc_ir_add_result(f, g[0], "dx");
  kdc_ir_add_result(f, g[1], "dw");
}

/* Runs |text| (forward only, or with gradients) both ways; returns the
 * partitioned module (caller destroys) and the warnings in *warn. */
static kdc_module *run(const char *text, bool grads, char **warn) {
  kdc_module *ref = parse(text), *m = parse(text);
  if (grads) add_grads(ref), add_grads(m);
  kdc_func *rf = ref->funcs[0];
  size_t np = rf->n_params;
  kdc_tensor *gargs = sh_global_args(rf, 7, 0.25f);
  kdc_tensor *want = calloc(rf->n_results, sizeof *want);
  kdc_status st = kdc_ir_interpret(rf, gargs, np, want);
  if (st) fail_msg("%s", kdc_status_message(st));
  size_t wlen = 0;
  kdc_pass_options opt = {0};
  opt.warnings = open_memstream(warn, &wlen);
  st = kdc_pass_run_list(m, "seed_shardings,propagate_shardings,partition", &opt);
  fclose(opt.warnings);
  if (st) fail_msg("%s\n%s", kdc_status_message(st), text);
  st = kdc_ir_verify_module(m);
  if (st) fail_msg("verify: %s", kdc_status_message(st));
  sh_spmd_check(m, gargs, np, want, text);
  sh_free_tensors(gargs, np);
  sh_free_tensors(want, rf->n_results);
  kdc_ir_module_destroy(ref);
  return m;
}

static void conv_case(const cfg *c) {
  int r = c->ns + 2;
  int64_t xd[4] = {B}, wd[4], yd[4] = {B}, lo[2], hi[2];
  for (int d = 0; d < c->ns; d++) {
    xd[d + 1] = S[d];
    wd[d] = c->k;
    keras_pad(S[d], c->k, c->s, c->dil, c->pad, &yd[d + 1], &lo[d], &hi[d]);
  }
  xd[r - 1] = CI, wd[r - 2] = CI, wd[r - 1] = CO, yd[r - 1] = CO;
  char xs[64], ws[64], ys[64], st[32], pl[32], ph[32], ld[32], rd[32], wsh[32], csh[32];
  dims_str(xs, xd, r), dims_str(ws, wd, r), dims_str(ys, yd, r);
  list_str(st, c->s, c->s, c->ns), list_str(pl, lo[0], lo[1], c->ns);
  list_str(ph, hi[0], hi[1], c->ns), list_str(ld, 1, 1, c->ns);
  list_str(rd, c->dil, c->dil, c->ns);
  strcpy(wsh, c->ns == 1 ? "{-,-,-}" : "{-,-,-,-}");
  strcpy(csh, c->ns == 1 ? "{?,?,?}" : "{?,?,?,?}");
  char text[2048];
  snprintf(text, sizeof text,
           "module @h {\n  mesh [%s]\n  weight \"w\" : f32[%s]\n  func @predict {\n"
           "    %%x = parameter 0 input \"x\" : f32[%s] %s\n"
           "    %%w = parameter 1 weight \"w\" : f32[%s] %s\n"
           "    %%c = parameter 2 input \"c\" : f32[%s] %s\n"
           "    %%y = convolution %%x, %%w stride=%s pad_low=%s pad_high=%s lhs_dilation=%s"
           " rhs_dilation=%s groups=1 : f32[%s]\n    return %%y \"y\"\n  }\n}\n",
           c->mesh, ws, xs, c->xs, ws, wsh, ys, csh, st, pl, ph, ld, rd, ys);
  /* forward: expected collectives by Keras' padding arithmetic */
  char *warn = NULL;
  kdc_module *m = run(text, false, &warn);
  bool aligned = true;
  int permutes = 0;
  for (int d = 0; d < c->ns; d++) {
    if (c->n[d] == 1) continue;
    int64_t sl = S[d] / c->n[d], kd = (c->k - 1) * c->dil + 1, R = kd - c->s - lo[d];
    bool ok = yd[d + 1] * c->s == S[d] && sl % c->s == 0 && lo[d] <= sl && R <= sl && -R < c->s;
    aligned = aligned && ok;
    permutes += (lo[d] > 0) + (R > 0);
  }
  if (aligned) {
    if (sh_count(m->funcs[0], KDC_OP_ALL_GATHER) != 0 ||
        sh_count(m->funcs[0], KDC_OP_COLLECTIVE_PERMUTE) != permutes || strstr(warn, "gathered")) {
      kdc_ir_print_module(stderr, m);
      fail_msg("expected %d permutes and no gather:\n%s%s", permutes, text, warn);
    }
  } else if (!strstr(warn, "is gathered")) {
    fail_msg("misaligned spatial split without the fallback warning:\n%s", text);
  }
  free(warn);
  kdc_ir_module_destroy(m);
  /* gradients (input and kernel) */
  m = run(text, true, &warn);
  free(warn);
  kdc_ir_module_destroy(m);
}

static const struct { const char *mesh, *xs1, *xs2; int64_t n1, n2[2]; } meshes[] = {
    {"model=2", "{-,model,-}", "{-,model,-,-}", 2, {2, 1}},
    {"model=4", "{-,model,-}", "{-,model,-,-}", 4, {4, 1}},
    {"data=2, model=4", "{data,model,-}", "{data,model,-,-}", 4, {4, 1}},
    {"data=2, model=4", "{-,data,-}", "{-,data,model,-}", 2, {2, 4}},
};

static void test_conv_spatial(void **state) {
  (void)state;
  static const int64_t ks[] = {1, 3, 5};
  for (size_t mi = 0; mi < sizeof meshes / sizeof meshes[0]; mi++)
    for (int ns = 1; ns <= 2; ns++)
      for (int ki = 0; ki < 3; ki++)
        for (int64_t s = 1; s <= 2; s++)
          for (int64_t dil = 1; dil <= 2; dil++)
            for (int pad = 0; pad <= (ns == 1 ? 2 : 1); pad++) {
              if (!pad && (ks[ki] - 1) * dil + 1 > S[ns - 1]) continue; /* no window fits */
              cfg c = {ns, ks[ki], s, dil, pad, meshes[mi].mesh,
                       ns == 1 ? meshes[mi].xs1 : meshes[mi].xs2, {0, 0}};
              if (ns == 1) c.n[0] = meshes[mi].n1, c.n[1] = 1;
              else c.n[0] = meshes[mi].n2[0], c.n[1] = meshes[mi].n2[1];
              conv_case(&c);
            }
}

/* Pooling (max with -inf borders, sum with the "same" count) and a
 * depthwise conv, split on rows and columns, forward and input gradient. */
static const char pools[] =
    "module @p {\n  mesh [%s]\n  weight \"d\" : f32[3,3,1,4]\n  func @predict {\n"
    "    %%x = parameter 0 input \"x\" : f32[2,16,16,4] %s\n"
    "    %%w = parameter 1 weight \"d\" : f32[3,3,1,4] {-,-,-,-}\n"
    "    %%c = parameter 2 input \"c\" : f32[2,16,16,4] {?,?,?,?}\n"
    "    %%m3 = reduce_window max %%x window=[1,3,3,1] stride=[1,1,1,1] pad_low=[0,1,1,0]"
    " pad_high=[0,1,1,0] dilation=[1,1,1,1] : f32[2,16,16,4]\n"
    "    %%m2 = reduce_window max %%m3 window=[1,2,2,1] stride=[1,2,2,1] pad_low=[0,0,0,0]"
    " pad_high=[0,0,0,0] dilation=[1,1,1,1] : f32[2,8,8,4]\n"
    "    %%s3 = reduce_window sum %%m2 window=[1,3,3,1] stride=[1,2,2,1] pad_low=[0,0,0,0]"
    " pad_high=[0,1,1,0] dilation=[1,1,1,1] : f32[2,4,4,4]\n"
    "    %%n3 = reduce_window min %%x window=[1,3,1,1] stride=[1,2,1,1] pad_low=[0,1,0,0]"
    " pad_high=[0,0,0,0] dilation=[1,1,1,1] : f32[2,8,16,4]\n"
    "    %%d = convolution %%x, %%w stride=[1,1] pad_low=[1,1] pad_high=[1,1] lhs_dilation=[1,1]"
    " rhs_dilation=[1,1] groups=4 : f32[2,16,16,4]\n"
    "    %%e = add %%d, %%c : f32[2,16,16,4]\n"
    "    return %%e \"y\", %%s3 \"pool\", %%n3 \"min\"\n  }\n}\n";

static void test_pool_spatial(void **state) {
  (void)state;
  static const char *const cases[][2] = {
      {"model=2", "{-,model,-,-}"},
      {"model=4", "{-,model,-,-}"},
      {"data=2, model=4", "{data,model,-,-}"},
      {"data=2, model=4", "{-,data,model,-}"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char text[4096], *warn = NULL;
    snprintf(text, sizeof text, pools, cases[i][0], cases[i][1]);
    kdc_module *m = run(text, false, &warn);
    /* every windowed op lines up: halos, no fallback */
    if (strstr(warn, "gathered")) {
      kdc_ir_print_module(stderr, m);
      fail_msg("pools gathered:\n%s\n%s", warn, text);
    }
    assert_true(sh_count(m->funcs[0], KDC_OP_COLLECTIVE_PERMUTE) > 0);
    free(warn);
    kdc_ir_module_destroy(m);
    m = run(text, true, &warn); /* the first result's gradients */
    free(warn);
    kdc_ir_module_destroy(m);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_conv_spatial),
      cmocka_unit_test(test_pool_spatial),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
