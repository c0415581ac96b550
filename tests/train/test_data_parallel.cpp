// Data-parallel training in one process: train() with gradient blocks, and "ranks" as threads
// joined by an in-process GradReducer that sums in the same pairwise tree as src/dist's (a + b,
// lower rank first). Weights after 1, 2 and 4 ranks are bit-identical; blocks change the sums
// against the one-pass step; loss gradients of blocks divide by the whole batch.
#include <gtest/gtest.h>

#include <barrier>
#include <cstring>
#include <thread>
#include <vector>

#include "ember/ember.h"
#include "train/toy.h"

using namespace ember;

namespace {

Dataset toy(int n, uint32_t seed) { return toy::dataset(n, seed); }
using toy::small_cnn;

// N ranks' shared state: each rank's gradient block and stats, met at barriers.
struct Group {
  explicit Group(int n) : n(n), meet(n), grads(size_t(n)), stats(size_t(n)) {}
  int n;
  std::barrier<> meet;
  std::vector<float*> grads;
  std::vector<double*> stats;
};

// Sums like src/dist's tree: level d adds the partials of ranks r and r ^ d (lower first).
class ThreadReducer final : public GradReducer {
 public:
  ThreadReducer(Group& g, int rank, Plan& plan) : g_(g), rank_(rank), plan_(plan) {}
  int rank() const override { return rank_; }
  int ranks() const override { return g_.n; }
  void grads_final(int first, int count) override { final_ += count; }
  void finish(const std::function<void(size_t, size_t)>& update) override {
    EXPECT_EQ(final_, int(plan_.params().size()));
    final_ = 0;
    g_.grads[size_t(rank_)] = static_cast<float*>(plan_.grad_data());
    tree(g_.grads, plan_.param_count());
    update(0, plan_.param_count());
  }
  void start_sum(double* v, int n) override {
    g_.stats[size_t(rank_)] = v;
    n_ = n;
  }
  void wait_sum() override {
    g_.meet.arrive_and_wait();
    std::vector<double> total(size_t(n_), 0.0);
    for (int r = 0; r < g_.n; ++r)
      for (int i = 0; i < n_; ++i) total[size_t(i)] += g_.stats[size_t(r)][i];
    g_.meet.arrive_and_wait();
    std::memcpy(g_.stats[size_t(rank_)], total.data(), sizeof(double) * size_t(n_));
  }

 private:
  template <class T>
  void tree(const std::vector<T*>& v, size_t count) {
    std::vector<T> mine(v[size_t(rank_)], v[size_t(rank_)] + count);
    for (int d = 1; d < g_.n; d *= 2) {
      g_.meet.arrive_and_wait();  // every rank's partial of this level is in place
      const T* other = v[size_t(rank_ ^ d)];
      std::vector<T> sum(count);
      for (size_t e = 0; e < count; ++e) sum[e] = (rank_ & d) == 0 ? mine[e] + other[e] : other[e] + mine[e];
      g_.meet.arrive_and_wait();  // all have read
      mine = sum;
      std::memcpy(v[size_t(rank_)], mine.data(), sizeof(T) * count);
    }
    g_.meet.arrive_and_wait();
  }
  Group& g_;
  int rank_;
  Plan& plan_;
  int final_ = 0, n_ = 0;
};

struct RankRun {
  std::vector<float> weights;
  double last_loss = 0;
};

// Trains on `ranks` threads (0: one process, no reducer) with K blocks of a batch of 32.
RankRun train_with(int ranks, int blocks) {
  const Dataset tr = toy(150, 1), te = toy(40, 2);  // 5 batches of 32 (the last of 22)
  TrainConfig cfg;
  cfg.epochs = 2, cfg.seed = 7, cfg.schedule.lr = 3e-3, cfg.evaluate = true;
  cfg.batch = 32, cfg.blocks = blocks;
  PlanOptions po;
  po.batch = blocks > 0 ? (32 + blocks - 1) / blocks : 32;
  po.threads = 1;
  const int n = std::max(ranks, 1);
  Group g(n);
  std::vector<RankRun> runs(static_cast<size_t>(n));
  auto rank_main = [&](int r) {
    Plan plan(small_cnn(), po);
    plan.init_params(3);
    ThreadReducer red(g, r, plan);
    TrainConfig c = cfg;
    if (ranks > 0) c.reducer = &red;
    const TrainResult res = train(plan, tr, te, c, nullptr);
    const float* w = static_cast<const float*>(static_cast<const Plan&>(plan).param_data());
    runs[size_t(r)].weights.assign(w, w + plan.param_count());
    runs[size_t(r)].last_loss = res.last.train_loss;
  };
  std::vector<std::thread> ts;
  for (int r = 0; r < n; ++r) ts.emplace_back(rank_main, r);
  for (auto& t : ts) t.join();
  for (int r = 1; r < n; ++r) EXPECT_TRUE(runs[size_t(r)].weights == runs[0].weights) << "rank " << r << " drifted";
  return runs[0];
}

TEST(DataParallel, FourBlocksGiveTheSameWeightsOn1_2And4Ranks) {
  const RankRun one = train_with(0, 4);
  for (int ranks : {1, 2, 4}) {
    const RankRun r = train_with(ranks, 4);
    EXPECT_TRUE(r.weights == one.weights) << ranks << " ranks";
    EXPECT_NEAR(r.last_loss, one.last_loss, 1e-9 * std::abs(one.last_loss)) << ranks << " ranks";
  }
}

TEST(DataParallel, BlocksSumInAnotherOrderThanOnePassButTrainTheSameModel) {
  const RankRun blocks = train_with(0, 4), plain = train_with(0, 0);
  EXPECT_FALSE(blocks.weights == plain.weights);
  double diff = 0, norm = 0;
  for (size_t i = 0; i < plain.weights.size(); ++i) {
    diff += std::abs(double(blocks.weights[i]) - plain.weights[i]);
    norm += std::abs(double(plain.weights[i]));
  }
  EXPECT_LT(diff, 1e-2 * norm) << "blocks must give the same gradient up to rounding (loss divided by the whole batch)";
}

TEST(DataParallel, BlocksThatDoNotSpreadEvenlyAreRefused) {
  Plan plan(small_cnn(), PlanOptions{});
  TrainConfig cfg;
  cfg.blocks = 3, cfg.batch = 32;
  try {
    train(plan, toy(40, 1), toy(10, 2), cfg, nullptr);
    FAIL() << "3 blocks on one rank: not a power of two";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("power of two"), std::string::npos) << e.what();
  }
}

}  // namespace
