/*
 * End to end, training-mode layers (docs/training.md, "Training-mode
 * forward"):
 *
 * BatchNormalization (examples/small_cnn: Conv2D -> BatchNormalization ->
 * ..., Adam lr 0.01 or SGD lr 0.1, batch 16, its fixed training set of 40
 * rows = batches of 16, 16 and a masked 8):
 *   - the train_step ABI: bn/moving_mean and bn/moving_variance are state
 *     results right after the trainable weights;
 *   - one step on one device = the reference interpreter (relative 1e-5);
 *   - 3 epochs (SGD) on meshes 1, 8 (data parallel) and 2x4 (batch over
 *     data, conv1/bn channels over model) give the same batch losses and
 *     final state, moving statistics included (relative 1e-5);
 *   - data parallel: the statistics are all-reduced over data (the f32[8]
 *     all_reduces of train_step, counted);
 *   - a batch of 8 rows padded to 16 (sample_mask) = a plan compiled for 8
 *     rows: loss and new moving statistics;
 *   - `kdc run --fit` (SGD lr 0.1) = the independent TF.js reference
 *     (tests/reference/train.js: tfjs' own BatchNormalization layer in
 *     training mode, gradients checked by central differences): every batch
 *     loss within 1e-4 relative, final weights and moving statistics within
 *     1e-5 + 1e-4 |ref|;
 *   - --save-weights holds the moving statistics under Keras' names and
 *     --initial-weights resumes from them (SGD, 2x4 -> 1 device = 3 epochs);
 *     evaluate after training uses the trained moving statistics (= the
 *     interpreter's evaluate over the checkpoint's weights).
 * Noise layers (the MNIST MLP with its Dropout replaced):
 *   - GaussianNoise's samples are sqrt(2) erfinv(v) of kdc's uniform stream,
 *     against erfinv computed here in double (Newton on erf), and have
 *     mean 0 and variance 1 over 4096 samples;
 *   - GaussianNoise, GaussianDropout, AlphaDropout and Dropout with a
 *     noise_shape train to the same losses and state on meshes 1, 8 and 2x4.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <math.h>

#include "e2e/e2e_fit_util.h"
#include "e2e_util.h"
#include "frontend/frontend.h"
#include "ir/ir.h"
#include "passes/passes.h"
#include "runtime/runtime.h"

enum { ROWS = 40, B = 16, EPOCHS = 3, XROW = 16 * 16 * 3 };

static kdc_npy_array tx, ty; /* examples/small_cnn/train_{x,y}.npy */

static void load_data(void) {
  char *x = e2e_src("examples/small_cnn/train_x.npy"), *y = e2e_src("examples/small_cnn/train_y.npy");
  assert_null(kdc_npy_read(x, &tx));
  assert_null(kdc_npy_read(y, &ty));
  assert_int_equal(tx.dims[0], ROWS);
  free(x), free(y);
}

/* Compiles |model| (a path) with weights |weights| and optimizer |opt|;
 * mesh/axes/layout may be NULL. */
static char *compile(const char *model, const char *weights, const char *tag, const char *batch,
                     const char *mesh, const char *axes, const char *layout, const char *opt,
                     const char *lr) {
  char name[160];
  snprintf(name, sizeof name, "%s-%s-%s-%s.plan", tag, opt, mesh ? mesh : "1", batch);
  return e2e_compile_cce(name, model, weights, batch, opt, lr, mesh, axes, layout);
}

static char *cnn_compile(const char *batch, const char *mesh, const char *axes,
                         const char *layout, const char *opt, const char *lr) {
  char *m = e2e_src("examples/small_cnn/model.json");
  char *w = e2e_src("examples/small_cnn/weights.safetensors");
  char *plan = compile(m, w, "cnn", batch, mesh, axes, layout, opt, lr);
  free(m), free(w);
  return plan;
}

/* small_cnn with Adam lr 0.01 (the TF.js reference's optimizer). */
static char *cnn(const char *batch, const char *mesh, const char *axes, const char *layout) {
  return cnn_compile(batch, mesh, axes, layout, "adam", "0.01");
}

/* small_cnn with SGD lr 0.1, for the mesh comparisons: Adam's first steps
 * move every weight by about +-lr whatever the gradient's size, so a
 * gradient that is rounding noise (its sum's order differs between meshes)
 * becomes a 1e-4 difference; SGD keeps differences at rounding level. */
static char *cnn_sgd(const char *mesh, const char *axes, const char *layout) {
  return cnn_compile("16", mesh, axes, layout, "sgd", "0.1");
}

static char *cnn_layout(void) {
  return e2e_write_text("cnn_layout.json",
                    "{\"batch_dim_name\": \"data\", \"layout_map\": {"
                    "\"conv1/kernel\": [null, null, null, \"model\"], \"conv1/bias\": [\"model\"], "
                    "\"bn/gamma\": [\"model\"], \"bn/beta\": [\"model\"], "
                    "\"bn/moving_mean\": [\"model\"], \"bn/moving_variance\": [\"model\"]}}\n");
}

static void cnn_fit(const char *plan, int epochs, const char *init, const char *save, e2e_run *r) {
  const void *arrays[2] = {tx.data, ty.data};
  e2e_fit(plan, arrays, ROWS, 0, 0, epochs, init, save, r);
}

/* train_step's data inputs bound by name: the model input, the labels, the
 * mask (their order in the ABI is the parameters' order). */
static void bind_data(kdc_rt_train *t, const void *x, const void *y, const void *mask,
                      const void **data) {
  assert_int_equal(kdc_rt_train_data_count(t), 3);
  for (size_t i = 0; i < 3; i++) {
    const char *name = kdc_rt_train_data(t, i)->name;
    data[i] = !strcmp(name, "sample_mask") ? mask : !strcmp(name, "head") ? y : x;
  }
}

/* The frontend + training passes of small_cnn for batch |b| (as kdc compile). */
static kdc_module *cnn_module(int64_t b, kdc_keras_model **km) {
  char *model = e2e_src("examples/small_cnn/model.json");
  char *w = e2e_src("examples/small_cnn/weights.safetensors");
  kdc_module *mod = NULL;
  assert_null(kdc_frontend_load(model, km));
  kdc_lower_options lo = {.batch = b, .train_forward = true};
  assert_null(kdc_frontend_lower(*km, &lo, &mod));
  assert_null(kdc_frontend_bind_weights(*km, mod, w, 0));
  kdc_train_options to;
  kdc_train_options_init(&to, KDC_LOSS_CCE, KDC_OPT_ADAM);
  to.optimizer.learning_rate = 0.01;
  to.sample_mask = true;
  assert_null(kdc_pass_build_training(mod, &to));
  free(model), free(w);
  return mod;
}

/* Interprets |f| with inputs/labels/mask/state bound by name; weights from
 * the module (or from |ck| when not NULL). */
static void interpret(kdc_module *mod, kdc_func *f, const float *x, const float *y,
                      const float *mask, kdc_safetensors *ck, kdc_tensor *out) {
  static float zeros[4096];
  int32_t iter = 0;
  kdc_tensor *args = calloc(f->n_params + 1, sizeof *args);
  for (size_t i = 0; i < f->n_params; i++) {
    const kdc_node *nd = kdc_ir_node(f, f->params[i]);
    const char *name = nd->attr.param.name;
    args[i].type = nd->type;
    if (nd->attr.param.kind == KDC_PARAM_INPUT) args[i].data = (void *)x;
    else if (!strcmp(name, "sample_mask")) args[i].data = (void *)mask;
    else if (nd->attr.param.kind == KDC_PARAM_LABEL) args[i].data = (void *)y;
    else if (strstr(name, "/iteration")) args[i].data = &iter;
    else if (nd->attr.param.kind == KDC_PARAM_STATE) {
      assert_true(kdc_type_numel(&nd->type) <= 4096);
      args[i].data = zeros;
    } else if (ck) {
      const kdc_st_tensor *t = kdc_safetensors_find(ck, name);
      assert_non_null(t);
      args[i].data = (void *)t->data;
    } else {
      const kdc_weight *w = kdc_ir_module_find_weight(mod, name);
      assert_non_null(w);
      args[i].data = w->data;
    }
  }
  assert_null(kdc_ir_interpret(f, args, f->n_params, out));
  free(args);
}

static void test_bn_abi_and_step(void **s) {
  (void)s;
  kdc_keras_model *km = NULL;
  kdc_module *mod = cnn_module(B, &km);
  kdc_func *f = kdc_ir_module_find_func(mod, "train_step");
  assert_non_null(f);
  /* ABI: 10 trainable weights, then the moving statistics, then adam/iteration */
  assert_true(f->n_results > 13);
  assert_string_equal(f->result_names[9], "head/bias");
  assert_string_equal(f->result_names[10], "bn/moving_mean");
  assert_string_equal(f->result_names[11], "bn/moving_variance");
  assert_string_equal(f->result_names[12], "adam/iteration");
  float mask[B];
  for (int i = 0; i < B; i++) mask[i] = 1;
  kdc_tensor out[64];
  assert_true(f->n_results <= 64);
  interpret(mod, f, tx.data, ty.data, mask, NULL, out);
  /* the moving statistics moved: 0.99 old + 0.01 batch */
  const kdc_weight *mm = kdc_ir_module_find_weight(mod, "bn/moving_mean");
  assert_memory_not_equal(out[10].data, mm->data, 32);

  char *p1 = cnn("16", NULL, NULL, NULL);
  e2e_step_vs_interpreter(p1, tx.data, ty.data, mask, f, out, "BN");
  kdc_ir_module_destroy(mod);
  kdc_frontend_free(km);
  free(p1);
}

static void test_bn_meshes(void **s) {
  (void)s;
  char *layout = cnn_layout();
  char *p1 = cnn_sgd(NULL, NULL, NULL), *p8 = cnn_sgd("8", NULL, NULL);
  char *p24 = cnn_sgd("2x4", "data,model", layout);
  e2e_run r1, r8, r24;
  cnn_fit(p1, EPOCHS, NULL, NULL, &r1);
  assert_int_equal(r1.h.steps, 3);
  cnn_fit(p8, EPOCHS, NULL, NULL, &r8);
  e2e_same_run(&r8, &r1, 0, 1e-5, "BN mesh 8");
  cnn_fit(p24, EPOCHS, NULL, NULL, &r24);
  e2e_same_run(&r24, &r1, 0, 1e-5, "BN mesh 2x4");
  assert_true(r1.h.loss[EPOCHS - 1] < r1.h.loss[0]);
  e2e_run_free(&r1), e2e_run_free(&r8), e2e_run_free(&r24);
  free(p1), free(p8), free(p24), free(layout);
}

/* all_reduce steps over data of |func| whose result is |bytes| bytes */
static int count_all_reduce(const char *plan, const char *func, uint64_t bytes) {
  kdc_rt_plan *p = NULL;
  kdc_rt_options ro = {.describe_only = 1}; /* counting steps needs no code */
  assert_null(kdc_rt_plan_load_with(plan, &ro, &p));
  const kdc_prog_func *f = &p->prog.funcs[kdc_rt_plan_find_func(p, func)];
  int n = 0;
  for (uint32_t s = 0; s < f->n_steps; s++) {
    const kdc_prog_step *st = &f->steps[s];
    n += st->kind == KDC_STEP_COLLECTIVE && st->coll.kind == KDC_COLL_ALL_REDUCE &&
         st->coll.dst.bytes == bytes;
  }
  kdc_rt_plan_release(p);
  return n;
}

/* Data parallel: the batch statistics are partial sums over the split batch,
 * all-reduced over data by the partitioner.  The f32[8] (bn's channels)
 * all_reduces of train_step before combine_collectives: forward 3 (sum of
 * x, the row count -- a partial scalar broadcast to [8] --, sum of squared
 * deviations), backward 2 (the batch-statistics terms of d x) and the
 * gradients of bn/gamma, bn/beta and conv1/bias = 8.  Combined: sum of x
 * and the row count are independent, one f32[16]; the squared deviations
 * need the mean and the two backward terms depend on each other (the
 * variance's cotangent feeds the mean's), so those 3 stay f32[8]; the
 * three small gradients join the other weights' gradients (< 64 KiB) in
 * one all_reduce.  predict (moving statistics) has none. */
static void test_bn_collectives(void **s) {
  (void)s;
  char *p8 = cnn("16", "8", NULL, NULL);
  int c8 = count_all_reduce(p8, "train_step", 32);
  fprintf(stderr, "BN data parallel: %d f32[8] all_reduces in train_step\n", c8);
  assert_int_equal(c8, 3);
  assert_int_equal(count_all_reduce(p8, "train_step", 64), 1); /* sum x + row count */
  assert_int_equal(e2e_count_colls(p8, "predict", -1, NULL, false) +
                   e2e_count_colls(p8, "predict", -1, NULL, true), 0);
  e2e_result r;
  e2e_kdc(&r, "inspect", p8, "--collectives", NULL);
  assert_int_equal(r.status, 0);
  assert_non_null(strstr(r.out, "all_reduce[data] f32[8] -> f32[8]"));
  free(p8);
}

/* rows [0, n) padded to the plan's batch: the loss and the state */
static void step_rows(const char *plan, int n, float *loss, float *mm, float *mv) {
  kdc_rt_train *t = NULL;
  kdc_rt_plan *p = e2e_plan_load(plan);
  assert_null(kdc_rt_train_create(p, &t));
  static float xb[B * XROW], yb[B * 10];
  float mask[B] = {0};
  memset(xb, 0, sizeof xb), memset(yb, 0, sizeof yb);
  memcpy(xb, tx.data, sizeof(float) * XROW * (size_t)n);
  memcpy(yb, ty.data, sizeof(float) * 10 * (size_t)n);
  for (int i = 0; i < n; i++) mask[i] = 1;
  const void *data[3];
  bind_data(t, xb, yb, mask, data);
  assert_null(kdc_rt_train_step(t, data, loss));
  for (size_t k = 0; k < kdc_rt_train_state_count(t); k++) {
    const char *name = kdc_rt_train_state(t, k)->name;
    if (!strcmp(name, "bn/moving_mean")) kdc_rt_train_state_get(t, k, mm);
    if (!strcmp(name, "bn/moving_variance")) kdc_rt_train_state_get(t, k, mv);
  }
  kdc_rt_train_destroy(t);
  kdc_rt_plan_release(p);
}

static void test_bn_partial_batch(void **s) {
  (void)s;
  char *layout = cnn_layout();
  char *p16 = cnn("16", NULL, NULL, NULL), *p8 = cnn("8", NULL, NULL, NULL);
  char *p24 = cnn("16", "2x4", "data,model", layout);
  float l16, l8, l24, mm16[8], mv16[8], mm8[8], mv8[8], mm24[8], mv24[8];
  step_rows(p16, 8, &l16, mm16, mv16);
  step_rows(p8, 8, &l8, mm8, mv8);
  step_rows(p24, 8, &l24, mm24, mv24);
  double worst = fmax(e2e_rel(l16, l8), e2e_rel(l24, l8));
  for (int c = 0; c < 8; c++) {
    worst = fmax(worst, fmax(e2e_rel(mm16[c], mm8[c]), e2e_rel(mv16[c], mv8[c])));
    worst = fmax(worst, fmax(e2e_rel(mm24[c], mm8[c]), e2e_rel(mv24[c], mv8[c])));
  }
  if (worst > 1e-6) fprintf(stderr, "BN masked batch vs batch 8: %.3g\n", worst);
  assert_true(worst <= 1e-6);
  free(p16), free(p8), free(p24), free(layout);
}

static void test_bn_keras_reference(void **s) {
  (void)s;
  char *plan = cnn_sgd(NULL, NULL, NULL);
  char *x = e2e_src("examples/small_cnn/train_x.npy"), *y = e2e_src("examples/small_cnn/train_y.npy");
  char *hist = e2e_path("cnn_hist.json"), *final = e2e_path("cnn_final.safetensors");
  e2e_result r;
  e2e_kdc(&r, "run", plan, "--fit", "--x", x, "--y", y, "--epochs", "3", "--batch-size", "16",
          "--history", hist, "--save-weights", final, NULL);
  if (r.status) fprintf(stderr, "%s", r.err);
  assert_int_equal(r.status, 0);
  char *ref_hist = e2e_src("examples/small_cnn/train_sgd_history.json");
  char *ref_final = e2e_src("examples/small_cnn/train_sgd_final.safetensors");
  static const char *const names[] = {"conv1/kernel", "conv1/bias", "bn/gamma", "bn/beta",
                                      "conv2/kernel", "conv2/bias", "dw/kernel", "dw/bias",
                                      "head/kernel", "head/bias", "bn/moving_mean",
                                      "bn/moving_variance"};
  e2e_check_reference(hist, ref_hist, final, ref_final, names, 12, EPOCHS, 3, "BN vs TF.js");
  free(plan), free(x), free(y), free(hist), free(final), free(ref_hist);
  free(ref_final);
}

static void test_bn_checkpoint(void **s) {
  (void)s;
  char *layout = cnn_layout();
  char *p1 = cnn_sgd(NULL, NULL, NULL), *p24 = cnn_sgd("2x4", "data,model", layout);
  char *ck = e2e_path("cnn_ck.safetensors");
  e2e_run full, first, rest;
  cnn_fit(p1, EPOCHS, NULL, NULL, &full);
  cnn_fit(p24, 1, NULL, ck, &first);
  cnn_fit(p1, EPOCHS - 1, ck, NULL, &rest);
  e2e_same_run(&rest, &full, 1, 1e-5, "BN resumed on 1 device");
  kdc_safetensors *sf = NULL;
  assert_null(kdc_safetensors_open(ck, &sf));
  assert_non_null(kdc_safetensors_find(sf, "bn/moving_mean"));
  assert_non_null(kdc_safetensors_find(sf, "bn/moving_variance"));
  assert_non_null(kdc_safetensors_find(sf, "SGD/iteration"));
  /* evaluate after one epoch on 2x4 = the interpreter's evaluate with the
   * checkpoint's weights (moving statistics included) */
  kdc_rt_train *t = NULL;
  kdc_rt_plan *p = e2e_plan_load(p24);
  assert_null(kdc_rt_train_create(p, &t));
  assert_null(kdc_rt_train_load(t, ck));
  const void *arrays[2] = {tx.data, ty.data};
  double got = 0;
  assert_null(kdc_rt_fit_evaluate(t, arrays, B, &got));
  kdc_keras_model *km = NULL;
  kdc_module *mod = cnn_module(B, &km);
  float mask[B];
  for (int i = 0; i < B; i++) mask[i] = 1;
  kdc_tensor out[1];
  kdc_func *ev = kdc_ir_module_find_func(mod, "evaluate");
  interpret(mod, ev, tx.data, ty.data, mask, sf, out);
  float want = *(float *)out[0].data;
  double before = 0;
  kdc_rt_train_destroy(t);
  t = NULL;
  assert_null(kdc_rt_train_create(p, &t)); /* the plan's initial weights */
  assert_null(kdc_rt_fit_evaluate(t, arrays, B, &before));
  fprintf(stderr, "BN evaluate: trained %.6f (interpreter %.6f), initial %.6f\n", got, want, before);
  assert_true(e2e_rel(got, want) <= 1e-5);
  assert_true(e2e_rel(before, want) > 1e-4);
  free(out[0].data);
  kdc_rt_train_destroy(t);
  kdc_rt_plan_release(p);
  kdc_ir_module_destroy(mod);
  kdc_frontend_free(km);
  kdc_safetensors_close(sf);
  e2e_run_free(&full), e2e_run_free(&first), e2e_run_free(&rest);
  free(p1), free(p24), free(ck), free(layout);
}

/* `--batch-size 8` on a plan compiled for 16 = a plan compiled for 8
 * (BatchNormalization's statistics over the 8 real rows; 40 rows = 5 steps
 * per epoch), through the runtime (SGD: losses and state) and the CLI
 * (--fit history, --evaluate). */
static void test_batch_size_smaller(void **s) {
  (void)s;
  char *p16 = cnn_sgd(NULL, NULL, NULL);
  char *p8 = cnn_compile("8", NULL, NULL, NULL, "sgd", "0.1");
  const void *arrays[2] = {tx.data, ty.data};
  e2e_run r16, r8;
  e2e_fit(p16, arrays, ROWS, 0.2, 8, 2, NULL, NULL, &r16);
  e2e_fit(p8, arrays, ROWS, 0.2, 0, 2, NULL, NULL, &r8);
  assert_int_equal(r8.h.steps, 4);
  e2e_same_run(&r16, &r8, 0, 1e-6, "--batch-size 8 on a batch-16 plan");
  e2e_run_free(&r16), e2e_run_free(&r8);
  char *x = e2e_src("examples/small_cnn/train_x.npy"), *y = e2e_src("examples/small_cnn/train_y.npy");
  e2e_result a, b;
  e2e_kdc(&a, "run", p16, "--evaluate", "--x", x, "--y", y, "--batch-size", "8", NULL);
  e2e_kdc(&b, "run", p8, "--evaluate", "--x", x, "--y", y, NULL);
  assert_int_equal(a.status, 0);
  assert_int_equal(b.status, 0);
  assert_string_equal(a.out, b.out);
  e2e_kdc(&a, "run", p16, "--fit", "--x", x, "--y", y, "--batch-size", "5", "--epochs", "1", NULL);
  e2e_kdc(&b, "run", p16, "--fit", "--x", x, "--y", y, "--batch-size", "17", NULL);
  assert_int_equal(a.status, 0);
  assert_non_null(strstr(a.out, "8 steps"));
  assert_int_equal(b.status, 2);
  assert_non_null(strstr(b.err, "--batch-size 17 is larger than the plan's compiled batch 16"));
  free(x), free(y), free(p16), free(p8);
}

/* ---- noise layers on the MNIST MLP ------------------------------------- */

enum { MROWS = 48 };
static float mx[MROWS * 784], my[MROWS * 10];

static void make_mlp_data(void) {
  uint64_t s = 777;
  for (int i = 0; i < MROWS * 784; i++) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    mx[i] = (float)((s >> 40) & 0xffff) / 65536.0f;
  }
  for (int r = 0; r < MROWS; r++) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    for (int c = 0; c < 10; c++) my[r * 10 + c] = c == (int)((s >> 33) % 10) ? 1.0f : 0.0f;
  }
}

/* examples/mnist_mlp/model.json with its Dropout(0.4) replaced by class
 * |cls| and config fragment |cfg| (for `"rate": 0.4, "seed": null,
 * "noise_shape": null`), written next to the MLP's weights' copy. */
static char *mlp_variant(const char *cls, const char *cfg) {
  char *src = e2e_src("examples/mnist_mlp/model.json");
  void *raw = NULL;
  size_t n = 0;
  assert_null(kdc_file_read_all(src, &raw, &n));
  const char *text = raw;
  const char *c0 = strstr(text, "\"class_name\": \"Dropout\"");
  const char *f0 = strstr(text, "\"rate\": 0.4, \"seed\": null, \"noise_shape\": null");
  assert_non_null(c0);
  assert_non_null(f0);
  assert_true(c0 < f0);
  char name[96];
  snprintf(name, sizeof name, "mlp_%s_%zu.json", cls, strlen(cfg));
  char *path = e2e_path(name);
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fwrite(text, 1, (size_t)(c0 - text), f);
  fprintf(f, "\"class_name\": \"%s\"", cls);
  const char *c1 = c0 + strlen("\"class_name\": \"Dropout\"");
  fwrite(c1, 1, (size_t)(f0 - c1), f);
  fputs(cfg, f);
  fputs(f0 + strlen("\"rate\": 0.4, \"seed\": null, \"noise_shape\": null"), f);
  fclose(f);
  free(raw), free(src);
  return path;
}

static char *mlp_compile(const char *model, const char *tag, const char *mesh, const char *axes,
                         const char *layout) {
  char *w = e2e_src("examples/mnist_mlp/weights.safetensors");
  char *plan = compile(model, w, tag, "16", mesh, axes, layout, "adam", "0.001");
  free(w);
  return plan;
}

/* erfinv in double: Newton on erf from a rough start. */
static double erfinv_ref(double v) {
  double z = 0;
  for (int i = 0; i < 100; i++) {
    double e = erf(z) - v;
    z -= e / (1.1283791670955126 * exp(-z * z)); /* 2 / sqrt(pi) */
  }
  return z;
}

/* GaussianNoise(stddev 1) on zeros in train_forward = its samples. */
static void test_normal_samples(void **s) {
  (void)s;
  kdc_keras_model *km = NULL;
  kdc_module *mod = NULL;
  enum { NB = 24 };  /* 24 x 200 = 4800 samples */
  kdc_lower_options lo = {.batch = NB, .train_forward = true, .dropout_seed = 5};
  int64_t seed = 0;
  /* A one-layer model: Input(200) -> GaussianNoise */
  char *one = e2e_write_text(
      "noise_only.json",
      "{\"module\": \"keras\", \"class_name\": \"Sequential\", \"config\": {\"name\": \"seq\", "
      "\"trainable\": true, \"layers\": [{\"module\": \"keras.layers\", \"class_name\": "
      "\"InputLayer\", \"config\": {\"batch_shape\": [null, 200], \"dtype\": \"float32\", "
      "\"name\": \"inp\"}, \"registered_name\": null}, {\"module\": \"keras.layers\", "
      "\"class_name\": \"GaussianNoise\", \"config\": {\"name\": \"noise\", \"trainable\": true, "
      "\"dtype\": \"float32\", \"stddev\": 1.0, \"seed\": null}, \"registered_name\": null}]}}\n");
  assert_null(kdc_frontend_load(one, &km));
  assert_null(kdc_frontend_lower(km, &lo, &mod));
  kdc_func *f = kdc_ir_module_find_func(mod, "train_forward");
  assert_non_null(f);
  bool found = false;
  for (size_t v = 0; v < f->n_nodes; v++)
    if (f->nodes[v].op == KDC_OP_RNG_UNIFORM) seed = f->nodes[v].attr.seed, found = true;
  assert_true(found);
  static float zeros[NB * 200];
  int32_t step = 3;
  kdc_tensor args[2];
  assert_int_equal(f->n_params, 2);
  args[0].type = kdc_ir_node(f, f->params[0])->type;
  args[0].data = zeros;
  args[1].type = kdc_ir_node(f, f->params[1])->type;
  args[1].data = &step;
  kdc_tensor out[1];
  assert_null(kdc_ir_interpret(f, args, 2, out));
  const float *z = out[0].data;
  double sum = 0, sq = 0, worst = 0, zmax = 0;
  const double lo_v = -1.0 + ldexp(1.0, -24);
  for (int i = 0; i < NB * 200; i++) {
    double u = kdc_rng_uniform_at(seed, step, i);
    double v = fmax(lo_v, 2 * u + lo_v);
    double want = sqrt(2.0) * erfinv_ref(v);
    worst = fmax(worst, fabs(z[i] - want) / (1 + fabs(want)));
    sum += z[i], sq += (double)z[i] * z[i];
    zmax = fmax(zmax, fabs(z[i]));
  }
  double mean = sum / (NB * 200), var = sq / (NB * 200) - mean * mean;
  fprintf(stderr, "normal samples: |z - ref| %.3g, mean %.4f, var %.4f, max |z| %.2f\n", worst,
          mean, var, zmax);
  assert_true(worst <= 2e-6);
  assert_true(fabs(mean) < 0.05 && fabs(var - 1) < 0.05);
  assert_true(zmax > 3 && zmax < 6.5);
  free(out[0].data);
  kdc_ir_module_destroy(mod);
  kdc_frontend_free(km);
  free(one);
}

static void noise_meshes(const char *cls, const char *cfg, const char *tag) {
  char *model = mlp_variant(cls, cfg), *guide = e2e_src("examples/mnist_mlp/layout.json");
  char *p1 = mlp_compile(model, tag, NULL, NULL, NULL);
  char *p8 = mlp_compile(model, tag, "8", NULL, NULL);
  char *p24 = mlp_compile(model, tag, "2x4", "data,model", guide);
  const void *arrays[2] = {mx, my};
  e2e_run r1, r8, r24;
  e2e_fit(p1, arrays, MROWS, 0, 0, 2, NULL, NULL, &r1);
  e2e_fit(p8, arrays, MROWS, 0, 0, 2, NULL, NULL, &r8);
  e2e_same_run(&r8, &r1, 0, 1e-5, tag);
  e2e_fit(p24, arrays, MROWS, 0, 0, 2, NULL, NULL, &r24);
  e2e_same_run(&r24, &r1, 0, 1e-5, tag);
  /* the noise is on: the training loss differs from evaluate's on batch 1 */
  kdc_rt_train *t = NULL;
  kdc_rt_plan *p = e2e_plan_load(p1);
  assert_null(kdc_rt_train_create(p, &t));
  double ev = 0;
  assert_null(kdc_rt_fit_evaluate(t, arrays, 16, &ev));
  assert_true(e2e_rel(r1.h.batch_loss[0], ev) > 1e-4);
  kdc_rt_train_destroy(t);
  kdc_rt_plan_release(p);
  e2e_run_free(&r1), e2e_run_free(&r8), e2e_run_free(&r24);
  free(model), free(guide), free(p1), free(p8), free(p24);
}

static void test_noise_meshes(void **s) {
  (void)s;
  noise_meshes("GaussianNoise", "\"stddev\": 0.5, \"seed\": null", "gnoise");
  noise_meshes("GaussianDropout", "\"rate\": 0.3, \"seed\": null", "gdrop");
  noise_meshes("AlphaDropout", "\"rate\": 0.2, \"seed\": null, \"noise_shape\": null", "adrop");
  noise_meshes("Dropout", "\"rate\": 0.4, \"seed\": null, \"noise_shape\": [1, null]", "dropns");
}

int main(void) {
  load_data();
  make_mlp_data();
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_bn_abi_and_step),    cmocka_unit_test(test_bn_meshes),
      cmocka_unit_test(test_bn_collectives),     cmocka_unit_test(test_bn_partial_batch),
      cmocka_unit_test(test_bn_keras_reference), cmocka_unit_test(test_bn_checkpoint),
      cmocka_unit_test(test_batch_size_smaller), cmocka_unit_test(test_normal_samples),
      cmocka_unit_test(test_noise_meshes),
  };
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  kdc_npy_free(&tx), kdc_npy_free(&ty);
  return rc;
}
