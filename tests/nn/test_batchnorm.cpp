// batchnorm2d (src/nn/ops/batchnorm2d.cpp): gradients against finite differences in train and
// eval mode, the running statistics against PyTorch's formulas computed here from the inputs, the
// optimizer and weight decay leaving them alone, who may write them (frozen and inference plans,
// first_nonfinite_output's rerun), and checkpoints, safetensors (num_batches_tracked as I64) and
// ONNX keeping them; the channel-last functions equal the NCHW ones on transposed data.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <unistd.h>

#include "ember/ember.h"
#include "ember/onnx.h"
#include "gradcheck.h"
#include "io/source.h"
#include "kernels/ref/ref_batchnorm_nhwc.h"

namespace ember::test {
namespace {

// conv (1x1) -> batchnorm2d -> relu -> flatten -> linear: the conv's gradient passes through dx.
Model conv_bn(const std::string& bn_fields = "") {
  return parse_model_json(R"({"input": [2, 3, 3], "classes": 4, "layers": [
      {"type": "conv2d", "out_channels": 3, "kernel": 1, "name": "c"},
      {"type": "batchnorm2d", "name": "bn")" + bn_fields + R"(}, {"type": "tanh"}, {"type": "flatten"},
      {"type": "linear", "out_features": 4}]})", "conv-bn");
}
// batchnorm2d first, on the input itself: its batch statistics are the input's.
Model bn_first(const std::string& bn_fields = "") {
  return parse_model_json(R"({"input": [3, 2, 2], "classes": 4, "layers": [
      {"type": "batchnorm2d", "name": "bn")" + bn_fields + R"(}, {"type": "flatten"},
      {"type": "linear", "out_features": 4}]})", "bn-first");
}

const ParamInfo& param(const Plan& p, const std::string& name) {
  for (const ParamInfo& q : p.params())
    if (q.name == name) return q;
  throw Error("no parameter " + name);
}
template <class T>
std::vector<double> values(const Plan& p, const std::string& name) {
  const ParamInfo& q = param(p, name);
  const T* w = static_cast<const T*>(p.param_data()) + q.offset;
  return std::vector<double>(w, w + q.size);
}
template <class T>
void fill_input(Plan& p, int n, uint32_t seed, double shift = 0) {
  const size_t D = size_t(p.model().in_c) * p.model().in_h * p.model().in_w;
  const auto x = randn(size_t(n) * D, seed);
  for (size_t i = 0; i < x.size(); ++i) static_cast<T*>(p.input())[i] = T(x[i] * 1.5 + shift);
  for (int i = 0; i < n; ++i) p.labels()[i] = i % p.model().num_classes;
}

// The channel-last functions (ref_batchnorm_nhwc.h) against the NCHW ones on transposed data, 37
// channels (blocks of 16 and a remainder) split into two ranges as two threads would: train and
// eval forward, the running statistics and both backward forms, without and with the affine.
template <class T>
void nhwc_equals_nchw(double tol) {
  const ref::BatchNorm s{3, 37, 10, 1e-5, 0.1};
  const size_t n = size_t(s.N) * s.C * s.HW;
  const auto cvt = [](const std::vector<double>& v) { return std::vector<T>(v.begin(), v.end()); };
  const auto x = cvt(randn(n, 1, 2.0)), dy = cvt(randn(n, 2)), gamma = cvt(randn(s.C, 3)), beta = cvt(randn(s.C, 4));
  std::vector<T> run0 = cvt(randn(2 * size_t(s.C), 5));
  for (int c = 0; c < s.C; ++c) run0[size_t(s.C + c)] = std::abs(run0[size_t(s.C + c)]) + T(0.5);
  const auto xl = swap_last(x, s.N, s.C, s.HW), dyl = swap_last(dy, s.N, s.C, s.HW);
  for (bool affine : {true, false})
    for (bool train : {true, false}) {
      SCOPED_TRACE(std::string(train ? "train" : "eval") + (affine ? " affine" : ""));
      const T* g = affine ? gamma.data() : nullptr;
      const T* b = affine ? beta.data() : nullptr;
      std::vector<T> y(n), yl(n), st(2 * size_t(s.C)), stl(st.size()), run = run0, runl = run0, dx(n), dxl(n),
          dg(s.C), dgl(s.C), db(s.C), dbl(s.C);
      for (int c0 : {0, 21}) {
        const int c1 = c0 ? s.C : 21;
        if (train) {
          ref::batchnorm2d_train_fwd<T>(y.data(), st.data(), st.data() + s.C, run.data(), x.data(), g, b, s, c0, c1);
          ref::batchnorm2d_train_fwd_nhwc<T>(yl.data(), stl.data(), stl.data() + s.C, runl.data(), xl.data(), g, b, s, c0, c1);
        } else {
          ref::batchnorm2d_eval_fwd<T>(y.data(), st.data(), st.data() + s.C, run.data(), x.data(), g, b, s, c0, c1);
          ref::batchnorm2d_eval_fwd_nhwc<T>(yl.data(), stl.data(), stl.data() + s.C, runl.data(), xl.data(), g, b, s, c0, c1);
        }
        ref::batchnorm2d_bwd<T>(dx.data(), dg.data(), db.data(), dy.data(), x.data(), st.data(), st.data() + s.C, g, s,
                                train, c0, c1);
        ref::batchnorm2d_bwd_nhwc<T>(dxl.data(), dgl.data(), dbl.data(), dyl.data(), xl.data(), stl.data(),
                                     stl.data() + s.C, g, s, train, c0, c1);
      }
      EXPECT_LE(max_rel_diff(swap_last(yl, s.N, s.HW, s.C), y), tol);
      EXPECT_LE(max_rel_diff(stl, st), tol);
      EXPECT_LE(max_rel_diff(runl, run), tol);
      EXPECT_LE(max_rel_diff(swap_last(dxl, s.N, s.HW, s.C), dx), tol);
      EXPECT_LE(max_rel_diff(dgl, dg), tol);
      EXPECT_LE(max_rel_diff(dbl, db), tol);
    }
}
TEST(BatchNormNhwc, EqualsTheNchwFunctionsF64) { nhwc_equals_nchw<double>(1e-15); }
TEST(BatchNormNhwc, EqualsTheNchwFunctionsF32) { nhwc_equals_nchw<float>(1e-6); }

TEST(OpTableBatchNorm, ParametersAreNamedAndRoledAsPyTorch) {
  Plan p(conv_bn(), PlanOptions{});
  std::vector<std::string> names;
  for (const ParamInfo& q : p.params())
    if (q.name.rfind("bn.", 0) == 0) names.push_back(q.name + ":" + param_role_name(q.role));
  EXPECT_EQ(names, (std::vector<std::string>{"bn.weight:norm_scale", "bn.bias:norm_shift", "bn.running_mean:running_stat",
                                             "bn.running_var:running_stat", "bn.num_batches_tracked:running_stat"}));
  EXPECT_TRUE(param(p, "bn.num_batches_tracked").shape.empty());
  p.init_params(3);
  EXPECT_EQ(values<float>(p, "bn.running_mean"), std::vector<double>(3, 0.0));
  EXPECT_EQ(values<float>(p, "bn.running_var"), std::vector<double>(3, 1.0));
  EXPECT_EQ(values<float>(p, "bn.num_batches_tracked"), std::vector<double>(1, 0.0));
  Plan q(conv_bn(R"(, "affine": false)"), PlanOptions{});
  EXPECT_EQ(q.params().size(), p.params().size() - 2);
  EXPECT_THROW(parse_model_json(R"({"layers": [{"type": "batchnorm2d", "momentum": 2}]})", "m.json"), Error);
}

// Every trained parameter's gradient (the conv's passes through batchnorm's dx) against central
// differences, in train mode (through the batch statistics) and eval mode (the running ones).
void gradcheck_mode(bool train, const std::string& fields) {
  PlanOptions o;
  o.batch = 4, o.dtype = DType::f64;
  Plan p(conv_bn(fields), o);
  p.init_params(5);
  double* w = static_cast<double*>(p.param_data());
  const auto noise = randn(p.param_count(), 6, 0.3);
  for (const ParamInfo& q : p.params())
    for (size_t i = q.offset; i < q.offset + q.size; ++i) w[i] += q.name == "bn.running_var" ? std::abs(noise[i]) : noise[i];
  p.set_train_mode(train);
  fill_input<double>(p, 4, 7);
  p.forward(4);
  p.loss(4, true);
  p.backward(4);
  const double* g = static_cast<const double*>(p.grad_data());
  for (const ParamInfo& q : p.params()) {
    if (!param_trained(q.role)) {
      for (size_t i = q.offset; i < q.offset + q.size; ++i) EXPECT_EQ(g[i], 0.0) << q.name;
      continue;
    }
    std::vector<double> v(w + q.offset, w + q.offset + q.size), a(g + q.offset, g + q.offset + q.size);
    expect_gradient((train ? "train " : "eval ") + q.name, v, a, [&] {
      std::copy(v.begin(), v.end(), w + q.offset);
      p.forward(4);
      return p.loss(4, false);
    }, 1e-6, 1e-7);
    std::copy(v.begin(), v.end(), w + q.offset);
  }
}
TEST(GradcheckBatchNorm, TrainModeThroughTheBatchStatistics) { gradcheck_mode(true, ""); }
TEST(GradcheckBatchNorm, EvalModeThroughTheRunningStatistics) { gradcheck_mode(false, ""); }
TEST(GradcheckBatchNorm, WithoutAffine) {
  gradcheck_mode(true, R"(, "affine": false)");
  gradcheck_mode(false, R"(, "affine": false, "eps": 0.01)");
}

// Two train-mode forwards move the running statistics as PyTorch does (computed here from the
// inputs): r = (1 - m) r + m * batch statistic, the variance unbiased; the outputs use the biased
// one; then eval mode normalises with the running statistics.
template <class T>
void running_stats_after_two_steps(double tol) {
  const double m = 0.3, eps = 1e-3;
  PlanOptions o;
  o.batch = 5, o.dtype = std::is_same_v<T, double> ? DType::f64 : DType::f32;
  Plan p(bn_first(R"(, "momentum": 0.3, "eps": 0.001)"), o);
  p.init_params(2);
  std::vector<double> rm(3, 0.0), rv(3, 1.0);
  for (int step = 0; step < 2; ++step) {
    const int n = 5 - step;  // a partial batch too
    fill_input<T>(p, n, 20 + step, step);
    p.forward(n);
    const T* x = static_cast<const T*>(p.input());
    for (int c = 0; c < 3; ++c) {
      double s = 0, ss = 0;
      for (int i = 0; i < n; ++i)
        for (int k = 0; k < 4; ++k) s += double(x[(i * 3 + c) * 4 + k]);
      const double mean = s / (4 * n);
      for (int i = 0; i < n; ++i)
        for (int k = 0; k < 4; ++k) ss += std::pow(double(x[(i * 3 + c) * 4 + k]) - mean, 2);
      rm[size_t(c)] = (1 - m) * rm[size_t(c)] + m * mean;
      rv[size_t(c)] = (1 - m) * rv[size_t(c)] + m * ss / (4 * n - 1);
    }
    for (int c = 0; c < 3; ++c) {
      EXPECT_NEAR(values<T>(p, "bn.running_mean")[size_t(c)], rm[size_t(c)], tol) << "step " << step;
      EXPECT_NEAR(values<T>(p, "bn.running_var")[size_t(c)], rv[size_t(c)], tol) << "step " << step;
    }
    EXPECT_EQ(values<T>(p, "bn.num_batches_tracked")[0], step + 1.0);
  }
  // Eval mode: y = (x - running mean) / sqrt(running var + eps) * gamma + beta, seen through a
  // linear layer whose weight picks one input.
  p.set_train_mode(false);
  T* w = static_cast<T*>(p.param_data());
  const ParamInfo& lw = param(p, "2.weight");
  const ParamInfo& lb = param(p, "2.bias");
  for (size_t i = 0; i < lw.size; ++i) w[lw.offset + i] = T(i == 4 * 1 + 2 ? 1 : 0);  // class 0 reads channel 1, position 2
  for (size_t i = 0; i < lb.size; ++i) w[lb.offset + i] = T(0);
  const std::vector<double> gamma = values<T>(p, "bn.weight"), beta = values<T>(p, "bn.bias");
  p.forward(1);
  const double x = double(static_cast<const T*>(p.input())[4 + 2]);
  const double want = (x - rm[1]) / std::sqrt(rv[1] + eps) * gamma[1] + beta[1];
  EXPECT_NEAR(double(static_cast<const T*>(p.output())[0]), want, tol * 10);
  EXPECT_EQ(values<T>(p, "bn.num_batches_tracked")[0], 2.0);  // eval mode does not count
}
TEST(PlanBatchNorm, RunningStatisticsFollowPyTorchsFormulaF64) { running_stats_after_two_steps<double>(1e-12); }
TEST(PlanBatchNorm, RunningStatisticsFollowPyTorchsFormulaF32) { running_stats_after_two_steps<float>(1e-5); }

// With every gradient 1 (the running statistics' too, which backward never writes so) and L2 /
// weight decay on, an optimizer step moves the trained parameters and leaves the running
// statistics as they were (they move only in forward).
TEST(PlanBatchNorm, OptimizerAndWeightDecayLeaveRunningStatisticsAlone) {
  for (OptimizerKind k : {OptimizerKind::SGD, OptimizerKind::Momentum, OptimizerKind::AdamW}) {
    PlanOptions o;
    o.batch = 4, o.optimizer.kind = k, o.optimizer.l2 = 0.5, o.optimizer.weight_decay = 0.5;
    Plan p(conv_bn(), o);
    p.init_params(1);
    float* w = static_cast<float*>(p.param_data());
    for (size_t i = 0; i < p.param_count(); ++i) w[i] = 2.f;
    std::fill_n(static_cast<float*>(p.grad_data()), p.param_count(), 1.f);
    p.optimizer_step(0.1);
    for (const ParamInfo& q : p.params()) {
      if (param_trained(q.role)) {
        EXPECT_LT(w[q.offset], 2.f) << q.name;
        continue;
      }
      for (size_t i = q.offset; i < q.offset + q.size; ++i) EXPECT_EQ(w[i], 2.f) << q.name;
    }
  }
}

// backward_step (Adam's updates overlapping backward) and a training run: after each step the
// running statistics are what that step's forward left, whatever the gradients.
TEST(PlanBatchNorm, BackwardStepDoesNotUpdateRunningStatistics) {
  for (OptimizerKind k : {OptimizerKind::Adam, OptimizerKind::SGD}) {
    PlanOptions o;
    o.batch = 4, o.optimizer.kind = k, o.optimizer.weight_decay = 0.1, o.optimizer.l2 = 0.1, o.threads = 2;
    Plan p(conv_bn(), o);
    p.init_params(1);
    for (int step = 0; step < 3; ++step) {
      fill_input<float>(p, 4, 30 + step);
      p.forward(4);
      const auto rm = values<float>(p, "bn.running_mean"), rv = values<float>(p, "bn.running_var");
      p.loss(4, true);
      ASSERT_EQ(p.backward_step(4, 0.05), -1);
      EXPECT_EQ(values<float>(p, "bn.running_mean"), rm);
      EXPECT_EQ(values<float>(p, "bn.running_var"), rv);
      EXPECT_EQ(values<float>(p, "bn.num_batches_tracked")[0], step + 1.0);
    }
  }
}

// Only a training plan's train-mode forward writes them: not eval mode, not a frozen plan, not an
// inference plan, not first_nonfinite_output's second forward of a step.
TEST(PlanBatchNorm, WhoWritesRunningStatistics) {
  PlanOptions o;
  o.batch = 4;
  Plan p(conv_bn(), o);
  p.init_params(1);
  fill_input<float>(p, 4, 40);
  p.forward(4);
  const auto after = values<float>(p, "bn.running_mean");
  EXPECT_NE(after, std::vector<double>(3, 0.0));
  EXPECT_EQ(p.first_nonfinite_output(4), -1);
  EXPECT_EQ(values<float>(p, "bn.running_mean"), after);
  EXPECT_EQ(values<float>(p, "bn.num_batches_tracked")[0], 1.0);
  p.set_train_mode(false);
  p.forward(4);
  EXPECT_EQ(values<float>(p, "bn.running_mean"), after);
  p.set_train_mode(true);
  p.freeze();
  p.forward(4);
  EXPECT_EQ(values<float>(p, "bn.running_mean"), after);
  p.thaw();
  o.training = false;
  Plan inf(conv_bn(), o);
  inf.init_params(1);
  fill_input<float>(inf, 4, 40);
  inf.set_train_mode(true);
  inf.forward(4);
  EXPECT_EQ(values<float>(inf, "bn.running_mean"), std::vector<double>(3, 0.0));
  // Train mode with one value per channel is refused, as PyTorch does.
  Plan one1(parse_model_json(R"({"input": [3, 1, 1], "classes": 4, "layers": [{"type": "batchnorm2d"}, {"type": "flatten"},
      {"type": "linear", "out_features": 4}]})", "m"), PlanOptions{});
  try {
    one1.forward(1);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("more than one value per channel"), std::string::npos) << e.what();
  }
}

std::string temp_path(const std::string& name) { return (std::filesystem::temp_directory_path() / name).string(); }

// A checkpoint keeps the running statistics; a resumed run goes on bit for bit.
TEST(CheckpointBatchNorm, ResumeKeepsRunningStatisticsBitForBit) {
  PlanOptions o;
  o.batch = 4, o.optimizer.kind = OptimizerKind::Adam;
  Plan a(conv_bn(), o), b(conv_bn(), o);
  a.init_params(3), b.init_params(9);
  auto steps = [](Plan& p, int first, int count) {
    for (int s = first; s < first + count; ++s) {
      fill_input<float>(p, 4, 50 + s);
      p.forward(4);
      p.loss(4, true);
      p.backward_step(4, 0.01);
    }
  };
  steps(a, 0, 3);
  const std::string path = temp_path("ember-bn-ckpt-" + std::to_string(::getpid()) + ".safetensors");
  save_checkpoint(a, TrainState{}, "{}", path);
  load_checkpoint(b, path);
  std::remove(path.c_str());
  auto all = [](const Plan& p) { return std::vector<float>(static_cast<const float*>(p.param_data()),
                                                           static_cast<const float*>(p.param_data()) + p.param_count()); };
  EXPECT_EQ(all(a), all(b));
  EXPECT_EQ(values<float>(b, "bn.num_batches_tracked")[0], 3.0);
  steps(a, 3, 2), steps(b, 3, 2);
  EXPECT_EQ(all(a), all(b));
}

// save_weights writes num_batches_tracked as I64 shape [] (torchvision's), load_weights reads it
// back (and F32 still loads).
TEST(SafetensorsBatchNorm, NumBatchesTrackedIsI64) {
  Plan a(conv_bn(), PlanOptions{});
  a.init_params(3);
  static_cast<float*>(a.param_data())[param(a, "bn.num_batches_tracked").offset] = 12345.f;
  for (WeightDtype dt : {WeightDtype::f32, WeightDtype::bf16}) {
    const std::string path = temp_path("ember-bn-w-" + std::to_string(::getpid()) + ".safetensors");
    save_weights(a, path, dt);
    const io::FileSource src(path);
    const SafetensorsHeader h = io::read_safetensors_header(src);
    const SafetensorsEntry* e = h.find("bn.num_batches_tracked");
    ASSERT_NE(e, nullptr);
    EXPECT_EQ(e->dtype, "I64");
    EXPECT_TRUE(e->shape.empty());
    EXPECT_EQ(e->end - e->begin, 8u);
    EXPECT_EQ(h.find("bn.running_var")->dtype, dt == WeightDtype::bf16 ? "BF16" : "F32");
    Plan b(conv_bn(), PlanOptions{});
    b.init_params(4);
    load_weights(b, path);
    std::remove(path.c_str());
    EXPECT_EQ(values<float>(b, "bn.num_batches_tracked")[0], 12345.0);
    if (dt == WeightDtype::f32) {
      EXPECT_EQ(values<float>(b, "bn.running_var"), values<float>(a, "bn.running_var"));
    }
  }
  // I64 is refused for a parameter that is not a count.
  std::vector<io::TensorOut> t = io::weight_tensors(a);
  for (io::TensorOut& x : t) x.i64 = x.name == "bn.running_mean" || x.i64;
  const std::string path = temp_path("ember-bn-bad-" + std::to_string(::getpid()) + ".safetensors");
  io::write_safetensors(path, t, io::weight_metadata(a));
  Plan b(conv_bn(), PlanOptions{});
  try {
    load_weights(b, path);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tensor 'bn.running_mean'.dtype: expected F32, F64, F16 or BF16, found I64"),
              std::string::npos) << e.what();
  }
  std::remove(path.c_str());
}

// ONNX: the eval-mode model as BatchNormalization; imported back as batchnorm2d with its
// statistics (num_batches_tracked 0), the same eval outputs.
// Exports plan a (after two train-mode forwards) and imports it back as an inference plan b:
// returns b's model; b's eval-mode outputs match a's within 1e-5.
OnnxImport export_import(Plan& a, PlanOptions o) {
  a.init_params(3);
  for (int s = 0; s < 2; ++s) {
    fill_input<float>(a, 3, 60 + s);
    a.forward(3);
  }
  const std::string path = temp_path("ember-bn-" + std::to_string(::getpid()) + ".onnx");
  export_onnx(a, path);
  OnnxImport m = import_onnx(path);
  std::remove(path.c_str());
  o.training = false;
  Plan b(m.model, o);
  load_onnx_weights(b, m);
  a.set_train_mode(false);
  fill_input<float>(a, 3, 70), fill_input<float>(b, 3, 70);
  a.forward(3), b.forward(3);
  for (int i = 0; i < 12; ++i)
    EXPECT_NEAR(static_cast<const float*>(b.output())[i], static_cast<const float*>(a.output())[i], 1e-5);
  return m;
}

// A batchnorm2d that no conv feeds is exported as BatchNormalization and imported back as one.
TEST(OnnxBatchNorm, ExportAndImportTheEvalModel) {
  PlanOptions o;
  o.batch = 3;
  Plan a(bn_first(R"(, "eps": 0.001, "momentum": 0.2)"), o);
  const OnnxImport m = export_import(a, o);
  const LayerSpec* bn = nullptr;
  for (const LayerSpec& s : m.model.layers)
    if (s.kind == LayerKind::BatchNorm2d) bn = &s;
  ASSERT_NE(bn, nullptr);
  EXPECT_NEAR(bn->eps, 1e-3, 1e-9);
  EXPECT_EQ(bn->momentum, 0.2);
}

// conv2d -> batchnorm2d is exported as one Conv with the running statistics folded in (a bias
// added), as PyTorch's eval-mode export does: the import has no batchnorm2d, the same outputs.
TEST(OnnxBatchNorm, ExportFoldsTheBatchNormIntoTheConvBeforeIt) {
  PlanOptions o;
  o.batch = 3;
  Plan a(conv_bn(R"(, "eps": 0.001, "momentum": 0.2)"), o);
  const OnnxImport m = export_import(a, o);
  for (const LayerSpec& s : m.model.layers) EXPECT_NE(s.kind, LayerKind::BatchNorm2d);
  EXPECT_EQ(m.model.layers[0].kind, LayerKind::Conv2d);
  EXPECT_TRUE(m.model.layers[0].bias);
}

}  // namespace
}  // namespace ember::test
