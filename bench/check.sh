#!/usr/bin/env bash
# check.sh — runs the decode benchmark again and prints each ratio to ONNX Runtime beside the
# one recorded in bench/RESULTS.md (the "## Current" table), flagging every ratio that fell
# by more than 15%, so a regression is seen before it lands. Timing on a shared 2-core
# machine is noisy, so this is not part of CI: run it on a quiet machine after a change to
# the kernels or the cpu engine.
#
#   bash bench/check.sh [decode_bench.sh arguments]
#     default arguments: --build-dir build --threads 1 (how the recorded table was made)
#   exit 0: no ratio fell by more than 15%; 1: at least one did (or the run failed)
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
args=("$@")
[[ ${#args[@]} -gt 0 ]] || args=(--build-dir "$ROOT/build" --threads 1)
now=$(mktemp)
trap 'rm -f "$now"' EXIT
bash "$ROOT/bench/decode_bench.sh" "${args[@]}" > "$now"
cat "$now"  # this run's table, then the comparison
echo

/usr/bin/python3 - "$ROOT/bench/RESULTS.md" "$now" <<'PY'
import sys

def ratios(text):
    """(model, threads, engine, weights) -> (decode ratio, prefill ratio) of a decode_bench table."""
    out = {}
    for line in text.splitlines():
        c = [x.strip() for x in line.strip().strip("|").split("|")]
        if len(c) < 8 or not c[1].isdigit() or not c[6].endswith("x") or not c[7].endswith("x"):
            continue
        engine = "ORT" if c[2].startswith("ORT") else c[2]  # the ORT version may move
        out[(c[0].split(" (")[0], c[1], engine, c[3])] = (float(c[6][:-1]), float(c[7][:-1]))
    return out

results = open(sys.argv[1]).read()
if "## Current" not in results:
    sys.exit("check.sh: bench/RESULTS.md has no '## Current' section to compare with")
current = results.split("## Current", 1)[1].split("\n## ", 1)[0]
now = open(sys.argv[2]).read()
recorded = ratios(current)
measured = ratios(now)
cpu_of = lambda text: next((l[len("cpu: "):] for l in text.splitlines() if l.startswith("cpu: ")), "not recorded")
if cpu_of(current) != cpu_of(now):
    print(f"note: \"Current\" was measured on {cpu_of(current)}; this run on {cpu_of(now)}. "
          "Other kernels run there: a change below may be the machine's, not the code's.\n")
if not measured:
    sys.exit("check.sh: the benchmark printed no table")
drops = 0
print("| model | threads | engine | weights | ratio | recorded | now | change | |")
print("|---|---|---|---|---|---|---|---|---|")
for key, now in sorted(measured.items()):
    if key[2] == "ORT" or key not in recorded:
        continue
    for name, was, got in (("decode", recorded[key][0], now[0]), ("prefill", recorded[key][1], now[1])):
        change = got / was - 1 if was > 0 else 0.0
        flag = "DROP > 15%" if change < -0.15 else ""
        drops += bool(flag)
        print(f"| {key[0]} | {key[1]} | {key[2]} | {key[3]} | {name} | {was:.2f}x | {got:.2f}x | {change:+.0%} | {flag} |")
missing = sorted(set(recorded) - set(measured))
for key in missing:
    if key[2] != "ORT":
        print(f"(not measured this time: {' / '.join(key)})")
print(f"\n{drops} ratio(s) fell by more than 15% against bench/RESULTS.md")
sys.exit(1 if drops else 0)
PY
