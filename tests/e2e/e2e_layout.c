/* e2e_layout.c: see e2e_layout.h. */
#include "e2e_layout.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct text {
  char *s;
  size_t len, cap;
} text;

static void put(text *t, const char *fmt, ...) {
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(t->s + t->len, t->cap - t->len, fmt, ap);
    va_end(ap);
    if (n < 0) abort();
    if ((size_t)n < t->cap - t->len) {
      t->len += (size_t)n;
      return;
    }
    t->cap = 2 * t->cap + (size_t)n;
    t->s = realloc(t->s, t->cap);
    if (!t->s) abort();
  }
}

static bool ends_with(const char *s, const char *suffix) {
  size_t n = strlen(s), k = strlen(suffix);
  return n > k && strcmp(s + n - k, suffix) == 0;
}

char *e2e_column_layout(const kdc_keras_model *km, int64_t model, int *rules) {
  text t = {malloc(256), 0, 256};
  if (!t.s) abort();
  *rules = 0;
  put(&t, "{\"batch_dim_name\": \"data\", \"layout_map\": {");
  for (size_t i = 0; i < kdc_frontend_variable_count(km); i++) {
    const kdc_keras_var *v = kdc_frontend_variable(km, i);
    int rank = v->shape.rank;
    bool kernel = ends_with(v->path, "/kernel") && rank >= 2;
    bool table = ends_with(v->path, "/embeddings") && rank == 2;
    int split = table ? 0 : rank - 1; /* embeddings: vocabulary-parallel */
    if (!(kernel || table) || v->shape.dims[split] % model) continue;
    put(&t, "%s\"%s\": [", (*rules)++ ? ", " : "", v->path);
    for (int d = 0; d < rank; d++)
      put(&t, "%s%s", d ? ", " : "", d == split ? "\"model\"" : "null");
    put(&t, "]");
  }
  put(&t, "}}");
  return t.s;
}
