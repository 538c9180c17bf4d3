/*
 * Real model files of tests/frontend/data/real2 (SOURCES.md there) compiled
 * and run end to end in process (frontend -> passes -> codegen -> runtime)
 * with Keras' initialisers (seed 7, `kdc compile --random-init`'s path):
 * the plan for a 2x4 mesh with a ModelParallel-style layout (e2e_layout.h:
 * batch over "data", every Dense/Conv/LSTM input kernel whose last dim 4
 * divides split over "model" on that dim, embedding tables over "model" on
 * the vocabulary) gives the outputs of the 1-device plan, |d| <= 1e-5 +
 * 1e-4 |ref| (the split contractions sum in another order), and it does
 * communicate (the layout is honoured).  The cases below are the fast
 * subset (conv nets, autoencoders, GANs, seq2seq encoders and decoders with
 * initial states, text LSTMs, a TF.js model); KDC_TEST_SLOW=1 adds the big
 * ones (U-Nets at full resolution, MobileNets, ResNet50 nested in a
 * Sequential, NASNet-Mobile).  The files kdc refuses (Lambda, custom
 * layers, Keras 1) make `kdc inspect` exit with status 2 and one located
 * line on stderr.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "codegen/codegen.h"
#include "e2e_layout.h"
#include "e2e_util.h"
#include "frontend/frontend.h"
#include "frontend/layout.h"
#include "ir/ir.h"
#include "passes/passes.h"
#include "runtime/runtime.h"

enum { BATCH = 8, MODEL_AXIS = 4, MAX_IO = 4 };

typedef struct real2_case {
  const char *file;
  int64_t ids[MAX_IO];     /* input i: integer ids in [0, ids[i]), or uniform [-1, 1) when 0 */
  const char *input_shape; /* static dims for an input with unknown dims ("NAME=D1,..."), or NULL */
  int slow;                /* only with KDC_TEST_SLOW=1 */
} real2_case;

static const real2_case cases[] = {
    {"AniketDogra__GuessTheDoodle__model_model.json", {0}, NULL, 0},
    {"Saurabh262000__DCGAN__discriminator.json", {0}, NULL, 0},
    {"Saurabh262000__DCGAN__generator.json", {0}, NULL, 0},
    {"VasiaKoum__Autoencoder-Neural-Network__Models_L4_FS3_FL32_E100_B40.json", {0}, NULL, 0},
    {"Found-Bugs__Filmify__model_architecture.json", {0}, NULL, 0},
    {"Samiisd__DGAFD__model_architecture.json", {39}, NULL, 0},
    {"DimejiOladepo__NLP-Generative-Chatbot__encoder_model.json", {1894}, NULL, 0},
    {"DimejiOladepo__NLP-Generative-Chatbot__decoder_model.json", {1894, 0, 0}, NULL, 0},
    {"paulomarciano__Seq2Seq__decoder_model.json", {0, 0, 0}, "input_2=3,8002", 1},
    {"Mohammad-Jaafar__Sentiment-Analysis-LSTM__model_architecture.json", {5000}, NULL, 0},
    {"3jacksonsmith__biderectional_LSTM_pos_tag__model.json", {1000}, "embedding_1_input=6", 0},
    {"Arksyd96__denoising-autoencoder-keras__autoencoder.json", {0}, NULL, 1},
    {"paulomarciano__Seq2Seq__encoder_model.json", {47832}, NULL, 1},
    {"samurainote__LSTM_seq2seq_chatbot_with_keras__seq2seq.json", {15000, 15000}, NULL, 1},
    {"media-captioning__Image-Caption-App__decoder_model.json", {0, 10000}, "decoder_input=5", 1},
    {"Nari2002__Multi_Text_classification_using_LSTM__model_architecture.json", {50000}, NULL, 1},
    {"Cheshta08__Sarcasm-detection-demo__lstm_model.json", {1000}, NULL, 1},
    {"HEYMAN225__U-net-application__unet.json", {0}, NULL, 1},
    {"AidanBlumLevine__satellitemaps__model_model.json", {0}, NULL, 1},
    {"102757017__keras_mobile_net__model.json", {0}, NULL, 1},
    {"0ev__Maskinator__models_mask_detection_model.json", {0}, NULL, 1},
    {"AhsanYousaf__Video_Classification_And_Indexing__models_model.json", {0}, NULL, 1},
    {"Nada-ibrahim__Image_Captioning_Engine__obj_nasnet_model.json", {0}, NULL, 1},
};

static char *data_path(const char *file) {
  char rel[512];
  snprintf(rel, sizeof rel, "tests/frontend/data/real2/%s", file);
  return e2e_src(rel);
}

static kdc_keras_model *load(const real2_case *c, const char *path) {
  kdc_input_shape is;
  kdc_load_options lo = {0};
  if (c->input_shape) {
    assert_null(kdc_frontend_parse_input_shape(c->input_shape, &is));
    lo.n_input_shapes = 1;
    lo.input_shapes = &is;
  }
  kdc_keras_model *km = NULL;
  kdc_status st = kdc_frontend_load_opts(path, &lo, &km);
  if (c->input_shape) kdc_input_shape_free(&is);
  if (st) fail_msg("%s", kdc_status_message(st));
  return km;
}

/* Compiles |c| for |mesh_str| (NULL: one device) into a plan at |out|;
 * the layout rule count goes to |rules|. */
static void compile(const real2_case *c, const char *path, const char *mesh_str, const char *out,
                    int *rules) {
  kdc_keras_model *km = load(c, path);
  kdc_mesh mesh;
  kdc_layout *layout = NULL;
  *rules = 0;
  if (mesh_str) {
    assert_null(kdc_mesh_parse(mesh_str, NULL, &mesh));
    char *text = e2e_column_layout(km, MODEL_AXIS, rules);
    assert_null(kdc_layout_parse(text, strlen(text), "layout.json", &layout));
    assert_null(kdc_layout_check(layout, &mesh));
    free(text);
  }
  kdc_lower_options lo = {.batch = BATCH, .mesh = mesh_str ? &mesh : NULL, .layout = layout};
  kdc_module *mod = NULL;
  kdc_status st = kdc_frontend_lower(km, &lo, &mod);
  if (!st) st = kdc_frontend_init_weights(km, mod, 7);
  if (!st) st = kdc_pass_pipeline_run(mod, NULL);
  kdc_codegen_options co = {.no_ir_text = true};
  if (!st) st = kdc_codegen_cpu_plan(mod, &co, out);
  if (st)
    fail_msg("%s on %s: %s", c->file, mesh_str ? mesh_str : "1 device", kdc_status_message(st));
  kdc_ir_module_destroy(mod);
  kdc_layout_free(layout);
  kdc_frontend_free(km);
}

/* Seeded inputs for |p|'s inputs as |c| describes them (malloc'd). */
static void make_inputs(const real2_case *c, const kdc_rt_plan *p, void **in, size_t n) {
  uint64_t s = 12345;
  for (size_t i = 0; i < n; i++) {
    const kdc_rt_tensor_info *ti = kdc_rt_plan_input(p, 0, i);
    size_t count = ti->bytes / 4;
    in[i] = malloc(ti->bytes);
    for (size_t k = 0; k < count; k++) {
      s = s * 6364136223846793005ull + 1442695040888963407ull;
      double u = (double)(s >> 11) / 9007199254740992.0;
      if (ti->dtype == KDC_IO_DTYPE_I32)
        ((int32_t *)in[i])[k] = (int32_t)(u * (double)(c->ids[i] ? c->ids[i] : 2));
      else
        ((float *)in[i])[k] =
            c->ids[i] ? (float)(int64_t)(u * (double)c->ids[i]) : (float)(2 * u - 1);
    }
  }
}

/* Runs the plan at |path| on |in| (made when NULL); outputs malloc'd. */
static kdc_rt_plan *run(const real2_case *c, const char *path, void **in, size_t *n_in, void **out,
                        size_t *n_out) {
  kdc_rt_plan *p = NULL;
  assert_null(kdc_rt_plan_load(path, &p));
  *n_in = kdc_rt_plan_input_count(p, 0);
  *n_out = kdc_rt_plan_output_count(p, 0);
  assert_true(*n_in <= MAX_IO && *n_out <= MAX_IO);
  if (!in[0]) make_inputs(c, p, in, *n_in);
  for (size_t o = 0; o < *n_out; o++) out[o] = malloc(kdc_rt_plan_output(p, 0, o)->bytes);
  kdc_status st = kdc_rt_plan_run(p, (const void *const *)in, out);
  if (st) fail_msg("%s: %s", c->file, kdc_status_message(st));
  return p;
}

/* Collective steps of the plan, loop bodies included (a recurrent layer
 * split by units gathers h inside its loop). */
static int collectives(const kdc_rt_plan *p) {
  int n = 0;
  for (uint32_t f = 0; f < p->prog.n_funcs; f++) {
    const kdc_prog_func *pf = &p->prog.funcs[f];
    for (uint32_t k = 0; k < pf->n_steps; k++) n += pf->steps[k].kind == KDC_STEP_COLLECTIVE;
  }
  return n;
}

static void check_case(const real2_case *c) {
  char *path = data_path(c->file);
  char *p1 = e2e_path("real2-1.plan"), *p8 = e2e_path("real2-2x4.plan");
  int rules1, rules8;
  compile(c, path, NULL, p1, &rules1);
  compile(c, path, "2x4", p8, &rules8);
  void *in[MAX_IO] = {0}, *o1[MAX_IO], *o8[MAX_IO];
  size_t ni, no, ni8, no8;
  kdc_rt_plan *r1 = run(c, p1, in, &ni, o1, &no);
  kdc_rt_plan *r8 = run(c, p8, in, &ni8, o8, &no8);
  assert_int_equal(ni, ni8);
  assert_int_equal(no, no8);
  assert_int_equal(kdc_rt_plan_device_count(r8), 8);
  if (rules8 > 0 && collectives(r8) == 0)
    fail_msg("%s: %d layout rules on 2x4 and no collective", c->file, rules8);
  for (size_t o = 0; o < no; o++) {
    size_t bytes = kdc_rt_plan_output(r1, 0, o)->bytes;
    assert_int_equal(kdc_rt_plan_output(r8, 0, o)->bytes, bytes);
    double err = e2e_f32_compare(o8[o], o1[o], bytes / 4, 1e-5, 1e-4);
    if (err > 1)
      fail_msg("%s: output %zu on 2x4 (model-parallel layout, %d rules) differs from 1 device "
               "(%.3g of tolerance)", c->file, o, rules8, err);
    free(o1[o]), free(o8[o]);
  }
  printf("  %s: %zu output(s) equal on 1 device and 2x4 (%d layout rules, %d collectives)\n",
         c->file, no, rules8, collectives(r8));
  for (size_t i = 0; i < ni; i++) free(in[i]);
  kdc_rt_plan_release(r1);
  kdc_rt_plan_release(r8);
  free(path), free(p1), free(p8);
}

static void test_mesh_equals_one_device(void **state) {
  (void)state;
  const char *slow = getenv("KDC_TEST_SLOW"), *only = getenv("KDC_REAL2_ONLY");
  bool all = slow && *slow && strcmp(slow, "0");
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    if (only && *only && !strstr(cases[i].file, only)) continue;
    if (all || (only && *only) || !cases[i].slow) check_case(&cases[i]);
  }
}

/* Refused files: exit status 2, one line naming the file and the place. */
static void test_refused_files(void **state) {
  (void)state;
  static const char *const refused[][2] = {
      {"Leon24k__TextSimilarity__model_architecture.json",
       ": config.layers[12].class_name: Lambda layer \"lambda\""},
      {"Thomas-Orton__Anime-SRGAN__generator.json",
       ": config.layers[103].class_name: unknown layer class \"PixelShuffler\""},
      {"Cheshta08__Sarcasm-detection-demo__attention_model.json",
       ": config.layers[3].class_name: custom layer class \"MyAttentionLayer\""},
      {"mlhy__ResNet-50-for-Cats.Vs.Dogs__resnet.json", ": keras_version \"1.1.2\": Keras 1"},
  };
  for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
    char *path = data_path(refused[i][0]);
    e2e_result r;
    e2e_kdc(&r, "inspect", path, NULL);
    if (r.status != 2 || e2e_lines(r.err) != 1 || !strstr(r.err, path) ||
        !strstr(r.err, refused[i][1]))
      fail_msg("%s: status %d, stderr: %s", refused[i][0], r.status, r.err);
    free(path);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_mesh_equals_one_device),
      cmocka_unit_test(test_refused_files),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
