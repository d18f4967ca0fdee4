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
)
# The benches also need Node.js + npm (bench/README.md); tests do not.
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -q
$sudo apt-get install -y -q --no-install-recommends "${packages[@]}"
