/* `kdc compile`: model file -> frontend -> passes -> codegen -> plan.bin. */
#include <stdio.h>
#include <string.h>

#include "codegen/codegen.h"
#include "frontend/frontend.h"
#include "passes/passes.h"
#include "tools/cli.h"

typedef struct compile_opts {
  const char *model, *out, *weights, *dump_dir;
  int64_t batch;
  uint64_t seed;
  bool print_ir;
} compile_opts;

static kdc_status parse(int argc, char **argv, compile_opts *o) {
  cli_args a = {argc, argv, 0};
  kdc_status st = NULL;
  const char *v;
  memset(o, 0, sizeof *o);
  o->batch = 32;
  while (a.i < a.argc && !st) {
    if (cli_flag_value(&a, "-o", &o->out, &st) || cli_flag_value(&a, "--output", &o->out, &st) ||
        cli_flag_value(&a, "--weights", &o->weights, &st) ||
        cli_flag_value(&a, "--dump-ir", &o->dump_dir, &st))
      continue;
    if (cli_flag_value(&a, "--batch", &v, &st)) {
      if (!st) st = cli_parse_i64("--batch", v, 1, (int64_t)1 << 30, &o->batch);
    } else if (cli_flag_value(&a, "--seed", &v, &st)) {
      if (!st) st = cli_parse_u64("--seed", v, &o->seed);
    } else if (cli_flag(&a, "--print-ir-after-all")) {
      o->print_ir = true;
    } else if (a.argv[a.i][0] != '-' && !o->model) {
      o->model = a.argv[a.i++];
    } else {
      st = cli_unknown(&a);
    }
  }
  if (!st && !o->model) st = KDC_ERR(KDC_INVALID_INPUT, "compile: no model file given (see kdc --help)");
  if (!st && !o->out) st = KDC_ERR(KDC_INVALID_INPUT, "compile: no output plan given (-o PLAN)");
  return st;
}

static kdc_status compile(const compile_opts *o) {
  kdc_keras_model *km = NULL;
  kdc_module *mod = NULL;
  kdc_status st = kdc_frontend_load(o->model, &km);
  if (!st) {
    kdc_lower_options lo = {.batch = o->batch};
    st = kdc_frontend_lower(km, &lo, &mod);
  }
  if (!st) st = kdc_frontend_bind_weights(km, mod, o->weights, o->seed);
  if (!st) {
    kdc_pass_options po;
    memset(&po, 0, sizeof po);
    po.dump_dir = o->dump_dir;
    po.print_after_all = o->print_ir ? stderr : NULL;
    st = kdc_pass_pipeline_run(mod, &po);
  }
  if (!st) {
    kdc_codegen_options co;
    memset(&co, 0, sizeof co);
    st = kdc_codegen_cpu_plan(mod, &co, o->out);
  }
  kdc_ir_module_destroy(mod);
  kdc_frontend_free(km);
  return st;
}

int kdc_cmd_compile(int argc, char **argv) {
  compile_opts o;
  kdc_status st = parse(argc, argv, &o);
  if (!st) st = compile(&o);
  return st ? cli_fail(st) : 0;
}
