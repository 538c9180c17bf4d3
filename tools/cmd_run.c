/*
 * `kdc run`: feeds .npy arrays through a plan's predict function in batches
 * of the compiled batch size (a last partial batch is zero-padded and its
 * padding rows dropped from the outputs), and writes .npy outputs.  Arrays
 * are GLOBAL: a plan compiled for a mesh runs on that many virtual devices
 * in this process, splitting inputs and gathering outputs by their
 * shardings (--threads caps the threads, --collective-timeout SECONDS bounds
 * how long a collective waits for a device, default 60).  Every
 * input is checked against the plan before anything runs; outputs are
 * written atomically only after every batch succeeded.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/io.h"
#include "runtime/runtime.h"
#include "tools/cli.h"
#include "tools/run_place.h"

enum { MAX_IO = 64 };

typedef struct run_opts {
  const char *plan;
  const char *inputs[MAX_IO], *outputs[MAX_IO];
  int n_inputs, n_outputs;
  bool print;
  int64_t threads;
  double collective_timeout;  /* seconds, 0 = the runtime's default (60) */
  const char *cache_dir;      /* --cache-dir: the compiled-code cache (NULL: $KDC_CACHE_DIR) */
  const char *initial;        /* --initial-weights W: a checkpoint's weights (training plan) */
  run_place place;            /* --coordinator ... (run_place.c, docs/processes.md) */
} run_opts;

static kdc_status parse(int argc, char **argv, run_opts *o) {
  cli_args a = {argc, argv, 0};
  kdc_status st = NULL;
  const char *v;
  memset(o, 0, sizeof *o);
  run_place_init_opts(&o->place);
  while (a.i < a.argc && !st) {
    if (cli_flag_value(&a, "--input", &v, &st)) {
      if (st) break;
      if (o->n_inputs == MAX_IO) st = KDC_ERR(KDC_INVALID_INPUT, "run: more than %d --input", MAX_IO);
      else o->inputs[o->n_inputs++] = v;
    } else if (cli_flag_value(&a, "--output", &v, &st) || cli_flag_value(&a, "-o", &v, &st)) {
      if (st) break;
      if (o->n_outputs == MAX_IO) st = KDC_ERR(KDC_INVALID_INPUT, "run: more than %d --output", MAX_IO);
      else o->outputs[o->n_outputs++] = v;
    } else if (cli_flag_value(&a, "--cache-dir", &o->cache_dir, &st) ||
               cli_flag_value(&a, "--initial-weights", &o->initial, &st)) {
    } else if (cli_flag_value(&a, "--threads", &v, &st)) {
      if (!st) st = cli_parse_i64("--threads", v, 1, 4096, &o->threads);
    } else if (cli_flag_value(&a, "--collective-timeout", &v, &st)) {
      if (!st) st = cli_parse_double("--collective-timeout", v, &o->collective_timeout);
      if (!st && !(o->collective_timeout > 0))
        st = KDC_ERR(KDC_INVALID_INPUT, "run: --collective-timeout must be > 0 seconds, got %s", v);
    } else if (run_place_flag(&a, &o->place, &st)) {
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

static kdc_status check_input(const char *path, const kdc_rt_tensor_info *t, kdc_npy_array *a) {
  char want[160], got[160];
  shape_str(t->rank, t->dims, want, sizeof want);
  shape_str(a->rank, a->dims, got, sizeof got);
  bool ok = a->rank == t->rank && t->rank >= 1;
  for (int d = 1; ok && d < t->rank; d++) ok = a->dims[d] == t->dims[d];
  if (!ok)
    return KDC_ERR(KDC_INVALID_INPUT,
                   "%s: shape %s does not match the plan's input \"%s\" (batch, ...) = %s", path,
                   got, t->name, want);
  return cli_convert_array(path, t, 0, a);  /* as Keras converts inputs (arrays.c) */
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
  kdc_rt_plan *plan;
  size_t n_in, n_out;
  kdc_npy_array in[MAX_IO];
  void *out[MAX_IO];            /* whole outputs, rows x ... */
  int64_t out_dims[MAX_IO][KDC_IO_MAX_RANK];
  void *bin[MAX_IO], *bout[MAX_IO]; /* one batch */
} run_state;

/* A zeroed host buffer of |bytes| for tensor |name| of |plan|: a plan
 * whose inputs or outputs do not fit in memory is an error naming them
 * (exit 3), not an abort. */
static kdc_status io_buffer(const char *plan, const char *what, const char *name, uint64_t bytes,
                            void **out) {
  *out = bytes < SIZE_MAX ? calloc(1, (size_t)bytes + 1) : NULL;
  if (!*out)
    return KDC_ERR(KDC_OUT_OF_MEMORY, "%s: %s \"%s\": cannot allocate %llu bytes", plan, what,
                   name, (unsigned long long)bytes);
  return NULL;
}

static kdc_status run_batches(run_state *s, const char *plan, int64_t rows) {
  const kdc_rt_tensor_info *ti0 = kdc_rt_plan_input(s->plan, 0, 0);
  int64_t batch = ti0->dims[0];
  for (size_t i = 0; i < s->n_in; i++) {
    const kdc_rt_tensor_info *t = kdc_rt_plan_input(s->plan, 0, i);
    KDC_RETURN_IF_ERROR(io_buffer(plan, "input", t->name, t->bytes, &s->bin[i]));
  }
  for (size_t o = 0; o < s->n_out; o++) {
    const kdc_rt_tensor_info *t = kdc_rt_plan_output(s->plan, 0, o);
    if (t->rank < 1 || t->dims[0] != batch)
      return KDC_ERR(KDC_UNSUPPORTED, "output \"%s\" is not batch-major (dim 0 is not the batch %" PRId64 ")",
                     t->name, batch);
    KDC_RETURN_IF_ERROR(io_buffer(plan, "output", t->name, t->bytes, &s->bout[o]));
    memcpy(s->out_dims[o], t->dims, sizeof t->dims);
    s->out_dims[o][0] = rows;
    uint64_t all;
    if (__builtin_mul_overflow(t->bytes / (uint64_t)batch, (uint64_t)rows, &all)) all = UINT64_MAX;
    KDC_RETURN_IF_ERROR(io_buffer(plan, "output", t->name, all, &s->out[o]));
  }
  for (int64_t r0 = 0; r0 < rows; r0 += batch) {
    int64_t n = rows - r0 < batch ? rows - r0 : batch;
    for (size_t i = 0; i < s->n_in; i++) {
      size_t row = kdc_rt_plan_input(s->plan, 0, i)->bytes / (uint64_t)batch;
      memset(s->bin[i], 0, row * (size_t)batch);
      memcpy(s->bin[i], (char *)s->in[i].data + row * (size_t)r0, row * (size_t)n);
    }
    KDC_RETURN_IF_ERROR(kdc_rt_plan_run(s->plan, (const void *const *)s->bin, s->bout));
    for (size_t o = 0; o < s->n_out; o++) {
      size_t row = kdc_rt_plan_output(s->plan, 0, o)->bytes / (uint64_t)batch;
      memcpy((char *)s->out[o] + row * (size_t)r0, s->bout[o], row * (size_t)n);
    }
  }
  return NULL;
}

static kdc_status predict(kdc_rt_plan *plan, const char *path, const char *const *inputs,
                          size_t n_inputs, const char *const *outputs, size_t n_outputs,
                          bool print, run_state *s) {
  s->plan = plan;
  if (kdc_rt_plan_func_count(plan) == 0 || kdc_rt_plan_find_func(plan, "predict") != 0)
    return KDC_ERR(KDC_INVALID_INPUT, "%s: the plan has no predict function", path);
  s->n_in = kdc_rt_plan_input_count(plan, 0);
  s->n_out = kdc_rt_plan_output_count(plan, 0);
  if (s->n_in > MAX_IO || s->n_out > MAX_IO)
    return KDC_ERR(KDC_UNSUPPORTED, "%s: more than %d inputs or outputs", path, MAX_IO);
  if (n_inputs != s->n_in)
    return KDC_ERR(KDC_INVALID_INPUT, "%s: the plan takes %zu input(s), %zu given", path,
                   s->n_in, n_inputs);
  if (n_outputs && n_outputs != s->n_out)
    return KDC_ERR(KDC_INVALID_INPUT, "%s: the plan has %zu output(s), %zu --output given", path,
                   s->n_out, n_outputs);
  int64_t rows = -1;
  for (size_t i = 0; i < s->n_in; i++) {
    KDC_RETURN_IF_ERROR(kdc_npy_read(inputs[i], &s->in[i]));
    KDC_RETURN_IF_ERROR(check_input(inputs[i], kdc_rt_plan_input(plan, 0, i), &s->in[i]));
    if (rows >= 0 && s->in[i].dims[0] != rows)
      return KDC_ERR(KDC_INVALID_INPUT, "%s: %" PRId64 " rows, but %s has %" PRId64, inputs[i],
                     s->in[i].dims[0], inputs[0], rows);
    rows = s->in[i].dims[0];
  }
  KDC_RETURN_IF_ERROR(run_batches(s, path, rows));
  for (size_t k = 0; k < s->n_out; k++) {
    const kdc_rt_tensor_info *t = kdc_rt_plan_output(plan, 0, k);
    if (!run_place_writes()) break;  /* processes: process 0 writes */
    if (print) print_array(t->name, t->dtype, t->rank, s->out_dims[k], s->out[k]);
    if (n_outputs)
      KDC_RETURN_IF_ERROR(kdc_npy_write(outputs[k], t->dtype, t->rank, s->out_dims[k], s->out[k]));
  }
  return NULL;
}

static void run_state_free(run_state *s) {
  for (int i = 0; i < MAX_IO; i++) {
    kdc_npy_free(&s->in[i]);
    free(s->out[i]);
    free(s->bin[i]);
    free(s->bout[i]);
  }
}

kdc_status cli_predict(kdc_rt_plan *plan, const char *path, const char *const *inputs,
                       size_t n_inputs, const char *const *outputs, size_t n_outputs) {
  run_state s;
  memset(&s, 0, sizeof s);
  kdc_status st = predict(plan, path, inputs, n_inputs, outputs, n_outputs, false, &s);
  run_state_free(&s);
  return st;
}

static kdc_status run(const run_opts *o, run_state *s, kdc_rt_plan **plan, kdc_rt_train **train) {
  kdc_rt_options ro = {.n_threads = (int)o->threads,
                       .collective_timeout_s = o->collective_timeout,
                       .cache_dir = o->cache_dir};
  KDC_RETURN_IF_ERROR(run_place_start(&o->place, o->plan, &ro));
  KDC_RETURN_IF_ERROR(kdc_rt_plan_load_with(o->plan, &ro, plan));
  if (o->initial) {  /* the checkpoint's weights replace the plan's (state.c re-points them) */
    if (kdc_rt_plan_find_func(*plan, "train_step") < 0)
      return KDC_ERR(KDC_INVALID_INPUT, "%s: --initial-weights needs a training plan (compiled "
                     "with --loss or a compile_config); for this plan, compile the model with "
                     "--weights %s", o->plan, o->initial);
    KDC_RETURN_IF_ERROR(kdc_rt_train_create(*plan, train));
    if (cli_is_keras_file(o->initial))  /* .keras / .weights.h5: through the plan's KERAS section */
      KDC_RETURN_IF_ERROR(kdc_rt_keras_load(*plan, *train, o->initial));
    else
      KDC_RETURN_IF_ERROR(kdc_rt_train_load_weights(*train, o->initial));
  }
  return predict(*plan, o->plan, o->inputs, (size_t)o->n_inputs, o->outputs,
                 (size_t)o->n_outputs, o->print, s);
}

int kdc_cmd_run(int argc, char **argv) {
  for (int i = 0; i < argc; i++)
    if (!strcmp(argv[i], "--fit") || !strcmp(argv[i], "--evaluate")) return kdc_cmd_fit(argc, argv);
  run_opts o;
  run_state s;
  kdc_rt_plan *plan = NULL;
  kdc_rt_train *train = NULL;
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
  run_state_free(&s);
  kdc_rt_train_destroy(train);
  if (plan) kdc_rt_plan_release(plan);
  int rc = st ? cli_fail(st) : 0;
  run_place_finish(rc);
  return rc;
}
