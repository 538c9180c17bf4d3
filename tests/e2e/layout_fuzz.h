/*
 * tests/e2e/layout_fuzz.h: the random-layout differential tester
 * (docs/testing.md, "The layout fuzzer").  A case is an example model, a
 * mesh of rank 1-4 (sizes 1, 2, 4, 8; at most 8 devices; axis names drawn
 * from a pool, not only data/model) and a Keras ModelParallel layout.json
 * (random layout_map tuples on the weights and on `<layer>/output`, a
 * random batch_dim_name) or none (DataParallel).  It is compiled in process
 * (frontend -> passes) twice, as `kdc compile` builds it without and with
 * --loss (MSE, SGD or Adam): the predict-only module (where partition may
 * cut a weight at load) and the training module; their partitioned
 * predict and the three train_steps run on every device with the SPMD
 * interpreter (ir/interp_spmd.c), against the reference interpreter on the
 * one-device modules.  An example that cannot train (layer_zoo2's
 * RandomRotation) is checked on predict only.
 */
#ifndef KDC_TESTS_E2E_LAYOUT_FUZZ_H
#define KDC_TESTS_E2E_LAYOUT_FUZZ_H

#include <stdbool.h>
#include <stdint.h>

typedef struct lf_case {
  char example[32];  /* examples/<example> */
  char mesh[32];     /* --mesh, e.g. "2x1x4" */
  char axes[160];    /* --axes, e.g. "fsdp,x,tp" */
  int rank;          /* mesh axes */
  char *layout;      /* layout.json text (malloc'd), or NULL: DataParallel */
  char optimizer[8]; /* "sgd" or "adam" */
  uint64_t seed;     /* the seed it was drawn from (0: a checked-in case) */
  bool no_plan;      /* a case file's "plan": false: the SPMD interpreter only */
} lf_case;

typedef enum lf_result {
  LF_OK,       /* predict and every train_step equal one device */
  LF_REFUSED,  /* a located user error (exit 2 class: invalid input / unsupported) */
  LF_INTERNAL, /* an internal error (exit 3 class): a bug */
  LF_MISMATCH, /* ran, but differs from one device beyond tolerance: a bug */
} lf_result;

typedef struct lf_outcome {
  lf_result result;
  char msg[1024];   /* the error, or which value differed and by how much */
  double err_predict, err_fit; /* worst tolerance ratio (> 1: out of tolerance) */
} lf_outcome;

/* The examples the fuzzer draws from (examples/<name>). */
int lf_n_examples(void);
const char *lf_example(int i);

/* Draws case |seed| (deterministic: example seed % n, mesh rank
 * 1 + (seed / n) % 4, the rest from the seed). */
void lf_case_make(uint64_t seed, lf_case *c);
void lf_case_free(lf_case *c);
/* A case as a JSON object {"example", "mesh", "axes", "optimizer",
 * "seed", "layout": {...} or null} (malloc'd), and back (a case file may
 * add "plan": false). */
char *lf_case_json(const lf_case *c);
void lf_case_read(const char *path, lf_case *c);

/* Runs case |c| (see the file comment); fails the calling cmocka test only
 * on a harness problem (missing files), never on the case's own result. */
void lf_check(const lf_case *c, lf_outcome *o);

/* Compiles |c| to CPU plans (predict only, and with train_step when the
 * example trains) and runs them through the runtime (JIT) on the example's
 * first batch: predict, and three train_steps from the plan's own state,
 * against the same one-device references as lf_check.  Returns the worst
 * tolerance ratio; asserts that they compile and run. */
double lf_check_plan(const lf_case *c);

/* Frees the cached one-device references (per example and optimizer). */
void lf_cleanup(void);

#endif
