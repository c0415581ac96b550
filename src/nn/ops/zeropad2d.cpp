// Op "zeropad2d": zero rows and columns around [C, H, W] ("padding": int or [h, w], each side;
// PyTorch's ZeroPad2d with equal sides).
#include "nn/op_table.h"

namespace ember::nn {

const OpDesc& op_desc_zeropad2d() {
  static const OpDesc d = [] {
    OpDesc o = make_op(LayerKind::ZeroPad2d, "zeropad2d", "zeros around each channel's image, [C, H, W] -> [C, H + 2ph, W + 2pw] (PyTorch ZeroPad2d)");
    o.onnx = {"Pad"};
    o.layouts = {"nchw"};
    o.dtypes = fp_dtypes();
    o.fields = {padding_field(false, true)};
    o.example = example_model("zeropad2d", R"({"type": "zeropad2d", "padding": 2}, {"type": "conv2d", "out_channels": 4, "kernel": 5}, )"
                                           R"({"type": "relu"}, {"type": "maxpool2d", "kernel": 2}, {"type": "flatten"}, {"type": "linear", "out_features": 10})");
    return o;
  }();
  return d;
}

}  // namespace ember::nn
