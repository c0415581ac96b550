// Op "add": the elementwise sum of 2 to 8 earlier layers' outputs (a residual connection); "inputs" names them (layer names, or "input").
#include "nn/op_table.h"

namespace ember::nn {

const OpDesc& op_desc_add() {
  static const OpDesc d = [] {
    OpDesc o = make_op(LayerKind::Add, "add", "the elementwise sum of 2 to 8 earlier layers' outputs (a residual connection)");
    o.min_inputs = 2, o.max_inputs = 8;
    o.onnx = {"Sum"};
    o.layouts = {"nchw", "flat"};
    o.dtypes = fp_dtypes();
    o.example = example_model("add", R"({"type": "conv2d", "name": "a", "out_channels": 4, "kernel": 3, "padding": 1}, )"
                                    R"({"type": "relu", "name": "b"}, {"type": "add", "inputs": ["a", "b"]}, )"
                                    R"({"type": "maxpool2d", "kernel": 2}, {"type": "flatten"}, {"type": "linear", "out_features": 10})");
    return o;
  }();
  return d;
}

}  // namespace ember::nn
