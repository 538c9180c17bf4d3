#!/usr/bin/env bash
# tests/gpu/device_check.sh BUNDLE [OUT_DIR] [--quick] [--no-peers] [--no-extra] [--sm N]
#                            [--budget S] [--keep]
#
# kdc's CUDA target checked on a GPU machine from the bundle alone
# (docs/gpu.md, "Bundle"; installed as share/kdc/device_check.sh).  BUNDLE
# is the tarball kdc-*-Linux-x86_64.tar.xz or its unpacked folder.  Needs
# python3 with numpy for the comparisons; PyTorch and JAX only for the
# peers' timings (skipped when absent).  On a machine without a GPU the CPU
# halves run and every GPU check prints SKIP with the reason.
#
#   1. libs      every library the bundle's binaries load comes from the
#                bundle or glibc (check_libs.sh)
#   2. pred      every example: a CPU plan and a CUDA plan (--target cuda
#                --sm N, batch 16) run on its inputs; |gpu - cpu| <= 1e-4 +
#                1e-4 |cpu| per element (libdevice's transcendentals differ
#                from glibc's in the last ulps: 1e-4 absolute covers them,
#                as on the H200, docs/gpu.md)
#   3. fit       3 epochs, batch 8: MNIST MLP (Adam), small CNN (SGD 0.01),
#                transformer block (Adam, one-hot targets of row % 5); loss
#                history (rel 1e-3) and final weights (1e-3 + 1e-3 |cpu|);
#                then transformer_512 and cnn_64 at batch 64 (SGD, 2 steps),
#                where the GPU's parallel reduction forms run (fit64 lines)
#   4. timings   kdc (bench_plan --resident 1, the benchmark mode: median
#                training step and forward with the data on the GPU, the
#                fit loop's step with uploads overlapped; fp32, and the
#                transformer with TF32; compile ms; kdc run's wall time from
#                process start; the transformer step's GPU time per kernel
#                by ncu, bench/gpu_profile.py), then PyTorch eager, torch.compile and
#                JAX jit at the same shapes (bench/peers_gpu.py), each under
#                the time left of --budget (default 330 s)
#   5. extra     the bundle's other device checks, before the peers:
#                whole_step_check.sh (graphs, staged fit, TF32) and
#                mixed_check.sh (bf16), their lines prefixed by their name
# One line per check: PASS name ... / FAIL name ... / SKIP name: why.
# Figures: OUT_DIR/figures.json (and OUT_DIR/log.txt, everything printed;
# OUT_DIR/logs, each step's output).  Scratch in $TMPDIR (removed; --keep).
# Exit 1 when any check FAILs.
#   --quick     predictions of 6 examples, one fit, kdc timings and
#               PyTorch eager only
#   --no-peers  no PyTorch / JAX timings
#   --peers L   only these peers (comma list of torch, jax, torch_compile)
#   --no-extra  without step 5
#   --keep      keep the scratch folder (plans, outputs) and say where
set -u
T0=$(date +%s)
BUNDLE=""; OUT=""; QUICK=0; PEERS=1; PEERLIST=""; EXTRA=1; SM=""; BUDGET=330; KEEP=0
while [ $# -gt 0 ]; do
  case $1 in
    --quick) QUICK=1 ;;
    --no-peers) PEERS=0 ;;
    --peers) PEERLIST=$2; shift ;;
    --keep) KEEP=1 ;;
    --no-extra) EXTRA=0 ;;
    --sm) SM=$2; shift ;;
    --budget) BUDGET=$2; shift ;;
    -h|--help) sed -n '2,35p' "$0"; exit 0 ;;
    -*) echo "device_check.sh: unknown option $1" >&2; exit 2 ;;
    *) if [ -z "$BUNDLE" ]; then BUNDLE=$1; elif [ -z "$OUT" ]; then OUT=$1; else echo "device_check.sh: extra argument $1" >&2; exit 2; fi ;;
  esac
  shift
done
[ -n "$BUNDLE" ] || { sed -n '2,35p' "$0"; exit 2; }
OUT=${OUT:-$PWD/device-check-out}
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)
# the unpacked bundle, plans and outputs (~250 MB) go to a scratch folder;
# OUT gets log.txt, figures.json and logs/ (the small per-check logs)
W=$(mktemp -d "${TMPDIR:-/tmp}/kdc-device-check.XXXXXX"); mkdir -p "$W"/plans "$W"/res "$W"/data
[ $KEEP = 1 ] || trap 'rm -rf "$W"' EXIT
exec > >(tee "$OUT/log.txt") 2>&1
FIG=$W/figures.tsv; : > "$FIG"
fig() { printf '%s\t%s\n' "$1" "$2" >> "$FIG"; }
npass=0; nfail=0; nskip=0
line() {  # line PASS|FAIL|SKIP text...
  case $1 in PASS) npass=$((npass+1)) ;; FAIL) nfail=$((nfail+1)) ;; SKIP) nskip=$((nskip+1)) ;; esac
  echo "$*"
}
left() { echo $(( BUDGET - ($(date +%s) - T0) )); }
other() {  # other NAME TIMEOUT COMMAND...: another check script's PASS/FAIL/SKIP lines, counted
  local name=$1 t=$2 rc l; shift 2
  while IFS= read -r l; do
    case $l in PASS\ *|FAIL\ *|SKIP\ *) line "${l%% *}" "$name: ${l#* }" ;; *) echo "  $l" ;; esac
  done < <(timeout "$t" "$@" 2>&1; echo "rc=$?" > "$W/res/$name.rc")
  rc=$(sed 's/rc=//' "$W/res/$name.rc")
  [ "$rc" = 0 ] || [ "$rc" = 1 ] || line FAIL "$name: exit $rc$([ "$rc" = 124 ] && echo " (timeout ${t} s)")"
}
verdict() {  # verdict NAME COMMAND...: the comparison's PASS/FAIL line (a crash is a FAIL)
  local name=$1 out; shift
  out=$("$@" 2>&1 | tail -1)
  case $out in PASS\ *|FAIL\ *) line "${out%% *}" "$name ${out#* }" ;; *) line FAIL "$name: $out" ;; esac
}

# ---- the bundle
if [ -f "$BUNDLE" ]; then
  mkdir -p "$W/bundle" && tar xJf "$BUNDLE" -C "$W/bundle" || { line FAIL unpack "$BUNDLE"; exit 1; }
  P=$(dirname "$(dirname "$(ls "$W"/bundle/*/bin/kdc | head -1)")")
else
  P=$(cd "$BUNDLE" && pwd)
fi
K=$P/bin/kdc; BP=$P/bin/bench_plan; S=$P/share/kdc
[ -x "$K" ] || { line FAIL bundle: no bin/kdc under "$P"; exit 1; }
echo "== kdc bundle $P ($("$K" --version 2>&1 | head -1)); $(uname -srm); $(nproc) cores; $(date -u +%FT%TZ)"
export KDC_CACHE_DIR=$W/cache
fig date "\"$(date -u +%FT%TZ)\""; fig bundle "\"$(basename "$P")\""

# ---- 1. libraries
while read -r l; do
  case $l in PASS*|FAIL*|SKIP*) line $l ;; *) echo "$l" ;; esac
done < <(bash "$S/check_libs.sh" "$P")

# ---- environment: python, CUDA libraries, libdevice, the GPU
PY=$(command -v python3 || true)
if [ -n "$PY" ] && ! "$PY" -c "import numpy" 2>/dev/null; then PY=""; fi
[ -n "$PY" ] || echo "note: no python3 with numpy: comparisons are skipped"
CMP() { "$PY" "$S/gpu_compare.py" "$@"; }
# NVIDIA's wheels (nvidia-cublas, nvidia-nccl-cu13) of this python: kdc
# finds them itself when that python's bin/ is on PATH (runtime/cuda/
# libdirs.c); named here too, for a python found elsewhere
if [ -n "$PY" ]; then
  nv=$("$PY" -c "import nvidia, os; print(':'.join(os.path.join(p, d, 'lib') for p in nvidia.__path__ for d in sorted(os.listdir(p)) if os.path.isdir(os.path.join(p, d, 'lib'))))" 2>/dev/null)
  [ -n "$nv" ] && export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$nv
fi
if [ -z "${KDC_LIBDEVICE:-}" ]; then
  for f in /usr/local/cuda/nvvm/libdevice/libdevice.10.bc /usr/local/cuda-*/nvvm/libdevice/libdevice.10.bc; do
    [ -f "$f" ] && { export KDC_LIBDEVICE=$f; break; }
  done
  if [ -z "${KDC_LIBDEVICE:-}" ] && [ -n "$PY" ]; then  # jax's CUDA wheels bring nvidia-cuda-nvcc
    f=$("$PY" -c "
import glob, sysconfig
try:
    import nvidia; roots = list(nvidia.__path__)
except ImportError:
    roots = []
hits = [h for r in roots for h in sorted(glob.glob(r + '/*/nvvm/libdevice/libdevice.10.bc'))]
if not hits:  # anywhere else in this python's packages (slower)
    hits = sorted(glob.glob(sysconfig.get_paths()['purelib'] + '/**/libdevice.10.bc', recursive=True))
print(hits[0] if hits else '')" 2>/dev/null)
    [ -n "$f" ] && export KDC_LIBDEVICE=$f
  fi
fi
echo "libdevice: ${KDC_LIBDEVICE:-none found (plans with transcendentals will not compile for CUDA)}"
echo "cuda libraries: LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"
command -v nvidia-smi >/dev/null && nvidia-smi -L
# the GPU kdc sees (kdc devices --json: name, compute capability)
DEV=$("$K" devices --json 2>&1)
GPU=""; GPUSM=""
if [ -n "$PY" ]; then
  read -r GPUSM GPU < <(echo "$DEV" | "$PY" -c "
import json, sys
d = json.load(sys.stdin); g = d.get('gpus') or []
print(g[0]['compute_capability'].replace('.', ''), g[0]['name']) if g else print('', '')" 2>/dev/null)
  NOGPU=$(echo "$DEV" | "$PY" -c "import json,sys; print(json.load(sys.stdin).get('gpus_why_none') or '')" 2>/dev/null)
else
  echo "$DEV" | grep -q '"gpus": \[\]' || { GPU=$(echo "$DEV" | grep -o '"name": "[^"]*"' | head -1); GPUSM=$(echo "$DEV" | grep -o '"compute_capability": "[0-9.]*"' | head -1 | grep -oE '[0-9]+\.[0-9]+' | tr -d .); }
  NOGPU=$(echo "$DEV" | grep -o '"gpus_why_none": "[^"]*"' | cut -d'"' -f4)
fi
if [ -n "$GPU" ]; then
  echo "gpu: $GPU (sm_$GPUSM)"; fig gpu "\"$(echo "$GPU" | tr -d '"\\')\""
  # kdc emits sm_80 or sm_90 PTX; a newer GPU JIT-compiles the sm_90 PTX
  [ -n "$GPUSM" ] && { [ "$GPUSM" -ge 90 ] && GPUSM=90 || GPUSM=80; }
  SM=${SM:-$GPUSM}
else
  echo "gpu: none: $NOGPU"
fi
SM=${SM:-90}
why="no CUDA device"
CUDA=(--target cuda --sm "$SM"); PEERDEV=cuda; REPS=20; FITSTEPS=""
if [ "${KDC_DEVICE_CHECK_DRYRUN:-0}" = 1 ]; then
  # the script's own test without a GPU: CPU plans stand in for the CUDA
  # plans and the peers run on the CPU, so every step and comparison runs
  GPU="dry run: CPU plans stand in for CUDA plans"; CUDA=(); PEERDEV=cpu; REPS=2; FITSTEPS="--fit-steps 2"
  echo "gpu: $GPU (KDC_DEVICE_CHECK_DRYRUN=1: nothing here is a GPU result)"
  fig dry_run true
fi
fig sm "$SM"

# ---- 2. predictions
B=16
examples=()
for e in "$S"/examples/*/; do [ -f "$e/model.json" ] && examples+=("$(basename "$e")"); done
[ $QUICK = 1 ] && examples=(mnist_mlp small_cnn transformer_block lstm_text norm_zoo activations)
echo "== predictions: CPU plan vs CUDA plan (sm_$SM, batch $B), ${#examples[@]} examples"
pred_one() {  # one example's CPU and CUDA plans: results in $W/res/$n.*
  local n=$1 e=$S/examples/$1 r=$W/res/$1 ins=() w=() nout i oc=() og=()
  for f in "$e"/input.npy "$e"/input0.npy "$e"/input1.npy "$e"/input2.npy; do [ -f "$f" ] && ins+=(--input "$f"); done
  [ -f "$e/weights.safetensors" ] && w=(--weights "$e/weights.safetensors")
  nout=$(ls "$e" | grep -c '^expected[0-9]*\.npy$'); [ "$nout" -ge 1 ] || nout=1
  for i in $(seq 0 $((nout-1))); do oc+=(--output "$r.cpu.$i.npy"); og+=(--output "$r.gpu.$i.npy"); done
  echo "$nout" > "$r.nout"
  { "$K" compile "$e/model.json" "${w[@]}" --batch $B -o "$W/plans/$n.cpu.plan" &&
    "$K" run "$W/plans/$n.cpu.plan" "${ins[@]}" "${oc[@]}"; } > "$r.cpu.log" 2>&1; echo $? > "$r.cpu.rc"
  "$K" compile "$e/model.json" "${w[@]}" --batch $B "${CUDA[@]}" -o "$W/plans/$n.cuda.plan" \
    > "$r.cc.log" 2>&1; echo $? > "$r.cc.rc"
  if [ -n "$GPU" ] && [ "$(cat "$r.cc.rc")" = 0 ]; then
    timeout 120 "$K" run "$W/plans/$n.cuda.plan" "${ins[@]}" "${og[@]}" > "$r.gpu.log" 2>&1; echo $? > "$r.gpu.rc"
  fi
}
t=$(date +%s)
jobs_max=$(( $(nproc) < 8 ? $(nproc) : 8 ))
pids=()
for n in "${examples[@]}"; do
  while [ "$(jobs -rp | wc -l)" -ge "$jobs_max" ]; do sleep 0.1; done
  pred_one "$n" & pids+=($!)
done
wait "${pids[@]}"  # (a bare wait would also wait for the log's tee)
for n in "${examples[@]}"; do
  r=$W/res/$n
  if [ "$(cat "$r.cpu.rc")" != 0 ]; then line FAIL "pred $n: CPU plan: $(tail -1 "$r.cpu.log")"; continue; fi
  if [ "$(cat "$r.cc.rc")" != 0 ]; then line FAIL "pred $n: CUDA compile: $(tail -1 "$r.cc.log")"; continue; fi
  if [ -z "$GPU" ]; then line SKIP "pred $n: CPU plan ran, CUDA plan compiled; $why"; continue; fi
  if [ "$(cat "$r.gpu.rc")" != 0 ]; then line FAIL "pred $n: CUDA run exit $(cat "$r.gpu.rc"): $(tail -2 "$r.gpu.log" | tr '\n' ' ')"; continue; fi
  for i in $(seq 0 $(( $(cat "$r.nout") - 1 ))); do
    if [ -z "$PY" ]; then line SKIP "pred $n.$i: no python3 with numpy to compare"; continue; fi
    verdict "pred $n.$i" CMP pred "$r.gpu.$i.npy" "$r.cpu.$i.npy"
  done
done
fig pred_seconds $(( $(date +%s) - t ))

# ---- 3. training: CPU vs GPU
echo "== training: 3 epochs, batch 8, CPU plan vs CUDA plan"
E=$S/examples
fits=("mnist_adam mnist_mlp adam 0.001" "cnn_sgd small_cnn sgd 0.01" "tblock_adam transformer_block adam 0.001")
[ $QUICK = 1 ] && fits=("${fits[0]}")
for f in "${fits[@]}"; do
  set -- $f; name=$1; ex=$E/$2; opt=$3; lr=$4
  x=$ex/train_x.npy; y=$ex/train_y.npy
  if [ ! -f "$x" ]; then  # the transformer: its example input, one-hot targets row % classes
    x=$ex/input.npy; y=$W/data/$name.y.npy
    if [ -z "$PY" ]; then line SKIP "fit $name: no python3 with numpy to make its targets"; continue; fi
    rows=$("$PY" -c "import numpy as np; print(np.load('$x').shape[0])")
    cls=$("$PY" -c "import numpy as np; print(np.load('$ex/expected.npy').shape[-1])")
    CMP onehot "$rows" "$cls" "$y"
  fi
  ok=1
  for t in cpu cuda; do
    tgt=(); [ $t = cuda ] && tgt=("${CUDA[@]}")
    "$K" compile "$ex/model.json" --weights "$ex/weights.safetensors" --batch 8 --loss categorical_crossentropy \
      --optimizer $opt --learning-rate $lr "${tgt[@]}" -o "$W/plans/$name.$t.plan" > "$W/res/$name.$t.log" 2>&1 ||
      { line FAIL "fit $name: $t compile: $(tail -1 "$W/res/$name.$t.log")"; ok=0; break; }
    [ $t = cuda ] && [ -z "$GPU" ] && break
    timeout 180 "$K" run "$W/plans/$name.$t.plan" --fit --x "$x" --y "$y" --epochs 3 --batch-size 8 --quiet \
      --history "$W/res/$name.$t.hist.json" --save-weights "$W/res/$name.$t.safetensors" >> "$W/res/$name.$t.log" 2>&1 ||
      { line FAIL "fit $name: $t run: $(tail -2 "$W/res/$name.$t.log" | tr '\n' ' ')"; ok=0; break; }
  done
  [ $ok = 1 ] || continue
  if [ -z "$GPU" ]; then line SKIP "fit $name: CPU fit ran, CUDA plan compiled; $why"; continue; fi
  if [ -z "$PY" ]; then line SKIP "fit $name: no python3 with numpy to compare"; continue; fi
  verdict "fit $name history" CMP hist "$W/res/$name.cuda.hist.json" "$W/res/$name.cpu.hist.json"
  verdict "fit $name weights" CMP weights "$W/res/$name.cuda.safetensors" "$W/res/$name.cpu.safetensors"
done

# ---- 3b. training at batch 64: the GPU's parallel reduction forms (docs/gpu.md
# "Kernel forms": at batch 8 most reductions are too short for them): the
# transformer (d 512: COLUMN forms split over blocks, ROW forms for the
# normalisations) and cnn_64 (batch-norm statistics over 64x62x62 terms), SGD
# (Adam would turn a rounding-level gradient into a full step), 2 epochs of 2
# steps on random inputs, CPU plan vs CUDA plan as above
if [ -n "$PY" ] && [ $QUICK = 0 ]; then
  echo "== training at batch 64: reduction forms, CPU plan vs CUDA plan"
  "$PY" "$S/bench/big_models.py" "$E" "$W/data"
  for name in transformer_512 cnn_64; do
    m=$W/data/$name.json; x=$W/data/$name.x.npy; y=$W/data/$name.y.npy
    "$PY" -c "
import json, sys, numpy as np
m = json.load(open('$m')); s = next(l for l in m['config']['layers'] if l['class_name'] == 'InputLayer')['config']['batch_shape'][1:]
r = np.random.default_rng(0)
np.save('$x', r.standard_normal([128] + s).astype(np.float32))
np.save('$y', np.eye(10, dtype=np.float32)[np.arange(128) % 10])"
    ok=1
    for t in cpu cuda; do
      tgt=(); [ $t = cuda ] && tgt=("${CUDA[@]}")
      "$K" compile "$m" --random-init --batch 64 --loss categorical_crossentropy --optimizer sgd \
        --learning-rate 0.01 "${tgt[@]}" -o "$W/plans/f64_$name.$t.plan" > "$W/res/f64_$name.$t.log" 2>&1 ||
        { line FAIL "fit64 $name: $t compile: $(tail -1 "$W/res/f64_$name.$t.log")"; ok=0; break; }
      [ $t = cuda ] && [ -z "$GPU" ] && break
      timeout 180 "$K" run "$W/plans/f64_$name.$t.plan" --fit --x "$x" --y "$y" --epochs 2 --batch-size 64 \
        --quiet --history "$W/res/f64_$name.$t.hist.json" --save-weights "$W/res/f64_$name.$t.safetensors" \
        >> "$W/res/f64_$name.$t.log" 2>&1 ||
        { line FAIL "fit64 $name: $t run: $(tail -2 "$W/res/f64_$name.$t.log" | tr '\n' ' ')"; ok=0; break; }
    done
    [ $ok = 1 ] || continue
    if [ -z "$GPU" ]; then line SKIP "fit64 $name: CPU fit ran, CUDA plan compiled; $why"; continue; fi
    verdict "fit64 $name history" CMP hist "$W/res/f64_$name.cuda.hist.json" "$W/res/f64_$name.cpu.hist.json"
    verdict "fit64 $name weights" CMP weights "$W/res/f64_$name.cuda.safetensors" "$W/res/f64_$name.cpu.safetensors"
  done
fi

# ---- 4. timings
echo "== timings (ms; kdc: bench_plan --resident 1 medians)"
if [ -z "$GPU" ]; then
  line SKIP "timings: $why"
elif [ -z "$PY" ]; then
  line SKIP "timings: no python3 with numpy (the benchmark models are written by bench/*.py)"
else
  "$PY" "$S/bench/big_mlp.py" "$E/mlp_sequential/model.json" "$W/data/big_mlp.json"
  "$PY" "$S/bench/big_models.py" "$E" "$W/data"
  # name  model  batch  extra compile flags: training plans, fp32 ("highest"),
  # and the transformer with TF32 GEMMs (JAX's default precision's peer)
  tm=("mnist_b128 $E/mnist_mlp/model.json 128" "big_b256 $W/data/big_mlp.json 256"
      "tblock512_b64 $W/data/transformer_512.json 64"
      "tblock512_b64_tf32 $W/data/transformer_512.json 64 --matmul-precision tf32")
  [ -z "${CUDA[*]}" ] && tm=("${tm[0]}")  # the dry run: the plumbing, not CPU timings
  for m in "${tm[@]}"; do
    set -- $m; name=$1; model=$2; b=$3; shift 3
    t=$(date +%s%N)
    if ! "$K" compile "$model" --random-init --batch "$b" --loss categorical_crossentropy \
        --optimizer adam "$@" "${CUDA[@]}" -o "$W/plans/t_$name.plan" > "$W/res/t_$name.log" 2>&1; then
      line FAIL "time $name: compile: $(tail -1 "$W/res/t_$name.log")"; continue
    fi
    fig "kdc_${name}_compile_ms" $(( ($(date +%s%N) - t) / 1000000 ))
    if [ ! -x "$BP" ]; then line SKIP "time $name: no bin/bench_plan in this bundle"; continue; fi
    # the benchmark mode (docs/gpu.md): data resident on the GPU, as the peers' data
    if timeout 180 "$BP" "$W/plans/t_$name.plan" --reps $REPS --resident 1 $FITSTEPS \
        > "$W/res/t_$name.json" 2>>"$W/res/t_$name.log"; then
      j=$(tail -1 "$W/res/t_$name.json")
      s=$(echo "$j" | "$PY" -c "
import json, sys
d = json.loads(sys.stdin.read())
for k in ('step_ms', 'forward_ms', 'fit_step_ms', 'fit_step_ms_unstaged', 'load_s', 'graphs'):
    print(f'kdc_${name}_{k}\t{json.dumps(d.get(k))}')")
      echo "$s" >> "$FIG"
      line PASS "time $name: kdc $j"
    else
      line FAIL "time $name: bench_plan: $(tail -2 "$W/res/t_$name.log" | tr '\n' ' ')"
    fi
  done
  # kdc run from process start (CUDA init, module load): the transformer's forward plan, 64 rows
  "$PY" -c "import numpy as np; np.save('$W/data/tx64.npy', np.random.default_rng(0).standard_normal((64,128,512), dtype=np.float32))"
  if "$K" compile "$W/data/transformer_512.json" --random-init --batch 64 "${CUDA[@]}" \
      -o "$W/plans/tfwd.plan" > "$W/res/tfwd.log" 2>&1; then
    for k in first second; do
      t=$(date +%s%N)
      if "$K" run "$W/plans/tfwd.plan" --input "$W/data/tx64.npy" --output "$W/res/tfwd.npy" >> "$W/res/tfwd.log" 2>&1; then
        s=$(( ($(date +%s%N) - t) / 1000000 )); fig "kdc_run_tblock64_${k}_ms" "$s"
        line PASS "time kdc run ($k): transformer forward, 64 rows, from process start: $s ms"
      else line FAIL "time kdc run: $(tail -1 "$W/res/tfwd.log")"; break; fi
    done
  else line FAIL "time kdc run: compile: $(tail -1 "$W/res/tfwd.log")"; fi
  # where the transformer's training step spends its GPU time, per kernel (ncu)
  if [ -n "${CUDA[*]}" ] && [ -f "$W/plans/t_tblock512_b64.plan" ]; then
    timeout 150 "$PY" "$S/bench/gpu_profile.py" "$K" "$W/plans/t_tblock512_b64.plan" \
      "$OUT/profile" > "$W/res/profile.txt" 2>&1
    cat "$W/res/profile.txt"
    if grep -q "^gpu_profile:" "$W/res/profile.txt"; then line PASS "profile: $(grep "^gpu_profile:" "$W/res/profile.txt")"
    else line SKIP "profile: $(tail -1 "$W/res/profile.txt")"; fi
  fi
fi

# ---- 5. the other device checks of the bundle
if [ $EXTRA = 1 ]; then
  echo "== whole-step checks (whole_step_check.sh) and bf16 (mixed_check.sh)"
  other whole_step 240 bash "$S/whole_step_check.sh" "$P/bin" "$E" "$W/whole_step" --sm "$SM"
  if [ -n "$GPU" ] && [ -n "${CUDA[*]}" ]; then
    other mixed 240 bash -c 'cd "$1" && bash mixed_check.sh "$2" "$3" "$4"' _ "$S" "$K" "$BP" "$SM"
  elif [ -n "$GPU" ]; then line SKIP "mixed: dry run (its bf16 plans need the GPU)"
  else line SKIP "mixed: $why"; fi
fi

if [ -n "$GPU" ] && [ -n "$PY" ]; then
  # the peers, each in its own process, under the time left
  if [ $PEERS = 1 ]; then
    peers=(torch jax torch_compile); [ $QUICK = 1 ] && peers=(torch)
    [ -n "$PEERLIST" ] && IFS=, read -r -a peers <<< "$PEERLIST"
    for p in "${peers[@]}"; do
      l=$(left)
      if [ "$l" -lt 20 ]; then line SKIP "peer $p: budget spent (--budget $BUDGET)"; continue; fi
      timeout "$l" "$PY" "$S/bench/peers_gpu.py" "$p" --device $PEERDEV --reps $REPS > "$W/res/peer_$p.json" 2> "$W/res/peer_$p.err"
      rc=$?
      j=$(tail -1 "$W/res/peer_$p.json")
      [ -z "$j" ] && j=$(grep '^{' "$W/res/peer_$p.err" | tail -1)  # JAX's partial figures when cut off
      if [ -z "$j" ]; then line SKIP "peer $p: exit $rc: $(tail -1 "$W/res/peer_$p.err")"; continue; fi
      echo "$j" | "$PY" -c "
import json, sys
for k, v in json.load(sys.stdin).items(): print(f'{k}\t{json.dumps(v)}')" >> "$FIG"
      if echo "$j" | grep -q "_error\""; then line SKIP "peer $p: $(echo "$j" | grep -o '"[a-z_0-9]*_error": "[^"]*"' | head -1)"
      else line PASS "peer $p$([ $rc = 124 ] && echo ' (cut off by the budget: partial)'): $j"; fi
    done
  else
    line SKIP "peers: --no-peers"
  fi
fi

fig total_s $(( $(date +%s) - T0 ))
mkdir -p "$OUT/logs" && cp "$W"/res/*.log "$W"/res/*.json "$W"/res/*.err "$OUT/logs/" 2>/dev/null
[ $KEEP = 1 ] && echo "work folder kept: $W"
if [ -n "$PY" ]; then CMP json "$FIG" "$OUT/figures.json"; else cp "$FIG" "$OUT/figures.tsv"; fi
echo "SUMMARY: $npass passed, $nfail failed, $nskip skipped in $(( $(date +%s) - T0 )) s; figures: $OUT/figures.json"
[ $nfail = 0 ]
