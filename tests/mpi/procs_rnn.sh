#!/bin/sh
# tests/mpi/procs_rnn.sh KDC MPIRUN EXAMPLES MODE NP: collectives inside a
# loop body across processes.  examples/lstm_text (two LSTMs, 12 and 8
# units) on 2x4 with its units split over "model" (docs/sharding.md,
# "Recurrent layers split by units": every step of every loop all_gathers h
# over model; in training the backward loops gather h and reduce_scatter
# its cotangent), run as NP processes -- MODE mpi (mpirun) or tcp
# (--coordinator) -- must give, bitwise, what 8 virtual devices in one
# process give: the predictions of the 37 reference rows (plan batch 8),
# and two shuffled epochs of Adam (sparse categorical cross-entropy,
# batches of 8): the history and the saved weights and optimizer state.
set -u
KDC=$1 MPIRUN=$2 EX=$3 MODE=$4 NP=$5
T=$(mktemp -d "${TMPDIR:-/tmp}/kdc_prnn_XXXXXX")
trap 'rm -rf "$T"' EXIT
. "$(dirname "$0")/procs_lib.sh"
D=$EX/lstm_text
printf '%s' '{"batch_dim_name": "data", "layout_map": {".*_cell/(recurrent_)?kernel":
  [null, "model"], ".*_cell/bias": ["model"]}}' >"$T/layout.json"
# labels: row i of the 37 is class i mod 3 (f32 .npy, written without numpy)
python3 - "$T/y.npy" <<'EOF' || exit 1
import struct, sys
h = "{'descr': '<f4', 'fortran_order': False, 'shape': (37,), }"
h += " " * (63 - (10 + len(h)) % 64) + "\n"
with open(sys.argv[1], "wb") as f:
    f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(h)) + h.encode())
    f.write(struct.pack("<37f", *[float(i % 3) for i in range(37)]))
EOF
FLAGS="--weights $D/weights.safetensors --batch 8 --mesh 2x4 --layout $T/layout.json"
"$KDC" compile "$D/model.json" $FLAGS -o "$T/p.plan" 2>/dev/null || exit 1
# the loops hold collectives: body BODY of PLAN has a KIND step
in_body() {
  "$KDC" inspect "$1" 2>/dev/null | awk -v f="func $2 " -v k="collective $3" \
    'index($0, f) == 1 { on = 1; next } /^func / { on = 0 } on && index($0, k) { n++ }
     END { exit n ? 0 : 1 }' || { echo "FAIL: $1: no $3 in $2"; exit 1; }
}
in_body "$T/p.plan" lstm.step all_gather
"$KDC" run "$T/p.plan" --input "$D/input.npy" --output "$T/virt.npy" || exit 1
(cd "$T" && launch "$MODE" "$NP" "$KDC" run "$T/p.plan" --input "$D/input.npy" \
   --output "$T/procs.npy" --collective-timeout 30) ||
  { echo "FAIL: predict: the job failed"; exit 1; }
cmp "$T/virt.npy" "$T/procs.npy" || { echo "FAIL: predict $MODE np$NP differs"; exit 1; }
echo "ok: predict: $MODE, $NP processes == 8 virtual devices (bitwise)"
"$KDC" compile "$D/model.json" $FLAGS --loss sparse_categorical_crossentropy --optimizer adam \
  -o "$T/f.plan" 2>/dev/null || exit 1
in_body "$T/f.plan" lstm.step2.vjp reduce_scatter
FIT="--fit --x $D/input.npy --y $T/y.npy --epochs 2 --batch-size 8 --shuffle --seed 5"
"$KDC" run "$T/f.plan" $FIT --history "$T/h_virt.json" --save-weights "$T/w_virt.st" \
  >/dev/null || exit 1
(cd "$T" && launch "$MODE" "$NP" "$KDC" run "$T/f.plan" $FIT --history "$T/h.json" \
   --save-weights "$T/w.st" --collective-timeout 30 >/dev/null) ||
  { echo "FAIL: fit: the job failed"; exit 1; }
cmp "$T/h_virt.json" "$T/h.json" || { echo "FAIL: fit $MODE np$NP: history differs"; exit 1; }
cmp "$T/w_virt.st" "$T/w.st" || { echo "FAIL: fit $MODE np$NP: weights differ"; exit 1; }
echo "ok: fit: $MODE, $NP processes == 8 virtual devices: history and weights (bitwise)"
