// Op "layerscale": a per-channel learned scale (torchvision's CNBlock.layer_scale, [C, 1, 1]),
// every scale starting at "init_value" (default 1e-6).
#include <cmath>

#include "nn/op_table.h"

namespace ember::nn {

const OpDesc& op_desc_layerscale() {
  static const OpDesc d = [] {
    OpDesc o = make_op(LayerKind::LayerScale, "layerscale", "multiplies each channel by a learned scale (torchvision CNBlock.layer_scale)");
    o.onnx = {"Mul"};
    o.layouts = {"nchw", "flat"};
    o.dtypes = fp_dtypes();
    o.fields = {{"init_value", "number", "1e-6",
                 [](const JsonFields& r, const json& v, const std::string& p, LayerSpec& s) {
                   s.scale_init = r.number(v, p, -HUGE_VAL, HUGE_VAL, false, false, "a finite number");
                 },
                 [](const LayerSpec& s, json& j) { j["init_value"] = s.scale_init; }}};
    o.params = [](const LayerSpec&) { return std::vector<OpParam>{{"layer_scale", ParamRole::layer_scale}}; };
    o.example = example_model("layerscale", R"({"type": "conv2d", "out_channels": 4, "kernel": 3, "padding": 1}, {"type": "relu"}, )"
                                            R"({"type": "layerscale", "init_value": 0.5}, {"type": "maxpool2d", "kernel": 2}, )"
                                            R"({"type": "flatten"}, {"type": "linear", "out_features": 10})");
    return o;
  }();
  return d;
}

}  // namespace ember::nn
