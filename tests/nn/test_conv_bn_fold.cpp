// The inference plan's conv2d+batchnorm2d unit (src/nn/conv_bn.cpp): the unit is formed (not in
// training plans), its outputs equal the unfused plan's (PlanOptions::fuse false) for random weights
// and random running statistics under every ISA, after new parameters are loaded (no stale fold),
// frozen or not, in train mode, and for the resnet18 built-in.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "ember/ember.h"

namespace ember::test {
namespace {

// conv (K out channels, a 'same' kernel R x R, fields) -> batchnorm2d (fields) -> relu -> flatten
// -> linear over [4, 9, 9].
Model conv_bn(const std::string& conv, const std::string& bn = "", int K = 6, int R = 3) {
  return parse_model_json(R"({"input": [4, 9, 9], "classes": 5, "layers": [
      {"type": "conv2d", "out_channels": )" + std::to_string(K) + R"(, "kernel": )" + std::to_string(R) +
      R"(, "padding": )" + std::to_string(R / 2) + R"(, "name": "c")" + conv + R"(},
      {"type": "batchnorm2d", "name": "bn")" + bn + R"(}, {"type": "relu"}, {"type": "flatten"},
      {"type": "linear", "out_features": 5}]})", "conv-bn");
}

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// Random parameters, and non-trivial BN scales, shifts and running statistics (var in [0.2, 2]).
template <class T>
void randomize(Plan& p, uint32_t seed) {
  p.init_params(seed);
  std::mt19937 g(seed);
  std::uniform_real_distribution<double> u(0, 1);
  T* w = static_cast<T*>(p.param_data());
  for (const ParamInfo& q : p.params()) {
    for (size_t i = q.offset; i < q.offset + q.size; ++i) {
      if (ends_with(q.name, "running_var")) w[i] = T(0.2 + 1.8 * u(g));
      else if (ends_with(q.name, "running_mean")) w[i] = T(u(g) - 0.5);
      else if (q.role == ParamRole::norm_scale) w[i] = T(0.5 + u(g));
      else if (q.role == ParamRole::norm_shift || (ends_with(q.name, ".bias") && q.shape.size() == 1)) w[i] = T(0.6 * u(g) - 0.3);
    }
  }
}

template <class T>
void copy_params(Plan& to, const Plan& from) {
  std::memcpy(to.param_data(), from.param_data(), from.param_count() * sizeof(T));
}

template <class T>
std::vector<double> run(Plan& p, int n, uint32_t seed) {
  const size_t D = size_t(p.model().in_c) * p.model().in_h * p.model().in_w;
  std::mt19937 g(seed);
  std::normal_distribution<double> nd(0, 1);
  for (size_t i = 0; i < size_t(n) * D; ++i) static_cast<T*>(p.input())[i] = T(nd(g));
  p.forward(n);
  size_t out = 1;
  for (int d : p.output_dims()) out *= size_t(d);
  const T* y = static_cast<const T*>(p.output());
  return std::vector<double>(y, y + size_t(n) * out);
}

// max |a - b| / max |b|.
double rel_diff(const std::vector<double>& a, const std::vector<double>& b) {
  double scale = 0, diff = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    scale = std::max(scale, std::abs(b[i]));
    diff = std::max(diff, std::abs(a[i] - b[i]));
  }
  return scale > 0 ? diff / scale : diff;
}

PlanOptions inference(int batch, const std::string& isa, DType dt = DType::f32, bool fuse = true) {
  PlanOptions o;
  o.batch = batch;
  o.isa = isa;
  o.dtype = dt;
  o.fuse = fuse;
  o.training = false;
  o.threads = 2;
  return o;
}

// A unit whose kinds start with `kinds` ("conv2d+batchnorm2d" also finds conv2d+batchnorm2d+relu).
bool has_unit(const Plan& p, const std::string& kinds) {
  for (const UnitInfo& u : p.units())
    if (u.name.rfind(kinds + " (", 0) == 0 || u.name.rfind(kinds + "+", 0) == 0) return true;
  return false;
}
int count_units(const Plan& p, const std::string& kinds) {
  int n = 0;
  for (const UnitInfo& u : p.units()) n += u.name.rfind(kinds + " (", 0) == 0;
  return n;
}

// The fused plan against the unfused one, same parameters and input; returns the relative difference
// (f32: up to 1.7e-6 seen, resnet18 included; the tests allow 1e-5).
template <class T>
double fused_vs_unfused(const Model& m, const PlanOptions& o, uint32_t seed, bool frozen = false) {
  PlanOptions u = o;
  u.fuse = false;
  Plan a(m, o), b(m, u);
  EXPECT_TRUE(has_unit(a, "conv2d+batchnorm2d"));
  EXPECT_FALSE(has_unit(b, "conv2d+batchnorm2d"));
  randomize<T>(b, seed);
  copy_params<T>(a, b);
  if (frozen) a.freeze(), b.freeze();
  return rel_diff(run<T>(a, o.batch, seed + 1), run<T>(b, o.batch, seed + 1));
}

const char* const kIsas[] = {"", "scalar", "avx2"};  // "": the best the CPU has (EMBER_ISA aside)

TEST(PlanConvBnFold, MatchesTheUnfusedPlanForEveryConvShape) {
  struct Case {
    std::string conv;
    int K, R;
  };
  const Case cases[] = {{"", 6, 3}, {R"(, "bias": false)", 6, 3}, {R"(, "stride": 2, "bias": false)", 6, 3},
                        {R"(, "groups": 2)", 6, 3}, {R"(, "groups": 4, "stride": 2)", 8, 3}, {R"(, "groups": 4)", 4, 3},
                        {"", 6, 1}, {R"(, "stride": 2)", 5, 7}};
  for (const char* isa : kIsas)
    for (const Case& c : cases)
      for (int batch : {1, 3}) {
        const double d = fused_vs_unfused<float>(conv_bn(c.conv, "", c.K, c.R), inference(batch, isa), 7);
        EXPECT_LE(d, 1e-5) << "isa '" << isa << "' conv" << c.conv << " batch " << batch;
      }
}

TEST(PlanConvBnFold, WithoutAffineFrozenAndF64) {
  for (const char* isa : kIsas) {
    EXPECT_LE(fused_vs_unfused<float>(conv_bn("", R"(, "affine": false)"), inference(2, isa), 3), 1e-5) << isa;
    EXPECT_LE(fused_vs_unfused<float>(conv_bn(R"(, "stride": 2)"), inference(2, isa), 4, true), 1e-5) << isa;
  }
  EXPECT_LE(fused_vs_unfused<double>(conv_bn(R"(, "bias": false)"), inference(2, "", DType::f64), 5), 1e-12);
  EXPECT_LE(fused_vs_unfused<double>(conv_bn("", R"(, "eps": 0.5)"), inference(2, "", DType::f64), 6, true), 1e-12);
}

// Training plans keep the two units (batch statistics); a conv read by something else too is not folded.
TEST(PlanConvBnFold, OnlyInferencePlansFoldAndOnlyASoleReader) {
  PlanOptions t;
  t.batch = 2;
  Plan train(conv_bn(""), t);
  EXPECT_FALSE(has_unit(train, "conv2d+batchnorm2d"));
  EXPECT_TRUE(has_unit(train, "batchnorm2d"));
  Model two = parse_model_json(R"({"input": [2, 5, 5], "classes": 3, "layers": [
      {"type": "conv2d", "out_channels": 2, "kernel": 3, "padding": 1, "name": "c"},
      {"type": "batchnorm2d", "name": "bn"}, {"type": "add", "inputs": ["c", "bn"]}, {"type": "flatten"},
      {"type": "linear", "out_features": 3}]})", "two-readers");
  Plan inf(two, inference(2, ""));
  EXPECT_FALSE(has_unit(inf, "conv2d+batchnorm2d"));
}

// New weights and running statistics written after the plan is built (and after a first forward)
// through param_data() change the output as they change the unfused plan's: the fold is made again
// (Bufs::param_version), frozen or not.
TEST(PlanConvBnFold, NewParametersAfterCompileAreSeen) {
  const Model m = conv_bn(R"(, "bias": false)");
  Plan a(m, inference(2, "")), b(m, inference(2, "", DType::f32, false));
  randomize<float>(b, 11);
  copy_params<float>(a, b);
  const std::vector<double> first = run<float>(a, 2, 1);
  EXPECT_LE(rel_diff(first, run<float>(b, 2, 1)), 1e-5);
  for (int round = 0; round < 2; ++round) {
    randomize<float>(b, 20 + round);  // conv weight, BN scale, shift, mean and var all new
    if (round == 1) a.thaw();
    copy_params<float>(a, b);
    if (round == 1) a.freeze();
    const std::vector<double> now = run<float>(a, 2, 1);
    EXPECT_GT(rel_diff(now, first), 1e-2) << round;
    EXPECT_LE(rel_diff(now, run<float>(b, 2, 1)), 1e-5) << round;
  }
  // Only the running variance changes: seen too.
  a.thaw();
  float* w = static_cast<float*>(a.param_data());
  float* v = static_cast<float*>(b.param_data());
  for (const ParamInfo& q : a.params())
    if (q.name == "bn.running_var")
      for (size_t i = q.offset; i < q.offset + q.size; ++i) w[i] = v[i] = 4 * v[i];
  EXPECT_LE(rel_diff(run<float>(a, 2, 1), run<float>(b, 2, 1)), 1e-5);
}

// Train mode on an inference plan uses the batch's statistics: the unit runs the two unfolded.
TEST(PlanConvBnFold, TrainModeRunsUnfolded) {
  const Model m = conv_bn(R"(, "stride": 2)");
  Plan a(m, inference(4, "")), b(m, inference(4, "", DType::f32, false));
  randomize<float>(b, 30);
  copy_params<float>(a, b);
  a.set_train_mode(true);
  b.set_train_mode(true);
  EXPECT_EQ(run<float>(a, 4, 2), run<float>(b, 4, 2));
}

// resnet18 (every conv is followed by a BN) on 32x32 inputs, batch 2: 20 folded units, 17 of them
// with their post-ops: the stem's and each block's first conv with the ReLU after (9), each block's
// residual add and ReLU in its last conv (8: the second conv of the 5 plain blocks, the downsample
// conv of the 3 others, whose second conv folds alone).
TEST(PlanConvBnFold, Resnet18MatchesTheUnfusedPlan) {
  Model m = builtin_model("resnet18");
  m.in_h = m.in_w = 32;
  Plan a(m, inference(2, ""));
  EXPECT_EQ(count_units(a, "conv2d+batchnorm2d"), 3);
  EXPECT_EQ(count_units(a, "conv2d+batchnorm2d+relu"), 9);
  EXPECT_EQ(count_units(a, "conv2d+batchnorm2d+add+relu"), 8);
  EXPECT_EQ(count_units(a, "add") + count_units(a, "relu"), 0);
  for (const char* isa : kIsas) EXPECT_LE(fused_vs_unfused<float>(m, inference(2, isa), 40), 1e-5) << isa;
  EXPECT_LE(fused_vs_unfused<float>(m, inference(2, ""), 41, true), 1e-5);
}

// A residual add after the BN (the other addend made before the unit: another conv's output, or
// the model's input; either operand order) and an activation after it or after the BN are the
// conv's post-ops, in either layout and on every kernel set, batch 1 (the few-samples GEMM path)
// and 3: the unfused plan's outputs; f64 within 1e-12. A Sigmoid after the add (a formula
// activation of the table) fuses like a ReLU.
Model residual(const std::string& addend, bool swap, const std::string& act, int R = 3) {
  const std::string in = swap ? "[\"" + addend + "\", \"bn\"]" : "[\"bn\", \"" + addend + "\"]";
  return parse_model_json(R"({"input": [4, 9, 9], "classes": 5, "layers": [
      {"type": "conv2d", "out_channels": 4, "kernel": 3, "padding": 1, "name": "c0"},
      {"type": "batchnorm2d", "name": "bn0"}, {"type": "relu", "name": "r0"},
      {"type": "conv2d", "out_channels": 4, "kernel": )" + std::to_string(R) + R"(, "padding": )" +
                              std::to_string(R / 2) + R"(, "name": "c"},
      {"type": "batchnorm2d", "name": "bn"}, {"type": "add", "inputs": )" + in + R"(, "name": "sum"},
      {"type": ")" + act + R"(", "name": "a"}, {"type": "flatten"}, {"type": "linear", "out_features": 5}]})",
                          "residual");
}

TEST(PlanConvBnFold, ResidualAddAndActivationArePostOps) {
  for (const char* layout : {"nchw", "nhwc"})
    for (const char* isa : kIsas)
      for (int batch : {1, 3})
        for (const auto& [addend, swap, act, R] : {std::tuple{"r0", false, "relu", 3}, std::tuple{"r0", true, "sigmoid", 1}}) {
          SCOPED_TRACE(std::string(layout) + " isa '" + isa + "' batch " + std::to_string(batch) + " " + act);
          PlanOptions o = inference(batch, isa);
          o.layout = layout;
          const Model m = residual(addend, swap, act, R);
          Plan a(m, o);
          EXPECT_EQ(count_units(a, "conv2d+batchnorm2d+relu"), 1);
          EXPECT_EQ(count_units(a, std::string("conv2d+batchnorm2d+add+") + act), 1);
          EXPECT_LE(fused_vs_unfused<float>(m, o, 60), 1e-5);
        }
  // The model's input as the other addend: a conv of 4 channels onto the 4-channel input.
  const Model in = parse_model_json(R"({"input": [4, 9, 9], "classes": 5, "layers": [
      {"type": "conv2d", "out_channels": 4, "kernel": 3, "padding": 1, "name": "c"},
      {"type": "batchnorm2d", "name": "bn"}, {"type": "add", "inputs": ["input", "bn"]}, {"type": "relu"},
      {"type": "flatten"}, {"type": "linear", "out_features": 5}]})", "input-residual");
  Plan a(in, inference(2, ""));
  EXPECT_EQ(count_units(a, "conv2d+batchnorm2d+add+relu"), 1);
  EXPECT_LE(fused_vs_unfused<float>(in, inference(2, ""), 61), 1e-5);
  EXPECT_LE(fused_vs_unfused<double>(residual("r0", true, "relu"), inference(2, "", DType::f64), 62), 1e-12);
  EXPECT_LE(fused_vs_unfused<double>(in, inference(1, "", DType::f64), 63, true), 1e-12);
}

// An add whose other addend the unit would make itself (the conv's output, read twice) or a node
// after the unit's first makes: not a post-op (the BN folds alone or not at all).
TEST(PlanConvBnFold, AnAddendNotYetMadeIsNoPostOp) {
  const Model later = parse_model_json(R"({"input": [4, 9, 9], "classes": 5, "layers": [
      {"type": "conv2d", "out_channels": 4, "kernel": 3, "padding": 1, "name": "c"},
      {"type": "batchnorm2d", "name": "bn"},
      {"type": "conv2d", "out_channels": 4, "kernel": 1, "name": "d", "inputs": ["input"]},
      {"type": "add", "inputs": ["bn", "d"]}, {"type": "relu"},
      {"type": "flatten"}, {"type": "linear", "out_features": 5}]})", "later-addend");
  Plan a(later, inference(2, ""));
  EXPECT_EQ(count_units(a, "conv2d+batchnorm2d"), 1);
  EXPECT_EQ(count_units(a, "add"), 1);
  EXPECT_LE(fused_vs_unfused<float>(later, inference(2, ""), 64), 1e-5);
}

// A bf16 plan rounds the folded weight instead of the raw one: close, not equal.
TEST(PlanConvBnFold, Bf16PlanIsClose) {
  PlanOptions o = inference(2, "");
  o.precision = Precision::bf16;
  EXPECT_LE(fused_vs_unfused<float>(conv_bn("", "", 16, 1), o, 50), 2e-2);  // a 1x1 conv: the bf16 GEMM (3e-3 seen)
}

}  // namespace
}  // namespace ember::test
