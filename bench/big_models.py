#!/usr/bin/env python3
"""Writes the Keras 3 JSON of the two models bench/bench_models.c times:
  transformer_512: examples/transformer_block scaled to d_model 512, 8 heads
    of 64, feed-forward 2048, sequence 128, a 10-class softmax head;
  cnn_64: examples/small_cnn on 64x64x3 images with 32 / 64 filters (conv1,
    conv2 and the depthwise conv follow conv2's width);
  lstm_128: examples/lstm_text scaled to sequences of 50 token ids from a
    vocabulary of 1000, Embedding 64, LSTM 128 (sequences) then LSTM 64,
    a 3-class softmax head (int32 token ids in);
  transformer_512_bf16: transformer_512 with the mixed_bfloat16 policy
    (float32 head).
Layer shapes recorded in the JSON (build_config, the sizes of inbound tensor
shapes) are dropped: kdc and Keras infer them from the input.
usage: big_models.py SRC_DIR OUT_DIR   (SRC_DIR = the repository's examples/)"""
import json
import os
import sys

src, out = sys.argv[1], sys.argv[2]


def strip(node):
    """Removes recorded shapes so only the input shape drives the model."""
    if isinstance(node, dict):
        node.pop("build_config", None)
        if node.get("class_name") == "__keras_tensor__" and node["config"].get("shape"):
            # rank kept (Keras needs it to rebuild the graph), sizes unknown
            node["config"]["shape"] = [None] * len(node["config"]["shape"])
        for v in node.values():
            strip(v)
    elif isinstance(node, list):
        for v in node:
            strip(v)


def layer(m, name):
    return next(l for l in m["config"]["layers"] if l["config"].get("name") == name)["config"]


m = json.load(open(os.path.join(src, "transformer_block", "model.json")))
layer(m, "input_layer")["batch_shape"] = [None, 128, 512]
mha = layer(m, "mha")
mha["num_heads"], mha["key_dim"], mha["value_dim"] = 8, 64, 64
layer(m, "ffn1")["units"] = 2048
layer(m, "ffn2")["units"] = 512
layer(m, "head")["units"] = 10
strip(m)
json.dump(m, open(os.path.join(out, "transformer_512.json"), "w"))
# the same under keras.mixed_precision.set_global_policy("mixed_bfloat16"):
# every layer but the input carries the policy, the head is float32 (as
# Keras' mixed-precision guide builds it; docs/frontend.md "Dtype policies")
for l in m["config"]["layers"]:
    if l["class_name"] != "InputLayer":
        l["config"]["dtype"] = {"module": "keras", "class_name": "DTypePolicy",
                                "config": {"name": "float32" if l["config"].get("name") == "head"
                                           else "mixed_bfloat16"}, "registered_name": None}
json.dump(m, open(os.path.join(out, "transformer_512_bf16.json"), "w"))

m = json.load(open(os.path.join(src, "small_cnn", "model.json")))
layer(m, "input_layer")["batch_shape"] = [None, 64, 64, 3]
layer(m, "conv1")["filters"] = 32
layer(m, "conv2")["filters"] = 64
strip(m)
json.dump(m, open(os.path.join(out, "cnn_64.json"), "w"))

m = json.load(open(os.path.join(src, "lstm_text", "model.json")))
layer(m, "input_layer")["batch_shape"] = [None, 50]
layer(m, "input_layer")["dtype"] = "int32"
emb = next(l for l in m["config"]["layers"] if l["class_name"] == "Embedding")["config"]
emb["input_dim"], emb["output_dim"] = 1000, 64
lstms = [l["config"] for l in m["config"]["layers"] if l["class_name"] == "LSTM"]
lstms[0]["units"], lstms[1]["units"] = 128, 64
strip(m)
json.dump(m, open(os.path.join(out, "lstm_128.json"), "w"))
