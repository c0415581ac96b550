// Op "zeropad2d": zero rows and columns around [C, H, W] ("padding": int or [h, w], each side;
// PyTorch's ZeroPad2d with equal sides).
#include <cmath>

#include "nn/layers.h"
#include "nn/op_table.h"
#include "ops/norm.h"

namespace ember::nn {

namespace {

// nn.ZeroPad2d((w, w, h, h)): [C, H, W] -> [C, H + 2h, W + 2w].
class ZeroPad2d final : public Layer {
 public:
  using Layer::Layer;
  Dims infer(const Dims& in) override {
    in_ = in;
    return out_ = {in.c, in.h + 2 * spec_.pad_h, in.w + 2 * spec_.pad_w};
  }
  bool backward_reads_inputs() const override { return false; }
  bool backward_reads_output() const override { return false; }
  ref::ZeroPad2d shape(int n) const { return {n, in_.c, in_.h, in_.w, spec_.pad_h, spec_.pad_h, spec_.pad_w, spec_.pad_w}; }
  void forward(const ops::Exec& e, const Bufs& b, int n) override {
    dispatch(b.dt, [&](auto tag) {
      using T = decltype(tag);
      ops::zero_pad_fwd<T>(e, p<T>(b.y), p<T>(b.x), shape(n));
    });
  }
  void backward(const ops::Exec& e, const Bufs& b, int n) override {
    if (!b.dx) return;
    dispatch(b.dt, [&](auto tag) {
      using T = decltype(tag);
      ops::zero_pad_bwd<T>(e, p<T>(b.dx), p<T>(b.dy), shape(n));
    });
  }
};

std::string export_zeropad2d(OnnxOut& g, const std::string& x, const LayerSpec& s) {
  return g.op("Pad", {g.img(x), g.ints({0, 0, s.pad_h, s.pad_w, 0, 0, s.pad_h, s.pad_w})});
}

// Pad with zeros on H and W, the same before and after (pads as attribute or input; opset 11's
// constant_value input 0; no axes input).
bool import_zeropad2d(OnnxIn& g, int i) {
  const OnnxValue& x = g.tensor(i, 0);
  const OnnxAttrs& a = g.attrs(i);
  a.only({"mode", "pads", "value"});
  if (a.s("mode", "constant") != "constant") throw Error(g.where(i) + ": mode '" + a.s("mode", "") + "' is not supported");
  std::vector<int64_t> pads = a.ints("pads", {});
  float value = a.f("value", 0);
  if (g.has_input(i, 1)) pads = g.constant(i, 1).i;
  if (g.has_input(i, 2)) value = g.constant(i, 2).count() == 1 ? g.constant(i, 2).f[0] : NAN;
  if (g.has_input(i, 3)) throw Error(g.where(i) + ": the axes input is not supported");
  if (value != 0) throw Error(g.where(i) + ": only zero padding is supported");
  if (x.lay != OnnxLayout::NCHW || pads.size() != 8 || pads[0] || pads[1] || pads[4] || pads[5] || pads[2] != pads[6] ||
      pads[3] != pads[7] || pads[2] < 0 || pads[3] < 0 || pads[2] > 65536 || pads[3] > 65536)
    throw Error(g.where(i) + ": pads " + onnx_ints_str(pads) + ": only the same zero padding before and after H and W is supported");
  if (x.d.h + 2 * pads[2] > 65536 || x.d.w + 2 * pads[3] > 65536) throw Error(g.where(i) + ": the padded image is larger than 65536");
  LayerSpec s;
  s.kind = LayerKind::ZeroPad2d, s.pad_h = int(pads[2]), s.pad_w = int(pads[3]);
  g.set(i, 0, g.emit_layer(s, {&x}, "", {x.d.c, x.d.h + 2 * s.pad_h, x.d.w + 2 * s.pad_w}, OnnxLayout::NCHW));
  return true;
}

}  // namespace

const OpDesc& op_desc_zeropad2d() {
  static const OpDesc d = [] {
    OpDesc o = make_op(LayerKind::ZeroPad2d, "zeropad2d", "zeros around each channel's image, [C, H, W] -> [C, H + 2ph, W + 2pw] (PyTorch ZeroPad2d)");
    o.onnx = {"Pad"};
    o.layouts = {"nchw"};
    o.dtypes = fp_dtypes();
    o.fields = {padding_field(false, true)};
    o.example = example_model("zeropad2d", R"({"type": "zeropad2d", "padding": 2}, {"type": "conv2d", "out_channels": 4, "kernel": 5}, )"
                                           R"({"type": "relu"}, {"type": "maxpool2d", "kernel": 2}, {"type": "flatten"}, {"type": "linear", "out_features": 10})");
    o.make = make_as<ZeroPad2d>;
    o.onnx_export = export_zeropad2d;
    o.onnx_import = import_zeropad2d;
    return o;
  }();
  return d;
}

}  // namespace ember::nn
