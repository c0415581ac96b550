// Op "softmax": probabilities over a sample's features; a model that ends in it takes the
// "cross_entropy" loss (softmax_cross_entropy would apply softmax twice).
#include "nn/layers.h"
#include "nn/op_table.h"

namespace ember::nn {

namespace {

// Softmax over the features of a flat input [D].
class Softmax final : public Layer {
 public:
  using Layer::Layer;
  Dims infer(const Dims& in) override {
    if (!in.flat()) throw Error("softmax needs a flat input [D], found " + dims_str(in));
    return in_ = out_ = in;
  }
  bool backward_reads_inputs() const override { return false; }
  void forward(const ops::Exec&, const Bufs& b, int n) override {
    dispatch(b.dt, [&](auto tag) {
      using T = decltype(tag);
      ref::softmax_fwd<T>(p<T>(b.y), p<T>(b.x), n, in_.c);
    });
  }
  void backward(const ops::Exec&, const Bufs& b, int n) override {
    if (!b.dx) return;
    dispatch(b.dt, [&](auto tag) {
      using T = decltype(tag);
      ref::softmax_bwd<T>(p<T>(b.dx), p<T>(b.dy), p<T>(b.y), n, in_.c);
    });
  }
};

std::string export_softmax(OnnxOut& g, const std::string& x, const LayerSpec&) {
  return g.op("Softmax", {g.flat(x)}, {{"axis", 1}});
}

// Softmax over the features of [N, D] (axis 1 or -1; opset < 13's default 1), or of a 1x1 image.
bool import_softmax(OnnxIn& g, int i) {
  const OnnxValue& x = g.tensor(i, 0);
  const OnnxAttrs& a = g.attrs(i);
  a.only({"axis"});
  const int64_t axis = a.i("axis", g.opset() >= 13 ? -1 : 1);
  const bool ok = x.lay == OnnxLayout::Flat ? (axis == 1 || axis == -1) : (x.lay == OnnxLayout::NCHW && x.d.flat() && axis == 1);
  if (!ok) throw Error(g.where(i) + ": only a softmax over the features of [N, D] is supported");
  LayerSpec s;
  s.kind = LayerKind::Softmax;
  g.set(i, 0, g.emit_layer(s, {&x}, "", x.d, x.lay));
  return true;
}

}  // namespace

const OpDesc& op_desc_softmax() {
  static const OpDesc d = [] {
    OpDesc o = make_op(LayerKind::Softmax, "softmax", "exp(x) / sum(exp(x)) over a sample's features (PyTorch Softmax(dim=1))");
    o.onnx = {"Softmax"};
    o.layouts = {"flat"};
    o.dtypes = fp_dtypes();
    o.example = R"({"name": "example-softmax", "input": [1, 28, 28], "classes": 10, "loss": "cross_entropy", )"
                R"("layers": [{"type": "flatten"}, {"type": "linear", "out_features": 10}, {"type": "softmax"}]})";
    o.make = make_as<Softmax>;
    o.onnx_export = export_softmax;
    o.onnx_import = import_softmax;
    return o;
  }();
  return d;
}

}  // namespace ember::nn
