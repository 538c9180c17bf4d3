/*
 * SASS in the plan (codegen/ptxas.c, runtime/cuda/host.c; docs/gpu.md "SASS
 * in the plan"), on the host:
 *   - table_v3: the CUDA section's version-3 tail (cubin sm, note, bytes,
 *     the ELF image) decodes, version 2 still decodes (no cubin), and a
 *     corrupt tail is a located error;
 *   - cubin_runs: which GPUs load the cubin (same major, minor >= the
 *     cubin's) and which get the PTX;
 *   - roundtrip (needs ptxas): `kdc compile --target cuda --sm 90` stores
 *     exactly the cubin ptxas makes of the plan's own PTX, and `kdc inspect`
 *     says so;
 *   - no_ptxas: KDC_PTXAS=none gives a PTX-only plan whose section says why
 *     (inspect too);
 *   - ptxas_errors: a ptxas that rejects the PTX, one that writes no cubin
 *     and a KDC_PTXAS that is no program fail the compile with one located
 *     line and leave no plan;
 *   - v2_plan: a plan whose CUDA section is rewritten as version 2 (what
 *     kdc wrote before the cubin) still loads and describes.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cmocka.h>

#include "common/io.h"
#include "e2e/e2e_util.h"
#include "runtime/cuda/host.h"

#ifndef KDC_TEST_PTXAS
#define KDC_TEST_PTXAS ""
#endif

/* A two-kernel launch table of |version| with, for version 3, a cubin tail
 * changed by |bad| (0: valid). */
static void table(kdc_buf *b, uint32_t version, int bad) {
  kdc_buf_init(b);
  kdc_buf_put_u32(b, version);
  kdc_buf_put_u32(b, 90);
  kdc_buf_put_u32(b, 2);
  for (int k = 0; k < 2; k++) {
    char e[16];
    snprintf(e, sizeof e, "kdc_cuda_%d", k);
    kdc_buf_put_str(b, e);
    kdc_buf_put_u64(b, 1000);
    kdc_buf_put_u32(b, 256);
    kdc_buf_put_u32(b, RT_CUDA_FORM_ELEMENT);
    kdc_buf_put_u64(b, 0);
  }
  if (version < 3) return;
  uint8_t elf[128];
  memset(elf, 0x5a, sizeof elf);
  memcpy(elf, bad == 2 ? "MZ\0\0" : "\177ELF", 4);
  kdc_buf_put_u32(b, bad == 1 ? 80 : 90);
  kdc_buf_put_str(b, "ptxas 13.0 (V13.0.88)");
  kdc_buf_put_u64(b, bad == 3 ? 100 : sizeof elf);
  kdc_buf_align(b, 64);
  kdc_buf_put_bytes(b, elf, sizeof elf);
  if (bad == 4) kdc_buf_put_u8(b, 0); /* a trailing byte */
}

static void test_table_v3(void **state) {
  (void)state;
  static const char *const want[] = {NULL, "a cubin for sm_80 in a plan for sm_90",
                                     "the cubin is not an ELF image",
                                     "cubin of 100 bytes, 128 left", "cubin of 128 bytes, 129 left"};
  for (int bad = 0; bad <= 4; bad++) {
    kdc_buf b;
    table(&b, 3, bad);
    kdc_reader r;
    kdc_reader_init(&r, b.data, b.size, "p.bin", "cuda");
    kdc_arena *a = kdc_arena_create();
    rt_cuda_table t;
    kdc_status st = rt_cuda_table_decode(&r, a, 2, &t);
    if (bad == 0) {
      if (st) fail_msg("%s", kdc_status_message(st));
      assert_int_equal(t.version, 3);
      assert_int_equal(t.cubin_sm, 90);
      assert_int_equal(t.cubin_bytes, 128);
      assert_string_equal(t.cubin_note, "ptxas 13.0 (V13.0.88)");
      assert_memory_equal(t.cubin, "\177ELF", 4);
      assert_int_equal(((const uint8_t *)t.cubin - b.data) % 64, 0);
    } else {
      assert_non_null(st);
      const char *m = kdc_status_message(st);
      if (!strstr(m, "p.bin: section cuda: byte") || !strstr(m, want[bad]))
        fail_msg("case %d: %s", bad, m);
    }
    kdc_status_free(st);
    kdc_arena_destroy(a);
    kdc_buf_free(&b);
  }
  kdc_buf b;  /* version 2: no cubin */
  table(&b, 2, 0);
  kdc_reader r;
  kdc_reader_init(&r, b.data, b.size, "p.bin", "cuda");
  kdc_arena *a = kdc_arena_create();
  rt_cuda_table t;
  assert_null(rt_cuda_table_decode(&r, a, 2, &t));
  assert_int_equal(t.version, 2);
  assert_int_equal(t.cubin_bytes, 0);
  assert_int_equal(t.cubin_sm, 0);
  assert_string_equal(t.cubin_note, "");
  kdc_arena_destroy(a);
  kdc_buf_free(&b);
}

static void test_cubin_runs(void **state) {
  (void)state;
  assert_true(rt_cuda_cubin_runs(90, 9, 0));    /* H100, H200 */
  assert_false(rt_cuda_cubin_runs(90, 8, 9));   /* an older GPU: PTX (then refused by sm) */
  assert_false(rt_cuda_cubin_runs(90, 10, 0));  /* Blackwell: the PTX, compiled by the driver */
  assert_true(rt_cuda_cubin_runs(80, 8, 0));    /* A100 */
  assert_true(rt_cuda_cubin_runs(80, 8, 6));    /* same major, later minor */
  assert_false(rt_cuda_cubin_runs(80, 9, 0));
  assert_false(rt_cuda_cubin_runs(0, 9, 0));    /* no cubin */
}

/* The CUDA table of |plan| decoded into |t| (strings in |a|'s copy of the
 * section); the PTX section's text into *|ptx|. */
static void read_table(const char *plan, kdc_arena *a, rt_cuda_table *t, char **ptx,
                       size_t *ptx_len, void **copy) {
  kdc_plan_file *pf = NULL;
  assert_null(kdc_plan_file_open(plan, &pf));
  kdc_reader pr;
  kdc_program prog;
  memset(&prog, 0, sizeof prog);
  assert_null(kdc_plan_file_reader(pf, KDC_PLAN_SECTION_PROGRAM, &pr));
  assert_null(kdc_prog_decode_mesh(&pr, a, &prog));
  const void *data;
  size_t size;
  if (kdc_plan_file_find(pf, KDC_PLAN_SECTION_WEIGHTS, &data, &size)) {
    kdc_reader wr;
    kdc_reader_init(&wr, data, size, plan, "weights");
    assert_null(kdc_prog_decode_weights(&wr, a, &prog));
  }
  assert_null(kdc_prog_decode(&pr, a, &prog));
  assert_true(kdc_plan_file_find(pf, KDC_PLAN_SECTION_CUDA, &data, &size));
  *copy = kdc_arena_alloc(a, size + 64); /* outlives the file; 64-aligned like the file's */
  memcpy(*copy, data, size);
  kdc_reader cr;
  kdc_reader_init(&cr, *copy, size, plan, "cuda");
  kdc_status st = rt_cuda_table_decode(&cr, a, prog.n_kernels, t);
  if (st) fail_msg("%s", kdc_status_message(st));
  assert_true(kdc_plan_file_find(pf, KDC_PLAN_SECTION_PTX, &data, &size));
  *ptx = kdc_xmalloc(size + 1);
  memcpy(*ptx, data, size);
  (*ptx)[size] = 0;
  *ptx_len = size;
  kdc_plan_file_close(pf);
}

static char *compile(const char *name, const char *ptxas, e2e_result *r) {
  char *model = e2e_src("examples/mnist_mlp/model.json"), *plan = e2e_path(name);
  if (ptxas) setenv("KDC_PTXAS", ptxas, 1);
  e2e_kdc(r, "compile", model, "-o", plan, "--target", "cuda", "--sm", "90", "--batch", "8", NULL);
  unsetenv("KDC_PTXAS");
  free(model);
  return plan;
}

/* A plan compiled by compile() with |ptxas|, its table and PTX read back. */
typedef struct compiled {
  char *plan, *ptx;
  size_t ptx_len;
  void *copy;
  kdc_arena *a;
  rt_cuda_table t;
} compiled;

static void compile_read(const char *name, const char *ptxas, compiled *c) {
  e2e_result r;
  c->plan = compile(name, ptxas, &r);
  if (r.status != 0) fail_msg("compile: %s", r.err);
  c->a = kdc_arena_create();
  read_table(c->plan, c->a, &c->t, &c->ptx, &c->ptx_len, &c->copy);
  assert_int_equal(c->t.version, 3);
}

static void compiled_free(compiled *c) {
  free(c->plan), free(c->ptx);
  kdc_arena_destroy(c->a);
}

static void test_roundtrip(void **state) {
  (void)state;
  if (!*KDC_TEST_PTXAS) {
    printf("skipped: no ptxas at build time\n");
    skip();
  }
  compiled c;
  compile_read("rt.plan", KDC_TEST_PTXAS, &c);
  const rt_cuda_table t = c.t;
  assert_int_equal(t.cubin_sm, 90);
  assert_non_null(strstr(t.cubin_note, "ptxas "));
  /* ptxas run here on the plan's own PTX makes the same bytes */
  char *in = e2e_write_text("rt.ptx", c.ptx), *out = e2e_path("rt.cubin"), cmd[3000];
  snprintf(cmd, sizeof cmd, "'%s' -arch=sm_90 -o '%s' '%s'", KDC_TEST_PTXAS, out, in);
  assert_int_equal(system(cmd), 0);
  size_t n;
  void *want;
  assert_null(kdc_file_read_all(out, &want, &n));
  assert_int_equal(t.cubin_bytes, n);
  assert_memory_equal(t.cubin, want, n);
  e2e_result r;
  e2e_kdc(&r, "inspect", c.plan, NULL);
  assert_int_equal(r.status, 0);
  char line[200];
  snprintf(line, sizeof line, "cuda: sm_90: cubin %zu bytes (ptxas ", n);
  if (!strstr(r.out, line)) fail_msg("inspect: no \"%s\" in\n%s", line, r.out);
  free(want), free(in), free(out);
  compiled_free(&c);
}

static void test_no_ptxas(void **state) {
  (void)state;
  compiled c;
  compile_read("none.plan", "none", &c);
  const rt_cuda_table t = c.t;
  assert_int_equal(t.cubin_bytes, 0);
  assert_int_equal(t.cubin_sm, 0);
  assert_string_equal(t.cubin_note, "KDC_PTXAS=none at compile time");
  assert_non_null(strstr(c.ptx, ".target sm_90"));
  e2e_result r;
  e2e_kdc(&r, "inspect", c.plan, NULL);
  assert_int_equal(r.status, 0);
  if (!strstr(r.out, "cuda: sm_90: PTX only") || !strstr(r.out, "KDC_PTXAS=none at compile time"))
    fail_msg("inspect:\n%s", r.out);
  compiled_free(&c);
}

static char *script(const char *name, const char *text) {
  char *p = e2e_write_text(name, text);
  assert_int_equal(chmod(p, 0755), 0);
  return p;
}

static void test_ptxas_errors(void **state) {
  (void)state;
  /* ptxas's own message form: "ptxas FILE, line N; error   : ..." */
  char *bad = script("bad_ptxas.sh", "#!/bin/sh\nfor a; do f=$a; done\n"
                     "echo \"ptxas $f, line 7; error   : Unknown symbol 'kdc_x'\" >&2\n"
                     "echo \"ptxas fatal   : Ptx assembly aborted due to errors\" >&2\nexit 255\n");
  char *silent = script("silent_ptxas.sh", "#!/bin/sh\nexit 0\n");
  e2e_result r;
  char *plan = compile("bad.plan", bad, &r);
  assert_int_equal(r.status, 3);
  assert_int_equal(e2e_lines(r.err), 1);
  if (!strstr(r.err, "kdc: error: codegen: --target cuda: ") ||
      !strstr(r.err, "-arch=sm_90 rejected the plan's PTX (exit 255): ptxas PTX, line 7; error   : "
                     "Unknown symbol 'kdc_x'"))
    fail_msg("%s", r.err);
  assert_false(e2e_exists(plan));
  free(plan);
  plan = compile("silent.plan", silent, &r);
  assert_int_equal(r.status, 3);
  if (!strstr(r.err, "-arch=sm_90 wrote no ELF cubin (0 bytes)")) fail_msg("%s", r.err);
  assert_false(e2e_exists(plan));
  free(plan);
  plan = compile("missing.plan", "/nonexistent/ptxas", &r);
  assert_int_equal(r.status, 2);
  if (!strstr(r.err, "KDC_PTXAS=/nonexistent/ptxas: not an executable file")) fail_msg("%s", r.err);
  assert_false(e2e_exists(plan));
  free(plan), free(bad), free(silent);
}

/* A version-2 plan: every section copied, the CUDA section cut before the
 * cubin tail and its version set to 2. */
static void test_v2_plan(void **state) {
  (void)state;
  e2e_result r;
  char *plan = compile("v3.plan", "none", &r), *v2 = e2e_path("v2.plan");
  if (r.status != 0) fail_msg("compile: %s", r.err);
  kdc_plan_file *pf = NULL;
  assert_null(kdc_plan_file_open(plan, &pf));
  kdc_plan_writer *w = kdc_plan_writer_create();
  kdc_plan_writer_set_flags(w, kdc_plan_file_flags(pf));
  for (size_t i = 0; i < kdc_plan_file_count(pf); i++) {
    kdc_plan_section_info si = kdc_plan_file_info(pf, i);
    if (si.kind != KDC_PLAN_SECTION_CUDA) {
      assert_null(kdc_plan_writer_add(w, si.kind, si.name, si.data, si.size));
      continue;
    }
    /* the v3 tail: u32 cubin sm, str note (u32 length, text), u64 0, padding */
    const char *note = "KDC_PTXAS=none at compile time";
    const char *at = memmem(si.data, si.size, note, strlen(note));
    assert_non_null(at);
    size_t cut = (size_t)(at - (const char *)si.data) - 8;
    uint8_t *d = kdc_xmalloc(cut);
    memcpy(d, si.data, cut);
    d[0] = 2, d[1] = d[2] = d[3] = 0;
    assert_null(kdc_plan_writer_add(w, si.kind, si.name, d, cut));
    free(d);
  }
  assert_null(kdc_plan_writer_write(w, v2));
  kdc_plan_writer_destroy(w);
  kdc_plan_file_close(pf);
  e2e_kdc(&r, "inspect", v2, NULL);
  assert_int_equal(r.status, 0);
  if (!strstr(r.out, "cuda: sm_90: PTX only") || !strstr(r.out, "a version-2 plan"))
    fail_msg("inspect:\n%s%s", r.out, r.err);
  e2e_kdc(&r, "inspect", v2, "--ptx", NULL);
  assert_int_equal(r.status, 0);
  assert_non_null(strstr(r.out, ".entry kdc_cuda_0"));
  free(plan), free(v2);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_table_v3),    cmocka_unit_test(test_cubin_runs),
      cmocka_unit_test(test_roundtrip),   cmocka_unit_test(test_no_ptxas),
      cmocka_unit_test(test_ptxas_errors), cmocka_unit_test(test_v2_plan),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
