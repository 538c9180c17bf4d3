/*
 * test_frontend_real2.c: the real model files of data/real2 (SOURCES.md
 * there says where each comes from and how its parameter count was derived
 * independently of kdc: TensorFlow.js 4.22 countParams() on the topology, the
 * file's own weightsManifest, or by hand from the config).
 *
 * - every loadable file loads with exactly that total and non-trainable
 *   count, and lowers to a predict function (static shapes given where the
 *   file has an unknown (None) dim);
 * - every refused file (Lambda, custom layers, Keras 1) fails at load with
 *   its status code and a one-line message naming the file, the JSON place
 *   and the reason.
 */
#include "fe_test.h"

#define REAL2(f) KDC_SOURCE_DIR "/tests/frontend/data/real2/" f

static const struct {
  const char *file;
  int64_t total, non_trainable;
  const char *input_shape; /* for lowering: static dims of an input with unknown dims */
} files[] = {
    {"HEYMAN225__U-net-application__unet.json", 433537, 0, NULL},
    {"AidanBlumLevine__satellitemaps__model_model.json", 54429315, 9856, NULL},
    {"102757017__keras_mobile_net__model.json", 4253864, 21888, NULL},
    {"0ev__Maskinator__models_mask_detection_model.json", 2422210, 2257984, NULL},
    {"Arksyd96__denoising-autoencoder-keras__autoencoder.json", 4533123, 896, NULL},
    {"VasiaKoum__Autoencoder-Neural-Network__Models_L4_FS3_FL32_E100_B40.json", 1369345, 1920,
     NULL},
    {"Saurabh262000__DCGAN__generator.json", 3826817, 25536, NULL},
    {"Saurabh262000__DCGAN__discriminator.json", 1862657, 0, NULL},
    {"paulomarciano__Seq2Seq__encoder_model.json", 8605792, 4783200, NULL},
    {"paulomarciano__Seq2Seq__decoder_model.json", 9291118, 0, "input_2=3,8002"},
    {"DimejiOladepo__NLP-Generative-Chatbot__encoder_model.json", 295500, 0, NULL},
    {"DimejiOladepo__NLP-Generative-Chatbot__decoder_model.json", 676194, 0, NULL},
    {"media-captioning__Image-Caption-App__decoder_model.json", 12641040, 0, "decoder_input=5"},
    {"samurainote__LSTM_seq2seq_chatbot_with_keras__seq2seq.json", 6107400, 0, NULL},
    {"3jacksonsmith__biderectional_LSTM_pos_tag__model.json", 6848795, 0, "embedding_1_input=6"},
    {"Mohammad-Jaafar__Sentiment-Analysis-LSTM__model_architecture.json", 2745217, 0, NULL},
    {"Nari2002__Multi_Text_classification_using_LSTM__model_architecture.json", 5080905, 0, NULL},
    {"Found-Bugs__Filmify__model_architecture.json", 1066116, 2688, NULL},
    {"AhsanYousaf__Video_Classification_And_Indexing__models_model.json", 25754096, 57360, NULL},
    {"AniketDogra__GuessTheDoodle__model_model.json", 126564, 0, NULL},
    {"Samiisd__DGAFD__model_architecture.json", 43840, 0, NULL},
    {"Cheshta08__Sarcasm-detection-demo__lstm_model.json", 17078550, 0, NULL},
    {"Nada-ibrahim__Image_Captioning_Engine__obj_nasnet_model.json", 4269716, 4269716, NULL},
};

static void test_counts(void **state FE_UNUSED) {
  for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
    char path[1024];
    snprintf(path, sizeof path, REAL2("%s"), files[i].file);
    kdc_keras_model *m = fe_load_ok(path);
    int64_t total = kdc_frontend_param_count(m);
    int64_t frozen = total - kdc_frontend_trainable_count(m);
    if (total != files[i].total || frozen != files[i].non_trainable)
      fail_msg("%s: %lld params (%lld non-trainable), expected %lld (%lld)", files[i].file,
               (long long)total, (long long)frozen, (long long)files[i].total,
               (long long)files[i].non_trainable);
    kdc_frontend_free(m);
  }
}

/* Every loadable file lowers to predict (batch 8, static shapes given). */
static void test_lowering(void **state FE_UNUSED) {
  for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
    char path[1024];
    snprintf(path, sizeof path, REAL2("%s"), files[i].file);
    kdc_input_shape is;
    kdc_load_options lo = {0};
    if (files[i].input_shape) {
      assert_null(kdc_frontend_parse_input_shape(files[i].input_shape, &is));
      lo.n_input_shapes = 1;
      lo.input_shapes = &is;
    }
    kdc_keras_model *m = NULL;
    kdc_status st = kdc_frontend_load_opts(path, &lo, &m);
    if (files[i].input_shape) kdc_input_shape_free(&is);
    if (st) fail_msg("%s", kdc_status_message(st));
    kdc_lower_options opt = {.batch = 8};
    kdc_module *mod = NULL;
    st = kdc_frontend_lower(m, &opt, &mod);
    if (st) fail_msg("lowering %s: %s", files[i].file, kdc_status_message(st));
    assert_non_null(kdc_ir_module_find_func(mod, "predict"));
    assert_int_equal(mod->n_weights, kdc_frontend_variable_count(m));
    kdc_ir_module_destroy(mod);
    kdc_frontend_free(m);
  }
}

static void test_refused(void **state FE_UNUSED) {
  static const struct {
    const char *file;
    kdc_code code;
    const char *where, *why;
  } refused[] = {
      {"Leon24k__TextSimilarity__model_architecture.json", KDC_UNSUPPORTED,
       "config.layers[12].class_name", "Lambda layer \"lambda\" holds Python code"},
      {"Thomas-Orton__Anime-SRGAN__generator.json", KDC_INVALID_INPUT,
       "config.layers[103].class_name", "unknown layer class \"PixelShuffler\""},
      {"Cheshta08__Sarcasm-detection-demo__attention_model.json", KDC_UNSUPPORTED,
       "config.layers[3].class_name", "custom layer class \"MyAttentionLayer\""},
      {"mlhy__ResNet-50-for-Cats.Vs.Dogs__resnet.json", KDC_UNSUPPORTED,
       "keras_version \"1.1.2\"", "Keras 1 model files are not supported"},
  };
  for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
    char path[1024];
    snprintf(path, sizeof path, REAL2("%s"), refused[i].file);
    kdc_keras_model *m = NULL;
    kdc_status st = kdc_frontend_load(path, &m); /* fe_assert_err: one line */
    fe_assert_err(st, refused[i].code, path, refused[i].where, refused[i].why, NULL);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_counts),
      cmocka_unit_test(test_lowering),
      cmocka_unit_test(test_refused),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
