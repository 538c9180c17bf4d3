/*
 * Parser of the canonical IR text (see ir/print.c for the grammar by
 * example).  A hand-written lexer feeds a recursive-descent parser; the
 * first error stops parsing and becomes one KDC_INVALID_INPUT status
 *     file:line:col: error: expected ..., got '...'
 * (columns count bytes from 1).  The parser checks syntax, names and
 * references: unknown ops and attributes, wrong arity, use of a value before
 * its definition, redefinitions, parameter indices.  It does not check types:
 * run kdc_ir_verify_module on the result.
 *
 * Value names are `%` followed by [A-Za-z0-9_.]+; the printer uses the node
 * index (`%7`), hand-written text may use any name (`%x`): ids are assigned
 * in definition order, so printing renumbers.  `#` starts a comment that
 * runs to the end of the line.  Numbers are read with strtod/strtof and so
 * assume the "C" locale.
 */
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/ir.h"

typedef enum { T_EOF, T_IDENT, T_VALUE, T_GLOBAL, T_STRING, T_NUMBER, T_PUNCT } tkind;

typedef struct token {
  tkind k;
  size_t off, len; /* bytes of the source */
} token;

/* One slot of the per-function symbol table (open addressing). */
typedef struct sym {
  size_t off, len; /* the name's bytes in the source, after '%' */
  kdc_value_id id;
  bool used;
} sym;

typedef struct parser {
  const char *src, *file;
  size_t pos;             /* lexer cursor: first byte after |tok| */
  token tok;              /* current token */
  kdc_status err;         /* first error */
  kdc_module *m;
  sym *tab;               /* symbols of the current function */
  size_t cap_tab, n_sym;
  size_t *node_off;       /* source offset of each node of the current function */
  size_t cap_node_off;
} parser;

/* ---- errors -------------------------------------------------------------- */

static bool error_at(parser *p, size_t off, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static bool error_at(parser *p, size_t off, const char *fmt, ...) {
  if (p->err) return false;
  int line = 1;
  size_t bol = 0;
  for (size_t i = 0; i < off && p->src[i]; i++)
    if (p->src[i] == '\n') {
      line++;
      bol = i + 1;
    }
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  p->err = KDC_ERR(KDC_INVALID_INPUT, "%s:%d:%zu: error: %s", p->file, line, off - bol + 1, msg);
  return false;
}

/* The current token, quoted for messages. */
static const char *describe(parser *p, char *buf, size_t n) {
  if (p->tok.k == T_EOF) return "end of input";
  size_t len = p->tok.len < 24 ? p->tok.len : 24;
  snprintf(buf, n, "'%.*s%s'", (int)len, p->src + p->tok.off, len < p->tok.len ? "..." : "");
  return buf;
}

static bool expected(parser *p, const char *what) {
  char buf[64];
  return error_at(p, p->tok.off, "expected %s, got %s", what, describe(p, buf, sizeof buf));
}

/* ---- lexer --------------------------------------------------------------- */

static bool id_start(char c) { return isalpha((unsigned char)c) || c == '_'; }
static bool id_char(char c) { return isalnum((unsigned char)c) || c == '_' || c == '.'; }
static int hexval(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

/* Decodes the string literal at |s| (its opening quote) into |out| (NULL to
 * only validate); returns the length of the literal including quotes, or 0
 * after reporting an error. */
static size_t string_lit(parser *p, size_t s, char *out) {
  size_t i = s + 1, o = 0;
  for (;;) {
    char c = p->src[i];
    if (c == '"') break;
    if (c == 0 || c == '\n') return error_at(p, s, "unterminated string"), 0;
    if (c != '\\') {
      if (out) out[o] = c;
      o++, i++;
      continue;
    }
    char e = p->src[i + 1];
    if (e == '"' || e == '\\') c = e;
    else if (e == 'n') c = '\n';
    else if (e == 't') c = '\t';
    else if (e == 'x' && hexval(p->src[i + 2]) >= 0 && hexval(p->src[i + 3]) >= 0) {
      c = (char)(hexval(p->src[i + 2]) * 16 + hexval(p->src[i + 3]));
      if (c == 0) return error_at(p, i, "\\x00 is not allowed in a string"), 0;
      i += 2;
    } else
      return error_at(p, i, "unknown escape in string (use \\\" \\\\ \\n \\t \\xHH)"), 0;
    if (out) out[o] = c;
    o++, i += 2;
  }
  if (out) out[o] = 0;
  return i + 1 - s;
}

static void skip_space(parser *p) {
  for (;;) {
    char c = p->src[p->pos];
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r') p->pos++;
    else if (c == '#')
      while (p->src[p->pos] && p->src[p->pos] != '\n') p->pos++;
    else return;
  }
}

/* Reads the next token into p->tok. */
static bool next(parser *p) {
  skip_space(p);
  const char *s = p->src + p->pos;
  token t = {T_EOF, p->pos, 0};
  size_t n = 0;
  bool sign = (s[0] == '-' || s[0] == '+') &&
              (isdigit((unsigned char)s[1]) || s[1] == '.' || s[1] == 'i' || s[1] == 'n');
  if (!*s) {
  } else if (id_start(*s)) {
    while (id_char(s[n])) n++;
    t.k = T_IDENT;
  } else if (*s == '%' || (*s == '@' && s[1] != '"')) {
    for (n = 1; id_char(s[n]); n++) {}
    if (n == 1) return error_at(p, p->pos, "expected a name after '%c'", *s);
    t.k = *s == '%' ? T_VALUE : T_GLOBAL;
  } else if (*s == '"' || *s == '@') {
    size_t q = *s == '@';
    n = string_lit(p, p->pos + q, NULL);
    if (!n) return false;
    n += q;
    t.k = q ? T_GLOBAL : T_STRING;
  } else if (isdigit((unsigned char)*s) || sign || (*s == '.' && isdigit((unsigned char)s[1]))) {
    char *end;
    strtod(s, &end);
    if (end == s) return error_at(p, p->pos, "malformed number");
    n = (size_t)(end - s);
    t.k = T_NUMBER;
  } else if (strchr("=,:[](){}", *s)) {
    n = 1;
    t.k = T_PUNCT;
  } else if (isprint((unsigned char)*s)) {
    return error_at(p, p->pos, "unexpected character '%c'", *s);
  } else {
    return error_at(p, p->pos, "unexpected byte 0x%02x", (unsigned char)*s);
  }
  t.len = n;
  p->tok = t;
  p->pos += n;
  return true;
}

static bool is_punct(parser *p, char c) { return p->tok.k == T_PUNCT && p->src[p->tok.off] == c; }

static bool is_word(parser *p, const char *w) {
  size_t n = strlen(w);
  return p->tok.k == T_IDENT && p->tok.len == n && memcmp(p->src + p->tok.off, w, n) == 0;
}

static bool accept(parser *p, char c) { return is_punct(p, c) && next(p); }

static bool expect(parser *p, char c) {
  char what[8] = {'\'', c, '\'', 0};
  if (!is_punct(p, c)) return expected(p, what);
  return next(p);
}

/* Copies the token text into |buf|; false if it does not fit. */
static bool tok_text(parser *p, char *buf, size_t n) {
  if (p->tok.len >= n) return false;
  memcpy(buf, p->src + p->tok.off, p->tok.len);
  buf[p->tok.len] = 0;
  return true;
}

/* The decoded text of a string token, in the module's arena. */
static char *str_value(parser *p, const token *t) {
  char *out = kdc_arena_alloc(p->m->arena, t->len + 1);
  string_lit(p, t->off, out);
  return out;
}

/* The name of a T_GLOBAL token (@name or @"name"), malloc'd. */
static char *global_name(parser *p, const token *t) {
  char *out = kdc_xmalloc(t->len);
  if (p->src[t->off + 1] == '"') {
    string_lit(p, t->off + 1, out);
  } else {
    memcpy(out, p->src + t->off + 1, t->len - 1);
    out[t->len - 1] = 0;
  }
  return out;
}

/* ---- small grammar pieces ------------------------------------------------- */

static bool parse_int(parser *p, int64_t *out, const char *what) {
  char buf[32];
  const char *s = p->src + p->tok.off;
  size_t digits = (*s == '-');
  while (digits < p->tok.len && isdigit((unsigned char)s[digits])) digits++;
  if (p->tok.k != T_NUMBER || digits != p->tok.len || !tok_text(p, buf, sizeof buf))
    return expected(p, what);
  errno = 0;
  long long v = strtoll(buf, NULL, 10);
  if (errno == ERANGE) return error_at(p, p->tok.off, "integer out of range");
  *out = v;
  return next(p);
}

static bool parse_list(parser *p, kdc_dimlist *out) {
  out->n = 0;
  if (!expect(p, '[')) return false;
  if (accept(p, ']')) return true;
  do {
    if (out->n == KDC_MAX_RANK)
      return error_at(p, p->tok.off, "more than %d entries in a list", KDC_MAX_RANK);
    if (!parse_int(p, &out->v[out->n++], "an integer")) return false;
  } while (accept(p, ','));
  return expect(p, ']');
}

static bool parse_type(parser *p, kdc_type *t) {
  char name[16];
  memset(t, 0, sizeof *t);
  if (p->tok.k != T_IDENT || !tok_text(p, name, sizeof name) ||
      !kdc_dtype_from_name(name, &t->dtype))
    return expected(p, "a type such as f32[2,3]");
  if (!next(p) || !expect(p, '[')) return false;
  int64_t numel = 8;
  size_t at = p->tok.off;
  if (!is_punct(p, ']')) {
    do {
      if (t->rank == KDC_MAX_RANK)
        return error_at(p, p->tok.off, "rank exceeds the maximum of %d", KDC_MAX_RANK);
      size_t d_at = p->tok.off;
      if (!parse_int(p, &t->dims[t->rank], "a dimension size")) return false;
      if (t->dims[t->rank] < 0) return error_at(p, d_at, "negative dimension size");
      if (__builtin_mul_overflow(numel, t->dims[t->rank], &numel))
        return error_at(p, at, "type is too large");
      t->rank++;
    } while (accept(p, ','));
  }
  return expect(p, ']');
}

/* ---- symbols -------------------------------------------------------------- */

static size_t sym_hash(const char *s, size_t n) {
  size_t h = 14695981039346656037ull;
  for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
  return h;
}

/* The slot of name |t| (a T_VALUE token, '%' excluded) or the empty slot for it. */
static sym *sym_slot(parser *p, const token *t) {
  const char *s = p->src + t->off + 1;
  size_t n = t->len - 1;
  for (size_t i = sym_hash(s, n) & (p->cap_tab - 1);; i = (i + 1) & (p->cap_tab - 1)) {
    sym *e = &p->tab[i];
    if (!e->used || (e->len == n && memcmp(p->src + e->off, s, n) == 0)) return e;
  }
}

static void sym_define(parser *p, const token *t, kdc_value_id id) {
  if (2 * (p->n_sym + 1) > p->cap_tab) {
    sym *old = p->tab;
    size_t oldcap = p->cap_tab;
    p->cap_tab = oldcap ? 2 * oldcap : 64;
    p->tab = kdc_xcalloc(p->cap_tab, sizeof *p->tab);
    for (size_t i = 0; i < oldcap; i++)
      if (old[i].used) {
        token ot = {T_VALUE, old[i].off - 1, old[i].len + 1};
        *sym_slot(p, &ot) = old[i];
      }
    free(old);
  }
  sym *e = sym_slot(p, t);
  *e = (sym){t->off + 1, t->len - 1, id, true};
  p->n_sym++;
}

static bool sym_lookup(parser *p, const token *t, kdc_value_id *out) {
  if (!p->cap_tab) return false;
  sym *e = sym_slot(p, t);
  if (!e->used) return false;
  *out = e->id;
  return true;
}

/* ---- nodes --------------------------------------------------------------- */

/* Converts one constant element token to dtype |d| at |dst|. */
static bool const_elem(parser *p, const token *t, kdc_dtype d, void *dst) {
  char buf[128];
  token saved = p->tok;
  p->tok = *t;
  bool ok = tok_text(p, buf, sizeof buf);
  char *end = buf;
  p->tok = saved;
  if (ok && kdc_dtype_is_float(d) && (t->k == T_NUMBER || t->k == T_IDENT)) {
    float x = strtof(buf, &end); /* bf16/f16: rounded from the f32 (exact when printed) */
    kdc_float_store(dst, d, 0, x);
    if (*end == 0 && end != buf) return true;
  } else if (ok && d == KDC_DTYPE_BOOL) {
    bool one = !strcmp(buf, "1") || !strcmp(buf, "true");
    if (one || !strcmp(buf, "0") || !strcmp(buf, "false")) {
      *(uint8_t *)dst = one;
      return true;
    }
  } else if (ok && t->k == T_NUMBER) {
    errno = 0;
    long long v = strtoll(buf, &end, 10);
    if (*end == 0 && end != buf && errno != ERANGE) {
      if (d == KDC_DTYPE_I64) return *(int64_t *)dst = v, true;
      if (v >= INT32_MIN && v <= INT32_MAX) return *(int32_t *)dst = (int32_t)v, true;
    }
  }
  return error_at(p, t->off, "expected a %s literal, got '%.*s'", kdc_dtype_name(d),
                  (int)(t->len < 24 ? t->len : 24), p->src + t->off);
}

typedef struct literal {
  bool splat;
  size_t at;            /* offset of the literal, for errors */
  token *elems;         /* heap */
  size_t n, cap;
} literal;

static bool parse_literal(parser *p, literal *lit) {
  lit->at = p->tok.off;
  lit->splat = !is_punct(p, '[');
  if (!lit->splat && (!next(p) || accept(p, ']'))) return !p->err;
  do {
    if (p->tok.k != T_NUMBER && p->tok.k != T_IDENT) return expected(p, "a constant element");
    KDC_GROW(lit->elems, lit->cap, lit->n + 1);
    lit->elems[lit->n++] = p->tok;
    if (!next(p)) return false;
  } while (!lit->splat && accept(p, ','));
  return lit->splat || expect(p, ']');
}

static bool fill_constant(parser *p, const literal *lit, const kdc_type *t, kdc_attrs *a) {
  int64_t numel = kdc_type_numel(t);
  size_t es = kdc_dtype_size(t->dtype);
  if (!lit->splat && (int64_t)lit->n != numel)
    return error_at(p, lit->at, "constant has %zu elements, its type needs %lld", lit->n,
                    (long long)numel);
  a->constant.splat = lit->splat;
  a->constant.data = kdc_arena_alloc(p->m->arena, es * (lit->n ? lit->n : 1));
  for (size_t i = 0; i < lit->n; i++)
    if (!const_elem(p, &lit->elems[i], t->dtype, (char *)a->constant.data + i * es)) return false;
  return true;
}

/* `[axis, ...]` of an SPMD op: mesh axis names, distinct. */
static bool parse_axes(parser *p, kdc_attr_coll *c) {
  char w[32];
  if (!expect(p, '[')) return false;
  if (accept(p, ']')) return true;
  do {
    int ax;
    if (c->naxes == KDC_MAX_MESH_AXES)
      return error_at(p, p->tok.off, "more than %d mesh axes", KDC_MAX_MESH_AXES);
    if (p->tok.k != T_IDENT || !tok_text(p, w, sizeof w)) return expected(p, "a mesh axis name");
    if ((ax = kdc_mesh_axis_index(&p->m->mesh, w)) < 0)
      return error_at(p, p->tok.off, "unknown mesh axis '%s'", w);
    for (int i = 0; i < c->naxes; i++)
      if (c->axes[i] == ax) return error_at(p, p->tok.off, "mesh axis '%s' listed twice", w);
    c->axes[c->naxes++] = (uint8_t)ax;
    if (!next(p)) return false;
  } while (accept(p, ','));
  return expect(p, ']');
}

/* The words between the op name and the operands (see ir/print.c). */
static bool parse_prefix(parser *p, kdc_op op, kdc_attrs *a, literal *lit) {
  char w[16];
  int64_t v;
  if ((kdc_op_flags(op) & OPF_COLL) && op != KDC_OP_SHARDING_CONSTRAINT)
    return parse_axes(p, &a->coll);
  switch (op) {
  case KDC_OP_PARAMETER:
    if (!parse_int(p, &v, "a parameter index")) return false;
    if (v < 0 || v > INT32_MAX) return error_at(p, p->tok.off, "parameter index out of range");
    a->param.index = (int)v;
    if (p->tok.k != T_IDENT || !tok_text(p, w, sizeof w) ||
        !kdc_param_kind_from_name(w, &a->param.kind))
      return expected(p, "a parameter kind (input, label, weight, state)");
    if (!next(p)) return false;
    if (p->tok.k == T_STRING) {
      a->param.name = str_value(p, &p->tok);
      if (!next(p)) return false;
    }
    if (p->tok.k == T_IDENT && tok_text(p, w, sizeof w) && !strcmp(w, "gate_packed")) {
      a->param.gate_packed = true;
      return next(p);
    }
    return true;
  case KDC_OP_CONSTANT: return parse_literal(p, lit);
  case KDC_OP_COMPARE:
    if (p->tok.k != T_IDENT || !tok_text(p, w, sizeof w) || !kdc_cmp_from_name(w, &a->cmp))
      return expected(p, "a comparison (eq, ne, lt, le, gt, ge)");
    return next(p);
  case KDC_OP_REDUCE:
    if (p->tok.k != T_IDENT || !tok_text(p, w, sizeof w) ||
        !kdc_reduce_kind_from_name(w, &a->reduce.kind))
      return expected(p, "a reduction (sum, max, min, prod)");
    return next(p);
  case KDC_OP_REDUCE_WINDOW:
  case KDC_OP_SELECT_AND_SCATTER:
    if (p->tok.k != T_IDENT || !tok_text(p, w, sizeof w) ||
        !kdc_reduce_kind_from_name(w, &a->window.kind))
      return expected(p, "a reduction (sum, max, min)");
    return next(p);
  case KDC_OP_SCAN: { /* the body may be defined later: the verifier resolves it */
    if (p->tok.k != T_GLOBAL) return expected(p, "the scan body, a function name such as @body");
    char *name = global_name(p, &p->tok);
    a->scan.body = kdc_arena_strdup(p->m->arena, name);
    free(name);
    return next(p);
  }
  default: return true;
  }
}

/* `kw=...` attributes up to the ':' before the type. */
static bool parse_kws(parser *p, kdc_op op, kdc_attrs *a) {
  uint64_t seen = 0; /* bit i: kdc_ir_attr_kws[i] (the table has < 64 rows) */
  KDC_ASSERT(kdc_ir_n_attr_kws <= 64);
  char w[32];
  while (p->tok.k == T_IDENT) {
    size_t i = 0;
    bool ok = tok_text(p, w, sizeof w);
    for (; ok && i < kdc_ir_n_attr_kws; i++)
      if (kdc_ir_attr_kws[i].op == op && !strcmp(kdc_ir_attr_kws[i].kw, w)) break;
    if (!ok || i == kdc_ir_n_attr_kws)
      return error_at(p, p->tok.off, "unknown attribute '%.*s' for %s", (int)p->tok.len,
                      p->src + p->tok.off, kdc_op_name(op));
    if (seen & (1ull << i)) return error_at(p, p->tok.off, "attribute '%s' given twice", w);
    seen |= 1ull << i;
    const kdc_attr_kw *k = &kdc_ir_attr_kws[i];
    char *field = (char *)a + k->offset;
    if (!next(p) || !expect(p, '=')) return false;
    if (!(k->scalar ? parse_int(p, (int64_t *)field, "an integer")
                    : parse_list(p, (kdc_dimlist *)field)))
      return false;
  }
  for (size_t i = 0; i < kdc_ir_n_attr_kws; i++) {
    const kdc_attr_kw *k = &kdc_ir_attr_kws[i];
    if (k->op == op && !k->optional && !(seen & (1ull << i)))
      return error_at(p, p->tok.off, "missing attribute '%s' for %s", k->kw, kdc_op_name(op));
  }
  return true;
}

/* After the type: sharding, group=, mem=, loc "...", each at most once. */
static bool parse_trailer(parser *p, kdc_node *n) {
  bool sh = false, grp = false, mem = false, loc = false;
  for (;;) {
    size_t at = p->tok.off;
    int64_t v;
    if (is_punct(p, '{') && !sh) {
      const char *end;
      kdc_status st = kdc_sharding_parse(p->src + at, &p->m->mesh, &n->sharding, &end);
      if (st) {
        error_at(p, (size_t)(end - p->src), "%s", kdc_status_message(st));
        kdc_status_free(st);
        return false;
      }
      p->pos = (size_t)(end - p->src);
      sh = true;
      if (!next(p)) return false;
    } else if ((is_word(p, "group") && !grp) || (is_word(p, "mem") && !mem)) {
      bool g = is_word(p, "group");
      if (!next(p) || !expect(p, '=') || !parse_int(p, &v, "a non-negative integer")) return false;
      if (v < 0 || (g && v > INT32_MAX))
        return error_at(p, at, "%s out of range", g ? "group" : "mem");
      if (g) n->group = (int32_t)v, grp = true;
      else n->mem_offset = v, mem = true;
    } else if (is_word(p, "loc") && !loc) {
      if (!next(p)) return false;
      if (p->tok.k != T_STRING) return expected(p, "a quoted location");
      n->origin = str_value(p, &p->tok);
      loc = true;
      if (!next(p)) return false;
    } else {
      return true;
    }
  }
}

static bool parse_node(parser *p, kdc_func *f) {
  token name = p->tok;
  kdc_value_id id;
  if (sym_lookup(p, &name, &id))
    return error_at(p, name.off, "redefinition of %.*s (first defined as %%%u)", (int)name.len,
                    p->src + name.off, id);
  if (!next(p) || !expect(p, '=')) return false;
  char opname[32];
  kdc_op op;
  size_t op_at = p->tok.off;
  if (p->tok.k != T_IDENT) return expected(p, "an op name");
  if (!tok_text(p, opname, sizeof opname) || !kdc_op_from_name(opname, &op))
    return error_at(p, op_at, "unknown op '%.*s'", (int)p->tok.len, p->src + p->tok.off);
  kdc_attrs a;
  memset(&a, 0, sizeof a);
  literal lit = {0};
  kdc_value_id *ins = NULL;
  size_t n_in = 0, cap_in = 0;
  kdc_type t;
  bool ok = next(p) && parse_prefix(p, op, &a, &lit);
  while (ok && p->tok.k == T_VALUE) {
    KDC_GROW(ins, cap_in, n_in + 1);
    if (!sym_lookup(p, &p->tok, &ins[n_in++]))
      ok = error_at(p, p->tok.off, "use of undefined value %.*s", (int)p->tok.len,
                    p->src + p->tok.off);
    else if (!next(p) || !is_punct(p, ','))
      break;
    else if (!next(p) || (p->tok.k != T_VALUE && !expected(p, "a value")))
      ok = false;
  }
  ok = ok && !p->err;
  int ar = kdc_op_arity(op);
  if (ok && ((ar >= 0 && (int)n_in != ar) || (ar < 0 && n_in < 1)))
    ok = error_at(p, op_at, "%s takes %s%d operand%s, got %zu", opname, ar < 0 ? "at least " : "",
                  ar < 0 ? 1 : ar, ar == 1 || ar < 0 ? "" : "s", n_in);
  ok = ok && parse_kws(p, op, &a) && expect(p, ':') && parse_type(p, &t);
  if (ok && op == KDC_OP_CONSTANT) ok = fill_constant(p, &lit, &t, &a);
  free(lit.elems);
  if (!ok) {
    free(ins);
    return false;
  }
  /* The index is restored after kdc_ir_append so that a huge index cannot make
   * it grow f->params; parse_func checks indices and rebuilds f->params. */
  int pindex = a.param.index;
  if (op == KDC_OP_PARAMETER) a.param.index = -1;
  id = kdc_ir_append(f, op, &t, (int)n_in, ins, &a);
  free(ins);
  kdc_node *n = &f->nodes[id];
  n->attr.param.index = pindex;
  KDC_GROW(p->node_off, p->cap_node_off, f->n_nodes);
  p->node_off[id] = name.off;
  sym_define(p, &name, id);
  return parse_trailer(p, n);
}

static bool parse_return(parser *p, kdc_func *f) {
  if (!next(p)) return false;
  while (p->tok.k == T_VALUE) {
    kdc_value_id v;
    if (!sym_lookup(p, &p->tok, &v))
      return error_at(p, p->tok.off, "use of undefined value %.*s", (int)p->tok.len,
                      p->src + p->tok.off);
    if (!next(p)) return false;
    const char *rname = NULL;
    if (p->tok.k == T_STRING) {
      rname = str_value(p, &p->tok);
      if (!next(p)) return false;
    }
    kdc_ir_add_result(f, v, rname);
    if (accept(p, ',') && p->tok.k != T_VALUE) return expected(p, "a value");
  }
  return !p->err;
}

/* Checks parameter indices are 0..n-1, each once, and rebuilds f->params. */
static bool fix_params(parser *p, kdc_func *f) {
  size_t np = 0;
  for (size_t i = 0; i < f->n_nodes; i++) np += f->nodes[i].op == KDC_OP_PARAMETER;
  KDC_GROW(f->params, f->cap_params, np);
  for (size_t i = 0; i < np; i++) f->params[i] = KDC_NO_VALUE;
  f->n_params = np;
  for (size_t i = 0; i < f->n_nodes; i++) {
    if (f->nodes[i].op != KDC_OP_PARAMETER) continue;
    size_t idx = (size_t)f->nodes[i].attr.param.index;
    if (idx >= np)
      return error_at(p, p->node_off[i], "parameter index %zu out of range (%zu parameters)", idx,
                      np);
    if (f->params[idx] != KDC_NO_VALUE)
      return error_at(p, p->node_off[i], "parameter index %zu already used by %%%u", idx,
                      f->params[idx]);
    f->params[idx] = (kdc_value_id)i;
  }
  return true;
}

static bool parse_func(parser *p) {
  size_t at = p->tok.off;
  if (!next(p)) return false;
  if (p->tok.k != T_GLOBAL) return expected(p, "a function name such as @predict");
  char *name = global_name(p, &p->tok);
  bool dup = kdc_ir_module_find_func(p->m, name) != NULL;
  if (dup) error_at(p, at, "function @%s defined twice", name);
  kdc_func *f = dup ? NULL : kdc_ir_func_create(p->m, name);
  free(name);
  if (dup || !next(p) || !expect(p, '{')) return false;
  if (p->cap_tab) memset(p->tab, 0, p->cap_tab * sizeof *p->tab);
  p->n_sym = 0;
  for (;;) {
    if (p->tok.k == T_VALUE) {
      if (!parse_node(p, f)) return false;
    } else if (is_word(p, "return")) {
      if (!parse_return(p, f)) return false;
      break;
    } else {
      return expected(p, "a definition '%N = ...' or 'return'");
    }
  }
  return expect(p, '}') && fix_params(p, f);
}

static bool parse_mesh(parser *p) {
  size_t at = p->tok.off;
  kdc_mesh *mesh = &p->m->mesh;
  if (!next(p) || !expect(p, '[')) return false;
  do {
    if (mesh->naxes == KDC_MAX_MESH_AXES)
      return error_at(p, p->tok.off, "more than %d mesh axes", KDC_MAX_MESH_AXES);
    if (p->tok.k != T_IDENT || !tok_text(p, mesh->names[mesh->naxes], sizeof mesh->names[0]))
      return expected(p, "a mesh axis name");
    if (!next(p) || !expect(p, '=') || !parse_int(p, &mesh->sizes[mesh->naxes++], "an axis size"))
      return false;
  } while (accept(p, ','));
  if (!expect(p, ']')) return false;
  kdc_status st = kdc_mesh_check(mesh);
  if (!st) return true;
  error_at(p, at, "%s", kdc_status_message(st));
  kdc_status_free(st);
  return false;
}

static bool parse_weight(parser *p) {
  size_t at = p->tok.off;
  kdc_type t;
  if (!next(p)) return false;
  if (p->tok.k != T_STRING) return expected(p, "a quoted weight name");
  const char *name = str_value(p, &p->tok);
  if (kdc_ir_module_find_weight(p->m, name))
    return error_at(p, at, "weight \"%s\" listed twice", name);
  if (!next(p) || !expect(p, ':') || !parse_type(p, &t)) return false;
  kdc_weight *w = kdc_ir_module_add_weight(p->m, name, &t, NULL);
  if (is_word(p, "non_trainable")) {
    w->trainable = false;
    return next(p);
  }
  return true;
}

static bool parse_module(parser *p) {
  if (!next(p)) return false;
  if (!is_word(p, "module")) return expected(p, "'module'");
  if (!next(p)) return false;
  if (p->tok.k != T_GLOBAL) return expected(p, "a module name such as @mlp");
  char *name = global_name(p, &p->tok);
  p->m = kdc_ir_module_create(name);
  free(name);
  if (!next(p) || !expect(p, '{')) return false;
  bool seen_mesh = false;
  while (!is_punct(p, '}')) {
    if (is_word(p, "mesh")) {
      if (seen_mesh || p->m->n_funcs)
        return error_at(p, p->tok.off, "the mesh must come once, before any func");
      seen_mesh = true;
      if (!parse_mesh(p)) return false;
    } else if (is_word(p, "weight")) {
      if (!parse_weight(p)) return false;
    } else if (is_word(p, "func")) {
      if (!parse_func(p)) return false;
    } else {
      return expected(p, "'mesh', 'weight', 'func' or '}'");
    }
  }
  if (!next(p)) return false;
  return p->tok.k == T_EOF || expected(p, "end of input after the module");
}

kdc_status kdc_ir_parse_module(const char *text, const char *filename, kdc_module **out) {
  parser p;
  memset(&p, 0, sizeof p);
  p.src = text;
  p.file = filename ? filename : "<input>";
  *out = NULL;
  bool ok = parse_module(&p) && !p.err;
  free(p.tab);
  free(p.node_off);
  if (ok) {
    *out = p.m;
    return NULL;
  }
  kdc_ir_module_destroy(p.m);
  return p.err ? p.err : KDC_ERR(KDC_INTERNAL, "%s: parse failed without a message", p.file);
}
