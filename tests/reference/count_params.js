// node count_params.js FILE... : the parameter counts of Keras model files by
// TensorFlow.js (tf.models.modelFromJSON), independent of kdc: total,
// trainable, and for a TF.js model.json the sum of its weightsManifest shapes.
// Keras 3 topologies are first rewritten to the tf.keras 2 form tfjs reads
// (keras2_topology.js: nested-list inbound nodes, batch_input_shape, dtype
// strings). Used for the
// expected counts of tests/frontend/data/real2/SOURCES.md.
const tf = require('@tensorflow/tfjs');
const fs = require('fs');
const { toKeras2 } = require('./keras2_topology');
require('./keras3_layers');  // GRUResetAfter, NotEqual, MultiHeadAttention, ...
(async () => {
  for (const f of process.argv.slice(2)) {
    try {
      let j = JSON.parse(fs.readFileSync(f, 'utf8'));
      let manifest = null;
      if (j.modelTopology) { manifest = j.weightsManifest; j = j.modelTopology.model_config || j.modelTopology; }
      const m = await tf.models.modelFromJSON({modelTopology: toKeras2(j, { zeroInit: true, resetAfterGRU: true })});
      let mani = '';
      if (manifest) { let s = 0; for (const g of manifest) for (const w of g.weights) s += w.shape.reduce((a, b) => a * b, 1); mani = ' manifest=' + s; }
      const tr = m.trainableWeights.reduce((a, w) => a + w.shape.reduce((x, y) => x * y, 1), 0);
      console.log(f, 'tfjs=' + m.countParams(), 'trainable=' + tr + mani);
    } catch (e) { console.log(f, 'ERR', String(e.message || e).slice(0, 200)); }
  }
})();
