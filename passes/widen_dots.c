/*
 * passes/widen_dots.c: bf16/f16 dot_generals on the CPU (docs/codegen.md,
 * "bf16 and f16").
 *
 * A dot_general of bf16 or f16 operands (a mixed-precision layer's GEMM,
 * frontend/policy.c) becomes
 *     convert(dot_general(convert(a, f32), convert(b, f32)) : f32, H)
 * so it runs as an f32 GEMM step (cblas_sgemm) between two conversions that
 * fuse into the neighbouring kernels.  The products of bf16/f16 values are
 * exact in f32 and both forms accumulate in f32 and round once, so only the
 * summation order differs from the interpreter (as for every f32 GEMM).
 * A bf16 dot's f32 dot rounds its operands to bf16 itself (the attribute
 * bf16_operands, codegen/lower.c's bf16_inputs step flag): a CPU with
 * AMX-BF16 runs it with kdc's own bf16 kernel, which rounds as it packs
 * (runtime/gemm_bf16.c; Debian 12's OpenBLAS 0.3.21 does not export
 * cblas_sbgemm), others round copies for cblas_sgemm.  So an operand that
 * is an f32 value rounded to bf16 (a layer's input or float32 variable
 * cast by the policy), seen through ops that only move elements, is
 * replaced by that f32 value (the moving ops rebuilt on it): rounding
 * commutes with moving, so the products are the same, and the conversion
 * kernels before the GEMM (each forward rounded every weight matrix and
 * the block's input once per projection) are gone.
 * Where the dots are computed in float32 (f16 always; bf16 on a CPU
 * without AMX-BF16) compile says so once (a warning naming the dtype
 * and the first such layer), and loading a plan with bf16 GEMMs on such a
 * CPU says so too (runtime/plan_load.c).
 * It runs before the sharding passes, so a dot split over its contracting
 * dims sums f32 partials across devices (the CPU collectives sum f32).
 * Not run for --target cuda plans: there the dot stays a bf16/f16 GEMM
 * step (cublasGemmEx with f32 accumulation, docs/gpu.md).
 */
#include <stdlib.h>
#include <string.h>

#include "common/io.h"
#include "passes/passes.h"

static bool half_dot(const kdc_func *f, kdc_value_id v) {
  const kdc_node *nd = &f->nodes[v];
  return nd->op == KDC_OP_DOT && kdc_dtype_is_half(nd->type.dtype);
}

/* |origin| is copied by value: appending may move the node array. */
static kdc_value_id add(kdc_func *f, kdc_op op, const kdc_type *t, int n_in,
                        const kdc_value_id *in, const kdc_attrs *attr, const char *origin) {
  kdc_value_id v = kdc_ir_append(f, op, t, n_in, in, attr);
  kdc_node *nd = kdc_ir_node(f, v);
  memset(&nd->sharding, 0, sizeof nd->sharding); /* before seed_shardings: open */
  nd->origin = origin;
  return v;
}

static kdc_value_id widen(kdc_func *f, kdc_value_id x) {
  kdc_type t = f->nodes[x].type;
  t.dtype = KDC_DTYPE_F32;
  return add(f, KDC_OP_CONVERT, &t, 1, &x, NULL, f->nodes[x].origin);
}

static bool moves_elements(kdc_op op) {
  return op == KDC_OP_RESHAPE || op == KDC_OP_TRANSPOSE || op == KDC_OP_BROADCAST ||
         op == KDC_OP_SLICE || op == KDC_OP_REVERSE;
}

/* The f32 value whose bf16 rounding |v| is, seen through ops that only move
 * elements (rebuilt on f32), or KDC_NO_VALUE. */
static kdc_value_id f32_source(kdc_func *f, kdc_value_id v, int depth) {
  kdc_node nd = f->nodes[v]; /* a copy: appending may move the array */
  if (nd.op == KDC_OP_CONVERT)
    return f->nodes[nd.in[0]].type.dtype == KDC_DTYPE_F32 ? nd.in[0] : KDC_NO_VALUE;
  if (depth >= 16 || nd.n_in != 1 || !moves_elements(nd.op)) return KDC_NO_VALUE;
  kdc_value_id s = f32_source(f, nd.in[0], depth + 1);
  if (s == KDC_NO_VALUE) return s;
  nd.type.dtype = KDC_DTYPE_F32;
  return add(f, nd.op, &nd.type, 1, &s, &nd.attr, nd.origin);
}

/* Operand |x| of a half dot as the f32 dot's operand. */
static kdc_value_id operand(kdc_func *f, kdc_value_id x, bool bf16) {
  kdc_value_id s = bf16 ? f32_source(f, x, 0) : KDC_NO_VALUE;
  return s != KDC_NO_VALUE ? s : widen(f, x);
}

static void run_func(kdc_func *f, kdc_dtype *seen, const char **where) {
  size_t n_old = f->n_nodes;
  bool any = false;
  for (size_t i = 0; i < n_old && !any; i++) any = half_dot(f, (kdc_value_id)i);
  if (!any) return;
  size_t *first = kdc_xmalloc((n_old + 1) * sizeof *first);
  kdc_value_id *to = kdc_xmalloc(n_old * sizeof *to);
  for (size_t i = 0; i < n_old; i++) {
    first[i] = f->n_nodes;
    to[i] = KDC_NO_VALUE;
    if (!half_dot(f, (kdc_value_id)i)) continue;
    kdc_node d = f->nodes[i]; /* a copy: appending may move the array */
    *seen = d.type.dtype;
    if (!*where) *where = d.origin;
    bool bf16 = d.type.dtype == KDC_DTYPE_BF16;
    kdc_value_id in[2] = {operand(f, d.in[0], bf16), operand(f, d.in[1], bf16)};
    kdc_type t = d.type;
    t.dtype = KDC_DTYPE_F32;
    d.attr.dot.bf16_operands = bf16;
    kdc_value_id w = add(f, KDC_OP_DOT, &t, 2, in, &d.attr, d.origin);
    to[i] = add(f, KDC_OP_CONVERT, &d.type, 1, &w, NULL, d.origin);
  }
  first[n_old] = f->n_nodes;
  kdc_pass_splice(f, n_old, first, to);
  free(first), free(to);
  kdc_pass_dce_func(f, NULL); /* the roundings now folded into the dots */
}

kdc_status kdc_pass_widen_dots(kdc_module *m, const kdc_pass_options *opt) {
  if (opt && opt->cuda) return NULL;
  kdc_dtype seen = KDC_DTYPE_F32;
  const char *where = NULL; /* the first such dot's layer */
  for (size_t i = 0; i < m->n_funcs; i++) run_func(m->funcs[i], &seen, &where);
  /* bf16: the GEMM steps are marked (codegen/lower.c) and run in AMX-BF16 tiles where the CPU
   * running the plan has it (runtime/gemm_bf16.c; a CPU without it says so at load) */
  bool bf16_here = seen == KDC_DTYPE_BF16 && kdc_cpu_bf16();
  if (seen != KDC_DTYPE_F32 && !bf16_here && opt && opt->warnings)
    fprintf(opt->warnings, "kdc: warning: model %s: %s: the %s GEMMs of the mixed-precision "
            "layers are computed in float32 on this CPU (operands and results stay %s, f32 "
            "accumulation)%s\n", m->name ? m->name : "?", where ? where : "?",
            seen == KDC_DTYPE_BF16 ? "bfloat16" : "float16", kdc_dtype_name(seen),
            seen == KDC_DTYPE_BF16 ? "; a CPU with AMX-BF16 runs them in bf16" : "");
  return NULL;
}
