/*
 * api/compile.c: kdc_compile_file and kdc_compile, the pipeline of `kdc
 * compile`: model (file or text) -> frontend -> passes -> codegen -> plan.
 * Options are checked before the model is read, with the messages the
 * command line always gave (naming its flags: --mesh, --loss...).
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "api/api.h"
#include "codegen/codegen.h"
#include "frontend/frontend.h"
#include "frontend/layout.h"
#include "common/io.h"
#include "passes/passes.h"

enum { KDC_MAX_INPUT_SHAPES = 64 };

/* What one compile holds besides the options. */
typedef struct compile_ctx {
  const kdc_compile_options *o;
  const char *model;           /* the model's name in messages */
  kdc_input_shape input_shapes[KDC_MAX_INPUT_SHAPES];
  int n_input_shapes;
  char loss_names[KDC_TRAIN_MAX_OUTPUTS][96];
  FILE *warnings;
} compile_ctx;


/* `--layout auto`: kdc chooses the layout (api/auto_layout.c). */
static bool layout_auto(const kdc_compile_options *o) {
  return o->layout_path && !o->layout_text && !strcmp(o->layout_path, "auto");
}

/* Mesh and layout: parsed and checked before the model is even read, so a
 * bad mesh string or layout rule fails fast with its own location. */
static kdc_status distribution(const kdc_compile_options *o, kdc_mesh *mesh,
                               kdc_layout **layout) {
  memset(mesh, 0, sizeof *mesh);
  *layout = NULL;
  if (!o->mesh) return NULL;
  KDC_RETURN_IF_ERROR(kdc_mesh_parse(o->mesh, o->axes, mesh));
  if (layout_auto(o))
    return NULL;
  if (o->layout_text)
    KDC_RETURN_IF_ERROR(kdc_layout_parse(o->layout_text, o->layout_text_len,
                                         o->layout_path ? o->layout_path : "layout.json", layout));
  else if (o->layout_path)
    KDC_RETURN_IF_ERROR(kdc_layout_load(o->layout_path, layout));
  else
    return NULL;
  if (o->layout_match) {
    kdc_layout_match mm;
    if (!kdc_layout_match_from_name(o->layout_match, &mm))
      return KDC_ERR(KDC_INVALID_INPUT, "--layout-match \"%s\": expected fullmatch or search",
                     o->layout_match);
    kdc_layout_set_match(*layout, mm);
  }
  return kdc_layout_check(*layout, mesh);
}

/* One --loss name (|len| bytes of |s|; "none": the output is not trained). */
static kdc_status loss_name(const char *s, size_t len, struct kdc_output_loss *e) {
  char buf[96];
  if (len >= sizeof buf) len = sizeof buf - 1;
  memcpy(buf, s, len);
  buf[len] = 0;
  if (!strcmp(buf, "none") || !strcmp(buf, "None")) {
    e->none = true;
    return NULL;
  }
  if (!kdc_loss_from_name(buf, &e->loss))
    return KDC_ERR(KDC_INVALID_INPUT, "--loss \"%s\": unknown loss (mean_squared_error, "
                   "mean_absolute_error, binary_crossentropy, categorical_crossentropy, "
                   "sparse_categorical_crossentropy, none)", buf);
  return NULL;
}

/* --loss LOSS (every output), L1,L2,... (output order) or NAME=L1,NAME=L2. */
static kdc_status parse_loss(const char *spec, compile_ctx *c, kdc_train_options *t) {
  if (!strchr(spec, ',') && !strchr(spec, '=')) {
    struct kdc_output_loss e;
    memset(&e, 0, sizeof e);
    KDC_RETURN_IF_ERROR(loss_name(spec, strlen(spec), &e));
    if (e.none) return KDC_ERR(KDC_INVALID_INPUT, "--loss none: no output would be trained");
    t->loss = e.loss;
    t->every_output = true; /* Keras 3: one loss for a multi-output model is every output's */
    return NULL;
  }
  for (const char *p = spec;;) {
    const char *end = strchr(p, ','), *eq = strchr(p, '=');
    size_t len = end ? (size_t)(end - p) : strlen(p);
    if (eq && eq >= p + len) eq = NULL;
    if (t->n_losses >= KDC_TRAIN_MAX_OUTPUTS)
      return KDC_ERR(KDC_INVALID_INPUT, "--loss: more than %d outputs", KDC_TRAIN_MAX_OUTPUTS);
    struct kdc_output_loss *e = &t->losses[t->n_losses++];
    if (eq) {
      char *name = c->loss_names[t->n_losses - 1];
      snprintf(name, sizeof c->loss_names[0], "%.*s", (int)(eq - p), p);
      e->output = name;
      KDC_RETURN_IF_ERROR(loss_name(eq + 1, len - (size_t)(eq + 1 - p), e));
    } else {
      KDC_RETURN_IF_ERROR(loss_name(p, len, e));
    }
    if ((eq != NULL) != (t->losses[0].output != NULL) || (eq && eq == p))
      return KDC_ERR(KDC_INVALID_INPUT, "--loss \"%s\": give either losses in output order "
                     "(L1,L2) or NAME=LOSS pairs", spec);
    if (!end) return NULL;
    p = end + 1;
  }
}

/* Training options from the flags (Keras defaults for what is not given). */
static kdc_status training(compile_ctx *c, kdc_train_options *t) {
  const kdc_compile_options *o = c->o;
  kdc_optimizer_kind opt = KDC_OPT_SGD;
  if (o->optimizer && !kdc_optimizer_from_name(o->optimizer, &opt))
    return KDC_ERR(KDC_INVALID_INPUT, "--optimizer \"%s\": unknown optimizer (sgd, adam, adamw, "
                   "rmsprop)", o->optimizer);
  kdc_train_options_init(t, KDC_LOSS_MSE, opt);
  KDC_RETURN_IF_ERROR(parse_loss(o->loss, c, t));
  for (size_t i = 0; i < t->n_losses; i++) t->losses[i].from_logits = o->from_logits;
  t->from_logits = o->from_logits;
  t->sample_mask = true; /* partial batches in `kdc run --fit` (docs/training.md) */
  if (o->learning_rate > 0) t->optimizer.learning_rate = o->learning_rate;
  return kdc_optimizer_options_check(&t->optimizer);
}

/* The sharding explanations kept in the plan (EXPLAIN section) for
 * `kdc inspect --explain NAME`: after propagation, for every parameter, result
 * and layer output (the last value a layer defines) of every function, a
 * block "@@ <func> <name>" followed by kdc_sharding_explain's chain. */
typedef struct explain_capture {
  char *text;
  size_t len;
} explain_capture;

static void capture_func(FILE *out, const kdc_module *m, const kdc_func *f) {
  for (size_t i = 0; i < f->n_params; i++) {
    const kdc_node *n = kdc_ir_node(f, f->params[i]);
    fprintf(out, "@@ %s %s\n", f->name, n->attr.param.name);
    kdc_sharding_explain(m, f, f->params[i], out);
  }
  for (size_t i = 0; i < f->n_results; i++) {
    if (!f->result_names[i]) continue;
    fprintf(out, "@@ %s %s\n", f->name, f->result_names[i]);
    kdc_sharding_explain(m, f, f->results[i], out);
  }
  /* layer outputs: the last node of each run of nodes with one origin */
  for (size_t v = 0; v < f->n_nodes; v++) {
    const char *o = f->nodes[v].origin;
    if (!o || f->nodes[v].op == KDC_OP_PARAMETER) continue;
    if (v + 1 < f->n_nodes && f->nodes[v + 1].origin && !strcmp(f->nodes[v + 1].origin, o)) continue;
    const char *sp = strstr(o, " (");
    fprintf(out, "@@ %s %.*s\n", f->name, sp ? (int)(sp - o) : (int)strlen(o), o);
    kdc_sharding_explain(m, f, (kdc_value_id)v, out);
  }
}

static void capture_explain(const char *pass, const kdc_module *m, void *user) {
  explain_capture *c = user;
  if (strcmp(pass, "propagate_shardings") != 0 || m->mesh.naxes == 0) return;
  free(c->text);
  c->text = NULL;
  FILE *out = open_memstream(&c->text, &c->len);
  if (!out) return;
  for (size_t i = 0; i < m->n_funcs; i++) capture_func(out, m, m->funcs[i]);
  fclose(out);
}

/* No --loss: the model's Keras 3 compile_config, if any (tools/
 * compile_config.c), with --optimizer, --learning-rate and --from-logits
 * overriding it. */
static kdc_status from_compile_config(const compile_ctx *c, const kdc_keras_model *km,
                                      kdc_train_options *t, bool *on) {
  const kdc_compile_options *o = c->o;
  KDC_RETURN_IF_ERROR(kdc_api_compile_config(km, c->model, t, on));
  bool flags = o->optimizer || o->learning_rate > 0 || o->from_logits || o->no_shard_update;
  if (!*on && flags)
    return KDC_ERR(KDC_INVALID_INPUT, "compile: training options need --loss (e.g. --loss mse) "
                   "or a model with a compile_config");
  if (!*on) return NULL;
  /* say what the command line replaces */
  if (o->optimizer)
    fprintf(c->warnings, "kdc: note: %s: --optimizer %s overrides the compile_config's "
            "optimizer\n", c->model, o->optimizer);
  if (o->learning_rate > 0)
    fprintf(c->warnings, "kdc: note: %s: --learning-rate %g overrides the compile_config's "
            "learning rate\n", c->model, o->learning_rate);
  if (o->from_logits)
    fprintf(c->warnings, "kdc: note: %s: --from-logits overrides the compile_config's losses\n",
            c->model);
  if (o->optimizer) {
    kdc_optimizer_kind k;
    if (!kdc_optimizer_from_name(o->optimizer, &k))
      return KDC_ERR(KDC_INVALID_INPUT, "--optimizer \"%s\": unknown optimizer (sgd, adam, adamw, "
                     "rmsprop)", o->optimizer);
    kdc_optimizer_options_init(&t->optimizer, k);
  }
  if (o->learning_rate > 0 && t->optimizer.schedule.kind == KDC_LR_PIECEWISE)
    return KDC_ERR(KDC_INVALID_INPUT, "--learning-rate: %s: the compile_config's learning rate is "
                   "a PiecewiseConstantDecay, which has no initial rate to replace (its values "
                   "are the rates)", c->model);
  if (o->learning_rate > 0) t->optimizer.learning_rate = o->learning_rate;
  if (o->from_logits) t->from_logits = true;
  for (size_t i = 0; i < t->n_losses && o->from_logits; i++) t->losses[i].from_logits = true;
  t->sample_mask = true;
  /* the values come from the model file (beta_1, rho, ...): name it */
  return kdc_status_annotate(kdc_optimizer_options_check(&t->optimizer), "%s: compile_config.optimizer",
                             c->model);
}

/* Every output named by the losses / loss_weights of |t| must be one of
 * predict's results: a located error naming --loss or the compile_config. */
static kdc_status check_output_names(const compile_ctx *c, const kdc_module *mod,
                                     const kdc_train_options *t) {
  const kdc_compile_options *o = c->o;
  const kdc_func *f = kdc_ir_module_find_func(mod, "predict");
  for (size_t k = 0; f && k < t->n_losses + t->n_weights; k++) {
    bool w = k >= t->n_losses;
    const char *name = w ? t->weights[k - t->n_losses].output : t->losses[k].output;
    if (!name) continue;
    bool found = false;
    for (size_t r = 0; r < f->n_results && !found; r++)
      found = f->result_names[r] && !strcmp(f->result_names[r], name);
    if (found) continue;
    const char *first = f->n_results && f->result_names[0] ? f->result_names[0] : "?";
    if (o->loss && !w)
      return KDC_ERR(KDC_INVALID_INPUT, "--loss %s=...: the model has no output \"%s\" "
                     "(outputs: %s, ...)", name, name, first);
    return KDC_ERR(KDC_INVALID_INPUT, "%s: compile_config.%s[\"%s\"]: the model has no output "
                   "\"%s\" (outputs: %s, ...)", c->model, w ? "loss_weights" : "loss", name,
                   name, first);
  }
  return NULL;
}

/* The optimizer's variables as Keras 3 lays them out in a weights file
 * (`optimizer/vars/<i>`: iterations, the learning rate unless it is a
 * schedule, then blocks of slots: a block of several names interleaves them
 * per weight, as add_optimizer_variables(vars, [names]) does): JSON for the
 * plan's KERAS section. */
static char *optimizer_json(const kdc_train_options *t) {
  const kdc_optimizer_options *op = &t->optimizer;
  char blocks[160] = "";
  switch (op->kind) {
  case KDC_OPT_ADAM:
  case KDC_OPT_ADAMW:
    snprintf(blocks, sizeof blocks, "[[\"momentum\",\"velocity\"]%s]",
             op->amsgrad ? ",[\"velocity_hat\"]" : "");
    break;
  case KDC_OPT_RMSPROP:
    snprintf(blocks, sizeof blocks, "[[\"velocity\"]%s%s]", op->momentum > 0 ? ",[\"momentum\"]" : "",
             op->centered ? ",[\"average_gradient\"]" : "");
    break;
  default:
    snprintf(blocks, sizeof blocks, "[%s]", op->momentum != 0 ? "[\"momentum\"]" : "");
    break;
  }
  char *s = NULL;
  bool sched = op->schedule.kind != KDC_LR_CONSTANT;
  if (asprintf(&s, "{\"name\":\"%s\",\"learning_rate\":%.9g,\"lr_variable\":%s,\"blocks\":%s}",
               kdc_optimizer_name(op->kind), op->learning_rate, sched ? "false" : "true",
               blocks) < 0)
    s = NULL;
  return s;
}

/* The optimizer state of a kdc training checkpoint given as --weights
 * (the weights bind as usual; frontend/weights.c leaves "<opt>/..." alone):
 * restored as the plan's initial training state (TRAIN_STATE section,
 * encoded into |out|) when the plan trains with the same optimizer, else
 * skipped with a one-line note among the warnings.  The same optimizer must name
 * the same state tensors (its options decide the slots): anything else is
 * an error naming the tensor.  Shapes follow from the weights, which bound;
 * the runtime checks them again when it creates the training state. */
static kdc_status checkpoint_state(const compile_ctx *c, const kdc_module *mod, bool train_on,
                                   const kdc_train_options *train, const char *keras,
                                   kdc_buf *out) {
  const char *weights = c->o->weights_path;
  if (!weights) return NULL;
  size_t len = strlen(weights);
  if (len >= 5 && !strcmp(weights + len - 5, ".json")) return NULL;  /* TF.js */
  /* Keras files: optimizer/vars/<i> through the KERAS section (keras_state.c) */
  if (kdc_is_keras_file(weights))
    return kdc_api_keras_train_state(weights, mod, keras, train_on, train, c->warnings, out);
  kdc_safetensors *sf = NULL;
  KDC_RETURN_IF_ERROR(kdc_safetensors_open(weights, &sf));
  char opt[128];
  kdc_status st = NULL;
  size_t n = 0, n_file = 0;
  kdc_st_tensor *ts = NULL;
  const char *plan_opt = train_on ? kdc_optimizer_name(train->optimizer.kind) : NULL;
  if (!kdc_safetensors_checkpoint_optimizer(sf, opt, sizeof opt)) goto done;
  for (size_t i = 0; i < kdc_safetensors_count(sf); i++)
    n_file += kdc_safetensors_is_optimizer_tensor(opt, kdc_safetensors_get(sf, i)->name);
  if (!plan_opt || strcmp(plan_opt, opt) != 0) {
    if (plan_opt)
      fprintf(c->warnings, "kdc: note: %s: %zu optimizer tensors (%s/...) skipped: the plan trains "
              "with %s\n", weights, n_file, opt, plan_opt);
    else
      fprintf(c->warnings, "kdc: note: %s: %zu optimizer tensors (%s/...) skipped: the plan does not "
              "train (predict only)\n", weights, n_file, opt);
    goto done;
  }
  const kdc_func *f = kdc_ir_module_find_func(mod, "train_step");
  if (!f) {
    st = KDC_ERR(KDC_INTERNAL, "compile: a training plan without train_step");
    goto done;
  }
  ts = kdc_xcalloc(f->n_params + 1, sizeof *ts);
  for (size_t i = 0; i < f->n_params && !st; i++) {
    const kdc_node *p = kdc_ir_node(f, f->params[i]);
    if (p->attr.param.kind != KDC_PARAM_STATE) continue;
    const char *name = p->attr.param.name;
    const kdc_st_tensor *x = kdc_safetensors_find(sf, name);
    kdc_dtype dt = kdc_ir_type(f, f->params[i])->dtype;
    kdc_io_dtype want = dt == KDC_DTYPE_I32 ? KDC_IO_DTYPE_I32 : dt == KDC_DTYPE_I64
                        ? KDC_IO_DTYPE_I64 : dt == KDC_DTYPE_BOOL ? KDC_IO_DTYPE_BOOL
                        : KDC_IO_DTYPE_F32;
    if (!x)
      st = KDC_ERR(KDC_INVALID_INPUT, "%s: no tensor \"%s\": the plan's %s keeps it (the "
                   "checkpoint was saved by a %s with other options?)", weights, name, opt,
                   opt);
    else if (x->dtype != want)
      st = KDC_ERR(KDC_INVALID_INPUT, "%s: tensor \"%s\" is %s; the plan's %s keeps %s",
                   weights, name, kdc_io_dtype_name(x->dtype), opt, kdc_io_dtype_name(want));
    else
      ts[n++] = *x;
  }
  if (!st && n != n_file)  /* a tensor of the file the plan does not keep */
    for (size_t i = 0; i < kdc_safetensors_count(sf) && !st; i++) {
      const kdc_st_tensor *x = kdc_safetensors_get(sf, i);
      bool kept = !kdc_safetensors_is_optimizer_tensor(opt, x->name);
      for (size_t k = 0; k < n && !kept; k++) kept = !strcmp(ts[k].name, x->name);
      if (!kept)
        st = KDC_ERR(KDC_INVALID_INPUT, "%s: tensor \"%s\" is no state of the plan's %s (the "
                     "checkpoint was saved by a %s with other options?)", weights, x->name,
                     opt, opt);
    }
  if (!st) st = kdc_safetensors_encode(weights, ts, n, NULL, out);
done:
  free(ts);
  kdc_safetensors_close(sf);
  return st;
}

/* The option checks `kdc compile` always made, before anything is read. */
static kdc_status check_options(const kdc_compile_options *o) {
  if (!o || o->struct_size < sizeof(kdc_compile_options))
    return KDC_ERR(KDC_INVALID_INPUT, "compile: options not made by kdc_compile_options_init "
                   "(struct_size %zu, this library's is %zu)", o ? o->struct_size : 0,
                   sizeof(kdc_compile_options));
  if (!o->model_path && !o->model_text)
    return KDC_ERR(KDC_INVALID_INPUT, "compile: no model file given (see kdc --help)");
  if (o->batch < 1 || o->batch > ((int64_t)1 << 30))
    return KDC_ERR(KDC_INVALID_INPUT, "--batch \"%lld\": expected an integer from 1 to %lld",
                   (long long)o->batch, (long long)1 << 30);
  if (o->n_input_shapes && !o->input_shapes)
    return KDC_ERR(KDC_INVALID_INPUT, "--input-shape: %zu shapes but no array", o->n_input_shapes);
  if (o->n_input_shapes > KDC_MAX_INPUT_SHAPES)
    return KDC_ERR(KDC_INVALID_INPUT, "--input-shape: more than %d given", KDC_MAX_INPUT_SHAPES);
  if (!o->mesh && (o->axes || o->layout_path || o->layout_text || o->layout_match))
    return KDC_ERR(KDC_INVALID_INPUT, "compile: %s needs --mesh (e.g. --mesh 2x4)",
                   o->axes ? "--axes" : o->layout_match && !o->layout_path && !o->layout_text
                   ? "--layout-match" : "--layout");
  if (o->random_init && o->weights_path)
    return KDC_ERR(KDC_INVALID_INPUT, "compile: --random-init and --weights exclude each other");
  if (o->target && strcmp(o->target, "cpu") && strcmp(o->target, "cuda"))
    return KDC_ERR(KDC_INVALID_INPUT, "--target \"%s\": expected cpu or cuda", o->target);
  if (o->sm && !(o->target && !strcmp(o->target, "cuda")))
    return KDC_ERR(KDC_INVALID_INPUT, "compile: --sm needs --target cuda");
  if (o->sm && o->sm != 80 && o->sm != 90)
    return KDC_ERR(KDC_INVALID_INPUT, "--sm %d: expected 80 or 90", o->sm);
  if (o->matmul_precision && strcmp(o->matmul_precision, "highest") &&
      strcmp(o->matmul_precision, "tf32"))
    return KDC_ERR(KDC_INVALID_INPUT, "--matmul-precision \"%s\": expected highest or tf32",
                   o->matmul_precision);
  if (o->layout_match && !o->layout_path && !o->layout_text)
    return KDC_ERR(KDC_INVALID_INPUT, "compile: --layout-match needs --layout");
  const char *auto_flag = o->memory_per_device ? "--memory-per-device" : o->objective ? "--objective"
                         : o->write_layout_path ? "--write-layout" : o->machine_path ? "--machine"
                         : NULL;
  if (auto_flag && !layout_auto(o))
    return KDC_ERR(KDC_INVALID_INPUT, "compile: %s needs --layout auto", auto_flag);
  if (layout_auto(o) && o->layout_match)
    return KDC_ERR(KDC_INVALID_INPUT, "compile: --layout-match does not apply to --layout auto "
                   "(its rules are exact names and fullmatch regexes)");
  if (o->objective && strcmp(o->objective, "time") && strcmp(o->objective, "memory"))
    return KDC_ERR(KDC_INVALID_INPUT, "--objective \"%s\": expected time or memory", o->objective);
  if (o->learning_rate < 0 || !isfinite(o->learning_rate))
    return KDC_ERR(KDC_INVALID_INPUT, "--learning-rate \"%g\": expected a positive finite number",
                   o->learning_rate);
  return NULL;
}

/* `--layout auto`: the search (api/auto_layout.c), then the chosen layout
 * parsed like a user's and written to --write-layout. */
static kdc_status choose_layout(compile_ctx *c, const kdc_keras_model *km, const kdc_mesh *mesh,
                                int64_t batch, const kdc_train_options *train,
                                kdc_layout **layout, kdc_auto_result *chosen) {
  const kdc_compile_options *o = c->o;
  kdc_auto_options ao = {0, o->objective && !strcmp(o->objective, "memory"), o->machine_path};
  if (o->memory_per_device)
    KDC_RETURN_IF_ERROR(kdc_api_parse_size("--memory-per-device", o->memory_per_device,
                                           &ao.memory_limit));
  KDC_RETURN_IF_ERROR(kdc_api_auto_layout(km, mesh, batch, train, o->seed, &ao, c->warnings, chosen));
  if (chosen->layout_text) {
    KDC_RETURN_IF_ERROR(kdc_layout_parse(chosen->layout_text, strlen(chosen->layout_text),
                                         "layout auto", layout));
    KDC_RETURN_IF_ERROR(kdc_layout_check(*layout, mesh));
  }
  if (o->write_layout_path && chosen->layout_text)
    return kdc_file_write_atomic(o->write_layout_path, chosen->layout_text,
                                 strlen(chosen->layout_text));
  return NULL;
}

static kdc_status compile_module(compile_ctx *c, const char *out) {
  const kdc_compile_options *o = c->o;
  kdc_keras_model *km = NULL;
  kdc_module *mod = NULL;
  kdc_layout *layout = NULL;
  kdc_mesh mesh;
  kdc_train_options train;
  explain_capture explain = {NULL, 0};
  kdc_auto_result chosen;
  memset(&chosen, 0, sizeof chosen);
  kdc_status st = distribution(o, &mesh, &layout);
  bool train_on = o->loss != NULL;
  if (!st && o->loss) st = training(c, &train);
  kdc_load_options load = {c->n_input_shapes, c->input_shapes, NULL};
  if (!st && o->model_text)
    st = kdc_frontend_load_text_opts(c->model, o->model_text, o->model_text_len, &load, &km);
  else if (!st)
    st = kdc_frontend_load_opts(o->model_path, &load, &km);
  if (!st && !o->loss) st = from_compile_config(c, km, &train, &train_on);
  int64_t batch = o->batch, fixed = -1;
  const kdc_keras_layer *fixed_at = NULL;
  if (!st) st = kdc_frontend_fixed_batch(km, &fixed, &fixed_at);
  /* an InputLayer that fixes the batch: the plan's batch, and --batch must agree */
  if (!st && fixed >= 0 && o->batch_given && fixed != o->batch)
    st = kdc_fe_layer_err(fixed_at, KDC_INVALID_INPUT, "the input's batch_shape fixes the batch "
                          "to %lld, but --batch %lld was given (drop --batch, or save the model "
                          "with a batch_shape of None)", (long long)fixed, (long long)o->batch);
  if (fixed >= 0) batch = fixed;
  if (train_on) train.no_shard_update = o->no_shard_update;
  if (!st && layout_auto(o)) st = choose_layout(c, km, &mesh, batch, train_on ? &train : NULL,
                                                &layout, &chosen);
  if (!st) {
    kdc_lower_options lo = {.batch = batch, .mesh = o->mesh ? &mesh : NULL, .layout = layout,
                            .train_forward = train_on, .dropout_seed = o->seed,
                            .output_masks = train_on, .warnings = c->warnings};
    st = kdc_frontend_lower(km, &lo, &mod);
  }
  if (!st && train_on) st = check_output_names(c, mod, &train);
  if (!st && layout) kdc_layout_report_unmatched(layout, c->warnings);
  if (!st && o->random_init) st = kdc_frontend_init_weights(km, mod, o->seed);
  else if (!st) st = kdc_frontend_bind_weights(km, mod, o->weights_path, o->seed);
  if (!st) {
    kdc_pass_options po;
    memset(&po, 0, sizeof po);
    po.dump_dir = o->dump_ir_dir;
    po.print_after_all = o->print_ir_after_all ? stderr : NULL;
    po.warnings = c->warnings;
    po.cuda = o->target && !strcmp(o->target, "cuda");
    po.train = train_on ? &train : NULL;
    po.after_pass = capture_explain;
    po.after_pass_user = &explain;
    st = kdc_pass_pipeline_run(mod, &po);
  }
  kdc_buf state;
  kdc_buf_init(&state);
  char *keras = NULL;
  if (!st) {
    char *opt_json = train_on ? optimizer_json(&train) : NULL;
    keras = kdc_frontend_keras_section(km, opt_json);
    free(opt_json);
  }
  if (!st) st = checkpoint_state(c, mod, train_on, &train, keras, &state);
  if (!st) {
    kdc_codegen_options co;
    memset(&co, 0, sizeof co);
    char *ex = NULL;
    if (chosen.explain && asprintf(&ex, "%s%s", explain.text ? explain.text : "", chosen.explain) >= 0) {
      free(explain.text);
      explain.text = ex;
    }
    co.explain = explain.text;
    co.metadata_auto = chosen.metadata;
    co.keras = keras;
    if (state.size) co.train_state = state.data, co.train_state_size = state.size;
    static const char *const train_funcs[] = {"predict", "train_step", "evaluate"};
    if (train_on) co.funcs = train_funcs, co.n_funcs = 3;  /* not train_forward */
    if (o->target && !strcmp(o->target, "cuda")) co.cuda_sm = o->sm ? o->sm : 80;
    co.tf32 = o->matmul_precision && !strcmp(o->matmul_precision, "tf32");
    st = kdc_codegen_cpu_plan(mod, &co, out);
  }
  free(keras);
  kdc_buf_free(&state);
  kdc_ir_module_destroy(mod);
  kdc_frontend_free(km);
  kdc_layout_free(layout);
  free(explain.text);
  kdc_auto_result_free(&chosen);
  return st;
}

/* Compiles |o| into the plan file |out|; the warnings into *|warnings|
 * (always set, "" when none). */
static kdc_status compile_to(const kdc_compile_options *o, const char *out, char **warnings) {
  compile_ctx *c = calloc(1, sizeof *c);
  char *wtext = NULL;
  size_t wlen = 0;
  *warnings = NULL;
  if (!c) return KDC_ERR(KDC_OUT_OF_MEMORY, "compile: out of memory");
  c->o = o;
  kdc_status st = check_options(o);
  if (!st) {
    c->model = o->model_path ? o->model_path : "model.json";
    c->warnings = open_memstream(&wtext, &wlen);
    if (!c->warnings) st = KDC_ERR(KDC_OUT_OF_MEMORY, "compile: out of memory");
  }
  for (size_t i = 0; !st && i < o->n_input_shapes; i++) {
    if (!o->input_shapes[i]) {
      st = KDC_ERR(KDC_INVALID_INPUT, "--input-shape: entry %zu is NULL", i);
      break;
    }
    st = kdc_frontend_parse_input_shape(o->input_shapes[i], &c->input_shapes[i]);
    if (st) st = kdc_status_annotate(st, "--input-shape");
    else c->n_input_shapes++;
  }
  if (!st) st = compile_module(c, out);
  if (c->warnings) fclose(c->warnings);
  for (int i = 0; i < c->n_input_shapes; i++) kdc_input_shape_free(&c->input_shapes[i]);
  free(c);
  *warnings = wtext ? wtext : strdup("");
  return st;
}

kdc_status kdc_compile_file(const kdc_compile_options *o, const char *plan_path,
                            char **warnings) {
  char *w = NULL;
  kdc_status st = plan_path ? compile_to(o, plan_path, &w)
                            : KDC_ERR(KDC_INVALID_INPUT, "compile: no output plan given (-o PLAN)");
  if (warnings) *warnings = w ? w : strdup("");
  else free(w);
  return st;
}

kdc_status kdc_compile(const kdc_compile_options *o, const kdc_run_options *ro, kdc_plan **out) {
  if (!out) return KDC_ERR(KDC_INVALID_INPUT, "compile: no place for the plan (out is NULL)");
  *out = NULL;
  const char *tmpdir = getenv("TMPDIR");
  char *path = NULL;
  if (asprintf(&path, "%s/kdc-plan-XXXXXX", tmpdir && *tmpdir ? tmpdir : "/tmp") < 0)
    return KDC_ERR(KDC_OUT_OF_MEMORY, "compile: out of memory");
  int fd = mkstemp(path);
  if (fd < 0) {
    kdc_status st = KDC_ERR(KDC_IO_ERROR, "%s: cannot make a temporary plan file: %s", path,
                            strerror(errno));
    free(path);
    return st;
  }
  close(fd);
  char *warnings = NULL;
  void *bytes = NULL;
  size_t size = 0;
  kdc_status st = compile_to(o, path, &warnings);
  if (!st) st = kdc_file_read_all(path, &bytes, &size);
  kdc_plan *p = NULL;
  if (!st) st = kdc_api_plan_open(path, ro, &p);
  unlink(path);
  free(path);
  if (st) {
    free(warnings);
    free(bytes);
    return st;
  }
  free(p->path);
  p->path = NULL;
  p->bytes = bytes;
  p->size = size;
  free(p->warnings);
  p->warnings = warnings;
  *out = p;
  return NULL;
}
