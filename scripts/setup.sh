#!/usr/bin/env bash
# Installs every Debian 12 package npuforge needs to build, test and benchmark.
set -euo pipefail
packages=(
  build-essential cmake pkg-config git
  libboost-dev libboost-filesystem-dev
  libonnx-dev libprotobuf-dev protobuf-compiler
  libtomlplusplus-dev nlohmann-json3-dev libcli11-dev
  libopenblas-dev libspdlog-dev libfmt-dev libxxhash-dev libpcre2-dev libicu-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libonnx-testdata python3 python3-onnx python3-numpy
  clang libclang-rt-14-dev
  strace
  slurm-wlm munge  # the slurm executor's one-node test cluster (scripts/slurm_cluster.sh)
  sqlite3-doc  # the corpus of tiny_llama's calibration text (bench/quant_accuracy.sh, tools/models/corpus.py)
)
# Node.js + npm: the ONNX Runtime check of transformed graphs (tests/ort) and the peer
# benches run onnxruntime-node from bench/node_modules (scripts/test.sh installs it). A
# node that already brings its own npm (e.g. NodeSource's) is kept as it is.
command -v npm >/dev/null 2>&1 || packages+=(nodejs npm)
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -q
$sudo apt-get install -y -q --no-install-recommends "${packages[@]}"
