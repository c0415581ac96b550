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

// The mean over the spatial axes (every axis after C; channels-last: 1 and 2) of node i:
// [N, C, H, W] -> [N, C, 1, 1] (keep) or [N, C].
void import_mean(OnnxIn& g, int i, const std::vector<int64_t>& axes_in, bool keep) {
  const OnnxValue& x = g.tensor(i, 0);
  std::vector<int64_t> axes;
  const int rank = onnx_rank(x.lay);
  for (int64_t a : axes_in) axes.push_back(a < 0 ? a + rank : a);
  std::sort(axes.begin(), axes.end());
  const std::vector<int64_t> want = x.lay == OnnxLayout::NHWC  ? std::vector<int64_t>{1, 2}
                                    : x.lay == OnnxLayout::NCL ? std::vector<int64_t>{2}
                                                               : std::vector<int64_t>{2, 3};
  if (x.lay == OnnxLayout::Flat || x.lay == OnnxLayout::Vec || axes != want)
    throw Error(g.where(i) + ": only a mean over the spatial axes is supported, found axes " + onnx_ints_str(axes_in));
  LayerSpec s;
  s.kind = LayerKind::GlobalAvgPool;
  g.set(i, 0, g.emit_layer(s, {&x}, "", {x.d.c, 1, 1}, keep ? x.lay : OnnxLayout::Flat));  // [N, C, 1, 1], [N, C, 1] or [N, C]
}

// GlobalAveragePool (over every axis after C), or ReduceMean over the spatial axes.
bool import_globalavgpool(OnnxIn& g, int i) {
  if (g.op_type(i) == "GlobalAveragePool") {
    import_mean(g, i, g.tensor(i, 0).lay == OnnxLayout::NCL ? std::vector<int64_t>{2} : std::vector<int64_t>{2, 3}, true);
    return true;
  }
  const OnnxAttrs& a = g.attrs(i);
  a.only({"axes", "keepdims"});
  std::vector<int64_t> axes = a.ints("axes", {});
  if (g.input_count(i) > 1) axes = g.constant(i, 1).i;
  import_mean(g, i, axes, a.i("keepdims", 1) != 0);
  return true;
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
    o.onnx_import = import_globalavgpool;
    o.onnx_from = {"ReduceMean"};
    return o;
  }();
  return d;
}

}  // namespace ember::nn
