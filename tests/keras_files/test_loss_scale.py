"""mixed_float16 training state in Keras files (docs/training.md, "Loss
scaling"): Keras' compile wraps the optimizer in a LossScaleOptimizer whose
variables -- its own iteration and learning rate (unused), step_counter,
dynamic_scale, then the inner optimizer's, which it also writes under
optimizer/inner_optimizer/vars -- kdc reads and writes where Keras 3.15 puts
them.

The oracle is Keras 3 on JAX: a mixed_float16 MLP trained one epoch by
Keras on inputs large enough to overflow float16 (the scale halves from
2^15 several times), saved as a .keras archive; kdc continues that training
for one epoch (the state coming in through the compile of the archive, or
through `--initial-weights`), saves with `--save-model`, and Keras' load of
kdc's archive must show the dynamic_scale and step_counter of Keras' own
continued run (exactly: both are powers of two and counts), the inner SGD's
iteration, and weights within float16 training tolerance
(WEIGHT_TOL: 2e-3 absolute on weights of size ~0.1-1: kdc and Keras round
the f16 layer math differently, docs/frontend.md "Dtype policies").
"""
import os
import subprocess

import numpy as np
import pytest

os.environ.setdefault("KERAS_BACKEND", "jax")
import keras  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KDC = os.environ.get("KDC_BIN", os.path.join(ROOT, "build", "tools", "kdc"))
WEIGHT_TOL = dict(atol=2e-3, rtol=0)
BATCH, ROWS = 16, 64


def kdc(*args):
    r = subprocess.run([KDC, *map(str, args)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, f"kdc {' '.join(map(str, args))}: exit {r.returncode}: {r.stderr}"
    return r


def build():
    keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        keras.utils.set_random_seed(3)
        m = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"),
                              keras.layers.Dense(4, activation="softmax", dtype="float32")])
        m.compile(optimizer=keras.optimizers.SGD(0.001), loss="sparse_categorical_crossentropy")
    finally:
        keras.mixed_precision.set_global_policy("float32")
    return m


def lso_state(model):
    opt = model.optimizer
    assert type(opt).__name__ == "LossScaleOptimizer"
    return (float(opt.dynamic_scale.numpy()), int(opt.step_counter.numpy()),
            int(opt.inner_optimizer.iterations.numpy()))


@pytest.mark.parametrize("way", ["compile", "initial_weights"])
def test_loss_scale_state_round_trip(way, tmp_path):
    rng = np.random.default_rng(5)
    # the first batch overflows float16 (the step is skipped, the scale halves), the rest train
    x = rng.normal(size=(ROWS, 8)).astype(np.float32)
    x[:BATCH] *= 6e4
    y = rng.integers(0, 4, size=(ROWS,)).astype(np.int32)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)
    model = build()
    model.fit(x, y, batch_size=BATCH, epochs=1, shuffle=False, verbose=0)
    started = lso_state(model)
    assert started[0] < 2.0 ** 15  # the scale moved, so a restart would show
    model.save(tmp_path / "k1.keras")

    plan = tmp_path / "p.plan"
    if way == "compile":  # the optimizer state from the archive, into the plan
        r = kdc("compile", tmp_path / "k1.keras", "--weights", tmp_path / "k1.keras", "--batch",
                BATCH, "-o", plan)
        assert "skipped" not in r.stderr, r.stderr
        init = []
    else:  # a plan with fresh state, the archive's state given to the run
        kdc("compile", tmp_path / "k1.keras", "--batch", BATCH, "-o", plan)
        init = ["--initial-weights", tmp_path / "k1.keras"]
    kdc("run", plan, "--fit", "--x", tmp_path / "x.npy", "--y", tmp_path / "y.npy",
        "--batch-size", BATCH, "--epochs", 1, "--quiet", *init, "--save-model",
        tmp_path / "k2.keras")

    model.fit(x, y, batch_size=BATCH, epochs=1, shuffle=False, verbose=0)  # Keras goes on
    want = lso_state(model)
    # Keras wraps the optimizer again when it loads under the policy (as a user resuming does)
    keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        back = keras.saving.load_model(tmp_path / "k2.keras")
        mine = keras.saving.load_model(tmp_path / "k1.keras")
    finally:
        keras.mixed_precision.set_global_policy("float32")
    assert lso_state(mine) == started  # how Keras reads its own file: the same way
    got = lso_state(back)
    assert got == want, (got, want, started)
    for a, b in zip(back.get_weights(), model.get_weights()):
        np.testing.assert_allclose(np.asarray(a, np.float32), np.asarray(b, np.float32),
                                   **WEIGHT_TOL)
