/*
 * tests/fuzz/replay_main.c: the main of a fuzz target in the normal builds
 * (Release, ASan): runs LLVMFuzzerTestOneInput once over every file of the
 * directories (or files) named on the command line -- the checked-in corpus
 * tests/fuzz/corpus/<name>/ -- so the suite replays every seed and every
 * input the fuzzer once found (ctest label fuzz).  An empty corpus fails:
 * a replay that runs nothing proves nothing.
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "tests/fuzz/fuzz.h"

static int run_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "replay: cannot open %s\n", path);
    return -1;
  }
  size_t cap = 4096, n = 0;
  uint8_t *buf = malloc(cap);
  for (size_t k; buf && (k = fread(buf + n, 1, cap - n, f)) > 0;) {
    n += k;
    if (n == cap) buf = realloc(buf, cap *= 2);
  }
  fclose(f);
  if (!buf) return -1;
  /* an exact-size copy, so ASan sees any read past the input */
  uint8_t *in = malloc(n ? n : 1);
  memcpy(in, buf, n);
  free(buf);
  LLVMFuzzerTestOneInput(in, n);
  free(in);
  return 1;
}

static int compare(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

static int run_path(const char *path) {
  struct stat sb;
  if (stat(path, &sb)) {
    fprintf(stderr, "replay: %s does not exist\n", path);
    return -1;
  }
  if (!S_ISDIR(sb.st_mode)) return run_file(path);
  DIR *d = opendir(path);
  if (!d) return -1;
  char **names = NULL;
  size_t n = 0;
  for (struct dirent *e; (e = readdir(d));) {
    if (e->d_name[0] == '.') continue;
    names = realloc(names, (n + 1) * sizeof *names);
    names[n++] = strdup(e->d_name);
  }
  closedir(d);
  qsort(names, n, sizeof *names, compare);  /* the same order every run */
  int total = 0;
  for (size_t i = 0; i < n; i++) {
    char *p = malloc(strlen(path) + strlen(names[i]) + 2);
    sprintf(p, "%s/%s", path, names[i]);
    int r = run_path(p);
    free(p);
    free(names[i]);
    if (r < 0) total = -1;
    else if (total >= 0) total += r;
  }
  free(names);
  return total;
}

int main(int argc, char **argv) {
  int total = 0;
  for (int i = 1; i < argc; i++) {
    int r = run_path(argv[i]);
    if (r < 0) return 1;
    total += r;
  }
  printf("replay: %d inputs\n", total);
  return total > 0 ? 0 : 1;
}
