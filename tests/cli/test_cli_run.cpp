// Command-line tests of what a run leaves behind and shows: `ember profile` (table, Chrome trace
// whose layer spans nest inside steps, profile.json, folded stacks), `ember train --out` run
// directories, `--profile`, progress lines when stdout is not a terminal, and `--quiet`.
#include <map>
#include <set>

#include "cli/cli_util.h"

namespace {

using nlohmann::json;

std::string profile_args(const fs::path& data, const std::string& extra) {
  return "profile --data " + quote(data.string()) + " --batch-size 16 --threads 2 --limit-samples 96 " + extra;
}

std::string train2_args(const fs::path& data, const std::string& extra) {
  return "train --data " + quote(data.string()) + " --model mnist-mlp --epochs 2 --batch-size 32 --threads 1 " + extra;
}

TEST_F(Cli, ProfileTableNamesEveryUnitAndPhase) {
  Result r = run(profile_args(data_, ""));
  ASSERT_EQ(r.code, 0) << r.cmd << "\n" << r.out << r.err;
  // 96 samples in batches of 16: six profiled steps.
  EXPECT_NE(r.out.find("profile of mnist-cnn: 6 steps of batch 16 (96 samples), 2 threads"), std::string::npos) << r.out;
  for (const char* unit : {"conv2d+relu+maxpool2d (0-2)", "linear (4)", "linear (6)", "batch gather"})
    EXPECT_NE(r.out.find(unit), std::string::npos) << unit << "\n" << r.out;
  for (const char* phase : {" forward ", " backward ", " optimizer ", " data ", " loss "})
    EXPECT_NE(r.out.find(phase), std::string::npos) << phase << "\n" << r.out;
  EXPECT_NE(r.out.find("largest buffers:"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("profiler cost:"), std::string::npos) << r.out;
}

TEST_F(Cli, ProfileTraceSpansNestInsideSteps) {
  const fs::path trace = tmp_ / "trace.json", pj = tmp_ / "profile.json", folded = tmp_ / "p.folded";
  struct Ev { double ts, dur; int step; std::string name, cat; };
  std::map<int, std::vector<Ev>> by_tid;
  std::set<int> named_threads;
  json t;
  // The pool's caller takes the parts of a worker that has not woken up: with the other vCPU busy
  // (ctest runs two tests at once) a short run can leave the worker without a single part, so the
  // run is repeated (at most three times) until the worker shows up.
  for (int attempt = 0; attempt < 3 && !by_tid.count(1); ++attempt) {
    Result r = run(profile_args(data_, "--trace " + quote(trace) + " --json " + quote(pj) + " --folded " + quote(folded)));
    ASSERT_EQ(r.code, 0) << r.cmd << "\n" << r.out << r.err;
    t = json::parse(read_text(trace));
    ASSERT_TRUE(t.contains("traceEvents") && t["traceEvents"].is_array());
    by_tid.clear();
    for (const json& e : t["traceEvents"])
      if (e.value("ph", "") == "X") by_tid[e["tid"].get<int>()];
  }
  by_tid.clear();
  for (const json& e : t["traceEvents"]) {
    ASSERT_TRUE(e.contains("ph") && e.contains("pid") && e.contains("tid")) << e.dump();
    if (e["ph"] == "M") {
      if (e["name"] == "thread_name") named_threads.insert(e["tid"].get<int>());
      continue;
    }
    ASSERT_EQ(e["ph"], "X") << e.dump();
    for (const char* k : {"name", "cat", "ts", "dur", "args"}) ASSERT_TRUE(e.contains(k)) << k << " " << e.dump();
    EXPECT_GE(e["dur"].get<double>(), 0) << e.dump();
    by_tid[e["tid"].get<int>()].push_back({e["ts"].get<double>(), e["dur"].get<double>(),
                                           e["args"]["step"].get<int>(), e["name"], e["cat"]});
  }
  EXPECT_EQ(named_threads, (std::set<int>{0, 1}));
  ASSERT_TRUE(by_tid.count(0));
  EXPECT_TRUE(by_tid.count(1)) << "the second pool thread has no spans in three runs";
  // Main thread: six step spans; every other span lies inside the step span of its own number.
  std::map<int, Ev> steps;
  for (const Ev& e : by_tid[0])
    if (e.cat == "step") steps[e.step] = e;
  ASSERT_EQ(steps.size(), 6u);
  int inner = 0;
  for (const Ev& e : by_tid[0]) {
    if (e.cat == "step") continue;
    ASSERT_TRUE(steps.count(e.step)) << e.name;
    const Ev& s = steps[e.step];
    EXPECT_GE(e.ts, s.ts - 1e-3) << e.name << " starts before its step";
    EXPECT_LE(e.ts + e.dur, s.ts + s.dur + 1e-3) << e.name << " ends after its step";
    ++inner;
  }
  EXPECT_GE(inner, 6 * 10);  // data, 5 forward, loss, 3+ backward, optimizer spans per step
  // Steps do not overlap and come in order.
  for (int i = 1; i < 6; ++i) EXPECT_GE(steps[i].ts, steps[i - 1].ts + steps[i - 1].dur - 1e-3);

  const json p = json::parse(read_text(pj));
  EXPECT_EQ(p["steps"].get<int>(), 6);
  EXPECT_EQ(p["samples"].get<int>(), 96);
  double pct = 0;
  for (const json& row : p["rows"]) pct += row["pct_step"].get<double>();
  EXPECT_NEAR(pct, 100.0, 0.5) << "rows must cover the step exactly";
  // Folded stacks: "a;b;c N" lines whose total is the steps' time in microseconds (to rounding).
  double total_us = 0;
  for (const auto& l : nonempty_lines(read_text(folded))) {
    const size_t sp = l.rfind(' ');
    ASSERT_NE(sp, std::string::npos) << l;
    EXPECT_EQ(l.rfind("step", 0), 0u) << l;
    total_us += std::stod(l.substr(sp + 1));
  }
  const double steps_us = 1e3 * p["step_ms"].get<double>() * 6;
  EXPECT_NEAR(total_us, steps_us, 2.0 + 0.01 * steps_us);
}

TEST_F(Cli, ProfileFlameGraphWithoutPerf) {
  const fs::path svg = tmp_ / "flame.svg";
  Result r = run(profile_args(data_, "--flame " + quote(svg)));
  ASSERT_EQ(r.code, 0) << r.cmd << "\n" << r.out << r.err;
  const std::string s = read_text(svg);
  ASSERT_EQ(s.rfind("<svg", 0), 0u) << s.substr(0, 200);
  for (const char* frame : {"forward", "backward", "optimizer", "linear (4)", "conv2d+relu+maxpool2d (0-2)"})
    EXPECT_NE(s.find(frame), std::string::npos) << frame;
}

TEST_F(Cli, ProfileBadFlags) {
  expect_one_line_error(run(profile_args(data_, "--limit-samples 0")), {"--limit-samples"});
  expect_one_line_error(run(profile_args(data_, "--warmup-steps -1")), {"--warmup-steps"});
  expect_one_line_error(run(profile_args(data_, "--trace " + quote((tmp_ / "no/such/dir/t.json").string()))),
                        {"--trace"});
}

TEST_F(Cli, TrainOutWritesRunDirectory) {
  const fs::path dir = tmp_ / "runs" / "a";
  Result r = run(train2_args(data_, "--out " + quote(dir) + " --profile"));
  ASSERT_EQ(r.code, 0) << r.cmd << "\n" << r.out << r.err;
  for (const char* f : {"config.json", "model.json", "metrics.jsonl", "profile.json", "profile.folded", "trace.json"})
    EXPECT_TRUE(fs::exists(dir / f)) << f;
  EXPECT_EQ(nonempty_lines(read_text(dir / "metrics.jsonl")).size(), 2u);
  const json c = json::parse(read_text(dir / "config.json"));
  EXPECT_EQ(c["model"], "mnist-mlp");
  EXPECT_EQ(c["epochs"].get<int>(), 2);
  EXPECT_EQ(c["batch_size"].get<int>(), 32);
  EXPECT_TRUE(c["machine"].contains("cpu"));
  EXPECT_NE(c["command"].get<std::string>().find("--out"), std::string::npos);
  const json m = json::parse(read_text(dir / "model.json"));
  EXPECT_EQ(m["name"], "mnist-mlp");
  size_t params = 0;
  for (const json& l : m["layers"]) params += l["params"].get<size_t>();
  EXPECT_EQ(params, m["params"].get<size_t>());
  const json p = json::parse(read_text(dir / "profile.json"));
  EXPECT_EQ(p["steps"].get<int>(), 2 * ((200 + 31) / 32));  // every step of both epochs
  EXPECT_NE(r.out.find("ember report"), std::string::npos) << r.out;
  // Nothing is left half-written.
  for (const auto& e : fs::directory_iterator(dir)) EXPECT_NE(e.path().extension(), ".tmp") << e.path();
}

TEST_F(Cli, TrainOutThatIsAFileFails) {
  write_text(tmp_ / "file", "x");
  expect_one_line_error(run(train_args("--out " + quote(tmp_ / "file"))), {"--out"});
}

TEST_F(Cli, ProgressIsPlainLinesWhenNotATerminal) {
  // stdout is a file here: no carriage returns or escape codes, whatever the run's length.
  Result r = run(train2_args(data_, ""));
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_EQ(r.out.find('\r'), std::string::npos);
  EXPECT_EQ(r.out.find('\033'), std::string::npos);
}

TEST_F(Cli, QuietPrintsNoEpochLines) {
  Result r = run(train2_args(data_, "--quiet"));
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_EQ(r.out.find("epoch "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("final test accuracy"), std::string::npos) << r.out;
}

}  // namespace

// A graph model file (examples/residual-cnn.json: a residual block) trains through the CLI, saves
// its parameters under its layers' names, and evaluates from them.
TEST_F(Cli, ResidualGraphExampleTrainsSavesNamesAndEvaluates) {
  const std::string model = std::string(EMBER_SOURCE_DIR) + "/examples/residual-cnn.json";
  const fs::path w = tmp_ / "res.safetensors";
  Result r = run("train --data " + quote(data_.string()) + " --model " + quote(model) +
                 " --epochs 1 --batch-size 16 --threads 2 --quiet --save " + quote(w.string()));
  ASSERT_EQ(r.code, 0) << r.cmd << "\n" << r.out << r.err;
  const std::string bytes = read_text(w);
  for (const char* name : {"\"stem.weight\"", "\"block.0.bias\"", "\"block.2.weight\"", "\"head.weight\""})
    EXPECT_NE(bytes.find(name), std::string::npos) << name;
  Result e = run("eval --data " + quote(data_.string()) + " --model " + quote(model) + " --weights " + quote(w.string()));
  EXPECT_EQ(e.code, 0) << e.cmd << "\n" << e.out << e.err;
}

// `ember info --model` prints the model's layers and both plans' arenas; the inference plan's is
// the smaller (no gradients or optimizer state, activations reused).
TEST_F(Cli, InfoModelPrintsTheArenaOfEachPlan) {
  const std::string model = std::string(EMBER_SOURCE_DIR) + "/examples/residual-cnn.json";
  Result r = run("info --model " + quote(model) + " --batch-size 32");
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  double train = 0, infer = 0;
  const size_t t = r.out.find("training (Adam) plan, batch 32: arena "), i = r.out.find("inference plan, batch 32: arena ");
  ASSERT_NE(t, std::string::npos) << r.out;
  ASSERT_NE(i, std::string::npos) << r.out;
  train = std::stod(r.out.substr(t + 38));
  infer = std::stod(r.out.substr(i + 32));
  EXPECT_GT(infer, 0);
  EXPECT_LT(infer * 1.5, train) << r.out;
  EXPECT_NE(r.out.find("linear head"), std::string::npos) << r.out;
  expect_one_line_error(run("info --model nosuch"), {"--model", "nosuch"});
}


// `ember info --json` (issue 56): every built-in model, fp32, bf16 and int8, nchw and nhwc, batch
// 1 and 64 gives each plan's units with every descriptor field; an int8 plan and an fp32
// inference plan read every GEMM weight packed (0 bytes packed per call); a training plan's
// accounting is not all zero (its GEMMs pack the weights it updates each step).
TEST_F(Cli, InfoJsonDescribesEveryUnitOfEveryPlan) {
  const bool scalar = std::getenv("EMBER_ISA") && std::string(std::getenv("EMBER_ISA")) == "scalar";
  auto info_json = [&](const std::string& args) {  // one document, parsed
    const Result r = run("info " + args + " --json");
    EXPECT_EQ(r.code, 0) << r.cmd << "\n" << r.err;
    return r.code == 0 ? json::parse(r.out) : json();
  };
  for (const char* model : {"mnist-cnn", "mnist-mlp", "mxnet-mlp", "convnext-seed", "convnext-fashion", "convnext-atto",
                            "resnet18", "resnet50"})
    for (const char* prec : {"fp32", "bf16", "int8"})
      for (const char* layout : {"nchw", "nhwc"})
        for (int batch : {1, 64}) {
          const std::string args = std::string("--model ") + model + " --precision " + prec + " --layout " + layout +
                                   " --batch-size " + std::to_string(batch);
          const json doc = info_json(args);
          ASSERT_TRUE(doc.contains("plans")) << args;
          ASSERT_EQ(doc["plans"].size(), std::string(prec) == "int8" ? 1u : 2u) << args;
          for (const json& p : doc["plans"]) {
            EXPECT_EQ(p["precision"], prec) << args;
            EXPECT_EQ(p["batch"], batch) << args;
            ASSERT_FALSE(p["units"].empty()) << args;
            for (const json& u : p["units"]) {
              for (const char* f : {"name", "algorithm", "layout", "dtype", "weight_format"})
                ASSERT_TRUE(u.contains(f) && u[f].is_string()) << args << ": " << f << " in " << u.dump();
              for (const char* f : {"ops", "post_ops"}) ASSERT_TRUE(u.contains(f) && u[f].is_array()) << args << ": " << f;
              for (const char* f : {"workspace_bytes", "weight_bytes_packed_per_call"})
                ASSERT_TRUE(u.contains(f) && u[f].is_number_unsigned()) << args << ": " << f;
              // Every inference plan reads its weights packed once (or as stored): fp32, bf16 and int8.
              const std::string algo = u["algorithm"];
              const bool inference = p["kind"] == "inference";
              if (inference) EXPECT_EQ(u["weight_bytes_packed_per_call"], 0u) << args << ": " << u.dump();
              if (inference && !scalar && algo == "nhwc-im2col") EXPECT_EQ(u["weight_format"], "gemm-b-panels") << args;
              if (inference && !scalar && algo.find("conv-relu-pool") == 0) EXPECT_EQ(u["weight_format"], "kernel-tiles") << args;
              if (inference && !scalar && std::string(prec) == "bf16" && algo == "im2col-gemm")
                EXPECT_EQ(u["weight_format"], "bf16-gemm-a-panels") << args;
            }
          }
        }
  // A training plan's GEMMs pack the weights they update: resnet18's nhwc convolutions at batch 64
  // (a fast table's; the scalar reference packs nothing).
  const json t = info_json("--model resnet18 --precision fp32 --layout nhwc --batch-size 64");
  size_t packed = 0;
  for (const json& u : t["plans"][0]["units"]) packed += u["weight_bytes_packed_per_call"].get<size_t>();
  if (scalar) EXPECT_EQ(packed, 0u);  // the reference GEMM reads its operands in place
  else EXPECT_GT(packed, 0u);
  expect_one_line_error(run("info --model resnet18 --precision fp16 --json"), {"--precision", "fp16"});
  expect_one_line_error(run("info --json"), {"--json"});
}
