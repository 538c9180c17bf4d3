/* tests/fuzz/fuzz_safetensors.c: the safetensors reader (common/
 * safetensors.c) over memory: open (header, offsets, shapes), then every
 * tensor looked up by name and copied to f32 as the weight binder does. */
#include "common/io.h"
#include "tests/fuzz/fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  kdc_safetensors *s = NULL;
  kdc_status st = kdc_safetensors_open_mem("fuzz.safetensors", data, size, &s);
  if (st) {
    fuzz_drop(st);
    return 0;
  }
  for (size_t i = 0; i < kdc_safetensors_count(s); i++) {
    const kdc_st_tensor *t = kdc_safetensors_get(s, i);
    if (kdc_safetensors_find(s, t->name) != t) abort();  /* names are unique */
    float *dst = malloc(t->nbytes * 4 + 4);  /* room for any dtype widened to f32 */
    if (!dst) abort();
    fuzz_drop(kdc_safetensors_copy_f32(s, t, dst));
    free(dst);
  }
  kdc_safetensors_metadata(s, "format");
  kdc_safetensors_close(s);
  return 0;
}
