/*
 * frontend/lower_time_distributed.c: the TimeDistributed wrapper (Keras 3
 * keras/src/layers/rnn/time_distributed.py) and the SpectralNormalization
 * wrapper (normalization/spectral_normalization.py): shape and variable
 * inference, and lowering.
 *
 * Keras applies the wrapped layer to every slice x[:, t] (a Python loop over
 * a static time dim, then ops.stack) with one set of weights.  For every
 * layer whose inference result for one sample does not depend on the other
 * samples of the batch -- all of them at inference -- this equals folding
 * time into the batch: x [B, T, ...] -> reshape [B*T, ...] -> the wrapped
 * layer -> reshape [B, T, ...out].  kdc lowers it that way: one call of the
 * inner rule, whose batch-major layout keeps a batch split (the reshape's
 * sharding rule carries B's factor into B*T), and whose gradient is the
 * inner layer's.
 *
 * The inner layer (kdc_keras_layer.inner[0]) comes from config.layer
 * ({class_name, config}, Keras 3 and tf.keras 2 forms); its name scope is
 * the wrapper's, so its variables are "time_distributed/dense/kernel"
 * (Keras' Wrapper.build builds the inner layer inside the wrapper's name
 * scope).  tf.keras 2 / TF.js files name them "time_distributed/kernel"
 * (weights.c).  A Keras mask (the input's, or the call's `mask` tensor) of
 * at least (batch, time) dims is folded like x, m [B, T, ...] -> [B*T, ...],
 * and given to the wrapped layer as its input mask: Keras passes mask[:, t]
 * to every step's call when that call takes a mask, and a wrapped layer
 * whose call uses masks (mask.c's consumers) must apply it; the wrapper's
 * output has no mask (supports_masking is false).  Refused with located
 * errors: several input tensors, a rank < 3 input, inner layers with
 * several outputs, nested models, and -- in a training step --
 * BatchNormalization inside (Keras takes batch statistics per time step;
 * the folded batch would mix them).
 */
#include <json-c/json.h>
#include <string.h>

#include "frontend/frontend.h"

/* SpectralNormalization: at inference (call with training false) the
 * wrapped layer as it is; its weights are the wrapped layer's, then the
 * wrapper's non-trainable "vector_u" (1, kernel.shape[-1]) of the power
 * iteration, which only training uses (it rewrites the kernel, so training
 * is refused).  The wrapped layer needs a "kernel" or "embeddings". */

static bool is_model(const char *c) {
  return !strcmp(c, "Functional") || !strcmp(c, "Sequential") || !strcmp(c, "Model");
}

/* Builds the wrapped layer from config.layer (once per wrapper). */
static kdc_status make_inner(kdc_infer_args *a, kdc_keras_layer **out) {
  kdc_keras_layer *l = a->l;
  kdc_arena *ar = a->m->arena;
  json_object *spec = kdc_fe_get(l->config, "layer");
  json_object *cls = kdc_fe_get(spec, "class_name"), *cfg = kdc_fe_get(spec, "config");
  if (!cls || !json_object_is_type(cls, json_type_string) ||
      !json_object_is_type(cfg, json_type_object))
    return kdc_fe_layer_err(l, KDC_INVALID_INPUT, "config.layer: expected the wrapped layer as "
                            "{\"class_name\": ..., \"config\": {...}}");
  const char *cname = json_object_get_string(cls);
  const kdc_layer_class *k = kdc_fe_find_class(cname);
  if (!k)
    return kdc_fe_layer_err(l, KDC_INVALID_INPUT, "config.layer.class_name: unknown layer "
                            "class \"%s\"", cname);
  if (is_model(cname) || !strcmp(cname, "InputLayer"))
    return kdc_fe_layer_err(l, KDC_UNSUPPORTED, "config.layer.class_name \"%s\": "
                            "TimeDistributed around a %s is not supported", cname,
                            is_model(cname) ? "nested model" : "InputLayer");
  if (!k->infer || !k->lower)
    return kdc_fe_layer_err(l, KDC_UNSUPPORTED, "config.layer.class_name \"%s\": the wrapped "
                            "layer class is not supported by kdc%s%s", cname,
                            k->why ? ": " : "", k->why ? k->why : "");
  json_object *nm = kdc_fe_get(cfg, "name");
  const char *name = nm && json_object_is_type(nm, json_type_string) ? json_object_get_string(nm)
                                                                     : "layer";
  *out = kdc_fe_inner_layer(l, kdc_arena_printf(ar, "%s.config.layer", l->loc), cname, name, cfg);
  return NULL;
}

kdc_status kdc_fe_infer_time_distributed(kdc_infer_args *a) {
  kdc_keras_layer *l = a->l;
  if (a->node->n_in != 1)
    return kdc_fe_layer_err(l, KDC_UNSUPPORTED, "TimeDistributed takes one input tensor, got %d "
                            "(nested inputs are not supported)", a->node->n_in);
  for (int i = 0; i < a->node->n_kw; i++)
    if (strcmp(a->node->kw_names[i], "mask"))
      return kdc_fe_layer_err(l, KDC_UNSUPPORTED, "the call's %s tensor is not supported",
                              a->node->kw_names[i]);
  const kdc_kshape *x = &a->in[0];
  if (x->rank < 3)
    return kdc_fe_shape_err(a, "TimeDistributed needs an input of rank >= 3 (batch, time, ...)",
                            x, NULL);
  if (!l->inner[0]) KDC_RETURN_IF_ERROR(make_inner(a, &l->inner[0]));
  kdc_keras_layer *in = l->inner[0];
  /* the wrapped layer sees (batch * time, ...) */
  kdc_kshape child = *x;
  child.rank = x->rank - 1;
  child.dims[0] = x->dims[0] >= 0 && x->dims[1] >= 0 ? x->dims[0] * x->dims[1] : -1;
  for (int i = 2; i < x->rank; i++) child.dims[i - 1] = x->dims[i];
  kdc_keras_node node = *a->node;
  node.n_out = 0;
  node.out = NULL;
  kdc_infer_args ia = {a->m, in, &node, a->node_index, &child, NULL};
  KDC_RETURN_IF_ERROR(in->cls->infer(&ia));
  if (node.n_out != 1)
    return kdc_fe_layer_err(l, KDC_UNSUPPORTED, "the wrapped %s gives %d outputs; TimeDistributed "
                            "is supported around single-output layers", in->class_name, node.n_out);
  const kdc_kshape *co = &node.out[0];
  if (co->rank < 1 || co->rank + 1 > KDC_MAX_RANK)
    return kdc_fe_shape_err(a, "the wrapped layer's output has no batch dimension", co, NULL);
  l->n_vars = in->n_vars;
  l->vars = in->vars;
  kdc_kshape o = {.rank = co->rank + 1};
  o.dims[0] = x->dims[0];
  o.dims[1] = x->dims[1];
  for (int i = 1; i < co->rank; i++) o.dims[i + 1] = co->dims[i];
  kdc_fe_set_outputs(a, 1, &o);
  return NULL;
}

kdc_status kdc_fe_lower_time_distributed(struct kdc_lower_ctx *c, const kdc_keras_layer *l,
                                         const kdc_keras_node *n, const kdc_value_id *in,
                                         const kdc_value_id *kw, kdc_value_id *out) {
  (void)kw;
  const kdc_keras_layer *inner = l->inner[0];
  if (!inner) return kdc_fe_layer_err(l, KDC_INTERNAL, "TimeDistributed lowered before inference");
  if (c->training && !strcmp(inner->class_name, "BatchNormalization"))
    return kdc_fe_layer_err(l, KDC_UNSUPPORTED, "training TimeDistributed(BatchNormalization) is "
                            "not supported (Keras takes batch statistics per time step)");
  kdc_func *f = c->f;
  if (in[0] == KDC_NO_VALUE) return NULL;
  const kdc_type t = *kdc_ir_type(f, in[0]); /* a copy: nodes are added below */
  int64_t dims[KDC_MAX_RANK];
  dims[0] = t.dims[0] * t.dims[1];
  for (int i = 2; i < t.rank; i++) dims[i - 1] = t.dims[i];
  kdc_value_id x = kdc_ir_reshape(f, in[0], t.rank - 1, dims);
  /* the mask, folded like x, is the wrapped layer's input mask */
  kdc_value_id m = kdc_fe_input_mask(c, 0), im[1] = {KDC_NO_VALUE};
  if (m != KDC_NO_VALUE) {
    const kdc_type mt = *kdc_ir_type(f, m);
    if (mt.rank < 2 || mt.dims[0] != t.dims[0] || mt.dims[1] != t.dims[1])
      return kdc_fe_layer_err(l, KDC_INVALID_INPUT, "the mask's first two dims must be the "
                              "input's (batch %lld, time %lld)", (long long)t.dims[0],
                              (long long)t.dims[1]);
    int64_t md[KDC_MAX_RANK];
    md[0] = mt.dims[0] * mt.dims[1];
    for (int i = 2; i < mt.rank; i++) md[i - 1] = mt.dims[i];
    im[0] = kdc_ir_reshape(f, m, mt.rank - 1, md);
  }
  kdc_keras_node node = *n;
  node.n_in = 1;
  node.n_kw = 0;
  node.n_out = 1;
  kdc_value_id y = KDC_NO_VALUE;
  const kdc_value_id *saved_in = c->in_mask;
  kdc_value_id *saved_out = c->out_mask;
  c->in_mask = m != KDC_NO_VALUE ? im : NULL;
  c->out_mask = NULL; /* the wrapper drops masks */
  c->mask_taken = false;
  kdc_status st = inner->cls->lower(c, inner, &node, &x, NULL, &y);
  bool inner_took = c->mask_taken;
  c->in_mask = saved_in, c->out_mask = saved_out, c->mask_taken = true;
  KDC_RETURN_IF_ERROR(st);
  if (m != KDC_NO_VALUE && !inner_took && kdc_fe_mask_consumer(inner->class_name))
    return kdc_fe_layer_err(l, KDC_UNSUPPORTED, "the wrapped %s is given the Keras mask and kdc "
                            "does not apply masks in it", inner->class_name);
  if (y == KDC_NO_VALUE) return kdc_ir_take_error(f);
  const kdc_type yt = *kdc_ir_type(f, y);
  int64_t od[KDC_MAX_RANK];
  od[0] = t.dims[0];
  od[1] = t.dims[1];
  for (int i = 1; i < yt.rank; i++) od[i + 1] = yt.dims[i];
  out[0] = kdc_ir_reshape(f, y, yt.rank + 1, od);
  return NULL;
}

kdc_status kdc_fe_infer_spectral_norm(kdc_infer_args *a) {
  kdc_keras_layer *l = a->l;
  if (!l->inner[0]) KDC_RETURN_IF_ERROR(make_inner(a, &l->inner[0]));
  kdc_keras_layer *in = l->inner[0];
  kdc_keras_node node = *a->node;
  node.n_out = 0;
  node.out = NULL;
  kdc_infer_args ia = {a->m, in, &node, a->node_index, a->in, a->kw};
  KDC_RETURN_IF_ERROR(in->cls->infer(&ia));
  const kdc_keras_var *k = NULL;
  for (int i = 0; i < in->n_vars && !k; i++)
    if (!strcmp(in->vars[i]->name, "kernel") || !strcmp(in->vars[i]->name, "embeddings"))
      k = in->vars[i];
  if (!k)
    return kdc_fe_layer_err(l, KDC_INVALID_INPUT, "config.layer: the wrapped %s has no kernel "
                            "nor embeddings to normalise", in->class_name);
  kdc_kshape u = {.rank = 2, .dims = {1, k->shape.dims[k->shape.rank - 1]}};
  l->n_vars = in->n_vars;
  l->vars = in->vars;
  KDC_RETURN_IF_ERROR(kdc_fe_add_var(a, "vector_u", &u, false, NULL, "truncated_normal"));
  kdc_fe_set_outputs(a, node.n_out, node.out);
  return NULL;
}

kdc_status kdc_fe_lower_spectral_norm(struct kdc_lower_ctx *c, const kdc_keras_layer *l,
                                      const kdc_keras_node *n, const kdc_value_id *in,
                                      const kdc_value_id *kw, kdc_value_id *out) {
  const kdc_keras_layer *inner = l->inner[0];
  if (!inner) return kdc_fe_layer_err(l, KDC_INTERNAL, "SpectralNormalization lowered before "
                                      "inference");
  if (c->training)
    return kdc_fe_layer_err(l, KDC_UNSUPPORTED, "training SpectralNormalization is not supported "
                            "(its power iteration rewrites the kernel each step)");
  return inner->cls->lower(c, inner, n, in, kw, out);
}
