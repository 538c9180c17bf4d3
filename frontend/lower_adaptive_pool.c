/*
 * frontend/lower_adaptive_pool.c: AdaptiveAveragePooling1D/2D/3D and
 * AdaptiveMaxPooling1D/2D/3D (Keras 3.16 keras/src/layers/pooling/
 * base_adaptive_pooling.py, keras/src/backend/jax/nn.py adaptive_*_pool):
 * shape inference and lowering.
 *
 * Output i of a spatial axis of size L pooled to O covers the input window
 * [floor(i L / O), ceil((i + 1) L / O)) -- the windows jax's "two-pool
 * gather" picks (a small and a big window size, by start index).  Windows
 * are rectangular, so the pooling is done one spatial axis after the
 * other: average as a dot_general with a constant (O x L) matrix holding
 * 1 / window size, max as a max-reduce of each window's slice,
 * concatenated.  `output_size` is an int or one int per spatial dim;
 * `data_format` channels_last (default) or channels_first.
 */
#include <json-c/json.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/frontend.h"

static kdc_status read_cfg(const kdc_keras_layer *l, int *n, int64_t *size, bool *last) {
  const char *cls = l->class_name, *df;
  *n = cls[strlen(cls) - 2] - '0';
  KDC_RETURN_IF_ERROR(kdc_fe_cfg_tuple(l, "output_size", *n, -1, size));
  for (int i = 0; i < *n; i++)
    if (size[i] < 1)
      return kdc_fe_layer_err(l, KDC_INVALID_INPUT, "config.output_size: expected positive "
                              "integers");
  KDC_RETURN_IF_ERROR(kdc_fe_cfg_str(l, "data_format", "channels_last", &df));
  if (strcmp(df, "channels_last") && strcmp(df, "channels_first"))
    return kdc_fe_layer_err(l, KDC_INVALID_INPUT, "config.data_format: expected \"channels_last\" "
                            "or \"channels_first\", got \"%s\"", df);
  *last = !strcmp(df, "channels_last");
  return NULL;
}

kdc_status kdc_fe_infer_adaptive_pool(kdc_infer_args *a) {
  int n = 1;
  int64_t size[3];
  bool last = true;
  KDC_RETURN_IF_ERROR(read_cfg(a->l, &n, size, &last));
  const kdc_kshape *x = &a->in[0];
  if (a->node->n_in != 1 || x->rank != n + 2)
    return kdc_fe_shape_err(a, kdc_arena_printf(a->m->arena, "%s expects one input of rank %d",
                                                a->l->class_name, n + 2), x, NULL);
  kdc_kshape o = *x;
  for (int i = 0; i < n; i++) {
    if (x->dims[(last ? 1 : 2) + i] < 1)
      return kdc_fe_shape_err(a, "the spatial dims must be known", x, NULL);
    o.dims[(last ? 1 : 2) + i] = size[i];
  }
  kdc_fe_set_outputs(a, 1, &o);
  return NULL;
}

/* Adaptive pooling of axis |d| of |x| to |on| outputs. */
static kdc_value_id pool_axis(kdc_func *f, kdc_value_id x, int d, int64_t on, bool avg) {
  if (x == KDC_NO_VALUE) return x;
  const kdc_type t = *kdc_ir_type(f, x);
  int64_t in = t.dims[d];
  if (avg) {
    float *w = calloc((size_t)(on * in), sizeof *w);
    for (int64_t i = 0; i < on; i++) {
      int64_t s = i * in / on, e = ((i + 1) * in + on - 1) / on;
      for (int64_t j = s; j < e; j++) w[i * in + j] = (float)(1.0 / (double)(e - s));
    }
    kdc_value_id y = kdc_fe_axis_matrix(f, x, d, on, w);
    free(w);
    return y;
  }
  kdc_value_id *parts = kdc_xcalloc((size_t)on, sizeof *parts);
  int64_t start[KDC_MAX_RANK] = {0}, limit[KDC_MAX_RANK], stride[KDC_MAX_RANK];
  kdc_type o = t;
  o.dims[d] = 1;
  for (int i = 0; i < t.rank; i++) limit[i] = t.dims[i], stride[i] = 1;
  int64_t ax = d;
  for (int64_t i = 0; i < on; i++) {
    start[d] = i * in / on, limit[d] = ((i + 1) * in + on - 1) / on;
    kdc_value_id m = kdc_ir_reduce(f, KDC_RED_MAX, kdc_ir_slice(f, x, start, limit, stride), 1, &ax);
    parts[i] = kdc_ir_reshape(f, m, o.rank, o.dims);
  }
  kdc_value_id y = on == 1 ? parts[0] : kdc_ir_concat(f, (int)on, parts, d);
  free(parts);
  return y;
}

kdc_status kdc_fe_lower_adaptive_pool(struct kdc_lower_ctx *c, const kdc_keras_layer *l,
                                      const kdc_keras_node *n, const kdc_value_id *in,
                                      const kdc_value_id *kw, kdc_value_id *out) {
  (void)n, (void)kw;
  int k = 1;
  int64_t size[3];
  bool last = true;
  KDC_RETURN_IF_ERROR(read_cfg(l, &k, size, &last));
  bool avg = strstr(l->class_name, "Average") != NULL;
  kdc_value_id x = in[0];
  for (int i = 0; i < k; i++) x = pool_axis(c->f, x, (last ? 1 : 2) + i, size[i], avg);
  out[0] = x;
  return NULL;
}
