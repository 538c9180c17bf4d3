/*
 * frontend/layers_core.c: shape and variable inference of the core layers:
 * InputLayer, Dense, Dropout-like identities, activations, Flatten, Reshape,
 * Permute, the merge layers, Concatenate, PReLU and nested models.
 *
 * Rules follow Keras 3's compute_output_shape/build (keras/src/layers/...);
 * where tf.keras 2 differs the Keras 3 rule wins (KERAS.md: Keras 3 is the
 * reference).  Unknown dims are -1 and stay unknown through the arithmetic.
 */
#include <json-c/json.h>
#include <math.h>
#include <string.h>

#include "frontend/frontend.h"

static kdc_status need_inputs(kdc_infer_args *a, int lo, int hi) {
  int n = a->node->n_in;
  if (n >= lo && (hi < 0 || n <= hi)) return NULL;
  if (lo == hi)
    return kdc_fe_layer_err(a->l, KDC_INVALID_INPUT, "expected %d input tensor(s), got %d", lo, n);
  return kdc_fe_layer_err(a->l, KDC_INVALID_INPUT, "expected at least %d input tensor(s), got %d",
                          lo, n);
}

kdc_status kdc_fe_infer_input(kdc_infer_args *a) {
  (void)a; /* the InputLayer's node got its shape when it was parsed */
  return NULL;
}

kdc_status kdc_fe_infer_identity(kdc_infer_args *a) {
  KDC_RETURN_IF_ERROR(need_inputs(a, 1, 1));
  kdc_fe_set_outputs(a, 1, &a->in[0]);
  return NULL;
}

kdc_status kdc_fe_infer_activation(kdc_infer_args *a) {
  KDC_RETURN_IF_ERROR(need_inputs(a, 1, 1));
  const kdc_keras_layer *l = a->l;
  if (!strcmp(l->class_name, "Activation")) {
    const char *act;
    KDC_RETURN_IF_ERROR(kdc_fe_cfg_activation(l, "activation", &act));
  } else if (!strcmp(l->class_name, "Softmax")) {
    int n;
    int64_t axes[KDC_MAX_RANK];
    KDC_RETURN_IF_ERROR(kdc_fe_cfg_axes(l, "axis", -1, &n, axes));
    for (int i = 0; i < n; i++)
      if (axes[i] < -a->in[0].rank || axes[i] >= a->in[0].rank)
        return kdc_fe_shape_err(a, kdc_arena_printf(a->m->arena, "config.axis %lld is out of range",
                                                    (long long)axes[i]), &a->in[0], NULL);
  }
  kdc_fe_set_outputs(a, 1, &a->in[0]);
  return NULL;
}

kdc_status kdc_fe_infer_dense(kdc_infer_args *a) {
  KDC_RETURN_IF_ERROR(need_inputs(a, 1, 1));
  const kdc_keras_layer *l = a->l;
  int64_t units;
  bool bias;
  KDC_RETURN_IF_ERROR(kdc_fe_cfg_int(l, "units", INT64_MIN, &units));
  if (units <= 0)
    return kdc_fe_err(a->m, KDC_INVALID_INPUT, kdc_fe_join(a->m->arena, l->loc, "config.units"),
                      "expected a positive integer, got %lld (Dense \"%s\")", (long long)units,
                      l->name);
  KDC_RETURN_IF_ERROR(kdc_fe_cfg_bool(l, "use_bias", true, &bias));
  const char *act;
  KDC_RETURN_IF_ERROR(kdc_fe_cfg_activation(l, "activation", &act));
  json_object *q = kdc_fe_get(l->config, "quantization_config");
  if (!kdc_fe_is_null(q) || !kdc_fe_is_null(kdc_fe_get(l->config, "lora_rank")))
    return kdc_fe_layer_err(l, KDC_UNSUPPORTED, "quantized or LoRA Dense layers are not supported");
  kdc_kshape x = a->in[0];
  if (x.rank < 1) return kdc_fe_shape_err(a, "Dense needs an input of rank >= 1", &x, NULL);
  int64_t in = x.dims[x.rank - 1];
  if (in < 0) return kdc_fe_shape_err(a, "Dense needs a known last input dimension", &x, NULL);
  kdc_kshape k = kdc_kshape_make(2, (int64_t[]){in, units});
  KDC_RETURN_IF_ERROR(kdc_fe_add_var(a, "kernel", &k, true, "kernel_initializer", "glorot_uniform"));
  if (bias) {
    kdc_kshape b = kdc_kshape_make(1, &units);
    KDC_RETURN_IF_ERROR(kdc_fe_add_var(a, "bias", &b, true, "bias_initializer", "zeros"));
  }
  x.dims[x.rank - 1] = units;
  kdc_fe_set_outputs(a, 1, &x);
  return NULL;
}

kdc_status kdc_fe_infer_flatten(kdc_infer_args *a) {
  KDC_RETURN_IF_ERROR(need_inputs(a, 1, 1));
  const kdc_kshape *x = &a->in[0];
  if (x->rank < 1) return kdc_fe_shape_err(a, "Flatten needs a batch dimension", x, NULL);
  int64_t n = 1;
  for (int i = 1; i < x->rank; i++) n = (n < 0 || x->dims[i] < 0) ? -1 : n * x->dims[i];
  kdc_kshape o = kdc_kshape_make(2, (int64_t[]){x->dims[0], n});
  kdc_fe_set_outputs(a, 1, &o);
  return NULL;
}

kdc_status kdc_fe_infer_reshape(kdc_infer_args *a) {
  KDC_RETURN_IF_ERROR(need_inputs(a, 1, 1));
  const kdc_keras_layer *l = a->l;
  const char *at = kdc_fe_join(a->m->arena, l->loc, "config.target_shape");
  kdc_kshape t;
  json_object *ts = kdc_fe_get(l->config, "target_shape");
  if (kdc_fe_is_null(ts))
    return kdc_fe_err(a->m, KDC_INVALID_INPUT, at, "expected the target shape (Reshape \"%s\")",
                      l->name);
  KDC_RETURN_IF_ERROR(kdc_fe_parse_shape(a->m, ts, at, &t));
  if (t.rank + 1 > KDC_MAX_RANK)
    return kdc_fe_err(a->m, KDC_UNSUPPORTED, at, "rank %d exceeds kdc's maximum rank", t.rank + 1);
  const kdc_kshape *x = &a->in[0];
  int64_t n = 1;
  for (int i = 1; i < x->rank; i++) n = (n < 0 || x->dims[i] < 0) ? -1 : n * x->dims[i];
  int wild = -1;
  int64_t known = 1;
  for (int i = 0; i < t.rank; i++) {
    if (t.dims[i] == -1) {
      if (wild >= 0)
        return kdc_fe_err(a->m, KDC_INVALID_INPUT, at,
                          "at most one dimension may be -1 or null (Reshape \"%s\")", l->name);
      wild = i;
    } else {
      known *= t.dims[i];
    }
  }
  char b1[160], b2[160];
  kdc_kshape tb = t;
  if (n >= 0 && wild >= 0) {
    if (known == 0 || n % known)
      return kdc_fe_err(a->m, KDC_INVALID_INPUT, at, "cannot reshape %s (%lld elements) to %s "
                        "(Reshape \"%s\")", kdc_kshape_str(x, b1, sizeof b1), (long long)n,
                        kdc_kshape_str(&tb, b2, sizeof b2), l->name);
    t.dims[wild] = n / known;
  } else if (n >= 0 && known != n) {
    return kdc_fe_err(a->m, KDC_INVALID_INPUT, at, "cannot reshape %s (%lld elements) to %s "
                      "(%lld elements) (Reshape \"%s\")", kdc_kshape_str(x, b1, sizeof b1),
                      (long long)n, kdc_kshape_str(&tb, b2, sizeof b2), (long long)known, l->name);
  }
  kdc_kshape o = {.rank = t.rank + 1};
  o.dims[0] = x->rank ? x->dims[0] : -1;
  memcpy(o.dims + 1, t.dims, sizeof(int64_t) * (size_t)t.rank);
  kdc_fe_set_outputs(a, 1, &o);
  return NULL;
}

kdc_status kdc_fe_infer_permute(kdc_infer_args *a) {
  KDC_RETURN_IF_ERROR(need_inputs(a, 1, 1));
  const kdc_keras_layer *l = a->l;
  const kdc_kshape *x = &a->in[0];
  const char *at = kdc_fe_join(a->m->arena, l->loc, "config.dims");
  int64_t dims[KDC_MAX_RANK];
  int n = 0;
  KDC_RETURN_IF_ERROR(kdc_fe_cfg_axes(l, "dims", 0, &n, dims));
  bool seen[KDC_MAX_RANK + 1] = {0};
  bool ok = n == x->rank - 1;
  for (int i = 0; ok && i < n; i++) {
    ok = dims[i] >= 1 && dims[i] <= n && !seen[dims[i]];
    if (ok) seen[dims[i]] = true;
  }
  if (!ok) {
    char b[160];
    return kdc_fe_err(a->m, KDC_INVALID_INPUT, at, "expected a permutation of 1..%d for input "
                      "%s (Permute \"%s\")", x->rank - 1, kdc_kshape_str(x, b, sizeof b), l->name);
  }
  kdc_kshape o = *x;
  for (int i = 0; i < n; i++) o.dims[i + 1] = x->dims[dims[i]];
  kdc_fe_set_outputs(a, 1, &o);
  return NULL;
}

kdc_status kdc_fe_merge_shapes(kdc_infer_args *a, const kdc_kshape *x, const kdc_kshape *y,
                               kdc_kshape *out) {
  if (x->rank < 1 || y->rank < 1)
    return kdc_fe_shape_err(a, "merge inputs need a batch dimension; shapes", x, y);
  if (x->dims[0] >= 0 && y->dims[0] >= 0 && x->dims[0] != y->dims[0])
    return kdc_fe_shape_err(a, "inputs have different batch sizes", x, y);
  const kdc_kshape *lo = x->rank >= y->rank ? y : x, *hi = x->rank >= y->rank ? x : y;
  *out = *hi;
  out->dims[0] = x->dims[0] >= 0 ? x->dims[0] : y->dims[0];
  int off = hi->rank - lo->rank;
  for (int i = 1; i < lo->rank; i++) {
    int64_t p = hi->dims[i + off], q = lo->dims[i];
    int64_t r;
    if (p < 0 || q < 0)
      r = -1; /* Keras: None if either is None */
    else if (p == 1)
      r = q;
    else if (q == 1)
      r = p;
    else if (p == q)
      r = p;
    else
      return kdc_fe_shape_err(a, "inputs have incompatible shapes", x, y);
    out->dims[i + off] = r;
  }
  return NULL;
}

kdc_status kdc_fe_infer_merge(kdc_infer_args *a) {
  KDC_RETURN_IF_ERROR(need_inputs(a, 1, -1));
  kdc_kshape o = a->in[0];
  for (int i = 1; i < a->node->n_in; i++) {
    kdc_kshape t;
    KDC_RETURN_IF_ERROR(kdc_fe_merge_shapes(a, i == 1 ? &a->in[0] : &o, &a->in[i], &t));
    o = t;
  }
  kdc_fe_set_outputs(a, 1, &o);
  return NULL;
}

kdc_status kdc_fe_infer_subtract(kdc_infer_args *a) {
  KDC_RETURN_IF_ERROR(need_inputs(a, 2, 2));
  return kdc_fe_infer_merge(a);
}

kdc_status kdc_fe_infer_concat(kdc_infer_args *a) {
  KDC_RETURN_IF_ERROR(need_inputs(a, 1, -1));
  int64_t axis;
  KDC_RETURN_IF_ERROR(kdc_fe_cfg_int(a->l, "axis", -1, &axis));
  const kdc_kshape *x = &a->in[0];
  int r = x->rank;
  if (axis < -r || axis >= r)
    return kdc_fe_shape_err(a, kdc_arena_printf(a->m->arena, "config.axis %lld is out of range",
                                                (long long)axis), x, NULL);
  int ax = (int)(axis < 0 ? axis + r : axis);
  kdc_kshape o = *x;
  for (int i = 1; i < a->node->n_in; i++) {
    const kdc_kshape *y = &a->in[i];
    if (y->rank != r)
      return kdc_fe_shape_err(a, "Concatenate inputs must have the same rank", x, y);
    for (int d = 0; d < r; d++) {
      if (d == ax) {
        o.dims[d] = (o.dims[d] < 0 || y->dims[d] < 0) ? -1 : o.dims[d] + y->dims[d];
      } else if (o.dims[d] >= 0 && y->dims[d] >= 0 && o.dims[d] != y->dims[d]) {
        return kdc_fe_shape_err(a, kdc_arena_printf(a->m->arena,
                                "inputs differ outside the concatenation axis %d", ax), x, y);
      } else if (o.dims[d] < 0) {
        o.dims[d] = y->dims[d];
      }
    }
  }
  kdc_fe_set_outputs(a, 1, &o);
  return NULL;
}

kdc_status kdc_fe_infer_prelu(kdc_infer_args *a) {
  KDC_RETURN_IF_ERROR(need_inputs(a, 1, 1));
  const kdc_kshape *x = &a->in[0];
  kdc_kshape s = {.rank = x->rank - 1};
  for (int i = 1; i < x->rank; i++) s.dims[i - 1] = x->dims[i];
  int n = 0;
  int64_t axes[KDC_MAX_RANK];
  if (!kdc_fe_is_null(kdc_fe_get(a->l->config, "shared_axes")))
    KDC_RETURN_IF_ERROR(kdc_fe_cfg_axes(a->l, "shared_axes", 0, &n, axes));
  for (int i = 0; i < n; i++) {
    if (axes[i] < 1 || axes[i] >= x->rank)
      return kdc_fe_shape_err(a, "config.shared_axes is out of range", x, NULL);
    s.dims[axes[i] - 1] = 1;
  }
  KDC_RETURN_IF_ERROR(kdc_fe_add_var(a, "alpha", &s, true, "alpha_initializer", "zeros"));
  kdc_fe_set_outputs(a, 1, x);
  return NULL;
}

/* ConvNeXt's LayerScale (keras/src/applications/convnext.py): one trainable
 * `gamma` of shape (projection_dim,), created by add_weight without a name,
 * so its path is `<layer>/variable`; call: x * gamma (numpy broadcasting
 * over the last axis, which must be projection_dim or 1). */
kdc_status kdc_fe_infer_layer_scale(kdc_infer_args *a) {
  KDC_RETURN_IF_ERROR(need_inputs(a, 1, 1));
  const kdc_kshape *x = &a->in[0];
  int64_t p;
  KDC_RETURN_IF_ERROR(kdc_fe_cfg_int(a->l, "projection_dim", -1, &p));
  if (p < 1) return kdc_fe_layer_err(a->l, KDC_INVALID_INPUT, "config.projection_dim must be >= 1");
  if (x->rank < 2 || (x->dims[x->rank - 1] >= 0 && x->dims[x->rank - 1] != p &&
                      x->dims[x->rank - 1] != 1))
    return kdc_fe_shape_err(a, kdc_arena_printf(a->m->arena, "LayerScale of projection_dim %lld "
                            "does not broadcast with the input", (long long)p), x, NULL);
  kdc_kshape s = {.rank = 1, .dims = {p}};
  KDC_RETURN_IF_ERROR(kdc_fe_add_var(a, "variable", &s, true, NULL, "constant"));
  kdc_kshape o = *x;
  o.dims[o.rank - 1] = p;
  kdc_fe_set_outputs(a, 1, &o);
  return NULL;
}

kdc_status kdc_fe_infer_submodel(kdc_infer_args *a) {
  const kdc_keras_model *sub = a->l->sub;
  if (a->node->n_in != sub->n_inputs)
    return kdc_fe_layer_err(a->l, KDC_INVALID_INPUT, "model \"%s\" takes %d input(s), got %d",
                            sub->name, sub->n_inputs, a->node->n_in);
  for (int i = 0; i < sub->n_inputs; i++) {
    const kdc_keras_ref *r = &sub->inputs[i];
    const kdc_kshape *want = &sub->layers[r->layer].nodes[0].out[0];
    const kdc_kshape *got = &a->in[i];
    bool ok = want->rank == got->rank;
    for (int d = 0; ok && d < want->rank; d++)
      ok = want->dims[d] < 0 || got->dims[d] < 0 || want->dims[d] == got->dims[d];
    if (!ok)
      return kdc_fe_shape_err(a, kdc_arena_printf(a->m->arena,
                              "input %d does not fit the nested model's input", i), want, got);
  }
  kdc_kshape outs[32];
  if (sub->n_outputs > 32)
    return kdc_fe_layer_err(a->l, KDC_UNSUPPORTED, "nested model has %d outputs (max 32)",
                            sub->n_outputs);
  for (int i = 0; i < sub->n_outputs; i++) {
    const kdc_keras_ref *r = &sub->outputs[i];
    outs[i] = sub->layers[r->layer].nodes[r->node].out[r->tensor];
  }
  kdc_fe_set_outputs(a, sub->n_outputs, outs);
  return NULL;
}
