/*
 * codegen/gemm.c: a dot_general as one (batched) row-major cblas_sgemm.
 *
 * The result of dot_general is [batch..., lhs free..., rhs free...], which
 * is always C = B x (M x N) row-major with ldc = N.  An operand maps onto a
 * BLAS matrix without copying when its batch dims lead (in the batch list's
 * order) and, after them, its free dims and its contracting dims form two
 * contiguous groups, in either order: [free | contract] is op = N (lda = K
 * for A), [contract | free] is op = T (lda = M).  The contracting dims must
 * appear in memory in the same pair order in both operands; that order (the
 * "pair order") is the lhs's memory order.
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

static bool is_identity(const int64_t *perm, int n) {
  for (int i = 0; i < n; i++)
    if (perm[i] != i) return false;
  return true;
}

/* Decides op and leading dim for one operand; false if it needs a copy
 * (then |perm| holds the copy's permutation, for the "preferred" form). */
static bool layout(const kdc_type *t, const kdc_dimlist *batch, const int64_t *contract, int nc,
                   bool prefer_free_first, bool *out_free_first, int64_t *perm) {
  int64_t p[KDC_MAX_RANK];
  for (int pass = 0; pass < 2; pass++) {
    bool ff = pass == 0 ? prefer_free_first : !prefer_free_first;
    int n = canonical(t, batch, contract, nc, ff, p);
    if (is_identity(p, n)) {
      *out_free_first = ff;
      return true;
    }
  }
  canonical(t, batch, contract, nc, prefer_free_first, perm);
  *out_free_first = prefer_free_first;
  return false;
}

void cg_gemm_plan(const kdc_func *f, kdc_value_id v, cg_gemm *g) {
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
  bool a_ff, b_ff;
  g->copy_a = !layout(lt, &a->lhs_batch, lc, nc, true, &a_ff, g->perm_a);
  g->copy_b = !layout(rt, &a->rhs_batch, rc, nc, false, &b_ff, g->perm_b);
  g->trans_a = !a_ff;          /* [contract | free] = A^T stored */
  g->trans_b = b_ff;           /* [free | contract] = B^T stored */
  g->lda = g->trans_a ? g->m : g->k;
  g->ldb = g->trans_b ? g->k : g->n;
  if (g->lda < 1) g->lda = 1;
  if (g->ldb < 1) g->ldb = 1;
}
