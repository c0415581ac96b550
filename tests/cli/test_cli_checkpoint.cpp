// Checkpoints through the command line: runs killed with SIGKILL at random moments (some
// twice) and resumed end with the same weights, byte for byte, as a run never stopped; SIGINT
// and SIGTERM stop at a step's end with a checkpoint and a resume hint; a save that hits a file
// size limit fails with a clear error and leaves the last good checkpoint; resume rules.
#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <random>
#include <thread>

#include "cli/cli_util.h"
#include "ember/io.h"

namespace {

const char* kSmallCnn = R"({"name": "small-cnn", "input": [1, 28, 28], "classes": 10, "layers": [
 {"type": "conv2d", "out_channels": 4, "kernel": 5, "padding": 2}, {"type": "relu"},
 {"type": "maxpool2d", "kernel": 2}, {"type": "flatten"}, {"type": "linear", "out_features": 10}]})";

class Ckpt : public Cli {
 protected:
  void SetUp() override {
    Cli::SetUp();
    model_ = tmp_ / "small.json";
    write_text(model_, kSmallCnn);
  }
  // 200 samples in batches of 16: 13 steps per epoch; two threads (their reductions included).
  std::vector<std::string> args(int epochs, const std::string& dir, const fs::path& save, int every = 3) {
    return {"train", "--data", data_.string(), "--model", model_.string(), "--epochs", std::to_string(epochs),
            "--batch-size", "16", "--threads", "2", "--quiet", "--checkpoint-every", std::to_string(every),
            "--keep-checkpoints", "2", "--checkpoint-dir", dir, "--save", save.string()};
  }
  static std::string join(const std::vector<std::string>& v) {
    std::string s;
    for (const std::string& a : v) s.append(s.empty() ? "" : " ").append(quote(a));
    return s;
  }
  // Starts ember with `argv`, output to files in tmp_; returns the pid.
  pid_t spawn(const std::vector<std::string>& argv) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      const std::string out = (tmp_ / "spawn.out").string(), err = (tmp_ / "spawn.err").string();
      if (!std::freopen(out.c_str(), "w", stdout) || !std::freopen(err.c_str(), "w", stderr)) ::_exit(126);
      std::vector<char*> a{const_cast<char*>(EMBER_BINARY)};
      for (const std::string& s : argv) a.push_back(const_cast<char*>(s.c_str()));
      a.push_back(nullptr);
      ::execv(EMBER_BINARY, a.data());
      ::_exit(127);
    }
    return pid;
  }
  fs::path model_;
};

TEST_F(Ckpt, KilledAtRandomMomentsResumesBitIdentically) {
  const fs::path ref = tmp_ / "ref.safetensors";
  Result r = run(join(args(3, (tmp_ / "ref-ckpt").string(), ref)));
  ASSERT_EQ(r.code, 0) << r.cmd << "\n" << r.out << r.err;
  const std::string want = read_text(ref);
  ASSERT_FALSE(want.empty());
  // How long an uninterrupted run takes when spawned the way the trials spawn it: the fastest of
  // three, so that the kill times (uniform up to that) land inside a run however loaded the machine.
  double run_ms = 1e9;
  for (int c = 0; c < 3; ++c) {
    const auto t0 = std::chrono::steady_clock::now();
    const pid_t pid = spawn(args(3, (tmp_ / ("cal" + std::to_string(c))).string(), tmp_ / "cal.safetensors"));
    ASSERT_EQ(wait_status(pid), 0) << read_text(tmp_ / "spawn.err");
    run_ms = std::min(run_ms, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }

  // The calibration may run while other tests load the machine and the trials on a quiet one:
  // a run that ends before its kill lowers run_ms to the time it was given, and trials go on
  // (up to 150) until 50 have run and 25 of them were killed mid-run.
  std::mt19937 rng(20261123);
  int trials = 0, killed = 0, killed_twice = 0, before_first = 0, identical = 0;
  for (int t = 0; t < 150 && (t < 50 || killed < 25); ++t) {
    const std::string num = std::to_string(t);
    const std::string dir = (tmp_ / ("ck" + num)).string();
    const fs::path out = (tmp_ / ("w" + num)).concat(".safetensors");
    const std::vector<std::string> a = args(3, dir, out);
    std::vector<std::string> resume = {"train", "--resume", dir, "--quiet", "--save", out.string()};
    int kills = 0;
    for (int attempt = 0; attempt < 2; ++attempt) {  // the first run, then maybe its resume
      if (attempt == 1 && (rng() % 2 == 0 || kills == 0)) break;
      const bool have = !ember::list_checkpoints(dir).empty();
      const pid_t pid = spawn(attempt == 0 || !have ? a : resume);
      const double wait_ms = std::uniform_real_distribution<double>(0, run_ms)(rng);
      std::this_thread::sleep_for(std::chrono::microseconds(int64_t(wait_ms * 1000)));
      ::kill(pid, SIGKILL);
      const int code = wait_status(pid);
      if (code == 128 + SIGKILL) ++kills;
      else ASSERT_EQ(code, 0) << "run " << t << ": " << read_text(tmp_ / "spawn.err");
      if (code == 0 && attempt == 0) run_ms = std::max(5.0, std::min(run_ms, wait_ms));
    }
    killed += kills > 0;
    killed_twice += kills > 1;
    // Go on to the end: from the newest checkpoint, or from the start when none was written.
    const bool have = !ember::list_checkpoints(dir).empty();
    before_first += kills > 0 && !have;
    if (!fs::exists(out) || kills > 0) {
      Result fin = run(join(have ? resume : a));
      ASSERT_EQ(fin.code, 0) << fin.cmd << "\n" << fin.out << fin.err;
    }
    ++trials;
    if (read_text(out) == want) ++identical;
    else ADD_FAILURE() << "trial " << t << ": final weights differ from the uninterrupted run";
  }
  std::printf("[kill -9] %d runs: %d killed mid-run (%d of them killed again while resuming, %d before "
              "their first checkpoint), %d finished first; %d/%d ended bit-identical to the "
              "uninterrupted run (%.0f ms)\n",
              trials, killed, killed_twice, before_first, trials - killed, identical, trials, run_ms);
  EXPECT_EQ(identical, trials);
  EXPECT_GE(killed, 25) << "too few kills landed inside a run to mean anything";
}

TEST_F(Ckpt, SigintAndSigtermStopAtAStepWithACheckpoint) {
  const fs::path ref = tmp_ / "ref.safetensors";
  ASSERT_EQ(run(join(args(8, (tmp_ / "ref-ckpt").string(), ref, 1000))).code, 0);
  for (int sig : {SIGINT, SIGTERM}) {
    SCOPED_TRACE(sig == SIGINT ? "SIGINT" : "SIGTERM");
    const std::string dir = (tmp_ / ("sig" + std::to_string(sig))).string();
    const fs::path out = tmp_ / ("sig" + std::to_string(sig) + ".safetensors");
    const pid_t pid = spawn(args(8, dir, out, 5));
    for (int i = 0; i < 2000 && ember::list_checkpoints(dir).empty(); ++i)  // wait for step 5
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    ::kill(pid, sig);
    ASSERT_EQ(wait_status(pid), 128 + sig) << read_text(tmp_ / "spawn.err");
    const std::string err = read_text(tmp_ / "spawn.err");
    EXPECT_NE(err.find(sig == SIGINT ? "interrupted (SIGINT) at step " : "terminated (SIGTERM) at step "), std::string::npos) << err;
    EXPECT_NE(err.find("resume with: ember train --resume " + dir + " --save " + quote(out.string())), std::string::npos) << err;
    EXPECT_FALSE(fs::exists(out)) << "a stopped run saved its final weights";
    const Result r = run("train --resume " + quote(dir) + " --quiet --save " + quote(out.string()));
    ASSERT_EQ(r.code, 0) << r.out << r.err;
    EXPECT_EQ(read_text(out), read_text(ref)) << "resumed weights differ";
  }
}

TEST_F(Ckpt, FullDiskSaveFailsClearlyAndKeepsTheLastCheckpoint) {
  const std::string dir = (tmp_ / "ck").string();
  const fs::path ref = tmp_ / "ref.safetensors", out = tmp_ / "out.safetensors";
  ASSERT_EQ(run(join(args(4, (tmp_ / "ref-ckpt").string(), ref, 13))).code, 0);
  ASSERT_EQ(run(join(args(2, dir, out, 13))).code, 0);  // checkpoints at steps 13 and 26
  const std::string good = ember::checkpoint_path(dir, 26), good_bytes = read_text(good);
  ASSERT_FALSE(good_bytes.empty());
  // Going on with a file size limit below a checkpoint's size: the step-39 save fails as on a full disk.
  const Result r = run("train --resume " + quote(dir) + " --epochs 4 --quiet",
                       "prlimit --fsize=40000:40000");
  // Training had started (stdout shows it); stderr is the one-line error.
  EXPECT_EQ(r.code, 2) << r.out << r.err;
  ASSERT_EQ(nonempty_lines(r.err).size(), 1u) << r.err;
  for (const std::string& n : std::vector<std::string>{"checkpoint at step 39", "ckpt-0000000039.safetensors", "write failed",
                               "file too large", "the last good checkpoint is " + good})
    EXPECT_NE(r.err.find(n), std::string::npos) << "missing '" << n << "' in: " << r.err;
  EXPECT_EQ(ember::list_checkpoints(dir).back(), good);
  EXPECT_EQ(read_text(good), good_bytes);
  for (const auto& e : fs::directory_iterator(dir))
    EXPECT_EQ(e.path().filename().string().rfind(".ember-", 0), std::string::npos) << "left behind: " << e.path();
  const Result fin = run("train --resume " + quote(dir) + " --epochs 4 --quiet --save " + quote(out.string()));
  ASSERT_EQ(fin.code, 0) << fin.out << fin.err;
  EXPECT_EQ(read_text(out), read_text(ref)) << "the run resumed after the failed save differs";
}

TEST_F(Ckpt, ResumeRulesAndBadCheckpoints) {
  const std::string dir = (tmp_ / "ck").string();
  ASSERT_EQ(run(join(args(1, dir, tmp_ / "w.safetensors", 5))).code, 0);
  EXPECT_EQ(ember::list_checkpoints(dir).size(), 2u) << "--keep-checkpoints 2";
  expect_one_line_error(run("train --resume " + quote(dir) + " --lr 0.5"), {"--lr", "cannot be changed when resuming", "0.001"});
  expect_one_line_error(run("train --resume " + quote(dir) + " --batch-size 8"), {"--batch-size", "cannot be changed"});
  expect_one_line_error(run("train --resume " + quote(dir) + " --weights " + quote((tmp_ / "w.safetensors").string())),
                        {"--weights", "--resume"});
  fs::create_directories(tmp_ / "empty");
  expect_one_line_error(run("train --resume " + quote((tmp_ / "empty").string())), {"--resume", "no checkpoint"});
  expect_one_line_error(run("train --resume " + quote((tmp_ / "nope").string())), {"--resume", "no such file"});
  const fs::path other = tmp_ / "other";
  write_dataset(other, 150, 20);
  expect_one_line_error(run("train --resume " + quote(dir) + " --data " + quote(other.string())),
                        {"--data", "is not the one checkpoint", "trained on"});
  expect_one_line_error(run(train_args("--on-nonfinite maybe")), {"--on-nonfinite", "stop or skip"});
  expect_one_line_error(run(train_args("--checkpoint-every -1")), {"--checkpoint-every"});
  // A truncated checkpoint, and a weights file given as a checkpoint.
  const std::string newest = ember::list_checkpoints(dir).back();
  const std::string bytes = read_text(newest);
  const fs::path cut = tmp_ / "cut.safetensors";
  write_text(cut, bytes.substr(0, bytes.size() / 2));
  expect_one_line_error(run("train --resume " + quote(cut.string())), {cut.string(), "data_offsets"});
  expect_one_line_error(run("train --resume " + quote((tmp_ / "w.safetensors").string())),
                        {"w.safetensors", "__metadata__.ember_checkpoint", "missing", "loads with --weights"});
  // A checkpoint is also a weights file for eval and --weights.
  const Result ev = run("eval --data " + quote(data_.string()) + " --model " + quote(model_.string()) +
                        " --threads 1 --weights " + quote(newest));
  EXPECT_EQ(ev.code, 0) << ev.out << ev.err;
}

// A channel-last run (convnext-fashion, --layout nhwc) stopped after its first epoch and resumed
// ends with the same bytes as one never stopped; the resume keeps the checkpoint's layout and
// refuses another (its sums run in another order).
TEST_F(Ckpt, NhwcRunResumesBitIdentically) {
  const fs::path ref = tmp_ / "ref.safetensors", out = tmp_ / "out.safetensors";
  const std::string dir = (tmp_ / "ck").string();
  const std::string base = "train --data " + quote(data_.string()) +
                           " --model convnext-fashion --batch-size 16 --threads 2 --quiet --limit-train 64 --limit-test 32 --layout nhwc";
  ASSERT_EQ(run(base + " --epochs 2 --save " + quote(ref.string())).code, 0);
  const Result first = run(base + " --epochs 1 --checkpoint-every 2 --checkpoint-dir " + quote(dir));
  ASSERT_EQ(first.code, 0) << first.err;
  const Result fin = run("train --resume " + quote(dir) + " --epochs 2 --save " + quote(out.string()));
  ASSERT_EQ(fin.code, 0) << fin.out << fin.err;
  EXPECT_EQ(read_text(out), read_text(ref)) << "the resumed nhwc run differs";
  expect_one_line_error(run("train --resume " + quote(dir) + " --layout nchw"),
                        {"--layout", "cannot be changed when resuming", "nhwc"});
}

// A bf16 run (fp32 masters and Adam state in the checkpoint, bf16 products) stopped after its
// first epoch and resumed ends with the same bytes as one never stopped, and differs from the
// fp32 run; the resume keeps the checkpoint's precision and refuses another.
TEST_F(Ckpt, Bf16RunResumesBitIdentically) {
  const fs::path ref = tmp_ / "ref.safetensors", out = tmp_ / "out.safetensors", f32 = tmp_ / "f32.safetensors";
  const std::string dir = (tmp_ / "ck").string();
  const std::string base = "train --data " + quote(data_.string()) + " --model mnist-cnn --batch-size 16 --threads 2 --quiet";
  ASSERT_EQ(run(base + " --precision bf16 --epochs 2 --save " + quote(ref.string())).code, 0);
  ASSERT_EQ(run(base + " --epochs 2 --save " + quote(f32.string())).code, 0);
  const Result first = run(base + " --precision bf16 --epochs 1 --checkpoint-every 4 --checkpoint-dir " + quote(dir));
  ASSERT_EQ(first.code, 0) << first.err;
  const Result fin = run("train --resume " + quote(dir) + " --epochs 2 --save " + quote(out.string()));
  ASSERT_EQ(fin.code, 0) << fin.out << fin.err;
  EXPECT_NE(fin.out.find("precision bf16"), std::string::npos) << fin.out;
  EXPECT_EQ(read_text(out), read_text(ref)) << "the resumed bf16 run differs";
  EXPECT_NE(read_text(ref), read_text(f32)) << "bf16 and fp32 runs gave the same weights";
  expect_one_line_error(run("train --resume " + quote(dir) + " --precision fp32"),
                        {"--precision", "cannot be changed when resuming", "bf16"});
  expect_one_line_error(run(base + " --precision fp16 --epochs 1"), {"--precision", "fp32 or bf16", "fp16"});
  expect_one_line_error(run("eval --data " + quote(data_.string()) + " --model mnist-cnn --precision half --weights " +
                            quote(ref.string())), {"--precision", "half"});
  const Result ev = run("eval --data " + quote(data_.string()) + " --model mnist-cnn --threads 1 --precision bf16 --weights " +
                        quote(ref.string()));
  EXPECT_EQ(ev.code, 0) << ev.out << ev.err;
  // A checkpoint whose stored precision is neither: refused in one line naming the file and field.
  const std::string stored = "precision\\\":\\\"bf16", lie = "precision\\\":\\\"fp8x";
  for (const std::string& f : ember::list_checkpoints(dir)) {
    std::string bytes = read_text(f);
    const size_t at = bytes.find(stored);
    ASSERT_NE(at, std::string::npos) << f;
    write_text(f, bytes.replace(at, stored.size(), lie));
  }
  expect_one_line_error(run("train --resume " + quote(dir)), {"config.precision", "fp32 or bf16", "fp8x"});
}

TEST_F(Ckpt, NanWeightsStopTheRunNamingStepAndLayer) {
  // Weights whose last layer's first row is all 3e38: that logit overflows to Inf and the loss
  // is NaN, named with its layer. (NaN itself in a weights file is refused when loading.)
  const fs::path w = tmp_ / "w.safetensors", bad = tmp_ / "nan.safetensors";
  ASSERT_EQ(run(join(args(1, (tmp_ / "ck").string(), w, 100))).code, 0);
  std::string b = read_text(w);
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= uint64_t(uint8_t(b[size_t(i)])) << (8 * i);
  const nlohmann::json h = nlohmann::json::parse(b.substr(8, n));
  const uint64_t off = 8 + n + h["4.weight"]["data_offsets"][0].get<uint64_t>();
  const float huge = 3e38f;
  for (int i = 0; i < 784; ++i) std::memcpy(&b[off + 4 * size_t(i)], &huge, 4);
  write_text(bad, b);
  const Result r = run("train --data " + quote(data_.string()) + " --model " + quote(model_.string()) +
                       " --batch-size 16 --threads 2 --quiet --weights " + quote(bad.string()));
  expect_one_line_error(r, {"non-finite loss (", "nan) at step 1 (epoch 1, batch 1 of 13)", "linear (4)",
                            "no checkpoint was written"});
  const Result s = run("train --data " + quote(data_.string()) + " --model " + quote(model_.string()) +
                       " --batch-size 16 --threads 2 --epochs 1 --on-nonfinite skip --weights " + quote(bad.string()));
  EXPECT_NE(s.code, 0);
  EXPECT_NE(s.out.find("13 steps skipped: NaN/Inf"), std::string::npos) << s.out << s.err;
}

}  // namespace

namespace {

// Weights trained in ember evaluate to the same accuracy in PyTorch (examples/pytorch_eval.py
// builds the nn.Sequential from the file's model description and loads the tensors unchanged),
// and weights PyTorch writes (perturbed there) evaluate in ember as in PyTorch.
TEST_F(Ckpt, PyTorchLoadsEmberWeightsAndEmberLoadsPyTorchs) {
  if (std::system("/usr/bin/python3 -c 'import torch, numpy' >/dev/null 2>&1") != 0)
    GTEST_SKIP() << "PyTorch (python3-torch) is not installed: apt-get install python3-torch";
  write_dataset(tmp_ / "big", 600, 400);
  const fs::path w = tmp_ / "w.safetensors", back = tmp_ / "torch.safetensors";
  for (const std::string& model : {model_.string(), std::string("mnist-cnn")}) {
    SCOPED_TRACE(model);
    const std::string data = quote((tmp_ / "big").string());
    ASSERT_EQ(run("train --data " + data + " --model " + quote(model) + " --epochs 1 --threads 2 --quiet --save " +
                  quote(w.string())).code, 0);
    const Result ev = run("eval --data " + data + " --model " + quote(model) + " --weights " + quote(w.string()));
    ASSERT_EQ(ev.code, 0) << ev.err;
    const std::string script = std::string(EMBER_SOURCE_DIR) + "/examples/pytorch_eval.py";
    const std::string py = "/usr/bin/python3 " + quote(script) + " " + quote(w.string()) + " --data " + data;
    auto python = [&](const std::string& extra) {
      const fs::path out = tmp_ / "py.txt";
      EXPECT_EQ(std::system((py + extra + " >" + quote(out.string()) + " 2>&1").c_str()), 0) << read_text(out);
      return read_text(out);
    };
    const std::string torch_out = python("");
    const double ember_acc = final_accuracy(ev.out, "test accuracy "), torch_acc = final_accuracy(torch_out, "test accuracy ");
    EXPECT_GT(ember_acc, 30) << ev.out;
    EXPECT_NEAR(ember_acc, torch_acc, 0.5) << "ember:\n" << ev.out << "PyTorch:\n" << torch_out;  // 400 images: 0.25 % each
    const std::string perturbed = python(" --perturb 5 --resave " + quote(back.string()));
    const Result ev2 = run("eval --data " + data + " --model " + quote(model) + " --weights " + quote(back.string()));
    ASSERT_EQ(ev2.code, 0) << ev2.err;
    EXPECT_NEAR(final_accuracy(ev2.out, "test accuracy "), final_accuracy(perturbed, "test accuracy "), 0.5)
        << ev2.out << perturbed;
    EXPECT_NE(read_text(back), read_text(w)) << "the perturbed weights are PyTorch's own";
  }
}

// D13: a run that takes a checkpoint directory's lock removes the `.ember-XXXXXX` temporary a
// writer killed by SIGKILL left there, and says so in one line; other files, and a symlink with
// such a name, stay (on c918c99 the temporary, a whole checkpoint, stayed for good).
TEST_F(Ckpt, ALockingRunRemovesAKilledWritersTemporaries) {
  const fs::path dir = tmp_ / "ck";
  fs::create_directories(dir);
  const fs::path stale = dir / ".ember-Ab3xYz", other = dir / ".ember-notours.tmp", link = dir / ".ember-Lnk123";
  const fs::path fresh = dir / ".ember-Fresh1";  // a minute old at most: maybe a write in flight
  write_text(stale, std::string(4096, 'c'));
  write_text(fresh, "in flight");
  fs::last_write_time(stale, fs::file_time_type::clock::now() - std::chrono::hours(1));
  write_text(other, "keep");
  fs::create_symlink(other, link);
  const Result r = run(join(args(1, dir.string(), tmp_ / "w.safetensors", 1000)));
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_FALSE(fs::exists(stale)) << "the killed writer's temporary is still there";
  EXPECT_TRUE(fs::exists(fresh)) << "a temporary written seconds ago may be another process's";
  EXPECT_NE(r.err.find(".ember-Ab3xYz"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("removed"), std::string::npos) << r.err;
  EXPECT_EQ(read_text(other), "keep");
  EXPECT_TRUE(fs::is_symlink(link));
}

// D5: parameter names that collide are refused when the model is built, naming both layers: a
// layer named "0" beside an unnamed layer 0 (c918c99 saved one `0.weight`, a file that did not
// load back), and a name in the checkpoint's "optimizer." namespace (c918c99 overwrote Adam's
// state in checkpoints and --resume failed).
TEST_F(Ckpt, CollidingAndReservedParameterNamesAreRefused) {
  const fs::path m = tmp_ / "collide.json", r = tmp_ / "reserved.json";
  write_text(m, R"({"name": "c", "input": [1, 28, 28], "classes": 10, "layers": [
 {"type": "conv2d", "out_channels": 4, "kernel": 3}, {"type": "relu"},
 {"type": "conv2d", "name": "0", "out_channels": 4, "kernel": 3}, {"type": "flatten"},
 {"type": "linear", "out_features": 10}]})");
  write_text(r, R"({"name": "r", "input": [1, 28, 28], "classes": 10, "layers": [
 {"type": "flatten"}, {"type": "linear", "name": "optimizer.exp_avg.0", "out_features": 10}]})");
  expect_one_line_error(run("train --data " + quote(data_.string()) + " --model " + quote(m.string()) +
                            " --epochs 1 --save " + quote((tmp_ / "w.safetensors").string())),
                        {"collide.json", "layers[0]", "layers[2]", "0.weight"});
  expect_one_line_error(run("train --data " + quote(data_.string()) + " --model " + quote(r.string()) + " --epochs 1"),
                        {"reserved.json", "layers[1]", "optimizer"});
  EXPECT_FALSE(fs::exists(tmp_ / "w.safetensors"));
}

}  // namespace
