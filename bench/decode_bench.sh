#!/usr/bin/env bash
# decode_bench.sh — prefill and decode speed of npuforge's cpu backend against ONNX Runtime's
# CPU library (onnxruntime-node), in one run, as ratios. See bench/README.md.
#
#   bash bench/decode_bench.sh [--build-dir DIR] [--threads "1 2"] [--reps 3]
#                              [--prompt-len 32] [--new-tokens 32] [--work DIR] [--quick]
#                              [--model NAME=MODEL.onnx ...]
#
# Models: tests/models/tiny_llama (falls back to tests/models/llama_gqa while tiny_llama has
# no model.onnx yet) and a ~100M-parameter Llama synthesized from
# tools/models/configs/llama-100m.json into the work dir (default /tmp/npuforge-bench), skipped by
# --quick; then each --model given.
# For each model and thread count: ORT fp32; npuforge cpu fp32 / int8 / int4 weight-only and
# w8a16 (minmax recipe: integer mode), each through a package from `npuforge build`, run
# with `npuforge run PACKAGE --json`.
# Every measurement is repeated --reps times; the median is kept. Prints a Markdown table
# (stdout) and leaves every raw JSON line in WORK/results.jsonl.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=$ROOT/build-bench
THREADS="1 2"
REPS=3
PROMPT_LEN=32
NEW_TOKENS=32
WORK=/tmp/npuforge-bench
PY=/usr/bin/python3   # Debian's python: has onnx/numpy/torch (the pyenv one first on PATH does not)
QUICK=0
EXTRA_MODELS=()

while [[ $# -gt 0 ]]; do
  case $1 in
    --build-dir) BUILD=$(cd "$2" && pwd); shift 2 ;;
    --threads) THREADS=$2; shift 2 ;;
    --reps) REPS=$2; shift 2 ;;
    --prompt-len) PROMPT_LEN=$2; shift 2 ;;
    --new-tokens) NEW_TOKENS=$2; shift 2 ;;
    --work) WORK=$2; shift 2 ;;
    --quick) QUICK=1; shift ;;  # small model only (script development)
    --model) [[ $2 == *=*.onnx && -f ${2#*=} ]] || { echo "decode_bench.sh: --model wants NAME=path/to/model.onnx (an existing file), got '$2'" >&2; exit 2; }
             EXTRA_MODELS+=("$2"); shift 2 ;;  # one more model (e.g. a 1B from tools/models/synth_model.py)
    -h|--help) sed -n 2,14p "$0"; exit 0 ;;
    *) echo "decode_bench.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done

NPUFORGE=$BUILD/bin/npuforge
MEMBW=$BUILD/bin/membw
for f in "$NPUFORGE" "$MEMBW"; do
  [[ -x $f ]] || { echo "decode_bench.sh: $f not built (cmake --build $BUILD --target npuforge npuforge_plugins membw)" >&2; exit 1; }
done
[[ -d $ROOT/bench/node_modules/onnxruntime-node ]] || {
  echo "decode_bench.sh: run 'npm ci --ignore-scripts' in bench/ first" >&2; exit 1; }
command -v node >/dev/null || { echo "decode_bench.sh: node not found" >&2; exit 1; }

mkdir -p "$WORK"
RESULTS=$WORK/results.jsonl
: > "$RESULTS"
log() { echo "[decode_bench] $*" >&2; }

# --- machine ---------------------------------------------------------------------------
log "load before: $(uptime)"
MEM_JSON=$("$MEMBW" --json --mib 1024 --runs 7 --threads "$(echo "$THREADS" | tr ' ' ',')")
log "membw: $MEM_JSON"
echo "{\"kind\":\"membw\",\"data\":$MEM_JSON}" >> "$RESULTS"

# --- models ----------------------------------------------------------------------------
MODELS=()
NOTES=()
if [[ -f $ROOT/tests/models/tiny_llama/model.onnx ]]; then
  MODELS+=("tiny_llama=$ROOT/tests/models/tiny_llama/model.onnx")
else
  MODELS+=("llama_gqa=$ROOT/tests/models/llama_gqa/model.onnx")
  NOTES+=("tests/models/tiny_llama/model.onnx does not exist yet (still training): used tests/models/llama_gqa instead")
fi
if [[ $QUICK == 0 ]]; then
  SYN=$WORK/models/llama100m
  if [[ ! -f $SYN/model.onnx || ! -f $SYN/model.onnx.data ]]; then
    log "synthesizing $SYN from tools/models/configs/llama-100m.json"
    "$PY" "$ROOT/tools/models/synth_model.py" "$ROOT/tools/models/configs/llama-100m.json" "$SYN" >&2
  fi
  MODELS+=("llama100m=$SYN/model.onnx")
fi
MODELS+=("${EXTRA_MODELS[@]+"${EXTRA_MODELS[@]}"}")

# Same deterministic prompt for every engine (ids 3..252 fit every model's vocab).
PROMPT=$("$PY" -c "print(','.join(str(3 + (i * 37 + 11) % 250) for i in range($PROMPT_LEN)))")

for entry in "${MODELS[@]}"; do
  name=${entry%%=*}; onnx=${entry#*=}
  info=$("$PY" "$ROOT/bench/model_info.py" "$onnx")
  echo "{\"kind\":\"model\",\"model\":\"$name\",\"path\":\"$onnx\",\"info\":$info}" >> "$RESULTS"
  log "$name: $info"
  # Read the model's files once, so the engine that runs first (ORT) does not alone pay for a
  # cold page cache (a fresh 1B file: ORT 3.8 tok/s cold, 5.1 warm).
  cat "$onnx" "$onnx.data" > /dev/null 2>&1 || true
  for t in $THREADS; do
    # ORT fp32 peer
    for r in $(seq "$REPS"); do
      out=$(node "$ROOT/bench/ort_decode.mjs" "$onnx" --threads "$t" --prompt-ids "$PROMPT" --new-tokens "$NEW_TOKENS")
      echo "{\"kind\":\"run\",\"model\":\"$name\",\"engine\":\"ort\",\"dtype\":\"float32\",\"threads\":$t,\"rep\":$r,\"out\":$out}" >> "$RESULTS"
      log "$name ort fp32 t=$t rep $r: $(echo "$out" | cut -c1-110)"
    done
    # npuforge cpu packages: float32 / int8 / int4 weight-only, and w8a16: the minmax recipe's
    # int8 weights and 16-bit activation grids (calibrated on the prompt), which the cpu
    # backend runs in integer mode (the exact kernels htp and aries packages run on).
    for dt in float32 int8 int4 w8a16; do
      pkg=$WORK/pkg/${name}_t${t}_${dt}
      mkdir -p "$pkg"
      cat > "$pkg/manifest.toml" <<TOML
# generated by bench/decode_bench.sh
[model]
onnx = "$onnx"

[targets.cpu]
backend = "cpu"
threads = $t
TOML
      if [[ $dt == w8a16 ]]; then
        echo "[$PROMPT]" > "$pkg/calib_ids.json"
        cat >> "$pkg/manifest.toml" <<TOML

[calibration]
ids = "calib_ids.json"
num_samples = 1
sequence_length = $PROMPT_LEN

[[quant]]
recipe = "minmax"
TOML
      else
        echo "weight_dtype = \"$dt\"" >> "$pkg/manifest.toml"
      fi
      rm -rf "$pkg/out"
      "$NPUFORGE" build "$pkg/manifest.toml" --out "$pkg/out" --cache-dir "$WORK/cache" >"$pkg/build.log" 2>&1 || {
        cat "$pkg/build.log" >&2; echo "decode_bench.sh: npuforge build failed for $name $dt" >&2; exit 1; }
      for r in $(seq "$REPS"); do
        out=$("$NPUFORGE" run "$pkg/out/cpu" --prompt-ids "$PROMPT" --max-new-tokens "$NEW_TOKENS" --json)
        echo "{\"kind\":\"run\",\"model\":\"$name\",\"engine\":\"npuforge\",\"dtype\":\"$dt\",\"threads\":$t,\"rep\":$r,\"out\":$out}" >> "$RESULTS"
        log "$name npuforge $dt t=$t rep $r: $(echo "$out" | cut -c1-110)"
      done
    done
  done
done
log "load after: $(uptime)"

# --- table -----------------------------------------------------------------------------
NOTES_JSON=$("$PY" -c 'import json,sys; print(json.dumps(sys.argv[1:]))' "${NOTES[@]+"${NOTES[@]}"}")
"$PY" - "$RESULTS" "$PROMPT_LEN" "$NEW_TOKENS" "$REPS" "$NOTES_JSON" <<'PYEOF'
import json, statistics, sys
path, P, T, reps, notes = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), json.loads(sys.argv[5])
rows = [json.loads(l) for l in open(path)]
bw = next(r["data"] for r in rows if r["kind"] == "membw")
models = [r for r in rows if r["kind"] == "model"]
runs = [r for r in rows if r["kind"] == "run"]
mean_ctx = P + T / 2  # decode steps see contexts P+1 .. P+T-1
def med(sel, key):
    return statistics.median(r["out"][key] if "stats" not in r["out"] else r["out"]["stats"][key] for r in sel)
def toks(r):
    return r["out"]["tokens"]
def cpu():
    """The processor and the widest SIMD the kernels pick on it: ratios move with both."""
    info = open("/proc/cpuinfo").read()
    field = lambda k: next((l.split(":", 1)[1].strip() for l in info.splitlines() if l.startswith(k)), "?")
    flags = set(field("flags").split())
    isa = ("avx512_vnni" if "avx512_vnni" in flags else "avx512f" if "avx512f" in flags
           else "avx2" if "avx2" in flags else "no avx2")
    return (f"{field('model name')} (family {field('cpu family')} model {field('model')}), "
            f"{info.count('processor')} logical cores, kernels' ISA {isa}")
print(f"prompt {P} tokens, {T} new tokens (1 from prefill + {T-1} decode steps), median of {reps} runs; "
      f"memory read bandwidth (membw): " + ", ".join(f"{k.split('_')[-1]} {v:.1f} GB/s" for k, v in bw.items() if k.startswith("read_")))
print()
print(f"cpu: {cpu()}")
print()
for n in notes:
    print(f"- note: {n}")
if notes:
    print()
print("| model | threads | engine | weights | prefill tok/s | decode tok/s | decode vs ORT fp32 | prefill vs ORT fp32 | bytes/token (MB) | % of membw | tokens |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
checks = []
for m in models:
    name, info = m["model"], m["info"]
    threads = sorted({r["threads"] for r in runs if r["model"] == name})
    for t in threads:
        sel = lambda eng, dt: [r for r in runs if r["model"] == name and r["threads"] == t and r["engine"] == eng and r["dtype"] == dt]
        ort = sel("ort", "float32")
        ort_dec, ort_pre = med(ort, "decode_tokens_per_s"), med(ort, "prefill_tokens_per_s")
        ort_tokens = toks(ort[0])
        bw_t = bw.get(f"read_gb_per_s_{t}t")
        for eng, dt in [("ort", "float32"), ("npuforge", "float32"), ("npuforge", "int8"), ("npuforge", "int4"),
                        ("npuforge", "w8a16")]:
            s = sel(eng, dt)
            if not s:
                continue
            dec, pre = med(s, "decode_tokens_per_s"), med(s, "prefill_tokens_per_s")
            nbytes = info["weight_bytes_per_token"]["int8" if dt == "w8a16" else dt] + info["kv_bytes_per_ctx_token"] * mean_ctx
            frac = f"{100 * nbytes * dec / (bw_t * 1e9):.0f}%" if bw_t else "n/a"
            same_all = all(toks(r) == toks(s[0]) for r in s)
            if eng == "npuforge" and dt == "float32":
                # npuforge stops at the tokenizer's stop ids (ORT does not): compare the common prefix.
                agree = all(toks(r) == ort_tokens[:len(toks(r))] and
                            (len(toks(r)) == len(ort_tokens) or r["out"]["stats"]["stop_reason"] == "eos")
                            for r in s)
                tok_note = "agree with ORT" if agree else "DISAGREE with ORT"
                checks.append((name, t, agree))
            elif eng == "npuforge":
                same = sum(a == b for a, b in zip(toks(s[0]), ort_tokens))
                tok_note = f"{same}/{len(ort_tokens)} = ORT"
            else:
                tok_note = "reference"
            if not same_all:
                tok_note += " (reps differ!)"
            label = "ORT 1.x CPU" if eng == "ort" else "npuforge cpu"
            if eng == "ort":
                label = "ORT " + (ort[0]["out"].get("onnxruntime_version") or "") + " CPU"
            print(f"| {name} ({info['params']/1e6:.1f}M) | {t} | {label} | {dt} | {pre:.1f} | {dec:.2f} | "
                  f"{dec / ort_dec:.2f}x | {pre / ort_pre:.2f}x | {nbytes/1e6:.1f} | {frac} | {tok_note} |")
print()
for name, t, agree in checks:
    print(f"- greedy tokens, npuforge fp32 vs ORT fp32, {name}, {t} thread(s): {'agree' if agree else 'DISAGREE'}")
print()
print("Targets (issue 17): decode vs ORT fp32: fp32 >= 1.2x, int8 >= 3.0x, int4 >= 4.0x; fp32 prefill >= 1.0x ORT;")
print("integer mode (w8a16) decode >= 0.5x of npuforge fp32.")
for m in models:
    name = m["model"]
    for t in sorted({r["threads"] for r in runs if r["model"] == name}):
        sel = lambda eng, dt: [r for r in runs if r["model"] == name and r["threads"] == t and r["engine"] == eng and r["dtype"] == dt]
        o = med(sel("ort", "float32"), "decode_tokens_per_s")
        dec = {dt: med(sel("npuforge", dt), "decode_tokens_per_s") for dt in ("float32", "int8", "int4", "w8a16")}
        pre = med(sel("npuforge", "float32"), "prefill_tokens_per_s") / med(sel("ort", "float32"), "prefill_tokens_per_s")
        got = [("fp32", dec["float32"] / o, 1.2), ("int8", dec["int8"] / o, 3.0), ("int4", dec["int4"] / o, 4.0),
               ("prefill", pre, 1.0), ("integer mode vs fp32", dec["w8a16"] / dec["float32"], 0.5)]
        print(f"- {name}, {t} thread(s): " + ", ".join(f"{k} {v:.2f}x ({'met' if v >= want else 'MISSED'})" for k, v, want in got))
PYEOF
