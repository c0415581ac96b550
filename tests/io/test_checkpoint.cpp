// Checkpoints and weights at the library level: a run stopped at any step (mid-epoch, at an
// epoch's end, after the first step) and resumed from its checkpoint ends with the same bytes as
// a run never stopped, for Adam, momentum and SGD, one and two threads; NaN/Inf detection names
// the step and the layer; atomic writes leave the old file on failure; pruning keeps the newest.
#include <chrono>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <csignal>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

#include "ember/ember.h"
#include "ember_support/files.h"
#include "train/toy.h"

namespace fs = std::filesystem;
using namespace ember;

namespace {

Dataset toy(int n, uint32_t seed) { return toy::dataset(n, seed); }
using toy::small_cnn;

std::vector<uint8_t> bytes_of(Plan& p) {
  std::vector<uint8_t> b(static_cast<uint8_t*>(p.param_data()),
                         static_cast<uint8_t*>(p.param_data()) + p.param_count() * 4);
  for (int s = 0; s < p.state_count(); ++s)
    b.insert(b.end(), static_cast<uint8_t*>(p.state_data(s)), static_cast<uint8_t*>(p.state_data(s)) + p.param_count() * 4);
  return b;
}

struct TmpDir {
  fs::path path;
  TmpDir() {
    std::string t = (fs::temp_directory_path() / "ember-ckpt-XXXXXX").string();
    EXPECT_NE(::mkdtemp(t.data()), nullptr);
    path = t;
  }
  ~TmpDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

struct Case {
  OptimizerKind opt;
  int threads;
};

class Resume : public ::testing::TestWithParam<Case> {};

TEST_P(Resume, StoppedAnywhereEndsWithTheSameBytes) {
  const Dataset tr = toy(150, 1), te = toy(40, 2);  // batch 16: 10 batches, the last of 6
  PlanOptions po;
  po.batch = 16;
  po.threads = GetParam().threads;
  po.optimizer.kind = GetParam().opt;
  po.optimizer.l2 = 1e-4;
  TrainConfig cfg;
  cfg.epochs = 3;
  cfg.seed = 7;
  cfg.schedule.lr = GetParam().opt == OptimizerKind::Adam ? 3e-3 : 3e-2;
  cfg.schedule.t_max = 3;

  Plan ref(small_cnn(), po);
  ref.init_params(7);
  std::vector<EpochMetrics> ref_metrics;
  train(ref, tr, te, cfg, [&](const EpochMetrics& m) { ref_metrics.push_back(m); return true; });
  const std::vector<uint8_t> want = bytes_of(ref);

  TmpDir dir;
  int cases = 0;
  for (int64_t stop_at : {1, 4, 9, 10, 11, 17, 20, 29, 30}) {  // 10 steps per epoch
    SCOPED_TRACE("stopped after step " + std::to_string(stop_at));
    Plan a(small_cnn(), po);
    a.init_params(7);
    TrainConfig c1 = cfg;
    int64_t steps = 0;
    c1.after_step = [&](const TrainState&, int) { return ++steps < stop_at; };
    const TrainResult r1 = train(a, tr, te, c1, nullptr);
    ASSERT_TRUE(r1.stopped);
    const std::string path = (dir.path / ("c" + std::to_string(stop_at) + ".safetensors")).string();
    save_checkpoint(a, r1.state, "{\"note\": \"test\"}", path);

    Plan b(small_cnn(), po);  // a fresh process, in effect: new plan, new arena
    b.init_params(99);        // different weights, overwritten by the checkpoint
    const CheckpointInfo info = load_checkpoint(b, path);
    EXPECT_EQ(info.state.epoch, r1.state.epoch);
    EXPECT_EQ(info.state.batch, r1.state.batch);
    EXPECT_EQ(info.optimizer_steps, stop_at);
    EXPECT_EQ(info.config_json, "{\"note\":\"test\"}");
    TrainConfig c2 = cfg;
    c2.start = info.state;
    std::vector<EpochMetrics> metrics;
    train(b, tr, te, c2, [&](const EpochMetrics& m) { metrics.push_back(m); return true; });
    EXPECT_TRUE(bytes_of(b) == want) << "weights or optimizer state differ";
    EXPECT_EQ(b.optimizer_steps(), ref.optimizer_steps());
    // The epochs finished after the resume report the same training loss and accuracy.
    ASSERT_FALSE(metrics.empty());
    const EpochMetrics& last = metrics.back();
    EXPECT_EQ(last.epoch, ref_metrics.back().epoch);
    EXPECT_EQ(last.train_loss, ref_metrics.back().train_loss);
    EXPECT_EQ(last.train_acc, ref_metrics.back().train_acc);
    EXPECT_EQ(last.test_acc, ref_metrics.back().test_acc);
    ++cases;
  }
  EXPECT_EQ(cases, 9);
}

std::string case_name(const ::testing::TestParamInfo<Case>& i) {
  static const char* const names[] = {"sgd", "momentum", "nesterov", "adam", "adamw"};
  return std::string(names[int(i.param.opt)]) + "_" + std::to_string(i.param.threads) + "t";
}

INSTANTIATE_TEST_SUITE_P(Optimizers, Resume,
                         ::testing::Values(Case{OptimizerKind::Adam, 1}, Case{OptimizerKind::Adam, 2},
                                           Case{OptimizerKind::Momentum, 2}, Case{OptimizerKind::SGD, 1}),
                         case_name);

TEST(Checkpoint, WrongOptimizerIsNamedBeforeAnythingIsCopied) {
  TmpDir dir;
  PlanOptions po;
  po.batch = 8;
  Plan adam(small_cnn(), po);
  adam.init_params(1);
  const std::string path = (dir.path / "c.safetensors").string();
  save_checkpoint(adam, TrainState{}, "{}", path);
  po.optimizer.kind = OptimizerKind::Momentum;
  Plan mom(small_cnn(), po);
  mom.init_params(2);
  const std::vector<uint8_t> before = bytes_of(mom);
  try {
    load_checkpoint(mom, path);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tensor 'optimizer.exp_avg."), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("optimizer is \"adam\""), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
  EXPECT_TRUE(bytes_of(mom) == before) << "a failed load changed the plan";
  // A weights file is not a checkpoint, but a checkpoint loads as weights.
  const std::string w = (dir.path / "w.safetensors").string();
  save_weights(adam, w);
  EXPECT_THROW(load_checkpoint(adam, w), Error);
  Plan eval(small_cnn(), po);
  load_weights(eval, path);
  EXPECT_EQ(std::memcmp(eval.param_data(), adam.param_data(), adam.param_count() * 4), 0);
}

TEST(Nonfinite, NaNWeightStopsAtTheFirstStepNamingTheLayer) {
  const Dataset tr = toy(64, 3), te = toy(16, 4);
  PlanOptions po;
  po.batch = 16;
  po.threads = 2;
  Plan p(small_cnn(), po);
  TrainConfig cfg;
  cfg.epochs = 1;
  struct Poison {
    size_t param;
    const char* needle;  // what the error must name
    bool before_update;  // whether the run stops before the step's update
  };
  // A NaN in the last layer reaches the loss: the first non-finite output names that layer, and
  // the step stops before its update. One in fc1 is hidden from the loss by the ReLU after it
  // (max(NaN, 0) is 0 there), but flows back through fc1's input gradient into the conv weights'
  // gradient, which the update itself finds (at no cost) and names.
  const Poison poisons[] = {
      {4, "non-finite loss (nan) at step 1 (epoch 1, batch 1 of 4): first non-finite output is that of linear (6) (stopped before its update)", true},
      {2, "non-finite gradient of 0.weight (conv2d, layer 0) at step 1 (epoch 1, batch 1 of 4) (stopped after its update", false}};
  for (const Poison& poison : poisons) {
    p.init_params(1);
    static_cast<float*>(p.param_data())[p.params()[poison.param].offset + 5] = NAN;
    const std::vector<uint8_t> before = bytes_of(p);
    try {
      train(p, tr, te, cfg, nullptr);
      ADD_FAILURE() << "no error";
    } catch (const NonfiniteError& e) {
      EXPECT_NE(std::string(e.what()).find(poison.needle), std::string::npos) << e.what();
    }
    EXPECT_EQ(bytes_of(p) == before, poison.before_update);
  }
  // Skipping instead: the gradients are checked before the update, every step is skipped,
  // nothing changes, and an epoch without one applied step is reported as divergence.
  cfg.on_nonfinite = NonfinitePolicy::skip;
  cfg.evaluate = false;
  for (const Poison& poison : poisons) {
    p.init_params(1);
    static_cast<float*>(p.param_data())[p.params()[poison.param].offset + 5] = NAN;
    const std::vector<uint8_t> before = bytes_of(p);
    EpochMetrics got;
    EXPECT_THROW(train(p, tr, te, cfg, [&](const EpochMetrics& m) { got = m; return true; }), Error);
    EXPECT_EQ(got.skipped, 4);
    EXPECT_TRUE(bytes_of(p) == before);
  }
}

TEST(Nonfinite, GradientCheckNamesTheTensor) {
  PlanOptions po;
  po.batch = 4;
  po.threads = 2;
  Plan p(small_cnn(), po);
  EXPECT_EQ(p.first_nonfinite_grad(), -1);
  float* g = static_cast<float*>(p.grad_data());
  std::fill(g, g + p.param_count(), 0.f);
  EXPECT_EQ(p.first_nonfinite_grad(), -1);
  const ParamInfo& b = p.params()[3];  // "4.bias"
  g[b.offset + b.size - 1] = INFINITY;
  EXPECT_EQ(p.first_nonfinite_grad(), 3);
  g[p.params()[0].offset] = NAN;
  EXPECT_EQ(p.first_nonfinite_grad(), 0);
}

TEST(AtomicWrite, FailedWriteLeavesTheOldFileAndNoTemporary) {
  TmpDir dir;
  const std::string path = (dir.path / "f.bin").string();
  write_file_atomic(path, {"old content"});
  // A file size limit makes the write fail the way a full disk does (SIGXFSZ ignored: EFBIG).
  struct rlimit old_lim;
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &old_lim), 0);
  auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
  struct rlimit lim = old_lim;
  lim.rlim_cur = 4096;
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &lim), 0);
  const std::string big(100000, 'x');
  std::string msg;
  try {
    write_file_atomic(path, {big});
  } catch (const Error& e) {
    msg = e.what();
  }
  setrlimit(RLIMIT_FSIZE, &old_lim);
  std::signal(SIGXFSZ, old_handler);
  EXPECT_NE(msg.find("'" + path + "': write failed: file too large"), std::string::npos) << msg;
  std::ifstream f(path);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(f), {}), "old content");
  int files = 0;
  for (auto& e : fs::directory_iterator(dir.path)) files += 1 + 0 * int(e.path().empty());
  EXPECT_EQ(files, 1) << "a temporary file was left behind";
  EXPECT_THROW(write_file_atomic((dir.path / "no-such-dir" / "f").string(), {"x"}), Error);
}

TEST(CheckpointDir, ListsInStepOrderAndPrunesToTheNewest) {
  TmpDir dir;
  for (int64_t s : {30, 4, 1000, 12}) std::ofstream(checkpoint_path(dir.path.string(), s)) << "x";
  std::ofstream(dir.path / "ckpt-12.safetensors") << "x";               // not a checkpoint name
  std::ofstream(dir.path / ".ckpt-0000000031.safetensors.tmp.999999999") << "x";  // a dead writer's
  std::ofstream(dir.path / ".ember-dead01") << "x";   // a dead writer's (today's temporary name)
  std::ofstream(dir.path / ".ember-live01") << "x";   // a save that may still be going on
  for (const char* dead : {".ckpt-0000000031.safetensors.tmp.999999999", ".ember-dead01"})
    fs::last_write_time(dir.path / dead, fs::file_time_type::clock::now() - std::chrono::minutes(5));
  std::vector<std::string> all = list_checkpoints(dir.path.string());
  ASSERT_EQ(all.size(), 4u);
  EXPECT_EQ(all.front(), checkpoint_path(dir.path.string(), 4));
  EXPECT_EQ(all.back(), checkpoint_path(dir.path.string(), 1000));
  prune_checkpoints(dir.path.string(), 2);
  all = list_checkpoints(dir.path.string());
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0], checkpoint_path(dir.path.string(), 30));
  EXPECT_FALSE(fs::exists(dir.path / ".ckpt-0000000031.safetensors.tmp.999999999"));
  EXPECT_FALSE(fs::exists(dir.path / ".ember-dead01"));
  EXPECT_TRUE(fs::exists(dir.path / ".ember-live01")) << "a temporary file younger than a minute was removed";
  EXPECT_TRUE(fs::exists(dir.path / "ckpt-12.safetensors"));
}

}  // namespace
