/*
 * The pass manager: pipeline order, dump files, print-after-all, errors for
 * unknown passes and for passes that break the IR; and the rebuild helper
 * every rewriting pass uses.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "passes/passes.h"

/* x -> exp -> neg, plus a dead log. */
static kdc_module *small_module(void) {
  kdc_module *m = kdc_ir_module_create("t");
  kdc_func *f = kdc_ir_func_create(m, "predict");
  int64_t d[2] = {2, 3};
  kdc_type t = kdc_type_make(KDC_DTYPE_F32, 2, d);
  kdc_value_id x = kdc_ir_parameter(f, KDC_PARAM_INPUT, "x", &t);
  kdc_value_id e = kdc_ir_unary(f, KDC_OP_EXP, x);
  kdc_ir_unary(f, KDC_OP_LOG, x);
  kdc_ir_add_result(f, kdc_ir_unary(f, KDC_OP_NEG, e), "y");
  return m;
}

static void test_dump_dir(void **state) {
  (void)state;
  char dir[] = "/tmp/kdc_dump_XXXXXX";
  assert_non_null(mkdtemp(dir));
  kdc_module *m = small_module();
  kdc_pass_options opt = {0};
  opt.dump_dir = dir;
  assert_null(kdc_pass_pipeline_run(m, &opt));
  static const char *const files[] = {"00-input",          "01-verify",
                                      "02-infer_shapes",   "03-build_training",
                                      "04-simplify",       "05-widen_dots",
                                      "06-seed_shardings", "07-propagate_shardings",
                                      "08-partition",      "09-drop_trivial_collectives",
                                      "10-combine_collectives", "11-conv_to_gemm",
                                      "12-fuse",           "13-plan_memory"};
  char path[256];
  for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
    snprintf(path, sizeof path, "%s/%s.kir", dir, files[i]);
    FILE *fp = fopen(path, "r");
    if (!fp) fail_msg("missing %s", path);
    char buf[4096];
    size_t k = fread(buf, 1, sizeof buf - 1, fp);
    buf[k] = '\0';
    fclose(fp);
    assert_non_null(strstr(buf, "func @predict"));
    assert_true((strstr(buf, "log") != NULL) == (i < 4)); /* simplify deletes it */
    assert_true((strstr(buf, "group=") != NULL) == (i >= 12)); /* fuse is 12 */
    unlink(path);
  }
  assert_int_equal(rmdir(dir), 0);
  kdc_ir_module_destroy(m);
}

static void test_print_after_all(void **state) {
  (void)state;
  char *text = NULL;
  size_t len = 0;
  FILE *out = open_memstream(&text, &len);
  kdc_module *m = small_module();
  kdc_pass_options opt = {0};
  opt.print_after_all = out;
  assert_null(kdc_pass_run_list(m, "dce,fuse", &opt));
  fclose(out);
  const char *a = strstr(text, "# -- after input --");
  const char *b = strstr(text, "# -- after dce --");
  const char *c = strstr(text, "# -- after fuse --");
  assert_true(a && b && c && a < b && b < c);
  free(text);
  kdc_ir_module_destroy(m);
}

static void test_unknown_pass(void **state) {
  (void)state;
  kdc_module *m = small_module();
  kdc_status st = kdc_pass_run_list(m, "dce,frobnicate", NULL);
  assert_int_equal(kdc_status_code(st), KDC_INVALID_INPUT);
  assert_non_null(strstr(kdc_status_message(st), "unknown pass 'frobnicate'"));
  assert_non_null(strstr(kdc_status_message(st), "simplify"));
  kdc_status_free(st);
  kdc_ir_module_destroy(m);
}

/* A pass that puts a parameter in a kernel: the verifier catches it. */
static kdc_status break_ir(kdc_module *m, const kdc_pass_options *opt) {
  (void)opt;
  m->funcs[0]->nodes[0].group = 0;
  return NULL;
}

static void test_broken_pass_is_internal(void **state) {
  (void)state;
  kdc_module *m = small_module();
  kdc_pass bad = {"breaker", break_ir};
  kdc_status st = kdc_pass_run_passes(m, &bad, 1, NULL);
  assert_int_equal(kdc_status_code(st), KDC_INTERNAL);
  assert_non_null(strstr(kdc_status_message(st), "pass breaker"));
  kdc_status_free(st);
  kdc_ir_module_destroy(m);
}

/* Rebuild: replace, drop and reorder; ids stay compact and operands follow. */
static void test_rebuild(void **state) {
  (void)state;
  kdc_module *m = kdc_ir_module_create("t");
  kdc_func *f = kdc_ir_func_create(m, "f");
  int64_t d[1] = {3};
  kdc_type t = kdc_type_make(KDC_DTYPE_F32, 1, d);
  kdc_value_id x = kdc_ir_parameter(f, KDC_PARAM_INPUT, "x", &t);   /* 0 */
  kdc_value_id a = kdc_ir_unary(f, KDC_OP_EXP, x);                    /* 1 */
  kdc_value_id b = kdc_ir_unary(f, KDC_OP_EXP, x);                    /* 2: same as a */
  kdc_value_id c = kdc_ir_unary(f, KDC_OP_NEG, x);                    /* 3 */
  kdc_value_id s = kdc_ir_binary(f, KDC_OP_ADD, b, c);                /* 4 */
  kdc_ir_add_result(f, s, "s");
  kdc_ir_add_result(f, b, "b");
  kdc_value_id repl[5] = {0, 1, a, 3, 4};
  kdc_value_id order[4] = {x, c, a, s}; /* c moves before a */
  kdc_pass_func_rebuild(f, repl, order, 4);
  assert_int_equal(f->n_nodes, 4);
  assert_int_equal(f->nodes[1].op, KDC_OP_NEG);
  assert_int_equal(f->nodes[2].op, KDC_OP_EXP);
  assert_int_equal(f->nodes[3].in[0], 2);
  assert_int_equal(f->nodes[3].in[1], 1);
  assert_int_equal(f->results[0], 3);
  assert_int_equal(f->results[1], 2);
  assert_int_equal(f->params[0], 0);
  assert_null(kdc_ir_verify(f));
  kdc_ir_module_destroy(m);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_dump_dir),        cmocka_unit_test(test_print_after_all),
      cmocka_unit_test(test_unknown_pass),    cmocka_unit_test(test_broken_pass_is_internal),
      cmocka_unit_test(test_rebuild),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
