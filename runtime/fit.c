/*
 * runtime/fit.c: Keras' Model.fit / Model.evaluate loop over a
 * kdc_rt_train (docs/training.md, "Fit").
 *
 *  - Batches of S rows (kdc_rt_fit_options.batch_size, at most the plan's
 *    static batch B; B by default): rows / S full steps, then one partial
 *    step of the remaining n < S rows.  A step of fewer than B rows is
 *    padded with zero rows whose "sample_mask" entry is 0 (train_step and
 *    evaluate take the mask: the loss is the mean over the real rows,
 *    exactly Keras' loss on the smaller batch, and so are the gradients and
 *    BatchNormalization's batch statistics).  Never dropped.  S > B is
 *    refused: one optimizer step over more rows than the plan holds would
 *    need gradient accumulation, which is not Keras' step once a layer
 *    depends on the whole batch (BatchNormalization).
 *  - validation_split F: the LAST rows[split_at:] (split_at =
 *    floor(rows * (1 - F)), keras/src/trainers/data_adapters/
 *    array_slicing.py train_validation_split), taken before shuffling; the
 *    validation loss is evaluated after every epoch with the same batching.
 *  - shuffle: per epoch, a Fisher-Yates permutation of the training rows
 *    drawn from splitmix64 seeded with (seed, epoch): deterministic and the
 *    same on every mesh.
 *  - Reported loss: Keras 3's loss tracker, a Mean metric updated with the
 *    batch loss weighted by the batch's row count (trainer.py:
 *    sample_weight = x.shape[0]); f32 total and count like Keras' variables.
 *    Several trained outputs: the same Mean of each output's unweighted
 *    batch loss ("<output>_loss", keras/src/trainers/compile_utils.py
 *    CompileLoss.call: sample_weight = the batch's rows).
 *  - Staging (docs/gpu.md, "Staging"): on a CUDA plan with one device, each
 *    training batch is gathered into pinned host memory and uploaded on a
 *    second stream into one of two GPU slots; while step s runs, step s+1's
 *    batch is gathered and its upload issued (kdc_rt_plan.during_run), and
 *    step s+1 waits for it on the GPU (an event), not on the host.  The
 *    first step of an epoch uploads its own batch; evaluation is not
 *    staged.  KDC_FIT_STAGING=0 turns it off; =1 turns it on for a CPU plan
 *    too (the same order, uploads are copies into host memory made after
 *    each step: what tests check against the plain loop).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/cuda/cuda_rt.h"
#include "runtime/runtime.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint64_t splitmix64(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

void kdc_rt_fit_permutation(uint64_t seed, int64_t epoch, int64_t n, int64_t *perm) {
  uint64_t s = seed ^ (0xd1b54a32d192ed03ull * (uint64_t)(epoch + 1));
  for (int64_t i = 0; i < n; i++) perm[i] = i;
  for (int64_t i = n - 1; i > 0; i--) {
    int64_t j = (int64_t)(splitmix64(&s) % (uint64_t)(i + 1));
    int64_t x = perm[i];
    perm[i] = perm[j];
    perm[j] = x;
  }
}

/* Staging for one batch: a buffer per data input, the mask. */
typedef struct batcher {
  kdc_rt_train *t;
  size_t n_data;
  int mask;                  /* data index of "sample_mask", or -1 */
  int64_t batch;             /* the plan's */
  int64_t step;              /* rows per step, <= batch */
  void *buf[64];
  size_t row_bytes[64];
  const void *bind[64];
  const void *const *arrays; /* per data input but the mask */
} batcher;

static kdc_status batcher_init(batcher *b, kdc_rt_train *t, const void *const *arrays,
                               int64_t batch_size) {
  memset(b, 0, sizeof *b);
  b->t = t;
  b->arrays = arrays;
  b->mask = -1;
  b->n_data = kdc_rt_train_data_count(t);
  if (b->n_data == 0 || b->n_data > 64)
    return KDC_ERR(KDC_UNSUPPORTED, "fit: train_step has %zu data inputs", b->n_data);
  const kdc_rt_tensor_info *d0 = kdc_rt_train_data(t, 0);
  b->batch = d0->rank ? d0->dims[0] : 0;
  for (size_t i = 0; i < b->n_data; i++) {
    const kdc_rt_tensor_info *d = kdc_rt_train_data(t, i);
    if (!strcmp(d->name, "sample_mask")) b->mask = (int)i;
    if (d->rank < 1 || d->dims[0] != b->batch)
      return KDC_ERR(KDC_UNSUPPORTED, "fit: train_step input \"%s\" is not batch-major (batch %lld)",
                     d->name, (long long)b->batch);
    b->row_bytes[i] = (size_t)(d->bytes / (uint64_t)b->batch);
    b->buf[i] = d->bytes < SIZE_MAX ? calloc(1, d->bytes ? (size_t)d->bytes : 1) : NULL;
    if (!b->buf[i]) /* a plan whose batch does not fit in memory: exit 3, not an abort */
      return KDC_ERR(KDC_OUT_OF_MEMORY, "fit: train_step input \"%s\": cannot allocate %llu bytes",
                     d->name, (unsigned long long)d->bytes);
    b->bind[i] = b->buf[i];
  }
  b->step = batch_size > 0 ? batch_size : b->batch;
  if (b->step > b->batch)
    return KDC_ERR(KDC_UNSUPPORTED, "fit: batch size %lld is larger than the plan's compiled batch "
                   "%lld: recompile with --batch %lld (kdc does not accumulate gradients)",
                   (long long)b->step, (long long)b->batch, (long long)b->step);
  if (b->step < b->batch && b->mask < 0)
    return KDC_ERR(KDC_UNSUPPORTED, "fit: batch size %lld is smaller than the plan's batch %lld "
                   "and the plan has no sample_mask input (recompile it with this kdc)",
                   (long long)b->step, (long long)b->batch);
  return NULL;
}

static void batcher_free(batcher *b) {
  for (size_t i = 0; i < b->n_data; i++) free(b->buf[i]);
}

/* Index of data input |i| among the caller's arrays (the mask is not one). */
static size_t array_index(const batcher *b, size_t i) {
  return b->mask >= 0 && i > (size_t)b->mask ? i - 1 : i;
}

/* Fills the batch with |n| rows: rows[k] (or first + k when rows is NULL). */
static void fill(batcher *b, const int64_t *rows, int64_t first, int64_t n) {
  for (size_t i = 0; i < b->n_data; i++) {
    char *dst = b->buf[i];
    size_t rb = b->row_bytes[i];
    if ((int)i == b->mask) {
      float *m = (float *)dst;
      for (int64_t r = 0; r < b->batch; r++) m[r] = r < n ? 1.0f : 0.0f;
      continue;
    }
    const char *src = b->arrays[array_index(b, i)];
    if (!rows) {
      memcpy(dst, src + rb * (size_t)first, rb * (size_t)n);
    } else {
      for (int64_t r = 0; r < n; r++) memcpy(dst + rb * (size_t)r, src + rb * (size_t)rows[r], rb);
    }
    memset(dst + rb * (size_t)n, 0, rb * (size_t)(b->batch - n));
  }
}

/* Keras' Mean metrics of one epoch (or one evaluation): the loss tracker
 * [0] and the per-output losses [1..], f32 totals and a shared f32 count. */
typedef struct tracker {
  size_t n;                  /* 1 + metrics */
  float total[1 + KDC_RT_MAX_METRICS], count;
  float batch[1 + KDC_RT_MAX_METRICS]; /* the last batch's values */
} tracker;

static void tracker_init(tracker *k, const kdc_rt_train *t) {
  memset(k, 0, sizeof *k);
  k->n = 1 + kdc_rt_train_metric_count(t);
}

static void tracker_add(tracker *k, int64_t rows) {
  for (size_t j = 0; j < k->n; j++) k->total[j] += k->batch[j] * (float)rows;
  k->count += (float)rows;
}

/* The means into |loss| and |metrics| (k->n - 1 values, may be NULL). */
static void tracker_result(const tracker *k, double *loss, double *metrics) {
  *loss = (double)(k->total[0] / k->count);
  for (size_t j = 1; metrics && j < k->n; j++) metrics[j - 1] = (double)(k->total[j] / k->count);
}

static kdc_status check_rows(const batcher *b, int64_t rows) {
  if (rows <= 0) return KDC_ERR(KDC_INVALID_INPUT, "fit: no rows to train on");
  if (b->mask < 0 && rows % b->step)
    return KDC_ERR(KDC_UNSUPPORTED, "fit: %lld rows are not a multiple of the plan's batch %lld "
                   "and the plan has no sample_mask input (recompile it with this kdc)",
                   (long long)rows, (long long)b->step);
  return NULL;
}

/* Keras' Mean trackers over batches from |first| (|n| rows): the loss and
 * the per-output losses (|metrics|, may be NULL). */
static kdc_status eval_rows(batcher *b, int64_t first, int64_t rows, double *loss,
                            double *metrics) {
  KDC_RETURN_IF_ERROR(check_rows(b, rows));
  tracker k;
  tracker_init(&k, b->t);
  for (int64_t r0 = 0; r0 < rows; r0 += b->step) {
    int64_t n = rows - r0 < b->step ? rows - r0 : b->step;
    fill(b, NULL, first + r0, n);
    KDC_RETURN_IF_ERROR(kdc_rt_train_evaluate_metrics(b->t, b->bind, &k.batch[0], &k.batch[1]));
    tracker_add(&k, n);
  }
  tracker_result(&k, loss, metrics);
  return NULL;
}

kdc_status kdc_rt_fit_evaluate(kdc_rt_train *t, const void *const *arrays, int64_t rows,
                               double *loss) {
  return kdc_rt_fit_evaluate_metrics(t, arrays, rows, 0, loss, NULL);
}

kdc_status kdc_rt_fit_evaluate_batch(kdc_rt_train *t, const void *const *arrays, int64_t rows,
                                     int64_t batch_size, double *loss) {
  return kdc_rt_fit_evaluate_metrics(t, arrays, rows, batch_size, loss, NULL);
}

kdc_status kdc_rt_fit_evaluate_metrics(kdc_rt_train *t, const void *const *arrays, int64_t rows,
                                       int64_t batch_size, double *loss, double *metrics) {
  batcher b;
  kdc_status st = batcher_init(&b, t, arrays, batch_size);
  if (!st) st = eval_rows(&b, 0, rows, loss, metrics);
  batcher_free(&b);
  return st;
}

void kdc_rt_history_free(kdc_rt_history *h) {
  free(h->loss), free(h->val_loss), free(h->batch_loss);
  free(h->metrics), free(h->val_metrics);
  memset(h, 0, sizeof *h);
}

/* ---- staging ---------------------------------------------------------------- */

typedef struct stager {
  kdc_rt_plan *p;
  batcher *b;
  bool on;
  void *host[RT_CUDA_STAGE_SLOTS][64];  /* a batch per slot (pinned on CUDA) */
  void **dev[RT_CUDA_STAGE_SLOTS][64];  /* [slot][input]: per device (p->nd), d0's set */
  /* the batch the next during_run stages */
  const int64_t *rows;
  int64_t first, n;
  int slot;
} stager;

static bool staging_wanted(const kdc_rt_plan *p) {
  const char *e = getenv("KDC_FIT_STAGING");
  if (e && !strcmp(e, "0")) return false;
  if (e && !strcmp(e, "1")) return p->nd == 1 && p->d1 - p->d0 == 1;
  return p->cuda && p->nd == 1 && p->d1 - p->d0 == 1;
}

static kdc_status stager_init(stager *g, batcher *b) {
  memset(g, 0, sizeof *g);
  g->b = b;
  g->p = kdc_rt_train_plan(b->t);
  if (!staging_wanted(g->p)) return NULL;
  g->on = true;
  kdc_rt_plan *p = g->p;
  for (int k = 0; k < RT_CUDA_STAGE_SLOTS; k++)
    for (size_t i = 0; i < b->n_data; i++) {
      size_t bytes = (size_t)kdc_rt_train_data(b->t, i)->bytes;
      g->dev[k][i] = kdc_xcalloc((size_t)p->nd, sizeof(void *));
      if (p->cuda) KDC_RETURN_IF_ERROR(rt_cuda_host_alloc(p, bytes, &g->host[k][i]));
      else g->host[k][i] = kdc_xcalloc(1, bytes + 1);
      KDC_RETURN_IF_ERROR(rt_mem_alloc(p, p->d0, bytes, &g->dev[k][i][p->d0]));
    }
  return NULL;
}

static void stager_free(stager *g) {
  if (!g->on) return;
  kdc_rt_plan *p = g->p;
  if (p->cuda) rt_cuda_uploads_finish(p, p->d0); /* a failed step may leave one in flight */
  for (int k = 0; k < RT_CUDA_STAGE_SLOTS; k++)
    for (size_t i = 0; i < g->b->n_data; i++) {
      if (g->dev[k][i] && g->dev[k][i][p->d0]) rt_mem_free(p, p->d0, g->dev[k][i][p->d0]);
      free(g->dev[k][i]);
      if (p->cuda) rt_cuda_host_free(p, g->host[k][i]);
      else free(g->host[k][i]);
    }
}

/* Gathers the batch (rows / first, n) into slot |k|'s host buffers and
 * issues its upload. */
static kdc_status stage(stager *g, int k, const int64_t *rows, int64_t first, int64_t n) {
  batcher *b = g->b;
  kdc_rt_plan *p = g->p;
  void *own[64];
  memcpy(own, b->buf, b->n_data * sizeof *own);
  memcpy(b->buf, g->host[k], b->n_data * sizeof *own);
  fill(b, rows, first, n);
  memcpy(b->buf, own, b->n_data * sizeof *own);
  for (size_t i = 0; i < b->n_data; i++) {
    size_t bytes = (size_t)kdc_rt_train_data(b->t, i)->bytes;
    void *dst = g->dev[k][i][p->d0];
    KDC_RETURN_IF_ERROR(p->cuda ? rt_cuda_upload_async(p, p->d0, dst, g->host[k][i], bytes, k)
                                : rt_mem_put(p, p->d0, dst, g->host[k][i], bytes));
  }
  return NULL;
}

static kdc_status stage_next(void *user) {
  stager *g = user;
  return stage(g, g->slot, g->rows, g->first, g->n);
}

/* One training step of the staged loop: slot s % 2 holds step s's batch
 * (uploaded by the previous step, or now for s == 0); step s+1's batch,
 * when |has_next|, is staged into the other slot while this one runs. */
static kdc_status staged_step(stager *g, int64_t s, const int64_t *rows, int64_t r0, int64_t n,
                              bool has_next, const int64_t *next_rows, int64_t next_r0,
                              int64_t next_n, float *loss, float *metrics, int64_t *staged) {
  batcher *b = g->b;
  kdc_rt_plan *p = g->p;
  int k = (int)(s % RT_CUDA_STAGE_SLOTS);
  if (s == 0) KDC_RETURN_IF_ERROR(stage(g, k, rows, r0, n));
  else ++*staged;
  if (p->cuda) KDC_RETURN_IF_ERROR(rt_cuda_upload_wait(p, p->d0, k));
  for (size_t i = 0; i < b->n_data; i++) kdc_rt_train_bind_data_dev(b->t, i, g->dev[k][i]);
  if (has_next) {
    g->slot = 1 - k, g->rows = next_rows, g->first = next_r0, g->n = next_n;
    p->during_run = stage_next, p->during_user = g;
  }
  kdc_status st = kdc_rt_train_step_metrics(b->t, NULL, loss, metrics);
  p->during_run = NULL, p->during_user = NULL;
  for (size_t i = 0; i < b->n_data; i++) kdc_rt_train_bind_data_dev(b->t, i, NULL);
  return st;
}

static kdc_status run_epochs(batcher *b, int64_t train_rows, int64_t val_rows,
                             const kdc_rt_fit_options *o, kdc_rt_history *h) {
  int64_t steps = (train_rows + b->step - 1) / b->step;
  int64_t *perm = o->shuffle ? kdc_xcalloc((size_t)train_rows, sizeof *perm) : NULL;
  kdc_status st = NULL;
  size_t nm = h->n_metrics;
  double means[KDC_RT_MAX_METRICS + 1] = {0}, val_means[KDC_RT_MAX_METRICS + 1] = {0};
  stager g;
  st = stager_init(&g, b);
  for (int64_t e = 0; e < o->epochs && !st; e++) {
    kdc_rt_fit_progress pr = {.epoch = e, .epochs = o->epochs, .steps = steps, .val_loss = NAN,
                              .n_metrics = nm, .metrics = means};
    double t0 = now_s();
    tracker k;
    tracker_init(&k, b->t);
    if (perm) kdc_rt_fit_permutation(o->seed, e, train_rows, perm);
    for (int64_t s = 0; s < steps && !st; s++) {
      int64_t r0 = s * b->step, n = train_rows - r0 < b->step ? train_rows - r0 : b->step;
      if (g.on) {
        bool next = s + 1 < steps;
        int64_t r1 = next ? r0 + b->step : r0;
        int64_t n1 = train_rows - r1 < b->step ? train_rows - r1 : b->step;
        st = staged_step(&g, s, perm ? perm + r0 : NULL, r0, n, next, perm ? perm + r1 : NULL, r1,
                         n1, &k.batch[0], &k.batch[1], &h->staged);
      } else {
        fill(b, perm ? perm + r0 : NULL, r0, n);
        st = kdc_rt_train_step_metrics(b->t, b->bind, &k.batch[0], &k.batch[1]);
      }
      if (st) break;
      tracker_add(&k, n);
      h->batch_loss[e * steps + s] = k.batch[0];
      pr.step = s + 1;
      pr.batch_loss = k.batch[0];
      tracker_result(&k, &pr.loss, means);
      pr.seconds = now_s() - t0;
      if (o->on_batch) o->on_batch(o->user, &pr);
    }
    if (st) break;
    h->loss[e] = pr.loss;
    if (nm) memcpy(&h->metrics[e * (int64_t)nm], means, nm * sizeof *means);
    if (val_rows > 0) {
      st = eval_rows(b, train_rows, val_rows, &pr.val_loss, val_means);
      h->val_loss[e] = pr.val_loss;
      if (!st && nm) {
        memcpy(&h->val_metrics[e * (int64_t)nm], val_means, nm * sizeof *val_means);
        pr.val_metrics = val_means;
      }
    }
    pr.seconds = now_s() - t0;
    h->epochs = e + 1;
    if (!st && o->on_epoch) o->on_epoch(o->user, &pr);
  }
  stager_free(&g);
  free(perm);
  return st;
}

kdc_status kdc_rt_fit(kdc_rt_train *t, const void *const *arrays, int64_t rows,
                      const kdc_rt_fit_options *o, kdc_rt_history *h) {
  memset(h, 0, sizeof *h);
  if (o->epochs < 0) return KDC_ERR(KDC_INVALID_INPUT, "fit: epochs must be >= 0");
  if (!(o->validation_split >= 0 && o->validation_split < 1))
    return KDC_ERR(KDC_INVALID_INPUT, "fit: validation_split must be in [0, 1), got %g",
                   o->validation_split);
  int64_t train_rows = rows, val_rows = 0;
  if (o->validation_split > 0) {
    train_rows = (int64_t)floor((double)rows * (1.0 - o->validation_split));
    val_rows = rows - train_rows;
    if (train_rows == 0 || val_rows == 0)
      return KDC_ERR(KDC_INVALID_INPUT, "fit: validation_split %g of %lld rows leaves %s empty "
                     "(Keras refuses it too)", o->validation_split, (long long)rows,
                     train_rows ? "the validation set" : "the training set");
  }
  batcher b;
  kdc_status st = batcher_init(&b, t, arrays, o->batch_size);
  if (!st) st = check_rows(&b, train_rows);
  if (!st && val_rows) st = check_rows(&b, val_rows);
  if (!st) {
    int64_t steps = (train_rows + b.step - 1) / b.step;
    h->steps = steps;
    h->loss = kdc_xcalloc((size_t)o->epochs + 1, sizeof *h->loss);
    h->val_loss = val_rows ? kdc_xcalloc((size_t)o->epochs + 1, sizeof *h->val_loss) : NULL;
    h->batch_loss = kdc_xcalloc((size_t)(o->epochs * steps) + 1, sizeof *h->batch_loss);
    h->n_metrics = kdc_rt_train_metric_count(t);
    h->metrics = kdc_xcalloc((size_t)o->epochs * h->n_metrics + 1, sizeof *h->metrics);
    h->val_metrics =
        val_rows ? kdc_xcalloc((size_t)o->epochs * h->n_metrics + 1, sizeof *h->val_metrics) : NULL;
    st = run_epochs(&b, train_rows, val_rows, o, h);
  }
  batcher_free(&b);
  return st;
}
