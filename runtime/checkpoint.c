/*
 * runtime/checkpoint.c: the training state <-> one safetensors file.
 *
 * Save gathers every state tensor (weights, <opt>/iteration, slots; Keras
 * names) from the devices' pieces into global arrays and writes them with
 * kdc_safetensors_write, which is atomic (a temporary file in the target's
 * directory, fsync, rename: a crash leaves the previous file intact).  The
 * file says nothing about the mesh: load splits each global array by the
 * loading plan's shardings, so a checkpoint saved on 2x4 resumes on 1x8 or
 * on one device.  A recurrent weight kept per gate [.., G, u] (and its
 * slots; kdc_rt_train_state_gate_packed) has the same bytes as Keras'
 * gate-packed [.., G*u], the shape the file gives it, on every mesh.
 *
 * Test hook: with KDC_TEST_CRASH_IN_SAVE set in the environment, save writes
 * the first half of the checkpoint's bytes to the temporary file and calls
 * abort() -- a crash in the middle of a save (tests/training/test_fit.c
 * checks the previous checkpoint still loads).
 */
#include <stdlib.h>
#include <string.h>

#include "common/io.h"
#include "runtime/runtime.h"

static void crash_midway(const char *path, const kdc_st_tensor *ts, size_t n) {
  kdc_atomic_file *f = NULL;
  if (kdc_atomic_file_open(path, &f)) abort();
  size_t total = 0;
  for (size_t i = 0; i < n; i++) total += ts[i].nbytes;
  size_t left = total / 2;
  for (size_t i = 0; i < n && left; i++) {
    size_t k = ts[i].nbytes < left ? ts[i].nbytes : left;
    if (kdc_atomic_file_write(f, ts[i].data, k)) abort();
    left -= k;
  }
  fflush(kdc_atomic_file_stream(f));
  abort();
}

/* The shape of state |k| in a checkpoint: the plan's global shape, with
 * the last two dims merged for a weight kept per gate. */
static int file_shape(const kdc_rt_train *t, size_t k, int64_t *dims) {
  const kdc_rt_tensor_info *i = kdc_rt_train_state(t, k);
  int rank = i->rank;
  memcpy(dims, i->dims, sizeof i->dims);
  if (kdc_rt_train_state_gate_packed(t, k) && rank >= 2) {
    dims[rank - 2] *= dims[rank - 1];
    dims[--rank] = 0;
  }
  return rank;
}

kdc_status kdc_rt_train_save(kdc_rt_train *t, const char *path) {
  KDC_RETURN_IF_ERROR(kdc_rt_train_gather(t));  /* processes: the pieces meet on process 0 */
  if (kdc_rt_train_process(t) != 0) return NULL;
  size_t n = kdc_rt_train_state_count(t);
  kdc_st_tensor *ts = kdc_xcalloc(n + 1, sizeof *ts);
  void **bufs = kdc_xcalloc(n + 1, sizeof *bufs);
  for (size_t k = 0; k < n; k++) {
    const kdc_rt_tensor_info *i = kdc_rt_train_state(t, k);
    bufs[k] = kdc_xmalloc(i->bytes ? i->bytes : 1);
    kdc_rt_train_state_get(t, k, bufs[k]);
    ts[k].name = i->name;
    ts[k].dtype = i->dtype;
    ts[k].rank = file_shape(t, k, ts[k].dims);
    ts[k].data = bufs[k];
    ts[k].nbytes = i->bytes;
  }
  if (getenv("KDC_TEST_CRASH_IN_SAVE")) crash_midway(path, ts, n);
  const char *meta[] = {"format", "kdc-train-state", NULL};
  kdc_status st = kdc_safetensors_write(path, ts, n, meta);
  for (size_t k = 0; k < n; k++) free(bufs[k]);
  free(bufs);
  free(ts);
  return st;
}

/* Which state tensors a load needs (load_from). */
typedef enum load_mode {
  LOAD_ALL,       /* every state tensor (--initial-weights of --fit / --evaluate) */
  LOAD_WEIGHTS,   /* the weights; other tensors of the file are ignored (predict) */
  LOAD_PRESENT,   /* those present (the plan's TRAIN_STATE section) */
} load_mode;

static kdc_status load_from(kdc_rt_train *t, const kdc_safetensors *sf, const char *path,
                            load_mode mode) {
  size_t n = kdc_rt_train_state_count(t);
  /* check everything before changing anything */
  for (size_t k = 0; k < n; k++) {
    const kdc_rt_tensor_info *i = kdc_rt_train_state(t, k);
    const kdc_st_tensor *x = kdc_safetensors_find(sf, i->name);
    bool needed = mode == LOAD_ALL || (mode == LOAD_WEIGHTS && kdc_rt_train_state_is_weight(t, k));
    int64_t dims[KDC_IO_MAX_RANK];
    int rank = file_shape(t, k, dims);
    bool ok = x && x->dtype == i->dtype && x->rank == rank && x->nbytes == i->bytes;
    for (int d = 0; ok && d < rank; d++) ok = x->dims[d] == dims[d];
    if (!x && needed)
      return KDC_ERR(KDC_INVALID_INPUT, "%s: no tensor \"%s\" (the plan's %s needs it)", path,
                     i->name, mode == LOAD_ALL ? "training state" : "weights");
    if (x && !ok && (needed || mode == LOAD_PRESENT))
      return KDC_ERR(KDC_INVALID_INPUT, "%s: tensor \"%s\" is %s of %zu bytes; the plan expects "
                     "%s of %llu bytes", path, i->name, kdc_io_dtype_name(x->dtype), x->nbytes,
                     kdc_io_dtype_name(i->dtype), (unsigned long long)i->bytes);
  }
  for (size_t k = 0; k < n; k++) {
    const kdc_rt_tensor_info *i = kdc_rt_train_state(t, k);
    const kdc_st_tensor *x = kdc_safetensors_find(sf, i->name);
    if (!x || (mode == LOAD_WEIGHTS && !kdc_rt_train_state_is_weight(t, k))) continue;
    void *tmp = kdc_xmalloc(i->bytes ? i->bytes : 1);  /* the mapped data may be unaligned */
    memcpy(tmp, x->data, i->bytes);
    kdc_rt_train_state_set(t, k, tmp);
    free(tmp);
  }
  return NULL;
}

static kdc_status load_file(kdc_rt_train *t, const char *path, load_mode mode) {
  kdc_safetensors *sf = NULL;
  KDC_RETURN_IF_ERROR(kdc_safetensors_open(path, &sf));
  kdc_status st = load_from(t, sf, path, mode);
  kdc_safetensors_close(sf);
  return st;
}

kdc_status kdc_rt_train_load(kdc_rt_train *t, const char *path) {
  return load_file(t, path, LOAD_ALL);
}

kdc_status kdc_rt_train_load_weights(kdc_rt_train *t, const char *path) {
  return load_file(t, path, LOAD_WEIGHTS);
}

kdc_status kdc_rt_train_load_initial(kdc_rt_train *t, const char *name, const void *bytes,
                                     size_t size) {
  kdc_safetensors *sf = NULL;
  KDC_RETURN_IF_ERROR(kdc_safetensors_open_mem(name, bytes, size, &sf));
  kdc_status st = load_from(t, sf, name, LOAD_PRESENT);
  kdc_safetensors_close(sf);
  return st;
}
