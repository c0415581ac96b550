// Op "softmax": probabilities over a sample's features; a model that ends in it takes the
// "cross_entropy" loss (softmax_cross_entropy would apply softmax twice).
#include "nn/op_table.h"

namespace ember::nn {

const OpDesc& op_desc_softmax() {
  static const OpDesc d = [] {
    OpDesc o = make_op(LayerKind::Softmax, "softmax", "exp(x) / sum(exp(x)) over a sample's features (PyTorch Softmax(dim=1))");
    o.onnx = {"Softmax"};
    o.layouts = {"flat"};
    o.dtypes = fp_dtypes();
    o.example = R"({"name": "example-softmax", "input": [1, 28, 28], "classes": 10, "loss": "cross_entropy", )"
                R"("layers": [{"type": "flatten"}, {"type": "linear", "out_features": 10}, {"type": "softmax"}]})";
    return o;
  }();
  return d;
}

}  // namespace ember::nn
