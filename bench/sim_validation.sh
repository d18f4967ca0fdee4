#!/bin/sh
# Simulators vs every published LLM figure we found (bench/sim_figures.json): fits the htp
# chip files and the aries device file on the stated subset, predicts the rest, and runs
# the leave-one-out fits (bench/RESULTS.md, "Simulator validation").
#
#   bench/sim_validation.sh [BUILD_DIR] [WORK_DIR]      # defaults: build, /tmp/nf_sim_validation
#   FIGURES=path: figures and fits of your own in sim_figures.json's layout (each figure's
#   "config" names tools/models/configs/<config>.json or is a path, absolute or relative to
#   the figures file, to any HF decoder config.json (tools/models/hf_config.py reads the
#   families' key names); a figure may also give "precision" ("w4a16", the default, or "w4"),
#   "kv_bits" (8 unless given) and "context" (the export's context length, 4096 unless
#   given); "fits" say which figures fit what; "not_simulated" lists what was found and why
#   it is not costed); FITS=none ignores the file's fits and predicts every figure with the
#   chip and device files as they are. A figure the simulators cannot
#   cost (a chip without a chip file, or without a figure its estimate needs) is listed as
#   "not simulated" with the reason; a set without aries figures skips the aries fit, and a
#   parameter no stated group fits keeps its chip or device file's value.
#
# Needs the targets npuforge, npuforge_plugin_htp, npuforge_plugin_arcl and aries_sim built
# in BUILD_DIR. Models are synthesized with tools/models/synth_model.py --zeros (weights
# are file holes: an 8B model takes ~2 MB of disk) and built once into WORK_DIR; a re-run
# reuses them (the first run synthesizes ~60 GB of holes in fp32, the dtype the htp compile
# costs: about 5 minutes per 8B model here). The fits rewrite plugins/backends/htp/chips/*.json and
# plugins/backends/aries/devices/aries-rb.json: on an unchanged tree `git diff` stays empty.
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${1:-$ROOT/build}
WORK=${2:-/tmp/nf_sim_validation}
for t in "$BUILD/bin/npuforge" "$BUILD/bin/aries_sim" "$BUILD/lib/npuforge/plugins/libnpuforge_htp.so" \
         "$BUILD/lib/npuforge/plugins/libnpuforge_arcl.so"; do
  [ -e "$t" ] || { echo "sim_validation: $t is missing: build npuforge, npuforge_plugin_htp, npuforge_plugin_arcl and aries_sim in $BUILD" >&2; exit 2; }
done
exec /usr/bin/python3 "$ROOT/bench/sim_validation.py" "$BUILD" "$WORK"
