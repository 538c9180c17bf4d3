/*
 * codegen/gemm.c: a dot_general as one (batched) row-major cblas_sgemm.
 *
 * The result of dot_general is [batch..., lhs free..., rhs free...], which
 * is always C = B x (M x N) row-major with ldc = N.  An operand maps onto a
 * BLAS matrix without copying when its free dims (ascending) and its
 * contracting dims each merge into one index (each dim directly outside the
 * next in memory), one of the two contiguous: [free | contract] is op = N,
 * [contract | free] is op = T, the other's stride the leading dimension.
 * The contracting dims must appear in memory in the same pair order in both
 * operands; that order (the "pair order") is the lhs's memory order.  In a
 * CPU plan the batch dims, in the batch list's order, may lie anywhere if
 * they merge into at most two groups: a two-level batch (runtime/program.h;
 * attention's [b, s, h, d] over (b, h)); both operands and C then share the
 * inner group's size (else B is copied).  A CUDA plan needs them leading.
 *
 * Anything else is canonicalised: the operand is first copied by a
 * transpose kernel into [batch | free | contract] (lhs) or
 * [batch | contract | free] (rhs) in a staging area, then used untransposed.
 * XLA's DotDecomposer/TransposeFolding make the same choice.
 */
#include <stdlib.h>
#include <string.h>

#include "codegen/codegen.h"

static bool in_list(const kdc_dimlist *l, int64_t d) {
  for (int i = 0; i < l->n; i++)
    if (l->v[i] == d) return true;
  return false;
}

/* Fills |perm| with [batch | free | contract] (free_first) or
 * [batch | contract | free]; returns the rank. */
static int canonical(const kdc_type *t, const kdc_dimlist *batch, const int64_t *contract,
                     int nc, bool free_first, int64_t *perm) {
  int n = 0;
  for (int i = 0; i < batch->n; i++) perm[n++] = batch->v[i];
  int64_t fr[KDC_MAX_RANK];
  int nf = 0;
  for (int d = 0; d < t->rank; d++) {
    bool c = false;
    for (int i = 0; i < nc; i++) c |= contract[i] == d;
    if (!c && !in_list(batch, d)) fr[nf++] = d;
  }
  if (free_first)
    for (int i = 0; i < nf; i++) perm[n++] = fr[i];
  for (int i = 0; i < nc; i++) perm[n++] = contract[i];
  if (!free_first)
    for (int i = 0; i < nf; i++) perm[n++] = fr[i];
  return n;
}

/* Row-major element strides of |t|. */
static void strides_of(const kdc_type *t, int64_t *st) {
  int64_t s = 1;
  for (int d = t->rank - 1; d >= 0; d--) st[d] = s, s *= t->dims[d];
}

/* Dims |l| (|n| of them, in that order) of |t| as one index: |*size|
 * elements |*stride| apart (the innermost's stride; 0 when size 1).  Size-1
 * dims do not count; each other dim must lie directly outside the next. */
static bool merge(const kdc_type *t, const int64_t *st, const int64_t *l, int n, int64_t *size,
                  int64_t *stride) {
  int64_t sz = 1, prev = -1;
  for (int i = 0; i < n; i++) {
    int64_t d = l[i];
    if (t->dims[d] == 1) continue;
    if (prev >= 0 && st[prev] != st[d] * t->dims[d]) return false;
    prev = d, sz *= t->dims[d];
  }
  *size = sz, *stride = prev >= 0 ? st[prev] : 0;
  return true;
}

/* One operand read in place: op and leading dim, and its batch entries as
 * up to two groups (outer, inner) of dims that merge. */
typedef struct operand {
  bool ff;          /* [free | contract] in memory */
  int64_t ld;
  int groups;       /* batch groups of more than one entry: 0, 1 or 2 */
  int64_t inner;    /* entries of the inner group (groups == 2) */
  int64_t s1, s2;   /* strides of the outer (or only) group and of the inner one */
} operand;

static bool is_identity(const int64_t *perm, int n) {
  for (int i = 0; i < n; i++)
    if (perm[i] != i) return false;
  return true;
}

/* Can |t| be read in place with batch dims |batch| (|strided|: in any
 * place, at most two groups; else leading, in the list's order), free dims
 * ascending and the contracting dims in pair order each merging into one
 * index, one of the two contiguous?  Otherwise |perm| holds the copy's
 * permutation into the preferred form. */
static bool layout(const kdc_type *t, const kdc_dimlist *batch, const int64_t *contract, int nc,
                   bool prefer_free_first, bool strided, operand *o, int64_t *perm) {
  int64_t st[KDC_MAX_RANK], fr[KDC_MAX_RANK], p[KDC_MAX_RANK];
  strides_of(t, st);
  int n = canonical(t, batch, contract, nc, true, p), nf = n - batch->n - nc;
  for (int i = 0; i < nf; i++) fr[i] = p[batch->n + i];
  int64_t m, sf, k, sc;
  bool ok = merge(t, st, fr, nf, &m, &sf) && merge(t, st, contract, nc, &k, &sc);
  /* the batch list's dims as runs that merge, outermost first */
  memset(o, 0, sizeof *o);
  int run = 0;  /* start of the current run in batch->v */
  for (int i = 0; ok && i <= batch->n; i++) {
    if (i < batch->n) {
      int64_t tmp, stride;
      if (merge(t, st, batch->v + run, i + 1 - run, &tmp, &stride)) continue;
    }
    int64_t size = 1, stride = 0; /* the run [run, i) */
    merge(t, st, batch->v + run, i - run, &size, &stride);
    if (size > 1) {
      if (++o->groups > 2) ok = false;
      else if (o->groups == 1) o->s1 = stride;
      else o->inner = size, o->s2 = stride;
    }
    run = i;
  }
  for (int pass = 0; ok && pass < 2; pass++) {
    bool ff = pass == 0 ? prefer_free_first : !prefer_free_first;
    int64_t in_size = ff ? k : m, in_stride = ff ? sc : sf, out_size = ff ? m : k,
            out_stride = ff ? sf : sc;
    if (in_size > 1 && in_stride != 1) continue;
    if (!strided && !is_identity(p, canonical(t, batch, contract, nc, ff, p))) continue;
    o->ff = ff;
    o->ld = out_size > 1 ? out_stride : (in_size > 1 ? in_size : 1);
    return true;
  }
  canonical(t, batch, contract, nc, prefer_free_first, perm);
  *o = (operand){.ff = prefer_free_first, .groups = 0};
  return false;
}

/* Strides of operand |o| (|entry| elements a matrix when copied or one
 * level) in the step's batch of |inner| entries a group. */
static void batch_strides(const operand *o, int64_t entry, int64_t inner, int64_t *s1,
                          int64_t *s2) {
  int64_t s = o->groups ? o->s1 : entry;
  if (o->groups == 2) *s1 = o->s1, *s2 = o->s2;
  else if (inner > 1) *s1 = s * inner, *s2 = s;
  else *s1 = s, *s2 = 0;
}

void cg_gemm_plan(const kdc_func *f, kdc_value_id v, bool strided, cg_gemm *g) {
  const kdc_node *nd = &f->nodes[v];
  const kdc_attr_dot *a = &nd->attr.dot;
  const kdc_type *lt = &f->nodes[nd->in[0]].type, *rt = &f->nodes[nd->in[1]].type;
  memset(g, 0, sizeof *g);
  int nc = a->lhs_contract.n;
  /* pair order: lhs contracting dims ascending */
  int sigma[KDC_MAX_RANK];
  for (int i = 0; i < nc; i++) sigma[i] = i;
  for (int i = 1; i < nc; i++)
    for (int j = i; j > 0 && a->lhs_contract.v[sigma[j]] < a->lhs_contract.v[sigma[j - 1]]; j--) {
      int t = sigma[j];
      sigma[j] = sigma[j - 1];
      sigma[j - 1] = t;
    }
  int64_t lc[KDC_MAX_RANK], rc[KDC_MAX_RANK];
  for (int i = 0; i < nc; i++) {
    lc[i] = a->lhs_contract.v[sigma[i]];
    rc[i] = a->rhs_contract.v[sigma[i]];
  }
  g->batch = g->m = g->n = g->k = 1;
  for (int i = 0; i < a->lhs_batch.n; i++) g->batch *= lt->dims[a->lhs_batch.v[i]];
  for (int i = 0; i < nc; i++) g->k *= lt->dims[lc[i]];
  for (int d = 0; d < lt->rank; d++)
    if (!in_list(&a->lhs_batch, d) && !in_list(&a->lhs_contract, d)) g->m *= lt->dims[d];
  for (int d = 0; d < rt->rank; d++)
    if (!in_list(&a->rhs_batch, d) && !in_list(&a->rhs_contract, d)) g->n *= rt->dims[d];
  operand oa, ob;
  g->copy_a = !layout(lt, &a->lhs_batch, lc, nc, true, strided, &oa, g->perm_a);
  g->copy_b = !layout(rt, &a->rhs_batch, rc, nc, false, strided, &ob, g->perm_b);
  if (oa.groups == 2 && ob.groups == 2 && oa.inner != ob.inner) { /* one inner batch: copy B */
    g->copy_b = true;
    canonical(rt, &a->rhs_batch, rc, nc, false, g->perm_b);
    ob = (operand){.ff = false};
  }
  if (g->copy_a) oa.ld = g->k;  /* [batch | free | contract] */
  if (g->copy_b) ob.ld = g->n;  /* [batch | contract | free] */
  g->trans_a = !oa.ff;          /* [contract | free] = A^T stored */
  g->trans_b = ob.ff;           /* [free | contract] = B^T stored */
  g->lda = oa.ld > 1 ? oa.ld : 1;
  g->ldb = ob.ld > 1 ? ob.ld : 1;
  g->batch_inner = oa.groups == 2 ? oa.inner : ob.groups == 2 ? ob.inner : 1;
  batch_strides(&oa, g->m * g->k, g->batch_inner, &g->stride_a, &g->stride_a2);
  batch_strides(&ob, g->k * g->n, g->batch_inner, &g->stride_b, &g->stride_b2);
  g->stride_c = g->m * g->n * g->batch_inner, g->stride_c2 = g->batch_inner > 1 ? g->m * g->n : 0;
}
