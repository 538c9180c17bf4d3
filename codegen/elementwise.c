/*
 * codegen/elementwise.c: the scalar meaning of every elementwise op, as LLVM
 * IR over register values (f32 = float, i32, i64, bool = i1; bf16 and f16
 * are held as f32 in registers: loads widen, stores narrow, and every value
 * a bf16/f16 node computes is rounded to its type (cg_round), as the
 * interpreter stores it).
 *
 * The semantics are the reference interpreter's, bit for bit where the
 * hardware allows (ir/interp.c, file comment): f32 math in float without
 * contraction or reassociation (no fast-math flags anywhere), NaN-propagating
 * max/min with max(-0,+0) = +0, round half to even, saturating f32 -> int
 * (llvm.fptosi.sat), integer division with x/0 = -1 and MIN/-1 = MIN,
 * wrapping integer arithmetic.  Bool operands of arithmetic ops are widened
 * to i64, computed as integers and narrowed with != 0, like the interpreter.
 *
 * exp, expm1, tanh and logistic are kdc's own (ir/math.c), emitted inline
 * by codegen/math_ir.c: branch-free basic operations that the loop
 * vectoriser turns into SIMD code, bitwise equal to the interpreter's.  The
 * other transcendentals call libm's f32 functions (logf, log1pf, erff, powf)
 * or the LLVM intrinsics that lower to them (llvm.log, llvm.pow); the JIT
 * resolves them from the process (runtime/jit.c), so results match the
 * interpreter, which calls the same libm.  They are
 * declared nounwind and memory(none) (errno ignored, as -fno-math-errno) so
 * LLVM may hoist and CSE them.
 */
#include <math.h>
#include <string.h>

#include "codegen/codegen.h"

LLVMTypeRef cg_reg_type(cg_plan *P, kdc_dtype d) {
  switch (d) {
  case KDC_DTYPE_F32:
  case KDC_DTYPE_BF16:
  case KDC_DTYPE_F16: return P->f32;
  case KDC_DTYPE_I32: return P->i32;
  case KDC_DTYPE_I64: return P->i64;
  case KDC_DTYPE_BOOL: return P->i1;
  default: kdc_unreachable();
  }
}

LLVMTypeRef cg_mem_type(cg_plan *P, kdc_dtype d) {
  if (d == KDC_DTYPE_BF16) return P->i16;
  if (d == KDC_DTYPE_F16) return P->half;
  return d == KDC_DTYPE_BOOL ? P->i8 : cg_reg_type(P, d);
}

/* bf16 <-> f32 by integer operations, bit for bit kdc_f32_to_bf16 (common/
 * dtype.c): x + 0x7fff + lowest kept bit, cut; NaN cut with the quiet bit.
 * f16 through LLVM's fptrunc/fpext (F16C on x86, cvt.rn.f16.f32 on PTX),
 * round to nearest even like kdc_f32_to_f16. */
LLVMValueRef cg_widen(cg_plan *P, kdc_dtype d, LLVMValueRef v) {
  if (d == KDC_DTYPE_F16) return LLVMBuildFPExt(P->b, v, P->f32, "");
  if (d != KDC_DTYPE_BF16) return v;
  LLVMValueRef w = LLVMBuildShl(P->b, LLVMBuildZExt(P->b, v, P->i32, ""),
                                LLVMConstInt(P->i32, 16, 0), "");
  return LLVMBuildBitCast(P->b, w, P->f32, "");
}

LLVMValueRef cg_narrow(cg_plan *P, kdc_dtype d, LLVMValueRef v) {
  LLVMBuilderRef B = P->b;
  if (d == KDC_DTYPE_F16) return LLVMBuildFPTrunc(B, v, P->half, "");
  if (d != KDC_DTYPE_BF16) return v;
  LLVMValueRef b = LLVMBuildBitCast(B, v, P->i32, "");
  LLVMValueRef hi = LLVMBuildLShr(B, b, LLVMConstInt(P->i32, 16, 0), "");
  LLVMValueRef lsb = LLVMBuildAnd(B, hi, LLVMConstInt(P->i32, 1, 0), "");
  LLVMValueRef r = LLVMBuildAdd(B, LLVMBuildAdd(B, b, LLVMConstInt(P->i32, 0x7fff, 0), ""), lsb, "");
  r = LLVMBuildLShr(B, r, LLVMConstInt(P->i32, 16, 0), "");
  LLVMValueRef nan = LLVMBuildOr(B, hi, LLVMConstInt(P->i32, 0x40, 0), "");
  LLVMValueRef isnan = LLVMBuildFCmp(B, LLVMRealUNO, v, v, "");
  return LLVMBuildTrunc(B, LLVMBuildSelect(B, isnan, nan, r, ""), P->i16, "");
}

LLVMValueRef cg_round(cg_plan *P, kdc_dtype d, LLVMValueRef v) {
  return kdc_dtype_is_half(d) ? cg_widen(P, d, cg_narrow(P, d, v)) : v;
}

LLVMValueRef cg_const_scalar(cg_plan *P, kdc_dtype d, const void *p) {
  switch (d) {
  case KDC_DTYPE_F32: {
    float x;
    memcpy(&x, p, 4);
    return LLVMConstReal(P->f32, (double)x);  /* exact: every float is a double */
  }
  case KDC_DTYPE_I32: {
    int32_t x;
    memcpy(&x, p, 4);
    return LLVMConstInt(P->i32, (unsigned long long)(int64_t)x, 1);
  }
  case KDC_DTYPE_I64: {
    int64_t x;
    memcpy(&x, p, 8);
    return LLVMConstInt(P->i64, (unsigned long long)x, 1);
  }
  case KDC_DTYPE_BOOL: return LLVMConstInt(P->i1, *(const uint8_t *)p != 0, 0);
  case KDC_DTYPE_BF16:
  case KDC_DTYPE_F16: return LLVMConstReal(P->f32, (double)kdc_float_load(p, d, 0));
  default: kdc_unreachable();
  }
}

static LLVMValueRef fconst(cg_plan *P, double v) { return LLVMConstReal(P->f32, v); }

/* A unary f32 function |name| from libm, declared once per module. */
static LLVMValueRef libm1(cg_plan *P, const char *name, LLVMValueRef x) {
  LLVMTypeRef ft = LLVMFunctionType(P->f32, (LLVMTypeRef[]){P->f32}, 1, 0);
  LLVMValueRef fn = LLVMGetNamedFunction(P->mod, name);
  if (!fn) {
    fn = LLVMAddFunction(P->mod, name, ft);
    unsigned nounwind = LLVMGetEnumAttributeKindForName("nounwind", 8);
    unsigned memory = LLVMGetEnumAttributeKindForName("memory", 6);
    LLVMAddAttributeAtIndex(fn, LLVMAttributeFunctionIndex,
                            LLVMCreateEnumAttribute(P->ctx, nounwind, 0));
    LLVMAddAttributeAtIndex(fn, LLVMAttributeFunctionIndex,
                            LLVMCreateEnumAttribute(P->ctx, memory, 0)); /* none */
  }
  return LLVMBuildCall2(P->b, ft, fn, &x, 1, "");
}

/* Overloaded intrinsic |name| on |t| with |n| operands of type |t|. */
static LLVMValueRef intr(cg_plan *P, const char *name, LLVMTypeRef t, LLVMValueRef *args,
                         unsigned n) {
  unsigned id = LLVMLookupIntrinsicID(name, strlen(name));
  KDC_ASSERT(id != 0);
  LLVMValueRef fn = LLVMGetIntrinsicDeclaration(P->mod, id, &t, 1);
  LLVMTypeRef ft = LLVMIntrinsicGetType(P->ctx, id, &t, 1);
  return LLVMBuildCall2(P->b, ft, fn, args, n, "");
}

/* Intrinsic overloaded on (result, operand) types, e.g. llvm.fptosi.sat. */
static LLVMValueRef intr2(cg_plan *P, const char *name, LLVMTypeRef rt, LLVMTypeRef at,
                          LLVMValueRef x) {
  unsigned id = LLVMLookupIntrinsicID(name, strlen(name));
  KDC_ASSERT(id != 0);
  LLVMTypeRef tys[2] = {rt, at};
  LLVMValueRef fn = LLVMGetIntrinsicDeclaration(P->mod, id, tys, 2);
  LLVMTypeRef ft = LLVMIntrinsicGetType(P->ctx, id, tys, 2);
  return LLVMBuildCall2(P->b, ft, fn, &x, 1, "");
}

static LLVMValueRef isnan_(cg_plan *P, LLVMValueRef x) {
  return LLVMBuildFCmp(P->b, LLVMRealUNO, x, x, "");
}

/* The interpreter's max_f / min_f: first NaN wins; equal values pick by
 * sign (max(-0,+0) = +0, min(-0,+0) = -0). */
static LLVMValueRef fmaxmin(cg_plan *P, bool is_max, LLVMValueRef a, LLVMValueRef b) {
  LLVMBuilderRef B = P->b;
  LLVMValueRef pick = LLVMBuildFCmp(B, is_max ? LLVMRealOGT : LLVMRealOLT, a, b, "");
  LLVMValueRef r = LLVMBuildSelect(B, pick, a, b, "");
  LLVMValueRef ai = LLVMBuildBitCast(B, a, P->i32, "");
  LLVMValueRef neg = LLVMBuildICmp(B, LLVMIntSLT, ai, LLVMConstInt(P->i32, 0, 0), "");
  LLVMValueRef eqpick = is_max ? LLVMBuildSelect(B, neg, b, a, "")
                               : LLVMBuildSelect(B, neg, a, b, "");
  r = LLVMBuildSelect(B, LLVMBuildFCmp(B, LLVMRealOEQ, a, b, ""), eqpick, r, "");
  r = LLVMBuildSelect(B, isnan_(P, b), b, r, "");
  return LLVMBuildSelect(B, isnan_(P, a), a, r, "");
}

static LLVMValueRef unary_f32(cg_plan *P, kdc_op op, LLVMValueRef x) {
  LLVMBuilderRef B = P->b;
  LLVMTypeRef t = P->f32;
  switch (op) {
  case KDC_OP_NEG: return LLVMBuildFNeg(B, x, "");
  case KDC_OP_ABS: return intr(P, "llvm.fabs", t, &x, 1);
  case KDC_OP_EXP: return cg_math_exp(P, x);
  case KDC_OP_LOG: return libm1(P, "logf", x);
  case KDC_OP_LOG1P: return libm1(P, "log1pf", x);
  case KDC_OP_EXPM1: return cg_math_expm1(P, x);
  case KDC_OP_TANH: return cg_math_tanh(P, x);
  case KDC_OP_ERF: return libm1(P, "erff", x);
  case KDC_OP_LOGISTIC: return cg_math_logistic(P, x);
  case KDC_OP_SQRT: return intr(P, "llvm.sqrt", t, &x, 1);
  case KDC_OP_RSQRT: return LLVMBuildFDiv(B, fconst(P, 1), intr(P, "llvm.sqrt", t, &x, 1), "");
  case KDC_OP_SIGN: {
    LLVMValueRef r = LLVMBuildSelect(B, LLVMBuildFCmp(B, LLVMRealOLT, x, fconst(P, 0), ""),
                                     fconst(P, -1), x, "");
    return LLVMBuildSelect(B, LLVMBuildFCmp(B, LLVMRealOGT, x, fconst(P, 0), ""), fconst(P, 1),
                           r, "");
  }
  case KDC_OP_FLOOR: return intr(P, "llvm.floor", t, &x, 1);
  case KDC_OP_CEIL: return intr(P, "llvm.ceil", t, &x, 1);
  case KDC_OP_ROUND: return intr(P, "llvm.roundeven", t, &x, 1);
  case KDC_OP_STOP_GRADIENT: return x;
  default: return NULL;
  }
}

/* Integer ops on i32/i64 registers (bool widened by the caller). */
static LLVMValueRef unary_int(cg_plan *P, kdc_op op, LLVMTypeRef t, LLVMValueRef x, bool is_bool) {
  LLVMBuilderRef B = P->b;
  LLVMValueRef zero = LLVMConstInt(t, 0, 0);
  switch (op) {
  case KDC_OP_NEG: return LLVMBuildSub(B, zero, x, "");
  case KDC_OP_ABS:
    return LLVMBuildSelect(B, LLVMBuildICmp(B, LLVMIntSLT, x, zero, ""),
                           LLVMBuildSub(B, zero, x, ""), x, "");
  case KDC_OP_SIGN: {
    LLVMValueRef gt = LLVMBuildZExt(B, LLVMBuildICmp(B, LLVMIntSGT, x, zero, ""), t, "");
    LLVMValueRef lt = LLVMBuildZExt(B, LLVMBuildICmp(B, LLVMIntSLT, x, zero, ""), t, "");
    return LLVMBuildSub(B, gt, lt, "");
  }
  case KDC_OP_NOT:
    if (is_bool) return LLVMBuildZExt(B, LLVMBuildICmp(B, LLVMIntEQ, x, zero, ""), t, "");
    return LLVMBuildNot(B, x, "");
  case KDC_OP_FLOOR: case KDC_OP_CEIL: case KDC_OP_ROUND: return x;
  default: return NULL;
  }
}

static LLVMValueRef binary_int(cg_plan *P, kdc_op op, LLVMTypeRef t, LLVMValueRef a,
                               LLVMValueRef b) {
  LLVMBuilderRef B = P->b;
  switch (op) {
  case KDC_OP_ADD: return LLVMBuildAdd(B, a, b, "");
  case KDC_OP_SUB: return LLVMBuildSub(B, a, b, "");
  case KDC_OP_MUL: return LLVMBuildMul(B, a, b, "");
  case KDC_OP_DIV: {
    /* b == 0 -> -1, b == -1 -> -a (wraps), else a / b: never traps. */
    LLVMValueRef zero = LLVMConstInt(t, 0, 0), m1 = LLVMConstAllOnes(t);
    LLVMValueRef bz = LLVMBuildICmp(B, LLVMIntEQ, b, zero, "");
    LLVMValueRef bm = LLVMBuildICmp(B, LLVMIntEQ, b, m1, "");
    LLVMValueRef trap = LLVMBuildOr(B, bz, bm, "");
    LLVMValueRef safe = LLVMBuildSelect(B, trap, LLVMConstInt(t, 1, 0), b, "");
    LLVMValueRef q = LLVMBuildSDiv(B, a, safe, "");
    q = LLVMBuildSelect(B, bm, LLVMBuildSub(B, zero, a, ""), q, "");
    return LLVMBuildSelect(B, bz, m1, q, "");
  }
  case KDC_OP_MAX:
    return LLVMBuildSelect(B, LLVMBuildICmp(B, LLVMIntSGT, a, b, ""), a, b, "");
  case KDC_OP_MIN:
    return LLVMBuildSelect(B, LLVMBuildICmp(B, LLVMIntSLT, a, b, ""), a, b, "");
  case KDC_OP_AND: return LLVMBuildAnd(B, a, b, "");
  case KDC_OP_OR: return LLVMBuildOr(B, a, b, "");
  default: return NULL;
  }
}

LLVMValueRef cg_emit_binop(cg_plan *P, kdc_op op, kdc_dtype d, LLVMValueRef a, LLVMValueRef b) {
  LLVMBuilderRef B = P->b;
  if (kdc_dtype_is_float(d)) {
    switch (op) {
    case KDC_OP_ADD: return LLVMBuildFAdd(B, a, b, "");
    case KDC_OP_SUB: return LLVMBuildFSub(B, a, b, "");
    case KDC_OP_MUL: return LLVMBuildFMul(B, a, b, "");
    case KDC_OP_DIV: return LLVMBuildFDiv(B, a, b, "");
    case KDC_OP_MAX: return fmaxmin(P, true, a, b);
    case KDC_OP_MIN: return fmaxmin(P, false, a, b);
    case KDC_OP_POW: return intr(P, "llvm.pow", P->f32, (LLVMValueRef[]){a, b}, 2);
    default: return NULL;
    }
  }
  if (d == KDC_DTYPE_BOOL) {
    LLVMValueRef wa = LLVMBuildZExt(B, a, P->i64, ""), wb = LLVMBuildZExt(B, b, P->i64, "");
    LLVMValueRef r = binary_int(P, op, P->i64, wa, wb);
    return r ? LLVMBuildICmp(B, LLVMIntNE, r, LLVMConstInt(P->i64, 0, 0), "") : NULL;
  }
  return binary_int(P, op, cg_reg_type(P, d), a, b);
}

static LLVMValueRef compare(cg_plan *P, kdc_cmp c, kdc_dtype d, LLVMValueRef a, LLVMValueRef b) {
  static const LLVMRealPredicate fp[] = {LLVMRealOEQ, LLVMRealUNE, LLVMRealOLT,
                                         LLVMRealOLE, LLVMRealOGT, LLVMRealOGE};
  static const LLVMIntPredicate ip[] = {LLVMIntEQ, LLVMIntNE, LLVMIntSLT,
                                        LLVMIntSLE, LLVMIntSGT, LLVMIntSGE};
  static const LLVMIntPredicate up[] = {LLVMIntEQ, LLVMIntNE, LLVMIntULT,
                                        LLVMIntULE, LLVMIntUGT, LLVMIntUGE};
  if (kdc_dtype_is_float(d)) return LLVMBuildFCmp(P->b, fp[c], a, b, "");
  return LLVMBuildICmp(P->b, d == KDC_DTYPE_BOOL ? up[c] : ip[c], a, b, "");
}

static LLVMValueRef convert(cg_plan *P, kdc_dtype from, kdc_dtype to, LLVMValueRef x) {
  LLVMBuilderRef B = P->b;
  LLVMTypeRef tt = cg_reg_type(P, to);
  bool ff = kdc_dtype_is_float(from), tf = kdc_dtype_is_float(to);
  if (from == to || (ff && tf)) return x; /* registers are f32; emit() rounds the result */
  if (to == KDC_DTYPE_BOOL) {
    if (ff) return LLVMBuildFCmp(B, LLVMRealUNE, x, fconst(P, 0), "");
    return LLVMBuildICmp(B, LLVMIntNE, x, LLVMConstInt(LLVMTypeOf(x), 0, 0), "");
  }
  if (from == KDC_DTYPE_BOOL)
    return tf ? LLVMBuildUIToFP(B, x, tt, "") : LLVMBuildZExt(B, x, tt, "");
  if (ff) return intr2(P, "llvm.fptosi.sat", tt, P->f32, x);
  if (tf) return LLVMBuildSIToFP(B, x, tt, "");
  return LLVMBuildIntCast2(B, x, tt, 1, "");  /* sext or wrapping trunc */
}

kdc_status cg_emit_elementwise(cg_plan *P, const kdc_func *f, const kdc_node *nd,
                               LLVMValueRef *in, LLVMValueRef *out) {
  kdc_dtype xd = f->nodes[nd->in[0]].type.dtype;
  LLVMValueRef r = NULL;
  if (nd->op == KDC_OP_SELECT) r = LLVMBuildSelect(P->b, in[0], in[1], in[2], "");
  else if (nd->op == KDC_OP_CONVERT) r = convert(P, xd, nd->type.dtype, in[0]);
  else if (nd->op == KDC_OP_COMPARE) r = compare(P, nd->attr.cmp, xd, in[0], in[1]);
  else if (nd->n_in == 2) r = cg_emit_binop(P, nd->op, xd, in[0], in[1]);
  else if (kdc_dtype_is_float(xd)) r = unary_f32(P, nd->op, in[0]);
  else if (xd == KDC_DTYPE_BOOL) {
    LLVMValueRef w = unary_int(P, nd->op, P->i64, LLVMBuildZExt(P->b, in[0], P->i64, ""), true);
    if (w) r = LLVMBuildICmp(P->b, LLVMIntNE, w, LLVMConstInt(P->i64, 0, 0), "");
  } else r = unary_int(P, nd->op, cg_reg_type(P, xd), in[0], false);
  if (!r)
    return KDC_ERR(KDC_UNSUPPORTED, "codegen: func %s: %%%u: %s on %s is not supported",
                   f->name, (unsigned)(nd - f->nodes), kdc_op_name(nd->op), kdc_dtype_name(xd));
  *out = r;
  return NULL;
}

/* ---- reductions ------------------------------------------------------------ */

LLVMValueRef cg_reduce_init(cg_plan *P, kdc_reduce_kind kind, kdc_dtype d) {
  switch (d) {
  case KDC_DTYPE_F32:
  case KDC_DTYPE_BF16:
  case KDC_DTYPE_F16:
    return fconst(P, kind == KDC_RED_SUM ? 0.0 : kind == KDC_RED_PROD ? 1.0
                     : kind == KDC_RED_MAX ? -INFINITY : INFINITY);
  case KDC_DTYPE_I32:
  case KDC_DTYPE_I64: {
    LLVMTypeRef t = cg_reg_type(P, d);
    bool w = d == KDC_DTYPE_I64;
    int64_t lo = w ? INT64_MIN : INT32_MIN, hi = w ? INT64_MAX : INT32_MAX;
    int64_t v = kind == KDC_RED_SUM ? 0 : kind == KDC_RED_PROD ? 1 : kind == KDC_RED_MAX ? lo : hi;
    return LLVMConstInt(t, (unsigned long long)v, 1);
  }
  case KDC_DTYPE_BOOL:  /* any (sum, max) starts false, all (prod, min) true */
    return LLVMConstInt(P->i1, kind == KDC_RED_PROD || kind == KDC_RED_MIN, 0);
  default: kdc_unreachable();
  }
}

LLVMValueRef cg_reduce_step(cg_plan *P, kdc_reduce_kind kind, kdc_dtype d, LLVMValueRef acc,
                            LLVMValueRef x) {
  static const kdc_op ops[] = {[KDC_RED_SUM] = KDC_OP_ADD, [KDC_RED_MAX] = KDC_OP_MAX,
                               [KDC_RED_MIN] = KDC_OP_MIN, [KDC_RED_PROD] = KDC_OP_MUL};
  if (d == KDC_DTYPE_BOOL)
    return kind == KDC_RED_PROD || kind == KDC_RED_MIN ? LLVMBuildAnd(P->b, acc, x, "")
                                                       : LLVMBuildOr(P->b, acc, x, "");
  /* integers: the interpreter keeps the accumulator on a tie (v > acc). */
  if (!kdc_dtype_is_float(d) && (kind == KDC_RED_MAX || kind == KDC_RED_MIN))
    return cg_emit_binop(P, ops[kind], d, x, acc);
  /* Float max/min as llvm.maximum/minimum: the same value as the
   * interpreter's max_f/min_f for every non-NaN pair (-0 < +0) and a NaN
   * whenever either is one.  Unlike fmaxmin's select chain, the loop
   * vectoriser recognises it as a reduction (a softmax's row max of
   * transformer_512: 9 -> ~1 ms).  The one difference, which NaN's payload
   * survives when a row holds several NaNs, does not change any value. */
  LLVMTypeRef at = LLVMTypeOf(acc);
  if ((kind == KDC_RED_MAX || kind == KDC_RED_MIN) &&
      (at == P->f32 || at == LLVMDoubleTypeInContext(P->ctx))) {
    LLVMValueRef xs[2] = {acc, x};
    return intr(P, kind == KDC_RED_MAX ? "llvm.maximum" : "llvm.minimum", at, xs, 2);
  }
  return cg_emit_binop(P, ops[kind], d, acc, x);
}

/* rng_uniform's element (ir/ir.h, kdc_rng_uniform_at): Philox-4x32-10 of
 * counter (lo32 index, hi32 index, lo32 step, hi32 step) and key (lo32 seed,
 * hi32 seed), then (out[0] >> 8) * 2^-24 -- exact in f32, so bit-identical
 * to the interpreter.  The key schedule is folded into constants. */
LLVMValueRef cg_emit_rng_uniform(cg_plan *P, int64_t seed, LLVMValueRef step, LLVMValueRef index) {
  LLVMBuilderRef B = P->b;
  LLVMValueRef s32 = LLVMConstInt(P->i64, 32, 0);
  LLVMValueRef c0 = LLVMBuildTrunc(B, index, P->i32, "");
  LLVMValueRef c1 = LLVMBuildTrunc(B, LLVMBuildLShr(B, index, s32, ""), P->i32, "");
  LLVMValueRef c2 = LLVMBuildTrunc(B, step, P->i32, "");
  LLVMValueRef c3 = LLVMBuildTrunc(B, LLVMBuildLShr(B, step, s32, ""), P->i32, "");
  uint32_t k0 = (uint32_t)(uint64_t)seed, k1 = (uint32_t)((uint64_t)seed >> 32);
  LLVMValueRef m0 = LLVMConstInt(P->i64, 0xD2511F53u, 0), m1 = LLVMConstInt(P->i64, 0xCD9E8D57u, 0);
  for (int r = 0; r < 10; r++) {
    if (r > 0) k0 += 0x9E3779B9u, k1 += 0xBB67AE85u;
    LLVMValueRef p0 = LLVMBuildMul(B, LLVMBuildZExt(B, c0, P->i64, ""), m0, "");
    LLVMValueRef p1 = LLVMBuildMul(B, LLVMBuildZExt(B, c2, P->i64, ""), m1, "");
    LLVMValueRef h0 = LLVMBuildTrunc(B, LLVMBuildLShr(B, p0, s32, ""), P->i32, "");
    LLVMValueRef h1 = LLVMBuildTrunc(B, LLVMBuildLShr(B, p1, s32, ""), P->i32, "");
    LLVMValueRef n0 = LLVMBuildXor(B, LLVMBuildXor(B, h1, c1, ""), LLVMConstInt(P->i32, k0, 0), "");
    LLVMValueRef n2 = LLVMBuildXor(B, LLVMBuildXor(B, h0, c3, ""), LLVMConstInt(P->i32, k1, 0), "");
    c1 = LLVMBuildTrunc(B, p1, P->i32, "");
    c3 = LLVMBuildTrunc(B, p0, P->i32, "");
    c0 = n0;
    c2 = n2;
  }
  LLVMValueRef top = LLVMBuildLShr(B, c0, LLVMConstInt(P->i32, 8, 0), "");
  return LLVMBuildFMul(B, LLVMBuildUIToFP(B, top, P->f32, ""), fconst(P, 0x1p-24), "");
}
