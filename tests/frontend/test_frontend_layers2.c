/*
 * test_frontend_layers2.c: TimeDistributed, Attention, AdditiveAttention,
 * Resizing, CenterCrop and the random augmentation layers
 * (lower_time_distributed.c, lower_dot_attention.c, lower_image.c):
 * - examples/layer_zoo2 (tests/reference/gen_layer_zoo2.js: tfjs 4.22 and
 *   plain-JS float64 Keras 3 formulas) through the reference interpreter:
 *   every output element within 1e-5 + 1e-4 |ref|; the training model
 *   fit_model.json likewise; Keras 3 variable paths and counts;
 * - gradients of sum(predict * w) (w a fixed random cotangent) with respect
 *   to weights and inputs against central differences (h = 1e-3 max(1,
 *   |x|), tolerance 1e-2 |fd| + 1e-3 max(1, max |fd|), as tests/training);
 * - Resizing methods the example cannot check against tfjs (bicubic,
 *   lanczos3, antialiased bilinear, nearest downsampling) against the
 *   formulas of jax.image.resize written out here per output pixel;
 * - tf.keras 2 weight names of a wrapped layer ("td/kernel") bind; tf.keras
 *   2's Attention config `causal` acts as Keras 3's use_causal_mask;
 * - the activations Keras 3 added (hard_tanh, soft_shrink, hard_shrink,
 *   tanh_shrink, sparse_plus, sparse_sigmoid, squareplus, sparsemax) against
 *   jax.nn's definitions (sparsemax by sorting, as jax does), and their
 *   gradients against central differences;
 * - AdaptiveAverage/MaxPooling2D by hand;
 * - CategoryEncoding (one_hot, multi_hot, count; out-of-range ids) and
 *   Discretization (int32 buckets, one_hot) by hand;
 * - RMSNormalization (one axis with a scale, two axes) and
 *   SpectralNormalization(Dense) at inference by hand;
 * - RandomFlip in a training step: every sample is itself or its mirror,
 *   and both occur; RandomBrightness / RandomContrast: one factor per image
 *   within Keras' range (a contrast factor 0.5 means [1, 1.5]: Keras'
 *   _set_factor bounds the lower end at 0), the formula and the clip;
 * - gradients through masked Attention (mask list, causal), masked
 *   BatchNormalization training statistics and a masked
 *   TimeDistributed(LSTM) against central differences;
 * - refusals are one-line located errors naming the key or the class.
 */
#include "fe_test.h"
#include "fe_grad.h"

#define ZOO(f) FE_EXAMPLE("layer_zoo2", f)

static void compare(const kdc_tensor *got, const char *want_path) {
  kdc_npy_array want;
  assert_null(kdc_npy_read(want_path, &want));
  int64_t n = kdc_type_numel(&got->type);
  assert_int_equal((int64_t)(want.nbytes / sizeof(float)), n);
  const float *g = got->data, *w = want.data;
  for (int64_t i = 0; i < n; i++)
    if (!(fabsf(g[i] - w[i]) <= 1e-5f + 1e-4f * fabsf(w[i])))
      fail_msg("%s: element %lld: got %.8g, want %.8g", want_path, (long long)i, g[i], w[i]);
  kdc_npy_free(&want);
}

static void test_zoo_interpreter(void **s FE_UNUSED) {
  const char *in[2] = {ZOO("input0.npy"), ZOO("input1.npy")};
  lowered L;
  lower_example(ZOO("model.json"), ZOO("weights.safetensors"), in, 37, &L);
  /* Keras 3 paths: the wrapped layer inside the wrapper's scope */
  assert_string_equal(kdc_frontend_variable(L.km, 0)->path, "td_conv/conv/kernel");
  assert_string_equal(kdc_frontend_variable(L.km, 1)->path, "td_conv/conv/bias");
  assert_string_equal(kdc_frontend_variable(L.km, 4)->path, "td_key/dense_1/kernel");
  assert_string_equal(kdc_frontend_variable(L.km, 6)->path, "attn/scale");
  assert_string_equal(kdc_frontend_variable(L.km, 7)->path, "attn_concat/scale");
  assert_string_equal(kdc_frontend_variable(L.km, 8)->path, "attn_concat/concat_score_weight");
  assert_string_equal(kdc_frontend_variable(L.km, 9)->path, "attn_add/scale");
  assert_int_equal(kdc_frontend_variable_count(L.km), 10);
  assert_int_equal(kdc_frontend_param_count(L.km), 108 + 4 + 20 + 5 + 25 + 5 + 1 + 1 + 1 + 5);
  kdc_tensor out;
  assert_null(kdc_ir_interpret(L.f, L.args, L.f->n_params, &out));
  compare(&out, ZOO("expected.npy"));
  free(out.data);
  lowered_free(&L);
  lower_example(ZOO("fit_model.json"), ZOO("fit_weights.safetensors"),
                (const char *[]){ZOO("fit_input.npy")}, 37, &L);
  assert_null(kdc_ir_interpret(L.f, L.args, L.f->n_params, &out));
  compare(&out, ZOO("fit_expected.npy"));
  free(out.data);
  lowered_free(&L);
}

/* TimeDistributed(Dense), causal Attention, AdditiveAttention, Resizing,
 * CenterCrop, every weight and the image input. */
static void test_fit_model_gradients(void **s FE_UNUSED) {
  lowered L;
  lower_example(ZOO("fit_model.json"), ZOO("fit_weights.safetensors"),
                (const char *[]){ZOO("fit_input.npy")}, 2, &L);
  grad_check(&L, NULL, 1, 100);
  lowered_free(&L);
}

/* The zoo's concat-mode Attention with a separate key and its scores output,
 * the TimeDistributed Dense layers and the resize paths; td_conv (relu
 * kinks) and the frames input are left out. */
static void test_zoo_gradients(void **s FE_UNUSED) {
  const char *in[2] = {ZOO("input0.npy"), ZOO("input1.npy")};
  lowered L;
  lower_example(ZOO("model.json"), ZOO("weights.safetensors"), in, 1, &L);
  grad_check(&L, "td_conv", 3, 100);
  lowered_free(&L);
}

/* tf.keras 2 names the wrapped layer's weights "td/kernel": the fit model's
 * weights renamed so bind to the same variables (same predictions). */
static void test_tk2_weight_names(void **s FE_UNUSED) {
  kdc_safetensors *st = NULL;
  assert_null(kdc_safetensors_open(ZOO("fit_weights.safetensors"), &st));
  size_t n = kdc_safetensors_count(st);
  kdc_st_tensor t[16];
  char names[16][64];
  assert_true(n <= 16);
  for (size_t i = 0; i < n; i++) {
    t[i] = *kdc_safetensors_get(st, i);
    const char *nm = t[i].name;
    snprintf(names[i], sizeof names[i], "%s", strncmp(nm, "td/dense/", 9) ? nm : "");
    if (!names[i][0]) snprintf(names[i], sizeof names[i], "td/%s", nm + 9);
    t[i].name = names[i];
  }
  const char *renamed = fe_tmp("tk2_names.safetensors");
  assert_null(kdc_safetensors_write(renamed, t, n, NULL));
  kdc_safetensors_close(st);
  const char *in[1] = {ZOO("fit_input.npy")};
  lowered a, b;
  lower_example(ZOO("fit_model.json"), ZOO("fit_weights.safetensors"), in, 3, &a);
  lower_example(ZOO("fit_model.json"), renamed, in, 3, &b);
  kdc_tensor oa, ob;
  assert_null(kdc_ir_interpret(a.f, a.args, a.f->n_params, &oa));
  assert_null(kdc_ir_interpret(b.f, b.args, b.f->n_params, &ob));
  assert_memory_equal(oa.data, ob.data, kdc_type_bytes(&oa.type));
  free(oa.data), free(ob.data);
  lowered_free(&a), lowered_free(&b);
}

static kdc_status lower_err(const char *path, bool train);
static kdc_status load_err(const char *path);

/* predict of the one-layer model at |path| on |x| (2 rows of |shape|). */
static float *predict2(const char *path, const float *x, int rank, const int64_t *shape) {
  const char *xf = fe_tmp("p2_x.npy");
  assert_null(kdc_npy_write(xf, KDC_IO_DTYPE_F32, rank, shape, x));
  lowered L;
  lower_example(path, NULL, (const char *[]){xf}, 2, &L);
  kdc_tensor out;
  assert_null(kdc_ir_interpret(L.f, L.args, L.f->n_params, &out));
  lowered_free(&L);
  return out.data;
}

/* tf.keras 2's Attention config `causal` = Keras 3's use_causal_mask call
 * argument: row i of the output mixes value rows 0..i only (row 0 = value
 * row 0 exactly), unlike the unmasked layer. */
static void test_attention_causal_forms(void **s FE_UNUSED) {
  float x[2 * 4 * 3];
  uint64_t seed = 21;
  for (int i = 0; i < 24; i++) x[i] = (float)urand(&seed, -1, 1);
  const int64_t shape[3] = {2, 4, 3};
  float *k3 = predict2(fe_model_file("c3.json", "4, 3", "Attention", "", "[[KT, KT]]",
                                     "{\"use_causal_mask\": true}"), x, 3, shape);
  float *tk2 = predict2(fe_model_file("c2.json", "4, 3", "Attention", "\"causal\": true",
                                      "[[KT, KT]]", NULL), x, 3, shape);
  float *plain = predict2(fe_model_file("c0.json", "4, 3", "Attention", "", "[[KT, KT]]", NULL),
                          x, 3, shape);
  assert_memory_equal(k3, tk2, sizeof x);
  for (int b = 0; b < 2; b++)
    for (int c = 0; c < 3; c++) assert_true(k3[b * 12 + c] == x[b * 12 + c]);
  assert_memory_not_equal(k3, plain, sizeof x);
  free(k3), free(tk2), free(plain);
}

/* RMSNormalization: x * rsqrt(mean(x^2) + 1e-6) * scale, by hand. */
static void test_rms_norm(void **s FE_UNUSED) {
  float x[2 * 3 * 4], want[24];
  uint64_t seed = 31;
  for (int i = 0; i < 24; i++) x[i] = (float)urand(&seed, -2, 2);
  const float scale[4] = {0.5f, 1.0f, 1.5f, 2.0f};
  for (int r = 0; r < 6; r++) { /* axis -1 */
    double ms = 0;
    for (int k = 0; k < 4; k++) ms += (double)x[r * 4 + k] * x[r * 4 + k] / 4;
    for (int k = 0; k < 4; k++) want[r * 4 + k] = (float)(x[r * 4 + k] / sqrt(ms + 1e-6) * scale[k]);
  }
  fe_run_check(fe_model_file("rms.json", "3, 4", "RMSNormalization", "\"axis\": -1, "
                             "\"epsilon\": 1e-06", NULL, NULL), 2, x, scale, want, 24);
  for (int b = 0; b < 2; b++) { /* axis [1, 2], scale (3, 4) of ones, epsilon 0.1 */
    double ms = 0;
    for (int k = 0; k < 12; k++) ms += (double)x[b * 12 + k] * x[b * 12 + k] / 12;
    for (int k = 0; k < 12; k++) want[b * 12 + k] = (float)(x[b * 12 + k] / sqrt(ms + 0.1));
  }
  kdc_keras_model *m = fe_load_ok(fe_model_file("rms2.json", "3, 4", "RMSNormalization",
                                                "\"axis\": [2, 1], \"epsilon\": 0.1", NULL, NULL));
  assert_string_equal(kdc_frontend_variable(m, 0)->path, "L/scale");
  assert_int_equal(kdc_frontend_param_count(m), 12);
  kdc_frontend_free(m);
  const char *p = fe_model_file("rms2.json", "3, 4", "RMSNormalization", "\"axis\": [2, 1], "
                                "\"epsilon\": 0.1", NULL, NULL);
  fe_run_check(p, 2, x, NULL, want, 24);
  /* gradients with respect to the input and the scale */
  const char *xf = fe_tmp("rms_x.npy");
  assert_null(kdc_npy_write(xf, KDC_IO_DTYPE_F32, 3, (int64_t[]){2, 3, 4}, x));
  lowered L;
  lower_example(p, NULL, (const char *[]){xf}, 2, &L);
  grad_check(&L, NULL, 1, 36);
  lowered_free(&L);
}

/* SpectralNormalization(Dense) at inference is the Dense layer; variables
 * L/dense/kernel then the non-trainable L/vector_u (1, units). */
static void test_spectral_norm(void **s FE_UNUSED) {
  const char *cfg = "\"layer\": {\"class_name\": \"Dense\", \"config\": {\"name\": \"dense\", "
                    "\"units\": 3, \"use_bias\": false}}, \"power_iterations\": 1";
  const char *p = fe_model_file("sn.json", "4", "SpectralNormalization", cfg, NULL, NULL);
  kdc_keras_model *m = fe_load_ok(p);
  assert_int_equal(kdc_frontend_variable_count(m), 2);
  assert_string_equal(kdc_frontend_variable(m, 0)->path, "L/dense/kernel");
  assert_string_equal(kdc_frontend_variable(m, 1)->path, "L/vector_u");
  assert_false(kdc_frontend_variable(m, 1)->trainable);
  assert_int_equal(kdc_frontend_variable(m, 1)->shape.dims[1], 3);
  kdc_frontend_free(m);
  float x[8], k[12], want[6];
  uint64_t seed = 41;
  for (int i = 0; i < 8; i++) x[i] = (float)urand(&seed, -1, 1);
  for (int i = 0; i < 12; i++) k[i] = (float)urand(&seed, -1, 1);
  for (int b = 0; b < 2; b++)
    for (int j = 0; j < 3; j++) {
      double acc = 0;
      for (int i = 0; i < 4; i++) acc += (double)x[b * 4 + i] * k[i * 3 + j];
      want[b * 3 + j] = (float)acc;
    }
  fe_run_check(p, 2, x, k, want, 6);
  fe_assert_err(lower_err(p, true), KDC_UNSUPPORTED, "training SpectralNormalization", NULL);
  fe_assert_err(load_err(fe_model_file("sn2.json", "4", "SpectralNormalization",
                                       "\"layer\": {\"class_name\": \"Flatten\", \"config\": "
                                       "{\"name\": \"f\"}}", NULL, NULL)),
                KDC_INVALID_INPUT, "no kernel nor embeddings", NULL);
}

/* CategoryEncoding and Discretization by hand. */
static void test_encodings(void **s FE_UNUSED) {
  /* ids (2, 3), num_tokens 4: 5 and -1 match nothing, 2.5 matches nothing */
  const float ids[6] = {0, 3, 3, 5, -1, 2.5f};
  float want[2 * 3 * 4] = {0};
  /* multi_hot: row 0 {0, 3}, row 1 none */
  want[0] = want[3] = 1;
  fe_run_check(fe_model_file("ce1.json", "3", "CategoryEncoding", "\"num_tokens\": 4, "
                             "\"output_mode\": \"multi_hot\"", NULL, NULL), 2, ids, NULL, want, 8);
  want[3] = 2; /* count: 3 twice */
  fe_run_check(fe_model_file("ce2.json", "3", "CategoryEncoding", "\"num_tokens\": 4, "
                             "\"output_mode\": \"count\"", NULL, NULL), 2, ids, NULL, want, 8);
  memset(want, 0, sizeof want); /* one_hot of (2, 3): (2, 3, 4) */
  want[0 * 4 + 0] = want[1 * 4 + 3] = want[2 * 4 + 3] = 1;
  fe_run_check(fe_model_file("ce3.json", "3", "CategoryEncoding", "\"num_tokens\": 4, "
                             "\"output_mode\": \"one_hot\"", NULL, NULL), 2, ids, NULL, want, 24);
  /* one_hot of (3, 1): the trailing 1 dropped -> (3, 4) */
  memset(want, 0, sizeof want);
  want[0] = want[4 + 3] = want[8 + 3] = 1;
  fe_run_check(fe_model_file("ce4.json", "1", "CategoryEncoding", "\"num_tokens\": 4, "
                             "\"output_mode\": \"one_hot\"", NULL, NULL), 3, ids, NULL, want, 12);
  /* Discretization [0, 1, 2.5]: digitize -> #{b <= x}; int32 output */
  const float x[6] = {-0.5f, 0, 0.99f, 1, 2.5f, 7};
  const char *p = fe_model_file("di.json", "3", "Discretization", "\"bin_boundaries\": [0.0, 1.0, "
                                "2.5], \"output_mode\": \"int\"", NULL, NULL);
  kdc_keras_model *m = fe_load_ok(p);
  kdc_lower_options opt = {.batch = 2};
  kdc_module *mod = NULL;
  assert_null(kdc_frontend_lower(m, &opt, &mod));
  kdc_func *f = kdc_ir_module_find_func(mod, "predict");
  kdc_tensor arg = {kdc_ir_node(f, f->params[0])->type, (void *)x}, out;
  assert_null(kdc_ir_interpret(f, &arg, 1, &out));
  assert_int_equal(out.type.dtype, KDC_DTYPE_I32);
  const int32_t want_i[6] = {0, 1, 1, 2, 3, 3};
  assert_memory_equal(out.data, want_i, sizeof want_i);
  free(out.data);
  kdc_ir_module_destroy(mod);
  kdc_frontend_free(m);
  /* one_hot of the buckets: depth 4 */
  memset(want, 0, sizeof want);
  for (int i = 0; i < 6; i++) want[i * 4 + want_i[i]] = 1;
  fe_run_check(fe_model_file("di2.json", "3", "Discretization", "\"bin_boundaries\": [0.0, 1.0, "
                             "2.5], \"output_mode\": \"one_hot\"", NULL, NULL), 2, x, NULL, want, 24);
  fe_assert_err(load_err(fe_model_file("di3.json", "3", "Discretization", "\"bin_boundaries\": "
                                       "null, \"num_bins\": 4", NULL, NULL)),
                KDC_INVALID_INPUT, "config.bin_boundaries", "never adapted", NULL);
}

/* AdaptiveAverage/MaxPooling2D (5, 7) -> (2, 3): windows [floor(i L / O),
 * ceil((i + 1) L / O)) per axis, by hand. */
static void test_adaptive_pool(void **s FE_UNUSED) {
  enum { H = 5, W = 7, C = 2 };
  float x[2 * H * W * C], wa[2 * 2 * 3 * C], wm[2 * 2 * 3 * C];
  uint64_t seed = 51;
  for (int i = 0; i < 2 * H * W * C; i++) x[i] = (float)urand(&seed, -1, 1);
  for (int b = 0; b < 2; b++)
    for (int i = 0; i < 2; i++)
      for (int j = 0; j < 3; j++)
        for (int c = 0; c < C; c++) {
          int r0 = i * H / 2, r1 = ((i + 1) * H + 1) / 2, c0 = j * W / 3, c1 = ((j + 1) * W + 2) / 3;
          double sum = 0, mx = -1e30;
          for (int r = r0; r < r1; r++)
            for (int q = c0; q < c1; q++) {
              double v = x[((b * H + r) * W + q) * C + c];
              sum += v, mx = v > mx ? v : mx;
            }
          int o = ((b * 2 + i) * 3 + j) * C + c;
          wa[o] = (float)(sum / ((r1 - r0) * (c1 - c0))), wm[o] = (float)mx;
        }
  fe_run_check(fe_model_file("aap.json", "5, 7, 2", "AdaptiveAveragePooling2D",
                             "\"output_size\": [2, 3]", NULL, NULL), 2, x, NULL, wa, 24);
  fe_run_check(fe_model_file("amp.json", "5, 7, 2", "AdaptiveMaxPooling2D",
                             "\"output_size\": [2, 3], \"data_format\": \"channels_last\"", NULL,
                             NULL), 2, x, NULL, wm, 24);
}

/* ---- Resizing by hand ------------------------------------------------------ */

enum { H = 5, W = 7 };

/* jax.image.resize's kernels, written out per case. */
static double kern(const char *m, double x) {
  if (!strcmp(m, "bilinear")) return fmax(0, 1 - x);
  if (!strcmp(m, "bicubic")) { /* Keys, a = -0.5 */
    const double a = -0.5;
    if (x < 1) return (a + 2) * x * x * x - (a + 3) * x * x + 1;
    if (x < 2) return a * x * x * x - 5 * a * x * x + 8 * a * x - 4 * a;
    return 0;
  }
  /* lanczos3: sinc(x) sinc(x / 3) */
  if (x >= 3) return 0;
  if (x < 1e-3) return 1;
  return sin(M_PI * x) / (M_PI * x) * sin(M_PI * x / 3) / (M_PI * x / 3);
}

/* out (i, j) of an H x W one-channel image resized to oh x ow. */
static double by_hand(const float *img, int oh, int ow, const char *m, bool aa, int i, int j) {
  double acc = 0, ts[2] = {0, 0};
  double wr[16] = {0}, wc[16] = {0};
  const int in[2] = {H, W}, on[2] = {oh, ow}, at[2] = {i, j};
  double *wt[2] = {wr, wc};
  for (int a = 0; a < 2; a++) {
    double sc = (double)on[a] / in[a], ks = aa && sc < 1 ? 1 / sc : 1;
    double p = (at[a] + 0.5) / sc - 0.5;
    for (int k = 0; k < in[a]; k++) ts[a] += wt[a][k] = kern(m, fabs(p - k) / ks);
  }
  for (int r = 0; r < H; r++)
    for (int c = 0; c < W; c++) acc += wr[r] / ts[0] * wc[c] / ts[1] * img[r * W + c];
  return acc;
}

static void check_resize(const char *m, bool aa, int oh, int ow) {
  char cfg[256], tag[64];
  snprintf(cfg, sizeof cfg, "\"height\": %d, \"width\": %d, \"interpolation\": \"%s\", "
           "\"antialias\": %s, \"data_format\": \"channels_last\"", oh, ow, m, aa ? "true" : "false");
  snprintf(tag, sizeof tag, "rs_%s_%d_%d_%d.json", m, aa, oh, ow);
  float img[2 * H * W], want[2 * 16 * 16];
  uint64_t seed = 99;
  for (int i = 0; i < 2 * H * W; i++) img[i] = (float)urand(&seed, -1, 1);
  for (int b = 0; b < 2; b++)
    for (int i = 0; i < oh; i++)
      for (int j = 0; j < ow; j++) {
        double v;
        if (!strcmp(m, "nearest"))
          v = img[b * H * W + (int)floor((i + 0.5) * H / oh) * W + (int)floor((j + 0.5) * W / ow)];
        else v = by_hand(img + b * H * W, oh, ow, m, aa, i, j);
        want[(b * oh + i) * ow + j] = (float)v;
      }
  fe_run_check(fe_model_file(tag, "5, 7, 1", "Resizing", cfg, NULL, NULL), 2, img, NULL, want,
      2 * oh * ow);
}

static void test_resize_by_hand(void **s FE_UNUSED) {
  check_resize("bicubic", false, 9, 4);
  check_resize("lanczos3", false, 3, 11);
  check_resize("bilinear", true, 2, 3);  /* antialias: the kernel widened by in/out */
  check_resize("bilinear", false, 2, 3);
  check_resize("nearest", false, 3, 4);
  check_resize("nearest", false, 8, 13);
}


/* ---- activations added for Keras 3 (keras/src/backend/jax/nn.py, jax.nn) -- */

static double act_ref(const char *a, double x) {
  if (!strcmp(a, "hard_tanh")) return x > 1 ? 1 : x < -1 ? -1 : x;
  if (!strcmp(a, "soft_shrink")) return x > 0.5 ? x - 0.5 : x < -0.5 ? x + 0.5 : 0;
  if (!strcmp(a, "hard_shrink")) return fabs(x) > 0.5 ? x : 0;
  if (!strcmp(a, "tanh_shrink")) return x - tanh(x);
  if (!strcmp(a, "sparse_plus")) return x <= -1 ? 0 : x >= 1 ? x : (x + 1) * (x + 1) / 4;
  if (!strcmp(a, "sparse_sigmoid")) return x <= -1 ? 0 : x >= 1 ? 1 : (x + 1) / 2;
  return (x + sqrt(x * x + 4)) / 2; /* squareplus */
}

static int cmp_desc(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x < y) - (x > y);
}

/* jax's sparsemax: sort descending, support = z_(r) - (cumsum_r - 1) / r > 0. */
static void sparsemax_ref(const float *z, int n, float *out) {
  double s[16], cum = 0, tau = 0;
  int k = 0;
  for (int i = 0; i < n; i++) s[i] = z[i];
  qsort(s, (size_t)n, sizeof *s, cmp_desc);
  for (int r = 1; r <= n; r++) {
    cum += s[r - 1];
    if (s[r - 1] - (cum - 1) / r > 0) k = r, tau = cum;
  }
  tau = (tau - 1) / k;
  for (int i = 0; i < n; i++) out[i] = (float)fmax(z[i] - tau, 0);
}

static void test_activations(void **s FE_UNUSED) {
  static const char *const names[] = {"hard_tanh", "soft_shrink", "hard_shrink", "tanh_shrink",
                                      "sparse_plus", "sparse_sigmoid", "squareplus", "sparsemax"};
  enum { N = 2 * 9 };
  float x[N], want[N];
  uint64_t seed = 11;
  for (int i = 0; i < N; i++) x[i] = (float)urand(&seed, -2.5, 2.5);
  x[3] = x[5] = 0.9f; /* a tie for sparsemax */
  for (size_t a = 0; a < sizeof names / sizeof *names; a++) {
    char cfg[64], tag[64];
    snprintf(cfg, sizeof cfg, "\"activation\": \"%s\"", names[a]);
    snprintf(tag, sizeof tag, "act_%s.json", names[a]);
    if (!strcmp(names[a], "sparsemax")) {
      sparsemax_ref(x, 9, want);
      sparsemax_ref(x + 9, 9, want + 9);
    } else {
      for (int i = 0; i < N; i++) want[i] = (float)act_ref(names[a], x[i]);
    }
    const char *p = fe_model_file(tag, "9", "Activation", cfg, NULL, NULL);
    fe_run_check(p, 2, x, NULL, want, N);
    /* the gradient with respect to the input (away from the kinks) */
    float xs[N];
    for (int i = 0; i < N; i++) xs[i] = x[i];
    const char *xf = fe_tmp("act_x.npy");
    assert_null(kdc_npy_write(xf, KDC_IO_DTYPE_F32, 2, (int64_t[]){2, 9}, xs));
    lowered L;
    lower_example(p, NULL, (const char *[]){xf}, 2, &L);
    grad_check(&L, NULL, 1, 18);
    lowered_free(&L);
  }
  /* glu halves the last dim, threshold needs arguments: refused, located */
  fe_assert_err(lower_err(fe_model_file("glu.json", "4", "Activation", "\"activation\": \"glu\"",
                                        NULL, NULL), false),
                KDC_UNSUPPORTED, "config.layers[1].config.activation", "\"glu\"", NULL);
}

/* elu, selu, celu and the ELU layer far beyond exp's f32 range (x > 88):
 * the exponential branch, not taken there, once computed expm1(x) = inf,
 * and its zero cotangent times exp(x) made the gradient 0 * inf = NaN. */
static void test_exp_branch_gradients(void **s FE_UNUSED) {
  static const char *const acts[] = {"elu", "selu", "celu", NULL};
  enum { N = 2 * 6 };
  const float xs[N] = {100, 200, 1000, 89, -0.7f, 0.4f, -3, 95.5f, 1.5f, -100, 300, 0.2f};
  for (int a = 0; a < 4; a++) {
    char cfg[64], tag[64];
    snprintf(cfg, sizeof cfg, acts[a] ? "\"activation\": \"%s\"" : "\"alpha\": 0.7",
             acts[a] ? acts[a] : "");
    snprintf(tag, sizeof tag, "exp_%s.json", acts[a] ? acts[a] : "ELU");
    const char *p = fe_model_file(tag, "6", acts[a] ? "Activation" : "ELU", cfg, NULL, NULL);
    const char *xf = fe_tmp("exp_x.npy"); /* after fe_model_file, as test_activations */
    assert_null(kdc_npy_write(xf, KDC_IO_DTYPE_F32, 2, (int64_t[]){2, 6}, xs));
    lowered L;
    lower_example(p, NULL, (const char *[]){xf}, 2, &L);
    grad_check(&L, NULL, 1, N);
    lowered_free(&L);
  }
}

/* ---- RandomFlip in training ------------------------------------------------ */

static void test_random_flip_training(void **s FE_UNUSED) {
  enum { B = 64 };
  kdc_keras_model *m = fe_load_ok(fe_model_file("flip.json", "3, 4, 2", "RandomFlip",
                                             "\"mode\": \"horizontal\"", NULL, NULL));
  kdc_lower_options opt = {.batch = B, .train_forward = true, .dropout_seed = 7};
  kdc_module *mod = NULL;
  assert_null(kdc_frontend_lower(m, &opt, &mod));
  kdc_func *f = kdc_ir_module_find_func(mod, "train_forward");
  assert_non_null(f);
  float x[B * 24];
  uint64_t seed = 5;
  for (int i = 0; i < B * 24; i++) x[i] = (float)urand(&seed, -1, 1);
  int32_t it = 3;
  kdc_tensor args[2] = {{kdc_ir_node(f, f->params[0])->type, x},
                        {kdc_ir_node(f, f->params[1])->type, &it}};
  kdc_tensor out;
  assert_null(kdc_ir_interpret(f, args, 2, &out));
  const float *y = out.data;
  int flipped = 0;
  for (int b = 0; b < B; b++) {
    bool same = true, mirror = true;
    for (int r = 0; r < 3; r++)
      for (int c = 0; c < 4; c++)
        for (int ch = 0; ch < 2; ch++) {
          float v = y[((b * 3 + r) * 4 + c) * 2 + ch];
          same &= v == x[((b * 3 + r) * 4 + c) * 2 + ch];
          mirror &= v == x[((b * 3 + r) * 4 + (3 - c)) * 2 + ch];
        }
    if (!same && !mirror) fail_msg("sample %d is neither itself nor its mirror", b);
    flipped += !same;
  }
  if (flipped < 16 || flipped > 48) fail_msg("%d of %d samples flipped", flipped, B);
  free(out.data);
  /* predict: the identity */
  f = kdc_ir_module_find_func(mod, "predict");
  assert_null(kdc_ir_interpret(f, args, 1, &out));
  assert_memory_equal(out.data, x, sizeof x);
  free(out.data);
  kdc_ir_module_destroy(mod);
  kdc_frontend_free(m);
}

/* RandomBrightness / RandomContrast in a training step: per image one factor
 * in Keras' range, the formula, the clip to value_range. */
static void check_value_aug(const char *cls, const char *cfg, bool bright, double lo, double hi) {
  enum { B = 32, N = 3 * 4 * 2 };
  kdc_keras_model *m = fe_load_ok(fe_model_file("va.json", "3, 4, 2", cls, cfg, NULL, NULL));
  kdc_lower_options opt = {.batch = B, .train_forward = true, .dropout_seed = 9};
  kdc_module *mod = NULL;
  assert_null(kdc_frontend_lower(m, &opt, &mod));
  kdc_func *f = kdc_ir_module_find_func(mod, "train_forward");
  float x[B * N];
  uint64_t seed = 8;
  for (int i = 0; i < B * N; i++) x[i] = (float)urand(&seed, 0.2, 0.8);
  int32_t it = 1;
  kdc_tensor args[2] = {{kdc_ir_node(f, f->params[0])->type, x},
                        {kdc_ir_node(f, f->params[1])->type, &it}};
  kdc_tensor out;
  assert_null(kdc_ir_interpret(f, args, 2, &out));
  const float *y = out.data;
  double fmin = 1e9, fmax = -1e9;
  for (int b = 0; b < B; b++) {
    const float *xb = x + b * N, *yb = y + b * N;
    double mean[2] = {0, 0};
    for (int i = 0; i < N; i++) mean[i % 2] += xb[i] / 12.0;
    /* the factor from element 0 (value range [0, 1]: nothing clips at 0.2..0.8
     * for these factors but the contrast ends, checked through the clip) */
    double fac = bright ? yb[0] - xb[0] : (yb[0] - mean[0]) / (xb[0] - mean[0]);
    fmin = fmin < fac ? fmin : fac, fmax = fmax > fac ? fmax : fac;
    for (int i = 0; i < N; i++) {
      double w = bright ? xb[i] + fac : (xb[i] - mean[i % 2]) * fac + mean[i % 2];
      w = w < 0 ? 0 : w > 1 ? 1 : w;
      if (fabs(yb[i] - w) > 1e-5) fail_msg("%s image %d element %d: %g, want %g", cls, b, i, yb[i], w);
    }
  }
  if (!(fmin >= lo - 1e-5 && fmax <= hi + 1e-5 && fmax - fmin > 0.3 * (hi - lo)))
    fail_msg("%s factors in [%g, %g], want within [%g, %g] and spread", cls, fmin, fmax, lo, hi);
  free(out.data);
  kdc_ir_module_destroy(mod);
  kdc_frontend_free(m);
}

static void test_value_augment_training(void **s FE_UNUSED) {
  check_value_aug("RandomBrightness", "\"factor\": [-0.2, 0.1], \"value_range\": [0, 1]", true,
                  -0.2, 0.1);
  check_value_aug("RandomContrast", "\"factor\": 0.5, \"value_range\": [0, 1]", false, 1.0, 1.5);
}

/* ---- refusals ----------------------------------------------------------------- */

static kdc_status load_err(const char *path) {
  kdc_keras_model *m = NULL;
  kdc_status st = kdc_frontend_load(path, &m);
  if (!st) kdc_frontend_free(m);
  return st;
}

static kdc_status lower_err(const char *path, bool train) {
  kdc_keras_model *m = fe_load_ok(path);
  kdc_lower_options opt = {.batch = 2, .train_forward = train};
  kdc_module *mod = NULL;
  kdc_status st = kdc_frontend_lower(m, &opt, &mod);
  if (!st) kdc_ir_module_destroy(mod);
  kdc_frontend_free(m);
  return st;
}

#define TD_DENSE "\"layer\": {\"class_name\": \"Dense\", \"config\": {\"name\": \"d\", \"units\": 3}}"

/* ---- gradients through masked layers ---------------------------------- */

/* A Keras 3 keras tensor of layer |name| (output 0). */
#define KTN(name) "{\"class_name\": \"__keras_tensor__\", \"config\": {\"keras_history\": [\"" name "\", 0, 0]}}"
#define INL(name, shape) "{\"class_name\": \"InputLayer\", \"name\": \"" name "\", \"config\": " \
  "{\"name\": \"" name "\", \"batch_shape\": [null, " shape "]}, \"inbound_nodes\": []}"
#define FUNC(layers, ins, out) "{\"class_name\": \"Functional\", \"config\": {\"name\": \"m\", " \
  "\"layers\": [" layers "], \"input_layers\": [" ins "], \"output_layers\": [[\"" out "\", 0, 0]]}}"

static void masked_grad(const char *tag, const char *json, bool train, int n_in,
                        const int64_t *sizes, const float *const *masks, const char *skip) {
  const char *path = fe_tmp(tag);
  fe_write(path, json, strlen(json));
  const float *x[4];
  float *own[4] = {NULL};
  uint64_t seed = 0xA77;
  for (int i = 0; i < n_in; i++) {
    if (masks[i]) {
      x[i] = masks[i];
      continue;
    }
    own[i] = malloc(sizeof(float) * (size_t)sizes[i]);
    for (int64_t k = 0; k < sizes[i]; k++) own[i][k] = (float)urand(&seed, -1, 1);
    x[i] = own[i];
  }
  lowered L;
  lower_model(path, train, 2, x, 3, &L);
  grad_check(&L, skip, 1, 20);
  lowered_free(&L);
  for (int i = 0; i < n_in; i++) free(own[i]);
}

/* Attention with a mask list and causal, BatchNormalization's masked
 * moments in train_forward (explicit mask tensor), and TimeDistributed(LSTM)
 * given a mask: gradients of every float input and weight against central
 * differences (the mask inputs and the moving statistics skipped). */
static void test_masked_gradients(void **s FE_UNUSED) {
  /* every query row keeps a key (fully masked rows round s - 1e9 to one value, so
   * central differences see a flat function there) */
  static const float qm[8] = {1, 0, 1, 1, 1, 1, 0, 1}, vm[10] = {1, 1, 0, 1, 1, 1, 0, 1, 1, 1};
  masked_grad("att_grad.json",
              FUNC(INL("q", "4, 3") ", " INL("v", "5, 3") ", " INL("qm", "4") ", " INL("vm", "5")
                   ", {\"class_name\": \"Attention\", \"name\": \"att\", \"config\": {\"name\": "
                   "\"att\", \"use_scale\": true}, \"inbound_nodes\": [{\"args\": [[" KTN("q") ", "
                   KTN("v") "]], \"kwargs\": {\"mask\": [" KTN("qm") ", " KTN("vm") "], "
                   "\"use_causal_mask\": true}}]}",
                   "[\"q\", 0, 0], [\"v\", 0, 0], [\"qm\", 0, 0], [\"vm\", 0, 0]", "att"),
              false, 4, (const int64_t[]){24, 30, 8, 10},
              (const float *const[]){NULL, NULL, qm, vm}, "qm|vm");
  static const float m5[10] = {1, 1, 0, 1, 0, 1, 0, 0, 1, 1};
  masked_grad("bn_grad.json",
              FUNC(INL("x", "5, 3") ", " INL("mask_in", "5")
                   ", {\"class_name\": \"BatchNormalization\", \"name\": \"bn\", \"config\": "
                   "{\"name\": \"bn\"}, \"inbound_nodes\": [{\"args\": [" KTN("x") "], "
                   "\"kwargs\": {\"mask\": " KTN("mask_in") "}}]}",
                   "[\"x\", 0, 0], [\"mask_in\", 0, 0]", "bn"),
              true, 2, (const int64_t[]){30, 10}, (const float *const[]){NULL, m5},
              "mask_in|bn/moving|iteration|sample_mask");
  static const float m34[24] = {1, 0, 1, 0, 1, 1, 1, 1, 0, 0, 1, 1,
                                1, 1, 1, 0, 0, 1, 1, 1, 1, 1, 1, 1};
  masked_grad("td_grad.json",
              FUNC(INL("x", "3, 4, 2") ", " INL("mask_in", "3, 4")
                   ", {\"class_name\": \"TimeDistributed\", \"name\": \"td\", \"config\": "
                   "{\"name\": \"td\", \"layer\": {\"class_name\": \"LSTM\", \"config\": "
                   "{\"name\": \"l\", \"units\": 2}}}, \"inbound_nodes\": [{\"args\": ["
                   KTN("x") "], \"kwargs\": {\"mask\": " KTN("mask_in") "}}]}",
                   "[\"x\", 0, 0], [\"mask_in\", 0, 0]", "td"),
              false, 2, (const int64_t[]){48, 24}, (const float *const[]){NULL, m34}, "mask_in");
}

static void test_errors(void **s FE_UNUSED) {
  fe_assert_err(load_err(fe_model_file("td1.json", "5", "TimeDistributed", TD_DENSE, NULL, NULL)),
                KDC_INVALID_INPUT, "config.layers[1]", "rank >= 3", NULL);
  fe_assert_err(load_err(fe_model_file("td2.json", "4, 5", "TimeDistributed",
                                    "\"layer\": {\"class_name\": \"ConvLSTM1D\", \"config\": {}}", NULL,
                                    NULL)),
                KDC_UNSUPPORTED, "config.layer.class_name \"ConvLSTM1D\"", "recurrent", NULL);
  fe_assert_err(load_err(fe_model_file("td3.json", "4, 5", "TimeDistributed", "\"layer\": 3", NULL,
                                    NULL)),
                KDC_INVALID_INPUT, "config.layer", NULL);
  fe_assert_err(lower_err(fe_model_file("td4.json", "4, 5", "TimeDistributed",
                                     "\"layer\": {\"class_name\": \"BatchNormalization\", "
                                     "\"config\": {\"name\": \"bn\"}}", NULL, NULL), true),
                KDC_UNSUPPORTED, "TimeDistributed(BatchNormalization)", NULL);
  fe_assert_err(load_err(fe_model_file("at1.json", "4, 5", "Attention", "", NULL, NULL)),
                KDC_INVALID_INPUT, "config.layers[1]", "[query, value]", NULL);
  fe_assert_err(load_err(fe_model_file("at2.json", "4, 5", "Attention", "\"score_mode\": \"bad\"",
                                    "[[KT, KT]]", NULL)),
                KDC_INVALID_INPUT, "config.score_mode \"bad\"", NULL);
  fe_assert_err(lower_err(fe_model_file("at3.json", "4, 5", "Attention", "\"dropout\": 0.1",
                                     "[[KT, KT]]", NULL), true),
                KDC_UNSUPPORTED, "config.dropout", NULL);
  fe_assert_err(lower_err(fe_model_file("at4.json", "2, 4, 5", "Attention", "",
                                     "[[KT, KT]]", "{\"mask\": [KT, KT]}"), false),
                KDC_UNSUPPORTED, "masks on Attention inputs of rank 4", NULL);
  fe_assert_err(load_err(fe_model_file("rs1.json", "5, 7, 1", "Resizing", "\"height\": 3, "
                                    "\"width\": 2, \"interpolation\": \"area\"", NULL, NULL)),
                KDC_UNSUPPORTED, "config.interpolation \"area\"", NULL);
  fe_assert_err(load_err(fe_model_file("rs2.json", "5, 7", "Resizing", "\"height\": 3, "
                                    "\"width\": 2", NULL, NULL)),
                KDC_INVALID_INPUT, "rank 4", NULL);
  fe_assert_err(load_err(fe_model_file("rs3.json", "5, 7, 1", "CenterCrop", "\"height\": 0, "
                                    "\"width\": 2", NULL, NULL)),
                KDC_INVALID_INPUT, "config.height", NULL);
  fe_assert_err(lower_err(fe_model_file("ra1.json", "5, 7, 1", "RandomRotation", "\"factor\": 0.1",
                                     NULL, NULL), true),
                KDC_UNSUPPORTED, "RandomRotation in a training step", NULL);
  /* a Keras 3 call recorded with training=true: predict overrides it (the
   * identity); tf.keras 2's is refused (tests/keras_files) */
  assert_null(lower_err(fe_model_file("ra2.json", "5, 7, 1", "RandomZoom", "\"height_factor\": 0.1",
                                   NULL, "{\"training\": true}"), false));
  fe_assert_err(load_err(fe_model_file("rc.json", "5, 7, 1", "RandomCrop", "\"height\": 3, "
                                    "\"width\": 2", NULL, NULL)),
                KDC_UNSUPPORTED, "\"RandomCrop\" is not supported by kdc: Keras 3 returns", NULL);
}

/* ConvNeXt's LayerScale (keras/src/applications/convnext.py): x * gamma over
 * the last axis; gamma is the unnamed weight `L/variable`, Constant(init_values)
 * by default; a safetensors name `L/variable_<N>` (Keras' per-session counter
 * of unnamed weights) binds it, `L/variable_x` does not. */
static void test_layer_scale(void **s FE_UNUSED) {
  float x[2 * 3 * 4], want[24];
  uint64_t seed = 41;
  for (int i = 0; i < 24; i++) x[i] = (float)urand(&seed, -2, 2);
  const float g[4] = {0.5f, -1.0f, 1.5f, 2.0f};
  for (int i = 0; i < 24; i++) want[i] = x[i] * g[i % 4];
  const char *p = fe_model_file("ls.json", "3, 4", "LayerScale", "\"init_values\": 0.25, "
                                "\"projection_dim\": 4", NULL, NULL);
  fe_run_check(p, 2, x, g, want, 24);
  for (int i = 0; i < 24; i++) want[i] = x[i] * 0.25f;
  fe_run_check(p, 2, x, NULL, want, 24);
  kdc_keras_model *m = fe_load_ok(p);
  assert_string_equal(kdc_frontend_variable(m, 0)->path, "L/variable");
  kdc_lower_options opt = {.batch = 2};
  kdc_module *mod = NULL;
  assert_null(kdc_frontend_lower(m, &opt, &mod));
  const char *names[2] = {"L/variable_17", "L/variable_x"};
  for (int k = 0; k < 2; k++) {
    kdc_st_tensor t = {.name = names[k], .dtype = KDC_IO_DTYPE_F32, .rank = 1, .dims = {4}, .data = g};
    const char *w = fe_tmp("ls.safetensors");
    assert_null(kdc_safetensors_write(w, &t, 1, NULL));
    kdc_status st = kdc_frontend_bind_weights(m, mod, w, 0);
    if (k == 0) {
      assert_null(st);
      assert_memory_equal(mod->weights[0].data, g, sizeof g);
    } else {
      fe_assert_err(st, KDC_INVALID_INPUT, "no tensor for variable \"L/variable\"", NULL);
    }
  }
  kdc_ir_module_destroy(mod);
  kdc_frontend_free(m);
  fe_assert_err(load_err(fe_model_file("ls2.json", "3, 4", "LayerScale", "\"init_values\": 0.25, "
                                       "\"projection_dim\": 5", NULL, NULL)),
                KDC_INVALID_INPUT, "does not broadcast", NULL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_zoo_interpreter),     cmocka_unit_test(test_fit_model_gradients),
      cmocka_unit_test(test_zoo_gradients),       cmocka_unit_test(test_resize_by_hand),
      cmocka_unit_test(test_random_flip_training), cmocka_unit_test(test_errors),
      cmocka_unit_test(test_tk2_weight_names),     cmocka_unit_test(test_activations),
      cmocka_unit_test(test_attention_causal_forms), cmocka_unit_test(test_rms_norm),
      cmocka_unit_test(test_spectral_norm),        cmocka_unit_test(test_value_augment_training),
      cmocka_unit_test(test_encodings),            cmocka_unit_test(test_adaptive_pool),
      cmocka_unit_test(test_masked_gradients),    cmocka_unit_test(test_exp_branch_gradients),
      cmocka_unit_test(test_layer_scale),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
