"""keras.applications architectures (weights=None) and a ViT-style
transformer built from Keras layers: kdc's predictions on one device and on
a 2x4 mesh (DataParallel over 8 devices, and a Megatron-style layout for
the ViT) against Keras' predict, from the same weights.

Small inputs (32x32x3, batch 8) keep the time down; the heads are logits
(classifier_activation=None, 10 classes) so the comparison is not hidden
behind a near-uniform softmax.  Tolerance: |d| <= 1e-4 max|ref| + 1e-3 |ref|:
50-170 layers of float32 convolutions and batch normalisations, summed in
different orders (OpenBLAS / kdc's kernels vs XLA's), agree to rounding
that grows with depth, not to a fixed absolute bound.
"""
import os

import keras
import numpy as np
import pytest

import oracle

BATCH = 8
SHAPE = (32, 32, 3)

APPS = {
    "MobileNetV2": lambda: keras.applications.MobileNetV2(
        input_shape=SHAPE, weights=None, classes=10, classifier_activation=None),
    "ResNet50": lambda: keras.applications.ResNet50(
        input_shape=SHAPE, weights=None, classes=10, classifier_activation=None),
    "EfficientNetB0": lambda: keras.applications.EfficientNetB0(
        input_shape=SHAPE, weights=None, classes=10, classifier_activation=None),
    "DenseNet121": lambda: keras.applications.DenseNet121(
        input_shape=SHAPE, weights=None, classes=10, classifier_activation=None),
    "ConvNeXtTiny": lambda: keras.applications.ConvNeXtTiny(
        input_shape=SHAPE, weights=None, classes=10, classifier_activation=None),
}


def vit():
    """A small ViT: 4x4 patches by a strided Conv2D, learned position
    embeddings (an Embedding of a position-id input), two pre-norm
    transformer blocks (MultiHeadAttention, GELU MLP), pooled head."""
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


# Megatron-style tensor parallelism of the ViT on data x model.
VIT_LAYOUT = {"batch_dim_name": "data", "layout_map": {
    "mha./(query|key|value)/kernel": [None, "model", None],
    "mha./(query|key|value)/bias": ["model", None],
    "mha./attention_output/kernel": ["model", None, None],
    "mlp._1/kernel": [None, "model"], "mlp._1/bias": ["model"],
    "mlp._2/kernel": ["model", None]}}

APPS["ViT"] = vit


def close_to_scale(got, want, what):
    scale = float(np.max(np.abs(want)))
    oracle.assert_close(got, want, rtol=1e-3, atol=1e-4 * scale, what=what)


@pytest.mark.parametrize("name", list(APPS))
def test_application(work, name):
    keras.utils.set_random_seed(5)
    m = APPS[name]()
    mj, wp = oracle.export(m, work)
    rng = np.random.default_rng(5)
    xs = [rng.uniform(0, 255, size=(BATCH,) + SHAPE).astype(np.float32)]
    if name == "ViT":
        xs.append(np.tile(np.arange(64, dtype=np.int32), (BATCH, 1)))
        xs[0] /= 255.0
    ref = m.predict(xs if len(xs) > 1 else xs[0], batch_size=BATCH, verbose=0)
    for mesh in (None, (2, 4)):
        extra = []
        if mesh:
            extra = oracle.mesh_args(mesh, ["data", "model"], VIT_LAYOUT if name == "ViT" else None, work)
        tag = "m1" if mesh is None else "m2x4"
        plan = oracle.compile_plan(mj, wp, os.path.join(work, tag + ".plan"), BATCH, extra)
        (got,) = oracle.predict(plan, xs, work, tag=tag, n_out=1)
        close_to_scale(got, ref, "%s %s predict" % (name, tag))
