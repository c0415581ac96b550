// Op "linear": PyTorch's Linear (weight [K, C], bias [K]) over a sample's flattened features, or
// with "over": "channels" over the channels at each position of [C, H, W] (torchvision's
// channels-last Linear in a ConvNeXt block).
#include "fs/json_read.h"
#include "nn/op_table.h"

namespace ember::nn {

const OpDesc& op_desc_linear() {
  static const OpDesc d = [] {
    OpDesc o = make_op(LayerKind::Linear, "linear", "fully connected [D] -> [K], or over the channels of [C, H, W] (PyTorch Linear)");
    o.onnx = {"Gemm", "Conv"};
    o.layouts = {"flat", "nchw"};
    o.dtypes = all_dtypes();
    o.fields = {
        {"out_features", "int", nullptr,
         [](const JsonFields& r, const json& v, const std::string& p, LayerSpec& s) { s.out = r.integer(v, p, 1, 1 << 20); },
         [](const LayerSpec& s, json& j) { j["out_features"] = s.out; }},
        {"over", "\"features\" or \"channels\"", "\"features\"",
         [](const JsonFields& r, const json& v, const std::string& p, LayerSpec& s) {
           if (v != "features" && v != "channels") r.fail(p, "expected \"features\" or \"channels\", found " + json_brief(v));
           s.over_channels = v == "channels";
         },
         [](const LayerSpec& s, json& j) {
           if (s.over_channels) j["over"] = "channels";
         }},
        bias_field(), init_field()};
    o.params = weight_and_bias;
    o.example = example_model("linear", R"({"type": "flatten"}, {"type": "linear", "out_features": 32}, {"type": "relu"}, )"
                                        R"({"type": "linear", "out_features": 10})");
    return o;
  }();
  return d;
}

}  // namespace ember::nn
