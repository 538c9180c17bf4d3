/*
 * frontend/layers_shape.c: shape inference of the reshaping, merging and
 * normalisation layers without variables of their own: UpSampling1D/2D/3D,
 * RepeatVector, Dot, UnitNormalization and ThresholdedReLU.
 *
 * Rules follow compute_output_shape in keras/src/layers/reshaping/
 * (up_sampling*.py, repeat_vector.py), keras/src/layers/merging/dot.py
 * and keras/src/layers/normalization/unit_normalization.py.
 * Cropping shares ZeroPadding's rule (layers_conv.c), EinsumDense has its
 * own (einsum.c).
 */
#include <json-c/json.h>
#include <string.h>

#include "frontend/frontend.h"

static kdc_status one_input(kdc_infer_args *a) {
  if (a->node->n_in == 1) return NULL;
  return kdc_fe_layer_err(a->l, KDC_INVALID_INPUT, "expected 1 input tensor, got %d",
                          a->node->n_in);
}

kdc_status kdc_fe_upsampling_config(const kdc_keras_layer *l, int *n, int64_t *size, bool *last,
                                    bool *bilinear) {
  const char *cls = l->class_name;
  *n = cls[strlen(cls) - 2] - '0';
  const char *df, *interp;
  KDC_RETURN_IF_ERROR(kdc_fe_cfg_str(l, "data_format", "channels_last", &df));
  if (strcmp(df, "channels_last") && strcmp(df, "channels_first"))
    return kdc_fe_layer_err(l, KDC_INVALID_INPUT, "config.data_format: expected \"channels_last\" "
                            "or \"channels_first\", got \"%s\"", df);
  *last = !strcmp(df, "channels_last");
  KDC_RETURN_IF_ERROR(kdc_fe_cfg_tuple(l, "size", *n, 2, size));
  for (int i = 0; i < *n; i++)
    if (size[i] <= 0)
      return kdc_fe_layer_err(l, KDC_INVALID_INPUT, "config.size: expected positive integers");
  KDC_RETURN_IF_ERROR(kdc_fe_cfg_str(l, "interpolation", "nearest", &interp));
  *bilinear = !strcmp(interp, "bilinear");
  if (strcmp(interp, "nearest") && !*bilinear)
    return kdc_fe_layer_err(l, KDC_UNSUPPORTED, "config.interpolation \"%s\" is not supported "
                            "(nearest and bilinear are)", interp);
  return NULL;
}

kdc_status kdc_fe_infer_upsampling(kdc_infer_args *a) {
  KDC_RETURN_IF_ERROR(one_input(a));
  int n;
  int64_t size[3];
  bool last, bilinear;
  KDC_RETURN_IF_ERROR(kdc_fe_upsampling_config(a->l, &n, size, &last, &bilinear));
  const kdc_kshape *x = &a->in[0];
  if (x->rank != n + 2)
    return kdc_fe_shape_err(a, kdc_arena_printf(a->m->arena, "%s expects an input of rank %d",
                                                a->l->class_name, n + 2), x, NULL);
  if (bilinear && n != 2)
    return kdc_fe_layer_err(a->l, KDC_UNSUPPORTED, "config.interpolation \"bilinear\" needs "
                            "UpSampling2D");
  kdc_kshape o = *x;
  for (int i = 0; i < n; i++) {
    int d = (last ? 1 : 2) + i;
    if (o.dims[d] >= 0) o.dims[d] *= size[i];
  }
  kdc_fe_set_outputs(a, 1, &o);
  return NULL;
}

kdc_status kdc_fe_infer_repeat_vector(kdc_infer_args *a) {
  KDC_RETURN_IF_ERROR(one_input(a));
  int64_t n;
  KDC_RETURN_IF_ERROR(kdc_fe_cfg_int(a->l, "n", INT64_MIN, &n));
  if (n <= 0) return kdc_fe_layer_err(a->l, KDC_INVALID_INPUT, "config.n must be positive");
  const kdc_kshape *x = &a->in[0];
  if (x->rank != 2) return kdc_fe_shape_err(a, "RepeatVector expects an input of rank 2", x, NULL);
  kdc_kshape o = kdc_kshape_make(3, (int64_t[]){x->dims[0], n, x->dims[1]});
  kdc_fe_set_outputs(a, 1, &o);
  return NULL;
}

kdc_status kdc_fe_dot_axes(const kdc_keras_layer *l, int rank0, int rank1, int64_t *ax) {
  json_object *o = kdc_fe_get(l->config, "axes");
  if (json_object_is_type(o, json_type_int)) {
    ax[0] = ax[1] = json_object_get_int64(o);
  } else if (json_object_is_type(o, json_type_array) && json_object_array_length(o) == 2 &&
             json_object_is_type(json_object_array_get_idx(o, 0), json_type_int) &&
             json_object_is_type(json_object_array_get_idx(o, 1), json_type_int)) {
    ax[0] = json_object_get_int64(json_object_array_get_idx(o, 0));
    ax[1] = json_object_get_int64(json_object_array_get_idx(o, 1));
  } else {
    return kdc_fe_layer_err(l, KDC_INVALID_INPUT, "config.axes: expected an integer or a list of "
                            "two integers");
  }
  /* Python's axis % ndim for negative axes */
  if (ax[0] < 0) ax[0] = ((ax[0] % rank0) + rank0) % rank0;
  if (ax[1] < 0) ax[1] = ((ax[1] % rank1) + rank1) % rank1;
  if (ax[0] == 0 || ax[1] == 0 || ax[0] >= rank0 || ax[1] >= rank1)
    return kdc_fe_layer_err(l, KDC_INVALID_INPUT, "config.axes: (%lld, %lld) must name non-batch "
                            "axes of inputs of rank %d and %d", (long long)ax[0], (long long)ax[1],
                            rank0, rank1);
  return NULL;
}

kdc_status kdc_fe_infer_dot(kdc_infer_args *a) {
  if (a->node->n_in != 2)
    return kdc_fe_layer_err(a->l, KDC_INVALID_INPUT, "a Dot layer takes 2 inputs, got %d",
                            a->node->n_in);
  const kdc_kshape *x = &a->in[0], *y = &a->in[1];
  bool normalize;
  KDC_RETURN_IF_ERROR(kdc_fe_cfg_bool(a->l, "normalize", false, &normalize));
  if (x->rank < 2 || y->rank < 2) return kdc_fe_shape_err(a, "Dot needs inputs of rank >= 2", x, y);
  int64_t ax[2];
  KDC_RETURN_IF_ERROR(kdc_fe_dot_axes(a->l, x->rank, y->rank, ax));
  if (x->dims[ax[0]] >= 0 && y->dims[ax[1]] >= 0 && x->dims[ax[0]] != y->dims[ax[1]])
    return kdc_fe_shape_err(a, kdc_arena_printf(a->m->arena, "incompatible sizes on axes (%lld, "
                            "%lld)", (long long)ax[0], (long long)ax[1]), x, y);
  kdc_kshape o = {0};
  for (int i = 0; i < x->rank; i++)
    if (i != ax[0]) o.dims[o.rank++] = x->dims[i];
  for (int i = 1; i < y->rank; i++)
    if (i != ax[1]) {
      if (o.rank >= KDC_MAX_RANK) return kdc_fe_layer_err(a->l, KDC_UNSUPPORTED, "rank too large");
      o.dims[o.rank++] = y->dims[i];
    }
  if (o.rank == 1) o.dims[o.rank++] = 1;
  kdc_fe_set_outputs(a, 1, &o);
  return NULL;
}

/* UnitNormalization, ThresholdedReLU: the input shape, after checking the
 * config. */
kdc_status kdc_fe_infer_elementwise(kdc_infer_args *a) {
  KDC_RETURN_IF_ERROR(one_input(a));
  const kdc_keras_layer *l = a->l;
  const kdc_kshape *x = &a->in[0];
  if (!strcmp(l->class_name, "UnitNormalization")) {
    int n;
    int64_t axes[KDC_MAX_RANK];
    KDC_RETURN_IF_ERROR(kdc_fe_cfg_axes(l, "axis", -1, &n, axes));
    for (int i = 0; i < n; i++)
      if (axes[i] < -x->rank || axes[i] >= x->rank)
        return kdc_fe_shape_err(a, kdc_arena_printf(a->m->arena, "config.axis %lld is out of range",
                                                    (long long)axes[i]), x, NULL);
  } else {
    double theta;
    KDC_RETURN_IF_ERROR(kdc_fe_cfg_double(l, "theta", 1.0, &theta));
  }
  kdc_fe_set_outputs(a, 1, x);
  return NULL;
}
