#!/usr/bin/env bash
# Speculative decoders on tiny_llama, held-out prompts: tau (tokens per target forward),
# acceptance, forwards, wall time, and, on packages whose backend estimates (htp, aries), the
# simulated decode time with and without each decoder and the draft's share of it
# (npuforge run --json, stats.speculative.simulated).
# Every run is also checked token for token against plain greedy (--decoder none).
#
#   bash bench/spec_bench.sh        # BUILD=build WORK=/tmp/nf_spec_bench PROMPTS=6 NEW=64
#
# Package: hidden_states (for eaglet's draft) -> arcl (AR 1/16, CL 256), float weights.
# Targets: cpu, htp (sm8750; assume_activation_bw 16 / assume_kv_bw 8, no calibration) and
# aries (aries-rb, W8, no calibration) when those backends are installed. Decoders: every one of lade, ssd, eaglet that is
# installed; eaglet with the options of the [speculative] table below, ssd on a second
# package built with [speculative] decoder = "ssd" (its forecast embeddings are baked into
# the model), lade with its defaults.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-$ROOT/build}
WORK=${WORK:-/tmp/nf_spec_bench}
PROMPTS=${PROMPTS:-6}
NEW=${NEW:-64}
NF=$BUILD/bin/npuforge
PLUGINS=$BUILD/lib/npuforge/plugins
MODEL=$ROOT/tests/models/tiny_llama
mkdir -p "$WORK"

have() { [ -f "$PLUGINS/libnpuforge_$1.so" ]; }
targets="cpu"
have htp && targets="$targets htp"
have aries && targets="$targets aries"

cat > "$WORK/manifest.toml" <<TOML
[model]
onnx = "$MODEL/model.onnx"
config = "$MODEL/config.json"
tokenizer = "$MODEL/tokenizer.json"

[[transform]]
plugin = "hidden_states"

[[transform]]
plugin = "arcl"
arn = [1, 16]
context_length = [256]

[speculative]
decoder = "eaglet"
draft = "$MODEL/eaglet"
draft_vocab = 512

[targets.cpu]
backend = "cpu"
TOML
if have htp; then
  cat >> "$WORK/manifest.toml" <<TOML

[targets.htp]
backend = "htp"
chipset = "sm8750"
assume_activation_bw = 16
assume_kv_bw = 8
TOML
fi
if have aries; then
  cat >> "$WORK/manifest.toml" <<TOML

[targets.aries]
backend = "aries"
TOML
fi
"$NF" build "$WORK/manifest.toml" --out "$WORK/out" -q
# ssd's forecast embeddings join the model's embedding table at build: its own package.
if have ssd; then
  sed -e 's|^decoder = "eaglet"$|decoder = "ssd"|' -e "s|^draft = .*|assets = \"$MODEL/ssd\"|" -e '/^draft_vocab/d' \
    "$WORK/manifest.toml" > "$WORK/manifest_ssd.toml"
  "$NF" build "$WORK/manifest_ssd.toml" --out "$WORK/out_ssd" -q
fi

# Held-out prompts: the first PROMPTS lines of >= 80 characters, cut to 120 characters.
/usr/bin/python3 - "$MODEL/heldout.txt" "$PROMPTS" > "$WORK/prompts.txt" <<'PY'
import sys
n = int(sys.argv[2])
out = [l.strip()[:120] for l in open(sys.argv[1], encoding="utf-8") if len(l.strip()) >= 80][:n]
print("\n".join(out))
PY

decoders=""
for d in lade ssd eaglet; do have "$d" && decoders="$decoders $d"; done
: > "$WORK/runs.jsonl"
for t in $targets; do
  while IFS= read -r prompt; do
    for d in $decoders; do
      pkg=$WORK/out/$t
      [ "$d" = ssd ] && pkg=$WORK/out_ssd/$t
      plain=$("$NF" run "$pkg" --prompt "$prompt" --max-new-tokens "$NEW" --decoder none --json)
      if out=$("$NF" run "$pkg" --prompt "$prompt" --max-new-tokens "$NEW" --decoder "$d" --json 2> "$WORK/err.txt"); then
        /usr/bin/python3 -c 'import json,sys; p=json.loads(sys.argv[1]); s=json.loads(sys.argv[2]); print(json.dumps({"target":sys.argv[3],"decoder":sys.argv[4],"same_as_plain":p["tokens"]==s["tokens"],"stats":s["stats"]}))' "$plain" "$out" "$t" "$d" >> "$WORK/runs.jsonl"
      else
        /usr/bin/python3 -c 'import json,sys; print(json.dumps({"target":sys.argv[1],"decoder":sys.argv[2],"error":open(sys.argv[3]).read().strip().splitlines()[-1:]}))' "$t" "$d" "$WORK/err.txt" >> "$WORK/runs.jsonl"
      fi
    done
  done < "$WORK/prompts.txt"
done

/usr/bin/python3 - "$WORK/runs.jsonl" "$PROMPTS" "$NEW" <<'PY' | tee "$WORK/spec_bench.md"
import json, sys
runs = [json.loads(l) for l in open(sys.argv[1])]
print(f"tiny_llama, {sys.argv[2]} held-out prompts, {sys.argv[3]} new tokens each, greedy; package hidden_states + arcl AR 1/16 CL 256\n")
print("| target | decoder | tau | acceptance | target fwd | draft fwd | max rows | same as greedy | wall s | simulated decode ms plain / with | simulated speedup | draft share | if the draft loop were one graph |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
for key in dict.fromkeys((r["target"], r["decoder"]) for r in runs):
    rs = [r for r in runs if (r["target"], r["decoder"]) == key]
    bad = [r for r in rs if "error" in r]
    if bad:
        print(f"| {key[0]} | {key[1]} | error: {' '.join(bad[0]['error'])} | | | | | | | | | | |")
        continue
    sp = [r["stats"]["speculative"] for r in rs]
    new = sum(r["stats"]["new_tokens"] for r in rs)
    tf = sum(s["target_forwards"] for s in sp)
    df = sum(s.get("draft_forwards", 0) for s in sp)
    acc = sum(s["acceptance_rate"] * r["stats"]["new_tokens"] for s, r in zip(sp, rs)) / new
    same = sum(r["same_as_plain"] for r in rs)
    wall = sum(s["wall_seconds"] for s in sp)
    sim = [s.get("simulated") for s in sp]
    if all(x and "plain_decode_ms" in x for x in sim):
        p, w = sum(x["plain_decode_ms"] for x in sim), sum(x["speculative_decode_ms"] for x in sim)
        simtxt, speed = f"{p:.2f} / {w:.2f}", f"{p / w:.2f}x"
        share = f"{100 * sum(x.get('draft_ms', 0) for x in sim) / w:.0f}%"
        # Above, every draft pass is a graph launch of its own (as the decoder runs it); here
        # the draft's depth loop is one graph, one launch per decoder step (not built yet).
        if all("draft_launch_ms" in x and x["draft_pass_ms"] > 0 for x in sim):
            w2 = sum(x["speculative_decode_ms"] - (s["draft_forwards"] - s["steps"]) * x["draft_launch_ms"] for x, s in zip(sim, sp))
            launch = f"{p / w2:.2f}x"
        else:
            launch = "-"
    else:
        simtxt, speed, share, launch = "n/a", "n/a", "n/a", "n/a"
    print(f"| {key[0]} | {key[1]} | {new / tf:.2f} | {acc:.2f} | {tf} | {df} | {max(s['max_rows'] for s in sp)} | {same}/{len(rs)} | {wall:.1f} | {simtxt} | {speed} | {share} | {launch} |")
PY
