#!/bin/sh
# tests/mpi/tcp_run.sh NP PROGRAM ARGS...: runs PROGRAM as NP processes
# started without mpirun, placed by the environment (KDC_COORDINATOR_ADDRESS
# = a free 127.0.0.1 port, KDC_NUM_PROCESSES, KDC_PROCESS_ID); exits 0 when
# every process did, printing each failed process's output.
set -u
NP=$1
shift
T=$(mktemp -d "${TMPDIR:-/tmp}/kdc_tcprun_XXXXXX")
trap 'rm -rf "$T"' EXIT
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
i=0
while [ "$i" -lt "$NP" ]; do
  (KDC_COORDINATOR_ADDRESS=127.0.0.1:$port KDC_NUM_PROCESSES=$NP KDC_PROCESS_ID=$i \
     timeout -k 5 1500 "$@" >"$T/log.$i" 2>&1
   echo $? >"$T/rc.$i") &
  i=$((i + 1))
done
wait
bad=0
i=0
while [ "$i" -lt "$NP" ]; do
  rc=$(cat "$T/rc.$i")
  if [ "$rc" != 0 ]; then
    echo "process $i exited $rc:"
    bad=1
  fi
  [ "$i" != 0 ] && [ "$rc" = 0 ] || sed 's/^/    /' "$T/log.$i"
  i=$((i + 1))
done
exit $bad
