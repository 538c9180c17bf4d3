/*
 * A training case of the reference generators (tests/reference/fit_fuzz.js,
 * real_fit.js) trained through the kdc binary and compared with the
 * reference: `kdc compile` + `kdc run --fit --history --save-weights` on one
 * mesh, every history entry within E2E_FIT_LOSS_ATOL + E2E_FIT_LOSS_RTOL
 * |ref| and every reference tensor within E2E_FIT_W_ATOL + E2E_FIT_W_RTOL
 * |ref| (tests/reference/README.md, "Training fuzz").  Used by
 * test_e2e_fit_fuzz.c and test_e2e_real_fit.c; fails the calling cmocka test.
 *
 * A case directory holds model.json, weights.safetensors, x.npy (x0.npy
 * ...), y.npy (y0.npy ...), layout.json, history.json, final.safetensors and
 * case.json: {n_in, n_out, batch, epochs, validation_split, noisy, cli (the
 * kdc compile flags of a `cli` run, or null), compile_args (flags of every
 * run, optional)}.
 */
#ifndef KDC_TESTS_E2E_FIT_CASE_H
#define KDC_TESTS_E2E_FIT_CASE_H

#include <json-c/json.h>
#include <stdbool.h>

#define E2E_FIT_LOSS_ATOL 1e-6
#define E2E_FIT_LOSS_RTOL 1e-4
#define E2E_FIT_W_ATOL 1e-4
#define E2E_FIT_W_RTOL 1e-3

typedef struct e2e_case_run {
  const char *mesh;
  bool cli;    /* the case's kdc compile flags instead of its compile_config */
  bool layout; /* the case's layout.json */
  const char *axes; /* --axes, or NULL */
} e2e_case_run;

/* One run of the case in |dir| (|name| labels messages; |desc| its
 * case.json): compile, fit, compare with |ref_hist| / |ref_final|.  A
 * reference tensor is found in --save-weights by its name, or else by the
 * one Keras 3 path its tfjs name stands for (e2e_tfjs_name_matches).  A
 * noisy case's first run (|first_noisy|) has no reference: its plan must
 * predict the case's expected*.npy, and its history and weights are written
 * to |ref_hist|, |ref_final| for the next runs.  The worst errors, in
 * tolerances, are maxed into |worst_loss| and |worst_w|. */
void e2e_fit_case_run(const char *name, const char *dir, json_object *desc, const e2e_case_run *run,
                      const char *ref_hist, const char *ref_final, bool first_noisy, double *worst_loss,
                      double *worst_w);

/* Whether tfjs weight name |tfjs| (`lstm_1/kernel`) stands for the Keras 3
 * variable path |path| (`sequential/lstm_1/lstm_cell/kernel`): its
 * components appear in order as whole components of |path|, the last one
 * ending it (tests/reference/real_diff.js layoutKey). */
bool e2e_tfjs_name_matches(const char *tfjs, const char *path);

#endif
