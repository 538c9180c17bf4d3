// node count_params.js FILE... : the parameter counts of Keras model files by
// TensorFlow.js (tf.models.modelFromJSON), independent of kdc: total,
// trainable, and for a TF.js model.json the sum of its weightsManifest shapes.
// Keras 3 topologies are first rewritten to the tf.keras 2 form tfjs reads
// (nested-list inbound nodes, batch_input_shape, dtype strings). Used for the
// expected counts of tests/frontend/data/real2/SOURCES.md.
const tf = require('@tensorflow/tfjs');
const fs = require('fs');
function k3tensor(t) { return t && t.class_name === '__keras_tensor__'; }
function k3refs(v, out) {
  if (k3tensor(v)) { out.push(v.config.keras_history); return; }
  if (Array.isArray(v)) v.forEach(x => k3refs(x, out));
}
function conv(o) {
  if (Array.isArray(o)) return o.map(conv);
  if (o && typeof o === 'object') {
    if (o.class_name === 'DTypePolicy' || o.class_name === 'FloatDTypePolicy') return o.config.name;
    if (o.class_name === '__tuple__') return o.items.map(conv);
    const r = {};
    for (const [k, v] of Object.entries(o)) {
      if (k === 'module' || k === 'registered_name' || k === 'build_config' || k === 'compile_config' || k === 'shared_object_id') continue;
      if (k === 'batch_shape') { r.batch_input_shape = v; continue; }
      // the count does not depend on initial values: zeros build fast
      if (k.endsWith('_initializer') || k === 'initializer') { r[k] = {class_name: 'Zeros', config: {}}; continue; }
      if (k === 'inbound_nodes' && Array.isArray(v) && v.length && !Array.isArray(v[0])) {
        r.inbound_nodes = v.map(nd => { const refs = []; k3refs(nd.args, refs);
          return refs.map(h => [h[0], h[1], h[2], {}]); });
        continue;
      }
      r[k] = conv(v);
    }
    return r;
  }
  return o;
}
(async () => {
  for (const f of process.argv.slice(2)) {
    try {
      let j = JSON.parse(fs.readFileSync(f, 'utf8'));
      let manifest = null;
      if (j.modelTopology) { manifest = j.weightsManifest; j = j.modelTopology.model_config || j.modelTopology; }
      const m = await tf.models.modelFromJSON({modelTopology: conv(j)});
      let mani = '';
      if (manifest) { let s = 0; for (const g of manifest) for (const w of g.weights) s += w.shape.reduce((a, b) => a * b, 1); mani = ' manifest=' + s; }
      const tr = m.trainableWeights.reduce((a, w) => a + w.shape.reduce((x, y) => x * y, 1), 0);
      console.log(f, 'tfjs=' + m.countParams(), 'trainable=' + tr + mani);
    } catch (e) { console.log(f, 'ERR', String(e.message || e).slice(0, 200)); }
  }
})();
