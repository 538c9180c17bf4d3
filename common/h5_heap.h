/*
 * common/h5_heap.h: the checks of raw file bytes HDF5 1.10 would trust,
 * used by common/h5.c only: the global-heap check of variable-length string
 * attributes (common/h5_heap.c) and the attribute messages of an object
 * header (common/h5_ohdr.c); and the read-only driver images are opened
 * with (common/h5_vfd.c).
 */
#ifndef KDC_COMMON_H5_HEAP_H
#define KDC_COMMON_H5_HEAP_H

#include <hdf5.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kdc/status.h"

/* NULL when the |n| variable-length strings of attribute |attr| of file
 * |f| (opened from the image |img|, |img_len| bytes) reference heap objects
 * that lie inside the image, with the lengths their descriptors claim, each
 * at most |cap| bytes; else a located error naming |file| and |where|. */
kdc_status kdc_h5_check_vlen_strings(hid_t f, const void *img, size_t img_len, hid_t attr,
                                     size_t n, size_t cap, const char *file, const char *where);

/* NULL when every local heap in the |len| bytes at |img| has a free list
 * that ends; else a located error naming |file|. */
kdc_status kdc_h5_check_local_heaps(const void *img, size_t len, const char *file);

/* A file access list for H5Fopen(name, H5F_ACC_RDONLY, fapl) of the |len|
 * bytes at |img| (not copied: they must outlive the file), or -1. */
hid_t kdc_h5_image_fapl(const void *img, size_t len);

/* NULL when every attribute message in the header of object |obj| of file
 * |f| (opened from |img|, |img_len| bytes) can be decoded by HDF5 1.10
 * within its bytes; else a located error naming |file| and |obj|. */
kdc_status kdc_h5_check_attr_messages(hid_t f, const void *img, size_t img_len, const char *obj,
                                      const char *file);

/* The file's address and length sizes; false for a file with a user block
 * (then file addresses are not image offsets) or sizes outside 2..8. */
bool kdc_h5_sizes(hid_t f, size_t *sz_addr, size_t *sz_len);

/* The image offset of object |obj|'s header. */
bool kdc_h5_object_addr(hid_t f, const char *obj, uint64_t *addr);

/* |n| bytes little-endian. */
static inline uint64_t kdc_h5_le(const uint8_t *p, size_t n) {
  uint64_t v = 0;
  for (size_t i = n; i-- > 0;) v = v << 8 | p[i];
  return v;
}

#endif
