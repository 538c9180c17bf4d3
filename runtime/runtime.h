/*
 * runtime/runtime.h: loading and running plan.bin on the CPU, and the table
 * of contents of runtime/.  The runtime knows plans, not Keras or passes.
 *
 * Ownership (STYLE.md 7): kdc_rt_plan_load gives the caller one reference;
 * kdc_rt_plan_retain adds one, kdc_rt_plan_release drops one and destroys
 * the plan (JIT code, arena, threads, mapped file) at the last.  Pointers
 * returned by getters (tensor infos, names, text) are borrowed and live as
 * long as the plan.
 *
 * Devices: a plan is ONE SPMD program for every device of its mesh
 * (kdc_rt_plan_device_count; 1 for a plan compiled without a mesh).  The
 * `cpu` device set runs them as virtual devices in this process, in lock
 * step on one thread pool, with collectives through shared memory
 * (runtime/comm.h).  The caller passes and receives GLOBAL arrays: inputs
 * are split by their sharding, outputs gathered (docs/runtime.md).
 *
 * Threading: a plan owns one scratch arena per device, so runs of one plan
 * must not overlap (callers serialise; different plans may run
 * concurrently, but OpenBLAS's thread count is process-wide: see
 * docs/runtime.md, "Threads").
 */
#ifndef KDC_RUNTIME_H
#define KDC_RUNTIME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "kdc/status.h"
#include "runtime/program.h"

typedef struct kdc_rt_plan kdc_rt_plan;

/* Name, dtype, shape and byte size of a function input or output. */
typedef kdc_prog_tensor kdc_rt_tensor_info;

typedef struct kdc_rt_options {
  int n_threads;  /* threads for kernels and BLAS, caller included; 0 = online cores */
  double collective_timeout_s; /* a device that does not reach a collective within this
                                  fails the run naming it; 0 = 60 s */
  int check_replicas;          /* 1: every run checks that the replicas of each output
                                  agree (always on in builds without NDEBUG) */
  int n_processes, process_id; /* > 1: this process runs devices [id*nd/n, (id+1)*nd/n) of
                                  the mesh and collectives go between processes over |net|
                                  (comm_p2p.c, docs/processes.md); process 0 receives the
                                  outputs.  0 = one process, every device */
  struct rt_net *net;          /* n_processes > 1: the job's transport, borrowed
                                  (kdc_rt_procs_init: kdc_rt_procs.net) */
  int target;                  /* KDC_RT_TARGET_*: where a plan compiled with --target
                                  cuda runs (docs/gpu.md) */
  int profile;                 /* 1: time every step of every run on the CPU
                                  (kdc_rt_plan_profile_print); 2: by the
                                  timing thread's CPU clock (with 1 thread on
                                  a loaded machine: the work, not the wait) */
  int describe_only;           /* 1: read and check the plan without JIT-compiling its
                                  code (`kdc inspect`, tests that count steps): every
                                  run of it fails */
  const char *only_func;       /* non-NULL: JIT only this entry function's kernels (and its
                                  scan bodies'); running any other function fails */
  const char *cache_dir;       /* the compiled-code cache (jit_cache.c): NULL = the
                                  environment variable KDC_CACHE_DIR, "" or unset =
                                  no cache; `kdc run/fit --cache-dir DIR` */
  const int *local_device_ids; /* a CUDA plan: the GPU ordinals of this process's devices,
                                  one per device (`--local-device-ids`, runtime/place.h);
                                  NULL = the rule of docs/gpu.md */
  int n_local_device_ids;
  const char *local_device_ids_from; /* names their source in messages */
  struct kdc_plan_file *file;  /* non-NULL: the plan at |path| already opened and checked
                                  (kdc_api_place): the load takes it over instead of mapping
                                  and hashing the file again, and closes it, also when it
                                  fails */
} kdc_rt_options;

enum {
  KDC_RT_TARGET_PLAN = 0,      /* the plan's: GPUs for a CUDA plan (runtime/cuda/) */
  KDC_RT_TARGET_CPU = 1,       /* always the CPU (a CUDA plan carries CPU code too):
                                  `kdc inspect`, and the CPU side of GPU-vs-CPU tests */
};

/* ---- plan_load.c ------------------------------------------------------------ */

/* Opens and validates |path| (container, then every section with bounds-
 * checked readers), JIT-compiles its code for this CPU and allocates the
 * arena.  Any inconsistency is KDC_INVALID_INPUT naming the file, the
 * section and the byte offset; never a crash.  |opt| may be NULL. */
kdc_status kdc_rt_plan_load(const char *path, kdc_rt_plan **out);
kdc_status kdc_rt_plan_load_with(const char *path, const kdc_rt_options *opt,
                                 kdc_rt_plan **out);
void kdc_rt_plan_retain(kdc_rt_plan *p);
void kdc_rt_plan_release(kdc_rt_plan *p);

size_t kdc_rt_plan_func_count(const kdc_rt_plan *p);
const char *kdc_rt_plan_func_name(const kdc_rt_plan *p, size_t func);
/* Index of the function called |name|, or -1. */
int kdc_rt_plan_find_func(const kdc_rt_plan *p, const char *name);
size_t kdc_rt_plan_input_count(const kdc_rt_plan *p, size_t func);
const kdc_rt_tensor_info *kdc_rt_plan_input(const kdc_rt_plan *p, size_t func, size_t i);
size_t kdc_rt_plan_output_count(const kdc_rt_plan *p, size_t func);
const kdc_rt_tensor_info *kdc_rt_plan_output(const kdc_rt_plan *p, size_t func, size_t i);
/* The METADATA and IR_TEXT sections as C strings ("" when absent). */
const char *kdc_rt_plan_metadata(const kdc_rt_plan *p);
const char *kdc_rt_plan_ir_text(const kdc_rt_plan *p);
/* METADATA's "matmul_precision" (`kdc compile --matmul-precision`): "tf32"
 * lets a CUDA plan's GEMMs use TF32 tensor cores; "highest" otherwise
 * (also when absent: plans before the flag).  No effect on the CPU. */
const char *kdc_rt_plan_matmul_precision(const kdc_rt_plan *p);
/* Threads the plan runs with. */
int kdc_rt_plan_threads(const kdc_rt_plan *p);
/* The plan's device mesh, and its number of devices (>= 1). */
const kdc_prog_mesh *kdc_rt_plan_mesh(const kdc_rt_plan *p);
int64_t kdc_rt_plan_device_count(const kdc_rt_plan *p);

/* ---- exec.c ----------------------------------------------------------------- */

/* Runs function |func| on every device: |inputs[i]| holds the GLOBAL array
 * kdc_rt_plan_input(p, func, i) (->bytes bytes, row-major, the declared
 * dtype; read, never written), |outputs[i]| receives global output i.
 * Buffers must not overlap each other.  Each input is split by its
 * sharding: a replicated input, or a piece that is contiguous in the global
 * array (a split of the leading dim), is read in place; other pieces are
 * copied into staging buffers made at load.  Outputs are gathered likewise
 * (pieces written in place when contiguous); an output replicated over an
 * axis is taken from coordinate 0 of that axis.  Allocates nothing.
 * Errors: KDC_INVALID_INPUT (missing buffer), KDC_UNAVAILABLE (a device
 * missed a collective), KDC_INTERNAL (replicas of an output disagree, when
 * checked). */
kdc_status kdc_rt_plan_run_func(kdc_rt_plan *p, size_t func, const void *const *inputs,
                                void *const *outputs);
/* kdc_rt_plan_run_func on function 0 ("predict" in plans kdc compiles). */
kdc_status kdc_rt_plan_run(kdc_rt_plan *p, const void *const *inputs, void *const *outputs);
/* Runs |func| on per-device LOCAL buffers, no split or gather:
 * |inputs[d][i]| holds device d's piece of input i (->local_bytes bytes),
 * |outputs[d][o]| receives device d's piece of output o.  No output buffer
 * may overlap any device's input buffer: a device may write its piece of
 * an output (an all_gather made in place, gather_inplace.c) while a peer
 * still reads its inputs.  Devices holding the same piece of an output
 * only collectives write may pass one buffer (shared replicas, state.c).
 * For tests and for callers that already hold shards.  Allocates nothing. */
kdc_status kdc_rt_plan_run_local(kdc_rt_plan *p, size_t func, const void *const *const *inputs,
                                 void *const *const *outputs);

/* ---- state.c: training state on the devices (docs/training.md, "Fit") ------ */

typedef struct kdc_rt_train kdc_rt_train;
/* The training state of |p| (which needs train_step): every device's piece
 * of each trainable weight (initialised from the plan), <opt>/iteration and
 * the optimizer slots (zeros), kept on the devices between steps (ping-pong
 * buffers, no per-step allocation or copy).  While it lives, every function
 * of |p| (predict, evaluate) runs with the trained weights; destroying it
 * gives |p| its original weights back.  Holds a reference to |p|.  At most
 * one kdc_rt_train per plan at a time (they would share its weight pointers). */
kdc_status kdc_rt_train_create(kdc_rt_plan *p, kdc_rt_train **out);
void kdc_rt_train_destroy(kdc_rt_train *t);
/* train_step's data inputs (model inputs, labels, "sample_mask"), GLOBAL. */
size_t kdc_rt_train_data_count(const kdc_rt_train *t);
const kdc_rt_tensor_info *kdc_rt_train_data(const kdc_rt_train *t, size_t i);
/* One optimizer step on a global batch (|data| in kdc_rt_train_data order);
 * |*loss| = the batch loss before the update. */
kdc_status kdc_rt_train_step(kdc_rt_train *t, const void *const *data, float *loss);
/* evaluate on the same data inputs (matched by name) with the current weights. */
kdc_status kdc_rt_train_evaluate(kdc_rt_train *t, const void *const *data, float *loss);
/* Several trained outputs: train_step and evaluate also return each
 * output's unweighted loss, "<output>_loss" (Keras 3 CompileLoss' metrics),
 * as f32 scalar results after "loss"; 0 otherwise.  At most
 * KDC_RT_MAX_METRICS. */
#define KDC_RT_MAX_METRICS 32
size_t kdc_rt_train_metric_count(const kdc_rt_train *t);
const char *kdc_rt_train_metric_name(const kdc_rt_train *t, size_t j);
/* kdc_rt_train_step / _evaluate that also write the per-output losses
 * (kdc_rt_train_metric_count floats) to |metrics| (may be NULL). */
kdc_status kdc_rt_train_step_metrics(kdc_rt_train *t, const void *const *data, float *loss,
                                     float *metrics);
kdc_status kdc_rt_train_evaluate_metrics(kdc_rt_train *t, const void *const *data, float *loss,
                                         float *metrics);
/* Data already where the kernels run (GPU memory of a CUDA plan, host
 * memory otherwise; fit's staging, bench_plan --resident): _data_upload
 * puts each local device's piece of data input |i|'s global array |g| into
 * new memory dev[d] (p->nd slots; d outside this process's devices stays
 * NULL; _data_free frees them); _bind_data_dev makes the next train_steps
 * read input |i| from dev[d] (kept by the caller; NULL unbinds), and
 * their data[i] is then not read (may be NULL). */
kdc_status kdc_rt_train_data_upload(kdc_rt_train *t, size_t i, const void *g, void **dev);
void kdc_rt_train_data_free(kdc_rt_train *t, void **dev);
void kdc_rt_train_bind_data_dev(kdc_rt_train *t, size_t i, void *const *dev);
kdc_rt_plan *kdc_rt_train_plan(const kdc_rt_train *t);

/* Resident data (runtime/resident.c; bench_plan --resident, docs/gpu.md):
 * function |func|'s inputs copied once where the kernels run (each local
 * device's piece; GPU memory for a CUDA plan, host memory otherwise),
 * with room for its outputs there.  _run runs |func| on them: no host <->
 * device copy, the results stay there (_output copies device |dev|'s piece
 * of output |o| to the host).  Destroy before the plan. */
typedef struct kdc_rt_resident kdc_rt_resident;
kdc_status kdc_rt_resident_create(kdc_rt_plan *p, size_t func, const void *const *inputs,
                                  kdc_rt_resident **out);
kdc_status kdc_rt_resident_run(kdc_rt_resident *r);
kdc_status kdc_rt_resident_output(kdc_rt_resident *r, size_t o, int64_t dev, void *dst);
void kdc_rt_resident_destroy(kdc_rt_resident *r);
/* The state tensors (train_step's results but "loss"), GLOBAL shapes. */
size_t kdc_rt_train_state_count(const kdc_rt_train *t);
const kdc_rt_tensor_info *kdc_rt_train_state(const kdc_rt_train *t, size_t k);
bool kdc_rt_train_state_is_weight(const kdc_rt_train *t, size_t k);
/* State |k| is a recurrent weight (or slot) kept per gate [.., G, u]
 * (kdc_prog_tensor.gate_packed): checkpoints hold it as [.., G*u]. */
bool kdc_rt_train_state_gate_packed(const kdc_rt_train *t, size_t k);
/* Distinct buffers holding the current value of state |k| in this process:
 * one per local device, or one per distinct piece when its replicas share
 * (state.c, "Shared replicas"). */
size_t kdc_rt_train_state_copies(const kdc_rt_train *t, size_t k);
/* Gathers state |k| into |global| (->bytes), or sets it on every device
 * (of this process).  Several processes: get needs kdc_rt_train_gather
 * first, and only process 0 has every piece. */
void kdc_rt_train_state_get(const kdc_rt_train *t, size_t k, void *global);
void kdc_rt_train_state_set(kdc_rt_train *t, size_t k, const void *global);
/* Several processes (docs/processes.md): every process calls it; process 0
 * receives the current state pieces of every other process's devices,
 * bounded by the collective timeout.  A no-op for one process. */
kdc_status kdc_rt_train_gather(kdc_rt_train *t);
/* This process's id in the job (0 for one process). */
int kdc_rt_train_process(const kdc_rt_train *t);

/* ---- fit.c: Keras' fit / evaluate loop (docs/training.md, "Fit") -------------- */

typedef struct kdc_rt_fit_progress {
  int64_t epoch, epochs;     /* 0-based epoch of |epochs| */
  int64_t step, steps;       /* steps done in this epoch, of |steps| */
  float batch_loss;          /* the last batch's loss */
  double loss;               /* Keras' running mean (weighted by rows) this epoch */
  double val_loss;           /* NaN until evaluated (on_epoch with a validation split) */
  double seconds;            /* since the epoch started */
  size_t n_metrics;          /* per-output losses (kdc_rt_train_metric_name) */
  const double *metrics;     /* their running means this epoch, like loss */
  const double *val_metrics; /* NULL until evaluated */
} kdc_rt_fit_progress;

typedef struct kdc_rt_fit_options {
  int64_t epochs;
  bool shuffle;              /* a permutation per epoch from (seed, epoch) */
  uint64_t seed;
  double validation_split;   /* the last fraction of the rows, before shuffling; 0 = none */
  int64_t batch_size;        /* rows per step (and per validation batch), at most the
                                plan's batch: smaller steps are padded and masked (exactly
                                Keras' step on that many rows); 0 = the plan's batch */
  void (*on_batch)(void *user, const kdc_rt_fit_progress *pr);
  void (*on_epoch)(void *user, const kdc_rt_fit_progress *pr);
  void *user;
} kdc_rt_fit_options;

typedef struct kdc_rt_history {
  int64_t epochs, steps;     /* epochs completed, steps per epoch */
  double *loss;              /* per epoch (Keras History.history["loss"]) */
  double *val_loss;          /* per epoch, NULL without a validation split */
  float *batch_loss;         /* [epoch * steps + step] */
  size_t n_metrics;          /* per-output losses "<output>_loss" (kdc_rt_train_metric_name) */
  double *metrics;           /* [epoch * n_metrics + j] (History.history["<output>_loss"]) */
  double *val_metrics;       /* the same on the validation rows, NULL without a split */
  int64_t staged;            /* steps whose batch was uploaded while the previous step ran
                                (fit.c, "Staging"); 0 when not staged */
} kdc_rt_history;

/* Trains |t| for o->epochs over |rows| rows: |arrays| holds one GLOBAL
 * array per kdc_rt_train_data input except "sample_mask", |rows| rows each
 * (the input's bytes / batch per row).  The last partial batch is padded
 * and masked (exact), never dropped.  |h| is filled (free it with
 * kdc_rt_history_free) even when a step fails midway. */
kdc_status kdc_rt_fit(kdc_rt_train *t, const void *const *arrays, int64_t rows,
                      const kdc_rt_fit_options *o, kdc_rt_history *h);
/* Keras' evaluate: the row-weighted mean of the batch losses. */
kdc_status kdc_rt_fit_evaluate(kdc_rt_train *t, const void *const *arrays, int64_t rows,
                               double *loss);
/* The same in batches of |batch_size| rows (0: the plan's batch; larger
 * than the plan's batch is an error); |metrics| (may be NULL) gets the
 * per-output losses' row-weighted means (kdc_rt_train_metric_count). */
kdc_status kdc_rt_fit_evaluate_batch(kdc_rt_train *t, const void *const *arrays, int64_t rows,
                                     int64_t batch_size, double *loss);
kdc_status kdc_rt_fit_evaluate_metrics(kdc_rt_train *t, const void *const *arrays, int64_t rows,
                                       int64_t batch_size, double *loss, double *metrics);
void kdc_rt_history_free(kdc_rt_history *h);
/* The shuffle of epoch |epoch|: a permutation of [0, n) into |perm|. */
void kdc_rt_fit_permutation(uint64_t seed, int64_t epoch, int64_t n, int64_t *perm);

/* ---- checkpoint.c: state <-> one safetensors file ---------------------------- */

/* Writes every state tensor (Keras names: "d1/kernel", "adam/iteration",
 * "adam/d1_kernel_momentum") gathered from the devices into |path|,
 * atomically (a temporary file in the same directory, fsync, rename).
 * Several processes: every process calls it (kdc_rt_train_gather), process
 * 0 writes the file once. */
kdc_status kdc_rt_train_save(kdc_rt_train *t, const char *path);
/* Loads |path| (any mesh or layout wrote it) into the state: every state
 * tensor must be present with its dtype and global shape. */
kdc_status kdc_rt_train_load(kdc_rt_train *t, const char *path);
/* Loads only the weights of |path| (a --save-weights checkpoint or any
 * safetensors file with the plan's weight names, global shapes); other
 * tensors of the file, optimizer state included, are ignored: `kdc run
 * PLAN --input X --initial-weights W` (predict with a checkpoint). */
kdc_status kdc_rt_train_load_weights(kdc_rt_train *t, const char *path);
/* Sets every state tensor present in the safetensors image |bytes| (the
 * plan's TRAIN_STATE section: optimizer tensors restored at compile time
 * from a checkpoint, docs/training.md); |name| names it in messages.
 * kdc_rt_train_create calls it. */
kdc_status kdc_rt_train_load_initial(kdc_rt_train *t, const char *name, const void *bytes,
                                     size_t size);

/* Keras' own files (checkpoint.c, docs/training.md "Keras files"), through
 * the plan's KERAS section.  check: the plan can write them (|archive|: a
 * .keras needs a Keras 3 config).  save: a Keras 3 weights file (|archive|
 * false; the optimizer's variables when |optimizer|) or a .keras archive
 * (config.json, metadata.json, model.weights.h5 with the optimizer when the
 * config has a compile_config), atomically; global arrays, any mesh.  load:
 * a .weights.h5 or .keras into the state (weights; the optimizer when the
 * file has one), everything checked before anything is set. */
kdc_status kdc_rt_keras_check(const kdc_rt_plan *p, bool archive);
kdc_status kdc_rt_keras_save(kdc_rt_plan *p, kdc_rt_train *t, const char *path, bool archive,
                             bool optimizer);
kdc_status kdc_rt_keras_load(kdc_rt_plan *p, kdc_rt_train *t, const char *path);
/* Keras 3's optimizer variables (`optimizer/vars/<i>`) of a KERAS section's
 * "optimizer" |opt| and "vars" |vars| (docs/plan-format.md) matched to the
 * training state names |has_state| knows: iterations (index 0), the
 * learning rate's index in *|lr_index| (-1: a schedule), then the slots
 * block by block over the trainable variables the plan trains.  *|out|
 * (heap, kdc_rt_opt_vars_free) is NULL when |opt| is NULL; a name the
 * plan lacks is an internal error.  kdc compile uses it to restore a
 * Keras file's optimizer state, kdc run to read and write it.
 * |lso|: the layout of a LossScaleOptimizer around that optimizer (what
 * Keras' compile makes for mixed_float16): its own iteration, learning
 * rate (0), step_counter and dynamic_scale first (indices 0-3), the inner
 * optimizer's variables after them (4 on; Keras also writes those as
 * `optimizer/inner_optimizer/vars/<index - 4>`).  The scale is the plan's
 * exponent state (scale = 2^(15 + e), passes/train_step.c); without the
 * plan's loss-scale state (an f32 plan) the four are KDC_OPT_SKIP. */
struct json_object;
typedef enum kdc_rt_opt_kind {
  KDC_OPT_STATE = 0, /* the state tensor |state| as it is */
  KDC_OPT_SCALE,     /* f32 dynamic_scale <-> the i32 exponent state |state| */
  KDC_OPT_ZERO_I32,  /* the LossScaleOptimizer's own iteration: written 0, never read */
  KDC_OPT_ZERO_F32,  /* its own learning rate: written 0, never read */
  KDC_OPT_SKIP,      /* a file's variable this plan keeps no state for */
} kdc_rt_opt_kind;
typedef struct kdc_rt_opt_var {
  int index;    /* optimizer/vars/<index> */
  char *state;  /* the state tensor's name ("adam/d1_kernel_momentum"), or NULL */
  kdc_rt_opt_kind kind;
} kdc_rt_opt_var;
enum { KDC_LSO_VARS = 4 };
kdc_status kdc_rt_keras_opt_layout(struct json_object *opt, struct json_object *vars,
                                   bool (*has_state)(void *user, const char *name), void *user,
                                   bool lso, kdc_rt_opt_var **out, size_t *n, int *lr_index);
void kdc_rt_opt_vars_free(kdc_rt_opt_var *v, size_t n);
/* The plan's loss-scale exponent for the LossScaleOptimizer's
 * dynamic_scale at |h5p| of |h| (a float scalar): an error unless it is a
 * power of two in range. */
struct kdc_h5;
kdc_status kdc_rt_keras_read_lso_exponent(struct kdc_h5 *h, const char *h5p, int32_t *exponent);

/* ---- describe.c ------------------------------------------------------------- */

/* `kdc inspect plan.bin`: the mesh, buffers and sizes, each device's peak
 * memory, inputs/outputs/weights with their shardings, every step with its
 * buffer ranges (collectives with their device groups and bytes per device,
 * SHARDING.md 4), the metadata and the IR text. */
void kdc_rt_plan_describe(const kdc_rt_plan *p, FILE *out);
/* `kdc inspect --collectives plan.bin`: the mesh and, per function, every
 * collective step with its axes, device groups and bytes per device. */
void kdc_rt_plan_describe_collectives(const kdc_rt_plan *p, FILE *out);
/* The same for programs (the C API's KDC_DESCRIBE_JSON, Python's
 * Plan.collectives / Plan.memory): {"mesh": {axis: size}, "devices": n,
 * "memory_per_device": {"arena", "weights", "inputs_outputs", "total"},
 * "collectives": [{"function", "step", "kind", "axes", "dtype", "in",
 * "out", "group_size", "bytes_per_device", "groups"}]}. */
void kdc_rt_plan_describe_json(const kdc_rt_plan *plan, FILE *out);
/* `kdc inspect --sharding NAME plan.bin` (describe_sharding.c): how the
 * input, output or weight called |name| is laid out over the devices (a grid
 * of blocks for rank 2, a list of blocks otherwise, each with the device ids
 * holding it).  KDC_INVALID_INPUT when no tensor has that name. */
kdc_status kdc_rt_plan_describe_sharding(const kdc_rt_plan *p, const char *name, FILE *out);
/* A plan loaded with kdc_rt_options.profile: the wall time of every step
 * of |func| per run (step by step: the step on every device; device-
 * parallel: device 0's share of its segment), averaged over the runs since
 * the last print, with each step as `kdc inspect` shows it; then resets the
 * counts (|out| NULL: only resets them).  Prints a one-line note when the
 * plan was loaded without it. */
void kdc_rt_plan_profile_print(kdc_rt_plan *p, size_t func, FILE *out);

/* ======================================================================
 * Internal: shared by the files of runtime/.
 * ==================================================================== */

/* A JIT'd kernel: the rows [begin, end) of its output on the device whose
 * mesh coordinates are |coords| (one i64 per mesh axis). */
typedef void (*kdc_rt_kernel_fn)(void **args, const int64_t *coords, int64_t begin, int64_t end);

/* ---- jit.c: LLVM ORC LLJIT over the CODE section ----------------------------- */

typedef struct rt_jit rt_jit;
/* What the program says about the code: each kernel's work (element-ops
 * of its largest step, times the iterations of a LOOP that runs it), which
 * picks its pipeline, and the threads the compilation may use. */
typedef struct rt_jit_hints {
  const double *work;       /* [kernel index], n_kernels entries */
  uint32_t n_kernels;
  const bool *needed;       /* [kernel index]: compile it (NULL: every kernel); the
                               others are left out of every partition */
  int n_threads;            /* compile threads, caller included (< 1: 1) */
} rt_jit_hints;
/* Kernels of at least this much work per run get O3 with unrolling; the
 * others O2 without unrolling (docs/runtime.md, "Compile time"). */
#define RT_JIT_HOT_WORK (1 << 18)
/* Where a load's compilation went (thread CPU seconds, summed over the
 * compile threads; wall_s: the whole of rt_jit_create). */
typedef struct rt_jit_times {
  double check_s, parse_s, opt_s, codegen_s, link_s, wall_s;
  size_t functions, parts, hot_parts;
} rt_jit_times;
/* Parses and verifies |bitcode|, then compiles it for the host CPU as a
 * fixed list of partitions (hot kernels with O3, the rest with O2 without
 * unrolling; MergeFunctions inside each), on hints->n_threads threads, and
 * JITs the objects.  The objects depend on the bitcode and the hints' work,
 * never on the thread count.  With |cache_dir| (NULL = none) the objects
 * come from, or go to, the compiled-code cache (jit_cache.c); the code is
 * the same either way.  |hints| may be NULL (every kernel cold, 1 thread).
 * Errors name |file|, the "code" section and its byte |offset|. */
kdc_status rt_jit_create(const void *bitcode, size_t size, const char *file, uint64_t offset,
                         const char *cache_dir, const rt_jit_hints *hints, rt_jit **out);
/* The address of kernel |name|, or NULL. */
kdc_rt_kernel_fn rt_jit_lookup(rt_jit *j, const char *name);
/* Vector stores the optimiser made non-temporal (streaming kernels). */
size_t rt_jit_nontemporal_stores(const rt_jit *j);
/* Function bodies MergeFunctions removed as identical to another one (the
 * wrappers of identical kernels stay, as tail calls to the first). */
size_t rt_jit_merged_functions(const rt_jit *j);
/* true if the object came from the compiled-code cache (nothing compiled). */
bool rt_jit_from_cache(const rt_jit *j);
/* The load's compile times (zero but wall_s and check_s from the cache). */
const rt_jit_times *rt_jit_get_times(const rt_jit *j);
void rt_jit_destroy(rt_jit *j);

/* ---- jit_cache.c: the persistent compiled-code cache ------------------------ */

typedef struct rt_jit_key { uint64_t w[2]; } rt_jit_key;
typedef struct rt_jit_stats { uint64_t n_nontemporal, n_merged; } rt_jit_stats;
/* The cache directory for a load: |opt|->cache_dir if set, else
 * $KDC_CACHE_DIR; NULL when that is unset or empty (no cache). */
const char *rt_jit_cache_dir(const kdc_rt_options *opt);
/* The key of |code| compiled as |desc| says (triple, CPU, features,
 * pipeline, LLVM and kdc code-generation versions). */
void rt_jit_cache_key(const void *code, size_t size, const char *desc, rt_jit_key *out);
/* A valid entry of |key| in |dir|: true with *out_obj (inside *out_file,
 * which the caller frees) of *out_size bytes and the statistics stored with
 * it; false when there is none or it is truncated, corrupt or foreign. */
bool rt_jit_cache_get(const char *dir, const rt_jit_key *key, void **out_file,
                      const void **out_obj, size_t *out_size, rt_jit_stats *out_stats);
/* Waits for, then holds, the exclusive lock of |key| in |dir| (creating
 * the directory), so that one process compiles what others are about to
 * load: a handle for rt_jit_cache_unlock, or -1 (no lock, no error). */
int rt_jit_cache_lock(const char *dir, const rt_jit_key *key);
void rt_jit_cache_unlock(int lock);
/* Stores |obj| under |key|, atomically; any failure means no entry. */
void rt_jit_cache_put(const char *dir, const rt_jit_key *key, const void *obj, size_t size,
                      const rt_jit_stats *stats);

/* ---- pool.c: a small persistent thread pool -------------------------------- */

typedef struct rt_pool rt_pool;
enum { RT_POOL_MAX_TASKS = 0xffff };
/* One task of a job: |task| in [0, n_tasks). */
typedef void (*rt_task_fn)(void *ctx, int64_t task);
/* |n_threads| counts the caller: n_threads - 1 workers are started. */
kdc_status rt_pool_create(int n_threads, rt_pool **out);
void rt_pool_destroy(rt_pool *pool);
/* Runs fn(ctx, t) for every t < |n_tasks| (<= RT_POOL_MAX_TASKS) on the
 * workers and the calling thread; returns when all are done. */
void rt_pool_run(rt_pool *pool, rt_task_fn fn, void *ctx, int64_t n_tasks);

/* ---- mesh.c: device ids, coordinates, groups, pieces ----------------------- */

/* The conventions of ir/spmd.c, on the plan's mesh (the runtime does not
 * link ir/). */
void rt_mesh_coords(const kdc_prog_mesh *m, int64_t device, int64_t *out_coords);
int64_t rt_mesh_device(const kdc_prog_mesh *m, const int64_t *coords);
int64_t rt_mesh_axes_size(const kdc_prog_mesh *m, int n, const uint8_t *axes);
int64_t rt_mesh_group_index(const kdc_prog_mesh *m, const int64_t *coords, int n,
                            const uint8_t *axes);
/* |device|'s group over |axes|, in group-index order. */
void rt_mesh_group_members(const kdc_prog_mesh *m, int64_t device, int n, const uint8_t *axes,
                           int64_t *out);
/* Element offsets of |device|'s piece of |t| (one per dim). */
void rt_mesh_piece_offsets(const kdc_prog_mesh *m, const kdc_prog_tensor *t, int64_t device,
                           int64_t *out);
/* The device whose copy of |device|'s piece of |t| is the canonical one:
 * coordinate 0 on every axis |t| does not split. */
int64_t rt_mesh_canonical(const kdc_prog_mesh *m, const kdc_prog_tensor *t, int64_t device);
/* "[[0,1,2,3],[4,5,6,7]]": every group over |axes| (ir/spmd.c's form). */
char *rt_mesh_groups_str(const kdc_prog_mesh *m, int n, const uint8_t *axes, char *buf,
                         size_t len);

/* ---- box.c: copies of rectangular blocks between row-major tensors -------- */

/* A block |block| at |src_off| in a tensor of |src_dims| goes to |dst_off|
 * in a tensor of |dst_dims|.  rt_box_init merges the trailing dims that are
 * whole in both into one contiguous run: the copy is |rows| memcpys of
 * |run| bytes. */
typedef struct rt_box {
  int nouter;                          /* dims iterated row by row */
  int64_t outer[KDC_IO_MAX_RANK];
  int64_t src_stride[KDC_IO_MAX_RANK], dst_stride[KDC_IO_MAX_RANK]; /* bytes */
  int64_t src_base, dst_base;          /* bytes */
  int64_t rows;
  size_t run;
} rt_box;
void rt_box_init(rt_box *b, int rank, size_t elem, const int64_t *block, const int64_t *src_dims,
                 const int64_t *src_off, const int64_t *dst_dims, const int64_t *dst_off);
/* Byte offsets of row |r| in the source and the destination. */
void rt_box_row(const rt_box *b, int64_t r, int64_t *out_src, int64_t *out_dst);
/* Copies rows [r0, r1). */
void rt_box_copy(const rt_box *b, void *dst, const void *src, int64_t r0, int64_t r1);

/* ---- the plan object (plan_load.c, devices.c) ------------------------------- */

/* How one function input or output meets the caller's global array on
 * every device (shard_io.c). */
typedef enum rt_io_mode {
  RT_IO_SHARED,   /* replicated: every device uses the global array itself */
  RT_IO_SLICE,    /* the piece is contiguous in the global array: used in place */
  RT_IO_STAGED,   /* copied to / from a staging buffer made at load */
} rt_io_mode;

typedef struct rt_io {
  const kdc_prog_tensor *t;
  rt_io_mode mode;          /* of the canonical devices */
  uint64_t *offset;         /* per device: byte offset of its piece (RT_IO_SLICE) */
  void **staging;           /* per device: its staging buffer, or NULL */
  int64_t *canonical;       /* per device: the device whose copy is gathered */
  int64_t *piece_off;       /* [device * KDC_IO_MAX_RANK + dim]: element offsets of its piece */
} rt_io;

/* Device groups of one collective step, computed at load. */
typedef struct rt_coll_groups {
  int64_t k, n_groups;
  int64_t *members;         /* [group * k + j]: member of group index j */
  int64_t *sorted;          /* [group * k + j]: members by increasing device id */
  int64_t *group_of;        /* per device */
  int64_t *index_of;        /* per device: its group index */
  int64_t *peer;            /* collective_permute: per device, its source or -1 */
} rt_coll_groups;

/* A collective whose result is shared (gather_inplace.c): the steps
 * [first, last] that touch |loc| (an arena range) are redirected.  An
 * all_gather made in place: |loc| is its operand, which the steps from the
 * GEMM computing it compute in the device's slice of the shared result
 * (an output) instead; |shared|: |loc| is its result, which one buffer per
 * group (|buf|, allocated at load) holds for every member. */
typedef enum rt_inplace_kind {
  RT_INPLACE_GATHER,        /* an all_gather made in place */
  RT_INPLACE_SHARED,        /* one result buffer per group */
  RT_INPLACE_VIEW,          /* an all_to_all read where its operands are: |loc| is its
                               result, which the GEMMs reading it read as a column block
                               of the members' operands stacked in one buffer (|ld|) */
} rt_inplace_kind;
typedef struct rt_inplace {
  uint32_t first, last, coll;
  kdc_prog_loc loc;
  rt_inplace_kind kind;
  bool free;                /* made in place, the step orders nothing: no device reads in
                               this run what another wrote before it (rt_skip) */
  bool on;                  /* this run */
  char *buf;
  int64_t ld;               /* RT_INPLACE_VIEW: the leading dimension of the view */
} rt_inplace;
enum { RT_INPLACE_PER_STEP = 4 };
/* A collective step made in place, this run: it moves nothing, and either
 * still ends a device-parallel segment (the lock step orders writes before
 * peers read them) or not even that. */
typedef enum rt_skip { RT_SKIP_NONE, RT_SKIP_MEET, RT_SKIP_FREE } rt_skip;

/* A GEMM step run once over every local device's rows (gemm_stack.c):
 * the stacked A (nd m x k) and C (nd m x n), and the rows per OpenBLAS
 * call (nd m: one call, split by columns over the threads; fewer: chunks
 * of rows spread over the threads). */
typedef struct rt_gemm_stack {
  float *a, *c;
  int64_t chunk;
} rt_gemm_stack;

typedef struct rt_func {
  void ***step_args;        /* [device * n_steps + step]: a kernel step's argument array */
  void **argv;              /* storage for all of them */
  rt_coll_groups *groups;   /* per step (collective steps only) */
  rt_io *in, *out;
  const void **in_ptr;      /* [device * n_inputs + i]: bound per run */
  void **out_ptr;           /* [device * n_outputs + o] */
  void **in_dev, **out_dev; /* CUDA plans: [device * n + i] a GPU buffer bound instead of
                               in_ptr / out_ptr (training state), or NULL (cuda/exec.c) */
  uint64_t *prof_ns;        /* profiling: per step, nanoseconds summed over prof_runs runs */
  uint64_t prof_runs;
  /* all_gathers into a shared replica made in place (gather_inplace.c): */
  rt_inplace *inplace;      /* the candidates, found at load */
  size_t n_inplace;
  uint32_t *inplace_of;     /* [step * RT_INPLACE_PER_STEP + k]: 1 + a candidate whose range
                               the step touches, or 0 */
  uint8_t *inplace_skip;    /* per step, this run: 0, or a collective made in place that
                               moves nothing (rt_skip) */
  char **inplace_dst;       /* [device * n_steps + candidate]: where the device's range is
                               instead, or NULL */
  size_t inplace_made[4];   /* in the last run, per rt_share kind */
  rt_gemm_stack *stack;     /* per step, or NULL: GEMMs that may run stacked over the
                               devices (gemm_stack.c); a NULL |a|: not that step */
} rt_func;

struct rt_comm;
struct rt_cuda;

/* A result buffer seen by the current collective call (exec.c): valid when
 * |seq| is the call's sequence number. */
typedef struct rt_dst_slot {
  const void *ptr;
  uint64_t seq;
} rt_dst_slot;

struct kdc_rt_plan {
  int refs;
  char *path;
  kdc_plan_file *file;      /* kept open: weights point into it */
  kdc_arena *arena;         /* the decoded program */
  kdc_program prog;
  kdc_rt_kernel_fn *kernels;
  rt_func *funcs;
  char *metadata, *ir_text;
  rt_jit *jit;
  rt_pool *pool;
  int n_threads;
  bool device_parallel;     /* devices >= threads: one task per device, BLAS 1 thread */
  bool describe_only;       /* loaded to be described: no code, nothing runs */
  bool *func_compiled;      /* [func]: its kernels are compiled (NULL: every function) */
  bool check_replicas;
  bool profile;             /* kdc_rt_options.profile (exec.c times every step) */
  bool profile_cpu;         /* ... by the thread's CPU clock (profile 2) */
  double timeout_s;
  /* devices (devices.c) */
  int64_t nd;
  int64_t *coords;          /* [device * KDC_PROG_MAX_AXES + axis] */
  char *scratch;            /* nd arenas of arena_stride bytes, 64-byte aligned */
  uint64_t arena_stride;
  const void **dev_weights; /* [device * n_weights + w]: the device's piece */
  void **weight_pieces;     /* buffers owned for split weights */
  size_t n_weight_pieces;
  struct rt_comm *comm;
  struct rt_cuda *cuda;     /* a CUDA plan on GPUs (cuda/exec.c; dev_weights then hold GPU
                               addresses), or NULL: the cpu device set */
  /* host work overlapping a CUDA run (fit.c's staged uploads): called once
   * the run's work is issued, before it waits; NULL: none */
  kdc_status (*during_run)(void *user);
  void *during_user;
  uint64_t coll_seq;        /* collectives called so far */
  rt_dst_slot *dst_seen;    /* exec.c: result buffers of the current collective call, an
                               open-addressing set of dst_seen_cap (a power of 2 >= 2 nd) */
  uint64_t dst_seen_cap;
  /* processes (docs/processes.md): this process runs devices [d0, d1) */
  int64_t d0, d1;
  int n_procs, proc_id;
  int *local_device_ids;    /* kdc_rt_options': GPU ordinals of the local devices, or NULL */
  int n_local_device_ids;
  char *local_device_ids_from;
};

/* ---- devices.c: per-device state, made once at load ------------------------- */

/* Coordinates, arenas (|arena_bytes| each), weight pieces, argument arrays,
 * collective groups and I/O staging for every device of p->prog.mesh. */
kdc_status rt_devices_create(kdc_rt_plan *p, uint64_t arena_bytes);
void rt_devices_destroy(kdc_rt_plan *p);
/* Memory of device |dev| that kernels read and write: host memory on the
 * cpu device set, GPU memory for a CUDA plan (cuda/exec.c).  Allocations
 * are zeroed and 64-byte aligned; put/get copy from / to the host. */
kdc_status rt_mem_alloc(kdc_rt_plan *p, int64_t dev, size_t bytes, void **out);
void rt_mem_free(kdc_rt_plan *p, int64_t dev, void *ptr);
kdc_status rt_mem_put(kdc_rt_plan *p, int64_t dev, void *dst, const void *src, size_t bytes);
kdc_status rt_mem_get(kdc_rt_plan *p, int64_t dev, void *dst, const void *src, size_t bytes);

/* ---- shard_io.c: global arrays <-> device pieces ---------------------------- */

/* Plans the I/O of function |rf| (modes, offsets, staging buffers). */
void rt_io_create(kdc_rt_plan *p, const kdc_prog_func *f, rt_func *rf);
void rt_io_destroy(kdc_rt_plan *p, const kdc_prog_func *f, rt_func *rf);
/* Binds the caller's global arrays to every device's in_ptr/out_ptr and
 * splits the staged inputs. */
void rt_io_split(kdc_rt_plan *p, const kdc_prog_func *f, rt_func *rf, const void *const *inputs,
                 void *const *outputs);
/* Gathers the staged outputs into the caller's arrays; with |check|,
 * compares every replica with its canonical copy first. */
kdc_status rt_io_gather(kdc_rt_plan *p, const kdc_prog_func *f, rt_func *rf,
                        void *const *outputs, bool check);

/* ---- exec.c ------------------------------------------------------------------ */

/* Runs the steps of |func| on every device with the bound in_ptr/out_ptr. */
kdc_status rt_exec_steps(kdc_rt_plan *p, size_t func);
/* Do only COLLECTIVE steps write output |o| of |f|, each the whole buffer?
 * Then devices holding the same piece may bind one buffer for it: the
 * executor hands the backend NULL for every later device (comm.h), so the
 * result is written once (state.c's shared replicas). */
bool rt_exec_output_shareable(const kdc_prog_func *f, uint32_t o);

/* ---- gather_inplace.c: all_gathers into a shared replica made in place ---- */

/* Finds |f|'s candidates (an all_gather into a whole output whose operand
 * a GEMM and kernels after it compute; an all_gather or all_reduce into the
 * arena that only kernels and GEMMs read) and allocates their arrays and
 * shared buffers. */
void rt_inplace_create(const kdc_rt_plan *p, const kdc_prog_func *f, rt_func *rf);
void rt_inplace_destroy(rt_func *rf);
/* Before a run of |f| (out_ptr bound): turns on every in-place candidate
 * whose groups are local and bind one result buffer each, and every
 * shared-result candidate when all devices are local; counts them in
 * rf->inplace_made. */
void rt_inplace_bind(kdc_rt_plan *p, const kdc_prog_func *f, rt_func *rf);
/* Where step |s| of device |dev| finds |l| this run instead of its own
 * place (the device's piece of a shared result), or NULL. */
void *rt_inplace_redirect(const rt_func *rf, const kdc_prog_func *f, int64_t dev, uint32_t s,
                          const kdc_prog_loc *l);
/* The leading dimension GEMM step |s| reads |l| with this run instead of
 * the plan's (an all_to_all result read where its operands are), or 0. */
int64_t rt_inplace_ld(const rt_func *rf, uint32_t s, const kdc_prog_loc *l);
/* exec.c: where device |dev| finds |l| of |f| in this run's bindings
 * (its own buffers: no redirection). */
void *rt_exec_resolve(const kdc_rt_plan *p, const kdc_prog_func *f, const rt_func *rf,
                      int64_t dev, const kdc_prog_loc *l);
/* Tests: |on| false runs every all_gather as a collective (default on). */
void rt_exec_test_inplace(bool on);
/* Tests: |on| false also runs every GEMM device by device (exec.c). */
bool rt_inplace_on(void);

/* ---- gemm_stack.c: GEMMs stacked over the local devices ----------------------- */

/* Is |st| a GEMM that may run stacked: op(A) = A, contiguous rows, B of at
 * least 512 KiB, at least 2^19 flops per device? */
bool rt_stack_candidate(const kdc_prog_step *st);
/* The stacking buffers of candidate |g| over |nd| devices, in bytes. */
uint64_t rt_stack_bytes(const kdc_prog_gemm_step *g, int64_t nd);
/* At load, per function of a multi-device CPU plan: the candidates that
 * give bitwise the devices' own GEMMs (whole or in chunks of rows), with
 * their buffers; the others stay per device. */
void rt_stack_create(const kdc_rt_plan *p, const kdc_prog_func *f, rt_func *rf);
void rt_stack_destroy(rt_func *rf, uint32_t n_steps);
/* Share |t| of |threads| of stacked GEMM |g| over |nl| devices, |chunk|
 * rows per call: C = A op(B), A (nl m) x k. */
enum { RT_GEMM_ALIGN = 64 };
void rt_stack_gemm_block(const kdc_prog_gemm_step *g, int64_t chunk, int64_t nl, int threads,
                         int64_t t, const float *A, const float *B, float *C);
/* What one buffer for several devices saved in the last run of |func|:
 * all_gathers made in place (moved nothing), collectives with one result
 * per group, GEMM steps over a B that every device reads from one buffer
 * run as one GEMM on the devices' stacked A (exec.c). */
typedef enum rt_share {
  RT_SHARE_INPLACE, RT_SHARE_RESULT, RT_SHARE_GEMM_B, RT_SHARE_VIEW, RT_SHARE_KINDS
} rt_share;
size_t rt_exec_inplace_count(const kdc_rt_plan *p, size_t func, rt_share kind);

/* ---- blas_core.c: OpenBLAS's kernels for this CPU ----------------------------- */

/* Call first in main(): when a DYNAMIC_ARCH OpenBLAS fell back to its
 * oldest kernels (Prescott) on a CPU it does not know but that runs
 * AVX-512 or AVX2, sets OPENBLAS_CORETYPE and executes the program again
 * with |argv|.  Does nothing when OPENBLAS_CORETYPE is set or
 * KDC_BLAS_CORE=keep. */
void kdc_rt_blas_select_core(char **argv);
/* The OpenBLAS core in use (e.g. "SkylakeX"). */
const char *kdc_rt_blas_core(void);

#endif
