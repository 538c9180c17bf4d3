#!/usr/bin/env bash
# bench/gpu_startup_plans.sh KDC OUT_DIR: the plans bench/gpu_startup.sh
# compares on a GPU machine that has no ptxas (the bundle's), compiled here
# where ptxas is (docs/gpu.md, "Start-up"): for each model a plan with the
# cubin for sm_90 (NAME_cubin.plan) and the same plan with PTX only
# (NAME_ptx.plan, KDC_PTXAS=none), 64-row predict:
#   mnist   examples/mnist_mlp (2 GEMMs, 5 kernels; 0.7 MB)
#   tblock  examples/transformer_block (the small transformer example)
#   t512    transformer_512 (bench/big_models.py: d 512, 8 heads, ffn 2048,
#           seq 128; 12.6 MB of weights each)
# The plans must be read by the kdc that runs them: make them with the same
# commit as the bundle.  Fails when kdc finds no ptxas.
set -eu
K=$1 OUT=$2
S=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$OUT"
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
python3 "$S/bench/big_models.py" "$S/examples" "$W" >/dev/null
for m in "mnist $S/examples/mnist_mlp/model.json" "tblock $S/examples/transformer_block/model.json" \
         "t512 $W/transformer_512.json"; do
  set -- $m
  "$K" compile "$2" --random-init --batch 64 --target cuda --sm 90 -o "$OUT/$1_cubin.plan"
  "$K" inspect "$OUT/$1_cubin.plan" | grep -q "^cuda: sm_90: cubin" ||
    { echo "gpu_startup_plans: $1: no cubin in the plan (no ptxas? set KDC_PTXAS)" >&2; exit 1; }
  KDC_PTXAS=none "$K" compile "$2" --random-init --batch 64 --target cuda --sm 90 -o "$OUT/$1_ptx.plan"
done
ls -l "$OUT"
