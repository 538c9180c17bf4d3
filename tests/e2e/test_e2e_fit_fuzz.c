/*
 * End to end on the checked-in cases of the randomized differential tester
 * for training (tests/reference/fit_fuzz.js; tests/e2e/fit_fuzz_cases/<seed>/
 * holds what `node fit_fuzz.js gen SEED DIR` wrote: a random trainable Keras
 * model (one input, or two: the fit with one --x per input) whose
 * model.json carries the compile_config (loss, optimizer), its initial
 * weights, x.npy (x0.npy, x1.npy) / y.npy, a random layout for mesh 2x4, and the
 * Keras 3 reference training -- 3 epochs, shuffle off, a partial last batch
 * -- with a validation split in some -- as history.json and
 * final.safetensors).  Each case trains through the
 * kdc binary (`kdc compile` + `kdc run --fit --history --save-weights`) on
 * mesh 1 (with the case's --loss/--optimizer/--learning-rate flags when
 * case.json has them, else its compile_config), DataParallel on 8, and its
 * layout.json on 2x4.  Tolerances (tests/reference/README.md, "Training
 * fuzz"): every history entry (loss, per-output <name>_loss, batch_loss
 * and their val_ forms, the same keys as the reference) within 1e-6 +
 * 1e-4 |ref|, every final weight and moving statistic within 1e-4 + 1e-3
 * |ref|.  Several outputs: one --y per output (y0.npy, y1.npy ...).
 * A `noisy` case (random regularisation layers, whose draws are kdc's own)
 * has no reference fit: its plan's prediction from the initial weights
 * must equal expected*.npy (the random layers are identities at
 * inference; 1e-5 + 1e-4 |ref|), and the mesh-1 fit is the reference of
 * the other meshes (history and every F32 tensor of --save-weights,
 * optimizer slots too, same tolerances).  The sanitizer build trains two
 * cases, 41 and 111 (tests/test_sampling.h).
 */
#include <json-c/json.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/io.h"
#include "e2e_fit_case.h"
#include "e2e_util.h"
#include "test_sampling.h"

enum { MAX_CASES = 32 };

static const e2e_case_run runs[] = {
    {"1", true, false, NULL}, {"8", false, false, NULL}, {"2x4", false, true, NULL}};

static void test_fit_fuzz_cases(void **state) {
  (void)state;
  char *root = e2e_src("tests/e2e/fit_fuzz_cases");
  char *names[MAX_CASES];
  /* the sanitizer build checks memory, not numerics: two cases that take
   * every path, 41 (two outputs, random layers: the prediction check and
   * the mesh-1 reference) and 111 (a Sequential) */
  static const char *const sampled[] = {"41", "111"};
  int n = 2;
  if (kdc_test_sampled()) {
    for (int i = 0; i < n; i++) names[i] = strdup(sampled[i]);
  } else {
    n = e2e_case_names("tests/e2e/fit_fuzz_cases", names, MAX_CASES, 0);
  }
  double worst_loss = 0, worst_w = 0;
  for (int c = 0; c < n; c++) {
    char *dir = e2e_join(root, names[c]), *cj = e2e_join(dir, "case.json");
    json_object *desc = json_object_from_file(cj), *v;
    assert_non_null(desc);
    bool noisy = json_object_object_get_ex(desc, "noisy", &v) && json_object_get_boolean(v);
    char *ref_hist = noisy ? e2e_path("ff-self-history.json") : e2e_join(dir, "history.json");
    char *ref_final = noisy ? e2e_path("ff-self-final.safetensors") : e2e_join(dir, "final.safetensors");
    for (size_t k = 0; k < sizeof runs / sizeof runs[0]; k++)
      e2e_fit_case_run(names[c], dir, desc, &runs[k], ref_hist, ref_final, noisy && k == 0, &worst_loss, &worst_w);
    json_object_put(desc);
    free(cj), free(dir), free(names[c]), free(ref_hist), free(ref_final);
  }
  fprintf(stderr, "fit fuzz: %d cases x %zu runs: losses within %.3g x (%g + %g |ref|), weights within %.3g x "
          "(%g + %g |ref|)\n", n, sizeof runs / sizeof runs[0], worst_loss, E2E_FIT_LOSS_ATOL,
          E2E_FIT_LOSS_RTOL, worst_w, E2E_FIT_W_ATOL, E2E_FIT_W_RTOL);
  free(root);
}

/* A two-input case fit with one --x: exit 2, one line naming the plan and
 * the counts, no history written. */
static void test_x_count(void **state) {
  (void)state;
  char *dir = e2e_src("tests/e2e/fit_fuzz_cases/3"), *model = e2e_join(dir, "model.json");
  char *w = e2e_join(dir, "weights.safetensors"), *x0 = e2e_join(dir, "x0.npy"), *y = e2e_join(dir, "y.npy");
  char *plan = e2e_path("ff-xcount.plan"), *hist = e2e_path("ff-xcount.json");
  e2e_result r;
  e2e_kdc(&r, "compile", model, "--weights", w, "--batch", "8", "-o", plan, NULL);
  assert_int_equal(r.status, 0);
  e2e_kdc(&r, "run", plan, "--fit", "--x", x0, "--y", y, "--history", hist, NULL);
  assert_int_equal(r.status, 2);
  assert_int_equal(e2e_lines(r.err), 1);
  assert_non_null(strstr(r.err, plan));
  assert_non_null(strstr(r.err, "the model has 2 inputs but 1 --x were given"));
  assert_false(e2e_exists(hist));
  free(dir), free(model), free(w), free(x0), free(y), free(plan), free(hist);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_fit_fuzz_cases),
      cmocka_unit_test(test_x_count),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
