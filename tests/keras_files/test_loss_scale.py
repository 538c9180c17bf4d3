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
The same holds for optimizers with slots (SGD with momentum, Adam, AdamW,
RMSprop centered with momentum): the slots at optimizer/vars/4+ and
optimizer/inner_optimizer/vars/2+ equal Keras' continued run within SLOT_ATOL.
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
SLOT_ATOL = 1e-4  # of the slot's largest magnitude (seen: 7.5e-6): f16 gradients round differently
BATCH, ROWS = 16, 64


def kdc(*args):
    r = subprocess.run([KDC, *map(str, args)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, f"kdc {' '.join(map(str, args))}: exit {r.returncode}: {r.stderr}"
    return r


OPTIMIZERS = {
    "sgd": lambda: keras.optimizers.SGD(0.001),
    "sgd_momentum": lambda: keras.optimizers.SGD(0.001, momentum=0.9),
    "adam": lambda: keras.optimizers.Adam(0.001),
    "adamw": lambda: keras.optimizers.AdamW(0.001, weight_decay=0.01),
    "rmsprop": lambda: keras.optimizers.RMSprop(0.001, momentum=0.5, centered=True),
}


def build(opt="sgd", functional=False):
    """The mixed_float16 MLP: a Sequential, or with |functional| the Keras distribution
    guide's form, a functional model with layers d1, d2 (variable paths d1/kernel... where
    a Sequential's are sequential_N/dense_M/kernel)."""
    keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        keras.utils.set_random_seed(3)
        if functional:
            inputs = keras.Input((8,))
            h = keras.layers.Dense(16, activation="relu", name="d1")(inputs)
            outputs = keras.layers.Dense(4, activation="softmax", dtype="float32", name="d2")(h)
            m = keras.Model(inputs, outputs)
        else:
            m = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"),
                                  keras.layers.Dense(4, activation="softmax", dtype="float32")])
        m.compile(optimizer=OPTIMIZERS[opt](), loss="sparse_categorical_crossentropy")
    finally:
        keras.mixed_precision.set_global_policy("float32")
    return m


def lso_state(model):
    opt = model.optimizer
    assert type(opt).__name__ == "LossScaleOptimizer"
    return (float(opt.dynamic_scale.numpy()), int(opt.step_counter.numpy()),
            int(opt.inner_optimizer.iterations.numpy()))


def inner_slots(model):
    """The inner optimizer's variables past its iteration and learning rate."""
    return [np.asarray(v.numpy(), np.float32) for v in model.optimizer.inner_optimizer.variables[2:]]


def overflow_data(tmp_path):
    """Inputs whose first batch overflows float16 (the step is skipped, the scale halves),
    the rest train; also saved as x.npy, y.npy under tmp_path."""
    rng = np.random.default_rng(5)
    x = rng.normal(size=(ROWS, 8)).astype(np.float32)
    x[:BATCH] *= 6e4
    y = rng.integers(0, 4, size=(ROWS,)).astype(np.int32)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)
    return x, y


def assert_close_state(got, want):
    """Weights within WEIGHT_TOL, inner slots within SLOT_ATOL of their largest magnitude."""
    for a, b in zip(got.get_weights(), want.get_weights()):
        np.testing.assert_allclose(np.asarray(a, np.float32), np.asarray(b, np.float32),
                                   **WEIGHT_TOL)
    gs, ws = inner_slots(got), inner_slots(want)
    assert [a.shape for a in gs] == [b.shape for b in ws]
    for a, b in zip(gs, ws):
        np.testing.assert_allclose(a, b, atol=SLOT_ATOL * max(1.0, float(np.abs(b).max())),
                                   rtol=0)


@pytest.mark.parametrize("way,opt", [("compile", "sgd"), ("initial_weights", "sgd"),
                                     ("compile", "sgd_momentum"), ("compile", "adam"),
                                     ("initial_weights", "adamw"), ("compile", "rmsprop")])
def test_loss_scale_state_round_trip(way, opt, tmp_path):
    x, y = overflow_data(tmp_path)
    model = build(opt)
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
    # the slots (momenta, Adam's m and v, RMSprop's rms/momentum/average gradient) at
    # optimizer/vars/4+ and optimizer/inner_optimizer/vars/2+, as Keras' continued run has them
    got_slots = inner_slots(back)
    assert (len(got_slots) > 0) == (opt != "sgd")
    assert_close_state(back, model)
    # and kdc's epoch moved them (a file that kept the archive's slots would fail here)
    moved = [float(np.abs(a - c).max()) for a, c in zip(got_slots, inner_slots(mine))]
    assert not moved or max(moved) > 0, moved


def rewrite_weights(src, dst, edit):
    """Copy the .keras archive src to dst with edit(h5py.File) applied to its model.weights.h5."""
    import zipfile
    import h5py
    with zipfile.ZipFile(src) as z:
        members = {n: z.read(n) for n in z.namelist()}
    w = dst.parent / "edit.weights.h5"
    w.write_bytes(members["model.weights.h5"])
    with h5py.File(w, "r+") as f:
        edit(f)
    members["model.weights.h5"] = w.read_bytes()
    with zipfile.ZipFile(dst, "w") as z:
        for n, b in members.items():
            z.writestr(n, b)


def fail(*args):
    r = subprocess.run([KDC, *map(str, args)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 2, (r.returncode, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("kdc: error: "), r.stderr
    return lines[0]


def test_loss_scale_bad_state(tmp_path):
    """A dynamic_scale that is not a power of two, and a missing optimizer/vars/3: one
    located line, exit 2, no plan left behind."""
    model = build()
    rng = np.random.default_rng(2)
    model.fit(rng.normal(size=(BATCH, 8)).astype(np.float32), np.zeros(BATCH, np.int32),
              batch_size=BATCH, epochs=1, verbose=0)  # builds the optimizer's variables
    model.save(tmp_path / "k.keras")

    def scale3(f):
        f["optimizer/vars/3"][()] = np.float32(3.0)
    rewrite_weights(tmp_path / "k.keras", tmp_path / "s3.keras", scale3)
    line = fail("compile", tmp_path / "k.keras", "--weights", tmp_path / "s3.keras", "--batch",
                BATCH, "-o", tmp_path / "a.plan")
    assert "s3.keras" in line and "optimizer/vars/3" in line and "power of two" in line, line
    assert not (tmp_path / "a.plan").exists()

    def drop3(f):
        del f["optimizer/vars/3"]
    rewrite_weights(tmp_path / "k.keras", tmp_path / "no3.keras", drop3)
    line = fail("compile", tmp_path / "k.keras", "--weights", tmp_path / "no3.keras", "--batch",
                BATCH, "-o", tmp_path / "b.plan")
    assert "no3.keras" in line and "optimizer/vars" in line, line
    assert not (tmp_path / "b.plan").exists()


def test_f32_plan_reads_mixed_file(tmp_path):
    """An f32 plan given a mixed_float16 file reads the weights and the inner optimizer's
    variables (optimizer/vars/4+) and skips the loss scale's four."""
    model = build("adam")
    rng = np.random.default_rng(1)
    x = rng.normal(size=(ROWS, 8)).astype(np.float32)
    y = rng.integers(0, 4, size=(ROWS,)).astype(np.int32)
    model.fit(x, y, batch_size=BATCH, epochs=1, shuffle=False, verbose=0)
    model.save(tmp_path / "mixed.keras")
    keras.utils.set_random_seed(3)
    f32 = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"),
                            keras.layers.Dense(4, activation="softmax")])
    f32.compile(optimizer=keras.optimizers.Adam(0.001), loss="sparse_categorical_crossentropy")
    f32.save(tmp_path / "f32.keras")
    kdc("compile", tmp_path / "f32.keras", "--weights", tmp_path / "mixed.keras", "--batch",
        BATCH, "-o", tmp_path / "p.plan")
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)
    kdc("run", tmp_path / "p.plan", "--fit", "--x", tmp_path / "x.npy", "--y", tmp_path / "y.npy",
        "--batch-size", BATCH, "--epochs", 0, "--quiet", "--save-model", tmp_path / "out.keras")
    back = keras.saving.load_model(tmp_path / "out.keras")
    for a, b in zip(back.get_weights(), model.get_weights()):
        np.testing.assert_array_equal(np.asarray(a, np.float32), np.asarray(b, np.float32))
    inner = model.optimizer.inner_optimizer
    assert int(back.optimizer.iterations.numpy()) == int(inner.iterations.numpy()) > 0
    for a, b in zip(back.optimizer.variables[2:], inner.variables[2:]):
        np.testing.assert_array_equal(np.asarray(a.numpy()), np.asarray(b.numpy()))


def test_save_weights_optimizer_into_load_weights(tmp_path):
    """`--save-weights W.weights.h5 --save-optimizer`: Keras' model.load_weights reads the
    optimizer from a .weights.h5 too (saving_lib.load_weights_only walks the model's state,
    its built optimizer included), so a mixed_float16 model that has built its optimizer
    resumes with kdc's scale, counter, iteration and Adam slots."""
    x, y = overflow_data(tmp_path)
    model = build("adam")
    model.fit(x, y, batch_size=BATCH, epochs=1, shuffle=False, verbose=0)
    model.save(tmp_path / "k1.keras")
    kdc("compile", tmp_path / "k1.keras", "--weights", tmp_path / "k1.keras", "--batch", BATCH,
        "-o", tmp_path / "p.plan")
    kdc("run", tmp_path / "p.plan", "--fit", "--x", tmp_path / "x.npy", "--y", tmp_path / "y.npy",
        "--batch-size", BATCH, "--epochs", 1, "--quiet", "--save-weights",
        tmp_path / "w.weights.h5", "--save-optimizer")
    model.fit(x, y, batch_size=BATCH, epochs=1, shuffle=False, verbose=0)  # Keras goes on
    fresh = build("adam")
    fresh.fit(x[BATCH:2 * BATCH], y[BATCH:2 * BATCH], batch_size=BATCH, verbose=0)  # builds it
    assert lso_state(fresh) != lso_state(model)
    fresh.load_weights(tmp_path / "w.weights.h5")
    assert lso_state(fresh) == lso_state(model)
    assert_close_state(fresh, model)
