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
 * --learning-rate and --from-logits still override what it says.  Learning
 * rate schedules, loss lists/dicts, label_smoothing, clipnorm/clipvalue and
 * EMA are refused by name, never ignored.
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
    return KDC_ERR(KDC_UNSUPPORTED, "%s: compile_config.optimizer.config.%s: expected a number "
                   "(learning-rate schedules are not read from compile_config yet)", file, key);
  *out = json_object_get_double(v);
  return NULL;
}

static bool flag(json_object *cfg, const char *key, bool dflt) {
  json_object *v = get(cfg, key);
  return is_null(v) ? dflt : json_object_get_boolean(v);
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

static kdc_status loss(const char *file, json_object *l, kdc_train_options *t) {
  const char *cls = json_object_is_type(l, json_type_string) ? json_object_get_string(l)
                    : json_object_get_string(get(l, "class_name"));
  if (!cls || !kdc_loss_from_name(cls, &t->loss))
    return KDC_ERR(KDC_UNSUPPORTED, "%s: compile_config.loss %s: kdc supports one of "
                   "mean_squared_error, mean_absolute_error, binary_crossentropy, "
                   "categorical_crossentropy, sparse_categorical_crossentropy", file,
                   cls ? cls : "(a list or dict: multi-output losses are not supported yet)");
  json_object *cfg = get(l, "config");
  t->from_logits = flag(cfg, "from_logits", false);
  double ls = 0;
  json_object *v = get(cfg, "label_smoothing");
  if (!is_null(v)) ls = json_object_get_double(v);
  if (ls != 0)
    return KDC_ERR(KDC_UNSUPPORTED, "%s: compile_config.loss.config.label_smoothing is not "
                   "supported yet", file);
  const char *red = json_object_get_string(get(cfg, "reduction"));
  if (red && strcmp(red, "sum_over_batch_size"))
    return KDC_ERR(KDC_UNSUPPORTED, "%s: compile_config.loss.config.reduction \"%s\": only "
                   "sum_over_batch_size is supported", file, red);
  return NULL;
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
  KDC_RETURN_IF_ERROR(loss(file, get(cc, "loss"), t));
  *found = true;
  return NULL;
}
