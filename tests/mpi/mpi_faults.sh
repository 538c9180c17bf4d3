#!/bin/sh
# tests/mpi/mpi_faults.sh KDC MPIRUN EXAMPLES: a rank killed with SIGKILL
# (kill -9) at its first collective, and a rank that stops there for longer
# than the timeout
# (KDC_TEST_PROCS_FAULT test hook, runtime/comm_p2p.c), must make the job
# exit non-zero within the collective timeout (2 s here), the message
# naming the missing rank; nothing hangs (the whole check is bounded by
# `timeout 30`).
set -u
KDC=$1 MPIRUN=$2 EX=$3
T=$(mktemp -d "${TMPDIR:-/tmp}/kdc_mpif_XXXXXX")
trap 'rm -rf "$T"' EXIT
export OMPI_MCA_btl=self,vader OMPI_MCA_oob_tcp_if_include=lo OMPI_MCA_btl_vader_single_copy_mechanism=none
"$KDC" compile "$EX/transformer_block/model.json" -o "$T/p.plan" --mesh 2x4 \
  --layout "$EX/transformer_block/layout.json" --batch 8 2>/dev/null || exit 1
for fault in kill stall; do
  start=$(date +%s)
  timeout -k 5 30 $MPIRUN --allow-run-as-root --oversubscribe -np 4 -x LSAN_OPTIONS -x ASAN_OPTIONS \
    -x KDC_TEST_PROCS_FAULT="$fault:1" "$KDC" run "$T/p.plan" \
    --input "$EX/transformer_block/input.npy" --output "$T/y.npy" --collective-timeout 2 \
    </dev/null >"$T/log" 2>&1
  rc=$? end=$(date +%s)
  echo "--- $fault: exit $rc after $((end - start)) s"
  sed 's/^/    /' "$T/log" | head -12
  [ $rc -ne 0 ] || { echo "FAIL: $fault: the job exited 0"; exit 1; }
  [ $rc -ne 124 ] || { echo "FAIL: $fault: the job hung (killed by timeout 30)"; exit 1; }
  [ $((end - start)) -le 20 ] || { echo "FAIL: $fault: took more than 20 s"; exit 1; }
  grep -q "rank 1" "$T/log" || { echo "FAIL: $fault: the message does not name rank 1"; exit 1; }
  [ ! -e "$T/y.npy" ] || { echo "FAIL: $fault: an output was written"; exit 1; }
done
echo "ok: killed and stalled ranks end the job with a message naming rank 1"
