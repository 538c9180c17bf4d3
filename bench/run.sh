#!/usr/bin/env bash
# Builds kdc in Release and runs every benchmark; each prints one JSON object.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build-bench -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build-bench -j "$(nproc)" --target bench_predict bench_mesh bench_collectives >/dev/null
./build-bench/bench/bench_predict
./build-bench/bench/bench_mesh
./build-bench/bench/bench_collectives
