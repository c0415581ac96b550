// Op "conv2d": 2D convolution, PyTorch's Conv2d (weight [K, C/G, R, S], bias [K]), grouped and
// depthwise included; its paths (direct, im2col + GEMM, fused with ReLU and a 2x2 max-pool,
// depthwise) are chosen in src/ops/conv2d.cpp.
#include "nn/op_table.h"

namespace ember::nn {

const OpDesc& op_desc_conv2d() {
  static const OpDesc d = [] {
    OpDesc o = make_op(LayerKind::Conv2d, "conv2d", "2D convolution [C, H, W] -> [K, P, Q] (PyTorch Conv2d)");
    o.onnx = {"Conv"};
    o.layouts = {"nchw"};
    o.dtypes = all_dtypes();
    o.fields = {
        {"out_channels", "int", nullptr,
         [](const JsonFields& r, const json& v, const std::string& p, LayerSpec& s) { s.out = r.integer(v, p, 1, 1 << 20); },
         [](const LayerSpec& s, json& j) { j["out_channels"] = s.out; }},
        kernel_field(true), stride_field("1"), padding_field(true, false),
        {"groups", "int", "1",
         [](const JsonFields& r, const json& v, const std::string& p, LayerSpec& s) { s.groups = r.integer(v, p, 1, 1 << 20); },
         [](const LayerSpec& s, json& j) { j["groups"] = s.groups; }},
        bias_field(), init_field()};
    o.params = weight_and_bias;
    o.example = example_model("conv2d", R"({"type": "conv2d", "out_channels": 8, "kernel": 5, "padding": 2}, {"type": "relu"}, )"
                                        R"({"type": "maxpool2d", "kernel": 2}, {"type": "flatten"}, {"type": "linear", "out_features": 10})");
    return o;
  }();
  return d;
}

}  // namespace ember::nn
