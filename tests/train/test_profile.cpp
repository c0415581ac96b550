// The profiler against the plan: profiling changes no result (weights bit-identical with and
// without it), every unit's forward and backward is counted once per step on the main track, the
// pool's other threads get their own spans, and the summary's rows add up to the step time.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "ember/model.h"
#include "ember/plan.h"
#include "ember/profile.h"
#include "ember/train.h"

namespace ember {
namespace {

Dataset random_set(int n, uint32_t seed) {
  Dataset d;
  d.count = n, d.rows = 28, d.cols = 28;
  std::mt19937 rng(seed);
  d.images.resize(size_t(n) * 784);
  d.labels.resize(size_t(n));
  for (auto& v : d.images) v = uint8_t(rng() & 0xFF);
  for (auto& v : d.labels) v = uint8_t(rng() % 10);
  return d;
}

std::vector<float> trained_params(bool profile, Profiler** keep, Plan** plan_out, std::unique_ptr<Plan>& hold,
                                  std::unique_ptr<Profiler>& prof_hold) {
  PlanOptions po;
  po.batch = 16;
  po.threads = 2;
  hold = std::make_unique<Plan>(builtin_model("mnist-cnn"), po);
  Plan& plan = *hold;
  plan.init_params(3);
  if (profile) {
    prof_hold = std::make_unique<Profiler>(plan.threads(), int(plan.units().size()));
    plan.set_profiler(prof_hold.get());
  }
  TrainConfig cfg;
  cfg.epochs = 2;
  cfg.evaluate = true;
  const Dataset tr = random_set(80, 1), te = random_set(20, 2);
  train(plan, tr, te, cfg, nullptr);
  const float* w = static_cast<const float*>(plan.param_data());
  if (keep) *keep = prof_hold.get();
  if (plan_out) *plan_out = &plan;
  return std::vector<float>(w, w + plan.param_count());
}

TEST(Profiler, ChangesNoResultAndCountsEveryUnit) {
  std::unique_ptr<Plan> p0, p1;
  std::unique_ptr<Profiler> h0, h1;
  const auto plain = trained_params(false, nullptr, nullptr, p0, h0);
  Profiler* prof = nullptr;
  Plan* plan = nullptr;
  auto worker_calls = [&] {
    int64_t calls = 0;
    for (int ph = 0; ph < kPhases; ++ph)
      for (int u = -1; u < int(plan->units().size()); ++u) calls += prof->total(1, Phase(ph), u).calls;
    return calls;
  };
  // The pool's caller takes the parts of a worker that has not woken up: with the other vCPU busy
  // (ctest runs two tests at once) a short run can leave pool thread 1 without a single part, so
  // the profiled run is repeated (at most three times) until it shows up.
  auto profiled = trained_params(true, &prof, &plan, p1, h1);
  for (int attempt = 1; attempt < 3 && worker_calls() == 0; ++attempt) profiled = trained_params(true, &prof, &plan, p1, h1);
  ASSERT_EQ(plain.size(), profiled.size());
  EXPECT_EQ(std::memcmp(plain.data(), profiled.data(), plain.size() * sizeof(float)), 0)
      << "profiling changed the trained weights";

  const int64_t steps = 2 * 5;  // 80 samples in batches of 16, two epochs
  EXPECT_EQ(prof->steps(), steps);
  EXPECT_EQ(prof->samples(), 160);
  const auto& units = plan->units();
  ASSERT_EQ(units.size(), 5u);  // fused conv unit, flatten, linear, relu, linear
  for (int u = 0; u < int(units.size()); ++u) {
    EXPECT_EQ(prof->total(0, Phase::forward, u).calls, steps) << units[size_t(u)].name;
    // The first unit has parameters, so it runs backward (weight gradients) too.
    EXPECT_EQ(prof->total(0, Phase::backward, u).calls, steps) << units[size_t(u)].name;
  }
  EXPECT_EQ(prof->total(0, Phase::step, -1).calls, steps);
  EXPECT_EQ(prof->total(0, Phase::data, -1).calls, steps);
  EXPECT_EQ(prof->total(0, Phase::eval, -1).calls, 2);  // evaluation is one span per epoch, not steps
  EXPECT_GT(worker_calls(), 0) << "pool thread 1 recorded nothing in three runs";
  EXPECT_EQ(prof->dropped(), 0);

  const ProfileSummary s = summarize_profile(*plan, *prof, 100.0);
  double pct = 0;
  for (const auto& r : s.rows) pct += r.pct_step;
  EXPECT_NEAR(pct, 100.0, 1e-6);
  for (const auto& r : s.rows)
    if (r.phase == "forward" && r.layer.find("conv2d") != std::string::npos) {
      EXPECT_GT(r.gflops, 0);
    }
}

// Units' FLOPs (what the table's GFLOP/s divide) add up to the plan's, a multiply-add counted as 2.
TEST(Profiler, UnitFlopsMatchThePlan) {
  PlanOptions po;
  po.batch = 4;
  Plan plan(builtin_model("mnist-cnn"), po);
  double fwd = 0, train_flops = 0;
  for (const UnitInfo& u : plan.units()) fwd += u.flops_fwd, train_flops += u.flops_fwd + u.flops_bwd;
  EXPECT_DOUBLE_EQ(fwd, plan.flops_per_sample(false));
  EXPECT_DOUBLE_EQ(train_flops, plan.flops_per_sample(true));
  // conv 1->32 5x5 on 28x28 (pad 2): 2 * 28*28 * 32 * 25; no input gradient for the first layer.
  EXPECT_DOUBLE_EQ(plan.units()[0].flops_fwd, 2.0 * 28 * 28 * 32 * 25);
  EXPECT_DOUBLE_EQ(plan.units()[0].flops_bwd, plan.units()[0].flops_fwd);
  EXPECT_DOUBLE_EQ(plan.units()[2].flops_bwd, 2 * plan.units()[2].flops_fwd);  // fc1: dW and dX
}

TEST(Profiler, SpansBeyondCapacityAreAggregatedNotKept) {
  Profiler p(1, 2, 4);
  for (int i = 0; i < 10; ++i) p.record(0, Phase::forward, 1, i * 10, i * 10 + 5);
  EXPECT_EQ(p.spans(0).size(), 4u);
  EXPECT_EQ(p.dropped(), 6);
  EXPECT_EQ(p.total(0, Phase::forward, 1).calls, 10);
  EXPECT_EQ(p.total(0, Phase::forward, 1).ns, 50);
  p.record(0, Phase::forward, 7, 0, 1);   // out of range: ignored, not a crash
  p.record(3, Phase::forward, 0, 0, 1);
  EXPECT_EQ(p.total(0, Phase::forward, 0).calls, 0);
}

}  // namespace
}  // namespace ember
