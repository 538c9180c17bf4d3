'use strict';
// Keras 3 reference data for Keras masks (examples/masked_text): a padded
// text classifier that uses Embedding(mask_zero=True) masks in every layer
// that consumes them, and Masking over a float sequence.  Built with tfjs
// 4.22 (gen.js's Builder and JSON conventions); written like gen_conv.js:
// model.json (Keras 3), weights.safetensors (Keras 3 variable paths),
// input0.npy (ids, right padded with 0, some 0s inside), input1.npy (float
// steps, trailing and some inner steps all 0), expected.npy (37 rows).
//
//   ids -> Embedding(30, 8, mask_zero) -> Dropout -> LSTM(6)          (last)
//                                      -> GRU(5, sequences, reset_after false)
//                                           -> GlobalAveragePooling1D (masked mean)
//                                      -> MultiHeadAttention(2, 4)(e, e) -> Add(., e)
//                                           -> GlobalAveragePooling1D
//                                      -> Bidirectional(LSTM(4, sequences))
//                                           -> GlobalAveragePooling1D
//   seq -> Masking(0.0) -> SimpleRNN(5, go_backwards)                  (last)
//   Concatenate(all five) -> Dense(4, softmax)
//
// Also examples/masked_text/tagger.json (+ tagger.safetensors,
// tagger_expected.npy): ids -> Embedding(mask_zero) -> LSTM(6, sequences)
// -> Dense(4, softmax) per step, whose output carries the mask (the masked
// loss of training).
//
// Where tfjs differs from Keras 3 (the layers below compute Keras 3):
//   - tfjs' GlobalAveragePooling1D does not support masks (it throws);
//     KMaskedGAP1D is Keras 3's masked mean, sum(where(m, x, 0)) / sum(m);
//   - tfjs has no MultiHeadAttention; KMaskedMHA ports Keras 3's
//     (keras3_layers.js) with _compute_attention_mask (query mask [B,T,1] &
//     value mask [B,1,S]) and ops.dot_product_attention's masking (masked
//     logits -0.7 * float32 max, so a fully masked row attends uniformly);
//   - tfjs' Bidirectional does not force zero_output_for_mask (Keras 3
//     outputs zeros at masked steps of return_sequences): the masked mean
//     that follows ignores those steps, so the outputs agree;
//   - tfjs' Merge layers AND the input masks (tf.keras 2); Keras 3 ORs them
//     (None when one input has none): KAddOr.
// usage: cd tests/reference && node gen_masked.js
const fs = require('fs');
const path = require('path');
const tf = require('@tensorflow/tfjs');
const L = require('./lib');
const G = require('./gen');
const K3 = require('./keras3_layers');

const OUT = path.resolve(__dirname, '..', '..', 'examples', 'masked_text');
const BATCH = 37, T = 12, VOCAB = 30, S = 10, F = 4;

const f64 = t => Float64Array.from(t.dataSync());
const one = x => (Array.isArray(x) ? x[0] : x);

// GlobalAveragePooling1D.call with a mask (channels_last), in float64.
class KMaskedGAP1D extends tf.layers.Layer {
  constructor(cfg) { super(cfg); this.supportsMasking = true; }
  computeOutputShape(s) { return [s[0], s[2]]; }
  computeMask() { return null; }
  call(inputs, kwargs) {
    const x = one(inputs), [B, Ts, D] = x.shape, xd = f64(x);
    const m = kwargs.mask ? f64(kwargs.mask) : new Float64Array(B * Ts).fill(1);
    const o = new Float64Array(B * D);
    for (let b = 0; b < B; b++) {
      let n = 0;
      for (let t = 0; t < Ts; t++) if (m[b * Ts + t]) n++;
      for (let d = 0; d < D; d++) {
        let s = 0;
        for (let t = 0; t < Ts; t++) if (m[b * Ts + t]) s += xd[(b * Ts + t) * D + d];
        o[b * D + d] = s / n;
      }
    }
    return tf.tensor(Float32Array.from(o), [B, D]);
  }
  static get className() { return 'KMaskedGAP1D'; }
}
tf.serialization.registerClass(KMaskedGAP1D);

// MultiHeadAttention self-attention with the Keras mask of its (single)
// input as query and value mask; the output carries the query's mask.
class KMaskedMHA extends K3.KMultiHeadAttention {
  constructor(args) { super(args); this.supportsMasking = true; }
  computeMask(inputs, mask) { return Array.isArray(mask) ? mask[0] : mask; }
  call(inputs, kwargs) {
    const [qt, vt] = inputs;
    const H = this.cfg.num_heads, kd = this.cfg.key_dim, vd = this.cfg.value_dim || kd;
    const [B, Tq, D] = qt.shape, Sv = vt.shape[1];
    const mk = kwargs.mask ? f64(kwargs.mask) : new Float64Array(B * Tq).fill(1);
    const q = f64(qt), v = f64(vt);
    const W = n => this.w(n);
    const proj = (x, Lx, Wk, bk, d) => {
      const r = new Float64Array(B * Lx * H * d);
      for (let i = 0; i < B * Lx; i++) for (let h = 0; h < H; h++) for (let e = 0; e < d; e++) {
        let s = bk[h * d + e];
        for (let c = 0; c < D; c++) s += x[i * D + c] * Wk[(c * H + h) * d + e];
        r[(i * H + h) * d + e] = s;
      }
      return r;
    };
    const scale = Math.fround(1 / Math.sqrt(kd));
    const Q = proj(q, Tq, W('query/kernel'), W('query/bias'), kd).map(e => e * scale);
    const K = proj(v, Sv, W('key/kernel'), W('key/bias'), kd);
    const V = proj(v, Sv, W('value/kernel'), W('value/bias'), vd);
    const Wo = W('attention_output/kernel'), bo = W('attention_output/bias');
    const o = new Float64Array(B * Tq * D);
    for (let bi = 0; bi < B; bi++) {
      const heads = new Float64Array(Tq * H * vd);
      for (let h = 0; h < H; h++) for (let t = 0; t < Tq; t++) {
        const w = new Float64Array(Sv);
        const ok = s => mk[bi * Tq + t] && mk[bi * Sv + s];
        let any = false, m = -Infinity;
        for (let s = 0; s < Sv; s++) {
          if (!ok(s)) continue;
          let d = 0;
          for (let e = 0; e < kd; e++) d += Q[((bi * Tq + t) * H + h) * kd + e] * K[((bi * Sv + s) * H + h) * kd + e];
          w[s] = d; any = true; m = Math.max(m, d);
        }
        let z = 0;
        for (let s = 0; s < Sv; s++) {
          w[s] = !any ? 1 : ok(s) ? Math.exp(w[s] - m) : 0;  // fully masked row: uniform
          z += w[s];
        }
        for (let e = 0; e < vd; e++) {
          let acc = 0;
          for (let s = 0; s < Sv; s++) acc += w[s] / z * V[((bi * Sv + s) * H + h) * vd + e];
          heads[(t * H + h) * vd + e] = acc;
        }
      }
      for (let t = 0; t < Tq; t++) for (let j = 0; j < D; j++) {
        let s = bo[j];
        for (let h = 0; h < H; h++) for (let e = 0; e < vd; e++) s += heads[(t * H + h) * vd + e] * Wo[(h * vd + e) * D + j];
        o[(bi * Tq + t) * D + j] = s;
      }
    }
    return tf.tensor(Float32Array.from(o), [B, Tq, D]);
  }
  static get className() { return 'KMaskedMHA'; }
}
tf.serialization.registerClass(KMaskedMHA);

// Add with Keras 3's merge mask: the OR of the inputs' masks (tfjs' Merge
// ANDs them, and fails on a mask from a custom layer).
class KAddOr extends tf.layers.Layer {
  constructor(cfg) { super(cfg); this.supportsMasking = true; }
  computeOutputShape(s) { return s[0]; }
  computeMask(inputs, mask) {
    if (!mask || mask.some(m => m == null)) return null;
    return mask.slice(1).reduce((a, m) => tf.logicalOr(a, m), mask[0]);
  }
  call(inputs) { return tf.tidy(() => inputs.slice(1).reduce((a, x) => tf.add(a, x), inputs[0])); }
  static get className() { return 'KAddOr'; }
}
tf.serialization.registerClass(KAddOr);

const INIT = (c, cfg = {}) => ({ module: 'keras.initializers', class_name: c, config: cfg, registered_name: null });

function embeddingCfg() {
  return {
    input_dim: VOCAB, output_dim: 8,
    embeddings_initializer: INIT('RandomUniform', { seed: null, minval: -0.05, maxval: 0.05 }),
    embeddings_regularizer: null, activity_regularizer: null, embeddings_constraint: null,
    mask_zero: true, lora_rank: null,
  };
}
const GAP = { data_format: 'channels_last', keepdims: false };

// tfjs' executor counts a node's recipients once but releases an input once
// per use, so MultiHeadAttention(e, e) would free e before its other users
// run; tfjs never frees the outputs of a `stateful` layer.
function embed(b, ids) {
  const layer = tf.layers.embedding({ inputDim: VOCAB, outputDim: 8, maskZero: true, name: 'embedding' });
  Object.defineProperty(layer, 'stateful', { get: () => true });
  return b.layer('Embedding', 'embedding', embeddingCfg(), layer, ids);
}

function buildClassifier() {
  const b = new G.Builder('functional', 'masked_text', 0x3A5C);
  const ids = b.input('ids', [T]);
  const seq = b.input('seq', [S, F]);
  const e = embed(b, ids);
  const dr = b.layer('Dropout', 'dropout', { rate: L.pyf(0.3), seed: null, noise_shape: null },
    tf.layers.dropout({ rate: 0.3, name: 'dropout' }), e);
  const lstm = b.layer('LSTM', 'lstm', G.rnnSpecific('LSTM', 6),
    tf.layers.lstm({ units: 6, recurrentActivation: 'sigmoid', name: 'lstm' }), dr);
  const gru = b.layer('GRU', 'gru', G.rnnSpecific('GRU', 5, { return_sequences: true, reset_after: false }),
    tf.layers.gru({ units: 5, recurrentActivation: 'sigmoid', returnSequences: true, name: 'gru' }), e);
  const g1 = b.layer('GlobalAveragePooling1D', 'gap_gru', GAP, new KMaskedGAP1D({ name: 'gap_gru' }), gru);
  const att = b.layer('MultiHeadAttention', 'mha', {
    num_heads: 2, key_dim: 4, value_dim: 4, dropout: L.pyf(0), use_bias: true, output_shape: null,
    attention_axes: [1], kernel_initializer: G.GU(), bias_initializer: G.ZE(), kernel_regularizer: null,
    bias_regularizer: null, activity_regularizer: null, kernel_constraint: null, bias_constraint: null,
    seed: null,
  }, new KMaskedMHA({ name: 'mha', num_heads: 2, key_dim: 4, value_dim: 4 }), [e, e], {},
  { positional: true });
  const add = b.layer('Add', 'add', {}, new KAddOr({ name: 'add' }), [att, e]);
  const g2 = b.layer('GlobalAveragePooling1D', 'gap_mha', GAP, new KMaskedGAP1D({ name: 'gap_mha' }), add);
  const bi = b.layer('Bidirectional', 'bidirectional',
    G.bidirSpecific('LSTM', 'lstm_b', 4, 'concat', e.shape, { return_sequences: true }),
    tf.layers.bidirectional({ name: 'bidirectional', mergeMode: 'concat',
      layer: tf.layers.lstm({ units: 4, recurrentActivation: 'sigmoid', returnSequences: true, name: 'lstm_b' }) }), e);
  b.entries[b.entries.length - 1].innerCls = 'LSTM';
  const g3 = b.layer('GlobalAveragePooling1D', 'gap_bi', GAP, new KMaskedGAP1D({ name: 'gap_bi' }), bi);
  const mk = b.layer('Masking', 'masking', { mask_value: L.pyf(0) },
    tf.layers.masking({ maskValue: 0, name: 'masking' }), seq);
  const rnn = b.layer('SimpleRNN', 'simple_rnn', G.rnnSpecific('SimpleRNN', 5, { go_backwards: true }),
    tf.layers.simpleRNN({ units: 5, goBackwards: true, name: 'simple_rnn' }), mk);
  const cat = b.layer('Concatenate', 'cat', { axis: -1 }, tf.layers.concatenate({ axis: -1, name: 'cat' }),
    [lstm, g1, g2, g3, rnn]);
  const head = b.dense('head', 4, 'softmax', cat);
  const model = tf.model({ inputs: b.inputs, outputs: head.sym, name: 'masked_text' });
  return { b, model, outputs: [head] };
}

function buildTagger() {
  const b = new G.Builder('functional', 'tagger', 0x7A66);
  const ids = b.input('ids', [T]);
  const e = embed(b, ids);
  const lstm = b.layer('LSTM', 'lstm', G.rnnSpecific('LSTM', 6, { return_sequences: true }),
    tf.layers.lstm({ units: 6, recurrentActivation: 'sigmoid', returnSequences: true, name: 'lstm' }), e);
  const tag = b.dense('tag', 4, 'softmax', lstm);
  const model = tf.model({ inputs: b.inputs, outputs: tag.sym, name: 'tagger' });
  return { b, model, outputs: [tag] };
}

// Embeddings in [-1, 1], kernels uniform in +-sqrt(6 / (fan_in + fan_out))
// (fan_out = last dim), biases in [-0.2, 0.2]; names as Keras 3 paths.
function seedWeights(model, b) {
  const list = [];
  for (const layer of model.layers) {
    if (!layer.weights.length) continue;
    const e = b.entries.find(x => x.name === layer.name);
    const vals = layer.weights.map(w => {
      const shape = w.shape.slice(), n = shape.reduce((p, q) => p * q, 1);
      const wname = w.originalName.slice(layer.name.length + 1);
      const leaf = wname.split('/').pop();
      let data;
      if (leaf === 'bias') data = L.uniformArray(b.rng, n, -0.2, 0.2);
      else if (leaf === 'embeddings') data = L.uniformArray(b.rng, n, -1, 1);
      else {
        const fo = shape[shape.length - 1], fi = n / fo, lim = Math.sqrt(6 / (fi + fo));
        data = L.uniformArray(b.rng, n, -lim, lim);
      }
      let k3 = wname;
      if (G.RNN_CELL[e.cls]) k3 = `${G.RNN_CELL[e.cls]}/${wname}`;
      if (e.innerCls) {
        const [sub, lf] = wname.split('/');
        k3 = `${sub}/${G.RNN_CELL[e.innerCls]}/${lf}`;
      }
      list.push({ name: `${layer.name}/${k3}`, shape, data, dtype: 'F32' });
      return tf.tensor(data, shape);
    });
    layer.setWeights(vals);
  }
  return list;
}

// Token ids: a length in [1, T], ids in [1, VOCAB) then 0s; every 4th row
// has one more 0 inside (a masked step between real ones).
function idsBatch(rng) {
  const d = new Float32Array(BATCH * T);
  for (let r = 0; r < BATCH; r++) {
    const len = 1 + Math.floor(rng() * T);
    for (let t = 0; t < len; t++) d[r * T + t] = 1 + Math.floor(rng() * (VOCAB - 1));
    if (r % 4 === 3 && len > 2) d[r * T + 1 + Math.floor(rng() * (len - 2))] = 0;
  }
  return d;
}

// Float steps in [-1, 1]: a length in [2, S] then all-0 steps; every 3rd
// row has one more all-0 step inside.
function seqBatch(rng) {
  const d = new Float32Array(BATCH * S * F);
  for (let r = 0; r < BATCH; r++) {
    const len = 2 + Math.floor(rng() * (S - 1));
    for (let t = 0; t < len; t++) for (let f = 0; f < F; f++) d[(r * S + t) * F + f] = 2 * rng() - 1;
    if (r % 3 === 2) {
      const z = 1 + Math.floor(rng() * (len - 1));
      for (let f = 0; f < F; f++) d[(r * S + z) * F + f] = 0;
    }
  }
  return d;
}

async function main() {
  await tf.setBackend('cpu');
  await tf.ready();
  fs.mkdirSync(OUT, { recursive: true });
  const write = (f, d) => { fs.writeFileSync(path.join(OUT, f), d); console.log('  wrote', f); };
  const c = buildClassifier();
  write('model.json', L.pyJSON(c.b.keras3Functional(c.outputs)) + '\n');
  write('weights.safetensors', L.safetensorsBytes(seedWeights(c.model, c.b)));
  const ids = idsBatch(c.b.rng), seq = seqBatch(c.b.rng);
  write('input0.npy', L.npyBytes([BATCH, T], ids));
  write('input1.npy', L.npyBytes([BATCH, S, F], seq));
  const y = c.model.predict([tf.tensor(ids, [BATCH, T]), tf.tensor(seq, [BATCH, S, F])], { batchSize: 64 });
  write('expected.npy', L.npyBytes(y.shape, y.dataSync()));
  const g = buildTagger();
  write('tagger.json', L.pyJSON(g.b.keras3Functional(g.outputs)) + '\n');
  write('tagger.safetensors', L.safetensorsBytes(seedWeights(g.model, g.b)));
  const yt = g.model.predict(tf.tensor(ids, [BATCH, T]), { batchSize: 64 });
  write('tagger_expected.npy', L.npyBytes(yt.shape, yt.dataSync()));
  console.log(`masked_text: ${JSON.stringify(y.shape)}, tagger: ${JSON.stringify(yt.shape)}`);
}

main().catch(e => { console.error(e); process.exit(1); });
