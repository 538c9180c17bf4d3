# tests/mpi/procs_lib.sh: sourced by the process tests (docs/processes.md).
#   launch MODE NP KDC ARGS...   runs `KDC ARGS...` as NP processes: MODE
#       mpi: under $MPIRUN (loopback only); tcp: NP background processes
#       meeting at a free 127.0.0.1 port (--coordinator ... --process-id i).
#       Returns 0 when every process exited 0; tcp keeps process i's exit
#       status in $T/rc.i and its stderr in $T/log.i.
#   free_port   a TCP port nobody listens on now (127.0.0.1).
# Needs $T (a scratch directory) and, for mpi, $MPIRUN.
export OMPI_MCA_btl=self,vader OMPI_MCA_oob_tcp_if_include=lo \
  OMPI_MCA_btl_vader_single_copy_mechanism=none

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

launch() {
  mode=$1 np=$2
  shift 2
  if [ "$mode" = mpi ]; then
    "$MPIRUN" --allow-run-as-root --oversubscribe -np "$np" -x LSAN_OPTIONS -x ASAN_OPTIONS "$@"
    return $?
  fi
  port=$(free_port)
  i=1
  while [ "$i" -lt "$np" ]; do
    (timeout -k 5 120 "$@" --coordinator "127.0.0.1:$port" --num-processes "$np" \
       --process-id "$i" >"$T/out.$i" 2>"$T/log.$i"; echo $? >"$T/rc.$i") &
    i=$((i + 1))
  done
  timeout -k 5 120 "$@" --coordinator "127.0.0.1:$port" --num-processes "$np" --process-id 0 \
    2>"$T/log.0"
  echo $? >"$T/rc.0"
  wait
  bad=0
  i=0
  while [ "$i" -lt "$np" ]; do
    if [ "$(cat "$T/rc.$i")" != 0 ]; then
      echo "process $i exited $(cat "$T/rc.$i"):"
      sed 's/^/    /' "$T/log.$i"
      bad=1
    fi
    i=$((i + 1))
  done
  return $bad
}
