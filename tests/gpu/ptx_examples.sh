#!/bin/sh
# tests/gpu/ptx_examples.sh KDC PTXAS EXAMPLES [ARCHS]: every example model
# compiled with --target cuda for each of ARCHS (default "80 90": sm_80 and
# sm_90; KDC_FULL_SWEEP=1 forces both), data-parallel on 2 devices too;
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
echo "ok: $n kernels in all"
