#!/usr/bin/env bash
# The whole test suite: set up, build, install ONNX Runtime for node (bench/), run every
# test through ctest, then fuzz the ONNX importer and the manifest parser on a fixed set of inputs
# (their crash corpora are replayed by ctest).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
# ONNX Runtime (CPU) for tests/ort: the npm package's own prebuilt library; no install
# scripts run. NPUFORGE_REQUIRE_ORT=1 makes a missing runtime fail the test, not skip it.
(cd bench && npm install --ignore-scripts --no-audit --no-fund)
# A one-node Slurm cluster for the slurm executor's tests (tests/executor), stopped after.
# Its daemons run as root; elsewhere those tests are skipped (ctest says so).
if [ "$(id -u)" -eq 0 ]; then
  # Stopped after only if this script started it.
  bash scripts/slurm_cluster.sh running || trap 'bash scripts/slurm_cluster.sh stop' EXIT
  if bash scripts/slurm_cluster.sh start; then
    eval "$(bash scripts/slurm_cluster.sh env)"
  else
    echo "warning: the one-node Slurm cluster did not start; the slurm executor tests will be skipped" >&2
  fi
fi
(cd build && NPUFORGE_REQUIRE_ORT=1 ctest --output-on-failure -j2 --timeout 900)
# The same fixed inputs on every run (seed 1), so a failure here is always reproducible.
bash scripts/fuzz.sh --runs "${NPUFORGE_FUZZ_RUNS:-100000}"
