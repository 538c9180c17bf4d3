// Keras 3 reference data for examples/layer_zoo2: TimeDistributed (around
// Conv2D, GlobalAveragePooling2D and Dense), Attention (dot with use_scale
// and use_causal_mask; concat with use_scale, a separate key and
// return_attention_scores), AdditiveAttention, Resizing (bilinear up/down,
// nearest, crop_to_aspect_ratio, pad_to_aspect_ratio), CenterCrop (a crop,
// and the smart_resize fallback when the image is smaller), and RandomFlip /
// RandomRotation / RandomContrast (identities at inference).  Built with
// tfjs 4.22 and gen.js's Builder; written like gen_conv.js: model.json
// (Keras 3), weights.safetensors (Keras 3 variable paths), input0/1.npy (37
// rows), expected.npy.  No TF.js files: tfjs lacks Attention and the Keras 3
// Resizing semantics.
//
// Where the reference does not use a tfjs layer as it is:
//   - TimeDistributed: tfjs' own wrapper (it loops over time like Keras 3);
//     the weights are named as Keras 3 names them, "<wrapper>/<inner>/kernel".
//   - Attention / AdditiveAttention: tfjs has none.  KAttention computes
//     Keras 3's formulas (keras/src/layers/attention/) in plain JS float64
//     with explicit loops -- scores, causal "scores - 1e9", softmax over Tv,
//     weights @ value -- and rounds once to float32.
//   - Resizing: tfjs' Resizing uses corner alignment; Keras 3 resizes with
//     jax.image.resize (half-pixel centres, antialias off), which for
//     bilinear is tf.image.resizeBilinear(x, size, alignCorners=false,
//     halfPixelCenters=true) and for nearest resizeNearestNeighbor with the
//     same flags; the crop / pad to the aspect ratio is done with tf.slice /
//     tf.pad as Keras' resize does (keras/src/backend/jax/image.py).
//   - CenterCrop: tf.slice, or Keras' smart_resize (aspect crop + bilinear).
//   - Random* layers: identities in the tfjs graph (Keras 3 predict runs
//     them with training=False, where transform_images returns the input).
// Also a single-input training model (fit_*, see buildFit) with its
// predictions, for `kdc run --fit` and the gradient checks.
// usage: cd tests/reference && node gen_layer_zoo2.js
const fs = require('fs');
const path = require('path');
const tf = require('@tensorflow/tfjs');
const L = require('./lib');
const G = require('./gen');

const OUT = path.resolve(__dirname, '..', '..', 'examples', 'layer_zoo2');
const BATCH = 37;

// ---- plain-JS Keras 3 attention (float64) ----------------------------------
class KAttention extends tf.layers.Layer {
  // cfg: {mode: 'dot'|'concat'|'additive', scale: number|number[]|null,
  //       concatWeight: number|null, causal, scores: return the weights too}
  constructor(cfg) {
    super({ name: cfg.name });
    this.cfg = cfg;
  }
  computeOutputShape(s) {
    if (!Array.isArray(s[0])) s = [s];  // one input (a bare shape)
    const q = s[0], v = s.length > 1 ? s[1] : q, k = s.length > 2 ? s[2] : v;
    const out = [q[0], q[1], v[2]];
    return this.cfg.scores ? [out, [q[0], q[1], k[1]]] : out;
  }
  call(inputs) {
    return tf.tidy(() => {
      const c = this.cfg;
      if (!Array.isArray(inputs)) inputs = [inputs];
      const q = inputs[0].arraySync(), v = inputs.length > 1 ? inputs[1].arraySync() : q;
      const k = inputs.length > 2 ? inputs[2].arraySync() : v;
      const B = q.length, Tq = q[0].length, Tv = v[0].length, d = q[0][0].length, dv = v[0][0].length;
      const out = [], wts = [];
      for (let b = 0; b < B; b++) {
        const ob = [], wb = [];
        for (let i = 0; i < Tq; i++) {
          const s = [];
          for (let j = 0; j < Tv; j++) {
            let acc = 0;
            for (let e = 0; e < d; e++) {
              if (c.mode === 'dot') acc += q[b][i][e] * k[b][j][e];
              else if (c.mode === 'concat') acc += Math.tanh((c.scale === null ? 1 : c.scale) * (q[b][i][e] + k[b][j][e]));
              else acc += (c.scale === null ? 1 : c.scale[e]) * Math.tanh(q[b][i][e] + k[b][j][e]);
            }
            if (c.mode === 'dot' && c.scale !== null) acc *= c.scale;
            if (c.mode === 'concat') acc *= c.concatWeight;
            if (c.causal && j > i) acc -= 1e9;
            s.push(acc);
          }
          const mx = Math.max(...s);
          const e = s.map(x => Math.exp(x - mx));
          const tot = e.reduce((p, x) => p + x, 0);
          const w = e.map(x => x / tot);
          const o = [];
          for (let f = 0; f < dv; f++) {
            let acc = 0;
            for (let j = 0; j < Tv; j++) acc += w[j] * v[b][j][f];
            o.push(acc);
          }
          ob.push(o);
          wb.push(w);
        }
        out.push(ob);
        wts.push(wb);
      }
      const o = tf.tensor(out, [B, Tq, dv], 'float32');
      return c.scores ? [o, tf.tensor(wts, [B, Tq, Tv], 'float32')] : o;
    });
  }
  static get className() { return 'KAttention'; }
}
tf.serialization.registerClass(KAttention);

// ---- Keras 3 resize (jax.image.resize semantics) with tfjs image ops -------
class KResize extends tf.layers.Layer {
  // cfg: {h, w, method: 'bilinear'|'nearest', crop, pad, fill, centerCrop}
  constructor(cfg) {
    super({ name: cfg.name });
    this.cfg = cfg;
  }
  computeOutputShape(s) { return [s[0], this.cfg.h, this.cfg.w, s[3]]; }
  call(inputs) {
    return tf.tidy(() => {
      const c = this.cfg;
      let x = Array.isArray(inputs) ? inputs[0] : inputs;
      const [, H, W] = x.shape;
      if (c.centerCrop && H >= c.h && W >= c.w) {
        return tf.slice(x, [0, Math.floor((H - c.h) / 2), Math.floor((W - c.w) / 2), 0], [-1, c.h, c.w, -1]);
      }
      if (c.crop || c.centerCrop) {  // crop_to_aspect_ratio / smart_resize
        const ch = Math.max(Math.min(H, Math.trunc(W * c.h / c.w)), 1);
        const cw = Math.max(Math.min(W, Math.trunc(H * c.w / c.h)), 1);
        x = tf.slice(x, [0, Math.trunc((H - ch) / 2), Math.trunc((W - cw) / 2), 0], [-1, ch, cw, -1]);
      } else if (c.pad) {
        const ph = Math.max(H, Math.trunc(W * c.h / c.w)), pw = Math.max(W, Math.trunc(H * c.w / c.h));
        const hs = Math.trunc((ph - H) / 2), ws = Math.trunc((pw - W) / 2);
        if (hs > 0) x = tf.pad(x, [[0, 0], [hs, hs], [0, 0], [0, 0]], c.fill);
        else if (ws > 0) x = tf.pad(x, [[0, 0], [0, 0], [ws, ws], [0, 0]], c.fill);
      }
      return c.method === 'nearest' ? tf.image.resizeNearestNeighbor(x, [c.h, c.w], false, true)
        : tf.image.resizeBilinear(x, [c.h, c.w], false, true);
    });
  }
  static get className() { return 'KResize'; }
}
tf.serialization.registerClass(KResize);

class KIdentity extends tf.layers.Layer {
  computeOutputShape(s) { return s; }
  call(x) { return tf.tidy(() => tf.clone(Array.isArray(x) ? x[0] : x)); }
  static get className() { return 'KIdentity'; }
}
tf.serialization.registerClass(KIdentity);

const INIT = (c, cfg = {}) => ({ module: 'keras.initializers', class_name: c, config: cfg, registered_name: null });
const GU = () => INIT('GlorotUniform', { seed: null });
const ZE = () => INIT('Zeros');

function conv2dCfg(name, filters, activation) {
  return {
    name, trainable: true, dtype: G.DP(), filters, kernel_size: [3, 3], strides: [1, 1],
    padding: 'same', data_format: 'channels_last', dilation_rate: [1, 1], groups: 1, activation,
    use_bias: true, kernel_initializer: GU(), bias_initializer: ZE(), kernel_regularizer: null,
    bias_regularizer: null, activity_regularizer: null, kernel_constraint: null, bias_constraint: null,
  };
}
const wrapped = (cls, config, inputShape) => ({
  module: 'keras.layers', class_name: cls, config, registered_name: null,
  build_config: { input_shape: inputShape },
});

function build() {
  const b = new G.Builder('functional', 'layer_zoo2', 0x1A7E2002);
  const extra = [];  // weights of the plain-JS layers: {name, shape, data}
  const tdWeights = [];  // [tfjs layer, Keras 3 prefix]
  const flat = (name, inp) => b.layer('Flatten', name, { data_format: 'channels_last' },
    tf.layers.flatten({ name }), inp);

  // ---- sequence branch: a video of 4 frames 6x6x3
  const fr = b.input('frames', [4, 6, 6, 3]);
  const td = (name, cls, innerCfg, innerShape, tfInner, inp) => {
    const tfl = tf.layers.timeDistributed({ layer: tfInner, name });
    tdWeights.push([tfl, `${name}/${innerCfg.name}`]);
    return b.layer('TimeDistributed', name, { layer: wrapped(cls, innerCfg, innerShape) }, tfl, inp);
  };
  const tconv = td('td_conv', 'Conv2D', conv2dCfg('conv', 4, 'relu'), [null, 6, 6, 3],
    tf.layers.conv2d({ filters: 4, kernelSize: 3, padding: 'same', activation: 'relu', name: 'conv' }), fr);
  const tgap = td('td_gap', 'GlobalAveragePooling2D',
    { name: 'gap', trainable: true, dtype: G.DP(), data_format: 'channels_last', keepdims: false },
    [null, 6, 6, 4], tf.layers.globalAveragePooling2d({ name: 'gap' }), tconv);      // (4, 4)
  const seq = td('td_dense', 'Dense', Object.assign({ name: 'dense', trainable: true, dtype: G.DP() },
    G.denseSpecific(5, 'tanh', true)), [null, 4],
  tf.layers.dense({ units: 5, activation: 'tanh', name: 'dense' }), tgap);          // (4, 5)
  const key = td('td_key', 'Dense', Object.assign({ name: 'dense_1', trainable: true, dtype: G.DP() },
    G.denseSpecific(5, 'linear', true)), [null, 5],
  tf.layers.dense({ units: 5, name: 'dense_1' }), seq);                             // (4, 5)

  const rng = b.rng;
  // Attention(use_scale=True) self-attention, causal
  const s1 = 0.5 + rng();
  extra.push({ name: 'attn/scale', shape: [], data: new Float32Array([s1]) });
  // (the tfjs graph gets [seq] once: tfjs' executor disposes a tensor passed
  // twice to one layer; KAttention takes a 1-list as query = value = key)
  const a1sym = new KAttention({ name: 'attn', mode: 'dot', scale: Math.fround(s1), causal: true })
    .apply([seq.sym]);
  const a1 = b.layer('Attention', 'attn', { use_scale: true, score_mode: 'dot', dropout: 0.0, seed: null },
    { apply: () => a1sym }, [seq, seq], { use_causal_mask: true });
  // Attention(score_mode="concat", use_scale=True)([a1, seq, key], return_attention_scores=True)
  const s2 = 0.5 + rng(), cw = 0.5 + rng();
  extra.push({ name: 'attn_concat/scale', shape: [], data: new Float32Array([s2]) });
  extra.push({ name: 'attn_concat/concat_score_weight', shape: [], data: new Float32Array([cw]) });
  const kc = new KAttention({ name: 'attn_concat', mode: 'concat', scale: Math.fround(s2),
    concatWeight: Math.fround(cw), scores: true });
  const both = kc.apply([a1.sym, seq.sym, key.sym]);
  const a2 = b.layer('Attention', 'attn_concat', { use_scale: true, score_mode: 'concat', dropout: 0.0, seed: null },
    { apply: () => both[0] }, [a1, seq, key], { return_attention_scores: true });
  const a2s = { sym: both[1], hist: ['attn_concat', 0, 1], shape: both[1].shape.slice() };
  // AdditiveAttention()([seq, key]) (use_scale default True: scale [5])
  const s3 = L.uniformArray(rng, 5, -0.9, 0.9);
  extra.push({ name: 'attn_add/scale', shape: [5], data: s3 });
  const a3 = b.layer('AdditiveAttention', 'attn_add', { use_scale: true, dropout: 0.0, seed: null },
    new KAttention({ name: 'attn_add', mode: 'additive', scale: Array.from(s3), causal: false }), [seq, key]);

  // ---- image branch: 7x9x3
  const im = b.input('image', [7, 9, 3]);
  const aug = (name, cls, cfg, inp) => b.layer(cls, name, Object.assign(cfg, { data_format: 'channels_last' }),
    new KIdentity({ name }), inp);
  const f1 = aug('flip', 'RandomFlip', { seed: null, mode: 'horizontal' }, im);
  const f2 = aug('rot', 'RandomRotation', { factor: [-0.1, 0.1], value_range: [0, 255], seed: null,
    fill_mode: 'reflect', fill_value: 0.0, interpolation: 'bilinear' }, f1);
  const f3 = aug('contrast', 'RandomContrast', { factor: [0.2, 0.2], value_range: [0, 255], seed: null }, f2);
  const rs = (name, cfg, inp) => b.layer(cfg.centerCrop ? 'CenterCrop' : 'Resizing', name,
    cfg.centerCrop ? { height: cfg.h, width: cfg.w, data_format: 'channels_last' }
      : { height: cfg.h, width: cfg.w, interpolation: cfg.method, crop_to_aspect_ratio: !!cfg.crop,
        pad_to_aspect_ratio: !!cfg.pad, fill_mode: 'constant', fill_value: cfg.fill || 0.0,
        antialias: false, data_format: 'channels_last' },
    new KResize(Object.assign({ name }, cfg)), inp);
  const r1 = rs('rs_bilinear', { h: 5, w: 12, method: 'bilinear' }, f3);
  const r2 = rs('rs_nearest', { h: 10, w: 6, method: 'nearest' }, f3);
  const r3 = rs('rs_crop', { h: 6, w: 6, method: 'bilinear', crop: true }, f3);
  const r4 = rs('rs_pad', { h: 8, w: 8, method: 'bilinear', pad: true, fill: 0.5 }, f3);
  const r5 = rs('cc', { h: 4, w: 5, centerCrop: true }, f3);
  const r6 = rs('cc_up', { h: 8, w: 6, centerCrop: true }, f3);

  const parts = [a2, a2s, a3, r1, r2, r3, r4, r5, r6].map((h, i) => flat(`flat_${i}`, h));
  const cat = b.layer('Concatenate', 'cat', { axis: -1 }, tf.layers.concatenate({ axis: -1, name: 'cat' }), parts);
  const model = tf.model({ inputs: b.inputs, outputs: cat.sym, name: 'layer_zoo2' });
  return { b, model, outputs: [cat], extra, tdWeights };
}

// The training model (one input, as `kdc run --fit` takes): Input(7,9,3) ->
// RandomFlip(horizontal) -> Resizing(6,8) -> CenterCrop(4,6) -> Reshape((4,
// 18)) -> TimeDistributed(Dense(6, tanh)) -> Attention(use_scale)(causal) ->
// AdditiveAttention([a, s]) -> Flatten -> Dense(3, softmax).
function buildFit() {
  const b = new G.Builder('functional', 'layer_zoo2_fit', 0x1A7E2F17);
  const extra = [], tdWeights = [];
  const im = b.input('image', [7, 9, 3]);
  const f1 = b.layer('RandomFlip', 'flip', { seed: null, mode: 'horizontal', data_format: 'channels_last' },
    new KIdentity({ name: 'flip' }), im);
  const r1 = b.layer('Resizing', 'resize', { height: 6, width: 8, interpolation: 'bilinear',
    crop_to_aspect_ratio: false, pad_to_aspect_ratio: false, fill_mode: 'constant', fill_value: 0.0,
    antialias: false, data_format: 'channels_last' }, new KResize({ name: 'resize', h: 6, w: 8, method: 'bilinear' }), f1);
  const c1 = b.layer('CenterCrop', 'crop', { height: 4, width: 6, data_format: 'channels_last' },
    new KResize({ name: 'crop', h: 4, w: 6, centerCrop: true }), r1);
  const rs = b.layer('Reshape', 'rows', { target_shape: [4, 18] }, tf.layers.reshape({ targetShape: [4, 18], name: 'rows' }), c1);
  const tfl = tf.layers.timeDistributed({ layer: tf.layers.dense({ units: 6, activation: 'tanh', name: 'dense' }), name: 'td' });
  tdWeights.push([tfl, 'td/dense']);
  const seq = b.layer('TimeDistributed', 'td', { layer: wrapped('Dense', Object.assign({ name: 'dense', trainable: true,
    dtype: G.DP() }, G.denseSpecific(6, 'tanh', true)), [null, 18]) }, tfl, rs);
  const s1 = 0.5 + b.rng();
  extra.push({ name: 'attn/scale', shape: [], data: new Float32Array([s1]) });
  const a1sym = new KAttention({ name: 'attn', mode: 'dot', scale: Math.fround(s1), causal: true }).apply([seq.sym]);
  const a1 = b.layer('Attention', 'attn', { use_scale: true, score_mode: 'dot', dropout: 0.0, seed: null },
    { apply: () => a1sym }, [seq, seq], { use_causal_mask: true });
  const s3 = L.uniformArray(b.rng, 6, -0.9, 0.9);
  extra.push({ name: 'attn_add/scale', shape: [6], data: s3 });
  const a3 = b.layer('AdditiveAttention', 'attn_add', { use_scale: true, dropout: 0.0, seed: null },
    new KAttention({ name: 'attn_add', mode: 'additive', scale: Array.from(s3), causal: false }), [a1, seq]);
  const fl = b.layer('Flatten', 'flat', { data_format: 'channels_last' }, tf.layers.flatten({ name: 'flat' }), a3);
  const hd = tf.layers.dense({ units: 3, activation: 'softmax', name: 'head' });
  tdWeights.push([hd, 'head']);
  const head = b.layer('Dense', 'head', G.denseSpecific(3, 'softmax', true), hd, fl);
  const model = tf.model({ inputs: b.inputs, outputs: head.sym, name: 'layer_zoo2_fit' });
  return { b, model, outputs: [head], extra, tdWeights };
}

// Kernels uniform in +-sqrt(6 / (fan_in + fan_out)), biases in [-0.2, 0.2].
function seedWeights(b, tdWeights) {
  const list = [];
  for (const [layer, prefix] of tdWeights) {
    if (!layer.weights.length) continue;
    const vals = layer.weights.map(w => {
      const shape = w.shape.slice(), n = shape.reduce((p, q) => p * q, 1);
      const leaf = w.originalName.split('/').pop();
      let data;
      if (leaf === 'bias') data = L.uniformArray(b.rng, n, -0.2, 0.2);
      else {
        const fo = shape[shape.length - 1], fi = n / fo, lim = Math.sqrt(6 / (fi + fo));
        data = L.uniformArray(b.rng, n, -lim, lim);
      }
      list.push({ name: `${prefix}/${leaf}`, shape, data, dtype: 'F32' });
      return tf.tensor(data, shape);
    });
    layer.setWeights(vals);
  }
  return list;
}

async function main() {
  await tf.setBackend('cpu');
  await tf.ready();
  fs.mkdirSync(OUT, { recursive: true });
  const { b, model, outputs, extra, tdWeights } = build();
  const weights = seedWeights(b, tdWeights);
  for (const e of extra) weights.push({ name: e.name, shape: e.shape, data: e.data, dtype: 'F32' });
  const write = (f, d) => { fs.writeFileSync(path.join(OUT, f), d); console.log('  wrote', f); };
  write('model.json', L.pyJSON(b.keras3Functional(outputs)) + '\n');
  write('weights.safetensors', L.safetensorsBytes(weights));
  const xs = b.inputs.map((sym, i) => {
    const shape = [BATCH, ...sym.shape.slice(1)], n = shape.reduce((p, q) => p * q, 1);
    const data = L.uniformArray(b.rng, n, -1, 1);
    write(`input${i}.npy`, L.npyBytes(shape, data));
    return tf.tensor(data, shape);
  });
  const y = model.predict(xs, { batchSize: 64 });
  write('expected.npy', L.npyBytes(y.shape, y.dataSync()));
  console.log(`layer_zoo2: outputs ${JSON.stringify(y.shape)}`);

  // the training model: fit_model.json, fit_weights.safetensors,
  // fit_input.npy (37 rows), fit_expected.npy (its predictions)
  const F = buildFit();
  const fw = seedWeights(F.b, F.tdWeights);
  for (const e of F.extra) fw.push({ name: e.name, shape: e.shape, data: e.data, dtype: 'F32' });
  write('fit_model.json', L.pyJSON(F.b.keras3Functional(F.outputs)) + '\n');
  write('fit_weights.safetensors', L.safetensorsBytes(fw));
  const fshape = [BATCH, 7, 9, 3], fdata = L.uniformArray(F.b.rng, fshape.reduce((p, q) => p * q, 1), -1, 1);
  write('fit_input.npy', L.npyBytes(fshape, fdata));
  const fy = F.model.predict(tf.tensor(fdata, fshape), { batchSize: 64 });
  write('fit_expected.npy', L.npyBytes(fy.shape, fy.dataSync()));
}

main().catch(e => { console.error(e); process.exit(1); });
