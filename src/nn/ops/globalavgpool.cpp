// Op "globalavgpool": the mean over each channel's positions, [C, H, W] -> [C] (PyTorch's
// AdaptiveAvgPool2d(1); its output is flat [C, 1, 1]).
#include "nn/op_table.h"

namespace ember::nn {

const OpDesc& op_desc_globalavgpool() {
  static const OpDesc d = [] {
    OpDesc o = make_op(LayerKind::GlobalAvgPool, "globalavgpool", "mean over each channel's positions, [C, H, W] -> [C] (AdaptiveAvgPool2d(1))");
    o.onnx = {"GlobalAveragePool"};
    o.layouts = {"nchw"};
    o.dtypes = fp_dtypes();
    o.example = example_model("globalavgpool", R"({"type": "conv2d", "out_channels": 16, "kernel": 24}, {"type": "relu"}, )"
                                               R"({"type": "globalavgpool"}, {"type": "flatten"}, {"type": "linear", "out_features": 10})");
    return o;
  }();
  return d;
}

}  // namespace ember::nn
