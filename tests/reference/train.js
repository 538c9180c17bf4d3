'use strict';
// Training reference for kdc's `kdc run --fit` (docs/training.md, "Fit"):
// the MNIST MLP of examples/mnist_mlp (its weights.safetensors as the start,
// Dropout rate 0 so training is deterministic) trained with TensorFlow.js
// for 3 epochs, batch 16, no shuffle, on a fixed seeded dataset of 96 rows
// (6 full batches per epoch), with
//   - SGD  (lr 0.1):  var -= lr * g, through tfjs;
//   - Adam (lr 0.001): Keras 3's formula by hand in float32 (Math.fround on
//     every operation) over tfjs' gradients, because tfjs' Adam adds epsilon
//     to the bias-corrected sqrt(v) and Keras 3 does not:
//       t = iterations + 1; alpha = lr * sqrt(1 - b2^t) / (1 - b1^t)
//       m += (g - m)(1 - b1); v += (g^2 - v)(1 - b2); var -= alpha m / (sqrt(v) + eps)
// The loss is Keras 3's categorical_crossentropy on probabilities:
// -sum(t log clip(p / sum p, 1e-7, 1 - 1e-7)) averaged over the batch; the
// reported epoch loss is Keras 3's loss tracker, the mean of the batch
// losses weighted by their row counts (all equal here).
// Writes examples/mnist_mlp/train_x.npy, train_y.npy and per optimizer
// train_<opt>_history.json ({"loss": [...], "batch_loss": [...]}) and
// train_<opt>_final.safetensors (the weights after 3 epochs).
const fs = require('fs');
const path = require('path');
const tf = require('@tensorflow/tfjs');
const L = require('./lib');

const DIR = path.resolve(__dirname, '..', '..', 'examples', 'mnist_mlp');
const ROWS = 96, B = 16, EPOCHS = 3, SEED = 0x7A1_0001;
const f = Math.fround;

function data() {
  const rng = L.mulberry32(SEED);
  const x = L.uniformArray(rng, ROWS * 784, 0, 1);
  const y = new Float32Array(ROWS * 10);
  for (let r = 0; r < ROWS; r++) y[r * 10 + Math.floor(rng() * 10)] = 1;
  return { x, y };
}

// Keras 3 CCE (probabilities) over a batch: the mean of the per-row losses.
function cce(yTrue, p) {
  const eps = 1e-7;
  const o = tf.clipByValue(tf.div(p, tf.sum(p, -1, true)), eps, 1 - eps);
  return tf.mean(tf.neg(tf.sum(tf.mul(yTrue, tf.log(o)), -1)));
}

function forward(w, x) {
  const h = tf.relu(tf.matMul(x, w['d1/kernel']));
  return tf.softmax(tf.add(tf.matMul(h, w['d2/kernel']), w['d2/bias']));
}

function train(opt, lr, x, y) {
  const st = L.readSafetensors(path.join(DIR, 'weights.safetensors'));
  const names = ['d1/kernel', 'd2/kernel', 'd2/bias'];
  const w = {}, m = {}, v = {};
  for (const n of names) {
    w[n] = Float32Array.from(st[n].data);
    m[n] = new Float32Array(w[n].length);
    v[n] = new Float32Array(w[n].length);
  }
  const shapes = { 'd1/kernel': [784, 200], 'd2/kernel': [200, 10], 'd2/bias': [10] };
  const batchLoss = [], epochLoss = [];
  let iterations = 0;
  for (let e = 0; e < EPOCHS; e++) {
    let total = 0, count = 0;  // Keras' Mean tracker (f32 variables)
    for (let r0 = 0; r0 < ROWS; r0 += B) {
      const xb = tf.tensor(x.subarray(r0 * 784, (r0 + B) * 784), [B, 784]);
      const yb = tf.tensor(y.subarray(r0 * 10, (r0 + B) * 10), [B, 10]);
      const wt = {};
      for (const n of names) wt[n] = tf.tensor(w[n], shapes[n]);
      const lossFn = (a, b, c) => cce(yb, forward({ 'd1/kernel': a, 'd2/kernel': b, 'd2/bias': c }, xb));
      const { value, grads } = tf.valueAndGrads(lossFn)(names.map(n => wt[n]));
      const loss = value.dataSync()[0];
      const g = {};
      names.forEach((n, i) => { g[n] = grads[i].dataSync(); });
      if (opt === 'sgd') {
        for (const n of names) for (let i = 0; i < w[n].length; i++) w[n][i] = f(w[n][i] - f(g[n][i] * f(lr)));
      } else {
        const b1 = f(0.9), b2 = f(0.999), eps = f(1e-7);
        const t = f(iterations + 1);
        const alpha = f(f(f(lr) * f(Math.sqrt(f(1 - f(Math.pow(b2, t)))))) / f(1 - f(Math.pow(b1, t))));
        for (const n of names) {
          const W = w[n], M = m[n], V = v[n], G = g[n];
          for (let i = 0; i < W.length; i++) {
            M[i] = f(M[i] + f(f(G[i] - M[i]) * f(1 - b1)));
            V[i] = f(V[i] + f(f(f(G[i] * G[i]) - V[i]) * f(1 - b2)));
            W[i] = f(W[i] - f(f(M[i] * alpha) / f(f(Math.sqrt(V[i])) + eps)));
          }
        }
      }
      iterations++;
      batchLoss.push(loss);
      total = f(total + f(loss * B));
      count = f(count + B);
      tf.dispose([xb, yb, value, ...grads, ...Object.values(wt)]);
    }
    epochLoss.push(f(total / count));
  }
  return { w, names, shapes, batchLoss, epochLoss, iterations };
}

function write(file, bytes) {
  fs.writeFileSync(path.join(DIR, file), bytes);
  console.log('  wrote', path.relative(path.resolve(__dirname, '..', '..'), path.join(DIR, file)));
}

async function emitTraining() {
  const { x, y } = data();
  write('train_x.npy', L.npyBytes([ROWS, 28, 28, 1], x));
  write('train_y.npy', L.npyBytes([ROWS, 10], y));
  for (const [opt, lr] of [['sgd', 0.1], ['adam', 0.001]]) {
    const r = train(opt, lr, x, y);
    write(`train_${opt}_history.json`, JSON.stringify({ loss: r.epochLoss, batch_loss: r.batchLoss }) + '\n');
    write(`train_${opt}_final.safetensors`, L.safetensorsBytes(
      r.names.map(n => ({ name: n, shape: r.shapes[n], data: r.w[n] }))));
    console.log(`  ${opt}: epoch losses ${r.epochLoss.map(v => v.toFixed(6)).join(' ')}`);
  }
}

// ---- small_cnn with BatchNormalization in training (examples/small_cnn)
// The tfjs layers model of examples/small_cnn (model_tfjs.json + weights.bin,
// checked to predict examples/small_cnn/expected.npy, i.e. Keras 3's
// inference) trained in training mode with tfjs' own layers: the
// BatchNormalization layer normalises with tf.moments over the batch and
// spatial dims (mean, then the biased variance mean((x - mean)^2)) and
// updates moving = moving - (moving - stat) * (1 - momentum), which is Keras
// 3's moving * momentum + stat * (1 - momentum) up to f32 rounding (checked
// below against moments of the layer's input computed here).  Gradients
// (through the batch statistics) from tf.variableGrads; SGD (lr 0.1, var -=
// lr g in f32; SGD rather than Adam because Adam's first steps move a weight
// by about +-lr even when its gradient is rounding noise, which would make
// the comparison measure the noise).  40 rows, batch 16: the last batch has 8 rows
// (Keras trains on it as an 8-row batch; its statistics are those rows').
// The 'avg' layer's gradient is fixed (exactSameAvgPool) and every
// gradient is checked against central differences at the first step.
// Writes examples/small_cnn/train_x.npy, train_y.npy,
// train_sgd_history.json and train_sgd_final.safetensors (every trainable
// weight and bn/moving_mean, bn/moving_variance, Keras 3 names).
const CNN_DIR = path.resolve(__dirname, '..', '..', 'examples', 'small_cnn');
const CNN_ROWS = 40, CNN_SEED = 0xB4_0001, CNN_LR = 0.1;

async function loadSmallCnn() {
  const j = JSON.parse(fs.readFileSync(path.join(CNN_DIR, 'model_tfjs.json'), 'utf8'));
  const bin = fs.readFileSync(path.join(CNN_DIR, 'weights.bin'));
  const data = bin.buffer.slice(bin.byteOffset, bin.byteOffset + bin.byteLength);
  return tf.loadLayersModel(tf.io.fromMemory({
    modelTopology: j.modelTopology, weightSpecs: j.weightsManifest[0].weights, weightData: data }));
}

const kerasName = n => (n === 'dw/depthwise_kernel' ? 'dw/kernel' : n);

// tfjs 4.22's avgPool gradient with padding 'same' is not the derivative of
// its forward: the forward divides an edge window by its count of valid
// elements (Keras 3 too), the gradient by the full window size (checked
// below against central differences).  The 'avg' layer's call is replaced
// by an equivalent whose gradient is exact: zero-pad as 'same' does, a
// 'valid' avgPool, then rescale every window by window size / valid count.
function exactSameAvgPool(layer) {
  const [kh, kw] = layer.poolSize, [sh, sw] = layer.strides;
  layer.call = (inputs) => tf.tidy(() => {
    const x = Array.isArray(inputs) ? inputs[0] : inputs;
    const [, h, w] = x.shape;
    const pads = (n, k, st) => {
      const out = Math.ceil(n / st), total = Math.max((out - 1) * st + k - n, 0);
      return [Math.floor(total / 2), total - Math.floor(total / 2)];
    };
    const pd = [[0, 0], pads(h, kh, sh), pads(w, kw, sw), [0, 0]];
    const sum = tf.avgPool(tf.pad(x, pd), [kh, kw], [sh, sw], 'valid');
    const count = tf.avgPool(tf.pad(tf.onesLike(x), pd), [kh, kw], [sh, sw], 'valid');
    return tf.div(sum, count);
  });
}

// Central differences of the training-mode loss (f32, h = 1e-3) against
// the gradients of a few elements of every trainable weight: within 2e-3
// absolute (the f32 loss rounding over 2h is ~3e-4; conv1 sits before a
// relu and a max pool whose kinks move the differences by up to ~1e-3).
function fdCheck(model, trainable, grads, xb, yb) {
  const bn = model.getLayer('bn');
  const saved = [bn.movingMean.read().clone(), bn.movingVariance.read().clone()];
  for (const v of trainable) {
    const w0 = v.dataSync().slice(), g = grads[v.name].dataSync();
    for (const i of [0, Math.floor(w0.length / 2), w0.length - 1]) {
      const at = d => {
        const w = w0.slice();
        w[i] += d;
        v.assign(tf.tensor(w, v.shape));
        return tf.tidy(() => cce(yb, model.apply(xb, { training: true })).dataSync()[0]);
      };
      const fd = (at(1e-3) - at(-1e-3)) / 2e-3;
      if (Math.abs(fd - g[i]) > 2e-3) throw new Error(`gradient of ${v.name}[${i}]: ${g[i]} vs central difference ${fd}`);
    }
    v.assign(tf.tensor(w0, v.shape));
  }
  bn.movingMean.write(saved[0]);
  bn.movingVariance.write(saved[1]);
}

async function emitCnnTraining() {
  const model = await loadSmallCnn();
  // inference = Keras 3 (the committed expected.npy)
  const xin = L.readNpy(path.join(CNN_DIR, 'input.npy')), want = L.readNpy(path.join(CNN_DIR, 'expected.npy'));
  const got = model.predict(tf.tensor(xin.data, xin.shape)).dataSync();
  for (let i = 0; i < got.length; i++) {
    if (Math.abs(got[i] - want.data[i]) > 1e-5) throw new Error(`small_cnn predict differs at ${i}`);
  }
  exactSameAvgPool(model.getLayer('avg'));
  const again = model.predict(tf.tensor(xin.data, xin.shape)).dataSync();
  for (let i = 0; i < got.length; i++) {
    if (Math.abs(again[i] - want.data[i]) > 1e-5) throw new Error(`patched avg pool differs at ${i}`);
  }
  const rng = L.mulberry32(CNN_SEED);
  const x = L.uniformArray(rng, CNN_ROWS * 768, -1, 1);
  const y = new Float32Array(CNN_ROWS * 10);
  for (let r = 0; r < CNN_ROWS; r++) y[r * 10 + Math.floor(rng() * 10)] = 1;
  const bn = model.getLayer('bn');
  const bnInput = tf.model({ inputs: model.inputs, outputs: model.getLayer('conv1').output });
  const trainable = model.trainableWeights.map(w => w.val);
  const batchLoss = [], epochLoss = [];
  let iterations = 0;
  for (let e = 0; e < EPOCHS; e++) {
    let total = 0, count = 0;
    for (let r0 = 0; r0 < CNN_ROWS; r0 += B) {
      const n = Math.min(B, CNN_ROWS - r0);
      const xb = tf.tensor(x.subarray(r0 * 768, (r0 + n) * 768), [n, 16, 16, 3]);
      const yb = tf.tensor(y.subarray(r0 * 10, (r0 + n) * 10), [n, 10]);
      // the moving statistics Keras 3 would store, from the layer's input
      const mm0 = bn.movingMean.read().dataSync().slice(), mv0 = bn.movingVariance.read().dataSync().slice();
      const mo = tf.moments(bnInput.predict(xb), [0, 1, 2]);
      const bm = mo.mean.dataSync(), bv = mo.variance.dataSync();
      const { value, grads } = tf.variableGrads(() => cce(yb, model.apply(xb, { training: true })), trainable);
      const mm = bn.movingMean.read().dataSync(), mv = bn.movingVariance.read().dataSync();
      for (let c = 0; c < mm.length; c++) {
        const km = f(f(mm0[c] * f(0.99)) + f(bm[c] * f(1 - 0.99)));
        const kv = f(f(mv0[c] * f(0.99)) + f(bv[c] * f(1 - 0.99)));
        if (Math.abs(km - mm[c]) > 1e-6 * (1 + Math.abs(km)) || Math.abs(kv - mv[c]) > 1e-6 * (1 + Math.abs(kv)))
          throw new Error(`tfjs moving statistics differ from Keras 3's formula at channel ${c}`);
      }
      const loss = value.dataSync()[0];
      if (iterations === 0) fdCheck(model, trainable, grads, xb, yb);
      for (const v of trainable) {
        const W = v.dataSync().slice(), G = grads[v.name].dataSync();
        for (let i = 0; i < W.length; i++) W[i] = f(W[i] - f(G[i] * f(CNN_LR)));
        v.assign(tf.tensor(W, v.shape));
      }
      iterations++;
      batchLoss.push(loss);
      total = f(total + f(loss * n));
      count = f(count + n);
      tf.dispose([xb, yb, value, mo.mean, mo.variance, ...Object.values(grads)]);
    }
    epochLoss.push(f(total / count));
  }
  write2(CNN_DIR, 'train_x.npy', L.npyBytes([CNN_ROWS, 16, 16, 3], x));
  write2(CNN_DIR, 'train_y.npy', L.npyBytes([CNN_ROWS, 10], y));
  write2(CNN_DIR, 'train_sgd_history.json', JSON.stringify({ loss: epochLoss, batch_loss: batchLoss }) + '\n');
  write2(CNN_DIR, 'train_sgd_final.safetensors', L.safetensorsBytes(model.weights.map(w => ({
    name: kerasName(w.originalName), shape: w.shape, data: w.read().dataSync() }))));
  console.log(`  small_cnn sgd: epoch losses ${epochLoss.map(v => v.toFixed(6)).join(' ')}`);
}

function write2(dir, file, bytes) {
  fs.writeFileSync(path.join(dir, file), bytes);
  console.log('  wrote', path.relative(path.resolve(__dirname, '..', '..'), path.join(dir, file)));
}

// ---- two_heads: per-output losses of a two-output model (tests/e2e/data/two_heads.json)
// Keras 3 reports, besides the total "loss", each output's unweighted loss
// as "<output>_loss" (CompileLoss) and their "val_" versions; tfjs does the
// same ("reg_loss", "cls_loss" in model.fit's history).  The model (Dense
// trunk 6 -> 8 relu; heads "reg" 8 -> 2 linear and "cls" 8 -> 3 softmax)
// is built in tfjs with seeded weights, compiled with loss [mse,
// categoricalCrossentropy] (tfjs has no loss_weights: both weights 1) and
// SGD lr 0.1, and fit for 3 epochs, batch 8, no shuffle, validationSplit
// 0.25 on 40 seeded rows: 30 training rows (steps of 8, 8, 8 and 6) and 10
// validation rows.  Writes tests/e2e/data/two_heads_train/{weights.safetensors,
// x.npy, yr.npy, yc.npy, history.json}: tfjs' History.history loss,
// reg_loss, cls_loss, and val_loss, val_reg_loss, val_cls_loss computed here
// after each epoch (mean over the 10 validation rows of each output's loss,
// their sum for val_loss) because tfjs' own validation values are wrong for
// several outputs: its testFunction (tfjs-layers 4.22 training.js) pushes
// the running total after each output's loss, so its "val_loss" is the
// first output's loss and the rest are shifted.
const HEADS_DIR = path.resolve(__dirname, '..', 'e2e', 'data', 'two_heads_train');
const HEADS_ROWS = 40, HEADS_SEED = 0x2_4EAD;

async function emitTwoHeads() {
  const rng = L.mulberry32(HEADS_SEED);
  const shapes = { 'trunk/kernel': [6, 8], 'trunk/bias': [8], 'reg/kernel': [8, 2], 'reg/bias': [2],
                   'cls/kernel': [8, 3], 'cls/bias': [3] };
  const w = {};
  for (const n of Object.keys(shapes)) {
    const size = shapes[n].reduce((a, b) => a * b, 1);
    w[n] = L.uniformArray(rng, size, -0.6, 0.6);
  }
  const x = L.uniformArray(rng, HEADS_ROWS * 6, -1, 1);
  const yr = L.uniformArray(rng, HEADS_ROWS * 2, -1, 1);
  const yc = new Float32Array(HEADS_ROWS * 3);
  for (let r = 0; r < HEADS_ROWS; r++) yc[r * 3 + Math.floor(rng() * 3)] = 1;
  const input = tf.input({ shape: [6], name: 'x' });
  const trunk = tf.layers.dense({ units: 8, activation: 'relu', name: 'trunk' }).apply(input);
  const reg = tf.layers.dense({ units: 2, name: 'reg' }).apply(trunk);
  const cls = tf.layers.dense({ units: 3, activation: 'softmax', name: 'cls' }).apply(trunk);
  const model = tf.model({ inputs: input, outputs: [reg, cls] });
  model.setWeights(Object.keys(shapes).map(n => tf.tensor(w[n], shapes[n])));
  model.compile({ optimizer: tf.train.sgd(0.1), loss: ['meanSquaredError', 'categoricalCrossentropy'] });
  const split = Math.floor(HEADS_ROWS * 0.75);
  const xv = tf.tensor(x.subarray(split * 6), [HEADS_ROWS - split, 6]);
  const yrv = tf.tensor(yr.subarray(split * 2), [HEADS_ROWS - split, 2]);
  const ycv = tf.tensor(yc.subarray(split * 3), [HEADS_ROWS - split, 3]);
  const val = { val_loss: [], val_reg_loss: [], val_cls_loss: [] };
  const onEpochEnd = () => {  // Keras 3's definitions, on the weights after the epoch
    const [pr, pc] = model.predict(xv);
    const r = tf.mean(tf.mean(tf.square(tf.sub(pr, yrv)), -1)).dataSync()[0];
    const c = cce(ycv, pc).dataSync()[0];
    val.val_reg_loss.push(r);
    val.val_cls_loss.push(c);
    val.val_loss.push(f(r + c));
    tf.dispose([pr, pc]);
  };
  const h = await model.fit(tf.tensor(x, [HEADS_ROWS, 6]),
    [tf.tensor(yr, [HEADS_ROWS, 2]), tf.tensor(yc, [HEADS_ROWS, 3])],
    { epochs: 3, batchSize: 8, shuffle: false, validationSplit: 0.25, verbose: 0,
      callbacks: { onEpochEnd } });
  fs.mkdirSync(HEADS_DIR, { recursive: true });
  write2(HEADS_DIR, 'weights.safetensors', L.safetensorsBytes(
    Object.keys(shapes).map(n => ({ name: n, shape: shapes[n], data: w[n] }))));
  write2(HEADS_DIR, 'x.npy', L.npyBytes([HEADS_ROWS, 6], x));
  write2(HEADS_DIR, 'yr.npy', L.npyBytes([HEADS_ROWS, 2], yr));
  write2(HEADS_DIR, 'yc.npy', L.npyBytes([HEADS_ROWS, 3], yc));
  const hist = {};
  for (const k of ['loss', 'reg_loss', 'cls_loss']) {
    if (!h.history[k]) throw new Error(`tfjs history has no ${k}: ${Object.keys(h.history)}`);
    hist[k] = h.history[k].map(v => Number(v));
  }
  Object.assign(hist, val);
  write2(HEADS_DIR, 'history.json', JSON.stringify(hist) + '\n');
  console.log(`  two_heads sgd: loss ${hist.loss.map(v => v.toFixed(6)).join(' ')}, ` +
              `reg_loss ${hist.reg_loss.map(v => v.toFixed(6)).join(' ')}`);
}

module.exports = { emitTraining, emitCnnTraining, emitTwoHeads };

if (require.main === module) {
  (async () => {
    await tf.setBackend('cpu');
    await tf.ready();
    const only = process.argv.slice(2);
    if (!only.length || only.includes('mnist_mlp')) await emitTraining();
    if (!only.length || only.includes('small_cnn')) await emitCnnTraining();
    if (!only.length || only.includes('two_heads')) await emitTwoHeads();
  })().catch(e => { console.error(e); process.exit(1); });
}
