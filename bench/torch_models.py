#!/usr/bin/env python3
"""PyTorch eager (CPU) counterparts of bench/bench_models.c, same shapes and
thread count: the transformer block (d_model 512, 8 heads of 64, FFN 2048,
seq 128, batch 8: Keras MultiHeadAttention with biases, residual adds,
LayerNorm eps 1e-3, ReLU FFN, global average pooling, softmax head) and the
CNN on 64x64x3 (Conv 3x3 same 32 + ReLU, BatchNorm, MaxPool 2, Conv 3x3
stride 2 valid 64, depthwise 3x3 same, AvgPool 2 same, global average,
softmax head; batch 32).  Forward = inference (eval mode, no grad);
training step = forward in training mode, categorical cross-entropy on the
probabilities (as Keras computes it), backward, Adam.  Prints one JSON
object of median milliseconds.  usage: torch_models.py THREADS"""
import json
import math
import sys
import time

import torch
from torch import nn

threads = int(sys.argv[1]) if len(sys.argv) > 1 else 1
torch.set_num_threads(threads)
torch.manual_seed(0)


class Block(nn.Module):
    def __init__(self, d=512, heads=8, ffn=2048, classes=10):
        super().__init__()
        self.h, self.dk = heads, d // heads
        self.q, self.k, self.v, self.o = (nn.Linear(d, d) for _ in range(4))
        self.ln1, self.ln2 = nn.LayerNorm(d, eps=1e-3), nn.LayerNorm(d, eps=1e-3)
        self.f1, self.f2 = nn.Linear(d, ffn), nn.Linear(ffn, d)
        self.head = nn.Linear(d, classes)

    def forward(self, x):
        b, s, d = x.shape
        q = self.q(x).view(b, s, self.h, self.dk).transpose(1, 2)
        k = self.k(x).view(b, s, self.h, self.dk).transpose(1, 2)
        v = self.v(x).view(b, s, self.h, self.dk).transpose(1, 2)
        a = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(self.dk), dim=-1) @ v
        y = self.ln1(x + self.o(a.transpose(1, 2).reshape(b, s, d)))
        y = self.ln2(y + self.f2(torch.relu(self.f1(y))))
        return torch.softmax(self.head(y.mean(1)), dim=-1)


def cnn(classes=10):
    return nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(), nn.BatchNorm2d(32, eps=1e-3, momentum=0.01),
        nn.MaxPool2d(2), nn.Conv2d(32, 64, 3, stride=2), nn.Conv2d(64, 64, 3, padding=1, groups=64),
        nn.AvgPool2d(2, ceil_mode=True), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
        nn.Linear(64, classes), nn.Softmax(dim=-1))


def median_ms(fn, reps):
    for _ in range(3):
        fn()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    ts.sort()
    return 1e3 * ts[len(ts) // 2]


def times(model, x, classes=10, reps=7):
    y = nn.functional.one_hot(torch.arange(x.shape[0]) % classes, classes).float()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)

    def forward():
        model.eval()
        with torch.no_grad():
            model(x)

    def step():
        model.train()
        opt.zero_grad(set_to_none=True)
        p = model(x)
        p = torch.clamp(p / p.sum(-1, keepdim=True), 1e-7, 1 - 1e-7)
        loss = -(y * torch.log(p)).sum(-1).mean()
        loss.backward()
        opt.step()

    return {"forward_ms": median_ms(forward, reps), "step_ms": median_ms(step, reps)}


print(json.dumps({"torch": torch.__version__, "threads": threads,
                  "transformer_512": times(Block(), torch.rand(8, 128, 512)),
                  "cnn_64": times(cnn(), torch.rand(32, 3, 64, 64))}))
