#!/usr/bin/env bash
# quant_accuracy.sh — the quantization accuracy table of bench/RESULTS.md, every row from
# this one run: tests/models/tiny_llama built with each recipe stack, then
#   npuforge eval PACKAGE --text heldout.txt --reference model.onnx --json
# (perplexity on the held-out text, top-1 agreement with the float model), plus each build's
# wall time and peak RSS (calibration + quantization + compile; /usr/bin/time -v).
# Calibration text: the training documents of the model's corpus (tools/models/corpus.py,
# the Debian package sqlite3-doc), never the held-out ones.
#
#   bash bench/quant_accuracy.sh [BUILD_DIR] [WORK_DIR]        (default: build, a temp dir)
#   BIG=/tmp/l100m bash bench/quant_accuracy.sh ...   also time a 100M+ synthesized model
#       (made by: /usr/bin/python3 tools/models/synth_model.py tools/models/configs/llama-100m.json /tmp/l100m)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=$(cd "${1:-$ROOT/build}" && pwd)
WORK=${2:-$(mktemp -d /tmp/nf_quant_bench.XXXXXX)}
mkdir -p "$WORK"
NF=$BUILD/bin/npuforge
TINY=$ROOT/tests/models/tiny_llama
SAMPLES=${SAMPLES:-16}
SEQ=${SEQ:-128}

if [ ! -s "$WORK/calib.txt" ]; then
  /usr/bin/python3 - "$ROOT/tools/models" "$WORK/calib.txt" <<'PY'
import sys
sys.path.insert(0, sys.argv[1])
import corpus
train, _, _ = corpus.split_documents(corpus.load_documents())
open(sys.argv[2], "w", encoding="utf-8").write("\n\n".join(train)[:300_000])
PY
fi

# row NAME QUANT_TOML: builds, evals, prints one JSON line.
row() {
  local name=$1 quant=$2 model=${3:-$TINY} eval=${4:-1}
  local dir=$WORK/$name
  rm -rf "$dir" && mkdir -p "$dir"
  cat > "$dir/manifest.toml" <<TOML
[model]
onnx = "$model/model.onnx"
config = "$model/config.json"
tokenizer = "$TINY/tokenizer.json"

[calibration]
text = "$WORK/calib.txt"
num_samples = $SAMPLES
sequence_length = $SEQ

$quant

[targets.cpu]
backend = "cpu"
TOML
  /usr/bin/time -v "$NF" -q build "$dir/manifest.toml" --out "$dir/out" --no-cache 2> "$dir/build.log" > /dev/null ||
    { cat "$dir/build.log" >&2; exit 1; }
  local secs rss
  secs=$(awk -F': ' '/Elapsed \(wall clock\)/ {n = split($2, t, ":"); s = 0; for (i = 1; i <= n; ++i) s = s * 60 + t[i]; print s}' "$dir/build.log")
  rss=$(awk -F': ' '/Maximum resident set size/ {printf "%.0f", $2 / 1024}' "$dir/build.log")
  if [ "$eval" = 1 ]; then
    local j
    j=$("$NF" eval "$dir/out/cpu" --text "$TINY/heldout.txt" --reference "$TINY/model.onnx" --json)
    echo "{\"row\":\"$name\",\"build_s\":$secs,\"build_peak_mb\":$rss,\"eval\":$j}"
  else
    echo "{\"row\":\"$name\",\"build_s\":$secs,\"build_peak_mb\":$rss}"
  fi
}

W8='[[quant]]
recipe = "minmax"
weight_bw = 8
activation_bw = 16'
W4PC='[[quant]]
recipe = "minmax"
weight_bw = 4
activation_bw = 16
overrides = [{pattern = "^onnx::MatMul_1217$", weight_bw = 8}]'
LPBQ='[[quant]]
recipe = "lpbq"
block_size = 64'
SEQMSE='[[quant]]
recipe = "seqmse"
granularity = "per_block"
block_size = 64'
SEQMSE_LPBQGRID='[[quant]]
recipe = "seqmse"
granularity = "per_block"
block_size = 64
lpbq_decompressed_bw = 8'
SPIN='[[quant]]
recipe = "spinquant"
seed = 1'
LPBQ_A8='[[quant]]
recipe = "lpbq"
block_size = 64
activation_bw = 8'
SEQMSE_LPBQGRID_A8="$SEQMSE_LPBQGRID
activation_bw = 8"
# R4 alone: the seed-1 Hadamard R1 plus the online Hadamard before down_proj.
SPIN_R4="$SPIN
online_down_proj = true"
# Learned R1 + R2 (tools/quant/train_spinquant.py, trained with R4 on calibration.txt).
SPIN_LEARNED="[[quant]]
recipe = \"spinquant\"
rotations = \"$TINY/spinquant/rotations.json\"
r2 = true"
SPIN_LEARNED_R4="$SPIN_LEARNED
online_down_proj = true"

{
  echo "{\"row\":\"fp32\",\"eval\":$("$NF" eval "$TINY/model.onnx" --text "$TINY/heldout.txt" --reference "$TINY/model.onnx" --json)}"
  row w8a16_per_channel "$W8"
  row w4a16_per_channel_minmax "$W4PC"
  row w4a16_lpbq "$LPBQ"
  row lpbq_seqmse "$SEQMSE
$LPBQ"
  row lpbq_seqmse_lpbqgrid "$SEQMSE_LPBQGRID
$LPBQ"
  # The same on the float model's inputs: the search a build splits into parts (README).
  row lpbq_seqmse_lpbqgrid_symfp "$SEQMSE_LPBQGRID
inp_symmetry = \"symfp\"
$LPBQ"
  row spinquant_seqmse_lpbq "$SPIN
$SEQMSE
$LPBQ"
  row spinquant_seqmse_lpbqgrid_lpbq "$SPIN
$SEQMSE_LPBQGRID
$LPBQ"
  row w4a8_lpbq "$LPBQ_A8"
  row w4a8_spinquant_lpbq "$SPIN
$LPBQ_A8"
  row w4a8_spinquant_r4_lpbq "$SPIN_R4
$LPBQ_A8"
  row w4a8_spinquant_learned_lpbq "$SPIN_LEARNED
$LPBQ_A8"
  row w4a8_spinquant_learned_r4_lpbq "$SPIN_LEARNED_R4
$LPBQ_A8"
  row spinquant_learned_r4_seqmse_lpbqgrid_lpbq "$SPIN_LEARNED_R4
$SEQMSE_LPBQGRID
$LPBQ"
  row w4a8_spinquant_learned_r4_seqmse_lpbqgrid_lpbq "$SPIN_LEARNED_R4
$SEQMSE_LPBQGRID_A8
$LPBQ_A8"
  if [ -n "${BIG:-}" ]; then  # timing and memory only (random weights: no accuracy)
    SAMPLES=${BIG_SAMPLES:-4}
    row big_lpbq "$LPBQ" "$BIG" 0
    row big_seqmse_lpbqgrid_lpbq "$SEQMSE_LPBQGRID
$LPBQ" "$BIG" 0
    row big_spinquant_seqmse_lpbqgrid_lpbq "[[quant]]
recipe = \"spinquant\"
untie_embedding = true
$SEQMSE_LPBQGRID
$LPBQ" "$BIG" 0
  fi
} | tee "$WORK/results.jsonl"
echo "results: $WORK/results.jsonl" >&2
