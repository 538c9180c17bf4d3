#!/usr/bin/env bash
# bench/gpu_startup.sh BUNDLE_DIR [OUT_DIR]: where `kdc run`'s start-up time
# goes on a GPU machine (docs/gpu.md, "Start-up"), from a bundle.  Prints
# one line per measurement (wall ms from process start, median of 3):
#   devices        `kdc devices`: dlopen of the driver, cuInit, device queries
#   run mnist      a 64-row predict of the MNIST MLP (2 GEMMs, 5 kernels)
#   run tblock     a 64-row predict of transformer_512 (36 steps)
#   ..nocache      the same with CUDA_CACHE_DISABLE=1 (the driver compiles
#                  the PTX every time: the cost of shipping PTX, not SASS)
# Then the bf16 transformer's training step per kernel (gpu_profile.py).
set -u
P=$1; OUT=${2:-/tmp/gpu_startup}; K=$P/bin/kdc; S=$P/share/kdc
mkdir -p "$OUT"; W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
med() {  # med LABEL CMD...: median wall ms of 3 runs
  local l=$1 a=() i s; shift
  for i in 1 2 3; do s=$(date +%s%N); "$@" > /dev/null 2>"$W/err" || { echo "FAIL $l: $(tail -1 "$W/err")"; return; }
    a+=($(( ($(date +%s%N) - s) / 1000000 ))); done
  echo "$l: $(printf '%s\n' "${a[@]}" | sort -n | sed -n 2p) ms (runs ${a[*]})"
}
python3 "$S/bench/big_models.py" "$S/examples" "$W"
python3 -c "
import numpy as np
np.save('$W/m.npy', np.zeros((64, 28, 28, 1), np.float32))
np.save('$W/t.npy', np.zeros((64, 128, 512), np.float32))"
"$K" compile "$S/examples/mnist_mlp/model.json" --random-init --batch 64 --target cuda --sm 90 -o "$W/m.plan"
"$K" compile "$W/transformer_512.json" --random-init --batch 64 --target cuda --sm 90 -o "$W/t.plan"
med "devices" "$K" devices
med "run mnist" "$K" run "$W/m.plan" --input "$W/m.npy" --output "$W/o.npy"
med "run tblock" "$K" run "$W/t.plan" --input "$W/t.npy" --output "$W/o.npy"
med "run mnist nocache" env CUDA_CACHE_DISABLE=1 "$K" run "$W/m.plan" --input "$W/m.npy" --output "$W/o.npy"
med "run tblock nocache" env CUDA_CACHE_DISABLE=1 "$K" run "$W/t.plan" --input "$W/t.npy" --output "$W/o.npy"
"$K" compile "$W/transformer_512_bf16.json" --random-init --batch 64 --loss categorical_crossentropy \
  --optimizer adam --target cuda --sm 90 -o "$W/b.plan" 2>/dev/null
timeout 150 python3 "$S/bench/gpu_profile.py" "$K" "$W/b.plan" "$OUT/bf16" --top 20
