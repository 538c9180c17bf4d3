/*
 * api/compile_config.c: training options from a Keras 3 model's
 * `compile_config` (what model.compile() recorded; .keras config.json keeps
 * it next to "config"):
 *
 *   "compile_config": {"optimizer": "adam" | {"class_name": "Adam",
 *        "config": {"learning_rate": 0.001, "beta_1": 0.9, ...}},
 *      "loss": "categorical_crossentropy" | {"class_name":
 *        "CategoricalCrossentropy", "config": {"from_logits": true, ...}} |
 *        {"class_name": "function", "config": "categorical_crossentropy"}, ...}
 *
 * Used by kdc_compile (and so `kdc compile`) when no loss is given; --optimizer,
 * --learning-rate and --from-logits still override what it says (a
 * --learning-rate replaces the schedule's initial rate).  The learning rate
 * may be a LearningRateSchedule object (see schedule()).  `loss` may be a
 * list (output order) or dict (output name) for a multi-output model, with
 * `loss_weights` likewise; one loss applies to every output (Keras 3).
 * Label_smoothing, clipnorm/clipvalue and EMA are refused by name, never
 * ignored; so is a schedule argument Keras 3 does not have.
 */
#include <json-c/json.h>
#include <math.h>
#include <string.h>

#include "frontend/frontend.h"
#include "passes/passes.h"
#include "api/api.h"

static json_object *get(json_object *o, const char *k) {
  json_object *v = NULL;
  return o && json_object_is_type(o, json_type_object) && json_object_object_get_ex(o, k, &v) ? v : NULL;
}

static bool is_null(json_object *o) { return !o || json_object_is_type(o, json_type_null); }

/* A number from |cfg|[key] into |*out| when present and not null. */
static kdc_status num(const char *file, json_object *cfg, const char *key, double *out) {
  json_object *v = get(cfg, key);
  if (is_null(v)) return NULL;
  if (!json_object_is_type(v, json_type_double) && !json_object_is_type(v, json_type_int))
    return KDC_ERR(KDC_UNSUPPORTED, "%s: compile_config.optimizer.config.%s: expected a number",
                   file, key);
  *out = json_object_get_double(v);
  return NULL;
}

static bool flag(json_object *cfg, const char *key, bool dflt) {
  json_object *v = get(cfg, key);
  return is_null(v) ? dflt : json_object_get_boolean(v);
}

/* A number of the schedule's config (|dflt| when absent or null). */
static kdc_status snum(const char *file, json_object *cfg, const char *key, double dflt,
                       double *out) {
  json_object *v = get(cfg, key);
  *out = dflt;
  if (is_null(v)) return NULL;
  if (!json_object_is_type(v, json_type_double) && !json_object_is_type(v, json_type_int))
    return KDC_ERR(KDC_INVALID_INPUT, "%s: compile_config.optimizer.config.learning_rate.config.%s: "
                   "expected a number", file, key);
  *out = json_object_get_double(v);
  return NULL;
}

/* optimizer.config.learning_rate as a Keras 3 LearningRateSchedule object
 * ({"class_name": "CosineDecay", "config": {"initial_learning_rate": ...}},
 * keras/src/optimizers/schedules/learning_rate_schedule.py): every class,
 * each with exactly the keys its get_config() writes, Keras' defaults for
 * the optional ones; a required key missing, an unknown key or a value of
 * the wrong type is a located error naming the key. */
typedef struct sched_class {
  const char *name;
  kdc_lr_schedule_kind kind;
  const char *required[4];  /* besides these and optional[], only "name" */
  const char *optional[6];
} sched_class;

static const sched_class sched_classes[] = {
    {"ExponentialDecay", KDC_LR_EXPONENTIAL, {"initial_learning_rate", "decay_steps", "decay_rate"},
     {"staircase"}},
    {"InverseTimeDecay", KDC_LR_INVERSE_TIME, {"initial_learning_rate", "decay_steps", "decay_rate"},
     {"staircase"}},
    {"PiecewiseConstantDecay", KDC_LR_PIECEWISE, {"boundaries", "values"}, {0}},
    {"PolynomialDecay", KDC_LR_POLYNOMIAL, {"initial_learning_rate", "decay_steps"},
     {"end_learning_rate", "power", "cycle"}},
    {"CosineDecay", KDC_LR_COSINE, {"initial_learning_rate", "decay_steps"},
     {"alpha", "warmup_target", "warmup_steps"}},
    {"CosineDecayRestarts", KDC_LR_COSINE_RESTARTS, {"initial_learning_rate", "first_decay_steps"},
     {"t_mul", "m_mul", "alpha"}},
};

#define SCHED_AT "compile_config.optimizer.config.learning_rate"

static bool listed(const char *const *names, size_t n, const char *key) {
  for (size_t i = 0; i < n && names[i]; i++)
    if (!strcmp(names[i], key)) return true;
  return false;
}

/* A bool of the schedule's config (|dflt| when absent or null). */
static kdc_status sflag(const char *file, json_object *cfg, const char *key, bool dflt, bool *out) {
  json_object *v = get(cfg, key);
  *out = dflt;
  if (is_null(v)) return NULL;
  if (!json_object_is_type(v, json_type_boolean))
    return KDC_ERR(KDC_INVALID_INPUT, "%s: " SCHED_AT ".config.%s: expected true or false", file,
                   key);
  *out = json_object_get_boolean(v);
  return NULL;
}

/* PiecewiseConstantDecay's boundaries (steps; Keras casts them to the int
 * step's dtype, i.e. truncates a float) and values, into |arena|. */
static kdc_status piecewise(const char *file, json_object *cfg, kdc_arena *arena,
                            kdc_lr_schedule *s) {
  json_object *b = get(cfg, "boundaries"), *v = get(cfg, "values");
  if (!json_object_is_type(b, json_type_array) || !json_object_is_type(v, json_type_array))
    return KDC_ERR(KDC_INVALID_INPUT, "%s: " SCHED_AT ".config.%s: expected a list of numbers",
                   file, json_object_is_type(b, json_type_array) ? "values" : "boundaries");
  size_t nb = json_object_array_length(b), nv = json_object_array_length(v);
  if (nb == 0 || nv != nb + 1)
    return KDC_ERR(KDC_INVALID_INPUT, "%s: " SCHED_AT ".config: %zu boundaries and %zu values "
                   "(Keras needs at least one boundary and one more value than boundaries)",
                   file, nb, nv);
  if (nb > 4096)
    return KDC_ERR(KDC_UNSUPPORTED, "%s: " SCHED_AT ".config.boundaries: %zu entries (at most "
                   "4096)", file, nb);
  int64_t *bs = kdc_arena_alloc(arena, nb * sizeof *bs);
  double *vs = kdc_arena_alloc(arena, nv * sizeof *vs);
  for (size_t i = 0; i < nb + nv; i++) {
    bool is_b = i < nb;
    json_object *e = json_object_array_get_idx(is_b ? b : v, is_b ? i : i - nb);
    size_t at = is_b ? i : i - nb;
    if (!json_object_is_type(e, json_type_double) && !json_object_is_type(e, json_type_int))
      return KDC_ERR(KDC_INVALID_INPUT, "%s: " SCHED_AT ".config.%s[%zu]: expected a number",
                     file, is_b ? "boundaries" : "values", at);
    double x = json_object_get_double(e);
    if (!is_b) {
      vs[at] = x;
      continue;
    }
    if (!(x > -2147483649.0 && x < 2147483648.0))
      return KDC_ERR(KDC_INVALID_INPUT, "%s: " SCHED_AT ".config.boundaries[%zu]: %g is not an "
                     "int32 step", file, at, x);
    bs[at] = (int64_t)x;  /* truncation: Keras' cast to the step's integer dtype */
    if (at > 0 && bs[at] <= bs[at - 1])
      return KDC_ERR(KDC_INVALID_INPUT, "%s: " SCHED_AT ".config.boundaries[%zu]: %lld is not "
                     "greater than the previous boundary (Keras requires strictly increasing "
                     "boundaries)", file, at, (long long)bs[at]);
  }
  s->n_boundaries = (int)nb;
  s->boundaries = bs;
  s->values = vs;
  return NULL;
}

static kdc_status schedule(const char *file, json_object *o, kdc_arena *arena,
                           kdc_optimizer_options *opt) {
  const char *cls = json_object_get_string(get(o, "class_name"));
  json_object *cfg = get(o, "config");
  kdc_lr_schedule *s = &opt->schedule;
  size_t i = 0, n = sizeof sched_classes / sizeof *sched_classes;
  while (i < n && (!cls || strcmp(cls, sched_classes[i].name))) i++;
  if (i == n)
    return KDC_ERR(KDC_UNSUPPORTED, "%s: " SCHED_AT ": schedule \"%s\" is not supported (kdc "
                   "reads ExponentialDecay, InverseTimeDecay, PiecewiseConstantDecay, "
                   "PolynomialDecay, CosineDecay, CosineDecayRestarts)", file, cls ? cls : "?");
  const sched_class *c = &sched_classes[i];
  if (!json_object_is_type(cfg, json_type_object))
    return KDC_ERR(KDC_INVALID_INPUT, "%s: " SCHED_AT ".config: expected an object", file);
  json_object_object_foreach(cfg, key, val) {
    (void)val;
    if (strcmp(key, "name") && !listed(c->required, 4, key) && !listed(c->optional, 6, key))
      return KDC_ERR(KDC_UNSUPPORTED, "%s: " SCHED_AT ".config.%s: %s has no such argument in "
                     "Keras 3", file, key, c->name);
  }
  for (size_t k = 0; k < 4 && c->required[k]; k++)
    if (is_null(get(cfg, c->required[k])))
      return KDC_ERR(KDC_INVALID_INPUT, "%s: " SCHED_AT ".config.%s is required for %s", file,
                     c->required[k], c->name);
  s->kind = c->kind;
  if (s->kind == KDC_LR_PIECEWISE) return piecewise(file, cfg, arena, s);
  KDC_RETURN_IF_ERROR(snum(file, cfg, "initial_learning_rate", 0, &opt->learning_rate));
  const char *steps = s->kind == KDC_LR_COSINE_RESTARTS ? "first_decay_steps" : "decay_steps";
  KDC_RETURN_IF_ERROR(snum(file, cfg, steps, 0, &s->decay_steps));
  KDC_RETURN_IF_ERROR(snum(file, cfg, "decay_rate", 0, &s->decay_rate));
  KDC_RETURN_IF_ERROR(sflag(file, cfg, "staircase", false, &s->staircase));
  KDC_RETURN_IF_ERROR(snum(file, cfg, "alpha", 0, &s->alpha));
  s->warmup = s->kind == KDC_LR_COSINE && !is_null(get(cfg, "warmup_target"));
  KDC_RETURN_IF_ERROR(snum(file, cfg, "warmup_target", 0, &s->warmup_target));
  KDC_RETURN_IF_ERROR(snum(file, cfg, "warmup_steps", 0, &s->warmup_steps));
  KDC_RETURN_IF_ERROR(snum(file, cfg, "t_mul", 2.0, &s->t_mul));
  KDC_RETURN_IF_ERROR(snum(file, cfg, "m_mul", 1.0, &s->m_mul));
  KDC_RETURN_IF_ERROR(snum(file, cfg, "end_learning_rate", 1e-4, &s->end_learning_rate));
  KDC_RETURN_IF_ERROR(snum(file, cfg, "power", 1.0, &s->power));
  return sflag(file, cfg, "cycle", false, &s->cycle);
}

static kdc_status optimizer(const char *file, json_object *o, kdc_arena *arena,
                            kdc_optimizer_options *opt) {
  const char *cls = json_object_is_type(o, json_type_string) ? json_object_get_string(o)
                    : json_object_get_string(get(o, "class_name"));
  kdc_optimizer_kind k;
  if (!cls || !kdc_optimizer_from_name(cls, &k))
    return KDC_ERR(KDC_UNSUPPORTED, "%s: compile_config.optimizer \"%s\": kdc supports SGD, Adam, "
                   "AdamW and RMSprop", file, cls ? cls : "?");
  kdc_optimizer_options_init(opt, k);
  json_object *cfg = get(o, "config");
  if (!cfg) return NULL;
  json_object *lr = get(cfg, "learning_rate");
  if (lr && json_object_is_type(lr, json_type_object))
    KDC_RETURN_IF_ERROR(schedule(file, lr, arena, opt));
  else
    KDC_RETURN_IF_ERROR(num(file, cfg, "learning_rate", &opt->learning_rate));
  KDC_RETURN_IF_ERROR(num(file, cfg, "momentum", &opt->momentum));
  KDC_RETURN_IF_ERROR(num(file, cfg, "beta_1", &opt->beta_1));
  KDC_RETURN_IF_ERROR(num(file, cfg, "beta_2", &opt->beta_2));
  KDC_RETURN_IF_ERROR(num(file, cfg, "epsilon", &opt->epsilon));
  KDC_RETURN_IF_ERROR(num(file, cfg, "rho", &opt->rho));
  KDC_RETURN_IF_ERROR(num(file, cfg, "weight_decay", &opt->weight_decay));
  opt->nesterov = flag(cfg, "nesterov", opt->nesterov);
  opt->amsgrad = flag(cfg, "amsgrad", opt->amsgrad);
  opt->centered = flag(cfg, "centered", opt->centered);
  static const char *const refused[] = {"clipnorm", "clipvalue", "global_clipnorm",
                                        "gradient_accumulation_steps", "loss_scale_factor"};
  for (size_t i = 0; i < sizeof refused / sizeof *refused; i++)
    if (!is_null(get(cfg, refused[i])))
      return KDC_ERR(KDC_UNSUPPORTED, "%s: compile_config.optimizer.config.%s is not supported yet",
                     file, refused[i]);
  if (flag(cfg, "use_ema", false))
    return KDC_ERR(KDC_UNSUPPORTED, "%s: compile_config.optimizer.config.use_ema is not supported yet",
                   file);
  return NULL;
}

/* One loss object (a name or {"class_name", "config"}) at |where|. */
static kdc_status one_loss(const char *file, const char *where, json_object *l,
                           struct kdc_output_loss *e) {
  const char *cls = json_object_is_type(l, json_type_string) ? json_object_get_string(l)
                    : json_object_get_string(get(l, "class_name"));
  /* a loss given as a Python function (loss=keras.losses.categorical_crossentropy)
   * is serialized as {"module": "builtins", "class_name": "function",
   * "config": "categorical_crossentropy"} (Keras 3 serialization_lib) */
  if (cls && !strcmp(cls, "function") && json_object_is_type(get(l, "config"), json_type_string))
    cls = json_object_get_string(get(l, "config"));
  if (!cls || !kdc_loss_from_name(cls, &e->loss))
    return KDC_ERR(KDC_UNSUPPORTED, "%s: compile_config.%s %s: kdc supports one of "
                   "mean_squared_error, mean_absolute_error, binary_crossentropy, "
                   "categorical_crossentropy, sparse_categorical_crossentropy", file, where,
                   cls ? cls : "?");
  json_object *cfg = get(l, "config");
  e->from_logits = flag(cfg, "from_logits", false);
  double ls = 0;
  json_object *v = get(cfg, "label_smoothing");
  if (!is_null(v)) ls = json_object_get_double(v);
  if (ls != 0)
    return KDC_ERR(KDC_UNSUPPORTED, "%s: compile_config.%s.config.label_smoothing is not "
                   "supported yet", file, where);
  const char *red = json_object_get_string(get(cfg, "reduction"));
  if (red && strcmp(red, "sum_over_batch_size"))
    return KDC_ERR(KDC_UNSUPPORTED, "%s: compile_config.%s.config.reduction \"%s\": only "
                   "sum_over_batch_size is supported", file, where, red);
  return NULL;
}

/* Entry |i| (key |key| of a dict, or NULL in a list) of `loss` (weights
 * false) or `loss_weights` (weights true). */
static kdc_status entry(const char *file, bool weights, const char *key, size_t i, json_object *v,
                        kdc_train_options *t) {
  const char *what = weights ? "loss_weights" : "loss";
  size_t *n = weights ? &t->n_weights : &t->n_losses;
  if (*n >= KDC_TRAIN_MAX_OUTPUTS)
    return KDC_ERR(KDC_UNSUPPORTED, "%s: compile_config.%s: more than %d entries", file, what,
                   KDC_TRAIN_MAX_OUTPUTS);
  struct kdc_output_loss *e = weights ? &t->weights[*n] : &t->losses[*n];
  memset(e, 0, sizeof *e);
  e->output = key; /* points into the model JSON, alive while it is */
  char where[160];
  if (key) snprintf(where, sizeof where, "%s[\"%s\"]", what, key);
  else snprintf(where, sizeof where, "%s[%zu]", what, i);
  (*n)++;
  if (weights) {
    if (!json_object_is_type(v, json_type_double) && !json_object_is_type(v, json_type_int))
      return KDC_ERR(KDC_INVALID_INPUT, "%s: compile_config.%s: expected a number", file, where);
    e->weight = json_object_get_double(v);
    return NULL;
  }
  e->none = is_null(v);
  return e->none ? NULL : one_loss(file, where, v, e);
}

/* `loss` or `loss_weights` as a list (output order) or a dict (by output name). */
static kdc_status entries(const char *file, bool weights, json_object *v, kdc_train_options *t) {
  if (json_object_is_type(v, json_type_array)) {
    for (size_t i = 0; i < json_object_array_length(v); i++)
      KDC_RETURN_IF_ERROR(entry(file, weights, NULL, i, json_object_array_get_idx(v, i), t));
    return NULL;
  }
  size_t i = 0;
  json_object_object_foreach(v, key, val) KDC_RETURN_IF_ERROR(entry(file, weights, key, i++, val, t));
  return NULL;
}

/* compile_config.loss: one loss (Keras 3: every output's when the model has
 * several), or a list/dict of them; and loss_weights. */
static kdc_status loss(const char *file, json_object *cc, kdc_train_options *t) {
  json_object *l = get(cc, "loss"), *w = get(cc, "loss_weights");
  bool many = json_object_is_type(l, json_type_array) ||
              (json_object_is_type(l, json_type_object) && !get(l, "class_name"));
  if (many) {
    KDC_RETURN_IF_ERROR(entries(file, false, l, t));
  } else {
    struct kdc_output_loss e;
    memset(&e, 0, sizeof e);
    KDC_RETURN_IF_ERROR(one_loss(file, "loss", l, &e));
    t->loss = e.loss;
    t->from_logits = e.from_logits;
    t->every_output = true;
  }
  if (is_null(w)) return NULL;
  if (!json_object_is_type(w, json_type_array) && !json_object_is_type(w, json_type_object))
    return KDC_ERR(KDC_INVALID_INPUT, "%s: compile_config.loss_weights: expected a list or a dict",
                   file);
  return entries(file, true, w, t);
}

kdc_status kdc_api_compile_config(const kdc_keras_model *km, const char *file, kdc_train_options *t,
                              bool *found) {
  *found = false;
  json_object *cc = get(km->root, "compile_config");
  if (is_null(cc) || is_null(get(cc, "loss"))) return NULL;
  kdc_train_options_init(t, KDC_LOSS_MSE, KDC_OPT_SGD);
  json_object *o = get(cc, "optimizer");
  /* Keras' compile() default optimizer is "rmsprop" */
  if (!is_null(o)) KDC_RETURN_IF_ERROR(optimizer(file, o, km->arena, &t->optimizer));
  else kdc_optimizer_options_init(&t->optimizer, KDC_OPT_RMSPROP);
  KDC_RETURN_IF_ERROR(loss(file, cc, t));
  *found = true;
  return NULL;
}
