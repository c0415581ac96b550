// ONNX Runtime for the QDQ tests, through node and tests/onnx/ort_run.js (as tests/python/test_onnx.py
// runs it): where its node_modules are, and one run of a model on fp32 inputs.
#pragma once
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace ember::test {

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
