/*
 * api/auto_layout.c: `kdc compile --layout auto` (issue 20; docs/layout.md
 * "--layout auto", docs/sharding.md "Cost model").
 *
 * Candidates are ordinary LayoutMaps, built from the model's variables:
 * every layer with weights is a *unit* with one choice out of
 *   replicated   no rule;
 *   column       Dense / EinsumDense / Conv: the kernel's last (output) dim
 *                and the bias over the model axis; MultiHeadAttention: the
 *                heads of query/key/value (kernel dim 1, bias dim 0) and of
 *                attention_output (kernel dim 0); Embedding: the features;
 *   row          Dense / EinsumDense / Conv: the kernel's input dim (dim 0;
 *                a conv's dim rank-2); Embedding: the vocabulary;
 *   fsdp         every weight of rank >= 2 split on its last divisible dim
 *                over the data axis (ZeRO-3 / FSDP: stored 1/n, all_gathered
 *                where used; the optimizer state follows its weight);
 * and a candidate is one choice per unit, written as rules
 * `(d1|d3)/kernel: [null, "model"]` (an alternation of the layer paths
 * sharing a rule), batch over the mesh's first axis -- a layout.json a user
 * could have written.  DataParallel (no layout: the batch over every axis)
 * is a candidate too.  The model axis is the mesh's second axis, or on a
 * 1-D mesh its only one (the batch is then split over it as well).
 *
 * Search: the whole-model strategies first (data parallel, batch over the
 * data axis only, Megatron -- consecutive Dense / Conv units alternate
 * column, row, attention splits its heads --, FSDP), then one greedy sweep
 * over groups of alike units (same class, same weight shapes, same place
 * in a column/row pair), each group trying every legal choice on top of the
 * best so far.  A candidate is compiled through the frontend and the whole
 * pass pipeline (no codegen) and scored by passes/step_cost.c: predicted
 * step time of train_step (predict without training) and peak memory per
 * device.  With a memory limit, a candidate whose weights alone exceed it
 * is pruned before it is compiled, and one whose peak exceeds it never wins.
 */
#include <json-c/json.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "api/api.h"
#include "common/io.h"
#include "frontend/frontend.h"
#include "frontend/layout.h"
#include "passes/passes.h"

enum choice { CH_REP, CH_COL, CH_ROW, CH_FSDP, CH_COUNT };
static const char *const choice_name[CH_COUNT] = {"replicated", "column", "row", "fsdp"};

enum unit_kind { U_OTHER, U_DENSE, U_CONV, U_MHA, U_EMBED };

typedef struct unit {
  const kdc_keras_layer *layer;
  enum unit_kind kind;
  int n_vars;
  const kdc_keras_var **vars;
  bool legal[CH_COUNT];
  int megatron;       /* the Megatron strategy's choice */
  int group;          /* alike units share a group */
} unit;

typedef struct cand {
  char name[96];
  bool flat_dp;       /* no layout: DataParallel over every axis */
  unsigned char *ch;  /* one choice per unit */
  bool compiled, pruned, failed;
  kdc_step_cost cost;
  int64_t weights_lb; /* weight bytes per device from the layout alone */
} cand;

typedef struct search {
  const kdc_keras_model *km;
  const kdc_mesh *mesh;
  int64_t batch;
  const kdc_train_options *train;
  uint64_t seed;
  const kdc_auto_options *ao;
  kdc_machine mc;
  int data_axis, model_axis;
  int n_units;
  unit *units;
  int n_cands;
  size_t cap_cands;
  cand *cands;
  FILE *notes;
  int n_failed;
  kdc_status first_err;  /* the first candidate's failure (owned) */
} search;

/* ---- the machine file -------------------------------------------------------- */

static kdc_status num_field(const char *file, const char *key, json_object *v, double *out) {
  if (!json_object_is_type(v, json_type_double) && !json_object_is_type(v, json_type_int))
    return KDC_ERR(KDC_INVALID_INPUT, "%s: %s: expected a positive number", file, key);
  double d = json_object_get_double(v);
  if (!(d > 0) || !isfinite(d))
    return KDC_ERR(KDC_INVALID_INPUT, "%s: %s: expected a positive number, got %g", file, key, d);
  *out = d;
  return NULL;
}

static kdc_status axis_fields(const char *file, const char *name, json_object *o,
                              kdc_machine_axis *a) {
  if (!json_object_is_type(o, json_type_object))
    return KDC_ERR(KDC_INVALID_INPUT, "%s: axes[\"%s\"]: expected an object with latency_s and "
                   "bytes_per_s", file, name);
  json_object_object_foreach(o, k, v) {
    char where[96];
    snprintf(where, sizeof where, "axes[\"%.40s\"].%.40s", name, k);
    if (!strcmp(k, "latency_s")) KDC_RETURN_IF_ERROR(num_field(file, where, v, &a->latency_s));
    else if (!strcmp(k, "bytes_per_s")) KDC_RETURN_IF_ERROR(num_field(file, where, v, &a->bytes_per_s));
    else if (!strcmp(k, "move_bytes_per_s"))
      KDC_RETURN_IF_ERROR(num_field(file, where, v, &a->move_bytes_per_s));
    else return KDC_ERR(KDC_INVALID_INPUT, "%s: %s: unknown key (latency_s, bytes_per_s, "
                        "move_bytes_per_s)", file, where);
  }
  return NULL;
}

kdc_status kdc_api_machine_load(const char *path, kdc_machine *mc) {
  kdc_machine_defaults(mc);
  if (!path) return NULL;
  void *data = NULL;
  size_t size = 0;
  KDC_RETURN_IF_ERROR(kdc_file_read_all(path, &data, &size));
  json_tokener *tok = json_tokener_new();
  json_tokener_set_flags(tok, JSON_TOKENER_STRICT | JSON_TOKENER_VALIDATE_UTF8);
  json_object *j = size > (size_t)1 << 30 ? NULL : json_tokener_parse_ex(tok, data, (int)size);
  enum json_tokener_error e = json_tokener_get_error(tok);
  if (j && e == json_tokener_success && json_tokener_get_parse_end(tok) < size) e = json_tokener_error_parse_unexpected;
  json_tokener_free(tok);
  free(data);
  if (!j || e != json_tokener_success) {
    json_object_put(j);
    return KDC_ERR(KDC_INVALID_INPUT, "%s: --machine: not a JSON object: %s", path,
                   e == json_tokener_continue ? "unexpected end of file" : json_tokener_error_desc(e));
  }
  kdc_status st = NULL;
  if (!json_object_is_type(j, json_type_object))
    st = KDC_ERR(KDC_INVALID_INPUT, "%s: --machine: expected a JSON object", path);
  snprintf(mc->name, sizeof mc->name, "%.63s", path);
  if (!st) {
    json_object_object_foreach(j, k, v) {
      double d = 0;
      if (st) break;
      if (!strcmp(k, "name")) {
        if (!json_object_is_type(v, json_type_string))
          st = KDC_ERR(KDC_INVALID_INPUT, "%s: name: expected a string", path);
        else
          snprintf(mc->name, sizeof mc->name, "%.63s", json_object_get_string(v));
      } else if (!strcmp(k, "gemm_flops_per_s")) {
        st = num_field(path, k, v, &mc->gemm_flops_per_s);
      } else if (!strcmp(k, "bytes_per_s")) {
        st = num_field(path, k, v, &mc->bytes_per_s);
      } else if (!strcmp(k, "step_s")) {
        st = num_field(path, k, v, &mc->step_s);
      } else if (!strcmp(k, "sync_s") || !strcmp(k, "gemm_m0") || !strcmp(k, "gemm_n0")) {
        /* 0 allowed: no segment cost, no narrow-GEMM penalty */
        double *f = !strcmp(k, "sync_s") ? &mc->sync_s : !strcmp(k, "gemm_m0") ? &mc->gemm_m0
                                                                                : &mc->gemm_n0;
        if (json_object_is_type(v, json_type_int) && json_object_get_int64(v) == 0)
          *f = 0;
        else
          st = num_field(path, k, v, f);
      } else if (!strcmp(k, "shared_gathers")) {
        if (!json_object_is_type(v, json_type_boolean))
          st = KDC_ERR(KDC_INVALID_INPUT, "%s: shared_gathers: expected true or false", path);
        else
          mc->shared_gathers = json_object_get_boolean(v);
      } else if (!strcmp(k, "lanes")) {
        if (!json_object_is_type(v, json_type_int) || json_object_get_int64(v) < 0 ||
            json_object_get_int64(v) > 1 << 20)
          st = KDC_ERR(KDC_INVALID_INPUT, "%s: lanes: expected an integer >= 0 (0: every device "
                       "computes at once)", path);
        else
          mc->lanes = (int)json_object_get_int64(v);
      } else if (!strcmp(k, "axes")) {
        if (!json_object_is_type(v, json_type_object)) {
          st = KDC_ERR(KDC_INVALID_INPUT, "%s: axes: expected an object of mesh axis names "
                       "(\"*\": every other axis)", path);
          break;
        }
        json_object_object_foreach(v, an, av) {
          if (st) break;
          if (!strcmp(an, "*")) {
            st = axis_fields(path, an, av, &mc->default_axis);
            continue;
          }
          if (mc->n_axes == KDC_MAX_MESH_AXES || strlen(an) >= sizeof mc->axes[0].name) {
            st = KDC_ERR(KDC_INVALID_INPUT, "%s: axes[\"%s\"]: at most %d axes of names up to 31 "
                         "bytes", path, an, KDC_MAX_MESH_AXES);
            break;
          }
          kdc_machine_axis *a = &mc->axes[mc->n_axes++];
          *a = mc->default_axis;
          snprintf(a->name, sizeof a->name, "%s", an);
          st = axis_fields(path, an, av, a);
        }
      } else {
        st = KDC_ERR(KDC_INVALID_INPUT, "%s: %s: unknown key (name, gemm_flops_per_s, bytes_per_s, "
                     "step_s, gemm_m0, gemm_n0, lanes, sync_s, shared_gathers, axes)", path, k);
      }
      (void)d;
    }
  }
  json_object_put(j);
  return st;
}

/* ---- sizes ---------------------------------------------------------------------- */

kdc_status kdc_api_parse_size(const char *flag, const char *s, int64_t *out) {
  static const struct { const char *suffix; double mul; } units[] = {
      {"", 1}, {"B", 1}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12},
      {"KiB", 1024.0}, {"MiB", 1048576.0}, {"GiB", 1073741824.0}, {"TiB", 1099511627776.0}};
  const char *p = s;
  double v = 0;
  int digits = 0;
  while (*p >= '0' && *p <= '9') v = v * 10 + (*p++ - '0'), digits++;
  if (*p == '.' && p[1] >= '0' && p[1] <= '9') {
    double f = 0.1;
    for (p++; *p >= '0' && *p <= '9'; p++, f /= 10) v += (*p - '0') * f, digits++;
  }
  for (size_t i = 0; digits && i < sizeof units / sizeof units[0]; i++)
    if (!strcmp(p, units[i].suffix) && v * units[i].mul >= 1 && v * units[i].mul < 9.2e18) {
      *out = (int64_t)(v * units[i].mul);
      return NULL;
    }
  return KDC_ERR(KDC_INVALID_INPUT, "%s \"%s\": expected a size in bytes such as 512MiB or 2GB "
                 "(units B, KB, MB, GB, TB, KiB, MiB, GiB, TiB)", flag, s);
}

/* ---- units and their legal choices ------------------------------------------- */

static bool divides(const kdc_keras_var *v, int dim, int64_t n) {
  int r = v->shape.rank;
  if (dim < 0) dim += r;
  return dim >= 0 && dim < r && v->shape.dims[dim] % n == 0 && v->shape.dims[dim] >= n;
}

static const char *rel_name(const kdc_keras_var *v) {
  size_t n = strlen(v->layer->path);
  if (!strncmp(v->path, v->layer->path, n) && v->path[n] == '/') return v->path + n + 1;
  return NULL;
}

static bool ends_with(const char *s, const char *t) {
  size_t a = strlen(s), b = strlen(t);
  return a >= b && !strcmp(s + a - b, t);
}

/* The dim of |v| that |c| splits (-1: none) and over which axis. */
static int split_dim(const search *S, const unit *u, const kdc_keras_var *v, int c, int *axis) {
  int r = v->shape.rank;
  *axis = S->model_axis;
  switch (c) {
  case CH_COL:
    if (u->kind == U_MHA) {
      if (ends_with(v->path, "attention_output/kernel")) return 0;
      if (ends_with(v->path, "attention_output/bias")) return -1;
      if (ends_with(v->path, "/kernel")) return r == 3 ? 1 : -1;
      if (ends_with(v->path, "/bias")) return r == 2 ? 0 : -1;
      return -1;
    }
    if (u->kind == U_EMBED) return r == 2 ? 1 : -1;
    return r >= 1 ? r - 1 : -1;  /* kernel [.., out], bias [out] */
  case CH_ROW:
    if (u->kind == U_EMBED) return r == 2 ? 0 : -1;
    if (r < 2) return -1;        /* the bias of a row split stays whole */
    return u->kind == U_CONV ? r - 2 : 0;
  case CH_FSDP:
    *axis = S->data_axis;
    if (r < 2) return -1;
    /* the output (last) dim first: the weight is all_gathered where it is
     * used (FSDP); a split contraction dim would move the activations */
    /* a recurrent cell's last dim packs the gates (G·units, taken per
     * gate: docs/sharding.md), so it is left alone */
    for (int d = strstr(v->path, "_cell/") ? r - 2 : r - 1; d >= 0; d--)
      if (divides(v, d, S->mesh->sizes[S->data_axis])) return d;
    return -1;
  default:
    return -1;
  }
}

static void classify(search *S, unit *u) {
  const char *cn = u->layer->class_name;
  if (!strcmp(cn, "Dense") || !strcmp(cn, "EinsumDense")) u->kind = U_DENSE;
  else if (!strcmp(cn, "Conv1D") || !strcmp(cn, "Conv2D") || !strcmp(cn, "Conv3D")) u->kind = U_CONV;
  else if (!strcmp(cn, "MultiHeadAttention")) u->kind = U_MHA;
  else if (!strcmp(cn, "Embedding")) u->kind = U_EMBED;
  else u->kind = U_OTHER;
  if (u->kind == U_CONV) {
    json_object *g = NULL;
    if (u->layer->config && json_object_object_get_ex(u->layer->config, "groups", &g) &&
        json_object_get_int64(g) != 1)
      u->kind = U_OTHER;
  }
  u->legal[CH_REP] = true;
  for (int c = CH_COL; c < CH_COUNT; c++) {
    if (u->kind == U_OTHER && c != CH_FSDP) continue;
    if (c == CH_ROW && u->kind == U_MHA) continue;
    bool any = false, ok = true;
    for (int i = 0; i < u->n_vars && ok; i++) {
      int axis, d = split_dim(S, u, u->vars[i], c, &axis);
      if (d < 0) continue;
      if (!rel_name(u->vars[i])) ok = false;
      else if (!divides(u->vars[i], d, S->mesh->sizes[axis])) ok = false;
      any = true;
    }
    /* the model axis is the data axis on a 1-D mesh: fsdp is then row/column */
    if (c == CH_FSDP && S->model_axis == S->data_axis && u->kind != U_OTHER) ok = false;
    u->legal[c] = any && ok;
  }
  /* a column or row split of a kernel whose bias is not split that way is
   * still legal: the bias stays whole (row) or follows (column) */
}

static void make_units(search *S) {
  const kdc_keras_model *km = S->km;
  S->units = kdc_xcalloc((size_t)km->n_vars + 1, sizeof *S->units);
  for (int i = 0; i < km->n_vars; i++) {
    const kdc_keras_var *v = km->vars[i];
    unit *u = NULL;
    for (int k = S->n_units - 1; k >= 0 && !u; k--)
      if (S->units[k].layer == v->layer) u = &S->units[k];
    if (!u) {
      u = &S->units[S->n_units++];
      u->layer = v->layer;
      u->vars = kdc_xcalloc((size_t)v->layer->n_vars + 1, sizeof *u->vars);
    }
    if (u->n_vars < v->layer->n_vars + 1) u->vars[u->n_vars++] = v;
  }
  for (int k = 0; k < S->n_units; k++) classify(S, &S->units[k]);
  /* Megatron: consecutive Dense / Conv units alternate column, row;
   * attention splits its heads and starts a new pair */
  int parity = 0;
  for (int k = 0; k < S->n_units; k++) {
    unit *u = &S->units[k];
    u->megatron = CH_REP;
    if (u->kind == U_MHA && u->legal[CH_COL]) {
      u->megatron = CH_COL;
      parity = 0;
    } else if (u->kind == U_DENSE || u->kind == U_CONV) {
      int want = parity ? CH_ROW : CH_COL;
      if (u->legal[want]) {
        u->megatron = want;
        parity ^= 1;
      } else {
        parity = 0;
      }
    }
  }
  /* groups: same class, same weight shapes, same Megatron role */
  for (int k = 0; k < S->n_units; k++) {
    unit *u = &S->units[k];
    u->group = k;
    for (int j = 0; j < k && u->group == k; j++) {
      const unit *w = &S->units[j];
      if (w->group != j || w->megatron != u->megatron || w->n_vars != u->n_vars ||
          strcmp(w->layer->class_name, u->layer->class_name))
        continue;
      bool same = true;
      for (int i = 0; i < u->n_vars && same; i++) {
        const kdc_kshape *a = &u->vars[i]->shape, *b = &w->vars[i]->shape;
        same = a->rank == b->rank && !memcmp(a->dims, b->dims, sizeof a->dims[0] * (size_t)a->rank);
      }
      if (same) u->group = j;
    }
  }
}

/* ---- candidates as layout.json text --------------------------------------------- */

static void put_regex_escaped(FILE *o, const char *s) {
  /* a Python regex literal inside a JSON string */
  for (; *s; s++) {
    if (strchr(".^$*+?{}[]|()", *s)) fputs("\\\\", o);
    else if (*s == '\\') fputs("\\\\\\", o);
    if (*s == '"') fputc('\\', o);
    fputc(*s, o);
  }
}

/* The layout.json of |c| (NULL for flat DataParallel). */
static char *layout_text(const search *S, const cand *c) {
  if (c->flat_dp) return NULL;
  char *text = NULL;
  size_t len = 0;
  FILE *o = open_memstream(&text, &len);
  if (!o) return NULL;
  fprintf(o, "{\n  \"batch_dim_name\": \"%s\",\n  \"layout_map\": {", S->mesh->names[S->data_axis]);
  int n_rules = 0;
  /* rules grouped by (relative variable name, spec), in first-use order */
  bool *done = kdc_xcalloc((size_t)S->n_units * 64 + 1, sizeof *done);
  for (int k = 0; k < S->n_units; k++) {
    const unit *u = &S->units[k];
    for (int i = 0; i < u->n_vars && i < 64; i++) {
      if (done[k * 64 + i]) continue;
      int axis, d = split_dim(S, u, u->vars[i], c->ch[k], &axis);
      if (d < 0 || c->ch[k] == CH_REP) continue;
      const char *rel = rel_name(u->vars[i]);
      /* every unit with the same relative name and split */
      fprintf(o, "%s\n    \"", n_rules++ ? "," : "");
      int members = 0;
      for (int j = k; j < S->n_units; j++) {
        const unit *w = &S->units[j];
        for (int q = 0; q < w->n_vars && q < 64; q++) {
          if (done[j * 64 + q]) continue;
          int ax2, d2 = split_dim(S, w, w->vars[q], c->ch[j], &ax2);
          if (c->ch[j] == CH_REP || d2 != d || ax2 != axis || w->vars[q]->shape.rank != u->vars[i]->shape.rank ||
              strcmp(rel_name(w->vars[q]), rel))
            continue;
          done[j * 64 + q] = true;
          members++;
        }
      }
      if (members > 1) {
        fputc('(', o);
        int m = 0;
        for (int j = k; j < S->n_units; j++) {
          const unit *w = &S->units[j];
          for (int q = 0; q < w->n_vars && q < 64; q++) {
            int ax2, d2 = split_dim(S, w, w->vars[q], c->ch[j], &ax2);
            if (c->ch[j] == CH_REP || d2 != d || ax2 != axis ||
                w->vars[q]->shape.rank != u->vars[i]->shape.rank || strcmp(rel_name(w->vars[q]), rel))
              continue;
            if (m++) fputc('|', o);
            put_regex_escaped(o, w->layer->path);
          }
        }
        fputc(')', o);
      } else {
        put_regex_escaped(o, u->layer->path);
      }
      fputc('/', o);
      put_regex_escaped(o, rel);
      fprintf(o, "\": [");
      for (int q = 0; q <= d; q++)
        fprintf(o, q < d ? "null, " : "\"%s\"", S->mesh->names[axis]);
      fprintf(o, "]");
    }
  }
  free(done);
  fprintf(o, "%s}\n}\n", n_rules ? "\n  " : "");
  fclose(o);
  return text;
}

/* Weight bytes per device that |c| stores, from the layout alone. */
static int64_t weights_lower_bound(const search *S, const cand *c) {
  int64_t b = 0;
  for (int k = 0; k < S->n_units; k++) {
    const unit *u = &S->units[k];
    for (int i = 0; i < u->n_vars; i++) {
      const kdc_keras_var *v = u->vars[i];
      int64_t n = 4;
      for (int d = 0; d < v->shape.rank; d++) n *= v->shape.dims[d];
      int axis, d = c->flat_dp ? -1 : split_dim(S, u, v, c->ch[k], &axis);
      if (d >= 0 && c->ch[k] != CH_REP) n /= S->mesh->sizes[axis];
      b += n;
    }
  }
  return b;
}

/* ---- evaluation ----------------------------------------------------------------- */

static cand *new_cand(search *S, const char *name, const unsigned char *ch, bool flat) {
  KDC_GROW(S->cands, S->cap_cands, (size_t)S->n_cands + 1);
  cand *c = &S->cands[S->n_cands++];
  memset(c, 0, sizeof *c);
  snprintf(c->name, sizeof c->name, "%s", name);
  c->flat_dp = flat;
  c->ch = kdc_xcalloc((size_t)S->n_units + 1, 1);
  if (ch) memcpy(c->ch, ch, (size_t)S->n_units);
  return c;
}

static const char *scored_func(const search *S) { return S->train ? "train_step" : "predict"; }

/* The cost of the layout |text| (NULL: DataParallel over every axis):
 * compiled through the frontend and every pass, no codegen. */
static kdc_status layout_cost(const kdc_keras_model *km, const kdc_mesh *mesh, int64_t batch,
                              const kdc_train_options *train, uint64_t seed,
                              const kdc_machine *mc, const char *text, kdc_step_cost *out) {
  kdc_layout *layout = NULL;
  kdc_module *mod = NULL;
  kdc_status st = NULL;
  if (text) st = kdc_layout_parse(text, strlen(text), "layout auto", &layout);
  if (!st && layout) st = kdc_layout_check(layout, mesh);
  if (!st) {
    kdc_lower_options lo = {.batch = batch, .mesh = mesh, .layout = layout,
                            .train_forward = train != NULL, .dropout_seed = seed,
                            .output_masks = train != NULL};
    st = kdc_frontend_lower(km, &lo, &mod);
  }
  if (!st) {
    kdc_pass_options po;
    memset(&po, 0, sizeof po);
    po.train = train;
    st = kdc_pass_pipeline_run(mod, &po);
  }
  const char *fn = train ? "train_step" : "predict";
  const kdc_func *f = st ? NULL : kdc_ir_module_find_func(mod, fn);
  if (!st && !f) st = KDC_ERR(KDC_INTERNAL, "--layout auto: no function %s", fn);
  if (!st) st = kdc_step_cost_of(mod, f, mc, out);
  kdc_ir_module_destroy(mod);
  kdc_layout_free(layout);
  return st;
}

kdc_status kdc_api_layout_cost(const kdc_keras_model *km, const kdc_mesh *mesh, int64_t batch,
                               const kdc_train_options *train, uint64_t seed,
                               const char *machine_path, const char *layout_text,
                               kdc_step_cost *out) {
  kdc_machine mc;
  KDC_RETURN_IF_ERROR(kdc_api_machine_load(machine_path, &mc));
  return layout_cost(km, mesh, batch, train, seed, &mc, layout_text, out);
}

static kdc_status evaluate(search *S, cand *c) {
  c->weights_lb = weights_lower_bound(S, c);
  if (S->ao->memory_limit > 0 && c->weights_lb > S->ao->memory_limit) {
    c->pruned = true;
    return NULL;
  }
  char *text = layout_text(S, c);
  if (!c->flat_dp && !text) return KDC_ERR(KDC_OUT_OF_MEMORY, "--layout auto: out of memory");
  kdc_status st = layout_cost(S->km, S->mesh, S->batch, S->train, S->seed, &S->mc, text, &c->cost);
  if (!st) {
    c->compiled = true;
  } else if (kdc_status_code(st) != KDC_OUT_OF_MEMORY) {
    /* a candidate kdc cannot compile is not a choice; say so once */
    c->failed = true;
    if (S->n_failed++ < 4)
      fprintf(S->notes, "kdc: note: --layout auto: candidate %s skipped: %s\n", c->name,
              kdc_status_message(st));
    if (!S->first_err) S->first_err = st;
    else kdc_status_free(st);
    st = NULL;
  }
  free(text);
  return st;
}

static bool fits(const search *S, const cand *c) {
  return c->compiled && (S->ao->memory_limit <= 0 || c->cost.peak_bytes <= S->ao->memory_limit);
}

/* A layout is faster than DataParallel only when predicted faster by more
 * than this: below it the cost model cannot tell them apart (the virtual
 * mesh's MNIST training step on mesh 8, DataParallel against d2's rows,
 * predicted 0.3% apart, measured 12% one way and 30% the other in two runs
 * minutes apart, docs/sharding.md), and DataParallel is no LayoutMap and
 * the runtime's most shared path (stacked GEMMs, gathers made in place). */
#define DP_MARGIN 0.01

static bool is_dp(const cand *c) { return !strcmp(c->name, "data_parallel"); }

/* a better than b under the objective (both compiled) */
static bool better(const search *S, const cand *a, const cand *b) {
  if (!b) return true;
  if (S->ao->objective_memory) {
    if (a->cost.peak_bytes != b->cost.peak_bytes) return a->cost.peak_bytes < b->cost.peak_bytes;
    return a->cost.step_s < b->cost.step_s;
  }
  double margin = is_dp(b) && !is_dp(a) ? DP_MARGIN : is_dp(a) && !is_dp(b) ? -DP_MARGIN : 1e-9;
  return a->cost.step_s < b->cost.step_s * (1 - margin);
}

/* The same predicted cost: another layout that compiles to the same plan
 * (propagation from the neighbours splits the tensor anyway). */
static bool same_cost(const cand *a, const cand *b) {
  return a->cost.peak_bytes == b->cost.peak_bytes &&
         fabs(a->cost.step_s - b->cost.step_s) <= 1e-9 * fmax(a->cost.step_s, 1e-12) &&
         a->cost.n_collectives == b->cost.n_collectives;
}

static int best_index(const search *S, int skip, bool layout_only) {
  int best = -1;
  for (int i = 0; i < S->n_cands; i++) {
    const cand *c = &S->cands[i];
    if (i == skip || !fits(S, c) || (layout_only && c->flat_dp)) continue;
    if (skip >= 0 && !S->cands[skip].flat_dp && !c->flat_dp &&
        !memcmp(c->ch, S->cands[skip].ch, (size_t)S->n_units))
      continue;  /* the same layout again */
    if (skip >= 0 && same_cost(c, &S->cands[skip])) continue;
    if (best < 0 || better(S, c, &S->cands[best])) best = i;
  }
  return best;
}

static kdc_status run_search(search *S) {
  unsigned char *ch = kdc_xcalloc((size_t)S->n_units + 1, 1);
  kdc_status st = NULL;
  char name[96];
  /* whole-model strategies */
  st = evaluate(S, new_cand(S, "data_parallel", ch, S->mesh->naxes > 1));
  if (!st && S->mesh->naxes > 1) {
    snprintf(name, sizeof name, "batch_over_%s", S->mesh->names[S->data_axis]);
    st = evaluate(S, new_cand(S, name, ch, false));
  }
  bool any_mp = false, any_fsdp = false;
  for (int k = 0; k < S->n_units; k++) {
    ch[k] = (unsigned char)S->units[k].megatron;
    any_mp |= ch[k] != CH_REP;
  }
  if (!st && any_mp) st = evaluate(S, new_cand(S, "megatron", ch, false));
  for (int k = 0; k < S->n_units; k++) {
    ch[k] = S->units[k].legal[CH_FSDP] ? CH_FSDP : CH_REP;
    any_fsdp |= ch[k] != CH_REP;
  }
  if (!st && any_fsdp) st = evaluate(S, new_cand(S, "fsdp", ch, false));
  /* greedy sweep over the groups, from the best layout so far */
  int base = best_index(S, -1, true);
  if (base < 0) {  /* nothing fits yet: start from the smallest weights */
    for (int i = 0; i < S->n_cands; i++)
      if (!S->cands[i].flat_dp && !S->cands[i].failed &&
          (base < 0 || S->cands[i].weights_lb < S->cands[base].weights_lb))
        base = i;
  }
  for (int g = 0; !st && base >= 0 && g < S->n_units; g++) {
    if (S->units[g].group != g) continue;
    for (int c = 0; !st && c < CH_COUNT; c++) {
      if (!S->units[g].legal[c] || S->cands[base].ch[g] == c) continue;
      memcpy(ch, S->cands[base].ch, (size_t)S->n_units);
      for (int k = g; k < S->n_units; k++)
        if (S->units[k].group == g) ch[k] = (unsigned char)c;
      snprintf(name, sizeof name, "%.40s+%.24s:%s", S->cands[base].name, S->units[g].layer->name,
               choice_name[c]);
      cand *nc = new_cand(S, name, ch, false);
      int idx = (int)(nc - S->cands);
      st = evaluate(S, nc);
      if (st) break;
      const cand *b = &S->cands[base], *n = &S->cands[idx];
      bool base_fits = fits(S, b);
      if ((fits(S, n) && (!base_fits || better(S, n, b))) ||
          (!base_fits && n->compiled && n->cost.peak_bytes < b->cost.peak_bytes) ||
          (!base_fits && !b->compiled && n->compiled))
        base = idx;
    }
  }
  free(ch);
  return st;
}

/* ---- the report --------------------------------------------------------------- */

static void put_cost_json(FILE *o, const cand *c) {
  fprintf(o, "{\"name\": \"%s\", \"predicted_step_s\": %.6g, \"compute_s\": %.6g, "
          "\"collective_s\": %.6g, \"collectives\": %lld, \"collective_bytes\": %.0f, "
          "\"peak_bytes\": %lld, \"weight_bytes\": %lld}",
          c->name, c->cost.step_s, c->cost.compute_s, c->cost.coll_s,
          (long long)c->cost.n_collectives, c->cost.coll_bytes, (long long)c->cost.peak_bytes,
          (long long)c->cost.weight_bytes);
}

static void put_cost_text(FILE *o, const cand *c) {
  fprintf(o, "predicted step %.3f ms (compute %.3f ms per device, %lld collectives %.3f ms, "
          "%.0f bytes per device), peak %lld bytes per device",
          c->cost.step_s * 1e3, c->cost.compute_s * 1e3, (long long)c->cost.n_collectives,
          c->cost.coll_s * 1e3, c->cost.coll_bytes, (long long)c->cost.peak_bytes);
}

/* For each unit: the split its tensors got, and the best candidate that
 * differs there. */
static void explain(const search *S, int win, FILE *o) {
  const cand *w = &S->cands[win];
  for (int k = 0; k < S->n_units; k++) {
    const unit *u = &S->units[k];
    int alt = -1, same = -1;
    for (int i = 0; i < S->n_cands; i++) {
      const cand *c = &S->cands[i];
      if (!c->compiled || i == win) continue;
      bool differs = c->flat_dp != w->flat_dp || c->ch[k] != w->ch[k];
      if (differs && same_cost(c, w)) {
        if (same < 0) same = i;
        continue;
      }
      if (differs && (alt < 0 || better(S, c, &S->cands[alt]))) alt = i;
    }
    for (int n = 0; n <= u->n_vars; n++) {
      const char *name = n < u->n_vars ? u->vars[n]->path : u->layer->name;
      if (n == u->n_vars && u->n_vars == 1 && !strcmp(name, u->vars[0]->path)) continue;
      fprintf(o, "@@ auto_layout %s\n", name);
      fprintf(o, "  --layout auto: %s (%s) is %s in the chosen layout \"%s\"", u->layer->name,
              u->layer->class_name, w->flat_dp ? "replicated (DataParallel)" : choice_name[w->ch[k]],
              w->name);
      if (!w->flat_dp && w->ch[k] != CH_REP && n < u->n_vars) {
        int axis, d = split_dim(S, u, u->vars[n], w->ch[k], &axis);
        if (d >= 0) fprintf(o, ": dim %d over %s", d, S->mesh->names[axis]);
        else fprintf(o, ": this tensor stays whole");
      }
      fprintf(o, "\n  chosen: ");
      put_cost_text(o, w);
      fprintf(o, "\n");
      if (same >= 0)
        fprintf(o, "  %s as %s (\"%s\") compiles to a plan of the same cost: propagation from "
                "its neighbours splits it the same way\n", u->layer->name,
                S->cands[same].flat_dp ? "replicated (DataParallel)" : choice_name[S->cands[same].ch[k]],
                S->cands[same].name);
      if (alt >= 0) {
        const cand *a = &S->cands[alt];
        fprintf(o, "  runner-up for %s: %s as %s in \"%s\": ", u->layer->name, u->layer->name,
                a->flat_dp ? "replicated (DataParallel)" : choice_name[a->ch[k]], a->name);
        put_cost_text(o, a);
        fprintf(o, "%s\n", fits(S, a) ? "" : " (over --memory-per-device)");
      } else {
        fprintf(o, "  no other choice for %s was legal (no split divides its dims)\n",
                u->layer->name);
      }
    }
  }
}

static void report(search *S, int win, int second, double secs, kdc_auto_result *r) {
  const cand *w = &S->cands[win];
  r->name = strdup(w->name);
  r->layout_text = layout_text(S, w);
  r->predicted_step_s = w->cost.step_s;
  size_t len = 0;
  FILE *o = open_memstream(&r->metadata, &len);
  if (o) {
    fprintf(o, "{\"objective\": \"%s\", \"scored\": \"%s\", \"machine\": \"%s\", "
            "\"memory_per_device\": %lld, \"candidates\": %d, \"search_s\": %.3f, \"chosen\": ",
            S->ao->objective_memory ? "memory" : "time", scored_func(S), S->mc.name,
            (long long)S->ao->memory_limit, S->n_cands, secs);
    put_cost_json(o, w);
    fprintf(o, ", \"runner_up\": ");
    if (second >= 0) put_cost_json(o, &S->cands[second]);
    else fprintf(o, "null");
    const cand *dp = &S->cands[0];
    fprintf(o, ", \"data_parallel\": ");
    if (dp->compiled) put_cost_json(o, dp);
    else fprintf(o, "null");
    fprintf(o, "}");
    fclose(o);
  }
  o = open_memstream(&r->explain, &len);
  if (o) {
    explain(S, win, o);
    fclose(o);
  }
  fprintf(S->notes, "kdc: note: --layout auto: chose %s of %d candidates in %.2f s: ", w->name,
          S->n_cands, secs);
  put_cost_text(S->notes, w);
  fprintf(S->notes, "\n");
  if (second >= 0) {
    const cand *s2 = &S->cands[second];
    fprintf(S->notes, "kdc: note: --layout auto: runner-up %s: ", s2->name);
    put_cost_text(S->notes, s2);
    fprintf(S->notes, "\n");
  }
  const cand *dp = &S->cands[0];
  if (S->ao->memory_limit > 0 && win != 0 && !fits(S, dp)) {
    int64_t dp_peak = dp->compiled ? dp->cost.peak_bytes : dp->weights_lb;
    fprintf(S->notes, "kdc: note: --layout auto: DataParallel needs %s%lld bytes per device, over "
            "--memory-per-device %lld; %s fits in %lld", dp->compiled ? "" : "at least ",
            (long long)dp_peak, (long long)S->ao->memory_limit, w->name,
            (long long)w->cost.peak_bytes);
    if (dp->compiled && w->cost.step_s > dp->cost.step_s)
      fprintf(S->notes, " and gives up %.3f ms per step (%.3f ms against DataParallel's %.3f ms)",
              (w->cost.step_s - dp->cost.step_s) * 1e3, w->cost.step_s * 1e3, dp->cost.step_s * 1e3);
    else if (dp->compiled)
      fprintf(S->notes, " and is predicted faster too (%.3f ms per step against DataParallel's "
              "%.3f ms)", w->cost.step_s * 1e3, dp->cost.step_s * 1e3);
    fprintf(S->notes, "\n");
  }
  if (w->flat_dp)
    fprintf(S->notes, "kdc: note: --layout auto: DataParallel over all %lld devices (the batch over "
            "every mesh axis) is Keras' DataParallel, not a LayoutMap: compile without --layout; "
            "no layout file is written\n", (long long)kdc_mesh_devices(S->mesh));
}

kdc_status kdc_api_auto_layout(const kdc_keras_model *km, const kdc_mesh *mesh, int64_t batch,
                               const kdc_train_options *train, uint64_t seed,
                               const kdc_auto_options *ao, FILE *notes, kdc_auto_result *out) {
  memset(out, 0, sizeof *out);
  if (!mesh || mesh->naxes == 0)
    return KDC_ERR(KDC_INVALID_INPUT, "--layout auto needs --mesh (e.g. --mesh 2x4)");
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  search S;
  memset(&S, 0, sizeof S);
  S.km = km, S.mesh = mesh, S.batch = batch, S.train = train, S.seed = seed, S.ao = ao;
  S.notes = notes;
  S.data_axis = 0;
  S.model_axis = mesh->naxes > 1 ? 1 : 0;
  kdc_status st = kdc_api_machine_load(ao->machine_path, &S.mc);
  if (!st) {
    make_units(&S);
    st = run_search(&S);
  }
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double secs = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
  if (!st) {
    int win = best_index(&S, -1, false);
    if (win < 0) {
      /* the peaks of the candidates pruned by their weights, for the message */
      for (int i = 0; i < S.n_cands && !st; i++) {
        cand *c = &S.cands[i];
        if (!c->pruned) continue;
        char *text = layout_text(&S, c);
        kdc_status e = layout_cost(km, mesh, batch, train, seed, &S.mc, text, &c->cost);
        c->compiled = e == NULL;
        kdc_status_free(e);
        free(text);
      }
      int64_t smallest = -1;
      const char *sname = "none";
      for (int i = 0; i < S.n_cands; i++) {
        const cand *c = &S.cands[i];
        int64_t p = c->compiled ? c->cost.peak_bytes : -1;
        if (p >= 0 && (smallest < 0 || p < smallest)) smallest = p, sname = c->name;
      }
      if (smallest < 0 && S.first_err) {
        /* nothing compiled: the error the first candidate (DataParallel) met,
         * which is what the model gives without --layout auto */
        st = S.first_err;
        S.first_err = NULL;
      } else if (ao->memory_limit > 0 && smallest >= 0)
        st = KDC_ERR(KDC_INVALID_INPUT, "--memory-per-device %lld: no layout of the %d tried fits: "
                     "the smallest peak found is %lld bytes per device (%s)",
                     (long long)ao->memory_limit, S.n_cands, (long long)smallest, sname);
      else
        st = KDC_ERR(KDC_INVALID_INPUT, "--layout auto: no candidate layout compiled (%d tried)",
                     S.n_cands);
    } else {
      report(&S, win, best_index(&S, win, false), secs, out);
    }
  }
  kdc_status_free(S.first_err);
  for (int i = 0; i < S.n_cands; i++) free(S.cands[i].ch);
  free(S.cands);
  for (int k = 0; k < S.n_units; k++) free(S.units[k].vars);
  free(S.units);
  return st;
}

void kdc_auto_result_free(kdc_auto_result *r) {
  free(r->name);
  free(r->layout_text);
  free(r->metadata);
  free(r->explain);
  memset(r, 0, sizeof *r);
}
