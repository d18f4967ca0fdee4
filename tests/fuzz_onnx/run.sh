#!/bin/sh
# Builds the ONNX import fuzzer with clang (build-fuzz/) and runs it for SECONDS (default 60)
# on the seed corpus. New interesting inputs go to build-fuzz/fuzz_corpus; crashes to
# build-fuzz/fuzz_crashes: copy each crash into tests/fuzz_onnx/corpus/ once it is fixed.
set -eu
secs=${1:-60}
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$root/build-fuzz
# -Wno-unknown-warning-option: the top-level defaults add GCC's -Wno-restrict, unknown to clang.
cmake -S "$root" -B "$build" -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DCMAKE_CXX_FLAGS=-Wno-unknown-warning-option \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DNPUFORGE_FUZZ=ON -DNPUFORGE_BUILD_BENCH=OFF >/dev/null
cmake --build "$build" -j"${JOBS:-2}" --target onnx_import_fuzz
mkdir -p "$build/fuzz_corpus" "$build/fuzz_crashes"
cd "$build/fuzz_crashes"
export ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=0
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
exec "$build/bin/onnx_import_fuzz" -max_total_time="$secs" -rss_limit_mb=2048 -malloc_limit_mb=1024 \
  -max_len=65536 -timeout=10 -artifact_prefix="$build/fuzz_crashes/" \
  "$build/fuzz_corpus" "$root/tests/fuzz_onnx/corpus"
