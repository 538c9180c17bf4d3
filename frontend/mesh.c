/*
 * frontend/mesh.c: the device mesh from --mesh and --axes (KERAS.md 1.1).
 *
 * Grammar, with nothing else allowed (no spaces, no signs, no uppercase X):
 *     shape := size ('x' size)*          size := [0-9]+ with value >= 1
 *     axes  := name (',' name)*          name := [A-Za-z_][A-Za-z0-9_]{0,30}
 * Devices are laid out row-major, as Keras's np.reshape(devices, shape).
 * Errors quote the flag and point at a 1-based column.  The device count is
 * capped at KDC_MESH_MAX_DEVICES; docs/layout.md explains the numbers.
 */
#include <ctype.h>
#include <stdio.h>
#include <string.h>

#include "frontend/layout.h"

/* A printable rendering of the byte at |p| for "got ..." in messages. */
static const char *show_char(const char *p, char *buf, size_t n) {
  unsigned char c = (unsigned char)*p;
  if (isprint(c))
    snprintf(buf, n, "'%c'", c);
  else
    snprintf(buf, n, "byte 0x%02x", c);
  return buf;
}

/* "<what> at column N[, got 'c']" for the byte at |at| of the --flag value |s|. */
static kdc_status flag_error(const char *flag, const char *s, const char *at,
                             const char *what) {
  char got[32] = "";
  if (*at) show_char(at, got, sizeof got);
  return KDC_ERR(KDC_INVALID_INPUT, "%s \"%s\": %s at column %d%s%s", flag, s, what,
                 (int)(at - s) + 1, *at ? ", got " : "", got);
}

/* Parses the sizes; *|out_rank| and |sizes| get them. */
static kdc_status parse_shape(const char *shape, int *out_rank, int64_t *sizes) {
  const char *p = shape;
  int rank = 0;
  int64_t devices = 1;
  for (;;) {
    const char *start = p;
    if (!isdigit((unsigned char)*p))
      return flag_error("--mesh", shape, p,
                        rank == 0 ? "expected a positive integer"
                                  : "expected a positive integer after 'x'");
    int64_t v = 0;
    for (; isdigit((unsigned char)*p); p++) {
      v = v * 10 + (*p - '0');
      if (v > KDC_MESH_MAX_DEVICES)  /* also stops int64 overflow */
        return KDC_ERR(KDC_INVALID_INPUT,
                       "--mesh \"%s\": axis size at column %d is larger than the %lld "
                       "devices kdc supports",
                       shape, (int)(start - shape) + 1, (long long)KDC_MESH_MAX_DEVICES);
    }
    if (v == 0)
      return KDC_ERR(KDC_INVALID_INPUT,
                     "--mesh \"%s\": mesh axis size must be at least 1, got 0 at column %d",
                     shape, (int)(start - shape) + 1);
    if (rank == KDC_MAX_MESH_AXES)
      return KDC_ERR(KDC_UNSUPPORTED, "--mesh \"%s\": more than %d mesh axes", shape,
                     KDC_MAX_MESH_AXES);
    devices *= v;  /* both factors <= 2^20: no overflow */
    if (devices > KDC_MESH_MAX_DEVICES)
      return KDC_ERR(KDC_INVALID_INPUT,
                     "--mesh \"%s\": the mesh has more than the %lld devices kdc supports",
                     shape, (long long)KDC_MESH_MAX_DEVICES);
    sizes[rank++] = v;
    if (*p == '\0') break;
    if (*p != 'x')
      return flag_error("--mesh", shape, p,
                        *p == 'X' ? "expected a lowercase 'x' between axis sizes"
                                  : "expected 'x' between axis sizes");
    p++;
  }
  *out_rank = rank;
  return NULL;
}

/* Parses |axes| into |names| (rank |rank| fixed by --mesh |shape|). */
static kdc_status parse_axes(const char *axes, const char *shape, int rank,
                             char names[][32]) {
  const char *p = axes;
  int n = 0;
  for (;;) {
    const char *start = p;
    if (!(isalpha((unsigned char)*p) || *p == '_'))
      return flag_error("--axes", axes, p, "expected an axis name (a letter or '_' first)");
    while (isalnum((unsigned char)*p) || *p == '_') p++;
    size_t len = (size_t)(p - start);
    if (len > 31)
      return KDC_ERR(KDC_INVALID_INPUT,
                     "--axes \"%s\": the axis name at column %d is longer than 31 bytes", axes,
                     (int)(start - axes) + 1);
    if (n < KDC_MAX_MESH_AXES) {
      memcpy(names[n], start, len);
      names[n][len] = '\0';
      for (int i = 0; i < n; i++)
        if (strcmp(names[i], names[n]) == 0)
          return KDC_ERR(KDC_INVALID_INPUT,
                         "--axes \"%s\": axis name \"%s\" is used twice (axes %d and %d)",
                         axes, names[n], i, n);
    }
    n++;
    if (*p == '\0') break;
    if (*p != ',') return flag_error("--axes", axes, p, "expected ',' between axis names");
    p++;
  }
  if (n != rank)
    return KDC_ERR(KDC_INVALID_INPUT,
                   "--axes \"%s\": %d axis name%s for the %d-axis mesh \"%s\"", axes, n,
                   n == 1 ? "" : "s", rank, shape);
  return NULL;
}

kdc_status kdc_mesh_parse(const char *shape, const char *axes, kdc_mesh *out) {
  KDC_ASSERT(shape && out);
  kdc_mesh m;
  memset(&m, 0, sizeof m);
  memset(out, 0, sizeof *out);
  KDC_RETURN_IF_ERROR(parse_shape(shape, &m.naxes, m.sizes));
  if (axes) {
    KDC_RETURN_IF_ERROR(parse_axes(axes, shape, m.naxes, m.names));
  } else {
    static const char *const defaults[] = {"data", "model"};
    for (int i = 0; i < m.naxes; i++) {
      if (i < 2)
        snprintf(m.names[i], sizeof m.names[i], "%s", defaults[i]);
      else
        snprintf(m.names[i], sizeof m.names[i], "axis%d", i);
    }
  }
  *out = m;
  return NULL;
}
