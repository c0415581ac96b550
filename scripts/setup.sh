#!/usr/bin/env bash
# Installs what ember needs from Debian 12 packages (apt-get, only what is missing), then configures
# and builds the release preset. Safe to run again: it skips what is done.
#   scripts/setup.sh          building and training: the compiler, the libraries the build uses
#                             (MPI, the Python module, image codecs, ONNX) and Fashion-MNIST; builds
#                             the library, the CLI and the Python module only
#   scripts/setup.sh --tests  also the test suite and its peers: GoogleTest, Google Benchmark,
#                             PyTorch, torchvision, Chromium, clang, oneDNN, ONNX Runtime (npm),
#                             ONNX's node test data
set -euo pipefail
cd "$(dirname "$0")/.."
tests=0
case "${1:-}" in
  "") ;;
  --tests) tests=1 ;;
  *) echo "setup: unknown option '$1' (expected nothing or --tests)" >&2; exit 2 ;;
esac
pkgs=(build-essential cmake ninja-build zlib1g-dev nlohmann-json3-dev libcli11-dev dataset-fashion-mnist
      pkg-config libspng-dev libturbojpeg0-dev      # image folders (PNG, JPEG)
      python3-dev python3-pybind11 python3-numpy    # the Python module
      libprotobuf-dev protobuf-compiler libonnx-dev # ONNX files (schema: libonnx-dev)
      openmpi-bin libopenmpi-dev)                   # data-parallel training (mpirun)
if [ $tests = 1 ]; then
  pkgs+=(libgtest-dev libbenchmark-dev
         chromium fonts-liberation    # headless Chromium renders `ember report` pages in the tests
         clang libclang-rt-14-dev     # the tsan and fuzz presets (ThreadSanitizer, libFuzzer)
         python3-pil                  # PIL checks the image decoding in tests
         libdnnl-dev ocl-icd-opencl-dev  # bench/bench_conv_onednn (oneDNN's CMake config needs OpenCL)
         python3-pytest python3-onnx  # the Python module's pytest suite; onnx.checker in tests
         libonnx-testdata             # ONNX's own operator node tests (tests/python/test_onnx_node_tests.py)
         python3-torch python3-torchvision libopenblas0-openmp)  # PyTorch interop tests; bench/compare_pytorch.py
  command -v npm >/dev/null || pkgs+=(nodejs npm)  # ONNX Runtime (npm onnxruntime-node) is the tests' ONNX peer
fi
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
if [ $tests = 1 ] && [ ! -d build/npm/node_modules/onnxruntime-node ]; then
  mkdir -p build/npm
  # Offline, ember still builds and trains: only the ONNX Runtime tests need it (they fail in CI,
  # where EMBER_REQUIRE_ORT=1, and skip with this hint elsewhere).
  npm install --ignore-scripts --no-audit --no-fund --prefix build/npm onnxruntime-node@1.30.0 >/dev/null ||
    echo "setup: could not install onnxruntime-node from npm; the ONNX Runtime round-trip tests will not run" >&2
fi
# --tests configures and builds everything (the suite and the benchmarks). Without it, only what
# training needs is built, the library, the CLI and the Python module, whatever is installed: the
# first command stays quick on a machine that has GoogleTest. A build folder configured by
# --tests before keeps its test targets (configured, not rebuilt here).
preset="${EMBER_PRESET:-release}"
if [ $tests = 1 ]; then
  cmake --preset "$preset" -DEMBER_BUILD_TESTS=ON -DEMBER_BUILD_BENCH=ON >/dev/null
  cmake --build --preset "$preset"
else
  dir="build/$preset"
  if [ ! -f "$dir/CMakeCache.txt" ]; then
    cmake --preset "$preset" -DEMBER_BUILD_TESTS=OFF -DEMBER_BUILD_BENCH=OFF >/dev/null
  else
    cmake --preset "$preset" >/dev/null
  fi
  targets=(ember_cli)
  grep -q '^EMBER_BUILD_PYTHON:BOOL=ON' "$dir/CMakeCache.txt" && targets+=(ember_python)
  cmake --build "$dir" --target "${targets[@]}"
fi
