/*
 * `kdc inspect FILE`: a plan (by its magic) is described; anything else is
 * read as a Keras model and summarised like model.summary().
 *   --explain NAME   why value NAME (a weight path, an input, an output or a
 *                    layer name) has its sharding: the chain of rules and ops
 *                    recorded at compile time (the plan's EXPLAIN section).
 *   --sharding NAME  how input, output or weight NAME is laid out over the
 *                    devices: a grid of blocks with the device ids holding
 *                    each (runtime/describe_sharding.c).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/io.h"
#include "frontend/frontend.h"
#include "runtime/place.h"
#include "runtime/runtime.h"
#include "tools/cli.h"

static bool is_plan(const char *path) {
  char magic[8] = {0};
  int fd;
  uint64_t size;
  kdc_status st = kdc_file_open_input(path, &fd, &size);  /* never blocks on a FIFO */
  if (st) {
    kdc_status_free(st);  /* the model reader reports it */
    return false;
  }
  ssize_t got = read(fd, magic, sizeof magic);
  close(fd);
  size_t n = got > 0 ? (size_t)got : 0;
  /* a plan cut inside its magic is still a (truncated) plan, not bad JSON */
  return n > 0 && memcmp(magic, "KDCPLAN", n < 7 ? n : 7) == 0;
}

/* Prints the EXPLAIN blocks whose name is |name| (any function). */
static kdc_status explain(const char *path, const char *name) {
  kdc_plan_file *pf = NULL;
  KDC_RETURN_IF_ERROR(kdc_plan_file_open(path, &pf));
  const void *data = NULL;
  size_t size = 0;
  kdc_status st = NULL;
  if (!kdc_plan_file_find(pf, KDC_PLAN_SECTION_EXPLAIN, &data, &size)) {
    st = KDC_ERR(KDC_INVALID_INPUT, "%s: the plan has no sharding explanations (compiled without "
                 "--mesh)", path);
  } else {
    const char *s = data, *end = s + size;
    size_t nlen = strlen(name);
    bool found = false;
    while (s < end) {
      const char *next = s + 1;
      while (next < end && !(next[-1] == '\n' && next + 2 < end && next[0] == '@' && next[1] == '@'))
        next++;
      /* "@@ func name\n" */
      const char *sp = memchr(s, ' ', (size_t)(next - s));
      const char *sp2 = sp ? memchr(sp + 1, ' ', (size_t)(next - sp - 1)) : NULL;
      const char *nl = memchr(s, '\n', (size_t)(next - s));
      if (sp2 && nl && (size_t)(nl - sp2 - 1) == nlen && !memcmp(sp2 + 1, name, nlen)) {
        fwrite(s, 1, (size_t)(next - s), stdout);
        found = true;
      }
      s = next;
    }
    if (!found)
      st = KDC_ERR(KDC_INVALID_INPUT, "%s: no value named \"%s\" (give a weight path, an input, an "
                   "output or a layer name)", path, name);
  }
  kdc_plan_file_close(pf);
  return st;
}

/* Prints the PTX section (plans compiled with --target cuda). */
static kdc_status print_ptx(const char *path) {
  kdc_plan_file *pf = NULL;
  KDC_RETURN_IF_ERROR(kdc_plan_file_open(path, &pf));
  const void *data = NULL;
  size_t size = 0;
  kdc_status st = NULL;
  if (!kdc_plan_file_find(pf, KDC_PLAN_SECTION_PTX, &data, &size))
    st = KDC_ERR(KDC_INVALID_INPUT, "%s: the plan has no PTX (compile with --target cuda)", path);
  else
    fwrite(data, 1, size, stdout);
  kdc_plan_file_close(pf);
  return st;
}

/* Where `kdc run` of this plan would place this process (runtime/place.h:
 * the environment: KDC_*, an MPI launcher, Slurm), each value's source and
 * the plan's devices it would run. */
static kdc_status placement(int64_t nd) {
  kdc_rt_place pl;
  KDC_RETURN_IF_ERROR(kdc_rt_place_resolve(NULL, &pl));
  printf("\nplacement (kdc run here, from the environment):\n");
  kdc_rt_place_print(&pl, stdout);
  if (pl.n > 0 && nd % pl.n == 0 && pl.id < pl.n)
    printf("  mesh devices      %lld..%lld of %lld\n", (long long)(nd / pl.n * pl.id),
           (long long)(nd / pl.n * (pl.id + 1) - 1), (long long)nd);
  else
    printf("  mesh devices      - (%lld devices cannot be split evenly over %d processes)\n",
           (long long)nd, pl.n);
  return NULL;
}

int kdc_cmd_inspect(int argc, char **argv) {
  cli_args a = {argc, argv, 0};
  const char *file = NULL, *explain_name = NULL, *sharding_name = NULL;
  bool collectives = false, ptx = false;
  kdc_status st = NULL;
  while (a.i < a.argc && !st) {
    if (cli_flag(&a, "--ptx")) {
      ptx = true;
      continue;
    }
    if (cli_flag(&a, "--collectives")) {
      collectives = true;
      continue;
    }
    if (cli_flag_value(&a, "--explain", &explain_name, &st)) continue;
    if (cli_flag_value(&a, "--sharding", &sharding_name, &st)) continue;
    if (a.argv[a.i][0] != '-' && !file) file = a.argv[a.i++];
    else st = cli_unknown(&a);
  }
  if (!st && !file) st = KDC_ERR(KDC_INVALID_INPUT, "inspect: no file given (see kdc --help)");
  if (st) return cli_fail(st);
  bool plan = is_plan(file);
  if (ptx) {
    if (!plan) return cli_fail(KDC_ERR(KDC_INVALID_INPUT, "%s: --ptx needs a plan", file));
    st = print_ptx(file);
    return st ? cli_fail(st) : 0;
  }
  if (explain_name) {
    if (!plan) return cli_fail(KDC_ERR(KDC_INVALID_INPUT, "%s: --explain needs a plan", file));
    st = explain(file, explain_name);
    return st ? cli_fail(st) : 0;
  }
  if ((sharding_name || collectives) && !plan)
    return cli_fail(KDC_ERR(KDC_INVALID_INPUT, "%s: --%s needs a plan", file,
                            collectives ? "collectives" : "sharding"));
  if (plan) {
    kdc_rt_plan *p = NULL;
    /* describing needs no GPU and no machine code */
    kdc_rt_options ro = {.target = KDC_RT_TARGET_CPU, .describe_only = 1};
    st = kdc_rt_plan_load_with(file, &ro, &p);
    if (st) return cli_fail(st);
    if (sharding_name) {
      st = kdc_rt_plan_describe_sharding(p, sharding_name, stdout);
      kdc_rt_plan_release(p);
      return st ? cli_fail(st) : 0;
    }
    if (collectives) kdc_rt_plan_describe_collectives(p, stdout);
    else kdc_rt_plan_describe(p, stdout);
    int64_t nd = p->nd;
    kdc_rt_plan_release(p);
    if (!collectives) st = placement(nd);
    return st ? cli_fail(st) : 0;
  }
  kdc_keras_model *m = NULL;
  st = kdc_frontend_load(file, &m);
  if (!st) st = kdc_frontend_summary(m, stdout);
  int64_t fixed = -1;
  const kdc_keras_layer *at = NULL;
  if (!st) st = kdc_frontend_fixed_batch(m, &fixed, &at);
  if (!st && fixed >= 0)
    printf("Batch: %lld, fixed by the batch_shape of input \"%s\" (kdc compile uses it; a "
           "different --batch is an error)\n", (long long)fixed, at->name);
  kdc_frontend_free(m);
  return st ? cli_fail(st) : 0;
}
