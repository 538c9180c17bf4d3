/*
 * The IR walks at depth (issue 17, "Depth"): a function of 1,000,000 nodes
 * whose every value feeds the next (a chain as deep as it is long) goes
 * through parse -> verify -> print -> parse -> print with the two printed
 * texts equal to the canonical text the test wrote, and through the
 * reference interpreter, whose outputs equal the same chain computed here.
 * Parser, printer, verifier and interpreter walk nodes in id order (no
 * recursion over operands), so this takes about a second; the CPU time is
 * bounded at 60 s, which a walk quadratic in the node count would exceed
 * by far.  Under the sanitizers the function has 20,000 nodes (a note is
 * printed): their node-move check (ir/module.c) copies the whole node array
 * every 64th append, quadratic by design.  The Release suite runs the full
 * size.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <time.h>

#include <cmocka.h>

#include "ir/ir.h"

#ifdef KDC_SANITIZE_BUILD
enum { NODES = 20000 };  /* KDC_CHECK_NODE_MOVES moves the node array every 64th append */
#else
enum { NODES = 1000000 };
#endif

/* Node i >= 1 of the chain over f32[4] (%0 is the input): tanh of the
 * previous value, or the sum of the two previous values every third node. */
static bool is_add(int i) { return i >= 2 && i % 3 == 2; }

/* The canonical text (what the printer writes), malloc'd. */
static char *chain_text(void) {
  size_t cap = (size_t)NODES * 48 + 256, n = 0;
  char *s = malloc(cap);
  assert_non_null(s);
  n += (size_t)snprintf(s + n, cap - n, "module @deep {\n  func @f {\n"
                                        "    %%0 = parameter 0 input \"x\" : f32[4]\n");
  for (int i = 1; i < NODES; i++) {
    if (is_add(i))
      n += (size_t)snprintf(s + n, cap - n, "    %%%d = add %%%d, %%%d : f32[4]\n", i, i - 1, i - 2);
    else n += (size_t)snprintf(s + n, cap - n, "    %%%d = tanh %%%d : f32[4]\n", i, i - 1);
  }
  n += (size_t)snprintf(s + n, cap - n, "    return %%%d \"y\"\n  }\n}\n", NODES - 1);
  assert_true(n < cap);
  return s;
}

static double cpu_s(void) { return (double)clock() / CLOCKS_PER_SEC; }

static kdc_module *parse(const char *text) {
  kdc_module *m = NULL;
  kdc_status st = kdc_ir_parse_module(text, "deep.kir", &m);
  if (st) fail_msg("parse: %s", kdc_status_message(st));
  return m;
}

static void test_million_node_round_trip(void **state) {
  (void)state;
#ifdef KDC_SANITIZE_BUILD
  print_message("note: sanitizer build: %d nodes (Release: 1,000,000)\n", NODES);
#endif
  char *text = chain_text();
  double t0 = cpu_s();
  kdc_module *m = parse(text);
  assert_int_equal(m->funcs[0]->n_nodes, NODES);
  kdc_status st = kdc_ir_verify_module(m);
  if (st) fail_msg("verify: %s", kdc_status_message(st));
  char *p1 = kdc_ir_module_to_string(m);
  kdc_ir_module_destroy(m);  /* one module at a time: ~0.5 GB each */
  kdc_module *m2 = parse(p1);
  char *p2 = kdc_ir_module_to_string(m2);
  double t_text = cpu_s() - t0;
  if (strcmp(p1, text)) fail_msg("print(parse(text)) is not the canonical text");
  if (strcmp(p2, p1)) fail_msg("print(parse(print(parse(text)))) differs");

  /* the interpreter over the parsed function, against the chain in double */
  const float x[4] = {-2.0f, -0.25f, 0.5f, 3.0f};
  int64_t d4 = 4;
  kdc_tensor arg = {kdc_type_make(KDC_DTYPE_F32, 1, &d4), (void *)x}, out;
  t0 = cpu_s();
  if ((st = kdc_ir_interpret(m2->funcs[0], &arg, 1, &out)))
    fail_msg("interpret: %s", kdc_status_message(st));
  double t_interp = cpu_s() - t0;
  for (int e = 0; e < 4; e++) {
    double a = x[e], b = 0;  /* a: value i-1, b: value i-2 */
    for (int i = 1; i < NODES; i++) {
      double v = is_add(i) ? a + b : tanh(a);
      b = a, a = v;
    }
    float got = ((const float *)out.data)[e];
    /* x -> tanh -> tanh + previous ... settles on a fixed point; f32
     * rounding does not accumulate along a contracting chain */
    if (fabs(got - a) > 1e-5 * fmax(1.0, fabs(a)))
      fail_msg("element %d: interpreter %.9g, double chain %.9g", e, (double)got, a);
  }
  free(out.data);
  print_message("%d nodes: parse+verify+print+parse+print %.2f s CPU, interpret %.2f s CPU\n",
                NODES, t_text, t_interp);
  assert_true(t_text < 60 && t_interp < 60);
  free(p2), free(p1), free(text);
  kdc_ir_module_destroy(m2);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_million_node_round_trip),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
