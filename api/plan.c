/*
 * api/plan.c: plans (load, free, save, what they take and give) and
 * predict on caller arrays: `kdc run`'s batching without its files.  Rows
 * are fed in batches of the compiled batch size: full batches are read
 * from and written to the caller's arrays in place, a last partial batch
 * is zero-padded in a staging buffer and its padding rows dropped.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "api/api.h"
#include "common/io.h"

#ifndef KDC_VERSION_STRING
#define KDC_VERSION_STRING "0.0.0"
#endif

int kdc_api_version(void) { return KDC_API_VERSION; }
const char *kdc_version(void) { return KDC_VERSION_STRING; }
void kdc_free(void *p) { free(p); }

const char *kdc_array_dtype_name(int dtype) {
  if (dtype < 0 || dtype >= KDC_IO_DTYPE_COUNT) return "?";
  return kdc_io_dtype_name((kdc_io_dtype)dtype);
}

void kdc_compile_options_init(kdc_compile_options *o) {
  if (!o) return;
  memset(o, 0, sizeof *o);
  o->struct_size = sizeof *o;
  o->batch = 32;
}

void kdc_run_options_init(kdc_run_options *o) {
  if (!o) return;
  memset(o, 0, sizeof *o);
  o->struct_size = sizeof *o;
  o->num_processes = -1;
  o->process_id = -1;
}

void kdc_api_info(const kdc_rt_tensor_info *t, kdc_tensor_info *out) {
  memset(out, 0, sizeof *out);
  out->name = t->name;
  out->dtype = (int)t->dtype;
  out->rank = t->rank;
  memcpy(out->dims, t->dims, sizeof out->dims);
  out->bytes = t->bytes;
}

void kdc_api_array_name(const kdc_array *a, const char *kind, size_t i, const char *plan_name,
                        char *buf, size_t n) {
  if (a->name) snprintf(buf, n, "%s", a->name);
  else snprintf(buf, n, "%s %zu (\"%s\")", kind, i, plan_name);
}

void kdc_api_shape_str(int rank, const int64_t *dims, char *buf, size_t n) {
  size_t k = (size_t)snprintf(buf, n, "(");
  for (int i = 0; i < rank && k < n; i++)
    k += (size_t)snprintf(buf + k, n - k, "%s%" PRId64, i ? ", " : "", dims[i]);
  if (k < n) snprintf(buf + k, n - k, rank == 1 ? ",)" : ")");
}

kdc_status kdc_api_plan_open(const char *path, const kdc_run_options *o, kdc_plan **out) {
  if (o && o->struct_size < sizeof(kdc_run_options))
    return KDC_ERR(KDC_INVALID_INPUT, "run options not made by kdc_run_options_init "
                   "(struct_size %zu, this library's is %zu)", o->struct_size,
                   sizeof(kdc_run_options));
  if (o && (o->threads < 0 || o->threads > 4096))
    return KDC_ERR(KDC_INVALID_INPUT, "--threads \"%d\": expected an integer from 1 to 4096 "
                   "(0: every core)", o->threads);
  if (o && !(o->collective_timeout_s >= 0 && o->collective_timeout_s < 1e9))
    return KDC_ERR(KDC_INVALID_INPUT, "run: --collective-timeout must be > 0 seconds, got %g",
                   o->collective_timeout_s);
  kdc_rt_options ro;
  kdc_api_rt_options(o, &ro);
  KDC_RETURN_IF_ERROR(kdc_api_place(o, path, &ro));
  kdc_plan *p = calloc(1, sizeof *p);
  if (!p) {
    kdc_plan_file_close(ro.file);
    return KDC_ERR(KDC_OUT_OF_MEMORY, "%s: out of memory", path);
  }
  p->path = strdup(path);
  p->warnings = strdup("");
  p->process_id = ro.process_id;
  kdc_status st = NULL;
  if (p->path && p->warnings) {
    st = kdc_rt_plan_load_with(path, &ro, &p->rt);  /* takes ro.file over */
  } else {
    kdc_plan_file_close(ro.file);
    st = KDC_ERR(KDC_OUT_OF_MEMORY, "%s: out of memory", path);
  }
  if (!st && !ro.describe_only &&
      (kdc_rt_plan_func_count(p->rt) == 0 || kdc_rt_plan_find_func(p->rt, "predict") != 0))
    st = KDC_ERR(KDC_INVALID_INPUT, "%s: the plan has no predict function", path);
  if (st) {
    kdc_plan_free(p);
    return st;
  }
  *out = p;
  return NULL;
}

kdc_status kdc_plan_load(const char *path, const kdc_run_options *o, kdc_plan **out) {
  if (!out) return KDC_ERR(KDC_INVALID_INPUT, "load: no place for the plan (out is NULL)");
  *out = NULL;
  if (!path) return KDC_ERR(KDC_INVALID_INPUT, "run: no plan given (see kdc --help)");
  return kdc_api_plan_open(path, o, out);
}

void kdc_plan_free(kdc_plan *p) {
  if (!p) return;
  if (p->trainer) kdc_trainer_free(p->trainer);
  if (p->rt) kdc_rt_plan_release(p->rt);
  free(p->path);
  free(p->bytes);
  free(p->warnings);
  free(p);
}

kdc_status kdc_plan_save(const kdc_plan *p, const char *path) {
  if (!p || !path) return KDC_ERR(KDC_INVALID_INPUT, "save: no plan or no path");
  if (p->bytes) return kdc_file_write_atomic(path, p->bytes, p->size);
  void *data = NULL;
  size_t size = 0;
  KDC_RETURN_IF_ERROR(kdc_file_read_all(p->path, &data, &size));
  kdc_status st = kdc_file_write_atomic(path, data, size);
  free(data);
  return st;
}

const char *kdc_plan_warnings(const kdc_plan *p) { return p && p->warnings ? p->warnings : ""; }

int64_t kdc_plan_batch(const kdc_plan *p) {
  if (!p || kdc_rt_plan_input_count(p->rt, 0) == 0) return 0;
  return kdc_rt_plan_input(p->rt, 0, 0)->dims[0];
}

int64_t kdc_plan_device_count(const kdc_plan *p) { return p ? kdc_rt_plan_device_count(p->rt) : 0; }
int kdc_plan_mesh_rank(const kdc_plan *p) { return p ? (int)kdc_rt_plan_mesh(p->rt)->naxes : 0; }

const char *kdc_plan_mesh_axis(const kdc_plan *p, int axis, int64_t *size) {
  if (!p || axis < 0 || axis >= kdc_plan_mesh_rank(p)) return NULL;
  const kdc_prog_mesh *m = kdc_rt_plan_mesh(p->rt);
  if (size) *size = m->sizes[axis];
  return m->names[axis];
}

int kdc_plan_has_training(const kdc_plan *p) {
  return p && kdc_rt_plan_find_func(p->rt, "train_step") >= 0;
}

int kdc_plan_process_id(const kdc_plan *p) { return p ? p->process_id : 0; }
size_t kdc_plan_input_count(const kdc_plan *p) { return p ? kdc_rt_plan_input_count(p->rt, 0) : 0; }
size_t kdc_plan_output_count(const kdc_plan *p) { return p ? kdc_rt_plan_output_count(p->rt, 0) : 0; }

kdc_status kdc_plan_input(const kdc_plan *p, size_t i, kdc_tensor_info *out) {
  if (!p || !out || i >= kdc_plan_input_count(p))
    return KDC_ERR(KDC_INVALID_INPUT, "input %zu: the plan has %zu input(s)", i,
                   kdc_plan_input_count(p));
  kdc_api_info(kdc_rt_plan_input(p->rt, 0, i), out);
  return NULL;
}

kdc_status kdc_plan_output(const kdc_plan *p, size_t i, kdc_tensor_info *out) {
  if (!p || !out || i >= kdc_plan_output_count(p))
    return KDC_ERR(KDC_INVALID_INPUT, "output %zu: the plan has %zu output(s)", i,
                   kdc_plan_output_count(p));
  kdc_api_info(kdc_rt_plan_output(p->rt, 0, i), out);
  return NULL;
}

/* ---- predict -------------------------------------------------------------- */

enum { MAX_IO = 64 };

typedef struct predict_state {
  const void *in[MAX_IO];     /* converted inputs (or the caller's) */
  void *owned[MAX_IO];        /* conversions */
  void *bin[MAX_IO], *bout[MAX_IO]; /* staging for a partial batch */
} predict_state;

/* A zeroed host buffer of |bytes| for tensor |name|: a batch that does not
 * fit in memory is an error naming it, not an abort. */
static kdc_status io_buffer(const char *what, const char *name, uint64_t bytes, void **out) {
  *out = bytes < SIZE_MAX ? calloc(1, (size_t)bytes + 1) : NULL;
  if (!*out)
    return KDC_ERR(KDC_OUT_OF_MEMORY, "%s \"%s\": cannot allocate %llu bytes", what, name,
                   (unsigned long long)bytes);
  return NULL;
}

static kdc_status check_output(const kdc_rt_tensor_info *t, const kdc_array *a, int64_t rows,
                               size_t k) {
  char want[160], got[160];
  int64_t dims[KDC_IO_MAX_RANK];
  memcpy(dims, t->dims, sizeof dims);
  dims[0] = rows;
  kdc_api_shape_str(t->rank, dims, want, sizeof want);
  if (!a->data)
    return KDC_ERR(KDC_INVALID_INPUT, "output %zu (\"%s\"): no buffer", k, t->name);
  bool ok = a->rank == t->rank && a->dtype == (int)t->dtype;
  for (int d = 0; ok && d < t->rank; d++) ok = a->dims[d] == dims[d];
  if (ok) return NULL;
  kdc_api_shape_str(a->rank < 0 || a->rank > KDC_IO_MAX_RANK ? 0 : a->rank, a->dims, got,
                    sizeof got);
  return KDC_ERR(KDC_INVALID_INPUT, "output %zu (\"%s\"): the buffer is %s %s, the plan gives "
                 "%s %s", k, t->name, kdc_array_dtype_name(a->dtype), got,
                 kdc_io_dtype_name(t->dtype), want);
}

static kdc_status predict(kdc_plan *p, const kdc_array *inputs, size_t n_in, kdc_array *outputs,
                          size_t n_out, predict_state *s) {
  kdc_rt_plan *rt = p->rt;
  size_t want_in = kdc_rt_plan_input_count(rt, 0), want_out = kdc_rt_plan_output_count(rt, 0);
  const char *name = p->path ? p->path : "plan";
  if (want_in > MAX_IO || want_out > MAX_IO)
    return KDC_ERR(KDC_UNSUPPORTED, "%s: more than %d inputs or outputs", name, MAX_IO);
  if (n_in != want_in || (n_in && !inputs))
    return KDC_ERR(KDC_INVALID_INPUT, "%s: the plan takes %zu input(s), %zu given", name, want_in,
                   n_in);
  if (n_out != want_out || (n_out && !outputs))
    return KDC_ERR(KDC_INVALID_INPUT, "%s: the plan has %zu output(s), %zu output buffers given",
                   name, want_out, n_out);
  int64_t batch = kdc_plan_batch(p), rows = -1;
  for (size_t i = 0; i < n_in; i++) {
    const kdc_rt_tensor_info *t = kdc_rt_plan_input(rt, 0, i);
    char what[200], first[200];
    kdc_api_array_name(&inputs[i], "input", i, t->name, what, sizeof what);
    KDC_RETURN_IF_ERROR(kdc_api_convert(what, t, &inputs[i], false, 0, &s->in[i], &s->owned[i]));
    kdc_api_array_name(&inputs[0], "input", 0, kdc_rt_plan_input(rt, 0, 0)->name, first,
                       sizeof first);
    if (rows >= 0 && inputs[i].dims[0] != rows)
      return KDC_ERR(KDC_INVALID_INPUT, "%s: %" PRId64 " rows, but %s has %" PRId64, what,
                     inputs[i].dims[0], first, rows);
    rows = inputs[i].dims[0];
  }
  for (size_t o = 0; o < n_out; o++) {
    const kdc_rt_tensor_info *t = kdc_rt_plan_output(rt, 0, o);
    if (t->rank < 1 || t->dims[0] != batch)
      return KDC_ERR(KDC_UNSUPPORTED, "output \"%s\" is not batch-major (dim 0 is not the batch "
                     "%" PRId64 ")", t->name, batch);
    KDC_RETURN_IF_ERROR(check_output(t, &outputs[o], rows, o));
  }
  const void *bin[MAX_IO];
  void *bout[MAX_IO];
  for (int64_t r0 = 0; r0 < rows; r0 += batch) {
    int64_t n = rows - r0 < batch ? rows - r0 : batch;
    for (size_t i = 0; i < n_in; i++) {
      const kdc_rt_tensor_info *t = kdc_rt_plan_input(rt, 0, i);
      size_t row = t->bytes / (uint64_t)batch;
      const char *src = (const char *)s->in[i] + row * (size_t)r0;
      if (n == batch) {
        bin[i] = src;
        continue;
      }
      if (!s->bin[i]) KDC_RETURN_IF_ERROR(io_buffer("input", t->name, t->bytes, &s->bin[i]));
      memset(s->bin[i], 0, row * (size_t)batch);
      memcpy(s->bin[i], src, row * (size_t)n);
      bin[i] = s->bin[i];
    }
    for (size_t o = 0; o < n_out; o++) {
      const kdc_rt_tensor_info *t = kdc_rt_plan_output(rt, 0, o);
      size_t row = t->bytes / (uint64_t)batch;
      if (n == batch) {
        bout[o] = (char *)outputs[o].data + row * (size_t)r0;
        continue;
      }
      if (!s->bout[o]) KDC_RETURN_IF_ERROR(io_buffer("output", t->name, t->bytes, &s->bout[o]));
      bout[o] = s->bout[o];
    }
    KDC_RETURN_IF_ERROR(kdc_rt_plan_run(rt, bin, bout));
    for (size_t o = 0; o < n_out && n < batch; o++) {
      size_t row = kdc_rt_plan_output(rt, 0, o)->bytes / (uint64_t)batch;
      memcpy((char *)outputs[o].data + row * (size_t)r0, s->bout[o], row * (size_t)n);
    }
  }
  return NULL;
}

kdc_status kdc_plan_predict(kdc_plan *p, const kdc_array *inputs, size_t n_inputs,
                            kdc_array *outputs, size_t n_outputs) {
  if (!p) return KDC_ERR(KDC_INVALID_INPUT, "predict: no plan");
  predict_state s;
  memset(&s, 0, sizeof s);
  kdc_status st = predict(p, inputs, n_inputs, outputs, n_outputs, &s);
  for (int i = 0; i < MAX_IO; i++) {
    free(s.owned[i]);
    free(s.bin[i]);
    free(s.bout[i]);
  }
  return st;
}
