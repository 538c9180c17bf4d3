/* bench/bench_compile.c: see bench_compile.h. */
#include "bench_compile.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "codegen/codegen.h"
#include "frontend/frontend.h"
#include "frontend/layout.h"
#include "runtime/runtime.h"
#include <unistd.h>

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

struct kdc_rt_plan *bench_allreduce_plan(const char *who, int devices, int64_t n,
                                         const struct kdc_rt_options *ro) {
  return bench_collective_plan(who, devices, n, false, ro);
}

struct kdc_rt_plan *bench_collective_plan(const char *who, int devices, int64_t n, bool gather,
                                          const struct kdc_rt_options *ro) {
  kdc_module *m = kdc_ir_module_create("allreduce");
  m->mesh.naxes = 1;
  strcpy(m->mesh.names[0], "x");
  m->mesh.sizes[0] = devices;
  kdc_func *f = kdc_ir_func_create(m, "predict");
  kdc_type t = kdc_type_make(KDC_DTYPE_F32, 1, &n);
  kdc_value_id x = kdc_ir_parameter(f, KDC_PARAM_INPUT, "x", &t);
  kdc_attrs a;
  memset(&a, 0, sizeof a);
  a.coll.naxes = 1;
  int64_t ng = n * devices;
  kdc_type tg = kdc_type_make(KDC_DTYPE_F32, 1, &ng);
  kdc_value_id y = kdc_ir_append(f, gather ? KDC_OP_ALL_GATHER : KDC_OP_ALL_REDUCE,
                                 gather ? &tg : &t, 1, &x, &a);
  kdc_ir_add_result(f, y, "y");
  check(who, kdc_ir_verify_module(m));
  check(who, kdc_pass_fuse(m, NULL));
  check(who, kdc_pass_plan_memory(m, NULL));
  char path[] = "/tmp/kdc_bench_coll_XXXXXX";
  int fd = mkstemp(path);
  if (fd < 0) check(who, KDC_ERR(KDC_IO_ERROR, "mkstemp"));
  close(fd);
  check(who, kdc_codegen_cpu_plan(m, NULL, path));
  kdc_rt_plan *p;
  check(who, kdc_rt_plan_load_with(path, ro, &p));
  unlink(path);
  kdc_ir_module_destroy(m);
  return p;
}
