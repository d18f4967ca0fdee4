#!/usr/bin/env bash
# Predicted (htp simulator, sm8750 chip file) vs published (Qualcomm AI Hub perf.yaml)
# figures on Snapdragon 8 Elite, for models with the published shapes of Llama-3.2-1B,
# Llama-3.2-3B and Llama-3-8B. Every chip and model: bench/sim_validation.sh.
#
#   bash bench/htp_estimate.sh            # BUILD=build WORK=/tmp/nf_htp_estimate by default
#
# The models are synthesized with tools/models/synth_model.py --zeros: every linear and
# embedding weight is zero and stored as a hole of a sparse file, so an 8B fp32 model takes
# no disk and no RAM. They go through the real pipeline -- arcl (AR 1/128, CL 4096) -> htp
# compile -> npuforge estimate -- as estimate-only packages: quantizing and packing 8B of
# weights takes most of an hour on this 2-core host and a float calibration forward needs
# 32 GB, so the htp costing options stand in for AI Hub's w4a16 recipe: assume_weight_bw 4
# (decoder linears as LPBQ block 64, LM head int8 -- AIMET's LLM recipe, facts.md),
# assume_activation_bw 16, assume_kv_bw 8, pack_weights false. The estimate's notes say so.
# The estimator reads only the graphs' shapes and these widths.
# LPBQ=1 builds the 1B through the lpbq recipe and a packed container instead (slow), the
# cross-check in bench/RESULTS.md.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-$ROOT/build}
WORK=${WORK:-/tmp/nf_htp_estimate}
NF=$BUILD/bin/npuforge
mkdir -p "$WORK"
models="llama-3.2-1b llama-3.2-3b llama-3-8b"
out=out
if [ -n "${LPBQ:-}" ]; then models=llama-3.2-1b; out=out-lpbq; fi
for m in $models; do
  d=$WORK/$m
  if [ ! -f "$d/model.onnx" ]; then
    /usr/bin/python3 "$ROOT/tools/models/synth_model.py" "$ROOT/tools/models/configs/$m.json" "$d" --zeros
  fi
  if [ -n "${LPBQ:-}" ]; then
    quant=$'[[quant]]\nrecipe = "lpbq"\nblock_size = 64\n'; costing="pack_weights = true"
  else
    quant=""; costing=$'assume_weight_bw = 4\npack_weights = false'
  fi
  cat > "$d/$out.toml" <<TOML
[model]
onnx = "model.onnx"

$quant
[[transform]]
plugin = "arcl"
arn = [1, 128]
context_length = [4096]

[targets.htp]
backend = "htp"
chipset = "sm8750"
assume_activation_bw = 16
assume_kv_bw = 8
$costing
TOML
  if [ ! -f "$d/$out/htp/package.json" ] || [ -n "${REBUILD:-}" ]; then
    "$NF" build "$d/$out.toml" --no-cache --out "$d/$out" -q
  fi
  "$NF" estimate "$d/$out/htp" --prompt-len 128 --context-len 4096 --json > "$d/estimate-$out.json"
done
if [ -n "${LPBQ:-}" ]; then
  /usr/bin/python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); print({k: j[k] for k in ("decode_tokens_per_s", "ttft_ms", "weight_bytes", "dram_bytes_per_token")})' "$WORK/llama-3.2-1b/estimate-out-lpbq.json"
  exit 0
fi

/usr/bin/python3 - "$WORK" <<'PY'
import json, sys
w = sys.argv[1]
e = {m: json.load(open(f"{w}/{m}/estimate-out.json")) for m in ("llama-3.2-1b", "llama-3.2-3b", "llama-3-8b")}
# Published figures (AI Hub perf.yaml, 8 Elite QRD); which are fitted: bench/sim_figures.json.
rows = [
    ("Llama-3.2-1B decode tok/s (ctx 4096)", e["llama-3.2-1b"]["decode_tokens_per_s"], 53.64, "fitted"),
    ("Llama-3-8B decode tok/s (ctx 4096)", e["llama-3-8b"]["decode_tokens_per_s"], 12.93, "fitted"),
    ("Llama-3.2-3B TTFT ms (128-token chunk)", e["llama-3.2-3b"]["ttft_ms"], 88.20, "fitted"),
    ("Llama-3.2-1B TTFT ms (128-token chunk)", e["llama-3.2-1b"]["ttft_ms"], 37.07, "fitted"),
    ("Llama-3.2-3B decode tok/s (ctx 4096)", e["llama-3.2-3b"]["decode_tokens_per_s"], 23.47, "predicted"),
    ("Llama-3-8B TTFT ms (128-token chunk)", e["llama-3-8b"]["ttft_ms"], 159.38, "predicted"),
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
