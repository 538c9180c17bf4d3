/* tests/fuzz/fuzz_input_shape.c: the --input-shape parser
 * ("[NAME=]D1,D2,...", frontend/input_shape.c). */
#include "frontend/frontend.h"
#include "tests/fuzz/fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *s = fuzz_cstr(data, size);
  kdc_input_shape is;
  memset(&is, 0, sizeof is);
  kdc_status st = kdc_frontend_parse_input_shape(s, &is);
  if (!st) kdc_input_shape_free(&is);
  fuzz_drop(st);
  free(s);
  return 0;
}
