#!/usr/bin/env bash
# The main job on the bundled tiny model: set up, build, package it, generate, evaluate.
# It builds only what it runs: the npuforge executable and its plugins (scripts/test.sh
# builds the tests too).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh npuforge
./build/bin/npuforge build examples/tiny_llama/manifest.toml --out out
./build/bin/npuforge run out/cpu --prompt "The SQLite library" --max-new-tokens 48
./build/bin/npuforge eval out/cpu --text tests/models/tiny_llama/heldout.txt
