#!/usr/bin/env bash
# compile_parts_bench.sh — a compile whole against the same compile in parts (issue 19,
# nf_backend_api compile_part), for htp (each part packs a share of the weight containers'
# payloads) and aries (each part quantizes a share of the linear weights), each part in its
# own process (a job of an array on a cluster); the compile then takes their results. The
# chain (lpbq, arcl, split) is built once; each row then removes the cached compiles and
# builds one target again on the cached chain, so the rows differ only in how the compile
# runs. Prints one markdown row per build: wall seconds, the compile's seconds and its
# parts' (the driver's "finished in" lines), the results the compile took from its parts,
# and the sha256 of the package's artifacts, which must be equal in a target's rows.
#
#   bash bench/compile_parts_bench.sh [MODEL]   MODEL default llama-3.2-1b (tools/models/configs)
#   BUILD=build WORK=/work/nf_executor (default; shares executor_bench.sh's models)
#   TARGETS="htp aries" (default)
#   EXECUTORS="local1 local2 local2x2" (default): in this process; 2 worker processes, the
#     compile whole; 2 worker processes, the compile in 2 parts (--shards 2); also "slurm2"
#     (the one-node cluster, --shards 2; needs root)
#   COLD=1 (needs root): then the htp compile after its parts as on another node, whose page
#     cache does not hold the stage-cache entry: the page cache dropped before the compile
#     runs alone (`npuforge build-stage`), with the entry's verified.json (the parts verified
#     it) and without it (the compile verifies the entry again by reading it), twice each.
#     The plan comes from a build that stops at a stage which dies once (tests/fault's
#     crash_once plugin, built in BUILD).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-$ROOT/build}
WORK=${WORK:-/work/nf_executor}
NF=$BUILD/bin/npuforge
PY=/usr/bin/python3
MODEL=${1:-llama-3.2-1b}
EXECUTORS=${EXECUTORS:-"local1 local2 local2x2"}
TARGETS=${TARGETS:-"htp aries"}
COLD=${COLD:-0}
d=$WORK/$MODEL
bash "$ROOT/bench/prepare_model.sh" "$MODEL" "$d"
cat > "$d/compile_parts.toml" <<TOML
[model]
onnx = "model.onnx"

[calibration]
ids = "calib_ids.json"
num_samples = 8
sequence_length = 128

[[quant]]
recipe = "lpbq"
block_size = 64

[[transform]]
plugin = "arcl"
arn = [1, 128]
context_length = [4096]

[[transform]]
plugin = "split"
num_splits = 4

[targets.htp]
backend = "htp"
chipset = "sm8750"

[targets.aries]
backend = "aries"
TOML

if [[ " $EXECUTORS " == *" slurm"* ]]; then
  bash "$ROOT/scripts/slurm_cluster.sh" running || trap 'bash "$ROOT/scripts/slurm_cluster.sh" stop' EXIT
  bash "$ROOT/scripts/slurm_cluster.sh" start
  eval "$(bash "$ROOT/scripts/slurm_cluster.sh" env)"
fi

cache=$d/cache-compile-parts
out=$d/out-compile-parts
rm -rf "$cache" "$out"
echo "chain: $("$NF" build "$d/compile_parts.toml" --target htp --out "$out" --cache-dir "$cache" -q 2>&1 | tail -1)" >&2

echo "| target | executor | wall s | compile s | parts s | results from parts | sha256 |"
echo "|---|---|---|---|---|---|---|"
for t in $TARGETS; do
for ex in $EXECUTORS; do
  case $ex in
    local1) args=(--executor local --jobs 1) ;;
    local2) args=(--executor local --jobs 2) ;;
    local2x2) args=(--executor local --jobs 2 --shards 2) ;;
    slurm2) args=(--executor slurm --shards 2) ;;
    *) echo "unknown executor $ex" >&2; exit 2 ;;
  esac
  rm -rf "$cache/compiles" "$out"
  start=$(date +%s.%N)
  log=$d/compile-$t-$ex.log
  if ! "$NF" build "$d/compile_parts.toml" --target "$t" --out "$out" --cache-dir "$cache" "${args[@]}" > "$log" 2>&1; then
    echo "| $t | $ex | failed: $(tail -1 "$log") | | | | |"
    continue
  fi
  end=$(date +%s.%N)
  compile_s=$($PY -c 'import json,sys; print("%.1f" % json.load(open(sys.argv[1]))["compile_seconds"])' "$out/$t/build_report.json")
  # The driver's "<stage>: finished in Ns (k of n)" lines (worker and Slurm builds).
  parts_s=$(grep -o "compile $t (part [0-9]* of [0-9]*): finished in [0-9.]*s" "$log" | sed 's/.*finished in //; s/s$//' | paste -sd/ - || true)
  from_parts=$(grep -o '[0-9]* step(s) from its parts' "$log" | tail -1 | cut -d' ' -f1 || true)
  sha=$(cd "$out/$t" && find artifacts -type f | LC_ALL=C sort | xargs sha256sum | sha256sum | cut -c1-12)
  awk -v g="$t" -v e="$ex" -v s="$start" -v z="$end" -v c="$compile_s" -v p="${parts_s:--}" -v f="${from_parts:-0}" -v h="$sha" \
    'BEGIN {printf "| %s | %s | %.1f | %s | %s | %s | %s |\n", g, e, z - s, c, p, f, h}'
done
done

if [ "$COLD" = 1 ]; then
  # The chain plus a stage that dies once: the failed build leaves its plan to run stages from.
  sed 's|^\[targets.htp\]|[[transform]]\nplugin = "bad_transform"\n\n[plugins]\npaths = ["'"$BUILD"'/tests/fault/plugins/crash_once"]\n\n[targets.htp]|' \
    "$d/compile_parts.toml" > "$d/compile_parts_crash.toml"
  echo x > "$d/crash-marker"
  NF_FAULT_CRASH_ONCE=$d/crash-marker "$NF" build "$d/compile_parts_crash.toml" --target htp --out "$out" --cache-dir "$cache" \
    --jobs 2 --shards 2 --retries 0 > "$d/cold.log" 2>&1 && { echo "the crashing build did not fail" >&2; exit 1; }
  plan=$(grep -o "[^ ]*/logs/" "$d/cold.log" | head -1 | sed 's|/logs/$|/plan.json|')
  "$NF" build-stage "$plan" transform-3-bad_transform -q
  entry=$(ls -td "$cache"/stages/*/ | head -1)
  sleep 3  # a file changed in the last 2 s is not memoized
  echo
  echo "| htp compile after its parts, page cache dropped | wall s |"
  echo "|---|---|"
  for variant in "with verified.json" "without verified.json" "with verified.json" "without verified.json"; do
    rm -rf "$cache/compiles"
    "$NF" build-stage "$plan" compile-htp-part-0 -q
    "$NF" build-stage "$plan" compile-htp-part-1 -q
    [ "$variant" = "without verified.json" ] && rm -f "$entry/verified.json"
    sync
    echo 3 > /proc/sys/vm/drop_caches
    start=$(date +%s.%N)
    "$NF" build-stage "$plan" compile-htp -q
    end=$(date +%s.%N)
    awk -v v="$variant" -v s="$start" -v e="$end" 'BEGIN {printf "| %s | %.1f |\n", v, e - s}'
  done
fi
rm -rf "$cache" "$out"
