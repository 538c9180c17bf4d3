/*
 * Helpers of the training end-to-end tests (test_e2e_fit.c,
 * test_e2e_fit_layers.c): train a plan through the runtime's fit loop,
 * gather the final state, compare two runs, count train_step collectives.
 * They fail the calling cmocka test on any error.
 */
#ifndef KDC_TESTS_E2E_FIT_UTIL_H
#define KDC_TESTS_E2E_FIT_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ir/ir.h"
#include "runtime/runtime.h"

enum { E2E_MAX_STATE = 64 };

/* A finished run: history and the final state, gathered (global arrays). */
typedef struct e2e_run {
  kdc_rt_history h;
  size_t n_state;
  float *state[E2E_MAX_STATE];
  uint64_t bytes[E2E_MAX_STATE];
  char *names[E2E_MAX_STATE];
} e2e_run;

/* |plan| loaded (replica check on: every replica of the state agrees
 * bitwise) once per test process: a plan file whose path and checksum
 * match an earlier load is that load again (one more reference; release
 * it as usual), so the cases of a test that train the same plan
 * JIT-compile it once.  A plan rewritten with other contents is loaded
 * anew. */
kdc_rt_plan *e2e_plan_load(const char *plan);

void e2e_run_collect(kdc_rt_train *t, e2e_run *r);
void e2e_run_free(e2e_run *r);

/* Trains |plan| (replica check on) on |rows| rows of |arrays| (model input,
 * labels) for |epochs| with |val_split| in steps of |batch_size| rows (0:
 * the plan's batch), from checkpoint |init| when not NULL; saves to |save|
 * when not NULL. */
void e2e_fit(const char *plan, const void *const *arrays, int64_t rows, double val_split,
             int64_t batch_size, int epochs, const char *init, const char *save, e2e_run *r);

/* `kdc compile |model| --weights |weights| --batch |batch| --loss
 * categorical_crossentropy --optimizer |opt| [--learning-rate |lr|] -o
 * TMP/|name|` plus --mesh/--axes/--layout when not NULL; must succeed.
 * Returns the plan's path (malloc'd). */
char *e2e_compile_cce(const char *name, const char *model, const char *weights, const char *batch,
                      const char *opt, const char *lr, const char *mesh, const char *axes,
                      const char *layout);
/* The same with one more kdc compile flag |flag| (e.g. "--no-shard-update")
 * when not NULL. */
char *e2e_compile_cce_flag(const char *name, const char *model, const char *weights,
                           const char *batch, const char *opt, const char *lr, const char *mesh,
                           const char *axes, const char *layout, const char *flag);

/* TMP/|name|: the Keras model file |src| (a JSON object) with
 * "compile_config": {|cc|} spliced in as its first member (|cc| is JSON
 * object members).  Returns the path (malloc'd). */
char *e2e_with_compile_config(const char *src, const char *name, const char *cc);

/* Numbers of the JSON array |key| ("KEY": [...]) in |text| (at most
 * |cap|); the count, -1 when |key| is absent. */
int e2e_json_numbers(const char *text, const char *key, double *out, int cap);

/* |a - b| / (1 + |b|) */
double e2e_rel(double a, double b);

/* |got| (which started at epoch |epoch0| of |want|) against |want|: batch,
 * epoch and validation losses (and per-output losses), and the final state (names, values; the
 * iterations bitwise) when both ended at the same step; every relative
 * difference (e2e_rel) <= |tol|. */
void e2e_same_run(const e2e_run *got, const e2e_run *want, int epoch0, double tol,
                  const char *what);

/* Collective steps of |func| of |plan|: of kind |kind| (-1 any), over mesh
 * axis |axis| (NULL any), with results of at most 4 bytes when |scalar|,
 * more otherwise. */
int e2e_count_colls(const char *plan, const char *func, int kind, const char *axis, bool scalar);

/* One train_step of |plan| on model input |x|, labels |y| and |mask|
 * (bound by name: data input 0 is the model input) against the
 * interpreter's train_step results |out| of |f| (state k = result k, same
 * names; integers bitwise; the loss last): relative 1e-5.  Frees |out|. */
void e2e_step_vs_interpreter(const char *plan, const void *x, const void *y, const void *mask,
                             const kdc_func *f, kdc_tensor *out, const char *what);

/* `kdc run --fit --history |hist| --save-weights |final|` against a
 * reference run (|ref_hist|, |ref_final|): |epochs| epoch losses and
 * |epochs| x |steps| batch losses within 1e-4 relative, the |n| tensors
 * |names| within 1e-5 + 1e-4 |ref|.  |what| labels the messages. */
void e2e_check_reference(const char *hist, const char *ref_hist, const char *final,
                         const char *ref_final, const char *const *names, int n, int epochs,
                         int steps, const char *what);

#endif
