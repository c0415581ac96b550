// The ONNX commands end to end: `ember export` then `ember eval --model FILE.onnx` gives the
// safetensors weights' accuracy and loss; `ember bench --model FILE.onnx` times it; hostile paths
// and bytes (FIFOs, device links, truncated and garbage files, wrong outputs) get one-line errors.
#include <sys/stat.h>

#include "cli/cli_util.h"

namespace {

class Onnx : public Cli {
 protected:
  fs::path exported(const fs::path& weights) {
    const fs::path out = tmp_ / "model.onnx";
    const Result r = run("export " + quote(weights.string()) + " -o " + quote(out.string()));
    EXPECT_EQ(r.code, 0) << r.cmd << "\n" << r.out << r.err;
    return out;
  }
  std::string eval_line(const std::string& what) {
    const Result r = run("eval --data " + quote(data_.string()) + " --threads 1 " + what);
    EXPECT_EQ(r.code, 0) << r.cmd << "\n" << r.out << r.err;
    const size_t p = r.out.find("test accuracy");
    return p == std::string::npos ? "" : r.out.substr(p);
  }
};

TEST_F(Onnx, ExportedModelEvaluatesAsItsWeights) {
  const fs::path w = trained_weights();
  const fs::path m = exported(w);
  ASSERT_TRUE(fs::is_regular_file(m));
  const std::string from_weights = eval_line("--weights " + quote(w.string()));
  const std::string from_onnx = eval_line("--model " + quote(m.string()));
  ASSERT_NE(from_weights, "");
  EXPECT_EQ(from_onnx, from_weights);  // "test accuracy X% (loss Y) on N images": the same numbers
}

// Training an imported graph starts from the file's weights: at a negligible rate, its first
// epoch's test accuracy is the file's own (from fresh weights it would be near chance).
TEST_F(Onnx, TrainingAnOnnxModelStartsFromItsWeights) {
  const fs::path m = exported(trained_weights());
  const std::string own = eval_line("--model " + quote(m.string()));
  const Result r = run("train --data " + quote(data_.string()) + " --model " + quote(m.string()) +
                       " --epochs 1 --batch-size 32 --threads 1 --optimizer sgd --lr 1e-12 --l2 0");
  ASSERT_EQ(r.code, 0) << r.cmd << "\n" << r.out << r.err;
  const double acc = final_accuracy(r.out, "final test accuracy ");
  ASSERT_GT(acc, 0) << r.out;
  EXPECT_NEAR(acc, std::atof(own.c_str() + std::string("test accuracy ").size()), 1e-9) << own << "\n" << r.out;
}

TEST_F(Onnx, BenchTimesTheOnnxModel) {
  const fs::path m = exported(trained_weights());
  const Result r = run("bench --json --model " + quote(m.string()) + " --batch-size 2 --threads 1");
  ASSERT_EQ(r.code, 0) << r.cmd << "\n" << r.out << r.err;
  const auto doc = nlohmann::json::parse(r.out);
  ASSERT_EQ(doc["workloads"].size(), 1u);
  EXPECT_EQ(doc["workloads"][0]["name"], "model-infer-b2");
  EXPECT_GT(doc["workloads"][0]["value"].get<double>(), 0);
  EXPECT_GT(doc["workloads"][0]["gflops"].get<double>(), 0);
}

TEST_F(Onnx, ExportRefusesOutputsThatAreNotNewOnnxFiles) {
  const fs::path w = trained_weights();
  const fs::path fifo = tmp_ / "fifo.onnx";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  expect_one_line_error(run("export " + quote(w.string()) + " -o " + quote(fifo.string())), {"fifo.onnx"});
  struct stat st;
  ASSERT_EQ(::lstat(fifo.c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode)) << "the FIFO was replaced";
  expect_one_line_error(run("export " + quote(w.string()) + " -o " + quote((tmp_ / "m.txt").string())), {"--output", ".onnx"});
  expect_one_line_error(run("export " + quote(w.string()) + " -o /dev/null"), {"--output"});
  EXPECT_TRUE(fs::is_character_file("/dev/null"));
  expect_one_line_error(run("export " + quote((tmp_ / "missing.safetensors").string()) + " -o " + quote((tmp_ / "m.onnx").string())),
                        {"missing.safetensors"});
  EXPECT_FALSE(fs::exists(tmp_ / "m.onnx"));
}

TEST_F(Onnx, HostileOnnxInputsGetOneLineErrors) {
  const fs::path m = exported(trained_weights());
  const Bytes good = read_bytes(m);
  ASSERT_GT(good.size(), 1000u);
  const fs::path fifo = tmp_ / "fifo.onnx", dev = tmp_ / "zero.onnx", cut = tmp_ / "cut.onnx", junk = tmp_ / "junk.onnx",
                 empty = tmp_ / "empty.onnx";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  fs::create_symlink("/dev/zero", dev);
  write_bytes(cut, Bytes(good.begin(), good.begin() + std::ptrdiff_t(good.size() / 2)));
  Bytes noise(5000);
  for (size_t i = 0; i < noise.size(); ++i) noise[i] = uint8_t((i * 2654435761u) >> 13);
  write_bytes(junk, noise);
  write_bytes(empty, {});
  for (const fs::path& p : {fifo, dev, cut, junk, empty, tmp_ / "absent.onnx"}) {
    expect_one_line_error(run("eval --data " + quote(data_.string()) + " --model " + quote(p.string())), {p.filename().string()});
    expect_one_line_error(run("bench --model " + quote(p.string()) + " --batch-size 1"), {p.filename().string()});
  }
}

TEST_F(Onnx, EvalNeedsWeightsUnlessTheModelIsOnnx) {
  expect_one_line_error(run("eval --data " + quote(data_.string()) + " --model mnist-mlp"), {"--weights"});
}

}  // namespace
