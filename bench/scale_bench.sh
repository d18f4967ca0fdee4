#!/usr/bin/env bash
# scale_bench.sh — real-size builds (issue 12): wall time, peak RSS and package size of
# `npuforge build --no-cache` on random-weight Llama models of the published shapes, for
# four manifests, each timed by /usr/bin/time -v (peak RSS = anonymous + mapped pages).
#
#   bash bench/scale_bench.sh [MODELS] [MANIFESTS]
#     MODELS     default "llama-100m llama-3.2-1b" (also llama-3.2-3b llama-3-8b)
#     MANIFESTS  default "transforms lpbq seqmse spinquant"
#   BUILD=build WORK=/work/nf_scale (default)   SAMPLES=8 SEQ=128 (calibration windows)
#   DTYPE=float16: the models' weights in float16 (in WORK/<model>-float16), as most exports
#   are; the build widens them to float32 (host/pipeline/widen_floats.h)
#   A MODELS entry FAMILY:CONFIG:LAYERS (e.g. internlm2:internlm2.5-7b:2) is that family's own
#   graph (tools/models/family_at_width.py: hf_families code, torch.onnx) at the config's widths
#   with LAYERS layers, in WORK/fam-FAMILY-CONFIG-LAYERSl (float32 only)
#
# Models come from tools/models/synth_model.py (random weights, not --zeros, so the recipes
# do real work) and are made once in WORK. Calibration is pre-tokenized ids (random, seeded):
# the synthesized models have no tokenizer. Every manifest ends in arcl [1,128] x [4096],
# split (4), mha2sha and the htp backend (sm8750). Prints one markdown row per build and
# the sha256 of each package's artifacts (the report's timings left out), to compare two
# builds of the same inputs.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-$ROOT/build}
WORK=${WORK:-/work/nf_scale}
NF=$BUILD/bin/npuforge
PY=/usr/bin/python3
SAMPLES=${SAMPLES:-8}
SEQ=${SEQ:-128}
MODELS=${1:-"llama-100m llama-3.2-1b"}
MANIFESTS=${2:-"transforms lpbq seqmse spinquant"}
DTYPE=${DTYPE:-float32}
mkdir -p "$WORK"

quant_toml() {
  case $1 in
    transforms) ;;
    lpbq) printf '[[quant]]\nrecipe = "lpbq"\nblock_size = 64\n' ;;
    seqmse) printf '[[quant]]\nrecipe = "seqmse"\ngranularity = "per_block"\nblock_size = 64\nlpbq_decompressed_bw = 8\nnum_candidates = 20\n\n[[quant]]\nrecipe = "lpbq"\nblock_size = 64\n' ;;
    spinquant) printf '[[quant]]\nrecipe = "spinquant"\nuntie_embedding = true\n\n[[quant]]\nrecipe = "lpbq"\nblock_size = 64\n' ;;
    *) echo "unknown manifest $1" >&2; exit 2 ;;
  esac
}

echo "| model | manifest | wall s | peak RSS GB | RSS / fp32 bytes | package GB | s / layer | package sha256 |"
echo "|---|---|---|---|---|---|---|---|"
for m in $MODELS; do
  d=$WORK/$m
  if [ "$DTYPE" != float32 ]; then d=$WORK/$m-$DTYPE; fi
  if [[ $m == *:* ]]; then  # FAMILY:CONFIG:LAYERS, the family's own graph at that config's width
    IFS=: read -r family config nlayers <<< "$m"
    d=$WORK/fam-$family-$config-${nlayers}l
    if [ ! -f "$d/model.onnx" ]; then
      $PY "$ROOT/tools/models/family_at_width.py" "$family" "$ROOT/tools/models/configs/$config.json" "$d" \
        --layers "$nlayers" >&2
    fi
  elif [ ! -f "$d/model.onnx" ]; then
    $PY "$ROOT/tools/models/synth_model.py" "$ROOT/tools/models/configs/$m.json" "$d" --dtype "$DTYPE" >&2
  fi
  read -r vocab layers < <($PY -c 'import json,sys; sys.path.insert(0, sys.argv[2]); import hf_config
c = hf_config.normalize(json.load(open(sys.argv[1]))); print(c["vocab_size"], c["num_hidden_layers"])' \
    "$d/config.json" "$ROOT/tools/models")
  if [ ! -f "$d/calib_ids.json" ]; then
    $PY -c 'import json,random,sys; r=random.Random(7); print(json.dumps([r.randrange(int(sys.argv[1])) for _ in range(int(sys.argv[2]))]))' \
      "$vocab" $((SAMPLES * SEQ)) > "$d/calib_ids.json"
  fi
  fp32=$(stat -c %s "$d/model.onnx.data")
  if [ "$DTYPE" != float32 ]; then fp32=$((fp32 * 2)); m=$m-$DTYPE; fi
  for man in $MANIFESTS; do
    cat > "$d/$man.toml" <<TOML
[model]
onnx = "model.onnx"

[calibration]
ids = "calib_ids.json"
num_samples = $SAMPLES
sequence_length = $SEQ

$(quant_toml "$man")

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
    out=$d/out-$man
    rm -rf "$out"
    if ! /usr/bin/time -v -o "$d/$man.time" "$NF" build "$d/$man.toml" --no-cache --out "$out" > "$d/$man.log" 2>&1; then
      echo "| $m | $man | failed: $(tail -1 "$d/$man.log") | | | | | |"
      continue
    fi
    wall=$(awk -F': ' '/Elapsed \(wall clock\)/ {n=split($2,a,":"); s=0; for(i=1;i<=n;i++) s=s*60+a[i]; print s}' "$d/$man.time")
    rss_kb=$(awk -F': ' '/Maximum resident set size/ {print $2}' "$d/$man.time")
    pkg=$(du -sb "$out" | cut -f1)
    sha=$(cd "$out" && find . -path '*/artifacts/*' -type f | LC_ALL=C sort | xargs sha256sum | sha256sum | cut -c1-12)
    awk -v m="$m" -v man="$man" -v w="$wall" -v r="$rss_kb" -v f="$fp32" -v p="$pkg" -v l="$layers" -v s="$sha" \
      'BEGIN {printf "| %s | %s | %.1f | %.2f | %.2f | %.2f | %.2f | %s |\n", m, man, w, r*1024/1e9, r*1024/f, p/1e9, w/l, s}'
  done
done
