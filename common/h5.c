/*
 * common/h5.c: HDF5 through the HDF5 C library (common/kfiles.h).
 *
 * Reading: the whole file is an in-memory image opened with kdc's read-only
 * image driver (common/h5_vfd.c: no copy, every read bounded by the image),
 * so a `.keras` member never touches the disk.  The
 * library's automatic error printing is turned off (H5Eset_auto2): every
 * failure becomes one located kdc error.  Sizes are checked before any read:
 * a dataset is read only into a buffer of the element count the caller
 * expects, so a dataset that claims huge dims is refused, not allocated.
 * Writing: a core-driver file with no backing store; its image is taken
 * with H5Fget_file_image.
 */
#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/h5_heap.h"
#include "common/kfiles.h"
#include "kdc/arena.h"

/* HDF5 1.10 (Debian 12) and 1.12+ spell the visitor and the reclaim call
 * differently. */
#if H5_VERSION_GE(1, 12, 0)
typedef H5O_info2_t kdc_h5_oinfo;
#define KDC_H5_VISIT(g, f, c) H5Ovisit3((g), H5_INDEX_NAME, H5_ITER_INC, (f), (c), H5O_INFO_BASIC)
#define KDC_H5_RECLAIM(t, sp, buf) H5Treclaim((t), (sp), H5P_DEFAULT, (buf))
#else
typedef H5O_info_t kdc_h5_oinfo;
#define KDC_H5_VISIT(g, f, c) H5Ovisit2((g), H5_INDEX_NAME, H5_ITER_INC, (f), (c), H5O_INFO_BASIC)
#define KDC_H5_RECLAIM(t, sp, buf) H5Dvlen_reclaim((t), (sp), H5P_DEFAULT, (buf))
#endif

struct kdc_h5 {
  hid_t f;
  char *file;
  const void *img; /* the caller's image, alive while the handle is open */
  size_t img_len;
};

struct kdc_h5w {
  hid_t f;
};

static void quiet(void) { H5Eset_auto2(H5E_DEFAULT, NULL, NULL); }

/* A unique name per file: the core driver (writing) keys open files by name. */
static void image_name(char *buf, size_t n) {
  static unsigned long counter;
  snprintf(buf, n, "kdc-image-%lu.h5", __atomic_add_fetch(&counter, 1, __ATOMIC_RELAXED));
}

bool kdc_is_hdf5(const void *data, size_t len) {
  return len >= 8 && !memcmp(data, "\x89HDF\r\n\x1a\n", 8);
}

kdc_status kdc_h5_open_image(const char *file, const void *img, size_t len, kdc_h5 **out) {
  *out = NULL;
  quiet();
  if (!kdc_is_hdf5(img, len))
    return KDC_ERR(KDC_INVALID_INPUT, "%s: not an HDF5 file (no HDF5 signature)", file);
  KDC_RETURN_IF_ERROR(kdc_h5_check_local_heaps(img, len, file)); /* H5Fopen reads the root's */
  hid_t fapl = kdc_h5_image_fapl(img, len);
  if (fapl < 0) return KDC_ERR(KDC_INTERNAL, "%s: HDF5: cannot make a file access list", file);
  char name[64];
  image_name(name, sizeof name);
  hid_t f = H5Fopen(name, H5F_ACC_RDONLY, fapl);
  H5Pclose(fapl);
  if (f < 0)
    return KDC_ERR(KDC_INVALID_INPUT, "%s: not a readable HDF5 file (truncated or damaged: "
                   "HDF5 cannot open its superblock or root group)", file);
  kdc_h5 *h = kdc_xcalloc(1, sizeof *h);
  h->f = f;
  h->file = kdc_xstrdup(file);
  h->img = img;
  h->img_len = len;
  *out = h;
  return NULL;
}

void kdc_h5_close(kdc_h5 *h) {
  if (!h) return;
  H5Fclose(h->f);
  free(h->file);
  free(h);
}

const char *kdc_h5_file(const kdc_h5 *h) { return h->file; }

bool kdc_h5_exists(kdc_h5 *h, const char *path) {
  quiet();
  /* H5Lexists fails (< 0) on a missing or non-group parent, so one call
   * checks every component's link; H5Oexists_by_name then resolves them all
   * (a dangling soft link is not an object) */
  if (!*path || !strcmp(path, "/")) return true;
  return H5Lexists(h->f, path, H5P_DEFAULT) > 0 && H5Oexists_by_name(h->f, path, H5P_DEFAULT) > 0;
}

static kdc_status type_of(kdc_h5 *h, const char *path, hid_t t, kdc_io_dtype *dt) {
  H5T_class_t c = H5Tget_class(t);
  size_t sz = H5Tget_size(t);
  if (c == H5T_FLOAT && (sz == 2 || sz == 4 || sz == 8)) {
    *dt = sz == 2 ? KDC_IO_DTYPE_F16 : sz == 4 ? KDC_IO_DTYPE_F32 : KDC_IO_DTYPE_F64;
    return NULL;
  }
  if (c == H5T_INTEGER && (sz == 1 || sz == 4 || sz == 8)) {
    *dt = sz == 1 ? KDC_IO_DTYPE_U8 : sz == 4 ? KDC_IO_DTYPE_I32 : KDC_IO_DTYPE_I64;
    return NULL;
  }
  if (c == H5T_ENUM && sz == 1) { /* h5py writes numpy bool as an enum */
    *dt = KDC_IO_DTYPE_BOOL;
    return NULL;
  }
  return KDC_ERR(KDC_INVALID_INPUT, "%s: %s: a dataset of an element type kdc does not read "
                 "(HDF5 class %d, %zu bytes); expected float or integer numbers", h->file, path,
                 (int)c, sz);
}

/* Rank, dims and element type of the open dataset |d|. */
static kdc_status info_of(kdc_h5 *h, const char *path, hid_t d, int *rank, int64_t *dims,
                          kdc_io_dtype *dtype) {
  hid_t sp = H5Dget_space(d), t = H5Dget_type(d);
  kdc_status st = NULL;
  int r = sp >= 0 ? H5Sget_simple_extent_ndims(sp) : -1;
  if (r < 0 || t < 0) {
    st = KDC_ERR(KDC_INVALID_INPUT, "%s: %s: unreadable dataspace or type", h->file, path);
  } else if (r > KDC_IO_MAX_RANK) {
    st = KDC_ERR(KDC_INVALID_INPUT, "%s: %s: rank %d, more than kdc's %d", h->file, path, r,
                 KDC_IO_MAX_RANK);
  } else {
    hsize_t hd[KDC_IO_MAX_RANK];
    if (H5Sget_simple_extent_dims(sp, hd, NULL) < 0) {
      st = KDC_ERR(KDC_INVALID_INPUT, "%s: %s: unreadable dims", h->file, path);
    } else {
      *rank = r;
      for (int i = 0; i < r; i++) {
        if (hd[i] > ((hsize_t)1 << 40)) {
          st = KDC_ERR(KDC_INVALID_INPUT, "%s: %s: dim %d is %llu, past kdc's limit of 2^40",
                       h->file, path, i, (unsigned long long)hd[i]);
          break;
        }
        dims[i] = (int64_t)hd[i];
      }
      if (!st) st = type_of(h, path, t, dtype);
    }
  }
  if (t >= 0) H5Tclose(t);
  if (sp >= 0) H5Sclose(sp);
  return st;
}

/* Opens dataset |path|: *d < 0 with the error when it is not one. */
static kdc_status open_dataset(kdc_h5 *h, const char *path, hid_t *d) {
  quiet();
  *d = -1;
  if (!kdc_h5_exists(h, path))
    return KDC_ERR(KDC_INVALID_INPUT, "%s: %s: no such dataset", h->file, path);
  *d = H5Dopen2(h->f, path, H5P_DEFAULT);
  if (*d < 0)
    return KDC_ERR(KDC_INVALID_INPUT, "%s: %s: not a dataset (or unreadable)", h->file, path);
  return NULL;
}

kdc_status kdc_h5_dataset_info(kdc_h5 *h, const char *path, int *rank, int64_t *dims,
                               kdc_io_dtype *dtype) {
  hid_t d;
  KDC_RETURN_IF_ERROR(open_dataset(h, path, &d));
  kdc_status st = info_of(h, path, d, rank, dims, dtype);
  H5Dclose(d);
  return st;
}

kdc_status kdc_h5_read(kdc_h5 *h, const char *path, kdc_io_dtype want, void *dst, size_t n) {
  int rank;
  int64_t dims[KDC_IO_MAX_RANK];
  kdc_io_dtype dt;
  hid_t d;
  KDC_RETURN_IF_ERROR(open_dataset(h, path, &d));
  kdc_status st = info_of(h, path, d, &rank, dims, &dt);
  size_t have = 1;
  for (int i = 0; i < rank && !st; i++) {
    if (dims[i] && have > SIZE_MAX / (size_t)dims[i]) have = SIZE_MAX;
    else have *= (size_t)dims[i];
  }
  if (!st && have != n)
    st = KDC_ERR(KDC_INVALID_INPUT, "%s: %s: holds %zu elements, %zu expected", h->file, path,
                 have, n);
  hid_t mt = want == KDC_IO_DTYPE_F32 ? H5T_NATIVE_FLOAT
             : want == KDC_IO_DTYPE_I32 ? H5T_NATIVE_INT32 : H5T_NATIVE_INT64;
  if (!st && n && H5Dread(d, mt, H5S_ALL, H5S_ALL, H5P_DEFAULT, dst) < 0)
    st = KDC_ERR(KDC_INVALID_INPUT, "%s: %s: HDF5 cannot read the dataset's data (truncated "
                 "file, damaged chunk or filter, or values that do not convert to %s)",
                 h->file, path, kdc_io_dtype_name(want));
  H5Dclose(d);
  return st;
}

typedef struct list_ctx {
  char **l;
  size_t n, cap, max;
  bool over;
  const char *root;
} list_ctx;

static herr_t visit(hid_t obj, const char *name, const kdc_h5_oinfo *info, void *user) {
  (void)obj;
  list_ctx *c = user;
  if (info->type != H5O_TYPE_DATASET) return 0;
  if (c->n == c->max) {
    c->over = true;
    return 1;
  }
  KDC_GROW(c->l, c->cap, c->n + 1);
  size_t rl = strlen(c->root);
  char *p = kdc_xmalloc(rl + strlen(name) + 2);
  sprintf(p, "%s%s%s", c->root, rl ? "/" : "", name);
  c->l[c->n++] = p;
  return 0;
}

kdc_status kdc_h5_list_datasets(kdc_h5 *h, const char *root, size_t max, char ***out,
                                size_t *n) {
  quiet();
  *out = NULL;
  *n = 0;
  list_ctx c = {NULL, 0, 0, max, false, root};
  if (*root && !kdc_h5_exists(h, root)) return NULL;
  hid_t g = H5Oopen(h->f, *root ? root : "/", H5P_DEFAULT);
  if (g < 0) return KDC_ERR(KDC_INVALID_INPUT, "%s: %s: cannot open the group", h->file, *root ? root : "/");
  herr_t r = KDC_H5_VISIT(g, visit, &c);
  H5Oclose(g);
  if (c.over || r < 0) {
    kdc_h5_free_list(c.l, c.n);
    if (c.over)
      return KDC_ERR(KDC_INVALID_INPUT, "%s: %s: more than %zu datasets", h->file,
                     *root ? root : "/", max);
    return KDC_ERR(KDC_INVALID_INPUT, "%s: %s: HDF5 cannot walk the group (damaged file)",
                   h->file, *root ? root : "/");
  }
  *out = c.l;
  *n = c.n;
  return NULL;
}

void kdc_h5_free_list(char **l, size_t n) {
  for (size_t i = 0; i < n; i++) free(l[i]);
  free(l);
}

/* Reads attribute |a| as |n| strings into |out| (heap strings). */
static kdc_status read_strings(kdc_h5 *h, const char *where, hid_t a, hid_t t, size_t n,
                               size_t cap, char **out) {
  kdc_status st = NULL;
  if (H5Tis_variable_str(t) > 0) {
    /* the heap references first: HDF5 1.10 follows them unchecked */
    KDC_RETURN_IF_ERROR(kdc_h5_check_vlen_strings(h->f, h->img, h->img_len, a, n, cap, h->file,
                                                  where));
    char **v = kdc_xcalloc(n + 1, sizeof *v);
    hid_t mt = H5Tcopy(H5T_C_S1);
    H5Tset_size(mt, H5T_VARIABLE);
    H5Tset_cset(mt, H5Tget_cset(t));
    if (H5Aread(a, mt, v) < 0) {
      st = KDC_ERR(KDC_INVALID_INPUT, "%s: %s: unreadable string attribute", h->file, where);
    } else {
      for (size_t i = 0; i < n && !st; i++) {
        const char *si = v[i] ? v[i] : ""; /* a null string (v[i] stays NULL for the reclaim) */
        if (strlen(si) > cap)
          st = KDC_ERR(KDC_INVALID_INPUT, "%s: %s: a string of more than %zu bytes", h->file,
                       where, cap);
        else
          out[i] = kdc_xstrdup(si);
      }
      hid_t sp = H5Aget_space(a);
      KDC_H5_RECLAIM(mt, sp, v);
      H5Sclose(sp);
    }
    H5Tclose(mt);
    free(v);
    return st;
  }
  size_t sz = H5Tget_size(t);
  if (sz == 0 || sz > cap)
    return KDC_ERR(KDC_INVALID_INPUT, "%s: %s: strings of %zu bytes (at most %zu read)", h->file,
                   where, sz, cap);
  if (H5Aget_storage_size(a) < (hsize_t)n * sz) /* HDF5 1.10 would copy past its data */
    return KDC_ERR(KDC_INVALID_INPUT, "%s: %s: %zu strings of %zu bytes in %llu bytes of data "
                   "(damaged)", h->file, where, n, sz, (unsigned long long)H5Aget_storage_size(a));
  char *buf = kdc_xcalloc(n * sz + 1, 1);
  hid_t mt = H5Tcopy(H5T_C_S1);
  H5Tset_size(mt, sz);
  if (H5Aread(a, mt, buf) < 0) {
    st = KDC_ERR(KDC_INVALID_INPUT, "%s: %s: unreadable string attribute", h->file, where);
  } else {
    for (size_t i = 0; i < n; i++) {
      out[i] = kdc_xcalloc(sz + 1, 1);
      memcpy(out[i], buf + i * sz, sz);
    }
  }
  H5Tclose(mt);
  free(buf);
  return st;
}

/* Opens attribute |name| of |obj|: *a < 0 when absent. */
static kdc_status open_attr(kdc_h5 *h, const char *obj, const char *name, hid_t *a,
                            hid_t *t, hssize_t *n) {
  quiet();
  *a = -1;
  if (!kdc_h5_exists(h, obj) && strcmp(obj, "/")) return NULL;
  /* looking for a name decodes every attribute message: HDF5 1.10 trusts them */
  KDC_RETURN_IF_ERROR(kdc_h5_check_attr_messages(h->f, h->img, h->img_len, obj, h->file));
  if (H5Aexists_by_name(h->f, obj, name, H5P_DEFAULT) <= 0) return NULL;
  *a = H5Aopen_by_name(h->f, obj, name, H5P_DEFAULT, H5P_DEFAULT);
  if (*a < 0) return KDC_ERR(KDC_INVALID_INPUT, "%s: %s attribute %s: unreadable", h->file, obj, name);
  *t = H5Aget_type(*a);
  hid_t sp = H5Aget_space(*a);
  *n = H5Sget_simple_extent_npoints(sp);
  int rank = H5Sget_simple_extent_ndims(sp);
  H5Sclose(sp);
  if (*t < 0 || *n < 0 || rank > 1) {
    if (*t >= 0) H5Tclose(*t);
    H5Aclose(*a);
    *a = -1;
    return KDC_ERR(KDC_INVALID_INPUT, "%s: %s attribute %s: expected a string or a list of strings",
                   h->file, obj, name);
  }
  return NULL;
}

/* The strings of attribute |name| of |obj|: at most |max|, each at most
 * |cap| bytes. */
static kdc_status attr_list(kdc_h5 *h, const char *obj, const char *name, size_t max, size_t cap,
                            char ***list, size_t *n_out) {
  *list = NULL;
  *n_out = 0;
  hid_t a, t;
  hssize_t n;
  KDC_RETURN_IF_ERROR(open_attr(h, obj, name, &a, &t, &n));
  if (a < 0) return NULL;
  kdc_status st = NULL;
  char where[512];
  snprintf(where, sizeof where, "%s attribute %s", obj, name);
  if (H5Tget_class(t) != H5T_STRING) {
    if (n != 0) st = KDC_ERR(KDC_INVALID_INPUT, "%s: %s: expected strings", h->file, where);
  } else if ((size_t)n > max) {
    st = KDC_ERR(KDC_INVALID_INPUT, "%s: %s: %lld strings, more than %zu", h->file, where,
                 (long long)n, max);
  } else {
    char **l = kdc_xcalloc((size_t)n + 1, sizeof *l);
    st = read_strings(h, where, a, t, (size_t)n, cap, l);
    if (st) {
      for (hssize_t i = 0; i < n; i++) free(l[i]);
      free(l);
    } else {
      *list = l;
      *n_out = (size_t)n;
    }
  }
  H5Tclose(t);
  H5Aclose(a);
  return st;
}

kdc_status kdc_h5_attr_string(kdc_h5 *h, const char *obj, const char *name, size_t cap,
                              char **out) {
  *out = NULL;
  char **l = NULL;
  size_t n = 0;
  KDC_RETURN_IF_ERROR(attr_list(h, obj, name, 1, cap, &l, &n));
  if (l && n == 1) *out = l[0];
  free(l);
  return NULL;
}

kdc_status kdc_h5_attr_strings(kdc_h5 *h, const char *obj, const char *name, size_t max,
                               char ***list, size_t *n_out) {
  return attr_list(h, obj, name, max, 4096, list, n_out);
}

/* ---- writing ---------------------------------------------------------------- */

kdc_status kdc_h5w_create(kdc_h5w **out) {
  quiet();
  *out = NULL;
  hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
  char name[64];
  image_name(name, sizeof name);
  hid_t f = -1;
  if (fapl >= 0 && H5Pset_fapl_core(fapl, 1 << 16, 0) >= 0)
    f = H5Fcreate(name, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
  if (fapl >= 0) H5Pclose(fapl);
  if (f < 0) return KDC_ERR(KDC_INTERNAL, "HDF5: cannot create an in-memory file");
  kdc_h5w *w = kdc_xcalloc(1, sizeof *w);
  w->f = f;
  *out = w;
  return NULL;
}

kdc_status kdc_h5w_group(kdc_h5w *w, const char *path) {
  char buf[1024];
  if (strlen(path) >= sizeof buf) return KDC_ERR(KDC_INTERNAL, "HDF5 path too long: %s", path);
  snprintf(buf, sizeof buf, "%s", path);
  for (char *p = buf;; p++) {
    if (*p == '/' || !*p) {
      char c = *p;
      *p = 0;
      if (*buf && H5Lexists(w->f, buf, H5P_DEFAULT) <= 0) {
        hid_t g = H5Gcreate2(w->f, buf, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        if (g < 0) return KDC_ERR(KDC_INTERNAL, "HDF5: cannot create group %s", buf);
        H5Gclose(g);
      }
      *p = c;
      if (!c) return NULL;
    }
  }
}

kdc_status kdc_h5w_dataset(kdc_h5w *w, const char *path, kdc_io_dtype dtype, int rank,
                           const int64_t *dims, const void *data) {
  const char *slash = strrchr(path, '/');
  if (slash) {
    char parent[1024];
    snprintf(parent, sizeof parent, "%.*s", (int)(slash - path), path);
    KDC_RETURN_IF_ERROR(kdc_h5w_group(w, parent));
  }
  hsize_t hd[KDC_IO_MAX_RANK];
  for (int i = 0; i < rank; i++) hd[i] = (hsize_t)dims[i];
  hid_t sp = rank ? H5Screate_simple(rank, hd, NULL) : H5Screate(H5S_SCALAR);
  hid_t ft = dtype == KDC_IO_DTYPE_F32 ? H5T_IEEE_F32LE
             : dtype == KDC_IO_DTYPE_I32 ? H5T_STD_I32LE : H5T_STD_I64LE;
  hid_t mt = dtype == KDC_IO_DTYPE_F32 ? H5T_NATIVE_FLOAT
             : dtype == KDC_IO_DTYPE_I32 ? H5T_NATIVE_INT32 : H5T_NATIVE_INT64;
  hid_t d = H5Dcreate2(w->f, path, ft, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  herr_t r = d >= 0 ? H5Dwrite(d, mt, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) : -1;
  if (d >= 0) H5Dclose(d);
  H5Sclose(sp);
  if (r < 0) return KDC_ERR(KDC_INTERNAL, "HDF5: cannot write dataset %s", path);
  return NULL;
}

kdc_status kdc_h5w_finish(kdc_h5w *w, void **img, size_t *len) {
  *img = NULL;
  *len = 0;
  H5Fflush(w->f, H5F_SCOPE_GLOBAL);
  ssize_t n = H5Fget_file_image(w->f, NULL, 0);
  kdc_status st = NULL;
  if (n <= 0) {
    st = KDC_ERR(KDC_INTERNAL, "HDF5: cannot take the in-memory file's image");
  } else {
    *img = kdc_xmalloc((size_t)n);
    if (H5Fget_file_image(w->f, *img, (size_t)n) != n) {
      free(*img);
      *img = NULL;
      st = KDC_ERR(KDC_INTERNAL, "HDF5: cannot take the in-memory file's image");
    } else {
      *len = (size_t)n;
    }
  }
  H5Fclose(w->f);
  free(w);
  return st;
}

void kdc_h5w_abort(kdc_h5w *w) {
  if (!w) return;
  H5Fclose(w->f);
  free(w);
}
