#!/usr/bin/env bash
# cache_bench.sh — what the stage cache costs on disk (issue 19): one build of a random-weight
# Llama (tools/models/synth_model.py) with the scale bench's lpbq manifest (lpbq, arcl,
# split, mha2sha, htp) into a fresh cache, then the same build replayed from it. Prints the
# stage entries, the cache's bytes on disk (du: each hard-linked weight once) beside what
# the entries would hold each with its own copy (du -l), both wall times, and whether the
# replay made the same package.
#
#   bash bench/cache_bench.sh [MODEL]      MODEL default llama-100m (tools/models/configs/)
#   BUILD=build WORK=/tmp/nf_cache_bench (default)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-$ROOT/build}
WORK=${WORK:-/tmp/nf_cache_bench}
MODEL=${1:-llama-100m}
NF=$BUILD/bin/npuforge
PY=/usr/bin/python3
d=$WORK/$MODEL
mkdir -p "$d"
if [ ! -f "$d/model.onnx" ]; then
  $PY "$ROOT/tools/models/synth_model.py" "$ROOT/tools/models/configs/$MODEL.json" "$d" >&2
fi
vocab=$($PY -c 'import json,sys; print(json.load(open(sys.argv[1]))["vocab_size"])' "$d/config.json")
[ -f "$d/calib_ids.json" ] || $PY -c 'import json,random,sys; r=random.Random(7); print(json.dumps([r.randrange(int(sys.argv[1])) for _ in range(1024)]))' "$vocab" > "$d/calib_ids.json"
cat > "$d/cache.toml" <<TOML
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

[[transform]]
plugin = "mha2sha"

[targets.htp]
backend = "htp"
chipset = "sm8750"
TOML
rm -rf "$d/cache" "$d/out1" "$d/out2"
package_sha() { (cd "$1" && find . -path '*/artifacts/*' -type f | LC_ALL=C sort | xargs sha256sum | sha256sum | cut -c1-12); }
t0=$(date +%s.%N)
"$NF" build "$d/cache.toml" --cache-dir "$d/cache" --out "$d/out1" -q > /dev/null
t1=$(date +%s.%N)
"$NF" build "$d/cache.toml" --cache-dir "$d/cache" --out "$d/out2" -q > /dev/null
t2=$(date +%s.%N)
entries=$(find "$d/cache/stages" -mindepth 1 -maxdepth 1 -type d | wc -l)
on_disk=$(du -sb "$d/cache" | cut -f1)
own_copies=$(du -sbl "$d/cache/stages" | cut -f1)
fp32=$(stat -c %s "$d/model.onnx.data")
same=$([ "$(package_sha "$d/out1")" = "$(package_sha "$d/out2")" ] && echo yes || echo NO)
echo "| model | fp32 weights GB | stage entries | cache on disk GB | entries with own copies GB | first build s | replay s | same package |"
echo "|---|---|---|---|---|---|---|---|"
awk -v m="$MODEL" -v f="$fp32" -v e="$entries" -v o="$on_disk" -v c="$own_copies" -v a="$t0" -v b="$t1" -v z="$t2" -v s="$same" \
  'BEGIN {printf "| %s | %.2f | %d | %.2f | %.2f | %.1f | %.1f | %s |\n", m, f/1e9, e, o/1e9, c/1e9, b-a, z-b, s}'
