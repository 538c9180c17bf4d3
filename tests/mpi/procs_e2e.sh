#!/bin/sh
# tests/mpi/procs_e2e.sh KDC MPIRUN EXAMPLES MODE NP: example models
# compiled for 8 devices (data parallel, and model parallel with the
# example's layout: all_reduce over "model") run as NP processes -- MODE mpi
# (`mpirun -np NP kdc run`) or tcp (NP processes started without mpirun,
# meeting at --coordinator) -- must write outputs bitwise equal to the 8
# virtual devices of one process; only process 0 writes.  Loopback only.
set -u
KDC=$1 MPIRUN=$2 EX=$3 MODE=$4 NP=$5
T=$(mktemp -d "${TMPDIR:-/tmp}/kdc_procs_XXXXXX")
trap 'rm -rf "$T"' EXIT
. "$(dirname "$0")/procs_lib.sh"
for e in mnist_mlp transformer_block; do
  for mode in dp mp; do
    if [ $mode = dp ]; then flags="--mesh 8"; else flags="--mesh 2x4 --layout $EX/$e/layout.json"; fi
    "$KDC" compile "$EX/$e/model.json" -o "$T/$e.$mode.plan" $flags --batch 8 2>/dev/null || exit 1
    "$KDC" run "$T/$e.$mode.plan" --input "$EX/$e/input.npy" --output "$T/virt.npy" || exit 1
    (cd "$T" && launch "$MODE" "$NP" "$KDC" run "$T/$e.$mode.plan" --input "$EX/$e/input.npy" \
       --output "$T/procs.npy" --collective-timeout 30) || { echo "FAIL: $e $mode"; exit 1; }
    cmp "$T/virt.npy" "$T/procs.npy" || { echo "FAIL: $e $mode $MODE np$NP differs"; exit 1; }
    echo "ok: $e $mode: $MODE, $NP processes == 8 virtual devices (bitwise)"
    rm -f "$T/procs.npy"
  done
done
