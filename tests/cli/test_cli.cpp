// Command-line tests for the `ember` binary (EMBER_BINARY): every bad input (data files, model
// descriptions, flags, weights) must give one error line naming the file/field/flag and a non-zero
// exit without a crash or hang; the good paths (train, eval, --help, info, JSON models, --isa)
// work on tiny learnable MNIST-format data written to a temp directory by each test.
#include <cstring>

#include "cli/cli_util.h"
#include "ember/model.h"
#include "ember/plan.h"

namespace {


// ---------------------------------------------------------------------------------------------
// Data: missing and unreadable files, bad headers, truncation, gzip damage, bad labels.

TEST_F(Cli, DataDirMissing) {
  const fs::path d = tmp_ / "nosuch";
  expect_one_line_error(run(train_args("", d)), {d.string(), "data directory"});
}

TEST_F(Cli, DataDirMissingOneFile) {
  fs::remove(data_ / kTestLab);
  expect_one_line_error(run(train_args("")), {kTestLab, "found neither"});
}

TEST_F(Cli, DataFileIsADirectory) {
  fs::remove(data_ / kTrainImg);
  fs::create_directory(data_ / kTrainImg);
  expect_one_line_error(run(train_args("")), {kTrainImg, "directory"});
}

TEST_F(Cli, DataFileUnreadable) {
  if (::geteuid() == 0) GTEST_SKIP() << "running as root: chmod 000 does not make a file unreadable";
  fs::permissions(data_ / kTrainLab, fs::perms::none);
  expect_one_line_error(run(train_args("")), {kTrainLab, "cannot open"});
}

TEST_F(Cli, DataWrongMagic) {
  Bytes b = read_bytes(data_ / kTrainImg);
  b[0] = 0x12, b[1] = 0x34;
  write_bytes(data_ / kTrainImg, b);
  expect_one_line_error(run(train_args("")), {kTrainImg, "magic", "0x1234"});
}

TEST_F(Cli, DataImagesAreLabels) {  // a labels file where images belong: rank 1, not 3
  fs::copy_file(data_ / kTestLab, data_ / kTestImg, fs::copy_options::overwrite_existing);
  expect_one_line_error(run(train_args("")), {kTestImg, "rank"});
}

TEST_F(Cli, DataCountMismatch) {
  const Images im = make_images(199, 1);
  write_bytes(data_ / kTrainLab, idx(0x801, {199}, im.labels));
  expect_one_line_error(run(train_args("")), {kTrainLab, "count", "200", "199"});
}

TEST_F(Cli, DataRawTruncated) {
  Bytes b = read_bytes(data_ / kTestImg);
  b.resize(b.size() - 100);
  write_bytes(data_ / kTestImg, b);
  expect_one_line_error(run(train_args("")), {kTestImg, "size", "truncated"});
}

TEST_F(Cli, DataDimsDisagreeWithFileSize) {  // header says 30x30, payload is 28x28
  const Images im = make_images(50, 2);
  write_bytes(data_ / kTestImg, idx(0x803, {50, 30, 30}, im.pixels));
  expect_one_line_error(run(train_args("")), {kTestImg, "size", "30 x 30"});
}

TEST_F(Cli, DataHugeDimsNoHugeAllocation) {  // 2^32-1 images of 4096x4096: rejected, not allocated
  write_bytes(data_ / kTrainImg, idx(0x803, {0xffffffffu, 4096, 4096}, Bytes(16)));
  expect_one_line_error(run(train_args("")), {kTrainImg, "dims", "too large"});
}

TEST_F(Cli, DataTrainTestRowsDisagree) {
  Bytes px(50 * 20 * 20, 7);
  write_bytes(data_ / kTestImg, idx(0x803, {50, 20, 20}, px));
  expect_one_line_error(run(train_args("")), {kTestImg, "rows/cols"});
}

TEST_F(Cli, DataGzipWorks) {
  const fs::path gz = tmp_ / "gz";
  write_dataset(gz, 200, 50, /*gz=*/true);
  Result r = run(train_args("", gz));
  EXPECT_EQ(r.code, 0) << r.cmd << "\n" << r.out << r.err;
  EXPECT_NE(r.out.find("final test accuracy"), std::string::npos) << r.out;
}

TEST_F(Cli, DataGzipTruncated) {
  const fs::path gz = tmp_ / "gz";
  write_dataset(gz, 200, 50, true);
  const fs::path f = gz / (std::string(kTrainImg) + ".gz");
  Bytes b = read_bytes(f);
  b.resize(b.size() / 2);
  write_bytes(f, b);
  expect_one_line_error(run(train_args("", gz)), {f.string(), "gzip"});
}

TEST_F(Cli, DataGzipCorrupt) {  // flipped bytes inside the deflate stream, trailer intact
  const fs::path gz = tmp_ / "gz";
  write_dataset(gz, 200, 50, true);
  const fs::path f = gz / (std::string(kTrainImg) + ".gz");
  Bytes b = read_bytes(f);
  ASSERT_GT(b.size(), 200u);
  for (size_t i = b.size() / 3; i < b.size() / 3 + 16; ++i) b[i] ^= 0xA5;
  write_bytes(f, b);
  expect_one_line_error(run(train_args("", gz)), {f.string(), "gzip"});
}

TEST_F(Cli, DataGzipTrailingGarbageInStream) {  // ISIZE agrees only if we lie; stream has extra data
  const fs::path gz = tmp_ / "gz";
  write_dataset(gz, 200, 50, true);
  const Images im = make_images(50, 2);
  Bytes b = idx(0x801, {50}, im.labels);
  b.insert(b.end(), 8, 0);  // 8 extra bytes after the payload
  write_gz(gz / (std::string(kTestLab) + ".gz"), b);
  expect_one_line_error(run(train_args("", gz)), {kTestLab, "gzip"});
}

TEST_F(Cli, DataLabelOutOfRange) {
  for (uint8_t bad : {uint8_t(10), uint8_t(255)}) {
    Images im = make_images(50, 2);
    im.labels[7] = bad;
    write_bytes(data_ / kTestLab, idx(0x801, {50}, im.labels));
    expect_one_line_error(run(train_args("")), {kTestLab, "label[7]", std::to_string(bad)});
  }
}

TEST_F(Cli, DataZeroImages) {
  write_bytes(data_ / kTrainImg, idx(0x803, {0, 28, 28}, {}));
  write_bytes(data_ / kTrainLab, idx(0x801, {0}, {}));
  expect_one_line_error(run(train_args("")), {kTrainImg, "count", "0"});
}

// ---------------------------------------------------------------------------------------------
// Models: unknown names, bad JSON, unknown layers and keys, shapes that do not chain.

TEST_F(Cli, ModelUnknownName) {
  expect_one_line_error(run("train --data " + quote(data_) + " --model nosuch --epochs 1"),
                        {"--model", "nosuch"});
}

TEST_F(Cli, ModelFileMissing) {
  const fs::path m = tmp_ / "missing.json";
  expect_one_line_error(run("train --data " + quote(data_) + " --model " + quote(m)),
                        {m.string(), "No such file or directory"});
}

TEST_F(Cli, ModelFileIsADirectory) {
  const fs::path m = tmp_ / "dir.json";
  fs::create_directory(m);
  expect_one_line_error(run("train --data " + quote(data_) + " --model " + quote(m)), {m.string(), "directory"});
}

class CliModel : public Cli {
 protected:
  // Writes `json` to tmp_/model.json and expects a one-line error naming the file and `needles`.
  void expect_model_error(const std::string& json, std::vector<std::string> needles) {
    const fs::path m = tmp_ / "model.json";
    write_text(m, json);
    needles.push_back(m.string());
    expect_one_line_error(run("train --data " + quote(data_) + " --model " + quote(m) +
                              " --epochs 1 --threads 1"),
                          needles);
  }
};

TEST_F(CliModel, InvalidJson) { expect_model_error("{\"layers\": [ {\"type\": \"flatten\"}, ", {"invalid JSON"}); }

TEST_F(CliModel, EmptyFile) { expect_model_error("", {"invalid JSON"}); }

TEST_F(CliModel, NotAnObject) { expect_model_error("[1, 2, 3]", {"top level"}); }

TEST_F(CliModel, UnknownLayerType) {
  expect_model_error(R"({"layers": [{"type": "flatten"}, {"type": "dense", "out_features": 10}]})",
                     {"layers[1].type", "dense"});
}

TEST_F(CliModel, UnknownLayerKey) {
  expect_model_error(R"({"layers": [{"type": "flatten"}, {"type": "linear", "out_features": 10, "units": 3}]})",
                     {"layers[1].units", "unknown key"});
}

TEST_F(CliModel, UnknownTopLevelKey) {
  expect_model_error(R"({"layer": [{"type": "flatten"}, {"type": "linear", "out_features": 10}]})",
                     {"layer", "unknown key"});
}

TEST_F(CliModel, WrongValueType) {
  expect_model_error(R"({"layers": [{"type": "flatten"}, {"type": "linear", "out_features": "ten"}]})",
                     {"layers[1].out_features", "integer"});
}

TEST_F(CliModel, LinearOnImageWithoutFlatten) {
  expect_model_error(R"({"layers": [{"type": "linear", "out_features": 10}]})", {"layers[0]", "flatten"});
}

TEST_F(CliModel, ConvKernelLargerThanInput) {
  expect_model_error(R"({"layers": [{"type": "conv2d", "out_channels": 4, "kernel": 40},
                                    {"type": "flatten"}, {"type": "linear", "out_features": 10}]})",
                     {"layers[0]", "conv2d", "kernel"});
}

TEST_F(CliModel, LastLayerNotTenClasses) {
  expect_model_error(R"({"layers": [{"type": "flatten"}, {"type": "linear", "out_features": 7}]})",
                     {"last layer", "10", "7"});
}

TEST_F(CliModel, ClassesFewerThanLabels) {  // a valid 5-class model cannot train on 10-class data
  expect_model_error(R"({"classes": 5, "layers": [{"type": "flatten"}, {"type": "linear", "out_features": 5}]})",
                     {"classes", "5"});
}

// ---------------------------------------------------------------------------------------------
// Flags: each bad value gives one line naming the flag, before any training or data loading.

struct FlagCase {
  const char* flags;
  const char* flag;   // must appear in the error line
};

class CliFlag : public Cli, public ::testing::WithParamInterface<FlagCase> {};

TEST_P(CliFlag, Rejected) {
  const FlagCase& c = GetParam();
  expect_one_line_error(run("train --data " + quote(data_) + " --model mnist-mlp " + c.flags), {c.flag});
}

INSTANTIATE_TEST_SUITE_P(
    Bad, CliFlag,
    ::testing::Values(FlagCase{"--batch-size 0", "--batch-size"}, FlagCase{"--batch-size -5", "--batch-size"},
                      FlagCase{"--batch-size 100000000", "--batch-size"},
                      FlagCase{"--lr -1", "--lr"}, FlagCase{"--lr 0", "--lr"}, FlagCase{"--lr nan", "--lr"},
                      FlagCase{"--lr inf", "--lr"}, FlagCase{"--lr 1e400", "--lr"},
                      FlagCase{"--epochs 0", "--epochs"}, FlagCase{"--epochs -1", "--epochs"},
                      FlagCase{"--threads 0", "--threads"}, FlagCase{"--threads 100000", "--threads"},
                      FlagCase{"--threads -2", "--threads"}, FlagCase{"--isa bogus", "--isa"},
                      FlagCase{"--optimizer bogus", "--optimizer"}, FlagCase{"--schedule bogus", "--schedule"},
                      FlagCase{"--init bogus", "--init"}, FlagCase{"--momentum 2", "--momentum"},
                      FlagCase{"--gamma 0", "--gamma"}, FlagCase{"--limit-train -1", "--limit-train"},
                      FlagCase{"--metrics /nonexistent-dir/m.jsonl", "--metrics"}),
    [](const ::testing::TestParamInfo<FlagCase>& i) {
      std::string n;
      for (const char* p = i.param.flags; *p; ++p) n += std::isalnum(uint8_t(*p)) ? *p : '_';
      return n + "_" + std::to_string(i.index);
    });

TEST_F(Cli, RealRangeMessageIsReadable) {
  expect_one_line_error(run(train_args("--lr -1")), {"--lr", "expected a finite number in (0, 1000], found -1"});
}

// D11: a value quoted in an error is cut to about 60 characters ("... (5000 bytes)"), as Python's
// are (the same library checks); --init and --on-nonfinite echoed 5000 bytes whole before the fix.
TEST_F(Cli, QuotedFlagValuesAreCut) {
  const std::string value(5000, 'q');
  for (const char* flag : {"--optimizer", "--schedule", "--init", "--on-nonfinite"}) {
    const Result r = run(train_args(std::string(flag) + " " + value));
    expect_one_line_error(r, {flag, "qqq... (5000 bytes)"});
    EXPECT_LT(r.err.size(), 400u) << flag;
  }
}

// Errors found by the flag parser (CLI11) follow the same one-line "ember: error: ..." contract.
TEST_F(Cli, ParseErrorsAreOneErrorLine) {
  const std::string base = "train --data " + quote(data_) + " --model mnist-mlp ";
  expect_one_line_error(run(base + "--batch-size abc"), {"--batch-size", "abc"});
  expect_one_line_error(run(base + "--nosuch-flag 1"), {"--nosuch-flag"});
  expect_one_line_error(run("eval --data " + quote(data_) + " --model mnist-mlp"), {"--weights"});
}

TEST_F(Cli, MetricsUnwritableFailsBeforeLoadingData) {  // bad data too: the metrics path wins
  fs::remove(data_ / kTrainImg);
  expect_one_line_error(run(train_args("--metrics /nonexistent-dir/m.jsonl")),
                        {"--metrics", "/nonexistent-dir/m.jsonl", "No such file or directory"});
}

bool cpu_has(const std::string& flag) {
  const std::string info = read_text("/proc/cpuinfo");
  return std::regex_search(info, std::regex("\\bflags\\s*:.*\\b" + flag + "\\b"));
}

TEST_F(Cli, IsaTheCpuLacks) {
  std::string missing;
  if (!cpu_has("avx512f") || !cpu_has("avx512bw") || !cpu_has("avx512vl") || !cpu_has("avx512dq"))
    missing = "avx512";
  else if (!cpu_has("avx2") || !cpu_has("fma"))
    missing = "avx2";
  if (missing.empty()) GTEST_SKIP() << "this CPU has every kernel set (avx2 and avx512): nothing to reject";
  expect_one_line_error(run(train_args("--isa " + missing)), {"--isa", missing});
  expect_one_line_error(run(train_args(""), "EMBER_ISA=" + missing), {"EMBER_ISA", missing});
}

TEST_F(Cli, EmberIsaEnvScalar) {
  Result info = run("info", "EMBER_ISA=scalar");
  EXPECT_EQ(info.code, 0) << info.err;
  EXPECT_NE(info.out.find("chosen kernel set: scalar"), std::string::npos) << info.out;
  Result r = run(train_args("--limit-train 64"), "EMBER_ISA=scalar");
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("isa scalar"), std::string::npos) << r.out;
}

// Issue 37: bf16 without AVX512_BF16 ran slower than fp32 and said nothing. Every command that
// builds a bf16 plan says so in one line on stderr where the kernel set emulates bf16 (avx2 and
// scalar always; avx512 without AVX512_BF16), and nothing where the products are native.
TEST_F(Cli, EmulatedBf16IsNamedInOneLine) {
  const std::string note = "bf16 is emulated on this CPU";
  const auto count = [&](const std::string& s) {
    size_t n = 0;
    for (size_t at = s.find(note); at != std::string::npos; at = s.find(note, at + 1)) ++n;
    return n;
  };
  for (const std::string isa : {"scalar", "avx2"}) {
    if (isa == "avx2" && !cpu_has("avx2")) continue;
    const Result r = run(train_args("--limit-train 64 --precision bf16 --isa " + isa));
    ASSERT_EQ(r.code, 0) << r.out << r.err;
    EXPECT_EQ(count(r.err), 1u) << isa << ": " << r.err;
    EXPECT_NE(r.err.find("kernel set " + isa), std::string::npos) << r.err;
    EXPECT_EQ(count(run(train_args("--limit-train 64 --isa " + isa)).err), 0u) << "fp32 is not emulated";
    const Result b = run("bench --workloads cnn-infer-b1 --samples 64 --precision fp32,bf16 --isa " + isa);
    ASSERT_EQ(b.code, 0) << b.out << b.err;
    EXPECT_EQ(count(b.err), 1u) << b.err;
  }
  if (cpu_has("avx512_bf16") && cpu_has("avx512f") && cpu_has("avx512bw") && cpu_has("avx512vl") && cpu_has("avx512dq")) {
    const Result r = run(train_args("--limit-train 64 --precision bf16 --isa avx512"));
    ASSERT_EQ(r.code, 0) << r.out << r.err;
    EXPECT_EQ(count(r.err), 0u) << "native bf16 is not emulated: " << r.err;
  }
}

// --layout (issue 41): a bad name is one line naming the flag; `ember info --model M --layout nhwc`
// lists each unit's layouts and marks the reorders; train and bench run a channel-last plan.
TEST_F(Cli, LayoutFlag) {
  expect_one_line_error(run(train_args("--limit-train 64 --layout nwhc")), {"--layout", "nwhc"});
  const Result i = run("info --model convnext-atto --layout nhwc --batch-size 2");
  ASSERT_EQ(i.code, 0) << i.err;
  EXPECT_NE(i.out.find("reorder (0)                        nchw -> nhwc  (reorder)"), std::string::npos) << i.out;
  EXPECT_NE(i.out.find("layernorm2d (2)                    nhwc -> nhwc"), std::string::npos) << i.out;
  EXPECT_EQ(run("info --model convnext-atto --batch-size 2").out.find("(reorder)"), std::string::npos);
  const Result t = run(train_args("--limit-train 64 --layout nhwc"));
  EXPECT_EQ(t.code, 0) << t.err;
  const Result b = run("bench --workloads cnn-infer-b1 --layout nhwc --threads 1");
  EXPECT_EQ(b.code, 0) << b.err;
}

// --denormals (issue 55): a bad mode is one line naming the flag, in train, eval and bench; both
// modes train and bench; `ember info` names the mode; keep and flush train the seed CNN on this
// data to the same printed accuracy (only values below 2^-126 differ).
TEST_F(Cli, DenormalsFlag) {
  expect_one_line_error(run(train_args("--limit-train 64 --denormals ftz")), {"--denormals", "expected flush or keep", "ftz"});
  expect_one_line_error(run("bench --workloads cnn-infer-b1 --denormals off"), {"--denormals", "off"});
  const Result keep = run(train_args("--limit-train 640 --denormals keep"));
  ASSERT_EQ(keep.code, 0) << keep.err;
  const Result flush = run(train_args("--limit-train 640 --denormals flush"));
  ASSERT_EQ(flush.code, 0) << flush.err;
  auto acc = [](const std::string& out) { return out.substr(out.rfind("final test accuracy")).substr(0, 27); };
  EXPECT_EQ(acc(keep.out), acc(flush.out)) << keep.out << flush.out;
  const Result b = run("bench --json --workloads cnn-train-1t --samples 640 --warmup-samples 640 --denormals keep --threads 1");
  EXPECT_EQ(b.code, 0) << b.err;
  EXPECT_NE(b.out.find("after 640 warm-up samples"), std::string::npos) << b.out;
  expect_one_line_error(run("bench --workloads cnn-train-1t --warmup-samples -2"), {"--warmup-samples", "-2"});
  const Result i = run("info");
  EXPECT_NE(i.out.find("denormals: flush"), std::string::npos) << i.out;
}

// ---------------------------------------------------------------------------------------------
// Weights: missing, truncated, garbage header length, a different model's weights.

TEST_F(Cli, EmberIsaEnvBogus) {
  expect_one_line_error(run(train_args(""), "EMBER_ISA=bogus"), {"EMBER_ISA", "bogus"});
}

TEST_F(Cli, EvalWeightsMissing) {
  const fs::path w = tmp_ / "none.safetensors";
  expect_one_line_error(run("eval --data " + quote(data_) + " --model mnist-mlp --weights " + quote(w)),
                        {w.string(), "cannot open"});
}

TEST_F(Cli, EvalWeightsBroken) {
  const fs::path w = trained_weights();
  const Bytes good = read_bytes(w);
  ASSERT_GT(good.size(), 1000u);
  const fs::path bad = tmp_ / "bad.safetensors";
  auto eval = [&] { return run("eval --data " + quote(data_) + " --model mnist-mlp --weights " + quote(bad)); };

  Bytes b(good.begin(), good.begin() + good.size() / 2);  // data cut in half
  write_bytes(bad, b);
  expect_one_line_error(eval(), {bad.string(), "data_offsets"});

  write_bytes(bad, Bytes(good.begin(), good.begin() + 5));  // shorter than the length field
  expect_one_line_error(eval(), {bad.string(), "header length"});

  b = good;  // header cut: length field larger than the file
  b.resize(40);
  write_bytes(bad, b);
  expect_one_line_error(eval(), {bad.string(), "header length"});

  b = good;  // garbage header length
  for (int i = 0; i < 8; ++i) b[i] = 0xff;
  write_bytes(bad, b);
  expect_one_line_error(eval(), {bad.string(), "header length"});

  b = good;  // garbage header JSON
  b[8] = '#';
  write_bytes(bad, b);
  expect_one_line_error(eval(), {bad.string(), "header"});

  write_bytes(bad, {});  // empty file
  expect_one_line_error(eval(), {bad.string()});

  fs::remove(bad);
  fs::create_directory(bad);  // a directory
  expect_one_line_error(eval(), {bad.string()});
}

TEST_F(Cli, EvalWeightsOfAnotherModel) {
  const fs::path w = trained_weights();
  // The weights name their model (mnist-mlp): a --model that differs is named with it.
  expect_one_line_error(run("eval --data " + quote(data_) + " --model mnist-cnn --weights " + quote(w)),
                        {w.string(), "--model", "mnist-cnn", "mnist-mlp"});
  const fs::path m = tmp_ / "mlp64.json";
  write_text(m, R"({"layers": [{"type": "flatten"}, {"type": "linear", "out_features": 64},
                               {"type": "relu"}, {"type": "linear", "out_features": 10}]})");
  expect_one_line_error(run("eval --data " + quote(data_) + " --model " + quote(m) + " --weights " + quote(w)),
                        {w.string(), "mlp64.json", "mnist-mlp"});
}

// A PyTorch state dict of model m in a safetensors file without ember's metadata (as torchvision's
// saved by safetensors.torch): m's parameter names and shapes, num_batches_tracked I64 as torch
// keeps it, every other tensor F32 (element k of the file's floats: 0.05 sin k; running_var 1).
void write_state_dict(const fs::path& p, const ember::Model& m) {
  nlohmann::json h = {{"__metadata__", {{"format", "pt"}}}};
  Bytes data;
  auto put = [&](const void* v, size_t n) { data.insert(data.end(), (const uint8_t*)v, (const uint8_t*)v + n); };
  for (const ember::ParamInfo& q : ember::model_params(m)) {
    const bool count = q.name.ends_with(".num_batches_tracked"), var = q.name.ends_with(".running_var");
    const size_t begin = data.size();
    for (size_t k = 0; k < q.size; ++k) {
      const int64_t n = 3;
      const float v = var ? 1.0f : float(0.05 * std::sin(double(data.size() / 4)));
      count ? put(&n, 8) : put(&v, 4);
    }
    h[q.name] = {{"dtype", count ? "I64" : "F32"}, {"shape", q.shape}, {"data_offsets", {begin, data.size()}}};
  }
  const std::string text = h.dump();
  Bytes file;
  for (int i = 0; i < 8; ++i) file.push_back(uint8_t(uint64_t(text.size()) >> (8 * i)));
  file.insert(file.end(), text.begin(), text.end());
  file.insert(file.end(), data.begin(), data.end());
  write_bytes(p, file);
}

// The F32 values of tensor `name` in safetensors file p.
std::vector<float> tensor_values(const fs::path& p, const std::string& name) {
  const Bytes b = read_bytes(p);
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= uint64_t(b.at(size_t(i))) << (8 * i);
  const nlohmann::json h = nlohmann::json::parse(b.begin() + 8, b.begin() + 8 + long(n));
  const size_t at = 8 + n + h.at(name).at("data_offsets")[0].get<size_t>(), end = 8 + n + h.at(name).at("data_offsets")[1].get<size_t>();
  std::vector<float> v((end - at) / 4);
  std::memcpy(v.data(), b.data() + at, end - at);
  return v;
}

// torchvision's resnet18 for grey images (conv1 = Conv2d(1, 64, 7, 2, 3)), its state dict with no
// ember metadata: `train --model resnet18 --weights W` builds the built-in model for the data's
// input, as without --weights, then checks and loads W (on b049ce3 W was checked against the
// 3-channel default: "tensor 'conv1.weight'.shape: expected [64,3,7,7], found [64,1,7,7]"); eval
// likewise. A 3-channel state dict on grey data is named against the model built for the data.
TEST_F(Cli, TorchvisionResnetWeightsTakeTheDatasInput) {
  ember::Model m = ember::builtin_model("resnet18");
  m.in_c = 1;
  const fs::path grey = tmp_ / "grey.safetensors", rgb = tmp_ / "rgb.safetensors", out = tmp_ / "out.safetensors";
  write_state_dict(grey, m);
  const std::string args = "train --data " + quote(data_) + " --model resnet18 --epochs 1 --limit-train 16 --limit-test 8"
                           " --batch-size 8 --threads 1 --optimizer sgd --lr 1e-20 --quiet --weights ";
  const Result r = run(args + quote(grey) + " --save " + quote(out));
  ASSERT_EQ(r.code, 0) << r.cmd << "\n" << r.out << r.err;
  EXPECT_NE(r.err.find("set to the data's [1, 28, 28]"), std::string::npos) << r.err;
  const std::vector<float> given = tensor_values(grey, "conv1.weight"), saved = tensor_values(out, "conv1.weight");
  ASSERT_EQ(saved.size(), size_t(64 * 7 * 7));
  ASSERT_EQ(given.size(), saved.size());
  for (size_t i = 0; i < given.size(); ++i) ASSERT_NEAR(saved[i], given[i], 1e-6) << "conv1.weight[" << i << "]: not the file's";
  const Result e = run("eval --data " + quote(data_) + " --model resnet18 --limit-test 8 --threads 1 --weights " + quote(grey));
  EXPECT_EQ(e.code, 0) << e.cmd << "\n" << e.out << e.err;
  m.in_c = 3;
  write_state_dict(rgb, m);
  expect_one_line_error(run(args + quote(rgb)), {rgb.string(), "conv1.weight", "[64,1,7,7]", "[64,3,7,7]"});
}

// ---------------------------------------------------------------------------------------------
// Good paths.


TEST_F(Cli, TrainMetricsSaveThenEval) {
  const fs::path metrics = tmp_ / "m.jsonl", w = tmp_ / "w.safetensors";
  Result r = run("train --data " + quote(data_) + " --model mnist-mlp --epochs 2 --batch-size 32 --threads 1"
                 " --metrics " + quote(metrics) + " --save " + quote(w));
  ASSERT_EQ(r.code, 0) << r.cmd << "\n" << r.out << r.err;
  EXPECT_EQ(nonempty_lines(r.err).size(), 0u) << r.err;
  int epoch_lines = 0;
  for (const auto& l : nonempty_lines(r.out)) epoch_lines += l.rfind("epoch ", 0) == 0;
  EXPECT_EQ(epoch_lines, 2) << r.out;
  const double acc = final_accuracy(r.out, "final test accuracy ");
  EXPECT_GT(acc, 30.0) << r.out;

  const auto lines = nonempty_lines(read_text(metrics));
  ASSERT_EQ(lines.size(), 2u) << read_text(metrics);
  for (size_t i = 0; i < lines.size(); ++i) {
    SCOPED_TRACE(lines[i]);
    const nlohmann::json j = nlohmann::json::parse(lines[i]);
    ASSERT_TRUE(j.is_object());
    for (const char* k : {"epoch", "lr", "train_loss", "train_acc", "test_loss", "test_acc", "seconds", "samples_per_s"})
      ASSERT_TRUE(j.contains(k) && j[k].is_number()) << k;
    EXPECT_EQ(j["epoch"].get<int>(), int(i) + 1);
    for (const char* k : {"train_loss", "test_loss"}) {
      const double v = j[k].get<double>();
      EXPECT_TRUE(std::isfinite(v) && v >= 0 && v < 20) << k << " " << v;
    }
    for (const char* k : {"train_acc", "test_acc"}) {
      const double v = j[k].get<double>();
      EXPECT_TRUE(v >= 0 && v <= 1) << k << " " << v;
    }
    EXPECT_GT(j["lr"].get<double>(), 0);
    EXPECT_GE(j["seconds"].get<double>(), 0);
    EXPECT_LT(j["seconds"].get<double>(), 60);
    EXPECT_GT(j["samples_per_s"].get<double>(), 0);
    if (i + 1 == lines.size()) {
      EXPECT_GT(j["test_acc"].get<double>(), 0.3);
      EXPECT_NEAR(100 * j["test_acc"].get<double>(), acc, 0.006);
    }
  }

  // eval prints the same test accuracy (to the printed 0.01%) with the train run's batch and the default.
  for (const std::string batch : {" --batch-size 32", ""}) {
    Result e = run("eval --data " + quote(data_) + " --model mnist-mlp --threads 1 --weights " + quote(w) + batch);
    ASSERT_EQ(e.code, 0) << e.cmd << "\n" << e.out << e.err;
    EXPECT_NEAR(final_accuracy(e.out, "test accuracy "), acc, 1e-9) << e.out << r.out;
    EXPECT_NE(e.out.find("on 50 images"), std::string::npos) << e.out;
  }
}

TEST_F(Cli, PartialLastBatch) {
  const fs::path d = tmp_ / "odd";
  write_dataset(d, 203, 37);
  Result r = run("train --data " + quote(d) + " --model mnist-mlp --epochs 1 --batch-size 64 --threads 2");
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("203 train / 37 test"), std::string::npos) << r.out;
  const double acc = final_accuracy(r.out, "final test accuracy ");
  EXPECT_TRUE(acc >= 0 && acc <= 100) << r.out;
}

TEST_F(Cli, DeterministicWeights) {
  auto train = [&](const std::string& name, int seed) {
    const fs::path w = tmp_ / name;
    Result r = run("train --data " + quote(data_) + " --model mnist-mlp --epochs 1 --batch-size 16 --threads 2"
                   " --seed " + std::to_string(seed) + " --save " + quote(w));
    EXPECT_EQ(r.code, 0) << r.out << r.err;
    return read_bytes(w);
  };
  const Bytes a = train("a.safetensors", 7), b = train("b.safetensors", 7), c = train("c.safetensors", 8);
  ASSERT_GT(a.size(), 1000u);
  EXPECT_TRUE(a == b) << "same seed, same threads: weights files differ";
  EXPECT_EQ(a.size(), c.size());
  EXPECT_FALSE(a == c) << "a different seed gave identical weights";
}

TEST_F(Cli, TrainHelpShowsDefaults) {
  Result r = run("train --help");
  EXPECT_EQ(r.code, 0) << r.err;
  for (const char* s : {"--batch-size", "64", "--epochs", "--lr", "--optimizer", "adam", "--isa", "--metrics"})
    EXPECT_NE(r.out.find(s), std::string::npos) << s << " not in:\n" << r.out;
}

TEST_F(Cli, NoSubcommandFails) {
  Result r = run("");
  EXPECT_NE(r.code, 0);
  EXPECT_LT(r.code, 124);
}

TEST_F(Cli, InfoNamesKernelSet) {
  Result r = run("info", "env -u EMBER_ISA");  // the best set, even when the suite runs under EMBER_ISA
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(std::regex_search(r.out, std::regex("chosen kernel set: (scalar|avx2|avx512|amx)"))) << r.out;
  EXPECT_TRUE(std::regex_search(r.out, std::regex("bf16 matrix products: (amx_bf16|avx512_bf16|emulated)"))) << r.out;
  // The CPU probe's features, then one AMX line a later AMX issue reads (issue 56).
  std::smatch feats;
  ASSERT_TRUE(std::regex_search(r.out, feats, std::regex("\\ncpu features:( [a-z0-9.-]+)*\\n"))) << r.out;
  const bool tiles = feats.str().find(" amx-tile") != std::string::npos;
  EXPECT_TRUE(std::regex_search(r.out, std::regex(tiles ? "\\namx: tile( bf16)?( int8)? \\(OS permission: (granted|refused)"
                                                        : "\\namx: none \\(the CPU has no AMX tiles\\)\\n")))
      << r.out;
  const Result scalar = run("info", "EMBER_ISA=scalar");
  EXPECT_NE(scalar.out.find("bf16 matrix products: scalar reference"), std::string::npos) << scalar.out;
  // --kernels: one row per table entry, what each set runs (issue 38).
  const Result k = run("info --kernels");
  EXPECT_EQ(k.code, 0) << k.err;
  EXPECT_TRUE(std::regex_search(k.out, std::regex("\\n  conv_s1_pool_wgrad +scalar +(avx2|\\?) +(avx512|\\?) +(avx512|\\?)\\n"))) << k.out;
  EXPECT_TRUE(std::regex_search(k.out, std::regex("\\n  im2col +scalar +(reference|\\?) +(reference|\\?) +(reference|\\?)\\n"))) << k.out;
}

TEST_F(Cli, BenchJsonHasEveryField) {
  Result r = run("bench --json --data " + quote(data_) +
                 " --workloads cnn-train,cnn-infer-b1,sgemm-fc1-fwd --samples 128 --threads 1");
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  const auto doc = nlohmann::json::parse(r.out);
  EXPECT_GT(doc["machine"]["peak_gflops_1t"].get<double>(), 0.1);
  ASSERT_EQ(doc["workloads"].size(), 3u);
  for (const auto& w : doc["workloads"]) {
    for (const char* f : {"name", "what", "threads", "batch", "value", "unit", "samples_per_s", "gflops", "peak_pct"})
      EXPECT_TRUE(w.contains(f)) << f << " in " << w.dump();
    EXPECT_GT(w["value"].get<double>(), 0) << w.dump();
    EXPECT_GT(w["gflops"].get<double>(), 0) << w.dump();
    EXPECT_EQ(w["threads"].get<int>(), 1);
  }
  EXPECT_EQ(doc["workloads"][0]["unit"], "s/epoch");
  EXPECT_EQ(doc["workloads"][1]["batch"], 1);
}

// --precision fp32,bf16: each model workload in fp32 then bf16 (side by side); the GEMM rows once,
// under their own precision; the bf16 rows rated against the bf16 peak.
TEST_F(Cli, BenchRunsEachWorkloadInEachPrecision) {
  Result r = run("bench --json --data " + quote(data_) +
                 " --workloads cnn-infer-b64,sgemm-fc1-fwd,sbgemm-fc1-fwd --samples 128 --threads 1 --precision fp32,bf16");
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  const auto doc = nlohmann::json::parse(r.out);
  std::vector<std::string> got;
  for (const auto& w : doc["workloads"]) got.push_back(w["name"].get<std::string>() + "/" + w["precision"].get<std::string>());
  EXPECT_EQ(got, (std::vector<std::string>{"cnn-infer-b64/fp32", "cnn-infer-b64/bf16", "sgemm-fc1-fwd/fp32",
                                            "sbgemm-fc1-fwd/bf16"}));
  expect_one_line_error(run("bench --data " + quote(data_) + " --workloads cnn-train --precision fp16"),
                        {"--precision", "fp32 or bf16", "fp16"});
}

TEST_F(Cli, BenchBadFlags) {
  expect_one_line_error(run("bench --data " + quote(data_) + " --workloads cnn-train,nosuch"),
                        {"--workloads", "nosuch"});
  expect_one_line_error(run("bench --data " + quote(data_) + " --threads -1"), {"--threads"});
  expect_one_line_error(run("bench --data " + quote(data_) + " --samples 0"), {"--samples"});
}

TEST_F(Cli, JsonConvModelTrains) {
  const fs::path m = tmp_ / "conv.json";
  write_text(m, R"({"name": "tiny-cnn", "input": [1, 28, 28], "classes": 10,
    "layers": [{"type": "conv2d", "out_channels": 4, "kernel": 3, "padding": 1},
               {"type": "relu"}, {"type": "maxpool2d", "kernel": 2},
               {"type": "flatten"}, {"type": "linear", "out_features": 10}]})");
  Result r = run("train --data " + quote(data_) + " --model " + quote(m) + " --epochs 1 --batch-size 32 --threads 2");
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("tiny-cnn"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("final test accuracy"), std::string::npos) << r.out;
}

TEST_F(Cli, IsaScalarWorks) {
  Result r = run(train_args("--isa scalar --limit-train 64 --limit-test 20"));
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("isa scalar"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("64 train / 20 test"), std::string::npos) << r.out;
}

// Optional: the real data set, when it is installed.
TEST_F(Cli, RealMnistIfPresent) {
  std::vector<fs::path> dirs = {fs::path(EMBER_SOURCE_DIR) / "../shared/data/mnist", "/usr/share/datasets/fashion-mnist"};
  for (const auto& d : dirs) {
    std::error_code ec;
    if (!fs::exists(d / kTestImg, ec) && !fs::exists(d / (std::string(kTestImg) + ".gz"), ec)) continue;
    Result r = run("train --data " + quote(d) + " --model mnist-mlp --epochs 1 --threads 2 --limit-train 2000 --limit-test 500");
    EXPECT_EQ(r.code, 0) << r.out << r.err;
    EXPECT_GT(final_accuracy(r.out, "final test accuracy "), 30.0) << r.out;
    return;
  }
  GTEST_SKIP() << "no MNIST-format data set in ../shared/data/mnist or /usr/share/datasets/fashion-mnist";
}

}  // namespace

// --save-dtype bf16 writes every tensor as BF16 (half the bytes of fp32's file), which ember
// evaluates; an unknown dtype is refused before any training.
TEST_F(Cli, SaveDtypeBf16HalvesTheWeightsFile) {
  const fs::path w32 = tmp_ / "w32.safetensors", w16 = tmp_ / "w16.safetensors";
  Result r = run(train_args("--save " + quote(w32.string())));
  ASSERT_EQ(r.code, 0) << r.err;
  r = run(train_args("--save " + quote(w16.string()) + " --save-dtype bf16"));
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string head = read_text(w16).substr(0, 400);
  EXPECT_NE(head.find("\"BF16\""), std::string::npos) << head;
  EXPECT_EQ(head.find("\"F32\""), std::string::npos) << head;
  EXPECT_LT(fs::file_size(w16), fs::file_size(w32) * 55 / 100);
  r = run("eval --data " + quote(data_.string()) + " --weights " + quote(w16.string()));
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("test accuracy"), std::string::npos);
  expect_one_line_error(run(train_args("--save " + quote((tmp_ / "x.safetensors").string()) + " --save-dtype fp16")),
                        {"--save-dtype", "fp16"});
  EXPECT_FALSE(fs::exists(tmp_ / "x.safetensors"));
}
