/* `kdc compile`: model file -> frontend -> passes -> codegen -> plan.bin. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/codegen.h"
#include "common/io.h"
#include "frontend/frontend.h"
#include "frontend/layout.h"
#include "passes/passes.h"
#include "tools/cli.h"

enum { KDC_MAX_INPUT_SHAPES = 64 };

typedef struct compile_opts {
  const char *model, *out, *weights, *dump_dir;
  const char *mesh, *axes, *layout, *layout_match;
  const char *loss, *optimizer;
  double learning_rate;        /* 0 = the optimizer's Keras default */
  bool from_logits;
  int64_t batch;
  bool batch_given;            /* --batch was on the command line */
  uint64_t seed;
  bool print_ir;
  bool random_init;            /* --random-init: Keras initialisers even if the model has weights */
  bool no_shard_update;        /* --no-shard-update: replicated optimizer updates */
  const char *target;          /* --target cpu|cuda */
  int64_t sm;                  /* --sm 80|90 (cuda) */
  kdc_input_shape input_shapes[KDC_MAX_INPUT_SHAPES]; /* --input-shape, in order */
  int n_input_shapes;
} compile_opts;

static kdc_status parse(int argc, char **argv, compile_opts *o) {
  cli_args a = {argc, argv, 0};
  kdc_status st = NULL;
  const char *v;
  memset(o, 0, sizeof *o);
  o->batch = 32;
  while (a.i < a.argc && !st) {
    if (cli_flag_value(&a, "-o", &o->out, &st) || cli_flag_value(&a, "--output", &o->out, &st) ||
        cli_flag_value(&a, "--weights", &o->weights, &st) ||
        cli_flag_value(&a, "--dump-ir", &o->dump_dir, &st) ||
        cli_flag_value(&a, "--mesh", &o->mesh, &st) || cli_flag_value(&a, "--axes", &o->axes, &st) ||
        cli_flag_value(&a, "--layout", &o->layout, &st) ||
        cli_flag_value(&a, "--layout-match", &o->layout_match, &st) ||
        cli_flag_value(&a, "--loss", &o->loss, &st) ||
        cli_flag_value(&a, "--optimizer", &o->optimizer, &st) ||
        cli_flag_value(&a, "--target", &o->target, &st))
      continue;
    if (cli_flag_value(&a, "--sm", &v, &st)) {
      if (!st) st = cli_parse_i64("--sm", v, 1, 1000, &o->sm);
      continue;
    }
    if (cli_flag_value(&a, "--input-shape", &v, &st)) {
      if (!st && o->n_input_shapes == KDC_MAX_INPUT_SHAPES)
        st = KDC_ERR(KDC_INVALID_INPUT, "--input-shape: more than %d given", KDC_MAX_INPUT_SHAPES);
      if (!st) st = kdc_frontend_parse_input_shape(v, &o->input_shapes[o->n_input_shapes]);
      if (!st) o->n_input_shapes++;
      else st = kdc_status_annotate(st, "--input-shape");
      continue;
    }
    if (cli_flag_value(&a, "--batch", &v, &st)) {
      if (!st) st = cli_parse_i64("--batch", v, 1, (int64_t)1 << 30, &o->batch);
      o->batch_given = true;
    } else if (cli_flag_value(&a, "--seed", &v, &st)) {
      if (!st) st = cli_parse_u64("--seed", v, &o->seed);
    } else if (cli_flag_value(&a, "--learning-rate", &v, &st)) {
      if (!st) st = cli_parse_double("--learning-rate", v, &o->learning_rate);
      if (!st && !(o->learning_rate > 0 && isfinite(o->learning_rate)))
        st = KDC_ERR(KDC_INVALID_INPUT, "--learning-rate \"%s\": expected a positive finite number", v);
    } else if (cli_flag(&a, "--from-logits")) {
      o->from_logits = true;
    } else if (cli_flag(&a, "--no-shard-update")) {
      o->no_shard_update = true;
    } else if (cli_flag(&a, "--random-init")) {
      o->random_init = true;
    } else if (cli_flag(&a, "--print-ir-after-all")) {
      o->print_ir = true;
    } else if (a.argv[a.i][0] != '-' && !o->model) {
      o->model = a.argv[a.i++];
    } else {
      st = cli_unknown(&a);
    }
  }
  if (!st && !o->model) st = KDC_ERR(KDC_INVALID_INPUT, "compile: no model file given (see kdc --help)");
  if (!st && !o->out) st = KDC_ERR(KDC_INVALID_INPUT, "compile: no output plan given (-o PLAN)");
  if (!st && !o->mesh && (o->axes || o->layout || o->layout_match))
    st = KDC_ERR(KDC_INVALID_INPUT, "compile: %s needs --mesh (e.g. --mesh 2x4)",
                 o->axes ? "--axes" : o->layout ? "--layout" : "--layout-match");
  if (!st && o->random_init && o->weights)
    st = KDC_ERR(KDC_INVALID_INPUT, "compile: --random-init and --weights exclude each other");
  if (!st && o->target && strcmp(o->target, "cpu") && strcmp(o->target, "cuda"))
    st = KDC_ERR(KDC_INVALID_INPUT, "--target \"%s\": expected cpu or cuda", o->target);
  if (!st && o->sm && !(o->target && !strcmp(o->target, "cuda")))
    st = KDC_ERR(KDC_INVALID_INPUT, "compile: --sm needs --target cuda");
  if (!st && o->sm && o->sm != 80 && o->sm != 90)
    st = KDC_ERR(KDC_INVALID_INPUT, "--sm %lld: expected 80 or 90", (long long)o->sm);
  if (!st && o->layout_match && !o->layout)
    st = KDC_ERR(KDC_INVALID_INPUT, "compile: --layout-match needs --layout");
  return st;
}

/* Mesh and layout: parsed and checked before the model is even read, so a
 * bad mesh string or layout rule fails fast with its own location. */
static kdc_status distribution(const compile_opts *o, kdc_mesh *mesh, kdc_layout **layout) {
  memset(mesh, 0, sizeof *mesh);
  *layout = NULL;
  if (!o->mesh) return NULL;
  KDC_RETURN_IF_ERROR(kdc_mesh_parse(o->mesh, o->axes, mesh));
  if (!o->layout) return NULL;
  KDC_RETURN_IF_ERROR(kdc_layout_load(o->layout, layout));
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
static kdc_status parse_loss(const char *spec, kdc_train_options *t) {
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
      static char names[KDC_TRAIN_MAX_OUTPUTS][96]; /* one compile per process */
      snprintf(names[t->n_losses - 1], sizeof names[0], "%.*s", (int)(eq - p), p);
      e->output = names[t->n_losses - 1];
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
static kdc_status training(const compile_opts *o, kdc_train_options *t) {
  kdc_optimizer_kind opt = KDC_OPT_SGD;
  if (o->optimizer && !kdc_optimizer_from_name(o->optimizer, &opt))
    return KDC_ERR(KDC_INVALID_INPUT, "--optimizer \"%s\": unknown optimizer (sgd, adam, adamw, "
                   "rmsprop)", o->optimizer);
  kdc_train_options_init(t, KDC_LOSS_MSE, opt);
  KDC_RETURN_IF_ERROR(parse_loss(o->loss, t));
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
static kdc_status from_compile_config(const compile_opts *o, const kdc_keras_model *km,
                                      kdc_train_options *t, bool *on) {
  KDC_RETURN_IF_ERROR(cli_compile_config(km, o->model, t, on));
  bool flags = o->optimizer || o->learning_rate > 0 || o->from_logits || o->no_shard_update;
  if (!*on && flags)
    return KDC_ERR(KDC_INVALID_INPUT, "compile: training options need --loss (e.g. --loss mse) "
                   "or a model with a compile_config");
  if (!*on) return NULL;
  /* say what the command line replaces */
  if (o->optimizer)
    fprintf(stderr, "kdc: note: %s: --optimizer %s overrides the compile_config's optimizer\n",
            o->model, o->optimizer);
  if (o->learning_rate > 0)
    fprintf(stderr, "kdc: note: %s: --learning-rate %g overrides the compile_config's learning "
            "rate\n", o->model, o->learning_rate);
  if (o->from_logits)
    fprintf(stderr, "kdc: note: %s: --from-logits overrides the compile_config's losses\n", o->model);
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
                   "are the rates)", o->model);
  if (o->learning_rate > 0) t->optimizer.learning_rate = o->learning_rate;
  if (o->from_logits) t->from_logits = true;
  for (size_t i = 0; i < t->n_losses && o->from_logits; i++) t->losses[i].from_logits = true;
  t->sample_mask = true;
  /* the values come from the model file (beta_1, rho, ...): name it */
  return kdc_status_annotate(kdc_optimizer_options_check(&t->optimizer), "%s: compile_config.optimizer",
                             o->model);
}

/* Every output named by the losses / loss_weights of |t| must be one of
 * predict's results: a located error naming --loss or the compile_config. */
static kdc_status check_output_names(const compile_opts *o, const kdc_module *mod,
                                     const kdc_train_options *t) {
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
                   "\"%s\" (outputs: %s, ...)", o->model, w ? "loss_weights" : "loss", name,
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
  if (asprintf(&s, "{\"name\":\"%s\",\"learning_rate\":%s%.9g,\"lr_variable\":%s,\"blocks\":%s}",
               kdc_optimizer_name(op->kind), "", op->learning_rate, sched ? "false" : "true",
               blocks) < 0)
    s = NULL;
  return s;
}

/* The optimizer state of a kdc training checkpoint given as --weights
 * (the weights bind as usual; frontend/weights.c leaves "<opt>/..." alone):
 * restored as the plan's initial training state (TRAIN_STATE section,
 * encoded into |out|) when the plan trains with the same optimizer, else
 * skipped with a one-line note on stderr.  The same optimizer must name
 * the same state tensors (its options decide the slots): anything else is
 * an error naming the tensor.  Shapes follow from the weights, which bound;
 * the runtime checks them again when it creates the training state. */
static kdc_status checkpoint_state(const compile_opts *o, const kdc_module *mod, bool train_on,
                                   const kdc_train_options *train, kdc_buf *out) {
  if (!o->weights) return NULL;
  size_t len = strlen(o->weights);
  if (len >= 5 && !strcmp(o->weights + len - 5, ".json")) return NULL;  /* TF.js */
  /* Keras files: their optimizer state is restored by kdc run --initial-weights */
  if (cli_is_keras_file(o->weights)) return NULL;
  kdc_safetensors *sf = NULL;
  KDC_RETURN_IF_ERROR(kdc_safetensors_open(o->weights, &sf));
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
      fprintf(stderr, "kdc: note: %s: %zu optimizer tensors (%s/...) skipped: the plan trains "
              "with %s\n", o->weights, n_file, opt, plan_opt);
    else
      fprintf(stderr, "kdc: note: %s: %zu optimizer tensors (%s/...) skipped: the plan does not "
              "train (predict only)\n", o->weights, n_file, opt);
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
                   "checkpoint was saved by a %s with other options?)", o->weights, name, opt,
                   opt);
    else if (x->dtype != want)
      st = KDC_ERR(KDC_INVALID_INPUT, "%s: tensor \"%s\" is %s; the plan's %s keeps %s",
                   o->weights, name, kdc_io_dtype_name(x->dtype), opt, kdc_io_dtype_name(want));
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
                     "checkpoint was saved by a %s with other options?)", o->weights, x->name,
                     opt, opt);
    }
  if (!st) st = kdc_safetensors_encode(o->weights, ts, n, NULL, out);
done:
  free(ts);
  kdc_safetensors_close(sf);
  return st;
}

static kdc_status compile(const compile_opts *o) {
  kdc_keras_model *km = NULL;
  kdc_module *mod = NULL;
  kdc_layout *layout = NULL;
  kdc_mesh mesh;
  kdc_train_options train;
  explain_capture explain = {NULL, 0};
  kdc_status st = distribution(o, &mesh, &layout);
  bool train_on = o->loss != NULL;
  if (!st && o->loss) st = training(o, &train);
  kdc_load_options load = {o->n_input_shapes, o->input_shapes, NULL};
  if (!st) st = kdc_frontend_load_opts(o->model, &load, &km);
  if (!st && !o->loss) st = from_compile_config(o, km, &train, &train_on);
  int64_t batch = o->batch, fixed = -1;
  const kdc_keras_layer *fixed_at = NULL;
  if (!st) st = kdc_frontend_fixed_batch(km, &fixed, &fixed_at);
  /* an InputLayer that fixes the batch: the plan's batch, and --batch must agree */
  if (!st && fixed >= 0 && o->batch_given && fixed != o->batch)
    st = kdc_fe_layer_err(fixed_at, KDC_INVALID_INPUT, "the input's batch_shape fixes the batch "
                          "to %lld, but --batch %lld was given (drop --batch, or save the model "
                          "with a batch_shape of None)", (long long)fixed, (long long)o->batch);
  if (fixed >= 0) batch = fixed;
  if (!st) {
    kdc_lower_options lo = {.batch = batch, .mesh = o->mesh ? &mesh : NULL, .layout = layout,
                            .train_forward = train_on, .dropout_seed = o->seed,
                            .output_masks = train_on};
    st = kdc_frontend_lower(km, &lo, &mod);
  }
  if (!st && train_on) st = check_output_names(o, mod, &train);
  if (train_on) train.no_shard_update = o->no_shard_update;
  if (!st && layout) kdc_layout_report_unmatched(layout, stderr);
  if (!st && o->random_init) st = kdc_frontend_init_weights(km, mod, o->seed);
  else if (!st) st = kdc_frontend_bind_weights(km, mod, o->weights, o->seed);
  if (!st) {
    kdc_pass_options po;
    memset(&po, 0, sizeof po);
    po.dump_dir = o->dump_dir;
    po.print_after_all = o->print_ir ? stderr : NULL;
    po.warnings = stderr;
    po.train = train_on ? &train : NULL;
    po.after_pass = capture_explain;
    po.after_pass_user = &explain;
    st = kdc_pass_pipeline_run(mod, &po);
  }
  kdc_buf state;
  kdc_buf_init(&state);
  if (!st) st = checkpoint_state(o, mod, train_on, &train, &state);
  if (!st) {
    kdc_codegen_options co;
    memset(&co, 0, sizeof co);
    co.explain = explain.text;
    char *opt_json = train_on ? optimizer_json(&train) : NULL;
    char *keras = kdc_frontend_keras_section(km, opt_json);
    free(opt_json);
    co.keras = keras;
    if (state.size) co.train_state = state.data, co.train_state_size = state.size;
    static const char *const train_funcs[] = {"predict", "train_step", "evaluate"};
    if (train_on) co.funcs = train_funcs, co.n_funcs = 3;  /* not train_forward */
    if (o->target && !strcmp(o->target, "cuda")) co.cuda_sm = o->sm ? (int)o->sm : 80;
    st = kdc_codegen_cpu_plan(mod, &co, o->out);
    free(keras);
  }
  kdc_buf_free(&state);
  kdc_ir_module_destroy(mod);
  kdc_frontend_free(km);
  kdc_layout_free(layout);
  free(explain.text);
  return st;
}

int kdc_cmd_compile(int argc, char **argv) {
  compile_opts o;
  kdc_status st = parse(argc, argv, &o);
  if (!st) {
    /* the plan appears only if everything succeeded (and never over an input) */
    kdc_file_arg out[] = {{"-o", o.out}};
    kdc_file_arg in[] = {{"the model", o.model}, {"--weights", o.weights}, {"--layout", o.layout}};
    st = kdc_outputs_begin(out, 1, in, 3);
  }
  if (!st) st = compile(&o);
  st = cli_outputs_end(st);
  for (int i = 0; i < o.n_input_shapes; i++) kdc_input_shape_free(&o.input_shapes[i]);
  return st ? cli_fail(st) : 0;
}
