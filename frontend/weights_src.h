/*
 * frontend/weights_src.h: the tensors of one weights source (safetensors,
 * TF.js shards, HDF5), converted to f32 and named for matching
 * (weights.c's rules), shared by weights.c and weights_h5.c.
 */
#ifndef KDC_FRONTEND_WEIGHTS_SRC_H
#define KDC_FRONTEND_WEIGHTS_SRC_H

#include "frontend/frontend.h"

typedef struct kdc_fe_src_tensor {
  char *name;      /* ":0" stripped (heap) */
  char *raw;       /* name as stored (heap) */
  char where[160]; /* "weightsManifest[0].weights[3]", "layers/dense/vars/0" or "" */
  kdc_kshape shape;
  float *data;     /* heap */
  bool used;      /* bound, or optimizer state of a kdc checkpoint (never bound: `kdc
                     compile` restores or skips it, tools/cmd_compile.c) */
} kdc_fe_src_tensor;

typedef struct kdc_fe_source {
  const char *file;
  kdc_fe_src_tensor *t;
  size_t n, cap;
} kdc_fe_source;

/* Appends a tensor named |name| (":0" stripped in ->name). */
kdc_fe_src_tensor *kdc_fe_src_add(kdc_fe_source *s, const char *name);
void kdc_fe_src_free(kdc_fe_source *s);

#endif
