#!/usr/bin/env python3
"""kdc's peers on one GPU, the shapes of tests/gpu/device_check.sh's kdc
timings (no Keras needed: the GPU machine has PyTorch and JAX only):

  mnist_b128        MNIST MLP 784-200(relu, no bias)-dropout 0.4-10 softmax, batch 128
  big_b256          784-4096-4096-10 (relu, no biases but the head), batch 256
  tblock512_b64     the transformer block of bench/torch_blocks.py (d 512,
                    8 heads, FFN 2048, seq 128), batch 64

One peer per process (JAX takes most of the GPU's memory when it starts):
  torch          PyTorch eager, fp32 (TF32 off): train step and forward
  torch_compile  the transformer's train step under torch.compile
  jax            jax.jit, data resident on the GPU, Adam in jax.numpy, at
                 each --precisions (highest = fp32 GEMMs, default = TF32 on
                 Ampere and later), plus the first jitted call (compile +
                 first step)
Train step: softmax outputs, categorical cross-entropy against one-hot
labels (row % 10), Adam (lr 1e-3, eps 1e-7); median ms of --reps after 5
warm-ups, every call synchronised.  Prints one JSON object.

usage: peers_gpu.py PEER [--models a,b] [--precisions highest,default] [--reps N] [--device cpu]"""
import argparse
import json
import math
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from timing import median_ms  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("peer", choices=["torch", "torch_compile", "jax"])
ap.add_argument("--models", default="mnist_b128,big_b256,tblock512_b64")
ap.add_argument("--precisions", default="highest,default")
ap.add_argument("--reps", type=int, default=20)
ap.add_argument("--device", default="cuda", help="cpu: device_check.sh's dry run only")
args = ap.parse_args()
MODELS = {"mnist_b128": ("mlp", [784, 200, 10], 128), "big_b256": ("mlp", [784, 4096, 4096, 10], 256),
          "tblock512_b64": ("block", None, 64)}
res = {}


def shape_of(name):
    kind, _, b = MODELS[name]
    return (b, 28, 28, 1) if kind == "mlp" else (b, 128, 512)


def run_torch(compiled):
    import torch
    from torch import nn
    from torch_blocks import Block
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.manual_seed(0)
    res["torch"] = torch.__version__
    dev = args.device
    if dev == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("torch.cuda.is_available() is False")
    res["torch_device"] = torch.cuda.get_device_name(0) if dev == "cuda" else dev
    sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
    key = "torch_compile" if compiled else "torch"
    for name in args.models.split(","):
        kind, sizes, b = MODELS[name]
        if compiled and kind != "block":
            continue
        if kind == "mlp":
            layers = [nn.Flatten()]
            for i in range(len(sizes) - 1):
                last = i == len(sizes) - 2
                layers.append(nn.Linear(sizes[i], sizes[i + 1], bias=last))
                layers.append(nn.Softmax(-1) if last else nn.ReLU())
                if sizes == [784, 200, 10] and i == 0:
                    layers.append(nn.Dropout(0.4))
            model = nn.Sequential(*layers).to(dev)
        else:
            model = Block().to(dev)
        x = torch.randn(*shape_of(name), device=dev)
        y = nn.functional.one_hot(torch.arange(b, device=dev) % 10, 10).float()
        opt = torch.optim.Adam(model.parameters(), lr=1e-3, eps=1e-7)
        fwd = torch.compile(model) if compiled else model

        def step():
            model.train()
            opt.zero_grad(set_to_none=True)
            p = torch.clamp(fwd(x), 1e-7, 1 - 1e-7)
            (-(y * torch.log(p)).sum(-1).mean()).backward()
            opt.step()
            sync()

        def forward():
            model.eval()
            with torch.no_grad():
                fwd(x)
            sync()

        try:
            t0 = time.perf_counter()
            step()
            res[f"{key}_{name}_first_step_s"] = time.perf_counter() - t0
            res[f"{key}_{name}_step_ms"] = median_ms(step, args.reps, warm=5)
            if not compiled:
                res[f"{key}_{name}_fwd_ms"] = median_ms(forward, args.reps, warm=5)
        except Exception as e:  # noqa: BLE001  (inductor needs a C++ toolchain)
            res[f"{key}_{name}_error"] = f"{type(e).__name__}: {e}"[:300]


def run_jax():
    import jax
    import jax.numpy as jnp
    res["jax"] = jax.__version__
    res["jax_devices"] = str(jax.devices())
    if args.device == "cuda" and jax.devices()[0].platform != "gpu":
        raise RuntimeError(f"JAX sees no GPU: {jax.devices()}")  # not a CPU figure labelled GPU

    def dense(k, i, o, bias=True):
        w = jax.random.normal(k, (i, o), jnp.float32) / math.sqrt(i)
        return {"w": w, "b": jnp.zeros((o,), jnp.float32)} if bias else {"w": w}

    def lin(p, x):
        return x @ p["w"] + p["b"] if "b" in p else x @ p["w"]

    def ln(x, eps=1e-3):
        m = x.mean(-1, keepdims=True)
        v = ((x - m) ** 2).mean(-1, keepdims=True)
        return (x - m) / jnp.sqrt(v + eps)

    def mlp(ps, x):
        x = x.reshape(x.shape[0], -1)
        for p in ps[:-1]:
            x = jax.nn.relu(lin(p, x))
        return jax.nn.softmax(lin(ps[-1], x))

    def block(p, x, h=8):
        b, n, d = x.shape
        dk = d // h
        sp = lambda t: t.reshape(b, n, h, dk).transpose(0, 2, 1, 3)  # noqa: E731
        q, k_, v = sp(lin(p["q"], x)), sp(lin(p["k"], x)), sp(lin(p["v"], x))
        a = jax.nn.softmax(q @ k_.transpose(0, 1, 3, 2) / math.sqrt(dk), -1) @ v
        y = ln(x + lin(p["o"], a.transpose(0, 2, 1, 3).reshape(b, n, d)))
        y = ln(y + lin(p["f2"], jax.nn.relu(lin(p["f1"], y))))
        return jax.nn.softmax(lin(p["h"], y.mean(1)))

    def params(name, key):
        kind, sizes, _ = MODELS[name]
        if kind == "mlp":
            ks = jax.random.split(key, len(sizes))
            return [dense(ks[i], sizes[i], sizes[i + 1], bias=(i == len(sizes) - 2))
                    for i in range(len(sizes) - 1)]
        ks = jax.random.split(key, 7)
        dims = {"q": (512, 512), "k": (512, 512), "v": (512, 512), "o": (512, 512),
                "f1": (512, 2048), "f2": (2048, 512), "h": (512, 10)}
        return {n: dense(ks[i], *dims[n]) for i, n in enumerate(dims)}

    b1, b2, lr, eps = 0.9, 0.999, 1e-3, 1e-7
    key = jax.random.PRNGKey(0)
    for prec in args.precisions.split(","):
        for name in args.models.split(","):
            kind, _, b = MODELS[name]
            model = mlp if kind == "mlp" else block
            with jax.default_matmul_precision(prec):
                def loss_fn(p, x, y):
                    pr = jnp.clip(model(p, x), 1e-7, 1 - 1e-7)
                    return -jnp.mean(jnp.sum(y * jnp.log(pr), -1))

                @jax.jit
                def step(p, m, v, t, x, y):
                    loss, g = jax.value_and_grad(loss_fn)(p, x, y)
                    t = t + 1
                    a = lr * jnp.sqrt(1 - b2 ** t) / (1 - b1 ** t)
                    m = jax.tree_util.tree_map(lambda mm, gg: b1 * mm + (1 - b1) * gg, m, g)
                    v = jax.tree_util.tree_map(lambda vv, gg: b2 * vv + (1 - b2) * gg * gg, v, g)
                    p = jax.tree_util.tree_map(lambda w, mm, vv: w - a * mm / (jnp.sqrt(vv) + eps),
                                               p, m, v)
                    return p, m, v, t, loss

                fwd = jax.jit(model)
                p = params(name, key)
                zeros = jax.tree_util.tree_map(jnp.zeros_like, p)
                state = [p, zeros, zeros, jnp.float32(0)]
                x = jax.random.normal(key, shape_of(name), jnp.float32)
                y = jax.nn.one_hot(jnp.arange(b) % 10, 10)

                def one_step():
                    out = step(*state, x, y)
                    state[:] = out[:4]
                    out[4].block_until_ready()

                t0 = time.perf_counter()
                one_step()
                res[f"jax_{name}_{prec}_first_call_s"] = time.perf_counter() - t0
                res[f"jax_{name}_{prec}_step_ms"] = median_ms(one_step, args.reps, warm=5)
                res[f"jax_{name}_{prec}_fwd_ms"] = median_ms(
                    lambda: fwd(state[0], x).block_until_ready(), args.reps, warm=5)
            print(json.dumps(res), file=sys.stderr, flush=True)  # partial figures, if cut off


try:
    if args.peer == "jax":
        run_jax()
    else:
        run_torch(args.peer == "torch_compile")
except Exception as e:  # noqa: BLE001  (an import that fails: the peer is absent)
    res[f"{args.peer}_error"] = f"{type(e).__name__}: {e}"[:300]
print(json.dumps(res))
