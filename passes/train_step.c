/*
 * passes/train_step.c: builds `train_step` and `evaluate` from the forward
 * function (kdc_pass_build_training).
 *
 * train_step = forward program + labels + loss (passes/losses.c; with
 * several outputs, sum_i weight_i * loss_i over the trained outputs, Keras
 * 3's CompileLoss, docs/training.md "Several outputs") + its
 * gradients with respect to every trainable weight (passes/autodiff.c) + one
 * optimizer update per weight (passes/optimizers.c).  Optimizer state lives
 * in KDC_PARAM_STATE parameters named like Keras' optimizer variables, and
 * every updated parameter is returned as a result of the same name, so the
 * runtime can write results back into the parameters' buffers in place.  The
 * exact ABI (parameter and result order) is in docs/training.md; this file
 * is its one implementation.
 *
 * The forward program is `train_forward` when the module has one (the
 * training-mode lowering: dropout active), else `predict`.  In
 * train_forward, an i32 scalar STATE parameter named "iteration" is the step
 * counter (for rng_uniform's per-step key) and becomes the optimizer's
 * iteration parameter.
 *
 * Non-trainable weights (kdc_weight.trainable false) are inputs only,
 * unless the forward function returns a result of the same name (a
 * train_forward state update: BatchNormalization's moving statistics): that
 * result is returned as the weight's next value, after the trainable
 * weights, and train_forward's "sample_mask" is also the loss's.  A
 * trainable weight the loss does not depend on keeps its value and its slots
 * (Keras filters out variables without a gradient), but it still has slots
 * and results, so the ABI depends only on the weights, not on the graph.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/io.h"
#include "passes/passes.h"

void kdc_train_options_init(kdc_train_options *o, kdc_loss_kind loss,
                            kdc_optimizer_kind optimizer) {
  memset(o, 0, sizeof *o);
  o->loss = loss;
  kdc_optimizer_options_init(&o->optimizer, optimizer);
}

/* A copy of |src| named |name| with the same ids, parameters and origins;
 * results are not copied. */
static kdc_func *clone_func(kdc_module *m, const kdc_func *src, const char *name) {
  kdc_func *f = kdc_ir_func_create(m, name);
  for (size_t v = 0; v < src->n_nodes; v++) {
    const kdc_node *n = &src->nodes[v];
    f->cur_origin = n->origin;
    kdc_value_id id = kdc_ir_append(f, n->op, &n->type, n->n_in, n->in, &n->attr);
    f->nodes[id].sharding = n->sharding;
  }
  f->cur_origin = NULL;
  return f;
}

static bool is_trainable(const kdc_module *m, const kdc_node *p) {
  if (p->op != KDC_OP_PARAMETER || p->attr.param.kind != KDC_PARAM_WEIGHT) return false;
  const kdc_weight *w = kdc_ir_module_find_weight(m, p->attr.param.name);
  return !w || w->trainable;
}

/* "adam/d1_kernel_momentum" */
static const char *slot_name(kdc_module *m, const char *opt, const char *var, const char *slot) {
  char *s = kdc_arena_printf(m->arena, "%s/%s_%s", opt, var, slot);
  for (char *p = s + strlen(opt) + 1; *p; p++)
    if (*p == '/') *p = '_';
  return s;
}

/* |f|'s parameter of kind |kind| named |name|, or KDC_NO_VALUE. */
static kdc_value_id find_param(const kdc_func *f, kdc_param_kind kind, const char *name) {
  for (size_t i = 0; i < f->n_params; i++) {
    const kdc_node *p = &f->nodes[f->params[i]];
    if (p->attr.param.kind == kind && !strcmp(p->attr.param.name, name)) return f->params[i];
  }
  return KDC_NO_VALUE;
}

/* The loss of each predict result (Keras 3 CompileLoss): which results are
 * trained, with which loss and weight, from |o|'s single loss or its
 * per-output lists/dicts resolved against |fwd|'s result names. */
typedef struct loss_plan {
  size_t n;                              /* results */
  bool trained[KDC_TRAIN_MAX_OUTPUTS];
  kdc_loss_kind kind[KDC_TRAIN_MAX_OUTPUTS];
  bool logits[KDC_TRAIN_MAX_OUTPUTS];
  double weight[KDC_TRAIN_MAX_OUTPUTS];
} loss_plan;

static const char *result_name(const kdc_func *fwd, size_t r) {
  return fwd->result_names[r] ? fwd->result_names[r] : "labels";
}

/* Whether result |r| of |f| is a Keras output mask (KDC_MASK_RESULT_SUFFIX). */
static bool is_mask_result(const kdc_func *f, size_t r) {
  const char *n = f->result_names[r];
  size_t ln = n ? strlen(n) : 0, ls = strlen(KDC_MASK_RESULT_SUFFIX);
  return ln > ls && !strcmp(n + ln - ls, KDC_MASK_RESULT_SUFFIX);
}

/* The Keras mask result of output |r| of |fwd|, or KDC_NO_VALUE. */
static kdc_value_id output_mask(const kdc_func *fwd, size_t r) {
  const char *name = fwd->result_names[r];
  if (!name) return KDC_NO_VALUE;
  size_t ln = strlen(name);
  for (size_t i = 0; i < fwd->n_results; i++)
    if (is_mask_result(fwd, i) && !strncmp(fwd->result_names[i], name, ln) &&
        !strcmp(fwd->result_names[i] + ln, KDC_MASK_RESULT_SUFFIX))
      return fwd->results[i];
  return KDC_NO_VALUE;
}

/* Drops |f|'s Keras mask results (the frontend adds them for the loss). */
static void drop_mask_results(kdc_func *f) {
  size_t k = 0;
  for (size_t r = 0; r < f->n_results; r++) {
    if (is_mask_result(f, r)) continue;
    f->results[k] = f->results[r];
    f->result_names[k++] = f->result_names[r];
  }
  f->n_results = k;
}

/* Index of the entry |e| (position |i| of its list of |n|) among |fwd|'s results. */
static kdc_status entry_index(const kdc_func *fwd, size_t n_out, const struct kdc_output_loss *e,
                              size_t i, size_t n, const char *what, size_t *out) {
  if (!e->output) {
    if (n != n_out)
      return KDC_ERR(KDC_INVALID_INPUT, "training: %s has %zu entries but the model has %zu "
                     "outputs", what, n, n_out);
    *out = i;
    return NULL;
  }
  for (size_t r = 0; r < n_out; r++)
    if (fwd->result_names[r] && !strcmp(fwd->result_names[r], e->output)) {
      *out = r;
      return NULL;
    }
  return KDC_ERR(KDC_INVALID_INPUT, "training: %s names output \"%s\", which the model does not "
                 "have (outputs: %s%s%s)", what, e->output, result_name(fwd, 0),
                 n_out > 1 ? ", " : "", n_out > 1 ? result_name(fwd, 1) : "");
}

static kdc_status plan_losses(const kdc_func *fwd, size_t n_out, const kdc_train_options *o,
                              loss_plan *p) {
  memset(p, 0, sizeof *p);
  p->n = n_out;
  if (p->n > KDC_TRAIN_MAX_OUTPUTS)
    return KDC_ERR(KDC_UNSUPPORTED, "training: %zu outputs (at most %d)", p->n,
                   KDC_TRAIN_MAX_OUTPUTS);
  for (size_t r = 0; r < p->n; r++) p->weight[r] = 1.0;
  if (o->n_losses == 0) {
    for (size_t r = 0; r < p->n; r++) {
      p->trained[r] = o->every_output || r == (size_t)o->output;
      p->kind[r] = o->loss;
      p->logits[r] = o->from_logits;
    }
  }
  for (size_t i = 0; i < o->n_losses; i++) {
    const struct kdc_output_loss *e = &o->losses[i];
    size_t r = 0;
    KDC_RETURN_IF_ERROR(entry_index(fwd, n_out, e, i, o->n_losses, "the loss", &r));
    if ((unsigned)e->loss >= KDC_LOSS_COUNT)
      return KDC_ERR(KDC_INVALID_INPUT, "training: unknown loss %d", (int)e->loss);
    p->trained[r] = !e->none;
    p->kind[r] = e->loss;
    p->logits[r] = e->from_logits;
  }
  for (size_t i = 0; i < o->n_weights; i++) {
    size_t r = 0;
    KDC_RETURN_IF_ERROR(entry_index(fwd, n_out, &o->weights[i], i, o->n_weights, "loss_weights", &r));
    p->weight[r] = o->weights[i].weight;
  }
  for (size_t r = 0; r < p->n; r++)
    if (p->trained[r]) return NULL;
  return KDC_ERR(KDC_INVALID_INPUT, "training: every output's loss is None");
}

/* The unweighted loss of each trained output, when more than one output is
 * trained (Keras 3 CompileLoss adds a Mean metric "<output>_loss" per flat
 * loss only then): results after "loss" (docs/training.md, the ABI). */
typedef struct output_losses {
  size_t n;
  kdc_value_id value[KDC_TRAIN_MAX_OUTPUTS];
  const char *name[KDC_TRAIN_MAX_OUTPUTS];   /* "<output>_loss" */
} output_losses;

static void add_output_loss_results(kdc_func *f, const output_losses *ol) {
  for (size_t i = 0; i < ol->n; i++) kdc_ir_add_result(f, ol->value[i], ol->name[i]);
}

/* Appends one labels parameter per trained result of |fwd| (named after the
 * result, in result order), then "sample_mask" (unless the forward function
 * already has it: BatchNormalization's batch statistics use it too), and the
 * total loss sum_r weight_r * loss_r (Keras 3 CompileLoss) of |f| (whose
 * results are then cleared); |ol| gets the per-output losses. */
static kdc_status add_loss(kdc_func *f, const kdc_func *fwd, size_t n_out,
                           const kdc_train_options *o, kdc_value_id *out_loss,
                           output_losses *ol) {
  loss_plan p;
  KDC_RETURN_IF_ERROR(plan_losses(fwd, n_out, o, &p));
  kdc_value_id labels[KDC_TRAIN_MAX_OUTPUTS];
  kdc_value_id mask = find_param(f, KDC_PARAM_LABEL, "sample_mask");
  kdc_type pt = {0}; /* a copy: appending parameters moves the nodes */
  for (size_t r = 0; r < p.n; r++) {
    if (!p.trained[r]) continue;
    kdc_value_id y_pred = fwd->results[r];
    kdc_type lt = kdc_loss_label_type(p.kind[r], kdc_ir_type(f, y_pred));
    if (pt.rank < 2) pt = *kdc_ir_type(f, y_pred);
    labels[r] = kdc_ir_parameter(f, KDC_PARAM_LABEL, result_name(fwd, r), &lt);
  }
  if (mask == KDC_NO_VALUE && o->sample_mask && pt.rank >= 2) {
    kdc_type mt = kdc_type_make(KDC_DTYPE_F32, 1, &pt.dims[0]);
    mask = kdc_ir_parameter(f, KDC_PARAM_LABEL, "sample_mask", &mt);
  }
  KDC_RETURN_IF_ERROR(kdc_ir_take_error(f));
  kdc_value_id total = KDC_NO_VALUE;
  size_t n_trained = 0;
  for (size_t r = 0; r < p.n; r++) n_trained += p.trained[r];
  memset(ol, 0, sizeof *ol);
  for (size_t r = 0; r < p.n; r++) {
    if (!p.trained[r]) continue;
    kdc_value_id l = KDC_NO_VALUE;
    kdc_status st = kdc_loss_build_keras_masked(f, p.kind[r], p.logits[r], labels[r],
                                                fwd->results[r], mask, output_mask(fwd, r), &l);
    if (st) return kdc_status_annotate(st, "func %s: output \"%s\"", f->name, result_name(fwd, r));
    if (n_trained > 1) {
      ol->value[ol->n] = l;
      ol->name[ol->n++] = fwd->result_names[r]
                              ? kdc_arena_printf(f->module->arena, "%s_loss", fwd->result_names[r])
                              : kdc_arena_printf(f->module->arena, "output_%zu_loss", r);
    }
    if (p.weight[r] != 1.0) l = kdc_ir_binary_scalar(f, KDC_OP_MUL, l, p.weight[r]);
    total = total == KDC_NO_VALUE ? l : kdc_ir_binary(f, KDC_OP_ADD, total, l);
  }
  *out_loss = total;
  return kdc_ir_take_error(f);
}

static kdc_status build_evaluate(kdc_module *m, const kdc_func *predict, size_t n_out,
                                 const kdc_train_options *o) {
  kdc_func *f = clone_func(m, predict, "evaluate");
  kdc_value_id loss;
  output_losses ol;
  KDC_RETURN_IF_ERROR(add_loss(f, predict, n_out, o, &loss, &ol));
  kdc_ir_add_result(f, loss, "loss");
  add_output_loss_results(f, &ol);
  return kdc_ir_take_error(f);
}

/* The step counter: train_forward's "iteration" parameter, renamed, or a new one. */
static kdc_value_id iteration_param(kdc_func *f, const char *opt) {
  const char *name = kdc_arena_printf(f->module->arena, "%s/iteration", opt);
  for (size_t i = 0; i < f->n_params; i++) {
    kdc_node *p = &f->nodes[f->params[i]];
    if (p->attr.param.kind == KDC_PARAM_STATE && !strcmp(p->attr.param.name, "iteration") &&
        p->type.dtype == KDC_DTYPE_I32 && p->type.rank == 0) {
      p->attr.param.name = name;
      return f->params[i];
    }
  }
  kdc_type t = kdc_type_make(KDC_DTYPE_I32, 0, NULL);
  return kdc_ir_parameter(f, KDC_PARAM_STATE, name, &t);
}

typedef struct train_build {
  kdc_func *f;
  const kdc_optimizer_options *opt;
  size_t n_w;
  kdc_value_id *w, *grad, *new_w; /* per trainable weight */
  kdc_sharding *upd;              /* per trainable weight: its update's sharding */
  bool *sharded;                  /* upd differs from the weight's (shard_update.c) */
  int n_slots;
  const char *slot_names[4];
  kdc_value_id *slot, *new_slot;  /* [s * n_w + i]: slot s of weight i */
} train_build;

/* |v| through a sharding_constraint to |s| (closed), origin |w|'s: the
 * weight (and its gradient) as a sharded update reads them (a local cut of
 * the weight; the partial gradient's reduce_scatter), or an update's result
 * pinned to its state's sharding.  No-op without a sharding. */
static kdc_value_id constrain(kdc_func *f, kdc_value_id v, kdc_sharding s, kdc_value_id w) {
  if (!s.present) return v;
  kdc_type t = *kdc_ir_type(f, v);
  f->cur_origin = f->nodes[w].origin;
  kdc_value_id c = kdc_ir_append(f, KDC_OP_SHARDING_CONSTRAINT, &t, 1, &v, NULL);
  f->cur_origin = NULL;
  if (c == KDC_NO_VALUE) return v;
  s.open_mask = 0;
  s.origin = 0;
  f->nodes[c].sharding = s;
  return c;
}

static kdc_status build_updates(train_build *b, kdc_value_id iteration) {
  kdc_func *f = b->f;
  kdc_value_id lr = kdc_optimizer_learning_rate(f, b->opt, iteration);
  KDC_RETURN_IF_ERROR(kdc_ir_take_error(f));
  for (size_t i = 0; i < b->n_w; i++) {
    kdc_value_id in_slots[4], out_slots[4];
    for (int s = 0; s < b->n_slots; s++) {
      in_slots[s] = b->slot[(size_t)s * b->n_w + i];
      out_slots[s] = in_slots[s];
    }
    b->new_w[i] = b->w[i];
    if (b->grad[i] != KDC_NO_VALUE) {
      kdc_value_id w = b->w[i], g = b->grad[i];
      if (b->sharded[i]) {
        w = constrain(f, b->w[i], b->upd[i], b->w[i]);
        g = constrain(f, b->grad[i], b->upd[i], b->w[i]);
      }
      f->cur_origin = f->nodes[b->w[i]].origin;
      KDC_RETURN_IF_ERROR(kdc_optimizer_update(f, b->opt, iteration, lr, w, g, in_slots,
                                               &b->new_w[i], out_slots));
    }
    for (int s = 0; s < b->n_slots; s++) b->new_slot[(size_t)s * b->n_w + i] = out_slots[s];
  }
  f->cur_origin = NULL;
  return NULL;
}

/* SHARDING.md 8: the updated weight (or slot) |v| gets weight |w|'s
 * sharding, closed, through a sharding_constraint, so the partitioner never
 * reshards state between steps (jax #25844).  No-op without a sharding or
 * when |v| is a parameter (a weight without a gradient keeps its value). */
static kdc_value_id pin_sharding(kdc_func *f, kdc_value_id v, kdc_value_id w) {
  if (f->nodes[v].op == KDC_OP_PARAMETER) return v;
  return constrain(f, v, f->nodes[w].sharding, w);
}

/* The forward function's results named like one of its non-trainable
 * weight parameters (train_forward's BatchNormalization moving statistics)
 * are that weight's next value: results of |f| with the weight's name and
 * pinned sharding, in parameter order. */
static void add_state_updates(kdc_func *f, const kdc_func *fwd) {
  for (size_t i = 0; i < fwd->n_params; i++) {
    const kdc_node *p = &f->nodes[f->params[i]];
    if (p->attr.param.kind != KDC_PARAM_WEIGHT || is_trainable(f->module, p)) continue;
    const char *name = p->attr.param.name; /* p moves with the appends below */
    for (size_t r = 0; r < fwd->n_results; r++)
      if (fwd->result_names[r] && !strcmp(fwd->result_names[r], name)) {
        kdc_value_id v = pin_sharding(f, fwd->results[r], f->params[i]);
        kdc_ir_add_result(f, v, name);
      }
  }
}

/* ---- dynamic loss scaling (mixed_float16) ------------------------------------
 *
 * Keras' compile wraps the optimizer in a LossScaleOptimizer when the model
 * computes in float16 (trainers/trainer.py); so does kdc when the forward
 * function holds f16 values.  As optimizers/loss_scale_optimizer.py: the
 * gradients are those of loss * scale; they are finite when every one is
 * (|g| < inf, NaN included); then the inner update runs on g / scale and the
 * step counter grows, doubling the scale and restarting at
 * KDC_LOSS_SCALE_GROWTH finite steps; otherwise every weight, slot and the
 * iteration keep their values, the scale halves and the counter restarts.
 * The scale starts at 2^15 and only doubles or halves, so the state holds
 * its exponent: "loss_scale_optimizer/scale_exponent" (i32, scale =
 * 2^(15 + e), 0 at the start like every fresh state) and
 * "loss_scale_optimizer/step_counter" (i32), both in the checkpoint. */
enum { KDC_LOSS_SCALE_GROWTH = 2000 }; /* KDC_LOSS_SCALE_LOG2_INIT: common/io.h */

static bool computes_f16(const kdc_func *f) {
  for (size_t v = 0; v < f->n_nodes; v++)
    if (f->nodes[v].type.dtype == KDC_DTYPE_F16) return true;
  return false;
}

typedef struct loss_scale {
  kdc_value_id exponent, counter; /* state parameters */
  kdc_value_id scale;             /* f32 scalar 2^(15 + exponent) */
  kdc_value_id finite;            /* bool scalar, after the gradients */
} loss_scale;

static kdc_value_id i32_param(kdc_func *f, const char *name) {
  kdc_type t = kdc_type_make(KDC_DTYPE_I32, 0, NULL);
  return kdc_ir_parameter(f, KDC_PARAM_STATE, name, &t);
}

static void loss_scale_begin(kdc_func *f, loss_scale *ls) {
  ls->exponent = i32_param(f, KDC_LSO_SCALE_EXPONENT);
  ls->counter = i32_param(f, KDC_LSO_STEP_COUNTER);
  kdc_value_id e = kdc_ir_convert(
      f, kdc_ir_binary_scalar(f, KDC_OP_ADD, ls->exponent, KDC_LOSS_SCALE_LOG2_INIT), KDC_DTYPE_F32);
  ls->scale = kdc_ir_binary(f, KDC_OP_POW, kdc_ir_scalar(f, KDC_DTYPE_F32, 2.0), e);
}

/* finite = every gradient's largest |g| < inf; grads become g / scale. */
static void loss_scale_grads(kdc_func *f, loss_scale *ls, kdc_value_id *grad, size_t n) {
  kdc_value_id all = KDC_NO_VALUE;
  for (size_t i = 0; i < n; i++) {
    if (grad[i] == KDC_NO_VALUE) continue;
    const kdc_type *t = kdc_ir_type(f, grad[i]);
    int64_t dims[KDC_MAX_RANK];
    for (int d = 0; d < t->rank; d++) dims[d] = d;
    int rank = t->rank;
    kdc_value_id mx = kdc_ir_reduce(f, KDC_RED_MAX, kdc_ir_unary(f, KDC_OP_ABS, grad[i]), rank,
                                    dims);
    kdc_value_id ok = kdc_ir_compare(f, KDC_CMP_LT, mx, kdc_ir_scalar(f, KDC_DTYPE_F32, INFINITY));
    all = all == KDC_NO_VALUE ? ok : kdc_ir_binary(f, KDC_OP_AND, all, ok);
    kdc_value_id sb = kdc_ir_broadcast(f, ls->scale, rank, kdc_ir_type(f, grad[i])->dims, NULL);
    grad[i] = kdc_ir_binary(f, KDC_OP_DIV, grad[i], sb);
  }
  ls->finite = all;
}

/* |upd| where the gradients are finite, else |old| (same type). */
static kdc_value_id if_finite(kdc_func *f, const loss_scale *ls, kdc_value_id upd,
                              kdc_value_id old) {
  if (upd == old) return upd;
  const kdc_type *t = kdc_ir_type(f, old);
  kdc_value_id p = t->rank ? kdc_ir_broadcast(f, ls->finite, t->rank, t->dims, NULL) : ls->finite;
  return kdc_ir_select(f, p, upd, old);
}

static kdc_status build_train_step(kdc_module *m, const kdc_func *fwd, size_t n_out,
                                   const kdc_train_options *o) {
  kdc_func *f = clone_func(m, fwd, "train_step");
  const char *opt = kdc_optimizer_name(o->optimizer.kind);
  kdc_value_id loss;
  output_losses ol;
  KDC_RETURN_IF_ERROR(add_loss(f, fwd, n_out, o, &loss, &ol));
  kdc_value_id iteration = iteration_param(f, opt);
  loss_scale ls = {KDC_NO_VALUE, KDC_NO_VALUE, KDC_NO_VALUE, KDC_NO_VALUE};
  bool scaled = computes_f16(fwd);
  if (scaled) loss_scale_begin(f, &ls);
  train_build b = {f, &o->optimizer, 0, NULL, NULL, NULL, NULL, NULL, 0, {0}, NULL, NULL};
  b.n_slots = kdc_optimizer_slots(&o->optimizer, b.slot_names);
  size_t np = fwd->n_params;
  b.w = kdc_xcalloc(np + 1, sizeof *b.w);
  for (size_t i = 0; i < np; i++)
    if (is_trainable(m, &f->nodes[f->params[i]])) b.w[b.n_w++] = f->params[i];
  b.grad = kdc_xcalloc(b.n_w + 1, sizeof *b.grad);
  b.upd = kdc_xcalloc(b.n_w + 1, sizeof *b.upd);
  b.sharded = kdc_xcalloc(b.n_w + 1, sizeof *b.sharded);
  unsigned axes = o->no_shard_update ? 0 : kdc_shard_update_axes(m, f);
  for (size_t i = 0; i < b.n_w; i++) {
    const kdc_node *w = &f->nodes[b.w[i]];
    b.sharded[i] = kdc_shard_update_sharding(&m->mesh, &w->type, &w->sharding, axes, &b.upd[i]);
  }
  b.new_w = kdc_xcalloc(b.n_w + 1, sizeof *b.new_w);
  b.slot = kdc_xcalloc((size_t)b.n_slots * b.n_w + 1, sizeof *b.slot);
  b.new_slot = kdc_xcalloc((size_t)b.n_slots * b.n_w + 1, sizeof *b.new_slot);
  for (int s = 0; s < b.n_slots; s++)
    for (size_t i = 0; i < b.n_w; i++) {
      const kdc_node *w = &f->nodes[b.w[i]];
      kdc_type t = w->type;
      const char *name = slot_name(m, opt, w->attr.param.name, b.slot_names[s]);
      f->cur_origin = w->origin;
      b.slot[(size_t)s * b.n_w + i] = kdc_ir_parameter(f, KDC_PARAM_STATE, name, &t);
      f->nodes[b.slot[(size_t)s * b.n_w + i]].attr.param.gate_packed =
          f->nodes[b.w[i]].attr.param.gate_packed;
      /* SHARDING.md 8: a slot has its weight's update's sharding (w may move:
       * re-read it) */
      kdc_sharding ss = f->nodes[b.w[i]].sharding;
      if (b.sharded[i]) ss = b.upd[i];
      f->nodes[b.slot[(size_t)s * b.n_w + i]].sharding = ss;
    }
  f->cur_origin = NULL;
  kdc_status st = kdc_ir_take_error(f);
  kdc_value_id objective = scaled ? kdc_ir_binary(f, KDC_OP_MUL, loss, ls.scale) : loss;
  if (!st) st = kdc_autodiff(f, objective, b.w, b.n_w, b.grad);
  bool any = false;
  for (size_t i = 0; i < b.n_w && !st; i++) any = any || b.grad[i] != KDC_NO_VALUE;
  if (!st && !any)
    st = KDC_ERR(KDC_INVALID_INPUT, "training: the loss depends on no trainable weight "
                 "(Keras: \"No gradients provided for any variable\")");
  if (!st && scaled) loss_scale_grads(f, &ls, b.grad, b.n_w);
  if (!st) st = build_updates(&b, iteration);
  if (!st && scaled) /* a non-finite step changes no weight and no slot */
    for (size_t i = 0; i < b.n_w; i++) {
      b.new_w[i] = if_finite(f, &ls, b.new_w[i], b.w[i]);
      for (int s = 0; s < b.n_slots; s++) {
        size_t k = (size_t)s * b.n_w + i;
        b.new_slot[k] = if_finite(f, &ls, b.new_slot[k], b.slot[k]);
      }
    }
  if (!st) {
    for (size_t i = 0; i < b.n_w; i++) {
      b.new_w[i] = pin_sharding(f, b.new_w[i], b.w[i]);
      for (int s = 0; s < b.n_slots; s++) {
        kdc_value_id *ns = &b.new_slot[(size_t)s * b.n_w + i];
        if (!b.sharded[i]) *ns = pin_sharding(f, *ns, b.w[i]);
        else if (f->nodes[*ns].op != KDC_OP_PARAMETER) *ns = constrain(f, *ns, b.upd[i], b.w[i]);
      }
    }
    for (size_t i = 0; i < b.n_w; i++)
      kdc_ir_add_result(f, b.new_w[i], f->nodes[b.w[i]].attr.param.name);
    add_state_updates(f, fwd);
    kdc_value_id next = kdc_ir_binary_scalar(f, KDC_OP_ADD, iteration, 1);
    if (scaled) next = if_finite(f, &ls, next, iteration);
    kdc_ir_add_result(f, next, f->nodes[iteration].attr.param.name);
    if (scaled) { /* Keras: counter == growth - 1 ? (0, scale * 2) : (counter + 1, scale) */
      kdc_value_id grow = kdc_ir_compare(
          f, KDC_CMP_EQ, ls.counter, kdc_ir_scalar(f, KDC_DTYPE_I32, KDC_LOSS_SCALE_GROWTH - 1));
      kdc_value_id zero = kdc_ir_scalar(f, KDC_DTYPE_I32, 0);
      kdc_value_id c1 = kdc_ir_select(f, grow, zero,
                                      kdc_ir_binary_scalar(f, KDC_OP_ADD, ls.counter, 1));
      kdc_value_id e1 = kdc_ir_select(f, grow, kdc_ir_binary_scalar(f, KDC_OP_ADD, ls.exponent, 1),
                                      ls.exponent);
      kdc_value_id e0 = kdc_ir_binary_scalar(f, KDC_OP_SUB, ls.exponent, 1);
      kdc_ir_add_result(f, kdc_ir_select(f, ls.finite, e1, e0),
                        f->nodes[ls.exponent].attr.param.name);
      kdc_ir_add_result(f, kdc_ir_select(f, ls.finite, c1, zero),
                        f->nodes[ls.counter].attr.param.name);
    }
    for (size_t k = 0; k < (size_t)b.n_slots * b.n_w; k++)
      kdc_ir_add_result(f, b.new_slot[k], f->nodes[b.slot[k]].attr.param.name);
    kdc_ir_add_result(f, loss, "loss");
    add_output_loss_results(f, &ol);
    st = kdc_ir_take_error(f);
  }
  free(b.w);
  free(b.grad);
  free(b.upd);
  free(b.sharded);
  free(b.new_w);
  free(b.slot);
  free(b.new_slot);
  return st;
}

kdc_status kdc_pass_build_training(kdc_module *m, const kdc_train_options *o) {
  kdc_func *predict = kdc_ir_module_find_func(m, "predict");
  kdc_func *fwd = kdc_ir_module_find_func(m, "train_forward");
  if (!predict) return KDC_ERR(KDC_INVALID_INPUT, "training: the module has no predict function");
  if (!fwd) fwd = predict;
  if (kdc_ir_module_find_func(m, "train_step") || kdc_ir_module_find_func(m, "evaluate"))
    return KDC_ERR(KDC_INVALID_INPUT, "training: the module already has train_step or evaluate");
  if ((unsigned)o->loss >= KDC_LOSS_COUNT)
    return KDC_ERR(KDC_INVALID_INPUT, "training: unknown loss %d", (int)o->loss);
  KDC_RETURN_IF_ERROR(kdc_optimizer_options_check(&o->optimizer));
  /* the outputs: the results before the first Keras mask result */
  size_t n_out = 0;
  while (n_out < predict->n_results && !is_mask_result(predict, n_out)) n_out++;
  if (fwd->n_results < n_out)
    return KDC_ERR(KDC_INVALID_INPUT, "training: train_forward has %zu results, predict %zu",
                   fwd->n_results, n_out);
  if (o->n_losses == 0 && (o->output < 0 || (size_t)o->output >= n_out))
    return KDC_ERR(KDC_INVALID_INPUT, "training: output %d does not exist (predict has %zu)",
                   o->output, n_out);
  KDC_RETURN_IF_ERROR(build_train_step(m, fwd, n_out, o));
  kdc_status st = build_evaluate(m, predict, n_out, o);
  drop_mask_results(predict);
  if (fwd != predict) drop_mask_results(fwd);
  return st;
}
