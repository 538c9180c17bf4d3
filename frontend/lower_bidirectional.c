/*
 * frontend/lower_bidirectional.c: the Bidirectional wrapper around LSTM, GRU
 * and SimpleRNN (Keras 3 keras/src/layers/rnn/bidirectional.py): shape and
 * variable inference, and lowering.
 *
 * The wrapper holds two inner layers (kdc_keras_layer.inner), made from
 * config.layer and config.backward_layer (both {class_name, config}, the
 * Keras 3 and tf.keras 2 forms):
 *   forward:  config.layer, named "forward_" + its name without a
 *             "forward_" prefix;
 *   backward: config.backward_layer when present (Keras 3 topologies keep its
 *             name; tf.keras 2 ones prefix "backward_" as the forward one),
 *             else config.layer with go_backwards flipped, named "backward_"
 *             + its name without a "backward_" prefix.
 * Their variables are the wrapper's, forward first, under the wrapper's
 * scope: "bidirectional/forward_lstm/lstm_cell/kernel" (TF.js and tf.keras 2
 * files name them "bidirectional/forward_lstm/kernel": weights.c).  Each
 * inner layer is one scan (lower_rnn.c).  Outputs: y_f, y_b (y_b flipped
 * along time when return_sequences, so both align) merged by merge_mode:
 * concat (last axis) | sum | mul | ave ((y_f + y_b) / 2) | None (two
 * outputs); then with return_state the forward states, then the backward.
 * Initial states passed to the call split in half as in Keras' call():
 * the first half starts the forward layer, the second the backward one.
 */
#include <json-c/json.h>
#include <stdio.h>
#include <string.h>

#include "frontend/frontend.h"

typedef enum merge_mode { MERGE_CONCAT, MERGE_SUM, MERGE_MUL, MERGE_AVE, MERGE_NONE } merge_mode;

static kdc_status read_merge(const kdc_keras_layer *l, merge_mode *out) {
  json_object *v = NULL;
  *out = MERGE_CONCAT;
  if (!json_object_object_get_ex(l->config, "merge_mode", &v)) return NULL;
  if (!v) {
    *out = MERGE_NONE;
    return NULL;
  }
  const char *s = json_object_is_type(v, json_type_string) ? json_object_get_string(v) : NULL;
  static const char *const names[] = {"concat", "sum", "mul", "ave"};
  for (int i = 0; s && i < 4; i++)
    if (!strcmp(s, names[i])) {
      *out = (merge_mode)i;
      return NULL;
    }
  return kdc_fe_layer_err(l, KDC_INVALID_INPUT, "config.merge_mode %s: expected \"concat\", "
                          "\"sum\", \"mul\", \"ave\" or null",
                          json_object_to_json_string_ext(v, JSON_C_TO_STRING_PLAIN));
}

static bool is_rnn_class(const char *c) {
  return !strcmp(c, "LSTM") || !strcmp(c, "GRU") || !strcmp(c, "SimpleRNN");
}

static const char *strip(const char *s, const char *prefix) {
  size_t n = strlen(prefix);
  return strncmp(s, prefix, n) ? s : s + n;
}

static bool cfg_flag(json_object *cfg, const char *key) {
  json_object *v = kdc_fe_get(cfg, key);
  return v && json_object_is_type(v, json_type_boolean) && json_object_get_boolean(v);
}

/* The inner layer described by config.|key| of wrapper |l|.  |derive|: the
 * backward layer made from config.layer (go_backwards flipped). */
static kdc_status make_inner(kdc_infer_args *a, const char *key, bool derive, bool keep_name,
                             kdc_keras_layer **out) {
  kdc_keras_layer *l = a->l;
  kdc_arena *ar = a->m->arena;
  const char *src = derive ? "layer" : key;
  const char *loc = kdc_arena_printf(ar, "%s.config.%s", l->loc, src);
  json_object *spec = kdc_fe_get(l->config, src);
  json_object *cls = kdc_fe_get(spec, "class_name"), *cfg = kdc_fe_get(spec, "config");
  if (!cls || !json_object_is_type(cls, json_type_string) ||
      !json_object_is_type(cfg, json_type_object))
    return kdc_fe_layer_err(l, KDC_INVALID_INPUT, "config.%s: expected the wrapped recurrent "
                            "layer as {\"class_name\": ..., \"config\": {...}}", src);
  const char *cname = json_object_get_string(cls);
  if (!is_rnn_class(cname))
    return kdc_fe_layer_err(l, KDC_UNSUPPORTED, "config.%s.class_name \"%s\": Bidirectional is "
                            "supported around LSTM, GRU and SimpleRNN only", src, cname);
  json_object *nm = kdc_fe_get(cfg, "name");
  const char *name = nm && json_object_is_type(nm, json_type_string) ? json_object_get_string(nm)
                                                                     : "rnn";
  if (derive) {
    /* Keras writes the derived backward layer into its get_config; kdc does
     * the same in the parsed file (owned by the model), go_backwards flipped. */
    json_object *copy = NULL;
    if (json_object_deep_copy(spec, &copy, NULL) || !copy)
      return KDC_ERR(KDC_OUT_OF_MEMORY, "out of memory copying %s", loc);
    json_object *ccfg = kdc_fe_get(copy, "config");
    json_object_object_add(ccfg, "go_backwards",
                           json_object_new_boolean(!cfg_flag(cfg, "go_backwards")));
    json_object_object_add(ccfg, "name", json_object_new_string(
                               kdc_arena_printf(ar, "backward_%s", strip(name, "backward_"))));
    json_object_object_add(l->config, "backward_layer", copy);
    spec = copy, cfg = ccfg;
    name = json_object_get_string(kdc_fe_get(ccfg, "name"));
  } else if (!keep_name) {
    const char *pre = strcmp(key, "layer") ? "backward_" : "forward_";
    name = kdc_arena_printf(ar, "%s%s", pre, strip(name, pre));
  }
  *out = kdc_fe_inner_layer(l, loc, cname, name, cfg);
  return NULL;
}

/* The wrapper call's initial states (kdc_fe_rnn_states): Keras gives the
 * first half to the forward layer, the second to the backward one. */
static kdc_status wrapper_states(const kdc_keras_layer *l, const kdc_keras_node *n, int *idx,
                                 int *half) {
  *half = 0;
  int ns = kdc_fe_rnn_states(n, idx);
  if (ns < 0 || ns > KDC_FE_MAX_RNN_STATES || ns % 2)
    return kdc_fe_layer_err(l, KDC_INVALID_INPUT, "initial states: expected an even number "
                            "(forward states, then backward states) as inputs or as the "
                            "initial_state keyword");
  *half = ns / 2;
  return NULL;
}

/* Runs the inner layer's inference on the wrapper's sequence and its part
 * (0 forward, 1 backward) of the initial states; its outputs go to |outs|
 * (returns their number in |n|). */
static kdc_status infer_inner(kdc_infer_args *a, kdc_keras_layer *in, int part, kdc_kshape *outs,
                              int *n) {
  int idx[KDC_FE_MAX_RNN_STATES], nh;
  KDC_RETURN_IF_ERROR(wrapper_states(a->l, a->node, idx, &nh));
  kdc_kshape ins[1 + KDC_FE_MAX_RNN_STATES];
  ins[0] = a->in[0];
  for (int i = 0; i < nh; i++) {
    int j = idx[part * nh + i];
    ins[1 + i] = j < a->node->n_in ? a->in[j] : a->kw[j - a->node->n_in];
  }
  kdc_keras_node node = *a->node;
  node.n_out = 0;
  node.out = NULL;
  node.n_in = 1 + nh;
  node.n_kw = 0;
  kdc_infer_args ia = {a->m, in, &node, a->node_index, ins, NULL};
  KDC_RETURN_IF_ERROR(kdc_fe_infer_rnn(&ia));
  *n = node.n_out;
  for (int i = 0; i < node.n_out; i++) outs[i] = node.out[i];
  return NULL;
}

kdc_status kdc_fe_infer_bidirectional(kdc_infer_args *a) {
  kdc_keras_layer *l = a->l;
  merge_mode mm;
  KDC_RETURN_IF_ERROR(read_merge(l, &mm));
  if (!l->inner[0]) {
    const kdc_keras_model *top = l->model;
    while (top->parent) top = top->parent;
    bool given = !kdc_fe_is_null(kdc_fe_get(l->config, "backward_layer"));
    KDC_RETURN_IF_ERROR(make_inner(a, "layer", false, false, &l->inner[0]));
    KDC_RETURN_IF_ERROR(make_inner(a, "backward_layer", !given, given && !top->tk2_topology,
                                   &l->inner[1]));
    const kdc_keras_layer *f = l->inner[0], *b = l->inner[1];
    if (cfg_flag(f->config, "go_backwards") == cfg_flag(b->config, "go_backwards"))
      return kdc_fe_layer_err(l, KDC_INVALID_INPUT, "config.layer and config.backward_layer "
                              "have the same go_backwards: one must process the sequence "
                              "backwards");
    static const char *const common[] = {"stateful", "return_sequences", "return_state"};
    for (int i = 0; i < 3; i++)
      if (cfg_flag(f->config, common[i]) != cfg_flag(b->config, common[i]))
        return kdc_fe_layer_err(l, KDC_INVALID_INPUT, "config.layer and config.backward_layer "
                                "differ in %s (Keras requires them equal)", common[i]);
  }
  kdc_kshape fo[3], bo[3];
  int nf = 0, nb = 0;
  KDC_RETURN_IF_ERROR(infer_inner(a, l->inner[0], 0, fo, &nf));
  KDC_RETURN_IF_ERROR(infer_inner(a, l->inner[1], 1, bo, &nb));
  /* the wrapper's variables: the forward layer's, then the backward's */
  kdc_keras_layer *f = l->inner[0], *b = l->inner[1];
  l->n_vars = f->n_vars + b->n_vars;
  l->vars = kdc_arena_alloc(a->m->arena, sizeof(*l->vars) * (size_t)(l->n_vars + 1));
  if (f->n_vars) memcpy(l->vars, f->vars, sizeof(*l->vars) * (size_t)f->n_vars);
  if (b->n_vars) memcpy(l->vars + f->n_vars, b->vars, sizeof(*l->vars) * (size_t)b->n_vars);
  if (nf != nb || fo[0].rank != bo[0].rank || fo[0].dims[fo[0].rank - 1] != bo[0].dims[bo[0].rank - 1])
    return kdc_fe_layer_err(l, KDC_INVALID_INPUT, "the forward and backward layers give outputs "
                            "of different shapes (units must agree)");
  kdc_kshape outs[8];
  int n = 0;
  outs[n] = fo[0];
  if (mm == MERGE_CONCAT) outs[n].dims[outs[n].rank - 1] *= 2;
  n++;
  if (mm == MERGE_NONE) outs[n++] = bo[0];
  for (int i = 1; i < nf; i++) outs[n++] = fo[i];
  for (int i = 1; i < nb; i++) outs[n++] = bo[i];
  kdc_fe_set_outputs(a, n, outs);
  return NULL;
}

kdc_status kdc_fe_lower_bidirectional(struct kdc_lower_ctx *c, const kdc_keras_layer *l,
                                      const kdc_keras_node *n, const kdc_value_id *in,
                                      const kdc_value_id *kw, kdc_value_id *out) {
  merge_mode mm;
  KDC_RETURN_IF_ERROR(read_merge(l, &mm));
  if (!l->inner[0] || !l->inner[1])
    return kdc_fe_layer_err(l, KDC_INTERNAL, "Bidirectional lowered before shape inference");
  kdc_value_id yf[3] = {KDC_NO_VALUE, KDC_NO_VALUE, KDC_NO_VALUE};
  kdc_value_id yb[3] = {KDC_NO_VALUE, KDC_NO_VALUE, KDC_NO_VALUE};
  int idx[KDC_FE_MAX_RNN_STATES], nh;
  KDC_RETURN_IF_ERROR(wrapper_states(l, n, idx, &nh));
  kdc_value_id *ys[2] = {yf, yb};
  for (int part = 0; part < 2; part++) {
    kdc_value_id ins[1 + KDC_FE_MAX_RNN_STATES];
    ins[0] = in[0];
    for (int i = 0; i < nh; i++) {
      int j = idx[part * nh + i];
      ins[1 + i] = j < n->n_in ? in[j] : kw[j - n->n_in];
    }
    kdc_keras_node node = *n;
    node.n_in = 1 + nh;
    node.n_kw = 0;
    KDC_RETURN_IF_ERROR(kdc_fe_lower_rnn(c, l->inner[part], &node, ins, NULL, ys[part]));
  }
  if (yf[0] == KDC_NO_VALUE || yb[0] == KDC_NO_VALUE) return NULL;
  kdc_func *f = c->f;
  bool state = cfg_flag(l->inner[0]->config, "return_state");
  int ns = state ? (strcmp(l->inner[0]->class_name, "LSTM") ? 1 : 2) : 0;
  if (cfg_flag(l->inner[0]->config, "return_sequences"))
    yb[0] = kdc_ir_reverse(f, yb[0], 1, (int64_t[]){1});
  int k = 0;
  switch (mm) {
  case MERGE_CONCAT: {
    int rank = kdc_ir_type(f, yf[0])->rank;
    out[k++] = kdc_ir_concat(f, 2, (kdc_value_id[]){yf[0], yb[0]}, rank - 1);
    break;
  }
  case MERGE_SUM: out[k++] = kdc_ir_binary(f, KDC_OP_ADD, yf[0], yb[0]); break;
  case MERGE_MUL: out[k++] = kdc_ir_binary(f, KDC_OP_MUL, yf[0], yb[0]); break;
  case MERGE_AVE: {
    /* (y + y_rev) / 2: halving is exact, so a multiply by 0.5 is the same */
    const kdc_type *t = kdc_ir_type(f, yf[0]);
    kdc_value_id half = kdc_ir_splat(f, KDC_DTYPE_F32, t->rank, t->dims, 0.5);
    out[k++] = kdc_ir_binary(f, KDC_OP_MUL, kdc_ir_binary(f, KDC_OP_ADD, yf[0], yb[0]), half);
    break;
  }
  case MERGE_NONE:
    out[k++] = yf[0];
    out[k++] = yb[0];
    break;
  }
  for (int i = 1; i <= ns; i++) out[k++] = yf[i];
  for (int i = 1; i <= ns; i++) out[k++] = yb[i];
  return kdc_ir_take_error(f);
}
