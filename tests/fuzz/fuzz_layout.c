/* tests/fuzz/fuzz_layout.c: layout.json (frontend/layout.c): parse, check
 * against a 2x4 (data, model) mesh, and resolve a few variable paths the
 * way distribute.c does (the rules' regexes run under PCRE2's limits). */
#include "frontend/layout.h"
#include "tests/fuzz/fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  kdc_layout *l = NULL;
  kdc_status st = kdc_layout_parse((const char *)data, size, "fuzz/layout.json", &l);
  if (st) {
    fuzz_drop(st);
    return 0;
  }
  kdc_mesh mesh;
  st = kdc_mesh_parse("2x4", "data,model", &mesh);
  if (st) abort();
  if (!(st = kdc_layout_check(l, &mesh))) {
    static const char *paths[] = {"dense/kernel", "dense_1/bias", "encoder/attention/query/kernel",
                                  "dense/output", ""};
    for (size_t i = 0; i < sizeof paths / sizeof *paths; i++) {
      int rule = -1;
      fuzz_drop(kdc_layout_lookup(l, paths[i], &rule));
    }
  }
  fuzz_drop(st);
  kdc_layout_free(l);
  return 0;
}
