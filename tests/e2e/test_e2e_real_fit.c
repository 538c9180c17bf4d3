/*
 * Training of real model files against TensorFlow.js: the checked-in subset
 * of tests/reference/real_fit.js.  tests/e2e/real_fit_cases/<model>/ holds
 * what `real_fit.js --write` wrote for one file of tests/frontend/data/real2,
 * real3 or ../shared/real-json (tests/reference/gen_real_fit.sh; kdc plays
 * no part): the model file with its random layers switched off (and, for
 * SGD with momentum, a compile_config), seeded tfjs-named weights, 20 rows
 * of inputs and labels, a ModelParallel layout for 2x4, and tfjs' Keras 3
 * fit -- 3 epochs of batches of 8, 8 and 4 rows, shuffle off -- as
 * history.json and final.safetensors (tfjs weight names, matched to kdc's
 * Keras 3 paths by e2e_tfjs_name_matches).  Each case trains through the
 * kdc binary (with its --loss/--optimizer/--learning-rate flags, or its
 * compile_config) on mesh 1, 2x4 DataParallel and 2x4 with its layout
 * (axes data,model); every history entry within 1e-6 + 1e-4 |ref| and
 * every final weight within 1e-4 + 1e-3 |ref| (e2e_fit_case.h; the
 * tolerances are explained in tests/reference/README.md, "Training
 * fuzz").  The sanitizer build (tests/test_sampling.h) trains one case on
 * mesh 1 and the ModelParallel 2x4.
 */
#include <json-c/json.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "e2e_fit_case.h"
#include "e2e_util.h"
#include "test_sampling.h"

enum { MAX_CASES = 16 };

/* (cli: case.json's `cli` flags, when not null, in every run) */
static const e2e_case_run runs[] = {
    {"1", true, false, NULL}, {"2x4", true, false, NULL}, {"2x4", true, true, "data,model"}};

static void test_real_fit_cases(void **state) {
  (void)state;
  char *root = e2e_src("tests/e2e/real_fit_cases");
  char *names[MAX_CASES];
  bool sampled = kdc_test_sampled();
  /* sanitizers: the first case (in name order) only */
  int n = e2e_case_names("tests/e2e/real_fit_cases", names, MAX_CASES, sampled ? 1 : 0);
  double worst_loss = 0, worst_w = 0;
  int n_runs = 0;
  for (int c = 0; c < n; c++) {
    char *dir = e2e_join(root, names[c]), *cj = e2e_join(dir, "case.json");
    json_object *desc = json_object_from_file(cj);
    assert_non_null(desc);
    for (size_t k = 0; k < sizeof runs / sizeof runs[0]; k++) {
      if (sampled && k == 1) continue;
      char *hist = e2e_join(dir, "history.json"), *final = e2e_join(dir, "final.safetensors");
      e2e_fit_case_run(names[c], dir, desc, &runs[k], hist, final, false, &worst_loss, &worst_w);
      free(hist), free(final);
      n_runs++;
    }
    json_object_put(desc);
    free(cj), free(dir), free(names[c]);
  }
  fprintf(stderr,
          "real fit: %d runs: losses within %.3g x (%g + %g |ref|), weights within %.3g x (%g + %g |ref|)\n",
          n_runs, worst_loss, E2E_FIT_LOSS_ATOL, E2E_FIT_LOSS_RTOL, worst_w, E2E_FIT_W_ATOL, E2E_FIT_W_RTOL);
  free(root);
}

/* The name rule that binds tfjs' weight names to Keras 3 paths. */
static void test_name_matches(void **state) {
  (void)state;
  assert_true(e2e_tfjs_name_matches("lstm_1/kernel", "sequential/lstm_1/lstm_cell/kernel"));
  assert_true(e2e_tfjs_name_matches("dense/bias", "dense/bias"));
  assert_true(e2e_tfjs_name_matches("bi/forward_lstm/kernel", "m/bi/forward_lstm/lstm_cell/kernel"));
  assert_false(e2e_tfjs_name_matches("lstm_1/kernel", "sequential/lstm_1/lstm_cell/recurrent_kernel"));
  assert_false(e2e_tfjs_name_matches("lstm_1/kernel", "sequential/lstm_11/lstm_cell/kernel"));
  assert_false(e2e_tfjs_name_matches("a/b/kernel", "b/a/kernel"));
  assert_false(e2e_tfjs_name_matches("dense/kernel", "kernel"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_name_matches),
      cmocka_unit_test(test_real_fit_cases),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
