#!/usr/bin/env bash
# tests/gpu/whole_step_check.sh BIN_DIR EXAMPLES_DIR [OUT_DIR] [--sm N]
#
# Whole-step execution on a GPU (docs/gpu.md: "Graphs", "Matmul
# precision", "Staging in fit", "Benchmark mode"), from a bundle's bin/
# (kdc, bench_plan) and the examples.  Needs python3 with numpy for the TF32
# comparison only.  One line per check: PASS / FAIL / SKIP name ...; exit 1
# on any FAIL.  About 1 minute on an H100 (JIT of the PTX included).
#   1. graphs   mnist_mlp, transformer_block, lstm_text (a scan unrolled into
#               the graph): `kdc run` of 37 rows at batch 16 (3 runs: plain,
#               captured, replayed) equals the same with KDC_CUDA_GRAPHS=0,
#               byte for byte, and no "CUDA graph not used" note
#   2. staging  `kdc run --fit` (mnist_mlp, Adam, 3 epochs, shuffled, batch
#               16): history and weights staged (default) == KDC_FIT_STAGING=0,
#               byte for byte
#   3. tf32     transformer_block and mnist_mlp with --matmul-precision tf32:
#               inspect says so, outputs within 1e-2 + 1e-2 |cpu| of the CPU
#   4. bench    bench_plan --resident 1 (mnist b128 and transformer_block
#               b64, training): highest with graphs, highest without
#               (KDC_CUDA_GRAPHS=0), tf32 with graphs: one JSON line each
set -u
BIN=""; EX=""; OUT=""; SM=90
while [ $# -gt 0 ]; do
  case $1 in
    --sm) SM=$2; shift ;;
    *) if [ -z "$BIN" ]; then BIN=$1; elif [ -z "$EX" ]; then EX=$1; else OUT=$1; fi ;;
  esac
  shift
done
[ -n "$BIN" ] && [ -n "$EX" ] || { sed -n '2,22p' "$0"; exit 2; }
K=$BIN/kdc; BP=$BIN/bench_plan
OUT=${OUT:-$PWD/whole-step-out}; W=$OUT/work; rm -rf "$W"; mkdir -p "$W"
nfail=0
line() { [ "$1" = FAIL ] && nfail=$((nfail+1)); echo "$*"; }
PY=""; python3 -c "import numpy" 2>/dev/null && PY=python3

# no usable GPU: every check skips (the reason printed)
"$K" compile "$EX/mnist_mlp/model.json" --batch 16 --target cuda --sm "$SM" -o "$W/probe.plan" \
    > "$W/probe.log" 2>&1 || { line FAIL "compile --target cuda: $(tail -1 "$W/probe.log")"; exit 1; }
if ! "$K" run "$W/probe.plan" --input "$EX/mnist_mlp/input.npy" --output "$W/probe.npy" \
    2> "$W/probe.err" && grep -q "no CUDA device\|built without CUDA" "$W/probe.err"; then
  line SKIP "whole-step checks: $(tail -1 "$W/probe.err")"; exit 0
fi

# 1. graphs
for ex in mnist_mlp transformer_block lstm_text; do
  "$K" compile "$EX/$ex/model.json" --batch 16 --target cuda --sm "$SM" -o "$W/$ex.plan" \
      > "$W/$ex.log" 2>&1 || { line FAIL "graphs $ex: compile: $(tail -1 "$W/$ex.log")"; continue; }
  "$K" run "$W/$ex.plan" --input "$EX/$ex/input.npy" --output "$W/$ex.g.npy" 2> "$W/$ex.g.err" ||
    { line FAIL "graphs $ex: run: $(tail -1 "$W/$ex.g.err")"; continue; }
  KDC_CUDA_GRAPHS=0 "$K" run "$W/$ex.plan" --input "$EX/$ex/input.npy" --output "$W/$ex.u.npy" \
      2> "$W/$ex.u.err" || { line FAIL "graphs $ex: run (no graphs): $(tail -1 "$W/$ex.u.err")"; continue; }
  if grep -q "CUDA graph not used" "$W/$ex.g.err"; then line FAIL "graphs $ex: $(grep 'CUDA graph' "$W/$ex.g.err")"
  elif cmp -s "$W/$ex.g.npy" "$W/$ex.u.npy"; then line PASS "graphs $ex: 3 runs graphed == KDC_CUDA_GRAPHS=0, bitwise"
  else line FAIL "graphs $ex: graphed output differs from plain"; fi
done

# 2. staging
"$K" compile "$EX/mnist_mlp/model.json" --batch 16 --target cuda --sm "$SM" --loss \
    categorical_crossentropy --optimizer adam -o "$W/fit.plan" > "$W/fit.log" 2>&1 ||
  line FAIL "staging: compile: $(tail -1 "$W/fit.log")"
for mode in staged plain; do
  [ $mode = plain ] && export KDC_FIT_STAGING=0
  "$K" run "$W/fit.plan" --fit --x "$EX/mnist_mlp/train_x.npy" --y "$EX/mnist_mlp/train_y.npy" \
      --epochs 3 --shuffle --history "$W/h.$mode.json" --save-weights "$W/w.$mode.safetensors" \
      --quiet 2> "$W/fit.$mode.err" || line FAIL "staging: fit ($mode): $(tail -1 "$W/fit.$mode.err")"
  unset KDC_FIT_STAGING
done
if cmp -s "$W/h.staged.json" "$W/h.plain.json" && cmp -s "$W/w.staged.safetensors" "$W/w.plain.safetensors"
then line PASS "staging: fit staged == KDC_FIT_STAGING=0 (history, weights), bitwise: $(head -c 120 "$W/h.staged.json")"
else line FAIL "staging: staged fit differs from plain"; fi

# 3. tf32
for ex in transformer_block mnist_mlp; do
  "$K" compile "$EX/$ex/model.json" --batch 16 --target cuda --sm "$SM" --matmul-precision tf32 \
      -o "$W/$ex.tf32.plan" > "$W/$ex.tf32.log" 2>&1 || { line FAIL "tf32 $ex: compile"; continue; }
  "$K" inspect "$W/$ex.tf32.plan" | grep -q "cuda: matmul precision tf32" ||
    { line FAIL "tf32 $ex: inspect does not say tf32"; continue; }
  "$K" run "$W/$ex.tf32.plan" --input "$EX/$ex/input.npy" --output "$W/$ex.tf32.npy" 2>> "$W/$ex.tf32.log" &&
  "$K" compile "$EX/$ex/model.json" --batch 16 -o "$W/$ex.cpu.plan" >> "$W/$ex.tf32.log" 2>&1 &&
  "$K" run "$W/$ex.cpu.plan" --input "$EX/$ex/input.npy" --output "$W/$ex.cpu.npy" \
      2>> "$W/$ex.tf32.log" || { line FAIL "tf32 $ex: run: $(tail -1 "$W/$ex.tf32.log")"; continue; }
  if [ -z "$PY" ]; then line SKIP "tf32 $ex: no python3 with numpy to compare"; continue; fi
  r=$("$PY" -c "
import numpy as np, sys
g, c = np.load(sys.argv[1]).astype(np.float64), np.load(sys.argv[2]).astype(np.float64)
d = np.abs(g - c); ok = bool(np.all(d <= 1e-2 + 1e-2 * np.abs(c)))
print(('PASS' if ok else 'FAIL'), 'max |gpu - cpu| %.3g, max rel %.3g' % (d.max(), (d / (np.abs(c) + 1e-6)).max()))
" "$W/$ex.tf32.npy" "$W/$ex.cpu.npy")
  line ${r%% *} "tf32 $ex: ${r#* }"
done

# 4. bench
if [ ! -x "$BP" ]; then line SKIP "bench: no $BP"; else
  for m in "mnist_mlp 128" "transformer_block 64"; do
    set -- $m
    for prec in highest tf32; do
      "$K" compile "$EX/$1/model.json" --batch "$2" --target cuda --sm "$SM" --loss \
          categorical_crossentropy --optimizer adam --matmul-precision $prec \
          -o "$W/b.$1.$prec.plan" > "$W/b.log" 2>&1 || { line FAIL "bench $1: compile"; continue; }
    done
    for run in "highest graphs" "highest nographs" "tf32 graphs"; do
      set -- $m; prec=${run%% *}; g=${run#* }
      e=1; [ "$g" = nographs ] && e=0
      if j=$(KDC_CUDA_GRAPHS=$e timeout 120 "$BP" "$W/b.$1.$prec.plan" --resident 1 --reps 21 \
          2>> "$W/b.log"); then line PASS "bench $1 b$2 $prec $g: $j"
      else line FAIL "bench $1 b$2 $prec $g: $(tail -1 "$W/b.log")"; fi
    done
  done
fi
echo "whole_step_check: $nfail FAIL"
[ $nfail = 0 ]
