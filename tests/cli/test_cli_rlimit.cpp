// Out of memory under a limited address space (prlimit --as): the one-line error says what was
// being allocated, for which file or model, and how much (issue 37, D9). Labelled `rlimit` in
// ctest: sanitizer builds reserve more address space than any such limit allows, so their
// presets leave these tests out (and the tests skip themselves in a sanitizer build).
#include <sys/stat.h>

#include "cli/cli_util.h"

namespace {

// A safetensors file of a wide MLP (784 -> n -> 10) whose tensors are all zero: a sparse file,
// so a test holds n * 784 * 4 bytes of weights without writing them.
void write_wide_weights(const fs::path& p, int n) {
  const nlohmann::json model = {{"name", "wide"}, {"input", {1, 28, 28}}, {"classes", 10},
                                {"layers", {{{"type", "flatten"}}, {{"type", "linear"}, {"out_features", n}},
                                            {{"type", "relu"}}, {{"type", "linear"}, {"out_features", 10}}}}};
  nlohmann::json h = nlohmann::json::object();
  uint64_t off = 0;
  for (const auto& [name, shape] : std::vector<std::pair<std::string, std::vector<int64_t>>>{
           {"1.weight", {n, 784}}, {"1.bias", {n}}, {"3.weight", {10, n}}, {"3.bias", {10}}}) {
    uint64_t count = 1;
    for (int64_t d : shape) count *= uint64_t(d);
    h[name] = {{"dtype", "F32"}, {"shape", shape}, {"data_offsets", {off, off + 4 * count}}};
    off += 4 * count;
  }
  h["__metadata__"] = {{"format", "pt"}, {"model", model.dump()}};
  std::string hs = h.dump();
  hs.append((8 - hs.size() % 8) % 8, ' ');
  Bytes b(8);
  for (int i = 0; i < 8; ++i) b[size_t(i)] = uint8_t(uint64_t(hs.size()) >> (8 * i));
  b.insert(b.end(), hs.begin(), hs.end());
  write_bytes(p, b);
  fs::resize_file(p, b.size() + off);  // the zeros: a hole
}

bool have_prlimit() { return std::system("command -v prlimit >/dev/null 2>&1") == 0; }

// D9: `ember export` of a model whose plan fits in 700 MB but whose ONNX protobuf does not:
// on c918c99 "ember: error: out of memory", naming nothing; now the flag, the file, the model
// and its size.
TEST_F(Cli, RlimitExportOutOfMemoryNamesTheModelAndItsSize) {
  if (kSanitizedBuild) GTEST_SKIP() << "sanitizer build: address-space limits do not apply";
  if (!have_prlimit()) GTEST_SKIP() << "prlimit (util-linux) is not installed";
  const fs::path w = tmp_ / "wide.safetensors", o = tmp_ / "wide.onnx";
  write_wide_weights(w, 50000);  // 150 MiB of weights; the plan ~455 MiB, the export ~1 GB
  const Result r = run("export " + quote(w.string()) + " -o " + quote(o.string()), "prlimit --as=700000000");
  expect_one_line_error(r, {"--output", "wide.onnx", "out of memory", "model wide", "39750010 parameters", "MiB"});
  EXPECT_FALSE(fs::exists(o));
  const Result ok = run("export " + quote(w.string()) + " -o " + quote(o.string()));
  EXPECT_EQ(ok.code, 0) << ok.err;  // without the limit it fits: the error was the limit's
}

}  // namespace
