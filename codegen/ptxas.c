/*
 * codegen/ptxas.c: the plan's PTX assembled into a cubin (SASS) by NVIDIA's
 * ptxas at compile time (docs/gpu.md, "SASS in the plan").
 *
 * A GPU loads a cubin for its compute capability in milliseconds; PTX is
 * compiled by the driver's JIT at load (hundreds of ms for a transformer,
 * cached by the driver per user).  kdc does not ship ptxas: the one used is
 * KDC_PTXAS (a path; "none" or "" for PTX only), else $CUDA_HOME/bin/ptxas,
 * /usr/local/cuda/bin/ptxas, or the first ptxas on PATH.  None found: the
 * plan has PTX only, as before, and its CUDA section says why (`kdc
 * inspect`).  ptxas is run on a temporary copy of the PTX; when it rejects
 * the PTX (a kdc bug), the error quotes its first message with the PTX line
 * (`kdc inspect --ptx` of a plan compiled with KDC_PTXAS=none numbers them
 * the same).
 */
#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "codegen/codegen.h"

extern char **environ;

static bool executable(const char *path) {
  struct stat s;
  return stat(path, &s) == 0 && S_ISREG(s.st_mode) && access(path, X_OK) == 0;
}

kdc_status cg_ptxas_find(char *path, size_t n, char *why, size_t why_n) {
  *path = 0;
  const char *env = getenv("KDC_PTXAS");
  if (env) {
    if (!*env || !strcmp(env, "none")) {
      snprintf(why, why_n, "KDC_PTXAS=%s at compile time", env);
      return NULL;
    }
    if (!executable(env))
      return KDC_ERR(KDC_INVALID_INPUT, "KDC_PTXAS=%s: not an executable file (unset it to look "
                     "for ptxas, or KDC_PTXAS=none for PTX only)", env);
    snprintf(path, n, "%s", env);
    return NULL;
  }
  const char *home = getenv("CUDA_HOME");
  char cand[4096];
  if (home && *home) {
    snprintf(cand, sizeof cand, "%s/bin/ptxas", home);
    if (executable(cand)) return snprintf(path, n, "%s", cand), NULL;
  }
  if (executable("/usr/local/cuda/bin/ptxas"))
    return snprintf(path, n, "/usr/local/cuda/bin/ptxas"), NULL;
  const char *p = getenv("PATH");
  while (p && *p) {
    const char *e = strchr(p, ':');
    size_t len = e ? (size_t)(e - p) : strlen(p);
    if (len && len < sizeof cand - 8) {
      snprintf(cand, sizeof cand, "%.*s/ptxas", (int)len, p);
      if (executable(cand)) return snprintf(path, n, "%s", cand), NULL;
    }
    p = e ? e + 1 : NULL;
  }
  snprintf(why, why_n, "no ptxas at compile time (KDC_PTXAS, $CUDA_HOME/bin, /usr/local/cuda/bin, "
           "PATH)");
  return NULL;
}

/* Reads a whole small file (the cubin, ptxas's log); NULL on failure. */
static uint8_t *slurp(const char *path, size_t *size) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  uint8_t *d = NULL;
  size_t cap = 0, n = 0;
  for (;;) {
    if (n == cap) d = kdc_xrealloc(d, (cap = cap ? cap * 2 : 65536) + 1);
    size_t k = fread(d + n, 1, cap - n, f);
    n += k;
    if (k == 0) break;
  }
  fclose(f);
  d[n] = 0;
  *size = n;
  return d;
}

/* Runs |argv| with stdout and stderr into |log|; its exit status, or -1
 * (|err| set) when it could not be started or was killed. */
static int run(char *const argv[], const char *log, int *err) {
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  pid_t pid;
  int rc = posix_spawn(&pid, argv[0], &fa, NULL, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  *err = rc;
  if (rc) return -1;
  int ws;
  while (waitpid(pid, &ws, 0) < 0)
    if (errno != EINTR) return *err = errno, -1;
  return WIFEXITED(ws) ? WEXITSTATUS(ws) : -1;
}

/* The first line of |log| that names an error (else its first line), with
 * the temporary file's name replaced by "PTX". */
static void first_error(const char *log, const char *tmp, char *out, size_t n) {
  const char *l = strstr(log, "error");
  if (l) while (l > log && l[-1] != '\n') l--;
  else l = log;
  size_t len = strcspn(l, "\n");
  char line[600];
  snprintf(line, sizeof line, "%.*s", (int)(len < 500 ? len : 500), l);
  const char *t = strstr(line, tmp);
  if (t) snprintf(out, n, "%.*sPTX%s", (int)(t - line), line, t + strlen(tmp));
  else snprintf(out, n, "%s", line);
}

/* "ptxas 13.0 (V13.0.88)" from `ptxas --version`'s "release 13.0, V13.0.88". */
static void version(const char *ptxas, const char *dir, char *out, size_t n) {
  char log[4200];
  snprintf(log, sizeof log, "%s/version", dir);
  char *argv[] = {(char *)ptxas, "--version", NULL};
  int err;
  size_t size;
  snprintf(out, n, "ptxas");
  if (run(argv, log, &err) != 0) return;
  char *v = (char *)slurp(log, &size), *r = v ? strstr(v, "release ") : NULL;
  if (r) {
    r += strlen("release ");
    size_t len = strcspn(r, "\n");
    char rel[64];
    snprintf(rel, sizeof rel, "%.*s", (int)(len < 60 ? len : 60), r);
    char *comma = strstr(rel, ", ");
    if (comma) *comma = 0, snprintf(out, n, "ptxas %s (%s)", rel, comma + 2);
    else snprintf(out, n, "ptxas %s", rel);
  }
  free(v);
}

kdc_status cg_ptxas_assemble(const char *ptxas, const char *ptx, size_t len, int sm,
                             cg_cubin *out) {
  memset(out, 0, sizeof *out);
  const char *tmpdir = getenv("TMPDIR");
  char dir[4096], in[4200], cubin[4200], log[4200];
  snprintf(dir, sizeof dir, "%s/kdc_ptxas_XXXXXX", tmpdir && *tmpdir ? tmpdir : "/tmp");
  if (!mkdtemp(dir))
    return KDC_ERR(KDC_UNAVAILABLE, "codegen: --target cuda: cannot make a temporary folder for "
                   "ptxas (%s): %s", dir, strerror(errno));
  snprintf(in, sizeof in, "%s/kdc.ptx", dir);
  snprintf(cubin, sizeof cubin, "%s/kdc.cubin", dir);
  snprintf(log, sizeof log, "%s/log", dir);
  kdc_status st = NULL;
  FILE *f = fopen(in, "wb");
  if (!f || fwrite(ptx, 1, len, f) != len) st = KDC_ERR(KDC_UNAVAILABLE, "codegen: --target "
                                                        "cuda: cannot write %s for ptxas", in);
  if (f && fclose(f) && !st)
    st = KDC_ERR(KDC_UNAVAILABLE, "codegen: --target cuda: cannot write %s for ptxas", in);
  if (!st) {
    char arch[16];
    snprintf(arch, sizeof arch, "-arch=sm_%d", sm);
    char *argv[] = {(char *)ptxas, arch, "-o", cubin, in, NULL};
    int err = 0, rc = run(argv, log, &err);
    size_t n = 0;
    char *text = (char *)slurp(log, &n);
    if (rc != 0) {
      char msg[640];
      if (rc < 0 && err) snprintf(msg, sizeof msg, "cannot run it: %s", strerror(err));
      else if (rc < 0) snprintf(msg, sizeof msg, "it was killed");
      else first_error(text ? text : "", in, msg, sizeof msg);
      st = KDC_ERR(KDC_INTERNAL, "codegen: --target cuda: %s %s rejected the plan's PTX (exit "
                   "%d): %s (KDC_PTXAS=none writes the plan with PTX only)", ptxas, arch, rc, msg);
    }
    free(text);
  }
  if (!st) {
    out->data = slurp(cubin, &out->size);
    if (!out->data || out->size < 64 || memcmp(out->data, "\177ELF", 4)) {
      st = KDC_ERR(KDC_INTERNAL, "codegen: --target cuda: %s -arch=sm_%d wrote no ELF cubin (%zu "
                   "bytes)", ptxas, sm, out->data ? out->size : 0);
      free(out->data);
      out->data = NULL;
    }
  }
  if (!st) version(ptxas, dir, out->note, sizeof out->note);
  out->sm = st ? 0 : sm;
  unlink(in), unlink(cubin), unlink(log);
  char v[4200];
  snprintf(v, sizeof v, "%s/version", dir);
  unlink(v);
  rmdir(dir);
  return st;
}

void cg_cubin_put(kdc_buf *launch, const cg_cubin *c, const char *why) {
  kdc_buf_put_u32(launch, c && c->data ? (uint32_t)c->sm : 0);
  kdc_buf_put_str(launch, c && c->data ? c->note : why);
  kdc_buf_put_u64(launch, c && c->data ? c->size : 0);
  kdc_buf_align(launch, 64); /* sections are 64-byte aligned in the file: so is the ELF image */
  if (c && c->data) kdc_buf_put_bytes(launch, c->data, c->size);
}
