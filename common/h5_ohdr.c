/*
 * common/h5_ohdr.c: check the attribute messages of an object header before
 * the HDF5 library decodes them (docs/frontend.md, "Residual risk").
 *
 * H5Aexists_by_name and H5Aopen_by_name decode every attribute message of
 * the object's header while they look for a name, and HDF5 1.10.8's
 * H5O_attr_decode trusts the message's fields: it strdup()s the name
 * without bounding it by its stored length, and copies npoints x element
 * size bytes of data whatever the message's size (both out-of-bounds reads
 * a crafted `.h5` reaches; found by tests/fuzz/fuzz_hdf5.c; HDF5 bounded
 * the decoder in 1.14.1, HDFGroup/hdf5 PR 2749, and the name's terminator
 * in PR 5872, CVE-2025-2310).
 *
 * So before kdc asks for an attribute of an object, the object's header is
 * walked in the file image kdc holds (version 1 and 2 headers, their
 * continuation chunks, bounded) and each attribute message is checked: not
 * shared, its name NUL-terminated inside its stored length, its datatype
 * and dataspace inside the message, and the data the dataspace and the
 * element size call for inside the message too.  Attributes kept in dense
 * storage (a fractal heap; h5py writes them only for files made with
 * libver="latest" and many or large attributes, Keras never) are refused.
 */
#include <hdf5.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/h5_heap.h"
#include "kdc/arena.h"

#define MAX_CHUNKS 1024
#define UNDEF_ADDR UINT64_MAX

typedef struct walk {
  const uint8_t *img;
  size_t len;
  size_t sz_addr, sz_len;
  uint64_t chunk_addr[MAX_CHUNKS], chunk_size[MAX_CHUNKS];
  int n_chunks;
} walk;

static uint64_t addr_at(const walk *w, const uint8_t *p) {
  uint64_t a = kdc_h5_le(p, w->sz_addr);
  return w->sz_addr < 8 && a == (UINT64_C(1) << (8 * w->sz_addr)) - 1 ? UNDEF_ADDR
         : w->sz_addr == 8 && a == UINT64_MAX                        ? UNDEF_ADDR
                                                                     : a;
}

static uint64_t pad8(uint64_t n, bool v1) { return v1 ? (n + 7) & ~(uint64_t)7 : n; }

/* The bytes the datatype message |dt| (|n| bytes) needs for its class, or
 * UINT64_MAX for a class Keras never gives an attribute (compound, enum,
 * array, opaque, reference, time, bitfield: their decoders trust more
 * counts than these bounds cover).  Integer, float and string, and a
 * variable-length sequence or string of 1-byte integers or characters (the
 * conversion sizes its buffers by the base type's size; kdc_h5_check_vlen_
 * strings compares heap objects with lengths counted in bytes). */
static uint64_t type_bytes(const uint8_t *dt, uint64_t n, int depth) {
  if (n < 8) return UINT64_MAX;
  switch (dt[0] & 0x0f) {
  case 0: return 8 + 4;  /* integer: offset, precision */
  case 1: return 8 + 12; /* float: offset, precision, exponent and mantissa fields, bias */
  case 3: return 8;      /* string: no properties */
  case 9: {              /* variable length: a base type of 1-byte characters follows */
    if (depth) return UINT64_MAX;
    uint64_t b = type_bytes(dt + 8, n - 8, 1);
    return b == UINT64_MAX || kdc_h5_le(dt + 8 + 4, 4) != 1 ? UINT64_MAX : 8 + b;
  }
  default: return UINT64_MAX;
  }
}

/* Why the attribute message |d| (|s| bytes) is unsafe to decode, or NULL. */
static const char *check_attr(const walk *w, const uint8_t *d, uint64_t s) {
  if (s < 8) return "an attribute message too short for its header";
  unsigned v = d[0];
  if (v < 1 || v > 3) return "an attribute message of an unknown version";
  if (v >= 2 && (d[1] & 3)) return "an attribute with a shared datatype or dataspace";
  bool old = v == 1;
  uint64_t name_len = kdc_h5_le(d + 2, 2), dt_size = kdc_h5_le(d + 4, 2),
           ds_size = kdc_h5_le(d + 6, 2);
  uint64_t off = 8 + (v == 3);
  if (name_len == 0 || name_len > s - off || !memchr(d + off, 0, name_len))
    return "an attribute name not terminated inside its stored length";
  off += pad8(name_len, old);
  if (off > s || dt_size < 8 || dt_size > s - off)
    return "an attribute datatype outside its message";
  const uint8_t *dt = d + off;
  unsigned cls = dt[0] & 0x0f;
  if (dt_size < type_bytes(dt, dt_size, 0)) return "an attribute datatype kdc does not read";
  uint64_t elem = kdc_h5_le(dt + 4, 4); /* HDF5 1.10 copies npoints x this */
  if (cls == 9 && elem != 4 + w->sz_addr + 4) /* a vlen element is its descriptor */
    return "a variable-length attribute whose elements are not descriptors";
  off += pad8(dt_size, old);
  if (off > s || ds_size < 4 || ds_size > s - off)
    return "an attribute dataspace outside its message";
  const uint8_t *ds = d + off;
  unsigned dsv = ds[0], rank = ds[1];
  uint64_t npoints = 1, dims_at = dsv == 1 ? 8 : 4;
  if (dsv != 1 && dsv != 2) return "an attribute dataspace of an unknown version";
  if (rank > 32 || dims_at + (uint64_t)rank * w->sz_len > ds_size)
    return "an attribute dataspace whose dims lie outside it";
  if (dsv == 2 && ds[3] == 2) npoints = 0; /* the null dataspace */
  for (unsigned i = 0; i < rank && npoints; i++) {
    uint64_t n = kdc_h5_le(ds + dims_at + (uint64_t)i * w->sz_len, w->sz_len);
    if (n && npoints > UINT64_MAX / n) return "an attribute dataspace of too many points";
    npoints *= n;
  }
  off += pad8(ds_size, old);
  if (off > s) return "attribute data outside its message";
  if (elem && npoints > (s - off) / elem) return "attribute data larger than its message";
  return NULL;
}

/* Adds the chunk at |addr| (|size| bytes) to the walk, or says why not. */
static const char *add_chunk(walk *w, uint64_t addr, uint64_t size) {
  if (w->n_chunks == MAX_CHUNKS) return "an object header of too many chunks";
  if (addr == UNDEF_ADDR || addr >= w->len || size > w->len - addr)
    return "an object header chunk outside the file";
  for (int i = 0; i < w->n_chunks; i++)
    if (w->chunk_addr[i] == addr) return "an object header chunk listed twice";
  w->chunk_addr[w->n_chunks] = addr;
  w->chunk_size[w->n_chunks++] = size;
  return NULL;
}

/* The messages of chunk |c| (|n| bytes) of a version |v| header whose
 * message headers carry creation orders when |crt|. */
static const char *walk_chunk(walk *w, const uint8_t *c, uint64_t n, unsigned v, bool crt) {
  uint64_t mh = v == 1 ? 8 : 4 + 2 * crt;
  for (uint64_t p = 0; p < n;) {
    if (n - p < mh) {
      if (v == 1) return "an object header chunk that ends inside a message header";
      break; /* a version 2 gap */
    }
    const uint8_t *m = c + p;
    uint64_t type = v == 1 ? kdc_h5_le(m, 2) : m[0];
    uint64_t size = v == 1 ? kdc_h5_le(m + 2, 2) : kdc_h5_le(m + 1, 2);
    unsigned flags = v == 1 ? m[4] : m[3];
    if (size > n - p - mh) return "an object header message larger than its chunk";
    const uint8_t *d = m + mh;
    if (type == 0x0c) {
      if (flags & 2) return "a shared attribute message";
      const char *why = check_attr(w, d, size);
      if (why) return why;
    } else if (type == 0x15) { /* attribute info: dense storage when it names a heap */
      unsigned at = 2 + ((d[1] & 1) ? 2 : 0);
      if (size < at + w->sz_addr) return "a damaged attribute info message";
      if (addr_at(w, d + at) != UNDEF_ADDR) return "attributes in dense storage";
    } else if (type == 0x10) { /* continuation */
      if (size < w->sz_addr + w->sz_len) return "a damaged continuation message";
      const char *why =
          add_chunk(w, kdc_h5_le(d, w->sz_addr), kdc_h5_le(d + w->sz_addr, w->sz_len));
      if (why) return why;
    }
    p += mh + size;
  }
  return NULL;
}

/* Why the object header at |addr| holds an attribute message HDF5 1.10
 * cannot decode safely, or NULL. */
static const char *check_header(walk *w, uint64_t addr) {
  if (addr >= w->len || w->len - addr < 16) return "an object header outside the file";
  const uint8_t *h = w->img + addr;
  unsigned v;
  bool crt = false;
  uint64_t first, size;
  if (!memcmp(h, "OHDR", 4)) {
    v = 2;
    unsigned flags = h[5];
    crt = flags & 0x04;
    first = 6 + ((flags & 0x20) ? 16 : 0) + ((flags & 0x10) ? 4 : 0);
    unsigned szw = 1u << (flags & 3);
    if (w->len - addr < first + szw) return "an object header outside the file";
    size = kdc_h5_le(h + first, szw);
    first += szw;
    if (h[4] != 2) return "an object header of an unknown version";
  } else {
    v = 1;
    if (h[0] != 1) return "an object header of an unknown version";
    size = kdc_h5_le(h + 8, 4);
    first = 16;
  }
  w->n_chunks = 0;
  const char *why = add_chunk(w, addr + first, size);
  for (int i = 0; !why && i < w->n_chunks; i++) {
    const uint8_t *c = w->img + w->chunk_addr[i];
    uint64_t n = w->chunk_size[i];
    if (v == 2 && i > 0) { /* "OCHK", the messages, a checksum */
      if (n < 8 || memcmp(c, "OCHK", 4)) return "a damaged object header continuation chunk";
      c += 4;
      n -= 8;
    }
    why = walk_chunk(w, c, n, v, crt);
  }
  return why;
}

kdc_status kdc_h5_check_attr_messages(hid_t f, const void *img, size_t img_len, const char *obj,
                                      const char *file) {
  walk *w = kdc_xcalloc(1, sizeof *w);
  w->img = img;
  w->len = img_len;
  kdc_status st = NULL;
  uint64_t addr = 0;
  if (!kdc_h5_sizes(f, &w->sz_addr, &w->sz_len) || !img)
    st = KDC_ERR(KDC_INVALID_INPUT, "%s: %s: attributes in a file kdc cannot check (a user block "
                 "or unusual address sizes)", file, obj);
  else if (!kdc_h5_object_addr(f, obj, &addr))
    st = KDC_ERR(KDC_INVALID_INPUT, "%s: %s: HDF5 cannot find the object's header", file, obj);
  const char *why = st ? NULL : check_header(w, addr);
  if (why)
    st = KDC_ERR(KDC_INVALID_INPUT, "%s: %s: damaged attributes: %s (object header at %llu)", file,
                 obj, why, (unsigned long long)addr);
  free(w);
  return st;
}
