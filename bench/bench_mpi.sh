#!/bin/sh
# bench/bench_mpi.sh [BUILD]: MPI all_reduce between 2 local processes
# (bench_mpi.c), loopback only.  Prints JSON.
set -eu
B=${1:-build}
export OMPI_MCA_btl=self,vader OMPI_MCA_oob_tcp_if_include=lo
exec mpirun --allow-run-as-root --oversubscribe -np 2 "$B/bench/bench_mpi"
