'use strict';
// A Keras model file's topology in the tf.keras 2 form that tfjs 4.22's
// tf.models.modelFromJSON reads, independent of kdc. Used by
// count_params.js (parameter counts) and real_diff.js (predictions).
//
// readTopology(text) -> { topology, format, manifest }:
//   TF.js layers-model files: modelTopology.model_config, or modelTopology
//   itself; format 'tfjs'.
//   Keras 3 to_json (top-level `module`, or dict inbound nodes): format 'k3'.
//   tf.keras 2 to_json (`keras_version` 2.x): format 'tk2'.
// toKeras2(topology, opts) rewrites Keras 3 spellings:
//   DTypePolicy objects -> their name; __tuple__ -> list; batch_shape ->
//   batch_input_shape; module / registered_name / build_config /
//   compile_config / shared_object_id dropped; a flat input_layers /
//   output_layers triple -> a list of one; dict inbound nodes -> nested
//   lists [[layer, node, tensor, {}], ...], the call's tensor arguments
//   first, then the tensors of its keyword arguments but `mask` (tf.keras 2
//   appends an RNN's initial states to the inputs the same way; an explicit
//   mask kwarg is left to tfjs' own mask propagation, which gives the same
//   mask when it is the Embedding's ids != 0); a Keras 3 op node
//   (module keras.src.ops.*) keeps its non-tensor args in kwargs.op_args.
//   opts.zeroInit: every initializer becomes Zeros (builds fast; for counts
//   and for callers that set every weight themselves).
//   opts.resetAfterGRU: a GRU with reset_after=true becomes keras3_layers.js'
//   GRUResetAfter (tfjs' GRU refuses it), but inside Bidirectional /
//   TimeDistributed, which need tfjs' own RNN classes.
//   opts.keras3Activations: 'hard_sigmoid' -> 'hard_sigmoid_keras3'
//   (relu6(x + 3) / 6, Keras 3's meaning; tfjs' stock hardSigmoid is
//   tf.keras 2's clip(0.2 x + 0.5, 0, 1)).

function isK3Tensor(t) { return t && t.class_name === '__keras_tensor__'; }
function k3refs(v, out) {
  if (isK3Tensor(v)) { out.push(v.config.keras_history); return; }
  if (Array.isArray(v)) { v.forEach(x => k3refs(x, out)); return; }
  if (v && typeof v === 'object') {
    if (v.class_name === '__tuple__') { k3refs(v.items, out); return; }
    for (const x of Object.values(v)) k3refs(x, out);
  }
}

const ACT_KEYS = new Set(['activation', 'recurrent_activation']);

function toKeras2(o, opts = {}) {
  if (Array.isArray(o)) return o.map(x => toKeras2(x, opts));
  if (!o || typeof o !== 'object') return o;
  if (o.class_name === 'DTypePolicy' || o.class_name === 'FloatDTypePolicy') return o.config.name;
  if (o.class_name === '__tuple__') return o.items.map(x => toKeras2(x, opts));
  const r = {};
  if (opts.resetAfterGRU && o.class_name === 'GRU' && o.config && o.config.reset_after) {
    r.class_name = 'GRUResetAfter';
    o = Object.assign({}, o);
    delete o.class_name;
  }
  for (const [k, v] of Object.entries(o)) {
    if (k === 'module' || k === 'registered_name' || k === 'build_config' || k === 'compile_config' ||
        k === 'shared_object_id') continue;
    if (k === 'batch_shape') { r.batch_input_shape = v; continue; }
    // a single-tensor model may list its input/output as one flat triple
    if ((k === 'input_layers' || k === 'output_layers') && Array.isArray(v) && typeof v[0] === 'string') {
      r[k] = [v];
      continue;
    }
    if (opts.zeroInit && (k.endsWith('_initializer') || k === 'initializer')) {
      r[k] = { class_name: 'Zeros', config: {} };
      continue;
    }
    if (opts.keras3Activations && ACT_KEYS.has(k) && v === 'hard_sigmoid') {
      r[k] = 'hard_sigmoid_keras3';
      continue;
    }
    if (k === 'inbound_nodes' && Array.isArray(v) && v.length && !Array.isArray(v[0])) {
      const op = typeof o.module === 'string' && o.module.startsWith('keras.src.ops');
      r.inbound_nodes = v.map(nd => {
        const refs = [];
        k3refs(nd.args, refs);
        for (const [kk, kv] of Object.entries(nd.kwargs || {})) if (kk !== 'mask') k3refs(kv, refs);
        const kw = op ? { op_args: (nd.args || []).map(x => (isK3Tensor(x) ? null : x)) } : {};
        return refs.map(h => [h[0], h[1], h[2], kw]);
      });
      continue;
    }
    if (k === 'inbound_nodes' && Array.isArray(v)) {
      r.inbound_nodes = v.map(nd => (Array.isArray(nd) ? tk2TensorKwargs(nd) : nd));
      continue;
    }
    r[k] = k === 'layer' || k === 'backward_layer' ? toKeras2(v, Object.assign({}, opts, { resetAfterGRU: false }))
      : toKeras2(v, opts);
  }
  return r;
}

// tf.keras 2 writes tensors passed as keyword arguments as 3-lists in the
// entry's kwargs ({"value": ["x", 0, 0]}, MultiHeadAttention); tfjs reads
// only the entries themselves: append them as further inputs, in kwargs
// order (the order real_diff's layers and kdc take them), `mask` excepted.
function isRef(x) {
  return Array.isArray(x) && x.length === 3 && typeof x[0] === 'string' && Number.isInteger(x[1]);
}
function tk2TensorKwargs(node) {
  const out = [];
  const extra = [];
  for (const ent of node) {
    if (!Array.isArray(ent) || !ent[3] || typeof ent[3] !== 'object') { out.push(ent); continue; }
    const kw = {};
    for (const [kk, kv] of Object.entries(ent[3])) {
      // a tensor the node already reads is not repeated: tfjs' executor
      // counts consumers per input slot and would free it too early
      const dup = node.concat(extra).some(e => Array.isArray(e) && e[0] === kv[0] && e[1] === kv[1] && e[2] === kv[2]);
      if (kk !== 'mask' && isRef(kv) && !dup) extra.push([kv[0], kv[1], kv[2], {}]);
      else if (!isRef(kv)) kw[kk] = kv;
    }
    out.push([ent[0], ent[1], ent[2], kw]);
  }
  return out.concat(extra);
}

function readTopology(text) {
  const j = JSON.parse(text);
  if (j.modelTopology) {
    return { topology: j.modelTopology.model_config || j.modelTopology, format: 'tfjs',
      manifest: j.weightsManifest || null };
  }
  const s = JSON.stringify(j);
  const k3 = j.module !== undefined || /"__keras_tensor__"/.test(s) ||
    (j.keras_version && /^3\./.test(j.keras_version));
  return { topology: j, format: k3 ? 'k3' : 'tk2', manifest: null };
}

module.exports = { toKeras2, readTopology };
