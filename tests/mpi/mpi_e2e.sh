#!/bin/sh
# tests/mpi/mpi_e2e.sh KDC MPIRUN EXAMPLES NP: `mpirun -np NP kdc run` of
# example models compiled for 8 devices (data parallel, and model parallel
# with the example's layout: all_reduce over "model") must write outputs
# bitwise equal to the 8 virtual devices of one process; only process 0
# writes.  Loopback only (btl self,vader; oob on lo).
set -eu
KDC=$1 MPIRUN=$2 EX=$3 NP=$4
T=$(mktemp -d "${TMPDIR:-/tmp}/kdc_mpi_XXXXXX")
trap 'rm -rf "$T"' EXIT
export OMPI_MCA_btl=self,vader OMPI_MCA_oob_tcp_if_include=lo OMPI_MCA_btl_vader_single_copy_mechanism=none
MPI="$MPIRUN --allow-run-as-root --oversubscribe -np $NP -x LSAN_OPTIONS -x ASAN_OPTIONS"
for e in mnist_mlp transformer_block; do
  for mode in dp mp; do
    if [ $mode = dp ]; then flags="--mesh 8"; else flags="--mesh 2x4 --layout $EX/$e/layout.json"; fi
    "$KDC" compile "$EX/$e/model.json" -o "$T/$e.$mode.plan" $flags --batch 8 2>/dev/null
    "$KDC" run "$T/$e.$mode.plan" --input "$EX/$e/input.npy" --output "$T/virt.npy"
    (cd "$T" && $MPI "$KDC" run "$T/$e.$mode.plan" --input "$EX/$e/input.npy" --output "$T/mpi.npy" \
       --collective-timeout 20)
    cmp "$T/virt.npy" "$T/mpi.npy" || { echo "FAIL: $e $mode np$NP differs"; exit 1; }
    echo "ok: $e $mode: mpirun -np $NP == 8 virtual devices (bitwise)"
    rm -f "$T/mpi.npy"
  done
done
