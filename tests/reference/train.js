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

module.exports = { emitTraining };

if (require.main === module) {
  (async () => {
    await tf.setBackend('cpu');
    await tf.ready();
    await emitTraining();
  })().catch(e => { console.error(e); process.exit(1); });
}
