#!/usr/bin/env bash
# Installs npuforge to a temporary prefix, builds examples/third_party_plugin against the
# installed SDK with plain CMake, and checks the installed host loads and runs it: a
# package built with the plugin (2 Identity nodes folded) generates what the model does.
set -euo pipefail
src=$1 bin=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --install "$bin" --prefix "$work/prefix" >/dev/null
cmake -S "$src/examples/third_party_plugin" -B "$work/plugin" -DCMAKE_PREFIX_PATH="$work/prefix" >/dev/null
cmake --build "$work/plugin" >/dev/null
export NPUFORGE_PLUGIN_PATH="$work/plugin"
npuforge="$work/prefix/bin/npuforge"
"$npuforge" plugins fold_identity | grep -q "^transform *fold_identity" || { echo "plugin not listed"; exit 1; }

model=$src/tests/cli/data/identity_model.onnx
cat > "$work/manifest.toml" <<TOML
[model]
onnx = "$model"
[[transform]]
plugin = "fold_identity"
[targets.cpu]
backend = "cpu"
TOML
"$npuforge" build "$work/manifest.toml" --out "$work/out" --no-cache -q
tokens() { "$npuforge" run "$1" --prompt-ids 3,1,4,1,5 --max-new-tokens 8 --json |
           python3 -c "import json,sys; print(','.join(map(str,json.load(sys.stdin)['tokens'])))"; }
want=$(tokens "$model")
got=$(tokens "$work/out/cpu")
[ "$got" = "$want" ] || { echo "tokens differ: got $got want $want"; exit 1; }
python3 - "$work/out/cpu/package.json" <<'PY'
import json, sys
meta = json.load(open(sys.argv[1]))
assert meta["stages"][0]["name"] == "fold_identity", meta["stages"]
assert meta["metadata"]["fold_identity"]["removed"] == 2, meta["metadata"]
PY
echo "third-party plugin: built against the installed SDK, loaded, folded 2 nodes, same tokens ($got)"
