/*
 * common/zip.c: zip archives through libzip (common/kfiles.h).
 *
 * Reading is from memory (zip_source_buffer_create): every member name is
 * checked first (an archive with an absolute or ".." name is refused as a
 * whole: `unzip` would write outside its folder, and kdc treats it as
 * hostile); then each wanted member is checked against its cap by its
 * declared size before anything is allocated, and read in bounded chunks
 * that must add up to exactly the declared size (a member that inflates
 * past it -- a zip bomb that lies about its size -- is refused when the
 * count passes it, with at most one chunk read beyond).  Writing stores
 * members uncompressed into a memory buffer (Keras does the same for
 * model.weights.h5).
 */
#include <stdlib.h>
#include <string.h>
#include <zip.h>

#include "common/kfiles.h"
#include "kdc/arena.h"

bool kdc_is_zip(const void *data, size_t len) {
  return len >= 4 && !memcmp(data, "PK\x03\x04", 4);
}

static bool bad_name(const char *n) {
  if (!*n || n[0] == '/' || n[0] == '\\') return true;
  if (strlen(n) >= 2 && n[1] == ':') return true; /* C:... */
  for (const char *c = n; *c;) {
    size_t k = strcspn(c, "/\\");
    if (k == 2 && c[0] == '.' && c[1] == '.') return true;
    c += k;
    if (*c) c++;
  }
  return false;
}

static kdc_status read_member(const char *file, zip_t *z, zip_int64_t idx, kdc_zip_member *m) {
  zip_stat_t s;
  zip_stat_init(&s);
  if (zip_stat_index(z, (zip_uint64_t)idx, 0, &s) < 0 || !(s.valid & ZIP_STAT_SIZE))
    return KDC_ERR(KDC_INVALID_INPUT, "%s: %s: unreadable zip entry: %s", file, m->name,
                   zip_strerror(z));
  if (s.size > m->cap)
    return KDC_ERR(KDC_INVALID_INPUT, "%s: %s: declared size %llu bytes is past kdc's limit of "
                   "%zu bytes for this member", file, m->name, (unsigned long long)s.size, m->cap);
  zip_file_t *zf = zip_fopen_index(z, (zip_uint64_t)idx, 0);
  if (!zf)
    return KDC_ERR(KDC_INVALID_INPUT, "%s: %s: cannot open the member: %s", file, m->name,
                   zip_strerror(z));
  size_t want = (size_t)s.size;
  char *buf = kdc_xmalloc(want + 1);
  size_t got = 0;
  kdc_status st = NULL;
  for (;;) {
    char extra[4096];
    /* read into the buffer while it has room, then probe for bytes past the
     * declared size */
    char *dst = got < want ? buf + got : extra;
    size_t room = got < want ? want - got : sizeof extra;
    if (room > (1 << 20)) room = 1 << 20;
    zip_int64_t r = zip_fread(zf, dst, room);
    if (r < 0) {
      st = KDC_ERR(KDC_INVALID_INPUT, "%s: %s: damaged member data: %s", file, m->name,
                   zip_file_strerror(zf));
      break;
    }
    if (r == 0) break;
    got += (size_t)r;
    if (got > want) {
      st = KDC_ERR(KDC_INVALID_INPUT, "%s: %s: the member inflates past its declared size of "
                   "%zu bytes", file, m->name, want);
      break;
    }
  }
  zip_fclose(zf);
  if (!st && got != want)
    st = KDC_ERR(KDC_INVALID_INPUT, "%s: %s: %zu bytes of data, %zu declared", file, m->name,
                 got, want);
  if (st) {
    free(buf);
    return st;
  }
  buf[want] = 0;
  m->data = buf;
  m->len = want;
  return NULL;
}

kdc_status kdc_zip_read(const char *file, const void *data, size_t len, kdc_zip_member *want,
                        size_t n_want) {
  for (size_t i = 0; i < n_want; i++) want[i].data = NULL, want[i].len = 0;
  zip_error_t ze;
  zip_error_init(&ze);
  zip_source_t *src = zip_source_buffer_create(data, len, 0, &ze);
  if (!src) {
    zip_error_fini(&ze);
    return KDC_ERR(KDC_OUT_OF_MEMORY, "%s: out of memory opening the zip archive", file);
  }
  zip_t *z = zip_open_from_source(src, ZIP_RDONLY | ZIP_CHECKCONS, &ze);
  if (!z) {
    kdc_status st = KDC_ERR(KDC_INVALID_INPUT, "%s: not a readable zip archive: %s", file,
                            zip_error_strerror(&ze));
    zip_source_free(src);
    zip_error_fini(&ze);
    return st;
  }
  zip_error_fini(&ze);
  kdc_status st = NULL;
  zip_int64_t n = zip_get_num_entries(z, 0);
  if (n > KDC_ZIP_MAX_MEMBERS)
    st = KDC_ERR(KDC_INVALID_INPUT, "%s: %lld members, more than kdc reads (%d)", file,
                 (long long)n, KDC_ZIP_MAX_MEMBERS);
  zip_int64_t *idx = kdc_xmalloc(sizeof *idx * (n_want + 1));
  for (size_t i = 0; i < n_want; i++) idx[i] = -1;
  for (zip_int64_t i = 0; i < n && !st; i++) {
    const char *nm = zip_get_name(z, (zip_uint64_t)i, ZIP_FL_ENC_RAW);
    if (!nm) {
      st = KDC_ERR(KDC_INVALID_INPUT, "%s: member %lld: unreadable name", file, (long long)i);
      break;
    }
    if (bad_name(nm)) {
      st = KDC_ERR(KDC_INVALID_INPUT, "%s: member \"%.200s\": an absolute path or a \"..\" "
                   "component (refused: it would point outside the archive's folder)", file, nm);
      break;
    }
    for (size_t k = 0; k < n_want; k++) {
      if (strcmp(nm, want[k].name)) continue;
      if (idx[k] >= 0)
        st = KDC_ERR(KDC_INVALID_INPUT, "%s: member %s appears twice", file, nm);
      idx[k] = i;
    }
  }
  for (size_t k = 0; k < n_want && !st; k++) {
    if (idx[k] < 0) {
      if (want[k].required)
        st = KDC_ERR(KDC_INVALID_INPUT, "%s: no member %s in the zip archive (a .keras archive "
                     "holds config.json, metadata.json and model.weights.h5)", file, want[k].name);
      continue;
    }
    st = read_member(file, z, idx[k], &want[k]);
  }
  free(idx);
  zip_discard(z);
  if (st)
    for (size_t i = 0; i < n_want; i++) free(want[i].data), want[i].data = NULL, want[i].len = 0;
  return st;
}

kdc_status kdc_zip_write(const kdc_zip_entry *e, size_t n, void **out, size_t *out_len) {
  *out = NULL;
  *out_len = 0;
  zip_error_t ze;
  zip_error_init(&ze);
  zip_source_t *buf = zip_source_buffer_create(NULL, 0, 0, &ze);
  zip_t *z = buf ? zip_open_from_source(buf, ZIP_TRUNCATE, &ze) : NULL;
  zip_error_fini(&ze);
  if (!z) {
    if (buf) zip_source_free(buf);
    return KDC_ERR(KDC_INTERNAL, "libzip: cannot create an archive in memory");
  }
  zip_source_keep(buf); /* read the bytes after zip_close */
  kdc_status st = NULL;
  for (size_t i = 0; i < n && !st; i++) {
    zip_source_t *s = zip_source_buffer(z, e[i].data, e[i].len, 0);
    zip_int64_t k = s ? zip_file_add(z, e[i].name, s, ZIP_FL_ENC_UTF_8) : -1;
    if (k < 0) {
      if (s) zip_source_free(s);
      st = KDC_ERR(KDC_INTERNAL, "libzip: cannot add %s: %s", e[i].name, zip_strerror(z));
    } else {
      zip_set_file_compression(z, (zip_uint64_t)k, ZIP_CM_STORE, 0);
    }
  }
  if (st || zip_close(z) < 0) {
    if (!st) st = KDC_ERR(KDC_INTERNAL, "libzip: cannot finish the archive: %s", zip_strerror(z));
    zip_discard(z);
    zip_source_free(buf);
    return st;
  }
  zip_stat_t s;
  zip_stat_init(&s);
  if (zip_source_stat(buf, &s) < 0 || zip_source_open(buf) < 0) {
    zip_source_free(buf);
    return KDC_ERR(KDC_INTERNAL, "libzip: cannot read the archive back");
  }
  char *data = kdc_xmalloc(s.size + 1);
  zip_int64_t r = zip_source_read(buf, data, s.size);
  zip_source_close(buf);
  zip_source_free(buf);
  if (r < 0 || (zip_uint64_t)r != s.size) {
    free(data);
    return KDC_ERR(KDC_INTERNAL, "libzip: cannot read the archive back");
  }
  *out = data;
  *out_len = (size_t)s.size;
  return NULL;
}
