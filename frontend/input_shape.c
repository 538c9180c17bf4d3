/*
 * frontend/input_shape.c: `kdc compile --input-shape [NAME=]D1,D2,...`.
 *
 * kdc compiles static shapes (as XLA does): a model input whose non-batch
 * dims are unknown (Keras `None`, typically a sequence length) gets them
 * from the user before shape inference, the way a JAX user picks concrete
 * shapes when tracing.  Known dims must agree; the batch dim stays --batch's.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/frontend.h"

kdc_status kdc_frontend_parse_input_shape(const char *text, kdc_input_shape *out) {
  memset(out, 0, sizeof *out);
  const char *eq = strchr(text, '=');
  const char *p = text;
  if (eq) {
    if (eq == text)
      return KDC_ERR(KDC_INVALID_INPUT, "\"%s\": expected an input name before '='", text);
    size_t n = (size_t)(eq - text);
    char *name = malloc(n + 1);
    memcpy(name, text, n);
    name[n] = '\0';
    out->name = name;
    p = eq + 1;
  }
  while (*p) {
    if (out->rank == KDC_MAX_RANK - 1) {
      kdc_input_shape_free(out);
      return KDC_ERR(KDC_INVALID_INPUT, "\"%s\": more than %d dims after the batch dim", text,
                     KDC_MAX_RANK - 1);
    }
    char *end = NULL;
    errno = 0;
    long long v = *p >= '0' && *p <= '9' ? strtoll(p, &end, 10) : 0;
    if (!end || end == p || errno || v < 1 || v > ((long long)1 << 40) ||
        (*end && *end != ',') || (*end == ',' && !end[1])) {
      long off = (long)(p - text);
      kdc_input_shape_free(out);
      return KDC_ERR(KDC_INVALID_INPUT, "\"%s\" (at character %ld): expected [NAME=]D1,D2,... "
                     "with positive dims after the batch dim", text, off + 1);
    }
    out->dims[out->rank++] = v;
    p = *end ? end + 1 : end;
  }
  if (out->rank == 0) {
    kdc_input_shape_free(out);
    return KDC_ERR(KDC_INVALID_INPUT, "\"%s\": expected [NAME=]D1,D2,... (the dims after the "
                   "batch dim)", text);
  }
  return NULL;
}

void kdc_input_shape_free(kdc_input_shape *s) {
  free((char *)s->name);
  s->name = NULL;
}

/* The model input |name| (NULL: the only one); -1 if none. */
static int find_input(const kdc_keras_model *m, const char *name) {
  if (!name) return m->n_inputs == 1 ? 0 : -1;
  for (int i = 0; i < m->n_inputs; i++)
    if (!strcmp(m->layers[m->inputs[i].layer].name, name)) return i;
  return -1;
}

static const char *input_names(const kdc_keras_model *m) {
  size_t n = 1;
  for (int i = 0; i < m->n_inputs; i++) n += strlen(m->layers[m->inputs[i].layer].name) + 4;
  char *s = kdc_arena_alloc(m->arena, n);
  s[0] = '\0';
  for (int i = 0; i < m->n_inputs; i++) {
    if (i) strcat(s, ", ");
    strcat(s, "\"");
    strcat(s, m->layers[m->inputs[i].layer].name);
    strcat(s, "\"");
  }
  return s;
}

kdc_status kdc_fe_apply_input_shapes(kdc_keras_model *m) {
  const kdc_load_options *o = m->load_opt;
  for (int k = 0; o && k < o->n_input_shapes; k++) {
    const kdc_input_shape *is = &o->input_shapes[k];
    int i = find_input(m, is->name);
    if (i < 0) {
      if (!is->name)
        return kdc_fe_err(m, KDC_INVALID_INPUT, m->loc, "--input-shape without a name, but the "
                          "model has %d inputs (%s): use NAME=D1,D2,...", m->n_inputs,
                          input_names(m));
      return kdc_fe_err(m, KDC_INVALID_INPUT, m->loc, "--input-shape names \"%s\", which is not "
                        "a model input (inputs: %s)", is->name, input_names(m));
    }
    kdc_keras_layer *l = &m->layers[m->inputs[i].layer];
    kdc_kshape *s = &l->nodes[0].out[0];
    char b[160];
    kdc_kshape_str(s, b, sizeof b); /* as the model gives it */
    if (s->rank != is->rank + 1)
      return kdc_fe_err(m, KDC_INVALID_INPUT, l->loc, "--input-shape for input \"%s\" gives %d "
                        "dims after the batch dim, but its shape %s has %d", l->name, is->rank,
                        b, s->rank - 1);
    for (int d = 1; d < s->rank; d++) {
      int64_t want = is->dims[d - 1];
      if (s->dims[d] >= 0 && s->dims[d] != want)
        return kdc_fe_err(m, KDC_INVALID_INPUT, l->loc, "--input-shape gives dim %d of input "
                          "\"%s\" as %lld, but the model fixes it to %lld (shape %s)", d, l->name,
                          (long long)want, (long long)s->dims[d], b);
      s->dims[d] = want;
    }
  }
  return NULL;
}

kdc_status kdc_frontend_fixed_batch(const kdc_keras_model *m, int64_t *batch,
                                    const kdc_keras_layer **where) {
  *batch = -1;
  *where = NULL;
  for (int i = 0; i < m->n_inputs; i++) {
    const kdc_keras_layer *l = &m->layers[m->inputs[i].layer];
    if (!l->n_nodes || !l->nodes[0].out || l->nodes[0].out[0].rank < 1) continue;
    int64_t b = l->nodes[0].out[0].dims[0];
    if (b < 0) continue;
    if (*batch >= 0 && b != *batch)
      return kdc_fe_layer_err(l, KDC_INVALID_INPUT, "the input's batch_shape fixes the batch to "
                              "%lld but input \"%s\" fixes it to %lld: one plan has one batch",
                              (long long)b, (*where)->name, (long long)*batch);
    *batch = b;
    *where = l;
  }
  return NULL;
}
