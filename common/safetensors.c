/*
 * safetensors.c: the safetensors weight format (huggingface/safetensors).
 *
 *   u64 N (little endian) | N bytes of JSON header | data
 *   header: {"__metadata__": {"k": "v", ...},          (optional)
 *            "d1/kernel": {"dtype": "F32", "shape": [784, 200],
 *                          "data_offsets": [begin, end]}, ...}
 *   offsets count from the first byte after the header.
 *
 * The reader maps the file and validates all of it before returning, so the
 * tensors it hands out are safe to read: every data range lies inside the
 * file, matches shape * dtype size, and overlaps no other.  json-c keeps
 * only the last of duplicate keys, so the top-level keys are also scanned
 * from the raw text to refuse duplicate tensor names.  Gaps between tensors
 * are allowed (the Rust crate refuses them; accepting them costs nothing).
 *
 * The writer reproduces the Rust crate's layout: compact JSON with
 * "__metadata__" first, tensors in the given order with contiguous data, and
 * the header padded with spaces to a multiple of 8 bytes.
 */
#include "common/io.h"

#include <inttypes.h>
#include <json-c/json.h>
#include <stdlib.h>
#include <string.h>

#include "kdc/arena.h"

#define MAX_HEADER 100000000u  /* the Rust crate's limit */

static const struct {
  const char *name;
  kdc_io_dtype dtype;
} st_dtypes[] = {
    {"F32", KDC_IO_DTYPE_F32}, {"F64", KDC_IO_DTYPE_F64}, {"F16", KDC_IO_DTYPE_F16},
    {"BF16", KDC_IO_DTYPE_BF16}, {"I32", KDC_IO_DTYPE_I32}, {"I64", KDC_IO_DTYPE_I64},
    {"I8", KDC_IO_DTYPE_I8},   {"U8", KDC_IO_DTYPE_U8},   {"BOOL", KDC_IO_DTYPE_BOOL},
};

struct kdc_safetensors {
  char *name;            /* file name for messages */
  kdc_file_map file;
  kdc_st_tensor *tensors;
  size_t n;
  size_t *by_name;       /* tensor indices sorted by name, for find() */
  char **meta;           /* key, value, key, value, ... */
  size_t n_meta;
};

static const char *st_dtype_name(kdc_io_dtype dt) {
  for (size_t i = 0; i < sizeof st_dtypes / sizeof st_dtypes[0]; i++)
    if (st_dtypes[i].dtype == dt) return st_dtypes[i].name;
  return "?";
}

/* "[784,200]" into |buf|. */
static const char *shape_str(char *buf, size_t cap, int rank, const int64_t *dims) {
  size_t n = (size_t)snprintf(buf, cap, "[");
  for (int i = 0; i < rank && n < cap; i++)
    n += (size_t)snprintf(buf + n, cap - n, "%s%" PRId64, i ? "," : "", dims[i]);
  if (n < cap) snprintf(buf + n, cap - n, "]");
  return buf;
}

/* ---- raw scan of the top-level keys (duplicates) ---- */

/* Skips one JSON string starting at s[*i] == '"'. */
static void skip_string(const char *s, size_t n, size_t *i) {
  for ((*i)++; *i < n && s[*i] != '"'; (*i)++)
    if (s[*i] == '\\') (*i)++;
  (*i)++;
}

/* Finds a top-level key that occurs twice in |s|, a valid JSON object whose
 * top-level values are all objects and which json-c saw as |distinct| keys.
 * Returns false when there is no duplicate.  Keys are compared as written;
 * two spellings of one name ("a" and "\u0061") are reported without a name. */
static bool find_duplicate(const char *s, size_t n, size_t distinct, char **out_key) {
  size_t cap = 0, count = 0, *starts = NULL, *lens = NULL, cap2 = 0;
  size_t i = 0, depth = 0;
  while (i < n && s[i] != '{') i++;
  i++;
  for (; i < n; i++) {
    char c = s[i];
    if (c == '"') {
      size_t start = i;
      skip_string(s, n, &i);
      if (depth == 0) {  /* a key: the next non-space is ':' */
        KDC_GROW(starts, cap, count + 1);
        KDC_GROW(lens, cap2, count + 1);
        starts[count] = start;
        lens[count++] = i - start;
        while (i < n && s[i] != ':') i++;
      }
      i--;
    } else if (c == '{' || c == '[') {
      depth++;
    } else if (c == '}' || c == ']') {
      if (depth-- == 0) break;
    }
  }
  bool found = count > distinct;
  if (found) *out_key = NULL;
  for (size_t a = 0; a < count && found && !*out_key; a++)
    for (size_t b = a + 1; b < count && !*out_key; b++)
      if (lens[a] == lens[b] && memcmp(s + starts[a], s + starts[b], lens[a]) == 0)
        *out_key = strndup(s + starts[a] + 1, lens[a] - 2);
  free(starts);
  free(lens);
  return found;
}

/* ---- reader ---- */

static kdc_status bad(const kdc_safetensors *st, const char *tensor, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* "<file>: tensor "<name>": <message>" */
static kdc_status bad(const kdc_safetensors *st, const char *tensor, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  kdc_status s = kdc_status_makev(KDC_INVALID_INPUT, __FILE__, __LINE__, fmt, ap);
  va_end(ap);
  return kdc_status_annotate(s, "%s: tensor \"%s\"", st->name, tensor);
}

/* A non-negative JSON integer. */
static bool get_u63(json_object *v, int64_t *out) {
  if (!json_object_is_type(v, json_type_int)) return false;
  int64_t x = json_object_get_int64(v);
  if (x < 0 || x == INT64_MAX) return false;  /* INT64_MAX: json-c saturated */
  *out = x;
  return true;
}

static kdc_status parse_tensor(kdc_safetensors *st, const char *name, json_object *v,
                               size_t data_size, kdc_st_tensor *t) {
  if (!json_object_is_type(v, json_type_object))
    return bad(st, name, "expected an object with dtype, shape, data_offsets");
  json_object *dt, *shape, *offs;
  if (!json_object_object_get_ex(v, "dtype", &dt)) return bad(st, name, "missing \"dtype\"");
  if (!json_object_object_get_ex(v, "shape", &shape)) return bad(st, name, "missing \"shape\"");
  if (!json_object_object_get_ex(v, "data_offsets", &offs))
    return bad(st, name, "missing \"data_offsets\"");
  if (!json_object_is_type(dt, json_type_string))
    return bad(st, name, "\"dtype\" must be a string");
  const char *dts = json_object_get_string(dt);
  size_t k = 0, nd = sizeof st_dtypes / sizeof st_dtypes[0];
  while (k < nd && strcmp(st_dtypes[k].name, dts) != 0) k++;
  if (k == nd) {
    kdc_status s = bad(st, name, "dtype \"%s\" is not supported (kdc reads F32 F64 F16 BF16 "
                       "I32 I64 I8 U8 BOOL)", dts);
    return s;
  }
  t->dtype = st_dtypes[k].dtype;
  if (!json_object_is_type(shape, json_type_array))
    return bad(st, name, "\"shape\" must be an array of integers");
  size_t rank = json_object_array_length(shape);
  if (rank > KDC_IO_MAX_RANK)
    return bad(st, name, "rank %zu exceeds 8, the largest kdc supports", rank);
  t->rank = (int)rank;
  for (size_t i = 0; i < rank; i++)
    if (!get_u63(json_object_array_get_idx(shape, i), &t->dims[i]))
      return bad(st, name, "shape[%zu] is not a non-negative integer", i);
  int64_t off[2];
  if (!json_object_is_type(offs, json_type_array) || json_object_array_length(offs) != 2 ||
      !get_u63(json_object_array_get_idx(offs, 0), &off[0]) ||
      !get_u63(json_object_array_get_idx(offs, 1), &off[1]))
    return bad(st, name, "\"data_offsets\" must be [begin, end] with non-negative integers");
  char sbuf[200];
  int bad_dim;
  if (!kdc_io_shape_bytes(t->dtype, t->rank, t->dims, &t->nbytes, &bad_dim))
    return bad(st, name, "shape %s overflows", shape_str(sbuf, sizeof sbuf, t->rank, t->dims));
  if (off[1] < off[0] || (uint64_t)off[1] > data_size)
    return bad(st, name, "data_offsets [%" PRId64 ", %" PRId64 "] are outside the data "
               "(%zu bytes after the header)", off[0], off[1], data_size);
  if ((uint64_t)(off[1] - off[0]) != t->nbytes)
    return bad(st, name, "data_offsets [%" PRId64 ", %" PRId64 "] do not match shape %s %s "
               "(%zu bytes)", off[0], off[1], shape_str(sbuf, sizeof sbuf, t->rank, t->dims),
               kdc_io_dtype_name(t->dtype), t->nbytes);
  t->data = (const void *)(intptr_t)off[0];  /* made a pointer once the base is known */
  return NULL;
}

static kdc_status parse_metadata(kdc_safetensors *st, json_object *v) {
  if (!json_object_is_type(v, json_type_object))
    return KDC_ERR(KDC_INVALID_INPUT, "%s: \"__metadata__\" must be an object of strings",
                   st->name);
  st->meta = kdc_xcalloc(2 * (size_t)json_object_object_length(v) + 1, sizeof *st->meta);
  json_object_object_foreach(v, key, val) {
    if (!json_object_is_type(val, json_type_string))
      return KDC_ERR(KDC_INVALID_INPUT, "%s: \"__metadata__\".\"%s\": expected a string",
                     st->name, key);
    st->meta[2 * st->n_meta] = kdc_xstrdup(key);
    st->meta[2 * st->n_meta + 1] = kdc_xstrdup(json_object_get_string(val));
    st->n_meta++;
  }
  return NULL;
}

static int by_name_cmp(const void *a, const void *b, void *ctx) {
  const kdc_st_tensor *t = ctx;
  return strcmp(t[*(const size_t *)a].name, t[*(const size_t *)b].name);
}

static int by_offset_cmp(const void *a, const void *b, void *ctx) {
  const kdc_st_tensor *x = (const kdc_st_tensor *)ctx + *(const size_t *)a;
  const kdc_st_tensor *y = (const kdc_st_tensor *)ctx + *(const size_t *)b;
  return x->data < y->data ? -1 : x->data > y->data;
}

/* Tensors may not overlap, and the data buffer ends where the last tensor
 * ends (as the Rust crate's validation: trailing bytes are refused). */
static kdc_status check_overlaps(kdc_safetensors *st, size_t *order, size_t data_at,
                                 size_t data_size) {
  size_t end = 0;
  for (size_t i = 0; i < st->n; i++) order[i] = i;
  qsort_r(order, st->n, sizeof *order, by_offset_cmp, st->tensors);
  const kdc_st_tensor *prev = NULL;
  for (size_t i = 0; i < st->n; i++) {
    const kdc_st_tensor *t = &st->tensors[order[i]];
    if (t->nbytes == 0) continue;
    uintptr_t begin = (uintptr_t)t->data;
    if (prev && begin < (uintptr_t)prev->data + prev->nbytes)
      return KDC_ERR(KDC_INVALID_INPUT, "%s: tensor \"%s\": data_offsets [%zu, %zu] overlap "
                     "tensor \"%s\" [%zu, %zu]", st->name, t->name, (size_t)begin,
                     (size_t)begin + t->nbytes, prev->name, (size_t)(uintptr_t)prev->data,
                     (size_t)(uintptr_t)prev->data + prev->nbytes);
    prev = t;
  }
  for (size_t i = 0; i < st->n; i++)
    if ((size_t)(uintptr_t)st->tensors[i].data + st->tensors[i].nbytes > end)
      end = (size_t)(uintptr_t)st->tensors[i].data + st->tensors[i].nbytes;
  if (data_size > end)
    return KDC_ERR(KDC_INVALID_INPUT, "%s: byte %zu: %zu bytes after the last tensor's data "
                   "(the data must end with the last tensor)", st->name, data_at + end,
                   data_size - end);
  return NULL;
}

static kdc_status parse_json(kdc_safetensors *st, const char *text, size_t n,
                             json_object **out) {
  *out = NULL;
  size_t ws = 0;  /* the header's trailing padding */
  while (ws < n && (text[n - 1 - ws] == ' ' || text[n - 1 - ws] == '\n' ||
                    text[n - 1 - ws] == '\t' || text[n - 1 - ws] == '\r'))
    ws++;
  size_t start = 0;
  while (start < n - ws && (text[start] == ' ' || text[start] == '\n')) start++;
  if (start == n - ws || text[start] != '{')
    return KDC_ERR(KDC_INVALID_INPUT, "%s: byte %zu: the header is not a JSON object",
                   st->name, 8 + start);
  if (n - ws > INT32_MAX)
    return KDC_ERR(KDC_INVALID_INPUT, "%s: header too large", st->name);
  KDC_RETURN_IF_ERROR(kdc_json_text_check(st->name, text, n - ws, 8));  /* \u0000 in names */
  struct json_tokener *tok = json_tokener_new();
  json_tokener_set_flags(tok, JSON_TOKENER_STRICT | JSON_TOKENER_ALLOW_TRAILING_CHARS);
  json_object *root = json_tokener_parse_ex(tok, text, (int)(n - ws));
  enum json_tokener_error err = json_tokener_get_error(tok);
  size_t end = json_tokener_get_parse_end(tok);
  json_tokener_free(tok);
  if (!root || err != json_tokener_success) {
    json_object_put(root);
    if (err == json_tokener_continue)
      return KDC_ERR(KDC_INVALID_INPUT, "%s: byte %zu: invalid JSON header: unexpected end "
                     "of the header", st->name, 8 + n);
    return KDC_ERR(KDC_INVALID_INPUT, "%s: byte %zu: invalid JSON header: %s", st->name,
                   8 + end, json_tokener_error_desc(err));
  }
  if (end != n - ws || !json_object_is_type(root, json_type_object)) {
    json_object_put(root);
    return KDC_ERR(KDC_INVALID_INPUT, "%s: byte %zu: unexpected text after the JSON header",
                   st->name, 8 + end);
  }
  *out = root;
  return NULL;
}

static kdc_status parse(kdc_safetensors *st) {
  const uint8_t *b = st->file.data;
  size_t size = st->file.size;
  if (size < 8)
    return KDC_ERR(KDC_INVALID_INPUT, "%s: file is %zu bytes, too short for the 8-byte header "
                   "length", st->name, size);
  uint64_t n = kdc_load_le64(b);
  if (n > size - 8 || n > MAX_HEADER)
    return KDC_ERR(KDC_INVALID_INPUT, "%s: byte 0: header length %" PRIu64 " exceeds the file "
                   "(%zu bytes after the length field%s)", st->name, n, size - 8,
                   n > MAX_HEADER ? "; limit 100000000" : "");
  json_object *root;
  KDC_RETURN_IF_ERROR(parse_json(st, (const char *)b + 8, (size_t)n, &root));
  size_t data_size = size - 8 - (size_t)n;
  const uint8_t *base = b + 8 + n;
  size_t cap = (size_t)json_object_object_length(root);
  st->tensors = kdc_xcalloc(cap + 1, sizeof *st->tensors);
  kdc_status err = NULL;
  json_object_object_foreach(root, key, val) {
    if (strcmp(key, "__metadata__") == 0) {
      if ((err = parse_metadata(st, val))) break;
      continue;
    }
    kdc_st_tensor *t = &st->tensors[st->n];
    t->name = kdc_xstrdup(key);
    st->n++;
    if ((err = parse_tensor(st, key, val, data_size, t))) break;
  }
  char *dup = NULL;
  if (!err && find_duplicate((const char *)b + 8, (size_t)n, cap, &dup)) {
    err = dup ? KDC_ERR(KDC_INVALID_INPUT, "%s: tensor \"%s\": duplicate name in the header",
                        st->name, dup)
              : KDC_ERR(KDC_INVALID_INPUT, "%s: duplicate tensor name in the header", st->name);
    free(dup);
  }
  json_object_put(root);
  if (err) return err;
  st->by_name = kdc_xcalloc(st->n + 1, sizeof *st->by_name);
  KDC_RETURN_IF_ERROR(check_overlaps(st, st->by_name, 8 + (size_t)n, data_size));
  for (size_t i = 0; i < st->n; i++)
    st->tensors[i].data = base + (uintptr_t)st->tensors[i].data;
  for (size_t i = 0; i < st->n; i++) st->by_name[i] = i;
  qsort_r(st->by_name, st->n, sizeof *st->by_name, by_name_cmp, st->tensors);
  return NULL;
}

static kdc_status open_file(const char *name, kdc_file_map file, kdc_safetensors **out) {
  kdc_safetensors *st = kdc_xcalloc(1, sizeof *st);
  st->name = kdc_xstrdup(name);
  st->file = file;
  kdc_status err = parse(st);
  if (err) {
    kdc_safetensors_close(st);
    return err;
  }
  *out = st;
  return NULL;
}

kdc_status kdc_safetensors_open(const char *path, kdc_safetensors **out) {
  *out = NULL;
  kdc_file_map file;
  KDC_RETURN_IF_ERROR(kdc_file_map_open(path, &file));
  return open_file(path, file, out);
}

kdc_status kdc_safetensors_open_mem(const char *name, const void *bytes, size_t size,
                                    kdc_safetensors **out) {
  *out = NULL;
  kdc_file_map file;
  kdc_file_map_copy(bytes, size, &file);
  return open_file(name, file, out);
}

void kdc_safetensors_close(kdc_safetensors *st) {
  if (!st) return;
  for (size_t i = 0; i < st->n; i++) free((char *)st->tensors[i].name);
  for (size_t i = 0; i < 2 * st->n_meta; i++) free(st->meta[i]);
  free(st->meta);
  free(st->tensors);
  free(st->by_name);
  kdc_file_map_close(&st->file);
  free(st->name);
  free(st);
}

size_t kdc_safetensors_count(const kdc_safetensors *st) { return st->n; }

const kdc_st_tensor *kdc_safetensors_get(const kdc_safetensors *st, size_t i) {
  return i < st->n ? &st->tensors[i] : NULL;
}

const kdc_st_tensor *kdc_safetensors_find(const kdc_safetensors *st, const char *name) {
  size_t lo = 0, hi = st->n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    int c = strcmp(st->tensors[st->by_name[mid]].name, name);
    if (c == 0) return &st->tensors[st->by_name[mid]];
    if (c < 0)
      lo = mid + 1;
    else
      hi = mid;
  }
  return NULL;
}

const char *kdc_safetensors_metadata(const kdc_safetensors *st, const char *key) {
  for (size_t i = 0; i < st->n_meta; i++)
    if (strcmp(st->meta[2 * i], key) == 0) return st->meta[2 * i + 1];
  return NULL;
}

kdc_status kdc_safetensors_copy_f32(const kdc_safetensors *st, const kdc_st_tensor *t,
                                    float *dst) {
  size_t n = t->nbytes / kdc_io_dtype_size(t->dtype);
  if (!kdc_io_convert_to_f32(t->dtype, t->data, n, dst))
    return KDC_ERR(KDC_INVALID_INPUT, "%s: tensor \"%s\": expected a floating-point tensor, "
                   "got %s", st->name, t->name, st_dtype_name(t->dtype));
  return NULL;
}

/* ---- writer ---- */

/* A JSON string as serde_json writes it. */
static void put_json_str(kdc_buf *b, const char *s) {
  kdc_buf_put_u8(b, '"');
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    const char *esc = c == '"' ? "\\\"" : c == '\\' ? "\\\\" : c == '\b' ? "\\b"
                      : c == '\f' ? "\\f" : c == '\n' ? "\\n" : c == '\r' ? "\\r"
                      : c == '\t' ? "\\t" : NULL;
    if (esc) {
      kdc_buf_put_bytes(b, esc, strlen(esc));
    } else if (c < 0x20) {
      char u[8];
      snprintf(u, sizeof u, "\\u%04x", c);
      kdc_buf_put_bytes(b, u, 6);
    } else {
      kdc_buf_put_u8(b, c);
    }
  }
  kdc_buf_put_u8(b, '"');
}

static void put_text(kdc_buf *b, const char *s) { kdc_buf_put_bytes(b, s, strlen(s)); }

/* Builds the padded header; checks names, dtypes and shapes. */
static kdc_status build_header(const char *path, const kdc_st_tensor *ts, size_t n,
                               const char *const *metadata, kdc_buf *b) {
  char num[64];
  put_text(b, "{");
  if (metadata) {
    put_text(b, "\"__metadata__\":{");
    for (size_t i = 0; metadata[i]; i += 2) {
      if (!metadata[i + 1])
        return KDC_ERR(KDC_INTERNAL, "%s: metadata key \"%s\" has no value", path, metadata[i]);
      if (i) put_text(b, ",");
      put_json_str(b, metadata[i]);
      put_text(b, ":");
      put_json_str(b, metadata[i + 1]);
    }
    put_text(b, "}");
  }
  uint64_t offset = 0;
  for (size_t i = 0; i < n; i++) {
    const kdc_st_tensor *t = &ts[i];
    if (!t->name || !*t->name || strcmp(t->name, "__metadata__") == 0)
      return KDC_ERR(KDC_INVALID_INPUT, "%s: tensor %zu: invalid name \"%s\"", path, i,
                     t->name ? t->name : "(null)");
    for (size_t j = 0; j < i; j++)
      if (strcmp(ts[j].name, t->name) == 0)
        return KDC_ERR(KDC_INVALID_INPUT, "%s: tensor \"%s\": duplicate name", path, t->name);
    if (t->rank < 0 || t->rank > KDC_IO_MAX_RANK)
      return KDC_ERR(KDC_INVALID_INPUT, "%s: tensor \"%s\": rank %d outside 0..8", path,
                     t->name, t->rank);
    if ((unsigned)t->dtype >= KDC_IO_DTYPE_COUNT)
      return KDC_ERR(KDC_INVALID_INPUT, "%s: tensor \"%s\": bad dtype", path, t->name);
    size_t nbytes;
    int bad_dim;
    if (!kdc_io_shape_bytes(t->dtype, t->rank, t->dims, &nbytes, &bad_dim))
      return KDC_ERR(KDC_INVALID_INPUT, "%s: tensor \"%s\": invalid or overflowing shape",
                     path, t->name);
    if (metadata || i) put_text(b, ",");
    put_json_str(b, t->name);
    put_text(b, ":{\"dtype\":\"");
    put_text(b, st_dtype_name(t->dtype));
    put_text(b, "\",\"shape\":[");
    for (int d = 0; d < t->rank; d++) {
      snprintf(num, sizeof num, "%s%" PRId64, d ? "," : "", t->dims[d]);
      put_text(b, num);
    }
    snprintf(num, sizeof num, "],\"data_offsets\":[%" PRIu64 ",%" PRIu64 "]}", offset,
             offset + nbytes);
    put_text(b, num);
    offset += nbytes;
  }
  put_text(b, "}");
  while (b->size % 8) kdc_buf_put_u8(b, ' ');
  return NULL;
}

kdc_status kdc_safetensors_encode(const char *name, const kdc_st_tensor *tensors, size_t n,
                                  const char *const *metadata, kdc_buf *out) {
  kdc_buf b;
  kdc_buf_init(&b);
  kdc_status err = build_header(name, tensors, n, metadata, &b);
  if (!err) {
    kdc_buf_put_u64(out, b.size);
    kdc_buf_put_bytes(out, b.data, b.size);
  }
  for (size_t i = 0; i < n && !err; i++) {
    size_t nbytes;
    int bad_dim;
    kdc_io_shape_bytes(tensors[i].dtype, tensors[i].rank, tensors[i].dims, &nbytes, &bad_dim);
    kdc_buf_put_bytes(out, tensors[i].data, nbytes);
  }
  kdc_buf_free(&b);
  return err;
}

kdc_status kdc_safetensors_write(const char *path, const kdc_st_tensor *tensors, size_t n,
                                 const char *const *metadata) {
  kdc_buf b;
  kdc_buf_init(&b);
  kdc_status err = build_header(path, tensors, n, metadata, &b);
  kdc_atomic_file *f = NULL;
  if (!err) err = kdc_atomic_file_open(path, &f);
  uint8_t len[8];
  kdc_store_le64(len, b.size);
  if (!err) err = kdc_atomic_file_write(f, len, 8);
  if (!err) err = kdc_atomic_file_write(f, b.data, b.size);
  for (size_t i = 0; i < n && !err; i++) {
    size_t nbytes;
    int bad_dim;
    kdc_io_shape_bytes(tensors[i].dtype, tensors[i].rank, tensors[i].dims, &nbytes, &bad_dim);
    err = kdc_atomic_file_write(f, tensors[i].data, nbytes);
  }
  kdc_buf_free(&b);
  if (err) {
    kdc_atomic_file_abort(f);
    return err;
  }
  return kdc_atomic_file_commit(f);
}

bool kdc_safetensors_checkpoint_optimizer(const kdc_safetensors *st, char *out, size_t n) {
  const char *fmt = kdc_safetensors_metadata(st, "format");
  if (!fmt || strcmp(fmt, "kdc-train-state") != 0 || n == 0) return false;
  for (size_t i = 0; i < kdc_safetensors_count(st); i++) {
    const kdc_st_tensor *t = kdc_safetensors_get(st, i);
    const char *slash = strchr(t->name, '/');
    if (!slash || slash == t->name || strcmp(slash, "/iteration") != 0 || t->rank != 0 ||
        t->dtype != KDC_IO_DTYPE_I32 || (size_t)(slash - t->name) >= n)
      continue;
    memcpy(out, t->name, (size_t)(slash - t->name));
    out[slash - t->name] = 0;
    return true;
  }
  return false;
}

bool kdc_safetensors_is_optimizer_tensor(const char *opt, const char *name) {
  size_t k = strlen(opt);
  return k && !strncmp(name, opt, k) && name[k] == '/';
}
