/* tests/fuzz/fuzz_mesh.c: the --mesh and --axes parser (frontend/mesh.c):
 * the input is "SHAPE" or "SHAPE\0AXES". */
#include "frontend/layout.h"
#include "tests/fuzz/fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *s = fuzz_cstr(data, size);
  size_t n = strlen(s);
  const char *axes = n < size ? s + n + 1 : NULL;
  kdc_mesh m;
  fuzz_drop(kdc_mesh_parse(s, axes, &m));
  free(s);
  return 0;
}
