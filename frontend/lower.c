/*
 * frontend/lower.c: the layer graph -> an ir/ module with function "predict".
 *
 * Parameters: the model inputs first (input_layers order, batch dim =
 * opt->batch), then one weight per variable in kdc_frontend_variable order,
 * named by its Keras 3 path; every variable is also a module weight (data
 * NULL until kdc_frontend_bind_weights).  Nodes are lowered in the order
 * shape inference evaluated them; each layer's nodes carry the origin
 * "<layer name> (<json path>)", and a builder error is annotated with the
 * file and the layer's place.  A class without a lowering rule is a located
 * UNSUPPORTED error, never a guess.
 */
#include <json-c/json.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/frontend.h"

kdc_value_id kdc_fe_weight(struct kdc_lower_ctx *c, const kdc_keras_layer *l, const char *name) {
  size_t pl = strlen(l->path);
  for (int i = 0; i < l->n_vars; i++)
    if (!strcmp(l->vars[i]->path + pl + 1, name)) return c->weight[l->vars[i]->gid];
  return KDC_NO_VALUE;
}

kdc_value_id kdc_fe_sample_mask(struct kdc_lower_ctx *c) {
  if (c->sample_mask == KDC_NO_VALUE) {
    kdc_type t = kdc_type_make(KDC_DTYPE_F32, 1, &c->batch);
    const char *o = c->f->cur_origin;
    kdc_ir_set_origin(c->f, NULL);
    c->sample_mask = kdc_ir_parameter(c->f, KDC_PARAM_LABEL, "sample_mask", &t);
    kdc_ir_set_origin(c->f, o);
  }
  return c->sample_mask;
}

static const kdc_keras_var *layer_var(const kdc_keras_layer *l, const char *name) {
  size_t pl = strlen(l->path);
  for (int i = 0; i < l->n_vars; i++)
    if (!strcmp(l->vars[i]->path + pl + 1, name)) return l->vars[i];
  return NULL;
}

kdc_value_id kdc_fe_state_value(struct kdc_lower_ctx *c, const kdc_keras_layer *l,
                                const char *name) {
  const kdc_keras_var *v = layer_var(l, name);
  if (!v) return KDC_NO_VALUE;
  if (c->assigned && c->assigned[v->gid] != KDC_NO_VALUE) return c->assigned[v->gid];
  return c->weight[v->gid];
}

kdc_status kdc_fe_assign(struct kdc_lower_ctx *c, const kdc_keras_layer *l, const char *name,
                         kdc_value_id v) {
  const kdc_keras_var *var = layer_var(l, name);
  if (!var || !c->assigned || var->trainable)
    return kdc_fe_layer_err(l, KDC_INTERNAL, "cannot assign variable \"%s\"", name);
  c->assigned[var->gid] = v;
  return NULL;
}

static kdc_status dtype_of(const kdc_keras_layer *l, kdc_dtype *out) {
  const char *dt = kdc_fe_dtype_name(kdc_fe_get(l->config, "dtype"), NULL);
  if (!dt) dt = "float32";
  if (!strcmp(dt, "float32")) *out = KDC_DTYPE_F32;
  else if (!strcmp(dt, "int32")) *out = KDC_DTYPE_I32;
  else if (!strcmp(dt, "int64")) *out = KDC_DTYPE_I64;
  else if (!strcmp(dt, "bool")) *out = KDC_DTYPE_BOOL;
  else
    return kdc_fe_layer_err(l, KDC_UNSUPPORTED, "input dtype \"%s\" is not supported", dt);
  return NULL;
}

static const char *origin(const kdc_keras_layer *l) {
  return kdc_arena_printf(l->model->arena, "%s (%s)", l->name, l->loc);
}

kdc_status kdc_fe_lower_graph(struct kdc_lower_ctx *c, const kdc_keras_model *m,
                              const kdc_value_id *inputs, kdc_value_id *outputs) {
  return kdc_fe_lower_graph_masked(c, m, inputs, NULL, outputs, NULL);
}

/* The input slot of the |j|-th tensor of a call's `mask` kwarg |mk|: 0 for
 * a single tensor, its position in a list (null entries skipped). */
static int mask_list_slot(json_object *mk, int j) {
  if (!json_object_is_type(mk, json_type_array)) return j;
  for (size_t e = 0; e < json_object_array_length(mk); e++) {
    json_object *v = json_object_array_get_idx(mk, e);
    if (kdc_fe_is_null(v)) continue;
    if (j-- == 0) return (int)e;
  }
  return 64;
}

kdc_status kdc_fe_lower_graph_masked(struct kdc_lower_ctx *c, const kdc_keras_model *m,
                                     const kdc_value_id *inputs, const kdc_value_id *in_masks,
                                     kdc_value_id *outputs, kdc_value_id *out_masks) {
  kdc_value_id *vals = kdc_xmalloc(sizeof(kdc_value_id) * (size_t)(m->n_tensors + 1));
  kdc_value_id *masks = kdc_xmalloc(sizeof(kdc_value_id) * (size_t)(m->n_tensors + 1));
  for (int i = 0; i < m->n_tensors; i++) vals[i] = masks[i] = KDC_NO_VALUE;
  for (int i = 0; i < m->n_inputs; i++) {
    int t = m->layers[m->inputs[i].layer].nodes[0].tensor_base;
    vals[t] = inputs[i];
    if (in_masks) masks[t] = in_masks[i];
  }
  /* the caller's node (a nested model being lowered) keeps its mask state */
  const kdc_value_id *saved_in = c->in_mask;
  kdc_value_id *saved_out = c->out_mask;
  bool saved_taken = c->mask_taken;
  kdc_status st = NULL;
  kdc_value_id in[64], kw[16], out[8], im[80], om[8];
  for (int k = 0; k < m->n_order && !st; k++) {
    const kdc_keras_layer *l = &m->layers[m->order[k].layer];
    const kdc_keras_node *n = &l->nodes[m->order[k].node];
    if (!strcmp(l->class_name, "InputLayer")) {
      if (vals[n->tensor_base] == KDC_NO_VALUE)
        st = kdc_fe_layer_err(l, KDC_INVALID_INPUT, "this InputLayer is not an input of model \"%s\"",
                              m->name);
      continue;
    }
    if (!l->cls->lower) {
      st = kdc_fe_layer_err(l, KDC_UNSUPPORTED,
                            "layer %s is not supported by kdc for compilation yet", l->class_name);
      break;
    }
    if (n->n_in > 64 || n->n_kw > 16 || n->n_out > 8) {
      st = kdc_fe_layer_err(l, KDC_UNSUPPORTED, "too many inputs or outputs");
      break;
    }
    bool masked = false;
    for (int i = 0; i < n->n_in + n->n_kw; i++) {
      kdc_keras_ref r = i < n->n_in ? n->in[i] : n->kw[i - n->n_in];
      int t = m->layers[r.layer].nodes[r.node].tensor_base + r.tensor;
      if (i < n->n_in) in[i] = vals[t];
      else kw[i - n->n_in] = vals[t];
      im[i] = masks[t];
      masked = masked || im[i] != KDC_NO_VALUE;
    }
    /* an explicit `mask` kwarg is the previous mask (Keras layer.py __call__):
     * one tensor for the first input, or a list with one entry per input
     * (Attention's [query_mask, value_mask]; null entries are no mask) */
    json_object *mk = kdc_fe_get(n->kwargs, "mask");
    for (int i = 0, j = 0; i < n->n_kw; i++) {
      if (strcmp(n->kw_names[i], "mask") || n->n_in == 0) continue;
      int at = mask_list_slot(mk, j++);
      if (at < n->n_in) im[at] = kw[i], masked = true;
    }
    for (int i = 0; i < n->n_out; i++) out[i] = om[i] = KDC_NO_VALUE;
    c->in_mask = masked ? im : NULL;
    c->out_mask = om;
    c->mask_taken = false;
    kdc_ir_set_origin(c->f, origin(l));
    kdc_fe_policy pol;
    st = kdc_fe_policy_begin(c, l, n->n_in, in, n->n_kw, kw, &pol);
    if (!st) st = l->cls->lower(c, l, n, in, kw, out);
    kdc_status pst = kdc_fe_policy_end(c, l, &pol, n->n_out, out);
    if (!st) st = pst;
    else kdc_status_free(pst);
    if (!st) st = kdc_fe_compute_masks(c, l, n, in, c->in_mask, out, om);
    kdc_status be = kdc_ir_take_error(c->f);
    if (be && !st)
      st = kdc_status_annotate(be, "%s: %s (%s \"%s\")", kdc_fe_file(m), l->loc, l->class_name,
                               l->name);
    else
      kdc_status_free(be);
    for (int i = 0; !st && i < n->n_out; i++) {
      if (out[i] == KDC_NO_VALUE)
        st = kdc_fe_layer_err(l, KDC_INTERNAL, "lowering produced no value for output %d", i);
      if (!st) st = kdc_fe_constrain_output(c, l, &out[i]);
      vals[n->tensor_base + i] = out[i];
      masks[n->tensor_base + i] = om[i];
    }
  }
  for (int i = 0; !st && i < m->n_outputs; i++) {
    kdc_keras_ref r = m->outputs[i];
    int t = m->layers[r.layer].nodes[r.node].tensor_base + r.tensor;
    outputs[i] = vals[t];
    if (out_masks) out_masks[i] = masks[t];
  }
  c->in_mask = saved_in;
  c->out_mask = saved_out;
  c->mask_taken = saved_taken;
  free(vals);
  free(masks);
  return st;
}

static kdc_type var_type(const kdc_keras_var *v) {
  return kdc_type_make(v->dtype, v->shape.rank, v->shape.dims);
}

/* Lowers |m| into a new function |name| of |mod|; |training|: the
 * train_forward variant (weights already registered by predict's lowering,
 * plus the "iteration" STATE parameter after them). */
static kdc_status lower_func(const kdc_keras_model *m, kdc_module *mod,
                             const kdc_lower_options *opt, int64_t batch, const char *fname,
                             bool training) {
  kdc_lower_ctx c = {m, mod, kdc_ir_func_create(mod, fname), batch, NULL,
                     opt ? opt->mesh : NULL, opt ? opt->layout : NULL, training, KDC_NO_VALUE,
                     opt ? opt->dropout_seed : 0, KDC_NO_VALUE, NULL, NULL, NULL, false, NULL, 0};
  c.warnings = opt ? opt->warnings : NULL;
  c.weight = kdc_xcalloc((size_t)m->n_vars + 1, sizeof(kdc_value_id));
  if (training) {
    c.assigned = kdc_xcalloc((size_t)m->n_vars + 1, sizeof(kdc_value_id));
    for (int i = 0; i < m->n_vars; i++) c.assigned[i] = KDC_NO_VALUE;
  }
  kdc_value_id *ins = kdc_xcalloc((size_t)m->n_inputs + 1, sizeof(kdc_value_id));
  kdc_value_id *outs = kdc_xcalloc((size_t)m->n_outputs + 1, sizeof(kdc_value_id));
  kdc_status st = NULL;
  for (int i = 0; i < m->n_inputs && !st; i++) {
    const kdc_keras_layer *l = &m->layers[m->inputs[i].layer];
    kdc_kshape s = l->nodes[0].out[0];
    char b[160];
    for (int d = 0; d < s.rank && !st; d++) {
      if (s.dims[d] >= 0) continue;
      if (d == 0) s.dims[0] = batch;
      else
        st = kdc_fe_layer_err(l, KDC_UNSUPPORTED, "dimension %d of the input shape %s is unknown "
                              "(None); kdc compiles static shapes: give it with kdc compile --input-shape %s=D1,D2,...", d, kdc_kshape_str(&s, b, sizeof b), l->name);
    }
    kdc_dtype dt = KDC_DTYPE_F32;
    if (!st && l->config) st = dtype_of(l, &dt);
    if (st) break;
    kdc_type t = kdc_type_make(dt, s.rank, s.dims);
    kdc_ir_set_origin(c.f, origin(l));
    ins[i] = kdc_ir_parameter(c.f, KDC_PARAM_INPUT, l->name, &t);
    kdc_status be = kdc_ir_take_error(c.f); /* a batch too large for this shape */
    if (be) {
      st = kdc_fe_layer_err(l, kdc_status_code(be), "input \"%s\" at batch %lld: %s", l->name, (long long)batch,
                            kdc_status_message(be));
      kdc_status_free(be);
      break;
    }
    st = kdc_fe_shard_input(&c, l, ins[i]);
  }
  for (int i = 0; i < m->n_vars && !st; i++) {
    const kdc_keras_var *v = m->vars[i];
    kdc_type t = var_type(v);
    if (!training) {
      kdc_weight *w = kdc_ir_module_add_weight(mod, v->path, &t, NULL);
      w->trainable = v->trainable;
    }
    kdc_ir_set_origin(c.f, origin(v->layer));
    c.weight[i] = kdc_ir_parameter(c.f, KDC_PARAM_WEIGHT, v->path, &t);
    st = kdc_fe_shard_weight(&c, v, c.weight[i]);
    if (!st) st = kdc_fe_rnn_gate_weight(&c, v, c.weight[i]);
  }
  if (!st && training) {
    kdc_type it = kdc_type_make(KDC_DTYPE_I32, 0, NULL);
    kdc_ir_set_origin(c.f, NULL);
    c.iteration = kdc_ir_parameter(c.f, KDC_PARAM_STATE, "iteration", &it);
  }
  if (!st && (st = kdc_ir_take_error(c.f)))
    st = kdc_status_annotate(st, "%s", kdc_fe_file(m));
  kdc_value_id *omask = kdc_xcalloc((size_t)m->n_outputs + 1, sizeof(kdc_value_id));
  if (!st) st = kdc_fe_lower_graph_masked(&c, m, ins, NULL, outs, omask);
  for (int i = 0; i < m->n_outputs && !st; i++) {
    const char *name = m->layers[m->outputs[i].layer].name;
    for (int j = 0; j < i; j++)
      if (!strcmp(c.f->result_names[j], name))
        name = kdc_arena_printf(mod->arena, "%s_%d", name, i);
    /* a bf16/f16 output (a mixed-precision last layer) is widened: plan
     * outputs and the loss are f32 (frontend/policy.c) */
    if (outs[i] < c.f->n_nodes && kdc_dtype_is_half(c.f->nodes[outs[i]].type.dtype))
      outs[i] = kdc_ir_convert(c.f, outs[i], KDC_DTYPE_F32);
    kdc_ir_add_result(c.f, outs[i], name);
  }
  /* training: each output's Keras mask (f32), for the loss (docs/training.md) */
  for (int i = 0; i < m->n_outputs && !st && opt && opt->output_masks; i++) {
    if (omask[i] == KDC_NO_VALUE) continue;
    kdc_ir_set_origin(c.f, origin(&m->layers[m->outputs[i].layer]));
    kdc_value_id mf = kdc_ir_convert(c.f, kdc_fe_mask_bool(c.f, omask[i]), KDC_DTYPE_F32);
    kdc_ir_add_result(c.f, mf, kdc_arena_printf(mod->arena, "%s" KDC_MASK_RESULT_SUFFIX,
                                                c.f->result_names[i]));
    if ((st = kdc_ir_take_error(c.f))) st = kdc_status_annotate(st, "%s", kdc_fe_file(m));
  }
  free(omask);
  for (int i = 0; i < m->n_vars && !st && c.assigned; i++)
    if (c.assigned[i] != KDC_NO_VALUE) kdc_ir_add_result(c.f, c.assigned[i], m->vars[i]->path);
  free(c.assigned);
  free(c.weight);
  free(ins);
  free(outs);
  return st;
}

kdc_status kdc_frontend_lower(const kdc_keras_model *m, const kdc_lower_options *opt,
                              kdc_module **out) {
  *out = NULL;
  int64_t batch = opt ? opt->batch : 1;
  if (batch < 1) return KDC_ERR(KDC_INVALID_INPUT, "batch size must be >= 1, got %lld", (long long)batch);
  bool train = opt && opt->train_forward;
  kdc_module *mod = kdc_ir_module_create(m->name);
  if (opt && opt->mesh) mod->mesh = *opt->mesh;
  kdc_status st = lower_func(m, mod, opt, batch, "predict", false);
  if (!st && train) st = lower_func(m, mod, opt, batch, "train_forward", true);
  if (st) {
    kdc_ir_module_destroy(mod);
    return st;
  }
  *out = mod;
  return NULL;
}
