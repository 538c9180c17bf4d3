/*
 * plan_file.c: the plan.bin container, the one definition shared by the
 * writer (codegen/) and the reader (runtime/).  The layout is documented in
 * docs/plan-format.md; in short, all little endian:
 *
 *   0   header (56 bytes): magic "KDCPLAN\0", u32 format_version,
 *       u32 header_size, char kdc_version[16], u32 n_sections, u32 flags,
 *       u64 file_size, u64 checksum
 *   56  section table: n_sections x 48 bytes {u32 kind, u32 reserved,
 *       char name[24], u64 offset, u64 size}
 *   ..  section payloads, each at a multiple of 64 bytes, zero padding between
 *
 * The checksum is xxHash64 (seed 0) of every byte of the file except the
 * 8 checksum bytes themselves (so the header's own fields are covered too).
 *
 * The reader validates in an order that gives the most useful message: magic
 * (a foreign file), then format version (another kdc), then sizes
 * (truncation), then the checksum (corruption), and only then the structure,
 * which a checksummed file from a correct writer always passes: that last
 * step guards the runtime against a buggy writer or a crafted file.
 */
#include "common/io.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "kdc/arena.h"

#ifndef KDC_VERSION_STRING
#define KDC_VERSION_STRING "0.1.0"
#endif

#define CHECKSUM_AT 48u
#define KNOWN_FLAGS 0u  /* format version 1 defines no flags */

const char *kdc_plan_kdc_version(void) { return KDC_VERSION_STRING; }

const char *kdc_plan_section_kind_name(uint32_t kind) {
  static const char *const names[] = {
      [KDC_PLAN_SECTION_METADATA] = "metadata", [KDC_PLAN_SECTION_PROGRAM] = "program",
      [KDC_PLAN_SECTION_BUFFERS] = "buffers",   [KDC_PLAN_SECTION_CODE] = "code",
      [KDC_PLAN_SECTION_WEIGHTS] = "weights",   [KDC_PLAN_SECTION_IR_TEXT] = "ir_text",
      [KDC_PLAN_SECTION_PTX] = "ptx",           [KDC_PLAN_SECTION_EXPLAIN] = "explain",
      [KDC_PLAN_SECTION_CUDA] = "cuda",         [KDC_PLAN_SECTION_TRAIN_STATE] = "train_state",
      [KDC_PLAN_SECTION_KERAS] = "keras",
  };
  if (kind < sizeof names / sizeof names[0] && names[kind]) return names[kind];
  return "unknown";
}

static uint64_t align64(uint64_t x) {
  return (x + KDC_PLAN_ALIGN - 1) & ~(uint64_t)(KDC_PLAN_ALIGN - 1);
}

/* ---- writer ---- */

typedef struct {
  uint32_t kind;
  char name[24];
  kdc_plan_part *parts; /* borrowed, except |owned| (a copy made by add()) */
  size_t n_parts;
  uint8_t *owned;
  size_t size;          /* the sum of the parts' sizes */
} wsection;

struct kdc_plan_writer {
  wsection *s;
  size_t n, cap;
  uint32_t flags;
};

kdc_plan_writer *kdc_plan_writer_create(void) { return kdc_xcalloc(1, sizeof(kdc_plan_writer)); }

void kdc_plan_writer_destroy(kdc_plan_writer *w) {
  if (!w) return;
  for (size_t i = 0; i < w->n; i++) {
    free(w->s[i].owned);
    free(w->s[i].parts);
  }
  free(w->s);
  free(w);
}

void kdc_plan_writer_set_flags(kdc_plan_writer *w, uint32_t flags) { w->flags = flags; }

static kdc_status new_section(kdc_plan_writer *w, uint32_t kind, const char *name,
                              wsection **out) {
  size_t len = name ? strlen(name) : 0;
  if (len == 0 || len > KDC_PLAN_NAME_MAX)
    return KDC_ERR(KDC_INTERNAL, "plan section name \"%s\" must be 1..%d bytes",
                   name ? name : "(null)", KDC_PLAN_NAME_MAX);
  for (size_t i = 0; i < w->n; i++)
    if (strcmp(w->s[i].name, name) == 0)
      return KDC_ERR(KDC_INTERNAL, "plan section \"%s\" added twice", name);
  KDC_GROW(w->s, w->cap, w->n + 1);
  wsection *s = &w->s[w->n++];
  memset(s, 0, sizeof *s);
  s->kind = kind;
  memcpy(s->name, name, len);
  *out = s;
  return NULL;
}

kdc_status kdc_plan_writer_add(kdc_plan_writer *w, uint32_t kind, const char *name,
                               const void *data, size_t size) {
  wsection *s;
  KDC_RETURN_IF_ERROR(new_section(w, kind, name, &s));
  s->owned = kdc_xmalloc(size ? size : 1);
  if (size) memcpy(s->owned, data, size);
  s->parts = kdc_xmalloc(sizeof *s->parts);
  s->parts[0] = (kdc_plan_part){s->owned, size};
  s->n_parts = 1;
  s->size = size;
  return NULL;
}

kdc_status kdc_plan_writer_add_parts(kdc_plan_writer *w, uint32_t kind, const char *name,
                                     const kdc_plan_part *parts, size_t n_parts) {
  wsection *s;
  KDC_RETURN_IF_ERROR(new_section(w, kind, name, &s));
  s->parts = kdc_xmalloc((n_parts ? n_parts : 1) * sizeof *s->parts);
  if (n_parts) memcpy(s->parts, parts, n_parts * sizeof *parts);
  s->n_parts = n_parts;
  for (size_t i = 0; i < n_parts; i++) s->size += parts[i].size;
  return NULL;
}

kdc_status kdc_plan_writer_write(kdc_plan_writer *w, const char *path) {
  static const uint8_t zeros[KDC_PLAN_ALIGN];
  /* Layout: the header and table in one block, then each payload aligned. */
  size_t table_end = KDC_PLAN_HEADER_SIZE + w->n * KDC_PLAN_ENTRY_SIZE;
  uint8_t *head = kdc_xcalloc(table_end, 1);
  uint64_t *offsets = kdc_xcalloc(w->n + 1, sizeof *offsets);
  uint64_t end = table_end;
  for (size_t i = 0; i < w->n; i++) {
    offsets[i] = align64(end);
    end = offsets[i] + w->s[i].size;
    uint8_t *e = head + KDC_PLAN_HEADER_SIZE + i * KDC_PLAN_ENTRY_SIZE;
    kdc_store_le32(e, w->s[i].kind);
    memcpy(e + 8, w->s[i].name, 24);
    kdc_store_le64(e + 32, offsets[i]);
    kdc_store_le64(e + 40, w->s[i].size);
  }
  memcpy(head, KDC_PLAN_MAGIC, 8);
  kdc_store_le32(head + 8, KDC_PLAN_FORMAT_VERSION);
  kdc_store_le32(head + 12, KDC_PLAN_HEADER_SIZE);
  strncpy((char *)head + 16, KDC_VERSION_STRING, 15);
  kdc_store_le32(head + 32, (uint32_t)w->n);
  kdc_store_le32(head + 36, w->flags);
  kdc_store_le64(head + 40, end);

  /* The checksum covers the same byte stream the loop below writes. */
  kdc_hash64_state h;
  kdc_hash64_init(&h, 0);
  kdc_hash64_update(&h, head, CHECKSUM_AT);
  kdc_hash64_update(&h, head + KDC_PLAN_HEADER_SIZE, table_end - KDC_PLAN_HEADER_SIZE);
  uint64_t pos = table_end;
  for (size_t i = 0; i < w->n; i++) {
    kdc_hash64_update(&h, zeros, (size_t)(offsets[i] - pos));
    for (size_t j = 0; j < w->s[i].n_parts; j++)
      kdc_hash64_update(&h, w->s[i].parts[j].data, w->s[i].parts[j].size);
    pos = offsets[i] + w->s[i].size;
  }
  kdc_store_le64(head + CHECKSUM_AT, kdc_hash64_digest(&h));

  kdc_atomic_file *f;
  kdc_status err = kdc_atomic_file_open(path, &f);
  if (!err) err = kdc_atomic_file_write(f, head, table_end);
  pos = table_end;
  for (size_t i = 0; i < w->n && !err; i++) {
    err = kdc_atomic_file_write(f, zeros, (size_t)(offsets[i] - pos));
    for (size_t j = 0; j < w->s[i].n_parts && !err; j++)
      err = kdc_atomic_file_write(f, w->s[i].parts[j].data, w->s[i].parts[j].size);
    pos = offsets[i] + w->s[i].size;
  }
  free(head);
  free(offsets);
  if (err) {
    if (f) kdc_atomic_file_abort(f);
    return err;
  }
  return kdc_atomic_file_commit(f);
}

/* ---- reader ---- */

typedef struct {
  uint32_t kind;
  char name[24];    /* NUL-terminated (checked) */
  uint64_t offset, size;
} rsection;

struct kdc_plan_file {
  char *name;
  kdc_file_map file;
  char kdc_version[16];
  uint32_t flags;
  uint64_t checksum;
  rsection *s;
  size_t n;
};

static kdc_status fail(const kdc_plan_file *pf, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* "<file>: <message>", KDC_INVALID_INPUT. */
static kdc_status fail(const kdc_plan_file *pf, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  kdc_status st = kdc_status_makev(KDC_INVALID_INPUT, __FILE__, __LINE__, fmt, ap);
  va_end(ap);
  return kdc_status_annotate(st, "%s", pf->name);
}

/* Copies a NUL-padded field for messages, replacing non-printable bytes. */
static void printable(char *dst, const uint8_t *src, size_t n) {
  size_t i = 0;
  for (; i < n - 1 && src[i]; i++) dst[i] = src[i] >= 0x20 && src[i] < 0x7f ? (char)src[i] : '?';
  dst[i] = 0;
}

static kdc_status check_header(kdc_plan_file *pf) {
  const uint8_t *b = pf->file.data;
  size_t size = pf->file.size;
  size_t magic_n = size < 8 ? size : 8;
  if (memcmp(b, KDC_PLAN_MAGIC, magic_n) != 0)
    return fail(pf, "not a kdc plan (bad magic at byte 0)");
  if (size < 12)
    return fail(pf, "truncated: the file is %zu bytes, shorter than the %u-byte header", size,
                KDC_PLAN_HEADER_SIZE);
  uint32_t version = kdc_load_le32(b + 8);
  if (version != KDC_PLAN_FORMAT_VERSION) {
    char by[48] = "";
    if (size >= 32) {
      char v[16];
      printable(v, b + 16, 16);
      snprintf(by, sizeof by, " (written by kdc %s)", v);
    }
    return KDC_ERR(KDC_UNSUPPORTED, "%s: plan format version %" PRIu32 "%s, this kdc reads "
                   "version %u (kdc %s): rebuild the plan with this kdc", pf->name, version,
                   by, KDC_PLAN_FORMAT_VERSION, KDC_VERSION_STRING);
  }
  if (size < KDC_PLAN_HEADER_SIZE)
    return fail(pf, "truncated: the file is %zu bytes, shorter than the %u-byte header", size,
                KDC_PLAN_HEADER_SIZE);
  uint32_t header_size = kdc_load_le32(b + 12);
  if (header_size != KDC_PLAN_HEADER_SIZE)
    return fail(pf, "byte 12: header_size %" PRIu32 ", format version 1 has %u", header_size,
                KDC_PLAN_HEADER_SIZE);
  uint64_t file_size = kdc_load_le64(b + 40);
  if (file_size > size)
    return fail(pf, "truncated: the header says %" PRIu64 " bytes, the file has %zu",
                file_size, size);
  if (file_size < size)
    return fail(pf, "%zu bytes of trailing data: the header says %" PRIu64 " bytes, the file "
                "has %zu", size - (size_t)file_size, file_size, size);
  kdc_hash64_state h;
  kdc_hash64_init(&h, 0);
  kdc_hash64_update(&h, b, CHECKSUM_AT);
  kdc_hash64_update(&h, b + KDC_PLAN_HEADER_SIZE, size - KDC_PLAN_HEADER_SIZE);
  uint64_t computed = kdc_hash64_digest(&h);
  pf->checksum = kdc_load_le64(b + CHECKSUM_AT);
  if (computed != pf->checksum)
    return fail(pf, "checksum mismatch (stored %016" PRIx64 ", computed %016" PRIx64 "): the "
                "file is corrupted", pf->checksum, computed);
  /* From here on the bytes are what a writer wrote. */
  pf->flags = kdc_load_le32(b + 36);
  if (pf->flags & ~KNOWN_FLAGS)
    return fail(pf, "byte 36: unknown flags 0x%" PRIx32, pf->flags & ~KNOWN_FLAGS);
  if (!memchr(b + 16, 0, 16)) return fail(pf, "byte 16: kdc_version is not NUL-terminated");
  memcpy(pf->kdc_version, b + 16, 16);
  return NULL;
}

static int by_offset(const void *a, const void *b, void *ctx) {
  const rsection *s = ctx;
  const rsection *x = &s[*(const size_t *)a], *y = &s[*(const size_t *)b];
  return x->offset < y->offset ? -1 : x->offset > y->offset;
}

static kdc_status check_sections(kdc_plan_file *pf) {
  const uint8_t *b = pf->file.data;
  uint64_t size = pf->file.size;
  uint64_t n = kdc_load_le32(b + 32);
  uint64_t table_end = KDC_PLAN_HEADER_SIZE + n * KDC_PLAN_ENTRY_SIZE;  /* < 2^38 */
  if (table_end > size)
    return fail(pf, "section table of %" PRIu64 " entries (bytes %u..%" PRIu64 ") exceeds "
                "file size %" PRIu64, n, KDC_PLAN_HEADER_SIZE, table_end, size);
  pf->s = kdc_xcalloc((size_t)n + 1, sizeof *pf->s);
  for (size_t i = 0; i < n; i++) {
    const uint8_t *e = b + KDC_PLAN_HEADER_SIZE + i * KDC_PLAN_ENTRY_SIZE;
    rsection *s = &pf->s[i];
    s->kind = kdc_load_le32(e);
    s->offset = kdc_load_le64(e + 32);
    s->size = kdc_load_le64(e + 40);
    memcpy(s->name, e + 8, 24);
    pf->n++;
    if (!memchr(s->name, 0, 24) || !s->name[0]) {
      printable(s->name, e + 8, 24);
      return fail(pf, "section %zu: name \"%s\" is empty or not NUL-terminated", i, s->name);
    }
    if (kdc_load_le32(e + 4) != 0) return fail(pf, "section %zu (%s): reserved field is not 0",
                                               i, s->name);
    if (s->offset < table_end || s->offset % KDC_PLAN_ALIGN != 0)
      return fail(pf, "section %zu (%s): offset %" PRIu64 " is %s", i, s->name, s->offset,
                  s->offset < table_end ? "inside the header or section table"
                                        : "not a multiple of 64");
    if (s->offset > size || s->size > size - s->offset)  /* no overflow */
      return fail(pf, "section %zu (%s): offset %" PRIu64 " + size %" PRIu64 " exceeds file "
                  "size %" PRIu64, i, s->name, s->offset, s->size, size);
    for (size_t j = 0; j < i; j++)
      if (strcmp(pf->s[j].name, s->name) == 0)
        return fail(pf, "section %zu (%s): name also used by section %zu", i, s->name, j);
  }
  size_t *order = kdc_xcalloc((size_t)n + 1, sizeof *order);
  for (size_t i = 0; i < n; i++) order[i] = i;
  qsort_r(order, (size_t)n, sizeof *order, by_offset, pf->s);
  kdc_status err = NULL;
  for (size_t k = 1; k < n && !err; k++) {
    const rsection *prev = &pf->s[order[k - 1]], *s = &pf->s[order[k]];
    if (s->offset < prev->offset + prev->size)
      err = fail(pf, "section %zu (%s): bytes %" PRIu64 "..%" PRIu64 " overlap section %zu (%s)"
                 " bytes %" PRIu64 "..%" PRIu64, order[k], s->name, s->offset,
                 s->offset + s->size, order[k - 1], prev->name, prev->offset,
                 prev->offset + prev->size);
  }
  free(order);
  return err;
}

static kdc_status open_plan(const char *name, kdc_file_map file, kdc_plan_file **out) {
  kdc_plan_file *pf = kdc_xcalloc(1, sizeof *pf);
  pf->name = kdc_xstrdup(name);
  pf->file = file;
  kdc_status err = check_header(pf);
  if (!err) err = check_sections(pf);
  if (err) {
    kdc_plan_file_close(pf);
    return err;
  }
  *out = pf;
  return NULL;
}

kdc_status kdc_plan_file_open(const char *path, kdc_plan_file **out) {
  *out = NULL;
  kdc_file_map file;
  KDC_RETURN_IF_ERROR(kdc_file_map_open(path, &file));
  return open_plan(path, file, out);
}

kdc_status kdc_plan_file_open_mem(const char *name, const void *bytes, size_t size,
                                  kdc_plan_file **out) {
  *out = NULL;
  kdc_file_map file;
  kdc_file_map_copy(bytes, size, &file);
  return open_plan(name, file, out);
}

void kdc_plan_file_close(kdc_plan_file *pf) {
  if (!pf) return;
  kdc_file_map_close(&pf->file);
  free(pf->s);
  free(pf->name);
  free(pf);
}

const char *kdc_plan_file_name(const kdc_plan_file *pf) { return pf->name; }
const char *kdc_plan_file_kdc_version(const kdc_plan_file *pf) { return pf->kdc_version; }
uint32_t kdc_plan_file_flags(const kdc_plan_file *pf) { return pf->flags; }
uint64_t kdc_plan_file_checksum(const kdc_plan_file *pf) { return pf->checksum; }
uint64_t kdc_plan_file_size(const kdc_plan_file *pf) { return pf->file.size; }
size_t kdc_plan_file_count(const kdc_plan_file *pf) { return pf->n; }

kdc_plan_section_info kdc_plan_file_info(const kdc_plan_file *pf, size_t i) {
  KDC_ASSERT(i < pf->n);
  const rsection *s = &pf->s[i];
  return (kdc_plan_section_info){s->kind, s->name, s->offset, s->size,
                                 pf->file.data + s->offset};
}

static bool found(const kdc_plan_file *pf, size_t i, const void **out_data, size_t *out_size) {
  *out_data = pf->file.data + pf->s[i].offset;
  *out_size = (size_t)pf->s[i].size;
  return true;
}

bool kdc_plan_file_find(const kdc_plan_file *pf, uint32_t kind, const void **out_data,
                        size_t *out_size) {
  for (size_t i = 0; i < pf->n; i++)
    if (pf->s[i].kind == kind) return found(pf, i, out_data, out_size);
  *out_data = NULL;
  *out_size = 0;
  return false;
}

bool kdc_plan_file_find_name(const kdc_plan_file *pf, const char *name, const void **out_data,
                             size_t *out_size) {
  for (size_t i = 0; i < pf->n; i++)
    if (strcmp(pf->s[i].name, name) == 0) return found(pf, i, out_data, out_size);
  *out_data = NULL;
  *out_size = 0;
  return false;
}

kdc_status kdc_plan_file_reader(const kdc_plan_file *pf, uint32_t kind, kdc_reader *out) {
  for (size_t i = 0; i < pf->n; i++)
    if (pf->s[i].kind == kind) {
      kdc_reader_init(out, pf->file.data + pf->s[i].offset, (size_t)pf->s[i].size, pf->name,
                      pf->s[i].name);
      return NULL;
    }
  kdc_reader_init(out, NULL, 0, pf->name, "");
  return KDC_ERR(KDC_INVALID_INPUT, "%s: no %s section (kind %" PRIu32 ")", pf->name,
                 kdc_plan_section_kind_name(kind), kind);
}
