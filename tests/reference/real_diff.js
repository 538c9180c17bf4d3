'use strict';
// Differential check of real Keras model files: kdc against TensorFlow.js.
//
//   node real_diff.js [--kdc PATH] [--batch N] [--seed S] [--time T]
//                     [--mesh M [--layout L.json | --layout model]] [--write DIR [--no-kdc]]
//                     [--quiet] FILE...
//
// --mesh 2x4 alone: kdc's DataParallel (the batch over all 8 devices);
// --layout model: a ModelParallel layout written per model (axes
// data,model): every weight of rank >= 2 whose last dim 4 divides split
// over "model" on that dim (a recurrent layer's only when 4 divides its
// units: kdc splits gate-packed dims per gate), the batch over "data".
//
// For each model file (Keras 3 / tf.keras 2 to_json, or a TF.js
// model.json, whose own weights are not used):
//  1. tfjs builds the topology (keras2_topology.js rewrites Keras 3 files to
//     the tf.keras 2 form tfjs reads; tfjs_keras3.js / keras3_layers.js add
//     the classes tfjs lacks).
//  2. Every weight gets seeded values from lib.js' mulberry32 (seed per
//     file = --seed + a hash of the file name), scaled so activations stay
//     O(1) (below); they are written as safetensors under tfjs' weight names
//     (`<layer>/<weight>`), which kdc binds like any safetensors file.
//  3. One random input batch (uniform [-1, 1]; integer ids in
//     [1, input_dim) when an Embedding reads the input, row r of a (B, T)
//     batch ending in floor(r T / 2B) padding zeros, so mask_zero matters;
//     unknown dims after the batch dim set to --time, given to kdc with
//     --input-shape).
//  4. tfjs predict (inference mode, pure-JS CPU backend, float32) and
//     `kdc compile --weights` + `kdc run`, one output file per model output.
//  5. Compare every element: |kdc - tfjs| <= atol + rtol |tfjs| with
//     rtol = 1e-4 and atol = 1e-5 * max |tfjs output| (the output's own
//     scale: a softmax over 8485 classes has values near 1e-4).
//     Why: both sides compute in float32 (eps 6e-8) but sum in different
//     orders (kdc tiles GEMMs and convolutions, tfjs loops); a length-K
//     dot product differs by ~sqrt(K) eps relative to its magnitude, about
//     2e-6 for K = 1000, and the difference grows with depth; each line
//     prints the worst error / tolerance ratio. Looser bounds let real bugs
//     through: an LSTM computed with sigmoid instead of tf.keras 2's
//     hard_sigmoid (DeepAnomaly) moves the output by 5e-4 relative, a
//     padded step that is not masked (Image-Caption-Generator) by 0.36 of
//     the output's scale.
// Exit status 0 when every file matched, 1 otherwise; one line per file:
//   ok|FAIL|TFJS <file>: <detail>
// TFJS means tfjs cannot load or run the topology (a tfjs limitation,
// printed with its message); kdc is then not compared.
//
// --write DIR: also keep, per file, DIR/<base>/weights.safetensors,
// input<i>.npy, expected<i>.npy (tfjs' outputs) and case.json -- the
// reference data tests/e2e/test_e2e_real3.c reads (gen_real3.sh).

const fs = require('fs');
const os = require('os');
const path = require('path');
const { execFileSync } = require('child_process');
const tf = require('@tensorflow/tfjs');
const L = require('./lib');
const ext = require('./tfjs_keras3');
require('./keras3_layers');
const { toKeras2, readTopology } = require('./keras2_topology');

// tfjs camelCases activation names when it reads a topology.
class LeakyReluAlias extends ext.LeakyReluAct {}
LeakyReluAlias.className = 'leakyRelu';
class HardSigmoidKeras3 extends tf.serialization.Serializable {
  getConfig() { return {}; }
  apply(x) { return tf.tidy(() => tf.div(tf.relu6(tf.add(x, 3)), 6)); }
}
HardSigmoidKeras3.className = 'hardSigmoidKeras3';
for (const c of [LeakyReluAlias, HardSigmoidKeras3]) tf.serialization.registerClass(c);

// Options of the command line |args| (each removed as it is read).
function argReader(args) {
  return {
    opt(name, def) {
      const i = args.indexOf(name);
      if (i < 0) return def;
      const v = args[i + 1];
      args.splice(i, 2);
      return v;
    },
    flag(name) {
      const i = args.indexOf(name);
      if (i < 0) return false;
      args.splice(i, 1);
      return true;
    },
  };
}
// (read only when run: real_fit.js requires this file for loadReal)
const args = require.main === module ? process.argv.slice(2) : [];
const { opt, flag } = argReader(args);
const KDC = opt('--kdc', path.resolve(__dirname, '..', '..', 'build', 'tools', 'kdc'));
const BATCH = Number(opt('--batch', '2'));
const SEED = Number(opt('--seed', '1'));
const TIME = Number(opt('--time', '8'));
const MESH = opt('--mesh', '1');
const LAYOUT = opt('--layout', null);
const WRITE = opt('--write', null);
const NO_KDC = flag('--no-kdc');
const QUIET = flag('--quiet');
const RTOL = 1e-4, ATOL = 1e-5;

function hashName(s) {
  let h = 2166136261 >>> 0;
  for (let i = 0; i < s.length; i++) h = Math.imul(h ^ s.charCodeAt(i), 16777619) >>> 0;
  return h;
}
const prod = a => a.reduce((p, q) => p * q, 1);

// Values for one weight, by its name and shape: kernels U(-s, s) with
// s = sqrt(3 / fan_in) (variance 1 / fan_in: a layer keeps its input's
// scale), biases and shifts U(-0.1, 0.1) (non-zero: a lost bias shows),
// scales and variances around 1, embeddings U(-1, 1).
function weightValues(rng, name, shape) {
  const n = prod(shape), leaf = name.split('/').pop();
  if (/moving_variance|^variance$/.test(leaf)) return L.uniformArray(rng, n, 0.5, 1.5);
  if (/gamma|^scale$|alpha/.test(leaf)) return L.uniformArray(rng, n, 0.8, 1.2);
  if (/^count$/.test(leaf)) return new Float32Array(n).fill(100);
  if (/embeddings/.test(leaf)) return L.uniformArray(rng, n, -1, 1);
  if (shape.length <= 1) return L.uniformArray(rng, n, -0.1, 0.1);
  let fanIn = prod(shape.slice(0, -1));
  if (/depthwise/.test(leaf) || /kernel/.test(leaf) && shape.length === 4 && /depthwise|dw/.test(name))
    fanIn = prod(shape.slice(0, -2));
  const s = Math.sqrt(3 / Math.max(1, fanIn));
  return L.uniformArray(rng, n, -s, s);
}

// The smallest Embedding input_dim among the layers an input feeds
// (looking into nested models and through their InputLayers), or 0.
function embeddingRange(layer, seen = new Set()) {
  let best = 0;
  for (const node of layer.outboundNodes || []) {
    const l = node.outboundLayer;
    if (!l || seen.has(l)) continue;
    seen.add(l);
    let r = 0;
    if (l.getClassName() === 'Embedding') r = l.inputDim;
    else if (l.layers && l.inputLayers) for (const il of l.inputLayers) r = r || embeddingRange(il, seen);
    if (r && (!best || r < best)) best = r;
  }
  return best;
}

// The full-match regex of the Keras variable paths that tfjs' weight
// |name| stands for: its components in order, Keras' inner scopes
// (lstm_cell, a Sequential's name) allowed between them.
function layoutKey(name) {
  const esc = t => t.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
  return '(.*/)?' + name.split('/').map(esc).join('/(.*/)?');
}

// Keras ModelParallel layout (layout_map keys are full-match regexes on
// Keras variable paths; tfjs names omit Keras' inner scopes such as
// lstm_cell, hence the optional groups).
function modelLayout(tensors) {
  const map = {};
  // kdc splits a recurrent layer's gate-packed dim per gate (units over
  // "model"): leave layers whose units 4 does not divide replicated
  const whole = new Set(tensors.filter(t => /recurrent_kernel$/.test(t.name) && t.shape[0] % 4)
    .map(t => t.name.replace(/recurrent_kernel$/, '')));
  for (const t of tensors) {
    if (t.shape.length < 2 || t.shape[t.shape.length - 1] % 4) continue;
    if (whole.has(t.name.replace(/[^/]*$/, ''))) continue;
    map[layoutKey(t.name)] = t.shape.map((_, i) => (i === t.shape.length - 1 ? 'model' : null));
  }
  return { batch_dim_name: 'data', layout_map: map };
}

function compare(got, ref) {
  if (JSON.stringify(got.shape) !== JSON.stringify(ref.shape))
    return { ok: false, why: `shape ${JSON.stringify(got.shape)} vs tfjs ${JSON.stringify(ref.shape)}` };
  let maxAbs = 0;
  for (const v of ref.data) maxAbs = Math.max(maxAbs, Math.abs(v));
  const atol = ATOL * Math.max(maxAbs, 1e-30);
  let worst = 0, at = -1, maxErr = 0;
  for (let i = 0; i < ref.data.length; i++) {
    const d = Math.abs(got.data[i] - ref.data[i]);
    const q = Number.isNaN(d) ? Infinity : d / (atol + RTOL * Math.abs(ref.data[i]));
    if (!Number.isNaN(d)) maxErr = Math.max(maxErr, d);
    if (q > worst || at < 0) { worst = q; at = i; }
  }
  return { ok: worst <= 1, maxErr, ratio: worst,
    why: `max |err| ${maxErr.toExponential(2)}, worst ratio ${worst.toExponential(2)} at ${at}: kdc ${got.data[at]} tfjs ${ref.data[at]}` };
}

function firstLine(e) {
  const s = String(e.stderr || e.message || e).trim().split('\n');
  return s.find(x => x.trim()) || '';
}

// tfjs names a Bidirectional's layers 'forward_' / 'backward_' + the
// wrapped layer's name even when that name is Keras 3's 'forward_lstm'
// (and ignores backward_layer's name): give kdc Keras' names instead.
function bidiRenames(o, out = []) {
  if (Array.isArray(o)) { o.forEach(x => bidiRenames(x, out)); return out; }
  if (o && typeof o === 'object') {
    const c = o.config;
    if (o.class_name === 'Bidirectional' && c && c.layer && /^forward_/.test(c.layer.config.name)) {
      const inner = c.layer.config.name;
      const bwd = c.backward_layer ? c.backward_layer.config.name : 'backward_' + inner.slice(8);
      out.push([`${c.name}/forward_${inner}/`, `${c.name}/${inner}/`], [`${c.name}/backward_${inner}/`, `${c.name}/${bwd}/`]);
    }
    for (const v of Object.values(o)) bidiRenames(v, out);
  }
  return out;
}

// Steps 1-3 for |file|: the tfjs model, its seeded weights (|tensors|,
// under the names kdc binds) and |rows| rows of seeded inputs; unknown
// dims after the batch are |time| (|shapeArgs|: kdc's --input-shape).
// {status: 'TFJS', detail} when tfjs cannot build it.  |base| (the
// file's name) seeds the values.
async function loadReal(file, { rows, seed = 1, time = 8, base = path.basename(file, '.json') }) {
  const { topology, format } = readTopology(fs.readFileSync(file, 'utf8'));
  let model;
  try {
    model = await tf.models.modelFromJSON({
      modelTopology: toKeras2(topology, { zeroInit: true, keras3Activations: format === 'k3', resetAfterGRU: true }) });
  } catch (e) {
    return { status: 'TFJS', detail: 'tfjs cannot load it: ' + firstLine(e).slice(0, 160) };
  }
  const rng = L.mulberry32((seed + hashName(base)) >>> 0);
  // weights
  const tensors = [];
  const seen = new Map();
  const renames = bidiRenames(topology);
  for (const w of model.weights) {
    let name = w.originalName || w.name;
    for (const [from, to] of renames) if (name.includes(from)) name = name.replace(from, to);
    if (seen.has(name)) return { status: 'TFJS', detail: `two tfjs weights named ${name}` };
    seen.set(name, true);
    const data = weightValues(rng, name, w.shape);
    const int = w.dtype === 'int32';  // Normalization's count: I64 in Keras
    w.write(tf.tensor(data, w.shape, int ? 'int32' : 'float32'));
    tensors.push(int ? { name, shape: w.shape, data, dtype: 'I64' } : { name, shape: w.shape, data });
  }
  // inputs
  const inputs = [], shapeArgs = [];
  model.inputs.forEach((sym, i) => {
    const il = sym.sourceLayer;  // a Sequential has no inputLayers
    const shp = sym.shape.slice();
    let unknown = false;
    for (let d = 1; d < shp.length; d++) if (shp[d] == null) { shp[d] = time; unknown = true; }
    shp[0] = rows;
    if (unknown) shapeArgs.push('--input-shape', `${il.name}=${shp.slice(1).join(',')}`);
    const range = embeddingRange(il);
    const n = prod(shp);
    const data = range ? Float32Array.from({ length: n }, () => 1 + Math.floor(rng() * (range - 1)))
      : L.uniformArray(rng, n, -1, 1);
    // ids: row r ends in r * T / (2 B) zeros (padding: exercises mask_zero)
    if (range && shp.length === 2)
      for (let r = 0; r < shp[0]; r++)
        for (let t = shp[1] - Math.floor(r * shp[1] / (2 * shp[0])); t < shp[1]; t++) data[r * shp[1] + t] = 0;
    inputs.push({ shape: shp, data, ids: range });
  });
  return { base, topology, format, model, tensors, inputs, shapeArgs, rng };
}

async function checkFile(file) {
  const r = await loadReal(file, { rows: BATCH, seed: SEED, time: TIME });
  if (r.status) return r;
  const { base, model, tensors, inputs, shapeArgs } = r;
  let ys;
  try {
    const xs = inputs.map(x => tf.tensor(x.data, x.shape, 'float32'));
    ys = model.predict(xs.length === 1 ? xs[0] : xs, { batchSize: BATCH });
    ys = (Array.isArray(ys) ? ys : [ys]).map(y => ({ shape: y.shape, data: y.dataSync() }));
  } catch (e) {
    return { status: 'TFJS', detail: 'tfjs predict fails: ' + firstLine(e).slice(0, 160) };
  }
  const dir = WRITE ? path.join(WRITE, base) : fs.mkdtempSync(path.join(os.tmpdir(), 'real_diff-'));
  fs.mkdirSync(dir, { recursive: true });
  fs.writeFileSync(path.join(dir, 'weights.safetensors'), L.safetensorsBytes(tensors));
  inputs.forEach((x, i) => fs.writeFileSync(path.join(dir, `input${i}.npy`), L.npyBytes(x.shape, x.data)));
  if (WRITE) {
    ys.forEach((y, i) => fs.writeFileSync(path.join(dir, `expected${i}.npy`), L.npyBytes(y.shape, y.data)));
    fs.writeFileSync(path.join(dir, 'case.json'), JSON.stringify({
      model: path.basename(file), batch: BATCH, seed: SEED, n_in: inputs.length, n_out: ys.length,
      input_shape: shapeArgs.filter((_, k) => k % 2 === 1), ids: inputs.map(x => x.ids) }) + '\n');
  }
  if (NO_KDC) return { status: 'ok', detail: `reference written to ${dir} (kdc not run)` };
  const plan = path.join(dir, 'plan.bin');
  const cargs = ['compile', file, '--weights', path.join(dir, 'weights.safetensors'), '--batch', String(BATCH),
    '--mesh', MESH, '-o', plan].concat(shapeArgs);
  if (LAYOUT === 'model') {
    fs.writeFileSync(path.join(dir, 'layout.json'), JSON.stringify(modelLayout(tensors)));
    cargs.push('--axes', 'data,model', '--layout', path.join(dir, 'layout.json'));
  } else if (LAYOUT) {
    cargs.push('--layout', LAYOUT);
  }
  const cleanup = () => { if (!WRITE) fs.rmSync(dir, { recursive: true, force: true }); else fs.rmSync(plan, { force: true }); };
  try {
    execFileSync(KDC, cargs, { stdio: ['ignore', 'pipe', 'pipe'] });
  } catch (e) {
    cleanup();
    return { status: 'FAIL', detail: `kdc compile exit ${e.status}: ${firstLine(e)}` };
  }
  const rargs = ['run', plan, '--threads', '1'];
  inputs.forEach((_, i) => rargs.push('--input', path.join(dir, `input${i}.npy`)));
  ys.forEach((_, i) => rargs.push('--output', path.join(dir, `got${i}.npy`)));
  try {
    execFileSync(KDC, rargs, { stdio: ['ignore', 'pipe', 'pipe'] });
  } catch (e) {
    cleanup();
    return { status: 'FAIL', detail: `kdc run exit ${e.status}: ${firstLine(e)}` };
  }
  const parts = [];
  let ok = true;
  ys.forEach((y, i) => {
    const got = L.readNpy(path.join(dir, `got${i}.npy`));
    const c = compare(got, y);
    ok = ok && c.ok;
    parts.push(`out${i} ${JSON.stringify(y.shape)} ${c.ok ? `max |err| ${c.maxErr.toExponential(2)} (ratio ${c.ratio.toExponential(1)})` : c.why}`);
    fs.rmSync(path.join(dir, `got${i}.npy`), { force: true });
  });
  cleanup();
  return { status: ok ? 'ok' : 'FAIL', detail: `${tensors.length} weights; ` + parts.join('; ') };
}

async function main() {
  await tf.setBackend('cpu');
  if (!args.length) {
    console.error('usage: node real_diff.js [--kdc PATH] [--batch N] [--seed S] [--time T] [--mesh M [--layout L]] [--write DIR] FILE...');
    process.exit(2);
  }
  await eachFile(args, checkFile, QUIET);
}

// |fn|(file) for each of |files|: one line per file, `ok|FAIL|TFJS|SKIP
// <file>: <detail> [seconds]` (ok lines only when not |quiet|); exits 1
// when one failed, else 0.
async function eachFile(files, fn, quiet) {
  let bad = 0;
  for (const f of files) {
    const t0 = Date.now();
    let r;
    try {
      r = await fn(f);
    } catch (e) {
      r = { status: 'FAIL', detail: 'harness error: ' + firstLine(e) };
    }
    if (r.status === 'FAIL') bad++;
    if (!quiet || r.status !== 'ok')
      console.log(`${r.status} ${path.basename(f)}: ${r.detail} [${((Date.now() - t0) / 1000).toFixed(1)} s]`);
  }
  process.exit(bad ? 1 : 0);
}

if (require.main === module) main();
module.exports = { loadReal, modelLayout, layoutKey, hashName, firstLine, argReader, eachFile };
