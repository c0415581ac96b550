// bf16 plans (PlanOptions::precision): gradients against an f64 plan within bf16's tolerance and
// measurably not fp32's (the bf16 products really run), the fast tables against the scalar
// reference table (the same rounded operands, other summation orders), a training run's loss
// curve against fp32's (close, not equal), and what a bf16 plan refuses.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <utility>
#include <random>
#include <string>
#include <vector>

#include "ember/ember.h"
#include "kernels/kernels.h"
#include "plan_util.h"

namespace ember::test {
namespace {

Model small_cnn() {
  Model m;
  m.name = "small-cnn";
  m.conv2d(8, 3, 1, 1).relu().maxpool2d(2).conv2d(16, 3, 1, 1).relu().flatten().linear(32).relu().linear(10);
  return m;
}

Plan make_plan(const Model& m, int batch, Precision prec, DType dt = DType::f32, const char* isa = "",
               Denormals dn = Denormals::flush) {
  PlanOptions o;
  o.batch = batch, o.threads = 2, o.precision = prec, o.dtype = dt, o.isa = isa, o.denormals = dn;
  Plan p(m, o);
  p.init_params(1);
  return p;
}

// Per parameter tensor, ||a - b|| / ||ref|| (L2 over the tensor's gradient); the worst tensor's.
// b null: ref itself (f64).
double grad_gap(const Plan& a, const Plan* b, const Plan& ref) {
  const float* ga = static_cast<const float*>(const_cast<Plan&>(a).grad_data());
  const float* gb = b ? static_cast<const float*>(const_cast<Plan*>(b)->grad_data()) : nullptr;
  const double* gr = static_cast<const double*>(const_cast<Plan&>(ref).grad_data());
  double worst = 0;
  for (const ParamInfo& p : ref.params()) {
    double norm = 0, diff = 0;
    for (size_t i = p.offset; i < p.offset + p.size; ++i) {
      const double d = double(ga[i]) - (gb ? double(gb[i]) : gr[i]);
      norm += gr[i] * gr[i], diff += d * d;
    }
    EXPECT_GT(norm, 0) << p.name;
    if (norm > 0) worst = std::max(worst, std::sqrt(diff / norm));
  }
  return worst;
}

// The three plans of one model on the same batch: fp32, bf16 and the f64 reference.
struct Trio {
  Plan p32, pbf, p64;
  double loss32, lossbf, loss64;
};
Trio run_trio(const Model& m, int n, const char* isa = "") {
  Trio t{make_plan(m, n, Precision::fp32, DType::f32, isa), make_plan(m, n, Precision::bf16, DType::f32, isa),
         make_plan(m, n, Precision::fp32, DType::f64), 0, 0, 0};
  t.loss32 = pass(t.p32, n, 5);
  t.lossbf = pass(t.pbf, n, 5);
  t.loss64 = pass(t.p64, n, 5);
  return t;
}

// bf16 rounds each operand by up to 2^-9 of itself; a gradient passes several such products per
// layer, so the error grows with depth: about 10 % (relative L2, the worst tensor) through
// convnext-seed's 24 blocks at initialisation, against 1e-6 for fp32. The CNNs' first layer
// multiplies the rounded image too, which moves a few ReLU and max-pool decisions of these
// 3-sample batches: 8-12 % on their first two layers' tensors, under 1 % on the last.
TEST(PlanBf16, GradientsAreWithinBf16ToleranceOfF64AndNotFp32s) {
  Model cx = builtin_model("convnext-seed");
  cx.in_h = cx.in_w = 32;  // the same layers on a smaller image
  const double tol[] = {0.2, 0.2, 0.25};
  int k = 0;
  for (const Model& m : {builtin_model("mnist-cnn"), small_cnn(), cx}) {
    SCOPED_TRACE(m.name);
    Trio t = run_trio(m, 3);
    EXPECT_EQ(t.pbf.precision(), Precision::bf16);
    EXPECT_NEAR(t.lossbf, t.loss64, 1e-2 * std::abs(t.loss64));
    const double gap_bf = grad_gap(t.pbf, nullptr, t.p64), gap_32 = grad_gap(t.p32, nullptr, t.p64);
    EXPECT_LT(gap_bf, tol[k++]);
    EXPECT_LT(gap_32, 1e-5);
    EXPECT_GT(gap_bf, 100 * gap_32) << "the bf16 plan's products are not rounded to bf16";
  }
}

// The scalar table multiplies the same bf16-rounded operands (sgemm_bf16_ref): a fast table's bf16
// plan differs from it by summation order only, far below the gap to fp32.
TEST(PlanBf16, FastTablesAgreeWithTheScalarReferenceTable) {
  for (const char* isa : {"avx2", "avx512"}) {
    if (!isa_supported(isa == std::string("avx2") ? Isa::avx2 : Isa::avx512)) continue;
    SCOPED_TRACE(isa);
    Trio fast = run_trio(small_cnn(), 4, isa), ref = run_trio(small_cnn(), 4, "scalar");
    const double gap_tables = grad_gap(fast.pbf, &ref.pbf, ref.p64), gap_prec = grad_gap(ref.pbf, &ref.p32, ref.p64);
    EXPECT_LT(gap_tables, 1e-4);
    EXPECT_GT(gap_prec, 20 * gap_tables);
    EXPECT_NEAR(fast.lossbf, ref.lossbf, 1e-5);
  }
}

// Three epochs of the same run in both precisions: the bf16 curve follows fp32's within a few
// percent, differs from it (not the same arithmetic), and learns.
TEST(PlanBf16, LossCurveFollowsFp32) {
  const Dataset tr = synthetic(640, 11), te = synthetic(200, 12);
  std::vector<double> curve[2];
  double acc[2] = {0, 0};
  for (int k = 0; k < 2; ++k) {
    Plan plan = make_plan(small_cnn(), 32, k ? Precision::bf16 : Precision::fp32);
    TrainConfig cfg;
    cfg.epochs = 3;
    const TrainResult r = train(plan, tr, te, cfg, [&](const EpochMetrics& m) {
      curve[k].push_back(m.train_loss);
      return true;
    });
    acc[k] = r.last.test_acc;
  }
  ASSERT_EQ(curve[0].size(), 3u);
  ASSERT_EQ(curve[1].size(), 3u);
  bool differs = false;
  for (size_t e = 0; e < 3; ++e) {
    EXPECT_NEAR(curve[1][e], curve[0][e], 0.05 + 0.1 * curve[0][e]) << "epoch " << e + 1;
    differs = differs || curve[1][e] != curve[0][e];
  }
  EXPECT_TRUE(differs);
  EXPECT_LT(curve[1].back(), curve[1].front());
  EXPECT_GT(acc[1], 0.9);
  EXPECT_NEAR(acc[1], acc[0], 0.05);
}

// count_subnormal: every table against the reference, on the edges of the subnormal range.
TEST(PlanBf16, SubnormalCountsMatchTheReference) {
  std::vector<float> x(1000);
  std::mt19937 g(3);
  const float edge[] = {0.f, -0.f, 1.17549435e-38f, -1.17549435e-38f, 1.1754942e-38f, 1e-45f, -1e-45f, 1e-40f,
                        INFINITY, NAN, 1.f, -3e-39f};
  for (size_t i = 0; i < x.size(); ++i) x[i] = i % 3 ? edge[g() % 12] : std::ldexp(float(g() % 1000) - 500, -int(g() % 160));
  size_t want = 0;
  for (float v : x) want += std::fpclassify(v) == FP_SUBNORMAL;
  ASSERT_GT(want, 100u);
  for (Isa isa : {Isa::scalar, Isa::avx2, Isa::avx512, Isa::amx}) {
    if (!isa_supported(isa)) continue;
    for (size_t n : {size_t(0), size_t(1), size_t(17), x.size()}) {
      size_t w = 0;
      for (size_t i = 0; i < n; ++i) w += std::fpclassify(x[i]) == FP_SUBNORMAL;
      EXPECT_EQ(kernels_for(isa).count_subnormal(x.data(), n), w) << isa_name(isa) << " n " << n;
    }
  }
}

// The flush counter: a last Linear with weights near 2^-126 makes the gradient reaching the
// Linear before it subnormal (the scalar table's products keep subnormals; VDPBF16PS would flush
// them itself), which the count sees; with ordinary weights it counts none. Under --denormals
// keep: in the default flush mode the fp32 arithmetic flushes them first (the count stays 0, as
// the next test checks).
TEST(PlanBf16, FlushCountSeesSubnormalGradients) {
  Model m;
  m.name = "mlp";
  m.in_c = 1, m.in_h = 4, m.in_w = 4, m.num_classes = 10;
  m.flatten().linear(32).relu().linear(16).relu().linear(10);
  Plan p = make_plan(m, 8, Precision::bf16, DType::f32, "scalar", Denormals::keep);
  p.set_flush_counting(true);
  pass(p, 8, 3);
  const Plan::FlushCount normal = p.flush_count();
  EXPECT_EQ(normal.flushed, 0);
  EXPECT_EQ(normal.checked, 8 * (32 + 16 + 10));  // each Linear's output gradient
  p.reset_flush_count();
  const ParamInfo& w3 = p.params()[4];
  ASSERT_EQ(w3.name, "5.weight");
  float* w = static_cast<float*>(p.param_data()) + w3.offset;
  for (size_t i = 0; i < w3.size; ++i) w[i] = (i % 2 ? 1 : -1) * 3e-38f;
  pass(p, 8, 3);
  EXPECT_GT(p.flush_count().flushed, 0);
  EXPECT_LE(p.flush_count().flushed, 8 * 32);
  p.set_flush_counting(false);
  p.reset_flush_count();
  pass(p, 8, 3);
  EXPECT_EQ(p.flush_count().checked, 0) << "counting is off";
}

// In the default flush mode the same weights give no subnormal gradient to count: FTZ makes the
// products below 2^-126 zero before bf16 rounding could.
TEST(PlanBf16, FlushModeLeavesNoSubnormalGradients) {
  Model m;
  m.name = "mlp";
  m.in_c = 1, m.in_h = 4, m.in_w = 4, m.num_classes = 10;
  m.flatten().linear(32).relu().linear(16).relu().linear(10);
  Plan p = make_plan(m, 8, Precision::bf16, DType::f32, "scalar");
  p.set_flush_counting(true);
  const ParamInfo& w3 = p.params()[4];
  float* w = static_cast<float*>(p.param_data()) + w3.offset;
  for (size_t i = 0; i < w3.size; ++i) w[i] = (i % 2 ? 1 : -1) * 3e-38f;
  pass(p, 8, 3);
  EXPECT_GT(p.flush_count().checked, 0);
  EXPECT_EQ(p.flush_count().flushed, 0);
}

// The bf16 weight copy follows the masters: after training steps (the optimizer rewrites it) and
// after weights written through param_data() (rounded again before the next pass), a plan's
// outputs equal those of a fresh plan given the same fp32 weights, bit for bit.
TEST(PlanBf16, WeightCopyFollowsTheMasters) {
  for (OptimizerKind kind : {OptimizerKind::Adam, OptimizerKind::Momentum}) {
    PlanOptions o;
    o.batch = 8, o.threads = 2, o.precision = Precision::bf16, o.optimizer.kind = kind;
    Plan a(small_cnn(), o), b(small_cnn(), o);
    a.init_params(1);
    for (int s = 0; s < 3; ++s) {
      pass(a, 8, 10 + s);
      a.optimizer_step(0.01);
    }
    auto same_outputs = [&](const char* when) {
      const size_t P = a.param_count();
      std::memcpy(b.param_data(), std::as_const(a).param_data(), P * sizeof(float));
      const double la = pass(a, 8, 99), lb = pass(b, 8, 99);
      EXPECT_EQ(la, lb) << when;
      const float* ya = static_cast<const float*>(a.output());
      const float* yb = static_cast<const float*>(b.output());
      EXPECT_EQ(0, std::memcmp(ya, yb, 8 * 10 * sizeof(float))) << when;
    };
    same_outputs("after optimizer steps");
    float* w = static_cast<float*>(a.param_data());
    for (size_t i = 0; i < a.param_count(); i += 3) w[i] *= -1.5f;
    same_outputs("after writing the weights");
    a.init_params(7);
    same_outputs("after init_params");
  }
}

// conv -> LayerNorm([C, H, W]) -> 1x1 conv (fused into one unit) -> ReLU -> Linear, at hw x hw:
// 8x8 runs the 1x1 conv as per-sample GEMMs, 4x4 as one GEMM over the batch, 1x1 as [N, C].
Model norm_conv(int hw) {
  Model m;
  m.name = "norm-conv";
  m.in_c = 3, m.in_h = m.in_w = hw;
  m.conv2d(12, 1).named("a");
  LayerSpec ln;
  ln.kind = LayerKind::LayerNorm, ln.name = "n", ln.norm_dims = 3;
  m.layers.push_back(ln);
  m.conv2d(10, 1).named("b").relu().flatten().linear(10);
  return m;
}

// A bf16 plan's fused LayerNorm -> 1x1 conv stores the normalised tensor in bf16 (no recompute in
// backward) and its GEMMs read it: the same products as the unfused units (the norm's fp32 output,
// rounded as the GEMM packs it), so weights after training steps and inference outputs match the
// unfused plan bit for bit; the memory report names the bf16 tensor.
TEST(PlanBf16, FusedNormConvStoresTheNormalisedTensorInBf16) {
  for (int hw : {8, 4, 1}) {
    SCOPED_TRACE("hw " + std::to_string(hw));
    PlanOptions o;
    o.batch = 6, o.threads = 2, o.precision = Precision::bf16, o.optimizer.kind = OptimizerKind::Adam;
    PlanOptions u = o;
    u.fuse = false;
    Plan a(norm_conv(hw), o), b(norm_conv(hw), u);
    a.init_params(3), b.init_params(3);
    for (int s = 0; s < 3; ++s) {
      EXPECT_EQ(pass(a, 6, 20 + s), pass(b, 6, 20 + s));
      a.optimizer_step(0.01), b.optimizer_step(0.01);
    }
    const size_t P = a.param_count();
    ASSERT_EQ(P, b.param_count());
    EXPECT_EQ(0, std::memcmp(std::as_const(a).param_data(), std::as_const(b).param_data(), P * sizeof(float)));
    bool named = false;
    for (const BufferInfo& bi : a.buffers()) named |= bi.name.rfind("bf16 normalised input", 0) == 0;
    EXPECT_TRUE(named);
    PlanOptions i = o, iu = u;  // inference plans: the bf16 tensor in scratch
    i.training = iu.training = false;
    Plan c(norm_conv(hw), i), d(norm_conv(hw), iu);
    std::memcpy(c.param_data(), std::as_const(a).param_data(), P * sizeof(float));
    std::memcpy(d.param_data(), std::as_const(a).param_data(), P * sizeof(float));
    auto x = randn(size_t(6) * 3 * hw * hw, 77);
    for (Plan* p : {&c, &d}) {
      for (size_t k = 0; k < x.size(); ++k) static_cast<float*>(p->input())[k] = float(x[k]);
      p->forward(6);
    }
    EXPECT_EQ(0, std::memcmp(c.output(), d.output(), 6 * 10 * sizeof(float)));
  }
  PlanOptions f;  // an fp32 plan recomputes instead
  f.batch = 6, f.threads = 2;
  Plan p(norm_conv(8), f);
  for (const BufferInfo& bi : p.buffers()) EXPECT_EQ(bi.name.find("bf16 normalised"), std::string::npos) << bi.name;
}

TEST(PlanBf16, RefusesF64AndNamesBadText) {
  PlanOptions o;
  o.dtype = DType::f64, o.precision = Precision::bf16;
  try {
    Plan p(builtin_model("mxnet-mlp"), o);
    FAIL() << "an f64 bf16 plan was built";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("precision"), std::string::npos) << e.what();
  }
  EXPECT_EQ(parse_precision("bf16", "x"), Precision::bf16);
  EXPECT_EQ(parse_precision("fp32", "x"), Precision::fp32);
  try {
    parse_precision("fp16\nrm -rf", "--precision");
    FAIL();
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_EQ(m.rfind("--precision: ", 0), 0u) << m;
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  }
}

}  // namespace
}  // namespace ember::test
