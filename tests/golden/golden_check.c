/*
 * tests/golden/golden_check.c: the golden IR test runner (STYLE.md 13).
 *
 * A golden test is one self-contained .kir file:
 *
 *   # RUN: dce,cse            <- passes (comma-separated) or "pipeline"
 *   # TRAIN: LOSS OPTIMIZER   <- optional: build_training's options (Keras
 *                                defaults; e.g. mean_squared_error sgd)
 *   module @t {               <- the input IR (the parser skips # lines)
 *     ...
 *   }
 *   # CHECK: %1 = exp %0      <- substring of a later output line
 *   # CHECK-NEXT: return %1   <- substring of the very next line
 *   # CHECK-NOT: constant     <- absent between the neighbouring matches
 *
 * or, instead of CHECK lines, the whole expected output:
 *
 *   # >>> expected
 *   # module @t {
 *   # ...
 *   # <<<
 *
 * compared line by line, exactly, except that `xxxx` in the expected text
 * matches any run of characters (SQLite-style masking of unstable fields).
 * CHECK patterns may use `xxxx` too.
 *
 * The output is the module printed after the passes, or, if parsing or a pass
 * fails, the single line "error: <message>" (so error tests CHECK it).  On
 * success the output is also parsed and printed again and must not change
 * (the text form round-trips after every pass).
 *
 * Usage: golden_check FILE|DIR...  (files named _* are skipped in DIRs).
 * Exit status 0 when every test passes, 1 otherwise.  There is deliberately
 * no "update the expectations" mode: expected text is written by reasoning.
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/ir.h"
#include "passes/passes.h"

static char *read_file(const char *path) {
  FILE *fp = fopen(path, "rb");
  if (!fp) return NULL;
  char *buf = NULL;
  size_t len = 0, cap = 0;
  for (;;) {
    if (len + 4096 + 1 > cap) {
      cap = (cap + 4096) * 2;
      buf = kdc_xrealloc(buf, cap);
    }
    size_t k = fread(buf + len, 1, 4096, fp);
    len += k;
    if (k < 4096) break;
  }
  fclose(fp);
  buf[len] = '\0';
  return buf;
}

/* Lines of a text, split in place. */
typedef struct lines {
  char **v;
  size_t n, cap;
} lines;

static void split(lines *ls, char *text) {
  char *s = text;
  while (*s) {
    char *e = strchr(s, '\n');
    KDC_GROW(ls->v, ls->cap, ls->n + 1);
    ls->v[ls->n++] = s;
    if (!e) break;
    *e = '\0';
    s = e + 1;
  }
}

/* Does |s| (exactly, when |anchored|, else as a substring) match |pat| where
 * "xxxx" matches any run of characters? */
static bool glob(const char *pat, const char *s, bool anchored) {
  const char *star = strstr(pat, "xxxx");
  size_t lit = star ? (size_t)(star - pat) : strlen(pat);
  if (!anchored) { /* find the first literal chunk anywhere, then anchor */
    for (const char *p = s;; p++) {
      if (strncmp(p, pat, lit) == 0 && glob(pat, p, true)) return true;
      if (!*p) return false;
    }
  }
  if (strncmp(s, pat, lit) != 0) return false;
  if (!star) return s[lit] == '\0';
  for (const char *p = s + lit;; p++) {
    if (glob(star + 4, p, true)) return true;
    if (!*p) return false;
  }
}

static bool contains(const char *line, const char *pat) {
  char *p = kdc_xmalloc(strlen(pat) + 5);
  strcpy(p, pat);
  strcat(p, "xxxx"); /* substring: anything may follow */
  bool ok = glob(p, line, false);
  free(p);
  return ok;
}

/* A directive's argument if |line| is "# <key>: arg", else NULL. */
static const char *directive(const char *line, const char *key) {
  size_t k = strlen(key);
  if (strncmp(line, "# ", 2) != 0 || strncmp(line + 2, key, k) != 0 || line[2 + k] != ':')
    return NULL;
  const char *a = line + 3 + k;
  return *a == ' ' ? a + 1 : a;
}

static void show(const char *path, const char *why, const lines *out) {
  fprintf(stderr, "%s: FAIL: %s\n--- actual output ---\n", path, why);
  for (size_t i = 0; i < out->n; i++) fprintf(stderr, "%s\n", out->v[i]);
  fprintf(stderr, "---------------------\n");
}

/* NOT patterns must be absent from out lines [from, to). */
static bool nots_absent(const char *path, const lines *out, const lines *nots, size_t from,
                        size_t to) {
  for (size_t k = 0; k < nots->n; k++)
    for (size_t i = from; i < to; i++)
      if (contains(out->v[i], nots->v[k])) {
        char why[512];
        snprintf(why, sizeof why, "CHECK-NOT: %s (found on output line %zu)", nots->v[k], i + 1);
        show(path, why, out);
        return false;
      }
  return true;
}

static bool run_checks(const char *path, const lines *src, const lines *out) {
  size_t cur = 0;
  lines nots = {0};
  bool ok = true, any = false;
  char why[512];
  for (size_t i = 0; i < src->n && ok; i++) {
    const char *a;
    if ((a = directive(src->v[i], "CHECK-NOT"))) {
      KDC_GROW(nots.v, nots.cap, nots.n + 1);
      nots.v[nots.n++] = (char *)a;
      any = true;
    } else if ((a = directive(src->v[i], "CHECK-NEXT"))) {
      any = true;
      if (cur >= out->n || !contains(out->v[cur], a)) {
        snprintf(why, sizeof why, "CHECK-NEXT: %s (line %zu of the test)", a, i + 1);
        show(path, why, out);
        ok = false;
      } else {
        ok = nots_absent(path, out, &nots, cur, cur);
        nots.n = 0;
        cur++;
      }
    } else if ((a = directive(src->v[i], "CHECK"))) {
      any = true;
      size_t j = cur;
      while (j < out->n && !contains(out->v[j], a)) j++;
      if (j == out->n) {
        snprintf(why, sizeof why, "CHECK: %s (line %zu of the test) not found", a, i + 1);
        show(path, why, out);
        ok = false;
      } else {
        ok = nots_absent(path, out, &nots, cur, j);
        nots.n = 0;
        cur = j + 1;
      }
    }
  }
  if (ok) ok = nots_absent(path, out, &nots, cur, out->n);
  free(nots.v);
  if (ok && !any) {
    fprintf(stderr, "%s: FAIL: no CHECK lines and no expected block\n", path);
    ok = false;
  }
  return ok;
}

static bool run_expected(const char *path, const lines *src, size_t begin, const lines *out) {
  size_t k = 0;
  char why[512];
  for (size_t i = begin + 1; i < src->n; i++) {
    const char *l = src->v[i];
    if (strcmp(l, "# <<<") == 0) {
      if (k != out->n) {
        snprintf(why, sizeof why, "output has %zu lines, expected %zu", out->n, k);
        show(path, why, out);
        return false;
      }
      return true;
    }
    const char *want = strncmp(l, "# ", 2) == 0 ? l + 2 : strcmp(l, "#") == 0 ? "" : NULL;
    if (!want) {
      snprintf(why, sizeof why, "line %zu of the test: expected lines start with '# '", i + 1);
      show(path, why, out);
      return false;
    }
    if (k >= out->n || !glob(want, out->v[k], true)) {
      snprintf(why, sizeof why, "output line %zu differs, expected: %s", k + 1, want);
      show(path, why, out);
      return false;
    }
    k++;
  }
  fprintf(stderr, "%s: FAIL: '# >>> expected' without '# <<<'\n", path);
  return false;
}

/* The options of a "# TRAIN: LOSS OPTIMIZER" line (NULL: none). */
static kdc_status train_options(const char *train, kdc_train_options *o) {
  char loss[64] = "", opt[64] = "";
  kdc_loss_kind lk;
  kdc_optimizer_kind ok;
  if (sscanf(train, "%63s %63s", loss, opt) != 2 || !kdc_loss_from_name(loss, &lk) ||
      !kdc_optimizer_from_name(opt, &ok))
    return KDC_ERR(KDC_INVALID_INPUT, "TRAIN: expected LOSS OPTIMIZER, got \"%s\"", train);
  kdc_train_options_init(o, lk, ok);
  return NULL;
}

/* Parses, runs the passes and prints; returns the malloc'd output text. */
static char *produce(const char *path, const char *text, const char *run, const char *train,
                     bool *out_roundtrip_ok) {
  kdc_module *m = NULL;
  kdc_train_options to;
  kdc_pass_options po;
  memset(&po, 0, sizeof po);
  kdc_status st = train ? train_options(train, &to) : NULL;
  po.train = train ? &to : NULL;
  if (!st) st = kdc_ir_parse_module(text, path, &m);
  if (!st) st = kdc_pass_run_list(m, run, train ? &po : NULL);
  char *res = NULL;
  *out_roundtrip_ok = true;
  if (st) {
    if (asprintf(&res, "error: %s\n", kdc_status_message(st)) < 0) res = NULL;
    kdc_status_free(st);
  } else {
    res = kdc_ir_module_to_string(m);
    kdc_module *m2 = NULL;
    kdc_status st2 = kdc_ir_parse_module(res, "<printed>", &m2);
    char *again = st2 ? NULL : kdc_ir_module_to_string(m2);
    *out_roundtrip_ok = again && strcmp(again, res) == 0;
    if (!*out_roundtrip_ok)
      fprintf(stderr, "%s: printed IR does not round-trip: %s\n", path,
              st2 ? kdc_status_message(st2) : "reprinted text differs");
    free(again);
    kdc_status_free(st2);
    kdc_ir_module_destroy(m2);
  }
  kdc_ir_module_destroy(m);
  return res;
}

static bool run_file(const char *path) {
  char *text = read_file(path);
  if (!text) {
    fprintf(stderr, "%s: FAIL: cannot read\n", path);
    return false;
  }
  char *copy = kdc_xstrdup(text);
  lines src = {0};
  split(&src, copy);
  const char *run = NULL, *train = NULL;
  size_t expected = (size_t)-1;
  for (size_t i = 0; i < src.n; i++) {
    if (!run) run = directive(src.v[i], "RUN");
    if (!train) train = directive(src.v[i], "TRAIN");
    if (expected == (size_t)-1 && strcmp(src.v[i], "# >>> expected") == 0) expected = i;
  }
  bool ok = false;
  if (!run) {
    fprintf(stderr, "%s: FAIL: no '# RUN:' line\n", path);
  } else {
    bool rt_ok;
    char *res = produce(path, text, run, train, &rt_ok);
    lines out = {0};
    size_t rl = strlen(res);
    if (rl > 0 && res[rl - 1] == '\n') res[rl - 1] = '\0'; /* no empty last line */
    split(&out, res);
    ok = rt_ok && (expected != (size_t)-1 ? run_expected(path, &src, expected, &out)
                                          : run_checks(path, &src, &out));
    free(out.v);
    free(res);
  }
  free(src.v);
  free(copy);
  free(text);
  if (ok) printf("%s: ok\n", path);
  return ok;
}

static int by_name(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* All tests of a directory, in name order (deterministic output). */
static bool run_dir(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return false;
  lines names = {0};
  struct dirent *e;
  while ((e = readdir(d))) {
    size_t n = strlen(e->d_name);
    if (e->d_name[0] == '_' || e->d_name[0] == '.' || n < 5 || strcmp(e->d_name + n - 4, ".kir"))
      continue;
    KDC_GROW(names.v, names.cap, names.n + 1);
    if (asprintf(&names.v[names.n++], "%s/%s", dir, e->d_name) < 0) kdc_unreachable();
  }
  closedir(d);
  qsort(names.v, names.n, sizeof *names.v, by_name);
  bool ok = true;
  for (size_t i = 0; i < names.n; i++) {
    ok &= run_file(names.v[i]);
    free(names.v[i]);
  }
  free(names.v);
  return ok;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: golden_check FILE.kir|DIR...\n");
    return 2;
  }
  bool ok = true;
  for (int i = 1; i < argc; i++) {
    DIR *d = opendir(argv[i]);
    if (d) {
      closedir(d);
      ok &= run_dir(argv[i]);
    } else {
      ok &= run_file(argv[i]);
    }
  }
  return ok ? 0 : 1;
}
