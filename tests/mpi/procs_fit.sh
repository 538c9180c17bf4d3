#!/bin/sh
# tests/mpi/procs_fit.sh KDC MPIRUN EXAMPLES MODE NP: `kdc run --fit` of the
# MNIST MLP (Dropout active, Adam, shuffled, a validation split) for 3
# epochs on a plan for 8 devices -- data parallel (--mesh 8) and model
# parallel (--mesh 2x4 with examples/mnist_mlp/layout.json) -- run as NP
# processes (MODE mpi: mpirun; tcp: --coordinator) must give the history
# (every batch loss, epoch loss and val_loss) and the saved weights and
# optimizer state byte-identical to 8 virtual devices in one process; the
# checkpoint is written once, by process 0, and only process 0 prints.
set -u
KDC=$1 MPIRUN=$2 EX=$3 MODE=$4 NP=$5
T=$(mktemp -d "${TMPDIR:-/tmp}/kdc_pfit_XXXXXX")
trap 'rm -rf "$T"' EXIT
. "$(dirname "$0")/procs_lib.sh"
D=$EX/mnist_mlp
FIT="--fit --x $D/train_x.npy --y $D/train_y.npy --epochs 3 --batch-size 16 --shuffle --seed 3
     --validation-split 0.2"
for mode in dp mp; do
  if [ $mode = dp ]; then flags="--mesh 8"; else flags="--mesh 2x4 --layout $D/layout.json"; fi
  "$KDC" compile "$D/model.json" --weights "$D/weights.safetensors" --batch 16 \
    --loss categorical_crossentropy --optimizer adam $flags -o "$T/$mode.plan" 2>/dev/null || exit 1
  "$KDC" run "$T/$mode.plan" $FIT --history "$T/h_virt.json" --save-weights "$T/w_virt.st" \
    >"$T/virt.out" || exit 1
  mkdir "$T/run"
  (cd "$T/run" && launch "$MODE" "$NP" "$KDC" run "$T/$mode.plan" $FIT --history "$T/run/h.json" \
     --save-weights "$T/run/w.st" --collective-timeout 30 >"$T/procs.out") ||
    { echo "FAIL: $mode: the job failed"; exit 1; }
  cmp "$T/h_virt.json" "$T/run/h.json" || { echo "FAIL: $mode $MODE np$NP: history differs"; exit 1; }
  cmp "$T/w_virt.st" "$T/run/w.st" || { echo "FAIL: $mode $MODE np$NP: weights differ"; exit 1; }
  # process 0 alone prints: the same three epoch lines as one process
  [ "$(grep -c '^Epoch' "$T/procs.out")" = 3 ] ||
    { echo "FAIL: $mode: expected 3 epoch lines"; cat "$T/procs.out"; exit 1; }
  for f in "$T"/out.*; do
    [ ! -s "$f" ] || { echo "FAIL: $mode: $f: a process other than 0 printed"; exit 1; }
  done
  left=$(ls "$T/run" | grep -v '^h.json$' | grep -v '^w.st$' || true)
  [ -z "$left" ] || { echo "FAIL: $mode: stray files: $left"; exit 1; }
  echo "ok: $mode: $MODE, $NP processes == 8 virtual devices: history and weights (bitwise)"
  rm -rf "$T/run"
done
