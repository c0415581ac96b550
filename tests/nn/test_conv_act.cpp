// The channel-last conv2d+<activation> unit (src/nn/conv_act.cpp): a 1x1 conv followed by each
// activation of the kernel table runs as one unit whose loss, output and gradients are the bits of
// the unfused nhwc plan (fuse off) at 1, 2 and 3 threads (2 and 3: the same bits) on every kernel set, and within
// rounding of an f64 plan; the unit is one row named "conv2d+<act>".
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "ember/ember.h"
#include "plan_util.h"

namespace ember::test {
namespace {

const char* const kActs[] = {"relu", "gelu", "gelu-tanh", "hardswish", "silu", "fastswish", "sigmoid", "tanh"};

// conv 1x1 (16) -> conv 1x1 (32) -> act -> conv 1x1 (16) -> pool -> linear: the middle pair fuses
// and its input gradient is needed. 32x32 maps: 1024 rows a sample.
Model model(const std::string& act) {
  return parse_model_json(R"({"input": [8, 32, 32], "classes": 10, "layers": [
      {"type": "conv2d", "out_channels": 16, "kernel": 1}, {"type": "conv2d", "out_channels": 32, "kernel": 1},
      {"type": ")" + act + R"("}, {"type": "conv2d", "out_channels": 16, "kernel": 1},
      {"type": "globalavgpool"}, {"type": "linear", "out_features": 10}]})", "conv-act");
}

PlanOptions options(bool fuse, int threads, DType dt = DType::f32, const std::string& isa = "") {
  PlanOptions o;
  o.batch = 4, o.threads = threads, o.dtype = dt, o.isa = isa, o.layout = "nhwc", o.fuse = fuse;
  return o;
}

int count_units(const Plan& p, const std::string& kinds) {
  int n = 0;
  for (const UnitInfo& u : p.units()) n += u.name.rfind(kinds + " (", 0) == 0;
  return n;
}

// Loss, output and parameter gradients of one pass of n samples, as bytes.
struct Result {
  double loss;
  std::vector<char> out, grad;
};
template <class T>
Result run(Plan& p, const Plan& from, int n) {
  std::memcpy(p.param_data(), from.param_data(), from.param_count() * sizeof(T));
  Result r;
  r.loss = pass(p, n, 5);
  const char* o = static_cast<const char*>(p.output());
  r.out.assign(o, o + size_t(n) * 10 * sizeof(T));
  const char* g = static_cast<const char*>(p.grad_data());
  r.grad.assign(g, g + p.param_count() * sizeof(T));
  return r;
}

Plan seeded(const Model& m, const PlanOptions& o) {
  Plan p(m, o);
  p.init_params(3);
  float* w = static_cast<float*>(p.param_data());  // random biases: a misplaced one shows
  auto r = randn(p.param_count(), 9);
  for (const ParamInfo& q : p.params())
    if (q.role != ParamRole::weight)
      for (size_t i = q.offset; i < q.offset + q.size; ++i) w[i] = float(0.5 * r[i]);
  return p;
}

// 4 samples (4096 rows: the chunked epilogue at 1 to 3 threads) and 1 (the unfused order at 2, 3).
TEST(ConvAct, SameBitsAsTheUnfusedPlanForAnyThreads) {
  for (const char* act : kActs)
    for (const char* isa : {"", "avx2", "scalar"}) {
      const Model m = model(act);
      const Plan ref = seeded(m, options(false, 1, DType::f32, isa));
      for (int n : {4, 1}) {
        Plan unfused2(m, options(false, 2, DType::f32, isa));
        const Result want2 = run<float>(unfused2, ref, n);
        for (int threads : {1, 2, 3}) {
          Plan unfused(m, options(false, threads, DType::f32, isa));
          const Result want = run<float>(unfused, ref, n);
          Plan fused(m, options(true, threads, DType::f32, isa));
          EXPECT_EQ(count_units(fused, std::string("conv2d+") + act), 1) << act;
          const Result got = run<float>(fused, ref, n);
          const std::string what = std::string(act) + " isa '" + isa + "' threads " + std::to_string(threads) +
                                   " n " + std::to_string(n);
          EXPECT_EQ(got.loss, want.loss) << what;
          EXPECT_TRUE(got.out == want.out) << what;
          EXPECT_TRUE(got.grad == want.grad) << what;
          // The unit is thread-count invariant: 2 and 3 threads give 2's bits (1 thread differs
          // in the plan's other layers, fused or not).
          if (threads > 1) EXPECT_TRUE(got.grad == want2.grad && got.out == want2.out) << what;
        }
      }
    }
}

// The fused f32 plan's gradients within fp32 rounding of the fused and the unfused f64 plans'.
TEST(ConvAct, MatchesF64) {
  for (const char* act : kActs) {
    const Model m = model(act);
    Plan p32 = seeded(m, options(true, 2));
    Plan f64(m, options(true, 2, DType::f64)), u64(m, options(false, 2, DType::f64));
    EXPECT_EQ(count_units(f64, std::string("conv2d+") + act), 1);
    double* w = static_cast<double*>(f64.param_data());
    for (size_t i = 0; i < p32.param_count(); ++i) w[i] = static_cast<const float*>(p32.param_data())[i];
    std::memcpy(u64.param_data(), f64.param_data(), f64.param_count() * sizeof(double));
    const double l32 = pass(p32, 4, 5), l64 = pass(f64, 4, 5), lu = pass(u64, 4, 5);
    EXPECT_NEAR(l32, l64, 1e-5 * std::abs(l64)) << act;
    EXPECT_NEAR(lu, l64, 1e-12 * std::abs(l64)) << act;
    expect_grads_match_f64(p32, f64, 2e-4, act);
    expect_grads_match_f64(p32, u64, 2e-4, act);
  }
}

// Inference (no backward): GELU's pre-activation is not kept, the output is the same.
TEST(ConvAct, InferencePlanKeepsNoPreActivation) {
  const Model m = model("gelu");
  PlanOptions o = options(true, 2);
  o.training = false;
  Plan inf(m, o), train = seeded(m, options(true, 2));
  std::memcpy(inf.param_data(), train.param_data(), train.param_count() * sizeof(float));
  auto x = randn(4 * 8 * 32 * 32, 2);
  for (Plan* p : {&inf, &train}) {
    for (size_t i = 0; i < x.size(); ++i) static_cast<float*>(p->input())[i] = float(x[i]);
    p->forward(4);
  }
  // The inference plan reads its weights packed once (issue 56) and its Linear runs the dense
  // GEMM where the training plan's takes the sparse-input kernels: the same products summed in
  // another order, equal within fp32 rounding (1e-5 relative).
  const float* a = static_cast<const float*>(inf.output());
  const float* b = static_cast<const float*>(train.output());
  for (int i = 0; i < 4 * 10; ++i) EXPECT_NEAR(a[i], b[i], 1e-5f * (1 + std::abs(b[i]))) << i;
}

}  // namespace
}  // namespace ember::test
