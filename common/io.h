/*
 * common/io.h: kdc's file formats and file helpers, shared by every folder.
 *
 *   files.c        input checks, whole-file reads and maps, atomic writes (temp +
 *                  rename), a command's all-or-nothing output set
 *   dtype.c        element types of array files, shape sizes, f32 conversion
 *   npy.c          NumPy .npy arrays (read v1/v2/v3, write v1 like numpy)
 *   safetensors.c  safetensors weight files (read, write like the Rust crate)
 *   hash.c         xxHash64 (one-shot and streaming) for plan integrity
 *   plan_file.c    the plan.bin container (docs/plan-format.md)
 *   bytes.c        kdc_reader / kdc_buf: bounds-checked section payloads
 *   json_text.c    JSON text checks json-c does not make (comments, \u0000)
 *
 * Conventions.  Every function that can fail on input returns a kdc_status
 * whose message is one line starting with the file name as the caller gave
 * it, then the place in the file, then what is wrong:
 *     x.npy: byte 8: header is not a Python dict literal
 * Functions never exit.  All multi-byte numbers in these formats are little
 * endian; the code reads them byte by byte, so it is correct on any host.
 * This header knows nothing of ir/: kdc_io_dtype is its own enum.
 */
#ifndef KDC_COMMON_IO_H
#define KDC_COMMON_IO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "kdc/status.h"

/* ------------------------------------------------------------------------
 * files.c
 * ---------------------------------------------------------------------- */

/* Inputs are regular files only.  Opens |path| read-only without blocking on
 * a FIFO; a directory, FIFO, socket or device is an error naming what it
 * is.  *|out_size| is st_size (0 also for procfs files of unknown size). */
kdc_status kdc_file_open_input(const char *path, int *out_fd, uint64_t *out_size);
/* "a directory", "a FIFO (named pipe)", ... for a st_mode. */
const char *kdc_file_type_name(unsigned mode);

/* Reads the whole file at |path|.  On success *|out_data| is a heap block of
 * *|out_size| bytes, aligned to 64 bytes, followed by one extra NUL byte (so
 * text can be parsed as a C string); free it with free().  IO errors name
 * |path| and strerror.  _max: a file over |max| bytes is an error (checked
 * against st_size before anything is allocated; a procfs file is read up to
 * |max|) naming |what| ("a model JSON"). */
kdc_status kdc_file_read_all(const char *path, void **out_data, size_t *out_size);
kdc_status kdc_file_read_max(const char *path, size_t max, const char *what, void **out_data,
                             size_t *out_size);

/* The size limit of JSON documents kdc reads (model, layout, TF.js
 * model.json): json-c takes an int length; 1 GiB is far above any model. */
#define KDC_JSON_MAX_BYTES ((size_t)1 << 30)

/* json_text.c: |text| (|len| bytes, the JSON document of file |name|, at
 * byte |base| of it) holds no comment, no NUL byte and no \u0000 escape in a
 * string (json-c would take comments and truncate names at the NUL); the
 * error gives line, column and byte. */
kdc_status kdc_json_text_check(const char *name, const char *text, size_t len, size_t base);
/* The 1-based line and column of byte |off| of |text|. */
void kdc_text_line_col(const char *text, size_t off, int *line, int *col);

/* An output file that appears at its final path complete or not at all.
 * open() creates "<path>.tmp.XXXXXX" in the same directory (so rename() is
 * atomic), write() appends, commit() flushes, fsyncs and renames over |path|,
 * abort() unlinks the temp file.  Exactly one of commit/abort must be called;
 * both free the object.  A failed commit also removes the temp file, and an
 * existing file at |path| is untouched until the rename.
 * Targets: a regular file or a new name; a symlink is written through to
 * the file at the end of its chain (the temp file in that file's directory);
 * a character device (/dev/null, a terminal) is written directly, without a
 * temp file; a directory, FIFO, socket or block device is an error at open.
 * SIGINT, SIGTERM and SIGHUP (when their handler is the default) and exit()
 * remove every live temp file. */
typedef struct kdc_atomic_file kdc_atomic_file;

kdc_status kdc_atomic_file_open(const char *path, kdc_atomic_file **out);
/* Appends |n| bytes.  Errors are reported here or, for buffered data, by
 * commit(); after an error the caller still calls abort(). */
kdc_status kdc_atomic_file_write(kdc_atomic_file *f, const void *data, size_t n);
/* The underlying stream, for fprintf-style writers; its errors surface at
 * commit().  Do not fclose it. */
FILE *kdc_atomic_file_stream(kdc_atomic_file *f);
/* The temporary file's path (for tests and diagnostics; a device's path). */
const char *kdc_atomic_file_temp_path(const kdc_atomic_file *f);
kdc_status kdc_atomic_file_commit(kdc_atomic_file *f);
void kdc_atomic_file_abort(kdc_atomic_file *f);

/* A command's outputs, all-or-nothing.  begin() checks that every input
 * that exists is a regular file (a FIFO or device fails before any work),
 * every output path
 * (a regular file, a new name, a symlink to one, or a character device;
 * anything else is an error naming the flag) and that no output is the same
 * file as an input or another output (the same path, or the same st_dev and
 * st_ino): that is a located error naming both flags.  Until end(), the
 * commit of an atomic file opened at a declared path (the same string) only
 * completes its temp file; end(true) renames them all into place, end(false)
 * removes them (and a signal or exit() removes them too).  One set at a
 * time; paths NULL in |out| or |in| are skipped. */
typedef struct kdc_file_arg {
  const char *flag;  /* "--output", "-o", "--x" ... */
  const char *path;
} kdc_file_arg;
kdc_status kdc_outputs_begin(const kdc_file_arg *out, size_t n_out, const kdc_file_arg *in,
                             size_t n_in);
kdc_status kdc_outputs_end(bool keep);

/* open + write + commit of one block. */
kdc_status kdc_file_write_atomic(const char *path, const void *data, size_t n);

/* A whole input file, mapped read-only (or read, for empty files, pipes and
 * file systems without mmap).  data is 64-byte aligned, valid until close. */
typedef struct kdc_file_map {
  const uint8_t *data;
  size_t size;
  bool mapped;                     /* munmap (true) or free (false) at close */
} kdc_file_map;

kdc_status kdc_file_map_open(const char *path, kdc_file_map *out);
/* A private 64-byte-aligned copy of |size| bytes, closed the same way. */
void kdc_file_map_copy(const void *bytes, size_t size, kdc_file_map *out);
void kdc_file_map_close(kdc_file_map *m);

/* ------------------------------------------------------------------------
 * Element types of arrays in files (npy.c, safetensors.c):
 * dtype.c
 * ---------------------------------------------------------------------- */

typedef enum kdc_io_dtype {
  KDC_IO_DTYPE_F32,
  KDC_IO_DTYPE_F64,
  KDC_IO_DTYPE_F16,   /* IEEE half */
  KDC_IO_DTYPE_BF16,  /* bfloat16: the top half of an f32 */
  KDC_IO_DTYPE_I32,
  KDC_IO_DTYPE_I64,
  KDC_IO_DTYPE_I8,
  KDC_IO_DTYPE_U8,
  KDC_IO_DTYPE_BOOL,  /* one byte, 0 or 1 */
  KDC_IO_DTYPE_COUNT
} kdc_io_dtype;

#define KDC_IO_MAX_RANK 8

/* Bytes per element (2, 4, 8 or 1). */
size_t kdc_io_dtype_size(kdc_io_dtype dt);
/* Lower-case short name: "f32", "bf16", "bool". */
const char *kdc_io_dtype_name(kdc_io_dtype dt);
/* Converts |n| elements of floating type |dt| (F32, F64, F16, BF16) at |src|
 * (any alignment) to f32 at |dst|.  F64 rounds to nearest; returns false,
 * converting nothing, when |dt| is not a floating type. */
bool kdc_io_convert_to_f32(kdc_io_dtype dt, const void *src, size_t n, float *dst);
/* Rounding of a float to the 16-bit float types, round-to-nearest-even as
 * XLA, JAX and ml_dtypes do (NaN stays a quiet NaN with its sign, overflow
 * gives inf, f16 keeps its subnormals), and their exact widening.  The
 * storage of bf16 is the top half of an f32; f16 is IEEE binary16. */
uint16_t kdc_f32_to_bf16(float x);
/* The dynamic loss scaling state of a mixed_float16 training plan
 * (passes/train_step.c makes it, runtime/checkpoint.c and api/keras_state.c
 * map it to Keras' LossScaleOptimizer variables): the scale is
 * 2^(KDC_LOSS_SCALE_LOG2_INIT + exponent), the exponent 0 at the start. */
#define KDC_LSO_STEP_COUNTER "loss_scale_optimizer/step_counter"
#define KDC_LSO_SCALE_EXPONENT "loss_scale_optimizer/scale_exponent"
enum { KDC_LOSS_SCALE_LOG2_INIT = 15 };

/* How this processor multiplies bf16 matrices in hardware (common/cpu.c;
 * the bf16 GEMMs of runtime/gemm_bf16.c): AMX-BF16 tiles that the kernel
 * grants the process, else not at all (the f32 GEMM).  KDC_CPU_BF16=off
 * says none; KDC_CPU_BF16=avx512 picks AVX-512 BF16's vdpbf16ps kernel
 * where the CPU has it (only when asked: it loses to sgemm where measured). */
typedef enum { KDC_CPU_BF16_NONE, KDC_CPU_BF16_AVX512, KDC_CPU_BF16_AMX } kdc_cpu_bf16_kind;
kdc_cpu_bf16_kind kdc_cpu_bf16_kernel(void);
/* kdc_cpu_bf16_kernel() != KDC_CPU_BF16_NONE. */
bool kdc_cpu_bf16(void);
/* "AMX-BF16", "AVX-512 BF16" or "none". */
const char *kdc_cpu_bf16_name(kdc_cpu_bf16_kind k);
uint16_t kdc_f32_to_f16(float x);
float kdc_bf16_to_f32(uint16_t h);
float kdc_f16_to_f32(uint16_t h);
/* Converts |n| f32 values to F16 or BF16 (rounded as above), F64 or F32;
 * returns false, converting nothing, for any other |dt|. */
bool kdc_io_convert_from_f32(kdc_io_dtype dt, const float *src, size_t n, void *dst);
/* Element |i| of an array of |dt|: integers and booleans exactly in *|iv|
 * (returns true), floating types in *|fv| (returns false). */
bool kdc_io_element(kdc_io_dtype dt, const void *data, size_t i, int64_t *iv, double *fv);
/* Number of elements and bytes of a shape, refusing negative dims and any
 * product that overflows int64/size_t.  On failure *|out_bad_dim| is the index
 * of the offending dim (or -1 for a byte-size overflow). */
bool kdc_io_shape_bytes(kdc_io_dtype dt, int rank, const int64_t *dims,
                        size_t *out_nbytes, int *out_bad_dim);

/* ------------------------------------------------------------------------
 * npy.c: NumPy .npy files
 * ---------------------------------------------------------------------- */

typedef kdc_io_dtype kdc_npy_dtype;

/* The longest .npy header read (a v2/v3 header length is 32-bit; numpy's
 * own reader stops at 10000 bytes by default). */
#define KDC_NPY_MAX_HEADER 65536

/* An array read from or to be written to a .npy file.  C order, little
 * endian.  rank 0 is a scalar (one element). */
typedef struct kdc_npy_array {
  kdc_npy_dtype dtype;
  int rank;                        /* 0..KDC_IO_MAX_RANK */
  int64_t dims[KDC_IO_MAX_RANK];   /* dims[rank..] are 0 */
  void *data;                      /* owned, 64-byte aligned, never NULL after a read */
  size_t nbytes;                   /* product(dims) * dtype size */
} kdc_npy_array;

/* Reads a .npy file of format version 1.0, 2.0 or 3.0 with descr '<f4',
 * '<f8', '<f2', '<i4', '<i8', '|i1', '|u1' or '|b1' and fortran_order False.
 * *|out| is zeroed first; on success the caller owns it (kdc_npy_free).
 * Bytes after the data are ignored, as numpy does. */
kdc_status kdc_npy_read(const char *path, kdc_npy_array *out);
/* Same from memory; |name| is used in messages.  The data is copied. */
kdc_status kdc_npy_read_mem(const char *name, const void *bytes, size_t size,
                            kdc_npy_array *out);
/* Converts a floating array (F64, F16, BF16) to F32 in place; F32 is left as
 * it is.  Integer and bool arrays give KDC_INVALID_INPUT naming |name|. */
kdc_status kdc_npy_to_f32(const char *name, kdc_npy_array *a);
void kdc_npy_free(kdc_npy_array *a);

/* Writes |data| (product(dims) elements of |dtype|, C order) atomically as a
 * version 1.0 .npy file byte-identical to numpy.save.  BF16 has no numpy
 * descr and gives KDC_UNSUPPORTED. */
kdc_status kdc_npy_write(const char *path, kdc_npy_dtype dtype, int rank,
                         const int64_t *dims, const void *data);
/* The same bytes into a malloc'd block (free()). */
kdc_status kdc_npy_encode(const char *name, kdc_npy_dtype dtype, int rank,
                          const int64_t *dims, const void *data,
                          void **out_bytes, size_t *out_size);

/* ------------------------------------------------------------------------
 * safetensors.c
 * ---------------------------------------------------------------------- */

/* One tensor of a safetensors file.  For a reader, every field points into
 * the opened file and lives until kdc_safetensors_close; |data| may be
 * unaligned for its type (the format does not align tensors): copy it with
 * memcpy or kdc_safetensors_copy_f32.  For the writer, the caller fills name,
 * dtype, rank, dims and data; nbytes is ignored. */
typedef struct kdc_st_tensor {
  const char *name;
  kdc_io_dtype dtype;              /* F32 F64 F16 BF16 I32 I64 I8 U8 BOOL */
  int rank;
  int64_t dims[KDC_IO_MAX_RANK];
  const void *data;
  size_t nbytes;
} kdc_st_tensor;

typedef struct kdc_safetensors kdc_safetensors;

/* Opens and validates a whole safetensors file (mapped read-only): header
 * length within the file, JSON syntax (with json-c's error and byte offset),
 * every key, dtype, shape (rank <= 8, no overflow), data_offsets in range,
 * matching shape * dtype size and not overlapping, no duplicate names.  The
 * optional "__metadata__" must map strings to strings. */
kdc_status kdc_safetensors_open(const char *path, kdc_safetensors **out);
/* Same over memory; |bytes| is copied; |name| is used in messages. */
kdc_status kdc_safetensors_open_mem(const char *name, const void *bytes,
                                    size_t size, kdc_safetensors **out);
void kdc_safetensors_close(kdc_safetensors *st);

/* Tensors in header order (the order data appears in files written by kdc
 * and by the Rust crate). */
size_t kdc_safetensors_count(const kdc_safetensors *st);
const kdc_st_tensor *kdc_safetensors_get(const kdc_safetensors *st, size_t i);
/* NULL when no tensor is called |name|. */
const kdc_st_tensor *kdc_safetensors_find(const kdc_safetensors *st, const char *name);
/* A "__metadata__" value, or NULL. */
const char *kdc_safetensors_metadata(const kdc_safetensors *st, const char *key);
/* A kdc training checkpoint (`kdc run --fit --save-weights`: metadata
 * "format": "kdc-train-state") holds the optimizer state next to the
 * weights, named "<opt>/iteration" (an i32 scalar) and "<opt>/<slot>".
 * Returns true and |opt|'s name in |out| (NUL-terminated, at most |n|
 * bytes) when |st| is one with such an iteration tensor. */
bool kdc_safetensors_checkpoint_optimizer(const kdc_safetensors *st, char *out, size_t n);
/* Is |name| one of the optimizer tensors "<opt>/..." of |opt|? */
bool kdc_safetensors_is_optimizer_tensor(const char *opt, const char *name);
/* Copies |t| to |dst| (t->nbytes / dtype size floats), converting F64, F16
 * and BF16 to f32.  Integer tensors give KDC_INVALID_INPUT naming the file
 * and tensor. */
kdc_status kdc_safetensors_copy_f32(const kdc_safetensors *st,
                                    const kdc_st_tensor *t, float *dst);

/* Writes |n| tensors atomically in the given order, data contiguous, header
 * as compact JSON ("__metadata__" first, when |metadata| is non-NULL: a
 * NULL-terminated list of key, value, key, value, ...) padded with spaces to
 * a multiple of 8 bytes, exactly as the Rust safetensors crate writes it.
 * Names must be unique and non-empty, and not "__metadata__". */
kdc_status kdc_safetensors_write(const char *path, const kdc_st_tensor *tensors,
                                 size_t n, const char *const *metadata);
/* The same bytes appended to |out| (a plan section: kdc compile's
 * TRAIN_STATE); |name| names errors. */
struct kdc_buf;
kdc_status kdc_safetensors_encode(const char *name, const kdc_st_tensor *tensors, size_t n,
                                  const char *const *metadata, struct kdc_buf *out);

/* ------------------------------------------------------------------------
 * hash.c: xxHash64 (https://github.com/Cyan4973/xxHash, written from the
 * spec), about 10 GB/s: plan integrity, not security.
 * ---------------------------------------------------------------------- */

uint64_t kdc_hash64(const void *data, size_t n, uint64_t seed);

typedef struct kdc_hash64_state {
  uint64_t v[4];                   /* the four lanes */
  uint64_t total;                  /* bytes consumed */
  uint64_t seed;
  uint8_t buf[32];                 /* a partial stripe */
  uint32_t buf_len;
} kdc_hash64_state;

void kdc_hash64_init(kdc_hash64_state *s, uint64_t seed);
void kdc_hash64_update(kdc_hash64_state *s, const void *data, size_t n);
/* The hash of everything consumed; |s| stays usable. */
uint64_t kdc_hash64_digest(const kdc_hash64_state *s);

/* ---- SHA-256 and HMAC-SHA256 (sha256.c; FIPS 180-4, RFC 2104) ---------- */

enum { KDC_SHA256_BYTES = 32 };
typedef struct kdc_sha256 {
  uint32_t h[8];
  uint64_t total;                  /* bytes consumed */
  uint8_t buf[64];
  uint32_t n;                      /* bytes in buf */
} kdc_sha256;
typedef struct kdc_hmac_sha256 {
  kdc_sha256 inner, outer;
} kdc_hmac_sha256;

void kdc_sha256_init(kdc_sha256 *s);
void kdc_sha256_update(kdc_sha256 *s, const void *data, size_t n);
void kdc_sha256_final(kdc_sha256 *s, uint8_t out[KDC_SHA256_BYTES]);
void kdc_hmac_sha256_init(kdc_hmac_sha256 *m, const void *key, size_t key_len);
void kdc_hmac_sha256_update(kdc_hmac_sha256 *m, const void *data, size_t n);
void kdc_hmac_sha256_final(kdc_hmac_sha256 *m, uint8_t out[KDC_SHA256_BYTES]);
/* |n| bytes equal, in a time that does not depend on where they differ. */
bool kdc_bytes_equal_ct(const void *a, const void *b, size_t n);

/* ------------------------------------------------------------------------
 * plan_file.c: the plan.bin container (docs/plan-format.md)
 * ---------------------------------------------------------------------- */

#define KDC_PLAN_MAGIC "KDCPLAN"      /* 8 bytes with its NUL */
#define KDC_PLAN_FORMAT_VERSION 1u
#define KDC_PLAN_HEADER_SIZE 56u
#define KDC_PLAN_ENTRY_SIZE 48u
#define KDC_PLAN_ALIGN 64u
#define KDC_PLAN_NAME_MAX 23          /* section names: 1..23 bytes + NUL */

enum {
  KDC_PLAN_SECTION_METADATA = 1,
  KDC_PLAN_SECTION_PROGRAM = 2,
  KDC_PLAN_SECTION_BUFFERS = 3,
  KDC_PLAN_SECTION_CODE = 4,
  KDC_PLAN_SECTION_WEIGHTS = 5,
  KDC_PLAN_SECTION_IR_TEXT = 6,
  KDC_PLAN_SECTION_PTX = 7,
  KDC_PLAN_SECTION_EXPLAIN = 8,  /* text: why each named value has its sharding */
  KDC_PLAN_SECTION_CUDA = 9,     /* CUDA launch table of the PTX kernels (docs/gpu.md) */
  KDC_PLAN_SECTION_TRAIN_STATE = 10, /* safetensors image: initial optimizer state restored
                                        from a checkpoint (`kdc compile --weights`) */
  KDC_PLAN_SECTION_KERAS = 11,   /* JSON: the Keras config and weights-file paths (--save-model) */
};

/* "metadata", "program", ... or "unknown" for other kinds. */
const char *kdc_plan_section_kind_name(uint32_t kind);
/* The kdc version written into plan headers ("0.1.0"). */
const char *kdc_plan_kdc_version(void);

/* Writer: sections are written in add() order; add() copies its bytes,
 * add_parts() borrows them. */
typedef struct kdc_plan_writer kdc_plan_writer;
typedef struct kdc_plan_part {
  const void *data;
  size_t size;
} kdc_plan_part;

kdc_plan_writer *kdc_plan_writer_create(void);
/* Copies |size| bytes of |data| as a section.  |name| must be 1..23 bytes
 * and unique in the plan (else KDC_INTERNAL: names are chosen by codegen). */
kdc_status kdc_plan_writer_add(kdc_plan_writer *w, uint32_t kind, const char *name,
                               const void *data, size_t size);
/* A section made of |n_parts| pieces written back to back, not copied: each
 * piece's bytes must stay unchanged until kdc_plan_writer_write returns (no
 * copy of a large WEIGHTS section: issue 18).  Same name rules as add(). */
kdc_status kdc_plan_writer_add_parts(kdc_plan_writer *w, uint32_t kind, const char *name,
                                     const kdc_plan_part *parts, size_t n_parts);
void kdc_plan_writer_set_flags(kdc_plan_writer *w, uint32_t flags);
/* Lays out, checksums and atomically writes the plan to |path|. */
kdc_status kdc_plan_writer_write(kdc_plan_writer *w, const char *path);
void kdc_plan_writer_destroy(kdc_plan_writer *w);

/* Reader: the file is mapped (or read) whole and validated by open(): magic,
 * format version, header size, file size, checksum, section table bounds,
 * every section within the file, 64-byte aligned, not overlapping, names
 * NUL-terminated and unique.  Section data stays valid until close(). */
typedef struct kdc_plan_file kdc_plan_file;

typedef struct kdc_plan_section_info {
  uint32_t kind;
  const char *name;
  uint64_t offset;                 /* from the start of the file */
  uint64_t size;
  const void *data;
} kdc_plan_section_info;

kdc_status kdc_plan_file_open(const char *path, kdc_plan_file **out);
/* Same over memory (copied); |name| is used in messages. */
kdc_status kdc_plan_file_open_mem(const char *name, const void *bytes, size_t size,
                                  kdc_plan_file **out);
void kdc_plan_file_close(kdc_plan_file *pf);

const char *kdc_plan_file_name(const kdc_plan_file *pf);
const char *kdc_plan_file_kdc_version(const kdc_plan_file *pf);  /* the writer's */
uint32_t kdc_plan_file_flags(const kdc_plan_file *pf);
uint64_t kdc_plan_file_checksum(const kdc_plan_file *pf);
uint64_t kdc_plan_file_size(const kdc_plan_file *pf);    /* bytes */
size_t kdc_plan_file_count(const kdc_plan_file *pf);
kdc_plan_section_info kdc_plan_file_info(const kdc_plan_file *pf, size_t i);
/* The first section of |kind| / called |name|: false when there is none. */
bool kdc_plan_file_find(const kdc_plan_file *pf, uint32_t kind,
                        const void **out_data, size_t *out_size);
bool kdc_plan_file_find_name(const kdc_plan_file *pf, const char *name,
                             const void **out_data, size_t *out_size);

/* ------------------------------------------------------------------------
 * bytes.c: section payloads
 * ---------------------------------------------------------------------- */

/* A bounds-checked cursor over a section payload.  Every read that would run
 * past the end returns KDC_INVALID_INPUT naming the file, the section and the
 * byte offset ("plan.bin: section program: byte 120: need 8 bytes for a u64,
 * 3 left") and leaves |pos| unchanged. */
typedef struct kdc_reader {
  const uint8_t *data;
  size_t size;
  size_t pos;
  const char *file;                /* for messages; borrowed */
  const char *section;             /* for messages; borrowed */
} kdc_reader;

void kdc_reader_init(kdc_reader *r, const void *data, size_t size,
                     const char *file, const char *section);
/* A reader over the first section of |kind|; "no <kind> section" error when
 * the plan has none. */
kdc_status kdc_plan_file_reader(const kdc_plan_file *pf, uint32_t kind, kdc_reader *out);
kdc_status kdc_reader_u8(kdc_reader *r, uint8_t *out);
kdc_status kdc_reader_u32(kdc_reader *r, uint32_t *out);
kdc_status kdc_reader_i32(kdc_reader *r, int32_t *out);
kdc_status kdc_reader_u64(kdc_reader *r, uint64_t *out);
kdc_status kdc_reader_i64(kdc_reader *r, int64_t *out);
kdc_status kdc_reader_f32(kdc_reader *r, float *out);
/* |n| raw bytes: *|out| points into the section (no copy). */
kdc_status kdc_reader_bytes(kdc_reader *r, size_t n, const void **out);
/* A string written by kdc_buf_put_str (u32 length, bytes, NUL): *|out| points
 * into the section and is NUL-terminated; interior NULs are refused. */
kdc_status kdc_reader_str(kdc_reader *r, const char **out, size_t *out_len);
/* A u32 element count, refused when count * |min_elem_bytes| exceeds what is
 * left (so a corrupt count cannot make the caller allocate gigabytes). */
kdc_status kdc_reader_count(kdc_reader *r, size_t min_elem_bytes, uint32_t *out);
/* Skips zero padding up to a multiple of |align| from the section start. */
kdc_status kdc_reader_align(kdc_reader *r, size_t align);
/* A KDC_INVALID_INPUT at the current position: "<file>: section <s>: byte
 * <pos>: <message>", for semantic errors found while parsing. */
kdc_status kdc_reader_error(const kdc_reader *r, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* A growable little-endian byte buffer, the writing side of kdc_reader.
 * Allocation failure aborts (kdc_xrealloc). */
typedef struct kdc_buf {
  uint8_t *data;
  size_t size;
  size_t cap;
} kdc_buf;

void kdc_buf_init(kdc_buf *b);
void kdc_buf_free(kdc_buf *b);
void kdc_buf_put_u8(kdc_buf *b, uint8_t v);
void kdc_buf_put_u32(kdc_buf *b, uint32_t v);
void kdc_buf_put_i32(kdc_buf *b, int32_t v);
void kdc_buf_put_u64(kdc_buf *b, uint64_t v);
void kdc_buf_put_i64(kdc_buf *b, int64_t v);
void kdc_buf_put_f32(kdc_buf *b, float v);
void kdc_buf_put_bytes(kdc_buf *b, const void *data, size_t n);
/* u32 length, the bytes, a NUL. */
void kdc_buf_put_str(kdc_buf *b, const char *s);
/* Zero bytes up to a multiple of |align|. */
void kdc_buf_align(kdc_buf *b, size_t align);
/* Overwrites 4 bytes at |at| (< size - 3): back-patching counts. */
void kdc_buf_patch_u32(kdc_buf *b, size_t at, uint32_t v);

/* ------------------------------------------------------------------------
 * Little-endian loads and stores at any alignment (used by the formats
 * above; compilers turn each into one instruction on x86 and arm64).
 * ---------------------------------------------------------------------- */

static inline uint16_t kdc_load_le16(const void *p) {
  const uint8_t *b = p;
  return (uint16_t)(b[0] | b[1] << 8);
}
static inline uint32_t kdc_load_le32(const void *p) {
  const uint8_t *b = p;
  return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 |
         (uint32_t)b[3] << 24;
}
static inline uint64_t kdc_load_le64(const void *p) {
  const uint8_t *b = p;
  return (uint64_t)kdc_load_le32(b) | (uint64_t)kdc_load_le32(b + 4) << 32;
}
static inline void kdc_store_le16(void *p, uint16_t v) {
  uint8_t *b = p;
  b[0] = (uint8_t)v;
  b[1] = (uint8_t)(v >> 8);
}
static inline void kdc_store_le32(void *p, uint32_t v) {
  uint8_t *b = p;
  for (int i = 0; i < 4; i++) b[i] = (uint8_t)(v >> (8 * i));
}
static inline void kdc_store_le64(void *p, uint64_t v) {
  kdc_store_le32(p, (uint32_t)v);
  kdc_store_le32((uint8_t *)p + 4, (uint32_t)(v >> 32));
}

#endif
