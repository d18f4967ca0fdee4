#!/usr/bin/env bash
# Speculative decoders on held-out prompts: tau (tokens per target forward),
# acceptance, forwards, wall time, and, on packages whose backend estimates (htp, aries), the
# simulated decode time with and without each decoder and the draft's share of it
# (npuforge run --json, stats.speculative.simulated).
# Every run is also checked token for token against plain greedy (--decoder none).
#
#   bash bench/spec_bench.sh        # BUILD=build WORK=/tmp/nf_spec_bench PROMPTS=6 NEW=64
#   MODEL=DIR bash bench/spec_bench.sh   # another model folder (model.onnx, config.json): the
#       decoders whose assets it has (DIR/eaglet, DIR/ssd; lade needs none); prompts from
#       DIR/heldout.txt with DIR/tokenizer.json, else PROMPTS fixed lists of 32 token ids
#   DRAFT_VOCAB=N   eaglet's draft_vocab (default 512 with a tokenizer; 0, the whole
#       vocabulary, without: a token map of the draft's training text cannot cover the
#       random prompts' continuations)
#
# A synthesized model (tools/models/synth_model.py; random weights, greedy text mostly runs
# of one repeated token) gets an eaglet draft with (about 20 minutes on 2 cores)
#   /usr/bin/python3 tools/speculative/train_eaglet.py --model-dir DIR --windows 192 \
#       --steps 300 --lr 2e-4 --ce-weight 0 --init-repeat --fit-confidence
#   /usr/bin/python3 tools/speculative/export_eaglet_onnx.py --draft DIR/eaglet
# and ssd assets with (about 18 minutes)
#   /usr/bin/python3 tools/speculative/train_ssd.py --model-dir DIR --steps 200 --batch 8 \
#       --anchors 16 --forecast 2 --generated 192
#
# Package: hidden_states (for eaglet's draft) -> arcl (AR 1/4/8/16, CL 256: a pass runs on the
# smallest variant holding its rows: 4-row draft tree depths, catch-ups up to 8), float weights.
# Targets: cpu, htp (sm8750; assume_activation_bw 16 / assume_kv_bw 8, no calibration) and
# aries (aries-rb, W8, no calibration) when those backends are installed. Decoders: every one of lade, ssd, eaglet that is
# installed; eaglet with the options of the [speculative] table below (its depth loop one graph
# a step, role draft_tree) and again as "eaglet per depth" on a package built with
# draft_loop_graph = false (one draft launch per depth), ssd on a package built with
# [speculative] decoder = "ssd" (its forecast embeddings are baked into the model), lade with
# its defaults.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-$ROOT/build}
WORK=${WORK:-/tmp/nf_spec_bench}
PROMPTS=${PROMPTS:-6}
NEW=${NEW:-64}
NF=$BUILD/bin/npuforge
PLUGINS=$BUILD/lib/npuforge/plugins
MODEL=${MODEL:-$ROOT/tests/models/tiny_llama}
MODEL=$(cd "$MODEL" && pwd)
NAME=$(basename "$MODEL")
mkdir -p "$WORK"

have() { [ -f "$PLUGINS/libnpuforge_$1.so" ]; }
# A decoder runs when its plugin is installed and the model has the assets it needs.
usable() { have "$1" && { [ "$1" = lade ] || [ -d "$MODEL/$1" ]; }; }
text_prompts=false
[ -f "$MODEL/tokenizer.json" ] && [ -f "$MODEL/heldout.txt" ] && text_prompts=true
targets="cpu"
have htp && targets="$targets htp"
have aries && targets="$targets aries"

# The package manifest; $1: its [speculative] table (the decoder whose assets the build bakes in).
manifest() {
  echo "[model]"
  echo "onnx = \"$MODEL/model.onnx\""
  echo "config = \"$MODEL/config.json\""
  $text_prompts && echo "tokenizer = \"$MODEL/tokenizer.json\""
  if usable eaglet; then printf '\n[[transform]]\nplugin = "hidden_states"\n'; fi
  printf '\n[[transform]]\nplugin = "arcl"\narn = [1, 4, 8, 16]\ncontext_length = [256]\n\n'
  printf '%s' "$1"
  printf '\n[targets.cpu]\nbackend = "cpu"\n'
  if have htp; then
    printf '\n[targets.htp]\nbackend = "htp"\nchipset = "sm8750"\nassume_activation_bw = 16\nassume_kv_bw = 8\n'
  fi
  if have aries; then printf '\n[targets.aries]\nbackend = "aries"\n'; fi
}
DRAFT_VOCAB=${DRAFT_VOCAB:-$($text_prompts && echo 512 || echo 0)}
eaglet_table=""
usable eaglet && eaglet_table=$(printf '[speculative]\ndecoder = "eaglet"\ndraft = "%s/eaglet"\ndraft_vocab = %s\n' "$MODEL" "$DRAFT_VOCAB")
manifest "$eaglet_table" > "$WORK/manifest.toml"
"$NF" build "$WORK/manifest.toml" --out "$WORK/out" -q
if usable eaglet; then
  manifest "$eaglet_table"$'\n'"draft_loop_graph = false"$'\n' > "$WORK/manifest_per_depth.toml"
  "$NF" build "$WORK/manifest_per_depth.toml" --out "$WORK/out_per_depth" -q
fi
# ssd's forecast embeddings join the model's embedding table at build: its own package.
if usable ssd; then
  manifest "$(printf '[speculative]\ndecoder = "ssd"\nassets = "%s/ssd"\n' "$MODEL")" > "$WORK/manifest_ssd.toml"
  "$NF" build "$WORK/manifest_ssd.toml" --out "$WORK/out_ssd" -q
fi

# Held-out prompts: the first PROMPTS lines of >= 80 characters, cut to 120 characters; a
# model without a tokenizer gets PROMPTS fixed lists of 32 ids (--prompt-ids).
/usr/bin/python3 - "$MODEL" "$PROMPTS" "$text_prompts" > "$WORK/prompts.txt" <<'PY'
import json, sys
n = int(sys.argv[2])
if sys.argv[3] == "true":
    out = [l.strip()[:120] for l in open(sys.argv[1] + "/heldout.txt", encoding="utf-8") if len(l.strip()) >= 80][:n]
else:
    vocab = json.load(open(sys.argv[1] + "/config.json"))["vocab_size"]
    out = [",".join(str((p * 7919 + i * 104729 + 17) % vocab) for i in range(32)) for p in range(n)]
print("\n".join(out))
PY
prompt_flag=--prompt
$text_prompts || prompt_flag=--prompt-ids

decoders=""
for d in lade ssd eaglet; do usable "$d" && decoders="$decoders $d"; done
usable eaglet && decoders="$decoders eaglet_per_depth"
: > "$WORK/runs.jsonl"
for t in $targets; do
  while IFS= read -r prompt; do
    for d in $decoders; do
      pkg=$WORK/out/$t
      [ "$d" = ssd ] && pkg=$WORK/out_ssd/$t
      [ "$d" = eaglet_per_depth ] && pkg=$WORK/out_per_depth/$t
      plain=$("$NF" run "$pkg" "$prompt_flag" "$prompt" --max-new-tokens "$NEW" --decoder none --json)
      if out=$("$NF" run "$pkg" "$prompt_flag" "$prompt" --max-new-tokens "$NEW" --decoder "${d%_per_depth}" --json 2> "$WORK/err.txt"); then
        /usr/bin/python3 -c 'import json,sys; p=json.loads(sys.argv[1]); s=json.loads(sys.argv[2]); print(json.dumps({"target":sys.argv[3],"decoder":sys.argv[4],"same_as_plain":p["tokens"]==s["tokens"],"stats":s["stats"]}))' "$plain" "$out" "$t" "$d" >> "$WORK/runs.jsonl"
      else
        /usr/bin/python3 -c 'import json,sys; print(json.dumps({"target":sys.argv[1],"decoder":sys.argv[2],"error":open(sys.argv[3]).read().strip().splitlines()[-1:]}))' "$t" "$d" "$WORK/err.txt" >> "$WORK/runs.jsonl"
      fi
    done
  done < "$WORK/prompts.txt"
done

package="arcl AR 1/4/8/16 CL 256"
usable eaglet && package="hidden_states + $package"
prompts="held-out prompts"
$text_prompts || prompts="fixed lists of 32 token ids as prompts"
/usr/bin/python3 - "$WORK/runs.jsonl" "$PROMPTS" "$NEW" "$NAME" "$prompts" "$package" <<'PY' | tee "$WORK/spec_bench.md"
import json, sys
runs = [json.loads(l) for l in open(sys.argv[1])]
print(f"{sys.argv[4]}, {sys.argv[2]} {sys.argv[5]}, {sys.argv[3]} new tokens each, greedy; package {sys.argv[6]}\n")
print("| target | decoder | tau | acceptance | target fwd | draft launches | max rows | same as greedy | wall s | simulated decode ms plain / with | simulated speedup | draft share | draft runs as |")
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
    else:
        simtxt, speed, share = "n/a", "n/a", "n/a"
    where = {(s.get("decoder", {}).get("draft_runs_on", "-"), s.get("decoder", {}).get("draft_loop", "")) for s in sp}
    if len(where) == 1:
        on, loop = where.pop()
        where = {"graph": "package graph", "host": "host fp32"}.get(on, "-") + (", " + loop if on == "graph" and loop else "")
    else:
        where = "mixed"
    print(f"| {key[0]} | {key[1].replace('_', ' ')} | {new / tf:.2f} | {acc:.2f} | {tf} | {df} | {max(s['max_rows'] for s in sp)} | {same}/{len(rs)} | {wall:.1f} | {simtxt} | {speed} | {share} | {where} |")
PY
