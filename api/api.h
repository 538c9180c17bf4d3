/*
 * api/api.h: the internal header of api/, the implementation of the public
 * C API (include/kdc/kdc.h, docs/api.md).  api/ owns what the `kdc` command
 * line and the Python package share: the compile pipeline (frontend ->
 * passes -> codegen) from options, loading plans into a process's place in
 * a job, predict on caller arrays, the training loop's state and history,
 * and the texts of `kdc inspect`.  Flag parsing stays in tools/.
 */
#ifndef KDC_API_API_H
#define KDC_API_API_H

#include <stdbool.h>
#include <stdio.h>

#include "kdc/kdc.h"
#include "kdc/status.h"
#include "ir/ir.h"
#include "runtime/runtime.h"

struct kdc_plan {
  kdc_rt_plan *rt;
  char *path;                 /* the plan file it was loaded from, or NULL */
  void *bytes;                /* a compiled plan's bytes (save, explain), or NULL */
  size_t size;
  char *warnings;             /* the compile's warnings, "" when none */
  int process_id;
  kdc_trainer *trainer;       /* the live one, if any (at most one) */
};

/* keras_state.c: the optimizer variables of the Keras file |weights|
 * (`kdc compile --weights`), as the TRAIN_STATE section of a plan whose
 * train_step is in |mod| and whose KERAS section is |keras_section|, into
 * |out| (left empty when there is nothing to restore; a one-line note on
 * |warnings| when the plan does not train or trains with another
 * optimizer). */
struct kdc_module;
struct kdc_train_options;
struct kdc_buf;
kdc_status kdc_api_keras_train_state(const char *weights, const struct kdc_module *mod,
                                     const char *keras_section, bool train_on,
                                     const struct kdc_train_options *train, FILE *warnings,
                                     struct kdc_buf *out);
/* compile_config.c: training options from |km|'s Keras 3 compile_config;
 * *|found| false when it has none (or no loss).  |file| names errors. */
struct kdc_keras_model;
struct kdc_train_options;
kdc_status kdc_api_compile_config(const struct kdc_keras_model *km, const char *file,
                                  struct kdc_train_options *t, bool *found);

/* place.c: resolves the process's place in its job for a load of |plan|
 * (once per process) and fills |ro|'s process fields; refuses a CUDA plan
 * this machine cannot run unless |cpu_only|. */
kdc_status kdc_api_place(const kdc_run_options *o, const char *plan, kdc_rt_options *ro);
/* plan.c: loads |path| (placing the process first) into a new kdc_plan. */
kdc_status kdc_api_plan_open(const char *path, const kdc_run_options *o, kdc_plan **out);

/* The rt options of |o| (NULL: defaults). */
void kdc_api_rt_options(const kdc_run_options *o, kdc_rt_options *ro);

/* convert.c: |a| checked against |t| (same dims after the first; for
 * |labels|, the same values per row) into |*out|: |a->data| itself when the
 * dtype matches, else a converted copy in *|owned| (free it).  |what| names
 * the array in messages.  |classes| > 0: |t| holds class ids, each checked
 * to be an exact integer in [0, classes). */
kdc_status kdc_api_convert(const char *what, const kdc_rt_tensor_info *t, const kdc_array *a,
                           bool labels, int64_t classes, const void **out, void **owned);
/* |a|'s name in messages: its own, else "<kind> <i> ("<plan_name>")". */
void kdc_api_array_name(const kdc_array *a, const char *kind, size_t i, const char *plan_name,
                        char *buf, size_t n);
/* "(2, 3)" */
void kdc_api_shape_str(int rank, const int64_t *dims, char *buf, size_t n);

/* A tensor info for the public API. */
void kdc_api_info(const kdc_rt_tensor_info *t, kdc_tensor_info *out);

/* auto_layout.c: `--layout auto` (docs/layout.md).  Searches LayoutMaps for
 * |km| on |mesh| at |batch| (|train| NULL: predict only), scores each with
 * passes/step_cost.c and fills |out|: the chosen layout.json text (NULL when
 * DataParallel over every axis wins: no layout), its name and predicted step
 * time, the METADATA "auto_layout" object and EXPLAIN blocks
 * ("@@ auto_layout NAME").  Notes (the choice, the runner-up, what a memory
 * limit gave up) go to |notes|.  No layout under the memory limit: a
 * located error naming the smallest peak found. */
struct kdc_keras_model;
struct kdc_machine;
typedef struct kdc_auto_options {
  int64_t memory_limit;       /* bytes per device; 0: none */
  bool objective_memory;      /* --objective memory (else time) */
  const char *machine_path;   /* --machine FILE; NULL: kdc_machine_defaults */
} kdc_auto_options;
typedef struct kdc_auto_result {
  char *name, *layout_text, *metadata, *explain;
  double predicted_step_s;
} kdc_auto_result;
kdc_status kdc_api_auto_layout(const struct kdc_keras_model *km, const kdc_mesh *mesh,
                               int64_t batch, const struct kdc_train_options *train,
                               uint64_t seed, const kdc_auto_options *ao, FILE *notes,
                               kdc_auto_result *out);
void kdc_auto_result_free(kdc_auto_result *r);
/* The predicted cost of |layout_text| (NULL: DataParallel) for |km|, as
 * the search scores its candidates (bench/bench_auto.c). */
struct kdc_step_cost;
kdc_status kdc_api_layout_cost(const struct kdc_keras_model *km, const kdc_mesh *mesh,
                               int64_t batch, const struct kdc_train_options *train,
                               uint64_t seed, const char *machine_path, const char *layout_text,
                               struct kdc_step_cost *out);
/* A machine description file (JSON; docs/sharding.md "Cost model") over the
 * defaults; |path| NULL: the defaults. */
kdc_status kdc_api_machine_load(const char *path, struct kdc_machine *mc);
/* "512MiB", "2GB", "1000000" -> bytes; errors name |flag|. */
kdc_status kdc_api_parse_size(const char *flag, const char *s, int64_t *out);

#endif
