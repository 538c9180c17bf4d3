/*
 * api/train.c: the training state of a plan (runtime/state.c) behind the
 * public API: Keras' fit / evaluate (runtime/fit.c) on caller arrays, one
 * step, the history as Keras' History.history, and the state by name.
 */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "api/api.h"
#include "common/io.h"

enum { MAX_DATA = 33 };
_Static_assert(KDC_MAX_METRICS == KDC_RT_MAX_METRICS, "kdc.h and runtime.h agree");

struct kdc_trainer {
  kdc_plan *plan;
  kdc_rt_train *rt;
  const kdc_rt_tensor_info *data[MAX_DATA]; /* train_step's data but "sample_mask" */
  size_t n_data, n_inputs;
};

struct kdc_history {
  int64_t epochs, steps;
  size_t n_keys;
  char **keys;
  double **values;            /* per key, |epochs| values */
  float *batch_loss;
};

void kdc_fit_options_init(kdc_fit_options *o) {
  if (!o) return;
  memset(o, 0, sizeof *o);
  o->struct_size = sizeof *o;
  o->epochs = 1;
}

kdc_status kdc_trainer_create(kdc_plan *p, kdc_trainer **out) {
  if (!p || !out) return KDC_ERR(KDC_INVALID_INPUT, "trainer: no plan or no place for it");
  *out = NULL;
  const char *name = p->path ? p->path : "plan";
  if (!kdc_plan_has_training(p))
    return KDC_ERR(KDC_INVALID_INPUT, "%s: the plan has no train_step (compile it with a loss, "
                   "e.g. --loss mse)", name);
  if (p->trainer)
    return KDC_ERR(KDC_INVALID_INPUT, "%s: the plan already has a trainer (one at a time)", name);
  kdc_trainer *t = calloc(1, sizeof *t);
  if (!t) return KDC_ERR(KDC_OUT_OF_MEMORY, "%s: out of memory", name);
  t->plan = p;
  kdc_status st = kdc_rt_train_create(p->rt, &t->rt);
  size_t nd = st ? 0 : kdc_rt_train_data_count(t->rt);
  for (size_t i = 0; i < nd && !st; i++) {
    const kdc_rt_tensor_info *d = kdc_rt_train_data(t->rt, i);
    if (!strcmp(d->name, "sample_mask")) continue;
    if (t->n_data == MAX_DATA)
      st = KDC_ERR(KDC_UNSUPPORTED, "%s: train_step takes more than %d data arrays", name, MAX_DATA);
    else
      t->data[t->n_data++] = d;
  }
  /* train_step's data: the model inputs (predict's, in order), then the labels */
  t->n_inputs = kdc_rt_plan_input_count(p->rt, 0);
  if (!st && t->n_data < t->n_inputs + 1)
    st = KDC_ERR(KDC_UNSUPPORTED, "%s: fit needs the model inputs and their labels (the plan's "
                 "train_step takes %zu data arrays)", name, t->n_data);
  if (st) {
    kdc_rt_train_destroy(t->rt);
    free(t);
    return st;
  }
  p->trainer = t;
  *out = t;
  return NULL;
}

void kdc_trainer_free(kdc_trainer *t) {
  if (!t) return;
  kdc_rt_train_destroy(t->rt);
  if (t->plan) t->plan->trainer = NULL;
  free(t);
}

size_t kdc_trainer_data_count(const kdc_trainer *t) { return t ? t->n_data : 0; }
size_t kdc_trainer_input_count(const kdc_trainer *t) { return t ? t->n_inputs : 0; }

kdc_status kdc_trainer_data(const kdc_trainer *t, size_t i, kdc_tensor_info *out) {
  if (!t || !out || i >= t->n_data)
    return KDC_ERR(KDC_INVALID_INPUT, "training array %zu: the plan takes %zu", i,
                   t ? t->n_data : 0);
  kdc_api_info(t->data[i], out);
  return NULL;
}

size_t kdc_trainer_metric_count(const kdc_trainer *t) {
  return t ? kdc_rt_train_metric_count(t->rt) : 0;
}

const char *kdc_trainer_metric_name(const kdc_trainer *t, size_t j) {
  if (!t || j >= kdc_rt_train_metric_count(t->rt)) return NULL;
  return kdc_rt_train_metric_name(t->rt, j);
}

/* The caller's arrays checked, converted and in train_step's order. */
typedef struct data_set {
  const void *ptr[MAX_DATA];
  void *owned[MAX_DATA];
  int64_t rows;
} data_set;

static void data_free(data_set *d) {
  for (size_t i = 0; i < MAX_DATA; i++) free(d->owned[i]);
}

/* The number of classes of label |t| when it holds class ids (a sparse
 * crossentropy: int32 labels of the predicted output's shape without its
 * last dim, kdc_loss_label_type), else 0. */
static int64_t label_classes(const kdc_trainer *tr, const kdc_rt_tensor_info *t) {
  const kdc_rt_plan *plan = tr->plan->rt;
  int predict = kdc_rt_plan_find_func(plan, "predict");
  if (t->dtype != KDC_IO_DTYPE_I32 || predict < 0) return 0;
  for (size_t o = 0; o < kdc_rt_plan_output_count(plan, (size_t)predict); o++) {
    const kdc_rt_tensor_info *p = kdc_rt_plan_output(plan, (size_t)predict, o);
    if (!strcmp(p->name, t->name) && p->rank == t->rank + 1) return p->dims[p->rank - 1];
  }
  return 0;
}

static kdc_status data_get(const kdc_trainer *t, const kdc_array *a, size_t n, data_set *d) {
  const char *name = t->plan->path ? t->plan->path : "plan";
  memset(d, 0, sizeof *d);
  if (n != t->n_data || !a)
    return KDC_ERR(KDC_INVALID_INPUT, "%s: the plan trains on %zu arrays (%zu model input(s), then "
                   "one label array per trained output, in output order); %zu given", name,
                   t->n_data, t->n_inputs, n);
  char first[200];
  for (size_t k = 0; k < n; k++) {
    char what[200];
    bool label = k >= t->n_inputs;
    kdc_api_array_name(&a[k], label ? "label" : "input", label ? k - t->n_inputs : k,
                       t->data[k]->name, what, sizeof what);
    if (k == 0) snprintf(first, sizeof first, "%s", what);
    int64_t classes = label ? label_classes(t, t->data[k]) : 0;
    KDC_RETURN_IF_ERROR(kdc_api_convert(what, t->data[k], &a[k], label, classes, &d->ptr[k],
                                        &d->owned[k]));
    if (a[k].dims[0] != a[0].dims[0])
      return KDC_ERR(KDC_INVALID_INPUT, "%s has %" PRId64 " rows but %s has %" PRId64, first,
                     a[0].dims[0], what, a[k].dims[0]);
  }
  d->rows = a[0].dims[0];
  return NULL;
}

/* ---- fit ------------------------------------------------------------------- */

typedef struct fit_cb {
  const kdc_fit_options *o;
} fit_cb;

static void progress(const kdc_rt_fit_progress *pr, kdc_fit_progress *out) {
  out->epoch = pr->epoch, out->epochs = pr->epochs, out->step = pr->step, out->steps = pr->steps;
  out->batch_loss = pr->batch_loss, out->loss = pr->loss, out->val_loss = pr->val_loss;
  out->seconds = pr->seconds, out->n_metrics = pr->n_metrics;
  out->metrics = pr->metrics, out->val_metrics = pr->val_metrics;
}

static void on_batch(void *user, const kdc_rt_fit_progress *pr) {
  const fit_cb *cb = user;
  kdc_fit_progress p;
  progress(pr, &p);
  cb->o->on_batch(cb->o->user, &p);
}

static void on_epoch(void *user, const kdc_rt_fit_progress *pr) {
  const fit_cb *cb = user;
  kdc_fit_progress p;
  progress(pr, &p);
  cb->o->on_epoch(cb->o->user, &p);
}

static char *key_dup(const char *prefix, const char *name) {
  char *s = NULL;
  return asprintf(&s, "%s%s", prefix, name) < 0 ? NULL : s;
}

/* Keras' History.history from the runtime's. */
static kdc_status history_make(const kdc_trainer *t, const kdc_rt_history *h, kdc_history **out) {
  kdc_history *k = calloc(1, sizeof *k);
  size_t per = 1 + h->n_metrics, n = h->val_loss ? 2 * per : per;
  size_t cells = (size_t)(h->epochs > 0 ? h->epochs : 0);
  if (k) {
    k->keys = calloc(n, sizeof *k->keys);
    k->values = calloc(n, sizeof *k->values);
    k->batch_loss = calloc(cells * (size_t)(h->steps > 0 ? h->steps : 0) + 1, sizeof(float));
  }
  if (!k || !k->keys || !k->values || !k->batch_loss) {
    kdc_history_free(k);
    return KDC_ERR(KDC_OUT_OF_MEMORY, "fit: out of memory for the history");
  }
  k->epochs = h->epochs, k->steps = h->steps, k->n_keys = n;
  if (h->batch_loss) memcpy(k->batch_loss, h->batch_loss, cells * (size_t)h->steps * sizeof(float));
  for (size_t j = 0; j < n; j++) {
    bool val = j >= per;
    size_t m = j % per;  /* 0: the loss, else metric m - 1 */
    k->keys[j] = key_dup(val ? "val_" : "", m ? kdc_rt_train_metric_name(t->rt, m - 1) : "loss");
    k->values[j] = calloc(cells + 1, sizeof(double));
    if (!k->keys[j] || !k->values[j]) {
      kdc_history_free(k);
      return KDC_ERR(KDC_OUT_OF_MEMORY, "fit: out of memory for the history");
    }
    const double *src = m ? (val ? h->val_metrics : h->metrics) + (m - 1) : val ? h->val_loss : h->loss;
    size_t stride = m ? h->n_metrics : 1;
    for (size_t e = 0; e < cells && src; e++) k->values[j][e] = src[e * stride];
  }
  *out = k;
  return NULL;
}

kdc_status kdc_trainer_fit(kdc_trainer *t, const kdc_array *data, size_t n,
                           const kdc_fit_options *o, kdc_history **history) {
  if (history) *history = NULL;
  if (!t) return KDC_ERR(KDC_INVALID_INPUT, "fit: no trainer");
  kdc_fit_options dflt;
  kdc_fit_options_init(&dflt);
  if (!o) o = &dflt;
  if (o->struct_size < sizeof *o)
    return KDC_ERR(KDC_INVALID_INPUT, "fit: options not made by kdc_fit_options_init");
  if (o->epochs < 0 || o->epochs > (1 << 30))
    return KDC_ERR(KDC_INVALID_INPUT, "--epochs \"%" PRId64 "\": expected an integer from 0 to "
                   "%d", o->epochs, 1 << 30);
  if (!(o->validation_split >= 0 && o->validation_split < 1))
    return KDC_ERR(KDC_INVALID_INPUT, "--validation-split \"%g\": expected a fraction in [0, 1)",
                   o->validation_split);
  int64_t batch = kdc_plan_batch(t->plan);
  if (o->batch_size < 0 || o->batch_size > batch)
    return KDC_ERR(KDC_UNSUPPORTED, "%s: --batch-size %" PRId64 " is larger than the plan's "
                   "compiled batch %" PRId64 ": recompile with --batch %" PRId64,
                   t->plan->path ? t->plan->path : "plan", o->batch_size, batch, o->batch_size);
  data_set d;
  kdc_status st = data_get(t, data, n, &d);
  fit_cb cb = {o};
  kdc_rt_fit_options fo = {.epochs = o->epochs, .shuffle = o->shuffle != 0, .seed = o->seed,
                           .validation_split = o->validation_split, .batch_size = o->batch_size,
                           .on_batch = o->on_batch ? on_batch : NULL,
                           .on_epoch = o->on_epoch ? on_epoch : NULL, .user = &cb};
  kdc_rt_history h;
  memset(&h, 0, sizeof h);
  if (!st) st = kdc_rt_fit(t->rt, d.ptr, d.rows, &fo, &h);
  if (!st || h.epochs > 0) {
    kdc_status hs = history ? history_make(t, &h, history) : NULL;
    if (!st) st = hs;
    else kdc_status_free(hs);
  }
  kdc_rt_history_free(&h);
  data_free(&d);
  return st;
}

kdc_status kdc_trainer_step(kdc_trainer *t, const kdc_array *data, size_t n, double *loss) {
  if (!t) return KDC_ERR(KDC_INVALID_INPUT, "step: no trainer");
  if (n && data && data[0].rank >= 1 && data[0].dims[0] > kdc_plan_batch(t->plan))
    return KDC_ERR(KDC_INVALID_INPUT, "step: %" PRId64 " rows, more than the plan's batch %" PRId64,
                   data[0].dims[0], kdc_plan_batch(t->plan));
  kdc_fit_options o;
  kdc_fit_options_init(&o);
  kdc_history *h = NULL;
  KDC_RETURN_IF_ERROR(kdc_trainer_fit(t, data, n, &o, &h));
  if (loss) *loss = h->steps > 0 ? h->batch_loss[0] : NAN;
  kdc_history_free(h);
  return NULL;
}

kdc_status kdc_trainer_evaluate(kdc_trainer *t, const kdc_array *data, size_t n,
                                int64_t batch_size, double *loss, double *metrics) {
  if (!t || !loss) return KDC_ERR(KDC_INVALID_INPUT, "evaluate: no trainer or no loss pointer");
  int64_t batch = kdc_plan_batch(t->plan);
  if (batch_size < 0 || batch_size > batch)
    return KDC_ERR(KDC_UNSUPPORTED, "%s: --batch-size %" PRId64 " is larger than the plan's "
                   "compiled batch %" PRId64 ": recompile with --batch %" PRId64,
                   t->plan->path ? t->plan->path : "plan", batch_size, batch, batch_size);
  data_set d;
  double m[KDC_RT_MAX_METRICS] = {0};
  kdc_status st = data_get(t, data, n, &d);
  if (!st) st = kdc_rt_fit_evaluate_metrics(t->rt, d.ptr, d.rows, batch_size, loss, m);
  if (!st && metrics) memcpy(metrics, m, kdc_rt_train_metric_count(t->rt) * sizeof *m);
  data_free(&d);
  return st;
}

/* ---- state ------------------------------------------------------------------ */

size_t kdc_trainer_state_count(const kdc_trainer *t) {
  return t ? kdc_rt_train_state_count(t->rt) : 0;
}

/* State |k| as Keras holds it: a gate-packed [.., G, u] is [.., G*u]. */
static void state_info(const kdc_trainer *t, size_t k, kdc_tensor_info *out) {
  kdc_api_info(kdc_rt_train_state(t->rt, k), out);
  if (kdc_rt_train_state_gate_packed(t->rt, k) && out->rank >= 2) {
    out->dims[out->rank - 2] *= out->dims[out->rank - 1];
    out->dims[--out->rank] = 0;
  }
}

kdc_status kdc_trainer_state(const kdc_trainer *t, size_t k, kdc_tensor_info *out,
                             int *is_weight) {
  if (!t || !out || k >= kdc_rt_train_state_count(t->rt))
    return KDC_ERR(KDC_INVALID_INPUT, "state %zu: the plan has %zu state tensors", k,
                   kdc_trainer_state_count(t));
  state_info(t, k, out);
  if (is_weight) *is_weight = kdc_rt_train_state_is_weight(t->rt, k);
  return NULL;
}

static kdc_status find_state(const kdc_trainer *t, const char *name, const kdc_array *a,
                             size_t *k) {
  if (!t || !name || !a) return KDC_ERR(KDC_INVALID_INPUT, "weights: no trainer, name or array");
  size_t n = kdc_rt_train_state_count(t->rt);
  for (*k = 0; *k < n && strcmp(kdc_rt_train_state(t->rt, *k)->name, name); ++*k) {}
  if (*k == n)
    return KDC_ERR(KDC_INVALID_INPUT, "weight \"%s\": the plan has no state tensor of that name "
                   "(weights are named by Keras variable path, e.g. \"%s\")", name,
                   n ? kdc_rt_train_state(t->rt, 0)->name : "d1/kernel");
  kdc_tensor_info ti;
  state_info(t, *k, &ti);
  bool ok = a->data && a->dtype == ti.dtype && a->rank == ti.rank;
  for (int d = 0; ok && d < ti.rank; d++) ok = a->dims[d] == ti.dims[d];
  if (ok) return NULL;
  char want[160], got[160];
  kdc_api_shape_str(ti.rank, ti.dims, want, sizeof want);
  kdc_api_shape_str(a->rank < 0 || a->rank > KDC_MAX_DIMS ? 0 : a->rank, a->dims, got, sizeof got);
  return KDC_ERR(KDC_INVALID_INPUT, "weight \"%s\": the array is %s %s, the weight %s %s%s", name,
                 kdc_array_dtype_name(a->dtype), got, kdc_array_dtype_name(ti.dtype), want,
                 a->data ? "" : " (no data)");
}

kdc_status kdc_trainer_get(kdc_trainer *t, const char *name, kdc_array *out) {
  size_t k;
  KDC_RETURN_IF_ERROR(find_state(t, name, out, &k));
  KDC_RETURN_IF_ERROR(kdc_rt_train_gather(t->rt));
  kdc_rt_train_state_get(t->rt, k, out->data);
  return NULL;
}

kdc_status kdc_trainer_set(kdc_trainer *t, const char *name, const kdc_array *in) {
  size_t k;
  KDC_RETURN_IF_ERROR(find_state(t, name, in, &k));
  kdc_rt_train_state_set(t->rt, k, in->data);
  return NULL;
}

static bool ends_with(const char *s, const char *suf) {
  size_t a = strlen(s), b = strlen(suf);
  return a >= b && !strcmp(s + a - b, suf);
}

int kdc_is_keras_file(const char *path) {
  return path && (ends_with(path, ".h5") || ends_with(path, ".hdf5") || ends_with(path, ".keras"));
}

kdc_status kdc_trainer_save(kdc_trainer *t, const char *path) {
  if (!t || !path) return KDC_ERR(KDC_INVALID_INPUT, "save weights: no trainer or no path");
  if (kdc_is_keras_file(path)) return kdc_trainer_save_keras(t, path, ends_with(path, ".keras"));
  return kdc_rt_train_save(t->rt, path);
}

kdc_status kdc_trainer_save_keras(kdc_trainer *t, const char *path, int optimizer) {
  if (!t || !path) return KDC_ERR(KDC_INVALID_INPUT, "save: no trainer or no path");
  bool archive = ends_with(path, ".keras");
  if (!archive && !ends_with(path, ".h5"))
    return KDC_ERR(KDC_INVALID_INPUT, "\"%s\": expected a .keras or .weights.h5 file name", path);
  return kdc_rt_keras_save(t->plan->rt, t->rt, path, archive, archive || optimizer);
}

kdc_status kdc_trainer_check_keras(const kdc_trainer *t, const char *path) {
  if (!t || !path) return KDC_ERR(KDC_INVALID_INPUT, "save: no trainer or no path");
  return kdc_rt_keras_check(t->plan->rt, ends_with(path, ".keras"));
}

kdc_status kdc_trainer_load(kdc_trainer *t, const char *path) {
  if (!t || !path) return KDC_ERR(KDC_INVALID_INPUT, "load weights: no trainer or no path");
  if (kdc_is_keras_file(path)) return kdc_rt_keras_load(t->plan->rt, t->rt, path);
  return kdc_rt_train_load(t->rt, path);
}

kdc_status kdc_trainer_load_weights(kdc_trainer *t, const char *path) {
  if (!t || !path) return KDC_ERR(KDC_INVALID_INPUT, "load weights: no trainer or no path");
  /* a Keras file: through the plan's KERAS section (its optimizer part is
   * harmless for a prediction) */
  if (kdc_is_keras_file(path)) return kdc_rt_keras_load(t->plan->rt, t->rt, path);
  return kdc_rt_train_load_weights(t->rt, path);
}

/* ---- history ---------------------------------------------------------------- */

int64_t kdc_history_epochs(const kdc_history *h) { return h ? h->epochs : 0; }
int64_t kdc_history_steps(const kdc_history *h) { return h ? h->steps : 0; }
size_t kdc_history_key_count(const kdc_history *h) { return h ? h->n_keys : 0; }
const char *kdc_history_key(const kdc_history *h, size_t k) {
  return h && k < h->n_keys ? h->keys[k] : NULL;
}
const double *kdc_history_values(const kdc_history *h, size_t k) {
  return h && k < h->n_keys ? h->values[k] : NULL;
}
const float *kdc_history_batch_loss(const kdc_history *h) { return h ? h->batch_loss : NULL; }

void kdc_history_free(kdc_history *h) {
  if (!h) return;
  for (size_t k = 0; k < h->n_keys; k++) {
    if (h->keys) free(h->keys[k]);
    if (h->values) free(h->values[k]);
  }
  free(h->keys);
  free(h->values);
  free(h->batch_loss);
  free(h);
}
