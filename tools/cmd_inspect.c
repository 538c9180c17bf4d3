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
#include "tools/cli.h"

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
