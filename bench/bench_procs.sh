#!/bin/sh
# bench/bench_procs.sh [BUILD] [GLOBAL_BATCH]: the MNIST MLP training step
# (examples/mnist_mlp, Adam, data parallel over 2 devices) as 2 local
# processes with 1 thread each: kdc under mpirun, kdc started without mpirun
# (TCP, --coordinator), and PyTorch DDP with the gloo backend
# (bench/torch_ddp.py, Debian's python3-torch), same global batch.  Loopback
# only.  Prints one JSON object with the three step times and the ratios.
set -eu
B=${1:-build}
BATCH=${2:-512}
T=$(mktemp -d "${TMPDIR:-/tmp}/kdc_bprocs_XXXXXX")
trap 'rm -rf "$T"' EXIT
SRC=$(cd "$(dirname "$0")/.." && pwd)
export OMPI_MCA_btl=self,vader OMPI_MCA_oob_tcp_if_include=lo OMPI_MCA_btl_vader_single_copy_mechanism=none
export KDC_BENCH_THREADS=1 OMP_NUM_THREADS=1
"$B/tools/kdc" compile "$SRC/examples/mnist_mlp/model.json" --batch "$BATCH" --mesh 2 \
  --loss categorical_crossentropy --optimizer adam -o "$T/p.plan" 2>/dev/null
mpirun --allow-run-as-root --oversubscribe -np 2 -x KDC_BENCH_THREADS \
  "$B/bench/bench_procs_train" "$T/p.plan" >"$T/mpi.json"
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
for i in 1 0; do
  KDC_COORDINATOR_ADDRESS=127.0.0.1:$port KDC_NUM_PROCESSES=2 KDC_PROCESS_ID=$i \
    "$B/bench/bench_procs_train" "$T/p.plan" >"$T/tcp.$i.json" &
done
wait
/usr/bin/python3 "$SRC/bench/torch_ddp.py" "$BATCH" 1 2 >"$T/ddp.json"
/usr/bin/python3 - "$T/mpi.json" "$T/tcp.0.json" "$T/ddp.json" <<'PY'
import json, sys
mpi, tcp, ddp = (json.load(open(f)) for f in sys.argv[1:])
print(json.dumps({"bench": "procs_train_vs_ddp", "model": "examples/mnist_mlp (adam)",
                  "processes": 2, "threads_per_process": 1, "global_batch": ddp["global_batch"],
                  "kdc_mpirun_step_ms": mpi["step_ms"], "kdc_tcp_step_ms": tcp["step_ms"],
                  "torch_ddp_gloo_step_ms": ddp["step_ms"], "torch": ddp["torch"],
                  "kdc_mpirun_over_ddp_time": round(mpi["step_ms"] / ddp["step_ms"], 3),
                  "kdc_tcp_over_ddp_time": round(tcp["step_ms"] / ddp["step_ms"], 3)}))
PY
