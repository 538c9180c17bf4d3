/*
 * frontend/policy.c: Keras dtype policies at layer boundaries (docs/
 * frontend.md, "Dtype policies").
 *
 * A layer's policy (its config `dtype`: a name or a DTypePolicy object;
 * Keras writes the global policy into every layer) gives its compute dtype:
 * mixed_bfloat16 and bfloat16 compute in bf16, mixed_float16 and float16 in
 * f16, everything else in f32.  For a layer computing in bf16/f16 (H):
 *   - its floating inputs are autocast to H (rounded), as Keras' Layer
 *     __call__ does (LayerNormalization sets autocast = False: its inputs
 *     are taken as they come);
 *   - the variables it reads are rounded to H (Keras' AutocastScope casts
 *     them), except for the layers that compute in float32 by themselves
 *     (below);
 *   - every dot_general and convolution it builds takes H operands and
 *     computes in H with f32 accumulation (kdc_func.lowp, ir/builder.c);
 *     the elementwise math between them stays f32 and is rounded to H at
 *     the layer's output (Keras rounds after every op: the differences are
 *     an ulp or two of H);
 *   - its floating outputs are H values.
 * The normalisation layers (LayerNormalization, BatchNormalization,
 * GroupNormalization, UnitNormalization, RMSNormalization) and Softmax
 * compute their statistics in float32 in Keras: here they compute entirely
 * in f32 from their (autocast) inputs and f32 variables, and round only
 * their output.  A layer computing in f32 converts H inputs to f32 (the
 * widening is exact): the model's last layer with dtype="float32" gives
 * f32 outputs, as in Keras.  Losses are f32: every function result is
 * widened to f32 (frontend/lower.c), so plan inputs and outputs stay f32
 * .npy files.
 *
 * "bfloat16"/"float16" (not mixed) store variables in H in Keras; kdc keeps
 * them f32 and rounds them where the layer reads them, and says so in a
 * warning.  "float64" computes in f32, with a warning.
 */
#include <stdlib.h>
#include <string.h>

#include "frontend/frontend.h"

static bool f32_internal(const char *cls) {
  static const char *const names[] = {"LayerNormalization", "BatchNormalization",
                                      "GroupNormalization", "UnitNormalization",
                                      "RMSNormalization", "Softmax"};
  for (size_t i = 0; i < sizeof names / sizeof *names; i++)
    if (!strcmp(cls, names[i])) return true;
  return false;
}

static void warn_once(kdc_lower_ctx *c, const kdc_keras_layer *l, unsigned bit, const char *name,
                      const char *what) {
  if (!c->warnings || c->training || (c->policy_warned & bit)) return;
  c->policy_warned |= bit;
  fprintf(c->warnings, "kdc: warning: %s: %s (%s \"%s\"): dtype policy \"%s\": %s\n",
          kdc_fe_file(l->model), l->loc, l->class_name, l->name, name, what);
}

/* Floating |v|: rounded to |h| (when |autocast|), then widened to f32 for
 * the lowering, which computes in f32. */
static void autocast_all(kdc_func *f, kdc_dtype h, bool autocast, int n, kdc_value_id *v) {
  for (int i = 0; i < n; i++) {
    if (v[i] == KDC_NO_VALUE || v[i] >= f->n_nodes) continue;
    kdc_dtype d = f->nodes[v[i]].type.dtype;
    if (!kdc_dtype_is_float(d)) continue;
    if (kdc_dtype_is_half(h) && autocast && d == KDC_DTYPE_F32) v[i] = kdc_ir_convert(f, v[i], h);
    if (f->nodes[v[i]].type.dtype != KDC_DTYPE_F32) v[i] = kdc_ir_convert(f, v[i], KDC_DTYPE_F32);
  }
}

kdc_status kdc_fe_policy_begin(kdc_lower_ctx *c, const kdc_keras_layer *l, int n_in,
                               kdc_value_id *in, int n_kw, kdc_value_id *kw, kdc_fe_policy *p) {
  memset(p, 0, sizeof *p);
  p->compute = KDC_DTYPE_F32;
  if (l->sub) return NULL; /* a nested model: its layers carry their own policies */
  if (kdc_fe_is_op_class(l->cls)) { /* a keras.ops node has no policy (a Cast's config
                                     * `dtype` is its target): f32 on widened inputs */
    autocast_all(c->f, KDC_DTYPE_F32, false, n_in, in);
    autocast_all(c->f, KDC_DTYPE_F32, false, n_kw, kw);
    return kdc_ir_take_error(c->f);
  }
  const char *name = l->config ? kdc_fe_dtype_name(kdc_fe_get(l->config, "dtype"), NULL) : NULL;
  if (name) {
    bool pure = !strcmp(name, "bfloat16") || !strcmp(name, "float16");
    if (!strcmp(name, "mixed_bfloat16") || !strcmp(name, "bfloat16")) p->compute = KDC_DTYPE_BF16;
    if (!strcmp(name, "mixed_float16") || !strcmp(name, "float16")) p->compute = KDC_DTYPE_F16;
    if (pure)
      warn_once(c, l, 1, name, "variables stay float32 in kdc and are rounded where the layer "
                "reads them (Keras stores them in the reduced type)");
    if (!strcmp(name, "float64")) warn_once(c, l, 2, name, "computed in float32 by kdc");
  }
  kdc_func *f = c->f;
  kdc_dtype h = p->compute;
  bool internal = f32_internal(l->class_name);
  bool autocast = strcmp(l->class_name, "LayerNormalization") != 0;
  autocast_all(f, h, autocast, n_in, in);
  autocast_all(f, h, autocast, n_kw, kw); /* Keras casts floating kwargs (value=, key=) too */
  if (!kdc_dtype_is_half(h) || internal) return kdc_ir_take_error(f);
  /* the variables the layer reads, rounded to h for its lowering */
  p->n_saved = l->n_vars;
  p->saved = kdc_xcalloc((size_t)l->n_vars + 1, sizeof *p->saved);
  for (int i = 0; i < l->n_vars; i++) {
    int g = l->vars[i]->gid;
    p->saved[i] = c->weight[g];
    c->weight[g] = kdc_ir_round_to(f, c->weight[g], h);
  }
  f->lowp = h;
  return kdc_ir_take_error(f);
}

kdc_status kdc_fe_policy_end(kdc_lower_ctx *c, const kdc_keras_layer *l, kdc_fe_policy *p,
                             int n_out, kdc_value_id *out) {
  kdc_func *f = c->f;
  f->lowp = KDC_DTYPE_F32;
  for (int i = 0; i < p->n_saved; i++) c->weight[l->vars[i]->gid] = p->saved[i];
  free(p->saved);
  p->saved = NULL;
  p->n_saved = 0;
  if (!kdc_dtype_is_half(p->compute)) return NULL;
  for (int i = 0; i < n_out; i++)
    if (out[i] != KDC_NO_VALUE && out[i] < f->n_nodes &&
        f->nodes[out[i]].type.dtype == KDC_DTYPE_F32)
      out[i] = kdc_ir_convert(f, out[i], p->compute);
  return kdc_ir_take_error(f);
}
