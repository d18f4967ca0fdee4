#!/bin/sh
# aries simulator: calibration and predictions (bench/RESULTS.md, section "aries").
#
#   bench/aries_estimate.sh [BUILD_DIR] [WORK_DIR]
#
# 1. Synthesizes Llama-3.2-1B, Llama-3.2-3B and Llama-3-8B with their published shapes
#    unless WORK_DIR already holds them: `synth_model.py --zeros` writes the fp32 weights as
#    holes (32 GB apparent for the 8B, ~2 MB on disk); the estimate reads shapes only.
# 2. Builds each through the real compile path with `estimate_only = true` (inspection of
#    the graph, bit config, memory check; no weights quantized or written) and prints
#    `npuforge estimate` at the calibration workload (240 prompt tokens, decode at context 245).
# 3. Refits the unpublished device parameters (aries_sim fit: bandwidth and MAC efficiency on
#    the 1B figures, the on-chip buffer on the 8B TTFT) to show the data file's values are
#    reproducible (bench/sim_validation.sh writes them).
# 4. The same three models from their config shapes through aries_sim predict (no ONNX), to
#    show that path equals the compiled one.
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${1:-$ROOT/build}
WORK=${2:-/tmp/aries_models}
NF=$BUILD/bin/npuforge
SIM=$BUILD/bin/aries_sim
DEV=$ROOT/plugins/backends/aries/devices/aries-rb.json
PY=/usr/bin/python3
mkdir -p "$WORK"

for m in 1b 3b 8b; do
  case $m in 8b) cfg=$ROOT/tools/models/configs/llama-3-8b.json ;; *) cfg=$ROOT/tools/models/configs/llama-3.2-$m.json ;; esac
  [ -f "$WORK/l$m/model.onnx.data" ] || $PY "$ROOT/tools/models/synth_model.py" "$cfg" "$WORK/l$m" --zeros
  mkdir -p "$WORK/pkg_$m"
  cat > "$WORK/pkg_$m/manifest.toml" <<TOML
[model]
onnx = "$WORK/l$m/model.onnx"
config = "$WORK/l$m/config.json"

[targets.single]
backend = "aries"
preset = "llm"
estimate_only = true

[targets.global4]
backend = "aries"
preset = "llm"
estimate_only = true
core_mode = "global4"
prefill_chunk = 256

[targets.global8]
backend = "aries"
preset = "llm"
estimate_only = true
core_mode = "global8"
prefill_chunk = 512

[targets.w4]
backend = "aries"
preset = "llm"
estimate_only = true
bits = { query = 4, key = 4, output = 4, ffn = 4 }
TOML
  $NF build "$WORK/pkg_$m/manifest.toml" --out "$WORK/pkg_$m/out" --no-cache
  for t in single global4 global8 w4; do
    echo "== llama $m $t (compiled package)"
    $NF estimate "$WORK/pkg_$m/out/$t" --prompt-len 240 --context-len 245
  done
done

echo "== fit on Llama-3.2-1B (30.73 tok/s decode, 430.56 ms TTFT, 240 input tokens) and Llama-3.1-8B (4430.71 ms TTFT)"
$SIM fit "$DEV" "$ROOT/tools/models/configs/llama-3.2-1b.json" 30.73 430.56 240 245 \
  "$ROOT/tools/models/configs/llama-3.1-8b.json" 4430.71

for cfg in llama-3.2-1b llama-3.2-3b llama-3-8b; do
  for opts in '{"preset":"llm"}' '{"preset":"llm","core_mode":"global8","prefill_chunk":512}' \
              '{"preset":"llm","bits":{"query":4,"key":4,"output":4,"ffn":4}}'; do
    echo "== $cfg from config shapes, options $opts"
    $SIM predict "$ROOT/tools/models/configs/$cfg.json" "$DEV" 240 245 "$opts" |
      $PY -c 'import json,sys; j=json.load(sys.stdin); print("ttft_ms %.1f decode_tokens_per_s %.2f (%s) memory %.2f GB weights %.2f GB" % (j["ttft_ms"], j["decode_tokens_per_s"], j["decode_bound"], j["memory_bytes"]/1e9, j["weight_bytes"]/1e9))'
  done
done
