'use strict';
// Regenerates the Keras reference data in ../../examples/<model>/ with
// TensorFlow.js (pure JS CPU backend). Deterministic: every random value
// comes from the seeded mulberry32 PRNG in lib.js. See README.md.
//
//   cd tests/reference && npm ci && node gen.js
//
// For each model this builds the network in tfjs, sets seeded weights,
// runs model.predict (inference: dropout off) on a seeded batch of 37 rows,
// and writes:
//   model.json          Keras 3 (3.13) model.to_json(), written here by hand
//   model_tfjs.json     tfjs' own layers-model serialization (+ weights.bin)
//   weights.bin         TF.js weight shard (float32 LE, manifest order)
//   weights.safetensors same weights, names = Keras 3 variable paths
//   input.npy / input0.npy, input1.npy
//   expected.npy / expected0.npy, expected1.npy
//   expected_tfjs.npy   only where TF.js/tf.keras-2 semantics differ from
//                       Keras 3 for the same JSON (activations: hard_sigmoid)

const fs = require('fs');
const path = require('path');
const tf = require('@tensorflow/tfjs');
const L = require('./lib');

const OUT = path.resolve(__dirname, '..', '..', 'examples');
const BATCH = 37;

const { KReLU, KSubtract } = require('./tfjs_keras3');
const K3 = require('./keras3_layers');

// ====================================================================
// Keras 3 JSON building blocks (Keras 3.13 field sets).

const DP = () => ({ module: 'keras', class_name: 'DTypePolicy', config: { name: 'float32' }, registered_name: null });
const GU = () => ({ module: 'keras.initializers', class_name: 'GlorotUniform', config: { seed: null }, registered_name: null });
const ZE = () => ({ module: 'keras.initializers', class_name: 'Zeros', config: {}, registered_name: null });

// Layers whose Keras 3.13 serialization carries build_config: those with a
// build() (Dense, Merge subclasses, Concatenate) and those built through the
// default Layer.build on first call (Flatten, Permute). Reshape, Dropout,
// Activation, ReLU, Softmax and InputLayer are marked built in __init__.
const HAS_BUILD_CONFIG = new Set(['Dense', 'Flatten', 'Permute', 'Add', 'Subtract', 'Multiply',
  'Average', 'Maximum', 'Minimum', 'Concatenate', 'Dot', 'BatchNormalization', 'LayerNormalization',
  'GroupNormalization', 'Normalization', 'PReLU', 'EinsumDense', 'MultiHeadAttention',
  'ZeroPadding2D', 'Cropping2D', 'UpSampling2D', 'GlobalMaxPooling2D', 'GlobalAveragePooling2D',
  'GlobalAveragePooling1D', 'RepeatVector', 'Conv2D', 'DepthwiseConv2D', 'MaxPooling2D',
  'AveragePooling2D', 'Embedding', 'Bidirectional']);
const MERGE = new Set(['Add', 'Subtract', 'Multiply', 'Average', 'Maximum', 'Minimum', 'Concatenate']);

function denseSpecific(units, activation, useBias) {
  return {
    units, activation, use_bias: useBias,
    kernel_initializer: GU(), bias_initializer: ZE(),
    kernel_regularizer: null, bias_regularizer: null,
    kernel_constraint: null, bias_constraint: null,
    quantization_config: null,
  };
}

// A model under construction: the tfjs graph and the Keras 3 description
// side by side, so both describe exactly the same network.
class Builder {
  constructor(kind, name, seed) {
    this.kind = kind;           // 'functional' | 'sequential'
    this.name = name;
    this.rng = L.mulberry32(seed);
    this.entries = [];          // Keras 3 layer records, creation order
    this.inputs = [];
    this.denseInit = {};        // layer name -> kernel gain
  }

  input(name, shape) {
    const sym = tf.input({ shape, name });
    this.inputs.push(sym);
    this.entries.push({
      cls: 'InputLayer', name,
      config: { batch_shape: [null, ...shape], dtype: 'float32', sparse: false, ragged: false, name, optional: false },
      inbound: null, outShape: [null, ...shape],
    });
    return { sym, hist: [name, 0, 0], shape: [null, ...shape] };
  }

  // cls: Keras class name; specific: Keras 3 config keys after
  // name/trainable/dtype; tfLayer: the tfjs layer; inp: handle or array of
  // handles (merge layers); kwargs: recorded call kwargs.
  // positional: the inputs are separate positional args (MultiHeadAttention
  // query, value), not one list arg (merge layers).
  layer(cls, name, specific, tfLayer, inp, kwargs = {}, { positional = false } = {}) {
    const ins = Array.isArray(inp) ? inp : [inp];
    const sym = tfLayer.apply(Array.isArray(inp) ? ins.map(h => h.sym) : inp.sym);
    const kt = h => ({ class_name: '__keras_tensor__', config: { shape: h.shape, dtype: 'float32', keras_history: h.hist } });
    const args = positional ? ins.map(kt) : Array.isArray(inp) ? [ins.map(kt)] : [kt(inp)];
    const buildShape = Array.isArray(inp) ? ins.map(h => h.shape) : inp.shape;
    let buildConfig = HAS_BUILD_CONFIG.has(cls) ? { input_shape: buildShape } : undefined;
    if (positional) {  // multi-argument build(): Keras records shapes_dict
      buildConfig = { shapes_dict: { query_shape: ins[0].shape, value_shape: ins[1].shape } };
    }
    this.entries.push({
      cls, name,
      config: Object.assign({ name, trainable: true, dtype: DP() }, specific),
      buildConfig,
      inbound: [{ args, kwargs }],
      outShape: sym.shape.slice(),
    });
    return { sym, hist: [name, 0, 0], shape: sym.shape.slice() };
  }

  // A recurrent layer (or Bidirectional) called on the sequence handle x
  // with initial states (handles, or none): Keras 3 records them as the
  // call's `initial_state` kwarg, tfjs (as tf.keras 2) appends them to the
  // node's inputs.  Returns one handle per output (return_state: several).
  rnnCall(cls, name, specific, tfLayer, x, states = []) {
    const kt = h => ({ class_name: '__keras_tensor__', config: { shape: h.shape, dtype: 'float32', keras_history: h.hist } });
    let syms = tfLayer.apply(x.sym, states.length ? { initialState: states.map(h => h.sym) } : undefined);
    if (!Array.isArray(syms)) syms = [syms];
    this.entries.push({
      cls, name,
      config: Object.assign({ name, trainable: true, dtype: DP() }, specific),
      buildConfig: HAS_BUILD_CONFIG.has(cls) ? { input_shape: x.shape } : undefined,
      inbound: [{ args: [kt(x)], kwargs: states.length ? { initial_state: states.map(kt) } : {} }],
      outShape: syms[0].shape.slice(),
    });
    return syms.map((sym, i) => ({ sym, hist: [name, 0, i], shape: sym.shape.slice() }));
  }

  dense(name, units, activation, inp, { useBias = true, gain = 1, tfActivation } = {}) {
    this.denseInit[name] = gain;
    return this.layer('Dense', name, denseSpecific(units, activation, useBias),
      tf.layers.dense({ units, activation: tfActivation || activation, useBias, name }), inp);
  }

  // ---- Keras 3 JSON
  keras3Functional(outputs) {
    const layers = this.entries.map(e => {
      const o = { module: 'keras.layers', class_name: e.cls, config: e.config, registered_name: null };
      if (e.buildConfig) o.build_config = e.buildConfig;
      o.name = e.name;
      o.inbound_nodes = e.inbound || [];
      return o;
    });
    const trip = h => h.hist.slice();
    const ins = this.inputs.length === 1 ? [this.entries[0].name, 0, 0]
      : this.entries.filter(e => e.cls === 'InputLayer').map(e => [e.name, 0, 0]);
    const outs = outputs.length === 1 ? trip(outputs[0]) : outputs.map(trip);
    return {
      module: 'keras.src.models.functional', class_name: 'Functional',
      config: { name: this.name, trainable: true, layers, input_layers: ins, output_layers: outs },
      registered_name: 'Functional', build_config: { input_shape: null },
    };
  }

  keras3Sequential() {
    const inp = this.entries[0];
    const layers = this.entries.map(e => {
      const o = { module: 'keras.layers', class_name: e.cls, config: e.config, registered_name: null };
      if (e.buildConfig) o.build_config = e.buildConfig;
      return o;
    });
    return {
      module: 'keras', class_name: 'Sequential',
      config: { name: this.name, trainable: true, dtype: DP(), layers, build_input_shape: inp.config.batch_shape },
      registered_name: null, build_config: { input_shape: inp.config.batch_shape },
    };
  }
}

// ====================================================================
// Weights: Glorot-uniform-like kernels (times an optional gain, to push
// pre-activations into the interesting ranges: relu6 > 6, hard_sigmoid
// outside [-3, 3] ...), non-zero small biases in [-0.2, 0.2].

// Non-trivial values for normalisation parameters and state, so that a
// swapped or ignored variable shows up in the outputs.
const STATE_INIT = {
  gamma: [0.6, 1.4], beta: [-0.3, 0.3], moving_mean: [-0.4, 0.4], moving_variance: [0.3, 2.0],
  alpha: [0.05, 0.5], mean: [-0.3, 0.6], variance: [0.2, 1.5],
};

function setSeededWeights(model, builder) {
  const rng = builder.rng;
  const list = [];  // {layer, wname, shape, data}, model.weights order
  for (const layer of model.layers) {
    if (layer.weights.length === 0) continue;
    const gain = builder.denseInit[layer.name];
    if (gain === undefined) throw new Error(`no init for ${layer.name}`);
    const vals = [];
    for (const w of layer.weights) {
      const shape = w.shape.slice();
      // the weight's path inside its layer: 'kernel', 'query/kernel'
      if (!w.originalName.startsWith(layer.name + '/')) throw new Error(`weight ${w.originalName}`);
      const wname = w.originalName.slice(layer.name.length + 1);
      const n = shape.reduce((a, b) => a * b, 1);
      const leaf = wname.split('/').pop();
      let data, dtype = 'float32';
      if (leaf === 'embeddings') {
        data = L.uniformArray(rng, n, -1, 1);
      } else if (leaf === 'kernel' || leaf === 'depthwise_kernel' || leaf === 'pointwise_kernel' ||
                 leaf === 'recurrent_kernel') {
        // fan_in: the contracted dims (two for MultiHeadAttention's output
        // projection), fan_out: the rest
        const nIn = wname === 'attention_output/kernel' ? 2 : 1;
        const fanIn = shape.slice(0, nIn).reduce((a, b) => a * b, 1);
        const fanOut = n / fanIn;
        const lim = gain * Math.sqrt(6 / (fanIn + fanOut));
        data = L.uniformArray(rng, n, -lim, lim);
      } else if (leaf === 'bias') {
        data = L.uniformArray(rng, n, -0.2, 0.2);
      } else if (STATE_INIT[leaf]) {
        const [lo, hi] = STATE_INIT[leaf];
        data = L.uniformArray(rng, n, lo, hi);
      } else if (leaf === 'count') {
        data = new Int32Array([1000]);
        dtype = 'int32';
      } else throw new Error(`unexpected weight ${w.originalName}`);
      vals.push(tf.tensor(data, shape, dtype));
      list.push({ layer: layer.name, wname, shape, data, dtype });
    }
    layer.setWeights(vals);
    vals.forEach(t => t.dispose());
  }
  return list;
}

// ====================================================================
// Model definitions. Each returns {builder, model, outputs(handles)}.

function buildMnistMlp(kind) {
  const name = kind === 'sequential' ? 'sequential' : 'functional';
  const b = new Builder(kind, name, kind === 'sequential' ? 0x5EC0001 : 0x3A15701);
  const x = b.input('input_layer', [28, 28, 1]);
  let h = b.layer('Flatten', 'flatten', { data_format: 'channels_last' }, tf.layers.flatten({ name: 'flatten' }), x);
  h = b.dense('d1', 200, 'relu', h, { useBias: false });
  h = b.layer('Dropout', 'dropout', { rate: L.pyf(0.4), seed: null, noise_shape: null },
    tf.layers.dropout({ rate: 0.4, name: 'dropout' }), h, { training: false });
  h = b.dense('d2', 10, 'softmax', h);
  let model;
  if (kind === 'sequential') {
    // Same layers, as a tfjs Sequential (tfjs serializes it in its own
    // Sequential form: batch_input_shape on the first layer).
    model = tf.sequential({ name: 'sequential' });
    model.add(tf.layers.flatten({ name: 'flatten', inputShape: [28, 28, 1] }));
    model.add(tf.layers.dense({ units: 200, activation: 'relu', useBias: false, name: 'd1' }));
    model.add(tf.layers.dropout({ rate: 0.4, name: 'dropout' }));
    model.add(tf.layers.dense({ units: 10, activation: 'softmax', name: 'd2' }));
  } else {
    model = tf.model({ inputs: b.inputs, outputs: h.sym, name });
  }
  return { b, model, outputs: [h], inputRanges: [[0, 1]] };
}

// The activations model. hsMode: 'keras3' (reference) or 'tfjs' (stock tfjs
// hardSigmoid, i.e. what tf.keras 2 / TF.js give for the same TF.js JSON).
function buildActivations(hsMode) {
  const b = new Builder('functional', 'activations', 0xAC71F00);
  const x = b.input('input_layer', [16]);
  const trunk = b.dense('trunk', 24, 'linear', x, { gain: 3 });
  const hsAct = hsMode === 'keras3' ? 'hard_sigmoid' : 'hardSigmoid';
  const outs = [];
  // [name, units, Keras 3 activation string, gain, tfjs activation]
  const branches = [
    ['dense_linear', 8, 'linear', 1],
    ['dense_relu', 8, 'relu', 1.5],
    ['dense_sigmoid', 10, 'sigmoid', 1.5],
    ['dense_tanh', 12, 'tanh', 1],
    ['dense_softmax', 9, 'softmax', 1.5],
    ['dense_gelu', 16, 'gelu', 1.5],
    // Keras 3 serializes activation="swish" as "silu"; the tfjs model uses
    // tfjs' stock 'swish' (same function x*sigmoid(x)), so model_tfjs.json
    // says "swish" while model.json says "silu".
    ['dense_silu', 10, 'silu', 1.5, 'swish'],
    ['dense_elu', 11, 'elu', 1.5],
    ['dense_selu', 13, 'selu', 1.5],
    ['dense_softplus', 8, 'softplus', 1.5],
    ['dense_softsign', 9, 'softsign', 1.5],
    ['dense_relu6', 14, 'relu6', 2.5],
    ['dense_leaky_relu', 12, 'leaky_relu', 1.5],
    ['dense_exponential', 8, 'exponential', 1],
    ['dense_hard_sigmoid', 15, 'hard_sigmoid', 2.5, hsAct],
  ];
  const byName = {};
  for (const [name, units, act, gain, tfAct] of branches) {
    byName[name] = b.dense(name, units, act, trunk, { gain, tfActivation: tfAct });
    outs.push(byName[name]);
  }
  // a short chain: relu -> sigmoid
  outs.push(b.dense('chain_sigmoid', 8, 'sigmoid', byName.dense_relu, { gain: 2 }));
  // Dense(linear) + Activation('gelu')
  const preGelu = b.dense('pre_gelu', 12, 'linear', trunk, { gain: 1.5 });
  outs.push(b.layer('Activation', 'act_gelu', { activation: 'gelu' },
    tf.layers.activation({ activation: 'gelu', name: 'act_gelu' }), preGelu));
  // ReLU layers with every parameter combination path of ReLU.static_call
  const preRelu = b.dense('pre_relu', 20, 'linear', trunk, { gain: 3 });
  const relus = [
    ['relu_full', 4.5, 0.1, 0.3],     // clip + threshold + negative slope
    ['relu_plain', null, 0.0, 0.0],    // plain relu
    ['relu_leaky', null, 0.25, 0.0],   // leaky path
    ['relu_max6', 6.0, 0.0, 0.0],      // relu6 path
  ];
  for (const [name, mv, ns, th] of relus) {
    outs.push(b.layer('ReLU', name,
      { max_value: mv === null ? null : L.pyf(mv), negative_slope: L.pyf(ns), threshold: L.pyf(th) },
      new KReLU({ name, max_value: mv, negative_slope: ns, threshold: th }), preRelu));
  }
  // Activation('hard_sigmoid') as a standalone layer too
  outs.push(b.layer('Activation', 'act_hard_sigmoid', { activation: 'hard_sigmoid' },
    tf.layers.activation({ activation: hsAct, name: 'act_hard_sigmoid' }), preRelu));
  // Softmax layer, axis -1 (Keras records mask=None in the call kwargs)
  const preSm = b.dense('pre_softmax', 18, 'linear', trunk, { gain: 2 });
  outs.push(b.layer('Softmax', 'softmax', { axis: -1 },
    tf.layers.softmax({ axis: -1, name: 'softmax' }), preSm, { mask: null }));
  const cat = b.layer('Concatenate', 'concatenate', { axis: -1 },
    tf.layers.concatenate({ axis: -1, name: 'concatenate' }), outs);
  const model = tf.model({ inputs: b.inputs, outputs: cat.sym, name: 'activations' });
  return { b, model, outputs: [cat], inputRanges: [[-1, 1]] };
}

function buildMergeReshape() {
  const b = new Builder('functional', 'merge_reshape', 0x3E96E00);
  const a = b.input('in_a', [12]);
  const bb = b.input('in_b', [3, 4]);
  const ra = b.layer('Reshape', 'reshape_a', { target_shape: [3, 4] },
    tf.layers.reshape({ targetShape: [3, 4], name: 'reshape_a' }), a);
  const pb = b.layer('Permute', 'permute_b', { dims: [2, 1] },
    tf.layers.permute({ dims: [2, 1], name: 'permute_b' }), bb);                  // (4,3)
  const rb = b.layer('Reshape', 'reshape_b', { target_shape: [-1, 4] },
    tf.layers.reshape({ targetShape: [-1, 4], name: 'reshape_b' }), pb);         // (3,4)
  const add = b.layer('Add', 'add', {}, tf.layers.add({ name: 'add' }), [ra, bb]);
  const sub = b.layer('Subtract', 'subtract', {}, new KSubtract({ name: 'subtract' }), [ra, rb]);
  const mul = b.layer('Multiply', 'multiply', {}, tf.layers.multiply({ name: 'multiply' }), [ra, bb]);
  const avg = b.layer('Average', 'average', {}, tf.layers.average({ name: 'average' }), [ra, bb, rb]);
  const mx = b.layer('Maximum', 'maximum', {}, tf.layers.maximum({ name: 'maximum' }), [ra, rb]);
  const mn = b.layer('Minimum', 'minimum', {}, tf.layers.minimum({ name: 'minimum' }), [bb, rb]);
  const catLast = b.layer('Concatenate', 'concat_last', { axis: -1 },
    tf.layers.concatenate({ axis: -1, name: 'concat_last' }), [add, sub, mul]);    // (3,12)
  const catMid = b.layer('Concatenate', 'concat_axis1', { axis: 1 },
    tf.layers.concatenate({ axis: 1, name: 'concat_axis1' }), [avg, mx, mn]);     // (9,4)
  const flat = b.layer('Flatten', 'flatten', { data_format: 'channels_last' },
    tf.layers.flatten({ name: 'flatten' }), catLast);                           // (36)
  const head0 = b.dense('head0', 8, 'tanh', flat);                             // (8)
  const perm = b.layer('Permute', 'permute_mid', { dims: [2, 1] },
    tf.layers.permute({ dims: [2, 1], name: 'permute_mid' }), catMid);          // (4,9)
  const head1 = b.dense('head1', 5, 'sigmoid', perm);                          // (4,5) Dense on rank 3
  const model = tf.model({ inputs: b.inputs, outputs: [head0.sym, head1.sym], name: 'merge_reshape' });
  return { b, model, outputs: [head0, head1], inputRanges: [[-1, 1], [-1, 1]] };
}

// ---- Keras 3.13 config key sets of the layers below
const ON = () => ({ module: 'keras.initializers', class_name: 'Ones', config: {}, registered_name: null });
const normSpecific = extra => Object.assign(extra, {
  beta_initializer: ZE(), gamma_initializer: ON(), beta_regularizer: null, gamma_regularizer: null,
  beta_constraint: null, gamma_constraint: null,
});
const einsumSpecific = (equation, outputShape, biasAxes) => ({
  output_shape: outputShape, equation, activation: 'linear', bias_axes: biasAxes,
  kernel_initializer: GU(), bias_initializer: ZE(), kernel_regularizer: null, bias_regularizer: null,
  kernel_constraint: null, bias_constraint: null, quantization_config: null,
});

// Input(16, 32) -> MultiHeadAttention(4 heads, key_dim 8) self-attention ->
// Add -> LayerNormalization -> Dense(64, relu) -> Dense(32) -> Add ->
// LayerNormalization -> GlobalAveragePooling1D -> Dense(5, softmax).
function buildTransformerBlock() {
  const b = new Builder('functional', 'transformer_block', 0x7F0B10C);
  const x = b.input('input_layer', [16, 32]);
  b.denseInit.mha = 1;
  const att = b.layer('MultiHeadAttention', 'mha', {
    num_heads: 4, key_dim: 8, value_dim: 8, dropout: L.pyf(0), use_bias: true, output_shape: null,
    attention_axes: [1], kernel_initializer: GU(), bias_initializer: ZE(), kernel_regularizer: null,
    bias_regularizer: null, activity_regularizer: null, kernel_constraint: null, bias_constraint: null,
    seed: null,
  }, new K3.KMultiHeadAttention({ name: 'mha', num_heads: 4, key_dim: 8, value_dim: 8 }), [x, x], {},
  { positional: true });
  const add1 = b.layer('Add', 'add', {}, tf.layers.add({ name: 'add' }), [x, att]);
  b.denseInit.ln1 = 1;
  const ln = (name, h) => b.layer('LayerNormalization', name,
    normSpecific({ axis: [-1], epsilon: L.pyf(0.001), center: true, scale: true }),
    tf.layers.layerNormalization({ axis: -1, epsilon: 0.001, name }), h);
  const n1 = ln('ln1', add1);
  const f1 = b.dense('ffn1', 64, 'relu', n1);
  const f2 = b.dense('ffn2', 32, 'linear', f1);
  const add2 = b.layer('Add', 'add_1', {}, tf.layers.add({ name: 'add_1' }), [n1, f2]);
  b.denseInit.ln2 = 1;
  const n2 = ln('ln2', add2);
  const gap = b.layer('GlobalAveragePooling1D', 'gap', { data_format: 'channels_last', keepdims: false },
    tf.layers.globalAveragePooling1d({ name: 'gap' }), n2);
  const head = b.dense('head', 5, 'softmax', gap);
  const model = tf.model({ inputs: b.inputs, outputs: head.sym, name: 'transformer_block' });
  return { b, model, outputs: [head], inputRanges: [[-1, 1]] };
}

// Many small layers in branches concatenated into one output vector.
function buildNormZoo() {
  const b = new Builder('functional', 'norm_zoo', 0x2005EED);
  const x = b.input('input_layer', [6, 6, 4]);
  const L1 = (cls, name, specific, tfl, inp, kw) => {
    b.denseInit[name] = 1;
    return b.layer(cls, name, specific, tfl, inp, kw);
  };
  const r = L1('Rescaling', 'rescaling', { scale: L.pyf(0.5), offset: L.pyf(0.25) },
    tf.layers.rescaling({ scale: 0.5, offset: 0.25, name: 'rescaling' }), x);
  const nr = L1('Normalization', 'normalization', { axis: [-1], invert: false, mean: null, variance: null },
    new K3.KNormalization({ name: 'normalization', axis: [-1] }), r);
  const bn = L1('BatchNormalization', 'bn', normSpecific({
    axis: -1, momentum: L.pyf(0.99), epsilon: L.pyf(0.001), center: true, scale: true,
    moving_mean_initializer: ZE(), moving_variance_initializer: ON(), synchronized: false,
  }), tf.layers.batchNormalization({ axis: -1, epsilon: 0.001, name: 'bn' }), nr, { mask: null });
  const gn = L1('GroupNormalization', 'gn', normSpecific({ groups: 2, axis: -1, epsilon: L.pyf(0.001),
    center: true, scale: true }), new K3.KGroupNormalization({ name: 'gn', groups: 2 }), bn);
  const pr = L1('PReLU', 'prelu', { alpha_initializer: ZE(), alpha_regularizer: null,
    alpha_constraint: null, shared_axes: [1, 2] }, tf.layers.prelu({ sharedAxes: [1, 2], name: 'prelu' }), gn);
  const zp = L1('ZeroPadding2D', 'zero_pad', { padding: [[1, 2], [0, 1]], data_format: 'channels_last' },
    tf.layers.zeroPadding2d({ padding: [[1, 2], [0, 1]], name: 'zero_pad' }), pr);          // (9,7,4)
  const cr = L1('Cropping2D', 'crop', { cropping: [[2, 1], [1, 0]], data_format: 'channels_last' },
    tf.layers.cropping2D({ cropping: [[2, 1], [1, 0]], name: 'crop' }), zp);                // (6,6,4)
  const up = L1('UpSampling2D', 'up', { size: [2, 1], data_format: 'channels_last', interpolation: 'nearest' },
    tf.layers.upSampling2d({ size: [2, 1], name: 'up' }), cr);                               // (12,6,4)
  const gmp = L1('GlobalMaxPooling2D', 'gmp', { data_format: 'channels_last', keepdims: false },
    tf.layers.globalMaxPooling2d({ name: 'gmp' }), up);
  const gap = L1('GlobalAveragePooling2D', 'gap', { data_format: 'channels_last', keepdims: false },
    tf.layers.globalAveragePooling2d({ name: 'gap' }), up);
  const v = L1('Concatenate', 'concat_pool', { axis: -1 },
    tf.layers.concatenate({ axis: -1, name: 'concat_pool' }), [gmp, gap]);                  // (8)
  const d1 = b.dense('d1', 10, 'linear', v, { gain: 2 });
  const lr = L1('LeakyReLU', 'leaky', { negative_slope: L.pyf(0.3) },
    tf.layers.leakyReLU({ alpha: 0.3, name: 'leaky' }), d1);
  const el = L1('ELU', 'elu', { alpha: L.pyf(1.0) }, tf.layers.elu({ alpha: 1.0, name: 'elu' }), d1);
  const un = L1('UnitNormalization', 'unit_norm', { axis: -1 },
    new K3.KUnitNormalization({ name: 'unit_norm', axis: -1 }), v);
  const rv = L1('RepeatVector', 'repeat', { n: 3 }, tf.layers.repeatVector({ n: 3, name: 'repeat' }), lr);
  const ed1 = L1('EinsumDense', 'einsum_seq', einsumSpecific('abc,cd->abd', [3, 6], 'd'),
    new K3.KEinsumDense({ name: 'einsum_seq', equation: 'abc,cd->abd', output_shape: [3, 6], bias_axes: 'd' }), rv);
  const ed2 = L1('EinsumDense', 'einsum_vec', einsumSpecific('ab,bcd->acd', [3, 6], 'cd'),
    new K3.KEinsumDense({ name: 'einsum_vec', equation: 'ab,bcd->acd', output_shape: [3, 6], bias_axes: 'cd' }), el);
  const dt1 = L1('Dot', 'dot_cos', { axes: -1, normalize: true },
    tf.layers.dot({ axes: -1, normalize: true, name: 'dot_cos' }), [ed1, ed2]);            // (3,3)
  const dt2 = L1('Dot', 'dot_vec', { axes: 1, normalize: false },
    tf.layers.dot({ axes: 1, name: 'dot_vec' }), [lr, el]);                                  // (1)
  const flat = (name, h) => L1('Flatten', name, { data_format: 'channels_last' },
    tf.layers.flatten({ name }), h);
  const cat = L1('Concatenate', 'concat_out', { axis: -1 }, tf.layers.concatenate({ axis: -1, name: 'concat_out' }),
    [flat('flat_dot', dt1), dt2, el, un, flat('flat_einsum', ed1)]);
  const model = tf.model({ inputs: b.inputs, outputs: cat.sym, name: 'norm_zoo' });
  return { b, model, outputs: [cat], inputRanges: [[-1, 1]] };
}

// ---- convolutions, pooling, Embedding (Keras 3.13 config keys)
const convSpecific = (extra, init = 'kernel') => Object.assign(extra, {
  data_format: 'channels_last', dilation_rate: extra.dilation_rate || [1, 1],
}, init === 'kernel' ? { groups: 1 } : {}, {
  activation: extra.activation || 'linear', use_bias: true,
  [`${init}_initializer`]: GU(), bias_initializer: ZE(), [`${init}_regularizer`]: null,
  bias_regularizer: null, activity_regularizer: null, [`${init}_constraint`]: null,
  bias_constraint: null,
});
const poolSpecific = (size, strides, padding) => ({
  pool_size: size, padding, strides, data_format: 'channels_last',
});

// Input(16,16,3) -> Conv2D(8,3,same,relu) -> BatchNormalization -> MaxPooling2D
// -> Conv2D(16,3,strides 2,valid) -> DepthwiseConv2D(3,same, depth_multiplier 1)
// -> AveragePooling2D(2,same: the edge windows average only their valid
// elements) -> GlobalAveragePooling2D -> Dense(10, softmax).
function buildSmallCnn() {
  const b = new Builder('functional', 'small_cnn', 0xC0417E5);
  b.depthwise = new Set(['dw']);
  const x = b.input('input_layer', [16, 16, 3]);
  const L1 = (cls, name, specific, tfl, inp, kw) => {
    b.denseInit[name] = 1;
    return b.layer(cls, name, specific, tfl, inp, kw);
  };
  const c1 = L1('Conv2D', 'conv1', convSpecific({ filters: 8, kernel_size: [3, 3], strides: [1, 1],
    padding: 'same', activation: 'relu' }),
  tf.layers.conv2d({ filters: 8, kernelSize: 3, padding: 'same', activation: 'relu', name: 'conv1' }), x);
  const bn = L1('BatchNormalization', 'bn', normSpecific({
    axis: -1, momentum: L.pyf(0.99), epsilon: L.pyf(0.001), center: true, scale: true,
    moving_mean_initializer: ZE(), moving_variance_initializer: ON(), synchronized: false,
  }), tf.layers.batchNormalization({ axis: -1, epsilon: 0.001, name: 'bn' }), c1, { mask: null });
  const mp = L1('MaxPooling2D', 'pool1', poolSpecific([2, 2], [2, 2], 'valid'),
    tf.layers.maxPooling2d({ poolSize: 2, name: 'pool1' }), bn);                     // (8,8,8)
  const c2 = L1('Conv2D', 'conv2', convSpecific({ filters: 16, kernel_size: [3, 3], strides: [2, 2],
    padding: 'valid' }),
  tf.layers.conv2d({ filters: 16, kernelSize: 3, strides: 2, padding: 'valid', name: 'conv2' }), mp); // (3,3,16)
  const dw = L1('DepthwiseConv2D', 'dw', convSpecific({ kernel_size: [3, 3], strides: [1, 1],
    padding: 'same', depth_multiplier: 1 }, 'depthwise'),
  tf.layers.depthwiseConv2d({ kernelSize: 3, padding: 'same', name: 'dw' }), c2);  // (3,3,16)
  const ap = L1('AveragePooling2D', 'avg', poolSpecific([2, 2], [2, 2], 'same'),
    tf.layers.averagePooling2d({ poolSize: 2, padding: 'same', name: 'avg' }), dw); // (2,2,16)
  const gap = L1('GlobalAveragePooling2D', 'gap', { data_format: 'channels_last', keepdims: false },
    tf.layers.globalAveragePooling2d({ name: 'gap' }), ap);
  const head = b.dense('head', 10, 'softmax', gap, { gain: 2 });
  const model = tf.model({ inputs: b.inputs, outputs: head.sym, name: 'small_cnn' });
  return { b, model, outputs: [head], inputRanges: [[-1, 1]] };
}

// Input(20) of integer-valued float ids -> Embedding(1000, 16) ->
// GlobalAveragePooling1D -> Dense(1, sigmoid).  Keras casts the float ids to
// int32 (tfjs does the same).
function buildTextClassifier() {
  const b = new Builder('functional', 'text_classifier', 0x7E47C1A);
  const x = b.input('input_layer', [20]);
  b.denseInit.embedding = 1;
  const e = b.layer('Embedding', 'embedding', {
    input_dim: 1000, output_dim: 16, embeddings_initializer: { module: 'keras.initializers',
      class_name: 'RandomUniform', config: { seed: null, minval: -0.05, maxval: 0.05 },
      registered_name: null },
    embeddings_regularizer: null, activity_regularizer: null, embeddings_constraint: null,
    mask_zero: false, lora_rank: null,
  }, tf.layers.embedding({ inputDim: 1000, outputDim: 16, name: 'embedding' }), x);
  b.denseInit.gap = 1;
  const gap = b.layer('GlobalAveragePooling1D', 'gap', { data_format: 'channels_last', keepdims: false },
    tf.layers.globalAveragePooling1d({ name: 'gap' }), e);
  const head = b.dense('head', 1, 'sigmoid', gap, { gain: 2 });
  const model = tf.model({ inputs: b.inputs, outputs: head.sym, name: 'text_classifier' });
  return { b, model, outputs: [head], inputRanges: [[0, 1000]], integerInputs: true };
}

// Embedding(inputDim, outputDim) named 'embedding' (Keras 3 config, RandomUniform(-0.05, 0.05)).
function embedding(b, x, inputDim, outputDim) {
  b.denseInit.embedding = 1;
  return b.layer('Embedding', 'embedding', {
    input_dim: inputDim, output_dim: outputDim, embeddings_initializer: { module: 'keras.initializers',
      class_name: 'RandomUniform', config: { seed: null, minval: -0.05, maxval: 0.05 },
      registered_name: null },
    embeddings_regularizer: null, activity_regularizer: null, embeddings_constraint: null,
    mask_zero: false, lora_rank: null,
  }, tf.layers.embedding({ inputDim, outputDim, name: 'embedding' }), x);
}

// Keras 3 config of LSTM / GRU / SimpleRNN (keras/src/layers/rnn/*.py get_config).
function rnnSpecific(cls, units, extra = {}) {
  const init = (c, cfg = {}) => ({ module: 'keras.initializers', class_name: c, config: cfg, registered_name: null });
  const s = {
    return_sequences: false, return_state: false, go_backwards: false, stateful: false,
    unroll: false, zero_output_for_mask: false, units, activation: 'tanh',
  };
  if (cls !== 'SimpleRNN') s.recurrent_activation = 'sigmoid';
  Object.assign(s, {
    use_bias: true, kernel_initializer: init('GlorotUniform', { seed: null }),
    recurrent_initializer: init('Orthogonal', { seed: null, gain: 1.0 }),
    bias_initializer: init('Zeros'),
  });
  if (cls === 'LSTM') s.unit_forget_bias = true;
  Object.assign(s, {
    kernel_regularizer: null, recurrent_regularizer: null, bias_regularizer: null,
    activity_regularizer: null, kernel_constraint: null, recurrent_constraint: null,
    bias_constraint: null, dropout: 0.0, recurrent_dropout: 0.0, seed: null,
  });
  if (cls === 'GRU') s.reset_after = true;
  return Object.assign(s, extra);
}

// Embedding -> LSTM (sequences) -> LSTM (go_backwards, last state) -> Dense.
function buildLstmText() {
  const b = new Builder('functional', 'lstm_text', 0x157A1);
  const x = b.input('input_layer', [10]);
  const e = embedding(b, x, 50, 8);
  b.denseInit.lstm = 1.5;
  const l1 = b.layer('LSTM', 'lstm', rnnSpecific('LSTM', 12, { return_sequences: true }),
    tf.layers.lstm({ units: 12, recurrentActivation: 'sigmoid', returnSequences: true, name: 'lstm' }), e);
  b.denseInit.lstm_1 = 1.5;
  const l2 = b.layer('LSTM', 'lstm_1', rnnSpecific('LSTM', 8, { go_backwards: true }),
    tf.layers.lstm({ units: 8, recurrentActivation: 'sigmoid', goBackwards: true, name: 'lstm_1' }), l1);
  const head = b.dense('head', 3, 'softmax', l2, { gain: 2 });
  const model = tf.model({ inputs: b.inputs, outputs: head.sym, name: 'lstm_text' });
  return { b, model, outputs: [head], inputRanges: [[0, 50]], integerInputs: true };
}

// GRU (reset_after false: tfjs has no reset_after=true) -> SimpleRNN
// (return_state: the last output twice) -> Dense.
function buildGruRnn() {
  const b = new Builder('functional', 'gru_rnn', 0x62A1);
  const x = b.input('input_layer', [8, 6]);
  b.denseInit.gru = 1.5;
  const g = b.layer('GRU', 'gru', rnnSpecific('GRU', 10, { return_sequences: true, reset_after: false }),
    tf.layers.gru({ units: 10, recurrentActivation: 'sigmoid', returnSequences: true, name: 'gru' }), x);
  b.denseInit.simple_rnn = 1.5;
  const r = b.layer('SimpleRNN', 'simple_rnn', rnnSpecific('SimpleRNN', 7, { go_backwards: true }),
    tf.layers.simpleRNN({ units: 7, goBackwards: true, name: 'simple_rnn' }), g);
  const head = b.dense('head', 4, 'softmax', r, { gain: 2 });
  const model = tf.model({ inputs: b.inputs, outputs: head.sym, name: 'gru_rnn' });
  return { b, model, outputs: [head], inputRanges: [[-1, 1]] };
}

// Keras 3 Bidirectional config: config.layer is the forward layer
// ("forward_<name>"), config.backward_layer the derived backward one
// ("backward_<name>", go_backwards true), both with their build_config
// (keras/src/layers/rnn/bidirectional.py get_config).
function bidirSpecific(cls, name, units, mergeMode, inShape, extra = {}) {
  const inner = (n, back) => ({
    module: 'keras.layers', class_name: cls,
    config: Object.assign({ name: n, trainable: true, dtype: DP() },
      rnnSpecific(cls, units, Object.assign({}, extra, back ? { go_backwards: true } : {}))),
    registered_name: null, build_config: { input_shape: inShape },
  });
  return { merge_mode: mergeMode, layer: inner(`forward_${name}`, false),
    backward_layer: inner(`backward_${name}`, true) };
}

// Embedding -> Bidirectional(LSTM, sequences, concat) -> Bidirectional(GRU
// reset_after false, sum) -> Dense.
function buildBidirRnn() {
  const b = new Builder('functional', 'bidir_rnn', 0xB1D1);
  const x = b.input('input_layer', [9]);
  const e = embedding(b, x, 40, 6);
  b.denseInit.bidirectional = 1.5;
  const l1 = b.layer('Bidirectional', 'bidirectional',
    bidirSpecific('LSTM', 'lstm', 7, 'concat', e.shape, { return_sequences: true }),
    tf.layers.bidirectional({ name: 'bidirectional', mergeMode: 'concat',
      layer: tf.layers.lstm({ units: 7, recurrentActivation: 'sigmoid', returnSequences: true, name: 'lstm' }) }), e);
  b.entries[b.entries.length - 1].innerCls = 'LSTM';
  b.denseInit.bidirectional_1 = 1.5;
  const l2 = b.layer('Bidirectional', 'bidirectional_1',
    bidirSpecific('GRU', 'gru', 5, 'sum', l1.shape, { reset_after: false }),
    tf.layers.bidirectional({ name: 'bidirectional_1', mergeMode: 'sum',
      layer: tf.layers.gru({ units: 5, recurrentActivation: 'sigmoid', name: 'gru' }) }), l1);
  b.entries[b.entries.length - 1].innerCls = 'GRU';
  const head = b.dense('head', 3, 'softmax', l2, { gain: 2 });
  const model = tf.model({ inputs: b.inputs, outputs: head.sym, name: 'bidir_rnn' });
  return { b, model, outputs: [head], inputRanges: [[0, 40]], integerInputs: true };
}

// Encoder-decoder: the decoders start from the encoders' final states
// (Keras `initial_state`).  enc (7, 5) -> Bidirectional(LSTM(6,
// return_state)) `encoder` -> y, h_f, c_f, h_b, c_b; GRU(5, return_state,
// reset_after false) `gru_enc` -> y, h.  dec (6, 4) ->
// Bidirectional(LSTM(6, sequences))(dec, initial_state=[h_f, c_f, h_b, c_b])
// `bi_dec`; LSTM(6, sequences)(dec, initial_state=[h_b, c_b]) `decoder`;
// GRU(5, sequences, go_backwards)(dec, initial_state=h) `gru_dec`;
// SimpleRNN(5, sequences)(dec, initial_state=h) `rnn_dec`; Concatenate ->
// Dense(3, softmax) per step.
function buildSeq2seq() {
  const b = new Builder('functional', 'seq2seq', 0x5E25);
  const enc = b.input('enc', [7, 5]);
  const dec = b.input('dec', [6, 4]);
  const lstm = (name, o) => tf.layers.lstm(Object.assign({ units: 6, recurrentActivation: 'sigmoid', name }, o));
  b.denseInit.encoder = 1.5;
  const [, hf, cf, hb, cb] = b.rnnCall('Bidirectional', 'encoder',
    bidirSpecific('LSTM', 'lstm', 6, 'concat', enc.shape, { return_state: true }),
    tf.layers.bidirectional({ name: 'encoder', mergeMode: 'concat', layer: lstm('lstm', { returnState: true }) }), enc);
  b.entries[b.entries.length - 1].innerCls = 'LSTM';
  b.denseInit.gru_enc = 1.5;
  const [, hg] = b.rnnCall('GRU', 'gru_enc', rnnSpecific('GRU', 5, { return_state: true, reset_after: false }),
    tf.layers.gru({ units: 5, recurrentActivation: 'sigmoid', returnState: true, name: 'gru_enc' }), enc);
  b.denseInit.bi_dec = 1.5;
  const [bd] = b.rnnCall('Bidirectional', 'bi_dec',
    bidirSpecific('LSTM', 'lstm_d', 6, 'concat', dec.shape, { return_sequences: true }),
    tf.layers.bidirectional({ name: 'bi_dec', mergeMode: 'concat', layer: lstm('lstm_d', { returnSequences: true }) }),
    dec, [hf, cf, hb, cb]);
  b.entries[b.entries.length - 1].innerCls = 'LSTM';
  b.denseInit.decoder = 1.5;
  const [ld] = b.rnnCall('LSTM', 'decoder', rnnSpecific('LSTM', 6, { return_sequences: true }),
    lstm('decoder', { returnSequences: true }), dec, [hb, cb]);
  b.denseInit.gru_dec = 1.5;
  const [gd] = b.rnnCall('GRU', 'gru_dec',
    rnnSpecific('GRU', 5, { return_sequences: true, go_backwards: true, reset_after: false }),
    tf.layers.gru({ units: 5, recurrentActivation: 'sigmoid', returnSequences: true, goBackwards: true, name: 'gru_dec' }),
    dec, [hg]);
  b.denseInit.rnn_dec = 1.5;
  const [rd] = b.rnnCall('SimpleRNN', 'rnn_dec', rnnSpecific('SimpleRNN', 5, { return_sequences: true }),
    tf.layers.simpleRNN({ units: 5, returnSequences: true, name: 'rnn_dec' }), dec, [hg]);
  const cat = b.layer('Concatenate', 'cat', { axis: -1 }, tf.layers.concatenate({ axis: -1, name: 'cat' }),
    [bd, ld, gd, rd]);
  const head = b.dense('head', 3, 'softmax', cat, { gain: 2 });
  const model = tf.model({ inputs: b.inputs, outputs: head.sym, name: 'seq2seq' });
  return { b, model, outputs: [head], inputRanges: [[-1, 1], [-1, 1]] };
}

// ====================================================================
// Writers

async function tfjsArtifacts(model) {
  let art;
  await model.save(tf.io.withSaveHandler(async a => {
    art = a;
    return { modelArtifactsInfo: { dateSaved: new Date(0), modelTopologyType: 'JSON' } };
  }));
  return art;
}

function write(dir, file, data) {
  fs.writeFileSync(path.join(dir, file), data);
  console.log('  wrote', path.relative(path.resolve(__dirname, '..', '..'), path.join(dir, file)));
}

// `node gen.js small_cnn text_classifier` regenerates only those folders.
const ONLY = process.argv.slice(2);

// Keras 3 names the DepthwiseConv2D kernel `kernel`; tfjs (tf.keras 2) says
// `depthwise_kernel` (SeparableConv keeps `depthwise_kernel` in both).
// Keras 3 keeps a recurrent layer's weights under its cell: `lstm/lstm_cell/kernel`.
const RNN_CELL = { LSTM: 'lstm_cell', GRU: 'gru_cell', SimpleRNN: 'simple_rnn_cell' };
const k3WeightName = (b, w) => {
  const e = b.entries.find(x => x.name === w.layer);
  if (e && RNN_CELL[e.cls]) return `${RNN_CELL[e.cls]}/${w.wname}`;
  // Bidirectional: tfjs 'forward_lstm/kernel' -> Keras 3 'forward_lstm/lstm_cell/kernel'
  if (e && e.innerCls) {
    const [sub, leaf] = w.wname.split('/');
    return `${sub}/${RNN_CELL[e.innerCls]}/${leaf}`;
  }
  return b.depthwise && b.depthwise.has(w.layer) && w.wname === 'depthwise_kernel' ? 'kernel' : w.wname;
};

async function emit(folder, built, { sequentialPrefix = null, extraExpected = null } = {}) {
  if (ONLY.length && !ONLY.includes(folder)) return;
  const dir = path.join(OUT, folder);
  fs.mkdirSync(dir, { recursive: true });
  const { b, model, outputs, inputRanges } = built;
  const wlist = setSeededWeights(model, b);

  // ---- Keras 3 JSON
  const k3 = b.kind === 'sequential' ? b.keras3Sequential() : b.keras3Functional(outputs);
  write(dir, 'model.json', L.pyJSON(k3) + '\n');

  // ---- safetensors (Keras 3 variable paths)
  const prefix = sequentialPrefix ? sequentialPrefix + '/' : '';
  // Keras stores Normalization's count as int64
  write(dir, 'weights.safetensors', L.safetensorsBytes(
    wlist.map(w => ({ name: `${prefix}${w.layer}/${k3WeightName(b, w)}`,
      shape: w.shape, data: w.data,
      dtype: w.dtype === 'int32' ? 'I64' : 'F32' }))));

  // ---- TF.js layers-model
  const art = await tfjsArtifacts(model);
  for (const s of art.weightSpecs) {
    if (!/^[^/]+(\/[^/]+)+$/.test(s.name)) throw new Error(`unexpected tfjs weight name ${s.name}`);
  }
  const tfjsJson = {
    format: art.format, generatedBy: art.generatedBy, convertedBy: art.convertedBy,
    modelTopology: art.modelTopology,
    weightsManifest: [{ paths: ['weights.bin'], weights: art.weightSpecs }],
  };
  write(dir, 'model_tfjs.json', JSON.stringify(tfjsJson, null, 1) + '\n');
  write(dir, 'weights.bin', Buffer.from(art.weightData));

  // ---- inputs (seeded) and predictions
  const xs = [];
  const multi = b.inputs.length > 1;
  b.inputs.forEach((sym, i) => {
    const shape = [BATCH, ...sym.shape.slice(1)];
    const n = shape.reduce((p, q) => p * q, 1);
    const [lo, hi] = inputRanges[i];
    let data = L.uniformArray(b.rng, n, lo, hi);
    if (built.integerInputs) data = data.map(Math.floor);
    xs.push(tf.tensor(data, shape));
    write(dir, multi ? `input${i}.npy` : 'input.npy', L.npyBytes(shape, data));
  });
  const predict = m => {
    let ys = m.predict(multi ? xs : xs[0], { batchSize: 64 });
    return Array.isArray(ys) ? ys : [ys];
  };
  const ys = predict(model);
  ys.forEach((y, i) => {
    write(dir, ys.length > 1 ? `expected${i}.npy` : 'expected.npy', L.npyBytes(y.shape, y.dataSync()));
  });
  if (extraExpected) {
    const other = extraExpected.build();
    // same seeded weights (fresh PRNG with the same seed, same order)
    setSeededWeights(other.model, other.b);
    const ys2 = predict(other.model);
    ys2.forEach((y, i) => write(dir, extraExpected.file, L.npyBytes(y.shape, y.dataSync())));
  }
  const params = wlist.reduce((s, w) => s + w.data.length, 0);
  console.log(`  ${folder}: ${params} params, outputs ${ys.map(y => JSON.stringify(y.shape)).join(' ')}`);
  if (params >= 200000) throw new Error('model too big');
}

async function main() {
  await tf.setBackend('cpu');
  await tf.ready();
  console.log(`tfjs ${tf.version.tfjs}, backend ${tf.getBackend()}`);
  console.log('mnist_mlp');
  await emit('mnist_mlp', buildMnistMlp('functional'));
  console.log('mlp_sequential');
  await emit('mlp_sequential', buildMnistMlp('sequential'), { sequentialPrefix: 'sequential' });
  console.log('activations');
  await emit('activations', buildActivations('keras3'), {
    extraExpected: { file: 'expected_tfjs.npy', build: () => buildActivations('tfjs') },
  });
  console.log('merge_reshape');
  await emit('merge_reshape', buildMergeReshape());
  console.log('transformer_block');
  await emit('transformer_block', buildTransformerBlock());
  console.log('norm_zoo');
  await emit('norm_zoo', buildNormZoo());
  console.log('small_cnn');
  await emit('small_cnn', buildSmallCnn());
  console.log('text_classifier');
  await emit('text_classifier', buildTextClassifier());
  console.log('lstm_text');
  await emit('lstm_text', buildLstmText());
  console.log('gru_rnn');
  await emit('gru_rnn', buildGruRnn());
  console.log('bidir_rnn');
  await emit('bidir_rnn', buildBidirRnn());
  console.log('seq2seq');
  await emit('seq2seq', buildSeq2seq());
  if (!ONLY.length || ONLY.includes('mnist_train')) {
    console.log('mnist_train (train.js)');
    await require('./train').emitTraining();
  }
}

// fuzz.js reuses the Keras 3 JSON builder and the weight conventions.
module.exports = { Builder, DP, GU, ZE, ON, HAS_BUILD_CONFIG, denseSpecific, normSpecific, convSpecific,
  poolSpecific, STATE_INIT, tfjsArtifacts, rnnSpecific, bidirSpecific, RNN_CELL, embedding };

if (require.main === module) main().catch(e => { console.error(e); process.exit(1); });
