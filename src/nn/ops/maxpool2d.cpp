// Op "maxpool2d": the largest value of each window (PyTorch MaxPool2d).
// Its stride defaults to its kernel, as PyTorch's does.
#include "nn/op_table.h"

namespace ember::nn {

const OpDesc& op_desc_maxpool2d() {
  static const OpDesc d = [] {
    OpDesc o = make_op(LayerKind::MaxPool2d, "maxpool2d", "the largest value of each window (PyTorch MaxPool2d)");
    o.onnx = {"MaxPool"};
    o.layouts = {"nchw"};
    o.dtypes = fp_dtypes();
    OpField kernel = kernel_field(true);  // also the stride, unless "stride" is given
    kernel.read = [](const JsonFields& r, const json& v, const std::string& p, LayerSpec& s) {
      r.pair(v, p, 1, 4096, &s.kernel_h, &s.kernel_w);
      s.stride_h = s.kernel_h, s.stride_w = s.kernel_w;
    };
    o.fields = {kernel, stride_field("the kernel"), padding_field(false, false)};
    o.example = example_model("maxpool2d", R"({"type": "conv2d", "out_channels": 4, "kernel": 3, "padding": 1}, {"type": "relu"}, )"
                                           R"({"type": "maxpool2d", "kernel": 2}, {"type": "flatten"}, {"type": "linear", "out_features": 10})");
    return o;
  }();
  return d;
}

}  // namespace ember::nn
