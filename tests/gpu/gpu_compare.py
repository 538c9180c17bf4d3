#!/usr/bin/env python3
"""The device check's comparisons (tests/gpu/device_check.sh), numpy only
(the GPU machine has no safetensors package: its format is read here).

  gpu_compare.py pred GPU.npy CPU.npy [TOL]   |gpu - cpu| <= TOL + TOL |cpu|
                                              (TOL 1e-4), integers exact
  gpu_compare.py hist GPU.json CPU.json [TOL] loss history, |a-b| <= TOL |b|
                                              per epoch (TOL 1e-3)
  gpu_compare.py weights GPU.st CPU.st [TOL]  every tensor of the CPU file,
                                              |a-b| <= TOL + TOL |b| (1e-3)
  gpu_compare.py onehot ROWS CLASSES OUT.npy  float32 one-hot of row % CLASSES
  gpu_compare.py json FIGURES.tsv OUT.json    "key<TAB>value" lines -> JSON
Prints one line, "PASS ..." or "FAIL ..." (the caller prefixes the check's
name); exit 0 / 1."""
import json
import sys

import numpy as np

DT = {"F32": np.float32, "F64": np.float64, "F16": np.float16, "I32": np.int32,
      "I64": np.int64, "U8": np.uint8, "I8": np.int8, "BOOL": np.bool_}


def safetensors(path):
    """{name: array} of a .safetensors file (8-byte header length, JSON, data)."""
    raw = open(path, "rb").read()
    n = int.from_bytes(raw[:8], "little")
    head = json.loads(raw[8:8 + n])
    out = {}
    for k, v in head.items():
        if k == "__metadata__":
            continue
        a, b = v["data_offsets"]
        out[k] = np.frombuffer(raw[8 + n + a:8 + n + b], dtype=DT[v["dtype"]]).reshape(v["shape"])
    return out


def done(ok, text):
    print(("PASS " if ok else "FAIL ") + text)
    sys.exit(0 if ok else 1)


def pred(a, b, tol):
    a, b = np.load(a), np.load(b)
    if a.shape != b.shape:
        done(False, f"shape {a.shape} vs cpu {b.shape}")
    if a.dtype.kind != "f":
        done(bool((a == b).all()), f"exact {a.dtype} n={a.size}")
    d = np.abs(a.astype(np.float64) - b)
    ok = bool((d <= tol + tol * np.abs(b)).all()) and bool(np.isfinite(a).all())
    rel = (d / np.maximum(np.abs(b), 1e-30)).max() if a.size else 0.0
    done(ok, f"max_abs={d.max() if a.size else 0:.3g} max_rel={rel:.3g} n={a.size} tol={tol:g}")


def hist(a, b, tol):
    a = np.array(json.load(open(a))["loss"], np.float64)
    b = np.array(json.load(open(b))["loss"], np.float64)
    ok = a.shape == b.shape and bool((np.abs(a - b) <= tol * np.abs(b)).all())
    done(ok, "gpu=" + ",".join(f"{v:.7g}" for v in a) + " cpu=" + ",".join(f"{v:.7g}" for v in b))


def weights(a, b, tol):
    a, b = safetensors(a), safetensors(b)
    bad, worst = [], 0.0
    for k, ref in b.items():
        if k not in a:
            bad.append(k + " missing")
            continue
        d = np.abs(a[k].astype(np.float64) - ref)
        worst = max(worst, float(d.max()) if d.size else 0.0)
        if not (d <= tol + tol * np.abs(ref.astype(np.float64))).all():
            bad.append(f"{k} max_abs={d.max():.3g}")
    done(not bad, f"{len(b)} tensors max_abs={worst:.3g} tol={tol:g} " + "; ".join(bad[:4]))


def to_json(tsv, out):
    res = {}
    for line in open(tsv):
        k, _, v = line.rstrip("\n").partition("\t")
        try:
            res[k] = json.loads(v)
        except ValueError:
            res[k] = v
    json.dump(res, open(out, "w"), indent=1, sort_keys=True)


mode = sys.argv[1]
if mode == "pred":
    pred(sys.argv[2], sys.argv[3], float(sys.argv[4]) if len(sys.argv) > 4 else 1e-4)
elif mode == "hist":
    hist(sys.argv[2], sys.argv[3], float(sys.argv[4]) if len(sys.argv) > 4 else 1e-3)
elif mode == "weights":
    weights(sys.argv[2], sys.argv[3], float(sys.argv[4]) if len(sys.argv) > 4 else 1e-3)
elif mode == "onehot":
    rows, classes = int(sys.argv[2]), int(sys.argv[3])
    np.save(sys.argv[4], np.eye(classes, dtype=np.float32)[np.arange(rows) % classes])
elif mode == "json":
    to_json(sys.argv[2], sys.argv[3])
else:
    sys.exit(f"gpu_compare.py: unknown mode {mode!r}")
