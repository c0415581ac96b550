// Op "droppath": stochastic depth (torchvision's StochasticDepth, mode "row"): in training each
// sample's input is dropped with probability "p" and the rest scaled by 1 / (1 - p); identity in eval.
#include "nn/op_table.h"

namespace ember::nn {

const OpDesc& op_desc_droppath() {
  static const OpDesc d = [] {
    OpDesc o = make_op(LayerKind::DropPath, "droppath", "stochastic depth: drops a sample's input with probability p in training (torchvision StochasticDepth)");
    o.onnx = {"Identity"};
    o.layouts = {"nchw", "flat"};
    o.dtypes = fp_dtypes();
    o.fields = {{"p", "number in [0, 1)", "0",
                 [](const JsonFields& r, const json& v, const std::string& path, LayerSpec& s) {
                   s.drop_prob = r.number(v, path, 0, 1, false, true, "a probability in [0, 1)");
                 },
                 [](const LayerSpec& s, json& j) { j["p"] = s.drop_prob; }}};
    o.example = example_model("droppath", R"({"type": "conv2d", "name": "a", "out_channels": 4, "kernel": 3, "padding": 1}, )"
                                          R"({"type": "relu"}, {"type": "droppath", "name": "d", "p": 0.2}, {"type": "add", "inputs": ["a", "d"]}, )"
                                          R"({"type": "maxpool2d", "kernel": 2}, {"type": "flatten"}, {"type": "linear", "out_features": 10})");
    return o;
  }();
  return d;
}

}  // namespace ember::nn
