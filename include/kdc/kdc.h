/*
 * kdc/kdc.h: the public C API of kdc, the Keras distribution compiler
 * (libkdc.so; docs/api.md).  The `kdc` command line and the Python package
 * are clients of it.
 *
 *   compile   a Keras model (file or text) + weights + mesh + layout +
 *             training options -> a plan (loaded in memory, or a plan file)
 *   load      a plan file -> a plan
 *   predict   global arrays in caller buffers, any number of rows
 *   train     the plan's training state: steps, fit epochs, evaluate,
 *             weights by name (global layout), checkpoints
 *   describe  inspect / explain / collectives / memory as text or JSON
 *
 * Errors: every call that can fail returns a kdc_status (kdc/error.h): NULL
 * on success, else an owned object with a code and the same one-line
 * located message `kdc` prints ("model.json: config.layers[3]...").  The
 * API never exits or aborts on user input.
 *
 * ABI: KDC_API_VERSION is the version of this header; kdc_api_version()
 * the library's.  A library serves every header of the same major version
 * (KDC_API_VERSION / 1000); options structs start with |struct_size|
 * (set by their _init function), so fields added later at their end keep
 * older callers working.  Only the functions declared KDC_API are exported.
 *
 * Ownership: an object a kdc_* call creates through an out-pointer
 * (kdc_plan, kdc_trainer, kdc_history, char * text) is the caller's, freed
 * with its _free function (text with kdc_free).  Pointers returned by
 * getters (names, tensor infos' names, warnings) are borrowed: valid while
 * the object they came from lives.  Input buffers are read, never kept;
 * output buffers are the caller's.  One plan (and its trainer) must not be
 * used from two threads at once.
 */
#ifndef KDC_KDC_H
#define KDC_KDC_H

#include <stddef.h>
#include <stdint.h>

#include "kdc/error.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KDC_API_VERSION 1000  /* major * 1000 + minor */

/* The library's KDC_API_VERSION, and kdc's version ("0.1.0"). */
KDC_API int kdc_api_version(void);
KDC_API const char *kdc_version(void);
/* Frees text the API returned (kdc_plan_describe, kdc_model_summary,
 * kdc_compile_file's warnings). */
KDC_API void kdc_free(void *p);

/* ---- arrays ---------------------------------------------------------------- */

#define KDC_MAX_DIMS 8

/* Element types of arrays (the values of kdc's .npy / safetensors types). */
typedef enum kdc_array_dtype {
  KDC_ARRAY_F32 = 0, KDC_ARRAY_F64, KDC_ARRAY_F16, KDC_ARRAY_BF16, KDC_ARRAY_I32,
  KDC_ARRAY_I64, KDC_ARRAY_I8, KDC_ARRAY_U8, KDC_ARRAY_BOOL,
} kdc_array_dtype;

/* "f32", "i64", "bool"...; "?" for an unknown value. */
KDC_API const char *kdc_array_dtype_name(int dtype);

/* A C-contiguous (row-major) array in caller memory. */
typedef struct kdc_array {
  void *data;
  int dtype;                     /* kdc_array_dtype */
  int rank;
  int64_t dims[KDC_MAX_DIMS];
  const char *name;              /* names the array in messages (a file path); may be NULL */
} kdc_array;

/* A plan's input, output, training array or state tensor: GLOBAL shape
 * (dims[0] is the compiled batch for inputs and outputs). */
typedef struct kdc_tensor_info {
  const char *name;              /* borrowed */
  int dtype;
  int rank;
  int64_t dims[KDC_MAX_DIMS];
  uint64_t bytes;
} kdc_tensor_info;

/* ---- compiling ---------------------------------------------------------------- */

typedef struct kdc_compile_options {
  size_t struct_size;            /* sizeof(kdc_compile_options), set by _init */
  /* the model: a file (Keras 3 / tf.keras 2 JSON, TF.js model.json, and
   * whatever else kdc's frontend reads), or its JSON text; with text,
   * |model_path| (may be NULL) names it in messages and locates TF.js shards */
  const char *model_path;
  const char *model_text;
  size_t model_text_len;
  const char *weights_path;      /* .safetensors by Keras variable path, or TF.js model.json */
  int random_init;               /* Keras initialisers even if the model carries weights */
  uint64_t seed;                 /* initialisers and dropout */
  int64_t batch;                 /* the global batch compiled for (default 32) */
  int batch_given;               /* |batch| was chosen by the caller: an InputLayer whose
                                    batch_shape fixes another batch is an error (else the
                                    fixed batch is the plan's) */
  const char *const *input_shapes; /* "[NAME=]D1,D2" per input with unknown dims */
  size_t n_input_shapes;
  /* distribution: |mesh| "2x4" (NULL: one device), |axes| "data,model",
   * a layout (Keras ModelParallel as JSON) from a file or text, and its
   * key matching ("fullmatch" or "search"); no layout: DataParallel */
  const char *mesh, *axes;
  const char *layout_path;
  const char *layout_text;
  size_t layout_text_len;
  const char *layout_match;
  /* training (plans with train_step and evaluate): |loss| as `kdc compile
   * --loss` takes it (one name, L1,L2 or NAME=L,...); NULL: the model's
   * compile_config if any, else a predict-only plan */
  const char *loss;
  const char *optimizer;         /* sgd, adam, adamw, rmsprop */
  double learning_rate;          /* 0: the optimizer's default */
  int from_logits;
  int no_shard_update;
  const char *target;            /* "cpu" (default) or "cuda" */
  int sm;                        /* cuda: 80 (default) or 90 */
  const char *dump_ir_dir;       /* IR after every pass to DIR/NN-pass.kir */
  int print_ir_after_all;        /* IR after every pass on stderr */
  /* GEMM precision on a GPU (`--matmul-precision`): "highest" (default,
   * NULL: fp32, JAX's "highest") or "tf32" (TF32 tensor cores, JAX's GPU
   * default); recorded in the plan; no effect on a CPU plan */
  const char *matmul_precision;
  /* |layout_path| "auto": kdc chooses the layout (docs/layout.md "--layout
   * auto"): a limit per device ("512MiB", "2GB", bytes; NULL: none), the
   * objective ("time", the default, or "memory"), a file to write the chosen
   * layout.json to (atomically; NULL: none) and a machine description for
   * the cost model (NULL: kdc's defaults, the virtual mesh) */
  const char *memory_per_device;
  const char *objective;
  const char *write_layout_path;
  const char *machine_path;
} kdc_compile_options;

typedef struct kdc_run_options {
  size_t struct_size;            /* sizeof(kdc_run_options), set by _init */
  int threads;                   /* 0: every core */
  double collective_timeout_s;   /* 0: 60 */
  const char *cache_dir;         /* compiled-code cache; NULL: $KDC_CACHE_DIR */
  int describe_only;             /* read and check, no machine code: describe only */
  int cpu_only;                  /* run a cuda plan on the CPU */
  /* the process's place in a multi-process job (docs/processes.md);
   * NULL / -1: from KDC_COORDINATOR_ADDRESS, KDC_NUM_PROCESSES,
   * KDC_PROCESS_ID or the MPI launcher, else one process */
  const char *coordinator;
  int num_processes, process_id;
  /* a CUDA plan: the GPU ordinals of this process's devices, "0,1" (NULL:
   * KDC_LOCAL_DEVICE_IDS, Slurm's, else docs/gpu.md's rule) */
  const char *local_device_ids;
  /* the job token of the TCP rendezvous (docs/processes.md "Job token"):
   * a file only its owner may read (NULL: KDC_JOB_TOKEN_FILE, else
   * KDC_JOB_TOKEN, else none: loopback coordinators only) */
  const char *job_token_file;
  /* 1: compile only the kernels of predict (and its scan bodies): `kdc run`
   * of a training plan JITs a third of its code; train_step and evaluate
   * then fail to run (docs/runtime.md, "Compile time") */
  int predict_only;
} kdc_run_options;

KDC_API void kdc_compile_options_init(kdc_compile_options *o);
KDC_API void kdc_run_options_init(kdc_run_options *o);

typedef struct kdc_plan kdc_plan;

/* Compiles and writes the plan file |plan_path| (atomically).  Warnings
 * (layout keys matching nothing, pass notes) are returned in *|warnings|
 * (may be NULL; "" when none; set even on error; kdc_free). */
KDC_API kdc_status kdc_compile_file(const kdc_compile_options *co, const char *plan_path,
                                    char **warnings);
/* Compiles into memory and loads the plan (|ro| may be NULL). */
KDC_API kdc_status kdc_compile(const kdc_compile_options *co, const kdc_run_options *ro,
                               kdc_plan **out);
/* Loads a plan file (|ro| may be NULL).  A plan is a program: load only
 * plans you built or trust. */
KDC_API kdc_status kdc_plan_load(const char *path, const kdc_run_options *ro, kdc_plan **out);
KDC_API void kdc_plan_free(kdc_plan *p);
/* Writes the plan file (the compiled bytes, or a copy of the loaded file). */
KDC_API kdc_status kdc_plan_save(const kdc_plan *p, const char *path);
/* The compile's warnings ("" for a loaded plan). */
KDC_API const char *kdc_plan_warnings(const kdc_plan *p);

KDC_API int64_t kdc_plan_batch(const kdc_plan *p);
KDC_API int64_t kdc_plan_device_count(const kdc_plan *p);
KDC_API int kdc_plan_mesh_rank(const kdc_plan *p);  /* 0: no mesh */
KDC_API const char *kdc_plan_mesh_axis(const kdc_plan *p, int axis, int64_t *size);
KDC_API int kdc_plan_has_training(const kdc_plan *p); /* compiled with a loss */
/* This process's id in its job (0 for one process): process 0 gets outputs. */
KDC_API int kdc_plan_process_id(const kdc_plan *p);
KDC_API size_t kdc_plan_input_count(const kdc_plan *p);
KDC_API size_t kdc_plan_output_count(const kdc_plan *p);
KDC_API kdc_status kdc_plan_input(const kdc_plan *p, size_t i, kdc_tensor_info *out);
KDC_API kdc_status kdc_plan_output(const kdc_plan *p, size_t i, kdc_tensor_info *out);

/* predict on |n_inputs| global arrays of any equal number of rows: in the
 * plan's input order, each with the input's dims after the first (an input
 * of another numeric dtype is converted as Keras converts model inputs).
 * |outputs| (n_outputs = kdc_plan_output_count) are caller buffers of the
 * output's dtype and dims [rows, ...], overlapping no input (their
 * contents are unspecified after an error).  Full batches are read and
 * written in place; a last partial batch is padded. */
KDC_API kdc_status kdc_plan_predict(kdc_plan *p, const kdc_array *inputs, size_t n_inputs,
                                    kdc_array *outputs, size_t n_outputs);

/* ---- describing ---------------------------------------------------------------- */

enum {
  KDC_DESCRIBE_PLAN = 0,         /* `kdc inspect plan` */
  KDC_DESCRIBE_COLLECTIVES = 1,  /* `kdc inspect --collectives` */
  KDC_DESCRIBE_SHARDING = 2,     /* `kdc inspect --sharding NAME` */
  KDC_DESCRIBE_EXPLAIN = 3,      /* `kdc inspect --explain NAME` */
  KDC_DESCRIBE_PTX = 4,          /* `kdc inspect --ptx` */
  KDC_DESCRIBE_JSON = 5,         /* mesh, memory per device, collectives as JSON */
};
/* Text about |p| into *|text| (kdc_free).  |name| for SHARDING, EXPLAIN. */
KDC_API kdc_status kdc_plan_describe(const kdc_plan *p, int what, const char *name, char **text);
/* Same on a plan file without loading its code. */
KDC_API kdc_status kdc_plan_file_describe(const char *path, int what, const char *name,
                                          char **text);
/* 1 when |path| starts like a plan file (its magic), else 0. */
KDC_API int kdc_is_plan_file(const char *path);
/* A Keras model.summary()-like table of a model file, or of its text. */
KDC_API kdc_status kdc_model_summary(const char *path, const char *text, size_t len,
                                     char **out);

/* ---- training ------------------------------------------------------------------ */

/* The training state of a plan compiled with a loss: weights and optimizer
 * slots on the devices.  While it lives, predict and evaluate run with the
 * trained weights; at most one per plan. */
typedef struct kdc_trainer kdc_trainer;
KDC_API kdc_status kdc_trainer_create(kdc_plan *p, kdc_trainer **out);
KDC_API void kdc_trainer_free(kdc_trainer *t);

/* The arrays fit, step and evaluate take: the model inputs (in order), then
 * the labels of the trained outputs (in output order). */
KDC_API size_t kdc_trainer_data_count(const kdc_trainer *t);
KDC_API size_t kdc_trainer_input_count(const kdc_trainer *t);
KDC_API kdc_status kdc_trainer_data(const kdc_trainer *t, size_t i, kdc_tensor_info *out);
/* Per-output losses "<output>_loss" of a model trained on several outputs
 * (at most KDC_MAX_METRICS). */
#define KDC_MAX_METRICS 32
KDC_API size_t kdc_trainer_metric_count(const kdc_trainer *t);
KDC_API const char *kdc_trainer_metric_name(const kdc_trainer *t, size_t j);

typedef struct kdc_fit_progress {
  int64_t epoch, epochs;         /* 0-based epoch of |epochs| */
  int64_t step, steps;           /* steps done in this epoch, of |steps| */
  double batch_loss;
  double loss;                   /* running mean this epoch */
  double val_loss;               /* NaN until evaluated */
  double seconds;                /* since the epoch started */
  size_t n_metrics;
  const double *metrics, *val_metrics; /* val_metrics NULL until evaluated */
} kdc_fit_progress;

typedef struct kdc_fit_options {
  size_t struct_size;            /* set by _init */
  int64_t epochs;                /* default 1 */
  int64_t batch_size;            /* rows per step, <= the plan's batch; 0: the plan's */
  int shuffle;
  uint64_t seed;                 /* of the shuffles */
  double validation_split;       /* the last fraction of the rows; 0: none */
  /* called after every step / epoch (may be NULL) */
  void (*on_batch)(void *user, const kdc_fit_progress *pr);
  void (*on_epoch)(void *user, const kdc_fit_progress *pr);
  void *user;
} kdc_fit_options;
KDC_API void kdc_fit_options_init(kdc_fit_options *o);

/* Keras' History.history: keys "loss", each "<output>_loss", then the
 * "val_" ones; one value per epoch; and kdc's per-step "batch_loss". */
typedef struct kdc_history kdc_history;
KDC_API int64_t kdc_history_epochs(const kdc_history *h);
KDC_API int64_t kdc_history_steps(const kdc_history *h);  /* per epoch */
KDC_API size_t kdc_history_key_count(const kdc_history *h);
KDC_API const char *kdc_history_key(const kdc_history *h, size_t k);
KDC_API const double *kdc_history_values(const kdc_history *h, size_t k); /* epochs values */
KDC_API const float *kdc_history_batch_loss(const kdc_history *h);       /* epochs*steps */
KDC_API void kdc_history_free(kdc_history *h);

/* Keras' fit over |n| global arrays (kdc_trainer_data order) of equal rows;
 * numeric dtypes are converted as `kdc run --fit` converts .npy arrays.
 * *|history| (may be NULL) is set even when a step fails midway. */
KDC_API kdc_status kdc_trainer_fit(kdc_trainer *t, const kdc_array *data, size_t n,
                                   const kdc_fit_options *o, kdc_history **history);
/* One optimizer step on at most the plan's batch of rows; *|loss| before it. */
KDC_API kdc_status kdc_trainer_step(kdc_trainer *t, const kdc_array *data, size_t n,
                                    double *loss);
/* Keras' evaluate: row-weighted mean loss over batches of |batch_size|
 * (0: the plan's); |metrics| (may be NULL) gets kdc_trainer_metric_count
 * per-output losses. */
KDC_API kdc_status kdc_trainer_evaluate(kdc_trainer *t, const kdc_array *data, size_t n,
                                        int64_t batch_size, double *loss, double *metrics);

/* The state tensors: weights ("d1/kernel", Keras variable paths, in the
 * plan's order), then the optimizer's ("adam/iteration", slots), global
 * shapes as Keras holds them. */
KDC_API size_t kdc_trainer_state_count(const kdc_trainer *t);
KDC_API kdc_status kdc_trainer_state(const kdc_trainer *t, size_t k, kdc_tensor_info *out,
                                     int *is_weight);
/* Copies state |name| (gathered from the devices) into |out|, or sets it
 * on every device from |in|: dtype and dims must match exactly. */
KDC_API kdc_status kdc_trainer_get(kdc_trainer *t, const char *name, kdc_array *out);
KDC_API kdc_status kdc_trainer_set(kdc_trainer *t, const char *name, const kdc_array *in);
/* Every state tensor to / from one .safetensors file (any mesh reads it).
 * Keras' own files by name: load reads a .keras, .weights.h5 or legacy .h5
 * (the optimizer's variables too when the file has them); save writes a
 * .weights.h5 (weights only, as Keras' save_weights) or a .keras archive
 * (kdc_trainer_save_keras). */
KDC_API kdc_status kdc_trainer_save(kdc_trainer *t, const char *path);
KDC_API kdc_status kdc_trainer_load(kdc_trainer *t, const char *path);
/* A Keras 3 file Keras can load: a .keras archive (the model's config with
 * its compile_config, metadata, the weights and the optimizer's variables)
 * or a .weights.h5 (the optimizer's variables when |optimizer|); arrays in
 * the global layout whatever the mesh.  The plan must come from a Keras 3
 * config for an archive (kdc_trainer_check_keras says so before training). */
KDC_API kdc_status kdc_trainer_save_keras(kdc_trainer *t, const char *path, int optimizer);
KDC_API kdc_status kdc_trainer_check_keras(const kdc_trainer *t, const char *path);
/* |path| names one of Keras' own files (.keras, .h5, .hdf5). */
KDC_API int kdc_is_keras_file(const char *path);
/* Only the weights of a checkpoint (optimizer tensors ignored): predict
 * with a checkpoint's weights. */
KDC_API kdc_status kdc_trainer_load_weights(kdc_trainer *t, const char *path);

/* Several processes: ends this process's part in the job (a bounded
 * barrier; a nonzero |exit_code| ends the job).  A no-op for one process. */
KDC_API void kdc_job_finish(int exit_code);
/* The same for a process that failed with |why| (its error): over TCP the
 * other processes report it as the job's cause and exit with |exit_code|. */
KDC_API void kdc_job_fail(int exit_code, const char *why);

#ifdef __cplusplus
}
#endif

#endif
