/*
 * common/kfiles.h: the containers of Keras' own files, through maintained
 * libraries (no hand-written parser): zip archives (`.keras`) with libzip,
 * HDF5 (`.weights.h5`, legacy `.h5`) with the HDF5 C library.
 *
 *   zip.c   read a zip from memory with caps on every member (declared and
 *           actual size, names), write one from memory blocks
 *   h5.c    open an HDF5 file image read-only (kdc's image driver), list datasets,
 *           read a dataset after checking its shape against what the caller
 *           expects, read string attributes; build an HDF5 file in memory
 *
 * Errors are one line starting with the file name the caller gave, then the
 * member or HDF5 path.  Neither library is hardened against hostile files
 * (docs/frontend.md, "Residual risk"): kdc bounds everything it asks them to
 * read and never sizes a buffer from a value in the file alone.
 */
#ifndef KDC_COMMON_KFILES_H
#define KDC_COMMON_KFILES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/io.h"
#include "kdc/status.h"

/* ---- zip.c ---------------------------------------------------------------- */

typedef struct kdc_zip_member {
  const char *name;   /* as wanted */
  size_t cap;         /* the most bytes accepted (declared and actual) */
  bool required;
  void *data;         /* out: heap, NUL-terminated, or NULL when absent */
  size_t len;
} kdc_zip_member;

/* Maximum members in an archive kdc reads. */
#define KDC_ZIP_MAX_MEMBERS 4096

/* Reads the members |want| of the zip archive |data| (|len| bytes) named
 * |file| in messages.  Every member name of the archive is checked (no
 * absolute path, no ".." component, no NUL); a wanted member whose declared
 * size passes its cap, or whose data is longer or shorter than declared, is
 * an error naming the member.  On error no member is left allocated. */
kdc_status kdc_zip_read(const char *file, const void *data, size_t len, kdc_zip_member *want,
                        size_t n_want);
/* Writes a zip archive of |n| stored members (name, data, len) to memory:
 * *|out| (heap) of *|out_len| bytes. */
typedef struct kdc_zip_entry {
  const char *name;
  const void *data;
  size_t len;
} kdc_zip_entry;
kdc_status kdc_zip_write(const kdc_zip_entry *e, size_t n, void **out, size_t *out_len);
/* Is |data| a zip archive (local file header magic)? */
bool kdc_is_zip(const void *data, size_t len);

/* ---- h5.c ----------------------------------------------------------------- */

typedef struct kdc_h5 kdc_h5;
bool kdc_is_hdf5(const void *data, size_t len);
/* Opens the HDF5 image |img| read-only (not copied: common/h5_vfd.c); |file| names it in
 * messages ("m.keras: model.weights.h5").  |img| must stay alive until
 * kdc_h5_close: string attributes are checked against it before HDF5 reads
 * them (common/h5_heap.c). */
kdc_status kdc_h5_open_image(const char *file, const void *img, size_t len, kdc_h5 **out);
void kdc_h5_close(kdc_h5 *h);
const char *kdc_h5_file(const kdc_h5 *h);
/* Is there an object (group or dataset) at |path|? */
bool kdc_h5_exists(kdc_h5 *h, const char *path);
/* The dataset at |path|: rank, dims and a dtype (F16/F32/F64, I32/I64, U8,
 * BOOL...); an error naming the path when it is not a dataset, has more
 * than KDC_IO_MAX_RANK dims or an element type kdc does not read. */
kdc_status kdc_h5_dataset_info(kdc_h5 *h, const char *path, int *rank, int64_t *dims,
                               kdc_io_dtype *dtype);
/* Reads dataset |path| converted to |want| (F32, I32 or I64) into |dst| of
 * |n| elements; the dataset must hold exactly |n| elements (checked first). */
kdc_status kdc_h5_read(kdc_h5 *h, const char *path, kdc_io_dtype want, void *dst, size_t n);
/* The paths of every dataset below |root| ("" = the whole file), at most
 * |max| of them (more is an error): heap array of heap strings. */
kdc_status kdc_h5_list_datasets(kdc_h5 *h, const char *root, size_t max, char ***out,
                                size_t *n);
void kdc_h5_free_list(char **l, size_t n);
/* String attribute |name| of object |obj|: a scalar string into *|out|
 * (heap), or a 1-D array of strings into *|list| (heap array of heap
 * strings, *|n| of them; an empty numeric array gives 0).  Absent: NULL / 0. */
kdc_status kdc_h5_attr_string(kdc_h5 *h, const char *obj, const char *name, size_t cap,
                              char **out);
kdc_status kdc_h5_attr_strings(kdc_h5 *h, const char *obj, const char *name, size_t max,
                               char ***list, size_t *n);

/* An HDF5 file built in memory. */
typedef struct kdc_h5w kdc_h5w;
kdc_status kdc_h5w_create(kdc_h5w **out);
/* Makes group |path| (and its parents) if absent. */
kdc_status kdc_h5w_group(kdc_h5w *w, const char *path);
/* Writes dataset |path| (parents made) of |dtype| (F32, I32, I64). */
kdc_status kdc_h5w_dataset(kdc_h5w *w, const char *path, kdc_io_dtype dtype, int rank,
                           const int64_t *dims, const void *data);
/* Closes the file and gives its bytes (heap). */
kdc_status kdc_h5w_finish(kdc_h5w *w, void **img, size_t *len);
void kdc_h5w_abort(kdc_h5w *w);

#endif
