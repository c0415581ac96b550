#!/usr/bin/env bash
# Installs ember's build dependencies from Debian 12 packages (apt-get, only what is missing),
# then configures and builds the release preset. Safe to run again: it skips what is done.
set -euo pipefail
cd "$(dirname "$0")/.."
pkgs=(build-essential cmake ninja-build zlib1g-dev nlohmann-json3-dev libcli11-dev libgtest-dev
      libbenchmark-dev dataset-fashion-mnist
      chromium fonts-liberation   # headless Chromium renders `ember report` pages in the tests
      clang libclang-rt-14-dev    # the tsan and fuzz presets (ThreadSanitizer, libFuzzer)
      pkg-config libspng-dev libturbojpeg0-dev python3-pil  # image folders (PNG, JPEG); PIL checks the decoding in tests
      libdnnl-dev ocl-icd-opencl-dev  # bench/bench_conv_onednn (oneDNN's CMake config needs OpenCL)
      python3-dev python3-pybind11 python3-pytest  # the Python module and its pytest suite
      libprotobuf-dev protobuf-compiler libonnx-dev python3-onnx  # ONNX files (schema: libonnx-dev); onnx.checker in tests
      openmpi-bin libopenmpi-dev  # data-parallel training (mpirun; the mpirun tests)
      python3-torch python3-torchvision python3-numpy libopenblas0-openmp)  # PyTorch interop tests; bench/compare_pytorch.py (OpenBLAS)
command -v npm >/dev/null || pkgs+=(nodejs npm)  # ONNX Runtime (npm onnxruntime-node) is the tests' ONNX peer
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  echo "setup: installing ${missing[*]}"
  $sudo apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
# ONNX Runtime 1.30 for the ONNX round-trip tests and bench/compare_onnxruntime.py. Its install
# script fetches GPU extras from outside (and fails): --ignore-scripts; the CPU runtime ships inside.
if [ ! -d build/npm/node_modules/onnxruntime-node ]; then
  mkdir -p build/npm
  # Offline, ember still builds and trains: only the ONNX Runtime tests need it (they fail in CI,
  # where EMBER_REQUIRE_ORT=1, and skip with this hint elsewhere).
  npm install --ignore-scripts --no-audit --no-fund --prefix build/npm onnxruntime-node@1.30.0 >/dev/null ||
    echo "setup: could not install onnxruntime-node from npm; the ONNX Runtime round-trip tests will not run" >&2
fi
cmake --preset "${EMBER_PRESET:-release}" >/dev/null
cmake --build --preset "${EMBER_PRESET:-release}"
