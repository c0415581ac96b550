// Op "add": the elementwise sum of 2 to 8 earlier layers' outputs (a residual connection).
// "inputs" names them (layer names, or "input").
#include "nn/layers.h"
#include "nn/op_table.h"

namespace ember::nn {

namespace {

// Residual sum of 2 to 8 inputs of one shape: y = x0 + x1 + ...; each input's gradient is dy.
class Add final : public Layer {
 public:
  using Layer::Layer;
  Dims infer(const Dims& in) override { return infer_inputs({in}); }
  Dims infer_inputs(const std::vector<Dims>& in) override {
    for (const Dims& d : in)
      if (d.c != in[0].c || d.h != in[0].h || d.w != in[0].w)
        throw Error("add needs inputs of one shape, found " + dims_str(in[0]) + " and " + dims_str(d));
    return in_ = out_ = in[0];
  }
  bool layout_agnostic() const override { return true; }
  bool backward_reads_inputs() const override { return false; }
  bool backward_reads_output() const override { return false; }
  void forward(const ops::Exec& e, const Bufs& b, int n) override {
    dispatch(b.dt, [&](auto tag) {
      using T = decltype(tag);
      ops::add_fwd<T>(e, p<T>(b.y), reinterpret_cast<const T* const*>(b.xs), b.nin, size_t(n) * out_.size());
    });
  }
  void backward(const ops::Exec& e, const Bufs& b, int n) override {
    dispatch(b.dt, [&](auto tag) {
      using T = decltype(tag);
      for (int j = 0; j < b.nin; ++j)
        if (b.dxs[j]) ops::copy_or_add<T>(e, p<T>(b.dxs[j]), p<T>(b.dy), size_t(n) * out_.size(), false);
    });
  }
};

std::string export_add(OnnxOut& g, const std::string&, const LayerSpec&) { return g.op("Sum", join_inputs(g)); }

// Add of two tensors (a constant: only as a MatMul's bias, which linear's import takes), or Sum
// of 1-8 (Sum-1..6's consumed_inputs hint; Add-1..6's broadcast is refused).
bool import_add(OnnxIn& g, int i) {
  if (g.op_type(i) == "Add") {
    if (g.input_count(i) != 2) throw Error(g.where(i) + ": expected 2 inputs");
    g.attrs(i).only({"consumed_inputs"});
    if (g.val(i, 0).is_const || g.val(i, 1).is_const)
      throw Error(g.where(i) + ": adding a constant is supported only as the bias right after a MatMul");
  }
  return import_join(g, i, false);
}

}  // namespace

const OpDesc& op_desc_add() {
  static const OpDesc d = [] {
    OpDesc o = join_op(LayerKind::Add, "add", "the elementwise sum of 2 to 8 earlier layers' outputs (a residual connection)", "Sum");
    o.layouts.push_back("nhwc");  // elementwise
    o.make = make_as<Add>;
    o.onnx_export = export_add;
    o.onnx_import = import_add;
    o.onnx_from = {"Add"};
    o.dtypes.push_back("u8");  // the int8 plan: a convolution's residual, in its requantization
    return o;
  }();
  return d;
}

}  // namespace ember::nn
