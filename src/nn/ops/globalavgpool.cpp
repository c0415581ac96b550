// Op "globalavgpool": the mean over each channel's positions, [C, H, W] -> [C] (PyTorch's
// AdaptiveAvgPool2d(1); its output is flat [C, 1, 1]).
#include <algorithm>

#include "nn/layers.h"
#include "nn/op_table.h"
#include "ops/norm.h"

namespace ember::nn {

namespace {

// AdaptiveAvgPool2d(1): [C, H, W] -> [C] (a flat [C, 1, 1]).
class GlobalAvgPool final : public Layer {
 public:
  using Layer::Layer;
  Dims infer(const Dims& in) override {
    in_ = in;
    return out_ = {in.c, 1, 1};
  }
  bool backward_reads_inputs() const override { return false; }
  bool backward_reads_output() const override { return false; }
  bool runs_nhwc() const override { return true; }
  void forward(const ops::Exec& e, const Bufs& b, int n) override {
    dispatch(b.dt, [&](auto tag) {
      using T = decltype(tag);
      if (nhwc()) return nhwc_fwd<T>(e, p<T>(b.y), p<T>(b.x), n);
      ops::global_avgpool_fwd<T>(e, p<T>(b.y), p<T>(b.x), n, in_.c, in_.h * in_.w);
    });
  }
  void backward(const ops::Exec& e, const Bufs& b, int n) override {
    if (!b.dx) return;
    dispatch(b.dt, [&](auto tag) {
      using T = decltype(tag);
      if (nhwc()) return nhwc_bwd<T>(e, p<T>(b.dx), p<T>(b.dy), n);
      ops::global_avgpool_bwd<T>(e, p<T>(b.dx), p<T>(b.dy), n, in_.c, in_.h * in_.w);
    });
  }

 private:
  // Channel-last: y[n, c] = the sum over positions of x[n, hw, c] (in position order) / HW;
  // dx[n, hw, c] = dy[n, c] / HW. Split over samples.
  template <class T>
  void nhwc_fwd(const ops::Exec& e, T* y, const T* x, int n) const {
    const int C = in_.c, HW = in_.h * in_.w;
    e.pool.run([&](int t) {
      const Range r = split_range(n, t, e.pool.size());
      for (int64_t i = r.begin; i < r.end; ++i) {
        T* yi = y + i * C;
        std::fill(yi, yi + C, T(0));
        for (int j = 0; j < HW; ++j)
          for (int c = 0; c < C; ++c) yi[c] += x[(size_t(i) * HW + j) * C + c];
        for (int c = 0; c < C; ++c) yi[c] /= T(HW);
      }
    });
  }
  template <class T>
  void nhwc_bwd(const ops::Exec& e, T* dx, const T* dy, int n) const {
    const int C = in_.c, HW = in_.h * in_.w;
    e.pool.run([&](int t) {
      const Range r = split_range(n, t, e.pool.size());
      for (int64_t i = r.begin; i < r.end; ++i)
        for (int j = 0; j < HW; ++j)
          for (int c = 0; c < C; ++c) dx[(size_t(i) * HW + j) * C + c] = dy[i * C + c] / T(HW);
    });
  }
};

std::string export_globalavgpool(OnnxOut& g, const std::string& x, const LayerSpec&) {
  return g.op("GlobalAveragePool", {g.img(x)});
}

}  // namespace

const OpDesc& op_desc_globalavgpool() {
  static const OpDesc d = [] {
    OpDesc o = make_op(LayerKind::GlobalAvgPool, "globalavgpool", "mean over each channel's positions, [C, H, W] -> [C] (AdaptiveAvgPool2d(1))");
    o.onnx = {"GlobalAveragePool"};
    o.layouts = {"nchw", "nhwc"};
    o.dtypes = fp_dtypes();
    o.example = example_model("globalavgpool", R"({"type": "conv2d", "out_channels": 16, "kernel": 24}, {"type": "relu"}, )"
                                               R"({"type": "globalavgpool"}, {"type": "flatten"}, {"type": "linear", "out_features": 10})");
    o.make = make_as<GlobalAvgPool>;
    o.onnx_export = export_globalavgpool;
    return o;
  }();
  return d;
}

}  // namespace ember::nn
