// Op "flatten": [C, H, W] -> [C * H * W]; its output is its input's storage (no copy).
#include <algorithm>

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

// Flatten (axis 1), Reshape to [N, -1] and Squeeze of the 1x1 spatial axes: to [N, D]; a view
// where the tensor is already [D] in ember.
void check_flatten(OnnxIn& g, int i, const OnnxValue& x) {
  const OnnxAttrs& a = g.attrs(i);
  if (g.op_type(i) == "Flatten") {
    a.only({"axis"});
    const int64_t rank = onnx_rank(x.lay), axis = a.i("axis", 1);
    if (axis < -rank || axis > rank)
      throw Error(g.where(i) + ": attribute axis " + std::to_string(axis) + " is outside -" + std::to_string(rank) + ".." +
                  std::to_string(rank));
    if (axis != 1 && axis != 1 - rank)  // 0: [1, N x D]; 2 and more: [N x C.., ..]: both mix the batch in
      throw Error(g.where(i) + ": attribute axis " + std::to_string(axis) + " is not supported (only axis 1: any other "
                  "flattens the batch dim N into the features)");
  } else if (g.op_type(i) == "Reshape") {
    a.only({"allowzero"});
    const OnnxConst& shape = g.constant(i, 1);
    const int64_t D = int64_t(x.d.size());
    // [0 or -1, -1 or D]: the batch kept, the rest flattened (a fixed batch size is not: the
    // importer does not know N).
    const bool ok = shape.i.size() == 2 && (shape.i[0] == 0 || shape.i[0] == -1) && (shape.i[1] == -1 || shape.i[1] == D) &&
                    !(shape.i[0] == -1 && shape.i[1] == -1) && !(a.i("allowzero", 0) && shape.i[0] == 0);
    if (!ok) throw Error(g.where(i) + ": only a reshape to [N, -1] (shape [0, -1] or [-1, D]) is supported, found " + onnx_ints_str(shape.i));
  } else {  // Squeeze
    a.only({"axes"});
    std::vector<int64_t> axes = g.input_count(i) > 1 ? g.constant(i, 1).i : a.ints("axes", {});
    for (int64_t& v : axes) v = v < 0 ? v + 4 : v;
    std::sort(axes.begin(), axes.end());
    if (x.lay == OnnxLayout::Flat || !x.d.flat() || axes != std::vector<int64_t>{2, 3})
      throw Error(g.where(i) + ": only squeezing the 1x1 spatial axes is supported");
  }
  if (x.lay == OnnxLayout::Vec) throw Error(g.where(i) + ": the input [N] has no axis after the batch to flatten");
}

bool import_flatten(OnnxIn& g, int i) {
  const OnnxValue& x = g.tensor(i, 0);
  check_flatten(g, i, x);
  if (x.lay == OnnxLayout::Flat || x.d.flat()) {  // already [D] in ember: a view
    OnnxValue y = x;
    y.lay = OnnxLayout::Flat;
    g.set(i, 0, std::move(y));
    return true;
  }
  if (x.lay == OnnxLayout::NHWC) throw Error(g.where(i) + ": flattening a channels-last view of an image is not supported");
  LayerSpec s;
  s.kind = LayerKind::Flatten;
  g.set(i, 0, g.emit_layer(s, {&x}, "", {int(x.d.size()), 1, 1}, OnnxLayout::Flat));
  return true;
}

}  // namespace

const OpDesc& op_desc_flatten() {
  static const OpDesc d = [] {
    OpDesc o = make_op(LayerKind::Flatten, "flatten", "[C, H, W] -> [C * H * W], no copy (PyTorch Flatten)");
    o.onnx = {"Flatten"};
    o.layouts = {"nchw", "flat"};
    o.dtypes = fp_dtypes();
    o.dtypes.push_back("u8");  // the int8 plan: the same u8 bytes, before a Linear
    o.example = example_model("flatten", R"({"type": "flatten"}, {"type": "linear", "out_features": 10})");
    o.make = make_as<Flatten>;
    o.onnx_export = export_flatten;
    o.onnx_import = import_flatten;
    o.onnx_from = {"Reshape", "Squeeze"};
    return o;
  }();
  return d;
}

}  // namespace ember::nn
