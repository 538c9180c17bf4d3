"""kdc's Python package without Keras: paths, kdc's own distribution
objects, errors, no crash on wrong arguments, and Plan = the `kdc` CLI
(the same model, plan, arrays) for predict and fit, bitwise."""
import json
import os
import subprocess

import numpy as np
import pytest

import kdc

EX = "examples/mnist_mlp"


def ex(root, name):
    return os.path.join(root, EX, name)


@pytest.fixture(scope="module")
def guide_plan(root):
    """The MLP on 2x4 with the guide's layout, SGD 0.1, batch 16."""
    lm = kdc.LayoutMap(kdc.DeviceMesh((2, 4), ("data", "model")))
    lm["d1/kernel"] = (None, "model")
    lm["d2/output"] = ("data", None)
    plan = kdc.compile(ex(root, "model.json"), weights=ex(root, "weights.safetensors"),
                       distribution=kdc.ModelParallel(layout_map=lm, batch_dim_name="data"),
                       batch_size=16, loss="categorical_crossentropy", optimizer="sgd",
                       learning_rate=0.1)
    yield plan
    plan.close()


def test_version():
    assert kdc.api_version // 1000 == 1
    assert kdc.__version__


def test_predict_matches_tfjs(root, guide_plan):
    x = np.load(ex(root, "input.npy"))
    want = np.load(ex(root, "expected.npy"))
    got = guide_plan.predict(x)          # 37 rows: 2 full batches + 5 padded
    assert got.shape == want.shape and got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    # a dict by input name and a list give the same; float64 is converted
    np.testing.assert_array_equal(guide_plan.predict({"input_layer": x}), got)
    np.testing.assert_array_equal(guide_plan.predict([x.astype(np.float64)]), got)
    assert guide_plan.inputs[0]["name"] == "input_layer"
    assert guide_plan.mesh == {"data": 2, "model": 4} and guide_plan.device_count == 8


def test_facts(guide_plan):
    colls = guide_plan.collectives
    assert colls and {"function", "kind", "axes", "bytes_per_device", "groups"} <= set(colls[0])
    # the guide's layout: predict's d1 output is split over model, d2 reduces over it
    assert any(c["function"] == "predict" and c["kind"] == "all_reduce" and c["axes"] == ["model"]
               for c in colls)
    mem = guide_plan.memory
    assert mem["devices"] == 8 and mem["total"] == mem["arena"] + mem["weights"] + \
        mem["inputs_outputs"]
    assert "layout_map[\"d1/kernel\"]" in guide_plan.explain("d1/kernel")
    assert "memory per device" in guide_plan.describe()
    lines = []
    guide_plan.summary(print_fn=lines.append)
    assert "d1 (Dense)" in lines[0]


BAD_ARGS = [None, "text", [[1, 2], [3]], np.array([object()]), np.zeros(()),
            np.zeros((1,) * 9), np.zeros((4, 3)), {"nope": np.zeros((2, 28, 28, 1))},
            [np.zeros((2, 28, 28, 1))] * 2, np.array(["a", "b"]), 3.5]


@pytest.mark.parametrize("arg", BAD_ARGS, ids=range(len(BAD_ARGS)))
def test_bad_arguments_raise(guide_plan, arg):
    with pytest.raises(kdc.KdcError):
        guide_plan.predict(arg)


def test_bad_arguments_elsewhere(root, guide_plan, tmp_path):
    with pytest.raises(kdc.KdcError, match="broken.json"):
        p = tmp_path / "broken.json"
        p.write_text('{"class_name": "Functional",\n "config": {')
        kdc.compile(str(p), batch_size=4)
    with pytest.raises(kdc.KdcError, match="expected a positive integer"):
        kdc.compile(ex(root, "model.json"), batch_size=0)
    with pytest.raises(kdc.KdcError, match="model must be"):
        kdc.compile(42, batch_size=4)
    with pytest.raises(kdc.KdcError) as e:
        kdc.compile(ex(root, "model.json"), mesh=kdc.DeviceMesh((8,), ("data",)),
                    layout_map={"d1/kernel": (None, "model")}, batch_size=8)
    assert "\"model\" is not an axis" in e.value.message and e.value.code == "invalid input"
    with pytest.raises(ValueError):
        kdc.compile(ex(root, "model.json"), distribution=object(), batch_size=8)
    with pytest.raises(kdc.KdcError, match="/nonexistent"):
        kdc.load("/nonexistent/plan.bin")
    with pytest.raises(kdc.KdcError, match="--threads"):
        kdc.compile(ex(root, "model.json"), batch_size=4, threads=-1)
    x = np.zeros((16, 28, 28, 1), np.float32)
    y = np.zeros((16, 10), np.float32)
    for args in [dict(x=x, y=None), dict(x=x, y=y[:3]), dict(x=x, y=y, batch_size=17),
                 dict(x=x, y=y, batch_size=-1), dict(x=x, y=y, epochs=-1),
                 dict(x=x, y=y, validation_split=1.5), dict(x=x, y=[y, y]),
                 dict(x=x, y=y, epochs=2 ** 40), dict(x=x.astype(np.complex64), y=y),
                 dict(x=x[:, :, :, :, None], y=y), dict(x=x, y=y.astype(np.float64)[:, :3])]:
        with pytest.raises(kdc.KdcError):
            guide_plan.fit(verbose=0, **args)
    with pytest.raises(kdc.KdcError, match="no state tensor"):
        guide_plan.get_weight("d9/kernel")
    with pytest.raises(kdc.KdcError):
        guide_plan.set_weights([np.zeros(3)])
    with pytest.raises(kdc.KdcError, match="weight \"d2/bias\""):
        guide_plan.set_weight("d2/bias", np.zeros((11,), np.float32))
    with pytest.raises(kdc.KdcError, match="no value named"):
        guide_plan.explain("nope")
    with pytest.raises(kdc.KdcError, match="expected a .weights.h5 or .safetensors"):
        guide_plan.save_weights(str(tmp_path / "m.npz"))


def test_plan_equals_cli(root, kdc_cli, tmp_path):
    """The same plan file run by `kdc run` / `kdc run --fit` and by
    kdc.load: outputs, history and final weights bitwise equal."""
    plan_path = str(tmp_path / "p.bin")
    args = [kdc_cli, "compile", ex(root, "model.json"), "--weights", ex(root, "weights.safetensors"),
            "--batch", "16", "--mesh", "8", "--loss", "categorical_crossentropy",
            "--optimizer", "adam", "-o", plan_path]
    subprocess.run(args, check=True)
    out = str(tmp_path / "y.npy")
    subprocess.run([kdc_cli, "run", plan_path, "--input", ex(root, "input.npy"), "--output", out],
                   check=True)
    hist, final = str(tmp_path / "h.json"), str(tmp_path / "w.safetensors")
    subprocess.run([kdc_cli, "run", plan_path, "--fit", "--x", ex(root, "train_x.npy"), "--y",
                    ex(root, "train_y.npy"), "--epochs", "2", "--validation-split", "0.2",
                    "--history", hist, "--save-weights", final, "--quiet"], check=True)
    plan = kdc.load(plan_path)
    np.testing.assert_array_equal(plan.predict(np.load(ex(root, "input.npy"))), np.load(out))
    h = plan.fit(np.load(ex(root, "train_x.npy")), np.load(ex(root, "train_y.npy")), epochs=2,
                 validation_split=0.2, shuffle=False, verbose=0)
    want = json.load(open(hist))
    for key in ("loss", "val_loss"):  # the CLI writes "%.9g"
        np.testing.assert_allclose(h.history[key], want[key], rtol=1e-8, atol=0)
    assert [np.float32(v) for v in h.batch_loss] == [np.float32(v) for v in want["batch_loss"]]
    mine = str(tmp_path / "mine.safetensors")
    plan.save_weights(mine)
    ref = kdc.load(plan_path)
    ref.load_weights(final)
    for n in plan.weight_names:
        np.testing.assert_array_equal(plan.get_weight(n), ref.get_weight(n))
    assert plan.weight_names == ["d1/kernel", "d2/kernel", "d2/bias"]
    # set_weights(get_weights()) round-trips; evaluate is a float
    w = plan.get_weights()
    plan.set_weights([a * 0 for a in w])
    assert all(not plan.get_weight(n).any() for n in plan.weight_names)
    plan.set_weights(w)
    assert isinstance(plan.evaluate(np.load(ex(root, "train_x.npy")),
                                    np.load(ex(root, "train_y.npy"))), float)
    plan.save(str(tmp_path / "copy.bin"))
    assert open(tmp_path / "copy.bin", "rb").read() == open(plan_path, "rb").read()
    plan.close()
    ref.close()


def test_multi_input_output(root):
    """Two inputs (a list in input order, or a dict by name, as Keras takes
    them) and two outputs (a list in output order) on a 4-device mesh =
    the model's reference outputs (examples/merge_reshape, TF.js)."""
    d = os.path.join(root, "examples/merge_reshape")
    plan = kdc.compile(os.path.join(d, "model.json"), weights=os.path.join(d, "weights.safetensors"),
                       mesh=kdc.DeviceMesh((4,), ("data",)), batch_size=8)
    a, b = np.load(os.path.join(d, "input0.npy")), np.load(os.path.join(d, "input1.npy"))
    assert [i["name"] for i in plan.inputs] == ["in_a", "in_b"]
    assert [o["name"] for o in plan.outputs] == ["head0", "head1"]
    out = plan.predict([a, b])
    assert isinstance(out, list) and len(out) == 2
    for k in range(2):
        np.testing.assert_allclose(out[k], np.load(os.path.join(d, f"expected{k}.npy")),
                                   rtol=1e-4, atol=1e-5)
    by_name = plan.predict({"in_b": b, "in_a": a})
    for k in range(2):
        np.testing.assert_array_equal(by_name[k], out[k])
    with pytest.raises(kdc.KdcError, match="rows"):
        plan.predict([a, b[:5]])
    with pytest.raises(kdc.KdcError, match="missing"):
        plan.predict({"in_a": a})
    plan.close()
    with pytest.raises(kdc.KdcError, match="closed"):
        plan.predict([a, b])


def test_fit_progress(root, guide_plan, capsys):
    """verbose=2: one line per epoch; verbose=0: nothing (verbose=1 is
    keras.utils.Progbar when Keras imports, else the same lines)."""
    x, y = np.load(ex(root, "train_x.npy")), np.load(ex(root, "train_y.npy"))
    h = guide_plan.fit(x, y, epochs=2, batch_size=16, shuffle=True, seed=3, verbose=2)
    out = capsys.readouterr().out
    assert "Epoch 1/2 - 6 steps" in out and "Epoch 2/2 - 6 steps" in out and "loss: " in out
    assert len(h.history["loss"]) == 2 and len(h.batch_loss) == 12 and h.params["steps"] == 6
    guide_plan.fit(x, y, epochs=1, batch_size=16, verbose=0)
    assert capsys.readouterr().out == ""


def test_matmul_precision(root):
    """compile's matmul_precision reaches the plan (METADATA, inspect); a
    CPU plan accepts it; a bad value is refused (docs/gpu.md)."""
    with kdc.compile(ex(root, "model.json"), batch_size=4, matmul_precision="tf32") as p:
        text = p.describe()
        assert '"matmul_precision": "tf32"' in text
    with kdc.compile(ex(root, "model.json"), batch_size=4) as p:
        assert "matmul_precision" not in p.describe()
    with pytest.raises(kdc.KdcError, match="expected highest or tf32"):
        kdc.compile(ex(root, "model.json"), batch_size=4, matmul_precision="fast")


def test_layout_auto(root, tmp_path):
    """layout="auto" (`kdc compile --layout auto`): the chosen layout's
    predictions equal the example's TF.js outputs, the chosen layout.json is
    written, a memory limit no layout meets is the located error."""
    lay = tmp_path / "auto.json"
    # the machine as processes (no shared gathers, no stacked GEMMs: passes/
    # step_cost.c), where a model-parallel layout wins and is written; on the
    # default virtual-mesh machine DataParallel wins, which is no LayoutMap
    machine = tmp_path / "procs.json"
    machine.write_text('{"name": "processes", "sync_s": 1e-9, "shared_gathers": false}\n')
    plan = kdc.compile(ex(root, "model.json"), weights=ex(root, "weights.safetensors"),
                       mesh=kdc.DeviceMesh((2, 4), ("data", "model")), layout="auto",
                       write_layout=str(lay), batch_size=16, machine=str(machine))
    assert "--layout auto: chose " in plan.warnings
    rules = json.loads(lay.read_text())["layout_map"]
    assert any("model" in v for v in rules.values())
    x = np.load(ex(root, "input.npy"))
    want = np.load(ex(root, "expected.npy"))
    np.testing.assert_allclose(plan.predict(x), want, rtol=1e-4, atol=1e-5)
    with pytest.raises(kdc.KdcError, match="the smallest peak found is"):
        kdc.compile(ex(root, "model.json"), weights=ex(root, "weights.safetensors"),
                    mesh=kdc.DeviceMesh((2, 4), ("data", "model")), layout="auto",
                    memory_per_device=1024, batch_size=16)
    with pytest.raises(kdc.KdcError, match="expected \"auto\""):
        kdc.compile(ex(root, "model.json"), mesh=kdc.DeviceMesh((8,), ("data",)),
                    layout="fast", batch_size=8)
