/* Chunked bump allocator; see include/kdc/arena.h. */
#include "kdc/arena.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kdc/status.h"

typedef struct chunk {
  struct chunk *next;
  size_t size, used;
  _Alignas(16) unsigned char data[];
} chunk;

struct kdc_arena {
  chunk *head;
};

enum { CHUNK_MIN = 64 * 1024 };

void *kdc_xmalloc(size_t n) {
  void *p = malloc(n ? n : 1);
  if (!p) kdc_out_of_memory(n);
  return p;
}

void *kdc_xcalloc(size_t n, size_t size) {
  void *p = calloc(n ? n : 1, size ? size : 1);
  if (!p) kdc_out_of_memory(n * size);
  return p;
}

void *kdc_xrealloc(void *p, size_t n) {
  void *q = realloc(p, n ? n : 1);
  if (!q) kdc_out_of_memory(n);
  return q;
}

char *kdc_xstrdup(const char *s) {
  size_t n = strlen(s) + 1;
  return memcpy(kdc_xmalloc(n), s, n);
}

void kdc_grow(void **buf, size_t *cap, size_t need, size_t elem) {
  if (need <= *cap) return;
  size_t c = *cap ? *cap : 8;
  while (c < need) c *= 2;
  *buf = kdc_xrealloc(*buf, c * elem);
  *cap = c;
}

kdc_arena *kdc_arena_create(void) { return kdc_xcalloc(1, sizeof(kdc_arena)); }

void kdc_arena_destroy(kdc_arena *a) {
  if (!a) return;
  for (chunk *c = a->head, *n; c; c = n) {
    n = c->next;
    free(c);
  }
  free(a);
}

void kdc_arena_reset(kdc_arena *a) {
  chunk *keep = a->head;
  if (!keep) return;
  while (keep->next) keep = keep->next; /* the oldest chunk */
  for (chunk *c = a->head, *n; c != keep; c = n) {
    n = c->next;
    free(c);
  }
  keep->used = 0;
  a->head = keep;
}

void *kdc_arena_alloc(kdc_arena *a, size_t size) {
  size = (size + 15) & ~(size_t)15;
  chunk *c = a->head;
  if (!c || c->size - c->used < size) {
    size_t sz = size > CHUNK_MIN ? size : CHUNK_MIN;
    c = kdc_xmalloc(sizeof(chunk) + sz);
    c->size = sz;
    c->used = 0;
    c->next = a->head;
    a->head = c;
  }
  void *p = c->data + c->used;
  c->used += size;
  memset(p, 0, size);
  return p;
}

void *kdc_arena_memdup(kdc_arena *a, const void *p, size_t size) {
  void *q = kdc_arena_alloc(a, size);
  if (size) memcpy(q, p, size);
  return q;
}

char *kdc_arena_strdup(kdc_arena *a, const char *s) {
  return kdc_arena_memdup(a, s, strlen(s) + 1);
}

char *kdc_arena_printf(kdc_arena *a, const char *fmt, ...) {
  va_list ap, ap2;
  va_start(ap, fmt);
  va_copy(ap2, ap);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  char *s = kdc_arena_alloc(a, (size_t)(n < 0 ? 0 : n) + 1);
  if (n > 0) vsnprintf(s, (size_t)n + 1, fmt, ap2);
  va_end(ap2);
  return s;
}
