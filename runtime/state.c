/*
 * runtime/state.c: training state resident on the devices (kdc_rt_train).
 *
 * A plan compiled with --loss has `train_step` (docs/training.md, "The
 * train_step ABI"): every result but "loss" is the next value of the
 * parameter or plan weight of the same name.  Those are the STATE tensors:
 * the trainable weights (plan WEIGHTS entries), `<opt>/iteration` and the
 * optimizer slots.  Every device holds its own piece of each (sharded as the
 * tensor is; replicas get their own copy when every device writes its
 * result, see "Shared replicas" below), twice: the current value and the
 * buffer the next step writes (ping-pong).  A step binds inputs to the
 * current buffers and outputs to the next ones, runs, and flips: nothing is
 * copied or allocated per step, and no kernel ever reads a buffer it (or a
 * later step) writes.  The plan's
 * weight pointers (p->dev_weights) are re-pointed at the current weight
 * pieces after every flip, so predict and evaluate see the trained weights.
 *
 * Shared replicas.  A state tensor whose train_step output only collectives
 * write (a weight rebuilt by the all_gather after its sharded update,
 * passes/shard_update.c) has, on the cpu device set, ONE pair of buffers
 * per distinct piece in this process: every local replica binds the same
 * buffers, the collective writes the shared result once (comm.h: exec.c
 * hands the backend NULL for the later devices) and every device's
 * consumers read that one copy.  Kernels never write a shared buffer (a
 * replicated update run by every device would race on it), so outputs with
 * any non-collective writer keep a buffer per device; CUDA plans too.
 *
 * The state tensor's sharding must be the same in the plan's weight table,
 * as a train_step input and as its output (SHARDING.md 8; passes/
 * train_step.c pins it); a plan where it is not is refused (it would need a
 * reshard between steps).
 *
 * Data inputs (model inputs, labels, sample_mask) are GLOBAL arrays, bound
 * like kdc_rt_plan_run_func binds them (shard_io.c's modes).
 *
 * Processes (docs/processes.md): a process holds the state of its own
 * devices [p->d0, p->d1) only, and each runs the same steps on the same
 * global batches (its devices read their pieces); the loss is replicated,
 * so every process has it.  kdc_rt_train_gather brings every other
 * process's pieces to process 0 (for a checkpoint).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/io.h"
#include "runtime/comm.h"
#include "runtime/runtime.h"

typedef struct st_tensor {
  const kdc_prog_tensor *t;  /* the train_step output */
  int in;                    /* train_step input index, or -1 (a weight) */
  int weight;                /* plan weight index, or -1 */
  void **buf[2];             /* [parity][device] */
  int64_t *owner;            /* per device: the device whose buffers it binds (itself, or
                                an earlier local replica: shared, see the file comment) */
} st_tensor;

struct kdc_rt_train {
  kdc_rt_plan *p;
  int step_fn, eval_fn;
  size_t n_state;
  st_tensor *s;
  int parity;                /* buf[parity] holds the current values */
  uint32_t *data_in;         /* train_step input index of each data input */
  size_t n_data;
  int loss_out;
  float *loss;               /* per device */
  size_t n_metrics;          /* results after "loss": the per-output losses "<output>_loss" */
  uint32_t *metric_out;      /* their train_step output indices */
  float *metrics;            /* [device * n_metrics + j] */
  const void **saved_weights;/* p->dev_weights before training */
  kdc_status mem_error;      /* a failed GPU copy in state_get/set (void API), returned by
                                the next train_step or evaluate */
  void *const **data_dev;    /* per data input: buffers where the kernels run holding each
                                device's piece (kdc_rt_train_bind_data_dev), or NULL */
};

static bool same_layout(const kdc_rt_plan *p, const kdc_prog_tensor *a, const kdc_prog_tensor *b) {
  if (a->rank != b->rank || a->dtype != b->dtype || a->local_bytes != b->local_bytes) return false;
  for (int d = 0; d < a->rank; d++)
    if (a->dims[d] != b->dims[d] || a->local_dims[d] != b->local_dims[d]) return false;
  int64_t oa[KDC_IO_MAX_RANK], ob[KDC_IO_MAX_RANK];
  for (int64_t dev = 0; dev < p->nd; dev++) {
    rt_mesh_piece_offsets(&p->prog.mesh, a, dev, oa);
    rt_mesh_piece_offsets(&p->prog.mesh, b, dev, ob);
    if (a->rank && memcmp(oa, ob, (size_t)a->rank * sizeof *oa)) return false;
  }
  return true;
}

static kdc_status layout_error(const kdc_rt_plan *p, const char *what, const kdc_prog_tensor *a,
                               const kdc_prog_tensor *b) {
  char sa[256], sb[256];
  kdc_prog_sharding_str(&p->prog.mesh, &a->sharding, a->rank, sa, sizeof sa);
  kdc_prog_sharding_str(&p->prog.mesh, &b->sharding, b->rank, sb, sizeof sb);
  return KDC_ERR(KDC_UNSUPPORTED, "%s: train_step: state \"%s\" is %s as an output but %s as %s "
                 "(state must keep one sharding between steps)", p->path, a->name, sa, sb, what);
}

/* The piece of global |src| that device |d| holds, into |dst|. */
static void piece_from_global(const kdc_rt_plan *p, const kdc_prog_tensor *t, int64_t d,
                              void *dst, const void *src) {
  int64_t off[KDC_IO_MAX_RANK], zero[KDC_IO_MAX_RANK] = {0};
  rt_box b;
  rt_mesh_piece_offsets(&p->prog.mesh, t, d, off);
  rt_box_init(&b, t->rank, kdc_prog_dtype_size(t->dtype), t->local_dims, t->dims, off,
              t->local_dims, zero);
  rt_box_copy(&b, dst, src, 0, b.rows);
}

static void piece_to_global(const kdc_rt_plan *p, const kdc_prog_tensor *t, int64_t d, void *dst,
                            const void *src) {
  int64_t off[KDC_IO_MAX_RANK], zero[KDC_IO_MAX_RANK] = {0};
  rt_box b;
  rt_mesh_piece_offsets(&p->prog.mesh, t, d, off);
  rt_box_init(&b, t->rank, kdc_prog_dtype_size(t->dtype), t->local_dims, t->local_dims, zero,
              t->dims, off);
  rt_box_copy(&b, dst, src, 0, b.rows);
}

/* State buffers live where the kernels run: host memory on the cpu device
 * set, GPU memory for a CUDA plan (rt_mem_*, docs/gpu.md).  These move a
 * piece between a global host array and device |d|'s buffer. */
static kdc_status put_piece(kdc_rt_plan *p, const kdc_prog_tensor *t, int64_t d, void *buf,
                            const void *global) {
  if (!p->cuda) {
    piece_from_global(p, t, d, buf, global);
    return NULL;
  }
  void *tmp = kdc_xmalloc(t->local_bytes + 1);
  piece_from_global(p, t, d, tmp, global);
  kdc_status st = rt_mem_put(p, d, buf, tmp, t->local_bytes);
  free(tmp);
  return st;
}

static kdc_status get_piece(kdc_rt_plan *p, const kdc_prog_tensor *t, int64_t d, void *global,
                            const void *buf) {
  if (!p->cuda) {
    piece_to_global(p, t, d, global, buf);
    return NULL;
  }
  void *tmp = kdc_xmalloc(t->local_bytes + 1);
  kdc_status st = rt_mem_get(p, d, tmp, buf, t->local_bytes);
  if (!st) piece_to_global(p, t, d, global, tmp);
  free(tmp);
  return st;
}

static void point_weights(kdc_rt_train *t) {
  kdc_rt_plan *p = t->p;
  for (size_t k = 0; k < t->n_state; k++)
    if (t->s[k].weight >= 0)
      for (int64_t d = p->d0; d < p->d1; d++)
        p->dev_weights[d * p->prog.n_weights + (uint32_t)t->s[k].weight] =
            t->s[k].buf[t->parity][d];
}

static kdc_status find_state(kdc_rt_train *t, const kdc_prog_func *f) {
  kdc_rt_plan *p = t->p;
  t->loss_out = -1;
  t->s = kdc_xcalloc(f->n_outputs + 1, sizeof *t->s);
  t->metric_out = kdc_xcalloc(f->n_outputs + 1, sizeof *t->metric_out);
  for (uint32_t o = 0; o < f->n_outputs; o++) {
    const kdc_prog_tensor *out = &f->outputs[o];
    if (!strcmp(out->name, "loss")) {
      t->loss_out = (int)o;
      continue;
    }
    if (t->loss_out >= 0) {  /* after "loss": a per-output loss (docs/training.md, the ABI) */
      if (out->bytes != sizeof(float) || out->dtype != KDC_IO_DTYPE_F32)
        return KDC_ERR(KDC_INVALID_INPUT, "%s: train_step result \"%s\" after \"loss\" is not "
                       "an f32 scalar", p->path, out->name);
      if (t->n_metrics == KDC_RT_MAX_METRICS)
        return KDC_ERR(KDC_UNSUPPORTED, "%s: train_step has more than %d per-output losses",
                       p->path, KDC_RT_MAX_METRICS);
      t->metric_out[t->n_metrics++] = o;
      continue;
    }
    st_tensor *s = &t->s[t->n_state++];
    s->t = out;
    s->in = s->weight = -1;
    for (uint32_t i = 0; i < f->n_inputs; i++)
      if (!strcmp(f->inputs[i].name, out->name)) s->in = (int)i;
    for (uint32_t w = 0; w < p->prog.n_weights; w++)
      if (!strcmp(p->prog.weights[w].name, out->name)) s->weight = (int)w;
    if ((s->in < 0) == (s->weight < 0))
      return KDC_ERR(KDC_INVALID_INPUT, "%s: train_step: result \"%s\" is not exactly one input "
                     "or weight", p->path, out->name);
    const kdc_prog_tensor *src = s->in >= 0 ? &f->inputs[s->in] : &p->prog.weights[s->weight];
    if (!same_layout(p, out, src))
      return layout_error(p, s->in >= 0 ? "an input" : "a plan weight", out, src);
  }
  if (t->loss_out < 0 || f->outputs[t->loss_out].bytes != sizeof(float) ||
      f->outputs[t->loss_out].dtype != KDC_IO_DTYPE_F32)
    return KDC_ERR(KDC_INVALID_INPUT, "%s: train_step has no f32 scalar \"loss\"", p->path);
  t->data_in = kdc_xcalloc(f->n_inputs + 1, sizeof *t->data_in);
  for (uint32_t i = 0; i < f->n_inputs; i++) {
    bool state = false;
    for (size_t k = 0; k < t->n_state; k++) state = state || t->s[k].in == (int)i;
    if (!state) t->data_in[t->n_data++] = i;
  }
  return NULL;
}

/* Which local device's buffers each device of state |s| binds (|first|:
 * scratch of nd). */
static void share_replicas(kdc_rt_train *t, st_tensor *s, int64_t *first) {
  kdc_rt_plan *p = t->p;
  const kdc_prog_func *f = &p->prog.funcs[t->step_fn];
  s->owner = kdc_xcalloc((size_t)p->nd, sizeof *s->owner);
  for (int64_t d = 0; d < p->nd; d++) s->owner[d] = d, first[d] = -1;
  if (p->cuda || !rt_exec_output_shareable(f, (uint32_t)(s->t - f->outputs))) return;
  for (int64_t d = p->d0; d < p->d1; d++) {  /* the first local device with d's piece */
    int64_t c = rt_mesh_canonical(&p->prog.mesh, s->t, d);
    if (first[c] < 0) first[c] = d;
    s->owner[d] = first[c];
  }
}

static kdc_status alloc_state(kdc_rt_train *t) {
  kdc_rt_plan *p = t->p;
  int64_t *first = kdc_xcalloc((size_t)p->nd, sizeof *first);
  for (size_t k = 0; k < t->n_state; k++) {
    st_tensor *s = &t->s[k];
    size_t bytes = (s->t->local_bytes + 63) / 64 * 64;
    if (!bytes) bytes = 64;
    share_replicas(t, s, first);
    for (int par = 0; par < 2; par++) {
      s->buf[par] = kdc_xcalloc((size_t)p->nd, sizeof(void *));
      for (int64_t d = p->d0; d < p->d1; d++) {  /* this process's devices */
        if (s->owner[d] != d) {
          s->buf[par][d] = s->buf[par][s->owner[d]];
          continue;
        }
        void *b = NULL;
        kdc_status st = kdc_status_annotate(rt_mem_alloc(p, d, bytes, &b),
                                            "training state \"%s\"", s->t->name);
        if (!st) s->buf[par][d] = b;
        if (!st && s->weight >= 0) st = put_piece(p, s->t, d, b, p->prog.weight_data[s->weight]);
        if (st) {
          free(first);
          return st;
        }
      }
    }
  }
  free(first);
  return NULL;
}

kdc_status kdc_rt_train_create(kdc_rt_plan *p, kdc_rt_train **out) {
  *out = NULL;
  kdc_rt_train *t = kdc_xcalloc(1, sizeof *t);
  t->p = p;
  t->step_fn = kdc_rt_plan_find_func(p, "train_step");
  t->eval_fn = kdc_rt_plan_find_func(p, "evaluate");
  kdc_status st = NULL;
  if (t->step_fn < 0)
    st = KDC_ERR(KDC_INVALID_INPUT, "%s: the plan has no train_step (compile it with --loss, or "
                 "from a model with a compile_config)", p->path);
  if (!st && p->cuda && p->n_procs > 1)
    st = KDC_ERR(KDC_UNSUPPORTED, "%s: training a CUDA plan over %d processes is not supported "
                 "(one process driving every GPU is; docs/gpu.md)", p->path, p->n_procs);
  if (!st) st = find_state(t, &p->prog.funcs[t->step_fn]);
  if (!st) st = alloc_state(t);
  if (st) {
    kdc_rt_train_destroy(t);
    return st;
  }
  t->loss = kdc_xcalloc((size_t)p->nd, sizeof *t->loss);
  t->data_dev = kdc_xcalloc(t->n_data + 1, sizeof *t->data_dev);
  t->metrics = kdc_xcalloc((size_t)p->nd * t->n_metrics + 1, sizeof *t->metrics);
  size_t nw = (size_t)p->nd * p->prog.n_weights;
  t->saved_weights = kdc_xcalloc(nw + 1, sizeof *t->saved_weights);
  memcpy(t->saved_weights, p->dev_weights, nw * sizeof *t->saved_weights);
  kdc_rt_plan_retain(p);
  point_weights(t);
  const void *data;
  size_t size;
  if (p->file && kdc_plan_file_find(p->file, KDC_PLAN_SECTION_TRAIN_STATE, &data, &size)) {
    char name[600];  /* optimizer state restored by `kdc compile --weights CHECKPOINT` */
    snprintf(name, sizeof name, "%s: section train_state", p->path);
    if ((st = kdc_rt_train_load_initial(t, name, data, size))) {
      kdc_rt_train_destroy(t);
      return st;
    }
  }
  *out = t;
  return NULL;
}

void kdc_rt_train_destroy(kdc_rt_train *t) {
  if (!t) return;
  if (t->saved_weights) /* give the plan its own weight pieces back */
    memcpy(t->p->dev_weights, t->saved_weights,
           (size_t)t->p->nd * t->p->prog.n_weights * sizeof *t->saved_weights);
  for (size_t k = 0; k < t->n_state; k++) {
    for (int par = 0; par < 2; par++) {
      if (!t->s[k].buf[par]) continue;
      for (int64_t d = 0; d < t->p->nd; d++)  /* shared buffers once, by their owner */
        if (t->s[k].buf[par][d] && t->s[k].owner[d] == d)
          rt_mem_free(t->p, d, t->s[k].buf[par][d]);
      free(t->s[k].buf[par]);
    }
    free(t->s[k].owner);
  }
  if (t->loss) kdc_rt_plan_release(t->p);
  free(t->s), free(t->data_in), free(t->loss), free(t->saved_weights), free(t->data_dev);
  free(t->metric_out), free(t->metrics);
  kdc_status_free(t->mem_error);
  free(t);
}

size_t kdc_rt_train_data_count(const kdc_rt_train *t) { return t->n_data; }

const kdc_rt_tensor_info *kdc_rt_train_data(const kdc_rt_train *t, size_t i) {
  return &t->p->prog.funcs[t->step_fn].inputs[t->data_in[i]];
}

size_t kdc_rt_train_state_count(const kdc_rt_train *t) { return t->n_state; }

const kdc_rt_tensor_info *kdc_rt_train_state(const kdc_rt_train *t, size_t k) {
  return t->s[k].t;
}

bool kdc_rt_train_state_is_weight(const kdc_rt_train *t, size_t k) { return t->s[k].weight >= 0; }

bool kdc_rt_train_state_gate_packed(const kdc_rt_train *t, size_t k) {
  const st_tensor *s = &t->s[k];
  if (s->in >= 0) return t->p->prog.funcs[t->step_fn].inputs[s->in].gate_packed;
  return t->p->prog.weights[s->weight].gate_packed;
}

size_t kdc_rt_train_state_copies(const kdc_rt_train *t, size_t k) {
  size_t n = 0;
  for (int64_t d = t->p->d0; d < t->p->d1; d++) n += t->s[k].owner[d] == d;
  return n;
}

size_t kdc_rt_train_metric_count(const kdc_rt_train *t) { return t->n_metrics; }

const char *kdc_rt_train_metric_name(const kdc_rt_train *t, size_t j) {
  return t->p->prog.funcs[t->step_fn].outputs[t->metric_out[j]].name;
}

/* Keeps the first GPU copy failure of the void state API. */
static void keep_error(kdc_rt_train *t, kdc_status st) {
  if (st && !t->mem_error) t->mem_error = st;
  else kdc_status_free(st);
}

void kdc_rt_train_state_get(const kdc_rt_train *t, size_t k, void *global) {
  const st_tensor *s = &t->s[k];
  for (int64_t d = 0; d < t->p->nd; d++)
    if (rt_mesh_canonical(&t->p->prog.mesh, s->t, d) == d)
      keep_error((kdc_rt_train *)t, get_piece(t->p, s->t, d, global, s->buf[t->parity][d]));
}

void kdc_rt_train_state_set(kdc_rt_train *t, size_t k, const void *global) {
  const st_tensor *s = &t->s[k];
  for (int64_t d = t->p->d0; d < t->p->d1; d++)
    if (s->owner[d] == d) keep_error(t, put_piece(t->p, s->t, d, s->buf[t->parity][d], global));
}

/* Binds data input |i| of |f| (global array |g|) on every device, as
 * rt_io_split does: in place when replicated or contiguous, else staged. */
static void bind_data(kdc_rt_plan *p, const kdc_prog_func *f, rt_func *rf, uint32_t i,
                      const void *g) {
  const rt_io *io = &rf->in[i];
  for (int64_t d = 0; d < p->nd; d++) {
    const void **slot = &rf->in_ptr[d * f->n_inputs + i];
    if (io->mode == RT_IO_SHARED) {
      *slot = g;
    } else if (io->mode == RT_IO_SLICE) {
      *slot = (const char *)g + io->offset[d];
    } else {
      if (io->canonical[d] == d) piece_from_global(p, io->t, d, io->staging[d], g);
      *slot = io->staging[io->canonical[d]];
    }
  }
}

/* Every replica of the loss and of each new state piece equals its
 * canonical copy bitwise (the replica check of shard_io.c, for state). */
/* Do devices |d| and |c| hold the same bytes of state |k|? */
static bool same_piece(const kdc_rt_train *t, size_t k, int par, int64_t d, int64_t c) {
  const st_tensor *s = &t->s[k];
  size_t n = s->t->local_bytes;
  if (s->buf[par][d] == s->buf[par][c]) return true; /* a shared replica */
  if (!t->p->cuda) return !memcmp(s->buf[par][d], s->buf[par][c], n);
  char *a = kdc_xmalloc(n + 1), *b = kdc_xmalloc(n + 1);
  kdc_status st = rt_mem_get(t->p, d, a, s->buf[par][d], n);
  if (!st) st = rt_mem_get(t->p, c, b, s->buf[par][c], n);
  bool same = !st && !memcmp(a, b, n);
  kdc_status_free(st);
  free(a), free(b);
  return same;
}

static kdc_status check_replicas(const kdc_rt_train *t, int next) {
  const kdc_rt_plan *p = t->p;
  size_t nm = t->n_metrics;
  for (int64_t d = p->d0 + 1; d < p->d1; d++)
    if (memcmp(&t->loss[d], &t->loss[p->d0], sizeof(float)) ||
        (nm && memcmp(&t->metrics[d * (int64_t)nm], &t->metrics[p->d0 * (int64_t)nm],
                      nm * sizeof(float))))
      return KDC_ERR(KDC_INTERNAL, "%s: train_step: the loss on device %lld differs from device "
                     "%lld's", p->path, (long long)d, (long long)p->d0);
  for (size_t k = 0; k < t->n_state; k++)
    for (int64_t d = p->d0; d < p->d1; d++) {  /* replicas in this process */
      int64_t c = rt_mesh_canonical(&p->prog.mesh, t->s[k].t, d);
      if (c != d && c >= p->d0 && !same_piece(t, k, next, d, c))
        return KDC_ERR(KDC_INTERNAL, "%s: train_step: state \"%s\" on device %lld differs from "
                       "its replica on device %lld", p->path, t->s[k].t->name, (long long)d,
                       (long long)c);
    }
  return NULL;
}

/* A CUDA plan's state is GPU memory: bound as the step's GPU buffers
 * (in_dev / out_dev, never staged through the host); cur < 0 unbinds. */
static void bind_gpu_state(kdc_rt_train *t, rt_func *rf, const kdc_prog_func *f, int cur,
                           int next) {
  kdc_rt_plan *p = t->p;
  if (!p->cuda) return;
  for (int64_t d = p->d0; d < p->d1; d++) {
    for (size_t i = 0; i < t->n_data; i++) /* resident / staged data (bind_data_dev) */
      if (t->data_dev[i])
        rf->in_dev[d * f->n_inputs + t->data_in[i]] = cur < 0 ? NULL : t->data_dev[i][d];
    for (size_t k = 0; k < t->n_state; k++) {
      const st_tensor *s = &t->s[k];
      if (s->in >= 0)
        rf->in_dev[d * f->n_inputs + (uint32_t)s->in] = cur < 0 ? NULL : s->buf[cur][d];
      rf->out_dev[d * f->n_outputs + (size_t)(s->t - f->outputs)] =
          next < 0 ? NULL : s->buf[next][d];
    }
  }
}

void kdc_rt_train_bind_data_dev(kdc_rt_train *t, size_t i, void *const *dev) {
  if (i < t->n_data) t->data_dev[i] = dev;
}

kdc_status kdc_rt_train_data_upload(kdc_rt_train *t, size_t i, const void *g, void **dev) {
  kdc_rt_plan *p = t->p;
  const kdc_prog_func *f = &p->prog.funcs[t->step_fn];
  rt_func *rf = &p->funcs[t->step_fn];
  uint32_t in = t->data_in[i];
  memset(dev, 0, (size_t)p->nd * sizeof *dev);
  bind_data(p, f, rf, in, g); /* every device's piece, on the host */
  for (int64_t d = p->d0; d < p->d1; d++) {
    size_t n = f->inputs[in].local_bytes;
    KDC_RETURN_IF_ERROR(rt_mem_alloc(p, d, n, &dev[d]));
    KDC_RETURN_IF_ERROR(rt_mem_put(p, d, dev[d], rf->in_ptr[d * f->n_inputs + in], n));
  }
  return NULL;
}

void kdc_rt_train_data_free(kdc_rt_train *t, void **dev) {
  for (int64_t d = t->p->d0; d < t->p->d1; d++) {
    if (dev[d]) rt_mem_free(t->p, d, dev[d]);
    dev[d] = NULL;
  }
}

kdc_rt_plan *kdc_rt_train_plan(const kdc_rt_train *t) { return t->p; }

/* Binds the scalar results of |f| (train_step): "loss" and the per-output
 * losses, per device. */
static void bind_scalars(kdc_rt_train *t, const kdc_prog_func *f, rt_func *rf, int64_t d) {
  rf->out_ptr[d * f->n_outputs + (uint32_t)t->loss_out] = &t->loss[d];
  for (size_t j = 0; j < t->n_metrics; j++)
    rf->out_ptr[d * f->n_outputs + t->metric_out[j]] = &t->metrics[d * (int64_t)t->n_metrics + j];
}

kdc_status kdc_rt_train_step(kdc_rt_train *t, const void *const *data, float *loss) {
  return kdc_rt_train_step_metrics(t, data, loss, NULL);
}

kdc_status kdc_rt_train_step_metrics(kdc_rt_train *t, const void *const *data, float *loss,
                                     float *metrics) {
  kdc_rt_plan *p = t->p;
  const kdc_prog_func *f = &p->prog.funcs[t->step_fn];
  rt_func *rf = &p->funcs[t->step_fn];
  int cur = t->parity, next = 1 - cur;
  if (t->mem_error) { /* an earlier state_get/set failed on the GPU */
    kdc_status st = t->mem_error;
    t->mem_error = NULL;
    return st;
  }
  for (size_t i = 0; i < t->n_data; i++) {
    if (t->data_dev[i]) { /* already where the kernels run */
      if (!p->cuda)
        for (int64_t d = p->d0; d < p->d1; d++)
          rf->in_ptr[d * f->n_inputs + t->data_in[i]] = t->data_dev[i][d];
      continue;
    }
    if ((!data || !data[i]) && f->inputs[t->data_in[i]].bytes)
      return KDC_ERR(KDC_INVALID_INPUT, "%s: train_step: input \"%s\" is missing", p->path,
                     f->inputs[t->data_in[i]].name);
    bind_data(p, f, rf, t->data_in[i], data[i]);
  }
  for (int64_t d = 0; d < p->nd; d++) {
    for (size_t k = 0; k < t->n_state; k++) {
      const st_tensor *s = &t->s[k];
      if (s->in >= 0) rf->in_ptr[d * f->n_inputs + (uint32_t)s->in] = s->buf[cur][d];
      rf->out_ptr[d * f->n_outputs + (size_t)(s->t - f->outputs)] = s->buf[next][d];
    }
    bind_scalars(t, f, rf, d);
  }
  bind_gpu_state(t, rf, f, cur, next);
  kdc_status st = rt_exec_steps(p, (size_t)t->step_fn);
  bind_gpu_state(t, rf, f, -1, -1);
  KDC_RETURN_IF_ERROR(st);
  if (p->check_replicas) KDC_RETURN_IF_ERROR(check_replicas(t, next));
  t->parity = next;
  point_weights(t);
  *loss = t->loss[p->d0];  /* replicated: every process has it */
  if (metrics && t->n_metrics)
    memcpy(metrics, &t->metrics[p->d0 * (int64_t)t->n_metrics], t->n_metrics * sizeof *metrics);
  return NULL;
}

kdc_status kdc_rt_train_evaluate(kdc_rt_train *t, const void *const *data, float *loss) {
  return kdc_rt_train_evaluate_metrics(t, data, loss, NULL);
}

kdc_status kdc_rt_train_evaluate_metrics(kdc_rt_train *t, const void *const *data, float *loss,
                                         float *metrics) {
  kdc_rt_plan *p = t->p;
  if (t->eval_fn < 0) return KDC_ERR(KDC_INVALID_INPUT, "%s: the plan has no evaluate", p->path);
  const kdc_prog_func *f = &p->prog.funcs[t->eval_fn], *ts = &p->prog.funcs[t->step_fn];
  const void *in[64];
  bool same = f->n_outputs == 1 + t->n_metrics && !strcmp(f->outputs[0].name, "loss");
  for (size_t j = 0; same && j < t->n_metrics; j++)
    same = !strcmp(f->outputs[1 + j].name, kdc_rt_train_metric_name(t, j)) &&
           f->outputs[1 + j].bytes == sizeof(float);
  if (f->n_inputs > 64 || !same)
    return KDC_ERR(KDC_UNSUPPORTED, "%s: evaluate: unexpected signature (results \"loss\" and "
                   "train_step's per-output losses expected)", p->path);
  for (uint32_t i = 0; i < f->n_inputs; i++) {
    in[i] = NULL;
    for (size_t k = 0; k < t->n_data; k++)
      if (!strcmp(ts->inputs[t->data_in[k]].name, f->inputs[i].name)) in[i] = data[k];
  }
  float vals[1 + KDC_RT_MAX_METRICS];
  void *out[1 + KDC_RT_MAX_METRICS];
  if (t->n_metrics > KDC_RT_MAX_METRICS)
    return KDC_ERR(KDC_UNSUPPORTED, "%s: evaluate: %zu per-output losses (at most %d)", p->path,
                   t->n_metrics, KDC_RT_MAX_METRICS);
  for (uint32_t o = 0; o < f->n_outputs; o++) out[o] = &vals[o];
  KDC_RETURN_IF_ERROR(kdc_rt_plan_run_func(p, (size_t)t->eval_fn, in, out));
  if (p->proc_id != 0)  /* only process 0 gathers; the losses are replicated on our devices */
    for (uint32_t o = 0; o < f->n_outputs; o++)
      memcpy(&vals[o], p->funcs[t->eval_fn].out_ptr[p->d0 * (int64_t)f->n_outputs + o],
             sizeof *vals);
  *loss = vals[0];
  if (metrics && t->n_metrics) memcpy(metrics, &vals[1], t->n_metrics * sizeof *metrics);
  return NULL;
}

int kdc_rt_train_process(const kdc_rt_train *t) { return t->p->proc_id; }

kdc_status kdc_rt_train_gather(kdc_rt_train *t) {
  kdc_rt_plan *p = t->p;
  if (p->n_procs <= 1) return NULL;
  const kdc_prog_func *f = &p->prog.funcs[t->step_fn];
  rt_func *rf = &p->funcs[t->step_fn];
  for (int64_t d = 0; d < p->nd; d++) {
    bool mine = d >= p->d0 && d < p->d1;
    if (!mine && p->proc_id != 0) continue;
    for (size_t k = 0; k < t->n_state; k++) {
      st_tensor *s = &t->s[k];
      if (!s->buf[t->parity][d])  /* process 0: room for another process's piece */
        KDC_RETURN_IF_ERROR(kdc_status_annotate(
            rt_mem_alloc(p, d, s->t->local_bytes, &s->buf[t->parity][d]),
            "training state \"%s\"", s->t->name));
      rf->out_ptr[d * f->n_outputs + (size_t)(s->t - f->outputs)] = s->buf[t->parity][d];
    }
    bind_scalars(t, f, rf, d);
  }
  return p->comm->vt->collect_outputs(p->comm, p, (size_t)t->step_fn);
}
