/* tests/fuzz/fuzz_npy.c: the .npy reader (common/npy.c) over memory, then
 * the conversion to f32 that `kdc run --input` applies. */
#include "common/io.h"
#include "tests/fuzz/fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  kdc_npy_array a;
  kdc_status st = kdc_npy_read_mem("fuzz.npy", data, size, &a);
  if (st) {
    fuzz_drop(st);
    return 0;
  }
  fuzz_drop(kdc_npy_to_f32("fuzz.npy", &a));
  kdc_npy_free(&a);
  return 0;
}
