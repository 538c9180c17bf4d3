/*
 * `kdc run plan.bin --fit` and `kdc run plan.bin --evaluate`: Keras'
 * Model.fit / Model.evaluate over .npy arrays (docs/training.md, "Fit").
 *
 *   kdc run plan.bin --fit --x X.npy --y Y.npy --epochs E --batch-size B
 *       [--shuffle --seed S] [--validation-split F] [--history H.json]
 *       [--save-weights W.safetensors] [--initial-weights W.safetensors]
 *       [--predict X2.npy --output P.npy]   (predictions after training)
 *   kdc run plan.bin --evaluate --x X.npy --y Y.npy [--initial-weights W]
 *
 * A model with several inputs takes one --x per input, in input order (as
 * Keras' fit(x=[...])); a plan trained on several outputs takes one --y
 * per trained output, in output order, or --y NAME=path for each
 * (docs/training.md).
 *
 * The plan's train_step does the work on the plan's devices (the C API's
 * kdc_trainer_fit, api/train.c, over runtime/state.c, fit.c); this file
 * reads the arrays, prints Keras-like progress and writes the history.  Several
 * processes (mpirun, or --coordinator/--num-processes/--process-id:
 * docs/processes.md): every process reads the arrays and runs its devices;
 * process 0 alone prints and writes.
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/io.h"
#include "kdc/kdc.h"
#include "tools/cli.h"
#include "tools/run_place.h"

typedef struct fit_opts {
  const char *plan, *history, *save, *initial;
  const char *save_model;     /* --save-model M.keras */
  bool save_optimizer;        /* --save-optimizer: a .weights.h5 gets the optimizer too */
  const char *x[32];          /* --x per model input, in input order */
  const char *y[32];          /* --y per trained output, in output order, or NAME=path */
  const char *predict[32];    /* --predict per model input: predictions after training */
  const char *output[32];     /* --output per model output, for --predict */
  size_t n_x, n_y, n_predict, n_output;
  bool fit, evaluate, shuffle, quiet, epochs_given;
  int64_t epochs, batch;
  uint64_t seed;
  double validation_split;
  kdc_run_options ro;         /* --threads, --collective-timeout, --cache-dir, placement */
} fit_opts;

static kdc_status parse(int argc, char **argv, fit_opts *o) {
  cli_args a = {argc, argv, 0};
  kdc_status st = NULL;
  const char *v;
  int64_t x;
  memset(o, 0, sizeof *o);
  o->epochs = 1;
  o->batch = -1;
  kdc_run_options_init(&o->ro);
  while (a.i < a.argc && !st) {
    if (cli_flag_value(&a, "--y", &v, &st)) {
      if (!st && o->n_y == sizeof o->y / sizeof o->y[0])
        st = KDC_ERR(KDC_INVALID_INPUT, "run: more than %zu --y", sizeof o->y / sizeof o->y[0]);
      if (!st) o->y[o->n_y++] = v;
      continue;
    }
    if (cli_flag_value(&a, "--x", &v, &st)) {
      if (!st && o->n_x == sizeof o->x / sizeof o->x[0])
        st = KDC_ERR(KDC_INVALID_INPUT, "run: more than %zu --x", sizeof o->x / sizeof o->x[0]);
      if (!st) o->x[o->n_x++] = v;
      continue;
    }
    bool out = false;
    if (cli_flag_value(&a, "--predict", &v, &st) ||
        (out = cli_flag_value(&a, "--output", &v, &st))) {
      const char **list = out ? o->output : o->predict;
      size_t *n = out ? &o->n_output : &o->n_predict;
      if (!st && *n == 32)
        st = KDC_ERR(KDC_INVALID_INPUT, "run: more than 32 %s", out ? "--output" : "--predict");
      if (!st) list[(*n)++] = v;
      continue;
    }
    if (cli_flag_value(&a, "--history", &o->history, &st) ||
        cli_flag_value(&a, "--save-weights", &o->save, &st) ||
        cli_flag_value(&a, "--initial-weights", &o->initial, &st) ||
        cli_flag_value(&a, "--save-model", &o->save_model, &st))
      continue;
    if (cli_flag_value(&a, "--epochs", &v, &st)) {
      if (!st) st = cli_parse_i64("--epochs", v, 0, 1 << 30, &o->epochs);
      o->epochs_given = true;
    } else if (cli_flag_value(&a, "--batch-size", &v, &st)) {
      if (!st) st = cli_parse_i64("--batch-size", v, 1, (int64_t)1 << 30, &o->batch);
    } else if (cli_flag_value(&a, "--cache-dir", &o->ro.cache_dir, &st)) {
    } else if (cli_flag_value(&a, "--threads", &v, &st)) {
      if (!st) st = cli_parse_i64("--threads", v, 1, 4096, &x);
      if (!st) o->ro.threads = (int)x;
    } else if (cli_flag_value(&a, "--seed", &v, &st)) {
      if (!st) st = cli_parse_u64("--seed", v, &o->seed);
    } else if (cli_flag_value(&a, "--validation-split", &v, &st)) {
      if (!st) st = cli_parse_double("--validation-split", v, &o->validation_split);
      if (!st && !(o->validation_split >= 0 && o->validation_split < 1))
        st = KDC_ERR(KDC_INVALID_INPUT, "--validation-split \"%s\": expected a fraction in [0, 1)", v);
    } else if (cli_flag_value(&a, "--collective-timeout", &v, &st)) {
      if (!st) st = cli_parse_double("--collective-timeout", v, &o->ro.collective_timeout_s);
      if (!st && !(o->ro.collective_timeout_s > 0))
        st = KDC_ERR(KDC_INVALID_INPUT, "run: --collective-timeout must be > 0 seconds, got %s", v);
    } else if (run_place_flag(&a, &o->ro, &st)) {
    } else if (cli_flag(&a, "--fit")) {
      o->fit = true;
    } else if (cli_flag(&a, "--evaluate")) {
      o->evaluate = true;
    } else if (cli_flag(&a, "--save-optimizer")) {
      o->save_optimizer = true;
    } else if (cli_flag(&a, "--shuffle")) {
      o->shuffle = true;
    } else if (cli_flag(&a, "--quiet")) {
      o->quiet = true;
    } else if (a.argv[a.i][0] != '-' && !o->plan) {
      o->plan = a.argv[a.i++];
    } else {
      st = cli_unknown(&a);
    }
  }
  if (!st && !o->plan) st = KDC_ERR(KDC_INVALID_INPUT, "run: no plan given (see kdc --help)");
  if (!st && o->fit == o->evaluate)
    st = KDC_ERR(KDC_INVALID_INPUT, "run: give one of --fit and --evaluate");
  if (!st && (!o->n_x || !o->n_y)) st = KDC_ERR(KDC_INVALID_INPUT, "run: --fit/--evaluate need --x X.npy and --y Y.npy");
  if (!st && (o->n_predict > 0) != (o->n_output > 0))
    st = KDC_ERR(KDC_INVALID_INPUT, "run: --predict X.npy (per model input) and --output Y.npy "
                 "(per model output) go together");
  if (!st && o->evaluate && (o->history || o->save || o->shuffle || o->validation_split > 0 ||
                             o->epochs_given || o->n_predict || o->save_model))
    st = KDC_ERR(KDC_INVALID_INPUT, "run: --epochs, --history, --save-weights, --save-model, "
                 "--shuffle, --validation-split and --predict are --fit options");
  if (!st && o->save_optimizer && !(o->save && kdc_is_keras_file(o->save)))
    st = KDC_ERR(KDC_INVALID_INPUT, "run: --save-optimizer needs --save-weights W.weights.h5 (a "
                 "safetensors checkpoint always holds the optimizer)");
  if (!st && o->save_model &&
      (strlen(o->save_model) < 6 || strcmp(o->save_model + strlen(o->save_model) - 6, ".keras")))
    st = KDC_ERR(KDC_INVALID_INPUT, "--save-model \"%s\": expected a .keras file name", o->save_model);
  return st;
}

typedef struct fit_ui {
  bool tty;
  const kdc_trainer *train;  /* the per-output loss names */
} fit_ui;

/* One Keras log entry. */
typedef struct log_item {
  const char *name;
  double value;
} log_item;

static int log_item_cmp(const void *a, const void *b) {
  return strcmp(((const log_item *)a)->name, ((const log_item *)b)->name);
}

/* Keras' logs after the bar: " - name: value" with the names sorted (Keras
 * 3 sorts the logs, keras/src/utils/python_utils.py pythonify_logs): the
 * training values, then the validation values, which appear at the end of
 * the epoch.  |loss|, |metrics| and the names: the trained values, |val| and
 * |val_metrics| the validation ones (NaN / NULL: none). */
static void format_logs(char *buf, size_t n, const fit_ui *ui, double loss, const double *metrics,
                        size_t n_metrics, double val, const double *val_metrics) {
  log_item items[1 + KDC_MAX_METRICS];
  char names[KDC_MAX_METRICS][160];
  size_t k = 0, used = 0;
  buf[0] = 0;
  for (int v = 0; v < 2; v++) {
    const double *m = v ? val_metrics : metrics;
    if (v && isnan(val)) break;
    size_t first = k;
    items[k++] = (log_item){v ? "val_loss" : "loss", v ? val : loss};
    for (size_t j = 0; m && j < n_metrics; j++) {
      const char *name = kdc_trainer_metric_name(ui->train, j);
      if (v) {
        snprintf(names[j], sizeof names[j], "val_%s", name);
        name = names[j];
      }
      items[k++] = (log_item){name, m[j]};
    }
    qsort(items + first, k - first, sizeof *items, log_item_cmp);
  }
  for (size_t i = 0; i < k && used < n; i++) {
    int w = snprintf(buf + used, n - used, " - %s: %.4f", items[i].name, items[i].value);
    if (w < 0) break;
    used += (size_t)w;
  }
}

/* Keras 3's progress bar: 20 cells, done "━", to do "─". */
static void bar(char *buf, size_t n, int64_t step, int64_t steps) {
  int full = (int)(20 * step / (steps ? steps : 1));
  size_t k = 0;
  for (int i = 0; i < 20 && k + 4 < n; i++) {
    memcpy(buf + k, i < full ? "\u2501" : "\u2500", 3);
    k += 3;
  }
  buf[k] = 0;
}

static void on_batch(void *user, const kdc_fit_progress *pr) {
  fit_ui *ui = user;
  if (!ui->tty) return;
  char b[128], logs[4096];
  bar(b, sizeof b, pr->step, pr->steps);
  double ms = 1e3 * pr->seconds / (double)pr->step;
  format_logs(logs, sizeof logs, ui, pr->loss, pr->metrics, pr->n_metrics, NAN, NULL);
  printf("\r%" PRId64 "/%" PRId64 " %s %.0fs %.0fms/step%s", pr->step, pr->steps, b,
         pr->seconds, ms, logs);
  fflush(stdout);
}

static void on_epoch(void *user, const kdc_fit_progress *pr) {
  fit_ui *ui = user;
  double ms = 1e3 * pr->seconds / (double)(pr->steps ? pr->steps : 1);
  char logs[8192];
  format_logs(logs, sizeof logs, ui, pr->loss, pr->metrics, pr->n_metrics, pr->val_loss,
              pr->val_metrics);
  if (ui->tty) {
    char b[128];
    bar(b, sizeof b, pr->steps, pr->steps);
    printf("\r%" PRId64 "/%" PRId64 " %s %.0fs %.0fms/step%s\n", pr->steps, pr->steps, b,
           pr->seconds, ms, logs);
    if (pr->epoch + 1 < pr->epochs) printf("Epoch %" PRId64 "/%" PRId64 "\n", pr->epoch + 2, pr->epochs);
  } else {
    printf("Epoch %" PRId64 "/%" PRId64 " - %" PRId64 " steps - %.0fms/step%s\n", pr->epoch + 1,
           pr->epochs, pr->steps, ms, logs);
  }
  fflush(stdout);
}

/* ", "KEY": [v(0), v(1), ...]" over the epochs: |v| with a stride. */
/* One history number after |sep|: "%.9g" (f32 values round-trip), a
 * non-finite one as Python's json.dumps writes it (NaN, Infinity,
 * -Infinity), which json.load reads back; printf's "nan" no JSON reader
 * accepts. */
static void history_number(FILE *o, const char *sep, double v) {
  if (isnan(v)) fprintf(o, "%sNaN", sep);
  else if (isinf(v)) fprintf(o, "%s%sInfinity", sep, v < 0 ? "-" : "");
  else fprintf(o, "%s%.9g", sep, v);
}

/* Keras' History.history as JSON (history_number): "loss", each
 * "<output>_loss", then the "val_" ones (kdc_history's key order), then
 * kdc's "batch_loss". */
static kdc_status write_history(const char *path, const kdc_history *h) {
  kdc_atomic_file *f = NULL;
  KDC_RETURN_IF_ERROR(kdc_atomic_file_open(path, &f));
  FILE *o = kdc_atomic_file_stream(f);
  int64_t epochs = kdc_history_epochs(h);
  for (size_t k = 0; k < kdc_history_key_count(h); k++) {
    fprintf(o, "%s\"%s\": [", k ? ", " : "{", kdc_history_key(h, k));
    const double *v = kdc_history_values(h, k);
    for (int64_t e = 0; e < epochs; e++) history_number(o, e ? ", " : "", v[e]);
    fprintf(o, "]");
  }
  fprintf(o, ", \"batch_loss\": [");
  const float *b = kdc_history_batch_loss(h);
  for (int64_t i = 0; i < epochs * kdc_history_steps(h); i++)
    history_number(o, i ? ", " : "", (double)b[i]);
  fprintf(o, "]}\n");
  return kdc_atomic_file_commit(f);
}

typedef struct fit_state {
  kdc_plan *plan;
  kdc_trainer *train;
  kdc_npy_array a[33];        /* x, then the labels in the plan's order */
  size_t n_a;
  kdc_history *h;
} fit_state;

/* The --y for the plan's label |t| (|k|-th label of |n_labels|): positional
 * --y in output order, or --y NAME=path naming the output. */
static kdc_status label_path(const fit_opts *o, const kdc_tensor_info *t, size_t k,
                             size_t n_labels, const char **path) {
  bool named = strchr(o->y[0], '=') != NULL;
  for (size_t i = 0; i < o->n_y; i++)
    if ((strchr(o->y[i], '=') != NULL) != named)
      return KDC_ERR(KDC_INVALID_INPUT, "run: --y \"%s\": give every --y as a path in output "
                     "order or every one as NAME=path", o->y[i]);
  if (!named) {
    if (o->n_y != n_labels)
      return KDC_ERR(KDC_INVALID_INPUT, "%s: the plan trains %zu outputs but %zu --y were given "
                     "(one per output, in output order, or --y NAME=path)", o->plan, n_labels,
                     o->n_y);
    *path = o->y[k];
    return NULL;
  }
  for (size_t i = 0; i < o->n_y; i++) {
    const char *eq = strchr(o->y[i], '=');
    if ((size_t)(eq - o->y[i]) == strlen(t->name) && !strncmp(o->y[i], t->name, strlen(t->name))) {
      *path = eq + 1;
      return NULL;
    }
  }
  return KDC_ERR(KDC_INVALID_INPUT, "%s: no --y %s=path for the plan's output \"%s\"", o->plan,
                 t->name, t->name);
}

static kdc_status fit(const fit_opts *o, fit_state *s) {
  KDC_RETURN_IF_ERROR(kdc_plan_load(o->plan, &o->ro, &s->plan));
  KDC_RETURN_IF_ERROR(kdc_trainer_create(s->plan, &s->train));
  /* Keras outputs the plan cannot write fail before any step runs */
  if (o->save && kdc_is_keras_file(o->save))
    KDC_RETURN_IF_ERROR(kdc_trainer_check_keras(s->train, o->save));
  if (o->save_model) KDC_RETURN_IF_ERROR(kdc_trainer_check_keras(s->train, o->save_model));
  size_t n_arrays = kdc_trainer_data_count(s->train), n_in = kdc_trainer_input_count(s->train);
  kdc_tensor_info info[33];
  for (size_t k = 0; k < n_arrays; k++) KDC_RETURN_IF_ERROR(kdc_trainer_data(s->train, k, &info[k]));
  if (o->n_x != n_in)
    return KDC_ERR(KDC_INVALID_INPUT, "%s: the model has %zu inputs but %zu --x were given (one per "
                   "input, in input order)", o->plan, n_in, o->n_x);
  if (o->n_predict && o->n_predict != n_in)
    return KDC_ERR(KDC_INVALID_INPUT, "%s: the model has %zu inputs but %zu --predict were given "
                   "(one per input, in input order)", o->plan, n_in, o->n_predict);
  /* named --y must each name a label */
  for (size_t i = 0; i < o->n_y; i++) {
    const char *eq = strchr(o->y[i], '=');
    bool found = !eq;
    for (size_t k = n_in; k < n_arrays && !found; k++)
      found = (size_t)(eq - o->y[i]) == strlen(info[k].name) &&
              !strncmp(o->y[i], info[k].name, strlen(info[k].name));
    if (!found)
      return KDC_ERR(KDC_INVALID_INPUT, "%s: --y \"%s\": the plan has no trained output of that "
                     "name", o->plan, o->y[i]);
  }
  int64_t batch = info[0].dims[0];
  if (o->batch > batch)
    return KDC_ERR(KDC_UNSUPPORTED, "%s: --batch-size %" PRId64 " is larger than the plan's "
                   "compiled batch %" PRId64 ": recompile with --batch %" PRId64,
                   o->plan, o->batch, batch, o->batch);
  const char *paths[33];
  for (size_t k = 0; k < n_in; k++) paths[k] = o->x[k];
  for (size_t k = n_in; k < n_arrays; k++)
    KDC_RETURN_IF_ERROR(label_path(o, &info[k], k - n_in, n_arrays - n_in, &paths[k]));
  kdc_array arrays[33];
  memset(arrays, 0, sizeof arrays);
  for (size_t k = 0; k < n_arrays; k++) {
    KDC_RETURN_IF_ERROR(kdc_npy_read(paths[k], &s->a[k]));
    s->n_a = k + 1;
    kdc_array *a = &arrays[k];
    a->data = s->a[k].data, a->dtype = (int)s->a[k].dtype, a->rank = s->a[k].rank;
    memcpy(a->dims, s->a[k].dims, sizeof a->dims);
    a->name = paths[k];
  }
  if (o->initial) KDC_RETURN_IF_ERROR(kdc_trainer_load(s->train, o->initial));
  bool writes = kdc_plan_process_id(s->plan) == 0;  /* processes: process 0 reports */
  fit_ui ui = {isatty(STDOUT_FILENO) == 1, s->train};
  bool quiet = o->quiet || !writes;
  if (o->evaluate) {
    double loss, metrics[KDC_MAX_METRICS] = {0};
    KDC_RETURN_IF_ERROR(kdc_trainer_evaluate(s->train, arrays, n_arrays,
                                             o->batch > 0 ? o->batch : 0, &loss, metrics));
    char logs[4096];
    format_logs(logs, sizeof logs, &ui, loss, metrics, kdc_trainer_metric_count(s->train), NAN,
                NULL);
    if (writes) printf("%s\n", logs + 3);  /* without the leading " - " */
    return NULL;
  }
  kdc_fit_options fo;
  kdc_fit_options_init(&fo);
  fo.epochs = o->epochs, fo.shuffle = o->shuffle, fo.seed = o->seed;
  fo.validation_split = o->validation_split, fo.batch_size = o->batch > 0 ? o->batch : 0;
  fo.on_batch = quiet ? NULL : on_batch, fo.on_epoch = quiet ? NULL : on_epoch, fo.user = &ui;
  if (ui.tty && !quiet && o->epochs > 0) printf("Epoch 1/%" PRId64 "\n", o->epochs);
  kdc_status st = kdc_trainer_fit(s->train, arrays, n_arrays, &fo, &s->h);
  if (!st && o->history && writes) st = write_history(o->history, s->h);
  /* every process takes part (its pieces go to process 0, which writes) */
  if (!st && o->save && kdc_is_keras_file(o->save))
    st = kdc_trainer_save_keras(s->train, o->save, o->save_optimizer);
  else if (!st && o->save)
    st = kdc_trainer_save(s->train, o->save);
  if (!st && o->save_model) st = kdc_trainer_save_keras(s->train, o->save_model, 1);
  /* predict with the trained weights (the plan's weights point at them) */
  if (!st && o->n_predict)
    st = cli_predict(s->plan, o->plan, o->predict, o->n_predict, o->output, o->n_output);
  return st;
}

int kdc_cmd_fit(int argc, char **argv) {
  fit_opts o;
  fit_state s;
  memset(&s, 0, sizeof s);
  kdc_status st = parse(argc, argv, &o);
  if (!st) {
    /* --history, --save-weights and --output appear together or not at
     * all, never over an input; --initial-weights may be --save-weights (a
     * checkpoint resumed in place: it is read before the new one is
     * written) */
    kdc_file_arg out[3 + 32] = {{"--history", o.history}, {"--save-weights", o.save},
                                {"--save-model", o.save_model}};
    for (size_t k = 0; k < o.n_output; k++) out[3 + k] = (kdc_file_arg){"--output", o.output[k]};
    kdc_file_arg in[2 + 3 * 32] = {{"the plan", o.plan}};
    size_t n_in = 1;
    for (size_t k = 0; k < o.n_predict; k++) in[n_in++] = (kdc_file_arg){"--predict", o.predict[k]};
    if (o.initial && (!o.save || strcmp(o.initial, o.save)) &&
        (!o.save_model || strcmp(o.initial, o.save_model)))
      in[n_in++] = (kdc_file_arg){"--initial-weights", o.initial};
    for (size_t k = 0; k < o.n_x; k++) in[n_in++] = (kdc_file_arg){"--x", o.x[k]};
    for (size_t k = 0; k < o.n_y; k++) {
      const char *eq = strchr(o.y[k], '=');
      in[n_in++] = (kdc_file_arg){"--y", eq ? eq + 1 : o.y[k]};
    }
    st = kdc_outputs_begin(out, 3 + o.n_output, in, n_in);
  }
  if (!st) st = fit(&o, &s);
  st = cli_outputs_end(st);
  kdc_history_free(s.h);
  kdc_trainer_free(s.train);
  for (size_t k = 0; k < s.n_a; k++) kdc_npy_free(&s.a[k]);
  kdc_plan_free(s.plan);
  int rc = st ? cli_fail(st) : 0;
  kdc_job_finish(rc);
  return rc;
}
