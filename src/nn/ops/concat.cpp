// Op "concat": 2 to 8 earlier layers' outputs joined over channels.
// "inputs" names them (layer names, or "input").
#include "nn/layers.h"
#include "nn/op_table.h"

namespace ember::nn {

namespace {

// Concatenation of 2 to 8 inputs along channels (images of one H x W) or features (flat inputs):
// torch.cat(dim=1).
class Concat final : public Layer {
 public:
  using Layer::Layer;
  Dims infer(const Dims& in) override { return infer_inputs({in}); }
  Dims infer_inputs(const std::vector<Dims>& in) override {
    int64_t c = 0;
    sizes_.clear();
    for (const Dims& d : in) {
      if (d.h != in[0].h || d.w != in[0].w)
        throw Error("concat needs inputs of one height and width, found " + dims_str(in[0]) + " and " + dims_str(d));
      c += d.c;
      sizes_.push_back(d.size());
    }
    check_index("concat", "output channels", c);
    in_ = in[0];
    out_ = {int(c), in[0].h, in[0].w};
    return out_;
  }
  bool backward_reads_inputs() const override { return false; }
  bool backward_reads_output() const override { return false; }
  void forward(const ops::Exec& e, const Bufs& b, int n) override {
    dispatch(b.dt, [&](auto tag) {
      using T = decltype(tag);
      ops::concat_fwd<T>(e, p<T>(b.y), reinterpret_cast<const T* const*>(b.xs), sizes_.data(), b.nin, n);
    });
  }
  void backward(const ops::Exec& e, const Bufs& b, int n) override {
    dispatch(b.dt, [&](auto tag) {
      using T = decltype(tag);
      ops::concat_bwd<T>(e, reinterpret_cast<T* const*>(b.dxs), p<T>(b.dy), sizes_.data(), b.nin, n);
    });
  }

 private:
  std::vector<size_t> sizes_;  // elements per sample of each input
};

std::string export_concat(OnnxOut& g, const std::string&, const LayerSpec&) {
  return g.op("Concat", join_inputs(g), {{"axis", 1}});
}

bool import_concat(OnnxIn& g, int i) { return import_join(g, i, true); }

}  // namespace

const OpDesc& op_desc_concat() {
  static const OpDesc d = [] {
    OpDesc o = join_op(LayerKind::Concat, "concat", "2 to 8 earlier layers' outputs joined over channels", "Concat");
    o.make = make_as<Concat>;
    o.onnx_export = export_concat;
    o.onnx_import = import_concat;
    return o;
  }();
  return d;
}

}  // namespace ember::nn
