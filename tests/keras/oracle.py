"""Shared helpers of the Keras oracle suite (tests/keras).

Keras 3 on JAX (8 virtual CPU devices, set up by conftest.py) is the
reference; kdc is driven through its command line (KDC_BIN).  Models go to
kdc as Keras 3 `to_json()` plus a safetensors file named by Keras variable
path (docs/frontend.md), so both sides start from the same weights.
"""
import json
import os
import struct
import subprocess

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KDC = os.environ.get("KDC_BIN", os.path.join(ROOT, "build", "tools", "kdc"))
EXAMPLES = os.path.join(ROOT, "examples")

_ST_DTYPES = {np.dtype("float32"): "F32", np.dtype("int32"): "I32",
              np.dtype("int64"): "I64", np.dtype("float64"): "F64"}
_ST_NP = {v: k for k, v in _ST_DTYPES.items()}


def write_safetensors(path, tensors):
    """Writes {name: array} as safetensors (the format's spec: an 8-byte
    little-endian header length, a JSON header, the raw bytes)."""
    header, blobs, off = {}, [], 0
    for name, a in tensors.items():
        a = np.asarray(a, order="C")  # (ascontiguousarray makes 0-d arrays 1-d)
        if a.dtype not in _ST_DTYPES:
            a = a.astype(np.float32)
        b = a.tobytes()
        header[name] = {"dtype": _ST_DTYPES[a.dtype], "shape": list(a.shape),
                        "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        lo, hi = e["data_offsets"]
        out[name] = np.frombuffer(data[8 + n + lo:8 + n + hi],
                                  dtype=_ST_NP[e["dtype"]]).reshape(e["shape"])
    return out


def model_weights(model):
    """{variable path: value} of every Keras variable (trainable or not)."""
    return {v.path: np.asarray(v.numpy()) for v in model.weights}


def match_paths(keras_paths, names):
    """{Keras variable path: name in `names`}: equal, else the one name that
    ends with "/" + path.  A model Keras deserializes (model_from_json)
    creates nested layers' variables outside the wrapper's name scope
    (`forward_lstm/lstm_cell/kernel`, `d1/kernel` in a Sequential) where a
    model built in Python, and kdc, put them under it
    (`bidirectional/forward_lstm/...`, `sequential/d1/kernel`)."""
    out = {}
    for p in keras_paths:
        if p in names:
            out[p] = p
            continue
        cands = [n for n in names if n.endswith("/" + p)]
        assert len(cands) == 1, "Keras variable %s: candidates %s" % (p, cands)
        out[p] = cands[0]
    return out


def set_weights_by_path(model, weights):
    m = match_paths([v.path for v in model.weights], list(weights))
    for v in model.weights:
        v.assign(weights[m[v.path]])
    # Layers that cache tensors computed from their variables at build
    # (Normalization's mean and variance) refresh them here, as Keras'
    # weight loading does.
    for layer in model._flatten_layers():
        if hasattr(layer, "finalize_state") and layer.built:
            layer.finalize_state()


def assert_weights_close(kdc_weights, keras_weights, rtol, atol, what, constants=()):
    """kdc's saved training state against Keras' weights after fit.  `constants`:
    non-trainable paths training never writes (Normalization's mean), which
    kdc's checkpoint does not hold."""
    keras_weights = {p: v for p, v in keras_weights.items()
                     if p not in constants or any(n.endswith(p) for n in kdc_weights)}
    m = match_paths(list(keras_weights), list(kdc_weights))
    for p, v in keras_weights.items():
        assert_close(kdc_weights[m[p]], v, rtol, atol, "%s %s" % (what, p))


def export(model, d, weights=None):
    """Writes d/model.json (Keras 3 to_json) and d/weights.safetensors."""
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "model.json"), "w") as f:
        f.write(model.to_json())
    write_safetensors(os.path.join(d, "weights.safetensors"),
                      weights if weights is not None else model_weights(model))
    return os.path.join(d, "model.json"), os.path.join(d, "weights.safetensors")


def run_kdc(*args, check=True):
    p = subprocess.run([KDC, *map(str, args)], capture_output=True, text=True)
    if check and p.returncode != 0:
        raise AssertionError("kdc %s: exit %d\n%s" % (" ".join(map(str, args)),
                                                      p.returncode, p.stderr[-4000:]))
    return p


def mesh_args(mesh, axes=None, layout=None, d=None):
    """kdc compile options for a mesh shape (tuple), its axis names and a
    layout dict {"batch_dim_name", "layout_map"} (written to d/layout.json)."""
    args = []
    if mesh is not None:
        args += ["--mesh", "x".join(map(str, mesh))]
        if axes is not None:
            args += ["--axes", ",".join(axes)]
    if layout is not None:
        p = os.path.join(d, "layout-%s.json" % "x".join(map(str, mesh)))
        with open(p, "w") as f:
            json.dump(layout, f)
        args += ["--layout", p]
    return args


def compile_plan(model_json, weights, out, batch, extra=()):
    run_kdc("compile", model_json, "--weights", weights, "--batch", batch,
            "-o", out, *extra)
    return out


def predict(plan, xs, d, tag="p", n_out=None):
    """kdc run: global arrays in, global arrays out (list)."""
    args = ["run", plan]
    for i, x in enumerate(xs):
        p = os.path.join(d, "%s_in%d.npy" % (tag, i))
        np.save(p, x)
        args += ["--input", p]
    outs = []
    n_out = plan_outputs(plan) if n_out is None else n_out
    for i in range(n_out):
        p = os.path.join(d, "%s_out%d.npy" % (tag, i))
        outs.append(p)
        args += ["--output", p]
    run_kdc(*args)
    return [np.load(p) for p in outs]


def plan_outputs(plan):
    """The number of outputs of a plan's predict (the ABI line of `kdc inspect`)."""
    for line in run_kdc("inspect", plan).stdout.splitlines():
        if line.startswith("{"):
            for fn in json.loads(line)["functions"]:
                if fn["name"] == "predict":
                    return len(fn["outputs"])
    raise AssertionError("kdc inspect %s: no predict function" % plan)


def fit(plan, xs, ys, d, epochs, batch_size, tag="f", extra=()):
    """kdc run --fit; returns (history dict, final weights by path)."""
    args = ["run", plan, "--fit", "--epochs", epochs, "--batch-size", batch_size,
            "--quiet"]
    for i, x in enumerate(xs):
        p = os.path.join(d, "%s_x%d.npy" % (tag, i))
        np.save(p, x)
        args += ["--x", p]
    for i, y in enumerate(ys):
        p = os.path.join(d, "%s_y%d.npy" % (tag, i))
        np.save(p, y)
        args += ["--y", p]
    hist = os.path.join(d, "%s_history.json" % tag)
    wts = os.path.join(d, "%s_final.safetensors" % tag)
    run_kdc(*args, "--history", hist, "--save-weights", wts, *extra)
    with open(hist) as f:
        h = json.load(f)
    return h, read_safetensors(wts)


def assert_close(got, want, rtol, atol, what):
    got = np.asarray(got, dtype=np.float64)
    want = np.asarray(want, dtype=np.float64)
    assert got.shape == want.shape, "%s: shape %s vs Keras %s" % (what, got.shape, want.shape)
    err = np.abs(got - want)
    bound = atol + rtol * np.abs(want)
    bad = err > bound
    if bad.any():
        i = np.unravel_index(np.argmax(err - bound), err.shape)
        raise AssertionError(
            "%s: %d of %d values differ from Keras; worst at %s: kdc %.9g Keras %.9g "
            "(|d| %.3g > %.3g + %.3g |ref|)" % (what, int(bad.sum()), bad.size, tuple(int(j) for j in i),
                                               got[i], want[i], err[i], atol, rtol))
