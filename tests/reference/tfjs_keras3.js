'use strict';
// tfjs extensions used by gen.js and check.js: Keras 3 activations and
// layers that tfjs 4.22 lacks or implements differently, plus one tfjs bug
// fix. Requiring this module registers them in tfjs' serialization map.

const tf = require('@tensorflow/tfjs');

// ====================================================================
// Keras 3 semantics that tfjs lacks or implements differently.
// Registered in tfjs' serialization map so tf.layers.* accept the names.

class KActivation extends tf.serialization.Serializable {
  getConfig() { return {}; }
}

// leaky_relu: Keras 3 default negative_slope 0.2 (tf.keras 2 "leaky_relu"
// resolved to tf.nn.leaky_relu, default alpha 0.2 as well).
class LeakyReluAct extends KActivation {
  apply(x) { return tf.tidy(() => tf.leakyRelu(x, 0.2)); }
}
LeakyReluAct.className = 'leaky_relu';

class ExponentialAct extends KActivation {
  apply(x) { return tf.tidy(() => tf.exp(x)); }
}
ExponentialAct.className = 'exponential';

class SiluAct extends KActivation {
  apply(x) { return tf.tidy(() => tf.mul(x, tf.sigmoid(x))); }
}
SiluAct.className = 'silu';

// Keras 3 hard_sigmoid = relu6(x + 3) / 6  (jax.nn.hard_sigmoid, TF backend
// tf.nn.relu6(x + 3) / 6). tfjs' and tf.keras 2's hard_sigmoid is
// clip(0.2 x + 0.5, 0, 1): NOT the same function.
class HardSigmoidK3Act extends KActivation {
  apply(x) { return tf.tidy(() => tf.div(tf.relu6(tf.add(x, 3)), 6)); }
}
HardSigmoidK3Act.className = 'hard_sigmoid';

// Exact GELU, x * 0.5 * (1 + erf(x / sqrt(2))), evaluated in float64 with an
// accurate erf and rounded once to float32. (tfjs' own 'gelu' is the same
// formula but its tf.erf is the Abramowitz-Stegun 7.1.26 approximation,
// abs. error up to 1.5e-7.)
function erf(z) {
  const a = Math.abs(z);
  let r;
  if (a < 3.5) {
    // Maclaurin series; terms < 1e-17 relative at the cut.
    let term = a, sum = a;
    const z2 = a * a;
    for (let n = 1; n < 200; n++) {
      term *= -z2 / n;
      const t = term / (2 * n + 1);
      sum += t;
      if (Math.abs(t) < 1e-17 * Math.abs(sum)) break;
    }
    r = (2 / Math.sqrt(Math.PI)) * sum;
  } else {
    // erfc continued fraction (Lentz), accurate for a >= 3.5
    // erfc(a) = exp(-a^2)/sqrt(pi) * 1/(a + (1/2)/(a + 1/(a + (3/2)/(a + 2/(a + ...)))))
    let f = a;
    for (let k = 60; k >= 1; k--) f = a + (k / 2) / f;
    r = 1 - Math.exp(-a * a) / Math.sqrt(Math.PI) / f;
  }
  return z < 0 ? -r : r;
}
function geluExact(x) { return 0.5 * x * (1 + erf(x / Math.SQRT2)); }

class GeluExactAct extends KActivation {
  apply(x) {
    const v = x.dataSync();
    const out = new Float32Array(v.length);
    for (let i = 0; i < v.length; i++) out[i] = geluExact(v[i]);
    return tf.tensor(out, x.shape, 'float32');
  }
}
GeluExactAct.className = 'gelu';

for (const c of [LeakyReluAct, ExponentialAct, SiluAct, HardSigmoidK3Act, GeluExactAct]) {
  tf.serialization.registerClass(c);
}

// Keras ReLU layer (max_value, negative_slope, threshold); tfjs' ReLU only
// has maxValue. Same function in tf.keras 2 (backend.relu) and Keras 3
// (activations.ReLU.static_call); ported line by line from the latter.
class KReLU extends tf.layers.Layer {
  constructor(args) {
    super(args);
    const g = (a, b, d) => (args[a] !== undefined ? args[a] : args[b] !== undefined ? args[b] : d);
    this.maxValue = g('max_value', 'maxValue', null);
    this.negativeSlope = g('negative_slope', 'negativeSlope', 0.0);
    this.threshold = g('threshold', 'threshold', 0.0);
  }
  computeOutputShape(s) { return s; }
  call(inputs) {
    return tf.tidy(() => {
      let x = Array.isArray(inputs) ? inputs[0] : inputs;
      const ns = this.negativeSlope, mv = this.maxValue, th = this.threshold;
      let negativePart = null;
      if (ns !== 0) {
        if (mv === null && th === 0) return tf.leakyRelu(x, ns);
        negativePart = th !== 0 ? tf.relu(tf.add(tf.neg(x), th)) : tf.relu(tf.neg(x));
      }
      let clipMax = mv !== null;
      if (th !== 0) x = tf.mul(x, tf.cast(tf.greater(x, th), 'float32'));
      else if (mv === 6) { x = tf.relu6(x); clipMax = false; }
      else x = tf.relu(x);
      if (clipMax) x = tf.clipByValue(x, 0, mv);
      if (ns !== 0) x = tf.sub(x, tf.mul(ns, negativePart));
      return x;
    });
  }
  getConfig() {
    return Object.assign({
      max_value: this.maxValue, negative_slope: this.negativeSlope, threshold: this.threshold,
    }, super.getConfig());
  }
}
KReLU.className = 'ReLU';
tf.serialization.registerClass(KReLU);

// tfjs bug: Reshape.computeOutputShape treats the (always unknown) batch
// dimension as "unknown input", so a -1 in target_shape stays unresolved
// (null) in symbolic shapes and a following Dense cannot be built. Keras 3
// resolves it from the non-batch dims; do the same (only the symbolic shape
// computation changes; call() already resolved -1 correctly).
{
  const ReshapeProto = Object.getPrototypeOf(tf.layers.reshape({ targetShape: [1] }));
  ReshapeProto.computeOutputShape = function (inputShape) {
    const rest = inputShape.slice(1);
    if (rest.some(d => d == null || d < 0)) return inputShape.slice(0, 1).concat(this.targetShape);
    return inputShape.slice(0, 1).concat(this.fixUnknownDimension(rest, this.targetShape));
  };
}

// Keras Subtract (tfjs has no Subtract layer).
class KSubtract extends tf.layers.Layer {
  computeOutputShape(s) { return s[0]; }
  call(inputs) { return tf.tidy(() => tf.sub(inputs[0], inputs[1])); }
}
KSubtract.className = 'Subtract';
tf.serialization.registerClass(KSubtract);

module.exports = { KReLU, KSubtract, LeakyReluAct, erf, geluExact };
