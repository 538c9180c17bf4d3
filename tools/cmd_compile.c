/* `kdc compile`: flags -> kdc_compile_file (api/compile.c) -> plan.bin. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/io.h"
#include "kdc/kdc.h"
#include "tools/cli.h"

enum { KDC_MAX_INPUT_SHAPES = 64 };

typedef struct compile_flags {
  kdc_compile_options co;
  const char *out;
  const char *input_shapes[KDC_MAX_INPUT_SHAPES]; /* --input-shape, in order */
} compile_flags;

static kdc_status parse(int argc, char **argv, compile_flags *f) {
  cli_args a = {argc, argv, 0};
  kdc_status st = NULL;
  const char *v;
  kdc_compile_options *o = &f->co;
  int64_t x;
  while (a.i < a.argc && !st) {
    if (cli_flag_value(&a, "-o", &f->out, &st) || cli_flag_value(&a, "--output", &f->out, &st) ||
        cli_flag_value(&a, "--weights", &o->weights_path, &st) ||
        cli_flag_value(&a, "--dump-ir", &o->dump_ir_dir, &st) ||
        cli_flag_value(&a, "--mesh", &o->mesh, &st) || cli_flag_value(&a, "--axes", &o->axes, &st) ||
        cli_flag_value(&a, "--layout", &o->layout_path, &st) ||
        cli_flag_value(&a, "--layout-match", &o->layout_match, &st) ||
        cli_flag_value(&a, "--loss", &o->loss, &st) ||
        cli_flag_value(&a, "--optimizer", &o->optimizer, &st) ||
        cli_flag_value(&a, "--target", &o->target, &st) ||
        cli_flag_value(&a, "--matmul-precision", &o->matmul_precision, &st) ||
        cli_flag_value(&a, "--memory-per-device", &o->memory_per_device, &st) ||
        cli_flag_value(&a, "--objective", &o->objective, &st) ||
        cli_flag_value(&a, "--write-layout", &o->write_layout_path, &st) ||
        cli_flag_value(&a, "--machine", &o->machine_path, &st))
      continue;
    if (cli_flag_value(&a, "--sm", &v, &st)) {
      if (!st) st = cli_parse_i64("--sm", v, 1, 1000, &x);
      if (!st) o->sm = (int)x;
      continue;
    }
    if (cli_flag_value(&a, "--input-shape", &v, &st)) {
      if (!st && o->n_input_shapes == KDC_MAX_INPUT_SHAPES)
        st = KDC_ERR(KDC_INVALID_INPUT, "--input-shape: more than %d given", KDC_MAX_INPUT_SHAPES);
      if (!st) f->input_shapes[o->n_input_shapes++] = v;
      continue;
    }
    if (cli_flag_value(&a, "--batch", &v, &st)) {
      if (!st) st = cli_parse_i64("--batch", v, 1, (int64_t)1 << 30, &o->batch);
      o->batch_given = 1;
    } else if (cli_flag_value(&a, "--seed", &v, &st)) {
      if (!st) st = cli_parse_u64("--seed", v, &o->seed);
    } else if (cli_flag_value(&a, "--learning-rate", &v, &st)) {
      if (!st) st = cli_parse_double("--learning-rate", v, &o->learning_rate);
      if (!st && !(o->learning_rate > 0 && isfinite(o->learning_rate)))
        st = KDC_ERR(KDC_INVALID_INPUT, "--learning-rate \"%s\": expected a positive finite number", v);
    } else if (cli_flag(&a, "--from-logits")) {
      o->from_logits = 1;
    } else if (cli_flag(&a, "--no-shard-update")) {
      o->no_shard_update = 1;
    } else if (cli_flag(&a, "--random-init")) {
      o->random_init = 1;
    } else if (cli_flag(&a, "--print-ir-after-all")) {
      o->print_ir_after_all = 1;
    } else if (a.argv[a.i][0] != '-' && !o->model_path) {
      o->model_path = a.argv[a.i++];
    } else {
      st = cli_unknown(&a);
    }
  }
  o->input_shapes = f->input_shapes;
  if (!st && !o->model_path) st = KDC_ERR(KDC_INVALID_INPUT, "compile: no model file given (see kdc --help)");
  if (!st && !f->out) st = KDC_ERR(KDC_INVALID_INPUT, "compile: no output plan given (-o PLAN)");
  return st;
}

int kdc_cmd_compile(int argc, char **argv) {
  compile_flags f;
  memset(&f, 0, sizeof f);
  kdc_compile_options_init(&f.co);
  kdc_status st = parse(argc, argv, &f);
  if (!st) {
    /* the plan appears only if everything succeeded (and never over an input) */
    bool is_auto = f.co.layout_path && !strcmp(f.co.layout_path, "auto");
    kdc_file_arg out[] = {{"-o", f.out}, {"--write-layout", f.co.write_layout_path}};
    kdc_file_arg in[] = {{"the model", f.co.model_path}, {"--weights", f.co.weights_path},
                         {"--layout", is_auto ? NULL : f.co.layout_path},
                         {"--machine", f.co.machine_path}};
    st = kdc_outputs_begin(out, 2, in, 4);
  }
  char *warnings = NULL;
  if (!st) st = kdc_compile_file(&f.co, f.out, &warnings);
  st = cli_outputs_end(st);
  /* notes only with a plan: a failure is its one located line */
  if (warnings && !st) fputs(warnings, stderr);
  kdc_free(warnings);
  return st ? cli_fail(st) : 0;
}
