"""The architectures of test_applications.py, and how their references are
made (make_app_refs.py) or recomputed live (KDC_ORACLE_LIVE=1).

Building a keras.applications model costs 15-35 s of CPU in Keras on JAX
(every layer call traces its output spec), too slow for the suite's budget;
so the suite reads, per architecture, the Keras 3 `to_json()` of the model
(refs/apps/NAME.json.gz) and Keras' predictions (refs/apps/NAME.npz), both
written by make_app_refs.py with Keras 3.15.1 on JAX 0.10.2.  The weights
are not stored: they are drawn with NumPy from a manifest of the variables
(path, shape, dtype and the mean and spread of Keras' own initial values)
kept in the npz, by `draw_weights` (PCG64, a stable stream), and the npz
holds each drawn weight's sum so a changed draw fails loudly instead of
comparing against the wrong numbers.
"""
import json

import numpy as np

BATCH = 8
SHAPE = (32, 32, 3)
SEED = 5
NAMES = ["MobileNetV2", "ResNet50", "EfficientNetB0", "DenseNet121", "ConvNeXtTiny", "ViT"]


def build(name):
    import keras
    if name == "ViT":
        return vit()
    return getattr(keras.applications, name)(input_shape=SHAPE, weights=None, classes=10,
                                             classifier_activation=None)


def vit():
    """A small ViT: 4x4 patches by a strided Conv2D, learned position
    embeddings (an Embedding of a position-id input), two pre-norm
    transformer blocks (MultiHeadAttention, GELU MLP), pooled head."""
    import keras
    L = keras.layers
    img = keras.Input(shape=SHAPE, name="image")
    pos = keras.Input(shape=(64,), dtype="int32", name="positions")
    h = L.Conv2D(32, 4, strides=4, name="patch")(img)
    h = L.Reshape((64, 32), name="tokens")(h)
    h = L.Add(name="embed")([h, L.Embedding(64, 32, name="pos_emb")(pos)])
    for i in range(2):
        a = L.LayerNormalization(epsilon=1e-6, name="ln%da" % i)(h)
        a = L.MultiHeadAttention(num_heads=4, key_dim=8, name="mha%d" % i)(a, a)
        h = L.Add(name="res%da" % i)([h, a])
        f = L.LayerNormalization(epsilon=1e-6, name="ln%db" % i)(h)
        f = L.Dense(64, activation="gelu", name="mlp%d_1" % i)(f)
        f = L.Dense(32, name="mlp%d_2" % i)(f)
        h = L.Add(name="res%db" % i)([h, f])
    h = L.LayerNormalization(epsilon=1e-6, name="ln_final")(h)
    h = L.GlobalAveragePooling1D(name="pool")(h)
    return keras.Model([img, pos], L.Dense(10, name="head")(h), name="vit")


def inputs(name):
    rng = np.random.default_rng(SEED)
    x = rng.uniform(0, 255, size=(BATCH,) + SHAPE).astype(np.float32)
    if name == "ViT":
        return [x / np.float32(255), np.tile(np.arange(64, dtype=np.int32), (BATCH, 1))]
    return [x]


def manifest(model):
    out = []
    for v in model.weights:
        a = np.asarray(v.numpy())
        out.append({"path": v.path, "shape": list(a.shape), "dtype": str(a.dtype),
                    "mean": float(a.mean()) if a.size else 0.0,
                    "std": float(a.std()) if a.size else 0.0})
    return out


def draw_weights(man):
    """Weights like Keras' initial ones but not degenerate: a variable Keras
    starts random keeps its mean and spread; a constant one (BatchNorm's
    ones and zeros, LayerScale's 1e-6) is perturbed by up to 10% (values
    near 0 by up to 0.1), so every layer's arithmetic shows in the output
    and variances stay positive."""
    rng = np.random.default_rng(SEED + 1)
    w = {}
    for e in man:
        shape, mean, std = tuple(e["shape"]), e["mean"], e["std"]
        if not e["dtype"].startswith("float"):
            w[e["path"]] = np.full(shape, round(mean), dtype=e["dtype"])
        elif std > 0:
            w[e["path"]] = (mean + std * rng.standard_normal(shape)).astype(np.float32)
        elif abs(mean) < 1e-3:
            w[e["path"]] = (0.1 * rng.uniform(-1, 1, shape)).astype(np.float32)
        else:
            w[e["path"]] = (mean * (1 + 0.1 * rng.uniform(-1, 1, shape))).astype(np.float32)
    return w


def sums(w):
    return np.array([float(np.sum(v, dtype=np.float64)) for v in w.values()])


def make_case(name):
    """(model JSON text, manifest, inputs, Keras' predictions) from Keras."""
    import oracle
    m = build(name)
    man = manifest(m)
    w = draw_weights(man)
    oracle.set_weights_by_path(m, w)
    xs = inputs(name)
    ref = m.predict(xs if len(xs) > 1 else xs[0], batch_size=BATCH, verbose=0)
    return m.to_json(), man, xs, np.asarray(ref)


def dumps_manifest(man):
    return json.dumps(man)
