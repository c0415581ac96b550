// Op "concat": 2 to 8 earlier layers' outputs joined over channels; "inputs" names them (layer names, or "input").
#include "nn/op_table.h"

namespace ember::nn {

const OpDesc& op_desc_concat() {
  static const OpDesc d = [] {
    OpDesc o = make_op(LayerKind::Concat, "concat", "2 to 8 earlier layers' outputs joined over channels");
    o.min_inputs = 2, o.max_inputs = 8;
    o.onnx = {"Concat"};
    o.layouts = {"nchw", "flat"};
    o.dtypes = fp_dtypes();
    o.example = example_model("concat", R"({"type": "conv2d", "name": "a", "out_channels": 4, "kernel": 3, "padding": 1}, )"
                                    R"({"type": "relu", "name": "b"}, {"type": "concat", "inputs": ["a", "b"]}, )"
                                    R"({"type": "maxpool2d", "kernel": 2}, {"type": "flatten"}, {"type": "linear", "out_features": 10})");
    return o;
  }();
  return d;
}

}  // namespace ember::nn
