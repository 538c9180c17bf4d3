"""mixed_float16 training state (LossScaleOptimizer) continued on a 2x4 mesh,
by the `kdc` command line and by the Python package (docs/training.md,
"Loss scaling"; docs/python.md).

The oracle is test_loss_scale.py's: a mixed_float16 MLP (here a functional
model with layers d1, d2 as in the Keras distribution guide, whose
ModelParallel layout applies: d1/kernel split over "model", d1/bias too,
d2's output over "data") trained one epoch by Keras 3 on JAX on inputs whose first batch
overflows float16, saved as a .keras archive, then continued one more epoch
(4 steps, the first skipped again) by Keras on one device, by
`kdc compile --weights FILE --mesh 2x4 --layout layout.json` and by the same
compile on one device.  The mesh run must give:
- dynamic_scale, step_counter and the inner optimizer's iteration exactly
  those of the one-device run and of Keras' continued run (powers of two and
  counts: any difference is a bug, not rounding);
- weights and Adam slots equal to the one-device run within MESH_TOL (the
  same float16 math, d2's contraction summed in another order across the
  "model" shards: seen 3.7e-9), and to Keras within test_loss_scale's
  WEIGHT_TOL / SLOT_ATOL;
- a `--save-weights W.weights.h5 --save-optimizer` file that Keras'
  model.load_weights reads into a mixed_float16 model that built its
  optimizer (scale, counter, iteration and slots as above).
The Python package (`import kdc`: compile with kdc.ModelParallel and
weights=, Plan.fit, Plan.save, Plan.save_weights(optimizer=True)) must give
the command line's 2x4 result bit for bit (the same core on the same plan
settings) and files Keras reads the same way; a bad loss-scale state raises
kdc.KdcError whose message is the CLI's line after "kdc: error: ".
"""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from test_loss_scale import (BATCH, KDC, assert_close_state, build, inner_slots, kdc,
                             lso_state, overflow_data, rewrite_weights, fail)
import keras  # noqa: E402  (test_loss_scale chose the JAX backend)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LAYOUT = {"batch_dim_name": "data",
          "layout_map": {"d1/kernel": [None, "model"], "d1/bias": ["model"],
                         "d2/output": ["data", None]}}
MESH_TOL = 1e-6  # absolute, on weights ~0.1-1 and on slots scaled by their largest magnitude


def kdc_package():
    """`import kdc`: the installed package (.ci/test pip-installs it), else this tree's."""
    try:
        import kdc as pkg
    except ImportError:
        lib = os.path.join(ROOT, "build", "api", "libkdc.so")
        if os.path.exists(lib) and "KDC_LIBRARY" not in os.environ:
            os.environ["KDC_LIBRARY"] = lib
        sys.path.insert(0, os.path.join(ROOT, "python"))
        import kdc as pkg
    return pkg


def mixed_load(path):
    """keras.saving.load_model under mixed_float16 (Keras wraps the optimizer again)."""
    keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        return keras.saving.load_model(path)
    finally:
        keras.mixed_precision.set_global_policy("float32")


def load_weights_into_fresh(path, x, y):
    """A mixed_float16 model whose optimizer is built (one step on other rows), then Keras'
    load_weights of |path|."""
    fresh = build("adam", functional=True)
    fresh.fit(x[BATCH:2 * BATCH], y[BATCH:2 * BATCH], batch_size=BATCH, verbose=0)
    fresh.load_weights(path)
    return fresh


def assert_mesh_close(got, want):
    """Weights and inner slots of two Keras models within MESH_TOL; returns the largest
    difference seen (slots relative to their largest magnitude)."""
    seen = 0.0
    for a, b in zip(got.get_weights(), want.get_weights()):
        a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
        np.testing.assert_allclose(a, b, atol=MESH_TOL, rtol=0)
        seen = max(seen, float(np.abs(a - b).max()))
    gs, ws = inner_slots(got), inner_slots(want)
    assert len(gs) == len(ws) == 8  # Adam's m and v of the 4 variables
    for a, b in zip(gs, ws):
        scale = max(1.0, float(np.abs(b).max()))
        np.testing.assert_allclose(a, b, atol=MESH_TOL * scale, rtol=0)
        seen = max(seen, float(np.abs(a - b).max()) / scale)
    return seen


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Keras' first epoch saved as k1.keras, its continued epoch (the model), and kdc's
    continued epoch on one device and on 2x4 as .weights.h5 files with the optimizer."""
    d = tmp_path_factory.mktemp("lso_mesh")
    x, y = overflow_data(d)
    model = build("adam", functional=True)
    model.fit(x, y, batch_size=BATCH, epochs=1, shuffle=False, verbose=0)
    started = lso_state(model)
    assert started[0] < 2.0 ** 15  # the scale moved, so a restart would show
    model.save(d / "k1.keras")
    (d / "layout.json").write_text(json.dumps(LAYOUT))
    for mesh in ("1", "2x4"):
        extra = [] if mesh == "1" else ["--mesh", mesh, "--layout", d / "layout.json"]
        r = kdc("compile", d / "k1.keras", "--weights", d / "k1.keras", "--batch", BATCH,
                *extra, "-o", d / f"m{mesh}.plan")
        assert "skipped" not in r.stderr and "matches no" not in r.stderr, r.stderr
        kdc("run", d / f"m{mesh}.plan", "--fit", "--x", d / "x.npy", "--y", d / "y.npy",
            "--batch-size", BATCH, "--epochs", 1, "--quiet", "--save-weights",
            d / f"m{mesh}.weights.h5", "--save-optimizer")
    model.fit(x, y, batch_size=BATCH, epochs=1, shuffle=False, verbose=0)  # Keras goes on
    return dict(dir=d, x=x, y=y, keras=model, started=started)


def test_mesh_continues_loss_scale(runs):
    d, x, y, model = runs["dir"], runs["x"], runs["y"], runs["keras"]
    # the plan is sharded as the layout says (a replicated plan would pass the rest too)
    r = kdc("inspect", d / "m2x4.plan")
    assert "d1/kernel f32[8,16] {-,model}" in r.stdout, r.stdout
    one = load_weights_into_fresh(d / "m1.weights.h5", x, y)
    mesh = load_weights_into_fresh(d / "m2x4.weights.h5", x, y)
    want = lso_state(model)
    assert want != runs["started"]
    assert lso_state(mesh) == lso_state(one) == want, (lso_state(mesh), lso_state(one), want)
    seen = assert_mesh_close(mesh, one)
    print(f"2x4 vs one device: largest difference {seen:.3g}")
    assert_close_state(mesh, model)
    assert_close_state(one, model)


def test_python_package_continues_loss_scale(runs):
    """The same continuation through `import kdc`: a fresh live keras.Model (compiled under
    mixed_float16: its compile_config carries the LossScaleOptimizer), weights= the
    archive, kdc's ModelParallel with the guide's layout on a 2x4 DeviceMesh."""
    pkg = kdc_package()
    d, x, y, model = runs["dir"], runs["x"], runs["y"], runs["keras"]
    mesh = pkg.DeviceMesh((2, 4), ("data", "model"))
    lm = pkg.LayoutMap(mesh)
    for k, v in LAYOUT["layout_map"].items():
        lm[k] = tuple(v)
    live = build("adam", functional=True)
    with pkg.compile(live, distribution=pkg.ModelParallel(layout_map=lm, batch_dim_name="data"),
                     weights=str(d / "k1.keras"), batch_size=BATCH) as plan:
        assert "skipped" not in plan.warnings and "matches no" not in plan.warnings, plan.warnings
        assert plan.mesh == {"data": 2, "model": 4}
        assert "{-,model}" in plan.sharding("d1/kernel"), plan.sharding("d1/kernel")
        h = plan.fit(x, y, epochs=1, batch_size=BATCH, shuffle=False, verbose=0)
        assert len(h.history["loss"]) == 1  # NaN: the first batch overflows, as in Keras
        plan.save(str(d / "py.keras"))
        plan.save_weights(str(d / "py.weights.h5"), optimizer=True)
    want = lso_state(model)
    archive = mixed_load(d / "py.keras")
    weights = load_weights_into_fresh(d / "py.weights.h5", x, y)
    cli = load_weights_into_fresh(d / "m2x4.weights.h5", x, y)
    for got in (archive, weights):
        assert lso_state(got) == want, (lso_state(got), want)
        # the same core, plan settings and data as `kdc run --fit` on 2x4: the same bits
        for a, b in zip(got.get_weights() + inner_slots(got), cli.get_weights() + inner_slots(cli)):
            np.testing.assert_array_equal(np.asarray(a, np.float32), np.asarray(b, np.float32))
        assert_close_state(got, model)


def test_python_package_bad_loss_scale_state(runs, tmp_path):
    """A missing optimizer/vars/3 (dynamic_scale) and a scale that is not a power of two:
    kdc.compile raises KdcError with the command line's message, and the CLI exits 2."""
    pkg = kdc_package()
    d = runs["dir"]
    mesh = pkg.DeviceMesh((2, 4), ("data", "model"))

    def drop3(f):
        del f["optimizer/vars/3"]

    def scale3(f):
        f["optimizer/vars/3"][()] = np.float32(3.0)
    for name, edit, words in (("no3", drop3, ("optimizer/vars",)),
                              ("s3", scale3, ("optimizer/vars/3", "power of two"))):
        bad = tmp_path / f"{name}.keras"
        rewrite_weights(d / "k1.keras", bad, edit)
        line = fail("compile", d / "k1.keras", "--weights", bad, "--batch", BATCH, "--mesh",
                    "2x4", "--layout", d / "layout.json", "-o", tmp_path / "a.plan")
        assert not (tmp_path / "a.plan").exists()
        with pytest.raises(pkg.KdcError) as e:
            pkg.compile(str(d / "k1.keras"), weights=str(bad), batch_size=BATCH, mesh=mesh,
                        layout_map={k: tuple(v) for k, v in LAYOUT["layout_map"].items()})
        assert e.value.code == "invalid input"
        assert "\n" not in e.value.message and line == "kdc: error: " + e.value.message, \
            (line, e.value.message)
        assert str(bad) in line and all(w in line for w in words), line
