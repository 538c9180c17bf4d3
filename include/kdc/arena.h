/*
 * Arena allocation (STYLE.md 6): one arena per compilation, freed at once.
 * Blocks grow in chunks; nothing is sized in advance.  Allocation failure
 * (here and in kdc_x*alloc) is kdc_out_of_memory: a one-line error and exit
 * status 3, never an abort.
 */
#ifndef KDC_ARENA_H
#define KDC_ARENA_H

#include <stddef.h>

typedef struct kdc_arena kdc_arena;

kdc_arena *kdc_arena_create(void);
void kdc_arena_destroy(kdc_arena *a);
/* Zeroed memory aligned to 16 bytes, valid until the arena is destroyed. */
void *kdc_arena_alloc(kdc_arena *a, size_t size);
char *kdc_arena_strdup(kdc_arena *a, const char *s);
char *kdc_arena_printf(kdc_arena *a, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void *kdc_arena_memdup(kdc_arena *a, const void *p, size_t size);
/* Frees everything but keeps the first chunk for reuse (scratch arenas). */
void kdc_arena_reset(kdc_arena *a);

/* Checked heap helpers: abort on failure (sizes are never from input here
 * without a prior bound check). */
void *kdc_xmalloc(size_t n);
void *kdc_xcalloc(size_t n, size_t size);
void *kdc_xrealloc(void *p, size_t n);
char *kdc_xstrdup(const char *s);

/* Growable array helper: ensures (*buf) holds at least |need| elements of
 * |elem| bytes, doubling capacity *cap. */
void kdc_grow(void **buf, size_t *cap, size_t need, size_t elem);
#define KDC_GROW(buf, cap, need) \
  kdc_grow((void **)&(buf), &(cap), (need), sizeof(*(buf)))

#endif
