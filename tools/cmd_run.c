/*
 * `kdc run`: feeds .npy arrays through a plan's predict function
 * (kdc_plan_predict, api/plan.c: batches of the compiled batch size, a last
 * partial batch zero-padded and its padding rows dropped) and writes .npy
 * outputs.  Arrays are GLOBAL: a plan compiled for a mesh runs on that many
 * virtual devices in this process, splitting inputs and gathering outputs
 * by their shardings (--threads caps the threads, --collective-timeout
 * SECONDS bounds how long a collective waits for a device, default 60).
 * Every input is checked against the plan before anything runs; outputs
 * are written atomically only after every batch succeeded.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/io.h"
#include "common/trace.h"
#include "kdc/kdc.h"
#include "tools/cli.h"
#include "tools/run_place.h"

enum { MAX_IO = 64 };

typedef struct run_opts {
  const char *plan;
  const char *inputs[MAX_IO], *outputs[MAX_IO];
  int n_inputs, n_outputs;
  bool print;
  const char *initial;        /* --initial-weights W: a checkpoint's weights (training plan) */
  kdc_run_options ro;         /* --threads, --collective-timeout, --cache-dir, placement */
} run_opts;

static kdc_status parse(int argc, char **argv, run_opts *o) {
  cli_args a = {argc, argv, 0};
  kdc_status st = NULL;
  const char *v;
  int64_t x;
  memset(o, 0, sizeof *o);
  kdc_run_options_init(&o->ro);
  while (a.i < a.argc && !st) {
    if (cli_flag_value(&a, "--input", &v, &st)) {
      if (st) break;
      if (o->n_inputs == MAX_IO) st = KDC_ERR(KDC_INVALID_INPUT, "run: more than %d --input", MAX_IO);
      else o->inputs[o->n_inputs++] = v;
    } else if (cli_flag_value(&a, "--output", &v, &st) || cli_flag_value(&a, "-o", &v, &st)) {
      if (st) break;
      if (o->n_outputs == MAX_IO) st = KDC_ERR(KDC_INVALID_INPUT, "run: more than %d --output", MAX_IO);
      else o->outputs[o->n_outputs++] = v;
    } else if (cli_flag_value(&a, "--cache-dir", &o->ro.cache_dir, &st) ||
               cli_flag_value(&a, "--initial-weights", &o->initial, &st)) {
    } else if (cli_flag_value(&a, "--threads", &v, &st)) {
      if (!st) st = cli_parse_i64("--threads", v, 1, 4096, &x);
      if (!st) o->ro.threads = (int)x;
    } else if (cli_flag_value(&a, "--collective-timeout", &v, &st)) {
      if (!st) st = cli_parse_double("--collective-timeout", v, &o->ro.collective_timeout_s);
      if (!st && !(o->ro.collective_timeout_s > 0))
        st = KDC_ERR(KDC_INVALID_INPUT, "run: --collective-timeout must be > 0 seconds, got %s", v);
    } else if (run_place_flag(&a, &o->ro, &st)) {
    } else if (cli_flag(&a, "--print")) {
      o->print = true;
    } else if (a.argv[a.i][0] != '-' && !o->plan) {
      o->plan = a.argv[a.i++];
    } else {
      st = cli_unknown(&a);
    }
  }
  if (!st && !o->plan) st = KDC_ERR(KDC_INVALID_INPUT, "run: no plan given (see kdc --help)");
  if (!st && o->n_outputs == 0 && !o->print)
    st = KDC_ERR(KDC_INVALID_INPUT, "run: give --output Y.npy (or --print)");
  return st;
}

static void shape_str(int rank, const int64_t *dims, char *buf, size_t n) {
  size_t k = (size_t)snprintf(buf, n, "(");
  for (int i = 0; i < rank && k < n; i++)
    k += (size_t)snprintf(buf + k, n - k, "%s%" PRId64, i ? ", " : "", dims[i]);
  if (k < n) snprintf(buf + k, n - k, rank == 1 ? ",)" : ")");
}

/* Prints |t|-shaped data numpy-like, at most 8 rows of at most 10 values. */
static void print_array(const char *name, kdc_io_dtype dt, int rank, const int64_t *dims,
                        const void *data) {
  char sh[160];
  shape_str(rank, dims, sh, sizeof sh);
  printf("%s %s %s\n", name, kdc_io_dtype_name(dt), sh);
  int64_t rows = rank ? dims[0] : 1, cols = 1;
  for (int d = 1; d < rank; d++) cols *= dims[d];
  for (int64_t r = 0; r < rows && r < 8; r++) {
    printf("  [");
    for (int64_t c = 0; c < cols && c < 10; c++) {
      int64_t i = r * cols + c;
      if (dt == KDC_IO_DTYPE_F32) printf("%s%.6g", c ? " " : "", ((const float *)data)[i]);
      else if (dt == KDC_IO_DTYPE_I32) printf("%s%d", c ? " " : "", ((const int32_t *)data)[i]);
      else if (dt == KDC_IO_DTYPE_I64) printf("%s%" PRId64, c ? " " : "", ((const int64_t *)data)[i]);
      else printf("%s%d", c ? " " : "", ((const uint8_t *)data)[i]);
    }
    printf("%s]\n", cols > 10 ? " ..." : "");
  }
  if (rows > 8) printf("  ... (%" PRId64 " rows)\n", rows);
}

typedef struct run_state {
  size_t n_in, n_out;
  kdc_npy_array in[MAX_IO];
  kdc_array ain[MAX_IO], aout[MAX_IO];
} run_state;

static kdc_status predict(kdc_plan *plan, const char *path, const char *const *inputs,
                          size_t n_inputs, const char *const *outputs, size_t n_outputs,
                          bool print, run_state *s) {
  s->n_in = kdc_plan_input_count(plan);
  s->n_out = kdc_plan_output_count(plan);
  if (s->n_in > MAX_IO || s->n_out > MAX_IO)
    return KDC_ERR(KDC_UNSUPPORTED, "%s: more than %d inputs or outputs", path, MAX_IO);
  if (n_inputs != s->n_in)
    return KDC_ERR(KDC_INVALID_INPUT, "%s: the plan takes %zu input(s), %zu given", path,
                   s->n_in, n_inputs);
  if (n_outputs && n_outputs != s->n_out)
    return KDC_ERR(KDC_INVALID_INPUT, "%s: the plan has %zu output(s), %zu --output given", path,
                   s->n_out, n_outputs);
  int64_t rows = 0;
  for (size_t i = 0; i < s->n_in; i++) {
    KDC_RETURN_IF_ERROR(kdc_npy_read(inputs[i], &s->in[i]));
    kdc_array *a = &s->ain[i];
    a->data = s->in[i].data, a->dtype = (int)s->in[i].dtype, a->rank = s->in[i].rank;
    memcpy(a->dims, s->in[i].dims, sizeof a->dims);
    a->name = inputs[i];
    if (i == 0) rows = a->rank ? a->dims[0] : 0;
  }
  /* outputs: [rows, ...] of each output's dtype; one that does not fit in
   * memory is an error naming the plan and the output (exit 3) */
  for (size_t k = 0; k < s->n_out; k++) {
    kdc_tensor_info t;
    KDC_RETURN_IF_ERROR(kdc_plan_output(plan, k, &t));
    kdc_array *a = &s->aout[k];
    a->dtype = t.dtype, a->rank = t.rank;
    memcpy(a->dims, t.dims, sizeof a->dims);
    uint64_t all = UINT64_MAX;
    if (t.rank >= 1 && t.dims[0] > 0 && rows >= 0 &&
        !__builtin_mul_overflow(t.bytes / (uint64_t)t.dims[0], (uint64_t)rows, &all))
      a->dims[0] = rows;
    a->data = all < SIZE_MAX ? calloc(1, (size_t)all + 1) : NULL;
    if (!a->data)
      return KDC_ERR(KDC_OUT_OF_MEMORY, "%s: output \"%s\": cannot allocate %llu bytes", path,
                     t.name, (unsigned long long)all);
  }
  kdc_trace("inputs read (%zu .npy)", s->n_in);
  KDC_RETURN_IF_ERROR(kdc_plan_predict(plan, s->ain, s->n_in, s->aout, s->n_out));
  kdc_trace("predict done");
  for (size_t k = 0; k < s->n_out; k++) {
    kdc_tensor_info t;
    KDC_RETURN_IF_ERROR(kdc_plan_output(plan, k, &t));
    const kdc_array *a = &s->aout[k];
    if (kdc_plan_process_id(plan) != 0) break;  /* processes: process 0 writes */
    if (print) print_array(t.name, (kdc_io_dtype)t.dtype, t.rank, a->dims, a->data);
    if (n_outputs)
      KDC_RETURN_IF_ERROR(kdc_npy_write(outputs[k], (kdc_io_dtype)t.dtype, t.rank, a->dims,
                                        a->data));
  }
  return NULL;
}

static void run_state_free(run_state *s) {
  for (int i = 0; i < MAX_IO; i++) {
    kdc_npy_free(&s->in[i]);
    free(s->aout[i].data);
  }
}

kdc_status cli_predict(kdc_plan *plan, const char *path, const char *const *inputs,
                       size_t n_inputs, const char *const *outputs, size_t n_outputs) {
  run_state s;
  memset(&s, 0, sizeof s);
  kdc_status st = predict(plan, path, inputs, n_inputs, outputs, n_outputs, false, &s);
  run_state_free(&s);
  return st;
}

static kdc_status run(const run_opts *o, run_state *s, kdc_plan **plan, kdc_trainer **train) {
  /* predict is all this command runs: only its kernels are compiled (with
   * --initial-weights the trainer re-points the weights, so all of them) */
  kdc_run_options ro = o->ro;
  ro.predict_only = !o->initial;
  KDC_RETURN_IF_ERROR(kdc_plan_load(o->plan, &ro, plan));
  if (o->initial) {  /* the checkpoint's weights replace the plan's (state.c re-points them) */
    if (!kdc_plan_has_training(*plan))
      return KDC_ERR(KDC_INVALID_INPUT, "%s: --initial-weights needs a training plan (compiled "
                     "with --loss or a compile_config); for this plan, compile the model with "
                     "--weights %s", o->plan, o->initial);
    KDC_RETURN_IF_ERROR(kdc_trainer_create(*plan, train));
    KDC_RETURN_IF_ERROR(kdc_trainer_load_weights(*train, o->initial));
  }
  return predict(*plan, o->plan, o->inputs, (size_t)o->n_inputs, o->outputs,
                 (size_t)o->n_outputs, o->print, s);
}

int kdc_cmd_run(int argc, char **argv) {
  for (int i = 0; i < argc; i++)
    if (!strcmp(argv[i], "--fit") || !strcmp(argv[i], "--evaluate")) return kdc_cmd_fit(argc, argv);
  run_opts o;
  run_state s;
  kdc_plan *plan = NULL;
  kdc_trainer *train = NULL;
  memset(&s, 0, sizeof s);
  kdc_status st = parse(argc, argv, &o);
  if (!st) {
    /* every output appears, or none (and never over an input) */
    kdc_file_arg out[MAX_IO], in[MAX_IO + 2] = {{"the plan", o.plan}, {"--initial-weights", o.initial}};
    for (int i = 0; i < o.n_outputs; i++) out[i] = (kdc_file_arg){"--output", o.outputs[i]};
    for (int i = 0; i < o.n_inputs; i++) in[i + 2] = (kdc_file_arg){"--input", o.inputs[i]};
    st = kdc_outputs_begin(out, (size_t)o.n_outputs, in, (size_t)o.n_inputs + 2);
  }
  if (!st) st = run(&o, &s, &plan, &train);
  st = cli_outputs_end(st);
  kdc_trace(st ? "failed" : "outputs written (.npy, renamed into place)");
  run_state_free(&s);
  kdc_trainer_free(train);
  kdc_plan_free(plan);
  kdc_trace("plan freed");
  return run_place_end(st);
}
