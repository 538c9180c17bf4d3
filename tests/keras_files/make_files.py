#!/usr/bin/env python3
"""Writes the Keras files of tests/keras_files/data with real Keras 3.

    KERAS_BACKEND=jax python3 tests/keras_files/make_files.py

For every example of examples/ (model.json + weights.safetensors, the
weights kdc's JSON + safetensors path binds), Keras itself builds the
model, takes those weights and writes:

  <ex>/model.keras        model.save() of the uncompiled model
  <ex>/model.weights.h5   model.save_weights()
  <ex>/legacy.h5          Keras' legacy HDF5 saver (tf.keras 2 layout:
                          model_config attribute, model_weights group)
  <ex>/legacy_weights.h5  the legacy weights-only layout (layer_names at the
                          root), for the examples in LEGACY_WEIGHTS

and, for the small single-output examples in COMPILED, <ex>/compiled.keras:
the model compiled with COMPILED's optimizer and loss and fitted for two
steps on fixed random data (so the archive holds optimizer variables).

Skipped: mnist_mlp (the same MLP as mlp_sequential; its 600 KB of weights
would be written four times more).  conv_zoo and layer_zoo2 were written by
Keras 3.16; Keras 3.15.1 refuses two of their keys (Conv2DTranspose
"groups": 1, RandomRotation "value_range"), which are dropped here: both
are no-ops at inference.
"""
import json
import os
import struct
import sys

os.environ.setdefault("KERAS_BACKEND", "jax")
import numpy as np  # noqa: E402
import keras  # noqa: E402
from keras.src.legacy.saving import legacy_h5_format  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "tests", "keras_files", "data")
SKIP = {"mnist_mlp"}
LEGACY_WEIGHTS = {"merge_reshape", "seq2seq"}
COMPILED = {
    "lstm_text": ("adam", "categorical_crossentropy"),
    "small_cnn": (lambda: keras.optimizers.SGD(learning_rate=0.05, momentum=0.9),
                  "categorical_crossentropy"),
    "gru_rnn": (lambda: keras.optimizers.RMSprop(learning_rate=0.01), "mse"),
    "norm_zoo": (lambda: keras.optimizers.AdamW(learning_rate=0.01), "mse"),
}


def load_safetensors(path):
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    head = json.loads(b[8:8 + n])
    dt = {"F32": "<f4", "I64": "<i8", "I32": "<i4", "F64": "<f8"}
    out = {}
    for k, v in head.items():
        if k == "__metadata__":
            continue
        s, e = v["data_offsets"]
        out[k] = np.frombuffer(b[8 + n + s:8 + n + e], dtype=dt[v["dtype"]]).reshape(v["shape"])
    return out


def drop_keys(o):
    if isinstance(o, dict):
        if o.get("class_name") == "Conv2DTranspose":
            o["config"].pop("groups", None)
        if o.get("class_name") == "RandomRotation":
            o["config"].pop("value_range", None)
        for v in o.values():
            drop_keys(v)
    elif isinstance(o, list):
        for v in o:
            drop_keys(v)


def build(ex):
    cfg = json.load(open(os.path.join(ROOT, "examples", ex, "model.json")))
    drop_keys(cfg)
    m = keras.models.model_from_json(json.dumps(cfg))
    w = load_safetensors(os.path.join(ROOT, "examples", ex, "weights.safetensors"))
    for v in m.weights:
        keys = [k for k in w if k == v.path or k.endswith("/" + v.path)]
        assert len(keys) == 1, (ex, v.path, keys)
        v.assign(w[keys[0]])
    return m


def fit_data(m, seed=0):
    """8 rows of inputs (ints 0..4 for integer inputs) and softmax-like labels per output."""
    rng = np.random.default_rng(seed)
    xs = []
    for t in m.inputs:
        shape = (8,) + tuple(t.shape[1:])
        if "int" in str(t.dtype):
            xs.append(rng.integers(0, 5, size=shape).astype("int32"))
        else:
            xs.append(rng.random(shape, dtype=np.float32))
    ys = []
    for t in m.outputs:
        y = rng.random((8,) + tuple(t.shape[1:]), dtype=np.float32)
        ys.append(y / y.sum(axis=-1, keepdims=True))
    return xs, ys


def nested():
    """Nested Sequential and Functional models, TimeDistributed, LSTM and
    SpectralNormalization: the object paths of sublayers (data/nested, with
    Keras' own predictions)."""
    inner = keras.Sequential([keras.Input((6,)), keras.layers.Dense(5, name="a"),
                              keras.layers.Dense(4, name="b")], name="inner")
    fin = keras.Input((3, 6))
    x = keras.layers.TimeDistributed(keras.layers.Dense(6, name="tdd"), name="td")(fin)
    x = keras.layers.LSTM(6, name="l")(x)
    x = inner(x)
    x = keras.layers.SpectralNormalization(keras.layers.Dense(3, name="snd"), name="sn")(x)
    sub_in = keras.Input((3,))
    sub = keras.Model(sub_in, keras.layers.Dense(2, name="c")(sub_in), name="subf")
    m = keras.Model(fin, sub(x), name="nest")
    rng = np.random.default_rng(0)
    for v in m.weights:
        v.assign(rng.random(v.shape).astype(v.dtype) - 0.5)
    d = os.path.join(OUT, "nested")
    os.makedirs(d, exist_ok=True)
    m.save(os.path.join(d, "model.keras"))
    m.save_weights(os.path.join(d, "model.weights.h5"))
    x = np.random.default_rng(1).random((4, 3, 6), dtype=np.float32)
    np.save(os.path.join(d, "input.npy"), x)
    np.save(os.path.join(d, "expected.npy"), m.predict(x, verbose=0))


def main():
    nested()
    exs = sys.argv[1:] or sorted(os.listdir(os.path.join(ROOT, "examples")))
    for ex in exs:
        if ex in SKIP:
            continue
        d = os.path.join(OUT, ex)
        os.makedirs(d, exist_ok=True)
        m = build(ex)
        m.save(os.path.join(d, "model.keras"))
        m.save_weights(os.path.join(d, "model.weights.h5"))
        try:
            legacy_h5_format.save_model_to_hdf5(m, os.path.join(d, "legacy.h5"),
                                                include_optimizer=False)
        except Exception as e:  # Keras' legacy saver cannot write every model
            print(ex, "no legacy.h5:", type(e).__name__, str(e)[:200])
        if ex in LEGACY_WEIGHTS:  # the root layout of tf.keras 2's save_weights("w.h5")
            import h5py
            with h5py.File(os.path.join(d, "legacy_weights.h5"), "w") as f:
                legacy_h5_format.save_weights_to_hdf5_group(f, m)
        if ex in COMPILED:
            opt, loss = COMPILED[ex]
            m.compile(optimizer=opt() if callable(opt) else opt, loss=loss)
            xs, ys = fit_data(m)
            m.fit(xs, ys, batch_size=4, epochs=1, shuffle=False, verbose=0)
            m.save(os.path.join(d, "compiled.keras"))
        print(ex, "written")


if __name__ == "__main__":
    main()
