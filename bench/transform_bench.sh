#!/usr/bin/env bash
# transform_bench.sh — time and peak memory of `npuforge build` with the graph transforms
# (arcl + split, then mha2sha when that plugin is built) on a synthesized >= 1B-parameter
# Llama whose weights are external data. Checks that weights are not copied: peak RSS
# below half the model's size on disk, and the package stores each weight once.
#
#   bash bench/transform_bench.sh [--build-dir DIR] [--work DIR] [--config CONFIG.json]
#                                 [--cache] [--run]
#
# --cache  keep the stage cache on (in WORK/cache, emptied first); default --no-cache.
# --run    also generate 2 tokens from the package (slow on a 1B fp32 model).
# The model is synthesized once into WORK/models/<config name> (tools/models/synth_model.py,
# ~5 GB for llama-3.2-1b). Prints one Markdown table row per build and a summary.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=$ROOT/build
WORK=/tmp/npuforge-bench
CONFIG=$ROOT/tools/models/configs/llama-3.2-1b.json
CACHE=0
RUN=0
PY=/usr/bin/python3   # Debian's python: has onnx/numpy

while [[ $# -gt 0 ]]; do
  case $1 in
    --build-dir) BUILD=$(cd "$2" && pwd); shift 2 ;;
    --work) WORK=$2; shift 2 ;;
    --config) CONFIG=$(cd "$(dirname "$2")" && pwd)/$(basename "$2"); shift 2 ;;
    --cache) CACHE=1; shift ;;
    --run) RUN=1; shift ;;
    -h|--help) sed -n 2,13p "$0"; exit 0 ;;
    *) echo "transform_bench.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done

NPUFORGE=$BUILD/bin/npuforge
PLUGINS=$BUILD/lib/npuforge/plugins
[[ -x $NPUFORGE ]] || { echo "transform_bench.sh: no $NPUFORGE (build the npuforge target)" >&2; exit 1; }
[[ -x /usr/bin/time ]] || { echo "transform_bench.sh: needs /usr/bin/time (apt-get install time)" >&2; exit 1; }
for p in arcl split cpu; do
  [[ -f $PLUGINS/libnpuforge_$p.so ]] || { echo "transform_bench.sh: plugin $p is not built in $BUILD" >&2; exit 1; }
done

NAME=$(basename "$CONFIG" .json)
MODEL=$WORK/models/$NAME
if [[ ! -f $MODEL/model.onnx || ! -f $MODEL/model.onnx.data ]]; then
  echo "synthesizing $NAME into $MODEL" >&2
  $PY "$ROOT/tools/models/synth_model.py" "$CONFIG" "$MODEL" >&2
fi
MODEL_BYTES=$(( $(stat -c %s "$MODEL/model.onnx") + $(stat -c %s "$MODEL/model.onnx.data") ))
PARAMS=$($PY -c "
import onnx, numpy as np
m = onnx.load('$MODEL/model.onnx', load_external_data=False)
print(sum(int(np.prod(t.dims)) for t in m.graph.initializer))")

# mha2sha rewrites every graph it finds, split parts included: it goes after split.
TRANSFORMS="arcl split"
MHA2SHA=""
if [[ -f $PLUGINS/libnpuforge_mha2sha.so ]]; then
  TRANSFORMS="arcl split mha2sha"
  MHA2SHA=$'[[transform]]\nplugin = "mha2sha"\n'
fi

OUT=$WORK/transform-$NAME
rm -rf "$OUT"
mkdir -p "$OUT"
cat > "$OUT/manifest.toml" <<TOML
[model]
onnx = "$MODEL/model.onnx"

[[transform]]
plugin = "arcl"
arn = [1, 128]
context_length = [4096]

[[transform]]
plugin = "split"

$MHA2SHA
[targets.cpu]
backend = "cpu"
TOML

CACHE_ARGS=(--no-cache)
if [[ $CACHE == 1 ]]; then
  CACHE_ARGS=(--cache-dir "$OUT/cache")
fi
CMD=("$NPUFORGE" build "$OUT/manifest.toml" --out "$OUT/out" "${CACHE_ARGS[@]}")
echo "+ ${CMD[*]}" >&2
sync
/usr/bin/time -v "${CMD[@]}" 2> "$OUT/time.log" || { cat "$OUT/time.log" >&2; exit 1; }

RSS_KB=$(sed -n 's/.*Maximum resident set size (kbytes): //p' "$OUT/time.log")
WALL=$(sed -n 's/.*Elapsed (wall clock) time (h:mm:ss or m:ss): //p' "$OUT/time.log")
USER_S=$(sed -n 's/.*User time (seconds): //p' "$OUT/time.log")
SYS_S=$(sed -n 's/.*System time (seconds): //p' "$OUT/time.log")
PKG=$OUT/out/cpu
WEIGHTS_BYTES=$(stat -c %s "$PKG/artifacts/model/weights.bin")
GRAPHS=$($PY -c "import json; print(len(json.load(open('$PKG/package.json'))['graphs']))")
SPLITS=$($PY -c "import json; print(json.load(open('$PKG/package.json'))['metadata']['io']['split']['num_splits'])")
STAGES=$($PY -c "
import json
r = json.load(open('$PKG/build_report.json'))
print(', '.join('%s %.1fs' % (s['name'], s['seconds']) for s in r['stages']) + ', compile %.1fs' % r['compile_seconds'])")

RSS_BYTES=$((RSS_KB * 1024))
HALF=$((MODEL_BYTES / 2))
gb() { awk -v b="$1" 'BEGIN { printf "%.2f", b / 1e9 }'; }
echo "| model | params | on disk | transforms | cache | graphs | wall | user+sys s | peak RSS | RSS / disk | package weights.bin |"
echo "|---|---|---|---|---|---|---|---|---|---|---|"
echo "| $NAME | $(awk -v p="$PARAMS" 'BEGIN { printf "%.3fB", p / 1e9 }') | $(gb $MODEL_BYTES) GB | ${TRANSFORMS// / + } ($SPLITS parts) | $([[ $CACHE == 1 ]] && echo on || echo off) | $GRAPHS | $WALL | $USER_S+$SYS_S | $(gb $RSS_BYTES) GB | $(awk -v r="$RSS_BYTES" -v d="$MODEL_BYTES" 'BEGIN { printf "%.3f", r / d }') | $(gb $WEIGHTS_BYTES) GB |"
echo
echo "stages: $STAGES"
if (( RSS_BYTES < HALF )); then
  echo "peak RSS $(gb $RSS_BYTES) GB < half the model on disk ($(gb $HALF) GB): met"
else
  echo "peak RSS $(gb $RSS_BYTES) GB >= half the model on disk ($(gb $HALF) GB): NOT met"
fi
# Each weight once: the package's data file is no bigger than the model's (plus alignment).
if (( WEIGHTS_BYTES <= $(stat -c %s "$MODEL/model.onnx.data") + 64 * 1024 * 1024 )); then
  echo "package weights.bin $(gb $WEIGHTS_BYTES) GB vs model.onnx.data $(gb $(stat -c %s "$MODEL/model.onnx.data")) GB: each weight stored once"
else
  echo "package weights.bin $(gb $WEIGHTS_BYTES) GB is larger than the model's data: weights duplicated"
fi
if [[ $RUN == 1 ]]; then
  echo "+ $NPUFORGE run $PKG --prompt-ids 1,2,3 --max-new-tokens 2 --json" >&2
  /usr/bin/time -v "$NPUFORGE" run "$PKG" --prompt-ids 1,2,3 --max-new-tokens 2 --json 2> "$OUT/run_time.log"
  echo "run peak RSS: $(sed -n 's/.*Maximum resident set size (kbytes): //p' "$OUT/run_time.log") kB"
fi
