#!/usr/bin/env python3
"""PyTorch eager training step time, the counterpart of bench/bench_train.c:
the same MLPs (Linear without bias then relu, ..., Linear with bias then
softmax), categorical cross-entropy on probabilities as Keras computes it,
Adam, the same batch sizes and thread count, CPU.  Prints one JSON object.
usage: torch_train.py THREADS"""
import json
import sys
import time

import torch

threads = int(sys.argv[1]) if len(sys.argv) > 1 else 1
torch.set_num_threads(threads)
torch.manual_seed(0)


def mlp(widths):
    layers = []
    for i in range(len(widths) - 1):
        last = i == len(widths) - 2
        layers.append(torch.nn.Linear(widths[i], widths[i + 1], bias=last))
        if not last:
            layers.append(torch.nn.ReLU())
    return torch.nn.Sequential(*layers)


def step_time(widths, batch, reps=30):
    model = mlp(widths)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x = torch.rand(batch, widths[0])
    y = torch.nn.functional.one_hot(torch.randint(0, widths[-1], (batch,)), widths[-1]).float()

    def step():
        opt.zero_grad(set_to_none=True)
        p = torch.softmax(model(x), dim=-1)
        p = torch.clamp(p / p.sum(-1, keepdim=True), 1e-7, 1 - 1e-7)
        loss = -(y * torch.log(p)).sum(-1).mean()
        loss.backward()
        opt.step()

    for _ in range(5):
        step()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        step()
        ts.append(time.perf_counter() - t0)
    ts.sort()
    return ts[len(ts) // 2]


cases = [("mnist_mlp", [784, 200, 10], 16), ("mnist_mlp", [784, 200, 10], 128),
         ("mlp_4096", [784, 4096, 4096, 10], 256)]
print(json.dumps({"torch": torch.__version__, "threads": threads,
                  "steps": [{"model": m, "batch": b, "step_ms": 1e3 * step_time(w, b)}
                            for m, w, b in cases]}))
