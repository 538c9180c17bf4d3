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
# then for each model with both plans: the cubin's outputs against the PTX's
# ("check NAME: ... ok"), and one run of `kdc devices` and of each plan with
# KDC_TRACE_STARTUP=1: its phases, ms since process start (docs/runtime.md,
# "Start-up trace"), prefixed by the plan; a cubin plan's trace must say
# "module loaded: cubin sm_90".
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
input() {  # input PLAN NPY: the plan's first input (shape, dtype from kdc inspect): floats N(0,1), seed 0; ids 0
  "$K" inspect "$1" | sed -n '2,$p' | python3 -c "
import json, sys, numpy as np
meta = json.JSONDecoder().raw_decode(sys.stdin.read())[0]  # the metadata, then the description
f = [f for f in meta['functions'] if f['name'] == 'predict'][0]['inputs'][0]
t = {'f32': np.float32, 'i32': np.int32, 'i64': np.int64}[f['dtype']]
x = np.random.default_rng(0).standard_normal(f['shape']) if t == np.float32 else np.zeros(f['shape'])
np.save('$2', x.astype(t))"
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
# the cubin computes what the PTX computes: NAME_cubin vs NAME_ptx (same model, same seed)
for f in $plans; do
  n=${f%.plan}; [ "${n##*_}" = cubin ] || continue; b=${n%_cubin}
  [ -f "$W/${b}_ptx.plan" ] || continue
  "$K" run "$W/$f" --input "$W/$n.npy" --output "$W/c.npy" 2>"$W/err" &&
    "$K" run "$W/${b}_ptx.plan" --input "$W/$n.npy" --output "$W/p.npy" 2>>"$W/err" &&
    python3 -c "
import numpy as np
c, p = np.load('$W/c.npy'), np.load('$W/p.npy')
ok = c.shape == p.shape and np.isfinite(c).all() and np.allclose(c, p, rtol=1e-4, atol=1e-5)
print('check $b: cubin vs PTX outputs %s, max |difference| %.2e: %s' % (c.shape, float(np.max(np.abs(c - p))), 'ok' if ok else 'FAIL'))" ||
    echo "FAIL check $b: $(tail -1 "$W/err")"
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
