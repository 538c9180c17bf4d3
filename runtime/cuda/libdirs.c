/*
 * runtime/cuda/libdirs.c: the toolkit's and NVIDIA's pip wheels' library
 * folders (libdirs.h).
 */
#include "runtime/cuda/libdirs.h"

#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "kdc/arena.h"

typedef struct {
  char **v;
  size_t n, cap;
} dir_list;

static void add_dir(dir_list *l, const char *d) {
  struct stat st;
  if (stat(d, &st) != 0 || !S_ISDIR(st.st_mode)) return;
  char *real = realpath(d, NULL);  /* a venv's lib64 -> lib must not count twice */
  if (!real) return;
  for (size_t i = 0; i < l->n; i++)
    if (strcmp(l->v[i], real) == 0) {
      free(real);
      return;
    }
  if (l->n == l->cap) {
    l->cap = l->cap ? 2 * l->cap : 16;
    l->v = kdc_xrealloc(l->v, l->cap * sizeof *l->v);
  }
  l->v[l->n++] = real;
}

/* Every existing directory matching |pattern|, in glob's (sorted) order. */
static void add_glob(dir_list *l, const char *pattern) {
  glob_t g;
  if (glob(pattern, GLOB_ONLYDIR, NULL, &g) == 0)
    for (size_t i = 0; i < g.gl_pathc; i++) add_dir(l, g.gl_pathv[i]);
  globfree(&g);
}

/* The wheels' folders of the Python environment under |prefix|. */
static void add_python_prefix(dir_list *l, const char *prefix) {
  if (!prefix || !*prefix) return;
  static const char *const sub[] = {"site-packages", "dist-packages"};
  for (int i = 0; i < 2; i++) {
    char pat[4096];
    int k = snprintf(pat, sizeof pat, "%s/lib/python3*/%s/nvidia/*/lib", prefix, sub[i]);
    if (k > 0 && (size_t)k < sizeof pat) add_glob(l, pat);
  }
}

size_t rt_cuda_lib_dirs(const char *toolkit, char ***out) {
  dir_list l = {0};
  if (toolkit) add_dir(&l, toolkit);
  add_dir(&l, "/usr/local/cuda/lib64");
  add_glob(&l, "/usr/local/cuda-*/targets/x86_64-linux/lib");
  add_python_prefix(&l, getenv("VIRTUAL_ENV"));
  add_python_prefix(&l, getenv("CONDA_PREFIX"));
  const char *path = getenv("PATH");
  if (path) {
    char *p = kdc_xstrdup(path), *save = NULL;
    for (char *d = strtok_r(p, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
      char prefix[4096];
      int k = snprintf(prefix, sizeof prefix, "%s/..", d);
      if (k > 0 && (size_t)k < sizeof prefix) add_python_prefix(&l, prefix);
    }
    free(p);
  }
  const char *home = getenv("HOME");
  if (home) {
    char prefix[4096];
    int k = snprintf(prefix, sizeof prefix, "%s/.local", home);
    if (k > 0 && (size_t)k < sizeof prefix) add_python_prefix(&l, prefix);
  }
  *out = l.v;
  return l.n;
}

void rt_cuda_lib_dirs_free(char **dirs, size_t n) {
  for (size_t i = 0; i < n; i++) free(dirs[i]);
  free(dirs);
}
