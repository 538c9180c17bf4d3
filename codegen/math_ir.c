/*
 * codegen/math_ir.c: ir/math.c's exp, expm1, tanh and logistic as LLVM IR.
 *
 * Each function is defined once per module, as a scalar function
 * (kdc_math_<f>) and as vector functions of 4, 8 and 16 lanes
 * (kdc_math_<f>_v<N>), all built by the code below from the same IEEE
 * operations in the same order as the C functions (read them side by
 * side), so every lane of every variant gives the reference interpreter's
 * bits.  A kernel calls the scalar function; the call carries the
 * "vector-function-abi-variant" attribute naming the vector ones, so the
 * loop vectoriser turns a loop of calls into calls of the vector function
 * (it cannot vectorise a call to libm's expf), and a kernel that does not
 * vectorise keeps one small call per element instead of the whole sequence
 * copied into every branch that uses it.
 *
 * The bodies are branch-free: the special cases (NaN, overflow, underflow,
 * saturation) are selects around a computation on an argument clamped into
 * range.  The clamp never changes an in-range argument, and a NaN argument
 * is computed on as the range's low end and replaced at the end, so no
 * poison value (an out-of-range fptosi) is ever made.  Multiply-adds are
 * llvm.fma where the C functions call fmaf (one rounding both), and no
 * instruction carries fast-math flags, so nothing else is contracted.
 *
 * The functions have external linkage (one JIT per plan, runtime/jit.c) so
 * that nothing removes the vector variants before the vectoriser has seen
 * the calls that name them.
 */
#include <stdio.h>
#include <string.h>

#include "codegen/codegen.h"

typedef struct mt {
  cg_plan *P;
  LLVMBuilderRef b;
  LLVMTypeRef f, i; /* f32 and i32, or <N x f32> and <N x i32> */
  unsigned lanes;   /* 0: scalar */
} mt;

static LLVMValueRef splat(mt *m, LLVMValueRef s) {
  if (!m->lanes) return s;
  LLVMValueRef v[16];
  for (unsigned k = 0; k < m->lanes; k++) v[k] = s;
  return LLVMConstVector(v, m->lanes);
}
static LLVMValueRef fc(mt *m, float v) { return splat(m, LLVMConstReal(m->P->f32, v)); }
static LLVMValueRef ic(mt *m, int v) {
  return splat(m, LLVMConstInt(m->P->i32, (unsigned long long)v, 1));
}

static LLVMValueRef intr(mt *m, const char *name, LLVMValueRef *args, unsigned n) {
  unsigned id = LLVMLookupIntrinsicID(name, strlen(name));
  KDC_ASSERT(id != 0);
  LLVMValueRef fn = LLVMGetIntrinsicDeclaration(m->P->mod, id, &m->f, 1);
  LLVMTypeRef ft = LLVMIntrinsicGetType(m->P->ctx, id, &m->f, 1);
  return LLVMBuildCall2(m->b, ft, fn, args, n, "");
}

static LLVMValueRef fmul(mt *m, LLVMValueRef a, LLVMValueRef b) {
  return LLVMBuildFMul(m->b, a, b, "");
}
static LLVMValueRef fadd(mt *m, LLVMValueRef a, LLVMValueRef b) {
  return LLVMBuildFAdd(m->b, a, b, "");
}
static LLVMValueRef fsub(mt *m, LLVMValueRef a, LLVMValueRef b) {
  return LLVMBuildFSub(m->b, a, b, "");
}
/* a * b + c with one rounding (C's fmaf) */
static LLVMValueRef fma3(mt *m, LLVMValueRef a, LLVMValueRef b, LLVMValueRef c) {
  LLVMValueRef args[3] = {a, b, c};
  return intr(m, "llvm.fma", args, 3);
}
static LLVMValueRef fcmp(mt *m, LLVMRealPredicate p, LLVMValueRef a, LLVMValueRef b) {
  return LLVMBuildFCmp(m->b, p, a, b, "");
}
static LLVMValueRef sel(mt *m, LLVMValueRef c, LLVMValueRef a, LLVMValueRef b) {
  return LLVMBuildSelect(m->b, c, a, b, "");
}

/* x clamped into [lo, hi], NaN to lo (the compare fails). */
static LLVMValueRef clamp(mt *m, LLVMValueRef x, float lo, float hi) {
  LLVMValueRef c = sel(m, fcmp(m, LLVMRealOGT, x, fc(m, lo)), x, fc(m, lo));
  return sel(m, fcmp(m, LLVMRealOLT, c, fc(m, hi)), c, fc(m, hi));
}

static LLVMValueRef shl23(mt *m, LLVMValueRef n) { return LLVMBuildShl(m->b, n, ic(m, 23), ""); }

static LLVMValueRef poly(mt *m, LLVMValueRef r, LLVMValueRef r2) {
  LLVMValueRef a = fma3(m, fc(m, KDC_MATH_C3), r, fc(m, KDC_MATH_C2));
  LLVMValueRef b = fma3(m, fc(m, KDC_MATH_C5), r, fc(m, KDC_MATH_C4));
  return fma3(m, fma3(m, fc(m, KDC_MATH_C6), r2, b), r2, a);
}

/* The reduction: r, and n as i32. */
static LLVMValueRef reduce(mt *m, LLVMValueRef x, LLVMValueRef *r) {
  LLVMValueRef t = fmul(m, x, fc(m, KDC_MATH_LOG2E));
  LLVMValueRef n = intr(m, "llvm.roundeven", &t, 1);
  *r = fma3(m, n, fc(m, -KDC_MATH_LN2_LO), fma3(m, n, fc(m, -KDC_MATH_LN2_HI), x));
  return LLVMBuildFPToSI(m->b, n, m->i, "");
}

static LLVMValueRef body_exp(mt *m, LLVMValueRef x) {
  LLVMValueRef r, n = reduce(m, clamp(m, x, KDC_MATH_EXP_LO, KDC_MATH_EXP_HI), &r);
  LLVMValueRef p = poly(m, r, fmul(m, r, r));
  LLVMValueRef e = fma3(m, fma3(m, r, p, fc(m, 1)), r, fc(m, 1)); /* 1 + r (1 + r p) */
  LLVMValueRef bits = LLVMBuildAdd(m->b, LLVMBuildBitCast(m->b, e, m->i, ""), shl23(m, n), "");
  LLVMValueRef y = LLVMBuildBitCast(m->b, bits, m->f, "");
  y = sel(m, fcmp(m, LLVMRealOLT, x, fc(m, KDC_MATH_EXP_LO)), fc(m, 0), y);
  y = sel(m, fcmp(m, LLVMRealOGT, x, fc(m, KDC_MATH_EXP_HI)), fc(m, __builtin_inff()), y);
  return sel(m, fcmp(m, LLVMRealUNO, x, x), x, y);
}

/* The C function's expm1_mid, x in [EXPM1_LO, EXPM1_BIG]. */
static LLVMValueRef expm1_mid(mt *m, LLVMValueRef x) {
  LLVMValueRef r, n = reduce(m, x, &r);
  LLVMValueRef s = LLVMBuildBitCast(m->b, shl23(m, LLVMBuildAdd(m->b, n, ic(m, 127), "")), m->f, "");
  LLVMValueRef r2 = fmul(m, r, r);
  return fma3(m, s, fma3(m, r2, poly(m, r, r2), r), fsub(m, s, fc(m, 1)));
}

static LLVMValueRef body_expm1(mt *m, LLVMValueRef x) {
  LLVMValueRef y = expm1_mid(m, clamp(m, x, KDC_MATH_EXPM1_LO, KDC_MATH_EXPM1_BIG));
  y = sel(m, fcmp(m, LLVMRealOLT, x, fc(m, KDC_MATH_EXPM1_LO)), fc(m, -1), y);
  y = sel(m, fcmp(m, LLVMRealOGT, x, fc(m, KDC_MATH_EXPM1_BIG)), body_exp(m, x), y);
  /* NaN and +-0 are their own results (expm1(-0) = -0) */
  LLVMValueRef same = LLVMBuildOr(m->b, fcmp(m, LLVMRealUNO, x, x), fcmp(m, LLVMRealOEQ, x, fc(m, 0)), "");
  return sel(m, same, x, y);
}

static LLVMValueRef body_tanh(mt *m, LLVMValueRef x) {
  LLVMValueRef a = intr(m, "llvm.fabs", &x, 1);
  /* a clamped to TANH_ONE (NaN too: the compare fails) */
  LLVMValueRef ac = sel(m, fcmp(m, LLVMRealOLT, a, fc(m, KDC_MATH_TANH_ONE)), a, fc(m, KDC_MATH_TANH_ONE));
  LLVMValueRef e = expm1_mid(m, fadd(m, ac, ac));
  LLVMValueRef t = LLVMBuildFDiv(m->b, e, fadd(m, e, fc(m, 2)), "");
  t = sel(m, fcmp(m, LLVMRealOGT, a, fc(m, KDC_MATH_TANH_ONE)), fc(m, 1), t);
  LLVMValueRef args[2] = {t, x};
  t = intr(m, "llvm.copysign", args, 2);
  return sel(m, fcmp(m, LLVMRealUNO, x, x), x, t);
}

static LLVMValueRef body_logistic(mt *m, LLVMValueRef x) {
  LLVMValueRef e = body_exp(m, LLVMBuildFNeg(m->b, x, ""));
  return LLVMBuildFDiv(m->b, fc(m, 1), fadd(m, fc(m, 1), e), "");
}

typedef LLVMValueRef (*body_fn)(mt *, LLVMValueRef);

/* Defines |name| (scalar when lanes == 0) in P's module with |body|. */
static LLVMValueRef define(cg_plan *P, const char *name, unsigned lanes, body_fn body) {
  LLVMTypeRef f = lanes ? LLVMVectorType(P->f32, lanes) : P->f32;
  LLVMTypeRef ft = LLVMFunctionType(f, &f, 1, 0);
  LLVMValueRef fn = LLVMAddFunction(P->mod, name, ft);
  static const char *const attrs[] = {"nounwind", "willreturn", "nosync", "nofree"};
  for (size_t k = 0; k < sizeof attrs / sizeof *attrs; k++)
    LLVMAddAttributeAtIndex(fn, LLVMAttributeFunctionIndex,
                            LLVMCreateEnumAttribute(
                                P->ctx, LLVMGetEnumAttributeKindForName(attrs[k], strlen(attrs[k])), 0));
  LLVMAddAttributeAtIndex(fn, LLVMAttributeFunctionIndex,
                          LLVMCreateEnumAttribute(P->ctx, LLVMGetEnumAttributeKindForName("memory", 6),
                                                  0)); /* none */
  /* kept out of line: a call per element in kernels that stay scalar */
  LLVMAddAttributeAtIndex(fn, LLVMAttributeFunctionIndex,
                          LLVMCreateEnumAttribute(P->ctx, LLVMGetEnumAttributeKindForName("noinline", 8), 0));
  mt m = {P, LLVMCreateBuilderInContext(P->ctx), f,
          lanes ? LLVMVectorType(P->i32, lanes) : P->i32, lanes};
  LLVMPositionBuilderAtEnd(m.b, LLVMAppendBasicBlockInContext(P->ctx, fn, "entry"));
  LLVMBuildRet(m.b, body(&m, LLVMGetParam(fn, 0)));
  LLVMDisposeBuilder(m.b);
  return fn;
}

static const unsigned vlanes[] = {4, 8, 16};

/* A call of kdc_math_<f> on |x|, defining the function and its vector
 * variants on first use. */
static LLVMValueRef call(cg_plan *P, const char *f, body_fn body, LLVMValueRef x) {
  char name[32], vname[48], variants[512];
  snprintf(name, sizeof name, "kdc_math_%s", f);
  LLVMValueRef fn = LLVMGetNamedFunction(P->mod, name);
  size_t off = 0;
  variants[0] = 0;
  for (size_t k = 0; k < sizeof vlanes / sizeof *vlanes; k++) {
    snprintf(vname, sizeof vname, "%s_v%u", name, vlanes[k]);
    if (!fn) define(P, vname, vlanes[k], body);
    off += (size_t)snprintf(variants + off, sizeof variants - off, "%s_ZGV_LLVM_N%uv_%s(%s)",
                            k ? "," : "", vlanes[k], name, vname);
  }
  if (!fn) fn = define(P, name, 0, body);
  LLVMTypeRef ft = LLVMGlobalGetValueType(fn);
  LLVMValueRef c = LLVMBuildCall2(P->b, ft, fn, &x, 1, "");
  LLVMAddCallSiteAttribute(c, LLVMAttributeFunctionIndex,
                           LLVMCreateStringAttribute(P->ctx, "vector-function-abi-variant", 27,
                                                     variants, (unsigned)off));
  return c;
}

LLVMValueRef cg_math_exp(cg_plan *P, LLVMValueRef x) { return call(P, "exp", body_exp, x); }
LLVMValueRef cg_math_expm1(cg_plan *P, LLVMValueRef x) { return call(P, "expm1", body_expm1, x); }
LLVMValueRef cg_math_tanh(cg_plan *P, LLVMValueRef x) { return call(P, "tanh", body_tanh, x); }
LLVMValueRef cg_math_logistic(cg_plan *P, LLVMValueRef x) {
  return call(P, "logistic", body_logistic, x);
}
