#!/usr/bin/env bash
# Installs npuforge to a temporary prefix, builds examples/third_party_plugin against the
# installed SDK with plain CMake (BLAS hidden from find_package: a transform needs none),
# checks it exports only the two entry points and the installed host loads and runs it: a
# package built with the plugin (2 Identity nodes folded) generates what the model does.
# Also: the SDK docs are installed, and COMPONENTS graph quant build a plugin source that uses
# the installed operator table, quant helpers and decoder IO header.
set -euo pipefail
src=$1 bin=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --install "$bin" --prefix "$work/prefix" >/dev/null
for doc in abi.md options-schema.md manifest.md examples/third_party_plugin/fold_identity.cpp; do
  [ -s "$work/prefix/share/doc/npuforge/$doc" ] || { echo "SDK doc $doc not installed"; exit 1; }
done
cmake -S "$src/examples/third_party_plugin" -B "$work/plugin" -DCMAKE_PREFIX_PATH="$work/prefix" \
  -DCMAKE_DISABLE_FIND_PACKAGE_BLAS=ON >/dev/null
cmake --build "$work/plugin" >/dev/null
exports=$(nm -D --defined-only "$work/plugin/libfold_identity.so" | awk '{print $3}' | sort | tr '\n' ' ')
[ "$exports" = "npuforge_plugin_abi_version npuforge_plugin_entry " ] || { echo "exports: $exports"; exit 1; }

mkdir -p "$work/graph_plugin"
cat > "$work/graph_plugin/CMakeLists.txt" <<'CMAKE'
cmake_minimum_required(VERSION 3.22)
project(uses_graph LANGUAGES CXX)
find_package(npuforge_sdk 0.1 REQUIRED COMPONENTS graph quant)
npuforge_add_plugin(uses_graph SOURCES plugin.cpp LIBS npuforge::quant)
CMAKE
cat > "$work/graph_plugin/plugin.cpp" <<'CPP'
#include <npuforge/decoder_io.hpp>
#include <npuforge/graph/operators.h>
#include <npuforge/quant/helpers.h>
// Compiles against the installed headers and links the table and the helpers.
int uses_sdk() {
  nf::quant::EncodingData e = nf::quant::asymmetric_tensor_encoding(-1.f, 1.f, 8);
  return nf::graph::find_operator("MatMul") != nullptr && e.bw == 8 && nf::decoder::is_past_kv(nf::decoder::past_key(0));
}
CPP
cmake -S "$work/graph_plugin" -B "$work/graph_plugin/build" -DCMAKE_PREFIX_PATH="$work/prefix" >/dev/null ||
  { echo "COMPONENTS graph quant do not configure"; exit 1; }
cmake --build "$work/graph_plugin/build" >/dev/null || { echo "a plugin on the installed graph and quant headers does not build"; exit 1; }
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
