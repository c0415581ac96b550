// The ConvNeXt nodes inside whole plans: LayerNorm (trailing dims, per-element affine),
// LayerNorm2d, global average pooling, layer scale, zero padding, grouped 7x7 'same' convolution:
// every parameter's gradient against double finite differences, f32 against f64 at 1 and 2
// threads, their PyTorch names and starting values.
#include <cstring>

#include "ember/ember.h"
#include "gradcheck.h"
#include "nn/plan_util.h"

namespace ember::test {
namespace {

LayerSpec node(LayerKind k, const std::string& name = "") {
  LayerSpec s;
  s.kind = k;
  s.name = name;
  return s;
}

// zeropad -> patchify conv "stem.0" -> LayerNorm([C, H, W]) "stem.1" -> LayerNorm([H, W]) "post" ->
// block: grouped 7x7 'same' conv with a channel multiplier, LayerNorm2d, 1x1, GELU, 1x1, layer
// scale, stochastic depth (p 0.3), residual add -> global average pool -> LayerNorm(C) -> Linear. (No norm over [H, W] after
// the block: it would cancel per-channel shifts and scales, leaving their gradients 0.)
Model convnext_like() {
  Model m;
  m.name = "convnext-like";
  m.in_c = 2, m.in_h = 6, m.in_w = 6;
  LayerSpec pad = node(LayerKind::ZeroPad2d);
  pad.pad_h = pad.pad_w = 1;
  m.layers.push_back(pad);
  m.conv2d(3, 2, 2).named("stem.0");  // 8x8 -> 4x4
  m.layers.push_back(node(LayerKind::LayerNorm, "stem.1"));
  LayerSpec ln2 = node(LayerKind::LayerNorm, "post");
  ln2.norm_dims = 2;
  ln2.eps = 1e-6;
  m.layers.push_back(ln2);
  m.conv2d(6, 7, 1, 0, 3).named("blk.dw");
  m.layers.back().same = true;
  m.layers.push_back(node(LayerKind::LayerNorm2d, "blk.norm"));
  m.conv2d(6, 1).named("blk.pw1").act(LayerKind::GELU).conv2d(3, 1).named("blk.pw2");
  LayerSpec ls = node(LayerKind::LayerScale, "blk");
  ls.scale_init = 0.5;
  m.layers.push_back(ls);
  m.drop_path(0.3).named("blk.sd");
  m.add({"post", "blk.sd"});
  m.layers.push_back(node(LayerKind::GlobalAvgPool));
  m.layers.push_back(node(LayerKind::LayerNorm, "out.2"));
  m.linear(10).named("out.3");
  return m;
}


// Moves every parameter off its constant start (LayerNorm 1/0, layer scale) so that gradients of
// the affine terms and of the normalised inputs are all exercised.
template <class T>
void perturb(Plan& p, uint32_t seed) {
  T* w = static_cast<T*>(p.param_data());
  auto r = randn(p.param_count(), seed, 0.3);
  for (size_t i = 0; i < p.param_count(); ++i) w[i] += T(r[i]);
}

TEST(ConvNextNodes, NamesShapesAndStartingValuesFollowPyTorch) {
  PlanOptions o;
  o.batch = 2;
  Plan plan(convnext_like(), o);
  plan.init_params(1);
  std::vector<std::string> names;
  for (const ParamInfo& p : plan.params()) names.push_back(p.name);
  EXPECT_EQ(names, (std::vector<std::string>{"stem.0.weight", "stem.0.bias", "stem.1.weight", "stem.1.bias",
                                             "post.weight", "post.bias", "blk.dw.weight", "blk.dw.bias",
                                             "blk.norm.weight", "blk.norm.bias", "blk.pw1.weight", "blk.pw1.bias",
                                             "blk.pw2.weight", "blk.pw2.bias", "blk.layer_scale", "out.2.weight",
                                             "out.2.bias", "out.3.weight", "out.3.bias"}));
  const auto& ps = plan.params();
  EXPECT_EQ(ps[2].shape, (std::vector<int>{3, 4, 4}));  // LayerNorm([C, H, W])
  EXPECT_EQ(ps[4].shape, (std::vector<int>{4, 4}));     // dims 2: [H, W]
  EXPECT_EQ(ps[6].shape, (std::vector<int>{6, 1, 7, 7}));  // groups 3, 2 outputs per group
  EXPECT_EQ(ps[8].shape, (std::vector<int>{6}));
  EXPECT_EQ(ps[14].shape, (std::vector<int>{3, 1, 1}));
  const float* w = static_cast<const float*>(plan.param_data());
  EXPECT_EQ(w[ps[2].offset], 1.f);
  EXPECT_EQ(w[ps[3].offset + 5], 0.f);
  EXPECT_EQ(w[ps[14].offset + 2], 0.5f);
  EXPECT_NE(w[ps[0].offset], 0.f);  // convolutions keep the random initialiser
}

TEST(ConvNextNodes, EveryParameterGradchecksInDouble) {
  PlanOptions o;
  o.batch = 3;
  o.dtype = DType::f64;
  Plan plan(convnext_like(), o);
  plan.init_params(2);
  perturb<double>(plan, 3);
  const int n = 2;
  pass(plan, n, 4, 3, 1);
  double* w = static_cast<double*>(plan.param_data());
  const double* g = static_cast<const double*>(plan.grad_data());
  for (const ParamInfo& p : plan.params()) {
    std::vector<double> vals(w + p.offset, w + p.offset + p.size), grads(g + p.offset, g + p.offset + p.size);
    expect_gradient(p.name, vals, grads, [&] {
      std::memcpy(w + p.offset, vals.data(), p.size * sizeof(double));
      plan.forward(n);
      return plan.loss(n, false);
    }, 1e-6, 1e-5, std::max<size_t>(1, p.size / 60));
    std::memcpy(w + p.offset, vals.data(), p.size * sizeof(double));
  }
}

TEST(ConvNextNodes, F32AgreesWithF64AtOneAndTwoThreads) {
  for (int threads : {1, 2}) {
    PlanOptions o32, o64;
    o32.batch = o64.batch = 5;
    o32.threads = threads;
    o64.dtype = DType::f64;
    Plan p32(convnext_like(), o32), p64(convnext_like(), o64);
    p32.init_params(6);
    p64.init_params(6);
    perturb<float>(p32, 7);
    perturb<double>(p64, 7);
    const double l32 = pass(p32, 5, 8, 3, 1), l64 = pass(p64, 5, 8, 3, 1);
    EXPECT_NEAR(l32, l64, 1e-5 * std::abs(l64));
    expect_grads_match_f64(p32, p64, 2e-4, "threads " + std::to_string(threads));
  }
}

// A training plan runs LayerNorm2d -> conv as one unit that recomputes the normalised tensor in
// backward instead of keeping it: the same bits as the two units (fusion off), in less arena.
TEST(ConvNextNodes, NormConvFusionGivesTheSameBitsInLessMemory) {
  PlanOptions on, off;
  on.batch = off.batch = 4;
  on.threads = off.threads = 2;
  off.fuse = false;
  Model m = convnext_like();
  Plan a(m, on), b(m, off);
  bool fused = false;
  for (const UnitInfo& u : a.units()) fused = fused || u.name.find("layernorm2d+conv2d") != std::string::npos;
  EXPECT_TRUE(fused);
  a.init_params(3);
  perturb<float>(a, 4);
  std::memcpy(b.param_data(), a.param_data(), a.param_count() * sizeof(float));
  for (int step = 0; step < 2; ++step) {
    EXPECT_EQ(pass(a, 4, 10 + step, 3, 1), pass(b, 4, 10 + step, 3, 1));
    EXPECT_EQ(std::memcmp(a.grad_data(), b.grad_data(), a.param_count() * sizeof(float)), 0) << step;
    a.optimizer_step(1e-2);
    b.optimizer_step(1e-2);
  }
  EXPECT_EQ(std::memcmp(a.param_data(), b.param_data(), a.param_count() * sizeof(float)), 0);
  // The unit's scratch holds two normalised tensors; a model of many blocks saves one per block.
  const Model fashion = builtin_model("convnext-fashion");
  on.batch = off.batch = 64;
  EXPECT_LT(Plan(fashion, on).arena_bytes() * 20, Plan(fashion, off).arena_bytes() * 19);
}

// Stochastic depth: in train mode whole samples of the branch are dropped (the rest scaled by
// 1 / (1 - p)), with masks that depend on the seed and the optimizer step, not on threads; in eval
// mode (what evaluate() uses) it is the identity.
TEST(ConvNextNodes, DropPathDropsWholeSamplesInTrainModeOnly) {
  Model m;
  m.in_c = 1, m.in_h = 4, m.in_w = 4;
  m.num_classes = 3;
  m.conv2d(2, 3, 1, 1).drop_path(0.5).flatten().linear(3);
  auto outputs = [&](int threads, bool train, int steps, uint64_t seed) {
    PlanOptions o;
    o.batch = 32, o.threads = threads, o.seed = seed;
    o.optimizer.kind = OptimizerKind::SGD;
    Plan p(m, o);
    p.init_params(1);
    p.set_optimizer_steps(steps);
    p.set_train_mode(train);
    auto x = randn(32 * 16, 2);
    for (size_t i = 0; i < x.size(); ++i) static_cast<float*>(p.input())[i] = float(x[i]);
    p.forward(32);
    const float* y = static_cast<const float*>(p.output());
    const float* bias = static_cast<const float*>(p.param_data()) + p.params()[3].offset;
    std::vector<float> out(y, y + 32 * 3);
    int dropped = 0;  // a dropped sample's Linear sees zeros: its output is the bias
    for (int i = 0; i < 32; ++i) dropped += std::memcmp(y + 3 * i, bias, 3 * sizeof(float)) == 0;
    return std::make_pair(out, dropped);
  };
  const auto [train1, dropped] = outputs(1, true, 0, 1);
  EXPECT_GE(dropped, 6);  // about 16 of 32; 6..26 holds with probability 1 - 1e-4 for a fair draw
  EXPECT_LE(dropped, 26);
  EXPECT_EQ(outputs(2, true, 0, 1).first, train1);     // the same masks at any thread count
  EXPECT_NE(outputs(1, true, 1, 1).first, train1);     // a new mask after an optimizer step
  EXPECT_NE(outputs(1, true, 0, 2).first, train1);     // and for another seed
  const auto [eval, none] = outputs(1, false, 0, 1);
  EXPECT_EQ(none, 0);
  Model plain;  // eval mode: the identity
  plain.in_c = 1, plain.in_h = 4, plain.in_w = 4, plain.num_classes = 3;
  plain.conv2d(2, 3, 1, 1).flatten().linear(3);
  PlanOptions o;
  o.batch = 32, o.training = false;
  Plan q(plain, o);
  q.init_params(1);
  auto x = randn(32 * 16, 2);
  for (size_t i = 0; i < x.size(); ++i) static_cast<float*>(q.input())[i] = float(x[i]);
  q.forward(32);
  EXPECT_EQ(std::vector<float>(static_cast<const float*>(q.output()), static_cast<const float*>(q.output()) + 96), eval);
}

TEST(ConvNextNodes, BadOptionsAreRefusedNamingTheLayer) {
  auto error_of = [](const std::string& layers) {
    try {
      parse_model_json(R"({"input": [1, 8, 8], "layers": [)" + layers + R"(, {"type": "flatten"},
                       {"type": "linear", "out_features": 10}]})", "c.json");
      Model m = parse_model_json(R"({"input": [1, 8, 8], "layers": [)" + layers + R"(, {"type": "flatten"},
                                 {"type": "linear", "out_features": 10}]})", "c.json");
      PlanOptions o;
      o.batch = 1;
      Plan p(m, o);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  EXPECT_NE(error_of(R"({"type": "droppath", "p": 1})").find("layers[0].p"), std::string::npos);
  EXPECT_NE(error_of(R"({"type": "conv2d", "out_channels": 2, "kernel": 4, "padding": "same"})")
                .find("c.json: layers[0] (conv2d): conv2d: padding \"same\" needs stride 1 and an odd kernel"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"type": "layernorm", "eps": 0})").find("c.json: layers[0].eps"), std::string::npos);
  EXPECT_NE(error_of(R"({"type": "layernorm2d", "dims": 1})").find("dims: unknown key"), std::string::npos);
  EXPECT_NE(error_of(R"({"type": "layerscale", "init_value": "x"})").find("layers[0].init_value"), std::string::npos);
  EXPECT_NE(error_of(R"({"type": "zeropad2d"})").find("layers[0].padding: missing"), std::string::npos);
  EXPECT_EQ(error_of(R"({"type": "conv2d", "out_channels": 2, "kernel": 3, "padding": "same"})"), "(accepted)");
}

}  // namespace
}  // namespace ember::test
