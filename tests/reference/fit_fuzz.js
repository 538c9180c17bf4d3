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

function generate(seed) {
  const r = new FZ.Rand(seed);
  const family = r.pick(['mlp', 'mlp', 'seq', 'seq', 'img', 'text']);
  const b = new G.Builder('functional', 'functional', (seed * 2654435761) >>> 0);
  b.depthwise = new Set();
  b.classes = [];
  let counter = 0;
  const uname = base => `${base}_${counter++}`;
  const act = () => r.pick(ACTS);
  const add = (cls, n, cfg, tfl, inp, kw) => {
    b.classes.push(cls);
    b.denseInit[n] = 1;
    return b.layer(cls, n, cfg, tfl, inp, kw);
  };
  const dense = (h, units, a, useBias = true, name) => {
    const n = name || uname('dense');
    b.classes.push('Dense');
    return b.dense(n, units, a, h, { useBias, tfActivation: FZ.tfAct(a, 'keras3') });
  };

  let shape, range = [-1, 1];
  if (family === 'mlp') shape = [r.int(3, 12)];
  else if (family === 'seq') shape = [r.int(3, 7), r.int(2, 5)];
  else if (family === 'img') shape = [r.int(4, 8), r.int(4, 8), r.int(1, 3)];
  else { shape = [r.int(3, 8)]; range = [0, 20]; }
  const input = b.input('input_layer', shape);
  // a second input in 30% of the non-token cases (its own stream, so that
  // the rest of a seed's model does not depend on it), merged before the head
  const r2 = new FZ.Rand((seed ^ 0x2b1e7) >>> 0);
  const inputB = family !== 'text' && r2.chance(0.3) ? b.input('input_b', shape.slice(0, -1).concat([r2.int(2, 5)])) : null;
  let cur = input;
  const pool = [];
  if (family === 'text') {
    b.classes.push('Embedding');
    cur = G.embedding(b, cur, 20, r.int(2, 6));
  }
  pool.push(cur);
  // a layer that feeds a normalisation gets no bias: the loss does not
  // depend on it (BatchNormalization subtracts the batch mean), so its
  // gradient is float32 rounding noise, which Adam/RMSprop turn into steps
  // of +-lr that no two implementations share
  const steps = r.int(1, 6);
  for (let step = 0; step < steps; step++) {
    if (pool.length > 1 && r.chance(0.2)) cur = r.pick(pool);
    const s = cur.shape, rank = s.length, last = s[rank - 1];
    const ops = ['dense', 'dense', 'act', 'bn', 'ln', 'dropout', 'add', 'concat'];
    if (rank === 3) ops.push('conv1d', 'pool1d', 'rnn', 'rnn', 'gpool', 'flatten');
    if (rank === 4) ops.push('conv2d', 'conv2d', 'pool2d', 'gpool', 'flatten');
    if (prod(s.slice(1)) > 300) ops.push('gpool', rank === 3 ? 'pool1d' : rank === 4 ? 'pool2d' : 'dense');
    const op = r.pick(ops);
    let out = null;
    if (op === 'dense') {
      out = dense(cur, r.int(2, 10), act(), r.chance(0.8));
    } else if (op === 'act') {
      const a = act(), n = uname('activation');
      out = add('Activation', n, { activation: a }, tf.layers.activation({ activation: FZ.tfAct(a, 'keras3'), name: n }), cur);
    } else if (op === 'bn' || op === 'ln') {
      // a fresh bias-free Dense (or conv) in front (see above)
      const h = rank === 4 && r.chance(0.5)
        ? conv2d(cur, false) : dense(cur, r.int(2, 8), r.pick(['linear', 'relu', 'tanh']), false);
      if (op === 'bn') {
        const n = uname('batch_normalization'), eps = r.pick([0.001, 1e-5]), mom = r.pick([0.99, 0.9]);
        const center = r.chance(0.8), scale = r.chance(0.8);
        out = add('BatchNormalization', n, G.normSpecific({ axis: -1, momentum: L.pyf(mom), epsilon: L.pyf(eps),
          center, scale, moving_mean_initializer: initOf('Zeros'), moving_variance_initializer: initOf('Ones'),
          synchronized: false }),
        tf.layers.batchNormalization({ axis: -1, momentum: mom, epsilon: eps, center, scale, name: n }), h, { mask: null });
      } else {
        const n = uname('layer_normalization'), eps = r.pick([0.001, 0.01]);
        const center = r.chance(0.8), scale = r.chance(0.8);
        out = add('LayerNormalization', n, G.normSpecific({ axis: [-1], epsilon: L.pyf(eps), center, scale,
          rms_scaling: false }), tf.layers.layerNormalization({ axis: -1, epsilon: eps, center, scale, name: n }), h);
      }
    } else if (op === 'dropout') {
      // rate 0: dropout masks are not comparable across implementations
      const n = uname('dropout');
      out = add('Dropout', n, { rate: L.pyf(0.0), seed: null, noise_shape: null },
        tf.layers.dropout({ rate: 0, name: n }), cur, { training: false });
    } else if (op === 'add' || op === 'concat') {
      const other = dense(cur, op === 'add' ? last : r.int(1, 6), act(), r.chance(0.8));
      const n = uname(op === 'add' ? 'add' : 'concatenate');
      out = op === 'add' ? add('Add', n, {}, tf.layers.add({ name: n }), [cur, other])
        : add('Concatenate', n, { axis: -1 }, tf.layers.concatenate({ axis: -1, name: n }), [cur, other]);
    } else if (op === 'conv1d') {
      // (no dilation: tfjs 4.22 has no conv gradient with dilation > 1)
      const k = r.int(1, Math.min(3, s[1])), d = 1, st = r.int(1, 2);
      const pad = r.pick(['valid', 'same']);
      if (pad === 'valid' && (k - 1) * d + 1 > s[1]) continue;
      const filters = r.int(1, 6), a = act(), bias = r.chance(0.8), n = uname('conv1d');
      out = add('Conv1D', n, convCfg({ filters, k: [k], s: [st], pad, d: [d], act: a, bias }),
        tf.layers.conv1d({ filters, kernelSize: k, strides: st, padding: pad, dilationRate: d,
          activation: FZ.tfAct(a, 'keras3'), useBias: bias, name: n }), cur);
    } else if (op === 'conv2d') {
      out = conv2d(cur, r.chance(0.8));
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
      const nd = rank - 2, n = uname('global_average_pooling');
      const tfl = nd === 1 ? tf.layers.globalAveragePooling1d({ name: n }) : tf.layers.globalAveragePooling2d({ name: n });
      out = add(`GlobalAveragePooling${nd}D`, n, { data_format: 'channels_last', keepdims: false }, tfl, cur);
    } else if (op === 'flatten') {
      const n = uname('flatten');
      out = add('Flatten', n, { data_format: 'channels_last' }, tf.layers.flatten({ name: n }), cur);
    } else if (op === 'rnn') {
      const cls = r.pick(['LSTM', 'GRU', 'SimpleRNN']), units = r.int(2, 6), seqs = r.chance(0.5);
      const back = r.chance(0.3), n = uname(cls.toLowerCase());
      const extra = { return_sequences: seqs, go_backwards: back };
      if (cls === 'GRU') extra.reset_after = false;  // tfjs has no reset_after=true
      const opts = { units, returnSequences: seqs, goBackwards: back, name: n };
      if (cls !== 'SimpleRNN') opts.recurrentActivation = 'sigmoid';
      const tfl = cls === 'LSTM' ? tf.layers.lstm(opts) : cls === 'GRU' ? tf.layers.gru(opts) : tf.layers.simpleRNN(opts);
      b.classes.push(cls);
      b.denseInit[n] = 1;
      out = b.rnnCall(cls, n, G.rnnSpecific(cls, units, extra), tfl, cur)[0];
    }
    if (!out) continue;
    pool.push(out);
    cur = out;
  }

  function conv2d(h, bias) {
    const s = h.shape, k = [r.int(1, 3), r.int(1, 3)], st = [r.int(1, 2), r.int(1, 2)];
    const pad = k[0] > s[1] || k[1] > s[2] ? 'same' : r.pick(['valid', 'same']);
    const filters = r.int(1, 6), a = bias ? act() : 'linear', n = uname('conv2d');
    return add('Conv2D', n, convCfg({ filters, k, s: st, pad, d: [1, 1], act: a, bias }),
      tf.layers.conv2d({ filters, kernelSize: k, strides: st, padding: pad, activation: FZ.tfAct(a, 'keras3'),
        useBias: bias, name: n }), h);
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

  // ---- the head, the loss and the labels
  const loss = r.pick(['mse', 'mae', 'bce', 'bce', 'cce', 'cce', 'scce', 'scce']);
  const fromLogits = loss !== 'mse' && loss !== 'mae' && r.chance(0.5);
  let h = cur;
  if (h.shape.length === 4 || (h.shape.length === 3 && !r.chance(0.4))) {
    const n = uname('flatten');
    h = add('Flatten', n, { data_format: 'channels_last' }, tf.layers.flatten({ name: n }), h);
  }
  const classes = loss === 'mse' || loss === 'mae' ? r.int(1, 4) : loss === 'bce' ? r.int(1, 3) : r.int(2, 5);
  let headAct = 'linear';
  if (!fromLogits && (loss === 'bce')) headAct = 'sigmoid';
  if (!fromLogits && (loss === 'cce' || loss === 'scce')) headAct = 'softmax';
  if (loss === 'mse' || loss === 'mae') headAct = r.pick(['linear', 'tanh']);
  const outH = dense(h, classes, headAct, true, 'head');

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
  // the Keras 3 JSON holds only the layers the output depends on
  b.entries = FZ.pruneNodes(b.entries, [outH]);
  b.classes = b.entries.filter(e => e.cls !== 'InputLayer').map(e => e.cls);
  const model = tf.model({ inputs: b.inputs, outputs: outH.sym, name: 'functional' });
  // Keras' validation_split: the last rows validate after each epoch
  const valSplit = r.chance(0.4) ? r.pick([0.2, 0.25]) : 0;
  return { b, model, outputs: [outH], family, range, loss, fromLogits, classes, opt, batch, rows, valSplit, r };
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
  const lc = { name: LOSSES[g.loss].name, reduction: 'sum_over_batch_size' };
  if (g.loss !== 'mse' && g.loss !== 'mae') lc.from_logits = g.fromLogits;
  return {
    optimizer: { module: 'keras.optimizers', class_name: o.cls, config: cfg, registered_name: null },
    loss: { module: 'keras.losses', class_name: LOSSES[g.loss].cls, config: lc, registered_name: null },
    loss_weights: null, metrics: null, weighted_metrics: null, run_eagerly: false, steps_per_execution: 1,
    jit_compile: false,
  };
}

// The same training by kdc compile flags, when they can say it.
function cliFlags(g) {
  const o = g.opt;
  const plain = (o.cls === 'SGD' && o.momentum === 0) || (o.cls === 'Adam') ||
    (o.cls === 'AdamW' && o.weight_decay === 0.004) || (o.cls === 'RMSprop' && o.momentum === 0 && !o.centered);
  if (!plain) return null;
  const flags = ['--loss', LOSSES[g.loss].name, '--optimizer', o.cls.toLowerCase(), '--learning-rate', String(o.learning_rate)];
  if (g.fromLogits) flags.push('--from-logits');
  return flags;
}

// ---- the Keras 3 loss (keras/src/losses/losses.py, backend nn.py), f32:
// per-sample values over the last axis, then the mean over the rest
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

// The reference's own check: at the first step, two elements of every
// trainable weight's gradient against central differences of the f32
// loss (h = 1e-3; |fd - g| <= 2e-3 + 2e-2 |g|: the f32 loss rounding over
// 2h is ~1e-4 relative; when a relu kink lies within h, h = 1e-4 passes).  The forward in training mode updates the moving statistics;
// they are put back.
function fdCheck(g, vars, grads, xb, yb) {
  const moving = g.model.weights.filter(w => !w.trainable).map(w => [w, w.read().clone()]);
  const lossAt = () => { const l = kerasLoss(g, yb, g.model.apply(xb, { training: true })); const v = l.dataSync()[0]; l.dispose(); return v; };
  for (const v of vars) {
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

// Keras 3 fit, shuffle off (see the header).
function train(g, xs, y, xShapes, yShape) {
  const { model } = g;
  const vars = model.trainableWeights.map(w => w.val);
  const update = makeOptimizer(g.opt);
  const rowY = prod(yShape.slice(1));
  const batchLoss = [], epochLoss = [], valLoss = [];
  // Keras' train_validation_split: split_at = floor(rows * (1 - split))
  const split = g.valSplit ? Math.floor(g.rows * (1 - g.valSplit)) : g.rows;
  // [model input (one tensor, or a list with two inputs), labels]
  const slice = (r0, n) => {
    const xb = xs.map((x, i) => {
      const row = prod(xShapes[i].slice(1));
      return tf.tensor(x.subarray(r0 * row, (r0 + n) * row), [n, ...xShapes[i].slice(1)]);
    });
    return [xb.length > 1 ? xb : xb[0], tf.tensor(y.subarray(r0 * rowY, (r0 + n) * rowY), [n, ...yShape.slice(1)])];
  };
  let iteration = 0;
  for (let e = 0; e < EPOCHS; e++) {
    let total = 0, count = 0;
    for (let r0 = 0; r0 < split; r0 += g.batch) {
      const n = Math.min(g.batch, split - r0);
      const [xb, yb] = slice(r0, n);
      const { value, grads } = tf.variableGrads(() => kerasLoss(g, yb, model.apply(xb, { training: true })), vars);
      const loss = value.dataSync()[0];
      if (!Number.isFinite(loss)) throw new Error(`non-finite loss at step ${iteration}`);
      if (iteration === 0) fdCheck(g, vars, grads, xb, yb);
      for (const v of vars) {
        const W = v.dataSync().slice();
        update(v.name, W, grads[v.name].dataSync(), iteration);
        v.assign(tf.tensor(W, v.shape));
      }
      iteration++;
      batchLoss.push(loss);
      total = f(total + f(loss * n));
      count = f(count + n);
      tf.dispose([xb, yb, value, ...Object.values(grads)].flat());
    }
    epochLoss.push(f(total / count));
    if (split === g.rows) continue;
    // validation (Keras' evaluate: inference mode, the same tracker)
    let vt = 0, vc = 0;
    for (let r0 = split; r0 < g.rows; r0 += g.batch) {
      const n = Math.min(g.batch, g.rows - r0);
      const [xb, yb] = slice(r0, n);
      const l = kerasLoss(g, yb, model.apply(xb, { training: false }));
      vt = f(vt + f(l.dataSync()[0] * n));
      vc = f(vc + n);
      tf.dispose([xb, yb, l].flat());
    }
    valLoss.push(f(vt / vc));
  }
  const hist = { loss: epochLoss, batch_loss: batchLoss };
  if (valLoss.length) hist.val_loss = valLoss;
  return hist;
}

async function genCase(seed, dir) {
  fs.mkdirSync(dir, { recursive: true });
  const g = generate(seed);
  const { b, model } = g;
  const wlist = FZ.setWeights(model, L.mulberry32((seed ^ 0x5eed1234) >>> 0));
  const k3 = b.keras3Functional(g.outputs);
  const doc = Object.assign({ compile_config: compileConfig(g) }, k3);
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
  const outShape = model.outputs[0].shape;
  const lead = [g.rows, ...outShape.slice(1, -1)], nLead = prod(lead);
  let y, yShape;
  if (g.loss === 'scce') {
    yShape = lead;
    y = new Float32Array(nLead).map(() => Math.floor(drng() * g.classes));
  } else {
    yShape = [...lead, g.classes];
    y = new Float32Array(nLead * g.classes);
    if (g.loss === 'cce') for (let i = 0; i < nLead; i++) y[i * g.classes + Math.floor(drng() * g.classes)] = 1;
    else if (g.loss === 'bce') for (let i = 0; i < y.length; i++) y[i] = drng() < 0.5 ? 0 : 1;
    else for (let i = 0; i < y.length; i++) y[i] = f(drng() * 2 - 1);
  }
  xs.forEach((x, i) => fs.writeFileSync(path.join(dir, xs.length > 1 ? `x${i}.npy` : 'x.npy'), L.npyBytes(xShapes[i], x)));
  fs.writeFileSync(path.join(dir, 'y.npy'), L.npyBytes(yShape, y));
  // the layout, before training (it only looks at names and shapes)
  const lr = new FZ.Rand((seed ^ 0x1a7007) >>> 0);
  const outsInfo = b.entries.filter(e => e.cls !== 'InputLayer').map(e => ({ name: e.name, shape: e.outShape,
    final: e.name === 'head', prefix: '' }));
  fs.writeFileSync(path.join(dir, 'layout.json'), JSON.stringify(FZ.randomLayout(lr, wlist, b, outsInfo), null, 1) + '\n');
  // one more mesh for the sweep, with its own layout (not checked in)
  const mesh = lr.pick(['4x2', '1x8', '8x1', '2x2x2']), sizes = mesh.split('x').map(Number);
  fs.writeFileSync(path.join(dir, 'layout_mesh.json'),
    JSON.stringify(FZ.randomLayout(lr, wlist, b, outsInfo, sizes[1], sizes[0], sizes[2] || 0), null, 1) + '\n');
  const hist = train(g, xs, y, xShapes, yShape);
  fs.writeFileSync(path.join(dir, 'history.json'), JSON.stringify(hist) + '\n');
  const finals = [];
  for (const layer of model.layers) {
    for (const w of layer.weights) {
      const wname = w.originalName.slice(w.originalName.lastIndexOf(layer.name + '/') + layer.name.length + 1);
      finals.push({ name: FZ.varPath(b, { layer: layer.name, wname }), shape: w.shape, data: w.read().dataSync() });
    }
  }
  fs.writeFileSync(path.join(dir, 'final.safetensors'), L.safetensorsBytes(finals));
  const desc = { seed, mesh, n_in: xs.length, batch: g.batch, epochs: EPOCHS, rows: g.rows, validation_split: g.valSplit, loss: LOSSES[g.loss].name,
    from_logits: g.fromLogits, optimizer: g.opt, cli: cliFlags(g), layers: b.classes };
  fs.writeFileSync(path.join(dir, 'case.json'), JSON.stringify(desc) + '\n');
  model.dispose();
  return desc;
}

// ---- running kdc
// Tolerances (README.md, "Training fuzz"): float32 on both sides, the
// same formulas, different summation orders: losses within 1e-4
// relative, weights within 1e-4 + 1e-3 |ref|.
const LOSS_RTOL = 1e-4, W_ATOL = 1e-4, W_RTOL = 1e-3;
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
const measured = { loss: 0, weights: 0, refused: 0 };

function runCase(kdc, dir, desc) {
  const fails = [];
  const hist = JSON.parse(fs.readFileSync(path.join(dir, 'history.json'), 'utf8'));
  const ref = L.readSafetensors(path.join(dir, 'final.safetensors'));
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
    try {
      const xargs = desc.n_in > 1 ? [...Array(desc.n_in).keys()].flatMap(i => ['--x', path.join(dir, `x${i}.npy`)])
        : ['--x', path.join(dir, 'x.npy')];
      execFileSync(kdc, ['run', plan, '--fit', ...xargs, '--y', path.join(dir, 'y.npy'),
        '--epochs', String(desc.epochs), '--batch-size', String(desc.batch), '--history', hout,
        '--validation-split', String(desc.validation_split),
        '--save-weights', wout, '--quiet', '--threads', '1'], { stdio: ['ignore', 'pipe', 'pipe'] });
    } catch (e) {
      fails.push(`${tag}: run exit ${e.status ?? e.signal ?? e.code}: ${String(e.stderr).trim().split('\n')[0]}`);
      continue;
    }
    // (kdc writes a non-finite loss as Python's json does, NaN / Infinity,
    // which JSON.parse refuses: read as numbers, so that the comparison
    // below reports them)
    const got = JSON.parse(fs.readFileSync(hout, 'utf8').replace(/-?\b(NaN|Infinity)\b/g, '"$&"'),
      (k, v) => (typeof v === 'string' ? Number(v) : v));
    for (const k of ['loss', 'batch_loss', 'val_loss']) {
      if (!hist[k] && !got[k]) continue;
      if (!got[k] || got[k].length !== hist[k].length) { fails.push(`${tag}: ${k}: length`); continue; }
      let worst = 0, at = 0;
      hist[k].forEach((v, i) => {
        const d = Math.abs(got[k][i] - v) / Math.abs(v);
        if (!(d <= worst)) { worst = d; at = i; }
      });
      measured.loss = Math.max(measured.loss, worst);
      if (!(worst <= LOSS_RTOL)) fails.push(`${tag}: ${k}[${at}] ${got[k][at]} vs ${hist[k][at]} (${worst.toExponential(2)} rel)`);
    }
    const st = L.readSafetensors(wout);
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
    const what = `[${desc.layers.join(' ')}] ${desc.loss}${desc.from_logits ? '(logits)' : ''} ${desc.optimizer.cls}`;
    return { failing: what, ok: what };
  }, () => `, ${measured.refused} runs refused (documented); worst passing-or-not: losses ` +
    `${measured.loss.toExponential(2)} relative, weights ${measured.weights.toExponential(2)} x ` +
    `(${W_ATOL} + ${W_RTOL} |ref|)`);
  process.exit(c.failed ? 1 : 0);
}

if (require.main === module) main().catch(e => { console.error(e); process.exit(1); });
module.exports = { genCase, runCase };
