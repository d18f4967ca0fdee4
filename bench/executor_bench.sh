#!/usr/bin/env bash
# executor_bench.sh — one model built for three targets (cpu, htp sm8750, aries) under each
# executor (issue 19): `local` with 1 worker (the build in one process), `local` with 2 worker
# processes, and `slurm` (the one-node cluster of scripts/slurm_cluster.sh, 2 CPUs). Each
# executor starts from an empty stage cache (cold), then builds again on that cache (warm).
# Prints one markdown row per build: wall seconds, stages and compiles run / cached, the bytes
# the stage cache's model-set entries take on disk (du: a weight several entries hold,
# hard-linked from blobs/, counts once) beside what they would take each with its own copy
# (du -l), and the sha256 of each package's artifacts, which must be equal across executors.
#
#   bash bench/executor_bench.sh [MODEL]     MODEL default llama-100m (tools/models/configs)
#   BUILD=build WORK=/work/nf_executor (default)   EXECUTORS="local1 local2 slurm slurm-nodedown"
#   SHORT=1: arcl only after lpbq (fewer stage-cache entries: at 1B each is ~5 GB of disk)
#   SEQMSE=1: seqmse on float inputs (inp_symmetry symfp, per block 64, 8 candidates) before
#     lpbq: a search that splits by layers. The slurm rows ask for 2 parts (--shards 2, one
#     per CPU of the one-node cluster; by default Slurm gets one part per node): each quant
#     stage's parts are one job array, the stage takes their work (the rows count the parts)
#
# slurm-nodedown: the slurm build, with the node set down (`scontrol update state=down`) while
# the first quant job runs: Slurm requeues that job, the driver waits, the build finishes; the stages
# run counts each stage once if no finished work was lost.
#
# The manifest: lpbq (block 64, 8 x 128 calibration ids), arcl [1,128] x [4096], split (4),
# mha2sha. Each executor's cache and packages are removed after its rows (disk). The slurm rows need root (the script starts the cluster and stops it after).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-$ROOT/build}
WORK=${WORK:-/work/nf_executor}
NF=$BUILD/bin/npuforge
PY=/usr/bin/python3
MODEL=${1:-llama-100m}
EXECUTORS=${EXECUTORS:-"local1 local2 slurm slurm-nodedown"}
SHORT=${SHORT:-0}
SEQMSE=${SEQMSE:-0}
d=$WORK/$MODEL
bash "$ROOT/bench/prepare_model.sh" "$MODEL" "$d"
cat > "$d/three_targets.toml" <<TOML
[model]
onnx = "model.onnx"

[calibration]
ids = "calib_ids.json"
num_samples = 8
sequence_length = 128
$(if [ "$SEQMSE" = 1 ]; then printf '\n[[quant]]\nrecipe = "seqmse"\ninp_symmetry = "symfp"\ngranularity = "per_block"\nblock_size = 64\nnum_candidates = 8\n'; fi)

[[quant]]
recipe = "lpbq"
block_size = 64

[[transform]]
plugin = "arcl"
arn = [1, 128]
context_length = [4096]
$(if [ "$SHORT" != 1 ]; then printf '\n[[transform]]\nplugin = "split"\nnum_splits = 4\n\n[[transform]]\nplugin = "mha2sha"\n'; fi)

[targets.cpu]
backend = "cpu"

[targets.htp]
backend = "htp"
chipset = "sm8750"

[targets.aries]
backend = "aries"
TOML

if [[ " $EXECUTORS " == *" slurm"* ]]; then
  bash "$ROOT/scripts/slurm_cluster.sh" running || trap 'bash "$ROOT/scripts/slurm_cluster.sh" stop' EXIT
  bash "$ROOT/scripts/slurm_cluster.sh" start
  eval "$(bash "$ROOT/scripts/slurm_cluster.sh" env)"
fi

echo "| executor | cache | wall s | stages run | stages cached | stage entries on disk GB | each with own copies GB | cpu sha256 | htp sha256 | aries sha256 |"
echo "|---|---|---|---|---|---|---|---|---|---|"
for ex in $EXECUTORS; do
  case $ex in
    local1) args=(--executor local --jobs 1) ;;
    local2) args=(--executor local --jobs 2) ;;
    slurm | slurm-nodedown) args=(--executor slurm --shards 2) ;;  # a part per CPU of the one node
    *) echo "unknown executor $ex" >&2; exit 2 ;;
  esac
  cache=$d/cache-$ex
  out=$d/out-$ex
  rm -rf "$cache" "$out"
  for pass in cold warm; do
    start=$(date +%s.%N)
    if [ "$ex" = slurm-nodedown ] && [ "$pass" = warm ]; then continue; fi
    rm -rf "$out"  # the warm pass writes the packages anew (disk: a 1B's three are 4.4 GB)
    "$NF" build "$d/three_targets.toml" --out "$out" --cache-dir "$cache" "${args[@]}" > "$d/$ex-$pass.log" 2>&1 &
    pid=$!
    if [ "$ex" = slurm-nodedown ]; then
      # Down the node once the lpbq job has run for 5 s, and back up (ReturnToService may
      # already have brought it back).
      until ls "$cache"/builds/*/logs/quant-0-*.log >/dev/null 2>&1 || ! kill -0 $pid 2>/dev/null; do sleep 0.5; done
      sleep 5
      scontrol update nodename="$(hostname -s)" state=down reason=executor_bench
      sleep 5
      scontrol update nodename="$(hostname -s)" state=resume 2>/dev/null || true
    fi
    if ! wait $pid; then
      echo "| $ex | $pass | failed: $(tail -1 "$d/$ex-$pass.log") | | | | | | | |"
      continue
    fi
    end=$(date +%s.%N)
    parts=$(grep -c ' (part [0-9]* of [0-9]*): finished' "$d/$ex-$pass.log" || true)
    read -r run cached < <($PY -c 'import json,sys; s=json.load(open(sys.argv[1]))["stages"]; c=sum(x["cached"] for x in s); print(len(s)-c, c)' "$out/htp/build_report.json")
    read -r compiled < <($PY -c 'import json,sys; print(sum(not json.load(open(f"{sys.argv[1]}/{t}/build_report.json"))["compile_cached"] for t in ("cpu", "htp", "aries")))' "$out")
    on_disk=$(du -sbc "$cache/stages" "$cache/blobs" | tail -1 | cut -f1)
    own_copies=$(du -sbl "$cache/stages" | cut -f1)
    shas=()
    for t in cpu htp aries; do
      shas+=("$(cd "$out/$t" && find artifacts -type f | LC_ALL=C sort | xargs sha256sum | sha256sum | cut -c1-12)")
    done
    # run / cached: the quant and transform stages, then the 3 compiles
    awk -v e="$ex" -v p="$pass" -v s="$start" -v t="$end" -v r="$run" -v c="$cached" -v k="$compiled" -v o="$on_disk" -v l="$own_copies" \
      -v a="${shas[0]}" -v b="${shas[1]}" -v z="${shas[2]}" -v n="$parts" \
      'BEGIN {printf "| %s | %s | %.1f | %d%s + %d compiles | %d + %d compiles | %.2f | %.2f | %s | %s | %s |\n", e, p, t - s, r, n ? " (+ " n " parts)" : "", k, c, 3 - k, o / 1e9, l / 1e9, a, b, z}'
  done
  rm -rf "$cache" "$out"
done
