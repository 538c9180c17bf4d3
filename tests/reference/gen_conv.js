// Keras 3 reference data for the convolution layers the other examples do
// not cover (examples/conv_zoo): Conv2DTranspose (strides 2, same),
// Cropping2D, SeparableConv2D (depth_multiplier 2, dilation 2),
// DepthwiseConv2D (depth_multiplier 2, dilation 2, valid), Conv2D with
// dilation, Conv2D / GlobalAveragePooling2D with data_format channels_first,
// UpSampling2D bilinear, Conv1D with causal padding and dilation, Conv1D
// strides 2.  Built with tfjs 4.22 (gen.js's Builder and JSON conventions)
// and written like gen.js's examples: model.json (Keras 3), weights.safetensors
// (Keras 3 variable paths), input0/1.npy (37 rows), expected.npy.
//
// Where tfjs differs from Keras 3, the Keras 3 semantics are computed:
//   - UpSampling2D(interpolation="bilinear"): tfjs resizes with
//     halfPixelCenters=false; Keras 3 (tf.image.resize / jax.image.resize)
//     uses half-pixel centres.  KUpBilinear below calls resizeBilinear with
//     halfPixelCenters=true.
//   - DepthwiseConv2D's kernel is `kernel` in Keras 3, `depthwise_kernel` in
//     tfjs (renamed when writing the safetensors); tfjs ignores its
//     dilation_rate in call() (dilatedDepthwise below passes it on);
//   - Conv1D(padding="causal") is not in tfjs: a left zero pad + "valid"
//     conv in the tfjs graph (KCausalPad), one causal Conv1D in model.json.
// usage: cd tests/reference && node gen_conv.js
const fs = require('fs');
const path = require('path');
const tf = require('@tensorflow/tfjs');
const L = require('./lib');
const G = require('./gen');

const OUT = path.resolve(__dirname, '..', '..', 'examples', 'conv_zoo');
const BATCH = 37;

class KUpBilinear extends tf.layers.Layer {
  constructor(cfg) {
    super(cfg);
    this.size = cfg.size;
  }
  computeOutputShape(s) { return [s[0], s[1] * this.size[0], s[2] * this.size[1], s[3]]; }
  call(x) {
    return tf.tidy(() => {
      const t = Array.isArray(x) ? x[0] : x;
      return tf.image.resizeBilinear(t, [t.shape[1] * this.size[0], t.shape[2] * this.size[1]],
        false, true);
    });
  }
  static get className() { return 'KUpBilinear'; }
}
tf.serialization.registerClass(KUpBilinear);

// Conv1D(padding="causal") = left zero padding by (kernel-1)*dilation, then
// "valid" (Keras); tfjs's conv1d has no causal mode, so the tfjs graph gets
// this pad layer in front of a valid conv (the Keras JSON has one layer).
class KCausalPad extends tf.layers.Layer {
  constructor(cfg) {
    super(cfg);
    this.left = cfg.left;
  }
  computeOutputShape(s) { return [s[0], s[1] === null ? null : s[1] + this.left, s[2]]; }
  call(x) {
    return tf.tidy(() => tf.pad(Array.isArray(x) ? x[0] : x, [[0, 0], [this.left, 0], [0, 0]]));
  }
  static get className() { return 'KCausalPad'; }
}
tf.serialization.registerClass(KCausalPad);

// tfjs 4.22's DepthwiseConv2D layer drops its dilation_rate in call() (a
// "TODO(cais)" in tfjs-layers) while its output shape uses it; Keras 3
// dilates.  This call() is tfjs's with the dilation passed on (channels_last).
function dilatedDepthwise(layer) {
  layer.call = function call(inputs) {
    return tf.tidy(() => {
      const x = Array.isArray(inputs) ? inputs[0] : inputs;
      let y = tf.depthwiseConv2d(x, this.depthwiseKernel.read(), this.strides, this.padding, 'NHWC',
        this.dilationRate);
      if (this.useBias) y = tf.add(y, this.bias.read());
      return this.activation ? this.activation.apply(y) : y;
    });
  };
  return layer;
}

const INIT = (c, cfg = {}) => ({ module: 'keras.initializers', class_name: c, config: cfg, registered_name: null });
const GU = () => INIT('GlorotUniform', { seed: null });
const ZE = () => INIT('Zeros');

// Keras 3 BaseConv.get_config keys (+ per-class extras).
function convCfg(rank, extra) {
  const df = extra.data_format || 'channels_last';
  return Object.assign({
    filters: extra.filters, kernel_size: extra.kernel_size, strides: extra.strides || Array(rank).fill(1),
    padding: extra.padding || 'valid', data_format: df,
    dilation_rate: extra.dilation_rate || Array(rank).fill(1), groups: 1,
    activation: extra.activation || 'linear', use_bias: true,
    kernel_initializer: GU(), bias_initializer: ZE(), kernel_regularizer: null,
    bias_regularizer: null, activity_regularizer: null, kernel_constraint: null,
    bias_constraint: null,
  }, extra.more || {});
}

function build() {
  const b = new G.Builder('functional', 'conv_zoo', 0xC0FFEE5);
  b.depthwise = new Set(['dw2']);
  const lay = (cls, name, cfg, tfl, inp) => {
    b.denseInit[name] = 1;
    return b.layer(cls, name, cfg, tfl, inp);
  };
  const gap = (name, inp, df = 'channels_last') =>
    lay('GlobalAveragePooling2D', name, { data_format: df, keepdims: false },
      tf.layers.globalAveragePooling2d({ name, dataFormat: df === 'channels_last' ? 'channelsLast' : 'channelsFirst' }), inp);
  const x = b.input('image', [12, 12, 4]);
  const s = b.input('sequence', [20, 3]);

  // a) Conv2DTranspose(6, 3, strides 2, same) -> Cropping2D(((1,2),(0,1)))
  const tr = lay('Conv2DTranspose', 'tconv', convCfg(2, { filters: 6, kernel_size: [3, 3], strides: [2, 2],
    padding: 'same', activation: 'relu', more: { output_padding: null } }),
  tf.layers.conv2dTranspose({ filters: 6, kernelSize: 3, strides: 2, padding: 'same', activation: 'relu', name: 'tconv' }), x);
  const cr = lay('Cropping2D', 'crop', { cropping: [[1, 2], [0, 1]], data_format: 'channels_last' },
    tf.layers.cropping2D({ cropping: [[1, 2], [0, 1]], name: 'crop' }), tr);          // (21,23,6)
  const ga = gap('gap_a', cr);
  // b) SeparableConv2D(8, 3, depth_multiplier 2, dilation 2, same)
  const sep = lay('SeparableConv2D', 'sep', {
    filters: 8, kernel_size: [3, 3], strides: [1, 1], padding: 'same', data_format: 'channels_last',
    dilation_rate: [2, 2], depth_multiplier: 2, activation: 'tanh', use_bias: true,
    depthwise_initializer: GU(), pointwise_initializer: GU(), bias_initializer: ZE(),
    depthwise_regularizer: null, pointwise_regularizer: null, bias_regularizer: null,
    activity_regularizer: null, depthwise_constraint: null, pointwise_constraint: null,
    bias_constraint: null,
  }, tf.layers.separableConv2d({ filters: 8, kernelSize: 3, padding: 'same', dilationRate: 2,
    depthMultiplier: 2, activation: 'tanh', name: 'sep' }), x);
  const gb = gap('gap_b', sep);
  // c) DepthwiseConv2D(3, depth_multiplier 2, dilation 2, valid) -> (8,8,8)
  const dw = lay('DepthwiseConv2D', 'dw2', {
    kernel_size: [3, 3], strides: [1, 1], padding: 'valid', data_format: 'channels_last',
    dilation_rate: [2, 2], depth_multiplier: 2, activation: 'linear', use_bias: true,
    depthwise_initializer: GU(), bias_initializer: ZE(), depthwise_regularizer: null,
    bias_regularizer: null, activity_regularizer: null, depthwise_constraint: null,
    bias_constraint: null,
  }, dilatedDepthwise(tf.layers.depthwiseConv2d({ kernelSize: 3, dilationRate: 2, depthMultiplier: 2,
    name: 'dw2' })), x);
  const gc = gap('gap_c', dw);
  // d) Conv2D(5, 3, dilation 2, same)
  const dil = lay('Conv2D', 'dil', convCfg(2, { filters: 5, kernel_size: [3, 3], padding: 'same',
    dilation_rate: [2, 2] }),
  tf.layers.conv2d({ filters: 5, kernelSize: 3, padding: 'same', dilationRate: 2, name: 'dil' }), x);
  const gd = gap('gap_d', dil);
  // e) channels_first: Permute((3,1,2)) -> Conv2D(6, 3, strides 2, same, channels_first) -> GAP
  const pe = lay('Permute', 'to_cf', { dims: [3, 1, 2] }, tf.layers.permute({ dims: [3, 1, 2], name: 'to_cf' }), x);
  const cf = lay('Conv2D', 'cf', convCfg(2, { filters: 6, kernel_size: [3, 3], strides: [2, 2],
    padding: 'same', data_format: 'channels_first' }),
  tf.layers.conv2d({ filters: 6, kernelSize: 3, strides: 2, padding: 'same', dataFormat: 'channelsFirst', name: 'cf' }), pe);
  const ge = gap('gap_e', cf, 'channels_first');
  // f) UpSampling2D(2, bilinear) (Keras 3: half-pixel centres) -> Conv2D(3, 1)
  const up = b.layer('UpSampling2D', 'up', { size: [2, 2], data_format: 'channels_last', interpolation: 'bilinear' },
    new KUpBilinear({ size: [2, 2], name: 'up' }), x);
  const pw = lay('Conv2D', 'pw', convCfg(2, { filters: 3, kernel_size: [1, 1] }),
    tf.layers.conv2d({ filters: 3, kernelSize: 1, name: 'pw' }), up);
  const cp = lay('Cropping2D', 'crop_up', { cropping: [[3, 17], [1, 0]], data_format: 'channels_last' },
    tf.layers.cropping2D({ cropping: [[3, 17], [1, 0]], name: 'crop_up' }), pw);     // (4,23,3)
  const gf = gap('gap_f', cp);
  // g) Conv1D(4, 3, causal, dilation 2) -> Conv1D(5, 3, strides 2, valid) -> GAP1D
  const c1 = lay('Conv1D', 'causal', convCfg(1, { filters: 4, kernel_size: [3], padding: 'causal',
    dilation_rate: [2], activation: 'relu' }),
  (() => {
    const pad = new KCausalPad({ left: 4, name: 'causal_pad' });
    const conv = tf.layers.conv1d({ filters: 4, kernelSize: 3, padding: 'valid', dilationRate: 2,
      activation: 'relu', name: 'causal' });
    return { apply: t => conv.apply(pad.apply(t)) };
  })(), s);
  const c2 = lay('Conv1D', 'strided', convCfg(1, { filters: 5, kernel_size: [3], strides: [2] }),
    tf.layers.conv1d({ filters: 5, kernelSize: 3, strides: 2, name: 'strided' }), c1);  // (9,5)
  const gg = lay('GlobalAveragePooling1D', 'gap_g', { data_format: 'channels_last', keepdims: false },
    tf.layers.globalAveragePooling1d({ name: 'gap_g' }), c2);
  const cat = lay('Concatenate', 'cat', { axis: -1 }, tf.layers.concatenate({ axis: -1, name: 'cat' }),
    [ga, gb, gc, gd, ge, gf, gg]);
  const model = tf.model({ inputs: b.inputs, outputs: cat.sym, name: 'conv_zoo' });
  return { b, model, outputs: [cat] };
}

// Kernels uniform in +-sqrt(6 / (fan_in + fan_out)) (fan_out = last dim),
// biases in [-0.2, 0.2].
function seedWeights(model, b) {
  const list = [];
  for (const layer of model.layers) {
    if (!layer.weights.length) continue;
    const vals = layer.weights.map(w => {
      const shape = w.shape.slice(), n = shape.reduce((p, q) => p * q, 1);
      const wname = w.originalName.slice(layer.name.length + 1);
      let data;
      if (wname === 'bias') data = L.uniformArray(b.rng, n, -0.2, 0.2);
      else {
        const fo = shape[shape.length - 1], fi = n / fo, lim = Math.sqrt(6 / (fi + fo));
        data = L.uniformArray(b.rng, n, -lim, lim);
      }
      const k3 = b.depthwise.has(layer.name) && wname === 'depthwise_kernel' ? 'kernel' : wname;
      list.push({ name: `${layer.name}/${k3}`, shape, data, dtype: 'F32' });
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
  const { b, model, outputs } = build();
  const weights = seedWeights(model, b);
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
  console.log(`conv_zoo: outputs ${JSON.stringify(y.shape)}`);
}

main().catch(e => { console.error(e); process.exit(1); });
