/* common/strindex.c: string -> index map (include/kdc/strindex.h). */
#include <stdlib.h>
#include <string.h>

#include "kdc/arena.h"
#include "kdc/strindex.h"

static size_t hash(const char *s) { /* FNV-1a */
  uint64_t h = 1469598103934665603ull;
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
  return (size_t)h;
}

/* The entry of |key|, or the empty one where it would go (cap > 0). */
static kdc_strindex_entry *slot(const kdc_strindex *x, const char *key) {
  size_t mask = x->cap - 1;
  for (size_t i = hash(key) & mask;; i = (i + 1) & mask)
    if (!x->e[i].key || !strcmp(x->e[i].key, key)) return &x->e[i];
}

int64_t kdc_strindex_get(const kdc_strindex *x, const char *key) {
  if (!x->cap) return -1;
  const kdc_strindex_entry *e = slot(x, key);
  return e->key ? (int64_t)e->value : -1;
}

void kdc_strindex_add(kdc_strindex *x, const char *key, uint32_t value) {
  if (2 * (x->n + 1) >= x->cap) {
    kdc_strindex old = *x;
    x->cap = old.cap ? 2 * old.cap : 64;
    x->e = kdc_xcalloc(x->cap, sizeof *x->e);
    for (size_t i = 0; i < old.cap; i++)
      if (old.e[i].key) *slot(x, old.e[i].key) = old.e[i];
    free(old.e);
  }
  kdc_strindex_entry *e = slot(x, key);
  if (e->key) return;
  *e = (kdc_strindex_entry){key, value};
  x->n++;
}

void kdc_strindex_free(kdc_strindex *x) {
  free(x->e);
  memset(x, 0, sizeof *x);
}
