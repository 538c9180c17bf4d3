/*
 * passes/pipeline.c: the pass manager (STYLE.md 12).
 *
 * The compile pipeline is the list |pipeline| below, read top to bottom.
 * Around every pass the manager:
 *   - runs kdc_ir_verify_module (always: it is linear and cheap); a module
 *     that stops verifying after a pass is a compiler bug, reported as
 *     KDC_INTERNAL naming the pass;
 *   - with --dump-ir DIR writes the module to DIR/NN-<pass>.kir, NN counting
 *     from 00-input.kir, so `diff DIR/03-*.kir DIR/04-*.kir` shows one pass;
 *   - with --print-ir-after-all prints it to a stream under a "# -- after" line.
 * The same machinery runs any comma-separated list of pass names, which is
 * how golden tests (tests/golden) and `kdc_pass_run_one` drive single passes.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "passes/passes.h"

/* The "verify" pass: input verification, so failures are bad input. */
static kdc_status run_verify(kdc_module *m, const kdc_pass_options *opt) {
  (void)opt;
  return kdc_ir_verify_module(m);
}

/* Every pass by name.  New passes add a row here and, if they belong to the
 * compile pipeline, a line in |pipeline|. */
/* The build_training pass: a no-op unless the options ask for training. */
static kdc_status run_build_training(kdc_module *m, const kdc_pass_options *opt) {
  if (!opt || !opt->train) return NULL;
  return kdc_pass_build_training(m, opt->train);
}

static const kdc_pass all_passes[] = {
    {"verify", run_verify},
    {"infer_shapes", kdc_pass_infer_shapes},
    {"build_training", run_build_training},
    {"algebra", kdc_pass_algebra},
    {"fold", kdc_pass_fold},
    {"cse", kdc_pass_cse},
    {"dce", kdc_pass_dce},
    {"simplify", kdc_pass_simplify},
    {"fuse", kdc_pass_fuse},
    {"seed_shardings", kdc_pass_seed_shardings},
    {"propagate_shardings", kdc_pass_propagate_shardings},
    {"partition", kdc_pass_partition},
    {"drop_trivial_collectives", kdc_pass_drop_trivial_collectives},
    {"combine_collectives", kdc_pass_combine_collectives},
    {"conv_to_gemm", kdc_pass_conv_to_gemm},
    {"widen_dots", kdc_pass_widen_dots},
    {"plan_memory", kdc_pass_plan_memory},
};

/* The compile pipeline, in order.  Commented lines are the slots of passes
 * still to come; each goes exactly where its comment stands. */
static const char *const pipeline[] = {
    "verify",
    "infer_shapes",
    "build_training", /* autodiff + loss + optimizer: train_step, evaluate */
    "simplify",
    "widen_dots",          /* CPU: bf16/f16 dots as f32 dots between converts (before
                              partition: their partial sums are f32) */
    "seed_shardings",      /* provenance of the frontend's user shardings; others open */
    "propagate_shardings", /* forward/backward factor fixpoint */
    "partition",           /* local shapes and collectives: one SPMD program */
    "drop_trivial_collectives", /* collectives over size-1 axes are the identity */
    "combine_collectives", /* small independent all_reduces as one (combine_collectives.c) */
    "conv_to_gemm",        /* convolutions as im2col + one GEMM (local shapes) */
    "fuse",
    "plan_memory", /* liveness and buffer reuse (passes/plan_memory.c) */
};

int64_t kdc_pass_opt_fold_max(const kdc_pass_options *opt) {
  return opt && opt->fold_max_elements > 0 ? opt->fold_max_elements : 1 << 20;
}

int kdc_pass_opt_fuse_recompute(const kdc_pass_options *opt) {
  if (!opt || opt->fuse_max_recompute == 0) return opt && opt->cuda ? 16 : 4;
  return opt->fuse_max_recompute < 0 ? 0 : opt->fuse_max_recompute;
}

int kdc_pass_opt_fuse_recompute_big(const kdc_pass_options *opt) {
  if (opt && opt->fuse_max_recompute != 0) return kdc_pass_opt_fuse_recompute(opt);
  return 16;
}

int kdc_pass_opt_simplify_rounds(const kdc_pass_options *opt) {
  return opt && opt->simplify_max_rounds > 0 ? opt->simplify_max_rounds : 8;
}

const kdc_pass *kdc_pass_find(const char *name) {
  for (size_t i = 0; i < sizeof all_passes / sizeof all_passes[0]; i++)
    if (strcmp(all_passes[i].name, name) == 0) return &all_passes[i];
  return NULL;
}

void kdc_pass_print_names(FILE *out) {
  fputs("pipeline", out);
  for (size_t i = 0; i < sizeof all_passes / sizeof all_passes[0]; i++)
    fprintf(out, ", %s", all_passes[i].name);
}

/* State of one run: options and the dump counter. */
typedef struct runner {
  kdc_module *m;
  const kdc_pass_options *opt;
  int step; /* NN of the next dump file */
} runner;

/* Writes the module after |name| to the dump dir and/or the stream. */
static kdc_status dump(runner *r, const char *name) {
  const kdc_pass_options *opt = r->opt;
  int step = r->step++;
  if (opt && opt->after_pass) opt->after_pass(name, r->m, opt->after_pass_user);
  if (opt && opt->print_after_all) {
    fprintf(opt->print_after_all, "# -- after %s --\n", name);
    kdc_ir_print_module(opt->print_after_all, r->m);
  }
  if (!opt || !opt->dump_dir) return NULL;
  if (mkdir(opt->dump_dir, 0777) != 0 && errno != EEXIST)
    return KDC_ERR(KDC_IO_ERROR, "%s: cannot create directory: %s", opt->dump_dir, strerror(errno));
  char *path = NULL;
  if (asprintf(&path, "%s/%02d-%s.kir", opt->dump_dir, step, name) < 0)
    return KDC_ERR(KDC_OUT_OF_MEMORY, "out of memory");
  FILE *fp = fopen(path, "w");
  kdc_status st = NULL;
  if (!fp) {
    st = KDC_ERR(KDC_IO_ERROR, "%s: cannot write: %s", path, strerror(errno));
  } else {
    kdc_ir_print_module(fp, r->m);
    if (fclose(fp) != 0) st = KDC_ERR(KDC_IO_ERROR, "%s: write failed", path);
  }
  free(path);
  return st;
}

static kdc_status run_pass(runner *r, const kdc_pass *p) {
  KDC_RETURN_IF_ERROR(p->run(r->m, r->opt));
  kdc_status st = kdc_ir_verify_module(r->m);
  if (st) {
    kdc_status bug = KDC_ERR(KDC_INTERNAL, "internal error: pass %s produced invalid IR: %s",
                             p->name, kdc_status_message(st));
    kdc_status_free(st);
    return bug;
  }
  return dump(r, p->name);
}

static kdc_status run_pipeline(runner *r) {
  for (size_t i = 0; i < sizeof pipeline / sizeof pipeline[0]; i++) {
    const kdc_pass *p = kdc_pass_find(pipeline[i]);
    KDC_ASSERT(p != NULL);
    KDC_RETURN_IF_ERROR(run_pass(r, p));
  }
  return NULL;
}

kdc_status kdc_pass_pipeline_run(kdc_module *m, const kdc_pass_options *opt) {
  return kdc_pass_run_list(m, "pipeline", opt);
}

kdc_status kdc_pass_run_list(kdc_module *m, const char *names, const kdc_pass_options *opt) {
  runner r = {m, opt, 0};
  KDC_RETURN_IF_ERROR(dump(&r, "input"));
  const char *s = names;
  while (*s) {
    size_t len = strcspn(s, ", ");
    char name[64];
    if (len == 0) {
      s++;
      continue;
    }
    if (len >= sizeof name) len = sizeof name - 1;
    memcpy(name, s, len);
    name[len] = '\0';
    s += len;
    if (strcmp(name, "pipeline") == 0) {
      KDC_RETURN_IF_ERROR(run_pipeline(&r));
      continue;
    }
    const kdc_pass *p = kdc_pass_find(name);
    if (!p) {
      char *known = NULL;
      size_t n = 0;
      FILE *mem = open_memstream(&known, &n);
      kdc_pass_print_names(mem);
      fclose(mem);
      kdc_status st = KDC_ERR(KDC_INVALID_INPUT, "unknown pass '%s' (known: %s)", name, known);
      free(known);
      return st;
    }
    KDC_RETURN_IF_ERROR(run_pass(&r, p));
  }
  return NULL;
}

kdc_status kdc_pass_run_passes(kdc_module *m, const kdc_pass *passes, size_t n,
                               const kdc_pass_options *opt) {
  runner r = {m, opt, 0};
  KDC_RETURN_IF_ERROR(dump(&r, "input"));
  for (size_t i = 0; i < n; i++) KDC_RETURN_IF_ERROR(run_pass(&r, &passes[i]));
  return NULL;
}

kdc_status kdc_pass_run_one(kdc_module *m, const char *name, const kdc_pass_options *opt) {
  const kdc_pass *p = kdc_pass_find(name);
  if (!p) return kdc_pass_run_list(m, name, opt); /* same error message */
  return kdc_pass_run_passes(m, p, 1, opt);
}
