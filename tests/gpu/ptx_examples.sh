#!/bin/sh
# tests/gpu/ptx_examples.sh KDC PTXAS EXAMPLES [ARCHS]: every example model
# compiled with --target cuda for each of ARCHS (default "80 90": sm_80 and
# sm_90; KDC_FULL_SWEEP=1 forces both), data-parallel on 2 devices too,
# and lstm_text split by units over `model` (a collective in a scan body);
# `kdc inspect --ptx` gives the PTX, one .entry per kernel, and ptxas
# accepts it: kdc compile runs PTXAS (KDC_PTXAS) itself and stores the cubin,
# which `kdc inspect` must report (docs/gpu.md, "SASS in the plan").
# Skipped (exit 77, with the reason) when ptxas is absent.
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
# check MODEL SM LABEL [kdc compile options...]: compile for sm_SM into
# $T/p.plan, ptxas must accept its PTX; counts its kernels into n
check() {
  m=$1 sm=$2 label=$3
  shift 3
  KDC_PTXAS=$PTXAS "$KDC" compile "$m" -o "$T/p.plan" --target cuda --sm "$sm" --batch "${BATCH:-8}" "$@" 2>"$T/err" ||
    { [ "${OPTIONAL:-}" = 1 ] && { echo "skip: $label: $(head -c 200 "$T/err")"; return 1; }
      cat "$T/err"; echo "FAIL: $label sm_$sm: compile"; exit 1; }
  "$KDC" inspect "$T/p.plan" --ptx >"$T/p.ptx"
  grep -q "^.target sm_$sm" "$T/p.ptx" || { echo "FAIL: $label: no .target sm_$sm"; exit 1; }
  "$KDC" inspect "$T/p.plan" | grep -q "^cuda: sm_$sm: cubin [0-9]* bytes (ptxas" ||
    { echo "FAIL: $label sm_$sm: no cubin in the plan"; exit 1; }
  k=$(grep -c "^.visible .entry kdc_cuda_" "$T/p.ptx")
  n=$((n + k))
  echo "ok: $label sm_$sm: $k kernels accepted by ptxas"
}
for m in "$EX"/*/model.json; do
  e=$(basename "$(dirname "$m")")
  for sm in $ARCHS; do
    check "$m" "$sm" "$e, 1 device"
    check "$m" "$sm" "$e, --mesh 2" --mesh 2
  done
done
# training plans at batch 128 on the last of ARCHS: the gradients' reductions run in the
# parallel reduction forms (docs/gpu.md "Kernel forms"), each with its block's
# shared memory; at least one example must have them
red=0
for sm in $ARCHS; do last=$sm; done
for m in "$EX"/*/model.json; do
  e=$(basename "$(dirname "$m")")
  BATCH=128 OPTIONAL=1 check "$m" "$last" "$e, training" --loss mean_squared_error || continue
  red=$((red + $(grep -c "^.*\.shared .* kdc_shared_" "$T/p.ptx" || true)))
done
[ "$red" -gt 0 ] || { echo "FAIL: no parallel reduction kernel in any training plan"; exit 1; }
echo "ok: $red parallel reduction kernels in the training plans"
# LSTMs split by units over `model` (docs/sharding.md): the scan bodies hold
# an all_gather of h, which the CUDA executor runs iteration by iteration
# on every device (docs/gpu.md); their PTX must be accepted too
printf '%s' '{"batch_dim_name": "data", "layout_map": {".*_cell/(recurrent_)?kernel": [null, "model"], ".*_cell/bias": ["model"]}}' >"$T/units.json"
for sm in $ARCHS; do
  check "$EX/lstm_text/model.json" "$sm" "lstm_text, --mesh 1x2 split by units" --mesh 1x2 \
    --layout "$T/units.json"
  "$KDC" inspect "$T/p.plan" >"$T/u.txt"
  [ "$(sed -n '/^  func @lstm.step/,/^  }/p' "$T/u.txt" | grep -c 'all_gather \[model\]')" = 1 ] ||
    { echo "FAIL: lstm_text units split: no all_gather in the scan body"; exit 1; }
done
echo "ok: $n kernels in all"
