#!/bin/sh
# tests/gpu/ptx_examples.sh KDC PTXAS EXAMPLES [ARCHS]: every example model
# compiled with --target cuda for each of ARCHS (default "80 90": sm_80 and
# sm_90; KDC_FULL_SWEEP=1 forces both), data-parallel on 2 devices too,
# and lstm_text split by units over `model` (a collective in a scan body);
# `kdc inspect --ptx` gives the PTX and ptxas accepts it, one .entry per
# kernel.  Skipped (exit 77, with the reason) when ptxas is absent.
set -eu
KDC=$1 PTXAS=$2 EX=$3 ARCHS=${4:-80 90}
[ "${KDC_FULL_SWEEP:-}" != 1 ] || ARCHS="80 90"
if [ -z "$PTXAS" ] || [ ! -x "$PTXAS" ]; then
  echo "SKIP: ptxas not found (install the CUDA toolkit to validate the PTX)"
  exit 77
fi
T=$(mktemp -d "${TMPDIR:-/tmp}/kdc_ptx_XXXXXX")
trap 'rm -rf "$T"' EXIT
n=0
for m in "$EX"/*/model.json; do
  e=$(basename "$(dirname "$m")")
  for sm in $ARCHS; do
    for mesh in "" "--mesh 2"; do
      "$KDC" compile "$m" -o "$T/p.plan" --target cuda --sm $sm $mesh --batch 8 2>"$T/err" ||
        { cat "$T/err"; echo "FAIL: $e sm_$sm $mesh: compile"; exit 1; }
      "$KDC" inspect "$T/p.plan" --ptx >"$T/p.ptx"
      grep -q "^.target sm_$sm" "$T/p.ptx" || { echo "FAIL: $e: no .target sm_$sm"; exit 1; }
      "$PTXAS" -arch=sm_$sm "$T/p.ptx" -o /dev/null ||
        { echo "FAIL: $e sm_$sm $mesh: ptxas rejected the PTX"; exit 1; }
      k=$(grep -c "^.visible .entry kdc_cuda_" "$T/p.ptx")
      n=$((n + k))
      echo "ok: $e sm_$sm ${mesh:-1 device}: $k kernels accepted by ptxas"
    done
  done
done
# LSTMs split by units over `model` (docs/sharding.md): the scan bodies hold
# an all_gather of h, which the CUDA executor runs iteration by iteration
# on every device (docs/gpu.md); their PTX must be accepted too
printf '%s' '{"batch_dim_name": "data", "layout_map": {".*_cell/(recurrent_)?kernel": [null, "model"], ".*_cell/bias": ["model"]}}' >"$T/units.json"
for sm in $ARCHS; do
  "$KDC" compile "$EX/lstm_text/model.json" -o "$T/u.plan" --target cuda --sm $sm --mesh 1x2 \
    --layout "$T/units.json" --batch 8 2>"$T/err" || { cat "$T/err"; echo "FAIL: lstm_text units split: compile"; exit 1; }
  "$KDC" inspect "$T/u.plan" >"$T/u.txt"
  [ "$(sed -n '/^  func @lstm.step/,/^  }/p' "$T/u.txt" | grep -c 'all_gather \[model\]')" = 1 ] ||
    { echo "FAIL: lstm_text units split: no all_gather in the scan body"; exit 1; }
  "$KDC" inspect "$T/u.plan" --ptx >"$T/u.ptx"
  "$PTXAS" -arch=sm_$sm "$T/u.ptx" -o /dev/null ||
    { echo "FAIL: lstm_text units split sm_$sm: ptxas rejected the PTX"; exit 1; }
  k=$(grep -c "^.visible .entry kdc_cuda_" "$T/u.ptx")
  n=$((n + k))
  echo "ok: lstm_text sm_$sm --mesh 1x2, units split (all_gather in the scan body): $k kernels accepted by ptxas"
done
echo "ok: $n kernels in all"
