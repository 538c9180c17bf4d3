'use strict';
// tfjs layers for Keras 3 classes that tfjs 4.22 lacks: MultiHeadAttention,
// EinsumDense, GroupNormalization, UnitNormalization, Normalization, GRU
// with reset_after=true (GRUResetAfter), and the comparison ops Keras 3
// records as graph nodes (NotEqual, ...).
// Each one ports the Keras 3 call() formula (keras/src/layers/...; see
// README.md) to plain JavaScript in float64, with explicit loops, and
// rounds the result once to float32. They work in predict() (eager) only,
// which is all gen.js needs. getConfig() writes Keras' snake_case keys, so
// model_tfjs.json carries the same configs as model.json. Weights are
// created with their Keras 3 names ('query/kernel', 'gamma', 'mean', ...),
// so the TF.js manifest names are the Keras 3 variable paths.

const tf = require('@tensorflow/tfjs');

const prod = a => a.reduce((p, q) => p * q, 1);
const f64 = t => Float64Array.from(t.dataSync());
const out32 = (data, shape) => tf.tensor(Float32Array.from(data), shape, 'float32');
function strides(shape) {
  const s = new Array(shape.length); let k = 1;
  for (let i = shape.length - 1; i >= 0; i--) { s[i] = k; k *= shape[i]; }
  return s;
}
const one = inputs => (Array.isArray(inputs) ? inputs[0] : inputs);

class KBase extends tf.layers.Layer {
  constructor(args, keys) {
    super(args);
    this.cfg = {};
    // snake_case from gen.js, camelCase when tfjs deserializes a topology
    const camel = k => k.replace(/_([a-z])/g, (m, c) => c.toUpperCase());
    for (const [k, d] of Object.entries(keys)) {
      this.cfg[k] = args[k] !== undefined ? args[k] : args[camel(k)] !== undefined ? args[camel(k)] : d;
    }
  }
  getConfig() { return Object.assign({}, this.cfg, super.getConfig()); }
  w(name) { return f64(this.weights.find(v => v.originalName === `${this.name}/${name}`).read()); }
}

// ---- EinsumDense: ops.einsum(equation, x, kernel) + bias, activation.
// Only the equations gen.js uses: "abc,cd->abd", "ab,bcd->acd".
class KEinsumDense extends KBase {
  constructor(args) {
    super(args, { equation: null, output_shape: null, activation: null, bias_axes: null });
  }
  build(inputShape) {
    const eq = this.cfg.equation;
    if (eq === 'abc,cd->abd') {
      this.kshape = [inputShape[2], this.cfg.output_shape[1]];
      this.bshape = [this.cfg.output_shape[1]];
    } else if (eq === 'ab,bcd->acd') {
      this.kshape = [inputShape[1], ...this.cfg.output_shape];
      this.bshape = this.cfg.output_shape.slice();
    } else throw new Error(`KEinsumDense: equation ${eq}`);
    this.addWeight('kernel', this.kshape, 'float32', tf.initializers.zeros());
    if (this.cfg.bias_axes) this.addWeight('bias', this.bshape, 'float32', tf.initializers.zeros());
    this.built = true;
  }
  computeOutputShape(s) { return [s[0], ...this.cfg.output_shape]; }
  call(inputs) {
    const x = one(inputs), xs = x.shape, xd = f64(x), K = this.w('kernel');
    const b = this.cfg.bias_axes ? this.w('bias') : null;
    const o = new Float64Array(xs[0] * prod(this.cfg.output_shape));
    if (this.cfg.equation === 'abc,cd->abd') {
      const [B, S, C] = xs, D = this.kshape[1];
      for (let i = 0; i < B * S; i++) for (let d = 0; d < D; d++) {
        let s = 0;
        for (let c = 0; c < C; c++) s += xd[i * C + c] * K[c * D + d];
        o[i * D + d] = s + (b ? b[d] : 0);
      }
    } else {
      const [B, Bd] = xs, CD = prod(this.cfg.output_shape);
      for (let a = 0; a < B; a++) for (let cd = 0; cd < CD; cd++) {
        let s = 0;
        for (let k = 0; k < Bd; k++) s += xd[a * Bd + k] * K[k * CD + cd];
        o[a * CD + cd] = s + (b ? b[cd] : 0);
      }
    }
    if (this.cfg.activation && this.cfg.activation !== 'linear') throw new Error('activation');
    return out32(o, [xs[0], ...this.cfg.output_shape]);
  }
}
KEinsumDense.className = 'EinsumDense';

// ---- moments over groups: (x - mean) * rsqrt(var + eps) * gamma + beta
class KGroupNormalization extends KBase {
  constructor(args) {
    super(args, { groups: 32, axis: -1, epsilon: 1e-3, center: true, scale: true });
  }
  build(s) {
    const C = s[s.length - 1];
    this.addWeight('gamma', [C], 'float32', tf.initializers.ones());
    this.addWeight('beta', [C], 'float32', tf.initializers.zeros());
    this.built = true;
  }
  computeOutputShape(s) { return s; }
  call(inputs) {
    const x = one(inputs), xs = x.shape, xd = f64(x), g = this.w('gamma'), be = this.w('beta');
    if (this.cfg.axis !== -1) throw new Error('axis');
    const C = xs[xs.length - 1], G = this.cfg.groups, cg = C / G, B = xs[0];
    const P = prod(xs.slice(1, -1)), o = new Float64Array(xd.length);
    for (let bi = 0; bi < B; bi++) for (let gi = 0; gi < G; gi++) {
      const idx = [];
      for (let p = 0; p < P; p++) for (let c = gi * cg; c < (gi + 1) * cg; c++) idx.push((bi * P + p) * C + c);
      const mean = idx.reduce((s, i) => s + xd[i], 0) / idx.length;
      const vr = idx.reduce((s, i) => s + (xd[i] - mean) ** 2, 0) / idx.length;
      for (const i of idx) o[i] = (xd[i] - mean) / Math.sqrt(vr + this.cfg.epsilon) * g[i % C] + be[i % C];
    }
    return out32(o, xs);
  }
}
KGroupNormalization.className = 'GroupNormalization';

// ---- x / max(||x||, 1e-12) over the last axis
class KUnitNormalization extends KBase {
  constructor(args) { super(args, { axis: -1 }); }
  computeOutputShape(s) { return s; }
  call(inputs) {
    const x = one(inputs), xs = x.shape, xd = f64(x), C = xs[xs.length - 1], o = new Float64Array(xd.length);
    for (let r = 0; r < xd.length / C; r++) {
      let s = 0;
      for (let c = 0; c < C; c++) s += xd[r * C + c] ** 2;
      const inv = 1 / Math.sqrt(Math.max(s, 1e-24));
      for (let c = 0; c < C; c++) o[r * C + c] = xd[r * C + c] * inv;
    }
    return out32(o, xs);
  }
}
KUnitNormalization.className = 'UnitNormalization';

// ---- (x - mean) / max(sqrt(variance), 1e-7) over the last axis; adapted
// state in the variables mean, variance, count (keras preprocessing).
class KNormalization extends KBase {
  constructor(args) { super(args, { axis: -1, invert: false, mean: null, variance: null }); }
  build(s) {
    const C = s[s.length - 1];
    this.addWeight('mean', [C], 'float32', tf.initializers.zeros(), undefined, false);
    this.addWeight('variance', [C], 'float32', tf.initializers.ones(), undefined, false);
    this.addWeight('count', [], 'int32', tf.initializers.zeros(), undefined, false);
    this.built = true;
  }
  computeOutputShape(s) { return s; }
  call(inputs) {
    const x = one(inputs), xs = x.shape, xd = f64(x), m = this.w('mean'), v = this.w('variance');
    const C = xs[xs.length - 1], o = new Float64Array(xd.length);
    for (let i = 0; i < xd.length; i++) o[i] = (xd[i] - m[i % C]) / Math.max(Math.sqrt(v[i % C]), 1e-7);
    return out32(o, xs);
  }
}
KNormalization.className = 'Normalization';

// ---- MultiHeadAttention, self or cross attention over axis 1 of rank-3
// inputs, no masks: per head h,
//   q = (query . Wq[:,h,:] + bq[h]) / sqrt(key_dim)  (Keras scales the query)
//   k = key . Wk[:,h,:] + bk[h];  v = value . Wv[:,h,:] + bv[h]
//   a = softmax_s(q . k^T);  o_h = a . v
//   out = sum_h o_h . Wo[h] + bo
class KMultiHeadAttention extends KBase {
  constructor(args) {
    super(args, { num_heads: 1, key_dim: 1, value_dim: null, dropout: 0.0, use_bias: true,
      output_shape: null, attention_axes: null });
  }
  build(shapes) {
    // one input: self-attention whose value is the query tensor itself
    // (keras2_topology.js does not repeat a tensor a node already reads)
    if (!Array.isArray(shapes[0])) shapes = [shapes, shapes];
    const [qs, vs] = shapes, H = this.cfg.num_heads, kd = this.cfg.key_dim;
    const vd = this.cfg.value_dim || kd, D = qs[2], Dv = vs[2], Do = this.cfg.output_shape || D;
    const z = tf.initializers.zeros();
    for (const [n, din, d] of [['query', D, kd], ['key', Dv, kd], ['value', Dv, vd]]) {
      this.addWeight(`${n}/kernel`, [din, H, d], 'float32', z);
      this.addWeight(`${n}/bias`, [H, d], 'float32', z);
    }
    this.addWeight('attention_output/kernel', [H, vd, Do], 'float32', z);
    this.addWeight('attention_output/bias', [Do], 'float32', z);
    this.built = true;
  }
  computeOutputShape(shapes) {
    const q = Array.isArray(shapes[0]) ? shapes[0] : shapes;
    return [q[0], q[1], this.cfg.output_shape || q[2]];
  }
  call(inputs) {
    if (!Array.isArray(inputs)) inputs = [inputs];
    const qt = inputs[0], vt = inputs[1] || qt, kt = inputs[2] || vt;
    const H = this.cfg.num_heads, kd = this.cfg.key_dim, vd = this.cfg.value_dim || kd;
    const [B, T, D] = qt.shape, S = vt.shape[1], Dv = vt.shape[2];
    const Do = this.cfg.output_shape || D;
    const q = f64(qt), k = f64(kt), v = f64(vt);
    const Wq = this.w('query/kernel'), bq = this.w('query/bias'), Wk = this.w('key/kernel');
    const bk = this.w('key/bias'), Wv = this.w('value/kernel'), bv = this.w('value/bias');
    const Wo = this.w('attention_output/kernel'), bo = this.w('attention_output/bias');
    const proj = (x, L, Din, W, b, d) => {  // (B, L, H, d)
      const r = new Float64Array(B * L * H * d);
      for (let i = 0; i < B * L; i++) for (let h = 0; h < H; h++) for (let e = 0; e < d; e++) {
        let s = b[h * d + e];
        for (let c = 0; c < Din; c++) s += x[i * Din + c] * W[(c * H + h) * d + e];
        r[(i * H + h) * d + e] = s;
      }
      return r;
    };
    const scale = Math.fround(1 / Math.sqrt(kd));
    const Q = proj(q, T, D, Wq, bq, kd).map(e => e * scale), K = proj(k, S, Dv, Wk, bk, kd);
    const V = proj(v, S, Dv, Wv, bv, vd);
    const o = new Float64Array(B * T * Do);
    for (let bi = 0; bi < B; bi++) {
      const heads = new Float64Array(T * H * vd);
      for (let h = 0; h < H; h++) for (let t = 0; t < T; t++) {
        const sc = new Float64Array(S);
        let m = -Infinity;
        for (let s = 0; s < S; s++) {
          let d = 0;
          for (let e = 0; e < kd; e++) d += Q[((bi * T + t) * H + h) * kd + e] * K[((bi * S + s) * H + h) * kd + e];
          sc[s] = d; m = Math.max(m, d);
        }
        let z = 0;
        for (let s = 0; s < S; s++) { sc[s] = Math.exp(sc[s] - m); z += sc[s]; }
        for (let e = 0; e < vd; e++) {
          let acc = 0;
          for (let s = 0; s < S; s++) acc += sc[s] / z * V[((bi * S + s) * H + h) * vd + e];
          heads[(t * H + h) * vd + e] = acc;
        }
      }
      for (let t = 0; t < T; t++) for (let j = 0; j < Do; j++) {
        let s = bo[j];
        for (let h = 0; h < H; h++) for (let e = 0; e < vd; e++) s += heads[(t * H + h) * vd + e] * Wo[(h * vd + e) * Do + j];
        o[(bi * T + t) * Do + j] = s;
      }
    }
    return out32(o, [B, T, Do]);
  }
}
KMultiHeadAttention.className = 'MultiHeadAttention';

// ---- GRU with reset_after=true (Keras 3's default; tfjs' GRUCell refuses
// it). Keras 3 rnn/gru.py, per step with packed gates (z, r, h):
//   xs = x W + b[0];  hs = h U + b[1]
//   z = ract(xs_z + hs_z);  r = ract(xs_r + hs_r)
//   hh = act(xs_h + r * hs_h);  h' = z h + (1 - z) hh
// Weights kernel (in, 3u), recurrent_kernel (u, 3u), bias (2, 3u).
// return_sequences and go_backwards (outputs in processing order); no
// masks, states or dropout at inference. keras2_topology.js renames a GRU
// with reset_after=true to this class (option resetAfterGRU).
const ACTS = {
  tanh: Math.tanh, linear: v => v, relu: v => Math.max(v, 0),
  sigmoid: v => 1 / (1 + Math.exp(-v)),
  hard_sigmoid: v => Math.min(1, Math.max(0, 0.2 * v + 0.5)),  // tf.keras 2 / tfjs meaning
};
class KGRUResetAfter extends KBase {
  constructor(args) {
    super(args, { units: 1, activation: 'tanh', recurrent_activation: 'sigmoid', use_bias: true,
      return_sequences: false, return_state: false, go_backwards: false });
    for (const k of ['activation', 'recurrent_activation']) {
      const a = this.cfg[k].replace(/[A-Z]/g, c => '_' + c.toLowerCase());
      if (!ACTS[a]) throw new Error(`GRUResetAfter: ${k} ${this.cfg[k]}`);
      this.cfg[k] = a;
    }
    if (this.cfg.return_state) throw new Error('GRUResetAfter: return_state');
  }
  build(s) {
    const u = this.cfg.units, z = tf.initializers.zeros();
    this.addWeight('kernel', [s[s.length - 1], 3 * u], 'float32', z);
    this.addWeight('recurrent_kernel', [u, 3 * u], 'float32', z);
    if (this.cfg.use_bias) this.addWeight('bias', [2, 3 * u], 'float32', z);
    this.built = true;
  }
  computeOutputShape(s) {
    return this.cfg.return_sequences ? [s[0], s[1], this.cfg.units] : [s[0], this.cfg.units];
  }
  call(inputs) {
    const x = one(inputs), [B, T, D] = x.shape, xd = f64(x), u = this.cfg.units, G = 3 * u;
    const W = this.w('kernel'), U = this.w('recurrent_kernel');
    const bias = this.cfg.use_bias ? this.w('bias') : new Float64Array(2 * G);
    const act = ACTS[this.cfg.activation], ract = ACTS[this.cfg.recurrent_activation];
    const seq = this.cfg.return_sequences;
    const o = new Float64Array(seq ? B * T * u : B * u);
    for (let b = 0; b < B; b++) {
      let h = new Float64Array(u);
      for (let s = 0; s < T; s++) {
        const t = this.cfg.go_backwards ? T - 1 - s : s;
        const xs = new Float64Array(G), hs = new Float64Array(G);
        for (let g = 0; g < G; g++) {
          let a = bias[g], c = bias[G + g];
          for (let d = 0; d < D; d++) a += xd[(b * T + t) * D + d] * W[d * G + g];
          for (let k = 0; k < u; k++) c += h[k] * U[k * G + g];
          xs[g] = a; hs[g] = c;
        }
        const hn = new Float64Array(u);
        for (let k = 0; k < u; k++) {
          const zg = ract(xs[k] + hs[k]), rg = ract(xs[u + k] + hs[u + k]);
          hn[k] = zg * h[k] + (1 - zg) * act(xs[2 * u + k] + rg * hs[2 * u + k]);
        }
        h = hn;
        if (seq) o.set(h, (b * T + s) * u);
      }
      if (!seq) o.set(h, b * u);
    }
    return out32(o, seq ? [B, T, u] : [B, u]);
  }
}
KGRUResetAfter.className = 'GRUResetAfter';

// ---- Keras 3 comparison ops recorded as graph nodes (module
// keras.src.ops.numpy: Equal, NotEqual, Less, ...; keras2_topology.js
// passes their number operand as kwargs.op_args[1]): x op y, bool results
// as 0/1 float32.
const CMP = { Equal: 'equal', NotEqual: 'notEqual', Less: 'less', LessEqual: 'lessEqual',
  Greater: 'greater', GreaterEqual: 'greaterEqual' };
const cmpLayers = Object.entries(CMP).map(([cls, fn]) => {
  const C = class extends tf.layers.Layer {
    computeOutputShape(s) { return Array.isArray(s[0]) ? s[0] : s; }
    call(inputs, kwargs) {
      return tf.tidy(() => {
        const xs = Array.isArray(inputs) ? inputs : [inputs];
        const y = xs.length > 1 ? xs[1] : tf.scalar(kwargs.op_args[1]);
        return tf.cast(tf[fn](xs[0], y), 'float32');
      });
    }
  };
  C.className = cls;
  return C;
});

for (const c of [KEinsumDense, KGroupNormalization, KUnitNormalization, KNormalization, KMultiHeadAttention,
  KGRUResetAfter, ...cmpLayers]) {
  tf.serialization.registerClass(c);
}

module.exports = { KEinsumDense, KGroupNormalization, KUnitNormalization, KNormalization,
  KMultiHeadAttention, KGRUResetAfter, strides };
