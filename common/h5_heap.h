/*
 * common/h5_heap.h: the global-heap check of variable-length string
 * attributes (common/h5_heap.c), used by common/h5.c only.
 */
#ifndef KDC_COMMON_H5_HEAP_H
#define KDC_COMMON_H5_HEAP_H

#include <hdf5.h>
#include <stddef.h>

#include "kdc/status.h"

/* NULL when the |n| variable-length strings of attribute |attr| of file
 * |f| (opened from the image |img|, |img_len| bytes) reference heap objects
 * that lie inside the image, with the lengths their descriptors claim, each
 * at most |cap| bytes; else a located error naming |file| and |where|. */
kdc_status kdc_h5_check_vlen_strings(hid_t f, const void *img, size_t img_len, hid_t attr,
                                     size_t n, size_t cap, const char *file, const char *where);

#endif
