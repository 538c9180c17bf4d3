#!/usr/bin/env bash
# tests/gpu/mixed_check.sh KDC [BENCH_PLAN] [SM]: bf16 mixed precision on a
# GPU (docs/gpu.md, "Mixed precision").  KDC is a kdc binary (the bundle's
# bin/kdc), BENCH_PLAN its bin/bench_plan (timings skipped without it), SM
# the GPU's architecture (default 90).  Needs python3 with numpy; run from
# the repository root (bench/big_models.py writes the models from examples/).
#
#   pred   transformer_512_bf16 (d 512, 8 heads, ffn 2048, seq 128, the
#          mixed_bfloat16 policy, f32 softmax head; --random-init, seed 0),
#          batch 16: the CUDA plan (cuBLAS bf16 GEMMs, f32 accumulation)
#          against the CPU plan (f32 GEMMs on the same bf16-rounded
#          operands): |gpu - cpu| <= 2e-2 (softmax outputs <= 1: a GEMM
#          result may round to the neighbouring bf16 value, 2^-8 relative,
#          and such differences pass through four layers)
#   fit    the same model, 2 epochs of 4 steps (batch 16, Adam 1e-3, one-hot
#          targets): the CUDA plan's loss history against the CPU plan's,
#          relative 2e-2; and against the f32 model's on the GPU (the
#          losses track f32 within 5e-2 relative, Keras' own bf16 runs do)
#   time   bench_plan's median training step and forward (--resident 1: the
#          batch stays on the GPU, as the peers' data), batch 64, of
#          transformer_512 (f32) and transformer_512_bf16 on the GPU, and
#          their ratio (the target: the bf16 step 3x faster)
# One line per check: PASS / FAIL / SKIP.  Exit 1 when a check FAILs.
set -u
K=$1; BP=${2:-}; SM=${3:-90}
T=$(mktemp -d "${TMPDIR:-/tmp}/kdc_mixed_XXXXXX")
trap 'rm -rf "$T"' EXIT
fail=0
line() { echo "$*"; [ "$1" != FAIL ] || fail=1; }
python3 -c "import numpy" 2>/dev/null || { line SKIP "mixed: no python3 with numpy"; exit 0; }
python3 bench/big_models.py examples "$T" || { line FAIL "mixed: bench/big_models.py"; exit 1; }
M16=$T/transformer_512_bf16.json M32=$T/transformer_512.json
python3 - "$T" <<'PY'
import sys, numpy as np
r = np.random.default_rng(0)
np.save(sys.argv[1] + "/x16.npy", r.standard_normal((16, 128, 512), dtype=np.float32))
np.save(sys.argv[1] + "/x64.npy", r.standard_normal((64, 128, 512), dtype=np.float32))
np.save(sys.argv[1] + "/y64.npy", np.eye(10, dtype=np.float32)[np.arange(64) % 10])
PY
cmp_py() {  # cmp_py A.npy B.npy TOL: max |a - b| <= TOL
  python3 -c "import sys,numpy as np; a=np.load(sys.argv[1]); b=np.load(sys.argv[2]); d=float(np.abs(a.astype(np.float64)-b).max()); print('%.3g' % d); sys.exit(0 if d <= float(sys.argv[3]) else 1)" "$@"
}
# ---- pred
ok=1
"$K" compile "$M16" --random-init --batch 16 -o "$T/cpu.plan" 2>"$T/e" || ok=0
"$K" compile "$M16" --random-init --batch 16 --target cuda --sm "$SM" -o "$T/gpu.plan" 2>>"$T/e" || ok=0
g16=$("$K" inspect "$T/gpu.plan" | grep -c "(bf16)")
if [ $ok = 0 ]; then line FAIL "mixed pred: compile: $(tail -1 "$T/e")"
elif ! "$K" run "$T/cpu.plan" --input "$T/x16.npy" --output "$T/cpu.npy" 2>"$T/e"; then
  line FAIL "mixed pred: cpu run: $(tail -1 "$T/e")"
elif ! "$K" run "$T/gpu.plan" --input "$T/x16.npy" --output "$T/gpu.npy" 2>"$T/e"; then
  line FAIL "mixed pred: gpu run: $(tail -1 "$T/e")"
elif d=$(cmp_py "$T/gpu.npy" "$T/cpu.npy" 2e-2); then
  line PASS "mixed pred: transformer_512_bf16 b16, $g16 bf16 GEMM steps: max |gpu - cpu| $d"
else line FAIL "mixed pred: max |gpu - cpu| $d > 2e-2"; fi
# ---- fit
fit() {  # fit MODEL TARGET TAG
  "$K" compile "$1" --random-init --batch 16 --loss categorical_crossentropy --optimizer adam \
    ${2:+--target cuda --sm $SM} -o "$T/$3.plan" 2>"$T/e" &&
  "$K" run "$T/$3.plan" --fit --x "$T/x64.npy" --y "$T/y64.npy" --epochs 2 --batch-size 16 \
    --quiet --history "$T/$3.json" 2>"$T/e"
}
if fit "$M16" "" fcpu && fit "$M16" cuda fgpu && fit "$M32" cuda f32gpu; then
  r=$(python3 -c "
import json,sys
l=lambda n: json.load(open('$T/'+n+'.json'))['loss']
c,g,f=l('fcpu'),l('fgpu'),l('f32gpu')
rc=max(abs(a-b)/abs(b) for a,b in zip(g,c)); rf=max(abs(a-b)/abs(b) for a,b in zip(g,f))
print('%.3g %.3g %s %s %s' % (rc, rf, g, c, f)); sys.exit(0 if rc <= 2e-2 and rf <= 5e-2 else 1)")
  if [ $? = 0 ]; then line PASS "mixed fit: rel. to cpu, rel. to f32, losses gpu/cpu/f32: $r"
  else line FAIL "mixed fit: $r"; fi
else line FAIL "mixed fit: $(tail -1 "$T/e")"; fi
# ---- time
if [ -z "$BP" ] || [ ! -x "$BP" ]; then line SKIP "mixed time: no bench_plan"; exit $fail; fi
# each model also with one element per thread in the ELEMENT kernels
# (KDC_CUDA_UNROLL=1: the A/B of the unrolled kernels, docs/gpu.md)
for v in transformer_512 transformer_512_bf16 transformer_512:1 transformer_512_bf16:1; do
  m=${v%%:*}; u=${v#"$m"}; u=${u#:}; tag=$m${u:+_unroll$u}
  KDC_CUDA_UNROLL=${u:-4} "$K" compile "$T/$m.json" --random-init --batch 64 --loss categorical_crossentropy \
    --optimizer adam --target cuda --sm "$SM" -o "$T/t_$tag.plan" 2>"$T/e" || { line FAIL "mixed time $tag: compile"; continue; }
  if timeout 150 "$BP" "$T/t_$tag.plan" --reps 20 --resident 1 > "$T/t_$tag.out" 2>"$T/e"; then
    line PASS "mixed time $tag b64: $(cat "$T/t_$tag.out")"
  else line FAIL "mixed time $tag: $(tail -1 "$T/e")"; fi
done
python3 -c "
import json
a=json.load(open('$T/t_transformer_512.out')); b=json.load(open('$T/t_transformer_512_bf16.out'))
print('mixed time ratio: f32/bf16 step %.2f, forward %.2f' % (a['step_ms']/b['step_ms'], a['forward_ms']/b['forward_ms']))" 2>/dev/null || true
exit $fail
