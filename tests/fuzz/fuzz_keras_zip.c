/*
 * tests/fuzz/fuzz_keras_zip.c: libFuzzer target for `.keras` archives --
 * the zip reader (common/zip.c over libzip: member names, declared and
 * actual sizes), config.json / metadata.json, and the archive's
 * model.weights.h5 bound to the model it describes (frontend/
 * keras_files.c).  Any input must end in a clean kdc_status, never a crash,
 * a leak or an unbounded allocation.  Seeds: tests/fuzz/corpus/keras_zip/.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "frontend/frontend.h"
#include "frontend/weights_src.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  setenv("KDC_TEST_WEIGHTS_CAP", "16777216", 0); /* 16 MiB: no huge member allocations */
  kdc_keras_model *m = NULL;
  kdc_status st = kdc_fe_load_archive("fuzz.keras", data, size, NULL, &m);
  if (!st && m->h5_image) {
    kdc_fe_source s = {"fuzz.keras", NULL, 0, 0};
    st = kdc_fe_h5_source(m, m->h5_name, m->h5_image, m->h5_len, &s);
    kdc_fe_src_free(&s);
  }
  kdc_status_free(st);
  kdc_frontend_free(m);
  return 0;
}
