/*
 * common/h5_heap.c: check a variable-length string attribute's global-heap
 * references before the HDF5 library follows them (docs/frontend.md,
 * "Residual risk").
 *
 * A variable-length string is stored as a descriptor (u32 length, heap
 * address, u32 object index) pointing at an object of a global heap
 * collection ("GCOL").  HDF5 1.10.8 trusts both sides: H5HG_read copies the
 * object's recorded size into a buffer sized by the descriptor's length,
 * indexes the collection's object table without a bound, and reads objects
 * that extend past their collection; its collection parser loops forever
 * on a free-space object of size 0.  A crafted `.h5` reaches all of it
 * through H5Aread (found by tests/fuzz/fuzz_hdf5.c).
 *
 * So before a string attribute is read, its raw descriptors are taken
 * through a conversion kdc registers (variable-length string -> an opaque
 * type tagged KDC_RAW_TAG of the same size: the library hands the
 * attribute's disk bytes to the conversion, which leaves them as they are),
 * and each is checked against the file image kdc holds in memory: the
 * collection lies inside the image with the signature, version and a size
 * of at least 4096 bytes, its objects parse (the library's walk, bounded),
 * the referenced index names an object that lies inside the collection
 * and whose size is the descriptor's length, and that length is at most
 * the caller's cap.  Only then does h5.c call H5Aread for the strings.
 * Addresses are file offsets: kdc reads only images whose superblock is at
 * offset 0 (kdc_is_hdf5), and the library then sets the base address to 0.
 */
#include <hdf5.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/h5_heap.h"
#include "kdc/arena.h"

#define KDC_RAW_TAG "kdc: raw variable-length descriptor"
#define GCOL_MIN 4096u /* H5HG_MINSIZE */

static herr_t keep_raw(hid_t src, hid_t dst, H5T_cdata_t *cd, size_t nelmts, size_t buf_stride,
                       size_t bkg_stride, void *buf, void *bkg, hid_t dxpl) {
  (void)nelmts, (void)buf_stride, (void)bkg_stride, (void)buf, (void)bkg, (void)dxpl;
  if (cd->command != H5T_CONV_INIT) return 0; /* CONV: the bytes stay; FREE: nothing */
  cd->need_bkg = H5T_BKG_NO;
  if (H5Tis_variable_str(src) <= 0 || H5Tget_class(dst) != H5T_OPAQUE) return -1;
  char *tag = H5Tget_tag(dst);
  bool ours = tag && !strcmp(tag, KDC_RAW_TAG);
  H5free_memory(tag);
  return ours && H5Tget_size(src) == H5Tget_size(dst) ? 0 : -1;
}

static bool registered;

static bool register_raw(void) {
  if (registered) return true;
  hid_t s = H5Tcopy(H5T_C_S1), d = H5Tcreate(H5T_OPAQUE, 16);
  bool ok = s >= 0 && d >= 0 && H5Tset_size(s, H5T_VARIABLE) >= 0 &&
            H5Tset_tag(d, KDC_RAW_TAG) >= 0 &&
            H5Tregister(H5T_PERS_SOFT, "kdc_raw_vlen", s, d, keep_raw) >= 0;
  if (s >= 0) H5Tclose(s);
  if (d >= 0) H5Tclose(d);
  registered = ok;
  return ok;
}

bool kdc_h5_sizes(hid_t f, size_t *sz_addr, size_t *sz_len) {
  hsize_t ublock = 0;
  hid_t fcpl = H5Fget_create_plist(f);
  bool ok = fcpl >= 0 && H5Pget_sizes(fcpl, sz_addr, sz_len) >= 0 &&
            H5Pget_userblock(fcpl, &ublock) >= 0;
  if (fcpl >= 0) H5Pclose(fcpl);
  return ok && !ublock && *sz_addr >= 2 && *sz_addr <= 8 && *sz_len >= 2 && *sz_len <= 8;
}

bool kdc_h5_object_addr(hid_t f, const char *obj, uint64_t *addr) {
#if H5_VERSION_GE(1, 12, 0)
  H5O_info2_t info;
  haddr_t a;
  if (H5Oget_info_by_name3(f, obj, &info, H5O_INFO_BASIC, H5P_DEFAULT) < 0 ||
      H5VLnative_token_to_addr(f, info.token, &a) < 0)
    return false;
  *addr = a;
#else
  H5O_info_t info;
  if (H5Oget_info_by_name2(f, obj, &info, H5O_INFO_BASIC, H5P_DEFAULT) < 0) return false;
  *addr = info.addr;
#endif
  return true;
}

/* Why object |idx| of the collection at |addr| cannot be read as |len|
 * bytes, or NULL. */
static const char *check_object(const uint8_t *img, size_t img_len, uint64_t addr, uint64_t idx,
                                uint64_t len, size_t sz_len) {
  const size_t hdr = 8 + sz_len, ohdr = 8 + sz_len; /* H5HG_SIZEOF_HDR, _OBJHDR */
  if (idx == 0 || idx > 0xffff) return "an object index outside the heap's range";
  if (addr >= img_len || img_len - addr < hdr) return "a heap address outside the file";
  const uint8_t *c = img + addr;
  if (memcmp(c, "GCOL", 4) || c[4] != 1) return "no global heap collection at its address";
  uint64_t size = kdc_h5_le(c + 8, sz_len);
  if (size < GCOL_MIN || size > img_len - addr) return "a heap collection that does not fit the file";
  uint64_t found = 0, found_size = 0;
  for (uint64_t p = hdr; p < size;) {
    if (size - p < ohdr) break; /* trailing free space */
    uint64_t i = kdc_h5_le(c + p, 2), osz = kdc_h5_le(c + p + 8, sz_len);
    if (i == 0) { /* the free-space object: its size includes its header */
      if (osz < ohdr || osz > size - p) return "a damaged heap collection (free space)";
      p += osz;
      continue;
    }
    if (osz > size - p - ohdr) return "a heap object larger than its collection";
    if (i == idx) found = p + 1, found_size = osz;
    p += ohdr + ((osz + 7) & ~(uint64_t)7);
  }
  if (!found) return "a reference to a heap object that does not exist";
  if (found_size != len) return "a string whose heap object has another length";
  return NULL;
}

kdc_status kdc_h5_check_vlen_strings(hid_t f, const void *img, size_t img_len, hid_t attr,
                                     size_t n, size_t cap, const char *file, const char *where) {
  size_t sz_addr = 8, sz_len = 8;
  if (!kdc_h5_sizes(f, &sz_addr, &sz_len) || !img)
    return KDC_ERR(KDC_INVALID_INPUT, "%s: %s: variable-length strings in a file kdc cannot "
                   "check (a user block or unusual address sizes)", file, where);
  if (!register_raw())
    return KDC_ERR(KDC_INTERNAL, "%s: %s: HDF5: cannot register a type conversion", file, where);
  size_t dsz = 4 + sz_addr + 4;
  hid_t raw = H5Tcreate(H5T_OPAQUE, dsz);
  if (raw < 0 || H5Tset_tag(raw, KDC_RAW_TAG) < 0) {
    if (raw >= 0) H5Tclose(raw);
    return KDC_ERR(KDC_INTERNAL, "%s: %s: HDF5: cannot make a type", file, where);
  }
  uint8_t *d = kdc_xcalloc(n ? n : 1, dsz);
  kdc_status st = NULL;
  /* HDF5 1.10 copies n descriptors from the attribute's stored data unchecked */
  if (H5Aget_storage_size(attr) < (hsize_t)n * dsz)
    st = KDC_ERR(KDC_INVALID_INPUT, "%s: %s: %zu strings in %llu bytes of data (damaged)", file,
                 where, n, (unsigned long long)H5Aget_storage_size(attr));
  else if (H5Aread(attr, raw, d) < 0)
    st = KDC_ERR(KDC_INVALID_INPUT, "%s: %s: unreadable string attribute", file, where);
  for (size_t i = 0; i < n && !st; i++) {
    const uint8_t *e = d + i * dsz;
    uint64_t len = kdc_h5_le(e, 4), addr = kdc_h5_le(e + 4, sz_addr),
             idx = kdc_h5_le(e + 4 + sz_addr, 4);
    const char *why = len > cap     ? NULL
                      : addr == 0   ? (len ? "a null string with a length" : NULL) /* no heap */
                                    : check_object(img, img_len, addr, idx, len, sz_len);
    if (len > cap)
      st = KDC_ERR(KDC_INVALID_INPUT, "%s: %s: a string of more than %zu bytes", file, where, cap);
    else if (why)
      st = KDC_ERR(KDC_INVALID_INPUT, "%s: %s: string %zu is damaged: %s (heap address %llu, "
                   "object %llu)", file, where, i, why, (unsigned long long)addr,
                   (unsigned long long)idx);
  }
  free(d);
  H5Tclose(raw);
  return st;
}

/* Local heaps ("HEAP", version 0: data size, free-list head, data address)
 * hold the link names of old-style groups.  HDF5 1.10.8 reads a heap's free
 * list when it loads the heap (opening the root group, every lookup and
 * walk) and follows it without noticing a cycle: a crafted list loops
 * forever, allocating a node per step (tests/fuzz/fuzz_hdf5.c).  Each
 * candidate in the image is checked before H5Fopen: its free list must end
 * within as many steps as its data can hold blocks, each block inside the
 * data.  A "HEAP" that does not look like a heap (its data outside the
 * image) is not one the library could load, and is skipped. */
kdc_status kdc_h5_check_local_heaps(const void *img_, size_t len, const char *file) {
  const uint8_t *img = img_;
  if (len < 15) return NULL;
  size_t sa = img[8] >= 2 ? img[9] : img[13], sl = img[8] >= 2 ? img[10] : img[14];
  if (sa < 2 || sa > 8 || sl < 2 || sl > 8) return NULL; /* HDF5 refuses the superblock */
  size_t pre = 8 + 2 * sl + sa;
  for (const uint8_t *p = img; (p = memmem(p, len - (size_t)(p - img), "HEAP", 4)); p++) {
    size_t at = (size_t)(p - img);
    if (len - at < pre || p[4] || p[5] || p[6] || p[7]) continue;
    uint64_t dsize = kdc_h5_le(p + 8, sl), head = kdc_h5_le(p + 8 + sl, sl),
             daddr = kdc_h5_le(p + 8 + 2 * sl, sa);
    if (daddr >= len || dsize > len - daddr) continue;
    const uint8_t *d = img + daddr;
    uint64_t steps = 0, max = dsize / (2 * sl) + 1;
    for (uint64_t off = head; off != 1; steps++) { /* H5HL_FREE_NULL */
      if (off >= dsize || dsize - off < 2 * sl) break; /* HDF5 refuses it */
      if (steps == max)
        return KDC_ERR(KDC_INVALID_INPUT, "%s: the local heap at %zu: a free list that loops "
                       "(damaged)", file, at);
      off = kdc_h5_le(d + off, sl);
      if (!off) break;
    }
  }
  return NULL;
}
