// Op "flatten": [C, H, W] -> [C * H * W]; its output is its input's storage (no copy).
#include "nn/op_table.h"

namespace ember::nn {

const OpDesc& op_desc_flatten() {
  static const OpDesc d = [] {
    OpDesc o = make_op(LayerKind::Flatten, "flatten", "[C, H, W] -> [C * H * W], no copy (PyTorch Flatten)");
    o.onnx = {"Flatten"};
    o.layouts = {"nchw", "flat"};
    o.dtypes = fp_dtypes();
    o.example = example_model("flatten", R"({"type": "flatten"}, {"type": "linear", "out_features": 10})");
    return o;
  }();
  return d;
}

}  // namespace ember::nn
