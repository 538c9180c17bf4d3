/*
 * Helpers for end-to-end tests: run the kdc binary, capture its stderr and
 * exit status, compare .npy arrays with a stated tolerance.
 */
#ifndef KDC_TESTS_E2E_UTIL_H
#define KDC_TESTS_E2E_UTIL_H

#include <stdbool.h>
#include <stddef.h>

#include "common/io.h"

typedef struct e2e_result {
  int status;          /* exit status, or -1 if it did not exit normally */
  char err[4096];      /* stderr (truncated) */
  char out[65536];     /* stdout (truncated) */
} e2e_result;

/* Runs `kdc` with the NULL-terminated argument list (argv[0] excluded). */
void e2e_kdc(e2e_result *r, const char *arg0, ...);
/* Same with a NULL-terminated array. */
void e2e_kdcv(e2e_result *r, const char *const *args);
/* A fresh temporary directory for this test process; paths inside it. */
const char *e2e_tmpdir(void);
char *e2e_path(const char *name); /* malloc'd tmpdir/name */
/* tmpdir/|name| holding |text| (a layout, a model variant); the path (malloc'd). */
char *e2e_write_text(const char *name, const char *text);
char *e2e_src(const char *rel);   /* malloc'd KDC_SOURCE_DIR/rel */
char *e2e_join(const char *dir, const char *name); /* malloc'd dir/name */
bool e2e_exists(const char *path);
/* The entries of KDC_SOURCE_DIR/|rel| (checked-in fuzz cases), sorted by
 * name, at most |cap| (more fails the test), malloc'd into |names|; only
 * the first |keep| when |keep| > 0.  Returns the count (>= 1). */
int e2e_case_names(const char *rel, char **names, int cap, int keep);
/* Lines in |s| (a trailing newline does not start a new line). */
int e2e_lines(const char *s);
/* Max over elements of |a-b| / (atol + rtol*|b|); > 1 means out of tolerance.
 * Shapes must match (else returns 1e30). */
double e2e_npy_compare(const kdc_npy_array *a, const kdc_npy_array *b, double atol, double rtol);
/* The same for two .npy files (each must read). */
double e2e_npy_files_compare(const char *got_path, const char *want_path, double atol,
                             double rtol);
double e2e_f32_compare(const float *a, const float *b, size_t n, double atol, double rtol);
/* `kdc compile |model| --weights |weights| --loss |loss| --optimizer adam
 * --batch |batch| --mesh |mesh|` then `kdc run --fit --x |x| --y |y|
 * --epochs |epochs| --batch-size |batch|`; the epoch losses go to |loss_out|.
 * |weights| NULL: `--random-init --seed 5` instead.
 * Returns NULL, or a malloc'd message (kdc's stderr) when a step fails. */
char *e2e_fit_losses(const char *model, const char *weights, const char *x, const char *y,
                     const char *loss, const char *batch, const char *mesh, int epochs,
                     double *loss_out);
/* 3 epochs of sparse_categorical_crossentropy fit at batch 16
 * (e2e_fit_losses) on 1 device and on 2x4: fails the test unless the loss
 * falls on 1 device and every epoch's losses agree within
 * 1e-5 * |loss on 1 device| + |atol|.  |what| names the case in messages. */
void e2e_fit_equal_1_vs_2x4(const char *what, const char *model, const char *weights,
                            const char *x, const char *y, double atol);

#endif
