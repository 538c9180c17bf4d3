/* `kdc inspect FILE`: a plan (by its magic) is described; anything else is
 * read as a Keras model and summarised like model.summary(). */
#include <stdio.h>
#include <string.h>

#include "frontend/frontend.h"
#include "runtime/runtime.h"
#include "tools/cli.h"

static bool is_plan(const char *path) {
  char magic[8] = {0};
  FILE *f = fopen(path, "rb");
  if (!f) return false;
  size_t n = fread(magic, 1, sizeof magic, f);
  fclose(f);
  return n == sizeof magic && memcmp(magic, "KDCPLAN", 7) == 0;
}

int kdc_cmd_inspect(int argc, char **argv) {
  cli_args a = {argc, argv, 0};
  const char *file = NULL;
  kdc_status st = NULL;
  while (a.i < a.argc && !st) {
    if (a.argv[a.i][0] != '-' && !file) file = a.argv[a.i++];
    else st = cli_unknown(&a);
  }
  if (!st && !file) st = KDC_ERR(KDC_INVALID_INPUT, "inspect: no file given (see kdc --help)");
  if (st) return cli_fail(st);
  if (is_plan(file)) {
    kdc_rt_plan *p = NULL;
    st = kdc_rt_plan_load(file, &p);
    if (st) return cli_fail(st);
    kdc_rt_plan_describe(p, stdout);
    kdc_rt_plan_release(p);
    return 0;
  }
  kdc_keras_model *m = NULL;
  st = kdc_frontend_load(file, &m);
  if (!st) st = kdc_frontend_summary(m, stdout);
  kdc_frontend_free(m);
  return st ? cli_fail(st) : 0;
}
