#!/usr/bin/env python3
"""The peers a Keras user on a CPU would pick instead of kdc, timed on one
Keras 3 model JSON (bench/compare.py runs this and bench_plan in one run):

  keras_jax   Keras 3 on JAX: model.fit's compiled train step (per step of an
              epoch of fit, verbose 0) and predict_on_batch;
  jax         plain JAX of the same math: jax.jit over the model's
              stateless_call, jax.value_and_grad and an Adam update written
              in jax.numpy (what XLA makes of the step, without Keras' loop);
  torch       PyTorch 2 eager, the same architecture written in torch.nn
              (known models only: see TORCH_MODELS);
  torch_compile  the same under torch.compile (inductor), when it runs.

Every step is Adam (Keras defaults, learning rate 1e-3) on categorical
cross-entropy of the softmax outputs against one-hot labels, as
bench_plan's targets.  A model named *_bf16 is Keras' mixed_bfloat16 (the
policies are in its JSON, so Keras/JAX compute in bf16); PyTorch runs its
f32 counterpart under torch.autocast("cpu", bfloat16).  Prints one JSON
object of medians in ms.

usage: peers.py MODEL.json --batch B [--name NAME] [--peers a,b,...]
                [--distribution MESH:LAYOUT.json] [--cold] [--reps N]
  --distribution 2x4:layout.json  Keras ModelParallel on that mesh (set
      XLA_FLAGS=--xla_force_host_platform_device_count=N before running)
  --cold   only the first jitted call of the training step (then, in the
      same process, of predict): compile time as a user sees it
  --cold-predict   with --cold (jax only): the first jitted predict alone, in
      a process that compiled nothing before it
"""
import argparse
import contextlib
import json
import os
import sys
import time

os.environ.setdefault("KERAS_BACKEND", "jax")

ap = argparse.ArgumentParser()
ap.add_argument("model")
ap.add_argument("--batch", type=int, required=True)
ap.add_argument("--name", default="")
ap.add_argument("--peers", default="keras_jax,jax,torch,torch_compile")
ap.add_argument("--distribution", default="")
ap.add_argument("--cold", action="store_true")
ap.add_argument("--cold-predict", action="store_true")
ap.add_argument("--reps", type=int, default=11)
args = ap.parse_args()

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from timing import median_ms  # noqa: E402


def make_data(shape, dtype, classes, batch):
    """Inputs and one-hot labels as bench_plan makes them."""
    n = int(np.prod((batch,) + tuple(shape[1:])))
    i = np.arange(n, dtype=np.uint64)
    if "int" in str(dtype):
        x = ((i * 7) % 10).astype(dtype)
    else:
        x = (((i * 2654435761) % 1000) / 1000.0).astype(np.float32)
    x = x.reshape((batch,) + tuple(shape[1:]))
    y = np.eye(classes, dtype=np.float32)[np.arange(batch) % classes]
    return x, y


def keras_model():
    import keras
    if args.distribution:
        mesh_s, layout_path = args.distribution.split(":", 1)
        shape = tuple(int(d) for d in mesh_s.split("x"))
        lay = json.load(open(layout_path))
        names = ["data", "model"][:len(shape)] if len(shape) <= 2 else \
            ["data", "model"] + [f"axis{k}" for k in range(2, len(shape))]
        mesh = keras.distribution.DeviceMesh(shape, names, keras.distribution.list_devices())
        lm = keras.distribution.LayoutMap(mesh)
        for k, v in lay["layout_map"].items():
            lm[k] = tuple(v)
        keras.distribution.set_distribution(keras.distribution.ModelParallel(
            layout_map=lm, batch_dim_name=lay.get("batch_dim_name", "data")))
    m = keras.models.model_from_json(open(args.model).read())
    return keras, m


def run_keras_jax(res):
    keras, m = keras_model()
    classes = m.outputs[0].shape[-1]
    x, y = make_data(m.inputs[0].shape, m.inputs[0].dtype, classes, args.batch)
    m.compile(optimizer=keras.optimizers.Adam(1e-3), loss="categorical_crossentropy")
    if args.cold:
        t0 = time.perf_counter()
        m.train_on_batch(x, y)
        res["keras_jax_first_step_s"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        m.predict_on_batch(x)
        res["keras_jax_first_predict_s"] = time.perf_counter() - t0
        return
    steps = 20
    xs, ys = np.concatenate([x] * steps), np.concatenate([y] * steps)
    m.fit(xs, ys, batch_size=args.batch, epochs=1, verbose=0, shuffle=False)  # compiles
    ts = []
    for _ in range(max(3, args.reps // 2)):
        t0 = time.perf_counter()
        m.fit(xs, ys, batch_size=args.batch, epochs=1, verbose=0, shuffle=False)
        ts.append((time.perf_counter() - t0) / steps)
    ts.sort()
    res["keras_jax_step_ms"] = 1e3 * ts[len(ts) // 2]
    res["keras_jax_forward_ms"] = median_ms(lambda: m.predict_on_batch(x), args.reps)


def run_jax(res):
    import jax
    import jax.numpy as jnp
    keras, m = keras_model()
    classes = m.outputs[0].shape[-1]
    x, y = make_data(m.inputs[0].shape, m.inputs[0].dtype, classes, args.batch)
    tr = [v.value for v in m.trainable_variables]
    ntr = [v.value for v in m.non_trainable_variables]

    def loss_fn(tr, ntr, x, y):
        p, ntr2 = m.stateless_call(tr, ntr, x, training=True)
        p = jnp.clip(p / jnp.sum(p, -1, keepdims=True), 1e-7, 1 - 1e-7)
        return -jnp.mean(jnp.sum(y * jnp.log(p), -1)), ntr2

    b1, b2, lr, eps = 0.9, 0.999, 1e-3, 1e-7

    @jax.jit
    def step(tr, ntr, mom, vel, t, x, y):
        (loss, ntr2), g = jax.value_and_grad(loss_fn, has_aux=True)(tr, ntr, x, y)
        t = t + 1
        a = lr * jnp.sqrt(1 - b2 ** t) / (1 - b1 ** t)
        mom = [b1 * mm + (1 - b1) * gg for mm, gg in zip(mom, g)]
        vel = [b2 * vv + (1 - b2) * gg * gg for vv, gg in zip(vel, g)]
        tr = [w - a * mm / (jnp.sqrt(vv) + eps) for w, mm, vv in zip(tr, mom, vel)]
        return tr, ntr2, mom, vel, t, loss

    fwd = jax.jit(lambda tr, ntr, x: m.stateless_call(tr, ntr, x, training=False)[0])
    state = [tr, ntr, [jnp.zeros_like(w) for w in tr], [jnp.zeros_like(w) for w in tr],
             jnp.float32(0)]
    xd, yd = jnp.asarray(x), jnp.asarray(y)

    def one_step():
        out = step(*state, xd, yd)
        state[:] = out[:5]
        out[5].block_until_ready()

    def one_fwd():
        fwd(tr, ntr, xd).block_until_ready()

    if args.cold and args.cold_predict:
        t0, c0 = time.perf_counter(), time.process_time()
        one_fwd()
        res["jax_first_predict_s"] = time.perf_counter() - t0
        res["jax_first_predict_cpu_s"] = time.process_time() - c0
        return
    if args.cold:
        t0, c0 = time.perf_counter(), time.process_time()
        one_step()
        res["jax_first_step_s"] = time.perf_counter() - t0
        res["jax_first_step_cpu_s"] = time.process_time() - c0  # every thread of the process
        t0, c0 = time.perf_counter(), time.process_time()
        one_fwd()
        res["jax_first_predict_s"] = time.perf_counter() - t0
        res["jax_first_predict_cpu_s"] = time.process_time() - c0
        return
    res["jax_step_ms"] = median_ms(one_step, args.reps)
    res["jax_forward_ms"] = median_ms(one_fwd, args.reps)


def torch_module(name, torch):
    """The torch.nn counterpart of a benchmark model, or None."""
    nn = torch.nn
    if name == "mnist_mlp":
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 200), nn.ReLU(), nn.Dropout(0.4),
                             nn.Linear(200, 10), nn.Softmax(-1)), "nhwc"
    if name == "mlp_4096":
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 4096, bias=False), nn.ReLU(),
                             nn.Linear(4096, 4096, bias=False), nn.ReLU(),
                             nn.Linear(4096, 10), nn.Softmax(-1)), "nhwc"
    if name == "lstm_128":
        class Lstm(nn.Module):
            def __init__(self):
                super().__init__()
                self.emb = nn.Embedding(1000, 64)
                self.l1 = nn.LSTM(64, 128, batch_first=True)
                self.l2 = nn.LSTM(128, 64, batch_first=True)
                self.head = nn.Linear(64, 3)

            def forward(self, x):
                h, _ = self.l1(self.emb(x))
                _, (h2, _) = self.l2(torch.flip(h, [1]))  # go_backwards
                return torch.softmax(self.head(h2[-1]), -1)
        return Lstm(), "ids"
    return None, None


def run_torch(res, compiled):
    import torch
    torch.set_num_threads(os.cpu_count())
    torch.manual_seed(0)
    name = args.name
    # a "_bf16" model (Keras mixed_bfloat16) runs in torch.autocast(bfloat16): the matmuls
    # in bf16 (oneDNN, AMX where the CPU has it), the parameters and Adam in f32
    bf16 = name.endswith("_bf16")
    name = name[:-len("_bf16")] if bf16 else name
    cast = (lambda: torch.autocast("cpu", dtype=torch.bfloat16)) if bf16 else \
        contextlib.nullcontext
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import torch_blocks
    if name == "transformer_512":
        model, kind = torch_blocks.Block(), "seq"
    elif name == "cnn_64":
        model, kind = torch_blocks.cnn(), "nchw"
    else:
        model, kind = torch_module(name, torch)
    if model is None:
        res["torch_note"] = f"no torch counterpart for {name!r}"
        return
    import keras
    km = keras.models.model_from_json(open(args.model).read())
    classes = km.outputs[0].shape[-1]
    x, y = make_data(km.inputs[0].shape, km.inputs[0].dtype, classes, args.batch)
    x = torch.from_numpy(x)
    if kind == "nchw":
        x = x.permute(0, 3, 1, 2).contiguous()
    if kind == "ids":
        x = x.long()
    y = torch.from_numpy(y)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, eps=1e-7)
    fwd_model = model
    if compiled:
        try:
            fwd_model = torch.compile(model)
        except Exception as e:  # noqa: BLE001
            res["torch_compile_note"] = f"torch.compile failed: {e}"[:200]
            return

    def loss_of(p):
        p = torch.clamp(p / p.sum(-1, keepdim=True), 1e-7, 1 - 1e-7)
        return -(y * torch.log(p)).sum(-1).mean()

    def step():
        model.train()
        opt.zero_grad(set_to_none=True)
        with cast():
            p = fwd_model(x)
        loss_of(p.float()).backward()
        opt.step()

    def forward():
        model.eval()
        with torch.no_grad(), cast():
            fwd_model(x)

    key = "torch_compile" if compiled else "torch"
    try:
        if args.cold:
            t0 = time.perf_counter()
            step()
            res[f"{key}_first_step_s"] = time.perf_counter() - t0
            return
        res[f"{key}_step_ms"] = median_ms(step, args.reps)
        res[f"{key}_forward_ms"] = median_ms(forward, args.reps)
    except Exception as e:  # noqa: BLE001  (inductor needs a working C++ toolchain)
        res[f"{key}_note"] = f"{type(e).__name__}: {e}"[:200]


res = {"model": args.name or os.path.basename(args.model), "batch": args.batch}
for peer in args.peers.split(","):
    if peer == "keras_jax":
        run_keras_jax(res)
    elif peer == "jax":
        run_jax(res)
    elif peer == "torch":
        run_torch(res, False)
    elif peer == "torch_compile":
        run_torch(res, True)
    else:
        sys.exit(f"peers.py: unknown peer {peer!r}")
print(json.dumps(res))
