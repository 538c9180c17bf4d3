/*
 * tools/compile_config.c: training options from a Keras 3 model's
 * `compile_config` (what model.compile() recorded; .keras config.json keeps
 * it next to "config"):
 *
 *   "compile_config": {"optimizer": "adam" | {"class_name": "Adam",
 *        "config": {"learning_rate": 0.001, "beta_1": 0.9, ...}},
 *      "loss": "categorical_crossentropy" | {"class_name":
 *        "CategoricalCrossentropy", "config": {"from_logits": true, ...}}, ...}
 *
 * Used by `kdc compile` when no --loss is given; --optimizer,
 * --learning-rate and --from-logits still override what it says (a
 * --learning-rate replaces the schedule's initial rate).  The learning rate
 * may be a LearningRateSchedule object (see schedule()).  `loss` may be a
 * list (output order) or dict (output name) for a multi-output model, with
 * `loss_weights` likewise; one loss applies to every output (Keras 3).
 * Label_smoothing, clipnorm/clipvalue, EMA and PiecewiseConstantDecay are
 * refused by name, never ignored.
 */
#include <json-c/json.h>
#include <math.h>
#include <string.h>

#include "frontend/frontend.h"
#include "passes/passes.h"
#include "tools/cli.h"

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
 * ({"class_name": "CosineDecay", "config": {"initial_learning_rate": ...}}):
 * ExponentialDecay, InverseTimeDecay, CosineDecay (with warmup),
 * CosineDecayRestarts and PolynomialDecay, Keras' defaults for absent keys. */
static kdc_status schedule(const char *file, json_object *o, kdc_optimizer_options *opt) {
  const char *cls = json_object_get_string(get(o, "class_name"));
  json_object *cfg = get(o, "config");
  kdc_lr_schedule *s = &opt->schedule;
  static const struct { const char *name; kdc_lr_schedule_kind kind; } k[] = {
      {"ExponentialDecay", KDC_LR_EXPONENTIAL}, {"InverseTimeDecay", KDC_LR_INVERSE_TIME},
      {"CosineDecay", KDC_LR_COSINE}, {"CosineDecayRestarts", KDC_LR_COSINE_RESTARTS},
      {"PolynomialDecay", KDC_LR_POLYNOMIAL}};
  size_t i = 0;
  while (i < sizeof k / sizeof *k && (!cls || strcmp(cls, k[i].name))) i++;
  if (i == sizeof k / sizeof *k)
    return KDC_ERR(KDC_UNSUPPORTED, "%s: compile_config.optimizer.config.learning_rate: schedule "
                   "\"%s\" is not supported (kdc reads ExponentialDecay, InverseTimeDecay, "
                   "CosineDecay, CosineDecayRestarts, PolynomialDecay)", file, cls ? cls : "?");
  s->kind = k[i].kind;
  KDC_RETURN_IF_ERROR(snum(file, cfg, "initial_learning_rate", opt->learning_rate,
                           &opt->learning_rate));
  const char *steps = s->kind == KDC_LR_COSINE_RESTARTS ? "first_decay_steps" : "decay_steps";
  if (is_null(get(cfg, steps)))
    return KDC_ERR(KDC_INVALID_INPUT, "%s: compile_config.optimizer.config.learning_rate.config.%s "
                   "is required", file, steps);
  KDC_RETURN_IF_ERROR(snum(file, cfg, steps, 0, &s->decay_steps));
  KDC_RETURN_IF_ERROR(snum(file, cfg, "decay_rate", 0, &s->decay_rate));
  s->staircase = flag(cfg, "staircase", false);
  KDC_RETURN_IF_ERROR(snum(file, cfg, "alpha", 0, &s->alpha));
  s->warmup = s->kind == KDC_LR_COSINE && !is_null(get(cfg, "warmup_target"));
  KDC_RETURN_IF_ERROR(snum(file, cfg, "warmup_target", 0, &s->warmup_target));
  KDC_RETURN_IF_ERROR(snum(file, cfg, "warmup_steps", 0, &s->warmup_steps));
  KDC_RETURN_IF_ERROR(snum(file, cfg, "t_mul", 2.0, &s->t_mul));
  KDC_RETURN_IF_ERROR(snum(file, cfg, "m_mul", 1.0, &s->m_mul));
  KDC_RETURN_IF_ERROR(snum(file, cfg, "end_learning_rate", 1e-4, &s->end_learning_rate));
  KDC_RETURN_IF_ERROR(snum(file, cfg, "power", 1.0, &s->power));
  s->cycle = flag(cfg, "cycle", false);
  return NULL;
}

static kdc_status optimizer(const char *file, json_object *o, kdc_optimizer_options *opt) {
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
    KDC_RETURN_IF_ERROR(schedule(file, lr, opt));
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

kdc_status cli_compile_config(const kdc_keras_model *km, const char *file, kdc_train_options *t,
                              bool *found) {
  *found = false;
  json_object *cc = get(km->root, "compile_config");
  if (is_null(cc) || is_null(get(cc, "loss"))) return NULL;
  kdc_train_options_init(t, KDC_LOSS_MSE, KDC_OPT_SGD);
  json_object *o = get(cc, "optimizer");
  /* Keras' compile() default optimizer is "rmsprop" */
  if (!is_null(o)) KDC_RETURN_IF_ERROR(optimizer(file, o, &t->optimizer));
  else kdc_optimizer_options_init(&t->optimizer, KDC_OPT_RMSPROP);
  KDC_RETURN_IF_ERROR(loss(file, cc, t));
  *found = true;
  return NULL;
}
