/*
 * common/h5_vfd.c: the HDF5 file driver kdc reads images with: read-only,
 * over the caller's bytes (no copy), every read bounded by the image.
 *
 * The core driver HDF5 offers for images copies the image and turns on the
 * metadata accumulator, whose read path in 1.10.8 computes addr + size
 * unchecked: a crafted object header continuation at the undefined address
 * (2^64 - 1) wraps it and H5F__accum_read copies from a null pointer
 * (a SIGSEGV inside H5Fopen; found by tests/fuzz/fuzz_hdf5.c).  This driver
 * asks for no accumulation, so each metadata read comes here, and refuses
 * any read that does not lie inside the image; it also saves the copy.
 */
#include <hdf5.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/h5_heap.h"

typedef struct img_info {
  const void *img;
  size_t len;
} img_info;

typedef struct img_file {
  H5FD_t pub; /* first: HDF5 sees this */
  const uint8_t *img;
  size_t len;
  haddr_t eoa;
} img_file;

static H5FD_t *img_open(const char *name, unsigned flags, hid_t fapl, haddr_t maxaddr) {
  (void)name, (void)maxaddr;
  const img_info *in = H5Pget_driver_info(fapl);
  if (!in || (flags & (H5F_ACC_RDWR | H5F_ACC_TRUNC | H5F_ACC_CREAT))) return NULL;
  img_file *f = calloc(1, sizeof *f);
  if (!f) return NULL;
  f->img = in->img;
  f->len = in->len;
  return &f->pub;
}

static herr_t img_close(H5FD_t *f) {
  free(f);
  return 0;
}

static herr_t img_query(const H5FD_t *f, unsigned long *flags) {
  (void)f;
  *flags = 0; /* no metadata accumulation, aggregation or sieving */
  return 0;
}

static haddr_t img_get_eoa(const H5FD_t *f, H5FD_mem_t type) {
  (void)type;
  return ((const img_file *)f)->eoa;
}

static herr_t img_set_eoa(H5FD_t *f, H5FD_mem_t type, haddr_t addr) {
  (void)type;
  ((img_file *)f)->eoa = addr;
  return 0;
}

static haddr_t img_get_eof(const H5FD_t *f, H5FD_mem_t type) {
  (void)type;
  return ((const img_file *)f)->len;
}

static herr_t img_read(H5FD_t *f, H5FD_mem_t type, hid_t dxpl, haddr_t addr, size_t size,
                       void *buf) {
  (void)type, (void)dxpl;
  const img_file *g = (const img_file *)f;
  if (addr > g->len || size > g->len - addr) return -1; /* also addr + size past 2^64 */
  memcpy(buf, g->img + addr, size);
  return 0;
}

static herr_t img_write(H5FD_t *f, H5FD_mem_t type, hid_t dxpl, haddr_t addr, size_t size,
                        const void *buf) {
  (void)f, (void)type, (void)dxpl, (void)addr, (void)size, (void)buf;
  return -1; /* read-only */
}

static const H5FD_class_t img_class = {
#if H5_VERSION_GE(1, 13, 2)
    .version = H5FD_CLASS_VERSION,
#endif
#if H5_VERSION_GE(1, 12, 0)
    .value = (H5FD_class_value_t)601, /* a user driver's value (>= 256) */
#endif
    .name = "kdc_image",
    .maxaddr = (haddr_t)INT64_MAX,
    .fc_degree = H5F_CLOSE_WEAK,
    .fapl_size = sizeof(img_info),
    .open = img_open,
    .close = img_close,
    .query = img_query,
    .get_eoa = img_get_eoa,
    .set_eoa = img_set_eoa,
    .get_eof = img_get_eof,
    .read = img_read,
    .write = img_write,
    .fl_map = H5FD_FLMAP_DICHOTOMY,
};

hid_t kdc_h5_image_fapl(const void *img, size_t len) {
  static hid_t driver = -1;
  if (driver < 0) driver = H5FDregister(&img_class);
  hid_t fapl = driver < 0 ? -1 : H5Pcreate(H5P_FILE_ACCESS);
  img_info in = {img, len};
  if (fapl >= 0 && H5Pset_driver(fapl, driver, &in) < 0) {
    H5Pclose(fapl);
    fapl = -1;
  }
  return fapl;
}
