"""A live keras.Model as kdc reads it: its Keras 3 config JSON and its
weights in a safetensors file named by variable path (docs/python.md)."""
import json
import os
import struct

import numpy as np

from .errors import KdcError

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


def serialize(model, directory, compile_config=False):
    """(model JSON text, weights path, variable paths in model.weights order).
    With |compile_config|, the text carries model.get_compile_config() as a
    .keras config.json does, so the core reads the whole loss and optimizer
    configuration (momentum, betas, schedules, per-output losses)."""
    text = model.to_json()
    if compile_config:
        obj = json.loads(text)
        obj["compile_config"] = model.get_compile_config()
        text = json.dumps(obj)
    names, tensors = [], []
    for v in model.weights:
        names.append(v.path)
        tensors.append((v.path, np.asarray(v.numpy() if hasattr(v, "numpy") else v)))
    if len(set(names)) != len(names):
        raise KdcError("model: two variables have one path; give its layers unique names")
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
    if cfg.get("label_smoothing"):
        raise KdcError("loss: label_smoothing is not supported yet", "unsupported")
    if cfg.get("reduction", "sum_over_batch_size") != "sum_over_batch_size":
        raise KdcError(f"loss: reduction {cfg['reduction']!r}: only sum_over_batch_size is "
                       "supported", "unsupported")
    name = _snake(type(loss).__name__)
    return name, cfg.get("from_logits")


def _one_logits(parts):
    vals = {p[1] for p in parts if p[1] is not None}
    if len(vals) > 1:
        raise KdcError("loss: from_logits must be the same for every output's loss", "unsupported")
    return vals.pop() if vals else None


def optimizer_spec(opt):
    """(name, learning_rate or None) from a string or a Keras optimizer."""
    if opt is None:
        return None, None
    if isinstance(opt, str):
        return opt.lower(), None
    name = type(opt).__name__.lower()
    # only the name and the learning rate cross: refuse anything else set
    try:
        mine, dflt = opt.get_config(), type(opt)().get_config()
    except Exception:
        mine, dflt = {}, {}
    odd = [k for k in mine if k not in ("name", "learning_rate") and mine[k] != dflt.get(k)]
    if odd:
        raise KdcError(f"optimizer: {', '.join(odd)} differ from Keras' defaults and only the "
                       "name and learning rate are passed; compile() the live model with it and "
                       "leave loss=None (kdc then reads its whole compile_config)", "unsupported")
    lr = getattr(opt, "learning_rate", None)
    try:
        lr = float(np.asarray(lr))
    except (TypeError, ValueError):
        raise KdcError(f"optimizer: learning_rate {lr!r} is not a number (schedules: compile() "
                       "the live model with it and leave loss=None)", "unsupported") from None
    return name, lr
