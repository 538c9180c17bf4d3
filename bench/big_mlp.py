#!/usr/bin/env python3
"""Writes the Keras 3 JSON of a Sequential 784 -> 4096 -> 4096 -> 10 MLP
(bench/bench_train.c), derived from examples/mlp_sequential/model.json:
d1 gets 4096 units, the Dropout becomes Dense(4096, relu) "d1b"."""
import copy
import json
import sys

src, out = sys.argv[1], sys.argv[2]
m = json.load(open(src))
layers = m["config"]["layers"]
d1 = next(l for l in layers if l["config"].get("name") == "d1")
d1["config"]["units"] = 4096
i = next(k for k, l in enumerate(layers) if l["class_name"] == "Dropout")
d1b = copy.deepcopy(d1)
d1b["config"]["name"] = "d1b"
d1b["config"]["use_bias"] = False
d1b["config"]["activation"] = "relu"
layers[i] = d1b
for l in layers:
    l.pop("build_config", None)
json.dump(m, open(out, "w"))
