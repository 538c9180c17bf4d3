/* End-to-end test helpers (see e2e_util.h). */
#define _DEFAULT_SOURCE /* on_exit, nftw's FTW_PHYS */
#include "e2e_util.h"

#include <ftw.h>

#include <dirent.h>
#include <fcntl.h>
#include <math.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <setjmp.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

extern char **environ;

static void slurp(const char *path, char *buf, size_t n) {
  buf[0] = 0;
  FILE *f = fopen(path, "rb");
  if (!f) return;
  size_t k = fread(buf, 1, n - 1, f);
  buf[k] = 0;
  fclose(f);
}

void e2e_kdc(e2e_result *r, const char *arg0, ...) {
  const char *args[64];
  int n = 0;
  va_list ap;
  va_start(ap, arg0);
  for (const char *a = arg0; a && n < 63; a = va_arg(ap, const char *)) args[n++] = a;
  va_end(ap);
  args[n] = NULL;
  e2e_kdcv(r, args);
}

void e2e_kdcv(e2e_result *r, const char *const *args) {
  const char *argv[64];
  int n = 0;
  argv[n++] = KDC_BINARY_DIR "/tools/kdc";
  for (int i = 0; args[i] && n < 63; i++) argv[n++] = args[i];
  argv[n] = NULL;
  char *errp = e2e_path("stderr.txt"), *outp = e2e_path("stdout.txt");
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 2, errp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&fa, 1, outp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  pid_t pid;
  r->status = -1;
  if (posix_spawn(&pid, argv[0], &fa, NULL, (char *const *)argv, environ) == 0) {
    int ws;
    if (waitpid(pid, &ws, 0) == pid && WIFEXITED(ws)) r->status = WEXITSTATUS(ws);
  }
  posix_spawn_file_actions_destroy(&fa);
  slurp(errp, r->err, sizeof r->err);
  slurp(outp, r->out, sizeof r->out);
  free(errp);
  free(outp);
}

static char tmp_dir[256];
static pid_t tmp_owner;

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
  (void)st, (void)flag, (void)ftw;
  return remove(path) == 0 ? 0 : -1;
}

/* Runs at exit with the test's status: a passing test leaves nothing in
 * TMPDIR; a failing one (or KDC_TEST_KEEP_TMP=1) keeps its files and says
 * where, so the plans and outputs of the failure can be looked at. */
static void tmpdir_at_exit(int status, void *arg) {
  (void)arg;
  if (getpid() != tmp_owner) return;
  const char *keep = getenv("KDC_TEST_KEEP_TMP");
  if (status != 0 || (keep && *keep && strcmp(keep, "0") != 0)) {
    fprintf(stderr, "e2e: kept %s\n", tmp_dir);
    return;
  }
  if (nftw(tmp_dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS) != 0)
    fprintf(stderr, "e2e: could not remove all of %s\n", tmp_dir);
}

const char *e2e_tmpdir(void) {
  if (!tmp_dir[0]) {
    const char *base = getenv("TMPDIR");
    snprintf(tmp_dir, sizeof tmp_dir, "%s/kdc-e2e-XXXXXX", base && *base ? base : "/tmp");
    if (!mkdtemp(tmp_dir)) abort();
    tmp_owner = getpid();
    if (on_exit(tmpdir_at_exit, NULL) != 0) abort();
  }
  return tmp_dir;
}

char *e2e_path(const char *name) {
  char *p = NULL;
  if (asprintf(&p, "%s/%s", e2e_tmpdir(), name) < 0) abort();
  return p;
}

char *e2e_write_text(const char *name, const char *text) {
  char *p = e2e_path(name);
  FILE *f = fopen(p, "w");
  assert_non_null(f);
  fputs(text, f);
  assert_int_equal(fclose(f), 0);
  return p;
}

char *e2e_src(const char *rel) {
  char *p = NULL;
  if (asprintf(&p, "%s/%s", KDC_SOURCE_DIR, rel) < 0) abort();
  return p;
}

bool e2e_exists(const char *path) {
  struct stat s;
  return stat(path, &s) == 0;
}

int e2e_lines(const char *s) {
  int n = 0;
  for (const char *p = s; *p; p++)
    if (*p == '\n' && p[1]) n++;
  return *s ? n + 1 : 0;
}

double e2e_f32_compare(const float *a, const float *b, size_t n, double atol, double rtol) {
  double worst = 0;
  for (size_t i = 0; i < n; i++) {
    double d = fabs((double)a[i] - (double)b[i]);
    if (isnan(a[i]) != isnan(b[i])) return 1e30;
    if (isnan(a[i])) continue;
    double r = d / (atol + rtol * fabs((double)b[i]));
    if (r > worst) worst = r;
  }
  return worst;
}

double e2e_npy_compare(const kdc_npy_array *a, const kdc_npy_array *b, double atol, double rtol) {
  if (a->rank != b->rank || a->dtype != KDC_IO_DTYPE_F32 || b->dtype != KDC_IO_DTYPE_F32) return 1e30;
  for (int i = 0; i < a->rank; i++)
    if (a->dims[i] != b->dims[i]) return 1e30;
  return e2e_f32_compare(a->data, b->data, a->nbytes / 4, atol, rtol);
}

double e2e_npy_files_compare(const char *got_path, const char *want_path, double atol,
                             double rtol) {
  kdc_npy_array got, want;
  assert_null(kdc_npy_read(got_path, &got));
  assert_null(kdc_npy_read(want_path, &want));
  double err = e2e_npy_compare(&got, &want, atol, rtol);
  kdc_npy_free(&got), kdc_npy_free(&want);
  return err;
}

char *e2e_fit_losses(const char *model, const char *weights, const char *x, const char *y,
                     const char *loss, const char *batch, const char *mesh, int epochs,
                     double *loss_out) {
  static int serial;
  char name[64], ep[16], *msg = NULL;
  snprintf(name, sizeof name, "fit_%d.plan", serial++);
  snprintf(ep, sizeof ep, "%d", epochs);
  char *plan = e2e_path(name);
  e2e_result *r = malloc(sizeof *r);
  if (weights)
    e2e_kdc(r, "compile", model, "--weights", weights, "--loss", loss, "--optimizer", "adam",
            "--batch", batch, "--mesh", mesh, "-o", plan, NULL);
  else
    e2e_kdc(r, "compile", model, "--random-init", "--seed", "5", "--loss", loss, "--optimizer",
            "adam", "--batch", batch, "--mesh", mesh, "-o", plan, NULL);
  if (r->status == 0)
    e2e_kdc(r, "run", plan, "--fit", "--x", x, "--y", y, "--epochs", ep, "--batch-size", batch,
            NULL);
  const char *p = r->out;
  for (int e = 0; e < epochs && r->status == 0; e++) {
    p = strstr(p, "loss: ");
    if (!p) break;
    loss_out[e] = strtod(p + 6, NULL);
    p += 6;
  }
  if (r->status != 0 || !p) {
    size_t n = strlen(r->err) + 64;
    msg = malloc(n);
    snprintf(msg, n, "on mesh %s: %s", mesh, r->status ? r->err : "no epoch losses");
  }
  free(r);
  free(plan);
  return msg;
}

void e2e_fit_equal_1_vs_2x4(const char *what, const char *model, const char *weights,
                            const char *x, const char *y, double atol) {
  double loss[2][3];
  const char *meshes[2] = {"1", "2x4"};
  for (int m = 0; m < 2; m++) {
    char *err = e2e_fit_losses(model, weights, x, y, "sparse_categorical_crossentropy", "16",
                               meshes[m], 3, loss[m]);
    if (err) fail_msg("%s: fit on %s: %s", what, meshes[m], err);
  }
  assert_true(loss[0][2] < loss[0][0]);
  for (int e = 0; e < 3; e++)
    if (fabs(loss[0][e] - loss[1][e]) > 1e-5 * fabs(loss[0][e]) + atol)
      fail_msg("%s, epoch %d: loss %.7f on 1 device, %.7f on 2x4", what, e + 1, loss[0][e],
               loss[1][e]);
}

static int cmp_names(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

int e2e_case_names(const char *rel, char **names, int cap, int keep) {
  char *root = e2e_src(rel);
  DIR *d = opendir(root);
  assert_non_null(d);
  int n = 0;
  for (struct dirent *e; (e = readdir(d)) != NULL;) {
    if (e->d_name[0] == '.') continue;
    assert_true(n < cap);
    names[n] = strdup(e->d_name);
    assert_non_null(names[n]);
    n++;
  }
  closedir(d);
  free(root);
  assert_true(n >= 1);
  qsort(names, (size_t)n, sizeof names[0], cmp_names);
  if (keep > 0 && n > keep) {
    for (int c = keep; c < n; c++) free(names[c]);
    n = keep;
  }
  return n;
}

char *e2e_join(const char *dir, const char *name) {
  size_t n = strlen(dir) + strlen(name) + 2;
  char *p = malloc(n);
  assert_non_null(p);
  snprintf(p, n, "%s/%s", dir, name);
  return p;
}
