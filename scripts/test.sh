#!/usr/bin/env bash
# The whole test suite: set up, build, install ONNX Runtime for node (bench/), run every
# test through ctest, then fuzz the ONNX importer and the manifest parser briefly (their
# crash corpora are replayed by ctest).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
# ONNX Runtime (CPU) for tests/ort: the npm package's own prebuilt library; no install
# scripts run. NPUFORGE_REQUIRE_ORT=1 makes a missing runtime fail the test, not skip it.
(cd bench && npm install --ignore-scripts --no-audit --no-fund)
(cd build && NPUFORGE_REQUIRE_ORT=1 ctest --output-on-failure -j2 --timeout 900)
for fuzz in tests/fuzz_onnx/run.sh tests/fuzz_manifest/run.sh; do
  [ -x "$fuzz" ] || [ -f "$fuzz" ] || continue
  bash "$fuzz" "${NPUFORGE_FUZZ_SECONDS:-30}"
done
