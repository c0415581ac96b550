// Op "layernorm2d": torchvision's LayerNorm2d, a LayerNorm over the channels at each position of
// [C, H, W] with a per-channel scale and shift ("affine", default true).
#include "nn/layers.h"
#include "nn/op_table.h"
#include "ops/norm.h"

namespace ember::nn {

OpField eps_field();        // layernorm.cpp
OpField affine_field();
std::vector<OpParam> norm_params(const LayerSpec& s);
std::string export_ln(OnnxOut& g, const std::string& x, const LayerSpec& s, int64_t axis, std::vector<int64_t> shape);

namespace {

// torchvision's LayerNorm2d: over C at each position of [C, H, W]; weight and bias [C].
class LayerNorm2d final : public Layer {
 public:
  using Layer::Layer;
  Dims infer(const Dims& in) override { return in_ = out_ = in; }
  std::vector<std::vector<int>> param_shapes() const override {
    if (!spec_.bias) return {};
    return {{in_.c}, {in_.c}};
  }
  bool param_constant(size_t t, double* v) const override { return *v = t == 0 ? 1 : 0, true; }
  size_t workspace_elems(int, int threads) const override { return ops::layernorm_workspace(in_.c, threads); }
  size_t saved_bytes(int batch, int, DType dt) const override { return 2 * size_t(batch) * in_.h * in_.w * esize(dt); }
  std::string saved_what() const override { return "mean and rstd"; }
  bool backward_reads_output() const override { return false; }
  bool runs_nhwc() const override { return true; }  // channel-last: a LayerNorm over rows of C
  void forward(const ops::Exec& e, const Bufs& b, int n) override {
    const size_t half = size_t(b.batch) * in_.h * in_.w;
    dispatch(b.dt, [&](auto tag) {
      using T = decltype(tag);
      T* mean = p<T>(b.saved);
      if (nhwc())
        return ops::layernorm_fwd<T>(e, p<T>(b.y), mean, mean + half, p<T>(b.x), p<T>(b.w), p<T>(b.b),
                                     n * in_.h * in_.w, in_.c, T(spec_.eps));
      ops::layernorm2d_fwd<T>(e, p<T>(b.y), mean, mean + half, p<T>(b.x), p<T>(b.w), p<T>(b.b), n, in_.c,
                              in_.h * in_.w, T(spec_.eps));
    });
  }
  void backward(const ops::Exec& e, const Bufs& b, int n) override {
    const size_t half = size_t(b.batch) * in_.h * in_.w;
    dispatch(b.dt, [&](auto tag) {
      using T = decltype(tag);
      const T* mean = p<T>(b.saved);
      if (nhwc())
        return ops::layernorm_bwd<T>(e, p<T>(b.dx), p<T>(b.dw), p<T>(b.db), p<T>(b.dy), p<T>(b.x), mean, mean + half,
                                     p<T>(b.w), n * in_.h * in_.w, in_.c, p<T>(b.ws));
      ops::layernorm2d_bwd<T>(e, p<T>(b.dx), p<T>(b.dw), p<T>(b.db), p<T>(b.dy), p<T>(b.x), mean, mean + half,
                              p<T>(b.w), n, in_.c, in_.h * in_.w, p<T>(b.ws));
    });
  }
};

// torchvision's LayerNorm2d: to channels-last, LayerNormalization over C, back.
std::string export_layernorm2d(OnnxOut& g, const std::string& x, const LayerSpec& s) {
  const std::string t = g.op("Transpose", {g.img(x)}, {{"perm", {0, 2, 3, 1}}});
  return g.op("Transpose", {export_ln(g, t, s, -1, {g.in_dims().c})}, {{"perm", {0, 3, 1, 2}}});
}

}  // namespace

const OpDesc& op_desc_layernorm2d() {
  static const OpDesc d = [] {
    OpDesc o = make_op(LayerKind::LayerNorm2d, "layernorm2d", "normalises over the channels at each position (torchvision LayerNorm2d)");
    o.onnx = {"Transpose", "LayerNormalization"};
    o.layouts = {"nchw", "nhwc"};
    o.dtypes = fp_dtypes();
    o.fields = {eps_field(), affine_field()};
    o.params = norm_params;
    o.example = example_model("layernorm2d", R"({"type": "conv2d", "out_channels": 8, "kernel": 4, "stride": 4}, {"type": "layernorm2d"}, )"
                                             R"({"type": "relu"}, {"type": "flatten"}, {"type": "linear", "out_features": 10})");
    o.make = make_as<LayerNorm2d>;
    o.onnx_export = export_layernorm2d;
    return o;
  }();
  return d;
}

}  // namespace ember::nn
