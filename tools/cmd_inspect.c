/*
 * `kdc inspect FILE`: a plan (by its magic) is described; anything else is
 * read as a Keras model and summarised like model.summary().  The texts
 * are the C API's (kdc_plan_file_describe, kdc_model_summary: api/
 * describe.c).
 *   --explain NAME   why value NAME (a weight path, an input, an output or a
 *                    layer name) has its sharding: the chain of rules and ops
 *                    recorded at compile time (the plan's EXPLAIN section).
 *   --sharding NAME  how input, output or weight NAME is laid out over the
 *                    devices: a grid of blocks with the device ids holding
 *                    each (runtime/describe_sharding.c).
 */
#include <stdio.h>
#include <string.h>

#include "kdc/kdc.h"
#include "runtime/place.h"
#include "tools/cli.h"

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

/* The plan's description (read and checked, no code compiled), then the
 * placement. */
static int describe_plan(const char *file) {
  kdc_run_options ro;
  kdc_run_options_init(&ro);
  ro.describe_only = 1;
  kdc_plan *p = NULL;
  char *text = NULL;
  kdc_status st = kdc_plan_load(file, &ro, &p);
  if (!st) st = kdc_plan_describe(p, KDC_DESCRIBE_PLAN, NULL, &text);
  if (text) fputs(text, stdout);
  kdc_free(text);
  int64_t nd = kdc_plan_device_count(p);
  kdc_plan_free(p);
  if (!st) st = placement(nd);
  return st ? cli_fail(st) : 0;
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
  bool plan = kdc_is_plan_file(file);
  const char *flag = ptx ? "ptx" : explain_name ? "explain" : sharding_name ? "sharding"
                     : collectives ? "collectives" : NULL;
  if (flag && !plan) return cli_fail(KDC_ERR(KDC_INVALID_INPUT, "%s: --%s needs a plan", file, flag));
  char *text = NULL;
  if (plan && !flag) return describe_plan(file);
  if (!plan) st = kdc_model_summary(file, NULL, 0, &text);
  else if (ptx) st = kdc_plan_file_describe(file, KDC_DESCRIBE_PTX, NULL, &text);
  else if (explain_name) st = kdc_plan_file_describe(file, KDC_DESCRIBE_EXPLAIN, explain_name, &text);
  else if (sharding_name) st = kdc_plan_file_describe(file, KDC_DESCRIBE_SHARDING, sharding_name, &text);
  else st = kdc_plan_file_describe(file, collectives ? KDC_DESCRIBE_COLLECTIVES : KDC_DESCRIBE_PLAN,
                                   NULL, &text);
  if (text) fputs(text, stdout);
  kdc_free(text);
  return st ? cli_fail(st) : 0;
}
