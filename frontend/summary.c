/*
 * frontend/summary.c: `model.summary()`-style listing, parameter counts and
 * the flat variable list.
 *
 * Counts follow Keras: every variable counts (BatchNormalization moving
 * statistics, Normalization mean/variance/count included); a variable is
 * trainable when it was declared trainable and its layer and every enclosing
 * model have trainable=true.  Memory sizes use Keras' readable_memory_size
 * (base 1024, two decimals).  A Sequential summary, like Keras 3's, has no
 * InputLayer row; a Functional one has a "Connected to" column.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "frontend/frontend.h"

char *kdc_kshape_str(const kdc_kshape *s, char *buf, size_t n) {
  size_t k = 0;
  k += (size_t)snprintf(buf + k, n - k, "(");
  for (int i = 0; i < s->rank && k < n; i++) {
    if (s->dims[i] < 0)
      k += (size_t)snprintf(buf + k, n - k, "%sNone", i ? ", " : "");
    else
      k += (size_t)snprintf(buf + k, n - k, "%s%" PRId64, i ? ", " : "", s->dims[i]);
  }
  if (k < n) k += (size_t)snprintf(buf + k, n - k, s->rank == 1 ? ",)" : ")");
  return buf;
}

/* Bytes per element (local: the frontend's load path needs no ir/ code). */
static int64_t dsize(kdc_dtype d) { return d == KDC_DTYPE_I64 ? 8 : d == KDC_DTYPE_BOOL ? 1 : 4; }

static void count_model(const kdc_keras_model *m, int64_t *total, int64_t *train, int64_t *bytes);

static void count_layer(const kdc_keras_layer *l, int64_t *total, int64_t *train, int64_t *bytes) {
  if (l->sub) {
    count_model(l->sub, total, train, bytes);
    return;
  }
  for (int i = 0; i < l->n_vars; i++) {
    const kdc_keras_var *v = l->vars[i];
    int64_t n = kdc_kshape_numel(&v->shape);
    *total += n;
    if (v->trainable) *train += n;
    if (bytes) *bytes += n * (int64_t)dsize(v->dtype);
  }
}

static void count_model(const kdc_keras_model *m, int64_t *total, int64_t *train, int64_t *bytes) {
  for (int i = 0; i < m->n_layers; i++) count_layer(&m->layers[i], total, train, bytes);
}

int64_t kdc_frontend_param_count(const kdc_keras_model *m) {
  int64_t t = 0, tr = 0;
  count_model(m, &t, &tr, NULL);
  return t;
}

int64_t kdc_frontend_trainable_count(const kdc_keras_model *m) {
  int64_t t = 0, tr = 0;
  count_model(m, &t, &tr, NULL);
  return tr;
}

int64_t kdc_frontend_layer_params(const kdc_keras_layer *l) {
  int64_t t = 0, tr = 0;
  count_layer(l, &t, &tr, NULL);
  return t;
}

size_t kdc_frontend_variable_count(const kdc_keras_model *m) { return (size_t)m->n_vars; }

const kdc_keras_var *kdc_frontend_variable(const kdc_keras_model *m, size_t i) {
  return i < (size_t)m->n_vars ? m->vars[i] : NULL;
}

/* "1,234,567" */
static const char *commas(int64_t v, char *buf, size_t n) {
  char tmp[32];
  snprintf(tmp, sizeof tmp, "%" PRId64, v < 0 ? -v : v);
  size_t len = strlen(tmp), k = 0;
  if (v < 0 && k + 1 < n) buf[k++] = '-';
  for (size_t i = 0; i < len && k + 2 < n; i++) {
    if (i && (len - i) % 3 == 0) buf[k++] = ',';
    buf[k++] = tmp[i];
  }
  buf[k] = 0;
  return buf;
}

/* keras.src.utils.summary_utils.readable_memory_size */
static const char *mem(double bytes, char *buf, size_t n) {
  static const char *units[] = {"B", "KB", "MB", "GB", "TB", "PB"};
  int u = 0;
  while (u < 5 && bytes / 1024 >= 1) bytes /= 1024, u++;
  snprintf(buf, n, "%.2f %s", bytes, units[u]);
  return buf;
}

static void rule(FILE *out, char c, int w) {
  for (int i = 0; i < w; i++) fputc(c, out);
  fputc('\n', out);
}

kdc_status kdc_frontend_summary(const kdc_keras_model *m, FILE *out) {
  bool conn = !m->sequential;
  int w = conn ? 118 : 86;
  fprintf(out, "Model: \"%s\"\n", m->name);
  rule(out, '-', w);
  fprintf(out, "%-42s %-28s %14s", "Layer (type)", "Output Shape", "Param #");
  if (conn) fprintf(out, "   %s", "Connected to");
  fputc('\n', out);
  rule(out, '=', w);
  for (int i = 0; i < m->n_layers; i++) {
    const kdc_keras_layer *l = &m->layers[i];
    if (m->sequential && !strcmp(l->class_name, "InputLayer")) continue;
    char name[256], shape[512] = "?", num[32], tmp[160];
    snprintf(name, sizeof name, "%s (%s)", l->name, l->class_name);
    if (l->n_nodes > 0 && l->nodes[0].n_out > 0) {
      const kdc_keras_node *nd = &l->nodes[0];
      if (nd->n_out == 1) {
        kdc_kshape_str(&nd->out[0], shape, sizeof shape);
      } else {
        size_t k = (size_t)snprintf(shape, sizeof shape, "[");
        for (int t = 0; t < nd->n_out && k < sizeof shape; t++)
          k += (size_t)snprintf(shape + k, sizeof shape - k, "%s%s", t ? ", " : "",
                                kdc_kshape_str(&nd->out[t], tmp, sizeof tmp));
        if (k < sizeof shape) snprintf(shape + k, sizeof shape - k, "]");
      }
    }
    fprintf(out, "%-42s %-28s %14s", name, shape,
            commas(kdc_frontend_layer_params(l), num, sizeof num));
    if (conn) {
      fprintf(out, "   ");
      bool any = false;
      for (int j = 0; j < l->n_nodes; j++) {
        const kdc_keras_node *nd = &l->nodes[j];
        for (int k = 0; k < nd->n_in + nd->n_kw; k++) {
          kdc_keras_ref r = k < nd->n_in ? nd->in[k] : nd->kw[k - nd->n_in];
          fprintf(out, "%s%s[%d][%d]", any ? ", " : "", m->layers[r.layer].name, r.node, r.tensor);
          any = true;
        }
      }
      if (!any) fprintf(out, "-");
    }
    fputc('\n', out);
  }
  rule(out, '=', w);
  int64_t total = 0, train = 0, bytes = 0, tbytes = 0;
  count_model(m, &total, &train, &bytes);
  for (int i = 0; i < m->n_vars; i++)
    if (m->vars[i]->trainable)
      tbytes += kdc_kshape_numel(&m->vars[i]->shape) * (int64_t)dsize(m->vars[i]->dtype);
  char a[32], b[32];
  fprintf(out, "Total params: %s (%s)\n", commas(total, a, sizeof a), mem((double)bytes, b, sizeof b));
  fprintf(out, "Trainable params: %s (%s)\n", commas(train, a, sizeof a),
          mem((double)tbytes, b, sizeof b));
  fprintf(out, "Non-trainable params: %s (%s)\n", commas(total - train, a, sizeof a),
          mem((double)(bytes - tbytes), b, sizeof b));
  return ferror(out) ? KDC_ERR(KDC_IO_ERROR, "cannot write the summary") : NULL;
}
