/*
 * codegen/kernel_body.c: the body of a kernel, generated once over an
 * element multi-index and shared by every target's wrapper.
 *
 *   internal alwaysinline void kdc_body_<k>(ptr out, ptr a1, ..., ptr coords,
 *       i64 i_0, ..., i64 i_{r-1})
 *
 * computes the kernel's root at index (i_0..i_{r-1}) of its output and
 * stores it at out[linear].  Operand chains are emitted from the root (a
 * walk with an explicit stack of frames, below; no size bound): elementwise members at the same index, data movement
 * (broadcast_in_dim, transpose, reshape, slice, pad, concatenate) as index
 * arithmetic, iota from the index, splat constants as immediates, dense
 * constants as global data, values outside the group as loads from their
 * argument pointer, reduce and an in-kernel dot_general as loops inside the
 * body (accumulating in increasing index order, like the interpreter), the
 * windowed and indexed ops (convolution, reduce_window, select_and_scatter,
 * gather, scatter_add) through codegen/body_window.c, reverse as index
 * arithmetic.
 *
 * Indices.  An index is kept as a multi-index, a linear offset, or both,
 * and converted lazily: a reshape passes the linear offset through, and a
 * load of a materialized operand needs only that, so reshapes of buffers
 * cost no div/mod.  Every emitted value is memoised per (node, index
 * context): a DAG inside a group is emitted once per distinct index, never
 * expanded into a tree.
 *
 * Dominance rule for the memo: a context's values are emitted in the region
 * where the context was created.  Loops (reduce, dot) first force the
 * parent's multi-index, then create a fresh context for their body, which
 * is never used after the loop, so no cached value escapes its block.
 * Loop state lives in allocas of the entry block; SROA/mem2reg in the O3
 * pipeline turns them into SSA.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/codegen.h"

typedef struct ix {
  int rank;
  int64_t dims[KDC_MAX_RANK];
  LLVMValueRef m[KDC_MAX_RANK];  /* multi-index (when have_m) */
  bool have_m;
  LLVMValueRef lin;              /* linear row-major offset, or NULL */
  int id;                        /* memo context */
} ix;

typedef struct memo { kdc_value_id v; int ctx; LLVMValueRef val; } memo;

typedef struct emitter {
  cg_plan *P;
  const cg_kernel *k;
  const kdc_func *f;
  LLVMBuilderRef b;
  LLVMValueRef fn;
  LLVMBasicBlockRef entry;
  LLVMValueRef *arg;  /* pointer for each arg slot */
  LLVMValueRef coords; /* the device's mesh coordinates (i64 per axis) */
  memo *memo;
  size_t n_memo, cap_memo;
  int64_t *hash;              /* memo index by (v, ctx); -1 empty */
  size_t cap_hash;            /* a power of two, or 0 */
  struct frame **frames;      /* the walk's frames (emit), reused */
  size_t n_frames, cap_frames, depth;
  int next_ctx;
  int64_t cost, trips;  /* ops per element, current loop trip product */
  int root_piece;       /* >= 0: the root is a concatenate and the index lies in this
                           piece (cg_body_emit_piece) */
} emitter;

static LLVMValueRef C(emitter *E, int64_t v) {
  return LLVMConstInt(E->P->i64, (unsigned long long)v, 1);
}

static void ix_init(emitter *E, ix *x, int rank, const int64_t *dims) {
  memset(x, 0, sizeof *x);
  x->rank = rank;
  if (rank) memcpy(x->dims, dims, sizeof(int64_t) * (size_t)rank);
  x->id = E->next_ctx++;
}

/* The row-major offset as a sum of index * stride (not Horner's
 * ((m0 d1 + m1) d2 + m2)), its constant part (a slice start, a gate of an
 * LSTM's [B, 4, u]) added last, which load_elem turns into a GEP of its
 * own: with the constant inside the index, InstCombine made the row's
 * base, the constant and the inner index one chain of `or`s, and the loop
 * vectoriser, no longer seeing an affine address, gathered every element
 * of a unit-stride row. */
static LLVMValueRef lin_of(emitter *E, ix *x) {
  if (x->lin) return x->lin;
  LLVMValueRef l = NULL;
  int64_t stride = 1, c = 0;
  for (int d = x->rank; d-- > 0; stride *= x->dims[d]) {
    if (LLVMIsAConstantInt(x->m[d])) {
      c += LLVMConstIntGetSExtValue(x->m[d]) * stride;
      continue;
    }
    LLVMValueRef t = stride == 1 ? x->m[d] : LLVMBuildNSWMul(E->b, x->m[d], C(E, stride), "");
    l = l ? LLVMBuildNSWAdd(E->b, t, l, "") : t;
  }
  if (!l) l = C(E, c);
  else if (c) l = LLVMBuildNSWAdd(E->b, l, C(E, c), "");
  return x->lin = l;
}

static void multi_of(emitter *E, ix *x) {
  if (x->have_m) return;
  LLVMValueRef l = x->lin;
  for (int d = x->rank - 1; d >= 0; d--) {
    if (x->dims[d] == 1) {
      x->m[d] = C(E, 0);
      continue;
    }
    x->m[d] = d == 0 ? l : LLVMBuildURem(E->b, l, C(E, x->dims[d]), "");
    if (d > 0) l = LLVMBuildUDiv(E->b, l, C(E, x->dims[d]), "");
  }
  x->have_m = true;
}

/* Is |v| computed inside kernel |k| (a member of its group, or its root)? */
static bool in_kernel(const cg_kernel *k, kdc_value_id v) {
  return k->group >= 0 ? k->f->nodes[v].group == k->group : v == k->root;
}

static bool is_member(const emitter *E, kdc_value_id v) { return in_kernel(E->k, v); }

static LLVMValueRef load_elem(emitter *E, LLVMValueRef p, kdc_dtype d, LLVMValueRef lin) {
  LLVMTypeRef mt = cg_mem_type(E->P, d);
  if (LLVMIsAInstruction(lin) && LLVMGetInstructionOpcode(lin) == LLVMAdd &&
      LLVMIsAConstantInt(LLVMGetOperand(lin, 1))) { /* lin_of's constant part: a GEP of its own */
    LLVMValueRef var = LLVMGetOperand(lin, 0), c = LLVMGetOperand(lin, 1);
    p = LLVMBuildInBoundsGEP2(E->b, mt, p, &c, 1, "");
    lin = var;
  }
  LLVMValueRef g = LLVMBuildInBoundsGEP2(E->b, mt, p, &lin, 1, "");
  LLVMValueRef v = LLVMBuildLoad2(E->b, mt, g, "");
  LLVMSetAlignment(v, (unsigned)kdc_dtype_size(d));
  if (d == KDC_DTYPE_BOOL) v = LLVMBuildICmp(E->b, LLVMIntNE, v, LLVMConstInt(E->P->i8, 0, 0), "");
  return cg_widen(E->P, d, v);
}

/* The global holding dense constant |v|, created on first use. */
static LLVMValueRef const_global(emitter *E, kdc_value_id v) {
  cg_plan *P = E->P;
  for (size_t i = 0; i < P->n_globals; i++)
    if (P->globals[i].f == E->f && P->globals[i].v == v) return P->globals[i].g;
  const kdc_node *nd = &E->f->nodes[v];
  size_t bytes = kdc_type_bytes(&nd->type);
  LLVMTypeRef at = LLVMArrayType2(P->i8, bytes);
  char name[64];
  snprintf(name, sizeof name, "kdc_const_%zu", P->n_globals);
  LLVMValueRef g = LLVMAddGlobal(P->mod, at, name);
  LLVMSetInitializer(g, LLVMConstStringInContext2(P->ctx, nd->attr.constant.data, bytes, 1));
  LLVMSetGlobalConstant(g, 1);
  LLVMSetLinkage(g, LLVMPrivateLinkage);
  LLVMSetAlignment(g, 64);
  KDC_GROW(P->globals, P->cap_globals, P->n_globals + 1);
  P->globals[P->n_globals++] = (cg_global){E->f, v, g};
  return g;
}

static LLVMValueRef emit(emitter *E, kdc_value_id v, ix *x, kdc_status *st);

static LLVMValueRef emit_const(emitter *E, kdc_value_id v, ix *x) {
  const kdc_node *nd = &E->f->nodes[v];
  if (nd->attr.constant.splat || kdc_type_numel(&nd->type) == 1)
    return cg_const_scalar(E->P, nd->type.dtype, nd->attr.constant.data);
  return load_elem(E, const_global(E, v), nd->type.dtype, lin_of(E, x));
}

/* A value outside the group: a load from its argument, or a constant seen
 * through reshape aliases. */
static LLVMValueRef emit_external(emitter *E, kdc_value_id v, ix *x, kdc_status *st) {
  const kdc_node *nd = &E->f->nodes[v];
  if (E->k->slot[v] >= 0) return load_elem(E, E->arg[E->k->slot[v]], nd->type.dtype, lin_of(E, x));
  kdc_value_id b = v;
  while ((E->f->nodes[b].op == KDC_OP_RESHAPE ||
          E->f->nodes[b].op == KDC_OP_SHARDING_CONSTRAINT) && E->f->nodes[b].group < 0)
    b = E->f->nodes[b].in[0];
  if (E->f->nodes[b].op == KDC_OP_CONSTANT) {
    ix c;
    ix_init(E, &c, E->f->nodes[b].type.rank, E->f->nodes[b].type.dims);
    c.lin = lin_of(E, x);
    return emit_const(E, b, &c);
  }
  *st = KDC_ERR(KDC_INTERNAL, "codegen: func %s: %%%u read by kernel %%%u has no storage",
                E->f->name, v, E->k->root);
  return NULL;
}

/* Opens "for (iv = 0; iv < n; iv++)": returns the header block; the builder
 * is left in the body.  close_loop() increments and jumps back. */
typedef struct loop { LLVMValueRef iv; LLVMBasicBlockRef header, exit; } loop;

LLVMValueRef cg_entry_alloca(cg_plan *P, LLVMValueRef fn, LLVMTypeRef t) {
  LLVMBuilderRef tmp = LLVMCreateBuilderInContext(P->ctx);
  LLVMBasicBlockRef e = LLVMGetEntryBasicBlock(fn);
  LLVMValueRef first = LLVMGetFirstInstruction(e);
  if (first) LLVMPositionBuilderBefore(tmp, first);
  else LLVMPositionBuilderAtEnd(tmp, e);
  LLVMValueRef a = LLVMBuildAlloca(tmp, t, "");
  LLVMDisposeBuilder(tmp);
  return a;
}

static LLVMValueRef entry_alloca(emitter *E, LLVMTypeRef t) {
  return cg_entry_alloca(E->P, E->fn, t);
}

static LLVMValueRef open_loop(emitter *E, loop *L, int64_t n) {
  L->iv = entry_alloca(E, E->P->i64);
  LLVMBuildStore(E->b, C(E, 0), L->iv);
  L->header = LLVMAppendBasicBlockInContext(E->P->ctx, E->fn, "loop");
  LLVMBasicBlockRef body = LLVMAppendBasicBlockInContext(E->P->ctx, E->fn, "body");
  L->exit = LLVMAppendBasicBlockInContext(E->P->ctx, E->fn, "done");
  LLVMBuildBr(E->b, L->header);
  LLVMPositionBuilderAtEnd(E->b, L->header);
  LLVMValueRef i = LLVMBuildLoad2(E->b, E->P->i64, L->iv, "");
  LLVMBuildCondBr(E->b, LLVMBuildICmp(E->b, LLVMIntSLT, i, C(E, n), ""), body, L->exit);
  LLVMPositionBuilderAtEnd(E->b, body);
  return i;
}

static void close_loop(emitter *E, loop *L) {
  LLVMValueRef i = LLVMBuildLoad2(E->b, E->P->i64, L->iv, "");
  LLVMBuildStore(E->b, LLVMBuildNSWAdd(E->b, i, C(E, 1), ""), L->iv);
  LLVMBuildBr(E->b, L->header);
  LLVMPositionBuilderAtEnd(E->b, L->exit);
}

static bool in_list(const kdc_dimlist *l, int64_t d) {
  for (int i = 0; i < l->n; i++)
    if (l->v[i] == d) return true;
  return false;
}

/* Operand loads for codegen/body_window.c: element |lin| of operand |k|
 * (a nested walk, see below). */
typedef struct window_ctx { emitter *E; kdc_value_id v; } window_ctx;

static LLVMValueRef window_load(void *ctx, int k, LLVMValueRef lin, kdc_status *st) {
  window_ctx *w = ctx;
  const kdc_type *t = &w->E->f->nodes[w->E->f->nodes[w->v].in[k]].type;
  ix in;
  ix_init(w->E, &in, t->rank, t->dims);
  in.lin = lin;
  return emit(w->E, w->E->f->nodes[w->v].in[k], &in, st);
}

static LLVMValueRef emit_window(emitter *E, kdc_value_id v, ix *x, kdc_status *st) {
  multi_of(E, x);
  window_ctx w = {E, v};
  cg_window_io io = {E->P, E->f, v, E->fn, E->entry, x->m, window_load, &w, 0};
  LLVMValueRef r = cg_window_emit(&io, st);
  E->cost += io.cost * E->trips;
  return r;
}

/* The device's group index over |axes| (ir/spmd.c): its coordinates on
 * them read as a mixed-radix number, major first. */
static LLVMValueRef group_index(emitter *E, int n, const uint8_t *axes) {
  const kdc_mesh *m = &E->f->module->mesh;
  LLVMValueRef g = C(E, 0);
  for (int i = 0; i < n; i++) {
    LLVMValueRef idx = C(E, axes[i]);
    LLVMValueRef p = LLVMBuildInBoundsGEP2(E->b, E->P->i64, E->coords, &idx, 1, "");
    LLVMValueRef c = LLVMBuildLoad2(E->b, E->P->i64, p, "");
    LLVMSetAlignment(c, 8);
    g = LLVMBuildNSWAdd(E->b, LLVMBuildNSWMul(E->b, g, C(E, m->sizes[axes[i]]), ""), c, "");
  }
  return g;
}

/* ---- the walk: an explicit stack of frames -------------------------------
 * emit(v, x) is a loop over frames, one per (value, index) being computed.
 * A member's step either finishes its value or asks for one operand at an
 * index the frame owns (a, b, or its own x) and resumes at its next phase
 * with that operand's value: operands come out in order, each before the
 * code that uses it, the order of the recursive walk this replaced (same
 * plans, byte for byte), and the depth of a chain costs heap frames, not
 * native stack.  Only body_window.c's operand loads re-enter emit() (a
 * nested walk on the same frame stack): native recursion is as deep as
 * windowed ops nest inside one kernel. */

typedef struct frame {
  kdc_value_id v;
  ix *x;                        /* the index this value is computed at */
  int phase;
  ix a, b;                      /* operand indices (frames never move) */
  LLVMValueRef acc, t0, t1;     /* accumulator, values kept across operands */
  LLVMValueRef ops[3];          /* an elementwise op's operands */
  loop L[KDC_MAX_RANK];
  int nl, k;
  int64_t off, saved_trips;
} frame;

typedef enum step_r { STEP_DONE, STEP_NEED } step_r;

enum { PHASE_PASS = 1000 };  /* the operand's value is the result */

/* Asks for operand |ov| at |oi|; the step resumes at phase |ph|. */
#define NEED(ov, oi, ph) \
  return (F->phase = (ph), *need_v = (ov), *need_x = (oi), STEP_NEED)
#define DONE(val) return (*out = (val), STEP_DONE)

static step_r step_reduce(emitter *E, frame *F, LLVMValueRef val, kdc_value_id *need_v,
                          ix **need_x, LLVMValueRef *out) {
  const kdc_node *nd = &E->f->nodes[F->v];
  const kdc_type *xt = &E->f->nodes[nd->in[0]].type;
  kdc_dtype d = xt->dtype;
  if (F->phase == 0) {
    bool red[KDC_MAX_RANK] = {false};
    for (int i = 0; i < nd->attr.reduce.dims.n; i++) red[nd->attr.reduce.dims.v[i]] = true;
    multi_of(E, F->x);
    F->acc = entry_alloca(E, cg_reg_type(E->P, d));
    LLVMBuildStore(E->b, cg_reduce_init(E->P, nd->attr.reduce.kind, d), F->acc);
    ix_init(E, &F->a, xt->rank, xt->dims);
    F->a.have_m = true;
    int nl = 0, r = 0;
    int64_t trips = 1;
    for (int dd = 0; dd < xt->rank; dd++)  /* outermost loop = lowest reduced dim */
      if (red[dd]) F->a.m[dd] = open_loop(E, &F->L[nl++], xt->dims[dd]), trips *= xt->dims[dd];
      else F->a.m[dd] = F->x->m[r++];
    F->nl = nl;
    F->saved_trips = E->trips;
    E->trips *= trips;
    NEED(nd->in[0], &F->a, 1);
  }
  LLVMValueRef a = LLVMBuildLoad2(E->b, cg_reg_type(E->P, d), F->acc, "");
  LLVMBuildStore(E->b, cg_reduce_step(E->P, nd->attr.reduce.kind, d, a, val), F->acc);
  E->cost += E->trips;
  E->trips = F->saved_trips;
  while (F->nl > 0) close_loop(E, &F->L[--F->nl]);
  DONE(LLVMBuildLoad2(E->b, cg_reg_type(E->P, d), F->acc, ""));
}

/* dot_general inside a kernel (non-f32 dots, or a DOT a fusion put in a
 * group): contracting pairs looped in list order, like the interpreter. */
static step_r step_dot(emitter *E, frame *F, LLVMValueRef val, kdc_value_id *need_v,
                       ix **need_x, LLVMValueRef *out) {
  const kdc_node *nd = &E->f->nodes[F->v];
  const kdc_attr_dot *a = &nd->attr.dot;
  kdc_dtype d = nd->type.dtype;
  if (F->phase == 0) {
    const kdc_type *lt = &E->f->nodes[nd->in[0]].type, *rt = &E->f->nodes[nd->in[1]].type;
    ix *x = F->x, *li = &F->a, *ri = &F->b;
    multi_of(E, x);
    ix_init(E, li, lt->rank, lt->dims);
    ix_init(E, ri, rt->rank, rt->dims);
    li->have_m = ri->have_m = true;
    int r = 0;
    for (int i = 0; i < a->lhs_batch.n; i++, r++) {
      li->m[a->lhs_batch.v[i]] = x->m[r];
      ri->m[a->rhs_batch.v[i]] = x->m[r];
    }
    for (int dd = 0; dd < lt->rank; dd++)
      if (!in_list(&a->lhs_batch, dd) && !in_list(&a->lhs_contract, dd)) li->m[dd] = x->m[r++];
    for (int dd = 0; dd < rt->rank; dd++)
      if (!in_list(&a->rhs_batch, dd) && !in_list(&a->rhs_contract, dd)) ri->m[dd] = x->m[r++];
    F->acc = entry_alloca(E, cg_reg_type(E->P, d));
    LLVMBuildStore(E->b, cg_reduce_init(E->P, KDC_RED_SUM, d), F->acc);
    int64_t trips = 1;
    for (int c = 0; c < a->lhs_contract.n; c++) {
      int64_t n = lt->dims[a->lhs_contract.v[c]];
      LLVMValueRef i = open_loop(E, &F->L[c], n);
      li->m[a->lhs_contract.v[c]] = ri->m[a->rhs_contract.v[c]] = i;
      trips *= n;
    }
    F->saved_trips = E->trips;
    E->trips *= trips;
    NEED(nd->in[0], li, 1);
  }
  if (F->phase == 1) {
    F->t0 = val;
    NEED(nd->in[1], &F->b, 2);
  }
  LLVMValueRef lv = F->t0, rv = val;
  if (a->bf16_operands) {  /* the interpreter's kdc_float_round */
    lv = cg_round(E->P, KDC_DTYPE_BF16, lv);
    rv = cg_round(E->P, KDC_DTYPE_BF16, rv);
  }
  if (d == KDC_DTYPE_BOOL) {  /* interpreter: integer math, stored != 0 */
    lv = LLVMBuildZExt(E->b, lv, E->P->i64, "");
    rv = LLVMBuildZExt(E->b, rv, E->P->i64, "");
  }
  kdc_dtype md = d == KDC_DTYPE_BOOL ? KDC_DTYPE_I64 : d;
  LLVMValueRef prod = cg_emit_binop(E->P, KDC_OP_MUL, md, lv, rv);
  if (d == KDC_DTYPE_BOOL) prod = LLVMBuildICmp(E->b, LLVMIntNE, prod, C(E, 0), "");
  LLVMValueRef s = LLVMBuildLoad2(E->b, cg_reg_type(E->P, d), F->acc, "");
  LLVMBuildStore(E->b, cg_reduce_step(E->P, KDC_RED_SUM, d, s, prod), F->acc);
  E->cost += 2 * E->trips;
  E->trips = F->saved_trips;
  for (int c = a->lhs_contract.n; c > 0;) close_loop(E, &F->L[--c]);
  DONE(LLVMBuildLoad2(E->b, cg_reg_type(E->P, d), F->acc, ""));
}

/* pad: result i <- operand (i - low) / (interior + 1) when that lands on an
 * element, else the pad value.  Out-of-range lanes read a clamped index. */
static step_r step_pad(emitter *E, frame *F, LLVMValueRef val, kdc_value_id *need_v,
                       ix **need_x, LLVMValueRef *out) {
  const kdc_node *nd = &E->f->nodes[F->v];
  const kdc_attr_pad *p = &nd->attr.pad;
  const kdc_type *xt = &E->f->nodes[nd->in[0]].type;
  LLVMBuilderRef B = E->b;
  if (F->phase == 0) {
    ix_init(E, &F->a, 0, NULL);
    NEED(nd->in[1], &F->a, 1);
  }
  if (F->phase == 2) DONE(LLVMBuildSelect(B, F->t1, val, F->t0, ""));
  LLVMValueRef pv = val;
  if (kdc_type_numel(xt) == 0) DONE(pv);  /* all padding: never read x */
  ix *x = F->x, *in = &F->b;
  multi_of(E, x);
  ix_init(E, in, xt->rank, xt->dims);
  in->have_m = true;
  LLVMValueRef ok = LLVMConstInt(E->P->i1, 1, 0);
  for (int d = 0; d < xt->rank; d++) {
    LLVMValueRef t = LLVMBuildNSWSub(B, x->m[d], C(E, p->low.v[d]), "");
    LLVMValueRef q = t, good = LLVMBuildICmp(B, LLVMIntSGE, t, C(E, 0), "");
    int64_t s = p->interior.v[d] + 1;
    if (s > 1) {
      LLVMValueRef tc = LLVMBuildSelect(B, good, t, C(E, 0), "");
      q = LLVMBuildUDiv(B, tc, C(E, s), "");
      LLVMValueRef rem = LLVMBuildURem(B, tc, C(E, s), "");
      good = LLVMBuildAnd(B, good, LLVMBuildICmp(B, LLVMIntEQ, rem, C(E, 0), ""), "");
    }
    good = LLVMBuildAnd(B, good, LLVMBuildICmp(B, LLVMIntSLT, q, C(E, xt->dims[d]), ""), "");
    in->m[d] = LLVMBuildSelect(B, good, q, C(E, 0), "");
    ok = LLVMBuildAnd(B, ok, good, "");
  }
  F->t0 = pv, F->t1 = ok;
  NEED(nd->in[0], in, 2);
}

static step_r step_concat(emitter *E, frame *F, LLVMValueRef val, kdc_value_id *need_v,
                          ix **need_x, LLVMValueRef *out) {
  const kdc_node *nd = &E->f->nodes[F->v];
  int64_t dim = nd->attr.dim;
  ix *x = F->x, *in = &F->a;
  if (F->phase == 0) {
    multi_of(E, x);
    if (F->v == E->k->root && E->root_piece >= 0) {  /* the caller knows the piece */
      int64_t off = 0;
      for (int k = 0; k < E->root_piece; k++) off += E->f->nodes[nd->in[k]].type.dims[dim];
      const kdc_type *pt = &E->f->nodes[nd->in[E->root_piece]].type;
      ix_init(E, in, pt->rank, pt->dims);
      memcpy(in->m, x->m, sizeof in->m);
      in->have_m = true;
      in->m[dim] = LLVMBuildNSWSub(E->b, x->m[dim], C(E, off), "");
      NEED(nd->in[E->root_piece], in, PHASE_PASS);
    }
    F->k = 0, F->off = 0, F->t0 = NULL;
  } else {  /* piece k's value: later pieces win at t >= 0 */
    F->t0 = F->t0 ? LLVMBuildSelect(E->b, F->t1, val, F->t0, "") : val;
    F->off += E->f->nodes[nd->in[F->k]].type.dims[dim];
    F->k++;
  }
  for (; F->k < nd->n_in; F->k++) {
    const kdc_type *pt = &E->f->nodes[nd->in[F->k]].type;
    int64_t n = pt->dims[dim];
    if (n == 0) continue;
    ix_init(E, in, pt->rank, pt->dims);
    memcpy(in->m, x->m, sizeof in->m);
    in->have_m = true;
    LLVMValueRef t = LLVMBuildNSWSub(E->b, x->m[dim], C(E, F->off), "");
    LLVMValueRef lo = LLVMBuildICmp(E->b, LLVMIntSGE, t, C(E, 0), "");
    LLVMValueRef hi = LLVMBuildICmp(E->b, LLVMIntSLT, t, C(E, n), "");
    t = LLVMBuildSelect(E->b, lo, t, C(E, 0), "");
    in->m[dim] = LLVMBuildSelect(E->b, hi, t, C(E, n - 1), "");
    F->t1 = lo;
    NEED(nd->in[F->k], in, 1);
  }
  DONE(F->t0);
}

/* shard_slice: piece <group index over axes> of the operand along |dim|. */
static step_r step_shard_slice(emitter *E, frame *F, kdc_value_id *need_v, ix **need_x) {
  const kdc_node *nd = &E->f->nodes[F->v];
  const kdc_attr_coll *c = &nd->attr.coll;
  const kdc_type *xt = &E->f->nodes[nd->in[0]].type;
  ix *x = F->x, *in = &F->a;
  multi_of(E, x);
  ix_init(E, in, xt->rank, xt->dims);
  memcpy(in->m, x->m, sizeof in->m);
  LLVMValueRef off = LLVMBuildNSWMul(E->b, group_index(E, c->naxes, c->axes),
                                     C(E, nd->type.dims[c->dim]), "");
  in->m[c->dim] = LLVMBuildNSWAdd(E->b, x->m[c->dim], off, "");
  in->have_m = true;
  NEED(nd->in[0], in, PHASE_PASS);
}

/* rng_uniform at the element's global index: the local multi-index plus
 * the piece offsets of the value's sharding, raveled over the global dims. */
static step_r step_rng(emitter *E, frame *F, LLVMValueRef val, kdc_value_id *need_v,
                       ix **need_x, LLVMValueRef *out, kdc_status *st) {
  const kdc_node *nd = &E->f->nodes[F->v];
  const kdc_sharding *s = &nd->sharding;
  const kdc_type *stt = &E->f->nodes[nd->in[0]].type;
  ix *x = F->x;
  if (F->phase == 0) {
    if (stt->dtype == KDC_DTYPE_F32) {
      *st = KDC_ERR(KDC_UNSUPPORTED, "codegen: func %s: %%%u: rng_uniform with an f32 step",
                    E->f->name, F->v);
      DONE(NULL);
    }
    ix_init(E, &F->a, 0, NULL);
    F->a.have_m = true;
    NEED(nd->in[0], &F->a, 1);
  }
  LLVMValueRef step = val;
  if (stt->dtype != KDC_DTYPE_I64)
    step = stt->dtype == KDC_DTYPE_BOOL ? LLVMBuildZExt(E->b, step, E->P->i64, "")
                                        : LLVMBuildSExt(E->b, step, E->P->i64, "");
  bool split = false;
  for (int d = 0; s->present && d < s->rank && d < nd->type.rank; d++) split |= s->naxes[d] > 0;
  LLVMValueRef index;
  if (!split) {
    index = lin_of(E, x);
  } else {
    const kdc_mesh *m = &E->f->module->mesh;
    multi_of(E, x);
    index = C(E, 0);
    for (int d = 0; d < nd->type.rank; d++) {
      int64_t k = kdc_sharding_dim_shards(m, s, d), l = nd->type.dims[d];
      LLVMValueRef i = x->m[d];
      if (s->naxes[d]) {
        LLVMValueRef g = group_index(E, s->naxes[d], s->axes[d]);
        i = LLVMBuildNSWAdd(E->b, i, LLVMBuildNSWMul(E->b, g, C(E, l), ""), "");
      }
      index = LLVMBuildNSWAdd(E->b, LLVMBuildNSWMul(E->b, index, C(E, l * k), ""), i, "");
    }
  }
  E->cost += 40 * E->trips;  /* ten Philox rounds */
  DONE(cg_emit_rng_uniform(E->P, nd->attr.seed, step, index));
}

/* Does a reshape from |a| to |b| only insert or drop unit dims (the same
 * dims > 1 in the same order)?  Its operand's multi-index is then the
 * result's, unit dims at 0: no div/mod of the linear offset. */
static bool unit_reshape(const kdc_type *a, const kdc_type *b) {
  int i = 0, j = 0;
  for (;;) {
    while (i < a->rank && a->dims[i] == 1) i++;
    while (j < b->rank && b->dims[j] == 1) j++;
    if (i == a->rank || j == b->rank) return i == a->rank && j == b->rank;
    if (a->dims[i++] != b->dims[j++]) return false;
  }
}

/* One step of member F->v (phase 0: start; later: |val| is the operand
 * asked for last).  DONE with NULL (and *|st|) on failure. */
static step_r step_member(emitter *E, frame *F, LLVMValueRef val, kdc_value_id *need_v,
                          ix **need_x, LLVMValueRef *out, kdc_status *st) {
  const kdc_node *nd = &E->f->nodes[F->v];
  LLVMBuilderRef B = E->b;
  const kdc_type *xt = nd->n_in ? &E->f->nodes[nd->in[0]].type : NULL;
  ix *x = F->x, *in = &F->a;
  if (F->phase == PHASE_PASS) DONE(val);
  switch (nd->op) {
  case KDC_OP_IOTA: {
    multi_of(E, x);
    LLVMValueRef i = x->m[nd->attr.dim];
    if (kdc_dtype_is_float(nd->type.dtype)) DONE(LLVMBuildSIToFP(B, i, E->P->f32, ""));
    DONE(LLVMBuildIntCast2(B, i, cg_reg_type(E->P, nd->type.dtype), 1, ""));
  }
  case KDC_OP_BROADCAST:
    multi_of(E, x);
    ix_init(E, in, xt->rank, xt->dims);
    for (int i = 0; i < xt->rank; i++)
      in->m[i] = xt->dims[i] == 1 ? C(E, 0) : x->m[nd->attr.dims.v[i]];
    in->have_m = true;
    NEED(nd->in[0], in, PHASE_PASS);
  case KDC_OP_TRANSPOSE:
    multi_of(E, x);
    ix_init(E, in, xt->rank, xt->dims);
    for (int i = 0; i < xt->rank; i++) in->m[nd->attr.dims.v[i]] = x->m[i];
    in->have_m = true;
    NEED(nd->in[0], in, PHASE_PASS);
  case KDC_OP_RESHAPE:
    ix_init(E, in, xt->rank, xt->dims);
    {
      kdc_type at = {.dtype = nd->type.dtype, .rank = x->rank}; /* the index's own dims */
      memcpy(at.dims, x->dims, sizeof at.dims);
      if (x->have_m && unit_reshape(xt, &at)) {
        for (int d = 0, j = 0; d < xt->rank; d++) {
          if (xt->dims[d] == 1) {
            in->m[d] = C(E, 0);
            continue;
          }
          while (x->dims[j] == 1) j++;
          in->m[d] = x->m[j++];
        }
        in->have_m = true;
        in->lin = x->lin; /* the same offset, when known */
      } else {
        in->lin = lin_of(E, x);
      }
    }
    NEED(nd->in[0], in, PHASE_PASS);
  case KDC_OP_SLICE:
    multi_of(E, x);
    ix_init(E, in, xt->rank, xt->dims);
    for (int d = 0; d < xt->rank; d++) {
      LLVMValueRef step = LLVMBuildNSWMul(B, x->m[d], C(E, nd->attr.slice.stride.v[d]), "");
      in->m[d] = LLVMBuildNSWAdd(B, C(E, nd->attr.slice.start.v[d]), step, "");
    }
    in->have_m = true;
    NEED(nd->in[0], in, PHASE_PASS);
  case KDC_OP_SHARDING_CONSTRAINT: NEED(nd->in[0], x, PHASE_PASS);  /* identity */
  case KDC_OP_PAD: return step_pad(E, F, val, need_v, need_x, out);
  case KDC_OP_CONCAT: return step_concat(E, F, val, need_v, need_x, out);
  case KDC_OP_REDUCE: return step_reduce(E, F, val, need_v, need_x, out);
  case KDC_OP_DOT: return step_dot(E, F, val, need_v, need_x, out);
  case KDC_OP_SHARD_SLICE: return step_shard_slice(E, F, need_v, need_x);
  case KDC_OP_RNG_UNIFORM: return step_rng(E, F, val, need_v, need_x, out, st);
  case KDC_OP_CONVOLUTION: case KDC_OP_REDUCE_WINDOW: case KDC_OP_SELECT_AND_SCATTER:
  case KDC_OP_GATHER: case KDC_OP_SCATTER_ADD:
    DONE(emit_window(E, F->v, x, st));  /* codegen/body_window.c */
  case KDC_OP_REVERSE:
    multi_of(E, x);
    ix_init(E, in, xt->rank, xt->dims);
    memcpy(in->m, x->m, sizeof in->m);
    for (int i = 0; i < nd->attr.dims.n; i++) {
      int64_t d = nd->attr.dims.v[i];
      in->m[d] = LLVMBuildNSWSub(B, C(E, xt->dims[d] - 1), x->m[d], "");
    }
    in->have_m = true;
    NEED(nd->in[0], in, PHASE_PASS);
  default: break;
  }
  /* elementwise: operands in order at the same index, then the op */
  if (F->phase == 0) {
    if (kdc_op_flags(nd->op) & OPF_COLL) {
      *st = KDC_ERR(KDC_INTERNAL, "codegen: func %s: %%%u: %s is a COLLECTIVE step and cannot "
                    "be part of a kernel", E->f->name, F->v, kdc_op_name(nd->op));
      DONE(NULL);
    }
    if (!(kdc_op_flags(nd->op) & OPF_EW)) {
      *st = KDC_ERR(KDC_UNSUPPORTED, "codegen: func %s: %%%u: %s cannot be part of a kernel",
                    E->f->name, F->v, kdc_op_name(nd->op));
      DONE(NULL);
    }
    F->k = 0;
  } else {
    F->ops[F->k++] = val;
  }
  if (F->k < nd->n_in) NEED(nd->in[F->k], x, 1);
  LLVMValueRef r;
  if ((*st = cg_emit_elementwise(E->P, E->f, nd, F->ops, &r))) DONE(NULL);
  E->cost += E->trips;
  DONE(r);
}

#undef NEED
#undef DONE

/* The memo: (value, index context) -> emitted value, open addressing. */
static size_t memo_slot(const emitter *E, kdc_value_id v, int ctx) {
  uint64_t h = ((uint64_t)v * 0x9E3779B97F4A7C15ull) ^ ((uint64_t)(uint32_t)ctx * 0xC2B2AE3D27D4EB4Full);
  size_t i = (size_t)(h ^ (h >> 29)) & (E->cap_hash - 1);
  while (E->hash[i] >= 0) {
    const memo *m = &E->memo[E->hash[i]];
    if (m->v == v && m->ctx == ctx) break;
    i = (i + 1) & (E->cap_hash - 1);
  }
  return i;
}

static LLVMValueRef memo_get(const emitter *E, kdc_value_id v, int ctx) {
  if (!E->cap_hash) return NULL;
  int64_t j = E->hash[memo_slot(E, v, ctx)];
  return j >= 0 ? E->memo[j].val : NULL;
}

static void memo_put(emitter *E, kdc_value_id v, int ctx, LLVMValueRef val) {
  if (2 * (E->n_memo + 1) > E->cap_hash) {  /* rehash at half full */
    free(E->hash);
    E->cap_hash = E->cap_hash ? 2 * E->cap_hash : 64;
    E->hash = kdc_xmalloc(E->cap_hash * sizeof *E->hash);
    for (size_t i = 0; i < E->cap_hash; i++) E->hash[i] = -1;
    for (size_t j = 0; j < E->n_memo; j++)
      E->hash[memo_slot(E, E->memo[j].v, E->memo[j].ctx)] = (int64_t)j;
  }
  KDC_GROW(E->memo, E->cap_memo, E->n_memo + 1);
  E->memo[E->n_memo] = (memo){v, ctx, val};
  E->hash[memo_slot(E, v, ctx)] = (int64_t)E->n_memo++;
}

static void emitter_free(emitter *E) {
  for (size_t i = 0; i < E->n_frames; i++) free(E->frames[i]);
  free(E->frames), free(E->memo), free(E->hash);
}

/* Value |v| at index |x|: memoised; constants and values outside the
 * kernel directly, members through the frame stack.  NULL (with *|st|) on
 * failure. */
static LLVMValueRef emit(emitter *E, kdc_value_id v, ix *x, kdc_status *st) {
  size_t base = E->depth;
  LLVMValueRef val = NULL;  /* the value just computed, for the frame below */
  for (;;) {
    /* (v, x) is wanted: memo, leaf, or a new frame */
    LLVMValueRef r = memo_get(E, v, x->id);
    bool leaf = true;
    if (!r) {
      const kdc_node *nd = &E->f->nodes[v];
      if (nd->op == KDC_OP_CONSTANT) r = emit_const(E, v, x);
      else if (!is_member(E, v)) r = emit_external(E, v, x, st);
      else {
        if (E->depth == E->n_frames) {
          KDC_GROW(E->frames, E->cap_frames, E->n_frames + 1);
          E->frames[E->n_frames++] = kdc_xmalloc(sizeof(frame));
        }
        frame *F = E->frames[E->depth++];
        F->v = v, F->x = x, F->phase = 0;
        leaf = false;
      }
      if (leaf) {
        if (!r) break;
        memo_put(E, v, x->id, r);
      }
    }
    if (leaf) {
      val = r;
      if (E->depth == base) return val;
    }
    /* run the top frame until it needs an operand, popping finished ones */
    for (;;) {
      frame *F = E->frames[E->depth - 1];
      LLVMValueRef out = NULL;
      if (step_member(E, F, val, &v, &x, &out, st) == STEP_NEED) break;
      if (!out) goto fail;
      const kdc_node *nd = &E->f->nodes[F->v];
      /* a bf16/f16 value is rounded where it is computed (data movement
       * only moves values that are rounded already) */
      if (kdc_dtype_is_half(nd->type.dtype) && !(kdc_op_flags(nd->op) & OPF_SHAPE) &&
          nd->op != KDC_OP_SHARDING_CONSTRAINT && nd->op != KDC_OP_SHARD_SLICE &&
          nd->op != KDC_OP_BROADCAST)
        out = cg_round(E->P, nd->type.dtype, out);
      memo_put(E, F->v, F->x->id, out);
      E->depth--;
      val = out;
      if (E->depth == base) return val;
    }
  }
fail:
  E->depth = base;
  return NULL;
}

/* Leading reduced dims p of a column reduction: the root is a reduce over
 * exactly the operand's dims [0, p), 0 < p < rank, with no other output. */
int cg_kernel_column_reduce(const cg_kernel *k) {
  if (k->transpose || k->n_extra) return 0;
  const kdc_node *nd = &k->f->nodes[k->root];
  if (nd->op != KDC_OP_REDUCE) return 0;
  const kdc_type *xt = &k->f->nodes[nd->in[0]].type;
  int p = nd->attr.reduce.dims.n;
  if (p < 1 || p >= xt->rank || kdc_type_numel(xt) <= 0) return 0;
  if (kdc_dtype_is_half(nd->type.dtype)) return 0; /* accumulates in memory: f32 only */
  for (int i = 0; i < p; i++)
    if (nd->attr.reduce.dims.v[i] != i) return 0;
  return p;
}

/* What a member walk (members_all) does at one member. */
typedef enum walk_r { WALK_FAIL, WALK_INTO, WALK_STOP } walk_r;

/* True when |check| passes every member reachable from |from| through
 * members it walks into (constants and values outside the group end a
 * path; |seen| marks visited members).  An explicit stack, no recursion. */
static bool members_all(const cg_kernel *k, kdc_value_id from, uint8_t *seen,
                        walk_r (*check)(const cg_kernel *, const kdc_node *)) {
  size_t n = 0, cap = 0;
  kdc_value_id *stack = NULL;
  KDC_GROW(stack, cap, 1);
  stack[n++] = from;
  bool ok = true;
  while (n && ok) {
    kdc_value_id v = stack[--n];
    const kdc_node *nd = &k->f->nodes[v];
    if (nd->op == KDC_OP_CONSTANT || !in_kernel(k, v) || seen[v]) continue;
    seen[v] = 1;
    walk_r r = check(k, nd);
    ok = r != WALK_FAIL;
    if (r != WALK_INTO) continue;
    KDC_GROW(stack, cap, n + (size_t)nd->n_in);
    for (int i = 0; i < nd->n_in; i++) stack[n++] = nd->in[i];
  }
  free(stack);
  return ok;
}

/* cg_kernel_flat: can member |nd|, reached at the kernel's output index,
 * be emitted from the linear index alone?  A reshape starts its operand's
 * own index (the linear offset passes through), so below it anything goes
 * -- except below one of unit dims only, which passes the row's
 * multi-index on unchanged: an LSTM gate, reshape(slice(z)), in rows is
 * unit-stride loads, flat it is a div/mod and a gather per element;
 * values outside the group are loads at the linear offset. */
static walk_r flat_check(const cg_kernel *k, const kdc_node *nd) {
  switch (nd->op) {
  case KDC_OP_RESHAPE: /* a unit-dim one passes the row's multi-index on (step_member) */
    return unit_reshape(&k->f->nodes[nd->in[0]].type, &nd->type) ? WALK_INTO : WALK_STOP;
  case KDC_OP_SHARDING_CONSTRAINT: return WALK_INTO;
  case KDC_OP_BROADCAST:
    return kdc_type_numel(&k->f->nodes[nd->in[0]].type) == 1 ? WALK_STOP : WALK_FAIL;
  default: break;
  }
  if (!(kdc_op_flags(nd->op) & OPF_EW)) return WALK_FAIL;
  for (int i = 0; i < nd->n_in; i++) {
    const kdc_type *t = &k->f->nodes[nd->in[i]].type;
    if (t->rank != nd->type.rank || memcmp(t->dims, nd->type.dims, sizeof(int64_t) * (size_t)t->rank))
      return WALK_FAIL;
  }
  return WALK_INTO;
}

bool cg_kernel_flat(const cg_kernel *k) {
  const kdc_type *t = &k->out_type;
  if (k->transpose || t->rank < 2 || kdc_type_numel(t) <= 0 || cg_kernel_column_reduce(k) ||
      cg_kernel_concat_pieces(k))
    return false;
  uint8_t *seen = kdc_xcalloc(k->f->n_nodes + 1, 1);
  bool ok = members_all(k, k->root, seen, flat_check);
  for (uint32_t j = 0; j < k->n_extra && ok; j++) ok = members_all(k, k->extra[j], seen, flat_check);
  free(seen);
  return ok;
}

/* Pieces of a root concatenate (at most CG_MAX_PIECES) along the last dim,
 * or along an earlier one (each row then lies in one piece), else 0. */
int cg_kernel_concat_pieces(const cg_kernel *k) {
  if (k->transpose) return 0;
  const kdc_node *nd = &k->f->nodes[k->root];
  if (nd->op != KDC_OP_CONCAT || nd->type.rank < 1 || nd->attr.dim < 0 ||
      nd->attr.dim >= nd->type.rank || nd->n_in < 2 || nd->n_in > CG_MAX_PIECES ||
      !kdc_type_equal(&nd->type, &k->out_type))
    return 0;
  return nd->n_in;
}

/* The function shell: |name|(args.., coords, i64 x |n_idx|), internal,
 * alwaysinline; the emitter positioned in its entry.  No noalias here: a
 * body's scope would hold for one element only, and the loop vectoriser
 * then drops every alias scope of the access (the wrapper's loop nest
 * carries the noalias, cpu_wrap.c). */
static LLVMValueRef body_shell(cg_plan *P, const cg_kernel *k, const char *name, int n_idx,
                               LLVMTypeRef ret, emitter *E) {
  LLVMTypeRef params[1 + 65 + KDC_MAX_RANK];
  unsigned np = 0;
  for (uint32_t i = 0; i < k->n_args; i++) params[np++] = P->ptr;
  params[np++] = P->ptr;  /* coords */
  for (int d = 0; d < n_idx; d++) params[np++] = P->i64;
  LLVMValueRef fn =
      LLVMAddFunction(P->mod, name, LLVMFunctionType(ret ? ret : P->void_t, params, np, 0));
  LLVMSetLinkage(fn, LLVMInternalLinkage);
  unsigned inl = LLVMGetEnumAttributeKindForName("alwaysinline", 12);
  unsigned nounwind = LLVMGetEnumAttributeKindForName("nounwind", 8);
  LLVMAddAttributeAtIndex(fn, LLVMAttributeFunctionIndex, LLVMCreateEnumAttribute(P->ctx, inl, 0));
  LLVMAddAttributeAtIndex(fn, LLVMAttributeFunctionIndex,
                          LLVMCreateEnumAttribute(P->ctx, nounwind, 0));
  *E = (emitter){.P = P, .k = k, .f = k->f, .b = P->b, .fn = fn, .trips = 1, .root_piece = -1};
  E->entry = LLVMAppendBasicBlockInContext(P->ctx, fn, "entry");
  LLVMPositionBuilderAtEnd(P->b, E->entry);
  return fn;
}

/* The body proper (every output at the index, then the stores); |piece| as
 * emitter.root_piece. */
static kdc_status body_emit(cg_plan *P, const cg_kernel *k, const char *name, int piece,
                            LLVMValueRef *out_body, int64_t *out_cost) {
  int rank = k->out_type.rank;
  if (k->n_args > 64)
    return KDC_ERR(KDC_UNSUPPORTED, "codegen: func %s: kernel %%%u reads %u buffers (max 64)",
                   k->f->name, k->root, k->n_args);
  emitter E;
  LLVMValueRef fn = body_shell(P, k, name, rank, NULL, &E);
  E.root_piece = piece;
  LLVMValueRef args[64];
  for (uint32_t i = 0; i < k->n_args; i++) args[i] = LLVMGetParam(fn, i);
  E.arg = args;
  E.coords = LLVMGetParam(fn, k->n_args);
  ix out;
  ix_init(&E, &out, rank, k->out_type.dims);
  for (int d = 0; d < rank; d++) out.m[d] = LLVMGetParam(fn, k->n_args + 1 + (unsigned)d);
  out.have_m = true;
  kdc_status st = NULL;
  LLVMValueRef val;
  if (k->transpose) {  /* out[i] = src[j], src dim perm[i] = out dim i */
    const kdc_type *st_t = &k->f->nodes[k->root].type;
    ix in;
    ix_init(&E, &in, st_t->rank, st_t->dims);
    for (int d = 0; d < rank; d++) in.m[k->perm[d]] = out.m[d];
    in.have_m = true;
    val = load_elem(&E, args[1], st_t->dtype, lin_of(&E, &in));
    E.cost = 1;
  } else {
    val = emit(&E, k->root, &out, &st);
  }
  /* The group's other outputs at the root's index (same dims, ir.h), all
   * computed before any store: an in-place operand is read through slot 0. */
  LLVMValueRef vals[64];
  kdc_dtype dts[64];
  vals[0] = val, dts[0] = k->out_type.dtype;
  for (uint32_t j = 0; j < k->n_extra; j++) {
    vals[j + 1] = vals[j] ? emit(&E, k->extra[j], &out, &st) : NULL;
    dts[j + 1] = k->f->nodes[k->extra[j]].type.dtype;
  }
  emitter_free(&E);
  for (uint32_t j = 0; j <= k->n_extra; j++)
    if (!vals[j]) {
      LLVMDeleteFunction(fn);
      return st ? st : KDC_ERR(KDC_INTERNAL, "codegen: kernel %%%u: no value", k->root);
    }
  LLVMValueRef lin = lin_of(&E, &out);
  for (uint32_t j = 0; j <= k->n_extra; j++) {
    LLVMTypeRef mt = cg_mem_type(P, dts[j]);
    LLVMValueRef v = dts[j] == KDC_DTYPE_BOOL ? LLVMBuildZExt(P->b, vals[j], P->i8, "")
                                              : cg_narrow(P, dts[j], vals[j]);
    LLVMValueRef s = LLVMBuildStore(P->b, v, LLVMBuildInBoundsGEP2(P->b, mt, args[j], &lin, 1, ""));
    LLVMSetAlignment(s, (unsigned)kdc_dtype_size(dts[j]));
  }
  LLVMBuildRetVoid(P->b);
  *out_cost = E.cost > 0 ? E.cost : 1;
  *out_body = fn;
  return NULL;
}

kdc_status cg_body_emit(cg_plan *P, cg_kernel *k, uint32_t index, LLVMValueRef *out_body) {
  char name[48];
  snprintf(name, sizeof name, "kdc_body_%u", index);
  return body_emit(P, k, name, -1, out_body, &k->cost);
}

kdc_status cg_body_emit_piece(cg_plan *P, const cg_kernel *k, const char *name, int piece,
                              LLVMValueRef *out_body) {
  int64_t cost;
  return body_emit(P, k, name, piece, out_body, &cost);
}

/* The shell's pointer arguments (into |args|) and coordinates, bound to |E|. */
static void bind_args(emitter *E, LLVMValueRef fn, LLVMValueRef *args) {
  for (uint32_t i = 0; i < E->k->n_args; i++) args[i] = LLVMGetParam(fn, i);
  E->arg = args;
  E->coords = LLVMGetParam(fn, E->k->n_args);
}

/* The reduce root's operand at |in| into *|val|; on failure |fn| is deleted. */
static kdc_status emit_operand(emitter *E, LLVMValueRef fn, ix *in, LLVMValueRef *val) {
  kdc_status st = NULL;
  *val = emit(E, E->f->nodes[E->k->root].in[0], in, &st);
  emitter_free(E);
  if (*val) return NULL;
  LLVMDeleteFunction(fn);
  return st ? st : KDC_ERR(KDC_INTERNAL, "codegen: kernel %%%u: no value", E->k->root);
}

/* Column reduction (cg_kernel_column_reduce: p leading reduced dims):
 * |name|(args.., coords, i_0, .., i_{p-1}, c) folds the operand at
 * (i_0, .., i_{p-1}, kept element c) into out[c]. */
kdc_status cg_body_emit_accumulate(cg_plan *P, const cg_kernel *k, const char *name,
                                   LLVMValueRef *out_body) {
  int p = cg_kernel_column_reduce(k);
  const kdc_node *nd = &k->f->nodes[k->root];
  const kdc_type *xt = &k->f->nodes[nd->in[0]].type;
  if (p < 1 || k->n_args > 64)
    return KDC_ERR(KDC_INTERNAL, "codegen: kernel %%%u is no column reduction", k->root);
  emitter E;
  LLVMValueRef fn = body_shell(P, k, name, p + 1, NULL, &E);
  LLVMValueRef args[64];
  bind_args(&E, fn, args);
  ix in;
  ix_init(&E, &in, xt->rank, xt->dims);
  for (int d = 0; d < p; d++) in.m[d] = LLVMGetParam(fn, k->n_args + 1 + (unsigned)d);
  LLVMValueRef c = LLVMGetParam(fn, k->n_args + 1 + (unsigned)p), rest = c;
  for (int d = xt->rank - 1; d >= p; d--) {  /* the kept multi-index of c */
    in.m[d] = d == p ? rest : LLVMBuildURem(P->b, rest, C(&E, xt->dims[d]), "");
    if (d > p) rest = LLVMBuildUDiv(P->b, rest, C(&E, xt->dims[d]), "");
  }
  in.have_m = true;
  LLVMValueRef val;
  KDC_RETURN_IF_ERROR(emit_operand(&E, fn, &in, &val));
  kdc_dtype d = nd->type.dtype;
  LLVMTypeRef mt = cg_mem_type(P, d);
  LLVMValueRef g = LLVMBuildInBoundsGEP2(P->b, mt, args[0], &c, 1, "");
  LLVMValueRef a = load_elem(&E, args[0], d, c);
  LLVMValueRef r = cg_reduce_step(P, nd->attr.reduce.kind, d, a, val);
  if (d == KDC_DTYPE_BOOL) r = LLVMBuildZExt(P->b, r, P->i8, "");
  LLVMValueRef s = LLVMBuildStore(P->b, r, g);
  LLVMSetAlignment(s, (unsigned)kdc_dtype_size(d));
  LLVMBuildRetVoid(P->b);
  *out_body = fn;
  return NULL;
}

/* A reduce root's operand (cg_kernel_reduce_run): |name|(args.., coords,
 * j_0, .., j_{r-1}) returns the operand's value (register type) at operand
 * multi-index j, the term the reduction folds; the GPU's parallel
 * reduction wrappers (ptx_wrap.c) call it and combine the terms. */
kdc_status cg_body_emit_operand(cg_plan *P, const cg_kernel *k, const char *name,
                                LLVMValueRef *out_body) {
  const kdc_node *nd = &k->f->nodes[k->root];
  int lo, hi;
  if (!cg_kernel_reduce_run(k, &lo, &hi) || k->n_args > 64)
    return KDC_ERR(KDC_INTERNAL, "codegen: kernel %%%u has no reduction operand", k->root);
  const kdc_type *xt = &k->f->nodes[nd->in[0]].type;
  emitter E;
  LLVMValueRef fn = body_shell(P, k, name, xt->rank, cg_reg_type(P, xt->dtype), &E);
  LLVMValueRef args[64];
  bind_args(&E, fn, args);
  ix in;
  ix_init(&E, &in, xt->rank, xt->dims);
  for (int d = 0; d < xt->rank; d++) in.m[d] = LLVMGetParam(fn, k->n_args + 1 + (unsigned)d);
  in.have_m = true;
  LLVMValueRef val;
  KDC_RETURN_IF_ERROR(emit_operand(&E, fn, &in, &val));
  LLVMBuildRet(P->b, val);
  *out_body = fn;
  return NULL;
}

/* The reduced dims of a reduce root with no other output, when they are
 * one contiguous run [*|lo|, *|hi|) of the operand's dims, not all of them:
 * at the front (lo = 0: a column reduction), at the back (hi = rank: a
 * row reduction) or in the middle (a column reduction per index of the
 * outer dims: a mean over the sequence of [batch, seq, features]).  False
 * for anything else, and for bf16/f16 results: their element form rounds
 * once, as the interpreter does, where partials and trees held in the
 * storage type would round every partial sum. */
bool cg_kernel_reduce_run(const cg_kernel *k, int *lo, int *hi) {
  if (k->transpose || k->n_extra) return false;
  const kdc_node *nd = &k->f->nodes[k->root];
  if (nd->op != KDC_OP_REDUCE || kdc_dtype_is_half(nd->type.dtype)) return false;
  const kdc_type *xt = &k->f->nodes[nd->in[0]].type;
  int n = nd->attr.reduce.dims.n;
  if (n < 1 || n >= xt->rank || kdc_type_numel(xt) <= 0) return false;
  bool red[KDC_MAX_RANK] = {false};
  for (int i = 0; i < n; i++) red[nd->attr.reduce.dims.v[i]] = true;
  int first = 0;
  while (!red[first]) first++;
  for (int d = first; d < first + n; d++)
    if (d >= xt->rank || !red[d]) return false;
  *lo = first;
  *hi = first + n;
  return true;
}

/* Is the reduce root's operand read along its own row-major order, every
 * external value loaded at the operand's index (or a broadcast of part of
 * it, or a reshape: the linear offset passes through)?  Then the trailing
 * dims of the operand are contiguous in memory, and a row reduction's
 * lanes read adjacent addresses.  A transpose, slice, gather, ... on the
 * way makes the answer no. */
static walk_r plain_check(const cg_kernel *k, const kdc_node *nd) {
  switch (nd->op) {
  case KDC_OP_RESHAPE: return WALK_STOP;
  case KDC_OP_SHARDING_CONSTRAINT: return WALK_INTO;
  case KDC_OP_BROADCAST: {  /* operand dims map in order (broadcast_in_dim) */
    const kdc_dimlist *m = &nd->attr.dims;
    const kdc_type *xt = &k->f->nodes[nd->in[0]].type;
    int64_t last = -1;
    for (int i = 0; i < m->n; i++) {
      if (xt->dims[i] == 1) continue;
      if (m->v[i] <= last) return WALK_FAIL;
      last = m->v[i];
    }
    return WALK_INTO;
  }
  default: break;
  }
  return kdc_op_flags(nd->op) & OPF_EW ? WALK_INTO : WALK_FAIL;
}

bool cg_kernel_operand_plain(const cg_kernel *k) {
  const kdc_node *nd = &k->f->nodes[k->root];
  if (nd->op != KDC_OP_REDUCE) return false;
  uint8_t *seen = kdc_xcalloc(k->f->n_nodes + 1, 1);
  bool ok = members_all(k, nd->in[0], seen, plain_check);
  free(seen);
  return ok;
}
