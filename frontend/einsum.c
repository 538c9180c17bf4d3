/*
 * frontend/einsum.c: two-operand einsum equations, EinsumDense shape and
 * variable inference.
 *
 * kdc_fe_einsum_parse reads "ab,bc->ac" (letters, one optional "..." per
 * operand) into label ids; kdc_fe_einsum_lower turns it into IR the way
 * XLA's einsum does: labels of one operand that appear nowhere else are
 * summed first, labels shared by both operands and the output become
 * dot_general batch dims, shared labels absent from the output are
 * contracted, and a final transpose puts the dot_general result
 * [batch, lhs free, rhs free] into output order.  Repeated labels inside one
 * operand (diagonals) are refused.
 *
 * EinsumDense (keras/src/layers/core/einsum_dense.py, _analyze_einsum_string
 * and _analyze_split_string) accepts exactly three forms: "X,Y->Z",
 * "...X,Y->...Z" and "X...,Y->Z...".  The kernel's dims come from the output
 * shape for labels in the output, else from the input; the bias covers the
 * output spec from its first bias label on, 1 for the others, plus a 1 per
 * right-elided dim.  The output shape is the batch dim plus the configured
 * partial output shape plus the elided dims.
 */
#include <json-c/json.h>
#include <string.h>

#include "frontend/frontend.h"

enum { ELL = 52 }; /* first label id of "..." dims (letters are 0..51) */

static int letter_id(char ch) {
  if (ch >= 'a' && ch <= 'z') return ch - 'a';
  if (ch >= 'A' && ch <= 'Z') return 26 + ch - 'A';
  return -1;
}

/* Parses one operand spec [p, end) for a tensor of rank |rank| (-1: the
 * output, whose "..." takes |n_ell| dims). */
static bool parse_spec(const char *p, const char *end, int rank, int *n_ell, int *n, int8_t *lab) {
  int letters = 0;
  bool ell = false;
  for (const char *q = p; q < end; q++) {
    if (*q == '.') {
      if (ell || end - q < 3 || q[1] != '.' || q[2] != '.') return false;
      ell = true;
      q += 2;
    } else if (letter_id(*q) >= 0) {
      letters++;
    } else if (*q != ' ') {
      return false;
    }
  }
  int ne = ell ? (rank >= 0 ? rank - letters : *n_ell) : 0;
  if (ne < 0 || letters + ne > KDC_MAX_RANK || (rank >= 0 && !ell && letters != rank)) return false;
  if (rank >= 0 && ell) *n_ell = ne > *n_ell ? ne : *n_ell;
  *n = 0;
  for (const char *q = p; q < end; q++) {
    if (*q == '.') {
      for (int i = 0; i < ne; i++) lab[(*n)++] = (int8_t)(ELL + i);
      q += 2;
    } else if (letter_id(*q) >= 0) {
      lab[(*n)++] = (int8_t)letter_id(*q);
    }
  }
  return true;
}

static int find(const int8_t *lab, int n, int8_t x) {
  for (int i = 0; i < n; i++)
    if (lab[i] == x) return i;
  return -1;
}

kdc_status kdc_fe_einsum_parse(const kdc_keras_layer *l, const char *key, const char *eq,
                               int rank_a, int rank_b, kdc_fe_einsum *out) {
  memset(out, 0, sizeof *out);
  const char *comma = strchr(eq, ','), *arrow = strstr(eq, "->");
  int n_ell = 0;
  bool ok = comma && arrow && comma < arrow && !strchr(comma + 1, ',') &&
            parse_spec(eq, comma, rank_a, &n_ell, &out->n[0], out->lab[0]) &&
            parse_spec(comma + 1, arrow, rank_b, &n_ell, &out->n[1], out->lab[1]) &&
            parse_spec(arrow + 2, eq + strlen(eq), -1, &n_ell, &out->n[2], out->lab[2]);
  /* both operands' "..." must cover the same dims (no ellipsis broadcasting) */
  for (int s = 0; ok && s < 2; s++) {
    int ne = 0;
    for (int i = 0; i < out->n[s]; i++) ne += out->lab[s][i] >= ELL;
    ok = ne == 0 || ne == n_ell;
  }
  if (!ok)
    return kdc_fe_layer_err(l, KDC_INVALID_INPUT, "config.%s: \"%s\" is not an einsum equation "
                            "\"x,y->z\" for operands of rank %d and %d", key, eq, rank_a, rank_b);
  for (int s = 0; s < 3; s++)
    for (int i = 0; i < out->n[s]; i++) {
      int8_t x = out->lab[s][i];
      if (find(out->lab[s], i, x) >= 0)
        return kdc_fe_layer_err(l, KDC_UNSUPPORTED, "config.%s: \"%s\" repeats a label in one "
                                "operand (diagonals are not supported)", key, eq);
      if (s == 2 && find(out->lab[0], out->n[0], x) < 0 && find(out->lab[1], out->n[1], x) < 0)
        return kdc_fe_layer_err(l, KDC_INVALID_INPUT, "config.%s: output label '%c' of \"%s\" is "
                                "in neither operand", key, x < 26 ? 'a' + x : 'A' + x - 26, eq);
    }
  return NULL;
}

/* Sums |x| (labels |lab|, *|n|) over the labels found in neither |o1| nor |o2|. */
static kdc_value_id sum_private(kdc_func *f, kdc_value_id x, int8_t *lab, int *n, const int8_t *o1,
                                int n1, const int8_t *o2, int n2) {
  int64_t dims[KDC_MAX_RANK];
  int nd = 0, k = 0;
  for (int i = 0; i < *n; i++) {
    if (find(o1, n1, lab[i]) < 0 && find(o2, n2, lab[i]) < 0) dims[nd++] = i;
    else lab[k++] = lab[i];
  }
  *n = k;
  return nd ? kdc_ir_reduce(f, KDC_RED_SUM, x, nd, dims) : x;
}

/* The dot_general of |a| (labels |la|, |na|) and |b| for the einsum's
 * output labels: its dims; *|lr| gets the result's labels (batch dims in
 * |a|'s order, then |a|'s free dims, then |b|'s), *|ident| whether they are
 * the output's order already. */
static void einsum_dot(const kdc_fe_einsum *e, const int8_t *la, int na, const int8_t *lb,
                       int nb, kdc_attr_dot *d, int64_t *perm, bool *ident) {
  int8_t lr[2 * KDC_MAX_RANK];
  int nr = 0, no = e->n[2];
  memset(d, 0, sizeof *d);
  for (int i = 0; i < na; i++) {
    int j = find(lb, nb, la[i]);
    if (j < 0) continue;
    bool batch = find(e->lab[2], no, la[i]) >= 0;
    kdc_dimlist *ld = batch ? &d->lhs_batch : &d->lhs_contract;
    kdc_dimlist *rd = batch ? &d->rhs_batch : &d->rhs_contract;
    ld->v[ld->n++] = i;
    rd->v[rd->n++] = j;
    if (batch) lr[nr++] = la[i];
  }
  for (int i = 0; i < na; i++)
    if (find(lb, nb, la[i]) < 0) lr[nr++] = la[i];
  for (int i = 0; i < nb; i++)
    if (find(la, na, lb[i]) < 0) lr[nr++] = lb[i];
  *ident = true;
  for (int i = 0; i < no; i++) {
    perm[i] = find(lr, nr, e->lab[2][i]);
    *ident = *ident && perm[i] == i;
  }
}

kdc_value_id kdc_fe_einsum_lower(kdc_func *f, const kdc_fe_einsum *e, kdc_value_id a,
                                 kdc_value_id b) {
  int8_t la[KDC_MAX_RANK], lb[KDC_MAX_RANK];
  int na = e->n[0], nb = e->n[1];
  memcpy(la, e->lab[0], sizeof la);
  memcpy(lb, e->lab[1], sizeof lb);
  a = sum_private(f, a, la, &na, lb, nb, e->lab[2], e->n[2]);
  b = sum_private(f, b, lb, &nb, la, na, e->lab[2], e->n[2]);
  kdc_attr_dot d;
  int64_t perm[KDC_MAX_RANK];
  bool ident;
  einsum_dot(e, la, na, lb, nb, &d, perm, &ident);
  if (!ident) {
    /* The operands the other way round give the output's order without a
     * transpose (MultiHeadAttention's scores "aecd,abcd->acbe" take the
     * query's dims before the key's): each element is the same sum of the
     * same products, and no consumer reads the scores across their rows. */
    kdc_attr_dot d2;
    int64_t perm2[KDC_MAX_RANK];
    bool ident2;
    einsum_dot(e, lb, nb, la, na, &d2, perm2, &ident2);
    if (ident2) return kdc_ir_dot(f, b, a, &d2);
  }
  kdc_value_id y = kdc_ir_dot(f, a, b, &d);
  return ident ? y : kdc_ir_transpose(f, y, perm);
}

/* ---- EinsumDense ---------------------------------------------------------- */

/* Keras' three forms; *|left| / *|right| tell where the "..." is. */
static bool keras_form(const char *eq, bool *left, bool *right) {
  const char *comma = strchr(eq, ','), *arrow = strstr(eq, "->");
  if (!comma || !arrow) return false;
  const char *x = strstr(eq, "..."), *z = strstr(arrow, "...");
  const char *y = strstr(comma, "...");
  *left = x == eq && z == arrow + 2;
  *right = x && x > eq + 1 && x + 3 == comma && z && !strcmp(z, "...");
  if (y && y < arrow) return false;
  return (!x && !z) || *left || *right;
}

kdc_status kdc_fe_einsum_dense_shapes(const kdc_keras_layer *l, const kdc_kshape *x,
                                      kdc_fe_einsum *e, kdc_kshape *kernel, kdc_kshape *bias,
                                      bool *has_bias, kdc_kshape *out) {
  const char *eq, *bias_axes;
  KDC_RETURN_IF_ERROR(kdc_fe_cfg_str(l, "equation", NULL, &eq));
  KDC_RETURN_IF_ERROR(kdc_fe_cfg_str(l, "bias_axes", "", &bias_axes));
  bool left, right;
  if (!keras_form(eq, &left, &right))
    return kdc_fe_layer_err(l, KDC_INVALID_INPUT, "config.equation: \"%s\" is not one of Keras' "
                            "forms [X],[Y]->[Z], ...[X],[Y]->...[Z], [X]...,[Y]->[Z]...", eq);
  /* the kernel has no "...": its rank is its letter count */
  const char *comma = strchr(eq, ','), *arrow = strstr(eq, "->");
  int kr = 0;
  for (const char *p = comma + 1; p < arrow; p++) kr += letter_id(*p) >= 0;
  KDC_RETURN_IF_ERROR(kdc_fe_einsum_parse(l, "equation", eq, x->rank, kr, e));
  /* partial output shape: int or list (null entries: taken from the input) */
  kdc_kshape part;
  json_object *os = kdc_fe_get(l->config, "output_shape");
  const char *at = kdc_fe_join(l->model->arena, l->loc, "config.output_shape");
  if (json_object_is_type(os, json_type_int))
    part = kdc_kshape_make(1, (int64_t[]){json_object_get_int64(os)});
  else KDC_RETURN_IF_ERROR(kdc_fe_parse_shape(l->model, os, at, &part));
  int ne = 0; /* input dims under "..." (with the batch dim when left-elided) */
  for (int i = 0; i < e->n[0]; i++) ne += e->lab[0][i] >= ELL;
  /* Keras: output_shape = [batch] + partial (+ the elided dims), so the
   * partial shape names every output dim but the first and the "..." ones */
  int want = left ? e->n[2] - ne : e->n[2] - 1 - ne;
  if (part.rank != want)
    return kdc_fe_err(l->model, KDC_INVALID_INPUT, at, "expected %d dims for equation \"%s\", "
                      "got %d (EinsumDense \"%s\")", want, eq, part.rank, l->name);
  *out = (kdc_kshape){.rank = e->n[2]};
  int k = 0;
  for (int i = 0; i < e->n[2]; i++) {
    int8_t lab = e->lab[2][i];
    int xi = find(e->lab[0], e->n[0], lab);
    bool from_part = !(lab >= ELL) && !(i == 0 && !left);
    int64_t d = from_part ? part.dims[k++] : -1;
    if (d < 0 && xi >= 0) d = x->dims[xi];
    else if (d >= 0 && xi >= 0 && x->dims[xi] >= 0 && x->dims[xi] != d)
      return kdc_fe_err(l->model, KDC_INVALID_INPUT, at, "output dim %lld for label '%c' differs "
                        "from the input's %lld (EinsumDense \"%s\")", (long long)d,
                        lab < 26 ? 'a' + lab : 'A' + lab - 26, (long long)x->dims[xi], l->name);
    out->dims[i] = d;
  }
  *kernel = (kdc_kshape){.rank = e->n[1]};
  for (int i = 0; i < e->n[1]; i++) {
    int8_t lab = e->lab[1][i];
    int oi = find(e->lab[2], e->n[2], lab), xi = find(e->lab[0], e->n[0], lab);
    kernel->dims[i] = oi >= 0 ? out->dims[oi] : x->dims[xi];
    if (oi < 0 && xi < 0)
      return kdc_fe_layer_err(l, KDC_INVALID_INPUT, "config.equation: weight label '%c' of \"%s\" "
                              "is in neither the input nor the output", lab < 26 ? 'a' + lab :
                              'A' + lab - 26, eq);
  }
  *has_bias = bias_axes[0] != 0;
  if (*has_bias) {
    int first = e->n[2];
    for (const char *p = bias_axes; *p; p++) {
      int oi = letter_id(*p) >= 0 ? find(e->lab[2], e->n[2], (int8_t)letter_id(*p)) : -1;
      if (oi < 0)
        return kdc_fe_layer_err(l, KDC_INVALID_INPUT, "config.bias_axes: '%c' is not in the "
                                "output of \"%s\"", *p, eq);
      if (oi < first) first = oi;
    }
    *bias = (kdc_kshape){.rank = e->n[2] - first};
    for (int i = first; i < e->n[2]; i++) {
      int8_t lab = e->lab[2][i];
      bool in = lab < ELL && strchr(bias_axes, lab < 26 ? 'a' + lab : 'A' + lab - 26);
      bias->dims[i - first] = in ? out->dims[i] : 1;
    }
  }
  return NULL;
}

kdc_status kdc_fe_infer_einsum_dense(kdc_infer_args *a) {
  const kdc_keras_layer *l = a->l;
  if (a->node->n_in != 1)
    return kdc_fe_layer_err(l, KDC_INVALID_INPUT, "expected 1 input tensor, got %d", a->node->n_in);
  const char *act;
  KDC_RETURN_IF_ERROR(kdc_fe_cfg_activation(l, "activation", &act));
  if (!kdc_fe_is_null(kdc_fe_get(l->config, "quantization_config")) ||
      !kdc_fe_is_null(kdc_fe_get(l->config, "lora_rank")))
    return kdc_fe_layer_err(l, KDC_UNSUPPORTED, "quantized or LoRA EinsumDense layers are not "
                            "supported");
  kdc_fe_einsum e;
  kdc_kshape k, b, o;
  bool has_b;
  KDC_RETURN_IF_ERROR(kdc_fe_einsum_dense_shapes(l, &a->in[0], &e, &k, &b, &has_b, &o));
  KDC_RETURN_IF_ERROR(
      kdc_fe_add_var(a, "kernel", &k, true, "kernel_initializer", "glorot_uniform"));
  if (has_b) KDC_RETURN_IF_ERROR(kdc_fe_add_var(a, "bias", &b, true, "bias_initializer", "zeros"));
  kdc_fe_set_outputs(a, 1, &o);
  return NULL;
}
