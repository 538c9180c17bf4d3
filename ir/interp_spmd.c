/*
 * The SPMD reference interpreter (kdc_ir_interpret_spmd): runs a partitioned
 * function on every device of a mesh, in lockstep, in one process.  It is the
 * oracle for passes/partition.c (sharded run == unpartitioned run) and for the
 * runtime's collectives, so like ir/interp.c it is written to be obviously
 * right, not fast:
 *   - every device has its own buffer per value; nodes run in id order, and
 *     for each node every device runs before the next node starts;
 *   - ordinary nodes run through ir/interp.c (kdc_ir_interp_node), so the
 *     per-device arithmetic is exactly the reference interpreter's;
 *   - an SPMD op (ops.def) runs for all devices at once: groups and group
 *     indices per ir/spmd.c; sums (all_reduce, reduce_scatter) start from the
 *     value of the group's lowest device id and add the others in increasing
 *     device-id order, in f32 for f32 values (wrapping for integers), so the
 *     result is bit-identical on every member;
 *   - a scan runs its body through this interpreter once per iteration
 *     for all devices, so collectives inside the loop meet across devices;
 *   - collective_permute fills with zeros where the source coordinate is off
 *     the mesh (halo boundaries);
 *   - rng_uniform whose sharding splits a dim draws each element at its
 *     GLOBAL index (local index plus the piece's offset along every split
 *     dim, raveled over the global shape), so a sharded rng_uniform holds
 *     exactly the pieces of the unsharded one (ops.def).
 * Also here: kdc_sharding_shard / kdc_sharding_unshard, which split a global
 * tensor into device pieces and assemble them back (tests, the runtime).
 */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("fp-contract=off")
#endif

#include <stdlib.h>
#include <string.h>

#include "ir/ir.h"
#include "kdc/fpenv.h"

/* ---- blocks of row-major tensors ------------------------------------------ */

/* dst[0, n) += src[0, n) (numeric dtypes; bool is or; integers wrap; bf16/f16 rounded per add). */
static void add_run(char *dp, const char *sp, kdc_dtype dt, int64_t n) {
  if (dt == KDC_DTYPE_F32) {
    float *d = (float *)dp;
    const float *x = (const float *)sp;
    for (int64_t i = 0; i < n; i++) d[i] += x[i];
  } else if (kdc_dtype_is_half(dt)) { /* each partial sum rounded, as a stored add */
    for (int64_t i = 0; i < n; i++)
      kdc_float_store(dp, dt, i, kdc_float_load(dp, dt, i) + kdc_float_load(sp, dt, i));
  } else if (dt == KDC_DTYPE_I32) {
    int32_t *d = (int32_t *)dp;
    const int32_t *x = (const int32_t *)sp;
    for (int64_t i = 0; i < n; i++) d[i] = (int32_t)((uint32_t)d[i] + (uint32_t)x[i]);
  } else if (dt == KDC_DTYPE_I64) {
    int64_t *d = (int64_t *)dp;
    const int64_t *x = (const int64_t *)sp;
    for (int64_t i = 0; i < n; i++) d[i] = (int64_t)((uint64_t)d[i] + (uint64_t)x[i]);
  } else {
    uint8_t *d = (uint8_t *)dp;
    const uint8_t *x = (const uint8_t *)sp;
    for (int64_t i = 0; i < n; i++) d[i] = d[i] || x[i];
  }
}

/* Copies the block of shape |b| at |so| in |src| (type |st|) to |do_| in
 * |dst| (type |dt|); |add| accumulates instead (numeric dtypes).  Row by
 * row: the last dim is contiguous in both (row-major), the leading dims
 * advance like an odometer. */
static void block(void *dst, const kdc_type *dt, const int64_t *do_, const void *src,
                  const kdc_type *st, const int64_t *so, const kdc_type *b, bool add) {
  int64_t idx[KDC_MAX_RANK] = {0}, ss[KDC_MAX_RANK], ds[KDC_MAX_RANK];
  size_t es = kdc_dtype_size(dt->dtype);
  if (kdc_type_numel(b) == 0) return;
  kdc_type_strides(st, ss);
  kdc_type_strides(dt, ds);
  int r = b->rank;
  int64_t run = r ? b->dims[r - 1] : 1;
  for (;;) {
    int64_t si = 0, di = 0;
    for (int d = 0; d < r; d++) {
      si += (so[d] + idx[d]) * ss[d];
      di += (do_[d] + idx[d]) * ds[d];
    }
    char *dp = (char *)dst + (size_t)di * es;
    const char *sp = (const char *)src + (size_t)si * es;
    if (!add) memcpy(dp, sp, es * (size_t)run);
    else add_run(dp, sp, dt->dtype, run);
    int d = r - 2;
    for (; d >= 0; d--) {
      if (++idx[d] < b->dims[d]) break;
      idx[d] = 0;
    }
    if (d < 0) return;
  }
}

static kdc_status alloc_type(const kdc_type *t, void **out) {
  size_t bytes = kdc_type_bytes(t);
  *out = calloc(1, bytes ? bytes : 1);
  if (!*out) return KDC_ERR(KDC_OUT_OF_MEMORY, "spmd interpreter: out of memory");
  return NULL;
}

/* Offsets of |device|'s piece of a value sharded by |s| with local type |lt|. */
static void piece_offsets(const kdc_mesh *m, const kdc_sharding *s, const kdc_type *lt,
                          int64_t device, int64_t *out) {
  for (int d = 0; d < lt->rank; d++)
    out[d] = s->present ? kdc_mesh_group_index(m, device, s->naxes[d], s->axes[d]) * lt->dims[d] : 0;
}

kdc_status kdc_sharding_shard(const kdc_mesh *m, const kdc_sharding *s, const kdc_tensor *global,
                              int64_t device, kdc_tensor *out_local) {
  int64_t off[KDC_MAX_RANK], zero[KDC_MAX_RANK] = {0};
  out_local->data = NULL;
  KDC_RETURN_IF_ERROR(kdc_sharding_local_type(m, s, &global->type, &out_local->type));
  KDC_RETURN_IF_ERROR(alloc_type(&out_local->type, &out_local->data));
  piece_offsets(m, s, &out_local->type, device, off);
  block(out_local->data, &out_local->type, zero, global->data, &global->type, off,
        &out_local->type, false);
  return NULL;
}

kdc_status kdc_sharding_unshard(const kdc_mesh *m, const kdc_sharding *s,
                                const kdc_type *global_type, const kdc_tensor *locals,
                                kdc_tensor *out_global) {
  kdc_type lt;
  int64_t off[KDC_MAX_RANK], zero[KDC_MAX_RANK] = {0}, c[KDC_MAX_MESH_AXES];
  out_global->data = NULL;
  out_global->type = *global_type;
  KDC_RETURN_IF_ERROR(kdc_sharding_local_type(m, s, global_type, &lt));
  KDC_RETURN_IF_ERROR(alloc_type(global_type, &out_global->data));
  unsigned used = s->present ? kdc_sharding_used_mask(s) : 0, partial = s->present ? s->partial : 0;
  for (int64_t dev = 0; dev < kdc_mesh_devices(m); dev++) {
    if (!kdc_type_equal(&locals[dev].type, &lt)) {
      char b1[160], b2[160];
      free(out_global->data);
      out_global->data = NULL;
      return KDC_ERR(KDC_INVALID_INPUT, "unshard: device %lld holds %s, expected %s",
                     (long long)dev, kdc_type_str(&locals[dev].type, b1, sizeof b1),
                     kdc_type_str(&lt, b2, sizeof b2));
    }
    kdc_mesh_coords(m, dev, c);
    bool replica = false, first = true;
    for (int a = 0; a < m->naxes; a++) {
      if (!(used & (1u << a)) && !(partial & (1u << a)) && c[a] != 0) replica = true;
      if ((partial & (1u << a)) && c[a] != 0) first = false;
    }
    if (replica) continue; /* the copy at coordinate 0 on the replica axes is used */
    piece_offsets(m, s, &lt, dev, off);
    block(out_global->data, global_type, off, locals[dev].data, &lt, zero, &lt, !first);
  }
  return NULL;
}

/* ---- SPMD ops ---------------------------------------------------------------- */

typedef struct spmd {
  const kdc_func *f;
  const kdc_mesh *m;
  int64_t nd;     /* devices */
  void ***vals;   /* vals[device][value] */
} spmd;

/* Sum over the group of |dev| (axes |c|) of the operand, in device-id order. */
static kdc_status group_sum(spmd *s, const kdc_node *n, int64_t dev, void **out) {
  const kdc_attr_coll *c = &n->attr.coll;
  const kdc_type *xt = &s->f->nodes[n->in[0]].type;
  int64_t k = kdc_mesh_axes_size(s->m, c->naxes, c->axes), zero[KDC_MAX_RANK] = {0};
  int64_t *mem = kdc_xmalloc((size_t)k * sizeof *mem);
  kdc_mesh_group_members(s->m, dev, c->naxes, c->axes, mem);
  kdc_status st = alloc_type(xt, out);
  if (xt->dtype == KDC_DTYPE_BOOL && !st)
    st = KDC_ERR(KDC_UNSUPPORTED, "spmd interpreter: %s of bool", kdc_op_name(n->op));
  for (int64_t done = 0; done < k && !st; done++) { /* selection by increasing device id */
    int64_t best = -1;
    for (int64_t i = 0; i < k; i++)
      if (mem[i] >= 0 && (best < 0 || mem[i] < mem[best])) best = i;
    block(*out, xt, zero, s->vals[mem[best]][n->in[0]], xt, zero, xt, done > 0);
    mem[best] = -1;
  }
  free(mem);
  return st;
}

/* The checks ir/verify.c makes, so a malformed node is an error, never an
 * out-of-bounds access. */
static kdc_status check_coll(spmd *s, kdc_value_id v) {
  const kdc_node *n = &s->f->nodes[v];
  const kdc_attr_coll *c = &n->attr.coll;
  kdc_type in = s->f->nodes[n->in[0]].type, out = n->type;
  if (n->in[0] >= v) return KDC_ERR(KDC_INVALID_INPUT, "operand after use");
  KDC_RETURN_IF_ERROR(kdc_ir_infer_type(n->op, 1, &in, &n->attr, &out));
  if (c->naxes < 0 || c->naxes > s->m->naxes || (n->op == KDC_OP_COLLECTIVE_PERMUTE && c->naxes != 1))
    return KDC_ERR(KDC_INVALID_INPUT, "bad mesh axes");
  for (int i = 0; i < c->naxes; i++)
    if (c->axes[i] >= s->m->naxes) return KDC_ERR(KDC_INVALID_INPUT, "axis not in the mesh");
  int64_t k = kdc_mesh_axes_size(s->m, c->naxes, c->axes), d = c->dim;
  bool ok = kdc_type_equal(&out, &n->type);
  if (n->op == KDC_OP_ALL_GATHER) ok = ok && n->type.dims[d] == in.dims[d] * k;
  if (n->op == KDC_OP_REDUCE_SCATTER || n->op == KDC_OP_SHARD_SLICE)
    ok = ok && in.dims[d] == n->type.dims[d] * k;
  if (n->op == KDC_OP_ALL_TO_ALL)
    ok = ok && in.dims[d] % k == 0 &&
         (d == c->dim2 || (in.dims[d] == n->type.dims[d] * k &&
                           n->type.dims[c->dim2] == in.dims[c->dim2] * k));
  if (!ok) return KDC_ERR(KDC_INVALID_INPUT, "types do not match a group of %lld", (long long)k);
  return NULL;
}

/* Evaluates SPMD node |v| on device |dev| into *out (operands of all devices
 * are available in s->vals). */
static kdc_status run_coll(spmd *s, kdc_value_id v, int64_t dev, void **out) {
  const kdc_node *n = &s->f->nodes[v];
  const kdc_attr_coll *c = &n->attr.coll;
  const kdc_type *xt = &s->f->nodes[n->in[0]].type, *rt = &n->type;
  int64_t k = kdc_mesh_axes_size(s->m, c->naxes, c->axes);
  int64_t g = kdc_mesh_group_index(s->m, dev, c->naxes, c->axes);
  int64_t so[KDC_MAX_RANK] = {0}, do_[KDC_MAX_RANK] = {0};
  const void *x = s->vals[dev][n->in[0]];
  if (n->op == KDC_OP_ALL_REDUCE) return group_sum(s, n, dev, out);
  if (n->op == KDC_OP_REDUCE_SCATTER) {
    void *sum;
    KDC_RETURN_IF_ERROR(group_sum(s, n, dev, &sum));
    kdc_status st = alloc_type(rt, out);
    so[c->dim] = g * rt->dims[c->dim];
    if (!st) block(*out, rt, do_, sum, xt, so, rt, false);
    free(sum);
    return st;
  }
  KDC_RETURN_IF_ERROR(alloc_type(rt, out));
  if (n->op == KDC_OP_SHARD_SLICE) {
    so[c->dim] = g * rt->dims[c->dim];
    block(*out, rt, do_, x, xt, so, rt, false);
    return NULL;
  }
  if (n->op == KDC_OP_COLLECTIVE_PERMUTE) {
    int64_t coords[KDC_MAX_MESH_AXES];
    int a = c->axes[0];
    kdc_mesh_coords(s->m, dev, coords);
    int64_t src = coords[a] - c->shift;
    if (src < 0 || src >= s->m->sizes[a]) return NULL; /* zeros */
    coords[a] = src;
    int64_t sd = 0;
    for (int i = 0; i < s->m->naxes; i++) sd = sd * s->m->sizes[i] + coords[i];
    memcpy(*out, s->vals[sd][n->in[0]], kdc_type_bytes(rt));
    return NULL;
  }
  int64_t *mem = kdc_xmalloc((size_t)k * sizeof *mem);
  kdc_mesh_group_members(s->m, dev, c->naxes, c->axes, mem);
  for (int64_t j = 0; j < k; j++) {
    const void *xj = s->vals[mem[j]][n->in[0]];
    if (n->op == KDC_OP_ALL_GATHER) { /* member j's piece at offset j */
      do_[c->dim] = j * xt->dims[c->dim];
      block(*out, rt, do_, xj, xt, so, xt, false);
    } else { /* ALL_TO_ALL: member j's piece g, placed at concat offset j */
      kdc_type piece = *xt;
      piece.dims[c->dim] = xt->dims[c->dim] / k;
      so[c->dim] = g * piece.dims[c->dim];
      memset(do_, 0, sizeof do_);
      do_[c->dim2] = j * piece.dims[c->dim2];
      block(*out, rt, do_, xj, xt, so, &piece, false);
    }
  }
  free(mem);
  return NULL;
}

/* Does |n| (an rng_uniform) have a sharding that splits a dim? */
static bool rng_split(const kdc_node *n) {
  if (n->op != KDC_OP_RNG_UNIFORM || !n->sharding.present || n->sharding.rank != n->type.rank)
    return false;
  for (int d = 0; d < n->type.rank; d++)
    if (n->sharding.naxes[d]) return true;
  return false;
}

/* rng_uniform on |dev| at the global index of each local element. */
static kdc_status run_rng(spmd *s, kdc_value_id v, int64_t dev, void **out) {
  const kdc_node *n = &s->f->nodes[v];
  const kdc_node *sn = &s->f->nodes[n->in[0]];
  const void *sp = s->vals[dev][n->in[0]];
  int64_t step = sn->type.dtype == KDC_DTYPE_I64 ? *(const int64_t *)sp
                 : sn->type.dtype == KDC_DTYPE_I32 ? *(const int32_t *)sp
                                                  : *(const uint8_t *)sp;
  int64_t off[KDC_MAX_RANK], gdims[KDC_MAX_RANK], idx[KDC_MAX_RANK];
  piece_offsets(s->m, &n->sharding, &n->type, dev, off);
  for (int d = 0; d < n->type.rank; d++)
    gdims[d] = n->type.dims[d] * kdc_sharding_dim_shards(s->m, &n->sharding, d);
  KDC_RETURN_IF_ERROR(alloc_type(&n->type, out));
  int64_t numel = kdc_type_numel(&n->type);
  for (int64_t i = 0; i < numel; i++) {
    int64_t r = i, g = 0;
    for (int d = n->type.rank - 1; d >= 0; d--) {
      idx[d] = r % n->type.dims[d];
      r /= n->type.dims[d];
    }
    for (int d = 0; d < n->type.rank; d++) g = g * gdims[d] + off[d] + idx[d];
    ((float *)*out)[i] = kdc_rng_uniform_at(n->attr.seed, step, g);
  }
  return NULL;
}

/* A scan on every device at once: each iteration runs the (partitioned)
 * body through kdc_ir_interpret_spmd, so collectives inside the loop meet
 * across devices (ir/scan.c's semantics per device otherwise). */
static kdc_status run_scan(spmd *s, kdc_value_id v) {
  const kdc_node *n = &s->f->nodes[v];
  const kdc_attr_scan *a = &n->attr.scan;
  KDC_RETURN_IF_ERROR(kdc_ir_scan_check(s->f, v));
  const kdc_func *b = kdc_ir_scan_body(s->f, v);
  int nc = (int)a->n_carry, nx = (int)a->n_xs, ni = n->n_in;
  size_t ybytes = kdc_type_bytes(&b->nodes[b->results[nc]].type);
  kdc_tensor **args = kdc_xcalloc((size_t)s->nd, sizeof *args);
  kdc_tensor **res = kdc_xcalloc((size_t)s->nd, sizeof *res);
  kdc_status st = NULL;
  for (int64_t d = 0; d < s->nd; d++) {
    args[d] = kdc_xcalloc((size_t)ni + 1, sizeof **args);
    res[d] = kdc_xcalloc((size_t)nc + 1, sizeof **res);
    for (int i = 0; i < ni; i++) {
      args[d][i].type = b->nodes[b->params[i]].type;
      args[d][i].data = s->vals[d][n->in[i]];
    }
    for (int i = 0; i < nc; i++) { /* the carries live in owned copies */
      size_t bytes = kdc_type_bytes(&args[d][i].type);
      args[d][i].data = kdc_xmalloc(bytes ? bytes : 1);
      memcpy(args[d][i].data, s->vals[d][n->in[i]], bytes);
    }
    if (!st) st = alloc_type(&n->type, &s->vals[d][v]);
  }
  for (int64_t t = 0; t < a->length && !st; t++) {
    for (int64_t d = 0; d < s->nd; d++)
      for (int i = nc; i < nc + nx; i++)
        args[d][i].data = (char *)s->vals[d][n->in[i]] + (size_t)t * kdc_type_bytes(&args[d][i].type);
    st = kdc_ir_interpret_spmd(b, s->m, (const kdc_tensor *const *)args, res);
    for (int64_t d = 0; d < s->nd && !st; d++) {
      for (int i = 0; i < nc; i++) {
        memcpy(args[d][i].data, res[d][i].data, kdc_type_bytes(&args[d][i].type));
        free(res[d][i].data);
      }
      memcpy((char *)s->vals[d][v] + (size_t)t * ybytes, res[d][nc].data, ybytes);
      free(res[d][nc].data);
    }
  }
  for (int64_t d = 0; d < s->nd; d++) {
    for (int i = 0; i < nc; i++) free(args[d][i].data);
    free(args[d]), free(res[d]);
  }
  free(args), free(res);
  return st ? kdc_status_annotate(st, "scan %%%u step", v) : NULL;
}

/* Binds parameter |v| on every device. */
static kdc_status bind_params(spmd *s, kdc_value_id v, const kdc_tensor *const *args, bool **owned) {
  const kdc_node *n = &s->f->nodes[v];
  int idx = n->attr.param.index;
  const char *name = n->attr.param.name ? n->attr.param.name : "";
  for (int64_t d = 0; d < s->nd; d++) {
    const kdc_tensor *a = &args[d][idx];
    if (a->data) {
      if (!kdc_type_equal(&a->type, &n->type)) {
        char b1[160], b2[160];
        return KDC_ERR(KDC_INVALID_INPUT, "spmd interpreter: device %lld: parameter %d \"%s\" is %s, "
                       "got %s", (long long)d, idx, name, kdc_type_str(&n->type, b1, sizeof b1),
                       kdc_type_str(&a->type, b2, sizeof b2));
      }
      s->vals[d][v] = a->data;
      continue;
    }
    const kdc_weight *w = kdc_ir_module_find_weight(s->f->module, name);
    if (n->attr.param.kind != KDC_PARAM_WEIGHT || !w || !w->data)
      return KDC_ERR(KDC_INVALID_INPUT, "spmd interpreter: device %lld: no argument for parameter "
                     "%d \"%s\"", (long long)d, idx, name);
    kdc_tensor g = {w->type, w->data}, local;
    kdc_sharding rep = kdc_sharding_replicated(w->type.rank);
    KDC_RETURN_IF_ERROR(kdc_sharding_shard(s->m, n->sharding.present ? &n->sharding : &rep, &g, d,
                                           &local));
    s->vals[d][v] = local.data;
    owned[d][v] = true;
    if (!kdc_type_equal(&local.type, &n->type))
      return KDC_ERR(KDC_INVALID_INPUT, "spmd interpreter: weight \"%s\" piece does not match "
                     "parameter %d's local type", name, idx);
  }
  return NULL;
}

static kdc_status interpret_spmd(const kdc_func *f, const kdc_mesh *mesh,
                                 const kdc_tensor *const *args_per_device,
                                 kdc_tensor **out_results_per_device) {
  spmd s = {f, mesh, kdc_mesh_devices(mesh), NULL};
  size_t nn = f->n_nodes + 1;
  bool **owned = kdc_xcalloc((size_t)s.nd, sizeof *owned);
  s.vals = kdc_xcalloc((size_t)s.nd, sizeof *s.vals);
  for (int64_t d = 0; d < s.nd; d++) {
    s.vals[d] = kdc_xcalloc(nn, sizeof **s.vals);
    owned[d] = kdc_xcalloc(nn, sizeof **owned);
    memset(out_results_per_device[d], 0, f->n_results * sizeof(kdc_tensor));
  }
  kdc_status st = kdc_mesh_check(mesh);
  for (size_t v = 0; v < f->n_nodes && !st; v++) {
    const kdc_node *n = &f->nodes[v];
    if (n->op == KDC_OP_PARAMETER) {
      st = bind_params(&s, (kdc_value_id)v, args_per_device, owned);
      continue;
    }
    if (n->op == KDC_OP_SCAN) {
      st = run_scan(&s, (kdc_value_id)v);
      for (int64_t d = 0; d < s.nd; d++) owned[d][v] = s.vals[d][v] != NULL;
      if (st) st = kdc_status_annotate(st, "spmd interpreter: func @%s: %%%zu = scan", f->name, v);
      continue;
    }
    bool coll = (kdc_op_flags(n->op) & OPF_COLL) && n->op != KDC_OP_SHARDING_CONSTRAINT;
    if (coll) st = check_coll(&s, (kdc_value_id)v);
    for (int64_t d = 0; d < s.nd && !st; d++) {
      st = coll            ? run_coll(&s, (kdc_value_id)v, d, &s.vals[d][v])
           : rng_split(n) ? run_rng(&s, (kdc_value_id)v, d, &s.vals[d][v])
                          : kdc_ir_interp_node(f, (kdc_value_id)v, s.vals[d], &s.vals[d][v]);
      owned[d][v] = s.vals[d][v] != NULL;
    }
    if (st) st = kdc_status_annotate(st, "spmd interpreter: func @%s: %%%zu = %s", f->name, v,
                                     kdc_op_name(n->op));
  }
  for (int64_t d = 0; d < s.nd && !st; d++)
    for (size_t i = 0; i < f->n_results && !st; i++) {
      kdc_value_id r = f->results[i];
      kdc_tensor *o = &out_results_per_device[d][i];
      o->type = f->nodes[r].type;
      st = alloc_type(&o->type, &o->data);
      if (!st) memcpy(o->data, s.vals[d][r], kdc_type_bytes(&o->type));
    }
  for (int64_t d = 0; d < s.nd; d++) {
    for (size_t v = 0; v < nn; v++)
      if (owned[d][v]) free(s.vals[d][v]);
    if (st)
      for (size_t i = 0; i < f->n_results; i++) {
        free(out_results_per_device[d][i].data);
        out_results_per_device[d][i].data = NULL;
      }
    free(s.vals[d]);
    free(owned[d]);
  }
  free(s.vals);
  free(owned);
  return st;
}

/* Nodes and collective sums alike in kdc's floating-point mode
 * (kdc/fpenv.h), as kdc_ir_interpret and the runtime compute. */
kdc_status kdc_ir_interpret_spmd(const kdc_func *f, const kdc_mesh *mesh,
                                 const kdc_tensor *const *args_per_device,
                                 kdc_tensor **out_results_per_device) {
  unsigned long fp = kdc_fp_flush_enter();
  kdc_status st = interpret_spmd(f, mesh, args_per_device, out_results_per_device);
  kdc_fp_flush_leave(fp);
  return st;
}
