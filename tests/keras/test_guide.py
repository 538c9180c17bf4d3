"""The Keras distribution guide (keras-io guides/distribution.py): the MNIST
MLP under DataParallel and the guide's ModelParallel layout map, on meshes
2x1, 1x2, 2x2, 2x4, 4x2 and 1x8, kdc against Keras 3 on JAX.

Like with like: Keras' fit on JAX under a distribution runs one global SPMD
program per step -- the batch (16 rows) is the global batch, split over the
`data` axis, and the loss is the mean over all 16 rows (not a per-device
mean averaged afterwards) -- which is what `kdc compile --batch 16` builds.
Both start from the same weights (built once by Keras, exported by path),
see the same data in the same order (shuffle=False), and the guide's
optimizer (compile(loss="mse") = RMSprop with Keras' defaults).
"""
import json
import os

import jax
import keras
import numpy as np
import pytest

import oracle

MESHES = [(2, 1), (1, 2), (2, 2), (2, 4), (4, 2), (1, 8)]
BATCH, EPOCHS, ROWS = 16, 3, 128
# Guide's layout map (d1 has no bias: the rule matches nothing, as in the guide)
LAYOUT = {"d1/kernel": [None, "model"], "d1/bias": ["model"], "d2/output": ["data", None]}

# Tolerances (float32 on both sides; the sums are split and ordered
# differently by each partitioner, so results agree to rounding, not bits):
PRED_TOL = dict(rtol=1e-5, atol=1e-7)   # softmax outputs of one forward pass
LOSS_TOL = dict(rtol=2e-5, atol=1e-7)   # epoch means of 8 batch losses, 24 steps
WEIGHT_TOL = dict(rtol=1e-3, atol=2e-5)  # after 24 RMSprop steps: g/sqrt(v) amplifies
                                         # rounding where v is tiny


def guide_model(rate):
    inputs = keras.layers.Input(shape=(28, 28, 1))
    y = keras.layers.Flatten()(inputs)
    y = keras.layers.Dense(units=200, use_bias=False, activation="relu", name="d1")(y)
    y = keras.layers.Dropout(rate)(y)
    y = keras.layers.Dense(units=10, activation="softmax", name="d2")(y)
    return keras.Model(inputs=inputs, outputs=y)


def data():
    rng = np.random.default_rng(7)
    x = rng.normal(size=(ROWS, 28, 28, 1)).astype(np.float32)
    y = rng.normal(size=(ROWS, 10)).astype(np.float32)
    return x, y


def keras_distribution(kind, mesh):
    devices = jax.devices()[:int(np.prod(mesh))]
    if kind == "data":
        return keras.distribution.DataParallel(devices=devices)
    dm = keras.distribution.DeviceMesh(shape=mesh, axis_names=["data", "model"], devices=devices)
    lm = keras.distribution.LayoutMap(dm)
    for k, v in LAYOUT.items():
        lm[k] = tuple(v)
    return keras.distribution.ModelParallel(layout_map=lm, batch_dim_name="data")


def keras_run(kind, mesh, weights, x, y, rate=0.0, epochs=EPOCHS):
    """Keras on JAX under the distribution: predict from `weights`, then fit."""
    with keras_distribution(kind, mesh).scope():
        m = guide_model(rate)
        oracle.set_weights_by_path(m, weights)
        pred = m.predict(x[:32], batch_size=BATCH, verbose=0)
        m.compile(loss="mse")
        h = m.fit(x, y, batch_size=BATCH, epochs=epochs, shuffle=False, verbose=0)
        return pred, h.history, oracle.model_weights(m)


def kdc_plan(work, kind, mesh, model_json, weights):
    extra = ["--mesh", "x".join(map(str, mesh)), "--axes", "data,model",
             "--loss", "mse", "--optimizer", "rmsprop"]
    if kind == "model":
        p = os.path.join(work, "layout.json")
        with open(p, "w") as f:
            json.dump({"batch_dim_name": "data", "layout_map": LAYOUT}, f)
        extra += ["--layout", p]
    return oracle.compile_plan(model_json, weights, os.path.join(work, "guide.plan"), BATCH, extra)


@pytest.fixture(scope="module")
def start(tmp_path_factory):
    d = str(tmp_path_factory.mktemp("guide"))
    keras.utils.set_random_seed(1)
    m = guide_model(0.0)
    w = oracle.model_weights(m)
    mj, wp = oracle.export(m, d, w)
    return mj, wp, w


@pytest.mark.parametrize("mesh", MESHES, ids=lambda m: "x".join(map(str, m)))
@pytest.mark.parametrize("kind", ["data", "model"])
def test_guide_predict_fit(work, start, kind, mesh):
    mj, wp, w = start
    x, y = data()
    pred, hist, final = keras_run(kind, mesh, w, x, y)
    plan = kdc_plan(work, kind, mesh, mj, wp)
    (kp,) = oracle.predict(plan, [x[:32]], work, n_out=1)
    oracle.assert_close(kp, pred, what="predict", **PRED_TOL)
    kh, kw = oracle.fit(plan, [x], [y], work, EPOCHS, BATCH)
    oracle.assert_close(kh["loss"], hist["loss"], what="fit loss history", **LOSS_TOL)
    for path, v in final.items():
        oracle.assert_close(kw[path], v, what="final " + path, **WEIGHT_TOL)


def test_guide_dropout(work):
    """The guide's model as written (Dropout 0.4).  kdc's dropout masks come
    from its own counter-based stream, Keras' from JAX's: the curves cannot
    agree to rounding.  What must hold: kdc's run is the same on every mesh
    and layout (masks depend on the global row, not the device), and kdc's
    loss curve is one of the same distribution as Keras' (same start, same
    descent, within the spread that resampling masks gives)."""
    keras.utils.set_random_seed(2)
    m = guide_model(0.4)
    w = oracle.model_weights(m)
    mj, wp = oracle.export(m, work, w)
    x, y = data()
    runs = {}
    for kind, mesh in [("data", (1, 8)), ("model", (2, 4)), ("model", (4, 2))]:
        plan = kdc_plan(work, kind, mesh, mj, wp)
        runs[(kind, mesh)], _ = oracle.fit(plan, [x], [y], work, EPOCHS, BATCH, tag=kind + str(mesh))
    ref = runs[("data", (1, 8))]
    for k, h in runs.items():
        oracle.assert_close(h["batch_loss"], ref["batch_loss"], rtol=1e-5, atol=1e-7,
                            what="kdc dropout losses %s vs DataParallel 1x8" % (k,))
    _, kh, _ = keras_run("model", (2, 4), w, x, y, rate=0.4)
    # Same distribution: Keras' epoch losses against kdc's, within 5%.
    oracle.assert_close(ref["loss"], kh["loss"], rtol=0.05, atol=0,
                        what="kdc vs Keras loss curve with dropout 0.4")
