#!/bin/sh
# tests/mpi/slurm_e2e.sh KDC EXAMPLES: `kdc run` placed by Slurm's
# variables alone, as under `srun -n 2 kdc run ...` (docs/processes.md,
# "Placement"), set by this script: no Slurm, no flags, loopback only.
#   1. process 0 alone waits for process 1 at the coordinator and fails
#      naming it (so the job really is 2 processes); two processes with SLURM_JOB_ID/NTASKS/PROCID/LOCALID and
#      SLURM_STEP_NODELIST="127.0.0.[1-4,7],localhost" meet at the first host
#      (127.0.0.1) on the port JAX derives from the job id (job id % 4096 +
#      61440; the job id is chosen so that port is free now) and write the
#      MNIST MLP's outputs (--mesh 8, data parallel) bitwise equal to 8
#      virtual devices in one process; `kdc devices --json` names the same
#      coordinator and the sources, `kdc inspect` the process's mesh devices;
#   2. then train for 1 epoch the same way (`--fit --save-weights`): the
#      checkpoint is byte-identical to one process;
#   3. explicit values override Slurm's: --num-processes 1 --process-id 0
#      runs alone (same output), KDC_NUM_PROCESSES=1 too.
set -u
KDC=$1 EX=$2
T=$(mktemp -d "${TMPDIR:-/tmp}/kdc_slurm_XXXXXX")
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*"; for f in "$T"/log.*; do [ -f "$f" ] && sed "s|^|    $f: |" "$f"; done; exit 1; }
# no MPI launcher, no KDC placement from the caller's environment
unset OMPI_COMM_WORLD_SIZE OMPI_COMM_WORLD_RANK OMPI_COMM_WORLD_LOCAL_RANK PMI_SIZE PMI_RANK \
  MPI_LOCALRANKID KDC_COORDINATOR_ADDRESS KDC_NUM_PROCESSES KDC_PROCESS_ID KDC_COORDINATOR_PORT \
  KDC_LOCAL_DEVICE_IDS SLURM_JOB_NODELIST SLURM_NODEID SLURM_STEP_TASKS_PER_NODE \
  SLURM_TASKS_PER_NODE OMPI_COMM_WORLD_LOCAL_SIZE 2>/dev/null

# a job id whose derived port nobody listens on now
JOB=$(python3 -c '
import random, socket
for _ in range(200):
    job = random.randrange(1, 10**6)
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", job % 4096 + 61440)); print(job); break
    except OSError: pass
    finally: s.close()')
[ -n "$JOB" ] || fail "no free port in 61440..65535"
PORT=$((JOB % 4096 + 61440))
export SLURM_JOB_ID=$JOB SLURM_NTASKS=2 SLURM_STEP_NODELIST="127.0.0.[1-4,7],localhost"

# srun -n 2: process i gets SLURM_PROCID=i SLURM_LOCALID=i
srun2() {
  for i in 1 0; do
    (SLURM_PROCID=$i SLURM_LOCALID=$i timeout -k 5 120 "$@" >"$T/out.$i" 2>"$T/log.$i"
     echo $? >"$T/rc.$i") &
  done
  wait
  [ "$(cat "$T/rc.0")" = 0 ] && [ "$(cat "$T/rc.1")" = 0 ]
}

M=$EX/mnist_mlp
"$KDC" compile "$M/model.json" -o "$T/dp.plan" --mesh 8 --batch 8 2>/dev/null || fail compile
(unset SLURM_JOB_ID; "$KDC" run "$T/dp.plan" --input "$M/input.npy" --output "$T/virt.npy") ||
  fail "one process"

# 1. placed by Slurm's variables alone
SLURM_PROCID=1 SLURM_LOCALID=1 "$KDC" devices --json >"$T/devices.json" || fail "kdc devices"
python3 - "$T/devices.json" "$PORT" <<'EOF' || fail "kdc devices --json: $(cat "$T/devices.json")"
import json, sys
d = json.load(open(sys.argv[1]))["process"]
assert d["launcher"] == "slurm", d
assert d["processes"] == {"value": 2, "from": "SLURM_NTASKS"}, d
assert d["process_id"] == {"value": 1, "from": "SLURM_PROCID"}, d
assert d["coordinator"]["value"] == "127.0.0.1:" + sys.argv[2], d
assert d["coordinator"]["from"].startswith("SLURM_STEP_NODELIST (first of 6 hosts)"), d
assert d["local_rank"] == {"value": 1, "from": "SLURM_LOCALID"}, d
EOF
SLURM_PROCID=1 SLURM_LOCALID=1 "$KDC" inspect "$T/dp.plan" >"$T/inspect.txt" || fail "kdc inspect"
grep -q "^  process id        1  *(from SLURM_PROCID)$" "$T/inspect.txt" &&
  grep -q "^  mesh devices      4..7 of 8$" "$T/inspect.txt" || fail "inspect: $(tail -9 "$T/inspect.txt")"
srun2 "$KDC" run "$T/dp.plan" --input "$M/input.npy" --output "$T/slurm.npy" \
  --collective-timeout 30 || fail "srun-like run"
cmp "$T/virt.npy" "$T/slurm.npy" || fail "2 processes placed by Slurm differ from 8 virtual devices"
[ ! -s "$T/out.1" ] || fail "process 1 printed: $(cat "$T/out.1")"
# process 0 alone really waits for process 1 at the coordinator (it is a job of 2)
rm -f "$T/lone.npy"
SLURM_PROCID=0 SLURM_LOCALID=0 timeout 60 "$KDC" run "$T/dp.plan" --input "$M/input.npy" \
  --output "$T/lone.npy" --collective-timeout 2 2>"$T/lone.err" && fail "process 0 alone succeeded"
grep -q "coordinator 127.0.0.1:$PORT: process 1 (rank 1) did not connect" "$T/lone.err" ||
  fail "process 0 alone: $(cat "$T/lone.err")"
[ ! -e "$T/lone.npy" ] || fail "process 0 alone wrote its output"
echo "ok: 2 processes placed by SLURM_* (coordinator 127.0.0.1:$PORT) == 8 virtual devices (bitwise)"

# 2. training the same way
"$KDC" compile "$M/model.json" -o "$T/fit.plan" --mesh 8 --batch 64 --loss categorical_crossentropy \
  --optimizer adam 2>/dev/null || fail "compile fit"
FIT="--fit --x $M/train_x.npy --y $M/train_y.npy --epochs 1 --batch-size 64 --quiet"
(unset SLURM_JOB_ID; "$KDC" run "$T/fit.plan" $FIT --save-weights "$T/w1.st") || fail "fit, one process"
srun2 "$KDC" run "$T/fit.plan" $FIT --save-weights "$T/w2.st" --collective-timeout 30 ||
  fail "srun-like fit"
cmp "$T/w1.st" "$T/w2.st" || fail "the checkpoint of 2 Slurm-placed processes differs"
echo "ok: --fit placed by SLURM_*: checkpoint byte-identical to one process"

# 3. explicit values override Slurm's
rm -f "$T/alone.npy"
SLURM_PROCID=1 SLURM_LOCALID=1 timeout 60 "$KDC" run "$T/dp.plan" --input "$M/input.npy" \
  --output "$T/alone.npy" --num-processes 1 --process-id 0 || fail "--num-processes 1 under Slurm"
cmp "$T/virt.npy" "$T/alone.npy" || fail "--num-processes 1 output"
rm -f "$T/alone.npy"
KDC_NUM_PROCESSES=1 KDC_PROCESS_ID=0 SLURM_PROCID=1 SLURM_LOCALID=1 timeout 60 "$KDC" run \
  "$T/dp.plan" --input "$M/input.npy" --output "$T/alone.npy" || fail "KDC_NUM_PROCESSES=1 under Slurm"
cmp "$T/virt.npy" "$T/alone.npy" || fail "KDC_NUM_PROCESSES=1 output"
echo "ok: flags and KDC_* override Slurm's values"
