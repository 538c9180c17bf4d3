/*
 * A string -> index map (open addressing, FNV-1a): the name lookups of
 * models with 100,000s of weights or layers stay O(1) instead of a linear
 * scan each (quadratic over the model).  Keys are borrowed: they must
 * outlive the map.  The first value added for a key stays.
 */
#ifndef KDC_STRINDEX_H
#define KDC_STRINDEX_H

#include <stddef.h>
#include <stdint.h>

typedef struct kdc_strindex_entry {
  const char *key; /* NULL: empty */
  uint32_t value;
} kdc_strindex_entry;

typedef struct kdc_strindex {
  kdc_strindex_entry *e;
  size_t cap, n; /* cap: 0 or a power of two > 2n */
} kdc_strindex;

/* The value of |key|, or -1. */
int64_t kdc_strindex_get(const kdc_strindex *x, const char *key);
/* Adds |key| -> |value| unless |key| is present. */
void kdc_strindex_add(kdc_strindex *x, const char *key, uint32_t value);
void kdc_strindex_free(kdc_strindex *x);

#endif
