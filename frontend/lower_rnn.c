/*
 * frontend/lower_rnn.c: LSTM, GRU and SimpleRNN as one scan (ir/scan.c).
 *
 * Gate-packed weights (kernel [in, G*u], recurrent_kernel [u, G*u], bias
 * [G*u] or GRU's [2, G*u]) are used through their per-gate view
 * [.., G, u] (a reshape, no copy), so the units are a dim of their own: a
 * layout that splits a packed dim over mesh axes (LayoutMap (None,
 * "model")) is taken per gate -- the weight parameter is declared in its
 * per-gate form, split on u (kdc_fe_rnn_gate_weight), so a device stores
 * the same units of every gate (a column split of [in, G*u] would hand it
 * whole gates) and the scan's feature factor (passes/sharding_rules.c)
 * splits the loop by units.  The input projection of every time step is one matmul outside
 * the loop: xs = transpose(x @ kernel (+ input bias), [T, B, G, u])
 * (time-major, as scan wants it; go_backwards reverses the time dim first,
 * and the outputs then stay in processing order, as in Keras).  The loop
 * body is a function of the module, "<layer>.step", taking (carries, xs_t
 * [B, G, u], recurrent_kernel [u, G, u] [, recurrent bias [G, u]]) and
 * returning (carries', y_t); the initial carries are the call's initial
 * states (Keras' `initial_state`: h [, c], each [B, units]) or zeros.  Formulas (Keras 3, keras/src/layers/rnn/: lstm.py, gru.py, simple_rnn.py; gate order LSTM
 * i,f,c,o and GRU z,r,h; act = activation, ract = recurrent_activation):
 *   SimpleRNN: h' = act(xs_t + h @ U)               (bias inside xs_t)
 *   LSTM:      z = xs_t + h @ U; i, f, g, o = ract(z0), ract(z1), act(z2), ract(z3)
 *              c' = f c + i g;   h' = o act(c')
 *   GRU, reset_after (bias [2, 3u]: input row in xs_t, recurrent row here):
 *              r_* = h @ U + b_rec;  z = ract(x_z + r_z);  r = ract(x_r + r_r)
 *              hh = act(x_h + r r_h);  h' = z h + (1 - z) hh
 *   GRU, reset_after false (bias [3u] in xs_t):
 *              z = ract(x_z + h @ U_z); r = ract(x_r + h @ U_r);
 *              hh = act(x_h + (r h) @ U_h); h' = z h + (1 - z) hh
 * y_t is h' [B, u] -- or, when it carries more (an LSTM's final c for
 * return_state, the kept states of a masked layer), those stacked as
 * [B, K, u], which the layer slices apart after the loop.
 * Dropout and recurrent_dropout are identities at inference; in
 * train_forward their masks are drawn once per call (read_dropout): the
 * input masks drop x before the projection outside the loop, the recurrent
 * ones enter the body as a sequence [B, n, u] (each row the same masks)
 * since only sequences and carries may hold the batch dim; unroll only
 * changes how Keras builds the loop, not the numbers; stateful layers are
 * errors (docs/frontend.md: a plan batch is a pure function of its inputs,
 * with no state carried to the next batch of predict).  A Keras mask (frontend/mask.c) is a
 * second scan sequence, f32 [T, B, 1]: see build_body.
 */
#include <json-c/json.h>
#include <stdio.h>
#include <string.h>

#include "common/io.h"
#include "frontend/frontend.h"

typedef struct rnn_cfg {
  int gates;               /* 4 LSTM, 3 GRU, 1 SimpleRNN */
  bool lstm, gru, bias, seq, state, back, reset_after;
  bool zero_out;           /* zero_output_for_mask: masked steps output zeros */
  int64_t units;
  const char *act, *ract;
} rnn_cfg;

static kdc_status read_cfg(const kdc_keras_layer *l, rnn_cfg *r) {
  memset(r, 0, sizeof *r);
  r->lstm = !strcmp(l->class_name, "LSTM");
  r->gru = !strcmp(l->class_name, "GRU");
  r->gates = r->lstm ? 4 : r->gru ? 3 : 1;
  bool stateful;
  KDC_RETURN_IF_ERROR(kdc_fe_cfg_int(l, "units", INT64_MIN, &r->units));
  KDC_RETURN_IF_ERROR(kdc_fe_cfg_bool(l, "use_bias", true, &r->bias));
  KDC_RETURN_IF_ERROR(kdc_fe_cfg_bool(l, "return_sequences", false, &r->seq));
  KDC_RETURN_IF_ERROR(kdc_fe_cfg_bool(l, "return_state", false, &r->state));
  KDC_RETURN_IF_ERROR(kdc_fe_cfg_bool(l, "go_backwards", false, &r->back));
  KDC_RETURN_IF_ERROR(kdc_fe_cfg_bool(l, "stateful", false, &stateful));
  KDC_RETURN_IF_ERROR(kdc_fe_cfg_bool(l, "zero_output_for_mask", false, &r->zero_out));
  /* Bidirectional forces zero_output_for_mask = return_sequences on both */
  if (l->wrapper) r->zero_out = r->seq;
  r->reset_after = true;
  if (r->gru) KDC_RETURN_IF_ERROR(kdc_fe_cfg_bool(l, "reset_after", true, &r->reset_after));
  if (stateful)
    return kdc_fe_layer_err(l, KDC_UNSUPPORTED, "config.stateful=true: stateful recurrent "
                            "layers are not supported (Keras starts each batch from the last "
                            "batch's final states; kdc plans start every batch from zeros or "
                            "the given initial states)");
  r->act = "tanh";
  r->ract = "sigmoid";
  if (kdc_fe_get(l->config, "activation"))
    KDC_RETURN_IF_ERROR(kdc_fe_cfg_activation(l, "activation", &r->act));
  if (r->gates > 1 && kdc_fe_get(l->config, "recurrent_activation"))
    KDC_RETURN_IF_ERROR(kdc_fe_cfg_activation(l, "recurrent_activation", &r->ract));
  return NULL;
}

/* Gate k of the [B, G, u] value |z|, as [B, u]. */
static kdc_value_id gate(kdc_func *f, kdc_value_id z, int k, int64_t u) {
  const kdc_type *t = kdc_ir_type(f, z);
  if (!t) return KDC_NO_VALUE;
  int64_t B = t->dims[0], st[3] = {0, k, 0}, lim[3] = {B, k + 1, u}, str[3] = {1, 1, 1};
  return kdc_ir_reshape(f, kdc_ir_slice(f, z, st, lim, str), 2, (int64_t[]){B, u});
}

/* A layout that splits the packed dim of a gate-packed weight is taken per
 * gate (file comment): the weight parameter itself is declared as its
 * per-gate form [.., G, u] (the same bytes, row-major), split on u by the
 * axes the layout gave the packed dim, so each device STORES units
 * [k u/n, (k+1) u/n) of every gate, and so do its gradient and optimizer
 * slots (passes/train_step.c copies gate_packed to them).  The parameter is
 * marked gate_packed: codegen passes the mark to the plan, and checkpoints
 * read and write Keras' packed form [.., G*u] (runtime/checkpoint.c). */
kdc_status kdc_fe_rnn_gate_weight(kdc_lower_ctx *c, const kdc_keras_var *v, kdc_value_id p) {
  const kdc_keras_layer *l = v->layer;
  if (p == KDC_NO_VALUE || !l || !c->mesh) return NULL;
  if (strcmp(l->class_name, "LSTM") && strcmp(l->class_name, "GRU") &&
      strcmp(l->class_name, "SimpleRNN"))
    return NULL;
  if (strcmp(v->name, "kernel") && strcmp(v->name, "recurrent_kernel") && strcmp(v->name, "bias"))
    return NULL;
  kdc_func *f = c->f;
  kdc_node *pn = kdc_ir_node(f, p);
  kdc_sharding s = pn->sharding;
  int r = pn->type.rank, last = r - 1;
  if (!s.present || r < 1 || r >= KDC_MAX_RANK || !s.naxes[last]) return NULL;
  rnn_cfg cfg;
  KDC_RETURN_IF_ERROR(read_cfg(l, &cfg));
  int64_t G = cfg.gates, u = cfg.units;
  int64_t k = kdc_mesh_axes_size(c->mesh, s.naxes[last], s.axes[last]);
  if (pn->type.dims[last] != G * u)
    return kdc_fe_layer_err(l, KDC_INTERNAL, "\"%s\": packed dim %lld is not %lld gates of "
                            "%lld units", v->path, (long long)pn->type.dims[last], (long long)G,
                            (long long)u);
  if (u % k)
    return kdc_fe_layer_err(l, KDC_INVALID_INPUT, "the layout splits the gate-packed dim of "
                            "\"%s\" over %lld devices, which kdc takes per gate: its %lld units "
                            "are not divisible by %lld (kdc never pads silently)", v->path,
                            (long long)k, (long long)u, (long long)k);
  uint32_t origin = s.origin;
  const char *rule = origin && origin < c->mod->n_prov && c->mod->prov[origin].text
                         ? c->mod->prov[origin].text : "user";
  kdc_type t = pn->type;
  t.rank = r + 1;
  t.dims[last] = G;
  t.dims[r] = u;
  kdc_sharding vs = s;
  vs.rank = r + 1;
  vs.naxes[last] = 0;
  vs.naxes[r] = s.naxes[last];
  memcpy(vs.axes[r], s.axes[last], s.naxes[last]);
  vs.open_mask = 0;
  pn->type = t;
  pn->sharding = vs;
  pn->attr.param.gate_packed = true;
  kdc_weight *w = kdc_ir_module_find_weight(c->mod, v->path);
  if (w) w->type = t;
  char text[640];
  snprintf(text, sizeof text, "%s, per gate: [.., %lld, %lld] split on units", rule,
           (long long)G, (long long)u);
  pn->sharding.origin = kdc_ir_prov_add_user(c->mod, f, p, text);
  return NULL;
}

/* The per-gate view [.., G, u] of the gate-packed weight |w| [.., G*u] (a
 * reshape), or |w| itself when it is kept per gate (kdc_fe_rnn_gate_weight). */
static void gate_view(kdc_func *f, kdc_value_id *wv, int64_t G, int64_t u) {
  kdc_value_id w = *wv;
  if (w == KDC_NO_VALUE) return;
  const kdc_node *n = kdc_ir_node(f, w);
  if (n->op == KDC_OP_PARAMETER && n->attr.param.gate_packed) return;
  kdc_type t = n->type;
  int r = t.rank;
  t.dims[r - 1] = G;
  t.dims[r] = u;
  *wv = kdc_ir_reshape(f, w, r + 1, t.dims);
}

/* |v| [B, u] as [B, 1, u], to stack values of a y_t. */
static kdc_value_id row(kdc_func *f, kdc_value_id v, int64_t B, int64_t u) {
  return kdc_ir_reshape(f, v, 3, (int64_t[]){B, 1, u});
}

/* y_t: |v[0..n)| ([B, u] each) stacked as [B, n, u], or v[0] alone. */
static kdc_value_id stack(kdc_func *f, int n, const kdc_value_id *v, int64_t B, int64_t u) {
  if (n == 1) return v[0];
  kdc_value_id r[3];
  for (int i = 0; i < n; i++) r[i] = row(f, v[i], B, u);
  return kdc_ir_concat(f, n, r, 1);
}

static kdc_value_id mm(kdc_func *f, kdc_value_id a, kdc_value_id b) {
  return kdc_ir_matmul(f, a, b);
}

static kdc_value_id add(kdc_func *f, kdc_value_id a, kdc_value_id b) {
  return kdc_ir_binary_bcast(f, KDC_OP_ADD, a, b);
}

static kdc_value_id mul(kdc_func *f, kdc_value_id a, kdc_value_id b) {
  return kdc_ir_binary(f, KDC_OP_MUL, a, b);
}

/* h times the recurrent dropout mask of gate k: |rd| [B, n_rec, u] holds
 * |n_rec| masks (none: h itself; one: shared by every gate). */
static kdc_value_id hdrop(kdc_func *f, kdc_value_id h, kdc_value_id rd, int n_rec, int k,
                          int64_t u) {
  if (!n_rec) return h;
  return mul(f, h, gate(f, rd, n_rec == 1 ? 0 : k, u));
}

/* Gates [k0, k1) of h @ U ([B, k1 - k0, u]; U is the per-gate view
 * [u, G, u]) with recurrent dropout: one product when the gates share h (no
 * mask or one mask), else one per gate, h dropped by that gate's mask
 * (Keras' implementation 1: lstm.py, gru.py). */
static kdc_value_id rec(kdc_func *f, kdc_value_id h, kdc_value_id U, kdc_value_id rd, int n_rec,
                        int k0, int k1, int64_t u) {
  const kdc_type *t = kdc_ir_type(f, U);
  if (!t) return KDC_NO_VALUE;
  int64_t rows = t->dims[0], G = t->dims[1], B = kdc_ir_type(f, h)->dims[0];
  if (n_rec <= 1) {
    kdc_value_id Uk = U;
    if (k0 > 0 || k1 < G)
      Uk = kdc_ir_slice(f, U, (int64_t[]){0, k0, 0}, (int64_t[]){rows, k1, u},
                        (int64_t[]){1, 1, 1});
    return mm(f, hdrop(f, h, rd, n_rec, k0, u), Uk);
  }
  kdc_value_id parts[4];
  for (int k = k0; k < k1; k++)
    parts[k - k0] = kdc_ir_reshape(f, mm(f, hdrop(f, h, rd, n_rec, k, u), gate(f, U, k, u)), 3,
                                   (int64_t[]){B, 1, u});
  return kdc_ir_concat(f, k1 - k0, parts, 1);
}

/* A unique function name "<layer>.step", "<layer>.step2", ... */
static const char *body_name(kdc_module *m, const kdc_keras_layer *l) {
  for (int k = 1;; k++) {
    const char *name = k == 1 ? kdc_arena_printf(m->arena, "%s.step", l->name)
                              : kdc_arena_printf(m->arena, "%s.step%d", l->name, k);
    if (!kdc_ir_module_find_func(m, name)) return name;
  }
}

/* Builds the body into c->f (the caller swapped it in); params: carries,
 * x_t [, mask_t] [, rdrop_t], U [, b_rec].  rdrop_t [B, n_rec, u]: the
 * recurrent dropout masks (n_rec of them, 0 without recurrent dropout),
 * the same at every step (Keras draws them once per call).  Results
 * appended to the body.  With a mask
 * (backend.rnn, keras/src/backend/jax/rnn.py): where mask_t is false the
 * carries keep their values and the output is the previous output (the
 * first carry, h) -- or zeros with zero_output_for_mask; with return_state
 * y_t then also carries the kept h (and c) after the output. */
static kdc_status build_body(kdc_lower_ctx *c, const kdc_keras_layer *l, const rnn_cfg *r,
                             int64_t B, const kdc_type *ut, const kdc_type *bt, bool masked,
                             int n_rec) {
  kdc_func *f = c->f;
  int64_t u = r->units, G = r->gates;
  kdc_type ht = kdc_type_make(KDC_DTYPE_F32, 2, (int64_t[]){B, u});
  kdc_type xt = kdc_type_make(KDC_DTYPE_F32, 3, (int64_t[]){B, G, u});
  kdc_value_id h = kdc_ir_parameter(f, KDC_PARAM_INPUT, "h", &ht);
  kdc_value_id cs = r->lstm ? kdc_ir_parameter(f, KDC_PARAM_INPUT, "c", &ht) : KDC_NO_VALUE;
  kdc_value_id x = kdc_ir_parameter(f, KDC_PARAM_INPUT, "x_t", &xt);
  kdc_type mt = kdc_type_make(KDC_DTYPE_F32, 2, (int64_t[]){B, 1});
  kdc_value_id mk = masked ? kdc_ir_parameter(f, KDC_PARAM_INPUT, "mask_t", &mt) : KDC_NO_VALUE;
  kdc_type rt = kdc_type_make(KDC_DTYPE_F32, 3, (int64_t[]){B, n_rec ? n_rec : 1, u});
  kdc_value_id rd = n_rec ? kdc_ir_parameter(f, KDC_PARAM_INPUT, "rdrop_t", &rt) : KDC_NO_VALUE;
  kdc_value_id U = kdc_ir_parameter(f, KDC_PARAM_INPUT, "recurrent_kernel", ut);
  kdc_value_id brec = bt ? kdc_ir_parameter(f, KDC_PARAM_INPUT, "recurrent_bias", bt) : KDC_NO_VALUE;
  kdc_value_id hn = KDC_NO_VALUE, cn = KDC_NO_VALUE;
  if (!r->lstm && !r->gru) {
    KDC_RETURN_IF_ERROR(kdc_fe_activation(c, l, "activation", r->act,
                                          gate(f, add(f, x, rec(f, h, U, rd, n_rec, 0, 1, u)), 0, u), &hn));
  } else if (r->lstm) {
    kdc_value_id z = add(f, x, rec(f, h, U, rd, n_rec, 0, 4, u)), i, fg, g, o, ac;
    KDC_RETURN_IF_ERROR(kdc_fe_activation(c, l, "recurrent_activation", r->ract, gate(f, z, 0, u), &i));
    KDC_RETURN_IF_ERROR(kdc_fe_activation(c, l, "recurrent_activation", r->ract, gate(f, z, 1, u), &fg));
    KDC_RETURN_IF_ERROR(kdc_fe_activation(c, l, "activation", r->act, gate(f, z, 2, u), &g));
    KDC_RETURN_IF_ERROR(kdc_fe_activation(c, l, "recurrent_activation", r->ract, gate(f, z, 3, u), &o));
    cn = add(f, mul(f, fg, cs), mul(f, i, g));
    KDC_RETURN_IF_ERROR(kdc_fe_activation(c, l, "activation", r->act, cn, &ac));
    hn = mul(f, o, ac);
  } else {
    kdc_value_id zg, rg, hh, inner_h;
    if (r->reset_after) {
      kdc_value_id in = rec(f, h, U, rd, n_rec, 0, 3, u);
      if (brec != KDC_NO_VALUE) in = add(f, in, brec);
      KDC_RETURN_IF_ERROR(kdc_fe_activation(c, l, "recurrent_activation", r->ract,
                                            add(f, gate(f, x, 0, u), gate(f, in, 0, u)), &zg));
      KDC_RETURN_IF_ERROR(kdc_fe_activation(c, l, "recurrent_activation", r->ract,
                                            add(f, gate(f, x, 1, u), gate(f, in, 1, u)), &rg));
      inner_h = mul(f, rg, gate(f, in, 2, u));
    } else {
      kdc_value_id in = rec(f, h, U, rd, n_rec, 0, 2, u);
      KDC_RETURN_IF_ERROR(kdc_fe_activation(c, l, "recurrent_activation", r->ract,
                                            add(f, gate(f, x, 0, u), gate(f, in, 0, u)), &zg));
      KDC_RETURN_IF_ERROR(kdc_fe_activation(c, l, "recurrent_activation", r->ract,
                                            add(f, gate(f, x, 1, u), gate(f, in, 1, u)), &rg));
      inner_h = mm(f, mul(f, rg, hdrop(f, h, rd, n_rec, 2, u)), gate(f, U, 2, u));
    }
    KDC_RETURN_IF_ERROR(kdc_fe_activation(c, l, "activation", r->act,
                                          add(f, gate(f, x, 2, u), inner_h), &hh));
    kdc_value_id one_minus = kdc_ir_binary(f, KDC_OP_SUB, kdc_ir_splat(f, KDC_DTYPE_F32, 2,
                                                                         ht.dims, 1.0), zg);
    hn = add(f, mul(f, zg, h), mul(f, one_minus, hh));
  }
  if (masked) {
    kdc_value_id p = kdc_ir_compare(f, KDC_CMP_NE, kdc_ir_broadcast(f, mk, 2, ht.dims,
                                                                    (int64_t[]){0, 1}),
                                    kdc_ir_splat(f, KDC_DTYPE_F32, 2, ht.dims, 0));
    kdc_value_id prev = r->zero_out ? kdc_ir_splat(f, KDC_DTYPE_F32, 2, ht.dims, 0) : h;
    kdc_value_id yo = kdc_ir_select(f, p, hn, prev);
    hn = kdc_ir_select(f, p, hn, h);
    if (r->lstm) cn = kdc_ir_select(f, p, cn, cs);
    kdc_ir_add_result(f, hn, "h");
    if (r->lstm) kdc_ir_add_result(f, cn, "c");
    kdc_value_id y = yo;
    if (r->state)
      y = stack(f, r->lstm ? 3 : 2, (kdc_value_id[]){yo, hn, cn}, B, u);
    kdc_ir_add_result(f, y, "y");
    return NULL;
  }
  kdc_ir_add_result(f, hn, "h");
  if (r->lstm) kdc_ir_add_result(f, cn, "c");
  kdc_value_id y = hn;
  if (r->lstm && r->state) y = stack(f, 2, (kdc_value_id[]){hn, cn}, B, u);
  kdc_ir_add_result(f, y, "y");
  return NULL;
}

/* Steps [t0, t1) of entry |k| of the scan's stacked y |ys| ([T, B, u] or
 * [T, B, K, u]), as [t1 - t0, B, u]. */
static kdc_value_id pick(kdc_func *f, kdc_value_id ys, int64_t t0, int64_t t1, int k) {
  kdc_type t = *kdc_ir_type(f, ys);
  int64_t B = t.dims[1], u = t.dims[t.rank - 1];
  if (t.rank == 3) {
    if (t0 == 0 && t1 == t.dims[0]) return ys;
    return kdc_ir_slice(f, ys, (int64_t[]){t0, 0, 0}, (int64_t[]){t1, B, u}, (int64_t[]){1, 1, 1});
  }
  kdc_value_id s = kdc_ir_slice(f, ys, (int64_t[]){t0, 0, k, 0}, (int64_t[]){t1, B, k + 1, u},
                                (int64_t[]){1, 1, 1, 1});
  return kdc_ir_reshape(f, s, 3, (int64_t[]){t1 - t0, B, u});
}

/* dropout / recurrent_dropout (Keras 3 DropoutRNNCell): identities at
 * inference.  In train_forward each rate in (0, 1) draws its masks once per
 * call: one shared by every gate, or one per gate with implementation 1,
 * which LSTM and GRU switch to whenever recurrent_dropout != 0 (lstm.py,
 * gru.py: dropout_mask_count); SimpleRNN has one of each. */
static kdc_status read_dropout(const kdc_lower_ctx *c, const kdc_keras_layer *l, const rnn_cfg *r,
                               double *drop, double *rdrop, int *n_in, int *n_rec) {
  KDC_RETURN_IF_ERROR(kdc_fe_cfg_double(l, "dropout", 0, drop));
  KDC_RETURN_IF_ERROR(kdc_fe_cfg_double(l, "recurrent_dropout", 0, rdrop));
  int64_t impl = 2;
  if (r->gates > 1) KDC_RETURN_IF_ERROR(kdc_fe_cfg_int(l, "implementation", 2, &impl));
  /* Keras clamps both rates to [0, 1] */
  *drop = *drop < 0 ? 0 : *drop > 1 ? 1 : *drop;
  *rdrop = *rdrop < 0 ? 0 : *rdrop > 1 ? 1 : *rdrop;
  if (*rdrop != 0) impl = 1;
  if (!c->training) return NULL;
  if (*drop >= 1 || *rdrop >= 1)
    return kdc_fe_layer_err(l, KDC_UNSUPPORTED, "config.%s = 1: a recurrent layer that drops "
                            "every %s is not supported in training", *drop >= 1 ? "dropout" :
                            "recurrent_dropout", *drop >= 1 ? "input" : "state");
  int per_gate = impl == 1 ? r->gates : 1;
  *n_in = *drop > 0 ? per_gate : 0;
  *n_rec = *rdrop > 0 ? per_gate : 0;
  return NULL;
}

/* |n| dropout masks [n, B, D] of layer |l|: 1 / (1 - rate) where u < 1 -
 * rate, else 0 (keras.random.dropout on ones), u from kdc's counter-based
 * stream keyed by the layer path + "/" + |which| and the step, so the masks
 * are the same on every mesh (lower_dropout.c, docs/training.md). */
static kdc_value_id drop_masks(kdc_lower_ctx *c, const kdc_keras_layer *l, const char *which,
                               double rate, int n, int64_t B, int64_t D) {
  kdc_func *f = c->f;
  char key[512];
  int len = snprintf(key, sizeof key, "%s/%s", l->path, which);
  uint64_t seed = kdc_hash64(key, (size_t)len < sizeof key ? (size_t)len : sizeof key - 1,
                             c->dropout_seed);
  int64_t dims[3] = {n, B, D};
  kdc_value_id u = kdc_ir_rng_uniform(f, c->iteration, (int64_t)seed, 3, dims);
  kdc_value_id keep = kdc_ir_compare(f, KDC_CMP_LT, u, kdc_ir_splat(f, KDC_DTYPE_F32, 3, dims,
                                                                     1.0 - rate));
  return kdc_ir_select(f, keep, kdc_ir_splat(f, KDC_DTYPE_F32, 3, dims, 1.0 / (1.0 - rate)),
                       kdc_ir_splat(f, KDC_DTYPE_F32, 3, dims, 0.0));
}

kdc_status kdc_fe_lower_rnn_layer(kdc_lower_ctx *c, const kdc_keras_layer *l, kdc_value_id x,
                                  int n_states, const kdc_value_id *states, kdc_value_id *out) {
  rnn_cfg r;
  KDC_RETURN_IF_ERROR(read_cfg(l, &r));
  double drop, rdrop;
  int n_in = 0, n_rec = 0; /* dropout masks per call (train_forward only) */
  KDC_RETURN_IF_ERROR(read_dropout(c, l, &r, &drop, &rdrop, &n_in, &n_rec));
  kdc_func *f = c->f;
  const char *cell = r.lstm ? "lstm_cell" : r.gru ? "gru_cell" : "simple_rnn_cell";
  char kn[64], un[64], bn[64];
  snprintf(kn, sizeof kn, "%s/kernel", cell);
  snprintf(un, sizeof un, "%s/recurrent_kernel", cell);
  snprintf(bn, sizeof bn, "%s/bias", cell);
  kdc_value_id W = kdc_fe_weight(c, l, kn), U = kdc_fe_weight(c, l, un);
  kdc_value_id b = r.bias ? kdc_fe_weight(c, l, bn) : KDC_NO_VALUE;
  if (x == KDC_NO_VALUE || W == KDC_NO_VALUE || U == KDC_NO_VALUE) return NULL;
  for (int i = 0; i < n_states; i++)
    if (states[i] == KDC_NO_VALUE) return NULL;
  gate_view(f, &W, r.gates, r.units);
  gate_view(f, &U, r.gates, r.units);
  gate_view(f, &b, r.gates, r.units);
  KDC_RETURN_IF_ERROR(kdc_ir_take_error(f));
  const kdc_type *xt = kdc_ir_type(f, x);
  if (xt->rank != 3 || xt->dtype != KDC_DTYPE_F32)
    return kdc_fe_layer_err(l, KDC_INVALID_INPUT, "expected a float (batch, time, features) input");
  int64_t B = xt->dims[0], T = xt->dims[1], F = xt->dims[2], u = r.units, G = r.gates;
  if (T < 1)
    return kdc_fe_layer_err(l, KDC_UNSUPPORTED, "a sequence of %lld steps: recurrent layers "
                            "need at least one step", (long long)T);
  /* the Keras mask, time-major f32 [T, B, 1], reversed with the input */
  kdc_value_id ms = kdc_fe_input_mask(c, 0);
  if (ms != KDC_NO_VALUE) {
    ms = kdc_fe_mask_bool(f, ms);
    const kdc_type *mt = kdc_ir_type(f, ms);
    if (mt->rank != 2 || mt->dims[0] != B || mt->dims[1] != T)
      return kdc_fe_layer_err(l, KDC_INVALID_INPUT, "the mask does not match the input's "
                              "(batch, time) dims");
    ms = kdc_ir_convert(f, ms, KDC_DTYPE_F32);
    if (r.back) ms = kdc_ir_reverse(f, ms, 1, (int64_t[]){1});
    ms = kdc_ir_reshape(f, kdc_ir_transpose(f, ms, (int64_t[]){1, 0}), 3, (int64_t[]){T, B, 1});
  }
  bool masked = ms != KDC_NO_VALUE;
  /* the input projection of every step, time-major; with input dropout
   * x is dropped by a [B, F] mask (the same at every step) per gate group */
  if (r.back) x = kdc_ir_reverse(f, x, 1, (int64_t[]){1});
  kdc_value_id xs;
  if (!n_in) {
    xs = kdc_ir_matmul(f, x, W);  /* [B, T, G, u] */
  } else {
    int64_t xd[3] = {B, T, F};
    kdc_value_id m = drop_masks(c, l, "dropout", drop, n_in, B, F), parts[4];
    for (int k = 0; k < n_in; k++) {
      kdc_value_id mk = kdc_ir_reshape(f, kdc_ir_slice(f, m, (int64_t[]){k, 0, 0},
                                                       (int64_t[]){k + 1, B, F},
                                                       (int64_t[]){1, 1, 1}),
                                       2, (int64_t[]){B, F});
      kdc_value_id xk = mul(f, x, kdc_ir_broadcast(f, mk, 3, xd, (int64_t[]){0, 2}));
      parts[k] = n_in == 1 ? kdc_ir_matmul(f, xk, W)
                           : kdc_ir_reshape(f, kdc_ir_matmul(f, xk, gate(f, W, k, u)), 4,
                                            (int64_t[]){B, T, 1, u});
    }
    xs = n_in == 1 ? parts[0] : kdc_ir_concat(f, n_in, parts, 2);
  }
  kdc_value_id brec = KDC_NO_VALUE;
  if (b != KDC_NO_VALUE) {  /* [G, u], GRU reset_after [2, G, u] */
    kdc_value_id bin = b;
    if (r.gru && r.reset_after) {
      int64_t s0[3] = {0, 0, 0}, l0[3] = {1, 3, u}, s1[3] = {1, 0, 0}, l1[3] = {2, 3, u};
      int64_t one[3] = {1, 1, 1};
      bin = kdc_ir_reshape(f, kdc_ir_slice(f, b, s0, l0, one), 2, (int64_t[]){3, u});
      brec = kdc_ir_reshape(f, kdc_ir_slice(f, b, s1, l1, one), 2, (int64_t[]){3, u});
    }
    xs = add(f, xs, bin);
  }
  xs = kdc_ir_transpose(f, xs, (int64_t[]){1, 0, 2, 3});  /* [T, B, G, u] */
  KDC_RETURN_IF_ERROR(kdc_ir_take_error(f));
  /* the body */
  kdc_func *body = kdc_ir_func_create(c->mod, body_name(c->mod, l));
  kdc_ir_set_origin(body, f->cur_origin);
  c->f = body;
  kdc_type ut = *kdc_ir_type(f, U), bt = brec != KDC_NO_VALUE ? *kdc_ir_type(f, brec) : ut;
  kdc_status st = build_body(c, l, &r, B, &ut, brec != KDC_NO_VALUE ? &bt : NULL, masked, n_rec);
  c->f = f;
  if (st) return st; /* a located error of the layer's config (an activation kdc lacks) */
  st = kdc_ir_take_error(body);
  if (st) {
    kdc_status e = kdc_fe_layer_err(l, KDC_INTERNAL, "recurrent step: %s", kdc_status_message(st));
    kdc_status_free(st);
    return e;
  }
  /* the loop, from the given initial states or zeros */
  int n = 0, nc = r.lstm ? 2 : 1;
  kdc_value_id ops[8];
  for (int i = 0; i < nc; i++) {
    if (!n_states) {
      ops[n++] = kdc_ir_splat(f, KDC_DTYPE_F32, 2, (int64_t[]){B, u}, 0.0);
      continue;
    }
    const kdc_type *s0 = kdc_ir_type(f, states[i]);
    if (s0->dtype != KDC_DTYPE_F32 || s0->rank != 2 || s0->dims[0] != B || s0->dims[1] != u)
      return kdc_fe_layer_err(l, KDC_INVALID_INPUT, "initial state %d: expected a float "
                              "(batch %lld, units %lld) tensor", i, (long long)B, (long long)u);
    ops[n++] = states[i];
  }
  ops[n++] = xs;
  if (masked) ops[n++] = ms;
  if (n_rec) {
    /* the recurrent masks [n_rec, B, u] as rows [B, n_rec, u], one per step */
    kdc_value_id m = drop_masks(c, l, "recurrent_dropout", rdrop, n_rec, B, u);
    m = kdc_ir_transpose(f, m, (int64_t[]){1, 0, 2});
    ops[n++] = kdc_ir_broadcast(f, m, 4, (int64_t[]){T, B, n_rec, u}, (int64_t[]){1, 2, 3});
  }
  ops[n++] = U;
  if (brec != KDC_NO_VALUE) ops[n++] = brec;
  int n_xs = 1 + masked + (n_rec > 0);
  kdc_value_id ys = kdc_ir_scan(f, body, T, nc, n_xs, n, ops); /* [T, B(, K), u] */
  KDC_RETURN_IF_ERROR(kdc_ir_take_error(f));
  int k0 = masked && r.state ? 1 : 0; /* entry of the kept h state in y */
  kdc_value_id last = pick(f, ys, T - 1, T, 0);
  if (r.seq) out[0] = kdc_ir_transpose(f, pick(f, ys, 0, T, 0), (int64_t[]){1, 0, 2});
  else out[0] = kdc_ir_reshape(f, last, 2, (int64_t[]){B, u});
  if (r.state) {
    out[1] = kdc_ir_reshape(f, k0 ? pick(f, ys, T - 1, T, k0) : last, 2, (int64_t[]){B, u});
    if (r.lstm) out[2] = kdc_ir_reshape(f, pick(f, ys, T - 1, T, k0 + 1), 2, (int64_t[]){B, u});
  }
  (void)G;
  return NULL;
}

kdc_status kdc_fe_lower_rnn(struct kdc_lower_ctx *c, const kdc_keras_layer *l,
                            const kdc_keras_node *n, const kdc_value_id *in,
                            const kdc_value_id *kw, kdc_value_id *out) {
  int idx[16];
  int ns = kdc_fe_rnn_state_inputs(n, idx, 16);
  kdc_value_id st[16];
  for (int i = 0; i < ns; i++) st[i] = idx[i] < n->n_in ? in[idx[i]] : kw[idx[i] - n->n_in];
  return kdc_fe_lower_rnn_layer(c, l, in[0], ns, st, out);
}
