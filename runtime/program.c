/*
 * runtime/program.c: encoder and validating decoder of the PROGRAM and
 * WEIGHTS section payloads (layout in docs/plan-format.md, "Sections").
 *
 * The decoder is the plan's security boundary against corruption (not
 * malice: see ARCHITECTURE "Trust"): after it accepts a program, every step
 * reads and writes only inside buffers of known size, every kernel index
 * exists and has the argument count its code expects, and no step writes a
 * read-only buffer (inputs, weights).  Errors name the file, the section and
 * the byte offset where the bad field starts.
 */
#include "runtime/program.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

int64_t kdc_prog_kernel_family(const char *name, size_t *digits_at, size_t *digits_end) {
  static const char *const prefix[] = {"kdc_kernel_", "kdc_body_", "kdc_opnd_"};
  for (size_t i = 0; i < sizeof prefix / sizeof *prefix; i++) {
    size_t n = strlen(prefix[i]);
    if (strncmp(name, prefix[i], n) || name[n] < '0' || name[n] > '9') continue;
    int64_t k = 0;
    size_t e = n;
    for (; name[e] >= '0' && name[e] <= '9' && k < (int64_t)1 << 40; e++)
      k = k * 10 + (name[e] - '0');
    if (digits_at) *digits_at = n;
    if (digits_end) *digits_end = e;
    return k;
  }
  return -1;
}

size_t kdc_prog_dtype_size(kdc_io_dtype dt) {
  switch (dt) {
  case KDC_IO_DTYPE_F32: return 4;
  case KDC_IO_DTYPE_I32: return 4;
  case KDC_IO_DTYPE_I64: return 8;
  case KDC_IO_DTYPE_BOOL: return 1;
  case KDC_IO_DTYPE_BF16: return 2;
  case KDC_IO_DTYPE_F16: return 2;
  default: return 0;
  }
}

/* ---- encode ---------------------------------------------------------------- */

bool kdc_prog_tensor_localize(kdc_prog_tensor *t, const kdc_prog_mesh *mesh) {
  unsigned used = 0;
  t->local_bytes = 0;
  memcpy(t->local_dims, t->dims, sizeof t->dims);
  for (int d = 0; d < t->rank; d++) {
    int64_t k = 1;
    if (t->sharding.naxes[d] > KDC_PROG_MAX_AXES) return false;
    for (int i = 0; i < t->sharding.naxes[d]; i++) {
      uint8_t a = t->sharding.axes[d][i];
      if (a >= mesh->naxes || (used & (1u << a))) return false;
      used |= 1u << a;
      k *= mesh->sizes[a];  /* <= KDC_PROG_MAX_DEVICES: no overflow */
    }
    if (t->dims[d] % k) return false;
    t->local_dims[d] = t->dims[d] / k;
  }
  size_t es = kdc_prog_dtype_size(t->dtype);
  uint64_t n = es;
  for (int d = 0; d < t->rank; d++) n *= (uint64_t)t->local_dims[d];  /* <= global bytes */
  t->local_bytes = n;
  return true;
}

char *kdc_prog_sharding_str(const kdc_prog_mesh *mesh, const kdc_prog_sharding *s, int rank,
                            char *buf, size_t n) {
  size_t o = 0;
  if (n == 0) return buf;
  buf[0] = 0;
#define PUT(...) (o += o < n ? (size_t)snprintf(buf + o, n - o, __VA_ARGS__) : 0)
  PUT("{");
  for (int d = 0; d < rank; d++) {
    int k = s->naxes[d];
    PUT("%s%s", d ? "," : "", k == 0 ? "-" : k > 1 ? "(" : "");
    for (int i = 0; i < k; i++) {
      uint8_t a = s->axes[d][i];
      if (a < mesh->naxes) PUT("%s%s", i ? "," : "", mesh->names[a]);
      else PUT("%s<axis%u>", i ? "," : "", a);
    }
    if (k > 1) PUT(")");
  }
  PUT("}");
#undef PUT
  return buf;
}

const char *kdc_prog_coll_name(kdc_prog_coll_kind k) {
  static const char *const names[] = {"?", "all_reduce", "all_gather", "reduce_scatter",
                                      "all_to_all", "collective_permute"};
  return k > 0 && k < KDC_COLL_KIND_END ? names[k] : "?";
}

static void put_tensor(kdc_buf *b, const kdc_prog_tensor *t) {
  kdc_buf_put_str(b, t->name);
  kdc_buf_put_u8(b, (uint8_t)t->dtype);
  kdc_buf_put_u8(b, (uint8_t)t->rank);
  for (int d = 0; d < t->rank; d++) kdc_buf_put_i64(b, t->dims[d]);
  for (int d = 0; d < t->rank; d++) {
    kdc_buf_put_u8(b, t->sharding.naxes[d]);
    for (int i = 0; i < t->sharding.naxes[d]; i++) kdc_buf_put_u8(b, t->sharding.axes[d][i]);
  }
  kdc_buf_put_u8(b, t->gate_packed);
}

static void put_loc(kdc_buf *b, const kdc_prog_loc *l) {
  kdc_buf_put_u8(b, l->buf);
  kdc_buf_put_u32(b, l->index);
  kdc_buf_put_u64(b, l->offset);
  kdc_buf_put_u64(b, l->bytes);
}

static void put_step(kdc_buf *b, const kdc_prog_step *s) {
  kdc_buf_put_u8(b, (uint8_t)s->kind);
  switch (s->kind) {
  case KDC_STEP_KERNEL:
    kdc_buf_put_u32(b, s->kernel.kernel);
    kdc_buf_put_i64(b, s->kernel.extent);
    kdc_buf_put_i64(b, s->kernel.unit_cost);
    kdc_buf_put_u32(b, s->kernel.n_args);
    kdc_buf_put_u32(b, s->kernel.n_out);
    kdc_buf_put_u64(b, s->kernel.in_place);
    for (uint32_t i = 0; i < s->kernel.n_args; i++) put_loc(b, &s->kernel.args[i]);
    break;
  case KDC_STEP_GEMM: {
    const kdc_prog_gemm_step *g = &s->gemm;
    int64_t v[] = {g->batch, g->m, g->n, g->k};
    kdc_buf_put_u8(b, (uint8_t)g->dtype);
    for (int i = 0; i < 4; i++) kdc_buf_put_i64(b, v[i]);
    kdc_buf_put_u8(b, g->trans_a);
    kdc_buf_put_u8(b, g->trans_b);
    kdc_buf_put_u8(b, g->bf16_inputs);
    int64_t inner = g->batch_inner > 1 ? g->batch_inner : 1;
    int64_t w[] = {g->lda,      g->ldb, g->ldc,       g->stride_a,  g->stride_b,
                   g->stride_c, inner,  g->stride_a2, g->stride_b2, g->stride_c2};
    for (int i = 0; i < 10; i++) kdc_buf_put_i64(b, w[i]);
    put_loc(b, &g->a);
    put_loc(b, &g->b);
    put_loc(b, &g->c);
    break;
  }
  case KDC_STEP_COPY:
    put_loc(b, &s->src);
    put_loc(b, &s->dst);
    break;
  case KDC_STEP_COLLECTIVE: {
    const kdc_prog_coll_step *c = &s->coll;
    kdc_buf_put_u8(b, (uint8_t)c->kind);
    kdc_buf_put_u8(b, (uint8_t)c->dtype);
    kdc_buf_put_u8(b, (uint8_t)c->naxes);
    for (uint32_t i = 0; i < c->naxes; i++) kdc_buf_put_u8(b, c->axes[i]);
    kdc_buf_put_i64(b, c->dim);
    kdc_buf_put_i64(b, c->dim2);
    kdc_buf_put_i64(b, c->shift);
    kdc_buf_put_u8(b, (uint8_t)c->rank);
    for (int d = 0; d < c->rank; d++) kdc_buf_put_i64(b, c->in_dims[d]);
    for (int d = 0; d < c->rank; d++) kdc_buf_put_i64(b, c->out_dims[d]);
    put_loc(b, &c->src);
    put_loc(b, &c->dst);
    break;
  }
  case KDC_STEP_LOOP: {
    const kdc_prog_loop_step *l = &s->loop;
    kdc_buf_put_u32(b, l->body);
    kdc_buf_put_i64(b, l->length);
    kdc_buf_put_u32(b, l->n_carry);
    kdc_buf_put_u32(b, l->n_in);
    for (uint32_t i = 0; i < l->n_in; i++) put_loc(b, &l->in[i]), kdc_buf_put_i64(b, l->in_stride[i]);
    kdc_buf_put_u32(b, l->n_out);
    for (uint32_t i = 0; i < l->n_out; i++)
      put_loc(b, &l->out[i]), kdc_buf_put_i64(b, l->out_stride[i]);
    break;
  }
  }
}

void kdc_prog_encode(const kdc_program *p, kdc_buf *out) {
  kdc_buf_put_u32(out, KDC_PROG_VERSION);
  kdc_buf_put_u32(out, p->mesh.naxes);
  for (uint32_t i = 0; i < p->mesh.naxes; i++) {
    kdc_buf_put_str(out, p->mesh.names[i]);
    kdc_buf_put_i64(out, p->mesh.sizes[i]);
  }
  kdc_buf_put_u64(out, p->arena_bytes);
  kdc_buf_put_u32(out, p->n_kernels);
  for (uint32_t i = 0; i < p->n_kernels; i++) {
    kdc_buf_put_str(out, p->kernels[i].name);
    kdc_buf_put_u32(out, p->kernels[i].n_args);
  }
  kdc_buf_put_u32(out, p->n_funcs);
  for (uint32_t i = 0; i < p->n_funcs; i++) {
    const kdc_prog_func *f = &p->funcs[i];
    kdc_buf_put_str(out, f->name);
    kdc_buf_put_u8(out, f->is_body ? 1 : 0);
    kdc_buf_put_u32(out, f->n_inputs);
    for (uint32_t j = 0; j < f->n_inputs; j++) put_tensor(out, &f->inputs[j]);
    kdc_buf_put_u32(out, f->n_outputs);
    for (uint32_t j = 0; j < f->n_outputs; j++) put_tensor(out, &f->outputs[j]);
    kdc_buf_put_u32(out, f->n_steps);
    for (uint32_t j = 0; j < f->n_steps; j++) put_step(out, &f->steps[j]);
  }
}

void kdc_prog_encode_weights_table(const kdc_prog_tensor *t, uint32_t n, kdc_buf *out,
                                   uint64_t *data_at) {
  KDC_ASSERT(out->size == 0);
  kdc_buf_put_u32(out, KDC_PROG_VERSION);
  kdc_buf_put_u32(out, n);
  /* The table first (offsets back-patched), then 64-aligned data. */
  size_t *at = kdc_xcalloc(n + 1, sizeof *at);
  for (uint32_t i = 0; i < n; i++) {
    put_tensor(out, &t[i]);
    at[i] = out->size;
    kdc_buf_put_u64(out, 0);
    kdc_buf_put_u64(out, t[i].bytes);
  }
  uint64_t pos = out->size;
  for (uint32_t i = 0; i < n; i++) {
    pos = (pos + KDC_PLAN_ALIGN - 1) / KDC_PLAN_ALIGN * KDC_PLAN_ALIGN;
    data_at[i] = pos;
    kdc_store_le64(out->data + at[i], pos);
    pos += t[i].bytes;
  }
  free(at);
}

/* ---- decode ---------------------------------------------------------------- */

/* An error at byte |pos| of |r|'s section (the start of the bad field). */
#define BAD_AT(r, pos, ...) \
  kdc_reader_error(&(kdc_reader){(r)->data, (r)->size, (pos), (r)->file, (r)->section}, __VA_ARGS__)

static kdc_status get_tensor(kdc_reader *r, kdc_arena *a, const kdc_prog_mesh *mesh,
                             kdc_prog_tensor *t) {
  size_t pos = r->pos;
  const char *name;
  size_t len;
  uint8_t dt, rank;
  KDC_RETURN_IF_ERROR(kdc_reader_str(r, &name, &len));
  t->name = kdc_arena_strdup(a, name);
  KDC_RETURN_IF_ERROR(kdc_reader_u8(r, &dt));
  KDC_RETURN_IF_ERROR(kdc_reader_u8(r, &rank));
  if (dt >= KDC_IO_DTYPE_COUNT || !kdc_prog_dtype_size((kdc_io_dtype)dt))
    return BAD_AT(r, pos, "tensor \"%s\": unsupported dtype code %u", t->name, dt);
  if (rank > KDC_IO_MAX_RANK)
    return BAD_AT(r, pos, "tensor \"%s\": rank %u exceeds %d", t->name, rank, KDC_IO_MAX_RANK);
  t->dtype = (kdc_io_dtype)dt;
  t->rank = rank;
  memset(t->dims, 0, sizeof t->dims);
  for (int d = 0; d < rank; d++) KDC_RETURN_IF_ERROR(kdc_reader_i64(r, &t->dims[d]));
  size_t nbytes;
  int bad;
  if (!kdc_io_shape_bytes(t->dtype, rank, t->dims, &nbytes, &bad))
    return BAD_AT(r, pos, "tensor \"%s\": bad shape (dim %d)", t->name, bad);
  t->bytes = nbytes;
  memset(&t->sharding, 0, sizeof t->sharding);
  for (int d = 0; d < rank; d++) {
    uint8_t k;
    KDC_RETURN_IF_ERROR(kdc_reader_u8(r, &k));
    if (k > mesh->naxes)
      return BAD_AT(r, pos, "tensor \"%s\": dim %d split by %u axes, the mesh has %u", t->name, d,
                    k, mesh->naxes);
    t->sharding.naxes[d] = k;
    for (int i = 0; i < k; i++) KDC_RETURN_IF_ERROR(kdc_reader_u8(r, &t->sharding.axes[d][i]));
  }
  uint8_t packed;
  KDC_RETURN_IF_ERROR(kdc_reader_u8(r, &packed));
  if (packed > 1 || (packed && rank < 2))
    return BAD_AT(r, pos, "tensor \"%s\": gate_packed %u for rank %u", t->name, packed, rank);
  t->gate_packed = packed;
  if (!kdc_prog_tensor_localize(t, mesh)) {
    char sh[256];
    return BAD_AT(r, pos, "tensor \"%s\": sharding %s does not fit the mesh or the shape",
                  t->name, kdc_prog_sharding_str(mesh, &t->sharding, rank, sh, sizeof sh));
  }
  return NULL;
}

/* Checks that loc |l| (read at |pos|) lies inside its buffer. */
static kdc_status check_loc(kdc_reader *r, size_t pos, const kdc_program *p,
                            const kdc_prog_func *f, bool writable, const kdc_prog_loc *l) {
  uint64_t size = 0, count = 0;
  const char *what = "?";
  switch (l->buf) {
  case KDC_PROG_BUF_ARENA: what = "arena"; count = 1; size = p->arena_bytes; break;
  case KDC_PROG_BUF_INPUT:
    what = "input", count = f->n_inputs;
    if (l->index < count) size = f->inputs[l->index].local_bytes;
    break;
  case KDC_PROG_BUF_OUTPUT:
    what = "output", count = f->n_outputs;
    if (l->index < count) size = f->outputs[l->index].local_bytes;
    break;
  case KDC_PROG_BUF_WEIGHT:
    what = "weight", count = p->n_weights;
    if (l->index < count) size = p->weights[l->index].local_bytes;
    break;
  default: return BAD_AT(r, pos, "unknown buffer kind %u", l->buf);
  }
  if (l->index >= count)
    return BAD_AT(r, pos, "%s buffer %u does not exist (%llu in function %s)", what, l->index,
                  (unsigned long long)count, f->name);
  if (l->offset > size || l->bytes > size - l->offset)
    return BAD_AT(r, pos, "%s buffer %u: bytes [%llu, +%llu) beyond its size %llu", what,
                  l->index, (unsigned long long)l->offset, (unsigned long long)l->bytes,
                  (unsigned long long)size);
  if (writable && l->buf != KDC_PROG_BUF_ARENA && l->buf != KDC_PROG_BUF_OUTPUT)
    return BAD_AT(r, pos, "step writes read-only %s buffer %u", what, l->index);
  return NULL;
}

/* Reads a loc and checks it lies inside its buffer. */
static kdc_status get_loc(kdc_reader *r, const kdc_program *p, const kdc_prog_func *f,
                          bool writable, kdc_prog_loc *l) {
  size_t pos = r->pos;
  KDC_RETURN_IF_ERROR(kdc_reader_u8(r, &l->buf));
  KDC_RETURN_IF_ERROR(kdc_reader_u32(r, &l->index));
  KDC_RETURN_IF_ERROR(kdc_reader_u64(r, &l->offset));
  KDC_RETURN_IF_ERROR(kdc_reader_u64(r, &l->bytes));
  return check_loc(r, pos, p, f, writable, l);
}

/* Elements a row-major rows x cols matrix with leading dim ld, repeated
 * |batch| times |stride| apart, spans; false on overflow or bad ld. */
/* Elements spanned by |batch| rows x cols matrices in a two-level batch
 * (|inner| entries |stride2| apart, groups of them |stride| apart). */
static bool matrix_span(int64_t batch, int64_t inner, int64_t rows, int64_t cols, int64_t ld,
                        int64_t stride, int64_t stride2, uint64_t *out) {
  if (ld < (cols > 1 ? cols : 1) || stride < 0 || stride2 < 0) return false;
  if (batch == 0 || rows == 0 || cols == 0) return *out = 0, true;
  int64_t a, a2, b, c;
  if (__builtin_mul_overflow(batch / inner - 1, stride, &a) ||
      __builtin_mul_overflow(inner - 1, stride2, &a2) || __builtin_add_overflow(a, a2, &a) ||
      __builtin_mul_overflow(rows - 1, ld, &b) || __builtin_add_overflow(a, b, &c) ||
      __builtin_add_overflow(c, cols, &c))
    return false;
  *out = (uint64_t)c;
  return true;
}

static kdc_status get_gemm(kdc_reader *r, const kdc_program *p, const kdc_prog_func *f,
                           kdc_prog_gemm_step *g) {
  size_t pos = r->pos;
  uint8_t dt;
  KDC_RETURN_IF_ERROR(kdc_reader_u8(r, &dt));
  if (dt != KDC_IO_DTYPE_F32 && dt != KDC_IO_DTYPE_BF16 && dt != KDC_IO_DTYPE_F16)
    return BAD_AT(r, pos, "gemm: element type %u is not f32, bf16 or f16", dt);
  g->dtype = (kdc_io_dtype)dt;
  size_t es = kdc_prog_dtype_size(g->dtype);
  int64_t *v[] = {&g->batch, &g->m, &g->n, &g->k};
  for (int i = 0; i < 4; i++) KDC_RETURN_IF_ERROR(kdc_reader_i64(r, v[i]));
  uint8_t ta, tb, fl;
  KDC_RETURN_IF_ERROR(kdc_reader_u8(r, &ta));
  KDC_RETURN_IF_ERROR(kdc_reader_u8(r, &tb));
  KDC_RETURN_IF_ERROR(kdc_reader_u8(r, &fl));
  if (fl > 1 || (fl && dt != KDC_IO_DTYPE_F32))
    return BAD_AT(r, pos, "gemm: flags %u (bit 0, bf16 inputs, only for an f32 GEMM)", fl);
  g->trans_a = ta != 0, g->trans_b = tb != 0, g->bf16_inputs = fl != 0;
  int64_t *w[] = {&g->lda,      &g->ldb,         &g->ldc,       &g->stride_a,  &g->stride_b,
                  &g->stride_c, &g->batch_inner, &g->stride_a2, &g->stride_b2, &g->stride_c2};
  for (int i = 0; i < 10; i++) KDC_RETURN_IF_ERROR(kdc_reader_i64(r, w[i]));
  KDC_RETURN_IF_ERROR(get_loc(r, p, f, false, &g->a));
  KDC_RETURN_IF_ERROR(get_loc(r, p, f, false, &g->b));
  KDC_RETURN_IF_ERROR(get_loc(r, p, f, true, &g->c));
  if (ta > 1 || tb > 1 || g->batch < 0 || g->m < 0 || g->n < 0 || g->k < 0 ||
      g->m > INT32_MAX || g->n > INT32_MAX || g->k > INT32_MAX || g->lda > INT32_MAX ||
      g->ldb > INT32_MAX || g->ldc > INT32_MAX)
    return BAD_AT(r, pos, "gemm: bad dimensions or transpose flags");
  if (g->batch_inner < 1 || (g->batch && g->batch % g->batch_inner))
    return BAD_AT(r, pos, "gemm: inner batch %lld does not divide batch %lld",
                  (long long)g->batch_inner, (long long)g->batch);
  int64_t bi = g->batch_inner;
  uint64_t sa, sb, sc;
  bool ok = matrix_span(g->batch, bi, ta ? g->k : g->m, ta ? g->m : g->k, g->lda, g->stride_a,
                        g->stride_a2, &sa) &&
            matrix_span(g->batch, bi, tb ? g->n : g->k, tb ? g->k : g->n, g->ldb, g->stride_b,
                        g->stride_b2, &sb) &&
            matrix_span(g->batch, bi, g->m, g->n, g->ldc, g->stride_c, g->stride_c2, &sc);
  if (!ok || sa > g->a.bytes / es || sb > g->b.bytes / es || sc > g->c.bytes / es)
    return BAD_AT(r, pos, "gemm: matrices exceed their buffers");
  return NULL;
}

static bool dims_equal(int rank, const int64_t *a, const int64_t *b, int except1, int except2) {
  for (int d = 0; d < rank; d++)
    if (d != except1 && d != except2 && a[d] != b[d]) return false;
  return true;
}

/* The shape rules of ir/verify.c's check_coll for local shapes. */
static bool coll_shapes_ok(const kdc_prog_coll_step *c) {
  int64_t k = c->group_size, d = c->dim, d2 = c->dim2;
  const int64_t *in = c->in_dims, *out = c->out_dims;
  bool dim_ok = d >= 0 && d < c->rank;
  switch (c->kind) {
  case KDC_COLL_ALL_REDUCE:
  case KDC_COLL_PERMUTE: return dims_equal(c->rank, in, out, -1, -1);
  case KDC_COLL_ALL_GATHER:
    return dim_ok && dims_equal(c->rank, in, out, (int)d, -1) && in[d] <= INT64_MAX / k &&
           out[d] == in[d] * k;
  case KDC_COLL_REDUCE_SCATTER:
    return dim_ok && dims_equal(c->rank, in, out, (int)d, -1) && out[d] <= INT64_MAX / k &&
           in[d] == out[d] * k;
  case KDC_COLL_ALL_TO_ALL:
    if (!dim_ok || d2 < 0 || d2 >= c->rank || in[d] % k) return false;
    if (d == d2) return dims_equal(c->rank, in, out, -1, -1);
    return dims_equal(c->rank, in, out, (int)d, (int)d2) && out[d] == in[d] / k &&
           in[d2] <= INT64_MAX / k && out[d2] == in[d2] * k;
  default: return false;
  }
}

static bool locs_overlap(const kdc_prog_loc *a, const kdc_prog_loc *b) {
  return a->buf == b->buf && a->index == b->index && a->bytes && b->bytes &&
         a->offset < b->offset + b->bytes && b->offset < a->offset + a->bytes;
}

static kdc_status get_coll(kdc_reader *r, const kdc_program *p, const kdc_prog_func *f,
                           kdc_prog_coll_step *c) {
  size_t pos = r->pos;
  uint8_t kind, dt, naxes, rank;
  KDC_RETURN_IF_ERROR(kdc_reader_u8(r, &kind));
  KDC_RETURN_IF_ERROR(kdc_reader_u8(r, &dt));
  KDC_RETURN_IF_ERROR(kdc_reader_u8(r, &naxes));
  if (kind == 0 || kind >= KDC_COLL_KIND_END)
    return BAD_AT(r, pos, "collective step: unknown kind %u", kind);
  c->kind = (kdc_prog_coll_kind)kind;
  if (dt >= KDC_IO_DTYPE_COUNT || !kdc_prog_dtype_size((kdc_io_dtype)dt))
    return BAD_AT(r, pos, "collective step: unsupported dtype code %u", dt);
  c->dtype = (kdc_io_dtype)dt;
  bool sums = kind == KDC_COLL_ALL_REDUCE || kind == KDC_COLL_REDUCE_SCATTER;
  if (sums && c->dtype == KDC_IO_DTYPE_BOOL)
    return BAD_AT(r, pos, "collective step: %s of bool", kdc_prog_coll_name(c->kind));
  if (naxes > p->mesh.naxes || (kind == KDC_COLL_PERMUTE && naxes != 1))
    return BAD_AT(r, pos, "collective step: %u axes on a mesh of %u", naxes, p->mesh.naxes);
  c->naxes = naxes;
  c->group_size = 1;
  unsigned used = 0;
  for (uint32_t i = 0; i < naxes; i++) {
    KDC_RETURN_IF_ERROR(kdc_reader_u8(r, &c->axes[i]));
    if (c->axes[i] >= p->mesh.naxes || (used & (1u << c->axes[i])))
      return BAD_AT(r, pos, "collective step: axis %u is not in the mesh or repeated",
                    c->axes[i]);
    used |= 1u << c->axes[i];
    c->group_size *= p->mesh.sizes[c->axes[i]];
  }
  KDC_RETURN_IF_ERROR(kdc_reader_i64(r, &c->dim));
  KDC_RETURN_IF_ERROR(kdc_reader_i64(r, &c->dim2));
  KDC_RETURN_IF_ERROR(kdc_reader_i64(r, &c->shift));
  KDC_RETURN_IF_ERROR(kdc_reader_u8(r, &rank));
  if (rank > KDC_IO_MAX_RANK) return BAD_AT(r, pos, "collective step: rank %u", rank);
  c->rank = rank;
  memset(c->in_dims, 0, sizeof c->in_dims);
  memset(c->out_dims, 0, sizeof c->out_dims);
  for (int d = 0; d < rank; d++) KDC_RETURN_IF_ERROR(kdc_reader_i64(r, &c->in_dims[d]));
  for (int d = 0; d < rank; d++) KDC_RETURN_IF_ERROR(kdc_reader_i64(r, &c->out_dims[d]));
  KDC_RETURN_IF_ERROR(get_loc(r, p, f, false, &c->src));
  KDC_RETURN_IF_ERROR(get_loc(r, p, f, true, &c->dst));
  size_t ib, ob;
  int bad;
  if (!kdc_io_shape_bytes(c->dtype, rank, c->in_dims, &ib, &bad) ||
      !kdc_io_shape_bytes(c->dtype, rank, c->out_dims, &ob, &bad) || !coll_shapes_ok(c))
    return BAD_AT(r, pos, "collective step: %s shapes do not match a group of %lld",
                  kdc_prog_coll_name(c->kind), (long long)c->group_size);
  if (ib != c->src.bytes || ob != c->dst.bytes)
    return BAD_AT(r, pos, "collective step: buffer sizes do not match the shapes");
  if (locs_overlap(&c->src, &c->dst))
    return BAD_AT(r, pos, "collective step: source and destination overlap");
  return NULL;
}

/* One LOOP binding: a loc whose iterations [0, length) all lie inside its
 * buffer (checked as one range of (length-1)*stride + bytes). */
static kdc_status get_bind(kdc_reader *r, const kdc_program *p, const kdc_prog_func *f,
                           bool writable, int64_t length, kdc_prog_loc *l, int64_t *stride) {
  size_t pos = r->pos;
  KDC_RETURN_IF_ERROR(kdc_reader_u8(r, &l->buf));
  KDC_RETURN_IF_ERROR(kdc_reader_u32(r, &l->index));
  KDC_RETURN_IF_ERROR(kdc_reader_u64(r, &l->offset));
  KDC_RETURN_IF_ERROR(kdc_reader_u64(r, &l->bytes));
  KDC_RETURN_IF_ERROR(kdc_reader_i64(r, stride));
  uint64_t span;
  if (*stride < 0 || __builtin_mul_overflow((uint64_t)(length - 1), (uint64_t)*stride, &span) ||
      __builtin_add_overflow(span, l->bytes, &span))
    return BAD_AT(r, pos, "loop step: binding stride %lld overflows", (long long)*stride);
  kdc_prog_loc whole = *l; /* every iteration's range at once */
  whole.bytes = span;
  return check_loc(r, pos, p, f, writable, &whole);
}

static kdc_status get_loop(kdc_reader *r, const kdc_program *p, const kdc_prog_func *f,
                           kdc_arena *a, kdc_prog_loop_step *l) {
  size_t pos = r->pos;
  KDC_RETURN_IF_ERROR(kdc_reader_u32(r, &l->body));
  KDC_RETURN_IF_ERROR(kdc_reader_i64(r, &l->length));
  KDC_RETURN_IF_ERROR(kdc_reader_u32(r, &l->n_carry));
  if (l->length < 1) return BAD_AT(r, pos, "loop step: length %lld", (long long)l->length);
  KDC_RETURN_IF_ERROR(kdc_reader_count(r, 29, &l->n_in));
  l->in = kdc_arena_alloc(a, (l->n_in + 1) * sizeof *l->in);
  l->in_stride = kdc_arena_alloc(a, (l->n_in + 1) * sizeof *l->in_stride);
  for (uint32_t i = 0; i < l->n_in; i++)
    KDC_RETURN_IF_ERROR(get_bind(r, p, f, i < l->n_carry, l->length, &l->in[i], &l->in_stride[i]));
  KDC_RETURN_IF_ERROR(kdc_reader_count(r, 29, &l->n_out));
  l->out = kdc_arena_alloc(a, (l->n_out + 1) * sizeof *l->out);
  l->out_stride = kdc_arena_alloc(a, (l->n_out + 1) * sizeof *l->out_stride);
  for (uint32_t i = 0; i < l->n_out; i++)
    KDC_RETURN_IF_ERROR(get_bind(r, p, f, true, l->length, &l->out[i], &l->out_stride[i]));
  if (l->n_carry > l->n_in || l->n_carry > l->n_out)
    return BAD_AT(r, pos, "loop step: %u carries for %u inputs and %u outputs", l->n_carry,
                  l->n_in, l->n_out);
  for (uint32_t i = 0; i < l->n_carry; i++)
    if (l->in_stride[i] || l->out_stride[i] || l->in[i].bytes != l->out[i].bytes ||
        l->in[i].buf != KDC_PROG_BUF_ARENA || locs_overlap(&l->in[i], &l->out[i]))
      return BAD_AT(r, pos, "loop step: carry %u is not one arena buffer copied from a "
                    "distinct output of its size", i);
  return NULL; /* the body's side is checked once every function is read (check_loops) */
}

/* LOOP steps against their bodies (after every function is decoded). */
static kdc_status check_loops(kdc_reader *r, const kdc_program *p) {
  for (uint32_t fi = 0; fi < p->n_funcs; fi++)
    for (uint32_t s = 0; s < p->funcs[fi].n_steps; s++) {
      const kdc_prog_step *st = &p->funcs[fi].steps[s];
      if (st->kind != KDC_STEP_LOOP) continue;
      const kdc_prog_loop_step *l = &st->loop;
      const char *fn = p->funcs[fi].name;
      if (l->body >= p->n_funcs || l->body == fi || !p->funcs[l->body].is_body || p->funcs[fi].is_body)
        return kdc_reader_error(r, "function %s step %u: loop body %u is not a scan body "
                                "function (or the loop is inside one)", fn, s, l->body);
      const kdc_prog_func *b = &p->funcs[l->body];
      if (b->n_inputs != l->n_in || b->n_outputs != l->n_out)
        return kdc_reader_error(r, "function %s step %u: loop binds %u inputs and %u outputs, "
                                "body %s has %u and %u", fn, s, l->n_in, l->n_out, b->name,
                                b->n_inputs, b->n_outputs);
      for (uint32_t i = 0; i < l->n_in + l->n_out; i++) {
        bool in = i < l->n_in;
        uint32_t k = in ? i : i - l->n_in;
        uint64_t have = in ? l->in[k].bytes : l->out[k].bytes;
        uint64_t want = in ? b->inputs[k].local_bytes : b->outputs[k].local_bytes;
        if (have != want)
          return kdc_reader_error(r, "function %s step %u: loop %s %u is %llu bytes, body "
                                  "%s %u is %llu", fn, s, in ? "input" : "output", k,
                                  (unsigned long long)have, in ? "input" : "output", k,
                                  (unsigned long long)want);
      }
      for (uint32_t j = 0; j < b->n_steps; j++)
        if (b->steps[j].kind == KDC_STEP_LOOP)
          return kdc_reader_error(r, "body %s step %u: a loop body holds no loop step", b->name, j);
    }
  return NULL;
}

static kdc_status get_step(kdc_reader *r, const kdc_program *p, const kdc_prog_func *f,
                           kdc_arena *a, kdc_prog_step *s) {
  size_t pos = r->pos;
  uint8_t kind;
  KDC_RETURN_IF_ERROR(kdc_reader_u8(r, &kind));
  s->kind = (kdc_prog_step_kind)kind;
  switch (kind) {
  case KDC_STEP_KERNEL: {
    kdc_prog_kernel_step *k = &s->kernel;
    KDC_RETURN_IF_ERROR(kdc_reader_u32(r, &k->kernel));
    KDC_RETURN_IF_ERROR(kdc_reader_i64(r, &k->extent));
    KDC_RETURN_IF_ERROR(kdc_reader_i64(r, &k->unit_cost));
    KDC_RETURN_IF_ERROR(kdc_reader_count(r, 21, &k->n_args));
    KDC_RETURN_IF_ERROR(kdc_reader_u32(r, &k->n_out));
    if (k->n_out == 0 || k->n_out > k->n_args)
      return BAD_AT(r, pos, "kernel step: %u outputs of %u arguments", k->n_out, k->n_args);
    KDC_RETURN_IF_ERROR(kdc_reader_u64(r, &k->in_place));
    if (k->n_out < 64 && k->in_place >> k->n_out)
      return BAD_AT(r, pos, "kernel step: in-place mask %#" PRIx64 " names an argument that is "
                    "not one of its %u outputs", k->in_place, k->n_out);
    if (k->kernel >= p->n_kernels)
      return BAD_AT(r, pos, "kernel step: kernel %u does not exist (%u kernels)", k->kernel,
                    p->n_kernels);
    if (k->n_args != p->kernels[k->kernel].n_args || k->n_args == 0)
      return BAD_AT(r, pos, "kernel step: %u arguments, kernel %s takes %u", k->n_args,
                    p->kernels[k->kernel].name, p->kernels[k->kernel].n_args);
    if (k->extent < 0 || k->unit_cost < 0)
      return BAD_AT(r, pos, "kernel step: negative extent or cost");
    k->args = kdc_arena_alloc(a, k->n_args * sizeof *k->args);
    uint64_t out_bytes = 0;
    for (uint32_t i = 0; i < k->n_args; i++) {
      KDC_RETURN_IF_ERROR(get_loc(r, p, f, i < k->n_out, &k->args[i]));
      if (i < k->n_out && k->args[i].bytes > out_bytes) out_bytes = k->args[i].bytes;
    }
    /* every iteration writes at least one byte of an output (the JIT kernel
     * indexes its buffers by the iteration, so a larger extent would run it
     * outside them) */
    if ((uint64_t)k->extent > out_bytes)
      return BAD_AT(r, pos, "kernel step: extent %lld exceeds its outputs' %llu bytes",
                    (long long)k->extent, (unsigned long long)out_bytes);
    return NULL;
  }
  case KDC_STEP_GEMM: return get_gemm(r, p, f, &s->gemm);
  case KDC_STEP_COPY:
    KDC_RETURN_IF_ERROR(get_loc(r, p, f, false, &s->src));
    KDC_RETURN_IF_ERROR(get_loc(r, p, f, true, &s->dst));
    if (s->src.bytes != s->dst.bytes) return BAD_AT(r, pos, "copy step: sizes differ");
    return NULL;
  case KDC_STEP_COLLECTIVE: return get_coll(r, p, f, &s->coll);
  case KDC_STEP_LOOP: return get_loop(r, p, f, a, &s->loop);
  default: return BAD_AT(r, pos, "unknown step kind %u", kind);
  }
}

static kdc_status get_version(kdc_reader *r) {
  uint32_t v;
  KDC_RETURN_IF_ERROR(kdc_reader_u32(r, &v));
  if (v != KDC_PROG_VERSION)
    return BAD_AT(r, r->pos - 4, "payload version %u, this kdc reads version %u", v,
                  KDC_PROG_VERSION);
  return NULL;
}

kdc_status kdc_prog_decode_mesh(kdc_reader *r, kdc_arena *a, kdc_program *p) {
  KDC_RETURN_IF_ERROR(get_version(r));
  size_t pos = r->pos;
  kdc_prog_mesh *m = &p->mesh;
  KDC_RETURN_IF_ERROR(kdc_reader_u32(r, &m->naxes));
  if (m->naxes > KDC_PROG_MAX_AXES)
    return BAD_AT(r, pos, "mesh of %u axes (at most %d)", m->naxes, KDC_PROG_MAX_AXES);
  m->n_devices = 1;
  for (uint32_t i = 0; i < m->naxes; i++) {
    const char *name;
    size_t len;
    pos = r->pos;
    KDC_RETURN_IF_ERROR(kdc_reader_str(r, &name, &len));
    m->names[i] = kdc_arena_strdup(a, name);
    KDC_RETURN_IF_ERROR(kdc_reader_i64(r, &m->sizes[i]));
    if (len == 0 || m->sizes[i] < 1 || m->sizes[i] > KDC_PROG_MAX_DEVICES / m->n_devices)
      return BAD_AT(r, pos, "mesh axis %u (\"%s\", size %lld): empty name, or more than %d "
                    "devices", i, name, (long long)m->sizes[i], KDC_PROG_MAX_DEVICES);
    for (uint32_t j = 0; j < i; j++)
      if (strcmp(m->names[j], name) == 0)
        return BAD_AT(r, pos, "mesh axis \"%s\" appears twice", name);
    m->n_devices *= m->sizes[i];
  }
  return NULL;
}

kdc_status kdc_prog_decode_weights(kdc_reader *r, kdc_arena *a, kdc_program *p) {
  KDC_RETURN_IF_ERROR(get_version(r));
  KDC_RETURN_IF_ERROR(kdc_reader_count(r, 22, &p->n_weights));
  p->weights = kdc_arena_alloc(a, (p->n_weights + 1) * sizeof *p->weights);
  p->weight_data = kdc_arena_alloc(a, (p->n_weights + 1) * sizeof *p->weight_data);
  for (uint32_t i = 0; i < p->n_weights; i++) {
    kdc_prog_tensor *t = &p->weights[i];
    KDC_RETURN_IF_ERROR(get_tensor(r, a, &p->mesh, t));
    size_t pos = r->pos;
    uint64_t off, bytes;
    KDC_RETURN_IF_ERROR(kdc_reader_u64(r, &off));
    KDC_RETURN_IF_ERROR(kdc_reader_u64(r, &bytes));
    if (bytes != t->bytes || off % KDC_PLAN_ALIGN || off > r->size || bytes > r->size - off)
      return BAD_AT(r, pos, "weight \"%s\": data [%llu, +%llu) is misplaced or does not match "
                    "its shape (%llu bytes)", t->name, (unsigned long long)off,
                    (unsigned long long)bytes, (unsigned long long)t->bytes);
    p->weight_data[i] = r->data + off;
  }
  return NULL;
}

kdc_status kdc_prog_decode(kdc_reader *r, kdc_arena *a, kdc_program *p) {
  KDC_RETURN_IF_ERROR(kdc_reader_u64(r, &p->arena_bytes));
  KDC_RETURN_IF_ERROR(kdc_reader_count(r, 9, &p->n_kernels));
  p->kernels = kdc_arena_alloc(a, (p->n_kernels + 1) * sizeof *p->kernels);
  for (uint32_t i = 0; i < p->n_kernels; i++) {
    const char *name;
    size_t len;
    KDC_RETURN_IF_ERROR(kdc_reader_str(r, &name, &len));
    p->kernels[i].name = kdc_arena_strdup(a, name);
    KDC_RETURN_IF_ERROR(kdc_reader_u32(r, &p->kernels[i].n_args));
  }
  KDC_RETURN_IF_ERROR(kdc_reader_count(r, 17, &p->n_funcs));
  p->funcs = kdc_arena_alloc(a, (p->n_funcs + 1) * sizeof *p->funcs);
  for (uint32_t i = 0; i < p->n_funcs; i++) {
    kdc_prog_func *f = &p->funcs[i];
    const char *name;
    size_t len;
    KDC_RETURN_IF_ERROR(kdc_reader_str(r, &name, &len));
    f->name = kdc_arena_strdup(a, name);
    size_t fpos = r->pos;
    uint8_t flags;
    KDC_RETURN_IF_ERROR(kdc_reader_u8(r, &flags));
    if (flags > 1) return BAD_AT(r, fpos, "function %s: unknown flags 0x%x", f->name, flags);
    f->is_body = flags & 1;
    KDC_RETURN_IF_ERROR(kdc_reader_count(r, 7, &f->n_inputs));
    f->inputs = kdc_arena_alloc(a, (f->n_inputs + 1) * sizeof *f->inputs);
    for (uint32_t j = 0; j < f->n_inputs; j++)
      KDC_RETURN_IF_ERROR(get_tensor(r, a, &p->mesh, &f->inputs[j]));
    KDC_RETURN_IF_ERROR(kdc_reader_count(r, 7, &f->n_outputs));
    f->outputs = kdc_arena_alloc(a, (f->n_outputs + 1) * sizeof *f->outputs);
    for (uint32_t j = 0; j < f->n_outputs; j++)
      KDC_RETURN_IF_ERROR(get_tensor(r, a, &p->mesh, &f->outputs[j]));
    KDC_RETURN_IF_ERROR(kdc_reader_count(r, 1, &f->n_steps));
    f->steps = kdc_arena_alloc(a, (f->n_steps + 1) * sizeof *f->steps);
    for (uint32_t j = 0; j < f->n_steps; j++)
      KDC_RETURN_IF_ERROR(get_step(r, p, f, a, &f->steps[j]));
  }
  if (r->pos != r->size) return kdc_reader_error(r, "%zu trailing bytes", r->size - r->pos);
  return check_loops(r, p);
}
