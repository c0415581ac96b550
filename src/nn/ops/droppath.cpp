// Op "droppath": stochastic depth (torchvision's StochasticDepth, mode "row"): in training each
// sample's input is dropped with probability "p" and the rest scaled by 1 / (1 - p); identity in eval.
#include <algorithm>

#include "nn/layers.h"
#include "nn/op_table.h"
#include "ops/norm.h"

namespace ember::nn {

namespace {

// Stochastic depth (torchvision's StochasticDepth(p, "row")): in train mode each sample is
// dropped (scale 0) with probability p, else scaled by 1 / (1 - p); in eval mode the identity.
// Runs in place; backward reads only the saved per-sample scales.
class DropPath final : public Layer {
 public:
  using Layer::Layer;
  Dims infer(const Dims& in) override {
    if (!(spec_.drop_prob >= 0 && spec_.drop_prob < 1))
      throw Error("droppath: p must be in [0, 1), found " + std::to_string(spec_.drop_prob));
    return in_ = out_ = in;
  }
  size_t saved_bytes(int batch, int, DType dt) const override { return size_t(batch) * esize(dt); }
  std::string saved_what() const override { return "sample scales"; }
  bool backward_reads_inputs() const override { return false; }
  bool backward_reads_output() const override { return false; }
  bool runs_in_place() const override { return true; }
  bool layout_agnostic() const override { return true; }  // per sample
  void forward(const ops::Exec& e, const Bufs& b, int n) override {
    dispatch(b.dt, [&](auto tag) {
      using T = decltype(tag);
      T* scale = p<T>(b.saved);
      if (b.train_mode && spec_.drop_prob > 0) ref::drop_path_scales<T>(scale, b.noise, n, spec_.drop_prob);
      else std::fill(scale, scale + n, T(1));
      ops::sample_scale<T>(e, p<T>(b.y), p<T>(b.x), scale, n, in_.size());
    });
  }
  void backward(const ops::Exec& e, const Bufs& b, int n) override {
    if (!b.dx) return;
    dispatch(b.dt, [&](auto tag) {
      using T = decltype(tag);
      ops::sample_scale<T>(e, p<T>(b.dx), p<T>(b.dy), p<T>(b.saved), n, in_.size());
    });
  }
};

std::string export_droppath(OnnxOut& g, const std::string& x, const LayerSpec&) { return g.op("Identity", {x}); }  // eval mode

}  // namespace

const OpDesc& op_desc_droppath() {
  static const OpDesc d = [] {
    OpDesc o = make_op(LayerKind::DropPath, "droppath", "stochastic depth: drops a sample's input with probability p in training (torchvision StochasticDepth)");
    o.onnx = {"Identity"};
    o.layouts = {"nchw", "flat", "nhwc"};
    o.dtypes = fp_dtypes();
    o.fields = {{"p", "number in [0, 1)", "0",
                 [](const JsonFields& r, const json& v, const std::string& path, LayerSpec& s) {
                   s.drop_prob = r.number(v, path, 0, 1, false, true, "a probability in [0, 1)");
                 },
                 [](const LayerSpec& s, json& j) { j["p"] = s.drop_prob; }}};
    o.example = example_model("droppath", R"({"type": "conv2d", "name": "a", "out_channels": 4, "kernel": 3, "padding": 1}, )"
                                          R"({"type": "relu"}, {"type": "droppath", "name": "d", "p": 0.2}, {"type": "add", "inputs": ["a", "d"]}, )"
                                          R"({"type": "maxpool2d", "kernel": 2}, {"type": "flatten"}, {"type": "linear", "out_features": 10})");
    o.make = make_as<DropPath>;
    o.onnx_export = export_droppath;
    return o;
  }();
  return d;
}

}  // namespace ember::nn
