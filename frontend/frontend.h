/*
 * frontend/frontend.h: the Keras frontend and the table of contents of
 * frontend/.
 *
 * The frontend reads a model description (Keras 3 `to_json` / `.keras`
 * config.json, tf.keras 2 `to_json`, TensorFlow.js `model.json`; see
 * shared KERAS.md section 3) into an in-memory graph of Keras layers, infers
 * every layer's output shapes and variables itself (never trusting
 * `build_config`), prints a `model.summary()`-style table, lowers the graph
 * into an ir/ module and binds weights to it.
 *
 * Ownership: a kdc_keras_model owns everything it points to (one arena plus
 * the parsed JSON tree); free it with kdc_frontend_free.  Every error is a
 * kdc_status whose one-line message starts with the model file name, then a
 * JSON path such as `config.layers[3].config.units`, then what was expected.
 *
 * Shapes: dims are int64, -1 = unknown (Keras `None`, typically the batch).
 */
#ifndef KDC_FRONTEND_H
#define KDC_FRONTEND_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "ir/ir.h"
#include "kdc/arena.h"
#include "kdc/status.h"

struct json_object;

/* ---- the layer graph (frontend/graph.c) ---------------------------------- */

/* A static shape with unknown dims as -1. */
typedef struct kdc_kshape {
  int rank;
  int64_t dims[KDC_MAX_RANK];
} kdc_kshape;

/* Where a model description came from. */
typedef enum kdc_keras_format {
  KDC_KERAS_K3,   /* Keras 3 to_json / .keras config.json */
  KDC_KERAS_TK2,  /* tf.keras 2 / Keras 2 to_json (incl. the 2.13 hybrid) */
  KDC_KERAS_TFJS, /* TensorFlow.js layers-model (its topology is K3 or TK2) */
} kdc_keras_format;

/* A reference to one output tensor: layer index in its model, node index
 * (already corrected for the nested-model built-in node), tensor index. */
typedef struct kdc_keras_ref {
  int layer;
  int node;
  int tensor;
} kdc_keras_ref;

/* One call of a layer inside its model. */
typedef struct kdc_keras_node {
  int n_in;                   /* positional tensor inputs (merge lists flattened) */
  kdc_keras_ref *in;
  int n_kw;                   /* tensor-valued kwargs (MultiHeadAttention value=) */
  const char **kw_names;
  kdc_keras_ref *kw;
  struct json_object *kwargs; /* the node's kwargs object (borrowed), may be NULL */
  struct json_object *args;   /* Keras 3 dict nodes: the args list (borrowed), else NULL */
  int n_out;                  /* output tensors (set by shape inference) */
  kdc_kshape *out;
  int tensor_base;            /* id of output 0 among the model's tensors */
  bool done;                  /* shape inference ran */
} kdc_keras_node;

/* One model variable (a Keras 3 `variable.path`). */
typedef struct kdc_keras_var {
  const char *path;        /* "d1/kernel", "sequential/d1/kernel", "lstm/lstm_cell/bias" */
  const char *name;        /* short name: "kernel" */
  const char *legacy_name; /* tf.keras 2 short name when it differs, else NULL */
  kdc_kshape shape;        /* fully known */
  kdc_dtype dtype;         /* F32, or I64 for Normalization's count */
  bool trainable;          /* counts as trainable in the summary */
  const char *init_key;    /* layer config key of its initializer, or NULL */
  const char *init_default;/* Keras default initializer when the key is absent */
  struct kdc_keras_layer *layer;
  int gid;                 /* index in the top model's |vars| */
} kdc_keras_var;

struct kdc_keras_model;
struct kdc_layer_class;

typedef struct kdc_keras_layer {
  const char *class_name;      /* "Dense" */
  const char *name;            /* "d1" */
  const char *loc;             /* JSON path of the layer entry: "config.layers[3]" */
  const char *path;            /* name scope: "d1" or "sequential/d1" */
  struct json_object *config;  /* the layer's config object (borrowed) */
  const struct kdc_layer_class *cls;
  bool trainable;              /* effective: own flag and every enclosing model's */
  int n_nodes;
  kdc_keras_node *nodes;
  int n_vars;
  kdc_keras_var **vars;        /* in Keras creation order */
  size_t cap_vars;
  struct kdc_keras_model *sub; /* nested Functional/Sequential, else NULL */
  struct kdc_keras_model *model; /* the model this layer belongs to */
  struct kdc_keras_layer *inner[2]; /* Bidirectional: its forward and backward RNN layers */
  const struct kdc_keras_layer *wrapper; /* the Bidirectional an inner layer belongs to */
} kdc_keras_layer;

typedef struct kdc_keras_model {
  kdc_arena *arena;            /* shared by the whole tree of nested models */
  struct json_object *root;    /* parsed file; owned by the top model only */
  const char *file;            /* the path given to kdc_frontend_load */
  const char *name;            /* model name ("sequential", "functional") */
  const char *loc;             /* JSON path of this model's envelope ("" at top) */
  const char *class_name;      /* "Functional", "Sequential", "Model" */
  bool sequential;
  bool trainable;              /* effective: own flag and every enclosing model's */
  kdc_keras_format format;     /* the file's family (TFJS for model.json wrappers) */
  bool tk2_topology;           /* topology written by tf.keras 2 (node index rules) */
  const char *keras_version;   /* "3.4.1", "2.13.1", or NULL */
  int n_layers;
  kdc_keras_layer *layers;
  int n_inputs, n_outputs;
  kdc_keras_ref *inputs, *outputs;
  int n_order;                 /* (layer, node) pairs in evaluation order */
  kdc_keras_ref *order;        /* .tensor unused */
  int n_tensors;               /* node outputs in this model */
  struct kdc_keras_model *parent;
  /* layer name -> index while the model is parsed (graph.c find_layer):
   * lookups stay O(1) for models of 100,000 layers */
  kdc_strindex layer_index;
  int n_indexed;               /* layers [0, n_indexed) are in layer_index */
  /* top model only: */
  const struct kdc_load_options *load_opt; /* during kdc_frontend_load_*_opts only */
  int n_vars;                  /* all variables, nested models included */
  kdc_keras_var **vars;
  size_t cap_vars;
  struct json_object *weights_manifest; /* TF.js weightsManifest, borrowed */
  const char *manifest_loc;    /* "weightsManifest" */
  /* Keras' own files (frontend/keras_files.c): */
  const char *source_file;     /* the .keras / .h5 path (m->file then names the config in it) */
  char *config_text;           /* a .keras archive's config.json (heap), else NULL */
  size_t config_len;
  void *h5_image;              /* its model.weights.h5, or the legacy .h5 file itself (heap) */
  size_t h5_len;
  const char *h5_name;         /* "m.keras: model.weights.h5" / "m.h5", for messages */
} kdc_keras_model;

/* Static shapes for model inputs whose non-batch dims are unknown (Keras
 * `None`, e.g. a sequence length): `kdc compile --input-shape NAME=D1,D2`.
 * |dims| exclude the batch dim; |name| NULL means the model's only input. */
typedef struct kdc_input_shape {
  const char *name;
  int rank;                    /* dims after the batch dim */
  int64_t dims[KDC_MAX_RANK];
} kdc_input_shape;

typedef struct kdc_load_options {
  int n_input_shapes;
  const kdc_input_shape *input_shapes;
  /* The keras_version of the container (a .keras metadata.json, a legacy
   * .h5 attribute) for a topology that does not carry one; NULL: none. */
  const char *keras_version;
} kdc_load_options;

/* Parses "[NAME=]D1,D2,..." (positive dims) into |out|; |out->name| points
 * into |text|.  Errors quote the text; callers add the flag. */
kdc_status kdc_frontend_parse_input_shape(const char *text, kdc_input_shape *out);
void kdc_input_shape_free(kdc_input_shape *s); /* frees |name| */
/* The batch the model's InputLayers fix (a known first dim of batch_shape /
 * batch_input_shape), or -1 in *|batch| when none does, with the input
 * layer in *|where|; inputs fixing different batches are a located error
 * (frontend/input_shape.c). */
struct kdc_keras_model;
struct kdc_keras_layer;
kdc_status kdc_frontend_fixed_batch(const struct kdc_keras_model *m, int64_t *batch,
                                    const struct kdc_keras_layer **where);

/* Reads the model file at |path| (format auto-detected) and infers every
 * layer's output shapes and variables.  On success *|out| owns the model.
 * Errors name |path| and the JSON location: broken JSON gives the line and
 * column, an unknown layer class its index and name, a shape mismatch the
 * layer and both shapes.  A `.keras` zip or HDF5 file is refused with a hint. */
kdc_status kdc_frontend_load(const char *path, kdc_keras_model **out);
/* Same, from text already in memory; |path| is used for messages and to find
 * TF.js weight shards. */
kdc_status kdc_frontend_load_text(const char *path, const char *text, size_t len,
                                  kdc_keras_model **out);
/* Both with |opt| (may be NULL): each input shape replaces the unknown dims
 * of the named model input before shape inference; a known dim must agree
 * and the rank must match, else a located error naming the input.  */
kdc_status kdc_frontend_load_opts(const char *path, const kdc_load_options *opt,
                                  kdc_keras_model **out);
kdc_status kdc_frontend_load_text_opts(const char *path, const char *text, size_t len,
                                       const kdc_load_options *opt, kdc_keras_model **out);
void kdc_frontend_free(kdc_keras_model *m);

/* ---- Keras' own files (frontend/keras_files.c) ----------------------------- */

/* `.keras` archives and legacy `.h5` models are read by kdc_frontend_load
 * (by their magic bytes); their weights bind when no --weights is given.
 * Weights files (`.weights.h5`, legacy `.h5`, a `.keras`) are accepted by
 * kdc_frontend_bind_weights. */

/* Keras 3's weights-file path of |v| ("layers/dense_1/vars/0",
 * "layers/bidirectional/forward_layer/cell/vars/2"). */
void kdc_frontend_h5_path(const kdc_keras_var *v, char *buf, size_t n);
/* A second path Keras writes |v| at (SpectralNormalization's wrapped
 * kernel, also the wrapper's `vars/0`): true and the path in |buf|. */
bool kdc_frontend_h5_alias(const kdc_keras_var *v, char *buf, size_t n);
/* The most bytes kdc reads for one weights member or file (physical memory,
 * at most 16 GiB; KDC_TEST_WEIGHTS_CAP overrides it for tests). */
size_t kdc_fe_weights_cap(void);
kdc_status kdc_fe_load_archive(const char *path, const void *data, size_t len,
                               const kdc_load_options *opt, kdc_keras_model **out);
kdc_status kdc_fe_load_legacy_h5(const char *path, const void *data, size_t len,
                                 const kdc_load_options *opt, kdc_keras_model **out);
struct kdc_fe_source;
/* The tensors of the HDF5 image |img| (Keras 3 or legacy layout) as a
 * weights source for |m|, named by variable path (Keras 3) or weight name
 * (legacy); every problem is an error naming |file| and the HDF5 path. */
kdc_status kdc_fe_h5_source(const kdc_keras_model *m, const char *file, const void *img,
                            size_t len, struct kdc_fe_source *s);

/* The plan's KERAS section (docs/plan-format.md): {"config": the Keras 3
 * config (with its compile_config) or null, "keras_version", "vars":
 * [[path, weights-file path, trainable (, alias path)], ...] in variable order,
 * "optimizer": |optimizer_json| parsed or null}.  Heap string. */
char *kdc_frontend_keras_section(const kdc_keras_model *m, const char *optimizer_json);

/* ---- summary and counts (frontend/summary.c) ----------------------------- */

/* Writes a Keras `model.summary()`-like table to |out|: one row per layer
 * (name (type), output shape, param #, and "connected to" for Functional
 * models), then `Total params: N (size)`, `Trainable params: N (size)`,
 * `Non-trainable params: N (size)`, with thousands separators. */
kdc_status kdc_frontend_summary(const kdc_keras_model *m, FILE *out);
/* Elements of all variables, non-trainable state (BatchNormalization moving
 * statistics, Normalization mean/variance/count) included. */
int64_t kdc_frontend_param_count(const kdc_keras_model *m);
int64_t kdc_frontend_trainable_count(const kdc_keras_model *m);
/* Elements of the variables of |l| (a nested model: all of its variables). */
int64_t kdc_frontend_layer_params(const kdc_keras_layer *l);
/* Writes "(None, 28, 28, 1)" for |s| into |buf| (always NUL-terminated). */
char *kdc_kshape_str(const kdc_kshape *s, char *buf, size_t n);

/* Variables in the order of the predict function's weight parameters
 * (layer order, nested models depth-first).  |i| < kdc_frontend_variable_count. */
size_t kdc_frontend_variable_count(const kdc_keras_model *m);
const kdc_keras_var *kdc_frontend_variable(const kdc_keras_model *m, size_t i);

/* ---- lowering (frontend/lower.c, lower_layers.c, activations.c) ---------- */

typedef struct kdc_lower_options {
  int64_t batch;   /* the batch dimension given to every model input (>= 1) */
  /* Distribution (frontend/distribute.c): with a mesh, inputs, variables and
   * "<layer>/output" rules get their user shardings.  |layout| NULL with a
   * mesh = DataParallel (batch over every axis, variables replicated). */
  const kdc_mesh *mesh;
  const struct kdc_layout *layout;
  /* Also lower "train_forward" (the training-mode forward: Dropout and
   * SpatialDropout active, keyed by |dropout_seed|, the layer path and an
   * i32[] STATE parameter "iteration"; BatchNormalization with batch
   * statistics over the rows whose "sample_mask" is 1 and its moving
   * statistics as extra results; GaussianNoise, GaussianDropout and
   * AlphaDropout active; docs/training.md). */
  bool train_forward;
  uint64_t dropout_seed;
  /* With train_forward: predict and train_forward also return the Keras
   * mask of each output that carries one, as an f32 result named
   * "<output>" KDC_MASK_RESULT_SUFFIX after the outputs (and before
   * train_forward's state updates); kdc_pass_build_training weights the
   * loss with it and removes these results (docs/training.md). */
  bool output_masks;
  FILE *warnings;  /* dtype policies kdc cannot honour exactly (frontend/policy.c); NULL = none */
} kdc_lower_options;

/* Builds a module with one function "predict": parameters are the model
 * inputs (KDC_PARAM_INPUT, named after the input layer, batch dim =
 * |opt|->batch) then one KDC_PARAM_WEIGHT per variable (named by its Keras 3
 * path, in kdc_frontend_variable order); results are the model outputs in
 * output_layers order, named after their layer.  Every variable is also
 * registered as a module weight with data NULL (see bind_weights).  A layer
 * class without a lowering fails with a located UNSUPPORTED error, never a
 * guess.  On success *|out| owns the module. */
kdc_status kdc_frontend_lower(const kdc_keras_model *m, const kdc_lower_options *opt,
                              kdc_module **out);

/* ---- weights (frontend/weights.c, init.c) -------------------------------- */

/* Gives every weight of |mod| (made by kdc_frontend_lower from |m|) its data:
 * from |weights_path| (a .safetensors file named by Keras variable paths, or
 * a TF.js model.json whose weightsManifest shards sit next to it), or, when
 * |weights_path| is NULL, from the TF.js manifest of |m| itself if it has
 * one and its shards exist, else from Keras' default initialisers drawn
 * deterministically from |seed| (docs/frontend.md).  Missing, extra or
 * misshapen weights are errors naming the variable/tensor and both shapes. */
kdc_status kdc_frontend_bind_weights(const kdc_keras_model *m, kdc_module *mod,
                                     const char *weights_path, uint64_t seed);
/* Keras' default initialisers from |seed| for every weight, even when the
 * model file carries weights of its own (`kdc compile --random-init`). */
kdc_status kdc_frontend_init_weights(const kdc_keras_model *m, kdc_module *mod, uint64_t seed);
/* Fills |n| elements at |dst| for |v| from its layer's initializer config
 * (or the Keras default), drawn from a counter-based generator keyed by
 * (|seed|, v->path).  Errors name the initializer's JSON location. */
kdc_status kdc_frontend_init_var(const kdc_keras_model *m, const kdc_keras_var *v,
                                 uint64_t seed, void *dst);

/* ---- internals shared between the files of frontend/ ---------------------- */

/* json_util.c: located errors and config getters.  |key| is a config key of
 * layer |l|; errors read "<file>: <loc>.config.<key>: expected ...". */
const char *kdc_fe_file(const kdc_keras_model *m);
kdc_status kdc_fe_err(const kdc_keras_model *m, kdc_code code, const char *loc,
                      const char *fmt, ...) __attribute__((format(printf, 4, 5)));
kdc_status kdc_fe_layer_err(const kdc_keras_layer *l, kdc_code code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
struct json_object *kdc_fe_get(struct json_object *o, const char *key);
bool kdc_fe_is_null(struct json_object *o);
/* The name of a layer config's `dtype` |o|: the string itself, or a policy
 * object's config.name (Keras 3 DTypePolicy, tf.keras 2 Policy), with the
 * object's class_name in *|class_name| when given; NULL when there is none. */
const char *kdc_fe_dtype_name(struct json_object *o, const char **class_name);
kdc_status kdc_fe_cfg_int(const kdc_keras_layer *l, const char *key, int64_t dflt,
                          int64_t *out);
kdc_status kdc_fe_cfg_double(const kdc_keras_layer *l, const char *key, double dflt,
                             double *out);
kdc_status kdc_fe_cfg_bool(const kdc_keras_layer *l, const char *key, bool dflt, bool *out);
/* A string option; NULL |dflt| makes it required.  JSON null gives |dflt|. */
kdc_status kdc_fe_cfg_str(const kdc_keras_layer *l, const char *key, const char *dflt,
                          const char **out);
/* An int or a list of |n| ints (kernel_size, strides); |dflt| < 0 = required. */
kdc_status kdc_fe_cfg_tuple(const kdc_keras_layer *l, const char *key, int n, int64_t dflt,
                            int64_t *out);
/* Reads an int or an int list (axis); out holds up to KDC_MAX_RANK entries. */
kdc_status kdc_fe_cfg_axes(const kdc_keras_layer *l, const char *key, int64_t dflt,
                           int *n_out, int64_t *out);
/* frontend/input_shape.c: applies m->load_opt's input shapes to the top
 * model's inputs (called before shape inference). */
kdc_status kdc_fe_apply_input_shapes(kdc_keras_model *m);

/* Reads a shape list (null entries -> -1) at JSON location |loc|. */
kdc_status kdc_fe_parse_shape(const kdc_keras_model *m, struct json_object *o,
                              const char *loc, kdc_kshape *out);
/* The activation name of |l|'s config |key| (string, or {"config": name}). */
kdc_status kdc_fe_cfg_activation(const kdc_keras_layer *l, const char *key,
                                 const char **out);

/* layers.c: the layer class table. */
typedef struct kdc_infer_args {
  kdc_keras_model *m;
  kdc_keras_layer *l;
  kdc_keras_node *node;
  int node_index;
  const kdc_kshape *in;   /* node->n_in shapes */
  const kdc_kshape *kw;   /* node->n_kw shapes */
} kdc_infer_args;

struct kdc_lower_ctx;
typedef kdc_status (*kdc_infer_fn)(kdc_infer_args *a);
/* Lowers one node: |in| values in, writes node->n_out values to |out|. */
typedef kdc_status (*kdc_lower_fn)(struct kdc_lower_ctx *c, const kdc_keras_layer *l,
                                   const kdc_keras_node *n, const kdc_value_id *in,
                                   const kdc_value_id *kw, kdc_value_id *out);

typedef struct kdc_layer_class {
  const char *name;      /* Keras class_name */
  kdc_infer_fn infer;    /* output shapes + variables; NULL: known, unsupported */
  kdc_lower_fn lower;    /* NULL: no lowering yet */
  const char *why;       /* a refused class (infer NULL): the reason, for its error */
} kdc_layer_class;

const kdc_layer_class *kdc_fe_find_class(const char *class_name);
/* A layer held by wrapper |wrapper| (Bidirectional, TimeDistributed): class
 * |class_name|, config |cfg| found at JSON path |loc|, named |name| inside
 * the wrapper's scope ("<wrapper path>/<name>"); trainable when the wrapper
 * is and |cfg| does not say otherwise. */
kdc_keras_layer *kdc_fe_inner_layer(const kdc_keras_layer *wrapper, const char *loc,
                                    const char *class_name, const char *name,
                                    struct json_object *cfg);
/* Sets the node's outputs to |n| shapes. */
void kdc_fe_set_outputs(kdc_infer_args *a, int n, const kdc_kshape *shapes);
/* Declares (first call) or checks (later calls of a shared layer) variable
 * |name| of a->l with |shape|. */
kdc_status kdc_fe_add_var(kdc_infer_args *a, const char *name, const kdc_kshape *shape,
                          bool trainable, const char *init_key, const char *init_default);
kdc_status kdc_fe_shape_err(kdc_infer_args *a, const char *what, const kdc_kshape *s1,
                            const kdc_kshape *s2);
kdc_kshape kdc_kshape_make(int rank, const int64_t *dims);
int64_t kdc_kshape_numel(const kdc_kshape *s); /* -1 if any dim unknown */
bool kdc_kshape_equal(const kdc_kshape *a, const kdc_kshape *b); /* weights.c */
/* kdc's limit on the elements of one tensor (per sample where the batch is
 * unknown): 2^40.  A shape in a model file past it (units 2^62, a dim
 * product that overflows int64) is bad input, refused where it appears. */
#define KDC_FE_MAX_ELEMENTS ((int64_t)1 << 40)
/* The product of the known (non-negative) dims of |s| into |n|; false when
 * it exceeds KDC_FE_MAX_ELEMENTS (checked without overflow). */
bool kdc_kshape_known_numel(const kdc_kshape *s, int64_t *n);

/* layers_core.c / layers_conv.c / layers_seq.c: shape inference per class. */
kdc_status kdc_fe_infer_input(kdc_infer_args *a);
kdc_status kdc_fe_infer_dense(kdc_infer_args *a);
kdc_status kdc_fe_infer_identity(kdc_infer_args *a);
kdc_status kdc_fe_infer_flatten(kdc_infer_args *a);
kdc_status kdc_fe_infer_reshape(kdc_infer_args *a);
kdc_status kdc_fe_infer_permute(kdc_infer_args *a);
kdc_status kdc_fe_infer_merge(kdc_infer_args *a);
kdc_status kdc_fe_infer_subtract(kdc_infer_args *a);
kdc_status kdc_fe_infer_concat(kdc_infer_args *a);
kdc_status kdc_fe_infer_activation(kdc_infer_args *a);
kdc_status kdc_fe_infer_submodel(kdc_infer_args *a);
kdc_status kdc_fe_infer_conv(kdc_infer_args *a);
kdc_status kdc_fe_infer_pool(kdc_infer_args *a);
kdc_status kdc_fe_infer_global_pool(kdc_infer_args *a);
kdc_status kdc_fe_infer_zero_pad(kdc_infer_args *a);
kdc_status kdc_fe_infer_batchnorm(kdc_infer_args *a);
kdc_status kdc_fe_infer_layernorm(kdc_infer_args *a);
kdc_status kdc_fe_infer_normalization(kdc_infer_args *a);
kdc_status kdc_fe_infer_embedding(kdc_infer_args *a);
kdc_status kdc_fe_infer_rnn(kdc_infer_args *a);
/* The initial states a call of a recurrent layer passes, as indices into
 * its positional inputs followed by its tensor kwargs: the tensors after
 * the sequence (tf.keras 2 and TF.js append them to the inputs; Keras 3
 * `layer(x, [h, c])`), then the Keras 3 `initial_state` kwarg's, in order.
 * Returns their count (at most |cap|). */
int kdc_fe_rnn_state_inputs(const kdc_keras_node *n, int *idx, int cap);
/* kdc_fe_infer_rnn with the initial states' shapes given (Bidirectional
 * passes each direction its half). */
kdc_status kdc_fe_infer_rnn_layer(kdc_infer_args *a, int n_states, const kdc_kshape *states);
kdc_status kdc_fe_infer_mha(kdc_infer_args *a);
kdc_status kdc_fe_infer_prelu(kdc_infer_args *a);
kdc_status kdc_fe_infer_layer_scale(kdc_infer_args *a);
kdc_status kdc_fe_infer_groupnorm(kdc_infer_args *a);
/* layers_shape.c */
kdc_status kdc_fe_infer_upsampling(kdc_infer_args *a);
kdc_status kdc_fe_infer_repeat_vector(kdc_infer_args *a);
kdc_status kdc_fe_infer_dot(kdc_infer_args *a);
kdc_status kdc_fe_infer_elementwise(kdc_infer_args *a); /* UnitNormalization, ThresholdedReLU */
/* lower_ops.c: Keras 3 operations recorded as nodes (module keras.src.ops.*):
 * their class table (names shared with layers: looked up by module), shape
 * inference and lowering. */
bool kdc_fe_is_op_module(const char *module);
const kdc_layer_class *kdc_fe_find_op_class(const char *class_name); /* NULL: not lowered */
bool kdc_fe_is_op_class(const kdc_layer_class *c);
kdc_status kdc_fe_infer_op(kdc_infer_args *a);
kdc_status kdc_fe_lower_op(struct kdc_lower_ctx *c, const kdc_keras_layer *l,
                           const kdc_keras_node *n, const kdc_value_id *in,
                           const kdc_value_id *kw, kdc_value_id *out);
/* einsum.c */
kdc_status kdc_fe_infer_einsum_dense(kdc_infer_args *a);

/* Per-dimension (before, after) pairs of config |key| for |n| spatial dims
 * (ZeroPadding/Cropping forms: int, n ints, or n pairs; 1-D: one pair);
 * absent or null: |dflt| everywhere.  Negative values are errors. */
kdc_status kdc_fe_cfg_pairs(const kdc_keras_layer *l, const char *key, int n, int64_t dflt,
                            int64_t *lo, int64_t *hi);
/* UpSampling1D/2D/3D config: spatial rank, sizes, channels_last, and
 * whether interpolation is "bilinear" (others but "nearest" are errors). */
kdc_status kdc_fe_upsampling_config(const kdc_keras_layer *l, int *n, int64_t *size, bool *last,
                                    bool *bilinear);
/* Dot config.axes for inputs of rank |rank0|, |rank1|: two non-batch axes
 * (negative ones taken modulo the rank, as Keras does). */
kdc_status kdc_fe_dot_axes(const kdc_keras_layer *l, int rank0, int rank1, int64_t *ax);

/* einsum.c: a two-operand einsum "x,y->z" as label ids (letters 0..51,
 * "..." dims 52..). */
typedef struct kdc_fe_einsum {
  int n[3];                   /* labels of x, y and the output */
  int8_t lab[3][KDC_MAX_RANK];
} kdc_fe_einsum;
/* Parses |eq| for operands of rank |rank_a| and |rank_b|; errors name the
 * layer's config |key|.  Repeated labels in one operand are UNSUPPORTED. */
kdc_status kdc_fe_einsum_parse(const kdc_keras_layer *l, const char *key, const char *eq,
                               int rank_a, int rank_b, kdc_fe_einsum *out);
/* einsum(|e|, a, b) as reduce + dot_general + transpose. */
kdc_value_id kdc_fe_einsum_lower(kdc_func *f, const kdc_fe_einsum *e, kdc_value_id a,
                                 kdc_value_id b);
/* EinsumDense's equation for input |x|: kernel, bias (|has_bias|) and
 * output shapes as keras' _analyze_split_string computes them. */
kdc_status kdc_fe_einsum_dense_shapes(const kdc_keras_layer *l, const kdc_kshape *x,
                                      kdc_fe_einsum *e, kdc_kshape *kernel, kdc_kshape *bias,
                                      bool *has_bias, kdc_kshape *out);

/* Merge broadcasting (Keras Merge: batch aligned at 0, the other dims
 * trailing-aligned numpy-style).  Errors name both shapes. */
kdc_status kdc_fe_merge_shapes(kdc_infer_args *a, const kdc_kshape *x, const kdc_kshape *y,
                               kdc_kshape *out);

/* graph.c: parses the model envelope |env| found at JSON path |loc| into
 * |m| (whose arena, file, parent, format and tk2_topology are set), nested
 * models recursively, and infers every node's shapes and variables. */
kdc_status kdc_fe_parse_model(kdc_keras_model *m, struct json_object *env, const char *loc);
/* Rebuilds top->vars: layer order, nested models depth-first; sets gids. */
void kdc_fe_collect_vars(kdc_keras_model *top);
/* "a.b" from |loc| and |suffix| (just |suffix| when |loc| is empty). */
const char *kdc_fe_join(kdc_arena *a, const char *loc, const char *suffix);

/* lower.c: the state of one lowering, used by the per-layer rules. */
typedef struct kdc_lower_ctx {
  const kdc_keras_model *top;
  kdc_module *mod;
  kdc_func *f;
  int64_t batch;
  kdc_value_id *weight;    /* per top-level variable gid: its parameter */
  const kdc_mesh *mesh;    /* NULL: no distribution */
  const struct kdc_layout *layout; /* NULL with a mesh: DataParallel */
  bool training;           /* lowering train_forward (lower_dropout.c) */
  kdc_value_id iteration;  /* train_forward: the step counter parameter */
  uint64_t dropout_seed;
  kdc_value_id sample_mask;/* train_forward: "sample_mask" f32[batch], made on first use */
  kdc_value_id *assigned;  /* train_forward, per variable gid: its new value or KDC_NO_VALUE */
  /* Keras masks (frontend/mask.c), valid while one node is lowered: */
  const kdc_value_id *in_mask; /* per positional input: its mask or KDC_NO_VALUE; NULL: none */
  kdc_value_id *out_mask;  /* per output: a mask the lowering computed itself (Keras' call
                            * setting _keras_mask), else KDC_NO_VALUE */
  bool mask_taken;         /* the lowering read an input mask (kdc_fe_input_mask) */
  FILE *warnings;          /* dtype-policy warnings (policy.c); NULL = none */
  unsigned policy_warned;  /* policy.c: the warnings already given */
} kdc_lower_ctx;

/* policy.c: a layer's dtype policy around its lowering (docs/frontend.md,
 * "Dtype policies").  begin autocasts the floating inputs |in| (and
 * keyword tensors |kw|) and, for a
 * bf16/f16 compute dtype, rounds the variables the layer reads and makes
 * the function's dots compute in it; end restores them and gives the
 * floating outputs |out| the compute dtype. */
typedef struct kdc_fe_policy {
  kdc_dtype compute;       /* F32, BF16 or F16 */
  int n_saved;
  kdc_value_id *saved;     /* the layer's variables' values before begin */
} kdc_fe_policy;
kdc_status kdc_fe_policy_begin(kdc_lower_ctx *c, const kdc_keras_layer *l, int n_in,
                               kdc_value_id *in, int n_kw, kdc_value_id *kw, kdc_fe_policy *p);
kdc_status kdc_fe_policy_end(kdc_lower_ctx *c, const kdc_keras_layer *l, kdc_fe_policy *p,
                             int n_out, kdc_value_id *out);

/* distribute.c: user shardings from the mesh and layout (no-ops without a
 * mesh).  Errors name the layout rule, the tensor and both sizes. */
kdc_status kdc_fe_shard_input(kdc_lower_ctx *c, const kdc_keras_layer *l, kdc_value_id v);
kdc_status kdc_fe_shard_weight(kdc_lower_ctx *c, const kdc_keras_var *var, kdc_value_id v);
/* Wraps *|v| in a sharding_constraint when layout_map has "<layer path>/output". */
kdc_status kdc_fe_constrain_output(kdc_lower_ctx *c, const kdc_keras_layer *l, kdc_value_id *v);

/* The parameter value of variable |name| of layer |l|. */
kdc_value_id kdc_fe_weight(struct kdc_lower_ctx *c, const kdc_keras_layer *l,
                           const char *name);
/* train_forward: the LABEL parameter "sample_mask", f32[batch], a 0/1 weight
 * per row (padding rows of a partial batch are 0), made on first use;
 * passes/train_step.c gives the loss the same parameter. */
kdc_value_id kdc_fe_sample_mask(struct kdc_lower_ctx *c);
/* The current value of variable |name| of |l| in a train_forward: its last
 * kdc_fe_assign, else its parameter. */
kdc_value_id kdc_fe_state_value(struct kdc_lower_ctx *c, const kdc_keras_layer *l,
                                const char *name);
/* train_forward: |v| is the new value of non-trainable variable |name| of |l|
 * (BatchNormalization's moving statistics).  It becomes a train_forward
 * result named by the variable's path (after the model outputs, in variable
 * order), which train_step returns as state (docs/training.md). */
kdc_status kdc_fe_assign(struct kdc_lower_ctx *c, const kdc_keras_layer *l, const char *name,
                         kdc_value_id v);
/* Lowers the nodes of |m| with its inputs bound to |inputs|; writes the model
 * outputs to |outputs| (m->n_outputs values). */
kdc_status kdc_fe_lower_graph(struct kdc_lower_ctx *c, const kdc_keras_model *m,
                              const kdc_value_id *inputs, kdc_value_id *outputs);
/* The same with Keras masks: |in_masks| (m->n_inputs, KDC_NO_VALUE = none;
 * NULL: no input has one) are the inputs' masks; the outputs' masks go to
 * |out_masks| (m->n_outputs values, may be NULL). */
kdc_status kdc_fe_lower_graph_masked(struct kdc_lower_ctx *c, const kdc_keras_model *m,
                                     const kdc_value_id *inputs, const kdc_value_id *in_masks,
                                     kdc_value_id *outputs, kdc_value_id *out_masks);

/* mask.c: Keras 3 mask propagation (layer.py _set_mask_metadata, each
 * class's supports_masking / compute_mask).  A mask is a bool (or, when a
 * call passed one explicitly, numeric) value of the input's shape without
 * its last dim ([batch, steps] for sequences). */
/* The output masks of node |n| of |l| (lowered to |out|) from the inputs'
 * masks |in_mask| (NULL: none), into |out_mask| (n->n_out values; entries
 * already set by the lowering are kept).  Errors when a layer whose Keras
 * call uses its mask was given one and its lowering did not read it. */
kdc_status kdc_fe_compute_masks(struct kdc_lower_ctx *c, const kdc_keras_layer *l,
                                const kdc_keras_node *n, const kdc_value_id *in,
                                const kdc_value_id *in_mask, const kdc_value_id *out,
                                kdc_value_id *out_mask);
/* Whether class |cls|'s Keras call uses the mask it is given (mask.c's
 * table): its lowering must then read it. */
bool kdc_fe_mask_consumer(const char *cls);
/* The mask of positional input |i| of the node being lowered (KDC_NO_VALUE:
 * none); marks the mask as used. */
kdc_value_id kdc_fe_input_mask(struct kdc_lower_ctx *c, int i);
/* The Masking layer: where(any(x != mask_value, -1), x, 0), with that mask. */
kdc_status kdc_fe_lower_masking(struct kdc_lower_ctx *c, const kdc_keras_layer *l,
                                const kdc_keras_node *n, const kdc_value_id *in,
                                const kdc_value_id *kw, kdc_value_id *out);
/* |m| as bool (Keras' cast(mask, "bool"): nonzero is true). */
kdc_value_id kdc_fe_mask_bool(kdc_func *f, kdc_value_id m);
/* Whether the model file was written by Keras >= |major|.|minor| (false
 * for tf.keras 2, TF.js and files without keras_version). */
bool kdc_fe_keras_at_least(const kdc_keras_model *m, int major, int minor);

/* lower_layers.c: lowering rules of the supported classes. */
/* lower_dropout.c: Dropout / SpatialDropout{1,2,3}D / Gaussian* / AlphaDropout:
 * the identity at inference; active (kdc's Philox stream) in train_forward. */
kdc_status kdc_fe_lower_dropout(struct kdc_lower_ctx *c, const kdc_keras_layer *l,
                                const kdc_keras_node *n, const kdc_value_id *in,
                                const kdc_value_id *kw, kdc_value_id *out);
/* A tf.keras 2 topology's call with an explicit training=true (honoured in
 * predict there; Keras 3's predict and fit override it): the augmentation
 * layers refuse it (lower_dropout.c). */
bool kdc_fe_call_forces_training(const kdc_keras_layer *l, const kdc_keras_node *n);
kdc_status kdc_fe_lower_identity(struct kdc_lower_ctx *c, const kdc_keras_layer *l,
                                 const kdc_keras_node *n, const kdc_value_id *in,
                                 const kdc_value_id *kw, kdc_value_id *out);
kdc_status kdc_fe_lower_dense(struct kdc_lower_ctx *c, const kdc_keras_layer *l,
                              const kdc_keras_node *n, const kdc_value_id *in,
                              const kdc_value_id *kw, kdc_value_id *out);
kdc_status kdc_fe_lower_flatten(struct kdc_lower_ctx *c, const kdc_keras_layer *l,
                                const kdc_keras_node *n, const kdc_value_id *in,
                                const kdc_value_id *kw, kdc_value_id *out);
kdc_status kdc_fe_lower_reshape(struct kdc_lower_ctx *c, const kdc_keras_layer *l,
                                const kdc_keras_node *n, const kdc_value_id *in,
                                const kdc_value_id *kw, kdc_value_id *out);
kdc_status kdc_fe_lower_permute(struct kdc_lower_ctx *c, const kdc_keras_layer *l,
                                const kdc_keras_node *n, const kdc_value_id *in,
                                const kdc_value_id *kw, kdc_value_id *out);
kdc_status kdc_fe_lower_merge(struct kdc_lower_ctx *c, const kdc_keras_layer *l,
                              const kdc_keras_node *n, const kdc_value_id *in,
                              const kdc_value_id *kw, kdc_value_id *out);
kdc_status kdc_fe_lower_concat(struct kdc_lower_ctx *c, const kdc_keras_layer *l,
                               const kdc_keras_node *n, const kdc_value_id *in,
                               const kdc_value_id *kw, kdc_value_id *out);
kdc_status kdc_fe_lower_activation_layer(struct kdc_lower_ctx *c, const kdc_keras_layer *l,
                                         const kdc_keras_node *n, const kdc_value_id *in,
                                         const kdc_value_id *kw, kdc_value_id *out);
kdc_status kdc_fe_lower_submodel(struct kdc_lower_ctx *c, const kdc_keras_layer *l,
                                 const kdc_keras_node *n, const kdc_value_id *in,
                                 const kdc_value_id *kw, kdc_value_id *out);

#define KDC_FE_LOWER_FN(name)                                                             \
  kdc_status name(struct kdc_lower_ctx *c, const kdc_keras_layer *l, const kdc_keras_node *n, \
                  const kdc_value_id *in, const kdc_value_id *kw, kdc_value_id *out)
/* lower_norm.c: normalisation and preprocessing layers at inference. */
KDC_FE_LOWER_FN(kdc_fe_lower_batchnorm);
KDC_FE_LOWER_FN(kdc_fe_lower_layernorm);
KDC_FE_LOWER_FN(kdc_fe_lower_groupnorm);
KDC_FE_LOWER_FN(kdc_fe_lower_unitnorm);
KDC_FE_LOWER_FN(kdc_fe_lower_rescaling);
KDC_FE_LOWER_FN(kdc_fe_lower_normalization);
/* lower_shape.c: padding, cropping, upsampling, global pooling, PReLU, Dot. */
KDC_FE_LOWER_FN(kdc_fe_lower_pad_crop);
KDC_FE_LOWER_FN(kdc_fe_lower_upsampling);
KDC_FE_LOWER_FN(kdc_fe_lower_repeat_vector);
KDC_FE_LOWER_FN(kdc_fe_lower_global_pool);
KDC_FE_LOWER_FN(kdc_fe_lower_prelu);
KDC_FE_LOWER_FN(kdc_fe_lower_layer_scale);
KDC_FE_LOWER_FN(kdc_fe_lower_thresholded_relu);
KDC_FE_LOWER_FN(kdc_fe_lower_dot_layer);
/* lower_conv.c: convolutions, pooling, Embedding (+ transposed conv shapes). */
KDC_FE_LOWER_FN(kdc_fe_lower_conv);
KDC_FE_LOWER_FN(kdc_fe_lower_conv_transpose);
KDC_FE_LOWER_FN(kdc_fe_lower_pool);
KDC_FE_LOWER_FN(kdc_fe_lower_embedding);
kdc_status kdc_fe_infer_conv_transpose(kdc_infer_args *a);
/* lower_rnn.c: LSTM, GRU and SimpleRNN as one scan over a step function. */
KDC_FE_LOWER_FN(kdc_fe_lower_rnn);
/* One recurrent layer |l| on the sequence |x| from the initial states |st|
 * (|n_states|: 0 = zeros, else h [, c]); writes its outputs to |out|. */
kdc_status kdc_fe_lower_rnn_layer(struct kdc_lower_ctx *c, const kdc_keras_layer *l,
                                  kdc_value_id x, int n_states, const kdc_value_id *st,
                                  kdc_value_id *out);
/* A recurrent layer's gate-packed weight |v| (parameter |p|, its user
 * sharding set) whose layout splits the packed dim: |p| (and its module
 * weight) becomes the per-gate form [.., G, u] split on u, marked
 * gate_packed.  No-op for every other variable. */
kdc_status kdc_fe_rnn_gate_weight(struct kdc_lower_ctx *c, const kdc_keras_var *v,
                                  kdc_value_id p);
/* lower_bidirectional.c: the Bidirectional wrapper (inference and lowering). */
kdc_status kdc_fe_infer_bidirectional(kdc_infer_args *a);
KDC_FE_LOWER_FN(kdc_fe_lower_bidirectional);
/* lower_attention.c: EinsumDense and MultiHeadAttention. */
KDC_FE_LOWER_FN(kdc_fe_lower_einsum_dense);
KDC_FE_LOWER_FN(kdc_fe_lower_mha);
/* lower_time_distributed.c: the TimeDistributed wrapper (time folded into the batch). */
kdc_status kdc_fe_infer_time_distributed(kdc_infer_args *a);
KDC_FE_LOWER_FN(kdc_fe_lower_time_distributed);
/* ... and SpectralNormalization (the wrapped layer at inference, plus vector_u). */
kdc_status kdc_fe_infer_spectral_norm(kdc_infer_args *a);
KDC_FE_LOWER_FN(kdc_fe_lower_spectral_norm);
/* lower_adaptive_pool.c: AdaptiveAverage/MaxPooling1D/2D/3D. */
kdc_status kdc_fe_infer_adaptive_pool(kdc_infer_args *a);
KDC_FE_LOWER_FN(kdc_fe_lower_adaptive_pool);
/* lower_encoding.c: CategoryEncoding and Discretization. */
kdc_status kdc_fe_infer_encoding(kdc_infer_args *a);
KDC_FE_LOWER_FN(kdc_fe_lower_encoding);
/* lower_norm.c: RMSNormalization. */
kdc_status kdc_fe_infer_rmsnorm(kdc_infer_args *a);
KDC_FE_LOWER_FN(kdc_fe_lower_rmsnorm);
/* lower_dot_attention.c: Attention (Luong) and AdditiveAttention (Bahdanau). */
kdc_status kdc_fe_infer_dot_attention(kdc_infer_args *a);
KDC_FE_LOWER_FN(kdc_fe_lower_dot_attention);
/* lower_image.c: Resizing, CenterCrop and the random image augmentation layers
 * (identities at inference; RandomFlip also in train_forward). */
kdc_status kdc_fe_infer_resizing(kdc_infer_args *a);
KDC_FE_LOWER_FN(kdc_fe_lower_resizing);
kdc_status kdc_fe_infer_augment(kdc_infer_args *a);
KDC_FE_LOWER_FN(kdc_fe_lower_augment);
/* jax.image.resize of axis |d| of |x| to |out| elements (|x| unchanged when
 * the size is): one dot_general with a constant (out x in) weight matrix
 * (UpSampling2D bilinear uses it too). */
typedef enum kdc_fe_interp {
  KDC_FE_NEAREST, KDC_FE_BILINEAR, KDC_FE_BICUBIC, KDC_FE_LANCZOS3, KDC_FE_LANCZOS5
} kdc_fe_interp;
kdc_value_id kdc_fe_resize_axis(kdc_func *f, kdc_value_id x, int d, int64_t out,
                                kdc_fe_interp method, bool antialias);
/* Axis |d| of |x| (size L) mapped through the row-major (|on| x L) matrix
 * |w|: result[.., i, ..] = sum_j w[i, j] x[.., j, ..] (a dot_general with a
 * constant; adaptive average pooling and resizing use it). */
kdc_value_id kdc_fe_axis_matrix(kdc_func *f, kdc_value_id x, int d, int64_t on, const float *w);

/* activations.c: Keras 3 activation formulas over IR values. */
/* Applies activation |name| (Keras 3 defaults) to |x|; unknown names give an
 * UNSUPPORTED error naming the layer and config key |key|. */
kdc_status kdc_fe_activation(struct kdc_lower_ctx *c, const kdc_keras_layer *l,
                             const char *key, const char *name, kdc_value_id x,
                             kdc_value_id *out);
bool kdc_fe_activation_known(const char *name);
/* softmax / log_softmax of |x| over |n_axes| axes (max-subtracted). */
kdc_value_id kdc_fe_softmax(kdc_func *f, kdc_value_id x, int n_axes, const int64_t *axes,
                            bool log);
/* keras.activations.elu(x, alpha): x > 0 ? x : alpha * expm1(x), with a
 * gradient free of NaN for large x (activations.c). */
kdc_value_id kdc_fe_elu(kdc_func *f, kdc_value_id x, double alpha);
/* keras.activations.gelu: exact (erf) or the tanh approximation. */
kdc_value_id kdc_fe_gelu(kdc_func *f, kdc_value_id x, bool approximate);
/* keras.activations.relu(x, negative_slope, max_value (<0: None), threshold). */
kdc_value_id kdc_fe_relu(kdc_func *f, kdc_value_id x, double negative_slope,
                         double max_value, bool has_max, double threshold);

#endif
