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
import sys

import torch
from torch import nn

threads = int(sys.argv[1]) if len(sys.argv) > 1 else 1
torch.set_num_threads(threads)
torch.manual_seed(0)


from timing import median_ms  # noqa: E402
from torch_blocks import Block, cnn  # noqa: E402


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
