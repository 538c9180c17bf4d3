/*
 * json_text.c: what json-c would let through but JSON does not.
 *
 * json-c accepts "//" and C comments outside strict mode, and keeps an
 * escaped NUL (\u0000) inside a string, which every C-string user (object
 * keys, layer and tensor names) then truncates: "a\u0000b" would match "a".
 * kdc's JSON readers run this check first, so a name is never cut short.
 */
#include "common/io.h"

#include <string.h>

void kdc_text_line_col(const char *text, size_t off, int *line, int *col) {
  *line = 1;
  *col = 1;
  for (size_t i = 0; i < off; i++) {
    if (text[i] == '\n') {
      (*line)++;
      *col = 1;
    } else {
      (*col)++;
    }
  }
}

static kdc_status at(const char *name, const char *text, size_t off, size_t base,
                     const char *what) {
  int line, col;
  kdc_text_line_col(text, off, &line, &col);
  return KDC_ERR(KDC_INVALID_INPUT, "%s: line %d, column %d (byte %zu): invalid JSON: %s", name,
                 line, col, base + off, what);
}

kdc_status kdc_json_text_check(const char *name, const char *text, size_t len, size_t base) {
  bool in_string = false;
  for (size_t i = 0; i < len; i++) {
    char c = text[i];
    if (c == '\0') return at(name, text, i, base, "a NUL byte");
    if (!in_string) {
      if (c == '"') in_string = true;
      else if (c == '/') return at(name, text, i, base, "a comment (JSON has none)");
      continue;
    }
    if (c == '"') {
      in_string = false;
    } else if (c == '\\' && i + 1 < len) {
      if (text[i + 1] == 'u' && i + 6 <= len && !memcmp(text + i + 2, "0000", 4))
        return at(name, text, i, base, "\\u0000 (NUL) in a string: names cannot hold NUL");
      i++;  /* the escaped character */
    }
  }
  return NULL;
}
