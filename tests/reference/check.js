'use strict';
// Independent checks of the generated reference data (node check.js):
//  1. A from-scratch Keras 3 interpreter in plain JS (float64, no tfjs):
//     reads model.json + weights.safetensors + input*.npy, evaluates the
//     graph with the Keras 3 formulas, compares with expected*.npy.
//  2. TF.js round trip: tf.loadLayersModel(model_tfjs.json + weights.bin),
//     predict, compare with expected*.npy (expected_tfjs.npy where present).
//  3. weights.bin (manifest order) == weights.safetensors, name by name.
// Exits non-zero on any mismatch.

const fs = require('fs');
const path = require('path');
const L = require('./lib');

const EX = path.resolve(__dirname, '..', '..', 'examples');
const MODELS = ['mnist_mlp', 'mlp_sequential', 'activations', 'merge_reshape', 'transformer_block',
  'norm_zoo'];
const ATOL = 1e-5, RTOL = 1e-5;
let failures = 0;

function compare(what, got, exp) {
  if (JSON.stringify(got.shape) !== JSON.stringify(exp.shape)) {
    console.log(`FAIL ${what}: shape ${JSON.stringify(got.shape)} vs ${JSON.stringify(exp.shape)}`);
    failures++; return;
  }
  let maxAbs = 0, bad = 0;
  for (let i = 0; i < exp.data.length; i++) {
    const d = Math.abs(got.data[i] - exp.data[i]);
    maxAbs = Math.max(maxAbs, d);
    if (!(d <= ATOL + RTOL * Math.abs(exp.data[i]))) bad++;
  }
  console.log(`${bad ? 'FAIL' : 'ok  '} ${what}: max |diff| ${maxAbs.toExponential(2)}${bad ? `, ${bad} values out of tolerance` : ''}`);
  if (bad) failures++;
}

// ------------------------------------------------------------ interpreter
const T = (shape, data) => ({ shape, data });
const size = s => s.reduce((a, b) => a * b, 1);

function erfRef(z) {  // same algorithm family checked against known values below
  return require('./tfjs_keras3').erf(z);
}
for (const [z, v] of [[0.5, 0.5204998778130465], [1, 0.8427007929497149], [2, 0.9953222650189527],
  [3.7, 0.9999998328489421], [-1.3, -0.9340079449406524], [5, 0.9999999999984626]]) {
  if (Math.abs(erfRef(z) - v) > 1e-14) { console.log(`FAIL erf(${z}) = ${erfRef(z)} != ${v}`); failures++; }
}

const SELU_A = 1.6732632423543772, SELU_S = 1.0507009873554805;
const relu6 = x => Math.min(Math.max(x, 0), 6);
const sigmoid = x => 1 / (1 + Math.exp(-x));
const ELEM = {
  linear: x => x,
  relu: x => Math.max(x, 0),
  sigmoid,
  tanh: Math.tanh,
  gelu: x => 0.5 * x * (1 + erfRef(x / Math.SQRT2)),
  silu: x => x * sigmoid(x),
  swish: x => x * sigmoid(x),
  elu: x => (x > 0 ? x : Math.exp(x) - 1),
  selu: x => (x > 0 ? SELU_S * x : SELU_S * SELU_A * (Math.exp(x) - 1)),
  softplus: x => Math.log1p(Math.exp(-Math.abs(x))) + Math.max(x, 0),
  softsign: x => x / (1 + Math.abs(x)),
  relu6,
  leaky_relu: x => (x >= 0 ? x : 0.2 * x),
  exponential: Math.exp,
  hard_sigmoid: x => relu6(x + 3) / 6,  // Keras 3
};

function softmaxAxis(t, axis) {
  const r = t.shape.length; axis = axis < 0 ? axis + r : axis;
  const n = t.shape[axis], inner = size(t.shape.slice(axis + 1)), outer = size(t.shape.slice(0, axis));
  const out = new Float64Array(t.data.length);
  for (let o = 0; o < outer; o++) for (let i = 0; i < inner; i++) {
    let m = -Infinity;
    for (let k = 0; k < n; k++) m = Math.max(m, t.data[(o * n + k) * inner + i]);
    let s = 0;
    for (let k = 0; k < n; k++) s += Math.exp(t.data[(o * n + k) * inner + i] - m);
    for (let k = 0; k < n; k++) out[(o * n + k) * inner + i] = Math.exp(t.data[(o * n + k) * inner + i] - m) / s;
  }
  return T(t.shape, out);
}

function activation(name, t) {
  if (name === 'softmax') return softmaxAxis(t, -1);
  const f = ELEM[name];
  if (!f) throw new Error(`unknown activation ${name}`);
  return T(t.shape, t.data.map(f));
}

function kerasRelu(x, cfg) {  // keras.src.activations.ReLU.static_call
  const ns = cfg.negative_slope, mv = cfg.max_value, th = cfg.threshold;
  if (ns !== 0 && mv === null && th === 0) return x >= 0 ? x : ns * x;
  let y = th !== 0 ? (x > th ? x : 0) : Math.max(x, 0);
  if (mv !== null) y = Math.min(Math.max(y, 0), mv);
  if (ns !== 0) y -= ns * Math.max(th - x, 0);
  return y;
}

function transpose(t, perm) {
  const r = t.shape.length, shape = perm.map(p => t.shape[p]);
  const inStrides = []; let s = 1;
  for (let i = r - 1; i >= 0; i--) { inStrides[i] = s; s *= t.shape[i]; }
  const out = new Float64Array(t.data.length), idx = new Array(r).fill(0);
  for (let o = 0; o < out.length; o++) {
    let src = 0;
    for (let d = 0; d < r; d++) src += idx[d] * inStrides[perm[d]];
    out[o] = t.data[src];
    for (let d = r - 1; d >= 0; d--) { if (++idx[d] < shape[d]) break; idx[d] = 0; }
  }
  return T(shape, out);
}

function concat(ts, axis) {
  const r = ts[0].shape.length; axis = axis < 0 ? axis + r : axis;
  const outer = size(ts[0].shape.slice(0, axis));
  const shape = ts[0].shape.slice(); shape[axis] = ts.reduce((a, t) => a + t.shape[axis], 0);
  const out = new Float64Array(size(shape)); let p = 0;
  for (let o = 0; o < outer; o++) for (const t of ts) {
    const chunk = size(t.shape.slice(axis));
    for (let i = 0; i < chunk; i++) out[p++] = t.data[o * chunk + i];
  }
  return T(shape, out);
}

function elementwise(ts, f) {
  for (const t of ts) if (JSON.stringify(t.shape) !== JSON.stringify(ts[0].shape)) throw new Error('merge shape mismatch');
  const out = new Float64Array(ts[0].data.length);
  for (let i = 0; i < out.length; i++) out[i] = f(ts.map(t => t.data[i]));
  return T(ts[0].shape, out);
}

// Generic two-operand einsum (letters only), by brute force over every
// label assignment: deliberately a different algorithm from the loops in
// keras3_layers.js that produced expected.npy.
function einsum(eq, A, B) {
  const [ins, out] = eq.split('->'); const [sa, sb] = ins.split(',');
  const size = {};
  [...sa].forEach((c, i) => { size[c] = A.shape[i]; });
  [...sb].forEach((c, i) => { size[c] = B.shape[i]; });
  const labels = Object.keys(size), oshape = [...out].map(c => size[c]);
  const res = new Float64Array(oshape.reduce((p, q) => p * q, 1));
  const st = sh => { const r = []; let k = 1; for (let i = sh.length - 1; i >= 0; i--) { r[i] = k; k *= sh[i]; } return r; };
  const as = st(A.shape), bs = st(B.shape), os = st(oshape);
  const val = {}; labels.forEach(c => { val[c] = 0; });
  const total = labels.reduce((p, c) => p * size[c], 1);
  for (let n = 0; n < total; n++) {
    let r = n;
    for (let i = labels.length - 1; i >= 0; i--) { val[labels[i]] = r % size[labels[i]]; r = Math.floor(r / size[labels[i]]); }
    let ia = 0, ib = 0, io = 0;
    for (let i = 0; i < sa.length; i++) ia += val[sa[i]] * as[i];
    for (let i = 0; i < sb.length; i++) ib += val[sb[i]] * bs[i];
    for (let i = 0; i < out.length; i++) io += val[out[i]] * os[i];
    res[io] += A.data[ia] * B.data[ib];
  }
  return T(oshape, res);
}

// Broadcasts |p| (numpy rules, trailing-aligned) against |x| with f.
function bcast(x, p, f) {
  const r = x.shape.length, pr = p.shape.length, out = new Float64Array(x.data.length);
  const xs = [], ps = []; let k = 1, q = 1;
  for (let i = r - 1; i >= 0; i--) { xs[i] = k; k *= x.shape[i]; }
  for (let i = pr - 1; i >= 0; i--) { ps[i] = p.shape[i] === 1 ? 0 : q; q *= p.shape[i]; }
  for (let o = 0; o < out.length; o++) {
    let pi = 0;
    for (let i = 0; i < pr; i++) pi += Math.floor(o / xs[r - pr + i]) % x.shape[r - pr + i] * ps[i];
    out[o] = f(x.data[o], p.data[pi]);
  }
  return T(x.shape, out);
}

// Mean and variance (two-pass) over the last axis / the groups.
function normalizeGroups(x, groupOf, nGroups, eps, gamma, beta) {
  const sum = new Float64Array(nGroups), cnt = new Float64Array(nGroups), sq = new Float64Array(nGroups);
  x.data.forEach((v, i) => { sum[groupOf(i)] += v; cnt[groupOf(i)]++; });
  x.data.forEach((v, i) => { const g = groupOf(i); sq[g] += (v - sum[g] / cnt[g]) ** 2; });
  const C = x.shape[x.shape.length - 1];
  return T(x.shape, x.data.map((v, i) => {
    const g = groupOf(i), m = sum[g] / cnt[g];
    return (v - m) / Math.sqrt(sq[g] / cnt[g] + eps) * gamma[i % C] + beta[i % C];
  }));
}

function batchDot(x, y, axes) {  // keras batch_dot via einsum
  const L = 'abcdefgh', M = 'ijklmnop';
  const sx = [...L.slice(0, x.shape.length)], sy = [...M.slice(0, y.shape.length)];
  sy[0] = sx[0]; sy[axes[1]] = sx[axes[0]];
  const o = sx.filter((c, i) => i !== axes[0]).concat(sy.filter((c, i) => i !== 0 && i !== axes[1]));
  const r = einsum(`${sx.join('')},${sy.join('')}->${o.join('')}`, x, y);
  return r.shape.length === 1 ? T([r.shape[0], 1], r.data) : r;
}

function l2norm(x, axis) {
  const C = x.shape[axis], inner = size(x.shape.slice(axis + 1)), out = new Float64Array(x.data.length);
  for (let o = 0; o < x.data.length / (C * inner); o++) for (let i = 0; i < inner; i++) {
    let s = 0;
    for (let c = 0; c < C; c++) s += x.data[(o * C + c) * inner + i] ** 2;
    for (let c = 0; c < C; c++) out[(o * C + c) * inner + i] = x.data[(o * C + c) * inner + i] / Math.sqrt(Math.max(s, 1e-14));
  }
  return T(x.shape, out);
}

function applyLayer(cls, cfg, x, W, prefix) {
  const w = n => {
    const t = W[`${prefix}${cfg.name}/${n}`];
    if (!t) throw new Error(`missing weight ${prefix}${cfg.name}/${n}`);
    return t;
  };
  switch (cls) {
    case 'Flatten': return T([x.shape[0], size(x.shape.slice(1))], x.data);
    case 'Dropout': return x;
    case 'Dense': {
      const K = w('kernel'); const [fin, fout] = K.shape;
      if (K.shape.length !== 2 || fin !== x.shape[x.shape.length - 1] || fout !== cfg.units) throw new Error('dense shape');
      const rows = x.data.length / fin, out = new Float64Array(rows * fout);
      const b = cfg.use_bias ? w('bias').data : null;
      for (let r = 0; r < rows; r++) for (let j = 0; j < fout; j++) {
        let s = b ? b[j] : 0;
        for (let k = 0; k < fin; k++) s += x.data[r * fin + k] * K.data[k * fout + j];
        out[r * fout + j] = s;
      }
      return activation(cfg.activation, T([...x.shape.slice(0, -1), fout], out));
    }
    case 'Reshape': {
      const tgt = cfg.target_shape.slice(), known = tgt.filter(d => d !== -1).reduce((a, b) => a * b, 1);
      const i = tgt.indexOf(-1); if (i >= 0) tgt[i] = size(x.shape.slice(1)) / known;
      if (size(tgt) !== size(x.shape.slice(1))) throw new Error('reshape size');
      return T([x.shape[0], ...tgt], x.data);
    }
    case 'Permute': return transpose(x, [0, ...cfg.dims]);
    case 'Add': return elementwise(x, v => v.reduce((a, b) => a + b));
    case 'Subtract': return elementwise(x, v => v[0] - v[1]);
    case 'Multiply': return elementwise(x, v => v.reduce((a, b) => a * b));
    case 'Average': return elementwise(x, v => v.reduce((a, b) => a + b) / v.length);
    case 'Maximum': return elementwise(x, v => Math.max(...v));
    case 'Minimum': return elementwise(x, v => Math.min(...v));
    case 'Concatenate': return concat(x, cfg.axis);
    case 'Activation': return activation(cfg.activation, x);
    case 'ReLU': return T(x.shape, x.data.map(v => kerasRelu(v, cfg)));
    case 'Softmax': return softmaxAxis(x, cfg.axis);
    case 'Rescaling': return T(x.shape, x.data.map(v => v * cfg.scale + cfg.offset));
    case 'Normalization': {
      const m = w('mean'), v = w('variance');
      return bcast(bcast(x, m, (a, b) => a - b), v, (a, b) => a / Math.max(Math.sqrt(b), 1e-7));
    }
    case 'BatchNormalization': {
      const m = w('moving_mean').data, v = w('moving_variance').data, g = w('gamma').data, be = w('beta').data;
      const C = x.shape[x.shape.length - 1];
      return T(x.shape, x.data.map((a, i) => (a - m[i % C]) / Math.sqrt(v[i % C] + cfg.epsilon) * g[i % C] + be[i % C]));
    }
    case 'LayerNormalization': {
      const C = x.shape[x.shape.length - 1];
      return normalizeGroups(x, i => Math.floor(i / C), x.data.length / C, cfg.epsilon, w('gamma').data, w('beta').data);
    }
    case 'GroupNormalization': {
      const C = x.shape[x.shape.length - 1], cg = C / cfg.groups, per = size(x.shape.slice(1));
      return normalizeGroups(x, i => Math.floor(i / per) * cfg.groups + Math.floor((i % C) / cg),
        x.shape[0] * cfg.groups, cfg.epsilon, w('gamma').data, w('beta').data);
    }
    case 'UnitNormalization': return l2norm(x, x.shape.length - 1);
    case 'PReLU': return bcast(x, w('alpha'), (a, al) => (a > 0 ? a : al * a));
    case 'LeakyReLU': return T(x.shape, x.data.map(v => (v >= 0 ? v : cfg.negative_slope * v)));
    case 'ELU': return T(x.shape, x.data.map(v => (v > 0 ? v : cfg.alpha * Math.expm1(v))));
    case 'ZeroPadding2D': case 'Cropping2D': case 'UpSampling2D': {
      const [B, H, Wd, C] = x.shape;
      const p = cls === 'ZeroPadding2D' ? cfg.padding : cls === 'Cropping2D' ? cfg.cropping.map(a => a.map(v => -v)) : null;
      const oh = p ? H + p[0][0] + p[0][1] : H * cfg.size[0], ow = p ? Wd + p[1][0] + p[1][1] : Wd * cfg.size[1];
      const out = new Float64Array(B * oh * ow * C);
      for (let b = 0; b < B; b++) for (let i = 0; i < oh; i++) for (let j = 0; j < ow; j++) for (let c = 0; c < C; c++) {
        const si = p ? i - p[0][0] : Math.floor(i / cfg.size[0]), sj = p ? j - p[1][0] : Math.floor(j / cfg.size[1]);
        out[((b * oh + i) * ow + j) * C + c] = si < 0 || si >= H || sj < 0 || sj >= Wd ? 0 : x.data[((b * H + si) * Wd + sj) * C + c];
      }
      return T([B, oh, ow, C], out);
    }
    case 'GlobalMaxPooling2D': case 'GlobalAveragePooling2D': case 'GlobalAveragePooling1D': {
      const B = x.shape[0], C = x.shape[x.shape.length - 1], P = size(x.shape.slice(1, -1)), out = new Float64Array(B * C);
      const avg = cls.includes('Average');
      for (let b = 0; b < B; b++) for (let c = 0; c < C; c++) {
        let r = avg ? 0 : -Infinity;
        for (let p = 0; p < P; p++) { const v = x.data[(b * P + p) * C + c]; r = avg ? r + v / P : Math.max(r, v); }
        out[b * C + c] = r;
      }
      return T([B, C], out);
    }
    case 'RepeatVector': {
      const [B, D] = x.shape, out = new Float64Array(B * cfg.n * D);
      for (let b = 0; b < B; b++) for (let k = 0; k < cfg.n; k++) for (let d = 0; d < D; d++) out[(b * cfg.n + k) * D + d] = x.data[b * D + d];
      return T([B, cfg.n, D], out);
    }
    case 'EinsumDense': {
      let y = einsum(cfg.equation, x, w('kernel'));
      if (cfg.bias_axes) y = bcast(y, w('bias'), (a, b) => a + b);
      return activation(cfg.activation, y);
    }
    case 'Dot': {
      const ax = typeof cfg.axes === 'number' ? [cfg.axes, cfg.axes] : cfg.axes;
      const axes = ax.map((a, i) => (a < 0 ? a + x[i].shape.length : a));
      const [p, q] = cfg.normalize ? [l2norm(x[0], axes[0]), l2norm(x[1], axes[1])] : x;
      return batchDot(p, q, axes);
    }
    case 'MultiHeadAttention': {  // Keras' own equations for rank-3 inputs
      const [q, v] = x, k = x[2] || v;
      const proj = (n, t) => bcast(einsum('abc,cde->abde', t, w(`${n}/kernel`)), w(`${n}/bias`), (a, b) => a + b);
      const Q = proj('query', q), K = proj('key', k), V = proj('value', v);
      const Qs = T(Q.shape, Q.data.map(e => e * Math.fround(1 / Math.sqrt(cfg.key_dim))));
      const sc = softmaxAxis(einsum('aecd,abcd->acbe', K, Qs), -1);
      const o = einsum('acbe,aecd->abcd', sc, V);
      return bcast(einsum('abcd,cde->abe', o, w('attention_output/kernel')), w('attention_output/bias'), (a, b) => a + b);
    }
    default: throw new Error(`interpreter: unsupported layer ${cls}`);
  }
}

function runKeras3(modelJson, W, inputs) {
  const m = JSON.parse(modelJson);
  if (m.class_name === 'Sequential') {
    const prefix = m.config.name + '/';
    let x = inputs[0];
    for (const l of m.config.layers) if (l.class_name !== 'InputLayer') x = applyLayer(l.class_name, l.config, x, W, prefix);
    return [x];
  }
  const vals = {};  // layer name -> output
  const ins = Array.isArray(m.config.input_layers[0]) ? m.config.input_layers : [m.config.input_layers];
  ins.forEach((t, i) => { vals[t[0]] = inputs[i]; });
  const resolve = a => (Array.isArray(a) ? a.map(resolve) : vals[a.config.keras_history[0]]);
  let pending = m.config.layers.filter(l => l.class_name !== 'InputLayer');
  while (pending.length) {
    const next = [];
    for (const l of pending) {
      const a0 = l.inbound_nodes[0].args;
      const arg = l.class_name === 'MultiHeadAttention' ? a0.map(resolve) : resolve(a0[0]);
      if ((Array.isArray(arg) ? arg : [arg]).some(v => v === undefined)) { next.push(l); continue; }
      vals[l.name] = applyLayer(l.class_name, l.config, arg, W, '');
    }
    if (next.length === pending.length) throw new Error('graph has loops or disconnected nodes');
    pending = next;
  }
  const outs = Array.isArray(m.config.output_layers[0]) ? m.config.output_layers : [m.config.output_layers];
  return outs.map(t => vals[t[0]]);
}

// ------------------------------------------------------------ main
async function main() {
  for (const name of MODELS) {
    const dir = path.join(EX, name);
    const files = fs.readdirSync(dir);
    const inputs = (files.includes('input.npy') ? ['input.npy'] : files.filter(f => /^input\d+\.npy$/.test(f)).sort())
      .map(f => L.readNpy(path.join(dir, f)));
    const expFiles = files.includes('expected.npy') ? ['expected.npy'] : files.filter(f => /^expected\d+\.npy$/.test(f)).sort();
    const expected = expFiles.map(f => L.readNpy(path.join(dir, f)));
    const W = L.readSafetensors(path.join(dir, 'weights.safetensors'));

    // 1. Keras 3 interpreter
    const got = runKeras3(fs.readFileSync(path.join(dir, 'model.json'), 'utf8'), W, inputs);
    got.forEach((g, i) => compare(`${name}: keras3 interpreter vs ${expFiles[i]}`, g, expected[i]));
    if (name === 'mnist_mlp') {  // rows of a softmax sum to 1
      const e = expected[0]; let worst = 0;
      for (let r = 0; r < e.shape[0]; r++) {
        let s = 0; for (let j = 0; j < 10; j++) s += e.data[r * 10 + j];
        worst = Math.max(worst, Math.abs(s - 1));
      }
      if (worst > 1e-5) { console.log(`FAIL softmax rows sum off by ${worst}`); failures++; }
    }

    // 3. weights.bin vs safetensors
    const tj = JSON.parse(fs.readFileSync(path.join(dir, 'model_tfjs.json'), 'utf8'));
    const bin = fs.readFileSync(path.join(dir, 'weights.bin'));
    const prefix = name === 'mlp_sequential' ? 'sequential/' : '';
    let off = 0, wbad = 0;
    for (const s of tj.weightsManifest[0].weights) {
      const n = size(s.shape), st = W[prefix + s.name];
      if (!st || JSON.stringify(st.shape) !== JSON.stringify(s.shape)) { wbad++; continue; }
      const rd = s.dtype === 'int32' ? o => bin.readInt32LE(o) : o => bin.readFloatLE(o);
      for (let i = 0; i < n; i++) if (rd(off + 4 * i) !== st.data[i]) { wbad++; break; }
      off += 4 * n;
    }
    if (off !== bin.length || Object.keys(W).length !== tj.weightsManifest[0].weights.length) wbad++;
    console.log(`${wbad ? 'FAIL' : 'ok  '} ${name}: weights.bin == weights.safetensors`);
    if (wbad) failures++;
  }

  // 2. TF.js round trip (needs the tfjs extensions registered)
  const tf = require('@tensorflow/tfjs');
  const ext = require('./tfjs_keras3');
  require('./keras3_layers');  // MultiHeadAttention, EinsumDense, ... (tfjs lacks them)
  // tfjs camelCases activation names when it reads a topology
  // ('leaky_relu' -> 'leakyRelu'; 'hard_sigmoid' -> tfjs' own 'hardSigmoid',
  // i.e. tf.keras 2 semantics, which is what expected_tfjs.npy holds).
  class LeakyReluAlias extends ext.LeakyReluAct {}
  LeakyReluAlias.className = 'leakyRelu';
  tf.serialization.registerClass(LeakyReluAlias);
  await tf.setBackend('cpu');
  for (const name of MODELS) {
    const dir = path.join(EX, name);
    const files = fs.readdirSync(dir);
    const tj = JSON.parse(fs.readFileSync(path.join(dir, 'model_tfjs.json'), 'utf8'));
    const bin = fs.readFileSync(path.join(dir, 'weights.bin'));
    const model = await tf.loadLayersModel(tf.io.fromMemory({
      modelTopology: tj.modelTopology, weightSpecs: tj.weightsManifest[0].weights,
      weightData: bin.buffer.slice(bin.byteOffset, bin.byteOffset + bin.length),
    }));
    const inputs = (files.includes('input.npy') ? ['input.npy'] : files.filter(f => /^input\d+\.npy$/.test(f)).sort())
      .map(f => L.readNpy(path.join(dir, f))).map(a => tf.tensor(a.data, a.shape));
    let ys = model.predict(inputs.length === 1 ? inputs[0] : inputs);
    ys = Array.isArray(ys) ? ys : [ys];
    const expFiles = files.includes('expected_tfjs.npy') ? ['expected_tfjs.npy']
      : files.includes('expected.npy') ? ['expected.npy'] : files.filter(f => /^expected\d+\.npy$/.test(f)).sort();
    ys.forEach((y, i) => compare(`${name}: tfjs reload of model_tfjs.json vs ${expFiles[i]}`,
      { shape: y.shape, data: y.dataSync() }, L.readNpy(path.join(dir, expFiles[i]))));
  }
  console.log(failures ? `${failures} FAILURES` : 'all checks passed');
  process.exit(failures ? 1 : 0);
}

main().catch(e => { console.error(e); process.exit(2); });
