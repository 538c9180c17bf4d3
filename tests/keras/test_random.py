"""Random models, meshes and layouts, kdc against Keras 3 on JAX.

A Python port of the idea of tests/reference/fuzz.js and fit_fuzz.js (the
TF.js generators) to real Keras: a seed draws a model (family mlp / seq /
img / text, two to seven layer steps among Dense, activations,
BatchNormalization, LayerNormalization, Conv1D/2D, DepthwiseConv2D,
SeparableConv2D, pooling, LSTM, GRU, Flatten, Reshape, Add / Concatenate
branches, Dropout at rate 0), its initial weights, data, a loss and an
optimizer, a mesh of rank 1 to 3 with 2 to 8 devices (axes of size 1
included, axis names other than data/model included), and a random
layout_map (any variable dim split over any mesh axis whose size divides
it, the batch axis too (FSDP-style), and `<layer>/output` rules).  Keras
runs predict and fit under keras.distribution.ModelParallel with that
layout map on the 8 virtual devices; kdc compiles the same model, weights,
mesh and layout.  Predictions, loss histories and final weights must agree.

Seeds: the suite runs SEEDS; `--oracle-seeds N` (or KDC_ORACLE_SEEDS=N)
runs N seeds from `--oracle-first-seed` (default 1000) instead.
"""
import json
import os
import random

import jax
import keras
import numpy as np
import pytest

import oracle

SEEDS = list(range(1, 9))
BATCH, ROWS, EPOCHS = 8, 32, 2
PRED_TOL = dict(rtol=1e-4, atol=1e-5)
LOSS_TOL = dict(rtol=1e-4, atol=1e-6)
WEIGHT_TOL = dict(rtol=1e-3, atol=1e-4)

MESHES = [(8,), (2,), (4,), (2, 4), (4, 2), (1, 8), (8, 1), (2, 2), (2, 2, 2), (1, 2, 4),
          (2, 1, 4), (4, 2, 1)]
OTHER_AXES = ["model", "x", "tp", "fsdp"]
ACTS = ["linear", "relu", "sigmoid", "tanh", "gelu", "silu", "elu", "softplus", "softsign",
        "relu6", "leaky_relu", "mish", "hard_sigmoid"]


def seeds(config):
    n = config.getoption("--oracle-seeds") or int(os.environ.get("KDC_ORACLE_SEEDS", "0") or 0)
    if not n:
        return SEEDS
    first = config.getoption("--oracle-first-seed") or 1000
    return list(range(first, first + n))


def pytest_generate_tests(metafunc):
    if "seed" in metafunc.fixturenames:
        metafunc.parametrize("seed", seeds(metafunc.config))


class Gen:
    """One random Keras model (Functional) from a seed."""

    def __init__(self, seed):
        self.r = random.Random(seed)
        self.n = 0

    def name(self, base):
        self.n += 1
        return "%s%d" % (base, self.n)

    def build(self):
        r, L = self.r, keras.layers
        family = r.choice(["mlp", "mlp", "seq", "seq", "img", "img", "text"])
        if family == "mlp":
            shape = (r.choice([4, 6, 8, 12, 16]),)
        elif family == "seq":
            shape = (r.randint(3, 8), r.choice([2, 4, 8]))
        elif family == "img":
            shape = (r.randint(5, 9), r.randint(5, 9), r.choice([1, 2, 4]))
        else:
            shape = (r.randint(4, 10),)
        self.family = family
        self.int_input = family == "text"
        inp = keras.Input(shape=shape, name="input_layer",
                          dtype="int32" if self.int_input else "float32")
        h = inp
        if family == "text":
            h = L.Embedding(30, r.choice([4, 8]), name=self.name("emb"))(h)
        pool = [h]
        for _ in range(r.randint(2, 7)):
            h = self.step(h, pool)
            pool.append(h)
        if len(h.shape) > 2:
            h = L.Flatten(name=self.name("flatten"))(h)
        self.cls = r.random() < 0.5
        out = L.Dense(r.choice([2, 3, 4, 8]), activation="softmax" if self.cls else r.choice(["linear", "tanh"]),
                      name=self.name("head"))(h)
        self.model = keras.Model(inp, out)
        return self.model

    def step(self, h, pool):
        r, L = self.r, keras.layers
        rank, last = len(h.shape), h.shape[-1]
        ops = ["dense", "dense", "act", "bn", "ln", "dropout"]
        if rank == 2:
            ops += ["reshape"]
        if rank == 3:
            ops += ["conv1d", "pool1d", "lstm", "gru", "gpool"]
        if rank == 4:
            ops += ["conv2d", "conv2d", "dwconv", "sepconv", "pool2d", "gpool"]
        if rank >= 3:
            ops += ["flatten"]
        same = [p for p in pool if p is not h and tuple(p.shape) == tuple(h.shape)]
        ops += ["add", "concat"]
        op = r.choice(ops)
        n = self.name(op)
        if op == "dense":
            return L.Dense(r.choice([4, 6, 8, 12, 16]), activation=r.choice(ACTS),
                           use_bias=r.random() < 0.8, name=n)(h)
        if op == "act":
            return L.Activation(r.choice(ACTS), name=n)(h)
        if op == "bn":
            return L.BatchNormalization(name=n, momentum=r.choice([0.9, 0.99]))(h)
        if op == "ln":
            return L.LayerNormalization(name=n)(h)
        if op == "dropout":
            return L.Dropout(0.0, name=n)(h)
        if op == "reshape":
            if last % 2 == 0:
                return L.Reshape((2, last // 2), name=n)(h)
            return L.Reshape((last, 1), name=n)(h)
        if op == "conv1d":
            k = r.randint(1, min(3, h.shape[1]))
            return L.Conv1D(r.choice([4, 8]), k, padding=r.choice(["same", "valid"]),
                            activation=r.choice(ACTS), name=n)(h)
        if op == "pool1d":
            if h.shape[1] < 2:
                return h
            return r.choice([L.MaxPooling1D, L.AveragePooling1D])(2, name=n)(h)
        if op in ("lstm", "gru"):
            cls = L.LSTM if op == "lstm" else L.GRU
            return cls(r.choice([4, 8]), return_sequences=r.random() < 0.5, name=n)(h)
        if op == "gpool":
            if rank == 3:
                return r.choice([L.GlobalAveragePooling1D, L.GlobalMaxPooling1D])(name=n)(h)
            return r.choice([L.GlobalAveragePooling2D, L.GlobalMaxPooling2D])(name=n)(h)
        if op == "conv2d":
            return L.Conv2D(r.choice([4, 8]), r.choice([1, 3]), strides=r.choice([1, 1, 2]),
                            padding=r.choice(["same", "valid"]) if min(h.shape[1:3]) >= 3 else "same",
                            activation=r.choice(ACTS), name=n)(h)
        if op == "dwconv":
            return L.DepthwiseConv2D(3, padding="same", depth_multiplier=r.choice([1, 2]), name=n)(h)
        if op == "sepconv":
            return L.SeparableConv2D(r.choice([4, 8]), 3, padding="same", name=n)(h)
        if op == "pool2d":
            if min(h.shape[1:3]) < 2:
                return h
            return r.choice([L.MaxPooling2D, L.AveragePooling2D])(2, name=n)(h)
        if op == "flatten":
            return L.Flatten(name=n)(h)
        if op == "add":
            other = r.choice(same) if same else L.Dense(last, name=self.name("branch"))(h)
            return L.Add(name=n)([h, other])
        if op == "concat":
            other = r.choice(same) if same else L.Dense(r.choice([2, 4]), name=self.name("branch"))(h)
            return L.Concatenate(name=n)([h, other])
        raise AssertionError(op)

    def data(self):
        r = np.random.default_rng(self.r.randint(0, 2**31))
        shape = (ROWS,) + tuple(self.model.inputs[0].shape[1:])
        if self.int_input:
            x = r.integers(0, 30, size=shape).astype(np.int32)
        else:
            x = r.uniform(-1, 1, size=shape).astype(np.float32)
        k = self.model.outputs[0].shape[-1]
        if self.cls:
            y = np.eye(k, dtype=np.float32)[r.integers(0, k, size=ROWS)]
        else:
            y = (0.5 * r.normal(size=(ROWS, k))).astype(np.float32)
        return x, y

    def distribution(self):
        r = self.r
        mesh = r.choice(MESHES)
        axes = ["data"] + r.sample(OTHER_AXES, len(mesh) - 1)
        sizes = dict(zip(axes, mesh))
        lm = {}
        for v in self.model.weights:
            if not v.trainable and r.random() < 0.5:
                continue
            if r.random() < 0.5 or len(v.shape) == 0:
                continue
            free = list(axes)
            rule = []
            # kdc splits a recurrent layer's gate-packed last dim per gate
            # (docs/sharding.md), so it needs the units, not the packed size,
            # divisible; Keras splits the packed dim as it is.  kdc refuses
            # the other splits with a located error (a known difference,
            # found by this generator: seed 1004), so they are not drawn.
            gates = 4 if "lstm_cell/" in v.path else 3 if "gru_cell/" in v.path else 1
            for i, dim in enumerate(v.shape):
                if i == len(v.shape) - 1:
                    dim //= gates
                cands = [a for a in free if dim % sizes[a] == 0 and sizes[a] > 1]
                if cands and r.random() < 0.6:
                    a = r.choice(cands)
                    free.remove(a)
                    rule.append(a)
                else:
                    rule.append(None)
            if any(rule):
                lm[v.path] = rule
        # an output rule on one layer: batch over data, the rest replicated
        # or one dim over another axis
        layers = [l for l in self.model.layers if not isinstance(l, keras.layers.InputLayer)]
        if r.random() < 0.4:
            l = r.choice(layers)
            shape = tuple(l.output.shape)
            rule = ["data"] + [None] * (len(shape) - 1)
            others = [a for a in axes[1:] if sizes[a] > 1]
            dims = [i for i in range(1, len(shape)) if others and shape[i] % sizes[others[0]] == 0]
            if dims and r.random() < 0.5:
                rule[r.choice(dims)] = others[0]
            if ROWS % sizes["data"] == 0:
                lm[l.name + "/output"] = rule
        return mesh, axes, lm

    def training(self):
        loss = "categorical_crossentropy" if self.cls else "mse"
        return loss, self.r.choice(["sgd", "adam", "rmsprop", "adamw"])


def keras_distribution(mesh, axes, lm):
    devices = jax.devices()[:int(np.prod(mesh))]
    dm = keras.distribution.DeviceMesh(shape=mesh, axis_names=axes, devices=devices)
    layout_map = keras.distribution.LayoutMap(dm)
    for k, v in lm.items():
        layout_map[k] = tuple(v)
    return keras.distribution.ModelParallel(layout_map=layout_map, batch_dim_name="data")


def check_seed(seed, work):
    g = Gen(seed)
    keras.utils.set_random_seed(seed)
    m = g.build()
    w = oracle.model_weights(m)
    mj, wp = oracle.export(m, work, w)
    x, y = g.data()
    mesh, axes, lm = g.distribution()
    loss, opt = g.training()
    desc = "seed %d: mesh %s axes %s layout %s loss %s optimizer %s layers %s" % (
        seed, mesh, axes, json.dumps(lm), loss, opt, [l.__class__.__name__ for l in m.layers])
    with keras_distribution(mesh, axes, lm).scope():
        km = keras.models.model_from_json(m.to_json())
        oracle.set_weights_by_path(km, w)
        pred = km.predict(x, batch_size=BATCH, verbose=0)
        km.compile(loss=loss, optimizer=opt)
        hist = km.fit(x, y, batch_size=BATCH, epochs=EPOCHS, shuffle=False, verbose=0).history
        final = oracle.model_weights(km)
        const = {v.path for v in km.non_trainable_weights}
    layout = {"batch_dim_name": "data", "layout_map": lm}
    extra = oracle.mesh_args(mesh, axes, layout, work) + ["--loss", loss, "--optimizer", opt]
    try:
        plan = oracle.compile_plan(mj, wp, os.path.join(work, "r.plan"), BATCH, extra)
        (kp,) = oracle.predict(plan, [x], work, n_out=1)
        oracle.assert_close(kp, pred, what="predict", **PRED_TOL)
        kh, kw = oracle.fit(plan, [x], [y], work, EPOCHS, BATCH)
        oracle.assert_close(kh["loss"], hist["loss"], what="fit loss", **LOSS_TOL)
        oracle.assert_weights_close(kw, final, what="final", constants=const, **WEIGHT_TOL)
    except AssertionError as e:
        raise AssertionError("%s\n%s" % (desc, e)) from None


def test_random(work, seed):
    check_seed(seed, work)
