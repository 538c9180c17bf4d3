/* tests/fuzz/fuzz_plan.c: plan.bin without running it.  A plan is a
 * program (its CODE section is LLVM bitcode that kdc JIT-compiles and
 * runs: not fuzzed, nothing in it is checked by design), so this fuzzes
 * what kdc decides from the bytes before any code runs, as
 * runtime/plan_load.c does it: the container (common/plan_file.c: header,
 * section table, checksum, alignment), then the PROGRAM section's mesh,
 * the WEIGHTS section, and the rest of the program (runtime/program.c:
 * every count, dtype, shape, string, sharding, step and buffer reference).
 * The container's size and checksum fields would stop nearly every
 * mutation at the first checks, so each input is tried twice: as it is
 * (the size and checksum checks), and with the header's file_size and
 * checksum re-stamped to match its bytes (everything after them). */
#include "common/io.h"
#include "kdc/arena.h"
#include "runtime/program.h"
#include "tests/fuzz/fuzz.h"

static void decode(kdc_plan_file *pf) {
  kdc_reader r;
  kdc_status st = kdc_plan_file_reader(pf, KDC_PLAN_SECTION_PROGRAM, &r);
  if (st) {
    fuzz_drop(st);
    return;
  }
  r.section = "program";
  kdc_arena *a = kdc_arena_create();
  kdc_program p;
  memset(&p, 0, sizeof p);
  const void *data;
  size_t size;
  st = kdc_prog_decode_mesh(&r, a, &p);
  if (!st && kdc_plan_file_find(pf, KDC_PLAN_SECTION_WEIGHTS, &data, &size)) {
    kdc_reader rw;
    kdc_reader_init(&rw, data, size, "fuzz.plan", "weights");
    st = kdc_prog_decode_weights(&rw, a, &p);
  }
  if (!st) st = kdc_prog_decode(&r, a, &p);
  fuzz_drop(st);
  kdc_arena_destroy(a);
}

static void open_decode(const uint8_t *data, size_t size) {
  kdc_plan_file *pf = NULL;
  kdc_status st = kdc_plan_file_open_mem("fuzz.plan", data, size, &pf);
  if (st) {
    fuzz_drop(st);
    return;
  }
  for (size_t i = 0; i < kdc_plan_file_count(pf); i++) kdc_plan_file_info(pf, i);
  const void *d;
  size_t n;
  kdc_plan_file_find(pf, KDC_PLAN_SECTION_METADATA, &d, &n);
  kdc_plan_file_checksum(pf);
  decode(pf);
  kdc_plan_file_close(pf);
}

enum { HEADER = 56, FILE_SIZE_AT = 40, CHECKSUM_AT = 48 };  /* docs/plan-format.md */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  open_decode(data, size);
  if (size < HEADER) return 0;
  uint8_t *b = malloc(size);
  if (!b) abort();
  memcpy(b, data, size);
  kdc_store_le64(b + FILE_SIZE_AT, size);
  kdc_hash64_state h;
  kdc_hash64_init(&h, 0);
  kdc_hash64_update(&h, b, CHECKSUM_AT);
  kdc_hash64_update(&h, b + HEADER, size - HEADER);
  kdc_store_le64(b + CHECKSUM_AT, kdc_hash64_digest(&h));
  open_decode(b, size);
  free(b);
  return 0;
}
