#!/usr/bin/env bash
# bench/gpu_first_step.sh BUNDLE_DIR [OUT_DIR]: compile + first training step
# of the transformer (bench/big_models.py transformer_512, batch 64, Adam) on
# a GPU machine, the figure issue 19 compares with XLA's first jitted call
# (device_check.sh's jax_tblock512_b64_*_first_call_s).  Two plans: one
# compiled with the cubin (when a ptxas is found: `kdc inspect` says which)
# and one with KDC_PTXAS=none (PTX only: the driver compiles it at load).
# Each is run for one step (`kdc run --fit`, one batch) with the driver's
# PTX cache off (CUDA_CACHE_DISABLE=1: a first run on a new machine).
# Prints one line per plan: compile ms, first-run ms, their sum.
set -u
P=$1; OUT=${2:-/tmp/gpu_first_step}; K=$P/bin/kdc
S=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$OUT"; W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
echo "ptxas on PATH: $(command -v ptxas || echo none); /usr/local/cuda/bin/ptxas: $([ -x /usr/local/cuda/bin/ptxas ] && echo yes || echo no)"
python3 "$S/bench/big_models.py" "$S/examples" "$W" > /dev/null
python3 -c "
import numpy as np, sys
r = np.random.default_rng(0)
np.save('$W/x.npy', r.standard_normal((64, 128, 512), dtype=np.float32))
np.save('$W/y.npy', np.eye(10, dtype=np.float32)[np.arange(64) % 10])"
ms() { echo $(( ($(date +%s%N) - $1) / 1000000 )); }
for v in default none; do
  t=$(date +%s%N)
  if [ $v = none ]; then env KDC_PTXAS=none "$K" compile "$W/transformer_512.json" --random-init --batch 64 \
      --loss categorical_crossentropy --optimizer adam --target cuda --sm 90 -o "$W/$v.plan" 2>"$W/e"
  else "$K" compile "$W/transformer_512.json" --random-init --batch 64 \
      --loss categorical_crossentropy --optimizer adam --target cuda --sm 90 -o "$W/$v.plan" 2>"$W/e"; fi
  rc=$?; c=$(ms $t)
  [ $rc = 0 ] || { echo "FAIL first_step $v: compile: $(tail -1 "$W/e")"; continue; }
  what=$("$K" inspect "$W/$v.plan" | grep -m1 "^cuda: sm_")
  t=$(date +%s%N)
  CUDA_CACHE_DISABLE=1 KDC_TRACE_STARTUP=1 "$K" run "$W/$v.plan" --fit --x "$W/x.npy" --y "$W/y.npy" \
    --epochs 1 --batch-size 64 --quiet 2>"$W/t_$v" || { echo "FAIL first_step $v: run: $(grep -v startup: "$W/t_$v" | tail -1)"; continue; }
  r=$(ms $t)
  cp "$W/t_$v" "$OUT/trace_$v.txt"
  echo "first_step $v: compile $c ms + first training step (cold driver cache) $r ms = $((c + r)) ms; $what"
done
