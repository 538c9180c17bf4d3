"""Keras operations recorded as Functional nodes (frontend/lower_ops.c)
against real Keras 3.

A Functional model applies keras.ops functions to its inputs (float, int32
and bool tensors, Python numbers, broadcasting), Keras saves it as a
.keras archive, kdc compiles and runs it, and every output must equal
Keras' predict: the same dtype and shape, ints and bools exactly, floats
within rtol 1e-5 / atol 1e-6 (kdc's own exp/log/erf are within a few ulp
of XLA's).  Ops kdc does not lower, and ops on the batch dimension, are
one located line naming the op.

    KDC_BIN=build/tools/kdc python3 -m pytest tests/keras_files/test_keras_ops.py -q
"""
import os

import numpy as np
import pytest

os.environ.setdefault("KERAS_BACKEND", "jax")

from test_keras_files import kdc  # noqa: E402

B = 4


def inputs():
    import keras
    return (keras.Input((3, 4), name="x"), keras.Input((3, 4), name="y"),
            keras.Input((3, 4), dtype="int32", name="i"), keras.Input((3, 4), dtype="bool", name="m"))


def data():
    r = np.random.default_rng(7)
    x = (r.random((B, 3, 4), dtype=np.float32) * 4 - 2).astype(np.float32)
    x[0, 0, :] = [0.5, -0.5, 1.5, 0.0]  # round half to even, sign of 0
    y = (r.random((B, 3, 4), dtype=np.float32) * 1.5 + 0.5).astype(np.float32)
    i = r.integers(-3, 4, size=(B, 3, 4)).astype(np.int32)
    m = r.random((B, 3, 4)) < 0.5
    return [x, y, i, m]


def ops_list(x, y, i, m):
    from keras import ops
    by = ops.expand_dims(ops.sum(y, axis=1), 1)  # (B, 1, 4): broadcasting
    return [
        # elementwise unary
        ops.abs(x), ops.absolute(i), ops.negative(x), ops.sign(x), ops.square(i), ops.square(x),
        ops.round(x * 3), ops.sqrt(y), ops.exp(x), ops.log(y), ops.log1p(y), ops.expm1(x),
        ops.tanh(x), ops.floor(x), ops.ceil(i), ops.reciprocal(y), ops.rsqrt(y), ops.erf(x),
        ops.sigmoid(x), ops.logical_not(m), ops.sqrt(i),
        # keras.ops.nn activations
        ops.relu(x), ops.relu6(x * 4), ops.silu(x), ops.softplus(x), ops.softsign(x),
        ops.log_sigmoid(x), ops.selu(x), ops.hard_sigmoid(x), ops.hard_silu(x),
        ops.tanh_shrink(x), ops.hard_tanh(x), ops.sparse_plus(x), ops.sparse_sigmoid(x),
        ops.elu(x, alpha=0.5), ops.leaky_relu(x, negative_slope=0.1), ops.gelu(x),
        ops.gelu(x, approximate=False), ops.celu(x), ops.soft_shrink(x), ops.hard_shrink(x),
        ops.squareplus(x), ops.softmax(x, axis=-1), ops.log_softmax(x, axis=1),
        # binary, with numbers and broadcasting
        ops.add(x, y), ops.add(i, 2), ops.add(i, 1.5), ops.subtract(x, 1), ops.multiply(x, by),
        ops.maximum(x, 0.5), ops.minimum(i, x), ops.power(y, 2.0), ops.divide(i, 2),
        ops.true_divide(x, y), ops.add(m, 1), ops.multiply(i, by),
        ops.logical_and(m, ops.greater(x, 0)), ops.logical_or(m, i), ops.logical_xor(m, x),
        ops.equal(i, 1), ops.not_equal(x, y), ops.less(i, x), ops.less_equal(x, 0.0),
        ops.greater(i, 0), ops.greater_equal(x, by),
        ops.where(m, x, y), ops.where(m, i, 0), ops.where(ops.greater(x, 0), x, 0.0),
        ops.clip(x, -0.5, 0.5), ops.clip(i, -1, 2), ops.cast(x, "int32"), ops.cast(i, "float32"),
        ops.cast(x, "bool"), ops.cast(m, "float32"),
        ops.cast(ops.cast(ops.multiply(x, 1000.0), "bfloat16"), "float32"),
        ops.cast(ops.cast(ops.multiply(x, 1000.0), "float16"), "float32"),
        # reductions over non-batch axes
        ops.sum(x, axis=1), ops.sum(m, axis=-1), ops.sum(i, axis=(1, 2)),
        ops.mean(x, axis=(1, 2)), ops.mean(i, axis=1, keepdims=True), ops.max(x, axis=2),
        ops.amax(i, axis=1), ops.min(x, axis=1, keepdims=True), ops.amin(y, axis=-1),
        ops.prod(y, axis=-1), ops.any(m, axis=-1), ops.all(m, axis=1), ops.any(x, axis=1),
        # shapes that keep the batch
        ops.expand_dims(x, -1), ops.expand_dims(x, 1), ops.squeeze(ops.expand_dims(x, 2), axis=2),
        ops.reshape(x, (-1, 12)), ops.reshape(x, (-1, 4, 3)), ops.transpose(x, (0, 2, 1)),
        ops.swapaxes(x, 1, 2), ops.concatenate([x, y], axis=1),
        ops.concatenate([x, i], axis=-1), ops.stack([x, y], axis=1),
        # indexing, products, arg-reductions, moments, one-hot
        x[:, 0], x[:, 1:3, ::2], x[..., -1], x[:, None, 2], x[:, -2:], i[..., 1:],
        ops.take(x, 1, axis=1), ops.take(i, -1, axis=2),
        ops.matmul(x, ops.transpose(y, (0, 2, 1))), ops.argmax(x, axis=-1),
        ops.argmin(i, axis=1, keepdims=True), ops.argmax(i, axis=2), ops.argmin(x, axis=1),
        ops.var(x, axis=1), ops.std(x, axis=(1, 2)), ops.var(i, axis=-1),
        ops.logsumexp(x, axis=-1), ops.logsumexp(x * 30, axis=1, keepdims=True),
        ops.one_hot(i, 4), ops.one_hot(ops.add(i, 3), 7, dtype="int32"),
        ops.flip(x, axis=1), ops.flip(i, axis=(1, 2)), ops.repeat(x, 2, axis=2),
        ops.repeat(i, 3, axis=1), ops.tile(x, (1, 2, 3)), ops.tile(i, (2, 1)), ops.cumsum(x, axis=-1),
        ops.cumsum(y, axis=1),
        ops.einsum("bij,bkj->bik", x, y), ops.einsum("bij,bij->bj", x, y),
        ops.einsum("bij,bjk->bik", ops.transpose(x, (0, 2, 1)), y),
        ops.einsum("...ij,...kj->...ki", x, y),
    ]


@pytest.mark.parametrize("part", [0, 1, 2])
def test_ops_against_keras(part, tmp_path):
    """A third of ops_list per model (kdc run takes at most 64 --output)."""
    import keras
    ins = inputs()
    outs = ops_list(*ins)
    third = (len(outs) + 2) // 3
    assert third <= 64
    outs = outs[part * third:(part + 1) * third]
    model = keras.Model(list(ins), outs)
    model.save(tmp_path / "ops.keras")
    xs = data()
    want = model.predict(xs, batch_size=B, verbose=0)
    kdc("compile", tmp_path / "ops.keras", "--batch", B, "-o", tmp_path / "ops.plan")
    args = []
    for k, x in enumerate(xs):
        np.save(tmp_path / f"in{k}.npy", x)
        args += ["--input", tmp_path / f"in{k}.npy"]
    for k in range(len(outs)):
        args += ["--output", tmp_path / f"out{k}.npy"]
    kdc("run", tmp_path / "ops.plan", *args)
    bad = []
    for k, w in enumerate(want):
        got = np.load(tmp_path / f"out{k}.npy")
        name = model.outputs[k].name
        w = np.asarray(w)
        if got.dtype != w.dtype or got.shape != w.shape:
            bad.append(f"{name}: kdc {got.dtype}{got.shape}, Keras {w.dtype}{w.shape}")
        elif w.dtype.kind == "f" and not np.allclose(got, w, rtol=1e-5, atol=1e-6, equal_nan=True):
            bad.append(f"{name}: max diff {np.nanmax(np.abs(got - w))}")
        elif w.dtype.kind != "f" and not np.array_equal(got, w):
            bad.append(f"{name}: differs")
    assert not bad, bad


@pytest.mark.parametrize("what,fn,expect", [
    ("cumprod", lambda x: __import__("keras").ops.cumprod(x, axis=-1), "Cumprod"),
    ("einsum_batch", lambda x: __import__("keras").ops.einsum("bij,bkj->ikb", x, x),
     "does not keep"),
    ("sum_all", lambda x: __import__("keras").ops.sum(x), "axis null reduces the batch"),
    ("concat0", lambda x: __import__("keras").ops.concatenate([x, x], axis=0), "axis 0"),
    ("transpose", lambda x: __import__("keras").ops.transpose(x), "moves the batch"),
    ("row", lambda x: x[0], "integer index takes one row of the batch"),
    ("tensor_index", lambda x: __import__("keras").ops.take(x, __import__("keras").ops.cast(
        x[:, 0, :2], "int32"), axis=2), "Take: expected the arguments (x, index) with a constant"),
])
def test_ops_refused(what, fn, expect, tmp_path):
    import keras
    x = keras.Input((3, 4), name="x")
    keras.Model(x, fn(x)).save(tmp_path / f"{what}.keras")
    r = kdc("compile", tmp_path / f"{what}.keras", "-o", tmp_path / "p.plan", check=False)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1 and expect in lines[0], r.stderr
    assert "config.json: config.layers[" in lines[0] and not (tmp_path / "p.plan").exists()


def test_ops_train_like_keras(tmp_path):
    """Gradients through op nodes: a compiled archive (Dense -> where, clip,
    abs, square, sqrt, concatenate, matmul, logsumexp, var, std, softmax,
    slicing, mean, max, take, reshape -> Dense, SGD, MSE) trained 2 steps by
    kdc gives Keras' loss and weights, on one device and on a 2x2 mesh."""
    import json
    import keras
    from keras import ops
    keras.utils.set_random_seed(1)
    x = keras.Input((3, 4), name="x")
    h = keras.layers.Dense(4, name="d1")(x)
    a = ops.where(ops.greater(h, 0), h, ops.multiply(h, 0.1))
    b = ops.clip(h, -0.5, 0.5)
    c = ops.concatenate([ops.abs(a), ops.square(b), ops.sqrt(ops.add(ops.square(h), 1.0))],
                        axis=-1)
    e = ops.logsumexp(ops.matmul(c, ops.transpose(c, (0, 2, 1))), axis=-1)
    g = ops.mean(ops.softmax(c[:, 1:, ::2], axis=-1), axis=1)
    o = ops.concatenate([e, ops.var(h, axis=1), g, ops.max(h, axis=1), ops.take(h, 0, axis=1),
                         ops.std(h, axis=-1), ops.reshape(ops.expand_dims(h, -1), (-1, 12))], -1)
    m = keras.Model(x, keras.layers.Dense(2, name="d2")(o))
    m.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse")
    m.save(tmp_path / "m.keras")
    r = np.random.default_rng(0)
    X = r.random((8, 3, 4), dtype=np.float32) * 2 - 1
    Y = r.random((8, 2), dtype=np.float32)
    np.save(tmp_path / "X.npy", X)
    np.save(tmp_path / "Y.npy", Y)
    want = m.fit(X, Y, batch_size=4, epochs=1, shuffle=False, verbose=0).history["loss"]
    kdc("compile", tmp_path / "m.keras", "--batch", 4, "-o", tmp_path / "m.plan")
    kdc("run", tmp_path / "m.plan", "--fit", "--x", tmp_path / "X.npy", "--y", tmp_path / "Y.npy",
        "--batch-size", 4, "--epochs", 1, "--quiet", "--history", tmp_path / "h.json",
        "--save-weights", tmp_path / "w.weights.h5")
    np.testing.assert_allclose(json.load(open(tmp_path / "h.json"))["loss"], want, rtol=1e-5)
    m2 = keras.saving.load_model(tmp_path / "m.keras")
    m2.load_weights(tmp_path / "w.weights.h5")
    for a, b in zip(m.weights, m2.weights):
        np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=1e-4, atol=1e-5,
                                   err_msg=a.path)
    m0 = keras.saving.load_model(tmp_path / "m.keras")  # training moved the weights
    assert not np.allclose(np.asarray(m0.weights[0]), np.asarray(m2.weights[0]))
    # the same on a 2x2 mesh (DataParallel: the ops split with the batch)
    kdc("compile", tmp_path / "m.keras", "--batch", 4, "--mesh", "2x2", "-o", tmp_path / "p.plan")
    kdc("run", tmp_path / "p.plan", "--fit", "--x", tmp_path / "X.npy", "--y", tmp_path / "Y.npy",
        "--batch-size", 4, "--epochs", 1, "--quiet", "--history", tmp_path / "p.json")
    np.testing.assert_allclose(json.load(open(tmp_path / "p.json"))["batch_loss"],
                               json.load(open(tmp_path / "h.json"))["batch_loss"], rtol=1e-5)
