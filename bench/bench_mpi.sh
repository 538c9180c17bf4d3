#!/bin/sh
# bench/bench_mpi.sh [BUILD]: all_reduce between 2 local processes
# (bench_mpi.c) through kdc's process backend, under mpirun (against
# MPI_Allreduce in the same run) and over TCP (started without mpirun).
# Loopback only.  Prints two JSON objects.
set -eu
B=${1:-build}
export OMPI_MCA_btl=self,vader OMPI_MCA_oob_tcp_if_include=lo
mpirun --allow-run-as-root --oversubscribe -np 2 "$B/bench/bench_mpi"
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
KDC_COORDINATOR_ADDRESS=127.0.0.1:$port KDC_NUM_PROCESSES=2 KDC_PROCESS_ID=1 "$B/bench/bench_mpi" &
KDC_COORDINATOR_ADDRESS=127.0.0.1:$port KDC_NUM_PROCESSES=2 KDC_PROCESS_ID=0 "$B/bench/bench_mpi"
wait
