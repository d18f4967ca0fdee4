#!/usr/bin/env bash
# Configures and builds npuforge in ./build (Release, two jobs; NPUFORGE_JOBS=N for N).
# With target names (`build.sh npuforge`) it builds only those and what they need;
# without, everything: tests and benchmarks too.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release
targets=()
for t in "$@"; do targets+=(--target "$t"); done
cmake --build build -j"${NPUFORGE_JOBS:-2}" "${targets[@]}"
