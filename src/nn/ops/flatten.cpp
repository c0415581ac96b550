// Op "flatten": [C, H, W] -> [C * H * W]; its output is its input's storage (no copy).
#include "nn/layers.h"
#include "nn/op_table.h"

namespace ember::nn {

namespace {

class Flatten final : public Layer {
 public:
  using Layer::Layer;
  Dims infer(const Dims& in) override {
    in_ = in;
    out_ = {int(in.size()), 1, 1};
    return out_;
  }
  bool aliases_input() const override { return true; }
  bool backward_reads_inputs() const override { return false; }
  bool backward_reads_output() const override { return false; }
  bool grad_unused_at_zero_output(bool in) const override { return in; }
  void forward(const ops::Exec&, const Bufs&, int) override {}
  // The output's storage is the input's; the gradient's too unless the input has other readers
  // (then the plan gives it its own buffer and this copies).
  void backward(const ops::Exec& e, const Bufs& b, int n) override {
    if (!b.dx || b.dx == b.dy) return;
    dispatch(b.dt, [&](auto tag) {
      using T = decltype(tag);
      ops::copy_or_add<T>(e, p<T>(b.dx), p<T>(b.dy), size_t(n) * in_.size(), false);
    });
  }
};

std::string export_flatten(OnnxOut& g, const std::string& x, const LayerSpec&) { return g.flat(x); }

}  // namespace

const OpDesc& op_desc_flatten() {
  static const OpDesc d = [] {
    OpDesc o = make_op(LayerKind::Flatten, "flatten", "[C, H, W] -> [C * H * W], no copy (PyTorch Flatten)");
    o.onnx = {"Flatten"};
    o.layouts = {"nchw", "flat"};
    o.dtypes = fp_dtypes();
    o.example = example_model("flatten", R"({"type": "flatten"}, {"type": "linear", "out_features": 10})");
    o.make = make_as<Flatten>;
    o.onnx_export = export_flatten;
    return o;
  }();
  return d;
}

}  // namespace ember::nn
