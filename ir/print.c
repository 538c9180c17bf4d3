/*
 * The canonical IR text (STYLE.md 11): printer and the tables it shares with
 * ir/parse.c.  The text is stable (no pointers, value ids are node indices,
 * one node per line, fixed attribute order, single spaces) so golden tests
 * can diff it, and print -> parse -> print is the identity.
 *
 *   module @mnist_mlp {
 *     mesh [data=2, model=4]
 *     weight "d1/kernel" : f32[784,200]
 *     weight "bn/moving_mean" : f32[200] non_trainable
 *     func @predict {
 *       %0 = parameter 0 input "input_layer" : f32[32,784] {data,-}
 *       %1 = parameter 1 weight "d1/kernel" : f32[784,200] {-,model}
 *       %2 = dot_general %0, %1 lhs_contract=[1] rhs_contract=[0] : f32[32,200] group=0 loc "d1"
 *       %3 = constant 0 : f32[]
 *       %4 = constant [1, 2.5, -inf] : f32[3]
 *       return %2 "d1"
 *     }
 *   }
 *
 * Node line: `%N = op [prefix] [operands] [kw=...]* : type [sharding]
 * [group=N] [mem=N] [loc "..."]`.  Prefixes: parameter `INDEX KIND ["name"]
 * [gate_packed]`,
 * constant `SCALAR` (splat) or `[a, b, ...]` (dense, row-major), compare
 * `DIR`, reduce, reduce_window and select_and_scatter `KIND`, scan `@body`, SPMD ops `[axis,...]` (mesh axis names, e.g.
 * `%9 = all_gather [data,model] %8 dim=0 : f32[32,10]`).  Floats print with %.9g, which strtof reads back
 * bit-exactly (nan, inf, -inf, -0 included).  Strings escape `"`, `\` and
 * bytes below 0x20 or 0x7f as \" \\ \n \t \xHH; other bytes pass through.
 */
#include <ctype.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/ir.h"

/* ---- shared tables ------------------------------------------------------- */

static const char *const cmp_names[] = {"eq", "ne", "lt", "le", "gt", "ge"};
static const char *const red_names[] = {"sum", "max", "min", "prod"};
static const char *const kind_names[] = {"input", "label", "weight", "state"};

#define N_OF(a) (sizeof(a) / sizeof((a)[0]))

static bool find_name(const char *const *names, size_t n, const char *s, int *out) {
  for (size_t i = 0; i < n; i++)
    if (strcmp(names[i], s) == 0) {
      *out = (int)i;
      return true;
    }
  return false;
}

const char *kdc_cmp_name(kdc_cmp c) { return (unsigned)c < N_OF(cmp_names) ? cmp_names[c] : "?"; }
const char *kdc_reduce_kind_name(kdc_reduce_kind k) {
  return (unsigned)k < N_OF(red_names) ? red_names[k] : "?";
}
const char *kdc_param_kind_name(kdc_param_kind k) {
  return (unsigned)k < N_OF(kind_names) ? kind_names[k] : "?";
}

bool kdc_cmp_from_name(const char *s, kdc_cmp *out) {
  int i;
  if (!find_name(cmp_names, N_OF(cmp_names), s, &i)) return false;
  *out = (kdc_cmp)i;
  return true;
}

bool kdc_reduce_kind_from_name(const char *s, kdc_reduce_kind *out) {
  int i;
  if (!find_name(red_names, N_OF(red_names), s, &i)) return false;
  *out = (kdc_reduce_kind)i;
  return true;
}

bool kdc_param_kind_from_name(const char *s, kdc_param_kind *out) {
  int i;
  if (!find_name(kind_names, N_OF(kind_names), s, &i)) return false;
  *out = (kdc_param_kind)i;
  return true;
}

#define KW(op, kw, field, scalar, optional) \
  {KDC_OP_##op, kw, offsetof(kdc_attrs, field), scalar, optional}
const kdc_attr_kw kdc_ir_attr_kws[] = {
    KW(IOTA, "dim", dim, true, false),
    KW(BROADCAST, "dims", dims, false, false),
    KW(TRANSPOSE, "perm", dims, false, false),
    KW(SLICE, "start", slice.start, false, false),
    KW(SLICE, "limit", slice.limit, false, false),
    KW(SLICE, "stride", slice.stride, false, false),
    KW(CONCAT, "dim", dim, true, false),
    KW(PAD, "low", pad.low, false, false),
    KW(PAD, "high", pad.high, false, false),
    KW(PAD, "interior", pad.interior, false, false),
    KW(REDUCE, "dims", reduce.dims, false, false),
    KW(DOT, "lhs_batch", dot.lhs_batch, false, true),
    KW(DOT, "rhs_batch", dot.rhs_batch, false, true),
    KW(DOT, "lhs_contract", dot.lhs_contract, false, false),
    KW(DOT, "rhs_contract", dot.rhs_contract, false, false),
    KW(DOT, "bf16_operands", dot.bf16_operands, true, true),
    KW(ALL_GATHER, "dim", coll.dim, true, false),
    KW(REDUCE_SCATTER, "dim", coll.dim, true, false),
    KW(ALL_TO_ALL, "split", coll.dim, true, false),
    KW(ALL_TO_ALL, "concat", coll.dim2, true, false),
    KW(COLLECTIVE_PERMUTE, "shift", coll.shift, true, false),
    KW(SHARD_SLICE, "dim", coll.dim, true, false),
    KW(RNG_UNIFORM, "seed", seed, true, false),
    KW(CONVOLUTION, "stride", conv.stride, false, false),
    KW(CONVOLUTION, "pad_low", conv.pad_low, false, false),
    KW(CONVOLUTION, "pad_high", conv.pad_high, false, false),
    KW(CONVOLUTION, "lhs_dilation", conv.lhs_dilation, false, false),
    KW(CONVOLUTION, "rhs_dilation", conv.rhs_dilation, false, false),
    KW(CONVOLUTION, "groups", conv.groups, true, false),
    KW(REDUCE_WINDOW, "window", window.window, false, false),
    KW(REDUCE_WINDOW, "stride", window.stride, false, false),
    KW(REDUCE_WINDOW, "pad_low", window.pad_low, false, false),
    KW(REDUCE_WINDOW, "pad_high", window.pad_high, false, false),
    KW(REDUCE_WINDOW, "dilation", window.dilation, false, false),
    KW(SELECT_AND_SCATTER, "window", window.window, false, false),
    KW(SELECT_AND_SCATTER, "stride", window.stride, false, false),
    KW(SELECT_AND_SCATTER, "pad_low", window.pad_low, false, false),
    KW(SELECT_AND_SCATTER, "pad_high", window.pad_high, false, false),
    KW(SELECT_AND_SCATTER, "dilation", window.dilation, false, false),
    KW(REVERSE, "dims", dims, false, false),
    KW(SCAN, "length", scan.length, true, false),
    KW(SCAN, "carries", scan.n_carry, true, false),
    KW(SCAN, "xs", scan.n_xs, true, false),
};
#undef KW
const size_t kdc_ir_n_attr_kws = N_OF(kdc_ir_attr_kws);

/* ---- printing ------------------------------------------------------------ */

static void print_str(FILE *out, const char *s) {
  fputc('"', out);
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    if (*p == '"' || *p == '\\') fprintf(out, "\\%c", *p);
    else if (*p == '\n') fputs("\\n", out);
    else if (*p == '\t') fputs("\\t", out);
    else if (*p < 0x20 || *p == 0x7f) fprintf(out, "\\x%02x", *p);
    else fputc(*p, out);
  }
  fputc('"', out);
}

/* @name when |s| is an identifier ([A-Za-z_][A-Za-z0-9_.]*), else @"...". */
static void print_global(FILE *out, const char *s) {
  bool plain = isalpha((unsigned char)s[0]) || s[0] == '_';
  for (const char *p = s; plain && *p; p++)
    if (!isalnum((unsigned char)*p) && *p != '_' && *p != '.') plain = false;
  fputc('@', out);
  if (plain) fputs(s, out);
  else print_str(out, s);
}

static void print_list(FILE *out, const kdc_dimlist *d) {
  fputc('[', out);
  for (int i = 0; i < d->n && i < KDC_MAX_RANK; i++)
    fprintf(out, i ? ",%lld" : "%lld", (long long)d->v[i]);
  fputc(']', out);
}

static void print_type(FILE *out, const kdc_type *t) {
  char buf[160];
  fputs(kdc_type_str(t, buf, sizeof buf), out);
}

static void print_elem(FILE *out, kdc_dtype d, const void *data, int64_t i) {
  switch (d) {
  case KDC_DTYPE_F32: fprintf(out, "%.9g", (double)((const float *)data)[i]); break;
  case KDC_DTYPE_I32: fprintf(out, "%d", (int)((const int32_t *)data)[i]); break;
  case KDC_DTYPE_I64: fprintf(out, "%lld", (long long)((const int64_t *)data)[i]); break;
  case KDC_DTYPE_BOOL: fprintf(out, "%d", ((const uint8_t *)data)[i] ? 1 : 0); break;
  case KDC_DTYPE_BF16:
  case KDC_DTYPE_F16: fprintf(out, "%.9g", (double)kdc_float_load(data, d, i)); break;
  default: fputs("?", out); break;
  }
}

static void print_constant(FILE *out, const kdc_node *n) {
  const kdc_attr_const *c = &n->attr.constant;
  if (!c->data) {
    fputs(" <no data>", out); /* unparseable on purpose; the verifier rejects it */
    return;
  }
  if (c->splat) {
    fputc(' ', out);
    print_elem(out, n->type.dtype, c->data, 0);
    return;
  }
  int64_t numel = kdc_type_numel(&n->type);
  fputs(" [", out);
  for (int64_t i = 0; i < numel; i++) {
    if (i) fputs(", ", out);
    print_elem(out, n->type.dtype, c->data, i);
  }
  fputc(']', out);
}

/* The words between the op name and the operands.  SPMD ops other than
 * sharding_constraint print their mesh axes as `[data,model]`. */
static void print_prefix(FILE *out, const kdc_node *n, const kdc_mesh *mesh) {
  if ((kdc_op_flags(n->op) & OPF_COLL) && n->op != KDC_OP_SHARDING_CONSTRAINT) {
    fputs(" [", out);
    for (int i = 0; i < n->attr.coll.naxes && i < KDC_MAX_MESH_AXES; i++) {
      int a = n->attr.coll.axes[i];
      if (i) fputc(',', out);
      if (mesh && a < mesh->naxes) fputs(mesh->names[a], out);
      else fprintf(out, "<axis%d>", a); /* unparseable on purpose; the verifier rejects it */
    }
    fputc(']', out);
    return;
  }
  switch (n->op) {
  case KDC_OP_PARAMETER:
    fprintf(out, " %d %s", n->attr.param.index, kdc_param_kind_name(n->attr.param.kind));
    if (n->attr.param.name) {
      fputc(' ', out);
      print_str(out, n->attr.param.name);
    }
    if (n->attr.param.gate_packed) fputs(" gate_packed", out);
    break;
  case KDC_OP_CONSTANT: print_constant(out, n); break;
  case KDC_OP_COMPARE: fprintf(out, " %s", kdc_cmp_name(n->attr.cmp)); break;
  case KDC_OP_REDUCE: fprintf(out, " %s", kdc_reduce_kind_name(n->attr.reduce.kind)); break;
  case KDC_OP_REDUCE_WINDOW:
  case KDC_OP_SELECT_AND_SCATTER:
    fprintf(out, " %s", kdc_reduce_kind_name(n->attr.window.kind));
    break;
  case KDC_OP_SCAN:
    fputc(' ', out);
    print_global(out, n->attr.scan.body ? n->attr.scan.body : "");
    break;
  default: break;
  }
}

static void print_kws(FILE *out, const kdc_node *n) {
  for (size_t i = 0; i < kdc_ir_n_attr_kws; i++) {
    const kdc_attr_kw *k = &kdc_ir_attr_kws[i];
    if (k->op != n->op) continue;
    const char *field = (const char *)&n->attr + k->offset;
    if (k->scalar) {
      if (k->optional && *(const int64_t *)field == 0) continue;
      fprintf(out, " %s=%lld", k->kw, (long long)*(const int64_t *)field);
      continue;
    }
    const kdc_dimlist *d = (const kdc_dimlist *)field;
    if (k->optional && d->n == 0) continue;
    fprintf(out, " %s=", k->kw);
    print_list(out, d);
  }
}

static void print_node(FILE *out, const kdc_func *f, kdc_value_id v, int indent) {
  const kdc_node *n = &f->nodes[v];
  fprintf(out, "%*s%%%u = %s", indent, "", v, kdc_op_name(n->op));
  print_prefix(out, n, f->module ? &f->module->mesh : NULL);
  for (int i = 0; i < n->n_in; i++) fprintf(out, i ? ", %%%u" : " %%%u", n->in[i]);
  print_kws(out, n);
  fputs(" : ", out);
  print_type(out, &n->type);
  if (n->sharding.present) {
    fputc(' ', out);
    kdc_ir_print_sharding(out, f->module, &n->sharding);
  }
  if (n->group >= 0) fprintf(out, " group=%d", (int)n->group);
  if (n->mem_offset >= 0) fprintf(out, " mem=%lld", (long long)n->mem_offset);
  if (n->origin) {
    fputs(" loc ", out);
    print_str(out, n->origin);
  }
  fputc('\n', out);
}

static void print_func(FILE *out, const kdc_func *f, int indent) {
  fprintf(out, "%*sfunc ", indent, "");
  print_global(out, f->name ? f->name : "");
  fputs(" {\n", out);
  for (size_t i = 0; i < f->n_nodes; i++) print_node(out, f, (kdc_value_id)i, indent + 2);
  fprintf(out, "%*sreturn", indent + 2, "");
  for (size_t i = 0; i < f->n_results; i++) {
    fprintf(out, i ? ", %%%u" : " %%%u", f->results[i]);
    if (f->result_names && f->result_names[i]) {
      fputc(' ', out);
      print_str(out, f->result_names[i]);
    }
  }
  fprintf(out, "\n%*s}\n", indent, "");
}

void kdc_ir_print_func(FILE *out, const kdc_func *f) { print_func(out, f, 0); }

void kdc_ir_print_module(FILE *out, const kdc_module *m) {
  fputs("module ", out);
  print_global(out, m->name ? m->name : "");
  fputs(" {\n", out);
  if (m->mesh.naxes > 0) {
    fputs("  mesh [", out);
    for (int i = 0; i < m->mesh.naxes; i++)
      fprintf(out, "%s%s=%lld", i ? ", " : "", m->mesh.names[i], (long long)m->mesh.sizes[i]);
    fputs("]\n", out);
  }
  for (size_t i = 0; i < m->n_weights; i++) {
    const kdc_weight *w = &m->weights[i];
    fputs("  weight ", out);
    print_str(out, w->name);
    fputs(" : ", out);
    print_type(out, &w->type);
    fputs(w->trainable ? "\n" : " non_trainable\n", out);
  }
  for (size_t i = 0; i < m->n_funcs; i++) print_func(out, m->funcs[i], 2);
  fputs("}\n", out);
}

char *kdc_ir_module_to_string(const kdc_module *m) {
  char *buf = NULL;
  size_t len = 0;
  FILE *out = open_memstream(&buf, &len);
  if (!out) kdc_fatal(__FILE__, __LINE__, "open_memstream failed");
  kdc_ir_print_module(out, m);
  if (fclose(out) != 0 || !buf) kdc_fatal(__FILE__, __LINE__, "out of memory printing IR");
  return buf;
}
