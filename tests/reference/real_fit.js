'use strict';
// Differential check of TRAINING on real Keras model files: `kdc run --fit`
// against a Keras 3 fit built on TensorFlow.js 4.22.
//
//   node real_fit.js [--kdc PATH] [--write DIR [--no-kdc]] [--max-seconds S]
//                    [--quiet] FILE...
//
// For each model file (the formats real_diff.js reads):
//  1. Random layers are switched off in a copy of the file: Dropout,
//     SpatialDropout*, AlphaDropout, GaussianDropout rate 0, GaussianNoise
//     stddev 0, a recurrent layer's dropout / recurrent_dropout 0 (kdc
//     draws its masks from its own stream, tfjs from its own, so a fit
//     with them has no common reference; with rate 0 both are identities
//     in training too).  A file that had some is also trained as it is
//     (below, "noisy").
//  2. A loss per output: the compile_config's (Keras 3 compile_config or
//     tf.keras 2 training_config) when it is one fit_fuzz.js computes
//     (mean_squared_error, mean_absolute_error, binary_crossentropy,
//     categorical_crossentropy, sparse_categorical_crossentropy, by name,
//     class or function), else categorical or sparse categorical
//     crossentropy (by the file name's hash) for an output whose rows sum
//     to 1 (softmax), else mean_squared_error.  Labels: one-hot rows,
//     class ids (f32) for the sparse loss, 0/1 for binary crossentropy,
//     U(-1, 1) for the regressions.
//  3. An optimizer, rotating by the file name's hash: SGD(0.01, momentum
//     0.9) through a compile_config put into the copy (there is no
//     momentum flag), Adam(0.001) and RMSprop(0.001) through `--loss
//     --optimizer --learning-rate` (Keras 3 defaults otherwise).  A model
//     whose tfjs fit reaches a non-finite loss is fit again at a tenth of
//     the rate.
//  4. Weights and inputs from real_diff.js' loadReal (seeded per file;
//     token ids in [1, input_dim) with padding zeros for Embedding inputs),
//     ROWS = 20 rows, batch 8 (steps of 8, 8, 4 rows: a partial last
//     batch), 3 epochs, shuffle off, no validation.
//  5. The reference: fit_fuzz.js' train() (tfjs autodiff of the Keras 3
//     loss of model.apply(x, {training: true}), the Keras 3 optimizer
//     update in f32, Keras' loss tracker; at the first step two elements
//     of up to FD_VARS variables' gradients against central differences,
//     so that a wrong tfjs gradient stops the reference instead of
//     becoming it).
//  6. kdc: `kdc compile` + `kdc run --fit --history --save-weights` on
//     mesh 1, on mesh 2x4 DataParallel (the batch over 8 devices) and on
//     2x4 with real_diff.js' per-model ModelParallel layout
//     (--axes data,model).  Every history entry and every final weight
//     (moving statistics too) is compared by fit_fuzz.js' compareFit:
//     losses within 1e-6 + 1e-4 |ref|, weights within 1e-4 + 1e-3 |ref|
//     (float32 on both sides, the same formulas, different summation
//     orders, compounded over 9 steps; README.md "Training fuzz").
//  7. noisy: the file as it is (random layers on) is trained by kdc on
//     mesh 1, 2x4 DataParallel and 2x4 ModelParallel; kdc's masks depend
//     on (seed, step, global index) only, so the meshes must agree with
//     mesh 1 (same tolerances); tfjs can only check such a model at
//     inference (training=false: real_diff.js).
// A file whose tfjs inference-mode forward of one row takes more than
// --max-seconds / 20, or of the 20 rows more than --max-seconds / 10 (default 20 s / 10: the fit is ~9 forwards and
// backwards plus the gradient check), or whose tfjs fit is not done after
// 2 x --max-seconds, is skipped as too big (SKIP).
// One line per file: ok|FAIL|TFJS|SKIP <file>: <detail>; exit 1 on FAIL.
//
// --write DIR: keep each file's case as DIR/<base>/ in the format of
// tests/e2e/fit_fuzz_cases (model.json, weights.safetensors, x.npy or
// x0.npy ..., y.npy or y0.npy ..., layout.json, history.json,
// final.safetensors (tfjs' weight names), case.json with `cli`: the
// --loss/--optimizer/--learning-rate flags of every run, or null (the
// compile_config in model.json), and `compile_args`: --input-shape flags);
// tests/e2e/test_e2e_real_fit.c reads them (gen_real_fit.sh).  A weight
// with trainable false that the fit leaves unchanged is not in
// final.safetensors (kdc keeps frozen weights in the plan; --save-weights
// writes the training state).

const fs = require('fs');
const os = require('os');
const path = require('path');
const { execFileSync } = require('child_process');
const tf = require('@tensorflow/tfjs');
const L = require('./lib');
const RD = require('./real_diff');
const FF = require('./fit_fuzz');
const K3 = require('./keras3_layers');

const args = process.argv.slice(2);
const { opt, flag } = RD.argReader(args);
const KDC = opt('--kdc', path.resolve(__dirname, '..', '..', 'build', 'tools', 'kdc'));
const WRITE = opt('--write', null);
const MAX_SECONDS = Number(opt('--max-seconds', '20'));
const NO_KDC = flag('--no-kdc');
const QUIET = flag('--quiet');
const ROWS = 20, BATCH = 8, FD_VARS = 6;
const prod = a => a.reduce((p, q) => p * q, 1);

// ---- 1. random layers off
const RATE_KEYS = { Dropout: 'rate', SpatialDropout1D: 'rate', SpatialDropout2D: 'rate', SpatialDropout3D: 'rate',
  AlphaDropout: 'rate', GaussianDropout: 'rate', GaussianNoise: 'stddev' };
function quiet(o) {
  let changed = false;
  const walk = x => {
    if (Array.isArray(x)) { x.forEach(walk); return; }
    if (!x || typeof x !== 'object') return;
    const c = x.config;
    if (typeof x.class_name === 'string' && c && typeof c === 'object' && !Array.isArray(c)) {
      const k = RATE_KEYS[x.class_name];
      if (k && c[k]) { c[k] = 0.0; changed = true; }
      for (const rk of ['dropout', 'recurrent_dropout']) if (c[rk]) { c[rk] = 0.0; changed = true; }
    }
    Object.values(x).forEach(walk);
  };
  walk(o);
  return changed;
}

// ---- 2. losses
const LOSS_KEY = {};
for (const [k, v] of Object.entries(FF.LOSSES)) {
  LOSS_KEY[v.name] = k; LOSS_KEY[v.cls] = k; LOSS_KEY[k] = k;
}
Object.assign(LOSS_KEY, { mean_squared_error: 'mse', mean_absolute_error: 'mae' });
// A compile_config / training_config loss entry -> fit_fuzz key, or null.
function lossKey(e) {
  if (typeof e === 'string') return LOSS_KEY[e] || null;
  if (!e || typeof e !== 'object' || Array.isArray(e)) return null;
  const c = e.config;
  if (e.class_name === 'function' && typeof c === 'string') return LOSS_KEY[c] || null;
  if (c && (c.label_smoothing || c.from_logits)) return null;  // not what the head computes here
  return LOSS_KEY[e.class_name] || null;
}
function configuredLosses(doc, outNames) {
  const cc = doc.compile_config || doc.training_config || (doc.modelTopology && doc.modelTopology.training_config);
  if (!cc || cc.loss == null) return null;
  const l = cc.loss;
  let keys;
  if (Array.isArray(l)) keys = l.map(lossKey);
  else if (typeof l === 'object' && !l.class_name) keys = outNames.map(n => lossKey(l[n]));
  else keys = outNames.map(() => lossKey(l));
  return keys.length === outNames.length && keys.every(k => k) ? keys : null;
}
// rows along the last axis are probabilities (a softmax output)
function isSoftmax(y) {
  const C = y.shape[y.shape.length - 1];
  if (C < 2) return false;
  for (let i = 0; i < y.data.length; i += C) {
    let s = 0;
    for (let j = 0; j < C; j++) { if (y.data[i + j] < 0) return false; s += y.data[i + j]; }
    if (Math.abs(s - 1) > 1e-4) return false;
  }
  return true;
}

// ---- 3. optimizers (Keras 3 defaults; fit_fuzz.js' makeOptimizer keys)
const OPTS = [
  { cls: 'SGD', learning_rate: 0.01, momentum: 0.9, nesterov: false },
  { cls: 'Adam', learning_rate: 0.001, beta_1: 0.9, beta_2: 0.999, epsilon: 1e-7, amsgrad: false, weight_decay: null },
  { cls: 'RMSprop', learning_rate: 0.001, rho: 0.9, momentum: 0, epsilon: 1e-7, centered: false },
];
function sgdCompileConfig(heads, o) {
  const loss = hd => FF.LOSSES[hd.loss].name;
  return {
    optimizer: { module: 'keras.optimizers', class_name: 'SGD', registered_name: null,
      config: { name: 'SGD', learning_rate: o.learning_rate, momentum: o.momentum, nesterov: false } },
    loss: heads.length > 1 ? heads.map(loss) : loss(heads[0]), loss_weights: null,
  };
}

const firstLine = RD.firstLine;

// keras3_layers.js' GRU with reset_after=true (Keras 3's default) computes
// in plain JS, float64, without a tfjs gradient: for the fit, the same
// Keras 3 step (rnn/gru.py, its comment there) in tf ops, float32.
function differentiableGRU() {
  const acts = { tanh: tf.tanh, sigmoid: tf.sigmoid, linear: x => x, relu: tf.relu,
    hard_sigmoid: x => tf.clipByValue(tf.add(tf.mul(x, 0.2), 0.5), 0, 1) };
  K3.KGRUResetAfter.prototype.call = function (inputs) {
    const x = Array.isArray(inputs) ? inputs[0] : inputs, [B, T, D] = x.shape, c = this.cfg, u = c.units;
    const v = n => this.weights.find(w => w.originalName === `${this.name}/${n}`).read();
    const W = v('kernel'), U = v('recurrent_kernel'), bias = c.use_bias ? v('bias') : tf.zeros([2, 3 * u]);
    const b0 = tf.reshape(tf.slice(bias, [0, 0], [1, 3 * u]), [3 * u]);
    const b1 = tf.reshape(tf.slice(bias, [1, 0], [1, 3 * u]), [3 * u]);
    const act = acts[c.activation], ract = acts[c.recurrent_activation];
    const xs = tf.add(tf.reshape(tf.matMul(tf.reshape(x, [B * T, D]), W), [B, T, 3 * u]), b0);
    const part = (m, k) => tf.slice(m, [0, k * u], [B, u]);
    let h = tf.zeros([B, u]);
    const outs = [];
    for (let s = 0; s < T; s++) {
      const t = c.go_backwards ? T - 1 - s : s;
      const xt = tf.reshape(tf.slice(xs, [0, t, 0], [B, 1, 3 * u]), [B, 3 * u]);
      const hs = tf.add(tf.matMul(h, U), b1);
      const z = ract(tf.add(part(xt, 0), part(hs, 0))), r = ract(tf.add(part(xt, 1), part(hs, 1)));
      const hh = act(tf.add(part(xt, 2), tf.mul(r, part(hs, 2))));
      h = tf.add(tf.mul(z, h), tf.mul(tf.sub(1, z), hh));
      outs.push(h);
    }
    return c.return_sequences ? tf.stack(outs, 1) : h;
  };
}

// tfjs 4.22's CPU UnsortedSegmentSum (the gradient of gather, so of every
// Embedding) loops over the segments and sums a masked copy of all the
// values for each: O(input_dim x rows x dim), minutes for a 50000-word
// Embedding.  The same sums in one pass over the rows (each segment's rows
// added in row order, in f32), for 1-D segment ids (the gather gradient's);
// other ranks go to tfjs' kernel.
function fastSegmentSum() {
  const orig = tf.getKernel('UnsortedSegmentSum', 'cpu');
  tf.unregisterKernel('UnsortedSegmentSum', 'cpu');
  tf.registerKernel({ kernelName: 'UnsortedSegmentSum', backendName: 'cpu', kernelFunc: a => {
    const { x, segmentIds } = a.inputs, n = a.attrs.numSegments;
    if (segmentIds.shape.length !== 1 || x.dtype !== 'float32') return orig.kernelFunc(a);
    const xv = a.backend.data.get(x.dataId).values, ids = a.backend.data.get(segmentIds.dataId).values;
    const inner = prod(x.shape.slice(1)), out = new Float32Array(n * inner);
    for (let r = 0; r < ids.length; r++) {
      if (ids[r] < 0 || ids[r] >= n) continue;
      const o = ids[r] * inner, i0 = r * inner;
      for (let k = 0; k < inner; k++) out[o + k] += xv[i0 + k];
    }
    return a.backend.makeTensorInfo([n, ...x.shape.slice(1)], 'float32', out);
  } });
}

// |ref| (tfjs weight names, `<layer>/<weight>`) under the Keras 3 paths of
// kdc's --save-weights |st| (`sequential/lstm_1/lstm_cell/kernel`): each
// tfjs name's components appear in that order as whole components of
// exactly one path, ending it (the rule real_diff.js' layout keys use;
// tests/e2e/test_e2e_real_fit.c matches the same way).  Unmatched names
// stay as they are (compareFit then reports them).
function kerasNames(ref, st) {
  const paths = Object.keys(st).filter(n => !/^(SGD|adam|adamw|rmsprop)\//.test(n));
  const out = {};
  for (const [name, t] of Object.entries(ref)) {
    const re = new RegExp('^' + RD.layoutKey(name) + '$');
    const m = paths.filter(p => re.test(p));
    out[m.length === 1 ? m[0] : name] = t;
  }
  return out;
}

// One kdc fit of |model| in |dir|: the history and the final weights.
function kdcFit(dir, model, c, run, tag) {
  const plan = path.join(dir, 'plan.bin'), hout = path.join(dir, 'got_history.json');
  const wout = path.join(dir, 'got_final.safetensors');
  const cargs = ['compile', model, '--weights', path.join(dir, 'weights.safetensors'), '-o', plan,
    '--batch', String(BATCH), '--mesh', run.mesh, ...c.compile_args, ...(c.cli || [])];
  if (run.layout) cargs.push('--axes', 'data,model', '--layout', path.join(dir, 'layout.json'));
  try {
    execFileSync(KDC, cargs, { stdio: ['ignore', 'pipe', 'pipe'] });
  } catch (e) {
    return { fail: `${tag}: compile exit ${e.status ?? e.signal}: ${firstLine(e)}` };
  }
  const files = (b, n) => (n > 1 ? [...Array(n).keys()].map(i => `${b}${i}.npy`) : [`${b}.npy`]);
  try {
    execFileSync(KDC, ['run', plan, '--fit',
      ...files('x', c.n_in).flatMap(x => ['--x', path.join(dir, x)]),
      ...files('y', c.n_out).flatMap(y => ['--y', path.join(dir, y)]),
      '--epochs', String(c.epochs), '--batch-size', String(BATCH), '--history', hout,
      '--save-weights', wout, '--quiet', '--threads', '1'], { stdio: ['ignore', 'pipe', 'pipe'] });
  } catch (e) {
    return { fail: `${tag}: run exit ${e.status ?? e.signal}: ${firstLine(e)}` };
  } finally {
    fs.rmSync(plan, { force: true });
  }
  const got = { hist: FF.readHistory(hout), st: L.readSafetensors(wout) };
  fs.rmSync(hout, { force: true });
  fs.rmSync(wout, { force: true });
  return got;
}

const RUNS = [{ mesh: '1' }, { mesh: '2x4' }, { mesh: '2x4', layout: true }];
const runTag = run => `mesh ${run.mesh}${run.layout ? ' model-parallel' : run.mesh !== '1' ? ' data-parallel' : ''}`;

async function fitFile(file, lrScale = 1) {
  const base = path.basename(file, '.json');
  const text = fs.readFileSync(file, 'utf8');
  const doc = JSON.parse(text);
  const noisy = quiet(doc);
  const h = RD.hashName(base);
  const dir = WRITE ? path.join(WRITE, base) : fs.mkdtempSync(path.join(os.tmpdir(), 'real_fit-'));
  fs.mkdirSync(dir, { recursive: true });
  const cleanup = () => { if (!WRITE) fs.rmSync(dir, { recursive: true, force: true }); };
  const modelFile = path.join(dir, 'model.json');
  fs.writeFileSync(modelFile, JSON.stringify(doc));
  const r = await RD.loadReal(modelFile, { rows: ROWS, base });
  if (r.status) { cleanup(); return r; }
  const { model, tensors, inputs, shapeArgs } = r;
  // inference-mode outputs: the output shapes, softmax or not, the time
  const xs = inputs.map(x => x.data), xShapes = inputs.map(x => x.shape);
  let outs, t0 = Date.now();
  try {
    // one row first: a model far too big is skipped without a whole predict
    const x1 = inputs.map(x => tf.tensor(x.data.subarray(0, prod(x.shape.slice(1))), [1, ...x.shape.slice(1)]));
    tf.dispose(model.predict(x1.length > 1 ? x1 : x1[0]));
    const secs1 = (Date.now() - t0) / 1000;
    if (secs1 * 20 > MAX_SECONDS) {
      cleanup();
      return { status: 'SKIP', detail: `too big: tfjs predicts 1 row in ${secs1.toFixed(1)} s` };
    }
    t0 = Date.now();
    const xt = inputs.map(x => tf.tensor(x.data, x.shape));
    let ys = model.predict(xt.length > 1 ? xt : xt[0], { batchSize: BATCH });
    outs = (Array.isArray(ys) ? ys : [ys]).map(y => ({ shape: y.shape, data: y.dataSync() }));
  } catch (e) {
    cleanup();
    return { status: 'TFJS', detail: 'tfjs predict fails: ' + firstLine(e).slice(0, 160) };
  }
  const secs = (Date.now() - t0) / 1000;
  if (secs * 10 > MAX_SECONDS) {
    cleanup();
    return { status: 'SKIP', detail: `too big: tfjs predicts ${ROWS} rows in ${secs.toFixed(1)} s` };
  }
  // output names as Keras gives them (tf.keras 2 _set_output_names): a
  // layer that gives two outputs (an LSTM's return_state) is `lstm`, then
  // `lstm_1`; the history keys are `<name>_loss`
  const outNames = [], count = {};
  for (const l of model.outputLayers) {
    let name = l.name;
    while (outNames.includes(name)) { count[l.name] = (count[l.name] || 1); name = `${l.name}_${count[l.name]++}`; }
    outNames.push(name);
  }
  const configured = configuredLosses(doc, outNames);
  const heads = outs.map((y, i) => {
    const loss = configured ? configured[i] : isSoftmax(y) ? (h & 1 ? 'scce' : 'cce') : 'mse';
    return { name: outNames[i], loss, fromLogits: false, weight: 1, classes: y.shape[y.shape.length - 1] };
  });
  const o = { ...OPTS[h % OPTS.length] };
  o.learning_rate *= lrScale;
  const drng = L.mulberry32((h ^ 0x1a2b3c4d) >>> 0);
  const ls = heads.map((hd, i) => FF.labels(hd, outs[i].shape, ROWS, drng));
  // the case files
  const many = (n, b, i) => (n > 1 ? `${b}${i}.npy` : `${b}.npy`);
  xs.forEach((x, i) => fs.writeFileSync(path.join(dir, many(xs.length, 'x', i)), L.npyBytes(xShapes[i], x)));
  ls.forEach((l, i) => fs.writeFileSync(path.join(dir, many(ls.length, 'y', i)), L.npyBytes(l.shape, l.data)));
  fs.writeFileSync(path.join(dir, 'weights.safetensors'), L.safetensorsBytes(tensors));
  fs.writeFileSync(path.join(dir, 'layout.json'), JSON.stringify(RD.modelLayout(tensors)));
  let cli = null;
  if (o.cls === 'SGD') {
    doc.compile_config = sgdCompileConfig(heads, o);
  } else {
    delete doc.compile_config;
    cli = ['--loss', heads.map(hd => FF.LOSSES[hd.loss].name).join(','), '--optimizer', o.cls.toLowerCase(),
      '--learning-rate', String(o.learning_rate)];
  }
  fs.writeFileSync(modelFile, JSON.stringify(doc));
  const c = { model: path.basename(file), n_in: xs.length, n_out: ls.length, batch: BATCH, epochs: FF.EPOCHS,
    rows: ROWS, validation_split: 0, noisy: false, had_random_layers: noisy, cli, compile_args: shapeArgs,
    outputs: heads.map(hd => ({ name: hd.name, loss: FF.LOSSES[hd.loss].name })), optimizer: o };
  // the reference fit
  const g = { model, heads, opt: o, batch: BATCH, rows: ROWS, valSplit: 0, fdVars: FD_VARS,
    deadline: Date.now() + 2000 * MAX_SECONDS };
  let hist;
  t0 = Date.now();
  try {
    hist = FF.train(g, xs, ls.map(l => l.data), xShapes, ls.map(l => l.shape));
  } catch (e) {
    cleanup();
    // a model that diverges at the default rate (HelenVe's relu-gated GRU
    // reaches inf in tfjs and in kdc alike): again at a tenth of it
    if (/^non-finite loss/.test(e.message) && lrScale === 1) {
      model.dispose();
      return fitFile(file, 0.1);
    }
    if (/^too slow/.test(e.message))
      return { status: 'SKIP', detail: `too big: the tfjs fit takes more than ${2 * MAX_SECONDS} s (${e.message})` };
    return { status: 'TFJS', detail: 'the tfjs fit fails: ' + firstLine(e).slice(0, 200) };
  }
  const fitSecs = (Date.now() - t0) / 1000;
  // every weight after the fit but the frozen ones (trainable false and
  // unchanged: kdc keeps them in the plan, --save-weights writes the state)
  const ref = {}, trainable = new Set(model.trainableWeights);
  model.weights.forEach((w, i) => {
    const data = w.read().dataSync().slice();
    if (!trainable.has(w) && data.every((v, k) => Object.is(v, tensors[i].data[k]))) return;
    ref[tensors[i].name] = { shape: w.shape, data };
  });
  model.dispose();
  fs.writeFileSync(path.join(dir, 'history.json'), JSON.stringify(hist) + '\n');
  fs.writeFileSync(path.join(dir, 'final.safetensors'), L.safetensorsBytes(
    Object.entries(ref).map(([name, t]) => ({ name, shape: t.shape, data: Float32Array.from(t.data) }))));
  fs.writeFileSync(path.join(dir, 'case.json'), JSON.stringify(c) + '\n');
  const what = `${heads.map(hd => FF.LOSSES[hd.loss].name).join(',')} ${o.cls}(${o.learning_rate})${noisy ? ' (random layers off)' : ''}`;
  if (NO_KDC) return { status: 'ok', detail: `${what}: reference written to ${dir} (tfjs fit ${fitSecs.toFixed(1)} s)` };
  const fails = [], parts = [];
  const before = { ...FF.measured };
  for (const run of RUNS) {
    const tag = runTag(run);
    const got = kdcFit(dir, modelFile, c, run, tag);
    if (got.fail) { fails.push(got.fail); continue; }
    FF.measured.loss = FF.measured.weights = 0;
    const f = FF.compareFit(tag, hist, got.hist, kerasNames(ref, got.st), got.st);
    fails.push(...f);
    parts.push(`${tag} ${f.length ? 'FAIL' : 'ok'} (loss ${FF.measured.loss.toExponential(1)}, w ${FF.measured.weights.toExponential(1)} x tol)`);
  }
  Object.assign(FF.measured, before);
  // noisy: the file as it is, meshes against mesh 1
  if (noisy) {
    const orig = path.join(dir, 'model_noisy.json');
    const d2 = JSON.parse(text);
    if (cli) delete d2.compile_config;
    else d2.compile_config = doc.compile_config;
    fs.writeFileSync(orig, JSON.stringify(d2));
    let first = null;
    for (const run of RUNS) {
      const tag = `random layers on, ${runTag(run)}`;
      const got = kdcFit(dir, orig, c, run, tag);
      if (got.fail) { fails.push(got.fail); break; }
      if (!first) {
        first = got;
        first.ref = Object.fromEntries(Object.entries(got.st).filter(([n]) => !/^(SGD|adam|adamw|rmsprop)\//.test(n)));
        continue;
      }
      const f = FF.compareFit(tag, first.hist, got.hist, first.ref, got.st);
      fails.push(...f);
      parts.push(`${tag} vs mesh 1 ${f.length ? 'FAIL' : 'ok'}`);
    }
  }
  cleanup();
  return { status: fails.length ? 'FAIL' : 'ok',
    detail: `${what}; ${tensors.length} weights; tfjs fit ${fitSecs.toFixed(1)} s; ` +
      (fails.length ? fails.slice(0, 4).join('; ') : parts.join('; ')) };
}

async function main() {
  await tf.setBackend('cpu');
  await tf.ready();
  fastSegmentSum();
  differentiableGRU();
  if (!args.length) {
    console.error('usage: node real_fit.js [--kdc PATH] [--write DIR [--no-kdc]] [--max-seconds S] [--quiet] FILE...');
    process.exit(2);
  }
  await RD.eachFile(args, fitFile, QUIET);
}

main().catch(e => { console.error(e); process.exit(1); });
