// The int8 commands end to end (docs/int8.md): `ember quantize` writes a smaller quantized file;
// `ember eval` of it, of the fp32 weights with --precision int8 (the same calibration), and of its
// QDQ export (`ember export Wq`, then `eval --model q.onnx`) give the same numbers; `ember info
// --weights Wq` shows the plan; `ember profile` of an int8 plan gives the fp32 profile's table,
// JSON and trace; misuse gets one-line errors and leaves files alone.
#include <map>
#include <sstream>

#include "cli/cli_util.h"

namespace {

class Int8Cli : public Cli {
 protected:
  fs::path quantized(const fs::path& w, const std::string& name = "wq.safetensors") {
    const fs::path out = tmp_ / name;
    const Result r = run("quantize " + quote(w.string()) + " --data " + quote(data_.string()) +
                         " --calib-samples 64 --threads 1 -o " + quote(out.string()));
    EXPECT_EQ(r.code, 0) << r.cmd << "\n" << r.out << r.err;
    return out;
  }
  // `ember eval ... WHAT`: its line from "test accuracy" on, and the whole line.
  std::string eval_numbers(const std::string& what, std::string* line = nullptr) {
    const Result r = run("eval --data " + quote(data_.string()) + " --threads 1 " + what);
    EXPECT_EQ(r.code, 0) << r.cmd << "\n" << r.out << r.err;
    if (line) *line = r.out;
    const size_t p = r.out.find("test accuracy");
    return p == std::string::npos ? "" : r.out.substr(p);
  }
};

TEST_F(Int8Cli, QuantizeEvalOnTheFlyAndQdqExportAgree) {
  const fs::path w = trained_weights();
  const fs::path wq = quantized(w);
  ASSERT_TRUE(fs::is_regular_file(wq));
  EXPECT_GE(double(fs::file_size(w)), 3.5 * double(fs::file_size(wq)));
  std::string line;
  const std::string stored = eval_numbers("--weights " + quote(wq.string()), &line);
  ASSERT_NE(stored, "");
  EXPECT_NE(line.find("(int8, "), std::string::npos) << line;
  // --precision int8 calibrates as `ember quantize` did (the same samples): the same model.
  EXPECT_EQ(eval_numbers("--weights " + quote(w.string()) + " --precision int8 --calib-samples 64"), stored);
  // The QDQ export imports back as the same int8 model.
  const fs::path onnx = tmp_ / "q.onnx";
  const Result e = run("export " + quote(wq.string()) + " -o " + quote(onnx.string()));
  ASSERT_EQ(e.code, 0) << e.cmd << "\n" << e.out << e.err;
  EXPECT_EQ(eval_numbers("--model " + quote(onnx.string()), &line), stored);
  EXPECT_NE(line.find("QDQ ONNX"), std::string::npos) << line;
  // --precision fp32 runs the file's fp32 graph (weights dequantized, activations not rounded).
  EXPECT_NE(eval_numbers("--model " + quote(onnx.string()) + " --precision fp32", &line), "");
  EXPECT_EQ(line.find("int8"), std::string::npos) << line;
  // int8 is close to fp32 on this small set (a few of 50 images may flip).
  const double a8 = final_accuracy(stored, "test accuracy "), a32 = final_accuracy(eval_numbers("--weights " + quote(w.string())), "test accuracy ");
  EXPECT_NEAR(a8, a32, 6.0);
}

// `ember profile --weights Wq` and `--precision int8` of fp32 weights: the table of a training
// profile (its header and columns), one forward row per unit of the int8 plan with the int8 ones
// marked, rows covering the step, spans inside their steps; a quantized file profiled in another
// precision is refused.
TEST_F(Int8Cli, ProfileOfTheInt8PlanIsTheFp32ProfilesTable) {
  const fs::path w = trained_weights(), wq = quantized(w), pj = tmp_ / "p.json", trace = tmp_ / "t.json";
  const std::string args = "profile --data " + quote(data_.string()) + " --batch-size 16 --threads 2 --limit-samples 96 ";
  const Result fp32 = run(args + "--weights " + quote(w.string()));
  ASSERT_EQ(fp32.code, 0) << fp32.cmd << "\n" << fp32.out << fp32.err;
  auto header = [](const std::string& out) {  // the column names, spaces collapsed (the first is as wide as the names)
    const size_t at = out.find("\nlayer ");
    if (at == std::string::npos) return std::string("(none)");
    std::istringstream line(out.substr(at, out.find('\n', at + 1) - at));
    std::string word, words;
    while (line >> word) words += word + " ";
    return words;
  };
  for (const std::string& weights : {"--weights " + quote(wq.string()), "--weights " + quote(w.string()) + " --precision int8"}) {
    const Result r = run(args + weights + " --json " + quote(pj.string()) + " --trace " + quote(trace.string()));
    ASSERT_EQ(r.code, 0) << r.cmd << "\n" << r.out << r.err;
    EXPECT_NE(r.out.find("6 steps of batch 16 (96 samples), 2 threads"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("precision int8"), std::string::npos) << r.out;
    EXPECT_EQ(header(r.out), header(fp32.out)) << r.out;
    EXPECT_NE(r.out.find("profiler cost:"), std::string::npos) << r.out;
    const nlohmann::json p = nlohmann::json::parse(read_text(pj));
    EXPECT_EQ(p["precision"], "int8");
    EXPECT_EQ(p["steps"].get<int>(), 6);
    int int8_rows = 0, forward_rows = 0;
    double pct = 0;
    for (const nlohmann::json& row : p["rows"]) {
      pct += row["pct_step"].get<double>();
      if (row["phase"] == "forward") {
        ++forward_rows;
        EXPECT_EQ(row["calls"].get<int>(), 6) << row.dump();
      }
      if (row["precision"] == "int8") {
        ++int8_rows;
        EXPECT_GT(row["gflops"].get<double>(), 0) << row.dump();
      }
      EXPECT_NE(row["phase"], "backward") << row.dump();
    }
    EXPECT_NEAR(pct, 100.0, 0.5) << "rows must cover the step exactly";
    EXPECT_GE(int8_rows, 2) << p.dump(1);           // mnist-mlp's Linear layers
    EXPECT_GE(forward_rows, int8_rows + 1) << p.dump(1);  // and the input's quantize
    // Every span of the main thread lies inside the step span of its number.
    std::map<int, std::pair<double, double>> steps;
    const nlohmann::json t = nlohmann::json::parse(read_text(trace));
    for (const nlohmann::json& e : t["traceEvents"])
      if (e["ph"] == "X" && e["cat"] == "step") steps[e["args"]["step"].get<int>()] = {e["ts"], e["ts"].get<double>() + e["dur"].get<double>()};
    ASSERT_EQ(steps.size(), 6u);
    for (const nlohmann::json& e : t["traceEvents"]) {
      if (e["ph"] != "X" || e["tid"] != 0 || e["cat"] == "step") continue;
      const auto& s = steps[e["args"]["step"].get<int>()];
      EXPECT_GE(e["ts"].get<double>(), s.first - 1e-3) << e.dump();
      EXPECT_LE(e["ts"].get<double>() + e["dur"].get<double>(), s.second + 1e-3) << e.dump();
    }
  }
  expect_one_line_error(run(args + "--weights " + quote(wq.string()) + " --precision bf16"), {"--precision bf16", "int8"});
  // Flags of a training run do nothing to an int8 forward, nor a model or seed to a quantized file: refused.
  expect_one_line_error(run(args + "--weights " + quote(wq.string()) + " --epochs 2"), {"--epochs", "int8"});
  expect_one_line_error(run(args + "--weights " + quote(wq.string()) + " --seed 3"), {"--seed", "quantized"});
}

// `ember bench --model M --weights W,Wq`: a row per file, the quantized one timed by its int8 plan
// (precision int8), each naming its file; a file of another model, or with an ONNX --model, is
// refused (the weights were ignored before).
TEST_F(Int8Cli, BenchModelTimesEachWeightFile) {
  const fs::path w = trained_weights(), wq = quantized(w);
  const Result r = run("bench --json --model mnist-mlp --batch-size 4 --threads 1 --weights " + quote(w.string()) + "," +
                       quote(wq.string()));
  ASSERT_EQ(r.code, 0) << r.cmd << "\n" << r.out << r.err;
  const nlohmann::json doc = nlohmann::json::parse(r.out);
  ASSERT_EQ(doc["workloads"].size(), 2u) << r.out;
  EXPECT_EQ(doc["workloads"][0]["precision"], "fp32");
  EXPECT_EQ(doc["workloads"][0]["weights"], w.string());
  EXPECT_EQ(doc["workloads"][1]["precision"], "int8");
  EXPECT_EQ(doc["workloads"][1]["weights"], wq.string());
  for (const auto& row : doc["workloads"]) {
    EXPECT_EQ(row["name"], "model-infer-b4");
    EXPECT_GT(row["value"].get<double>(), 0) << row.dump();
  }
  expect_one_line_error(run("bench --model mnist-cnn --batch-size 1 --weights " + quote(wq.string())),
                        {"--weights", "mnist-mlp", "mnist-cnn"});
  // A quantized file's int8 row runs beside fp32 rows: with bf16 alone it would be dropped, so it is refused.
  expect_one_line_error(run("bench --model mnist-mlp --batch-size 1 --precision bf16 --weights " + quote(wq.string())),
                        {"--weights", "quantized", "fp32"});
}

TEST_F(Int8Cli, InfoShowsScalesAndThePlan) {
  const fs::path wq = quantized(trained_weights());
  const Result r = run("info --weights " + quote(wq.string()));
  ASSERT_EQ(r.code, 0) << r.cmd << "\n" << r.out << r.err;
  EXPECT_NE(r.out.find("calibration minmax on 64 samples"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("int8 plan ("), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("int8 path: "), std::string::npos) << r.out;
  // `ember info --model M`: the plan M would run once quantized, the quantize steps around its fp32 ops.
  const Result m = run("info --model convnext-fashion");
  ASSERT_EQ(m.code, 0) << m.cmd << "\n" << m.out << m.err;
  EXPECT_NE(m.out.find("int8 plan once quantized"), std::string::npos) << m.out;
  EXPECT_NE(m.out.find("fp32 layers[2] (layernorm \"stem.1\")\n  quantize stem.1\n  int8 layers[3]"), std::string::npos) << m.out;
}

TEST_F(Int8Cli, SevenBitWeights) {
  const fs::path w = trained_weights();
  const fs::path out = tmp_ / "w7.safetensors";
  const Result r = run("quantize " + quote(w.string()) + " --data " + quote(data_.string()) +
                       " --calib-samples 64 --threads 1 --weight-bits 7 -o " + quote(out.string()));
  ASSERT_EQ(r.code, 0) << r.cmd << "\n" << r.out << r.err;
  const Result i = run("info --weights " + quote(out.string()), "EMBER_ISA=avx2");
  ASSERT_EQ(i.code, 0) << i.cmd << "\n" << i.out << i.err;
  EXPECT_NE(i.out.find("7-bit weights"), std::string::npos) << i.out;
  EXPECT_NE(i.out.find("VPMADDUBSW"), std::string::npos) << i.out;  // the avx2 plan takes its 7-bit GEMM
  std::string line;
  EXPECT_NE(eval_numbers("--weights " + quote(out.string()), &line), "");
  expect_one_line_error(run("quantize " + quote(w.string()) + " --data " + quote(data_.string()) + " --weight-bits 6 -o " +
                            quote((tmp_ / "w6.safetensors").string())),
                        {"--weight-bits"});
  EXPECT_FALSE(fs::exists(tmp_ / "w6.safetensors"));
}

TEST_F(Int8Cli, MisuseIsRefusedInOneLineAndFilesStay) {
  const fs::path w = trained_weights();
  const fs::path wq = quantized(w);
  const std::string before = read_text(w), qbefore = read_text(wq);
  // quantizing a quantized file; the output over its own input; a bad method
  expect_one_line_error(run("quantize " + quote(wq.string()) + " --data " + quote(data_.string()) + " -o " +
                            quote((tmp_ / "again.safetensors").string())),
                        {"already quantized"});
  expect_one_line_error(run("quantize " + quote(w.string()) + " --data " + quote(data_.string()) + " -o " + quote(w.string())),
                        {"--output"});
  expect_one_line_error(run("quantize " + quote(w.string()) + " --data " + quote(data_.string()) + " --calib kl -o " +
                            quote((tmp_ / "x.safetensors").string())),
                        {"--calib"});
  expect_one_line_error(run("eval --data " + quote(data_.string()) + " --precision int8"), {"--precision int8"});
  EXPECT_EQ(read_text(w), before);
  EXPECT_EQ(read_text(wq), qbefore);
  EXPECT_FALSE(fs::exists(tmp_ / "again.safetensors"));
  EXPECT_FALSE(fs::exists(tmp_ / "x.safetensors"));
}

// Training from a quantized file: refused in one line saying what the file is and what training
// needs (not that its activation scales are parameters the model lacks).
TEST_F(Int8Cli, TrainingFromAQuantizedFileSaysItNeedsFp32Weights) {
  const fs::path wq = quantized(trained_weights());
  const std::string before = read_text(wq);
  const std::string base = "train --data " + quote(data_.string()) + " --epochs 1 --batch-size 16 --quiet --weights " + quote(wq.string());
  expect_one_line_error(run(base), {"wq.safetensors", "is a quantized (int8) file", "fp32 weights"});
  expect_one_line_error(run(base + " --qat"), {"is a quantized (int8) file", "fp32 weights"});
  EXPECT_EQ(read_text(wq), before);
}

// `ember train --qat`: fine-tunes fp32 weights with fake quantization; stopped after its first
// epoch and resumed, it ends with the bytes of a run never stopped; `ember quantize` of its file
// keeps the learnt ranges (and says so), its int8 eval is near its fake-quantized one; misuse of
// the QAT flags is refused in one line.
TEST_F(Int8Cli, QatTrainsResumesBitIdenticallyAndQuantizeKeepsItsRanges) {
  const fs::path w = trained_weights();
  const fs::path ref = tmp_ / "qat.safetensors", out = tmp_ / "resumed.safetensors";
  const std::string dir = (tmp_ / "ck").string();
  const std::string base = "train --data " + quote(data_.string()) + " --weights " + quote(w.string()) +
                           " --qat --qat-freeze-after 15 --qat-calib-samples 64 --batch-size 16 --threads 2 --quiet --lr 1e-4";
  const Result full = run(base + " --epochs 2 --save " + quote(ref.string()));
  ASSERT_EQ(full.code, 0) << full.cmd << "\n" << full.out << full.err;
  const Result first = run(base + " --epochs 1 --checkpoint-every 4 --checkpoint-dir " + quote(dir));
  ASSERT_EQ(first.code, 0) << first.err;
  const Result fin = run("train --resume " + quote(dir) + " --epochs 2 --save " + quote(out.string()));
  ASSERT_EQ(fin.code, 0) << fin.out << fin.err;
  EXPECT_EQ(read_text(out), read_text(ref)) << "the resumed QAT run differs";
  EXPECT_NE(read_text(ref).find(".fake_quant.range"), std::string::npos) << "the saved file has no learnt ranges";
  const fs::path wq = tmp_ / "qatq.safetensors";
  const Result q = run("quantize " + quote(ref.string()) + " --data " + quote(data_.string()) + " --calib-samples 64 -o " + quote(wq.string()));
  ASSERT_EQ(q.code, 0) << q.out << q.err;
  EXPECT_NE(q.out.find("ranges learnt by QAT"), std::string::npos) << q.out;
  const Result info = run("info --weights " + quote(wq.string()));
  EXPECT_NE(info.out.find("learnt by quantization-aware training"), std::string::npos) << info.out;
  const double a8 = final_accuracy(eval_numbers("--weights " + quote(wq.string())), "test accuracy ");
  const double aq = final_accuracy(eval_numbers("--weights " + quote(ref.string())), "test accuracy ");
  EXPECT_NEAR(a8, aq, 4.0) << "int8 against the fake-quantized model (50 images)";
  const std::string wbefore = read_text(w);
  const std::string plain = "train --data " + quote(data_.string()) + " --batch-size 16 --quiet --epochs 1 ";
  expect_one_line_error(run(plain + "--model mnist-mlp --qat"), {"--qat", "--weights"});
  expect_one_line_error(run(plain + "--weights " + quote(w.string()) + " --qat-freeze-after 3"), {"--qat-freeze-after", "only with --qat"});
  expect_one_line_error(run(plain + "--weights " + quote(w.string()) + " --qat --qat-weight-bits 6"), {"--qat-weight-bits"});
  expect_one_line_error(run(plain + "--weights " + quote(w.string()) + " --qat --qat-freeze-after -2"), {"--qat-freeze-after"});
  expect_one_line_error(run(plain + "--weights " + quote(w.string()) + " --qat --precision bf16"), {"--qat", "bf16"});
  expect_one_line_error(run(plain + "--weights " + quote(ref.string()) + " --qat"), {"already trained with --qat"});
  expect_one_line_error(run("train --resume " + quote(dir) + " --qat"), {"--qat", "--resume"});
  expect_one_line_error(run("quantize " + quote(ref.string()) + " --data " + quote(data_.string()) + " --weight-bits 7 -o " +
                            quote((tmp_ / "q7.safetensors").string())),
                        {"--weight-bits", "8-bit"});
  EXPECT_EQ(read_text(w), wbefore);
  EXPECT_FALSE(fs::exists(tmp_ / "q7.safetensors"));
}

}  // namespace
