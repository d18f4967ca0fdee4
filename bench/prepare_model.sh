#!/usr/bin/env bash
# prepare_model.sh MODEL DIR — a synthesized model (tools/models/configs/MODEL.json, random
# weights) and 1024 calibration token ids in DIR, each made only when missing (the executor
# and compile-parts benches share them).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PY=/usr/bin/python3
model=$1
d=$2
mkdir -p "$d"
if [ ! -f "$d/model.onnx" ]; then
  $PY "$ROOT/tools/models/synth_model.py" "$ROOT/tools/models/configs/$model.json" "$d" >&2
fi
if [ ! -f "$d/calib_ids.json" ]; then
  vocab=$($PY -c 'import json,sys; print(json.load(open(sys.argv[1]))["vocab_size"])' "$d/config.json")
  $PY -c 'import json,random,sys; r=random.Random(7); print(json.dumps([r.randrange(int(sys.argv[1])) for _ in range(1024)]))' \
    "$vocab" > "$d/calib_ids.json"
fi
