"""kdc.compile, kdc.load and kdc.Plan over the C API (docs/python.md)."""
import ctypes as C
import json
import math
import os
import sys
import tempfile

import numpy as np

from . import _model
from ._lib import lib, Array, TensorInfo, CompileOptions, RunOptions, FitOptions, \
    PROGRESS_FN, MAX_DIMS, MAX_METRICS, DESCRIBE_PLAN, DESCRIBE_COLLECTIVES, \
    DESCRIBE_SHARDING, DESCRIBE_EXPLAIN, DESCRIBE_JSON
from .distribution import resolve
from .errors import KdcError

_NP_TO_KDC = {np.dtype("float32"): 0, np.dtype("float64"): 1, np.dtype("float16"): 2,
              np.dtype("int32"): 4, np.dtype("int64"): 5, np.dtype("int8"): 6,
              np.dtype("uint8"): 7, np.dtype("bool"): 8}


def _check(st):
    """Raises the KdcError of a non-NULL kdc_status (and frees it)."""
    if not st:
        return
    msg = lib.kdc_status_message(st).decode("utf-8", "replace")
    code = lib.kdc_code_name(lib.kdc_status_code(st)).decode()
    lib.kdc_status_free(st)
    raise KdcError(msg, code)


def _text(fn, *args):
    out = C.c_void_p()
    _check(fn(*args, C.byref(out)))
    try:
        return C.string_at(out.value).decode("utf-8", "replace") if out.value else ""
    finally:
        lib.kdc_free(out)


def _b(s):
    return None if s is None else os.fsencode(s) if isinstance(s, os.PathLike) else \
        str(s).encode()


def _info(ti):
    return {"name": ti.name.decode(), "dtype": lib.kdc_array_dtype_name(ti.dtype).decode(),
            "shape": tuple(ti.dims[d] for d in range(ti.rank))}


def _as_array(x, what):
    """A C-contiguous array kdc takes (numeric; no copy when it already is)
    and its kdc_array."""
    if x is None:
        raise KdcError(f"{what}: expected an array, got None")
    try:
        a = np.asarray(x)
    except Exception as e:  # ragged lists and the like
        raise KdcError(f"{what}: not an array ({e})") from None
    if a.dtype not in _NP_TO_KDC:
        if a.dtype.kind in "iu":
            a = a.astype(np.int64)
        elif a.dtype.kind == "f":
            a = a.astype(np.float32)
        else:
            raise KdcError(f"{what}: dtype {a.dtype} is not numeric")
    if a.ndim < 1 or a.ndim > MAX_DIMS:
        raise KdcError(f"{what}: rank {a.ndim} (expected 1 to {MAX_DIMS}, rows first)")
    a = np.ascontiguousarray(a)
    s = Array()
    s.data = a.ctypes.data
    s.dtype = _NP_TO_KDC[a.dtype]
    s.rank = a.ndim
    for d in range(a.ndim):
        s.dims[d] = a.shape[d]
    s.name = what.encode()
    return a, s


def _arrays(items, whats):
    keep, structs = [], (Array * max(1, len(items)))()
    for i, (x, what) in enumerate(zip(items, whats)):
        a, s = _as_array(x, what)
        keep.append(a)
        structs[i] = s
    return keep, structs


def _by_name(x, names, kind):
    """x as a list in |names| order: one array, a list / tuple, or a dict by name."""
    if isinstance(x, dict):
        missing = [n for n in names if n not in x]
        extra = [k for k in x if k not in names]
        if missing or extra:
            raise KdcError(f"{kind}: the plan takes {names}; "
                           + (f"missing {missing}" if missing else f"unknown {extra}"))
        return [x[n] for n in names]
    if isinstance(x, (list, tuple)):
        if len(x) != len(names):
            raise KdcError(f"{kind}: the plan takes {len(names)} ({names}), {len(x)} given")
        return list(x)
    if len(names) != 1:
        raise KdcError(f"{kind}: the plan takes {len(names)} ({names}): give a list or a dict")
    return [x]


class History:
    """Keras' History: ``history`` maps "loss", "<output>_loss", "val_..." to
    one float per epoch; ``batch_loss`` is every step's loss (kdc's)."""

    def __init__(self, history, epochs, params, batch_loss):
        self.history = history
        self.epoch = list(range(epochs))
        self.params = params
        self.batch_loss = batch_loss


class _Progress:
    """Keras' progress bar (keras.utils.Progbar) when Keras imports, else
    one plain line per epoch."""

    def __init__(self, verbose, epochs):
        self.verbose, self.epochs, self.bar = verbose, epochs, None
        self.progbar = None
        if verbose == 1:
            try:
                from keras.utils import Progbar
                self.progbar = Progbar
            except Exception:
                self.progbar = None

    def _logs(self, pr, names, val):
        logs = [("loss", pr.loss)]
        logs += [(names[j], pr.metrics[j]) for j in range(pr.n_metrics)]
        if val and not math.isnan(pr.val_loss):
            logs.append(("val_loss", pr.val_loss))
            if pr.val_metrics:
                logs += [("val_" + names[j], pr.val_metrics[j]) for j in range(pr.n_metrics)]
        return logs

    def batch(self, pr, names):
        if self.verbose != 1:
            return
        logs = self._logs(pr, names, False)
        if pr.step == 1 and self.progbar:
            print(f"Epoch {pr.epoch + 1}/{pr.epochs}")
            # the values are kdc's running means already: none averaged again
            self.bar = self.progbar(target=pr.steps,
                                    stateful_metrics=[k for k, _ in logs] + ["val_loss"] +
                                    ["val_" + n for n in names])
        if self.bar and pr.step < pr.steps:  # the last step's line is the epoch's
            self.bar.update(pr.step, values=logs)

    def epoch(self, pr, names):
        logs = self._logs(pr, names, True)
        if self.verbose == 1 and self.bar:
            self.bar.update(pr.steps, values=logs, finalize=True)
            self.bar = None
        elif self.verbose:
            ms = 1e3 * pr.seconds / max(1, pr.steps)
            text = " - ".join(f"{k}: {v:.4f}" for k, v in logs)
            print(f"Epoch {pr.epoch + 1}/{pr.epochs} - {pr.steps} steps - {ms:.0f}ms/step - "
                  f"{text}")
        sys.stdout.flush()


class Plan:
    """A compiled plan, loaded and ready: predict, fit, evaluate, weights."""

    def __init__(self, handle, *, model_text=None, model_path=None, weight_names=None,
                 initial_weights=None):
        self._h = handle
        self._trainer = None
        self._model_text = model_text
        self._model_path = model_path
        self._weight_names = weight_names
        self._initial = initial_weights or {}
        self.inputs = [self._tinfo(lib.kdc_plan_input, i)
                       for i in range(lib.kdc_plan_input_count(handle))]
        self.outputs = [self._tinfo(lib.kdc_plan_output, i)
                        for i in range(lib.kdc_plan_output_count(handle))]
        self.batch_size = lib.kdc_plan_batch(handle)
        self.warnings = lib.kdc_plan_warnings(handle).decode()

    def _tinfo(self, fn, i):
        ti = TensorInfo()
        _check(fn(self._h, i, C.byref(ti)))
        return _info(ti)

    def _handle(self):
        if not self._h:
            raise KdcError("the plan is closed")
        return self._h

    def close(self):
        """Frees the plan and its training state now (else when collected)."""
        if self._trainer:
            lib.kdc_trainer_free(self._trainer)
            self._trainer = None
        if self._h:
            lib.kdc_plan_free(self._h)
            self._h = None

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # ---- facts -------------------------------------------------------------

    @property
    def mesh(self):
        """{axis name: size} (empty: one device)."""
        h, out = self._handle(), {}
        for a in range(lib.kdc_plan_mesh_rank(h)):
            size = C.c_int64()
            name = lib.kdc_plan_mesh_axis(h, a, C.byref(size))
            out[name.decode()] = size.value
        return out

    @property
    def device_count(self):
        return lib.kdc_plan_device_count(self._handle())

    def _report(self):
        return json.loads(_text(lib.kdc_plan_describe, self._handle(), DESCRIBE_JSON, None))

    @property
    def collectives(self):
        """Every collective of every function: dicts with function, step,
        kind, axes, dtype, in/out shapes, group_size, bytes_per_device, groups."""
        return self._report()["collectives"]

    @property
    def memory(self):
        """Each device's peak memory in bytes: arena, weights,
        inputs_outputs, total (every device holds the same)."""
        r = self._report()
        return {"devices": r["devices"], **r["memory_per_device"]}

    def describe(self):
        """`kdc inspect` of the plan, as text."""
        return _text(lib.kdc_plan_describe, self._handle(), DESCRIBE_PLAN, None)

    def describe_collectives(self):
        return _text(lib.kdc_plan_describe, self._handle(), DESCRIBE_COLLECTIVES, None)

    def sharding(self, name):
        """How tensor |name| is laid out over the devices (text)."""
        return _text(lib.kdc_plan_describe, self._handle(), DESCRIBE_SHARDING, _b(name))

    def explain(self, name):
        """Why value |name| (weight path, input, output, layer) is sharded so."""
        return _text(lib.kdc_plan_describe, self._handle(), DESCRIBE_EXPLAIN, _b(name))

    def summary(self, print_fn=None):
        """Keras' model.summary() of the compiled model."""
        if self._model_text is not None:
            t = self._model_text.encode()
            text = _text(lib.kdc_model_summary, _b(self._model_path), t, len(t))
        elif self._model_path is not None:
            text = _text(lib.kdc_model_summary, _b(self._model_path), None, 0)
        else:
            text = self.describe()
        (print_fn or print)(text.rstrip("\n"))

    # ---- predict -----------------------------------------------------------

    def predict(self, x, batch_size=None, verbose=0):
        """Outputs for inputs |x| (an array, a list in input order, or a dict
        by input name), any number of rows: one array, or a list for several
        outputs.  |batch_size| must be None or the compiled batch."""
        h = self._handle()
        if batch_size not in (None, self.batch_size):
            raise KdcError(f"predict: batch_size {batch_size}: the plan is compiled for "
                           f"{self.batch_size} (kdc.compile(..., batch_size=...))")
        names = [i["name"] for i in self.inputs]
        xs = _by_name(x, names, "predict")
        keep, ins = _arrays(xs, [f"input \"{n}\"" for n in names])
        rows = keep[0].shape[0] if keep else 0
        outs, structs = [], (Array * max(1, len(self.outputs)))()
        for k, o in enumerate(self.outputs):
            if o["dtype"] == "bf16":
                raise KdcError(f"output \"{o['name']}\" is bf16, which numpy has not")
            a = np.empty((rows,) + tuple(o["shape"][1:]),
                         dtype=np.dtype(_DT[o["dtype"]]))
            outs.append(a)
            s = structs[k]
            s.data, s.dtype, s.rank = a.ctypes.data, _NP_TO_KDC[a.dtype], a.ndim
            for d in range(a.ndim):
                s.dims[d] = a.shape[d]
        _check(lib.kdc_plan_predict(h, ins, len(keep), structs, len(outs)))
        return outs[0] if len(outs) == 1 else outs

    # ---- training ------------------------------------------------------------

    def _train(self):
        h = self._handle()
        if not self._trainer:
            t = C.c_void_p()
            _check(lib.kdc_trainer_create(h, C.byref(t)))
            self._trainer = t
        return self._trainer

    def _data(self, x, y):
        t = self._train()
        n, n_in = lib.kdc_trainer_data_count(t), lib.kdc_trainer_input_count(t)
        infos = []
        for i in range(n):
            ti = TensorInfo()
            _check(lib.kdc_trainer_data(t, i, C.byref(ti)))
            infos.append(_info(ti))
        in_names = [i["name"] for i in infos[:n_in]]
        label_names = [i["name"] for i in infos[n_in:]]
        if y is None:
            raise KdcError("fit/evaluate: y (the labels) is required")
        items = _by_name(x, in_names, "x") + _by_name(y, label_names, "y")
        whats = [f"x \"{n}\"" for n in in_names] + [f"y \"{n}\"" for n in label_names]
        keep, structs = _arrays(items, whats)
        return t, keep, structs

    def _metric_names(self, t):
        return [lib.kdc_trainer_metric_name(t, j).decode()
                for j in range(lib.kdc_trainer_metric_count(t))]

    def fit(self, x=None, y=None, epochs=1, batch_size=None, verbose="auto",
            validation_split=0.0, shuffle=True, seed=0, initial_epoch=0):
        """Keras' Model.fit: |epochs| over the rows in steps of |batch_size|
        (at most the compiled batch; a last partial step is exact), the last
        |validation_split| of the rows held out.  Returns a History.
        |shuffle| draws kdc's own permutation from |seed| (not Keras')."""
        if initial_epoch:
            raise KdcError("fit: initial_epoch is not supported")
        t, keep, structs = self._data(x, y)
        o = FitOptions()
        lib.kdc_fit_options_init(C.byref(o))
        if not isinstance(epochs, int) or epochs < 0:
            raise KdcError(f"fit: epochs {epochs!r}: expected an integer >= 0")
        o.epochs = epochs
        o.batch_size = _batch(batch_size)
        o.shuffle = 1 if shuffle else 0
        o.seed = int(seed)
        o.validation_split = float(validation_split)
        verbose = 1 if verbose == "auto" else int(verbose)
        names = self._metric_names(t)
        prog = _Progress(verbose, epochs)
        cb_b = PROGRESS_FN(lambda u, p: prog.batch(p.contents, names))
        cb_e = PROGRESS_FN(lambda u, p: prog.epoch(p.contents, names))
        if verbose:
            o.on_batch, o.on_epoch = cb_b, cb_e
        hist = C.c_void_p()
        st = lib.kdc_trainer_fit(t, structs, len(keep), C.byref(o), C.byref(hist))
        try:
            _check(st)
            return _history(hist, {"epochs": epochs, "steps": None, "verbose": verbose})
        finally:
            lib.kdc_history_free(hist)

    def train_on_batch(self, x, y):
        """One optimizer step on at most the compiled batch; the loss before it."""
        t, keep, structs = self._data(x, y)
        loss = C.c_double()
        _check(lib.kdc_trainer_step(t, structs, len(keep), C.byref(loss)))
        return loss.value

    def evaluate(self, x=None, y=None, batch_size=None, verbose="auto", return_dict=False):
        """Keras' Model.evaluate: the mean loss (and each output's loss for a
        model trained on several outputs, as Keras lists them)."""
        t, keep, structs = self._data(x, y)
        loss = C.c_double()
        m = (C.c_double * MAX_METRICS)()
        _check(lib.kdc_trainer_evaluate(t, structs, len(keep), _batch(batch_size),
                                        C.byref(loss), m))
        names = self._metric_names(t)
        if return_dict:
            return {"loss": loss.value, **{n: m[j] for j, n in enumerate(names)}}
        return loss.value if not names else [loss.value] + [m[j] for j in range(len(names))]

    # ---- weights -------------------------------------------------------------

    def _state(self):
        t = self._train()
        out = {}
        for k in range(lib.kdc_trainer_state_count(t)):
            ti, w = TensorInfo(), C.c_int()
            _check(lib.kdc_trainer_state(t, k, C.byref(ti), C.byref(w)))
            out[ti.name.decode()] = (_info(ti), bool(w.value))
        return out

    @property
    def weight_names(self):
        """Variable paths in Keras' model.weights order (the live model's when
        compiled from one, else the plan's weight order)."""
        if self._weight_names is not None:
            return list(self._weight_names)
        return [n for n, (_, w) in self._state().items() if w]

    def get_weight(self, name):
        """The current value of variable |name|, gathered from the devices."""
        if not lib.kdc_plan_has_training(self._handle()):
            if name in self._initial:
                return self._initial[name].copy()
            raise KdcError(f"weight \"{name}\": the plan has no training state (compile it with "
                           "a loss) and was not compiled from a live model")
        t = self._train()
        state = self._state()
        if name not in state:
            if name in self._initial:  # a variable training never changes
                return self._initial[name].copy()
            raise KdcError(f"weight \"{name}\": the plan has no state tensor of that name")
        info = state[name][0]
        a = np.empty(info["shape"], dtype=np.dtype(_DT[info["dtype"]]))
        _, s = _as_array(a, name)
        s.data = a.ctypes.data
        _check(lib.kdc_trainer_get(t, _b(name), C.byref(s)))
        return a

    def set_weight(self, name, value):
        t = self._train()
        state = self._state()
        if name not in state:
            raise KdcError(f"weight \"{name}\": the plan has no state tensor of that name")
        info = state[name][0]
        a = np.asarray(value)
        if a.dtype != np.dtype(_DT[info["dtype"]]):
            a = a.astype(_DT[info["dtype"]])
        keep, s = _as_array(a, name)
        _check(lib.kdc_trainer_set(t, _b(name), C.byref(s)))

    def get_weights(self):
        """Every weight, in Keras' model.weights order (weight_names)."""
        return [self.get_weight(n) for n in self.weight_names]

    def set_weights(self, weights):
        names = self.weight_names
        weights = list(weights)
        if len(weights) != len(names):
            raise KdcError(f"set_weights: {len(weights)} arrays for {len(names)} weights")
        for n, w in zip(names, weights):
            self.set_weight(n, w)

    def save_weights(self, filepath, optimizer=False):
        """The trained weights in the global layout (any mesh loads them):
        "*.weights.h5" as Keras 3's save_weights writes it (Keras'
        load_weights reads it; the optimizer's variables too when
        |optimizer|), or "*.safetensors", every state tensor named by Keras
        variable path (weights and optimizer state)."""
        path = str(filepath)
        if path.endswith(".weights.h5"):
            _check(lib.kdc_trainer_save_keras(self._train(), _b(filepath), 1 if optimizer else 0))
        elif path.endswith(".safetensors"):
            _check(lib.kdc_trainer_save(self._train(), _b(filepath)))
        else:
            raise KdcError(f"save_weights: \"{path}\": expected a .weights.h5 or .safetensors "
                           f"file name")

    def load_weights(self, filepath):
        """The weights of a .safetensors checkpoint (save_weights, `kdc run
        --fit --save-weights`, any mesh), as Keras' load_weights: the
        optimizer state stays; load_checkpoint restores it too."""
        _check(lib.kdc_trainer_load_weights(self._train(), _b(filepath)))

    def load_checkpoint(self, filepath):
        """Every state tensor of a checkpoint: weights and optimizer state."""
        _check(lib.kdc_trainer_load(self._train(), _b(filepath)))

    def save(self, filepath):
        """"*.keras": a Keras 3 archive of the trained model (config with its
        compile_config, metadata, weights and optimizer variables) that
        keras.saving.load_model() opens (a training plan of a Keras 3
        config); any other name: the plan file (kdc.load reads it)."""
        if str(filepath).endswith(".keras"):
            _check(lib.kdc_trainer_save_keras(self._train(), _b(filepath), 1))
            return
        _check(lib.kdc_plan_save(self._handle(), _b(filepath)))


_DT = {"f32": "float32", "f64": "float64", "f16": "float16", "i32": "int32", "i64": "int64",
       "i8": "int8", "u8": "uint8", "bool": "bool"}


def _batch(b):
    if b is None:
        return 0
    if not isinstance(b, (int, np.integer)) or b < 1:
        raise KdcError(f"batch_size {b!r}: expected a positive integer")
    return int(b)


def _history(h, params):
    epochs = lib.kdc_history_epochs(h)
    steps = lib.kdc_history_steps(h)
    out = {}
    for k in range(lib.kdc_history_key_count(h)):
        v = lib.kdc_history_values(h, k)
        out[lib.kdc_history_key(h, k).decode()] = [v[e] for e in range(epochs)]
    bl = lib.kdc_history_batch_loss(h)
    params["steps"] = steps
    return History(out, epochs, params, [bl[i] for i in range(epochs * steps)])


def _run_options(threads, cache_dir):
    ro = RunOptions()
    lib.kdc_run_options_init(C.byref(ro))
    ro.threads = int(threads or 0)
    ro.cache_dir = _b(cache_dir)
    return ro


def compile(model, *, distribution=None, mesh=None, layout_map=None, batch_size=32, loss=None,
            optimizer=None, learning_rate=None, from_logits=None, target="cpu", weights=None,
            seed=0, random_init=False, input_shapes=None, layout_match=None,
            no_shard_update=False, threads=0, cache_dir=None, matmul_precision="highest",
            layout=None, memory_per_device=None, objective=None, write_layout=None, machine=None):
    """Compiles |model| (a live keras.Model, or a path: Keras 3 / tf.keras
    JSON, TF.js model.json, and what else the C core reads) for |batch_size|
    rows over |distribution| (Keras' or kdc's DataParallel / ModelParallel)
    or |mesh| + |layout_map|, with training when |loss| is given (or the
    live model is compiled), and loads it.  |matmul_precision| "tf32" lets
    a CUDA plan's GEMMs use TF32 tensor cores (JAX's GPU default; "highest",
    the default, is fp32; no effect on the CPU).  |layout|="auto" with a
    mesh: kdc chooses the layout (`kdc compile --layout auto`:
    |memory_per_device| an int of bytes or "512MiB", |objective| "time" or
    "memory", |write_layout| a path for the chosen layout.json, |machine| a
    machine description file).  Returns a Plan."""
    if layout is not None and layout != "auto":
        raise KdcError(f"layout {layout!r}: expected \"auto\" (give a layout as layout_map=)")
    if layout == "auto" and (layout_map is not None or distribution is not None and
                             getattr(distribution, "layout_map", None) is not None):
        raise KdcError("layout=\"auto\" chooses the layout: give a mesh, not a layout_map")
    mesh_s, axes_s, layout_text = resolve(distribution, mesh, layout_map)
    if not isinstance(batch_size, (int, np.integer)) or isinstance(batch_size, bool) \
            or batch_size < 1:
        raise KdcError(f"batch_size {batch_size!r}: expected a positive integer")
    live = _model.is_keras_model(model)
    # a compiled live model with no loss given: the core reads its whole
    # compile_config (the optimizer's every setting, per-output losses)
    use_cc = live and loss is None and getattr(model, "compiled", False) and \
        getattr(model, "loss", None) is not None
    loss_s, logits = _model.loss_spec(loss)
    opt_s, lr = _model.optimizer_spec(optimizer)
    if learning_rate is not None:
        lr = learning_rate
    if from_logits is not None:
        logits = from_logits
    with tempfile.TemporaryDirectory(prefix="kdc-") as tmp:
        keep = []
        co = CompileOptions()
        lib.kdc_compile_options_init(C.byref(co))
        names = initial = text = path = None
        if live:
            text, wpath, names = _model.serialize(model, tmp, compile_config=use_cc)
            initial = {v.path: np.asarray(v.numpy()) for v in model.weights}
            tb = text.encode()
            keep.append(tb)
            co.model_text, co.model_text_len = tb, len(tb)
            co.model_path = b"model.json"
            if weights is None and not random_init:
                co.weights_path = wpath.encode()
        elif isinstance(model, (str, os.PathLike)):
            path = os.fspath(model)
            co.model_path = _b(path)
        else:
            raise KdcError(f"compile: model must be a keras.Model or a path, got "
                           f"{type(model).__name__}")
        if weights is not None:
            co.weights_path = _b(weights)
        co.random_init = 1 if random_init else 0
        co.seed = int(seed)
        co.batch = int(batch_size)
        co.batch_given = 1
        if input_shapes:
            shapes = [(f"{k}=" if k else "") + ",".join(str(int(d)) for d in v)
                      for k, v in (input_shapes.items() if isinstance(input_shapes, dict)
                                   else [(None, s) for s in input_shapes])]
            arr = (C.c_char_p * len(shapes))(*[s.encode() for s in shapes])
            keep.append(arr)
            co.input_shapes = C.cast(arr, C.POINTER(C.c_char_p))
            co.n_input_shapes = len(shapes)
        co.mesh, co.axes = _b(mesh_s), _b(axes_s)
        if layout_text is not None:
            lb = layout_text.encode()
            keep.append(lb)
            co.layout_text, co.layout_text_len = lb, len(lb)
            co.layout_path = b"layout_map"
        if layout == "auto":
            co.layout_path = b"auto"
        if memory_per_device is not None:
            co.memory_per_device = str(memory_per_device).encode()
        co.objective = _b(objective)
        co.write_layout_path = _b(write_layout)
        co.machine_path = _b(machine)
        co.layout_match = _b(layout_match)
        co.loss, co.optimizer = _b(loss_s), _b(opt_s)
        co.learning_rate = float(lr or 0.0)
        co.from_logits = 1 if logits else 0
        co.no_shard_update = 1 if no_shard_update else 0
        co.target = _b(target)
        co.matmul_precision = _b(matmul_precision)
        ro = _run_options(threads, cache_dir)
        h = C.c_void_p()
        _check(lib.kdc_compile(C.byref(co), C.byref(ro), C.byref(h)))
    plan = Plan(h, model_text=text, model_path=path if not live else "model.json",
                weight_names=names, initial_weights=initial)
    if plan.warnings:
        sys.stderr.write(plan.warnings)
    return plan


def load(path, *, threads=0, cache_dir=None):
    """Loads a plan file (`kdc compile -o` or Plan.save).  A plan is a
    program: load only plans you built or trust."""
    ro = _run_options(threads, cache_dir)
    h = C.c_void_p()
    _check(lib.kdc_plan_load(_b(path), C.byref(ro), C.byref(h)))
    return Plan(h)
