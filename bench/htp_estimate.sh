#!/usr/bin/env bash
# Predicted (htp simulator, sm8750 chip file) vs published (Qualcomm AI Hub, hardware.md)
# figures on Snapdragon 8 Elite, for models with the published shapes of Llama-3.2-1B,
# Llama-3.2-3B and Llama-3-8B.
#
#   bash bench/htp_estimate.sh            # BUILD=build WORK=/tmp/nf_htp_estimate by default
#
# The models are synthesized with tools/models/synth_model.py --zeros: every linear and
# embedding weight is zero and stored as a hole of a sparse file, so an 8B fp32 model takes
# no disk and no RAM. They go through the real pipeline: lpbq (W4 blocks of 64, LM head
# int8 per channel) -> arcl (AR 1/128, CL 4096) -> htp compile (packs the weights: the 8B
# container is ~4 GB) -> npuforge estimate. They cannot be calibrated here (a float
# forward of 8B needs 32 GB), so the htp options assume_activation_bw = 16 and
# assume_kv_bw = 8 cost their activations and KV cache as AI Hub's w4a16 recipe (KV 8-bit)
# runs them; the estimate's notes say so. The estimator reads only shapes and widths.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-$ROOT/build}
WORK=${WORK:-/tmp/nf_htp_estimate}
NF=$BUILD/bin/npuforge
mkdir -p "$WORK"
for m in llama-3.2-1b llama-3.2-3b llama-3-8b; do
  d=$WORK/$m
  if [ ! -f "$d/model.onnx" ]; then
    /usr/bin/python3 "$ROOT/tools/models/synth_model.py" "$ROOT/tools/models/configs/$m.json" "$d" --zeros
  fi
  cat > "$d/manifest.toml" <<TOML
[model]
onnx = "model.onnx"

[[quant]]
recipe = "lpbq"
block_size = 64

[[transform]]
plugin = "arcl"
arn = [1, 128]
context_length = [4096]

[targets.htp]
backend = "htp"
chipset = "sm8750"
assume_activation_bw = 16
assume_kv_bw = 8
TOML
  if [ ! -f "$d/out/htp/package.json" ] || [ -n "${REBUILD:-}" ]; then
    "$NF" build "$d/manifest.toml" --no-cache --out "$d/out" -q
  fi
  "$NF" estimate "$d/out/htp" --prompt-len 128 --context-len 4096 --json > "$d/estimate.json"
done

/usr/bin/python3 - "$WORK" <<'PY'
import json, sys
w = sys.argv[1]
e = {m: json.load(open(f"{w}/{m}/estimate.json")) for m in ("llama-3.2-1b", "llama-3.2-3b", "llama-3-8b")}
rows = [
    ("Llama-3.2-1B decode tok/s (ctx 4096)", e["llama-3.2-1b"]["decode_tokens_per_s"], 53.6, "calibration"),
    ("Llama-3-8B decode tok/s (ctx 4096)", e["llama-3-8b"]["decode_tokens_per_s"], 12.9, "calibration"),
    ("Llama-3.2-3B TTFT ms (128-token chunk)", e["llama-3.2-3b"]["ttft_ms"], 88.0, "calibration"),
    ("Llama-3.2-3B decode tok/s (ctx 4096)", e["llama-3.2-3b"]["decode_tokens_per_s"], None, "prediction"),
    ("Llama-3.2-1B TTFT ms (128-token chunk)", e["llama-3.2-1b"]["ttft_ms"], None, "prediction"),
    ("Llama-3-8B TTFT ms (128-token chunk)", e["llama-3-8b"]["ttft_ms"], None, "prediction"),
]
print("| figure | predicted | published | error | kind |")
print("|---|---|---|---|---|")
for name, p, pub, kind in rows:
    err = f"{100 * (p / pub - 1):+.1f}%" if pub else "—"
    print(f"| {name} | {p:.1f} | {pub if pub else '—'} | {err} | {kind} |")
print()
print("| model | weights (device) | KV cache @4096 | DRAM bytes/token | decode bound | memory |")
print("|---|---|---|---|---|---|")
for m, j in e.items():
    print(f"| {m} | {j['weight_bytes']/2**20:.0f} MiB | {j['kv_cache_bytes']/2**20:.0f} MiB | "
          f"{j['dram_bytes_per_token']/2**20:.0f} MiB | {j['decode_bound']} | {j['memory_bytes']/2**30:.2f} GiB |")
PY
