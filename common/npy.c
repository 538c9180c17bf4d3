/*
 * npy.c: NumPy .npy files (numpy/lib/format.py, format versions 1.0-3.0).
 *
 *   magic "\x93NUMPY", u8 major, u8 minor,
 *   header length: u16 (v1) or u32 (v2, v3), little endian,
 *   header: a Python dict literal {'descr': '<f4', 'fortran_order': False,
 *           'shape': (2, 3), } padded with spaces and ended by '\n',
 *   data:   C-order elements, starting at a multiple of 64 bytes (numpy >=
 *           1.9; older writers used 16, which the reader also accepts).
 *
 * The header is parsed as a small Python literal grammar (keys in any order,
 * either quote, trailing commas, nothing else), not by string search, so a
 * malformed header is refused with the byte offset where it goes wrong.  The
 * writer reproduces numpy.save byte for byte, including the 21 spare spaces
 * numpy >= 1.23 leaves for growing the first dim in place.
 */
#include "common/io.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kdc/arena.h"

static const uint8_t magic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};

/* descr strings, little-endian only; 1-byte types take either prefix. */
static const struct {
  const char *descr;
  kdc_io_dtype dtype;
} descrs[] = {
    {"<f4", KDC_IO_DTYPE_F32}, {"<f8", KDC_IO_DTYPE_F64}, {"<f2", KDC_IO_DTYPE_F16},
    {"<i4", KDC_IO_DTYPE_I32}, {"<i8", KDC_IO_DTYPE_I64}, {"|i1", KDC_IO_DTYPE_I8},
    {"|u1", KDC_IO_DTYPE_U8},  {"|b1", KDC_IO_DTYPE_BOOL}, {"<i1", KDC_IO_DTYPE_I8},
    {"<u1", KDC_IO_DTYPE_U8},  {"<b1", KDC_IO_DTYPE_BOOL},
};

/* ---- header parsing ---- */

typedef struct {
  const char *name;    /* file name for messages */
  const char *s;       /* header text */
  size_t n, pos;
  size_t base;         /* file offset of s[0] */
} parser;

static kdc_status perr(const parser *p, const char *what) {
  return KDC_ERR(KDC_INVALID_INPUT, "%s: byte %zu: %s", p->name, p->base + p->pos, what);
}

static void skip_ws(parser *p) {
  while (p->pos < p->n && (p->s[p->pos] == ' ' || p->s[p->pos] == '\t' ||
                           p->s[p->pos] == '\n' || p->s[p->pos] == '\r'))
    p->pos++;
}

static bool eat(parser *p, char c) {
  skip_ws(p);
  if (p->pos < p->n && p->s[p->pos] == c) {
    p->pos++;
    return true;
  }
  return false;
}

/* A quoted string without escapes (numpy never writes any); *out points into
 * the header, *len is its length. */
static kdc_status parse_str(parser *p, const char **out, size_t *len) {
  skip_ws(p);
  if (p->pos >= p->n || (p->s[p->pos] != '\'' && p->s[p->pos] != '"'))
    return perr(p, "expected a quoted string");
  char q = p->s[p->pos];
  size_t start = ++p->pos;
  while (p->pos < p->n && p->s[p->pos] != q) {
    if (p->s[p->pos] == '\\') return perr(p, "escapes in header strings are not supported");
    p->pos++;
  }
  if (p->pos >= p->n) return perr(p, "unterminated string");
  *out = p->s + start;
  *len = p->pos - start;
  p->pos++;
  return NULL;
}

static bool word(parser *p, const char *w) {
  size_t n = strlen(w);
  skip_ws(p);
  if (p->n - p->pos >= n && memcmp(p->s + p->pos, w, n) == 0) {
    p->pos += n;
    return true;
  }
  return false;
}

/* A shape tuple: (), (5,), (2, 3), with an optional trailing comma and the
 * Python 2 'L' suffix. */
static kdc_status parse_shape(parser *p, int *rank, int64_t *dims) {
  if (!eat(p, '(')) return perr(p, "'shape' must be a tuple of integers");
  *rank = 0;
  for (;;) {
    if (eat(p, ')')) return NULL;
    skip_ws(p);
    size_t start = p->pos;
    if (p->pos < p->n && p->s[p->pos] == '-') return perr(p, "negative dimension in 'shape'");
    int64_t v = 0;
    while (p->pos < p->n && p->s[p->pos] >= '0' && p->s[p->pos] <= '9') {
      int d = p->s[p->pos] - '0';
      if (v > (INT64_MAX - d) / 10) {
        p->pos = start;
        return perr(p, "dimension in 'shape' overflows int64");
      }
      v = v * 10 + d;
      p->pos++;
    }
    if (p->pos == start) return perr(p, "expected an integer or ')' in 'shape'");
    if (p->pos < p->n && p->s[p->pos] == 'L') p->pos++;
    if (*rank == KDC_IO_MAX_RANK) {
      p->pos = start;
      return perr(p, "'shape' has more than 8 dimensions (kdc supports rank <= 8)");
    }
    dims[(*rank)++] = v;
    if (eat(p, ')')) {
      /* (5) is an int in parentheses, not a tuple; numpy never writes it. */
      if (*rank == 1) {
        p->pos--;
        return perr(p, "'shape' (n) must be written as a tuple (n,)");
      }
      return NULL;
    }
    if (!eat(p, ',')) return perr(p, "expected ',' or ')' in 'shape'");
  }
}

typedef struct {
  kdc_io_dtype dtype;
  int rank;
  int64_t dims[KDC_IO_MAX_RANK];
} header;

static kdc_status parse_descr(parser *p, kdc_io_dtype *out) {
  skip_ws(p);
  if (p->pos < p->n && p->s[p->pos] == '[')
    return KDC_ERR(KDC_UNSUPPORTED, "%s: byte %zu: structured dtypes are not supported",
                   p->name, p->base + p->pos);
  size_t at = p->pos;
  const char *s;
  size_t len;
  KDC_RETURN_IF_ERROR(parse_str(p, &s, &len));
  for (size_t i = 0; i < sizeof descrs / sizeof descrs[0]; i++)
    if (strlen(descrs[i].descr) == len && memcmp(descrs[i].descr, s, len) == 0) {
      *out = descrs[i].dtype;
      return NULL;
    }
  if (len > 0 && s[0] == '>')
    return KDC_ERR(KDC_UNSUPPORTED, "%s: byte %zu: big-endian dtype '%.*s' is not supported",
                   p->name, p->base + at, (int)len, s);
  return KDC_ERR(KDC_UNSUPPORTED,
                 "%s: byte %zu: dtype '%.*s' is not supported (expected one of <f4 <f8 <f2 "
                 "<i4 <i8 |i1 |u1 |b1)", p->name, p->base + at, (int)(len > 32 ? 32 : len), s);
}

static kdc_status parse_header(parser *p, header *h) {
  bool seen[3] = {false, false, false};
  if (!eat(p, '{')) return perr(p, "header is not a Python dict literal");
  for (;;) {
    if (eat(p, '}')) break;
    skip_ws(p);
    size_t key_at = p->pos;
    const char *key;
    size_t klen;
    KDC_RETURN_IF_ERROR(parse_str(p, &key, &klen));
    int k = klen == 5 && !memcmp(key, "descr", 5)           ? 0
            : klen == 13 && !memcmp(key, "fortran_order", 13) ? 1
            : klen == 5 && !memcmp(key, "shape", 5)           ? 2
                                                               : -1;
    if (k < 0 || seen[k]) {
      p->pos = key_at;
      return perr(p, k < 0 ? "unexpected key in header (expected 'descr', 'fortran_order', "
                             "'shape')" : "duplicate key in header");
    }
    seen[k] = true;
    if (!eat(p, ':')) return perr(p, "expected ':' after a header key");
    if (k == 0) {
      KDC_RETURN_IF_ERROR(parse_descr(p, &h->dtype));
    } else if (k == 1) {
      skip_ws(p);
      size_t at = p->pos;
      if (word(p, "True"))
        return KDC_ERR(KDC_UNSUPPORTED, "%s: byte %zu: fortran_order True is not supported "
                       "(save a C-order array, e.g. np.ascontiguousarray)", p->name, p->base + at);
      if (!word(p, "False")) return perr(p, "'fortran_order' must be True or False");
    } else {
      KDC_RETURN_IF_ERROR(parse_shape(p, &h->rank, h->dims));
    }
    if (eat(p, '}')) break;
    if (!eat(p, ',')) return perr(p, "expected ',' or '}' in the header dict");
  }
  skip_ws(p);
  if (p->pos != p->n) return perr(p, "unexpected text after the header dict");
  for (int k = 0; k < 3; k++)
    if (!seen[k]) {
      static const char *const keys[] = {"descr", "fortran_order", "shape"};
      return KDC_ERR(KDC_INVALID_INPUT, "%s: byte %zu: header has no '%s' key", p->name,
                     p->base, keys[k]);
    }
  return NULL;
}

/* Parses the preamble and header in |buf| (|avail| bytes of the file's
 * start, possibly fewer than the whole header).  On success *|data_at| is
 * the data's file offset. */
static kdc_status parse_prefix(const char *name, const uint8_t *buf, size_t avail,
                               header *h, size_t *data_at) {
  if (avail < 8 || memcmp(buf, magic, 6) != 0)
    return KDC_ERR(KDC_INVALID_INPUT, "%s: byte 0: not a .npy file (bad magic; "
                   "expected \\x93NUMPY)", name);
  uint8_t major = buf[6], minor = buf[7];
  if ((major != 1 && major != 2 && major != 3) || minor != 0)
    return KDC_ERR(KDC_UNSUPPORTED, "%s: byte 6: .npy format version %u.%u is not supported "
                   "(kdc reads 1.0, 2.0, 3.0)", name, major, minor);
  size_t pre = major == 1 ? 10 : 12;
  if (avail < pre)
    return KDC_ERR(KDC_INVALID_INPUT, "%s: truncated header: expected at least %zu bytes, "
                   "file has %zu", name, pre, avail);
  size_t hlen = major == 1 ? kdc_load_le16(buf + 8) : kdc_load_le32(buf + 8);
  if (hlen > KDC_NPY_MAX_HEADER)
    return KDC_ERR(KDC_INVALID_INPUT, "%s: byte 8: a header of %zu bytes is over the %d-byte "
                   "limit", name, hlen, KDC_NPY_MAX_HEADER);
  if (avail - pre < hlen)
    return KDC_ERR(KDC_INVALID_INPUT, "%s: truncated header: expected %zu bytes, file has %zu",
                   name, pre + hlen, avail);
  const char *text = (const char *)buf + pre;
  if (hlen == 0 || text[hlen - 1] != '\n')
    return KDC_ERR(KDC_INVALID_INPUT, "%s: byte %zu: header does not end with a newline",
                   name, pre + hlen - (hlen > 0));
  if (memchr(text, 0, hlen))
    return KDC_ERR(KDC_INVALID_INPUT, "%s: byte %zu: NUL byte in the header", name,
                   pre + (size_t)((const char *)memchr(text, 0, hlen) - text));
  parser p = {name, text, hlen, 0, pre};
  memset(h, 0, sizeof *h);
  KDC_RETURN_IF_ERROR(parse_header(&p, h));
  *data_at = pre + hlen;
  return NULL;
}

static kdc_status array_size(const char *name, const header *h, size_t *nbytes) {
  int bad;
  if (kdc_io_shape_bytes(h->dtype, h->rank, h->dims, nbytes, &bad)) return NULL;
  if (bad >= 0)
    return KDC_ERR(KDC_INVALID_INPUT, "%s: 'shape' dim %d (%" PRId64 ") makes the element "
                   "count overflow int64", name, bad, h->dims[bad]);
  return KDC_ERR(KDC_INVALID_INPUT, "%s: 'shape' makes the array larger than this machine's "
                 "address space", name);
}

static kdc_status truncated(const char *name, size_t data_at, size_t nbytes, size_t have) {
  return KDC_ERR(KDC_INVALID_INPUT, "%s: truncated data: expected %zu bytes (%zu header + "
                 "%zu data), file has %zu", name, data_at + nbytes, data_at, nbytes, have);
}

/* Allocates |out|'s data for header |h| after checking that the |size|-byte
 * file (SIZE_MAX: unknown) holds it: a header cannot make kdc allocate more
 * than the file has. */
static kdc_status fill(const char *name, const header *h, size_t data_at, size_t size,
                       kdc_npy_array *out) {
  out->dtype = h->dtype;
  out->rank = h->rank;
  memcpy(out->dims, h->dims, sizeof out->dims);
  KDC_RETURN_IF_ERROR(array_size(name, h, &out->nbytes));
  if (size != SIZE_MAX && size - data_at < out->nbytes) {
    kdc_status st = truncated(name, data_at, out->nbytes, size);
    out->nbytes = 0;
    return st;
  }
  out->data = aligned_alloc(64, (out->nbytes + 63) / 64 * 64 + 64 * (out->nbytes == 0));
  if (!out->data)
    return KDC_ERR(KDC_OUT_OF_MEMORY, "%s: cannot allocate %zu bytes", name, out->nbytes);
  return NULL;
}

kdc_status kdc_npy_read_mem(const char *name, const void *bytes, size_t size,
                            kdc_npy_array *out) {
  memset(out, 0, sizeof *out);
  header h;
  size_t data_at = 0;
  KDC_RETURN_IF_ERROR(parse_prefix(name, bytes, size, &h, &data_at));
  KDC_RETURN_IF_ERROR(fill(name, &h, data_at, size, out));
  memcpy(out->data, (const uint8_t *)bytes + data_at, out->nbytes);
  return NULL;
}

kdc_status kdc_npy_read(const char *path, kdc_npy_array *out) {
  memset(out, 0, sizeof *out);
  int fd;
  uint64_t st_size;
  KDC_RETURN_IF_ERROR(kdc_file_open_input(path, &fd, &st_size));
  FILE *fp = fdopen(fd, "rb");
  if (!fp) {
    close(fd);
    return KDC_ERR(KDC_IO_ERROR, "%s: cannot open: %s", path, strerror(errno));
  }
  /* Read the preamble, then exactly the header, then the data straight into
   * the array: no second copy of a large array.  A zero st_size (procfs) is
   * an unknown size. */
  size_t file_size = st_size && st_size < SIZE_MAX ? (size_t)st_size : SIZE_MAX;
  uint8_t pre[12];
  size_t got = fread(pre, 1, sizeof pre, fp);
  size_t hdr_end = got >= 10 && pre[6] == 1 ? 10 + (size_t)kdc_load_le16(pre + 8)
                   : got >= 12              ? 12 + (size_t)kdc_load_le32(pre + 8)
                                            : got;
  if (hdr_end > file_size || hdr_end > 12 + KDC_NPY_MAX_HEADER)
    hdr_end = got;  /* the parser reports the truncation or the limit */
  uint8_t *buf = kdc_xmalloc(hdr_end > got ? hdr_end : got);
  memcpy(buf, pre, got);
  if (hdr_end > got) got += fread(buf + got, 1, hdr_end - got, fp);
  header h;
  size_t data_at = 0;
  kdc_status st = parse_prefix(path, buf, got, &h, &data_at);
  free(buf);
  /* A valid header is at least "{}\n" long, so data_at >= 12 = bytes read. */
  if (!st) st = fill(path, &h, data_at, file_size, out);
  if (!st) {
    size_t have = fread(out->data, 1, out->nbytes, fp);
    if (ferror(fp))
      st = KDC_ERR(KDC_IO_ERROR, "%s: read error: %s", path, strerror(errno));
    else if (have < out->nbytes)
      st = truncated(path, data_at, out->nbytes, data_at + have);
    if (st) kdc_npy_free(out);
  }
  fclose(fp);
  return st;
}

kdc_status kdc_npy_to_f32(const char *name, kdc_npy_array *a) {
  if (a->dtype == KDC_IO_DTYPE_F32) return NULL;
  size_t n = a->nbytes / kdc_io_dtype_size(a->dtype);
  float *f = aligned_alloc(64, (n * 4 + 63) / 64 * 64 + 64 * (n == 0));
  if (!f) return KDC_ERR(KDC_OUT_OF_MEMORY, "%s: cannot allocate %zu bytes", name, n * 4);
  if (!kdc_io_convert_to_f32(a->dtype, a->data, n, f)) {
    free(f);
    return KDC_ERR(KDC_INVALID_INPUT, "%s: expected a floating-point array, got %s", name,
                   kdc_io_dtype_name(a->dtype));
  }
  free(a->data);
  a->data = f;
  a->nbytes = n * 4;
  a->dtype = KDC_IO_DTYPE_F32;
  return NULL;
}

void kdc_npy_free(kdc_npy_array *a) {
  if (!a) return;
  free(a->data);
  memset(a, 0, sizeof *a);
}

/* ---- writer ---- */

static const char *descr_of(kdc_io_dtype dt) {
  for (size_t i = 0; i < sizeof descrs / sizeof descrs[0]; i++)
    if (descrs[i].dtype == dt) return descrs[i].descr;
  return NULL;
}

/* Formats the preamble and header dict exactly as numpy's
 * _write_array_header and _wrap_header do for version 1.0 into |out| (at
 * least 256 bytes); returns its length, a multiple of 64. */
static kdc_status build_header(const char *name, kdc_npy_dtype dtype, int rank,
                               const int64_t *dims, uint8_t *out, size_t *out_len,
                               size_t *out_nbytes) {
  const char *descr = descr_of(dtype);
  if (!descr)
    return KDC_ERR(KDC_UNSUPPORTED, "%s: dtype %s has no .npy descr", name,
                   kdc_io_dtype_name(dtype));
  if (rank < 0 || rank > KDC_IO_MAX_RANK)
    return KDC_ERR(KDC_INVALID_INPUT, "%s: rank %d is outside 0..8", name, rank);
  header h = {dtype, rank, {0}};
  if (rank > 0) memcpy(h.dims, dims, (size_t)rank * sizeof *dims);
  KDC_RETURN_IF_ERROR(array_size(name, &h, out_nbytes));
  char text[256];  /* 8 dims of at most 19 digits fit with room to spare */
  int n = snprintf(text, sizeof text, "{'descr': '%s', 'fortran_order': False, 'shape': (",
                   descr);
  for (int i = 0; i < rank; i++)
    n += snprintf(text + n, sizeof text - (size_t)n, "%s%" PRId64, i ? ", " : "", dims[i]);
  n += snprintf(text + n, sizeof text - (size_t)n, "%s), }", rank == 1 ? "," : "");
  if (rank > 0) {  /* spare room to grow dims[0] in place (numpy >= 1.23) */
    int digits = snprintf(NULL, 0, "%" PRId64, dims[0]);
    n += snprintf(text + n, sizeof text - (size_t)n, "%*s", 21 - digits, "");
  }
  size_t hlen = (size_t)n + 1;           /* with the final '\n' */
  size_t pad = 64 - (10 + hlen) % 64;    /* 1..64, as numpy computes it */
  size_t len = 10 + hlen + pad;
  memcpy(out, magic, 6);
  out[6] = 1, out[7] = 0;
  kdc_store_le16(out + 8, (uint16_t)(hlen + pad));
  memcpy(out + 10, text, (size_t)n);
  memset(out + 10 + n, ' ', pad);
  out[len - 1] = '\n';
  *out_len = len;
  return NULL;
}

kdc_status kdc_npy_encode(const char *name, kdc_npy_dtype dtype, int rank,
                          const int64_t *dims, const void *data,
                          void **out_bytes, size_t *out_size) {
  *out_bytes = NULL;
  *out_size = 0;
  uint8_t hdr[384];
  size_t hlen, nbytes;
  KDC_RETURN_IF_ERROR(build_header(name, dtype, rank, dims, hdr, &hlen, &nbytes));
  uint8_t *out = kdc_xmalloc(hlen + nbytes);
  memcpy(out, hdr, hlen);
  if (nbytes) memcpy(out + hlen, data, nbytes);
  *out_bytes = out;
  *out_size = hlen + nbytes;
  return NULL;
}

kdc_status kdc_npy_write(const char *path, kdc_npy_dtype dtype, int rank,
                         const int64_t *dims, const void *data) {
  uint8_t hdr[384];
  size_t hlen, nbytes;
  KDC_RETURN_IF_ERROR(build_header(path, dtype, rank, dims, hdr, &hlen, &nbytes));
  kdc_atomic_file *f;
  KDC_RETURN_IF_ERROR(kdc_atomic_file_open(path, &f));
  kdc_status st = kdc_atomic_file_write(f, hdr, hlen);
  if (!st) st = kdc_atomic_file_write(f, data, nbytes);
  if (st) {
    kdc_atomic_file_abort(f);
    return st;
  }
  return kdc_atomic_file_commit(f);
}
