/*
 * frontend/layers.c: the table of Keras layer classes kdc knows.
 *
 * One row per class_name: its shape/variable inference (layers_core.c,
 * layers_conv.c, layers_shape.c, einsum.c) and its lowering (lower_layers.c,
 * lower_norm.c, lower_shape.c, lower_attention.c, lower_rnn.c,
 * lower_bidirectional.c, lower_time_distributed.c, lower_dot_attention.c,
 * lower_image.c, lower_encoding.c; NULL = not lowered, which
 * kdc_frontend_lower reports as a located UNSUPPORTED error).  NO rows are Keras classes kdc recognises and
 * refuses: loading them fails with "not supported" and the row's reason,
 * not "unknown".  docs/frontend.md lists every keras.layers class of Keras
 * 3.16 against this table.  Keras operations (module keras.src.ops.*) have
 * their own table in lower_ops.c.
 * Also the helpers every inference rule uses: outputs, variables, errors.
 */
#include <json-c/json.h>
#include <string.h>

#include "frontend/frontend.h"

#define IN(n, i, l) {n, i, l, NULL}
#define NO(n, why) {n, NULL, NULL, why}
static const kdc_layer_class classes[] = {
    /* the slice lowered now */
    IN("InputLayer", kdc_fe_infer_input, kdc_fe_lower_identity),
    IN("Dense", kdc_fe_infer_dense, kdc_fe_lower_dense),
    IN("Flatten", kdc_fe_infer_flatten, kdc_fe_lower_flatten),
    IN("Dropout", kdc_fe_infer_identity, kdc_fe_lower_dropout),
    IN("SpatialDropout1D", kdc_fe_infer_identity, kdc_fe_lower_dropout),
    IN("SpatialDropout2D", kdc_fe_infer_identity, kdc_fe_lower_dropout),
    IN("SpatialDropout3D", kdc_fe_infer_identity, kdc_fe_lower_dropout),
    IN("GaussianNoise", kdc_fe_infer_identity, kdc_fe_lower_dropout),
    IN("GaussianDropout", kdc_fe_infer_identity, kdc_fe_lower_dropout),
    IN("AlphaDropout", kdc_fe_infer_identity, kdc_fe_lower_dropout),
    IN("ActivityRegularization", kdc_fe_infer_identity, kdc_fe_lower_identity),
    IN("Identity", kdc_fe_infer_identity, kdc_fe_lower_identity),
    IN("Activation", kdc_fe_infer_activation, kdc_fe_lower_activation_layer),
    IN("ReLU", kdc_fe_infer_activation, kdc_fe_lower_activation_layer),
    IN("Softmax", kdc_fe_infer_activation, kdc_fe_lower_activation_layer),
    IN("LeakyReLU", kdc_fe_infer_activation, kdc_fe_lower_activation_layer),
    IN("ELU", kdc_fe_infer_activation, kdc_fe_lower_activation_layer),
    IN("PReLU", kdc_fe_infer_prelu, kdc_fe_lower_prelu),
    /* keras.src.applications.convnext.LayerScale (ConvNeXt's blocks) */
    IN("LayerScale", kdc_fe_infer_layer_scale, kdc_fe_lower_layer_scale),
    IN("ThresholdedReLU", kdc_fe_infer_elementwise, kdc_fe_lower_thresholded_relu),
    IN("Reshape", kdc_fe_infer_reshape, kdc_fe_lower_reshape),
    IN("Permute", kdc_fe_infer_permute, kdc_fe_lower_permute),
    IN("Add", kdc_fe_infer_merge, kdc_fe_lower_merge),
    IN("Subtract", kdc_fe_infer_subtract, kdc_fe_lower_merge),
    IN("Multiply", kdc_fe_infer_merge, kdc_fe_lower_merge),
    IN("Average", kdc_fe_infer_merge, kdc_fe_lower_merge),
    IN("Maximum", kdc_fe_infer_merge, kdc_fe_lower_merge),
    IN("Minimum", kdc_fe_infer_merge, kdc_fe_lower_merge),
    IN("Concatenate", kdc_fe_infer_concat, kdc_fe_lower_concat),
    IN("Dot", kdc_fe_infer_dot, kdc_fe_lower_dot_layer),
    IN("Functional", kdc_fe_infer_submodel, kdc_fe_lower_submodel),
    IN("Model", kdc_fe_infer_submodel, kdc_fe_lower_submodel),
    IN("Sequential", kdc_fe_infer_submodel, kdc_fe_lower_submodel),
    /* normalisation and preprocessing (lower_norm.c) */
    IN("BatchNormalization", kdc_fe_infer_batchnorm, kdc_fe_lower_batchnorm),
    IN("LayerNormalization", kdc_fe_infer_layernorm, kdc_fe_lower_layernorm),
    IN("GroupNormalization", kdc_fe_infer_groupnorm, kdc_fe_lower_groupnorm),
    IN("UnitNormalization", kdc_fe_infer_elementwise, kdc_fe_lower_unitnorm),
    IN("Rescaling", kdc_fe_infer_identity, kdc_fe_lower_rescaling),
    IN("Normalization", kdc_fe_infer_normalization, kdc_fe_lower_normalization),
    /* reshaping and global pooling (lower_shape.c) */
    IN("ZeroPadding1D", kdc_fe_infer_zero_pad, kdc_fe_lower_pad_crop),
    IN("ZeroPadding2D", kdc_fe_infer_zero_pad, kdc_fe_lower_pad_crop),
    IN("ZeroPadding3D", kdc_fe_infer_zero_pad, kdc_fe_lower_pad_crop),
    IN("Cropping1D", kdc_fe_infer_zero_pad, kdc_fe_lower_pad_crop),
    IN("Cropping2D", kdc_fe_infer_zero_pad, kdc_fe_lower_pad_crop),
    IN("Cropping3D", kdc_fe_infer_zero_pad, kdc_fe_lower_pad_crop),
    IN("UpSampling1D", kdc_fe_infer_upsampling, kdc_fe_lower_upsampling),
    IN("UpSampling2D", kdc_fe_infer_upsampling, kdc_fe_lower_upsampling),
    IN("UpSampling3D", kdc_fe_infer_upsampling, kdc_fe_lower_upsampling),
    IN("RepeatVector", kdc_fe_infer_repeat_vector, kdc_fe_lower_repeat_vector),
    IN("GlobalAveragePooling1D", kdc_fe_infer_global_pool, kdc_fe_lower_global_pool),
    IN("GlobalAveragePooling2D", kdc_fe_infer_global_pool, kdc_fe_lower_global_pool),
    IN("GlobalAveragePooling3D", kdc_fe_infer_global_pool, kdc_fe_lower_global_pool),
    IN("GlobalMaxPooling1D", kdc_fe_infer_global_pool, kdc_fe_lower_global_pool),
    IN("GlobalMaxPooling2D", kdc_fe_infer_global_pool, kdc_fe_lower_global_pool),
    IN("GlobalMaxPooling3D", kdc_fe_infer_global_pool, kdc_fe_lower_global_pool),
    IN("GlobalAvgPool1D", kdc_fe_infer_global_pool, kdc_fe_lower_global_pool),
    IN("GlobalAvgPool2D", kdc_fe_infer_global_pool, kdc_fe_lower_global_pool),
    IN("GlobalMaxPool1D", kdc_fe_infer_global_pool, kdc_fe_lower_global_pool),
    IN("GlobalMaxPool2D", kdc_fe_infer_global_pool, kdc_fe_lower_global_pool),
    /* attention (lower_attention.c, einsum.c) */
    IN("EinsumDense", kdc_fe_infer_einsum_dense, kdc_fe_lower_einsum_dense),
    IN("MultiHeadAttention", kdc_fe_infer_mha, kdc_fe_lower_mha),
    /* convolutions, pooling, Embedding (lower_conv.c) */
    IN("Conv1D", kdc_fe_infer_conv, kdc_fe_lower_conv),
    IN("Conv2D", kdc_fe_infer_conv, kdc_fe_lower_conv),
    IN("Conv3D", kdc_fe_infer_conv, kdc_fe_lower_conv),
    IN("DepthwiseConv1D", kdc_fe_infer_conv, kdc_fe_lower_conv),
    IN("DepthwiseConv2D", kdc_fe_infer_conv, kdc_fe_lower_conv),
    IN("SeparableConv1D", kdc_fe_infer_conv, kdc_fe_lower_conv),
    IN("SeparableConv2D", kdc_fe_infer_conv, kdc_fe_lower_conv),
    IN("MaxPooling1D", kdc_fe_infer_pool, kdc_fe_lower_pool),
    IN("MaxPooling2D", kdc_fe_infer_pool, kdc_fe_lower_pool),
    IN("MaxPooling3D", kdc_fe_infer_pool, kdc_fe_lower_pool),
    IN("AveragePooling1D", kdc_fe_infer_pool, kdc_fe_lower_pool),
    IN("AveragePooling2D", kdc_fe_infer_pool, kdc_fe_lower_pool),
    IN("AveragePooling3D", kdc_fe_infer_pool, kdc_fe_lower_pool),
    IN("MaxPool1D", kdc_fe_infer_pool, kdc_fe_lower_pool),
    IN("MaxPool2D", kdc_fe_infer_pool, kdc_fe_lower_pool),
    IN("AvgPool2D", kdc_fe_infer_pool, kdc_fe_lower_pool),
    IN("Embedding", kdc_fe_infer_embedding, kdc_fe_lower_embedding),
    /* recurrent layers: one scan each (lower_rnn.c); Bidirectional (lower_bidirectional.c) */
    IN("LSTM", kdc_fe_infer_rnn, kdc_fe_lower_rnn),
    IN("GRU", kdc_fe_infer_rnn, kdc_fe_lower_rnn),
    IN("SimpleRNN", kdc_fe_infer_rnn, kdc_fe_lower_rnn),
    IN("Bidirectional", kdc_fe_infer_bidirectional, kdc_fe_lower_bidirectional),
    IN("Masking", kdc_fe_infer_identity, kdc_fe_lower_masking), /* mask.c */
    IN("Conv2DTranspose", kdc_fe_infer_conv_transpose, kdc_fe_lower_conv_transpose),
    IN("Conv1DTranspose", kdc_fe_infer_conv_transpose, kdc_fe_lower_conv_transpose),
    IN("Conv3DTranspose", kdc_fe_infer_conv_transpose, kdc_fe_lower_conv_transpose),
    /* Keras' aliases (keras.layers exports them; configs normally carry the
     * canonical name, older writers the alias) */
    IN("Convolution1D", kdc_fe_infer_conv, kdc_fe_lower_conv),
    IN("Convolution2D", kdc_fe_infer_conv, kdc_fe_lower_conv),
    IN("Convolution3D", kdc_fe_infer_conv, kdc_fe_lower_conv),
    IN("SeparableConvolution1D", kdc_fe_infer_conv, kdc_fe_lower_conv),
    IN("SeparableConvolution2D", kdc_fe_infer_conv, kdc_fe_lower_conv),
    IN("Convolution1DTranspose", kdc_fe_infer_conv_transpose, kdc_fe_lower_conv_transpose),
    IN("Convolution2DTranspose", kdc_fe_infer_conv_transpose, kdc_fe_lower_conv_transpose),
    IN("Convolution3DTranspose", kdc_fe_infer_conv_transpose, kdc_fe_lower_conv_transpose),
    IN("AvgPool1D", kdc_fe_infer_pool, kdc_fe_lower_pool),
    IN("AvgPool3D", kdc_fe_infer_pool, kdc_fe_lower_pool),
    IN("MaxPool3D", kdc_fe_infer_pool, kdc_fe_lower_pool),
    IN("GlobalAvgPool3D", kdc_fe_infer_global_pool, kdc_fe_lower_global_pool),
    IN("GlobalMaxPool3D", kdc_fe_infer_global_pool, kdc_fe_lower_global_pool),
    /* wrappers and attention (lower_time_distributed.c, lower_dot_attention.c) */
    IN("TimeDistributed", kdc_fe_infer_time_distributed, kdc_fe_lower_time_distributed),
    IN("SpectralNormalization", kdc_fe_infer_spectral_norm, kdc_fe_lower_spectral_norm),
    IN("RMSNormalization", kdc_fe_infer_rmsnorm, kdc_fe_lower_rmsnorm), /* lower_norm.c */
    IN("Attention", kdc_fe_infer_dot_attention, kdc_fe_lower_dot_attention),
    IN("AdditiveAttention", kdc_fe_infer_dot_attention, kdc_fe_lower_dot_attention),
    /* image preprocessing (lower_image.c): resizing, and the random
     * augmentation layers, identities at inference (Keras' transform_images
     * with training=False) */
    /* lower_adaptive_pool.c */
    IN("AdaptiveAveragePooling1D", kdc_fe_infer_adaptive_pool, kdc_fe_lower_adaptive_pool),
    IN("AdaptiveAveragePooling2D", kdc_fe_infer_adaptive_pool, kdc_fe_lower_adaptive_pool),
    IN("AdaptiveAveragePooling3D", kdc_fe_infer_adaptive_pool, kdc_fe_lower_adaptive_pool),
    IN("AdaptiveMaxPooling1D", kdc_fe_infer_adaptive_pool, kdc_fe_lower_adaptive_pool),
    IN("AdaptiveMaxPooling2D", kdc_fe_infer_adaptive_pool, kdc_fe_lower_adaptive_pool),
    IN("AdaptiveMaxPooling3D", kdc_fe_infer_adaptive_pool, kdc_fe_lower_adaptive_pool),
    IN("CategoryEncoding", kdc_fe_infer_encoding, kdc_fe_lower_encoding), /* lower_encoding.c */
    IN("Discretization", kdc_fe_infer_encoding, kdc_fe_lower_encoding),
    IN("Resizing", kdc_fe_infer_resizing, kdc_fe_lower_resizing),
    IN("CenterCrop", kdc_fe_infer_resizing, kdc_fe_lower_resizing),
    IN("RandomFlip", kdc_fe_infer_augment, kdc_fe_lower_augment),
    IN("RandomRotation", kdc_fe_infer_augment, kdc_fe_lower_augment),
    IN("RandomZoom", kdc_fe_infer_augment, kdc_fe_lower_augment),
    IN("RandomTranslation", kdc_fe_infer_augment, kdc_fe_lower_augment),
    IN("RandomShear", kdc_fe_infer_augment, kdc_fe_lower_augment),
    IN("RandomPerspective", kdc_fe_infer_augment, kdc_fe_lower_augment),
    IN("RandomContrast", kdc_fe_infer_augment, kdc_fe_lower_augment),
    IN("RandomBrightness", kdc_fe_infer_augment, kdc_fe_lower_augment),
    IN("RandomHue", kdc_fe_infer_augment, kdc_fe_lower_augment),
    IN("RandomSaturation", kdc_fe_infer_augment, kdc_fe_lower_augment),
    IN("RandomGrayscale", kdc_fe_infer_augment, kdc_fe_lower_augment),
    IN("RandomSharpness", kdc_fe_infer_augment, kdc_fe_lower_augment),
    IN("RandomColorJitter", kdc_fe_infer_augment, kdc_fe_lower_augment),
    IN("RandomColorDegeneration", kdc_fe_infer_augment, kdc_fe_lower_augment),
    IN("RandomInvert", kdc_fe_infer_augment, kdc_fe_lower_augment),
    IN("RandomPosterization", kdc_fe_infer_augment, kdc_fe_lower_augment),
    IN("RandomErasing", kdc_fe_infer_augment, kdc_fe_lower_augment),
    IN("RandomGaussianBlur", kdc_fe_infer_augment, kdc_fe_lower_augment),
    IN("Solarization", kdc_fe_infer_augment, kdc_fe_lower_augment),
    IN("Equalization", kdc_fe_infer_augment, kdc_fe_lower_augment),
    IN("AugMix", kdc_fe_infer_augment, kdc_fe_lower_augment),
    IN("RandAugment", kdc_fe_infer_augment, kdc_fe_lower_augment),
    IN("CutMix", kdc_fe_infer_augment, kdc_fe_lower_augment),
    IN("MixUp", kdc_fe_infer_augment, kdc_fe_lower_augment),
    IN("MaxNumBoundingBoxes", kdc_fe_infer_augment, kdc_fe_lower_augment),
    /* Keras classes kdc recognises and refuses, with the reason */
    NO("CuDNNLSTM", "Keras 2's GPU-only layer (cuDNN weight layout, bias of 8 x units) is not "
                    "lowered; the same model saved with LSTM is"),
    NO("CuDNNGRU", "Keras 2's GPU-only layer (cuDNN weight layout) is not lowered; the same "
                   "model saved with GRU (reset_after=true) is"),
    NO("ConvLSTM1D", "convolutional recurrent layers are not lowered"),
    NO("ConvLSTM2D", "convolutional recurrent layers are not lowered"),
    NO("ConvLSTM3D", "convolutional recurrent layers are not lowered"),
    NO("RNN", "a generic RNN runs a Python cell object; LSTM, GRU and SimpleRNN are supported"),
    NO("LSTMCell", "cells run inside a generic RNN; use LSTM"),
    NO("GRUCell", "cells run inside a generic RNN; use GRU"),
    NO("SimpleRNNCell", "cells run inside a generic RNN; use SimpleRNN"),
    NO("StackedRNNCells", "cells run inside a generic RNN"),
    NO("TextVectorization", "string inputs are not supported"),
    NO("StringLookup", "string inputs are not supported"),
    NO("IntegerLookup", "vocabulary lookup tables are not supported"),
    NO("Hashing", "hashing of inputs is not supported"),
    NO("HashedCrossing", "hashing of inputs is not supported"),
    NO("RandomCrop", "Keras 3 returns the uncropped image at inference while declaring the "
                     "cropped shape"),
    NO("RandomElasticTransform", "its inference path rescales values; not supported"),
    NO("AutoContrast", "per-image contrast stretching is not supported"),
    NO("ContrastLimitedAdaptiveHistogramEqualization", "histogram equalization is not supported"),
    NO("MelSpectrogram", "audio preprocessing (FFT) is not supported"),
    NO("STFTSpectrogram", "audio preprocessing (FFT) is not supported"),
    NO("GroupQueryAttention", "grouped-query attention is not supported; MultiHeadAttention is"),
    NO("ReversibleEmbedding", "ReversibleEmbedding is not supported; Embedding is"),
    NO("TernaryDense", "ternary-quantized Dense is not supported"),
    NO("Pipeline", "a Pipeline of preprocessing layers is not supported"),
    NO("Wrapper", "the abstract Wrapper base class has no computation"),
    NO("JaxLayer", "it holds a JAX function, which kdc cannot compile"),
    NO("FlaxLayer", "it holds a Flax module, which kdc cannot compile"),
    NO("TorchModuleWrapper", "it holds a PyTorch module, which kdc cannot compile"),
    NO("TFSMLayer", "it holds a TensorFlow SavedModel, which kdc cannot compile"),
};
#undef IN
#undef NO

const kdc_layer_class *kdc_fe_find_class(const char *class_name) {
  for (size_t i = 0; i < sizeof classes / sizeof classes[0]; i++)
    if (!strcmp(classes[i].name, class_name)) return &classes[i];
  return NULL;
}

kdc_keras_layer *kdc_fe_inner_layer(const kdc_keras_layer *wrapper, const char *loc,
                                    const char *class_name, const char *name,
                                    struct json_object *cfg) {
  kdc_arena *ar = wrapper->model->arena;
  kdc_keras_layer *in = kdc_arena_alloc(ar, sizeof *in);
  memset(in, 0, sizeof *in);
  in->class_name = kdc_arena_strdup(ar, class_name);
  in->name = kdc_arena_strdup(ar, name);
  in->loc = loc;
  in->path = kdc_arena_printf(ar, "%s/%s", wrapper->path, name);
  in->config = cfg;
  in->cls = kdc_fe_find_class(class_name);
  json_object *tr = kdc_fe_get(cfg, "trainable");
  in->trainable = wrapper->trainable && !(tr && json_object_is_type(tr, json_type_boolean) &&
                                          !json_object_get_boolean(tr));
  in->model = wrapper->model;
  in->wrapper = wrapper;
  return in;
}

kdc_kshape kdc_kshape_make(int rank, const int64_t *dims) {
  kdc_kshape s = {.rank = rank};
  for (int i = 0; i < rank; i++) s.dims[i] = dims[i];
  return s;
}

int64_t kdc_kshape_numel(const kdc_kshape *s) {
  int64_t n = 1;
  for (int i = 0; i < s->rank; i++) {
    if (s->dims[i] < 0) return -1;
    n *= s->dims[i];
  }
  return n;
}

bool kdc_kshape_known_numel(const kdc_kshape *s, int64_t *n) {
  *n = 1;
  for (int i = 0; i < s->rank; i++)
    if (s->dims[i] >= 0 && (__builtin_mul_overflow(*n, s->dims[i], n) || *n > KDC_FE_MAX_ELEMENTS))
      return false;
  return true;
}

void kdc_fe_set_outputs(kdc_infer_args *a, int n, const kdc_kshape *shapes) {
  a->node->n_out = n;
  a->node->out = kdc_arena_memdup(a->m->arena, shapes, sizeof(kdc_kshape) * (size_t)n);
}

kdc_status kdc_fe_shape_err(kdc_infer_args *a, const char *what, const kdc_kshape *s1,
                            const kdc_kshape *s2) {
  char b1[160], b2[160];
  kdc_kshape_str(s1, b1, sizeof b1);
  if (!s2) return kdc_fe_layer_err(a->l, KDC_INVALID_INPUT, "%s (input shape %s)", what, b1);
  kdc_kshape_str(s2, b2, sizeof b2);
  return kdc_fe_layer_err(a->l, KDC_INVALID_INPUT, "%s: %s and %s", what, b1, b2);
}

kdc_status kdc_fe_add_var(kdc_infer_args *a, const char *name, const kdc_kshape *shape,
                          bool trainable, const char *init_key, const char *init_default) {
  kdc_keras_layer *l = a->l;
  for (int i = 0; i < shape->rank; i++)
    if (shape->dims[i] < 0)
      return kdc_fe_shape_err(a, kdc_arena_printf(a->m->arena,
                              "variable \"%s\" needs a known input dimension", name), shape, NULL);
  int64_t numel;
  if (!kdc_kshape_known_numel(shape, &numel)) {
    char b[160];
    return kdc_fe_layer_err(l, KDC_INVALID_INPUT, "variable \"%s\" of shape %s has more than 2^40 "
                            "elements (kdc's limit per tensor)", name, kdc_kshape_str(shape, b, sizeof b));
  }
  for (int i = 0; i < l->n_vars; i++) {
    if (strcmp(l->vars[i]->path + strlen(l->path) + 1, name)) continue;
    const kdc_kshape *old = &l->vars[i]->shape;
    bool same = old->rank == shape->rank;
    for (int d = 0; same && d < shape->rank; d++) same = old->dims[d] == shape->dims[d];
    if (!same)
      return kdc_fe_shape_err(a, kdc_arena_printf(a->m->arena,
                              "shared layer called on an input of another shape: variable "
                              "\"%s\" would change from/to", name), old, shape);
    return NULL;
  }
  kdc_keras_var *v = kdc_arena_alloc(a->m->arena, sizeof *v);
  const char *slash = strrchr(name, '/');
  v->path = kdc_arena_printf(a->m->arena, "%s/%s", l->path, name);
  v->name = kdc_arena_strdup(a->m->arena, slash ? slash + 1 : name);
  v->shape = *shape;
  v->dtype = KDC_DTYPE_F32;
  v->trainable = trainable && l->trainable;
  v->init_key = init_key;
  v->init_default = init_default;
  v->layer = l;
  kdc_keras_var **nv = kdc_arena_alloc(a->m->arena, sizeof(*nv) * (size_t)(l->n_vars + 1));
  if (l->n_vars) memcpy(nv, l->vars, sizeof(*nv) * (size_t)l->n_vars);
  nv[l->n_vars++] = v;
  l->vars = nv;
  return NULL;
}
