#!/usr/bin/env bash
# Fuzzes the manifest parser and validator for SECONDS (default 60) with libFuzzer,
# ASan and UBSan, in a clang build under build-fuzz-manifest.
# A crash input lands in build-fuzz-manifest/fuzz_manifest_crashes/; after fixing the
# bug, copy it into tests/fuzz_manifest/corpus/ so the replay test keeps it fixed.
set -euo pipefail
seconds=${1:-60}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=$root/build-fuzz-manifest

cmake -S "$root" -B "$build" -DCMAKE_C_COMPILER=clang-14 -DCMAKE_CXX_COMPILER=clang++-14 \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DNPUFORGE_FUZZ=ON -DNPUFORGE_BUILD_BENCH=OFF >/dev/null
cmake --build "$build" -j2 --target manifest_fuzz

# New inputs go to a scratch corpus; the checked-in one only grows by hand.
mkdir -p "$build/fuzz_manifest_corpus" "$build/fuzz_manifest_crashes"
exec "$build/bin/manifest_fuzz" "$build/fuzz_manifest_corpus" "$here/corpus" \
  -max_total_time="$seconds" -max_len=4096 -timeout=10 -rss_limit_mb=2048 \
  -dict="$here/toml.dict" -artifact_prefix="$build/fuzz_manifest_crashes/" -print_final_stats=1
