"""torch.nn counterparts of two Keras benchmark models (bench/big_models.py):
the transformer block (d_model 512, 8 heads of 64, FFN 2048: Keras
MultiHeadAttention with biases, residual adds, LayerNorm eps 1e-3, ReLU FFN,
global average pooling, softmax head) and the CNN on 64x64x3 images.
Used by torch_models.py and peers.py."""
import math

import torch
from torch import nn


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
