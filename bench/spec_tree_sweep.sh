#!/usr/bin/env bash
# spec_tree_sweep.sh — eaglet's tree shape against the simulated htp and aries speed-up:
# for each draft_len x n_branches x verify rows (max_tokens_target_can_evaluate) x arcl AR set,
# the spec_bench package (hidden_states -> arcl CL 256; htp sm8750 with 16-bit activations and
# 8-bit KV assumed, aries-rb) is built with that [speculative] table and eaglet decodes the held-out
# prompts; prints tau, the simulated speed-up and the draft's share of the step per backend.
#
#   bash bench/spec_tree_sweep.sh          # BUILD=build WORK=/tmp/nf_spec_sweep PROMPTS=6 NEW=64
#   CONFIGS="5,4,32,1 4 8 16  3,6,32,1 4 8 16 32" bash bench/spec_tree_sweep.sh   # D,B,M,AR list; two-space separated
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-$ROOT/build}
WORK=${WORK:-/tmp/nf_spec_sweep}
PROMPTS=${PROMPTS:-6}
NEW=${NEW:-64}
NF=$BUILD/bin/npuforge
MODEL=$ROOT/tests/models/tiny_llama
CONFIGS=${CONFIGS:-"5,4,32,1 4 8 16  4,4,16,1 4 8 16 32  3,4,16,1 4 8 16 32  3,6,32,1 4 8 16 32  4,6,32,1 4 8 16 32  3,8,32,1 4 8 16 32  5,4,32,1 4 8 16 32"}
mkdir -p "$WORK"

# The held-out prompts of spec_bench.sh: the first PROMPTS lines of >= 80 characters, cut to 120.
/usr/bin/python3 - "$MODEL/heldout.txt" "$PROMPTS" > "$WORK/prompts.txt" <<'PY'
import sys
lines = [l.strip()[:120] for l in open(sys.argv[1], encoding="utf-8") if len(l.strip()) >= 80]
print("\n".join(lines[: int(sys.argv[2])]))
PY

echo "| draft_len | n_branches | max_tokens_target_can_evaluate (the runner trims it to the largest AR) | arcl AR | tau | htp speed-up | htp draft share | aries speed-up | aries draft share |"
echo "|---|---|---|---|---|---|---|---|---|"
while IFS= read -r config; do
  [ -n "$config" ] || continue
  IFS=, read -r D B M ARN <<< "$config"
  tag="d${D}_b${B}_m${M}_ar$(echo "$ARN" | tr ' ' '-')"
  dir=$WORK/$tag
  rm -rf "$dir" && mkdir -p "$dir"
  cat > "$dir/manifest.toml" <<TOML
[model]
onnx = "$MODEL/model.onnx"
config = "$MODEL/config.json"
tokenizer = "$MODEL/tokenizer.json"

[[transform]]
plugin = "hidden_states"

[[transform]]
plugin = "arcl"
arn = [$(echo "$ARN" | sed 's/ /, /g')]
context_length = [256]

[speculative]
decoder = "eaglet"
draft = "$MODEL/eaglet"
draft_vocab = 512
draft_len = $D
n_branches = $B
max_tokens_target_can_evaluate = $M

[targets.htp]
backend = "htp"
chipset = "sm8750"
assume_activation_bw = 16
assume_kv_bw = 8

[targets.aries]
backend = "aries"
TOML
  "$NF" build "$dir/manifest.toml" --out "$dir/out" -q > /dev/null
  for t in htp aries; do
    : > "$dir/$t.jsonl"
    while IFS= read -r prompt; do
      "$NF" run "$dir/out/$t" --prompt "$prompt" --max-new-tokens "$NEW" --decoder eaglet --json >> "$dir/$t.jsonl"
    done < "$WORK/prompts.txt"
  done
  /usr/bin/python3 - "$dir" "$D" "$B" "$M" "$ARN" <<'PY'
import json, sys
d, D, B, M, arn = sys.argv[1:6]
cells = []
for t in ("htp", "aries"):
    runs = [json.loads(l)["stats"] for l in open(f"{d}/{t}.jsonl")]
    sim = [r["speculative"]["simulated"] for r in runs]
    new = sum(r["new_tokens"] for r in runs)
    fwd = sum(r["speculative"]["target_forwards"] for r in runs)
    plain, spec = sum(s["plain_decode_ms"] for s in sim), sum(s["speculative_decode_ms"] for s in sim)
    draft = sum(s.get("draft_ms", 0) for s in sim)
    cells.append((new / fwd, plain / spec, 100 * draft / spec))
print(f"| {D} | {B} | {M} | {arn.replace(' ', '/')} | {cells[0][0]:.2f} | {cells[0][1]:.2f}x | {cells[0][2]:.0f}% | {cells[1][1]:.2f}x | {cells[1][2]:.0f}% |")
PY
done < <(echo "$CONFIGS" | sed 's/  /\n/g')
