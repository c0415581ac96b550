// Op "layernorm2d": torchvision's LayerNorm2d, a LayerNorm over the channels at each position of
// [C, H, W] with a per-channel scale and shift ("affine", default true).
#include "nn/op_table.h"

namespace ember::nn {

OpField eps_field();        // layernorm.cpp
OpField affine_field();
std::vector<OpParam> norm_params(const LayerSpec& s);

const OpDesc& op_desc_layernorm2d() {
  static const OpDesc d = [] {
    OpDesc o = make_op(LayerKind::LayerNorm2d, "layernorm2d", "normalises over the channels at each position (torchvision LayerNorm2d)");
    o.onnx = {"Transpose", "LayerNormalization"};
    o.layouts = {"nchw"};
    o.dtypes = fp_dtypes();
    o.fields = {eps_field(), affine_field()};
    o.params = norm_params;
    o.example = example_model("layernorm2d", R"({"type": "conv2d", "out_channels": 8, "kernel": 4, "stride": 4}, {"type": "layernorm2d"}, )"
                                             R"({"type": "relu"}, {"type": "flatten"}, {"type": "linear", "out_features": 10})");
    return o;
  }();
  return d;
}

}  // namespace ember::nn
