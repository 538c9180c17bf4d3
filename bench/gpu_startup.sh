#!/usr/bin/env bash
# bench/gpu_startup.sh BUNDLE_DIR [OUT_DIR] [PLANS_DIR]: where `kdc run`'s
# start-up time goes on a GPU machine (docs/gpu.md, "Start-up"), from a
# bundle.  Prints one line per measurement (wall ms from process start,
# median of 3 after one unmeasured run that fills the driver's PTX cache):
#   devices              `kdc devices`: dlopen of the driver, cuInit, device queries
#   run NAME KIND        a 64-row predict of plan NAME_KIND.plan, KIND = cubin
#                        (SASS from ptxas, loaded as is) or ptx (the driver
#                        compiles it, or takes it from its cache)
#   run NAME KIND nocache  the same with CUDA_CACHE_DISABLE=1 (the driver
#                        compiles the PTX every time: the cost of shipping PTX)
# then one run of each plan with KDC_TRACE_STARTUP=1: its phases, ms since
# process start (docs/runtime.md, "Start-up trace"), prefixed by the plan.
# PLANS_DIR: plans compiled where ptxas is (bench/gpu_startup_plans.sh; the
# bundle has no ptxas); without it the bundle's kdc compiles mnist and
# tblock itself (PTX only unless a ptxas is found).  GPU_STARTUP_PROFILE=1
# adds the bf16 transformer step's per-kernel profile (gpu_profile.py).
set -u
P=$1; OUT=${2:-/tmp/gpu_startup}; PL=${3:-}; K=$P/bin/kdc; S=$P/share/kdc
mkdir -p "$OUT"; W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
med() {  # med LABEL CMD...: median wall ms of 3 runs (after one warm-up)
  local l=$1 a=() i s; shift
  "$@" > /dev/null 2>"$W/err" || { echo "FAIL $l: $(tail -1 "$W/err")"; return; }
  for i in 1 2 3; do s=$(date +%s%N); "$@" > /dev/null 2>"$W/err" || { echo "FAIL $l: $(tail -1 "$W/err")"; return; }
    a+=($(( ($(date +%s%N) - s) / 1000000 ))); done
  echo "$l: $(printf '%s\n' "${a[@]}" | sort -n | sed -n 2p) ms (runs ${a[*]})"
}
input() {  # input PLAN NPY: zeros of the plan's first input (shape and dtype from kdc inspect)
  "$K" inspect "$1" | sed -n '2,$p' | python3 -c "
import json, sys, numpy as np
meta = json.JSONDecoder().raw_decode(sys.stdin.read())[0]  # the metadata, then the description
f = [f for f in meta['functions'] if f['name'] == 'predict'][0]['inputs'][0]
np.save('$2', np.zeros(f['shape'], {'f32': np.float32, 'i32': np.int32, 'i64': np.int64}[f['dtype']]))"
}
if [ -n "$PL" ]; then
  cp "$PL"/*.plan "$W"/
else
  python3 "$S/bench/big_models.py" "$S/examples" "$W" >/dev/null
  for m in "mnist $S/examples/mnist_mlp/model.json" "tblock $S/examples/transformer_block/model.json"; do
    set -- $m
    "$K" compile "$2" --random-init --batch 64 --target cuda --sm 90 -o "$W/$1_local.plan"
  done
fi
"$K" devices > "$OUT/devices.txt" 2>&1
med "devices" "$K" devices
plans=$(cd "$W" && ls *.plan | sort)
for f in $plans; do input "$W/$f" "$W/${f%.plan}.npy"; done
for f in $plans; do
  n=${f%.plan}; kind=${n##*_}; name=${n%_*}
  "$K" inspect "$W/$f" | grep "^cuda: sm" | sed "s/^/$name $kind: /"
  med "run $name $kind" "$K" run "$W/$f" --input "$W/$n.npy" --output "$W/o.npy"
  med "run $name $kind nocache" env CUDA_CACHE_DISABLE=1 "$K" run "$W/$f" --input "$W/$n.npy" --output "$W/o.npy"
done
KDC_TRACE_STARTUP=1 "$K" devices 2>&1 >/dev/null | sed "s/^/[devices] /"
for f in $plans; do
  n=${f%.plan}
  KDC_TRACE_STARTUP=1 "$K" run "$W/$f" --input "$W/$n.npy" --output "$W/o.npy" 2>&1 >/dev/null |
    sed "s/^/[$n] /" | tee "$OUT/trace-$n.txt"
  KDC_TRACE_STARTUP=1 CUDA_CACHE_DISABLE=1 "$K" run "$W/$f" --input "$W/$n.npy" --output "$W/o.npy" \
    2>&1 >/dev/null | grep "module loaded" | sed "s/^/[$n nocache] /"
done
if [ "${GPU_STARTUP_PROFILE:-0}" = 1 ]; then
  [ -f "$W/transformer_512_bf16.json" ] || python3 "$S/bench/big_models.py" "$S/examples" "$W" >/dev/null
  "$K" compile "$W/transformer_512_bf16.json" --random-init --batch 64 --loss categorical_crossentropy \
    --optimizer adam --target cuda --sm 90 -o "$W/b.plan" 2>/dev/null
  timeout 150 python3 "$S/bench/gpu_profile.py" "$K" "$W/b.plan" "$OUT/bf16" --top 20
fi
