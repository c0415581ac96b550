// Op "layerscale": a per-channel learned scale (torchvision's CNBlock.layer_scale, [C, 1, 1]),
// every scale starting at "init_value" (default 1e-6).
#include <cmath>

#include "nn/layers.h"
#include "nn/op_table.h"
#include "ops/norm.h"

namespace ember::nn {

namespace {

// y = x * s[c], s of shape [C, 1, 1] named "layer_scale" (torchvision's CNBlock).
class LayerScale final : public Layer {
 public:
  using Layer::Layer;
  Dims infer(const Dims& in) override { return in_ = out_ = in; }
  std::vector<std::vector<int>> param_shapes() const override { return {{in_.c, 1, 1}}; }
  bool param_constant(size_t, double* v) const override { return *v = spec_.scale_init, true; }
  bool backward_reads_output() const override { return false; }
  size_t workspace_elems(int, int threads) const override { return size_t(in_.c) * size_t(threads); }
  // Channel-last, [N, HW, C] is [N * HW, C, 1]: the same op over rows of C.
  bool runs_nhwc() const override { return true; }
  void forward(const ops::Exec& e, const Bufs& b, int n) override {
    const int rows = nhwc() ? n * in_.h * in_.w : n, HW = nhwc() ? 1 : in_.h * in_.w;
    dispatch(b.dt, [&](auto tag) {
      using T = decltype(tag);
      ops::channel_scale_fwd<T>(e, p<T>(b.y), p<T>(b.x), p<T>(b.w), rows, in_.c, HW);
    });
  }
  void backward(const ops::Exec& e, const Bufs& b, int n) override {
    const int rows = nhwc() ? n * in_.h * in_.w : n, HW = nhwc() ? 1 : in_.h * in_.w;
    dispatch(b.dt, [&](auto tag) {
      using T = decltype(tag);
      ops::channel_scale_bwd<T>(e, p<T>(b.dx), p<T>(b.dw), p<T>(b.dy), p<T>(b.x), p<T>(b.w), rows, in_.c, HW,
                                p<T>(b.ws));
    });
  }
};

// Mul by the scale [C, 1, 1] (an image) or [C] (flat [N, C]).
std::string export_layerscale(OnnxOut& g, const std::string& x, const LayerSpec&) {
  const int C = g.in_dims().c;
  return g.op("Mul", {x, g.param("layer_scale", g.rank(x) == 4 ? std::vector<int64_t>{C, 1, 1} : std::vector<int64_t>{C})});
}

// Mul of a tensor by a per-channel constant ([C, 1, 1], [C, 1] of [N, C, L], or [C]; leading
// 1s dropped): a layer scale.
bool import_layerscale(OnnxIn& g, int i) {
  if (g.input_count(i) != 2) throw Error(g.where(i) + ": expected 2 inputs");
  g.attrs(i).only({"consumed_inputs"});  // Mul-1..6's broadcast and axis align differently: refused
  const OnnxValue &a = g.val(i, 0), &b = g.val(i, 1);
  if (a.is_const == b.is_const) throw Error(g.where(i) + ": only a tensor times a per-channel constant (a layer scale) is supported");
  const OnnxValue& x = a.is_const ? b : a;
  const OnnxValue& c = a.is_const ? a : b;
  const size_t rank = size_t(onnx_rank(x.lay));
  std::vector<int64_t> dims;
  for (int64_t d : c.c.dims)
    if (d != 1 || !dims.empty()) dims.push_back(d);  // drop leading 1s (broadcast, if no longer than x)
  const int64_t C = x.d.c;
  const std::vector<int64_t> per_channel = x.lay == OnnxLayout::NCHW  ? std::vector<int64_t>{C, 1, 1}
                                           : x.lay == OnnxLayout::NCL ? std::vector<int64_t>{C, 1}
                                                                      : std::vector<int64_t>{C};  // [N, D], NHWC
  const bool ok = x.lay != OnnxLayout::Vec && c.c.dims.size() <= rank && dims == per_channel;
  if (!ok) throw Error(g.where(i) + ": constant " + onnx_ints_str(c.c.dims) + " is not one scale per channel of " + std::to_string(C));
  LayerSpec s;
  s.kind = LayerKind::LayerScale;
  OnnxValue y = g.emit_layer(s, {&x}, c.weight_name, x.d, x.lay);
  g.weight(y.ref, "layer_scale", c.c.f);
  g.set(i, 0, std::move(y));
  return true;
}

}  // namespace

const OpDesc& op_desc_layerscale() {
  static const OpDesc d = [] {
    OpDesc o = make_op(LayerKind::LayerScale, "layerscale", "multiplies each channel by a learned scale (torchvision CNBlock.layer_scale)");
    o.onnx = {"Mul"};
    o.layouts = {"nchw", "flat", "nhwc"};
    o.dtypes = fp_dtypes();
    o.fields = {{"init_value", "number", "1e-6",
                 [](const JsonFields& r, const json& v, const std::string& p, LayerSpec& s) {
                   s.scale_init = r.number(v, p, -HUGE_VAL, HUGE_VAL, false, false, "a finite number");
                 },
                 [](const LayerSpec& s, json& j) { j["init_value"] = s.scale_init; }}};
    o.params = [](const LayerSpec&) { return std::vector<OpParam>{{"layer_scale", ParamRole::layer_scale}}; };
    o.example = example_model("layerscale", R"({"type": "conv2d", "out_channels": 4, "kernel": 3, "padding": 1}, {"type": "relu"}, )"
                                            R"({"type": "layerscale", "init_value": 0.5}, {"type": "maxpool2d", "kernel": 2}, )"
                                            R"({"type": "flatten"}, {"type": "linear", "out_features": 10})");
    o.make = make_as<LayerScale>;
    o.onnx_export = export_layerscale;
    o.onnx_import = import_layerscale;
    return o;
  }();
  return d;
}

}  // namespace ember::nn
