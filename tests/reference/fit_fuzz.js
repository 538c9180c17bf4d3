'use strict';
// Randomized differential tester for TRAINING: random trainable Keras
// models, random data, loss and optimizer, trained for 3 epochs by a
// Keras 3 reference built on TensorFlow.js, and by `kdc run --fit`.
//
//   node fit_fuzz.js gen SEED OUTDIR       one case into OUTDIR (see below)
//   node fit_fuzz.js run FIRST COUNT [--kdc PATH] [--keep DIR] [--quiet]
//        generates seeds FIRST .. FIRST+COUNT-1, runs each through `kdc
//        compile` + `kdc run --fit` on mesh 1, 8 (DataParallel), 2x4 (the
//        case's layout.json), a random mesh (layout_mesh.json) and 2x4 with
//        a plan compiled for twice the batch; one line per failing run, a
//        summary, exit 1 on any failure.
//
// A seed fixes everything (mulberry32, lib.js).  Each case directory holds
//   model.json           Keras 3 to_json() plus the compile_config that
//                        model.compile() records (.keras config.json):
//                        the loss (class + from_logits) and the optimizer
//                        (class + its whole config)
//   weights.safetensors  the initial weights (Keras 3 variable paths)
//   x.npy, y.npy         ROWS rows (x0.npy, x1.npy with a second input);
//                        y: float targets, or class ids (f32)
//                        of shape [ROWS] (or [ROWS, T]) for sparse losses
//   layout.json          a random valid ModelParallel for mesh 2x4
//   layout_mesh.json     one for case.json's `mesh` (4x2, 1x8, 8x1, 2x2x2)
//   history.json         {"loss": per epoch, "batch_loss": per step,
//                        "val_loss": per epoch when validation_split > 0}
//   final.safetensors    every weight after training (moving statistics too)
//   case.json            {seed, mesh, n_in, batch, epochs, rows, validation_split, loss, from_logits,
//                         optimizer, cli, layers}; cli: the same training
//                         by `--loss/--optimizer/--learning-rate` flags, when
//                         they can say it (else null)
//
// The reference (train() below) is Keras 3's fit with shuffle off: batches
// of `batch` rows in order, the last one partial (Keras trains on it as a
// smaller batch); per step, tfjs' autodiff of the Keras 3 loss of
// model.apply(x, {training: true}) (BatchNormalization: batch statistics,
// moving statistics updated as Keras 3 does, see train.js), then the Keras
// 3 optimizer update in float32 written out here (Math.fround on every
// operation: tfjs' own optimizers differ from Keras 3); the epoch loss is
// Keras' loss tracker (batch losses weighted by rows, f32 sums).
// Everything is float32 as in Keras; the comparison tolerance (in the
// test, tests/e2e/test_e2e_fit_fuzz.c, and in `run` below) allows for the
// different summation orders, see README.md.

const fs = require('fs');
const path = require('path');
const { execFileSync } = require('child_process');
const tf = require('@tensorflow/tfjs');
const L = require('./lib');
const G = require('./gen');
const FZ = require('./fuzz');
const { KReLU, KSubtract } = require('./tfjs_keras3');

// Differentiable stand-ins of tfjs_keras3.js' activations, for training:
// its exact gelu computes in plain JS (no gradient), and tfjs' leakyRelu
// kernel inside that module's tf.tidy loses its saved input under
// tf.variableGrads.  gelu: tfjs' tf.erf (Abramowitz-Stegun, |error| <=
// 1.5e-7, far inside the tolerance); leaky_relu: max(x, 0.2 x) (Keras 3's
// default slope 0.2).
{
  class KActivation extends tf.serialization.Serializable {
    getConfig() { return {}; }
  }
  class GeluTrain extends KActivation {
    apply(x) { return tf.mul(tf.mul(x, 0.5), tf.add(1, tf.erf(tf.div(x, Math.SQRT2)))); }
  }
  GeluTrain.className = 'gelu';
  class LeakyTrain extends KActivation {
    apply(x) { return tf.maximum(x, tf.mul(x, 0.2)); }
  }
  LeakyTrain.className = 'leaky_relu';
  tf.serialization.registerClass(GeluTrain);
  tf.serialization.registerClass(LeakyTrain);
}

// tfjs 4.22 bug: LayerNormalization with center or scale off fails under
// tf.variableGrads (its tf.tidy disposes a tensor the tape saved).  The
// layer's call is replaced by Keras 3's formula (layer_normalization.py):
// moments over the last axis, x * inv + (-mean * inv) (+ beta) with
// inv = rsqrt(variance + epsilon) (* gamma).
{
  const proto = Object.getPrototypeOf(tf.layers.layerNormalization({ axis: -1 }));
  proto.call = function (inputs) {
    const x = Array.isArray(inputs) ? inputs[0] : inputs;
    const { mean, variance } = tf.moments(x, -1, true);
    let inv = tf.rsqrt(tf.add(variance, this.epsilon));
    if (this.scale) inv = tf.mul(inv, this.gamma.read());
    let res = tf.mul(tf.neg(mean), inv);
    if (this.center) res = tf.add(res, this.beta.read());
    return tf.add(tf.mul(x, inv), res);
  };
}

// tfjs 4.22's BatchNormalization in training mode needs both gamma and
// beta (center or scale off: gamma.read() of undefined).  Its call is
// replaced by Keras 3's (batch_normalization.py, backend
// batch_normalization): training: moments over every axis but the last
// (mean, biased variance), moving = moving * momentum + stat * (1 -
// momentum); inference: the moving statistics; then x * inv + (-mean * inv)
// (+ beta) with inv = rsqrt(variance + epsilon) (* gamma).
{
  const proto = Object.getPrototypeOf(tf.layers.batchNormalization({ axis: -1 }));
  proto.call = function (inputs, kwargs) {
    const x = Array.isArray(inputs) ? inputs[0] : inputs;
    let mean, variance;
    if (kwargs && kwargs.training) {
      ({ mean, variance } = tf.moments(x, [...Array(x.shape.length - 1).keys()]));
      const m = this.momentum;
      this.movingMean.write(tf.keep(tf.add(tf.mul(this.movingMean.read(), m), tf.mul(mean, 1 - m))));
      this.movingVariance.write(tf.keep(tf.add(tf.mul(this.movingVariance.read(), m), tf.mul(variance, 1 - m))));
    } else {
      mean = this.movingMean.read();
      variance = this.movingVariance.read();
    }
    let inv = tf.rsqrt(tf.add(variance, this.epsilon));
    if (this.scale) inv = tf.mul(inv, this.gamma.read());
    let res = tf.mul(tf.neg(mean), inv);
    if (this.center) res = tf.add(res, this.beta.read());
    return tf.add(tf.mul(x, inv), res);
  };
}

// tfjs_keras3.js' ReLU layer computes inside tf.tidy, which loses the
// tensors the gradient tape saved: the same Keras 3 ReLU.static_call
// without it (max(x, ns x) for the leaky form).
KReLU.prototype.call = function (inputs) {
  let x = Array.isArray(inputs) ? inputs[0] : inputs;
  const ns = this.negativeSlope, mv = this.maxValue, th = this.threshold;
  if (ns !== 0 && mv === null && th === 0) return tf.maximum(x, tf.mul(x, ns));
  const neg = ns === 0 ? null : th !== 0 ? tf.relu(tf.add(tf.neg(x), th)) : tf.relu(tf.neg(x));
  // (x > th as tf.step: tfjs has no gradient for tf.greater)
  x = th !== 0 ? tf.mul(x, tf.step(tf.sub(x, th))) : tf.relu(x);
  if (mv !== null) x = tf.clipByValue(x, 0, mv);
  return neg ? tf.sub(x, tf.mul(ns, neg)) : x;
};

// tfjs 4.22 has no gradient of a convolution with dilation > 1 (its
// conv2d backprop kernels refuse dilations).  A dilated convolution is
// the undilated convolution with the kernel's taps spread apart by zeros
// ((k - 1) d + 1 taps), which is built here with differentiable ops, so
// Conv1D and Conv2D with dilation_rate > 1 train in the reference ('same'
// padding uses the effective kernel size, as TF/JAX do for dilation).
function dilateKernel(k, dil) {
  let out = k;
  dil.forEach((d, ax) => {
    if (d === 1) return;
    const s = out.shape, n = s[ax];
    const z = tf.zeros([...s.slice(0, ax), n, d - 1, ...s.slice(ax + 1)]);
    const spread = tf.reshape(tf.concat([tf.expandDims(out, ax + 1), z], ax + 1), [...s.slice(0, ax), n * d, ...s.slice(ax + 1)]);
    out = tf.slice(spread, s.map(() => 0), [...s.slice(0, ax), (n - 1) * d + 1, ...s.slice(ax + 1)]);
  });
  return out;
}
for (const mk of [tf.layers.conv1d, tf.layers.conv2d]) {
  const proto = Object.getPrototypeOf(mk({ filters: 1, kernelSize: 1 }));
  const undilated = proto.call;
  proto.call = function (inputs, kwargs) {
    if (this.dilationRate.every(d => d === 1)) return undilated.call(this, inputs, kwargs);
    const x = Array.isArray(inputs) ? inputs[0] : inputs;
    const k = dilateKernel(this.kernel.read(), this.dilationRate);
    let y = this.rank === 1 ? tf.conv1d(x, k, this.strides[0], this.padding) : tf.conv2d(x, k, this.strides, this.padding);
    if (this.useBias) y = tf.add(y, this.bias.read());
    return this.activation.apply(y);
  };
}
// The same for DepthwiseConv2D (fuzz.js' call, which applies the
// dilation tfjs drops) and SeparableConv2D: the depthwise kernel's taps
// spread apart, then tfjs' undilated op.
{
  const dw = Object.getPrototypeOf(tf.layers.depthwiseConv2d({ kernelSize: 1 }));
  const dwCall = dw.call;
  dw.call = function (inputs, kwargs) {
    if (this.dilationRate.every(d => d === 1)) return dwCall.call(this, inputs, kwargs);
    const x = Array.isArray(inputs) ? inputs[0] : inputs;
    let y = tf.depthwiseConv2d(x, dilateKernel(this.depthwiseKernel.read(), this.dilationRate), this.strides, this.padding);
    if (this.useBias) y = tf.add(y, this.bias.read());
    return this.activation.apply(y);
  };
  const sep = Object.getPrototypeOf(tf.layers.separableConv2d({ filters: 1, kernelSize: 1 }));
  const sepCall = sep.call;
  sep.call = function (inputs, kwargs) {
    if (this.dilationRate.every(d => d === 1)) return sepCall.call(this, inputs, kwargs);
    const x = Array.isArray(inputs) ? inputs[0] : inputs;
    let y = tf.separableConv2d(x, dilateKernel(this.depthwiseKernel.read(), this.dilationRate),
      this.pointwiseKernel.read(), this.strides, this.padding);
    if (this.useBias) y = tf.add(y, this.bias.read());
    return this.activation.apply(y);
  };
}

const EPOCHS = 3;
const f = Math.fround;
const prod = a => a.reduce((x, y) => x * y, 1);
const initOf = cls => ({ module: 'keras.initializers', class_name: cls, config: cls === 'GlorotUniform' ? { seed: null } : {}, registered_name: null });

// Activations with a derivative tfjs and Keras agree on (hard_sigmoid:
// tfjs' differs; exponential: overflows within a few steps).
const ACTS = ['linear', 'relu', 'sigmoid', 'tanh', 'softmax', 'gelu', 'silu', 'elu', 'selu', 'softplus',
  'softsign', 'relu6', 'leaky_relu'];

// Keras 3 loss names / classes (keras/src/losses/losses.py).
const LOSSES = {
  mse: { cls: 'MeanSquaredError', name: 'mean_squared_error' },
  mae: { cls: 'MeanAbsoluteError', name: 'mean_absolute_error' },
  bce: { cls: 'BinaryCrossentropy', name: 'binary_crossentropy' },
  cce: { cls: 'CategoricalCrossentropy', name: 'categorical_crossentropy' },
  scce: { cls: 'SparseCategoricalCrossentropy', name: 'sparse_categorical_crossentropy' },
};

// Keras 3 configs of the random regularisation layers (noisy cases).
const NOISE = {
  Dropout: rate => ({ rate: L.pyf(rate), seed: null, noise_shape: null }),
  GaussianNoise: rate => ({ stddev: L.pyf(rate), seed: null }),
  GaussianDropout: rate => ({ rate: L.pyf(rate), seed: null }),
  AlphaDropout: rate => ({ rate: L.pyf(rate), noise_shape: null, seed: null }),
  SpatialDropout1D: rate => ({ rate: L.pyf(rate), seed: null }),
  SpatialDropout2D: rate => ({ rate: L.pyf(rate), seed: null, data_format: 'channels_last' }),
};

function generate(seed) {
  const r = new FZ.Rand(seed);
  const family = r.pick(['mlp', 'mlp', 'seq', 'seq', 'img', 'text']);
  // the model's kind and its random layers come from their own stream:
  // Functional (one output), Sequential (three ways of giving the input
  // shape, below), or Functional with two or three trained outputs; in
  // 20% of the cases random regularisation layers (`noisy`, see runCase)
  const rk = new FZ.Rand((seed ^ 0x3c0de5) >>> 0);
  const kind = rk.pick(['functional', 'functional', 'functional', 'sequential', 'multi']);
  const seqInput = kind === 'sequential' ? rk.pick(['input_layer', 'build_input_shape', 'input_shape']) : null;
  const mayNoise = rk.chance(0.2);
  const mname = kind === 'sequential' ? 'sequential' : 'functional';
  const b = new G.Builder(kind === 'sequential' ? 'sequential' : 'functional', mname, (seed * 2654435761) >>> 0);
  b.depthwise = new Set();
  b.classes = [];
  let counter = 0;
  const uname = base => `${base}_${counter++}`;
  const act = () => r.pick(ACTS);
  // |lin| on a handle: a trainable per-feature constant (a bias, a
  // normalisation's beta) may reach it through linear layers only.  Such
  // a constant is the same for every row and position, so a
  // BatchNormalization after a linear layer subtracts it: its gradient is
  // identically zero, both sides then train float32 rounding noise (seed
  // 164, README.md).  A layer in front of a BatchNormalization is
  // therefore made nonlinear (tanh) when its input is |lin|.
  const mark = (h, lin) => { h.lin = !!lin; return h; };
  const add = (cls, n, cfg, tfl, inp, kw) => {
    b.classes.push(cls);
    b.denseInit[n] = 1;
    const out = b.layer(cls, n, cfg, tfl, inp, kw);
    return mark(out, (Array.isArray(inp) ? inp : [inp]).some(h => h.lin));
  };
  // a softmax over one feature is the constant 1 (seed 1279: a 1-filter
  // SeparableConv2D's softmax, then a BatchNormalization of a constant
  // that amplifies rounding by rsqrt(epsilon)): linear instead
  const one = (features, a) => (a === 'softmax' && features === 1 ? 'linear' : a);
  const dense = (h, units, a0, useBias = true, name) => {
    const n = name || uname('dense'), a = one(units, a0);
    b.classes.push('Dense');
    return mark(b.dense(n, units, a, h, { useBias, tfActivation: FZ.tfAct(a, 'keras3') }),
      a === 'linear' && (useBias || h.lin));
  };

  let shape, range = [-1, 1];
  if (family === 'mlp') shape = [r.int(3, 12)];
  else if (family === 'seq') shape = [r.int(3, 7), r.int(2, 5)];
  else if (family === 'img') shape = [r.int(4, 8), r.int(4, 8), r.int(1, 3)];
  else { shape = [r.int(3, 8)]; range = [0, 20]; }
  const input = b.input('input_layer', shape);
  // a second input in 30% of the non-token Functional cases (its own
  // stream, so that the rest of a seed's model does not depend on it),
  // merged before the head
  const r2 = new FZ.Rand((seed ^ 0x2b1e7) >>> 0);
  const inputB = family !== 'text' && r2.chance(0.3) && kind !== 'sequential'
    ? b.input('input_b', shape.slice(0, -1).concat([r2.int(2, 5)])) : null;
  let cur = input;
  const pool = [];
  if (family === 'text') {
    b.classes.push('Embedding');
    cur = mark(G.embedding(b, cur, 20, r.int(2, 6)), false);
  }
  pool.push(cur);
  const chain = kind === 'sequential';  // a Sequential is a chain: no branches, no merges
  // a layer that feeds a normalisation gets no bias: the loss does not
  // depend on it (BatchNormalization subtracts the batch mean), so its
  // gradient is float32 rounding noise, which Adam/RMSprop turn into steps
  // of +-lr that no two implementations share
  const steps = r.int(1, 6);
  for (let step = 0; step < steps; step++) {
    if (!chain && pool.length > 1 && r.chance(0.2)) cur = r.pick(pool);
    const s = cur.shape, rank = s.length, last = s[rank - 1];
    const ops = ['dense', 'dense', 'act', 'bn', 'ln', 'dropout', 'actlayer'];
    if (!chain) ops.push('add', 'concat', 'merge');
    if (rank === 2 && last % 2 === 0 && last > 2) ops.push('reshape');
    if (rank === 3) ops.push('conv1d', 'pool1d', 'rnn', 'rnn', 'gpool', 'flatten', 'permute', 'bidir');
    if (rank === 4) ops.push('conv2d', 'conv2d', 'dwconv', 'sepconv', 'pool2d', 'gpool', 'flatten', 'permute');
    if (mayNoise) ops.push('noise', 'noise');
    if (prod(s.slice(1)) > 300) ops.push('gpool', rank === 3 ? 'pool1d' : rank === 4 ? 'pool2d' : 'dense');
    const op = r.pick(ops);
    let out = null;
    if (op === 'dense') {
      out = dense(cur, r.int(2, 10), act(), r.chance(0.8));
    } else if (op === 'act') {
      const a = act(), n = uname('activation');
      if (a === 'softmax' && last === 1) continue;  // (the constant 1)
      out = add('Activation', n, { activation: a }, tf.layers.activation({ activation: FZ.tfAct(a, 'keras3'), name: n }), cur);
      if (a !== 'linear') out.lin = false;
    } else if (op === 'actlayer') {
      const cls = r.pick(['ReLU', 'LeakyReLU', 'ELU', 'Softmax', 'PReLU']);
      const n = uname(cls.toLowerCase());
      if (cls === 'Softmax' && last === 1) continue;
      if (cls === 'ReLU') {
        const mv = r.pick([null, 6.0, 2.5]), ns = r.pick([0.0, 0.0, 0.1]), th = r.pick([0.0, 0.0, 0.2]);
        out = add('ReLU', n, { max_value: mv === null ? null : L.pyf(mv), negative_slope: L.pyf(ns), threshold: L.pyf(th) },
          new KReLU({ name: n, max_value: mv, negative_slope: ns, threshold: th }), cur);
      } else if (cls === 'LeakyReLU') {
        const al = r.pick([0.3, 0.1]);
        out = add('LeakyReLU', n, { negative_slope: L.pyf(al) },
          tf.layers.leakyReLU({ alpha: al, name: n }), cur);
      } else if (cls === 'ELU') {
        out = add('ELU', n, { alpha: L.pyf(1.0) }, tf.layers.elu({ alpha: 1.0, name: n }), cur);
      } else if (cls === 'Softmax') {
        out = add('Softmax', n, { axis: -1 }, tf.layers.softmax({ axis: -1, name: n }), cur, { mask: null });
      } else {
        const shared = rank > 2 && r.chance(0.5) ? [1] : null;
        out = add('PReLU', n, { alpha_initializer: initOf('Zeros'), alpha_regularizer: null, alpha_constraint: null,
          shared_axes: shared }, tf.layers.prelu({ sharedAxes: shared, name: n }), cur);
      }
      out.lin = false;
    } else if (op === 'bn' || op === 'ln') {
      // a fresh bias-free Dense (or conv) in front (see above); nonlinear
      // before a BatchNormalization when its input is |lin|
      const nonlin = op === 'bn' && cur.lin;
      let h;
      if (rank === 4 && r.chance(0.5)) h = conv2d(cur, false, nonlin ? 'tanh' : 'linear');
      else {
        const units = r.int(2, 8), a = r.pick(['linear', 'relu', 'tanh']);
        h = dense(cur, units, a === 'linear' && nonlin ? 'tanh' : a, false);
      }
      if (op === 'bn') {
        const n = uname('batch_normalization'), eps = r.pick([0.001, 1e-5]), mom = r.pick([0.99, 0.9]);
        const center = r.chance(0.8), scale = r.chance(0.8);
        out = add('BatchNormalization', n, G.normSpecific({ axis: -1, momentum: L.pyf(mom), epsilon: L.pyf(eps),
          center, scale, moving_mean_initializer: initOf('Zeros'), moving_variance_initializer: initOf('Ones'),
          synchronized: false }),
        tf.layers.batchNormalization({ axis: -1, momentum: mom, epsilon: eps, center, scale, name: n }), h, { mask: null });
        out.lin = center;
      } else {
        const n = uname('layer_normalization'), eps = r.pick([0.001, 0.01]);
        const center = r.chance(0.8), scale = r.chance(0.8);
        out = add('LayerNormalization', n, G.normSpecific({ axis: [-1], epsilon: L.pyf(eps), center, scale,
          rms_scaling: false }), tf.layers.layerNormalization({ axis: -1, epsilon: eps, center, scale, name: n }), h);
        out.lin = center;
      }
    } else if (op === 'dropout') {
      // rate 0: dropout masks are not comparable across implementations
      const n = uname('dropout');
      out = add('Dropout', n, { rate: L.pyf(0.0), seed: null, noise_shape: null },
        tf.layers.dropout({ rate: 0, name: n }), cur, { training: false });
    } else if (op === 'noise') {
      // a random layer in training (kdc's counter-based stream; noisy
      // cases are compared as runCase says); the identity at inference,
      // which is all the reference model needs
      const cands = ['Dropout', 'GaussianNoise', 'GaussianDropout', 'AlphaDropout'];
      if (rank === 3) cands.push('SpatialDropout1D');
      if (rank === 4) cands.push('SpatialDropout2D');
      const cls = rk.pick(cands), rate = rk.pick([0.1, 0.3, 0.5]), n = uname(cls.toLowerCase());
      const cfg = NOISE[cls](rate);
      // Dropout / AlphaDropout noise_shape: one mask shared over the
      // steps (rank 3) or the rows and columns (rank 4), or per row
      if (cfg.noise_shape === null && rank > 2 && rk.chance(0.4)) {
        cfg.noise_shape = rk.pick([[null, ...s.slice(1, -1).map(() => 1), last], [null, ...s.slice(1, -1), 1]]);
      }
      out = add(cls, n, cfg, tf.layers.activation({ activation: 'linear', name: n }), cur);
      b.entries[b.entries.length - 1].noise = true;
    } else if (op === 'add' || op === 'concat' || op === 'merge') {
      const cls = op === 'add' ? 'Add' : op === 'concat' ? 'Concatenate'
        : r.pick(['Subtract', 'Multiply', 'Average', 'Maximum']);
      const other = dense(cur, cls === 'Concatenate' ? r.int(1, 6) : last, act(), r.chance(0.8));
      const ins = [cur, other];
      if (cls !== 'Subtract' && cls !== 'Concatenate' && r.chance(0.3)) ins.push(dense(cur, last, act(), r.chance(0.8)));
      const n = uname(cls.toLowerCase());
      const tfl = cls === 'Concatenate' ? tf.layers.concatenate({ axis: -1, name: n })
        : cls === 'Subtract' ? new KSubtract({ name: n }) : tf.layers[cls.toLowerCase()]({ name: n });
      out = add(cls, n, cls === 'Concatenate' ? { axis: -1 } : {}, tfl, ins);
    } else if (op === 'conv1d') {
      // (dilation from the kind stream: dilateKernel above)
      const k = r.int(1, Math.min(3, s[1])), d = k > 1 && rk.chance(0.3) ? 2 : 1, st = d > 1 ? 1 : r.int(1, 2);
      const pad = r.pick(['valid', 'same']);
      if (pad === 'valid' && (k - 1) * d + 1 > s[1]) continue;
      const filters = r.int(1, 6), a = one(filters, act()), bias = r.chance(0.8), n = uname('conv1d');
      out = add('Conv1D', n, convCfg({ filters, k: [k], s: [st], pad, d: [d], act: a, bias }),
        tf.layers.conv1d({ filters, kernelSize: k, strides: st, padding: pad, dilationRate: d,
          activation: FZ.tfAct(a, 'keras3'), useBias: bias, name: n }), cur);
      out.lin = a === 'linear' && (bias || cur.lin);
    } else if (op === 'conv2d') {
      out = conv2d(cur, r.chance(0.8));
    } else if (op === 'dwconv' || op === 'sepconv') {
      const k = [r.int(1, 3), r.int(1, 3)];
      const dil = k.map(kk => (kk > 1 && rk.chance(0.3) ? 2 : 1)), dilated = dil.some(d => d > 1);
      const st = [r.int(1, 2), r.int(1, 2)].map(v => (dilated ? 1 : v));
      const eff = k.map((kk, i) => (kk - 1) * dil[i] + 1);
      const pad = eff[0] > s[1] || eff[1] > s[2] ? 'same' : r.pick(['valid', 'same']);
      const dm = r.int(1, 2), a0 = act(), bias = r.chance(0.8);
      let a = one(last * dm, a0);
      if (op === 'dwconv') {
        const n = uname('depthwise_conv2d');
        b.depthwise.add(n);
        out = add('DepthwiseConv2D', n, FZ.convCfg({ k, s: st, pad, d: dil, act: a, bias, dm }, 'depthwise'),
          tf.layers.depthwiseConv2d({ kernelSize: k, strides: st, padding: pad, depthMultiplier: dm, dilationRate: dil,
            activation: FZ.tfAct(a, 'keras3'), useBias: bias, name: n }), cur);
      } else {
        const filters = r.int(1, 6), n = uname('separable_conv2d');
        a = one(filters, a0);
        out = add('SeparableConv2D', n, FZ.convCfg({ filters, k, s: st, pad, d: dil, act: a, bias, dm }, 'separable'),
          tf.layers.separableConv2d({ filters, kernelSize: k, strides: st, padding: pad, depthMultiplier: dm, dilationRate: dil,
            activation: FZ.tfAct(a, 'keras3'), useBias: bias, name: n }), cur);
      }
      out.lin = a === 'linear' && (bias || cur.lin);
    } else if (op === 'pool1d' || op === 'pool2d') {
      const nd = op === 'pool1d' ? 1 : 2, pad = r.pick(['valid', 'same']);
      const ps = [], sts = [];
      for (let i = 0; i < nd; i++) { ps.push(r.int(1, 2)); sts.push(r.chance(0.5) ? ps[i] : r.int(1, 2)); }
      if (pad === 'valid' && ps.some((p, i) => p > s[1 + i])) continue;
      // (max pooling: ties come from relu zeros, whose derivative is 0,
      // so where the gradient goes among them does not matter; average
      // pooling only 'valid': tfjs' avgPool 'same' gradient is wrong at
      // the edges, README.md "BatchNormalization in training")
      const isMax = pad === 'same' || r.chance(0.5);
      const n = uname(isMax ? 'max_pooling' : 'average_pooling');
      const mk = tf.layers[`${isMax ? 'max' : 'average'}Pooling${nd}d`];
      const tfl = mk(nd === 1 ? { poolSize: ps[0], strides: sts[0], padding: pad, name: n }
        : { poolSize: ps, strides: sts, padding: pad, name: n });
      out = add(`${isMax ? 'Max' : 'Average'}Pooling${nd}D`, n, G.poolSpecific(ps, sts, pad), tfl, cur);
    } else if (op === 'gpool') {
      // (global max pooling not over token embeddings: a repeated id
      // gives an exact tie, and tfjs' tf.max gradient sends the whole
      // cotangent to every tied position, twice the derivative)
      const nd = rank - 2, isMax = r.chance(0.3) && family !== 'text';
      const n = uname(`global_${isMax ? 'max' : 'average'}_pooling`);
      const tfl = tf.layers[`global${isMax ? 'Max' : 'Average'}Pooling${nd}d`]({ name: n });
      out = add(`Global${isMax ? 'Max' : 'Average'}Pooling${nd}D`, n, { data_format: 'channels_last', keepdims: false }, tfl, cur);
    } else if (op === 'flatten') {
      const n = uname('flatten');
      out = add('Flatten', n, { data_format: 'channels_last' }, tf.layers.flatten({ name: n }), cur);
    } else if (op === 'permute') {
      let dims = r.shuffle(Array.from({ length: rank - 1 }, (_, i) => i + 1));
      if (dims.every((v, i) => v === i + 1)) dims = dims.reverse();
      const n = uname('permute');
      out = add('Permute', n, { dims }, tf.layers.permute({ dims, name: n }), cur);
    } else if (op === 'reshape') {
      const divs = [];
      for (let d = 2; d < last; d++) if (last % d === 0) divs.push(d);
      const d = r.pick(divs), n = uname('reshape'), ts = r.chance(0.3) ? [d, -1] : [d, last / d];
      out = add('Reshape', n, { target_shape: ts }, tf.layers.reshape({ targetShape: ts, name: n }), cur);
    } else if (op === 'rnn' || op === 'bidir') {
      // (not over one step: tfjs 4.22's unstack gradient with a single
      // output passes stack() a tensor instead of a list, "Argument
      // tensors passed to stack must be a Tensor[]"; seeds 119, 2300)
      if (s[1] < 2) continue;
      const cls = r.pick(['LSTM', 'GRU', 'SimpleRNN']), units = r.int(2, 6), seqs = r.chance(0.5);
      const back = op === 'rnn' && r.chance(0.3), n = uname(op === 'rnn' ? cls.toLowerCase() : 'bidirectional');
      const extra = { return_sequences: seqs, go_backwards: back };
      if (cls === 'GRU') extra.reset_after = false;  // tfjs has no reset_after=true
      const inner = n => {
        const opts = { units, returnSequences: seqs, goBackwards: back, name: n };
        if (cls !== 'SimpleRNN') opts.recurrentActivation = 'sigmoid';
        return cls === 'LSTM' ? tf.layers.lstm(opts) : cls === 'GRU' ? tf.layers.gru(opts) : tf.layers.simpleRNN(opts);
      };
      b.denseInit[n] = 1;
      if (op === 'rnn') {
        b.classes.push(cls);
        out = b.rnnCall(cls, n, G.rnnSpecific(cls, units, extra), inner(n), cur)[0];
      } else {
        const mm = r.pick(['concat', 'sum', 'ave', 'mul']), lname = cls.toLowerCase();
        b.classes.push('Bidirectional');
        out = b.layer('Bidirectional', n, G.bidirSpecific(cls, lname, units, mm, cur.shape, extra),
          tf.layers.bidirectional({ name: n, mergeMode: mm, layer: inner(lname) }), cur);
        b.entries[b.entries.length - 1].innerCls = cls;
      }
      out = mark(out, false);
    }
    if (!out) continue;
    pool.push(out);
    cur = out;
  }

  function conv2d(h, bias, linAct = 'linear') {
    const s = h.shape, k = [r.int(1, 3), r.int(1, 3)];
    // (dilation 2 on one or both dims in 30%, then stride 1, as TF requires)
    const dil = k.map(kk => (kk > 1 && rk.chance(0.3) ? 2 : 1)), dilated = dil.some(d => d > 1);
    const st = [r.int(1, 2), r.int(1, 2)].map(v => (dilated ? 1 : v));
    const eff = k.map((kk, i) => (kk - 1) * dil[i] + 1);
    const pad = eff[0] > s[1] || eff[1] > s[2] ? 'same' : r.pick(['valid', 'same']);
    // (a normalisation's bias-free conv has 2 filters or more: a
    // LayerNormalization over one feature outputs its beta, a constant
    // whose gradient through a later BatchNormalization is zero, seed 2314)
    const filters = bias ? r.int(1, 6) : Math.max(2, r.int(1, 6)), a = one(filters, bias ? act() : linAct);
    const n = uname('conv2d');
    const out = add('Conv2D', n, convCfg({ filters, k, s: st, pad, d: dil, act: a, bias }),
      tf.layers.conv2d({ filters, kernelSize: k, strides: st, padding: pad, dilationRate: dil,
        activation: FZ.tfAct(a, 'keras3'), useBias: bias, name: n }), h);
    return mark(out, a === 'linear' && (bias || h.lin));
  }

  if (inputB) {
    const other = dense(inputB, r2.int(1, 6), r2.pick(ACTS));
    let parts = [cur, other];
    if (!(cur.shape.length === other.shape.length && cur.shape.slice(0, -1).every((d, i) => d === other.shape[i]))) {
      parts = parts.map(h => {
        if (h.shape.length === 2) return h;
        const n = uname('flatten');
        return add('Flatten', n, { data_format: 'channels_last' }, tf.layers.flatten({ name: n }), h);
      });
    }
    const n = uname('concatenate');
    cur = add('Concatenate', n, { axis: -1 }, tf.layers.concatenate({ axis: -1, name: n }), parts);
  }

  // ---- the heads (one per trained output), their losses and labels
  const head = (h, name, rr) => {
    const loss = rr.pick(['mse', 'mae', 'bce', 'bce', 'cce', 'cce', 'scce', 'scce']);
    const fromLogits = loss !== 'mse' && loss !== 'mae' && rr.chance(0.5);
    if (h.shape.length === 4 || (h.shape.length === 3 && !rr.chance(0.4))) {
      const n = uname('flatten');
      h = add('Flatten', n, { data_format: 'channels_last' }, tf.layers.flatten({ name: n }), h);
    }
    const classes = loss === 'mse' || loss === 'mae' ? rr.int(1, 4) : loss === 'bce' ? rr.int(1, 3) : rr.int(2, 5);
    let headAct = 'linear';
    if (!fromLogits && (loss === 'bce')) headAct = 'sigmoid';
    if (!fromLogits && (loss === 'cce' || loss === 'scce')) headAct = 'softmax';
    if (loss === 'mse' || loss === 'mae') headAct = rr.pick(['linear', 'tanh']);
    return { out: dense(h, classes, headAct, true, name), name, loss, fromLogits, classes, weight: 1 };
  };
  const heads = [head(cur, 'head', r)];
  if (kind === 'multi') {
    // more heads on earlier tensors of the pool (or the same one);
    // Keras 3 loss_weights as a list, a dict or none
    const nOut = rk.int(2, 3), tensors = pool.concat([cur]);
    for (let i = 1; i < nOut; i++) heads.push(head(rk.pick(tensors), `aux_${i}`, rk));
    const lw = rk.pick([null, 'list', 'dict']);
    if (lw) heads.forEach(hd => { hd.weight = rk.pick([1.0, 0.5, 2.0, 0.3]); });
    heads.lossForm = rk.pick(['list', 'dict']);
    heads.weightForm = lw;
  }

  // ---- optimizer (Keras 3 class + get_config() keys that kdc reads)
  const optKind = r.pick(['SGD', 'SGD', 'Adam', 'AdamW', 'RMSprop']);
  const opt = { cls: optKind };
  if (optKind === 'SGD') {
    opt.learning_rate = r.pick([0.01, 0.05, 0.1]);
    opt.momentum = r.pick([0.0, 0.0, 0.9, 0.5]);
    opt.nesterov = opt.momentum > 0 && r.chance(0.5);
  } else if (optKind === 'Adam' || optKind === 'AdamW') {
    opt.learning_rate = r.pick([0.001, 0.003]);
    opt.beta_1 = 0.9; opt.beta_2 = 0.999; opt.epsilon = 1e-7; opt.amsgrad = false;
    opt.weight_decay = optKind === 'AdamW' ? r.pick([0.004, 0.05]) : null;
  } else {
    opt.learning_rate = r.pick([0.001, 0.003]);
    opt.rho = 0.9; opt.momentum = r.pick([0.0, 0.0, 0.5]); opt.epsilon = 1e-7; opt.centered = r.chance(0.3);
  }
  const batch = r.pick([8, 16]);
  const rows = batch * r.int(1, 2) + r.int(1, batch - 1);
  const outs = heads.map(hd => hd.out);
  // the Keras 3 JSON holds only the layers the outputs depend on
  b.entries = FZ.pruneNodes(b.entries, outs);
  b.classes = b.entries.filter(e => e.cls !== 'InputLayer').map(e => e.cls);
  const model = tf.model({ inputs: b.inputs, outputs: outs.map(h => h.sym), name: mname });
  // noisy: a random layer the outputs depend on
  const noisy = b.entries.some(e => e.noise);
  // Keras' validation_split: the last rows validate after each epoch
  const valSplit = r.chance(0.4) ? r.pick([0.2, 0.25]) : 0;
  return { b, model, outputs: outs, heads, kind, seqInput, noisy, family, range, opt, batch, rows, valSplit, r };
}

function convCfg(o) {
  return Object.assign({ filters: o.filters, kernel_size: o.k, strides: o.s, padding: o.pad, data_format: 'channels_last',
    dilation_rate: o.d, groups: 1, activation: o.act, use_bias: o.bias, kernel_initializer: initOf('GlorotUniform'),
    bias_initializer: initOf('Zeros'), kernel_regularizer: null, bias_regularizer: null, activity_regularizer: null,
    kernel_constraint: null, bias_constraint: null });
}

// Keras 3 compile_config of the case (what model.compile() records).
function compileConfig(g) {
  const o = g.opt, pf = v => (v === null || typeof v === 'boolean' ? v : L.pyf(v));
  const cfg = { name: { SGD: 'SGD', Adam: 'adam', AdamW: 'adamw', RMSprop: 'rmsprop' }[o.cls],
    learning_rate: pf(o.learning_rate) };
  for (const k of ['weight_decay', 'momentum', 'nesterov', 'beta_1', 'beta_2', 'epsilon', 'amsgrad', 'rho', 'centered']) {
    if (o[k] !== undefined) cfg[k] = pf(o[k]);
  }
  Object.assign(cfg, { clipnorm: null, global_clipnorm: null, clipvalue: null, use_ema: false,
    ema_momentum: L.pyf(0.99), ema_overwrite_frequency: null, loss_scale_factor: null,
    gradient_accumulation_steps: null });
  const lossOf = hd => {
    const lc = { name: LOSSES[hd.loss].name, reduction: 'sum_over_batch_size' };
    if (hd.loss !== 'mse' && hd.loss !== 'mae') lc.from_logits = hd.fromLogits;
    return { module: 'keras.losses', class_name: LOSSES[hd.loss].cls, config: lc, registered_name: null };
  };
  // several outputs: compile(loss=[...] or {output: ...}, loss_weights=[...] or {...})
  const perOut = (form, v) => (form === 'dict' ? Object.fromEntries(g.heads.map(hd => [hd.name, v(hd)])) : g.heads.map(v));
  const multi = g.heads.length > 1;
  return {
    optimizer: { module: 'keras.optimizers', class_name: o.cls, config: cfg, registered_name: null },
    loss: multi ? perOut(g.heads.lossForm, lossOf) : lossOf(g.heads[0]),
    loss_weights: multi && g.heads.weightForm ? perOut(g.heads.weightForm, hd => L.pyf(hd.weight)) : null,
    metrics: null, weighted_metrics: null, run_eagerly: false, steps_per_execution: 1,
    jit_compile: false,
  };
}

// The same training by kdc compile flags, when they can say it.
function cliFlags(g) {
  const o = g.opt;
  const plain = (o.cls === 'SGD' && o.momentum === 0) || (o.cls === 'Adam') ||
    (o.cls === 'AdamW' && o.weight_decay === 0.004) || (o.cls === 'RMSprop' && o.momentum === 0 && !o.centered);
  // (several outputs: --loss a,b says the losses, not loss_weights nor a
  // from_logits of one output only)
  const hs = g.heads;
  if (!plain || (hs.length > 1 && (hs.weightForm || hs.some(hd => hd.fromLogits)))) return null;
  const flags = ['--loss', hs.map(hd => LOSSES[hd.loss].name).join(','), '--optimizer', o.cls.toLowerCase(),
    '--learning-rate', String(o.learning_rate)];
  if (hs[0].fromLogits) flags.push('--from-logits');
  return flags;
}

// ---- the Keras 3 loss (keras/src/losses/losses.py, backend nn.py), f32:
// per-sample values over the last axis, then the mean over the rest; |g|:
// one head (loss, fromLogits, classes)
function kerasLoss(g, y, p) {
  {  // (no tf.tidy here: tfjs' custom gradients lose their saved inputs in one under tf.variableGrads)
    const eps = 1e-7;
    let per;
    if (g.loss === 'mse') per = tf.mean(tf.square(tf.sub(y, p)), -1);
    else if (g.loss === 'mae') per = tf.mean(tf.abs(tf.sub(y, p)), -1);
    else if (g.loss === 'bce') {
      if (g.fromLogits) {
        // -t log_sigmoid(p) - (1 - t) log_sigmoid(-p)
        // (log_sigmoid(z) = -softplus(-z); tf.logSigmoid's custom
        // gradient loses its saved input under tf.variableGrads)
        const logSig = z => tf.neg(tf.softplus(tf.neg(z)));
        per = tf.mean(tf.sub(tf.neg(tf.mul(y, logSig(p))), tf.mul(tf.sub(1, y), logSig(tf.neg(p)))), -1);
      } else {
        const o = tf.clipByValue(p, eps, 1 - eps);
        per = tf.mean(tf.neg(tf.add(tf.mul(y, tf.log(o)), tf.mul(tf.sub(1, y), tf.log(tf.sub(1, o))))), -1);
      }
    } else {
      const t = g.loss === 'scce' ? tf.oneHot(tf.cast(y, 'int32'), g.classes).toFloat() : y;
      if (g.fromLogits) per = tf.neg(tf.sum(tf.mul(t, tf.logSoftmax(p)), -1));
      else {
        const o = tf.clipByValue(tf.div(p, tf.sum(p, -1, true)), eps, 1 - eps);
        per = tf.neg(tf.sum(tf.mul(t, tf.log(o)), -1));
      }
    }
    return tf.mean(per);
  }
}

// ---- the Keras 3 optimizer update of one variable, in f32
// (keras/src/optimizers/{sgd,adam,adamw,rmsprop,base_optimizer}.py)
function makeOptimizer(o) {
  const slots = new Map();
  const slot = (name, k, n) => {
    const key = `${name}:${k}`;
    if (!slots.has(key)) slots.set(key, new Float32Array(n));
    return slots.get(key);
  };
  return (name, W, G, iteration) => {
    const lr = f(o.learning_rate);
    if (o.weight_decay) {  // base_optimizer._apply_weight_decay: var -= var * wd * lr
      const wd = f(o.weight_decay);
      for (let i = 0; i < W.length; i++) W[i] = f(W[i] - f(f(W[i] * wd) * lr));
    }
    if (o.cls === 'SGD') {
      const mom = f(o.momentum);
      if (o.momentum === 0) {
        for (let i = 0; i < W.length; i++) W[i] = f(W[i] - f(G[i] * lr));
      } else {
        const M = slot(name, 'm', W.length);
        for (let i = 0; i < W.length; i++) {
          M[i] = f(f(M[i] * mom) - f(G[i] * lr));
          W[i] = o.nesterov ? f(W[i] + f(f(M[i] * mom) - f(G[i] * lr))) : f(W[i] + M[i]);
        }
      }
    } else if (o.cls === 'Adam' || o.cls === 'AdamW') {
      const b1 = f(o.beta_1), b2 = f(o.beta_2), eps = f(o.epsilon), t = f(iteration + 1);
      const alpha = f(f(lr * f(Math.sqrt(f(1 - f(Math.pow(b2, t)))))) / f(1 - f(Math.pow(b1, t))));
      const M = slot(name, 'm', W.length), V = slot(name, 'v', W.length);
      for (let i = 0; i < W.length; i++) {
        M[i] = f(M[i] + f(f(G[i] - M[i]) * f(1 - b1)));
        V[i] = f(V[i] + f(f(f(G[i] * G[i]) - V[i]) * f(1 - b2)));
        W[i] = f(W[i] - f(f(M[i] * alpha) / f(f(Math.sqrt(V[i])) + eps)));
      }
    } else {  // RMSprop
      const rho = f(o.rho), eps = f(o.epsilon), mom = f(o.momentum);
      const V = slot(name, 'v', W.length), A = slot(name, 'a', W.length), M = slot(name, 'm', W.length);
      for (let i = 0; i < W.length; i++) {
        V[i] = f(f(rho * V[i]) + f(f(1 - rho) * f(G[i] * G[i])));
        let den = f(V[i] + eps);
        if (o.centered) {
          A[i] = f(f(rho * A[i]) + f(f(1 - rho) * G[i]));
          den = f(f(V[i] - f(A[i] * A[i])) + eps);
        }
        const inc = f(f(lr * G[i]) / f(Math.sqrt(den)));
        if (o.momentum > 0) {
          M[i] = f(f(mom * M[i]) + inc);
          W[i] = f(W[i] - M[i]);
        } else W[i] = f(W[i] - inc);
      }
    }
  };
}

// Keras 3's CompileLoss over the heads: sum of weight x loss (a weight
// of 1 multiplies nothing), each output's unweighted loss alongside.
function totalLoss(g, ys, out) {
  const ps = Array.isArray(out) ? out : [out];
  const each = g.heads.map((hd, i) => kerasLoss(hd, ys[i], ps[i]));
  let total = null;
  g.heads.forEach((hd, i) => {
    const l = hd.weight === 1 ? each[i] : tf.mul(each[i], f(hd.weight));
    total = total ? tf.add(total, l) : l;
  });
  return { total, each };
}

// The reference's own check: at the first step, two elements of every
// trainable weight's gradient against central differences of the f32
// loss (h = 1e-3; |fd - g| <= 2e-3 + 2e-2 |g|: the f32 loss rounding over
// 2h is ~1e-4 relative; when a relu kink lies within h, h = 1e-4 passes).  The forward in training mode updates the moving statistics;
// they are put back.
function fdCheck(g, vars, grads, xb, yb) {
  const moving = g.model.weights.filter(w => !w.trainable).map(w => [w, w.read().clone()]);
  const lossAt = () => { const l = totalLoss(g, yb, g.model.apply(xb, { training: true })).total; return l.dataSync()[0]; };
  // (g.fdVars: at most that many variables, spread over the model: a big
  // real model would need thousands of forwards)
  const step = g.fdVars ? Math.max(1, Math.ceil(vars.length / g.fdVars)) : 1;
  for (const v of vars.filter((_, k) => k % step === 0)) {
    if (g.deadline && Date.now() > g.deadline) throw Error('too slow: past the deadline in the gradient check');
    const w0 = v.dataSync().slice(), gr = grads[v.name].dataSync();
    for (const i of [0, w0.length - 1]) {
      const at = d => { const w = w0.slice(); w[i] += d; v.assign(tf.tensor(w, v.shape)); return lossAt(); };
      const fdOff = h => Math.abs((at(h) - at(-h)) / (2 * h) - gr[i]);
      // (a relu kink within 1e-3: again with h = 1e-4, f32 noise ~2e-4)
      if (fdOff(1e-3) > 2e-3 + 2e-2 * Math.abs(gr[i]) && fdOff(1e-4) > 2e-3 + 2e-2 * Math.abs(gr[i])) {
        throw new Error(`reference gradient of ${v.name}[${i}]: ${gr[i]} vs central differences off by ` +
          `${fdOff(1e-3)} (h 1e-3), ${fdOff(1e-4)} (h 1e-4)`);
      }
    }
    v.assign(tf.tensor(w0, v.shape));
  }
  for (const [w, t] of moving) w.write(t);
}

// Keras 3 fit, shuffle off (see the header).  ys / yShapes: one label
// array per head.  History keys as Keras 3's: "loss", with several
// outputs "<output>_loss" (unweighted), the "val_" ones after each epoch.
function train(g, xs, ys, xShapes, yShapes) {
  const { model } = g;
  const vars = model.trainableWeights.map(w => w.val);
  const update = makeOptimizer(g.opt);
  const multi = g.heads.length > 1;
  const keys = ['loss', ...(multi ? g.heads.map(hd => `${hd.name}_loss`) : [])];
  const batchLoss = [], hist = {}, val = {};
  keys.forEach(k => { hist[k] = []; val[`val_${k}`] = []; });
  // Keras' train_validation_split: split_at = floor(rows * (1 - split))
  const split = g.valSplit ? Math.floor(g.rows * (1 - g.valSplit)) : g.rows;
  const cut = (arrs, shapes, r0, n) => arrs.map((x, i) => {
    const row = prod(shapes[i].slice(1));
    return tf.tensor(x.subarray(r0 * row, (r0 + n) * row), [n, ...shapes[i].slice(1)]);
  });
  // [model input (one tensor, or a list with two inputs), labels (one per head)]
  const slice = (r0, n) => {
    const xb = cut(xs, xShapes, r0, n);
    return [xb.length > 1 ? xb : xb[0], cut(ys, yShapes, r0, n)];
  };
  // the Mean trackers: values weighted by rows, f32 sums
  const tracker = () => ({ t: keys.map(() => 0), c: 0 });
  const track = (tr, vals, n) => { tr.t = tr.t.map((t, i) => f(t + f(vals[i] * n))); tr.c = f(tr.c + n); };
  let iteration = 0;
  for (let e = 0; e < EPOCHS; e++) {
    const tr = tracker();
    for (let r0 = 0; r0 < split; r0 += g.batch) {
      const n = Math.min(g.batch, split - r0);
      const [xb, yb] = slice(r0, n);
      let each = null;
      const { value, grads } = tf.variableGrads(() => {
        const l = totalLoss(g, yb, model.apply(xb, { training: true }));
        each = l.each.map(t => t.dataSync()[0]);  // (disposed after the call)
        return l.total;
      }, vars);
      const loss = value.dataSync()[0];
      // (a layer computed in plain JS, keras3_layers.js, has no tfjs gradient)
      const lost = vars.find(v => !grads[v.name]);
      if (lost) throw new Error(`tfjs gives no gradient for ${lost.name}`);
      if (!Number.isFinite(loss)) throw new Error(`non-finite loss at step ${iteration}`);
      if (iteration === 0) fdCheck(g, vars, grads, xb, yb);
      // (g.deadline: real_fit.js gives up on a model too slow to train in tfjs)
      if (g.deadline && Date.now() > g.deadline) throw Error(`too slow: past the deadline at step ${iteration}`);
      for (const v of vars) {
        const W = v.dataSync().slice();
        update(v.name, W, grads[v.name].dataSync(), iteration);
        v.assign(tf.tensor(W, v.shape));
      }
      iteration++;
      batchLoss.push(loss);
      track(tr, [loss, ...(multi ? each : [])], n);
      tf.dispose([xb, yb, value, ...Object.values(grads)].flat());
    }
    keys.forEach((k, i) => hist[k].push(f(tr.t[i] / tr.c)));
    if (split === g.rows) continue;
    // validation (Keras' evaluate: inference mode, the same trackers)
    const vt = tracker();
    for (let r0 = split; r0 < g.rows; r0 += g.batch) {
      const n = Math.min(g.batch, g.rows - r0);
      const [xb, yb] = slice(r0, n);
      const l = totalLoss(g, yb, model.apply(xb, { training: false }));
      track(vt, [l.total, ...(multi ? l.each : [])].map(t => t.dataSync()[0]), n);
      tf.dispose([xb, yb].flat());
    }
    keys.forEach((k, i) => val[`val_${k}`].push(f(vt.t[i] / vt.c)));
  }
  hist.batch_loss = batchLoss;
  if (split < g.rows) Object.assign(hist, val);
  return hist;
}

// The case's Keras 3 JSON: Functional, or a Sequential whose input shape
// is given as Keras 3 writes it (a leading InputLayer), as a Sequential
// built by fit() writes it (no InputLayer: `build_input_shape` and the
// first layer's build_config), or as the first layer's constructor
// argument (`input_shape` without the batch dim, or tf.keras 2's
// `batch_input_shape`) and nothing else.
function modelJSON(g) {
  const { b } = g;
  if (g.kind !== 'sequential') return b.keras3Functional(g.outputs);
  const j = b.keras3Sequential();
  if (g.seqInput === 'input_layer') return j;
  const batchShape = j.config.layers[0].config.batch_shape;
  j.config.layers.shift();
  const first = j.config.layers[0];
  if (g.seqInput === 'build_input_shape') {
    first.build_config = { input_shape: batchShape };
    return j;
  }
  delete j.config.build_input_shape;
  delete j.build_config;
  delete first.build_config;
  if (g.r.chance(0.5)) first.config.input_shape = batchShape.slice(1);
  else first.config.batch_input_shape = batchShape;
  return j;
}

// Labels of one head for |rows| rows: class ids (f32) for sparse losses,
// one-hot, 0/1 or uniform targets.
function labels(hd, outShape, rows, drng) {
  const lead = [rows, ...outShape.slice(1, -1)], nLead = prod(lead), C = hd.classes;
  if (hd.loss === 'scce') return { shape: lead, data: new Float32Array(nLead).map(() => Math.floor(drng() * C)) };
  const y = new Float32Array(nLead * C);
  if (hd.loss === 'cce') for (let i = 0; i < nLead; i++) y[i * C + Math.floor(drng() * C)] = 1;
  else if (hd.loss === 'bce') for (let i = 0; i < y.length; i++) y[i] = drng() < 0.5 ? 0 : 1;
  else for (let i = 0; i < y.length; i++) y[i] = f(drng() * 2 - 1);
  return { shape: [...lead, C], data: y };
}

async function genCase(seed, dir) {
  fs.mkdirSync(dir, { recursive: true });
  const g = generate(seed);
  const { b, model } = g;
  const wlist = FZ.setWeights(model, L.mulberry32((seed ^ 0x5eed1234) >>> 0));
  const doc = Object.assign({ compile_config: compileConfig(g) }, modelJSON(g));
  fs.writeFileSync(path.join(dir, 'model.json'), L.pyJSON(doc) + '\n');
  fs.writeFileSync(path.join(dir, 'weights.safetensors'), L.safetensorsBytes(
    wlist.map(w => ({ name: FZ.varPath(b, w), shape: w.shape, data: w.data, dtype: 'F32' }))));
  // data
  const drng = L.mulberry32((seed ^ 0x1a2b3c4d) >>> 0);
  const xShapes = model.inputs.map(t => [g.rows, ...t.shape.slice(1)]);
  const xs = xShapes.map((sh, i) => {
    const x = L.uniformArray(drng, prod(sh), i ? -1 : g.range[0], i ? 1 : g.range[1]);
    return g.family === 'text' ? x.map(Math.floor) : x;
  });
  const ls = g.heads.map((hd, i) => labels(hd, model.outputs[i].shape, g.rows, drng));
  const many = (n, base, i) => (n > 1 ? `${base}${i}.npy` : `${base}.npy`);
  xs.forEach((x, i) => fs.writeFileSync(path.join(dir, many(xs.length, 'x', i)), L.npyBytes(xShapes[i], x)));
  ls.forEach((l, i) => fs.writeFileSync(path.join(dir, many(ls.length, 'y', i)), L.npyBytes(l.shape, l.data)));
  // the layout, before training (it only looks at names and shapes)
  const lr = new FZ.Rand((seed ^ 0x1a7007) >>> 0);
  const heads = new Set(g.heads.map(hd => hd.name));
  const outsInfo = b.entries.filter(e => e.cls !== 'InputLayer').map(e => ({ name: e.name, shape: e.outShape,
    final: heads.has(e.name), prefix: g.kind === 'sequential' ? `${b.name}/` : '' }));
  fs.writeFileSync(path.join(dir, 'layout.json'), JSON.stringify(FZ.randomLayout(lr, wlist, b, outsInfo), null, 1) + '\n');
  // one more mesh for the sweep, with its own layout (not checked in)
  const mesh = lr.pick(['4x2', '1x8', '8x1', '2x2x2']), sizes = mesh.split('x').map(Number);
  fs.writeFileSync(path.join(dir, 'layout_mesh.json'),
    JSON.stringify(FZ.randomLayout(lr, wlist, b, outsInfo, sizes[1], sizes[0], sizes[2] || 0), null, 1) + '\n');
  if (g.noisy) {
    // random layers: kdc's masks and noise are not tfjs', so no reference
    // fit; the reference is the inference-mode prediction (the random
    // layers are identities there), written as expected*.npy
    const preds = predictRows(model, xs, xShapes);
    preds.forEach((p, i) => fs.writeFileSync(path.join(dir, many(preds.length, 'expected', i)), L.npyBytes(p.shape, p.data)));
  } else {
    const hist = train(g, xs, ls.map(l => l.data), xShapes, ls.map(l => l.shape));
    fs.writeFileSync(path.join(dir, 'history.json'), JSON.stringify(hist) + '\n');
    fs.writeFileSync(path.join(dir, 'final.safetensors'), L.safetensorsBytes(modelWeights(g)));
  }
  const desc = { seed, mesh, kind: g.kind, seq_input: g.seqInput, noisy: g.noisy, n_in: xs.length, n_out: ls.length,
    batch: g.batch, epochs: EPOCHS, rows: g.rows, validation_split: g.valSplit,
    outputs: g.heads.map(hd => ({ name: hd.name, loss: LOSSES[hd.loss].name, from_logits: hd.fromLogits, weight: hd.weight })),
    optimizer: g.opt, cli: cliFlags(g), layers: b.classes };
  fs.writeFileSync(path.join(dir, 'case.json'), JSON.stringify(desc) + '\n');
  model.dispose();
  return desc;
}

// Every weight of the tfjs model under its Keras 3 path (moving
// statistics too).
function modelWeights(g) {
  const finals = [];
  for (const layer of g.model.layers) {
    for (const w of layer.weights) {
      const wname = w.originalName.slice(w.originalName.lastIndexOf(layer.name + '/') + layer.name.length + 1);
      finals.push({ name: FZ.varPath(g.b, { layer: layer.name, wname }), shape: w.shape, data: w.read().dataSync() });
    }
  }
  return finals;
}

// Inference-mode predictions of every row: [{shape, data}] per output.
function predictRows(model, xs, xShapes) {
  const xt = xs.map((x, i) => tf.tensor(x, xShapes[i]));
  let out = model.predict(xt.length > 1 ? xt : xt[0]);
  if (!Array.isArray(out)) out = [out];
  const res = out.map(t => ({ shape: t.shape, data: t.dataSync().slice() }));
  tf.dispose([xt, out].flat());
  return res;
}

// ---- running kdc
// Tolerances (README.md, "Training fuzz"): float32 on both sides, the
// same formulas, different summation orders: losses within 1e-6 + 1e-4
// |ref| (the 1e-6: a loss near 0 is a few ulps of the logits, seed 1119),
// weights within 1e-4 + 1e-3 |ref|.
const LOSS_ATOL = 1e-6, LOSS_RTOL = 1e-4, W_ATOL = 1e-4, W_RTOL = 1e-3;
const RUNS = [
  { mesh: '1', cli: true },
  { mesh: '8' },
  { mesh: '2x4', layout: 'layout.json' },
  // only in the sweep: a random mesh among 4x2, 1x8, 8x1, 2x2x2 (axes
  // data,model,extra) with its own layout
  { mesh: 'random', layout: 'layout_mesh.json' },
  // and the plan compiled for twice the batch, fit in steps of `batch`
  // rows: every step is a masked partial one (docs/training.md "Batches")
  { mesh: '2x4', layout: 'layout.json', doubleBatch: true },
];

// Refusals kdc documents (one located line, exit 2) that a random layout
// can meet: they count as refused, not failed.
const KNOWN_REFUSALS = [
  /the layout splits the gate-packed dim of .* which kdc takes per gate: its \d+ units are not divisible/,
];

// Worst relative loss difference and weight error (in tolerances) seen.
const measured = { loss: 0, weights: 0, predict: 0, refused: 0 };

const files = (dir, n, base) => (n > 1 ? [...Array(n).keys()].map(i => path.join(dir, `${base}${i}.npy`))
  : [path.join(dir, `${base}.npy`)]);

// Predictions of |plan| (kdc run, inference mode) against |want| ([{shape,
// data}] per output), fuzz.js' tolerance |d| <= 1e-5 + 1e-4 |ref|: the
// failures.
function predictCheck(kdc, dir, desc, plan, want, tag) {
  const outs = want.map((w, i) => path.join(dir, `got_pred${i}.npy`));
  try {
    execFileSync(kdc, ['run', plan, ...files(dir, desc.n_in, 'x').flatMap(x => ['--input', x]),
      ...outs.flatMap(o => ['--output', o]), '--threads', '1'], { stdio: ['ignore', 'pipe', 'pipe'] });
  } catch (e) {
    return [`${tag}: predict exit ${e.status ?? e.signal ?? e.code}: ${String(e.stderr).trim().split('\n')[0]}`];
  }
  const fails = [];
  want.forEach((w, i) => {
    const got = L.readNpy(outs[i]).data;
    let worst = 0, at = 0;
    for (let k = 0; k < w.data.length; k++) {
      const q = Math.abs(got[k] - w.data[k]) / (1e-5 + 1e-4 * Math.abs(w.data[k]));
      if (!(q <= worst)) { worst = q; at = k; }
    }
    measured.predict = Math.max(measured.predict, worst);
    if (!(worst <= 1)) fails.push(`${tag}: output ${i}[${at}] ${got[at]} vs ${w.data[at]} (${worst.toExponential(2)} x tol)`);
  });
  return fails;
}

// A noisy case's draw-independent checks: the plan's inference-mode
// prediction from the initial weights against expected*.npy (the random
// layers are identities there), and after the mesh-1 fit, kdc's
// prediction from kdc's trained weights against the tfjs model given
// those weights.
function noisyChecks(kdc, dir, desc, plan, trained) {
  const fails = [];
  const want0 = files(dir, desc.n_out, 'expected').map(p => L.readNpy(p));
  if (!trained) return predictCheck(kdc, dir, desc, plan, want0, 'initial weights');
  const g = generate(desc.seed);
  FZ.setWeights(g.model, L.mulberry32((desc.seed ^ 0x5eed1234) >>> 0));
  const st = L.readSafetensors(trained), keep = [];
  for (const layer of g.model.layers) {
    const vals = layer.weights.map(w => {
      const wname = w.originalName.slice(w.originalName.lastIndexOf(layer.name + '/') + layer.name.length + 1);
      const name = FZ.varPath(g.b, { layer: layer.name, wname });
      keep.push({ name, shape: w.shape, data: st[name].data });
      return tf.tensor(st[name].data, w.shape);
    });
    if (vals.length) layer.setWeights(vals);
    tf.dispose(vals);
  }
  const xs = files(dir, desc.n_in, 'x').map(p => L.readNpy(p));
  const want = predictRows(g.model, xs.map(x => x.data), xs.map(x => x.shape));
  g.model.dispose();
  // (kdc compile takes model weights only, not the optimizer state)
  const wfile = path.join(dir, 'got_trained.safetensors'), plan2 = path.join(dir, 'plan_trained.bin');
  fs.writeFileSync(wfile, L.safetensorsBytes(keep));
  try {
    execFileSync(kdc, ['compile', path.join(dir, 'model.json'), '--weights', wfile, '-o', plan2,
      '--batch', String(desc.batch)], { stdio: ['ignore', 'pipe', 'pipe'] });
  } catch (e) {
    return [`trained weights: compile exit ${e.status}: ${String(e.stderr).trim().split('\n')[0]}`];
  }
  fails.push(...predictCheck(kdc, dir, desc, plan2, want, 'trained weights'));
  return fails;
}

// kdc's --history file.  (kdc writes a non-finite loss as Python's json
// does, NaN / Infinity, which JSON.parse refuses: read as numbers, so that
// compareFit reports them.)
function readHistory(file) {
  return JSON.parse(fs.readFileSync(file, 'utf8').replace(/-?\b(NaN|Infinity)\b/g, '"$&"'),
    (k, v) => (typeof v === 'string' ? Number(v) : v));
}

// |got| (history) and |st| (--save-weights) of one kdc run against the
// reference |hist| and |ref| (name -> {data}): every history key within
// LOSS_ATOL + LOSS_RTOL |ref|, every reference tensor within W_ATOL +
// W_RTOL |ref|; the failures, one line each tagged |tag| (the worst
// ratios go to |measured|).
function compareFit(tag, hist, got, ref, st) {
  const fails = [];
  for (const k of new Set([...Object.keys(hist), ...Object.keys(got)])) {
    if (!got[k] || !hist[k] || got[k].length !== hist[k].length) { fails.push(`${tag}: ${k}: length`); continue; }
    let worst = 0, at = 0;
    hist[k].forEach((v, i) => {
      const q = Math.abs(got[k][i] - v) / (LOSS_ATOL + LOSS_RTOL * Math.abs(v));
      if (!(q <= worst)) { worst = q; at = i; }
    });
    measured.loss = Math.max(measured.loss, worst);
    if (!(worst <= 1)) fails.push(`${tag}: ${k}[${at}] ${got[k][at]} vs ${hist[k][at]} (${worst.toExponential(2)} x tol)`);
  }
  for (const [name, t] of Object.entries(ref)) {
    if (!st[name]) { fails.push(`${tag}: no ${name} in --save-weights`); continue; }
    let worst = 0, at = 0;
    for (let i = 0; i < t.data.length; i++) {
      const q = Math.abs(st[name].data[i] - t.data[i]) / (W_ATOL + W_RTOL * Math.abs(t.data[i]));
      if (!(q <= worst)) { worst = q; at = i; }
    }
    measured.weights = Math.max(measured.weights, worst);
    if (!(worst <= 1)) fails.push(`${tag}: ${name}[${at}] ${st[name].data[at]} vs ${t.data[at]} (${worst.toExponential(2)} x tol)`);
  }
  return fails;
}

function runCase(kdc, dir, desc) {
  const fails = [];
  // a noisy case has no reference fit: its first run (mesh 1) is the
  // reference of the others (the masks depend on the seed, step and
  // global index only, so every mesh draws the same)
  let hist = desc.noisy ? null : JSON.parse(fs.readFileSync(path.join(dir, 'history.json'), 'utf8'));
  let ref = desc.noisy ? null : L.readSafetensors(path.join(dir, 'final.safetensors'));
  for (const run of RUNS) {
    const plan = path.join(dir, 'plan.bin'), hout = path.join(dir, 'got_history.json');
    const wout = path.join(dir, 'got_final.safetensors');
    const args = ['compile', path.join(dir, 'model.json'), '--weights', path.join(dir, 'weights.safetensors'),
      '-o', plan, '--batch', String(desc.batch * (run.doubleBatch ? 2 : 1)), '--mesh', run.mesh === 'random' ? desc.mesh : run.mesh];
    if (run.cli && desc.cli) args.push(...desc.cli);
    if (run.layout) args.push('--layout', path.join(dir, run.layout));
    if (run.mesh === 'random' && desc.mesh.split('x').length === 3) args.push('--axes', 'data,model,extra');
    const tag = `mesh ${run.mesh === 'random' ? desc.mesh : run.mesh}${run.layout ? ' ' + run.layout : ''}${run.cli && desc.cli ? ' cli' : ''}${run.doubleBatch ? ' compiled batch x2' : ''}`;
    try {
      execFileSync(kdc, args, { stdio: ['ignore', 'pipe', 'pipe'] });
    } catch (e) {
      const line = String(e.stderr).trim().split('\n')[0];
      if (e.status === 2 && String(e.stderr).trim().split('\n').length === 1 &&
          KNOWN_REFUSALS.some(re => re.test(line))) {
        measured.refused++;
        continue;
      }
      fails.push(`${tag}: compile exit ${e.status ?? e.signal ?? e.code}: ${line}`);
      continue;
    }
    if (desc.noisy && !hist) fails.push(...noisyChecks(kdc, dir, desc, plan, null));
    try {
      const xargs = files(dir, desc.n_in, 'x').flatMap(x => ['--x', x]);
      const yargs = files(dir, desc.n_out, 'y').flatMap(y => ['--y', y]);
      execFileSync(kdc, ['run', plan, '--fit', ...xargs, ...yargs,
        '--epochs', String(desc.epochs), '--batch-size', String(desc.batch), '--history', hout,
        '--validation-split', String(desc.validation_split),
        '--save-weights', wout, '--quiet', '--threads', '1'], { stdio: ['ignore', 'pipe', 'pipe'] });
    } catch (e) {
      fails.push(`${tag}: run exit ${e.status ?? e.signal ?? e.code}: ${String(e.stderr).trim().split('\n')[0]}`);
      continue;
    }
    const got = readHistory(hout);
    const st = L.readSafetensors(wout);
    if (!hist) {  // a noisy case's first run
      hist = got;
      ref = Object.fromEntries(Object.entries(st).filter(([name]) => !/^(SGD|adam|adamw|rmsprop)\//.test(name)));
      fails.push(...noisyChecks(kdc, dir, desc, plan, wout));
      continue;
    }
    fails.push(...compareFit(tag, hist, got, ref, st));
  }
  return fails;
}

async function main() {
  await tf.setBackend('cpu');
  await tf.ready();
  const [cmd, a1, a2, ...rest] = process.argv.slice(2);
  if (cmd === 'gen') {
    console.log(JSON.stringify(await genCase(Number(a1), a2)));
    return;
  }
  if (cmd !== 'run') {
    console.error('usage: node fit_fuzz.js gen SEED DIR | run FIRST COUNT [--kdc PATH] [--keep DIR] [--quiet]');
    process.exit(2);
  }
  const c = await FZ.sweep(Number(a1), Number(a2), rest, 'kdcfitfuzz-', genCase, runCase, desc => {
    const what = `${desc.kind}${desc.seq_input ? '(' + desc.seq_input + ')' : ''}${desc.noisy ? ' noisy' : ''} ` +
      `[${desc.layers.join(' ')}] ${desc.outputs.map(o => o.loss + (o.from_logits ? '(logits)' : '') +
        (o.weight !== 1 ? 'x' + o.weight : '')).join(',')} ${desc.optimizer.cls}`;
    return { failing: what, ok: what };
  }, () => `, ${measured.refused} runs refused (documented); worst passing-or-not: losses ` +
    `${measured.loss.toExponential(2)} x (${LOSS_ATOL} + ${LOSS_RTOL} |ref|), weights ${measured.weights.toExponential(2)} x ` +
    `(${W_ATOL} + ${W_RTOL} |ref|), noisy cases' predictions ${measured.predict.toExponential(2)} x (1e-5 + 1e-4 |ref|)`);
  process.exit(c.failed ? 1 : 0);
}

if (require.main === module) main().catch(e => { console.error(e); process.exit(1); });
module.exports = { genCase, runCase, generate, train, labels, compareFit, readHistory, measured, LOSSES, EPOCHS };
