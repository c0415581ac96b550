// Op "batchnorm2d": PyTorch's nn.BatchNorm2d over [N, C, H, W]: per-channel weight and bias
// ("affine", default true), then the buffers running_mean, running_var, num_batches_tracked
// (ParamRole::running_stat: never trained nor decayed). Train mode normalises with the batch's
// statistics and moves the running ones ("momentum"); eval mode uses the running ones. Channel-last
// plans run it on rows of C (ref_batchnorm_nhwc.h: the same sums, the same results).
#include <memory>
#include <string>
#include <vector>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "ember/error.h"
#include "kernels/ref/ref_batchnorm.h"
#include "kernels/ref/ref_batchnorm_nhwc.h"
#include "nn/layers.h"
#include "nn/op_table.h"

namespace ember::nn {

std::vector<std::string> norm_affine(OnnxOut& g, const LayerSpec& s, const std::vector<int64_t>& shape);  // layernorm.cpp

OpField eps_field();        // layernorm.cpp
OpField affine_field();

namespace {

// fn(first, end) over channels [0, C), split over the pool (each channel's sums keep one order).
template <class F>
void over_channels(const ops::Exec& e, int C, F&& fn) {
  if (e.pool.size() == 1 || C < 2) return fn(0, C);
  e.pool.run([&](int t) {
    const Range r = split_range(C, t, e.pool.size());
    if (r.end > r.begin) fn(int(r.begin), int(r.end));
  });
}

// The layer. Saved from forward to backward: mean [C], rstd [C] and the mode (1: train) as one
// more element. The running statistics (Bufs::rs) are written only through Bufs::rs_update.
class BatchNorm2d final : public Layer {
 public:
  using Layer::Layer;
  Dims infer(const Dims& in) override { return in_ = out_ = in; }
  std::vector<std::vector<int>> param_shapes() const override {
    std::vector<std::vector<int>> v;
    if (spec_.bias) v = {{in_.c}, {in_.c}};
    v.insert(v.end(), {{in_.c}, {in_.c}, {}});  // num_batches_tracked: a 0-dim tensor, as PyTorch's
    return v;
  }
  bool param_constant(size_t t, double* v) const override {
    static constexpr double kStart[5] = {1, 0, 0, 1, 0};  // weight, bias, mean, var, count
    *v = kStart[spec_.bias ? t : t + 2];
    return true;
  }
  size_t saved_bytes(int, int, DType dt) const override { return (2 * size_t(in_.c) + 1) * (dt == DType::f64 ? 8 : 4); }
  std::string saved_what() const override { return "mean, rstd and mode"; }
  bool backward_reads_output() const override { return false; }
  double flops_per_sample() const override { return 4.0 * double(in_.size()); }
  bool runs_nhwc() const override { return true; }  // per-channel sums over rows of C

  void forward(const ops::Exec& e, const Bufs& b, int n) override {
    const ref::BatchNorm s = shape(n);
    if (b.train_mode && size_t(n) * in_.h * in_.w < 2)
      throw Error((spec_.name.empty() ? std::string("batchnorm2d") : "batchnorm2d \"" + spec_.name + "\"") +
                  ": train mode needs more than one value per channel (batch x H x W is 1); use eval mode");
    dispatch(b.dt, [&](auto tag) {
      using T = decltype(tag);
      T* mean = p<T>(b.saved);
      T* rstd = mean + in_.c;
      const T* gamma = spec_.bias ? p<T>(b.w) : nullptr;
      const T* beta = spec_.bias ? p<T>(b.b) : nullptr;
      mean[2 * in_.c] = T(b.train_mode ? 1 : 0);
      const bool cl = nhwc();
      if (!b.train_mode)
        return over_channels(e, in_.c, [&](int c0, int c1) {
          (cl ? ref::batchnorm2d_eval_fwd_nhwc<T> : ref::batchnorm2d_eval_fwd<T>)(p<T>(b.y), mean, rstd, p<T>(b.rs),
                                                                                p<T>(b.x), gamma, beta, s, c0, c1);
        });
      T* run = static_cast<T*>(b.rs_update);  // null: the statistics stay (frozen, inference, a rerun)
      over_channels(e, in_.c, [&](int c0, int c1) {
        (cl ? ref::batchnorm2d_train_fwd_nhwc<T> : ref::batchnorm2d_train_fwd<T>)(p<T>(b.y), mean, rstd, run,
                                                                                  p<T>(b.x), gamma, beta, s, c0, c1);
      });
      if (run) run[2 * in_.c] += T(1);  // num_batches_tracked
    });
  }

  void backward(const ops::Exec& e, const Bufs& b, int n) override {
    const ref::BatchNorm s = shape(n);
    dispatch(b.dt, [&](auto tag) {
      using T = decltype(tag);
      const T* mean = p<T>(b.saved);
      const bool train = mean[2 * in_.c] != T(0);
      T* dgamma = spec_.bias ? p<T>(b.dw) : nullptr;
      T* dbeta = spec_.bias ? p<T>(b.db) : nullptr;
      const T* gamma = spec_.bias ? p<T>(b.w) : nullptr;
      if (b.drs)  // the buffers are not trained: their gradient is 0
        for (int k = 0; k < 2 * in_.c + 1; ++k) p<T>(b.drs)[k] = T(0);
      over_channels(e, in_.c, [&](int c0, int c1) {
        (nhwc() ? ref::batchnorm2d_bwd_nhwc<T> : ref::batchnorm2d_bwd<T>)(p<T>(b.dx), dgamma, dbeta, p<T>(b.dy), p<T>(b.x),
                                                                         mean, mean + in_.c, gamma, s, train, c0, c1);
      });
    });
  }

 private:
  ref::BatchNorm shape(int n) const { return {n, in_.c, in_.h * in_.w, spec_.eps, spec_.momentum}; }
};

std::unique_ptr<Layer> make_batchnorm2d(const LayerSpec& s) { return std::make_unique<BatchNorm2d>(s); }

// The eval-mode model: BatchNormalization (X, scale, B, the running mean and var; without an
// affine transform the scale is ones and B zeros). num_batches_tracked stays out; ONNX's momentum
// weighs the running value.
std::string export_batchnorm2d(OnnxOut& g, const std::string& x, const LayerSpec& s) {
  const int C = g.in_dims().c;
  std::vector<std::string> in{x};
  for (std::string& v : norm_affine(g, s, {C})) in.push_back(std::move(v));
  in.push_back(g.param("running_mean", {C})), in.push_back(g.param("running_var", {C}));
  return g.op("BatchNormalization", in, {{"epsilon", float(s.eps)}, {"momentum", float(1 - s.momentum)}});
}

std::vector<OpParam> batchnorm_params(const LayerSpec& s) {
  std::vector<OpParam> v;
  if (s.bias) v = {{"weight", ParamRole::norm_scale}, {"bias", ParamRole::norm_shift}};
  v.insert(v.end(), {{"running_mean", ParamRole::running_stat},
                     {"running_var", ParamRole::running_stat},
                     {"num_batches_tracked", ParamRole::running_stat}});
  return v;
}

OpField momentum_field() {
  return {"momentum", "number in [0, 1]", "0.1",
          [](const JsonFields& r, const json& v, const std::string& p, LayerSpec& s) {
            s.momentum = r.number(v, p, 0, 1, false, false, "a number in [0, 1]");
          },
          [](const LayerSpec& s, json& j) { j["momentum"] = s.momentum; }};
}

// BatchNormalization in inference (training_mode 0 or absent) over C of [N, C, H, W] or [N, C]:
// batchnorm2d with scale, B, mean and var as its weight, bias and running statistics
// (num_batches_tracked 0). momentum (ONNX's weighs the running value) becomes 1 - momentum.
bool import_batchnorm2d(OnnxIn& g, int i) {
  const OnnxValue& x = g.tensor(i, 0);
  const OnnxAttrs& a = g.attrs(i);
  a.only({"epsilon", "momentum", "training_mode", "spatial"});
  if (a.i("training_mode", 0) != 0) throw Error(g.where(i) + ": attribute training_mode 1 is not supported (inference only)");
  if (a.i("spatial", 1) != 1) throw Error(g.where(i) + ": attribute spatial 0 is not supported");
  if (g.input_count(i) != 5) throw Error(g.where(i) + ": expected 5 inputs (X, scale, B, input_mean, input_var)");
  for (int k = 1; k < 5; ++k)
    if (g.output_read(i, k)) throw Error(g.where(i) + ": the running_mean and running_var outputs are not supported");
  if (x.lay == OnnxLayout::NHWC) throw Error(g.where(i) + ": a channels-last input is not supported");
  LayerSpec s;
  s.kind = LayerKind::BatchNorm2d;
  s.eps = a.f("epsilon", 1e-5f);
  const float m = a.f("momentum", 0.9f);
  if (!(m >= 0 && m <= 1)) throw Error(g.where(i) + ": attribute momentum " + std::to_string(m) + ": expected a number in [0, 1]");
  char text[32];  // 1 - 0.9f is 0.1 to float's digits, not 0.0999999940...
  std::snprintf(text, sizeof text, "%.7g", 1.0 - double(m));
  s.momentum = std::strtod(text, nullptr);
  static const char* kIn[5] = {"X", "scale", "B", "input_mean", "input_var"};
  std::vector<float> v[4];
  for (int k = 1; k < 5; ++k) {
    v[k - 1] = g.constant(i, k).f;
    if (v[k - 1].size() != size_t(x.d.c))
      throw Error(g.where(i) + ": " + kIn[k] + " has " + std::to_string(v[k - 1].size()) + " values, expected " + std::to_string(x.d.c));
    for (size_t c = 0; c < v[k - 1].size(); ++c)  // at import, not after a whole eval's NaN loss
      if (const float f = v[k - 1][c]; !std::isfinite(f) || (k == 4 && f < 0)) {
        char num[32];
        std::snprintf(num, sizeof num, "%g", double(f));
        throw Error(g.where(i) + ": " + kIn[k] + " '" + onnx_shown(g.input(i, k)) + "' [" + std::to_string(c) + "] is " + num +
                    (k == 4 ? "; a variance is finite and >= 0" : "; expected a finite number"));
      }
  }
  OnnxValue y = g.emit_layer(s, {&x}, g.val(i, 1).weight_name, x.d, x.lay);
  g.weight(y.ref, "weight", std::move(v[0]));
  g.weight(y.ref, "bias", std::move(v[1]));
  g.weight(y.ref, "running_mean", std::move(v[2]));
  g.weight(y.ref, "running_var", std::move(v[3]));
  g.weight(y.ref, "num_batches_tracked", {0.f});
  g.set(i, 0, std::move(y));
  return true;
}

}  // namespace

const OpDesc& op_desc_batchnorm2d() {
  static const OpDesc d = [] {
    OpDesc o = make_op(LayerKind::BatchNorm2d, "batchnorm2d",
                       "normalises each channel over the batch and positions, with running statistics (PyTorch BatchNorm2d)");
    o.onnx = {"BatchNormalization"};
    o.layouts = {"nchw", "nhwc"};
    o.dtypes = fp_dtypes();
    o.dtypes.push_back("u8");  // the int8 plan: folded into the requantization of the convolution before it
    o.fields = {eps_field(), momentum_field(), affine_field()};
    o.params = batchnorm_params;
    o.make = make_batchnorm2d;
    o.onnx_export = export_batchnorm2d;
    o.onnx_import = import_batchnorm2d;
    // Between a pool and a linear layer: ONNX export folds a batchnorm2d right after a conv2d into
    // the conv, so this example exports as BatchNormalization.
    o.example = example_model("batchnorm2d", R"({"type": "conv2d", "out_channels": 8, "kernel": 4, "stride": 4}, )"
                                             R"({"type": "relu"}, {"type": "maxpool2d", "kernel": 2}, {"type": "batchnorm2d"}, )"
                                             R"({"type": "flatten"}, {"type": "linear", "out_features": 10})");
    return o;
  }();
  return d;
}

}  // namespace ember::nn
