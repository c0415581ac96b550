// ONNX Runtime for the QDQ tests, through node and tests/onnx/ort_run.js (as tests/python/test_onnx.py
// runs it): where its node_modules are, and one run of a model on fp32 inputs.
#pragma once
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "kernels/cpu_probe.h"

namespace ember::test {

// ONNX Runtime's u8 x s8 GEMM on an x86 CPU without VNNI (MLAS's AVX2 kernel) multiplies with
// VPMADDUBSW, whose int16 sum of two products saturates (255 * 127 * 2 > 32767; ORT's own reason
// for reduce_range): measured on a Zen 3, mnist-cnn's QDQ logits 14 % of their range off ember's and
// its int8 plan's. The agreement tests keep weights within +-63 there (255 * 63 * 2 fits), as
// `--weight-bits 7` does; with VNNI (32-bit sums) the full int8 range.
inline int ort_exact_weight_max() {
  const CpuProbe& p = cpu_probe();
  return p.avx512_vnni || p.avx_vnni ? 127 : 63;
}

// ONNX Runtime through node (tests/onnx/ort_run.js); "" when it is not there (skip), or fails
// with EMBER_REQUIRE_ORT=1.
inline std::string ort_node_modules() {
  // EMBER_ORT_NODE_MODULES, else where scripts/setup.sh --tests installs it (as CI runs the suite).
  const char* env = std::getenv("EMBER_ORT_NODE_MODULES");
  const std::string fallback = std::string(EMBER_SOURCE_DIR) + "/build/npm/node_modules";
  const char* nm = env && *env ? env : fallback.c_str();
  const bool need = std::getenv("EMBER_REQUIRE_ORT") && std::string(std::getenv("EMBER_REQUIRE_ORT")) == "1";
  std::string why;
  if (!nm || !*nm) why = "EMBER_ORT_NODE_MODULES is not set";
  else if (!std::filesystem::is_directory(std::filesystem::path(nm) / "onnxruntime-node")) why = std::string(nm) + ": no onnxruntime-node";
  else if (std::system("node --version > /dev/null 2>&1") != 0) why = "node is not on PATH";
  if (why.empty()) return nm;
  if (need) ADD_FAILURE() << "ONNX Runtime: " << why << " (EMBER_REQUIRE_ORT=1)";
  return "";
}

inline std::vector<float> run_ort(const std::string& nm, const std::string& model, const std::vector<float>& x, const std::string& shape,
                           const std::filesystem::path& dir) {
  const std::filesystem::path in = dir / "in.f32", out = dir / "out.f32";
  std::ofstream(in, std::ios::binary).write(reinterpret_cast<const char*>(x.data()), std::streamsize(x.size() * 4));
  const std::string cmd = "NODE_PATH='" + nm + "' node '" + std::string(EMBER_SOURCE_DIR) + "/tests/onnx/ort_run.js' '" + model +
                          "' '" + in.string() + "' '" + out.string() + "' --shape " + shape + " --threads 1 > '" +
                          (dir / "ort.log").string() + "' 2>&1";
  if (std::system(cmd.c_str()) != 0) {
    std::ifstream log(dir / "ort.log");
    ADD_FAILURE() << "ort_run.js failed: " << std::string(std::istreambuf_iterator<char>(log), {});
    return {};
  }
  std::ifstream f(out, std::ios::binary);
  std::vector<float> y(size_t(std::filesystem::file_size(out)) / 4);
  f.read(reinterpret_cast<char*>(y.data()), std::streamsize(y.size() * 4));
  return y;
}

}  // namespace ember::test
