/* bench/bench_compile.c: see bench_compile.h. */
#include "bench_compile.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "codegen/codegen.h"
#include "frontend/frontend.h"
#include "frontend/layout.h"

static void check(const char *who, kdc_status st) {
  if (!st) return;
  fprintf(stderr, "%s: %s\n", who, kdc_status_message(st));
  exit(1);
}

double bench_compile(const char *who, const bench_compile_opts *o, const char *out) {
  double t0 = bench_now();
  kdc_mesh mesh;
  kdc_layout *l = NULL;
  kdc_keras_model *km = NULL;
  kdc_module *mod = NULL;
  if (o->mesh) check(who, kdc_mesh_parse(o->mesh, NULL, &mesh));
  if (o->layout) {
    check(who, kdc_layout_load(o->layout, &l));
    if (o->mesh) check(who, kdc_layout_check(l, &mesh));
  }
  check(who, kdc_frontend_load(o->model, &km));
  kdc_lower_options lo = {.batch = o->batch, .mesh = o->mesh ? &mesh : NULL, .layout = l,
                          .train_forward = o->train != NULL};
  check(who, kdc_frontend_lower(km, &lo, &mod));
  check(who, kdc_frontend_bind_weights(km, mod, o->weights, o->seed));
  kdc_pass_options po;
  memset(&po, 0, sizeof po);
  po.train = o->train;
  check(who, kdc_pass_pipeline_run(mod, &po));
  kdc_codegen_options co;
  memset(&co, 0, sizeof co);
  static const char *const funcs[] = {"predict", "train_step", "evaluate"};
  if (o->train) co.funcs = funcs, co.n_funcs = 3;
  check(who, kdc_codegen_cpu_plan(mod, &co, out));
  kdc_ir_module_destroy(mod);
  kdc_frontend_free(km);
  kdc_layout_free(l);
  return bench_now() - t0;
}
