'use strict';
// Randomized differential tester: random but valid Keras models, checked
// against TensorFlow.js (the independent Keras implementation of gen.js).
//
//   node fuzz.js gen  SEED OUTDIR          one case into OUTDIR (see below)
//   node fuzz.js run  FIRST COUNT [--kdc PATH] [--keep DIR] [--quiet]
//        generates seeds FIRST .. FIRST+COUNT-1 and runs every case through
//        `kdc compile` + `kdc run` on the run matrix below; prints one line
//        per failing run and a summary; exit 1 if anything failed.
//
// A seed fixes everything (mulberry32, lib.js): the model, its weights, its
// input and its layout. Each case directory holds
//   model.json           Keras 3 to_json() (written here, gen.js' Builder)
//   weights.safetensors  Keras 3 variable paths
//   model_tfjs.json      tfjs' own serialization (tf.keras-2 style) + weights.bin
//   input*.npy           BATCH rows
//   expected*.npy        tfjs predict (Keras 3 semantics)
//   expected_tfjs*.npy   only when tf.keras 2 / TF.js semantics differ
//                        (hard_sigmoid): predict of the tfjs-semantics model
//   layout.json          a random valid ModelParallel for mesh 2x4 (data, model)
//   case.json            {n_in, n_out, layers: [class names]}
// Run matrix (RUNS below; tests/e2e/test_e2e_fuzz.c runs the same one on the
// checked-in cases): Keras 3 and TF.js JSON on mesh 1, DataParallel on 8,
// and the layout on 2x4. Tolerance: |d| <= 1e-5 + 1e-4 |ref|.

const fs = require('fs');
const os = require('os');
const path = require('path');
const { execFileSync } = require('child_process');
const tf = require('@tensorflow/tfjs');
const L = require('./lib');
const { KReLU, KSubtract } = require('./tfjs_keras3');
const K3 = require('./keras3_layers');
const G = require('./gen');

const BATCH = 8;

// tfjs 4.22 bug: DepthwiseConv2D ignores dilation_rate (call() and
// computeOutputShape() both leave it out: "TODO(cais): Add support for
// dilation"). Keras applies it; so does this patch (tf.depthwiseConv2d's
// dilations argument).
{
  const proto = Object.getPrototypeOf(tf.layers.depthwiseConv2d({ kernelSize: 1 }));
  const convLen = (n, k, pad, s, d) => {
    const eff = (k - 1) * d + 1;
    return pad === 'same' ? Math.ceil(n / s) : Math.ceil((n - eff + 1) / s);
  };
  proto.call = function (inputs) {
    return tf.tidy(() => {
      const x = Array.isArray(inputs) ? inputs[0] : inputs;
      let y = tf.depthwiseConv2d(x, this.depthwiseKernel.read(), this.strides, this.padding, 'NHWC', this.dilationRate);
      if (this.useBias) y = tf.add(y, this.bias.read());
      return this.activation ? this.activation.apply(y) : y;
    });
  };
  proto.computeOutputShape = function (s) {
    const d = this.dilationRate;
    return [s[0], convLen(s[1], this.kernelSize[0], this.padding, this.strides[0], d[0]),
      convLen(s[2], this.kernelSize[1], this.padding, this.strides[1], d[1]), s[3] * this.depthMultiplier];
  };
}
const ACTS = ['linear', 'relu', 'sigmoid', 'tanh', 'softmax', 'gelu', 'silu', 'elu', 'selu', 'softplus',
  'softsign', 'relu6', 'leaky_relu', 'exponential', 'hard_sigmoid', 'log_softmax', 'mish'];
// tfjs' own activation object for a Keras 3 name. mode 'tfjs': the stock tfjs
// classes (what a tfjs-saved model.json names them), else Keras 3 semantics.
function tfAct(act, mode) {
  if (act === 'hard_sigmoid') return mode === 'tfjs' ? 'hardSigmoid' : 'hard_sigmoid';
  if (act === 'silu') return mode === 'tfjs' ? 'swish' : 'silu';
  if (act === 'log_softmax') return 'logSoftmax';
  return act;
}

class Rand {
  constructor(seed) { this.next = L.mulberry32(seed); }
  int(lo, hi) { return lo + Math.floor(this.next() * (hi - lo + 1)); }  // inclusive
  pick(a) { return a[Math.floor(this.next() * a.length)]; }
  chance(p) { return this.next() < p; }
  shuffle(a) {
    const b = a.slice();
    for (let i = b.length - 1; i > 0; i--) { const j = this.int(0, i); [b[i], b[j]] = [b[j], b[i]]; }
    return b;
  }
}

const prod = a => a.reduce((x, y) => x * y, 1);
const same = (a, b) => a.length === b.length && a.every((v, i) => v === b[i]);
const initOf = cls => ({ module: 'keras.initializers', class_name: cls, config: cls === 'GlorotUniform' ? { seed: null } : {}, registered_name: null });
const regs = (...names) => Object.fromEntries(names.map(n => [n, null]));

// Keras 3 config keys of each generated class (after name/trainable/dtype).
const convCfg = (o, kind) => {
  const c = { filters: o.filters, kernel_size: o.k, strides: o.s, padding: o.pad, data_format: 'channels_last',
    dilation_rate: o.d, groups: 1, activation: o.act, use_bias: o.bias };
  if (kind === 'depthwise') {
    delete c.filters; delete c.groups;
    c.depth_multiplier = o.dm;
    Object.assign(c, { depthwise_initializer: initOf('GlorotUniform'), bias_initializer: initOf('Zeros') },
      regs('depthwise_regularizer', 'bias_regularizer', 'activity_regularizer', 'depthwise_constraint', 'bias_constraint'));
  } else if (kind === 'separable') {
    delete c.groups;
    c.depth_multiplier = o.dm;
    Object.assign(c, { depthwise_initializer: initOf('GlorotUniform'), pointwise_initializer: initOf('GlorotUniform'),
      bias_initializer: initOf('Zeros') }, regs('depthwise_regularizer', 'pointwise_regularizer', 'bias_regularizer',
      'activity_regularizer', 'depthwise_constraint', 'pointwise_constraint', 'bias_constraint'));
  } else {
    if (kind === 'transpose') { delete c.groups; c.output_padding = null; }
    Object.assign(c, { kernel_initializer: initOf('GlorotUniform'), bias_initializer: initOf('Zeros') },
      regs('kernel_regularizer', 'bias_regularizer', 'activity_regularizer', 'kernel_constraint', 'bias_constraint'));
  }
  return c;
};

// One random model. mode: 'keras3' or 'tfjs' (only hard_sigmoid differs).
// Returns { b, model, outputs, inputRanges, integerInputs, usesTfjsDiff, prefix, nestedPrefix }.
function generate(seed, mode) {
  const r = new Rand(seed);
  const family = r.pick(['mlp', 'mlp', 'seq', 'seq', 'img', 'img', 'text', 'vol']);
  const sequential = r.chance(0.2);
  const name = sequential ? 'sequential' : 'functional';
  const b = new G.Builder(sequential ? 'sequential' : 'functional', name, (seed * 2654435761) >>> 0);
  b.depthwise = new Set();
  b.classes = [];
  let usesTfjsDiff = false;
  let counter = 0;
  const uname = base => `${base}_${counter++}`;
  const act = () => {
    const a = r.pick(ACTS);
    if (a === 'hard_sigmoid') usesTfjsDiff = true;
    return a;
  };
  const init = (n, gain = 1) => { b.denseInit[n] = gain; };
  const add = (cls, n, cfg, tfl, inp, kw) => {
    b.classes.push(cls);
    init(n);
    return b.layer(cls, n, cfg, tfl, inp, kw);
  };

  // ---- inputs
  let shape, integerInputs = false, ranges = [];
  if (family === 'mlp') shape = [r.pick([4, 6, 8, 12, 16, 5, 7])];
  else if (family === 'seq') shape = [r.int(4, 12), r.pick([2, 3, 4, 8])];
  else if (family === 'img') shape = [r.int(5, 10), r.int(5, 10), r.pick([1, 2, 3, 4])];
  else if (family === 'vol') shape = [r.int(3, 6), r.int(3, 6), r.int(3, 6), r.pick([1, 2])];
  else shape = [r.int(4, 10)];
  const inputs = [b.input('input_layer', shape)];
  ranges.push(family === 'text' ? [0, 30] : [-1, 1]);
  if (family === 'text') integerInputs = true;
  if (!sequential && family !== 'text' && r.chance(0.3)) {
    inputs.push(b.input('input_b', r.chance(0.6) ? shape.slice() : shape.slice(0, -1).concat([r.int(2, 6)])));
    ranges.push([-1, 1]);
  }
  const pool = inputs.slice();
  let cur = inputs[0];
  if (family === 'text') {
    init('embedding');
    b.classes.push('Embedding');
    const dim = r.pick([4, 8, 6]);
    cur = b.layer('Embedding', 'embedding', {
      input_dim: 30, output_dim: dim, embeddings_initializer: initOf('RandomUniform'),
      embeddings_regularizer: null, activity_regularizer: null, embeddings_constraint: null, mask_zero: false,
      lora_rank: null,
    }, tf.layers.embedding({ inputDim: 30, outputDim: dim, name: 'embedding' }), cur);
    pool.push(cur);
  }

  // ---- layer steps
  const denseLayers = [];
  const dense = (h, units, a, useBias = true) => {
    const n = uname('dense');
    b.classes.push('Dense');
    const out = b.dense(n, units, a, h, { useBias, tfActivation: tfAct(a, mode) });
    denseLayers.push({ name: n, entry: b.entries[b.entries.length - 1], tfl: b.tfLayers[b.tfLayers.length - 1],
      inDim: h.shape[h.shape.length - 1] });
    return out;
  };
  // a tensor of |h|'s shape, from |h| through a shape-preserving layer
  const partnerOf = h => {
    const same2 = pool.filter(p => p !== h && same(p.shape, h.shape));
    if (same2.length && r.chance(0.5)) return r.pick(same2);
    const src = pool.filter(p => p.shape.length === h.shape.length && same(p.shape.slice(0, -1), h.shape.slice(0, -1)));
    return dense(r.pick(src.length ? src : [h]), h.shape[h.shape.length - 1], act(), r.chance(0.8));
  };
  const seqOnly = sequential;   // only chains (no merges, no pool branches)
  const steps = r.int(2, 9);
  for (let step = 0; step < steps; step++) {
    if (!seqOnly && r.chance(0.25)) cur = r.pick(pool.filter(p => !inputs.includes(p) || pool.length === inputs.length));
    if (integerInputs && cur === inputs[0]) cur = pool[pool.length - 1];
    const s = cur.shape, rank = s.length, last = s[rank - 1];
    const ops = ['dense', 'act', 'relu', 'leaky', 'elu', 'softmax', 'dropout', 'bn', 'ln', 'prelu', 'rescale',
      'noise', 'unitnorm'];
    if (rank >= 3 && last % 2 === 0) ops.push('groupnorm');
    if (rank === 3) ops.push('sdrop');
    // tfjs: batchNormalization (also behind its LayerNormalization) takes rank <= 4
    if (rank === 5) ops.splice(ops.indexOf('bn'), 2, 'conv3d', 'conv3d', 'pool3d', 'flatten');
    if (rank === 2) ops.push('reshape2', 'repeat');
    if (rank === 3) ops.push('conv1d', 'pool1d', 'gpool', 'flatten', 'permute', 'reshape3', 'to4d');
    if (rank === 4) ops.push('conv2d', 'conv2d', 'dwconv', 'sepconv', 'convT', 'pool2d', 'gpool', 'flatten', 'pad2d',
      'crop2d', 'up2d', 'permute', 'to3d');
    if (!seqOnly) ops.push('merge', 'merge', 'concat', 'dot', 'shared', 'shared');
    if (!seqOnly && !sequential && r.chance(0.3)) ops.push('nested');
    if (!seqOnly && !sequential && r.chance(0.3)) ops.push('nestedf');
    if (prod(s.slice(1)) > 600) ops.push(...[[], [], ['dense'], ['gpool', 'pool1d'], ['gpool', 'pool2d'], ['pool3d'], ['pool3d']][rank]);
    const op = r.pick(ops);
    let out = null;
    if (op === 'dense') {
      out = dense(cur, r.int(1, 12), act(), r.chance(0.8));
    } else if (op === 'act') {
      const a = act(), n = uname('activation');
      out = add('Activation', n, { activation: a }, tf.layers.activation({ activation: tfAct(a, mode), name: n }), cur);
    } else if (op === 'relu') {
      const n = uname('re_lu');
      const mv = r.pick([null, 6.0, 2.5]), ns = r.pick([0.0, 0.0, 0.1]), th = r.pick([0.0, 0.0, 0.2]);
      out = add('ReLU', n, { max_value: mv === null ? null : L.pyf(mv), negative_slope: L.pyf(ns), threshold: L.pyf(th) },
        new KReLU({ name: n, max_value: mv, negative_slope: ns, threshold: th }), cur);
    } else if (op === 'leaky') {
      const n = uname('leaky_re_lu'), al = r.pick([0.3, 0.1, 0.01]);
      out = add('LeakyReLU', n, { negative_slope: L.pyf(al) }, tf.layers.leakyReLU({ alpha: al, name: n }), cur);
    } else if (op === 'elu') {
      const n = uname('elu');
      out = add('ELU', n, { alpha: L.pyf(1.0) }, tf.layers.elu({ alpha: 1.0, name: n }), cur);
    } else if (op === 'softmax') {
      const n = uname('softmax'), ax = rank > 2 && r.chance(0.3) ? rank - 1 : -1;  // tfjs: last axis only
      out = add('Softmax', n, { axis: ax }, tf.layers.softmax({ axis: ax, name: n }), cur, { mask: null });
    } else if (op === 'dropout') {
      const n = uname('dropout'), rate = r.pick([0.1, 0.5]);
      out = add('Dropout', n, { rate: L.pyf(rate), seed: null, noise_shape: null },
        tf.layers.dropout({ rate, name: n }), cur, { training: false });
    } else if (op === 'bn') {
      const n = uname('batch_normalization'), eps = r.pick([0.001, 1e-5]);
      const center = r.chance(0.8), scale = r.chance(0.8);
      out = add('BatchNormalization', n, G.normSpecific({ axis: -1, momentum: L.pyf(0.99), epsilon: L.pyf(eps),
        center, scale, moving_mean_initializer: initOf('Zeros'), moving_variance_initializer: initOf('Ones'),
        synchronized: false }),
      tf.layers.batchNormalization({ axis: -1, epsilon: eps, center, scale, name: n }), cur, { mask: null });
    } else if (op === 'ln') {
      // (eps >= 1e-3: a LayerNormalization over nearly constant rows, as
      // after RepeatVector, amplifies float32 rounding by 1/sqrt(eps))
      const n = uname('layer_normalization'), eps = r.pick([0.001, 0.01]);
      const center = r.chance(0.8), scale = r.chance(0.8);
      out = add('LayerNormalization', n, G.normSpecific({ axis: [-1], epsilon: L.pyf(eps), center, scale,
        rms_scaling: false }), tf.layers.layerNormalization({ axis: -1, epsilon: eps, center, scale, name: n }), cur);
    } else if (op === 'prelu') {
      const n = uname('p_re_lu'), shared = rank > 2 && r.chance(0.5) ? [1] : null;
      out = add('PReLU', n, { alpha_initializer: initOf('Zeros'), alpha_regularizer: null, alpha_constraint: null,
        shared_axes: shared }, tf.layers.prelu({ sharedAxes: shared, name: n }), cur);
    } else if (op === 'rescale') {
      const n = uname('rescaling'), sc = r.pick([0.5, 2.0, -1.5]), off = r.pick([0.0, 0.25]);
      out = add('Rescaling', n, { scale: L.pyf(sc), offset: L.pyf(off) },
        tf.layers.rescaling({ scale: sc, offset: off, name: n }), cur);
    } else if (op === 'noise') {
      const n = uname('gaussian_noise');
      out = add('GaussianNoise', n, { stddev: L.pyf(0.3), seed: null },
        tf.layers.gaussianNoise({ stddev: 0.3, name: n }), cur, { training: false });
    } else if (op === 'sdrop') {
      const n = uname('spatial_dropout1d');
      out = add('SpatialDropout1D', n, { rate: L.pyf(0.3), seed: null },
        tf.layers.spatialDropout1d({ rate: 0.3, name: n }), cur, { training: false });
    } else if (op === 'unitnorm') {
      const n = uname('unit_normalization');
      out = add('UnitNormalization', n, { axis: -1 }, new K3.KUnitNormalization({ name: n, axis: -1 }), cur);
    } else if (op === 'groupnorm') {
      const n = uname('group_normalization'), groups = r.pick([1, 2, last, -1].filter(g => g === -1 || last % g === 0));
      out = add('GroupNormalization', n, G.normSpecific({ groups, axis: -1, epsilon: L.pyf(0.001), center: true,
        scale: true }), new K3.KGroupNormalization({ name: n, groups: groups === -1 ? last : groups }), cur);
    } else if (op === 'conv3d') {
      const k = [r.int(1, 2), r.int(1, 3), r.int(1, 2)], st = [r.int(1, 2), 1, r.int(1, 2)];
      const pad = r.pick(['valid', 'same']);
      if (pad === 'valid' && k.some((kk, i) => kk > s[1 + i])) continue;
      // tfjs 4.22 bug: 3-D 'same' padding can come out negative (no
      // max(0, .) in get3DPadAndOutInfo; TF and JAX clamp it): avoid those
      if (pad === 'same' && k.some((kk, i) => (Math.ceil(s[1 + i] / st[i]) - 1) * st[i] + kk < s[1 + i])) continue;
      const filters = r.int(1, 4), a = act(), bias = r.chance(0.8), n = uname('conv3d');
      out = add('Conv3D', n, convCfg({ filters, k, s: st, pad, d: [1, 1, 1], act: a, bias }),
        tf.layers.conv3d({ filters, kernelSize: k, strides: st, padding: pad, activation: tfAct(a, mode),
          useBias: bias, name: n }), cur);
    } else if (op === 'pool3d') {
      const ps = [r.int(1, 2), r.int(1, 2), r.int(1, 2)], pad = r.pick(['valid', 'same']);
      if (pad === 'valid' && ps.some((p, i) => p > s[1 + i])) continue;
      const isMax = r.chance(0.5), n = uname('pooling3d');
      const tfl = (isMax ? tf.layers.maxPooling3d : tf.layers.averagePooling3d)({ poolSize: ps, strides: ps, padding: pad, name: n });
      out = add(isMax ? 'MaxPooling3D' : 'AveragePooling3D', n, G.poolSpecific(ps, ps, pad), tfl, cur);
    } else if (op === 'reshape2') {
      const divs = [];
      for (let d = 2; d < last; d++) if (last % d === 0) divs.push(d);
      if (!divs.length) continue;
      const d = r.pick(divs), n = uname('reshape'), minus = r.chance(0.3);
      const ts = [d, last / d], tsj = minus ? [d, -1] : ts;
      out = add('Reshape', n, { target_shape: tsj }, tf.layers.reshape({ targetShape: tsj, name: n }), cur);
    } else if (op === 'repeat') {
      const n = uname('repeat_vector'), k = r.int(2, 5);
      out = add('RepeatVector', n, { n: k }, tf.layers.repeatVector({ n: k, name: n }), cur);
    } else if (op === 'conv1d') {
      const k = r.int(1, Math.min(5, s[1])), d = r.chance(0.3) ? r.int(2, 3) : 1;
      const st = d > 1 ? 1 : r.int(1, 3);
      const pad = r.pick(['valid', 'same']);  // tfjs has no causal conv1d
      const eff = (k - 1) * d + 1;
      if (pad === 'valid' && eff > s[1]) continue;
      const filters = r.int(1, 8), a = act(), bias = r.chance(0.8), n = uname('conv1d');
      out = add('Conv1D', n, convCfg({ filters, k: [k], s: [st], pad, d: [d], act: a, bias }),
        tf.layers.conv1d({ filters, kernelSize: k, strides: st, padding: pad, dilationRate: d,
          activation: tfAct(a, mode), useBias: bias, name: n }), cur);
    } else if (op === 'pool1d' || op === 'pool2d') {
      const nd = op === 'pool1d' ? 1 : 2;
      const ps = [], sts = [];
      const pad = r.pick(['valid', 'same']);
      let ok = true;
      for (let i = 0; i < nd; i++) {
        ps.push(r.int(1, 3));
        sts.push(r.chance(0.5) ? ps[i] : r.int(1, 3));
        if (pad === 'valid' && ps[i] > s[1 + i]) ok = false;
      }
      if (!ok) continue;
      const isMax = r.chance(0.5);
      const cls = (isMax ? 'MaxPooling' : 'AveragePooling') + nd + 'D';
      const n = uname(isMax ? 'max_pooling' : 'average_pooling');
      const tfl = nd === 1
        ? (isMax ? tf.layers.maxPooling1d : tf.layers.averagePooling1d)({ poolSize: ps[0], strides: sts[0], padding: pad, name: n })
        : (isMax ? tf.layers.maxPooling2d : tf.layers.averagePooling2d)({ poolSize: ps, strides: sts, padding: pad, name: n });
      out = add(cls, n, G.poolSpecific(ps, sts, pad), tfl, cur);
    } else if (op === 'gpool') {
      const isMax = r.chance(0.5), nd = rank - 2;
      const cls = `Global${isMax ? 'Max' : 'Average'}Pooling${nd}D`, n = uname('global_pooling');
      const tfl = nd === 1 ? (isMax ? tf.layers.globalMaxPooling1d : tf.layers.globalAveragePooling1d)({ name: n })
        : (isMax ? tf.layers.globalMaxPooling2d : tf.layers.globalAveragePooling2d)({ name: n });
      out = add(cls, n, { data_format: 'channels_last', keepdims: false }, tfl, cur);
    } else if (op === 'flatten') {
      const n = uname('flatten');
      out = add('Flatten', n, { data_format: 'channels_last' }, tf.layers.flatten({ name: n }), cur);
    } else if (op === 'permute') {
      let dims = r.shuffle(Array.from({ length: rank - 1 }, (_, i) => i + 1));
      if (dims.every((v, i) => v === i + 1)) dims = dims.reverse();
      const n = uname('permute');
      out = add('Permute', n, { dims }, tf.layers.permute({ dims, name: n }), cur);
    } else if (op === 'reshape3' || op === 'to4d') {
      // (L, C) -> (L*C/a, a) or (L, C1, C2)
      const n = uname('reshape');
      let ts;
      if (op === 'to4d') {
        const divs = [];
        for (let d = 1; d <= last; d++) if (last % d === 0) divs.push(d);
        const d = r.pick(divs);
        ts = [s[1], last / d, d];
        if (s[1] < 2 || last / d < 2) ts = [s[1], 1, last];
      } else {
        const tot = s[1] * last, divs = [];
        for (let d = 1; d <= tot; d++) if (tot % d === 0) divs.push(d);
        const d = r.pick(divs);
        ts = [tot / d, d];
      }
      const tsj = r.chance(0.3) ? [-1].concat(ts.slice(1)) : ts;
      out = add('Reshape', n, { target_shape: tsj }, tf.layers.reshape({ targetShape: tsj, name: n }), cur);
    } else if (op === 'to3d') {
      const n = uname('reshape'), ts = [s[1] * s[2], last];
      out = add('Reshape', n, { target_shape: ts }, tf.layers.reshape({ targetShape: ts, name: n }), cur);
    } else if (op === 'conv2d' || op === 'dwconv' || op === 'sepconv') {
      const k = [r.int(1, 3), r.int(1, 3)];
      const dil = r.chance(0.25) ? [r.int(1, 2), r.int(1, 2)] : [1, 1];
      const dilated = dil[0] > 1 || dil[1] > 1;
      const st = dilated ? [1, 1] : [r.int(1, 2), r.int(1, 2)];
      const pad = r.pick(['valid', 'same']);
      if (pad === 'valid' && ((k[0] - 1) * dil[0] + 1 > s[1] || (k[1] - 1) * dil[1] + 1 > s[2])) continue;
      const a = act(), bias = r.chance(0.8);
      if (op === 'conv2d') {
        const filters = r.int(1, 8), n = uname('conv2d');
        out = add('Conv2D', n, convCfg({ filters, k, s: st, pad, d: dil, act: a, bias }),
          tf.layers.conv2d({ filters, kernelSize: k, strides: st, padding: pad, dilationRate: dil,
            activation: tfAct(a, mode), useBias: bias, name: n }), cur);
      } else if (op === 'dwconv') {
        const dm = r.int(1, 2), n = uname('depthwise_conv2d');
        b.depthwise.add(n);
        out = add('DepthwiseConv2D', n, convCfg({ k, s: st, pad, d: dil, act: a, bias, dm }, 'depthwise'),
          tf.layers.depthwiseConv2d({ kernelSize: k, strides: st, padding: pad, dilationRate: dil, depthMultiplier: dm,
            activation: tfAct(a, mode), useBias: bias, name: n }), cur);
      } else {
        const dm = r.int(1, 2), filters = r.int(1, 6), n = uname('separable_conv2d');
        out = add('SeparableConv2D', n, convCfg({ filters, k, s: st, pad, d: dil, act: a, bias, dm }, 'separable'),
          tf.layers.separableConv2d({ filters, kernelSize: k, strides: st, padding: pad, dilationRate: dil,
            depthMultiplier: dm, activation: tfAct(a, mode), useBias: bias, name: n }), cur);
      }
    } else if (op === 'convT') {
      const k = [r.int(1, 3), r.int(1, 3)], st = [r.int(1, 2), r.int(1, 2)], pad = r.pick(['valid', 'same']);
      const filters = r.int(1, 6), a = act(), bias = r.chance(0.8), n = uname('conv2d_transpose');
      out = add('Conv2DTranspose', n, convCfg({ filters, k, s: st, pad, d: [1, 1], act: a, bias }, 'transpose'),
        tf.layers.conv2dTranspose({ filters, kernelSize: k, strides: st, padding: pad, activation: tfAct(a, mode),
          useBias: bias, name: n }), cur);
    } else if (op === 'pad2d') {
      const p = [[r.int(0, 2), r.int(0, 2)], [r.int(0, 2), r.int(0, 2)]], n = uname('zero_padding2d');
      out = add('ZeroPadding2D', n, { padding: p, data_format: 'channels_last' },
        tf.layers.zeroPadding2d({ padding: p, name: n }), cur);
    } else if (op === 'crop2d') {
      const c = [[r.int(0, 1), r.int(0, 1)], [r.int(0, 1), r.int(0, 1)]];
      if (s[1] - c[0][0] - c[0][1] < 1 || s[2] - c[1][0] - c[1][1] < 1) continue;
      const n = uname('cropping2d');
      out = add('Cropping2D', n, { cropping: c, data_format: 'channels_last' },
        tf.layers.cropping2D({ cropping: c, name: n }), cur);
    } else if (op === 'up2d') {
      if (prod(s.slice(1)) > 300) continue;
      const sz = [r.int(1, 2), r.int(1, 3)], n = uname('up_sampling2d');
      out = add('UpSampling2D', n, { size: sz, data_format: 'channels_last', interpolation: 'nearest' },
        tf.layers.upSampling2d({ size: sz, name: n }), cur);
    } else if (op === 'merge') {
      const kinds = ['Add', 'Subtract', 'Multiply', 'Average', 'Maximum', 'Minimum'];
      const cls = r.pick(kinds), n = uname(cls.toLowerCase());
      const ins = [cur, partnerOf(cur)];
      if (cls !== 'Subtract' && r.chance(0.3)) ins.push(partnerOf(cur));
      const tfl = cls === 'Subtract' ? new KSubtract({ name: n })
        : tf.layers[cls.toLowerCase()]({ name: n });
      out = add(cls, n, {}, tfl, ins);
    } else if (op === 'concat') {
      const ax = rank > 2 && r.chance(0.4) ? r.int(1, rank - 1) : -1;
      let other;
      if (ax === -1 || ax === rank - 1) {
        const src = pool.filter(p => p.shape.length === rank && same(p.shape.slice(0, -1), s.slice(0, -1)));
        other = src.length > 1 && r.chance(0.5) ? r.pick(src) : dense(cur, r.int(1, 6), act());
      } else other = partnerOf(cur);
      const n = uname('concatenate');
      out = add('Concatenate', n, { axis: ax }, tf.layers.concatenate({ axis: ax, name: n }), [cur, other]);
    } else if (op === 'dot') {
      const other = partnerOf(cur), n = uname('dot');
      let axes;
      if (rank === 2) axes = r.pick([-1, 1]);
      else if (rank === 3) axes = r.pick([[2, 2], [1, 1], -1]);
      else continue;
      const normalize = r.chance(0.3);
      out = add('Dot', n, { axes, normalize }, tf.layers.dot({ axes, normalize, name: n }), [cur, other]);
    } else if (op === 'nested') {
      out = nestedSequential(cur);
    } else if (op === 'shared') {
      // a Dense layer called a second time: a second inbound node, referred
      // to as [name, 1, 0]
      const cands = denseLayers.filter(d => d.inDim === last);
      if (!cands.length) continue;
      const d = r.pick(cands);
      const sym = d.tfl.apply(cur.sym);
      const kt = { class_name: '__keras_tensor__', config: { shape: cur.shape, dtype: 'float32', keras_history: cur.hist } };
      d.entry.inbound.push({ args: [kt], kwargs: {} });
      b.classes.push('shared');
      out = { sym, hist: [d.name, d.entry.inbound.length - 1, 0], shape: sym.shape.slice() };
    } else if (op === 'nestedf') {
      out = nestedFunctional(cur);
    }
    if (!out) continue;
    if (prod(out.shape.slice(1)) > 4000) break;
    pool.push(out);
    cur = out;
  }

  // A Sequential model of 1-3 layers, called inside the Functional model.
  function nestedSequential(h) {
    const sname = uname('sequential');
    const nlayers = r.int(1, 3);
    const k3layers = [{ module: 'keras.layers', class_name: 'InputLayer',
      config: { batch_shape: h.shape, dtype: 'float32', sparse: false, ragged: false, name: `${sname}_input`, optional: false },
      registered_name: null }];
    const tfls = [];
    let shapeNow = h.shape;
    b.nested = b.nested || {};
    for (let i = 0; i < nlayers; i++) {
      const lname = uname('inner');
      const kind = r.pick(['dense', 'dense', 'act', h.shape.length < 5 ? 'ln' : 'act']);
      let cls, cfg, tfl;
      if (kind === 'dense') {
        const units = r.int(1, 10), a = act(), useBias = r.chance(0.8);
        cls = 'Dense'; cfg = G.denseSpecific(units, a, useBias);
        tfl = tf.layers.dense({ units, activation: tfAct(a, mode), useBias, name: lname });
        shapeNow = shapeNow.slice(0, -1).concat([units]);
      } else if (kind === 'act') {
        const a = act();
        cls = 'Activation'; cfg = { activation: a };
        tfl = tf.layers.activation({ activation: tfAct(a, mode), name: lname });
      } else {
        cls = 'LayerNormalization';
        cfg = G.normSpecific({ axis: [-1], epsilon: L.pyf(0.001), center: true, scale: true, rms_scaling: false });
        tfl = tf.layers.layerNormalization({ axis: -1, epsilon: 0.001, name: lname });
      }
      b.classes.push(cls);
      b.denseInit[lname] = 1;
      b.nested[lname] = sname;
      const e = { module: 'keras.layers', class_name: cls, config: Object.assign({ name: lname, trainable: true, dtype: G.DP() }, cfg),
        registered_name: null };
      if (G.HAS_BUILD_CONFIG.has(cls)) e.build_config = { input_shape: i === 0 ? h.shape : null };
      k3layers.push(e);
      tfls.push(tfl);
    }
    // build_config input shapes of the inner layers: the running shapes
    const seq = tf.sequential({ name: sname, layers: [tf.layers.inputLayer({ batchInputShape: h.shape, name: `${sname}_input` })].concat(tfls) });
    let sh = h.shape;
    for (let i = 0; i < tfls.length; i++) {
      if (k3layers[i + 1].build_config) k3layers[i + 1].build_config.input_shape = sh;
      sh = tfls[i].computeOutputShape(sh);
    }
    const sym = seq.apply(h.sym);
    const kt = { class_name: '__keras_tensor__', config: { shape: h.shape, dtype: 'float32', keras_history: h.hist } };
    b.classes.push('Sequential');
    b.denseInit[sname] = 1;
    b.entries.push({ cls: 'Sequential', name: sname, module: 'keras',
      config: { name: sname, trainable: true, dtype: G.DP(), layers: k3layers, build_input_shape: h.shape },
      buildConfig: { input_shape: h.shape }, inbound: [{ args: [kt], kwargs: {} }], outShape: sym.shape.slice() });
    return { sym, hist: [sname, 0, 0], shape: sym.shape.slice() };
  }

  // A Functional model (one input, a Dense branch merged back) called
  // inside the outer one. Keras 3 counts the nested model's own creation as
  // its node 0, so the outer graph refers to this call as node 1.
  function nestedFunctional(h) {
    const fname = uname('functional');
    const ib = new G.Builder('functional', fname, 0);
    ib.denseInit = b.denseInit;
    const x = ib.input(uname('inner_input'), h.shape.slice(1));
    const units = h.shape[h.shape.length - 1];
    const inner = [];
    const idense = (inp, u) => {
      const n = uname('inner_dense'), a = act();
      inner.push('Dense');
      return ib.dense(n, u, a, inp, { tfActivation: tfAct(a, mode) });
    };
    let y = idense(x, units);
    if (r.chance(0.6)) {
      const n = uname('inner_add');
      inner.push('Add');
      y = ib.layer('Add', n, {}, tf.layers.add({ name: n }), [x, y]);
    }
    if (r.chance(0.5)) y = idense(y, r.int(1, 8));
    const im = tf.model({ inputs: x.sym, outputs: y.sym, name: fname });
    const sym = im.apply(h.sym);
    const j = ib.keras3Functional([y]);
    const kt = { class_name: '__keras_tensor__', config: { shape: h.shape, dtype: 'float32', keras_history: h.hist } };
    b.classes.push('Functional');
    b.entries.push({ cls: 'Functional', name: fname, module: 'keras.src.models.functional', registered: 'Functional',
      config: j.config, innerClasses: inner, buildConfig: { input_shape: h.shape }, inbound: [{ args: [kt], kwargs: {} }],
      outShape: sym.shape.slice() });
    return { sym, hist: [fname, 1, 0], shape: sym.shape.slice() };
  }

  // ---- outputs and the tfjs model
  let outputs = [cur];
  if (!sequential) {
    const cands = pool.filter(p => !inputs.includes(p) && p !== cur);
    if (cands.length && r.chance(0.3)) outputs.push(r.pick(cands));
    if (cur === inputs[0] || inputs.includes(cur)) outputs = [dense(cur, 3, 'linear')];
    // every input must reach an output: merge stray inputs into the first
    const flat = h => {
      if (h.shape.length === 2) return h;
      const n = uname('flatten');
      return add('Flatten', n, { data_format: 'channels_last' }, tf.layers.flatten({ name: n }), h);
    };
    for (const inp of inputs) {
      if (reachable(b.entries, outputs).has(inp.hist[0])) continue;
      const parts = [flat(outputs[0]), flat(inp)], n = uname('concatenate');
      outputs[0] = add('Concatenate', n, { axis: -1 }, tf.layers.concatenate({ axis: -1, name: n }), parts);
    }
  } else if (cur === inputs[0]) {
    outputs = [dense(cur, 3, 'linear')];
  }
  // a Functional model holds only the layers (and calls) its outputs depend on
  b.entries = pruneNodes(b.entries, outputs);
  b.classes = [];
  for (const e of b.entries) {
    if (e.cls === 'InputLayer') continue;
    if (e.cls === 'Sequential') b.classes.push(...e.config.layers.slice(1).map(l => l.class_name));
    if (e.innerClasses) b.classes.push(...e.innerClasses);
    if (e.inbound && e.inbound.length > 1) b.classes.push('shared');
    b.classes.push(e.cls);
  }
  let model;
  if (sequential) {
    model = tf.sequential({ name, layers: [tf.layers.inputLayer({ inputShape: shape, name: 'input_layer' })].concat(
      b.tfLayers) });
  } else {
    model = tf.model({ inputs: inputs.map(h => h.sym), outputs: outputs.map(h => h.sym), name });
  }
  return { b, model, outputs, inputRanges: ranges, integerInputs, usesTfjsDiff, sequential };
}

// Names of the layers |outputs| depend on (through inbound keras_history).
function reachable(entries, outputs) {
  const byName = new Map(entries.map(e => [e.name, e]));
  const seen = new Set();
  const visit = x => {
    if (Array.isArray(x)) { x.forEach(visit); return; }
    if (!x || typeof x !== 'object') return;
    if (x.class_name === '__keras_tensor__') { mark(x.config.keras_history[0]); return; }
    Object.values(x).forEach(visit);
  };
  const mark = n => {
    if (seen.has(n)) return;
    seen.add(n);
    visit(byName.get(n).inbound);
  };
  outputs.forEach(h => mark(h.hist[0]));
  return seen;
}

// The entries and inbound nodes |outputs| depend on, with the node indices
// renumbered as Keras writes them (only the kept calls count; a nested
// Functional's own node 0 comes first). keras_history arrays are shared
// between references, so each is renumbered once.
function pruneNodes(entries, outputs) {
  const byName = new Map(entries.map(e => [e.name, e]));
  const offset = e => (e.cls === 'Functional' ? 1 : 0);
  const live = new Map(), hists = new Set();
  const visit = x => {
    if (Array.isArray(x)) { x.forEach(visit); return; }
    if (!x || typeof x !== 'object') return;
    if (x.class_name === '__keras_tensor__') { hists.add(x.config.keras_history); mark(x.config.keras_history); return; }
    Object.values(x).forEach(visit);
  };
  const mark = hist => {
    const e = byName.get(hist[0]);
    const i = e.cls === 'InputLayer' ? 0 : hist[1] - offset(e);
    if (!live.has(e.name)) live.set(e.name, new Set());
    if (live.get(e.name).has(i)) return;
    live.get(e.name).add(i);
    if (e.cls !== 'InputLayer') visit(e.inbound[i]);
  };
  outputs.forEach(h => { hists.add(h.hist); mark(h.hist); });
  const renumber = new Map();
  const kept = entries.filter(e => live.has(e.name));
  for (const e of kept) {
    if (e.cls === 'InputLayer') continue;
    const olds = [...live.get(e.name)].sort((a, c) => a - c);
    renumber.set(e.name, new Map(olds.map((o, k) => [o, k])));
    e.inbound = olds.map(o => e.inbound[o]);
  }
  for (const h of hists) {
    const e = byName.get(h[0]);
    if (e.cls !== 'InputLayer') h[1] = renumber.get(e.name).get(h[1] - offset(e)) + offset(e);
  }
  return kept;
}

// gen.js' Builder keeps only the tfjs symbolic tensors; a Sequential model
// needs the layer objects too.
const origLayer = G.Builder.prototype.layer;
G.Builder.prototype.layer = function (cls, name, specific, tfLayer, inp, kwargs, opts) {
  (this.tfLayers = this.tfLayers || []).push(tfLayer);
  return origLayer.call(this, cls, name, specific, tfLayer, inp, kwargs, opts);
};
// Keras 3 Functional JSON with nested Sequential entries (module 'keras').
const origK3F = G.Builder.prototype.keras3Functional;
G.Builder.prototype.keras3Functional = function (outputs) {
  const j = origK3F.call(this, outputs);
  this.entries.forEach((e, i) => {
    if (e.module) j.config.layers[i].module = e.module;
    if (e.registered) j.config.layers[i].registered_name = e.registered;
  });
  return j;
};

// ---- weights: every variable of every (nested) layer, seeded
function allLayers(model) {
  const out = [];
  for (const l of model.layers) {
    if (l.layers) out.push(...allLayers(l));
    else out.push(l);
  }
  return out;
}

function setWeights(model, rng) {
  const list = [];
  for (const layer of allLayers(model)) {
    if (!layer.weights.length) continue;
    const vals = [];
    for (const w of layer.weights) {
      const shape = w.shape.slice();
      const i = w.originalName.lastIndexOf(layer.name + '/');
      if (i < 0) throw new Error(`weight ${w.originalName}`);
      const wname = w.originalName.slice(i + layer.name.length + 1);
      const n = prod(shape);
      const leaf = wname.split('/').pop();
      let data;
      if (leaf === 'embeddings') data = L.uniformArray(rng, n, -1, 1);
      else if (/kernel$/.test(leaf)) {
        // fan_in: every dim but the last (conv: window x channels); the
        // transposed conv's kernel is (kh, kw, out, in)
        let fanIn = prod(shape.slice(0, -1)), fanOut = shape[shape.length - 1];
        if (layer.getClassName() === 'Conv2DTranspose') { fanIn = prod(shape.slice(0, -2)) * shape[shape.length - 1]; fanOut = shape[shape.length - 2]; }
        const lim = Math.sqrt(6 / (fanIn + fanOut)) * 1.3;
        data = L.uniformArray(rng, n, -lim, lim);
      } else if (leaf === 'bias') data = L.uniformArray(rng, n, -0.2, 0.2);
      else if (G.STATE_INIT[leaf]) data = L.uniformArray(rng, n, ...G.STATE_INIT[leaf]);
      else throw new Error(`unexpected weight ${w.originalName}`);
      vals.push(tf.tensor(data, shape));
      list.push({ layer: layer.name, wname, shape, data });
    }
    layer.setWeights(vals);
    vals.forEach(t => t.dispose());
  }
  return list;
}

// ---- a random valid ModelParallel layout for mesh 2x4 (data, model)
function randomLayout(r, wlist, b, outputsInfo, MODEL = 4, DATA = 2, EXTRA = 0) {
  const map = {};
  for (const w of wlist) {
    if (!r.chance(0.6)) continue;
    const path = varPath(b, w);
    const axes = w.shape.map(() => null);
    const dims = w.shape.map((d, i) => i).filter(i => w.shape[i] % MODEL === 0);
    if (!dims.length) continue;
    // kernels: usually the output (last) dim or the input dim; sometimes
    // FSDP-style data on another dim
    const dm = r.pick(dims);
    axes[dm] = 'model';
    const others = w.shape.map((d, i) => i).filter(i => i !== dm && w.shape[i] % DATA === 0);
    if (others.length && r.chance(0.2)) axes[r.pick(others)] = 'data';
    // a third mesh axis ("extra", 2x2x2) on yet another dim
    if (EXTRA) {
      const free = w.shape.map((d, i) => i).filter(i => axes[i] === null && w.shape[i] % EXTRA === 0);
      if (free.length && r.chance(0.4)) axes[r.pick(free)] = 'extra';
    }
    // trailing nulls may be left out (shorter layouts replicate the rest)
    while (axes.length && axes[axes.length - 1] === null && r.chance(0.5)) axes.pop();
    let key = path;
    if (r.chance(0.3)) key = path.replace(/[/]/g, '.*').replace(/^/, '.*') + '$';
    if (Object.values(map).length && r.chance(0.1)) key = path;  // exact keys win over regexes
    // a regex must match this path only
    const re = new RegExp('^(?:' + key + ')$');
    if (key !== path && wlist.some(o => o !== w && re.test(varPath(b, o)))) key = path;
    map[key] = axes;
  }
  // layer output layouts (final and intermediate): batch on data, sometimes
  // one other dim on model
  for (const o of outputsInfo) {
    if (!r.chance(o.final ? 0.3 : 0.15)) continue;
    const axes = o.shape.map(() => null);
    axes[0] = 'data';
    const dims = o.shape.map((d, i) => i).filter(i => i > 0 && o.shape[i] % MODEL === 0);
    if (dims.length && r.chance(0.5)) axes[r.pick(dims)] = 'model';
    map[`${o.prefix}${o.name}/output`] = axes;
  }
  return { batch_dim_name: 'data', layout_map: map };
}

function varPath(b, w) {
  let wn = b.depthwise.has(w.layer) && w.wname === 'depthwise_kernel' ? 'kernel' : w.wname;
  // Keras 3 keeps a recurrent layer's weights under its cell (lstm/lstm_cell/kernel)
  const e = b.entries.find(x => x.name === w.layer);
  if (e && G.RNN_CELL[e.cls]) wn = `${G.RNN_CELL[e.cls]}/${wn}`;
  // ... and a Bidirectional's under each direction's cell
  // (bidirectional/forward_lstm/lstm_cell/kernel)
  if (e && e.innerCls) wn = wn.replace(/^([^/]+)\/([^/]+)$/, `$1/${G.RNN_CELL[e.innerCls]}/$2`);
  if (b.nested && b.nested[w.layer]) return `${b.nested[w.layer]}/${w.layer}/${wn}`;
  return `${b.kind === 'sequential' ? b.name + '/' : ''}${w.layer}/${wn}`;
}

async function tfjsOut(built, dir, suffix) {
  const art = await G.tfjsArtifacts(built.model);
  // tfjs 4.22 leaves depth_multiplier out of SeparableConv2D's config (its
  // own loader then builds the wrong kernel); put it back, as the Python
  // converter writes it.
  const fix = layers => layers.forEach(l => {
    if (l.class_name === 'SeparableConv2D' && l.config.depth_multiplier === undefined) {
      l.config.depth_multiplier = allLayers(built.model).find(x => x.name === l.config.name).depthMultiplier;
    }
    if (l.config && Array.isArray(l.config.layers)) fix(l.config.layers);
  });
  fix(art.modelTopology.config.layers || art.modelTopology.config);
  const j = { format: art.format, generatedBy: art.generatedBy, convertedBy: art.convertedBy,
    modelTopology: art.modelTopology, weightsManifest: [{ paths: [`weights${suffix}.bin`], weights: art.weightSpecs }] };
  fs.writeFileSync(path.join(dir, `model_tfjs${suffix}.json`), JSON.stringify(j) + '\n');
  fs.writeFileSync(path.join(dir, `weights${suffix}.bin`), Buffer.from(art.weightData));
  fs.writeFileSync(path.join(dir, 'model_tk2.json'), L.pyJSON(tfKeras2(art.modelTopology)) + '\n');
}

// The tfjs topology as tf.keras 2.15 to_json() writes it: class Functional,
// keras_version 2.15.0, a dtype in every layer config, Keras activation
// names (tfjs writes its class names: hardSigmoid, logSoftmax), and an
// explicit InputLayer in a Sequential.
const TFJS_ACT = { hardSigmoid: 'hard_sigmoid', logSoftmax: 'log_softmax', leakyRelu: 'leaky_relu' };
function tfKeras2(topo) {
  const t = JSON.parse(JSON.stringify(topo));
  const fixLayer = l => {
    if (l.config && typeof l.config === 'object' && !Array.isArray(l.config)) {
      if (typeof l.config.activation === 'string' && TFJS_ACT[l.config.activation]) l.config.activation = TFJS_ACT[l.config.activation];
      if (l.class_name !== 'Sequential' && l.class_name !== 'Model' && l.config.dtype === undefined) l.config.dtype = 'float32';
      if (l.class_name === 'Model') l.class_name = 'Functional';
      if (Array.isArray(l.config.layers)) l.config.layers.forEach(fixLayer);
    }
  };
  fixLayer(t);
  if (t.class_name === 'Sequential' && t.config.layers.length && t.config.layers[0].class_name !== 'InputLayer') {
    const first = t.config.layers[0].config;
    t.config.layers.unshift({ class_name: 'InputLayer', config: { batch_input_shape: first.batch_input_shape,
      dtype: 'float32', sparse: false, ragged: false, name: `${first.name}_input` } });
    delete first.batch_input_shape;
  }
  return { class_name: t.class_name, config: t.config, keras_version: '2.15.0', backend: 'tensorflow' };
}

function predict(model, xs) {
  const ys = model.predict(xs.length > 1 ? xs : xs[0], { batchSize: 64 });
  return Array.isArray(ys) ? ys : [ys];
}

// Writes one case into |dir|; returns its description.
async function genCase(seed, dir) {
  fs.mkdirSync(dir, { recursive: true });
  const built = generate(seed, 'keras3');
  const { b, model } = built;
  const wrng = L.mulberry32((seed ^ 0x5eed1234) >>> 0);
  const wlist = setWeights(model, wrng);
  const k3 = b.kind === 'sequential' ? b.keras3Sequential() : b.keras3Functional(built.outputs);
  fs.writeFileSync(path.join(dir, 'model.json'), L.pyJSON(k3) + '\n');
  fs.writeFileSync(path.join(dir, 'weights.safetensors'), L.safetensorsBytes(
    wlist.map(w => ({ name: varPath(b, w), shape: w.shape, data: w.data, dtype: 'F32' }))));
  const xs = [];
  const n_in = model.inputs.length;
  const irng = L.mulberry32((seed ^ 0x1a2b3c4d) >>> 0);
  model.inputs.forEach((sym, i) => {
    const shape = [BATCH, ...sym.shape.slice(1)];
    const [lo, hi] = built.inputRanges[i];
    let data = L.uniformArray(irng, prod(shape), lo, hi);
    if (built.integerInputs) data = data.map(Math.floor);
    xs.push(tf.tensor(data, shape));
    fs.writeFileSync(path.join(dir, n_in > 1 ? `input${i}.npy` : 'input.npy'), L.npyBytes(shape, data));
  });
  const ys = predict(model, xs);
  const n_out = ys.length;
  const outName = (base, i) => (n_out > 1 ? `${base}${i}.npy` : `${base}.npy`);
  ys.forEach((y, i) => fs.writeFileSync(path.join(dir, outName('expected', i)), L.npyBytes(y.shape, y.dataSync())));
  if (built.usesTfjsDiff) {
    // the same model with tf.keras 2 / TF.js semantics
    const other = generate(seed, 'tfjs');
    setWeights(other.model, L.mulberry32((seed ^ 0x5eed1234) >>> 0));
    await tfjsOut(other, dir, '');
    predict(other.model, xs).forEach((y, i) =>
      fs.writeFileSync(path.join(dir, outName('expected_tfjs', i)), L.npyBytes(y.shape, y.dataSync())));
  } else {
    await tfjsOut(built, dir, '');
  }
  const lr = new Rand((seed ^ 0x1a7007) >>> 0);
  const finals = new Set(built.outputs.map(h => h.hist[0]));
  const outsInfo = b.entries.filter(e => e.cls !== 'InputLayer').map(e => ({ name: e.name, shape: e.outShape,
    final: finals.has(e.name), prefix: b.kind === 'sequential' ? `${b.name}/` : '' }));
  fs.writeFileSync(path.join(dir, 'layout.json'), JSON.stringify(randomLayout(lr, wlist, b, outsInfo), null, 1) + '\n');
  // one more mesh for the sweep, with its own layout
  const mesh = lr.pick(['4x2', '1x8', '8x1', '2x2x2', '2x4']);
  const sizes = mesh.split('x').map(Number);
  fs.writeFileSync(path.join(dir, 'layout_mesh.json'),
    JSON.stringify(randomLayout(lr, wlist, b, outsInfo, sizes[1], sizes[0], sizes[2] || 0), null, 1) + '\n');
  const desc = { seed, n_in, n_out, tfjs_differs: built.usesTfjsDiff, mesh, layers: b.classes };
  fs.writeFileSync(path.join(dir, 'case.json'), JSON.stringify(desc) + '\n');
  xs.forEach(t => t.dispose());
  ys.forEach(t => t.dispose());
  model.dispose && model.dispose();
  return desc;
}

// ---- running kdc
const RUNS = [
  { model: 'model.json', weights: 'weights.safetensors', mesh: '1' },
  { model: 'model_tfjs.json', mesh: '1' },
  { model: 'model_tk2.json', weights: 'weights.safetensors', mesh: '1' },
  { model: 'model.json', weights: 'weights.safetensors', mesh: '8' },
  { model: 'model_tfjs.json', mesh: '2x4', layout: true },
  { model: 'model.json', weights: 'weights.safetensors', mesh: '2x4', layout: true },
];
// only in the sweep: a batch of 3 (8 rows: two full batches and a padded
// one) and a random mesh with its own layout
const SWEEP_RUNS = [
  { model: 'model.json', weights: 'weights.safetensors', mesh: '1', batch: 3 },
  { model: 'model.json', weights: 'weights.safetensors', mesh: 'random', layout: 'layout_mesh.json' },
];

function compare(got, ref, atol = 1e-5, rtol = 1e-4) {
  if (!same(got.shape, ref.shape)) return { ok: false, why: `shape ${JSON.stringify(got.shape)} vs ${JSON.stringify(ref.shape)}` };
  let worst = 0, at = -1;
  for (let i = 0; i < ref.data.length; i++) {
    const d = Math.abs(got.data[i] - ref.data[i]);
    const q = Number.isNaN(d) ? Infinity : d / (atol + rtol * Math.abs(ref.data[i]));
    if (q > worst) { worst = q; at = i; }
  }
  return { ok: worst <= 1, why: at < 0 ? '' : `max err ratio ${worst.toExponential(2)} at ${at}: ${got.data[at]} vs ${ref.data[at]}` };
}

function runCase(kdc, dir, desc) {
  const fails = [];
  for (const run of RUNS.concat(SWEEP_RUNS)) {
    const plan = path.join(dir, 'plan.bin');
    const mesh = run.mesh === 'random' ? desc.mesh : run.mesh;
    const args = ['compile', path.join(dir, run.model), '-o', plan, '--batch', String(run.batch || BATCH), '--mesh', mesh];
    if (run.weights) args.push('--weights', path.join(dir, run.weights));
    if (run.layout) args.push('--layout', path.join(dir, run.layout === true ? 'layout.json' : run.layout));
    if (mesh.split('x').length === 3) args.push('--axes', 'data,model,extra');
    const tag = `${run.model} mesh ${mesh}${run.layout ? ' layout' : ''}${run.batch ? ' batch ' + run.batch : ''}`;
    try {
      execFileSync(kdc, args, { stdio: ['ignore', 'pipe', 'pipe'] });
    } catch (e) {
      fails.push(`${tag}: compile exit ${e.status}: ${String(e.stderr).trim().split('\n')[0]}`);
      continue;
    }
    const rargs = ['run', plan, '--threads', '1'];
    for (let i = 0; i < desc.n_in; i++) rargs.push('--input', path.join(dir, desc.n_in > 1 ? `input${i}.npy` : 'input.npy'));
    for (let i = 0; i < desc.n_out; i++) rargs.push('--output', path.join(dir, `got${i}.npy`));
    try {
      execFileSync(kdc, rargs, { stdio: ['ignore', 'pipe', 'pipe'] });
    } catch (e) {
      fails.push(`${tag}: run exit ${e.status}: ${String(e.stderr).trim().split('\n')[0]}`);
      continue;
    }
    for (let i = 0; i < desc.n_out; i++) {
      const base = run.model !== 'model.json' && desc.tfjs_differs ? 'expected_tfjs' : 'expected';
      const ref = L.readNpy(path.join(dir, desc.n_out > 1 ? `${base}${i}.npy` : `${base}.npy`));
      const got = L.readNpy(path.join(dir, `got${i}.npy`));
      const c = compare(got, ref);
      if (!c.ok) fails.push(`${tag}: output ${i}: ${c.why}`);
    }
  }
  return fails;
}

// ---- malformed variants: one random mutation of a generated case's model
// or layout file, or a bad mesh. kdc must either accept it (exit 0) or
// reject it with exit 2, one line on stderr naming the file, and no plan.
const ODD_VALUES = [null, -1, 0, 1e30, -2.5, 'x', 'Frobnicate', true, [], {}, [null], [-3, 'a'], { a: 1 }];

function jsonPaths(x, at = [], out = []) {
  out.push(at);
  if (Array.isArray(x)) x.forEach((v, i) => jsonPaths(v, at.concat([i]), out));
  else if (x && typeof x === 'object') Object.keys(x).forEach(k => jsonPaths(x[k], at.concat([k]), out));
  return out;
}

function mutate(r, doc) {
  const paths = jsonPaths(doc).filter(p => p.length > 0);
  const p = r.pick(paths);
  let parent = doc;
  for (const k of p.slice(0, -1)) parent = parent[k];
  const key = p[p.length - 1];
  const how = r.pick(['delete', 'replace', 'replace', 'replace']);
  if (how === 'delete') {
    if (Array.isArray(parent)) parent.splice(key, 1); else delete parent[key];
  } else parent[key] = r.pick(ODD_VALUES);
  return `${how} ${JSON.stringify(p)}`;
}

function malformedCase(kdc, dir, desc, r) {
  const plan = path.join(dir, 'bad.plan');
  const which = r.pick(['model.json', 'model.json', 'model_tfjs.json', 'model_tk2.json', 'layout.json', 'badlayout',
    'mesh']);
  let args, file, what;
  if (which === 'mesh') {
    const mesh = r.pick(['0', '2x', 'x4', '3', '5x2', '2x4x', '-2', '2X4', '99999999999', '1x0', '']);
    args = ['compile', path.join(dir, 'model.json'), '--weights', path.join(dir, 'weights.safetensors'),
      '--batch', String(BATCH), '--mesh', mesh, '-o', plan];
    file = '--mesh'; what = `mesh "${mesh}"`;
    // an indivisible batch names the model's input instead
    if (/^[1-9]\d{0,3}(x[1-9]\d{0,3})*$/.test(mesh)) file = 'model.json';
  } else if (which === 'badlayout') {
    // a layout that is valid JSON but wrong for this model and mesh 2x4
    const st = L.readSafetensors(path.join(dir, 'weights.safetensors'));
    const names = Object.keys(st);
    if (!names.length) return null;
    const v = r.pick(names), shape = st[v].shape;
    const axes = shape.map(() => null);
    const kind = r.pick(['indivisible', 'unknown_axis', 'twice', 'too_long', 'nested', 'bare_string', 'dup_key',
      'bad_batch_dim', 'two_regex']);
    let text;
    if (kind === 'indivisible') {
      const dims = shape.map((d, i) => i).filter(i => shape[i] % 4 !== 0);
      if (!dims.length) return null;
      axes[r.pick(dims)] = 'model';
    } else if (kind === 'unknown_axis') axes[0] = 'tensor';
    else if (kind === 'twice') { if (shape.length < 2) return null; axes[0] = 'model'; axes[1] = 'model'; }
    else if (kind === 'too_long') axes.push(null, null);
    else if (kind === 'nested') axes[0] = ['data', 'model'];
    else if (kind === 'bare_string') axes.length = 0;
    const map = { [v]: kind === 'bare_string' ? 'model' : axes };
    if (kind === 'dup_key') text = `{"layout_map": {"${v}": [], "${v}": []}}`;
    else if (kind === 'two_regex') text = `{"layout_map": {".*${v.slice(-3)}": [], "${v.slice(0, 2)}.*": []}}`;
    else text = JSON.stringify({ batch_dim_name: kind === 'bad_batch_dim' ? 'batch' : 'data', layout_map: map });
    file = path.join(dir, 'bad_layout.json');
    fs.writeFileSync(file, text);
    what = `layout ${kind}: ${text}`;
    args = ['compile', path.join(dir, 'model.json'), '--weights', path.join(dir, 'weights.safetensors'),
      '--batch', String(BATCH), '--mesh', '2x4', '--layout', file, '-o', plan];
  } else {
    const doc = JSON.parse(fs.readFileSync(path.join(dir, which), 'utf8'));
    what = `${which}: ${mutate(r, doc)}`;
    file = path.join(dir, `bad_${which}`);
    fs.writeFileSync(file, JSON.stringify(doc));
    if (which === 'layout.json') {
      args = ['compile', path.join(dir, 'model.json'), '--weights', path.join(dir, 'weights.safetensors'),
        '--batch', String(BATCH), '--mesh', '2x4', '--layout', file, '-o', plan];
    } else if (which === 'model_tfjs.json') {
      args = ['compile', file, '--batch', String(BATCH), '--mesh', '2x4', '--layout', path.join(dir, 'layout.json'),
        '-o', plan];
    } else {
      args = ['compile', file, '--weights', path.join(dir, 'weights.safetensors'), '--batch', String(BATCH), '-o', plan];
    }
  }
  if (fs.existsSync(plan)) fs.rmSync(plan);
  let status = 0, err = '';
  try {
    execFileSync(kdc, args, { stdio: ['ignore', 'pipe', 'pipe'] });
  } catch (e) {
    status = e.status === null ? `signal ${e.signal}` : e.status;
    err = String(e.stderr);
  }
  if (status === 0) return null;
  const lines = err.split('\n').filter(l => l.length);
  const problems = [];
  if (status !== 2) problems.push(`exit ${status}`);
  if (lines.length !== 1) problems.push(`${lines.length} stderr lines`);
  if (!err.includes(path.basename(file))) problems.push('no file named');
  if (fs.existsSync(plan)) problems.push('plan written');
  return problems.length ? `${what}: ${problems.join(', ')}: ${lines.slice(0, 3).join(' | ').slice(0, 300)}` : null;
}

async function main() {
  await tf.setBackend('cpu');
  await tf.ready();
  const [cmd, a1, a2, ...rest] = process.argv.slice(2);
  if (cmd === 'gen') {
    const d = await genCase(Number(a1), a2);
    console.log(JSON.stringify(d));
    return;
  }
  if (cmd === 'cut') {
    // minimising: a copy of case a1 whose (only) output is layer a2's output
    const dir = a1, out = `${a1}_cut_${a2}`;
    fs.mkdirSync(out, { recursive: true });
    const tj = JSON.parse(fs.readFileSync(path.join(dir, 'model_tfjs.json'), 'utf8'));
    const m = await tf.loadLayersModel(tf.io.fromMemory(tj.modelTopology, tj.weightsManifest[0].weights,
      new Uint8Array(fs.readFileSync(path.join(dir, 'weights.bin'))).buffer));
    const sub = tf.model({ inputs: m.inputs, outputs: m.getLayer(a2).output });
    const n_in = m.inputs.length;
    const xs = m.inputs.map((_, i) => {
      const a = L.readNpy(path.join(dir, n_in > 1 ? `input${i}.npy` : 'input.npy'));
      return tf.tensor(a.data, a.shape);
    });
    const y = predict(sub, xs)[0];
    fs.writeFileSync(path.join(out, 'expected.npy'), L.npyBytes(y.shape, y.dataSync()));
    for (const f of fs.readdirSync(dir)) if (/^(input\d*\.npy|weights\.safetensors)$/.test(f)) fs.copyFileSync(path.join(dir, f), path.join(out, f));
    const k3 = JSON.parse(fs.readFileSync(path.join(dir, 'model.json'), 'utf8'));
    k3.config.output_layers = [a2, 0, 0];
    fs.writeFileSync(path.join(out, 'model.json'), JSON.stringify(k3));
    console.log(out, JSON.stringify(y.shape));
    return;
  }
  if (cmd === 'malformed') {
    const opt = k => { const i = rest.indexOf(k); return i >= 0 ? rest[i + 1] : undefined; };
    const kdc = opt('--kdc') || path.resolve(__dirname, '..', '..', 'build', 'tools', 'kdc');
    const per = Number(opt('--per') || 20);
    let bad = 0, total = 0;
    for (let seed = Number(a1); seed < Number(a1) + Number(a2); seed++) {
      const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kdcbad-'));
      let desc;
      try {
        desc = await genCase(seed, dir);
      } catch (e) {
        console.log(`seed ${seed}: generator: ${e.message.split('\n')[0]}`);
        continue;
      }
      const r = new Rand((seed ^ 0xbad) >>> 0);
      for (let i = 0; i < per; i++) {
        total++;
        const p = malformedCase(kdc, dir, desc, r);
        if (p) { bad++; console.log(`seed ${seed} #${i}: ${p}`); }
      }
      fs.rmSync(dir, { recursive: true, force: true });
    }
    console.log(`${total} malformed variants, ${bad} mishandled`);
    process.exit(bad ? 1 : 0);
  }
  if (cmd !== 'run') {
    console.error('usage: node fuzz.js gen SEED DIR | run FIRST COUNT [--kdc PATH] [--keep DIR] [--quiet]');
    process.exit(2);
  }
  const c = await sweep(Number(a1), Number(a2), rest, 'kdcfuzz-', genCase, runCase,
    desc => ({ failing: `[${desc.layers.join(' ')}]`, ok: `(${desc.layers.length} layers)` }), () => '');
  process.exit(c.failed ? 1 : 0);
}

// The `run` loop of fuzz.js and fit_fuzz.js: seeds first .. first+count-1,
// each generated by gen(seed, dir) into DIR/case_<seed> (--keep DIR, kept
// when failing) or a temporary directory, checked by check(kdc, dir,
// desc) (failure lines); prints every failing case with describe(desc)
// (and passing ones without --quiet), then a summary line (extra() adds to
// it), also when stopped by SIGTERM.  Returns the counts.
async function sweep(first, count, rest, tmpPrefix, gen, check, describe, extra) {
  const opt = k => { const i = rest.indexOf(k); return i >= 0 ? rest[i + 1] : undefined; };
  const kdc = opt('--kdc') || path.resolve(__dirname, '..', '..', 'build', 'tools', 'kdc');
  const keep = opt('--keep'), quiet = rest.includes('--quiet');
  const c = { done: 0, failed: 0, genFailed: 0 };
  const summary = () => console.log(`${c.done} cases, ${c.failed} failing, ${c.genFailed} not generated${extra()}`);
  process.on('SIGTERM', () => {
    console.log(`stopped after seed ${first + c.done - 1}`);
    summary();
    process.exit(c.failed ? 1 : 0);
  });
  for (let seed = first; seed < first + count; seed++, c.done++) {
    await new Promise(res => setImmediate(res));  // (lets a SIGTERM in)
    const dir = keep ? path.join(keep, `case_${seed}`) : fs.mkdtempSync(path.join(os.tmpdir(), tmpPrefix));
    let desc;
    try {
      desc = await gen(seed, dir);
    } catch (e) {
      c.genFailed++;
      console.log(`seed ${seed}: generator: ${e.message.split('\n')[0]}`);
      fs.rmSync(dir, { recursive: true, force: true });
      continue;
    }
    const fails = check(kdc, dir, desc), d = describe(desc);
    if (fails.length) {
      c.failed++;
      console.log(`seed ${seed} ${d.failing}`);
      for (const f of fails) console.log('   ' + f);
    } else if (!quiet) console.log(`seed ${seed} ok ${d.ok}`);
    if (!keep || !fails.length) fs.rmSync(dir, { recursive: true, force: true });
  }
  summary();
  return c;
}

if (require.main === module) main().catch(e => { console.error(e); process.exit(1); });
module.exports = { genCase, runCase, RUNS, Rand, setWeights, randomLayout, varPath, tfAct, pruneNodes, sweep, convCfg };
