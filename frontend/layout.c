/*
 * frontend/layout.c: layout.json, the Keras LayoutMap lookup and the
 * resolution of rules into kdc_sharding records (KERAS.md 1.2-1.6, 1.10;
 * SHARDING.md 8a; docs/layout.md).
 *
 * layout.json is a Keras ModelParallel written as JSON:
 *     {"batch_dim_name": "data", "match": "fullmatch",
 *      "layout_map": {"d1/kernel": [null, "model"], "d2/output": ["data", null]}}
 * or the Keras 3.0-3.3 positional form [device_mesh, layout_map, batch_dim_name].
 * "device_mesh" is ignored (Keras pops it; the mesh comes from --mesh) and so
 * is "auto_shard_dataset"; any other key is an error.
 *
 * Parsing.  json-c (strict mode) validates the whole text first.  json-c
 * objects keep only the last of duplicate keys, so object members are then
 * walked by a small scanner over the validated text, which sees every key in
 * file order; each key and value is decoded by json-c from its own span.
 *
 * Regexes.  Each key is compiled once at load with PCRE2 (UTF + UCP, after a
 * small Python-to-PCRE2 rewrite, see py_to_pcre); a compile failure is kept
 * and reported only when a lookup reaches the regex phase, as Python's
 * re.fullmatch would raise there.  fullmatch is PCRE2_ANCHORED |
 * PCRE2_ENDANCHORED at match time, search is an unanchored match, so one
 * compiled pattern serves both modes.
 *
 * Use tracking.  A lookup that returns a rule marks it used; the layout is
 * logically const, the marks live in a side array it points to.  A layout is
 * therefore not safe to share between threads.
 */
#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "common/io.h"
#include "frontend/layout.h"
#include "kdc/arena.h"

typedef struct rule {
  const char *key;             /* the LayoutMap key, decoded */
  const char *where;           /* `layout_map["d1/kernel"]`, for messages */
  int n;                       /* entries (the TensorLayout's axes tuple) */
  const char *axes[KDC_MAX_RANK]; /* mesh axis names; NULL = None */
  pcre2_code *re;              /* NULL if the key is not a valid regex */
  const char *re_error;        /* PCRE2's message and offset when re is NULL */
} rule;

struct kdc_layout {
  kdc_arena *arena;            /* every string above */
  const char *filename;
  const char *batch_dim_name;  /* NULL: the mesh's first axis */
  kdc_layout_match match;
  rule *rules;
  size_t n_rules, cap_rules;
  bool *used;                  /* per rule: returned by a lookup (side array) */
  pcre2_match_data *md;        /* one ovector pair: we only ask "does it match" */
};

/* ---- small helpers -------------------------------------------------------- */

/* "data=2, model=4", or "none" for a mesh without axes. */
static const char *mesh_str(const kdc_mesh *m, char *buf, size_t n) {
  size_t k = 0;
  buf[0] = '\0';
  for (int i = 0; i < m->naxes && k < n; i++)
    k += (size_t)snprintf(buf + k, n - k, "%s%s=%lld", i ? ", " : "", m->names[i],
                          (long long)m->sizes[i]);
  if (m->naxes == 0) snprintf(buf, n, "none");
  return buf;
}

/* |s| as a JSON string literal (quotes, escapes) in the arena. */
static const char *quote(kdc_arena *a, const char *s) {
  json_object *j = json_object_new_string(s);
  const char *q = json_object_to_json_string_ext(j, JSON_C_TO_STRING_NOSLASHESCAPE);
  const char *r = kdc_arena_strdup(a, q);
  json_object_put(j);
  return r;
}

/* A short rendering of a JSON value for "got ..." (at most ~40 bytes). */
static const char *show_json(kdc_arena *a, json_object *v) {
  const char *s = json_object_to_json_string_ext(
      v, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE);
  if (strlen(s) <= 40) return kdc_arena_strdup(a, s);
  return kdc_arena_printf(a, "%.37s...", s);
}

static int line_of(const char *text, const char *p) {
  int line = 1;
  for (; text < p; text++) line += *text == '\n';
  return line;
}

/* ---- a scanner over validated JSON ----------------------------------------
 * json-c has already accepted the text in strict mode, so these only need to
 * find where things start and end. */

typedef struct span { const char *p, *end; } span;

static const char *skip_ws(const char *p, const char *end) {
  while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')) p++;
  return p;
}

static const char *skip_value(const char *p, const char *end) {
  int depth = 0;
  do {
    if (*p == '"' || *p == '\'') { /* see decode_key for single quotes */
      char q = *p;
      for (p++; p < end && *p != q; p++)
        if (*p == '\\') p++;
      p++;
    } else if (*p == '{' || *p == '[') {
      depth++, p++;
    } else if (*p == '}' || *p == ']') {
      depth--, p++;
    } else if (depth > 0) {
      p++;
    } else {
      while (p < end && !strchr(",]} \t\r\n", *p)) p++;
    }
  } while (depth > 0 && p < end);
  return p;
}

/* Walks the members of the object or array whose opening bracket is at |open|.
 * For arrays |key| is left empty. */
typedef struct scan {
  const char *p, *end;
  bool is_object;
} scan;

static scan scan_begin(const char *open, const char *end) {
  scan s = {skip_ws(open + 1, end), end, *open == '{'};
  return s;
}

static bool scan_next(scan *s, span *key, span *val) {
  s->p = skip_ws(s->p, s->end);
  if (s->p >= s->end || *s->p == '}' || *s->p == ']') return false;
  if (*s->p == ',') s->p = skip_ws(s->p + 1, s->end);
  key->p = key->end = NULL;
  if (s->is_object) {
    key->p = s->p;
    key->end = s->p = skip_value(s->p, s->end);
    s->p = skip_ws(s->p, s->end) + 1; /* ':' */
    s->p = skip_ws(s->p, s->end);
  }
  val->p = s->p;
  val->end = s->p = skip_value(s->p, s->end);
  return true;
}

/* json-c's value for a span of the validated text (caller puts it). */
static json_object *parse_span(span v) {
  /* With an exact length json-c cannot tell "3" from the start of "34", so
   * it gets a NUL-terminated copy. */
  size_t n = (size_t)(v.end - v.p);
  char *copy = kdc_xmalloc(n + 1);
  memcpy(copy, v.p, n);
  copy[n] = '\0';
  enum json_tokener_error err;
  json_object *j = json_tokener_parse_verbose(copy, &err);
  free(copy);
  KDC_ASSERT(err == json_tokener_success);
  return j;
}

/* The decoded text of a key span, in the arena.  Keys with NUL are refused. */
static kdc_status decode_key(kdc_layout *l, const char *text, span k, const char **out) {
  if (*k.p == '\'')  /* json-c's strict mode still takes 'single' quotes for keys */
    return KDC_ERR(KDC_INVALID_INPUT, "%s:%d: invalid JSON: a key in single quotes: %.*s",
                   l->filename, line_of(text, k.p), (int)(k.end - k.p), k.p);
  json_object *j = parse_span(k);
  const char *s = json_object_get_string(j);
  size_t n = (size_t)json_object_get_string_len(j);
  kdc_status st = NULL;
  if (strlen(s) != n)
    st = KDC_ERR(KDC_INVALID_INPUT, "%s:%d: a key contains a NUL character (\\u0000)",
                 l->filename, line_of(text, k.p));
  else
    *out = kdc_arena_strdup(l->arena, s);
  json_object_put(j);
  return st;
}

/* ---- Python regex syntax -> PCRE2 -----------------------------------------
 * Rewrites the few constructs where PCRE2 reads a realistic Python pattern
 * differently (docs/layout.md lists them): \Z -> \z, \v -> \x0b,
 * \uXXXX / \UXXXXXXXX -> \x{...}, {,n} -> {0,n}, '[' inside a class -> \[ (no
 * POSIX [:alpha:] classes in Python).  |map| gets, per output byte, the
 * offset of the input byte it came from, so PCRE2's error offsets can be
 * reported against the key as written. */
static char *py_to_pcre(kdc_arena *a, const char *src, size_t **out_map) {
  size_t n = strlen(src), k = 0;
  char *dst = kdc_arena_alloc(a, 2 * n + 16);  /* no rewrite more than doubles its input */
  size_t *map = kdc_arena_alloc(a, (2 * n + 16) * sizeof *map);
  bool in_class = false, class_first = false;
#define EMIT(str, from) \
  do { for (const char *e_ = (str); *e_; e_++) { map[k] = (from); dst[k++] = *e_; } } while (0)
  for (size_t i = 0; i < n;) {
    char c = src[i];
    if (c == '\\' && i + 1 < n) {
      char e = src[i + 1];
      size_t hex = e == 'u' ? 4 : e == 'U' ? 8 : 0, h = 0;
      while (h < hex && i + 2 + h < n && isxdigit((unsigned char)src[i + 2 + h])) h++;
      char buf[16];
      if (e == 'Z' && !in_class) {
        EMIT("\\z", i);
      } else if (e == 'v') {
        EMIT("\\x0b", i);
      } else if (hex && h == hex) {
        snprintf(buf, sizeof buf, "\\x{%.*s}", (int)hex, src + i + 2);
        EMIT(buf, i);
        i += hex;
      } else {
        snprintf(buf, sizeof buf, "\\%c", e);
        EMIT(buf, i);
      }
      i += 2;
      class_first = false;
      continue;
    }
    if (in_class) {
      if (c == ']' && !class_first) in_class = false;
      if (c == '[') EMIT("\\[", i);
      else { char one[2] = {c, 0}; EMIT(one, i); }
      class_first = false;
      i++;
      continue;
    }
    if (c == '[') {
      in_class = class_first = true;
      EMIT("[", i++);
      if (src[i] == '^') EMIT("^", i++);
      continue;
    }
    if (c == '{' && src[i + 1] == ',') {
      size_t j = i + 2;
      while (isdigit((unsigned char)src[j])) j++;
      if (src[j] == '}') {
        EMIT("{0", i);
        i++;
        continue;
      }
    }
    char one[2] = {c, 0};
    EMIT(one, i);
    i++;
  }
#undef EMIT
  map[k] = n;
  dst[k] = '\0';
  *out_map = map;
  return dst;
}

static void compile_rule(kdc_layout *l, rule *r) {
  size_t *map;
  char *pat = py_to_pcre(l->arena, r->key, &map);
  int code;
  PCRE2_SIZE off;
  r->re = pcre2_compile((PCRE2_SPTR)pat, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP, &code,
                        &off, NULL);
  if (!r->re) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(code, msg, sizeof msg);
    r->re_error = kdc_arena_printf(l->arena, "%s at offset %zu", (const char *)msg,
                                   off <= strlen(pat) ? map[off] : strlen(r->key));
  }
}

/* ---- loading -------------------------------------------------------------- */

static kdc_status parse_rule(kdc_layout *l, rule *r, json_object *v) {
  if (!json_object_is_type(v, json_type_array)) {
    const char *hint = json_object_is_type(v, json_type_string)
                           ? kdc_arena_printf(l->arena, " (write [%s])", show_json(l->arena, v))
                           : "";
    return KDC_ERR(KDC_INVALID_INPUT,
                   "%s: %s: expected an array of mesh axis names or nulls, got %s%s",
                   l->filename, r->where, v ? show_json(l->arena, v) : "null", hint);
  }
  size_t n = json_object_array_length(v);
  if (n > KDC_MAX_RANK)
    return KDC_ERR(KDC_UNSUPPORTED, "%s: %s: %zu entries; kdc tensors have at most %d dims",
                   l->filename, r->where, n, KDC_MAX_RANK);
  r->n = (int)n;
  for (size_t i = 0; i < n; i++) {
    json_object *e = json_object_array_get_idx(v, i);
    if (!e) continue; /* null: not split */
    if (json_object_is_type(e, json_type_string)) {
      r->axes[i] = kdc_arena_strdup(l->arena, json_object_get_string(e));
    } else if (json_object_is_type(e, json_type_array)) {
      return KDC_ERR(KDC_INVALID_INPUT,
                     "%s: %s[%zu]: a list of mesh axes for one dimension (JAX's multi-axis "
                     "form) is not supported; Keras's TensorLayout rejects it too, got %s",
                     l->filename, r->where, i, show_json(l->arena, e));
    } else {
      return KDC_ERR(KDC_INVALID_INPUT, "%s: %s[%zu]: expected an axis name or null, got %s",
                     l->filename, r->where, i, show_json(l->arena, e));
    }
  }
  return NULL;
}

/* The members of the layout_map object whose '{' is at |open|. */
static kdc_status parse_layout_map(kdc_layout *l, const char *text, const char *open,
                                   const char *end) {
  scan s = scan_begin(open, end);
  span k, v;
  const char **lines = NULL; /* start of each rule's key, for duplicate messages */
  size_t cap_lines = 0;
  kdc_status st = NULL;
  while (!st && scan_next(&s, &k, &v)) {
    rule r;
    memset(&r, 0, sizeof r);
    if ((st = decode_key(l, text, k, &r.key))) break;
    r.where = kdc_arena_printf(l->arena, "layout_map[%s]", quote(l->arena, r.key));
    for (size_t i = 0; i < l->n_rules && !st; i++)
      if (strcmp(l->rules[i].key, r.key) == 0)
        st = KDC_ERR(KDC_INVALID_INPUT,
                     "%s: %s: duplicate key (lines %d and %d); a Keras LayoutMap rejects a "
                     "key that already exists",
                     l->filename, r.where, line_of(text, lines[i]), line_of(text, k.p));
    if (st) break;
    json_object *jv = parse_span(v);
    st = parse_rule(l, &r, jv);
    json_object_put(jv);
    if (st) break;
    compile_rule(l, &r);
    KDC_GROW(l->rules, l->cap_rules, l->n_rules + 1);
    KDC_GROW(lines, cap_lines, l->n_rules + 1);
    lines[l->n_rules] = k.p;
    l->rules[l->n_rules++] = r;
  }
  free(lines);
  return st;
}

static kdc_status parse_batch_dim_name(kdc_layout *l, json_object *v, const char *where) {
  if (!v) return NULL;
  if (!json_object_is_type(v, json_type_string))
    return KDC_ERR(KDC_INVALID_INPUT, "%s: %s: expected a mesh axis name or null, got %s",
                   l->filename, where, show_json(l->arena, v));
  l->batch_dim_name = kdc_arena_strdup(l->arena, json_object_get_string(v));
  return NULL;
}

/* The Keras 3.4+ keyword form: a JSON object. */
static kdc_status parse_keywords(kdc_layout *l, const char *text, const char *end,
                                 json_object *root) {
  scan s = scan_begin(skip_ws(text, end), end);
  span k, v;
  const char *seen[8] = {0};
  static const char *const known[] = {"layout_map", "batch_dim_name", "match", "device_mesh",
                                      "auto_shard_dataset"};
  const char *map_open = NULL;
  while (scan_next(&s, &k, &v)) {
    const char *key;
    KDC_RETURN_IF_ERROR(decode_key(l, text, k, &key));
    size_t which = 0;
    while (which < 5 && strcmp(key, known[which]) != 0) which++;
    if (which == 5)
      return KDC_ERR(KDC_INVALID_INPUT,
                     "%s:%d: unknown key %s (expected layout_map, batch_dim_name, match, "
                     "device_mesh or auto_shard_dataset)",
                     l->filename, line_of(text, k.p), quote(l->arena, key));
    if (seen[which])
      return KDC_ERR(KDC_INVALID_INPUT, "%s: duplicate key \"%s\" (lines %d and %d)",
                     l->filename, key, line_of(text, seen[which]), line_of(text, k.p));
    seen[which] = k.p;
    if (which == 0) map_open = v.p;
  }
  if (!map_open)
    return KDC_ERR(KDC_INVALID_INPUT,
                   "%s: missing \"layout_map\" (Keras's ModelParallel requires one)",
                   l->filename);
  json_object *jm = json_object_object_get(root, "layout_map");
  if (!json_object_is_type(jm, json_type_object))
    return KDC_ERR(KDC_INVALID_INPUT, "%s: layout_map: expected an object, got %s",
                   l->filename, jm ? show_json(l->arena, jm) : "null");
  KDC_RETURN_IF_ERROR(
      parse_batch_dim_name(l, json_object_object_get(root, "batch_dim_name"), "batch_dim_name"));
  json_object *jmatch = json_object_object_get(root, "match");
  if (jmatch && !(json_object_is_type(jmatch, json_type_string) &&
                  kdc_layout_match_from_name(json_object_get_string(jmatch), &l->match)))
    return KDC_ERR(KDC_INVALID_INPUT, "%s: match: expected \"fullmatch\" or \"search\", got %s",
                   l->filename, show_json(l->arena, jmatch));
  json_object *jshard = json_object_object_get(root, "auto_shard_dataset");
  if (seen[4] && !json_object_is_type(jshard, json_type_boolean))
    return KDC_ERR(KDC_INVALID_INPUT, "%s: auto_shard_dataset: expected true or false, got %s",
                   l->filename, jshard ? show_json(l->arena, jshard) : "null");
  return parse_layout_map(l, text, map_open, end);
}

/* The Keras 3.0-3.3 positional form: [device_mesh, layout_map, batch_dim_name?]. */
static kdc_status parse_positional(kdc_layout *l, const char *text, const char *end,
                                   json_object *root) {
  size_t n = json_object_array_length(root);
  if (n < 2 || n > 3)
    return KDC_ERR(KDC_INVALID_INPUT,
                   "%s: a top-level array is the positional ModelParallel(device_mesh, "
                   "layout_map, batch_dim_name) and needs 2 or 3 elements, got %zu",
                   l->filename, n);
  json_object *jm = json_object_array_get_idx(root, 1);
  if (!json_object_is_type(jm, json_type_object))
    return KDC_ERR(KDC_INVALID_INPUT, "%s: [1] (layout_map): expected an object, got %s",
                   l->filename, jm ? show_json(l->arena, jm) : "null");
  if (n == 3)
    KDC_RETURN_IF_ERROR(
        parse_batch_dim_name(l, json_object_array_get_idx(root, 2), "[2] (batch_dim_name)"));
  scan s = scan_begin(skip_ws(text, end), end);
  span k, v;
  scan_next(&s, &k, &v);
  scan_next(&s, &k, &v);
  return parse_layout_map(l, text, v.p, end);
}

kdc_status kdc_layout_parse(const char *text, size_t len, const char *filename,
                            kdc_layout **out) {
  KDC_ASSERT(text && filename && out);
  *out = NULL;
  if (len >= (size_t)INT32_MAX)
    return KDC_ERR(KDC_UNSUPPORTED, "%s: larger than 2 GiB", filename);
  kdc_layout *l = kdc_xcalloc(1, sizeof *l);
  l->arena = kdc_arena_create();
  l->filename = kdc_arena_strdup(l->arena, filename);
  l->match = KDC_LAYOUT_MATCH_FULLMATCH;
  l->md = pcre2_match_data_create(1, NULL);
  KDC_ASSERT(l->md);

  /* A NUL-terminated copy: json-c needs the terminator to end a top-level
   * scalar, and every span below points into it. */
  char *copy = kdc_xmalloc(len + 1);
  memcpy(copy, text, len);
  copy[len] = '\0';
  text = copy;
  json_tokener *tok = json_tokener_new();
  json_tokener_set_flags(tok, JSON_TOKENER_STRICT | JSON_TOKENER_VALIDATE_UTF8);
  json_object *root = json_tokener_parse_ex(tok, text, (int)len + 1);
  enum json_tokener_error jerr = json_tokener_get_error(tok);
  size_t off = json_tokener_get_parse_end(tok);
  json_tokener_free(tok);
  const char *end = text + len;
  kdc_status st = NULL;
  if (jerr == json_tokener_continue) {
    st = KDC_ERR(KDC_INVALID_INPUT, "%s: invalid JSON: unexpected end of file", filename);
  } else if (jerr != json_tokener_success) {
    const char *at = text + off, *bol = at;
    while (bol > text && bol[-1] != '\n') bol--;
    st = KDC_ERR(KDC_INVALID_INPUT, "%s:%d:%d: invalid JSON: %s", filename, line_of(text, at),
                 (int)(at - bol) + 1, json_tokener_error_desc(jerr));
  } else if (skip_ws(text + off, end) != end) {
    st = KDC_ERR(KDC_INVALID_INPUT, "%s:%d: invalid JSON: text after the top-level value",
                 filename, line_of(text, text + off));
  } else if (json_object_is_type(root, json_type_object)) {
    st = parse_keywords(l, text, end, root);
  } else if (json_object_is_type(root, json_type_array)) {
    st = parse_positional(l, text, end, root);
  } else {
    st = KDC_ERR(KDC_INVALID_INPUT,
                 "%s: expected an object {\"layout_map\": {...}, \"batch_dim_name\": ...}",
                 filename);
  }
  json_object_put(root);
  free(copy);
  if (st) {
    kdc_layout_free(l);
    return st;
  }
  l->used = kdc_xcalloc(l->n_rules + 1, sizeof *l->used);
  *out = l;
  return NULL;
}

kdc_status kdc_layout_load(const char *path, kdc_layout **out) {
  KDC_ASSERT(path && out);
  *out = NULL;
  void *text = NULL;
  size_t len = 0;
  /* a regular file of at most KDC_JSON_MAX_BYTES (common/files.c) */
  KDC_RETURN_IF_ERROR(kdc_file_read_max(path, KDC_JSON_MAX_BYTES, "a layout file", &text, &len));
  kdc_status st = kdc_layout_parse(text, len, path, out);
  free(text);
  return st;
}

void kdc_layout_free(kdc_layout *l) {
  if (!l) return;
  for (size_t i = 0; i < l->n_rules; i++) pcre2_code_free(l->rules[i].re);
  free(l->rules);
  free(l->used);
  pcre2_match_data_free(l->md);
  kdc_arena_destroy(l->arena);
  free(l);
}

/* ---- accessors ------------------------------------------------------------ */

kdc_layout_match kdc_layout_get_match(const kdc_layout *l) { return l->match; }
void kdc_layout_set_match(kdc_layout *l, kdc_layout_match m) { l->match = m; }
const char *kdc_layout_batch_dim_name(const kdc_layout *l) { return l->batch_dim_name; }
const char *kdc_layout_filename(const kdc_layout *l) { return l->filename; }
size_t kdc_layout_rule_count(const kdc_layout *l) { return l->n_rules; }
const char *kdc_layout_rule_key(const kdc_layout *l, size_t i) {
  KDC_ASSERT(i < l->n_rules);
  return l->rules[i].key;
}

const char *kdc_layout_match_name(kdc_layout_match m) {
  return m == KDC_LAYOUT_MATCH_SEARCH ? "search" : "fullmatch";
}

bool kdc_layout_match_from_name(const char *s, kdc_layout_match *out) {
  if (strcmp(s, "fullmatch") == 0) *out = KDC_LAYOUT_MATCH_FULLMATCH;
  else if (strcmp(s, "search") == 0) *out = KDC_LAYOUT_MATCH_SEARCH;
  else return false;
  return true;
}

/* ---- lookup --------------------------------------------------------------- */

/* "variable" or "layer output", for messages (Keras outputs are "<layer>/output"). */
static const char *kind_of(const char *path) {
  size_t n = strlen(path);
  return n >= 7 && strcmp(path + n - 7, "/output") == 0 ? "layer output" : "variable";
}

kdc_status kdc_layout_lookup(const kdc_layout *l, const char *path, int *out_rule) {
  KDC_ASSERT(l && path && out_rule);
  *out_rule = -1;
  for (size_t i = 0; i < l->n_rules; i++)
    if (strcmp(l->rules[i].key, path) == 0) {
      l->used[i] = true;
      *out_rule = (int)i;
      return NULL;
    }
  uint32_t opts = l->match == KDC_LAYOUT_MATCH_FULLMATCH ? PCRE2_ANCHORED | PCRE2_ENDANCHORED : 0;
  size_t *hits = kdc_xcalloc(l->n_rules + 1, sizeof *hits), n_hits = 0;
  for (size_t i = 0; i < l->n_rules; i++) {
    const rule *r = &l->rules[i];
    if (!r->re) {
      free(hits);
      return KDC_ERR(KDC_INVALID_INPUT,
                     "%s: %s: the key is not a valid regex: %s (needed for %s \"%s\")",
                     l->filename, r->where, r->re_error, kind_of(path), path);
    }
    int rc = pcre2_match(r->re, (PCRE2_SPTR)path, strlen(path), 0, opts, l->md, NULL);
    if (rc >= 0) {
      hits[n_hits++] = i;
    } else if (rc != PCRE2_ERROR_NOMATCH) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(rc, msg, sizeof msg);
      free(hits);
      return KDC_ERR(KDC_INVALID_INPUT, "%s: %s: matching %s \"%s\" failed: %s", l->filename,
                     r->where, kind_of(path), path, (const char *)msg);
    }
  }
  if (n_hits == 1) {
    l->used[hits[0]] = true;
    *out_rule = (int)hits[0];
  }
  kdc_status st = NULL;
  if (n_hits > 1) {
    char *list = NULL;
    size_t list_len = 0;
    FILE *f = open_memstream(&list, &list_len);
    KDC_ASSERT(f);
    for (size_t i = 0; i < n_hits; i++)
      fprintf(f, "%s%s", i ? ", " : "", quote(l->arena, l->rules[hits[i]].key));
    fclose(f);
    st = KDC_ERR(KDC_INVALID_INPUT, "%s: %s \"%s\" matches multiple layout keys: %s",
                 l->filename, kind_of(path), path, list);
    free(list);
  }
  free(hits);
  return st;
}

/* ---- checks and resolution ------------------------------------------------ */

/* Maps rule |r|'s axis names to mesh axis indices (-1 for None). */
static kdc_status check_rule(const kdc_layout *l, const rule *r, const kdc_mesh *mesh,
                             int *idx) {
  char buf[400];
  for (int d = 0; d < r->n; d++) {
    idx[d] = -1;
    if (!r->axes[d]) continue;
    idx[d] = kdc_mesh_axis_index(mesh, r->axes[d]);
    if (idx[d] < 0)
      return KDC_ERR(KDC_INVALID_INPUT, "%s: %s[%d]: %s is not an axis of the mesh (%s)",
                     l->filename, r->where, d, quote(l->arena, r->axes[d]),
                     mesh_str(mesh, buf, sizeof buf));
    for (int e = 0; e < d; e++)
      if (idx[e] == idx[d])
        return KDC_ERR(KDC_INVALID_INPUT,
                       "%s: %s: mesh axis \"%s\" splits both dim %d and dim %d; an axis can "
                       "split only one dim of a tensor",
                       l->filename, r->where, r->axes[d], e, d);
  }
  return NULL;
}

kdc_status kdc_layout_check(const kdc_layout *l, const kdc_mesh *mesh) {
  KDC_ASSERT(l && mesh);
  char buf[400];
  if (l->batch_dim_name && kdc_mesh_axis_index(mesh, l->batch_dim_name) < 0)
    return KDC_ERR(KDC_INVALID_INPUT, "%s: batch_dim_name: %s is not an axis of the mesh (%s)",
                   l->filename, quote(l->arena, l->batch_dim_name),
                   mesh_str(mesh, buf, sizeof buf));
  int idx[KDC_MAX_RANK];
  for (size_t i = 0; i < l->n_rules; i++)
    KDC_RETURN_IF_ERROR(check_rule(l, &l->rules[i], mesh, idx));
  return NULL;
}

static void replicated(int rank, kdc_sharding *out) {
  memset(out, 0, sizeof *out);
  out->present = true;
  out->rank = (uint8_t)rank;
}

static const char *shape_str(int rank, const int64_t *dims, char *buf, size_t n) {
  size_t k = (size_t)snprintf(buf, n, "[");
  for (int d = 0; d < rank && k < n; d++)
    k += (size_t)snprintf(buf + k, n - k, "%s%lld", d ? "," : "", (long long)dims[d]);
  if (k < n) snprintf(buf + k, n - k, "]");
  return buf;
}

kdc_status kdc_layout_resolve(const kdc_layout *l, const kdc_mesh *mesh, const char *path,
                              int rank, const int64_t *dims, kdc_sharding *out,
                              bool *out_found) {
  KDC_ASSERT(mesh && path && out && out_found && rank >= 0 && (dims || rank == 0));
  *out_found = false;
  memset(out, 0, sizeof *out);
  if (rank > KDC_MAX_RANK)
    return KDC_ERR(KDC_UNSUPPORTED, "%s \"%s\" has rank %d; kdc supports at most %d dims",
                   kind_of(path), path, rank, KDC_MAX_RANK);
  int which = -1;
  if (l) KDC_RETURN_IF_ERROR(kdc_layout_lookup(l, path, &which));
  replicated(rank, out);
  if (which < 0) return NULL;
  const rule *r = &l->rules[which];
  char buf[400];
  if (r->n > rank)
    return KDC_ERR(KDC_INVALID_INPUT, "%s: %s: %d entries for %s \"%s\" of rank %d (shape %s)",
                   l->filename, r->where, r->n, kind_of(path), path, rank,
                   shape_str(rank, dims, buf, sizeof buf));
  int idx[KDC_MAX_RANK];
  KDC_RETURN_IF_ERROR(check_rule(l, r, mesh, idx));
  for (int d = 0; d < r->n; d++) {
    if (idx[d] < 0) continue;
    int64_t size = mesh->sizes[idx[d]];
    if (dims[d] < 0)
      return KDC_ERR(KDC_INVALID_INPUT, "%s: %s: dim %d of \"%s\" has an unknown size",
                     l->filename, r->where, d, path);
    if (dims[d] % size != 0)
      return KDC_ERR(KDC_INVALID_INPUT,
                     "%s: %s: dim %d of \"%s\" (size %lld) is not divisible by mesh axis \"%s\" "
                     "(size %lld)",
                     l->filename, r->where, d, path, (long long)dims[d], r->axes[d],
                     (long long)size);
    out->naxes[d] = 1;
    out->axes[d][0] = (uint8_t)idx[d];
  }
  *out_found = true;
  return NULL;
}

kdc_status kdc_layout_data_sharding(const kdc_layout *l, const kdc_mesh *mesh,
                                    const char *input_name, int rank, const int64_t *dims,
                                    kdc_sharding *out) {
  KDC_ASSERT(mesh && input_name && out && rank >= 0 && (dims || rank == 0));
  memset(out, 0, sizeof *out);
  char buf[400];
  if (rank == 0)
    return KDC_ERR(KDC_INVALID_INPUT, "input \"%s\" is a scalar: it has no batch dim to split",
                   input_name);
  if (rank > KDC_MAX_RANK)
    return KDC_ERR(KDC_UNSUPPORTED, "input \"%s\" has rank %d; kdc supports at most %d dims",
                   input_name, rank, KDC_MAX_RANK);
  replicated(rank, out);
  if (mesh->naxes == 0) return NULL;
  int64_t shards = 1;
  if (l) {
    int a = 0;
    if (l->batch_dim_name) {
      a = kdc_mesh_axis_index(mesh, l->batch_dim_name);
      if (a < 0)
        return KDC_ERR(KDC_INVALID_INPUT, "%s: batch_dim_name: %s is not an axis of the mesh (%s)",
                       l->filename, quote(l->arena, l->batch_dim_name),
                       mesh_str(mesh, buf, sizeof buf));
    }
    out->naxes[0] = 1;
    out->axes[0][0] = (uint8_t)a;
    shards = mesh->sizes[a];
  } else {
    if (mesh->naxes > KDC_MAX_AXES_PER_DIM)
      return KDC_ERR(KDC_UNSUPPORTED,
                     "data parallelism over a %d-axis mesh: kdc splits one dim over at most %d "
                     "axes (give a layout file with batch_dim_name)",
                     mesh->naxes, KDC_MAX_AXES_PER_DIM);
    out->naxes[0] = (uint8_t)mesh->naxes;
    for (int a = 0; a < mesh->naxes; a++) {
      out->axes[0][a] = (uint8_t)a;
      shards *= mesh->sizes[a];
    }
  }
  if (dims[0] < 0)
    return KDC_ERR(KDC_INVALID_INPUT, "input \"%s\": the batch size is unknown", input_name);
  if (dims[0] % shards != 0) {
    const char *how = l ? kdc_arena_printf(l->arena, "mesh axis \"%s\"",
                                           mesh->names[out->axes[0][0]])
                        : "all mesh axes (DataParallel)";
    return KDC_ERR(KDC_INVALID_INPUT,
                   "%s%sinput \"%s\": batch size %lld is not divisible by the %lld data shards "
                   "of %s; mesh %s",
                   l ? l->filename : "", l ? ": " : "", input_name, (long long)dims[0],
                   (long long)shards, how, mesh_str(mesh, buf, sizeof buf));
  }
  return NULL;
}

size_t kdc_layout_report_unmatched(const kdc_layout *l, FILE *warn) {
  size_t n = 0;
  for (size_t i = 0; i < l->n_rules; i++)
    if (!l->used[i]) {
      fprintf(warn, "%s: warning: %s matches no variable or layer output\n", l->filename,
              l->rules[i].where);
      n++;
    }
  return n;
}
