/*
 * tests/fuzz/fuzz_hdf5.c: libFuzzer target for HDF5 files as kdc reads
 * them (common/h5.c over the HDF5 C library, with its error printing off):
 * a legacy `.h5` model (model_config attribute, then its weights by
 * layer_names / weight_names) and the generic walk (every dataset listed,
 * its shape and type checked, small ones read).  The HDF5 library itself is
 * not hardened against hostile files (docs/frontend.md, "Residual risk");
 * crashes inside it are reported upstream, crashes in kdc are bugs.
 * Seeds: tests/fuzz/corpus/hdf5/.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <hdf5.h>

#include "common/kfiles.h"
#include "frontend/frontend.h"
#include "frontend/weights_src.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static int once;
  if (!once++) H5set_free_list_limits(64 << 20, 16 << 20, -1, -1, -1, -1);
  kdc_keras_model *m = NULL;
  kdc_status st = kdc_fe_load_legacy_h5("fuzz.h5", data, size, NULL, &m);
  if (!st) {
    kdc_fe_source s = {"fuzz.h5", NULL, 0, 0};
    st = kdc_fe_h5_source(m, m->h5_name, m->h5_image, m->h5_len, &s);
    kdc_fe_src_free(&s);
  }
  kdc_status_free(st);
  kdc_frontend_free(m);
  kdc_h5 *h = NULL;
  st = kdc_h5_open_image("fuzz.h5", data, size, &h);
  if (st) {
    kdc_status_free(st);
    return 0;
  }
  char **l = NULL;
  size_t n = 0;
  st = kdc_h5_list_datasets(h, "", 256, &l, &n);
  for (size_t i = 0; i < n && !st; i++) {
    int rank;
    int64_t dims[KDC_IO_MAX_RANK];
    kdc_io_dtype dt;
    kdc_status bad = kdc_h5_dataset_info(h, l[i], &rank, dims, &dt);
    if (bad) {
      kdc_status_free(bad);
      continue;
    }
    size_t ne = 1;
    for (int d = 0; d < rank && ne <= 65536; d++) ne *= (size_t)dims[d];
    if (ne > 65536) continue;
    float *buf = malloc(sizeof(float) * (ne + 1));
    kdc_status_free(kdc_h5_read(h, l[i], KDC_IO_DTYPE_F32, buf, ne));
    free(buf);
  }
  kdc_status_free(st);
  kdc_h5_free_list(l, n);
  char **names = NULL;
  size_t nn = 0;
  st = kdc_h5_attr_strings(h, "/", "layer_names", 1024, &names, &nn);
  for (size_t i = 0; i < nn; i++) free(names[i]);
  free(names);
  kdc_status_free(st);
  kdc_h5_close(h);
  return 0;
}
