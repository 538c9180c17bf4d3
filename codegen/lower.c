/*
 * codegen/lower.c: one fused, memory-planned function -> a step program.
 *
 * Storage (the same rules as passes/plan_memory.c, which this file trusts
 * but checks): a PARAMETER is a function input, or a plan weight when it is
 * a weight parameter whose module weight has data; a value with
 * mem_offset >= 0 lives in the arena; a kernel or GEMM result with
 * mem_offset -1 that is a function result is written straight into that
 * output (the first result listing it); an ungrouped RESHAPE (or
 * SHARDING_CONSTRAINT, an identity) shares its operand's storage; a dense
 * CONSTANT becomes a plan weight only when a GEMM
 * or a result copy needs it as memory (kernels read constants from LLVM
 * globals, splats as immediates).
 *
 * Steps, in node order: one KERNEL per kernel root (group root or ungrouped
 * compute node, shard_slice and rng_uniform included), one GEMM per
 * ungrouped f32 DOT (preceded by transpose kernels into the staging area
 * after the planned arena when an operand needs canonicalising, see
 * gemm.c), one COLLECTIVE per collective node (lower_spmd.c), then COPY
 * steps for results that are not their own storage.  Zero-element kernels,
 * GEMMs and collectives are dropped.
 *
 * Types are LOCAL (one device's piece) after partitioning: every loc and
 * kernel shape is per device; inputs, outputs and weights are recorded with
 * their global shape and sharding (cg_tensor_of).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/codegen.h"

enum { ALIGN = 64 };

typedef enum skind { SK_NONE, SK_PARAM, SK_CONST, SK_STORED, SK_ALIAS } skind;

typedef struct lowerer {
  cg_plan *P;
  const kdc_func *f;
  size_t n;
  skind *kind;
  kdc_value_id *root;      /* kernel root of each group member, else itself */
  kdc_prog_loc *loc;
  bool *has_loc;
  kdc_prog_step *steps;
  size_t n_steps, cap_steps;
  uint64_t base;           /* arena offset of this function's planned values (scan bodies) */
  uint64_t planned_end, staging;
  bool is_body;            /* f is a scan body */
  kdc_group_members gm;    /* each kernel's members, so a kernel costs its size, not n */
  int32_t *slot;           /* cg_kernel.slot of the kernel being emitted: n entries, -1 ... */
  kdc_value_id *touched;   /* ... but those listed here, reset after each kernel */
  size_t n_touched;
} lowerer;

static uint64_t align_up(uint64_t x) { return (x + ALIGN - 1) / ALIGN * ALIGN; }

kdc_io_dtype cg_io_dtype(kdc_dtype d) {
  switch (d) {
  case KDC_DTYPE_F32: return KDC_IO_DTYPE_F32;
  case KDC_DTYPE_I32: return KDC_IO_DTYPE_I32;
  case KDC_DTYPE_I64: return KDC_IO_DTYPE_I64;
  case KDC_DTYPE_BOOL: return KDC_IO_DTYPE_BOOL;
  case KDC_DTYPE_BF16: return KDC_IO_DTYPE_BF16;
  case KDC_DTYPE_F16: return KDC_IO_DTYPE_F16;
  default: kdc_unreachable();
  }
}

static kdc_status bad(const lowerer *L, kdc_value_id v, const char *what) {
  return KDC_ERR(KDC_INTERNAL, "codegen: func %s: %%%u (%s): %s", L->f->name, v,
                 kdc_op_name(L->f->nodes[v].op), what);
}

/* Index of weight |t| (global data |data|) in the plan's table, adding it
 * when new (same name and sharding: the same entry). */
static uint32_t add_weight(cg_plan *P, const kdc_prog_tensor *t, const void *data) {
  int64_t first = kdc_strindex_get(&P->w_index, t->name);  /* O(1): models of many weights */
  for (uint32_t i = first < 0 ? P->nw : (uint32_t)first; i < P->nw; i++)
    if (strcmp(P->w[i].name, t->name) == 0 &&
        memcmp(&P->w[i].sharding, &t->sharding, sizeof t->sharding) == 0)
      return i;
  size_t cap = P->cap_w;
  KDC_GROW(P->w, P->cap_w, P->nw + 1);
  if (cap != P->cap_w) P->wdata = kdc_xrealloc(P->wdata, P->cap_w * sizeof *P->wdata);
  P->w[P->nw] = *t;
  P->wdata[P->nw] = data;
  kdc_strindex_add(&P->w_index, P->w[P->nw].name, P->nw);
  return P->nw++;
}

static void add_step(lowerer *L, const kdc_prog_step *s) {
  KDC_GROW(L->steps, L->cap_steps, L->n_steps + 1);
  L->steps[L->n_steps++] = *s;
}

/* The storage of |v|, materialising a constant as a plan weight. */
static kdc_status loc_of(lowerer *L, kdc_value_id v, kdc_prog_loc *out) {
  if (L->has_loc[v]) return *out = L->loc[v], NULL;
  const kdc_node *nd = &L->f->nodes[v];
  if (L->kind[v] == SK_CONST) {
    size_t bytes = kdc_type_bytes(&nd->type), es = kdc_dtype_size(nd->type.dtype);
    void *data = nd->attr.constant.data;
    if (nd->attr.constant.splat) {
      data = kdc_arena_alloc(L->P->a, bytes ? bytes : 1);
      for (size_t i = 0; i < bytes; i += es) memcpy((char *)data + i, nd->attr.constant.data, es);
    }
    char name[96];
    snprintf(name, sizeof name, "const:%s:%%%u", L->f->name, v);
    kdc_prog_tensor t;  /* the same on every device: replicated */
    KDC_RETURN_IF_ERROR(cg_tensor_of(L->P, name, &nd->type, NULL, "constant", &t));
    uint32_t w = add_weight(L->P, &t, data);
    L->loc[v] = (kdc_prog_loc){KDC_PROG_BUF_WEIGHT, w, 0, bytes};
  } else if (L->kind[v] == SK_ALIAS) {  /* a chain of aliases, walked without recursion */
    kdc_value_id b = nd->in[0];
    while (!L->has_loc[b] && L->kind[b] == SK_ALIAS) b = L->f->nodes[b].in[0];
    kdc_prog_loc base;
    KDC_RETURN_IF_ERROR(loc_of(L, b, &base));  /* not an alias: no further recursion */
    for (kdc_value_id a = nd->in[0]; a != b; a = L->f->nodes[a].in[0]) {
      L->loc[a] = base;
      L->loc[a].bytes = kdc_type_bytes(&L->f->nodes[a].type);
      L->has_loc[a] = true;
    }
    L->loc[v] = base;
    L->loc[v].bytes = kdc_type_bytes(&nd->type);
  } else {
    return bad(L, v, "value has no storage");
  }
  L->has_loc[v] = true;
  *out = L->loc[v];
  return NULL;
}

/* Classifies nodes, binds parameters, arena values and own results. */
static kdc_status bind(lowerer *L, kdc_prog_func *pf) {
  const kdc_func *f = L->f;
  int32_t max_group = -1;
  for (size_t v = 0; v < L->n; v++)
    if (f->nodes[v].group > max_group) max_group = f->nodes[v].group;
  if (max_group > (int64_t)(16 * L->n + 1024))
    return KDC_ERR(KDC_INTERNAL, "codegen: func %s: group ids are not dense", f->name);
  kdc_value_id *groot = kdc_xmalloc(((size_t)max_group + 2) * sizeof *groot);
  for (size_t v = 0; v < L->n; v++)
    if (f->nodes[v].group >= 0) groot[f->nodes[v].group] = (kdc_value_id)v;  /* last wins */
  for (size_t v = 0; v < L->n; v++) {
    const kdc_node *nd = &f->nodes[v];
    L->root[v] = nd->group >= 0 ? groot[nd->group] : (kdc_value_id)v;
    if (nd->op == KDC_OP_PARAMETER) L->kind[v] = SK_PARAM;
    else if (nd->op == KDC_OP_CONSTANT) L->kind[v] = SK_CONST;
    else if (nd->group >= 0)  /* the root, or another output of the kernel (ir.h) */
      L->kind[v] = L->root[v] == v || kdc_ir_group_output(f, (kdc_value_id)v, L->root[v])
                       ? SK_STORED : SK_NONE;
    else if (nd->op == KDC_OP_RESHAPE || nd->op == KDC_OP_SHARDING_CONSTRAINT)
      L->kind[v] = SK_ALIAS;
    else L->kind[v] = SK_STORED;
  }
  free(groot);
  /* parameters (a scan body's are bound to its loop's buffers) */
  bool body = L->is_body;
  pf->inputs = kdc_arena_alloc(L->P->a, (f->n_params + 1) * sizeof *pf->inputs);
  for (size_t i = 0; i < f->n_params; i++) {
    kdc_value_id v = f->params[i];
    if (v == KDC_NO_VALUE || v >= L->n) return KDC_ERR(KDC_INTERNAL, "codegen: func %s: "
                                                       "parameter %zu missing", f->name, i);
    const kdc_node *nd = &f->nodes[v];
    const char *name = nd->attr.param.name;
    const kdc_weight *w = name ? kdc_ir_module_find_weight(f->module, name) : NULL;
    char def[32];
    snprintf(def, sizeof def, "input_%u", pf->n_inputs);
    kdc_prog_tensor t;
    kdc_sharding ps = nd->sharding;
    if (body) ps.partial = 0; /* an accumulator carry, partial inside its loop */
    KDC_RETURN_IF_ERROR(cg_tensor_of(L->P, name ? name : def, &nd->type, &ps, "parameter", &t));
    t.gate_packed = nd->attr.param.gate_packed;
    if (nd->attr.param.kind == KDC_PARAM_WEIGHT && w && w->data) {
      bool same = w->type.rank == t.rank && cg_io_dtype(w->type.dtype) == t.dtype;
      for (int d = 0; same && d < t.rank; d++) same = w->type.dims[d] == t.dims[d];
      if (!same)
        return KDC_ERR(KDC_INVALID_INPUT, "codegen: func %s: weight \"%s\" has the wrong type",
                       f->name, name);
      L->loc[v] = (kdc_prog_loc){KDC_PROG_BUF_WEIGHT, add_weight(L->P, &t, w->data), 0,
                                 kdc_type_bytes(&nd->type)};
    } else {
      pf->inputs[pf->n_inputs] = t;
      L->loc[v] = (kdc_prog_loc){KDC_PROG_BUF_INPUT, pf->n_inputs++, 0, kdc_type_bytes(&nd->type)};
    }
    L->has_loc[v] = true;
  }
  /* outputs and stored values */
  pf->n_outputs = (uint32_t)f->n_results;
  pf->outputs = kdc_arena_alloc(L->P->a, (f->n_results + 1) * sizeof *pf->outputs);
  for (size_t i = 0; i < f->n_results; i++) {
    kdc_value_id r = f->results[i];
    char def[32];
    snprintf(def, sizeof def, "output_%zu", i);
    const char *name = f->result_names && f->result_names[i] ? f->result_names[i] : def;
    kdc_sharding rs = f->nodes[r].sharding;
    if (body) rs.partial = 0;
    KDC_RETURN_IF_ERROR(cg_tensor_of(L->P, name, &f->nodes[r].type, &rs, "result",
                                     &pf->outputs[i]));
    if (L->kind[r] == SK_NONE) return bad(L, r, "result is a fused interior");
    if (L->kind[r] == SK_STORED && f->nodes[r].mem_offset < 0 && !L->has_loc[r]) {
      L->loc[r] = (kdc_prog_loc){KDC_PROG_BUF_OUTPUT, (uint32_t)i, 0,
                                 kdc_type_bytes(&f->nodes[r].type)};
      L->has_loc[r] = true;
    }
  }
  for (size_t v = 0; v < L->n; v++) {
    const kdc_node *nd = &f->nodes[v];
    if (L->kind[v] != SK_STORED || L->has_loc[v]) continue;
    if (nd->mem_offset < 0 || nd->mem_offset % ALIGN)
      return bad(L, (kdc_value_id)v, "not memory-planned (run plan_memory after fuse)");
    uint64_t bytes = kdc_type_bytes(&nd->type);
    L->loc[v] = (kdc_prog_loc){KDC_PROG_BUF_ARENA, 0, L->base + (uint64_t)nd->mem_offset, bytes};
    L->has_loc[v] = true;
    uint64_t end = align_up(L->base + (uint64_t)nd->mem_offset + (bytes ? bytes : 1));
    if (end > L->planned_end) L->planned_end = end;
  }
  for (size_t u = 0; u < L->n; u++)  /* the fusion contract */
    for (int j = 0; j < f->nodes[u].n_in; j++) {
      kdc_value_id x = f->nodes[u].in[j];
      if (L->kind[x] == SK_NONE && f->nodes[x].group != f->nodes[u].group)
        return bad(L, x, "fused interior used outside its group");
    }
  return NULL;
}

static bool same_place(const kdc_prog_loc *a, const kdc_prog_loc *b) {
  return a->buf == b->buf && a->index == b->index && a->offset == b->offset;
}

/* Adds |k| (slots filled, args[0..n_args) given) to the module and a step. */
static kdc_status emit_kernel(lowerer *L, cg_kernel *k, const kdc_prog_loc *args) {
  cg_plan *P = L->P;
  uint32_t idx = P->prog.n_kernels;
  LLVMValueRef mark = LLVMGetLastFunction(P->mod), body;
  KDC_RETURN_IF_ERROR(cg_body_emit(P, k, idx, &body));
  char name[48];
  snprintf(name, sizeof name, "kdc_kernel_%u", idx);
  kdc_prog_step s;
  memset(&s, 0, sizeof s);
  s.kind = KDC_STEP_KERNEL;
  s.kernel.kernel = idx;
  /* streaming stores: results only, never a scan body's (carries are read
   * back by the next iteration; docs/codegen.md) */
  bool stream = cg_kernel_streams(k) && !L->is_body;
  for (uint32_t i = 0; i <= k->n_extra && stream; i++) stream = args[i].buf == KDC_PROG_BUF_OUTPUT;
  if (stream) cg_cpu_wrap_stream(P, k, body, name, &s.kernel.extent, &s.kernel.unit_cost);
  else cg_cpu_wrap(P, k, body, name, &s.kernel.extent, &s.kernel.unit_cost);
  KDC_GROW(P->ktype, P->cap_ktype, (size_t)idx + 1);
  P->ktype[idx] = k->out_type;  /* for the CUDA wrapper (ptx_wrap.c) */
  if (P->cuda_sm) KDC_RETURN_IF_ERROR(cg_ptx_plan_kernel(P, k, idx));
  s.kernel.n_args = k->n_args;
  s.kernel.n_out = 1 + k->n_extra;
  for (size_t i = 0; i < L->n_touched; i++) { /* an input placed where an output goes: in place */
    kdc_value_id v = L->touched[i];
    if (k->slot[v] >= 0 && (uint32_t)k->slot[v] < s.kernel.n_out && k->slot[v] < 64)
      s.kernel.in_place |= 1ull << k->slot[v];
  }
  s.kernel.args = kdc_arena_memdup(P->a, args, k->n_args * sizeof *args);
  s.kernel.kernel = cg_dedup_kernel(P, mark, idx);  /* an earlier identical kernel, or idx */
  if (s.kernel.kernel == idx) {
    KDC_GROW(P->prog.kernels, P->cap_kernels, P->prog.n_kernels + 1);
    P->prog.kernels[P->prog.n_kernels++] =
        (kdc_prog_kernel){kdc_arena_strdup(P->a, name), k->n_args};
  }
  add_step(L, &s);
  return NULL;
}

static kdc_status lower_kernel(lowerer *L, kdc_value_id r) {
  const kdc_func *f = L->f;
  if (kdc_type_numel(&f->nodes[r].type) == 0) return NULL;
  cg_kernel k = {.f = f, .root = r, .group = f->nodes[r].group, .out_type = f->nodes[r].type};
  k.slot = L->slot;  /* all -1 */
  L->n_touched = 0;
  /* the kernel's nodes: its group's members (ids ascending, r last), or r alone */
  const kdc_value_id *mem = &r;
  size_t n_mem = 1;
  if (k.group >= 0 && k.group < L->gm.n_groups) {
    mem = L->gm.member + L->gm.start[k.group];
    n_mem = L->gm.start[k.group + 1] - L->gm.start[k.group];
  }
  kdc_prog_loc args[KDC_KERNEL_MAX_INPUTS + 1];
  kdc_value_id extra[KDC_KERNEL_MAX_INPUTS];
  args[0] = L->loc[r];
  k.n_args = 1;
  k.extra = extra;
  kdc_status st = NULL;
  for (size_t i = 0; i < n_mem && k.group >= 0 && !st; i++) { /* other outputs: slots 1.. */
    kdc_value_id m = mem[i];
    if (m < r && kdc_ir_group_output(f, m, r)) {
      if (k.n_args == KDC_KERNEL_MAX_INPUTS + 1)
        st = KDC_ERR(KDC_UNSUPPORTED, "codegen: func %s: kernel %%%u writes more than %d "
                     "outputs", f->name, r, KDC_KERNEL_MAX_INPUTS);
      else extra[k.n_extra++] = m, args[k.n_args++] = L->loc[m];
    }
  }
  for (size_t i = 0; i < n_mem && !st; i++) {
    kdc_value_id m = mem[i];
    const kdc_node *nd = &f->nodes[m];
    if (m > r || nd->op == KDC_OP_CONSTANT) continue;
    for (int j = 0; j < nd->n_in && !st; j++) {
      kdc_value_id x = nd->in[j];
      if (k.slot[x] >= 0 || (k.group >= 0 && f->nodes[x].group == k.group)) continue;
      kdc_value_id b = x;
      while (L->kind[b] == SK_ALIAS) b = f->nodes[b].in[0];
      if (L->kind[b] == SK_CONST) continue;  /* read inline by the body */
      kdc_prog_loc lx;
      if ((st = loc_of(L, x, &lx))) break;
      uint32_t s = 0;
      while (s < k.n_args && !same_place(&args[s], &lx)) s++;
      if (s == k.n_args) {
        if (k.n_args == KDC_KERNEL_MAX_INPUTS + 1) {
          st = KDC_ERR(KDC_UNSUPPORTED, "codegen: func %s: kernel %%%u reads more than %d "
                       "buffers", f->name, r, KDC_KERNEL_MAX_INPUTS);
          break;
        }
        args[k.n_args++] = lx;
      }
      k.slot[x] = (int32_t)s;  /* s == 0: in place over the output */
      L->touched[L->n_touched++] = x;
    }
  }
  if (!st && cg_kernel_flat(&k) && !cg_kernel_streams(&k)) { /* codegen.h; streaming wants rows */
    int64_t n = kdc_type_numel(&k.out_type);
    k.out_type = kdc_type_make(k.out_type.dtype, 1, &n);
  }
  if (!st) st = emit_kernel(L, &k, args);
  for (size_t i = 0; i < L->n_touched; i++) L->slot[L->touched[i]] = -1;
  L->n_touched = 0;
  return st;
}

/* Transpose kernel writing |v| permuted by |perm| to arena |off|. */
static kdc_status lower_transpose(lowerer *L, kdc_value_id v, const int64_t *perm, uint64_t off,
                                  kdc_prog_loc *out) {
  const kdc_type *t = &L->f->nodes[v].type;
  cg_kernel k = {.f = L->f, .root = v, .group = -1, .transpose = true, .n_args = 2};
  k.out_type = *t;
  for (int d = 0; d < t->rank; d++) k.perm[d] = perm[d], k.out_type.dims[d] = t->dims[perm[d]];
  kdc_prog_loc args[2];
  KDC_RETURN_IF_ERROR(loc_of(L, v, &args[1]));
  args[0] = (kdc_prog_loc){KDC_PROG_BUF_ARENA, 0, off, kdc_type_bytes(t)};
  *out = args[0];
  k.slot = L->slot;  /* all -1: the body reads slot 1 directly */
  L->n_touched = 0;
  return emit_kernel(L, &k, args);
}

static kdc_status lower_gemm(lowerer *L, kdc_value_id v) {
  const kdc_node *nd = &L->f->nodes[v];
  if (kdc_type_numel(&nd->type) == 0) return NULL;
  cg_gemm g;
  cg_gemm_plan(L->f, v, L->P->cuda_sm == 0, &g);
  kdc_prog_step s;
  memset(&s, 0, sizeof s);
  s.kind = KDC_STEP_GEMM;
  kdc_prog_gemm_step *G = &s.gemm;
  G->dtype = cg_io_dtype(nd->type.dtype);
  /* a widened bf16 dot (passes/widen_dots.c): the GEMM rounds its operands to bf16 as it
   * packs them, in AMX tiles where the CPU has them (runtime/gemm_bf16.c) */
  G->bf16_inputs = G->dtype == KDC_IO_DTYPE_F32 && L->P->cuda_sm == 0 && nd->attr.dot.bf16_operands;
  KDC_RETURN_IF_ERROR(loc_of(L, nd->in[0], &G->a));
  KDC_RETURN_IF_ERROR(loc_of(L, nd->in[1], &G->b));
  G->c = L->loc[v];
  uint64_t off = L->planned_end;
  if (g.copy_a) {
    KDC_RETURN_IF_ERROR(lower_transpose(L, nd->in[0], g.perm_a, off, &G->a));
    off += align_up(G->a.bytes ? G->a.bytes : 1);
  }
  if (g.copy_b) {
    KDC_RETURN_IF_ERROR(lower_transpose(L, nd->in[1], g.perm_b, off, &G->b));
    off += align_up(G->b.bytes ? G->b.bytes : 1);
  }
  if (off - L->planned_end > L->staging) L->staging = off - L->planned_end;
  G->batch = g.batch, G->m = g.m, G->n = g.n, G->k = g.k;
  G->trans_a = g.trans_a, G->trans_b = g.trans_b;
  G->lda = g.lda, G->ldb = g.ldb, G->ldc = g.n > 1 ? g.n : 1;
  G->batch_inner = g.batch_inner;
  G->stride_a = g.stride_a, G->stride_b = g.stride_b, G->stride_c = g.stride_c;
  G->stride_a2 = g.stride_a2, G->stride_b2 = g.stride_b2, G->stride_c2 = g.stride_c2;
  add_step(L, &s);
  return NULL;
}

static kdc_status lower_collective(lowerer *L, kdc_value_id v) {
  const kdc_node *nd = &L->f->nodes[v];
  if (kdc_type_numel(&nd->type) == 0) return NULL;
  if (nd->group >= 0) return bad(L, v, "a collective inside a fusion group");
  kdc_prog_loc src;
  KDC_RETURN_IF_ERROR(loc_of(L, nd->in[0], &src));
  kdc_prog_step s;
  KDC_RETURN_IF_ERROR(cg_collective_step(L->P, L->f, v, &src, &L->loc[v], &s));
  add_step(L, &s);
  return NULL;
}

/* f32 dots; bf16/f16 ones too in a CUDA plan (cublasGemmEx, f32
 * accumulation); a CPU plan runs them as kernels (passes/widen_dots.c makes
 * them f32 GEMMs in the compile pipeline). */
static bool is_gemm(const cg_plan *P, const kdc_func *f, kdc_value_id v) {
  const kdc_node *nd = &f->nodes[v];
  kdc_dtype d = nd->type.dtype;
  bool ok = d == KDC_DTYPE_F32 || (kdc_dtype_is_half(d) && P->cuda_sm > 0);
  return nd->op == KDC_OP_DOT && nd->group < 0 && ok && f->nodes[nd->in[0]].type.dtype == d &&
         f->nodes[nd->in[1]].type.dtype == d;
}

static kdc_status lower_func(cg_plan *P, const kdc_func *f, uint64_t base, kdc_prog_func *pf,
                             uint64_t *out_arena);

/* A scan: COPY the initial carries into their arena slots, then one LOOP
 * step over the body, lowered here with its arena after the slots (all in
 * this function's staging area: nothing else is live in it during the
 * step).  Slots: per carry the state (body input) and the next value (body
 * output), copied back after each iteration by the runtime. */
static kdc_status lower_scan(lowerer *L, kdc_value_id v) {
  const kdc_func *f = L->f;
  const kdc_node *nd = &f->nodes[v];
  const kdc_func *body = kdc_ir_scan_body(f, v);
  if (!body) return bad(L, v, "scan body missing");
  if (kdc_type_numel(&nd->type) == 0) return NULL;
  const kdc_attr_scan *a = &nd->attr.scan;
  uint32_t nc = (uint32_t)a->n_carry, nx = (uint32_t)a->n_xs, ni = (uint32_t)nd->n_in;
  kdc_prog_step s;
  memset(&s, 0, sizeof s);
  s.kind = KDC_STEP_LOOP;
  kdc_prog_loop_step *l = &s.loop;
  l->length = a->length, l->n_carry = nc, l->n_in = ni, l->n_out = nc + 1;
  l->in = kdc_arena_alloc(L->P->a, (ni + 1) * sizeof *l->in);
  l->out = kdc_arena_alloc(L->P->a, (nc + 2) * sizeof *l->out);
  l->in_stride = kdc_arena_alloc(L->P->a, (ni + 1) * sizeof *l->in_stride);
  l->out_stride = kdc_arena_alloc(L->P->a, (nc + 2) * sizeof *l->out_stride);
  uint64_t off = L->planned_end;
  for (uint32_t i = 0; i < nc; i++) { /* carry state and next slots */
    uint64_t bytes = kdc_type_bytes(&f->nodes[nd->in[i]].type);
    l->in[i] = (kdc_prog_loc){KDC_PROG_BUF_ARENA, 0, off, bytes};
    off += align_up(bytes ? bytes : 1);
    l->out[i] = (kdc_prog_loc){KDC_PROG_BUF_ARENA, 0, off, bytes};
    off += align_up(bytes ? bytes : 1);
    l->in_stride[i] = l->out_stride[i] = 0;
    kdc_prog_step c;
    memset(&c, 0, sizeof c);
    c.kind = KDC_STEP_COPY;
    KDC_RETURN_IF_ERROR(loc_of(L, nd->in[i], &c.src));
    c.dst = l->in[i];
    if (bytes) add_step(L, &c);
  }
  for (uint32_t i = nc; i < ni; i++) {
    KDC_RETURN_IF_ERROR(loc_of(L, nd->in[i], &l->in[i]));
    l->in_stride[i] = 0;
    if (i < nc + nx) { /* a sequence: row t per iteration */
      uint64_t row = l->in[i].bytes / (uint64_t)a->length;
      l->in[i].bytes = row;
      l->in_stride[i] = (int64_t)row;
    }
  }
  uint64_t row = kdc_type_bytes(&nd->type) / (uint64_t)a->length;
  l->out[nc] = L->loc[v];
  l->out[nc].bytes = row;
  l->out_stride[nc] = (int64_t)row;
  /* the body, after the slots */
  cg_plan *P = L->P;
  size_t k = P->n_bodies;
  KDC_GROW(P->bodies, P->cap_bodies, P->n_bodies + 1);
  P->n_bodies++;
  kdc_prog_func bf;
  uint64_t end = 0;
  KDC_RETURN_IF_ERROR(lower_func(P, body, off, &bf, &end));
  bf.is_body = true;
  P->bodies[k] = bf;
  l->body = P->n_entries + (uint32_t)k;
  if (end > L->planned_end && end - L->planned_end > L->staging) L->staging = end - L->planned_end;
  add_step(L, &s);
  return NULL;
}

kdc_status cg_lower_func(cg_plan *P, const kdc_func *f, uint64_t *out_arena) {
  kdc_prog_func pf;
  KDC_RETURN_IF_ERROR(lower_func(P, f, 0, &pf, out_arena));
  KDC_GROW(P->prog.funcs, P->cap_funcs, P->prog.n_funcs + 1);
  P->prog.funcs[P->prog.n_funcs++] = pf;
  return NULL;
}

static kdc_status lower_func(cg_plan *P, const kdc_func *f, uint64_t base, kdc_prog_func *pf,
                             uint64_t *out_arena) {
  lowerer L = {.P = P, .f = f, .n = f->n_nodes, .base = base, .planned_end = base};
  size_t n = L.n + 1;
  L.kind = kdc_xcalloc(n, sizeof *L.kind);
  L.root = kdc_xcalloc(n, sizeof *L.root);
  L.loc = kdc_xcalloc(n, sizeof *L.loc);
  L.has_loc = kdc_xcalloc(n, sizeof *L.has_loc);
  L.slot = kdc_xmalloc(n * sizeof *L.slot);
  for (size_t v = 0; v < n; v++) L.slot[v] = -1;
  L.touched = kdc_xmalloc(n * sizeof *L.touched);
  L.is_body = f->module && kdc_ir_func_is_body(f->module, f);
  kdc_ir_group_members_init(&L.gm, f);
  memset(pf, 0, sizeof *pf);
  pf->name = kdc_arena_strdup(P->a, f->name);
  kdc_status st = bind(&L, pf);
  for (kdc_value_id v = 0; v < L.n && !st; v++) {
    if (L.kind[v] != SK_STORED || L.root[v] != v) continue;
    st = is_gemm(P, f, v)                   ? lower_gemm(&L, v)
         : f->nodes[v].op == KDC_OP_SCAN    ? lower_scan(&L, v)
         : cg_is_collective(f->nodes[v].op) ? lower_collective(&L, v)
                                            : lower_kernel(&L, v);
  }
  for (size_t i = 0; i < f->n_results && !st; i++) {
    kdc_value_id r = f->results[i];
    kdc_prog_loc src;
    kdc_prog_loc dst = {KDC_PROG_BUF_OUTPUT, (uint32_t)i, 0, kdc_type_bytes(&f->nodes[r].type)};
    if ((st = loc_of(&L, r, &src))) break;
    if (same_place(&src, &dst) || dst.bytes == 0) continue;
    kdc_prog_step s;
    memset(&s, 0, sizeof s);
    s.kind = KDC_STEP_COPY;
    s.src = src, s.dst = dst;
    add_step(&L, &s);
  }
  if (!st) {
    pf->n_steps = (uint32_t)L.n_steps;
    pf->steps = kdc_arena_alloc(P->a, (L.n_steps + 1) * sizeof *L.steps);
    if (L.n_steps) memcpy(pf->steps, L.steps, L.n_steps * sizeof *L.steps);
    *out_arena = L.planned_end + L.staging;
  }
  free(L.kind), free(L.root), free(L.loc), free(L.has_loc), free(L.steps);
  free(L.slot), free(L.touched);
  kdc_ir_group_members_free(&L.gm);
  return st;
}
