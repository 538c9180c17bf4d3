"""A live keras.Model as kdc reads it: its Keras 3 config JSON and its
weights in a safetensors file named by variable path (docs/python.md)."""
import json
import os
import struct

import numpy as np

_ST_DTYPES = {np.dtype("float32"): "F32", np.dtype("float64"): "F64",
              np.dtype("float16"): "F16", np.dtype("int32"): "I32", np.dtype("int64"): "I64",
              np.dtype("int8"): "I8", np.dtype("uint8"): "U8", np.dtype("bool"): "BOOL"}


def write_safetensors(path, tensors):
    """tensors: list of (name, array); written in that order."""
    header, offset, blobs = {}, 0, []
    for name, a in tensors:
        a = np.ascontiguousarray(a)
        if a.dtype not in _ST_DTYPES:
            a = a.astype(np.float32)
        b = a.tobytes()
        header[name] = {"dtype": _ST_DTYPES[a.dtype], "shape": list(a.shape),
                        "data_offsets": [offset, offset + len(b)]}
        offset += len(b)
        blobs.append(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def is_keras_model(obj):
    return any(c.__module__.startswith("keras") and c.__name__ in ("Model", "Functional",
                                                                    "Sequential")
               for c in type(obj).__mro__)


def serialize(model, directory):
    """(model JSON text, weights path, variable paths in model.weights order)."""
    text = model.to_json()
    names, tensors = [], []
    for v in model.weights:
        names.append(v.path)
        tensors.append((v.path, np.asarray(v.numpy() if hasattr(v, "numpy") else v)))
    if len(set(names)) != len(names):
        raise ValueError("kdc: the model has two variables with one path; give its layers "
                         "unique names")
    wpath = os.path.join(directory, "weights.safetensors")
    write_safetensors(wpath, tensors)
    return text, wpath, names


def input_names(model):
    return [getattr(t, "name", None) or f"input_{i}" for i, t in enumerate(model.inputs)]


_LOSS_ALIASES = {"mse": "mean_squared_error", "mae": "mean_absolute_error"}


def _snake(name):
    out = []
    for i, ch in enumerate(name):
        if ch.isupper() and i and not name[i - 1].isupper():
            out.append("_")
        out.append(ch.lower())
    return "".join(out)


def loss_spec(loss):
    """(kdc --loss text, from_logits or None) from a string, a Keras loss
    object or function, or a list / dict of them (per output)."""
    if loss is None:
        return None, None
    if isinstance(loss, (list, tuple)):
        parts = [loss_spec(l) for l in loss]
        return ",".join(p[0] or "none" for p in parts), _one_logits(parts)
    if isinstance(loss, dict):
        parts = {k: loss_spec(l) for k, l in loss.items()}
        return (",".join(f"{k}={p[0] or 'none'}" for k, p in parts.items()),
                _one_logits(list(parts.values())))
    if isinstance(loss, str):
        return _LOSS_ALIASES.get(loss, loss), None
    if callable(loss) and not hasattr(loss, "get_config"):
        return getattr(loss, "__name__", str(loss)), None
    cfg = loss.get_config() if hasattr(loss, "get_config") else {}
    name = _snake(type(loss).__name__)
    return name, cfg.get("from_logits")


def _one_logits(parts):
    vals = {p[1] for p in parts if p[1] is not None}
    if len(vals) > 1:
        raise ValueError("kdc: from_logits must be the same for every output's loss")
    return vals.pop() if vals else None


def optimizer_spec(opt):
    """(name, learning_rate or None) from a string or a Keras optimizer."""
    if opt is None:
        return None, None
    if isinstance(opt, str):
        return opt.lower(), None
    name = type(opt).__name__.lower()
    lr = getattr(opt, "learning_rate", None)
    try:
        lr = float(np.asarray(lr))
    except (TypeError, ValueError):
        raise ValueError(f"kdc: the optimizer's learning_rate {lr!r} is not a number "
                         "(schedules: compile a model file with a compile_config)") from None
    return name, lr
