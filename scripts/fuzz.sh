#!/usr/bin/env bash
# Fuzzes the ONNX importer and the manifest parser with libFuzzer, ASan and UBSan, in one
# clang build under build-fuzz/.
#
#   scripts/fuzz.sh [--seconds N | --runs N] [onnx] [manifest]     (default: both, 60 s each)
#
# --seconds N  explores for N seconds per fuzzer; new inputs are kept in build-fuzz/<name>_corpus.
# --runs N     tries N inputs per fuzzer from seed 1 on a fresh scratch corpus: the same
#              inputs on every machine, so CI cannot fail on a find that is new that day.
# A crash exits non-zero and lands in build-fuzz/<name>_crashes/. After fixing the bug,
# copy it into tests/fuzz_<name>/corpus/: ctest replays that corpus on every build.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$root/build-fuzz
limit=(-max_total_time=60)
mode=seconds
names=()
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) limit=(-max_total_time="$2"); mode=seconds; shift 2 ;;
    --runs) limit=(-runs="$2" -seed=1); mode=runs; shift 2 ;;
    onnx | manifest) names+=("$1"); shift ;;
    *) echo "fuzz.sh: unknown argument '$1' (use --seconds N, --runs N, onnx, manifest)" >&2; exit 2 ;;
  esac
done
[ ${#names[@]} -gt 0 ] || names=(onnx manifest)

# -Wno-unknown-warning-option: the top-level defaults add GCC's -Wno-restrict, unknown to clang.
cmake -S "$root" -B "$build" -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DCMAKE_CXX_FLAGS=-Wno-unknown-warning-option \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DNPUFORGE_FUZZ=ON -DNPUFORGE_BUILD_BENCH=OFF >/dev/null

export ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=0
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
for name in "${names[@]}"; do
  case "$name" in
    onnx) binary=onnx_import_fuzz; extra=(-max_len=65536 -malloc_limit_mb=1024) ;;
    manifest) binary=manifest_fuzz; extra=(-max_len=4096 -dict="$root/tests/fuzz_manifest/toml.dict") ;;
  esac
  cmake --build "$build" -j"${JOBS:-2}" --target "$binary"
  corpus=$build/${name}_corpus
  if [ "$mode" = runs ]; then
    corpus=$(mktemp -d)
  fi
  mkdir -p "$corpus" "$build/${name}_crashes"
  # New inputs go to the scratch corpus; the checked-in one grows only by hand.
  "$build/bin/$binary" "$corpus" "$root/tests/fuzz_$name/corpus" "${limit[@]}" "${extra[@]}" \
    -timeout=10 -rss_limit_mb=2048 -artifact_prefix="$build/${name}_crashes/" -print_final_stats=1
  if [ "$mode" = runs ]; then rm -rf "$corpus"; fi
done
