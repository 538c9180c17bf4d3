#!/usr/bin/env bash
# Builds kdc in Release and runs every benchmark; each prints one JSON object.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build-bench -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build-bench -j "$(nproc)" --target bench_predict bench_mesh bench_collectives bench_train bench_models \
  bench_gemm_panels bench_plan kdc >/dev/null
# kdc against XLA (Keras 3 on JAX, plain jax.jit) and PyTorch 2 (eager,
# torch.compile): one JSON line per model with kdc/peer ratios, compile +
# first run against XLA's first jitted call, and the 2x4 ModelParallel MNIST
# MLP on 8 virtual devices against Keras' ModelParallel on 8 host devices
# (bench/compare.py; .ci/requirements.txt has JAX and Keras, torch 2.13 is
# `pip install torch==2.13.0`).
python3 -c 'import torch' 2>/dev/null || python3 -m pip install -q torch==2.13.0
python3 bench/compare.py build-bench
./build-bench/bench/bench_predict
./build-bench/bench/bench_mesh
./build-bench/bench/bench_collectives
# Training: kdc's train_step vs the GEMMs alone (bench_train), vs PyTorch
# eager on the same shapes and threads (torch_train.py; Debian's
# python3-torch, installed here when missing, never in CI).
python3 bench/big_mlp.py examples/mlp_sequential/model.json build-bench/big_mlp.json
./build-bench/bench/bench_train build-bench/big_mlp.json
# The same step's weight-gradient GEMMs whole vs in tiles, with and without
# an Adam update per tile (why kdc does not run GEMM epilogues per panel).
./build-bench/bench/bench_gemm_panels
# Debian's python3-torch lives in /usr/bin/python3 (not a pyenv python)
if ! /usr/bin/python3 -c 'import torch' 2>/dev/null; then
  apt-get install -y python3-torch >/dev/null
fi
# PyTorch's CPU GEMMs are Debian's OpenBLAS too: the same kernels as kdc's
# (runtime/blas_core.c picks them by cpuid when OpenBLAS falls back to
# Prescott), so the comparison is kernel for kernel
core=$(./build-bench/bench/bench_train --blas-core)
OPENBLAS_CORETYPE=$core /usr/bin/python3 bench/torch_train.py "$(nproc)"
# Real models against PyTorch in one run (bench_models starts
# bench/torch_models.py itself): the transformer block at d_model 512 and the
# CNN on 64x64 images, forward and training step.
python3 bench/big_models.py examples build-bench
./build-bench/bench/bench_models build-bench
# --layout auto (issue 20): the cost model calibrated here, the 64-layer
# search time, and auto vs DataParallel vs the hand layouts, predicted and
# measured (docs/sharding.md "Cost model"); needs big_mlp.json and
# big_models.py's files in build-bench.
./build-bench/bench/bench_auto build-bench
# Processes (loopback): all_reduce between 2 processes under mpirun and over
# TCP (bench_mpi.sh, when MPI is built), and the MNIST MLP training step on
# 2 processes (kdc under mpirun, kdc over TCP) against PyTorch DDP with gloo
# (bench_procs.sh), same global batch, 1 thread per process.
cmake --build build-bench -j "$(nproc)" --target kdc bench_procs_train >/dev/null
if cmake --build build-bench --target bench_mpi >/dev/null 2>&1; then
  sh bench/bench_mpi.sh build-bench
  sh bench/bench_procs.sh build-bench
fi
