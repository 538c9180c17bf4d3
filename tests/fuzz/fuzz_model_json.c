/* tests/fuzz/fuzz_model_json.c: a Keras model JSON through the frontend
 * (frontend/load.c: JSON, layers, shape inference) and, when it loads,
 * lowered to IR as `kdc compile` does (batch 2, the training forward and
 * output masks too: the largest lowering). */
#include "frontend/frontend.h"
#include "ir/ir.h"
#include "tests/fuzz/fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  kdc_keras_model *m = NULL;
  /* a folder that does not exist: TF.js weight shards are never found */
  kdc_status st = kdc_frontend_load_text("/nonexistent/fuzz/model.json", (const char *)data,
                                         size, &m);
  if (st) {
    fuzz_drop(st);
    return 0;
  }
  kdc_lower_options lo = {.batch = 2, .train_forward = true, .dropout_seed = 1,
                          .output_masks = true};
  kdc_module *mod = NULL;
  st = kdc_frontend_lower(m, &lo, &mod);
  if (!st) kdc_ir_module_destroy(mod);
  fuzz_drop(st);
  kdc_frontend_free(m);
  return 0;
}
