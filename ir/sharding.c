/*
 * Mesh helpers and the text form of a sharding (SHARDING.md 7).
 *
 * A sharding prints as one brace group with one token per tensor dim,
 * followed by optional clauses, all on one line:
 *
 *     {data,-}                      dim 0 split over "data", dim 1 unsplit (closed)
 *     {(data,model),?}              dim 0 split by data then model (major to minor);
 *                                   dim 1 unsplit but open (may still gain axes)
 *     {data?,-}                     dim 0 split over data and still open
 *     {-,-} replicated(data)        explicitly replicated over data
 *     {data,model} partial(sum: x)  an unreduced partial sum over axis x
 *     {-} prov=7                    provenance index (kdc_sharding.origin)
 *
 * Clauses appear in that order (replicated, partial, prov) and only when
 * non-empty, so the printed form is canonical.  The parser accepts any
 * whitespace between tokens and is the exact inverse of the printer; it
 * reports errors with a pointer to the offending byte so that ir/parse.c
 * can turn it into file:line:col.
 */
#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/ir.h"

int64_t kdc_mesh_devices(const kdc_mesh *m) {
  int64_t n = 1;
  for (int i = 0; i < m->naxes; i++) n *= m->sizes[i];
  return n;
}

int kdc_mesh_axis_index(const kdc_mesh *m, const char *name) {
  for (int i = 0; i < m->naxes; i++)
    if (strcmp(m->names[i], name) == 0) return i;
  return -1;
}

static bool is_ident(const char *s) {
  if (!(isalpha((unsigned char)*s) || *s == '_')) return false;
  for (s++; *s; s++)
    if (!(isalnum((unsigned char)*s) || *s == '_')) return false;
  return true;
}

kdc_status kdc_mesh_check(const kdc_mesh *m) {
  if (m->naxes < 0 || m->naxes > KDC_MAX_MESH_AXES)
    return KDC_ERR(KDC_INVALID_INPUT, "mesh: %d axes (at most %d)", m->naxes, KDC_MAX_MESH_AXES);
  for (int i = 0; i < m->naxes; i++) {
    if (!memchr(m->names[i], 0, sizeof m->names[i]) || !is_ident(m->names[i]))
      return KDC_ERR(KDC_INVALID_INPUT, "mesh: axis %d: name is not an identifier", i);
    if (m->sizes[i] < 1)
      return KDC_ERR(KDC_INVALID_INPUT, "mesh: axis \"%s\" has size %lld (must be >= 1)",
                     m->names[i], (long long)m->sizes[i]);
    for (int j = 0; j < i; j++)
      if (strcmp(m->names[i], m->names[j]) == 0)
        return KDC_ERR(KDC_INVALID_INPUT, "mesh: axis \"%s\" named twice", m->names[i]);
  }
  return NULL;
}

/* ---- printing ------------------------------------------------------------ */

/* A bounded string builder: appends never overflow, truncation is silent. */
typedef struct sbuf {
  char *p;
  size_t n, len;
} sbuf;

static void put(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(sbuf *b, const char *fmt, ...) {
  if (b->len + 1 >= b->n) return;
  va_list ap;
  va_start(ap, fmt);
  int k = vsnprintf(b->p + b->len, b->n - b->len, fmt, ap);
  va_end(ap);
  if (k < 0) return;
  b->len += (size_t)k;
  if (b->len >= b->n) b->len = b->n - 1;
}

static void put_axis(sbuf *b, const kdc_mesh *m, int a) {
  if (a < m->naxes) put(b, "%s", m->names[a]);
  else put(b, "<axis%d>", a);
}

/* Writes the axes whose bits are set in |mask|, comma separated. */
static void put_mask(sbuf *b, const kdc_mesh *m, unsigned mask) {
  bool first = true;
  for (int a = 0; a < 16; a++)
    if (mask & (1u << a)) {
      if (!first) put(b, ",");
      put_axis(b, m, a);
      first = false;
    }
}

char *kdc_sharding_str(const kdc_mesh *m, const kdc_sharding *s, char *buf, size_t n) {
  sbuf b = {buf, n, 0};
  if (n == 0) return buf;
  buf[0] = 0;
  put(&b, "{");
  for (int d = 0; d < s->rank; d++) {
    int na = s->naxes[d];
    if (d) put(&b, ",");
    if (na == 0) {
      put(&b, (s->open_mask >> d) & 1 ? "?" : "-");
      continue;
    }
    if (na > 1) put(&b, "(");
    for (int k = 0; k < na && k < KDC_MAX_AXES_PER_DIM; k++) {
      if (k) put(&b, ",");
      put_axis(&b, m, s->axes[d][k]);
    }
    if (na > 1) put(&b, ")");
    if ((s->open_mask >> d) & 1) put(&b, "?");
  }
  put(&b, "}");
  if (s->replicated) {
    put(&b, " replicated(");
    put_mask(&b, m, s->replicated);
    put(&b, ")");
  }
  if (s->partial) {
    put(&b, " partial(sum: ");
    put_mask(&b, m, s->partial);
    put(&b, ")");
  }
  if (s->origin) put(&b, " prov=%u", (unsigned)s->origin);
  return buf;
}

void kdc_ir_print_sharding(FILE *out, const kdc_module *m, const kdc_sharding *s) {
  static const kdc_mesh none;
  char buf[2048];
  fputs(kdc_sharding_str(m ? &m->mesh : &none, s, buf, sizeof buf), out);
}

/* ---- parsing ------------------------------------------------------------- */

typedef struct sp {
  const char *p;       /* cursor */
  const kdc_mesh *m;
  const char *err_at;  /* set on the first error */
} sp;

static void skip_ws(sp *s) {
  while (*s->p == ' ' || *s->p == '\t' || *s->p == '\n' || *s->p == '\r') s->p++;
}

static kdc_status fail(sp *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static kdc_status fail(sp *s, const char *fmt, ...) {
  s->err_at = s->p;
  va_list ap;
  va_start(ap, fmt);
  kdc_status st = kdc_status_makev(KDC_INVALID_INPUT, __FILE__, __LINE__, fmt, ap);
  va_end(ap);
  return st;
}

static bool eat(sp *s, char c) {
  skip_ws(s);
  if (*s->p != c) return false;
  s->p++;
  return true;
}

/* Reads a mesh axis name into *out (its index in the mesh). */
static kdc_status axis(sp *s, int *out) {
  skip_ws(s);
  const char *b = s->p;
  while (isalnum((unsigned char)*s->p) || *s->p == '_') s->p++;
  size_t len = (size_t)(s->p - b);
  char name[32];
  s->p = b;
  if (len == 0) return fail(s, "expected a mesh axis name");
  if (len >= sizeof name) return fail(s, "mesh axis name too long");
  memcpy(name, b, len);
  name[len] = 0;
  *out = kdc_mesh_axis_index(s->m, name);
  if (*out < 0) return fail(s, "unknown mesh axis '%s'", name);
  s->p = b + len;
  return NULL;
}

/* A comma-separated axis list closed by ')', as a bit mask. */
static kdc_status axis_mask(sp *s, uint16_t *out) {
  *out = 0;
  do {
    int a;
    const char *at = s->p;
    KDC_RETURN_IF_ERROR(axis(s, &a));
    if (*out & (1u << a)) {
      s->p = at;
      skip_ws(s);
      return fail(s, "mesh axis '%s' listed twice", s->m->names[a]);
    }
    *out |= (uint16_t)(1u << a);
  } while (eat(s, ','));
  if (!eat(s, ')')) return fail(s, "expected ',' or ')'");
  return NULL;
}

static kdc_status dim(sp *s, kdc_sharding *o, int d) {
  skip_ws(s);
  if (*s->p == '-' || *s->p == '?') {
    if (*s->p++ == '?') o->open_mask |= (uint8_t)(1u << d);
    return NULL;
  }
  bool group = eat(s, '(');
  do {
    int a;
    if (o->naxes[d] >= KDC_MAX_AXES_PER_DIM)
      return fail(s, "more than %d axes on one dim", KDC_MAX_AXES_PER_DIM);
    KDC_RETURN_IF_ERROR(axis(s, &a));
    o->axes[d][o->naxes[d]++] = (uint8_t)a;
  } while (group && eat(s, ','));
  if (group && !eat(s, ')')) return fail(s, "expected ',' or ')'");
  if (eat(s, '?')) o->open_mask |= (uint8_t)(1u << d);
  return NULL;
}

/* True if the next word is |kw| immediately followed by |next|. */
static bool keyword(sp *s, const char *kw, char next) {
  const char *q = s->p;
  while (*q == ' ' || *q == '\t') q++;
  size_t n = strlen(kw);
  if (strncmp(q, kw, n) != 0 || q[n] != next) return false;
  s->p = q + n + 1;
  return true;
}

static kdc_status parse(sp *s, kdc_sharding *o) {
  memset(o, 0, sizeof *o);
  o->present = true;
  if (!eat(s, '{')) return fail(s, "expected '{' to start a sharding");
  skip_ws(s);
  if (*s->p != '}') {
    do {
      if (o->rank >= KDC_MAX_RANK) return fail(s, "sharding has more than %d dims", KDC_MAX_RANK);
      KDC_RETURN_IF_ERROR(dim(s, o, o->rank));
      o->rank++;
    } while (eat(s, ','));
  }
  if (!eat(s, '}')) return fail(s, "expected ',' or '}' in sharding");
  if (keyword(s, "replicated", '(')) KDC_RETURN_IF_ERROR(axis_mask(s, &o->replicated));
  if (keyword(s, "partial", '(')) {
    skip_ws(s);
    if (strncmp(s->p, "sum", 3) != 0) return fail(s, "expected 'sum' (the only partial op)");
    s->p += 3;
    if (!eat(s, ':')) return fail(s, "expected ':' after 'partial(sum'");
    KDC_RETURN_IF_ERROR(axis_mask(s, &o->partial));
  }
  if (keyword(s, "prov", '=')) {
    char *end;
    if (!isdigit((unsigned char)*s->p)) return fail(s, "expected a provenance index");
    unsigned long v = strtoul(s->p, &end, 10);
    if (v == 0 || v > UINT32_MAX) return fail(s, "provenance index out of range");
    o->origin = (uint32_t)v;
    s->p = end;
  }
  return NULL;
}

kdc_status kdc_sharding_parse(const char *text, const kdc_mesh *m, kdc_sharding *out,
                              const char **out_end) {
  sp s = {text, m, NULL};
  kdc_status st = parse(&s, out);
  *out_end = st ? s.err_at : s.p;
  return st;
}
