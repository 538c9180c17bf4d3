"""kdc against files written by real Keras 3 (docs/frontend.md, "Keras files").

    KDC_BIN=build/tools/kdc python3 -m pytest tests/keras_files -q

- every example compiles from the `.keras` archive Keras wrote, from its
  model.json with `--weights model.weights.h5`, and from Keras' legacy `.h5`,
  with predictions bitwise equal to today's JSON + safetensors path;
- a model trained by `kdc run --fit --save-model` reloads in Keras 3
  (load_model, and load_weights of `--save-weights W.weights.h5`) with
  predictions equal to kdc's, and the optimizer's iteration count;
- training continued from the archive (`--initial-weights model.keras`:
  weights and optimizer state) gives the losses of an uninterrupted run,
  bitwise;
- continuing the training Keras started (its compiled.keras, optimizer
  variables included) gives Keras' own losses (SGD with momentum, Adam,
  AdamW, RMSprop);
- a file saved from a 2x4 mesh equals the one saved on one device;
- bad files given to `kdc run` leave nothing half-loaded or written.

The files are made by make_files.py (Keras 3.15.1, jax backend).
"""
import json
import os
import subprocess

import numpy as np
import pytest

os.environ.setdefault("KERAS_BACKEND", "jax")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DATA = os.path.join(ROOT, "tests", "keras_files", "data")
KDC = os.environ.get("KDC_BIN", os.path.join(ROOT, "build", "tools", "kdc"))

# what Keras 3.15.1 writes for these examples that kdc does not read (each
# is checked to fail with a located error, not skipped silently):
#   layer_zoo2: Keras' legacy saver wrote no model_config (get_config failed
#     inside Keras).
REFUSED = {("layer_zoo2", "legacy"): "model_config"}


# one compiled-code cache for the session: the same plan is run several times
# (docs/runtime.md, the JIT cache); KDC_CACHE_DIR given by the caller wins
_CACHE = {}


def _env():
    if "dir" not in _CACHE:
        import tempfile
        _CACHE["dir"] = os.environ.get("KDC_CACHE_DIR") or tempfile.mkdtemp(prefix="kdc-kf-cache-")
    return dict(os.environ, KDC_CACHE_DIR=_CACHE["dir"])


def kdc(*args, check=True):
    r = subprocess.run([KDC, *map(str, args)], capture_output=True, text=True, timeout=600,
                       env=_env())
    if check and r.returncode != 0:
        raise AssertionError(f"kdc {' '.join(map(str, args))}: exit {r.returncode}: {r.stderr}")
    return r


def example_io(ex):
    e = os.path.join(ROOT, "examples", ex)
    ins = [os.path.join(e, f) for f in ("input.npy", "input0.npy", "input1.npy")
           if os.path.exists(os.path.join(e, f))]
    n_out = len([f for f in os.listdir(e) if f in ("expected.npy", "expected0.npy", "expected1.npy")])
    return ins, n_out


def predict(plan, ins, n_out, tmp, tag):
    outs = [tmp / f"{tag}{i}.npy" for i in range(n_out)]
    args = [plan]
    for x in ins:
        args += ["--input", x]
    for o in outs:
        args += ["--output", o]
    kdc("run", *args)
    return [np.load(o) for o in outs]


EXAMPLES = sorted(e for e in os.listdir(DATA) if e != "nested")


def test_nested_models_and_wrappers(tmp_path):
    """Sublayer object paths (nested Sequential and Functional, TimeDistributed,
    LSTM cell, SpectralNormalization with its kernel tracked twice) against
    Keras' own predictions."""
    d = os.path.join(DATA, "nested")
    want = np.load(f"{d}/expected.npy")
    kdc("compile", f"{d}/model.keras", "--batch", 4, "-o", tmp_path / "k.plan")
    got = predict(tmp_path / "k.plan", [f"{d}/input.npy"], 1, tmp_path, "k")[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    # the same config with its weights given apart: one variable dropped is located
    import h5py
    bad = tmp_path / "bad.weights.h5"
    with open(f"{d}/model.weights.h5", "rb") as f, open(bad, "wb") as g:
        g.write(f.read())
    with h5py.File(bad, "r+") as f:
        del f["layers/sequential/layers/dense_1/vars/1"]
    r = kdc("compile", f"{d}/model.keras", "--weights", bad, "-o", tmp_path / "b.plan", check=False)
    assert r.returncode == 2 and "layers/sequential/layers/dense_1/vars/1" in r.stderr, r.stderr


@pytest.mark.parametrize("ex", EXAMPLES)
def test_example_predictions_equal(ex, tmp_path):
    e = os.path.join(ROOT, "examples", ex)
    ins, n_out = example_io(ex)
    kdc("compile", f"{e}/model.json", "--weights", f"{e}/weights.safetensors", "--batch", 4,
        "-o", tmp_path / "ref.plan")
    ref = predict(tmp_path / "ref.plan", ins, n_out, tmp_path, "ref")
    ways = {"keras": [f"{DATA}/{ex}/model.keras"],
            "weights": [f"{e}/model.json", "--weights", f"{DATA}/{ex}/model.weights.h5"],
            "legacy": [f"{DATA}/{ex}/legacy.h5"]}
    if os.path.exists(f"{DATA}/{ex}/legacy_weights.h5"):  # tf.keras 2 save_weights('w.h5')
        ways["legacy_weights"] = [f"{e}/model.json", "--weights", f"{DATA}/{ex}/legacy_weights.h5"]
    for way, args in ways.items():
        r = kdc("compile", *args, "--batch", 4, "-o", tmp_path / f"{way}.plan",
                check=(ex, way) not in REFUSED)
        if (ex, way) in REFUSED:
            assert r.returncode == 2 and REFUSED[(ex, way)] in r.stderr, r.stderr
            assert len(r.stderr.strip().splitlines()) == 1 and not (tmp_path / f"{way}.plan").exists()
            continue
        got = predict(tmp_path / f"{way}.plan", ins, n_out, tmp_path, way)
        for a, b in zip(ref, got):
            assert a.dtype == b.dtype and a.shape == b.shape
            assert np.array_equal(a, b), f"{ex} {way}: max diff {np.abs(a - b).max()}"


def fit_arrays(tmp, n=16, seed=1):
    r = np.random.default_rng(seed)
    x = r.random((n, 16, 16, 3), dtype=np.float32)
    y = r.random((n, 10), dtype=np.float32)
    y /= y.sum(1, keepdims=True)
    np.save(tmp / "x.npy", x)
    np.save(tmp / "y.npy", y)
    return x, y


def fit(plan, tmp, *extra):
    kdc("run", plan, "--fit", "--x", tmp / "x.npy", "--y", tmp / "y.npy", "--batch-size", 4,
        "--quiet", *extra)


def test_save_model_loads_in_keras(tmp_path):
    import keras
    x, _ = fit_arrays(tmp_path)
    kdc("compile", f"{DATA}/small_cnn/compiled.keras", "--batch", 4, "-o", tmp_path / "p.plan")
    fit(tmp_path / "p.plan", tmp_path, "--epochs", 2, "--save-model", tmp_path / "out.keras",
        "--save-weights", tmp_path / "out.weights.h5", "--save-optimizer")
    kdc("compile", tmp_path / "out.keras", "--batch", 4, "-o", tmp_path / "t.plan")
    np.save(tmp_path / "x16.npy", x)
    mine = predict(tmp_path / "t.plan", [tmp_path / "x16.npy"], 1, tmp_path, "kdc")[0]
    # the training plan predicting with the archive's weights (kdc run --initial-weights)
    kdc("run", tmp_path / "p.plan", "--input", tmp_path / "x16.npy", "--initial-weights",
            tmp_path / "out.keras", "--output", tmp_path / "init.npy")
    assert np.array_equal(np.load(tmp_path / "init.npy"), mine)
    m = keras.saving.load_model(tmp_path / "out.keras")
    assert int(m.optimizer.iterations.numpy()) == 8  # 2 epochs of 4 steps
    theirs = m.predict(x, verbose=0)
    # the same f32 model on two implementations (XLA's convolutions)
    np.testing.assert_allclose(mine, theirs, rtol=1e-5, atol=1e-6)
    m2 = keras.models.clone_model(m)
    m2.load_weights(tmp_path / "out.weights.h5")
    for a, b in zip(m.weights, m2.weights):
        assert np.array_equal(np.asarray(a), np.asarray(b)), a.path
    # the trained weights differ from the ones the plan started from
    m0 = keras.saving.load_model(f"{DATA}/small_cnn/compiled.keras")
    assert not np.array_equal(np.asarray(m0.weights[0]), np.asarray(m.weights[0]))
    # --save-optimizer's weights file continues the optimizer from compile
    # (kdc compile --weights): 8 + 4 steps
    kdc("compile", f"{DATA}/small_cnn/compiled.keras", "--weights", tmp_path / "out.weights.h5",
        "--batch", 4, "-o", tmp_path / "c.plan")
    fit(tmp_path / "c.plan", tmp_path, "--epochs", 1, "--save-model", tmp_path / "o2.keras")
    assert int(keras.saving.load_model(tmp_path / "o2.keras").optimizer.iterations.numpy()) == 12
    r = kdc("compile", f"{DATA}/small_cnn/compiled.keras", "--weights", tmp_path / "out.weights.h5",
            "--optimizer", "adam", "--batch", 4, "-o", tmp_path / "a.plan")
    assert "12 optimizer variables (optimizer/vars/...) skipped: the plan's adam keeps 22" \
        in r.stderr, r.stderr


def test_continue_training_from_archive(tmp_path):
    fit_arrays(tmp_path)
    kdc("compile", f"{DATA}/small_cnn/compiled.keras", "--batch", 4, "-o", tmp_path / "p.plan")
    fit(tmp_path / "p.plan", tmp_path, "--epochs", 4, "--history", tmp_path / "h4.json")
    fit(tmp_path / "p.plan", tmp_path, "--epochs", 2, "--save-model", tmp_path / "half.keras")
    kdc("compile", tmp_path / "half.keras", "--batch", 4, "-o", tmp_path / "half.plan")
    fit(tmp_path / "half.plan", tmp_path, "--epochs", 2, "--initial-weights",
        tmp_path / "half.keras", "--history", tmp_path / "h2.json")
    h4 = json.load(open(tmp_path / "h4.json"))
    h2 = json.load(open(tmp_path / "h2.json"))
    assert h2["batch_loss"] == h4["batch_loss"][8:]  # bitwise: momentum and iteration restored
    # without the optimizer state the losses differ (the test can fail)
    kdc("compile", f"{DATA}/small_cnn/compiled.keras", "--batch", 4, "-o", tmp_path / "q.plan")
    fit(tmp_path / "q.plan", tmp_path, "--epochs", 2, "--save-weights", tmp_path / "w.weights.h5")
    fit(tmp_path / "half.plan", tmp_path, "--epochs", 2, "--initial-weights",
        tmp_path / "w.weights.h5", "--history", tmp_path / "h2w.json")
    assert json.load(open(tmp_path / "h2w.json"))["batch_loss"] != h4["batch_loss"][8:]


@pytest.mark.parametrize("way", ["initial", "compile"])
@pytest.mark.parametrize("ex", ["small_cnn", "lstm_text", "gru_rnn", "norm_zoo"])
def test_continue_keras_training(ex, way, tmp_path):
    """kdc continues the training Keras started (2 steps, SGD with momentum,
    Adam, RMSprop, AdamW): 4 more steps give Keras' losses and weights.  The
    archive's optimizer state comes in by `kdc run --initial-weights A` or
    by `kdc compile --weights A` (the plan's TRAIN_STATE)."""
    import keras
    path = f"{DATA}/{ex}/compiled.keras"
    m = keras.saving.load_model(path)
    assert int(m.optimizer.iterations.numpy()) == 2
    from make_files import fit_data  # the data Keras trained on there, other rows
    xs, (y,) = fit_data(m, seed=5)
    h = m.fit(xs, y, batch_size=4, epochs=2, shuffle=False, verbose=0).history["loss"]
    args = []
    for i, x in enumerate(xs):
        np.save(tmp_path / f"x{i}.npy", x)
        args += ["--x", tmp_path / f"x{i}.npy"]
    np.save(tmp_path / "y.npy", y)
    args += ["--y", tmp_path / "y.npy", "--epochs", 2, "--batch-size", 4, "--quiet"]
    if way == "initial":
        kdc("compile", path, "--batch", 4, "-o", tmp_path / "p.plan")
        args += ["--initial-weights", path]
    else:
        r = kdc("compile", path, "--weights", path, "--batch", 4, "-o", tmp_path / "p.plan")
        assert "skipped" not in r.stderr, r.stderr
    kdc("run", tmp_path / "p.plan", "--fit", *args, "--history", tmp_path / "h.json",
        "--save-weights", tmp_path / "w.weights.h5")
    mine = json.load(open(tmp_path / "h.json"))["loss"]
    np.testing.assert_allclose(mine, h, rtol=2e-5)
    k2 = keras.saving.load_model(path)
    k2.load_weights(tmp_path / "w.weights.h5")
    for a, b in zip(m.weights, k2.weights):
        np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=1e-4, atol=2e-6,
                                   err_msg=a.path)
    if way == "compile" and ex == "lstm_text":
        # without the optimizer state (compiled without --weights) the losses differ
        kdc("compile", path, "--batch", 4, "-o", tmp_path / "q.plan")
        kdc("run", tmp_path / "q.plan", "--fit", *args, "--history",
            tmp_path / "q.json")
        assert not np.allclose(json.load(open(tmp_path / "q.json"))["loss"], h, rtol=2e-5)
        # another optimizer, or a plan that does not train: one note, nothing restored
        r = kdc("compile", path, "--weights", path, "--optimizer", "sgd", "--batch", 4, "-o",
                tmp_path / "s.plan")
        assert "20 optimizer variables (optimizer/vars/...) skipped: the file's optimizer is " \
               "adam, the plan trains with SGD" in r.stderr, r.stderr
        r = kdc("compile", os.path.join(ROOT, "examples", ex, "model.json"), "--weights", path,
                "--batch", 4, "-o", tmp_path / "n.plan")
        assert "skipped: the plan does not train" in r.stderr, r.stderr


def test_mesh_saves_global_layout(tmp_path):
    fit_arrays(tmp_path)
    for mesh in ("1", "2x4"):
        extra = [] if mesh == "1" else ["--mesh", mesh]
        kdc("compile", f"{DATA}/small_cnn/compiled.keras", "--batch", 8, *extra, "-o",
            tmp_path / f"m{mesh}.plan")
        kdc("run", tmp_path / f"m{mesh}.plan", "--fit", "--x", tmp_path / "x.npy", "--y",
            tmp_path / "y.npy", "--batch-size", 8, "--epochs", 1, "--quiet",
            "--save-weights", tmp_path / f"m{mesh}.weights.h5", "--save-optimizer")
    import h5py
    a, b = h5py.File(tmp_path / "m1.weights.h5"), h5py.File(tmp_path / "m2x4.weights.h5")
    names = []
    a.visititems(lambda n, o: names.append(n) if isinstance(o, h5py.Dataset) else None)
    assert any(n.startswith("optimizer/") for n in names)
    for n in names:
        np.testing.assert_allclose(a[n][()], b[n][()], rtol=1e-5, atol=1e-6, err_msg=n)


def test_bad_initial_weights_change_nothing(tmp_path):
    """A bad --initial-weights: one located line, exit 2, nothing written."""
    import h5py
    fit_arrays(tmp_path)
    kdc("compile", f"{DATA}/small_cnn/compiled.keras", "--batch", 4, "-o", tmp_path / "p.plan")
    src = f"{DATA}/small_cnn/model.weights.h5"
    for what in ("shape", "extra", "missing"):
        bad = tmp_path / f"{what}.weights.h5"
        with open(src, "rb") as f, open(bad, "wb") as g:
            g.write(f.read())
        with h5py.File(bad, "r+") as f:
            if what == "shape":
                del f["layers/dense/vars/1"]
                f["layers/dense/vars/1"] = np.zeros(3, "float32")
            elif what == "extra":
                f["layers/dense_7/vars/0"] = np.zeros(3, "float32")
            else:
                del f["layers/conv2d_1/vars/0"]
        out = tmp_path / "out.weights.h5"
        r = kdc("run", tmp_path / "p.plan", "--fit", "--x", tmp_path / "x.npy", "--y",
                tmp_path / "y.npy", "--quiet", "--initial-weights", bad, "--save-weights", out,
                check=False)
        lines = r.stderr.strip().splitlines()
        assert r.returncode == 2 and len(lines) == 1 and str(bad) in lines[0], r.stderr
        assert not out.exists()
    r = kdc("run", tmp_path / "p.plan", "--fit", "--x", tmp_path / "x.npy", "--y",
            tmp_path / "y.npy", "--quiet", "--save-model", tmp_path / "o.h5", check=False)
    assert r.returncode == 2 and "--save-model" in r.stderr


def test_fixed_batch(tmp_path):
    """An InputLayer batch_shape fixing the batch: the plan's batch without
    --batch (said by inspect), a located error with a different --batch."""
    cfg = open(os.path.join(ROOT, "tests", "e2e", "bad_inputs", "batch_fixed_differs.json")).read()
    assert '"batch_shape": [8, 28, 28, 1]' in cfg
    r = kdc("inspect", os.path.join(ROOT, "tests", "e2e", "bad_inputs", "batch_fixed_differs.json"))
    assert 'Batch: 8, fixed by the batch_shape of input "input_layer"' in r.stdout
    kdc("compile", os.path.join(ROOT, "tests", "e2e", "bad_inputs", "batch_fixed_differs.json"),
        "-o", tmp_path / "p.plan")
    r = kdc("inspect", tmp_path / "p.plan")
    assert '"name": "input_layer", "dtype": "f32", "shape": [8, 28, 28, 1]' in r.stdout


def test_recorded_training_true(tmp_path):
    """Keras 3.15 records RandomFlip's call with training=True (its call()
    default); Keras 3's predict passes training=False over it, so the archive
    predicts deterministically without flipping, and so does kdc.  tf.keras 2
    honours an explicit training=True in predict: such a topology's
    augmentation layer is refused, naming the layer (its Dropout stays the
    identity, as before)."""
    import keras
    import zipfile
    path = f"{DATA}/layer_zoo2/model.keras"
    cfg = json.loads(zipfile.ZipFile(path).read("config.json"))
    flip = [l for l in cfg["config"]["layers"] if l["class_name"] == "RandomFlip"][0]
    assert flip["inbound_nodes"][0]["kwargs"] == {"training": True}
    e = os.path.join(ROOT, "examples", "layer_zoo2")
    ins, n_out = example_io("layer_zoo2")
    m = keras.saving.load_model(path)
    xs = [np.load(x) for x in ins]
    a, b = m.predict(xs, verbose=0), m.predict(xs, verbose=0)
    assert np.array_equal(a, b)  # Keras does not flip in predict
    kdc("compile", path, "--batch", 4, "-o", tmp_path / "z.plan")
    got = predict(tmp_path / "z.plan", ins, n_out, tmp_path, "z")[0]
    np.testing.assert_allclose(got, a, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got, np.load(f"{e}/expected.npy"), rtol=1e-5, atol=1e-5)
    for cls, cfg in (("RandomFlip", {"mode": "horizontal"}),):
        model = {"class_name": "Functional", "keras_version": "2.15.0", "backend": "tensorflow",
                 "config": {"name": "model", "input_layers": [["input_1", 0, 0]],
                            "output_layers": [["aug", 0, 0]], "layers": [
                                {"class_name": "InputLayer", "name": "input_1", "inbound_nodes": [],
                                 "config": {"batch_input_shape": [None, 4, 4, 3], "dtype": "float32",
                                            "name": "input_1"}},
                                {"class_name": cls, "name": "aug",
                                 "config": dict(cfg, name="aug", trainable=True, dtype="float32"),
                                 "inbound_nodes": [[["input_1", 0, 0, {"training": True}]]]}]}}
        (tmp_path / "tk2.json").write_text(json.dumps(model))
        (tmp_path / "t.plan").unlink(missing_ok=True)
        r = kdc("compile", tmp_path / "tk2.json", "-o", tmp_path / "t.plan", check=False)
        lines = r.stderr.strip().splitlines()
        assert r.returncode == 2 and len(lines) == 1 and "config.layers[1]" in lines[0], r.stderr
        assert "training=true" in lines[0] and not (tmp_path / "t.plan").exists()
        del model["config"]["layers"][1]["inbound_nodes"][0][0][3]["training"]
        (tmp_path / "tk2.json").write_text(json.dumps(model))
        kdc("compile", tmp_path / "tk2.json", "-o", tmp_path / "t.plan")


def test_bad_optimizer_state_at_compile(tmp_path):
    """`kdc compile --weights W` with a misshapen or non-numeric optimizer
    variable: one located line naming it, exit 2, no plan."""
    import h5py
    fit_arrays(tmp_path)
    kdc("compile", f"{DATA}/small_cnn/compiled.keras", "--batch", 4, "-o", tmp_path / "p.plan")
    fit(tmp_path / "p.plan", tmp_path, "--epochs", 1, "--save-weights", tmp_path / "w.weights.h5",
        "--save-optimizer")
    for what in ("shape", "string"):
        bad = tmp_path / f"{what}.weights.h5"
        with open(tmp_path / "w.weights.h5", "rb") as f, open(bad, "wb") as g:
            g.write(f.read())
        with h5py.File(bad, "r+") as f:
            del f["optimizer/vars/3"]
            f["optimizer/vars/3"] = np.zeros(3, "float32") if what == "shape" else b"abc"
        r = kdc("compile", f"{DATA}/small_cnn/compiled.keras", "--weights", bad, "-o",
                tmp_path / "b.plan", check=False)
        lines = r.stderr.strip().splitlines()
        assert r.returncode == 2 and len(lines) == 1 and "optimizer/vars/3" in lines[0], r.stderr
        assert str(bad) in lines[0] and not (tmp_path / "b.plan").exists()
